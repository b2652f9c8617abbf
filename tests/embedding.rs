//! The gateway embedded in a host program (`examples/embed.rs`): its SIGTERM handling chains
//! to the handler the host installed first, and the ordered shutdown still persists the
//! transcript.

mod common;

use std::path::PathBuf;

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
    let deadline = std::time::Instant::now() + secs(5);
    loop {
        let text = gw.stderr_text();
        if text.contains(line) || std::time::Instant::now() >= deadline {
            return text;
        }
        std::thread::yield_now();
    }
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
