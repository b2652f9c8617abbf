//! Approvals of dangerous commands (PROTOCOL.md, "Approvals"), over the real binary: the event
//! form answered by `approval.respond`, the server-request form after `client.capabilities`,
//! deny, error answers, timeout, interrupt while waiting, `session` and `always` (across a
//! restart), and the hard refusals that never run.
//!
//! Safety: every dangerous command here is harmless when it runs. The gateway gets a private
//! `HOME`, so `rm -rf ~/scratch-…` deletes a scratch directory of the test; the /etc write
//! targets a directory that does not exist; the hard refusals are guarded by `exit 0` before the
//! refused part and only `touch` a marker file under the private HOME if they ever ran.

use crate::common;
use crate::procs;

use common::*;
use procs::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

const CHOICES: [&str; 4] = ["once", "session", "always", "deny"];

fn gateway_with_home(home: &Path) -> GatewayBuilder {
    Gateway::builder().env("HOME", home.to_str().unwrap())
}

/// A scratch directory (with a file in it) under the fake HOME; returns its path and the
/// `~/…` spelling used in commands.
fn scratch(home: &Path, name: &str) -> (PathBuf, String) {
    let p = home.join(name);
    make_dir_with_file(&p);
    (p, format!("~/{name}"))
}

/// A prompt running a dangerous but harmless command: `rm -rf` of a scratch dir under HOME.
struct RmPrompt {
    dir: PathBuf,
    cmd: String,
    /// Frame index where the turn's frames start.
    start: usize,
}

fn submit_rm(g: &mut Gateway, sid: &str, home: &Path, name: &str) -> RmPrompt {
    let (dir, tilde) = scratch(home, name);
    let cmd = format!("rm -rf {tilde}");
    let start = submit(g, sid, &format!("$ {cmd}"));
    RmPrompt { dir, cmd, start }
}

