//! Anthropic's Messages API: `POST {base}/v1/messages` with `stream: true`, as Hermes speaks it
//! through Anthropic's SDK — the key as `x-api-key` (or `Authorization: Bearer` where the
//! endpoint or an OAuth token wants it), `anthropic-version`, the `anthropic-beta` features,
//! the system prompt apart, tools and their results as content blocks, thinking from the
//! reasoning effort, and prompt-cache breakpoints (`model/caching.rs`).

pub mod convert;
pub mod decode;
pub mod hosts;
pub mod models;

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::WireRequest;
use super::chat::SYSTEM_PROMPT;
use crate::model::endpoint::Endpoint;
use crate::model::{ModelRequest, wire::Wire};
use crate::model::{caching, fast};
use crate::transcript::Role;

pub use decode::MessagesDecoder;

/// The API version every request names.
const API_VERSION: &str = "2023-06-01";
/// Claude Code's version an OAuth request claims (Hermes asks the installed `claude`; a
/// gateway does not run programs to build a request).
const CLAUDE_CODE_VERSION: &str = "2.1.74";

/// The key and whether the body takes Claude Code's conventions (an OAuth token on Anthropic).
fn oauth_body(to: &Endpoint) -> bool {
    let key = to.api_key.as_deref().unwrap_or("");
    to.provider == "anthropic" && hosts::is_native(&to.base_url) && hosts::is_oauth_token(key)
}

pub fn request(req: &ModelRequest<'_>, to: &Endpoint) -> WireRequest {
    let base = to.base_url.as_str();
    let target = convert::Target {
        native: hosts::is_native(base),
        unsigned_thinking: hosts::is_kimi_family(base, req.model)
            || hosts::is_deepseek_anthropic(base),
        oauth: oauth_body(to),
        cache: caching::policy(&to.provider, base, Wire::AnthropicMessages, req.model),
    };
    let mut system_parts = vec![req.system.unwrap_or(SYSTEM_PROMPT)];
    system_parts.extend(
        req.messages
            .iter()
            .filter(|m| m.role == Role::System)
            .filter_map(|m| m.content.as_deref()),
    );
    let model = models::wire_name(req.model);
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("stream".into(), json!(true));
    if let Some(system) = convert::system(&system_parts, target) {
        body.insert("system".into(), system);
    }
    body.insert(
        "messages".into(),
        Value::Array(convert::messages(req.messages, target)),
    );
    let tools = convert::tools(req.tools, target.oauth);
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!({"type": "auto"}));
    }
    let effort = req.reasoning_effort.or(to.reasoning_effort.as_deref());
    let thinking = models::thinking(effort, &model, hosts::is_kimi_family(base, req.model));
    if let Some(t) = req.limits.temperature {
        // Thinking, when on, sets its own (the API takes only 1 with it).
        body.insert("temperature".into(), json!(t));
    }
    let max_tokens = req.limits.max_tokens.or(to.max_tokens);
    models::limits_and_thinking(&mut body, max_tokens, &thinking, &model);
    // Proxies would refuse the field and its beta: Anthropic's own API alone is asked.
    let speed = fast::speed(req) && target.native;
    if speed {
        body.insert("speed".into(), json!("fast"));
    }
    let mut headers = vec![("Accept".to_string(), "text/event-stream".to_string())];
    headers.extend(auth_headers(to));
    if speed && let Some((_, betas)) = headers.iter_mut().find(|(k, _)| k == "anthropic-beta") {
        betas.push(',');
        betas.push_str(fast::SPEED_BETA);
    }
    WireRequest {
        path: path(base),
        headers,
        body: Value::Object(body),
    }
}

/// `GET {base}/v1/models` (`/models` when the base ends in `/v1`) with the key's header, the
/// API version and the endpoint's betas, as the SDK's `models.list()` asks.
pub fn models_request(to: &Endpoint) -> (&'static str, Vec<(String, String)>) {
    let has_v1 = to.base_url.trim().trim_end_matches('/').ends_with("/v1");
    let path = if has_v1 { "/models" } else { "/v1/models" };
    (path, auth_headers(to))
}

