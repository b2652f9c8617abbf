//! Hermes' coding tools through whole turns over the protocol (the offline model's
//! `%NAME {JSON}` prompts, and the OpenAI mock for the model's own tool calls): `read_file`,
//! `write_file`, `patch` (replace and V4A), `search_files`, `todo`, `clarify`, `memory`,
//! toolsets and the system prompt. Each checks the tool row in state.db, the event the TUI
//! renders and the effect on disk; bad arguments are tool errors the model reads.

use crate::common;
use crate::mockai;

use std::path::{Path, PathBuf};

use common::*;
use mockai::*;
use serde_json::{Value, json};

/// A gateway whose sessions work in `work` (with HOME there too: `~/.ssh` is inside it).
struct Bench {
    g: Gateway,
    work: PathBuf,
    _work: TempHome,
    sid: String,
    stored: String,
}

fn bench(tag: &str, args: &[&str]) -> Bench {
    let work = TempHome::new(&format!("{tag}-work"));
    let mut g = Gateway::builder()
        .tag(tag)
        .env("HOME", work.path.to_str().unwrap())
        .args(args)
        .start();
    let s = g.create_session(json!({"cwd": work.path.to_str().unwrap()}));
    Bench {
        g,
        work: work.path.clone(),
        _work: work,
        sid: s.id,
        stored: s.stored,
    }
}

impl Bench {
    /// One `%tool {args}` turn: the call's `tool.complete` payload and its stored row.
    fn call(&mut self, tool: &str, args: Value) -> (Value, Value) {
        let done = self.g.tool_turn(&self.sid, tool, &args);
        assert_eq!(done["name"], tool, "{done}");
        let rows = message_rows(&self.g.db_path(), &self.stored);
        let row = rows
            .iter()
            .rev()
            .find(|r| r.role == "tool" && r.tool_call_id.as_deref() == done["tool_id"].as_str())
            .unwrap_or_else(|| panic!("no stored tool row: {rows:#?}"))
            .json();
        assert_eq!(row, done["result"], "the model reads what the TUI was told");
        (done, row)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.work.join(rel)
    }
}

