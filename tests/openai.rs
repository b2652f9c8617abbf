//! The OpenAI-compatible streaming provider (issue 5), black-box: the real binary against a
//! mock `/v1/chat/completions` server started by each test (`tests/mockai`).
//!
//! Covered: streamed text (chunked and close-delimited bodies, events split across reads and
//! UTF-8 characters, SSE comments and CRLF), the request the gateway sends, reasoning deltas, tool
//! calls assembled from fragments and run for real with their result sent back, usage accounting
//! (events, `session.usage`, `state.db`) and its price (cached tokens apart; an unknown model),
//! configuration (env, flag, `config.yaml`, offline default), every failure of the issue
//! (refused, resolve, TLS, 401/403, 429/5xx with retries and `Retry-After`, malformed stream, cut
//! stream, connect / first-byte / idle timeouts), interrupt and shutdown mid-stream, and two
//! sessions streaming at once while `ping` is answered.
//!
//! Every wait has a deadline; nothing relies on a bare sleep for synchronisation.

use crate::common;
use crate::mockai;

use common::*;
use mockai::*;
use serde_json::{Value, json};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const KEY: &str = "sk-test";
const MODEL: &str = "mock-model";

fn builder_for(base_url: &str) -> GatewayBuilder {
    Gateway::builder()
        .tag("openai")
        .env("OPENAI_BASE_URL", base_url)
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_MODEL", MODEL)
}

fn start_for(mock: &MockAi) -> Gateway {
    builder_for(&mock.base_url()).start()
}

fn payload_texts(ev: &[Value], ty: &str) -> String {
    ev.iter()
        .filter(|e| e["type"] == ty)
        .map(|e| {
            e["payload"]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("{ty} without payload.text: {e}"))
                .to_string()
        })
        .collect()
}

/// A successful streamed turn: order start, mid-turn events, complete(status complete),
/// session.info; message.delta texts concatenate to the complete text, which is `expected`.
fn assert_streamed_turn(turn: &Turn, sid: &str, expected: &str) {
    let ev = &turn.events;
    let ty = types(ev);
    assert_seq_increasing(ev);
    assert_eq!(ty[0], "message.start", "{ty:?}");
    let ci = ty
        .iter()
        .position(|t| t == "message.complete")
        .unwrap_or_else(|| panic!("no message.complete: {ty:?}"));
    for t in &ty[1..ci] {
        assert!(
            MID_TURN.contains(&t.as_str()),
            "unexpected {t} in a turn: {ty:?}"
        );
    }
    assert_eq!(
        ty.get(ci + 1).map(String::as_str),
        Some("session.info"),
        "{ty:?}"
    );
    let c = &ev[ci]["payload"];
    assert_eq!(c["status"], "complete", "message.complete: {c}");
    assert_eq!(c["text"], expected, "message.complete text: {c}");
    let deltas = payload_texts(&ev[1..ci], "message.delta");
    assert_eq!(
        deltas, expected,
        "concatenated message.delta texts differ from the streamed text"
    );
    assert_usage(&c["usage"]);
    let info = &ev[ci + 1]["payload"];
    assert_eq!(info["running"], false, "{info}");
    for e in ev {
        assert_eq!(e["session_id"], sid, "event of another session: {e}");
    }
}

/// Waits for the turn to end with status `error`; returns (turn, error text).
fn finish_error_turn(
    g: &mut Gateway,
    sid: &str,
    start: usize,
    timeout: Duration,
) -> (Turn, String) {
    let turn = g.finish_turn(sid, start, timeout);
    let c = &turn.complete["payload"];
    assert_eq!(
        c["status"], "error",
        "the turn must end with status error: {c}"
    );
    let err = c["error"]
        .as_str()
        .unwrap_or_else(|| panic!("message.complete status error without an error text: {c}"))
        .to_string();
    assert!(!err.trim().is_empty(), "empty error text: {c}");
    // The reason ends the turn's text, as Hermes' gateway words it (what the TUI shows).
    let text = c["text"].as_str().unwrap_or("");
    assert!(
        text.ends_with(&format!("Error: {err}")),
        "the turn's text does not end with its reason: {c}"
    );
    assert_usage(&c["usage"]);
    (turn, err)
}

fn assert_err_mentions(err: &str, words: &[&str]) {
    let l = err.to_lowercase();
    for w in words {
        assert!(
            l.contains(&w.to_lowercase()),
            "error text {err:?} should mention {w:?}"
        );
    }
}

/// `ping` is answered while `sid`'s turn still waits (on the network, a timeout, a backoff):
/// the pong comes out before the turn's `message.complete`, which a loop blocked in the wait
/// could only write first. Returns when the pong arrived.
fn pong_before_turn_ends(g: &mut Gateway, sid: &str, during: &str) -> Instant {
    let id = g.send_request("ping", json!({}));
    let pong = g.wait_response(&id, T);
    let at = Instant::now();
    assert_eq!(pong["result"], json!({"pong": true}), "{pong}");
    let p = g.frames.iter().position(|f| *f == pong).unwrap();
    assert!(
        !g.frames[..p].iter().any(|f| {
            event_type(f) == Some("message.complete") && f["params"]["session_id"] == sid
        }),
        "the pong came only after the turn ended: the loop was blocked {during}\n{}",
        g.diag()
    );
    at
}

/// Polls the messages of a stored session until `pred` holds (the store commits on its own
/// schedule); panics with the rows on timeout.
fn wait_rows<F: Fn(&[MsgRow]) -> bool>(
    g: &Gateway,
    stored: &str,
    what: &str,
    pred: F,
) -> Vec<MsgRow> {
    let deadline = Instant::now() + T;
    loop {
        let r = message_rows(&g.db_path(), stored);
        if pred(&r) {
            return r;
        }
        if Instant::now() > deadline {
            panic!("state.db never showed {what}; rows: {r:#?}\n{}", g.diag());
        }
        std::thread::sleep(ms(50));
    }
}

fn session_tokens(g: &Gateway, stored: &str) -> (i64, i64) {
    g.db()
        .query_row(
            "SELECT COALESCE(input_tokens,0), COALESCE(output_tokens,0) FROM sessions WHERE id = ?1",
            [stored],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or((-1, -1))
}

fn wait_session_tokens(g: &Gateway, stored: &str, want: (i64, i64)) {
    let deadline = Instant::now() + T;
    loop {
        let got = session_tokens(g, stored);
        if got == want {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "sessions row {stored}: (input_tokens, output_tokens) = {got:?}, want {want:?}\n{}",
                g.diag()
            );
        }
        std::thread::sleep(ms(50));
    }
}

/// The last assistant row with content (panics when none).
fn last_assistant(r: &[MsgRow]) -> &MsgRow {
    r.iter()
        .rev()
        .find(|r| r.role == "assistant")
        .unwrap_or_else(|| panic!("no assistant row: {r:#?}"))
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port();
    drop(l);
    p
}

fn unique(tag: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}-{}-{:x}", std::process::id(), n & 0xffff_ffff)
}

// ---------------------------------------------------------------------------------------------
// Streamed text and the request
// ---------------------------------------------------------------------------------------------

#[test]
fn streamed_text_chunked_and_the_request_the_gateway_sends() {
    let mock = MockAi::script(vec![Reply::text(&["Hel", "lo, ", "wor", "ld!"], (12, 5))]);
    let mut g = start_for(&mock);

    let st = g.call("setup.status", json!({}));
    assert_eq!(st["provider_configured"], true, "setup.status: {st}");
    assert_eq!(st["provider"], "openai-api", "setup.status: {st}");

    let s = g.create_session(json!({}));
    let prompt = "say hello please";
    let turn = g.run_turn(&s.id, prompt);
    assert_streamed_turn(&turn, &s.id, "Hello, world!");
    let deltas = turn
        .events
        .iter()
        .filter(|e| e["type"] == "message.delta")
        .count();
    assert!(deltas >= 1, "no message.delta events");

    let info = turn.events.last().unwrap();
    assert_eq!(
        info["payload"]["provider"], "openai-api",
        "session.info: {info}"
    );
    assert_eq!(info["payload"]["model"], MODEL, "session.info: {info}");

    // --- the request
    let reqs = mock.wait_requests(1, T);
    assert_eq!(reqs.len(), 1, "exactly one request for a plain answer");
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.version, "HTTP/1.1");
    assert_eq!(
        r.header("authorization"),
        Some("Bearer sk-test"),
        "{:?}",
        r.headers
    );
    assert!(
        r.header("content-type")
            .map(|v| v.to_ascii_lowercase().starts_with("application/json"))
            .unwrap_or(false),
        "content-type: {:?}",
        r.headers
    );
    assert_eq!(
        r.header("content-length")
            .and_then(|v| v.parse::<usize>().ok()),
        Some(r.body_raw.len()),
        "content-length must match the body"
    );
    assert!(
        r.header("host").is_some(),
        "HTTP/1.1 requires Host: {:?}",
        r.headers
    );
    let b = &r.body;
    assert!(
        b.is_object(),
        "body is not JSON: {}",
        String::from_utf8_lossy(&r.body_raw)
    );
    assert_eq!(b["model"], MODEL, "{b}");
    assert_eq!(b["stream"], true, "{b}");
    assert_eq!(b["stream_options"]["include_usage"], true, "{b}");
    let msgs = r.messages();
    let last = msgs.last().unwrap_or_else(|| panic!("no messages: {b}"));
    assert_eq!(last["role"], "user", "{b}");
    assert_eq!(content_text(&last["content"]), prompt, "{b}");
    for m in &msgs {
        let role = m["role"].as_str().unwrap_or("");
        assert!(
            ["system", "user", "assistant", "tool", "developer"].contains(&role),
            "bad role in {m}"
        );
    }
    let tools = b["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {b}"));
    let term = tools
        .iter()
        .find(|t| t["function"]["name"] == "terminal")
        .unwrap_or_else(|| panic!("terminal tool not advertised: {b}"));
    assert_eq!(term["type"], "function", "{term}");
    let params = &term["function"]["parameters"];
    assert_eq!(params["type"], "object", "{term}");
    assert!(params["properties"]["command"].is_object(), "{term}");
    assert!(
        params["required"]
            .as_array()
            .map(|a| a.iter().any(|x| x == "command"))
            .unwrap_or(false),
        "command should be required: {term}"
    );

    // --- transcript
    let r = wait_rows(&g, &s.stored, "user + assistant rows", |r| {
        r.iter()
            .any(|x| x.role == "assistant" && x.finish_reason.is_some())
    });
    assert_eq!(r[0].role, "user");
    assert_eq!(r[0].content.as_deref(), Some(prompt));
    let a = last_assistant(&r);
    assert_eq!(a.content.as_deref(), Some("Hello, world!"), "{r:#?}");
    assert_eq!(a.finish_reason.as_deref(), Some("stop"), "{r:#?}");
    assert_eq!(a.token_count, Some(5), "{r:#?}");
    g.assert_clean_stdout();
}

#[test]
fn streamed_text_close_delimited_body() {
    let ev1 = text_events(&["close ", "delimited ", "one"], "stop", Some((3, 3)));
    let ev2 = text_events(&["and ", "again"], "stop", Some((4, 2)));
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev1).framing(Framing::Close)),
        Reply::Stream(Stream::new(ev2).framing(Framing::Close)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t1 = g.run_turn(&s.id, "first");
    assert_streamed_turn(&t1, &s.id, "close delimited one");
    let t2 = g.run_turn(&s.id, "second");
    assert_streamed_turn(&t2, &s.id, "and again");
    assert_eq!(mock.request_count(), 2);
}

