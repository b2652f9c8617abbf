//! Tools the model can call, behind one [`Tool`] trait, and the [`ToolSet`] of what is
//! offered: the built-in tools (`terminal.rs`, `files/`, `todo.rs`, `clarify.rs`,
//! `memory.rs`, `session_search.rs`, `process/`) and whatever an embedding host registers. Commands run through the process
//! runner (`src/runner/`); `runs.rs` knows who waits for each run (a tool call, `shell.exec`,
//! a quick command). A call that runs on past its start is stepped (`wake.rs`): the gateway
//! calls [`Tool::step`] when the call asked to go on, each step bounded by
//! [`ToolContext::deadline`]. The turn that calls tools is in `src/session/` (`machine.rs`,
//! `calls.rs`).

pub mod alone;
pub mod approval;
pub mod asked;
pub mod clarify;
pub mod delegate;
mod export_listing;
pub mod files;
pub mod memory;
pub mod passthrough;
pub mod policy;
pub mod process;
pub mod runs;
pub mod sensitive_files;
pub mod session_search;
pub mod shell_state;
pub mod skills;
pub mod spill;
mod stepped;
pub mod terminal;
pub mod timer;
pub mod todo;
pub mod toolsets;
pub mod vision;
pub mod wake;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::model::ToolCall;
pub use crate::runner::Ending;
use crate::runner::{RunEnd, RunId, Runner, Spec};
use crate::transcript::Message;
use crate::util;
pub use runs::Outcome;
pub use timer::WorkTimer;
pub use wake::JobWaker;

/// How long one start or step of a call may work before it yields to the loop.
pub const STEP_BUDGET: Duration = Duration::from_millis(8);

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

    /// `error` with Hermes' `"success": false` beside it (patch, memory, session_search).
    pub fn unsuccessful(error: impl Into<String>) -> ToolResult {
        let mut r = ToolResult::error(error);
        r.content["success"] = json!(false);
        r
    }

    /// Hermes' `tool_error` shape for tools other than `terminal`: `{"error": why}` (and
    /// `"success": false` where Hermes adds it), which the model reads.
    pub fn error(error: impl Into<String>) -> ToolResult {
        let error = error.into();
        ToolResult {
            content: json!({ "error": error }),
            summary: util::clip(&error, 120),
            error: Some(error),
            event_fields: Default::default(),
            duration: Duration::ZERO,
        }
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
    /// Runs on: a run it started through the context ends it ([`Tool::run_ended`]), or a
    /// wake it asked for ([`ToolContext::again`], [`ToolContext::wake_at`], a
    /// [`JobWaker`], [`ToolContext::ask_user`]) steps it ([`Tool::step`]) until it is done.
    Later,
    /// Needs the user's approval first; once approved it is started again with
    /// [`ToolContext::approved`] set.
    Ask(Ask),
}

/// What the user said to a question a call asked ([`ToolContext::ask_user`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserAnswer {
    /// Their answer (empty when they dismissed the question).
    Text(String),
    /// Nobody answered in time (`clarify_timeout`).
    Timeout,
}

/// A question for the user, as `clarify.request` carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub question: String,
    /// Up to four choices (the TUI adds "Other"); empty for an open question.
    pub choices: Vec<String>,
}

/// When the gateway steps a call next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The next loop iteration (work left within the budget).
    Again,
    At(Instant),
}

/// What a tool may use while it starts or steps a call.
pub struct ToolContext<'a> {
    pub job: JobId,
    /// The session's working directory.
    pub cwd: String,
    /// `$HERMES_HOME`.
    pub home: &'a Path,
    /// The stored id of the calling session (per-session state is keyed by it).
    pub session: &'a str,
    /// The provider and model the calling session runs on now (after a `/model`); empty
    /// outside a session.
    pub provider: &'a str,
    pub model: &'a str,
    /// The calling session's transcript so far (a resumed session's included).
    pub transcript: &'a [Message],
    /// `state.db`, for reads (`None` outside a gateway).
    pub store: Option<&'a crate::store::Store>,
    /// The default command timeout (`config`).
    pub command_timeout: Duration,
    /// What an earlier start of this call asked about was approved.
    pub approved: bool,
    /// The gateway is exiting: start nothing that outlives the call.
    pub shutting_down: bool,
    pub now: Instant,
    /// Work of this start or step ends with it ([`STEP_BUDGET`] from `now`); what is left
    /// goes on in the next step ([`ToolContext::again`]).
    pub budget: crate::clock::Budget,
    /// The user's answer to [`ToolContext::ask_user`], on the step that delivers it.
    pub answer: Option<UserAnswer>,
    pub(crate) runner: &'a mut Runner,
    /// The runs started so far, for the gateway to watch.
    pub(crate) runs: Vec<RunId>,
    pub(crate) wake: Option<Wake>,
    pub(crate) question: Option<Question>,
    pub(crate) wakers: &'a wake::Shared,
    /// The calling session's background processes.
    pub(crate) processes: process::Scope<'a>,
    /// How deep the calling session is in a delegation tree (0: not a subagent).
    pub subagent_depth: u32,
    /// This start asked for its call's subagents to be spawned (`delegate_task`).
    pub(crate) spawn: bool,
}

