//! The turn as an explicit state machine. Transitions are pure: each takes what happened
//! (the model answered, a tool call started, finished or asked, the turn is interrupted) and
//! returns the [`Action`]s the driver executes; [`run`] executes them from a work queue, so
//! however many calls finish at once the stack stays flat.

use std::collections::VecDeque;

use crate::model::ToolCall;
use crate::tools::{JobId, ToolResult};

/// Model rounds in one turn before the turn is stopped.
pub const MAX_ROUNDS: u32 = 50;
/// Tool calls of one model answer that are run; the rest are answered without running.
pub const MAX_CALLS_PER_ANSWER: usize = 128;

/// What the result of a call not run because the turn was interrupted says.
pub const NOT_RUN_INTERRUPTED: &str = "[Command not run: the turn was interrupted]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnLimits {
    pub max_rounds: u32,
    pub max_calls_per_answer: usize,
}

impl Default for TurnLimits {
    fn default() -> Self {
        TurnLimits {
            max_rounds: MAX_ROUNDS,
            max_calls_per_answer: MAX_CALLS_PER_ANSWER,
        }
    }
}

/// How a turn ended, as `message.complete` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Complete,
    Interrupted,
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Complete => "complete",
            Status::Interrupted => "interrupted",
            Status::Error => "error",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// A model call is due or streaming.
    AwaitingModel,
    /// The calls of the last answer are being run: `call` is being started or is running
    /// (`job` once it runs past its start).
    RunningTools {
        call: ToolCall,
        job: Option<JobId>,
    },
    /// `call` waits for the user's approval asked with `request_id`.
    AwaitingApproval {
        call: ToolCall,
        request_id: String,
    },
    Done(Status),
}

/// What the driver does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start the next model call of the turn.
    CallModel,
    /// Start a tool call (`approved`: what it asked about was approved); the driver reports
    /// how it went with [`TurnMachine::started`].
    StartTool { call: ToolCall, approved: bool },
    /// Record a finished call: its tool message, then `tool.complete`.
    Record { call: ToolCall, result: ToolResult },
    /// Give calls that never start a result each (no events).
    AnswerUnrun {
        calls: Vec<ToolCall>,
        output: String,
        error: String,
    },
    /// Tell the user something went wrong without ending the turn.
    Warn(String),
    /// Stop the running call; it finishes later (or at once) through [`TurnMachine::finished`].
    StopTool(JobId),
    /// Withdraw an unanswered approval request; its denial finishes the call.
    WithdrawApproval(String),
    EndTurn {
        status: Status,
        error: Option<String>,
    },
}

/// How starting a call went.
#[derive(Debug, Clone, PartialEq)]
pub enum Started {
    /// It finished at once (refused, invalid, could not start, or a quick tool).
    Finished(ToolResult),
    /// It runs as `job` and finishes later.
    Running(JobId),
    /// It waits for the user's approval.
    Asking(String),
    /// Nothing can be saved: the start waits for the hold to end ([`TurnMachine::resume`]).
    Deferred { approved: bool },
}

/// The state of one turn.
#[derive(Debug, Clone)]
pub struct TurnMachine {
    state: State,
    /// Calls of the last answer not started yet.
    pending: VecDeque<ToolCall>,
    /// An interrupt arrived while a call was stopping; the turn ends when it finishes.
    interrupting: bool,
    /// Model calls started in this turn.
    rounds: u32,
    limits: TurnLimits,
    /// The current call's start waits for the hold to end (`approved`, as it was started).
    deferred: Option<bool>,
}

impl Default for TurnMachine {
    fn default() -> Self {
        TurnMachine::new(TurnLimits::default())
    }
}

impl TurnMachine {
    pub fn new(limits: TurnLimits) -> Self {
        TurnMachine {
            state: State::AwaitingModel,
            pending: VecDeque::new(),
            interrupting: false,
            rounds: 0,
            limits,
            deferred: None,
        }
    }

    /// Where the turn is (a resumed hold looks whether it awaits its model call).
    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// Stop the turn after `max` model calls instead of the default.
    pub fn limit_rounds(&mut self, max: u32) {
        self.limits.max_rounds = max.max(1);
    }

