//! The Responses wire: requests built from realistic transcripts for each backend, and the
//! decoder on recorded-looking event streams.

use serde_json::{Value, json};

use super::stream::ResponsesDecoder;
use super::*;
use crate::model::wire::{Decoder, Wire};
use crate::model::{ModelEvent, ToolCall};
use crate::transcript::{Message, Replay, Role};

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// An access token whose claims name ChatGPT account `acc-FAKE` (signature not checked).
const CODEX_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjE3Nzc2NDA0MDAsImh0dHBzOi8vYXBpLm9wZW5haS5jb20vYXV0aCI6eyJjaGF0Z3B0X2FjY291bnRfaWQiOiJhY2MtRkFLRSJ9fQ.FAKESIG";

fn endpoint(provider: &str, base_url: &str, key: &str) -> Endpoint {
    Endpoint::new(provider, base_url, Some(key.into()), Wire::CodexResponses)
}

fn msg(role: Role, text: Option<&str>) -> Message {
    Message::new(role, text.map(str::to_string), 0.0)
}

/// A tool round trip whose answer carried reasoning (one item sealed by the Codex backend, one
/// by xAI), then the final answer as a message item, then the user's next question.
fn transcript() -> Vec<Message> {
    let mut call = msg(Role::Assistant, None);
    call.tool_calls = Some(
        json!([{"id": "call_7Yx2", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"README.md\"}"}}])
        .to_string(),
    );
    call.replay = Replay {
        reasoning_details: None,
        codex_reasoning_items: Some(
            json!([
                {"type": "reasoning", "id": "rs_68a1", "encrypted_content": "gAAAA-CODEX==",
                 "summary": [{"type": "summary_text", "text": "Read the file first."}],
                 "_issuer_kind": "codex_backend"},
                {"type": "reasoning", "id": "rs_x", "encrypted_content": "XAI-BLOB",
                 "summary": [], "_issuer_kind": "xai_responses"},
            ])
            .to_string(),
        ),
        codex_message_items: None,
    };
    let mut result = msg(Role::Tool, Some("# Demo\nHello world"));
    result.tool_call_id = Some("call_7Yx2".into());
    let mut answer = msg(Role::Assistant, Some("It says hello."));
    answer.replay.codex_message_items = Some(
        json!([{"type": "message", "role": "assistant", "status": "completed", "id": "msg_9",
                "phase": "final_answer",
                "content": [{"type": "output_text", "text": "It says hello."}]}])
        .to_string(),
    );
    vec![
        msg(Role::User, Some("What is in README.md?")),
        call,
        result,
        answer,
        msg(Role::User, Some("Thanks")),
    ]
}

