//! Helpers shared by the benches: temporary homes, the gateway binary, a synchronous protocol
//! client for a spawned gateway, process-tree and memory probes, and result formatting.
//!
//! Each bench includes this module with `mod common;` and uses a different part of it.
#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "tui-gateway-bench-{tag}-{}-{nanos:08x}-{n}",
            std::process::id()
        ));
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the directory (for inspection after a failure); returns its path.
    pub fn keep(self) -> PathBuf {
        let path = self.path.clone();
        std::mem::forget(self);
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The release gateway binary (`target/release/tui-gateway`). Cargo builds it before it builds a
/// bench and names it in `CARGO_BIN_EXE_tui-gateway`; the path next to the bench executable
/// (`target/release/deps/<bench>` → `target/release/tui-gateway`) is the fallback.
pub fn gateway_bin() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_tui-gateway"));
    if built.is_file() {
        return built;
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("tui-gateway")));
    match beside {
        Some(path) if path.is_file() => path,
        _ => {
            eprintln!(
                "error: the gateway binary is missing ({}); build it first with \
                 `cargo build --release`",
                built.display()
            );
            std::process::exit(2);
        }
    }
}

/// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}` without the newline.
pub fn request_line(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// The `type` of an event frame.
pub fn event_type(frame: &Value) -> Option<&str> {
    if frame.get("method")?.as_str()? != "event" {
        return None;
    }
    frame.get("params")?.get("type")?.as_str()
}

/// Lines from a pipe with a deadline, without a thread.
pub use tui_gateway::cli::lines::DeadlineLines as Lines;

/// A gateway child process spoken to over its stdin/stdout, synchronously.
pub struct Client {
    pub child: Child,
    pub stdin: ChildStdin,
    pub lines: Lines<ChildStdout>,
    pub spawned_at: Instant,
    next_id: u64,
}

/// How long any single expected frame may take before a bench gives up.
pub const STALL: Duration = Duration::from_secs(30);

impl Client {
    /// Spawns `bin` as the TUI does (`-m tui_gateway.entry`) with `HERMES_HOME=home`, working
    /// directory `home`, stderr into `home/gateway.stderr`, and waits for `gateway.ready`.
    pub fn spawn(bin: &Path, home: &Path) -> Result<Client, String> {
        let stderr = fs::File::create(home.join("gateway.stderr")).map_err(|e| e.to_string())?;
        let spawned_at = Instant::now();
        let mut child = Command::new(bin)
            .args(["-m", "tui_gateway.entry"])
            .env("HERMES_HOME", home)
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin pipe")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let mut client = Client {
            child,
            stdin,
            lines: Lines::new(stdout),
            spawned_at,
            next_id: 0,
        };
        client.wait_event("gateway.ready", spawned_at + STALL)?;
        Ok(client)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes a request; returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> Result<u64, String> {
        self.next_id += 1;
        let mut line = request_line(self.next_id, method, params);
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .map_err(|e| format!("write to the gateway failed: {e}"))?;
        Ok(self.next_id)
    }

    /// The next frame that satisfies `want`; others are skipped.
    pub fn wait_for(
        &mut self,
        deadline: Instant,
        mut want: impl FnMut(&Value) -> bool,
    ) -> Result<Value, String> {
        loop {
            let frame = self.lines.next_frame(deadline)?;
            if want(&frame) {
                return Ok(frame);
            }
        }
    }

    pub fn wait_event(&mut self, kind: &str, deadline: Instant) -> Result<Value, String> {
        self.wait_for(deadline, |f| event_type(f) == Some(kind))
    }

    /// Sends a request and returns its `result` (an error answer is an error).
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.send(method, params)?;
        let frame = self.wait_for(Instant::now() + STALL, |f| {
            f.get("id").and_then(Value::as_u64) == Some(id)
        })?;
        match frame.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(format!("{method} failed: {frame}")),
        }
    }

    /// Creates `count` sessions, `window` requests in flight at a time; returns their ids.
    pub fn create_sessions(&mut self, count: usize, window: usize) -> Result<Vec<String>, String> {
        let mut ids = Vec::with_capacity(count);
        while ids.len() < count {
            let batch = window.min(count - ids.len());
            let first = self.next_id + 1;
            for _ in 0..batch {
                self.send("session.create", json!({"cols": 100}))?;
            }
            let mut answered = 0;
            while answered < batch {
                let frame = self.lines.next_frame(Instant::now() + STALL)?;
                let Some(id) = frame.get("id").and_then(Value::as_u64) else {
                    continue;
                };
                if id < first {
                    continue;
                }
                let session = frame["result"]["session_id"]
                    .as_str()
                    .ok_or_else(|| format!("session.create failed: {frame}"))?;
                ids.push(session.to_string());
                answered += 1;
            }
        }
        Ok(ids)
    }

    /// `count` sequential `ping` round trips after `warmup` untimed ones; frames that are not the
    /// answer (events of running turns) are read and skipped.
    pub fn ping_round_trips(
        &mut self,
        warmup: usize,
        count: usize,
    ) -> Result<Vec<Duration>, String> {
        let mut samples = Vec::with_capacity(count);
        for i in 0..warmup + count {
            let start = Instant::now();
            let id = self.send("ping", json!({}))?;
            let frame = self.wait_for(start + STALL, |f| {
                f.get("id").and_then(Value::as_u64) == Some(id)
            })?;
            if frame["result"]["pong"] != json!(true) {
                return Err(format!("unexpected ping answer: {frame}"));
            }
            if i >= warmup {
                samples.push(start.elapsed());
            }
        }
        Ok(samples)
    }

    /// Splits the client: its stdout goes to a thread that reads (and counts) until end of file,
    /// as a UI keeps reading while the gateway shuts down.
    pub fn into_draining(self) -> (Child, ChildStdin, JoinHandle<u64>) {
        let Client {
            child,
            stdin,
            lines,
            ..
        } = self;
        let mut stdout = lines.into_inner();
        let reader = thread::spawn(move || {
            let mut total = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            total
        });
        (child, stdin, reader)
    }
}

