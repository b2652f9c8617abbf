//! Anthropic's Messages API, black-box: the real binary, configured through config.yaml
//! (`api_mode: anthropic_messages`), against a mock `/v1/messages` started by each test
//! (`tests/mockai/anthropic.rs`).
//!
//! Covered: a streamed text answer and the request the gateway sends (path, headers, body); a
//! tool round trip whose input arrives in pieces, its `tool_use` and `tool_result` sent back
//! (and no thinking, to a proxy); signed thinking kept on the answer, in state.db, and sent
//! back to Anthropic's API (the mock behind `http_proxy`) in the next request — after a
//! restart and resume too; cache breakpoints on the system prompt and the last three
//! messages, the previous request's last one kept after an answer with two tool calls; cache
//! reads and writes in the usage, `session.usage` and state.db, and priced from Hermes' table
//! (or unknown, for a name it does not list); the session's reasoning effort as thinking; an error event mid-answer; a refused key; an overloaded API
//! retried.
//!
//! Every wait has a deadline; nothing relies on a bare sleep for synchronisation.

use crate::common;
use crate::mockai;

use common::*;
use mockai::anthropic::{self as msgs, Usage};
use mockai::{MockAi, Recorded, Reply};
use serde_json::{Value, json};
use std::time::Instant;

const KEY: &str = "sk-ant-api03-mock";
const MODEL: &str = "claude-sonnet-4-5";

/// A home whose config.yaml points the gateway at `base_url` with the Messages API.
fn home_at(base_url: &str) -> TempHome {
    let home = TempHome::new("anthropic");
    std::fs::write(
        home.path.join("config.yaml"),
        format!(
            "model:\n  default: {MODEL}\n  base_url: {base_url}\n  api_mode: anthropic_messages\n  api_key: {KEY}\n"
        ),
    )
    .unwrap();
    home
}

/// The mock as a third-party Messages endpoint (a proxy, a gateway like LiteLLM).
fn home_for(mock: &MockAi) -> TempHome {
    home_at(&mock.base_url())
}

fn gateway(home: &TempHome) -> GatewayBuilder {
    Gateway::builder()
        .tag("anthropic")
        .home(&home.path)
        .env("TUI_GATEWAY_RETRY_BASE_S", "0.05")
}

/// The mock as Anthropic's own API: the base URL names `api.anthropic.com` (plain HTTP) and
/// the mock is the HTTP proxy every request goes through, so the gateway treats the endpoint
/// as Anthropic's (signed thinking goes back) while nothing leaves the machine.
fn native_gateway(home: &TempHome, mock: &MockAi) -> GatewayBuilder {
    gateway(home)
        .env("http_proxy", &format!("http://127.0.0.1:{}", mock.port))
        .env("ANTHROPIC_BASE_URL", NATIVE_BASE)
}

const NATIVE_BASE: &str = "http://api.anthropic.com";

/// A home as `hermes model` leaves it for Anthropic: the provider named, the key in `.env`;
/// `ANTHROPIC_BASE_URL` (plain HTTP, through the mock as proxy) in place of the https one.
fn native_home() -> TempHome {
    let home = TempHome::new("anthropic-native");
    std::fs::write(
        home.path.join("config.yaml"),
        format!("model:\n  default: {MODEL}\n  provider: anthropic\n"),
    )
    .unwrap();
    std::fs::write(home.path.join(".env"), format!("ANTHROPIC_API_KEY={KEY}\n")).unwrap();
    home
}

/// `content` of a request message as a list of blocks (a string is one text block).
fn blocks(m: &Value) -> Vec<Value> {
    match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        other => panic!("content neither text nor blocks: {other}"),
    }
}

/// Every block of the request carrying a cache breakpoint, as `type:text-or-content`.
fn breakpoints(r: &Recorded) -> Vec<String> {
    let system = r.body["system"].as_array().cloned().unwrap_or_default();
    let message_blocks = r.messages().iter().flat_map(blocks).collect::<Vec<_>>();
    system
        .into_iter()
        .map(|b| (true, b))
        .chain(message_blocks.into_iter().map(|b| (false, b)))
        .filter(|(_, b)| b.get("cache_control").is_some())
        .map(|(sys, b)| {
            assert_eq!(b["cache_control"], json!({"type": "ephemeral"}), "{b}");
            let what = b["text"].as_str().or(b["content"].as_str()).unwrap_or("");
            let kind = if sys {
                "system"
            } else {
                b["type"].as_str().unwrap_or("?")
            };
            format!("{kind}:{}", what.chars().take(20).collect::<String>())
        })
        .collect()
}