#[test]
fn write_read_patch_and_search_through_turns() {
    let mut b = bench("files", &[]);
    // write_file: parents created, bytes counted, the diff shown.
    let (done, row) = b.call("write_file", json!({"path": "src/app.py", "content": "def f():\n    return 1\n\ndef g():\n    return 1\n"}));
    assert_eq!(row, json!({"bytes_written": 45, "dirs_created": true}));
    let diff = done["inline_diff"]
        .as_str()
        .unwrap_or_else(|| panic!("{done}"));
    assert!(
        diff.contains("+++ b/src/app.py") && diff.contains("+def f():"),
        "{diff}"
    );
    assert!(b.path("src/app.py").exists());

    // read_file: numbered lines and totals; a page and where to go on.
    let (_, row) = b.call(
        "read_file",
        json!({"path": "src/app.py", "offset": 2, "limit": 2}),
    );
    assert_eq!(row["content"], "2|    return 1\n3|");
    assert_eq!(row["total_lines"], 5);
    assert_eq!(row["truncated"], true);
    assert!(row["hint"].as_str().unwrap().contains("offset=4"), "{row}");
    // A missing file names its neighbours.
    let (done, row) = b.call("read_file", json!({"path": "src/ap.py"}));
    assert!(
        row["error"].as_str().unwrap().contains("File not found"),
        "{row}"
    );
    assert!(row["similar_files"].to_string().contains("app.py"), "{row}");
    assert!(done["error"].is_string());
    // A binary file is refused.
    std::fs::write(b.path("blob.dat"), b"\x00\x01\x02binary").unwrap();
    let (_, row) = b.call("read_file", json!({"path": "blob.dat"}));
    assert_eq!(row["is_binary"], true, "{row}");

    // patch replace: fuzzy indentation, the diff on tool.complete, the file changed.
    let (done, row) = b.call(
        "patch",
        json!({"mode": "replace", "path": "src/app.py",
        "old_string": "def g():\n  return 1", "new_string": "def g():\n  return 2"}),
    );
    assert_eq!(row["success"], true, "{row}");
    assert_eq!(row["files_modified"], json!(["src/app.py"]));
    let diff = done["inline_diff"].as_str().unwrap();
    assert!(diff.contains("-    return 1\n+    return 2"), "{diff}");
    assert_eq!(
        std::fs::read_to_string(b.path("src/app.py")).unwrap(),
        "def f():\n    return 1\n\ndef g():\n    return 2\n"
    );
    // Two matches without replace_all: an error that changes nothing.
    std::fs::write(b.path("twice.txt"), "x = 1\nx = 1\n").unwrap();
    let (_, row) = b.call(
        "patch",
        json!({"path": "twice.txt", "old_string": "x = 1", "new_string": "x = 2"}),
    );
    assert_eq!(row["success"], false);
    assert!(
        row["error"].as_str().unwrap().contains("Found 2 matches"),
        "{row}"
    );
    assert_eq!(
        std::fs::read_to_string(b.path("twice.txt")).unwrap(),
        "x = 1\nx = 1\n"
    );

    // V4A: update one file, add another, delete a third; checked whole first.
    std::fs::write(b.path("gone.txt"), "bye\n").unwrap();
    let patch = "*** Begin Patch\n*** Update File: src/app.py\n@@ def f(): @@\n-    return 1\n+    return 10\n\
                 *** Add File: notes/new.md\n+# New\n*** Delete File: gone.txt\n*** End Patch";
    let (done, row) = b.call("patch", json!({"mode": "patch", "patch": patch}));
    assert_eq!(row["success"], true, "{row}");
    assert_eq!(row["files_created"], json!(["notes/new.md"]));
    assert_eq!(row["files_deleted"], json!(["gone.txt"]));
    assert!(
        done["inline_diff"]
            .as_str()
            .unwrap()
            .contains("+    return 10")
    );
    assert!(
        std::fs::read_to_string(b.path("src/app.py"))
            .unwrap()
            .contains("return 10\n\ndef g")
    );
    assert_eq!(
        std::fs::read_to_string(b.path("notes/new.md")).unwrap(),
        "# New\n"
    );
    assert!(!b.path("gone.txt").exists());
    // A V4A patch with one bad hunk writes nothing.
    let bad = "*** Begin Patch\n*** Update File: src/app.py\n-    return 10\n+    return 11\n\
               *** Update File: src/app.py\n-nothing like this\n+x\n*** End Patch";
    let (_, row) = b.call("patch", json!({"mode": "patch", "patch": bad}));
    assert!(
        row["error"]
            .as_str()
            .unwrap()
            .contains("no files were modified"),
        "{row}"
    );
    assert!(
        std::fs::read_to_string(b.path("src/app.py"))
            .unwrap()
            .contains("return 10\n")
    );

    // search_files: content with context, names, .gitignore respected.
    std::fs::write(b.path(".gitignore"), "ignored/\n").unwrap();
    std::fs::create_dir_all(b.path("ignored")).unwrap();
    std::fs::write(b.path("ignored/app.py"), "return 10\n").unwrap();
    let (_, row) = b.call(
        "search_files",
        json!({"pattern": "return 1\\d", "context": 1}),
    );
    assert_eq!(row["total_count"], 1, "{row}");
    assert_eq!(row["matches"][0]["path"], "src/app.py", "{row}");
    assert_eq!(
        row["matches"].as_array().unwrap().len(),
        3,
        "the match and its context: {row}"
    );
    let (_, row) = b.call(
        "search_files",
        json!({"pattern": "*.md", "target": "files"}),
    );
    assert_eq!(row["files"], json!(["notes/new.md"]), "{row}");
    let (_, row) = b.call(
        "search_files",
        json!({"pattern": "return", "output_mode": "count"}),
    );
    assert_eq!(row["counts"]["src/app.py"], 2, "{row}");
}

#[test]
fn bad_arguments_are_tool_errors_the_model_reads() {
    let mut b = bench("badargs", &[]);
    for (tool, args, says) in [
        ("read_file", json!({}), "path"),
        ("read_file", json!({"path": 5}), "must be a string"),
        ("read_file", json!({"path": "."}), "directory"),
        ("read_file", json!({"path": "/dev/zero"}), "device"),
        ("write_file", json!({"path": "a.txt"}), "content"),
        (
            "write_file",
            json!({"path": "a.txt", "content": ["x"]}),
            "must be a string",
        ),
        ("patch", json!({"mode": "zap"}), "unknown mode"),
        (
            "patch",
            json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
            "File not found",
        ),
        ("patch", json!({"path": "a.txt"}), "old_string"),
        (
            "patch",
            json!({"mode": "patch", "patch": "*** Begin Patch\n*** End Patch"}),
            "no operations",
        ),
        ("search_files", json!({}), "pattern"),
        ("search_files", json!({"pattern": "("}), "bad regex"),
        (
            "search_files",
            json!({"pattern": "x", "path": "missing/dir"}),
            "Path not found",
        ),
        ("todo", json!({"todos": "not json"}), "unparseable"),
        (
            "memory",
            json!({"target": "elsewhere", "action": "add"}),
            "Invalid target",
        ),
        (
            "memory",
            json!({"target": "memory", "action": "add"}),
            "content is required",
        ),
        (
            "clarify",
            json!({"question": ""}),
            "Question text is required",
        ),
    ] {
        let (done, row) = b.call(tool, args.clone());
        let error = row["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool} {args}: {row}"));
        assert!(error.contains(says), "{tool} {args}: {error}");
        assert!(done["error"].is_string(), "{done}");
    }
    // Arguments that are not JSON at all.
    let turn = b.g.run_turn(&b.sid, "%read_file {not json");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    assert!(!b.path("a.txt").exists());
}

