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

/// A turn of client `c` on session `sid` completes.
fn completes(c: &mut Gateway, sid: &str, text: &str) {
    let t = c.run_turn(sid, text);
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{}",
        t.complete
    );
}

/// Client `c` leaves by closing its input: its relay ends with 0.
fn leaves(c: &mut Gateway) {
    c.close_stdin();
    assert_eq!(c.wait_exit(T).code(), Some(0), "{}", c.diag());
}

/// A client of `home`'s persistent gateway whose `~` is `home` too (a command naming `~` stays
/// in the test's own folder).
fn client_with_home_dir(home: &Path) -> Gateway {
    Gateway::builder()
        .home(home)
        .env("HOME", home.to_str().unwrap())
        .env("HERMES_TUI_GATEWAY_PERSISTENT", "on")
        .start()
}

/// A client of `home`'s persistent gateway that it starts with a 64 KiB out-queue per client
/// and a one-second stall rule (a client that does not read is let go soon).
fn small_queue_client(home: &Path) -> Gateway {
    Gateway::builder()
        .home(home)
        .env("HERMES_TUI_GATEWAY_PERSISTENT", "on")
        .env("TUI_GATEWAY_STDOUT_STALL_S", "1")
        .env("TUI_GATEWAY_OUT_QUEUE", "65536")
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
        completes(&mut b, &s.id, "and now");
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
    let start = || client_with_home_dir(&home.path);
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
fn a_connection_that_is_not_a_relay_is_closed_and_a_second_relay_is_served_beside_the_first() {
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
    completes(&mut a, &s.id, "still here");
    // A second relay is a second client: the first one stays.
    let mut b = client(&home.path);
    let other = b.create_session(json!({}));
    completes(&mut a, &s.id, "both here");
    assert!(
        a.try_exit().is_none(),
        "the first client stays: {}",
        a.diag()
    );
    // Each hears its own session only.
    completes(&mut b, &other.id, "mine");
    assert!(
        a.events_of_session(&other.id).is_empty(),
        "a client hears only the sessions it names"
    );
    leaves(&mut b);
    leaves(&mut a);
}

#[test]
fn two_clients_on_one_session_see_each_others_prompts_and_replies() {
    let home = TempHome::new("dt-two");
    let mut a = client(&home.path);
    let _daemon = Daemon::of(&home.path);
    let s = a.create_session(json!({}));
    let mut b = client(&home.path);
    b.call("session.activate", json!({"session_id": s.id}));
    let mut clients = [a, b];
    for (asker, watcher, text) in [(1, 0, "hello from b"), (0, 1, "and from a")] {
        let t = clients[asker].run_turn(&s.id, text);
        assert_eq!(t.complete["payload"]["status"], "complete");
        let reply = t.complete["payload"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(reply.contains(text), "{reply}");
        // The other client sees the prompt (the turn's input) and the same reply.
        let watcher = &mut clients[watcher];
        let start = watcher.wait_frame(
            |f| {
                f["params"]["session_id"] == s.id.as_str()
                    && f["params"]["type"] == "message.start"
                    && f["params"]["payload"]["input"] == text
            },
            T,
        );
        assert!(start.is_some(), "{text:?} not seen by the other client");
        let done = watcher.wait_session_event(&s.id, "message.complete", T);
        assert_eq!(done["payload"]["text"].as_str(), Some(reply.as_str()));
    }
    // The stored transcript has both exchanges once.
    let rows = message_rows(&home.db_path(), &s.stored);
    let users: Vec<_> = rows
        .iter()
        .filter(|r| r.role == "user")
        .filter_map(|r| r.content.clone())
        .collect();
    assert_eq!(users, ["hello from b", "and from a"]);
    for c in &mut clients {
        leaves(c);
    }
}

#[test]
fn an_approval_goes_to_every_client_of_its_session_and_the_first_answer_wins() {
    // The command is harmless: `~` is the test's own home, the scratch folder its own.
    let home = TempHome::new("dt-both");
    let scratch = home.path.join("scratch-both");
    std::fs::create_dir_all(&scratch).unwrap();
    let start = || client_with_home_dir(&home.path);
    let mut a = start();
    let _daemon = Daemon::of(&home.path);
    let s = a.create_session(json!({}));
    let mut b = start();
    b.call("session.activate", json!({"session_id": s.id}));
    a.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": "$ rm -rf ~/scratch-both"}),
    );
    let to_a = a.wait_session_event(&s.id, "approval.request", T);
    let to_b = b.wait_session_event(&s.id, "approval.request", T);
    assert_eq!(to_a["payload"]["request_id"], to_b["payload"]["request_id"]);
    let request_id = to_a["payload"]["request_id"].clone();
    let r = b.call(
        "approval.respond",
        json!({"session_id": s.id, "choice": "deny", "request_id": request_id}),
    );
    assert_eq!(r["resolved"], 1, "{r}");
    // The other client's answer comes too late: answered, not an error, and nothing changes.
    let r = a.call(
        "approval.respond",
        json!({"session_id": s.id, "choice": "once", "request_id": request_id}),
    );
    assert_eq!(r["resolved"], 0, "{r}");
    for c in [&mut a, &mut b] {
        let done = c.wait_session_event(&s.id, "message.complete", T);
        assert_eq!(done["payload"]["status"], "complete", "{done}");
    }
    assert!(scratch.exists(), "the denied command did not run");
    // A question likewise: the first answer is the one the model reads.
    a.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": r#"%clarify {"question": "Which one?"}"#}),
    );
    let asked = a.wait_session_event(&s.id, "clarify.request", T);
    b.wait_session_event(&s.id, "clarify.request", T);
    let request_id = asked["payload"]["request_id"].clone();
    let r = a.call(
        "clarify.respond",
        json!({"request_id": request_id, "answer": "the first"}),
    );
    assert_eq!(r["status"], "ok", "{r}");
    let r = b.call(
        "clarify.respond",
        json!({"request_id": request_id, "answer": "the second"}),
    );
    assert_eq!(r["answered"], "elsewhere", "{r}");
    let cancel = b.wait_session_event(&s.id, "request.cancel", T);
    assert_eq!(cancel["payload"]["reason"], "answered", "{cancel}");
    let done = b.wait_frame(
        |f| f["params"]["type"] == "tool.complete" && f["params"]["payload"]["name"] == "clarify",
        T,
    );
    let done = done.expect("the question's tool completes");
    assert_eq!(
        done["params"]["payload"]["result"]["user_response"], "the first",
        "{done}"
    );
    for c in [&mut a, &mut b] {
        leaves(c);
    }
}

