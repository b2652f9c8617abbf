//! Shutdown and durability of the real binary (DESIGN.md "Durability contract", "Shutdown",
//! "Tool processes"; the upstream scenarios of `seed/test_serve_exit_flush.py`, asserted with
//! our stronger guarantees):
//!
//! - SIGTERM / SIGHUP / stdin EOF / stdout EPIPE while a command runs: one path — the group is
//!   killed (TERM, then KILL after the kill grace), its result ("[Command interrupted]", rc 130)
//!   is committed, rows end `tui_shutdown`, exit 0;
//! - a second SIGTERM is the hard exit: it does not wait out a long kill grace;
//! - a database locked by another process: the gateway still exits (the lock held throughout)
//!   and says what is lost; released in time, every message the client saw lands once;
//! - SIGINT under a pipe and inherited `SIG_IGN`s are respected; SIGINT on a terminal stdin
//!   shuts down;
//! - partial text is written at most once per flush interval into one row, SIGKILL loses
//!   at most about one interval of it, and the next start repairs the row;
//! - the idle reaper, and the startup repair of a tool call cut off by SIGKILL.
//!
//! No assertion is about speed: an exit is awaited with a generous deadline that is not what is
//! tested (where a test shows that something was *not* waited for, the configured wait is far
//! longer than the deadline); every wait polls a condition with a deadline.

use crate::common;
use crate::crashkit;

use common::*;
use crashkit::*;
use serde_json::json;
use std::time::{Duration, Instant};

/// How long a test waits for an exit before it calls the gateway hung (2 loaded cores).
const EXIT_DEADLINE: Duration = Duration::from_secs(20);
/// The default kill grace (TERM → KILL), set explicitly where a test depends on it.
const KILL_GRACE: Duration = Duration::from_millis(500);

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

/// Submits `$ cmd` on an idle session and waits for its `tool.start`; returns the tool id.
fn start_tool(g: &mut Gateway, sid: &str, cmd: &str) -> String {
    let r = g.call(
        "prompt.submit",
        json!({"session_id": sid, "text": format!("$ {cmd}")}),
    );
    assert_eq!(r["status"], "streaming", "{r}");
    let ts = g.wait_session_event(sid, "tool.start", T);
    ts["payload"]["tool_id"]
        .as_str()
        .unwrap_or_else(|| panic!("tool.start without tool_id: {ts}"))
        .to_string()
}

/// The transcript of a session whose only turn was `$ cmd`, interrupted by the shutdown:
/// exactly user, assistant tool call, tool result "[Command interrupted]" rc 130; the row is
/// ended `tui_shutdown`.
fn assert_interrupted_tool_transcript(
    db: &std::path::Path,
    stored: &str,
    cmd: &str,
    tool_id: &str,
) {
    let rows = message_rows(db, stored);
    assert_eq!(
        rows.len(),
        3,
        "expected user, assistant tool call, tool result; got {rows:#?}"
    );
    assert_eq!(rows[0].role, "user", "{rows:#?}");
    assert_eq!(
        rows[0].content.as_deref(),
        Some(format!("$ {cmd}").as_str())
    );
    assert_eq!(rows[1].role, "assistant", "{rows:#?}");
    assert_eq!(
        rows[1].content, None,
        "a pure tool call has no content: {rows:#?}"
    );
    assert_eq!(rows[1].call_ids(), vec![tool_id.to_string()], "{rows:#?}");
    assert_eq!(rows[1].call_command().as_deref(), Some(cmd), "{rows:#?}");
    assert_eq!(rows[2].role, "tool", "{rows:#?}");
    assert_eq!(rows[2].tool_call_id.as_deref(), Some(tool_id), "{rows:#?}");
    let res = rows[2].json();
    assert_eq!(res["exit_code"], 130, "tool result: {res}");
    let out = res["output"]
        .as_str()
        .unwrap_or_else(|| panic!("output: {res}"));
    assert!(
        out.contains("[Command interrupted]"),
        "tool output must say it was interrupted: {res}"
    );
    let (ended_at, reason) = session_end(db, stored);
    assert!(ended_at.is_some(), "session {stored} not ended");
    assert_eq!(
        reason.as_deref(),
        Some("tui_shutdown"),
        "end_reason of {stored}"
    );
}

/// The client saw the interrupted tool result and then `message.complete` status
/// `interrupted` before stdout reached EOF.
fn assert_client_saw_interrupt(g: &mut Gateway, sid: &str, tool_id: &str) {
    assert!(g.stdout_closed, "stdout should be at EOF\n{}", g.diag());
    let ev = g.events_of_session(sid);
    let tc = ev
        .iter()
        .position(|e| e["type"] == "tool.complete" && e["payload"]["tool_id"] == tool_id)
        .unwrap_or_else(|| panic!("no tool.complete for {tool_id}\n{}", g.diag()));
    let res = &ev[tc]["payload"]["result"];
    assert_eq!(res["exit_code"], 130, "{res}");
    assert!(
        res["output"]
            .as_str()
            .is_some_and(|o| o.contains("[Command interrupted]")),
        "{res}"
    );
    let mc = ev
        .iter()
        .position(|e| e["type"] == "message.complete")
        .unwrap_or_else(|| panic!("no message.complete before EOF\n{}", g.diag()));
    assert!(mc > tc, "message.complete before tool.complete: {ev:#?}");
    assert_eq!(ev[mc]["payload"]["status"], "interrupted", "{}", ev[mc]);
    g.assert_clean_stdout();
}

/// Waits for the exit that `t0` started (at most [`EXIT_DEADLINE`]); asserts status 0 and
/// returns how long it took.
fn assert_exits_zero(g: &mut Gateway, t0: Instant, what: &str) -> Duration {
    let (st, took) = exit_within(g, t0, EXIT_DEADLINE);
    assert_eq!(
        st.code(),
        Some(0),
        "{what}: exit status {st:?}\n{}",
        g.diag()
    );
    took
}

/// After the exit: the command's `sleep` and every other process carrying the marker `m` are
/// gone.
fn assert_command_gone(sleeper: &Proc, m: &str, what: &str) {
    assert!(
        poll_until(secs(1), || is_gone(sleeper.pid)),
        "{what}: the sleep outlived the gateway"
    );
    assert_none_left(m, secs(1), what);
}

/// A plain session with one completed turn, to check that idle sessions are flushed and ended
/// by the same shutdown.
fn idle_session(g: &mut Gateway, text: &str) -> (Session, String) {
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, text);
    (s, t.text)
}

