//! Hermes' fallback providers (`fallback_providers:` of config.yaml, a list of `{provider,
//! model, base_url?, api_key?}`, and the older single `fallback_model:`): when a model call
//! fails in a way Hermes falls back on ([`super::ModelCall::may_fall_back`]) before it said
//! anything, the same request goes to the next of them, announced as a notice. As in Hermes,
//! a turn that fell back stays on that fallback for its later calls (those after its tool
//! results), and the next prompt tries the configured provider first.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Instant;

use yaml_rust2::Yaml;

use super::endpoint::Endpoint;
use super::login_call::{KeptRequest, advance_watching};
use super::remote::RemoteProvider;
use super::{CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider};
use crate::transcript::Role;

/// One fallback as config.yaml names it (both `provider` and `model`, as Hermes requires).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub provider: String,
    pub model: String,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
}

/// The fallbacks config.yaml names, in order: `fallback_providers:`, then `fallback_model:`
/// unless the list has it already (Hermes merges them, the list first).
pub fn chain(config: &Yaml) -> Vec<Entry> {
    let entry = |y: &Yaml| {
        let text = |k: &str| {
            y[k].as_str()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Some(Entry {
            provider: text("provider")?,
            model: text("model")?,
            base_url: text("base_url"),
            api_key: text("api_key"),
        })
    };
    let mut out: Vec<Entry> = config["fallback_providers"]
        .as_vec()
        .map(|list| list.iter().filter_map(entry).collect())
        .unwrap_or_default();
    if let Some(single) = entry(&config["fallback_model"])
        && !out.contains(&single)
    {
        out.push(single);
    }
    out
}

/// Sessions whose fallback is remembered at most.
const PINNED_MAX: usize = 1024;

/// The fallback (its place in the chain) each session's turn in flight fell back to, by
/// stored session id: shared by the provider and its calls, on the loop's one thread.
type Pinned = Rc<RefCell<HashMap<String, usize>>>;

/// A provider with the fallbacks its calls may go on to.
pub struct WithFallbacks {
    primary: Box<dyn Provider>,
    fallbacks: Vec<(RemoteProvider, String)>,
    pinned: Pinned,
}

impl WithFallbacks {
    /// `primary`, falling back on each of `fallbacks` (an endpoint and the model asked of it).
    pub fn new(primary: Box<dyn Provider>, fallbacks: Vec<(RemoteProvider, String)>) -> Self {
        WithFallbacks {
            primary,
            fallbacks,
            pinned: Rc::default(),
        }
    }

    /// The fallbacks from place `from` on, each with its place, for a call to go through.
    fn rest(&self, from: usize) -> VecDeque<(usize, RemoteProvider, String)> {
        self.fallbacks
            .iter()
            .enumerate()
            .skip(from)
            .map(|(i, (p, model))| (i, p.detached(), model.clone()))
            .collect()
    }
}

impl Provider for WithFallbacks {
    fn name(&self) -> &str {
        self.primary.name()
    }

    fn default_model(&self) -> &str {
        self.primary.default_model()
    }

    fn set_default_model(&mut self, model: &str) {
        self.primary.set_default_model(model);
    }

    fn set_fast(&mut self, on: bool) {
        self.primary.set_fast(on);
    }

    fn endpoint(&self) -> Option<&Endpoint> {
        self.primary.endpoint()
    }

    fn recycle(&mut self, connection: Box<dyn std::any::Any>, now: Instant) {
        self.primary.recycle(connection, now);
    }

    fn start(
        &mut self,
        req: ModelRequest<'_>,
        ctx: &mut CallContext<'_>,
        now: Instant,
    ) -> Box<dyn ModelCall> {
        let request = KeptRequest::of(&req);
        let session = req.session_id.map(str::to_string);
        // A call after the turn's tool results goes on where the turn fell back to; a new
        // prompt (or anything else) starts on the configured provider again.
        let continuing = req.messages.last().is_some_and(|m| m.role == Role::Tool);
        let pinned = session.as_ref().and_then(|id| {
            let mut map = self.pinned.borrow_mut();
            if !continuing {
                map.remove(id);
            }
            map.get(id).copied()
        });
        let mut call = FallingBack {
            current: Box::new(super::unreachable::Refused(None)),
            from: self.primary.name().to_string(),
            on_primary: true,
            said: false,
            request,
            rest: VecDeque::new(),
            session,
            pinned: self.pinned.clone(),
        };
        match pinned.filter(|i| *i < self.fallbacks.len()) {
            Some(i) => {
                let mut rest = self.rest(i);
                if let Some((_, mut p, model)) = rest.pop_front() {
                    let mut req = call.request.view();
                    req.model = &model;
                    call.current = p.start(req, ctx, now);
                    call.from = p.name().to_string();
                    call.on_primary = false;
                }
                call.rest = rest;
            }
            None => {
                call.current = self.primary.start(req, ctx, now);
                call.rest = self.rest(0);
            }
        }
        Box::new(call)
    }
}

/// A call that goes on to the next fallback when the one in flight fails before saying anything.
struct FallingBack {
    current: Box<dyn ModelCall>,
    /// The provider the call in flight is on, for the notice.
    from: String,
    on_primary: bool,
    /// The call in flight has said something (text, reasoning, a tool call): its failure
    /// stands, since what was shown cannot be taken back.
    said: bool,
    request: KeptRequest,
    /// The fallbacks still to try, each with its place in the chain.
    rest: VecDeque<(usize, RemoteProvider, String)>,
    /// The stored session the call is for (`None`: a side call, never pinned).
    session: Option<String>,
    pinned: Pinned,
}

impl ModelCall for FallingBack {
    fn advance(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        let (progress, failed) =
            advance_watching(self.current.as_mut(), &mut self.said, ctx, now, out);
        let Some(at) = failed else {
            return progress;
        };
        if !self.current.may_fall_back() {
            return progress;
        }
        let Some((place, mut next, model)) = self.rest.pop_front() else {
            return progress;
        };
        let ModelEvent::Failed(why) = out.remove(at) else {
            return progress;
        };
        out.push(ModelEvent::Notice(format!(
            "{} failed ({why}); falling back to {} ({model})",
            self.from,
            next.name()
        )));
        self.current.abort(ctx);
        let mut req = self.request.view();
        req.model = &model;
        self.current = next.start(req, ctx, now);
        self.from = next.name().to_string();
        self.on_primary = false;
        if let Some(id) = &self.session {
            let mut map = self.pinned.borrow_mut();
            // Turns that ended on a fallback leave their mark until their next prompt: a
            // bound, past which a turn's later calls just try the configured provider again.
            if map.len() >= PINNED_MAX {
                map.clear();
            }
            map.insert(id.clone(), place);
        }
        Progress::Ready
    }

    fn abort(&mut self, ctx: &mut CallContext<'_>) {
        self.current.abort(ctx);
    }

    fn take_connection(&mut self) -> Option<Box<dyn std::any::Any>> {
        // A fallback's connection is to another host: never one for the primary's next call.
        self.on_primary
            .then(|| self.current.take_connection())
            .flatten()
    }

    fn key_refused(&self) -> bool {
        self.on_primary && self.current.key_refused()
    }

    fn may_fall_back(&self) -> bool {
        self.current.may_fall_back()
    }

    fn failed_status(&self) -> Option<u16> {
        self.current.failed_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Yaml {
        crate::config_file::parse(text).unwrap()
    }

    #[test]
    fn the_list_comes_first_and_the_single_one_is_not_repeated() {
        let doc = yaml(
            "fallback_providers:\n  - provider: deepseek\n    model: deepseek-chat\n  - provider: zai\n\
             fallback_model:\n  provider: openrouter\n  model: anthropic/claude-sonnet-4\n  \
             base_url: http://127.0.0.1:9/v1\n",
        );
        let got: Vec<(String, String)> = chain(&doc)
            .into_iter()
            .map(|e| (e.provider, e.model))
            .collect();
        assert_eq!(
            got,
            [
                ("deepseek".into(), "deepseek-chat".into()),
                ("openrouter".into(), "anthropic/claude-sonnet-4".into())
            ],
            "zai has no model: skipped, as Hermes disables a fallback missing either"
        );
        let doc = yaml(
            "fallback_providers:\n  - provider: deepseek\n    model: deepseek-chat\n\
             fallback_model:\n  provider: deepseek\n  model: deepseek-chat\n",
        );
        assert_eq!(chain(&doc).len(), 1);
        assert!(chain(&yaml("model:\n  provider: deepseek\n")).is_empty());
    }
}
