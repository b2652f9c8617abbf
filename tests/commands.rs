//! Slash commands and completion over the real binary: `commands.catalog` in the TUI's shape,
//! `complete.slash`, `complete.path` on a real tree (relative, `~`, absolute, `@file:`,
//! `@folder:`, hidden files, a 100,000-entry directory), `slash.exec` / `command.dispatch`
//! reports, quick commands from config.yaml (exec, alias, failure, timeout, shutdown), the
//! answer to an unsupported command, and bad params.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;

const QUICK: &str = r#"
model:
  provider: offline
quick_commands:
  hi: {type: exec, command: "echo hello-$((6*7))", description: say hello}
  fail: {type: exec, command: "echo oops; exit 3"}
  slow: {type: exec, command: "sleep 30", timeout: 1}
  longer: {type: exec, command: "sleep 30"}
  where: {type: exec, command: "pwd"}
  secret: {type: exec, command: "echo key=[$MY_TEST_API_KEY]"}
  st: {type: alias, target: /status}
  greet: {type: alias, target: hi}
  loop1: {type: alias, target: loop2}
  loop2: {type: alias, target: loop1}
  status: {type: exec, command: "echo shadowed"}
  "bad name": {type: exec, command: "true"}
"#;

fn with_config(yaml: &str) -> (TempHome, Gateway) {
    let home = TempHome::new("cmds");
    std::fs::write(home.path.join("config.yaml"), yaml).unwrap();
    let g = Gateway::builder()
        .home(&home.path)
        .env("MY_TEST_API_KEY", "s3cret")
        .start();
    (home, g)
}

/// `complete.slash`'s answer to `text`, and its `replace_from`.
fn complete_slash(g: &mut Gateway, text: &str) -> (Value, u64) {
    let r = g.call("complete.slash", json!({"text": text}));
    let from = r["replace_from"].as_u64().unwrap();
    (r, from)
}

fn texts(r: &Value) -> Vec<String> {
    r["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {r}"))
        .iter()
        .map(|i| i["text"].as_str().unwrap().to_string())
        .collect()
}

fn output(r: &Value) -> String {
    r["output"]
        .as_str()
        .unwrap_or_else(|| panic!("no output: {r}"))
        .to_string()
}