#[test]
fn a_client_that_stops_reading_is_let_go_and_the_others_go_on() {
    let home = TempHome::new("dt-slow");
    let start = || small_queue_client(&home.path);
    let mut a = start();
    let _daemon = Daemon::of(&home.path);
    let s = a.create_session(json!({}));
    let mut slow = start();
    slow.call("session.activate", json!({"session_id": s.id}));
    slow.pause_reading();
    // Turns that say far more than the slow client's queue holds.
    let long = "x".repeat(4000);
    let mut turns = 0;
    let gone = poll_until(secs(60), || {
        completes(&mut a, &s.id, &long);
        turns += 1;
        slow.try_exit().is_some()
    });
    assert!(gone, "the slow client is let go ({turns} turns)");
    assert_eq!(slow.wait_exit(T).code(), Some(1));
    assert!(
        slow.stderr_text().contains("let this client go"),
        "its relay says why: {}",
        slow.stderr_text()
    );
    // The reading client never waited for it.
    completes(&mut a, &s.id, "still going");
    leaves(&mut a);
}

#[test]
fn a_client_flooding_requests_without_reading_holds_no_other_client() {
    let home = TempHome::new("dt-flood");
    let start = || small_queue_client(&home.path);
    let mut a = start();
    let _daemon = Daemon::of(&home.path);
    let s = a.create_session(json!({}));
    let mut flood = start();
    flood.pause_reading();
    // Far more requests than its queue holds answers for; it reads none of them.
    let pings: String = (0..200_000)
        .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}\n"))
        .collect();
    let writer = flood.write_in_background(pings.into_bytes());
    // The other client's turns go on meanwhile, and the flooding one is let go.
    let mut turns = 0;
    let gone = poll_until(secs(60), || {
        completes(&mut a, &s.id, "beside a flood");
        turns += 1;
        flood.try_exit().is_some()
    });
    assert!(
        gone,
        "the flooding client is let go ({turns} turns beside it)"
    );
    assert_eq!(flood.wait_exit(T).code(), Some(1));
    drop(writer);
    completes(&mut a, &s.id, "after the flood");
    leaves(&mut a);
}

