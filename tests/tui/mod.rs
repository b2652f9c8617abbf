//! The stock Hermes TUI, driven in tmux against the freshly built gateway.
//!
//! Each [`Tui`] gets its own `HERMES_HOME` (removed on drop), its own tmux server (`-L`, killed
//! on drop) and a call log (`TUI_GATEWAY_RPC_LOG`) of every frame the gateway read and wrote.
//! The bundle is `$HERMES_TUI_BUNDLE`, default `../shared/hermes-reference/tui/entry.js` from the
//! crate root; without it, `node` or `tmux` the scenarios print why and skip ([`Tui::start`]
//! returns `None`).
//!
//! Every wait polls a condition (the screen, the log, /proc) until a deadline.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, TempHome};

pub mod screen;
pub use screen::*;

pub const COLS: u16 = 120;
pub const ROWS: u16 = 40;

/// Deadline for the TUI to come up (node start-up on 2 loaded cores).
pub const START: Duration = Duration::from_secs(30);
/// Pause between the last typed key and Enter (see [`Tui::submit`]).
pub const KEY_PACE: Duration = Duration::from_millis(100);
/// Deadline for one thing to appear on screen.
pub const T: Duration = Duration::from_secs(15);

static SEQ: AtomicU64 = AtomicU64::new(0);

/// What a scenario needs before it starts.
#[derive(Default)]
pub struct Opts {
    /// Written to `$HERMES_HOME/config.yaml`.
    pub config_yaml: Option<String>,
    /// Extra environment for the TUI (and so the gateway).
    pub env: Vec<(String, String)>,
    /// Reuse this home (a second run on the same `state.db`); otherwise a fresh one.
    pub home: Option<PathBuf>,
}

impl Opts {
    /// A fresh home whose config.yaml is `yaml`, nothing else set.
    pub fn config(yaml: String) -> Opts {
        Opts {
            config_yaml: Some(yaml),
            ..Opts::default()
        }
    }
}

/// The bundle to run, or why the suite cannot run here.
pub fn prerequisites() -> Result<PathBuf, String> {
    let bundle = match std::env::var_os("HERMES_TUI_BUNDLE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hermes-reference/tui/entry.js"),
    };
    if !bundle.is_file() {
        return Err(format!(
            "no TUI bundle at {} (set HERMES_TUI_BUNDLE)",
            bundle.display()
        ));
    }
    for tool in ["node", "tmux"] {
        let found = Command::new(tool)
            .arg(if tool == "node" { "--version" } else { "-V" })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !found {
            return Err(format!("`{tool}` is not installed"));
        }
    }
    Ok(bundle)
}

/// One frame of the call log.
#[derive(Clone, Debug)]
pub struct Logged {
    /// `in` (from the TUI) or `out` (to the TUI).
    pub dir: String,
    pub frame: Value,
}

/// A call the TUI made, with its answer once there is one.
#[derive(Clone, Debug)]
pub struct Call {
    pub id: Value,
    pub method: String,
    pub params: Value,
    /// The `result` or `error` member of the answer.
    pub result: Option<Value>,
    pub error: Option<Value>,
}

pub struct Tui {
    pub home: PathBuf,
    _owned_home: Option<TempHome>,
    pub ws: PathBuf,
    pub log_path: PathBuf,
    socket: String,
    /// The server's socket file, removed after the server is killed (tmux leaves it behind).
    socket_path: Option<PathBuf>,
    rc_path: PathBuf,
    pub name: String,
    /// Every screen a wait matched, and the last one, for a person to read after the run.
    screens_path: PathBuf,
}

/// Where each scenario's screens are written: `target/tmp/tui-screens/<scenario>.txt`.
pub fn screens_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("tui-screens")
}

