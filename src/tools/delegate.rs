//! `delegate_task`: the model hands goals to subagents, each a child session of its own run by
//! the same loop (`src/delegation.rs` spawns them and collects their ends). This part is the
//! tool's side: Hermes' limits read from `config.yaml`'s `delegation:` section, the request
//! checked against them, and each call's [`Batch`] — the tasks and each child's result entry —
//! until every child has ended. A top-level session's call runs in the background (Hermes
//! 0.18): it answers `dispatched` at once and the combined result becomes a new message of the
//! session ([`Batch::notice`]); an orchestrator child's call waits, its result Hermes'
//! `{results, total_duration_seconds}` (children cut off count as interrupted).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use serde_json::{Value, json};
use yaml_rust2::Yaml;

use super::{JobId, Start, Tool, ToolContext, ToolResult};

/// Tools a child is never offered (Hermes' list): no recursion unless it is an orchestrator,
/// no questions to the user, no writes to the shared memory, nothing in the user's name.
pub const BLOCKED_FOR_CHILDREN: [&str; 6] = [
    "delegate_task",
    "clarify",
    "memory",
    "send_message",
    "execute_code",
    "cronjob",
];

/// However `max_concurrent_children` is set, a call starts at most this many children: a
/// bounded refusal rather than a thousand sessions from one answer.
pub const HARD_MAX_CHILDREN: usize = 64;

/// The longest `child_timeout_seconds` honoured (30 days).
const MAX_CHILD_TIMEOUT: f64 = 30.0 * 86_400.0;

/// A summary longer than this is clipped before it enters the parent's context (Hermes'
/// default budget); the whole text stays in the child's stored session.
const MAX_SUMMARY_CHARS: usize = 24_000;

/// `config.yaml`'s `delegation:` section, with Hermes' defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Children one call may start (`max_concurrent_children`, default 3, at least 1).
    pub max_children: usize,
    /// Depth a child may reach (`max_spawn_depth`, default 1: children cannot delegate).
    pub max_depth: u32,
    /// Model calls in a child's turn (`max_iterations`, default 50).
    pub max_iterations: u32,
    /// A child's command that needs approval runs (`subagent_auto_approve`); else it is denied.
    pub auto_approve: bool,
    /// `role: orchestrator` is honoured (`orchestrator_enabled`, default true).
    pub orchestrators: bool,
    /// The model and provider children run on (`model`, `provider`; unset: the parent's).
    pub model: Option<String>,
    pub provider: Option<String>,
    /// An endpoint of the children's own (`base_url`, before `provider`) and its API
    /// (`api_mode`); its key is read by `model/` alone.
    pub base_url: Option<String>,
    pub api_mode: Option<String>,
    /// Seconds a child may run before it is stopped (`child_timeout_seconds`, else Hermes'
    /// `DELEGATION_CHILD_TIMEOUT_SECONDS`; unset, 0 or negative: no timeout). The floor is
    /// applied at spawn (`--subagent-timeout-floor`).
    pub child_timeout: Option<f64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_children: 3,
            max_depth: 1,
            max_iterations: 50,
            auto_approve: false,
            orchestrators: true,
            model: None,
            provider: None,
            base_url: None,
            api_mode: None,
            child_timeout: None,
        }
    }
}

impl Limits {
    /// The limits `$HERMES_HOME/config.yaml` sets (defaults where it is absent or unreadable).
    pub fn load(home: &Path) -> Limits {
        let doc = crate::config_file::load(home).unwrap_or(Yaml::Null);
        let mut limits = Limits::from_config(&doc);
        if !timeout_set(&doc) {
            let env = std::env::var("DELEGATION_CHILD_TIMEOUT_SECONDS").unwrap_or_default();
            limits.child_timeout = seconds_of(&Yaml::String(env)).and_then(positive);
        }
        limits
    }