impl ToolContext<'_> {
    /// Run a command under the supervisor; its end comes back as [`Tool::run_ended`].
    pub fn run(&mut self, spec: &Spec<'_>) -> std::io::Result<RunId> {
        let id = self.runner.start(spec, self.now)?;
        self.runs.push(id);
        Ok(id)
    }

    /// Step this call again on the next loop iteration: work is left over the budget.
    pub fn again(&mut self) {
        self.wake = Some(Wake::Again);
    }

    /// Step this call again at `when` (a poll of something outside the gateway).
    pub fn wake_at(&mut self, when: Instant) {
        if self.wake != Some(Wake::Again) {
            self.wake = Some(Wake::At(when));
        }
    }

    /// A handle that steps this call from any thread (`Send`): an embedding host's work
    /// done elsewhere finishes the call by waking it.
    pub fn waker(&self) -> JobWaker {
        self.wakers.waker(self.job)
    }

    /// Ask the user (`clarify.request`, or the `clarify` server request); the answer, or
    /// the timeout, comes as [`ToolContext::answer`] on a later step.
    pub fn ask_user(&mut self, question: Question) {
        self.question = Some(question);
    }

    /// Spawn the children this call's batch on the delegation board names (`delegate.rs`);
    /// their ends finish the call.
    pub(crate) fn spawn_subagents(&mut self) {
        self.spawn = true;
    }

    /// The budget of this start or step is spent.
    pub fn out_of_time(&self) -> bool {
        self.budget.spent()
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
    /// Go on with a call that runs on (`ctx.job`): it was woken (by [`ToolContext::again`],
    /// [`ToolContext::wake_at`], its [`JobWaker`] or the user's answer). Its result, or
    /// `None` to wait for the next wake it asks for. Work within `ctx.deadline`.
    fn step(&mut self, _ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        None
    }
    /// Stop a call that runs on without a run of the runner (the gateway stops runs itself
    /// and withdraws its question): its result now, or `None` when it ends later (a step
    /// still finishes it).
    fn cancel(&mut self, _job: JobId) -> Option<ToolResult> {
        Some(ToolResult::failed("interrupted"))
    }
}

/// The tools offered to the model.
pub struct ToolSet {
    tools: Vec<Box<dyn Tool>>,
    /// Their schemas (OpenAI shape), in registration order.
    every_schema: Vec<Value>,
    /// Which are offered (`config.yaml` toolsets, `/tools disable`).
    rule: toolsets::Offered,
    /// The schemas of the tools offered, what the model is sent, for each [`Reach`] (its
    /// index): made when first asked for after a change of the rule (a start that never calls a
    /// model never copies a schema), then grown as tools register.
    offered: [std::cell::OnceCell<Vec<Value>>; 3],
}

/// Which of the offered tools a session is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// A session the user talks to: everything offered.
    Full,
    /// A subagent: nothing of `delegate::BLOCKED_FOR_CHILDREN`.
    Leaf,
    /// A subagent that may delegate in turn: `delegate_task` kept.
    Orchestrator,
}

impl Reach {
    const ALL: [Reach; 3] = [Reach::Full, Reach::Leaf, Reach::Orchestrator];

    /// Whether a session of this reach may call `name`.
    pub fn allows(self, name: &str) -> bool {
        match self {
            Reach::Full => true,
            Reach::Leaf => !delegate::BLOCKED_FOR_CHILDREN.contains(&name),
            Reach::Orchestrator => {
                name == "delegate_task" || !delegate::BLOCKED_FOR_CHILDREN.contains(&name)
            }
        }
    }
}

