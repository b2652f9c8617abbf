//! MCP servers over stdio, against a small Node server in `tests/mcp/fake_server.js`: tools
//! listed page by page and offered as `mcp__<server>__<tool>`, calls through whole turns of
//! the offline model (`%NAME {JSON}`), progress streamed as `tool.output`, an interrupted call
//! (`notifications/cancelled` reaches the server), `reload.mcp`, a server that exits mid-call
//! (the call ends with a tool error, the server is restarted), the bad servers of issue 13
//! (garbage on stdout, an unknown id, endless stderr, a schema that is not one, a server that
//! never answers `initialize`, a 100 MB line, a 50 MB result) each contained with the
//! gateway's memory bounded, the lifecycle (a `lazy` server starts with the first session; the
//! shutdown closes stdin, waits, then SIGTERMs only the server still running), and SIGKILL of
//! the gateway with servers running (none survives). `mcp/reference.rs` runs the npm
//! reference servers.

use crate::common;
use crate::mcp_support;
use crate::procs;
#[path = "mcp/reference.rs"]
mod reference;

use common::*;
use mcp_support::*;
use procs::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn server_js() -> String {
    format!("{}/tests/mcp/fake_server.js", env!("CARGO_MANIFEST_DIR"))
}

/// A home whose config.yaml lists `servers` as `(name, mode, extra yaml lines)`; each server
/// notes what happens to it (its stdin closing, SIGTERM, cancellations) in [`notes_of`].
fn home_with(servers: &[(&str, &str, &str)], marker: &str) -> TempHome {
    let home = TempHome::new("mcp");
    let mut yaml = String::from("mcp_servers:\n");
    for (name, mode, extra) in servers {
        yaml.push_str(&server_yaml(&home.path, name, mode, marker));
        yaml.push_str(extra);
    }
    std::fs::write(home.path.join("config.yaml"), yaml).unwrap();
    home
}

fn server_yaml(home: &Path, name: &str, mode: &str, marker: &str) -> String {
    format!(
        "  {name}:\n    command: node\n    args: [\"{}\", \"{mode}\", \"{marker}\", \"{}\"]\n",
        server_js(),
        notes_path(home, name).display()
    )
}

fn notes_path(home: &Path, name: &str) -> PathBuf {
    home.join(format!("{name}.notes"))
}

/// What server `name` noted so far, one line each.
fn notes_of(home: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(notes_path(home, name))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Server `name` notes a `notifications/cancelled` (within the test deadline).
fn assert_cancelled(home: &Path, name: &str) {
    let told = poll_until(T, || {
        notes_of(home, name)
            .iter()
            .any(|n| n.starts_with("cancelled "))
    });
    assert!(told, "no notifications/cancelled reached server {name}");
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
    let s = g.create_session(json!({}));
    let status = mcp_status(&mut g, "fake");
    assert_eq!(
        (&status["connected"], &status["tools"], &status["transport"]),
        (&json!(true), &json!(3), &json!("stdio")),
        "{status}"
    );
    let done = call_tool(&mut g, &s.id, "mcp__fake__echo", json!({"text": "hello"}));
    let stored = stored_tool_result(&g, &s.stored, &done);
    assert_eq!(stored["result"], format!("echo: hello{m}"), "{stored}");
    assert_eq!(stored["structuredContent"]["text"], "hello");
    // Progress notifications stream as live output before the result.
    let start = g.frames.len();
    let done = call_tool(&mut g, &s.id, "mcp__fake__slow", json!({}));
    let outputs = tool_output_from(&mut g, &s.id, start);
    assert!(outputs.contains("step 2"), "{outputs:?}");
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        "slow done"
    );
}

