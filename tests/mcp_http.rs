//! Streamable HTTP MCP servers, against a small Node server in `tests/mcp/http_server.js`
//! started by each test: tools listed page by page over POSTs carrying the session id and
//! protocol version, calls through whole turns answered as JSON and as an SSE stream with
//! progress, an interrupted call (notifications/cancelled), the session ended with a DELETE on
//! reload and at shutdown (before the gateway exits); the GET listening stream bringing
//! `list_changed`, reopened with `Last-Event-ID` after a drop, and a cut SSE answer resumed;
//! and answers that break: a connection dropped mid-answer, a wrong content type, an endless
//! SSE stream, a session the server forgot (404: initialised again at once, said so), a
//! listening GET refused with 405 (not asked again), a server gone (failed, restarted).

use crate::common;
use crate::mcp_support;
use crate::procs;

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
    fn start(home: &TempHome, marker: &str, mode: &str) -> HttpServer {
        let log = home.path.join("http.log");
        let script = format!("{}/tests/mcp/http_server.js", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new("node")
            .args([&script, log.to_str().unwrap(), marker, mode])
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

/// The server (in `mode`: "" or "no-get") and a gateway configured with it.
fn start(m: &str, mode: &str) -> (TempHome, HttpServer, Gateway) {
    let home = TempHome::new("mcphttp");
    let server = HttpServer::start(&home, m, mode);
    std::fs::write(home.path.join("config.yaml"), config(&server)).unwrap();
    let g = Gateway::builder().home(&home.path).start();
    (home, server, g)
}

/// A call of the `echo` tool that must work.
fn echo(g: &mut Gateway, sid: &str, n: usize) {
    let done = call_tool(g, sid, "mcp__web__echo", json!({"text": n.to_string()}));
    assert_eq!(tool_error(&done), "", "call {n}: {done}");
}

fn error_of(done: &Value) -> String {
    done["payload"]["error"].as_str().unwrap_or("").to_string()
}

/// Polls `tools.list` until the server's toolset offers `tool`.
fn wait_tool(g: &mut Gateway, tool: &str) {
    let mut tools = Vec::new();
    let found = poll_until(WAIT, || {
        tools = wait_tools(g, "web");
        tools.iter().any(|t| t == tool)
    });
    assert!(found, "no {tool} in {tools:?}");
}

/// The `status.update` texts session `sid` got.
fn status_texts(g: &mut Gateway, sid: &str) -> Vec<String> {
    g.events_of_session(sid)
        .iter()
        .filter(|e| e["type"] == "status.update")
        .filter_map(|e| e["payload"]["text"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn tools_are_listed_and_called_over_streamable_http_and_the_session_ended() {
    let m = marker();
    let (home, server, mut g) = start(&m, "");
    let mut tools = wait_tools(&mut g, "web");
    tools.sort();
    assert_eq!(
        tools,
        [
            "mcp__web__announce",
            "mcp__web__cut",
            "mcp__web__drop",
            "mcp__web__echo",
            "mcp__web__expire",
            "mcp__web__flood",
            "mcp__web__hang",
            "mcp__web__html",
            "mcp__web__resume",
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
    // Calls one after another go on one kept connection, not one connection each.
    let before = server.requests().len();
    for n in 0..4 {
        echo(&mut g, &s.id, n);
    }
    let calls: Vec<Value> = server.requests()[before..]
        .iter()
        .filter(|r| r["method"] == "tools/call")
        .cloned()
        .collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    let first = &calls[0]["connection"];
    assert!(calls.iter().all(|c| &c["connection"] == first), "{calls:?}");
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
    for r in requests.iter().filter(|r| r["http"] == "POST") {
        assert_eq!(r["accept"], "application/json, text/event-stream", "{r}");
    }
    // The listening stream is asked for with a GET that accepts only an event stream.
    let gets: Vec<&Value> = requests.iter().filter(|r| r["http"] == "GET").collect();
    assert!(!gets.is_empty(), "{requests:?}");
    for r in &gets {
        assert_eq!(r["accept"], "text/event-stream", "{r}");
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
fn a_kept_connection_the_server_closed_is_not_used_again() {
    let m = marker();
    let (_home, server, mut g) = start(&m, "short-keepalive");
    wait_tools(&mut g, "web");
    let s = g.create_session(json!({}));
    for n in 0..3 {
        echo(&mut g, &s.id, n);
        let requests = server.requests();
        let call = requests
            .iter()
            .rfind(|r| r["method"] == "tools/call")
            .unwrap();
        let on = call["connection"].clone();
        // The server closes it once idle; the next call must go on another.
        let closed = poll_until(WAIT, || {
            server
                .requests()
                .iter()
                .any(|r| r["http"] == "closed" && r["connection"] == on)
        });
        assert!(closed, "connection {on} never closed: {requests:?}");
    }
    let calls: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|r| r["method"] == "tools/call")
        .collect();
    let mut on: Vec<&Value> = calls.iter().map(|c| &c["connection"]).collect();
    on.dedup();
    assert_eq!(on.len(), 3, "{calls:?}");
    g.ping();
}

#[test]
fn tls_keys_on_an_http_url_are_said_to_have_no_effect_and_the_server_works() {
    let m = marker();
    let home = TempHome::new("mcphttp");
    let server = HttpServer::start(&home, &m, "");
    let keys = "    ssl_verify: /nonexistent/ca.pem\n    client_cert: /nonexistent/me.pem\n";
    std::fs::write(home.path.join("config.yaml"), config(&server) + keys).unwrap();
    let mut g = Gateway::builder().home(&home.path).start();
    assert!(wait_tools(&mut g, "web").contains(&"mcp__web__echo".to_string()));
    let said = g.stderr_with("have no effect", T);
    assert!(
        said.contains(
            "MCP server 'web': ssl_verify and client_cert have no effect on an http:// URL"
        ),
        "{said}"
    );
}

#[test]
fn broken_answers_fail_their_call_and_a_forgotten_session_is_initialised_again() {
    let m = marker();
    let (_home, mut server, mut g) = start(&m, "no-get");
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
    // The status says what happened: a new session at once, not a restart after a wait.
    let said = status_texts(&mut g, &s.id);
    let expired: Vec<&String> = said.iter().filter(|t| t.contains("HTTP 404")).collect();
    assert_eq!(expired.len(), 1, "{said:?}");
    assert!(
        expired[0].contains("starting a new session now"),
        "{said:?}"
    );
    assert!(!expired[0].contains("restarting in"), "{said:?}");
    // The listening GET was refused with 405: asked once per session, never again.
    let requests = server.requests();
    let count = |http: &str, method: Option<&str>| {
        requests
            .iter()
            .filter(|r| r["http"] == http && method.is_none_or(|m| r["method"] == m))
            .count()
    };
    assert_eq!(count("POST", Some("initialize")), 2, "{requests:?}");
    assert_eq!(count("GET", None), 2, "{requests:?}");
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

#[test]
fn the_listening_stream_brings_list_changed_and_resumes_from_the_last_event_id() {
    let m = marker();
    let (_home, server, mut g) = start(&m, "");
    wait_tools(&mut g, "web");
    let s = g.create_session(json!({}));
    // The server adds a tool and says so on the listening stream only: it becomes callable.
    let done = call_tool(&mut g, &s.id, "mcp__web__announce", json!({}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        "announced"
    );
    wait_tool(&mut g, "mcp__web__late");
    let done = call_tool(&mut g, &s.id, "mcp__web__late", json!({}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        "late tool here"
    );
    // The server drops the stream, then adds a tool while it is down: the gateway reopens
    // the stream with the last event id it saw, and the server replays what came after it.
    let done = call_tool(&mut g, &s.id, "mcp__web__cut", json!({}));
    assert_eq!(stored_tool_result(&g, &s.stored, &done)["result"], "cut");
    wait_tool(&mut g, "mcp__web__after_cut");
    let done = call_tool(&mut g, &s.id, "mcp__web__after_cut", json!({}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        "after the cut"
    );
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r["http"] == "GET" && r["last_event_id"] == "L-1"),
        "{requests:?}"
    );
    // An SSE answer cut after an event with an id is resumed by a GET from that id; the
    // answer arrives on it.
    let from = g.frames.len();
    let done = call_tool(&mut g, &s.id, "mcp__web__resume", json!({}));
    let result = stored_tool_result(&g, &s.stored, &done)["result"].clone();
    let resumed_from = result
        .as_str()
        .and_then(|r| r.strip_prefix("resumed after "))
        .unwrap_or_else(|| panic!("{done} {result}"))
        .to_string();
    assert!(
        tool_output_from(&mut g, &s.id, from).contains("before the cut"),
        "the event before the cut streamed"
    );
    // The resume waited out the `retry: 300` the cut stream gave (the server's own clock).
    let requests = server.requests();
    let at = |http: &str| {
        requests
            .iter()
            .find(|r| r["http"] == http && r["last_event_id"] == resumed_from.as_str())
            .and_then(|r| r["at"].as_u64())
            .unwrap_or_else(|| panic!("no {http} from {resumed_from}: {requests:?}"))
    };
    let waited = at("GET").saturating_sub(at("cut"));
    assert!(
        waited >= 300,
        "resumed {waited} ms after the cut: {requests:?}"
    );
}

#[test]
fn the_shutdown_waits_for_the_session_delete() {
    let m = marker();
    let (_home, server, mut g) = start(&m, "");
    wait_tools(&mut g, "web");
    g.close_stdin();
    g.wait_exit(WAIT);
    // Read once the gateway is gone: it waited for the (slow) answer to its DELETE.
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r["http"] == "DELETE answered" && r["session"] == "sess-1"),
        "{requests:?}"
    );
}
