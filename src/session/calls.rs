//! The tool side of a turn on the gateway: the turn machine's actions executed against the
//! sessions, the tools, the runner and the client (`machine.rs` decides, this does).

use std::time::Instant;

use serde_json::{Value, json};

use super::machine::{self, Action, Effects, Started, TurnMachine};
use crate::event_loop::Gateway;
use crate::model::ToolCall;
use crate::runner::RunEnd;
use crate::session::transcript::{Message, Role, tool_context};
use crate::tools::approval::{Answer, Answered};
use crate::tools::runs::{self, Owner};
use crate::tools::{
    Job, JobId, Question, Start, ToolContext, ToolResult, TurnHooks, UserAnswer, Wake,
};
use crate::util;

/// What the tools side calls when a run of a job ends.
pub(crate) const TURN_HOOKS: TurnHooks = TurnHooks { run_ended };

struct TurnEffects<'a> {
    gw: &'a mut Gateway,
    rid: &'a str,
    now: Instant,
}

impl Effects for TurnEffects<'_> {
    fn machine(&mut self) -> Option<&mut TurnMachine> {
        self.gw.turn_mut(self.rid).map(|t| &mut t.machine)
    }

    fn execute(&mut self, action: Action) -> Option<Started> {
        let (gw, rid, now) = (&mut *self.gw, self.rid, self.now);
        match action {
            Action::CallModel => gw.schedule(rid),
            Action::StartTool { call, approved } => {
                if gw.persist.holding() {
                    // Nothing can be saved: the call starts when the hold ends.
                    gw.persist.park(rid);
                    return Some(Started::Deferred { approved });
                }
                return Some(start_tool(gw, rid, call, approved, now));
            }
            Action::Record { call, result } => record_result(gw, rid, &call, &result),
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
            Action::EndTurn { status, error } => gw.end_turn(rid, status.as_str(), error, now),
        }
        None
    }
}

/// Apply one transition to the turn of `rid` and execute what it leads to.
fn step(
    gw: &mut Gateway,
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
    gw: &mut Gateway,
    rid: &str,
    calls: Vec<ToolCall>,
    error: Option<String>,
    now: Instant,
) {
    step(gw, rid, now, |m| m.model_answered(calls, error));
}

/// The user (or the timeout) answered the approval the turn waits for.
pub(crate) fn approval_answered(gw: &mut Gateway, answered: Answered, now: Instant) {
    let Answered {
        rid,
        answer,
        for_session,
    } = answered;
    if let Some(rule) = for_session
        && let Some(s) = gw.sessions.get_mut(&rid)
    {
        s.approved_rules.push(rule.to_string());
    }
    step(gw, &rid, now, |m| match answer {
        Answer::Allow => m.approved(),
        Answer::Deny(result) => m.finished(result),
    });
}

/// The user (or the timeout) answered the question of `job`: its tool goes on with it.
pub(crate) fn question_answered(gw: &mut Gateway, job: JobId, answer: UserAnswer, now: Instant) {
    step_job(gw, job, Some(answer), now);
}

/// A run of a job ended: the tool makes the call's result of it, and the turn goes on.
fn run_ended(gw: &mut Gateway, job: JobId, end: RunEnd, now: Instant) {
    let Some(j) = gw.tools.jobs.get(&job) else {
        return;
    };
    let (name, args) = (j.call.name.clone(), j.args.clone());
    let Some(tool) = gw.tools.registry.get_mut(&name) else {
        return;
    };
    if let Some(result) = tool.run_ended(job, &args, end) {
        finish_job(gw, job, result, now);
    }
}

/// A job is over: the rest of its runs are killed, its result recorded, the turn goes on.
/// (A tool that runs on without the runner, such as a call answered over a server's pipe,
/// ends its job here.)
pub(crate) fn finish_job(gw: &mut Gateway, job: JobId, mut result: ToolResult, now: Instant) {
    let Some(j) = gw.tools.jobs.remove(&job) else {
        return;
    };
    let (tools, mut env) = gw.asking();
    tools.questions.withdraw_for_job(&mut env, job, "finished");
    for run in runs::runs_of(gw, job) {
        gw.runner.kill_now(run, now);
    }
    runs::after_runner(gw, now);
    result.duration = now.saturating_duration_since(j.started);
    step(gw, &j.rid, now, |m| m.finished(result));
}

/// Start the tool call the hold deferred (the store works again).
pub(crate) fn start_deferred(gw: &mut Gateway, rid: &str, now: Instant) {
    step(gw, rid, now, TurnMachine::resume);
}

