//! Background processes: `terminal` with `background: true` starts one and answers at once
//! with its id; the `process` tool (`tool.rs`) lists, polls, reads, waits for, kills and
//! writes to them; `registry.rs` holds them (output bounded by `buffer.rs`). Each runs through
//! the process runner like any command (its supervisor, its pid namespace, killed when the
//! gateway goes however it goes), owned in `runs.rs` by the process rather than by the call,
//! so it outlives the call and the turn (an interrupt leaves it running); closing the session,
//! `process.stop` and the shutdown stop it. `notify_on_complete` makes its end a prompt of the
//! session that started it (queued behind a running turn), as Hermes' TUI gateway does; a
//! background delegation's result arrives the same way ([`notify`]).

mod buffer;
pub mod table;
mod tool;

use std::time::Instant;

use serde_json::json;

pub use table::Processes;
use table::{Exit, Notice};
pub use tool::{Launch, ProcessTool, start_background};

use super::runs::{self, Owner, RunOwners};
use crate::effects::Effect;
use crate::runner::{Ending, RunEnd, RunId};

/// What a tool call sees of the background processes: those of its session.
pub struct Scope<'a> {
    pub(crate) registry: &'a mut Processes,
    /// The calling session's runtime id.
    pub(crate) owner: &'a str,
}

/// After a tool's start or step: watch the runs of the processes it started, step the waits
/// its kills ended, and take the runner's timers.
pub(crate) fn after_tool(gw: &mut impl RunOwners, now: Instant) {
    for (run, id) in gw.tools().processes.take_unwatched() {
        if runs::watch(gw, run, Owner::Background(id.clone()), now).is_err() {
            // Not watched: the runner killed it already.
            forget_restore_file(gw, run);
            let processes = &mut gw.tools().processes;
            processes.run_ended(run, None);
            let exit = Exit {
                code: None,
                reason: "failed_start",
                source: "",
            };
            let notice = processes.mark_exited(&id, exit, now);
            deliver(gw, notice);
        }
    }
    deliver(gw, None);
    runs::after_runner(gw, now);
}

/// Output of a background run.
pub(crate) fn on_output(gw: &mut impl RunOwners, run: RunId, bytes: &[u8]) {
    gw.tools().processes.push_output(run, bytes);
}

/// A background run ended.
pub(crate) fn on_end(gw: &mut impl RunOwners, run: RunId, end: RunEnd, now: Instant) {
    forget_restore_file(gw, run);
    let processes = &mut gw.tools().processes;
    let Some(id) = processes.run_ended(run, end.pid) else {
        return;
    };
    let notice = processes.mark_exited(&id, exit_of(&end), now);
    deliver(gw, notice);
}

/// The shell state's restore file of a run that ended goes.
fn forget_restore_file(gw: &mut impl RunOwners, run: RunId) {
    if let Some(file) = gw.tools().processes.take_restore_file(run) {
        let _ = super::shell_state::remove_quietly(&file);
    }
}

/// How a run's end reads in Hermes' words.
fn exit_of(end: &RunEnd) -> Exit {
    let (code, reason, source) = match (&end.start_error, end.ending) {
        (Some(_), _) => (None, "failed_start", ""),
        (None, Some(Ending::Timeout)) => (Some(124), "killed", "timeout"),
        (None, Some(Ending::Interrupted)) => (Some(-15), "killed", "shutdown"),
        (None, None) => ((end.status >= 0).then_some(end.status), "exited", ""),
    };
    Exit {
        code,
        reason,
        source,
    }
}

/// Step the waits that ended; start the turn a notice asks for.
fn deliver(gw: &mut impl RunOwners, notice: Option<Notice>) {
    let tools = gw.tools();
    for job in tools.processes.take_woken() {
        tools.due.add(job);
    }
    let Some(Notice { owner, text }) = notice else {
        return;
    };
    notify(gw, owner, text);
}

/// Something session `owner` started in the background finished (a process that asked to be
/// told, a background delegation): its client sees `text` now, and it runs as the session's
/// next prompt, after a running turn. Whether it was delivered: not during the shutdown, not
/// to a session gone.
pub(crate) fn notify(gw: &mut impl RunOwners, owner: String, text: String) -> bool {
    if gw.shutting_down() || !gw.has_session(&owner) {
        return false;
    }
    gw.emit(
        &owner,
        "status.update",
        json!({"kind": "process", "text": text}),
    );
    gw.effects().push(Effect::SubmitPrompt { rid: owner, text });
    true
}

/// `process.stop`: kill the running background processes (of session `owner`, or of all);
/// how many. Those that asked to be notified start their turn, as in Hermes (`kill_all`).
pub(crate) fn kill_all(gw: &mut impl RunOwners, owner: Option<&str>, now: Instant) -> usize {
    let running = gw.tools().processes.running(owner);
    for (id, run) in &running {
        gw.runner().stop(*run, Ending::Interrupted, now);
        let exit = Exit {
            code: Some(-15),
            reason: "killed",
            source: "kill_all",
        };
        let notice = gw.tools().processes.mark_exited(id, exit, now);
        deliver(gw, notice);
    }
    runs::after_runner(gw, now);
    running.len()
}

