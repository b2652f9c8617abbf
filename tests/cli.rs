//! The command line as a person uses it: every subcommand explains itself with `--help`, output
//! into a pipe that closes early (`| head`) ends quietly, knobs outside a sane range are refused
//! by name, and stored text is printed with its control characters made visible.

use crate::common;

use common::*;
use serde_json::json;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    scrub_env(&mut cmd);
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tui-gateway")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_subcommand_has_help_with_flags_env_names_and_defaults() {
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["-m", "tui_gateway.entry", "--help"],
        &["sessions", "--help"],
        &["chat", "--help"],
    ] {
        let out = run(args, &[]);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {:?} {}",
            out.status,
            text(&out.stderr)
        );
        assert!(stdout.starts_with("usage"), "{args:?}: {stdout}");
        if args[0] != "chat" {
            assert!(
                stdout.contains("--frame-limit") && stdout.contains("env TUI_GATEWAY_FRAME_LIMIT"),
                "{args:?}: {stdout}"
            );
            assert!(stdout.contains("default 16777216"), "{args:?}: {stdout}");
        }
    }
}

#[test]
fn help_into_a_closed_pipe_ends_quietly() {
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["sessions", "--help"],
    ] {
        let (read, write) = nix::unistd::pipe().expect("pipe");
        drop(read);
        let mut cmd = Command::new(BIN);
        scrub_env(&mut cmd);
        let out = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .output()
            .expect("run tui-gateway");
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn knobs_outside_their_range_are_refused_by_name() {
    let home = TempHome::new("cli-knobs");
    let home_s = home.path.to_str().unwrap();
    for (env, value) in [
        ("TUI_GATEWAY_FRAME_LIMIT", "5"),
        ("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0"),
        ("HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S", "1e12"),
        ("TUI_GATEWAY_OFFLINE_DELAY_MS", "99999999"),
    ] {
        let out = run(&[], &[("HERMES_HOME", home_s), (env, value)]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env}={value}: {stderr}");
        assert!(
            stderr.contains(env) && stderr.contains("from"),
            "{env}={value}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{env}={value} started anyway");
    }
    // The same knob inside its range starts the gateway.
    let out = run(
        &[],
        &[
            ("HERMES_HOME", home_s),
            ("TUI_GATEWAY_FRAME_LIMIT", "65536"),
        ],
    );
    assert!(
        text(&out.stdout).contains("gateway.ready"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn stored_text_is_printed_with_control_characters_visible() {
    let home = TempHome::new("cli-escape");
    let hostile = "look \u{1b}]52;c;aGVsbG8=\u{7} here \u{1b}[2J\r\u{1b}[2Kgone \u{202e}txt";
    {
        let mut g = Gateway::builder().home(&home.path).start();
        let s = g.create_session(json!({}));
        g.run_turn(&s.id, hostile);
        g.close_stdin();
    }
    let home_s = home.path.to_str().unwrap();
    let list = run(&["sessions", "list"], &[("HERMES_HOME", home_s)]);
    let rows = text(&list.stdout);
    assert!(list.status.success(), "{}", text(&list.stderr));
    let id = rows
        .split_whitespace()
        .next()
        .expect("a stored session")
        .to_string();
    let show = run(&["sessions", "show", &id], &[("HERMES_HOME", home_s)]);
    for out in [&rows, &text(&show.stdout)] {
        assert!(out.contains("look "), "{out}");
        assert!(
            !out.contains('\u{1b}') && !out.contains('\r') && !out.contains('\u{202e}'),
            "{out:?}"
        );
    }
    let shown = text(&show.stdout);
    assert!(shown.contains("\\x1b]52;c;aGVsbG8=\\x07"), "{shown}");
    assert!(shown.contains("\\r\\x1b[2Kgone \\u{202e}txt"), "{shown}");
}

/// Every file under `dir`, relative to it, sorted.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// The README's first command, as a newcomer pastes it, in the environment of someone who
/// already uses Hermes: an OpenAI key exported, a home whose config.yaml names a provider. It
/// must still chat with the offline model, reach no network and write nothing into that home.
#[test]
fn the_readmes_first_command_is_self_contained_in_a_hostile_environment() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = readme
        .split("```sh\n")
        .nth(1)
        .expect("a sh block in the README");
    let first = block.lines().next().unwrap();
    let command = first.split("   # ").next().unwrap().trim();
    assert!(
        command.contains("cargo run --release -- chat"),
        "the first command is not the chat demo: {first}"
    );
    let command = command.replace("cargo run --release --", BIN);

    // Anything that connects here is the network the command must not reach.
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    let url = format!("http://{}/v1", trap.local_addr().unwrap());
    let scratch = TempHome::new("readme");
    let home = scratch.path.join("home");
    let tmp = scratch.path.join("tmp");
    std::fs::create_dir_all(home.join(".hermes")).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(
        home.join(".hermes/config.yaml"),
        format!("model:\n  provider: openai\n  default: gpt-4o\n  base_url: {url}\n"),
    )
    .unwrap();
    let mut cmd = Command::new("sh");
    scrub_env(&mut cmd);
    let out = cmd
        .args(["-c", &command])
        .current_dir(&scratch.path)
        .env("HOME", &home)
        .env("TMPDIR", &tmp)
        .env("OPENAI_API_KEY", "sk-hostile")
        .env("OPENAI_BASE_URL", &url)
        .env("TUI_GATEWAY_PROVIDER", "openai")
        .env("HERMES_HOME", home.join(".hermes"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{command}: {:?}\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    assert!(
        stdout.contains("(offline model) You said: hello, gateway"),
        "not the offline model's answer:\n{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        matches!(trap.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the command connected to the configured provider"
    );
    assert_eq!(
        files_under(&home),
        [".hermes/config.yaml"],
        "the command wrote into the user's home"
    );
}

/// `sessions search` finds sessions by the words of their messages through the FTS5 index the
/// gateway created (as Hermes does), best match first, one line per session with its id, date
/// and title and a snippet whose match is marked and whose control characters are escaped;
/// `sessions list` filters by source and age and pages.
#[test]
fn sessions_search_and_the_list_filters_and_pages() {
    let home = TempHome::new("cli-search");
    let (ids, tg) = {
        let mut g = Gateway::builder().home(&home.path).start();
        let mut ids = Vec::new();
        for (title, prompt) in [
            ("one mention", "the narwhal \u{1b}[2J swims"),
            ("many mentions", "narwhal narwhal narwhal"),
            ("unrelated", "a walrus sleeps"),
        ] {
            let s = g.create_session(json!({ "title": title }));
            g.run_turn(&s.id, prompt);
            ids.push(s.stored);
        }
        let tg = g.create_session(json!({"source": "telegram"}));
        g.run_turn(&tg.id, "from the phone");
        g.close_stdin();
        (ids, tg.stored)
    };
    let env = [("HERMES_HOME", home.path.to_str().unwrap())];
    let out = run(&["sessions", "search", "narwhal"], &env);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        4,
        "two sessions, a header and a snippet each:\n{stdout}"
    );
    assert!(
        lines[0].starts_with(&ids[1]) && lines[0].contains("many mentions"),
        "the session saying it most comes first:\n{stdout}"
    );
    assert!(lines[1].contains(">>>narwhal<<<"), "{stdout}");
    assert!(lines[2].starts_with(&ids[0]), "{stdout}");
    assert!(
        lines[3].contains("\\x1b[2J") && !stdout.contains('\u{1b}'),
        "escaped: {stdout:?}"
    );
    // Words that are FTS5 syntax are only words; nothing matches, nothing fails.
    let out = run(
        &["sessions", "search", "narwhal\"", "AND", "(", "NEAR"],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");

    let list = |args: &[&str]| {
        let out = run(&[&["sessions", "list"][..], args].concat(), &env);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(list(&["--source", "telegram"]), [tg]);
    let all = list(&[]);
    assert_eq!(all.len(), 4);
    assert_eq!(list(&["--since", "1d"]), all);
    assert!(list(&["--since", "2999-01-01"]).is_empty());
    let pages: Vec<String> = (1..=3)
        .flat_map(|p| list(&["--limit", "2", "--page", &p.to_string()]))
        .collect();
    assert_eq!(pages, all, "pages of two add up to the list");
    let bad = run(&["sessions", "list", "--since", "yesterday"], &env);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("--since"),
        "{}",
        text(&bad.stderr)
    );
}
