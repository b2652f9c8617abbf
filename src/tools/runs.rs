//! Who waits for each run of the process runner: a tool call (its job), `shell.exec`, a
//! quick command, a background process (which outlives its call: `process/`), or a service
//! of the gateway that keeps a process running for itself (an MCP server); their descriptors
//! in the poll, their live output, their results. Everything here works on [`RunOwners`] —
//! the owners it uses and the few steps only the gateway takes, lent by the gateway
//! (`src/owners.rs`) or by the unit tests' fakes — never on the gateway itself. What a run's
//! end means to a turn, a service or a session's next prompt leaves as an [`Effect`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{JobId, Tools, policy};
use crate::clock::Budget;
use crate::effects::{Effect, Effects};
use crate::rpc::frame::{Id, code};
use crate::rpc::{Outbox, RpcError};
use crate::runner::{
    Closed, Ending, RunEnd, RunEvent, RunId, RunTimer, Runner, Spec, Stdin, StdinRefused, Streams,
    Wake,
};
use crate::tools::WorkTimer;
use crate::util;

/// Live `tool.output` events: at most one per interval per tool, at most this much text each.
const LIVE_INTERVAL: Duration = Duration::from_millis(100);
const LIVE_MAX: usize = 8 * 1024;

/// The process runner as the runs drive it: [`Runner`], or a fake in unit tests.
pub(crate) trait RunControl {
    fn start(&mut self, spec: &Spec<'_>, now: Instant) -> std::io::Result<RunId>;
    fn write_stdin(&mut self, id: RunId, bytes: &[u8]) -> Result<usize, StdinRefused>;
    fn close_stdin(&mut self, id: RunId);
    fn stop(&mut self, id: RunId, ending: Ending, now: Instant);
    fn is_stoppable(&self, id: RunId) -> bool;
    /// End a run at once (SIGKILL); its end comes with the next events.
    fn kill_now(&mut self, id: RunId, now: Instant);
    /// Forget a run no one will watch (killed, its end unheard).
    fn discard(&mut self, id: RunId);
    /// Read the ready runs' pipes, until `budget` is spent.
    fn pump(&mut self, now: Instant, budget: &Budget);
    fn on_timer(&mut self, id: RunId, what: RunTimer, now: Instant);
    fn take_events(&mut self) -> Vec<RunEvent>;
    fn take_wakes(&mut self) -> Vec<Wake>;
    fn take_closed(&mut self) -> Vec<Closed>;
}

impl RunControl for Runner {
    fn start(&mut self, spec: &Spec<'_>, now: Instant) -> std::io::Result<RunId> {
        Runner::start(self, spec, now)
    }
    fn write_stdin(&mut self, id: RunId, bytes: &[u8]) -> Result<usize, StdinRefused> {
        Runner::write_stdin(self, id, bytes)
    }
    fn close_stdin(&mut self, id: RunId) {
        Runner::close_stdin(self, id);
    }
    fn stop(&mut self, id: RunId, ending: Ending, now: Instant) {
        Runner::stop(self, id, ending, now);
    }
    fn is_stoppable(&self, id: RunId) -> bool {
        Runner::is_stoppable(self, id)
    }
    fn kill_now(&mut self, id: RunId, now: Instant) {
        Runner::kill_now(self, id, now);
    }
    fn discard(&mut self, id: RunId) {
        Runner::discard(self, id);
    }
    fn pump(&mut self, now: Instant, budget: &Budget) {
        Runner::pump(self, now, budget);
    }
    fn on_timer(&mut self, id: RunId, what: RunTimer, now: Instant) {
        Runner::on_timer(self, id, what, now);
    }
    fn take_events(&mut self) -> Vec<RunEvent> {
        Runner::take_events(self)
    }
    fn take_wakes(&mut self) -> Vec<Wake> {
        Runner::take_wakes(self)
    }
    fn take_closed(&mut self) -> Vec<Closed> {
        Runner::take_closed(self)
    }
}

/// What the runs work on: the tools (who waits, jobs, background processes), the runner, the
/// client, timers, a run-watch view of the poll — and the effects queue, where a run's events
/// go that are not theirs to handle (the turn's tool, a service, a session's next prompt).
pub(crate) trait RunOwners {
    fn tools(&mut self) -> &mut Tools;
    fn runner(&mut self) -> &mut dyn RunControl;
    /// Put a started run's descriptors in the poll under a token of its own (the loop keeps
    /// the token → run table); a run that cannot be watched is discarded by the runner.
    fn watch_run(&mut self, run: RunId) -> std::io::Result<()>;
    /// Descriptors the runner is done with leave the poll (the token with the run's last).
    fn unwatch_run(&mut self, closed: Closed);
    /// `timer` fires at `at` (back to [`on_run_timer`] / [`flush_live`]).
    fn set_timer(&mut self, at: Instant, timer: WorkTimer);
    /// An event of session `rid`.
    fn emit(&mut self, rid: &str, kind: &str, payload: Value);
    /// Where answers to requests go.
    fn outbox(&mut self) -> &mut dyn Outbox;
    /// The client is not reading (the out-queue is over its cap).
    fn paused(&self) -> bool;
    fn shutting_down(&self) -> bool;
    fn has_session(&self, rid: &str) -> bool;
    /// Where what the runs ask of the layers above goes (the loop dispatches it).
    fn effects(&mut self) -> &mut Effects;
}

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
    /// event of the run goes to it as it happens ([`Effect::ServiceEvent`]: live output
    /// uncoalesced, the end); it is stopped by its owner, not by an interrupt.
    Service,
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

#[derive(Default)]
pub struct Runs {
    owned: HashMap<RunId, Owned>,
}

impl Runs {
    /// The runs whose owner matches.
    fn where_owner(&self, want: impl Fn(&Owner) -> bool) -> Vec<RunId> {
        let mut ids: Vec<RunId> = self
            .owned
            .iter()
            .filter(|(_, gw)| want(&gw.owner))
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        ids
    }
}

impl Tools {
    /// The runs of a job.
    pub(crate) fn runs_of(&self, job: JobId) -> Vec<RunId> {
        self.runs
            .where_owner(|o| matches!(o, Owner::Job(j) if *j == job))
    }

