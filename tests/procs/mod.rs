//! Helpers for the tool / approval / shell.exec tests: the /proc helpers of
//! `tests/common/procfs.rs` (finding the processes a command started by a unique marker in their
//! command line, polling conditions with deadlines), a disposable HOME, and tool-turn helpers over
//! the shared harness in `tests/common`.
#![allow(dead_code)]

pub use crate::common::procfs::*;

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{self, Gateway};

// ---------------------------------------------------------------------------------------------
// Temporary directories (a fake HOME for the approval tests)
// ---------------------------------------------------------------------------------------------

/// A private directory used as the gateway's `HOME`, so that `~` in the (harmless) dangerous
/// commands of the tests points somewhere disposable.
pub fn fake_home() -> common::TempHome {
    common::TempHome::new("home")
}

pub fn make_dir_with_file(p: &Path) {
    std::fs::create_dir_all(p).unwrap();
    std::fs::write(p.join("keep.txt"), b"x").unwrap();
}

// ---------------------------------------------------------------------------------------------
// Turns with tool calls
// ---------------------------------------------------------------------------------------------

/// The `result` of a `tool.complete` payload.
pub fn tool_result(complete: &Value) -> &Value {
    &complete["payload"]["result"]
}

/// The parsed JSON `content` of the `tool` row answering `call_id`.
pub fn tool_row_content(db_path: &Path, stored: &str, call_id: &str) -> Value {
    let rows = common::message_rows(db_path, stored);
    rows.iter()
        .find(|r| r.role == "tool" && r.tool_call_id.as_deref() == Some(call_id))
        .unwrap_or_else(|| panic!("no tool row for {call_id} in {rows:#?}"))
        .json()
}

/// The stored tool row (parsed JSON content) of the call a `tool.complete` event reports.
pub fn stored_tool_result(g: &Gateway, stored: &str, complete: &Value) -> Value {
    let call_id = complete["payload"]["tool_id"]
        .as_str()
        .unwrap_or_else(|| panic!("tool.complete without tool_id: {complete}"));
    tool_row_content(&g.db_path(), stored, call_id)
}

/// Waits for the next `tool.output` of `sid` whose accumulated text contains `needle`
/// (concatenating every `tool.output` of the session seen so far); panics on timeout.
pub fn wait_output_containing(g: &mut Gateway, sid: &str, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut acc = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match g.try_wait_session_event(sid, "tool.output", left) {
            Some(e) => {
                acc.push_str(e["payload"]["text"].as_str().unwrap_or(""));
                if acc.contains(needle) {
                    return;
                }
            }
            None => panic!(
                "no tool.output containing {needle:?} within {timeout:?} (got {acc:?})\n{}",
                g.diag()
            ),
        }
    }
}

/// Waits until a frame matching `pred` has been received (taken or not), without taking it,
/// so that the harness's turn helpers still find it.
pub fn see_frame<F: Fn(&Value) -> bool>(g: &mut Gateway, pred: F, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut idx = 0;
    loop {
        while idx < g.frames.len() {
            if pred(&g.frames[idx]) {
                return;
            }
            idx += 1;
        }
        if !g.pump_until(deadline) && (g.stdout_closed || Instant::now() >= deadline) {
            panic!(
                "expected frame not received within {timeout:?}\n{}",
                g.diag()
            );
        }
    }
}