fn reasoning_details(g: &Gateway, stored: &str) -> Vec<Option<String>> {
    let db = g.db();
    let mut st = db
        .prepare("SELECT reasoning_details FROM messages WHERE session_id = ?1 AND role = 'assistant' ORDER BY id")
        .unwrap();
    st.query_map([stored], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Polls state.db until `pred` holds on the session's message rows.
fn wait_rows(
    g: &Gateway,
    stored: &str,
    what: &str,
    pred: impl Fn(&[MsgRow]) -> bool,
) -> Vec<MsgRow> {
    let deadline = Instant::now() + T;
    loop {
        let rows = message_rows(&g.db_path(), stored);
        if pred(&rows) {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "state.db never showed {what}: {rows:#?}\n{}",
            g.diag()
        );
        std::thread::sleep(ms(50));
    }
}

fn complete_error(g: &mut Gateway, sid: &str, prompt: &str) -> String {
    let start = submit(g, sid, prompt);
    let turn = g.finish_turn(sid, start, T);
    let c = &turn.complete["payload"];
    assert_eq!(c["status"], "error", "{c}");
    c["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_streamed_answer_and_the_request_it_answers() {
    let mock = MockAi::script(vec![msgs::reply(msgs::text_answer(
        &["Hel", "lo from ", "Claude."],
        Usage(12, 0, 0, 5),
    ))]);
    let home = home_for(&mock);
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "say hello");
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "{}",
        turn.complete
    );
    assert_eq!(turn.text, "Hello from Claude.");
    let deltas: String = turn
        .events
        .iter()
        .filter(|e| e["type"] == "message.delta")
        .map(|e| e["payload"]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(deltas, "Hello from Claude.", "streamed as it came");

    let r = &mock.wait_requests(1, T)[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(
        r.header("authorization"),
        None,
        "the key goes once, as x-api-key"
    );
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        r.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14")
    );
    let b = &r.body;
    assert_eq!(b["model"], MODEL, "{b}");
    assert_eq!(b["stream"], true, "{b}");
    assert_eq!(b["max_tokens"], 64000, "the model's own limit: {b}");
    assert!(b.get("thinking").is_none(), "no effort configured: {b}");
    assert!(
        b["system"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "the system prompt apart from the messages: {b}"
    );
    assert_eq!(
        r.messages(),
        [json!({"role": "user", "content": [
            {"type": "text", "text": "say hello", "cache_control": {"type": "ephemeral"}}]})],
        "{b}"
    );
    let tools = b["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {b}"));
    let term = tools
        .iter()
        .find(|t| t["name"] == "terminal")
        .unwrap_or_else(|| panic!("terminal not offered: {b}"));
    assert_eq!(term["input_schema"]["type"], "object", "{term}");
    assert!(
        term["input_schema"]["properties"]["command"].is_object(),
        "{term}"
    );
    assert!(
        term.get("function").is_none(),
        "Anthropic's shape, not OpenAI's: {term}"
    );
    assert_eq!(b["tool_choice"], json!({"type": "auto"}));

    let rows = wait_rows(&g, &s.stored, "the answer", |r| {
        r.iter()
            .any(|x| x.role == "assistant" && x.finish_reason.is_some())
    });
    let a = rows.iter().find(|x| x.role == "assistant").unwrap();
    assert_eq!(a.content.as_deref(), Some("Hello from Claude."));
    assert_eq!(a.finish_reason.as_deref(), Some("stop"));
    assert_eq!(a.token_count, Some(5));
}

#[test]
fn a_tool_round_trip_with_its_input_in_pieces() {
    let marker = format!("anthropic-tool-{}", std::process::id());
    let command = format!("echo {marker}");
    let mock = MockAi::script(vec![
        msgs::reply(msgs::tool_answer(
            "toolu_01Abc",
            &command,
            4,
            Some("SIG-PROXY"),
        )),
        msgs::reply(msgs::text_answer(
            &["It printed the marker."],
            Usage(40, 0, 0, 6),
        )),
    ]);
    let home = home_for(&mock);
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "run the echo");
    let c = &turn.complete["payload"];
    assert_eq!(c["status"], "complete", "{c}");
    assert!(turn.text.contains("It printed the marker."), "{c}");
    // The call is announced as soon as its block starts, before its input is whole.
    assert_eq!(turn.event("tool.generating")["payload"]["name"], "terminal");
    let done = turn.event("tool.complete");
    assert_eq!(done["payload"]["name"], "terminal", "{done}");
    assert!(
        done["payload"]["result"]["output"]
            .as_str()
            .unwrap_or("")
            .contains(&marker),
        "the command ran with the whole input: {done}"
    );

    let reqs = mock.wait_requests(2, T);
    let m = reqs[1].messages();
    assert_eq!(m.len(), 3, "user, the call, its result: {}", reqs[1].body);
    assert_eq!(m[1]["role"], "assistant");
    assert!(
        !blocks(&m[1]).iter().any(|b| b["type"] == "thinking"),
        "a proxy cannot check Anthropic's signatures: no thinking goes back to it: {}",
        m[1]
    );
    let call = blocks(&m[1])
        .into_iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use: {}", m[1]));
    assert_eq!(call["id"], "toolu_01Abc");
    assert_eq!(call["name"], "terminal");
    assert_eq!(
        call["input"],
        json!({ "command": command }),
        "an object, not a string"
    );
    assert_eq!(m[2]["role"], "user");
    let result = &blocks(&m[2])[0];
    assert_eq!(result["type"], "tool_result", "{}", m[2]);
    assert_eq!(result["tool_use_id"], "toolu_01Abc");
    assert!(
        result["content"].as_str().unwrap_or("").contains(&marker),
        "{result}"
    );
    // The three messages are the last three: each carries a breakpoint.
    assert_eq!(
        breakpoints(&reqs[1])
            .iter()
            .map(|b| b.split(':').next().unwrap().to_string())
            .collect::<Vec<_>>(),
        ["system", "text", "tool_use", "tool_result"]
    );

    let rows = wait_rows(&g, &s.stored, "call, result, answer", |r| r.len() >= 4);
    assert_eq!(
        rows[1].finish_reason.as_deref(),
        Some("tool_calls"),
        "{rows:#?}"
    );
    assert_eq!(rows[1].call_ids(), ["toolu_01Abc"]);
    assert_eq!(rows[2].tool_call_id.as_deref(), Some("toolu_01Abc"));
}

#[test]
fn signed_thinking_goes_back_in_the_next_request_and_after_a_resume() {
    let mock = MockAi::script(vec![
        msgs::reply(msgs::tool_answer(
            "toolu_think",
            "echo thought",
            7,
            Some("SIG-CALL"),
        )),
        msgs::reply({
            let mut v = vec![msgs::message_start(30, 0, 0)];
            v.extend(msgs::thinking(0, &["It worked."], "SIG-ANSWER"));
            v.extend([
                msgs::text_start(1),
                msgs::text_delta(1, "Done."),
                msgs::block_stop(1),
                msgs::message_delta("end_turn", 4),
                msgs::message_stop(),
            ]);
            v
        }),
        msgs::reply(msgs::text_answer(&["Welcome back."], Usage(50, 0, 0, 3))),
    ]);
    let home = native_home();
    let mut g = native_gateway(&home, &mock).start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "think, then run something");
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "{}",
        turn.complete
    );
    let shown: String = turn
        .events
        .iter()
        .filter(|e| e["type"] == "reasoning.delta")
        .map(|e| e["payload"]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        shown, "I should list it.It worked.",
        "the thinking is shown as it comes"
    );

    // Within the turn: the call's signed thinking opens the answer sent back.
    let reqs = mock.wait_requests(2, T);
    assert_eq!(
        reqs[0].path, "http://api.anthropic.com/v1/messages",
        "through the proxy"
    );
    let sent = blocks(&reqs[1].messages()[1]);
    assert_eq!(
        sent[0],
        json!({"type": "thinking", "thinking": "I should list it.", "signature": "SIG-CALL"}),
        "{}",
        reqs[1].body
    );
    assert_eq!(sent[1]["type"], "tool_use");

    // Both answers keep theirs in Hermes' column.
    let details = {
        let deadline = Instant::now() + T;
        loop {
            let d = reasoning_details(&g, &s.stored);
            if d.len() == 2 && d.iter().all(Option::is_some) {
                break d;
            }
            assert!(
                Instant::now() < deadline,
                "reasoning_details never stored: {d:?}"
            );
            std::thread::sleep(ms(50));
        }
    };
    let second: Value = serde_json::from_str(details[1].as_deref().unwrap()).unwrap();
    assert_eq!(
        second,
        json!([{"type": "thinking", "thinking": "It worked.", "signature": "SIG-ANSWER"}])
    );

    // A new gateway on the same home resumes the session from state.db.
    g.close_stdin();
    assert!(g.wait_exit(secs(10)).success(), "{}", g.diag());
    let mut g = native_gateway(&home, &mock).start();
    let r = g.call("session.resume", json!({"session_id": s.stored}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let turn = g.run_turn(&sid, "again");
    assert_eq!(turn.text, "Welcome back.", "{}", turn.complete);
    let reqs = mock.wait_requests(3, T);
    let m = reqs[2].messages();
    let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "assistant", "user"],
        "{}",
        reqs[2].body
    );
    // Only the latest answer's thinking goes back, signed as it came.
    let latest = blocks(&m[3]);
    assert_eq!(
        latest[0],
        json!({"type": "thinking", "thinking": "It worked.", "signature": "SIG-ANSWER"})
    );
    assert!(
        !blocks(&m[1]).iter().any(|b| b["type"] == "thinking"),
        "an older answer's thinking is not sent: {}",
        m[1]
    );
}