#[test]
fn events_split_across_reads_chunks_and_utf8_characters() {
    // Pieces of 3 bytes (chunked) and of 1 byte (close-delimited): event lines, chunk-size lines
    // and multi-byte characters all arrive cut in the middle.
    let pieces = ["héllo ", "wörld ", "✓ — ", "ünïcødé ", "🎉🎉", " end"];
    let expected: String = pieces.concat();
    let ev = text_events(&pieces, "stop", Some((7, 6)));
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev.clone()).split(3)),
        Reply::Stream(Stream::new(ev).framing(Framing::Close).split(1)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t1 = g.run_turn(&s.id, "split chunked");
    assert_streamed_turn(&t1, &s.id, &expected);
    let t2 = g.run_turn(&s.id, "split close");
    assert_streamed_turn(&t2, &s.id, &expected);
    let r = wait_rows(&g, &s.stored, "two assistant rows", |r| {
        r.iter().filter(|x| x.role == "assistant").count() >= 2
    });
    assert_eq!(
        last_assistant(&r).content.as_deref(),
        Some(expected.as_str())
    );
}

/// Beyond the letter of the contract but what real servers send (OpenRouter, llama.cpp):
/// `: comment` keep-alive lines between events.
#[test]
fn sse_comment_lines_are_ignored() {
    let ev = text_events(&["with ", "comments"], "stop", Some((2, 2)));
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(ev).comments())]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "comments");
    assert_streamed_turn(&t, &s.id, "with comments");
}

/// Beyond the letter of the contract: the SSE spec allows CRLF line endings.
#[test]
fn sse_crlf_line_endings() {
    let ev = text_events(&["crlf ", "lines"], "stop", Some((2, 2)));
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(ev).eol("\r\n"))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "crlf");
    assert_streamed_turn(&t, &s.id, "crlf lines");
}

#[test]
fn reasoning_deltas() {
    let ev = vec![
        ev_role(),
        ev_reasoning_content("Let me "),
        ev_reasoning_content("think."),
        ev_reasoning(" (more)"),
        ev_text("The "),
        ev_text("answer."),
        ev_finish("stop"),
        ev_usage(9, 8),
    ];
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(ev))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "think about it");
    assert_streamed_turn(&t, &s.id, "The answer.");
    let reasoning = payload_texts(&t.events, "reasoning.delta");
    assert_eq!(reasoning, "Let me think. (more)", "reasoning.delta texts");
    let ty = types(&t.events);
    let last_r = ty.iter().rposition(|x| x == "reasoning.delta").unwrap();
    let first_m = ty.iter().position(|x| x == "message.delta").unwrap();
    assert!(
        last_r < first_m,
        "reasoning streamed before the answer: {ty:?}"
    );
    let r = wait_rows(&g, &s.stored, "the assistant row", |r| {
        r.iter().any(|x| x.role == "assistant")
    });
    let a = last_assistant(&r);
    assert_eq!(a.content.as_deref(), Some("The answer."));
    assert!(
        a.reasoning
            .as_deref()
            .unwrap_or("")
            .contains("Let me think."),
        "reasoning stored on the assistant row: {a:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Tool calls
// ---------------------------------------------------------------------------------------------

#[test]
fn tool_call_round_trip_runs_the_command_and_sends_its_result_back() {
    let m = unique("tool-output-marker");
    let cmd = format!("echo {m}");
    let mock = MockAi::script(vec![
        // arguments streamed in 5-byte fragments
        Reply::Stream(Stream::new(tool_call_events("call_1", &cmd, 5, (20, 9)))),
        Reply::text(&["The command ", "printed the marker."], (40, 6)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let prompt = "run the echo command";
    let turn = g.run_turn(&s.id, prompt);
    let ev = &turn.events;
    let ty = types(ev);
    assert_seq_increasing(ev);

    let ts = ev
        .iter()
        .find(|e| e["type"] == "tool.start")
        .unwrap_or_else(|| panic!("no tool.start: {ty:?}"));
    assert_eq!(ts["payload"]["name"], "terminal", "{ts}");
    let tc = ev
        .iter()
        .find(|e| e["type"] == "tool.complete")
        .unwrap_or_else(|| panic!("no tool.complete: {ty:?}"));
    assert_eq!(tc["payload"]["name"], "terminal", "{tc}");
    assert_eq!(
        tc["payload"]["tool_id"], ts["payload"]["tool_id"],
        "{ts} {tc}"
    );
    let res = &tc["payload"]["result"];
    assert!(
        res["output"].as_str().unwrap_or("").contains(&m),
        "tool.complete result.output must hold the command's output: {tc}"
    );
    assert_eq!(res["exit_code"], 0, "{tc}");
    let si = ty.iter().position(|t| t == "tool.start").unwrap();
    let ci = ty.iter().position(|t| t == "tool.complete").unwrap();
    let mi = ty.iter().position(|t| t == "message.complete").unwrap();
    assert!(si < ci && ci < mi, "{ty:?}");

    let c = &turn.complete["payload"];
    assert_eq!(c["status"], "complete", "{c}");
    assert!(
        c["text"]
            .as_str()
            .unwrap_or("")
            .contains("The command printed the marker."),
        "{c}"
    );
    assert_eq!(c["usage"]["input"], 60, "summed prompt tokens: {c}");
    assert_eq!(c["usage"]["output"], 15, "summed completion tokens: {c}");
    assert_eq!(c["usage"]["total"], 75, "{c}");
    assert_eq!(c["usage"]["calls"], 2, "{c}");

    // --- the two requests
    let reqs = mock.wait_requests(2, T);
    assert_eq!(reqs.len(), 2, "one request per model round");
    let first = reqs[0].messages();
    assert_eq!(first.last().unwrap()["role"], "user");
    let second = &reqs[1];
    assert_eq!(second.body["stream"], true);
    assert!(
        second.body["tools"].is_array(),
        "tools still advertised: {}",
        second.body
    );
    let msgs = second.messages();
    assert!(msgs.len() >= 3, "{}", second.body);
    let n = msgs.len();
    let (user, asst, tool) = (&msgs[n - 3], &msgs[n - 2], &msgs[n - 1]);
    assert_eq!(user["role"], "user", "{}", second.body);
    assert_eq!(content_text(&user["content"]), prompt);
    assert_eq!(asst["role"], "assistant", "{}", second.body);
    let calls = asst["tool_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("assistant message without tool_calls: {asst}"));
    assert_eq!(calls.len(), 1, "{asst}");
    assert_eq!(calls[0]["id"], "call_1", "{asst}");
    assert_eq!(calls[0]["type"], "function", "{asst}");
    assert_eq!(calls[0]["function"]["name"], "terminal", "{asst}");
    let args_text = calls[0]["function"]["arguments"]
        .as_str()
        .unwrap_or_else(|| panic!("arguments must be a JSON string: {asst}"));
    let args: Value = serde_json::from_str(args_text)
        .unwrap_or_else(|e| panic!("arguments {args_text:?} are not JSON: {e}"));
    assert_eq!(args["command"], cmd, "reassembled arguments: {args_text}");
    assert_eq!(tool["role"], "tool", "{}", second.body);
    assert_eq!(tool["tool_call_id"], "call_1", "{tool}");
    assert!(
        content_text(&tool["content"]).contains(&m),
        "tool message must carry the command's output: {tool}"
    );

    // --- transcript rows
    let r = wait_rows(&g, &s.stored, "user, call, result, answer", |r| {
        r.len() >= 4 && r.last().map(|x| x.finish_reason.is_some()).unwrap_or(false)
    });
    let roles: Vec<&str> = r.iter().map(|x| x.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"], "{r:#?}");
    assert!(
        r[1].tool_calls.as_deref().unwrap_or("").contains("call_1"),
        "{r:#?}"
    );
    assert_eq!(r[1].finish_reason.as_deref(), Some("tool_calls"), "{r:#?}");
    assert_eq!(r[1].token_count, Some(9), "{r:#?}");
    assert_eq!(r[2].tool_call_id.as_deref(), Some("call_1"), "{r:#?}");
    assert!(r[2].content.as_deref().unwrap_or("").contains(&m), "{r:#?}");
    assert_eq!(r[3].finish_reason.as_deref(), Some("stop"), "{r:#?}");
    assert_eq!(r[3].token_count, Some(6), "{r:#?}");
    assert_eq!(
        r[3].content.as_deref(),
        Some("The command printed the marker.")
    );
    wait_session_tokens(&g, &s.stored, (60, 15));
}

#[test]
fn two_tool_calls_with_interleaved_fragments_are_assembled_by_index() {
    let ma = unique("alpha-out");
    let mb = unique("bravo-out");
    let a_args = json!({"command": format!("echo {ma}")}).to_string();
    let b_args = json!({"command": format!("echo {mb}")}).to_string();
    let (a1, a2) = a_args.split_at(a_args.len() / 2);
    let (b1, b2) = b_args.split_at(b_args.len() / 3);
    let ev = vec![
        ev_role(),
        ev_tool_start(0, "call_a", "terminal", a1),
        ev_tool_start(1, "call_b", "terminal", b1),
        ev_tool_args(1, b2),
        ev_tool_args(0, a2),
        ev_finish("tool_calls"),
        ev_usage(10, 10),
    ];
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev)),
        Reply::text(&["both ran"], (30, 2)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "run two commands");
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "{}",
        turn.complete
    );
    let completes: Vec<&Value> = turn
        .events
        .iter()
        .filter(|e| e["type"] == "tool.complete")
        .collect();
    assert_eq!(completes.len(), 2, "{:?}", types(&turn.events));
    let reqs = mock.wait_requests(2, T);
    let msgs = reqs[1].messages();
    let asst = msgs
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap_or_else(|| panic!("{}", reqs[1].body));
    let calls = asst["tool_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("{asst}"));
    assert_eq!(calls.len(), 2, "{asst}");
    let by_id = |id: &str| -> Value {
        let c = calls
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no call {id}: {asst}"));
        serde_json::from_str(c["function"]["arguments"].as_str().unwrap_or("null"))
            .unwrap_or_else(|e| panic!("call {id} arguments not JSON ({e}): {c}"))
    };
    assert_eq!(by_id("call_a")["command"], format!("echo {ma}"));
    assert_eq!(by_id("call_b")["command"], format!("echo {mb}"));
    let tool_for = |id: &str| -> String {
        let t = msgs
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no tool message for {id}: {}", reqs[1].body));
        content_text(&t["content"])
    };
    assert!(tool_for("call_a").contains(&ma));
    assert!(tool_for("call_b").contains(&mb));
}

// ---------------------------------------------------------------------------------------------
// Usage
// ---------------------------------------------------------------------------------------------

#[test]
fn usage_accounting_in_events_session_usage_and_the_store() {
    let mock = MockAi::script(vec![
        Reply::text(&["first ", "answer"], (12, 5)),
        Reply::text(&["second ", "answer"], (30, 7)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t1 = g.run_turn(&s.id, "question one");
    assert_streamed_turn(&t1, &s.id, "first answer");
    let u = &t1.complete["payload"]["usage"];
    assert_eq!(u["model"], MODEL, "{u}");
    assert_eq!(u["input"], 12, "{u}");
    assert_eq!(u["output"], 5, "{u}");
    assert_eq!(u["total"], 17, "{u}");
    assert_eq!(u["calls"], 1, "{u}");
    let su = g.call("session.usage", json!({"session_id": s.id}));
    let su = su.get("usage").unwrap_or(&su).clone();
    assert_eq!(su["input"], 12, "session.usage: {su}");
    assert_eq!(su["output"], 5, "session.usage: {su}");
    wait_session_tokens(&g, &s.stored, (12, 5));

    let t2 = g.run_turn(&s.id, "question two");
    assert_streamed_turn(&t2, &s.id, "second answer");
    let su = g.call("session.usage", json!({"session_id": s.id}));
    let su = su.get("usage").unwrap_or(&su).clone();
    assert_eq!(su["input"], 42, "session.usage after two turns: {su}");
    assert_eq!(su["output"], 12, "session.usage after two turns: {su}");
    assert_eq!(su["total"], 54, "{su}");
    assert_eq!(su["calls"], 2, "{su}");
    wait_session_tokens(&g, &s.stored, (42, 12));
    let r = wait_rows(&g, &s.stored, "two answers", |r| {
        r.iter()
            .filter(|x| x.role == "assistant" && x.finish_reason.is_some())
            .count()
            == 2
    });
    let tc: Vec<Option<i64>> = r
        .iter()
        .filter(|x| x.role == "assistant")
        .map(|x| x.token_count)
        .collect();
    assert_eq!(tc, [Some(5), Some(7)], "token_count per answer: {r:#?}");

    // the second request carries the whole conversation, in order
    let reqs = mock.wait_requests(2, T);
    let convo = reqs[1].conversation();
    assert_eq!(
        convo,
        [
            ("user".to_string(), "question one".to_string()),
            ("assistant".to_string(), "first answer".to_string()),
            ("user".to_string(), "question two".to_string()),
        ],
        "{}",
        reqs[1].body
    );
}

/// A streamed answer whose usage says `cached` of its `prompt` tokens came from the cache.
fn cached_answer(text: &str, prompt: u64, cached: u64, completion: u64) -> Reply {
    let mut events = text_events(&[text], "stop", None);
    events.push(
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1700000000,
            "model": "gpt-4.1", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached}}})
        .to_string(),
    );
    Reply::Stream(Stream::new(events))
}

/// GPT-4.1 direct ($2 in, $8 out, $0.50 a cached token per million): 10,000 prompt tokens of
/// which 8,000 cached and 200 out are 2,000 × 2 + 8,000 × 0.5 + 200 × 8 = $0.0096 — the cached
/// ones taken out of the prompt's count, not priced twice.
#[test]
fn an_openai_model_is_priced_with_its_cached_tokens_apart() {
    let mock = MockAi::script(vec![cached_answer("priced", 10_000, 8_000, 200)]);
    let mut g = Gateway::builder()
        .tag("openai-price")
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_MODEL", "gpt-4.1")
        .start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "what does it cost");
    let su = g.call("session.usage", json!({"session_id": s.id}));
    let su = su.get("usage").unwrap_or(&su).clone();
    let cost = su["cost_usd"].as_f64().unwrap_or(f64::NAN);
    assert!((cost - 0.0096).abs() < 1e-9, "{su}");
    assert_eq!(su["cost_status"], "estimated", "{su}");
    assert_eq!(
        (&su["input"], &su["cache_read"]),
        (&json!(10_000), &json!(8_000))
    );
    let text = g.call(
        "slash.exec",
        json!({"command": "usage", "session_id": s.id}),
    );
    let text = text["output"].as_str().unwrap_or_default();
    assert!(
        text.contains("~$0.0096 (estimated from openai-pricing-2026-03-16)"),
        "{text}"
    );
}

/// A model Hermes' table does not list: its price is unknown in `session.usage` and `/usage`.
#[test]
fn a_model_without_a_price_shows_the_price_as_unknown() {
    let mock = MockAi::script(vec![cached_answer("unpriced", 1_000, 100, 10)]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "what does it cost");
    let su = g.call("session.usage", json!({"session_id": s.id}));
    let su = su.get("usage").unwrap_or(&su).clone();
    assert_eq!(
        (&su["cost_usd"], &su["cost_status"], &su["cost_source"]),
        (&Value::Null, &json!("unknown"), &json!("none")),
        "{su}"
    );
    let text = g.call(
        "slash.exec",
        json!({"command": "usage", "session_id": s.id}),
    );
    let text = text["output"].as_str().unwrap_or_default();
    assert!(
        text.contains(&format!("n/a: no price known for {MODEL} on openai-api")),
        "{text}"
    );
}

#[test]
fn stream_without_usage_counts_a_call_with_zero_tokens() {
    let ev = text_events(&["no ", "usage"], "stop", None);
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(ev))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_streamed_turn(&t, &s.id, "no usage");
    let u = &t.complete["payload"]["usage"];
    assert_eq!(u["input"], 0, "{u}");
    assert_eq!(u["output"], 0, "{u}");
    assert_eq!(u["calls"], 1, "{u}");
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

#[test]
fn offline_model_is_the_default_without_a_provider() {
    let mut g = Gateway::builder().tag("openai-off").start();
    let st = g.call("setup.status", json!({}));
    assert_eq!(st["provider_configured"], true, "{st}");
    assert_eq!(st["provider"], "offline", "{st}");
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "offline hello");
    assert_eq!(t.complete["payload"]["status"], "complete");
}

#[test]
fn an_openai_key_alone_reaches_openrouter_as_hermes_does() {
    // Hermes' `auto` takes OPENAI_API_KEY for an OpenRouter key (OPENROUTER_BASE_URL points
    // OpenRouter at the mock), with OpenRouter's attribution headers.
    let mock = MockAi::script(vec![Reply::text(&["routed"], (1, 1))]);
    let mut g = Gateway::builder()
        .tag("openai-key")
        .env("OPENAI_API_KEY", KEY)
        .env("OPENROUTER_BASE_URL", &mock.base_url())
        .env("OPENAI_MODEL", MODEL)
        .start();
    let st = g.call("setup.status", json!({}));
    assert_eq!(st["provider"], "openrouter", "{st}");
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "which router");
    assert_streamed_turn(&t, &s.id, "routed");
    let r = &mock.wait_requests(1, T)[0];
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.header("x-openrouter-title"), Some("Hermes Agent"));
    assert_eq!(
        r.header("http-referer"),
        Some("https://hermes-agent.nousresearch.com")
    );
}

