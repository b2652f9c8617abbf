//! What the gateway adds per MCP `tools/call` round trip.
//!
//! One stdio MCP server (`tests/mcp/fake_server.js`, Node) with a trivial `echo` tool. Measured
//! in the same run, interleaved call by call:
//!
//! - **baseline**: this process starts its own copy of the server, does the handshake, and
//!   sends the same `tools/call` straight down its pipe, timed from writing the request to
//!   reading the answer (the server's own round trip: Node's JSON and pipe costs);
//! - **gateway**: the release gateway with the server in `config.yaml`, one turn of the offline
//!   model per call (`%mcp__bench__echo {…}`), timed from reading `tool.start` to reading
//!   `tool.complete` on its stdout: the queued request written to the server, its answer read
//!   from the runner's pipe, the job stepped and the result announced.
//!
//! `--server everything` measures the same against the reference server's own `echo` tool
//! (`@modelcontextprotocol/server-everything`, installed under `tests/mcp/node_modules` by
//! `.ci/run`): a server built on the MCP SDK, which validates its input and output.
//!
//! The figure is the ratio of the medians, gateway to baseline (target under 1.2x), with the
//! time added per call. Most of that time is two state.db commits the call waits for: the
//! call is committed (and `tool.start` announced) before its answer is handled, its result
//! is committed before `tool.complete` is announced.
//!
//! ```text
//! cargo bench --bench mcp_latency                  # 300 calls each
//! cargo bench --bench mcp_latency -- --calls 1000
//! cargo bench --bench mcp_latency -- --calls 1000 --server everything
//! ```

// The bench reads and writes its own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use common::{
    Client, TempDir, arg_string, arg_usize, event_type, fmt_duration, gateway_bin, percentile,
};

const STALL: Duration = Duration::from_secs(30);
const WARMUP: usize = 20;

/// The echo server spoken to: how it is started, its tool, its arguments and its answer.
struct Server {
    command: Vec<String>,
    tool: &'static str,
    argument: &'static str,
    answer_prefix: &'static str,
}

impl Server {
    /// `fake` (the test suite's Node server, no packages) or `everything` (the reference server).
    fn named(name: &str) -> Result<Server, String> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
        match name {
            "fake" => Ok(Server {
                command: vec![path(&dir.join("fake_server.js")), "good".into()],
                tool: "echo",
                argument: "text",
                answer_prefix: "echo: ",
            }),
            "everything" => {
                let js =
                    dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
                if !js.is_file() {
                    return Err(format!(
                        "{} is missing: run `npm ci` in tests/mcp (.ci/run does)",
                        js.display()
                    ));
                }
                Ok(Server {
                    command: vec![path(&js), "stdio".into()],
                    tool: "echo",
                    argument: "message",
                    answer_prefix: "Echo: ",
                })
            }
            other => Err(format!("--server {other}: fake or everything")),
        }
    }

    fn arguments(&self, i: usize) -> serde_json::Value {
        json!({ self.argument: format!("x{i}") })
    }
}

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// The server spoken to directly, handshake done.
fn direct_server(server: &Server) -> Result<Client, String> {
    let mut client = Client::spawn(Command::new("node").args(&server.command))
        .map_err(|e| format!("cannot start node: {e}"))?;
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "bench", "version": "1"}});
    let id = client
        .send_request("initialize", init)
        .map_err(|e| e.to_string())?;
    client
        .wait_for(Instant::now() + STALL, |f| f.get("id") == Some(&id))
        .map_err(|e| e.to_string())?;
    client
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}))
        .map_err(|e| e.to_string())?;
    Ok(client)
}

fn direct_call(client: &mut Client, server: &Server, i: usize) -> Result<Duration, String> {
    let start = Instant::now();
    let params = json!({"name": server.tool, "arguments": server.arguments(i),
                        "_meta": {"progressToken": i}});
    let id = client
        .send_request("tools/call", params)
        .map_err(|e| e.to_string())?;
    let answer = client
        .wait_for(start + STALL, |f| f.get("id") == Some(&id))
        .map_err(|e| e.to_string())?;
    if answer["result"]["content"][0]["text"] != format!("{}x{i}", server.answer_prefix) {
        return Err(format!("unexpected answer: {answer}"));
    }
    Ok(start.elapsed())
}

