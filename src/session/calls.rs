//! The tool side of a turn: the turn machine's actions executed against the sessions, the
//! tools, the runner and the client (`machine.rs` decides, this does). It works on
//! [`CallOwners`] — the owners it uses, lent by the gateway (`src/owners.rs`) or by the unit
//! tests' fakes — never on the gateway itself.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Session;
use super::machine::{self, Action, Effects, Started, TurnMachine};
use super::table::SessionTable;
use super::turn::Turn;
use crate::effects::Effect;
use crate::model::ToolCall;
use crate::runner::{RunEnd, Runner};
use crate::session::transcript::{Message, Role, tool_context};
use crate::tools::approval::{Answer, Answered};
use crate::tools::asked::Asker;
use crate::tools::runs::{self, Owner, RunOwners};
use crate::tools::{
    Job, JobId, Question, Start, ToolContext, ToolResult, Tools, UserAnswer, Wake, WorkTimer, spill,
};
use crate::util;

/// What the tool side of a turn works on: everything the runs work on ([`RunOwners`]: the
/// tools, the runner, the client, timers, the run-watch view), the sessions, the client and
/// timers approvals ask through (an [`Asker`]), persistence's hold and dirty marks. A turn's
/// end is not among them: it goes up as [`Effect::TurnEnded`], and the driver closes the turn.
pub(crate) trait CallOwners: RunOwners {
    fn sessions(&mut self) -> &mut SessionTable;
    /// The tools, and the client and timers their approvals and questions ask through.
    fn asking(&mut self) -> (&mut Tools, impl Asker + '_);
    /// What a tool's context is made of, lent together.
    fn call_parts(&mut self) -> CallParts<'_>;
    /// Nothing can be saved now (the store's hold).
    fn holding(&self) -> bool;
    /// The session waits for the hold to end.
    fn park(&mut self, rid: &str);
    /// The session has something to commit.
    fn mark_dirty(&mut self, rid: &str);
    /// Before `tool` starts: a checkpoint of what it changes is queued when due, and `true`
    /// says the call waits for it (`src/checkpoints/`; it is started again once it is over).
    fn checkpoint_first(&mut self, rid: &str, tool: &str, args: &Value, now: Instant) -> bool;

    /// The running turn of a session.
    fn turn_mut(&mut self, rid: &str) -> Option<&mut Turn> {
        self.sessions().get_mut(rid).and_then(|s| s.turn.as_mut())
    }
}

/// What a tool call's context is built of, borrowed from the owners at once.
pub(crate) struct CallParts<'a> {
    pub sessions: &'a SessionTable,
    pub tools: &'a mut Tools,
    pub runner: &'a mut Runner,
    /// `state.db`, for a tool's reads (`None` in unit tests).
    pub store: Option<&'a crate::store::Store>,
    pub home: &'a Path,
    pub command_timeout: Duration,
    pub approval_timeout: Duration,
    pub clarify_timeout: Duration,
    /// Model calls in one turn of a session that is not a subagent.
    pub max_turns: u32,
    pub shutting_down: bool,
    /// The loop's clock, for the step's budget.
    pub clock: crate::clock::Clock,
}

struct TurnEffects<'a, O: CallOwners> {
    gw: &'a mut O,
    rid: &'a str,
    now: Instant,
}

impl<O: CallOwners> Effects for TurnEffects<'_, O> {
    fn machine(&mut self) -> Option<&mut TurnMachine> {
        self.gw.turn_mut(self.rid).map(|t| &mut t.machine)
    }

    fn execute(&mut self, action: Action) -> Option<Started> {
        let (gw, rid, now) = (&mut *self.gw, self.rid, self.now);
        match action {
            Action::CallModel => {
                gw.sessions().mark_runnable(rid);
            }
            Action::StartTool { call, approved } => {
                if gw.holding() {
                    // Nothing can be saved: the call starts when the hold ends.
                    gw.park(rid);
                    return Some(Started::Deferred { approved });
                }
                if !approved {
                    let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                    if gw.checkpoint_first(rid, &call.name, &args, now) {
                        return Some(Started::Deferred { approved });
                    }
                }
                return Some(start_tool(gw, rid, call, approved, now));
            }
            Action::Record { call, result } => record_result(gw, rid, &call, result),
            Action::AnswerUnrun {
                calls,
                output,
                error,
            } => answer_unrun(gw, rid, &calls, &output, &error),
            Action::Warn(text) => {
                gw.emit(rid, "status.update", json!({"kind": "warn", "text": text}));
            }
            Action::StopTool(job) => return stop_job(gw, job, now).map(Started::Finished),
            Action::WithdrawApproval(request_id) => {
                let (tools, mut env) = gw.asking();
                let denial = tools
                    .approvals
                    .withdraw(&mut env, &request_id, "interrupted");
                return denial.map(Started::Finished);
            }
            Action::EndTurn { status, error } => {
                // The driver closes the turn when the loop dispatches this (or at once, when
                // an interrupt or a leaving session needs it closed now).
                if let Some(turn) = gw.turn_mut(rid).map(|t| t.number) {
                    let rid = rid.to_string();
                    let end = crate::effects::TurnEnd {
                        rid,
                        turn,
                        status,
                        error,
                    };
                    gw.effects().push(Effect::TurnEnded(end));
                }
            }
        }
        None
    }
}

