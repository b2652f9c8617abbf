//! Load driver for the gateway.
//!
//! ```text
//! cargo build --release && cargo run --release --example load -- \
//!     --sessions 10 --turns 100 [--words 8] [--pings 2000] [--cpu N|none] [--idle-sessions 10000] \
//!     [--state-db SESSIONS] [--bin PATH] [--ping-every MS] [--mix text|tools]
//! ```
//!
//! While the turns run, a `ping` goes out every `--ping-every` milliseconds (one at a time) and
//! its round trip is reported: how long control traffic waits behind a saturated loop. `--mix
//! tools` makes a third of the turns run `echo` and a third `sleep 0.05` through the terminal.
//!
//! `--state-db 50000` starts the gateway on a long-time user's state.db (50,000 sessions of 20
//! messages, built deterministically by `benches/common/bigdb.rs` and cached under
//! `target/bench-state/`), so every figure below is taken against it; `cargo bench --bench
//! big_db` compares request by request.
//!
//! It spawns the gateway (default: `tui-gateway` next to this example's directory, i.e.
//! `target/release/tui-gateway`) with a fresh temporary `HERMES_HOME`, and measures: time from spawn
//! to `gateway.ready`; `ping` round trips against a bare pipe round trip through `cat` (the driver,
//! the gateway and `cat` all pinned to one CPU, so neither figure depends on waking another CPU),
//! and their ratio; N sessions
//! running M turns each, all concurrently (per-turn latency from writing `prompt.submit` to reading
//! `message.complete`, throughput); K idle sessions; the gateway's RSS along the way; and the time it
//! takes to exit once its stdin is closed. The offline model answers every prompt with a few words.

// The bench reads and writes its own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

#[path = "../benches/common/bigdb.rs"]
mod bigdb;
#[path = "../benches/common/measure.rs"]
mod measure;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tui_gateway::client::{Client, ClientError, event_type};

use measure::{
    STALL, allowed_cpus, create_sessions, fmt_bytes, fmt_duration, fmt_kb, fmt_percentiles,
    memory_kb, percentile, pin_to_cpu, ping_round_trips, pipe_round_trips, spawn_gateway, unpin,
};

const USAGE: &str = "\
usage: load [--sessions N] [--turns M] [--words W] [--pings P] [--cpu C|none] [--idle-sessions K]
            [--state-db SESSIONS] [--bin PATH] [--ping-every MS] [--mix text|tools]
            [--relay on|off]

  --sessions N       concurrent sessions that run turns (default 10)
  --turns M          turns per session (default 100)
  --words W          words per prompt (default 8)
  --pings P          sequential pings for the round-trip measurement (default 2000)
  --cpu C|none       the CPU the driver, the gateway and cat share while pings run (default: the
                     first one this process may use); none: leave them unpinned
  --idle-sessions K  sessions created without turns after the load, to measure memory (default 0)
  --state-db S       start on a state.db of S sessions x 20 messages (built once, cached)
  --bin PATH         gateway binary (default: target/<profile>/tui-gateway)
  --ping-every MS    while turns run, a ping every MS milliseconds, one at a time (default 10;
                     0: none)
  --mix text|tools   text: every turn a plain reply (default); tools: a third of the turns run
                     `echo`, a third `sleep 0.05` through the terminal tool
  --relay on|off     also ping a persistent gateway through the relay the TUI would spawn
                     (driver, relay and gateway on the same CPU), against the direct pings";

/// Requests kept in flight while creating sessions.
const CREATE_WINDOW: usize = 128;

struct Options {
    sessions: usize,
    turns: usize,
    words: usize,
    pings: usize,
    /// Where the round trips run; `None`: unpinned.
    cpu: Option<usize>,
    idle_sessions: usize,
    /// Sessions of the synthetic state.db to start on (0: an empty one).
    state_db: usize,
    bin: PathBuf,
    /// Between pings sent while the turns run; `None`: no pings then.
    ping_every: Option<Duration>,
    /// Whether turns also run commands.
    tools: bool,
    /// Whether pings also go through a relay to a persistent gateway.
    relay: bool,
}

