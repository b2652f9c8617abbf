//! What one task came to: its status (and the exit code that says it), and the result record
//! built from the session's usage figures before and after the task (so a resumed session
//! counts only this task) and the times `exec` saw.

use std::time::Duration;

use serde_json::{Value, json};

use crate::model::pricing::CostStatus;

/// How a task ended. The exit code of `exec PROMPT` is the status's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The turn completed.
    Done,
    /// The model call failed (unreachable, refused, an error status) or the turn failed.
    ModelError,
    /// A signal stopped the run before the task ended.
    Interrupted,
    /// The gateway refused the task (a bad `--resume` id, a refused request), or a command needed
    /// an approval under `--approve ask-fails`.
    Refused,
    /// The task ran past its timeout and was interrupted.
    Timeout,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Done,
        Status::ModelError,
        Status::Interrupted,
        Status::Refused,
        Status::Timeout,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Status::Done => "done",
            Status::ModelError => "model_error",
            Status::Interrupted => "interrupted",
            Status::Refused => "refused",
            Status::Timeout => "timeout",
        }
    }

    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn exit_code(self) -> i32 {
        match self {
            Status::Done => 0,
            Status::ModelError => 1,
            Status::Interrupted => 3,
            Status::Refused => 4,
            Status::Timeout => 5,
        }
    }

    /// The status a `message.complete` reports.
    pub fn of_turn(status: &str) -> Status {
        match status {
            "complete" => Status::Done,
            "interrupted" => Status::Interrupted,
            _ => Status::ModelError,
        }
    }
}

/// Usage between two `usage` objects of one session (`session.create`'s, `message.complete`'s).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
    pub calls: u64,
    pub model_ms: u64,
    pub cost_usd: Option<f64>,
    /// How sure `cost_usd` is (`None`: no figure said).
    pub cost_status: Option<CostStatus>,
}

impl Usage {
    /// The figures of a session's `usage` object (missing ones are 0).
    pub fn of(usage: &Value) -> Usage {
        let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        Usage {
            input: n("input"),
            output: n("output"),
            cache_read: n("cache_read"),
            cache_write: n("cache_write"),
            reasoning: n("reasoning"),
            calls: n("calls"),
            model_ms: n("model_ms"),
            cost_usd: usage.get("cost_usd").and_then(Value::as_f64),
            cost_status: usage
                .get("cost_status")
                .and_then(Value::as_str)
                .map(CostStatus::parse),
        }
    }

    /// What was added since `before` (how sure the cost is: as of now).
    pub fn since(&self, before: &Usage) -> Usage {
        Usage {
            input: self.input.saturating_sub(before.input),
            output: self.output.saturating_sub(before.output),
            cache_read: self.cache_read.saturating_sub(before.cache_read),
            cache_write: self.cache_write.saturating_sub(before.cache_write),
            reasoning: self.reasoning.saturating_sub(before.reasoning),
            calls: self.calls.saturating_sub(before.calls),
            model_ms: self.model_ms.saturating_sub(before.model_ms),
            cost_usd: self
                .cost_usd
                .map(|c| (c - before.cost_usd.unwrap_or(0.0)).max(0.0)),
            cost_status: self.cost_status,
        }
    }

    /// The cost, unless its status says it is unknown (then a sum would be short).
    pub fn known_cost(&self) -> Option<f64> {
        self.cost_usd
            .filter(|_| self.cost_status != Some(CostStatus::Unknown))
    }

    pub fn add(&mut self, other: &Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.reasoning += other.reasoning;
        self.calls += other.calls;
        self.model_ms += other.model_ms;
        if let Some(c) = other.known_cost() {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + c);
        }
        self.cost_status = least_certain(self.cost_status, other.cost_status);
    }

    pub fn tokens_json(&self) -> Value {
        json!({
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "reasoning": self.reasoning,
        })
    }
}

