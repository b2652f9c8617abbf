//! What the MCP tests share: waiting for a server's toolset, reading its `info.mcp_servers`
//! entry, calling a tool through a whole turn of the offline model (`%NAME {JSON}`). Every
//! wait is the suite's `T` through `poll_until`.
#![allow(dead_code)]

use crate::common::procfs::poll_until;
use crate::common::{Gateway, T, submit};
use serde_json::{Value, json};
use std::time::Duration;

/// The suite's wait (`tests/common`'s `T`), by the name `mcp_http.rs` uses.
pub const WAIT: Duration = T;

/// The toolset `mcp-<server>` of `tools.list`, once it is there: its tools.
pub fn wait_tools(g: &mut Gateway, server: &str) -> Vec<String> {
    let mut last = Value::Null;
    let mut tools = Vec::new();
    let found = poll_until(T, || {
        last = g.call("tools.list", json!({}));
        let set = last["toolsets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == format!("mcp-{server}"));
        if let Some(set) = set {
            tools = set["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect();
        }
        set.is_some()
    });
    assert!(found, "no mcp-{server} toolset: {last}");
    tools
}

/// Server `name` as the banner of session `stored` reads it (`info.mcp_servers`).
fn server_status(g: &mut Gateway, stored: &str, name: &str) -> Value {
    let r = g.call("session.resume", json!({"session_id": stored}));
    let list = r["info"]["mcp_servers"].clone();
    list.as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// The server's entry of `info.mcp_servers`, as a new session reports it.
pub fn mcp_status(g: &mut Gateway, name: &str) -> Value {
    let stored = g.create_session(json!({})).stored;
    server_status(g, &stored, name)
}

/// Polls the server's status until `done` holds for it; that status.
pub fn wait_status(g: &mut Gateway, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let stored = g.create_session(json!({})).stored;
    let mut last = Value::Null;
    let reached = poll_until(T, || {
        last = server_status(g, &stored, name);
        done(&last)
    });
    assert!(reached, "{name}: {last}");
    last
}

/// Call tool `name` through a turn; its `tool.complete` event.
pub fn call_tool(g: &mut Gateway, sid: &str, name: &str, args: Value) -> Value {
    submit(g, sid, &format!("%{name} {args}"));
    let done = g.wait_session_event(sid, "tool.complete", T);
    g.wait_session_event(sid, "message.complete", T);
    done
}

/// The error text of a `tool.complete` (empty when it succeeded).
pub fn tool_error(done: &Value) -> String {
    done["payload"]["error"].as_str().unwrap_or("").to_string()
}

/// The `tool.output` texts of session `sid` from frame `start` on, joined.
pub fn tool_output_from(g: &mut Gateway, sid: &str, start: usize) -> String {
    g.events_of_session_from(sid, start)
        .iter()
        .filter(|e| e["type"] == "tool.output")
        .filter_map(|e| e["payload"]["text"].as_str().map(str::to_string))
        .collect()
}
