//! `shell.exec` over the real binary: result shape, 4004, 4005, a long command that never holds
//! back other calls (1,000 pings answered while it runs), and the timeout (5002; `--shell-timeout`).

use crate::common;
use crate::procs;

use common::*;
use procs::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[test]
fn result_shape_stdout_stderr_code() {
    let m = marker();
    let mut g = Gateway::start();
    let r = g.call(
        "shell.exec",
        json!({"command": format!("echo out-{m}; echo err-{m} >&2; exit 7")}),
    );
    assert_eq!(r["stdout"], format!("out-{m}\n"), "{r}");
    assert_eq!(r["stderr"], format!("err-{m}\n"), "{r}");
    assert_eq!(r["code"], 7, "{r}");
    // the supervisor and the shell are gone once the answer is out
    assert_none_left(&format!("out-{m}"), secs(3), "a finished shell.exec");
    let r = g.call("shell.exec", json!({"command": "true"}));
    assert_eq!(r, json!({"stdout": "", "stderr": "", "code": 0}));
    // stdin is /dev/null here too: cat returns at once
    let r = g.call("shell.exec", json!({"command": "cat; echo rc=$?"}));
    assert_eq!(r["stdout"], "rc=0\n", "{r}");
}

#[test]
fn empty_command_is_4004() {
    let mut g = Gateway::start();
    g.expect_code("shell.exec", json!({"command": ""}), 4004);
    g.expect_code("shell.exec", json!({"command": "   "}), 4004);
    g.ping();
}

#[test]
fn dangerous_and_refused_commands_are_4005_and_never_run() {
    let m = marker();
    let home = fake_home();
    let mut g = Gateway::builder()
        .env("HOME", home.path.to_str().unwrap())
        .start();
    let dir = home.path.join(format!("keep-{m}"));
    make_dir_with_file(&dir);
    // A command the policy asks about (there is nobody to ask outside a session) and the hard
    // refusals. Each is harmless if it ran: the private HOME, and `exit 0` before the refused part
    // (which would only leave a marker file).
    let cases = [
        format!("rm -rf ~/keep-{m}"),
        format!("touch ~/ran-rm-{m}; exit 0; rm -rf /"),
        format!("touch ~/ran-fork-{m}; exit 0; :(){{ :|:& }};:"),
        format!("touch ~/ran-chmod-{m}; exit 0; chmod -R 777 /"),
    ];
    for cmd in &cases {
        let msg = g.expect_code("shell.exec", json!({"command": cmd}), 4005);
        assert!(
            msg.starts_with("blocked: "),
            "4005 message for {cmd:?}: {msg:?}"
        );
    }
    g.ping();
    assert!(dir.exists(), "blocked rm ran");
    for tag in ["rm", "fork", "chmod"] {
        assert!(
            !home.path.join(format!("ran-{tag}-{m}")).exists(),
            "refused {tag} ran"
        );
    }
}

/// The scenario: `shell.exec` of a 20 s command while 1,000 pings are answered. Runs
/// 20 s of wall time (in parallel with the timeout test below, so the suite takes ~30 s).
#[test]
fn long_shell_exec_never_blocks_other_calls() {
    const RUN_S: u64 = 20;
    const PINGS: usize = 1000;
    let m = marker();
    let needle = format!("{RUN_S}.{m}");
    let _r = Reaper(needle.clone());
    let mut g = Gateway::start();
    let t0 = Instant::now();
    let exec_id = g.send_request(
        "shell.exec",
        json!({"command": format!("sleep {RUN_S}.{m}; echo slept-{m}")}),
    );
    wait_for_procs("sleep", &needle, 1, T);

    // Spread the pings over most of the run (pacing only: each ping is awaited).
    let span = Duration::from_secs(RUN_S - 3);
    let mut lats = Vec::with_capacity(PINGS);
    for i in 0..PINGS {
        let slot = t0 + span * i as u32 / PINGS as u32;
        if let Some(d) = slot.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        let id = g.send_request("ping", json!({}));
        let sent = Instant::now();
        let f = g.wait_response(&id, secs(5));
        assert_eq!(f["result"], json!({"pong": true}), "ping {i}: {f}");
        lats.push(sent.elapsed());
        assert!(
            !g.frames
                .iter()
                .any(|f| is_response(f) && f["id"] == exec_id),
            "shell.exec answered after {:?}, before ping {i} of {PINGS}, while `sleep {RUN_S}` ran",
            t0.elapsed()
        );
    }
    let pings_done = t0.elapsed();
    assert!(
        pings_done < secs(RUN_S),
        "1,000 pings took {pings_done:?}: they must all be answered while the command runs"
    );
    let r = g.wait_response(&exec_id, secs(RUN_S + 15));
    let took = t0.elapsed();
    let res = r
        .get("result")
        .unwrap_or_else(|| panic!("shell.exec failed: {r}"));
    assert_eq!(res["stdout"], format!("slept-{m}\n"), "{r}");
    assert_eq!(res["code"], 0, "{r}");
    assert!(took >= secs(RUN_S), "answered after {took:?}");
    lats.sort();
    let p99 = lats[PINGS * 99 / 100];
    let max = *lats.last().unwrap();
    eprintln!(
        "{PINGS} pings during shell.exec: p99 {p99:?}, max {max:?}; exec answered after {took:?}"
    );
    assert!(max < secs(2), "ping latency during shell.exec: max {max:?}");
    // the answer is exactly one frame
    g.ping();
    let n = g
        .frames
        .iter()
        .filter(|f| is_response(f) && f["id"] == exec_id)
        .count();
    assert_eq!(n, 1, "shell.exec answered {n} times");
}

