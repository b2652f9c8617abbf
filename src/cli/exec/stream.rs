//! `--output-format stream-json`: a task's run as the JSON lines Claude Code's
//! `--output-format stream-json` prints, so an orchestrator that drives Claude Code (or Hermes)
//! that way reads tui-gateway unchanged: a `system`/`init` line when the task's session opens,
//! an `assistant` line for each stretch of text and each tool call (`tool_use`), a `user` line
//! with each tool's result (`tool_result`), and a `result` line when the task ends — also when
//! it was interrupted or timed out, which its `subtype` and `status` say.
//!
//! A pure translation of the gateway's events (docs/EXEC.md lists the lines; docs/DIFFERENCES.md
//! what differs from Claude Code's).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::record::{Outcome, Status};

/// What is being said in one task's session, by its runtime id.
struct Said {
    /// The stored session id: every line's `session_id`.
    stored: String,
    model: String,
    /// Text streamed since the last line.
    text: String,
}

pub struct Stream {
    live: HashMap<String, Said>,
    /// The gateway's `--max-turns`: a task stopped there ends `error_max_turns`.
    max_turns: u32,
}

impl Stream {
    pub fn new(max_turns: u32) -> Stream {
        Stream {
            live: HashMap::new(),
            max_turns,
        }
    }

    /// A task's session opened (`session.create`/`session.resume`'s result): its `init` line.
    pub fn opened(&mut self, result: &Value, permission_mode: &str) -> Option<Value> {
        let runtime = result["session_id"].as_str()?;
        let info = &result["info"];
        let stored = result["stored_session_id"].as_str().unwrap_or(runtime);
        let model = info["model"].as_str().unwrap_or("").to_string();
        let tools: Vec<Value> = match &info["tools"] {
            Value::Object(sets) => sets
                .values()
                .filter_map(Value::as_array)
                .flatten()
                .cloned()
                .collect(),
            Value::Array(names) => names.clone(),
            _ => Vec::new(),
        };
        let line = json!({
            "type": "system",
            "subtype": "init",
            "session_id": stored,
            "cwd": info["cwd"],
            "model": model,
            "tools": tools,
            "mcp_servers": info["mcp_servers"].as_array().cloned().unwrap_or_default(),
            "permissionMode": permission_mode,
            "apiKeySource": "none",
            "agent": {"name": crate::cli::atif::AGENT_NAME, "version": env!("CARGO_PKG_VERSION")},
        });
        self.live.insert(
            runtime.to_string(),
            Said {
                stored: stored.to_string(),
                model,
                text: String::new(),
            },
        );
        Some(line)
    }

    /// An event frame's `params`: the lines it completes (none for most).
    pub fn event(&mut self, params: &Value) -> Vec<Value> {
        let runtime = params["session_id"].as_str().unwrap_or("");
        let Some(said) = self.live.get_mut(runtime) else {
            return Vec::new();
        };
        let payload = &params["payload"];
        let mut lines = Vec::new();
        match params["type"].as_str().unwrap_or("") {
            "message.delta" => {
                if let Some(t) = payload["text"].as_str() {
                    said.text.push_str(t);
                }
            }
            "tool.start" | "message.complete" => lines.extend(said.flush()),
            "tool.complete" => {
                lines.extend(said.flush());
                let id = payload["tool_id"].as_str().unwrap_or("");
                let input = match &payload["args"] {
                    Value::Object(o) => Value::Object(o.clone()),
                    _ => json!({}),
                };
                lines.push(said.assistant(json!({
                    "type": "tool_use", "id": id,
                    "name": payload["name"].as_str().unwrap_or(""), "input": input,
                })));
                let content = match &payload["result"] {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                lines.push(json!({
                    "type": "user",
                    "message": {"role": "user", "content": [{
                        "type": "tool_result", "tool_use_id": id, "content": content,
                        "is_error": !payload["error"].is_null(),
                    }]},
                    "parent_tool_use_id": null,
                    "session_id": said.stored,
                }));
            }
            _ => {}
        }
        lines
    }

    /// A task ended: its `result` line (`task_id` for a tasks file's task).
    pub fn result(&mut self, outcome: &Outcome, task_id: Option<&str>) -> Value {
        let session = outcome.stored_session_id.clone();
        self.live
            .retain(|_, s| Some(s.stored.as_str()) != session.as_deref());
        let subtype = match outcome.status {
            Status::Done => "success",
            Status::ModelError if outcome.usage.calls >= u64::from(self.max_turns) => {
                "error_max_turns"
            }
            _ => "error_during_execution",
        };
        let u = &outcome.usage;
        let mut line = json!({
            "type": "result",
            "subtype": subtype,
            "is_error": outcome.status != Status::Done,
            "duration_ms": outcome.wall.as_millis() as u64,
            "duration_api_ms": u.model_ms,
            "num_turns": u.calls,
            "result": outcome.answer.as_deref().unwrap_or(""),
            "session_id": session,
            "total_cost_usd": u.known_cost(),
            "usage": {
                "input_tokens": u.input,
                "output_tokens": u.output,
                "cache_creation_input_tokens": u.cache_write,
                "cache_read_input_tokens": u.cache_read,
            },
            "permission_denials": [],
            "status": outcome.status.name(),
            "exit_code": outcome.status.exit_code(),
        });
        if let Some(id) = task_id {
            line["task_id"] = json!(id);
        }
        if let Some(e) = &outcome.error {
            line["error"] = json!(e);
        }
        line
    }
}

impl Said {
    /// The text streamed since the last line, as an `assistant` line (none when there is none).
    fn flush(&mut self) -> Option<Value> {
        if self.text.is_empty() {
            return None;
        }
        let text = std::mem::take(&mut self.text);
        Some(self.assistant(json!({"type": "text", "text": text})))
    }

