//! Chat Completions: `POST {base}/chat/completions` with `stream: true`, its `choices[].delta`
//! events and `data: [DONE]`.

use serde_json::{Value, json};

use super::{Decoder, DraftCalls, Wire, WireRequest, parse_event};
use crate::model::endpoint::Endpoint;
use crate::model::{ModelEvent, ModelRequest, TokenUsage};
use crate::model::{caching, providers};
use crate::transcript::{Message, Role};

/// The system prompt when a request brings none.
pub const SYSTEM_PROMPT: &str = "You are a helpful assistant working in the user's terminal. \
You can run shell commands with the `terminal` tool; report what they printed.";

pub fn request(req: &ModelRequest<'_>, to: &Endpoint) -> WireRequest {
    let mut messages = request_messages(req.system, req.messages);
    if let Some(layout) =
        caching::policy(&to.provider, &to.base_url, Wire::ChatCompletions, req.model)
    {
        mark_for_cache(&mut messages, req.messages, layout);
    }
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    // An empty list is an error to some servers: no tools, no key.
    if !req.tools.is_empty() {
        body["tools"] = json!(req.tools);
    }
    add_knobs(&mut body, req, to);
    if crate::model::fast::priority(req) {
        body["service_tier"] = json!("priority");
    }
    let mut headers = vec![("Accept".to_string(), "text/event-stream".to_string())];
    if let Some(key) = to.api_key.as_deref().filter(|k| !k.is_empty()) {
        headers.push(("Authorization".into(), format!("Bearer {key}")));
    }
    WireRequest {
        path: "/chat/completions",
        headers,
        body,
    }
}

