//! Model providers: the small trait the loop drives, and the built-in offline model.

pub mod auxiliary;
pub mod blocking;
pub mod caching;
pub mod catalog;
pub mod connect;
pub mod context;
pub mod endpoint;
pub mod exchange;
pub mod fallback;
pub mod fast;
pub mod http;
mod login_call;
pub mod logins;
pub mod offline;
pub mod oneshot;
pub mod pool;
pub mod pricing;
pub mod providers;
pub mod remote;
pub mod resolve;
pub mod select;
pub mod sse;
pub mod unreachable;
pub mod vision;
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
    /// What the calls whose price is known cost, in US dollars (Hermes'
    /// `estimated_cost_usd`; `None`: no call's price was known).
    pub cost_usd: Option<f64>,
    /// The part of `cost_usd` the provider itself reported (Hermes' `actual_cost_usd`).
    pub actual_cost_usd: Option<f64>,
    /// The last call's `cost_status` and `cost_source`: as in Hermes, the last call decides,
    /// so an unknown last price says the sum above is short.
    pub cost_status: pricing::CostStatus,
    pub cost_source: pricing::CostSource,
    /// The price table's version behind the latest estimate (`None`: none in this process).
    #[serde(deserialize_with = "known_version")]
    pub pricing_version: PricingVersion,
}

impl Accounting {
    /// Count one call that used `u` and cost `cost`.
    pub fn add(&mut self, u: &TokenUsage, cost: &pricing::Cost) {
        self.cache_read_tokens += u.cache_read;
        self.cache_write_tokens += u.cache_write;
        self.reasoning_tokens += u.reasoning;
        if let Some(usd) = cost.usd {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + usd);
            if cost.status == pricing::CostStatus::Actual {
                self.actual_cost_usd = Some(self.actual_cost_usd.unwrap_or(0.0) + usd);
            }
        }
        self.cost_status = cost.status;
        self.cost_source = cost.source;
        self.pricing_version = cost.pricing_version.or(self.pricing_version);
    }
}

/// A version of the price table. An alias, because serde's derive takes a `&'static str` it
/// sees in a field for a borrow from the input, which a journal read cannot give.
pub type PricingVersion = Option<&'static str>;

/// A journalled `pricing_version`, if it is still one of the table's.
fn known_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PricingVersion, D::Error> {
    let s: Option<String> = serde::Deserialize::deserialize(d)?;
    Ok(s.as_deref().and_then(pricing::known_version))
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

/// What a call may use from the loop: the slot its sockets are watched in.
pub struct CallContext<'a> {
    /// Where the call's sockets are watched: their readiness comes back to its session.
    pub slot: &'a crate::reactor::Slot,
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
    /// After `Finished`: the server refused the key (HTTP 401) before answering anything.
    fn key_refused(&self) -> bool {
        false
    }
    /// After a failure: one Hermes answers with its fallback provider (rate limits and server
    /// errors after their retries, a refused key, a model not found, the connection lost) —
    /// not one the request itself caused (a 400, a payload too large).
    fn may_fall_back(&self) -> bool {
        false
    }
    /// After a failure: the HTTP status the server answered it with (`None`: no answer).
    fn failed_status(&self) -> Option<u16> {
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
    /// The session's fast mode (`/fast`): sent to the models that sell one (`model/fast.rs`).
    pub fast: bool,
    /// The stored session id (Hermes' `session_id`): what some APIs key their prompt cache
    /// and routing on (`None`: no session).
    pub session_id: Option<&'a str>,
    /// A side call's own answer cap and temperature (a title's: Hermes' 500 and 0.3); `None`:
    /// the endpoint's.
    pub limits: CallLimits,
}

/// What a side call asks of the answer beside the endpoint's settings.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct CallLimits {
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
}

/// The providers sessions run on, for a model call: the configured one, and those a session's
/// `/model … --provider` chose.
pub struct Providers<'a> {
    pub default: &'a mut dyn Provider,
    pub switched: &'a mut [Box<dyn Provider>],
}

