//! Tools the model can call, behind one [`Tool`] trait, and the [`Registry`] of what is
//! offered: the built-in `terminal` tool (`terminal.rs`) and whatever an embedding host
//! registers. Commands run through the process runner (`src/runner/`); `runs.rs` knows who
//! waits for each run (a tool call, `shell.exec`, a quick command). The turn that calls tools
//! is in `src/session/` (`machine.rs`, `calls.rs`).

pub mod approval;
pub mod passthrough;
pub mod policy;
pub mod runs;
pub mod terminal;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::model::ToolCall;
pub use crate::runner::Ending;
use crate::runner::{RunEnd, RunId, Runner, Spec};
use crate::util;
pub use runs::{Outcome, TurnHooks};

/// A tool call running past its start, as the gateway names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

/// A finished call: what the model reads and what the TUI shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The tool message's content (JSON).
    pub content: Value,
    /// The one line the TUI shows on the call's row.
    pub summary: String,
    /// Why the call failed, if it did (`tool.complete` carries it too).
    pub error: Option<String>,
    /// More fields for `tool.complete` (Hermes' `inline_diff`, `todos`…).
    pub event_fields: serde_json::Map<String, Value>,
    /// From the start to the end (set by the gateway).
    pub duration: Duration,
}

impl ToolResult {
    /// A result in any shape.
    pub fn new(content: Value, summary: impl Into<String>) -> ToolResult {
        ToolResult {
            content,
            summary: summary.into(),
            error: None,
            event_fields: Default::default(),
            duration: Duration::ZERO,
        }
    }

    /// The terminal tool's shape `{output, exit_code, error}`; calls that never ran are
    /// answered in it too.
    pub fn terminal(output: &str, exit_code: Option<i32>, error: Option<String>) -> ToolResult {
        ToolResult {
            content: json!({"output": output, "exit_code": exit_code, "error": error}),
            summary: completion_summary(output, exit_code, error.as_deref()),
            error,
            event_fields: Default::default(),
            duration: Duration::ZERO,
        }
    }

    /// A call that failed before anything ran: the error alone.
    pub fn failed(error: impl Into<String>) -> ToolResult {
        ToolResult::terminal("", None, Some(error.into()))
    }
}

/// What a tool asks the user to approve before it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The approval rule: approving "for the session" or "always" approves the rule.
    pub rule: &'static str,
    pub description: String,
    /// What the approval request shows.
    pub command: String,
}

/// How a call's start went.
#[derive(Debug)]
pub enum Start {
    /// Finished now.
    Done(ToolResult),
    /// Runs on: a run it started through the context ends it ([`Tool::run_ended`]).
    Later,
    /// Needs the user's approval first; once approved it is started again with
    /// [`ToolContext::approved`] set.
    Ask(Ask),
}

/// What a tool may use while it starts a call.
pub struct ToolContext<'a> {
    pub job: JobId,
    /// The session's working directory.
    pub cwd: String,
    /// The default command timeout (`config`).
    pub command_timeout: Duration,
    /// What an earlier start of this call asked about was approved.
    pub approved: bool,
    /// The gateway is exiting: start nothing that outlives the call.
    pub shutting_down: bool,
    pub now: Instant,
    pub(crate) runner: &'a mut Runner,
    /// The runs started so far, for the gateway to watch.
    pub(crate) runs: Vec<RunId>,
}

impl ToolContext<'_> {
    /// Run a command under the supervisor; its end comes back as [`Tool::run_ended`].
    pub fn run(&mut self, spec: &Spec<'_>) -> std::io::Result<RunId> {
        let id = self.runner.start(spec, self.now)?;
        self.runs.push(id);
        Ok(id)
    }
}

/// A tool the model can call.
pub trait Tool {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// The Hermes toolset it belongs to (the TUI's banner groups by it).
    fn toolset(&self) -> &str {
        self.name()
    }
    /// What the model is told it does.
    fn description(&self) -> &str;
    /// The JSON schema of its arguments.
    fn parameters(&self) -> Value;
    /// Begin a call with these arguments (`Value::Null` when they were not JSON).
    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start;
    /// A run this call started ended: its result, or `None` while it waits for more.
    fn run_ended(&mut self, _job: JobId, _args: &Value, _end: RunEnd) -> Option<ToolResult> {
        None
    }
    /// Stop a call that runs on without a run of the runner (the gateway stops runs itself):
    /// its result now, or `None` when it ends later.
    fn cancel(&mut self, _job: JobId) -> Option<ToolResult> {
        Some(ToolResult::failed("interrupted"))
    }
}