#[test]
fn model_flag_names_the_model() {
    let mock = MockAi::script(vec![Reply::text(&["ok"], (1, 1))]);
    let mut g = Gateway::builder()
        .tag("openai-flag")
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", KEY)
        .args(&["serve", "--model", "flag-model"])
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "which model");
    assert_streamed_turn(&t, &s.id, "ok");
    let reqs = mock.wait_requests(1, T);
    assert_eq!(reqs[0].body["model"], "flag-model", "{}", reqs[0].body);
}

#[test]
fn config_yaml_model_section_selects_the_provider() {
    for provider in ["custom", "openai"] {
        let mock = MockAi::script(vec![Reply::text(&["from ", "config"], (2, 2))]);
        let home = TempHome::new("openai-yaml");
        std::fs::write(
            home.path.join("config.yaml"),
            format!(
                "# written by the test\nmodel:\n  default: cfg-model\n  provider: {provider}\n  base_url: {}\nother:\n  key: value\n",
                mock.base_url()
            ),
        )
        .unwrap();
        // The key in .env, where `hermes setup` saves it (the endpoint is OpenAI's by name).
        std::fs::write(home.path.join(".env"), format!("OPENAI_API_KEY={KEY}\n")).unwrap();
        let mut g = Gateway::builder()
            .tag("openai-yaml")
            .home(&home.path)
            .start();
        let st = g.call("setup.status", json!({}));
        assert_eq!(st["provider_configured"], true, "{provider}: {st}");
        let id = if provider == "openai" {
            "openai-api"
        } else {
            "custom"
        };
        assert_eq!(st["provider"], id, "{provider}: {st}");
        let s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "from yaml");
        assert_streamed_turn(&t, &s.id, "from config");
        let reqs = mock.wait_requests(1, T);
        assert_eq!(
            reqs[0].body["model"], "cfg-model",
            "{provider}: {}",
            reqs[0].body
        );
        assert_eq!(reqs[0].path, "/v1/chat/completions");
    }
}

// ---------------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------------

#[test]
fn connection_refused() {
    let base = format!("http://127.0.0.1:{}/v1", closed_port());
    let mut g = builder_for(&base).start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "anyone there");
    // Refused at once: the turn ends well before the test's deadline.
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(10));
    assert_err_mentions(&err, &["connection refused"]);
    g.ping();
    // the session is still usable (and fails the same way, promptly)
    let start = submit(&mut g, &s.id, "again");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, T);
    assert_err_mentions(&err, &["connection refused"]);
    let r = wait_rows(&g, &s.stored, "both user rows", |r| {
        r.iter().filter(|x| x.role == "user").count() == 2
    });
    assert_eq!(r[0].content.as_deref(), Some("anyone there"));
}

#[test]
fn name_resolution_failure() {
    let mut g = builder_for("http://nonexistent.invalid/v1").start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "resolve me");
    // the loop keeps answering while the name is being resolved
    pong_before_turn_ends(&mut g, &s.id, "during name resolution");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(40));
    assert_err_mentions(&err, &["resolve"]);
    g.ping();
}

fn tls_failure_with(behaviour: fn(TcpStream)) {
    let mock = MockAi::raw(behaviour);
    let base = format!("https://127.0.0.1:{}/v1", mock.port);
    let mut g = builder_for(&base).start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "secure please");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(20));
    eprintln!("TLS failure error text: {err}");
    assert_err_mentions(&err, &["tls"]);
    mock.wait_conns(1, T);
    g.ping();
}

#[test]
fn tls_failure_plain_tcp_server_answers_garbage() {
    tls_failure_with(|mut s| {
        use std::io::{Read, Write};
        let _ = s.set_read_timeout(Some(secs(5)));
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf); // the ClientHello
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nnot tls!!!\n");
        let _ = s.flush();
        std::thread::sleep(ms(200));
    });
}

#[test]
fn tls_failure_server_closes_at_once() {
    tls_failure_with(|mut s| {
        use std::io::Read;
        let _ = s.set_read_timeout(Some(secs(5)));
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.shutdown(std::net::Shutdown::Both);
    });
}

#[test]
fn tls_failure_untrusted_certificate() {
    let (mock, results) = MockAi::tls_self_signed();
    let base = format!("https://127.0.0.1:{}/v1", mock.port);
    let mut g = builder_for(&base).start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "self-signed");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(20));
    eprintln!("untrusted certificate error text: {err}");
    assert_err_mentions(&err, &["tls"]);
    assert!(
        err.to_lowercase().contains("certificate") || err.to_lowercase().contains("issuer"),
        "a certificate failure should say so: {err:?}"
    );
    assert_eq!(mock.request_count(), 0);
    let r = results.lock().unwrap().clone();
    assert!(
        !r.iter().any(|x| x == "handshake complete"),
        "the gateway accepted a self-signed certificate: {r:?}"
    );
    g.ping();
}