fn tool_schemas() -> Vec<Value> {
    vec![json!({"type": "function", "function": {
        "name": "read_file", "description": "Read a text file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}})]
}

fn ask<'a>(messages: &'a [Message], tools: &'a [Value], model: &'a str) -> ModelRequest<'a> {
    ModelRequest {
        system: Some("You are Hermes Agent."),
        messages,
        model,
        tools,
        reasoning_effort: None,
        fast: false,
        session_id: Some("20260501_101500_ab12cd"),
        limits: Default::default(),
    }
}

fn header<'a>(w: &'a WireRequest, name: &str) -> Option<&'a str> {
    w.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_codex_request_carries_the_tool_round_trip_and_the_reasoning_to_replay() {
    let messages = transcript();
    let tools = tool_schemas();
    let mut to = endpoint(
        "openai-codex",
        "https://chatgpt.com/backend-api/codex",
        CODEX_TOKEN,
    );
    to.max_tokens = Some(4096);
    let w = request(&ask(&messages, &tools, "gpt-5.4"), &to);
    assert_eq!(w.path, "/responses");
    let b = &w.body;
    assert_eq!(b["model"], "gpt-5.4");
    assert_eq!(b["instructions"], "You are Hermes Agent.");
    assert_eq!(
        b["input"],
        json!([
            {"role": "user", "content": "What is in README.md?"},
            // the xAI-sealed item is left out: only its issuer could read it
            {"type": "reasoning", "encrypted_content": "gAAAA-CODEX==",
             "summary": [{"type": "summary_text", "text": "Read the file first."}]},
            {"role": "assistant", "content": ""},
            {"type": "function_call", "call_id": "call_7Yx2", "name": "read_file",
             "arguments": "{\"path\":\"README.md\"}"},
            {"type": "function_call_output", "call_id": "call_7Yx2",
             "output": "# Demo\nHello world"},
            {"type": "message", "role": "assistant", "status": "completed", "id": "msg_9",
             "phase": "final_answer",
             "content": [{"type": "output_text", "text": "It says hello."}]},
            {"role": "user", "content": "Thanks"},
        ])
    );
    assert_eq!(
        b["tools"],
        json!([{"type": "function", "name": "read_file", "description": "Read a text file",
                "strict": false,
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                               "required": ["path"]}}])
    );
    assert_eq!(b["tool_choice"], "auto");
    assert_eq!(b["parallel_tool_calls"], true);
    assert_eq!(b["store"], false);
    assert_eq!(b["stream"], true);
    assert_eq!(
        b["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
    assert!(
        b.get("max_output_tokens").is_none(),
        "chatgpt.com refuses it: {b}"
    );
    let key = b["prompt_cache_key"].as_str().unwrap();
    assert!(key.starts_with("pck_") && key.len() == 28, "{key}");
    assert_eq!(
        header(&w, "Authorization"),
        Some(&*format!("Bearer {CODEX_TOKEN}"))
    );
    assert_eq!(header(&w, "ChatGPT-Account-ID"), Some("acc-FAKE"));
    assert_eq!(header(&w, "originator"), Some("codex_cli_rs"));
    assert_eq!(
        header(&w, "User-Agent"),
        Some("codex_cli_rs/0.0.0 (Hermes Agent)")
    );
    assert_eq!(header(&w, "session_id"), Some("20260501_101500_ab12cd"));
    assert_eq!(header(&w, "x-client-request-id"), Some(key));
}

#[test]
fn api_openai_com_gets_the_output_cap_the_levels_it_takes_and_no_codex_headers() {
    let messages = [msg(Role::User, Some("hi"))];
    let mut to = endpoint("openai", "https://api.openai.com/v1", "sk-test");
    to.max_tokens = Some(2048);
    to.reasoning_effort = Some("low".into());
    let mut req = ask(&messages, &[], "gpt-5");
    let w = request(&req, &to);
    assert_eq!(w.body["max_output_tokens"], 2048);
    assert_eq!(w.body["reasoning"]["effort"], "low", "the endpoint's level");
    assert!(w.body.get("tools").is_none() && w.body.get("tool_choice").is_none());
    for h in [
        "ChatGPT-Account-ID",
        "originator",
        "session_id",
        "User-Agent",
    ] {
        assert_eq!(header(&w, h), None, "{h}");
    }
    assert_eq!(header(&w, "Authorization"), Some("Bearer sk-test"));
    // The session's level wins, clamped to what the model takes, never upwards.
    for (wanted, model, sent) in [
        ("HIGH", "gpt-5", "high"),
        ("minimal", "gpt-5", "low"),
        ("ultra", "gpt-5", "xhigh"),
        ("max", "openai/gpt-5.6-sol", "max"),
        ("ultra", "gpt-5.6-sol", "max"),
        ("whatever", "gpt-5", "medium"),
    ] {
        req.reasoning_effort = Some(wanted);
        req.model = model;
        let w = request(&req, &to);
        assert_eq!(w.body["reasoning"]["effort"], sent, "{wanted} on {model}");
    }
    req.reasoning_effort = Some("none");
    let w = request(&req, &to);
    assert!(w.body.get("reasoning").is_none(), "{}", w.body);
    assert_eq!(w.body["include"], json!([]));
    // A side call's own cap and temperature (a title's) win; the Codex backend gets neither.
    req.limits = crate::model::CallLimits {
        max_tokens: Some(500),
        temperature: Some(0.3),
    };
    let w = request(&req, &to);
    assert_eq!(
        (&w.body["max_output_tokens"], &w.body["temperature"]),
        (&json!(500), &json!(0.3))
    );
    let codex = endpoint(
        "openai-codex",
        "https://chatgpt.com/backend-api/codex",
        CODEX_TOKEN,
    );
    let w = request(&req, &codex);
    assert!(
        w.body.get("max_output_tokens").is_none() && w.body.get("temperature").is_none(),
        "{}",
        w.body
    );
}

#[test]
fn xai_gets_an_effort_only_for_grok_models_that_take_one_and_its_conversation_header() {
    let messages = [msg(Role::User, Some("hi"))];
    let to = endpoint("xai", "https://api.x.ai/v1", "xai-key");
    let mut req = ask(&messages, &[], "grok-4");
    req.reasoning_effort = Some("xhigh");
    let w = request(&req, &to);
    assert!(
        w.body.get("reasoning").is_none(),
        "grok-4 refuses an effort: {}",
        w.body
    );
    assert_eq!(w.body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(header(&w, "x-grok-conv-id"), Some("20260501_101500_ab12cd"));
    assert!(w.body["prompt_cache_key"].is_string());
    req.model = "grok-4.3";
    assert_eq!(
        request(&req, &to).body["reasoning"],
        json!({"effort": "high"})
    );
    req.model = "x-ai/grok-4.6";
    assert_eq!(
        request(&req, &to).body["reasoning"],
        json!({"effort": "xhigh"})
    );
    // A host under x.ai is xAI whatever the provider is called.
    let other = endpoint("custom", "https://eu.api.x.ai/v1", "k");
    req.session_id = None;
    let w = request(&req, &other);
    assert_eq!(header(&w, "x-grok-conv-id"), None);
    assert!(w.body.get("prompt_cache_key").is_none(), "{}", w.body);
}

#[test]
fn github_gets_no_cache_key_no_include_and_no_replayed_message_ids() {
    let messages = transcript();
    let to = endpoint("copilot", "https://api.githubcopilot.com", "gh-token");
    let w = request(&ask(&messages, &[], "gpt-5"), &to);
    for key in ["prompt_cache_key", "include", "reasoning"] {
        assert!(w.body.get(key).is_none(), "{key}: {}", w.body);
    }
    let message = w.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "message")
        .unwrap()
        .clone();
    assert!(message.get("id").is_none(), "{message}");
    assert_eq!(message["phase"], "final_answer");
}

#[test]
fn odd_transcripts_still_make_valid_items() {
    // Hermes' joined ids, a call with no id at all, a result whose call id is joined too,
    // a summary row, object arguments, an over-long message id, an unknown status.
    let mut a = msg(Role::Assistant, Some("   "));
    a.tool_calls = Some(
        json!([
            {"id": "call_a|fc_a", "function": {"name": "terminal", "arguments": " "}},
            {"function": {"name": "terminal", "arguments": {"command": "ls"}}},
            {"id": "fc_b", "function": {"name": "terminal", "arguments": "{}"}},
            {"id": "x", "function": {"name": " ", "arguments": "{}"}},
        ])
        .to_string(),
    );
    let long_id = "m".repeat(65);
    a.replay.codex_message_items = Some(
        json!([{"type": "message", "role": "assistant", "status": "weird", "id": long_id,
                "content": [{"type": "refusal", "refusal": "no"}]}])
        .to_string(),
    );
    a.replay.codex_reasoning_items = Some("not json".into());
    let mut r = msg(Role::Tool, Some("out"));
    r.tool_call_id = Some("call_a|fc_a".into());
    let mut orphan = msg(Role::Tool, Some("lost"));
    orphan.tool_call_id = None;
    let summary = msg(Role::System, Some("[Summary] earlier turns"));
    let messages = [summary, a, r, orphan];
    let w = request(
        &ask(&messages, &[], "gpt-5"),
        &endpoint("openai", "http://x/v1", ""),
    );
    let input = w.body["input"].as_array().unwrap();
    assert_eq!(
        input[0],
        json!({"role": "developer", "content": "[Summary] earlier turns"})
    );
    // a blank answer, no reasoning, a message item with no text part: nothing said
    assert_eq!(input[1]["call_id"], "call_a");
    assert_eq!(input[1]["arguments"], "{}");
    let derived = input[2]["call_id"].as_str().unwrap();
    assert!(
        derived.starts_with("call_") && derived.len() == 17,
        "{derived}"
    );
    assert_eq!(input[2]["arguments"], "{\"command\":\"ls\"}");
    assert_eq!(input[3]["call_id"], "call_b");
    assert_eq!(
        input[4],
        json!({"type": "function_call_output", "call_id": "call_a", "output": "out"})
    );
    assert_eq!(
        input.len(),
        5,
        "the nameless call and the orphan result are dropped: {input:?}"
    );
    assert_eq!(
        header(&w, "Authorization"),
        None,
        "an empty key is not sent"
    );
    // The same transcript gives the same ids (the prompt cache sees the same prefix).
    let again = request(
        &ask(&messages, &[], "gpt-5"),
        &endpoint("openai", "http://x/v1", ""),
    );
    assert_eq!(again.body["input"], w.body["input"]);
}

#[test]
fn the_cache_key_follows_the_scope_the_instructions_and_the_tools_not_their_order() {
    let t1 = json!({"type": "function", "name": "a", "parameters": {}});
    let t2 = json!({"type": "function", "name": "b", "parameters": {}});
    let k = prompt_cache_key("s1", "sys", &[t1.clone(), t2.clone()]);
    assert_eq!(k, prompt_cache_key("s1", "sys", &[t2.clone(), t1.clone()]));
    assert_ne!(k, prompt_cache_key("s2", "sys", &[t1.clone(), t2.clone()]));
    assert_ne!(k, prompt_cache_key("s1", "sys2", &[t1.clone(), t2]));
    assert_ne!(k, prompt_cache_key("s1", "sys", &[t1]));
    // What Hermes' Python computes for the same scope, instructions and tools.
    let tools = [
        json!({"type": "function", "name": "b", "description": "", "strict": false,
               "parameters": {"type": "object", "properties": {}}}),
        json!({"type": "function", "name": "a", "description": "Ä tool", "strict": false,
               "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}),
    ];
    assert_eq!(
        prompt_cache_key("cron_x", "Be brief.", &tools),
        "pck_ab969f96e06113fefcb80bed"
    );
    assert_eq!(cache_scope("cron_backup_20260501_101500"), "cron_backup");
    assert_eq!(
        cache_scope("cron_backup_2026050_101500"),
        "cron_backup_2026050_101500"
    );
    assert_eq!(
        cache_scope("20260501_101500_ab12cd"),
        "20260501_101500_ab12cd"
    );
}

#[test]
fn backends_are_told_apart_by_provider_then_host() {
    let of = |p: &str, url: &str| Backend::of(&endpoint(p, url, "k"));
    assert_eq!(
        of("openai-codex", "https://proxy.example/v1"),
        Backend::Codex
    );
    assert_eq!(
        of("custom", "https://chatgpt.com/backend-api/codex"),
        Backend::Codex
    );
    assert_eq!(of("xai-oauth", "https://example/v1"), Backend::Xai);
    assert_eq!(
        of("custom", "https://user:pw@API.X.AI:443/v1"),
        Backend::Xai
    );
    assert_eq!(of("custom", "https://notx.ai/v1"), Backend::Other);
    assert_eq!(
        of("custom", "https://models.github.ai/inference"),
        Backend::Github
    );
    assert_eq!(of("openai", "https://api.openai.com/v1"), Backend::Other);
    assert_eq!(
        Backend::Other.issuer("http://127.0.0.1:9/v1"),
        "other:http://127.0.0.1:9/v1"
    );
}

// ---------------------------------------------------------------------------------------------
// The decoder
// ---------------------------------------------------------------------------------------------

fn decoder() -> ResponsesDecoder {
    ResponsesDecoder::for_issuer("codex_backend".into())
}

/// Feeds every event; the events out, or the first error. `complete`: the stream's end.
fn feed(d: &mut ResponsesDecoder, events: &[Value]) -> Result<(Vec<ModelEvent>, bool), String> {
    let mut out = Vec::new();
    let mut complete = false;
    for e in events {
        complete = d.on_data(&e.to_string(), &mut out)?;
    }
    Ok((out, complete))
}

fn run(events: &[Value]) -> Result<Vec<ModelEvent>, String> {
    let mut d = decoder();
    let (mut out, complete) = feed(&mut d, events)?;
    assert!(
        complete && d.whole_at_eof(),
        "the stream ended with its terminal event"
    );
    d.finish(&mut out);
    Ok(out)
}

fn texts(out: &[ModelEvent]) -> (String, String) {
    let (mut text, mut reasoning) = (String::new(), String::new());
    for e in out {
        match e {
            ModelEvent::Text(t) => text.push_str(t),
            ModelEvent::Reasoning(t) => reasoning.push_str(t),
            _ => {}
        }
    }
    (text, reasoning)
}

fn done(out: &[ModelEvent]) -> (String, crate::model::TokenUsage) {
    match out.last() {
        Some(ModelEvent::Done {
            finish_reason,
            usage,
        }) => (finish_reason.clone(), *usage),
        other => panic!("the last event is not Done: {other:?}"),
    }
}

fn replay(out: &[ModelEvent]) -> Replay {
    out.iter()
        .find_map(|e| match e {
            ModelEvent::Replay(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn completed(usage: Value) -> Value {
    json!({"type": "response.completed", "sequence_number": 99,
           "response": {"id": "resp_1", "object": "response", "status": "completed",
                        "output": [], "usage": usage}})
}

/// A reasoning item (summary streamed in two parts, sealed copy at its end), then a text
/// message streamed in three deltas.
fn reasoned_text_answer() -> Vec<Value> {
    vec![
        json!({"type": "response.created", "sequence_number": 0,
               "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.in_progress", "sequence_number": 1,
               "response": {"id": "resp_1", "status": "in_progress"}}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
        json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1",
               "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1",
               "output_index": 0, "summary_index": 0, "delta": "Greet"}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1",
               "output_index": 0, "summary_index": 0, "delta": " back."}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1",
               "output_index": 0, "summary_index": 1, "delta": "Briefly."}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAA-SEALED",
                        "summary": [{"type": "summary_text", "text": "Greet back."},
                                    {"type": "summary_text", "text": "Briefly."}]}}),
        json!({"type": "response.output_item.added", "output_index": 1,
               "item": {"id": "msg_1", "type": "message", "status": "in_progress",
                        "role": "assistant", "content": []}}),
        json!({"type": "response.content_part.added", "item_id": "msg_1", "output_index": 1,
               "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1,
               "content_index": 0, "delta": "Hel", "logprobs": []}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1,
               "content_index": 0, "delta": "lo, ", "logprobs": []}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1,
               "content_index": 0, "delta": "you!", "logprobs": []}),
        json!({"type": "response.output_text.done", "item_id": "msg_1", "output_index": 1,
               "content_index": 0, "text": "Hello, you!"}),
        json!({"type": "response.output_item.done", "output_index": 1,
               "item": {"id": "msg_1", "type": "message", "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "Hello, you!",
                                     "annotations": []}]}}),
        completed(
            json!({"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1024},
                         "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 30},
                         "total_tokens": 1250}),
        ),
    ]
}

