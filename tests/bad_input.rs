//! Bad input of every kind; after each case the gateway must still answer `ping`.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Instant;

/// Sends a ping and asserts that it is answered, and that nothing other than `allowed` frames
/// arrived between `mark` and the pong.
fn ping_after(g: &mut Gateway, mark: usize, what: &str) -> Vec<Value> {
    let id = g.send_request("ping", json!({}));
    let r = g.wait_frame(|f| is_response(f) && f["id"] == id, T);
    let r = r.unwrap_or_else(|| panic!("no pong after {what}\n{}", g.diag()));
    assert_eq!(r["result"], json!({"pong": true}), "after {what}: {r}");
    assert!(g.try_exit().is_none(), "gateway exited after {what}");
    let pong_at = g.frames.iter().rposition(|f| f["id"] == id).unwrap();
    g.frames[mark..pong_at].to_vec()
}

fn null_error(frames: &[Value]) -> Vec<i64> {
    frames
        .iter()
        .filter(|f| is_response(f) && f["id"].is_null())
        .map(|f| f["error"]["code"].as_i64().unwrap_or(0))
        .collect()
}

#[test]
fn garbage_lines() {
    let mut g = Gateway::start();
    for line in [
        "hello world",
        "{not json",
        "}{",
        "{\"jsonrpc\":\"2.0\",",
        "\u{1b}[A\u{1b}[B",
        "ping",
    ] {
        let mark = g.frames.len();
        g.send_line(line);
        let between = ping_after(&mut g, mark, &format!("garbage {line:?}"));
        assert_eq!(
            null_error(&between),
            [-32700],
            "garbage {line:?} → one -32700 id null; got {between:?}"
        );
    }
    g.assert_clean_stdout();
}

#[test]
fn blank_lines_are_skipped() {
    let mut g = Gateway::start();
    let mark = g.frames.len();
    g.send_raw(b"\n\n\n");
    let between = ping_after(&mut g, mark, "blank lines");
    assert!(
        between.is_empty(),
        "blank lines must not be answered: {between:?}"
    );
    // whitespace-only lines: skipped or a parse error, never anything else
    let mark = g.frames.len();
    g.send_raw(b"   \n\t\n");
    let between = ping_after(&mut g, mark, "whitespace lines");
    for c in null_error(&between) {
        assert_eq!(c, -32700, "{between:?}");
    }
    assert!(
        between.iter().all(|f| is_response(f) && f["id"].is_null()),
        "{between:?}"
    );
    // CRLF-terminated frame
    g.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"crlf\",\"method\":\"ping\"}\r\n");
    let r = g.wait_response(&json!("crlf"), T);
    assert_eq!(r["result"], json!({"pong": true}), "{r}");
}

#[test]
fn oversized_line_is_refused_and_skipped() {
    let mut g = Gateway::start();
    let mark = g.frames.len();
    // 20 MiB, default limit 16 MiB; a well-formed request so it is not "just garbage"
    let pad = "a".repeat(20 * 1024 * 1024);
    let big =
        format!(r#"{{"jsonrpc":"2.0","id":"big","method":"ping","params":{{"pad":"{pad}"}}}}"#);
    let mut bytes = big.into_bytes();
    bytes.push(b'\n');
    // then a normal request in the same stream, right after the newline
    bytes.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":\"after-big\",\"method\":\"ping\"}\n");
    g.send_raw(&bytes);
    drop(bytes);
    let r = g.wait_response(&json!("after-big"), secs(30));
    assert_eq!(r["result"], json!({"pong": true}), "{r}");
    let between = ping_after(&mut g, mark, "a 20 MiB line");
    let errs: Vec<&Value> = between
        .iter()
        .filter(|f| f.get("error").is_some())
        .collect();
    assert_eq!(
        errs.len(),
        1,
        "exactly one error for the oversized line: {between:?}"
    );
    assert_eq!(errs[0]["error"]["code"], -32600, "{:?}", errs[0]);
    assert!(
        errs[0]["id"].is_null(),
        "oversized line answered with id null: {:?}",
        errs[0]
    );
    assert!(
        !g.frames.iter().any(|f| f["id"] == "big"),
        "the oversized request must not run"
    );
    // memory: the gateway discarded the line rather than buffering it
    if let Some(kib) = procfs::rss_kib(g.pid()) {
        assert!(
            kib < 48 * 1024,
            "gateway RSS {kib} KiB after a discarded 20 MiB line"
        );
    }
}

