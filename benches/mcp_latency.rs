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
//! The figure is the ratio of the medians, gateway to baseline (target under 1.2x), with the
//! time added per call. Most of that time is two state.db commits the call waits for: the
//! call is committed (and `tool.start` announced) before its answer is handled, its result
//! is committed before `tool.complete` is announced.
//!
//! ```text
//! cargo bench --bench mcp_latency                  # 300 calls each
//! cargo bench --bench mcp_latency -- --calls 1000
//! ```

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use common::{Client, TempDir, arg_usize, event_type, fmt_duration, gateway_bin, percentile};

const STALL: Duration = Duration::from_secs(30);
const WARMUP: usize = 20;

fn server_js() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fake_server.js")
}

/// The server spoken to directly, handshake done.
fn direct_server() -> Result<Client, String> {
    let mut server = Client::spawn(Command::new("node").arg(server_js()).arg("good"))
        .map_err(|e| format!("cannot start node: {e}"))?;
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "bench", "version": "1"}});
    let id = server
        .send_request("initialize", init)
        .map_err(|e| e.to_string())?;
    server
        .wait_for(Instant::now() + STALL, |f| f.get("id") == Some(&id))
        .map_err(|e| e.to_string())?;
    server
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}))
        .map_err(|e| e.to_string())?;
    Ok(server)
}

fn direct_call(server: &mut Client, i: usize) -> Result<Duration, String> {
    let start = Instant::now();
    let params = json!({"name": "echo", "arguments": {"text": format!("x{i}")},
                        "_meta": {"progressToken": i}});
    let id = server
        .send_request("tools/call", params)
        .map_err(|e| e.to_string())?;
    let answer = server
        .wait_for(start + STALL, |f| f.get("id") == Some(&id))
        .map_err(|e| e.to_string())?;
    if answer["result"]["content"][0]["text"] != format!("echo: x{i}") {
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
    let home = TempDir::new("mcp-latency");
    std::fs::write(
        home.path().join("config.yaml"),
        format!(
            "mcp_servers:\n  bench:\n    command: node\n    args: [\"{}\", \"good\"]\n",
            server_js().display()
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
    let mut server = direct_server()?;
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + calls {
        let d = direct_call(&mut server, i)?;
        let args = format!("{{\"text\": \"x{i}\"}}");
        let g = gateway_call(&mut gw, &session, "mcp__bench__echo", &args)?;
        if i >= WARMUP {
            direct.push(d);
            through.push(g);
        }
    }
    direct.sort();
    through.sort();
    let (d50, g50) = (percentile(&direct, 50.0), percentile(&through, 50.0));
    println!("mcp tools/call round trip, {calls} calls each (medians; p90 in brackets):");
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
