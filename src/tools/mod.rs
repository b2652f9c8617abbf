//! Tools the model can call — the `terminal` tool — and `shell.exec`, on one machinery:
//! every command runs under a supervisor in its own process group; its output pipes and the
//! supervisor's status pipe (whose end is the command's exit) are in the poll; bounded output,
//! a timeout, and a kill of the whole group (SIGTERM, then SIGKILL).

pub mod approval;
pub mod policy;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Token};
use serde_json::{Value, json};

use crate::event_loop::{Gateway, Route, Timer};
use crate::model::ToolCall;
use crate::rpc::RpcError;
use crate::rpc::frame::{self, code};
pub use crate::runner::Ending;
use crate::runner::{RunEnd, RunEvent, RunId, Spec, Streams};
use crate::session::transcript::{Message, Role, tool_context};
use crate::util;

/// Live `tool.output` events: at most one per interval per tool, at most this much text each.
const LIVE_INTERVAL: Duration = Duration::from_millis(100);
const LIVE_MAX: usize = 8 * 1024;
/// Model rounds in one turn before the turn is stopped.
pub const MAX_ROUNDS: u32 = 50;
/// Tool calls of one model answer that are run; the rest are answered without running.
pub const MAX_CALLS_PER_ANSWER: usize = 128;
/// `shell.exec` timeout.
const SHELL_TIMEOUT: Duration = Duration::from_secs(30);

/// Who waits for a command.
#[derive(Debug, Clone)]
pub enum Owner {
    Turn {
        rid: String,
        call: ToolCall,
        args: Value,
    },
    Shell {
        request_id: Value,
    },
    /// A command run for a client request other than `shell.exec` (quick commands): `answer`
    /// turns its outcome into the result.
    Request {
        request_id: Value,
        answer: fn(&Outcome) -> Value,
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

/// A run of the runner and who waits for it.
struct Owned {
    owner: Owner,
    /// The token the loop routes its descriptors' readiness with.
    token: Token,
    /// Output not yet sent live, and how much did not fit.
    live: String,
    live_skipped: u64,
    live_timer: bool,
}

/// The tools side of the gateway: who owns each run, approvals.
pub struct Tools {
    owned: HashMap<RunId, Owned>,
    pub approvals: approval::Approvals,
}

impl Tools {
    pub fn new(home: &Path) -> Tools {
        Tools {
            owned: HashMap::new(),
            approvals: approval::Approvals::load(home),
        }
    }
}

/// Hermes' `messages.tool_calls` JSON for a list of calls (OpenAI shape).
pub fn tool_calls_json(calls: &[ToolCall]) -> String {
    let v: Vec<_> = calls
        .iter()
        .map(|c| {
            json!({"id": c.id, "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments}})
        })
        .collect();
    Value::Array(v).to_string()
}

/// The tools offered to the model, each with the Hermes toolset it belongs to.
pub const OFFERED: &[(&str, &str)] = &[("terminal", "terminal")];

/// `{toolset: [tool names]}`, the shape of the TUI's banner.
pub fn toolsets() -> Value {
    let mut map = serde_json::Map::new();
    for (toolset, name) in OFFERED {
        let names = map.entry(*toolset).or_insert_with(|| json!([]));
        if let Some(list) = names.as_array_mut() {
            list.push(json!(name));
        }
    }
    Value::Object(map)
}

/// The JSON schema of the `terminal` tool, as advertised to models.
pub fn terminal_schema() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command (bash -c) and return its output and exit status.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout": {"type": "number", "description": "Seconds before the command is killed."},
                    "cwd": {"type": "string", "description": "Working directory (default: the session's)."}
                },
                "required": ["command"]
            }
        }
    })
}

// ---- turns ----

