//! A stored session as an ATIF trajectory (Harbor's RFC 0001, Agent Trajectory Interchange
//! Format, `ATIF-v1.4`), built from Hermes' export of it ([`crate::store::Store::export`]): a
//! pure conversion, one step per message (system, user, agent), each assistant message's
//! tool calls and, as its observation, the tool messages that answer them.
//!
//! state.db keeps per message only the answer's output tokens (`token_count`): they are the
//! step's `completion_tokens`; the session's totals (prompt, completion, cached tokens and
//! cost, every model call's) are `final_metrics`. docs/DIFFERENCES.md says what is not kept.

use serde_json::{Map, Value, json};

use crate::model::logins::iso_time::iso;

/// The ATIF version written.
pub const SCHEMA_VERSION: &str = "ATIF-v1.4";
/// `agent.name`.
pub const AGENT_NAME: &str = "tui-gateway";

/// The trajectory of `session` (Hermes' export dict: its `sessions` columns and `messages`).
pub fn trajectory(session: &Value) -> Value {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let mut steps: Vec<Value> = Vec::new();
    let empty = Vec::new();
    let messages = session["messages"].as_array().unwrap_or(&empty);
    for m in messages {
        let mut step = Map::new();
        step.insert("step_id".into(), json!(steps.len() + 1));
        if let Some(t) = m["timestamp"]
            .as_f64()
            .filter(|t| t.is_finite() && *t >= 0.0)
        {
            step.insert("timestamp".into(), json!(iso(t)));
        }
        let message = content_text(&m["content"]);
        match text(m, "role").as_deref() {
            Some("tool") => {
                let call_id = text(m, "tool_call_id");
                let result = json!({"source_call_id": call_id, "content": message});
                if let Some(owner) = call_id.as_deref().and_then(|id| caller(&mut steps, id)) {
                    push_result(owner, result);
                    continue;
                }
                // An answer to no call of this session (its call was compacted away): a
                // system step carrying it, tied to no call.
                step.insert("source".into(), json!("system"));
                step.insert("message".into(), json!(""));
                let result = json!({"content": message});
                step.insert("observation".into(), json!({"results": [result]}));
                if let Some(name) = text(m, "tool_name") {
                    step.insert("extra".into(), json!({"tool_name": name}));
                }
            }
            Some("assistant") => {
                step.insert("source".into(), json!("agent"));
                step.insert("message".into(), json!(message));
                if let Some(r) = text(m, "reasoning").filter(|r| !r.is_empty()) {
                    step.insert("reasoning_content".into(), json!(r));
                }
                let calls: Vec<Value> = m["tool_calls"]
                    .as_array()
                    .map(|calls| calls.iter().map(tool_call).collect())
                    .unwrap_or_default();
                if !calls.is_empty() {
                    step.insert("tool_calls".into(), Value::Array(calls));
                }
                if let Some(n) = m["token_count"].as_i64().filter(|n| *n >= 0) {
                    step.insert("metrics".into(), json!({"completion_tokens": n}));
                }
                if let Some(reason) = text(m, "finish_reason") {
                    step.insert("extra".into(), json!({"finish_reason": reason}));
                }
            }
            Some("user") => {
                step.insert("source".into(), json!("user"));
                step.insert("message".into(), json!(message));
            }
            _ => {
                step.insert("source".into(), json!("system"));
                step.insert("message".into(), json!(message));
            }
        }
        steps.push(Value::Object(step));
    }
    if steps.is_empty() {
        // ATIF wants at least one step: an empty session says so in one.
        steps.push(json!({"step_id": 1, "source": "system", "message": "(no messages)"}));
    }
    let int = |key: &str| session[key].as_i64();
    let mut agent = json!({"name": AGENT_NAME, "version": env!("CARGO_PKG_VERSION")});
    if let Some(model) = text(session, "model") {
        agent["model_name"] = json!(model);
    }
    let mut final_metrics = json!({
        "total_prompt_tokens": int("input_tokens"),
        "total_completion_tokens": int("output_tokens"),
        "total_cached_tokens": int("cache_read_tokens"),
        "total_cost_usd": session["estimated_cost_usd"].as_f64(),
        "total_steps": steps.len(),
        "extra": {
            "api_call_count": int("api_call_count"),
            "tool_call_count": int("tool_call_count"),
            "cache_write_tokens": int("cache_write_tokens"),
            "reasoning_tokens": int("reasoning_tokens"),
            "actual_cost_usd": session["actual_cost_usd"].as_f64(),
            "cost_status": text(session, "cost_status"),
            "cost_source": text(session, "cost_source"),
        },
    });
    drop_nulls(&mut final_metrics);
    let mut extra = json!({
        "source": text(session, "source"),
        "title": text(session, "title"),
        "cwd": text(session, "cwd"),
        "parent_session_id": text(session, "parent_session_id"),
        "started_at": session["started_at"].as_f64().map(iso),
        "ended_at": session["ended_at"].as_f64().map(iso),
        "end_reason": text(session, "end_reason"),
    });
    drop_nulls(&mut extra);
    json!({
        "schema_version": SCHEMA_VERSION,
        "session_id": text(session, "id").unwrap_or_default(),
        "agent": agent,
        "steps": steps,
        "final_metrics": final_metrics,
        "extra": extra,
    })
}