impl Providers<'_> {
    /// The provider named `name` (a session's), else the configured one.
    pub fn of(&mut self, name: &str) -> &mut dyn Provider {
        match self.switched.iter_mut().find(|p| p.name() == name) {
            Some(p) => p.as_mut(),
            None => &mut *self.default,
        }
    }
}

/// A model backend.
pub trait Provider {
    /// Provider name as shown to the user (`offline`, `openai`…).
    fn name(&self) -> &str;
    /// Model name used when a session names none.
    fn default_model(&self) -> &str;
    /// Begin a call. Failures to start are reported as a `Failed` event by the call.
    fn start(
        &mut self,
        req: ModelRequest<'_>,
        ctx: &mut CallContext<'_>,
        now: Instant,
    ) -> Box<dyn ModelCall>;
    /// The model new sessions get from now on (`config.set model --global`).
    fn set_default_model(&mut self, _model: &str) {}
    /// What new sessions' fast mode starts as (`/fast` changed it).
    fn set_fast(&mut self, _on: bool) {}
    /// The endpoint calls go to (its key included): for listing its models.
    fn endpoint(&self) -> Option<&endpoint::Endpoint> {
        None
    }
    /// Take back a connection a finished call left reusable (`now`: when it went idle).
    fn recycle(&mut self, _connection: Box<dyn std::any::Any>, _now: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::pricing::{self, CostSource, CostStatus};
    use super::*;

    fn call(input: u64, cache_read: u64, reported: Option<f64>) -> TokenUsage {
        TokenUsage {
            input,
            output: 10,
            cache_read,
            cost_usd: reported,
            ..Default::default()
        }
    }

    /// Hermes' rule: dollars add up, the last call's status and source stand for the session.
    #[test]
    fn the_last_call_decides_the_status_and_known_prices_add_up() {
        let mut a = Accounting::default();
        let priced = call(1_000_000, 0, None);
        a.add(
            &priced,
            &pricing::price("anthropic", "", "claude-haiku-4-5", &priced),
        );
        let reported = call(10, 0, Some(0.25));
        a.add(
            &reported,
            &pricing::price("openrouter", "", "x/y", &reported),
        );
        // $1 a million in, $5 a million out, then the $0.25 reported.
        let sum = 1.000_05 + 0.25;
        assert!(a.cost_usd.is_some_and(|c| (c - sum).abs() < 1e-12), "{a:?}");
        assert_eq!(a.actual_cost_usd, Some(0.25), "only what the provider said");
        assert_eq!(
            (a.cost_status, a.cost_source),
            (CostStatus::Actual, CostSource::ProviderCostApi)
        );
        let unpriced = call(10, 5, None);
        a.add(
            &unpriced,
            &pricing::price("deepseek", "", "deepseek-chat", &unpriced),
        );
        assert_eq!(
            a.cost_status,
            CostStatus::Unknown,
            "the last price is unknown"
        );
        assert!(
            a.cost_usd.is_some_and(|c| (c - sum).abs() < 1e-12),
            "the rest stays: {a:?}"
        );
        assert_eq!(a.pricing_version, Some("anthropic-pricing-2026-05"));
        assert_eq!(a.cache_read_tokens, 5);
    }

    /// A journal keeps the status, the source and the table's version across a restart.
    #[test]
    fn accounting_survives_the_journal() {
        let mut a = Accounting::default();
        let u = call(100, 0, None);
        a.add(&u, &pricing::price("openai-api", "", "gpt-4.1", &u));
        let text = serde_json::to_string(&a).unwrap();
        let back: Accounting = serde_json::from_str(&text).unwrap();
        assert_eq!(back, a);
        let gone = text.replace("openai-pricing-2026-03-16", "a-retired-version");
        let back: Accounting = serde_json::from_str(&gone).unwrap();
        assert_eq!(back.pricing_version, None);
        // What an older gateway journalled still reads.
        let old: Accounting =
            serde_json::from_str(r#"{"cost_usd": 0.5, "unpriced_calls": 1}"#).unwrap();
        assert_eq!(
            (old.cost_usd, old.cost_status),
            (Some(0.5), CostStatus::Unknown)
        );
    }
}