#[test]
fn breakpoints_on_the_system_prompt_and_the_last_three_and_cache_usage_counted() {
    let mock = MockAi::script(vec![
        msgs::reply(msgs::text_answer(&["first"], Usage(10, 0, 1500, 4))),
        msgs::reply(msgs::text_answer(&["second"], Usage(12, 1500, 30, 5))),
        msgs::reply(msgs::text_answer(&["third"], Usage(9, 1530, 25, 6))),
    ]);
    let home = home_for(&mock);
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let t1 = g.run_turn(&s.id, "one");
    let u = &t1.complete["payload"]["usage"];
    assert_eq!(
        u["input"], 1510,
        "every input token, cache writes included: {u}"
    );
    g.run_turn(&s.id, "two");
    let t3 = g.run_turn(&s.id, "three");
    assert_eq!(t3.text, "third");

    let reqs = mock.wait_requests(3, T);
    let first = breakpoints(&reqs[0]);
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first[0].starts_with("system:"), "{first:?}");
    assert_eq!(first[1], "text:one");
    let third = breakpoints(&reqs[2]);
    assert_eq!(third.len(), 4, "four breakpoints at most: {third:?}");
    assert!(third[0].starts_with("system:"), "{third:?}");
    assert_eq!(third[1..], ["text:two", "text:second", "text:three"]);
    // The oldest messages lost theirs, nothing else changed in them.
    assert_eq!(
        reqs[2].messages()[0],
        json!({"role": "user", "content": "one"})
    );
    assert_eq!(
        reqs[2].messages()[1]["content"],
        json!([{"type": "text", "text": "first"}])
    );
    // The tools and the system prompt are the same bytes every time (a cacheable prefix).
    for r in &reqs[1..] {
        assert_eq!(
            r.body["tools"].to_string(),
            reqs[0].body["tools"].to_string()
        );
        assert_eq!(
            r.body["system"].to_string(),
            reqs[0].body["system"].to_string()
        );
    }

    let su = g.call("session.usage", json!({"session_id": s.id}));
    let su = su.get("usage").unwrap_or(&su).clone();
    assert_eq!(su["cache_read"], 3030, "{su}");
    assert_eq!(su["cache_write"], 1555, "{su}");
    assert_eq!(su["input"], 1510 + 1542 + 1564, "{su}");
    assert_eq!(su["output"], 15, "{su}");
    let deadline = Instant::now() + T;
    loop {
        let row: (i64, i64, i64, i64) = g
            .db()
            .query_row(
                "SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens
                 FROM sessions WHERE id = ?1",
                [&s.stored],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        if row == (4616, 15, 3030, 1555) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sessions row: {row:?}\n{}",
            g.diag()
        );
        std::thread::sleep(ms(50));
    }
}

