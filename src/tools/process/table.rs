//! The background processes of every session, by id (`proc_` + 12 hex, Hermes' shape): what
//! each ran, its output (bounded), how it ended, who waits for it, and the JSON the `process`
//! tool answers with. Pure state: no processes, the clock comes in as `now`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::buffer::OutputBuffer;
use crate::runner::RunId;
use crate::tools::JobId;
use crate::util;

/// Output kept per process (Hermes keeps 200,000 characters).
pub const OUTPUT_CAP: usize = 200_000;
/// Processes tracked at once (Hermes' `MAX_PROCESSES`); past it the oldest finished one goes.
pub const MAX_PROCESSES: usize = 64;
/// A finished process is forgotten this long after it started (Hermes' `FINISHED_TTL_SECONDS`).
pub const FINISHED_TTL: Duration = Duration::from_secs(1800);

/// How a process ended, in Hermes' words.
#[derive(Debug, Clone, PartialEq)]
pub struct Exit {
    /// `None` when unknown.
    pub code: Option<i32>,
    /// `exited`, `killed` or `failed_start`.
    pub reason: &'static str,
    /// Who killed it (`process.kill`, `kill_all`, `timeout`), empty otherwise.
    pub source: &'static str,
}

pub struct Entry {
    pub id: String,
    /// The runtime id of the session that started it.
    pub owner: String,
    pub command: String,
    pub cwd: String,
    started: Instant,
    started_unix: f64,
    /// The run, while the runner has it.
    pub run: Option<RunId>,
    /// The command's pid, once the runner knows it (`null` before, as Hermes says it).
    pub pid: Option<i32>,
    pub exit: Option<Exit>,
    ended: Option<Instant>,
    pub notify: bool,
    /// The model read its end (`wait`, `log` to the end, `kill`): no notification then.
    pub consumed: bool,
    /// Shared with a `process wait` on it, whose interrupt answers with the output so far.
    pub output: SharedOutput,
    /// `process wait` calls to step when it ends.
    waiters: Vec<JobId>,
}

/// A process's output, as its entry and the waits on it read it.
pub type SharedOutput = Rc<RefCell<OutputBuffer>>;

/// A `process wait` answered before the process ended (`timeout`, `interrupted`): the last of
/// the output so far.
pub fn not_ended(status: &str, command: &str, output: &SharedOutput) -> Value {
    json!({"status": status, "command": command, "output": output.borrow().tail(1000)})
}

impl Entry {
    fn tail(&self, max: usize) -> String {
        self.output.borrow().tail(max)
    }