    pub fn interrupting(&self) -> bool {
        self.interrupting
    }

    pub fn awaiting_approval(&self) -> bool {
        matches!(self.state, State::AwaitingApproval { .. })
    }

    #[cfg(test)]
    /// The job of the call running now.
    pub fn running_job(&self) -> Option<JobId> {
        match &self.state {
            State::RunningTools { job, .. } => *job,
            _ => None,
        }
    }

    /// A model call starts.
    pub fn model_call_started(&mut self) {
        self.rounds += 1;
        self.state = State::AwaitingModel;
    }

    /// The model call of this round is over: it failed, answered, or asked for tool calls.
    pub fn model_answered(
        &mut self,
        mut calls: Vec<ToolCall>,
        error: Option<String>,
    ) -> Vec<Action> {
        if let Some(error) = error {
            return vec![self.end(Status::Error, Some(error))];
        }
        if calls.is_empty() {
            return vec![self.end(Status::Complete, None)];
        }
        let mut actions = Vec::new();
        let cap = self.limits.max_calls_per_answer;
        if calls.len() > cap {
            let excess = calls.split_off(cap);
            let why = format!("too many tool calls in one answer (at most {cap} run)");
            let text = format!("{} tool calls not run: {why}", excess.len());
            actions.push(Action::AnswerUnrun {
                calls: excess,
                output: String::new(),
                error: why,
            });
            actions.push(Action::Warn(text));
        }
        self.pending.extend(calls);
        actions.extend(self.next());
        actions
    }

    /// How starting (or stopping) the current call went.
    pub fn started(&mut self, how: Started) -> Vec<Action> {
        if let Started::Finished(result) = how {
            return self.finished(result);
        }
        let State::RunningTools { call, job } = &mut self.state else {
            return Vec::new();
        };
        match how {
            Started::Finished(_) => Vec::new(),
            Started::Running(id) => {
                *job = Some(id);
                Vec::new()
            }
            Started::Asking(request_id) => {
                let call = call.clone();
                self.state = State::AwaitingApproval { call, request_id };
                Vec::new()
            }
            Started::Deferred { approved } => {
                self.deferred = Some(approved);
                Vec::new()
            }
        }
    }

    /// Whether the current call's start waits for the hold to end.
    pub fn deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// The hold ended: start the call it deferred, as it was to start.
    pub fn resume(&mut self) -> Vec<Action> {
        let Some(approved) = self.deferred.take() else {
            return Vec::new();
        };
        let State::RunningTools { call, job: None } = &self.state else {
            return Vec::new();
        };
        vec![Action::StartTool {
            call: call.clone(),
            approved,
        }]
    }

    /// The current call finished (its job ended, or its approval was denied).
    pub fn finished(&mut self, result: ToolResult) -> Vec<Action> {
        match &self.state {
            State::RunningTools { call, .. } | State::AwaitingApproval { call, .. } => {
                let call = call.clone();
                self.record_and_next(call, result)
            }
            _ => Vec::new(),
        }
    }

    /// The user approved the call that waits: start it again, approved.
    pub fn approved(&mut self) -> Vec<Action> {
        let State::AwaitingApproval { call, .. } = &self.state else {
            return Vec::new();
        };
        let call = call.clone();
        self.state = State::RunningTools {
            call: call.clone(),
            job: None,
        };
        vec![Action::StartTool {
            call,
            approved: true,
        }]
    }

    /// Stop the tool side of the turn. `true` when a call is still stopping (the turn then
    /// ends when it finishes); otherwise the caller ends the turn after the actions.
    pub fn interrupt(&mut self) -> (Vec<Action>, bool) {
        // A start the hold deferred never runs: it is answered with the pending calls below.
        self.deferred = None;
        if self.interrupting {
            return (Vec::new(), true);
        }
        match &self.state {
            State::AwaitingApproval { request_id, .. } => {
                self.interrupting = true;
                (vec![Action::WithdrawApproval(request_id.clone())], true)
            }
            State::RunningTools { job: Some(job), .. } => {
                self.interrupting = true;
                (vec![Action::StopTool(*job)], true)
            }
            State::RunningTools { call, job: None } => {
                // A start the hold deferred, or one that failed inside the gateway (a panic),
                // leaves a call here: it is answered with the rest, so the transcript stays
                // valid for a model API.
                self.pending.push_front(call.clone());
                (self.skip_pending().into_iter().collect(), false)
            }
            _ => (self.skip_pending().into_iter().collect(), false),
        }
    }

