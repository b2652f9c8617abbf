//! Model providers: the small trait the loop drives, and the built-in offline model.

pub mod caching;
pub mod catalog;
pub mod connect;
pub mod context;
pub mod endpoint;
pub mod exchange;
pub mod http;
mod login_call;
pub mod logins;
pub mod offline;
pub mod providers;
pub mod remote;
pub mod resolve;
pub mod select;
pub mod sse;
pub mod unreachable;
pub mod wire;

use std::time::Instant;

use crate::transcript::Message;

/// Token counts of one model call (and its price, when the provider reports one).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TokenUsage {
    /// Every input token of the call, those read from or written to the cache included (what
    /// the context window holds).
    pub input: u64,
    pub output: u64,
    /// Input tokens served from the provider's prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write: u64,
    /// Output tokens spent reasoning.
    pub reasoning: u64,
    /// What the provider says the call cost, in US dollars.
    pub cost_usd: Option<f64>,
}

/// What a session's model calls add up to beyond input and output tokens: Hermes' accounting
/// columns (`cache_read_tokens`, `cache_write_tokens`, `reasoning_tokens`, the cost ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Accounting {
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// Sum of the prices the provider reported (`None`: it reported none).
    pub cost_usd: Option<f64>,
    /// Model calls that came without a price: a sum above is then short of the real cost.
    pub unpriced_calls: u64,
}

impl Accounting {
    pub fn add(&mut self, u: &TokenUsage) {
        self.cache_read_tokens += u.cache_read;
        self.cache_write_tokens += u.cache_write;
        self.reasoning_tokens += u.reasoning;
        match u.cost_usd {
            Some(c) => self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + c),
            None => self.unpriced_calls += 1,
        }
    }

    /// Hermes' `cost_status`: `actual` when every call was priced by the provider, `partial`
    /// when only some were, `unknown` when none was.
    pub fn cost_status(&self) -> &'static str {
        match (self.cost_usd, self.unpriced_calls) {
            (None, _) => "unknown",
            (Some(_), 0) => "actual",
            (Some(_), _) => "partial",
        }
    }

    /// Hermes' `cost_source`.
    pub fn cost_source(&self) -> &'static str {
        if self.cost_usd.is_some() {
            "provider_cost_api"
        } else {
            "none"
        }
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text of the arguments, as the model gave it.
    pub arguments: String,
}

/// What a model call produced since it was last advanced.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    Text(String),
    Reasoning(String),
    ToolCall(ToolCall),
    /// The model began writing a call to this tool (its arguments are still streaming).
    ToolDrafting(String),
    /// What the answer's API wants back in later requests (comes before `Done`).
    Replay(crate::transcript::Replay),
    /// The call ended normally.
    Done {
        finish_reason: String,
        usage: TokenUsage,
    },
    /// The call failed; the text is what the user should read.
    Failed(String),
    /// Something the user should know while the call goes on (a retry, a slow server).
    Notice(String),
}

/// How a call wants to be driven next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// More is ready now: advance again on the next loop iteration.
    Ready,
    /// Waiting: for readiness of the sources it registered, or until this instant.
    Wait(Option<Instant>),
    /// `Done` or `Failed` has been emitted; the call is over.
    Finished,
}

/// What a call may use from the loop: the registry for its sockets and the token the loop
/// routes their readiness with.
pub struct CallContext<'a> {
    pub registry: &'a mio::Registry,
    pub token: mio::Token,
}

/// One request in flight. The loop calls `advance` when the call's token is ready, when its
/// wait deadline passes, or on the next iteration after `Progress::Ready`.
pub trait ModelCall {
    fn advance(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress;
    /// Stop at once and release every source (interrupt, shutdown).
    fn abort(&mut self, ctx: &mut CallContext<'_>);
    /// After `Finished`: a connection that can carry the next request, for the provider.
    fn take_connection(&mut self) -> Option<Box<dyn std::any::Any>> {
        None
    }
}

/// What the model is asked.
pub struct ModelRequest<'a> {
    /// The system prompt (`None`: the provider's short default).
    pub system: Option<&'a str>,
    pub messages: &'a [Message],
    pub model: &'a str,
    /// The tools offered, as JSON schemas in the OpenAI `tools` shape.
    pub tools: &'a [serde_json::Value],
    /// The session's `/reasoning` level (`None`: the endpoint's).
    pub reasoning_effort: Option<&'a str>,
    /// The stored session id (Hermes' `session_id`): what some APIs key their prompt cache
    /// and routing on (`None`: no session).
    pub session_id: Option<&'a str>,
}

/// A model backend.
pub trait Provider {
    /// Provider name as shown to the user (`offline`, `openai`…).
    fn name(&self) -> &str;
    /// Model name used when a session names none.
    fn default_model(&self) -> &str;
    /// Begin a call. Failures to start are reported as a `Failed` event by the call.
    fn start(&mut self, req: ModelRequest<'_>, ctx: &mut CallContext<'_>) -> Box<dyn ModelCall>;
    /// The model new sessions get from now on (`config.set model --global`).
    fn set_default_model(&mut self, _model: &str) {}
    /// The OpenAI-compatible endpoint and its key, for listing models.
    fn endpoint(&self) -> Option<(&str, Option<&str>)> {
        None
    }
    /// Take back a connection a finished call left reusable.
    fn recycle(&mut self, _connection: Box<dyn std::any::Any>) {}
}
