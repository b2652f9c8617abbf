//! A streamed Responses answer: typed events (`response.output_text.delta`,
//! `response.output_item.added`/`.done`, `response.function_call_arguments.delta`,
//! `response.completed`…) into text, reasoning, tool calls, the items to replay, usage and
//! the finish reason.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::super::{Decoder, parse_event};
use super::{call_id, input};
use crate::model::endpoint::Endpoint;
use crate::model::{ModelEvent, TokenUsage, ToolCall};
use crate::transcript::Replay;

/// Output items one answer may have (calls, reasoning, messages): far beyond any real one.
const ITEMS_MAX: usize = 1024;
/// Bytes kept of one answer while it streams (call arguments, the items to replay).
const KEPT_MAX: usize = 32 * 1024 * 1024;

/// A function call as it streams in.
#[derive(Default)]
struct Call {
    output_index: Option<u64>,
    /// The output item's id (`fc_…`).
    item_id: String,
    /// What the call's result must name (`call_…`).
    call_id: String,
    name: String,
    arguments: String,
    /// `ToolDrafting` was sent for it.
    drafted: bool,
    /// Its item ended unfinished (`in_progress`, `incomplete`): not a call to run.
    unfinished: bool,
}

/// What the stream said of one output item so far.
#[derive(Default, Clone, Copy)]
struct Item {
    /// A message of the `commentary`/`analysis` phase: its text is the model thinking aloud.
    thinking: bool,
    /// Its text or reasoning came as deltas (its done item's copy is not shown again).
    streamed: bool,
}

/// How the answer ended (`response.completed` / `response.incomplete`).
struct End {
    status: String,
    /// Why it is incomplete (`max_output_tokens`, `content_filter`).
    reason: String,
    usage: TokenUsage,
}

/// What arrived of a streamed response.
pub struct ResponsesDecoder {
    /// This endpoint's issuer kind, stamped on the reasoning items it seals (empty: not
    /// known, the items go unstamped and are replayed to any endpoint, as Hermes' older ones).
    issuer: String,
    calls: Vec<Call>,
    items: BTreeMap<u64, Item>,
    reasoning_items: Vec<Value>,
    message_items: Vec<Value>,
    /// An `output_item.done` came (else the final response's `output` is read instead).
    saw_done_item: bool,
    /// Bytes of `calls` and the replay items.
    kept: usize,
    /// The reasoning part last streamed (output index, summary index): a new one is a new
    /// paragraph.
    reasoning_part: Option<(u64, u64)>,
    end: Option<End>,
}

impl Default for ResponsesDecoder {
    fn default() -> Self {
        ResponsesDecoder::for_issuer(String::new())
    }
}

impl ResponsesDecoder {
    pub fn new(from: &Endpoint) -> Self {
        ResponsesDecoder::for_issuer(super::Backend::of(from).issuer(&from.base_url))
    }

    pub(super) fn for_issuer(issuer: String) -> Self {
        ResponsesDecoder {
            issuer,
            calls: Vec::new(),
            items: BTreeMap::new(),
            reasoning_items: Vec::new(),
            message_items: Vec::new(),
            saw_done_item: false,
            kept: 0,
            reasoning_part: None,
            end: None,
        }
    }

    /// Count `bytes` more kept, or refuse an answer past the bounds.
    fn keep(&mut self, bytes: usize) -> Result<(), String> {
        self.kept += bytes;
        let items = self.calls.len()
            + self.items.len()
            + self.reasoning_items.len()
            + self.message_items.len();
        if self.kept > KEPT_MAX || items > ITEMS_MAX {
            return Err(format!(
                "the model's answer is too large to hold ({} items, {} MiB of tool arguments and \
                 reasoning)",
                items,
                self.kept >> 20
            ));
        }
        Ok(())
    }

    fn item(&self, output_index: Option<u64>) -> Item {
        output_index
            .and_then(|i| self.items.get(&i).copied())
            .unwrap_or_default()
    }

    fn mark_streamed(&mut self, output_index: Option<u64>) -> Result<(), String> {
        if let Some(i) = output_index {
            self.items.entry(i).or_default().streamed = true;
        }
        self.keep(0)
    }

    /// The call an event is about: by its item id, else by its output index.
    fn call_index(&self, item_id: Option<&str>, output_index: Option<u64>) -> Option<usize> {
        let item_id = item_id.filter(|i| !i.is_empty());
        item_id
            .and_then(|id| self.calls.iter().position(|c| c.item_id == id))
            .or_else(|| {
                let oi = output_index?;
                self.calls.iter().position(|c| c.output_index == Some(oi))
            })
    }

