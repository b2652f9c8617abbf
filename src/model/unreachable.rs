//! The provider of a configuration that names a model this gateway cannot reach: every call
//! ends at once with the reason, so the user reads it where the answer would be (never the
//! offline model in its place).

use std::time::Instant;

use super::{CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider};

pub struct Unreachable {
    provider: String,
    model: String,
    why: String,
}

impl Unreachable {
    pub fn new(provider: &str, model: Option<&str>, why: &str) -> Unreachable {
        Unreachable {
            provider: provider.to_string(),
            model: model.unwrap_or("").to_string(),
            why: why.to_string(),
        }
    }
}

impl Provider for Unreachable {
    fn name(&self) -> &str {
        &self.provider
    }

    fn default_model(&self) -> &str {
        &self.model
    }

    fn set_default_model(&mut self, model: &str) {
        self.model = model.to_string();
    }

    fn start(
        &mut self,
        _req: ModelRequest<'_>,
        _ctx: &mut CallContext<'_>,
        _now: Instant,
    ) -> Box<dyn ModelCall> {
        Box::new(Refused(Some(self.why.clone())))
    }
}

/// A call that fails on its first advance.
pub(super) struct Refused(pub(super) Option<String>);

impl ModelCall for Refused {
    fn advance(
        &mut self,
        _: &mut CallContext<'_>,
        _: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        if let Some(why) = self.0.take() {
            out.push(ModelEvent::Failed(why));
        }
        Progress::Finished
    }

    fn abort(&mut self, _: &mut CallContext<'_>) {}
}