    pub fn from_config(doc: &Yaml) -> Limits {
        let at = |key: &str| crate::config_file::lookup(doc, &format!("delegation.{key}"));
        let number = |key: &str| match at(key) {
            Yaml::Integer(n) => Some(*n),
            Yaml::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        let flag = |key: &str, default: bool| crate::config_file::flag(at(key)).unwrap_or(default);
        let d = Limits::default();
        Limits {
            max_children: number("max_concurrent_children").map_or(d.max_children, |n| {
                n.clamp(1, HARD_MAX_CHILDREN as i64) as usize
            }),
            max_depth: number("max_spawn_depth").map_or(d.max_depth, |n| n.clamp(1, 16) as u32),
            max_iterations: number("max_iterations")
                .map_or(d.max_iterations, |n| n.clamp(1, 10_000) as u32),
            auto_approve: flag("subagent_auto_approve", false),
            orchestrators: flag("orchestrator_enabled", true),
            model: crate::config_file::string_at(doc, "delegation.model"),
            provider: crate::config_file::string_at(doc, "delegation.provider"),
            base_url: crate::config_file::string_at(doc, "delegation.base_url"),
            api_mode: crate::config_file::string_at(doc, "delegation.api_mode"),
            child_timeout: seconds_of(at("child_timeout_seconds")).and_then(positive),
        }
    }
}

/// config.yaml holds a readable `delegation.child_timeout_seconds` (else, as Hermes, the
/// environment's is read).
fn timeout_set(doc: &Yaml) -> bool {
    seconds_of(crate::config_file::lookup(
        doc,
        "delegation.child_timeout_seconds",
    ))
    .is_some()
}

/// A number of seconds as config.yaml or the environment writes it.
fn seconds_of(v: &Yaml) -> Option<f64> {
    match v {
        Yaml::Integer(n) => Some(*n as f64),
        Yaml::Real(_) => v.as_f64(),
        Yaml::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|n| n.is_finite())
}

/// A timeout of 0 or less is none (Hermes: disabled); a huge one is a month (a deadline the
/// clock can hold).
fn positive(n: f64) -> Option<f64> {
    (n > 0.0).then_some(n.min(MAX_CHILD_TIMEOUT))
}

/// One goal handed to a child.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub goal: String,
    pub context: Option<String>,
    /// It may delegate in turn (`role: orchestrator`, within the depth limit).
    pub orchestrator: bool,
}

/// Read a call's arguments as Hermes does: `tasks` (a batch; a JSON string of one is read
/// too), else `goal` with `context`; each task needs a goal; no more than `max_children`.
/// `child_depth` is the depth the children would have; an orchestrator at the last level
/// becomes a leaf.
pub fn tasks_of(args: &Value, limits: &Limits, child_depth: u32) -> Result<Vec<Task>, String> {
    let text = |v: &Value| {
        v.as_str()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let may_orchestrate = limits.orchestrators && child_depth < limits.max_depth;
    let role_of = |v: &Value| may_orchestrate && v.as_str() == Some("orchestrator");
    let top_role = role_of(&args["role"]);
    let tasks = match &args["tasks"] {
        Value::String(s) if !s.trim().is_empty() => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Array(_)) => v,
            _ => return Err("'tasks' must be an array of {goal, context, role} objects.".into()),
        },
        v => v.clone(),
    };
    let list: Vec<Task> = match tasks {
        Value::Array(items) if !items.is_empty() => {
            if items.len() > limits.max_children {
                return Err(format!(
                    "Too many tasks: {} provided, but max_concurrent_children is {}. Send fewer \
                     tasks, split them over several delegate_task calls, or raise \
                     delegation.max_concurrent_children in config.yaml.",
                    items.len(),
                    limits.max_children
                ));
            }
            let mut list = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                if !item.is_object() {
                    return Err(format!("Task {i} must be an object."));
                }
                let Some(goal) = text(&item["goal"]) else {
                    return Err(format!("Task {i} is missing a 'goal'."));
                };
                let orchestrator = match item.get("role") {
                    Some(r) if !r.is_null() => role_of(r),
                    _ => top_role,
                };
                list.push(Task {
                    goal,
                    context: text(&item["context"]),
                    orchestrator,
                });
            }
            list
        }
        _ => match text(&args["goal"]) {
            Some(goal) => vec![Task {
                goal,
                context: text(&args["context"]),
                orchestrator: top_role,
            }],
            None => return Err("Provide either 'goal' (one task) or 'tasks' (a batch).".into()),
        },
    };
    Ok(list)
}

