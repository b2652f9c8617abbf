//! The stock TUI's start-up, frame by frame (PROTOCOL.md "Start-up"), and its polling during a
//! running turn: every answer must be a result, never an error.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::time::Instant;

fn assert_result(r: &Value, what: &str) {
    assert!(
        r.get("result").is_some() && r.get("error").is_none(),
        "{what} must be answered with a result (an error prints into the transcript): {r}"
    );
}

#[test]
fn stock_tui_startup_sequence() {
    let mut g = Gateway::builder().spawn();
    // the TUI writes pet.cells before it has read gateway.ready
    g.send_line(
        r#"{"jsonrpc":"2.0","id":"pet-0","method":"pet.cells","params":{"graphics":"none"}}"#,
    );
    let ready = g.wait_ready();
    assert_eq!(ready["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(ready["change_events"], false);
    let r = g.wait_response(&json!("pet-0"), T);
    assert_result(&r, "pet.cells before ready");
    assert_eq!(r["result"]["enabled"], false, "{r}");

    let r = g.request("config.get", json!({"key": "full"}));
    assert_result(&r, "config.get full");
    assert!(r["result"]["config"].is_object(), "{r}");
    let r = g.request("commands.catalog", json!({}));
    assert_result(&r, "commands.catalog");
    let r = g.request("setup.status", json!({}));
    assert_result(&r, "setup.status");
    assert_eq!(r["result"]["provider_configured"], true, "{r}");

    let r = g.request("session.create", json!({"cols": 120}));
    assert_result(&r, "session.create");
    let sid = r["result"]["session_id"].as_str().unwrap().to_string();
    assert_eq!(
        r["result"]["info"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{r}"
    );
    // the session.info event turns the status from "starting agent…" to "ready"
    let info = g.wait_session_event(&sid, "session.info", T);
    assert_eq!(
        info["payload"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{info}"
    );

    let r = g.request("config.get", json!({"key": "mtime"}));
    assert_result(&r, "config.get mtime");
    assert!(r["result"]["mtime"].is_number(), "{r}");
    let r = g.request("session.active_list", json!({"current_session_id": sid}));
    assert_result(&r, "session.active_list");
    let list = r["result"]["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{r}");
    assert_eq!(list[0]["id"], sid.as_str());
    assert_eq!(list[0]["current"], true);

    let r = g.request("client.capabilities", json!({"server_requests": false}));
    assert_result(&r, "client.capabilities");

    // no error frame was sent at all during start-up
    g.drain_available();
    for f in &g.frames {
        assert!(f.get("error").is_none(), "error during start-up: {f}");
    }
    g.assert_clean_stdout();
}

#[test]
fn tui_polling_during_a_running_turn() {
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "40")
        .start();
    let s = g.create_session(json!({"cols": 100}));
    let prompt = long_prompt("polling-test", 50); // ~2 s of streaming

    let r = g.request(
        "input.detect_drop",
        json!({"session_id": s.id, "text": prompt}),
    );
    assert_result(&r, "input.detect_drop");
    assert_eq!(r["result"]["matched"], false, "{r}");
    let r = g.request("prompt.submit", json!({"session_id": s.id, "text": prompt}));
    assert_result(&r, "prompt.submit");
    assert_eq!(r["result"]["status"], "streaming");

    let deadline = Instant::now() + secs(30);
    let mut polls = 0u32;
    let mut saw_running = false;
    let mut complete = None;
    while complete.is_none() {
        assert!(
            Instant::now() < deadline,
            "turn did not complete\n{}",
            g.diag()
        );
        let r = g.request("session.active_list", json!({"current_session_id": s.id}));
        assert_result(&r, "session.active_list (poll)");
        let e = r["result"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == s.id.as_str())
            .unwrap_or_else(|| panic!("running session missing from active_list: {r}"))
            .clone();
        let st = e["status"].as_str().unwrap_or("");
        assert!(st == "working" || st == "idle", "status: {e}");
        saw_running |= st == "working";

        let r = g.request("pet.cells", json!({"state": "thinking"}));
        assert_result(&r, "pet.cells (poll)");
        let r = g.request("config.get", json!({"key": "mtime"}));
        assert_result(&r, "config.get mtime (poll)");
        let r = g.request(
            "input.detect_drop",
            json!({"session_id": s.id, "text": "typing"}),
        );
        assert_result(&r, "input.detect_drop (poll)");
        let r = g.request("complete.slash", json!({"text": "/he"}));
        assert_result(&r, "complete.slash (poll)");
        let r = g.request("session.history", json!({"session_id": s.id}));
        assert_result(&r, "session.history (poll)");
        polls += 1;
        // pace the loop (~300 ms) by waiting for the end of the turn
        complete = g.try_wait_session_event(&s.id, "message.complete", ms(300));
    }
    let c = complete.unwrap();
    assert_eq!(c["payload"]["status"], "complete", "{c}");
    assert!(c["payload"]["text"].as_str().unwrap().contains(&prompt));
    assert!(
        polls >= 3,
        "the turn should have lasted several polls, got {polls}"
    );
    assert!(
        saw_running,
        "active_list never showed the session as running during the turn"
    );

    let info = g.wait_session_event(&s.id, "session.info", T);
    assert_eq!(info["payload"]["running"], false);
    let r = g.request("session.active_list", json!({"current_session_id": s.id}));
    assert_eq!(r["result"]["sessions"][0]["status"], "idle", "{r}");
    for f in &g.frames {
        assert!(f.get("error").is_none(), "error frame during polling: {f}");
    }
    g.assert_clean_stdout();
}

#[test]
fn spawn_forms_all_work() {
    for args in [&[][..], &["serve"][..], &["-m", "tui_gateway.entry"][..]] {
        let mut g = Gateway::builder().args(args).start();
        g.ping();
        let s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "hi there");
        assert_plain_turn(&t, &s.id, "hi there");
        g.close_stdin();
        let st = g.wait_exit(secs(10));
        assert!(st.success(), "args {args:?}: exit {st:?}\n{}", g.diag());
    }
}
