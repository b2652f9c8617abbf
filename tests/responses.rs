//! The Responses API wire (`api_mode: codex_responses`), black-box: the real binary, configured
//! through config.yaml in its `HERMES_HOME` (a `providers:` entry with `api_mode:
//! codex_responses`), against a mock `POST /v1/responses` server (`tests/mockai/responses.rs`
//! writes the API's event streams).
//!
//! Covered: a streamed text turn and the request it sends (instructions, input items, tools in
//! the Responses shape, reasoning, the session's `/reasoning` level); a tool round trip whose
//! next request carries the `function_call` and its `function_call_output` under one call id;
//! a reasoning item's sealed content kept, sent back on the next request and again after the
//! session is resumed from state.db; usage with cached tokens reaching `session.usage` and
//! state.db; `response.failed` and a refused key (401) ending the turn with the server's words;
//! api.openai.com (the mock behind `http_proxy`) chosen for the Responses API by its host alone;
//! the `openai-codex` login (auth.json) reaching ChatGPT's backend with the Codex CLI's headers
//! and the account id of its token.
//!
//! Every wait has a deadline; nothing relies on a bare sleep for synchronisation.

use crate::common;
use crate::mockai;

use common::*;
use mockai::responses::{Answer, input_items, reply, usage};
use mockai::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Instant;

const KEY: &str = "sk-responses-test";
const MODEL: &str = "gpt-5";

/// A HERMES_HOME whose config.yaml points the gateway at `mock` over the Responses API.
fn home_for(mock: &MockAi) -> TempHome {
    let home = TempHome::new("responses");
    write_config(&home.path, mock);
    home
}

/// A `providers:` entry naming its API: Hermes honours `api_mode: codex_responses` in the
/// `model:` section itself only for api.openai.com and api.x.ai, which need no `api_mode`
/// (`api_openai_com_speaks_the_responses_api_without_being_told`).
fn write_config(home: &Path, mock: &MockAi) {
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "model:\n  provider: mock-lab\n  default: {MODEL}\nproviders:\n  mock-lab:\n    \
             base_url: {}\n    api_key: {KEY}\n    api_mode: codex_responses\n    \
             max_output_tokens: 2048\n",
            mock.base_url()
        ),
    )
    .unwrap();
}

fn start_in(home: &Path) -> Gateway {
    Gateway::builder()
        .tag("responses")
        .home(home)
        .env("TUI_GATEWAY_MODEL_RETRIES", "0")
        .start()
}

fn unique(tag: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}-{}-{:x}", std::process::id(), n & 0xffff_ffff)
}

fn texts_of(events: &[Value], ty: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == ty)
        .filter_map(|e| e["payload"]["text"].as_str())
        .collect()
}

/// The turn ended with status `error`; its error text.
fn error_of(turn: &Turn) -> String {
    let c = &turn.complete["payload"];
    assert_eq!(c["status"], "error", "{c}");
    c["error"].as_str().unwrap_or_default().to_string()
}

/// Polls state.db until `query` (one row, one column) gives a value `pred` accepts.
fn wait_db<V: rusqlite::types::FromSql>(
    g: &Gateway,
    what: &str,
    query: &str,
    arg: &str,
    pred: impl Fn(&V) -> bool,
) -> V {
    let deadline = Instant::now() + T;
    loop {
        let got: Option<V> = g.db().query_row(query, [arg], |r| r.get(0)).ok();
        if let Some(v) = got.filter(|v| pred(v)) {
            return v;
        }
        if Instant::now() > deadline {
            panic!("state.db never showed {what} ({query})\n{}", g.diag());
        }
        std::thread::sleep(ms(50));
    }
}