/// An answer asking for two commands at once, each its own `tool_use` block.
fn two_calls(first: (&str, &str), second: (&str, &str)) -> Vec<Value> {
    let mut v = vec![msgs::message_start(20, 0, 0)];
    for (index, (id, command)) in [first, second].into_iter().enumerate() {
        let index = index as u64;
        v.push(msgs::tool_use_start(index, id, "terminal"));
        v.push(msgs::input_delta(
            index,
            &json!({ "command": command }).to_string(),
        ));
        v.push(msgs::block_stop(index));
    }
    v.extend([msgs::message_delta("tool_use", 12), msgs::message_stop()]);
    v
}

/// Hermes' "last three" would put all three message breakpoints on the two-call answer and its
/// two results, dropping the prompt's: the second request could then read only the system
/// prompt's prefix from the cache. Ours keeps a breakpoint where the first request's last one
/// was, so the second request's prefix up to the prompt is the first request's, byte for byte.
#[test]
fn after_two_tool_calls_the_next_request_keeps_the_breakpoint_the_last_one_ended_on() {
    let mock = MockAi::script(vec![
        msgs::reply(two_calls(
            ("toolu_01One", "echo first-of-two"),
            ("toolu_01Two", "echo second-of-two"),
        )),
        msgs::reply(msgs::text_answer(&["Both ran."], Usage(30, 0, 0, 4))),
    ]);
    let home = home_for(&mock);
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "run both echoes");
    assert!(turn.text.contains("Both ran."), "{}", turn.complete);

    let reqs = mock.wait_requests(2, T);
    assert_eq!(
        breakpoints(&reqs[0]).last().map(String::as_str),
        Some("text:run both echoes")
    );
    let second = breakpoints(&reqs[1]);
    assert_eq!(second.len(), 4, "{second:?}");
    assert!(second[0].starts_with("system:"), "{second:?}");
    assert_eq!(second[1], "text:run both echoes", "{second:?}");
    assert!(
        second[2..].iter().all(|b| b.starts_with("tool_result:")),
        "the two results carry the others: {second:?}"
    );
    let results: Vec<Value> = blocks(&reqs[1].messages()[2]);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap_or("")
            .contains("first-of-two")
            && results[1]["content"]
                .as_str()
                .unwrap_or("")
                .contains("second-of-two"),
        "both commands ran and went back: {results:?}"
    );
    // The second request repeats the first one's prompt up to that breakpoint unchanged.
    let marks_removed = |v: &Value| {
        let mut v = v.clone();
        for m in v.as_array_mut().into_iter().flatten() {
            for b in m["content"].as_array_mut().into_iter().flatten() {
                b.as_object_mut().map(|o| o.remove("cache_control"));
            }
        }
        v
    };
    assert_eq!(
        marks_removed(&json!([reqs[1].messages()[0]])),
        marks_removed(&json!([reqs[0].messages()[0]]))
    );
    assert_eq!(reqs[1].body["tools"], reqs[0].body["tools"]);
    assert_eq!(reqs[1].body["system"], reqs[0].body["system"]);
}

