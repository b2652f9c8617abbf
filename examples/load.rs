//! Load driver for the gateway.
//!
//! ```text
//! cargo build --release && cargo run --release --example load -- \
//!     --sessions 10 --turns 100 [--words 8] [--pings 2000] [--idle-sessions 10000] [--bin PATH]
//! ```
//!
//! It spawns the gateway (default: `tui-gateway` next to this example's directory, i.e.
//! `target/release/tui-gateway`) with a fresh temporary `HERMES_HOME`, and measures: time from spawn
//! to `gateway.ready`; `ping` round trips against a bare pipe round trip through `cat`; N sessions
//! running M turns each, all concurrently (per-turn latency from writing `prompt.submit` to reading
//! `message.complete`, throughput); K idle sessions; the gateway's RSS along the way; and the time it
//! takes to exit once its stdin is closed. The offline model answers every prompt with a few words.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tui_gateway::cli::lines::DeadlineLines;

const USAGE: &str = "\
usage: load [--sessions N] [--turns M] [--words W] [--pings P] [--idle-sessions K] [--bin PATH]

  --sessions N       concurrent sessions that run turns (default 10)
  --turns M          turns per session (default 100)
  --words W          words per prompt (default 8)
  --pings P          sequential pings for the round-trip measurement (default 2000)
  --idle-sessions K  sessions created without turns after the load, to measure memory (default 0)
  --bin PATH         gateway binary (default: target/<profile>/tui-gateway)";

/// Longest wait for any single expected frame before the driver gives up.
const STALL: Duration = Duration::from_secs(30);
/// Requests kept in flight while creating sessions.
const CREATE_WINDOW: usize = 128;

struct Options {
    sessions: usize,
    turns: usize,
    words: usize,
    pings: usize,
    idle_sessions: usize,
    bin: PathBuf,
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
        idle_sessions: 0,
        bin: default_bin(),
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
            "--idle-sessions" => options.idle_sessions = number()?,
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
    let stderr_log = fs::File::create(home.join("gateway.stderr")).map_err(|e| e.to_string())?;

