//! Diagnostics never take the gateway down or stall it: with stderr's reader gone, or with a
//! reader that never reads, the gateway keeps answering and exits cleanly; lines that could not
//! be written wait (bounded; see `diag.rs` for the count of dropped ones) until stderr drains.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Instant;

fn spawn(stderr: Stdio) -> (Child, ChildStdin, Receiver<String>) {
    let home = TempHome::new("stderr");
    let mut cmd = Command::new(BIN);
    scrub_env(&mut cmd);
    let mut child = cmd
        .env("HERMES_HOME", &home.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn gateway");
    std::mem::forget(home); // the gateway outlives this scope; the temp dir is tiny
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, stdin, rx)
}

/// Lines until one contains `needle`, within the deadline.
fn wait_line(rx: &Receiver<String>, needle: &str) -> bool {
    let until = Instant::now() + T;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

fn stray_answers(stdin: &mut ChildStdin, n: usize) {
    let mut batch = String::new();
    for i in 0..n {
        batch.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"srq-stray-{i}\",\"result\":{{}}}}\n"
        ));
    }
    stdin
        .write_all(batch.as_bytes())
        .expect("write stray answers");
}

fn exit_code(child: &mut Child) -> Option<i32> {
    let until = Instant::now() + T;
    while Instant::now() < until {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st.code();
        }
        std::thread::yield_now();
        std::thread::park_timeout(ms(10));
    }
    let _ = child.kill();
    None
}

#[test]
fn a_gateway_whose_stderr_reader_is_gone_keeps_answering_and_exits_cleanly() {
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    let (mut child, mut stdin, rx) = spawn(Stdio::from(write));
    assert!(wait_line(&rx, "gateway.ready"));
    stray_answers(&mut stdin, 3);
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
        .unwrap();
    assert!(
        wait_line(&rx, "\"pong\":true"),
        "no pong after diagnostics into a dead stderr"
    );
    drop(stdin);
    assert_eq!(exit_code(&mut child), Some(0));
}

#[test]
fn a_stderr_nobody_reads_does_not_stall_the_loop() {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    // A stderr pipe that is already full when the gateway starts, as after a long run with
    // nobody reading it.
    let (read, write) = nix::unistd::pipe().expect("pipe");
    fcntl(&write, FcntlArg::F_SETPIPE_SZ(4096)).expect("shrink the pipe");
    fcntl(&write, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
    let filler = [b'.'; 512];
    while nix::unistd::write(&write, &filler).is_ok() {}
    fcntl(&write, FcntlArg::F_SETFL(OFlag::empty())).unwrap();
    let (mut child, mut stdin, rx) = spawn(Stdio::from(write));
    assert!(wait_line(&rx, "gateway.ready"));
    stray_answers(&mut stdin, 5);
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
        .unwrap();
    assert!(
        wait_line(&rx, "\"pong\":true"),
        "no pong while stderr is full"
    );
    // Now someone reads: what was held comes out.
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = std::fs::File::from(read).read_to_string(&mut all);
        all
    });
    drop(stdin);
    assert_eq!(exit_code(&mut child), Some(0));
    let text = reader.join().unwrap();
    assert!(text.contains("srq-stray-4"), "{text}");
    assert!(text.contains("[gateway-exit] stdin closed"), "{text}");
}
