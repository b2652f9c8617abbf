//! Reading a streamed Messages answer: `message_start`, the content blocks (text, thinking with
//! its signature, redacted thinking, tool calls whose input arrives as pieces of JSON),
//! `message_delta` (why it stopped, the usage so far) and `message_stop`; an `error` event
//! fails the call. The signed thinking is handed back as `Replay`, in Hermes' shape.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::model::wire::{Decoder, DraftCalls, parse_event};
use crate::model::{ModelEvent, TokenUsage};
use crate::transcript::Replay;

/// Content blocks an answer may have; a server sending more is not well.
const MAX_BLOCKS: usize = 4096;
/// Bytes of thinking, signatures and tool input one answer may hold until it ends.
const MAX_HELD: usize = 64 * 1024 * 1024;

enum Kind {
    Text,
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted {
        data: String,
    },
    ToolUse {
        streamed: bool,
        start_input: Option<String>,
    },
    /// A block this gateway does not use (a server tool's, a future kind).
    Other,
}

struct Block {
    index: u64,
    kind: Kind,
}

/// What arrived of one streamed answer.
#[derive(Default)]
pub struct MessagesDecoder {
    blocks: Vec<Block>,
    calls: DraftCalls,
    input_tokens: u64,
    output_tokens: u64,
    cache_read: u64,
    cache_write: u64,
    stop_reason: Option<String>,
    stopped: bool,
    held: usize,
    /// The current text or thinking block showed something.
    said_text: bool,
    said_thinking: bool,
    /// A block of the kind showed something and ended: the next one that shows something is
    /// set apart from it (Hermes joins text blocks with a newline, thinking with a blank line).
    text_break: bool,
    thinking_break: bool,
    /// The tools offered, when their names went out with Claude Code's `mcp__` prefix.
    offered: Option<HashSet<String>>,
}

impl MessagesDecoder {
    /// A decoder that maps `mcp__` tool names back to these offered names (OAuth requests).
    pub fn unprefixing(offered: HashSet<String>) -> MessagesDecoder {
        MessagesDecoder {
            offered: Some(offered),
            ..Default::default()
        }
    }

    /// The offered tool a wire name stands for (the first of `mcp__x`, `mcp_x`, `x` offered).
    fn tool_name(&self, wire: &str) -> String {
        let (Some(offered), Some(rest)) = (&self.offered, wire.strip_prefix("mcp__")) else {
            return wire.to_string();
        };
        [wire.to_string(), format!("mcp_{rest}"), rest.to_string()]
            .into_iter()
            .find(|n| offered.contains(n))
            .unwrap_or_else(|| wire.to_string())
    }

    fn hold(&mut self, bytes: usize) -> Result<(), String> {
        self.held += bytes;
        if self.held > MAX_HELD {
            return Err(format!(
                "the model's answer is too large (over {} MiB of thinking and tool input)",
                MAX_HELD >> 20
            ));
        }
        Ok(())
    }

    fn block_mut(&mut self, index: u64) -> Result<&mut Block, String> {
        self.blocks
            .iter_mut()
            .rev()
            .find(|b| b.index == index)
            .ok_or_else(|| format!("malformed answer from the model: a delta for block {index}, which never started"))
    }

    fn usage_from(&mut self, u: &Value) {
        let field = |k: &str| u.get(k).and_then(Value::as_u64);
        if let Some(n) = field("input_tokens") {
            self.input_tokens = n;
        }
        if let Some(n) = field("output_tokens") {
            self.output_tokens = n;
        }
        if let Some(n) = field("cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = field("cache_creation_input_tokens") {
            self.cache_write = n;
        }
    }