#[test]
fn text_reasoning_usage_and_the_items_to_replay_come_out_of_a_text_answer() {
    let out = run(&reasoned_text_answer()).unwrap();
    let (text, reasoning) = texts(&out);
    assert_eq!(text, "Hello, you!");
    assert_eq!(
        reasoning, "Greet back.\n\nBriefly.",
        "a new summary part, a new paragraph"
    );
    let (reason, usage) = done(&out);
    assert_eq!(reason, "stop");
    assert_eq!(
        (
            usage.input,
            usage.output,
            usage.cache_read,
            usage.cache_write,
            usage.reasoning
        ),
        (1200, 50, 1024, 0, 30),
        "input counts the cached tokens too"
    );
    let r = replay(&out);
    let reasoning_items: Value =
        serde_json::from_str(r.codex_reasoning_items.as_deref().unwrap()).unwrap();
    assert_eq!(
        reasoning_items,
        json!([{"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA-SEALED",
                "_issuer_kind": "codex_backend",
                "summary": [{"type": "summary_text", "text": "Greet back."},
                            {"type": "summary_text", "text": "Briefly."}]}])
    );
    let message_items: Value =
        serde_json::from_str(r.codex_message_items.as_deref().unwrap()).unwrap();
    assert_eq!(
        message_items,
        json!([{"type": "message", "role": "assistant", "status": "completed", "id": "msg_1",
                "content": [{"type": "output_text", "text": "Hello, you!"}]}])
    );
    // The replay comes before Done, so the turn has it when the round closes.
    let at = out
        .iter()
        .position(|e| matches!(e, ModelEvent::Replay(_)))
        .unwrap();
    assert_eq!(at, out.len() - 2);
}

