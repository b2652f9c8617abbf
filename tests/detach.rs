//! Detach and reattach (issue 35): with `--persistent` on, the gateway the TUI spawns is a
//! relay to the home's persistent gateway, which it starts when absent. A client that leaves
//! (EOF, a killed relay) leaves its sessions and their turns running; the next client sees them
//! live and attaches. One persistent gateway serves a home; it ends by itself once idle with no
//! client.

use crate::common::procfs::{
    Reaper, is_our_daemon, marker, persistent_gateway as daemon_pid, poll_until,
};
use crate::common::*;
use serde_json::json;
use std::path::Path;

/// The home's persistent gateway, ended (SIGTERM, then SIGKILL) when the test ends.
struct Daemon {
    pid: i32,
}

impl Daemon {
    /// The one serving `home`: its pid from the lock file, checked to be our daemon.
    fn of(home: &Path) -> Daemon {
        let pid = daemon_pid(home).expect("a persistent gateway serves the home");
        Daemon { pid }
    }

    fn alive(&self) -> bool {
        is_our_daemon(self.pid)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.alive() {
            return;
        }
        crate::common::procfs::kill(self.pid, libc::SIGTERM);
        if !poll_until(secs(10), || !self.alive()) && self.alive() {
            crate::common::procfs::kill(self.pid, libc::SIGKILL);
        }
    }
}

/// A client of `home`'s persistent gateway, as the TUI spawns it.
fn client(home: &Path) -> Gateway {
    Gateway::builder()
        .home(home)
        .env("HERMES_TUI_GATEWAY_PERSISTENT", "on")
        .start()
}

fn assistant_says(db: &Path, stored: &str, needle: &str) -> bool {
    message_rows(db, stored)
        .iter()
        .any(|r| r.role == "assistant" && r.content.as_deref().unwrap_or("").contains(needle))
}

#[test]
fn a_turn_goes_on_after_its_client_leaves_and_the_next_client_attaches_to_it() {
    let home = TempHome::new("dt-on");
    let m = marker();
    let _reaper = Reaper(m.clone());
    let db = home.db_path();
    for leave in ["eof", "sigkill"] {
        let mut a = client(&home.path);
        let daemon = Daemon::of(&home.path);
        let s = a.create_session(json!({}));
        let done = format!("finished-{leave}-{m}");
        let r = a.call(
            "prompt.submit",
            json!({"session_id": s.id, "text": format!("$ sleep 1.{m}; echo {done}")}),
        );
        assert_eq!(r["status"], "streaming", "{r}");
        a.wait_session_event(&s.id, "tool.start", T);
        match leave {
            "eof" => {
                a.close_stdin();
                assert_eq!(a.wait_exit(T).code(), Some(0), "{}", a.diag());
            }
            _ => {
                a.signal(libc::SIGKILL);
                a.wait_exit(T);
            }
        }
        // The turn finishes in the persistent gateway with no client.
        assert!(
            poll_until(secs(30), || assistant_says(&db, &s.stored, &done)),
            "the turn did not finish after its client left ({leave}): {:#?}",
            message_rows(&db, &s.stored)
        );
        assert!(
            daemon.alive(),
            "the persistent gateway went with its client"
        );

        let mut b = client(&home.path);
        assert_eq!(
            daemon_pid(&home.path),
            Some(daemon.pid),
            "one gateway serves the home"
        );
        let live = b.call("session.active_list", json!({}));
        let row = live["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == s.id.as_str())
            .unwrap_or_else(|| panic!("the session is live for the next client: {live}"));
        assert_eq!(row["status"], "idle", "{row}");
        let attached = b.call("session.activate", json!({"session_id": s.id}));
        let shown = attached["messages"].to_string();
        assert!(
            shown.contains(&done),
            "the reply is shown on attach: {attached}"
        );
        // The attached session goes on in the new client.
        let t = b.run_turn(&s.id, "and now");
        assert_eq!(t.complete["payload"]["status"], "complete");
        b.close_stdin();
        b.wait_exit(T);
        drop(daemon);
    }
}

#[test]
fn one_persistent_gateway_serves_a_home_and_it_ends_when_idle_with_no_client() {
    let home = TempHome::new("dt-one");
    let mut a = Gateway::builder()
        .home(&home.path)
        .env("HERMES_TUI_GATEWAY_PERSISTENT", "on")
        .env("TUI_GATEWAY_IDLE_EXIT_S", "0.5")
        .start();
    let daemon = Daemon::of(&home.path);
    a.ping();
    // A second one for the same home is refused, the first untouched.
    let out = std::process::Command::new(BIN)
        .arg("daemon")
        .env("HERMES_HOME", &home.path)
        .output()
        .expect("run a second daemon");
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("already serves"), "{said}");
    a.ping();
    // While a client is attached it stays, however long that is.
    assert!(daemon.alive());
    a.close_stdin();
    a.wait_exit(T);
    assert!(
        poll_until(secs(20), || !daemon.alive()),
        "the idle persistent gateway never ended"
    );
    assert!(
        !home.path.join("tui-gateway.sock").exists(),
        "its socket is removed at exit"
    );
    // The next client starts a new one.
    let mut b = client(&home.path);
    let next = Daemon::of(&home.path);
    assert_ne!(next.pid, daemon.pid);
    b.ping();
    b.close_stdin();
    b.wait_exit(T);
}