fn check_request_payload(p: &Value, command: &str) -> String {
    let rid = p["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("approval without request_id: {p}"))
        .to_string();
    assert!(!rid.is_empty(), "{p}");
    assert_eq!(p["command"], command, "{p}");
    assert!(
        p["description"]
            .as_str()
            .map(|d| !d.is_empty())
            .unwrap_or(false),
        "approval without description: {p}"
    );
    assert_eq!(p["choices"], json!(CHOICES), "{p}");
    rid
}

/// Waits for the event-form request of `sid`; checks its payload; returns its request_id.
fn wait_approval_event(g: &mut Gateway, sid: &str, command: &str) -> String {
    let e = g.wait_session_event(sid, "approval.request", T);
    check_request_payload(&e["payload"], command)
}

fn is_server_request(f: &Value) -> bool {
    f.get("method").and_then(|m| m.as_str()) == Some("approval")
        && f.get("id").map(|i| !i.is_null()).unwrap_or(false)
}

/// Waits for an `approval` server request; checks its shape; returns (srq id, request_id).
fn wait_server_request(g: &mut Gateway, sid: &str, command: &str) -> (Value, String) {
    let f = g
        .wait_frame(is_server_request, T)
        .unwrap_or_else(|| panic!("no approval server request\n{}", g.diag()));
    assert_eq!(f["jsonrpc"], "2.0", "{f}");
    let id = f["id"].clone();
    assert!(
        id.as_str().map(|s| s.starts_with("srq-")).unwrap_or(false),
        "server request id must be a string srq-…: {f}"
    );
    let p = &f["params"];
    assert_eq!(p["session_id"], sid, "{f}");
    let rid = check_request_payload(p, command);
    (id, rid)
}

fn respond(g: &mut Gateway, sid: &str, choice: &str, request_id: Option<&str>) -> i64 {
    let mut params = json!({"session_id": sid, "choice": choice});
    if let Some(r) = request_id {
        params["request_id"] = json!(r);
    }
    let r = g.call("approval.respond", params);
    r["resolved"]
        .as_i64()
        .unwrap_or_else(|| panic!("approval.respond result without integer resolved: {r}"))
}

fn approval_frames_since(g: &mut Gateway, start: usize) -> Vec<Value> {
    g.drain_available();
    g.frames[start..]
        .iter()
        .filter(|f| event_type(f) == Some("approval.request") || is_server_request(f))
        .cloned()
        .collect()
}

fn assert_denied(c: &Value) {
    let r = tool_result(c);
    assert_eq!(r["error"], "denied", "denied tool result: {c}");
    assert!(
        r["output"]
            .as_str()
            .unwrap_or("")
            .starts_with("Command not run"),
        "denied tool result output: {c}"
    );
}

fn assert_ran_ok(c: &Value) {
    let r = tool_result(c);
    assert_eq!(r["exit_code"], 0, "{c}");
    assert!(r["error"].is_null(), "{c}");
}

/// Runs `$ cmd` on `sid`, answers its event-form approval with `choice` naming the request;
/// the command runs and the turn ends.
fn approve_next(g: &mut Gateway, sid: &str, cmd: &str, choice: &str) {
    let start = submit(g, sid, &format!("$ {cmd}"));
    let rid = wait_approval_event(g, sid, cmd);
    assert_eq!(respond(g, sid, choice, Some(&rid)), 1);
    assert_ran_ok(&g.wait_session_event(sid, "tool.complete", T));
    g.finish_turn(sid, start, T);
}

/// Runs `$ cmd` on `sid`, which must ask; denies it without naming the request; the turn ends.
fn deny_next(g: &mut Gateway, sid: &str, cmd: &str) {
    let start = submit(g, sid, &format!("$ {cmd}"));
    wait_approval_event(g, sid, cmd);
    assert_eq!(respond(g, sid, "deny", None), 1);
    assert_denied(&g.wait_session_event(sid, "tool.complete", T));
    g.finish_turn(sid, start, T);
}

/// Runs `$ cmd` on `sid`, which must run without an answer; returns the frame index the turn
/// started at (for [`approval_frames_since`]).
fn run_unasked(g: &mut Gateway, sid: &str, cmd: &str) -> usize {
    let start = submit(g, sid, &format!("$ {cmd}"));
    assert_ran_ok(&g.wait_session_event(sid, "tool.complete", T));
    g.finish_turn(sid, start, T);
    start
}

/// The command is still pending: no tool.complete within a short window.
fn assert_still_pending(g: &mut Gateway, sid: &str) {
    assert!(
        g.try_wait_session_event(sid, "tool.complete", ms(300))
            .is_none(),
        "the tool completed before the approval was answered\n{}",
        g.diag()
    );
}

// ---------------------------------------------------------------------------------------------

#[test]
fn event_form_once_runs_the_command_and_asks_again_next_time() {
    let m = marker();
    let home = fake_home();
    let mut g = gateway_with_home(&home.path).start();
    let s = g.create_session(json!({}));
    let RmPrompt { dir, cmd, start } =
        submit_rm(&mut g, &s.id, &home.path, &format!("scratch-{m}"));
    let rid = wait_approval_event(&mut g, &s.id, &cmd);
    assert_still_pending(&mut g, &s.id);
    assert!(dir.exists(), "the command ran before it was approved");
    assert_eq!(respond(&mut g, &s.id, "once", Some(&rid)), 1);
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_ran_ok(&c);
    assert!(!dir.exists(), "approved command did not run");
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(turn.complete["payload"]["status"], "complete");
    let ty = types(&turn.events);
    assert!(
        !ty.iter().any(|t| t == "request.cancel"),
        "answered request withdrawn: {ty:?}"
    );
    // only the event form: no server request without client.capabilities
    assert!(
        !g.frames[start..].iter().any(is_server_request),
        "server request sent to a client that did not declare server_requests"
    );
    let ai = ty.iter().position(|t| t == "approval.request").unwrap();
    let ci = ty.iter().position(|t| t == "tool.complete").unwrap();
    assert!(ai < ci, "{ty:?}");

    // `once` approves only that call: the same command asks again. Answer without request_id.
    make_dir_with_file(&dir);
    let start = submit(&mut g, &s.id, &format!("$ {cmd}"));
    wait_approval_event(&mut g, &s.id, &cmd);
    assert_eq!(respond(&mut g, &s.id, "deny", None), 1);
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_denied(&c);
    g.finish_turn(&s.id, start, T);
    assert!(dir.exists(), "denied command ran");
}

#[test]
fn server_request_form_after_client_capabilities() {
    let m = marker();
    let home = fake_home();
    let mut g = gateway_with_home(&home.path).start();
    let caps = g.call("client.capabilities", json!({"server_requests": true}));
    assert!(
        caps["server_requests"]
            .as_array()
            .map(|a| a.iter().any(|x| x == "approval"))
            .unwrap_or(false),
        "client.capabilities result must list approval: {caps}"
    );
    let s = g.create_session(json!({}));
    let RmPrompt { dir, cmd, start } = submit_rm(&mut g, &s.id, &home.path, &format!("srq-{m}"));
    let (id, _rid) = wait_server_request(&mut g, &s.id, &cmd);
    assert_still_pending(&mut g, &s.id);
    assert!(dir.exists(), "ran before the answer");
    g.send(&json!({"jsonrpc":"2.0","id":id,"result":{"choice":"once"}}));
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_ran_ok(&c);
    assert!(!dir.exists(), "approved command did not run");
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(turn.complete["payload"]["status"], "complete");
    let ty = types(&turn.events);
    assert!(
        !ty.iter()
            .any(|t| t == "approval.request" || t == "request.cancel"),
        "server-request form must not also send the event form or a cancel: {ty:?}"
    );
    g.ping();
    assert!(
        !g.frames.iter().any(|f| is_response(f) && f["id"] == id),
        "the gateway must not answer the client's answer to its server request"
    );

    // An error answer denies.
    make_dir_with_file(&dir);
    let start = submit(&mut g, &s.id, &format!("$ {cmd}"));
    let (id2, _) = wait_server_request(&mut g, &s.id, &cmd);
    assert_ne!(id2, id, "server request ids must be fresh");
    g.send(&json!({"jsonrpc":"2.0","id":id2,"error":{"code":-32000,"message":"dialog closed"}}));
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_denied(&c);
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "the turn goes on"
    );
    assert!(dir.exists(), "denied command ran");
}