fn main() {
    let options = match parse_options(std::env::args().skip(1).collect()) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return;
        }
        Err(message) => {
            eprintln!("error: {message}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let home = temp_home();
    let result = run(&options, &home);
    match result {
        Ok(()) => {
            let _ = fs::remove_dir_all(&home);
        }
        Err(message) => {
            eprintln!("error: {message}");
            eprintln!(
                "(gateway home kept for inspection: {}; its stderr is in gateway.stderr)",
                home.display()
            );
            std::process::exit(1);
        }
    }
}

fn parse_options(args: Vec<String>) -> Result<Option<Options>, String> {
    let mut options = Options {
        sessions: 10,
        turns: 100,
        words: 8,
        pings: 2000,
        cpu: allowed_cpus()?.first().copied(),
        idle_sessions: 0,
        state_db: 0,
        bin: default_bin(),
        ping_every: Some(Duration::from_millis(10)),
        tools: false,
        relay: false,
    };
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--sessions" => options.sessions = number()?,
            "--turns" => options.turns = number()?,
            "--words" => options.words = number()?.max(1),
            "--pings" => options.pings = number()?,
            "--cpu" if value == "none" => options.cpu = None,
            "--cpu" => options.cpu = Some(number()?),
            "--idle-sessions" => options.idle_sessions = number()?,
            "--state-db" => options.state_db = number()?,
            "--ping-every" => {
                options.ping_every =
                    Some(Duration::from_millis(number()? as u64)).filter(|d| !d.is_zero())
            }
            "--relay" => options.relay = value == "on",
            "--mix" => {
                options.tools = match value.as_str() {
                    "text" => false,
                    "tools" => true,
                    _ => return Err(format!("--mix: text or tools, not {value}")),
                }
            }
            // Absolute, because the gateway runs with its home as working directory.
            "--bin" => {
                options.bin = std::path::absolute(&value).map_err(|e| format!("--bin: {e}"))?
            }
            _ => return Err(format!("unknown option: {flag}")),
        }
    }
    Ok(Some(options))
}

/// `target/<profile>/examples/load` → `target/<profile>/tui-gateway`.
fn default_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    profile_dir.join("tui-gateway")
}

fn temp_home() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "tui-gateway-load-{}-{nanos:08x}",
        std::process::id()
    ))
}