    fn start_block(&mut self, v: &Value, out: &mut Vec<ModelEvent>) -> Result<(), String> {
        let index = index_of(v)?;
        if self.blocks.iter().any(|b| b.index == index) {
            return Err(format!(
                "malformed answer from the model: block {index} started twice"
            ));
        }
        if self.blocks.len() >= MAX_BLOCKS {
            return Err(format!(
                "the model's answer has more than {MAX_BLOCKS} content blocks"
            ));
        }
        let b = v.get("content_block").unwrap_or(&Value::Null);
        let text = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("");
        let kind = match text("type") {
            "text" => {
                self.say_text(text("text"), out);
                Kind::Text
            }
            "thinking" => {
                let (thinking, signature) = (text("thinking"), text("signature"));
                self.hold(thinking.len() + signature.len())?;
                self.say_thinking(thinking, out);
                Kind::Thinking {
                    thinking: thinking.to_string(),
                    signature: signature.to_string(),
                }
            }
            "redacted_thinking" => {
                self.hold(text("data").len())?;
                Kind::Redacted {
                    data: text("data").to_string(),
                }
            }
            "tool_use" => {
                let name = self.tool_name(text("name"));
                self.calls
                    .add(index, Some(text("id")), Some(&name), None, out);
                // A proxy that does not stream the input sends it whole here.
                let start_input = b
                    .get("input")
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                    .map(Value::to_string);
                self.hold(start_input.as_ref().map_or(0, String::len))?;
                Kind::ToolUse {
                    streamed: false,
                    start_input,
                }
            }
            _ => Kind::Other,
        };
        self.blocks.push(Block { index, kind });
        Ok(())
    }

    /// Text of the answer; a new text block after one already shown starts on a new line.
    fn say_text(&mut self, t: &str, out: &mut Vec<ModelEvent>) {
        if t.is_empty() {
            return;
        }
        if std::mem::take(&mut self.text_break) {
            out.push(ModelEvent::Text("\n".into()));
        }
        out.push(ModelEvent::Text(t.to_string()));
        self.said_text = true;
    }

    fn say_thinking(&mut self, t: &str, out: &mut Vec<ModelEvent>) {
        if t.is_empty() {
            return;
        }
        if std::mem::take(&mut self.thinking_break) {
            out.push(ModelEvent::Reasoning("\n\n".into()));
        }
        out.push(ModelEvent::Reasoning(t.to_string()));
        self.said_thinking = true;
    }

    fn delta(&mut self, v: &Value, out: &mut Vec<ModelEvent>) -> Result<(), String> {
        let index = index_of(v)?;
        let d = v.get("delta").unwrap_or(&Value::Null);
        let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
        let ty = text("type");
        let mismatch = || {
            format!(
                "malformed answer from the model: a {ty} for block {index}, which is not of its kind"
            )
        };
        match ty {
            "text_delta" => {
                if !matches!(self.block_mut(index)?.kind, Kind::Text) {
                    return Err(mismatch());
                }
                self.say_text(text("text"), out);
            }
            "thinking_delta" => {
                let piece = text("thinking");
                self.hold(piece.len())?;
                let Kind::Thinking { thinking, .. } = &mut self.block_mut(index)?.kind else {
                    return Err(mismatch());
                };
                thinking.push_str(piece);
                self.say_thinking(piece, out);
            }
            "signature_delta" => {
                let sig = text("signature");
                self.hold(sig.len())?;
                let Kind::Thinking { signature, .. } = &mut self.block_mut(index)?.kind else {
                    return Err(mismatch());
                };
                // The whole signature, not a piece of one.
                *signature = sig.to_string();
            }
            "input_json_delta" => {
                let piece = text("partial_json");
                self.hold(piece.len())?;
                let Kind::ToolUse { streamed, .. } = &mut self.block_mut(index)?.kind else {
                    return Err(mismatch());
                };
                *streamed = true;
                self.calls.add(index, None, None, Some(piece), out);
            }
            // Citations, and kinds to come: nothing this gateway shows.
            _ => {}
        }
        Ok(())
    }

    fn stop_block(&mut self, v: &Value) -> Result<(), String> {
        let index = index_of(v)?;
        match &self.block_mut(index)?.kind {
            Kind::ToolUse {
                streamed: false,
                start_input: Some(input),
            } => {
                let input = input.clone();
                self.calls.set_arguments(index, &input);
            }
            Kind::Text => self.text_break |= std::mem::take(&mut self.said_text),
            Kind::Thinking { .. } => self.thinking_break |= std::mem::take(&mut self.said_thinking),
            _ => {}
        }
        Ok(())
    }

