//! state.db shared with other processes and other gateways, and the columns we own, as a user
//! sees them (issue 11, "Files and the store"):
//!
//! - SIGTERM while another process holds the write lock: the gateway exits (within a deadline
//!   from the shutdown grace) even when the first exit flush spent its whole budget waiting, and
//!   what it could not save lands at the next start;
//! - while another process holds the lock, commits are retried on the timer and never wait in
//!   SQLite: the loop serves a new session's turn meanwhile, and everything lands once the lock
//!   goes;
//! - `sessions.message_count` counts the rows after a kill (a partial row, a tool call
//!   cut off, a queued prompt) and after the next start's repair;
//! - a session another running gateway holds open is not resumed a second time (4023); one a
//!   dead gateway left open is, repaired;
//! - a title shared by 10,000 stored sessions still gets its next number.

use crate::common;
use crate::crashkit;

use common::*;
use crashkit::*;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// `(stored id, message_count, rows in messages)` of every stored session.
fn counts(db: &std::path::Path) -> Vec<(String, i64, i64)> {
    let c = open_db(db);
    let mut stmt = c
        .prepare(
            "SELECT s.id, s.message_count, (SELECT count(*) FROM messages m WHERE m.session_id = s.id)
             FROM sessions s ORDER BY s.id",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn assert_counts_true(db: &std::path::Path, when: &str) {
    let all = counts(db);
    let wrong: Vec<_> = all.iter().filter(|(_, said, rows)| said != rows).collect();
    assert!(
        wrong.is_empty(),
        "{when}: message_count differs from the rows (id, column, rows): {wrong:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A lock held by another process
// ---------------------------------------------------------------------------------------------

#[test]
fn sigterm_with_a_locked_db_exits_within_the_shutdown_grace_and_loses_nothing() {
    // The first exit flush waits for the lock until the exit-flush budget; the final commit
    // then has only what is left of the grace (it used to wait a fresh grace from a stale
    // clock). The exit is polled for with a deadline from the grace (a late exit fails it);
    // what could not be saved is in the journal, and lands at the next start.
    let grace = secs(3);
    let mut g = Gateway::builder()
        .tag("ss-term")
        .env("HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S", "3")
        .env("HERMES_TUI_EXIT_FLUSH_BUDGET_S", "2.5")
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0.2")
        .start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "before the lock");
    let mut lock = DbLock::take(&g.db_path());
    g.run_turn(&s.id, "while another process holds the lock");
    wait_stderr(&mut g, "could not save to state.db", secs(5));

    let t0 = Instant::now();
    g.signal(libc::SIGTERM);
    let (st, _) = exit_within(&mut g, t0, grace * 3);
    assert_eq!(st.code(), Some(0), "{}", g.diag());
    let err = final_stderr(&g);
    assert!(err.contains("could not persist before exit"), "{err}");
    let db = g.db_path();
    assert_eq!(
        message_rows(&db, &s.stored).len(),
        2,
        "the lock did not hold?"
    );
    lock.release();
    let home = db.parent().unwrap().to_path_buf();
    let mut next = Gateway::builder().home(&home).start();
    next.ping();
    let texts: Vec<_> = message_rows(&db, &s.stored)
        .into_iter()
        .map(|r| r.content.unwrap_or_default())
        .collect();
    assert_eq!(texts.len(), 4, "{texts:?}\n{}", next.diag());
    assert_eq!(texts[2], "while another process holds the lock");
    next.close_stdin();
    next.wait_exit(T);
}

#[test]
fn a_lock_held_elsewhere_does_not_stall_the_loop_and_everything_lands_after_it() {
    // The shortest flush interval: commits are retried as often as the gateway allows. A
    // retry that waited in SQLite for the lock (100 ms each, as before) would leave the loop
    // free for a few pings a second.
    let mut g = Gateway::builder()
        .tag("ss-ping")
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0.01")
        .start();
    let s = g.create_session(json!({}));
    let first = g.run_turn(&s.id, "before the lock");

    let mut lock = DbLock::take(&g.db_path());
    let during = g.run_turn(&s.id, "while another process holds the lock");
    assert_eq!(during.complete["payload"]["status"], "complete");
    wait_stderr(&mut g, "could not save to state.db", secs(5));
    // The loop serves a whole new session and turn while it retries the refused commit.
    let other = g.create_session(json!({}));
    let t = g.run_turn(&other.id, "another session meanwhile");
    assert_eq!(t.complete["payload"]["status"], "complete");
    // The commit is still refused: the gateway was retrying all along.
    assert_eq!(
        message_rows(&g.db_path(), &s.stored).len(),
        2,
        "the lock did not hold?"
    );
    lock.release();
    let db = g.db_path();
    let deadline = Instant::now() + T;
    while message_rows(&db, &s.stored).len() < 4 || message_rows(&db, &other.stored).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the pending messages never landed after the lock went\n{}",
            g.diag()
        );
        g.collect_for(ms(20));
    }
    let rows = message_rows(&db, &s.stored);
    let texts: Vec<_> = rows
        .iter()
        .map(|r| r.content.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        texts,
        [
            "before the lock".to_string(),
            first.text,
            "while another process holds the lock".to_string(),
            during.text
        ],
        "every message once, in order"
    );
    wait_stderr(&mut g, "state.db writable again", secs(5));
    assert_counts_true(&db, "after the lock");
    let other_rows = message_rows(&db, &other.stored);
    assert_eq!(
        other_rows[0].content.as_deref(),
        Some("another session meanwhile")
    );
}