/// PEM text of a DER certificate (what `SSL_CERT_FILE` holds).
fn pem(der: &[u8]) -> String {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::new();
    for chunk in der.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| n << 8 | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            text.push(if i <= chunk.len() {
                B64[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    let lines: Vec<&str> = text
        .as_bytes()
        .chunks(64)
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

#[test]
fn tls_trusts_a_certificate_the_system_store_names() {
    // The same self-signed server as above, now trusted through SSL_CERT_FILE, the way a
    // corporate CA or a local server's own certificate is trusted.
    let (mock, results) = MockAi::tls_self_signed();
    let home = TempHome::new("openai-ca");
    let cert = home.path.join("ca.pem");
    std::fs::write(&cert, pem(mockai::SELF_SIGNED_CERT_DER)).unwrap();
    let base = format!("https://127.0.0.1:{}/v1", mock.port);
    let mut g = builder_for(&base)
        .env("SSL_CERT_FILE", cert.to_str().unwrap())
        .start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "trusted now");
    assert_eq!(
        turn.complete["payload"]["status"],
        "complete",
        "{}",
        g.diag()
    );
    assert_eq!(turn.text, "tls ok");
    let r = results.lock().unwrap().clone();
    assert!(r.iter().any(|x| x == "handshake complete"), "{r:?}");
}

fn http_status_failure(code: u16, words: &[&str]) {
    // The body deliberately does not contain the words the error text must have: the gateway
    // has to say what to do itself.
    let mock = MockAi::script(vec![
        Reply::status(
            code,
            r#"{"error":{"message":"denied by mock","type":"mock"}}"#,
        ),
        Reply::text(&["after ", "denial"], (1, 1)),
    ]);
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_RETRY_BASE_S", "0.05")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "let me in");
    let (t, err) = finish_error_turn(&mut g, &s.id, start, T);
    assert_err_mentions(&err, words);
    // The provider's own message is passed on, and nothing else is said.
    assert_err_mentions(&err, &["denied by mock"]);
    assert_eq!(t.complete["payload"]["text"], format!("Error: {err}"));
    // not retried
    g.collect_for(ms(300));
    assert_eq!(mock.request_count(), 1, "{code} must not be retried");
    // the gateway and the session go on
    let t = g.run_turn(&s.id, "try again");
    assert_streamed_turn(&t, &s.id, "after denial");
}

#[test]
fn http_401_names_the_key() {
    http_status_failure(401, &["401", "key"]);
}

#[test]
fn http_403_names_the_key() {
    http_status_failure(403, &["403", "key"]);
}

#[test]
fn a_refused_key_quoted_by_the_provider_is_not_passed_on() {
    let key = format!("sk-quoted-{}", unique("key"));
    let body = format!(r#"{{"error":{{"message":"Incorrect API key provided: {key}."}}}}"#);
    let mock = MockAi::script(vec![
        Reply::status(401, &body),
        Reply::text(&["in"], (1, 1)),
    ]);
    let mut g = Gateway::builder()
        .tag("openai")
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", &key)
        .env("OPENAI_MODEL", MODEL)
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "let me in");
    let (t, err) = finish_error_turn(&mut g, &s.id, start, T);
    assert_err_mentions(&err, &["401", "Incorrect API key provided"]);
    let said = serde_json::to_string(&t.events).unwrap();
    assert!(!said.contains(&key), "the key was passed on: {said}");
    // It was the key sent (so hiding it is what kept it out).
    let sent = mock.first_post_bearer().unwrap_or_default();
    assert!(sent.ends_with(&key), "{sent}");
}

fn exhausted_retries(code: u16) {
    let mock = MockAi::start(move |_| Reply::status(code, r#"{"error":{"message":"try later"}}"#));
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_MODEL_RETRIES", "2")
        .env("TUI_GATEWAY_RETRY_BASE_S", "0.05")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "busy?");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(30));
    assert_err_mentions(&err, &[&code.to_string(), "try later"]);
    g.collect_for(ms(300));
    assert_eq!(
        mock.request_count(),
        3,
        "{code}: one attempt + TUI_GATEWAY_MODEL_RETRIES=2 retries"
    );
    g.ping();
}

#[test]
fn http_429_retried_then_error() {
    exhausted_retries(429);
}

#[test]
fn http_500_retried_then_error() {
    exhausted_retries(500);
}

#[test]
fn default_retry_count_is_two() {
    let mock = MockAi::start(|_| Reply::status(503, r#"{"error":{"message":"overloaded"}}"#));
    let mut g = builder_for(&mock.base_url()).start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "busy?");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(40));
    assert_err_mentions(&err, &["503"]);
    g.collect_for(ms(300));
    assert_eq!(mock.request_count(), 3, "default: 2 retries");
    let reqs = mock.requests();
    let gap = reqs[1].at.duration_since(reqs[0].at);
    assert!(
        gap >= ms(250),
        "default backoff base 0.5 s: first retry after {gap:?}"
    );
}

#[test]
fn http_429_then_200_succeeds() {
    let mock = MockAi::script(vec![
        Reply::status(429, r#"{"error":{"message":"slow down"}}"#),
        Reply::text(&["got ", "through"], (3, 2)),
    ]);
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_RETRY_BASE_S", "0.05")
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "retry me");
    assert_streamed_turn(&t, &s.id, "got through");
    assert_eq!(mock.request_count(), 2);
    // the retried request is the same request
    let reqs = mock.requests();
    assert_eq!(reqs[0].body, reqs[1].body, "a retry resends the same body");
}

#[test]
fn http_502_then_200_succeeds() {
    let mock = MockAi::script(vec![
        Reply::status(502, "bad gateway"),
        Reply::text(&["recovered"], (3, 1)),
    ]);
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_RETRY_BASE_S", "0.05")
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "retry me");
    assert_streamed_turn(&t, &s.id, "recovered");
    assert_eq!(mock.request_count(), 2);
}

#[test]
fn retry_after_is_honoured() {
    let mock = MockAi::script(vec![
        Reply::status_with(
            429,
            &[("Retry-After", "1")],
            r#"{"error":{"message":"wait"}}"#,
        ),
        Reply::text(&["waited"], (1, 1)),
    ]);
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_RETRY_BASE_S", "0.01")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "patience");
    mock.wait_requests(1, T);
    // the loop is free while it waits: the pong comes before the retry reaches the mock
    let pong_at = pong_before_turn_ends(&mut g, &s.id, "in the Retry-After wait");
    let t = g.finish_turn(&s.id, start, T);
    assert_streamed_turn(&t, &s.id, "waited");
    let reqs = mock.wait_requests(2, T);
    assert!(
        pong_at < reqs[1].at,
        "the ping was answered only after the retry went out"
    );
    let gap = reqs[1].at.duration_since(reqs[0].at);
    assert!(
        gap >= ms(900),
        "Retry-After: 1 must delay the retry by ~1 s (backoff base is 0.01 s); got {gap:?}"
    );
}

#[test]
fn interrupt_during_a_long_retry_after_wait() {
    // Retry-After far in the future (capped or not): an interrupt still ends the turn at once.
    let mock = MockAi::script(vec![Reply::status_with(
        429,
        &[("Retry-After", "3600")],
        r#"{"error":{"message":"wait an hour"}}"#,
    )]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "long wait");
    mock.wait_requests(1, T);
    g.collect_for(ms(200));
    let r = g.call("session.interrupt", json!({"session_id": s.id}));
    assert_eq!(r["status"], "interrupted", "{r}");
    // The turn ends long before the wait it was in would have.
    let turn = g.finish_turn(&s.id, start, secs(5));
    assert_eq!(
        turn.complete["payload"]["status"], "interrupted",
        "{}",
        turn.complete
    );
}

#[test]
fn an_absurd_retry_after_is_capped_and_the_gateway_keeps_serving() {
    let mock = MockAi::script(vec![Reply::status_with(
        429,
        &[("Retry-After", "1e30")],
        r#"{"error":{"message":"come back never"}}"#,
    )]);
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_RETRY_CAP_S", "7")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "patience");
    let notice = g.wait_session_event(&s.id, "status.update", T);
    let text = notice["payload"]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("retrying in 7.0s"),
        "the cap is the setting: {notice}"
    );
    g.ping();
    g.call("session.interrupt", json!({"session_id": s.id}));
    let turn = g.finish_turn(&s.id, start, secs(5));
    assert_eq!(turn.complete["payload"]["status"], "interrupted");
    assert!(g.try_exit().is_none(), "the gateway must keep running");
}

#[test]
fn thousands_of_tool_calls_in_one_answer_end_in_a_normal_turn() {
    // Each call fails at once (unknown tool); past the per-answer cap they are answered without
    // running. Neither may exhaust the stack or the gateway.
    const CALLS: u64 = 8_000;
    let mut ev = vec![ev_role()];
    ev.extend((0..CALLS).map(|i| ev_tool_start(i, &format!("c{i}"), "nosuch", "{}")));
    ev.push(ev_finish("tool_calls"));
    ev.push(ev_usage(10, CALLS));
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev)),
        Reply::text(&["all ", "answered"], (5, 2)),
        Reply::text(&["yes"], (1, 1)),
    ]);
    let mut g = start_for(&mock);
    let other = g.create_session(json!({}));
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "call everything");
    let turn = g.finish_turn(&s.id, start, secs(60));
    let p = &turn.complete["payload"];
    assert_eq!(p["status"], "complete", "{}", p["error"]);
    assert_eq!(turn.text, "all answered");
    let started = turn
        .events
        .iter()
        .filter(|e| e["type"] == "tool.start")
        .count();
    assert!(started <= 128, "{started} calls started; the cap is 128");
    // Every call has a result in the transcript the model is sent next.
    let second = &mock.requests()[1];
    let results = second
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(results as u64, CALLS);
    // The gateway still serves other sessions.
    let t = g.run_turn(&other.id, "still there?");
    assert_eq!(t.complete["payload"]["status"], "complete");
}

#[test]
fn malformed_event_stream() {
    let ev = vec![
        ev_role(),
        ev_text("partial-before-bad "),
        "{not json".to_string(),
    ];
    let mock = MockAi::script(vec![
        // after the bad event the mock stalls: only the gateway's own check can end the turn
        Reply::Stream(Stream::new(ev).end(End::Stall)),
        Reply::text(&["fine ", "now"], (1, 2)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "break it");
    let (t, err) = finish_error_turn(&mut g, &s.id, start, T);
    assert_err_mentions(&err, &["malformed"]);
    assert!(
        t.text.contains("partial-before-bad"),
        "message.complete keeps the text that arrived: {}",
        t.complete
    );
    assert!(
        mock.wait_peer_closed(0, secs(5)).is_some(),
        "the gateway must drop the connection of a malformed stream"
    );
    let r = wait_rows(&g, &s.stored, "the partial assistant row", |r| {
        r.iter().any(|x| x.role == "assistant")
    });
    assert!(
        last_assistant(&r)
            .content
            .as_deref()
            .unwrap_or("")
            .contains("partial-before-bad"),
        "{r:#?}"
    );
    let t = g.run_turn(&s.id, "again");
    assert_streamed_turn(&t, &s.id, "fine now");
}

fn cut_stream(framing: Framing) {
    let ev = vec![ev_role(), ev_text("first half "), ev_text("second")];
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev).framing(framing).end(End::Cut)),
        Reply::text(&["whole"], (1, 1)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "cut me");
    let (t, err) = finish_error_turn(&mut g, &s.id, start, T);
    assert_err_mentions(&err, &["ended"]);
    assert_eq!(
        t.complete["payload"]["text"],
        format!("first half second\n\nError: {err}"),
        "the text that arrived, then why it stopped: {}",
        t.complete
    );
    let r = wait_rows(&g, &s.stored, "the partial assistant row", |r| {
        r.iter().any(|x| x.role == "assistant")
    });
    assert_eq!(
        last_assistant(&r).content.as_deref(),
        Some("first half second"),
        "{r:#?}"
    );
    g.ping();
    let t = g.run_turn(&s.id, "again");
    assert_streamed_turn(&t, &s.id, "whole");
}

#[test]
fn stream_cut_midway_chunked() {
    cut_stream(Framing::Chunked);
}

#[test]
fn stream_cut_midway_close_delimited() {
    cut_stream(Framing::Close);
}

#[test]
fn first_byte_timeout_with_a_stalling_server_while_other_sessions_go_on() {
    // Prompts containing "stall" get a server that reads the request and never answers.
    let mock = MockAi::start(|r| {
        if r.last_user_text().contains("stall") {
            Reply::Stall
        } else {
            Reply::text(&["other ", "session ", "fine"], (1, 3))
        }
    });
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_FIRST_BYTE_TIMEOUT_S", "1")
        .start();
    let a = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    let t0 = Instant::now();
    let start_a = submit(&mut g, &a.id, "please stall");
    mock.wait_requests(1, T);
    // meanwhile: ping and a whole turn of another session
    pong_before_turn_ends(&mut g, &a.id, "while a request stalls");
    let tb = g.run_turn(&b.id, "normal question");
    assert_streamed_turn(&tb, &b.id, "other session fine");
    let (_t, err) = finish_error_turn(&mut g, &a.id, start_a, secs(15));
    let took = t0.elapsed();
    // The configured timeout is the one that fired.
    assert_err_mentions(&err, &["timed out", "first byte after 1s"]);
    assert!(took >= ms(900), "timed out too early: {took:?}");
    let stalled = mock
        .requests()
        .iter()
        .find(|r| r.last_user_text().contains("stall"))
        .map(|r| r.conn)
        .unwrap();
    assert!(
        mock.wait_peer_closed(stalled, secs(5)).is_some(),
        "the timed-out connection must be closed"
    );
    let t = g.run_turn(&a.id, "not this time");
    assert_streamed_turn(&t, &a.id, "other session fine");
}

