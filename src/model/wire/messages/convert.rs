//! A transcript as the Messages API takes it: the system prompt apart, tool calls as `tool_use`
//! blocks and their results as `tool_result` blocks in the next user message, roles
//! alternating, no empty content, the thinking blocks the endpoint accepts back, and the cache
//! breakpoints the policy placed.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::model::caching::{self, Layout};
use crate::transcript::{Message, Role};

/// Where the request goes, as far as the conversion cares.
#[derive(Debug, Clone, Copy, Default)]
pub struct Target {
    /// Anthropic's own API: signed thinking of the latest answer goes back.
    pub native: bool,
    /// Kimi or DeepSeek: unsigned thinking goes back, signed never, and every answer carries
    /// some.
    pub unsigned_thinking: bool,
    /// A Claude subscription's OAuth token on Anthropic's API (Claude Code's conventions).
    pub oauth: bool,
    /// Where cache breakpoints go (`None`: no caching).
    pub cache: Option<Layout>,
}

/// Claude Code's identity, which OAuth requests must open their system prompt with.
pub const OAUTH_IDENTITY: &str = "You are Claude Code, Anthropic's official CLI for Claude.";

/// The `system` field: `None` when there is nothing to say.
pub fn system(parts: &[&str], target: Target) -> Option<Value> {
    let text = parts
        .iter()
        .map(|p| p.trim_end())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    let marked = target.cache.is_some() && !text.is_empty();
    if !target.oauth && !marked {
        return (!text.is_empty()).then_some(Value::String(text));
    }
    let mut blocks = Vec::new();
    if target.oauth {
        blocks.push(json!({"type": "text", "text": OAUTH_IDENTITY}));
    }
    if !text.is_empty() {
        let text = if target.oauth {
            oauth_wording(&text)
        } else {
            text
        };
        let mut block = json!({"type": "text", "text": text});
        if marked {
            block["cache_control"] = caching::marker();
        }
        blocks.push(block);
    }
    Some(Value::Array(blocks))
}

/// The product names an OAuth request's system prompt must not carry.
fn oauth_wording(text: &str) -> String {
    text.replace("Hermes Agent", "Claude Code")
        .replace("Hermes agent", "Claude Code")
        .replace("hermes-agent", "claude-code")
        .replace("Nous Research", "Anthropic")
}

/// A tool's name on an OAuth request (Claude Code's `mcp__` convention).
pub fn oauth_tool_name(name: &str) -> String {
    if name.starts_with("mcp__") {
        name.to_string()
    } else if let Some(rest) = name.strip_prefix("mcp_") {
        format!("mcp__{rest}")
    } else {
        format!("mcp__{name}")
    }
}

/// The tools in Anthropic's shape (name, description, input schema), a repeated name dropped.
pub fn tools(openai: &[Value], oauth: bool) -> Vec<Value> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for t in openai {
        let f = t.get("function").unwrap_or(t);
        let name = f.get("name").and_then(Value::as_str).unwrap_or("");
        if !name.is_empty() && !seen.insert(name) {
            continue;
        }
        let name = if oauth {
            oauth_tool_name(name)
        } else {
            name.to_string()
        };
        out.push(json!({
            "name": name,
            "description": f.get("description").and_then(Value::as_str).unwrap_or(""),
            "input_schema": input_schema(f.get("parameters")),
        }));
    }
    out
}

/// A JSON schema the API's validator takes: an object at the top without a union there, and
/// optional fields as their type (not `anyOf` with `null`).
fn input_schema(schema: Option<&Value>) -> Value {
    let Some(Value::Object(schema)) =
        schema.filter(|s| s.as_object().is_some_and(|o| !o.is_empty()))
    else {
        return json!({"type": "object", "properties": {}});
    };
    let Value::Object(mut schema) = without_null_unions(&Value::Object(schema.clone())) else {
        return json!({"type": "object", "properties": {}});
    };
    let unions = ["oneOf", "allOf", "anyOf"];
    if unions.iter().any(|k| schema.contains_key(*k)) {
        for k in unions {
            schema.remove(k);
        }
        schema
            .entry("type")
            .or_insert_with(|| Value::String("object".into()));
    }
    if schema.get("type").and_then(Value::as_str) == Some("object")
        && !schema.get("properties").is_some_and(Value::is_object)
    {
        schema.insert("properties".into(), json!({}));
    }
    Value::Object(schema)
}