// ---------------------------------------------------------------------------------------------
// The columns we own, after a kill and the repair
// ---------------------------------------------------------------------------------------------

#[test]
fn message_count_counts_the_rows_after_a_kill_and_after_the_repair() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("ss-count");
    let db = home.db_path();
    let (streaming, cut) = {
        let mut g = Gateway::builder()
            .home(&home.path)
            .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", "0.05")
            .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "5")
            .start();
        // A session with a finished turn, then a reply streaming when the kill comes (its
        // partial text is written into a row of its own).
        let streaming = g.create_session(json!({}));
        g.run_turn(&streaming.id, "a finished turn");
        // A session whose tool is cut off, with a prompt queued behind it.
        let cut = g.create_session(json!({}));
        let r = g.call(
            "prompt.submit",
            json!({"session_id": cut.id, "text": format!("$ sleep 300.{m}")}),
        );
        assert_eq!(r["status"], "streaming", "{r}");
        g.wait_session_event(&cut.id, "tool.start", T);
        wait_for_proc("sleep", &m, T);
        let r = g.call(
            "prompt.submit",
            json!({"session_id": cut.id, "text": "queued behind the tool"}),
        );
        assert_eq!(r["status"], "queued", "{r}");
        let r = g.call(
            "prompt.submit",
            json!({"session_id": streaming.id, "text": long_prompt("stream me", 2000)}),
        );
        assert_eq!(r["status"], "streaming", "{r}");
        let deadline = Instant::now() + T;
        while message_rows(&db, &streaming.stored).len() < 4 {
            assert!(Instant::now() < deadline, "no partial row\n{}", g.diag());
            g.collect_for(ms(20));
        }
        g.signal(libc::SIGKILL);
        g.wait_exit(secs(10));
        (streaming, cut)
    };
    assert_counts_true(&db, "after the kill");
    assert_eq!(message_rows(&db, &streaming.stored).len(), 4);

    let mut g = Gateway::builder().home(&home.path).start();
    g.ping();
    wait_stderr(&mut g, "ended 2 session(s) left open", secs(5));
    assert_counts_true(&db, "after the repair");
    // The repair added the cut-off call's result and the queued prompt.
    let rows = message_rows(&db, &cut.stored);
    assert_eq!(rows.len(), 4, "{rows:#?}");
    assert_eq!(rows[3].content.as_deref(), Some("queued behind the tool"));
    // The tools that read the column see what resume shows.
    let r = g.call("session.resume", json!({"session_id": cut.stored}));
    assert_eq!(r["message_count"], 4, "{r}");
    let listed = g.call("session.list", json!({}));
    let entry = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == streaming.stored.as_str())
        .cloned()
        .unwrap();
    assert_eq!(entry["message_count"], 4, "{entry}");
}