#[test]
fn what_is_kept_is_what_the_next_request_sends_back() {
    let out = run(&reasoned_text_answer()).unwrap();
    let mut answer = msg(Role::Assistant, Some("Hello, you!"));
    answer.replay = replay(&out);
    let messages = [
        msg(Role::User, Some("hi")),
        answer,
        msg(Role::User, Some("again")),
    ];
    let to = endpoint("openai-codex", "https://chatgpt.com/backend-api/codex", "t");
    let w = request(&ask(&messages, &[], "gpt-5"), &to);
    assert_eq!(
        w.body["input"],
        json!([
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "encrypted_content": "gAAA-SEALED",
             "summary": [{"type": "summary_text", "text": "Greet back."},
                         {"type": "summary_text", "text": "Briefly."}]},
            {"type": "message", "role": "assistant", "status": "completed", "id": "msg_1",
             "content": [{"type": "output_text", "text": "Hello, you!"}]},
            {"role": "user", "content": "again"},
        ])
    );
    // Another backend cannot read what the Codex backend sealed.
    let xai = endpoint("xai", "https://api.x.ai/v1", "k");
    let w = request(&ask(&messages, &[], "grok-4"), &xai);
    assert!(
        !w.body["input"].to_string().contains("gAAA-SEALED"),
        "{}",
        w.body
    );
}