#[test]
fn an_approval_left_unanswered_by_a_client_that_left_is_asked_of_the_next_one() {
    // The command is harmless: `~` is the test's own home, the scratch folder its own.
    let home = TempHome::new("dt-ask");
    let scratch = home.path.join("scratch-dt");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("f"), "x").unwrap();
    let home_str = home.path.to_str().unwrap();
    let start = || {
        Gateway::builder()
            .home(&home.path)
            .env("HOME", home_str)
            .env("HERMES_TUI_GATEWAY_PERSISTENT", "on")
            .start()
    };
    let mut a = start();
    let _daemon = Daemon::of(&home.path);
    let s = a.create_session(json!({}));
    a.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": "$ rm -rf ~/scratch-dt"}),
    );
    let asked = a.wait_session_event(&s.id, "approval.request", T);
    let request_id = asked["payload"]["request_id"].clone();
    a.close_stdin();
    a.wait_exit(T);

    let mut b = start();
    b.call("session.activate", json!({"session_id": s.id}));
    let again = b.wait_session_event(&s.id, "approval.request", T);
    assert_eq!(again["payload"]["request_id"], request_id, "{again}");
    assert!(scratch.exists(), "nothing ran before an answer");
    // Attaching once more to the client that was asked does not ask again.
    b.call("session.activate", json!({"session_id": s.id}));
    let r = b.call(
        "approval.respond",
        json!({"session_id": s.id, "choice": "once", "request_id": request_id}),
    );
    assert_eq!(r["resolved"], 1, "{r}");
    let done = b.wait_session_event(&s.id, "message.complete", T);
    assert_eq!(done["payload"]["status"], "complete", "{done}");
    assert!(!scratch.exists(), "the approved command ran");
    let asks = b
        .events_of_session(&s.id)
        .iter()
        .filter(|e| e["type"] == "approval.request")
        .count();
    assert_eq!(asks, 1, "asked once of the new client");
    b.close_stdin();
    b.wait_exit(T);
}

#[test]
fn a_killed_persistent_gateway_leaves_no_tool_and_its_session_resumes_repaired() {
    // SIGKILL of the persistent gateway is the same crash as a stdio gateway's: its tool dies
    // with it, its relay ends saying so, and the next client's gateway repairs the session.
    let home = TempHome::new("dt-kill");
    let m = marker();
    let _reaper = Reaper(m.clone());
    let mut a = client(&home.path);
    let daemon = Daemon::of(&home.path);
    let s = a.create_session(json!({}));
    a.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": format!("$ sleep 300.{m}")}),
    );
    let tool = crate::common::procfs::wait_for_proc("sleep", &format!("300.{m}"), T);
    a.wait_session_event(&s.id, "tool.start", T);
    crate::common::procfs::kill(daemon.pid, libc::SIGKILL);
    crate::common::procfs::wait_gone(&[tool.pid], secs(10), "the killed gateway's tool");
    assert_eq!(
        a.wait_exit(T).code(),
        Some(1),
        "the relay says its gateway is gone"
    );
    assert!(
        a.stderr_text().contains("closed the connection"),
        "{}",
        a.stderr_text()
    );

    let mut b = client(&home.path);
    let next = Daemon::of(&home.path);
    assert_ne!(next.pid, daemon.pid, "a new gateway serves the home");
    let r = b.call("session.resume", json!({"session_id": s.stored}));
    let roles: Vec<&str> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    assert!(
        roles.first() == Some(&"user") && roles.contains(&"tool"),
        "the prompt, and the cut-off call's result the repair added: {r}"
    );
    b.close_stdin();
    b.wait_exit(T);
}

#[test]
fn a_connection_that_is_not_a_relay_is_closed_and_a_relay_takes_over() {
    let home = TempHome::new("dt-junk");
    let mut a = client(&home.path);
    let _daemon = Daemon::of(&home.path);
    let s = a.create_session(json!({}));
    // No hello (no pipes handed over): closed at once, whatever it sends.
    let mut junk = std::os::unix::net::UnixStream::connect(home.path.join("tui-gateway.sock"))
        .expect("connect to the socket");
    use std::io::{Read, Write};
    junk.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
        .unwrap();
    junk.set_read_timeout(Some(T)).unwrap();
    let mut got = Vec::new();
    let n = junk.read_to_end(&mut got).expect("the gateway closes it");
    assert_eq!(
        n,
        0,
        "nothing is said to it: {:?}",
        String::from_utf8_lossy(&got)
    );
    // The attached client was not let go for it.
    let t = a.run_turn(&s.id, "still here");
    assert_eq!(t.complete["payload"]["status"], "complete");
    // A relay's hello takes over: the client before it is let go and told why.
    let mut b = client(&home.path);
    assert_eq!(a.wait_exit(T).code(), Some(1));
    assert!(
        a.stderr_text().contains("a new client took over"),
        "{}",
        a.stderr_text()
    );
    b.call("session.activate", json!({"session_id": s.id}));
    b.close_stdin();
    assert_eq!(b.wait_exit(T).code(), Some(0));
}
