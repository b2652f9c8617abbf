//! The `terminal` tool: `bash -c command` under the supervisor, in the session's working
//! directory, with a timeout; dangerous commands go through the policy and the approval flow.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Ask, JobId, Start, Tool, ToolContext, ToolResult, policy};
use crate::runner::{Ending, RunEnd, Spec, Streams};

/// Longest timeout a call may ask for.
const TIMEOUT_MAX_S: f64 = 86_400.0;

pub struct Terminal;

impl Tool for Terminal {
    fn name(&self) -> &str {
        "terminal"
    }

    fn description(&self) -> &str {
        "Run a shell command (bash -c) and return its output and exit status."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line to run."},
                "timeout": {"type": "number", "description": "Seconds before the command is killed."},
                "cwd": {"type": "string", "description": "Working directory (default: the session's)."},
                "background": {"type": "boolean", "description": "Run the command in the background and return its process session_id at once (see the process tool)."},
                "notify_on_complete": {"type": "boolean", "description": "When true (and background=true), you'll be automatically notified exactly once when the process finishes."}
            },
            "required": ["command"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let Some(command) = args.get("command").and_then(Value::as_str) else {
            return Start::Done(ToolResult::failed(
                "invalid arguments: command (a string) is required",
            ));
        };
        if command.trim().is_empty() {
            return Start::Done(ToolResult::failed("empty command"));
        }
        let cwd = args
            .get("cwd")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| ctx.cwd.clone());
        match policy::check(command, Path::new(&cwd)) {
            policy::Verdict::Refuse { reason } => {
                return Start::Done(ToolResult::failed(format!("blocked: {reason}")));
            }
            policy::Verdict::Ask { key, description } if !ctx.approved => {
                return Start::Ask(Ask {
                    rule: key,
                    description: description.to_string(),
                    command: command.to_string(),
                });
            }
            _ => {}
        }
        if ctx.shutting_down {
            let out = "[host is exiting: command not started]";
            return Start::Done(ToolResult::terminal(out, Some(130), None));
        }
        if args.get("background").and_then(Value::as_bool) == Some(true) {
            let notify = args.get("notify_on_complete").and_then(Value::as_bool) == Some(true);
            let started = super::process::start_background(ctx, command, &cwd, notify);
            return Start::Done(started);
        }
        let timeout = args
            .get("timeout")
            .and_then(Value::as_f64)
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(|t| Duration::from_secs_f64(t.min(TIMEOUT_MAX_S)))
            .unwrap_or(ctx.command_timeout);
        let spec = Spec {
            command,
            cwd: Path::new(&cwd),
            streams: Streams::Merged,
            timeout,
            live: true,
        };
        match ctx.run(&spec) {
            Ok(_) => Start::Later,
            Err(e) => Start::Done(ToolResult::failed(format!(
                "could not start the command: {e}"
            ))),
        }
    }

    fn run_ended(&mut self, _job: JobId, _args: &Value, end: RunEnd) -> Option<ToolResult> {
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
        if let Some(note) = note {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&note);
        }
        let error = end
            .start_error
            .map(|e| format!("could not start the command: {e}"));
        Some(ToolResult::terminal(&output, Some(code), error))
    }
}
