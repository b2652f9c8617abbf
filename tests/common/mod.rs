//! Shared harness for the black-box tests: spawns the `tui-gateway` binary with a private
//! `HERMES_HOME`, speaks PROTOCOL.md to it through `tui_gateway::client` (every read has a
//! deadline), logs every frame it reads, and offers request / event helpers on that log.
//!
//! Synchronisation is always "wait for a condition with a deadline" (poll), never a bare sleep.
#![allow(dead_code)]

pub mod procfs;

use serde_json::{Value, json};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tui_gateway::client::{Client, ClientError};

pub use tui_gateway::client::{event_type, is_response};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tui-gateway");

/// Default deadline for one answer / one event. Generous: the suite may run on 2 loaded cores.
pub const T: Duration = Duration::from_secs(15);

static COUNTER: AtomicU64 = AtomicU64::new(0);

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

// ---------------------------------------------------------------------------------------------
// Temporary HERMES_HOME
// ---------------------------------------------------------------------------------------------

/// A fresh directory under the system temp dir, removed on drop (set `TUI_GATEWAY_TEST_KEEP=1`
/// to keep it for post-mortem).
pub struct TempHome {
    pub path: PathBuf,
    keep: bool,
}

impl TempHome {
    pub fn new(tag: &str) -> TempHome {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "tuigw-test-{}-{}-{}-{:x}",
            tag,
            std::process::id(),
            n,
            nanos
        ));
        std::fs::create_dir_all(&path).expect("create temp HERMES_HOME");
        TempHome {
            path,
            keep: std::env::var_os("TUI_GATEWAY_TEST_KEEP").is_some(),
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.path.join("state.db")
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// stderr reader
// ---------------------------------------------------------------------------------------------

fn spawn_stderr_reader(
    stderr: impl Read + Send + 'static,
    sink: Arc<Mutex<Vec<String>>>,
) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name("gw-stderr".into())
        .spawn(move || {
            let mut r = BufReader::new(stderr);
            loop {
                let mut buf = Vec::new();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let line = String::from_utf8_lossy(&buf)
                    .trim_end_matches('\n')
                    .to_string();
                let mut s = sink.lock().unwrap();
                // keep memory bounded for chatty gateways
                if s.len() > 20_000 {
                    s.drain(..10_000);
                }
                s.push(line);
            }
        })
        .expect("spawn stderr reader")
}

// ---------------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------------

pub struct GatewayBuilder {
    program: Option<PathBuf>,
    home: Option<PathBuf>,
    envs: Vec<(String, String)>,
    args: Vec<String>,
    tag: String,
    own_group: bool,
    user: Option<u32>,
}

impl GatewayBuilder {
    /// Run the gateway as this user (and group of the same number), owning its home: how
    /// tests see what an unprivileged user's tools can reach. Needs root.
    pub fn run_as(mut self, id: u32) -> Self {
        self.user = Some(id);
        self
    }

    /// Use an existing HERMES_HOME (the caller owns it, e.g. to restart on the same store).
    pub fn home(mut self, p: &Path) -> Self {
        self.home = Some(p.to_path_buf());
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.envs.push((k.to_string(), v.to_string()));
        self
    }

    /// The `openai` provider against a mock server at `base_url` (the tests' key and model).
    pub fn openai_mock(self, base_url: &str) -> Self {
        self.env("OPENAI_BASE_URL", base_url)
            .env("OPENAI_API_KEY", "sk-test")
            .env("OPENAI_MODEL", "mock-model")
    }

