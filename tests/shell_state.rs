//! The `terminal` tool's persistent shell, over the real binary: the working directory and the
//! exported variables go from one call to the next, and across a gateway restart and
//! `session.resume`; sessions do not see each other's, a branch starts from its parent's; secret-looking variables are not kept;
//! `workdir` is one call's; bad arguments are tool errors the model reads; a command that exits,
//! or whose directory is deleted, leaves a usable state; nothing is left running or on disk.

use crate::common;
use crate::mockai;
use crate::procs;

use common::*;
use mockai::*;
use procs::*;
use serde_json::{Value, json};
use std::path::Path;

/// Run one prompt of the offline model; the result of its (one) tool call.
fn call(g: &mut Gateway, sid: &str, prompt: &str) -> Value {
    let turn = g.run_turn(sid, prompt);
    let c = turn
        .events
        .iter()
        .find(|e| e["type"] == "tool.complete")
        .unwrap_or_else(|| panic!("no tool.complete for {prompt:?}: {:?}", types(&turn.events)));
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "the turn goes on whatever the tool said: {}",
        turn.complete
    );
    tool_result(c).clone()
}

fn output(r: &Value) -> &str {
    r["output"]
        .as_str()
        .unwrap_or_else(|| panic!("no output: {r}"))
        .trim_end()
}

fn session_in(g: &mut Gateway, cwd: &Path) -> Session {
    g.create_session(json!({"cwd": cwd.to_str().unwrap()}))
}