fn assert_idle_session_ended(
    db: &std::path::Path,
    s: &Session,
    prompt: &str,
    reply: &str,
    reason: &str,
) {
    let rows = message_rows(db, &s.stored);
    let got: Vec<(&str, Option<&str>)> = rows
        .iter()
        .map(|r| (r.role.as_str(), r.content.as_deref()))
        .collect();
    assert_eq!(got, [("user", Some(prompt)), ("assistant", Some(reply))]);
    let (ended_at, r) = session_end(db, &s.stored);
    assert!(ended_at.is_some());
    assert_eq!(r.as_deref(), Some(reason));
}

/// The graceful shutdown of a gateway (default kill grace) with an idle session prompted
/// `idle_prompt` and a `$ sleep` turn, set off by `trigger` (`what` names it): exit 0 within the
/// kill grace, no process of the command left, the client saw the interrupt, the interrupted
/// transcript and the idle session are stored and ended. Returns the exited gateway.
fn shutdown_mid_tool(
    tag: &str,
    idle_prompt: &str,
    what: &str,
    trigger: impl FnOnce(&mut Gateway),
) -> Gateway {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let mut g = Gateway::builder()
        .tag(tag)
        .env("TUI_GATEWAY_KILL_GRACE_S", "0.5")
        .start();
    let (idle, idle_reply) = idle_session(&mut g, idle_prompt);
    let s = g.create_session(json!({}));
    let cmd = format!("sleep 300.{m}");
    let tool_id = start_tool(&mut g, &s.id, &cmd);
    let sleeper = wait_for_proc("sleep", &m, T);

    let t0 = Instant::now();
    trigger(&mut g);
    assert_exits_zero(&mut g, t0, what);
    assert_command_gone(&sleeper, &m, &format!("after {what}"));
    assert_client_saw_interrupt(&mut g, &s.id, &tool_id);

    let db = g.db_path();
    assert_interrupted_tool_transcript(&db, &s.stored, &cmd, &tool_id);
    assert_idle_session_ended(&db, &idle, idle_prompt, &idle_reply, "tui_shutdown");
    g
}

/// The `$ sleep`-turn-then-signal scenario shared by SIGTERM and SIGHUP.
fn signal_mid_tool(sig: i32, name: &str) {
    let g = shutdown_mid_tool("sd-sig", "idle bystander", name, |g| g.signal(sig));
    let err = final_stderr(&g);
    assert!(err.contains(&format!("[gateway-signal] {name}")), "{err}");
    assert!(err.contains(&format!("[gateway-exit] {name}")), "{err}");
    assert!(!err.contains("could not persist"), "{err}");
    integrity_ok(&g.db_path()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// 1, 7. SIGTERM and SIGHUP while a command runs
// ---------------------------------------------------------------------------------------------

#[test]
fn sigterm_mid_tool_kills_the_command_commits_its_result_and_exits_zero() {
    signal_mid_tool(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sighup_mid_tool_takes_the_sigterm_path() {
    signal_mid_tool(libc::SIGHUP, "SIGHUP");
}

// ---------------------------------------------------------------------------------------------
// 2. A TERM-ignoring command is SIGKILLed after the kill grace
// ---------------------------------------------------------------------------------------------

#[test]
fn sigterm_with_a_term_ignoring_command_kills_it_after_the_kill_grace() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    // A longer kill grace than the default; the shutdown grace leaves room for it.
    let grace = Duration::from_millis(1500);
    let mut g = Gateway::builder()
        .tag("sd-trap")
        .env("TUI_GATEWAY_KILL_GRACE_S", "1.5")
        .env("HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S", "6")
        .start();
    let other = g.create_session(json!({}));
    let s = g.create_session(json!({}));
    let cmd = format!("trap '' TERM; sleep 300.{m}");
    let tool_id = start_tool(&mut g, &s.id, &cmd);
    let sleeper = wait_for_proc("sleep", &m, T);

    let t0 = Instant::now();
    g.signal(libc::SIGTERM);
    wait_stderr(&mut g, "[gateway-signal] SIGTERM", secs(5));
    // (The fence is probed where the kill grace is long enough not to race it: section 3.)
    g.ping();
    // The KILL cannot come before SIGTERM + kill grace: if this look happens earlier, the
    // TERM-ignoring sleep must still be there.
    let alive = !is_gone(sleeper.pid);
    let looked_at = t0.elapsed();
    assert!(
        alive || looked_at >= grace,
        "the TERM-ignoring sleep died {looked_at:?} after SIGTERM, before the kill grace"
    );

    let took = assert_exits_zero(&mut g, t0, "SIGTERM, kill grace");
    assert!(
        took >= grace,
        "the gateway exited {took:?} after SIGTERM, before the kill grace {grace:?}: it cannot \
         have waited for the TERM-ignoring command"
    );
    assert_command_gone(&sleeper, &m, "after the shutdown");
    assert_client_saw_interrupt(&mut g, &s.id, &tool_id);
    assert!(
        final_stderr(&g).contains("[gateway-exit] SIGTERM"),
        "{}",
        g.diag()
    );
    let db = g.db_path();
    assert_interrupted_tool_transcript(&db, &s.stored, &cmd, &tool_id);
    assert_eq!(
        session_end(&db, &other.stored).1.as_deref(),
        Some("tui_shutdown")
    );
}

#[test]
fn term_ignoring_command_with_the_default_kill_grace() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let mut g = Gateway::builder().tag("sd-trap-default").start();
    let s = g.create_session(json!({}));
    let cmd = format!("trap '' TERM; sleep 300.{m}");
    let tool_id = start_tool(&mut g, &s.id, &cmd);
    let sleeper = wait_for_proc("sleep", &m, T);
    let t0 = Instant::now();
    g.signal(libc::SIGTERM);
    let took = assert_exits_zero(&mut g, t0, "SIGTERM, default kill grace");
    assert!(
        took >= KILL_GRACE,
        "exited after {took:?}, before the kill grace"
    );
    assert_command_gone(&sleeper, &m, "after the shutdown");
    assert_client_saw_interrupt(&mut g, &s.id, &tool_id);
    assert_interrupted_tool_transcript(&g.db_path(), &s.stored, &cmd, &tool_id);
}

// ---------------------------------------------------------------------------------------------
// 3. While the kill grace runs the fence holds; a second SIGTERM is the hard exit, now
// ---------------------------------------------------------------------------------------------

#[test]
fn second_sigterm_during_shutdown_exits_at_once_and_kills_the_command() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("sd-hard");
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_KILL_GRACE_S", "300")
        .env("HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S", "600")
        .start();
    let other = g.create_session(json!({}));
    let s = g.create_session(json!({}));
    let cmd = format!("trap '' TERM; sleep 300.{m}");
    let tool_id = start_tool(&mut g, &s.id, &cmd);
    let sleeper = wait_for_proc("sleep", &m, T);

    g.signal(libc::SIGTERM);
    wait_stderr(&mut g, "[gateway-signal] SIGTERM", secs(5));
    // The shutdown is under way and waits for the kill grace (300 s, so nothing races this):
    // the fence refuses a new turn, and the gateway still answers.
    let (code, _, f) = g.call_err(
        "prompt.submit",
        json!({"session_id": other.id, "text": "too late"}),
    );
    assert_eq!(code, 5035, "prompt.submit during shutdown: {f}");
    g.ping();
    // The idle session waits for no tool: its row is ended while the sleep still runs.
    let ended_early = poll_until(T, || {
        session_end(&home.db_path(), &other.stored).1.as_deref() == Some("tui_shutdown")
    });
    assert!(
        ended_early,
        "idle session not ended while the tool dies\n{}",
        g.diag()
    );
    assert_eq!(
        session_end(&home.db_path(), &s.stored).1,
        None,
        "the session whose tool still runs ended before its result"
    );
    assert!(
        g.try_exit().is_none(),
        "exited on the first SIGTERM\n{}",
        g.diag()
    );
    assert!(
        !is_gone(sleeper.pid),
        "TERM-ignoring sleep died on the first SIGTERM"
    );

    let t1 = Instant::now();
    g.signal(libc::SIGTERM);
    // The kill grace is 300 s: an exit within the deadline did not wait it out.
    let (st, _) = exit_within(&mut g, t1, EXIT_DEADLINE);
    assert_eq!(st.code(), Some(0), "{st:?}\n{}", g.diag());
    assert_none_left(&m, secs(1), "after the hard exit");
    let err = final_stderr(&g);
    assert!(err.contains("[gateway-exit] second signal"), "{err}");

    // What was committed before stays; the next start makes the transcript valid again (every
    // tool call answered: the interrupted result, or an "outcome unknown" one).
    drop(g);
    let mut g2 = Gateway::builder().home(&home.path).start();
    g2.ping();
    // the fenced prompt was never recorded
    assert!(message_rows(&home.db_path(), &other.stored).is_empty());
    let rows = message_rows(&home.db_path(), &s.stored);
    assert!(rows.len() >= 3, "{rows:#?}");
    assert_eq!(rows[0].role, "user");
    assert_eq!(rows[1].call_ids(), vec![tool_id.clone()]);
    let answers: Vec<&MsgRow> = rows
        .iter()
        .filter(|r| r.role == "tool" && r.tool_call_id.as_deref() == Some(tool_id.as_str()))
        .collect();
    assert_eq!(
        answers.len(),
        1,
        "the call must be answered exactly once: {rows:#?}"
    );
    let (ended_at, reason) = session_end(&home.db_path(), &s.stored);
    assert!(ended_at.is_some(), "row left open after restart");
    assert!(
        matches!(reason.as_deref(), Some("tui_shutdown" | "gateway_killed")),
        "{reason:?}"
    );
    let r = g2.call("session.resume", json!({"session_id": s.stored}));
    assert_eq!(r["message_count"].as_u64(), Some(rows.len() as u64), "{r}");
}

/// The hard deadline on its own: a kill grace longer than the shutdown grace (a misconfigured
/// nesting) and a TERM-ignoring command. At the shutdown grace the gateway SIGKILLs the group at
/// once and exits 0 — it never waits out the kill grace.
#[test]
fn shutdown_grace_is_a_hard_deadline_even_with_a_longer_kill_grace() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("sd-deadline");
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_KILL_GRACE_S", "300")
        .env("HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S", "1")
        .start();
    let s = g.create_session(json!({}));
    let cmd = format!("trap '' TERM; sleep 300.{m}");
    let tool_id = start_tool(&mut g, &s.id, &cmd);
    wait_for_proc("sleep", &m, T);
    let t0 = Instant::now();
    g.signal(libc::SIGTERM);
    // Exiting at all within EXIT_DEADLINE shows the kill grace was not waited out.
    assert_exits_zero(&mut g, t0, "shutdown grace (kill grace 300 s)");
    assert_none_left(&m, secs(1), "after the hard deadline");
    let err = final_stderr(&g);
    assert!(
        err.contains("[gateway-exit] shutdown grace exceeded"),
        "{err}"
    );
    drop(g);
    // the next start leaves the transcript valid: the cut-off call is answered exactly once
    let mut g2 = Gateway::builder().home(&home.path).start();
    g2.ping();
    let rows = message_rows(&home.db_path(), &s.stored);
    let answers = rows
        .iter()
        .filter(|r| r.role == "tool" && r.tool_call_id.as_deref() == Some(tool_id.as_str()))
        .count();
    assert_eq!(answers, 1, "{rows:#?}");
    assert!(session_end(&home.db_path(), &s.stored).0.is_some());
}

