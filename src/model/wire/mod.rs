//! The APIs a remote model speaks: how each shapes a request and reads its streamed answer.
//! Pure: bytes in, `ModelEvent`s out; the exchange (`model/exchange.rs`) moves the bytes.

pub mod chat;
pub mod messages;
pub mod parts;
pub mod responses;

use super::endpoint::Endpoint;
use super::{ModelEvent, ModelRequest, TokenUsage, ToolCall};

/// Which API an endpoint speaks (Hermes' `api_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `POST /chat/completions` (OpenAI and most others).
    ChatCompletions,
    /// `POST /v1/messages` (Anthropic, and the proxies that speak its protocol).
    AnthropicMessages,
    /// `POST /responses`: OpenAI's Responses API (api.openai.com, ChatGPT's Codex backend, xAI).
    CodexResponses,
}

impl Wire {
    /// The wire of a Hermes `api_mode` name (`None`: not one this gateway speaks).
    pub fn from_api_mode(name: &str) -> Option<Wire> {
        match name.trim().to_ascii_lowercase().as_str() {
            "chat_completions" => Some(Wire::ChatCompletions),
            "anthropic_messages" => Some(Wire::AnthropicMessages),
            "codex_responses" => Some(Wire::CodexResponses),
            _ => None,
        }
    }

    /// Hermes' name for it (`api_mode`).
    pub fn api_mode(self) -> &'static str {
        match self {
            Wire::ChatCompletions => "chat_completions",
            Wire::AnthropicMessages => "anthropic_messages",
            Wire::CodexResponses => "codex_responses",
        }
    }

    /// The request for `req`: its path under the base URL, its headers (the key's among them)
    /// and its body.
    pub fn request(self, req: &ModelRequest<'_>, to: &Endpoint) -> WireRequest {
        match self {
            Wire::ChatCompletions => chat::request(req, to),
            Wire::AnthropicMessages => messages::request(req, to),
            Wire::CodexResponses => responses::request(req, to),
        }
    }

    /// A reader for one answer's stream.
    pub fn decoder(self) -> Box<dyn Decoder> {
        match self {
            Wire::ChatCompletions => Box::<chat::ChatDecoder>::default(),
            Wire::AnthropicMessages => Box::<messages::MessagesDecoder>::default(),
            Wire::CodexResponses => Box::<responses::ResponsesDecoder>::default(),
        }
    }

    /// A reader for the answer to `req` in particular (an OAuth Messages request renamed the
    /// tools it offered; its reader maps them back).
    pub fn decoder_for(self, req: &ModelRequest<'_>, to: &Endpoint) -> Box<dyn Decoder> {
        match self {
            Wire::AnthropicMessages => Box::new(messages::decoder(req, to)),
            // It stamps the reasoning it keeps with the endpoint that sealed it.
            Wire::CodexResponses => Box::new(responses::ResponsesDecoder::new(to)),
            other => other.decoder(),
        }
    }
}

/// One request, ready for HTTP.
pub struct WireRequest {
    /// Below the base URL's path (`/chat/completions`).
    pub path: &'static str,
    pub headers: Vec<(String, String)>,
    /// A JSON object (the endpoint's `extra_body` is merged over it).
    pub body: serde_json::Value,
}

/// Reads the data of one answer's server-sent events.
pub trait Decoder {
    /// One event's data. `Ok(true)`: the answer is complete.
    fn on_data(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<bool, String>;
    /// The stream ended without its end marker: whether what came is still a whole answer.
    fn whole_at_eof(&self) -> bool;
    /// The answer is complete: its tool calls, then `Done`.
    fn finish(&mut self, out: &mut Vec<ModelEvent>);
}

/// The tool calls of an answer, as they stream in by index: id, name, arguments so far.
#[derive(Default)]
pub struct DraftCalls {
    calls: std::collections::BTreeMap<u64, (String, String, String)>,
}

impl DraftCalls {
    /// More of call `index`; a `ToolDrafting` event when its name first appears.
    pub fn add(
        &mut self,
        index: u64,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<&str>,
        out: &mut Vec<ModelEvent>,
    ) {
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = id {
            entry.0 = id.to_string();
        }
        if let Some(name) = name {
            let first = entry.1.is_empty() && !name.is_empty();
            entry.1.push_str(name);
            if first {
                out.push(ModelEvent::ToolDrafting(entry.1.clone()));
            }
        }
        if let Some(args) = arguments {
            entry.2.push_str(args);
        }
    }

    /// Replace the arguments of call `index` with the whole text (a stream's final copy).
    pub fn set_arguments(&mut self, index: u64, arguments: &str) {
        self.calls.entry(index).or_default().2 = arguments.to_string();
    }

    /// The calls, in order, each with an id and JSON arguments (`{}` when none came), then
    /// `Done`.
    pub fn finish(&mut self, finish_reason: String, usage: TokenUsage, out: &mut Vec<ModelEvent>) {
        for (index, (id, name, arguments)) in std::mem::take(&mut self.calls) {
            let id = if id.is_empty() {
                format!("call_{}_{index}", crate::util::random_hex(8))
            } else {
                id
            };
            let arguments = if arguments.trim().is_empty() {
                "{}".to_string()
            } else {
                arguments
            };
            out.push(ModelEvent::ToolCall(ToolCall {
                id,
                name,
                arguments,
            }));
        }
        out.push(ModelEvent::Done {
            finish_reason,
            usage,
        });
    }
}

/// The text of a JSON event, or an error that shows a piece of it.
pub fn parse_event(data: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(data).map_err(|e| {
        format!(
            "malformed event stream from the model ({e}): {}",
            crate::util::clip(data, 120)
        )
    })
}