/// `anyOf`/`oneOf` of one type and `null` collapsed to that type, keeping the description and
/// the other keys beside it, all the way down.
fn without_null_unions(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(without_null_unions).collect()),
        Value::Object(o) => {
            let mut out: Map<String, Value> = o
                .iter()
                .map(|(k, v)| (k.clone(), without_null_unions(v)))
                .collect();
            for key in ["anyOf", "oneOf"] {
                let Some(Value::Array(branches)) = out.get(key) else {
                    continue;
                };
                let is_null = |b: &Value| b.get("type").and_then(Value::as_str) == Some("null");
                let kept: Vec<&Value> = branches.iter().filter(|b| !is_null(b)).collect();
                if kept.len() == 1 && branches.len() == 2 {
                    let kept = kept[0].clone();
                    out.remove(key);
                    if let Value::Object(inner) = kept {
                        for (k, v) in inner {
                            out.entry(k).or_insert(v);
                        }
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// A tool call id the API accepts (`[a-zA-Z0-9_-]`, never empty).
pub fn tool_id(id: &str) -> String {
    if id.is_empty() {
        return "tool_0".into();
    }
    id.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
            _ => '_',
        })
        .collect()
}

/// One message on the way to the request. User content stays a string while it can.
struct Turn {
    assistant: bool,
    content: Content,
    /// A tool call of this answer was removed: its thinking signatures are void.
    signature_void: bool,
}

enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

impl Content {
    fn blocks(&mut self) -> &mut Vec<Value> {
        if let Content::Text(t) = self {
            *self = Content::Blocks(vec![json!({"type": "text", "text": std::mem::take(t)})]);
        }
        match self {
            Content::Blocks(b) => b,
            Content::Text(_) => unreachable!("made blocks above"),
        }
    }

    fn into_value(self) -> Value {
        match self {
            Content::Text(t) => Value::String(t),
            Content::Blocks(b) => Value::Array(b),
        }
    }
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn type_of(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or("")
}

fn is_thinking(b: &Value) -> bool {
    matches!(type_of(b), "thinking" | "redacted_thinking")
}

/// The messages of a transcript (system rows aside: they go in `system`).
pub fn messages(transcript: &[Message], target: Target) -> Vec<Value> {
    let marked: HashSet<usize> = target
        .cache
        .map(|layout| caching::marked(transcript, layout).into_iter().collect())
        .unwrap_or_default();
    let mut turns: Vec<Turn> = Vec::with_capacity(transcript.len());
    for (i, m) in transcript.iter().enumerate() {
        let mark = marked.contains(&i);
        match m.role {
            Role::System => {}
            Role::User => turns.push(user(m, mark)),
            Role::Assistant => turns.push(assistant(m, mark, target)),
            Role::Tool => tool_result(&mut turns, m, mark),
        }
    }
    drop_orphans(&mut turns);
    let mut turns = merge_roles(turns);
    replay_thinking(&mut turns, target);
    turns
        .into_iter()
        .map(|t| {
            let role = if t.assistant { "assistant" } else { "user" };
            json!({"role": role, "content": t.content.into_value()})
        })
        .collect()
}

fn user(m: &Message, mark: bool) -> Turn {
    if let Some(parts) = crate::model::wire::parts::of(m) {
        let mut blocks = crate::model::wire::parts::anthropic(&parts);
        if let Some(last) = blocks.last_mut().filter(|_| mark) {
            last["cache_control"] = caching::marker();
        }
        if !blocks.is_empty() {
            return Turn {
                assistant: false,
                content: Content::Blocks(blocks),
                signature_void: false,
            };
        }
    }
    let text = m
        .content
        .as_deref()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or("(empty message)");
    let content = if mark {
        let mut b = text_block(text);
        b["cache_control"] = caching::marker();
        Content::Blocks(vec![b])
    } else {
        Content::Text(text.to_string())
    };
    Turn {
        assistant: false,
        content,
        signature_void: false,
    }
}

/// The thinking blocks kept with an answer (Hermes' `reasoning_details`), each with only the
/// fields the API takes back.
pub fn kept_thinking(reasoning_details: Option<&str>) -> Vec<Value> {
    let Some(Ok(Value::Array(details))) = reasoning_details.map(serde_json::from_str::<Value>)
    else {
        return Vec::new();
    };
    details.iter().filter_map(clean_thinking).collect()
}

fn clean_thinking(d: &Value) -> Option<Value> {
    let nonempty = |k: &str| d.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    match type_of(d) {
        "thinking" => {
            let mut b = json!({
                "type": "thinking",
                "thinking": d.get("thinking").and_then(Value::as_str).unwrap_or(""),
            });
            if let Some(sig) = nonempty("signature") {
                b["signature"] = json!(sig);
            }
            Some(b)
        }
        "redacted_thinking" => {
            nonempty("data").map(|data| json!({"type": "redacted_thinking", "data": data}))
        }
        _ => None,
    }
}

fn assistant(m: &Message, mark: bool, target: Target) -> Turn {
    let mut blocks = kept_thinking(m.replay.reasoning_details.as_deref());
    let text = m.content.as_deref().filter(|t| !t.is_empty());
    if let Some(text) = text {
        blocks.push(text_block(text));
    }
    let calls = m
        .tool_calls
        .as_deref()
        .and_then(|t| serde_json::from_str::<Value>(t).ok());
    for call in calls
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = call.get("function").unwrap_or(&Value::Null);
        let input = f
            .get("arguments")
            .and_then(Value::as_str)
            .and_then(|a| serde_json::from_str::<Value>(a).ok())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        let name = f.get("name").and_then(Value::as_str).unwrap_or("");
        blocks.push(json!({
            "type": "tool_use",
            "id": tool_id(call.get("id").and_then(Value::as_str).unwrap_or("")),
            "name": if target.oauth { oauth_tool_name(name) } else { name.to_string() },
            "input": input,
        }));
    }
    if mark {
        // On the text when there is some, else on the last call (as Hermes places it).
        let at = match text {
            Some(_) => blocks.iter().position(|b| type_of(b) == "text"),
            None => blocks.iter().rposition(|b| type_of(b) == "tool_use"),
        };
        if let Some(b) = at.and_then(|i| blocks.get_mut(i)) {
            b["cache_control"] = caching::marker();
        }
    }
    // Kimi and DeepSeek want every answer's reasoning back, unsigned.
    if target.unsigned_thinking && !blocks.iter().any(is_thinking) {
        let reasoning = m
            .reasoning
            .as_deref()
            .filter(|r| !r.is_empty())
            .unwrap_or(" ");
        blocks.insert(0, json!({"type": "thinking", "thinking": reasoning}));
    }
    if blocks.is_empty() {
        blocks.push(text_block("(empty)"));
    }
    Turn {
        assistant: true,
        content: Content::Blocks(blocks),
        signature_void: false,
    }
}

fn tool_result(turns: &mut Vec<Turn>, m: &Message, mark: bool) {
    let mut block = json!({
        "type": "tool_result",
        "tool_use_id": tool_id(m.tool_call_id.as_deref().unwrap_or("")),
        "content": m.content.as_deref().filter(|c| !c.is_empty()).unwrap_or("(no output)"),
    });
    if mark {
        block["cache_control"] = caching::marker();
    }
    // Results of one answer's calls go together, in one user message.
    if let Some(Turn {
        assistant: false,
        content: Content::Blocks(blocks),
        ..
    }) = turns.last_mut()
        && blocks.first().is_some_and(|b| type_of(b) == "tool_result")
    {
        blocks.push(block);
        return;
    }
    turns.push(Turn {
        assistant: false,
        content: Content::Blocks(vec![block]),
        signature_void: false,
    });
}

/// A call without its result right after it is dropped (the API refuses the pair otherwise,
/// after an interrupted or compacted turn), then any result whose call is gone.
fn drop_orphans(turns: &mut [Turn]) {
    for i in 0..turns.len() {
        if !turns[i].assistant {
            continue;
        }
        let answered: HashSet<String> = match turns.get(i + 1) {
            Some(Turn {
                assistant: false,
                content: Content::Blocks(next),
                ..
            }) => next
                .iter()
                .filter(|b| type_of(b) == "tool_result")
                .filter_map(|b| b.get("tool_use_id").and_then(Value::as_str))
                .map(str::to_string)
                .collect(),
            _ => HashSet::new(),
        };
        let t = &mut turns[i];
        let blocks = t.content.blocks();
        let before = blocks.len();
        blocks.retain(|b| {
            type_of(b) != "tool_use"
                || b.get("id")
                    .and_then(Value::as_str)
                    .is_some_and(|id| answered.contains(id))
        });
        if blocks.len() != before {
            t.signature_void = blocks.iter().any(is_thinking);
            if blocks.is_empty() {
                blocks.push(text_block("(tool call removed)"));
            }
        }
    }
    let calls: HashSet<String> = turns
        .iter()
        .filter(|t| t.assistant)
        .filter_map(|t| match &t.content {
            Content::Blocks(b) => Some(b),
            Content::Text(_) => None,
        })
        .flatten()
        .filter(|b| type_of(b) == "tool_use")
        .filter_map(|b| b.get("id").and_then(Value::as_str).map(str::to_string))
        .collect();
    for t in turns.iter_mut().filter(|t| !t.assistant) {
        let Content::Blocks(blocks) = &mut t.content else {
            continue;
        };
        let before = blocks.len();
        blocks.retain(|b| {
            type_of(b) != "tool_result"
                || b.get("tool_use_id")
                    .and_then(Value::as_str)
                    .is_some_and(|id| calls.contains(id))
        });
        if blocks.len() != before && blocks.is_empty() {
            blocks.push(text_block("(tool result removed)"));
        }
    }
}

/// Roles alternate: a message of the same role as the one before joins it (the second
/// answer's thinking dropped, its signature being over another turn).
fn merge_roles(turns: Vec<Turn>) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::with_capacity(turns.len());
    for mut t in turns {
        let Some(prev) = out.last_mut().filter(|p| p.assistant == t.assistant) else {
            out.push(t);
            continue;
        };
        if t.assistant {
            t.content.blocks().retain(|b| !is_thinking(b));
            prev.signature_void |= t.signature_void;
        }
        match (&mut prev.content, t.content) {
            (Content::Text(a), Content::Text(b)) => {
                a.push('\n');
                a.push_str(&b);
            }
            (_, mut second) => {
                let more = std::mem::take(second.blocks());
                prev.content.blocks().extend(more);
            }
        }
    }
    out
}

/// Which thinking goes back (Hermes' rules): Kimi and DeepSeek take only unsigned thinking;
/// other proxies none; Anthropic the signed thinking of the latest answer only (its unsigned
/// thinking as text, all of it as text when a call of it was removed).
fn replay_thinking(turns: &mut [Turn], target: Target) {
    let latest = turns.iter().rposition(|t| t.assistant);
    for (i, t) in turns.iter_mut().enumerate().filter(|(_, t)| t.assistant) {
        let void = t.signature_void;
        let blocks = t.content.blocks();
        let (kept, placeholder): (Vec<Value>, &str) = if target.unsigned_thinking {
            let signed = |b: &Value| {
                ["signature", "data"].iter().any(|k| {
                    b.get(k)
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty())
                })
            };
            (
                blocks
                    .drain(..)
                    .filter(|b| !is_thinking(b) || !signed(b))
                    .collect(),
                "(empty)",
            )
        } else if !target.native || Some(i) != latest {
            (
                blocks.drain(..).filter(|b| !is_thinking(b)).collect(),
                "(thinking elided)",
            )
        } else {
            let kept = blocks
                .drain(..)
                .filter_map(|b| latest_thinking(b, void))
                .collect();
            (kept, "(empty)")
        };
        *blocks = kept;
        for b in blocks.iter_mut().filter(|b| is_thinking(b)) {
            if let Some(o) = b.as_object_mut() {
                o.remove("cache_control");
            }
        }
        if blocks.is_empty() {
            blocks.push(text_block(placeholder));
        }
    }
}

