//! Who waits for each run of the process runner: a tool call (its job), `shell.exec`, a
//! quick command, a background process (which outlives its call: `process/`), or a service
//! of the gateway that keeps a process running for itself (an MCP server); their descriptors
//! in the poll, their live output, their results.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{JobId, policy};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::{Id, code};
use crate::runner::{Ending, RunEnd, RunEvent, RunId, RunTimer, Spec, Stdin, Streams};
use crate::tools::Timer;
use crate::util;

/// Live `tool.output` events: at most one per interval per tool, at most this much text each.
const LIVE_INTERVAL: Duration = Duration::from_millis(100);
const LIVE_MAX: usize = 8 * 1024;

/// Who waits for a run.
#[derive(Debug, Clone)]
pub enum Owner {
    /// A tool call of a turn.
    Job(JobId),
    Shell {
        request_id: Id,
    },
    /// A command run for a client request other than `shell.exec` (quick commands): `answer`
    /// turns its outcome into the result.
    Request {
        request_id: Id,
        answer: fn(&Outcome) -> Value,
    },
    /// A background process (`process/`): it outlives the call that started it.
    Background(String),
    /// A process a part of the gateway runs for itself, not for a turn (an MCP server): each
    /// event of the run goes to `on_event` as it happens (live output uncoalesced, the end);
    /// it is stopped by its owner, not by an interrupt.
    Service {
        on_event: fn(&mut Gateway, RunEvent, Instant),
    },
}

/// How a command run for a request ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// stdout and stderr, merged and capped.
    pub output: String,
    /// Exit status (124 timeout, 130 interrupted).
    pub code: i32,
    pub ending: Option<Ending>,
    pub timeout: Duration,
    /// Why it could not start.
    pub start_error: Option<String>,
}

/// A run and who waits for it.
struct Owned {
    owner: Owner,
    /// Output not yet sent live, and how much did not fit.
    live: String,
    live_skipped: u64,
    live_timer: bool,
}

/// How the tools side tells the turn that waits what happened. The gateway sets these to the
/// session's handlers (`owners::TURN_HOOKS`): `tools/` never imports `session/`.
#[derive(Clone, Copy)]
pub struct TurnHooks {
    /// A run of a job ended (the tool makes the call's result of it).
    pub run_ended: fn(&mut Gateway, JobId, RunEnd, Instant),
}

#[derive(Default)]
pub struct Runs {
    owned: HashMap<RunId, Owned>,
}

// ---- shell.exec ----

/// `shell.exec {command}`: answered when the command ends; never blocks other calls.
pub fn shell_exec(
    gw: &mut Gateway,
    request_id: Id,
    command: &str,
    now: Instant,
) -> Result<(), RpcError> {
    if gw.shutdown.is_some() {
        return Err(RpcError::new(
            code::SHUTTING_DOWN,
            "gateway is shutting down",
        ));
    }
    if command.trim().is_empty() {
        return Err(RpcError::new(code::EMPTY_COMMAND, "empty command"));
    }
    let cwd = PathBuf::from(util::default_cwd());
    match policy::check(command, &cwd) {
        policy::Verdict::Allow => {}
        policy::Verdict::Ask { description, .. }
        | policy::Verdict::Refuse {
            reason: description,
        } => {
            return Err(RpcError::new(
                code::BLOCKED,
                format!("blocked: {description}"),
            ));
        }
    }
    let spec = Spec {
        command,
        cwd: &cwd,
        streams: Streams::Separate,
        stdin: Stdin::Null,
        timeout: gw.cfg.shell_timeout,
        live: false,
    };
    launch(gw, Owner::Shell { request_id }, &spec, now)
        .map(|_| ())
        .map_err(|e| RpcError::new(code::INTERNAL, format!("could not start the command: {e}")))
}