/// Run the calls of one model round one after another, then continue the turn. Past
/// [`MAX_CALLS_PER_ANSWER`] each call is answered without running.
pub fn run_tool_calls(gw: &mut Gateway, rid: &str, mut calls: Vec<ToolCall>, now: Instant) {
    if calls.len() > MAX_CALLS_PER_ANSWER {
        let excess = calls.split_off(MAX_CALLS_PER_ANSWER);
        let why = format!("too many tool calls in one answer (at most {MAX_CALLS_PER_ANSWER} run)");
        answer_unrun(gw, rid, &excess, "", &why);
        let text = format!("{} tool calls not run: {why}", excess.len());
        gw.emit(rid, "status.update", json!({"kind": "warn", "text": text}));
    }
    if let Some(turn) = gw.turn_mut(rid) {
        turn.pending_tools.extend(calls);
    }
    next_tool(gw, rid, now);
}

/// Start the next pending tool call of the turn, or the next model round when none is left.
pub(crate) fn next_tool(gw: &mut Gateway, rid: &str, now: Instant) {
    loop {
        let Some(turn) = gw.turn_mut(rid) else {
            return;
        };
        if turn.interrupting {
            skip_pending(gw, rid, "[Command not run: the turn was interrupted]");
            gw.end_turn(rid, "interrupted", None, now);
            return;
        }
        let Some(call) = turn.pending_tools.pop_front() else {
            if turn.rounds >= MAX_ROUNDS {
                let msg = format!("stopped after {MAX_ROUNDS} model calls in one turn");
                gw.end_turn(rid, "error", Some(msg), now);
            } else {
                gw.schedule(rid);
            }
            return;
        };
        if start_tool_call(gw, rid, call, now) {
            return;
        }
    }
}

/// Begin one tool call; false when it finished at once (refused, invalid, fenced).
fn start_tool_call(gw: &mut Gateway, rid: &str, call: ToolCall, now: Instant) -> bool {
    let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    let context = tool_context(&call.name, &args);
    gw.emit(
        rid,
        "tool.start",
        json!({"tool_id": call.id, "name": call.name, "context": context}),
    );
    if call.name != "terminal" {
        let err = format!("unknown tool: {}", call.name);
        fail_at_once(gw, rid, &call, &args, err);
        return false;
    }
    let Some(command) = args
        .get("command")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        let err = "invalid arguments: command (a string) is required".to_string();
        fail_at_once(gw, rid, &call, &args, err);
        return false;
    };
    if command.trim().is_empty() {
        fail_at_once(gw, rid, &call, &args, "empty command".into());
        return false;
    }
    match policy::check(&command) {
        policy::Verdict::Refuse { reason } => {
            let err = format!("blocked: {reason}");
            fail_at_once(gw, rid, &call, &args, err);
            false
        }
        policy::Verdict::Ask { description, .. } if in_background(gw, rid) => {
            // Nobody sees a background task's approval request (the TUI shows one session).
            let err = format!("blocked: {description} (a background task cannot ask for approval)");
            fail_at_once(gw, rid, &call, &args, err);
            false
        }
        policy::Verdict::Ask { key, description } if !approval::pre_approved(gw, rid, key) => {
            approval::ask(gw, rid, call, args, &command, key, description, now);
            true
        }
        _ => launch_for_turn(gw, rid, call, args, now),
    }
}

fn in_background(gw: &Gateway, rid: &str) -> bool {
    gw.sessions.get(rid).is_some_and(|s| s.background.is_some())
}