/// A block of Anthropic's latest answer: signed thinking as it is, other thinking as text.
fn latest_thinking(b: Value, signature_void: bool) -> Option<Value> {
    if !is_thinking(&b) {
        return Some(b);
    }
    let field = |k: &str| b.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let as_text = || field("thinking").map(text_block);
    if signature_void {
        return as_text();
    }
    match type_of(&b) {
        "redacted_thinking" => field("data").is_some().then_some(b.clone()),
        _ if field("signature").is_some() => Some(b.clone()),
        _ => as_text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, content: Option<&str>) -> Message {
        Message::new(role, content.map(str::to_string), 0.0)
    }

    fn call(id: &str, command: &str) -> Message {
        let mut m = msg(Role::Assistant, None);
        let args = json!({ "command": command }).to_string();
        m.tool_calls = Some(
            json!([{"id": id, "type": "function",
                    "function": {"name": "terminal", "arguments": args}}])
            .to_string(),
        );
        m
    }

    fn result(id: &str, out: &str) -> Message {
        let mut m = msg(Role::Tool, Some(out));
        m.tool_call_id = Some(id.into());
        m
    }

    fn signed(thinking: &str, sig: &str) -> String {
        json!([{"type": "thinking", "thinking": thinking, "signature": sig}]).to_string()
    }

    const NATIVE: Target = Target {
        native: true,
        unsigned_thinking: false,
        oauth: false,
        cache: None,
    };

    #[test]
    fn a_tool_round_trip_becomes_tool_use_and_a_merged_tool_result() {
        let mut asked = call("call.1", "ls");
        asked.content = Some("Let me look.".into());
        let mut two = call("b", "pwd");
        two.tool_calls = Some(
            json!([
                {"id": "a", "function": {"name": "terminal", "arguments": "{\"command\":\"ls\"}"}},
                {"id": "b", "function": {"name": "terminal", "arguments": "not json"}},
            ])
            .to_string(),
        );
        let t = [
            msg(Role::User, Some("list it")),
            asked,
            result("call.1", "a.txt\nb.txt"),
            two,
            result("a", "x"),
            result("b", ""),
        ];
        let out = messages(&t, NATIVE);
        assert_eq!(out.len(), 5, "{out:#?}");
        assert_eq!(out[0], json!({"role": "user", "content": "list it"}));
        assert_eq!(
            out[1]["content"],
            json!([
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "call_1", "name": "terminal", "input": {"command": "ls"}},
            ])
        );
        assert_eq!(
            out[2]["content"],
            json!([{"type": "tool_result", "tool_use_id": "call_1", "content": "a.txt\nb.txt"}])
        );
        assert_eq!(
            out[3]["content"][1]["input"],
            json!({}),
            "bad arguments: an empty input"
        );
        let results = out[4]["content"].as_array().unwrap();
        assert_eq!(results.len(), 2, "both results in one user message");
        assert_eq!(results[1]["content"], "(no output)");
    }

    #[test]
    fn empty_messages_and_consecutive_roles() {
        let t = [
            msg(Role::User, Some("  ")),
            msg(Role::User, Some("again")),
            msg(Role::Assistant, None),
            msg(Role::Assistant, Some("two")),
        ];
        let out = messages(&t, NATIVE);
        assert_eq!(out.len(), 2, "{out:#?}");
        assert_eq!(out[0]["content"], "(empty message)\nagain");
        assert_eq!(
            out[1]["content"],
            json!([{"type": "text", "text": "(empty)"}, {"type": "text", "text": "two"}])
        );
    }

    #[test]
    fn calls_without_results_and_results_without_calls_are_dropped() {
        // An interrupted turn: the call never got its result; later a stray result.
        let t = [
            msg(Role::User, Some("go")),
            call("c1", "sleep 100"),
            msg(Role::User, Some("stop that")),
            result("ghost", "?"),
        ];
        let out = messages(&t, NATIVE);
        assert_eq!(
            out[1]["content"],
            json!([{"type": "text", "text": "(tool call removed)"}])
        );
        assert_eq!(
            out[2]["content"],
            json!([{"type": "text", "text": "stop that"}, {"type": "text", "text": "(tool result removed)"}])
        );
    }

    #[test]
    fn anthropic_gets_back_the_signed_thinking_of_the_latest_answer_only() {
        let mut first = call("c1", "ls");
        first.replay.reasoning_details = Some(signed("old plan", "SIG1"));
        let mut latest = call("c2", "pwd");
        latest.replay.reasoning_details = Some(
            json!([
                {"type": "thinking", "thinking": "new plan", "signature": "SIG2", "extra": 1},
                {"type": "redacted_thinking", "data": "ENC"},
                {"type": "thinking", "thinking": "unsigned"},
                {"type": "reasoning.text", "text": "another API's"},
            ])
            .to_string(),
        );
        let t = [
            msg(Role::User, Some("q")),
            first,
            result("c1", "a"),
            latest,
            result("c2", "/"),
        ];
        let out = messages(&t, NATIVE);
        assert_eq!(
            out[1]["content"][0]["type"], "tool_use",
            "older thinking elided"
        );
        assert_eq!(
            out[3]["content"],
            json!([
                {"type": "thinking", "thinking": "new plan", "signature": "SIG2"},
                {"type": "redacted_thinking", "data": "ENC"},
                {"type": "text", "text": "unsigned"},
                {"type": "tool_use", "id": "c2", "name": "terminal", "input": {"command": "pwd"}},
            ])
        );
        // A proxy takes none back.
        let proxy = Target {
            native: false,
            ..NATIVE
        };
        let out = messages(&t, proxy);
        assert!(!out[3].to_string().contains("thinking\""), "{}", out[3]);
        // Kimi takes the unsigned only, and every answer carries some.
        let kimi = Target {
            native: false,
            unsigned_thinking: true,
            ..NATIVE
        };
        let out = messages(&t, kimi);
        assert_eq!(out[1]["content"][0]["type"], "tool_use", "signed: dropped");
        assert_eq!(
            out[3]["content"][0],
            json!({"type": "thinking", "thinking": "unsigned"})
        );
        let mut reasoned = call("c1", "ls");
        reasoned.reasoning = Some("why".into());
        let t = [
            msg(Role::User, Some("q")),
            reasoned,
            result("c1", "a"),
            msg(Role::Assistant, Some("ok")),
        ];
        let out = messages(&t, kimi);
        assert_eq!(
            out[1]["content"][0],
            json!({"type": "thinking", "thinking": "why"})
        );
        assert_eq!(
            out[3]["content"][0],
            json!({"type": "thinking", "thinking": " "})
        );
    }

    #[test]
    fn a_removed_call_voids_the_latest_answers_signatures() {
        let mut latest = call("c1", "ls");
        latest.replay.reasoning_details = Some(signed("plan", "SIG"));
        let t = [msg(Role::User, Some("q")), latest];
        let out = messages(&t, NATIVE);
        assert_eq!(out[1]["content"], json!([{"type": "text", "text": "plan"}]));
    }

    #[test]
    fn breakpoints_on_the_last_three_messages_where_hermes_puts_them() {
        let mut asked = call("c1", "ls");
        asked.content = Some("Looking.".into());
        let t = [
            msg(Role::System, Some("summary")),
            msg(Role::User, Some("first")),
            msg(Role::Assistant, Some("ok")),
            msg(Role::User, Some("list")),
            asked,
            result("c1", "a.txt"),
        ];
        let cached = Target {
            cache: Some(Layout::Native),
            ..NATIVE
        };
        let out = messages(&t, cached);
        let marked: Vec<String> = out
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b.get("cache_control").is_some())
            .map(|b| {
                b["type"].as_str().unwrap().to_string()
                    + ":"
                    + b.get("text")
                        .or(b.get("content"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
            })
            .collect();
        assert_eq!(
            marked,
            ["text:list", "text:Looking.", "tool_result:a.txt"],
            "{out:#?}"
        );
        assert_eq!(
            out[0]["content"], "first",
            "an unmarked user message stays a string"
        );
        // A bare call carries its marker on the call.
        let t = [
            msg(Role::User, Some("q")),
            call("c1", "ls"),
            result("c1", "a"),
        ];
        let out = messages(&t, cached);
        assert_eq!(out[1]["content"][0]["cache_control"], caching::marker());
        assert_eq!(out[0]["content"][0]["cache_control"], caching::marker());
    }

    #[test]
    fn the_system_prompt_is_a_string_or_marked_blocks() {
        assert_eq!(
            system(&["Be brief.", "summary"], NATIVE),
            Some(json!("Be brief.\n\nsummary"))
        );
        assert_eq!(system(&[""], NATIVE), None);
        let cached = Target {
            cache: Some(Layout::Native),
            ..NATIVE
        };
        assert_eq!(
            system(&["Be brief."], cached),
            Some(
                json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
            )
        );
        let oauth = Target {
            oauth: true,
            ..cached
        };
        assert_eq!(
            system(&["I am Hermes Agent by Nous Research."], oauth),
            Some(json!([
                {"type": "text", "text": OAUTH_IDENTITY},
                {"type": "text", "text": "I am Claude Code by Anthropic.", "cache_control": {"type": "ephemeral"}},
            ]))
        );
    }

    #[test]
    fn tools_in_anthropics_shape() {
        let openai = [
            json!({"type": "function", "function": {"name": "terminal", "description": "Run",
                "parameters": {"type": "object", "properties": {
                    "timeout": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "s"}},
                    "required": []}}}),
            json!({"type": "function", "function": {"name": "terminal", "description": "again"}}),
            json!({"type": "function", "function": {"name": "mcp_srv_echo", "parameters": {}}}),
            json!({"type": "function", "function": {"name": "u", "parameters": {"oneOf": [{"type": "object"}, {"type": "string"}]}}}),
        ];
        let out = tools(&openai, false);
        assert_eq!(out.len(), 3, "a repeated name is dropped");
        assert_eq!(
            out[0]["input_schema"]["properties"]["timeout"],
            json!({"type": "integer", "description": "s"})
        );
        assert_eq!(
            out[1]["input_schema"],
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            out[2]["input_schema"],
            json!({"type": "object", "properties": {}})
        );
        let names: Vec<Value> = tools(&openai, true)
            .iter()
            .map(|t| t["name"].clone())
            .collect();
        assert_eq!(
            names,
            [
                json!("mcp__terminal"),
                json!("mcp__srv_echo"),
                json!("mcp__u")
            ]
        );
        assert_eq!(oauth_tool_name("mcp__srv__echo"), "mcp__srv__echo");
    }

    #[test]
    fn tool_ids_are_made_acceptable() {
        assert_eq!(tool_id("call:1/x"), "call_1_x");
        assert_eq!(tool_id(""), "tool_0");
        assert_eq!(tool_id("toolu_01A-b"), "toolu_01A-b");
    }
}