#[test]
fn a_streamed_text_turn_and_the_request_it_sends() {
    let mock = MockAi::script(vec![
        reply(
            Answer::new()
                .text("msg_1", &["Hello", ", ", "world"])
                .completed(usage(30, 0, 3, 0)),
        ),
        reply(
            Answer::new()
                .text("msg_2", &["again"])
                .completed(usage(40, 0, 1, 0)),
        ),
    ]);
    let home = home_for(&mock);
    let mut g = start_in(&home.path);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "say hello");
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{}",
        t.complete
    );
    assert_eq!(t.text, "Hello, world");
    assert_eq!(
        texts_of(&t.events, "message.delta"),
        "Hello, world",
        "streamed as it came"
    );

    let r = &mock.wait_requests(1, T)[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/responses")
    );
    assert_eq!(r.header("authorization"), Some(&*format!("Bearer {KEY}")));
    let b = &r.body;
    assert_eq!(b["model"], MODEL);
    assert!(
        b["instructions"]
            .as_str()
            .is_some_and(|i| !i.trim().is_empty()),
        "the system prompt travels as instructions: {b}"
    );
    assert_eq!(
        input_items(b),
        [json!({"role": "user", "content": "say hello"})]
    );
    assert_eq!((&b["stream"], &b["store"]), (&json!(true), &json!(false)));
    assert_eq!(
        b["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(b["max_output_tokens"], 2048, "the entry's output cap");
    assert!(
        b["prompt_cache_key"]
            .as_str()
            .is_some_and(|k| k.starts_with("pck_")),
        "{b}"
    );
    let tools = b["tools"]
        .as_array()
        .expect("the gateway's tools are offered");
    let terminal = tools
        .iter()
        .find(|t| t["name"] == "terminal")
        .unwrap_or_else(|| panic!("no terminal tool in {b}"));
    assert_eq!(terminal["type"], "function");
    assert!(terminal.get("function").is_none(), "flattened: {terminal}");
    assert_eq!(terminal["parameters"]["type"], "object", "{terminal}");
    assert_eq!(
        (&b["tool_choice"], &b["parallel_tool_calls"]),
        (&json!("auto"), &json!(true))
    );

    // The session's /reasoning level reaches the next request.
    let r = g.call(
        "config.set",
        json!({"key": "reasoning", "session_id": s.id, "value": "high"}),
    );
    assert_eq!(r["value"], "high", "{r}");
    let t = g.run_turn(&s.id, "once more");
    assert_eq!(t.text, "again");
    let r = &mock.wait_requests(2, T)[1];
    assert_eq!(r.body["reasoning"]["effort"], "high", "{}", r.body);
    assert_eq!(
        input_items(&r.body),
        [
            json!({"role": "user", "content": "say hello"}),
            json!({"type": "message", "role": "assistant", "status": "completed", "id": "msg_1",
                   "content": [{"type": "output_text", "text": "Hello, world"}]}),
            json!({"role": "user", "content": "once more"}),
        ],
        "the first answer goes back as the API gave it"
    );
}

#[test]
fn a_tool_round_trip_sends_the_call_and_its_output_under_one_call_id() {
    let marker = unique("responses-tool");
    let args = json!({"command": format!("echo {marker}")}).to_string();
    let mock = MockAi::script(vec![
        reply(
            Answer::new()
                .call("fc_68b2", "call_Q7xW", "terminal", &args, 7)
                .completed(usage(50, 0, 12, 0)),
        ),
        reply(
            Answer::new()
                .text("msg_2", &["it printed ", "the marker"])
                .completed(usage(80, 0, 4, 0)),
        ),
    ]);
    let home = home_for(&mock);
    let mut g = start_in(&home.path);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "run it");
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{}",
        t.complete
    );
    assert!(t.text.ends_with("it printed the marker"), "{}", t.text);
    let done = t.event("tool.complete");
    assert_eq!(done["payload"]["name"], "terminal", "{done}");

    let reqs = mock.wait_requests(2, T);
    let input = input_items(&reqs[1].body);
    let call = input
        .iter()
        .position(|i| i["type"] == "function_call")
        .unwrap_or_else(|| panic!("no function_call item: {input:?}"));
    assert_eq!(
        input[call],
        json!({"type": "function_call", "call_id": "call_Q7xW", "name": "terminal",
               "arguments": args}),
        "the call as the model made it, under its call_id (not its item id)"
    );
    let output = &input[call + 1];
    assert_eq!(output["type"], "function_call_output", "{input:?}");
    assert_eq!(
        output["call_id"], "call_Q7xW",
        "the output names the call it answers"
    );
    assert!(
        output["output"].as_str().unwrap_or("").contains(&marker),
        "the command really ran: {output}"
    );
    assert_eq!(input[0], json!({"role": "user", "content": "run it"}));
    assert_eq!(input.len(), call + 2, "{input:?}");
}