fn run(options: &Options, home: &Path) -> Result<(), String> {
    fs::create_dir_all(home).map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    if options.state_db > 0 {
        let shape = bigdb::Shape {
            sessions: options.state_db,
            per_session: 20,
        };
        let (db, built) = bigdb::cached(&shape)?;
        fs::copy(&db, home.join("state.db")).map_err(|e| e.to_string())?;
        bigdb::settle(&home.join("state.db"))?;
        report(
            "state.db",
            format!(
                "{} sessions x 20 messages{}",
                shape.sessions,
                built.map_or(String::new(), |s| format!(" (built in {s:.1} s)"))
            ),
        );
    }
    report(
        "gateway",
        format!("{} (home {})", options.bin.display(), home.display()),
    );
    // Dropping the client on an error kills the gateway.
    let spawned = Instant::now();
    let client = spawn_gateway(&options.bin, home)?;
    report("startup to gateway.ready", fmt_duration(spawned.elapsed()));
    let pid = client.pid().ok_or("no gateway process")?;
    let idle = memory(pid)?;
    report("rss at ready", fmt_memory(idle));
    let mut driver = Driver {
        client,
        pid,
        peak_rss_kb: idle.0,
        last_frame: Instant::now(),
    };

    if options.pings > 0 {
        round_trips(&mut driver.client, pid, options)?;
    }

    if options.sessions > 0 && options.turns > 0 {
        run_turns(&mut driver, options)?;
        let after = memory(pid)?;
        report("rss after load", fmt_memory(after));
        report(
            "rss peak during load (sampled)",
            fmt_kb(driver.peak_rss_kb.max(after.0)),
        );
    }

    if options.idle_sessions > 0 {
        let before = memory(pid)?;
        let start = Instant::now();
        let ids = create_sessions(&mut driver.client, options.idle_sessions, CREATE_WINDOW)?;
        let elapsed = start.elapsed();
        report(
            "idle sessions created",
            format!(
                "{} in {} ({:.0}/s)",
                ids.len(),
                fmt_duration(elapsed),
                ids.len() as f64 / elapsed.as_secs_f64()
            ),
        );
        let after = memory(pid)?;
        report(
            &format!("rss with +{} idle sessions", ids.len()),
            fmt_memory(after),
        );
        let per_session = after.0.saturating_sub(before.0) as f64 * 1024.0 / ids.len() as f64;
        report(
            "rss per idle session",
            format!("~{}", fmt_bytes(per_session)),
        );
    }

    let db_bytes: u64 = ["state.db", "state.db-wal"]
        .iter()
        .filter_map(|name| fs::metadata(home.join(name)).ok())
        .map(|meta| meta.len())
        .sum();
    report("state.db + wal size", fmt_bytes(db_bytes as f64));

    // Shutdown: closing stdin is a real EOF; the gateway flushes and exits.
    report("rss before exit", fmt_memory(memory(pid)?));
    if let Some(parts) = rss_parts(pid, &options.bin) {
        report("rss before exit, by kind", parts);
    }
    let closed = Instant::now();
    let status = driver.client.close(closed + Duration::from_secs(10));
    let exit_time = closed.elapsed();
    match status {
        Ok(status) => {
            report(
                "exit after stdin close",
                format!("{} ({status})", fmt_duration(exit_time)),
            );
            if !status.success() {
                return Err(format!("the gateway exited with {status}"));
            }
            Ok(())
        }
        Err(_) => Err("the gateway did not exit within 10 s of stdin closing".to_string()),
    }
}

/// Sequential `ping` round trips through the gateway, then the same through `cat`, with the
/// driver, the gateway and `cat` on one CPU (unless `--cpu none`); and their ratio.
fn round_trips(client: &mut Client, pid: u32, options: &Options) -> Result<(), String> {
    let warmup = (options.pings / 10).max(1);
    let pinned = match options.cpu {
        Some(cpu) => Some((pin_to_cpu(0, cpu)?, pin_to_cpu(pid, cpu)?)),
        None => None,
    };
    let pings = ping_round_trips(client, warmup, options.pings, |_| {});
    let bare = pipe_round_trips(warmup, options.pings, options.cpu);
    if let Some((driver, gateway)) = &pinned {
        unpin(0, driver)?;
        unpin(pid, gateway)?;
    }
    let (mut pings, mut bare) = (pings?, bare?);
    let placement = match options.cpu {
        Some(cpu) => format!("driver, gateway and cat on cpu {cpu}"),
        None => "unpinned".to_string(),
    };
    report("round trips", placement);
    report("ping round trip", fmt_percentiles(&mut pings, "pings"));
    report(
        "bare pipe round trip (cat)",
        fmt_percentiles(&mut bare, "round trips"),
    );
    let ratio =
        |p| percentile(&pings, p).as_secs_f64() / percentile(&bare, p).as_secs_f64().max(1e-9);
    report(
        "ping / bare pipe",
        format!("p50 {:.2}x  p99 {:.2}x", ratio(50.0), ratio(99.0)),
    );
    if options.relay {
        let mut relayed = relay_round_trips(options, warmup)?;
        report(
            "ping through the relay",
            fmt_percentiles(&mut relayed, "pings"),
        );
        let ratio = |p| {
            percentile(&relayed, p).as_secs_f64() / percentile(&pings, p).as_secs_f64().max(1e-9)
        };
        report(
            "relay / direct ping",
            format!("p50 {:.2}x  p99 {:.2}x", ratio(50.0), ratio(99.0)),
        );
    }
    Ok(())
}

