//! A model call whose login's token must be renewed first (`logins::Refresh`), then sent with
//! the new key: both on the call's own token of the loop, so a renewal blocks nothing else.

use std::time::Instant;

use serde_json::Value;

use super::logins::{Outcome, Refresh};
use super::remote::RemoteProvider;
use super::{CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider};
use crate::transcript::Message;

/// The request kept while the token is renewed (a renewal comes once per token's life, so the
/// copy is rare).
struct KeptRequest {
    system: Option<String>,
    messages: Vec<Message>,
    model: String,
    tools: Vec<Value>,
    reasoning_effort: Option<String>,
    session_id: Option<String>,
}

impl KeptRequest {
    fn of(req: &ModelRequest<'_>) -> KeptRequest {
        KeptRequest {
            system: req.system.map(str::to_string),
            messages: req.messages.to_vec(),
            model: req.model.to_string(),
            tools: req.tools.to_vec(),
            reasoning_effort: req.reasoning_effort.map(str::to_string),
            session_id: req.session_id.map(str::to_string),
        }
    }

    fn view(&self) -> ModelRequest<'_> {
        ModelRequest {
            system: self.system.as_deref(),
            messages: &self.messages,
            model: &self.model,
            tools: &self.tools,
            reasoning_effort: self.reasoning_effort.as_deref(),
            session_id: self.session_id.as_deref(),
        }
    }
}

pub struct RenewFirst {
    refresh: Refresh,
    request: KeptRequest,
    /// The endpoint the request goes to once the key is had.
    to: RemoteProvider,
    /// The model's call, once the key is had.
    ask: Option<Box<dyn ModelCall>>,
}

impl RenewFirst {
    pub fn new(refresh: Refresh, req: &ModelRequest<'_>, to: RemoteProvider) -> RenewFirst {
        RenewFirst {
            refresh,
            request: KeptRequest::of(req),
            to,
            ask: None,
        }
    }
}

impl ModelCall for RenewFirst {
    fn advance(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        if let Some(ask) = &mut self.ask {
            return ask.advance(ctx, now, out);
        }
        let mut notices = Vec::new();
        let outcome = self.refresh.advance(ctx.slot, now, &mut notices);
        out.extend(notices.into_iter().map(ModelEvent::Notice));
        match outcome {
            Outcome::Wait(deadline) => Progress::Wait(deadline),
            Outcome::Failed(why) => {
                out.push(ModelEvent::Failed(why));
                Progress::Finished
            }
            Outcome::Key(key) => {
                self.to.use_key(key);
                let ask = self
                    .ask
                    .insert(self.to.start(self.request.view(), ctx, now));
                ask.advance(ctx, now, out)
            }
        }
    }

    fn abort(&mut self, ctx: &mut CallContext<'_>) {
        self.refresh.abort(ctx.slot);
        if let Some(ask) = &mut self.ask {
            ask.abort(ctx);
        }
    }

    fn take_connection(&mut self) -> Option<Box<dyn std::any::Any>> {
        self.ask.as_mut().and_then(|a| a.take_connection())
    }
}
