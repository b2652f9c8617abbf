//! Tools the model can call — the `terminal` tool — and `shell.exec`, on one machinery:
//! every command runs under a supervisor in its own process group; its output pipes and the
//! supervisor's status pipe (whose end is the command's exit) are in the poll; bounded output,
//! a timeout, and a kill of the whole group (SIGTERM, then SIGKILL).

pub mod approval;
pub mod capture;
pub mod policy;
pub mod process;
pub mod supervisor;

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Token};
use serde_json::{Value, json};

use crate::event_loop::{Gateway, Route, Timer};
use crate::model::ToolCall;
use crate::rpc::RpcError;
use crate::rpc::frame::{self, code};
use crate::session::transcript::{Message, Role, tool_context};
use crate::util;
use capture::Capture;
use process::Streams;

/// Output kept per stream: this much of the head and of the tail.
const HEAD_KEEP: usize = 16 * 1024;
const TAIL_KEEP: usize = 32 * 1024;
/// Bytes read from one tool per loop iteration, so a flood cannot starve the loop.
const READ_BUDGET: usize = 256 * 1024;
/// Live `tool.output` events: at most one per interval per tool, at most this much text each.
const LIVE_INTERVAL: Duration = Duration::from_millis(100);
const LIVE_MAX: usize = 8 * 1024;
/// After the supervisor exits, pipes still held by stragglers are read this much longer.
const DRAIN: Duration = Duration::from_millis(200);
/// Model rounds in one turn before the turn is stopped.
pub const MAX_ROUNDS: u32 = 50;
/// Tool calls of one model answer that are run; the rest are answered without running.
pub const MAX_CALLS_PER_ANSWER: usize = 128;
/// `shell.exec` timeout.
const SHELL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolTimer {
    Timeout,
    Kill,
    Drain,
    LiveOutput,
}

/// Why a command stopped before its natural end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Timeout,
    Interrupted,
}

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

struct Pipe {
    fd: OwnedFd,
    token: Token,
    open: bool,
}

pub struct ToolRun {
    pub owner: Owner,
    /// The supervisor's pid, once it reported it (polite SIGTERM goes there).
    supervisor: Option<i32>,
    /// The command's process group (= its pid), once the supervisor reported it.
    group: Option<i32>,
    status: Option<Pipe>,
    stdout: Option<Pipe>,
    stderr: Option<Pipe>,
    /// Bytes of the status pipe not yet parsed into lines.
    status_buf: Vec<u8>,
    /// Why the command could not start, as the supervisor reported it.
    start_error: Option<String>,
    lifeline: Option<OwnedFd>,
    out: Capture,
    err: Capture,
    exit: Option<i32>,
    ending: Option<Ending>,
    timeout: Duration,
    started: Instant,
    live: String,
    live_skipped: u64,
    live_timer: bool,
    drain_until: Option<Instant>,
    /// Readiness was reported on one of its pipes and not yet read to `WouldBlock`.
    ready: bool,
}

/// The tool registry owned by the gateway.
pub struct Tools {
    runs: HashMap<u64, ToolRun>,
    next_id: u64,
    /// Runs with readable pipes to pump.
    work: Vec<u64>,
    pub approvals: approval::Approvals,
    /// Program re-executed as the zygote (the gateway's own binary).
    pub program: PathBuf,
    zygote: Option<supervisor::Zygote>,
}