#[test]
fn a_write_into_ssh_asks_and_a_denial_writes_nothing() {
    let mut b = bench("ssh", &[]);
    let start = submit(
        &mut b.g,
        &b.sid,
        r#"%write_file {"path": "~/.ssh/authorized_keys", "content": "ssh-ed25519 AAAA"}"#,
    );
    let req = b.g.wait_session_event(&b.sid, "approval.request", T);
    let p = &req["payload"];
    assert!(
        p["description"].as_str().unwrap().contains("sensitive"),
        "{p}"
    );
    assert!(
        p["command"]
            .as_str()
            .unwrap()
            .contains(".ssh/authorized_keys"),
        "{p}"
    );
    b.g.call(
        "approval.respond",
        json!({"session_id": b.sid, "choice": "deny"}),
    );
    let turn = b.g.finish_turn(&b.sid, start, T);
    assert_eq!(turn.complete["payload"]["status"], "complete");
    assert!(!b.path(".ssh/authorized_keys").exists());
    // Approved once, it is written.
    let start = submit(
        &mut b.g,
        &b.sid,
        r#"%write_file {"path": "~/.ssh/config", "content": "Host x\n"}"#,
    );
    b.g.wait_session_event(&b.sid, "approval.request", T);
    b.g.call(
        "approval.respond",
        json!({"session_id": b.sid, "choice": "once"}),
    );
    b.g.finish_turn(&b.sid, start, T);
    assert_eq!(
        std::fs::read_to_string(b.path(".ssh/config")).unwrap(),
        "Host x\n"
    );
}