#[test]
fn a_thousand_clients_at_once_are_each_answered_their_own_requests() {
    use std::os::fd::AsRawFd;
    use tui_gateway::client::Client;
    let home = TempHome::new("dt-1k");
    let mut a = client(&home.path);
    let daemon = Daemon::of(&home.path);
    // This test holds five descriptors per client.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let idle_kib = crate::common::procfs::rss_kib(daemon.pid as u32).unwrap_or(0);
    let clients = 1000;
    let sock = home.path.join("tui-gateway.sock");
    let mut conns = Vec::new();
    for _ in 0..clients {
        // What a relay does: connect and hand over the two ends the gateway serves.
        let (in_r, in_w) = nix::unistd::pipe().expect("pipe");
        let (out_r, out_w) = nix::unistd::pipe().expect("pipe");
        let conn = std::os::unix::net::UnixStream::connect(&sock).expect("connect");
        tui_gateway::rpc::listener::send_hello(&conn, [in_r.as_raw_fd(), out_w.as_raw_fd()], None)
            .expect("hello");
        conns.push((conn, Client::from_fds(in_w, out_r).expect("client")));
    }
    let deadline = std::time::Instant::now() + secs(60);
    for (_, c) in &mut conns {
        c.wait_event("gateway.ready", deadline)
            .expect("each client is greeted");
    }
    // Every client asks at once; each is answered its own request, and only that.
    let ids: Vec<_> = conns
        .iter_mut()
        .map(|(_, c)| c.send_request("session.create", json!({})).expect("send"))
        .collect();
    let mut sessions = Vec::new();
    for ((_, c), id) in conns.iter_mut().zip(&ids) {
        let mut others = 0;
        let answer = c
            .wait_response(id, deadline, |_, f| {
                others += usize::from(f.get("id").is_some());
            })
            .expect("answered");
        assert_eq!(others, 0, "a client got another's answer");
        sessions.push(answer["result"]["session_id"].as_str().unwrap().to_string());
    }
    let unique: std::collections::HashSet<_> = sessions.iter().collect();
    assert_eq!(unique.len(), clients, "a session each");
    let peak_kib = crate::common::procfs::rss_kib(daemon.pid as u32).unwrap_or(0);
    eprintln!(
        "{clients} clients with a session each: RSS {idle_kib} -> {peak_kib} KiB ({:.1} KiB per client)",
        (peak_kib.saturating_sub(idle_kib)) as f64 / clients as f64
    );
    // They all leave; the first client is still served.
    drop(conns);
    let s = a.create_session(json!({}));
    completes(&mut a, &s.id, "after the crowd");
    leaves(&mut a);
}