/// Apply one transition to the turn of `rid` and execute what it leads to.
fn step(
    gw: &mut impl CallOwners,
    rid: &str,
    now: Instant,
    transition: impl FnOnce(&mut TurnMachine) -> Vec<Action>,
) {
    let Some(turn) = gw.turn_mut(rid) else {
        return;
    };
    let actions = transition(&mut turn.machine);
    machine::run(&mut TurnEffects { gw, rid, now }, actions);
}

/// The model call of this round is over: end the turn, or run the calls it asked for.
pub(crate) fn model_answered(
    gw: &mut impl CallOwners,
    rid: &str,
    calls: Vec<ToolCall>,
    error: Option<String>,
    now: Instant,
) {
    step(gw, rid, now, |m| m.model_answered(calls, error));
}

/// The user (or the timeout) answered the approval the turn waits for.
pub(crate) fn approval_answered(gw: &mut impl CallOwners, answered: Answered, now: Instant) {
    let Answered {
        rid,
        answer,
        for_session,
    } = answered;
    if let Some(rule) = for_session
        && let Some(s) = gw.sessions().get_mut(&rid)
    {
        s.approved_rules.push(rule.to_string());
    }
    step(gw, &rid, now, |m| match answer {
        Answer::Allow => m.approved(),
        Answer::Deny(result) => m.finished(result),
    });
}

/// The user (or the timeout) answered the question of `job`: its tool goes on with it.
pub(crate) fn question_answered(
    gw: &mut impl CallOwners,
    job: JobId,
    answer: UserAnswer,
    now: Instant,
) {
    step_job(gw, job, Some(answer), now);
}

/// A run of a job ended: the tool makes the call's result of it, and the turn goes on.
pub(crate) fn run_ended<O: CallOwners>(gw: &mut O, job: JobId, end: RunEnd, now: Instant) {
    let Some(j) = gw.tools().jobs.get(&job) else {
        return;
    };
    let (name, args) = (j.call.name.clone(), j.args.clone());
    let Some(tool) = gw.tools().set.get_mut(&name) else {
        return;
    };
    if let Some(result) = tool.run_ended(job, &args, end) {
        finish_job(gw, job, result, now);
    }
}

/// A job is over: the rest of its runs are killed, its result recorded, the turn goes on.
/// (A tool that runs on without the runner, such as a call answered over a server's pipe,
/// ends its job here.)
pub(crate) fn finish_job(
    gw: &mut impl CallOwners,
    job: JobId,
    mut result: ToolResult,
    now: Instant,
) {
    let Some(j) = gw.tools().jobs.remove(&job) else {
        return;
    };
    withdraw_question(gw, job, "finished");
    for run in gw.tools().runs_of(job) {
        gw.runner().kill_now(run, now);
    }
    runs::after_runner(gw, now);
    result.duration = now.saturating_duration_since(j.started);
    step(gw, &j.rid, now, |m| m.finished(result));
}

/// Start the tool call the hold deferred (the store works again).
pub(crate) fn start_deferred(gw: &mut impl CallOwners, rid: &str, now: Instant) {
    step(gw, rid, now, TurnMachine::resume);
}

/// Stop the tool side of a turn being interrupted. True when a call is still stopping (the
/// turn then ends when it finishes).
pub(crate) fn interrupt(gw: &mut impl CallOwners, rid: &str, now: Instant) -> bool {
    let Some(turn) = gw.turn_mut(rid) else {
        return false;
    };
    // A call the hold kept from starting never runs; the machine answers it with the rest.
    let (actions, stopping) = turn.machine.interrupt();
    machine::run(&mut TurnEffects { gw, rid, now }, actions);
    stopping
}

/// A session leaves memory now: kill its calls at once and record their results.
pub(crate) fn abandon(gw: &mut impl CallOwners, rid: &str, now: Instant) {
    let mut jobs: Vec<JobId> = gw
        .tools()
        .jobs
        .iter()
        .filter(|(_, j)| j.rid == rid)
        .map(|(id, _)| *id)
        .collect();
    jobs.sort();
    for job in jobs {
        if let Some(turn) = gw.turn_mut(rid) {
            turn.machine.abandon();
        }
        let live = gw.tools().runs_of(job);
        if live.is_empty() {
            if let Some(result) = stop_job(gw, job, now) {
                step(gw, rid, now, |m| m.finished(result));
            }
            continue;
        }
        for run in live {
            gw.runner().kill_now(run, now);
        }
        runs::after_runner(gw, now);
        // Recorded now, not when the loop dispatches them: the session is leaving.
        for end in gw.effects().take_run_ends(job) {
            run_ended(gw, job, end, now);
        }
    }
}

/// What one start or step of a tool left for the gateway to carry out.
struct Asked {
    runs: Vec<crate::runner::RunId>,
    wake: Option<Wake>,
    question: Option<Question>,
    /// Subagents to spawn for the call (`delegate_task`).
    spawn: bool,
}

/// Which call a start or step is of, and what it is given.
struct Invocation {
    job: JobId,
    approved: bool,
    answer: Option<UserAnswer>,
}

/// Call `f` on the tool `name` with a context of `rid`'s session; `None` when no tool has
/// that name. What the call asked for (runs, wakes, a question) comes back to carry out.
/// A panicked call's result, what the model reads.
const TOOL_PANICKED: &str = "the tool failed inside the gateway";