    /// Replace the default argument list (`serve`).
    pub fn args(mut self, a: &[&str]) -> Self {
        self.args = a.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Start the gateway in a process group of its own (a command signalling the gateway's
    /// group then cannot reach the test).
    pub fn own_process_group(mut self) -> Self {
        self.own_group = true;
        self
    }

    /// Run another program than the gateway binary (e.g. the `embed` example).
    pub fn program(mut self, p: &Path) -> Self {
        self.program = Some(p.to_path_buf());
        self
    }

    pub fn tag(mut self, t: &str) -> Self {
        self.tag = t.to_string();
        self
    }

    /// Spawn without waiting for anything.
    pub fn spawn(self) -> Gateway {
        let (home, owned) = match self.home {
            Some(h) => (h, None),
            None => {
                let t = TempHome::new(&self.tag);
                (t.path.clone(), Some(t))
            }
        };
        let program = self.program.clone().unwrap_or_else(|| PathBuf::from(BIN));
        let mut cmd = Command::new(&program);
        tui_gateway::client::default_signals(&mut cmd);
        cmd.args(&self.args)
            .current_dir(&home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        scrub_env(&mut cmd);
        if self.own_group {
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
        if let Some(id) = self.user {
            use std::os::unix::process::CommandExt;
            std::os::unix::fs::chown(&home, Some(id), Some(id)).expect("chown the home");
            cmd.uid(id).gid(id);
        }
        cmd.env("HERMES_HOME", &home);
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        let mut client = Client::spawn(&mut cmd)
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()))
            .with_id_prefix("t-")
            // Generous: the suite may run on 2 loaded cores, and some tests send 16 MiB frames.
            .with_write_timeout(secs(60));
        let pid = client.pid().unwrap();
        let stderr = client.child_mut().unwrap().stderr.take().unwrap();
        let err_sink = Arc::new(Mutex::new(Vec::new()));
        let stderr_reader = spawn_stderr_reader(stderr, err_sink.clone());
        Gateway {
            client,
            pid,
            frames: Vec::new(),
            raw: Vec::new(),
            taken: Vec::new(),
            first_untaken: 0,
            garbage: Vec::new(),
            stderr: err_sink,
            stderr_reader,
            home,
            _home: owned,
            paused: false,
            background: None,
            stdout_closed: false,
            exit: None,
            ready: None,
        }
    }

    /// Spawn and wait for `gateway.ready`, asserting it is the first frame.
    pub fn start(self) -> Gateway {
        let mut g = self.spawn();
        g.wait_ready();
        g
    }
}

/// Hygiene for a gateway about to be spawned: nothing from the developer's environment may pick
/// a network model or another home, or change knobs behind the test's back.
pub fn scrub_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v))) {
        if k.starts_with("HERMES_")
            || k.starts_with("TUI_GATEWAY_")
            || k.ends_with("_API_KEY")
            // Every provider's key and endpoint variable (HF_TOKEN, DEEPSEEK_BASE_URL, …).
            || k.ends_with("_TOKEN")
            || k.ends_with("_BASE_URL")
            || k.starts_with("OPENAI_")
            || k.starts_with("ANTHROPIC_")
            || k.starts_with("OPENROUTER_")
            // The mocks listen on 127.0.0.1: a proxy from the machine must not stand between.
            || k.to_ascii_lowercase().ends_with("_proxy")
        {
            cmd.env_remove(&k);
        }
    }
    // A title call after the first turn would take replies the tests script for their turns:
    // a test that wants one turns it back on.
    cmd.env("TUI_GATEWAY_AUTO_TITLE", "off");
}

// ---------------------------------------------------------------------------------------------
// Gateway
// ---------------------------------------------------------------------------------------------

pub struct Gateway {
    client: Client,
    pid: u32,
    /// Every frame received (through the logging paths), in arrival order.
    pub frames: Vec<Value>,
    /// Raw stdout line of each frame in `frames`.
    pub raw: Vec<String>,
    taken: Vec<bool>,
    first_untaken: usize,
    /// stdout lines that were not JSON objects.
    pub garbage: Vec<Vec<u8>>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// Finished once the gateway's stderr reached EOF.
    stderr_reader: thread::JoinHandle<()>,
    pub home: PathBuf,
    _home: Option<TempHome>,
    /// The test stopped reading stdout (to make the gateway see a slow peer).
    paused: bool,
    /// Set once the writer started by [`Gateway::write_in_background`] is done.
    background: Option<Arc<AtomicBool>>,
    pub stdout_closed: bool,
    exit: Option<ExitStatus>,
    /// Payload of gateway.ready once seen.
    pub ready: Option<Value>,
}

/// A created session: runtime id, stored id, full create result.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    pub stored: String,
    pub result: Value,
}

/// One completed turn.
#[derive(Clone, Debug)]
pub struct Turn {
    /// `message.complete` payload text.
    pub text: String,
    pub complete: Value,
    /// The session's events of this turn, `message.start` .. `session.info` inclusive (params objects).
    pub events: Vec<Value>,
}

impl Turn {
    /// The turn's first event of type `ty` (panics naming the events when there is none).
    pub fn event(&self, ty: &str) -> &Value {
        self.events
            .iter()
            .find(|e| e["type"] == ty)
            .unwrap_or_else(|| panic!("no {ty}: {:?}", self.events))
    }
}

