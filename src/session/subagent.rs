//! A session that is a subagent: who it works for ([`Delegated`]), what it is told (its system
//! prompt, from the goal), what its parent's client hears of it (its events relayed as
//! Hermes' `subagent.*`, which the TUI's agents overlay reads), and what its end returns to
//! the parent's `delegate_task` call (a result entry). Pure: the loop's `delegation.rs` acts.

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::Session;
use super::transcript::Role;
use crate::tools::JobId;
use crate::util;

/// Tool names batched into one `subagent.progress` note (Hermes' batch).
const PROGRESS_BATCH: usize = 5;
/// The reasoning kept for the next `subagent.thinking` (bytes).
const THINKING_MAX: usize = 2_000;
/// Characters of a summary `subagent.complete` carries, and of its preview.
const COMPLETE_SUMMARY: usize = 500;
const COMPLETE_PREVIEW: usize = 160;

/// Who a subagent works for, and what its parent's client has heard of it.
#[derive(Debug, Clone)]
pub struct Delegated {
    /// The runtime id of the session whose `delegate_task` call spawned it.
    pub parent_rid: String,
    /// That call.
    pub job: JobId,
    /// Its id in the spawn tree (`sa-<index>-<hex>`), which `subagent.interrupt` names.
    pub subagent_id: String,
    /// The parent's own subagent id, when the parent is a subagent (an orchestrator).
    pub parent_subagent_id: Option<String>,
    /// The parent's stored session (Hermes' `model_config._delegate_from` of its row).
    pub delegate_from: String,
    pub task_index: usize,
    pub task_count: usize,
    pub goal: String,
    /// 1 for a child of a session the user talks to.
    pub depth: u32,
    /// It may delegate in turn.
    pub orchestrator: bool,
    /// Model calls its turn may make.
    pub max_rounds: u32,
    /// Its commands that need approval run (else they are denied).
    pub auto_approve: bool,
    pub started: Instant,
    pub started_unix: f64,
    /// What its parent's client heard of it so far.
    pub heard: Heard,
    /// How long it may run (`delegation.child_timeout_seconds`, floored), if limited.
    pub timeout: Option<std::time::Duration>,
    /// It was stopped at that timeout.
    pub timed_out: bool,
}

/// A background delegation of this session whose children still run: what its transcript
/// gets if the gateway dies before they end (stored with the session, `tui_gateway_delegations`).
#[derive(Debug, Clone, PartialEq)]
pub struct Awaited {
    /// Hermes' handle (`deleg_<hex>`).
    pub id: String,
    /// The notice saying the outcome is unknown ([`crate::tools::delegate::Batch::lost_notice`]).
    pub if_lost: String,
}

/// A subagent's relay state: tools started, and what waits for the next note.
#[derive(Debug, Clone, Default)]
pub struct Heard {
    /// Tool calls it started.
    pub tool_count: u64,
    /// Tool names since the last progress note.
    batch: Vec<String>,
    /// Reasoning since the last thinking note.
    thinking: String,
}

