//! Deleting a long stored session (`session.delete`): the answer does not wait for its
//! messages. The session row goes in the answer's transaction — from then on no list, search
//! or resume finds it, and its children are unlinked from it — and the messages (each also an
//! FTS5 delete) leave state.db a bounded batch per loop iteration, while other sessions go
//! on. A gateway killed in the middle leaves a marker the next one finishes from.

use crate::common;

use common::procfs::poll_until;
use common::*;
use serde_json::json;
use std::path::Path;

const STORED: usize = 100_000;
/// The WAL's size while they go: under 1,500 pages of 4 KiB. The batches' frames add up to
/// about 6,500 (26 MB) over the purge of `STORED` messages; checkpoints every 512 of them keep
/// it near 600 (while readers hold no long snapshot).
const WAL_BOUND: u64 = 1_500 * 4_120;

/// A closed session titled `title` holding `STORED` messages that say "needle", and a closed
/// branch of it; their stored ids.
fn long_session(home: &Path, title: &str) -> (String, String) {
    let (stored, child) = {
        let mut g = Gateway::builder().home(home).start();
        let s = g.create_session(json!({ "title": title }));
        g.call("session.close", json!({"session_id": s.id}));
        let c = g.create_session(json!({ "title": "its branch" }));
        g.run_turn(&c.id, "branch text");
        g.call("session.close", json!({"session_id": c.id}));
        g.close_stdin();
        g.wait_exit(T);
        (s.stored, c.stored)
    };
    let db = home.join("state.db");
    append_messages(&db, &stored, STORED, |i| format!("needle m{i}"), STORED);
    open_db(&db)
        .execute(
            "UPDATE sessions SET parent_session_id = ?1 WHERE id = ?2",
            rusqlite::params![stored, child],
        )
        .unwrap();
    (stored, child)
}

/// Whether the `session.list` answer `l` lists stored session `id`.
fn listed(l: &serde_json::Value, id: &str) -> bool {
    l["sessions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|e| e["id"] == id))
}

fn count(db: &rusqlite::Connection, sql: &str, id: &str) -> i64 {
    db.query_row(sql, [id], |r| r.get(0)).unwrap()
}

fn messages_of(db: &rusqlite::Connection, id: &str) -> i64 {
    count(
        db,
        "SELECT count(*) FROM messages WHERE session_id = ?1",
        id,
    )
}

/// Whether session `id` has a message left: an index probe, so the poll holds no long read.
fn any_message_of(db: &rusqlite::Connection, id: &str) -> bool {
    count(
        db,
        "SELECT EXISTS(SELECT 1 FROM messages WHERE session_id = ?1)",
        id,
    ) == 1
}

#[test]
fn a_long_session_is_gone_at_the_answer_and_its_messages_leave_in_batches() {
    let home = TempHome::new("bigdelete");
    let (stored, child) = long_session(&home.path, "the long one");
    let mut g = Gateway::builder().home(&home.path).start();
    let other = g.create_session(json!({}));
    let r = g.call("session.delete", json!({"session_id": stored}));
    assert_eq!(r["deleted"], stored.as_str(), "{r}");
    let db = g.db();
    // The answer came before the messages were gone: they go after it, step by step.
    let left = messages_of(&db, &stored);
    assert!(left > 0, "the answer waited for all {STORED} messages");
    // Gone for every reader now.
    let l = g.call("session.list", json!({}));
    assert!(!listed(&l, &stored), "{l}");
    g.expect_code("session.resume", json!({"session_id": stored}), 4007);
    assert_eq!(
        count(&db, "SELECT count(*) FROM sessions WHERE id = ?1", &stored),
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sessions WHERE id = ?1 AND parent_session_id IS NULL",
            &child
        ),
        1,
        "the branch is unlinked from the deleted session, as Hermes does"
    );
    // Its title is free again.
    let again = g.create_session(json!({ "title": "the long one" }));
    let titled = poll_until(T, || {
        count(
            &db,
            "SELECT count(*) FROM sessions WHERE id = ?1 AND title = 'the long one'",
            &again.stored,
        ) == 1
    });
    assert!(
        titled,
        "the new session did not get the deleted one's title"
    );
    // Meanwhile the loop serves others: a whole turn runs while messages are still there
    // or after they went; either way they all go.
    g.run_turn(&other.id, "still served");
    // The WAL is checkpointed as the batches go: it never holds the whole purge.
    let wal = home.path.join("state.db-wal");
    let mut wal_peak = 0;
    let gone = poll_until(secs(60), || {
        wal_peak = wal_peak.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        !any_message_of(&db, &stored)
    });
    assert!(gone, "{} messages left", messages_of(&db, &stored));
    assert!(
        wal_peak < WAL_BOUND,
        "the WAL grew to {wal_peak} bytes during the purge"
    );
    // FTS5's merges were held off in the batches, and its setting is as it was (unset).
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM messages_fts_config WHERE k = ?1",
            "automerge"
        ),
        0
    );
    db.execute_batch("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        .expect("the full-text index matches the messages left");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tui_gateway_purge WHERE session_id = ?1",
            &stored
        ),
        0
    );
    let found = g.call("session.list", json!({}));
    assert!(listed(&found, &child), "{found}");
}

#[test]
fn a_delete_cut_by_a_kill_is_finished_by_the_next_gateway() {
    let home = TempHome::new("bigdelete-kill");
    let (stored, _) = long_session(&home.path, "cut short");
    let mut g = Gateway::builder().home(&home.path).start();
    let r = g.call("session.delete", json!({"session_id": stored}));
    assert_eq!(r["deleted"], stored.as_str(), "{r}");
    g.signal(libc::SIGKILL);
    g.wait_exit(T);
    let db = rusqlite::Connection::open(home.path.join("state.db")).unwrap();
    let left = messages_of(&db, &stored);
    assert_eq!(
        count(&db, "SELECT count(*) FROM sessions WHERE id = ?1", &stored),
        0,
        "the row went with the answer"
    );
    // What the killed gateway left is the marker and the rest of the messages, whatever
    // instant the kill came at; the next gateway removes them without being asked.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tui_gateway_purge WHERE session_id = ?1",
            &stored
        ),
        (left > 0) as i64
    );
    let mut g = Gateway::builder().home(&home.path).start();
    g.expect_code("session.resume", json!({"session_id": stored}), 4007);
    let gone = poll_until(secs(60), || messages_of(&db, &stored) == 0);
    assert!(gone, "{} messages left", messages_of(&db, &stored));
    let l = g.call("session.list", json!({}));
    assert!(!listed(&l, &stored), "{l}");
}