/// Run `command` for a client request, answered with `answer(outcome)` when it ends; never
/// blocks other calls. Refuses what the policy refuses or would ask about (nobody to ask).
pub fn run_for_request(
    gw: &mut Gateway,
    request_id: Id,
    command: &str,
    cwd: &Path,
    timeout: Duration,
    answer: fn(&Outcome) -> Value,
    now: Instant,
) -> Result<(), String> {
    if gw.shutdown.is_some() {
        return Err("the gateway is shutting down".into());
    }
    match policy::check(command, cwd) {
        policy::Verdict::Allow => {}
        policy::Verdict::Ask { description, .. }
        | policy::Verdict::Refuse {
            reason: description,
        } => return Err(format!("blocked: {description}")),
    }
    let owner = Owner::Request { request_id, answer };
    let spec = Spec {
        command,
        cwd,
        streams: Streams::Merged,
        stdin: Stdin::Null,
        timeout,
        live: false,
    };
    launch(gw, owner, &spec, now)
        .map(|_| ())
        .map_err(|e| format!("could not start the command: {e}"))
}

// ---- processes ----

fn launch(gw: &mut Gateway, owner: Owner, spec: &Spec<'_>, now: Instant) -> std::io::Result<RunId> {
    let id = gw.runner.start(spec, now)?;
    watch(gw, id, owner, now)?;
    Ok(id)
}

/// Put a started run's descriptors in the poll, for `owner`; a run that cannot be watched is
/// killed.
pub(crate) fn watch(
    gw: &mut Gateway,
    id: RunId,
    owner: Owner,
    now: Instant,
) -> std::io::Result<()> {
    gw.watch_run(id)?;
    gw.tools.runs.owned.insert(
        id,
        Owned {
            owner,
            live: String::new(),
            live_skipped: 0,
            live_timer: false,
        },
    );
    after_runner(gw, now);
    Ok(())
}

/// The runs whose owner matches.
fn runs_where(gw: &Gateway, want: impl Fn(&Owner) -> bool) -> Vec<RunId> {
    let mut ids: Vec<RunId> = gw
        .tools
        .runs
        .owned
        .iter()
        .filter(|(_, o)| want(&o.owner))
        .map(|(id, _)| *id)
        .collect();
    ids.sort();
    ids
}

/// Start a process for a service of the gateway (`Owner::Service`), watched by the poll.
pub fn start_service(
    gw: &mut Gateway,
    spec: &Spec<'_>,
    on_event: fn(&mut Gateway, RunEvent, Instant),
    now: Instant,
) -> std::io::Result<RunId> {
    launch(gw, Owner::Service { on_event }, spec, now)
}

/// Send bytes to a run's stdin ([`crate::runner::Runner::write_stdin`]): the bytes left
/// queued, or why they were refused.
pub fn write_stdin(
    gw: &mut Gateway,
    id: RunId,
    bytes: &[u8],
) -> Result<usize, crate::runner::StdinRefused> {
    let written = gw.runner.write_stdin(id, bytes);
    settle(gw);
    written
}

/// Close a run's stdin once its queue is written.
pub fn close_stdin(gw: &mut Gateway, id: RunId) {
    gw.runner.close_stdin(id);
    settle(gw);
}

/// Stop a run (SIGTERM, SIGKILL after the kill grace); its end comes as usual.
pub fn stop(gw: &mut Gateway, id: RunId, now: Instant) {
    gw.runner.stop(id, Ending::Interrupted, now);
    settle(gw);
}

/// The runner's timers into the wheel, the descriptors it is done with out of the poll.
fn settle(gw: &mut Gateway) {
    for wake in gw.runner.take_wakes() {
        gw.timers.insert(wake.at, Timer::Run(wake.run, wake.what));
    }
    for closed in gw.runner.take_closed() {
        gw.unwatch_run(closed);
    }
}

/// Take what the runner produced: its timers into the wheel, the descriptors of ended runs
/// out of the poll, its events to their owners.
pub(crate) fn after_runner(gw: &mut Gateway, now: Instant) {
    settle(gw);
    for event in gw.runner.take_events() {
        let run = match &event {
            RunEvent::Output { run, .. } | RunEvent::Ended { run, .. } => *run,
        };
        let owner = owner_session(gw, run);
        gw.isolated(owner.as_deref(), now, |gw| {
            on_run_event(gw, run, event, now)
        });
    }
}

