//! Helpers for the tool / approval / shell.exec tests: finding the processes a command started
//! (by a unique marker in their command line, through /proc), polling conditions with deadlines,
//! and driving tool turns over the shared harness in `tests/common`.
//!
//! Every wait here is "poll a condition until a deadline"; the short sleeps inside the polling
//! loops only pace the polling, they never stand in for synchronisation.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{self, Gateway};

static SEQ: AtomicU64 = AtomicU64::new(1);

/// A number unique to this test process and call, usable as a fractional `sleep` argument
/// (`sleep 300.<marker>`) or a file-name suffix: `<test pid, 7 digits><counter, 4 digits>`.
/// Fixed width, so no marker is a prefix of another one (other test binaries may run at the
/// same time).
pub fn marker() -> String {
    format!(
        "{:07}{:04}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

// ---------------------------------------------------------------------------------------------
// /proc
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Proc {
    pub pid: i32,
    /// argv joined with spaces.
    pub cmdline: String,
    pub comm: String,
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
}

/// `/proc/<pid>/stat` fields after the command name: (state, ppid, pgrp, session).
fn stat_of(pid: i32) -> Option<(char, i32, i32, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    let pgrp = it.next()?.parse().ok()?;
    let sess = it.next()?.parse().ok()?;
    Some((state, ppid, pgrp, sess))
}

pub fn proc_info(pid: i32) -> Option<Proc> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()?
        .trim_end()
        .to_string();
    let (state, ppid, pgid, sid) = stat_of(pid)?;
    Some(Proc {
        pid,
        cmdline,
        comm,
        state,
        ppid,
        pgid,
        sid,
    })
}

/// True when the process no longer runs: no /proc entry, or a zombie / dead entry (a killed
/// process whose new parent has not reaped it yet is not running any more).
pub fn is_gone(pid: i32) -> bool {
    match stat_of(pid) {
        None => true,
        Some((st, ..)) => st == 'Z' || st == 'X' || st == 'x',
    }
}

/// Every live (non-zombie) process whose command line contains `needle`, the test process
/// itself excluded.
pub fn procs_matching(needle: &str) -> Vec<Proc> {
    let me = std::process::id() as i32;
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Some(p) = proc_info(pid)
            && p.cmdline.contains(needle)
            && !is_gone(pid)
        {
            v.push(p);
        }
    }
    v.sort_by_key(|p| p.pid);
    v
}

/// Live processes whose `comm` is `comm` and whose command line contains `needle`
/// (e.g. the `sleep` processes of `sleep 300.<marker>`, not the shells that mention it).
pub fn procs_named(comm: &str, needle: &str) -> Vec<Proc> {
    procs_matching(needle)
        .into_iter()
        .filter(|p| p.comm == comm)
        .collect()
}

pub fn describe(ps: &[Proc]) -> String {
    ps.iter()
        .map(|p| {
            format!(
                "  pid {} ppid {} pgid {} sid {} state {} comm {} cmd {:?}\n",
                p.pid, p.ppid, p.pgid, p.sid, p.state, p.comm, p.cmdline
            )
        })
        .collect()
}