/// The answer's length limit and its reasoning, in the fields each provider reads (Hermes'
/// per-provider rules).
fn add_knobs(body: &mut Value, req: &ModelRequest<'_>, to: &Endpoint) {
    let model = req.model.to_ascii_lowercase();
    let family = model.rsplit('/').next().unwrap_or(&model);
    // OpenAI's newer models (and its hosts) take `max_completion_tokens`.
    let completion_field = ["api.openai.com", "openai.azure.com", "githubcopilot.com"]
        .iter()
        .any(|h| providers::host_within(&to.base_url, h))
        || ["gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4"]
            .iter()
            .any(|p| family.starts_with(p));
    let limit = req
        .limits
        .max_tokens
        .or(to.max_tokens)
        .or((to.provider == "nvidia").then_some(16_384))
        .or_else(|| super::messages::models::known_output_limit(&model));
    if let Some(n) = limit {
        let field = if completion_field {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[field] = json!(n);
    }
    if let Some(t) = req.limits.temperature {
        body["temperature"] = json!(t);
    }
    let effort = req
        .reasoning_effort
        .or(to.reasoning_effort.as_deref())
        .map(str::to_ascii_lowercase);
    let off = matches!(
        effort.as_deref(),
        Some("none" | "false" | "disabled" | "off")
    );
    let host = providers::host_of(&to.base_url);
    if to.base_url.contains("openrouter")
        || providers::host_within(&to.base_url, "nousresearch.com")
    {
        let nous = host.ends_with("nousresearch.com");
        let reasons = nous
            || (!to.base_url.contains("api.mistral.ai")
                && [
                    "deepseek/",
                    "anthropic/",
                    "openai/",
                    "x-ai/",
                    "google/gemini-2",
                    "qwen/qwen3",
                    "tencent/hy3-preview",
                ]
                .iter()
                .any(|p| model.starts_with(p)));
        match (reasons, off) {
            (false, _) => {}
            // Nous may serve a model that cannot stop reasoning: off is left unsaid there.
            (true, true) if nous => {}
            (true, true) => body["reasoning"] = json!({"enabled": false}),
            (true, false) => {
                let level = match effort.as_deref().unwrap_or("medium") {
                    "ultra" | "max" if model.contains("gpt-5.6") => "max",
                    "ultra" | "max" => "high",
                    other => other,
                };
                body["reasoning"] = json!({"enabled": true, "effort": level});
            }
        }
        return;
    }
    match to.provider.as_str() {
        p if p.starts_with("kimi-coding") => {
            if !off {
                // Kimi takes low, medium or high.
                let level = match effort.as_deref() {
                    Some(l @ ("low" | "high")) => l,
                    Some(_) | None => "medium",
                };
                body["reasoning_effort"] = json!(level);
            }
            body["thinking"] = json!({"type": if off { "disabled" } else { "enabled" }});
        }
        "deepseek" if family.contains("reasoner") || family.starts_with("deepseek-v4") => {
            if let Some(level) = effort.as_deref().filter(|_| !off) {
                let level = match level {
                    "xhigh" | "max" | "ultra" => "max",
                    other => other,
                };
                body["reasoning_effort"] = json!(level);
            }
            body["thinking"] = json!({"type": if off { "disabled" } else { "enabled" }});
        }
        "tencent-tokenhub" if !off => {
            body["reasoning_effort"] = json!(effort.as_deref().unwrap_or("high"));
        }
        p if (p == "custom" || p.starts_with("custom:")) && off => {
            body["reasoning_effort"] = json!("none");
            if host == "ollama.com" || to.base_url.contains(":11434") {
                body["think"] = json!(false);
            }
        }
        _ => {}
    }
}

/// The chat messages of a transcript, in the OpenAI shape, after the system prompt (`None`:
/// a short default).
pub fn request_messages(system: Option<&str>, transcript: &[Message]) -> Vec<Value> {
    let mut out = vec![json!({"role": "system", "content": system.unwrap_or(SYSTEM_PROMPT)})];
    for m in transcript {
        let v = match m.role {
            Role::User if let Some(parts) = super::parts::of(m) => {
                json!({"role": "user", "content": super::parts::chat(&parts)})
            }
            Role::User | Role::System => {
                json!({"role": m.role.as_str(), "content": m.content.as_deref().unwrap_or("")})
            }
            Role::Assistant => {
                let mut v = json!({"role": "assistant", "content": m.content});
                if let Some(calls) = m
                    .tool_calls
                    .as_deref()
                    .and_then(|t| serde_json::from_str::<Value>(t).ok())
                {
                    v["tool_calls"] = calls;
                }
                v
            }
            Role::Tool => json!({
                "role": "tool",
                "tool_call_id": m.tool_call_id.as_deref().unwrap_or(""),
                "content": m.content.as_deref().unwrap_or(""),
            }),
        };
        out.push(v);
    }
    out
}

/// Cache breakpoints on the system prompt (the first message) and the last three messages that
/// can carry one, each on its content as a text part (the "envelope" layout OpenRouter and the
/// other proxies honour).
fn mark_for_cache(messages: &mut [Value], transcript: &[Message], layout: caching::Layout) {
    let marked = caching::marked(transcript, layout);
    // The request's messages are the system prompt, then one per transcript message.
    let at = std::iter::once(0).chain(marked.into_iter().map(|i| i + 1));
    for i in at {
        let Some(m) = messages.get_mut(i) else {
            continue;
        };
        if let Some(text) = m["content"].as_str().filter(|t| !t.is_empty()) {
            m["content"] =
                json!([{"type": "text", "text": text, "cache_control": caching::marker()}]);
        }
    }
}

/// What arrived of a streamed chat completion.
#[derive(Default)]
pub struct ChatDecoder {
    calls: DraftCalls,
    finish_reason: Option<String>,
    usage: TokenUsage,
}

impl Decoder for ChatDecoder {
    fn on_data(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<bool, String> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        let v = parse_event(data)?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_string);
            return Err(format!("the model reported an error: {msg}"));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = usage_of(u);
        }
        let Some(choices) = v.get("choices").and_then(Value::as_array) else {
            return Ok(false);
        };
        for choice in choices {
            let delta = &choice["delta"];
            if let Some(t) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                out.push(ModelEvent::Text(t.to_string()));
            }
            for key in ["reasoning_content", "reasoning"] {
                if let Some(t) = delta
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    out.push(ModelEvent::Reasoning(t.to_string()));
                }
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (pos, c) in calls.iter().enumerate() {
                    let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                    let f = &c["function"];
                    self.calls.add(
                        index,
                        c.get("id").and_then(Value::as_str),
                        f.get("name").and_then(Value::as_str),
                        f.get("arguments").and_then(Value::as_str),
                        out,
                    );
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_string());
            }
        }
        Ok(false)
    }

    fn whole_at_eof(&self) -> bool {
        self.finish_reason.is_some()
    }

    fn finish(&mut self, out: &mut Vec<ModelEvent>) {
        let reason = self.finish_reason.take().unwrap_or_else(|| "stop".into());
        self.calls.finish(reason, self.usage, out);
    }
}