// ---------------------------------------------------------------------------------------------
// 4. A database locked by another process
// ---------------------------------------------------------------------------------------------

// `DbLock` (another process's write lock on state.db) is in tests/crashkit/faults.rs.

/// `(role, content-or-tool-marker)` of rows, for exact comparisons.
fn shape(rows: &[MsgRow]) -> Vec<(String, String)> {
    rows.iter()
        .map(|r| {
            let c = match (&r.tool_calls, &r.tool_call_id) {
                (Some(_), _) => format!("call:{}", r.call_ids().join(",")),
                (_, Some(id)) => {
                    format!("result:{id}:{}", r.json()["output"].as_str().unwrap_or(""))
                }
                _ => r.content.clone().unwrap_or_default(),
            };
            (r.role.clone(), c)
        })
        .collect()
}

/// What the client saw of a session, as the same shape: prompts (from prompt.submit answers),
/// tool calls (tool.start), tool results (tool.complete), final texts (message.complete).
fn client_view(g: &mut Gateway, sid: &str, prompts: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut p = prompts.iter();
    for e in g.events_of_session(sid) {
        match e["type"].as_str().unwrap_or("") {
            "message.start" => out.push(("user".into(), p.next().unwrap().to_string())),
            "tool.start" => out.push((
                "assistant".into(),
                format!("call:{}", e["payload"]["tool_id"].as_str().unwrap()),
            )),
            "tool.complete" => out.push((
                "tool".into(),
                format!(
                    "result:{}:{}",
                    e["payload"]["tool_id"].as_str().unwrap(),
                    e["payload"]["result"]["output"].as_str().unwrap_or("")
                ),
            )),
            "message.complete" => {
                if let Some(t) = e["payload"]["text"].as_str() {
                    out.push(("assistant".into(), t.to_string()));
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn locked_db_exit_is_bounded_by_the_shutdown_grace_and_says_what_is_lost() {
    let mut g = Gateway::builder()
        .tag("sd-lock")
        .env("HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S", "2")
        .env("HERMES_TUI_EXIT_FLUSH_BUDGET_S", "0.5")
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0.2")
        .start();
    let s = g.create_session(json!({}));
    let before = g.run_turn(&s.id, "before the lock");
    let mut lock = DbLock::take(&g.db_path());

    // The turn still completes for the client; the gateway says it could not save.
    let during = g.run_turn(&s.id, "while another process holds the lock");
    assert_eq!(during.complete["payload"]["status"], "complete");
    wait_stderr(&mut g, "could not save to state.db", secs(5));
    let warn = g.wait_session_event(&s.id, "status.update", secs(5));
    assert!(
        warn["payload"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("state.db")),
        "{warn}"
    );
    // really not written: a reader (WAL readers are not blocked) sees only the first turn
    let rows = message_rows(&g.db_path(), &s.stored);
    assert_eq!(
        shape(&rows),
        [
            ("user".to_string(), "before the lock".to_string()),
            ("assistant".to_string(), before.text.clone())
        ],
        "the lock did not stop the gateway from writing?"
    );

    let t0 = Instant::now();
    g.signal(libc::SIGTERM);
    // The lock is held until after the exit: the gateway did not wait for it.
    assert_exits_zero(&mut g, t0, "db locked, shutdown grace");
    let err = final_stderr(&g);
    let lost = err
        .lines()
        .find(|l| l.contains("could not persist before exit"))
        .unwrap_or_else(|| panic!("stderr does not say what could not be persisted:\n{err}"));
    assert!(
        lost.contains(&s.stored),
        "names the session it lost: {lost}"
    );
    assert!(err.contains("[gateway-exit]"), "{err}");
    lock.release();
    integrity_ok(&g.db_path()).unwrap();
    // what was committed before the lock is intact and not duplicated
    let rows = message_rows(&g.db_path(), &s.stored);
    assert_eq!(rows.len(), 2, "{rows:#?}");
}

#[test]
fn locked_db_released_during_shutdown_lands_every_message_once() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let mut g = Gateway::builder()
        .tag("sd-lock-rel")
        .env("HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S", "5")
        .env("HERMES_TUI_EXIT_FLUSH_BUDGET_S", "0.5")
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0.2")
        .start();
    let a = g.create_session(json!({}));
    g.run_turn(&a.id, "a: before the lock");
    let mut lock = DbLock::take(&g.db_path());
    g.run_turn(&a.id, "a: during the lock");
    let tool_prompt = format!("$ echo during-{m}");
    g.run_turn(&a.id, &tool_prompt);
    // a session created while locked: even its sessions row is only in memory
    let b = g.create_session(json!({}));
    g.run_turn(&b.id, "b: born during the lock");
    wait_stderr(&mut g, "could not save to state.db", secs(5));

    let t0 = Instant::now();
    g.signal(libc::SIGTERM);
    wait_stderr(&mut g, "[gateway-signal] SIGTERM", secs(5));
    // Hold the lock past the exit-flush budget (so the first exit flush fails), then let go
    // well before the shutdown grace: the final commit must wait for it and succeed.
    while t0.elapsed() < Duration::from_millis(1200) {
        g.collect_for(ms(20));
        assert!(
            g.try_exit().is_none(),
            "exited while the db was locked\n{}",
            g.diag()
        );
    }
    lock.release();
    assert_exits_zero(&mut g, t0, "db released during the shutdown");
    let err = final_stderr(&g);
    assert!(!err.contains("could not persist"), "{err}");
    assert!(err.contains("[gateway-exit] SIGTERM"), "{err}");

    let db = g.db_path();
    integrity_ok(&db).unwrap();
    let want_a = client_view(
        &mut g,
        &a.id,
        &["a: before the lock", "a: during the lock", &tool_prompt],
    );
    let want_b = client_view(&mut g, &b.id, &["b: born during the lock"]);
    assert_eq!(want_a.len(), 8, "{want_a:#?}");
    assert_eq!(
        shape(&message_rows(&db, &a.stored)),
        want_a,
        "session a, exactly once"
    );
    assert_eq!(
        shape(&message_rows(&db, &b.stored)),
        want_b,
        "session b, exactly once"
    );
    for s in [&a, &b] {
        assert_eq!(
            session_end(&db, &s.stored).1.as_deref(),
            Some("tui_shutdown")
        );
    }
    let total: i64 = open_db(&db)
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        total as usize,
        want_a.len() + want_b.len(),
        "no row written twice"
    );
}

#[test]
fn locked_db_released_while_running_the_retry_writes_pending_messages_once() {
    let mut g = Gateway::builder()
        .tag("sd-lock-retry")
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0.2")
        .start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "one");
    let mut lock = DbLock::take(&g.db_path());
    g.run_turn(&s.id, "two");
    g.run_turn(&s.id, "three");
    wait_stderr(&mut g, "could not save to state.db", secs(5));
    assert_eq!(message_rows(&g.db_path(), &s.stored).len(), 2);
    lock.release();
    // the periodic retry writes what was pending, without any new activity
    let db = g.db_path();
    let ok = poll_until(secs(10), || message_rows(&db, &s.stored).len() >= 6);
    assert!(
        ok,
        "pending messages never written after the lock went\n{}",
        g.diag()
    );
    wait_stderr(&mut g, "writable again", secs(5));
    g.run_turn(&s.id, "four");
    let want = client_view(&mut g, &s.id, &["one", "two", "three", "four"]);
    assert_eq!(
        shape(&message_rows(&db, &s.stored)),
        want,
        "exactly once, in order"
    );
    g.close_stdin();
    assert_eq!(g.wait_exit(secs(10)).code(), Some(0), "{}", g.diag());
    assert_eq!(shape(&message_rows(&db, &s.stored)), want);
}

// ---------------------------------------------------------------------------------------------
// 5. stdin EOF and stdout EPIPE take the SIGTERM path
// ---------------------------------------------------------------------------------------------

#[test]
fn stdin_eof_mid_tool_takes_the_sigterm_path() {
    let g = shutdown_mid_tool("sd-eof", "idle during eof", "stdin EOF", |g| {
        g.close_stdin()
    });
    assert!(
        final_stderr(&g).contains("[gateway-exit] stdin closed"),
        "{}",
        g.diag()
    );
}

#[test]
fn stdout_epipe_mid_tool_takes_the_sigterm_path() {
    stdout_reader_gone_mid_tool(true);
}

/// The reader goes away while the gateway has nothing to write (a command runs, the client
/// asks nothing): the loop notices the dead stdout itself, without waiting for a write to fail.
#[test]
fn stdout_reader_gone_while_nothing_is_written_takes_the_sigterm_path() {
    stdout_reader_gone_mid_tool(false);
}

/// A `sleep` turn runs and an idle session waits; the test closes its read end of stdout (and
/// with `ping`, sends a request whose answer then meets EPIPE). The gateway exits 0 on the
/// SIGTERM path: command gone, interrupted transcript stored, idle session ended.
fn stdout_reader_gone_mid_tool(ping: bool) {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let mut g = RawGateway::spawn(RawOpts {
        envs: vec![("TUI_GATEWAY_KILL_GRACE_S", "0.5")],
        ..Default::default()
    });
    g.wait_frame("gateway.ready", T, |v| {
        event_type(v) == Some("gateway.ready")
    });
    let idle = g.call("session.create", json!({}));
    let idle_id = idle["session_id"].as_str().unwrap().to_string();
    let idle_stored = idle["stored_session_id"].as_str().unwrap().to_string();
    let reply = g.run_turn(&idle_id, "idle during epipe")["text"]
        .as_str()
        .unwrap()
        .to_string();
    let r = g.call("session.create", json!({}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let stored = r["stored_session_id"].as_str().unwrap().to_string();
    let cmd = format!("sleep 300.{m}");
    let r = g.call(
        "prompt.submit",
        json!({"session_id": sid, "text": format!("$ {cmd}")}),
    );
    assert_eq!(r["status"], "streaming");
    let ts = g.wait_event(&sid, "tool.start", T);
    let tool_id = ts["payload"]["tool_id"].as_str().unwrap().to_string();
    let sleeper = wait_for_proc("sleep", &m, T);

    g.close_stdout();
    let t0 = Instant::now();
    if ping {
        g.send_request("ping", json!({}));
    }
    let (st, _) = g.exit_within(t0, secs(20));
    assert_eq!(st.code(), Some(0), "{st:?}\n{}", g.diag());
    assert_command_gone(&sleeper, &m, "after EPIPE");
    let err = g.final_stderr();
    assert!(err.contains("[gateway-exit] stdout closed"), "{err}");
    let db = g.db_path();
    assert_interrupted_tool_transcript(&db, &stored, &cmd, &tool_id);
    let rows = message_rows(&db, &idle_stored);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].content.as_deref(), Some(reply.as_str()));
    assert_eq!(
        session_end(&db, &idle_stored).1.as_deref(),
        Some("tui_shutdown")
    );
}

// ---------------------------------------------------------------------------------------------
// 6. SIGINT and inherited SIG_IGN
// ---------------------------------------------------------------------------------------------

/// After a signal the gateway must ignore: it was delivered (or discarded), the gateway still
/// runs, answers, runs a turn and a command, and then exits normally on stdin EOF.
fn assert_keeps_working(g: &mut RawGateway, sigs: &[i32], what: &str) {
    let pid = g.pid();
    for &sig in sigs {
        kill(pid, sig);
        assert!(
            poll_until(secs(5), || !g.signal_pending(sig)),
            "{what}: signal {sig} still pending for {pid}"
        );
    }
    // A handled signal would have started the shutdown before this ping is read: the handler
    // wrote to the signal pipe before our write to stdin, and the loop looks at signals first.
    g.call("ping", json!({}));
    assert!(
        g.try_exit().is_none(),
        "{what}: the gateway exited\n{}",
        g.diag()
    );
    let r = g.call("session.create", json!({}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let done = g.run_turn(&sid, "still here");
    assert_eq!(done["status"], "complete", "{what}: {done}");
    let m = marker();
    let done = g.run_turn(&sid, &format!("$ echo alive-{m}"));
    assert_eq!(done["status"], "complete", "{what}: {done}");
    assert!(
        g.frames
            .iter()
            .any(|f| event_type(f) == Some("tool.complete")
                && f["params"]["payload"]["result"]["exit_code"] == 0
                && f["params"]["payload"]["result"]["output"]
                    .as_str()
                    .is_some_and(|o| o.contains(&format!("alive-{m}")))),
        "{what}: the command did not run\n{}",
        g.diag()
    );
    let err = g.final_stderr();
    assert!(!err.contains("[gateway-signal]"), "{what}: {err}");
    assert!(!err.contains("[gateway-exit]"), "{what}: {err}");
    g.close_stdin();
    let (st, _) = g.exit_within(Instant::now(), secs(10));
    assert_eq!(st.code(), Some(0), "{what}\n{}", g.diag());
}

#[test]
fn inherited_sig_ign_on_sigint_keeps_the_gateway_running() {
    let mut g = RawGateway::spawn(RawOpts {
        ignore: vec![libc::SIGINT],
        ..Default::default()
    });
    g.wait_frame("gateway.ready", T, |v| {
        event_type(v) == Some("gateway.ready")
    });
    let (ign, _) = g.sig_masks();
    assert_ne!(
        ign & (1 << (libc::SIGINT - 1)),
        0,
        "SIGINT should still be ignored"
    );
    assert_keeps_working(&mut g, &[libc::SIGINT], "inherited SIG_IGN");
}

#[test]
fn sigint_under_a_pipe_is_ignored() {
    let mut g = RawGateway::spawn(RawOpts::default());
    g.wait_frame("gateway.ready", T, |v| {
        event_type(v) == Some("gateway.ready")
    });
    assert_keeps_working(&mut g, &[libc::SIGINT], "stdin is a pipe");
}

#[test]
fn inherited_sig_ign_on_sigterm_and_sighup_is_respected() {
    let mut g = RawGateway::spawn(RawOpts {
        ignore: vec![libc::SIGTERM, libc::SIGHUP],
        ..Default::default()
    });
    g.wait_frame("gateway.ready", T, |v| {
        event_type(v) == Some("gateway.ready")
    });
    let (ign, cgt) = g.sig_masks();
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        let bit = 1u64 << (sig - 1);
        assert_ne!(ign & bit, 0, "signal {sig} should stay ignored");
        assert_eq!(cgt & bit, 0, "signal {sig} should not be caught");
    }
    assert_keeps_working(
        &mut g,
        &[libc::SIGHUP, libc::SIGTERM],
        "inherited SIG_IGN on TERM and HUP",
    );
}

#[test]
fn sigint_with_a_terminal_stdin_shuts_down() {
    let mut g = RawGateway::spawn(RawOpts {
        stdin: RawStdin::Pty,
        ..Default::default()
    });
    g.wait_frame("gateway.ready", T, |v| {
        event_type(v) == Some("gateway.ready")
    });
    g.call("ping", json!({}));
    let r = g.call("session.create", json!({}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let stored = r["stored_session_id"].as_str().unwrap().to_string();
    g.run_turn(&sid, "on a terminal");
    let t0 = Instant::now();
    kill(g.pid(), libc::SIGINT);
    let (st, _) = g.exit_within(t0, EXIT_DEADLINE);
    assert_eq!(st.code(), Some(0), "{}", g.diag());
    let err = g.stderr_text();
    assert!(err.contains("[gateway-signal] SIGINT"), "{err}");
    assert!(err.contains("[gateway-exit] SIGINT"), "{err}");
    assert_eq!(message_rows(&g.db_path(), &stored).len(), 2);
    assert_eq!(
        session_end(&g.db_path(), &stored).1.as_deref(),
        Some("tui_shutdown")
    );
}

#[test]
fn inherited_sig_ign_on_sigint_is_respected_on_a_terminal_too() {
    let mut g = RawGateway::spawn(RawOpts {
        stdin: RawStdin::Pty,
        ignore: vec![libc::SIGINT],
        ..Default::default()
    });
    g.wait_frame("gateway.ready", T, |v| {
        event_type(v) == Some("gateway.ready")
    });
    assert_keeps_working(&mut g, &[libc::SIGINT], "terminal stdin, inherited SIG_IGN");
}

// ---------------------------------------------------------------------------------------------
// 8. Partial text: written at most once per interval, one row, SIGKILL loses ≤ ~1 interval
// ---------------------------------------------------------------------------------------------

const OFFLINE_PREFIX: &str = "(offline model) You said: ";

fn assistant_rows(db: &std::path::Path, stored: &str) -> Vec<MsgRow> {
    message_rows(db, stored)
        .into_iter()
        .filter(|r| r.role == "assistant")
        .collect()
}

fn deltas_text(g: &mut Gateway, sid: &str) -> String {
    g.events_of_session(sid)
        .iter()
        .filter(|e| e["type"] == "message.delta")
        .map(|e| e["payload"]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn sigkill_mid_stream_loses_at_most_one_flush_interval_and_the_next_start_repairs_it() {
    let interval_ms = 200u64;
    let delay_ms = 20u64;
    let home = TempHome::new("sd-partial");
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0.2")
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "20")
        .start();
    let s = g.create_session(json!({}));
    let prompt = long_prompt("partial text", 400);
    let full = format!("{OFFLINE_PREFIX}{prompt}");
    let r = g.call("prompt.submit", json!({"session_id": s.id, "text": prompt}));
    assert_eq!(r["status"], "streaming");
    // Let it stream well past a few intervals, with a partial row in the db.
    let db = home.db_path();
    let deadline = Instant::now() + T;
    loop {
        g.collect_for(ms(20));
        let got = deltas_text(&mut g, &s.id);
        if got.split_whitespace().count() >= 60 && !assistant_rows(&db, &s.stored).is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no partial row while streaming\n{}",
            g.diag()
        );
        assert!(
            g.events_of_session(&s.id)
                .iter()
                .all(|e| e["type"] != "message.complete"),
            "the reply finished before the kill; make it longer"
        );
    }
    g.signal(libc::SIGKILL);
    let st = g.wait_exit(secs(10));
    assert_eq!(st.code(), None, "killed by a signal");
    let received = deltas_text(&mut g, &s.id);
    assert!(
        full.starts_with(&received),
        "deltas are not a prefix of the reply"
    );
    assert!(
        g.events_of_session(&s.id)
            .iter()
            .all(|e| e["type"] != "message.complete"),
        "the turn completed before the kill"
    );

    integrity_ok(&db).unwrap();
    let rows = message_rows(&db, &s.stored);
    assert_eq!(rows.len(), 2, "user + one partial assistant row: {rows:#?}");
    assert_eq!(rows[0].content.as_deref(), Some(prompt.as_str()));
    let partial = rows[1].content.clone().unwrap_or_default();
    assert_eq!(rows[1].role, "assistant");
    assert_eq!(
        rows[1].finish_reason, None,
        "a partial row has no finish_reason"
    );
    assert!(
        received.starts_with(&partial),
        "the partial row is not a prefix of what the client received:\n  db:  {partial:?}\n  got: {received:?}"
    );
    let lost = received[partial.len()..].split_whitespace().count() as u64;
    let per_interval = interval_ms / delay_ms;
    assert!(
        lost <= per_interval + 5,
        "SIGKILL lost {lost} words of received text; one flush interval is ~{per_interval} words"
    );
    assert!(!partial.is_empty());

    // The next start ends the row `gateway_killed`; resume shows the partial text.
    let mut g2 = Gateway::builder().home(&home.path).start();
    g2.ping();
    wait_stderr(
        &mut g2,
        "ended 1 session(s) left open by a killed gateway",
        secs(5),
    );
    let (ended_at, reason) = session_end(&db, &s.stored);
    assert!(ended_at.is_some());
    assert_eq!(reason.as_deref(), Some("gateway_killed"));
    let r = g2.call("session.resume", json!({"session_id": s.stored}));
    assert_eq!(r["message_count"], 2, "{r}");
    assert_eq!(
        r["messages"],
        json!([{"role": "user", "text": prompt}, {"role": "assistant", "text": partial}])
    );
    // it goes on from there, in the same stored session
    let rid = r["session_id"].as_str().unwrap().to_string();
    let t = g2.run_turn(&rid, "after the crash");
    assert_eq!(t.complete["payload"]["status"], "complete");
    let rows = message_rows(&db, &s.stored);
    assert_eq!(rows.len(), 4, "{rows:#?}");
    assert_eq!(rows[1].content.as_deref(), Some(partial.as_str()));
    assert_eq!(rows[3].content.as_deref(), Some(t.text.as_str()));
}

#[test]
fn partial_text_writes_are_throttled_to_the_interval_and_the_final_message_reuses_the_row() {
    let interval = 0.2f64;
    let mut g = Gateway::builder()
        .tag("sd-throttle")
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0.2")
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "15")
        .start();
    let s = g.create_session(json!({}));
    let db = g.db_path();
    // Count every write of message content, with the gateway's own clock, through a trigger
    // (Hermes databases carry triggers on `messages`; the gateway must live with them).
    open_db(&db)
        .execute_batch(
            "CREATE TABLE test_content_writes(msg_id INTEGER, role TEXT, len INTEGER, at REAL);
             CREATE TRIGGER test_cw_ins AFTER INSERT ON messages BEGIN
               INSERT INTO test_content_writes VALUES
                 (new.id, new.role, length(new.content), (julianday('now') - 2440587.5) * 86400.0);
             END;
             CREATE TRIGGER test_cw_upd AFTER UPDATE OF content ON messages BEGIN
               INSERT INTO test_content_writes VALUES
                 (new.id, new.role, length(new.content), (julianday('now') - 2440587.5) * 86400.0);
             END;",
        )
        .unwrap();
    let prompt = long_prompt("throttle me", 150);
    let full = format!("{OFFLINE_PREFIX}{prompt}");
    let t0 = Instant::now();
    let r = g.call("prompt.submit", json!({"session_id": s.id, "text": prompt}));
    assert_eq!(r["status"], "streaming");

    // Sample the row while it streams.
    let mut samples: Vec<String> = Vec::new();
    let deadline = Instant::now() + secs(30);
    loop {
        g.collect_for(ms(25));
        let done = g
            .events_of_session(&s.id)
            .iter()
            .any(|e| e["type"] == "message.complete");
        let a = assistant_rows(&db, &s.stored);
        assert!(
            a.len() <= 1,
            "more than one assistant row while streaming: {a:#?}"
        );
        if let Some(row) = a.first() {
            let c = row.content.clone().unwrap_or_default();
            assert!(
                full.starts_with(&c),
                "partial row is not a prefix of the reply: {c:?}"
            );
            if let Some(last) = samples.last() {
                assert!(
                    c.starts_with(last.as_str()),
                    "partial row went backwards: {last:?} -> {c:?}"
                );
            }
            if samples.last() != Some(&c) {
                samples.push(c);
            }
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reply never completed\n{}",
            g.diag()
        );
    }
    let streamed_for = t0.elapsed().as_secs_f64();
    let t = g.finish_turn(&s.id, 0, T);
    assert_eq!(t.text, full);

    // exactly one assistant row, the partial row, now holding the final message
    let a = assistant_rows(&db, &s.stored);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0].content.as_deref(), Some(full.as_str()));
    assert_eq!(a[0].finish_reason.as_deref(), Some("stop"));
    let partial_samples = samples.iter().filter(|c| c.as_str() != full).count();
    assert!(
        partial_samples >= 2,
        "the row should grow in steps while streaming; saw {partial_samples} partial states"
    );

    let c = open_db(&db);
    let mut st = c
        .prepare("SELECT len, at FROM test_content_writes WHERE msg_id = ?1 ORDER BY rowid")
        .unwrap();
    let writes: Vec<(i64, f64)> = st
        .query_map([a[0].id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert!(writes.len() >= 3, "too few partial-text writes: {writes:?}");
    let (last_len, _) = *writes.last().unwrap();
    assert_eq!(
        last_len as usize,
        full.chars().count(),
        "the last write is the final text"
    );
    // Every partial-text write (all writes but the final one) at least one interval after the
    // previous.
    let partial_writes = &writes[..writes.len() - 1];
    for w in partial_writes.windows(2) {
        let gap = w[1].1 - w[0].1;
        assert!(
            gap >= interval * 0.9,
            "two partial-text writes {gap:.3}s apart (interval {interval}s): {writes:?}"
        );
        assert!(
            w[1].0 > w[0].0,
            "a partial-text write without new text: {writes:?}"
        );
    }
    let bound = (streamed_for / interval).ceil() as usize + 2;
    assert!(
        partial_writes.len() <= bound,
        "{} partial-text writes in {streamed_for:.2}s (interval {interval}s): {writes:?}",
        partial_writes.len()
    );
    let words = full.split_whitespace().count();
    assert!(
        partial_writes.len() < words / 4,
        "partial-text writes are not throttled: {} for {words} words",
        partial_writes.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 9. Idle reaper
// ---------------------------------------------------------------------------------------------

#[test]
fn idle_sessions_are_reaped_ended_and_resumable_while_busy_ones_are_left_alone() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let mut g = Gateway::builder()
        .tag("sd-ttl")
        .env("HERMES_TUI_SESSION_TTL_S", "1")
        .start();
    let idle = g.create_session(json!({}));
    let t = g.run_turn(&idle.id, "remember me");
    // a session busier than the TTL: its command runs for ~3 s
    let busy = g.create_session(json!({}));
    let busy_tool = start_tool(&mut g, &busy.id, &format!("sleep 3.{m}; echo busy-{m}"));
    let db = g.db_path();
    let mut reaped = false;
    let deadline = Instant::now() + secs(10);
    while Instant::now() < deadline {
        g.collect_for(ms(50));
        if session_end(&db, &idle.stored).1.as_deref() == Some("session_ttl") {
            reaped = true;
            break;
        }
    }
    assert!(
        reaped,
        "idle session not reaped within 10 s (TTL 1 s)\n{}",
        g.diag()
    );
    assert!(session_end(&db, &idle.stored).0.is_some());
    // the busy one is still running and not ended
    assert_eq!(
        session_end(&db, &busy.stored),
        (None, None),
        "a running session was reaped"
    );
    let l = g.call("session.active_list", json!({}));
    let ids = listed_ids(&l);
    assert!(
        !ids.contains(&idle.id.as_str()),
        "evicted session still listed: {l}"
    );
    assert!(ids.contains(&busy.id.as_str()), "{l}");
    // the runtime id is gone
    g.expect_code("session.history", json!({"session_id": idle.id}), 4001);
    g.expect_code(
        "prompt.submit",
        json!({"session_id": idle.id, "text": "hello?"}),
        4001,
    );
    // the busy turn completes normally
    let done = g.wait_session_event(&busy.id, "message.complete", secs(20));
    assert_eq!(done["payload"]["status"], "complete", "{done}");
    let tc = g
        .frames
        .iter()
        .find(|f| {
            event_type(f) == Some("tool.complete")
                && f["params"]["payload"]["tool_id"] == busy_tool.as_str()
        })
        .unwrap()
        .clone();
    assert_eq!(tc["params"]["payload"]["result"]["exit_code"], 0, "{tc}");

    // resume by stored id restores the history, and the session goes on
    let r = g.call("session.resume", json!({"session_id": idle.stored}));
    let rid = r["session_id"].as_str().unwrap().to_string();
    assert_ne!(rid, idle.id);
    assert_eq!(r["stored_session_id"], idle.stored.as_str());
    assert_eq!(
        r["messages"],
        json!([{"role": "user", "text": "remember me"}, {"role": "assistant", "text": t.text}])
    );
    let h = g.call("session.history", json!({"session_id": rid}));
    assert_eq!(h["count"], 2, "{h}");
    let t2 = g.run_turn(&rid, "back again");
    let rows = message_rows(&db, &idle.stored);
    let got: Vec<Option<&str>> = rows.iter().map(|r| r.content.as_deref()).collect();
    assert_eq!(
        got,
        [
            Some("remember me"),
            Some(t.text.as_str()),
            Some("back again"),
            Some(t2.text.as_str())
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// 10. Startup repair after SIGKILL during a tool call
// ---------------------------------------------------------------------------------------------

/// A prompt acknowledged as queued behind a running tool, then SIGKILL: the next gateway keeps
/// it as a user message and says so on stderr.
#[test]
fn startup_repair_reports_the_queued_prompts_it_kept() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("sd-repair-queued");
    let s = {
        let mut g = Gateway::builder().home(&home.path).start();
        let s = g.create_session(json!({}));
        start_tool(&mut g, &s.id, &format!("sleep 300.{m}"));
        let r = g.call(
            "prompt.submit",
            json!({"session_id": s.id, "text": "waiting behind the tool"}),
        );
        assert_eq!(r["status"], "queued", "{r}");
        g.signal(libc::SIGKILL);
        g.wait_exit(secs(10));
        s
    };
    assert_none_left(&m, secs(1), "after SIGKILL of the gateway");
    let mut g = Gateway::builder().home(&home.path).start();
    g.ping();
    wait_stderr(
        &mut g,
        "ended 1 session(s) left open by a killed gateway (1 tool result(s) marked unknown); \
         kept 1 queued prompt(s) as user messages",
        secs(5),
    );
    let rows = message_rows(&home.db_path(), &s.stored);
    assert_eq!(
        rows.last().and_then(|r| r.content.as_deref()),
        Some("waiting behind the tool"),
        "{rows:#?}"
    );
}

#[test]
fn startup_repair_after_sigkill_during_a_tool_call() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("sd-repair");
    let cmd = format!("sleep 300.{m}");
    let (s, tool_id) = {
        let mut g = Gateway::builder().home(&home.path).start();
        let s = g.create_session(json!({"title": "cut off"}));
        let tool_id = start_tool(&mut g, &s.id, &cmd);
        wait_for_proc("sleep", &m, T);
        g.signal(libc::SIGKILL);
        g.wait_exit(secs(10));
        (s, tool_id)
    };
    // the supervisor's lifeline closed: the command goes within milliseconds
    assert_none_left(&m, secs(1), "after SIGKILL of the gateway");
    let db = home.db_path();
    integrity_ok(&db).unwrap();
    assert_eq!(
        session_end(&db, &s.stored),
        (None, None),
        "nobody ended it yet"
    );

    let mut g = Gateway::builder().home(&home.path).start();
    g.ping();
    wait_stderr(
        &mut g,
        "ended 1 session(s) left open by a killed gateway (1 tool result(s) marked unknown)",
        secs(5),
    );
    let (ended_at, reason) = session_end(&db, &s.stored);
    assert!(ended_at.is_some());
    assert_eq!(reason.as_deref(), Some("gateway_killed"));
    let rows = message_rows(&db, &s.stored);
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert_eq!(
        rows[0].content.as_deref(),
        Some(format!("$ {cmd}").as_str())
    );
    assert_eq!(rows[1].call_ids(), vec![tool_id.clone()]);
    assert_eq!(rows[2].role, "tool");
    assert_eq!(rows[2].tool_call_id.as_deref(), Some(tool_id.as_str()));
    assert!(
        rows[2]
            .content
            .as_deref()
            .is_some_and(|c| c.contains("outcome unknown")),
        "{rows:#?}"
    );

    // resumable, and new turns append to the same stored session
    let r = g.call("session.resume", json!({"session_id": s.stored}));
    assert_eq!(r["message_count"], 3, "{r}");
    assert_eq!(
        r["messages"][0],
        json!({"role": "user", "text": format!("$ {cmd}")})
    );
    assert_eq!(r["messages"][1]["role"], "tool", "{r}");
    let rid = r["session_id"].as_str().unwrap().to_string();
    let t = g.run_turn(&rid, "and now something else");
    assert_eq!(t.complete["payload"]["status"], "complete");
    let t2 = g.run_turn(&rid, &format!("$ echo again-{m}"));
    assert_eq!(t2.complete["payload"]["status"], "complete");
    let rows = message_rows(&db, &s.stored);
    assert_eq!(rows.len(), 3 + 2 + 4, "{rows:#?}");
    assert_eq!(rows[3].content.as_deref(), Some("and now something else"));
    assert_eq!(rows[4].content.as_deref(), Some(t.text.as_str()));
    assert_eq!(
        rows[5].content.as_deref(),
        Some(format!("$ echo again-{m}").as_str())
    );
    assert_eq!(rows[8].content.as_deref(), Some(t2.text.as_str()));
    g.close_stdin();
    assert_eq!(g.wait_exit(secs(10)).code(), Some(0));
    assert_eq!(
        session_end(&db, &s.stored).1.as_deref(),
        Some("tui_shutdown")
    );
}

/// Every tool call id of a transcript must be unique (model APIs pair calls and results by
/// id), also across gateway restarts — and startup repair depends on it: a call cut off by
/// SIGKILL whose id equals an older, answered call of the same session would be taken for
/// answered and left without a result.
#[test]
fn tool_call_ids_stay_unique_across_restarts_so_repair_finds_the_cut_off_call() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("sd-ids");
    let db = home.db_path();
    // gateway 1: one completed tool turn
    let stored = {
        let mut g = Gateway::builder().home(&home.path).start();
        let s = g.create_session(json!({}));
        g.run_turn(&s.id, &format!("$ echo first-{m}"));
        g.close_stdin();
        assert_eq!(g.wait_exit(secs(10)).code(), Some(0));
        s.stored
    };
    // gateway 2: resume, start a long command, SIGKILL
    {
        let mut g = Gateway::builder().home(&home.path).start();
        let r = g.call("session.resume", json!({"session_id": stored}));
        let rid = r["session_id"].as_str().unwrap().to_string();
        start_tool(&mut g, &rid, &format!("sleep 300.{m}"));
        wait_for_proc("sleep", &m, T);
        g.signal(libc::SIGKILL);
        g.wait_exit(secs(10));
    }
    assert_none_left(&m, secs(1), "after SIGKILL");
    // gateway 3: repair
    let mut g = Gateway::builder().home(&home.path).start();
    g.ping();
    wait_stderr(&mut g, "left open by a killed gateway", secs(5));
    let rows = message_rows(&db, &stored);
    let calls: Vec<String> = rows.iter().flat_map(|r| r.call_ids()).collect();
    let mut uniq = calls.clone();
    uniq.sort();
    uniq.dedup();
    let answers = |id: &str| {
        rows.iter()
            .filter(|r| r.role == "tool" && r.tool_call_id.as_deref() == Some(id))
            .count()
    };
    let report: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {} calls={:?} answers={:?} {:?}",
                r.id,
                r.role,
                r.call_ids(),
                r.tool_call_id,
                r.content.as_deref().map(|c| truncate(c, 70))
            )
        })
        .collect();
    assert_eq!(
        uniq.len(),
        calls.len(),
        "tool call ids repeat within one transcript:\n{}",
        report.join("\n")
    );
    for id in &calls {
        assert_eq!(
            answers(id),
            1,
            "call {id} is answered {} times after repair:\n{}",
            answers(id),
            report.join("\n")
        );
    }
}