fn call_added(oi: u64, item: &str, call: &str, name: &str) -> Value {
    json!({"type": "response.output_item.added", "output_index": oi,
           "item": {"id": item, "type": "function_call", "status": "in_progress",
                    "arguments": "", "call_id": call, "name": name}})
}

fn args_delta(oi: u64, item: &str, delta: &str) -> Value {
    json!({"type": "response.function_call_arguments.delta", "item_id": item,
           "output_index": oi, "delta": delta})
}

fn call_done(oi: u64, item: &str, call: &str, name: &str, args: &str) -> Value {
    json!({"type": "response.output_item.done", "output_index": oi,
           "item": {"id": item, "type": "function_call", "status": "completed",
                    "arguments": args, "call_id": call, "name": name}})
}

#[test]
fn parallel_calls_are_put_together_by_item_id_and_named_by_their_call_id() {
    let events = vec![
        call_added(0, "fc_1", "call_1", "terminal"),
        call_added(1, "fc_2", "call_2", "read_file"),
        // the two calls' arguments interleave; the first's by item id only
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1",
               "delta": "{\"comm"}),
        args_delta(1, "fc_2", "{\"path\":"),
        args_delta(0, "fc_1", "and\":\"ls\"}"),
        args_delta(1, "fc_2", "\"a.txt\"}"),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_2",
               "output_index": 1, "arguments": "{\"path\":\"a.txt\"}"}),
        // the done items arrive out of order
        call_done(1, "fc_2", "call_2", "read_file", "{\"path\":\"a.txt\"}"),
        call_done(0, "fc_1", "call_1", "terminal", "{\"command\":\"ls\"}"),
        completed(json!({"input_tokens": 10, "output_tokens": 5})),
    ];
    let out = run(&events).unwrap();
    let drafting: Vec<&ModelEvent> = out
        .iter()
        .filter(|e| matches!(e, ModelEvent::ToolDrafting(_)))
        .collect();
    assert_eq!(
        drafting,
        [
            &ModelEvent::ToolDrafting("terminal".into()),
            &ModelEvent::ToolDrafting("read_file".into())
        ],
        "once each, as each call begins"
    );
    let calls: Vec<&ToolCall> = out
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        [
            &ToolCall {
                id: "call_1".into(),
                name: "terminal".into(),
                arguments: "{\"command\":\"ls\"}".into()
            },
            &ToolCall {
                id: "call_2".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"a.txt\"}".into()
            },
        ]
    );
    assert_eq!(done(&out).0, "tool_calls");
}

