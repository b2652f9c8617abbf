//! Tasks through one embedded gateway, at most `parallel` sessions at a time: each task opens
//! a session (`session.create` in its working directory, or `session.resume`), submits its
//! prompt, answers approvals by the policy, and ends at its `message.complete` — or, past its
//! timeout, with a `session.interrupt` — after which its session is closed and the next task
//! starts. Everything goes through the JSON-RPC methods and events the TUI uses.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::embedded::Embedded;
use super::record::{Approvals, Outcome, Status, Subagents, Usage};
use super::tasks::Task;
use crate::client::{Frame, classify};

/// How approval requests are answered: there is nobody to ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approve {
    /// Deny each; the model is told and the turn goes on.
    Never,
    /// Approve each, once.
    Always,
    /// Deny, interrupt the turn and end the task `refused`.
    AskFails,
}

impl Approve {
    pub fn parse(text: &str) -> Result<Approve, String> {
        [Approve::Never, Approve::Always, Approve::AskFails]
            .into_iter()
            .find(|a| a.name() == text)
            .ok_or(format!(
                "--approve: {text:?} is not one of never, always, ask-fails"
            ))
    }

    pub fn name(self) -> &'static str {
        match self {
            Approve::Never => "never",
            Approve::Always => "always",
            Approve::AskFails => "ask-fails",
        }
    }
}

pub struct Settings {
    pub parallel: usize,
    pub approve: Approve,
    /// A task's timeout unless it sets its own.
    pub timeout: Option<Duration>,
    /// How long an interrupted task may take to report its end before it is recorded anyway.
    pub stop_grace: Duration,
    /// `sessions.source` of the sessions created.
    pub source: String,
}

/// What a task's output goes to.
pub trait Sink {
    /// An event frame's `params`, as the gateway sent it.
    fn event(&mut self, _params: &Value) {}
    /// Task `index`'s session opened: `session.create`'s (or `session.resume`'s) result.
    fn opened(&mut self, _index: usize, _result: &Value) {}
    /// Task `index` ended.
    fn finished(&mut self, index: usize, task: &Task, outcome: &Outcome);
}

/// Where the tasks come from, one at a time as sessions free up: a tasks file is read as it
/// is dispatched, never held whole.
pub trait Source {
    fn next_task(&mut self) -> Option<Task>;
    /// Tasks not yet taken (when known), for the summary's `not_started`.
    fn left(&self) -> usize;
}

impl Source for std::vec::IntoIter<Task> {
    fn next_task(&mut self) -> Option<Task> {
        self.next()
    }
    fn left(&self) -> usize {
        self.len()
    }
}

/// How the batch ended.
pub struct End {
    /// The gateway stopped before every task ran (a signal): the rest never started.
    pub stopped: bool,
    pub not_started: usize,
}

#[derive(Clone, Copy)]
enum Purpose {
    Open,
    Submit,
    Other,
}

struct Run {
    task: Task,
    started: Instant,
    deadline: Option<Instant>,
    /// The runtime session id, once open.
    session: Option<String>,
    stored: Option<String>,
    /// The session's usage when the task began.
    before: Usage,
    /// Why the task is being stopped, since when, and the error to record.
    stop: Option<(Status, Instant, Option<String>)>,
    turns: u64,
    tool_calls: u64,
    /// Tools of this task running now, by `tool_id`.
    tools_running: usize,
    tools_since: Option<Instant>,
    tool_time: Duration,
    approvals: Approvals,
    subagents: Subagents,
}

impl Run {
    fn outcome(&self, status: Status, usage: Usage, now: Instant) -> Outcome {
        let mut tool_time = self.tool_time;
        if let Some(since) = self.tools_since {
            tool_time += now.saturating_duration_since(since);
        }
        Outcome {
            status,
            stored_session_id: self.stored.clone(),
            turns: self.turns,
            tool_calls: self.tool_calls,
            usage,
            approvals: self.approvals,
            subagents: self.subagents,
            wall: now.saturating_duration_since(self.started),
            tool_time,
            answer: None,
            error: None,
        }
    }
}

pub struct Batch<'s> {
    gw: Embedded,
    source: &'s mut dyn Source,
    /// Every task has been taken from the source.
    drained: bool,
    settings: Settings,
    next: usize,
    runs: HashMap<usize, Run>,
    by_request: HashMap<String, (usize, Purpose)>,
    by_session: HashMap<String, usize>,
}

