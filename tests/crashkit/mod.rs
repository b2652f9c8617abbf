//! Helpers for the shutdown and crash-injection tests (`tests/shutdown.rs`, `tests/crash.rs`):
//! the /proc helpers of `tests/common/procfs.rs` (tool processes found by a marker), reading
//! `state.db` session rows, timing an exit, a raw gateway spawner (for an inherited `SIG_IGN`, a
//! pty stdin, or a stdout the test can close; it speaks through `tui_gateway::client`), and a
//! tiny xorshift PRNG.
//!
//! Every wait is "poll a condition until a deadline"; the short sleeps inside polling loops only
//! pace the polling, they never stand in for synchronisation.
#![allow(dead_code)]

pub use crate::common::procfs::*;

mod faults;
pub use faults::*;

use serde_json::{Value, json};
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::{self, Gateway};
use tui_gateway::client::{Client, ClientError};

// ---------------------------------------------------------------------------------------------
// Exits
// ---------------------------------------------------------------------------------------------

/// Waits (draining stdout) until the gateway exits; returns its status and the time from
/// `since`. Panics with diagnostics after `timeout`. Then reads stdout to EOF (bounded).
pub fn exit_within(g: &mut Gateway, since: Instant, timeout: Duration) -> (ExitStatus, Duration) {
    let deadline = since + timeout;
    let (st, took) = loop {
        g.drain_available();
        if let Some(st) = g.try_exit() {
            break (st, since.elapsed());
        }
        if Instant::now() >= deadline {
            panic!(
                "gateway did not exit within {timeout:?} of the trigger\n{}",
                g.diag()
            );
        }
        let step = (Instant::now() + Duration::from_millis(5)).min(deadline);
        g.pump_until(step);
    };
    g.wait_exit(Duration::from_secs(5));
    (st, took)
}

/// Waits until a line containing `needle` shows on the gateway's stderr.
pub fn wait_stderr(g: &mut Gateway, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if g.stderr_text().contains(needle) {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "stderr never said {needle:?} within {timeout:?}\n{}",
                g.diag()
            );
        }
        let step = (Instant::now() + Duration::from_millis(5)).min(deadline);
        g.pump_until(step);
    }
}

/// stderr of an exited gateway, once its last line (`[gateway-exit] …`) has been read by the
/// harness's stderr thread (it may lag behind the exit).
pub fn final_stderr(g: &Gateway) -> String {
    stderr_after_exit_line(|| g.stderr_text())
}

/// `stderr()` once it shows the `[gateway-exit]` line (or after 3 s).
fn stderr_after_exit_line(stderr: impl Fn() -> String) -> String {
    poll_until(Duration::from_secs(3), || {
        stderr().contains("[gateway-exit]")
    });
    stderr()
}

// ---------------------------------------------------------------------------------------------
// state.db
// ---------------------------------------------------------------------------------------------

/// `(ended_at, end_reason)` of a session row; panics when there is no row.
pub fn session_end(path: &Path, stored: &str) -> (Option<f64>, Option<String>) {
    let db = common::open_db(path);
    db.query_row(
        "SELECT ended_at, end_reason FROM sessions WHERE id = ?1",
        [stored],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap_or_else(|e| panic!("sessions row {stored}: {e}"))
}

pub fn integrity_ok(path: &Path) -> Result<(), String> {
    let db = common::open_db(path);
    let rows: Vec<String> = db
        .prepare("PRAGMA integrity_check")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| format!("integrity_check failed to run: {e}"))?;
    if rows == ["ok"] {
        Ok(())
    } else {
        Err(format!("integrity_check: {rows:?}"))
    }
}

// ---------------------------------------------------------------------------------------------
// PRNG
// ---------------------------------------------------------------------------------------------

/// xorshift64*.
#[derive(Clone, Debug)]
pub struct XorShift(pub u64);