// ---------------------------------------------------------------------------------------------
// Two gateways on one HERMES_HOME
// ---------------------------------------------------------------------------------------------

#[test]
fn a_session_another_running_gateway_holds_is_refused_and_a_dead_ones_is_resumable() {
    let home = TempHome::new("ss-two");
    let db = home.db_path();
    let mut a = Gateway::builder().home(&home.path).start();
    let mut b = Gateway::builder().home(&home.path).start();
    let held = a.create_session(json!({"title": "held by a"}));
    a.run_turn(&held.id, "a writes this session");
    // A commit that met the other gateway's write lock went to a's journal and lands at the
    // retry: until then b cannot see the session at all.
    wait_rows_in_db(&db, &held.stored, 2);

    for wanted in [held.stored.as_str(), "held by a"] {
        let (code, msg, _) = b.call_err("session.resume", json!({"session_id": wanted}));
        assert_eq!(code, 4023, "{msg}");
        assert!(
            msg.contains("another running gateway") && msg.contains(&a.pid().to_string()),
            "says who holds it: {msg}"
        );
    }
    // b still works, and a's session goes on alone.
    b.ping();
    a.run_turn(&held.id, "a goes on");
    wait_rows_in_db(&db, &held.stored, 4);

    // Closed in a, it is b's to resume.
    a.call("session.close", json!({"session_id": held.id}));
    let r = b.call("session.resume", json!({"session_id": held.stored}));
    assert_eq!(r["message_count"], 4, "{r}");
    let rid = r["session_id"].as_str().unwrap().to_string();
    b.run_turn(&rid, "b goes on");
    wait_rows_in_db(&db, &held.stored, 6);
    // ...and now a is refused it.
    let (code, _, _) = a.call_err("session.resume", json!({"session_id": held.stored}));
    assert_eq!(code, 4023);

    // A gateway killed while b runs: its session is b's to resume (b's start-up repair did
    // not see it), repaired first.
    let m = marker();
    let _reaper = Reaper(m.clone());
    let mut c = Gateway::builder().home(&home.path).start();
    let orphan = c.create_session(json!({}));
    let r = c.call(
        "prompt.submit",
        json!({"session_id": orphan.id, "text": format!("$ sleep 300.{m}")}),
    );
    assert_eq!(r["status"], "streaming", "{r}");
    c.wait_session_event(&orphan.id, "tool.start", T);
    let (code, _, _) = b.call_err("session.resume", json!({"session_id": orphan.stored}));
    assert_eq!(code, 4023, "c is alive");
    // With b writing too, c's commit may have gone to its journal, which only the next
    // start folds: kill c once its rows are in state.db itself.
    let in_db = poll_until(secs(10), || {
        open_db(&db)
            .query_row(
                "SELECT COUNT(*) FROM messages WHERE session_id = ?1",
                [&orphan.stored],
                |r| r.get::<_, i64>(0),
            )
            .is_ok_and(|n| n >= 2)
    });
    assert!(in_db, "c never committed its prompt and call to state.db");
    c.signal(libc::SIGKILL);
    c.wait_exit(secs(10));
    let r = b.call("session.resume", json!({"session_id": orphan.stored}));
    assert_eq!(
        r["message_count"], 3,
        "prompt, call, and the result the repair added: {r}"
    );
    assert_eq!(r["messages"][1]["role"], "tool", "{r}");
    assert_counts_true(&db, "after resuming a dead gateway's session");
}