fn with_tool<R>(
    gw: &mut impl CallOwners,
    rid: &str,
    name: &str,
    call: Invocation,
    now: Instant,
    f: impl FnOnce(&mut dyn crate::tools::Tool, &mut ToolContext<'_>) -> R,
    panicked: impl FnOnce(ToolResult) -> R,
) -> Option<(R, Asked)> {
    let Invocation {
        job,
        approved,
        answer,
    } = call;
    let parts = gw.call_parts();
    let session = parts.sessions.get(rid);
    let (cwd, stored, transcript) = match session {
        Some(s) => (s.cwd.clone(), s.stored_id.as_str(), s.transcript.as_slice()),
        None => (String::new(), "", &[][..]),
    };
    let (provider, model) = session.map_or(("", ""), |s| (s.provider.as_str(), s.model.as_str()));
    let subagent_depth = session
        .and_then(|s| s.delegated.as_ref())
        .map_or(0, |d| d.depth);
    let tool = parts.tools.set.get_mut(name)?;
    let mut ctx = ToolContext {
        job,
        cwd,
        home: parts.home,
        session: stored,
        provider,
        model,
        transcript,
        store: parts.store,
        command_timeout: parts.command_timeout,
        approved,
        shutting_down: parts.shutting_down,
        now,
        budget: crate::clock::Budget::of(parts.clock, now, crate::tools::STEP_BUDGET),
        answer,
        runner: parts.runner,
        runs: Vec::new(),
        wake: None,
        question: None,
        wakers: &parts.tools.wakers,
        processes: crate::tools::process::Scope {
            registry: &mut parts.tools.processes,
            owner: rid,
        },
        subagent_depth,
        spawn: false,
    };
    // A host's tool that panics unwinds through itself and its context only: its call fails,
    // and so does its turn (as a panic in the turn's own work would).
    let mut failed = false;
    let r = util::contained(|| f(tool.as_mut(), &mut ctx)).unwrap_or_else(|why| {
        crate::diag!("[gateway-panic] tool {name} of session {rid} failed: {why}");
        failed = true;
        panicked(ToolResult::failed(TOOL_PANICKED))
    });
    let asked = Asked {
        runs: ctx.runs,
        wake: ctx.wake,
        question: ctx.question,
        spawn: ctx.spawn,
    };
    crate::tools::process::after_tool(gw, now);
    if failed {
        let rid = rid.to_string();
        gw.effects().push(Effect::TurnFailed { rid });
    }
    Some((r, asked))
}

/// Carry out the wakes and the question a call asked for.
fn schedule_wakes(
    gw: &mut impl CallOwners,
    rid: &str,
    job: JobId,
    asked: &mut Asked,
    now: Instant,
) {
    match asked.wake {
        Some(Wake::Again) => gw.tools().due.add(job),
        Some(Wake::At(when)) => {
            gw.asking().1.set_timer(when, WorkTimer::ToolWake(job));
        }
        None => {}
    }
    if let Some(q) = asked.question.take() {
        let deadline = now + gw.call_parts().clarify_timeout;
        let (tools, mut env) = gw.asking();
        tools.questions.ask(&mut env, rid, job, &q, deadline);
    }
}

/// Begin one tool call.
fn start_tool(
    gw: &mut impl CallOwners,
    rid: &str,
    call: ToolCall,
    approved: bool,
    now: Instant,
) -> Started {
    let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    if !approved {
        let context = tool_context(&call.name, &args);
        gw.emit(
            rid,
            "tool.start",
            json!({"tool_id": call.id, "name": call.name, "context": context}),
        );
    }
    let job = gw.tools().new_job_id();
    let session = gw.sessions().get(rid);
    let background = session.is_some_and(|s| s.background.is_some());
    let reach = session.map_or(crate::tools::Reach::Full, Session::reach);
    // A subagent's commands that need approval: nobody is asked (`delegation.subagent_auto_approve`).
    let subagent_approves = session
        .and_then(|s| s.delegated.as_ref())
        .map(|d| d.auto_approve);
    let offered = gw.tools().set.is_offered(&call.name) && reach.allows(&call.name);
    let started = offered
        .then(|| {
            let how = Invocation {
                job,
                approved,
                answer: None,
            };
            let start = |tool: &mut dyn crate::tools::Tool, ctx: &mut ToolContext<'_>| {
                tool.start(ctx, &args)
            };
            with_tool(gw, rid, &call.name, how, now, start, Start::Done)
        })
        .flatten();
    let (start, mut asked) = match started {
        Some(started) => started,
        None => {
            let why = if !reach.allows(&call.name) {
                format!("tool {} is not available to a subagent", call.name)
            } else if gw.tools().set.contains(&call.name) {
                format!("tool {} is disabled (/tools enable it)", call.name)
            } else {
                format!("unknown tool: {}", call.name)
            };
            return Started::Finished(ToolResult::failed(why));
        }
    };
    let started_runs = std::mem::take(&mut asked.runs);
    if !matches!(start, Start::Later) {
        // Only a call that runs on may keep what it started.
        for run in &started_runs {
            gw.runner().discard(*run);
        }
    }
    match start {
        Start::Done(result) => Started::Finished(result),
        Start::Later => {
            gw.tools().jobs.insert(
                job,
                Job {
                    rid: rid.to_string(),
                    call,
                    args,
                    started: now,
                    subagents: asked.spawn,
                },
            );
            if asked.spawn {
                let rid = rid.to_string();
                gw.effects().push(Effect::Delegate { rid, job });
            }
            for (i, run) in started_runs.iter().enumerate() {
                if let Err(e) = runs::watch(gw, *run, Owner::Job(job), now) {
                    for rest in &started_runs[i + 1..] {
                        gw.runner().discard(*rest);
                    }
                    // Its watched runs end unheard: the job is gone.
                    gw.tools().jobs.remove(&job);
                    for watched in gw.tools().runs_of(job) {
                        gw.runner().kill_now(watched, now);
                    }
                    runs::after_runner(gw, now);
                    let error = format!("could not start the command: {e}");
                    return Started::Finished(ToolResult::failed(error));
                }
            }
            schedule_wakes(gw, rid, job, &mut asked, now);
            Started::Running(job)
        }
        Start::Ask(_) if approved => Started::Finished(ToolResult::failed(
            "the tool asked for approval again after it was approved",
        )),
        Start::Ask(ask) if background => {
            // Nobody sees a background task's approval request (the TUI shows one session).
            Started::Finished(ToolResult::failed(format!(
                "blocked: {} (a background task cannot ask for approval)",
                ask.description
            )))
        }
        Start::Ask(ask) if pre_approved(gw, rid, ask.rule) => start_tool(gw, rid, call, true, now),
        Start::Ask(_) if subagent_approves == Some(true) => start_tool(gw, rid, call, true, now),
        Start::Ask(ask) if subagent_approves == Some(false) => {
            Started::Finished(ToolResult::failed(format!(
                "denied: {} (a subagent's command that needs approval is denied; \
                 delegation.subagent_auto_approve: true in config.yaml allows it)",
                ask.description
            )))
        }
        Start::Ask(ask) => {
            let deadline = now + gw.call_parts().approval_timeout;
            let (tools, mut env) = gw.asking();
            Started::Asking(tools.approvals.ask(&mut env, rid, &ask, deadline))
        }
    }
}

