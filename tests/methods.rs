//! Every method of PROTOCOL.md's table (except approval.respond / shell.exec / session.interrupt)
//! and every error code that applies, spoken over the real binary's stdin/stdout.

use crate::common;

use common::procfs::poll_until;
use common::*;
use serde_json::{Value, json};

const UNKNOWN_STORED: &str = "20000101_000000_abcdef";

fn delayed(ms: u32) -> Gateway {
    Gateway::builder()
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", &ms.to_string())
        .start()
}

fn find_by<'a>(list: &'a Value, key: &str, val: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|e| e[key] == val)
}

// ---------------------------------------------------------------------------------------------
// Start-up and the small informational methods
// ---------------------------------------------------------------------------------------------

#[test]
fn gateway_ready_is_first_frame_with_version_and_epoch() {
    let mut g = Gateway::start();
    let ready = g.ready.clone().unwrap();
    assert_eq!(ready["change_events"], false, "{ready}");
    assert_eq!(ready["version"], env!("CARGO_PKG_VERSION"), "{ready}");
    let epoch = ready["replay_epoch"].as_str().expect("replay_epoch string");
    assert!(
        !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_hexdigit()),
        "replay_epoch must be hex: {epoch:?}"
    );
    assert!(
        ready.get("skin").is_none(),
        "gateway.ready must not carry a skin: {ready}"
    );
    let f = &g.frames[0];
    assert_eq!(f["jsonrpc"], "2.0");
    assert_eq!(
        f["params"]["session_id"], "",
        "gateway.* events carry an empty session_id: {f}"
    );
    assert!(
        f["params"].get("seq").is_none(),
        "gateway.* events carry no seq: {f}"
    );
    g.ping();
    g.assert_clean_stdout();
}

#[test]
fn informational_methods() {
    let mut g = Gateway::start();
    g.ping();

    let r = g.call("client.capabilities", json!({}));
    assert!(r["server_requests"].is_array(), "client.capabilities: {r}");
    let r = g.call("client.capabilities", json!({"server_requests": true}));
    assert!(r["server_requests"].is_array(), "client.capabilities: {r}");

    let r = g.call("gateway.capabilities", json!({}));
    let m = r
        .as_object()
        .unwrap_or_else(|| panic!("gateway.capabilities not a map: {r}"));
    for (k, v) in m {
        assert!(
            v.is_boolean(),
            "gateway.capabilities.{k} is not a boolean: {r}"
        );
    }

    // the offline model can always run: the TUI must not be blocked by the set-up panel
    let r = g.call("setup.status", json!({}));
    assert_eq!(r["provider_configured"], true, "setup.status: {r}");

    let r = g.call("commands.catalog", json!({}));
    assert!(r["pairs"].is_array(), "commands.catalog.pairs: {r}");
    assert!(r["sub"].is_object(), "commands.catalog.sub: {r}");
    assert!(r["canon"].is_object(), "commands.catalog.canon: {r}");
    assert!(
        r["categories"].is_array(),
        "commands.catalog.categories: {r}"
    );

    let r = g.call("config.get", json!({"key": "full"}));
    assert!(r["config"].is_object(), "config.get full: {r}");
    let r = g.call("config.get", json!({"key": "mtime"}));
    assert!(
        r["mtime"].is_number() && r["mtime"].as_f64().unwrap() >= 0.0,
        "config.get mtime: {r}"
    );

    let r = g.call("pet.cells", json!({}));
    assert_eq!(r["enabled"], false, "pet.cells: {r}");
    let r = g.call("pet.cells", json!({"graphics": "kitty", "state": "idle"}));
    assert_eq!(r["enabled"], false, "pet.cells with params: {r}");

    let r = g.call("session.active_list", json!({}));
    assert_eq!(r["sessions"], json!([]), "no sessions yet: {r}");

    let r = g.call("complete.slash", json!({"text": "/"}));
    assert!(r["items"].is_array(), "complete.slash: {r}");
    assert_eq!(r["replace_from"], 1, "complete.slash: {r}");
    let r = g.call("complete.slash", json!({"text": "/zzqx"}));
    assert!(r["items"].is_array(), "complete.slash: {r}");

    let s = g.create_session(json!({"cols": 80}));
    let r = g.call(
        "input.detect_drop",
        json!({"session_id": s.id, "text": "hello there"}),
    );
    assert_eq!(r["matched"], false, "input.detect_drop: {r}");
    let r = g.call(
        "input.detect_drop",
        json!({"session_id": s.id, "text": "/tmp/picture.png"}),
    );
    assert!(r["matched"].is_boolean(), "input.detect_drop: {r}");

    let r = g.call("terminal.resize", json!({"session_id": s.id, "cols": 132}));
    assert_eq!(r["cols"], 132, "terminal.resize: {r}");
    g.expect_code(
        "terminal.resize",
        json!({"session_id": "0badf00d", "cols": 100}),
        4001,
    );

    g.assert_clean_stdout();
}