/// The children of one `delegate_task` call and what each returned so far.
#[derive(Debug)]
pub struct Batch {
    pub tasks: Vec<Task>,
    /// Each child's result entry, once it ended (Hermes' shape: status, summary, tokens…).
    pub entries: Vec<Option<Value>>,
    pub started: Instant,
    /// The depth of these children (1: children of a top-level session).
    pub child_depth: u32,
    pub limits: Limits,
    /// Set when the children run in the background (a top-level session's call, as in Hermes
    /// 0.18): the call answered at once and their combined result becomes a new message of
    /// the parent's. `None`: the call waits for them (an orchestrator child's).
    pub background: Option<Background>,
    /// Why a call Hermes would run in the background waited instead (said in its result).
    pub note: Option<String>,
}

/// A delegation run in the background: what its result's message says of where it came from.
#[derive(Debug, Clone)]
pub struct Background {
    /// Hermes' handle (`deleg_<hex>`), in the call's answer and the result's message.
    pub id: String,
    /// The runtime id of the session the result goes to.
    pub parent_rid: String,
    pub dispatched_unix: f64,
    pub model: String,
}

/// The entry of a child that never reported: `why` it was cut off.
fn cut_off_entry(index: usize, why: &str) -> Value {
    json!({
        "task_index": index,
        "status": "interrupted",
        "summary": null,
        "error": why,
        "api_calls": 0,
        "duration_seconds": 0,
    })
}

impl Batch {
    pub fn done(&self) -> bool {
        self.entries.iter().all(Option::is_some)
    }

    /// Every entry in task order; those missing say `why` they were cut off.
    fn results(entries: Vec<Option<Value>>, why: &str) -> Vec<Value> {
        let filled = entries.into_iter().enumerate();
        filled
            .map(|(i, e)| e.unwrap_or_else(|| cut_off_entry(i, why)))
            .collect()
    }

    /// The call's result: every entry in task order (those missing were cut off).
    pub fn result(self, now: Instant) -> ToolResult {
        let total = now.saturating_duration_since(self.started).as_secs_f64();
        let why = "The parent's turn was interrupted before this subagent finished.";
        let results = Batch::results(self.entries, why);
        let count = |status: &str| results.iter().filter(|r| r["status"] == status).count();
        let (completed, interrupted) = (count("completed"), count("interrupted"));
        let timed_out = count("timeout");
        let failed = results.len() - completed - interrupted - timed_out;
        let mut said = vec![format!("{completed} completed")];
        if failed > 0 {
            said.push(format!("{failed} failed"));
        }
        if timed_out > 0 {
            said.push(format!("{timed_out} timed out"));
        }
        if interrupted > 0 {
            said.push(format!("{interrupted} interrupted"));
        }
        let n = results.len();
        let summary = format!(
            "{n} subagent{} · {}",
            if n == 1 { "" } else { "s" },
            said.join(", ")
        );
        let mut content = json!({
            "results": results,
            "total_duration_seconds": hundredths(total),
        });
        if let Some(note) = self.note {
            content["note"] = json!(note);
        }
        ToolResult::new(content, summary)
    }