impl Delegated {
    /// The fields every `subagent.*` event carries: who it is and where in the tree.
    pub fn identity(&self, model: &str, child_session: &str) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("goal".into(), json!(self.goal));
        m.insert("task_index".into(), json!(self.task_index));
        m.insert("task_count".into(), json!(self.task_count));
        m.insert("subagent_id".into(), json!(self.subagent_id));
        if let Some(p) = &self.parent_subagent_id {
            m.insert("parent_id".into(), json!(p));
        }
        // The TUI counts depth from 0 for a first-level child.
        m.insert("depth".into(), json!(self.depth.saturating_sub(1)));
        m.insert("model".into(), json!(model));
        m.insert("child_session_id".into(), json!(child_session));
        m.insert("tool_count".into(), json!(self.heard.tool_count));
        m
    }

    /// `delegation.status`'s record of it while it runs.
    pub fn record(&self, model: &str) -> Value {
        json!({
            "subagent_id": self.subagent_id,
            "parent_id": self.parent_subagent_id,
            "depth": self.depth.saturating_sub(1),
            "goal": self.goal,
            "model": model,
            "started_at": self.started_unix,
            "tool_count": self.heard.tool_count,
            "status": "running",
        })
    }

    /// What its parent's client hears of one event this subagent said: `subagent.tool` for a
    /// tool's start (and `subagent.progress` every few), `subagent.thinking` for its reasoning
    /// before acting, its own children's `subagent.*` as they are.
    pub fn relay(
        &mut self,
        kind: &str,
        payload: &Value,
        model: &str,
        child_session: &str,
    ) -> Vec<(String, Value)> {
        if kind.starts_with("subagent.") {
            return vec![(kind.to_string(), payload.clone())];
        }
        let mut out = Vec::new();
        match kind {
            "reasoning.delta" => {
                let text = payload["text"].as_str().unwrap_or("");
                if self.heard.thinking.len() + text.len() <= THINKING_MAX {
                    self.heard.thinking.push_str(text);
                }
            }
            "tool.start" => {
                self.flush_thinking(model, child_session, &mut out);
                self.heard.tool_count += 1;
                let name = payload["name"].as_str().unwrap_or("tool").to_string();
                let preview = payload["context"].as_str().unwrap_or("").to_string();
                let mut p = self.identity(model, child_session);
                p.insert("tool_name".into(), json!(name));
                p.insert("tool_preview".into(), json!(preview));
                p.insert("text".into(), json!(preview));
                out.push(("subagent.tool".to_string(), Value::Object(p)));
                self.heard.batch.push(name);
                if self.heard.batch.len() >= PROGRESS_BATCH {
                    self.flush_progress(model, child_session, &mut out);
                }
            }
            "message.complete" => {
                self.flush_thinking(model, child_session, &mut out);
                self.flush_progress(model, child_session, &mut out);
            }
            _ => {}
        }
        out
    }

    fn flush_thinking(&mut self, model: &str, child: &str, out: &mut Vec<(String, Value)>) {
        let text = std::mem::take(&mut self.heard.thinking);
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let mut p = self.identity(model, child);
        p.insert("text".into(), json!(util::clip(text, COMPLETE_PREVIEW)));
        out.push(("subagent.thinking".to_string(), Value::Object(p)));
    }

    fn flush_progress(&mut self, model: &str, child: &str, out: &mut Vec<(String, Value)>) {
        if self.heard.batch.is_empty() {
            return;
        }
        let prefix = match self.task_count {
            1 => String::new(),
            _ => format!("[{}] ", self.task_index + 1),
        };
        let mut p = self.identity(model, child);
        let names = std::mem::take(&mut self.heard.batch).join(", ");
        p.insert("text".into(), json!(format!("🔀 {prefix}{names}")));
        out.push(("subagent.progress".to_string(), Value::Object(p)));
    }
}

/// What a session's subagents used, every level below it: each ended child's own figures and
/// what its own children rolled up (so each session counts once). Kept apart from the
/// session's own figures, which are what its state.db row and `session_model_usage` hold; after
/// a restart it is read back from the children's rows ([`crate::store::Store::subagent_totals`]).
pub type Rollup = crate::store::SubagentTotals;

impl Rollup {
    /// Fold in the ended subagent `child`: itself and its own subagents.
    pub fn add_child(&mut self, child: &Session) {
        let own = Rollup {
            count: 1,
            input: child.input_tokens,
            output: child.output_tokens,
            reasoning: child.accounting.reasoning_tokens,
            calls: child.model_calls,
            cost_usd: child.accounting.cost_usd,
        };
        self.add(&own);
        self.add(&child.subagents);
    }

    pub fn add(&mut self, o: &Rollup) {
        self.count += o.count;
        self.input += o.input;
        self.output += o.output;
        self.reasoning += o.reasoning;
        self.calls += o.calls;
        if let Some(c) = o.cost_usd {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + c);
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "count": self.count,
            "input": self.input,
            "output": self.output,
            "reasoning": self.reasoning,
            "total": self.input + self.output,
            "calls": self.calls,
            "cost_usd": self.cost_usd,
        })
    }
}

/// How a subagent's turn ended, as its result entry and `subagent.complete` say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    /// It ended without an answer, or on an error.
    Failed,
    Interrupted,
    /// Stopped at `delegation.child_timeout_seconds`.
    TimedOut,
}

/// What a subagent's end hands back: the parent call's result entry and the parent client's
/// `subagent.complete`.
#[derive(Debug, Clone)]
pub struct Ended {
    pub entry: Value,
    pub complete: Value,
}

/// A subagent's turn ended (`Effect::SubagentEnded`): whose it was, and what it hands back.
#[derive(Debug)]
pub struct End {
    pub child_rid: String,
    pub parent_rid: String,
    pub job: JobId,
    pub task_index: usize,
    pub ended: Ended,
}

