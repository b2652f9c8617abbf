//! Processes through Linux /proc, for the tests that check what happens to the commands a tool
//! call or `shell.exec` starts (`tests/procs`, `tests/crashkit`): a marker unique to the test,
//! finding processes by that marker in their command line, and waiting for them to be gone.
//!
//! Every wait is "poll a condition until a deadline"; the short sleeps inside polling loops only
//! pace the polling, they never stand in for synchronisation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static SEQ: AtomicU64 = AtomicU64::new(1);

/// A number unique to this test process and call, usable as a fractional `sleep` argument
/// (`sleep 300.<marker>`, so every process of a command — supervisor, shell, sleep — carries it)
/// or a file-name suffix: `<test pid, 7 digits><counter, 4 digits>`. Fixed width, so no marker
/// is a prefix of another one (other test binaries may run at the same time).
pub fn marker() -> String {
    format!(
        "{:07}{:04}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

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

/// Polls `cond` every few milliseconds until it holds or `timeout` passes; returns whether it
/// held.
pub fn poll_until<F: FnMut() -> bool>(timeout: Duration, mut cond: F) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for a `comm` process whose command line contains `needle`; returns the first one.
pub fn wait_for_proc(comm: &str, needle: &str, timeout: Duration) -> Proc {
    let mut found = Vec::new();
    let ok = poll_until(timeout, || {
        found = procs_named(comm, needle);
        !found.is_empty()
    });
    assert!(
        ok,
        "no {comm} process matching {needle:?} within {timeout:?}; all matching:\n{}",
        describe(&procs_matching(needle))
    );
    found.remove(0)
}

/// Waits until `n` (or more) `comm` processes matching `needle` run; returns them.
pub fn wait_for_procs(comm: &str, needle: &str, n: usize, timeout: Duration) -> Vec<Proc> {
    let mut found = Vec::new();
    let ok = poll_until(timeout, || {
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
    let start = Instant::now();
    if !poll_until(timeout, || pids.iter().all(|p| is_gone(*p))) {
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
    start.elapsed()
}

/// Asserts that no process matching `needle` is left within `timeout`.
pub fn assert_none_left(needle: &str, timeout: Duration, what: &str) {
    let ok = poll_until(timeout, || procs_matching(needle).is_empty());
    assert!(
        ok,
        "{what}: processes matching {needle:?} still alive {timeout:?} later:\n{}",
        describe(&procs_matching(needle))
    );
}

/// SIGKILLs (by pid) every process still matching `needle` when dropped, so a failing test
/// never leaves its `sleep 300`s behind. Needles always contain a `marker()`, so only processes
/// this test started can match.
pub struct Reaper(pub String);

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in procs_matching(&self.0) {
            // SAFETY: plain kill(2) of a pid we just found carrying our own unique marker.
            unsafe {
                libc::kill(p.pid, libc::SIGKILL);
            }
        }
    }
}

pub fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
}

/// The KiB value of one `/proc/<pid>/status` line (`VmRSS:`, `VmHWM:`, ...).
fn status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(name))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Resident set size of a process in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_kib(&s, "VmRSS:")
}

/// `(VmRSS, VmHWM)` of a process in KiB.
pub fn rss_hwm_kib(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some((status_kib(&s, "VmRSS:")?, status_kib(&s, "VmHWM:")?))
}

/// The pid of the persistent gateway serving `home` (from its lock file), if one runs.
pub fn persistent_gateway(home: &std::path::Path) -> Option<i32> {
    let text = std::fs::read_to_string(home.join("tui-gateway.lock")).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    is_our_daemon(pid).then_some(pid)
}

/// A live `tui-gateway daemon` process (not a reused pid, not a zombie).
pub fn is_our_daemon(pid: i32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    !is_gone(pid) && args.get(1) == Some(&&b"daemon"[..])
}
