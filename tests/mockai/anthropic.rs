//! Anthropic's Messages API for the mock: the streamed events an answer is made of (as the API
//! sends them: `event: <type>` then `data: <json>`), whole answers built from them, and the
//! reply that writes them (chunked, `Connection: close`: each answer on its own connection).
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};

use super::{Conn, Framing, Reply};

pub fn message_start(input: u64, cache_read: u64, cache_write: u64) -> Value {
    json!({"type": "message_start", "message": {
        "id": "msg_mock01", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input, "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read, "output_tokens": 1}}})
}

pub fn text_start(index: u64) -> Value {
    json!({"type": "content_block_start", "index": index,
           "content_block": {"type": "text", "text": ""}})
}

pub fn text_delta(index: u64, text: &str) -> Value {
    json!({"type": "content_block_delta", "index": index,
           "delta": {"type": "text_delta", "text": text}})
}

pub fn thinking_start(index: u64) -> Value {
    json!({"type": "content_block_start", "index": index,
           "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
}

pub fn thinking_delta(index: u64, thinking: &str) -> Value {
    json!({"type": "content_block_delta", "index": index,
           "delta": {"type": "thinking_delta", "thinking": thinking}})
}

pub fn signature_delta(index: u64, signature: &str) -> Value {
    json!({"type": "content_block_delta", "index": index,
           "delta": {"type": "signature_delta", "signature": signature}})
}

pub fn tool_use_start(index: u64, id: &str, name: &str) -> Value {
    json!({"type": "content_block_start", "index": index,
           "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})
}

pub fn input_delta(index: u64, partial_json: &str) -> Value {
    json!({"type": "content_block_delta", "index": index,
           "delta": {"type": "input_json_delta", "partial_json": partial_json}})
}

pub fn block_stop(index: u64) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

pub fn message_delta(stop_reason: &str, output: u64) -> Value {
    json!({"type": "message_delta",
           "delta": {"stop_reason": stop_reason, "stop_sequence": null},
           "usage": {"output_tokens": output}})
}

pub fn message_stop() -> Value {
    json!({"type": "message_stop"})
}

pub fn ping() -> Value {
    json!({"type": "ping"})
}

pub fn error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// An error body of a non-200 answer.
pub fn error_body(kind: &str, message: &str) -> String {
    error(kind, message).to_string()
}

/// Token counts of an answer: input (uncached), cache read, cache written, output.
#[derive(Clone, Copy)]
pub struct Usage(pub u64, pub u64, pub u64, pub u64);

/// A text answer in `pieces`, with a ping on the way.
pub fn text_answer(pieces: &[&str], u: Usage) -> Vec<Value> {
    let mut v = vec![message_start(u.0, u.1, u.2), text_start(0), ping()];
    v.extend(pieces.iter().map(|p| text_delta(0, p)));
    v.extend([
        block_stop(0),
        message_delta("end_turn", u.3),
        message_stop(),
    ]);
    v
}

/// The `terminal` tool asked to run `command`, its input JSON sent in pieces of `piece` bytes,
/// after a thought signed `signature` when one is given.
pub fn tool_answer(id: &str, command: &str, piece: usize, signature: Option<&str>) -> Vec<Value> {
    let mut v = vec![message_start(20, 0, 0)];
    let mut index = 0;
    if let Some(sig) = signature {
        v.extend(thinking(index, &["I should ", "list it."], sig));
        index += 1;
    }
    v.push(tool_use_start(index, id, "terminal"));
    let input = json!({ "command": command }).to_string();
    let bytes = input.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let mut end = (at + piece.max(1)).min(bytes.len());
        while !input.is_char_boundary(end) {
            end += 1;
        }
        v.push(input_delta(index, &input[at..end]));
        at = end;
    }
    v.extend([
        block_stop(index),
        message_delta("tool_use", 9),
        message_stop(),
    ]);
    v
}

/// A thinking block at `index`: its text in pieces, then its signature.
pub fn thinking(index: u64, pieces: &[&str], signature: &str) -> Vec<Value> {
    let mut v = vec![thinking_start(index)];
    v.extend(pieces.iter().map(|p| thinking_delta(index, p)));
    v.extend([signature_delta(index, signature), block_stop(index)]);
    v
}

/// The reply streaming `events` (each `event: <type>` and `data: <json>`), `pause` before each.
pub fn reply_paced(events: Vec<Value>, pause: Duration) -> Reply {
    Reply::Custom(Box::new(move |c: &mut Conn| {
        let close = [("Connection".to_string(), "close".to_string())];
        if !c.sse_head(Framing::Chunked, &close) {
            return;
        }
        for e in &events {
            if !pause.is_zero() && !c.pause(pause) {
                return;
            }
            let kind = e["type"].as_str().unwrap_or("message");
            if !c.write_body(format!("event: {kind}\ndata: {e}\n\n").as_bytes()) {
                return;
            }
        }
        c.finish_body();
    }))
}

pub fn reply(events: Vec<Value>) -> Reply {
    reply_paced(events, Duration::ZERO)
}