// ---------------------------------------------------------------------------------------------
// Framing and error codes
// ---------------------------------------------------------------------------------------------

/// Sends a raw line and returns the next response frame whose id is null.
fn null_id_answer(g: &mut Gateway, line: &str) -> Value {
    g.send_line(line);
    g.wait_frame(|f| is_response(f) && f["id"].is_null(), T)
        .unwrap_or_else(|| panic!("no id:null answer to {line:?}\n{}", g.diag()))
}

#[test]
fn request_ids_are_echoed_as_given() {
    let mut g = Gateway::start();
    g.send_line(r#"{"jsonrpc":"2.0","id":"abc-1","method":"ping","params":{}}"#);
    let r = g.wait_response(&json!("abc-1"), T);
    assert_eq!(r["result"], json!({"pong": true}));
    assert_eq!(r["jsonrpc"], "2.0");

    g.send_line(r#"{"jsonrpc":"2.0","id":42,"method":"ping","params":{}}"#);
    let r = g.wait_response(&json!(42), T);
    assert!(r["id"].is_u64(), "integer id must stay an integer: {r}");
    assert_eq!(r["result"], json!({"pong": true}));

    // the raw line must carry 42, not "42"
    let idx = g.frames.iter().position(|f| f["id"] == 42).unwrap();
    assert!(
        g.raw[idx].contains(r#""id":42"#),
        "raw frame: {}",
        g.raw[idx]
    );

    g.send_line(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#);
    let r = g.wait_response(&json!(0), T);
    assert_eq!(
        r["result"],
        json!({"pong": true}),
        "id 0 and missing params: {r}"
    );

    // a request without id is still run; its answer has id null
    let r = null_id_answer(&mut g, r#"{"jsonrpc":"2.0","method":"ping","params":{}}"#);
    assert_eq!(r["result"], json!({"pong": true}), "{r}");
    assert!(
        r.get("id").is_some(),
        "answer must carry an explicit id:null: {r}"
    );

    // params null means {}
    g.send_line(r#"{"jsonrpc":"2.0","id":"pn","method":"ping","params":null}"#);
    let r = g.wait_response(&json!("pn"), T);
    assert_eq!(r["result"], json!({"pong": true}), "params null: {r}");
    g.assert_clean_stdout();
}

#[test]
fn parse_error_and_invalid_request() {
    let mut g = Gateway::start();

    let r = null_id_answer(&mut g, "this is not json");
    assert_eq!(r["error"]["code"], -32700, "{r}");
    let r = null_id_answer(&mut g, r#"{"jsonrpc":"2.0","id":"x","method":"ping""#);
    assert_eq!(r["error"]["code"], -32700, "truncated object: {r}");

    for line in ["[1,2]", "42", r#""a string""#, "true", "null"] {
        let r = null_id_answer(&mut g, line);
        assert_eq!(r["error"]["code"], -32600, "non-object {line}: {r}");
    }

    // method missing / not a string: the id is readable, so it is echoed
    g.send_line(r#"{"jsonrpc":"2.0","id":"m1","params":{}}"#);
    let r = g.wait_response(&json!("m1"), T);
    assert_eq!(r["error"]["code"], -32600, "missing method: {r}");
    g.send_line(r#"{"jsonrpc":"2.0","id":"m2","method":5}"#);
    let r = g.wait_response(&json!("m2"), T);
    assert_eq!(r["error"]["code"], -32600, "method not a string: {r}");
    g.send_line(r#"{"jsonrpc":"2.0","id":"m3","method":null}"#);
    let r = g.wait_response(&json!("m3"), T);
    assert_eq!(r["error"]["code"], -32600, "method null: {r}");

    g.ping();
    g.assert_clean_stdout();
}

#[test]
fn unknown_method() {
    let mut g = Gateway::start();
    let (code, msg, f) = g.call_err("no.such.method", json!({}));
    assert_eq!(code, -32601, "{f}");
    assert_eq!(msg, "unknown method: no.such.method", "{f}");
    let (code, msg, f) = g.call_err("Ping", json!({}));
    assert_eq!(code, -32601, "method names are case-sensitive: {f}");
    assert_eq!(msg, "unknown method: Ping");
    g.ping();
}

#[test]
fn invalid_params() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));

    // params not an object
    for (method, params) in [
        ("ping", json!([1])),
        ("session.list", json!("x")),
        ("session.create", json!(5)),
    ] {
        let (code, _, f) = g.call_err(method, params);
        assert_eq!(code, -32602, "{method} with non-object params: {f}");
    }

    // a field of the wrong type: the message names the field
    let cases = [
        ("session.list", json!({"limit": "ten"}), "limit"),
        (
            "prompt.submit",
            json!({"session_id": s.id, "text": 42}),
            "text",
        ),
        ("session.history", json!({"session_id": 42}), "session_id"),
        (
            "terminal.resize",
            json!({"session_id": s.id, "cols": "wide"}),
            "cols",
        ),
        (
            "session.title",
            json!({"session_id": s.id, "title": ["a"]}),
            "title",
        ),
        ("config.get", json!({"key": 7}), "key"),
    ];
    for (method, params, field) in cases {
        let (code, msg, f) = g.call_err(method, params.clone());
        assert_eq!(code, -32602, "{method} {params}: {f}");
        assert!(
            msg.contains(field),
            "{method} {params}: message {msg:?} must name {field:?}"
        );
    }
    // nothing was changed by the refused calls
    let h = g.call("session.history", json!({"session_id": s.id}));
    assert_eq!(h["count"], 0, "{h}");
    g.ping();
}

// ---------------------------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------------------------

#[test]
fn session_create_result_and_info_event() {
    let mut g = Gateway::start();
    let r = g.call("session.create", json!({"cols": 100}));
    let sid = r["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session_id: {r}"))
        .to_string();
    assert!(
        is_runtime_id(&sid),
        "runtime id must be 8 hex chars: {sid:?}"
    );
    let stored = r["stored_session_id"].as_str().unwrap_or("");
    assert!(
        is_stored_id(stored),
        "stored id must look like YYYYMMDD_HHMMSS_xxxxxx: {r}"
    );
    assert_eq!(r["message_count"], 0, "{r}");
    assert_eq!(r["messages"], json!([]), "{r}");
    assert!(r["info"].is_object(), "{r}");
    assert_eq!(
        r["info"]["version"],
        env!("CARGO_PKG_VERSION"),
        "info.version: {r}"
    );

    let ev = g.wait_session_event(&sid, "session.info", T);
    assert_eq!(ev["payload"]["version"], env!("CARGO_PKG_VERSION"), "{ev}");
    assert!(
        ev["payload"]["running"] != true,
        "a fresh session is not running: {ev}"
    );
    let all = g.events_of_session(&sid);
    assert_eq!(
        all[0]["seq"], 1,
        "the per-session seq starts at 1: {}",
        all[0]
    );

    // a second session is distinct
    let s2 = g.create_session(json!({"title": "named at birth"}));
    assert_ne!(s2.id, sid);
    assert_ne!(s2.stored, stored);
    let t = g.call("session.title", json!({"session_id": s2.id}));
    assert_eq!(
        t["title"], "named at birth",
        "title given to session.create: {t}"
    );
    g.assert_clean_stdout();
}

#[test]
fn prompt_streams_a_turn_in_order() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let p1 = "Hello gateway, please echo this sentence.";
    let t1 = g.run_turn(&s.id, p1);
    assert_plain_turn(&t1, &s.id, p1);
    let p2 = "A second prompt with ünïcödé ✓ and \"quotes\"";
    let t2 = g.run_turn(&s.id, p2);
    assert_plain_turn(&t2, &s.id, p2);
    // seq strictly increasing over the whole life of the session
    let all = g.events_of_session(&s.id);
    assert_seq_increasing(&all);
    // output is not ASCII-escaped
    assert!(
        g.raw.iter().any(|l| l.contains("ünïcödé ✓")),
        "non-ASCII text must be written as UTF-8, not \\u escapes"
    );

    g.expect_code(
        "prompt.submit",
        json!({"session_id": s.id, "text": ""}),
        4002,
    );
    g.expect_code(
        "prompt.submit",
        json!({"session_id": "ffffffff", "text": "hi"}),
        4001,
    );
    // the refused prompts started nothing
    let h = g.call("session.history", json!({"session_id": s.id}));
    assert_eq!(h["count"], 4, "{h}");
    g.assert_clean_stdout();
}

#[test]
fn prompt_while_running_is_queued() {
    let mut g = delayed(20);
    let s = g.create_session(json!({}));
    let p1 = long_prompt("first-prompt", 40);
    let p2 = "second-prompt runs after the first";
    let start = g.frames.len();
    let r = g.call("prompt.submit", json!({"session_id": s.id, "text": p1}));
    assert_eq!(r["status"], "streaming", "{r}");
    let r = g.call("prompt.submit", json!({"session_id": s.id, "text": p2}));
    assert_eq!(r["status"], "queued", "prompt.submit during a turn: {r}");

    // while it runs, the session shows as running
    let al = g.call("session.active_list", json!({"current_session_id": s.id}));
    let e = find_by(&al["sessions"], "id", &s.id).unwrap_or_else(|| panic!("{al}"));
    assert_eq!(e["status"], "working", "{al}");

    let c1 = g.wait_session_event(&s.id, "message.complete", secs(30));
    let c2 = g.wait_session_event(&s.id, "message.complete", secs(30));
    g.wait_frame(
        |f| {
            event_type(f) == Some("session.info")
                && f["params"]["seq"].as_u64() > c2["seq"].as_u64()
        },
        T,
    )
    .expect("session.info after the second turn");
    let t1 = c1["payload"]["text"].as_str().unwrap();
    let t2 = c2["payload"]["text"].as_str().unwrap();
    assert!(
        t1.contains(&p1),
        "first turn answers the first prompt: {t1:?}"
    );
    assert!(
        t2.contains(p2),
        "second turn answers the queued prompt: {t2:?}"
    );
    assert!(!t2.contains("first-prompt"), "{t2:?}");

    // two complete turns, one after the other
    let evs: Vec<Value> = g.frames[start..]
        .iter()
        .filter(|f| event_type(f).is_some() && f["params"]["session_id"] == s.id.as_str())
        .map(|f| f["params"].clone())
        .collect();
    assert_seq_increasing(&evs);
    let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let skeleton: Vec<&str> = types
        .iter()
        .copied()
        .filter(|t| !MID_TURN.contains(t))
        .collect();
    assert_eq!(
        skeleton,
        [
            "message.start",
            "message.complete",
            "session.info",
            "message.start",
            "message.complete",
            "session.info"
        ],
        "turn skeleton: {types:?}"
    );
    let h = g.call("session.history", json!({"session_id": s.id}));
    assert_eq!(h["count"], 4, "{h}");
    let texts: Vec<&str> = h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(texts[0], p1);
    assert_eq!(texts[2], p2);
}

#[test]
fn session_list_and_most_recent() {
    let mut g = Gateway::start();
    let s1 = g.create_session(json!({"title": "First chat"}));
    g.run_turn(&s1.id, "talking about apples");
    let s2 = g.create_session(json!({}));
    let t = g.call(
        "session.title",
        json!({"session_id": s2.id, "title": "Second chat"}),
    );
    assert_eq!(t["title"], "Second chat");
    g.run_turn(&s2.id, "talking about pears");

    let r = g.call("session.list", json!({}));
    let list = r["sessions"].as_array().unwrap_or_else(|| panic!("{r}"));
    let i1 = list
        .iter()
        .position(|e| e["id"] == s1.stored.as_str())
        .unwrap_or_else(|| panic!("s1 missing: {r}"));
    let i2 = list
        .iter()
        .position(|e| e["id"] == s2.stored.as_str())
        .unwrap_or_else(|| panic!("s2 missing: {r}"));
    assert!(i2 < i1, "most recent first: {r}");
    let e1 = &list[i1];
    assert_eq!(e1["title"], "First chat", "{e1}");
    assert_eq!(e1["source"], "tui", "{e1}");
    assert_eq!(e1["message_count"], 2, "{e1}");
    assert!(e1["started_at"].is_number(), "{e1}");
    assert!(e1.get("preview").is_some(), "{e1}");
    assert!(
        e1["preview"]
            .as_str()
            .map(|p| p.contains("apples"))
            .unwrap_or(false),
        "preview shows the conversation: {e1}"
    );
    assert!(
        list[i2]["started_at"].as_f64() >= list[i1]["started_at"].as_f64(),
        "{r}"
    );

    let r = g.call("session.list", json!({"limit": 1}));
    let l = r["sessions"].as_array().unwrap();
    assert_eq!(l.len(), 1, "limit 1: {r}");
    assert_eq!(l[0]["id"], s2.stored.as_str(), "{r}");

    let r = g.call("session.list", json!({"title": "First chat"}));
    let l = r["sessions"].as_array().unwrap();
    assert!(
        l.iter().any(|e| e["id"] == s1.stored.as_str()),
        "title filter: {r}"
    );
    assert!(
        !l.iter().any(|e| e["id"] == s2.stored.as_str()),
        "title filter: {r}"
    );

    let r = g.call("session.most_recent", json!({}));
    assert_eq!(r["session_id"], s2.stored.as_str(), "{r}");
    assert_eq!(r["title"], "Second chat", "{r}");
    assert_eq!(r["source"], "tui", "{r}");
}

#[test]
fn session_most_recent_on_empty_store_is_null() {
    let mut g = Gateway::start();
    let r = g.call("session.most_recent", json!({}));
    assert!(r["session_id"].is_null(), "{r}");
    let r = g.call("session.list", json!({}));
    assert_eq!(r["sessions"], json!([]), "{r}");
}

#[test]
fn session_resume_by_stored_id_title_and_live() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    g.call(
        "session.title",
        json!({"session_id": s.id, "title": "Walrus talk"}),
    );
    let prompt = "remember the walrus";
    let t = g.run_turn(&s.id, prompt);
    assert_eq!(
        g.call("session.close", json!({"session_id": s.id})),
        json!({"closed": true})
    );

    let r = g.call(
        "session.resume",
        json!({"session_id": s.stored, "cols": 90}),
    );
    let rid = r["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    assert!(is_runtime_id(&rid), "{r}");
    assert_ne!(
        rid, s.id,
        "a closed session resumes under a new runtime id: {r}"
    );
    assert_eq!(r["stored_session_id"], s.stored.as_str(), "{r}");
    assert_eq!(r["resumed"], s.stored.as_str(), "{r}");
    assert_eq!(r["message_count"], 2, "{r}");
    let expected = json!([
        {"role": "user", "text": prompt},
        {"role": "assistant", "text": t.text},
    ]);
    let msgs: Vec<Value> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!({"role": m["role"], "text": m["text"]}))
        .collect();
    assert_eq!(json!(msgs), expected, "resumed messages: {r}");
    assert!(r["info"].is_object(), "{r}");
    assert_eq!(r["running"], false, "{r}");

    let h = g.call("session.history", json!({"session_id": rid}));
    assert_eq!(h["count"], 2, "{h}");
    assert_eq!(h["messages"][0]["text"], prompt, "{h}");
    assert_eq!(h["messages"][1]["text"], t.text.as_str(), "{h}");

    // resuming the session while it is live returns that runtime session
    let r2 = g.call("session.resume", json!({"session_id": s.stored}));
    assert_eq!(
        r2["session_id"],
        rid.as_str(),
        "resume of a live session: {r2}"
    );
    let al = g.call("session.active_list", json!({}));
    let n = al["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["session_key"] == s.stored.as_str())
        .count();
    assert_eq!(n, 1, "one live runtime session per stored session: {al}");

    // by exact title
    g.call("session.close", json!({"session_id": rid}));
    let r3 = g.call("session.resume", json!({"session_id": "Walrus talk"}));
    assert_eq!(
        r3["stored_session_id"],
        s.stored.as_str(),
        "resume by title: {r3}"
    );
    assert_eq!(r3["message_count"], 2, "{r3}");

    // errors
    g.expect_code("session.resume", json!({}), 4006);
    g.expect_code("session.resume", json!({"session_id": ""}), 4006);
    g.expect_code(
        "session.resume",
        json!({"session_id": UNKNOWN_STORED}),
        4007,
    );
    g.expect_code("session.resume", json!({"session_id": "Walrus tal"}), 4007);
}

#[test]
fn session_history_and_usage() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let h = g.call("session.history", json!({"session_id": s.id}));
    assert_eq!(h["count"], 0, "{h}");
    assert_eq!(h["messages"], json!([]), "{h}");
    let u0 = g.call("session.usage", json!({"session_id": s.id}));
    // Flat, as the TUI's /usage reads it; no calls yet.
    assert_usage(&u0);
    assert_eq!(u0["calls"], 0, "{u0}");

    let t1 = g.run_turn(&s.id, "count my tokens please");
    let u1 = g.call("session.usage", json!({"session_id": s.id}));
    assert_usage(&u1);
    assert!(
        u1["calls"].as_u64().unwrap() >= 1,
        "one model call happened: {u1}"
    );
    g.run_turn(&s.id, "and once more");
    let u2 = g.call("session.usage", json!({"session_id": s.id}));
    assert!(
        u2["calls"].as_u64().unwrap() > u1["calls"].as_u64().unwrap(),
        "session usage accumulates: {u1} then {u2}"
    );
    assert!(
        u2["total"].as_u64().unwrap() >= u1["total"].as_u64().unwrap(),
        "{u1} then {u2}"
    );

    let h = g.call("session.history", json!({"session_id": s.id}));
    assert_eq!(h["count"], 4, "{h}");
    let roles: Vec<&str> = h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"], "{h}");
    assert_eq!(h["messages"][1]["text"], t1.text.as_str());

    g.expect_code("session.history", json!({"session_id": "12345678"}), 4001);
    g.expect_code("session.usage", json!({"session_id": "12345678"}), 4001);
}

#[test]
fn session_title_set_get_and_unique_suffix() {
    let mut g = Gateway::start();
    let a = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    let c = g.create_session(json!({}));
    assert_eq!(
        g.call(
            "session.title",
            json!({"session_id": a.id, "title": "Project X"})
        )["title"],
        "Project X"
    );
    assert_eq!(
        g.call("session.title", json!({"session_id": a.id}))["title"],
        "Project X"
    );

    let r = g.call(
        "session.title",
        json!({"session_id": b.id, "title": "Project X"}),
    );
    assert_eq!(
        r["title"], "Project X #2",
        "a second session with the same title: {r}"
    );
    assert_eq!(
        g.call("session.title", json!({"session_id": b.id}))["title"],
        "Project X #2"
    );
    let r = g.call(
        "session.title",
        json!({"session_id": c.id, "title": "Project X"}),
    );
    assert_eq!(r["title"], "Project X #3", "{r}");
    // re-setting one's own title does not suffix it
    let r = g.call(
        "session.title",
        json!({"session_id": a.id, "title": "Project X"}),
    );
    assert_eq!(r["title"], "Project X", "{r}");

    g.expect_code(
        "session.title",
        json!({"session_id": "abcdef12", "title": "x"}),
        4001,
    );
}

#[test]
fn session_close_then_not_found() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "short one");
    let r = g.call("session.close", json!({"session_id": s.id}));
    assert_eq!(r, json!({"closed": true}));

    let msg = g.expect_code("session.history", json!({"session_id": s.id}), 4001);
    assert_eq!(msg, "session not found");
    g.expect_code(
        "prompt.submit",
        json!({"session_id": s.id, "text": "hello?"}),
        4001,
    );
    g.expect_code("session.close", json!({"session_id": s.id}), 4001);
    g.expect_code("session.events.since", json!({"session_id": s.id}), 4001);
    let al = g.call("session.active_list", json!({}));
    assert!(
        find_by(&al["sessions"], "id", &s.id).is_none(),
        "closed session still listed live: {al}"
    );

    // the row is ended with tui_close
    let (ended, reason): (Option<f64>, Option<String>) = g
        .db()
        .query_row(
            "SELECT ended_at, end_reason FROM sessions WHERE id=?1",
            [&s.stored],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("sessions row of the closed session");
    assert!(ended.is_some(), "ended_at set by session.close");
    assert_eq!(reason.as_deref(), Some("tui_close"));
}

#[test]
fn session_delete() {
    let mut g = delayed(30);
    let s = g.create_session(json!({"title": "doomed"}));
    g.run_turn(&s.id, "x");
    g.call("session.close", json!({"session_id": s.id}));
    let r = g.call("session.delete", json!({"session_id": s.stored}));
    // The TUI's picker checks that the answer names the row it asked to delete.
    assert_eq!(r["deleted"], s.stored.as_str(), "{r}");
    g.expect_code("session.resume", json!({"session_id": s.stored}), 4007);
    g.expect_code("session.delete", json!({"session_id": s.stored}), 4007);
    g.expect_code(
        "session.delete",
        json!({"session_id": UNKNOWN_STORED}),
        4007,
    );
    let l = g.call("session.list", json!({}));
    assert!(
        find_by(&l["sessions"], "id", &s.stored).is_none(),
        "deleted session listed: {l}"
    );
    // Its messages leave state.db after the answer, a batch per loop iteration.
    let db = g.db();
    let left = || -> i64 {
        db.query_row(
            "SELECT count(*) FROM messages WHERE session_id=?1",
            [&s.stored],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert!(
        poll_until(T, || left() == 0),
        "{} messages of a deleted session remain in the store",
        left()
    );

    // live (idle or running): refused with 4023, as Hermes does, and the session is not
    // disturbed
    let busy = g.create_session(json!({}));
    let p = long_prompt("busy", 40);
    let r = g.call("prompt.submit", json!({"session_id": busy.id, "text": p}));
    assert_eq!(r["status"], "streaming");
    g.wait_session_event(&busy.id, "message.delta", T);
    let (code, _, f) = g.call_err("session.delete", json!({"session_id": busy.stored}));
    assert_eq!(code, 4023, "delete of a running session: {f}");
    let c = g.wait_session_event(&busy.id, "message.complete", secs(30));
    assert_eq!(c["payload"]["status"], "complete", "{c}");
    assert!(c["payload"]["text"].as_str().unwrap().contains(&p));
    let h = g.call("session.history", json!({"session_id": busy.id}));
    assert_eq!(h["count"], 2, "{h}");
    let (code, _, f) = g.call_err("session.delete", json!({"session_id": busy.stored}));
    assert_eq!(code, 4023, "delete of an idle live session: {f}");
    let r = g.call(
        "prompt.submit",
        json!({"session_id": busy.id, "text": "still here"}),
    );
    assert_eq!(
        r["status"], "streaming",
        "the live session survives a refused delete: {r}"
    );
    g.wait_session_event(&busy.id, "message.complete", secs(30));
}

#[test]
fn session_events_since() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "replay me later please");
    let streamed = g.events_of_session(&s.id);
    let max_streamed = streamed
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .unwrap();

    let r = g.call("session.events.since", json!({"session_id": s.id}));
    let evs = r["events"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert!(!evs.is_empty(), "{r}");
    assert_eq!(r["count"].as_u64(), Some(evs.len() as u64), "{r}");
    assert_eq!(r["truncated"], false, "one short turn fits the ring: {r}");
    assert!(r.get("epoch").is_some() && !r["epoch"].is_null(), "{r}");
    let ring: Vec<Value> = evs.iter().map(|e| as_event(e).clone()).collect();
    assert_seq_increasing(&ring);
    let latest = r["latest_seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("latest_seq: {r}"));
    assert_eq!(ring.last().unwrap()["seq"].as_u64(), Some(latest), "{r}");
    assert!(
        latest >= max_streamed,
        "latest_seq {latest} < streamed {max_streamed}"
    );
    // the ring replays what was streamed: same seq, same type
    for e in &ring {
        if let Some(orig) = streamed.iter().find(|o| o["seq"] == e["seq"]) {
            assert_eq!(
                orig["type"], e["type"],
                "replayed {e} differs from streamed {orig}"
            );
        }
    }
    assert!(ring.iter().any(|e| e["type"] == "message.complete"), "{r}");

    // last_seen filters
    let k = latest.saturating_sub(3);
    let r2 = g.call(
        "session.events.since",
        json!({"session_id": s.id, "last_seen": k}),
    );
    let ring2: Vec<Value> = r2["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| as_event(e).clone())
        .collect();
    let want: Vec<&Value> = ring
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() > k)
        .collect();
    assert_eq!(
        ring2.iter().collect::<Vec<_>>(),
        want,
        "events after last_seen={k}: {r2}"
    );
    assert_eq!(r2["count"].as_u64(), Some(ring2.len() as u64));
    assert_eq!(r2["latest_seq"].as_u64(), Some(latest));
    assert_eq!(r2["epoch"], r["epoch"], "epoch is stable");

    let r3 = g.call(
        "session.events.since",
        json!({"session_id": s.id, "last_seen": latest}),
    );
    assert_eq!(r3["events"], json!([]), "{r3}");
    assert_eq!(r3["latest_seq"].as_u64(), Some(latest), "{r3}");

    g.expect_code(
        "session.events.since",
        json!({"session_id": "00000000"}),
        4001,
    );
}

#[test]
fn session_active_list_fields() {
    let mut g = Gateway::start();
    let a = g.create_session(json!({"title": "alpha"}));
    let b = g.create_session(json!({}));
    g.run_turn(&a.id, "preview text here");
    let r = g.call("session.active_list", json!({"current_session_id": a.id}));
    let list = r["sessions"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(list.len(), 2, "{r}");
    let ea = find_by(&r["sessions"], "id", &a.id).unwrap();
    let eb = find_by(&r["sessions"], "id", &b.id).unwrap();
    for e in [ea, eb] {
        for k in [
            "id",
            "session_key",
            "current",
            "title",
            "preview",
            "model",
            "message_count",
            "started_at",
            "last_active",
            "status",
        ] {
            assert!(e.get(k).is_some(), "active_list entry without {k}: {e}");
        }
        assert_eq!(e["status"], "idle", "{e}");
    }
    assert_eq!(ea["current"], true, "{ea}");
    assert_eq!(eb["current"], false, "{eb}");
    assert_eq!(ea["session_key"], a.stored.as_str());
    assert_eq!(eb["session_key"], b.stored.as_str());
    assert_eq!(ea["title"], "alpha");
    assert_eq!(ea["message_count"], 2, "{ea}");
    assert_eq!(eb["message_count"], 0, "{eb}");
}

#[test]
fn an_unusable_model_config_is_a_warning_under_the_banner() {
    let home = TempHome::new("cfgwarn");
    std::fs::write(
        home.path.join("config.yaml"),
        "model:\n  provider: nowhere-ai\n",
    )
    .unwrap();
    let mut g = Gateway::builder().home(&home.path).start();
    let r = g.call("session.create", json!({}));
    let w = r["info"]["config_warning"].as_str().unwrap_or("");
    assert!(w.contains("Unknown provider 'nowhere-ai'"), "{r}");
    // Never the offline model in its place: the provider asked for, and a prompt says why.
    assert_eq!(r["info"]["provider"], "nowhere-ai", "{r}");
    let sid = r["session_id"].as_str().unwrap().to_string();
    let t = g.run_turn(&sid, "hello");
    assert_eq!(t.complete["payload"]["status"], "error", "{:?}", t.complete);
    let why = t.complete["payload"]["error"].as_str().unwrap_or("");
    assert!(why.contains("Unknown provider 'nowhere-ai'"), "{why}");
}

#[test]
fn session_active_list_is_bounded_and_keeps_the_current_session() {
    let mut g = Gateway::start();
    let first = g.create_session(json!({"title": "the first"}));
    let mut ids = vec![first.id.clone()];
    for _ in 0..6 {
        ids.push(g.create_session(json!({})).id);
    }
    // The most recently active: the last one created, then one that talks now.
    g.run_turn(&ids[3], "recent");
    let r = g.call(
        "session.active_list",
        json!({"current_session_id": first.id, "limit": 3}),
    );
    let list = r["sessions"].as_array().unwrap_or_else(|| panic!("{r}"));
    let got: Vec<&str> = list.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(r["total"], 7, "{r}");
    assert_eq!(got.len(), 3, "{r}");
    assert!(got.contains(&first.id.as_str()), "current kept: {got:?}");
    assert_eq!(got[0], ids[3], "most recent first: {got:?}");
    // Without a limit every one of a handful of sessions is listed.
    let all = g.call("session.active_list", json!({}));
    assert_eq!(all["sessions"].as_array().map(Vec::len), Some(7), "{all}");
}

/// Event rings are bounded in bytes, per session and in total; `truncated` says when events a
/// client has not seen are gone, and never when they are all there.
#[test]
fn event_rings_are_capped_by_bytes_per_session_and_in_total() {
    const RING_KB: usize = 64;
    const TOTAL_KB: usize = 128;
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_EVENT_RING_KB", &RING_KB.to_string())
        .env("TUI_GATEWAY_EVENT_RINGS_TOTAL_KB", &TOTAL_KB.to_string())
        .start();
    let sessions: Vec<Session> = (0..4).map(|_| g.create_session(json!({}))).collect();
    // ~3,000 deltas of ~100 bytes each: several times one ring's cap.
    for s in &sessions {
        let t = g.run_turn_timeout(&s.id, &long_prompt("chatty", 3000), secs(60));
        assert_eq!(t.complete["payload"]["status"], "complete");
    }
    let mut total = 0;
    for (i, s) in sessions.iter().enumerate() {
        let r = g.call("session.events.since", json!({"session_id": s.id}));
        let size = r["events"].to_string().len();
        assert!(size <= RING_KB * 1024, "session {i}: {size} bytes answered");
        assert_eq!(r["truncated"], true, "session {i} lost its first events");
        let evs = r["events"].as_array().unwrap();
        let latest = r["latest_seq"].as_u64().unwrap();
        // The newest events are the ones kept: the last session's ends with its session.info.
        if let Some(last) = evs.last() {
            assert_eq!(as_event(last)["seq"].as_u64(), Some(latest), "session {i}");
            let first = as_event(&evs[0])["seq"].as_u64().unwrap();
            let r = g.call(
                "session.events.since",
                json!({"session_id": s.id, "last_seen": first - 1}),
            );
            assert_eq!(
                r["truncated"], false,
                "session {i}: all after {first} are kept"
            );
            assert_eq!(r["count"].as_u64(), Some(evs.len() as u64));
        }
        total += size;
    }
    assert!(
        total <= TOTAL_KB * 1024,
        "all rings answered {total} bytes, over the {TOTAL_KB} KiB total"
    );
    // The most recent session keeps the most: the oldest events of any session go first.
    let last = g.call(
        "session.events.since",
        json!({"session_id": sessions[3].id}),
    );
    let first = g.call(
        "session.events.since",
        json!({"session_id": sessions[0].id}),
    );
    assert!(
        last["count"].as_u64() > first["count"].as_u64(),
        "newest {} vs oldest {}",
        last["count"],
        first["count"]
    );
}