#[test]
fn deny_records_a_not_run_result_and_the_turn_goes_on() {
    let m = marker();
    let home = fake_home();
    let mut g = gateway_with_home(&home.path).start();
    let s = g.create_session(json!({}));
    let RmPrompt { dir, cmd, start } = submit_rm(&mut g, &s.id, &home.path, &format!("deny-{m}"));
    let rid = wait_approval_event(&mut g, &s.id, &cmd);
    assert_eq!(respond(&mut g, &s.id, "deny", Some(&rid)), 1);
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_denied(&c);
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "{}",
        turn.complete
    );
    assert!(!turn.text.is_empty());
    assert!(
        !types(&turn.events).iter().any(|t| t == "request.cancel"),
        "an answered request is not withdrawn: {:?}",
        types(&turn.events)
    );
    assert!(dir.exists(), "denied command ran");
    let row = stored_tool_result(&g, &s.stored, &c);
    assert_eq!(row["error"], "denied", "{row}");
    // answering again resolves nothing
    assert_eq!(respond(&mut g, &s.id, "once", Some(&rid)), 0);
    g.ping();
    assert!(dir.exists());
}

#[test]
fn approval_timeout_withdraws_and_denies_in_both_forms() {
    let m = marker();
    let home = fake_home();
    let mut g = gateway_with_home(&home.path)
        .env("TUI_GATEWAY_APPROVAL_TIMEOUT_S", "1")
        .start();
    let s = g.create_session(json!({}));

    // Event form
    let RmPrompt { dir, cmd, start } = submit_rm(&mut g, &s.id, &home.path, &format!("to-{m}"));
    let rid = wait_approval_event(&mut g, &s.id, &cmd);
    let t0 = Instant::now();
    let cancel = g.wait_session_event(&s.id, "request.cancel", secs(10));
    let waited = t0.elapsed();
    let p = &cancel["payload"];
    assert_eq!(
        p["id"],
        rid.as_str(),
        "request.cancel names the request: {cancel}"
    );
    assert_eq!(p["method"], "approval", "{cancel}");
    assert!(p["reason"].is_string(), "{cancel}");
    assert!(waited < secs(6), "approval timeout of 1 s took {waited:?}");
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_denied(&c);
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "the turn goes on: {}",
        turn.complete
    );
    let ty = types(&turn.events);
    let (ai, ki, ci) = (
        ty.iter().position(|t| t == "approval.request").unwrap(),
        ty.iter().position(|t| t == "request.cancel").unwrap(),
        ty.iter().position(|t| t == "tool.complete").unwrap(),
    );
    assert!(ai < ki && ki < ci, "{ty:?}");
    // a late answer resolves nothing and runs nothing
    assert_eq!(respond(&mut g, &s.id, "once", Some(&rid)), 0);
    g.ping();
    assert!(dir.exists(), "command ran after its approval timed out");

    // Server-request form: the cancel names the server request's id
    g.call("client.capabilities", json!({"server_requests": true}));
    let start = submit(&mut g, &s.id, &format!("$ {cmd}"));
    let (id, _) = wait_server_request(&mut g, &s.id, &cmd);
    let cancel = g.wait_session_event(&s.id, "request.cancel", secs(10));
    assert_eq!(cancel["payload"]["id"], id, "{cancel}");
    assert_eq!(cancel["payload"]["method"], "approval", "{cancel}");
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_denied(&c);
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(turn.complete["payload"]["status"], "complete");
    // a late answer to the withdrawn request is ignored (no reply, nothing runs)
    g.send(&json!({"jsonrpc":"2.0","id":id,"result":{"choice":"once"}}));
    g.ping();
    assert!(!g.frames.iter().any(|f| is_response(f) && f["id"] == id));
    assert!(dir.exists(), "command ran after its approval was withdrawn");
}