impl ToolSet {
    pub fn empty() -> ToolSet {
        ToolSet {
            tools: Vec::new(),
            every_schema: Vec::new(),
            rule: Default::default(),
            offered: Default::default(),
        }
    }

    /// Offer what `rule` offers from the next model call on.
    pub fn set_rule(&mut self, rule: toolsets::Offered) {
        self.rule = rule;
        self.refresh_offered();
    }

    /// The schemas sent are made again when next asked for.
    fn refresh_offered(&mut self) {
        self.offered = Default::default();
    }

    /// The tools the rule offers, with their schemas, in registration order.
    fn offered_tools(&self) -> impl Iterator<Item = (&dyn Tool, &Value)> {
        self.tools
            .iter()
            .zip(&self.every_schema)
            .filter(|(t, _)| self.rule.offers(t.name(), t.toolset()))
            .map(|(t, s)| (t.as_ref(), s))
    }

    /// The rule of what is offered (to change it: [`ToolSet::set_rule`]).
    pub fn rule(&self) -> &toolsets::Offered {
        &self.rule
    }

    /// Registered and offered.
    pub fn is_offered(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|t| self.rule.offers(t.name(), t.toolset()))
    }

    /// A toolset of a registered tool.
    pub fn has_toolset(&self, toolset: &str) -> bool {
        self.tools.iter().any(|t| t.toolset() == toolset)
    }

    /// The built-in tools, in the order Hermes lists them.
    pub fn builtin() -> ToolSet {
        let mut r = ToolSet::empty();
        let tools: [Box<dyn Tool>; 11] = [
            Box::new(terminal::Terminal::default()),
            Box::new(process::ProcessTool::default()),
            Box::new(files::ReadFile::default()),
            Box::new(files::WriteFile::default()),
            Box::new(files::Patch::default()),
            Box::new(files::SearchFiles::default()),
            Box::new(todo::Todo),
            Box::new(memory::Memory),
            Box::new(session_search::SessionSearch::default()),
            Box::new(clarify::Clarify),
            Box::new(vision::VisionAnalyze::default()),
        ];
        for tool in tools {
            // A fresh registry has no name to clash with.
            let _ = r.register(tool);
        }
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
        let schema = json!({
            "type": "function",
            "function": {
                "name": name,
                "description": tool.description(),
                "parameters": tool.parameters(),
            }
        });
        // Each list made and offering it grows by it (not rebuilt: MCP servers register many).
        if self.rule.offers(name, tool.toolset()) {
            for reach in Reach::ALL {
                if let Some(list) = self.offered[reach as usize].get_mut()
                    && reach.allows(name)
                {
                    list.push(schema.clone());
                }
            }
        }
        self.every_schema.push(schema);
        self.tools.push(tool);
        Ok(())
    }

    /// Stop offering `name` (an MCP server's tool it no longer lists).
    pub fn unregister(&mut self, name: &str) {
        if let Some(i) = self.tools.iter().position(|t| t.name() == name) {
            self.tools.remove(i);
            self.every_schema.remove(i);
            let rule = std::mem::take(&mut self.rule);
            self.set_rule(rule);
        }
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

    /// The schemas the model is sent: those of the tools offered.
    pub fn schemas(&self) -> &[Value] {
        self.schemas_for(Reach::Full)
    }

    /// The schemas a session of `reach` is sent.
    pub fn schemas_for(&self, reach: Reach) -> &[Value] {
        self.offered[reach as usize].get_or_init(|| {
            self.offered_tools()
                .filter(|(t, _)| reach.allows(t.name()))
                .map(|(_, s)| s.clone())
                .collect()
        })
    }

    /// The toolsets of the tools a session of `reach` is offered (Hermes' `available_toolsets`,
    /// which skills condition on).
    pub fn toolsets_for(&self, reach: Reach) -> std::collections::BTreeSet<String> {
        self.offered_tools()
            .filter(|(t, _)| reach.allows(t.name()))
            .map(|(t, _)| t.toolset().to_string())
            .collect()
    }

    /// The schemas of the tools offered under their toolsets (in name order; each toolset's
    /// tools in registration order): the banner's `toolsets` and `/tools`.
    pub fn offered_by_toolset(&self) -> BTreeMap<&str, Vec<&Value>> {
        let mut by = BTreeMap::<&str, Vec<&Value>>::new();
        for (tool, schema) in self.offered_tools() {
            by.entry(tool.toolset()).or_default().push(schema);
        }
        by
    }

    /// `{toolset: [tool names]}` of the tools offered, the shape of the TUI's banner.
    pub fn toolsets(&self) -> Value {
        let sets = self.offered_by_toolset().into_iter().map(|(set, schemas)| {
            let names = schemas.iter().map(|s| s["function"]["name"].clone());
            (set.to_string(), Value::Array(names.collect()))
        });
        Value::Object(sets.collect())
    }
}