#[test]
fn a_call_streamed_without_its_done_item_is_still_whole_and_one_without_ids_gets_a_stable_one() {
    let events = vec![
        call_added(0, "fc_1", "call_1", "terminal"),
        args_delta(0, "fc_1", "{\"command\":"),
        args_delta(0, "fc_1", "\"pwd\"}"),
        // no call_id, no item id: Hermes' deterministic id
        json!({"type": "response.output_item.done", "output_index": 1,
               "item": {"type": "function_call", "status": "completed", "name": "terminal",
                        "arguments": "{}"}}),
        // an unfinished call is not one to run
        json!({"type": "response.output_item.done", "output_index": 2,
               "item": {"type": "function_call", "id": "fc_3", "call_id": "call_3",
                        "status": "incomplete", "name": "terminal", "arguments": "{\"comm"}}),
        completed(json!({})),
    ];
    let out = run(&events).unwrap();
    let calls: Vec<ToolCall> = out
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2, "{out:?}");
    assert_eq!(
        (calls[0].id.as_str(), calls[0].arguments.as_str()),
        ("call_1", "{\"command\":\"pwd\"}")
    );
    assert_eq!(calls[1].id, call_id::deterministic("terminal", "{}", 1));
    assert_eq!(
        run(&events).unwrap(),
        out,
        "the same answer gives the same ids"
    );
}

