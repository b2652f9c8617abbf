//! The Responses API (Hermes' `codex_responses`: api.openai.com, ChatGPT's Codex backend, xAI):
//! `POST {base}/responses` with `stream: true`, the system prompt as `instructions`, the
//! transcript as input items (`input.rs`), and the typed events of the answer (`stream.rs`).
//! Each backend wants a slightly different request (`Backend`), as Hermes sends it.

mod account;
mod call_id;
mod input;
mod stream;

use serde_json::{Map, Value, json};

use super::WireRequest;
use crate::model::ModelRequest;
use crate::model::endpoint::Endpoint;

pub use stream::ResponsesDecoder;

/// Tool types the API runs itself: declared by their type alone, passed through unchanged.
const BUILT_IN_TOOLS: [&str; 7] = [
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use_preview",
    "local_shell",
];

/// Hermes' reasoning levels, weakest first (`none` is no reasoning at all).
const LADDER: [&str; 7] = ["minimal", "low", "medium", "high", "xhigh", "max", "ultra"];

/// Which Responses backend an endpoint is: each takes a slightly different request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// ChatGPT's Codex backend (`openai-codex`, chatgpt.com): a ChatGPT login's token, no
    /// output cap, its own client headers.
    Codex,
    /// xAI (`xai`, `xai-oauth`, api.x.ai): an effort only for Grok models that take one.
    Xai,
    /// GitHub's Copilot and Models backends: no cache key, no replayed message ids.
    Github,
    /// api.openai.com and any other Responses server.
    Other,
}

impl Backend {
    pub fn of(to: &Endpoint) -> Backend {
        let host = host_of(&to.base_url);
        let under = |domain: &str| host == domain || host.ends_with(&format!(".{domain}"));
        match to.provider.as_str() {
            "openai-codex" => return Backend::Codex,
            "xai" | "xai-oauth" => return Backend::Xai,
            "copilot" | "github-copilot" | "github-models" => return Backend::Github,
            _ => {}
        }
        if under("chatgpt.com") {
            Backend::Codex
        } else if under("x.ai") {
            Backend::Xai
        } else if under("githubcopilot.com") || host == "models.github.ai" {
            Backend::Github
        } else {
            Backend::Other
        }
    }

    /// Hermes' issuer kind: who sealed a reasoning item's `encrypted_content` (only its issuer
    /// can read it back, so items of another are not replayed to this one).
    pub fn issuer(self, base_url: &str) -> String {
        match self {
            Backend::Xai => "xai_responses".into(),
            Backend::Github => "github_responses".into(),
            Backend::Codex => "codex_backend".into(),
            Backend::Other if base_url.is_empty() => "other".into(),
            Backend::Other => format!("other:{base_url}"),
        }
    }
}

/// The host of a base URL, lower-cased (empty when there is none).
fn host_of(base_url: &str) -> String {
    let rest = base_url.trim();
    let rest = rest.split_once("://").map_or(rest, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    host.to_ascii_lowercase()
}

/// The body and headers of `req` for `to`, as Hermes sends them to that backend.
pub fn request(req: &ModelRequest<'_>, to: &Endpoint) -> WireRequest {
    let backend = Backend::of(to);
    let instructions = req
        .system
        .filter(|s| !s.trim().is_empty())
        .unwrap_or(super::chat::SYSTEM_PROMPT);
    let tools = tools(req.tools);
    let issuer = backend.issuer(&to.base_url);
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("instructions".into(), json!(instructions));
    let input = input::items(req.messages, backend == Backend::Github, &issuer);
    body.insert("input".into(), Value::Array(input));
    // Nothing is kept server-side: every request carries the whole conversation.
    body.insert("store".into(), json!(false));
    let scope = cache_scope(req.session_id.unwrap_or(""));
    let cache_key = prompt_cache_key(scope, instructions, &tools);
    match backend {
        Backend::Github => {}
        // xAI reads the key only with a conversation to route by.
        Backend::Xai if req.session_id.is_none() => {}
        _ => {
            body.insert("prompt_cache_key".into(), json!(cache_key));
        }
    }
    // An empty list is an error to some servers: no tools, no keys.
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
        body.insert("parallel_tool_calls".into(), json!(true));
    }
    reasoning_fields(&mut body, backend, req, to);
    if crate::model::fast::priority(req) {
        body.insert("service_tier".into(), json!("priority"));
    }
    // The Codex backend refuses an output cap; a side call's temperature is kept from it too.
    if backend != Backend::Codex {
        if let Some(max) = req.limits.max_tokens.or(to.max_tokens) {
            body.insert("max_output_tokens".into(), json!(max));
        }
        if let Some(t) = req.limits.temperature {
            body.insert("temperature".into(), json!(t));
        }
    }
    body.insert("stream".into(), json!(true));
    WireRequest {
        path: "/responses",
        headers: headers(backend, to, req.session_id, scope, &cache_key),
        body: Value::Object(body),
    }
}