#[test]
fn first_byte_timeout_when_the_server_never_reads() {
    let mock = MockAi::raw(|s| {
        // accept, never read, never write; hold the socket a while
        std::thread::sleep(secs(20));
        drop(s);
    });
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_FIRST_BYTE_TIMEOUT_S", "1")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "hello?");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(15));
    assert_err_mentions(&err, &["timed out", "first byte after 1s"]);
    g.ping();
}

#[test]
fn idle_timeout_mid_stream_keeps_the_partial_text() {
    let ev = vec![ev_role(), ev_text("some "), ev_text("words")];
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(ev).end(End::Stall))]);
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_IDLE_TIMEOUT_S", "1")
        .env("TUI_GATEWAY_FIRST_BYTE_TIMEOUT_S", "10")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "go quiet");
    g.wait_session_event(&s.id, "message.delta", T);
    pong_before_turn_ends(&mut g, &s.id, "while the stream is idle");
    let (t, err) = finish_error_turn(&mut g, &s.id, start, secs(15));
    // The idle timeout of 1 s fired, not the first-byte one of 10 s.
    assert_err_mentions(&err, &["timed out", "nothing for 1s"]);
    assert_eq!(
        t.complete["payload"]["text"],
        format!("some words\n\nError: {err}"),
        "{}",
        t.complete
    );
    assert!(
        mock.wait_peer_closed(0, secs(5)).is_some(),
        "idle connection must be closed"
    );
    let r = wait_rows(&g, &s.stored, "the partial assistant row", |r| {
        r.iter().any(|x| x.role == "assistant")
    });
    assert_eq!(
        last_assistant(&r).content.as_deref(),
        Some("some words"),
        "{r:#?}"
    );
}

#[test]
fn connect_timeout() {
    use std::os::fd::AsRawFd;
    // A listener with a backlog of 0 whose queue is filled: the kernel drops further SYNs, so a
    // connect neither succeeds nor fails until the client gives up.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
    let mut fillers = Vec::new();
    for _ in 0..3 {
        if let Ok(c) = TcpStream::connect_timeout(&l.local_addr().unwrap(), ms(300)) {
            fillers.push(c);
        }
    }
    if TcpStream::connect_timeout(&l.local_addr().unwrap(), ms(300)).is_ok() {
        eprintln!("connect_timeout: cannot make a connect hang on this kernel; skipped");
        return;
    }
    let base = format!("http://127.0.0.1:{port}/v1");
    let mut g = builder_for(&base)
        .env("TUI_GATEWAY_CONNECT_TIMEOUT_S", "1")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "connect?");
    pong_before_turn_ends(&mut g, &s.id, "while connecting");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(15));
    assert_err_mentions(&err, &["timed out", "connecting", "after 1s"]);
    drop(fillers);
}

// ---------------------------------------------------------------------------------------------
// Interrupt and shutdown
// ---------------------------------------------------------------------------------------------

fn slow_tokens(n: usize, delay: Duration) -> Reply {
    let pieces: Vec<String> = (0..n).map(|i| format!("tok{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    Reply::Stream(Stream::new(text_events(&refs, "stop", Some((5, n as u64)))).delay(delay))
}

#[test]
fn interrupt_mid_stream_closes_the_request() {
    let mock = MockAi::script(vec![
        slow_tokens(2000, ms(20)),
        Reply::text(&["next ", "turn"], (1, 2)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "talk a lot");
    g.wait_session_event(&s.id, "message.delta", T);
    g.collect_for(ms(150));
    let r = g.call("session.interrupt", json!({"session_id": s.id}));
    assert_eq!(r["status"], "interrupted", "{r}");
    let turn = g.finish_turn(&s.id, start, secs(5));
    let c = &turn.complete["payload"];
    assert_eq!(c["status"], "interrupted", "{c}");
    let text = c["text"].as_str().unwrap_or("").to_string();
    assert!(text.starts_with("tok0 "), "partial text: {c}");
    assert!(
        !text.contains("tok1999"),
        "the stream cannot have finished: {c}"
    );
    assert_eq!(payload_texts(&turn.events, "message.delta"), text);
    // Closed by the interrupt: the stream itself would go on for 40 s.
    let closed = mock.wait_peer_closed(0, secs(3));
    assert!(
        closed.is_some(),
        "the mock never saw its connection closed after the interrupt"
    );
    let rows = wait_rows(&g, &s.stored, "the interrupted assistant row", |r| {
        r.iter()
            .any(|x| x.role == "assistant" && x.finish_reason.is_some())
    });
    let a = last_assistant(&rows);
    assert_eq!(a.content.as_deref(), Some(text.as_str()), "{rows:#?}");
    assert_eq!(a.finish_reason.as_deref(), Some("interrupted"), "{rows:#?}");
    // and the session goes on
    let t = g.run_turn(&s.id, "continue");
    assert_streamed_turn(&t, &s.id, "next turn");
}

#[test]
fn shutdown_mid_stream_closes_the_request_and_keeps_the_partial_text() {
    let mock = MockAi::script(vec![slow_tokens(2000, ms(20))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let _start = submit(&mut g, &s.id, "talk until stopped");
    g.wait_session_event(&s.id, "message.delta", T);
    g.collect_for(ms(150));
    g.signal(libc::SIGTERM);
    // Out well before the stream (40 s) would end.
    g.wait_exit(secs(10));
    assert!(
        mock.wait_peer_closed(0, secs(3)).is_some(),
        "the request must be closed at shutdown"
    );
    let c = g
        .try_wait_session_event(&s.id, "message.complete", ms(100))
        .unwrap_or_else(|| panic!("no message.complete at shutdown\n{}", g.diag()));
    assert_eq!(c["payload"]["status"], "interrupted", "{c}");
    let r = message_rows(&g.db_path(), &s.stored);
    let a = last_assistant(&r);
    assert!(
        a.content.as_deref().unwrap_or("").starts_with("tok0 "),
        "partial text saved at shutdown: {r:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------------

#[test]
fn two_sessions_stream_at_once_while_ping_is_answered() {
    const N: usize = 40;
    // Each reply echoes the prompt's word, one delta per 20 ms (~0.8 s per answer).
    let mock = MockAi::start(|r| {
        let w = r.last_user_text();
        let pieces: Vec<String> = (0..N).map(|i| format!("{w}{i} ")).collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        Reply::Stream(Stream::new(text_events(&refs, "stop", Some((3, N as u64)))).delay(ms(20)))
    });
    let expect = |w: &str| -> String { (0..N).map(|i| format!("{w}{i} ")).collect() };
    let mut g = start_for(&mock);
    let a = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    let sa = submit(&mut g, &a.id, "alpha");
    let sb = submit(&mut g, &b.id, "bravo");
    let start = sa.min(sb);
    mock.wait_requests(2, T);

    // ping while both stream: pongs come out between the streams' deltas
    let deadline = Instant::now() + secs(20);
    loop {
        g.drain_available();
        let done = g.frames[start..]
            .iter()
            .filter(|f| event_type(f) == Some("message.complete"))
            .count();
        if done >= 2 || Instant::now() > deadline {
            break;
        }
        g.ping();
        g.collect_for(ms(30));
    }
    let both_done = g.frames[start..]
        .iter()
        .enumerate()
        .filter(|(_, f)| event_type(f) == Some("message.complete"))
        .nth(1)
        .map_or(g.frames.len(), |(i, _)| start + i);
    let pongs = g.frames[start..both_done]
        .iter()
        .filter(|f| is_response(f) && f["result"] == json!({"pong": true}))
        .count();
    assert!(
        pongs >= 5,
        "only {pongs} pings answered before the streams ended"
    );

    let ta = g.finish_turn(&a.id, sa, T);
    let tb = g.finish_turn(&b.id, sb, T);
    assert_streamed_turn(&ta, &a.id, &expect("alpha"));
    assert_streamed_turn(&tb, &b.id, &expect("bravo"));

    // the two requests were in flight together
    let reqs = mock.requests();
    let gap = if reqs[1].at > reqs[0].at {
        reqs[1].at - reqs[0].at
    } else {
        reqs[0].at - reqs[1].at
    };
    assert!(
        gap < ms(500),
        "second request started {gap:?} after the first: not concurrent"
    );
    // and their deltas interleaved on stdout
    let order: Vec<&str> = g.frames[start..]
        .iter()
        .filter(|f| event_type(f) == Some("message.delta"))
        .map(|f| f["params"]["session_id"].as_str().unwrap_or(""))
        .collect();
    let switches = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        switches >= 4,
        "deltas of the two sessions did not interleave: {switches} switches"
    );
}

// ---------------------------------------------------------------------------------------------
// More wire shapes and edges
// ---------------------------------------------------------------------------------------------

/// What OpenAI itself sends with `include_usage`: `"usage": null` on every chunk, plus
/// `system_fingerprint`, `logprobs` and an empty-choices usage chunk at the end.
#[test]
fn openai_wire_format_with_null_usage_on_every_chunk() {
    let chunk = |delta: Value, finish: Value| -> String {
        json!({"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1,
               "model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_x",
               "choices":[{"index":0,"delta":delta,"logprobs":null,"finish_reason":finish}],
               "usage":null})
        .to_string()
    };
    let ev = vec![
        chunk(
            json!({"role":"assistant","content":"","refusal":null}),
            Value::Null,
        ),
        chunk(json!({"content":"Real "}), Value::Null),
        chunk(json!({"content":"format"}), Value::Null),
        chunk(json!({}), json!("stop")),
        json!({"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1,
               "model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_x","choices":[],
               "usage":{"prompt_tokens":11,"completion_tokens":2,"total_tokens":13,
                        "prompt_tokens_details":{"cached_tokens":0},
                        "completion_tokens_details":{"reasoning_tokens":0}}})
        .to_string(),
    ];
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(ev))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "real format");
    assert_streamed_turn(&t, &s.id, "Real format");
    let u = &t.complete["payload"]["usage"];
    assert_eq!(
        (u["input"].as_u64(), u["output"].as_u64()),
        (Some(11), Some(2)),
        "{u}"
    );
}

#[test]
fn text_before_a_tool_call_is_kept_and_sent_back() {
    let m = unique("said-and-ran");
    let cmd = format!("echo {m}");
    let mut ev = vec![ev_role(), ev_text("Let me "), ev_text("check. ")];
    ev.extend(
        tool_call_events("call_9", &cmd, 8, (5, 5))
            .into_iter()
            .skip(1),
    );
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev)),
        Reply::text(&["Done."], (9, 1)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "check something");
    let c = &t.complete["payload"];
    assert_eq!(c["status"], "complete", "{c}");
    let text = c["text"].as_str().unwrap_or("");
    assert!(
        text.contains("Let me check.") && text.contains("Done."),
        "{c}"
    );
    let reqs = mock.wait_requests(2, T);
    let msgs = reqs[1].messages();
    let asst = msgs
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap_or_else(|| panic!("{}", reqs[1].body));
    assert_eq!(content_text(&asst["content"]), "Let me check. ", "{asst}");
    assert_eq!(asst["tool_calls"][0]["id"], "call_9", "{asst}");
}

/// OpenRouter and others report failures mid-stream as an `{"error":…}` event on a 200.
#[test]
fn error_event_inside_the_stream() {
    let ev = vec![
        ev_role(),
        ev_text("half "),
        json!({"error":{"message":"upstream provider overloaded","code":502}}).to_string(),
    ];
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(ev).end(End::Stall))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "mid-stream error");
    let (t, err) = finish_error_turn(&mut g, &s.id, start, T);
    assert_err_mentions(&err, &["upstream provider overloaded"]);
    assert_eq!(
        t.complete["payload"]["text"],
        format!("half\n\nError: {err}"),
        "{}",
        t.complete
    );
    assert!(mock.wait_peer_closed(0, secs(5)).is_some());
}

#[test]
fn host_name_base_url_is_resolved() {
    let mock = MockAi::script(vec![Reply::text(&["by ", "name"], (1, 1))]);
    let mut g = builder_for(&format!("http://localhost:{}/v1", mock.port)).start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "resolve localhost");
    assert_streamed_turn(&t, &s.id, "by name");
    let reqs = mock.wait_requests(1, T);
    assert_eq!(
        reqs[0].header("host"),
        Some(format!("localhost:{}", mock.port).as_str()),
        "{:?}",
        reqs[0].headers
    );
}

