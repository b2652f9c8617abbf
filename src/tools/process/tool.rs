//! The `process` tool, Hermes' shape (`process_registry.py`): `list`, `poll`, `log`, `wait`,
//! `kill`, `write`, `submit`, `close` on the background processes of the calling session.
//! `wait` runs on without blocking the loop: it is stepped when the process ends or at its
//! timeout.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::table::{self, Exit, NewProcess, SharedOutput};
use crate::runner::{Ending, NO_TIMEOUT, Spec, Stdin, Streams};
use crate::tools::{JobId, Start, Tool, ToolContext, ToolResult};

/// Bytes `write`/`submit` may leave queued for a process that does not read its stdin yet
/// (beyond what the pipe holds); past it a write is refused whole.
const STDIN_CAP: usize = 1024 * 1024;

const ACTIONS: &str = "list, poll, log, wait, kill, write, submit, close";

#[derive(Default)]
pub struct ProcessTool {
    waits: HashMap<JobId, Wait>,
}

/// A `wait` call running on.
struct Wait {
    id: String,
    command: String,
    /// The process's output: an interrupted wait answers with the last of it.
    output: SharedOutput,
    deadline: Instant,
    timeout_note: String,
}

impl Tool for ProcessTool {
    fn name(&self) -> &str {
        "process"
    }

    fn toolset(&self) -> &str {
        "terminal"
    }

    fn description(&self) -> &str {
        "Work with the processes terminal(background=true) started: 'list' them; 'poll' one for its \
         state and new output; 'log' its whole output, paged; 'wait' until it ends or the \
         timeout; 'kill' it; 'write' raw input (no newline); 'submit' a line of input (answers \
         a prompt); 'close' its stdin."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string",
                    "enum": ["list", "poll", "log", "wait", "kill", "write", "submit", "close"]},
                "session_id": {"type": "string",
                    "description": "The process's session_id (every action but 'list')."},
                "data": {"type": "string",
                    "description": "The input for 'write' and 'submit'."},
                "timeout": {"type": "integer", "minimum": 1,
                    "description": "'wait': seconds before it returns what there is so far."},
                "offset": {"type": "integer",
                    "description": "'log': the first line (default: the last 200 lines)."},
                "limit": {"type": "integer", "minimum": 1,
                    "description": "'log': how many lines."}
            },
            "required": ["action"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        if !args.is_object() {
            return done_error("invalid arguments: an object with an action is required");
        }
        let action = args.get("action").and_then(Value::as_str).unwrap_or("");
        // Hermes coerces a numeric id (some models send one).
        let id = match args.get("session_id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        let now = ctx.now;
        let runner = &*ctx.runner;
        ctx.processes.registry.learn_pids(|run| runner.pid(run));
        if action == "list" {
            let list = ctx.processes.registry.list(ctx.processes.owner, now);
            let summary = format!("{} process(es)", list.len());
            return Start::Done(ToolResult::new(json!({ "processes": list }), summary));
        }
        if !ACTIONS.split(", ").any(|a| a == action) {
            return done_error(&format!("Unknown process action: {action}. Use: {ACTIONS}"));
        }
        if id.is_empty() {
            return done_error(&format!("session_id is required for {action}"));
        }
        let (registry, owner) = (&mut *ctx.processes.registry, ctx.processes.owner);
        let Some(entry) = registry.get_mut(owner, &id) else {
            return Start::Done(answer(json!({
                "status": "not_found",
                "error": format!("No process with ID {id}"),
            })));
        };
        let result = match action {
            "poll" => entry.poll(now),
            "log" => match log_page(args) {
                Ok((offset, limit)) => entry.log(offset, limit),
                Err(why) => return done_error(&why),
            },
            "wait" => {
                let (timeout, note) = match wait_timeout(args, ctx.command_timeout) {
                    Ok(t) => t,
                    Err(why) => return done_error(&why),
                };
                if entry.exit.is_some() {
                    let mut result = entry.waited();
                    if let Some(note) = note {
                        result["timeout_note"] = json!(note);
                    }
                    return Start::Done(answer(result));
                }
                let deadline = now + timeout;
                let wait = Wait {
                    id: id.clone(),
                    command: entry.command.clone(),
                    output: entry.output.clone(),
                    deadline,
                    timeout_note: note.unwrap_or_else(|| {
                        format!("Waited {}s, process still running", timeout.as_secs_f64())
                    }),
                };
                registry.add_waiter(&id, ctx.job);
                self.waits.insert(ctx.job, wait);
                ctx.wake_at(deadline);
                return Start::Later;
            }
            "kill" => {
                if entry.exit.is_some() {
                    entry.already_exited()
                } else {
                    entry.consumed = true;
                    let result = entry.killed();
                    if let Some(run) = entry.run {
                        ctx.runner.stop(run, Ending::Interrupted, now);
                    }
                    let exit = Exit {
                        code: Some(-15),
                        reason: "killed",
                        source: "process.kill",
                    };
                    // Consumed: no notification.
                    registry.mark_exited(&id, exit, now);
                    result
                }
            }
            _ => stdin_action(ctx, action, &id, args),
        };
        Start::Done(answer(result))
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        let wait = self.waits.get(&ctx.job)?;
        let Some(entry) = ctx
            .processes
            .registry
            .get_mut(ctx.processes.owner, &wait.id)
        else {
            let wait = self.waits.remove(&ctx.job)?;
            let error = format!("No process with ID {}", wait.id);
            return Some(answer(json!({"status": "not_found", "error": error})));
        };
        let result = if entry.exit.is_some() {
            entry.waited()
        } else if ctx.now >= wait.deadline {
            let mut result = entry.still_running("timeout");
            result["timeout_note"] = json!(wait.timeout_note);
            result
        } else {
            ctx.wake_at(wait.deadline);
            return None;
        };
        self.waits.remove(&ctx.job);
        Some(answer(result))
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        let wait = self.waits.remove(&job)?;
        // Hermes' answer: the output so far, and that the process runs on.
        let mut result = table::not_ended("interrupted", &wait.command, &wait.output);
        result["note"] =
            json!("The turn was interrupted -- wait interrupted (the process keeps running)");
        Some(answer(result))
    }
}