/// The gateway exits; no process of the commands (found by `marker`) and no run file in
/// `$HERMES_HOME/shell` is left.
fn exit_leaving_nothing(mut g: Gateway, home: &Path, marker: &str) {
    g.close_stdin();
    g.wait_exit(T);
    assert_none_left(marker, secs(3), "the commands");
    let left: Vec<String> = std::fs::read_dir(home.join("shell"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".run-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "run files left: {left:?}");
}

#[test]
fn cd_and_export_persist_between_calls_and_across_a_restart_per_session() {
    let m = marker();
    let home = TempHome::new("shell");
    let (work, there) = (home.path.join("work"), home.path.join(format!("there-{m}")));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&there).unwrap();
    let there_s = there.to_str().unwrap();

    let mut g = Gateway::builder().home(&home.path).start();
    let a = session_in(&mut g, &work);
    let b = session_in(&mut g, &work);
    let r = call(
        &mut g,
        &a.id,
        &format!("$ cd {there_s} && export FOO=\"it's \\\"q\\\"\" ML=$'l1\\nl2' && echo moved"),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let show = "$ pwd; printf '[%s]' \"$FOO\" \"$ML\"";
    let r = call(&mut g, &a.id, show);
    assert_eq!(
        output(&r),
        format!("{there_s}\n[it's \"q\"][l1\nl2]"),
        "{r}"
    );
    // The other session has its own shell.
    let r = call(&mut g, &b.id, show);
    assert_eq!(output(&r), format!("{}\n[][]", work.display()), "{r}");
    // A branch goes on from its parent's shell, and then on its own.
    let br = g.call("session.branch", json!({"session_id": a.id}));
    let br = br["session_id"].as_str().unwrap().to_string();
    let r = call(&mut g, &br, &format!("{show}; cd {}", work.display()));
    assert_eq!(
        output(&r),
        format!("{there_s}\n[it's \"q\"][l1\nl2]"),
        "{r}"
    );
    g.close_stdin();
    g.wait_exit(T);

    // A new gateway on the same home: the resumed session goes on where it was.
    let mut g = Gateway::builder().home(&home.path).start();
    let r = g.call("session.resume", json!({"session_id": a.stored}));
    let ra = r["session_id"].as_str().unwrap().to_string();
    let r = call(&mut g, &ra, show);
    assert_eq!(
        output(&r),
        format!("{there_s}\n[it's \"q\"][l1\nl2]"),
        "{r}"
    );
    let fresh = session_in(&mut g, &work);
    let r = call(&mut g, &fresh.id, show);
    assert_eq!(output(&r), format!("{}\n[][]", work.display()), "{r}");
    exit_leaving_nothing(g, &home.path, &m);
}

/// Whatever bytes a value holds, bash's listing of it is read back exactly: quotes, `$`, a
/// backslash, control characters, UTF-8, a newline; in POSIX mode too. An exported array and a
/// variable exported without a value are not in a child's environment, so not kept.
#[test]
fn any_value_bash_can_export_is_kept_exactly() {
    let m = marker();
    let home = TempHome::new("shell");
    let mut g = Gateway::builder().home(&home.path).start();
    let s = session_in(&mut g, &home.path);
    let show = "$ printf '[%q]' \"$ODD\" \"$NL\" \"$UTF\"; \
                echo \" ${NOVAL-none} ${ARR-none} ${PLAIN-none}\"";
    let set = r#"$ set -o posix; export ODD=$'q"$`\\ \t\001\033z\177' NL=$'l1\\\nl2' UTF='é ü' PLAIN=p; export NOVAL; declare -ax ARR=(1 2); "#;
    let r = call(&mut g, &s.id, &format!("{set}{}", &show[2..]));
    assert_eq!(r["exit_code"], 0, "{r}");
    // `%q` of the three values as the shell that set them prints them; the array is its own.
    let values = output(&r)
        .strip_suffix(" none 1 p")
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    assert!(values.starts_with("[$'q\"$`\\\\ \\t"), "{values}");
    let r = call(&mut g, &s.id, show);
    assert_eq!(output(&r), format!("{values} none none p"), "{r}");
    exit_leaving_nothing(g, &home.path, &m);
}

#[test]
fn workdir_secrets_exits_deleted_dirs_and_bad_arguments() {
    let m = marker();
    let home = TempHome::new("shell-edges");
    let work = home.path.join("work");
    let other = home.path.join(format!("other-{m}"));
    let doomed = home.path.join(format!("doomed-{m}"));
    for d in [&work, &other, &doomed] {
        std::fs::create_dir_all(d).unwrap();
    }
    let (work_s, other_s, doomed_s) = (
        work.to_str().unwrap(),
        other.to_str().unwrap(),
        doomed.to_str().unwrap(),
    );
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUIGW_TEST_SERVICE_TOKEN", "t0ps3cret")
        .start();
    let s = session_in(&mut g, &work);

    // workdir is this call's directory; the next call is back in the session's.
    let arg = |v: Value| format!("%terminal {v}");
    let r = call(
        &mut g,
        &s.id,
        &arg(json!({"command": "pwd", "workdir": other_s})),
    );
    assert_eq!(output(&r), other_s, "{r}");
    let r = call(
        &mut g,
        &s.id,
        &arg(json!({"command": "pwd", "cwd": other_s})),
    );
    assert_eq!(output(&r), other_s, "cwd is workdir's older name: {r}");
    let r = call(&mut g, &s.id, "$ pwd");
    assert_eq!(output(&r), work_s, "{r}");

    // A secret-looking variable is not kept (and said); the gateway's own secret never shows.
    let r = call(&mut g, &s.id, "$ export DEPLOY_TOKEN=abc123 PLAIN=ok");
    assert!(
        output(&r).contains("not kept") && output(&r).contains("DEPLOY_TOKEN"),
        "{r}"
    );
    let r = call(
        &mut g,
        &s.id,
        "$ echo \"[$DEPLOY_TOKEN][$PLAIN][$TUIGW_TEST_SERVICE_TOKEN]\"",
    );
    assert_eq!(output(&r), "[][ok][]", "{r}");
    let saved = std::fs::read_to_string(home.path.join("shell").join(format!("{}.json", s.stored)))
        .unwrap();
    assert!(
        saved.contains("PLAIN") && !saved.contains("abc123") && !saved.contains("t0ps3cret"),
        "{saved}"
    );

    // A command that exits keeps its status, and its state.
    let r = call(
        &mut g,
        &s.id,
        &format!("$ cd {other_s}; export AFTER=exit; exit 3"),
    );
    assert_eq!(r["exit_code"], 3, "{r}");
    let r = call(&mut g, &s.id, "$ echo \"$PWD $AFTER\"");
    assert_eq!(output(&r), format!("{other_s} exit"), "{r}");

    // Timed out: what the shell wrote as it was stopped is kept.
    let r = call(
        &mut g,
        &s.id,
        &arg(
            json!({"command": format!("cd {work_s}; export STOPPED=1; sleep 30.{m}"), "timeout": 0.5}),
        ),
    );
    assert_eq!(r["exit_code"], 124, "{r}");
    let r = call(&mut g, &s.id, "$ echo \"$PWD $STOPPED\"");
    assert_eq!(output(&r), format!("{work_s} 1"), "{r}");

    // An environment over the cap is not kept (said); the previous state stands.
    let r = call(
        &mut g,
        &s.id,
        "$ export A=$(printf '%150000s' a) B=$(printf '%150000s' b)",
    );
    assert!(
        output(&r).contains("shell state not kept: the exported environment is 3"),
        "{r}"
    );
    let r = call(&mut g, &s.id, "$ echo \"${#A} $STOPPED\"");
    assert_eq!(output(&r), "0 1", "{r}");

    // The directory the shell was left in is gone: the next command runs in the session's.
    call(
        &mut g,
        &s.id,
        &format!("$ cd {doomed_s} && rmdir {doomed_s}"),
    );
    let r = call(&mut g, &s.id, "$ pwd");
    let out = output(&r);
    assert!(
        out.starts_with(work_s) && out.contains(&format!("{doomed_s} no longer exists")),
        "{r}"
    );

    // Bad arguments: tool errors the model reads, stored as the tool row; the turn goes on.
    for (args, says) in [
        (json!({"command": 5}), "command must be a string"),
        (
            json!({"command": "ls", "timeout": "soon"}),
            "timeout must be",
        ),
        (
            json!({"command": "ls", "timeout": 100000}),
            "exceeds the maximum",
        ),
        (
            json!({"command": "ls", "workdir": ["x"]}),
            "workdir must be a string",
        ),
        (
            json!({"command": "ls", "workdir": "/nonexistent/dir"}),
            "not a directory",
        ),
        (
            json!({"command": "ls", "pty": true}),
            "pty=true is not supported",
        ),
    ] {
        let r = call(&mut g, &s.id, &arg(args.clone()));
        assert!(
            r["error"].as_str().unwrap_or("").contains(says),
            "{args} → {r}"
        );
    }
    let turn = g.run_turn(&s.id, "%terminal not json");
    let c = turn
        .events
        .iter()
        .find(|e| e["type"] == "tool.complete")
        .unwrap();
    let stored = stored_tool_result(&g, &s.stored, c);
    assert!(
        stored["error"]
            .as_str()
            .unwrap_or("")
            .contains("JSON object"),
        "{stored}"
    );
    exit_leaving_nothing(g, &home.path, &m);
}

/// A Hermes-shaped tool call from an OpenAI-compatible model: the schema offers Hermes'
/// arguments, and a `workdir` call's exports reach the next call.
#[test]
fn a_model_calls_terminal_with_hermes_arguments_and_the_shell_persists() {
    let home = TempHome::new("shell-openai");
    let dir = home.path.join("proj");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let tool_call = |id: &str, args: Value| {
        Reply::Stream(Stream::new(vec![
            ev_role(),
            ev_tool_start(0, id, "terminal", &args.to_string()),
            ev_finish("tool_calls"),
            ev_usage(5, 5),
        ]))
    };
    let mock = MockAi::script(vec![
        tool_call(
            "call_1",
            json!({"command": "export STAGE=two && cd sub", "workdir": dir.to_str().unwrap(), "timeout": 30}),
        ),
        Reply::text(&["moved"], (5, 1)),
        tool_call("call_2", json!({"command": "echo \"$STAGE $PWD\""})),
        Reply::text(&["shown"], (5, 1)),
    ]);
    let mut g = Gateway::builder()
        .home(&home.path)
        .openai_mock(&mock.base_url())
        .start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "go to sub");
    let turn = g.run_turn(&s.id, "show it");
    let c = turn
        .events
        .iter()
        .find(|e| e["type"] == "tool.complete")
        .unwrap();
    assert_eq!(
        output(tool_result(c)),
        format!("two {}/sub", dir.display()),
        "{c}"
    );
    let reqs = mock.wait_requests(4, T);
    let term = reqs[0].body["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["function"]["name"] == "terminal"))
        .cloned()
        .unwrap_or_default();
    let props = &term["function"]["parameters"]["properties"];
    for name in [
        "command",
        "timeout",
        "workdir",
        "background",
        "notify_on_complete",
        "pty",
    ] {
        assert!(props[name].is_object(), "{name} offered: {term}");
    }
    // The model read the second command's result.
    let tool_msg = reqs[3]
        .messages()
        .into_iter()
        .rfind(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        tool_msg["content"].as_str().unwrap_or("").contains("two "),
        "{tool_msg}"
    );
}

#[test]
fn background_commands_start_in_the_sessions_shell_and_a_run_keeps_only_what_it_changed() {
    let m = marker();
    let home = TempHome::new("shell-bg");
    let there = home.path.join(format!("there-{m}"));
    std::fs::create_dir_all(&there).unwrap();
    let there_s = there.to_str().unwrap();
    let mut g = Gateway::builder().home(&home.path).start();
    let s = session_in(&mut g, &home.path);
    call(&mut g, &s.id, &format!("$ cd {there_s} && export FOO=bar"));

    // A background command starts where the session is, with its variables; its own changes
    // are its own.
    let show = "printf '%s [%s]' \"$PWD\" \"$FOO\"";
    let bg =
        json!({"command": format!("{show}; cd /; export FOO=changed # {m}"), "background": true});
    let r = call(&mut g, &s.id, &format!("%terminal {bg}"));
    let id = r["session_id"].as_str().unwrap_or_else(|| panic!("{r}"));
    let wait = json!({"action": "wait", "session_id": id});
    let w = call(&mut g, &s.id, &format!("%process {wait}"));
    assert_eq!(
        (&w["status"], &w["output"]),
        (&json!("exited"), &json!(format!("{there_s} [bar]"))),
        "{w}"
    );
    let r = call(&mut g, &s.id, &format!("$ {show}"));
    assert_eq!(output(&r), format!("{there_s} [bar]"), "{r}");

    // Another writer saves the session's state while a command runs (a gateway holds a session
    // alone, and its calls run one after the other, so only another process can): the
    // command's end keeps what it changed and what the other saved.
    let go = home.path.join(format!("go-{m}"));
    let waiting = format!(
        "$ export A=1; while [ ! -e {} ]; do sleep 0.02; done # {m}",
        go.display()
    );
    let start = submit(&mut g, &s.id, &waiting);
    g.wait_session_event(&s.id, "tool.start", T);
    let saved = home.path.join("shell").join(format!("{}.json", s.stored));
    let mut state: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    state["set"]["B"] = json!("2");
    std::fs::write(&saved, state.to_string()).unwrap();
    std::fs::write(&go, "").unwrap();
    let t = g.finish_turn(&s.id, start, T);
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{:?}",
        t.complete
    );
    let r = call(&mut g, &s.id, "$ echo \"[$A][$B][$FOO] $PWD\"");
    assert_eq!(output(&r), format!("[1][2][bar] {there_s}"), "{r}");
    exit_leaving_nothing(g, &home.path, &m);
}