#[test]
fn catalog_has_the_tui_shape_and_lists_what_we_support() {
    let (_h, mut g) = with_config(QUICK);
    let c = g.call("commands.catalog", json!({}));
    let pairs = c["pairs"].as_array().expect("pairs");
    let names: Vec<&str> = pairs
        .iter()
        .map(|p| {
            let p = p.as_array().expect("pair is an array");
            assert_eq!(p.len(), 2, "{p:?}");
            assert!(p[1].as_str().is_some_and(|d| !d.is_empty()), "{p:?}");
            p[0].as_str().unwrap()
        })
        .collect();
    for want in [
        "/help", "/status", "/tools", "/skills", "/version", "/config", "/usage", "/model",
        "/yolo", "/undo", "/retry", "/branch", "/steer", "/quit", "/hi", "/st",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // a quick command may not shadow a built-in, a bad name is skipped: both said in `warning`
    assert_eq!(names.iter().filter(|n| **n == "/status").count(), 1);
    assert!(!names.iter().any(|n| n.contains("bad")));
    let warning = c["warning"].as_str().unwrap();
    assert!(
        warning.contains("/status") && warning.contains("bad name"),
        "{warning}"
    );
    // every pair is in exactly one category, in the same order
    let cats = c["categories"].as_array().unwrap();
    let in_cats: Vec<&Value> = cats
        .iter()
        .flat_map(|cat| {
            assert!(cat["name"].as_str().is_some_and(|n| !n.is_empty()), "{cat}");
            cat["pairs"].as_array().unwrap()
        })
        .collect();
    assert_eq!(in_cats.len(), pairs.len());
    let user = cats
        .iter()
        .find(|c| c["name"] == "User commands")
        .expect("User commands");
    assert!(
        user["pairs"]
            .as_array()
            .unwrap()
            .contains(&json!(["/hi", "say hello"])),
        "{user}"
    );
    // aliases resolve to their command; every command to itself
    assert_eq!(c["canon"]["/fork"], "/branch");
    assert_eq!(c["canon"]["/v"], "/version");
    for n in &names {
        assert_eq!(c["canon"][n.to_string()], json!(n), "{n}");
    }
    assert!(
        c["sub"]["/mouse"]
            .as_array()
            .is_some_and(|s| s.contains(&json!("wheel")))
    );
    assert_eq!(c["skill_count"], 0);
}

#[test]
fn slash_completion_from_the_catalog() {
    let (_h, mut g) = with_config(QUICK);
    let r = g.call("complete.slash", json!({"text": "/he"}));
    assert_eq!(r["replace_from"], 1);
    let item = &r["items"][0];
    assert_eq!(item["text"], "help", "{r}");
    assert_eq!(item["display"], "/help");
    assert!(item["meta"].as_str().is_some_and(|m| !m.is_empty()));
    // an exact name keeps the popup open with a trailing space
    assert_eq!(
        texts(&g.call("complete.slash", json!({"text": "/help"}))),
        ["help "]
    );
    // aliases and quick commands complete; a shadowed quick command does not appear twice
    assert!(texts(&g.call("complete.slash", json!({"text": "/fo"}))).contains(&"fork".into()));
    let all = texts(&g.call("complete.slash", json!({"text": "/"})));
    assert!(
        all.contains(&"new".into()) && !all.contains(&"fork".into()),
        "{all:?}"
    );
    assert_eq!(
        texts(&g.call("complete.slash", json!({"text": "/gr"}))),
        ["greet"]
    );
    let st = texts(&g.call("complete.slash", json!({"text": "/status"})));
    assert_eq!(
        st.iter().filter(|t| t.trim() == "status").count(),
        1,
        "{st:?}"
    );
    assert!(texts(&g.call("complete.slash", json!({"text": "/zzz"}))).is_empty());
    assert!(texts(&g.call("complete.slash", json!({"text": "hello"}))).is_empty());
    // words after a command
    let r = g.call("complete.slash", json!({"text": "/mouse wh"}));
    assert_eq!(
        (texts(&r), r["replace_from"].clone()),
        (vec!["wheel".to_string()], json!(7))
    );
}

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    for f in [
        "src/main.rs",
        "src/lib.rs",
        "notes.md",
        ".secret",
        "docs/a.md",
    ] {
        std::fs::write(root.join(f), "x").unwrap();
    }
}

#[test]
fn path_completion_on_a_real_tree() {
    let home = TempHome::new("cmds-home");
    let ws = home.path.join("ws");
    make_tree(&ws);
    make_tree(&home.path.join("mine"));
    let mut g = Gateway::builder()
        .env("HOME", home.path.to_str().unwrap())
        .env("HERMES_CWD", ws.to_str().unwrap())
        .start();
    let path = |g: &mut Gateway, p: Value| {
        let r = g.call("complete.path", p);
        texts(&r)
    };
    // relative to the gateway's cwd (HERMES_CWD, what the TUI's sessions use)
    assert_eq!(path(&mut g, json!({"word": "sr"})), ["src/"]);
    assert_eq!(
        path(&mut g, json!({"word": "src/"})),
        ["src/deep/", "src/lib.rs", "src/main.rs"]
    );
    assert_eq!(path(&mut g, json!({"word": "./src/m"})), ["./src/main.rs"]);
    let r = g.call("complete.path", json!({"word": "src/d"}));
    assert_eq!(
        r["items"][0],
        json!({"text": "src/deep/", "display": "deep/", "meta": "dir"})
    );
    // relative to a session's own cwd
    let s = g.create_session(json!({"cwd": ws.join("docs").to_str().unwrap()}));
    assert_eq!(
        path(&mut g, json!({"word": "a", "session_id": s.id})),
        ["a.md"]
    );
    // ~ and absolute
    assert_eq!(
        path(&mut g, json!({"word": "~/mine/no"})),
        ["~/mine/notes.md"]
    );
    let abs = format!("{}/src/li", ws.display());
    assert_eq!(path(&mut g, json!({"word": abs})), [format!("{abs}b.rs")]);
    // @ hints, @file: and @folder:
    assert_eq!(path(&mut g, json!({"word": "@"})), ["@file:", "@folder:"]);
    assert_eq!(
        path(&mut g, json!({"word": "@file:src/m"})),
        ["@file:src/main.rs"]
    );
    assert_eq!(
        path(&mut g, json!({"word": "@folder:"})),
        ["@folder:docs/", "@folder:src/"]
    );
    assert_eq!(
        path(&mut g, json!({"word": "@folder"})),
        ["@folder:docs/", "@folder:src/"]
    );
    // hidden entries only for a leading dot
    assert!(
        !path(&mut g, json!({"word": "./"}))
            .iter()
            .any(|t| t.contains(".secret"))
    );
    assert_eq!(path(&mut g, json!({"word": ".se"})), [".secret"]);
    // a missing directory, a file as a directory, nothing typed: empty, not an error
    assert!(path(&mut g, json!({"word": "nope/x"})).is_empty());
    assert!(path(&mut g, json!({"word": "notes.md/"})).is_empty());
    assert!(path(&mut g, json!({"word": ""})).is_empty());
}