#[test]
fn interrupt_while_waiting_withdraws_and_interrupts_the_turn() {
    let m = marker();
    let home = fake_home();
    let mut g = gateway_with_home(&home.path).start();
    let s = g.create_session(json!({}));
    let RmPrompt { dir, cmd, start } = submit_rm(&mut g, &s.id, &home.path, &format!("int-{m}"));
    let rid = wait_approval_event(&mut g, &s.id, &cmd);
    let r = g.call("session.interrupt", json!({"session_id": s.id}));
    assert_eq!(r["status"], "interrupted", "{r}");
    let cancel = g.wait_session_event(&s.id, "request.cancel", T);
    assert_eq!(cancel["payload"]["id"], rid.as_str(), "{cancel}");
    assert_eq!(cancel["payload"]["method"], "approval", "{cancel}");
    assert!(cancel["payload"]["reason"].is_string(), "{cancel}");
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_denied(&c);
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(
        turn.complete["payload"]["status"], "interrupted",
        "{}",
        turn.complete
    );
    assert_eq!(
        respond(&mut g, &s.id, "once", Some(&rid)),
        0,
        "late answer after interrupt"
    );
    g.ping();
    assert!(
        dir.exists(),
        "command ran although the turn was interrupted"
    );
    // the tool call has its result in the transcript
    let row = stored_tool_result(&g, &s.stored, &c);
    assert_eq!(row["error"], "denied", "{row}");
}

#[test]
fn session_choice_approves_the_rule_for_that_session_only() {
    let m = marker();
    let home = fake_home();
    let mut g = gateway_with_home(&home.path).start();
    let s = g.create_session(json!({}));
    let (d1, t1) = scratch(&home.path, &format!("s1-{m}"));
    let (d2, t2) = scratch(&home.path, &format!("s2-{m}"));
    let (d3, t3) = scratch(&home.path, &format!("s3-{m}"));

    approve_next(&mut g, &s.id, &format!("rm -rf {t1}"), "session");
    assert!(!d1.exists());

    // Same rule, other command, same session: runs without asking.
    let start = run_unasked(&mut g, &s.id, &format!("rm -rf {t2}"));
    assert!(!d2.exists(), "session-approved rule did not run");
    assert!(
        approval_frames_since(&mut g, start).is_empty(),
        "asked again for a rule approved for the session"
    );

    // Another rule still asks.
    deny_next(
        &mut g,
        &s.id,
        &format!("echo x > /etc/tuigw-test-nonexistent-{m}/x"),
    );

    // Another session is not covered.
    let s2 = g.create_session(json!({}));
    deny_next(&mut g, &s2.id, &format!("rm -rf {t3}"));
    assert!(d3.exists());
}