#[test]
fn sealed_reasoning_is_kept_and_sent_back_also_after_a_resume() {
    let sealed = format!("gAAAA-{}", unique("sealed"));
    let answer = || {
        Answer::new()
            .reasoning("rs_1", &["Plan the greeting."], Some(&sealed))
            .text("msg_1", &["Hi ", "there"])
            .completed(usage(20, 0, 9, 6))
    };
    let later = |text: &str| {
        reply(
            Answer::new()
                .text("msg_x", &[text])
                .completed(usage(30, 0, 1, 0)),
        )
    };
    let mock = MockAi::script(vec![reply(answer()), later("second"), later("third")]);
    let home = home_for(&mock);
    let expected_replay = json!({"type": "reasoning", "encrypted_content": sealed,
        "summary": [{"type": "summary_text", "text": "Plan the greeting."}]});

    let stored = {
        let mut g = start_in(&home.path);
        let s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "greet me");
        assert_eq!(t.text, "Hi there");
        assert_eq!(texts_of(&t.events, "reasoning.delta"), "Plan the greeting.");
        let t = g.run_turn(&s.id, "and again");
        assert_eq!(t.text, "second");
        let input = input_items(&mock.wait_requests(2, T)[1].body);
        assert_eq!(
            input[1], expected_replay,
            "sent back right after the question: {input:?}"
        );
        assert_eq!(input[2]["type"], "message", "{input:?}");
        // Kept in Hermes' column, stamped with the issuer that sealed it.
        let kept: String = wait_db(
            &g,
            "the reasoning item",
            "SELECT codex_reasoning_items FROM messages WHERE session_id = ?1 \
             AND codex_reasoning_items IS NOT NULL",
            &s.stored,
            |v: &String| v.contains(&sealed),
        );
        let kept: Value = serde_json::from_str(&kept).unwrap();
        assert_eq!(kept[0]["id"], "rs_1", "{kept}");
        assert!(
            kept[0]["_issuer_kind"]
                .as_str()
                .unwrap()
                .starts_with("other:"),
            "{kept}"
        );
        g.signal(libc::SIGTERM);
        g.wait_exit(secs(10));
        s.stored
    };

    let mut g = start_in(&home.path);
    let r = g.call("session.resume", json!({"session_id": stored}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let t = g.run_turn(&sid, "after the restart");
    assert_eq!(t.text, "third");
    let input = input_items(&mock.wait_requests(3, T)[2].body);
    assert_eq!(
        input[1], expected_replay,
        "read back from state.db: {input:?}"
    );
    let users: Vec<&Value> = input.iter().filter(|i| i["role"] == "user").collect();
    assert_eq!(users.len(), 3, "{input:?}");
}

#[test]
fn usage_with_cached_tokens_reaches_session_usage_and_state_db() {
    let mock = MockAi::script(vec![reply(
        Answer::new()
            .reasoning("rs_1", &["Count."], None)
            .text("msg_1", &["42"])
            .completed(usage(1200, 1024, 40, 25)),
    )]);
    let home = home_for(&mock);
    let mut g = start_in(&home.path);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "count my tokens");
    let u = &t.complete["payload"]["usage"];
    assert_eq!(
        (&u["input"], &u["output"]),
        (&json!(1200), &json!(40)),
        "{u}"
    );
    let su = g.call("session.usage", json!({"session_id": s.id}));
    assert_eq!(
        su["input"], 1200,
        "every input token, the cached ones too: {su}"
    );
    assert_eq!(su["cache_read"], 1024, "{su}");
    assert_eq!(su["reasoning"], 25, "{su}");
    let row: (i64, i64, i64, i64) = {
        wait_db(
            &g,
            "the session's tokens",
            "SELECT input_tokens FROM sessions WHERE id = ?1",
            &s.stored,
            |v: &i64| *v == 1200,
        );
        g.db()
            .query_row(
                "SELECT input_tokens, output_tokens, cache_read_tokens, reasoning_tokens \
                 FROM sessions WHERE id = ?1",
                [&s.stored],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap()
    };
    assert_eq!(row, (1200, 40, 1024, 25));
}

#[test]
fn a_failed_response_ends_the_turn_with_the_servers_words() {
    let mock = MockAi::script(vec![reply(
        Answer::new()
            .text("msg_1", &["partial "])
            .failed("server_error", "The model is overloaded, try later."),
    )]);
    let home = home_for(&mock);
    let mut g = start_in(&home.path);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "try");
    let err = error_of(&t);
    assert!(
        err.contains("server_error: The model is overloaded, try later."),
        "{err}"
    );
    g.ping();
}

#[test]
fn a_refused_key_is_named_as_such() {
    let mock = MockAi::script(vec![Reply::status(
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-resp****test.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    )]);
    let home = home_for(&mock);
    let mut g = start_in(&home.path);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "anyone");
    let err = error_of(&t);
    for words in [
        "401",
        "API key was refused",
        "providers entry \"mock-lab\"",
        "Incorrect API key provided",
    ] {
        assert!(err.contains(words), "{err:?} should say {words:?}");
    }
    assert_eq!(mock.wait_requests(1, T)[0].path, "/v1/responses");
}