#[test]
fn a_huge_directory_is_bounded() {
    let home = TempHome::new("cmds-huge");
    let big = home.path.join("big");
    std::fs::create_dir_all(&big).unwrap();
    for i in 0..100_000 {
        std::fs::File::create(big.join(format!("f{i:06}"))).unwrap();
    }
    let mut g = Gateway::builder()
        .env("HERMES_CWD", home.path.to_str().unwrap())
        .start();
    let ping = g.send_request("ping", json!({}));
    let r = g.call("complete.path", json!({"word": "big/f"}));
    let items = texts(&r);
    assert_eq!(items.len(), 30, "{r}");
    assert!(items.iter().all(|t| t.starts_with("big/f")), "{items:?}");
    assert!(items.windows(2).all(|w| w[0] < w[1]), "sorted: {items:?}");
    g.wait_response(&ping, T);
    g.ping();
}

#[test]
fn quick_commands_exec_alias_fail_and_time_out() {
    let (h, mut g) = with_config(QUICK);
    // exec, in both shapes the TUI reads
    assert_eq!(
        g.call("slash.exec", json!({"command": "hi"})),
        json!({"output": "hello-42"})
    );
    assert_eq!(
        g.call("command.dispatch", json!({"name": "hi", "arg": ""})),
        json!({"type": "exec", "output": "hello-42"})
    );
    // a failing command answers its output and exit status, not an error
    assert_eq!(
        output(&g.call("slash.exec", json!({"command": "fail"}))),
        "oops\n[exit 3]"
    );
    // secrets of the gateway's environment do not reach the command
    assert_eq!(
        output(&g.call("slash.exec", json!({"command": "secret"}))),
        "key=[]"
    );
    // it runs in the session's cwd
    let ws = h.path.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let s = g.create_session(json!({"cwd": ws.to_str().unwrap()}));
    let pwd = output(&g.call(
        "slash.exec",
        json!({"command": "where", "session_id": s.id}),
    ));
    assert_eq!(
        Path::new(&pwd).canonicalize().unwrap(),
        ws.canonicalize().unwrap()
    );
    // aliases: to a built-in the TUI dispatches again; to a quick command it runs here
    assert_eq!(
        g.call("slash.exec", json!({"command": "st"})),
        json!({"type": "alias", "target": "status"})
    );
    assert_eq!(
        g.call("slash.exec", json!({"command": "greet"})),
        json!({"output": "hello-42"})
    );
    assert!(output(&g.call("slash.exec", json!({"command": "loop1"}))).contains("loop"));
    // a built-in wins over a quick command of the same name
    let status = output(&g.call(
        "slash.exec",
        json!({"command": "status", "session_id": s.id}),
    ));
    assert!(
        status.contains(&s.id) && !status.contains("shadowed"),
        "{status}"
    );
    // the timeout: other calls are answered while it runs, then the answer says so
    let slow = g.send_request("slash.exec", json!({"command": "slow"}));
    g.ping();
    let r = g.wait_response(&slow, T);
    assert_eq!(output(&r["result"]), "[Command timed out after 1s]", "{r}");
}

