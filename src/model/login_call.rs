//! A model call on a login's token: renewed first (`logins::Refresh`) when it expires, or
//! renewed once after the server refused it (HTTP 401), then the request sent with the new
//! key: all on the call's own token of the loop, so a renewal blocks nothing else.

use std::time::Instant;

use serde_json::Value;

use super::logins::{Keeper, Outcome, Refresh};
use super::remote::RemoteProvider;
use super::{CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider};
use crate::transcript::Message;

/// One step of `call` inside a wrapper that may send the request again elsewhere (another key,
/// a fallback provider): its progress, and, when it finished failing before anything was shown
/// (`said` keeps whether text, reasoning or a tool call was), where its `Failed` event is in `out`.
/// What was shown cannot be taken back, so a failure after it stands.
pub(super) fn advance_watching(
    call: &mut dyn ModelCall,
    said: &mut bool,
    ctx: &mut CallContext<'_>,
    now: std::time::Instant,
    out: &mut Vec<ModelEvent>,
) -> (Progress, Option<usize>) {
    let from = out.len();
    let progress = call.advance(ctx, now, out);
    *said |= out[from..].iter().any(|e| {
        matches!(
            e,
            ModelEvent::Text(_)
                | ModelEvent::Reasoning(_)
                | ModelEvent::ToolCall(_)
                | ModelEvent::ToolDrafting(_)
        )
    });
    let failed = out[from..]
        .iter()
        .position(|e| matches!(e, ModelEvent::Failed(_)))
        .filter(|_| progress == Progress::Finished && !*said);
    (progress, failed.map(|at| from + at))
}

/// The request kept for a renewal: sent again with the new key (a copy per call on a login's
/// token, small beside the request's own serialisation).
pub(super) struct KeptRequest {
    system: Option<String>,
    messages: Vec<Message>,
    model: String,
    tools: Vec<Value>,
    reasoning_effort: Option<String>,
    fast: bool,
    session_id: Option<String>,
    limits: super::CallLimits,
}

impl KeptRequest {
    pub(super) fn of(req: &ModelRequest<'_>) -> KeptRequest {
        KeptRequest {
            system: req.system.map(str::to_string),
            messages: req.messages.to_vec(),
            model: req.model.to_string(),
            tools: req.tools.to_vec(),
            reasoning_effort: req.reasoning_effort.map(str::to_string),
            fast: req.fast,
            session_id: req.session_id.map(str::to_string),
            limits: req.limits,
        }
    }

    pub(super) fn view(&self) -> ModelRequest<'_> {
        ModelRequest {
            system: self.system.as_deref(),
            messages: &self.messages,
            model: &self.model,
            tools: &self.tools,
            reasoning_effort: self.reasoning_effort.as_deref(),
            fast: self.fast,
            session_id: self.session_id.as_deref(),
            limits: self.limits,
        }
    }
}

enum Phase {
    /// The login's token being renewed; the request goes out once it is had.
    Renewing(Refresh),
    /// The request sent. `may_renew`: the key it carries, when a refusal (HTTP 401) may renew
    /// the token once and send it again.
    Asking {
        call: Box<dyn ModelCall>,
        may_renew: Option<(Keeper, String)>,
    },
}

/// A model call on a login's token: renewed first when it is about to expire, or renewed once
/// and sent again when the server refuses it early (revoked, expired before its time), as
/// Hermes' agent retries a 401 after a forced refresh.
pub struct LoginCall {
    phase: Phase,
    request: KeptRequest,
    /// The endpoint the request goes to with a renewed key.
    to: RemoteProvider,
}

impl LoginCall {
    /// Renew the token, then send the request.
    pub fn renewing_first(refresh: Refresh, req: &ModelRequest<'_>, to: RemoteProvider) -> Self {
        LoginCall {
            phase: Phase::Renewing(refresh),
            request: KeptRequest::of(req),
            to,
        }
    }

    /// `first` carries `key`, `login`'s token; a refusal renews it once.
    pub fn renewing_on_refusal(
        first: Box<dyn ModelCall>,
        login: Keeper,
        key: String,
        req: &ModelRequest<'_>,
        to: RemoteProvider,
    ) -> Self {
        LoginCall {
            phase: Phase::Asking {
                call: first,
                may_renew: Some((login, key)),
            },
            request: KeptRequest::of(req),
            to,
        }
    }
}

impl ModelCall for LoginCall {
    fn advance(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        loop {
            match &mut self.phase {
                Phase::Asking { call, may_renew } => {
                    let mut events = Vec::new();
                    let progress = call.advance(ctx, now, &mut events);
                    let refused = progress == Progress::Finished && call.key_refused();
                    match may_renew.take_if(|_| refused) {
                        Some((login, key)) => {
                            // The refusal's message gives way to the renewal's outcome.
                            events.retain(|e| !matches!(e, ModelEvent::Failed(_)));
                            out.extend(events);
                            out.push(ModelEvent::Notice(format!(
                                "the {} login's token was refused (HTTP 401); renewing it and \
                                 sending the request again",
                                login.login().kind.name()
                            )));
                            self.phase = Phase::Renewing(login.renew_refused(key, now));
                        }
                        None => {
                            out.extend(events);
                            return progress;
                        }
                    }
                }
                Phase::Renewing(refresh) => {
                    let mut notices = Vec::new();
                    let outcome = refresh.advance(ctx.slot, now, &mut notices);
                    out.extend(notices.into_iter().map(ModelEvent::Notice));
                    match outcome {
                        Outcome::Wait(deadline) => return Progress::Wait(deadline),
                        Outcome::Failed(why) => {
                            out.push(ModelEvent::Failed(why));
                            return Progress::Finished;
                        }
                        Outcome::Key(key) => {
                            self.to.use_key(key);
                            let call = self.to.start(self.request.view(), ctx, now);
                            self.phase = Phase::Asking {
                                call,
                                may_renew: None,
                            };
                        }
                    }
                }
            }
        }
    }

    fn abort(&mut self, ctx: &mut CallContext<'_>) {
        match &mut self.phase {
            Phase::Renewing(refresh) => refresh.abort(ctx.slot),
            Phase::Asking { call, .. } => call.abort(ctx),
        }
    }

    fn take_connection(&mut self) -> Option<Box<dyn std::any::Any>> {
        match &mut self.phase {
            Phase::Asking { call, .. } => call.take_connection(),
            Phase::Renewing(_) => None,
        }
    }

    fn may_fall_back(&self) -> bool {
        match &self.phase {
            Phase::Asking { call, .. } => call.may_fall_back(),
            Phase::Renewing(_) => false,
        }
    }

    fn failed_status(&self) -> Option<u16> {
        match &self.phase {
            Phase::Asking { call, .. } => call.failed_status(),
            Phase::Renewing(_) => None,
        }
    }
}