    fn open_call(
        &mut self,
        item_id: Option<&str>,
        output_index: Option<u64>,
    ) -> Result<usize, String> {
        self.calls.push(Call {
            output_index,
            item_id: item_id.unwrap_or("").to_string(),
            ..Default::default()
        });
        self.keep(0)?;
        Ok(self.calls.len() - 1)
    }

    fn item_added(
        &mut self,
        oi: Option<u64>,
        item: &Value,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), String> {
        let kind = item_type(item)?;
        if let Some(i) = oi {
            let phase = item["phase"]
                .as_str()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            let thinking = kind == "message" && matches!(phase.as_str(), "commentary" | "analysis");
            self.items.entry(i).or_default().thinking = thinking;
            self.keep(0)?;
        }
        if kind.contains("function_call") {
            let at = self.open_call(item["id"].as_str(), oi)?;
            self.update_call(at, item, false, out)?;
        }
        Ok(())
    }

    /// What a function call item says of the call (`done`: its final copy, the whole of it).
    fn update_call(
        &mut self,
        at: usize,
        item: &Value,
        done: bool,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), String> {
        let args = match item.get("arguments").or_else(|| item.get("input")) {
            Some(Value::String(s)) => Some(s.clone()),
            None | Some(Value::Null) => None,
            Some(other) => Some(other.to_string()),
        };
        let grown = args.as_ref().map_or(0, String::len);
        let call = &mut self.calls[at];
        if let Some(id) = item["id"].as_str().filter(|i| !i.is_empty()) {
            call.item_id = id.to_string();
        }
        if let Some(id) = item["call_id"]
            .as_str()
            .map(str::trim)
            .filter(|i| !i.is_empty())
        {
            call.call_id = id.to_string();
        }
        if let Some(name) = item["name"].as_str().filter(|n| !n.is_empty()) {
            call.name = name.to_string();
        }
        if let Some(args) = args.filter(|a| !a.is_empty() || call.arguments.is_empty()) {
            call.arguments = args;
        }
        // Only the final copy says whether the call was finished (a new one is in progress).
        let status = item["status"].as_str().unwrap_or("");
        call.unfinished = done && matches!(status, "queued" | "in_progress" | "incomplete");
        if !call.drafted && !call.name.is_empty() {
            call.drafted = true;
            out.push(ModelEvent::ToolDrafting(call.name.clone()));
        }
        self.keep(grown)
    }