/// A process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub state: char,
    pub start: u64,
}

pub fn read_proc(pid: u32) -> Option<Proc> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_string();
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    Some(Proc {
        pid,
        comm,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        // Field 22 of stat, the 20th after the name and state.
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Every process whose chain of parents leads to `root` (not `root` itself).
pub fn descendants(root: u32) -> Vec<Proc> {
    let all: Vec<Proc> = fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(read_proc)
                .collect()
        })
        .unwrap_or_default();
    let parent: std::collections::HashMap<u32, u32> = all.iter().map(|p| (p.pid, p.ppid)).collect();
    all.into_iter()
        .filter(|p| {
            let mut at = p.ppid;
            for _ in 0..64 {
                if at == root {
                    return true;
                }
                match parent.get(&at) {
                    Some(&up) if up != at => at = up,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// Whether the process recorded in `p` still runs (a zombie or a reused pid does not count).
pub fn still_alive(p: &Proc) -> bool {
    read_proc(p.pid).is_some_and(|now| now.start == p.start && now.state != 'Z')
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
pub fn memory_kb(pid: u32) -> Option<(u64, u64)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| {
        status.lines().find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    Some((field("VmRSS")?, field("VmHWM")?))
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `p50 … p99 … max … (n samples)`; sorts the samples.
pub fn fmt_percentiles(samples: &mut [Duration]) -> String {
    if samples.is_empty() {
        return "no samples".to_string();
    }
    samples.sort_unstable();
    format!(
        "p50 {}  p99 {}  max {}  ({} samples)",
        fmt_duration(percentile(samples, 50.0)),
        fmt_duration(percentile(samples, 99.0)),
        fmt_duration(samples[samples.len() - 1]),
        samples.len()
    )
}

pub fn fmt_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

pub fn fmt_kb(kb: u64) -> String {
    if kb < 1024 {
        format!("{kb} KiB")
    } else {
        format!("{:.1} MiB", kb as f64 / 1024.0)
    }
}

/// Whether cargo ran this binary as a bench (`cargo bench` passes `--bench`); `cargo test
/// --benches` does not, and then the bench binaries run a small smoke version.
pub fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A `--name value` option among the bench binary's arguments (cargo adds `--bench`; other
/// arguments are ignored).
pub fn arg_usize(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == name)
        .map(|w| {
            w[1].parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {}", w[1]))
        })
        .unwrap_or(default)
}