fn on_run_event(gw: &mut Gateway, run: RunId, event: RunEvent, now: Instant) {
    let Some(owned) = gw.tools.runs.owned.get_mut(&run) else {
        return;
    };
    match (&owned.owner, event) {
        // Every event of a service goes to it as it happens.
        (&Owner::Service { on_event }, event) => {
            if matches!(event, RunEvent::Ended { .. }) {
                gw.tools.runs.owned.remove(&run);
            }
            on_event(gw, event, now);
        }
        // Kept in its bounded buffer; nothing goes to the client live.
        (Owner::Background(_), RunEvent::Output { bytes, .. }) => {
            super::process::on_output(gw, run, &bytes);
        }
        (_, RunEvent::Output { bytes, .. }) => {
            let room = LIVE_MAX.saturating_sub(owned.live.len());
            if room == 0 {
                owned.live_skipped += bytes.len() as u64;
            } else {
                let mut text = String::from_utf8_lossy(&bytes).into_owned();
                if text.len() > room {
                    let mut cut = room;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    owned.live_skipped += (text.len() - cut) as u64;
                    text.truncate(cut);
                }
                owned.live.push_str(&text);
            }
            if !owned.live_timer {
                owned.live_timer = true;
                gw.timers
                    .insert(now + LIVE_INTERVAL, Timer::LiveOutput(run));
            }
        }
        (_, RunEvent::Ended { end, .. }) => {
            if let Some(owned) = gw.tools.runs.owned.remove(&run) {
                deliver(gw, run, owned, end, now);
            }
        }
    }
}

/// Read every ready run's pipes and hand on what happened. Not while the client is not
/// reading (the out-queue is over its cap): the pipes then fill and each command blocks on its
/// write until the queue drains, so a flood costs no memory here (ready runs stay ready).
pub fn pump(gw: &mut Gateway, now: Instant) {
    if gw.paused() {
        return;
    }
    gw.runner.pump(now);
    after_runner(gw, now);
}

/// A timer of the runner fired.
pub fn on_run_timer(gw: &mut Gateway, id: RunId, what: RunTimer, now: Instant) {
    gw.runner.on_timer(id, what, now);
    after_runner(gw, now);
}

/// The session whose turn runs this command, if a turn does.
pub(crate) fn owner_session(gw: &Gateway, id: RunId) -> Option<String> {
    match &gw.tools.runs.owned.get(&id)?.owner {
        Owner::Job(job) => gw.tools.jobs.get(job).map(|j| j.rid.clone()),
        Owner::Background(proc) => gw.tools.processes.owner_of(proc),
        _ => None,
    }
}

/// The session and call a run's output belongs to: `(rid, tool_id, name)`.
fn call_of(gw: &Gateway, owner: &Owner) -> Option<(String, String, String)> {
    let Owner::Job(job) = owner else {
        return None;
    };
    let job = gw.tools.jobs.get(job)?;
    Some((job.rid.clone(), job.call.id.clone(), job.call.name.clone()))
}

/// Send the accumulated live output of a turn's command as one `tool.output` event.
pub fn flush_live(gw: &mut Gateway, id: RunId, now: Instant) {
    let paused = gw.paused();
    let Some(owned) = gw.tools.runs.owned.get_mut(&id) else {
        return;
    };
    if paused {
        // The client is not reading: what is pending stays one coalesced event (bounded, the
        // rest counted), sent once the queue drains.
        gw.timers.insert(now + LIVE_INTERVAL, Timer::LiveOutput(id));
        return;
    }
    owned.live_timer = false;
    let mut text = std::mem::take(&mut owned.live);
    if owned.live_skipped > 0 {
        text.push_str(&format!(
            "\n[... {} bytes not shown live ...]\n",
            owned.live_skipped
        ));
        owned.live_skipped = 0;
    }
    let owner = owned.owner.clone();
    if let Some((rid, tool_id, name)) = call_of(gw, &owner) {
        if let Some(preview) = live_preview(&text) {
            gw.emit(
                &rid,
                "tool.progress",
                json!({"tool_id": tool_id, "name": name, "preview": preview}),
            );
        }
        if !text.is_empty() {
            gw.emit(
                &rid,
                "tool.output",
                json!({"tool_id": tool_id, "text": text}),
            );
        }
    }
}