#[test]
fn a_quick_command_running_at_shutdown_is_answered() {
    let (_h, mut g) = with_config(QUICK);
    let id = g.send_request("slash.exec", json!({"command": "longer"}));
    // Not a ping: a request waits behind one held for the skills' first scan, so its answer
    // says the first one was started (a ping goes ahead of both).
    assert!(output(&g.call("slash.exec", json!({"command": "where"}))).starts_with('/'));
    g.close_stdin();
    let r = g.wait_response(&id, T);
    assert_eq!(output(&r["result"]), "[Command interrupted]", "{r}");
    assert!(g.wait_exit(T).success());
}

#[test]
fn reports_and_unsupported_commands() {
    let (h, mut g) = with_config(QUICK);
    let s = g.create_session(json!({}));
    let status = output(&g.call(
        "slash.exec",
        json!({"command": "status", "session_id": s.id}),
    ));
    for want in [
        s.id.as_str(),
        s.stored.as_str(),
        "offline",
        "Messages",
        "Tokens",
        "Running",
    ] {
        assert!(status.contains(want), "{want} not in {status}");
    }
    assert_eq!(
        output(&g.call("slash.exec", json!({"command": "/status"}))),
        "no active session"
    );
    let usage = output(&g.call(
        "slash.exec",
        json!({"command": "usage", "session_id": s.id}),
    ));
    assert!(usage.contains("Input tokens"), "{usage}");
    let tools = output(&g.call("slash.exec", json!({"command": "tools list"})));
    assert!(
        tools.contains("(15)")
            && tools.contains("delegate_task(context?, goal?")
            && tools.contains("vision_analyze(image_url")
            && tools.contains("terminal(background?, command")
            && tools.contains("patch(mode"),
        "{tools}"
    );
    assert!(
        output(&g.call("slash.exec", json!({"command": "skills"}))).contains("No skills found")
    );
    let v = output(&g.call("slash.exec", json!({"command": "v"})));
    assert_eq!(v, format!("tui-gateway {}", env!("CARGO_PKG_VERSION")));
    let config = output(&g.call("slash.exec", json!({"command": "config"})));
    let file = h.path.join("config.yaml");
    assert!(
        config.contains(file.to_str().unwrap()) && config.contains("/hi"),
        "{config}"
    );
    let help = output(&g.call("slash.exec", json!({"command": "help"})));
    assert!(
        help.contains("/version") && help.contains("User commands"),
        "{help}"
    );
    // the same through command.dispatch
    let d = g.call("command.dispatch", json!({"name": "version"}));
    assert_eq!(d, json!({"type": "exec", "output": v}));
    // a command we do not support, and one the TUI runs itself: one clear line each
    let r = g.call("slash.exec", json!({"command": "frobnicate now"}));
    assert_eq!(
        output(&r),
        "/frobnicate is not supported by this gateway (/help lists the commands)"
    );
    let r = g.call("command.dispatch", json!({"name": "frobnicate"}));
    assert_eq!(r["type"], "exec");
    assert!(output(&r).contains("not supported"));
    // what the TUI's /skills hub and /tools disable call
    assert_eq!(
        g.call("skills.manage", json!({"action": "list"})),
        json!({"skills": {}})
    );
    let msg = g.expect_code(
        "skills.manage",
        json!({"action": "install", "query": "x"}),
        4040,
    );
    assert!(msg.contains("skill"), "{msg}");
    let r = g.call(
        "tools.configure",
        json!({"action": "disable", "names": ["web"]}),
    );
    assert_eq!(r["unknown"], json!(["web"]));
    let r = g.call(
        "tools.configure",
        json!({"action": "disable", "names": ["terminal"]}),
    );
    assert_eq!(r["changed"], json!(["terminal"]));
    let tools = output(&g.call("slash.exec", json!({"command": "tools list"})));
    assert!(
        tools.contains("(13)") && !tools.contains("terminal("),
        "{tools}"
    );
    g.call(
        "tools.configure",
        json!({"action": "enable", "names": ["terminal"]}),
    );
    let undo = output(&g.call("slash.exec", json!({"command": "undo"})));
    assert!(
        undo.contains("TUI") && undo.contains("session.undo"),
        "{undo}"
    );
}