/// One turn calling `tool` with `args`; `tool.start` to `tool.complete` as the client reads them.
fn gateway_call(
    gw: &mut Client,
    session: &str,
    tool: &str,
    args: &str,
) -> Result<Duration, String> {
    let text = format!("%{tool} {args}");
    gw.send_request(
        "prompt.submit",
        json!({"session_id": session, "text": text}),
    )
    .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + STALL;
    gw.wait_for(deadline, |f| event_type(f) == Some("tool.start"))
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let done = gw
        .wait_for(deadline, |f| event_type(f) == Some("tool.complete"))
        .map_err(|e| e.to_string())?;
    let took = start.elapsed();
    if done["params"]["payload"]["error"].is_string() {
        return Err(format!("the call failed: {done}"));
    }
    gw.wait_for(deadline, |f| event_type(f) == Some("message.complete"))
        .map_err(|e| e.to_string())?;
    Ok(took)
}

fn run() -> Result<(), String> {
    let calls = arg_usize("--calls", 300);
    let server_name = arg_string("--server", "fake");
    let server = Server::named(&server_name)?;
    let home = TempDir::new("mcp-latency");
    let args: Vec<String> = server
        .command
        .iter()
        .map(|a| serde_json::Value::from(a.as_str()).to_string())
        .collect();
    std::fs::write(
        home.path().join("config.yaml"),
        format!(
            "mcp_servers:\n  bench:\n    command: node\n    args: [{}]\n",
            args.join(", ")
        ),
    )
    .map_err(|e| e.to_string())?;
    let mut gw = common::spawn_gateway(&gateway_bin(), home.path())?;
    let id = gw
        .send_request("session.create", json!({"cols": 100}))
        .map_err(|e| e.to_string())?;
    let created = gw
        .wait_response(&id, Instant::now() + STALL, |_, _| {})
        .map_err(|e| e.to_string())?;
    let session = created["result"]["session_id"]
        .as_str()
        .ok_or_else(|| format!("session.create failed: {created}"))?
        .to_string();
    // The server connects after gateway.ready: wait until its tool is offered.
    let deadline = Instant::now() + STALL;
    loop {
        let id = gw
            .send_request("tools.list", json!({}))
            .map_err(|e| e.to_string())?;
        let r = gw
            .wait_response(&id, deadline, |_, _| {})
            .map_err(|e| e.to_string())?;
        if r.to_string().contains("mcp__bench__echo") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the server's tools never appeared: {r}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut direct_client = direct_server(&server)?;
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + calls {
        let d = direct_call(&mut direct_client, &server, i)?;
        let args = server.arguments(i).to_string();
        let g = gateway_call(&mut gw, &session, "mcp__bench__echo", &args)?;
        if i >= WARMUP {
            direct.push(d);
            through.push(g);
        }
    }
    direct.sort();
    through.sort();
    let (d50, g50) = (percentile(&direct, 50.0), percentile(&through, 50.0));
    println!(
        "mcp tools/call round trip, {calls} calls each, {server_name} server (medians; p90 in brackets):"
    );
    println!(
        "  server's own (its pipe):  {} [{}]",
        fmt_duration(d50),
        fmt_duration(percentile(&direct, 90.0))
    );
    println!(
        "  through the gateway:      {} [{}]",
        fmt_duration(g50),
        fmt_duration(percentile(&through, 90.0))
    );
    println!(
        "  added per call: {}; ratio {:.2}x (target < 1.2x)",
        fmt_duration(g50.saturating_sub(d50)),
        g50.as_secs_f64() / d50.as_secs_f64()
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("mcp_latency: {e}");
        std::process::exit(1);
    }
}