    report(
        "gateway",
        format!("{} (home {})", options.bin.display(), home.display()),
    );
    let spawned = Instant::now();
    let mut child = Command::new(&options.bin)
        .args(["-m", "tui_gateway.entry"])
        .env("HERMES_HOME", home)
        .current_dir(home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr_log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", options.bin.display()))?;
    let result = drive(options, home, &mut child, spawned);
    if result.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    result
}

fn drive(
    options: &Options,
    home: &Path,
    child: &mut Child,
    spawned: Instant,
) -> Result<(), String> {
    let pid = child.id();
    let mut stdin = child.stdin.take().ok_or("no stdin pipe")?;
    let mut lines = DeadlineLines::new(child.stdout.take().ok_or("no stdout pipe")?);

    // Start-up.
    loop {
        let frame = lines.next_frame(spawned + STALL)?;
        if event_type(&frame) == Some("gateway.ready") {
            break;
        }
    }
    report("startup to gateway.ready", fmt_duration(spawned.elapsed()));
    let idle = Memory::read(pid)?;
    report("rss at ready", idle.to_string());

    // Round trips: ping through the gateway, then the same through a bare pipe.
    if options.pings > 0 {
        let warmup = (options.pings / 10).max(1);
        let mut samples = ping_round_trips(&mut stdin, &mut lines, warmup, options.pings)?;
        report("ping round trip", fmt_percentiles(&mut samples, "pings"));
        let sample_line = request_line(1_000_000, "ping", json!({}));
        let mut bare = pipe_round_trips(&sample_line, warmup, options.pings)?;
        report(
            "bare pipe round trip (cat)",
            fmt_percentiles(&mut bare, "round trips"),
        );
    }

    // From here on a thread reads the gateway's stdout, so that writing never waits on reading.
    let frames = spawn_reader(lines);
    let mut client = Client {
        stdin,
        frames,
        next_id: 1 << 32,
        pid,
        peak_rss_kb: idle.rss_kb,
        last_frame: Instant::now(),
    };

    if options.sessions > 0 && options.turns > 0 {
        run_turns(&mut client, options)?;
        let after = Memory::read(pid)?;
        report("rss after load", after.to_string());
        report(
            "rss peak during load (sampled)",
            fmt_kb(client.peak_rss_kb.max(after.rss_kb)),
        );
    }

    if options.idle_sessions > 0 {
        let before = Memory::read(pid)?;
        let start = Instant::now();
        let ids = client.create_sessions(options.idle_sessions)?;
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
        let after = Memory::read(pid)?;
        report(
            &format!("rss with +{} idle sessions", ids.len()),
            after.to_string(),
        );
        let per_session =
            after.rss_kb.saturating_sub(before.rss_kb) as f64 * 1024.0 / ids.len() as f64;
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
    let memory = Memory::read(pid)?;
    report("rss before exit", memory.to_string());
    let Client { stdin, frames, .. } = client;
    let closed = Instant::now();
    drop(stdin);
    let status = wait_until(child, closed + Duration::from_secs(10));
    let exit_time = closed.elapsed();
    drop(frames);
    match status {
        Some(status) => {
            report(
                "exit after stdin close",
                format!("{} ({status})", fmt_duration(exit_time)),
            );
            if !status.success() {
                return Err(format!("the gateway exited with {status}"));
            }
            Ok(())
        }
        None => Err("the gateway did not exit within 10 s of stdin closing".to_string()),
    }
}

/// Sequential `ping` round trips, after `warmup` untimed ones.
fn ping_round_trips(
    stdin: &mut ChildStdin,
    lines: &mut DeadlineLines<ChildStdout>,
    warmup: usize,
    count: usize,
) -> Result<Vec<Duration>, String> {
    let mut samples = Vec::with_capacity(count);
    for i in 0..warmup + count {
        let id = i as u64 + 1;
        let line = request_line(id, "ping", json!({}));
        let start = Instant::now();
        write_line(stdin, &line)?;
        loop {
            let frame = lines.next_frame(Instant::now() + STALL)?;
            if frame.get("id").and_then(Value::as_u64) == Some(id) {
                if frame["result"]["pong"] != json!(true) {
                    return Err(format!("unexpected ping answer: {frame}"));
                }
                break;
            }
        }
        if i >= warmup {
            samples.push(start.elapsed());
        }
    }
    Ok(samples)
}

fn run_turns(client: &mut Client, options: &Options) -> Result<(), String> {
    let start = Instant::now();
    let ids = client.create_sessions(options.sessions)?;
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

    let load_start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let (request, sent_at) = client.submit(id, &prompt_text(i, 0, options.words))?;
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
                    client.submit(&ids[i], &prompt_text(i, states[i].done, options.words))?;
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
            "{total} ({} sessions x {} turns, {} words per prompt), {errors} errors",
            ids.len(),
            options.turns,
            options.words
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

/// The threaded phase: writes go straight to the gateway's stdin, frames come from a reader thread.
struct Client {
    stdin: ChildStdin,
    frames: Receiver<(Instant, Value)>,
    next_id: u64,
    pid: u32,
    peak_rss_kb: u64,
    /// When the last frame arrived (for stall detection).
    last_frame: Instant,
}

impl Client {
    fn send(&mut self, method: &str, params: Value) -> Result<(u64, Instant), String> {
        self.next_id += 1;
        let line = request_line(self.next_id, method, params);
        let at = Instant::now();
        write_line(&mut self.stdin, &line)?;
        Ok((self.next_id, at))
    }

    fn submit(&mut self, session_id: &str, text: &str) -> Result<(u64, Instant), String> {
        self.send(
            "prompt.submit",
            json!({"session_id": session_id, "text": text}),
        )
    }

    /// The next frame, or `None` after `wait` without one; an error when the gateway is gone or has
    /// said nothing for `STALL`.
    fn recv(&mut self, wait: Duration) -> Result<(Instant, Option<Value>), String> {
        match self.frames.recv_timeout(wait) {
            Ok((at, frame)) => {
                self.last_frame = at;
                Ok((at, Some(frame)))
            }
            Err(RecvTimeoutError::Timeout) => {
                let idle = self.last_frame.elapsed();
                if idle > STALL {
                    return Err(format!(
                        "no frame from the gateway for {}",
                        fmt_duration(idle)
                    ));
                }
                Ok((Instant::now(), None))
            }
            Err(RecvTimeoutError::Disconnected) => Err("the gateway closed its stdout".to_string()),
        }
    }

    fn sample_rss(&mut self) {
        if let Ok(memory) = Memory::read(self.pid) {
            self.peak_rss_kb = self.peak_rss_kb.max(memory.rss_kb);
        }
    }

    /// Creates `count` sessions, keeping up to `CREATE_WINDOW` requests in flight.
    fn create_sessions(&mut self, count: usize) -> Result<Vec<String>, String> {
        let mut ids = Vec::with_capacity(count);
        let mut in_flight = HashSet::new();
        let mut sent = 0;
        let mut last_sample = Instant::now();
        while ids.len() < count {
            while sent < count && in_flight.len() < CREATE_WINDOW {
                let (id, _) = self.send("session.create", json!({"cols": 100}))?;
                in_flight.insert(id);
                sent += 1;
            }
            if last_sample.elapsed() >= Duration::from_millis(50) {
                self.sample_rss();
                last_sample = Instant::now();
            }
            let (_, frame) = self
                .recv(Duration::from_millis(50))
                .map_err(|e| format!("{e} ({} of {count} sessions created)", ids.len()))?;
            let Some(frame) = frame else { continue };
            let Some(id) = frame.get("id").and_then(Value::as_u64) else {
                continue;
            };
            if !in_flight.remove(&id) {
                continue;
            }
            match frame["result"]["session_id"].as_str() {
                Some(session) => ids.push(session.to_string()),
                None => return Err(format!("session.create failed: {frame}")),
            }
        }
        Ok(ids)
    }
}

/// Moves the line reader to a thread that sends every frame with the instant it was read.
fn spawn_reader<R: Read + AsFd + Send + 'static>(
    mut lines: DeadlineLines<R>,
) -> Receiver<(Instant, Value)> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        while let Ok(Some(line)) = lines.next_line(Instant::now() + Duration::from_secs(86_400)) {
            let at = Instant::now();
            if let Ok(frame @ Value::Object(_)) = serde_json::from_slice::<Value>(line)
                && tx.send((at, frame)).is_err()
            {
                return;
            }
        }
    });
    rx
}

