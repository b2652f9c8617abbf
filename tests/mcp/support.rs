//! What the MCP tests share: waiting for a server's toolset, reading its `info.mcp_servers`
//! entry, the live output of a call, calling a tool through a whole turn of the offline model (`%NAME {JSON}`).
#![allow(dead_code)]

use crate::common::{Gateway, submit};
use serde_json::Value;
use std::time::{Duration, Instant};

pub const WAIT: Duration = Duration::from_secs(20);

/// Poll `tools.list` until the toolset `mcp-<server>` is there; its tools.
pub fn wait_tools(g: &mut Gateway, server: &str) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = g.call("tools.list", serde_json::json!({}));
        let found = r["toolsets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == format!("mcp-{server}"));
        if let Some(t) = found {
            return t["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string())
                .collect();
        }
        assert!(Instant::now() < deadline, "no mcp-{server} toolset: {r}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The server's entry of `info.mcp_servers`, as a resumed session reports it.
pub fn mcp_status(g: &mut Gateway, name: &str) -> Value {
    let s = g.create_session(serde_json::json!({}));
    let r = g.call(
        "session.resume",
        serde_json::json!({"session_id": s.stored}),
    );
    let list = r["info"]["mcp_servers"].clone();
    list.as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// Poll the server's status until `done` holds for it (or fail after [`WAIT`]).
pub fn wait_status(g: &mut Gateway, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let status = mcp_status(g, name);
        if done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{name}: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The text of the session's `tool.output` events from frame `from` on, concatenated.
pub fn tool_output_from(g: &mut Gateway, sid: &str, from: usize) -> String {
    g.events_of_session_from(sid, from)
        .iter()
        .filter(|e| e["type"] == "tool.output")
        .map(|e| e["payload"]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Call tool `name` through a turn; its `tool.complete` event.
pub fn call_tool(g: &mut Gateway, sid: &str, name: &str, args: Value) -> Value {
    submit(g, sid, &format!("%{name} {args}"));
    let done = g.wait_session_event(sid, "tool.complete", WAIT);
    g.wait_session_event(sid, "message.complete", WAIT);
    done
}