#[test]
fn always_persists_across_a_restart() {
    let m = marker();
    let home = fake_home();
    let hermes = TempHome::new("hermes-always");
    let (d1, t1) = scratch(&home.path, &format!("a1-{m}"));
    let (d2, t2) = scratch(&home.path, &format!("a2-{m}"));
    {
        let mut g = gateway_with_home(&home.path).home(&hermes.path).start();
        let s = g.create_session(json!({}));
        approve_next(&mut g, &s.id, &format!("rm -rf {t1}"), "always");
        assert!(!d1.exists());
        let f = hermes.path.join("tui_gateway_approvals.json");
        assert!(
            f.exists(),
            "always must persist under HERMES_HOME ({})",
            f.display()
        );
        g.close_stdin();
        let st = g.wait_exit(T);
        assert!(st.success(), "gateway exit {st:?}");
    }
    // A new gateway on the same HERMES_HOME, new session: no approval asked for that rule.
    let mut g = gateway_with_home(&home.path).home(&hermes.path).start();
    let s = g.create_session(json!({}));
    let start = run_unasked(&mut g, &s.id, &format!("rm -rf {t2}"));
    assert!(
        !d2.exists(),
        "always-approved rule did not run after the restart"
    );
    assert!(
        approval_frames_since(&mut g, start).is_empty(),
        "asked again after always"
    );

    // `always` covers that rule only.
    deny_next(
        &mut g,
        &s.id,
        &format!("echo x > /etc/tuigw-test-nonexistent-{m}/x"),
    );
}

#[test]
fn hard_refusals_never_run_and_never_ask() {
    let m = marker();
    let home = fake_home();
    // A broken policy would ask instead of refusing; keep that wait short.
    let mut g = gateway_with_home(&home.path)
        .env("TUI_GATEWAY_APPROVAL_TIMEOUT_S", "5")
        .start();
    let s = g.create_session(json!({}));
    // Each is guarded: were it run, it would only touch its marker and exit before the refused
    // part. The refusal must come from the policy, before anything is spawned.
    let cases = [
        ("rm", "rm -rf /"),
        ("fork", ":(){ :|:& };:"),
        ("chmod", "chmod -R 777 /"),
    ];
    for (tag, refused) in cases {
        let mark = home.path.join(format!("ran-{tag}-{m}"));
        let cmd = format!("touch ~/ran-{tag}-{m}; exit 0; {refused}");
        let start = submit(&mut g, &s.id, &format!("$ {cmd}"));
        let c = g.wait_session_event(&s.id, "tool.complete", T);
        let r = tool_result(&c);
        assert!(
            r["error"]
                .as_str()
                .map(|e| e.starts_with("blocked:"))
                .unwrap_or(false),
            "{refused:?} must be refused with error blocked:…, got {c}"
        );
        let turn = g.finish_turn(&s.id, start, T);
        assert_eq!(turn.complete["payload"]["status"], "complete");
        assert!(
            approval_frames_since(&mut g, start).is_empty(),
            "a hard refusal must not ask: {refused:?}"
        );
        assert!(!mark.exists(), "refused command {cmd:?} ran");
    }
    g.ping();
}

#[test]
fn shutdown_while_waiting_denies_and_records_the_result() {
    let m = marker();
    let home = fake_home();
    let mut g = gateway_with_home(&home.path).start();
    let s = g.create_session(json!({}));
    let RmPrompt { dir, cmd, start: _ } = submit_rm(&mut g, &s.id, &home.path, &format!("sd-{m}"));
    let rid = wait_approval_event(&mut g, &s.id, &cmd);
    // The TUI's quit: SIGTERM, then stdin closes.
    g.signal(libc::SIGTERM);
    g.close_stdin();
    let st = g.wait_exit(secs(5));
    assert!(st.success(), "gateway exit {st:?}\n{}", g.diag());
    assert!(dir.exists(), "command ran during shutdown");
    let ev = g.events_of_session(&s.id);
    let cancel = ev
        .iter()
        .find(|e| e["type"] == "request.cancel")
        .unwrap_or_else(|| {
            panic!(
                "no request.cancel for the pending approval: {:?}",
                types(&ev)
            )
        });
    assert_eq!(cancel["payload"]["id"], rid.as_str(), "{cancel}");
    // the tool call has its (denied) result in the transcript
    let rows = message_rows(&g.db_path(), &s.stored);
    let call = rows
        .iter()
        .find(|r| r.role == "assistant" && r.tool_calls.is_some())
        .unwrap_or_else(|| panic!("no tool-call row: {rows:#?}"));
    let call_id = &call.call_ids()[0];
    let row = tool_row_content(&g.db_path(), &s.stored, call_id);
    assert_eq!(row["error"], "denied", "{row}");
}