/// Stop the tool side of a turn being interrupted. True when a call is still stopping (the
/// turn then ends when it finishes).
pub(crate) fn interrupt(gw: &mut Gateway, rid: &str, now: Instant) -> bool {
    let Some(turn) = gw.turn_mut(rid) else {
        return false;
    };
    // A call the hold kept from starting never runs; the machine answers it with the rest.
    let (actions, stopping) = turn.machine.interrupt();
    machine::run(&mut TurnEffects { gw, rid, now }, actions);
    stopping
}

/// A session leaves memory now: kill its calls at once and record their results.
pub(crate) fn abandon(gw: &mut Gateway, rid: &str, now: Instant) {
    let mut jobs: Vec<JobId> = gw
        .tools
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
        let live = runs::runs_of(gw, job);
        if live.is_empty() {
            if let Some(result) = stop_job(gw, job, now) {
                step(gw, rid, now, |m| m.finished(result));
            }
            continue;
        }
        for run in live {
            gw.runner.kill_now(run, now);
        }
        runs::after_runner(gw, now);
    }
}

/// What one start or step of a tool left for the gateway to carry out.
struct Asked {
    runs: Vec<crate::runner::RunId>,
    wake: Option<Wake>,
    question: Option<Question>,
}

/// Which call a start or step is of, and what it is given.
struct Invocation {
    job: JobId,
    approved: bool,
    answer: Option<UserAnswer>,
}