/// The counts of a `usage` object: OpenAI's names (`prompt_tokens_details.cached_tokens`,
/// `completion_tokens_details.reasoning_tokens`), the Responses/Anthropic-style ones
/// (`input_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`), and OpenRouter's
/// `cost` (US dollars) and `prompt_tokens_details.cache_write_tokens`.
pub fn usage_of(u: &Value) -> TokenUsage {
    let at = |path: &[&str]| {
        path.iter()
            .try_fold(u, |v, key| v.get(key))
            .and_then(Value::as_u64)
    };
    let first = |paths: &[&[&str]]| paths.iter().find_map(|p| at(p)).unwrap_or(0);
    TokenUsage {
        input: first(&[&["prompt_tokens"], &["input_tokens"]]),
        output: first(&[&["completion_tokens"], &["output_tokens"]]),
        cache_read: first(&[
            &["prompt_tokens_details", "cached_tokens"],
            &["input_tokens_details", "cached_tokens"],
            &["cache_read_input_tokens"],
        ]),
        cache_write: first(&[
            &["prompt_tokens_details", "cache_write_tokens"],
            &["cache_creation_input_tokens"],
        ]),
        reasoning: first(&[
            &["completion_tokens_details", "reasoning_tokens"],
            &["output_tokens_details", "reasoning_tokens"],
        ]),
        cost_usd: u
            .get("cost")
            .and_then(Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcripts_map_to_chat_messages() {
        let mut call = Message::new(Role::Assistant, None, 0.0);
        call.tool_calls = Some(
            r#"[{"id":"c1","type":"function","function":{"name":"terminal","arguments":"{}"}}]"#
                .into(),
        );
        let mut result = Message::new(Role::Tool, Some("out".into()), 0.0);
        result.tool_call_id = Some("c1".into());
        let msgs = request_messages(
            None,
            &[
                Message::new(Role::User, Some("hi".into()), 0.0),
                call,
                result,
            ],
        );
        assert_eq!(msgs[0]["role"], "system");
        assert_eq!(msgs[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(msgs[2]["tool_calls"][0]["id"], "c1");
        assert_eq!(msgs[2]["content"], Value::Null);
        assert_eq!(
            msgs[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "out"})
        );
    }

    #[test]
    fn openrouter_claude_gets_breakpoints_on_content_parts() {
        let mut call = Message::new(Role::Assistant, None, 0.0);
        call.tool_calls = Some(
            r#"[{"id":"c1","type":"function","function":{"name":"terminal","arguments":"{}"}}]"#
                .into(),
        );
        let mut result = Message::new(Role::Tool, Some("out".into()), 0.0);
        result.tool_call_id = Some("c1".into());
        let t = [
            Message::new(Role::User, Some("one".into()), 0.0),
            Message::new(Role::Assistant, Some("two".into()), 0.0),
            Message::new(Role::User, Some("three".into()), 0.0),
            call,
            result,
        ];
        let req = ModelRequest {
            system: Some("sys"),
            messages: &t,
            model: "anthropic/claude-sonnet-4.6",
            tools: &[],
            reasoning_effort: None,
            fast: false,
            session_id: None,
            limits: Default::default(),
        };
        let to = Endpoint::new(
            "openrouter",
            "https://openrouter.ai/api/v1",
            None,
            Wire::ChatCompletions,
        );
        let body = request(&req, &to).body;
        let m = body["messages"].as_array().unwrap();
        let marker = caching::marker();
        assert_eq!(
            m[0]["content"],
            json!([{"type": "text", "text": "sys", "cache_control": marker}])
        );
        assert_eq!(m[1]["content"], "one", "beyond the last three");
        assert_eq!(m[2]["content"][0]["cache_control"], marker);
        assert_eq!(m[3]["content"][0]["text"], "three");
        assert_eq!(m[4]["content"], Value::Null, "a bare call carries none");
        assert_eq!(
            m[5],
            json!({"role": "tool", "tool_call_id": "c1",
                "content": [{"type": "text", "text": "out", "cache_control": marker}]})
        );
        // Elsewhere, plain strings.
        let plain = Endpoint::new(
            "openai",
            "https://api.openai.com/v1",
            None,
            Wire::ChatCompletions,
        );
        let body = request(&req, &plain).body;
        assert_eq!(body["messages"][0]["content"], "sys");
        assert!(!body.to_string().contains("cache_control"));
    }

    /// The knobs' fields of a request to `provider` at `base` for `model`.
    fn knobs(provider: &str, base: &str, model: &str, effort: Option<&str>) -> Value {
        let req = ModelRequest {
            system: None,
            messages: &[],
            model,
            tools: &[],
            reasoning_effort: effort,
            fast: false,
            session_id: None,
            limits: Default::default(),
        };
        let mut to = Endpoint::new(provider, base, None, Wire::ChatCompletions);
        to.reasoning_effort = Some("low".into());
        let body = request(&req, &to).body;
        let keys = [
            "max_tokens",
            "max_completion_tokens",
            "reasoning",
            "reasoning_effort",
            "thinking",
            "think",
        ];
        Value::Object(
            keys.iter()
                .filter_map(|k| body.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect(),
        )
    }

    #[test]
    fn each_provider_gets_its_reasoning_and_length_fields() {
        let or = "https://openrouter.ai/api/v1";
        assert_eq!(
            knobs(
                "openrouter",
                or,
                "anthropic/claude-sonnet-4.6",
                Some("ultra")
            ),
            json!({"max_tokens": 64000, "reasoning": {"enabled": true, "effort": "high"}})
        );
        // The endpoint's level when the session sets none; off is said on OpenRouter.
        assert_eq!(
            knobs("openrouter", or, "openai/gpt-5", None)["reasoning"]["effort"],
            "low"
        );
        assert_eq!(
            knobs("openrouter", or, "openai/gpt-5", Some("none"))["reasoning"],
            json!({"enabled": false})
        );
        // A model OpenRouter does not reason with gets nothing.
        assert_eq!(
            knobs("openrouter", or, "meta-llama/llama-3-70b", None),
            json!({})
        );
        assert_eq!(
            knobs("openai-api", "https://api.openai.com/v1", "gpt-4o", None),
            json!({})
        );
        assert_eq!(
            knobs(
                "kimi-coding",
                "https://api.moonshot.ai/v1",
                "kimi-k2",
                Some("none")
            ),
            json!({"thinking": {"type": "disabled"}})
        );
        assert_eq!(
            knobs(
                "deepseek",
                "https://api.deepseek.com/v1",
                "deepseek-reasoner",
                Some("xhigh")
            ),
            json!({"reasoning_effort": "max", "thinking": {"type": "enabled"}})
        );
        assert_eq!(
            knobs(
                "custom",
                "http://127.0.0.1:11434/v1",
                "llama3",
                Some("none")
            ),
            json!({"reasoning_effort": "none", "think": false})
        );
        assert_eq!(
            knobs("nvidia", "https://integrate.api.nvidia.com/v1", "m", None),
            json!({"max_tokens": 16384})
        );
        let mut to = Endpoint::new("custom", "http://h/v1", None, Wire::ChatCompletions);
        to.max_tokens = Some(900);
        let req = ModelRequest {
            system: None,
            messages: &[],
            model: "gpt-5-mini",
            tools: &[],
            reasoning_effort: None,
            fast: false,
            session_id: None,
            limits: Default::default(),
        };
        assert_eq!(request(&req, &to).body["max_completion_tokens"], 900);
    }

    #[test]
    fn usage_reads_cache_reasoning_and_cost_fields() {
        let openai = json!({"prompt_tokens": 100, "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 5},
            "completion_tokens_details": {"reasoning_tokens": 7}, "cost": 0.0025});
        let u = usage_of(&openai);
        assert_eq!(
            (u.input, u.output, u.cache_read, u.cache_write, u.reasoning),
            (100, 20, 60, 5, 7)
        );
        assert_eq!(u.cost_usd, Some(0.0025));
        let anthropic = json!({"input_tokens": 9, "output_tokens": 3,
            "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2});
        let u = usage_of(&anthropic);
        assert_eq!(
            (u.input, u.output, u.cache_read, u.cache_write, u.reasoning),
            (9, 3, 4, 2, 0)
        );
        assert_eq!(u.cost_usd, None);
        assert_eq!(
            usage_of(&json!({"cost": -1, "prompt_tokens": "x"})),
            TokenUsage::default()
        );
    }

    #[test]
    fn streamed_tool_calls_are_put_together_by_index() {
        let mut d = ChatDecoder::default();
        let mut out = Vec::new();
        for data in [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"term","arguments":"{\"x\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"inal","arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        ] {
            assert!(!d.on_data(data, &mut out).unwrap());
        }
        assert!(d.whole_at_eof());
        assert!(d.on_data("[DONE]", &mut out).unwrap());
        d.finish(&mut out);
        assert_eq!(out[0], ModelEvent::ToolDrafting("term".into()));
        assert_eq!(
            out[1],
            ModelEvent::ToolCall(crate::model::ToolCall {
                id: "a".into(),
                name: "terminal".into(),
                arguments: "{\"x\":1}".into()
            })
        );
        assert!(matches!(&out[2], ModelEvent::Done { finish_reason, usage }
            if finish_reason == "tool_calls" && usage.input == 3));
    }
}