/// The key, and the headers a backend wants of its clients.
fn headers(
    backend: Backend,
    to: &Endpoint,
    session_id: Option<&str>,
    scope: &str,
    cache_key: &str,
) -> Vec<(String, String)> {
    let mut headers = vec![("Accept".to_string(), "text/event-stream".to_string())];
    let key = to.api_key.as_deref().filter(|k| !k.is_empty());
    if let Some(key) = key {
        headers.push(("Authorization".into(), format!("Bearer {key}")));
    }
    let mut add = |name: &str, value: &str| headers.push((name.into(), value.into()));
    match backend {
        // What the Codex CLI sends: the backend serves the clients it knows.
        Backend::Codex => {
            add("User-Agent", "codex_cli_rs/0.0.0 (Hermes Agent)");
            add("originator", "codex_cli_rs");
            if let Some(account) = key.and_then(account::chatgpt_account_id) {
                add("ChatGPT-Account-ID", &account);
            }
            if let Some(id) = session_id.filter(|s| !s.is_empty()) {
                add("session_id", id);
            }
            add("x-client-request-id", cache_key);
        }
        // Keeps a conversation on one of xAI's servers (and its cache warm).
        Backend::Xai if session_id.is_some_and(|s| !s.is_empty()) => {
            add("x-grok-conv-id", scope);
        }
        _ => {}
    }
    headers
}

/// The offered tools in the Responses shape: a function's name, description and parameters
/// at the top level instead of under `function`.
fn tools(offered: &[Value]) -> Vec<Value> {
    offered
        .iter()
        .filter_map(|t| {
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
            if BUILT_IN_TOOLS.contains(&kind) {
                return Some(t.clone());
            }
            let f = t.get("function")?;
            let name = f.get("name").and_then(Value::as_str)?;
            if name.trim().is_empty() {
                return None;
            }
            Some(json!({
                "type": "function",
                "name": name,
                "description": f.get("description").cloned().unwrap_or(json!("")),
                "strict": false,
                "parameters": f.get("parameters").cloned()
                    .unwrap_or(json!({"type": "object", "properties": {}})),
            }))
        })
        .collect()
}

/// The logical session a cache key is scoped to: a cron job's runs share one (Hermes names
/// them `cron_<job>_<YYYYMMDD_HHMMSS>`).
fn cache_scope(session_id: &str) -> &str {
    let Some(job) = session_id.strip_prefix("cron_") else {
        return session_id;
    };
    let b = job.as_bytes();
    let stamped = b.len() > 16
        && b[b.len() - 16] == b'_'
        && b[b.len() - 7] == b'_'
        && b[b.len() - 15..b.len() - 7].iter().all(u8::is_ascii_digit)
        && b[b.len() - 6..].iter().all(u8::is_ascii_digit);
    match stamped {
        true => &session_id[..session_id.len() - 16],
        false => session_id,
    }
}

