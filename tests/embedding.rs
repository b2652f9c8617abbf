//! The gateway embedded in a host program (`examples/embed.rs`): its SIGTERM handling chains
//! to the handler the host installed first, the ordered shutdown still persists the
//! transcript, and the tool the host registers is offered and called like the built-in one.

use crate::common;

use std::path::PathBuf;

use common::procfs::poll_until;
use common::*;
use serde_json::json;

fn embed_example() -> PathBuf {
    // Examples are built next to the binaries by `cargo test`.
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tui-gateway"));
    bin.parent()
        .expect("target dir")
        .join("examples")
        .join("embed")
}

/// What `examples/embed.rs` says when its own SIGTERM handler ran.
const HOST_LINE: &str = "[host] my SIGTERM handler ran too";

/// The gateway's stderr once it holds `line` (or after a deadline, for the assertion to report).
fn stderr_with(gw: &Gateway, line: &str) -> String {
    poll_until(secs(5), || gw.stderr_text().contains(line));
    gw.stderr_text()
}

#[test]
fn sigterm_flushes_and_the_hosts_handler_runs() {
    let program = embed_example();
    assert!(
        program.exists(),
        "build the example first: {}",
        program.display()
    );
    let mut gw = Gateway::builder()
        .program(&program)
        .args(&[])
        .tag("embed")
        .start();
    let s = gw.create_session(json!({"title": "embedded"}));
    let turn = gw.run_turn(&s.id, "survive the kill");
    assert!(turn.text.contains("survive the kill"));
    gw.signal(libc::SIGTERM);
    let status = gw.wait_exit(secs(5));
    assert_eq!(status.code(), Some(0), "{}", gw.diag());
    // The host's last line may still be in the stderr pipe when the process is reaped.
    let stderr = stderr_with(&gw, HOST_LINE);
    assert!(stderr.contains("[gateway-signal] SIGTERM"), "{stderr}");
    assert!(
        stderr.contains(HOST_LINE),
        "host handler not chained: {stderr}"
    );
    let db = gw.db();
    let (reason, contents): (String, Vec<String>) = (
        db.query_row(
            "SELECT end_reason FROM sessions WHERE id = ?1",
            [&s.stored],
            |r| r.get(0),
        )
        .unwrap(),
        db.prepare("SELECT content FROM messages WHERE session_id = ?1 ORDER BY id")
            .unwrap()
            .query_map([&s.stored], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect(),
    );
    assert_eq!(reason, "tui_shutdown");
    assert_eq!(contents.len(), 2);
    assert_eq!(contents[0], "survive the kill");
}

#[test]
fn with_signals_off_the_host_owns_sigterm() {
    let program = embed_example();
    let mut gw = Gateway::builder()
        .program(&program)
        .args(&["--no-signals"])
        .tag("embed-nosig")
        .start();
    let s = gw.create_session(json!({}));
    gw.run_turn(&s.id, "hello");
    // Only the host's handler runs: the gateway keeps serving.
    gw.signal(libc::SIGTERM);
    gw.ping();
    let r = gw.call("session.history", json!({"session_id": s.id}));
    assert_eq!(r["count"], 2);
    gw.close_stdin();
    assert_eq!(gw.wait_exit(secs(5)).code(), Some(0));
    let stderr = stderr_with(&gw, HOST_LINE);
    assert!(stderr.contains(HOST_LINE), "{stderr}");
}

#[test]
fn the_hosts_own_tool_is_offered_and_its_result_lands_in_the_transcript() {
    let mut gw = Gateway::builder()
        .program(&embed_example())
        .args(&[])
        .tag("embed-tool")
        .start();
    let s = gw.create_session(json!({}));
    // The banner and the tool listing name the host's tool next to the built-in one.
    let info = &s.result["info"];
    assert_eq!(
        info["tools"]["host"],
        json!(["host_note", "host_sum"]),
        "{info}"
    );
    assert_eq!(
        info["tools"]["terminal"],
        json!(["terminal", "process"]),
        "{info}"
    );
    let shown = gw.call("tools.show", json!({}));
    // The total counts every listed tool, the host's two among them.
    let listed: usize = shown["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .map(|sec| sec["tools"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(shown["total"], listed, "{shown}");
    assert!(listed >= 3, "{shown}");

    let turn = gw.run_turn(&s.id, r#"%host_note {"text": "buy milk"}"#);
    let done = turn.event("tool.complete");
    let p = &done["payload"];
    assert_eq!(p["name"], "host_note", "{p}");
    assert_eq!(p["result"]["kept"], "buy milk", "{p}");
    assert_eq!(p["summary"], "1 note(s) held", "{p}");
    assert_eq!(p["notes"], json!(["buy milk"]), "{p}");
    assert!(turn.text.contains("host_note returned"), "{}", turn.text);

    // Bad arguments are a tool error the model reads, not a failed turn.
    let bad = gw.run_turn(&s.id, "%host_note {}");
    assert_eq!(bad.complete["payload"]["status"], "complete");

    let rows = message_rows(&gw.db_path(), &s.stored);
    let tool_rows: Vec<_> = rows.iter().filter(|r| r.role == "tool").collect();
    assert_eq!(tool_rows.len(), 2, "{rows:?}");
    let kept: serde_json::Value =
        serde_json::from_str(tool_rows[0].content.as_deref().unwrap_or("")).unwrap();
    assert_eq!(kept["kept"], "buy milk");
    assert_eq!(kept["by"], "the embedding host");
    assert!(
        tool_rows[1]
            .content
            .as_deref()
            .unwrap_or("")
            .contains("text (a string) is required"),
        "{:?}",
        tool_rows[1]
    );
    gw.close_stdin();
    assert_eq!(gw.wait_exit(secs(5)).code(), Some(0));
}

/// A host's tool whose work runs on the host's own thread finishes its call later through the
/// call's `JobWaker`; meanwhile the gateway answers other requests.
#[test]
fn the_hosts_tool_finishes_later_from_its_own_thread() {
    let mut gw = Gateway::builder()
        .program(&embed_example())
        .args(&[])
        .tag("embed-later")
        .start();
    let s = gw.create_session(json!({}));
    let turn = gw.run_turn(&s.id, r#"%host_sum {"n": 100000}"#);
    let done = turn.event("tool.complete");
    assert_eq!(done["payload"]["result"]["sum"], 5_000_050_000u64, "{done}");
    assert_eq!(done["payload"]["summary"], "sum 5000050000");
    let rows = message_rows(&gw.db_path(), &s.stored);
    let tool = rows.iter().find(|r| r.role == "tool").unwrap();
    assert_eq!(tool.json()["sum"], 5_000_050_000u64);
    // Interrupted while the host still works: the call ends, the host's late wake is harmless.
    let start = submit(&mut gw, &s.id, r#"%host_sum {"n": 100000000000000}"#);
    gw.wait_session_event(&s.id, "tool.start", secs(5));
    gw.call("session.interrupt", json!({"session_id": s.id}));
    let turn = gw.finish_turn(&s.id, start, secs(10));
    assert_eq!(
        turn.complete["payload"]["status"], "interrupted",
        "{:?}",
        turn.events
    );
    gw.ping();
    gw.close_stdin();
    assert_eq!(gw.wait_exit(secs(5)).code(), Some(0));
}