/// The timeout of `shell.exec` (30 s by PROTOCOL.md) is a setting; 2 s here.
#[test]
fn shell_exec_times_out_with_5002_and_kills_the_group() {
    let m = marker();
    let _r = Reaper(format!(".{m}"));
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_SHELL_TIMEOUT_S", "2")
        .start();
    let t0 = Instant::now();
    let id = g.send_request(
        "shell.exec",
        json!({"command": format!("sleep 40.{m} & sleep 41.{m}; wait")}),
    );
    wait_for_procs("sleep", &format!(".{m}"), 2, T);
    let all: Vec<i32> = procs_matching(&format!(".{m}"))
        .iter()
        .map(|p| p.pid)
        .collect();
    // meanwhile, the gateway answers
    g.ping();
    let r = g.wait_response(&id, secs(45));
    let took = t0.elapsed();
    let e: &Value = r
        .get("error")
        .unwrap_or_else(|| panic!("shell.exec of a 40 s sleep must time out: {r}"));
    assert_eq!(e["code"], 5002, "{r}");
    assert_eq!(e["message"], "command timed out after 2s", "{r}");
    assert!(
        took >= secs(2) && took < secs(40),
        "5002 after {took:?}: not before the 2 s timeout, and before the command's own end"
    );
    wait_gone(&all, secs(3), "timed-out shell.exec");
    g.ping();
}

#[test]
fn stdout_and_stderr_are_each_capped_head_and_tail() {
    const HEAD: usize = 16 * 1024;
    const TAIL: usize = 32 * 1024;
    let mut g = Gateway::start();
    let out_n = 30_000_000usize;
    let err_n = 20_000_000usize;
    let r = g.request_timeout(
        "shell.exec",
        json!({"command": format!(
            "head -c {out_n} /dev/zero | tr '\\0' a; echo END-OUT; \
             head -c {err_n} /dev/zero | tr '\\0' b >&2; echo END-ERR >&2"
        )}),
        secs(29),
    );
    let res = r
        .get("result")
        .unwrap_or_else(|| panic!("{}", truncate(&r.to_string(), 300)));
    assert_eq!(res["code"], 0);
    for (k, ch, total, end) in [
        ("stdout", 'a', out_n + 8, "END-OUT\n"),
        ("stderr", 'b', err_n + 8, "END-ERR\n"),
    ] {
        let v = res[k].as_str().unwrap();
        let note = format!("\n[... {} bytes of output cut ...]\n", total - HEAD - TAIL);
        assert!(
            v.len() <= HEAD + TAIL + note.len(),
            "{k}: {} bytes kept",
            v.len()
        );
        assert!(v.ends_with(end), "{k} tail: ...{:?}", &v[v.len() - 40..]);
        assert!(v.starts_with(&ch.to_string().repeat(100)), "{k} head");
        assert!(
            v.contains(&note),
            "{k}: expected the note {note:?} (head {HEAD} + tail {TAIL} kept); around the head: {:?}",
            &v[HEAD.saturating_sub(20)..(HEAD + 80).min(v.len())]
        );
        let kept = v
            .replacen(&note, "", 1)
            .replacen(&end[..end.len() - 1], "", 1);
        assert!(
            kept.trim_end().chars().all(|c| c == ch),
            "{k} must hold only its own stream"
        );
    }
}

#[test]
fn sigkill_of_the_gateway_during_shell_exec_leaves_no_process_behind() {
    let m = marker();
    let needle = format!(".{m}");
    let _r = Reaper(needle.clone());
    let mut g = Gateway::start();
    g.send_request(
        "shell.exec",
        json!({"command": format!("setsid sleep 301.{m} & sleep 300.{m}; wait")}),
    );
    wait_for_procs("sleep", &needle, 2, T);
    let pids: Vec<i32> = procs_matching(&needle).iter().map(|p| p.pid).collect();
    g.signal(libc::SIGKILL);
    let took = wait_gone(&pids, secs(1), "shell.exec after SIGKILL of the gateway");
    eprintln!("shell.exec processes gone {took:?} after SIGKILL");
    g.wait_exit(secs(5));
}