/// Below the base URL: `/v1/messages`, or `/messages` when the base already ends in `/v1`
/// (Hermes drops that `/v1` and the SDK adds it back); the API version Azure's Anthropic route
/// wants after it, unless the base URL has a query of its own.
fn path(base_url: &str) -> &'static str {
    let has_v1 = base_url.trim().trim_end_matches('/').ends_with("/v1");
    let azure = hosts::is_azure_anthropic(base_url) && !base_url.contains('?');
    match (has_v1, azure) {
        (false, false) => "/v1/messages",
        (true, false) => "/messages",
        (false, true) => "/v1/messages?api-version=2025-04-15",
        (true, true) => "/messages?api-version=2025-04-15",
    }
}

/// The key's header and the endpoint's others, in Hermes' order of precedence: Kimi's
/// `/coding` (Claude Code's user agent), Bearer endpoints (MiniMax, Azure), other proxies,
/// an OAuth token on Anthropic, an API key.
fn auth_headers(to: &Endpoint) -> Vec<(String, String)> {
    let base = to.base_url.as_str();
    let key = to.api_key.as_deref().filter(|k| !k.is_empty());
    let mut betas = hosts::common_betas(base);
    let mut h: Vec<(String, String)> = vec![("anthropic-version".into(), API_VERSION.into())];
    let auth = |bearer: bool| {
        key.map(|k| match bearer {
            true => ("Authorization".to_string(), format!("Bearer {k}")),
            false => ("x-api-key".to_string(), k.to_string()),
        })
    };
    if hosts::is_kimi_coding(base) {
        h.extend(auth(false));
        h.push(("User-Agent".into(), "claude-code/0.1.0".into()));
    } else if hosts::wants_bearer(base) {
        h.extend(auth(true));
    } else if !hosts::is_native(base) || !key.is_some_and(hosts::is_oauth_token) {
        h.extend(auth(false));
    } else {
        h.extend(auth(true));
        betas.extend(["claude-code-20250219", "oauth-2025-04-20"]);
        h.push((
            "User-Agent".into(),
            format!("claude-code/{CLAUDE_CODE_VERSION} (external, cli)"),
        ));
        h.push(("x-app".into(), "cli".into()));
    }
    h.push(("anthropic-beta".into(), betas.join(",")));
    h
}