impl Tui {
    /// Start the TUI; `None` (after saying why) when this machine cannot run it.
    pub fn start(name: &str, opts: Opts) -> Option<Tui> {
        let bundle = match prerequisites() {
            Ok(b) => b,
            Err(why) => {
                eprintln!("skipping the TUI scenario {name}: {why}");
                return None;
            }
        };
        let (home, owned) = match opts.home {
            Some(h) => (h, None),
            None => {
                let t = TempHome::new(&format!("tui-{name}"));
                (t.path.clone(), Some(t))
            }
        };
        let ws = home.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        // The TUI and the commands it runs see a private HOME, and no editor to open.
        let user_home = home.join("user");
        std::fs::create_dir_all(&user_home).unwrap();
        if let Some(yaml) = &opts.config_yaml {
            std::fs::write(home.join("config.yaml"), yaml).unwrap();
        }
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let socket = format!("tuigw-e2e-{}-{n}", std::process::id());
        let log_path = home.join(format!("rpc-{n}.jsonl"));
        let rc_path = home.join(format!("tui-{n}.rc"));
        let _ = std::fs::remove_file(&rc_path);
        let mut env = vec![
            ("HERMES_HOME".to_string(), path_str(&home)),
            ("HERMES_CWD".to_string(), path_str(&ws)),
            ("HERMES_PYTHON".to_string(), gateway_binary()),
            ("TUI_GATEWAY_RPC_LOG".to_string(), path_str(&log_path)),
            ("HOME".to_string(), path_str(&user_home)),
            ("EDITOR".to_string(), "true".to_string()),
            ("VISUAL".to_string(), "true".to_string()),
            ("TERM".to_string(), "xterm-256color".to_string()),
            ("NODE_ENV".to_string(), "production".to_string()),
        ];
        env.extend(opts.env.iter().cloned());
        let assignments: Vec<String> = env
            .iter()
            .map(|(k, v)| format!("{k}={}", shell_quote(v)))
            .collect();
        let script = format!(
            "env {} node --expose-gc {}; echo $? > {}; echo __TUI_EXIT; exec sleep 600",
            assignments.join(" "),
            shell_quote(&path_str(&bundle)),
            shell_quote(&path_str(&rc_path)),
        );
        let mut tui = Tui {
            socket_path: None,
            home,
            _owned_home: owned,
            ws,
            log_path,
            socket,
            rc_path,
            name: name.to_string(),
            screens_path: screens_dir().join(format!("{name}.txt")),
        };
        std::fs::create_dir_all(screens_dir()).unwrap();
        std::fs::write(&tui.screens_path, "").unwrap();
        let out = tui
            .tmux()
            .args(["new-session", "-d", "-s", "e2e", "-x"])
            .arg(COLS.to_string())
            .arg("-y")
            .arg(ROWS.to_string())
            .arg(script)
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux new-session failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = tui
            .tmux()
            .args(["display-message", "-p", "#{socket_path}"])
            .output()
            .expect("run tmux");
        tui.socket_path = Some(PathBuf::from(
            String::from_utf8_lossy(&path.stdout).trim().to_string(),
        ))
        .filter(|p| p.is_absolute());
        Some(tui)
    }

