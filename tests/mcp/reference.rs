//! The npm reference servers (`@modelcontextprotocol/server-everything` and `server-filesystem`,
//! pinned by `tests/mcp/package-lock.json`, installed by `.ci/run` or here with `npm ci`):
//! their tools listed, calls through turns of the offline model and of the OpenAI-compatible
//! mock, a progress-reporting call, an interrupted one, the server killed mid-call and
//! restarted, `reload.mcp` after an edit of `config.yaml`, and SIGKILL of the gateway.

use super::*;
use crate::mockai::*;
use std::process::Command;
use std::sync::OnceLock;

fn servers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

/// `npm ci` in `tests/mcp` unless its node_modules was installed from this lock (the stamp
/// `.ci/run` writes too); once per test run.
fn installed() -> PathBuf {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let dir = servers_dir();
    let done = DONE.get_or_init(|| {
        let sum = Command::new("sha256sum")
            .arg("package-lock.json")
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("sha256sum: {e}"))?;
        let want = String::from_utf8_lossy(&sum.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        let stamp = dir.join("node_modules/.installed-lock");
        if std::fs::read_to_string(&stamp).unwrap_or_default().trim() == want {
            return Ok(());
        }
        let ci = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("npm: {e}"))?;
        if !ci.status.success() {
            return Err(String::from_utf8_lossy(&ci.stderr).into_owned());
        }
        std::fs::write(&stamp, format!("{want}\n")).map_err(|e| e.to_string())
    });
    if let Err(e) = done {
        panic!("npm ci in {} failed: {e}", dir.display());
    }
    dir.join("node_modules/@modelcontextprotocol")
}

/// `everything` (its marker an ignored argument) and `fs` serving `files` (whose path has
/// the marker), with `fs_extra` yaml lines.
fn reference_yaml(marker: &str, files: &Path, fs_extra: &str) -> String {
    let dir = installed();
    format!(
        "mcp_servers:\n  everything:\n    command: node\n    args: [\"{}\", \"stdio\", \"{marker}\"]\n  \
         fs:\n    command: node\n    args: [\"{}\", \"{}\"]\n{fs_extra}",
        dir.join("server-everything/dist/index.js").display(),
        dir.join("server-filesystem/dist/index.js").display(),
        files.display()
    )
}

fn has_all(tools: &[String], wanted: &[&str]) {
    for w in wanted {
        assert!(tools.iter().any(|t| t == w), "no {w} in {tools:?}");
    }
}

fn everything_pid(marker: &str) -> i32 {
    wait_for_procs("node", marker, 1, T)
        .into_iter()
        .find(|p| p.cmdline.contains("server-everything"))
        .unwrap_or_else(|| {
            panic!(
                "no everything server:\n{}",
                describe(&procs_matching(marker))
            )
        })
        .pid
}