/// A reader for the answer to `req` (OAuth requests' tool names are mapped back).
pub fn decoder(req: &ModelRequest<'_>, to: &Endpoint) -> MessagesDecoder {
    if !oauth_body(to) {
        return MessagesDecoder::default();
    }
    let offered: HashSet<String> = req
        .tools
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    MessagesDecoder::unprefixing(offered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::Message;

    fn endpoint(provider: &str, base: &str, key: &str) -> Endpoint {
        Endpoint::new(provider, base, Some(key.into()), Wire::AnthropicMessages)
    }

    fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
        h.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_path_below_each_kind_of_base_url() {
        assert_eq!(path("https://api.anthropic.com"), "/v1/messages");
        assert_eq!(path("https://api.minimax.io/anthropic/v1/"), "/messages");
        assert_eq!(path("https://api.kimi.com/coding/"), "/v1/messages");
        assert_eq!(
            path("https://r.services.ai.azure.com/anthropic"),
            "/v1/messages?api-version=2025-04-15"
        );
        assert_eq!(
            path("https://r.services.ai.azure.com/anthropic?api-version=1"),
            "/v1/messages"
        );
    }

    #[test]
    fn auth_and_beta_headers_per_endpoint() {
        let h = auth_headers(&endpoint(
            "anthropic",
            "https://api.anthropic.com",
            "sk-ant-api03-k",
        ));
        assert_eq!(header(&h, "x-api-key"), Some("sk-ant-api03-k"));
        assert_eq!(header(&h, "authorization"), None);
        assert_eq!(header(&h, "anthropic-version"), Some("2023-06-01"));
        assert_eq!(
            header(&h, "anthropic-beta"),
            Some("interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14")
        );
        let h = auth_headers(&endpoint(
            "anthropic",
            "https://api.anthropic.com",
            "sk-ant-oat01-t",
        ));
        assert_eq!(header(&h, "authorization"), Some("Bearer sk-ant-oat01-t"));
        assert_eq!(header(&h, "x-api-key"), None, "one credential header only");
        assert_eq!(
            header(&h, "anthropic-beta"),
            Some(
                "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14,claude-code-20250219,oauth-2025-04-20"
            )
        );
        assert_eq!(
            header(&h, "user-agent"),
            Some("claude-code/2.1.74 (external, cli)")
        );
        assert_eq!(header(&h, "x-app"), Some("cli"));
        // A proxy's key looks like an OAuth token sometimes: still x-api-key.
        let h = auth_headers(&endpoint(
            "custom",
            "http://127.0.0.1:9/v1",
            "sk-ant-oat01-t",
        ));
        assert_eq!(header(&h, "x-api-key"), Some("sk-ant-oat01-t"));
        let h = auth_headers(&endpoint(
            "minimax",
            "https://api.minimax.io/anthropic",
            "mm",
        ));
        assert_eq!(header(&h, "authorization"), Some("Bearer mm"));
        assert_eq!(
            header(&h, "anthropic-beta"),
            Some("interleaved-thinking-2025-05-14")
        );
        let h = auth_headers(&endpoint(
            "kimi-coding",
            "https://api.kimi.com/coding",
            "sk-kimi-1",
        ));
        assert_eq!(header(&h, "x-api-key"), Some("sk-kimi-1"));
        assert_eq!(header(&h, "user-agent"), Some("claude-code/0.1.0"));
        let mut none = endpoint("custom", "http://127.0.0.1:9", "");
        none.api_key = None;
        let h = auth_headers(&none);
        assert!(header(&h, "x-api-key").is_none() && header(&h, "authorization").is_none());
    }

    fn transcript() -> Vec<Message> {
        let mut asked = Message::new(Role::Assistant, None, 0.0);
        asked.tool_calls = Some(
            json!([{"id": "toolu_01A", "type": "function",
                "function": {"name": "terminal", "arguments": "{\"command\":\"ls /tmp\"}"}}])
            .to_string(),
        );
        asked.replay.reasoning_details = Some(
            json!([{"type": "thinking", "thinking": "Run ls.", "signature": "EqQBCkgIARAB"}])
                .to_string(),
        );
        let mut result = Message::new(Role::Tool, Some("a.txt\nb.txt".into()), 0.0);
        result.tool_call_id = Some("toolu_01A".into());
        vec![
            Message::new(Role::User, Some("List /tmp".into()), 0.0),
            asked,
            result,
        ]
    }

    fn terminal_tool() -> Value {
        json!({"type": "function", "function": {"name": "terminal", "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}})
    }

    /// The note's worked example (§8): native, API key, caching, adaptive thinking.
    #[test]
    fn the_whole_request_of_hermes_worked_example() {
        let t = transcript();
        let tools = [terminal_tool()];
        let req = ModelRequest {
            system: Some("You are Hermes Agent."),
            messages: &t,
            model: "anthropic/claude-sonnet-4.6",
            tools: &tools,
            reasoning_effort: None,
            fast: false,
            session_id: None,
            limits: Default::default(),
        };
        let mut to = endpoint("anthropic", "https://api.anthropic.com", "sk-ant-api03-k");
        to.reasoning_effort = Some("xhigh".into());
        let w = request(&req, &to);
        assert_eq!(w.path, "/v1/messages");
        let marker = json!({"type": "ephemeral"});
        assert_eq!(
            w.body,
            json!({
                "model": "claude-sonnet-4-6",
                "max_tokens": 64000,
                "stream": true,
                "system": [{"type": "text", "text": "You are Hermes Agent.", "cache_control": marker}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "List /tmp", "cache_control": marker}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "Run ls.", "signature": "EqQBCkgIARAB"},
                        {"type": "tool_use", "id": "toolu_01A", "name": "terminal",
                         "input": {"command": "ls /tmp"}, "cache_control": marker},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "a.txt\nb.txt",
                         "cache_control": marker},
                    ]},
                ],
                "tools": [{"name": "terminal", "description": "Run a shell command",
                    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                        "required": ["command"]}}],
                "tool_choice": {"type": "auto"},
                "thinking": {"type": "adaptive", "display": "summarized"},
                "output_config": {"effort": "max"},
            })
        );
        // The session's level wins over the endpoint's; a legacy model gets a budget.
        let req = ModelRequest {
            model: "claude-sonnet-4-5",
            reasoning_effort: Some("high"),
            fast: false,
            ..req
        };
        let w = request(&req, &to);
        assert_eq!(
            w.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 16000})
        );
        assert_eq!(w.body["temperature"], 1);
        assert_eq!(w.body["max_tokens"], 64000);
        assert!(w.body.get("output_config").is_none());
    }

    #[test]
    fn an_oauth_request_takes_claude_codes_conventions() {
        let t = transcript();
        let tools = [terminal_tool()];
        let req = ModelRequest {
            system: Some("You are Hermes Agent."),
            messages: &t,
            model: "claude-opus-4-7",
            tools: &tools,
            reasoning_effort: None,
            fast: false,
            session_id: None,
            limits: Default::default(),
        };
        let to = endpoint("anthropic", "https://api.anthropic.com", "sk-ant-oat01-t");
        let w = request(&req, &to);
        assert_eq!(w.body["system"][0]["text"], convert::OAUTH_IDENTITY);
        assert_eq!(w.body["system"][1]["text"], "You are Claude Code.");
        assert_eq!(w.body["tools"][0]["name"], "mcp__terminal");
        assert_eq!(w.body["messages"][1]["content"][1]["name"], "mcp__terminal");
        assert!(
            w.body.get("thinking").is_none(),
            "no effort set: no thinking"
        );
        assert_eq!(w.body["max_tokens"], 128000);
        let d = decoder(&req, &to);
        let mut out = Vec::new();
        use crate::model::wire::Decoder as _;
        let mut dd = d;
        dd.on_data(
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"mcp__terminal","input":{}}}"#,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            [crate::model::ModelEvent::ToolDrafting("terminal".into())]
        );
    }

    #[test]
    fn a_proxy_gets_no_thinking_back_and_a_configured_limit() {
        let t = transcript();
        let req = ModelRequest {
            system: None,
            messages: &t,
            model: "MiniMax-M2.7",
            tools: &[],
            reasoning_effort: Some("low"),
            fast: false,
            session_id: None,
            limits: Default::default(),
        };
        let mut to = endpoint("custom", "http://127.0.0.1:9/v1", "k");
        to.max_tokens = Some(2000);
        let w = request(&req, &to);
        assert_eq!(w.path, "/messages");
        assert_eq!(
            w.body["system"], SYSTEM_PROMPT,
            "no caching here: a plain string"
        );
        assert_eq!(w.body["messages"][1]["content"][0]["type"], "tool_use");
        assert!(w.body.get("tools").is_none() && w.body.get("tool_choice").is_none());
        assert_eq!(
            w.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 4000})
        );
        assert_eq!(w.body["max_tokens"], 8096, "raised for the thinking budget");
        // A side call's cap and temperature (a title's) win over the endpoint's, thinking off.
        let req = ModelRequest {
            reasoning_effort: Some("none"),
            fast: false,
            limits: crate::model::CallLimits {
                max_tokens: Some(500),
                temperature: Some(0.3),
            },
            ..req
        };
        let w = request(&req, &to);
        assert_eq!(
            (&w.body["max_tokens"], &w.body["temperature"]),
            (&json!(500), &json!(0.3))
        );
        assert!(w.body.get("thinking").is_none(), "{}", w.body);
    }

    #[test]
    fn the_prefix_is_the_same_bytes_from_one_call_to_the_next() {
        let mut t = transcript();
        let tools = [terminal_tool()];
        let to = endpoint("anthropic", "https://api.anthropic.com", "sk-ant-api03-k");
        let body = |t: &[Message]| {
            request(
                &ModelRequest {
                    system: Some("sys"),
                    messages: t,
                    model: "claude-opus-4-7",
                    tools: &tools,
                    reasoning_effort: None,
                    fast: false,
                    session_id: None,
                    limits: Default::default(),
                },
                &to,
            )
            .body
        };
        let first = body(&t);
        t.push(Message::new(Role::Assistant, Some("two files".into()), 0.0));
        t.push(Message::new(Role::User, Some("thanks".into()), 0.0));
        let second = body(&t);
        assert_eq!(first["tools"].to_string(), second["tools"].to_string());
        assert_eq!(first["system"].to_string(), second["system"].to_string());
        // The first message lost its breakpoint to newer ones; its text is the same.
        assert_eq!(second["messages"][0]["content"], "List /tmp");
        assert_eq!(second["messages"].as_array().unwrap().len(), 5);
    }
}
