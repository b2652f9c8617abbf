//! Streamable HTTP MCP servers, against a small Node server in `tests/mcp/http_server.js`
//! started by each test: tools listed page by page over POSTs carrying the session id and
//! protocol version, calls through whole turns answered as JSON and as an SSE stream with
//! progress, an interrupted call (notifications/cancelled), the session ended with a DELETE on
//! reload; and answers that break: a connection dropped mid-answer, a wrong content type, an endless SSE stream, a session the server
//! forgot (404: initialised again), a server gone (failed, restarted).

mod common;
#[path = "mcp/support.rs"]
mod mcp_support;
mod procs;

use common::*;
use mcp_support::*;
use procs::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The Node server, stopped on drop; it logs each request it gets to `log`.
struct HttpServer {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl HttpServer {
    fn start(home: &TempHome, marker: &str) -> HttpServer {
        let log = home.path.join("http.log");
        let script = format!("{}/tests/mcp/http_server.js", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new("node")
            .args([&script, log.to_str().unwrap(), marker])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the server prints its port");
        HttpServer { child, port, log }
    }

    /// The requests it got so far.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn config(server: &HttpServer) -> String {
    format!(
        "mcp_servers:\n  web:\n    url: http://127.0.0.1:{}/mcp\n    headers:\n      \
         Authorization: Bearer t0k\n    connect_timeout: 10\n",
        server.port
    )
}

fn start(m: &str) -> (TempHome, HttpServer, Gateway) {
    let home = TempHome::new("mcphttp");
    let server = HttpServer::start(&home, m);
    std::fs::write(home.path.join("config.yaml"), config(&server)).unwrap();
    let g = Gateway::builder().home(&home.path).start();
    (home, server, g)
}

fn error_of(done: &Value) -> String {
    done["payload"]["error"].as_str().unwrap_or("").to_string()
}

#[test]
fn tools_are_listed_and_called_over_streamable_http_and_the_session_ended() {
    let m = marker();
    let (home, server, mut g) = start(&m);
    let mut tools = wait_tools(&mut g, "web");
    tools.sort();
    assert_eq!(
        tools,
        [
            "mcp__web__drop",
            "mcp__web__echo",
            "mcp__web__expire",
            "mcp__web__flood",
            "mcp__web__hang",
            "mcp__web__html",
            "mcp__web__slow"
        ]
    );
    let status = mcp_status(&mut g, "web");
    assert_eq!(
        (&status["connected"], &status["transport"]),
        (&json!(true), &json!("http")),
        "{status}"
    );
    let s = g.create_session(json!({}));
    let done = call_tool(&mut g, &s.id, "mcp__web__echo", json!({"text": "hello"}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        format!("echo: hello{m} (session 1)")
    );
    // An SSE answer: progress notifications stream as live output before the result.
    let from = g.frames.len();
    let done = call_tool(&mut g, &s.id, "mcp__web__slow", json!({}));
    let outputs = tool_output_from(&mut g, &s.id, from);
    assert!(outputs.contains("step 2"), "{outputs}");
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        "slow done"
    );
    // An interrupted call ends at once; the server is told with notifications/cancelled.
    submit(&mut g, &s.id, "%mcp__web__hang {}");
    g.wait_session_event(&s.id, "tool.output", WAIT);
    g.call("session.interrupt", json!({"session_id": s.id}));
    let done = g.wait_session_event(&s.id, "tool.complete", WAIT);
    assert!(error_of(&done).contains("interrupted"), "{done}");
    g.wait_session_event(&s.id, "message.complete", WAIT);
    assert!(
        poll_until(WAIT, || server.requests().iter().any(|r| r["method"]
            == "notifications/cancelled"
            && r["request"].is_u64())),
        "no cancel: {:?}",
        server.requests()
    );
    // Every POST asks for both answer kinds; after initialize each carries the session and
    // the negotiated version (the server refuses them otherwise).
    let requests = server.requests();
    assert_eq!(requests[0]["method"], "initialize");
    assert!(requests[0]["session"].is_null(), "{requests:?}");
    for r in &requests {
        assert_eq!(r["accept"], "application/json, text/event-stream", "{r}");
    }
    for r in &requests[1..] {
        assert_eq!(
            (&r["session"], &r["version"]),
            (&json!("sess-1"), &json!("2025-06-18")),
            "{r}"
        );
    }
    // Dropped by a reload: the session is ended with a DELETE.
    std::fs::write(home.path.join("config.yaml"), "mcp_servers: {}\n").unwrap();
    g.call("reload.mcp", json!({"confirm": true}));
    assert!(
        poll_until(WAIT, || server
            .requests()
            .iter()
            .any(|r| r["http"] == "DELETE" && r["session"] == "sess-1")),
        "no DELETE: {:?}",
        server.requests()
    );
}

#[test]
fn broken_answers_fail_their_call_and_a_forgotten_session_is_initialised_again() {
    let m = marker();
    let (_home, mut server, mut g) = start(&m);
    wait_tools(&mut g, "web");
    let s = g.create_session(json!({}));
    let done = call_tool(&mut g, &s.id, "mcp__web__drop", json!({}));
    assert!(
        error_of(&done).contains("closed the connection in the middle of the answer"),
        "{done}"
    );
    let done = call_tool(&mut g, &s.id, "mcp__web__html", json!({}));
    assert!(
        error_of(&done).contains("content type \"text/html\""),
        "{done}"
    );
    let done = call_tool(&mut g, &s.id, "mcp__web__flood", json!({}));
    assert!(error_of(&done).contains("answer passed 64 MiB"), "{done}");
    // None of that failed the server.
    let done = call_tool(&mut g, &s.id, "mcp__web__echo", json!({"text": "still"}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        format!("echo: still{m} (session 1)")
    );
    // The server forgets the session: the next request gets 404, the gateway initialises
    // again and the calls work in the new session.
    let done = call_tool(&mut g, &s.id, "mcp__web__expire", json!({}));
    assert!(error_of(&done).contains("without answering"), "{done}");
    let done = call_tool(&mut g, &s.id, "mcp__web__echo", json!({"text": "x"}));
    assert!(
        error_of(&done).contains("ended the MCP session (HTTP 404)"),
        "{done}"
    );
    wait_status(&mut g, "web", |s| s["connected"] == json!(true));
    let done = call_tool(&mut g, &s.id, "mcp__web__echo", json!({"text": "again"}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        format!("echo: again{m} (session 2)")
    );
    // The server gone: the call fails, the server is reported failed.
    server.stop();
    let done = call_tool(&mut g, &s.id, "mcp__web__echo", json!({"text": "gone"}));
    assert!(error_of(&done).contains("cannot connect"), "{done}");
    let status = wait_status(&mut g, "web", |s| s["status"] == "failed");
    assert!(
        status["error"].as_str().unwrap().contains("cannot connect"),
        "{status}"
    );
    g.ping();
}