/// Sonnet 4.5 through Anthropic's own API, priced from Hermes' table ($3 in, $15 out, $0.30 a
/// cache read, $3.75 a cache write per million): 1,000 in, 2,000 written, 500 out is
/// 0.003 + 0.0075 + 0.0075 = $0.018; 1,000 in, 50,000 read, 300 out is 0.003 + 0.015 + 0.0045 =
/// $0.0225; the session $0.0405, estimated.
#[test]
fn claude_calls_are_priced_from_hermes_table_cache_reads_and_writes_included() {
    let mock = MockAi::script(vec![
        msgs::reply(msgs::text_answer(&["first"], Usage(1000, 0, 2000, 500))),
        msgs::reply(msgs::text_answer(&["second"], Usage(1000, 50_000, 0, 300))),
    ]);
    let home = native_home();
    let mut g = native_gateway(&home, &mock).start();
    let s = g.create_session(json!({}));
    let t1 = g.run_turn(&s.id, "one");
    let u = &t1.complete["payload"]["usage"];
    assert_cost(&u["cost_usd"], 0.018, u);
    g.run_turn(&s.id, "two");

    let su = g.call("session.usage", json!({"session_id": s.id}));
    let su = su.get("usage").unwrap_or(&su).clone();
    assert_cost(&su["cost_usd"], 0.0405, &su);
    assert_eq!(
        (&su["cost_status"], &su["cost_source"]),
        (&json!("estimated"), &json!("official_docs_snapshot")),
        "{su}"
    );
    let text = g.call(
        "slash.exec",
        json!({"command": "usage", "session_id": s.id}),
    );
    let text = text["output"].as_str().unwrap_or_default();
    assert!(
        text.contains("~$0.0405 (estimated from anthropic-pricing-2026-05)"),
        "{text}"
    );

    g.close_stdin();
    assert!(g.wait_exit(T).success());
    type Row = (f64, Option<f64>, String, String, String);
    let row: Row = g
        .db()
        .query_row(
            "SELECT estimated_cost_usd, actual_cost_usd, cost_status, cost_source, pricing_version
             FROM sessions WHERE id = ?1",
            [&s.stored],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert!((row.0 - 0.0405).abs() < 1e-9, "{row:?}");
    assert_eq!(
        (row.1, row.2.as_str(), row.3.as_str(), row.4.as_str()),
        (
            None,
            "estimated",
            "official_docs_snapshot",
            "anthropic-pricing-2026-05"
        ),
        "nothing the provider reported: {row:?}"
    );
    let per_model: (String, f64, f64, String) = g
        .db()
        .query_row(
            "SELECT model, estimated_cost_usd, actual_cost_usd, cost_status
             FROM session_model_usage WHERE session_id = ?1",
            [&s.stored],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(per_model.0, MODEL);
    assert!(
        (per_model.1 - 0.0405).abs() < 1e-9 && per_model.2 == 0.0 && per_model.3 == "estimated",
        "{per_model:?}"
    );
}

/// A dated name the table does not list is priced by no prefix rule: the price is unknown, and
/// `/usage` says so.
#[test]
fn a_claude_model_the_table_does_not_list_has_an_unknown_price() {
    let mock = MockAi::script(vec![msgs::reply(msgs::text_answer(
        &["ok"],
        Usage(1000, 50, 20, 5),
    ))]);
    let home = native_home();
    std::fs::write(
        home.path.join("config.yaml"),
        "model:\n  default: claude-sonnet-4-5-20250929\n  provider: anthropic\n",
    )
    .unwrap();
    let mut g = native_gateway(&home, &mock).start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    let u = &t.complete["payload"]["usage"];
    assert_eq!(
        (&u["cost_usd"], &u["cost_status"], &u["cache_read"]),
        (&Value::Null, &json!("unknown"), &json!(50)),
        "{u}"
    );
    let text = g.call(
        "slash.exec",
        json!({"command": "usage", "session_id": s.id}),
    );
    let text = text["output"].as_str().unwrap_or_default();
    assert!(
        text.contains("n/a: no price known for claude-sonnet-4-5-20250929 on anthropic"),
        "{text}"
    );
    g.close_stdin();
    assert!(g.wait_exit(T).success());
    let row: (Option<f64>, String) = g
        .db()
        .query_row(
            "SELECT estimated_cost_usd, cost_status FROM sessions WHERE id = ?1",
            [&s.stored],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(row, (None, "unknown".to_string()));
}

/// `cost` is `want` dollars (to a billionth: the session's sum is a float).
fn assert_cost(cost: &Value, want: f64, context: &Value) {
    let got = cost
        .as_f64()
        .unwrap_or_else(|| panic!("no cost: {context}"));
    assert!(
        (got - want).abs() < 1e-9,
        "cost {got}, want {want}: {context}"
    );
}

#[test]
fn the_sessions_reasoning_effort_becomes_thinking() {
    let mock = MockAi::script(vec![msgs::reply(msgs::text_answer(
        &["ok"],
        Usage(1, 0, 0, 1),
    ))]);
    let home = home_for(&mock);
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    g.call(
        "config.set",
        json!({"key": "reasoning", "value": "high", "session_id": s.id}),
    );
    g.run_turn(&s.id, "think hard");
    let b = &mock.wait_requests(1, T)[0].body;
    // Sonnet 4.5 thinks with a budget, which wants temperature 1 and room in max_tokens.
    assert_eq!(
        b["thinking"],
        json!({"type": "enabled", "budget_tokens": 16000}),
        "{b}"
    );
    assert_eq!(b["temperature"], 1, "{b}");
    assert_eq!(b["max_tokens"], 64000, "{b}");
}

#[test]
fn an_error_event_mid_answer_ends_the_turn_with_its_message() {
    let mock = MockAi::script(vec![
        msgs::reply(vec![
            msgs::message_start(5, 0, 0),
            msgs::text_start(0),
            msgs::text_delta(0, "Half an ans"),
            msgs::error("overloaded_error", "Overloaded"),
        ]),
        msgs::reply(msgs::text_answer(&["fine now"], Usage(5, 0, 0, 2))),
    ]);
    let home = home_for(&mock);
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let err = complete_error(&mut g, &s.id, "hello?");
    assert!(
        err.contains("Overloaded") && err.contains("overloaded_error"),
        "{err}"
    );
    g.ping();
    assert_eq!(
        g.run_turn(&s.id, "again").text,
        "fine now",
        "the session goes on"
    );
}

#[test]
fn a_refused_key_is_named_and_not_retried() {
    let mock = MockAi::script(vec![Reply::status(
        401,
        &msgs::error_body("authentication_error", "invalid x-api-key"),
    )]);
    let home = home_for(&mock);
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let err = complete_error(&mut g, &s.id, "let me in");
    assert!(err.contains("401"), "{err}");
    assert!(
        err.contains("invalid x-api-key"),
        "the API's own words: {err}"
    );
    let hint = err
        .split("the API key was refused: check ")
        .nth(1)
        .unwrap_or_else(|| panic!("no hint naming where the key comes from: {err}"));
    assert!(!hint.trim().is_empty() && !hint.starts_with(':'), "{err}");
    g.collect_for(ms(300));
    assert_eq!(mock.request_count(), 1, "a 401 is not retried");
}

#[test]
fn an_overloaded_api_is_retried() {
    let mock = MockAi::script(vec![
        Reply::status(529, &msgs::error_body("overloaded_error", "Overloaded")),
        msgs::reply(msgs::text_answer(&["made it"], Usage(3, 0, 0, 2))),
    ]);
    let home = home_for(&mock);
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "busy?");
    assert_eq!(turn.text, "made it", "{}", turn.complete);
    let notice = turn
        .events
        .iter()
        .find(|e| e["type"] == "status.update")
        .unwrap_or_else(|| panic!("the retry is told: {:?}", types(&turn.events)));
    assert!(
        notice["payload"]["text"]
            .as_str()
            .unwrap_or("")
            .contains("529"),
        "{notice}"
    );
    let reqs = mock.wait_requests(2, T);
    assert_eq!(reqs[0].body, reqs[1].body, "the same request again");
}

/// An endpoint that lists `ids` on `GET …/models` to a request carrying the key as Anthropic
/// wants it (`x-api-key`, `anthropic-version`), and refuses any other.
fn anthropic_listing(ids: &'static [&'static str]) -> MockAi {
    MockAi::start(move |r| {
        let asked_right = r.header("x-api-key") == Some(KEY)
            && r.header("anthropic-version") == Some("2023-06-01");
        if r.method != "GET" || !asked_right {
            let body = msgs::error_body("authentication_error", "invalid x-api-key");
            return Reply::status(401, &body);
        }
        let data: Vec<Value> = ids
            .iter()
            .map(|id| json!({"type": "model", "id": id, "display_name": id}))
            .collect();
        Reply::status(200, &json!({"data": data, "has_more": false}).to_string())
    })
}

#[test]
fn the_picker_lists_the_models_of_a_messages_endpoint() {
    // Anthropic's own API (the mock as proxy), then a gateway speaking its protocol.
    for native in [true, false] {
        let mock = anthropic_listing(&["claude-opus-4-1", "claude-haiku-4-5"]);
        let home = if native {
            native_home()
        } else {
            home_for(&mock)
        };
        let builder = match native {
            true => native_gateway(&home, &mock),
            false => gateway(&home),
        };
        let mut g = builder.start();
        let o = g.call("model.options", json!({}));
        let row = &o["providers"][0];
        assert_eq!(
            row["models"],
            json!([MODEL, "claude-opus-4-1", "claude-haiku-4-5"]),
            "native {native}: {o}"
        );
        assert!(row.get("warning").is_none(), "native {native}: {o}");
        let r = mock.wait_requests(1, T).remove(0);
        let path = match native {
            true => "http://api.anthropic.com/v1/models",
            false => "/v1/models",
        };
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", path));
        assert_eq!(r.header("authorization"), None, "one credential header");
    }
}