/// Session `rid` is closing: its background processes are stopped and forgotten.
pub(crate) fn session_gone(gw: &mut impl RunOwners, rid: &str, now: Instant) {
    for run in gw.tools().processes.forget_owner(rid) {
        gw.runner().stop(run, Ending::Interrupted, now);
    }
    runs::after_runner(gw, now);
}

#[cfg(test)]
mod tests {
    use super::table::NewProcess;
    use super::*;
    use crate::runner::RunEvent;
    use crate::tools::runs::fake::{FakeRuns, ended};

    /// A background process of `owner` just started by a tool, and watched after the tool.
    fn started(f: &mut FakeRuns, owner: &str, notify: bool) -> (String, RunId) {
        let now = f.asker.start;
        let run = f.runner.run_id();
        assert!(f.tools.processes.has_room(now));
        let p = NewProcess {
            owner,
            command: "make test",
            cwd: "/tmp",
            notify,
            run,
            restore: None,
        };
        let id = f.tools.processes.add(p, now);
        after_tool(f, now);
        assert!(f.watched.contains(&run));
        (id, run)
    }

    #[test]
    fn a_background_process_that_asked_to_be_told_ends_in_a_prompt_of_its_session() {
        let mut f = FakeRuns::new();
        let t0 = f.asker.start;
        let (id, run) = started(&mut f, "r1", true);
        let (_, quiet) = started(&mut f, "r1", false);
        f.runner.pipes.push(RunEvent::Output {
            run,
            bytes: b"all 12 passed\n".to_vec(),
        });
        pump(&mut f, t0);
        // Its output is kept for `process`, not shown live.
        assert!(f.events().is_empty());
        assert!(f.prompts().is_empty());

        f.runner.pipes.push(RunEvent::Ended { run, end: ended(0) });
        f.runner.pipes.push(RunEvent::Ended {
            run: quiet,
            end: ended(0),
        });
        pump(&mut f, t0);
        assert_eq!(f.prompts().len(), 1, "{:?}", f.prompts());
        let (rid, text) = &f.prompts()[0];
        assert_eq!(rid, "r1");
        assert!(
            text.contains(&id) && text.contains("completed normally"),
            "{text}"
        );
        assert!(text.contains("all 12 passed"), "{text}");
        let said = f.events();
        assert_eq!(said.len(), 1);
        assert_eq!(said[0].0, "status.update");
        assert_eq!(said[0].1["kind"], "process");
        assert!(f.watched.is_empty());
        assert!(f.tools.processes.running(None).is_empty());
    }

    #[test]
    fn no_prompt_for_a_session_gone_or_during_the_shutdown() {
        let mut f = FakeRuns::new();
        let t0 = f.asker.start;
        let (_, one) = started(&mut f, "r1", true);
        let (_, two) = started(&mut f, "r2", true);
        f.sessions.remove("r1");
        f.runner.pipes.push(RunEvent::Ended {
            run: one,
            end: ended(0),
        });
        pump(&mut f, t0);
        f.shutting_down = true;
        f.runner.pipes.push(RunEvent::Ended {
            run: two,
            end: ended(0),
        });
        pump(&mut f, t0);
        assert!(f.prompts().is_empty());
        assert!(f.events().is_empty());
    }

    #[test]
    fn kill_all_stops_one_sessions_processes_and_tells_those_that_asked_once() {
        let mut f = FakeRuns::new();
        let t0 = f.asker.start;
        let (told, a) = started(&mut f, "r1", true);
        let (_, b) = started(&mut f, "r1", false);
        let (_, other) = started(&mut f, "r2", true);
        assert_eq!(kill_all(&mut f, Some("r1"), t0), 2);
        let mut stopped = f.runner.stopped.clone();
        stopped.sort();
        assert_eq!(stopped, vec![a, b]);
        assert_eq!(f.prompts().len(), 1);
        assert!(f.prompts()[0].1.contains(&told) && f.prompts()[0].1.contains("kill_all"));
        assert_eq!(
            f.tools.processes.running(None),
            vec![(f.tools.processes.running(Some("r2"))[0].0.clone(), other)]
        );

        // The runs' ends come later: the first end is kept, nobody is told twice.
        for run in [a, b] {
            let mut end = ended(143);
            end.ending = Some(Ending::Interrupted);
            f.runner.pipes.push(RunEvent::Ended { run, end });
        }
        pump(&mut f, t0);
        assert_eq!(f.prompts().len(), 1);
        assert_eq!(f.watched.len(), 1);

        // Closing the other session stops and forgets its processes.
        session_gone(&mut f, "r2", t0);
        assert!(f.runner.stopped.contains(&other));
        assert!(f.tools.processes.running(None).is_empty());
    }

    fn pump(f: &mut FakeRuns, now: Instant) {
        runs::pump(f, now, &crate::clock::Budget::unlimited());
    }
}