/// The latest agent step that made call `id` (tool messages follow their calls).
fn caller<'s>(steps: &'s mut [Value], id: &str) -> Option<&'s mut Value> {
    steps.iter_mut().rev().find(|s| {
        s["tool_calls"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|c| c["tool_call_id"] == id))
    })
}

fn push_result(step: &mut Value, result: Value) {
    match step["observation"]["results"].as_array_mut() {
        Some(results) => results.push(result),
        None => step["observation"] = json!({"results": [result]}),
    }
}

/// An OpenAI-style call (`{id, function: {name, arguments}}`) as an ATIF tool call; arguments
/// that are not a JSON object are kept whole under `input`.
fn tool_call(call: &Value) -> Value {
    let function = &call["function"];
    let arguments = match &function["arguments"] {
        Value::String(s) if s.trim().is_empty() => json!({}),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(o)) => Value::Object(o),
            _ => json!({"input": s}),
        },
        Value::Object(o) => Value::Object(o.clone()),
        Value::Null => json!({}),
        other => json!({"input": other}),
    };
    json!({
        "tool_call_id": call["id"].as_str().unwrap_or(""),
        "function_name": function["name"].as_str().unwrap_or(""),
        "arguments": arguments,
    })
}

/// A message's content as text: a string as it is, parts' texts joined, anything else as JSON.
fn content_text(content: &Value) -> String {
    match content {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(parts) if parts.iter().all(|p| p["text"].is_string()) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// Optional fields are left out rather than written `null`.
fn drop_nulls(v: &mut Value) {
    if let Value::Object(map) = v {
        map.retain(|_, x| !x.is_null());
        for x in map.values_mut() {
            drop_nulls(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(messages: Value) -> Value {
        json!({"id": "s1", "source": "exec", "model": "m", "started_at": 1.5,
               "input_tokens": 30, "output_tokens": 7, "cache_read_tokens": 4,
               "estimated_cost_usd": null, "api_call_count": 2, "messages": messages})
    }

    #[test]
    fn calls_and_their_results_are_one_agent_step() {
        let t = trajectory(&session(json!([
            {"role": "user", "content": "list", "timestamp": 0.25},
            {"role": "assistant", "content": null, "token_count": 5, "finish_reason": "tool_calls",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "terminal", "arguments": "{\"command\":\"ls\"}"}},
                            {"id": "c2", "function": {"name": "x", "arguments": "[1]"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a b"},
            {"role": "tool", "tool_call_id": "c2", "content": "ok"},
            {"role": "tool", "tool_call_id": "gone", "tool_name": "t", "content": "late"},
            {"role": "assistant", "content": "done", "reasoning": "hmm", "token_count": 2},
        ])));
        assert_eq!(t["schema_version"], "ATIF-v1.4");
        assert_eq!(t["agent"]["name"], "tui-gateway");
        assert_eq!(t["agent"]["model_name"], "m");
        let steps = t["steps"].as_array().unwrap();
        let ids: Vec<i64> = steps
            .iter()
            .map(|s| s["step_id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids, [1, 2, 3, 4]);
        assert_eq!(steps[0]["timestamp"], "1970-01-01T00:00:00.250000+00:00");
        assert_eq!(steps[1]["source"], "agent");
        assert_eq!(steps[1]["message"], "");
        assert_eq!(
            steps[1]["tool_calls"][0]["arguments"],
            json!({"command": "ls"})
        );
        assert_eq!(
            steps[1]["tool_calls"][1]["arguments"],
            json!({"input": "[1]"})
        );
        assert_eq!(
            steps[1]["observation"]["results"],
            json!([{"source_call_id": "c1", "content": "a b"},
                   {"source_call_id": "c2", "content": "ok"}])
        );
        assert_eq!(steps[1]["metrics"], json!({"completion_tokens": 5}));
        assert_eq!(steps[2]["source"], "system");
        assert_eq!(
            steps[2]["observation"]["results"][0],
            json!({"content": "late"})
        );
        assert_eq!(steps[3]["reasoning_content"], "hmm");
        let f = &t["final_metrics"];
        assert_eq!(
            (f["total_prompt_tokens"].as_i64(), f["total_steps"].as_i64()),
            (Some(30), Some(4))
        );
        assert!(
            f.get("total_cost_usd").is_none(),
            "an unknown cost is left out"
        );
        assert_eq!(f["extra"]["api_call_count"], 2);
    }

    #[test]
    fn an_empty_session_still_has_a_step() {
        let t = trajectory(&session(json!([])));
        assert_eq!(t["steps"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            content_text(&json!([{"type": "text", "text": "a"}, {"text": "b"}])),
            "a\nb"
        );
    }
}