impl XorShift {
    /// Seeded from `CRASH_SEED` when set, else from the clock.
    pub fn from_env_or_time() -> XorShift {
        let seed = std::env::var("CRASH_SEED")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(88172645463325252)
                    ^ ((std::process::id() as u64) << 32)
            });
        XorShift::new(seed)
    }

    pub fn new(seed: u64) -> XorShift {
        XorShift(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..hi` (hi exclusive, hi > lo).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

// ---------------------------------------------------------------------------------------------
// Raw gateway: spawned without the shared harness
// ---------------------------------------------------------------------------------------------

/// What the raw gateway's stdin is.
pub enum RawStdin {
    Pipe,
    /// The slave side of a fresh pseudo-terminal (the test keeps the master).
    Pty,
}

/// A gateway spawned directly with `std::process::Command`, so a test can set signal
/// dispositions before exec, give it a terminal as stdin, or close its stdout. It speaks to the
/// gateway through the project's one client (`tui_gateway::client`, no reader thread holds
/// stdout), so closing stdout really closes the last read end.
pub struct RawGateway {
    pub child: Child,
    client: Client,
    pub frames: Vec<Value>,
    stderr: Arc<Mutex<String>>,
    _home: Option<common::TempHome>,
    pub home: std::path::PathBuf,
}
/// Builder knobs for [`RawGateway::spawn`].
pub struct RawOpts<'a> {
    pub home: Option<&'a Path>,
    pub envs: Vec<(&'a str, &'a str)>,
    /// Signals set to `SIG_IGN` in the child before exec.
    pub ignore: Vec<i32>,
    pub stdin: RawStdin,
}

impl Default for RawOpts<'_> {
    fn default() -> Self {
        RawOpts {
            home: None,
            envs: Vec::new(),
            ignore: Vec::new(),
            stdin: RawStdin::Pipe,
        }
    }
}

/// Opens a pseudo-terminal pair (master, slave) with echo turned off on the slave.
fn open_pty() -> (std::fs::File, OwnedFd) {
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r/open are called with valid arguments;
    // every descriptor returned is checked and wrapped exactly once in an owning type.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt failed");
        let master = std::fs::File::from_raw_fd(m);
        assert_eq!(libc::grantpt(m), 0, "grantpt");
        assert_eq!(libc::unlockpt(m), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(s >= 0, "open pty slave failed");
        let slave = OwnedFd::from_raw_fd(s);
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(s, &mut t), 0);
        t.c_lflag &= !(libc::ECHO | libc::ECHONL);
        assert_eq!(libc::tcsetattr(s, libc::TCSANOW, &t), 0);
        (master, slave)
    }
}

impl RawGateway {
    pub fn spawn(opts: RawOpts<'_>) -> RawGateway {
        let (home, owned) = match opts.home {
            Some(h) => (h.to_path_buf(), None),
            None => {
                let t = common::TempHome::new("raw");
                (t.path.clone(), Some(t))
            }
        };
        let mut cmd = Command::new(common::BIN);
        // First: the test's own dispositions below are set on top of the defaults.
        tui_gateway::client::default_signals(&mut cmd);
        cmd.arg("serve")
            .current_dir(&home)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        common::scrub_env(&mut cmd);
        cmd.env("HERMES_HOME", &home);
        for (k, v) in &opts.envs {
            cmd.env(k, v);
        }
        let mut pty = None;
        match opts.stdin {
            RawStdin::Pipe => {
                cmd.stdin(Stdio::piped());
            }
            RawStdin::Pty => {
                let (master, slave) = open_pty();
                cmd.stdin(Stdio::from(slave));
                pty = Some(OwnedFd::from(master));
            }
        }
        let ignore = opts.ignore.clone();
        // SAFETY: between fork and exec the closure only calls signal(2), which is
        // async-signal-safe, and allocates nothing (the Vec was cloned before the fork).
        unsafe {
            cmd.pre_exec(move || {
                for &sig in &ignore {
                    if libc::signal(sig, libc::SIG_IGN) == libc::SIG_ERR {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn tui-gateway");
        // Requests go to the pipe, or to the terminal's master side.
        let input = pty
            .or_else(|| child.stdin.take().map(OwnedFd::from))
            .unwrap();
        let output = OwnedFd::from(child.stdout.take().unwrap());
        let client = Client::from_fds(input, output)
            .expect("a client on the gateway's descriptors")
            .with_id_prefix("raw-");
        let mut stderr = child.stderr.take().unwrap();
        let sink = Arc::new(Mutex::new(String::new()));
        let s2 = sink.clone();
        std::thread::spawn(move || {
            let mut b = [0u8; 4096];
            loop {
                match stderr.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s2
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&b[..n])),
                }
            }
        });
        RawGateway {
            child,
            client,
            frames: Vec::new(),
            stderr: sink,
            _home: owned,
            home,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn db_path(&self) -> std::path::PathBuf {
        self.home.join("state.db")
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// stderr once `[gateway-exit]` has been read (call after the exit).
    pub fn final_stderr(&self) -> String {
        stderr_after_exit_line(|| self.stderr_text())
    }

    /// Waits until stderr contains `needle`.
    pub fn wait_stderr(&self, needle: &str, timeout: Duration) {
        assert!(
            poll_until(timeout, || self.stderr_text().contains(needle)),
            "stderr never said {needle:?}\n{}",
            self.diag()
        );
    }

    pub fn diag(&self) -> String {
        let n = self.frames.len();
        let mut s = format!(
            "--- raw gateway pid {} home {}\n",
            self.pid(),
            self.home.display()
        );
        for f in &self.frames[n.saturating_sub(12)..] {
            s.push_str(&common::truncate(&f.to_string(), 300));
            s.push('\n');
        }
        s.push_str("--- stderr:\n");
        s.push_str(&self.stderr_text());
        s
    }

    pub fn send(&mut self, v: &Value) -> Result<(), ClientError> {
        self.client.send(v)
    }

    pub fn send_request(&mut self, method: &str, params: Value) -> Value {
        self.client
            .send_request(method, params)
            .unwrap_or_else(|e| panic!("write {method}: {e}\n{}", self.diag()))
    }

    /// Closes stdin (a pipe: EOF; a pty: the master, which hangs up the terminal).
    pub fn close_stdin(&mut self) {
        self.client.close_input();
    }

    /// Closes the test's read end of the gateway's stdout (nobody else holds one).
    pub fn close_stdout(&mut self) {
        self.client
            .close_output()
            .unwrap_or_else(|e| panic!("close the gateway's stdout: {e}"));
    }

    /// Reads one frame, waiting at most until `deadline`. None on timeout or EOF.
    pub fn next_frame(&mut self, deadline: Instant) -> Option<Value> {
        let v = self.client.next_frame(deadline).ok()?;
        self.frames.push(v.clone());
        Some(v)
    }

    pub fn wait_frame<F: Fn(&Value) -> bool>(
        &mut self,
        what: &str,
        timeout: Duration,
        f: F,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        // frames already read first
        if let Some(v) = self.frames.iter().find(|v| f(v)) {
            return v.clone();
        }
        while let Some(v) = self.next_frame(deadline) {
            if f(&v) {
                return v;
            }
        }
        panic!("no {what} within {timeout:?}\n{}", self.diag());
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        let idc = id.clone();
        let r = self.wait_frame(&format!("answer to {method}"), common::T, move |v| {
            common::is_response(v) && v["id"] == idc
        });
        r.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{method} failed: {r}\n{}", self.diag()))
    }

    pub fn wait_event(&mut self, sid: &str, ty: &str, timeout: Duration) -> Value {
        let sid = sid.to_string();
        let ty2 = ty.to_string();
        self.wait_frame(&format!("{ty} of {sid}"), timeout, move |v| {
            common::event_type(v) == Some(ty2.as_str()) && v["params"]["session_id"] == sid.as_str()
        })["params"]
            .clone()
    }

    /// Runs one prompt to `message.complete`; returns its payload.
    pub fn run_turn(&mut self, sid: &str, text: &str) -> Value {
        let start = self.frames.len();
        let r = self.call("prompt.submit", json!({"session_id": sid, "text": text}));
        assert_eq!(r["status"], "streaming", "{r}");
        let sid2 = sid.to_string();
        let deadline = Instant::now() + common::T;
        loop {
            if let Some(v) = self.frames[start..].iter().find(|v| {
                common::event_type(v) == Some("message.complete")
                    && v["params"]["session_id"] == sid2.as_str()
            }) {
                return v["params"]["payload"].clone();
            }
            if self.next_frame(deadline).is_none() {
                panic!("turn {text:?} did not complete\n{}", self.diag());
            }
        }
    }

    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Waits for exit (reading stdout meanwhile, if still open); status and time from `since`.
    pub fn exit_within(&mut self, since: Instant, timeout: Duration) -> (ExitStatus, Duration) {
        let deadline = since + timeout;
        loop {
            if let Some(st) = self.try_exit() {
                return (st, since.elapsed());
            }
            if Instant::now() >= deadline {
                panic!(
                    "raw gateway did not exit within {timeout:?}\n{}",
                    self.diag()
                );
            }
            let step = (Instant::now() + Duration::from_millis(5)).min(deadline);
            if self.client.output_closed() {
                std::thread::sleep(Duration::from_millis(5));
            } else {
                self.next_frame(step);
            }
        }
    }

    /// Whether `sig` is pending (not yet delivered) for the process.
    pub fn signal_pending(&self, sig: i32) -> bool {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let bit = 1u64 << (sig - 1);
        s.lines()
            .filter(|l| l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
            .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
            .any(|m| m & bit != 0)
    }

    /// The signal dispositions of the running process: (ignored mask, caught mask).
    pub fn sig_masks(&self) -> (u64, u64) {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let get = |name: &str| {
            s.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
                .unwrap_or(0)
        };
        (get("SigIgn:"), get("SigCgt:"))
    }
}

impl Drop for RawGateway {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