#[test]
fn invalid_utf8() {
    let mut g = Gateway::start();
    let mark = g.frames.len();
    g.send_raw(b"\xff\xfe\xfd garbage \xc3\x28\n");
    let between = ping_after(&mut g, mark, "invalid UTF-8 line");
    assert_eq!(null_error(&between), [-32700], "{between:?}");

    // invalid UTF-8 inside an otherwise valid frame: refused or answered, the gateway lives on
    let mark = g.frames.len();
    g.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"u8\",\"method\":\"ping\",\"params\":{\"x\":\"\xff\xfe\"}}\n");
    let between = ping_after(&mut g, mark, "invalid UTF-8 in a string");
    assert!(between.len() <= 1, "{between:?}");
    // a session survives it too
    let s = g.create_session(json!({}));
    let mark = g.frames.len();
    let mut frame = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":\"u9\",\"method\":\"session.title\",\"params\":{{\"session_id\":\"{}\",\"title\":\"bad ",
        s.id
    )
    .into_bytes();
    frame.extend_from_slice(b"\xc0\xaf title\"}}\n");
    g.send_raw(&frame);
    ping_after(&mut g, mark, "invalid UTF-8 in a title");
    g.assert_clean_stdout();
}

#[test]
fn non_object_json() {
    let mut g = Gateway::start();
    for line in [
        "[]",
        "[1,2,3]",
        r#"[{"jsonrpc":"2.0","id":"b","method":"ping"}]"#,
        "42",
        "-1.5",
        r#""str""#,
        "null",
        "false",
    ] {
        let mark = g.frames.len();
        g.send_line(line);
        let between = ping_after(&mut g, mark, line);
        assert_eq!(
            null_error(&between),
            [-32600],
            "non-object {line} → -32600 id null: {between:?}"
        );
    }
    g.assert_clean_stdout();
}

#[test]
fn events_since_the_largest_seq_is_not_truncated() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "hello");
    let r = g.call(
        "session.events.since",
        json!({"session_id": s.id, "last_seen": u64::MAX}),
    );
    assert_eq!(r["truncated"], false, "{r}");
    assert_eq!(r["count"], 0, "{r}");
}

#[test]
fn wrong_param_types() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let cases = [
        ("session.create", json!({"cols": "wide"})),
        ("session.create", json!({"title": 12})),
        ("prompt.submit", json!({"session_id": 123, "text": "x"})),
        (
            "prompt.submit",
            json!({"session_id": s.id, "text": {"a": 1}}),
        ),
        ("session.list", json!({"limit": -5.5})),
        (
            "session.events.since",
            json!({"session_id": s.id, "last_seen": "yesterday"}),
        ),
        ("session.resume", json!({"session_id": ["x"]})),
        // The session is live: its resume is answered from memory, and still checks `cols`.
        (
            "session.resume",
            json!({"session_id": s.stored, "cols": "wide"}),
        ),
        (
            "session.resume",
            json!({"session_id": s.stored, "cols": -1}),
        ),
        (
            "session.resume",
            json!({"session_id": s.stored, "cols": 1.5}),
        ),
        ("terminal.resize", json!({"session_id": s.id, "cols": null})),
        ("complete.slash", json!({"text": 5})),
        ("input.detect_drop", json!({"session_id": s.id, "text": 5})),
    ];
    // every case is tried; the mismatches are reported together
    let mut wrong = Vec::new();
    for (method, params) in cases {
        let mark = g.frames.len();
        let r = g.request(method, params.clone());
        if r["error"]["code"] != -32602 || r["error"]["message"].as_str().unwrap_or("").is_empty() {
            wrong.push(format!(
                "{method} {params} → {r} (want -32602 with a message)"
            ));
        }
        ping_after(&mut g, mark, method);
    }
    // params of the wrong kind entirely
    for params in [json!([]), json!("s"), json!(1), json!(true)] {
        let (code, _, f) = g.call_err("session.create", params.clone());
        assert_eq!(code, -32602, "params {params}: {f}");
    }
    // the session is unharmed
    let t = g.run_turn(&s.id, "still fine");
    assert_plain_turn(&t, &s.id, "still fine");
    assert!(
        wrong.is_empty(),
        "wrong parameter types not refused:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn unknown_session_ids() {
    let mut g = Gateway::start();
    let ghost = "deadbeef";
    let cases = [
        (
            "prompt.submit",
            json!({"session_id": ghost, "text": "hi"}),
            4001,
        ),
        ("session.history", json!({"session_id": ghost}), 4001),
        ("session.close", json!({"session_id": ghost}), 4001),
        ("session.usage", json!({"session_id": ghost}), 4001),
        ("session.title", json!({"session_id": ghost}), 4001),
        ("session.events.since", json!({"session_id": ghost}), 4001),
        (
            "terminal.resize",
            json!({"session_id": ghost, "cols": 80}),
            4001,
        ),
        (
            "prompt.submit",
            json!({"session_id": "not-even-hex!", "text": "hi"}),
            4001,
        ),
        (
            "session.resume",
            json!({"session_id": "20990101_000000_abcdef"}),
            4007,
        ),
        (
            "session.delete",
            json!({"session_id": "20990101_000000_abcdef"}),
            4007,
        ),
        ("session.resume", json!({"session_id": "deadbeef"}), 4007),
    ];
    for (method, params, code) in cases {
        let mark = g.frames.len();
        g.expect_code(method, params, code);
        ping_after(&mut g, mark, method);
    }
}