    /// A tmux command on this scenario's own server, with the developer's HERMES_*/keys
    /// scrubbed from what the server inherits.
    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        common::scrub_env(&mut c);
        c.env_remove("TMUX");
        c.args(["-L", &self.socket, "-f", "/dev/null"]);
        c.stdin(Stdio::null());
        c
    }

    fn tmux_ok(&self, args: &[&str]) {
        let out = self.tmux().args(args).output().expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // ---- the screen ----

    /// The visible screen, one string.
    pub fn screen(&self) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p", "-t", "e2e"])
            .output()
            .expect("run tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Poll the screen until `pred` holds; panics with the screen and the call log after
    /// `timeout`.
    pub fn wait_screen<F: Fn(&str) -> bool>(
        &self,
        what: &str,
        timeout: Duration,
        pred: F,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if pred(&s) {
                self.save_screen(what, &s);
                return s;
            }
            if Instant::now() >= deadline {
                panic!(
                    "[{}] {what}: not on screen within {timeout:?}\n--- screen ---\n{s}\n--- calls ---\n{}",
                    self.name,
                    self.calls_summary()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Append a screen to this scenario's file of screens (best effort: it is for reading).
    fn save_screen(&self, what: &str, screen: &str) {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.screens_path)
        {
            let _ = write!(f, "===== {what}\n{screen}\n");
        }
    }

    /// Wait for `text` on screen.
    pub fn wait_for(&self, text: &str, timeout: Duration) -> String {
        self.wait_screen(&format!("{text:?}"), timeout, |s| s.contains(text))
    }

    /// Wait for the approval panel. Its header starts with a glyph whose width tmux and the
    /// TUI may count differently, so a redraw can garble that line: the panel's footer and
    /// its Deny choice count as well.
    pub fn wait_approval(&self, timeout: Duration) -> String {
        self.wait_screen("the approval panel", timeout, |s| {
            s.contains("approval required") || (s.contains("quick pick") && s.contains("Deny"))
        })
    }

    /// Whether `text` shows up within `timeout` (for what may legitimately not appear).
    pub fn appears(&self, text: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.screen().contains(text) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The composer is ready: `❯` on screen and `ready` in the status bar.
    pub fn wait_ready(&self, timeout: Duration) -> String {
        self.wait_screen("the composer ready (❯ and ready)", timeout, screen_ready)
    }

    // ---- input ----

    /// Type text literally.
    pub fn type_text(&self, text: &str) {
        self.tmux_ok(&["send-keys", "-t", "e2e", "-l", text]);
    }

    /// Press keys by tmux name (`Enter`, `C-c`, `C-d`, `Escape`, `Tab`, `Up`, `Down`, `BTab`).
    pub fn key(&self, key: &str) {
        self.tmux_ok(&["send-keys", "-t", "e2e", key]);
    }

    /// Close the open pager with `q`. A pager is drawn a moment before it takes keys (its
    /// input hook starts after the render), so a `q` that came in that moment is lost: `q`
    /// again while the pager is still on screen (never once it is gone, when it would be typed).
    pub fn close_pager(&self) {
        let open = |s: &str| s.contains("Esc/q close");
        let deadline = Instant::now() + T;
        while Instant::now() < deadline {
            self.key("q");
            if common::procfs::poll_until(Duration::from_secs(2), || !open(&self.screen())) {
                return;
            }
        }
        panic!("the pager did not close:\n{}", self.screen());
    }

    /// Type a line and submit it: wait until the composer shows it, press Enter, and wait
    /// until the composer let go of it (the submission took).
    pub fn submit(&self, text: &str) {
        self.type_text(text);
        let tail: String = text
            .chars()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let tail = tail.trim().to_string();
        // Typed text ends the composer line; a placeholder tip may quote a command
        // (`Try "/help" for commands`) without ending with it.
        let typed = |s: &str| composer_line(s).is_some_and(|l| l.trim_end().ends_with(&tail));
        self.wait_screen(&format!("{text:?} in the composer"), T, typed);
        // The TUI echoes keys at once but folds them into its state in 16 ms batches
        // (`FRAME_BATCH_MS`, components/textInput.tsx); an Enter inside that window submits
        // and yet leaves the text in the composer. Nobody types that fast: pace like a person.
        std::thread::sleep(KEY_PACE);
        self.key("Enter");
        self.wait_screen(&format!("{text:?} submitted (composer cleared)"), T, |s| {
            !typed(s)
        });
    }

    /// Empty the composer (Ctrl-U) and wait until it shows nothing of `typed`.
    pub fn clear_composer(&self, typed: &str) {
        std::thread::sleep(KEY_PACE);
        self.key("C-u");
        // The typed text starts the composer line; a placeholder tip may mention it
        // (`Try "/help" for commands`) without being typed.
        self.wait_screen(&format!("{typed:?} cleared from the composer"), T, |s| {
            // A screen caught mid-redraw has no composer line: that is not "cleared".
            composer_line(s).is_some_and(|l| {
                !l.trim_start_matches(['❯', '$'])
                    .trim_start()
                    .starts_with(typed)
            })
        });
    }

    /// After a slash command: back to the idle composer, closing what it opened (a picker, a
    /// pager, a confirmation) with Escape. Says what it took, or `stuck …`, and returns the
    /// screen as the command left it (before any Escape).
    pub fn settle_after_command(&self, cmd: &str) -> (String, String) {
        let ready = |d| common::procfs::poll_until(d, || screen_ready(&self.screen()));
        if ready(Duration::from_millis(1500)) {
            let s = self.screen();
            self.save_screen(&format!("after {cmd}"), &s);
            return ("ready".into(), s);
        }
        let left = self.screen();
        self.save_screen(&format!("after {cmd}"), &left);
        for attempt in 1..=3 {
            self.key("Escape");
            if ready(Duration::from_secs(2)) {
                return (format!("ready after {attempt} Escape(s)"), left);
            }
        }
        let s = self.screen();
        let last = s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        (format!("stuck after {cmd}: {last:?}"), left)
    }

    pub fn resize(&self, cols: u16, rows: u16) {
        self.tmux_ok(&[
            "resize-window",
            "-t",
            "e2e",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
        ]);
    }

    // ---- the call log ----

    /// Every frame logged so far (a line cut short by a concurrent write is skipped).
    pub fn log(&self) -> Vec<Logged> {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| Logged {
                dir: v["dir"].as_str().unwrap_or("").to_string(),
                frame: v["frame"].clone(),
            })
            .collect()
    }

    /// Every call the TUI made, in order, with its answer where one was written.
    pub fn calls(&self) -> Vec<Call> {
        let mut calls: Vec<Call> = Vec::new();
        let mut open: HashMap<String, usize> = HashMap::new();
        for l in self.log() {
            let f = &l.frame;
            if l.dir == "in" {
                if let Some(method) = f["method"].as_str() {
                    open.insert(f["id"].to_string(), calls.len());
                    calls.push(Call {
                        id: f["id"].clone(),
                        method: method.to_string(),
                        params: f["params"].clone(),
                        result: None,
                        error: None,
                    });
                }
            } else if f.get("method").is_none()
                && f.get("id").is_some()
                && let Some(i) = open.remove(&f["id"].to_string())
            {
                calls[i].result = f.get("result").cloned();
                calls[i].error = f.get("error").cloned();
            }
        }
        calls
    }

    /// Events written to the TUI, as `(type, payload)`.
    pub fn events(&self) -> Vec<(String, Value)> {
        self.log()
            .into_iter()
            .filter(|l| l.dir == "out" && l.frame["method"] == "event")
            .map(|l| {
                let p = &l.frame["params"];
                (
                    p["type"].as_str().unwrap_or("").to_string(),
                    p["payload"].clone(),
                )
            })
            .collect()
    }

    /// Calls answered with an error, as `method: message (code)`.
    pub fn error_answers(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| {
                let e = c.error.as_ref()?;
                Some(format!(
                    "{}: {} ({})",
                    c.method,
                    e["message"].as_str().unwrap_or("?"),
                    e["code"]
                ))
            })
            .collect()
    }

    /// Wait until a call of `method` was answered; returns it.
    pub fn wait_call(&self, method: &str, timeout: Duration) -> Call {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self
                .calls()
                .into_iter()
                .rev()
                .find(|c| c.method == method && (c.result.is_some() || c.error.is_some()))
            {
                return c;
            }
            if Instant::now() >= deadline {
                panic!(
                    "[{}] no answered {method} call within {timeout:?}\n--- screen ---\n{}\n--- calls ---\n{}",
                    self.name,
                    self.screen(),
                    self.calls_summary()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until the `n`th call (from 1) of `method` was answered; returns it.
    pub fn wait_nth_call(&self, method: &str, n: usize, timeout: Duration) -> Call {
        let mut found = None;
        let ok = common::procfs::poll_until(timeout, || {
            found = self
                .calls()
                .into_iter()
                .filter(|c| c.method == method)
                .nth(n - 1)
                .filter(|c| c.result.is_some() || c.error.is_some());
            found.is_some()
        });
        assert!(
            ok,
            "[{}] no answered call #{n} of {method} within {timeout:?}\n--- screen ---\n{}\n--- calls ---\n{}",
            self.name,
            self.screen(),
            self.calls_summary()
        );
        found.unwrap()
    }

    /// Move the session picker's selection (`▸`) to row `index` of [`picker_rows`].
    pub fn picker_select(&self, index: usize) {
        // The list may still be refreshing (after a delete, say): step one row at a time from
        // wherever the cursor is now, until it stands on `index`.
        let deadline = Instant::now() + T;
        loop {
            let rows = picker_rows(&self.screen());
            let at = rows.iter().position(|r| r.starts_with('▸'));
            match at {
                Some(at) if at == index => return,
                Some(at) => self.key(if index > at { "Down" } else { "Up" }),
                None => {}
            }
            assert!(
                Instant::now() < deadline,
                "[{}] picker row {index} not selected within {T:?}: {rows:#?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Open the session picker, which must show `live` live sessions, and choose the first row
    /// that `pick` accepts.
    pub fn choose_live_session(&self, live: usize, pick: impl Fn(&str) -> bool) {
        self.key("C-x");
        self.wait_for(&format!("{live} live"), T);
        // By what the row says, not where it was: the list may still be reordered by a refresh
        // (the live sessions' poll) while the cursor moves.
        let deadline = Instant::now() + T;
        loop {
            let rows = picker_rows(&self.screen());
            let target = rows.iter().position(|r| pick(r));
            let at = rows.iter().position(|r| r.starts_with('▸'));
            match (target, at) {
                (Some(target), Some(at)) if target == at => break,
                (Some(target), Some(at)) => self.key(if target > at { "Down" } else { "Up" }),
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "[{}] no such live session selected within {T:?}: {rows:#?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.key("Enter");
    }

    /// Send `text` to the offline model and wait for its answer and for the TUI to be ready.
    pub fn exchange(&self, text: &str) {
        self.submit(text);
        self.wait_for(&format!("You said: {text}"), T);
        self.wait_ready(T);
    }

    /// How many calls of `method` were made so far.
    pub fn count_calls(&self, method: &str) -> usize {
        self.calls().iter().filter(|c| c.method == method).count()
    }

    /// One line per call, for failure messages (the TUI's periodic polls only when they failed).
    pub fn calls_summary(&self) -> String {
        const POLLS: [&str; 3] = ["pet.cells", "session.active_list", "config.get"];
        self.calls()
            .iter()
            .filter(|c| c.error.is_some() || !POLLS.contains(&c.method.as_str()))
            .map(|c| {
                let answer = match (&c.result, &c.error) {
                    (_, Some(e)) => format!("ERROR {e}"),
                    (Some(_), None) => "ok".to_string(),
                    (None, None) => "(no answer)".to_string(),
                };
                format!(
                    "  {} {} -> {answer}\n",
                    c.method,
                    short(&c.params.to_string(), 100)
                )
            })
            .collect()
    }

    // ---- what every scenario asserts ----

    /// No screen line with `ERROR` or `error:`, and no call answered with an error except the
    /// methods in `allowed`.
    pub fn assert_no_errors(&self, allowed: &[&str]) {
        let s = self.screen();
        let bad: Vec<&str> = s.lines().filter(|l| is_error_line(l)).collect();
        assert!(
            bad.is_empty(),
            "[{}] error lines on screen: {bad:?}\n--- screen ---\n{s}\n--- calls ---\n{}",
            self.name,
            self.calls_summary()
        );
        let errors: Vec<String> = self
            .error_answers()
            .into_iter()
            .filter(|e| !allowed.iter().any(|m| e.starts_with(&format!("{m}:"))))
            .collect();
        assert!(
            errors.is_empty(),
            "[{}] calls answered with an error: {errors:#?}\n--- screen ---\n{s}",
            self.name
        );
    }

    // ---- quitting ----

    /// Whether the TUI process has exited (its shell wrote the exit status).
    pub fn exited(&self) -> bool {
        self.rc_path.exists()
    }

    /// Wait for the TUI to exit; returns its exit status text.
    pub fn wait_exit(&self, timeout: Duration) -> String {
        let ok = common::procfs::poll_until(timeout, || self.exited());
        assert!(
            ok,
            "[{}] the TUI did not exit within {timeout:?}\n--- screen ---\n{}",
            self.name,
            self.screen()
        );
        std::fs::read_to_string(&self.rc_path)
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// `/quit`, then the TUI exits and nothing of this run is left.
    pub fn quit(&self) {
        self.submit("/quit");
        self.wait_exit(T);
        self.assert_nothing_left();
    }

    /// Processes whose environment holds this run's `HERMES_HOME` (the TUI, the gateway, its
    /// zygote and supervisors, tools).
    pub fn processes_of_this_run(&self) -> Vec<common::procfs::Proc> {
        let needle = format!("HERMES_HOME={}\0", path_str(&self.home));
        let mut found = Vec::new();
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return found;
        };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            if contains(&env, needle.as_bytes())
                && !common::procfs::is_gone(pid)
                && let Some(p) = common::procfs::proc_info(pid)
            {
                found.push(p);
            }
        }
        found
    }

    /// Nothing started by this run still runs (within a few seconds of the TUI's exit).
    pub fn assert_nothing_left(&self) {
        let mut left = Vec::new();
        let ok = common::procfs::poll_until(Duration::from_secs(5), || {
            left = self.processes_of_this_run();
            left.is_empty()
        });
        assert!(
            ok,
            "[{}] processes still running after quit:\n{}",
            self.name,
            common::procfs::describe(&left)
        );
    }

    /// The gateway process of this run.
    pub fn gateway_pid(&self) -> i32 {
        let mut pid = None;
        let ok = common::procfs::poll_until(T, || {
            pid = self
                .processes_of_this_run()
                .into_iter()
                .find(|p| p.cmdline.contains("tui_gateway.entry") && p.comm != "node")
                .map(|p| p.pid);
            pid.is_some()
        });
        assert!(ok, "[{}] no gateway process found", self.name);
        pid.unwrap()
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        self.save_screen("final screen", &self.screen());
        if std::thread::panicking() {
            eprintln!(
                "[{}] final screen:\n{}\n--- calls ---\n{}",
                self.name,
                self.screen(),
                self.calls_summary()
            );
        }
        let _ = self
            .tmux()
            .arg("kill-server")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Some(p) = &self.socket_path {
            let _ = std::fs::remove_file(p);
        }
        // A failed scenario may leave its gateway or tools behind: end them by pid.
        let procs = self.processes_of_this_run();
        for p in procs {
            // SAFETY: kill(2) of a pid we just found carrying this run's own HERMES_HOME.
            unsafe {
                libc::kill(p.pid, libc::SIGKILL);
            }
        }
    }
}

/// The gateway the TUI runs: this build, or `$TUI_E2E_GATEWAY` (another build, to compare).
pub fn gateway_binary() -> String {
    match std::env::var("TUI_E2E_GATEWAY") {
        Ok(p) if !p.is_empty() => p,
        _ => common::BIN.to_string(),
    }
}

/// The commands `/help` lists from `commands.catalog` (first word of each pair).
pub fn catalog_commands(catalog: &Call) -> Vec<String> {
    let mut out = Vec::new();
    let Some(result) = &catalog.result else {
        return out;
    };
    for cat in result["categories"].as_array().into_iter().flatten() {
        for pair in cat["pairs"].as_array().into_iter().flatten() {
            if let Some(cmd) = pair[0].as_str().and_then(|p| p.split_whitespace().next()) {
                out.push(cmd.to_string());
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