impl<'s> Batch<'s> {
    pub fn new(gw: Embedded, source: &'s mut dyn Source, settings: Settings) -> Batch<'s> {
        Batch {
            gw,
            source,
            drained: false,
            settings,
            next: 0,
            runs: HashMap::new(),
            by_request: HashMap::new(),
            by_session: HashMap::new(),
        }
    }

    /// Runs every task (or until the gateway stops), then closes the gateway.
    pub fn run(mut self, sink: &mut dyn Sink) -> End {
        let mut frames = Vec::new();
        let mut we_closed = false;
        loop {
            let now = Instant::now();
            if !self.gw.shutting_down() {
                self.start_more(now, sink);
            }
            if self.drained && self.runs.is_empty() && self.gw.input_open() {
                self.gw.close_input();
                we_closed = true;
            }
            let exited = self.gw.step(self.next_deadline(), &mut frames);
            for frame in frames.drain(..) {
                self.on_frame(&frame, sink);
            }
            self.check_deadlines(Instant::now(), sink);
            if exited.is_some() {
                break;
            }
        }
        // The gateway is gone: whatever had not ended was stopped with it.
        let now = Instant::now();
        let mut left: Vec<usize> = self.runs.keys().copied().collect();
        left.sort_unstable();
        for index in left {
            self.finish(index, Status::Interrupted, None, None, now, sink);
        }
        End {
            stopped: !we_closed,
            not_started: self.source.left(),
        }
    }

    fn start_more(&mut self, now: Instant, sink: &mut dyn Sink) {
        while self.runs.len() < self.settings.parallel.max(1) && !self.drained {
            let Some(task) = self.source.next_task() else {
                self.drained = true;
                break;
            };
            let index = self.next;
            self.next += 1;
            self.start(index, task, now, sink);
        }
    }

    fn start(&mut self, index: usize, task: Task, now: Instant, sink: &mut dyn Sink) {
        let timeout = task.timeout.or(self.settings.timeout);
        let bad_cwd = (task.cwd.as_ref())
            .filter(|d| !d.is_dir())
            .map(|d| format!("working directory {} is not a directory", d.display()));
        let (method, params) = match &task.resume {
            Some(id) => ("session.resume", json!({ "session_id": id })),
            None => {
                let mut p = json!({ "source": self.settings.source });
                if let Some(cwd) = &task.cwd {
                    p["cwd"] = json!(cwd.to_string_lossy());
                }
                if let Some(model) = &task.model {
                    p["model"] = json!(model);
                }
                ("session.create", p)
            }
        };
        self.runs.insert(
            index,
            Run {
                task,
                started: now,
                deadline: timeout.map(|t| now + t),
                session: None,
                stored: None,
                before: Usage::default(),
                stop: None,
                turns: 0,
                tool_calls: 0,
                tools_running: 0,
                tools_since: None,
                tool_time: Duration::ZERO,
                approvals: Approvals::default(),
                subagents: Subagents::default(),
            },
        );
        if let Some(why) = bad_cwd {
            self.finish(index, Status::Refused, None, Some(why), now, sink);
            return;
        }
        let id = self.gw.request(method, params);
        self.by_request.insert(id, (index, Purpose::Open));
    }

    /// The next instant something of ours is due: a timeout, or an interrupted task's grace.
    fn next_deadline(&self) -> Option<Instant> {
        self.runs
            .values()
            .filter_map(|r| match r.stop {
                Some((_, since, _)) => Some(since + self.settings.stop_grace),
                None => r.deadline,
            })
            .min()
    }

    fn check_deadlines(&mut self, now: Instant, sink: &mut dyn Sink) {
        let due: Vec<usize> = self
            .runs
            .iter()
            .filter(|(_, r)| match r.stop {
                Some((_, since, _)) => now >= since + self.settings.stop_grace,
                None => r.deadline.is_some_and(|d| now >= d),
            })
            .map(|(i, _)| *i)
            .collect();
        for index in due {
            let stop = self.runs.get(&index).and_then(|r| r.stop.clone());
            match stop {
                // It did not report its end in time: record it as it is.
                Some((status, _, error)) => self.finish(index, status, None, error, now, sink),
                None => {
                    let after = (self.runs.get(&index))
                        .map(|r| task_timeout(&r.task, &self.settings))
                        .unwrap_or_default();
                    let why = format!("timed out after {} s", after.as_secs_f64());
                    self.stop(index, Status::Timeout, why, now, sink);
                }
            }
        }
    }

    /// Interrupts a task's turn; it ends with `status` when its `message.complete` arrives.
    fn stop(
        &mut self,
        index: usize,
        status: Status,
        why: String,
        now: Instant,
        sink: &mut dyn Sink,
    ) {
        let Some(run) = self.runs.get_mut(&index) else {
            return;
        };
        if run.stop.is_some() {
            return;
        }
        match run.session.clone() {
            Some(session) => {
                run.stop = Some((status, now, Some(why)));
                let id = self
                    .gw
                    .request("session.interrupt", json!({ "session_id": session }));
                self.by_request.insert(id, (index, Purpose::Other));
            }
            // Still opening: nothing runs yet.
            None => self.finish(index, status, None, Some(why), now, sink),
        }
    }

    fn on_frame(&mut self, frame: &Value, sink: &mut dyn Sink) {
        let now = Instant::now();
        match classify(frame) {
            Frame::Event {
                kind,
                session_id,
                payload,
            } => {
                if let Some(params) = frame.get("params") {
                    sink.event(params);
                }
                if let Some(&index) = self.by_session.get(session_id) {
                    self.on_event(index, kind, payload, now, sink);
                }
            }
            Frame::Response { id, outcome } => {
                let Some((index, purpose)) = self.by_request.remove(&id) else {
                    return;
                };
                match (purpose, outcome) {
                    (Purpose::Open, Ok(result)) => {
                        sink.opened(index, result);
                        self.opened(index, result)
                    }
                    (Purpose::Open | Purpose::Submit, Err(message)) => {
                        // Refused because a signal is stopping the gateway: not the task's fault,
                        // and a continuation runs it again.
                        let status = if self.gw.shutting_down() {
                            Status::Interrupted
                        } else {
                            Status::Refused
                        };
                        self.finish(index, status, None, Some(message), now, sink)
                    }
                    _ => {}
                }
            }
            Frame::ServerRequest { id, .. } => {
                let id = id.clone();
                self.gw.refuse(&id, "not supported by exec");
            }
            Frame::Other => {}
        }
    }

    fn opened(&mut self, index: usize, result: &Value) {
        let Some(run) = self.runs.get_mut(&index) else {
            return;
        };
        let text = |key| result.get(key).and_then(Value::as_str).map(str::to_string);
        let Some(session) = text("session_id") else {
            return;
        };
        run.stored = text("stored_session_id");
        run.before = Usage::of(&result["info"]["usage"]);
        run.session = Some(session.clone());
        self.by_session.insert(session.clone(), index);
        let params = json!({ "session_id": session, "text": run.task.prompt });
        let id = self.gw.request("prompt.submit", params);
        self.by_request.insert(id, (index, Purpose::Submit));
    }

    fn on_event(
        &mut self,
        index: usize,
        kind: &str,
        payload: &Value,
        now: Instant,
        sink: &mut dyn Sink,
    ) {
        let Some(run) = self.runs.get_mut(&index) else {
            return;
        };
        let text = |key| payload.get(key).and_then(Value::as_str);
        match kind {
            "tool.start" => {
                run.tool_calls += 1;
                run.tools_running += 1;
                run.tools_since.get_or_insert(now);
            }
            "tool.complete" => {
                run.tools_running = run.tools_running.saturating_sub(1);
                if run.tools_running == 0
                    && let Some(since) = run.tools_since.take()
                {
                    run.tool_time += now.saturating_duration_since(since);
                }
            }
            "subagent.complete" => run.subagents.add(payload),
            "approval.request" => {
                run.approvals.asked += 1;
                let choice = match self.settings.approve {
                    Approve::Always => "once",
                    Approve::Never | Approve::AskFails => "deny",
                };
                if choice == "once" {
                    run.approvals.approved += 1;
                } else {
                    run.approvals.denied += 1;
                }
                let mut params = json!({"session_id": run.session, "choice": choice});
                if let Some(request_id) = text("request_id") {
                    params["request_id"] = json!(request_id);
                }
                let id = self.gw.request("approval.respond", params);
                self.by_request.insert(id, (index, Purpose::Other));
                if self.settings.approve == Approve::AskFails {
                    let why = format!(
                        "needed an approval (--approve ask-fails): {}",
                        text("command").unwrap_or("")
                    );
                    self.stop(index, Status::Refused, why, now, sink);
                }
            }
            "message.complete" => {
                run.turns += 1;
                let turn = Status::of_turn(text("status").unwrap_or("complete"));
                let (status, error) = match (&run.stop, turn) {
                    (Some((why, _, error)), Status::Interrupted) => (*why, error.clone()),
                    _ => (turn, payload.get("error").map(error_text)),
                };
                let usage = Usage::of(&payload["usage"]).since(&run.before);
                let answer = text("text").map(str::to_string);
                let mut outcome = run.outcome(status, usage, now);
                outcome.answer = answer;
                outcome.error = error;
                self.end(index, outcome, sink);
            }
            _ => {}
        }
    }

    /// Ends a task without its `message.complete` (refused, stopped before it reported).
    fn finish(
        &mut self,
        index: usize,
        status: Status,
        usage: Option<Usage>,
        error: Option<String>,
        now: Instant,
        sink: &mut dyn Sink,
    ) {
        let Some(run) = self.runs.get(&index) else {
            return;
        };
        let mut outcome = run.outcome(status, usage.unwrap_or_default(), now);
        outcome.error = error;
        self.end(index, outcome, sink);
    }

    fn end(&mut self, index: usize, outcome: Outcome, sink: &mut dyn Sink) {
        let Some(run) = self.runs.remove(&index) else {
            return;
        };
        if let Some(session) = run.session {
            self.by_session.remove(&session);
            if !self.gw.shutting_down() {
                let id = self
                    .gw
                    .request("session.close", json!({ "session_id": session }));
                self.by_request.insert(id, (index, Purpose::Other));
            }
        }
        sink.finished(index, &run.task, &outcome);
    }
}

fn task_timeout(task: &Task, settings: &Settings) -> Duration {
    task.timeout.or(settings.timeout).unwrap_or_default()
}

fn error_text(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        other => crate::client::error_message(other),
    }
}