#[test]
fn large_request_body_to_a_slow_reader_is_sent_whole_while_the_loop_stays_responsive() {
    let mock = MockAi::script(vec![Reply::text(&["read ", "it"], (1, 1))]);
    // the mock sits on the body for 1.5 s: the gateway's writes hit a full socket buffer
    mock.set_read_delay(ms(1500));
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    // ~0.9 MiB (prompts are capped at 1 MiB) with multi-byte characters: Content-Length
    // counts bytes
    let prompt = format!("{}ünïcødé✓ end", "long prompt line ".repeat(55_000));
    let start = submit(&mut g, &s.id, &prompt);
    mock.wait_conns(1, T);
    g.collect_for(ms(200));
    pong_before_turn_ends(&mut g, &s.id, "while the request body is being sent");
    let t = g.finish_turn(&s.id, start, secs(30));
    assert_streamed_turn(&t, &s.id, "read it");
    let reqs = mock.wait_requests(1, T);
    assert_eq!(
        reqs[0]
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok()),
        Some(reqs[0].body_raw.len())
    );
    assert_eq!(reqs[0].last_user_text(), prompt, "the prompt arrived whole");
}

#[test]
fn chunked_encoding_variants_uppercase_hex_extensions_trailers() {
    let mock = MockAi::script(vec![Reply::Custom(Box::new(|c: &mut Conn| {
        let _ = c.write_raw(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n\
              transfer-encoding: Chunked\r\n\r\n",
        );
        let mut body = String::new();
        for e in text_events(&["Upper", "Case ", "hex"], "stop", Some((1, 3))) {
            body.push_str(&format!("data: {e}\n\n"));
        }
        body.push_str("data: [DONE]\n\n");
        let bytes = body.as_bytes();
        let (a, b) = bytes.split_at(bytes.len() / 2);
        let mut raw = Vec::new();
        raw.extend_from_slice(format!("{:X};name=value\r\n", a.len()).as_bytes());
        raw.extend_from_slice(a);
        raw.extend_from_slice(b"\r\n");
        raw.extend_from_slice(format!("{:X}\r\n", b.len()).as_bytes());
        raw.extend_from_slice(b);
        raw.extend_from_slice(b"\r\n0\r\nX-Trailer: yes\r\n\r\n");
        let _ = c.write_raw(&raw);
        c.hold_until_peer_closes();
    }))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "chunk variants");
    assert_streamed_turn(&t, &s.id, "UpperCase hex");
}

/// Extension: `: keep-alive` comments are bytes on the wire, so a server that keeps the
/// connection alive with them while it thinks does not trip the idle timeout.
#[test]
fn keep_alive_comments_hold_off_the_idle_timeout() {
    let mock = MockAi::script(vec![Reply::Custom(Box::new(|c: &mut Conn| {
        c.sse_head(Framing::Chunked, &[]);
        c.event(&ev_role());
        c.event(&ev_text("before "));
        for _ in 0..8 {
            if !c.pause(ms(300)) || !c.write_body(b": PROCESSING\n\n") {
                return;
            }
        }
        c.event(&ev_text("after"));
        c.event(&ev_finish("stop"));
        c.event(&ev_usage(1, 2));
        c.done();
        c.hold_until_peer_closes();
    }))]);
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_IDLE_TIMEOUT_S", "1")
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "slow thinker");
    assert_streamed_turn(&t, &s.id, "before after");
}

#[test]
fn interrupt_while_waiting_for_the_first_byte() {
    let mock = MockAi::script(vec![Reply::Stall, Reply::text(&["ok"], (1, 1))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "wait for it");
    mock.wait_requests(1, T);
    g.call("session.interrupt", json!({"session_id": s.id}));
    let t = g.finish_turn(&s.id, start, secs(5));
    assert_eq!(
        t.complete["payload"]["status"], "interrupted",
        "{}",
        t.complete
    );
    assert!(
        mock.wait_peer_closed(0, secs(3)).is_some(),
        "connection still open after the interrupt"
    );
    let t = g.run_turn(&s.id, "again");
    assert_streamed_turn(&t, &s.id, "ok");
}

/// https with a request larger than what TLS buffers before the handshake completes (64 KiB in
/// rustls), against a server that takes the ClientHello and never answers: the loop must stay
/// responsive and the turn must end with a timeout.
#[test]
fn tls_large_request_to_a_silent_server_keeps_the_loop_alive() {
    let mock = MockAi::raw(|mut s| {
        use std::io::Read;
        let _ = s.set_read_timeout(Some(ms(50)));
        let mut buf = [0u8; 16 * 1024];
        let end = Instant::now() + secs(30);
        while Instant::now() < end {
            match s.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return,
            }
        }
    });
    let base = format!("https://127.0.0.1:{}/v1", mock.port);
    let mut g = builder_for(&base)
        .env("TUI_GATEWAY_CONNECT_TIMEOUT_S", "2")
        .env("TUI_GATEWAY_FIRST_BYTE_TIMEOUT_S", "2")
        .start();
    let s = g.create_session(json!({}));
    let prompt = "x".repeat(200 * 1024);
    let start = g.frames.len();
    let sub = g.send_request("prompt.submit", json!({"session_id": s.id, "text": prompt}));
    let r = g
        .wait_frame(|f| is_response(f) && f.get("id") == Some(&sub), secs(3))
        .unwrap_or_else(|| {
            panic!(
                "prompt.submit (200 KiB prompt, https) not answered within 3 s: the loop is stuck\n{}",
                g.diag()
            )
        });
    assert_eq!(r["result"]["status"], "streaming", "{r}");
    mock.wait_conns(1, T);
    g.collect_for(ms(300));
    let id = g.send_request("ping", json!({}));
    let pong = g.wait_frame(|f| is_response(f) && f.get("id") == Some(&id), secs(3));
    assert!(
        pong.is_some(),
        "ping not answered within 3 s while a large https request is pending: the loop is stuck\n{}",
        g.diag()
    );
    // One of the 2 s timeouts ends the turn.
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, secs(10));
    assert_err_mentions(&err, &["timed out", "after 2s"]);
}

/// The cap on `Retry-After` (a server asking for an hour must not stall the turn for an hour).
/// Slow by nature: the gateway's cap is what it waits.
#[test]
fn retry_after_is_capped() {
    let mock = MockAi::script(vec![
        Reply::status_with(
            429,
            &[("Retry-After", "3600")],
            r#"{"error":{"message":"hour"}}"#,
        ),
        Reply::text(&["capped"], (1, 1)),
    ]);
    // The cap is a setting, so the test waits half a second, not the default 30 s.
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_MODEL_RETRIES", "1")
        .env("TUI_GATEWAY_RETRY_CAP_S", "0.5")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "cap it");
    // An hour's Retry-After, yet the retry comes (well within the deadline) and completes.
    let t = g.finish_turn(&s.id, start, T);
    assert_streamed_turn(&t, &s.id, "capped");
    let reqs = mock.requests();
    let gap = reqs[1].at.duration_since(reqs[0].at);
    // The wait counts from the loop's one clock read of the iteration that read the 429, which
    // may precede the answer's arrival by that iteration's length on a loaded machine.
    assert!(
        gap >= ms(450),
        "the retry came before the capped wait: {gap:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The provider inside the rest of the gateway: tool loop, queue, approvals, resume
// ---------------------------------------------------------------------------------------------

#[test]
fn tool_loop_runs_several_rounds_until_an_answer_without_tool_calls() {
    let ms_: Vec<String> = (0..3).map(|i| unique(&format!("round{i}"))).collect();
    let mut script: Vec<Reply> = ms_
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Reply::Stream(Stream::new(tool_call_events(
                &format!("call_r{i}"),
                &format!("echo {m}"),
                6,
                (10, 3),
            )))
        })
        .collect();
    script.push(Reply::text(&["three ", "rounds"], (10, 2)));
    let mock = MockAi::script(script);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn_timeout(&s.id, "loop", secs(30));
    let c = &t.complete["payload"];
    assert_eq!(c["status"], "complete", "{c}");
    assert!(
        c["text"].as_str().unwrap_or("").ends_with("three rounds"),
        "{c}"
    );
    assert_eq!(c["usage"]["calls"], 4, "{c}");
    assert_eq!(c["usage"]["input"], 40, "{c}");
    let n_tools = t
        .events
        .iter()
        .filter(|e| e["type"] == "tool.complete")
        .count();
    assert_eq!(n_tools, 3);
    let reqs = mock.wait_requests(4, T);
    assert_eq!(reqs.len(), 4);
    let last = reqs[3].messages();
    for (i, m) in ms_.iter().enumerate() {
        let id = format!("call_r{i}");
        let tool = last
            .iter()
            .find(|x| x["role"] == "tool" && x["tool_call_id"] == id.as_str())
            .unwrap_or_else(|| {
                panic!("no tool message {id} in the last request: {}", reqs[3].body)
            });
        assert!(
            content_text(&tool["content"]).contains(m.as_str()),
            "{tool}"
        );
    }
    // order: each assistant tool call directly followed by its result
    let roles: Vec<&str> = last
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .filter(|r| *r != "system")
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool"
        ],
        "{}",
        reqs[3].body
    );
}

#[test]
fn failure_in_a_later_round_keeps_the_earlier_rounds() {
    let m = unique("before-failure");
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(tool_call_events(
            "call_1",
            &format!("echo {m}"),
            9,
            (4, 4),
        ))),
        Reply::status(401, r#"{"error":{"message":"revoked"}}"#),
    ]);
    let mut g = builder_for(&mock.base_url())
        .env("TUI_GATEWAY_MODEL_RETRIES", "0")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "run then fail");
    let (t, err) = finish_error_turn(&mut g, &s.id, start, T);
    assert_err_mentions(&err, &["401"]);
    assert!(t.events.iter().any(|e| e["type"] == "tool.complete"));
    assert_eq!(t.complete["payload"]["usage"]["calls"], 1, "{}", t.complete);
    let r = wait_rows(&g, &s.stored, "user, tool call, tool result", |r| {
        r.iter().any(|x| x.role == "tool")
    });
    let roles: Vec<&str> = r.iter().map(|x| x.role.as_str()).collect();
    assert_eq!(&roles[..3], ["user", "assistant", "tool"], "{r:#?}");
    assert!(r[2].content.as_deref().unwrap_or("").contains(&m));
}