#[test]
fn answer_to_a_server_request_nobody_sent() {
    let mut g = Gateway::start();
    for line in [
        r#"{"jsonrpc":"2.0","id":"srq-nobody","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":"srq-0f3a9c1d2e4b","result":{"choice":"once"}}"#,
        r#"{"jsonrpc":"2.0","id":"srq-err","error":{"code":-1,"message":"no"}}"#,
    ] {
        let mark = g.frames.len();
        g.send_line(line);
        let between = ping_after(&mut g, mark, line);
        assert!(
            between.is_empty(),
            "the gateway sends nothing back for {line}: {between:?}"
        );
    }
    // nothing arrives late either
    let late = g.collect_for(ms(300));
    assert!(late.is_empty(), "late frames: {late:?}");
}

#[test]
fn ten_thousand_pings_in_one_burst() {
    let mut g = Gateway::start();
    const N: usize = 10_000;
    let mut burst = Vec::with_capacity(N * 60);
    for i in 0..N {
        burst.extend_from_slice(
            format!("{{\"jsonrpc\":\"2.0\",\"id\":\"burst-{i}\",\"method\":\"ping\"}}\n")
                .as_bytes(),
        );
    }
    let writer = g.write_in_background(burst);
    let mut seen: HashMap<String, u32> = HashMap::new();
    let deadline = Instant::now() + secs(60);
    while seen.len() < N {
        let left = deadline.saturating_duration_since(Instant::now());
        let f = g
            .recv_unlogged(left)
            .unwrap_or_else(|| panic!("only {} of {N} pings answered\n{}", seen.len(), g.diag()));
        if let Some(id) = f["id"].as_str().filter(|id| id.starts_with("burst-")) {
            assert_eq!(f["result"], json!({"pong": true}), "{f}");
            *seen.entry(id.to_string()).or_default() += 1;
        }
    }
    writer.join().unwrap().expect("write the burst");
    // no duplicates arrive afterwards
    let mark = g.frames.len();
    let between = ping_after(&mut g, mark, "the burst");
    assert!(
        between
            .iter()
            .all(|f| !f["id"].as_str().unwrap_or("").starts_with("burst-")),
        "duplicate answers"
    );
    assert!(seen.values().all(|&n| n == 1));
    assert_eq!(seen.len(), N);
    for i in 0..N {
        assert!(
            seen.contains_key(&format!("burst-{i}")),
            "burst-{i} unanswered"
        );
    }
}

#[test]
fn many_frames_in_one_write_and_one_frame_in_many_writes() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    // many frames, one write
    let mut buf = String::new();
    let methods = [
        "ping",
        "pet.cells",
        "setup.status",
        "commands.catalog",
        "session.active_list",
        "gateway.capabilities",
    ];
    for (i, m) in methods.iter().enumerate() {
        buf.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"multi-{i}\",\"method\":\"{m}\",\"params\":{{}}}}\n"
        ));
    }
    g.send_raw(buf.as_bytes());
    for (i, m) in methods.iter().enumerate() {
        let r = g.wait_response(&json!(format!("multi-{i}")), T);
        assert!(r.get("result").is_some(), "{m} in a multi-frame write: {r}");
    }

    // one frame, many writes: the split falls inside a multi-byte character
    let title = "café ☕ split";
    let frame = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":\"split\",\"method\":\"session.title\",\"params\":{{\"session_id\":\"{}\",\"title\":\"{}\"}}}}\n",
        s.id, title
    );
    let bytes = frame.as_bytes();
    let cup = frame.find('☕').unwrap();
    let cuts = [7, 30, cup + 1, cup + 2, bytes.len() - 1];
    let mut prev = 0;
    for &c in &cuts {
        g.send_raw(&bytes[prev..c]);
        prev = c;
        // the frame is incomplete: nothing may be answered yet (this also paces the writes)
        let early = g.collect_for(ms(60));
        assert!(
            early.iter().all(|f| f["id"] != "split"),
            "answered before the newline: {early:?}"
        );
    }
    g.send_raw(&bytes[prev..]);
    let r = g.wait_response(&json!("split"), T);
    assert_eq!(r["result"]["title"], title, "{r}");
    let r = g.call("session.title", json!({"session_id": s.id}));
    assert_eq!(r["title"], title);
    g.ping();
    g.assert_clean_stdout();
}