/// Approved without asking: always, for this session, or the session is in yolo mode.
fn pre_approved(gw: &mut impl CallOwners, rid: &str, rule: &str) -> bool {
    let parts = gw.call_parts();
    let (yolo, rules) = match parts.sessions.get(rid) {
        Some(s) => (s.yolo, s.approved_rules.as_slice()),
        None => (false, &[][..]),
    };
    parts.tools.approvals.pre_approved(rule, yolo, rules)
}

/// The jobs that are due (woken in the loop or from another thread), each with its session:
/// the loop steps each ([`step_job`]) for its session.
pub(crate) fn due_jobs(gw: &mut impl CallOwners) -> Vec<(String, JobId)> {
    let tools = gw.tools();
    let due = tools.due.take(&tools.wakers);
    due.into_iter()
        .filter_map(|job| Some((tools.jobs.get(&job)?.rid.clone(), job)))
        .collect()
}

/// Step one job now (`answer`: the user's answer to its question).
pub(crate) fn step_job(
    gw: &mut impl CallOwners,
    job: JobId,
    answer: Option<UserAnswer>,
    now: Instant,
) {
    let Some(j) = gw.tools().jobs.get(&job) else {
        return;
    };
    let (rid, name, args) = (j.rid.clone(), j.call.name.clone(), j.args.clone());
    let how = Invocation {
        job,
        approved: true,
        answer,
    };
    let Some((result, mut asked)) =
        with_tool(gw, &rid, &name, how, now, |t, ctx| t.step(ctx, &args), Some)
    else {
        return;
    };
    // A step may not start runs: only a start's are watched.
    for run in std::mem::take(&mut asked.runs) {
        gw.runner().discard(run);
    }
    match result {
        Some(result) => finish_job(gw, job, result, now),
        None => schedule_wakes(gw, &rid, job, &mut asked, now),
    }
}

/// Stop a job: its runs get SIGTERM (the result comes when they end), or the tool cancels
/// it and its result is returned.
fn stop_job(gw: &mut impl CallOwners, job: JobId, now: Instant) -> Option<ToolResult> {
    let live = gw.tools().runs_of(job);
    if !live.is_empty() {
        for run in live {
            gw.runner()
                .stop(run, crate::runner::Ending::Interrupted, now);
        }
        runs::after_runner(gw, now);
        return None;
    }
    withdraw_question(gw, job, "interrupted");
    let j = gw.tools().jobs.get(&job)?;
    let (name, subagents) = (j.call.name.clone(), j.subagents);
    let result = gw.tools().set.get_mut(&name)?.cancel(job)?;
    gw.tools().jobs.remove(&job);
    if subagents {
        // Its children stop too (`delegation.rs`); the call's result says who was cut off.
        gw.effects().push(Effect::SubagentsCancelled { job });
    }
    Some(result)
}

/// The question `job` asked, if it waits for an answer, is withdrawn (`request.cancel`).
fn withdraw_question(gw: &mut impl CallOwners, job: JobId, reason: &str) {
    let (tools, mut env) = gw.asking();
    tools.questions.withdraw_for_job(&mut env, job, reason);
}