    fn item_done(
        &mut self,
        oi: Option<u64>,
        item: &Value,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), String> {
        let kind = item_type(item)?;
        let seen = self.item(oi);
        match kind {
            "function_call" | "custom_tool_call" => {
                let by_call = item["call_id"]
                    .as_str()
                    .filter(|c| !c.is_empty())
                    .and_then(|c| self.calls.iter().position(|x| x.call_id == c));
                let at = match by_call.or_else(|| self.call_index(item["id"].as_str(), oi)) {
                    Some(at) => at,
                    None => self.open_call(item["id"].as_str(), oi)?,
                };
                self.update_call(at, item, true, out)?;
            }
            "reasoning" => {
                let summary: Vec<&str> = item["summary"]
                    .as_array()
                    .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
                    .unwrap_or_default();
                let text = summary.join("\n");
                if !seen.streamed && !text.trim().is_empty() {
                    self.say_reasoning(oi.unwrap_or(0), 0, text.trim(), out);
                }
                let id = item["id"].as_str().unwrap_or("");
                // A transient item the API cannot take back.
                let transient = id.starts_with("rs_tmp_");
                if let Some(sealed) = item["encrypted_content"].as_str().filter(|e| !e.is_empty())
                    && !transient
                {
                    let mut kept = json!({
                        "type": "reasoning",
                        "encrypted_content": sealed,
                        "summary": summary.iter()
                            .map(|t| json!({"type": "summary_text", "text": t}))
                            .collect::<Vec<_>>(),
                    });
                    if !id.is_empty() {
                        kept["id"] = json!(id);
                    }
                    if !self.issuer.is_empty() {
                        kept["_issuer_kind"] = json!(self.issuer);
                    }
                    self.reasoning_items.push(kept);
                    self.keep(sealed.len() + text.len())?;
                }
            }
            "message" => {
                let text: String = item["content"]
                    .as_array()
                    .map(|parts| {
                        parts
                            .iter()
                            .filter(|p| matches!(p["type"].as_str(), Some("output_text" | "text")))
                            .filter_map(|p| p["text"].as_str())
                            .collect()
                    })
                    .unwrap_or_default();
                let text = text.trim();
                if text.is_empty() {
                    return Ok(());
                }
                if !seen.streamed {
                    // The text came only whole (a server that streams no deltas).
                    out.push(match seen.thinking {
                        true => ModelEvent::Reasoning(text.to_string()),
                        false => ModelEvent::Text(text.to_string()),
                    });
                    self.mark_streamed(oi)?;
                }
                let mut kept = json!({
                    "type": "message",
                    "role": "assistant",
                    "status": input::message_status(&item["status"]),
                    "content": [{"type": "output_text", "text": text}],
                });
                if let Some(id) = item["id"].as_str().filter(|i| !i.is_empty()) {
                    kept["id"] = json!(id);
                }
                let phase = item["phase"]
                    .as_str()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase();
                if !phase.is_empty() {
                    kept["phase"] = json!(phase);
                }
                self.message_items.push(kept);
                self.keep(text.len())?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Reasoning text, a new paragraph when it starts another part.
    fn say_reasoning(
        &mut self,
        output_index: u64,
        part: u64,
        text: &str,
        out: &mut Vec<ModelEvent>,
    ) {
        let here = (output_index, part);
        let text = match self.reasoning_part.replace(here) {
            Some(last) if last != here => format!("\n\n{text}"),
            _ => text.to_string(),
        };
        out.push(ModelEvent::Reasoning(text));
    }

    /// The final response's items, for a stream that sent none of them on their own.
    fn read_final_output(
        &mut self,
        response: &Value,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), String> {
        let Some(items) = response["output"].as_array() else {
            return Ok(());
        };
        for (i, item) in items.iter().enumerate() {
            self.item_done(Some(i as u64), item, out)?;
        }
        Ok(())
    }
}

impl Decoder for ResponsesDecoder {
    fn on_data(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<bool, String> {
        let data = data.trim();
        // Not the API's, but some relays end with it.
        if data == "[DONE]" {
            return Ok(self.end.is_some());
        }
        let ev = parse_event(data)?;
        let Some(kind) = ev.get("type").and_then(Value::as_str) else {
            return Err(malformed("an event without a type", data));
        };
        let oi = ev.get("output_index").and_then(Value::as_u64);
        let item_id = ev.get("item_id").and_then(Value::as_str);
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                let text = delta(&ev, data)?;
                if !text.is_empty() {
                    let thinking = self.item(oi).thinking;
                    self.mark_streamed(oi)?;
                    match thinking {
                        true => self.say_reasoning(oi.unwrap_or(0), 0, text, out),
                        false => out.push(ModelEvent::Text(text.to_string())),
                    }
                }
            }
            "response.output_item.added" => self.item_added(oi, &ev["item"], out)?,
            "response.output_item.done" => {
                self.saw_done_item = true;
                self.item_done(oi, &ev["item"], out)?;
            }
            "response.function_call_arguments.delta" => {
                let text = delta(&ev, data)?;
                let at = match self.call_index(item_id, oi) {
                    Some(at) => at,
                    None => self.open_call(item_id, oi)?,
                };
                self.calls[at].arguments.push_str(text);
                self.keep(text.len())?;
            }
            "response.function_call_arguments.done" => {
                if let Some(whole) = ev.get("arguments").and_then(Value::as_str)
                    && let Some(at) = self.call_index(item_id, oi)
                {
                    self.calls[at].arguments = whole.to_string();
                    self.keep(whole.len())?;
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = &ev["response"];
                if !self.saw_done_item {
                    self.read_final_output(response, out)?;
                }
                let status = response["status"].as_str().unwrap_or("");
                let incomplete = kind == "response.incomplete" || status == "incomplete";
                self.end = Some(End {
                    status: if incomplete {
                        "incomplete"
                    } else {
                        "completed"
                    }
                    .into(),
                    reason: response["incomplete_details"]["reason"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    usage: usage_of(&response["usage"]),
                });
                return Ok(true);
            }
            "response.failed" => return Err(failure(&ev["response"]["error"], "failed")),
            "error" => {
                let err = ev.get("error").filter(|e| e.is_object()).unwrap_or(&ev);
                return Err(failure(err, "error"));
            }
            // Summary deltas (`reasoning_summary_text.delta`) and raw ones (`reasoning_text.delta`).
            k if k.contains("reasoning") && k.ends_with(".delta") => {
                let text = delta(&ev, data)?;
                if !text.is_empty() {
                    let part = ev.get("summary_index").and_then(Value::as_u64).unwrap_or(0);
                    self.mark_streamed(oi)?;
                    self.say_reasoning(oi.unwrap_or(0), part, text, out);
                }
            }
            // Lifecycle and per-part events: nothing the user reads.
            _ => {}
        }
        Ok(false)
    }

    fn whole_at_eof(&self) -> bool {
        self.end.is_some()
    }

    fn finish(&mut self, out: &mut Vec<ModelEvent>) {
        let end = self.end.take().unwrap_or(End {
            status: "completed".into(),
            reason: String::new(),
            usage: TokenUsage::default(),
        });
        let mut calls = std::mem::take(&mut self.calls);
        // In the answer's order when every call says where it stands, else as they came.
        if calls.iter().all(|c| c.output_index.is_some()) {
            calls.sort_by_key(|c| c.output_index);
        }
        let mut made = 0;
        for c in calls {
            if c.unfinished || c.name.trim().is_empty() {
                continue;
            }
            let args = match c.arguments.trim() {
                "" => "{}".to_string(),
                _ => c.arguments,
            };
            let id = Some(c.call_id)
                .filter(|i| !i.is_empty())
                .or_else(|| call_id::split(&c.item_id).0.map(str::to_string))
                .unwrap_or_else(|| call_id::deterministic(&c.name, &args, made));
            out.push(ModelEvent::ToolCall(ToolCall {
                id,
                name: c.name,
                arguments: args,
            }));
            made += 1;
        }
        let list = |v: Vec<Value>| (!v.is_empty()).then(|| Value::Array(v).to_string());
        let replay = Replay {
            reasoning_details: None,
            codex_reasoning_items: list(std::mem::take(&mut self.reasoning_items)),
            codex_message_items: list(std::mem::take(&mut self.message_items)),
        };
        if replay != Replay::default() {
            out.push(ModelEvent::Replay(replay));
        }
        let finish_reason = match (made, end.status.as_str(), end.reason.as_str()) {
            (1.., _, _) => "tool_calls",
            (_, "incomplete", "content_filter") => "content_filter",
            (_, "incomplete", _) => "length",
            _ => "stop",
        };
        out.push(ModelEvent::Done {
            finish_reason: finish_reason.into(),
            usage: end.usage,
        });
    }
}

/// An item's `type`, or an error naming what came instead of an item.
fn item_type(item: &Value) -> Result<&str, String> {
    item.get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("an output item without a type", &item.to_string()))
}

/// An event's `delta` text.
fn delta<'a>(ev: &'a Value, data: &str) -> Result<&'a str, String> {
    ev.get("delta")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("a delta without its text", data))
}