#[test]
fn ids_come_back_exactly_as_sent() {
    let mut g = Gateway::start();
    let ids = [
        "123456789012345678901234567890",
        "-123456789012345678901234567890",
        "-7",
        "0.1000000000000000055511151231257827",
        "2.50",
        "6.02E+23",
        r#""text id""#,
        r#""\u0041\n\ud83d\ude00""#,
    ];
    for id in ids {
        let mark = g.raw.len();
        g.send_line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        let want = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"pong":true}}}}"#);
        let deadline = Instant::now() + T;
        while !g.raw[mark..].iter().any(|l| l.trim_end() == want) {
            assert!(
                g.pump_until(deadline),
                "no answer echoing id {id}\n{}",
                g.diag()
            );
        }
        // An error answer echoes it too.
        let mark = g.raw.len();
        g.send_line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"no.such.method"}}"#
        ));
        let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"error":"#);
        while !g.raw[mark..].iter().any(|l| l.starts_with(&prefix)) {
            assert!(
                g.pump_until(deadline),
                "no error echoing id {id}\n{}",
                g.diag()
            );
        }
    }
    g.ping();
}

/// A request whose `params` nest `depth` levels below the request's own object.
fn nested_params(id: &str, depth: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{}1{}}}"#,
        r#"{"a":"#.repeat(depth),
        "}".repeat(depth)
    )
}

#[test]
fn a_request_the_parse_refuses_is_answered_under_its_own_id() {
    let mut g = Gateway::start();
    let deep_member = format!(
        r#"{{"jsonrpc":"2.0","id":"d2","method":"ping","x":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let mut bad_utf8 = br#"{"jsonrpc":"2.0","id":"u8","method":"ping","params":{"x":""#.to_vec();
    bad_utf8.extend_from_slice(b"\xff\xfe\"}}");
    let cases: [(Vec<u8>, &str, i64, &str); 5] = [
        (
            nested_params(r#""d1""#, 300).into_bytes(),
            "d1",
            -32602,
            "invalid params: params nests deeper than 127 levels",
        ),
        (
            deep_member.into_bytes(),
            "d2",
            -32600,
            r#"invalid request: "x" nests deeper than 127 levels"#,
        ),
        (
            br#"{"jsonrpc":"2.0","id":"n1","method":"ping","params":{"n":1e400}}"#.to_vec(),
            "n1",
            -32602,
            "number out of range",
        ),
        (bad_utf8, "u8", -32700, "invalid UTF-8"),
        (
            br#"{"jsonrpc":"2.0","id":"i1","method":"ping","params":[1e400]}"#.to_vec(),
            "i1",
            -32602,
            "number out of range",
        ),
    ];
    for (line, id, code, says) in cases {
        let mut frame = line.clone();
        frame.push(b'\n');
        g.send_raw(&frame);
        let r = g.wait_response(&json!(id), T);
        assert_eq!(r["error"]["code"], code, "{r}");
        let message = r["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{id}: {message}");
        g.ping();
    }
    // The deepest params serde_json takes are a request like any other.
    g.send_line(&nested_params(r#""ok""#, 126));
    let r = g.wait_response(&json!("ok"), T);
    assert_eq!(r["result"], json!({"pong": true}), "{r}");
    g.assert_clean_stdout();
}

#[test]
fn a_lone_surrogate_is_taken_as_the_replacement_character() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    // Node's JSON.stringify writes a lone half of a pair as an escape; Python's json.loads takes it.
    let start = g.frames.len();
    g.send_line(&format!(
        r#"{{"jsonrpc":"2.0","id":"p1","method":"prompt.submit","params":{{"session_id":"{}","text":"cut \ud83d here"}}}}"#,
        s.id
    ));
    let r = g.wait_response(&json!("p1"), T);
    assert_eq!(r["result"]["status"], "streaming", "{r}");
    let turn = g.finish_turn(&s.id, start, T);
    assert!(turn.text.contains("cut \u{fffd} here"), "{}", turn.text);
    // An id holding one is echoed as it was written.
    let mark = g.garbage.len();
    g.send_line(r#"{"jsonrpc":"2.0","id":"\udc00","method":"ping"}"#);
    let want = r#"{"jsonrpc":"2.0","id":"\udc00","result":{"pong":true}}"#;
    let deadline = Instant::now() + T;
    // The harness's own parse cannot hold a lone surrogate, so the line lands in `garbage`.
    while !g.garbage[mark..].iter().any(|l| l == want.as_bytes()) {
        assert!(
            g.pump_until(deadline),
            "no answer echoing the id\n{}",
            g.diag()
        );
    }
    g.garbage.truncate(mark);
    g.ping();
    g.assert_clean_stdout();
}