/// The tools offered to the model.
pub struct Registry {
    tools: Vec<Box<dyn Tool>>,
    /// Their schemas as the model is sent them (OpenAI shape), in registration order.
    schemas: Vec<Value>,
}

impl Registry {
    pub fn empty() -> Registry {
        Registry {
            tools: Vec::new(),
            schemas: Vec::new(),
        }
    }

    /// The built-in tools.
    pub fn builtin() -> Registry {
        let mut r = Registry::empty();
        // A fresh registry has no name to clash with.
        let _ = r.register(Box::new(terminal::Terminal));
        r
    }

    /// Offer `tool` from the next model call on. Refused: a name taken, or one a model API
    /// would reject (1–64 of `a-z A-Z 0-9 _ -`).
    pub fn register(&mut self, tool: Box<dyn Tool>) -> Result<(), String> {
        let name = tool.name();
        let valid = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(format!(
                "invalid tool name {name:?}: 1-64 letters, digits, '_' or '-'"
            ));
        }
        if self.get(name).is_some() {
            return Err(format!("a tool named {name} is registered already"));
        }
        self.schemas.push(json!({
            "type": "function",
            "function": {
                "name": name,
                "description": tool.description(),
                "parameters": tool.parameters(),
            }
        }));
        self.tools.push(tool);
        Ok(())
    }

    fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|t| t.name() == name)
            .map(|t| t.as_ref())
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Box<dyn Tool>> {
        self.tools.iter_mut().find(|t| t.name() == name)
    }

    /// The tools, in registration order.
    pub fn tools(&self) -> impl Iterator<Item = &dyn Tool> {
        self.tools.iter().map(|t| t.as_ref())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The schemas the model is sent.
    pub fn schemas(&self) -> &[Value] {
        &self.schemas
    }

    /// `{toolset: [tool names]}`, the shape of the TUI's banner.
    pub fn toolsets(&self) -> Value {
        let mut map = serde_json::Map::new();
        for tool in &self.tools {
            let names = map
                .entry(tool.toolset().to_string())
                .or_insert_with(|| json!([]));
            if let Some(list) = names.as_array_mut() {
                list.push(json!(tool.name()));
            }
        }
        Value::Object(map)
    }
}

/// A tool call past its start.
pub(crate) struct Job {
    pub rid: String,
    pub call: ToolCall,
    pub args: Value,
    pub started: Instant,
}

/// The tools side of the gateway: the registry, calls running past their start, who waits
/// for each run, approvals.
pub struct Tools {
    pub registry: Registry,
    pub(crate) jobs: HashMap<JobId, Job>,
    next_job: u64,
    pub(crate) runs: runs::Runs,
    pub approvals: approval::Approvals,
    pub(crate) hooks: TurnHooks,
}

impl Tools {
    pub fn new(home: &Path, hooks: TurnHooks) -> Tools {
        Tools {
            registry: Registry::builtin(),
            jobs: HashMap::new(),
            next_job: 1,
            runs: runs::Runs::default(),
            approvals: approval::Approvals::load(home),
            hooks,
        }
    }

    pub(crate) fn new_job_id(&mut self) -> JobId {
        let id = JobId(self.next_job);
        self.next_job += 1;
        id
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

    struct Echo;

    impl Tool for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn toolset(&self) -> &str {
            "host"
        }
        fn description(&self) -> &str {
            "Say it back."
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {}})
        }
        fn start(&mut self, _ctx: &mut ToolContext<'_>, args: &Value) -> Start {
            Start::Done(ToolResult::new(args.clone(), "echoed"))
        }
    }

    #[test]
    fn the_registry_offers_what_is_registered_once() {
        let mut r = Registry::builtin();
        assert_eq!(r.toolsets(), json!({"terminal": ["terminal"]}));
        r.register(Box::new(Echo)).unwrap();
        assert_eq!(
            r.toolsets(),
            json!({"terminal": ["terminal"], "host": ["echo"]})
        );
        let names: Vec<&str> = r
            .schemas()
            .iter()
            .filter_map(|s| s["function"]["name"].as_str())
            .collect();
        assert_eq!(names, ["terminal", "echo"]);
        assert_eq!(r.schemas()[1]["function"]["description"], "Say it back.");
        assert!(r.register(Box::new(Echo)).unwrap_err().contains("already"));
        assert_eq!(r.schemas().len(), 2);
    }
}