/// The end of subagent `s`'s turn (`status` and `error` as `message.complete` says them).
pub fn ended(s: &Session, d: &Delegated, status: &str, error: Option<&str>, now: Instant) -> Ended {
    let answer = s
        .transcript
        .iter()
        .rev()
        .take_while(|m| m.role != Role::User)
        .find(|m| {
            m.role == Role::Assistant && m.content.as_deref().is_some_and(|c| !c.trim().is_empty())
        })
        .and_then(|m| m.content.clone())
        .unwrap_or_default();
    let stopped_at_budget = error.is_some_and(|e| e.starts_with("stopped after"));
    let outcome = match status {
        "interrupted" if d.timed_out => Outcome::TimedOut,
        "interrupted" => Outcome::Interrupted,
        "complete" if !answer.trim().is_empty() && answer.trim() != "(empty)" => Outcome::Completed,
        _ => Outcome::Failed,
    };
    let (status_word, exit_reason) = match outcome {
        Outcome::Completed => ("completed", "completed"),
        Outcome::Interrupted => ("interrupted", "interrupted"),
        Outcome::TimedOut => ("timeout", "timeout"),
        Outcome::Failed if stopped_at_budget => ("failed", "max_iterations"),
        Outcome::Failed => ("failed", "error"),
    };
    let duration = (now.saturating_duration_since(d.started).as_secs_f64() * 100.0).round() / 100.0;
    // A child cut off by its timeout has no report (Hermes: summary null); its partial
    // transcript stays in its stored session.
    let summary = match outcome {
        Outcome::TimedOut => Value::Null,
        _ => json!(crate::tools::delegate::clip_summary(&answer, &s.stored_id)),
    };
    let mut entry = json!({
        "task_index": d.task_index,
        "status": status_word,
        "summary": summary,
        "api_calls": s.model_calls,
        "duration_seconds": duration,
        "model": s.model,
        "exit_reason": exit_reason,
        "tokens": {"input": s.input_tokens, "output": s.output_tokens},
        "tool_trace": tool_trace(s),
        "session_id": s.stored_id,
    });
    let why = match outcome {
        Outcome::Completed => None,
        Outcome::Interrupted => Some("interrupted before it finished".to_string()),
        Outcome::TimedOut => Some(format!(
            "Subagent timed out after {}s (delegation.child_timeout_seconds) with {} model \
             call(s) made; it was stopped and its commands ended.",
            seconds_text(d.timeout.unwrap_or_default().as_secs_f64()),
            s.model_calls
        )),
        Outcome::Failed => Some(
            error
                .map(str::to_string)
                .unwrap_or_else(|| "the subagent ended without an answer".to_string()),
        ),
    };
    if let Some(why) = &why {
        entry["error"] = json!(why);
    }
    let mut complete = d.identity(&s.model, &s.stored_id);
    let (summary_said, said) = match outcome {
        // Hermes' timeout note: an empty summary, the time in the preview.
        Outcome::TimedOut => (
            String::new(),
            format!("Timed out after {}s", seconds_text(duration)),
        ),
        _ if answer.is_empty() => {
            let why = why.unwrap_or_default();
            (why.clone(), why)
        }
        _ => (answer.clone(), answer),
    };
    for (k, v) in [
        ("status", json!(status_word)),
        (
            "summary",
            json!(util::clip(&summary_said, COMPLETE_SUMMARY)),
        ),
        ("text", json!(util::clip(&said, COMPLETE_PREVIEW))),
        ("duration_seconds", json!(duration)),
        ("input_tokens", json!(s.input_tokens)),
        ("output_tokens", json!(s.output_tokens)),
        ("reasoning_tokens", json!(s.accounting.reasoning_tokens)),
        ("api_calls", json!(s.model_calls)),
    ] {
        complete.insert(k.into(), v);
    }
    if let Some(cost) = s.accounting.cost_usd {
        complete.insert("cost_usd".into(), json!(cost));
    }
    Ended {
        entry,
        complete: Value::Object(complete),
    }
}

/// Seconds as Python prints a float (`30.0`, `1.25`), the way Hermes' timeout texts say them.
fn seconds_text(secs: f64) -> String {
    if secs.fract() == 0.0 {
        format!("{secs:.1}")
    } else {
        format!("{secs}")
    }
}