#[test]
fn the_todo_list_is_in_tool_complete_and_comes_back_on_resume() {
    let home = TempHome::new("todo-home");
    let work = TempHome::new("todo-work");
    let mut g = Gateway::builder().home(&home.path).tag("todo").start();
    let s = g.create_session(json!({"cwd": work.path.to_str().unwrap()}));
    let plan = json!({"todos": [{"id": "1", "content": "read the code", "status": "in_progress"},
                                {"id": "2", "content": "fix it", "status": "pending"}]});
    let turn = g.run_turn(&s.id, &format!("%todo {plan}"));
    let done = turn.event("tool.complete");
    assert_eq!(done["payload"]["todos"][1]["content"], "fix it", "{done}");
    assert_eq!(done["payload"]["result"]["summary"]["total"], 2);
    g.close_stdin();
    g.wait_exit(T);

    let mut g = Gateway::builder().home(&home.path).tag("todo2").start();
    let r = g.call("session.resume", json!({"session_id": s.stored}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let turn = g.run_turn(
        &sid,
        r#"%todo {"merge": true, "todos": [{"id": "1", "status": "completed"}]}"#,
    );
    let done = turn.event("tool.complete");
    let todos = &done["payload"]["todos"];
    assert_eq!(
        todos[0],
        json!({"id": "1", "content": "read the code", "status": "completed"}),
        "{todos}"
    );
    assert_eq!(todos[1]["id"], "2");
}

#[test]
fn clarify_asks_the_user_and_times_out_or_is_withdrawn() {
    let mut b = bench("clarify", &["--clarify-timeout", "0.5"]);
    let start = submit(
        &mut b.g,
        &b.sid,
        r#"%clarify {"question": "Which target?", "choices": ["staging", "prod"]}"#,
    );
    let req = b.g.wait_session_event(&b.sid, "clarify.request", T);
    assert_eq!(req["payload"]["question"], "Which target?");
    assert_eq!(req["payload"]["choices"], json!(["staging", "prod"]));
    let id = req["payload"]["request_id"].as_str().unwrap().to_string();
    let r = b.g.call(
        "clarify.respond",
        json!({"request_id": id, "answer": "prod"}),
    );
    assert_eq!(r, json!({"status": "ok"}));
    let turn = b.g.finish_turn(&b.sid, start, T);
    let done = turn.event("tool.complete");
    assert_eq!(done["payload"]["result"]["user_response"], "prod", "{done}");
    b.g.expect_code(
        "clarify.respond",
        json!({"request_id": id, "answer": "again"}),
        4009,
    );

    // Nobody answers: withdrawn at the timeout, the model reads an empty answer.
    let start = submit(&mut b.g, &b.sid, r#"%clarify {"question": "Still there?"}"#);
    b.g.wait_session_event(&b.sid, "clarify.request", T);
    let cancel = b.g.wait_session_event(&b.sid, "request.cancel", T);
    assert_eq!(cancel["payload"]["method"], "clarify");
    let turn = b.g.finish_turn(&b.sid, start, T);
    let done = turn.event("tool.complete");
    assert_eq!(done["payload"]["result"]["user_response"], "");
    assert_eq!(done["payload"]["summary"], "no answer (timed out)");

    // An interrupt withdraws the question and ends the turn.
    let start = submit(&mut b.g, &b.sid, r#"%clarify {"question": "Wait?"}"#);
    b.g.wait_session_event(&b.sid, "clarify.request", T);
    b.g.call("session.interrupt", json!({"session_id": b.sid}));
    let turn = b.g.finish_turn(&b.sid, start, T);
    assert!(
        turn.events.iter().any(|e| e["type"] == "request.cancel"),
        "{:?}",
        turn.events
    );
}

#[test]
fn disabled_toolsets_are_not_offered_and_refused_by_name() {
    let mut b = bench("toolsets", &[]);
    let r = b.g.call(
        "tools.configure",
        json!({"action": "disable", "names": ["file", "web"]}),
    );
    assert_eq!(r["changed"], json!(["file"]));
    assert_eq!(r["unknown"], json!(["web"]));
    let (_, row) = b.call("read_file", json!({"path": "x"}));
    assert!(row["error"].as_str().unwrap().contains("disabled"), "{row}");
    let list = b.g.call("slash.exec", json!({"command": "tools list"}));
    assert!(
        !list["output"].as_str().unwrap_or("").contains("read_file("),
        "{list}"
    );
    let on =
        b.g.call("slash.exec", json!({"command": "tools enable file"}));
    assert!(
        on["output"]
            .as_str()
            .unwrap_or("")
            .contains("Enabled: file."),
        "{on}"
    );
    let (_, row) = b.call("read_file", json!({"path": "x"}));
    assert!(
        row["error"].as_str().unwrap().contains("File not found"),
        "{row}"
    );
}

/// `config.yaml` toolsets choose what the model is sent; the system prompt names the cwd and
/// carries AGENTS.md and the memory; the model's `patch` call edits the file and its result goes
/// back to the model.
#[test]
fn the_models_patch_call_round_trips_with_the_system_prompt_and_toolsets() {
    let home = TempHome::new("fmodel-home");
    let work = TempHome::new("fmodel-work");
    std::fs::write(
        home.path.join("config.yaml"),
        "toolsets:\n  - terminal\n  - file\n  - memory\n",
    )
    .unwrap();
    std::fs::create_dir_all(home.path.join("memories")).unwrap();
    std::fs::write(home.path.join("memories/USER.md"), "prefers tabs").unwrap();
    std::fs::write(work.path.join("AGENTS.md"), "Always run the tests.").unwrap();
    std::fs::write(
        work.path.join("main.rs"),
        "fn main() {\r\n    old();\r\n}\r\n",
    )
    .unwrap();
    let args =
        json!({"path": "main.rs", "old_string": "old();", "new_string": "new();"}).to_string();
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(vec![
            ev_role(),
            ev_tool_start(0, "call_p", "patch", &args),
            ev_finish("tool_calls"),
            ev_usage(10, 5),
        ])),
        Reply::text(&["patched"], (10, 2)),
    ]);
    let mut g = Gateway::builder()
        .tag("fmodel")
        .home(&home.path)
        .openai_mock(&mock.base_url())
        .start();
    let s = g.create_session(json!({"cwd": work.path.to_str().unwrap()}));
    let turn = g.run_turn(&s.id, "rename old to new");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    let done = turn.event("tool.complete");
    assert!(
        done["payload"]["inline_diff"]
            .as_str()
            .unwrap()
            .contains("+    new();"),
        "{done}"
    );
    assert_eq!(
        std::fs::read_to_string(work.path.join("main.rs")).unwrap(),
        "fn main() {\r\n    new();\r\n}\r\n",
        "CRLF kept"
    );
    let reqs = mock.wait_requests(2, T);
    let names: Vec<String> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "terminal",
            "process",
            "read_file",
            "write_file",
            "patch",
            "search_files",
            "memory"
        ]
    );
    let system = reqs[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains(&format!(
            "Current working directory: {}",
            work.path.display()
        )),
        "{system}"
    );
    assert!(
        system.contains("Always run the tests.") && system.contains("prefers tabs"),
        "{system}"
    );
    let sent = reqs[1].messages();
    let tool = sent.iter().find(|m| m["role"] == "tool").unwrap();
    let content: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["success"], true, "{tool}");
}