#[test]
fn a_client_that_comes_back_replays_what_it_missed_and_the_cli_works_beside_the_gateway() {
    let home = TempHome::new("dt-replay");
    let mut a = client(&home.path);
    let daemon = Daemon::of(&home.path);
    let s = a.create_session(json!({}));
    let seen = a.run_turn(&s.id, "seen live");
    let last_seen = seen.complete["seq"]
        .as_u64()
        .expect("a seq on message.complete");
    a.close_stdin();
    a.wait_exit(T);
    // A turn the absent client misses, run by another client.
    let mut b = client(&home.path);
    b.call("session.activate", json!({"session_id": s.id}));
    let missed = b.run_turn(&s.id, "missed while away");
    assert_eq!(missed.complete["payload"]["status"], "complete");
    b.close_stdin();
    b.wait_exit(T);

    let mut back = client(&home.path);
    back.call("session.activate", json!({"session_id": s.id}));
    let replay = back.call(
        "session.events.since",
        json!({"session_id": s.id, "last_seen": last_seen}),
    );
    assert_eq!(replay["truncated"], false, "{replay}");
    let events = replay["events"].as_array().unwrap();
    assert!(
        events.iter().all(|e| e["seq"].as_u64() > Some(last_seen)),
        "only what it had not seen: {replay}"
    );
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(kinds.contains(&"message.complete"), "{kinds:?}");
    let start = events
        .iter()
        .find(|e| e["type"] == "message.start")
        .expect("the missed turn's start");
    assert_eq!(start["payload"]["input"], "missed while away");

    // The command line beside the persistent gateway: the live session is listed, and a chat
    // goes through a relay of its own and leaves the gateway serving.
    let listed = std::process::Command::new(BIN)
        .args(["sessions", "list"])
        .env("HERMES_HOME", &home.path)
        .output()
        .expect("sessions list");
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&s.stored),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    let mut chat = std::process::Command::new(BIN);
    scrub_env(&mut chat);
    let chat = chat
        .arg("chat")
        .env("HERMES_HOME", &home.path)
        .env("HERMES_TUI_GATEWAY_PERSISTENT", "on")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("chat");
    use std::io::Write;
    let mut chat = chat;
    chat.stdin
        .take()
        .unwrap()
        .write_all(b"beside the daemon\n")
        .unwrap();
    let out = chat.wait_with_output().expect("chat output");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "(offline model) You said: beside the daemon",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(daemon.alive(), "the persistent gateway still serves");
    completes(&mut back, &s.id, "still here");
    back.close_stdin();
    back.wait_exit(T);
}

#[test]
fn a_persistent_gateway_and_a_stdio_gateway_on_one_home_each_refuse_the_others_live_session() {
    let home = TempHome::new("dt-own");
    let mut a = client(&home.path);
    let _daemon = Daemon::of(&home.path);
    let held_by_daemon = a.create_session(json!({}));
    completes(&mut a, &held_by_daemon.id, "the daemon's");
    let mut plain = Gateway::builder().home(&home.path).start();
    let held_by_plain = plain.create_session(json!({}));
    completes(&mut plain, &held_by_plain.id, "the plain one's");
    // A commit that met the other gateway's write lock waits in its journal for the next retry.
    for stored in [&held_by_daemon.stored, &held_by_plain.stored] {
        assert!(
            poll_until(secs(10), || message_rows(&home.db_path(), stored).len()
                >= 2),
            "{stored} reached state.db"
        );
    }
    // Each stored session has one writer: the gateway that holds it live.
    let (code, msg, _) = plain.call_err(
        "session.resume",
        json!({"session_id": held_by_daemon.stored}),
    );
    assert_eq!(code, 4023, "{msg}");
    let (code, msg, _) = a.call_err(
        "session.resume",
        json!({"session_id": held_by_plain.stored}),
    );
    assert_eq!(code, 4023, "{msg}");
    // Let go (the stdio gateway ends), it is the persistent gateway's to resume.
    leaves(&mut plain);
    let resumed = a.call(
        "session.resume",
        json!({"session_id": held_by_plain.stored}),
    );
    let rid = resumed["session_id"].as_str().expect("resumed").to_string();
    completes(&mut a, &rid, "mine now");
    leaves(&mut a);
}