/// Start the command of an approved (or harmless) call; false if it could not start.
pub(crate) fn launch_for_turn(
    gw: &mut Gateway,
    rid: &str,
    call: ToolCall,
    args: Value,
    now: Instant,
) -> bool {
    if gw.shutdown.is_some() {
        let out = "[host is exiting: command not started]";
        record_result(gw, rid, &call, &args, out, Some(130), None, 0.0);
        return false;
    }
    let command = args
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let timeout = args
        .get("timeout")
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite() && *t > 0.0)
        .map(|t| Duration::from_secs_f64(t.min(86_400.0)))
        .unwrap_or(gw.cfg.command_timeout);
    let session_cwd = gw
        .sessions
        .get(rid)
        .map(|s| s.cwd.clone())
        .unwrap_or_default();
    let cwd = args
        .get("cwd")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or(session_cwd);
    let owner = Owner::Turn {
        rid: rid.to_string(),
        call: call.clone(),
        args: args.clone(),
    };
    match launch(
        gw,
        owner,
        &command,
        Path::new(&cwd),
        timeout,
        Streams::Merged,
        now,
    ) {
        Ok(id) => {
            if let Some(turn) = gw.turn_mut(rid) {
                turn.tool = Some(id);
            }
            true
        }
        Err(e) => {
            let err = format!("could not start the command: {e}");
            fail_at_once(gw, rid, &call, &args, err);
            false
        }
    }
}

/// A call that finished later (its command ended, its approval was answered): record its
/// result, then move the turn on.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_call(
    gw: &mut Gateway,
    rid: &str,
    call: &ToolCall,
    args: &Value,
    output: &str,
    exit_code: Option<i32>,
    error: Option<String>,
    duration_s: f64,
    now: Instant,
) {
    record_result(gw, rid, call, args, output, exit_code, error, duration_s);
    next_tool(gw, rid, now);
}

/// A call that failed before anything ran (refused, invalid, could not start): its result is
/// the error alone.
fn fail_at_once(gw: &mut Gateway, rid: &str, call: &ToolCall, args: &Value, error: String) {
    record_result(gw, rid, call, args, "", None, Some(error), 0.0);
}

/// Record a finished call: the tool message (committed this iteration), then `tool.complete`.
/// Never moves the turn on itself, so calls that finish at once are run by `next_tool`'s loop
/// rather than by recursion.
#[allow(clippy::too_many_arguments)]
fn record_result(
    gw: &mut Gateway,
    rid: &str,
    call: &ToolCall,
    args: &Value,
    output: &str,
    exit_code: Option<i32>,
    error: Option<String>,
    duration_s: f64,
) {
    let result = json!({"output": output, "exit_code": exit_code, "error": error});
    if let Some(s) = gw.sessions.get_mut(rid) {
        let mut m = Message::new(Role::Tool, Some(result.to_string()), util::unix_now());
        m.tool_call_id = Some(call.id.clone());
        m.tool_name = Some(call.name.clone());
        s.append(m);
        if let Some(turn) = s.turn.as_mut() {
            turn.tool = None;
        }
    }
    gw.mark_dirty(rid);
    let mut payload = json!({"tool_id": call.id, "name": call.name, "args": args,
           "duration_s": (duration_s * 1000.0).round() / 1000.0, "result": result,
           "summary": completion_summary(output, exit_code, error.as_deref())});
    if let Some(e) = &error {
        payload["error"] = json!(e);
    }
    gw.emit(rid, "tool.complete", payload);
}

/// The one line the TUI shows when a call ends: why it failed, its exit status, or how much
/// it printed.
fn completion_summary(output: &str, exit_code: Option<i32>, error: Option<&str>) -> String {
    if let Some(e) = error {
        return util::clip(e, 120);
    }
    let lines = output.lines().filter(|l| !l.trim().is_empty()).count();
    let printed = match lines {
        0 => "no output".to_string(),
        1 => "1 line".to_string(),
        n => format!("{n} lines"),
    };
    match exit_code {
        Some(0) | None => printed,
        Some(124) => format!("timed out · {printed}"),
        Some(130) => format!("interrupted · {printed}"),
        Some(code) => format!("exit {code} · {printed}"),
    }
}

/// The last line a command printed, clipped: the live preview the TUI shows on its tool row.
fn live_preview(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| util::clip(l, 80))
}