#[test]
fn commentary_is_thinking_and_text_sent_only_whole_is_still_shown() {
    let events = vec![
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "msg_c", "type": "message", "role": "assistant",
                        "phase": "commentary", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_c", "output_index": 0,
               "delta": "Let me check."}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "msg_c", "type": "message", "role": "assistant",
                        "phase": "commentary", "status": "completed",
                        "content": [{"type": "output_text", "text": "Let me check."}]}}),
        // a server that sends the answer's message only whole
        json!({"type": "response.output_item.done", "output_index": 1,
               "item": {"id": "msg_f", "type": "message", "role": "assistant",
                        "phase": "final_answer", "status": "completed",
                        "content": [{"type": "output_text", "text": "All good."}]}}),
        completed(json!({})),
    ];
    let out = run(&events).unwrap();
    assert_eq!(texts(&out), ("All good.".into(), "Let me check.".into()));
    let items: Value =
        serde_json::from_str(replay(&out).codex_message_items.as_deref().unwrap()).unwrap();
    assert_eq!(items[0]["phase"], "commentary");
    assert_eq!(items[1]["phase"], "final_answer");
}

#[test]
fn a_final_response_alone_is_read_for_its_items() {
    let events = vec![json!({"type": "response.completed", "response": {
        "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_tmp_1", "encrypted_content": "TRANSIENT", "summary": []},
            {"type": "message", "id": "msg_1", "role": "assistant",
             "content": [{"type": "output_text", "text": "whole"}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "terminal",
             "arguments": "{}", "status": "completed"},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 1}}})];
    let out = run(&events).unwrap();
    assert_eq!(texts(&out).0, "whole");
    assert!(out.contains(&ModelEvent::ToolDrafting("terminal".into())));
    assert!(
        replay(&out).codex_reasoning_items.is_none(),
        "a transient item is not kept"
    );
    assert_eq!(done(&out).0, "tool_calls");
}

#[test]
fn an_incomplete_answer_ends_as_hermes_names_it() {
    for (reason, finish) in [
        ("max_output_tokens", "length"),
        ("content_filter", "content_filter"),
    ] {
        let events = vec![
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "cut"}),
            json!({"type": "response.incomplete", "response": {
                "status": "incomplete", "incomplete_details": {"reason": reason},
                "usage": {"input_tokens": 7, "output_tokens": 9}}}),
        ];
        let out = run(&events).unwrap();
        assert_eq!(done(&out).0, finish, "{reason}");
        assert_eq!(done(&out).1.output, 9);
    }
}