/// The less certain of two statuses (a sum is only as sure as its least sure part).
fn least_certain(a: Option<CostStatus>, b: Option<CostStatus>) -> Option<CostStatus> {
    let rank = |s: CostStatus| match s {
        CostStatus::Unknown => 0,
        CostStatus::Estimated => 1,
        CostStatus::Actual | CostStatus::Included => 2,
    };
    match (a, b) {
        (Some(a), Some(b)) if a == b => Some(a),
        (Some(a), Some(b)) if rank(a) == rank(b) => Some(CostStatus::Actual),
        (Some(a), Some(b)) => Some(if rank(a) < rank(b) { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Milliseconds, to the microsecond.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Approvals a task was asked for and how they were answered.
#[derive(Debug, Default, Clone, Copy)]
pub struct Approvals {
    pub asked: u64,
    pub approved: u64,
    pub denied: u64,
}

/// The subagents a task's delegations ran (every level below it), and what they used.
#[derive(Debug, Default, Clone, Copy)]
pub struct Subagents {
    pub count: u64,
    pub usage: Usage,
}

impl Subagents {
    /// Count one `subagent.complete` (its figures are the child's own session's).
    pub fn add(&mut self, complete: &Value) {
        let n = |key: &str| complete.get(key).and_then(Value::as_u64).unwrap_or(0);
        let cost = complete.get("cost_usd").and_then(Value::as_f64);
        self.count += 1;
        self.usage.add(&Usage {
            input: n("input_tokens"),
            output: n("output_tokens"),
            reasoning: n("reasoning_tokens"),
            calls: n("api_calls"),
            cost_usd: cost,
            cost_status: cost.map(|_| CostStatus::Estimated),
            ..Usage::default()
        });
    }

    pub fn json(&self) -> Value {
        json!({
            "count": self.count,
            "model_calls": self.usage.calls,
            "tokens": self.usage.tokens_json(),
            "cost_usd": self.usage.known_cost(),
        })
    }
}

/// What many tasks came to: counts by status and the usage summed, their subagents' included
/// (a run's summary, and `exec merge`'s of many results files).
#[derive(Debug, Default, Clone)]
pub struct Totals {
    /// Tasks ended, by status (in [`Status::ALL`]'s order).
    pub counts: [usize; Status::ALL.len()],
    pub usage: Usage,
    /// Subagents the tasks' delegations ran.
    pub subagents: u64,
    pub tool_calls: u64,
}

impl Totals {
    pub fn add(&mut self, status: Status, usage: &Usage, subagents: &Subagents, tool_calls: u64) {
        if let Some(slot) = Status::ALL.iter().position(|s| *s == status) {
            self.counts[slot] += 1;
        }
        self.usage.add(usage);
        self.usage.add(&subagents.usage);
        self.subagents += subagents.count;
        self.tool_calls += tool_calls;
    }

    /// Counts one result record (as [`Outcome::record`] writes it); `false` when it is not one.
    pub fn add_record(&mut self, r: &Value) -> bool {
        let Some(status) = r["status"].as_str().and_then(Status::from_name) else {
            return false;
        };
        let mut usage = r["tokens"].clone();
        if !usage.is_object() {
            return false;
        }
        usage["calls"] = r["model_calls"].clone();
        usage["cost_usd"] = r["cost_usd"].clone();
        usage["cost_status"] = r["cost_status"].clone();
        // The record's subagent figures are their sum: counted as one, then their number.
        let sub = &r["subagents"];
        let mut subagents = Subagents::default();
        let count = sub["count"].as_u64().unwrap_or(0);
        if count > 0 {
            subagents.add(&json!({
                "input_tokens": sub["tokens"]["input"],
                "output_tokens": sub["tokens"]["output"],
                "reasoning_tokens": sub["tokens"]["reasoning"],
                "api_calls": sub["model_calls"],
                "cost_usd": sub["cost_usd"],
            }));
            subagents.count = count;
        }
        let tool_calls = r["tool_calls"].as_u64().unwrap_or(0);
        self.add(status, &Usage::of(&usage), &subagents, tool_calls);
        true
    }

    pub fn ended(&self) -> usize {
        self.counts.iter().sum()
    }

    /// The summary's figures: counts by status name, calls, tokens, cost and how sure it is.
    pub fn json(&self) -> Value {
        let mut v = json!({
            "model_calls": self.usage.calls,
            "subagents": self.subagents,
            "tool_calls": self.tool_calls,
            "tokens": self.usage.tokens_json(),
            "cost_usd": self.usage.cost_usd,
            "cost_status": self.usage.cost_status.map(CostStatus::as_str),
        });
        for (status, n) in Status::ALL.iter().zip(self.counts) {
            v[status.name()] = json!(n);
        }
        v
    }
}

/// Everything a result record says about one task.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Status,
    pub stored_session_id: Option<String>,
    pub turns: u64,
    pub tool_calls: u64,
    pub usage: Usage,
    pub approvals: Approvals,
    /// What its subagents ran (not in `usage`, which is the task's own session's).
    pub subagents: Subagents,
    pub wall: Duration,
    /// Time at least one of the task's tools was running.
    pub tool_time: Duration,
    pub answer: Option<String>,
    pub error: Option<String>,
}

impl Outcome {
    /// Wall time in neither a model call nor a tool: the gateway's own work, plus waiting for
    /// the loop while other sessions' work ran.
    pub fn overhead(&self) -> Duration {
        self.wall
            .saturating_sub(Duration::from_millis(self.usage.model_ms))
            .saturating_sub(self.tool_time)
    }

    /// The result record (`task_id` when the task came from a tasks file).
    pub fn record(&self, task_id: Option<&str>) -> Value {
        let mut r = json!({
            "type": "exec.result",
            "status": self.status.name(),
            "exit_code": self.status.exit_code(),
            "session_id": self.stored_session_id,
            "turns": self.turns,
            "model_calls": self.usage.calls,
            "tool_calls": self.tool_calls,
            "tokens": self.usage.tokens_json(),
            "cost_usd": self.usage.known_cost(),
            "cost_status": self.usage.cost_status.map(CostStatus::as_str),
            "approvals": {
                "asked": self.approvals.asked,
                "approved": self.approvals.approved,
                "denied": self.approvals.denied,
            },
            "subagents": self.subagents.json(),
            "wall_ms": ms(self.wall),
            "model_ms": self.usage.model_ms,
            "tool_ms": ms(self.tool_time),
            "overhead_ms": ms(self.overhead()),
            "answer": self.answer,
        });
        if let Some(id) = task_id {
            r["task_id"] = json!(id);
        }
        if let Some(e) = &self.error {
            r["error"] = json!(e);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_since_counts_only_the_task() {
        let before = Usage::of(&json!({"input": 10, "output": 4, "calls": 1, "cost_usd": 0.5}));
        let after = Usage::of(
            &json!({"input": 25, "output": 9, "calls": 3, "cache_read": 7,
            "reasoning": 2, "model_ms": 40, "cost_usd": 0.75}),
        );
        let d = after.since(&before);
        assert_eq!(
            (d.input, d.output, d.calls, d.cache_read, d.reasoning),
            (15, 5, 2, 7, 2)
        );
        assert_eq!(d.cost_usd, Some(0.25));
        assert_eq!(Usage::of(&json!({"input": 3})).cost_usd, None);
    }

    #[test]
    fn a_record_says_how_sure_its_cost_is_and_an_unknown_one_is_no_figure() {
        let outcome = |usage: Value| Outcome {
            status: Status::Done,
            stored_session_id: None,
            turns: 1,
            tool_calls: 0,
            usage: Usage::of(&usage),
            approvals: Approvals::default(),
            subagents: Subagents::default(),
            wall: Duration::ZERO,
            tool_time: Duration::ZERO,
            answer: None,
            error: None,
        };
        let estimated = outcome(json!({"cost_usd": 0.0096, "cost_status": "estimated"}));
        let r = estimated.record(None);
        assert_eq!(
            (&r["cost_usd"], &r["cost_status"]),
            (&json!(0.0096), &json!("estimated"))
        );
        // Earlier calls were priced, the last one not: the sum would be short, so none is given.
        let unknown = outcome(json!({"cost_usd": 0.5, "cost_status": "unknown"}));
        let r = unknown.record(None);
        assert_eq!(
            (&r["cost_usd"], &r["cost_status"]),
            (&Value::Null, &json!("unknown"))
        );
        // A summary is as sure as its least sure task, and sums what is known.
        let mut all = Usage::default();
        for o in [
            &estimated,
            &unknown,
            &outcome(json!({"cost_usd": 0.25, "cost_status": "actual"})),
        ] {
            all.add(&o.usage);
        }
        assert_eq!(all.cost_status, Some(CostStatus::Unknown));
        assert!(
            all.cost_usd.is_some_and(|c| (c - 0.2596).abs() < 1e-12),
            "{all:?}"
        );
        let mut sure = Usage::default();
        sure.add(&Usage::of(
            &json!({"cost_usd": 0.1, "cost_status": "actual"}),
        ));
        sure.add(&Usage::of(
            &json!({"cost_usd": 0.1, "cost_status": "estimated"}),
        ));
        assert_eq!(sure.cost_status, Some(CostStatus::Estimated));
    }

    #[test]
    fn statuses_round_trip_and_have_distinct_exit_codes() {
        let mut codes: Vec<i32> = Status::ALL.iter().map(|s| s.exit_code()).collect();
        for s in Status::ALL {
            assert_eq!(Status::from_name(s.name()), Some(s));
        }
        codes.dedup();
        assert_eq!(codes.len(), Status::ALL.len());
        assert_eq!(Status::of_turn("complete"), Status::Done);
        assert_eq!(Status::of_turn("interrupted"), Status::Interrupted);
        assert_eq!(Status::of_turn("error"), Status::ModelError);
    }

    #[test]
    fn overhead_is_what_neither_the_model_nor_tools_took() {
        let o = Outcome {
            status: Status::Done,
            stored_session_id: None,
            turns: 1,
            tool_calls: 1,
            usage: Usage {
                model_ms: 30,
                ..Usage::default()
            },
            approvals: Approvals::default(),
            subagents: Subagents::default(),
            wall: Duration::from_millis(100),
            tool_time: Duration::from_millis(50),
            answer: None,
            error: None,
        };
        assert_eq!(o.overhead(), Duration::from_millis(20));
        let r = o.record(Some("t1"));
        assert_eq!(r["task_id"], "t1");
        assert_eq!(r["overhead_ms"], 20.0);
        assert!(r.get("error").is_none());
    }
}
