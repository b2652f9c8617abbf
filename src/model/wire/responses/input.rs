//! The transcript as Responses input items: user and assistant messages, each answer's
//! replayed reasoning and message items (its `Replay`), its tool calls as `function_call`
//! items and their results as `function_call_output` items, joined by `call_id`.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::call_id;
use crate::transcript::{Message, Role};

/// Longest item id the API takes back (longer ones fail the whole request).
const ITEM_ID_MAX: usize = 64;

/// The input items of `transcript`. `github`: the backend that refuses replayed message ids;
/// `issuer`: this endpoint's issuer kind (reasoning sealed by another is left out).
pub fn items(transcript: &[Message], github: bool, issuer: &str) -> Vec<Value> {
    let mut items = Vec::with_capacity(transcript.len());
    let mut seen_reasoning = HashSet::new();
    for m in transcript {
        let text = m.content.as_deref().unwrap_or("");
        match m.role {
            Role::User => match crate::model::wire::parts::of(m) {
                Some(parts) => items.push(
                    json!({"role": "user", "content": crate::model::wire::parts::responses(&parts)}),
                ),
                None => items.push(json!({"role": "user", "content": text})),
            },
            // Notes within the conversation (a summary of earlier turns, the request for one):
            // the system prompt itself travels as `instructions`.
            Role::System => items.push(json!({"role": "developer", "content": text})),
            Role::Assistant => assistant(m, github, issuer, &mut seen_reasoning, &mut items),
            Role::Tool => {
                let raw = m.tool_call_id.as_deref().unwrap_or("").trim();
                let id = call_id::split(raw).0.unwrap_or(raw);
                if !id.is_empty() {
                    items.push(
                        json!({"type": "function_call_output", "call_id": id, "output": text}),
                    );
                }
            }
        }
    }
    items
}

/// An answer's items: its reasoning, its message (as the API gave it, else its text), its
/// tool calls.
fn assistant(
    m: &Message,
    github: bool,
    issuer: &str,
    seen_reasoning: &mut HashSet<String>,
    items: &mut Vec<Value>,
) {
    let mut reasoned = false;
    for r in &json_list(m.replay.codex_reasoning_items.as_deref()) {
        if let Some(item) = replayed_reasoning(r, issuer, seen_reasoning) {
            items.push(item);
            reasoned = true;
        }
    }
    let mut said = false;
    for raw in &json_list(m.replay.codex_message_items.as_deref()) {
        if let Some(item) = replayed_message(raw, github) {
            items.push(item);
            said = true;
        }
    }
    let text = m.content.as_deref().unwrap_or("");
    if !said && !text.trim().is_empty() {
        items.push(json!({"role": "assistant", "content": text}));
    } else if !said && reasoned {
        // A reasoning item must be followed by another item.
        items.push(json!({"role": "assistant", "content": ""}));
    }
    for call in &json_list(m.tool_calls.as_deref()) {
        let f = &call["function"];
        let Some(name) = f["name"].as_str().filter(|n| !n.trim().is_empty()) else {
            continue;
        };
        let raw_args = match &f["arguments"] {
            Value::String(s) => s.clone(),
            Value::Null => "{}".into(),
            other => other.to_string(),
        };
        let (embedded, item_id) = call_id::split(call["id"].as_str().unwrap_or(""));
        let id = call["call_id"]
            .as_str()
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .or(embedded)
            .map(str::to_string)
            .or_else(|| call_id::from_item_id(item_id?))
            .unwrap_or_else(|| call_id::deterministic(name, &raw_args, items.len()));
        let args = match raw_args.trim() {
            "" => "{}",
            a => a,
        };
        items
            .push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": args}));
    }
}

/// A stored reasoning item as the API takes it back: with its encrypted content, without the
/// id (nothing is stored server-side to look it up by) and without Hermes' issuer stamp.
fn replayed_reasoning(r: &Value, issuer: &str, seen: &mut HashSet<String>) -> Option<Value> {
    let obj = r.as_object()?;
    obj.get("encrypted_content")?
        .as_str()
        .filter(|e| !e.is_empty())?;
    if obj
        .get("_issuer_kind")
        .and_then(Value::as_str)
        .is_some_and(|kind| kind != issuer)
    {
        return None;
    }
    if let Some(id) = obj
        .get("id")
        .and_then(Value::as_str)
        .filter(|i| !i.is_empty())
        && !seen.insert(id.to_string())
    {
        return None;
    }
    let mut item: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| *k != "id" && *k != "_issuer_kind")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !item.get("summary").is_some_and(Value::is_array) {
        item.insert("summary".into(), json!([]));
    }
    Some(Value::Object(item))
}

/// A stored assistant message item, normalised: its text parts, status, phase, and its id
/// when the backend takes one back.
fn replayed_message(raw: &Value, github: bool) -> Option<Value> {
    if raw["type"] != "message" || raw["role"] != "assistant" {
        return None;
    }
    let parts: Vec<Value> = raw["content"]
        .as_array()?
        .iter()
        .filter(|p| matches!(p["type"].as_str(), Some("output_text" | "text")))
        .map(|p| json!({"type": "output_text", "text": p["text"].as_str().unwrap_or("")}))
        .collect();
    if parts.is_empty() {
        return None;
    }
    let mut item = json!({
        "type": "message",
        "role": "assistant",
        "status": message_status(&raw["status"]),
        "content": parts,
    });
    if let Some(id) = raw["id"].as_str().map(str::trim)
        && !github
        && !id.is_empty()
        && id.len() <= ITEM_ID_MAX
    {
        item["id"] = json!(id);
    }
    if let Some(phase) = raw["phase"]
        .as_str()
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        item["phase"] = json!(phase);
    }
    Some(item)
}

/// A message item's status as the API takes it back (`completed` unless it says otherwise).
pub fn message_status(v: &Value) -> &'static str {
    let s = v.as_str().unwrap_or("").trim().to_ascii_lowercase();
    match s.replace(['-', ' '], "_").as_str() {
        "incomplete" => "incomplete",
        "in_progress" => "in_progress",
        _ => "completed",
    }
}

/// The elements of a JSON array held as text (none when it is absent or not an array).
fn json_list(text: Option<&str>) -> Vec<Value> {
    match text.map(serde_json::from_str::<Value>) {
        Some(Ok(Value::Array(list))) => list,
        _ => Vec::new(),
    }
}