impl Gateway {
    /// A `%tool {args}` turn of the offline model that completes: its `tool.complete` payload.
    pub fn tool_turn(&mut self, sid: &str, tool: &str, args: &Value) -> Value {
        let turn = self.run_turn(sid, &format!("%{tool} {args}"));
        assert_eq!(
            turn.complete["payload"]["status"], "complete",
            "{:?}",
            turn.events
        );
        turn.event("tool.complete")["payload"].clone()
    }
}

impl Gateway {
    pub fn builder() -> GatewayBuilder {
        GatewayBuilder {
            program: None,
            home: None,
            envs: Vec::new(),
            args: vec!["serve".to_string()],
            tag: "gw".to_string(),
            own_group: false,
            user: None,
        }
    }

    /// Spawn with defaults and wait for ready.
    pub fn start() -> Gateway {
        Gateway::builder().start()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn db_path(&self) -> PathBuf {
        self.home.join("state.db")
    }

    /// Sends a signal (e.g. `libc::SIGTERM`) to the gateway process only.
    pub fn signal(&self, sig: i32) {
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", self.pid);
    }

    // ---- writing ----------------------------------------------------------------------------

    /// Writes `bytes` to the gateway's stdin from a thread, for a burst the gateway may take only
    /// slowly while the test reads or samples something else. The harness's own writes (and
    /// `close_stdin`) wait until it is done, reading stdout meanwhile.
    pub fn write_in_background(&mut self, bytes: Vec<u8>) -> thread::JoinHandle<io::Result<()>> {
        self.wait_background();
        let mut input = self.client.input_copy().expect("stdin still open");
        let done = Arc::new(AtomicBool::new(false));
        self.background = Some(done.clone());
        thread::spawn(move || {
            let written = write_all_polling(&mut input, &bytes);
            done.store(true, Ordering::SeqCst);
            written
        })
    }

    /// Waits for the background writer; stdout is read into the client's buffer meanwhile (not
    /// into the log), so the gateway can take its input.
    fn wait_background(&mut self) {
        let Some(done) = self.background.clone() else {
            return;
        };
        let deadline = Instant::now() + secs(120);
        while !done.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "the background writer did not finish\n{}",
                self.diag()
            );
            if self.reading() {
                let _ = self.client.pump(Instant::now() + ms(10));
            } else {
                thread::sleep(ms(2));
            }
        }
        self.background = None;
    }

    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.wait_background();
        self.client.send_raw(bytes).map_err(|e| match e {
            ClientError::Io(e) => e,
            ClientError::Closed => io::Error::new(io::ErrorKind::BrokenPipe, "stdin closed"),
            other => io::Error::other(other.to_string()),
        })
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        if let Err(e) = self.write_raw(bytes) {
            panic!("write to gateway stdin failed: {e}\n{}", self.diag());
        }
    }

    pub fn send_line(&mut self, s: &str) {
        let mut b = s.as_bytes().to_vec();
        b.push(b'\n');
        self.send_raw(&b);
    }

    pub fn send(&mut self, frame: &Value) {
        self.send_line(&frame.to_string());
    }

    fn fresh_id(&mut self) -> String {
        self.client
            .fresh_id()
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Sends a request without waiting; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.fresh_id());
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        id
    }

    pub fn close_stdin(&mut self) {
        self.wait_background();
        self.client.close_input();
    }

    // ---- reading ----------------------------------------------------------------------------

    /// Whether stdout may be read: not while the test paused reading, unless the gateway exited.
    fn reading(&mut self) -> bool {
        !self.paused || self.try_exit().is_some()
    }

    /// Logs one stdout line: a JSON object as a frame (with its raw text), anything else as
    /// garbage (a protocol violation on stdout).
    fn push_line(&mut self, line: Vec<u8>) {
        let frame = match serde_json::from_slice::<Value>(&line) {
            Ok(v) if v.is_object() => v,
            _ => return self.garbage.push(line),
        };
        let raw = match String::from_utf8(line) {
            Ok(raw) => raw,
            Err(e) => return self.garbage.push(e.into_bytes()),
        };
        if self.ready.is_none() && event_type(&frame) == Some("gateway.ready") {
            self.ready = Some(frame["params"]["payload"].clone());
        }
        self.frames.push(frame);
        self.raw.push(raw);
        self.taken.push(false);
    }

    /// The next stdout line, read before `deadline`; `None` on timeout or at end of file.
    fn next_line(&mut self, deadline: Instant) -> Option<Vec<u8>> {
        if !self.reading() {
            return None;
        }
        match self.client.next_line(deadline) {
            Ok(line) => Some(line.to_vec()),
            Err(ClientError::Timeout) => None,
            Err(_) => {
                self.stdout_closed = true;
                None
            }
        }
    }

    /// Receives one line into the log, waiting at most until `deadline`. False on timeout / EOF.
    pub fn pump_until(&mut self, deadline: Instant) -> bool {
        match self.next_line(deadline) {
            Some(line) => {
                self.push_line(line);
                true
            }
            None => false,
        }
    }

    /// Moves everything already written into the log without blocking.
    pub fn drain_available(&mut self) {
        loop {
            while self.client.has_buffered_line() && self.pump_until(Instant::now()) {}
            if !self.reading() {
                return;
            }
            match self.client.pump(Instant::now()) {
                Ok(true) => {}
                Ok(false) => {
                    if self.client.output_closed() && !self.client.has_buffered_line() {
                        self.stdout_closed = true;
                    }
                    return;
                }
                Err(_) => {
                    self.stdout_closed = true;
                    return;
                }
            }
        }
    }

    /// Receives one frame WITHOUT logging it (for high-volume tests). Garbage is still recorded.
    pub fn recv_unlogged(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let line = self.next_line(deadline)?;
            match serde_json::from_slice::<Value>(&line) {
                Ok(v) if v.is_object() => return Some(v),
                _ => self.garbage.push(line),
            }
        }
    }

    /// First not-yet-taken frame (old or new) matching `pred`, marked taken.
    pub fn wait_frame<F: Fn(&Value) -> bool>(
        &mut self,
        pred: F,
        timeout: Duration,
    ) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        let mut idx = self.first_untaken;
        loop {
            while idx < self.frames.len() {
                if !self.taken[idx] && pred(&self.frames[idx]) {
                    self.taken[idx] = true;
                    while self.first_untaken < self.taken.len() && self.taken[self.first_untaken] {
                        self.first_untaken += 1;
                    }
                    return Some(self.frames[idx].clone());
                }
                idx += 1;
            }
            if !self.pump_until(deadline) {
                // one last look at anything that arrived together with the timeout
                self.drain_available();
                if idx >= self.frames.len() {
                    return None;
                }
            }
        }
    }

    /// Collects every frame that arrives within `dur` (logged, not taken). Used both to assert
    /// that nothing is sent and to pace polling loops.
    pub fn collect_for(&mut self, dur: Duration) -> Vec<Value> {
        let start = self.frames.len();
        let deadline = Instant::now() + dur;
        while Instant::now() < deadline {
            if !self.pump_until(deadline) && self.stdout_closed {
                break;
            }
        }
        self.frames[start..].to_vec()
    }

    pub fn wait_ready(&mut self) -> Value {
        let f = self
            .wait_frame(|f| event_type(f) == Some("gateway.ready"), T)
            .unwrap_or_else(|| panic!("no gateway.ready\n{}", self.diag()));
        assert_eq!(
            event_type(&self.frames[0]),
            Some("gateway.ready"),
            "gateway.ready must be the first frame; got {}",
            self.frames[0]
        );
        f["params"]["payload"].clone()
    }

    pub fn wait_response(&mut self, id: &Value, timeout: Duration) -> Value {
        let idc = id.clone();
        self.wait_frame(
            move |f| is_response(f) && f.get("id") == Some(&idc),
            timeout,
        )
        .unwrap_or_else(|| panic!("no response for id {id}\n{}", self.diag()))
    }

    /// Sends a request and waits for its response frame (result or error).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_timeout(method, params, T)
    }

    pub fn request_timeout(&mut self, method: &str, params: Value, timeout: Duration) -> Value {
        let id = self.send_request(method, params);
        self.wait_response(&id, timeout)
    }

    /// Request that must succeed; returns `result`.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params.clone());
        match r.get("result") {
            Some(v) => v.clone(),
            None => panic!(
                "{method} {params} answered with an error: {r}\n{}",
                self.diag()
            ),
        }
    }

    /// Request that must fail; returns (code, message, full frame).
    pub fn call_err(&mut self, method: &str, params: Value) -> (i64, String, Value) {
        let r = self.request(method, params.clone());
        match r.get("error") {
            Some(e) => (
                e["code"]
                    .as_i64()
                    .unwrap_or_else(|| panic!("error without integer code: {r}")),
                e["message"].as_str().unwrap_or("").to_string(),
                r.clone(),
            ),
            None => panic!("{method} {params} should have failed, got {r}"),
        }
    }

    /// Asserts that `method` fails with `code`; returns the message.
    pub fn expect_code(&mut self, method: &str, params: Value, code: i64) -> String {
        let (c, m, f) = self.call_err(method, params.clone());
        assert_eq!(
            c, code,
            "{method} {params}: expected code {code}, got frame {f}"
        );
        m
    }

    pub fn ping(&mut self) {
        let r = self.call("ping", json!({}));
        assert_eq!(r, json!({"pong": true}));
    }

    /// Next not-yet-taken event of this type (any session); returns the params object.
    pub fn wait_event(&mut self, ty: &str, timeout: Duration) -> Value {
        self.wait_frame(|f| event_type(f) == Some(ty), timeout)
            .map(|f| f["params"].clone())
            .unwrap_or_else(|| panic!("no {ty} event within {timeout:?}\n{}", self.diag()))
    }

    /// Next not-yet-taken event of this type for this session; returns the params object.
    pub fn wait_session_event(&mut self, sid: &str, ty: &str, timeout: Duration) -> Value {
        self.try_wait_session_event(sid, ty, timeout)
            .unwrap_or_else(|| {
                panic!(
                    "no {ty} event for session {sid} within {timeout:?}\n{}",
                    self.diag()
                )
            })
    }

    pub fn try_wait_session_event(
        &mut self,
        sid: &str,
        ty: &str,
        timeout: Duration,
    ) -> Option<Value> {
        self.wait_frame(
            |f| event_type(f) == Some(ty) && f["params"]["session_id"] == sid,
            timeout,
        )
        .map(|f| f["params"].clone())
    }

    /// All events received so far (taken or not) for this session, as params objects, in
    /// arrival order.
    pub fn events_of_session(&mut self, sid: &str) -> Vec<Value> {
        self.events_of_session_from(sid, 0)
    }

    /// Like [`Gateway::events_of_session`], from frame index `start` of the log on.
    pub fn events_of_session_from(&mut self, sid: &str, start: usize) -> Vec<Value> {
        self.drain_available();
        session_params(&self.frames[start..], sid)
    }

    /// stderr so far once it holds `needle`, or at the deadline (stderr is read by a thread).
    pub fn stderr_with(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let text = self.stderr_text();
            if text.contains(needle) || Instant::now() >= deadline {
                return text;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The user texts of stored session `stored` as `session.resume` shows them.
    pub fn resumed_user_texts(&mut self, stored: &str) -> Vec<String> {
        let r = self.call("session.resume", json!({"session_id": stored}));
        r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["role"] == "user")
            .filter_map(|v| v["text"].as_str())
            .map(str::to_string)
            .collect()
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pause_reading(&mut self) {
        self.paused = true;
    }

    pub fn resume_reading(&mut self) {
        self.paused = false;
    }

    /// Non-blocking: has the process exited?
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.client.try_exit().expect("try_wait");
        }
        self.exit
    }

    /// Waits for the process to exit (reading stdout meanwhile so it never blocks on a full
    /// pipe), then reads stdout to EOF (bounded).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        let st = match self.client.wait_exit(deadline) {
            Ok(st) => st,
            Err(e) => panic!(
                "gateway did not exit within {timeout:?} ({e})\n{}",
                self.diag()
            ),
        };
        self.exit = Some(st);
        let tail = Instant::now() + secs(3);
        while !self.stdout_closed && Instant::now() < tail {
            self.pump_until(tail);
        }
        // The last stderr lines may still be in the pipe when the process is reaped.
        while !self.stderr_reader.is_finished() && Instant::now() < tail {
            thread::sleep(ms(2));
        }
        st
    }

    pub fn db(&self) -> rusqlite::Connection {
        open_db(&self.db_path())
    }

    /// Every frame so far is a JSON object with `"jsonrpc":"2.0"` and nothing else was written
    /// on stdout.
    pub fn assert_clean_stdout(&mut self) {
        self.drain_available();
        assert!(
            self.garbage.is_empty(),
            "stdout carried non-frame lines: {:?}",
            self.garbage
                .iter()
                .take(5)
                .map(|b| String::from_utf8_lossy(&b[..b.len().min(200)]).to_string())
                .collect::<Vec<_>>()
        );
        for f in &self.frames {
            assert_eq!(f["jsonrpc"], "2.0", "frame without jsonrpc 2.0: {f}");
        }
    }

    pub fn diag(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "--- gateway pid {} home {} exit {:?} stdout_closed {}\n",
            self.pid,
            self.home.display(),
            self.exit,
            self.stdout_closed
        ));
        let n = self.frames.len();
        s.push_str(&format!("--- last frames (of {n}):\n"));
        for f in &self.frames[n.saturating_sub(15)..] {
            let t = f.to_string();
            s.push_str(&truncate(&t, 400));
            s.push('\n');
        }
        if !self.garbage.is_empty() {
            s.push_str(&format!(
                "--- {} garbage stdout lines\n",
                self.garbage.len()
            ));
        }
        let err = self.stderr.lock().unwrap();
        s.push_str("--- stderr tail:\n");
        for l in &err[err.len().saturating_sub(20)..] {
            s.push_str(&truncate(l, 400));
            s.push('\n');
        }
        s
    }

    // ---- higher-level helpers ---------------------------------------------------------------

    /// `session.create` + its `session.info` event.
    pub fn create_session(&mut self, params: Value) -> Session {
        let r = self.call("session.create", params);
        let id = r["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("session.create without session_id: {r}"))
            .to_string();
        let stored = r["stored_session_id"].as_str().unwrap_or("").to_string();
        self.wait_session_event(&id, "session.info", T);
        Session {
            id,
            stored,
            result: r,
        }
    }

    /// Submits a prompt (expects `streaming`) and waits for the turn to settle.
    pub fn run_turn(&mut self, sid: &str, text: &str) -> Turn {
        self.run_turn_timeout(sid, text, T)
    }

    pub fn run_turn_timeout(&mut self, sid: &str, text: &str, timeout: Duration) -> Turn {
        let start = submit(self, sid, text);
        self.finish_turn(sid, start, timeout)
    }

    /// Waits for the next `message.complete` + `session.info` of `sid`; returns the turn's events
    /// from the log starting at frame index `start`.
    pub fn finish_turn(&mut self, sid: &str, start: usize, timeout: Duration) -> Turn {
        let complete = self.wait_session_event(sid, "message.complete", timeout);
        let cseq = complete["seq"].as_u64();
        let sid2 = sid.to_string();
        self.wait_frame(
            move |f| {
                event_type(f) == Some("session.info")
                    && f["params"]["session_id"] == sid2.as_str()
                    && f["params"]["seq"].as_u64() > cseq
            },
            timeout,
        )
        .unwrap_or_else(|| panic!("no session.info after message.complete\n{}", self.diag()));
        let events = session_params(&self.frames[start..], sid);
        Turn {
            text: complete["payload"]["text"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            complete,
            events,
        }
    }
}

// Dropping the client kills a gateway that still runs.

/// Writes all of `bytes` to a non-blocking descriptor, waiting for it to become writable.
fn write_all_polling(out: &mut std::fs::File, mut bytes: &[u8]) -> io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    while !bytes.is_empty() {
        match out.write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLOUT)];
                let n = poll(&mut fds, PollTimeout::from(60_000u16))?;
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the gateway took no input for 60 s",
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Free helpers
// ---------------------------------------------------------------------------------------------