/// Give every call not yet run a result, so the transcript stays valid for a model API.
fn skip_pending(gw: &mut Gateway, rid: &str, why: &str) {
    let pending: Vec<ToolCall> = match gw.turn_mut(rid) {
        Some(turn) => turn.pending_tools.drain(..).collect(),
        None => return,
    };
    answer_unrun(gw, rid, &pending, why, "not run");
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

/// Stop the tool side of a turn being interrupted. True when a command is still dying (the
/// turn then ends when it is reaped).
pub fn interrupt_tools(gw: &mut Gateway, rid: &str, now: Instant) -> bool {
    let Some(turn) = gw.turn_mut(rid) else {
        return false;
    };
    if turn.interrupting {
        return true;
    }
    if let Some(request_id) = turn.approval.clone() {
        // The denial ends the turn (finish_call sees `interrupting`).
        turn.interrupting = true;
        approval::withdraw(gw, &request_id, "interrupted", now);
        return true;
    }
    let tool = gw.turn(rid).and_then(|t| t.tool);
    match tool {
        Some(id) if gw.runner.is_running(id) => {
            if let Some(turn) = gw.turn_mut(rid) {
                turn.interrupting = true;
            }
            gw.runner.stop(id, Ending::Interrupted, now);
            after_runner(gw, now);
            true
        }
        _ => {
            skip_pending(gw, rid, "[Command not run: the turn was interrupted]");
            false
        }
    }
}

/// A session leaves memory now: kill its command at once and record the result.
pub fn abandon_session_tools(gw: &mut Gateway, rid: &str, now: Instant) {
    let ids = runs_where(
        gw,
        |o| matches!(o, Owner::Turn { rid: owner, .. } if owner == rid),
    );
    for id in ids {
        if let Some(turn) = gw.turn_mut(rid) {
            turn.interrupting = true;
        }
        gw.runner.kill_now(id, now);
        after_runner(gw, now);
    }
}

// ---- shell.exec ----

/// `shell.exec {command}`: answered when the command ends; never blocks other calls.
pub fn shell_exec(
    gw: &mut Gateway,
    request_id: Value,
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
    match policy::check(command) {
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
    let cwd = PathBuf::from(util::default_cwd());
    launch(
        gw,
        Owner::Shell { request_id },
        command,
        &cwd,
        SHELL_TIMEOUT,
        Streams::Separate,
        now,
    )
    .map(|_| ())
    .map_err(|e| RpcError::new(code::INTERNAL, format!("could not start the command: {e}")))
}

/// Run `command` for a client request, answered with `answer(outcome)` when it ends; never
/// blocks other calls. Refuses what the policy refuses or would ask about (nobody to ask).
pub fn run_for_request(
    gw: &mut Gateway,
    request_id: Value,
    command: &str,
    cwd: &Path,
    timeout: Duration,
    answer: fn(&Outcome) -> Value,
    now: Instant,
) -> Result<(), String> {
    if gw.shutdown.is_some() {
        return Err("the gateway is shutting down".into());
    }
    match policy::check(command) {
        policy::Verdict::Allow => {}
        policy::Verdict::Ask { description, .. }
        | policy::Verdict::Refuse {
            reason: description,
        } => return Err(format!("blocked: {description}")),
    }
    let owner = Owner::Request { request_id, answer };
    launch(gw, owner, command, cwd, timeout, Streams::Merged, now)
        .map(|_| ())
        .map_err(|e| format!("could not start the command: {e}"))
}

// ---- processes ----

fn launch(
    gw: &mut Gateway,
    owner: Owner,
    command: &str,
    cwd: &Path,
    timeout: Duration,
    streams: Streams,
    now: Instant,
) -> std::io::Result<RunId> {
    let live = matches!(owner, Owner::Turn { .. });
    let spec = Spec {
        command,
        cwd,
        streams,
        timeout,
        live,
    };
    let id = gw.runner.start(&spec, now)?;
    let token = gw.alloc_token(Route::Run(id));
    let registered = gw.runner.fds(id).into_iter().try_for_each(|fd| {
        gw.poll
            .registry()
            .register(&mut SourceFd(&fd), token, Interest::READABLE)
    });
    if let Err(e) = registered {
        for fd in gw.runner.fds(id) {
            let _ = gw.poll.registry().deregister(&mut SourceFd(&fd));
        }
        gw.runner.discard(id);
        gw.by_token.remove(&token);
        return Err(e);
    }
    gw.tools.owned.insert(
        id,
        Owned {
            owner,
            token,
            live: String::new(),
            live_skipped: 0,
            live_timer: false,
        },
    );
    after_runner(gw, now);
    Ok(id)
}

/// The runs whose owner matches.
fn runs_where(gw: &Gateway, want: impl Fn(&Owner) -> bool) -> Vec<RunId> {
    let mut ids: Vec<RunId> = gw
        .tools
        .owned
        .iter()
        .filter(|(_, o)| want(&o.owner))
        .map(|(id, _)| *id)
        .collect();
    ids.sort();
    ids
}

/// Take what the runner produced: its timers into the wheel, the descriptors of ended runs
/// out of the poll, its events to their owners.
pub(crate) fn after_runner(gw: &mut Gateway, now: Instant) {
    for wake in gw.runner.take_wakes() {
        gw.timers.insert(wake.at, Timer::Run(wake.run, wake.what));
    }
    for closed in gw.runner.take_closed() {
        for fd in &closed.fds {
            let _ = gw
                .poll
                .registry()
                .deregister(&mut SourceFd(&std::os::fd::AsRawFd::as_raw_fd(fd)));
        }
        if let Some(token) = gw.tools.owned.get(&closed.run).map(|o| o.token) {
            gw.by_token.remove(&token);
        }
    }
    for event in gw.runner.take_events() {
        let run = match &event {
            RunEvent::Output { run, .. } | RunEvent::Ended { run, .. } => *run,
        };
        let owner = owner_session(gw, run);
        gw.isolated(owner.as_deref(), now, |gw| on_run_event(gw, event, now));
    }
}

fn on_run_event(gw: &mut Gateway, event: RunEvent, now: Instant) {
    match event {
        RunEvent::Output { run, bytes } => {
            let Some(owned) = gw.tools.owned.get_mut(&run) else {
                return;
            };
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
        RunEvent::Ended { run, end } => {
            if let Some(owned) = gw.tools.owned.remove(&run) {
                deliver(gw, owned, end, now);
            }
        }
    }
}

/// Read every ready run's pipes and hand on what happened.
pub fn pump(gw: &mut Gateway, now: Instant) {
    gw.runner.pump(now);
    after_runner(gw, now);
}

/// A timer of the runner fired.
pub fn on_run_timer(gw: &mut Gateway, id: RunId, what: crate::runner::RunTimer, now: Instant) {
    gw.runner.on_timer(id, what, now);
    after_runner(gw, now);
}

/// The session whose turn runs this command, if a turn does.
pub(crate) fn owner_session(gw: &Gateway, id: RunId) -> Option<String> {
    match &gw.tools.owned.get(&id)?.owner {
        Owner::Turn { rid, .. } => Some(rid.clone()),
        _ => None,
    }
}

/// Send the accumulated live output of a turn's command as one `tool.output` event.
pub fn flush_live(gw: &mut Gateway, id: RunId) {
    let Some(owned) = gw.tools.owned.get_mut(&id) else {
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
    if let Owner::Turn { rid, call, .. } = &owned.owner {
        let (rid, tool_id, name) = (rid.clone(), call.id.clone(), call.name.clone());
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
fn deliver(gw: &mut Gateway, owned: Owned, end: RunEnd, now: Instant) {
    let code = end.code();
    let mut output = end.stdout;
    let note = match end.ending {
        Some(Ending::Timeout) => Some(format!(
            "[Command timed out after {}s]",
            end.timeout.as_secs_f64().round()
        )),
        Some(Ending::Interrupted) => Some("[Command interrupted]".to_string()),
        None => None,
    };
    match owned.owner {
        Owner::Turn { rid, call, args } => {
            if let Some(note) = note {
                if !output.is_empty() && !output.ends_with('\n') {
                    output.push('\n');
                }
                output.push_str(&note);
            }
            // Live output still pending goes out before the completion.
            if !owned.live.is_empty() {
                gw.emit(
                    &rid,
                    "tool.output",
                    json!({"tool_id": call.id, "text": owned.live}),
                );
            }
            let error = end
                .start_error
                .map(|e| format!("could not start the command: {e}"));
            finish_call(
                gw,
                &rid,
                &call,
                &args,
                &output,
                Some(code),
                error,
                end.duration.as_secs_f64(),
                now,
            );
        }
        Owner::Shell { request_id } => {
            let frame = match end.ending {
                Some(Ending::Timeout) => frame::error(
                    &request_id,
                    &RpcError::new(
                        code::TIMED_OUT,
                        format!("command timed out after {}s", SHELL_TIMEOUT.as_secs()),
                    ),
                ),
                Some(Ending::Interrupted) => frame::error(
                    &request_id,
                    &RpcError::new(
                        code::SHUTTING_DOWN,
                        "command interrupted: gateway is shutting down",
                    ),
                ),
                None => match end.start_error {
                    Some(e) => frame::error(
                        &request_id,
                        &RpcError::new(code::INTERNAL, format!("could not start the command: {e}")),
                    ),
                    None => frame::response(
                        &request_id,
                        &json!({"stdout": output, "stderr": end.stderr, "code": code}),
                    ),
                },
            };
            gw.out.push(frame);
        }
        Owner::Request { request_id, answer } => {
            let outcome = Outcome {
                output,
                code,
                ending: end.ending,
                timeout: end.timeout,
                start_error: end.start_error,
            };
            gw.out.push(frame::response(&request_id, &answer(&outcome)));
        }
    }
}

/// `process.stop`: stop the running commands of turns (of one session, or of all); each
/// ends `[Command interrupted]` and its turn goes on. Returns how many were stopped.
pub fn stop_turn_commands(gw: &mut Gateway, rid: Option<&str>, now: Instant) -> usize {
    let ids: Vec<RunId> = runs_where(gw, |o| match o {
        Owner::Turn { rid: owner, .. } => rid.is_none_or(|want| want == owner),
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

/// Commands run for requests (`shell.exec`, quick commands) still running when the shutdown
/// begins are stopped like a turn's.
pub fn stop_shell_commands(gw: &mut Gateway, now: Instant) {
    let ids = runs_where(gw, |o| {
        matches!(o, Owner::Shell { .. } | Owner::Request { .. })
    });
    for id in ids {
        gw.runner.stop(id, Ending::Interrupted, now);
    }
    after_runner(gw, now);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_says_why_a_call_failed_or_how_it_ended() {
        assert_eq!(
            completion_summary("", None, Some("blocked: rm -rf /")),
            "blocked: rm -rf /"
        );
        assert_eq!(completion_summary("a\n\nb\n", Some(0), None), "2 lines");
        assert_eq!(completion_summary("", Some(0), None), "no output");
        assert_eq!(completion_summary("x", Some(2), None), "exit 2 · 1 line");
        assert_eq!(
            completion_summary("x\n[Command timed out after 1s]", Some(124), None),
            "timed out · 2 lines"
        );
    }

    #[test]
    fn live_preview_is_the_last_printed_line() {
        assert_eq!(live_preview("one\ntwo\n\n  ").as_deref(), Some("two"));
        assert_eq!(live_preview("\n \n"), None);
    }

    #[test]
    fn toolsets_group_offered_tools() {
        assert_eq!(toolsets(), json!({"terminal": ["terminal"]}));
    }
}
