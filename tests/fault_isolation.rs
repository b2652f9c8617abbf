//! A bug in one turn ends that turn, not the gateway: a model adapter that panics (an
//! embedding host's own model, `examples/own_model.rs`) fails its turn with an error while
//! another session keeps streaming, and the gateway keeps serving; so does a host's tool that
//! panics when it starts, and its call still gets a result in the transcript.

use crate::common;

use std::path::PathBuf;

use common::*;
use serde_json::json;

fn own_model_example() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tui-gateway"));
    bin.parent()
        .expect("target dir")
        .join("examples")
        .join("own_model")
}

/// The turn ended with status `error` and says an internal error happened.
fn assert_internal_error(turn: &Turn) {
    let p = &turn.complete["payload"];
    assert_eq!(p["status"], "error", "{p}");
    assert!(
        p["error"]
            .as_str()
            .is_some_and(|e| e.contains("internal error")),
        "{p}"
    );
}

#[test]
fn a_panicking_turn_ends_alone_with_an_error() {
    let program = own_model_example();
    assert!(
        program.exists(),
        "build the example first: {}",
        program.display()
    );
    let mut g = Gateway::builder()
        .program(&program)
        .args(&[])
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "20")
        .tag("isolate")
        .start();
    let calm = g.create_session(json!({}));
    let doomed = g.create_session(json!({}));
    let long = long_prompt("keep streaming", 30);
    let calm_start = submit(&mut g, &calm.id, &long);
    g.wait_session_event(&calm.id, "message.delta", secs(10));

    let start = submit(&mut g, &doomed.id, "panic-now please");
    let failed = g.finish_turn(&doomed.id, start, secs(10));
    assert_internal_error(&failed);

    // The other session's turn streams on to its end.
    let calm_turn = g.finish_turn(&calm.id, calm_start, secs(30));
    assert_eq!(calm_turn.complete["payload"]["status"], "complete");
    assert!(calm_turn.text.contains("w29"), "{}", calm_turn.text);

    // The failed session works again, and its transcript says what happened.
    let again = g.run_turn(&doomed.id, "are you back?");
    assert_eq!(again.complete["payload"]["status"], "complete");
    let rows = message_rows(&g.db_path(), &doomed.stored);
    assert!(
        rows.iter().any(|r| r.role == "assistant"
            && r.content
                .as_deref()
                .is_some_and(|c| c.contains("internal error"))),
        "{rows:#?}"
    );
    assert!(
        g.stderr_text().contains("[gateway-panic]"),
        "{}",
        g.stderr_text()
    );
    g.close_stdin();
    assert_eq!(g.wait_exit(secs(10)).code(), Some(0));
}

#[test]
fn a_panicking_tool_ends_its_turn_and_its_call_still_has_a_result() {
    let mut g = Gateway::builder()
        .program(&own_model_example())
        .args(&[])
        .tag("isolate-tool")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "%host_fault {}");
    let failed = g.finish_turn(&s.id, start, secs(10));
    assert_internal_error(&failed);
    // Every tool call of the transcript has its result, so the next model call is valid.
    let rows = message_rows(&g.db_path(), &s.stored);
    let asked = rows.iter().filter(|r| r.tool_calls.is_some()).count();
    let answered = rows.iter().filter(|r| r.role == "tool").count();
    assert_eq!((asked, answered), (1, 1), "{rows:#?}");
    let again = g.run_turn(&s.id, "still there?");
    assert_eq!(again.complete["payload"]["status"], "complete");
    g.close_stdin();
    assert_eq!(g.wait_exit(secs(10)).code(), Some(0));
}