#[test]
fn failures_carry_the_servers_words() {
    let mut d = decoder();
    let failed = json!({"type": "response.failed", "response": {"status": "failed",
        "error": {"code": "server_error", "message": "The model crashed."}}});
    let err = feed(&mut d, &[failed]).unwrap_err();
    assert_eq!(
        err,
        "the model reported an error: server_error: The model crashed."
    );
    let nested = json!({"type": "error", "sequence_number": 3,
        "error": {"type": "invalid_request_error", "code": "context_length_exceeded",
                  "message": "Your input exceeds the context window."}});
    let err = feed(&mut decoder(), &[nested]).unwrap_err();
    assert!(
        err.ends_with("context_length_exceeded: Your input exceeds the context window."),
        "{err}"
    );
    let flat =
        json!({"type": "error", "code": null, "message": "Rate limit reached", "param": null});
    assert_eq!(
        feed(&mut decoder(), &[flat]).unwrap_err(),
        "the model reported an error: Rate limit reached"
    );
    let bare = json!({"type": "response.failed", "response": {"status": "failed"}});
    assert!(
        feed(&mut decoder(), &[bare])
            .unwrap_err()
            .contains("'failed'")
    );
}

#[test]
fn malformed_events_are_clear_errors_and_a_cut_stream_is_not_an_answer() {
    for (data, says) in [
        ("{not json", "malformed event stream"),
        ("[1,2]", "without a type"),
        (r#"{"delta":"x"}"#, "without a type"),
        (
            r#"{"type":"response.output_text.delta","delta":5}"#,
            "delta without its text",
        ),
        (
            r#"{"type":"response.output_item.added","item":"fc"}"#,
            "output item without a type",
        ),
        (
            r#"{"type":"response.output_item.done"}"#,
            "output item without a type",
        ),
    ] {
        let mut out = Vec::new();
        let err = decoder().on_data(data, &mut out).unwrap_err();
        assert!(err.contains(says), "{data}: {err}");
    }
    let mut d = decoder();
    let (_, complete) = feed(&mut d, &reasoned_text_answer()[..10]).unwrap();
    assert!(!complete && !d.whole_at_eof(), "no terminal event yet");
    let mut out = Vec::new();
    assert!(
        !d.on_data("[DONE]", &mut out).unwrap(),
        "[DONE] before the end is not the end"
    );
}

#[test]
fn an_answer_too_large_to_hold_is_refused_not_grown_without_bound() {
    let mut d = decoder();
    let piece = "x".repeat(1 << 20);
    let mut out = Vec::new();
    d.on_data(
        &call_added(0, "fc_1", "call_1", "terminal").to_string(),
        &mut out,
    )
    .unwrap();
    let err = (0..64)
        .find_map(|_| {
            d.on_data(&args_delta(0, "fc_1", &piece).to_string(), &mut out)
                .err()
        })
        .expect("refused before 64 MiB");
    assert!(err.contains("too large"), "{err}");
    let mut d = decoder();
    let err = (0..2000u64)
        .find_map(|i| {
            d.on_data(
                &call_added(i, &format!("fc_{i}"), "c", "t").to_string(),
                &mut out,
            )
            .err()
        })
        .expect("refused before 2,000 items");
    assert!(err.contains("too large"), "{err}");
    // Deltas naming ever new items, or one message item done again and again, are items too.
    let delta_at = |i: u64| {
        json!({"type": "response.output_text.delta", "output_index": i, "delta": "x"}).to_string()
    };
    let mut d = decoder();
    let err = (0..2000u64).find_map(|i| d.on_data(&delta_at(i), &mut out).err());
    assert!(
        err.expect("refused before 2,000 items")
            .contains("too large")
    );
    let again = json!({"type": "response.output_item.done", "output_index": 0,
        "item": {"type": "message", "content": [{"type": "output_text", "text": "x"}]}});
    let mut d = decoder();
    let err = (0..2000).find_map(|_| d.on_data(&again.to_string(), &mut out).err());
    assert!(
        err.expect("refused before 2,000 items")
            .contains("too large")
    );
}
