//! MCP servers over stdio, against a small Node server in `tests/mcp/fake_server.js`: tools
//! listed page by page and offered as `mcp__<server>__<tool>`, calls through whole turns of
//! the offline model (`%NAME {JSON}`), progress streamed as `tool.output`, a server that exits
//! mid-call (the call ends with a tool error, the server is restarted), garbage on stdout and
//! endless stderr, a server that never answers `initialize`, and SIGKILL of the gateway with
//! servers running (none survives).

mod common;
#[path = "mcp/support.rs"]
mod mcp_support;
mod procs;

use common::*;
use mcp_support::*;
use procs::*;
use serde_json::json;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn server_js() -> String {
    format!("{}/tests/mcp/fake_server.js", env!("CARGO_MANIFEST_DIR"))
}

/// A home whose config.yaml lists `servers` as `(name, mode, extra yaml lines)`.
fn home_with(servers: &[(&str, &str, &str)], marker: &str) -> TempHome {
    let home = TempHome::new("mcp");
    let mut yaml = String::from("mcp_servers:\n");
    for (name, mode, extra) in servers {
        yaml.push_str(&format!(
            "  {name}:\n    command: node\n    args: [\"{}\", \"{mode}\", \"{marker}\"]\n{extra}",
            server_js()
        ));
    }
    std::fs::write(home.path.join("config.yaml"), yaml).unwrap();
    home
}

#[test]
fn tools_are_listed_offered_and_called_through_turns_with_progress() {
    let m = marker();
    let home = home_with(
        &[("fake", "good", "    tools:\n      exclude: [weird]\n")],
        &m,
    );
    let mut g = Gateway::builder().home(&home.path).start();
    let tools = wait_tools(&mut g, "fake");
    assert_eq!(
        tools,
        ["mcp__fake__die", "mcp__fake__echo", "mcp__fake__slow"]
    );
    let status = mcp_status(&mut g, "fake");
    assert_eq!(
        (&status["connected"], &status["tools"], &status["transport"]),
        (&json!(true), &json!(3), &json!("stdio")),
        "{status}"
    );
    let s = g.create_session(json!({}));
    let done = call_tool(&mut g, &s.id, "mcp__fake__echo", json!({"text": "hello"}));
    let stored = stored_tool_result(&g, &s.stored, &done);
    assert_eq!(stored["result"], format!("echo: hello{m}"), "{stored}");
    assert_eq!(stored["structuredContent"]["text"], "hello");
    // Progress notifications stream as live output before the result.
    let start = g.frames.len();
    let done = call_tool(&mut g, &s.id, "mcp__fake__slow", json!({}));
    let outputs = tool_output_from(&mut g, &s.id, start);
    assert!(outputs.contains("step 2"), "{outputs}");
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        "slow done"
    );
}

#[test]
fn a_server_that_exits_mid_call_fails_the_call_and_is_restarted() {
    let m = marker();
    let home = home_with(&[("fake", "good", "")], &m);
    let mut g = Gateway::builder().home(&home.path).start();
    wait_tools(&mut g, "fake");
    let s = g.create_session(json!({}));
    let done = call_tool(&mut g, &s.id, "mcp__fake__die", json!({}));
    let error = done["payload"]["error"].as_str().unwrap_or("").to_string();
    assert!(
        error.contains("MCP server 'fake' exited (status 7)"),
        "{done}"
    );
    g.wait_session_event(&s.id, "status.update", T);
    // Restarted after the backoff: calls work again.
    let deadline = Instant::now() + T;
    while mcp_status(&mut g, "fake")["connected"] != json!(true) {
        assert!(Instant::now() < deadline, "not restarted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = call_tool(&mut g, &s.id, "mcp__fake__echo", json!({"text": "again"}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        format!("echo: again{m}")
    );
}

#[test]
fn bad_servers_are_contained_and_none_outlives_a_killed_gateway() {
    let m = marker();
    let _r = Reaper(m.clone());
    let home = home_with(
        &[
            ("noisy", "garbage", ""),
            ("mute", "mute", "    connect_timeout: 0.3\n"),
        ],
        &m,
    );
    let mut g = Gateway::builder().home(&home.path).start();
    // Garbage on stdout, an unknown id and endless stderr: its tools still work, the schema
    // that is not one is offered as an empty object schema.
    let tools = wait_tools(&mut g, "noisy");
    assert!(
        tools.contains(&"mcp__noisy__weird".to_string()),
        "{tools:?}"
    );
    let s = g.create_session(json!({}));
    let done = call_tool(&mut g, &s.id, "mcp__noisy__echo", json!({"text": "x"}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        format!("echo: x{m}")
    );
    let deadline = Instant::now() + T;
    loop {
        let mute = mcp_status(&mut g, "mute");
        if mute["status"] == "failed" {
            assert!(
                mute["error"].as_str().unwrap().contains("handshake"),
                "{mute}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "mute never failed: {mute}");
        std::thread::sleep(Duration::from_millis(50));
    }
    g.ping();
    wait_for_procs("node", &m, 1, T);
    g.signal(libc::SIGKILL);
    assert_none_left(&m, T, "after the gateway's SIGKILL");
}

#[test]
fn an_interrupted_call_ends_at_once_and_reload_touches_only_changed_servers() {
    let m = marker();
    let _r = Reaper(m.clone());
    let home = home_with(&[("keep", "good", "")], &m);
    let mut g = Gateway::builder().home(&home.path).start();
    wait_tools(&mut g, "keep");
    let s = g.create_session(json!({}));
    submit(&mut g, &s.id, "%mcp__keep__slow {\"ms\": 600000}");
    g.wait_session_event(&s.id, "tool.output", T);
    g.call("session.interrupt", json!({"session_id": s.id}));
    let done = g.wait_session_event(&s.id, "tool.complete", T);
    assert_eq!(done["payload"]["error"], "interrupted", "{done}");
    g.wait_session_event(&s.id, "message.complete", T);
    let before = wait_for_procs("node", &m, 1, T);
    // Add a server: the reload starts it and leaves the unchanged one running.
    let yaml = std::fs::read_to_string(home.path.join("config.yaml")).unwrap();
    let added = format!(
        "{yaml}  added:\n    command: node\n    args: [\"{}\", \"good\", \"{m}\"]\n",
        server_js()
    );
    std::fs::write(home.path.join("config.yaml"), added).unwrap();
    let rev = g.call("config.get", json!({"key": "mtime"}))["mcp_rev"].clone();
    let r = g.call("reload.mcp", json!({"session_id": s.id, "confirm": true}));
    assert_eq!(
        (&r["status"], &r["changed"]),
        (&json!("reloaded"), &json!(["added"])),
        "{r}"
    );
    wait_tools(&mut g, "added");
    assert_ne!(
        g.call("config.get", json!({"key": "mtime"}))["mcp_rev"],
        rev
    );
    let after = procs_matching(&m);
    assert!(
        after.iter().any(|p| p.pid == before[0].pid),
        "the unchanged server was restarted:\n{}",
        describe(&after)
    );
    // The interrupted call left the server working.
    let done = call_tool(&mut g, &s.id, "mcp__keep__echo", json!({"text": "still"}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        format!("echo: still{m}")
    );
}