    fn status(&self) -> &'static str {
        if self.exit.is_some() {
            "exited"
        } else {
            "running"
        }
    }

    fn uptime(&self, now: Instant) -> u64 {
        self.ended
            .unwrap_or(now)
            .saturating_duration_since(self.started)
            .as_secs()
    }

    /// The fields of how it ended, added to `result`.
    fn add_exit(&self, result: &mut Value) {
        if let Some(exit) = &self.exit {
            result["exit_code"] = json!(exit.code);
            result["completion_reason"] = json!(exit.reason);
            result["termination_source"] = json!(exit.source);
        }
    }

    /// `process list`'s entry.
    pub fn listed(&self, now: Instant) -> Value {
        let (y, mo, d, h, mi, s) = util::utc_parts(self.started_unix);
        let mut entry = json!({
            "session_id": self.id,
            "command": util::clip(&self.command, 200),
            "cwd": self.cwd,
            "pid": self.pid,
            "started_at": format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}"),
            "uptime_seconds": self.uptime(now),
            "status": self.status(),
            "output_preview": self.tail(200),
        });
        if self.notify {
            entry["notify_on_complete"] = json!(true);
        }
        if let Some(exit) = &self.exit {
            entry["exit_code"] = json!(exit.code);
        }
        entry
    }

    /// `process poll`: status and the last of the output.
    pub fn poll(&self, now: Instant) -> Value {
        let mut result = json!({
            "session_id": self.id,
            "command": self.command,
            "status": self.status(),
            "pid": self.pid,
            "uptime_seconds": self.uptime(now),
            "output_preview": self.tail(1000),
        });
        self.add_exit(&mut result);
        result
    }

    /// `process log`: lines of the output kept; by default the last `limit`, from `offset`
    /// when it is given. Reading an exited process's output to its end consumes its end.
    pub fn log(&mut self, offset: usize, limit: usize) -> Value {
        let output = self.output.borrow();
        let text = output.text();
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        let (from, to) = if offset == 0 {
            (total.saturating_sub(limit), total)
        } else {
            let from = offset.min(total);
            (from, from.saturating_add(limit).min(total))
        };
        let selected = &lines[from..to];
        let mut result = json!({
            "session_id": self.id,
            "command": self.command,
            "status": self.status(),
            "output": selected.join("\n"),
            "total_lines": total,
            "showing": format!("{} lines", selected.len()),
        });
        if output.dropped() > 0 {
            result["dropped_bytes"] = json!(output.dropped());
            result["note"] = json!(format!(
                "the first {} bytes of output were dropped: only the last {} bytes are kept",
                output.dropped(),
                output.cap()
            ));
        }
        drop(output);
        if self.exit.is_some() && (total == 0 || (!selected.is_empty() && to == total)) {
            self.consumed = true;
        }
        result
    }

    /// `process wait` once it ended (consumes its end).
    pub fn waited(&mut self) -> Value {
        self.ended_as("exited")
    }

    /// `process wait` given up at its timeout.
    pub fn still_running(&self, status: &str) -> Value {
        not_ended(status, &self.command, &self.output)
    }

    /// `process kill` of a process that had ended already.
    pub fn already_exited(&mut self) -> Value {
        self.ended_as("already_exited")
    }

    /// An answer that reports the end (consumed: no notice turn follows).
    fn ended_as(&mut self, status: &str) -> Value {
        self.consumed = true;
        let mut result = json!({
            "status": status,
            "command": self.command,
            "output": self.tail(2000),
        });
        self.add_exit(&mut result);
        result
    }

    /// `process kill` of a running process.
    pub fn killed(&self) -> Value {
        json!({
            "status": "killed",
            "session_id": self.id,
            "completion_reason": "killed",
            "termination_source": "process.kill",
            "output": self.tail(2000),
        })
    }

    /// What the model is told when it ends and asked to be (`notify_on_complete`), in
    /// Hermes' words (`format_process_notification`).
    pub fn notification(&self) -> String {
        let exit = self.exit.as_ref();
        let code = exit.and_then(|e| e.code);
        let status = match exit {
            Some(e) if e.reason == "killed" => format!(
                "terminated by {}",
                if e.source.is_empty() {
                    "Hermes"
                } else {
                    e.source
                }
            ),
            Some(e) if e.reason == "failed_start" => "failed to start".to_string(),
            _ if code == Some(0) => "completed normally".to_string(),
            _ => "exited".to_string(),
        };
        let signal = match code {
            Some(-15 | 143) => ", SIGTERM",
            _ => "",
        };
        let code = code.map_or("?".to_string(), |c| c.to_string());
        format!(
            "[IMPORTANT: Background process {} {status} (exit code {code}{signal}).\nCommand: {}\nOutput:\n{}]",
            self.id,
            self.command,
            self.tail(2000)
        )
    }
}

/// A turn a process's end starts in the session that owns it (`notify_on_complete`).
#[derive(Debug, PartialEq)]
pub struct Notice {
    /// The session's runtime id.
    pub owner: String,
    pub text: String,
}

/// A new background process, as the terminal tool describes it.
pub struct NewProcess<'a> {
    pub owner: &'a str,
    pub command: &'a str,
    pub cwd: &'a str,
    pub notify: bool,
    pub run: RunId,
    /// The shell state's restore file the run sources (removed when the run ends).
    pub restore: Option<PathBuf>,
}

#[derive(Default)]
pub struct Processes {
    entries: HashMap<String, Entry>,
    by_run: HashMap<RunId, String>,
    /// The restore files of runs not ended yet (kept past their entry: a session gone).
    restore_files: HashMap<RunId, PathBuf>,
    /// Runs started by a tool and not yet in the poll.
    unwatched: Vec<(RunId, String)>,
    /// `process wait` calls whose process ended, to step.
    woken: Vec<JobId>,
}