#[test]
fn api_openai_com_speaks_the_responses_api_without_being_told() {
    let mock = MockAi::script(vec![reply(
        Answer::new()
            .text("msg_1", &["from ", "OpenAI"])
            .completed(usage(9, 0, 2, 0)),
    )]);
    let home = TempHome::new("responses-openai-host");
    std::fs::write(
        home.path.join("config.yaml"),
        format!(
            "model:\n  provider: custom\n  base_url: http://api.openai.com/v1\n  \
             api_key: {KEY}\n  default: {MODEL}\n"
        ),
    )
    .unwrap();
    // The mock stands in for api.openai.com as the proxy every plain-HTTP request goes to.
    let mut g = Gateway::builder()
        .tag("responses")
        .home(&home.path)
        .env("http_proxy", &format!("http://127.0.0.1:{}", mock.port))
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "which API");
    assert_eq!(t.text, "from OpenAI", "{}", t.complete);
    let r = &mock.wait_requests(1, T)[0];
    assert_eq!(r.path, "http://api.openai.com/v1/responses");
    assert_eq!(
        input_items(&r.body),
        [json!({"role": "user", "content": "which API"})]
    );
}

#[test]
fn the_codex_login_reaches_chatgpts_backend_with_the_codex_clients_headers() {
    // An access token whose claims name ChatGPT account `acc-test-7f3a` (signature unchecked).
    const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDAsImh0dHBzOi8vYXBpLm9wZW5haS5jb20vYXV0aCI6eyJjaGF0Z3B0X2FjY291bnRfaWQiOiJhY2MtdGVzdC03ZjNhIn19.c2ln";
    let mock = MockAi::script(vec![reply(
        Answer::new()
            .text("msg_1", &["signed ", "in"])
            .completed(usage(9, 0, 2, 0)),
    )]);
    let home = TempHome::new("responses-codex");
    std::fs::write(
        home.path.join("config.yaml"),
        format!("model:\n  provider: openai-codex\n  default: {MODEL}\n  max_tokens: 4096\n"),
    )
    .unwrap();
    let auth = json!({"version": 1, "active_provider": "openai-codex", "providers": {
        "openai-codex": {"tokens": {"access_token": TOKEN, "refresh_token": "rt_test"},
                         "auth_mode": "chatgpt"}}});
    std::fs::write(home.path.join("auth.json"), auth.to_string()).unwrap();
    let base = format!("http://127.0.0.1:{}/backend-api/codex", mock.port);
    let mut g = Gateway::builder()
        .tag("responses")
        .home(&home.path)
        .env("HERMES_CODEX_BASE_URL", &base)
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "who am I");
    assert_eq!(t.text, "signed in", "{}", t.complete);
    let r = &mock.wait_requests(1, T)[0];
    assert_eq!(r.path, "/backend-api/codex/responses");
    assert_eq!(r.header("authorization"), Some(&*format!("Bearer {TOKEN}")));
    assert_eq!(r.header("chatgpt-account-id"), Some("acc-test-7f3a"));
    assert_eq!(r.header("originator"), Some("codex_cli_rs"));
    assert_eq!(
        r.header("user-agent"),
        Some("codex_cli_rs/0.0.0 (Hermes Agent)")
    );
    assert_eq!(r.header("session_id"), Some(s.stored.as_str()));
    let key = r.body["prompt_cache_key"].as_str().unwrap_or_default();
    assert!(key.starts_with("pck_"), "{}", r.body);
    assert_eq!(r.header("x-client-request-id"), Some(key));
    assert!(
        r.body.get("max_output_tokens").is_none(),
        "ChatGPT's backend refuses an output cap: {}",
        r.body
    );
    // Hermes bills the login's calls to the ChatGPT subscription: included, $0.
    let u = &t.complete["payload"]["usage"];
    assert_eq!(
        (&u["cost_usd"], &u["cost_status"]),
        (&json!(0.0), &json!("included")),
        "{u}"
    );
}

#[test]
fn hermes_top_levels_max_and_ultra_are_taken_and_sent_as_the_model_takes_them() {
    let mock = MockAi::start(|_| {
        reply(
            Answer::new()
                .text("msg_1", &["ok"])
                .completed(usage(3, 0, 1, 0)),
        )
    });
    let home = home_for(&mock);
    let mut g = start_in(&home.path);
    let s = g.create_session(json!({}));
    // gpt-5 takes up to `xhigh`: a stronger level is clamped to it, never refused.
    for (n, level) in ["max", "ultra"].into_iter().enumerate() {
        let r = g.call(
            "config.set",
            json!({"key": "reasoning", "session_id": s.id, "value": level}),
        );
        assert_eq!(r["value"], level, "{r}");
        g.run_turn(&s.id, level);
        let r = &mock.wait_requests(n + 1, T)[n];
        assert_eq!(r.body["reasoning"]["effort"], "xhigh", "{}", r.body);
    }
}