#[test]
fn memory_is_saved_where_hermes_reads_it() {
    let mut b = bench("memory", &[]);
    let (_, row) = b.call(
        "memory",
        json!({"target": "user", "action": "add", "content": "name is Ada"}),
    );
    assert_eq!(row["success"], true, "{row}");
    let (_, row) = b.call("memory", json!({"target": "user", "operations": [
        {"action": "add", "content": "likes Rust"}, {"action": "replace", "old_text": "Ada", "content": "name is Ada L."}]}));
    assert_eq!(row["entry_count"], 2, "{row}");
    let home = b.g.db_path().parent().unwrap().to_path_buf();
    let text = std::fs::read_to_string(home.join("memories/USER.md")).unwrap();
    assert_eq!(text, "name is Ada L.\n§\nlikes Rust");
    // config.yaml's limit, with Hermes' words when an entry would pass it.
    std::fs::write(home.join("config.yaml"), "memory:\n  user_char_limit: 40\n").unwrap();
    let (_, row) = b.call(
        "memory",
        json!({"target": "user", "action": "add", "content": "x".repeat(20)}),
    );
    assert_eq!(
        row["error"].as_str().unwrap().split(". ").next(),
        Some("Memory at 27/40 chars"),
        "{row}"
    );
    assert_eq!(row["usage"], "27/40");
    assert_eq!(
        std::fs::read_to_string(home.join("memories/USER.md")).unwrap(),
        text
    );
}

/// `session_search` in Hermes' shapes: the model's call finds another session by a word
/// (its window and bookends from state.db), never the calling session, and its result goes
/// back to the model; scroll, read and browse through `%session_search` turns.
#[test]
fn session_search_finds_other_sessions_and_never_the_callers() {
    let home = TempHome::new("recall-home");
    let call = json!({"query": "frobnicator"}).to_string();
    let mock = MockAi::script(vec![
        Reply::text(&["staged it"], (5, 3)),
        Reply::Stream(Stream::new(vec![
            ev_role(),
            ev_tool_start(0, "call_s", "session_search", &call),
            ev_finish("tool_calls"),
            ev_usage(10, 5),
        ])),
        Reply::text(&["found it"], (10, 2)),
    ]);
    let mut g = Gateway::builder()
        .tag("recall")
        .home(&home.path)
        .openai_mock(&mock.base_url())
        .start();
    let a = g.create_session(json!({}));
    let turn = g.run_turn(&a.id, "deploy the frobnicator to staging");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    // The caller's own prompt holds the word too: it must not be found.
    let b = g.create_session(json!({}));
    let turn = g.run_turn(&b.id, "what did we do with the frobnicator?");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    let done = &turn.event("tool.complete")["payload"];
    let r = &done["result"];
    assert_eq!(r["mode"], "discover", "{done}");
    assert_eq!(r["count"], 1, "{r}");
    let hit = &r["results"][0];
    assert_eq!(hit["session_id"], a.stored.as_str(), "{hit}");
    assert_eq!(hit["matched_role"], "user");
    assert!(
        hit["snippet"]
            .as_str()
            .unwrap()
            .contains(">>>frobnicator<<<"),
        "{hit}"
    );
    let window = hit["messages"].as_array().unwrap();
    let anchor: Vec<&Value> = window.iter().filter(|m| m["anchor"] == true).collect();
    assert_eq!(anchor.len(), 1, "{hit}");
    assert_eq!(anchor[0]["id"], hit["match_message_id"]);
    assert_eq!(anchor[0]["content"], "deploy the frobnicator to staging");
    assert!(window.iter().any(|m| m["content"] == "staged it"), "{hit}");
    let reqs = mock.wait_requests(3, T);
    let sent = reqs[2].messages();
    let tool = sent.iter().find(|m| m["role"] == "tool").unwrap();
    let back: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(back, *r, "the model reads what the TUI was told");
    let anchor_id = hit["match_message_id"].as_i64().unwrap();

    g.close_stdin();
    g.wait_exit(T);

    // The offline model's `%session_search` turns, from a third session.
    let mut g = Gateway::builder().tag("recall2").home(&home.path).start();
    let c = g.create_session(json!({}));
    let mut search = |args: Value| -> Value {
        let turn = g.run_turn(&c.id, &format!("%session_search {args}"));
        turn.event("tool.complete")["payload"]["result"].clone()
    };
    // Scroll into another session; the caller's own is refused.
    let r = search(json!({"session_id": a.stored, "around_message_id": anchor_id, "window": 1}));
    assert_eq!(r["mode"], "scroll", "{r}");
    assert_eq!(r["messages_before"], 0);
    assert_eq!(r["messages"][0]["anchor"], true, "{r}");
    assert_eq!(r["messages"].as_array().unwrap().len(), 2, "{r}");
    let r = search(json!({}));
    assert_eq!(r["mode"], "browse", "{r}");
    let listed: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [b.stored.as_str(), a.stored.as_str()], "{r}");
    let r = search(json!({"session_id": a.stored}));
    assert_eq!(r["mode"], "read", "{r}");
    assert_eq!(r["message_count"], 2, "{r}");
    assert_eq!(r["session_meta"]["source"], "tui");
    let r = search(json!({"session_id": "nope"}));
    assert_eq!(r["error"], "session_id not found: nope");
    let own = message_rows(&home.path.join("state.db"), &c.stored);
    let r = search(json!({"session_id": c.stored, "around_message_id": own[0].id}));
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("current session lineage"),
        "{r}"
    );
    assert_eq!(r["success"], false);
}