    /// The session leaves now: the running call is being killed, and the turn ends when its
    /// result is recorded.
    pub fn abandon(&mut self) {
        self.interrupting = true;
    }

    fn record_and_next(&mut self, call: ToolCall, result: ToolResult) -> Vec<Action> {
        let mut actions = vec![Action::Record { call, result }];
        actions.extend(self.next());
        actions
    }

    /// Nothing runs: start the next call, or the next model round when none is left.
    fn next(&mut self) -> Vec<Action> {
        if self.interrupting {
            let mut actions: Vec<Action> = self.skip_pending().into_iter().collect();
            actions.push(self.end(Status::Interrupted, None));
            return actions;
        }
        let action = match self.pending.pop_front() {
            Some(call) => {
                self.state = State::RunningTools {
                    call: call.clone(),
                    job: None,
                };
                Action::StartTool {
                    call,
                    approved: false,
                }
            }
            None if self.rounds >= self.limits.max_rounds => {
                let why = format!(
                    "stopped after {} model calls in one turn",
                    self.limits.max_rounds
                );
                self.end(Status::Error, Some(why))
            }
            None => {
                self.state = State::AwaitingModel;
                Action::CallModel
            }
        };
        vec![action]
    }

    /// Every call not started gets a result, so the transcript stays valid for a model API.
    fn skip_pending(&mut self) -> Option<Action> {
        if self.pending.is_empty() {
            return None;
        }
        Some(Action::AnswerUnrun {
            calls: self.pending.drain(..).collect(),
            output: NOT_RUN_INTERRUPTED.into(),
            error: "not run".into(),
        })
    }

    fn end(&mut self, status: Status, error: Option<String>) -> Action {
        self.state = State::Done(status);
        Action::EndTurn { status, error }
    }
}

/// Who executes the actions of one turn.
pub trait Effects {
    /// The turn's machine; `None` once the turn is gone.
    fn machine(&mut self) -> Option<&mut TurnMachine>;
    /// Do one action; starting a tool reports how it went.
    fn execute(&mut self, action: Action) -> Option<Started>;
}