/// Round trips of `line` through `cat`: the floor any stdio gateway is measured against.
fn pipe_round_trips(line: &str, warmup: usize, count: usize) -> Result<Vec<Duration>, String> {
    let mut cat = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start cat: {e}"))?;
    let mut stdin = cat.stdin.take().ok_or("no stdin pipe")?;
    let mut lines = DeadlineLines::new(cat.stdout.take().ok_or("no stdout pipe")?);
    let mut samples = Vec::with_capacity(count);
    let mut result = Ok(());
    for i in 0..warmup + count {
        let start = Instant::now();
        if let Err(e) = write_line(&mut stdin, line) {
            result = Err(e);
            break;
        }
        match lines.next_line(Instant::now() + STALL) {
            Ok(Some(_)) => {}
            Ok(None) => {
                result = Err("cat closed its stdout".to_string());
                break;
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        if i >= warmup {
            samples.push(start.elapsed());
        }
    }
    drop(stdin);
    let _ = cat.kill();
    let _ = cat.wait();
    result.map(|()| samples)
}

fn request_line(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn write_line(stdin: &mut ChildStdin, line: &str) -> Result<(), String> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    stdin
        .write_all(&bytes)
        .map_err(|e| format!("write to the gateway failed: {e}"))
}

fn event_type(frame: &Value) -> Option<&str> {
    if frame.get("method")?.as_str()? != "event" {
        return None;
    }
    frame.get("params")?.get("type")?.as_str()
}

fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(1)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// VmRSS and VmHWM of a process, in KiB.
struct Memory {
    rss_kb: u64,
    hwm_kb: u64,
}

impl Memory {
    fn read(pid: u32) -> Result<Memory, String> {
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
        Ok(Memory {
            rss_kb: status_kb(&status, "VmRSS").unwrap_or(0),
            hwm_kb: status_kb(&status, "VmHWM").unwrap_or(0),
        })
    }
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (VmHWM {})", fmt_kb(self.rss_kb), fmt_kb(self.hwm_kb))
    }
}

/// The value of a `Key:   1234 kB` line of `/proc/<pid>/status`.
fn status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

fn report(metric: &str, value: impl std::fmt::Display) {
    println!("{metric:<36} {value}");
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn fmt_percentiles(samples: &mut [Duration], what: &str) -> String {
    if samples.is_empty() {
        return format!("no {what}");
    }
    samples.sort_unstable();
    format!(
        "p50 {}  p99 {}  max {}  ({} {what})",
        fmt_duration(percentile(samples, 50.0)),
        fmt_duration(percentile(samples, 99.0)),
        fmt_duration(samples[samples.len() - 1]),
        samples.len()
    )
}

fn fmt_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

fn fmt_kb(kb: u64) -> String {
    fmt_bytes(kb as f64 * 1024.0)
}

fn fmt_bytes(bytes: f64) -> String {
    if bytes < 1024.0 {
        format!("{bytes:.0} B")
    } else if bytes < 1024.0 * 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