impl Processes {
    /// Whether one more can be tracked, after forgetting what may be forgotten.
    pub fn has_room(&mut self, now: Instant) -> bool {
        self.entries.retain(|_, e| {
            e.exit.is_none() || now.saturating_duration_since(e.started) < FINISHED_TTL
        });
        while self.entries.len() >= MAX_PROCESSES {
            let oldest = self
                .entries
                .values()
                .filter(|e| e.exit.is_some())
                .min_by_key(|e| e.started)
                .map(|e| e.id.clone());
            match oldest {
                Some(id) => {
                    self.entries.remove(&id);
                }
                None => return false,
            }
        }
        true
    }

    /// Track a process just started (call [`Processes::has_room`] first); its id.
    pub fn add(&mut self, p: NewProcess<'_>, now: Instant) -> String {
        let mut id = format!("proc_{}", util::random_hex(12));
        while self.entries.contains_key(&id) {
            id = format!("proc_{}", util::random_hex(12));
        }
        self.entries.insert(
            id.clone(),
            Entry {
                id: id.clone(),
                owner: p.owner.to_string(),
                command: p.command.to_string(),
                cwd: p.cwd.to_string(),
                started: now,
                started_unix: util::unix_now(),
                run: Some(p.run),
                pid: None,
                exit: None,
                ended: None,
                notify: p.notify,
                consumed: false,
                output: Rc::new(RefCell::new(OutputBuffer::new(OUTPUT_CAP))),
                waiters: Vec::new(),
            },
        );
        self.by_run.insert(p.run, id.clone());
        if let Some(file) = p.restore {
            self.restore_files.insert(p.run, file);
        }
        self.unwatched.push((p.run, id.clone()));
        id
    }

    /// The runs added since the last call, for the gateway to watch.
    pub fn take_unwatched(&mut self) -> Vec<(RunId, String)> {
        std::mem::take(&mut self.unwatched)
    }

    /// A process of session `owner` (another session's is not found).
    pub fn get_mut(&mut self, owner: &str, id: &str) -> Option<&mut Entry> {
        self.entries.get_mut(id).filter(|e| e.owner == owner)
    }

    /// The session a process belongs to.
    pub fn owner_of(&self, id: &str) -> Option<String> {
        self.entries.get(id).map(|e| e.owner.clone())
    }

    /// The processes of session `owner`, oldest first.
    pub fn list(&self, owner: &str, now: Instant) -> Vec<Value> {
        let mut mine: Vec<&Entry> = self.entries.values().filter(|e| e.owner == owner).collect();
        mine.sort_by_key(|e| e.started);
        mine.into_iter().map(|e| e.listed(now)).collect()
    }

    /// The output of a run, to the process it is.
    pub fn push_output(&mut self, run: RunId, bytes: &[u8]) {
        if let Some(e) = self
            .by_run
            .get(&run)
            .and_then(|id| self.entries.get_mut(id))
        {
            e.output.borrow_mut().push(bytes);
        }
    }

    /// Make `job` step when process `id` ends.
    pub fn add_waiter(&mut self, id: &str, job: JobId) {
        if let Some(e) = self.entries.get_mut(id) {
            e.waiters.push(job);
        }
    }

    /// Process `id` is over (killed, or its run ended): the first end is the one kept; its
    /// waiters are woken ([`Processes::take_woken`]). The turn it starts, if it asked for one
    /// and the model has not read its end yet.
    pub fn mark_exited(&mut self, id: &str, exit: Exit, now: Instant) -> Option<Notice> {
        let e = self.entries.get_mut(id)?;
        self.woken.append(&mut e.waiters);
        if e.exit.is_some() {
            return None;
        }
        e.exit = Some(exit);
        e.ended = Some(now);
        (e.notify && !e.consumed).then(|| Notice {
            owner: e.owner.clone(),
            text: e.notification(),
        })
    }