/// Each tool call of the subagent with the size of its arguments and result, and whether the
/// result was an error (Hermes' `tool_trace`).
fn tool_trace(s: &Session) -> Value {
    let mut trace: Vec<Value> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    for m in &s.transcript {
        match m.role {
            Role::Assistant => {
                let calls: Vec<Value> = m
                    .tool_calls
                    .as_deref()
                    .and_then(|t| serde_json::from_str(t).ok())
                    .unwrap_or_default();
                for c in calls {
                    let f = &c["function"];
                    let args = f["arguments"].as_str().unwrap_or("");
                    if let Some(id) = c["id"].as_str() {
                        index.insert(id.to_string(), trace.len());
                    }
                    trace.push(json!({"tool": f["name"].as_str().unwrap_or("unknown"), "args_bytes": args.len()}));
                }
            }
            Role::Tool => {
                let content = m.content.as_deref().unwrap_or("");
                let failed = serde_json::from_str::<Value>(content)
                    .ok()
                    .is_some_and(|v| {
                        v.get("error").is_some_and(|e| !e.is_null()) || v["success"] == false
                    });
                let at = m
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| index.get(id).copied());
                if let Some(t) = at.and_then(|i| trace.get_mut(i)) {
                    t["result_bytes"] = json!(content.len());
                    t["status"] = json!(if failed { "error" } else { "ok" });
                }
            }
            _ => {}
        }
    }
    Value::Array(trace)
}

/// A subagent's system prompt: its task, what it was told, where to work, what to hand back.
pub fn system_prompt(
    goal: &str,
    context: Option<&str>,
    workspace: &str,
    orchestrator: Option<(u32, u32)>,
) -> String {
    let mut p = format!(
        "You are a subagent: another agent handed you one task and waits for your report.\n\n\
         YOUR TASK:\n{goal}\n"
    );
    if let Some(c) = context.filter(|c| !c.trim().is_empty()) {
        p.push_str(&format!("\nCONTEXT:\n{c}\n"));
    }
    if !workspace.is_empty() {
        p.push_str(&format!(
            "\nWORKSPACE PATH:\n{workspace}\nWork in this directory unless the task names another; \
             do not assume a repository lives anywhere else without checking.\n"
        ));
    }
    p.push_str(
        "\nUse your tools to do the task. When you are done, answer with a short report: what you \
         did, what you found or produced, the files you created or changed, and anything that went \
         wrong. Lead with outcomes and keep it brief: your report goes into the other agent's \
         context as it is. You cannot ask the user anything.",
    );
    if let Some((depth, max_depth)) = orchestrator {
        let below = if depth + 1 >= max_depth {
            "Your own subagents are at the last level: they cannot delegate further."
        } else {
            "Your own subagents may be orchestrators too (role 'orchestrator') or leaves."
        };
        p.push_str(&format!(
            "\n\nYou may delegate: delegate_task hands independent parts of your task to subagents \
             of your own, run in parallel. Delegate only work that splits into independent parts \
             or would flood your context; do small steps yourself, and never hand your whole task \
             to one subagent. Combine their reports into your own. You are at depth {depth} of at \
             most {max_depth}. {below}"
        ));
    }
    p
}

impl Session {
    /// The tools this session may be sent and call.
    pub fn reach(&self) -> crate::tools::Reach {
        match &self.delegated {
            None => crate::tools::Reach::Full,
            Some(d) if d.orchestrator => crate::tools::Reach::Orchestrator,
            Some(_) => crate::tools::Reach::Leaf,
        }
    }