#[test]
fn the_reference_servers_through_offline_turns_a_kill_a_reload_and_a_killed_gateway() {
    let m = marker();
    let _r = Reaper(m.clone());
    let home = TempHome::new("mcpref");
    let files = home.path.join(format!("files-{m}"));
    std::fs::create_dir_all(&files).unwrap();
    let config = home.path.join("config.yaml");
    std::fs::write(&config, reference_yaml(&m, &files, "")).unwrap();
    let mut g = Gateway::builder().home(&home.path).start();
    let everything = wait_tools(&mut g, "everything");
    has_all(
        &everything,
        &[
            "mcp__everything__echo",
            "mcp__everything__get_sum",
            "mcp__everything__trigger_long_running_operation",
        ],
    );
    let fs = wait_tools(&mut g, "fs");
    has_all(
        &fs,
        &[
            "mcp__fs__read_text_file",
            "mcp__fs__write_file",
            "mcp__fs__list_directory",
        ],
    );
    let s = g.create_session(json!({}));
    let result = |g: &mut Gateway, name: &str, args: Value| {
        let done = call_tool(g, &s.id, name, args);
        assert_eq!(done["payload"]["error"], Value::Null, "{done}");
        stored_tool_result(g, &s.stored, &done)["result"].clone()
    };
    let echoed = result(&mut g, "mcp__everything__echo", json!({"message": m}));
    assert_eq!(echoed, format!("Echo: {m}"));
    let sum = result(&mut g, "mcp__everything__get_sum", json!({"a": 2, "b": 3}));
    assert_eq!(sum, "The sum of 2 and 3 is 5.");
    let note = files.join("note.txt");
    result(
        &mut g,
        "mcp__fs__write_file",
        json!({"path": note, "content": format!("written {m}")}),
    );
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        format!("written {m}")
    );
    let read = result(&mut g, "mcp__fs__read_text_file", json!({"path": note}));
    assert_eq!(read, format!("written {m}"));

    // Progress notifications stream into tool.output.
    let start = g.frames.len();
    let done = result(
        &mut g,
        "mcp__everything__trigger_long_running_operation",
        json!({"duration": 0.3, "steps": 3}),
    );
    assert!(done.as_str().unwrap().contains("completed"), "{done}");
    let outputs = tool_output_from(&mut g, &s.id, start);
    assert!(outputs.contains("3/3"), "{outputs:?}");

    // A long call interrupted: the turn ends at once, the server keeps serving.
    let long =
        "%mcp__everything__trigger_long_running_operation {\"duration\": 600, \"steps\": 600}";
    submit(&mut g, &s.id, long);
    g.wait_session_event(&s.id, "tool.output", T);
    g.call("session.interrupt", json!({"session_id": s.id}));
    let done = g.wait_session_event(&s.id, "tool.complete", T);
    assert_eq!(done["payload"]["error"], "interrupted", "{done}");
    g.wait_session_event(&s.id, "message.complete", T);
    let echoed = result(&mut g, "mcp__everything__echo", json!({"message": "after"}));
    assert_eq!(echoed, "Echo: after");

    // The server killed mid-call: the call ends with a clear error, the server comes back.
    let pid = everything_pid(&m);
    submit(&mut g, &s.id, long);
    g.wait_session_event(&s.id, "tool.output", T);
    kill(pid, libc::SIGKILL);
    let done = g.wait_session_event(&s.id, "tool.complete", T);
    g.wait_session_event(&s.id, "message.complete", T);
    let error = tool_error(&done);
    assert!(
        error.starts_with("MCP server 'everything' exited") && error.ends_with("during the call"),
        "{done}"
    );
    wait_status(&mut g, "everything", |s| s["status"] == "connected");
    let echoed = result(&mut g, "mcp__everything__echo", json!({"message": "back"}));
    assert_eq!(echoed, "Echo: back");

    // reload.mcp after an edit: only the changed server restarts, with its new filter.
    let pid = everything_pid(&m);
    let edited = reference_yaml(&m, &files, "    tools:\n      exclude: [write_file]\n");
    std::fs::write(&config, edited).unwrap();
    let r = g.call("reload.mcp", json!({"session_id": s.id, "confirm": true}));
    assert_eq!(r["changed"], json!(["fs"]), "{r}");
    let fs = wait_tools(&mut g, "fs");
    assert!(!fs.iter().any(|t| t == "mcp__fs__write_file"), "{fs:?}");
    has_all(&fs, &["mcp__fs__read_text_file"]);
    assert_eq!(
        everything_pid(&m),
        pid,
        "the unchanged server was restarted"
    );

    // SIGKILL of the gateway: none of its servers survives.
    g.signal(libc::SIGKILL);
    assert_none_left(&m, T, "after the gateway's SIGKILL");
}

#[test]
fn the_reference_servers_through_openai_turns() {
    let m = marker();
    let _r = Reaper(m.clone());
    let home = TempHome::new("mcpref");
    let files = home.path.join(format!("files-{m}"));
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("seen.txt"), "x").unwrap();
    std::fs::write(
        home.path.join("config.yaml"),
        reference_yaml(&m, &files, ""),
    )
    .unwrap();
    let sum_args = json!({"a": 40, "b": 2}).to_string();
    let list_args = json!({"path": files}).to_string();
    let calls = vec![
        ev_role(),
        ev_tool_start(0, "call_sum", "mcp__everything__get_sum", &sum_args),
        ev_tool_start(1, "call_ls", "mcp__fs__list_directory", &list_args),
        ev_finish("tool_calls"),
        ev_usage(10, 10),
    ];
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(calls)),
        Reply::text(&["42, and seen.txt"], (30, 4)),
    ]);
    let mut g = Gateway::builder()
        .home(&home.path)
        .openai_mock(&mock.base_url())
        .start();
    wait_tools(&mut g, "everything");
    wait_tools(&mut g, "fs");
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "add and list");
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "{}",
        turn.complete
    );
    let reqs = mock.wait_requests(2, T);
    // The model was offered the servers' tools with their schemas.
    let sum_tool = reqs[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["function"]["name"] == "mcp__everything__get_sum")
        .unwrap_or_else(|| panic!("get_sum not offered: {}", reqs[0].body));
    assert_eq!(
        sum_tool["function"]["parameters"]["properties"]["a"]["type"],
        "number"
    );
    // Their results went back as tool messages.
    let msgs = reqs[1].messages();
    let tool_text = |id: &str| {
        let t = msgs
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no tool message for {id}: {}", reqs[1].body));
        content_text(&t["content"])
    };
    assert!(
        tool_text("call_sum").contains("The sum of 40 and 2 is 42."),
        "{}",
        tool_text("call_sum")
    );
    assert!(
        tool_text("call_ls").contains("seen.txt"),
        "{}",
        tool_text("call_ls")
    );
}