    /// The thinking of the answer, in Hermes' `reasoning_details` shape.
    fn reasoning_details(&self) -> Option<String> {
        let kept: Vec<Value> = self
            .blocks
            .iter()
            .filter_map(|b| match &b.kind {
                Kind::Thinking {
                    thinking,
                    signature,
                } => {
                    let mut v = json!({"type": "thinking", "thinking": thinking});
                    if !signature.is_empty() {
                        v["signature"] = json!(signature);
                    }
                    Some(v)
                }
                Kind::Redacted { data } if !data.is_empty() => {
                    Some(json!({"type": "redacted_thinking", "data": data}))
                }
                _ => None,
            })
            .collect();
        (!kept.is_empty()).then(|| Value::Array(kept).to_string())
    }
}

/// The `index` of a block event.
fn index_of(v: &Value) -> Result<u64, String> {
    v.get("index").and_then(Value::as_u64).ok_or_else(|| {
        format!(
            "malformed answer from the model: a block event without an index: {}",
            crate::util::clip(&v.to_string(), 120)
        )
    })
}

/// Hermes' `finish_reason` for the API's `stop_reason`.
pub fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("tool_use") => "tool_calls",
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

impl Decoder for MessagesDecoder {
    fn on_data(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<bool, String> {
        let v = parse_event(data)?;
        let Some(ty) = v.get("type").and_then(Value::as_str) else {
            return Err(format!(
                "malformed event stream from the model (an event without a type): {}",
                crate::util::clip(data, 120)
            ));
        };
        match ty {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.usage_from(u);
                }
            }
            "content_block_start" => self.start_block(&v, out)?,
            "content_block_delta" => self.delta(&v, out)?,
            "content_block_stop" => self.stop_block(&v)?,
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_string());
                }
                if let Some(u) = v.get("usage") {
                    self.usage_from(u);
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => {
                let e = v.get("error").unwrap_or(&Value::Null);
                let msg = e
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| e.to_string(), str::to_string);
                let kind = e.get("type").and_then(Value::as_str).unwrap_or("error");
                return Err(format!(
                    "the model reported an error ({kind}): {}",
                    crate::util::clip(&msg, 300)
                ));
            }
            // `ping` keeps the connection busy; other kinds are for later versions.
            _ => {}
        }
        Ok(false)
    }

    fn whole_at_eof(&self) -> bool {
        self.stopped || self.stop_reason.is_some()
    }

    fn finish(&mut self, out: &mut Vec<ModelEvent>) {
        if let Some(details) = self.reasoning_details() {
            out.push(ModelEvent::Replay(Replay {
                reasoning_details: Some(details),
                ..Default::default()
            }));
        }
        let usage = TokenUsage {
            // Anthropic counts cached input apart; the context holds all of it.
            input: self.input_tokens + self.cache_read + self.cache_write,
            output: self.output_tokens,
            cache_read: self.cache_read,
            cache_write: self.cache_write,
            reasoning: 0,
            cost_usd: None,
        };
        let reason = finish_reason(self.stop_reason.as_deref()).to_string();
        self.calls.finish(reason, usage, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;

    fn ev(v: Value) -> String {
        v.to_string()
    }

    fn start(usage: Value) -> String {
        ev(
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
            "stop_reason": null, "usage": usage}}),
        )
    }

    fn block_start(index: u64, block: Value) -> String {
        ev(json!({"type": "content_block_start", "index": index, "content_block": block}))
    }

    fn delta(index: u64, delta: Value) -> String {
        ev(json!({"type": "content_block_delta", "index": index, "delta": delta}))
    }

    fn block_stop(index: u64) -> String {
        ev(json!({"type": "content_block_stop", "index": index}))
    }

    fn message_delta(stop: &str, output: u64) -> String {
        ev(
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": output}}),
        )
    }

    const STOP: &str = r#"{"type":"message_stop"}"#;

    /// The events of a whole stream through a fresh decoder (the last event must end it).
    fn decode(d: &mut MessagesDecoder, events: &[String]) -> Vec<ModelEvent> {
        let mut out = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let end = d
                .on_data(e, &mut out)
                .unwrap_or_else(|err| panic!("{e}: {err}"));
            assert_eq!(end, i + 1 == events.len(), "only message_stop ends it: {e}");
        }
        d.finish(&mut out);
        out
    }

    fn done(out: &[ModelEvent]) -> (String, TokenUsage) {
        match out.last() {
            Some(ModelEvent::Done {
                finish_reason,
                usage,
            }) => (finish_reason.clone(), *usage),
            other => panic!("no Done at the end: {other:?}"),
        }
    }

    #[test]
    fn text_with_cache_usage() {
        let mut d = MessagesDecoder::default();
        let out = decode(
            &mut d,
            &[
                start(
                    json!({"input_tokens": 12, "cache_creation_input_tokens": 300,
                "cache_read_input_tokens": 2000, "output_tokens": 1}),
                ),
                block_start(0, json!({"type": "text", "text": ""})),
                r#"{"type":"ping"}"#.into(),
                delta(0, json!({"type": "text_delta", "text": "Hel"})),
                delta(0, json!({"type": "text_delta", "text": "lo"})),
                block_stop(0),
                message_delta("end_turn", 7),
                STOP.into(),
            ],
        );
        assert_eq!(
            out[..2],
            [
                ModelEvent::Text("Hel".into()),
                ModelEvent::Text("lo".into())
            ]
        );
        let (reason, u) = done(&out);
        assert_eq!(reason, "stop");
        assert_eq!(
            (u.input, u.output, u.cache_read, u.cache_write),
            (2312, 7, 2000, 300)
        );
        assert_eq!(out.len(), 3, "no replay without thinking: {out:?}");
    }

    #[test]
    fn a_tool_call_whose_input_arrives_in_pieces() {
        let mut d = MessagesDecoder::default();
        let out = decode(
            &mut d,
            &[
                start(json!({"input_tokens": 5, "output_tokens": 1})),
                block_start(0, json!({"type": "text", "text": ""})),
                delta(0, json!({"type": "text_delta", "text": "Looking."})),
                block_stop(0),
                block_start(
                    1,
                    json!({"type": "tool_use", "id": "toolu_01", "name": "terminal", "input": {}}),
                ),
                delta(1, json!({"type": "input_json_delta", "partial_json": ""})),
                delta(
                    1,
                    json!({"type": "input_json_delta", "partial_json": "{\"comm"}),
                ),
                delta(
                    1,
                    json!({"type": "input_json_delta", "partial_json": "and\": \"ls"}),
                ),
                delta(
                    1,
                    json!({"type": "input_json_delta", "partial_json": " -la\"}"}),
                ),
                block_stop(1),
                message_delta("tool_use", 30),
                STOP.into(),
            ],
        );
        assert_eq!(out[1], ModelEvent::ToolDrafting("terminal".into()));
        assert_eq!(
            out[2],
            ModelEvent::ToolCall(ToolCall {
                id: "toolu_01".into(),
                name: "terminal".into(),
                arguments: "{\"command\": \"ls -la\"}".into(),
            })
        );
        assert_eq!(done(&out).0, "tool_calls");
    }

    #[test]
    fn an_input_sent_whole_at_the_start_is_the_arguments() {
        let mut d = MessagesDecoder::default();
        let out = decode(
            &mut d,
            &[
                block_start(
                    0,
                    json!({"type": "tool_use", "id": "t", "name": "terminal", "input": {"command": "pwd"}}),
                ),
                block_stop(0),
                block_start(
                    1,
                    json!({"type": "tool_use", "id": "u", "name": "terminal", "input": {}}),
                ),
                block_stop(1),
                message_delta("tool_use", 3),
                STOP.into(),
            ],
        );
        let args: Vec<&str> = out
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCall(c) => Some(c.arguments.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(args, [r#"{"command":"pwd"}"#, "{}"]);
    }

    #[test]
    fn signed_thinking_is_shown_and_handed_back() {
        let mut d = MessagesDecoder::default();
        let out = decode(
            &mut d,
            &[
                start(json!({"input_tokens": 5, "output_tokens": 1})),
                block_start(
                    0,
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                ),
                delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
                delta(0, json!({"type": "thinking_delta", "thinking": "check."})),
                delta(
                    0,
                    json!({"type": "signature_delta", "signature": "EqQBCkgIARAB"}),
                ),
                block_stop(0),
                block_start(1, json!({"type": "redacted_thinking", "data": "ENCRYPTED"})),
                block_stop(1),
                block_start(
                    2,
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                ),
                delta(2, json!({"type": "thinking_delta", "thinking": "More."})),
                delta(2, json!({"type": "signature_delta", "signature": "SIG2"})),
                block_stop(2),
                block_start(3, json!({"type": "text", "text": ""})),
                delta(3, json!({"type": "text_delta", "text": "Done."})),
                block_stop(3),
                message_delta("end_turn", 9),
                STOP.into(),
            ],
        );
        let reasoning: String = out
            .iter()
            .filter_map(|e| match e {
                ModelEvent::Reasoning(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning, "Let me check.\n\nMore.");
        let n = out.len();
        let ModelEvent::Replay(r) = &out[n - 2] else {
            panic!("no replay before Done: {out:?}")
        };
        let details: Value = serde_json::from_str(r.reasoning_details.as_deref().unwrap()).unwrap();
        assert_eq!(
            details,
            json!([
                {"type": "thinking", "thinking": "Let me check.", "signature": "EqQBCkgIARAB"},
                {"type": "redacted_thinking", "data": "ENCRYPTED"},
                {"type": "thinking", "thinking": "More.", "signature": "SIG2"},
            ])
        );
        // What is kept is what the next request sends back.
        assert_eq!(
            super::super::convert::kept_thinking(r.reasoning_details.as_deref()),
            details.as_array().unwrap().clone()
        );
    }

    #[test]
    fn text_blocks_are_joined_by_a_newline() {
        let mut d = MessagesDecoder::default();
        let out = decode(
            &mut d,
            &[
                block_start(0, json!({"type": "text", "text": ""})),
                delta(0, json!({"type": "text_delta", "text": "one"})),
                block_stop(0),
                block_start(1, json!({"type": "text", "text": ""})),
                block_stop(1),
                block_start(2, json!({"type": "text", "text": "two"})),
                block_stop(2),
                message_delta("max_tokens", 2),
                STOP.into(),
            ],
        );
        let text: String = out
            .iter()
            .filter_map(|e| match e {
                ModelEvent::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "one\ntwo");
        assert_eq!(done(&out).0, "length");
    }

    #[test]
    fn stop_reasons_map_as_hermes_maps_them() {
        for (stop, want) in [
            (Some("end_turn"), "stop"),
            (Some("tool_use"), "tool_calls"),
            (Some("max_tokens"), "length"),
            (Some("stop_sequence"), "stop"),
            (Some("refusal"), "content_filter"),
            (Some("model_context_window_exceeded"), "length"),
            (Some("pause_turn"), "stop"),
            (None, "stop"),
        ] {
            assert_eq!(finish_reason(stop), want, "{stop:?}");
        }
    }

    #[test]
    fn an_error_event_fails_the_call_with_its_message() {
        let mut d = MessagesDecoder::default();
        let mut out = Vec::new();
        d.on_data(
            &block_start(0, json!({"type": "text", "text": "Hal"})),
            &mut out,
        )
        .unwrap();
        let err = d
            .on_data(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                &mut out,
            )
            .unwrap_err();
        assert_eq!(
            err,
            "the model reported an error (overloaded_error): Overloaded"
        );
        assert!(!d.whole_at_eof());
    }

    #[test]
    fn the_end_is_known_from_message_stop_or_a_stop_reason() {
        let mut d = MessagesDecoder::default();
        let mut out = Vec::new();
        d.on_data(&start(json!({"input_tokens": 1})), &mut out)
            .unwrap();
        assert!(!d.whole_at_eof(), "cut before the answer ended");
        d.on_data(&message_delta("end_turn", 1), &mut out).unwrap();
        assert!(d.whole_at_eof(), "only message_stop missing");
    }

    #[test]
    fn malformed_streams_are_errors_not_panics() {
        let bad: &[&[String]] = &[
            &["not json".into()],
            &[r#"{"no":"type"}"#.into()],
            &["[1,2]".into()],
            &[delta(3, json!({"type": "text_delta", "text": "x"}))],
            &[r#"{"type":"content_block_start","content_block":{"type":"text"}}"#.into()],
            &[r#"{"type":"content_block_delta","index":-1,"delta":{}}"#.into()],
            &[r#"{"type":"content_block_stop","index":"0"}"#.into()],
            &[
                block_start(0, json!({"type": "text"})),
                block_start(0, json!({"type": "text"})),
            ],
            &[
                block_start(0, json!({"type": "tool_use", "id": "t", "name": "x"})),
                delta(0, json!({"type": "text_delta", "text": "x"})),
            ],
            &[
                block_start(0, json!({"type": "text"})),
                delta(0, json!({"type": "signature_delta", "signature": "s"})),
            ],
        ];
        for events in bad {
            let mut d = MessagesDecoder::default();
            let mut out = Vec::new();
            let failed = events
                .iter()
                .map(|e| d.on_data(e, &mut out))
                .find_map(Result::err);
            let err = failed.unwrap_or_else(|| panic!("accepted {events:?}"));
            assert!(err.contains("malformed"), "{err}");
        }
        // Odd values where text belongs are taken as empty; unknown kinds are skipped.
        let mut d = MessagesDecoder::default();
        let out = decode(
            &mut d,
            &[
                r#"{"type":"message_start","message":{"usage":{"input_tokens":"many"}}}"#.into(),
                block_start(0, json!({"type": "server_tool_use", "id": "s"})),
                delta(0, json!({"type": "some_future_delta"})),
                block_start(1, json!({"type": "text", "text": 5})),
                delta(1, json!({"type": "text_delta", "text": null})),
                r#"{"type":"something_new"}"#.into(),
                STOP.into(),
            ],
        );
        assert_eq!(done(&out), ("stop".into(), TokenUsage::default()));
    }

    #[test]
    fn what_an_answer_holds_is_bounded() {
        let mut d = MessagesDecoder::default();
        let mut out = Vec::new();
        d.on_data(
            &block_start(0, json!({"type": "tool_use", "id": "t", "name": "x"})),
            &mut out,
        )
        .unwrap();
        let piece = delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "x".repeat(1 << 20)}),
        );
        let err = (0..100)
            .map(|_| d.on_data(&piece, &mut out))
            .find_map(Result::err);
        assert!(err.is_some_and(|e| e.contains("too large")));
        let mut d = MessagesDecoder::default();
        let err = (0..=MAX_BLOCKS as u64)
            .map(|i| d.on_data(&block_start(i, json!({"type": "text"})), &mut out))
            .find_map(Result::err);
        assert!(err.is_some_and(|e| e.contains("content blocks")));
    }

    #[test]
    fn oauth_tool_names_map_back_to_the_offered_ones() {
        let offered: HashSet<String> = ["terminal", "mcp__srv__echo", "mcp_legacy"]
            .map(String::from)
            .into();
        let d = MessagesDecoder::unprefixing(offered);
        assert_eq!(d.tool_name("mcp__terminal"), "terminal");
        assert_eq!(d.tool_name("mcp__srv__echo"), "mcp__srv__echo");
        assert_eq!(d.tool_name("mcp__legacy"), "mcp_legacy");
        assert_eq!(d.tool_name("mcp__unknown"), "mcp__unknown");
        assert_eq!(
            MessagesDecoder::default().tool_name("mcp__terminal"),
            "mcp__terminal"
        );
    }
}