#[test]
fn a_gateway_that_dies_beside_another_leaves_its_journal_to_the_live_one() {
    // c saves only to its journal (another process holds state.db's write lock), then is
    // killed while b runs: b, not only the next start, folds what c journaled.
    let home = TempHome::new("ss-adopt");
    let db = home.db_path();
    let mut b = Gateway::builder().home(&home.path).start();
    // b's start-up is over (its store open) before c starts: two at once is another test's.
    b.ping();
    let mut c = Gateway::builder().home(&home.path).start();
    c.ping();
    let mut lock = DbLock::take(&db);
    let s = c.create_session(json!({"title": "only in a journal"}));
    let turn = c.run_turn(&s.id, "said while state.db was locked");
    wait_stderr(&mut c, "could not save to state.db", secs(5));
    c.signal(libc::SIGKILL);
    c.wait_exit(secs(10));
    assert!(
        message_rows(&db, &s.stored).is_empty(),
        "the lock did not hold?"
    );

    // Still locked: b says to try again rather than that the session does not exist.
    let (code, msg, _) = b.call_err("session.resume", json!({"session_id": s.stored}));
    assert!(code != 4007 && msg.contains("try again"), "{code} {msg}");
    lock.release();
    let listed = b.call("session.list", json!({}));
    let ids = listed_ids(&listed);
    assert!(
        ids.contains(&s.stored.as_str()),
        "b lists the journal's session: {listed}"
    );
    let r = b.call("session.resume", json!({"session_id": s.stored}));
    let texts: Vec<&str> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        texts,
        ["said while state.db was locked", turn.text.as_str()],
        "{r}"
    );
    assert_counts_true(&db, "after b folded c's journal");
    assert!(
        poll_until(secs(10), || !journal_files(&home.path)
            .iter()
            .any(|f| f.contains(&c.pid().to_string()))),
        "c's journal is gone once folded: {:?}",
        journal_files(&home.path)
    );
}

/// The journal files beside state.db in `home`.
fn journal_files(home: &Path) -> Vec<String> {
    std::fs::read_dir(home)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".journal"))
        .collect()
}

/// Wait until `want` messages of `stored` are in state.db itself (not only in a journal), and
/// no more than that.
fn wait_rows_in_db(db: &Path, stored: &str, want: usize) {
    let landed = poll_until(secs(10), || message_rows(db, stored).len() >= want);
    let rows = message_rows(db, stored);
    assert!(
        landed,
        "only {} of {want} rows reached state.db",
        rows.len()
    );
    assert_eq!(rows.len(), want, "{rows:#?}");
}

// ---------------------------------------------------------------------------------------------
// Unique titles
// ---------------------------------------------------------------------------------------------

#[test]
fn a_title_ten_thousand_stored_sessions_share_gets_the_next_number() {
    let mut g = Gateway::builder().tag("ss-title").start();
    g.ping();
    {
        let c = open_db(&g.db_path());
        c.execute_batch("BEGIN").unwrap();
        let mut add = c
            .prepare(
                "INSERT INTO sessions (id, source, title, started_at) VALUES (?1, 'tui', ?2, 1)",
            )
            .unwrap();
        add.execute(rusqlite::params!["seed_0", "same title"])
            .unwrap();
        for n in 2..=10_000 {
            add.execute(rusqlite::params![
                format!("seed_{n}"),
                format!("same title #{n}")
            ])
            .unwrap();
        }
        // Neighbours that are not of the family.
        for (id, t) in [
            ("x1", "same title #0"),
            ("x2", "same title #12a"),
            ("x3", "same titles"),
        ] {
            add.execute(rusqlite::params![id, t]).unwrap();
        }
        drop(add);
        c.execute_batch("COMMIT").unwrap();
    }
    let s = g.create_session(json!({"title": "same title"}));
    assert_eq!(
        s.result["info"]["title"], "same title #10001",
        "{}",
        s.result
    );
    let t = g.create_session(json!({"title": "same title"}));
    assert_eq!(
        t.result["info"]["title"], "same title #10002",
        "a live one counts too"
    );
    let u = g.create_session(json!({"title": "same"}));
    assert_eq!(
        u.result["info"]["title"], "same",
        "a prefix of the family is free"
    );
}