fn malformed(what: &str, data: &str) -> String {
    format!(
        "malformed event stream from the model ({what}): {}",
        crate::util::clip(data, 120)
    )
}

/// The server's reason for a failed response (`code: message` as Hermes shows it).
fn failure(error: &Value, status: &str) -> String {
    let field = |k: &str| {
        error
            .get(k)
            .map(|v| match v {
                Value::String(s) => s.trim().to_string(),
                Value::Null => String::new(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    let (code, message) = (field("code"), field("message"));
    let text = match (code.is_empty(), message.is_empty()) {
        (false, false) => format!("{code}: {message}"),
        (true, false) => message,
        (false, true) => code,
        _ if !error.is_null() && error != &json!({}) => error.to_string(),
        _ => format!("the response ended with status '{status}'"),
    };
    format!(
        "the model reported an error: {}",
        crate::util::clip(&text, 300)
    )
}

/// The counts of a Responses `usage`: `input_tokens` already counts the cached ones.
fn usage_of(u: &Value) -> TokenUsage {
    let at = |a: &str, b: Option<&str>| {
        let v = &u[a];
        b.map_or(v, |b| &v[b]).as_u64().unwrap_or(0)
    };
    TokenUsage {
        input: at("input_tokens", None),
        output: at("output_tokens", None),
        cache_read: at("input_tokens_details", Some("cached_tokens")),
        cache_write: at("input_tokens_details", Some("cache_creation_tokens")),
        reasoning: at("output_tokens_details", Some("reasoning_tokens")),
        cost_usd: None,
    }
}