pub fn open_db(path: &Path) -> rusqlite::Connection {
    assert!(path.exists(), "{} does not exist", path.display());
    let c = rusqlite::Connection::open(path).expect("open state.db");
    c.busy_timeout(secs(5)).unwrap();
    c
}

/// Append `count` messages to stored session `stored` in state.db at `path`, one transaction,
/// user and assistant in turn, the `i`th saying `text(i)`; its row's `message_count` set to
/// `message_count` (a test may make it disagree with the rows).
pub fn append_messages(
    path: &Path,
    stored: &str,
    count: usize,
    text: impl Fn(usize) -> String,
    message_count: usize,
) {
    let mut c = open_db(path);
    let tx = c.transaction().unwrap();
    for i in 0..count {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        tx.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![stored, role, text(i), 1e9 + i as f64],
        )
        .unwrap();
    }
    tx.execute(
        "UPDATE sessions SET message_count = ?2 WHERE id = ?1",
        rusqlite::params![stored, message_count as i64],
    )
    .unwrap();
    tx.commit().unwrap();
}

/// A row of the `messages` table of `state.db`.
#[derive(Clone, Debug, PartialEq)]
pub struct MsgRow {
    pub id: i64,
    pub role: String,
    pub content: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_calls: Option<String>,
    pub tool_name: Option<String>,
    pub finish_reason: Option<String>,
    pub timestamp: f64,
    pub token_count: Option<i64>,
    pub reasoning: Option<String>,
}

