//! Resuming a session longer than what a resume reads at once (its newest 1,000 messages; the
//! older ones follow a step per loop iteration, `src/session/older.rs`): a prompt sent at once
//! runs on the whole transcript, undo counts every stored row, and a `message_count` that
//! disagrees with the rows is put right.

use crate::common;

use common::*;
use serde_json::json;
use std::path::Path;

const STORED: usize = 20_000;

/// A closed session titled `title` with `STORED` messages `m0`.. and `message_count` set to
/// `count`; its stored id. The model's window holds them all (no compaction after a turn).
fn long_session(home: &Path, title: &str, count: usize) -> String {
    std::fs::write(
        home.join("config.yaml"),
        "model:\n  context_length: 10000000\n",
    )
    .unwrap();
    let stored = {
        let mut g = Gateway::builder().home(home).start();
        let s = g.create_session(json!({ "title": title }));
        g.call("session.close", json!({"session_id": s.id}));
        g.close_stdin();
        g.wait_exit(T);
        s.stored
    };
    append_messages(
        &home.join("state.db"),
        &stored,
        STORED,
        |i| format!("m{i}"),
        count,
    );
    stored
}

/// The stored texts of a session, in order, and its row's `message_count`.
fn stored(g: &Gateway, id: &str) -> (Vec<String>, i64) {
    let db = g.db();
    let mut q = db
        .prepare("SELECT content FROM messages WHERE session_id = ?1 ORDER BY id")
        .unwrap();
    let texts = q
        .query_map([id], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let count = db
        .query_row(
            "SELECT message_count FROM sessions WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    (texts, count)
}

#[test]
fn a_prompt_right_after_resuming_a_long_session_runs_on_all_of_it_and_undo_counts_every_row() {
    let home = TempHome::new("big-resume");
    let id = long_session(&home.path, "long one", STORED);
    let mut g = Gateway::builder().home(&home.path).start();
    let r = g.call("session.resume", json!({"session_id": "long one"}));
    assert_eq!(r["message_count"], STORED);
    let shown = r["messages"].as_array().unwrap();
    assert_eq!(shown.len(), 500);
    assert_eq!(shown[499]["text"], format!("m{}", STORED - 1));
    let rid = r["session_id"].as_str().unwrap().to_string();
    // Sent while the older messages may still be read: it runs (queued until they are).
    let start = g.frames.len();
    let a = g.call("prompt.submit", json!({"session_id": rid, "text": "hello"}));
    assert!(a["status"] == "streaming" || a["status"] == "queued", "{a}");
    let t = g.finish_turn(&rid, start, T);
    assert_eq!(t.text, "(offline model) You said: hello");
    let status = g.call("session.status", json!({"session_id": rid}));
    let out = status["output"].as_str().unwrap();
    assert!(out.contains(&format!("Messages: {}", STORED + 2)), "{out}");
    let (texts, count) = stored(&g, &id);
    assert_eq!(texts.len(), STORED + 2);
    assert_eq!(count, (STORED + 2) as i64);
    assert_eq!(texts[STORED], "hello");
    let want: Vec<String> = (0..STORED).map(|i| format!("m{i}")).collect();
    assert_eq!(texts[..STORED], want[..]);

    // Undo takes the turn back, and only it.
    let u = g.call("session.undo", json!({"session_id": rid}));
    assert_eq!(u["removed"], 2);
    g.ping();
    let (texts, count) = stored(&g, &id);
    assert_eq!(texts, want);
    assert_eq!(count, STORED as i64);
    // The first page of history reaches the first message.
    let h = g.call(
        "session.history",
        json!({"session_id": rid, "before": 3, "limit": 10}),
    );
    assert_eq!(h["first"], 0);
    assert_eq!(h["total"], STORED);
    assert_eq!(h["messages"][0]["text"], "m0");
    g.close_stdin();
    g.wait_exit(T);
}

#[test]
fn a_long_session_whose_row_miscounts_its_messages_is_counted_right_once_read() {
    let home = TempHome::new("big-resume-count");
    let id = long_session(&home.path, "miscounted", STORED + 5_000);
    let mut g = Gateway::builder().home(&home.path).start();
    g.call("session.resume", json!({"session_id": "miscounted"}));
    // Polled: the older messages are read over a few loop iterations, then committed.
    let deadline = std::time::Instant::now() + T;
    while stored(&g, &id).1 != STORED as i64 {
        assert!(
            std::time::Instant::now() < deadline,
            "still {}",
            stored(&g, &id).1
        );
        g.ping();
    }
    g.close_stdin();
    g.wait_exit(T);
}