    /// What the parent of this subagent hears of event `kind` (its runtime id, the events);
    /// `None` for a session that is not a subagent.
    pub fn relay_to_parent(
        &mut self,
        kind: &str,
        payload: &Value,
    ) -> Option<(String, Vec<(String, Value)>)> {
        // Every session's every event passes here: nothing is copied unless it is a subagent's.
        let d = self.delegated.as_mut()?;
        let events = d.relay(kind, payload, &self.model, &self.stored_id);
        (!events.is_empty()).then(|| (d.parent_rid.clone(), events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::transcript::Message;

    fn delegated(now: Instant) -> Delegated {
        Delegated {
            parent_rid: "parent".into(),
            job: JobId(7),
            subagent_id: "sa-1-abc".into(),
            parent_subagent_id: None,
            delegate_from: "stored-parent".into(),
            task_index: 1,
            task_count: 3,
            goal: "count the files".into(),
            depth: 1,
            orchestrator: false,
            max_rounds: 50,
            auto_approve: false,
            started: now,
            started_unix: 0.0,
            heard: Heard::default(),
            timeout: None,
            timed_out: false,
        }
    }

    #[test]
    fn tool_starts_become_subagent_tool_and_a_progress_note_every_few() {
        let mut d = delegated(Instant::now());
        let mut all = Vec::new();
        d.relay(
            "reasoning.delta",
            &json!({"text": "I should list "}),
            "m",
            "s1",
        );
        d.relay("reasoning.delta", &json!({"text": "the dir"}), "m", "s1");
        for i in 0..6 {
            let start = json!({"name": format!("t{i}"), "context": format!("arg{i}")});
            all.extend(d.relay("tool.start", &start, "m", "s1"));
        }
        let kinds: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds[0], "subagent.thinking");
        assert_eq!(all[0].1["text"], "I should list the dir");
        assert_eq!(kinds.iter().filter(|k| **k == "subagent.tool").count(), 6);
        let progress: Vec<&Value> = all
            .iter()
            .filter(|(k, _)| k == "subagent.progress")
            .map(|(_, p)| p)
            .collect();
        assert_eq!(progress.len(), 1);
        assert_eq!(progress[0]["text"], "🔀 [2] t0, t1, t2, t3, t4");
        let last_tool = &all
            .iter()
            .rev()
            .find(|(k, _)| k == "subagent.tool")
            .unwrap()
            .1;
        assert_eq!(last_tool["tool_count"], 6);
        assert_eq!(last_tool["tool_preview"], "arg5");
        assert_eq!(last_tool["subagent_id"], "sa-1-abc");
        assert_eq!(last_tool["depth"], 0);
        // The rest of the batch is said at the end.
        let end = d.relay("message.complete", &json!({}), "m", "s1");
        assert_eq!(end[0].1["text"], "🔀 [2] t5");
        // A grandchild's events go up as they are.
        let nested = json!({"subagent_id": "sa-0-x", "depth": 1});
        assert_eq!(
            d.relay("subagent.tool", &nested, "m", "s1"),
            vec![("subagent.tool".to_string(), nested)]
        );
    }

    #[test]
    fn an_end_says_its_outcome_and_keeps_the_answer() {
        let now = Instant::now();
        let mut s = crate::session::bare_session("c1", "stored-c1");
        let d = delegated(now);
        s.transcript.push(Message::new(
            Role::User,
            Some("count the files".into()),
            0.0,
        ));
        let mut call = Message::new(Role::Assistant, None, 0.0);
        call.tool_calls = Some(json!([{"id": "x1", "function": {"name": "terminal", "arguments": "{\"command\":\"ls\"}"}}]).to_string());
        s.transcript.push(call);
        let mut result = Message::new(
            Role::Tool,
            Some(json!({"output": "a\nb", "exit_code": 0, "error": null}).to_string()),
            0.0,
        );
        result.tool_call_id = Some("x1".into());
        s.transcript.push(result);
        s.transcript.push(Message::new(
            Role::Assistant,
            Some("There are 2 files.".into()),
            0.0,
        ));
        let e = ended(&s, &d, "complete", None, now);
        assert_eq!(e.entry["status"], "completed");
        assert_eq!(e.entry["summary"], "There are 2 files.");
        assert_eq!(e.entry["tool_trace"][0]["tool"], "terminal");
        assert_eq!(e.entry["tool_trace"][0]["status"], "ok");
        assert_eq!(e.complete["status"], "completed");
        assert_eq!(e.complete["task_index"], 1);

        let cut = ended(&s, &d, "interrupted", None, now);
        assert_eq!(cut.entry["status"], "interrupted");
        s.transcript.pop();
        let budget = ended(
            &s,
            &d,
            "error",
            Some("stopped after 50 model calls in one turn"),
            now,
        );
        assert_eq!(budget.entry["status"], "failed");
        assert_eq!(budget.entry["exit_reason"], "max_iterations");
        assert_eq!(
            budget.entry["error"],
            "stopped after 50 model calls in one turn"
        );
    }

    #[test]
    fn a_rollup_counts_every_level_once() {
        let mut leaf = crate::session::bare_session("l", "sl");
        (leaf.input_tokens, leaf.model_calls) = (100, 2);
        leaf.accounting.cost_usd = Some(0.5);
        let mut orchestrator = crate::session::bare_session("o", "so");
        (orchestrator.input_tokens, orchestrator.model_calls) = (10, 1);
        orchestrator.subagents.add_child(&leaf);
        let mut parent = Rollup::default();
        parent.add_child(&orchestrator);
        assert_eq!((parent.count, parent.input, parent.calls), (2, 110, 3));
        assert_eq!(parent.cost_usd, Some(0.5));
        assert_eq!(Rollup::default().json()["cost_usd"], Value::Null);
    }

    #[test]
    fn the_system_prompt_carries_the_task_and_the_orchestrator_note_only_when_allowed() {
        let leaf = system_prompt("fix the bug", Some("in src/a.rs"), "/w", None);
        assert!(leaf.contains("YOUR TASK:\nfix the bug") && leaf.contains("CONTEXT:\nin src/a.rs"));
        assert!(leaf.contains("/w") && !leaf.contains("delegate_task"));
        let orch = system_prompt("g", None, "", Some((1, 2)));
        assert!(orch.contains("depth 1 of at most 2") && orch.contains("last level"));
    }
}