/// Compaction keeps the list in the new session (its pending and in-progress items, as Hermes
/// re-injects them), and a resume of that session has it back.
#[test]
fn the_todo_list_survives_compaction_and_its_resume() {
    let home = TempHome::new("todoc-home");
    let mut g = Gateway::builder().home(&home.path).tag("todoc").start();
    let s = g.create_session(json!({}));
    let plan = json!({"todos": [{"id": "1", "content": "read the code", "status": "completed"},
                                {"id": "2", "content": "fix it", "status": "in_progress"},
                                {"id": "3", "content": "ship it", "status": "pending"}]});
    g.run_turn(&s.id, &format!("%todo {plan}"));
    g.run_turn(&s.id, "tell me about otters");
    g.run_turn(&s.id, "and beavers");
    let r = g.call("session.compress", json!({"session_id": s.id}));
    assert_eq!(r["status"], "compressed", "{r}");
    let new_stored = r["session_key"].as_str().unwrap().to_string();
    let active = json!([{"id": "2", "content": "fix it", "status": "in_progress"},
                        {"id": "3", "content": "ship it", "status": "pending"}]);
    let turn = g.run_turn(&s.id, "%todo {}");
    assert_eq!(turn.event("tool.complete")["payload"]["todos"], active);
    // What the model reads of it in the new session, as Hermes words it.
    let rows = message_rows(&g.db_path(), &new_stored);
    assert!(
        rows.iter().any(|r| r.role == "system"
            && r.content.as_deref().is_some_and(|c| c.starts_with(
                "[Your active task list was preserved across context compression]\n- [>] 2. fix it (in_progress)"
            ))),
        "{rows:#?}"
    );
    g.close_stdin();
    g.wait_exit(T);

    let mut g = Gateway::builder().home(&home.path).tag("todoc2").start();
    let r = g.call("session.resume", json!({"session_id": new_stored}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let turn = g.run_turn(
        &sid,
        r#"%todo {"merge": true, "todos": [{"id": "2", "status": "completed"}]}"#,
    );
    let todos = &turn.event("tool.complete")["payload"]["todos"];
    assert_eq!(todos[0]["status"], "completed", "{todos}");
    assert_eq!(todos[1]["content"], "ship it", "{todos}");
}

/// A directory removed when the test ends.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `n` files `f0000.txt`… under `dir`, the ones `needle(i)` picks holding a match: hard
/// links to two files under `dir/..`, as a tree of this size is made in well under a second.
fn files_in(dir: &std::path::Path, n: usize, needle: impl Fn(usize) -> bool) {
    let parent = dir.parent().unwrap();
    let (hit, miss) = (parent.join(".hit"), parent.join(".miss"));
    if !hit.exists() {
        std::fs::create_dir_all(parent).unwrap();
        std::fs::write(&hit, "hay\nthe needle\nhay\n").unwrap();
        std::fs::write(&miss, "hay\nhay\n").unwrap();
    }
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let from = if needle(i) { &hit } else { &miss };
        std::fs::hard_link(from, dir.join(format!("f{i:04}.txt"))).unwrap();
    }
}

#[test]
fn search_files_pages_through_a_tree_of_100000_files_skipping_ignored_and_binary_ones() {
    let mut b = bench("files-tree", &[]);
    // In memory where there is a tmpfs: a disk takes seconds for 100,000 entries.
    let tree = Removed(match std::path::Path::new("/dev/shm") {
        shm if shm.is_dir() => shm.join(b.work.file_name().unwrap()),
        _ => b.work.join("tree"),
    });
    std::fs::create_dir_all(&tree.0).unwrap();
    let s = b.g.create_session(json!({"cwd": tree.0.to_str().unwrap()}));
    (b.sid, b.stored, b.work) = (s.id, s.stored, tree.0.clone());
    // 40,000 files searched (one in 50 matches), 60,000 in an ignored `vendor/` that all
    // match, ignored logs and binary files that match too.
    std::fs::write(b.path(".gitignore"), "vendor/\n*.log\n").unwrap();
    for d in 0..200 {
        files_in(&b.path(&format!("src/d{d:03}")), 200, |i| i % 50 == 7);
    }
    for d in 0..300 {
        files_in(&b.path(&format!("vendor/d{d:03}")), 200, |_| true);
    }
    for d in 0..50 {
        let sub = b.path(&format!("src/d{d:03}"));
        std::fs::write(sub.join("blob.bin"), b"the needle\0\x01\x02").unwrap();
        std::fs::write(sub.join("run.log"), "the needle\n").unwrap();
    }
    let want = |d: usize, i: usize| json!({"path": format!("src/d{d:03}/f{i:04}.txt"), "line": 2, "content": "the needle"});

    let (done, row) = b.call("search_files", json!({"pattern": "needle", "limit": 3}));
    assert_eq!(row["total_count"], 800, "{row}");
    assert_eq!(row["truncated"], true);
    assert_eq!(
        row["matches"],
        json!([want(0, 7), want(0, 57), want(0, 107)])
    );
    assert!(
        done["summary"].as_str().unwrap_or("").contains("800"),
        "{done}"
    );
    // The last page, with context lines.
    let (_, row) = b.call(
        "search_files",
        json!({"pattern": "needle", "context": 1, "offset": 2394, "limit": 10}),
    );
    let last = |i: usize| {
        let path = format!("src/d199/f{i:04}.txt");
        json!([
            {"path": path, "line": 1, "content": "hay"},
            {"path": path, "line": 2, "content": "the needle"},
            {"path": path, "line": 3, "content": "hay"},
        ])
    };
    let tail: Vec<Value> = [last(157), last(107)]
        .into_iter()
        .rev()
        .flat_map(|v| v.as_array().unwrap().clone())
        .collect();
    assert_eq!(row["matches"], json!(tail), "{row}");
    assert!(row.get("truncated").is_none(), "{row}");

    // File lists page in the walk's order; counts per file; names skip ignored directories.
    let (_, row) = b.call(
        "search_files",
        json!({"pattern": "needle", "output_mode": "files_only", "offset": 798, "limit": 5}),
    );
    assert_eq!(row["total_count"], 800, "{row}");
    assert_eq!(
        row["files"],
        json!(["src/d199/f0107.txt", "src/d199/f0157.txt"]),
        "{row}"
    );
    let (_, row) = b.call(
        "search_files",
        json!({"pattern": "needle", "output_mode": "count", "path": "src/d003"}),
    );
    assert_eq!(row["total_count"], 4, "{row}");
    assert_eq!(row["counts"]["src/d003/f0007.txt"], 1, "{row}");
    let (_, row) = b.call(
        "search_files",
        json!({"pattern": "f0007.txt", "target": "files"}),
    );
    assert_eq!(
        row["total_count"], 200,
        "ignored directories are not listed: {row}"
    );
}

#[test]
fn relative_paths_follow_the_terminals_cd_as_in_hermes() {
    let mut b = bench("files-cd", &[]);
    std::fs::create_dir_all(b.path("sub")).unwrap();
    std::fs::write(b.path("x.txt"), "top\n").unwrap();
    std::fs::write(b.path("sub/x.txt"), "in sub\n").unwrap();
    let (_, row) = b.call("read_file", json!({"path": "x.txt"}));
    assert_eq!(row["content"], "1|top", "{row}");

    let (_, row) = b.call("terminal", json!({"command": "cd sub"}));
    assert_eq!(row["exit_code"], 0, "{row}");
    let (_, row) = b.call("read_file", json!({"path": "x.txt"}));
    assert_eq!(row["content"], "1|in sub", "{row}");
    let (_, row) = b.call(
        "patch",
        json!({"path": "x.txt", "old_string": "in sub", "new_string": "patched in sub"}),
    );
    assert_eq!(row["success"], true, "{row}");
    let (_, row) = b.call("write_file", json!({"path": "new.txt", "content": "n\n"}));
    assert_eq!(
        row["bytes_written"], 2,
        "inside the session's directory: no approval: {row}"
    );
    let (_, row) = b.call("search_files", json!({"pattern": "patched"}));
    assert_eq!(row["matches"][0]["path"], "x.txt", "{row}");
    assert_eq!(
        std::fs::read_to_string(b.path("sub/x.txt")).unwrap(),
        "patched in sub\n"
    );
    assert_eq!(
        std::fs::read_to_string(b.path("sub/new.txt")).unwrap(),
        "n\n"
    );
    assert_eq!(std::fs::read_to_string(b.path("x.txt")).unwrap(), "top\n");

    // A `workdir` is for its command only; `cd ..` comes back.
    let top = b.work.to_str().unwrap().to_string();
    let (_, row) = b.call("terminal", json!({"command": "pwd", "workdir": top}));
    assert_eq!(row["output"].as_str().unwrap().trim(), top, "{row}");
    let (_, row) = b.call("read_file", json!({"path": "x.txt"}));
    assert_eq!(row["content"], "1|patched in sub", "{row}");
    b.call("terminal", json!({"command": "cd .."}));
    let (_, row) = b.call("read_file", json!({"path": "x.txt"}));
    assert_eq!(row["content"], "1|top", "{row}");

    // The boundary of free writes is the session's directory, wherever the shell went: a
    // relative write after `cd /` lands in `/` and asks.
    b.call("terminal", json!({"command": "cd /"}));
    let name = format!("tuigw-outside-{}.txt", std::process::id());
    let start = submit(
        &mut b.g,
        &b.sid,
        &format!("%write_file {}", json!({"path": name, "content": "x"})),
    );
    let req = b.g.wait_session_event(&b.sid, "approval.request", T);
    let p = &req["payload"];
    assert!(
        p["description"]
            .as_str()
            .unwrap()
            .contains("outside the working directory"),
        "{p}"
    );
    assert_eq!(p["command"], format!("write /{name}"), "{p}");
    b.g.call(
        "approval.respond",
        json!({"session_id": b.sid, "choice": "deny"}),
    );
    b.g.finish_turn(&b.sid, start, T);
    assert!(!Path::new("/").join(&name).exists());
}

#[test]
fn a_write_through_a_link_lands_where_the_approval_judged() {
    let mut b = bench("links", &[]);
    let outside = TempHome::new("links-outside");
    // A live link: its target is written, the link stays.
    std::fs::write(b.path("real.txt"), "old\n").unwrap();
    std::os::unix::fs::symlink("real.txt", b.path("live")).unwrap();
    let (_, row) = b.call("write_file", json!({"path": "live", "content": "new\n"}));
    assert_eq!(row["bytes_written"], 4, "{row}");
    assert!(
        std::fs::symlink_metadata(b.path("live"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(b.path("real.txt")).unwrap(),
        "new\n"
    );
    // A dangling link to a file outside the working directory: written in place of the link
    // (no approval asked, none needed), the file it named never created.
    let planted = outside.path.join("planted.txt");
    std::os::unix::fs::symlink(&planted, b.path("dangling")).unwrap();
    let (_, row) = b.call(
        "write_file",
        json!({"path": "dangling", "content": "here\n"}),
    );
    assert_eq!(row["bytes_written"], 5, "{row}");
    let meta = std::fs::symlink_metadata(b.path("dangling")).unwrap();
    assert!(meta.file_type().is_file(), "{meta:?}");
    assert_eq!(
        std::fs::read_to_string(b.path("dangling")).unwrap(),
        "here\n"
    );
    assert!(!planted.exists());
}
