//! The runner's stdin pipe, driven without a gateway: bytes written reach the command, a
//! command that does not read fills the bounded queue and further bytes are refused whole,
//! `close_stdin` gives the command end of file, and a run with no timeout lives until stopped.

use std::path::Path;
use std::time::{Duration, Instant};

use tui_gateway::runner::supervisor::Executable;
use tui_gateway::runner::{
    Ending, NO_TIMEOUT, RunEnd, RunEvent, RunId, Runner, Spec, Stdin, StdinRefused, Streams,
};

fn runner() -> Runner {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_tui-gateway"));
    Runner::new(Executable::open(bin), Duration::from_millis(200), false)
}

fn start(runner: &mut Runner, command: &str, cap: usize) -> RunId {
    let spec = Spec {
        command,
        cwd: Path::new("/"),
        streams: Streams::Separate,
        stdin: Stdin::Pipe { cap },
        timeout: NO_TIMEOUT,
        live: true,
    };
    runner.start(&spec, Instant::now()).expect("start")
}

/// Pump `id` (as the loop does on readiness) until `done` says so; what it printed so far.
fn pump_until(
    runner: &mut Runner,
    id: RunId,
    mut done: impl FnMut(&str, Option<&RunEnd>) -> bool,
) -> (String, Option<RunEnd>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut out, mut end) = (String::new(), None);
    loop {
        runner.mark_ready(id);
        runner.pump(Instant::now(), &tui_gateway::clock::Budget::unlimited());
        for wake in runner.take_wakes() {
            if wake.at <= Instant::now() + Duration::from_millis(250) {
                std::thread::sleep(wake.at.saturating_duration_since(Instant::now()));
                runner.on_timer(wake.run, wake.what, Instant::now());
            }
        }
        for e in runner.take_events() {
            match e {
                RunEvent::Output { bytes, .. } => out.push_str(&String::from_utf8_lossy(&bytes)),
                RunEvent::Ended { end: e, .. } => end = Some(e),
            }
        }
        drop(runner.take_closed());
        if done(&out, end.as_ref()) {
            return (out, end);
        }
        assert!(Instant::now() < deadline, "gave up; printed {out:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn bytes_written_reach_the_command_and_closing_ends_its_input() {
    let mut r = runner();
    let id = start(
        &mut r,
        "while read -r line; do echo \"got $line\"; done; echo bye",
        4096,
    );
    assert!(r.stdin_fd(id).is_some());
    assert_eq!(r.write_stdin(id, b"one\ntwo\n"), Ok(0));
    let (out, _) = pump_until(&mut r, id, |out, _| out.contains("got two"));
    assert!(out.contains("got one\ngot two\n"), "{out}");
    r.close_stdin(id);
    assert_eq!(r.write_stdin(id, b"late\n"), Err(StdinRefused::Closed));
    let (out, end) = pump_until(&mut r, id, |_, end| end.is_some());
    let end = end.unwrap();
    assert!(out.contains("bye"), "{out}");
    assert_eq!((end.status, end.ending), (0, None));
    assert!(!r.any_alive());
}

#[test]
fn a_command_that_does_not_read_is_refused_more_than_the_cap() {
    let mut r = runner();
    let id = start(&mut r, "echo started; exec sleep 60", 1000);
    pump_until(&mut r, id, |out, _| out.contains("started"));
    // The pipe takes what it holds; past it, the queue takes up to the cap and no more.
    let chunk = vec![b'x'; 500];
    let refusal = (0..1000)
        .find_map(|_| r.write_stdin(id, &chunk).err())
        .expect("refused at some point");
    assert_eq!(
        refusal,
        StdinRefused::Full {
            queued: 1000,
            cap: 1000
        }
    );
    assert_eq!(r.stdin_queued(id), 1000);
    assert!(refusal.to_string().contains("not reading"), "{refusal}");
    // No timeout: it lives until stopped; stopped, it ends as interrupted.
    r.stop(id, Ending::Interrupted, Instant::now());
    let (_, end) = pump_until(&mut r, id, |_, end| end.is_some());
    assert_eq!(end.unwrap().ending, Some(Ending::Interrupted));
    assert!(!r.any_alive());
}

#[test]
fn a_run_without_a_pipe_refuses_stdin() {
    let mut r = runner();
    let spec = Spec {
        command: "cat",
        cwd: Path::new("/"),
        streams: Streams::Merged,
        stdin: Stdin::Null,
        timeout: Duration::from_secs(10),
        live: false,
    };
    let id = r.start(&spec, Instant::now()).unwrap();
    assert_eq!(r.write_stdin(id, b"x"), Err(StdinRefused::NoPipe));
    // cat reads /dev/null: it ends at once.
    let (_, end) = pump_until(&mut r, id, |_, end| end.is_some());
    assert_eq!(end.unwrap().status, 0);
}