#[test]
fn bad_params_name_the_field() {
    let mut g = Gateway::start();
    for (method, params, field) in [
        ("slash.exec", json!({}), "command"),
        ("slash.exec", json!({"command": 5}), "command"),
        (
            "slash.exec",
            json!({"command": "status", "session_id": 3}),
            "session_id",
        ),
        ("command.dispatch", json!({}), "name"),
        ("command.dispatch", json!({"name": "x", "arg": []}), "arg"),
        ("complete.path", json!({"word": 5}), "word"),
        ("complete.path", json!({"word": "a", "cwd": {}}), "cwd"),
        ("complete.slash", json!({"text": false}), "text"),
        ("skills.manage", json!({}), "action"),
        (
            "tools.configure",
            json!({"action": "enable", "names": "x"}),
            "names",
        ),
    ] {
        let msg = g.expect_code(method, params.clone(), -32602);
        assert!(msg.contains(field), "{method} {params}: {msg}");
    }
    g.expect_code("slash.exec", json!({"command": "  "}), 4004);
    g.expect_code(
        "slash.exec",
        json!({"command": "status", "session_id": "nope"}),
        4001,
    );
    g.expect_code(
        "command.dispatch",
        json!({"name": "status", "session_id": "nope"}),
        4001,
    );
    g.ping();
}

#[test]
fn a_broken_config_still_gives_a_catalog() {
    let (_h, mut g) = with_config("quick_commands: {a: [\n");
    let c = g.call("commands.catalog", json!({}));
    assert!(c["pairs"].as_array().is_some_and(|p| !p.is_empty()));
    assert!(
        c["warning"]
            .as_str()
            .is_some_and(|w| w.contains("quick_commands")),
        "{c}"
    );
    let r = g.call("slash.exec", json!({"command": "a"}));
    assert!(output(&r).contains("not supported"), "{r}");
}

#[test]
fn tools_are_listed_by_toolset_in_lines_that_fit_the_terminal() {
    let h = TempHome::new("cmd-tools-width");
    let mut g = Gateway::builder().home(&h.path).start();
    let s = g.create_session(json!({"cols": 60}));
    let tools = output(&g.call(
        "slash.exec",
        json!({"command": "tools", "session_id": s.id}),
    ));
    let lines: Vec<&str> = tools.lines().collect();
    assert!(
        lines[0].starts_with("Tools offered to the model ("),
        "{tools}"
    );
    // Each toolset heads its tools: the terminal tool sits under `terminal (N):`.
    let header = lines
        .iter()
        .position(|l| l.starts_with("terminal ("))
        .unwrap_or_else(|| panic!("no terminal toolset in {tools}"));
    assert!(lines[header + 1].starts_with("  terminal("), "{tools}");
    // The TUI's pager counts lines: none may wrap in 60 columns (its frame takes 8).
    for l in &lines {
        assert!(
            l.chars().count() <= 60 - 8,
            "{l:?} is wider than the pager\n{tools}"
        );
    }
    assert!(
        tools.contains('…'),
        "the long descriptions are cut: {tools}"
    );
}

