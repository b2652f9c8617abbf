//! Diagnostics never take the gateway down or stall it: with stderr's reader gone, or with a
//! reader that never reads, the gateway keeps answering and exits cleanly; lines that could not
//! be written wait (bounded; see `diag.rs` for the count of dropped ones) until stderr drains.

use crate::common;

use common::*;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;
use tui_gateway::client::Client;

fn spawn(stderr: Stdio) -> Client {
    let home = TempHome::new("stderr");
    let mut cmd = Command::new(BIN);
    tui_gateway::client::default_signals(&mut cmd);
    scrub_env(&mut cmd);
    cmd.env("HERMES_HOME", &home.path).stderr(stderr);
    let client = Client::spawn(&mut cmd).expect("spawn gateway");
    std::mem::forget(home); // the gateway outlives this scope; the temp dir is tiny
    client
}

/// Lines until one contains `needle`, within the deadline.
fn wait_line(client: &mut Client, needle: &str) -> bool {
    let until = Instant::now() + T;
    loop {
        match client.next_line(until) {
            Ok(l) if String::from_utf8_lossy(l).contains(needle) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

fn stray_answers(client: &mut Client, n: usize) {
    let mut batch = String::new();
    for i in 0..n {
        batch.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"srq-stray-{i}\",\"result\":{{}}}}\n"
        ));
    }
    client
        .send_raw(batch.as_bytes())
        .expect("write stray answers");
}

/// Closes stdin and waits for the exit; `None` (and the gateway killed) when it does not come.
fn exit_code(client: &mut Client) -> Option<i32> {
    client.close(Instant::now() + T).ok()?.code()
}

#[test]
fn a_gateway_whose_stderr_reader_is_gone_keeps_answering_and_exits_cleanly() {
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    let mut g = spawn(Stdio::from(write));
    assert!(wait_line(&mut g, "gateway.ready"));
    stray_answers(&mut g, 3);
    g.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
        .unwrap();
    assert!(
        wait_line(&mut g, "\"pong\":true"),
        "no pong after diagnostics into a dead stderr"
    );
    assert_eq!(exit_code(&mut g), Some(0));
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
    let mut g = spawn(Stdio::from(write));
    assert!(wait_line(&mut g, "gateway.ready"));
    stray_answers(&mut g, 5);
    g.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
        .unwrap();
    assert!(
        wait_line(&mut g, "\"pong\":true"),
        "no pong while stderr is full"
    );
    // Now someone reads: what was held comes out.
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = std::fs::File::from(read).read_to_string(&mut all);
        all
    });
    assert_eq!(exit_code(&mut g), Some(0));
    let text = reader.join().unwrap();
    assert!(text.contains("srq-stray-4"), "{text}");
    assert!(text.contains("[gateway-exit] stdin closed"), "{text}");
}
