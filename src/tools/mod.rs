//! Tools the model can call. (The terminal tool and its process supervision come next.)

use std::time::Instant;

use serde_json::json;

use crate::event_loop::Gateway;
use crate::model::ToolCall;
use crate::session::transcript::{Message, Role};
use crate::util;

/// Hermes' `messages.tool_calls` JSON for a list of calls (OpenAI shape).
pub fn tool_calls_json(calls: &[ToolCall]) -> String {
    let v: Vec<_> = calls
        .iter()
        .map(|c| {
            json!({"id": c.id, "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments}})
        })
        .collect();
    serde_json::Value::Array(v).to_string()
}

/// Run the calls of one model round, then continue the turn.
pub fn run_tool_calls(gw: &mut Gateway, rid: &str, calls: Vec<ToolCall>, now: Instant) {
    if let Some(s) = gw.sessions.get_mut(rid) {
        for c in calls {
            let mut m = Message::new(
                Role::Tool,
                Some(format!("tool {} is not available", c.name)),
                util::unix_now(),
            );
            m.tool_call_id = Some(c.id);
            m.tool_name = Some(c.name);
            s.append(m);
        }
    }
    gw.mark_dirty(rid);
    gw.end_turn(rid, "complete", None, now);
}

/// Stop the tools of a turn being interrupted; true if some are still dying.
pub fn interrupt_tools(_gw: &mut Gateway, _rid: &str, _now: Instant) -> bool {
    false
}

pub fn any_alive(_gw: &Gateway) -> bool {
    false
}

pub fn kill_all(_gw: &mut Gateway) {}