impl MsgRow {
    /// Ids of the calls in `tool_calls`.
    pub fn call_ids(&self) -> Vec<String> {
        let Some(t) = self.tool_calls.as_deref() else {
            return Vec::new();
        };
        let v: Value = serde_json::from_str(t)
            .unwrap_or_else(|e| panic!("tool_calls is not JSON ({e}): {self:?}"));
        v.as_array()
            .unwrap_or_else(|| panic!("tool_calls is not an array: {self:?}"))
            .iter()
            .map(|c| {
                c["id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("tool call without id: {self:?}"))
                    .to_string()
            })
            .collect()
    }

    /// `function.arguments.command` of the first call.
    pub fn call_command(&self) -> Option<String> {
        let v: Value = serde_json::from_str(self.tool_calls.as_deref()?).ok()?;
        let args = v[0]["function"]["arguments"].as_str()?;
        let a: Value = serde_json::from_str(args).ok()?;
        a["command"].as_str().map(str::to_string)
    }

    /// The parsed JSON content (tool rows).
    pub fn json(&self) -> Value {
        serde_json::from_str(self.content.as_deref().unwrap_or("null")).unwrap_or_else(|e| {
            panic!("content is not JSON ({e}): {self:?}");
        })
    }
}

/// The message rows of one stored session, in id order.
pub fn rows_of(db: &rusqlite::Connection, stored: &str) -> Vec<MsgRow> {
    let mut st = db
        .prepare(
            "SELECT id, role, content, tool_call_id, tool_calls, tool_name, finish_reason,
                    timestamp, token_count, reasoning
             FROM messages WHERE session_id = ?1 ORDER BY id",
        )
        .unwrap();
    st.query_map([stored], |r| {
        Ok(MsgRow {
            id: r.get(0)?,
            role: r.get(1)?,
            content: r.get(2)?,
            tool_call_id: r.get(3)?,
            tool_calls: r.get(4)?,
            tool_name: r.get(5)?,
            finish_reason: r.get(6)?,
            timestamp: r.get(7)?,
            token_count: r.get(8)?,
            reasoning: r.get(9)?,
        })
    })
    .unwrap()
    .map(|r| r.unwrap())
    .collect()
}

/// The message rows of one stored session in the `state.db` at `db_path`.
pub fn message_rows(db_path: &Path, stored: &str) -> Vec<MsgRow> {
    rows_of(&open_db(db_path), stored)
}

pub fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…(+{} bytes)", &s[..end], s.len() - end)
}

