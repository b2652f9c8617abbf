//! Background processes: `terminal` with `background: true` starts one and answers at once
//! with its id; the `process` tool (`tool.rs`) lists, polls, reads, waits for, kills and
//! writes to them; `registry.rs` holds them (output bounded by `buffer.rs`). Each runs through
//! the process runner like any command (its supervisor, its pid namespace, killed when the
//! gateway goes however it goes), owned in `runs.rs` by the process rather than by the call,
//! so it outlives the call and the turn (an interrupt leaves it running); closing the session,
//! `process.stop` and the shutdown stop it. `notify_on_complete` makes its end a prompt of the
//! session that started it (queued behind a running turn), as Hermes' TUI gateway does.

mod buffer;
pub mod registry;
mod tool;

use std::time::Instant;

use serde_json::json;

pub use registry::Processes;
use registry::{Exit, Notice};
pub use tool::{Launch, ProcessTool, start_background};

use super::runs::{self, Owner};
use crate::event_loop::Gateway;
use crate::runner::{Ending, RunEnd, RunId};

/// What a tool call sees of the background processes: those of its session.
pub struct Scope<'a> {
    pub(crate) registry: &'a mut Processes,
    /// The calling session's runtime id.
    pub(crate) owner: &'a str,
}

/// After a tool's start or step: watch the runs of the processes it started, step the waits
/// its kills ended, and take the runner's timers.
pub(crate) fn after_tool(gw: &mut Gateway, now: Instant) {
    for (run, id) in gw.tools.processes.take_unwatched() {
        if runs::watch(gw, run, Owner::Background(id.clone()), now).is_err() {
            // Not watched: the runner killed it already.
            forget_restore_file(gw, run);
            gw.tools.processes.run_ended(run, None);
            let exit = Exit {
                code: None,
                reason: "failed_start",
                source: "",
            };
            let notice = gw.tools.processes.mark_exited(&id, exit, now);
            deliver(gw, notice, now);
        }
    }
    deliver(gw, None, now);
    runs::after_runner(gw, now);
}

/// Output of a background run.
pub(crate) fn on_output(gw: &mut Gateway, run: RunId, bytes: &[u8]) {
    gw.tools.processes.push_output(run, bytes);
}

/// A background run ended.
pub(crate) fn on_end(gw: &mut Gateway, run: RunId, end: RunEnd, now: Instant) {
    forget_restore_file(gw, run);
    let Some(id) = gw.tools.processes.run_ended(run, end.pid) else {
        return;
    };
    let exit = exit_of(&end);
    let notice = gw.tools.processes.mark_exited(&id, exit, now);
    deliver(gw, notice, now);
}

/// The shell state's restore file of a run that ended goes.
fn forget_restore_file(gw: &mut Gateway, run: RunId) {
    if let Some(file) = gw.tools.processes.take_restore_file(run) {
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
fn deliver(gw: &mut Gateway, notice: Option<Notice>, now: Instant) {
    for job in gw.tools.processes.take_woken() {
        gw.tools.due.add(job);
    }
    let Some(Notice { owner, text }) = notice else {
        return;
    };
    if gw.shutdown.is_some() || !gw.sessions.contains_key(&owner) {
        return;
    }
    gw.emit(
        &owner,
        "status.update",
        json!({"kind": "process", "text": text}),
    );
    gw.submit_prompt(&owner, text, now);
}

/// `process.stop`: kill the running background processes (of session `owner`, or of all);
/// how many. Those that asked to be notified start their turn, as in Hermes (`kill_all`).
pub fn kill_all(gw: &mut Gateway, owner: Option<&str>, now: Instant) -> usize {
    let running = gw.tools.processes.running(owner);
    for (id, run) in &running {
        gw.runner.stop(*run, Ending::Interrupted, now);
        let exit = Exit {
            code: Some(-15),
            reason: "killed",
            source: "kill_all",
        };
        let notice = gw.tools.processes.mark_exited(id, exit, now);
        deliver(gw, notice, now);
    }
    runs::after_runner(gw, now);
    running.len()
}

/// Session `rid` is closing: its background processes are stopped and forgotten.
pub(crate) fn session_gone(gw: &mut Gateway, rid: &str, now: Instant) {
    for run in gw.tools.processes.forget_owner(rid) {
        gw.runner.stop(run, Ending::Interrupted, now);
    }
    runs::after_runner(gw, now);
}