/// Record a finished call: the tool message (committed this iteration), then `tool.complete`.
/// A result past its tool's threshold is written to a file and both carry its preview instead.
fn record_result(gw: &mut impl CallOwners, rid: &str, call: &ToolCall, result: ToolResult) {
    let parts = gw.call_parts();
    let earlier = parts
        .sessions
        .get(rid)
        .map(|s| answer_results(&s.transcript));
    let fitted = spill::fit(
        parts.home,
        &call.name,
        &call.id,
        result.content.to_string(),
        earlier.into_iter().flatten(),
    );
    let shown = match &fitted {
        spill::Fitted::Whole(_) => result.content,
        spill::Fitted::Spilled(t) | spill::Fitted::Cut(t) => Value::String(t.clone()),
    };
    if let Some(s) = gw.sessions().get_mut(rid) {
        let mut m = Message::new(Role::Tool, Some(fitted.into_text()), util::unix_now());
        m.tool_call_id = Some(call.id.clone());
        m.tool_name = Some(call.name.clone());
        s.append(m);
    }
    gw.mark_dirty(rid);
    let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    let duration_s = result.duration.as_secs_f64();
    let mut payload = json!({"tool_id": call.id, "name": call.name, "args": args,
           "duration_s": (duration_s * 1000.0).round() / 1000.0, "result": shown,
           "summary": result.summary});
    if let Some(e) = &result.error {
        payload["error"] = json!(e);
    }
    for (key, value) in &result.event_fields {
        payload[key] = value.clone();
    }
    gw.emit(rid, "tool.complete", payload);
}

/// The results recorded so far for the calls of the transcript's last answer.
fn answer_results(transcript: &[Message]) -> impl Iterator<Item = &str> + Clone {
    transcript
        .iter()
        .rev()
        .take_while(|m| m.role == Role::Tool)
        .filter_map(|m| m.content.as_deref())
}

/// Give each call a result saying it was not run (no events: the calls never started).
fn answer_unrun(
    gw: &mut impl CallOwners,
    rid: &str,
    calls: &[ToolCall],
    output: &str,
    error: &str,
) {
    let Some(s) = gw.sessions().get_mut(rid) else {
        return;
    };
    let result = json!({"output": output, "exit_code": null, "error": error}).to_string();
    for call in calls {
        let mut m = Message::new(Role::Tool, Some(result.clone()), util::unix_now());
        m.tool_call_id = Some(call.id.clone());
        m.tool_name = Some(call.name.clone());
        s.append(m);
    }
    gw.mark_dirty(rid);
}

/// [`CallOwners`] and [`TurnOwners`](crate::session::driver::TurnOwners) for unit tests: a
/// fake outbox and a timer wheel on a fake clock (`FakeAsker`), a registry of scripted tools, a
/// scripted model, a store that holds or not, and a gateway side that only records what it was
/// asked to do. Turns end through the driver's own `turn_ended` (`dispatch_turn_ends`, as
/// the loop's dispatcher) and fail through its `isolated`.
#[cfg(test)]
pub(crate) mod fake {

    use std::cell::Cell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    use super::*;
    use crate::model::{CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider};
    use crate::rpc::Outbox;
    use crate::runner::{Closed, RunId};
    use crate::session::driver::{self, ModelParts, TurnOwners};
    use crate::session::{Session, bare_session};
    use crate::tools::Ask;
    use crate::tools::asked::fake::FakeAsker;
    use crate::tools::runs::RunControl;

    pub const RID: &str = "r1";

    /// How a scripted tool behaves.
    #[derive(Clone, Copy)]
    enum Script {
        /// Done at its start.
        Quick,
        /// Runs on until a wake this long after its start steps it to its end.
        Wakes(Duration),
        /// Runs on until it is cancelled.
        Waits,
        /// Asks for approval, then is done.
        Asks,
    }

    struct Scripted {
        name: &'static str,
        script: Script,
    }

