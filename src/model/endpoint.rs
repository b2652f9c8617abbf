//! Where a remote model is and how it is asked: what resolution (`select.rs`) decides and the
//! wires (`wire/`) read. Plain data.

use serde_json::{Map, Value};

use super::logins::Login;
use super::wire::Wire;

/// Providers whose API follows the model asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByModel {
    /// OpenCode's gateways (`zen`: Zen's rules, else Go's).
    OpenCode { zen: bool },
    /// GitHub Copilot.
    Copilot,
}

impl ByModel {
    /// The wire `model` is asked in.
    pub fn wire(self, model: &str) -> Wire {
        let mode = match self {
            ByModel::OpenCode { zen } => super::providers::api_mode_for_opencode(zen, model),
            ByModel::Copilot => super::providers::api_mode_for_copilot(model),
        };
        Wire::from_api_mode(mode).unwrap_or(Wire::ChatCompletions)
    }
}

/// One model endpoint, resolved from flags, environment, `.env`, `auth.json` and config.yaml.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Hermes' provider id (`openrouter`, `anthropic`, `custom:lab`).
    pub provider: String,
    pub base_url: String,
    pub api_key: Option<String>,
    /// Where the key comes from (a variable's name, `model.api_key`), for a refused key's hint.
    pub key_name: String,
    pub wire: Wire,
    /// For a provider whose API depends on the model (OpenCode's, Copilot's): the rule that
    /// picks the wire of the model a request names, which a session's `/model` may change.
    pub wire_by_model: Option<ByModel>,
    /// The model new sessions get.
    pub model: String,
    /// Headers every request carries (a `providers:` entry's `extra_headers`, attribution).
    pub headers: Vec<(String, String)>,
    /// Merged over the top level of every request body (a `providers:` entry's `extra_body`).
    pub extra_body: Map<String, Value>,
    /// The answer's length limit (`model.max_tokens`; `None`: the wire's default).
    pub max_tokens: Option<u64>,
    /// `agent.reasoning_effort` (a session's `/reasoning` overrides it).
    pub reasoning_effort: Option<String>,
    /// `agent.service_tier: fast`: the fast mode new sessions start with (`/fast` sets it).
    pub fast: bool,
    /// The Hermes login in auth.json the key comes from, renewed before it expires.
    pub login: Option<Login>,
}

impl Endpoint {
    /// An endpoint with nothing but its address, key and wire set.
    pub fn new(provider: &str, base_url: &str, api_key: Option<String>, wire: Wire) -> Endpoint {
        Endpoint {
            provider: provider.to_string(),
            base_url: base_url.to_string(),
            api_key,
            key_name: String::new(),
            wire,
            wire_by_model: None,
            model: String::new(),
            headers: Vec::new(),
            extra_body: Map::new(),
            max_tokens: None,
            reasoning_effort: None,
            fast: false,
            login: None,
        }
    }
}