/// A background process to start, as the terminal tool resolved it.
pub struct Launch<'a> {
    /// What the model asked for (what `list` shows).
    pub command: &'a str,
    /// What `bash -c` runs: the command in the session's shell state (`shell_state.rs`).
    pub run: &'a str,
    /// The shell state's restore file `run` sources, removed when the process ends.
    pub restore: Option<std::path::PathBuf>,
    pub cwd: &'a str,
    pub notify: bool,
}

/// `terminal {background: true}`: start a process of the calling session and answer at once
/// (Hermes' shape: `session_id`, `pid`, `exit_code` 0).
pub fn start_background(ctx: &mut ToolContext<'_>, launch: Launch<'_>) -> ToolResult {
    let Launch {
        command,
        run,
        restore,
        cwd,
        notify,
    } = launch;
    let failed = |why: String| {
        if let Some(file) = &restore {
            let _ = crate::tools::shell_state::remove_quietly(file);
        }
        ToolResult::terminal(
            "",
            Some(-1),
            Some(format!("Failed to start background process: {why}")),
        )
    };
    if !std::path::Path::new(cwd).is_dir() {
        return failed(format!("workdir is not a directory: {cwd}"));
    }
    if !ctx.processes.registry.has_room(ctx.now) {
        return failed(format!(
            "{} background processes are running already; kill or wait for one first",
            table::MAX_PROCESSES
        ));
    }
    let spec = Spec {
        command: run,
        cwd: std::path::Path::new(cwd),
        streams: Streams::Merged,
        stdin: Stdin::Pipe { cap: STDIN_CAP },
        timeout: NO_TIMEOUT,
        live: true,
    };
    let run = match ctx.runner.start(&spec, ctx.now) {
        Ok(run) => run,
        Err(e) => return failed(e.to_string()),
    };
    let owner = ctx.processes.owner;
    let new = NewProcess {
        owner,
        command,
        cwd,
        notify,
        run,
        restore,
    };
    let id = ctx.processes.registry.add(new, ctx.now);
    let mut content = json!({
        "output": "Background process started",
        "session_id": id,
        "pid": null,
        "exit_code": 0,
        "error": null,
    });
    if notify {
        content["notify_on_complete"] = json!(true);
    } else {
        content["hint"] = json!(
            "background=true without notify_on_complete=true means this process runs \
             SILENTLY — you will not be told when it exits. If this is a bounded task, you \
             almost certainly wanted notify_on_complete=true. Re-launch with \
             notify_on_complete=true, or call process(action='poll') / process(action='wait') \
             yourself to learn the outcome."
        );
    }
    ToolResult::new(content, format!("background {id}"))
}