/// Polls `cond` every few milliseconds until it holds or `timeout` passes. Returns whether it
/// held (and how long it took).
pub fn poll_until<F: FnMut() -> bool>(timeout: Duration, mut cond: F) -> (bool, Duration) {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        if cond() {
            return (true, start.elapsed());
        }
        if Instant::now() >= deadline {
            return (false, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until exactly `n` (or more) `comm` processes matching `needle` run; returns them.
pub fn wait_for_procs(comm: &str, needle: &str, n: usize, timeout: Duration) -> Vec<Proc> {
    let mut found = Vec::new();
    let (ok, _) = poll_until(timeout, || {
        found = procs_named(comm, needle);
        found.len() >= n
    });
    assert!(
        ok,
        "expected {n} {comm} process(es) matching {needle:?} within {timeout:?}; found:\n{}",
        describe(&found)
    );
    found
}

/// Waits until every pid in `pids` is gone; panics with the survivors after `timeout`.
/// Returns the time it took.
pub fn wait_gone(pids: &[i32], timeout: Duration, what: &str) -> Duration {
    let (ok, took) = poll_until(timeout, || pids.iter().all(|p| is_gone(*p)));
    if !ok {
        let alive: Vec<Proc> = pids
            .iter()
            .filter(|p| !is_gone(**p))
            .filter_map(|p| proc_info(*p))
            .collect();
        panic!(
            "{what}: processes still alive {timeout:?} later:\n{}",
            describe(&alive)
        );
    }
    took
}

/// Kills (SIGKILL, by pid) every process still matching `needle` when dropped, so a failing
/// test never leaves its `sleep 300`s behind. The needle always contains a `marker()`, so only
/// processes this test started can match.
pub struct Reaper(pub String);

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in procs_matching(&self.0) {
            unsafe {
                libc::kill(p.pid, libc::SIGKILL);
            }
        }
    }
}

pub fn kill(pid: i32, sig: i32) {
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
}

/// `(VmRSS, VmHWM)` of a process in KiB.
pub fn rss_hwm_kib(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        s.lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

// ---------------------------------------------------------------------------------------------
// Temporary directories (a fake HOME for the approval tests)
// ---------------------------------------------------------------------------------------------

/// A private directory used as the gateway's `HOME`, so that `~` in the (harmless) dangerous
/// commands of the tests points somewhere disposable.
pub fn fake_home() -> common::TempHome {
    common::TempHome::new("home")
}

pub fn make_dir_with_file(p: &Path) {
    std::fs::create_dir_all(p).unwrap();
    std::fs::write(p.join("keep.txt"), b"x").unwrap();
}

// ---------------------------------------------------------------------------------------------
// Turns with tool calls
// ---------------------------------------------------------------------------------------------

/// Submits a prompt on an idle session (asserting `streaming`); returns the frame index the
/// turn's events start from.
pub fn submit(g: &mut Gateway, sid: &str, text: &str) -> usize {
    let start = g.frames.len();
    let r = g.call("prompt.submit", json!({"session_id": sid, "text": text}));
    assert_eq!(
        r["status"], "streaming",
        "prompt.submit on idle session: {r}"
    );
    start
}

/// Event types (in order) of a list of event params.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Events of one session in the frame log from index `start`.
pub fn session_events_from(g: &mut Gateway, sid: &str, start: usize) -> Vec<Value> {
    g.drain_available();
    g.frames[start..]
        .iter()
        .filter(|f| common::event_type(f).is_some() && f["params"]["session_id"] == sid)
        .map(|f| f["params"].clone())
        .collect()
}

/// The `result` of a `tool.complete` payload.
pub fn tool_result(complete: &Value) -> &Value {
    &complete["payload"]["result"]
}

/// A message row of `state.db`.
#[derive(Clone, Debug)]
pub struct MsgRow {
    pub id: i64,
    pub role: String,
    pub content: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_calls: Option<String>,
    pub tool_name: Option<String>,
    pub finish_reason: Option<String>,
    pub timestamp: f64,
}

pub fn message_rows(db_path: &Path, stored: &str) -> Vec<MsgRow> {
    let db = common::open_db(db_path);
    let mut st = db
        .prepare(
            "SELECT id, role, content, tool_call_id, tool_calls, tool_name, finish_reason, timestamp
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
        })
    })
    .unwrap()
    .map(|r| r.unwrap())
    .collect()
}

/// The parsed JSON `content` of the `tool` row answering `call_id`.
pub fn tool_row_content(db_path: &Path, stored: &str, call_id: &str) -> Value {
    let rows = message_rows(db_path, stored);
    let row = rows
        .iter()
        .find(|r| r.role == "tool" && r.tool_call_id.as_deref() == Some(call_id))
        .unwrap_or_else(|| panic!("no tool row for {call_id} in {rows:#?}"));
    serde_json::from_str(row.content.as_deref().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("tool row content is not JSON ({e}): {row:?}"))
}

/// Waits for the next `tool.output` of `sid` whose accumulated text contains `needle`
/// (concatenating every `tool.output` of the session seen so far); panics on timeout.
pub fn wait_output_containing(g: &mut Gateway, sid: &str, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut acc = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match g.try_wait_session_event(sid, "tool.output", left) {
            Some(e) => {
                acc.push_str(e["payload"]["text"].as_str().unwrap_or(""));
                if acc.contains(needle) {
                    return;
                }
            }
            None => panic!(
                "no tool.output containing {needle:?} within {timeout:?} (got {acc:?})\n{}",
                g.diag()
            ),
        }
    }
}

/// Waits until a frame matching `pred` has been received (taken or not), without taking it,
/// so that the harness's turn helpers still find it.
pub fn see_frame<F: Fn(&Value) -> bool>(g: &mut Gateway, pred: F, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut idx = 0;
    loop {
        while idx < g.frames.len() {
            if pred(&g.frames[idx]) {
                return;
            }
            idx += 1;
        }
        if !g.pump_until(deadline) && (g.stdout_closed || Instant::now() >= deadline) {
            panic!(
                "expected frame not received within {timeout:?}\n{}",
                g.diag()
            );
        }
    }
}
