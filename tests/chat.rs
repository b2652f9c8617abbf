//! `tui-gateway chat` as a person uses it with piped input: each line gets its whole reply, in
//! order, end of input closes the gateway cleanly, and `--resume` continues the stored session.

use crate::common;

use common::*;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn chat(home: &TempHome, args: &[&str], input: &str) -> Output {
    chat_with_env(home, args, &[], input)
}

fn chat_with_env(home: &TempHome, args: &[&str], envs: &[(&str, &str)], input: &str) -> Output {
    let mut cmd = Command::new(BIN);
    scrub_env(&mut cmd);
    cmd.arg("chat")
        .args(args)
        .envs(envs.iter().copied())
        .env("HERMES_HOME", &home.path)
        .current_dir(&home.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run tui-gateway chat");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().expect("chat output")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn piped_lines_get_their_replies_in_order_and_resume_continues_the_session() {
    let home = TempHome::new("chat");
    let out = chat(&home, &[], "first question\n\nsecond question\n");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "(offline model) You said: first question",
            "(offline model) You said: second question",
        ],
        "{stderr}"
    );
    assert!(!stderr.contains("error"), "{stderr}");

    let stored: String = open_db(&home.db_path())
        .query_row("SELECT id FROM sessions", [], |r| r.get(0))
        .expect("one stored session");
    let out = chat(&home, &["--resume", &stored], "third question\n");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert_eq!(
        stdout.trim_end(),
        "(offline model) You said: third question",
        "{stderr}"
    );
    let rows = message_rows(&home.db_path(), &stored);
    let users: Vec<_> = rows
        .iter()
        .filter(|r| r.role == "user")
        .filter_map(|r| r.content.as_deref())
        .collect();
    assert_eq!(
        users,
        ["first question", "second question", "third question"]
    );
}

#[test]
fn resuming_a_session_that_does_not_exist_is_an_error() {
    let home = TempHome::new("chat-missing");
    let out = chat(&home, &["--resume", "20250101_000000_abcdef"], "hello\n");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

#[test]
fn a_turn_that_ends_in_an_error_makes_the_exit_status_nonzero() {
    let home = TempHome::new("chat-error");
    // A port nobody listens on: the model call is refused and the turn ends in an error.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let base_url = format!("http://127.0.0.1:{port}/v1");
    let out = chat_with_env(&home, &[], &[("OPENAI_BASE_URL", &base_url)], "hello\n");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("[error: "), "{stdout}\n{stderr}");
}