    /// The call's answer when its children run in the background (Hermes' `dispatched`).
    pub fn dispatched(&self, id: &str) -> ToolResult {
        let goals: Vec<&str> = self.tasks.iter().map(|t| t.goal.as_str()).collect();
        let n = goals.len();
        let note = if n == 1 {
            "The subagent works in the background: you and the user can carry on, and its whole \
             result comes into this conversation as a new message when it finishes. Do not wait \
             for it or poll it; just go on."
                .to_string()
        } else {
            format!(
                "The {n} subagents work in parallel in the background: you and the user can carry \
                 on. They finish together, and their results come into this conversation as one \
                 new message once all of them are done. Do not wait for them or poll them; just \
                 go on."
            )
        };
        let content = json!({
            "status": "dispatched",
            "mode": "background",
            "count": n,
            "delegation_id": id,
            "goals": goals,
            "note": note,
        });
        let plural = if n == 1 { "" } else { "s" };
        ToolResult::new(content, format!("{n} subagent{plural} in the background"))
    }

    /// `orchestrator` when every task may delegate, else `leaf` (the block's `Role:`).
    fn role(&self) -> &'static str {
        match self.tasks.iter().all(|t| t.orchestrator) {
            true => "orchestrator",
            false => "leaf",
        }
    }

    /// What the parent is told of this background delegation if its gateway dies before the
    /// children end (Hermes' `unknown` outcome for a delegation whose owner process is gone):
    /// written when it is dispatched, kept with the parent's stored session until the real
    /// result replaces it, and added to the parent's transcript by the next start's repair.
    /// `children`: each task's subagent id and stored session.
    pub fn lost_notice(&self, bg: &Background, children: &[(String, String)]) -> String {
        let n = self.tasks.len();
        let mut lines = vec![
            format!("[ASYNC DELEGATION BATCH COMPLETE — {}]", bg.id),
            format!(
                "The background delegation of {n} subagent(s) you dispatched earlier never \
                 reported back: the gateway running it stopped abruptly (killed or crashed) \
                 while they worked, so their outcome is unknown. Each may have done some or all \
                 of its task, and what it did is in its own session. Check for side effects \
                 before relying on them, and dispatch again if the work is still needed."
            ),
            String::new(),
            format!(
                "Dispatched: {} UTC",
                crate::util::human_time(bg.dispatched_unix)
            ),
        ];
        if let [only] = self.tasks.as_slice()
            && let Some(context) = &only.context
        {
            lines.push(format!("Context you provided: {context}"));
        }
        lines.push(format!("Role: {}   Model: {}", self.role(), bg.model));
        for (i, task) in self.tasks.iter().enumerate() {
            lines.push(String::new());
            lines.push(format!(
                "--- ✗ TASK {}/{n}: {}  (status=unknown) ---",
                i + 1,
                task.goal
            ));
            let (subagent, session) = children.get(i).cloned().unwrap_or_default();
            lines.push(format!(
                "(no summary — status=unknown: subagent {subagent}, session {session}; the \
                 gateway stopped before it reported)"
            ));
        }
        lines.join("\n")
    }

    /// A background delegation's combined result as it enters the parent's conversation
    /// (Hermes' batch completion block): where it came from, then each task's status and
    /// report. Children that never reported say `why` they were cut off.
    pub fn notice(self, bg: &Background, now: Instant, now_unix: f64, why: &str) -> String {
        let total = hundredths(now.saturating_duration_since(self.started).as_secs_f64());
        let n = self.tasks.len();
        let role = self.role();
        let mut lines = vec![
            format!("[ASYNC DELEGATION BATCH COMPLETE — {}]", bg.id),
            format!(
                "The background delegation of {n} subagent(s) you dispatched earlier has \
                 finished: they ran in parallel and waited for each other, and their results \
                 are below. The conversation may have moved on since; act on them, or dispatch \
                 again if things have changed."
            ),
            String::new(),
            format!("Dispatched: {} ago", age(now_unix - bg.dispatched_unix)),
        ];
        if let [only] = self.tasks.as_slice()
            && let Some(context) = &only.context
        {
            lines.push(format!("Context you provided: {context}"));
        }
        lines.push(format!(
            "Role: {role}   Model: {}   Total duration: {total}s",
            bg.model
        ));
        let goals: Vec<String> = self.tasks.into_iter().map(|t| t.goal).collect();
        for (i, r) in Batch::results(self.entries, why).iter().enumerate() {
            let status = r["status"].as_str().unwrap_or("?");
            let ok = status == "completed";
            let mut header = format!("--- {} TASK {}/{n}", if ok { "✓" } else { "✗" }, i + 1);
            if let Some(goal) = goals.get(i) {
                header.push_str(&format!(": {goal}"));
            }
            header.push_str(&format!("  (status={status}"));
            if let Some(calls) = r["api_calls"].as_u64().filter(|c| *c > 0) {
                header.push_str(&format!(", api_calls={calls}"));
            }
            if let Some(d) = r["duration_seconds"].as_f64() {
                header.push_str(&format!(", {d}s"));
            }
            header.push_str(") ---");
            lines.push(String::new());
            lines.push(header);
            let summary = r["summary"].as_str().filter(|s| !s.is_empty());
            let error = r["error"].as_str();
            match (summary, error) {
                (Some(s), _) if ok => lines.push(s.to_string()),
                (Some(s), e) => {
                    if let Some(e) = e {
                        lines.push(format!("({status}: {e})"));
                    }
                    lines.push("Partial output:".into());
                    lines.push(s.to_string());
                }
                (None, Some(e)) => lines.push(format!("(no summary — status={status}: {e})")),
                (None, None) => lines.push(format!("(no summary — status={status})")),
            }
        }
        lines.join("\n")
    }
}