/// The tools `tools.show` says the model is offered.
fn offered(g: &mut Gateway) -> Vec<String> {
    let show = g.call("tools.show", json!({}));
    show["sections"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["tools"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn tools_disable_and_enable_take_a_servers_tool_as_hermes_names_it() {
    let home = home_with(&[("fake", "good", "")], &marker());
    let mut g = Gateway::builder().home(&home.path).start();
    wait_tools(&mut g, "fake");
    let r = g.call(
        "tools.configure",
        json!({"action": "disable", "names": ["fake:echo", "nope:x"]}),
    );
    assert_eq!(r["changed"], json!(["fake:echo"]), "{r}");
    assert_eq!(r["missing_servers"], json!(["nope"]));
    assert_eq!(r["unknown"], json!([]));
    let now = offered(&mut g);
    assert!(
        !now.contains(&"mcp__fake__echo".to_string())
            && now.contains(&"mcp__fake__slow".to_string()),
        "{now:?}"
    );
    g.call(
        "tools.configure",
        json!({"action": "enable", "names": ["fake:echo"]}),
    );
    assert!(offered(&mut g).contains(&"mcp__fake__echo".to_string()));
}

#[test]
fn a_prompt_sent_before_a_slow_server_is_connected_waits_and_gets_its_tools() {
    let m = marker();
    let home = home_with(
        &[
            ("slow", "slow_start", "    connect_timeout: 30\n"),
            ("mute", "mute", "    connect_timeout: 0.5\n"),
        ],
        &m,
    );
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    // At once, while the server is still in its handshake: the first model call waits.
    let done = call_tool(&mut g, &s.id, "mcp__slow__echo", json!({"text": "early"}));
    assert_eq!(tool_error(&done), "", "{done}");
    let waited = g.events_of_session_from(&s.id, 0);
    let said: Vec<&str> = waited
        .iter()
        .filter(|e| e["type"] == "status.update" && e["payload"]["kind"] == "mcp")
        .filter_map(|e| e["payload"]["text"].as_str())
        .collect();
    assert!(
        said.iter().any(|t| t.contains("'slow'")),
        "no word of waiting for the slow server: {said:?}"
    );
    let stored = stored_tool_result(&g, &s.stored, &done);
    assert_eq!(stored["result"], format!("echo: early{m}"), "{stored}");
    // A server whose handshake fails is waited for no longer than its connect_timeout: the
    // next prompt's first call does not wait at all.
    let next = g.run_turn(&s.id, "after");
    assert!(next.text.contains("after"), "{}", next.text);
}

#[test]
fn a_flood_of_progress_is_paced_and_its_newest_notice_shown_before_the_result() {
    const NOTICES: u64 = 100_000;
    let m = marker();
    let home = home_with(&[("fake", "good", "")], &m);
    let mut g = Gateway::builder().home(&home.path).start();
    wait_tools(&mut g, "fake");
    let s = g.create_session(json!({}));
    let start = g.frames.len();
    let done = call_tool(&mut g, &s.id, "mcp__fake__slow", json!({"flood": NOTICES}));
    let events = g.events_of_session_from(&s.id, start);
    let progress = events
        .iter()
        .filter(|e| e["type"] == "tool.progress")
        .count();
    // One at once, then at most one per 100 ms interval: far fewer than the notices.
    assert!(
        (1..NOTICES as usize / 100).contains(&progress),
        "{progress} tool.progress events for {NOTICES} notices"
    );
    let outputs = tool_output_from(&mut g, &s.id, start);
    assert!(
        outputs.starts_with("step 1\n"),
        "{}",
        &outputs[..40.min(outputs.len())]
    );
    assert!(
        outputs.ends_with(&format!("step {NOTICES}\n")),
        "the newest notice is shown before the result"
    );
    let complete_at = events.iter().position(|e| e["type"] == "tool.complete");
    let last_output_at = events.iter().rposition(|e| e["type"] == "tool.output");
    assert!(last_output_at < complete_at, "progress after the result");
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        "slow done"
    );
    g.call("ping", json!({}));
}

#[test]
fn a_server_that_exits_mid_call_fails_the_call_and_is_restarted() {
    let m = marker();
    let home = home_with(&[("fake", "good", "")], &m);
    let mut g = Gateway::builder().home(&home.path).start();
    wait_tools(&mut g, "fake");
    let s = g.create_session(json!({}));
    let done = call_tool(&mut g, &s.id, "mcp__fake__die", json!({}));
    assert!(
        tool_error(&done).contains("MCP server 'fake' exited (status 7)"),
        "{done}"
    );
    g.wait_session_event(&s.id, "status.update", T);
    // Restarted after the backoff: calls work again.
    wait_status(&mut g, "fake", |s| s["status"] == "connected");
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
            ("big", "big", ""),
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
    wait_tools(&mut g, "big");
    let idle_kib = rss_kib(g.pid()).unwrap();
    let a = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    // A 100 MB line: the call ends with a clear error, the server restarts; meanwhile another
    // session's call on another server is answered.
    submit(&mut g, &a.id, "%mcp__big__huge_line {}");
    let done = call_tool(&mut g, &b.id, "mcp__noisy__echo", json!({"text": "x"}));
    assert_eq!(
        stored_tool_result(&g, &b.stored, &done)["result"],
        format!("echo: x{m}")
    );
    let done = g.wait_session_event(&a.id, "tool.complete", T);
    g.wait_session_event(&a.id, "message.complete", T);
    assert!(
        tool_error(&done).contains("MCP server 'big' sent a line longer than"),
        "{done}"
    );
    wait_status(&mut g, "big", |s| s["status"] == "connected");
    // A 50 MB result is over the same line cap: refused the same way, never buffered.
    let done = call_tool(&mut g, &a.id, "mcp__big__huge_result", json!({}));
    assert!(
        tool_error(&done).contains("sent a line longer than"),
        "{done}"
    );
    let grown_kib = rss_kib(g.pid()).unwrap().saturating_sub(idle_kib);
    assert!(
        grown_kib < 40 * 1024,
        "the gateway grew by {grown_kib} KiB over 150 MB of server output"
    );
    let mute = wait_status(&mut g, "mute", |s| s["status"] == "failed");
    assert!(
        mute["error"].as_str().unwrap().contains("handshake"),
        "{mute}"
    );
    // `/tools` says so too, under the toolsets the others offer.
    let tools = g.call(
        "slash.exec",
        json!({"command": "tools", "session_id": a.id}),
    );
    let text = tools["output"].as_str().unwrap_or_default();
    assert!(
        text.contains("mcp-noisy (")
            && text.contains("MCP server mute: failed (")
            && text.contains("handshake"),
        "{tools}"
    );
    g.ping();
    wait_for_procs("node", &m, 2, T);
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
    assert_cancelled(&home.path, "keep");
    let before = wait_for_procs("node", &m, 1, T);
    // Add a server: the reload starts it and leaves the unchanged one running.
    let yaml = std::fs::read_to_string(home.path.join("config.yaml")).unwrap();
    let added = yaml + &server_yaml(&home.path, "added", "good", &m);
    std::fs::write(home.path.join("config.yaml"), added).unwrap();
    let rev = g.call("config.get", json!({"key": "mtime"}))["mcp_rev"].clone();
    // Unconfirmed, the reload names what it would change, and changes nothing.
    let r = g.call("reload.mcp", json!({"session_id": s.id}));
    let message = r["message"].as_str().unwrap_or_default();
    assert!(
        r["status"] == "confirm_required"
            && message.contains("(added)")
            && message.contains("/reload-mcp now"),
        "{r}"
    );
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
    let r = g.call("reload.mcp", json!({"session_id": s.id}));
    assert!(
        r["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nothing to reload"),
        "{r}"
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

/// A call that hangs past the server's per-call `timeout` (Hermes' key) ends with a tool
/// error saying so, the server is told `notifications/cancelled`, and it goes on serving.
#[test]
fn a_hanging_call_ends_at_its_timeout_and_is_cancelled() {
    let m = marker();
    let _r = Reaper(m.clone());
    let home = home_with(&[("hang", "good", "    timeout: 0.5\n")], &m);
    let mut g = Gateway::builder().home(&home.path).start();
    wait_tools(&mut g, "hang");
    let s = g.create_session(json!({}));
    let done = call_tool(&mut g, &s.id, "mcp__hang__slow", json!({"ms": 600000}));
    assert!(tool_error(&done).contains("timed out after 0.5s"), "{done}");
    assert_cancelled(&home.path, "hang");
    let done = call_tool(&mut g, &s.id, "mcp__hang__echo", json!({"text": "after"}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        format!("echo: after{m}")
    );
}

#[test]
fn a_lazy_server_waits_for_a_session_and_the_shutdown_closes_stdin_before_sigterm() {
    let m = marker();
    let _r = Reaper(m.clone());
    let lazy_marker = format!("{m}-lazy");
    let home = home_with(
        &[("polite", "polite", ""), ("stubborn", "stubborn", "")],
        &m,
    );
    let mut yaml = std::fs::read_to_string(home.path.join("config.yaml")).unwrap();
    yaml += &server_yaml(&home.path, "later", "good", &lazy_marker);
    yaml += "    lazy: true\n";
    std::fs::write(home.path.join("config.yaml"), yaml).unwrap();
    // A kill grace long enough that the polite server surely exits inside its half.
    let mut g = Gateway::builder()
        .home(&home.path)
        .args(&["--kill-grace", "2", "--shutdown-grace", "5"])
        .start();
    wait_tools(&mut g, "polite");
    wait_tools(&mut g, "stubborn");
    // The eager servers are up; the lazy one is not started without a session.
    assert!(
        procs_matching(&lazy_marker).is_empty(),
        "the lazy server started without a session"
    );
    let s = g.create_session(json!({}));
    wait_tools(&mut g, "later");
    let done = call_tool(&mut g, &s.id, "mcp__later__echo", json!({"text": "up"}));
    assert_eq!(
        stored_tool_result(&g, &s.stored, &done)["result"],
        format!("echo: up{lazy_marker}")
    );
    // Shutdown: stdin closes first; the polite server exits on it and gets no signal, the
    // stubborn one is SIGTERMed after the wait and killed inside the grace.
    g.close_stdin();
    g.wait_exit(T);
    let exit = g.stderr_with("[gateway-exit]", T);
    assert!(!exit.contains("grace exceeded"), "{exit}");
    assert_eq!(notes_of(&home.path, "polite"), ["stdin closed"]);
    assert_eq!(
        notes_of(&home.path, "stubborn"),
        ["stdin closed", "SIGTERM"]
    );
    assert_none_left(&m, T, "after the shutdown");
}

/// Issue 30's memory case: a 15 MiB result, three times over. Hermes keeps results past 100,000
/// characters out of the context: the whole result goes to a file in the home's
/// `cache/spillover`, the tool message (stored,
/// shown, resent) holds a preview and its path; and the memory each one took goes back.
#[test]
fn a_big_result_is_spilled_to_a_file_and_the_memory_it_took_goes_back() {
    const ROUNDS: usize = 3;
    let m = marker();
    let home = home_with(&[("big", "big", "")], &m);
    let mut g = Gateway::builder().home(&home.path).start();
    wait_tools(&mut g, "big");
    let s = g.create_session(json!({}));
    call_tool(&mut g, &s.id, "mcp__big__echo", json!({"text": "warm"}));
    let idle_kib = rss_kib(g.pid()).unwrap();
    for _ in 0..ROUNDS {
        let done = call_tool(&mut g, &s.id, "mcp__big__huge_result", json!({"mb": 15}));
        let shown = done["payload"]["result"].as_str().unwrap_or_default();
        let call_id = done["payload"]["tool_id"].as_str().unwrap();
        let row = message_rows(&g.db_path(), &s.stored)
            .into_iter()
            .find(|r| r.tool_call_id.as_deref() == Some(call_id))
            .expect("the stored tool row");
        let stored = row.content.as_deref().unwrap_or_default();
        for text in [shown, stored] {
            assert!(
                text.starts_with("<persisted-output>\nThis tool result was too large (15,")
                    && text.contains(&format!("head {m}xxx")),
                "{}",
                &text[..text.len().min(400)]
            );
        }
        let path = stored
            .lines()
            .find_map(|l| l.strip_prefix("Full output saved to: "))
            .expect("the file's path");
        assert!(
            path.starts_with(home.path.join("cache/spillover").to_str().unwrap()),
            "{path}"
        );
        let whole = std::fs::read_to_string(path).unwrap();
        assert!(
            whole.len() > 15 << 20 && whole.ends_with(" tail\"}"),
            "{}",
            whole.len()
        );
    }
    let mut last = 0;
    let back = poll_until(T, || {
        last = rss_kib(g.pid()).unwrap();
        last <= 2 * idle_kib
    });
    eprintln!("after {ROUNDS} results of 15 MiB: idle {idle_kib} KiB, now {last} KiB");
    assert!(
        back,
        "RSS {last} KiB after the results, idle was {idle_kib} KiB"
    );
}