impl Tools {
    pub fn new(home: &Path) -> Tools {
        Tools {
            runs: HashMap::new(),
            next_id: 1,
            work: Vec::new(),
            approvals: approval::Approvals::load(home),
            program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("tui-gateway")),
            zygote: None,
        }
    }

    pub fn has_work(&self) -> bool {
        !self.work.is_empty()
    }

    pub fn mark_ready(&mut self, id: u64) {
        if let Some(run) = self.runs.get_mut(&id)
            && !run.ready
        {
            run.ready = true;
            self.work.push(id);
        }
    }

    /// Start a command through the zygote, (re)starting the zygote when it is not there.
    fn spawn(
        &mut self,
        command: &str,
        cwd: &Path,
        streams: Streams,
    ) -> std::io::Result<process::Spawned> {
        if let Some(z) = self.zygote.as_mut()
            && !z.exited()
            && let Ok(spawned) = process::spawn(z, command, cwd, streams)
        {
            return Ok(spawned);
        }
        let z = self
            .zygote
            .insert(supervisor::Zygote::start(&self.program)?);
        process::spawn(z, command, cwd, streams)
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
        let holding = gw.persist.holding();
        let Some(turn) = gw.turn_mut(rid) else {
            return;
        };
        if turn.interrupting {
            skip_pending(gw, rid, "[Command not run: the turn was interrupted]");
            gw.end_turn(rid, "interrupted", None, now);
            return;
        }
        if holding && !turn.pending_tools.is_empty() {
            // Nothing can be saved: the next tool start waits for the store.
            gw.persist.park(rid);
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
        Some(id) if gw.tools.runs.contains_key(&id) => {
            if let Some(turn) = gw.turn_mut(rid) {
                turn.interrupting = true;
            }
            stop(gw, id, Ending::Interrupted, now);
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
    let ids: Vec<u64> = gw
        .tools
        .runs
        .iter()
        .filter(|(_, r)| matches!(&r.owner, Owner::Turn { rid: owner, .. } if owner == rid))
        .map(|(id, _)| *id)
        .collect();
    for id in ids {
        if let Some(turn) = gw.turn_mut(rid) {
            turn.interrupting = true;
        }
        if let Some(run) = gw.tools.runs.get_mut(&id) {
            run.ending.get_or_insert(Ending::Interrupted);
            hard_kill(run);
        }
        finish(gw, id, now);
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

fn register(gw: &mut Gateway, id: u64, fd: OwnedFd) -> std::io::Result<Pipe> {
    let token = gw.alloc_token(Route::Tool(id));
    gw.poll
        .registry()
        .register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
    Ok(Pipe {
        fd,
        token,
        open: true,
    })
}

fn launch(
    gw: &mut Gateway,
    owner: Owner,
    command: &str,
    cwd: &Path,
    timeout: Duration,
    streams: Streams,
    now: Instant,
) -> std::io::Result<u64> {
    let spawned = gw.tools.spawn(command, cwd, streams)?;
    let id = gw.tools.next_id;
    gw.tools.next_id += 1;
    let mut run = ToolRun {
        owner,
        supervisor: None,
        group: None,
        status: None,
        stdout: None,
        stderr: None,
        status_buf: Vec::new(),
        start_error: None,
        lifeline: Some(spawned.lifeline),
        out: Capture::new(HEAD_KEEP, TAIL_KEEP),
        err: Capture::new(HEAD_KEEP, TAIL_KEEP),
        exit: None,
        ending: None,
        timeout,
        started: now,
        live: String::new(),
        live_skipped: 0,
        live_timer: false,
        drain_until: None,
        ready: true,
    };
    let registered = (|| -> std::io::Result<()> {
        run.stdout = Some(register(gw, id, spawned.stdout)?);
        if let Some(fd) = spawned.stderr {
            run.stderr = Some(register(gw, id, fd)?);
        }
        run.status = Some(register(gw, id, spawned.status)?);
        Ok(())
    })();
    if let Err(e) = registered {
        hard_kill(&mut run);
        release_tokens(gw, &run);
        return Err(e);
    }
    gw.timers
        .insert(now + timeout, Timer::Tool(id, ToolTimer::Timeout));
    gw.tools.runs.insert(id, run);
    gw.tools.work.push(id);
    Ok(id)
}

fn release_tokens(gw: &mut Gateway, run: &ToolRun) {
    for pipe in [&run.stdout, &run.stderr, &run.status]
        .into_iter()
        .flatten()
    {
        let _ = gw
            .poll
            .registry()
            .deregister(&mut SourceFd(&pipe.fd.as_raw_fd()));
        gw.by_token.remove(&pipe.token);
    }
}

/// SIGKILL the group now and drop the lifeline, so the supervisor also kills what left it.
fn hard_kill(run: &mut ToolRun) {
    process::kill_group(run.group);
    run.lifeline = None;
}

/// Begin stopping a command: SIGTERM to its group now, SIGKILL after the kill grace.
fn stop(gw: &mut Gateway, id: u64, ending: Ending, now: Instant) {
    let Some(run) = gw.tools.runs.get_mut(&id) else {
        return;
    };
    if run.ending.is_some() || run.exit.is_some() {
        return;
    }
    run.ending = Some(ending);
    // Before the supervisor reported its pid, the SIGTERM goes out when it does.
    if let Some(pid) = run.supervisor {
        process::terminate(pid);
    }
    gw.timers
        .insert(now + gw.cfg.kill_grace, Timer::Tool(id, ToolTimer::Kill));
}

pub fn any_alive(gw: &Gateway) -> bool {
    !gw.tools.runs.is_empty()
}

/// The hard exit: SIGKILL every live group at once.
pub fn kill_all(gw: &mut Gateway) {
    for run in gw.tools.runs.values_mut().filter(|r| r.exit.is_none()) {
        run.ending.get_or_insert(Ending::Interrupted);
        hard_kill(run);
    }
}

pub fn on_timer(gw: &mut Gateway, id: u64, what: ToolTimer, now: Instant) {
    match what {
        ToolTimer::Timeout => stop(gw, id, Ending::Timeout, now),
        ToolTimer::Kill => {
            if let Some(run) = gw.tools.runs.get_mut(&id)
                && run.exit.is_none()
            {
                hard_kill(run);
            }
        }
        ToolTimer::Drain => finish(gw, id, now),
        ToolTimer::LiveOutput => {
            if let Some(run) = gw.tools.runs.get_mut(&id) {
                run.live_timer = false;
            }
            flush_live(gw, id);
        }
    }
}

/// SIGCHLD: the zygote may have died; reap it so the next command starts a new one.
pub fn on_child_exit(gw: &mut Gateway) {
    if let Some(z) = gw.tools.zygote.as_mut()
        && z.exited()
    {
        gw.tools.zygote = None;
    }
}

/// Read every ready run's pipes within the per-iteration budget.
pub fn pump(gw: &mut Gateway, now: Instant) {
    let work = std::mem::take(&mut gw.tools.work);
    for id in work {
        let owner = owner_session(gw, id);
        gw.isolated(owner.as_deref(), now, |gw| pump_one(gw, id, now));
    }
}

/// The session whose turn runs this command, if a turn does.
pub(crate) fn owner_session(gw: &Gateway, id: u64) -> Option<String> {
    match &gw.tools.runs.get(&id)?.owner {
        Owner::Turn { rid, .. } => Some(rid.clone()),
        _ => None,
    }
}

fn pump_one(gw: &mut Gateway, id: u64, now: Instant) {
    if let Some(run) = gw.tools.runs.get_mut(&id) {
        run.ready = false;
    }
    let more = read_pipes(gw, id);
    let Some(run) = gw.tools.runs.get_mut(&id) else {
        return;
    };
    if run.exit.is_some() && run.drain_until.is_none() {
        // The supervisor killed everything before it left; give the pipes a moment.
        run.drain_until = Some(now + DRAIN);
        gw.timers
            .insert(now + DRAIN, Timer::Tool(id, ToolTimer::Drain));
    }
    let pipes_done = [&run.stdout, &run.stderr]
        .into_iter()
        .flatten()
        .all(|p| !p.open);
    if run.exit.is_some() && pipes_done {
        finish(gw, id, now);
    } else if more {
        gw.tools.mark_ready(id);
    }
    maybe_schedule_live(gw, id, now);
}

/// One report of the supervisor.
fn on_status_line(run: &mut ToolRun, line: &str) {
    let (key, value) = line.split_once(' ').unwrap_or((line, ""));
    match key {
        "sup" => {
            run.supervisor = value.parse().ok();
            if let (Some(pid), Some(_)) = (run.supervisor, run.ending) {
                process::terminate(pid);
            }
        }
        "pid" => {
            run.group = value.parse().ok();
            if run.ending.is_some() && run.lifeline.is_none() {
                process::kill_group(run.group);
            }
        }
        "exit" => run.exit = Some(value.parse().unwrap_or(-1)),
        "error" => run.start_error = Some(value.to_string()),
        _ => {}
    }
}

/// Read what is there; true if the budget ran out before every pipe would block.
fn read_pipes(gw: &mut Gateway, id: u64) -> bool {
    let Some(run) = gw.tools.runs.get_mut(&id) else {
        return false;
    };
    let mut buf = [0u8; 64 * 1024];
    let mut budget = READ_BUDGET;
    let mut more = false;
    // The status pipe: `sup PID`, `pid GROUP`, then `exit STATUS` (or `error WHY`); EOF when
    // the supervisor is gone.
    if let Some(p) = run.status.as_mut().filter(|p| p.open) {
        loop {
            match nix::unistd::read(&p.fd, &mut buf) {
                Ok(0) => {
                    p.open = false;
                    run.exit.get_or_insert(-1);
                    break;
                }
                Ok(n) => run.status_buf.extend_from_slice(&buf[..n]),
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => break,
            }
        }
        let text = std::mem::take(&mut run.status_buf);
        let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        run.status_buf = text[complete..].to_vec();
        for line in String::from_utf8_lossy(&text[..complete]).lines() {
            on_status_line(run, line);
        }
    }
    let mut live_text = String::new();
    for which in 0..2 {
        let pipe = if which == 0 {
            run.stdout.as_mut()
        } else {
            run.stderr.as_mut()
        };
        let Some(p) = pipe.filter(|p| p.open) else {
            continue;
        };
        loop {
            if budget == 0 {
                more = true;
                break;
            }
            let want = buf.len().min(budget);
            match nix::unistd::read(&p.fd, &mut buf[..want]) {
                Ok(0) => {
                    p.open = false;
                    break;
                }
                Ok(n) => {
                    budget -= n;
                    if which == 0 {
                        &mut run.out
                    } else {
                        &mut run.err
                    }
                    .push(&buf[..n]);
                    if run.live.len() + live_text.len() < LIVE_MAX {
                        live_text.push_str(&String::from_utf8_lossy(&buf[..n]));
                    } else {
                        run.live_skipped += n as u64;
                    }
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => break, // EAGAIN: wait for readiness
            }
        }
    }
    if !live_text.is_empty() {
        let room = LIVE_MAX.saturating_sub(run.live.len());
        if live_text.len() > room {
            let mut cut = room;
            while !live_text.is_char_boundary(cut) {
                cut -= 1;
            }
            run.live_skipped += (live_text.len() - cut) as u64;
            live_text.truncate(cut);
        }
        run.live.push_str(&live_text);
    }
    more
}

fn maybe_schedule_live(gw: &mut Gateway, id: u64, now: Instant) {
    let Some(run) = gw.tools.runs.get_mut(&id) else {
        return;
    };
    if (!run.live.is_empty() || run.live_skipped > 0) && !run.live_timer {
        run.live_timer = true;
        gw.timers
            .insert(now + LIVE_INTERVAL, Timer::Tool(id, ToolTimer::LiveOutput));
    }
}

/// Send the accumulated live output of a turn's command as one `tool.output` event.
fn flush_live(gw: &mut Gateway, id: u64) {
    let Some(run) = gw.tools.runs.get_mut(&id) else {
        return;
    };
    let mut text = std::mem::take(&mut run.live);
    if run.live_skipped > 0 {
        text.push_str(&format!(
            "\n[... {} bytes not shown live ...]\n",
            run.live_skipped
        ));
        run.live_skipped = 0;
    }
    if let Owner::Turn { rid, call, .. } = &run.owner {
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

/// The command is over (or abandoned): release it and deliver its result.
fn finish(gw: &mut Gateway, id: u64, now: Instant) {
    // Whatever is still buffered in the pipes belongs to the result.
    read_pipes(gw, id);
    let Some(mut run) = gw.tools.runs.remove(&id) else {
        return;
    };
    release_tokens(gw, &run);
    if run.exit.is_none() {
        // Abandoned while alive: kill the group; the supervisor dies with its lifeline.
        hard_kill(&mut run);
        run.exit = Some(128 + libc::SIGKILL);
    }
    // (An exited supervisor already killed its group; its id may belong to another process now.)
    run.lifeline = None;
    gw.tools.work.retain(|w| *w != id);
    let duration = now.saturating_duration_since(run.started).as_secs_f64();
    let mut output = run.out.text();
    let (code, note) = match run.ending {
        Some(Ending::Timeout) => (
            124,
            Some(format!(
                "[Command timed out after {}s]",
                run.timeout.as_secs_f64().round()
            )),
        ),
        Some(Ending::Interrupted) => (130, Some("[Command interrupted]".to_string())),
        None => (run.exit.unwrap_or(-1), None),
    };
    match run.owner {
        Owner::Turn { rid, call, args } => {
            if let Some(note) = note {
                if !output.is_empty() && !output.ends_with('\n') {
                    output.push('\n');
                }
                output.push_str(&note);
            }
            // Live output still pending goes out before the completion.
            if !run.live.is_empty() {
                gw.emit(
                    &rid,
                    "tool.output",
                    json!({"tool_id": call.id, "text": run.live}),
                );
            }
            let error = run
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
                duration,
                now,
            );
        }
        Owner::Shell { request_id } => {
            let frame = match run.ending {
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
                None => match run.start_error {
                    Some(e) => frame::error(
                        &request_id,
                        &RpcError::new(code::INTERNAL, format!("could not start the command: {e}")),
                    ),
                    None => frame::response(
                        &request_id,
                        &json!({"stdout": output, "stderr": run.err.text(), "code": code}),
                    ),
                },
            };
            gw.out.push(frame);
        }
        Owner::Request { request_id, answer } => {
            let outcome = Outcome {
                output,
                code,
                ending: run.ending,
                timeout: run.timeout,
                start_error: run.start_error,
            };
            gw.out.push(frame::response(&request_id, &answer(&outcome)));
        }
    }
}

/// `process.stop`: stop the running commands of turns (of one session, or of all); each
/// ends `[Command interrupted]` and its turn goes on. Returns how many were stopped.
pub fn stop_turn_commands(gw: &mut Gateway, rid: Option<&str>, now: Instant) -> usize {
    let ids: Vec<u64> = gw
        .tools
        .runs
        .iter()
        .filter(|(_, r)| r.exit.is_none() && r.ending.is_none())
        .filter(|(_, r)| match &r.owner {
            Owner::Turn { rid: owner, .. } => rid.is_none_or(|want| want == owner),
            _ => false,
        })
        .map(|(id, _)| *id)
        .collect();
    for id in &ids {
        stop(gw, *id, Ending::Interrupted, now);
    }
    ids.len()
}

/// Commands run for requests (`shell.exec`, quick commands) still running when the shutdown
/// begins are stopped like a turn's.
pub fn stop_shell_commands(gw: &mut Gateway, now: Instant) {
    let ids: Vec<u64> = gw
        .tools
        .runs
        .iter()
        .filter(|(_, r)| matches!(r.owner, Owner::Shell { .. } | Owner::Request { .. }))
        .map(|(id, _)| *id)
        .collect();
    for id in ids {
        stop(gw, id, Ending::Interrupted, now);
    }
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