/// Pings through a relay to a persistent gateway of a home of its own, the driver, the relay
/// and the gateway pinned as the direct pings were; the gateway is ended after.
fn relay_round_trips(options: &Options, warmup: usize) -> Result<Vec<Duration>, String> {
    let home = temp_home();
    fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    let mut client = measure::spawn_gateway_with(
        &options.bin,
        &home,
        &[("HERMES_TUI_GATEWAY_PERSISTENT", "on")],
    )?;
    let relay = client.pid().ok_or("no relay process")?;
    let daemon: u32 = fs::read_to_string(home.join("tui-gateway.lock"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or("no persistent gateway pid in tui-gateway.lock")?;
    let pinned = match options.cpu {
        Some(cpu) => Some((
            pin_to_cpu(0, cpu)?,
            pin_to_cpu(relay, cpu)?,
            pin_to_cpu(daemon, cpu)?,
        )),
        None => None,
    };
    let pings = ping_round_trips(&mut client, warmup, options.pings, |_| {});
    if let Some((driver, relay_set, daemon_set)) = &pinned {
        unpin(0, driver)?;
        unpin(relay, relay_set)?;
        unpin(daemon, daemon_set)?;
    }
    let _ = client.close(Instant::now() + Duration::from_secs(10));
    // SAFETY: kill(2) of the gateway this run started, named by its home's lock file.
    unsafe {
        libc::kill(daemon as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{daemon}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = fs::remove_dir_all(&home);
    pings
}

fn run_turns(client: &mut Driver, options: &Options) -> Result<(), String> {
    let start = Instant::now();
    let ids = create_sessions(&mut client.client, options.sessions, CREATE_WINDOW)?;
    report(
        "sessions created",
        format!("{} in {}", ids.len(), fmt_duration(start.elapsed())),
    );

    struct State {
        done: usize,
        sent_at: Instant,
        first_delta: Option<Duration>,
    }
    let index: HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let mut states: Vec<State> = Vec::with_capacity(ids.len());
    let mut submits: HashMap<u64, usize> = HashMap::new();
    let mut latencies = Vec::with_capacity(options.sessions * options.turns);
    let mut first_deltas = Vec::with_capacity(options.sessions * options.turns);
    let mut errors = 0usize;
    let mut first_error = None;
    let total = ids.len() * options.turns;
    let mut finished = 0usize;
    // The ping in flight (its id and when it left), when the next one leaves, the round trips.
    let mut ping: Option<(u64, Instant)> = None;
    let mut next_ping = Instant::now();
    let mut ping_waits = Vec::new();

    let load_start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let (request, sent_at) = client.submit(id, &turn_text(i, 0, options))?;
        submits.insert(request, i);
        states.push(State {
            done: 0,
            sent_at,
            first_delta: None,
        });
    }
    let mut last_sample = Instant::now();
    while finished < total {
        if last_sample.elapsed() >= Duration::from_millis(50) {
            client.sample_rss();
            last_sample = Instant::now();
        }
        if let Some(every) = options.ping_every
            && ping.is_none()
            && Instant::now() >= next_ping
        {
            let at = Instant::now();
            let id = client.client.send_request("ping", json!({}))?;
            ping = Some((id.as_u64().unwrap_or(0), at));
            next_ping = at + every;
        }
        let (at, frame) = client
            .recv(Duration::from_millis(50))
            .map_err(|e| format!("{e} ({finished} of {total} turns done)"))?;
        let Some(frame) = frame else { continue };
        // The session whose turn just ended, if any.
        let mut ended = None;
        if let Some(kind) = event_type(&frame) {
            let params = &frame["params"];
            let Some(&i) = params["session_id"].as_str().and_then(|id| index.get(id)) else {
                continue;
            };
            match kind {
                "message.delta" if states[i].first_delta.is_none() => {
                    states[i].first_delta = Some(at - states[i].sent_at);
                }
                "message.complete" => {
                    let status = params["payload"]["status"].as_str().unwrap_or("?");
                    if status == "complete" {
                        latencies.push(at - states[i].sent_at);
                        first_deltas.extend(states[i].first_delta);
                    } else {
                        errors += 1;
                        first_error.get_or_insert_with(|| {
                            format!("turn ended {status}: {}", params["payload"])
                        });
                    }
                    ended = Some(i);
                }
                _ => {}
            }
        } else if let Some(id) = frame.get("id").and_then(Value::as_u64)
            && let Some((_, sent)) = ping.filter(|(ping_id, _)| *ping_id == id)
        {
            ping_waits.push(at - sent);
            ping = None;
        } else if let Some(id) = frame.get("id").and_then(Value::as_u64)
            && let Some(i) = submits.remove(&id)
            && let Some(error) = frame.get("error")
        {
            errors += 1;
            first_error.get_or_insert_with(|| format!("prompt.submit failed: {error}"));
            ended = Some(i);
        }
        if let Some(i) = ended {
            finished += 1;
            states[i].done += 1;
            if states[i].done < options.turns {
                let (request, sent_at) =
                    client.submit(&ids[i], &turn_text(i, states[i].done, options))?;
                submits.insert(request, i);
                states[i].sent_at = sent_at;
                states[i].first_delta = None;
            }
        }
    }
    let elapsed = load_start.elapsed();
    report(
        "turns",
        format!(
            "{total} ({} sessions x {} turns, {} words per prompt{}), {errors} errors",
            ids.len(),
            options.turns,
            options.words,
            if options.tools {
                "; a third echo, a third sleep 0.05"
            } else {
                ""
            }
        ),
    );
    if let Some(error) = first_error {
        report("first error", error);
    }
    report(
        "turn latency (submit to complete)",
        fmt_percentiles(&mut latencies, "turns"),
    );
    report(
        "first delta latency",
        fmt_percentiles(&mut first_deltas, "turns"),
    );
    if !ping_waits.is_empty() {
        report(
            "ping round trip during the turns",
            fmt_percentiles(&mut ping_waits, "pings"),
        );
    }
    report(
        "throughput",
        format!(
            "{:.0} turns/s ({total} turns in {})",
            total as f64 / elapsed.as_secs_f64(),
            fmt_duration(elapsed)
        ),
    );
    Ok(())
}

/// Turn `turn` of session `session`: a prompt, or with `--mix tools` for two thirds of the
/// turns a command for the terminal tool.
fn turn_text(session: usize, turn: usize, options: &Options) -> String {
    match (options.tools, (session + turn) % 3) {
        (true, 0) => format!("$ echo s{session}t{turn}"),
        (true, 1) => "$ sleep 0.05".to_string(),
        _ => prompt_text(session, turn, options.words),
    }
}

/// A prompt of `words` words that never starts with `$ ` or `!` (those would run a command).
fn prompt_text(session: usize, turn: usize, words: usize) -> String {
    const VOCABULARY: [&str; 8] = [
        "please",
        "summarise",
        "the",
        "state",
        "of",
        "session",
        "turn",
        "now",
    ];
    let mut text = format!("s{session}t{turn}");
    for i in 1..words {
        text.push(' ');
        text.push_str(VOCABULARY[(i + turn) % VOCABULARY.len()]);
    }
    text
}

/// The gateway under load, its RSS sampled along the way.
struct Driver {
    client: Client,
    pid: u32,
    peak_rss_kb: u64,
    /// When the last frame arrived (for stall detection).
    last_frame: Instant,
}

impl Driver {
    fn submit(&mut self, session_id: &str, text: &str) -> Result<(u64, Instant), String> {
        let at = Instant::now();
        let id = self.client.send_request(
            "prompt.submit",
            json!({"session_id": session_id, "text": text}),
        )?;
        Ok((id.as_u64().unwrap_or(0), at))
    }

    /// The next frame with the instant it was read, or `None` after `wait` without one; an error
    /// when the gateway is gone or has said nothing for `STALL`.
    fn recv(&mut self, wait: Duration) -> Result<(Instant, Option<Value>), String> {
        match self.client.next_frame(Instant::now() + wait) {
            Ok(frame) => {
                self.last_frame = Instant::now();
                Ok((self.last_frame, Some(frame)))
            }
            Err(ClientError::Timeout) => {
                let idle = self.last_frame.elapsed();
                if idle > STALL {
                    return Err(format!(
                        "no frame from the gateway for {}",
                        fmt_duration(idle)
                    ));
                }
                Ok((Instant::now(), None))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    fn sample_rss(&mut self) {
        if let Ok((rss_kb, _)) = memory(self.pid) {
            self.peak_rss_kb = self.peak_rss_kb.max(rss_kb);
        }
    }
}

/// VmRSS and VmHWM of a process, in KiB.
fn memory(pid: u32) -> Result<(u64, u64), String> {
    memory_kb(pid).ok_or_else(|| format!("cannot read /proc/{pid}/status"))
}

/// Where the resident pages are (`/proc/PID/smaps`): the program file's mappings (code and
/// read-only data, shared with the page cache), other files (libc, the loader), anonymous.
fn rss_parts(pid: u32, bin: &Path) -> Option<String> {
    let smaps = fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let bin = fs::canonicalize(bin).ok()?;
    let (mut program, mut program_code, mut files, mut anon) = (0u64, 0u64, 0u64, 0u64);
    let (mut path, mut exec) = (String::new(), false);
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if first.contains('-') && !first.ends_with(':') {
            exec = fields.next().is_some_and(|perms| perms.contains('x'));
            path = fields.nth(3).unwrap_or_default().to_string();
            continue;
        }
        let kb: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        match first {
            "Rss:" if Path::new(&path) == bin => {
                program += kb;
                if exec {
                    program_code += kb;
                }
            }
            "Rss:" => files += kb,
            "Anonymous:" => {
                anon += kb;
                if Path::new(&path) != bin {
                    files -= kb.min(files);
                } else {
                    program -= kb.min(program);
                }
            }
            _ => {}
        }
    }
    Some(format!(
        "program file {} (code {}), other files {}, anonymous {}",
        fmt_kb(program),
        fmt_kb(program_code),
        fmt_kb(files),
        fmt_kb(anon)
    ))
}

fn fmt_memory((rss_kb, hwm_kb): (u64, u64)) -> String {
    format!("{} (VmHWM {})", fmt_kb(rss_kb), fmt_kb(hwm_kb))
}

fn report(metric: &str, value: impl std::fmt::Display) {
    println!("{metric:<36} {value}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use measure::status_kb;

    #[test]
    fn reads_proc_status_values() {
        let status = "Name:\ttui-gateway\nVmHWM:\t    5120 kB\nVmRSS:\t    4096 kB\n";
        assert_eq!(status_kb(status, "VmRSS"), Some(4096));
        assert_eq!(status_kb(status, "VmHWM"), Some(5120));
        assert_eq!(status_kb(status, "VmSwap"), None);
    }

    #[test]
    fn takes_nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&samples[..1], 99.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn builds_prompts_of_the_requested_length() {
        assert_eq!(prompt_text(3, 4, 1), "s3t4");
        assert_eq!(prompt_text(0, 0, 8).split(' ').count(), 8);
        assert!(!prompt_text(0, 0, 3).starts_with(['$', '!']));
    }
}