/// Submits a prompt on an idle session (asserting `streaming`); returns the frame index the
/// turn's events start from (for [`Gateway::finish_turn`]).
pub fn submit(g: &mut Gateway, sid: &str, text: &str) -> usize {
    let start = g.frames.len();
    let r = g.call("prompt.submit", json!({"session_id": sid, "text": text}));
    assert_eq!(
        r["status"], "streaming",
        "prompt.submit on an idle session: {r}"
    );
    start
}

/// The params objects of the events of session `sid` among `frames`, in order.
fn session_params(frames: &[Value], sid: &str) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| event_type(f).is_some() && f["params"]["session_id"] == sid)
        .map(|f| f["params"].clone())
        .collect()
}

/// (role, text) of a display transcript (`messages` of resume/activate/compress).
pub fn shown(messages: &Value) -> Vec<(String, String)> {
    messages
        .as_array()
        .unwrap_or_else(|| panic!("messages is not an array: {messages}"))
        .iter()
        .map(|m| {
            let text = m["text"].as_str().or(m["context"].as_str()).unwrap_or("");
            (
                m["role"].as_str().unwrap_or("").to_string(),
                text.to_string(),
            )
        })
        .collect()
}

/// Event types (in order) of a list of event params.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The `id`s listed in `result.sessions` of `session.list` / `session.active_list`.
pub fn listed_ids(list: &Value) -> Vec<&str> {
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect()
}