    impl crate::tools::Tool for Scripted {
        fn name(&self) -> &str {
            self.name
        }
        fn description(&self) -> &str {
            "a scripted tool"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        fn start(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Start {
            match self.script {
                Script::Quick => Start::Done(ToolResult::new(json!({"output": "quick"}), "quick")),
                Script::Wakes(after) => {
                    ctx.wake_at(ctx.now + after);
                    Start::Later
                }
                Script::Waits => Start::Later,
                Script::Asks if ctx.approved => {
                    Start::Done(ToolResult::new(json!({"output": "ran"}), "ran"))
                }
                Script::Asks => Start::Ask(Ask {
                    rule: "scripted",
                    description: "runs a script".into(),
                    command: "script".into(),
                }),
            }
        }
        fn step(&mut self, _ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
            Some(ToolResult::new(json!({"output": "woken"}), "woken"))
        }
        fn cancel(&mut self, _job: JobId) -> Option<ToolResult> {
            Some(ToolResult::failed("cancelled"))
        }
    }

    /// How a scripted model call goes on after it said its events.
    #[derive(Clone, Copy, PartialEq, Debug)]
    pub enum Then {
        /// The call is over.
        Finish,
        /// The call waits (for a server that says nothing more).
        Wait,
        /// The provider panics (a bug in the gateway's own code).
        Panic,
    }

    /// A model whose calls each say the next scripted round; a call with no round scripted
    /// answers "ok".
    #[derive(Default)]
    pub struct ScriptedModel {
        pub rounds: VecDeque<(Vec<ModelEvent>, Then)>,
        /// How many calls were started.
        pub started: usize,
        /// How many calls were aborted.
        pub aborted: Rc<Cell<usize>>,
    }

    impl ScriptedModel {
        /// Script the next call: `events`, then `then`.
        pub fn round(&mut self, events: Vec<ModelEvent>, then: Then) {
            self.rounds.push_back((events, then));
        }
    }

    /// The end of a model's answer.
    pub fn done() -> ModelEvent {
        ModelEvent::Done {
            finish_reason: "stop".into(),
            usage: Default::default(),
        }
    }

    struct ScriptedCall {
        events: Vec<ModelEvent>,
        then: Then,
        aborted: Rc<Cell<usize>>,
    }

    impl ModelCall for ScriptedCall {
        fn advance(
            &mut self,
            _ctx: &mut CallContext<'_>,
            _now: Instant,
            out: &mut Vec<ModelEvent>,
        ) -> Progress {
            out.append(&mut self.events);
            match self.then {
                Then::Finish => Progress::Finished,
                Then::Wait => Progress::Wait(None),
                Then::Panic => panic!("a scripted bug"),
            }
        }
        fn abort(&mut self, _ctx: &mut CallContext<'_>) {
            self.aborted.set(self.aborted.get() + 1);
        }
    }

    impl Provider for ScriptedModel {
        fn name(&self) -> &str {
            "scripted"
        }
        fn default_model(&self) -> &str {
            "scripted"
        }
        fn start(
            &mut self,
            _req: ModelRequest<'_>,
            _ctx: &mut CallContext<'_>,
            _now: Instant,
        ) -> Box<dyn ModelCall> {
            self.started += 1;
            let (events, then) = self
                .rounds
                .pop_front()
                .unwrap_or_else(|| (vec![ModelEvent::Text("ok".into()), done()], Then::Finish));
            Box::new(ScriptedCall {
                events,
                then,
                aborted: self.aborted.clone(),
            })
        }
    }

    pub struct Fake {
        pub sessions: SessionTable,
        pub tools: Tools,
        pub runner: Runner,
        pub asker: FakeAsker,
        pub holding: bool,
        pub parked: Vec<String>,
        pub dirty: Vec<String>,
        /// The turns ended, with their status.
        pub ended: Vec<(String, String)>,
        pub model: ScriptedModel,
        /// Only for the model calls' registry argument: the scripted calls register nothing.
        pub events: Vec<ModelEvent>,
        /// The turns' tokens given back.
        /// The sessions whose turn gave its slot back.
        pub released: Vec<String>,
        /// The context window compaction works against.
        pub window: u64,
        /// The sessions handed to persistence as they left memory.
        pub retired: Vec<Session>,
        /// What the tool side asked of the loop (no scripted tool starts a run: nothing).
        pub effects: crate::effects::Effects,
    }

    impl Fake {
        /// One session whose turn's model call just asked for tools.
        pub fn new() -> Fake {
            let home = Path::new("/nonexistent/tuigw-calls-test");
            let mut tools = Tools::new(home, None);
            let scripts = [
                ("quick", Script::Quick),
                ("wakes", Script::Wakes(Duration::from_millis(50))),
                ("waits", Script::Waits),
                ("asks", Script::Asks),
            ];
            for (name, script) in scripts {
                tools
                    .set
                    .register(Box::new(Scripted { name, script }))
                    .unwrap();
            }
            let mut session = bare_session(RID, "s1");
            let mut turn = Turn::new(crate::reactor::Slot::detached(99));
            turn.machine.model_call_started();
            session.turn = Some(turn);
            let mut sessions = SessionTable::new();
            assert!(sessions.add(session).is_ok());
            let exe = crate::runner::supervisor::Executable::current();
            Fake {
                sessions,
                tools,
                runner: Runner::new(exe, Duration::from_secs(1), false),
                asker: FakeAsker::new(false),
                holding: false,
                parked: Vec::new(),
                dirty: Vec::new(),
                ended: Vec::new(),
                model: ScriptedModel::default(),
                events: Vec::new(),
                released: Vec::new(),
                window: 1 << 20,
                retired: Vec::new(),
                effects: Default::default(),
            }
        }

        /// Step the due jobs, each for its session, as the loop does.
        pub fn step_due(&mut self, now: Instant) {
            for (rid, job) in due_jobs(self) {
                driver::isolated(self, Some(&rid), now, |gw| step_job(gw, job, None, now));
            }
            let run_ends = self
                .effects
                .iter()
                .any(|e| matches!(e, crate::effects::Effect::RunEnded { .. }));
            assert!(!run_ends, "no scripted tool starts a run");
        }

        pub fn now(&self) -> Instant {
            self.asker.start
        }

        /// Close the turns the tool side ended, as the loop's dispatcher does before it
        /// writes (the other effects stay queued for the test to read).
        pub fn dispatch_turn_ends(&mut self, now: Instant) {
            use crate::effects::Effect;
            let mut rest = crate::effects::Effects::default();
            while let Some(effect) = self.effects.pop() {
                match effect {
                    Effect::TurnEnded(end) => {
                        self.ended
                            .push((end.rid.clone(), end.status.as_str().to_string()));
                        driver::turn_ended(self, end, now);
                    }
                    other => rest.push(other),
                }
            }
            self.effects = rest;
        }

        /// The events said so far as (type, payload), and forget them (the turns' decided
        /// ends closed first, as before the loop writes).
        pub fn said(&mut self) -> Vec<(String, Value)> {
            self.dispatch_turn_ends(self.now());
            self.asker
                .said()
                .into_iter()
                .filter(|f| f["method"] == "event")
                .map(|f| {
                    let p = &f["params"];
                    (
                        p["type"].as_str().unwrap_or("").to_string(),
                        p["payload"].clone(),
                    )
                })
                .collect()
        }

        pub fn kinds(&mut self) -> Vec<String> {
            self.said().into_iter().map(|(kind, _)| kind).collect()
        }

        /// The tool messages of the session's transcript, as (call id, content).
        pub fn tool_messages(&self) -> Vec<(String, String)> {
            let s = self.sessions.get(RID).unwrap();
            s.transcript
                .iter()
                .filter(|m| m.role == Role::Tool)
                .map(|m| {
                    let id = m.tool_call_id.clone().unwrap_or_default();
                    (id, m.content.clone().unwrap_or_default())
                })
                .collect()
        }

        /// Fire the timers due by `at` as the loop does for the tool side.
        pub fn fire(&mut self, at: Instant) {
            for timer in self.asker.due(at) {
                match timer {
                    WorkTimer::ToolWake(job) => self.tools.due.add(job),
                    WorkTimer::ApprovalTimeout(id) => {
                        let answered = self.tools.approvals.expire(&mut self.asker, &id);
                        if let Some(answered) = answered {
                            approval_answered(self, answered, at);
                        }
                    }
                    other => panic!("the tool side set a timer it does not own: {other:?}"),
                }
            }
        }
    }

    impl RunOwners for Fake {
        fn tools(&mut self) -> &mut Tools {
            &mut self.tools
        }
        fn runner(&mut self) -> &mut dyn RunControl {
            &mut self.runner
        }
        fn watch_run(&mut self, _run: RunId) -> std::io::Result<()> {
            panic!("no scripted tool starts a run")
        }
        fn unwatch_run(&mut self, _closed: Closed) {}
        fn set_timer(&mut self, at: Instant, timer: WorkTimer) {
            self.asker.set_timer(at, timer);
        }
        fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
            self.asker.emit(rid, kind, payload);
        }
        fn outbox(&mut self) -> &mut dyn Outbox {
            self.asker.outbox()
        }
        fn paused(&self) -> bool {
            false
        }
        fn shutting_down(&self) -> bool {
            false
        }
        fn has_session(&self, rid: &str) -> bool {
            self.sessions.contains_key(rid)
        }
        fn effects(&mut self) -> &mut crate::effects::Effects {
            &mut self.effects
        }
    }

