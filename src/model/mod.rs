//! Model providers: the small trait the loop drives, and the built-in offline model.

pub mod catalog;
pub mod connect;
pub mod context;
pub mod http;
pub mod offline;
pub mod openai;
pub mod select;
pub mod sse;

use std::time::Instant;

use crate::transcript::Message;

/// Token counts of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
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