/// An event as listed by `session.events.since`: either a params-shaped object or a full frame.
pub fn as_event(v: &Value) -> &Value {
    if v.get("params").is_some() && v.get("type").is_none() {
        &v["params"]
    } else {
        v
    }
}

pub fn is_runtime_id(s: &str) -> bool {
    s.len() == 8 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `YYYYMMDD_HHMMSS_<6 hex>`
pub fn is_stored_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 22
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'_'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'_'
        && b[16..].iter().all(u8::is_ascii_hexdigit)
}

/// Asserts that `seq` is present on every event and strictly increasing.
pub fn assert_seq_increasing(events: &[Value]) {
    let mut last = 0u64;
    for e in events {
        let s = e["seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("session event without integer seq: {e}"));
        assert!(
            s > last,
            "seq not strictly increasing: {s} after {last} in {e}"
        );
        last = s;
    }
}

/// Types that PROTOCOL.md allows between `message.start` and `message.complete`.
pub const MID_TURN: &[&str] = &[
    "message.delta",
    "reasoning.delta",
    "tool.start",
    "tool.output",
    "tool.complete",
    "status.update",
    "approval.request",
    "request.cancel",
];

/// Checks one plain (tool-less) turn: order start, deltas, complete(status complete),
/// session.info(running false, version, stored id); deltas concatenate to the complete text,
/// which contains the prompt; seq strictly increasing; usage shape.
pub fn assert_plain_turn(turn: &Turn, sid: &str, prompt: &str) {
    let ev = &turn.events;
    let types: Vec<&str> = ev
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect();
    assert!(ev.len() >= 3, "too few events for a turn: {types:?}");
    for e in ev {
        assert_eq!(
            e["session_id"], sid,
            "event of another session in turn: {e}"
        );
    }
    assert_seq_increasing(ev);
    assert_eq!(
        types[0], "message.start",
        "turn must open with message.start: {types:?}"
    );
    let ci = types
        .iter()
        .position(|t| *t == "message.complete")
        .unwrap_or_else(|| panic!("no message.complete in {types:?}"));
    for t in &types[1..ci] {
        assert!(
            MID_TURN.contains(t),
            "unexpected {t} inside a turn: {types:?}"
        );
    }
    assert_eq!(
        types.get(ci + 1).copied(),
        Some("session.info"),
        "message.complete must be followed by session.info: {types:?}"
    );
    // anything after session.info may only be a session.title (sent with the stored id, so not
    // counted here) — nothing else of this session
    assert_eq!(
        ev.len(),
        ci + 2,
        "extra events after session.info: {types:?}"
    );
    let deltas: String = ev[1..ci]
        .iter()
        .filter(|e| e["type"] == "message.delta")
        .map(|e| {
            e["payload"]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("message.delta without text: {e}"))
                .to_string()
        })
        .collect();
    assert!(
        ev[1..ci].iter().any(|e| e["type"] == "message.delta"),
        "no message.delta in {types:?}"
    );
    let complete = &ev[ci]["payload"];
    assert_eq!(
        complete["status"], "complete",
        "message.complete status: {complete}"
    );
    let text = complete["text"]
        .as_str()
        .unwrap_or_else(|| panic!("complete without text: {complete}"));
    assert_eq!(
        deltas, text,
        "concatenated deltas differ from message.complete text"
    );
    assert!(
        text.contains(prompt),
        "reply {text:?} does not contain the prompt {prompt:?}"
    );
    assert_usage(&complete["usage"]);
    let info = &ev[ci + 1]["payload"];
    assert_eq!(
        info["running"], false,
        "settled session.info must say running:false: {info}"
    );
    assert!(
        info["version"].is_string(),
        "session.info without version: {info}"
    );
    assert!(
        info["stored_session_id"]
            .as_str()
            .map(is_stored_id)
            .unwrap_or(false),
        "session.info stored_session_id: {info}"
    );
}

pub fn assert_usage(u: &Value) {
    for k in ["input", "output", "total", "calls"] {
        assert!(
            u[k].is_u64(),
            "usage.{k} must be a non-negative integer: {u}"
        );
    }
    assert!(u.get("model").is_some(), "usage without model: {u}");
}

/// A prompt of `n` distinct words, `prefix` first.
pub fn long_prompt(prefix: &str, n: usize) -> String {
    let mut s = String::from(prefix);
    for i in 0..n {
        s.push_str(&format!(" w{i}"));
    }
    s
}

/// The python of the venv a script under `tests/` makes (pinned, made once and reused while its
/// pins stay; the script prints the path); the script's own words when it fails.
pub fn venv_python(script: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let out = Command::new("bash")
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} failed (it installs pinned packages from PyPI): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