    impl CallOwners for Fake {
        fn sessions(&mut self) -> &mut SessionTable {
            &mut self.sessions
        }
        fn asking(&mut self) -> (&mut Tools, impl Asker + '_) {
            (&mut self.tools, &mut self.asker)
        }
        fn call_parts(&mut self) -> CallParts<'_> {
            CallParts {
                sessions: &self.sessions,
                tools: &mut self.tools,
                runner: &mut self.runner,
                store: None,
                home: Path::new("/nonexistent/tuigw-calls-test"),
                command_timeout: Duration::from_secs(60),
                approval_timeout: Duration::from_secs(5),
                clarify_timeout: Duration::from_secs(5),
                max_turns: crate::session::machine::MAX_ROUNDS,
                shutting_down: false,
                clock: crate::clock::Clock::SYSTEM,
            }
        }
        fn holding(&self) -> bool {
            self.holding
        }
        fn park(&mut self, rid: &str) {
            self.parked.push(rid.to_string());
        }
        fn mark_dirty(&mut self, rid: &str) {
            self.dirty.push(rid.to_string());
        }
        fn checkpoint_first(&mut self, _: &str, _: &str, _: &Value, _: Instant) -> bool {
            false
        }
    }

    impl TurnOwners for Fake {
        fn emit_delta(&mut self, rid: &str, text: &str) {
            self.asker.out.delta(rid, 0, text);
        }
        fn turn_slot(&mut self, _rid: &str) -> crate::reactor::Slot {
            crate::reactor::Slot::detached(7)
        }
        fn hold_for_mcp(&mut self, _rid: &str) -> Option<Vec<String>> {
            None
        }
        fn release_turn_slot(&mut self, rid: &str) {
            self.released.push(rid.to_string());
        }
        fn model_parts(&mut self) -> ModelParts<'_> {
            ModelParts {
                sessions: &mut self.sessions,
                providers: crate::model::Providers {
                    default: &mut self.model,
                    switched: &mut [],
                },
                tools: &self.tools.set,
                home: Path::new("/nonexistent/tuigw-calls-test"),
                skills: None,
                events: &mut self.events,
            }
        }
        fn session_info(&mut self, rid: &str) -> Option<Value> {
            let tools = self.tools.set.toolsets();
            self.sessions
                .get(rid)
                .map(|s| s.info(tools, json!({}), json!([])))
        }
        fn compaction_window(&self, _model: &str) -> u64 {
            self.window
        }
        fn retire_session(&mut self, s: Session) {
            self.retired.push(s);
        }
        fn fresh_names(&mut self, title: Option<&str>, _at: f64) -> (String, Option<String>) {
            ("s2".to_string(), title.map(|t| format!("{t} #2")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{Fake, RID};
    use super::*;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn a_tool_call_is_answered_recorded_and_the_model_called_again() {
        let mut gw = Fake::new();
        let now = gw.now();
        model_answered(&mut gw, RID, vec![call("c1", "quick")], None, now);
        let said = gw.said();
        let kinds: Vec<&str> = said.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["tool.start", "tool.complete"]);
        assert_eq!(said[1].1["tool_id"], "c1");
        assert_eq!(said[1].1["summary"], "quick");
        assert_eq!(
            gw.tool_messages(),
            [("c1".into(), r#"{"output":"quick"}"#.into())]
        );
        assert!(
            gw.dirty.contains(&RID.to_string()),
            "the tool message is committed"
        );
        assert_eq!(
            gw.sessions.take_runnable(),
            [RID],
            "the model reads the result next"
        );
        assert!(gw.ended.is_empty());
    }

    #[test]
    fn an_unknown_tool_is_answered_so_and_the_next_call_still_runs() {
        let mut gw = Fake::new();
        let now = gw.now();
        let calls = vec![call("c1", "nope"), call("c2", "quick")];
        model_answered(&mut gw, RID, calls, None, now);
        let said = gw.said();
        assert_eq!(said[1].0, "tool.complete");
        assert_eq!(said[1].1["error"], "unknown tool: nope");
        assert_eq!(said[3].1["tool_id"], "c2");
        let ids: Vec<String> = gw.tool_messages().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["c1", "c2"], "every call has its answer, in order");
    }

    #[test]
    fn an_interrupt_cancels_the_running_call_answers_the_rest_and_ends_the_turn() {
        let mut gw = Fake::new();
        let now = gw.now();
        let calls = vec![call("c1", "waits"), call("c2", "quick")];
        model_answered(&mut gw, RID, calls, None, now);
        assert_eq!(gw.kinds(), ["tool.start"], "the first call runs on");
        assert!(gw.ended.is_empty());
        interrupt(&mut gw, RID, now);
        let said = gw.said();
        let kinds: Vec<&str> = said.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["tool.complete", "message.complete", "session.info"]);
        assert_eq!(said[0].1["error"], "cancelled");
        assert_eq!(said[1].1["status"], "interrupted");
        assert_eq!(gw.ended, [(RID.to_string(), "interrupted".to_string())]);
        let ids: Vec<String> = gw.tool_messages().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["c1", "c2"], "the call never started is answered too");
        assert!(gw.tools.jobs.is_empty(), "the cancelled job is gone");
    }

    #[test]
    fn a_call_that_runs_on_is_stepped_when_its_wake_is_due() {
        let mut gw = Fake::new();
        let start = gw.now();
        model_answered(&mut gw, RID, vec![call("c1", "wakes")], None, start);
        assert_eq!(gw.kinds(), ["tool.start"]);
        gw.fire(start + Duration::from_millis(49));
        gw.step_due(start + Duration::from_millis(49));
        assert!(gw.said().is_empty(), "not stepped before its wake");
        gw.fire(start + Duration::from_millis(50));
        gw.step_due(start + Duration::from_millis(50));
        let said = gw.said();
        assert_eq!(said[0].0, "tool.complete");
        assert_eq!(said[0].1["summary"], "woken");
        assert_eq!(
            said[0].1["duration_s"], 0.05,
            "timed from its start to its end"
        );
        assert_eq!(gw.sessions.take_runnable(), [RID]);
    }

    #[test]
    fn while_the_store_holds_a_call_waits_and_starts_when_the_hold_ends() {
        let mut gw = Fake::new();
        let now = gw.now();
        gw.holding = true;
        model_answered(&mut gw, RID, vec![call("c1", "quick")], None, now);
        assert!(
            gw.said().is_empty(),
            "nothing starts that could not be saved"
        );
        assert_eq!(gw.parked, [RID]);
        gw.holding = false;
        start_deferred(&mut gw, RID, now);
        assert_eq!(gw.kinds(), ["tool.start", "tool.complete"]);
        assert_eq!(gw.tool_messages().len(), 1);
    }

    #[test]
    fn an_approval_nobody_answers_denies_the_call_at_its_timeout() {
        let mut gw = Fake::new();
        let start = gw.now();
        model_answered(&mut gw, RID, vec![call("c1", "asks")], None, start);
        assert_eq!(gw.kinds(), ["tool.start", "approval.request"]);
        gw.fire(start + Duration::from_secs(4));
        assert!(gw.said().is_empty(), "still waiting for the user");
        gw.fire(start + Duration::from_secs(5));
        let said = gw.said();
        let done = said.iter().find(|(k, _)| k == "tool.complete").unwrap();
        assert_eq!(done.1["error"], "denied");
        assert!(gw.tool_messages()[0].1.contains("no answer (timeout)"));
        assert_eq!(
            gw.sessions.take_runnable(),
            [RID],
            "the model hears of the denial"
        );
    }

    #[test]
    fn an_approved_call_runs_and_a_session_approval_is_remembered() {
        let mut gw = Fake::new();
        let now = gw.now();
        model_answered(&mut gw, RID, vec![call("c1", "asks")], None, now);
        gw.said();
        let answered = gw
            .tools
            .approvals
            .respond(&mut gw.asker, RID, "session", None);
        for a in answered {
            approval_answered(&mut gw, a, now);
        }
        let said = gw.said();
        let done = said.iter().find(|(k, _)| k == "tool.complete").unwrap();
        assert_eq!(done.1["summary"], "ran");
        let s = gw.sessions.get(RID).unwrap();
        assert_eq!(s.approved_rules, ["scripted"]);
        // The next call of the rule runs without asking.
        let mut turn = Turn::new(crate::reactor::Slot::detached(100));
        turn.machine.model_call_started();
        gw.sessions.get_mut(RID).unwrap().turn = Some(turn);
        model_answered(&mut gw, RID, vec![call("c2", "asks")], None, now);
        assert_eq!(gw.kinds(), ["tool.start", "tool.complete"]);
    }
}