/// Argument values as Hermes' gateway offers them: `/details` modes and sections, a section's
/// modes, `/tools enable|disable` toolsets by their state, `/reasoning` words.
#[test]
fn slash_completion_of_argument_values() {
    let (_h, mut g) = with_config(QUICK);
    let complete = |g: &mut Gateway, text: &str| {
        let (r, from) = complete_slash(g, text);
        (texts(&r), from)
    };
    let (items, from) = complete(&mut g, "/details ");
    assert_eq!(
        items,
        [
            "hidden",
            "collapsed",
            "expanded",
            "cycle",
            "thinking",
            "tools",
            "subagents",
            "activity"
        ]
    );
    assert_eq!(from, 9);
    // right after the name the values come with their leading space, spliced at the end
    let (items, from) = complete(&mut g, "/details");
    assert_eq!((items[0].as_str(), from), (" hidden", 8));
    assert_eq!(complete(&mut g, "/details c").0, ["collapsed", "cycle"]);
    let (items, from) = complete(&mut g, "/details tools ");
    assert_eq!(items, ["hidden", "collapsed", "expanded", "reset"]);
    assert_eq!(from, 15);
    assert_eq!(complete(&mut g, "/details thinking co").0, ["collapsed"]);
    // /tools: the first word, then the toolsets the action would change
    assert_eq!(complete(&mut g, "/tools e").0, ["enable"]);
    let on = complete(&mut g, "/tools disable ").0;
    assert!(
        on.contains(&"file".into()) && on.contains(&"terminal".into()),
        "{on:?}"
    );
    assert!(complete(&mut g, "/tools enable ").0.is_empty());
    g.call(
        "tools.configure",
        json!({"action": "disable", "names": ["file"]}),
    );
    assert_eq!(complete(&mut g, "/tools enable f").0, ["file"]);
    assert!(
        !complete(&mut g, "/tools disable ")
            .0
            .contains(&"file".into())
    );
    assert_eq!(
        complete(&mut g, "/tools disable terminal fi").0,
        Vec::<String>::new()
    );
    assert_eq!(complete(&mut g, "/reasoning x").0, ["xhigh"]);
    assert_eq!(
        complete(&mut g, "/reasoning m").0,
        ["minimal", "medium", "max"]
    );
    assert_eq!(complete(&mut g, "/reasoning u").0, ["ultra"]);
    assert_eq!(complete(&mut g, "/reasoning o").0, ["on", "off"]);
}

/// `/skin` offers Hermes' built-in skins and the user's (`$HERMES_HOME/skins/*.yaml`),
/// `/personality` `none` and config.yaml's `agent.personalities`, as Hermes' gateway does.
#[test]
fn skin_and_personality_names_complete() {
    let yaml = "model:\n  provider: offline\nagent:\n  personalities:\n    pirate: Talk like a pirate at all times\n    teacher:\n      description: Patient explanations\n      system_prompt: You teach.\n";
    let (home, mut g) = with_config(yaml);
    std::fs::create_dir_all(home.path.join("skins")).unwrap();
    std::fs::write(
        home.path.join("skins/ocean.yaml"),
        "name: ocean\ndescription: Deep blue\ncolors: {banner_title: '#00f'}\n",
    )
    .unwrap();
    std::fs::write(home.path.join("skins/broken.yaml"), "name: [unclosed\n").unwrap();
    let complete = |g: &mut Gateway, text: &str| {
        let (r, from) = complete_slash(g, text);
        (r["items"].clone(), from)
    };
    let (items, from) = complete(&mut g, "/skin ");
    let names: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "default",
            "ares",
            "mono",
            "slate",
            "daylight",
            "warm-lightmode",
            "poseidon",
            "sisyphus",
            "charizard",
            "ocean"
        ]
    );
    assert_eq!(from, 6);
    let (items, from) = complete(&mut g, "/skin oc");
    assert_eq!(
        items,
        json!([{"text": "ocean", "display": "ocean", "meta": "Deep blue"}])
    );
    assert_eq!(from, 6);
    let (items, _) = complete(&mut g, "/personality ");
    let names: Vec<(&str, &str)> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["text"].as_str().unwrap(), i["meta"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("none", "clear personality overlay"),
            ("pirate", "Talk like a pirate at all times"),
            ("teacher", "Patient explanations")
        ]
    );
    let (items, from) = complete(&mut g, "/personality te");
    assert_eq!(items[0]["text"], "teacher");
    assert_eq!(from, 13);
    let r = g.call("config.set", json!({"key": "personality", "value": "none"}));
    assert_eq!(r["value"], "none", "{r}");
    let m = g.expect_code(
        "config.set",
        json!({"key": "personality", "value": "ninja"}),
        5001,
    );
    assert_eq!(
        m,
        "Unknown personality: `ninja`.\n\nAvailable: `none`, `pirate`, `teacher`"
    );
}