/// Execute `actions` and everything they lead to, in order, from a work queue.
pub fn run(fx: &mut impl Effects, actions: Vec<Action>) {
    let mut queue: VecDeque<Action> = actions.into();
    while let Some(action) = queue.pop_front() {
        let Some(how) = fx.execute(action) else {
            continue;
        };
        let Some(machine) = fx.machine() else {
            return;
        };
        // What follows a step comes before what was already queued, as in a call.
        for next in machine.started(how).into_iter().rev() {
            queue.push_front(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(i: usize) -> ToolCall {
        ToolCall {
            id: format!("c{i}"),
            name: "t".into(),
            arguments: "{}".into(),
        }
    }

    fn calls(n: usize) -> Vec<ToolCall> {
        (0..n).map(call).collect()
    }

    /// What the fake gateway saw, in order.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Start(String, bool),
        Record(String, ToolResult),
        Unrun(usize, String),
        Warn(String),
        Stop(JobId),
        Withdraw(String),
        /// A start the hold deferred (approved or not).
        Deferred(String, bool),
        CallModel,
        End(Status, Option<String>),
    }

    /// A gateway without processes: each start is answered by `answer`.
    struct Fake {
        machine: Option<TurnMachine>,
        seen: Vec<Seen>,
        answer: fn(&ToolCall, bool) -> Started,
        /// What a stop or a withdrawal finishes the call with at once.
        stop_result: Option<ToolResult>,
        /// Nothing can be saved: starts are deferred, as the gateway defers them.
        holding: bool,
    }

    impl Fake {
        fn new(answer: fn(&ToolCall, bool) -> Started) -> Fake {
            Fake {
                machine: Some(TurnMachine::default()),
                seen: Vec::new(),
                answer,
                stop_result: None,
                holding: false,
            }
        }

        fn with(mut self, limits: TurnLimits) -> Fake {
            self.machine = Some(TurnMachine::new(limits));
            self
        }

        fn m(&mut self) -> &mut TurnMachine {
            self.machine.as_mut().expect("turn still there")
        }

        /// Feed a transition's actions.
        fn go(&mut self, transition: impl FnOnce(&mut TurnMachine) -> Vec<Action>) {
            let actions = transition(self.m());
            run(self, actions);
        }

        fn records(&self) -> usize {
            self.seen
                .iter()
                .filter(|s| matches!(s, Seen::Record(..)))
                .count()
        }
    }

    impl Effects for Fake {
        fn machine(&mut self) -> Option<&mut TurnMachine> {
            self.machine.as_mut()
        }

        fn execute(&mut self, action: Action) -> Option<Started> {
            match action {
                Action::CallModel => self.seen.push(Seen::CallModel),
                Action::StartTool { call, approved } if self.holding => {
                    self.seen.push(Seen::Deferred(call.id, approved));
                    return Some(Started::Deferred { approved });
                }
                Action::StartTool { call, approved } => {
                    self.seen.push(Seen::Start(call.id.clone(), approved));
                    return Some((self.answer)(&call, approved));
                }
                Action::Record { call, result } => self.seen.push(Seen::Record(call.id, result)),
                Action::AnswerUnrun { calls, output, .. } => {
                    self.seen.push(Seen::Unrun(calls.len(), output));
                }
                Action::Warn(text) => self.seen.push(Seen::Warn(text)),
                Action::StopTool(job) => {
                    self.seen.push(Seen::Stop(job));
                    return self.stop_result.take().map(Started::Finished);
                }
                Action::WithdrawApproval(id) => {
                    self.seen.push(Seen::Withdraw(id));
                    return self.stop_result.take().map(Started::Finished);
                }
                Action::EndTurn { status, error } => {
                    self.seen.push(Seen::End(status, error));
                    // The gateway takes the turn away.
                    self.machine = None;
                }
            }
            None
        }
    }

    fn fails(_: &ToolCall, _: bool) -> Started {
        Started::Finished(ToolResult::failed("unknown tool: t"))
    }

    #[test]
    fn thousands_of_calls_that_fail_at_once_run_on_a_small_stack() {
        // Without the cap every call is started: the work queue, not recursion, carries them.
        let worker = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(|| {
                let unlimited = TurnLimits {
                    max_rounds: MAX_ROUNDS,
                    max_calls_per_answer: usize::MAX,
                };
                let mut fx = Fake::new(fails).with(unlimited);
                fx.m().model_call_started();
                fx.go(|m| m.model_answered(calls(8_000), None));
                (fx.records(), fx.seen.last().map(|s| format!("{s:?}")))
            })
            .unwrap();
        let (records, last) = worker.join().expect("no stack overflow");
        assert_eq!(records, 8_000);
        assert_eq!(last.as_deref(), Some("CallModel"));
    }

    #[test]
    fn past_the_cap_calls_are_answered_without_running() {
        let mut fx = Fake::new(fails);
        fx.m().model_call_started();
        fx.go(|m| m.model_answered(calls(8_000), None));
        let starts = fx
            .seen
            .iter()
            .filter(|s| matches!(s, Seen::Start(..)))
            .count();
        assert_eq!(starts, MAX_CALLS_PER_ANSWER);
        assert_eq!(fx.records(), MAX_CALLS_PER_ANSWER);
        assert_eq!(
            fx.seen[0],
            Seen::Unrun(8_000 - MAX_CALLS_PER_ANSWER, String::new())
        );
        assert!(
            matches!(&fx.seen[1], Seen::Warn(t) if t.contains("too many tool calls in one answer")),
            "{:?}",
            fx.seen[1]
        );
        assert_eq!(fx.seen.last(), Some(&Seen::CallModel));
        assert_eq!(fx.m().state(), &State::AwaitingModel);
    }

    #[test]
    fn an_answer_without_calls_or_with_an_error_ends_the_turn() {
        let mut fx = Fake::new(fails);
        fx.go(|m| m.model_answered(Vec::new(), None));
        assert_eq!(fx.seen, [Seen::End(Status::Complete, None)]);
        let mut fx = Fake::new(fails);
        fx.go(|m| m.model_answered(calls(2), Some("boom".into())));
        assert_eq!(fx.seen, [Seen::End(Status::Error, Some("boom".into()))]);
    }

    #[test]
    fn the_round_limit_ends_the_turn_after_its_tools() {
        let limits = TurnLimits {
            max_rounds: 1,
            max_calls_per_answer: 8,
        };
        let mut fx = Fake::new(fails).with(limits);
        fx.m().model_call_started();
        fx.go(|m| m.model_answered(calls(1), None));
        assert!(
            matches!(fx.seen.last(), Some(Seen::End(Status::Error, Some(e))) if e.contains("stopped after 1 model calls")),
            "{:?}",
            fx.seen
        );
    }

    #[test]
    fn a_tool_that_finishes_later_holds_the_turn_until_it_does() {
        let mut fx = Fake::new(|_, _| Started::Running(JobId(7)));
        fx.m().model_call_started();
        fx.go(|m| m.model_answered(calls(2), None));
        assert_eq!(fx.seen, [Seen::Start("c0".into(), false)]);
        assert_eq!(fx.m().running_job(), Some(JobId(7)));
        fx.go(|m| m.finished(ToolResult::terminal("done", Some(0), None)));
        assert_eq!(
            fx.seen[1..],
            [
                Seen::Record("c0".into(), ToolResult::terminal("done", Some(0), None)),
                Seen::Start("c1".into(), false)
            ]
        );
        fx.go(|m| m.finished(ToolResult::terminal("", Some(1), None)));
        assert_eq!(fx.seen.last(), Some(&Seen::CallModel));
    }

    #[test]
    fn interrupt_mid_tools_stops_the_call_then_skips_the_rest_and_ends_interrupted() {
        let mut fx = Fake::new(|_, _| Started::Running(JobId(1)));
        fx.m().model_call_started();
        fx.go(|m| m.model_answered(calls(3), None));
        let (actions, stopping) = fx.m().interrupt();
        assert!(stopping);
        assert_eq!(actions, [Action::StopTool(JobId(1))]);
        run(&mut fx, actions);
        // A second interrupt while it dies changes nothing.
        assert_eq!(fx.m().interrupt(), (Vec::new(), true));
        fx.go(|m| {
            m.finished(ToolResult::terminal(
                "[Command interrupted]",
                Some(130),
                None,
            ))
        });
        assert_eq!(
            fx.seen[2..],
            [
                Seen::Record(
                    "c0".into(),
                    ToolResult::terminal("[Command interrupted]", Some(130), None)
                ),
                Seen::Unrun(2, NOT_RUN_INTERRUPTED.into()),
                Seen::End(Status::Interrupted, None),
            ]
        );
    }

    #[test]
    fn a_start_that_never_returned_is_answered_on_interrupt() {
        let mut m = TurnMachine::default();
        m.model_call_started();
        let actions = m.model_answered(calls(3), None);
        assert_eq!(
            actions,
            [Action::StartTool {
                call: call(0),
                approved: false
            }]
        );
        // The start panicked: nothing reported how it went.
        let (actions, stopping) = m.interrupt();
        assert!(!stopping);
        assert!(
            matches!(&actions[..], [Action::AnswerUnrun { calls, .. }] if calls.len() == 3 && calls[0] == call(0)),
            "{actions:?}"
        );
    }

    #[test]
    fn interrupt_with_nothing_running_skips_the_pending_calls() {
        let mut m = TurnMachine::default();
        m.model_call_started();
        let (actions, stopping) = m.interrupt();
        assert!(!stopping);
        assert!(actions.is_empty());
    }

    fn asks(_: &ToolCall, approved: bool) -> Started {
        if approved {
            Started::Running(JobId(2))
        } else {
            Started::Asking("apr-1".into())
        }
    }

    #[test]
    fn an_approved_call_starts_again_approved() {
        let mut fx = Fake::new(asks);
        fx.m().model_call_started();
        fx.go(|m| m.model_answered(calls(1), None));
        assert!(fx.m().awaiting_approval());
        fx.go(TurnMachine::approved);
        assert_eq!(
            fx.seen,
            [
                Seen::Start("c0".into(), false),
                Seen::Start("c0".into(), true)
            ]
        );
        assert_eq!(fx.m().running_job(), Some(JobId(2)));
    }

    #[test]
    fn a_denied_or_timed_out_approval_records_the_denial_and_goes_on() {
        for why in ["denied by the user", "no answer (timeout)"] {
            let mut fx = Fake::new(asks);
            fx.m().model_call_started();
            fx.go(|m| m.model_answered(calls(2), None));
            let denial = ToolResult::terminal(&format!("Command not run: {why}."), None, None);
            fx.go(|m| m.finished(denial.clone()));
            assert_eq!(
                fx.seen[1..],
                [
                    Seen::Record("c0".into(), denial),
                    Seen::Start("c1".into(), false)
                ]
            );
            assert!(fx.m().awaiting_approval(), "the next call asks in turn");
        }
    }

    #[test]
    fn interrupt_while_asking_withdraws_and_the_denial_ends_the_turn() {
        let mut fx = Fake::new(asks);
        fx.m().model_call_started();
        fx.go(|m| m.model_answered(calls(2), None));
        let denial = ToolResult::terminal("Command not run: no answer (interrupted).", None, None);
        fx.stop_result = Some(denial.clone());
        let (actions, stopping) = fx.m().interrupt();
        assert!(stopping);
        run(&mut fx, actions);
        assert_eq!(
            fx.seen[1..],
            [
                Seen::Withdraw("apr-1".into()),
                Seen::Record("c0".into(), denial),
                Seen::Unrun(1, NOT_RUN_INTERRUPTED.into()),
                Seen::End(Status::Interrupted, None),
            ]
        );
        assert!(fx.machine.is_none());
    }

    #[test]
    fn an_approval_answered_during_a_hold_starts_the_call_only_when_the_hold_ends() {
        let mut fx = Fake::new(asks);
        fx.m().model_call_started();
        fx.go(|m| m.model_answered(calls(1), None));
        assert!(fx.m().awaiting_approval());
        fx.holding = true;
        fx.go(TurnMachine::approved);
        assert!(fx.m().deferred() && fx.m().running_job().is_none());
        // Resumed only when saving works again; it starts approved, without asking again.
        fx.holding = false;
        fx.go(TurnMachine::resume);
        assert_eq!(
            fx.seen,
            [
                Seen::Start("c0".into(), false),
                Seen::Deferred("c0".into(), true),
                Seen::Start("c0".into(), true),
            ]
        );
        assert_eq!(fx.m().running_job(), Some(JobId(2)));
        assert!(!fx.m().deferred());
        fx.go(TurnMachine::resume);
        assert_eq!(fx.seen.len(), 3, "a second resume starts nothing");
    }

    #[test]
    fn a_call_the_hold_deferred_is_answered_once_on_interrupt() {
        let mut fx = Fake::new(asks);
        fx.holding = true;
        fx.m().model_call_started();
        fx.go(|m| m.model_answered(calls(3), None));
        assert_eq!(fx.seen, [Seen::Deferred("c0".into(), false)]);
        let (actions, stopping) = fx.m().interrupt();
        assert!(!stopping);
        assert!(
            matches!(&actions[..], [Action::AnswerUnrun { calls, .. }] if calls.len() == 3 && calls[0] == call(0)),
            "each call gets one result: {actions:?}"
        );
        assert!(!fx.m().deferred());
        assert!(fx.m().resume().is_empty(), "the deferred call never starts");
    }
}