    /// The session whose turn (or background process) a run is for, if any.
    pub(crate) fn run_session(&self, id: RunId) -> Option<String> {
        match &self.runs.owned.get(&id)?.owner {
            Owner::Job(job) => self.jobs.get(job).map(|j| j.rid.clone()),
            Owner::Background(proc) => self.processes.owner_of(proc),
            _ => None,
        }
    }

    /// The session and call a run's output belongs to: `(rid, tool_id, name)`.
    fn call_of(&self, owner: &Owner) -> Option<(String, String, String)> {
        let Owner::Job(job) = owner else {
            return None;
        };
        let job = self.jobs.get(job)?;
        Some((job.rid.clone(), job.call.id.clone(), job.call.name.clone()))
    }
}

// ---- shell.exec ----

/// `shell.exec {command}`: answered when the command ends (stopped after `timeout`); never
/// blocks other calls.
pub(crate) fn shell_exec(
    gw: &mut impl RunOwners,
    request_id: Id,
    command: &str,
    timeout: Duration,
    now: Instant,
) -> Result<(), RpcError> {
    if gw.shutting_down() {
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
        timeout,
        live: false,
    };
    launch(gw, Owner::Shell { request_id }, &spec, now)
        .map(|_| ())
        .map_err(|e| RpcError::new(code::INTERNAL, format!("could not start the command: {e}")))
}

/// Run `command` for a client request, answered with `answer(outcome)` when it ends; never
/// blocks other calls. Refuses what the policy refuses or would ask about (nobody to ask).
pub(crate) fn run_for_request(
    gw: &mut impl RunOwners,
    request_id: Id,
    command: &str,
    cwd: &Path,
    timeout: Duration,
    answer: fn(&Outcome) -> Value,
    now: Instant,
) -> Result<(), String> {
    if gw.shutting_down() {
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

fn launch(
    gw: &mut impl RunOwners,
    owner: Owner,
    spec: &Spec<'_>,
    now: Instant,
) -> std::io::Result<RunId> {
    let id = gw.runner().start(spec, now)?;
    watch(gw, id, owner, now)?;
    Ok(id)
}

/// Put a started run's descriptors in the poll, for `owner`; a run that cannot be watched is
/// killed.
pub(crate) fn watch(
    gw: &mut impl RunOwners,
    id: RunId,
    owner: Owner,
    now: Instant,
) -> std::io::Result<()> {
    gw.watch_run(id)?;
    gw.tools().runs.owned.insert(
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

/// Start a process for a service of the gateway (`Owner::Service`), watched by the poll; its
/// events go out as [`Effect::ServiceEvent`].
pub(crate) fn start_service(
    gw: &mut impl RunOwners,
    spec: &Spec<'_>,
    now: Instant,
) -> std::io::Result<RunId> {
    launch(gw, Owner::Service, spec, now)
}

/// Send bytes to a run's stdin ([`crate::runner::Runner::write_stdin`]): the bytes left
/// queued, or why they were refused.
pub(crate) fn write_stdin(
    gw: &mut impl RunOwners,
    id: RunId,
    bytes: &[u8],
) -> Result<usize, StdinRefused> {
    let written = gw.runner().write_stdin(id, bytes);
    settle(gw);
    written
}

/// Close a run's stdin once its queue is written.
pub(crate) fn close_stdin(gw: &mut impl RunOwners, id: RunId) {
    gw.runner().close_stdin(id);
    settle(gw);
}

/// Stop a run (SIGTERM, SIGKILL after the kill grace); its end comes as usual.
pub(crate) fn stop(gw: &mut impl RunOwners, id: RunId, now: Instant) {
    gw.runner().stop(id, Ending::Interrupted, now);
    settle(gw);
}

/// The runner's timers into the wheel, the descriptors it is done with out of the poll.
fn settle(gw: &mut impl RunOwners) {
    for wake in gw.runner().take_wakes() {
        gw.set_timer(wake.at, WorkTimer::Run(wake.run, wake.what));
    }
    for closed in gw.runner().take_closed() {
        gw.unwatch_run(closed);
    }
}

/// Take what the runner produced: its timers into the wheel, the descriptors of ended runs
/// out of the poll, its events to their owners (those above the runs as effects).
pub(crate) fn after_runner(gw: &mut impl RunOwners, now: Instant) {
    settle(gw);
    for event in gw.runner().take_events() {
        on_run_event(gw, event.run(), event, now);
    }
}

fn on_run_event(gw: &mut impl RunOwners, run: RunId, event: RunEvent, now: Instant) {
    let runs = &mut gw.tools().runs;
    let Some(owned) = runs.owned.get_mut(&run) else {
        return;
    };
    match (&owned.owner, event) {
        // Every event of a service goes to it as it happens.
        (Owner::Service, event) => {
            if matches!(event, RunEvent::Ended { .. }) {
                runs.owned.remove(&run);
            }
            gw.effects().push(Effect::ServiceEvent(event));
        }
        // Kept in its bounded buffer; nothing goes to the client live.
        (Owner::Background(_), RunEvent::Output { bytes, .. }) => {
            super::process::on_output(gw, run, &bytes);
        }
        (_, RunEvent::Output { bytes, .. }) => {
            if owned.take_live(&bytes) {
                gw.set_timer(now + LIVE_INTERVAL, WorkTimer::LiveOutput(run));
            }
        }
        (_, RunEvent::Ended { end, .. }) => {
            if let Some(owned) = runs.owned.remove(&run) {
                deliver(gw, run, owned, end, now);
            }
        }
    }
}

impl Owned {
    /// Keep live output for the next `tool.output` (bounded: the rest counted); whether its
    /// timer is to be set.
    fn take_live(&mut self, bytes: &[u8]) -> bool {
        let room = LIVE_MAX.saturating_sub(self.live.len());
        if room == 0 {
            self.live_skipped += bytes.len() as u64;
        } else {
            let mut text = String::from_utf8_lossy(bytes).into_owned();
            if text.len() > room {
                let mut cut = room;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.live_skipped += (text.len() - cut) as u64;
                text.truncate(cut);
            }
            self.live.push_str(&text);
        }
        !std::mem::replace(&mut self.live_timer, true)
    }
}

/// Read every ready run's pipes and hand on what happened. Not while the client is not
/// reading (the out-queue is over its cap): the pipes then fill and each command blocks on its
/// write until the queue drains, so a flood costs no memory here (ready runs stay ready).
pub(crate) fn pump(gw: &mut impl RunOwners, now: Instant, budget: &Budget) {
    if gw.paused() {
        return;
    }
    gw.runner().pump(now, budget);
    after_runner(gw, now);
}

/// A timer of the runner fired.
pub(crate) fn on_run_timer(gw: &mut impl RunOwners, id: RunId, what: RunTimer, now: Instant) {
    gw.runner().on_timer(id, what, now);
    after_runner(gw, now);
}

/// Send the accumulated live output of a turn's command as one `tool.output` event.
pub(crate) fn flush_live(gw: &mut impl RunOwners, id: RunId, now: Instant) {
    if !gw.tools().runs.owned.contains_key(&id) {
        return;
    }
    if gw.paused() {
        // The client is not reading: what is pending stays one coalesced event (bounded, the
        // rest counted), sent once the queue drains.
        gw.set_timer(now + LIVE_INTERVAL, WorkTimer::LiveOutput(id));
        return;
    }
    let tools = gw.tools();
    let Some(owned) = tools.runs.owned.get_mut(&id) else {
        return;
    };
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
    if let Some((rid, tool_id, name)) = tools.call_of(&owner) {
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
fn deliver(gw: &mut impl RunOwners, run: RunId, owned: Owned, end: RunEnd, now: Instant) {
    match owned.owner {
        Owner::Background(_) => super::process::on_end(gw, run, end, now),
        Owner::Job(job) => {
            // Live output still pending goes out before the completion.
            if !owned.live.is_empty()
                && let Some((rid, tool_id, _)) = gw.tools().call_of(&owned.owner)
            {
                gw.emit(
                    &rid,
                    "tool.output",
                    json!({"tool_id": tool_id, "text": owned.live}),
                );
            }
            gw.effects().push(Effect::RunEnded { job, end });
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
        Owner::Service => {}
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

/// `process.stop`: stop the running commands of turns (of one session, or of all); each
/// ends `[Command interrupted]` and its turn goes on. Returns how many were stopped.
pub(crate) fn stop_turn_commands(
    gw: &mut impl RunOwners,
    rid: Option<&str>,
    now: Instant,
) -> usize {
    let tools = gw.tools();
    let jobs = &tools.jobs;
    let ids: Vec<RunId> = tools.runs.where_owner(|o| match o {
        Owner::Job(job) => jobs
            .get(job)
            .is_some_and(|j| rid.is_none_or(|want| want == j.rid)),
        _ => false,
    });
    let runner = gw.runner();
    let ids: Vec<RunId> = ids
        .into_iter()
        .filter(|id| runner.is_stoppable(*id))
        .collect();
    for id in &ids {
        runner.stop(*id, Ending::Interrupted, now);
    }
    after_runner(gw, now);
    ids.len()
}

/// Commands no turn waits for (`shell.exec`, quick commands, background processes) still
/// running when the shutdown begins are stopped like a turn's.
pub(crate) fn stop_shell_commands(gw: &mut impl RunOwners, now: Instant) {
    let ids = gw.tools().runs.where_owner(|o| {
        matches!(
            o,
            Owner::Shell { .. } | Owner::Request { .. } | Owner::Background(_)
        )
    });
    for id in ids {
        gw.runner().stop(id, Ending::Interrupted, now);
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

/// [`RunOwners`] for unit tests: a runner that only says what a test scripted, a watch view
/// that records what went in and out of the poll, the fake outbox and timer wheel on a fake
/// clock (`FakeAsker`), and a gateway side that records what reached it.
#[cfg(test)]
pub(crate) mod fake {
    use std::collections::HashSet;

    use super::*;
    use crate::model::ToolCall;
    use crate::tools::Job;
    use crate::tools::asked::Asker;
    use crate::tools::asked::fake::FakeAsker;

    /// A runner whose pipes hold what the test put in `pipes`: a pump reads all of it.
    #[derive(Default)]
    pub struct FakeRunner {
        next: u64,
        pub started: Vec<RunId>,
        /// Events waiting in the runs' pipes until a pump reads them.
        pub pipes: Vec<RunEvent>,
        pub pumps: usize,
        pub stopped: Vec<RunId>,
        pub stdin: Vec<(RunId, Vec<u8>)>,
        events: Vec<RunEvent>,
        closed: Vec<Closed>,
    }

    impl FakeRunner {
        /// Runs the test itself started (as a tool's context does).
        pub fn run_id(&mut self) -> RunId {
            self.next += 1;
            RunId(self.next)
        }

        fn produce(&mut self, events: Vec<RunEvent>) {
            for event in events {
                if let RunEvent::Ended { run, .. } = &event {
                    let (run, fds, run_over) = (*run, Vec::new(), true);
                    self.closed.push(Closed { run, fds, run_over });
                }
                self.events.push(event);
            }
        }
    }

    impl RunControl for FakeRunner {
        fn start(&mut self, _spec: &Spec<'_>, _now: Instant) -> std::io::Result<RunId> {
            let id = self.run_id();
            self.started.push(id);
            Ok(id)
        }
        fn write_stdin(&mut self, id: RunId, bytes: &[u8]) -> Result<usize, StdinRefused> {
            self.stdin.push((id, bytes.to_vec()));
            Ok(0)
        }
        fn close_stdin(&mut self, _id: RunId) {}
        fn stop(&mut self, id: RunId, _ending: Ending, _now: Instant) {
            self.stopped.push(id);
        }
        fn is_stoppable(&self, id: RunId) -> bool {
            !self.stopped.contains(&id)
        }
        fn kill_now(&mut self, id: RunId, _now: Instant) {
            self.stopped.push(id);
        }
        fn discard(&mut self, id: RunId) {
            self.stopped.push(id);
        }
        fn pump(&mut self, _now: Instant, _budget: &Budget) {
            self.pumps += 1;
            let read = std::mem::take(&mut self.pipes);
            self.produce(read);
        }
        fn on_timer(&mut self, _id: RunId, _what: RunTimer, _now: Instant) {}
        fn take_events(&mut self) -> Vec<RunEvent> {
            std::mem::take(&mut self.events)
        }
        fn take_wakes(&mut self) -> Vec<Wake> {
            Vec::new()
        }
        fn take_closed(&mut self) -> Vec<Closed> {
            std::mem::take(&mut self.closed)
        }
    }

    pub struct FakeRuns {
        pub tools: Tools,
        pub runner: FakeRunner,
        pub asker: FakeAsker,
        /// The client is not reading.
        pub paused: bool,
        pub shutting_down: bool,
        pub sessions: HashSet<String>,
        /// Runs whose descriptors are in the poll.
        pub watched: HashSet<RunId>,
        /// What the runs asked of the turns' tools, the services, the sessions' prompts.
        pub effects: Effects,
    }

    impl FakeRuns {
        pub fn new() -> FakeRuns {
            FakeRuns {
                tools: Tools::new(Path::new("/nonexistent/tuigw-runs-test"), None),
                runner: FakeRunner::default(),
                asker: FakeAsker::new(false),
                paused: false,
                shutting_down: false,
                sessions: HashSet::from(["r1".to_string(), "r2".to_string()]),
                watched: HashSet::new(),
                effects: Effects::default(),
            }
        }

        /// A tool call of session `rid`'s turn, running on.
        pub fn job(&mut self, rid: &str, tool_id: &str) -> JobId {
            let job = self.tools.new_job_id();
            let call = ToolCall {
                id: tool_id.into(),
                name: "terminal".into(),
                arguments: "{}".into(),
            };
            let args = json!({});
            let (rid, started) = (rid.to_string(), self.asker.start);
            self.tools.jobs.insert(
                job,
                Job {
                    rid,
                    call,
                    args,
                    started,
                    subagents: false,
                },
            );
            job
        }

        /// The runs' ends a turn's tool was asked to take, so far.
        pub fn ended(&self) -> Vec<(JobId, RunEnd)> {
            let ends = self.effects.iter().filter_map(|e| match e {
                Effect::RunEnded { job, end } => Some((*job, end.clone())),
                _ => None,
            });
            ends.collect()
        }

        /// The services' events handed on, so far.
        pub fn service(&self) -> Vec<RunEvent> {
            let events = self.effects.iter().filter_map(|e| match e {
                Effect::ServiceEvent(event) => Some(event.clone()),
                _ => None,
            });
            events.collect()
        }

        /// The prompts submitted to sessions, so far: `(rid, text)`.
        pub fn prompts(&self) -> Vec<(String, String)> {
            let prompts = self.effects.iter().filter_map(|e| match e {
                Effect::SubmitPrompt { rid, text } => Some((rid.clone(), text.clone())),
                _ => None,
            });
            prompts.collect()
        }

        /// The events said so far (kind, payload), and forget them.
        pub fn events(&mut self) -> Vec<(String, Value)> {
            self.asker
                .said()
                .into_iter()
                .filter(|f| f["method"] == "event")
                .map(|f| {
                    (
                        f["params"]["type"].as_str().unwrap_or("").to_string(),
                        f["params"]["payload"].clone(),
                    )
                })
                .collect()
        }
    }

    /// How a run ended, plainly.
    pub fn ended(status: i32) -> RunEnd {
        RunEnd {
            stdout: String::new(),
            stderr: String::new(),
            status,
            ending: None,
            start_error: None,
            pid: None,
            timeout: Duration::from_secs(60),
            duration: Duration::ZERO,
        }
    }

    impl RunOwners for FakeRuns {
        fn tools(&mut self) -> &mut Tools {
            &mut self.tools
        }
        fn runner(&mut self) -> &mut dyn RunControl {
            &mut self.runner
        }
        fn watch_run(&mut self, run: RunId) -> std::io::Result<()> {
            self.watched.insert(run);
            Ok(())
        }
        fn unwatch_run(&mut self, closed: Closed) {
            assert!(self.watched.remove(&closed.run), "unwatched twice");
        }
        fn set_timer(&mut self, at: Instant, timer: WorkTimer) {
            self.asker.set_timer(at, timer);
        }
        fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
            self.asker.emit(rid, kind, payload);
        }
        fn outbox(&mut self) -> &mut dyn Outbox {
            &mut self.asker.out
        }
        fn paused(&self) -> bool {
            self.paused
        }
        fn shutting_down(&self) -> bool {
            self.shutting_down
        }
        fn has_session(&self, rid: &str) -> bool {
            self.sessions.contains(rid)
        }
        fn effects(&mut self) -> &mut Effects {
            &mut self.effects
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::fake::{FakeRuns, ended};

    fn output(run: RunId, text: &str) -> RunEvent {
        RunEvent::Output {
            run,
            bytes: text.as_bytes().to_vec(),
        }
    }

    /// The live-output timers due by `at`, fired.
    fn fire_live(f: &mut FakeRuns, at: Instant) {
        for timer in f.asker.due(at) {
            if let WorkTimer::LiveOutput(run) = timer {
                flush_live(f, run, at);
            }
        }
    }

    #[test]
    fn a_turns_command_output_reaches_its_tool_row_and_its_end_finishes_the_call() {
        let mut f = FakeRuns::new();
        let t0 = f.asker.start;
        let job = f.job("r1", "call_1");
        let run = f.runner.run_id();
        watch(&mut f, run, Owner::Job(job), t0).unwrap();
        assert!(f.watched.contains(&run));
        assert_eq!(f.tools.runs_of(job), vec![run]);
        assert_eq!(f.tools.run_session(run).as_deref(), Some("r1"));

        f.runner.pipes.push(output(run, "building\n"));
        f.runner.pipes.push(output(run, "step 1 done\n"));
        pump(&mut f, t0, &Budget::unlimited());
        // Coalesced: nothing before the interval, one event pair after it.
        fire_live(&mut f, t0 + LIVE_INTERVAL / 2);
        assert!(f.events().is_empty());
        fire_live(&mut f, t0 + LIVE_INTERVAL);
        let said = f.events();
        assert_eq!(said.len(), 2, "{said:?}");
        assert_eq!(said[0].0, "tool.progress");
        assert_eq!(said[0].1["preview"], "step 1 done");
        assert_eq!(said[1].0, "tool.output");
        assert_eq!(said[1].1["tool_id"], "call_1");
        assert_eq!(said[1].1["text"], "building\nstep 1 done\n");

        // The end: what is still pending goes out first, then the tool gets the end.
        let t1 = t0 + LIVE_INTERVAL * 2;
        f.runner.pipes.push(output(run, "last words"));
        f.runner.pipes.push(RunEvent::Ended { run, end: ended(3) });
        pump(&mut f, t1, &Budget::unlimited());
        let said = f.events();
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0].1["text"], "last words");
        assert_eq!(f.ended().len(), 1);
        assert_eq!(f.ended()[0].0, job);
        assert_eq!(f.ended()[0].1.status, 3);
        // Out of the poll and forgotten: its pending live timer sends nothing.
        assert!(f.watched.is_empty());
        assert!(f.tools.runs_of(job).is_empty());
        fire_live(&mut f, t1 + LIVE_INTERVAL);
        assert!(f.events().is_empty());
    }

    #[test]
    fn live_output_is_bounded_and_says_what_it_left_out() {
        let mut f = FakeRuns::new();
        let t0 = f.asker.start;
        let job = f.job("r1", "call_1");
        let run = f.runner.run_id();
        watch(&mut f, run, Owner::Job(job), t0).unwrap();
        f.runner
            .pipes
            .push(output(run, &"x".repeat(LIVE_MAX + 100)));
        pump(&mut f, t0, &Budget::unlimited());
        fire_live(&mut f, t0 + LIVE_INTERVAL);
        let said = f.events();
        let text = said[1].1["text"].as_str().unwrap();
        assert!(text.starts_with(&"x".repeat(LIVE_MAX)));
        assert!(
            text.ends_with("[... 100 bytes not shown live ...]\n"),
            "{text}"
        );
    }

    #[test]
    fn while_the_client_is_not_reading_no_pipe_is_read_and_nothing_is_sent() {
        let mut f = FakeRuns::new();
        let t0 = f.asker.start;
        let job = f.job("r1", "call_1");
        let run = f.runner.run_id();
        watch(&mut f, run, Owner::Job(job), t0).unwrap();
        f.runner.pipes.push(output(run, "one\n"));
        pump(&mut f, t0, &Budget::unlimited());
        assert_eq!(f.runner.pumps, 1);

        // Over the out-queue's cap: the pipes stay unread (the command blocks on its write),
        // and live output already read waits, coalesced, for the client.
        f.paused = true;
        f.runner.pipes.push(output(run, "two\n"));
        pump(&mut f, t0, &Budget::unlimited());
        assert_eq!(
            f.runner.pumps, 1,
            "a pipe was read while the client was not reading"
        );
        assert_eq!(f.runner.pipes.len(), 1);
        fire_live(&mut f, t0 + LIVE_INTERVAL);
        assert!(f.events().is_empty());

        // Under the cap again: the pump goes on and all of it goes out as one event.
        f.paused = false;
        pump(&mut f, t0 + LIVE_INTERVAL, &Budget::unlimited());
        assert_eq!(f.runner.pumps, 2);
        assert!(f.runner.pipes.is_empty());
        fire_live(&mut f, t0 + LIVE_INTERVAL * 2);
        let said = f.events();
        assert_eq!(said.len(), 2, "{said:?}");
        assert_eq!(said[1].1["text"], "one\ntwo\n");
    }

    #[test]
    fn a_services_events_go_to_it_as_they_come_and_stop_at_its_end() {
        let mut f = FakeRuns::new();
        let t0 = f.asker.start;
        let spec = Spec {
            command: "server",
            cwd: Path::new("/"),
            streams: Streams::Separate,
            stdin: Stdin::Pipe { cap: 1024 },
            timeout: crate::runner::NO_TIMEOUT,
            live: true,
        };
        let run = start_service(&mut f, &spec, t0).unwrap();
        assert_eq!(f.runner.started, vec![run]);
        assert!(f.watched.contains(&run));
        write_stdin(&mut f, run, b"hello\n").unwrap();
        assert_eq!(f.runner.stdin, vec![(run, b"hello\n".to_vec())]);

        f.runner.pipes.push(output(run, "a"));
        f.runner.pipes.push(output(run, "b"));
        pump(&mut f, t0, &Budget::unlimited());
        // Uncoalesced, no timer, nothing to the client.
        assert_eq!(f.service(), vec![output(run, "a"), output(run, "b")]);
        assert!(f.asker.due(t0 + LIVE_INTERVAL).is_empty());
        assert!(f.events().is_empty());

        // An interrupt of the turns leaves it alone; its owner stops it.
        stop_turn_commands(&mut f, None, t0);
        assert!(f.runner.stopped.is_empty());
        stop(&mut f, run, t0);
        assert_eq!(f.runner.stopped, vec![run]);
        f.runner.pipes.push(RunEvent::Ended { run, end: ended(0) });
        pump(&mut f, t0, &Budget::unlimited());
        assert_eq!(f.service().len(), 3);
        assert!(matches!(f.service()[2], RunEvent::Ended { .. }));
        assert!(f.watched.is_empty());
        assert!(f.ended().is_empty());
    }

    #[test]
    fn process_stop_stops_the_commands_of_one_sessions_turns() {
        let mut f = FakeRuns::new();
        let t0 = f.asker.start;
        let (a, b) = (f.job("r1", "call_a"), f.job("r2", "call_b"));
        let (ra, rb) = (f.runner.run_id(), f.runner.run_id());
        watch(&mut f, ra, Owner::Job(a), t0).unwrap();
        watch(&mut f, rb, Owner::Job(b), t0).unwrap();
        assert_eq!(stop_turn_commands(&mut f, Some("r1"), t0), 1);
        assert_eq!(f.runner.stopped, vec![ra]);
        // Already stopping: not counted again.
        assert_eq!(stop_turn_commands(&mut f, None, t0), 1);
        assert_eq!(f.runner.stopped, vec![ra, rb]);
    }

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