    fn assistant(&self, block: Value) -> Value {
        json!({
            "type": "assistant",
            "message": {"type": "message", "role": "assistant", "model": self.model,
                        "content": [block]},
            "parent_tool_use_id": null,
            "session_id": self.stored,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::exec::record::{Approvals, Subagents, Usage};
    use std::time::Duration;

    fn event(kind: &str, payload: Value) -> Value {
        json!({"type": kind, "session_id": "r1", "payload": payload, "seq": 1})
    }

    #[test]
    fn a_run_reads_as_claude_codes_lines() {
        let mut s = Stream::new(3);
        let opened = json!({"session_id": "r1", "stored_session_id": "s1",
            "info": {"model": "m", "cwd": "/w", "tools": {"terminal": ["terminal"], "file": ["read_file"]}}});
        let init = s.opened(&opened, "default").unwrap();
        assert_eq!(
            (&init["type"], &init["subtype"], &init["session_id"]),
            (&json!("system"), &json!("init"), &json!("s1"))
        );
        assert_eq!(init["tools"].as_array().map(Vec::len), Some(2));
        let mut lines = Vec::new();
        for (kind, payload) in [
            ("message.delta", json!({"text": "let me "})),
            ("message.delta", json!({"text": "look"})),
            ("tool.start", json!({"tool_id": "c1", "name": "terminal"})),
            (
                "tool.complete",
                json!({"tool_id": "c1", "name": "terminal", "args": {"command": "ls"}, "result": {"output": "a"}}),
            ),
            ("message.delta", json!({"text": "done"})),
            (
                "message.complete",
                json!({"text": "let me lookdone", "status": "complete"}),
            ),
        ] {
            lines.extend(s.event(&event(kind, payload)));
        }
        let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["assistant", "assistant", "user", "assistant"]);
        assert_eq!(
            lines[0]["message"]["content"][0],
            json!({"type": "text", "text": "let me look"})
        );
        assert_eq!(
            lines[1]["message"]["content"][0]["input"],
            json!({"command": "ls"})
        );
        assert_eq!(
            lines[2]["message"]["content"][0]["content"],
            "{\"output\":\"a\"}"
        );
        assert_eq!(lines[2]["message"]["content"][0]["is_error"], false);
        assert!(
            s.event(
                &json!({"type": "message.delta", "session_id": "other", "payload": {"text": "x"}})
            )
            .is_empty()
        );
        let outcome = |status, calls| Outcome {
            status,
            stored_session_id: Some("s1".into()),
            turns: 1,
            tool_calls: 1,
            usage: Usage {
                calls,
                ..Usage::default()
            },
            approvals: Approvals::default(),
            subagents: Subagents::default(),
            wall: Duration::from_millis(5),
            tool_time: Duration::ZERO,
            answer: Some("done".into()),
            error: None,
        };
        let r = s.result(&outcome(Status::Done, 2), Some("t1"));
        assert_eq!(
            (&r["subtype"], &r["is_error"], &r["task_id"]),
            (&json!("success"), &json!(false), &json!("t1"))
        );
        assert!(s.live.is_empty(), "the session is forgotten");
        assert_eq!(
            s.result(&outcome(Status::ModelError, 3), None)["subtype"],
            "error_max_turns"
        );
        let r = s.result(&outcome(Status::Interrupted, 1), None);
        assert_eq!(
            (&r["subtype"], &r["status"]),
            (&json!("error_during_execution"), &json!("interrupted"))
        );
    }
}
