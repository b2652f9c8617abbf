//! The dangerous-command policy over the real binary, on reproductions from issue 10 that used to
//! run unasked: a second command after a newline, `sudo -u root …`, `bash -c "rm -rf ~"`, a
//! wrapper, a download run as a script. Over the terminal tool the asked ones wait for approval
//! (denied here) and the refused ones never ask; over `shell.exec` both are `4005 blocked`.
//!
//! Safety: each command is guarded — were it run, it would `touch` a marker under the private
//! HOME and `exit 0` before its dangerous part.

use crate::common;
use crate::procs;

use common::*;
use procs::*;
use serde_json::json;

/// (tag, dangerous part, refused rather than asked)
const CASES: &[(&str, &str, bool)] = &[
    ("newline", "echo ok\nrm -rf /", true),
    ("sudo", "sudo -u root rm -rf /", true),
    ("group", "{ rm -rf /; }", true),
    ("bashc", "bash -c \"rm -rf ~\"", false),
    ("nice", "nice -n 5 rm -rf ~", false),
    ("curl", "bash <(curl -s http://127.0.0.1:9/x)", false),
    ("hidden", "$(echo rm) -rf ~", false),
];

/// A marker, the private HOME and a gateway using it.
fn start() -> (String, common::TempHome, Gateway) {
    let home = fake_home();
    let g = Gateway::builder()
        .env("HOME", home.path.to_str().unwrap())
        .start();
    (marker(), home, g)
}

fn guarded(tag: &str, m: &str, dangerous: &str) -> String {
    format!("touch ~/ran-{tag}-{m}; exit 0; {dangerous}")
}

#[test]
fn reproductions_ask_or_are_refused_over_the_terminal_tool() {
    let (m, home, mut g) = start();
    let s = g.create_session(json!({}));
    for (tag, dangerous, refused) in CASES {
        let cmd = guarded(tag, &m, dangerous);
        let start = submit(&mut g, &s.id, &format!("$ {cmd}"));
        if *refused {
            let c = g.wait_session_event(&s.id, "tool.complete", T);
            let r = tool_result(&c);
            assert!(
                r["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("blocked:")),
                "{dangerous:?} must be refused, got {c}"
            );
        } else {
            let e = g.wait_session_event(&s.id, "approval.request", T);
            assert_eq!(e["payload"]["command"], cmd, "{e}");
            let id = e["payload"]["request_id"].as_str().unwrap().to_string();
            let r = g.call(
                "approval.respond",
                json!({"session_id": s.id, "choice": "deny", "request_id": id}),
            );
            assert_eq!(r["resolved"], 1, "{r}");
            let c = g.wait_session_event(&s.id, "tool.complete", T);
            assert_eq!(tool_result(&c)["error"], "denied", "{c}");
        }
        let turn = g.finish_turn(&s.id, start, T);
        assert_eq!(
            turn.complete["payload"]["status"], "complete",
            "{dangerous:?}"
        );
        if *refused {
            let asked = g.frames[start..]
                .iter()
                .any(|f| event_type(f) == Some("approval.request"));
            assert!(!asked, "a refusal must not ask: {dangerous:?}");
        }
        assert!(
            !home.path.join(format!("ran-{tag}-{m}")).exists(),
            "{cmd:?} ran"
        );
    }
    g.ping();
}

#[test]
fn reproductions_are_blocked_over_shell_exec() {
    let (m, home, mut g) = start();
    for (tag, dangerous, _) in CASES {
        let cmd = guarded(tag, &m, dangerous);
        let msg = g.expect_code("shell.exec", json!({"command": cmd}), 4005);
        assert!(msg.starts_with("blocked: "), "{cmd:?}: {msg:?}");
        assert!(
            !home.path.join(format!("ran-{tag}-{m}")).exists(),
            "{cmd:?} ran"
        );
    }
    // The harmless look-alikes run.
    for cmd in [
        "echo 'rm -rf /'",
        "grep -r rm /dev/null; true",
        "rm -rf ./no-such-build",
    ] {
        let r = g.call("shell.exec", json!({"command": cmd}));
        assert_eq!(r["code"], 0, "{cmd:?}: {r}");
    }
}