/// Hermes' `prompt_cache_key`: a hash of the scope, the instructions and the tools (sorted by
/// name, compact JSON with sorted keys), so requests with the same prefix meet in one cache.
fn prompt_cache_key(scope: &str, instructions: &str, tools: &[Value]) -> String {
    let mut sorted: Vec<&Value> = tools.iter().collect();
    let name = |t: &Value| {
        t.get("name")
            .or_else(|| t.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    sorted.sort_by_key(|t| name(t));
    // serde_json's maps are ordered by key: this is Python's `sort_keys=True` output.
    let tools_json = match sorted.is_empty() {
        true => String::new(),
        false => serde_json::to_string(&sorted).unwrap_or_default(),
    };
    let text = format!("{scope}\0{instructions}\0{tools_json}");
    format!("pck_{}", &sha256_hex(text.as_bytes())[..24])
}

fn sha256_hex(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// `reasoning` and `include`, from the session's level, else the endpoint's, else medium.
fn reasoning_fields(
    body: &mut Map<String, Value>,
    backend: Backend,
    req: &ModelRequest,
    to: &Endpoint,
) {
    let wanted = req
        .reasoning_effort
        .or(to.reasoning_effort.as_deref())
        .map(|e| e.trim().to_ascii_lowercase())
        .unwrap_or_default();
    // The encrypted reasoning comes back with the answer, to be replayed in later requests.
    let include = json!(["reasoning.encrypted_content"]);
    if matches!(
        wanted.as_str(),
        "none" | "false" | "disabled" | "off" | "no"
    ) {
        if !matches!(backend, Backend::Github | Backend::Xai) {
            body.insert("include".into(), json!([]));
        }
        return;
    }
    let level = if LADDER.contains(&wanted.as_str()) {
        wanted.as_str()
    } else {
        "medium"
    };
    match backend {
        Backend::Xai => {
            if let Some(supported) = grok_efforts(req.model) {
                body.insert(
                    "reasoning".into(),
                    json!({"effort": clamp(level, supported)}),
                );
            }
            body.insert("include".into(), include);
        }
        // GitHub takes its own reasoning object, which Hermes reads from its provider profile.
        Backend::Github => {}
        Backend::Codex | Backend::Other => {
            let effort = clamp(level, codex_efforts(req.model));
            body.insert(
                "reasoning".into(),
                json!({"effort": effort, "summary": "auto"}),
            );
            body.insert("include".into(), include);
        }
    }
}

/// The model's name without an aggregator's `vendor/` prefix, lower-cased.
fn bare_model(model: &str) -> String {
    let m = model.trim().to_ascii_lowercase();
    m.rsplit('/').next().unwrap_or("").to_string()
}

/// The levels an OpenAI model takes on this API (`minimal` never; `max` from gpt-5.6 on).
fn codex_efforts(model: &str) -> &'static [&'static str] {
    let m = bare_model(model);
    if m.contains("gpt-5.6") || m.starts_with("gpt-6") {
        &["low", "medium", "high", "xhigh", "max"]
    } else {
        &["low", "medium", "high", "xhigh"]
    }
}

/// The levels a Grok model takes, or `None` for the many that refuse an effort at all.
fn grok_efforts(model: &str) -> Option<&'static [&'static str]> {
    let m = bare_model(model);
    let takes = [
        "grok-3-mini",
        "grok-4.20-multi-agent",
        "grok-4.3",
        "grok-4.5",
        "grok-4.6",
    ];
    if !takes.iter().any(|p| m.starts_with(p)) {
        return None;
    }
    match m == "grok-4.6" || m.starts_with("grok-4.6-") {
        true => Some(&["low", "medium", "high", "xhigh"]),
        false => Some(&["low", "medium", "high"]),
    }
}

/// `level` if the model takes it, else the nearest weaker level it takes (never a costlier
/// one), else its weakest.
fn clamp(level: &str, supported: &[&'static str]) -> &'static str {
    let rank = |l: &str| LADDER.iter().position(|x| *x == l).unwrap_or(0);
    let want = rank(level);
    supported
        .iter()
        .rev()
        .find(|l| rank(l) <= want)
        .or(supported.first())
        .copied()
        .unwrap_or("medium")
}

#[cfg(test)]
mod tests;