#[test]
fn prompt_submitted_while_streaming_is_queued_and_sent_with_the_first_answer() {
    let first: Vec<String> = (0..30).map(|i| format!("a{i} ")).collect();
    let first_refs: Vec<&str> = first.iter().map(String::as_str).collect();
    let first_text: String = first.concat();
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(text_events(&first_refs, "stop", Some((3, 30)))).delay(ms(20))),
        Reply::text(&["second ", "answer"], (40, 2)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "first question");
    g.wait_session_event(&s.id, "message.delta", T);
    let r = g.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": "second question"}),
    );
    assert_eq!(r["status"], "queued", "{r}");
    let t1 = g.finish_turn(&s.id, start, T);
    assert_streamed_turn(&t1, &s.id, &first_text);
    let start2 = g.frames.len();
    let t2 = g.finish_turn(&s.id, start2, T);
    assert_eq!(
        t2.complete["payload"]["text"], "second answer",
        "{}",
        t2.complete
    );
    let reqs = mock.wait_requests(2, T);
    let convo = reqs[1].conversation();
    assert_eq!(
        convo,
        [
            ("user".to_string(), "first question".to_string()),
            ("assistant".to_string(), first_text.clone()),
            ("user".to_string(), "second question".to_string()),
        ]
    );
}

#[test]
fn dangerous_tool_call_from_the_model_asks_for_approval_and_a_denial_goes_back() {
    let fake_home = TempHome::new("openai-fakehome");
    let name = unique("scratch");
    let dir = fake_home.path.join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "keep").unwrap();
    let cmd = format!("rm -rf ~/{name}");
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(tool_call_events("call_rm", &cmd, 7, (5, 5)))),
        Reply::text(&["ok, ", "not deleted"], (9, 3)),
    ]);
    let mut g = builder_for(&mock.base_url())
        .env("HOME", fake_home.path.to_str().unwrap())
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "clean up");
    let ev = g.wait_session_event(&s.id, "approval.request", T);
    assert_eq!(ev["payload"]["command"], cmd.as_str(), "{ev}");
    let rid = ev["payload"]["request_id"].as_str().unwrap().to_string();
    // the model round is over while the user thinks (its connection may stay open for the
    // next call): no second request before the answer
    assert_eq!(mock.request_count(), 1);
    let r = g.call(
        "approval.respond",
        json!({"session_id": s.id, "choice": "deny", "request_id": rid}),
    );
    assert_eq!(r["resolved"], 1, "{r}");
    let t = g.finish_turn(&s.id, start, T);
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{}",
        t.complete
    );
    assert!(dir.join("keep.txt").exists(), "the denied command ran");
    let reqs = mock.wait_requests(2, T);
    let tool = reqs[1]
        .messages()
        .into_iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_rm")
        .unwrap_or_else(|| panic!("no tool message for the denied call: {}", reqs[1].body));
    assert!(
        content_text(&tool["content"])
            .to_lowercase()
            .contains("denied"),
        "the model must learn the command was denied: {tool}"
    );
}

#[test]
fn resumed_session_sends_its_stored_history_including_tool_calls() {
    let home = TempHome::new("openai-resume");
    let m = unique("resume-marker");
    let cmd = format!("echo {m}");
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(tool_call_events("call_1", &cmd, 6, (5, 5)))),
        Reply::text(&["it printed ", "the marker"], (9, 3)),
        Reply::text(&["still ", "here"], (20, 2)),
    ]);
    let stored = {
        let mut g = builder_for(&mock.base_url()).home(&home.path).start();
        let s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "before restart");
        assert_eq!(
            t.complete["payload"]["status"], "complete",
            "{}",
            t.complete
        );
        g.signal(libc::SIGTERM);
        g.wait_exit(secs(10));
        s.stored
    };
    let mut g = builder_for(&mock.base_url()).home(&home.path).start();
    let r = g.call("session.resume", json!({"session_id": stored}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let t = g.run_turn(&sid, "after restart");
    assert_streamed_turn(&t, &sid, "still here");
    let reqs = mock.wait_requests(3, T);
    let msgs: Vec<Value> = reqs[2]
        .messages()
        .into_iter()
        .filter(|m| m["role"] != "system")
        .collect();
    let roles: Vec<&str> = msgs
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant", "user"],
        "{}",
        reqs[2].body
    );
    let call = &msgs[1]["tool_calls"][0];
    assert_eq!(call["id"], "call_1", "{}", msgs[1]);
    assert_eq!(call["type"], "function", "{}", msgs[1]);
    assert_eq!(call["function"]["name"], "terminal", "{}", msgs[1]);
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("null"))
            .unwrap_or(Value::Null);
    assert_eq!(args["command"], cmd.as_str(), "{}", msgs[1]);
    assert_eq!(msgs[2]["tool_call_id"], "call_1", "{}", msgs[2]);
    assert!(
        content_text(&msgs[2]["content"]).contains(&m),
        "{}",
        msgs[2]
    );
    assert_eq!(content_text(&msgs[3]["content"]), "it printed the marker");
    assert_eq!(content_text(&msgs[4]["content"]), "after restart");
}

// ---------------------------------------------------------------------------------------------
// History validity: every tool call the gateway sends back has its tool result
// ---------------------------------------------------------------------------------------------

/// OpenAI rejects (HTTP 400) a conversation in which an assistant `tool_calls` id has no
/// following `tool` message with that `tool_call_id`, or a `tool` message answers no call.
fn assert_tool_calls_answered(body: &Value) {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let mut open: Vec<String> = Vec::new();
    for m in &msgs {
        match m["role"].as_str().unwrap_or("") {
            "assistant" => {
                assert!(
                    open.is_empty(),
                    "tool calls {open:?} have no tool message before the next assistant message: {body}"
                );
                if let Some(calls) = m["tool_calls"].as_array() {
                    for c in calls {
                        let id = c["id"].as_str().unwrap_or("");
                        assert!(!id.is_empty(), "tool call without id: {m}");
                        open.push(id.to_string());
                    }
                }
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or("").to_string();
                let pos = open
                    .iter()
                    .position(|x| *x == id)
                    .unwrap_or_else(|| panic!("tool message {id:?} answers no open call: {body}"));
                open.remove(pos);
            }
            "user" => assert!(
                open.is_empty(),
                "tool calls {open:?} have no tool message before the next user message: {body}"
            ),
            _ => {}
        }
    }
    assert!(
        open.is_empty(),
        "tool calls {open:?} never answered: {body}"
    );
}

#[test]
fn interrupt_during_a_tool_call_leaves_a_history_the_model_accepts() {
    let m = unique("sleeper");
    let cmd = format!("sleep 30; echo {m}");
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(tool_call_events(
            "call_sleep",
            &cmd,
            10,
            (5, 5),
        ))),
        Reply::text(&["after ", "interrupt"], (5, 2)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "sleep a while");
    g.wait_session_event(&s.id, "tool.start", T);
    g.call("session.interrupt", json!({"session_id": s.id}));
    let t = g.finish_turn(&s.id, start, T);
    assert_eq!(
        t.complete["payload"]["status"], "interrupted",
        "{}",
        t.complete
    );
    let t2 = g.run_turn(&s.id, "what happened");
    assert_streamed_turn(&t2, &s.id, "after interrupt");
    let reqs = mock.wait_requests(2, T);
    assert_eq!(reqs.len(), 2, "no model round after the interrupt");
    assert_tool_calls_answered(&reqs[1].body);
}

#[test]
fn interrupt_while_tool_call_fragments_stream_leaves_a_valid_history() {
    // the arguments arrive one byte per 30 ms: the interrupt lands in the middle of the call
    let args = json!({"command": "echo never-run"}).to_string();
    let mut ev = vec![ev_role(), ev_tool_start(0, "call_half", "terminal", "")];
    for ch in args.chars() {
        ev.push(ev_tool_args(0, &ch.to_string()));
    }
    ev.push(ev_finish("tool_calls"));
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev).delay(ms(30))),
        Reply::text(&["fresh"], (1, 1)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "half a call");
    mock.wait_requests(1, T);
    g.collect_for(ms(250));
    g.call("session.interrupt", json!({"session_id": s.id}));
    let t = g.finish_turn(&s.id, start, T);
    assert_eq!(
        t.complete["payload"]["status"], "interrupted",
        "{}",
        t.complete
    );
    assert!(
        !t.events.iter().any(|e| e["type"] == "tool.start"),
        "a half-streamed call must not run"
    );
    let t2 = g.run_turn(&s.id, "again");
    assert_streamed_turn(&t2, &s.id, "fresh");
    let reqs = mock.wait_requests(2, T);
    assert_tool_calls_answered(&reqs[1].body);
}

#[test]
fn invalid_tool_arguments_still_leave_a_history_the_model_accepts() {
    let ev = vec![
        ev_role(),
        ev_tool_start(0, "call_bad", "terminal", "{\"command\": \"echo x"),
        ev_finish("tool_calls"),
        ev_usage(1, 1),
    ];
    let mock = MockAi::start({
        let q = std::sync::Mutex::new(Some(ev));
        move |_| match q.lock().unwrap().take() {
            Some(ev) => Reply::Stream(Stream::new(ev)),
            None => Reply::text(&["fine"], (1, 1)),
        }
    });
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "bad args");
    let _ = g.finish_turn(&s.id, start, T);
    let _ = g.run_turn(&s.id, "next");
    for r in mock.requests().iter().skip(1) {
        assert_tool_calls_answered(&r.body);
    }
}

#[test]
fn unknown_tool_name_gets_an_error_result_and_the_loop_goes_on() {
    let ev = vec![
        ev_role(),
        ev_tool_start(0, "call_py", "python", r#"{"code":"print(1)"}"#),
        ev_finish("tool_calls"),
        ev_usage(1, 1),
    ];
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev)),
        Reply::text(&["no python"], (1, 1)),
        Reply::text(&["next"], (1, 1)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "use python");
    let t = g.finish_turn(&s.id, start, T);
    let st = t.complete["payload"]["status"].as_str().unwrap_or("");
    assert!(st == "complete" || st == "error", "{}", t.complete);
    let t2 = g.run_turn(&s.id, "and now");
    assert_eq!(
        t2.complete["payload"]["status"], "complete",
        "{}",
        t2.complete
    );
    for r in mock.requests().iter().skip(1) {
        assert_tool_calls_answered(&r.body);
    }
}

#[test]
fn tool_call_without_an_id_gets_a_consistent_one() {
    let m = unique("no-id");
    let args = json!({"command": format!("echo {m}")}).to_string();
    let ev = vec![
        ev_role(),
        // no "id" at all, as some local servers send
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"type":"function",
               "function":{"name":"terminal","arguments":args}}]},"finish_reason":null}]})
        .to_string(),
        ev_finish("tool_calls"),
    ];
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(ev)),
        Reply::text(&["done"], (1, 1)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "no id");
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{}",
        t.complete
    );
    let reqs = mock.wait_requests(2, T);
    assert_tool_calls_answered(&reqs[1].body);
    let tool = reqs[1]
        .messages()
        .into_iter()
        .find(|x| x["role"] == "tool")
        .unwrap_or_else(|| panic!("{}", reqs[1].body));
    assert!(content_text(&tool["content"]).contains(&m), "{tool}");
}

#[test]
fn finish_reason_length_is_recorded() {
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(text_events(
        &["cut ", "by max_tokens"],
        "length",
        Some((3, 4)),
    )))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "long answer");
    assert_streamed_turn(&t, &s.id, "cut by max_tokens");
    let r = wait_rows(&g, &s.stored, "the assistant row", |r| {
        r.iter()
            .any(|x| x.role == "assistant" && x.finish_reason.is_some())
    });
    assert_eq!(
        last_assistant(&r).finish_reason.as_deref(),
        Some("length"),
        "{r:#?}"
    );
}