/// A run ended: hand its result to whoever waits for it.
fn deliver(gw: &mut Gateway, run: RunId, owned: Owned, end: RunEnd, now: Instant) {
    match owned.owner {
        Owner::Background(_) => super::process::on_end(gw, run, end, now),
        Owner::Job(job) => {
            // Live output still pending goes out before the completion.
            if !owned.live.is_empty()
                && let Some((rid, tool_id, _)) = call_of(gw, &owned.owner)
            {
                gw.emit(
                    &rid,
                    "tool.output",
                    json!({"tool_id": tool_id, "text": owned.live}),
                );
            }
            (gw.tools.hooks.run_ended)(gw, job, end, now);
        }
        Owner::Shell { request_id } => {
            let code = end.code();
            let reply = match end.ending {
                Some(Ending::Timeout) => Err(RpcError::new(
                    code::TIMED_OUT,
                    format!("command timed out after {}s", end.timeout.as_secs_f64()),
                )),
                Some(Ending::Interrupted) => Err(RpcError::new(
                    code::SHUTTING_DOWN,
                    "command interrupted: gateway is shutting down",
                )),
                None => match end.start_error {
                    Some(e) => Err(RpcError::new(
                        code::INTERNAL,
                        format!("could not start the command: {e}"),
                    )),
                    None => Ok(json!({"stdout": end.stdout, "stderr": end.stderr, "code": code})),
                },
            };
            gw.outbox().reply(&request_id, reply);
        }
        // Its events went to it as they came (`on_run_event`).
        Owner::Service { .. } => {}
        Owner::Request { request_id, answer } => {
            let outcome = Outcome {
                code: end.code(),
                output: end.stdout,
                ending: end.ending,
                timeout: end.timeout,
                start_error: end.start_error,
            };
            gw.outbox().answer(&request_id, &answer(&outcome));
        }
    }
}

/// The runs of a job.
pub(crate) fn runs_of(gw: &Gateway, job: JobId) -> Vec<RunId> {
    runs_where(gw, |o| matches!(o, Owner::Job(j) if *j == job))
}

/// `process.stop`: stop the running commands of turns (of one session, or of all); each
/// ends `[Command interrupted]` and its turn goes on. Returns how many were stopped.
pub fn stop_turn_commands(gw: &mut Gateway, rid: Option<&str>, now: Instant) -> usize {
    let jobs = &gw.tools.jobs;
    let ids: Vec<RunId> = runs_where(gw, |o| match o {
        Owner::Job(job) => jobs
            .get(job)
            .is_some_and(|j| rid.is_none_or(|want| want == j.rid)),
        _ => false,
    })
    .into_iter()
    .filter(|id| gw.runner.is_stoppable(*id))
    .collect();
    for id in &ids {
        gw.runner.stop(*id, Ending::Interrupted, now);
    }
    after_runner(gw, now);
    ids.len()
}

/// Commands no turn waits for (`shell.exec`, quick commands, background processes) still
/// running when the shutdown begins are stopped like a turn's.
pub fn stop_shell_commands(gw: &mut Gateway, now: Instant) {
    let ids = runs_where(gw, |o| {
        matches!(
            o,
            Owner::Shell { .. } | Owner::Request { .. } | Owner::Background(_)
        )
    });
    for id in ids {
        gw.runner.stop(id, Ending::Interrupted, now);
    }
    after_runner(gw, now);
}

/// The last line a command printed, clipped: the live preview the TUI shows on its tool row.
fn live_preview(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| util::printable(&util::clip(l, 80)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_preview_is_the_last_printed_line() {
        assert_eq!(live_preview("one\ntwo\n\n  ").as_deref(), Some("two"));
        assert_eq!(live_preview("\n \n"), None);
        // A person reads it: a tool's escape sequences show, they do not act.
        assert_eq!(
            live_preview("a\n\x1b]52;c;aGk=\x07ok\r\x1b[2Kx").as_deref(),
            Some("\\x1b]52;c;aGk=\\x07ok\\r\\x1b[2Kx")
        );
    }
}