/// Seconds to two decimals, as Hermes' durations say them.
fn hundredths(secs: f64) -> f64 {
    (secs * 100.0).round() / 100.0
}

/// A time span as a person says it: `45s`, `18m`, `2h3m`.
fn age(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// A summary as it enters the parent's context: clipped to the budget, saying where the rest is.
pub fn clip_summary(summary: &str, child_session: &str) -> String {
    if summary.chars().count() <= MAX_SUMMARY_CHARS {
        return summary.to_string();
    }
    let head: String = summary.chars().take(MAX_SUMMARY_CHARS).collect();
    format!("{head}\n[summary clipped; the whole text is in session {child_session}]")
}

/// The calls whose children are running, and whether new ones may start.
#[derive(Debug, Default)]
pub struct Board {
    /// `delegation.pause`: new calls are refused; running children go on.
    pub paused: bool,
    pub batches: HashMap<JobId, Batch>,
}

/// The board, shared by the tool and the loop's delegation.
pub type Shared = Rc<RefCell<Board>>;

/// The `delegate_task` tool.
pub struct DelegateTask {
    board: Shared,
}

impl DelegateTask {
    pub fn new(board: Shared) -> DelegateTask {
        DelegateTask { board }
    }
}

impl Tool for DelegateTask {
    fn name(&self) -> &str {
        "delegate_task"
    }

    fn toolset(&self) -> &str {
        "delegation"
    }

    fn description(&self) -> &str {
        "Give one goal, or a batch of independent goals, to subagents: fresh conversations with \
         their own terminal and your tools but delegate_task, clarify and memory. They know \
         nothing of this conversation, so put every fact they need (paths, errors, \
         constraints, the language to answer in) in 'context'. A batch runs at once. Here the \
         call returns at once ('dispatched'): carry on, and when all are done their results \
         arrive as one new message, an entry per task (status, the child's summary, model \
         calls, duration); do not wait or poll. A subagent's own call (an orchestrator's) \
         waits and returns the entries. Summaries are the children's claims: check side \
         effects yourself. Limits (config.yaml, delegation): max_concurrent_children (3 a \
         call, and background delegations at once), max_spawn_depth (1: children cannot \
         delegate), max_iterations (50 model calls a child)."
    }

    fn parameters(&self) -> Value {
        let role = json!({
            "type": "string",
            "enum": ["leaf", "orchestrator"],
            "description": "'leaf' (default) cannot delegate; 'orchestrator' may, within \
                            max_spawn_depth."
        });
        json!({
            "type": "object",
            "properties": {
                "goal": {"type": "string", "description": "What the subagent is to achieve."},
                "context": {"type": "string", "description": "All it needs to know."},
                "tasks": {
                    "type": "array",
                    "description": "A batch, run at once (goal and context are then ignored).",
                    "items": {
                        "type": "object",
                        "properties": {
                            "goal": {"type": "string"},
                            "context": {"type": "string"},
                            "role": role.clone(),
                        },
                        "required": ["goal"]
                    }
                },
                "role": role,
            },
            "required": []
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        if self.board.borrow().paused {
            return Start::Done(ToolResult::error(
                "Delegation is paused: clear the pause (`p` in /agents, or the \
                 delegation.pause call) before delegating again.",
            ));
        }
        let limits = Limits::load(ctx.home);
        let depth = ctx.subagent_depth;
        if depth >= limits.max_depth {
            return Start::Done(ToolResult::error(format!(
                "Delegation depth limit reached (depth={depth}, max_spawn_depth={}). Raise \
                 delegation.max_spawn_depth in config.yaml for deeper nesting.",
                limits.max_depth
            )));
        }
        let tasks = match tasks_of(args, &limits, depth + 1) {
            Ok(tasks) => tasks,
            Err(why) => return Start::Done(ToolResult::error(why)),
        };
        if ctx.shutting_down {
            return Start::Done(ToolResult::error("the gateway is shutting down"));
        }
        let n = tasks.len();
        self.board.borrow_mut().batches.insert(
            ctx.job,
            Batch {
                tasks,
                entries: vec![None; n],
                started: ctx.now,
                child_depth: depth + 1,
                limits,
                background: None,
                note: None,
            },
        );
        ctx.spawn_subagents();
        Start::Later
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        // The clock is not at hand here; what ran is in each finished child's own duration.
        let batch = self.board.borrow_mut().batches.remove(&job)?;
        let started = batch.started;
        Some(batch.result(started))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn one_goal_or_a_batch_within_the_limit() {
        let one = tasks_of(
            &json!({"goal": " find it ", "context": "in src"}),
            &limits(),
            1,
        )
        .unwrap();
        assert_eq!(
            one,
            vec![Task {
                goal: "find it".into(),
                context: Some("in src".into()),
                orchestrator: false
            }]
        );
        let three =
            json!({"goal": "ignored", "tasks": [{"goal": "a"}, {"goal": "b"}, {"goal": "c"}]});
        let tasks = tasks_of(&three, &limits(), 1).unwrap();
        assert_eq!(
            tasks.iter().map(|t| t.goal.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        // A batch sent as a JSON string is read too (models do that).
        let text = json!({"tasks": "[{\"goal\": \"x\"}]"});
        assert_eq!(tasks_of(&text, &limits(), 1).unwrap()[0].goal, "x");
    }

    #[test]
    fn requests_outside_the_limits_are_refused_with_the_reason() {
        let many: Vec<Value> = (0..1000)
            .map(|i| json!({"goal": format!("g{i}")}))
            .collect();
        let err = tasks_of(&json!({"tasks": many}), &limits(), 1).unwrap_err();
        assert!(
            err.contains("1000 provided") && err.contains("max_concurrent_children is 3"),
            "{err}"
        );
        let err = tasks_of(
            &json!({"tasks": [{"goal": "a"}, {"context": "x"}]}),
            &limits(),
            1,
        )
        .unwrap_err();
        assert_eq!(err, "Task 1 is missing a 'goal'.");
        assert!(tasks_of(&json!({}), &limits(), 1).is_err());
        assert!(tasks_of(&json!({"tasks": [1]}), &limits(), 1).is_err());
    }

    #[test]
    fn an_orchestrator_needs_room_below_it() {
        let args = json!({"goal": "g", "role": "orchestrator"});
        assert!(!tasks_of(&args, &limits(), 1).unwrap()[0].orchestrator);
        let deeper = Limits {
            max_depth: 2,
            ..limits()
        };
        assert!(tasks_of(&args, &deeper, 1).unwrap()[0].orchestrator);
        assert!(!tasks_of(&args, &deeper, 2).unwrap()[0].orchestrator);
        let off = Limits {
            orchestrators: false,
            ..deeper
        };
        assert!(!tasks_of(&args, &off, 1).unwrap()[0].orchestrator);
    }

    #[test]
    fn limits_come_from_config_with_hermes_defaults_and_bounds() {
        let doc = crate::config_file::parse(
            "delegation:\n  max_concurrent_children: 100000\n  max_spawn_depth: 0\n  \
             max_iterations: '7'\n  subagent_auto_approve: true\n",
        )
        .unwrap();
        let l = Limits::from_config(&doc);
        assert_eq!(l.max_children, HARD_MAX_CHILDREN);
        assert_eq!(l.max_depth, 1);
        assert_eq!(l.max_iterations, 7);
        assert!(l.auto_approve && l.orchestrators);
        assert_eq!(Limits::from_config(&Yaml::Null), Limits::default());
        let timeout = |text: &str| {
            let doc = crate::config_file::parse(&format!("delegation:\n  {text}\n")).unwrap();
            Limits::from_config(&doc).child_timeout
        };
        assert_eq!(timeout("child_timeout_seconds: 90"), Some(90.0));
        assert_eq!(timeout("child_timeout_seconds: '2.5'"), Some(2.5));
        assert_eq!(timeout("child_timeout_seconds: 0"), None);
        assert_eq!(timeout("child_timeout_seconds: -3"), None);
        assert_eq!(timeout("child_timeout_seconds: soon"), None);
        assert_eq!(
            timeout("child_timeout_seconds: 1e300"),
            Some(MAX_CHILD_TIMEOUT)
        );
    }

    #[test]
    fn a_batch_result_lists_every_task_and_says_who_was_cut_off() {
        let now = Instant::now();
        let mut batch = Batch {
            tasks: vec![],
            entries: vec![
                Some(json!({"task_index": 0, "status": "completed", "summary": "ok"})),
                None,
            ],
            started: now,
            child_depth: 1,
            limits: limits(),
            background: None,
            note: None,
        };
        assert!(!batch.done());
        batch.entries[1] = None;
        let r = batch.result(now + std::time::Duration::from_millis(1500));
        assert_eq!(r.content["results"][0]["summary"], "ok");
        assert_eq!(r.content["results"][1]["status"], "interrupted");
        assert_eq!(r.content["total_duration_seconds"], 1.5);
        assert_eq!(r.summary, "2 subagents · 1 completed, 1 interrupted");
    }

    #[test]
    fn a_background_delegation_answers_dispatched_and_reports_every_task_at_its_end() {
        let now = Instant::now();
        let task = |goal: &str, context: Option<&str>| Task {
            goal: goal.into(),
            context: context.map(str::to_string),
            orchestrator: false,
        };
        let batch = Batch {
            tasks: vec![task("count files", None), task("read logs", None)],
            entries: vec![
                Some(
                    json!({"task_index": 0, "status": "completed", "summary": "12 files",
                            "api_calls": 2, "duration_seconds": 1.5}),
                ),
                Some(json!({"task_index": 1, "status": "failed", "summary": "",
                            "error": "no logs", "api_calls": 1, "duration_seconds": 0.25})),
            ],
            started: now,
            child_depth: 1,
            limits: limits(),
            background: None,
            note: None,
        };
        let answer = batch.dispatched("deleg_0a1b2c3d").content;
        assert_eq!(answer["status"], "dispatched");
        assert_eq!(answer["mode"], "background");
        assert_eq!(answer["count"], 2);
        assert_eq!(answer["goals"], json!(["count files", "read logs"]));
        let bg = Background {
            id: "deleg_0a1b2c3d".into(),
            parent_rid: "r1".into(),
            dispatched_unix: 1000.0,
            model: "m1".into(),
        };
        let text = batch.notice(&bg, now + std::time::Duration::from_secs(3), 1125.0, "cut");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "[ASYNC DELEGATION BATCH COMPLETE — deleg_0a1b2c3d]"
        );
        assert!(text.contains("Dispatched: 2m5s ago"), "{text}");
        assert!(
            text.contains("Role: leaf   Model: m1   Total duration: 3s"),
            "{text}"
        );
        let first = "--- ✓ TASK 1/2: count files  (status=completed, api_calls=2, 1.5s) ---";
        assert!(text.contains(&format!("{first}\n12 files")), "{text}");
        let second = "--- ✗ TASK 2/2: read logs  (status=failed, api_calls=1, 0.25s) ---";
        assert!(
            text.contains(&format!("{second}\n(no summary — status=failed: no logs)")),
            "{text}"
        );

        // A child that never reported says why; a single task's context is recalled.
        let cut = Batch {
            tasks: vec![task("wait", Some("in /tmp"))],
            entries: vec![None],
            started: now,
            child_depth: 1,
            limits: limits(),
            background: None,
            note: None,
        };
        let text = cut.notice(&bg, now, 1000.0, "The session closed.");
        assert!(text.contains("Context you provided: in /tmp"), "{text}");
        assert!(
            text.ends_with("(status=interrupted, 0s) ---\n(no summary — status=interrupted: The session closed.)"),
            "{text}"
        );
        assert_eq!(
            [age(45.0), age(60.0), age(7380.0), age(-1.0)],
            ["45s", "1m", "2h3m", "0s"]
        );
    }

    #[test]
    fn the_notice_kept_for_a_kill_names_every_task_and_says_the_outcome_is_unknown() {
        let task = |goal: &str| Task {
            goal: goal.into(),
            context: Some("in /srv".into()),
            orchestrator: false,
        };
        let batch = Batch {
            tasks: vec![task("build it"), task("test it")],
            entries: vec![None, None],
            started: Instant::now(),
            child_depth: 1,
            limits: limits(),
            background: None,
            note: None,
        };
        let bg = Background {
            id: "deleg_00ff".into(),
            parent_rid: "r1".into(),
            dispatched_unix: 0.0,
            model: "m1".into(),
        };
        let children = [("sa-0-a".to_string(), "s-a".to_string())];
        let text = batch.lost_notice(&bg, &children);
        assert!(
            text.starts_with("[ASYNC DELEGATION BATCH COMPLETE — deleg_00ff]\n"),
            "{text}"
        );
        assert!(text.contains("outcome is unknown"), "{text}");
        assert!(
            text.contains("Dispatched: 1970-01-01 00:00:00 UTC"),
            "{text}"
        );
        // A batch's contexts differ per task: none is recalled for the whole.
        assert!(!text.contains("Context you provided"), "{text}");
        let first = "--- ✗ TASK 1/2: build it  (status=unknown) ---\n(no summary — status=unknown: \
                     subagent sa-0-a, session s-a;";
        assert!(text.contains(first), "{text}");
        assert!(
            text.contains("TASK 2/2: test it  (status=unknown)"),
            "{text}"
        );
    }

    #[test]
    fn a_long_summary_is_clipped_and_points_at_the_whole() {
        let long = "x".repeat(MAX_SUMMARY_CHARS + 10);
        let clipped = clip_summary(&long, "s1");
        assert!(clipped.ends_with("whole text is in session s1]"));
        assert_eq!(clip_summary("short", "s1"), "short");
    }
}
