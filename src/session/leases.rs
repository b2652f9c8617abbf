//! Hermes' cap on open chat sessions across processes (`max_concurrent_sessions`): each open
//! session holds a lease in `$HERMES_HOME/runtime/active_sessions.json`, read and rewritten
//! under the `flock` of `active_sessions.lock` beside it, in Hermes' format, so Hermes' own
//! gateways and CLI and this one count each other's sessions. A lease of a process that died
//! (its pid gone, or reused: the start time differs) is pruned by whoever takes the lock next.
//! No cap configured (Hermes' default): no lease, no file. The lock is only tried, within a
//! few milliseconds, never waited on: a session opened while another process holds it longer
//! is not counted (Hermes does the same when its claim fails).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde_json::{Value, json};

use crate::clock::Budget;
use crate::config_file;
use crate::private_file;
use yaml_rust2::Yaml;

/// Larger registries are not read (a lease is ~300 bytes).
const FILE_MAX: u64 = 4 * 1024 * 1024;
/// How long a claim tries the lock before going on without a lease.
const LOCK_TRIES_FOR: Duration = Duration::from_millis(5);

/// Hermes' error code for a session refused at the cap.
pub const LIMIT_CODE: i64 = 4090;

/// The cap from `config.yaml` (`max_concurrent_sessions`, else
/// `gateway.max_concurrent_sessions`), as Hermes reads it: a positive whole number, anything
/// else (0, null, a bool, a fraction, text) disables it.
pub fn cap(config: &Yaml) -> Option<u64> {
    let top = config_file::lookup(config, "max_concurrent_sessions");
    let raw = match top {
        Yaml::BadValue => config_file::lookup(config, "gateway.max_concurrent_sessions"),
        v => v,
    };
    let n = match raw {
        Yaml::Integer(n) => *n,
        Yaml::Real(r) => {
            let f: f64 = r.parse().ok()?;
            if f.fract() != 0.0 || !f.is_finite() {
                return None;
            }
            f as i64
        }
        Yaml::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    u64::try_from(n).ok().filter(|n| *n > 0)
}

/// Hermes' words for a refusal at the cap.
pub fn limit_message(active: usize, cap: u64) -> String {
    format!(
        "Hermes is at the active session limit ({active}/{cap}). Try again when another session finishes."
    )
}

/// One open session's place in the registry, given back when dropped.
#[derive(Debug)]
pub struct Lease {
    id: String,
    /// The home whose registry holds it.
    dir: PathBuf,
    clock: crate::clock::Clock,
    /// What a transfer needs to put the record back when it went missing.
    cap: u64,
    surface: String,
    live_id: String,
}

/// What a claim came to.
#[derive(Debug)]
pub enum Claim {
    /// Counted: keep the lease while the session is open.
    Held(Lease),
    /// No cap, or the registry could not be used (said on stderr): open, uncounted.
    Uncounted,
    /// At the cap: Hermes' message.
    Refused(String),
}

/// Claim a place for stored session `session_id` (runtime id `live_id`, opened by `surface`).
pub fn claim(
    home: &Path,
    cap: Option<u64>,
    session_id: &str,
    live_id: &str,
    surface: &str,
    clock: crate::clock::Clock,
) -> Claim {
    let Some(cap) = cap else {
        return Claim::Uncounted;
    };
    let dir = home.to_path_buf();
    let lease_id = new_lease_id();
    let result = with_registry(&dir, clock, |entries| {
        add_record(entries, cap, &lease_id, session_id, surface, live_id)
    });
    match result {
        Ok(Ok(())) => Claim::Held(Lease {
            id: lease_id,
            dir,
            clock,
            cap,
            surface: surface.to_string(),
            live_id: live_id.to_string(),
        }),
        Ok(Err(message)) => Claim::Refused(message),
        Err(why) => {
            crate::diag!("[sessions] {why}; session {session_id} is not counted");
            Claim::Uncounted
        }
    }
}

/// Lease `lease_id`'s record added to `entries`, unless they are at the cap (Hermes' refusal).
fn add_record(
    entries: &mut Vec<Value>,
    cap: u64,
    lease_id: &str,
    session_id: &str,
    surface: &str,
    live_id: &str,
) -> Result<(), String> {
    if entries.len() as u64 >= cap {
        return Err(limit_message(entries.len(), cap));
    }
    let now = crate::util::unix_now();
    entries.push(json!({
        "lease_id": lease_id,
        "session_id": session_id,
        "surface": surface,
        "pid": std::process::id(),
        "process_start_time": process_start_time(std::process::id()),
        "started_at": now,
        "updated_at": now,
        "metadata": {"live_session_id": live_id},
    }));
    Ok(())
}

impl Lease {
    /// The session went on under a new stored id (a compaction's continuation). A record that
    /// went missing from the registry (pruned, or the file rewritten by another process) is put
    /// back under the new id if there is room, as Hermes' transfer claims a new place then.
    pub fn transfer(&self, session_id: &str) {
        let result = with_registry(&self.dir, self.clock, |entries| {
            let mine = entries
                .iter_mut()
                .find(|e| e["lease_id"] == self.id.as_str());
            match mine {
                Some(e) => {
                    e["session_id"] = json!(session_id);
                    e["updated_at"] = json!(crate::util::unix_now());
                    Ok(())
                }
                None => add_record(
                    entries,
                    self.cap,
                    &self.id,
                    session_id,
                    &self.surface,
                    &self.live_id,
                ),
            }
        });
        match result {
            Ok(Ok(())) => {}
            Ok(Err(refused)) => {
                crate::diag!("[sessions] session {session_id} is not counted: {refused}")
            }
            Err(why) => crate::diag!("[sessions] {why}; the lease keeps its old session id"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let result = with_registry(&self.dir, self.clock, |entries| {
            entries.retain(|e| e["lease_id"] != self.id.as_str());
            Ok::<(), ()>(())
        });
        if let Err(why) = result {
            // Pruned by the next claim once this process is gone.
            crate::diag!(
                "[sessions] {why}; lease {} left for the next to prune",
                self.id
            );
        }
    }
}

/// Under `home`'s registry lock: read it, prune the dead, let `change` work on the entries,
/// write it back. `Err` when the lock or the file could not be used.
fn with_registry<T, E>(
    home: &Path,
    clock: crate::clock::Clock,
    change: impl FnOnce(&mut Vec<Value>) -> Result<T, E>,
) -> Result<Result<T, E>, String> {
    let dir = private_file::private_dir(home, &["runtime"])
        .map_err(|e| format!("cannot use {}/runtime: {e}", home.display()))?;
    let _held = lock(&dir.join("active_sessions.lock"), clock)?;
    let path = dir.join("active_sessions.json");
    let mut entries = read_entries(&path);
    entries.retain(lease_alive);
    let outcome = change(&mut entries);
    let text = serde_json::to_string(&json!({ "entries": entries })).unwrap_or_default();
    private_file::replace(&path, text.as_bytes(), 0o600)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(outcome)
}

/// The lock, tried for a few milliseconds.
fn lock(path: &Path, clock: crate::clock::Clock) -> Result<Flock<std::fs::File>, String> {
    let budget = Budget::of(clock, clock.now(), LOCK_TRIES_FOR);
    loop {
        let file = private_file::append(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Ok(held),
            Err((_, Errno::EWOULDBLOCK)) if !budget.spent() => {
                std::thread::sleep(Duration::from_micros(500));
            }
            Err((_, e)) => return Err(format!("cannot lock {}: {e}", path.display())),
        }
    }
}

/// The entries as Hermes reads them (`{"entries": [...]}` or a bare list); anything else, or
/// an unreadable file, is an empty registry.
fn read_entries(path: &Path) -> Vec<Value> {
    let Ok(Some(bytes)) = private_file::read(path, FILE_MAX) else {
        return Vec::new();
    };
    let data: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let list = match data {
        Value::Object(mut m) => m.remove("entries").unwrap_or(Value::Null),
        other => other,
    };
    match list {
        Value::Array(items) => items.into_iter().filter(Value::is_object).collect(),
        _ => Vec::new(),
    }
}

/// Whether the process that took this lease is still the one running under its pid.
fn lease_alive(entry: &Value) -> bool {
    let pid = match &entry["pid"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    let Some(pid) = pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0) else {
        return false;
    };
    if !Path::new(&format!("/proc/{pid}")).exists() || crate::store::exited(pid) {
        return false;
    }
    let expected = match &entry["process_start_time"] {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match (expected, process_start_time(pid)) {
        (Some(expected), Some(now)) => (now - expected).abs() < 0.001,
        _ => true,
    }
}

/// When process `pid` started, in seconds since the epoch, computed as Hermes' `psutil` does
/// (boot time plus the start in clock ticks), so both compare equal.
fn process_start_time(pid: u32) -> Option<f64> {
    let stat = crate::util::read_proc(&format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let boot: f64 = crate::util::read_proc("/proc/stat")?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions and touches no memory of ours.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks / per_second as f64 + boot)
}

/// A lease id as unique as Hermes' (a uuid4's hex): this process, the time, a counter.
fn new_lease_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let micros = (crate::util::unix_now() * 1e6) as u64;
    format!("{:08x}{micros:016x}{n:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Yaml {
        config_file::parse(text).unwrap()
    }

    #[test]
    fn the_cap_is_read_as_hermes_reads_it() {
        assert_eq!(cap(&yaml("max_concurrent_sessions: 3")), Some(3));
        assert_eq!(
            cap(&yaml("gateway:\n  max_concurrent_sessions: 2")),
            Some(2)
        );
        assert_eq!(cap(&yaml("max_concurrent_sessions: '4'")), Some(4));
        assert_eq!(cap(&yaml("max_concurrent_sessions: 5.0")), Some(5));
        for off in ["0", "-1", "null", "true", "2.5", "many"] {
            assert_eq!(
                cap(&yaml(&format!("max_concurrent_sessions: {off}"))),
                None,
                "{off}"
            );
        }
        assert_eq!(cap(&yaml("model: {}")), None);
    }

    fn registry(home: &Path) -> Vec<Value> {
        read_entries(&home.join("runtime/active_sessions.json"))
    }

    #[test]
    fn a_transfer_puts_back_a_record_that_went_missing_if_there_is_room() {
        let home = std::env::temp_dir().join(format!("tuigw-unit-leases-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let clock = crate::clock::Clock::SYSTEM;
        let Claim::Held(lease) = claim(&home, Some(2), "old", "rid1", "tui", clock) else {
            panic!("not held");
        };
        lease.transfer("moved");
        let held = registry(&home);
        assert_eq!(held.len(), 1);
        assert_eq!(held[0]["session_id"], "moved");

        // Another process rewrote the file without it: put back, under the new id.
        let file = home.join("runtime/active_sessions.json");
        std::fs::write(&file, r#"{"entries": []}"#).unwrap();
        lease.transfer("next");
        let held = registry(&home);
        assert_eq!(held.len(), 1);
        assert_eq!(held[0]["lease_id"], lease.id.as_str());
        assert_eq!(held[0]["session_id"], "next");
        assert_eq!(held[0]["metadata"]["live_session_id"], "rid1");

        // No room left meanwhile: it stays out (Hermes keeps the old lease, counted nowhere).
        let other = |n: &str| json!({"lease_id": n, "session_id": n, "pid": std::process::id()});
        let full = json!({"entries": [other("a"), other("b")]});
        std::fs::write(&file, full.to_string()).unwrap();
        lease.transfer("last");
        let ids: Vec<Value> = registry(&home)
            .iter()
            .map(|e| e["lease_id"].clone())
            .collect();
        assert_eq!(ids, [json!("a"), json!("b")]);
        drop(lease);
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = std::process::id();
        let start = process_start_time(me).expect("readable here");
        assert!(lease_alive(
            &json!({"pid": me, "process_start_time": start})
        ));
        assert!(
            lease_alive(&json!({"pid": me})),
            "no start time: the pid decides"
        );
        assert!(!lease_alive(
            &json!({"pid": me, "process_start_time": start - 10.0})
        ));
        assert!(!lease_alive(&json!({"pid": 0})));
        assert!(!lease_alive(&json!({"pid": "nope"})));
    }
}