    /// The `process wait` calls whose process ended since the last call.
    pub fn take_woken(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.woken)
    }

    /// The run of a process ended (`pid`: the command's, when the runner knew it): it is no
    /// longer the runner's.
    pub fn run_ended(&mut self, run: RunId, pid: Option<i32>) -> Option<String> {
        let id = self.by_run.remove(&run)?;
        if let Some(e) = self.entries.get_mut(&id) {
            e.run = None;
            e.pid = e.pid.or(pid);
        }
        Some(id)
    }

    /// The restore file of a run that ended, for the caller to remove.
    pub fn take_restore_file(&mut self, run: RunId) -> Option<PathBuf> {
        self.restore_files.remove(&run)
    }

    /// Note the pids the runner learnt since (`pid_of` a run).
    pub fn learn_pids(&mut self, pid_of: impl Fn(RunId) -> Option<i32>) {
        for e in self.entries.values_mut().filter(|e| e.pid.is_none()) {
            e.pid = e.run.and_then(&pid_of);
        }
    }

    /// The running processes (of `owner`, or of every session): (id, run).
    pub fn running(&self, owner: Option<&str>) -> Vec<(String, RunId)> {
        let mut list: Vec<(Instant, String, RunId)> = self
            .entries
            .values()
            .filter(|e| e.exit.is_none() && owner.is_none_or(|o| o == e.owner))
            .filter_map(|e| e.run.map(|r| (e.started, e.id.clone(), r)))
            .collect();
        list.sort();
        list.into_iter().map(|(_, id, run)| (id, run)).collect()
    }

    /// Whether session `owner` has a process running (the idle reaper spares it then).
    pub fn any_running(&self, owner: &str) -> bool {
        self.entries
            .values()
            .any(|e| e.exit.is_none() && e.run.is_some() && e.owner == owner)
    }

    /// Session `owner` is gone: forget its processes (their runs, still the runner's, are
    /// the caller's to stop); returns those runs.
    pub fn forget_owner(&mut self, owner: &str) -> Vec<RunId> {
        let runs = self
            .running(Some(owner))
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        self.entries.retain(|_, e| e.owner != owner);
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(p: &mut Processes, owner: &str, run: u64, notify: bool, now: Instant) -> String {
        assert!(p.has_room(now));
        p.add(
            NewProcess {
                owner,
                command: "sleep 1",
                cwd: "/tmp",
                notify,
                run: RunId(run),
                restore: None,
            },
            now,
        )
    }

    fn exited(code: i32) -> Exit {
        Exit {
            code: Some(code),
            reason: "exited",
            source: "",
        }
    }

    #[test]
    fn a_process_is_seen_only_by_its_session_and_ends_once() {
        let t0 = Instant::now();
        let mut p = Processes::default();
        let id = add(&mut p, "s1", 7, true, t0);
        assert!(id.starts_with("proc_") && id.len() == 17, "{id}");
        assert_eq!(p.take_unwatched(), vec![(RunId(7), id.clone())]);
        assert!(p.take_unwatched().is_empty());
        assert!(p.get_mut("s2", &id).is_none());
        assert_eq!(p.list("s2", t0), Vec::<Value>::new());
        p.push_output(RunId(7), b"one\ntwo\n");
        let listed = &p.list("s1", t0 + Duration::from_secs(3))[0];
        assert_eq!(listed["status"], "running");
        assert_eq!(listed["uptime_seconds"], 3);
        assert_eq!(listed["output_preview"], "one\ntwo\n");
        assert_eq!(listed["notify_on_complete"], true);
        p.add_waiter(&id, JobId(3));
        let notice = p
            .mark_exited(&id, exited(0), t0 + Duration::from_secs(5))
            .unwrap();
        assert_eq!(p.take_woken(), vec![JobId(3)]);
        assert_eq!(notice.owner, "s1");
        assert_eq!(
            notice.text,
            format!(
                "[IMPORTANT: Background process {id} completed normally (exit code 0).\nCommand: sleep 1\nOutput:\none\ntwo\n]"
            )
        );
        // A second end (the run's, after a kill) changes nothing and tells nobody.
        p.add_waiter(&id, JobId(4));
        assert_eq!(
            p.mark_exited(&id, exited(1), t0 + Duration::from_secs(9)),
            None
        );
        assert_eq!(p.take_woken(), vec![JobId(4)]);
        let e = p.get_mut("s1", &id).unwrap();
        assert_eq!(e.poll(t0 + Duration::from_secs(60))["uptime_seconds"], 5);
        assert_eq!(e.poll(t0)["exit_code"], 0);
        // The pid, null until the runner knows it, is kept past the run's end.
        assert_eq!(p.list("s1", t0)[0]["pid"], Value::Null);
        p.learn_pids(|_| None);
        assert_eq!(p.list("s1", t0)[0]["pid"], Value::Null);
        p.learn_pids(|r| (r == RunId(7)).then_some(4321));
        assert_eq!(p.run_ended(RunId(7), None), Some(id.clone()));
        assert_eq!(p.list("s1", t0)[0]["pid"], 4321);
        assert!(p.running(None).is_empty());
    }

    #[test]
    fn reading_the_end_consumes_the_notification() {
        let t0 = Instant::now();
        let mut p = Processes::default();
        let id = add(&mut p, "s", 1, true, t0);
        p.get_mut("s", &id).unwrap().consumed = true;
        assert_eq!(p.mark_exited(&id, exited(0), t0), None);
        // A kill by /stop is not consumed: the model hears of it.
        let id = add(&mut p, "s", 2, true, t0);
        let kill = Exit {
            code: Some(-15),
            reason: "killed",
            source: "kill_all",
        };
        let text = p.mark_exited(&id, kill, t0).unwrap().text;
        assert!(
            text.contains("terminated by kill_all (exit code -15, SIGTERM)"),
            "{text}"
        );
        // log to the end of an exited process consumes it; a page before the end does not.
        let id = add(&mut p, "s", 3, true, t0);
        p.push_output(RunId(3), b"a\nb\nc\n");
        p.mark_exited(&id, exited(2), t0);
        let e = p.get_mut("s", &id).unwrap();
        let page = e.log(1, 1);
        assert_eq!(
            (&page["output"], &page["total_lines"], &page["showing"]),
            (&json!("b"), &json!(3), &json!("1 lines"))
        );
        assert!(!e.consumed);
        assert_eq!(e.log(0, 2)["output"], "b\nc");
        assert!(e.consumed);
        assert_eq!(
            e.notification().lines().next().unwrap(),
            format!("[IMPORTANT: Background process {id} exited (exit code 2).")
        );
    }

    #[test]
    fn log_says_what_the_cap_dropped() {
        let t0 = Instant::now();
        let mut p = Processes::default();
        let id = add(&mut p, "s", 1, false, t0);
        let line = "x".repeat(99) + "\n";
        for _ in 0..(OUTPUT_CAP / 100 + 10) {
            p.push_output(RunId(1), line.as_bytes());
        }
        let log = p.get_mut("s", &id).unwrap().log(0, 5);
        assert_eq!(log["dropped_bytes"], 1000);
        assert_eq!(log["total_lines"], OUTPUT_CAP / 100);
        assert!(
            log["note"]
                .as_str()
                .unwrap()
                .contains("only the last 200000 bytes")
        );
    }

    #[test]
    fn finished_processes_make_room_and_running_ones_do_not() {
        let t0 = Instant::now();
        let mut p = Processes::default();
        let ids: Vec<String> = (0..MAX_PROCESSES as u64)
            .map(|i| add(&mut p, "s", i, false, t0 + Duration::from_millis(i)))
            .collect();
        assert!(!p.has_room(t0), "64 running processes fill it");
        p.mark_exited(&ids[5], exited(0), t0);
        p.mark_exited(&ids[9], exited(0), t0);
        assert!(p.has_room(t0));
        // The oldest finished one went.
        assert!(p.get_mut("s", &ids[5]).is_none());
        assert!(p.get_mut("s", &ids[9]).is_some());
        // Past the TTL every finished one goes.
        assert!(p.has_room(t0 + FINISHED_TTL + Duration::from_secs(1)));
        assert!(p.get_mut("s", &ids[9]).is_none());
        assert_eq!(p.running(None).len(), MAX_PROCESSES - 2);
        assert!(p.any_running("s") && !p.any_running("other"));
        assert_eq!(p.forget_owner("s").len(), MAX_PROCESSES - 2);
        assert!(p.list("s", t0).is_empty());
    }
}