/// Call `f` on the tool `name` with a context of `rid`'s session; `None` when no tool has
/// that name. What the call asked for (runs, wakes, a question) comes back to carry out.
fn with_tool<R>(
    gw: &mut Gateway,
    rid: &str,
    name: &str,
    call: Invocation,
    now: Instant,
    f: impl FnOnce(&mut dyn crate::tools::Tool, &mut ToolContext<'_>) -> R,
) -> Option<(R, Asked)> {
    let Invocation {
        job,
        approved,
        answer,
    } = call;
    let session = gw.sessions.get(rid);
    let (cwd, stored, transcript) = match session {
        Some(s) => (s.cwd.clone(), s.stored_id.as_str(), s.transcript.as_slice()),
        None => (String::new(), "", &[][..]),
    };
    let tool = gw.tools.registry.get_mut(name)?;
    let mut ctx = ToolContext {
        job,
        cwd,
        home: &gw.cfg.home,
        session: stored,
        transcript,
        store: Some(gw.persist.store()),
        command_timeout: gw.cfg.command_timeout,
        approved,
        shutting_down: gw.shutdown.is_some(),
        now,
        deadline: now + crate::tools::STEP_BUDGET,
        answer,
        runner: &mut gw.runner,
        runs: Vec::new(),
        wake: None,
        question: None,
        wakers: &gw.tools.wakers,
        processes: crate::tools::process::Scope {
            registry: &mut gw.tools.processes,
            owner: rid,
        },
    };
    let r = f(tool.as_mut(), &mut ctx);
    let asked = Asked {
        runs: ctx.runs,
        wake: ctx.wake,
        question: ctx.question,
    };
    crate::tools::process::after_tool(gw, now);
    Some((r, asked))
}

/// Carry out the wakes and the question a call asked for.
fn schedule_wakes(gw: &mut Gateway, rid: &str, job: JobId, asked: &mut Asked, now: Instant) {
    match asked.wake {
        Some(Wake::Again) => gw.tools.due.add(job),
        Some(Wake::At(when)) => {
            gw.timers.insert(when, crate::tools::Timer::ToolWake(job));
        }
        None => {}
    }
    if let Some(q) = asked.question.take() {
        let deadline = now + gw.cfg.clarify_timeout;
        let (tools, mut env) = gw.asking();
        tools.questions.ask(&mut env, rid, job, &q, deadline);
    }
}

/// Begin one tool call.
fn start_tool(
    gw: &mut Gateway,
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
    let job = gw.tools.new_job_id();
    let background = gw.sessions.get(rid).is_some_and(|s| s.background.is_some());
    let offered = gw.tools.registry.is_offered(&call.name);
    let started = offered
        .then(|| {
            let how = Invocation {
                job,
                approved,
                answer: None,
            };
            with_tool(gw, rid, &call.name, how, now, |tool, ctx| {
                tool.start(ctx, &args)
            })
        })
        .flatten();
    let (start, mut asked) = match started {
        Some(started) => started,
        None => {
            let why = if gw.tools.registry.contains(&call.name) {
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
            gw.runner.discard(*run);
        }
    }
    match start {
        Start::Done(result) => Started::Finished(result),
        Start::Later => {
            gw.tools.jobs.insert(
                job,
                Job {
                    rid: rid.to_string(),
                    call,
                    args,
                    started: now,
                },
            );
            for (i, run) in started_runs.iter().enumerate() {
                if let Err(e) = runs::watch(gw, *run, Owner::Job(job), now) {
                    for rest in &started_runs[i + 1..] {
                        gw.runner.discard(*rest);
                    }
                    // Its watched runs end unheard: the job is gone.
                    gw.tools.jobs.remove(&job);
                    for watched in runs::runs_of(gw, job) {
                        gw.runner.kill_now(watched, now);
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
        Start::Ask(ask) => {
            let deadline = now + gw.cfg.approval_timeout;
            let (tools, mut env) = gw.asking();
            Started::Asking(tools.approvals.ask(&mut env, rid, &ask, deadline))
        }
    }
}

/// Approved without asking: always, for this session, or the session is in yolo mode.
fn pre_approved(gw: &Gateway, rid: &str, rule: &str) -> bool {
    let (yolo, rules) = match gw.sessions.get(rid) {
        Some(s) => (s.yolo, s.approved_rules.as_slice()),
        None => (false, &[][..]),
    };
    gw.tools.approvals.pre_approved(rule, yolo, rules)
}

/// Step the jobs that are due (woken in the loop or from another thread): each tool goes on
/// within its budget, and a call it finishes is recorded.
pub(crate) fn step_due(gw: &mut Gateway, now: Instant) {
    let due = gw.tools.due.take(&gw.tools.wakers);
    for job in due {
        let Some(rid) = gw.tools.jobs.get(&job).map(|j| j.rid.clone()) else {
            continue;
        };
        gw.isolated(Some(&rid), now, |gw| step_job(gw, job, None, now));
    }
}

/// Step one job now (`answer`: the user's answer to its question).
pub(crate) fn step_job(gw: &mut Gateway, job: JobId, answer: Option<UserAnswer>, now: Instant) {
    let Some(j) = gw.tools.jobs.get(&job) else {
        return;
    };
    let (rid, name, args) = (j.rid.clone(), j.call.name.clone(), j.args.clone());
    let how = Invocation {
        job,
        approved: true,
        answer,
    };
    let Some((result, mut asked)) =
        with_tool(gw, &rid, &name, how, now, |t, ctx| t.step(ctx, &args))
    else {
        return;
    };
    // A step may not start runs: only a start's are watched.
    for run in std::mem::take(&mut asked.runs) {
        gw.runner.discard(run);
    }
    match result {
        Some(result) => finish_job(gw, job, result, now),
        None => schedule_wakes(gw, &rid, job, &mut asked, now),
    }
}

/// Stop a job: its runs get SIGTERM (the result comes when they end), or the tool cancels
/// it and its result is returned.
fn stop_job(gw: &mut Gateway, job: JobId, now: Instant) -> Option<ToolResult> {
    let live = runs::runs_of(gw, job);
    if !live.is_empty() {
        for run in live {
            gw.runner.stop(run, crate::runner::Ending::Interrupted, now);
        }
        runs::after_runner(gw, now);
        return None;
    }
    let (tools, mut env) = gw.asking();
    tools
        .questions
        .withdraw_for_job(&mut env, job, "interrupted");
    let name = gw.tools.jobs.get(&job)?.call.name.clone();
    let result = gw.tools.registry.get_mut(&name)?.cancel(job)?;
    gw.tools.jobs.remove(&job);
    Some(result)
}

/// Record a finished call: the tool message (committed this iteration), then `tool.complete`.
fn record_result(gw: &mut Gateway, rid: &str, call: &ToolCall, result: &ToolResult) {
    if let Some(s) = gw.sessions.get_mut(rid) {
        let mut m = Message::new(
            Role::Tool,
            Some(result.content.to_string()),
            util::unix_now(),
        );
        m.tool_call_id = Some(call.id.clone());
        m.tool_name = Some(call.name.clone());
        s.append(m);
    }
    gw.mark_dirty(rid);
    let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    let duration_s = result.duration.as_secs_f64();
    let mut payload = json!({"tool_id": call.id, "name": call.name, "args": args,
           "duration_s": (duration_s * 1000.0).round() / 1000.0, "result": result.content,
           "summary": result.summary});
    if let Some(e) = &result.error {
        payload["error"] = json!(e);
    }
    for (key, value) in &result.event_fields {
        payload[key] = value.clone();
    }
    gw.emit(rid, "tool.complete", payload);
}

/// Give each call a result saying it was not run (no events: the calls never started).
fn answer_unrun(gw: &mut Gateway, rid: &str, calls: &[ToolCall], output: &str, error: &str) {
    let Some(s) = gw.sessions.get_mut(rid) else {
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