/// A tool call past its start.
pub(crate) struct Job {
    pub rid: String,
    pub call: ToolCall,
    pub args: Value,
    pub started: Instant,
    /// Subagents work for it (`delegate_task`): stopping it stops them.
    pub subagents: bool,
}

/// The tools side of the gateway: the registry, calls running past their start, who waits
/// for each run, approvals.
pub struct Tools {
    pub set: ToolSet,
    pub(crate) jobs: HashMap<JobId, Job>,
    next_job: u64,
    pub(crate) runs: runs::Runs,
    /// Background processes (`terminal` with `background: true`), of every session.
    pub(crate) processes: process::Processes,
    pub approvals: approval::Approvals,
    /// Questions of `clarify` (and any tool's [`ToolContext::ask_user`]) awaiting answers.
    pub(crate) questions: clarify::Questions,
    /// Jobs to step on the next iteration.
    pub(crate) due: wake::Due,
    pub(crate) wakers: wake::Shared,
    /// `delegate_task` calls whose children run, shared with the loop's delegation.
    pub(crate) delegations: delegate::Shared,
}

impl Tools {
    pub fn new(home: &Path, poll_waker: Option<mio::Waker>) -> Tools {
        let mut registry = ToolSet::builtin();
        let delegations = delegate::Shared::default();
        // Its name is Hermes' and not taken by another built-in.
        let _ = registry.register(Box::new(delegate::DelegateTask::new(delegations.clone())));
        registry.set_rule(toolsets::Offered::load(home));
        Tools {
            set: registry,
            jobs: HashMap::new(),
            next_job: 1,
            runs: runs::Runs::default(),
            processes: process::Processes::default(),
            approvals: approval::Approvals::load(home),
            questions: clarify::Questions::default(),
            due: wake::Due::default(),
            wakers: wake::Shared::new(poll_waker),
            delegations,
        }
    }

    /// Offer the `skills` toolset (`skills_list`, `skill_view`, `skill_manage`) on `skills`.
    pub fn add_skills(&mut self, skills: &crate::skills::Shared) {
        for tool in skills::tools(skills) {
            // Their names are Hermes' and not taken by a built-in.
            let _ = self.set.register(tool);
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
        let mut r = ToolSet::builtin();
        let builtin = json!({"terminal": ["terminal", "process"],
            "file": ["read_file", "write_file", "patch", "search_files"],
            "todo": ["todo"], "memory": ["memory"], "session_search": ["session_search"],
            "clarify": ["clarify"], "vision": ["vision_analyze"]});
        assert_eq!(r.toolsets(), builtin);
        r.register(Box::new(Echo)).unwrap();
        assert_eq!(r.toolsets()["host"], json!(["echo"]));
        let names: Vec<&str> = r
            .schemas()
            .iter()
            .filter_map(|s| s["function"]["name"].as_str())
            .collect();
        assert_eq!(names.first(), Some(&"terminal"));
        assert_eq!(names.last(), Some(&"echo"));
        assert_eq!(r.schemas()[11]["function"]["description"], "Say it back.");
        assert!(r.register(Box::new(Echo)).unwrap_err().contains("already"));
        assert_eq!(r.schemas().len(), 12);
        // A toolset turned off leaves the schemas and the banner, and is refused by name.
        let mut rule = toolsets::Offered::default();
        rule.set(&["file", "echo"], false).unwrap();
        r.set_rule(rule);
        assert_eq!(r.schemas().len(), 7);
        assert!(r.toolsets().get("file").is_none() && !r.is_offered("patch"));
        assert!(r.contains("patch") && r.is_offered("todo"));
    }
}
