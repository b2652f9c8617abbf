//! The call log knob (`TUI_GATEWAY_RPC_LOG` / `--rpc-log`), through the real binary: every frame
//! read and written lands in the file as one JSON line, a huge frame is cut with its length, bad
//! input is kept as text, and a log that cannot be written never stops the gateway.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;

fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad log line {l:?}: {e}")))
        .collect()
}

#[test]
fn every_frame_in_and_out_is_logged_in_order() {
    let home = TempHome::new("rpclog");
    let log = home.path.join("calls.jsonl");
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_RPC_LOG", log.to_str().unwrap())
        .start();
    g.ping();
    g.send_line("this is not json");
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":"big","method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100_000)
    );
    g.send_line(&big);
    let answer = g.wait_response(&json!("big"), T);
    assert_eq!(answer["result"]["pong"], true, "{answer}");
    g.close_stdin();
    g.wait_exit(T);

    let lines = log_lines(&log);
    assert_eq!(lines[0]["dir"], "out");
    assert_eq!(lines[0]["frame"]["params"]["type"], "gateway.ready");
    assert!(
        lines
            .iter()
            .all(|l| l["t"].as_f64().is_some_and(|t| t > 1e9))
    );
    let ping_in = lines
        .iter()
        .position(|l| l["dir"] == "in" && l["frame"]["method"] == "ping")
        .expect("the ping is logged");
    let id = lines[ping_in]["frame"]["id"].clone();
    let pong_out = lines
        .iter()
        .position(|l| l["dir"] == "out" && l["frame"]["id"] == id)
        .expect("its answer is logged");
    assert!(ping_in < pong_out);
    assert_eq!(lines[pong_out]["frame"]["result"]["pong"], true);
    assert!(
        lines
            .iter()
            .any(|l| l["dir"] == "in" && l["frame"] == "this is not json"),
        "bad input is logged as text"
    );
    let cut = lines
        .iter()
        .find(|l| l["truncated"] == true)
        .expect("the huge frame is logged truncated");
    assert_eq!(cut["dir"], "in");
    assert_eq!(cut["len"], big.len());
    assert!(cut["frame"].as_str().unwrap().len() < 8 * 1024);
}

#[test]
fn an_unwritable_log_is_reported_and_the_gateway_goes_on() {
    let home = TempHome::new("rpclog-bad");
    let log = home.path.join("no-such-dir").join("calls.jsonl");
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_RPC_LOG", log.to_str().unwrap())
        .start();
    g.ping();
    g.close_stdin();
    g.wait_exit(T);
    let said: Vec<String> = g
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("call log"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(!log.exists());
}