#[test]
fn content_length_delimited_event_stream() {
    let mock = MockAi::script(vec![Reply::Custom(Box::new(|c: &mut Conn| {
        let mut body = String::new();
        for e in text_events(&["length ", "delimited"], "stop", Some((1, 2))) {
            body.push_str(&format!("data: {e}\n\n"));
        }
        body.push_str("data: [DONE]\n\n");
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        c.write_raw(head.as_bytes());
        c.write_raw(body.as_bytes());
        c.hold_until_peer_closes();
    }))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "length");
    assert_streamed_turn(&t, &s.id, "length delimited");
}

#[test]
fn a_client_that_stops_reading_gets_coalesced_deltas_that_still_add_up() {
    const N: usize = 20_000;
    let pieces: Vec<String> = (0..N).map(|i| format!(" w{i}")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let expected: String = pieces.concat();
    let mock = MockAi::script(vec![Reply::Stream(Stream::new(text_events(
        &refs,
        "stop",
        Some((1, N as u64)),
    )))]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "flood");
    g.wait_session_event(&s.id, "message.delta", T);
    g.pause_reading();
    // The whole reply is stored while nobody reads: every delta after the first waited in the
    // out-queue, far past the point where deltas merge.
    let expected_row = expected.clone();
    wait_rows(&g, &s.stored, "the whole reply", move |r| {
        r.iter()
            .any(|x| x.role == "assistant" && x.content.as_deref() == Some(expected_row.as_str()))
    });
    g.resume_reading();
    let t = g.finish_turn(&s.id, start, secs(60));
    // The deltas still add up to the whole text, in order.
    assert_streamed_turn(&t, &s.id, &expected);
    let seqs: Vec<u64> = t
        .events
        .iter()
        .filter(|e| e["type"] == "message.delta")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    eprintln!("{N} tokens arrived in {} message.delta frames", seqs.len());
    // They were merged: fewer frames than tokens, and seq jumps over the merged ones.
    assert!(
        seqs.len() < N / 2,
        "{} delta frames for {N} tokens",
        seqs.len()
    );
    assert!(
        seqs.windows(2).any(|w| w[1] > w[0] + 1),
        "no gap in the deltas' seq: nothing was merged"
    );
}

#[test]
fn repeated_tool_call_ids_across_turns_stay_paired_with_their_results() {
    // Local servers often number calls per response, so "call_1" comes back every turn.
    let m1 = unique("first-id");
    let m2 = unique("second-id");
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(tool_call_events(
            "call_1",
            &format!("echo {m1}"),
            7,
            (1, 1),
        ))),
        Reply::text(&["one"], (1, 1)),
        Reply::Stream(Stream::new(tool_call_events(
            "call_1",
            &format!("echo {m2}"),
            7,
            (1, 1),
        ))),
        Reply::text(&["two"], (1, 1)),
        Reply::text(&["three"], (1, 1)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    for p in ["turn one", "turn two", "turn three"] {
        let t = g.run_turn(&s.id, p);
        assert_eq!(
            t.complete["payload"]["status"], "complete",
            "{}",
            t.complete
        );
    }
    let reqs = mock.wait_requests(5, T);
    let body = &reqs[4].body;
    assert_tool_calls_answered(body);
    // each call's result directly follows it and carries that call's output
    let msgs = reqs[4].messages();
    let mut seen = 0;
    for (i, m) in msgs.iter().enumerate() {
        if let Some(calls) = m["tool_calls"].as_array() {
            let id = calls[0]["id"].as_str().unwrap_or("");
            let args: Value =
                serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap_or("null"))
                    .unwrap_or(Value::Null);
            let marker = args["command"]
                .as_str()
                .unwrap_or("")
                .trim_start_matches("echo ");
            let next = &msgs[i + 1];
            assert_eq!(next["role"], "tool", "{body}");
            assert_eq!(next["tool_call_id"], id, "{body}");
            assert!(content_text(&next["content"]).contains(marker), "{body}");
            seen += 1;
        }
    }
    assert_eq!(seen, 2, "{body}");
}

/// Read one request (head and Content-Length body) from a raw connection.
fn read_one_request(conn: &mut TcpStream) -> Option<String> {
    use std::io::Read;
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if data.len() >= end + 4 + len {
                return Some(String::from_utf8_lossy(&data[end + 4..end + 4 + len]).into_owned());
            }
        }
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_kept_alive_connection_is_reused_and_a_closed_one_replaced() {
    use std::io::Write;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Each answer is complete (chunked, ends with [DONE] and the last chunk) and keeps the
    // connection open, except that the server then drops connection 1 while it idles.
    let server = std::thread::spawn(move || {
        let answer = |text: &str| {
            let event = format!(
                "data: {}\n\ndata: [DONE]\n\n",
                json!({"choices":[{"index":0,"delta":{"content":text},"finish_reason":"stop"}]})
            );
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{event}\r\n0\r\n\r\n",
                event.len()
            )
        };
        let mut per_connection = Vec::new();
        // Connection 1: two requests on it, then it is closed by the server.
        let (mut c1, _) = listener.accept().unwrap();
        let mut served = 0;
        while served < 2 && read_one_request(&mut c1).is_some() {
            served += 1;
            c1.write_all(answer(&format!("one-{served}")).as_bytes())
                .unwrap();
        }
        per_connection.push(served);
        drop(c1);
        // Connection 2: the request that found connection 1 closed.
        let (mut c2, _) = listener.accept().unwrap();
        let mut served = 0;
        if read_one_request(&mut c2).is_some() {
            served += 1;
            c2.write_all(answer("two-1").as_bytes()).unwrap();
        }
        per_connection.push(served);
        per_connection
    });
    let mut g = builder_for(&format!("http://127.0.0.1:{port}/v1")).start();
    let s = g.create_session(json!({}));
    assert_eq!(g.run_turn(&s.id, "first").text, "one-1");
    assert_eq!(g.run_turn(&s.id, "second").text, "one-2", "{}", g.diag());
    assert_eq!(g.run_turn(&s.id, "third").text, "two-1", "{}", g.diag());
    assert_eq!(server.join().unwrap(), vec![2, 1]);
}

/// Azure-style endpoints carry their API version in the base URL's query: it goes after the
/// endpoint's path, for the turn and for the model list alike.
#[test]
fn a_base_url_with_a_query_keeps_it_after_the_endpoint() {
    let mock = MockAi::start(|r: &Recorded| {
        if r.path.starts_with("/v1/models") {
            Reply::status(200, r#"{"object":"list","data":[{"id":"mock-model"}]}"#)
        } else {
            Reply::text(&["fine"], (1, 1))
        }
    });
    let mut g = builder_for(&format!("{}?api-version=2024-06-01", mock.base_url())).start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "hello");
    assert_streamed_turn(&turn, &s.id, "fine");
    let opts = g.call("model.options", json!({"session_id": s.id}));
    assert!(opts.to_string().contains("mock-model"), "{opts}");
    let paths: Vec<String> = mock.requests().into_iter().map(|r| r.path).collect();
    assert!(
        paths.contains(&"/v1/chat/completions?api-version=2024-06-01".to_string())
            && paths.contains(&"/v1/models?api-version=2024-06-01".to_string()),
        "{paths:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Through an HTTP proxy
// ---------------------------------------------------------------------------------------------

#[test]
fn plain_http_goes_through_http_proxy_in_absolute_form_with_its_credentials() {
    let mock = MockAi::script(vec![Reply::text(&["via ", "proxy"], (1, 2))]);
    let proxy = mockai::TestProxy::start(None);
    let mut g = builder_for(&mock.base_url())
        .env(
            "http_proxy",
            &format!("http://user:pa%3Ass@127.0.0.1:{}", proxy.port),
        )
        .start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "hello");
    assert_streamed_turn(&turn, &s.id, "via proxy");
    let seen = proxy.seen();
    let want = format!("POST {}/chat/completions HTTP/1.1", mock.base_url());
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, want);
    // base64("user:pa:ss")
    assert_eq!(seen[0].1.as_deref(), Some("Basic dXNlcjpwYTpzcw=="));
    assert_eq!(mock.wait_requests(1, T)[0].path, "/v1/chat/completions");
}

#[test]
fn https_tunnels_through_the_proxy_and_no_proxy_bypasses_it() {
    let (mock, results) = MockAi::tls_self_signed();
    let home = TempHome::new("openai-proxy-tls");
    let cert = home.path.join("ca.pem");
    std::fs::write(&cert, pem(mockai::SELF_SIGNED_CERT_DER)).unwrap();
    let proxy = mockai::TestProxy::start(None);
    let base = format!("https://127.0.0.1:{}/v1", mock.port);
    let proxied = |no_proxy: &str| {
        builder_for(&base)
            .env("SSL_CERT_FILE", cert.to_str().unwrap())
            .env("HTTPS_PROXY", &format!("127.0.0.1:{}", proxy.port))
            .env("NO_PROXY", no_proxy)
            .start()
    };
    let mut g = proxied("example.com");
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "through the tunnel");
    assert_eq!(turn.text, "tls ok", "{}", g.diag());
    let seen = proxy.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].0,
        format!("CONNECT 127.0.0.1:{} HTTP/1.1", mock.port)
    );
    assert!(
        results
            .lock()
            .unwrap()
            .iter()
            .any(|x| x == "handshake complete")
    );
    drop(g);

    // The same endpoint listed in NO_PROXY is reached directly.
    let mut g = proxied("localhost,127.0.0.1");
    let s = g.create_session(json!({}));
    assert_eq!(g.run_turn(&s.id, "direct").text, "tls ok", "{}", g.diag());
    assert_eq!(proxy.seen().len(), 1, "the proxy was used despite NO_PROXY");
}

#[test]
fn a_proxy_that_refuses_the_tunnel_ends_the_turn_with_its_answer() {
    let proxy = mockai::TestProxy::start(Some(407));
    let mut g = builder_for("https://api.example.invalid/v1")
        .env("HTTPS_PROXY", &format!("http://127.0.0.1:{}", proxy.port))
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "hello");
    let (_t, err) = finish_error_turn(&mut g, &s.id, start, T);
    assert_err_mentions(&err, &["proxy", "407"]);
    g.ping();
}

/// Hermes' turn budget: the results of one answer's calls together stay within 200,000
/// characters in what the model is sent next; the calls past it are spilled to files (a preview
/// and the path sent instead), the ones before kept whole.
#[test]
fn one_answers_results_past_the_budget_are_spilled_and_the_rest_sent_whole() {
    const CALLS: u64 = 5;
    /// Characters each command prints (under the terminal's own output cap).
    const EACH: usize = 45_000;
    let command = format!("head -c {EACH} /dev/zero | tr '\\0' a");
    let mut calls = vec![ev_role()];
    for i in 0..CALLS {
        let args = json!({ "command": command }).to_string();
        calls.push(ev_tool_start(i, &format!("call_{i}"), "terminal", &args));
    }
    calls.push(ev_finish("tool_calls"));
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(calls)),
        Reply::text(&["done"], (1, 1)),
    ]);
    let mut g = start_for(&mock);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "print a lot");
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{:?}",
        t.events
    );
    let second = &mock.wait_requests(2, secs(30))[1];
    let results: Vec<String> = second
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| content_text(&m["content"]))
        .collect();
    assert_eq!(results.len(), CALLS as usize);
    let total: usize = results.iter().map(|r| r.chars().count()).sum();
    assert!(total <= 200_000, "{total} characters of results sent");
    let spilled = results
        .iter()
        .filter(|r| r.starts_with("<persisted-output>"))
        .count();
    assert!(spilled >= 1, "none spilled of {total} characters");
    for r in &results[..CALLS as usize - spilled] {
        assert!(
            r.contains(&"a".repeat(EACH)),
            "an early result was not sent whole"
        );
    }
}