/// `write`, `submit`, `close` on the stdin of a running process.
fn stdin_action(ctx: &mut ToolContext<'_>, action: &str, id: &str, args: &Value) -> Value {
    let Some(entry) = ctx.processes.registry.get_mut(ctx.processes.owner, id) else {
        return json!({"status": "not_found", "error": format!("No process with ID {id}")});
    };
    if entry.exit.is_some() {
        return json!({"status": "already_exited", "error": "Process has already finished"});
    }
    let Some(run) = entry.run else {
        return json!({"status": "error", "error": "Process stdin not available (stdin closed)"});
    };
    let data = match args.get("data") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return json!({"status": "error", "error": "invalid arguments: data must be a string"});
        }
    };
    let bytes = match action {
        "close" => {
            ctx.runner.close_stdin(run);
            return json!({"status": "ok", "message": "stdin closed"});
        }
        "submit" => format!("{data}\n"),
        _ => data.to_string(),
    };
    match ctx.runner.write_stdin(run, bytes.as_bytes()) {
        Ok(_) => json!({"status": "ok", "bytes_written": bytes.len()}),
        Err(e) => json!({"status": "error", "error": e.to_string()}),
    }
}

/// `log`'s `offset` (0: the last `limit` lines) and `limit` (200).
fn log_page(args: &Value) -> Result<(usize, usize), String> {
    let number = |key: &str, default: u64, min: u64| match args.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= min)
            .ok_or_else(|| format!("invalid arguments: {key} must be an integer >= {min}")),
    };
    let offset = number("offset", 0, 0)?;
    let limit = number("limit", 200, 1)?;
    Ok((
        usize::try_from(offset).unwrap_or(usize::MAX),
        usize::try_from(limit).unwrap_or(usize::MAX),
    ))
}

/// `wait`'s timeout: as asked, at most the command timeout (and by default); the note when
/// it was clamped.
fn wait_timeout(args: &Value, max: Duration) -> Result<(Duration, Option<String>), String> {
    let asked = match args.get("timeout") {
        None | Some(Value::Null) => return Ok((max, None)),
        Some(v) => v
            .as_f64()
            .filter(|t| t.is_finite() && *t > 0.0)
            .ok_or("invalid arguments: timeout must be a number of seconds > 0")?,
    };
    if asked > max.as_secs_f64() {
        let note = format!(
            "Requested wait of {asked}s was clamped to configured limit of {}s",
            max.as_secs_f64()
        );
        return Ok((max, Some(note)));
    }
    Ok((Duration::from_secs_f64(asked), None))
}

fn done_error(why: &str) -> Start {
    Start::Done(ToolResult::error(why))
}

/// A result in Hermes' shape; one with an `error` is a failed call for the TUI too.
fn answer(content: Value) -> ToolResult {
    let status = content["status"].as_str().unwrap_or("ok").to_string();
    let error = content["error"].as_str().map(str::to_string);
    let summary = match (&error, content["session_id"].as_str()) {
        (Some(e), _) => crate::util::clip(e, 120),
        (None, Some(id)) => format!("{id} {status}"),
        (None, None) => status,
    };
    let mut result = ToolResult::new(content, summary);
    result.error = error;
    result
}
