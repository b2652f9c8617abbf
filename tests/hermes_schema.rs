//! The gateway opens a state.db created by Hermes Agent (more columns, indexes, an extra table,
//! an FTS5 index kept by triggers, and a session Hermes wrote) without complaint, writes into
//! it, and can resume and list Hermes' own session.

use std::time::Duration;

use crate::common;

use common::*;
use serde_json::json;

/// Modelled on Hermes Agent's `state.db` (hermes_state.py): wide tables, defaults, partial unique
/// index on titles, FTS5 external-content index maintained by triggers.
const HERMES_DDL: &str = r#"
PRAGMA journal_mode=WAL;
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version(version) VALUES (18);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    session_state TEXT NOT NULL DEFAULT 'active',
    owner_fingerprint TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
);

CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    is_hidden INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX idx_sessions_source ON sessions(source);
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX idx_messages_session ON messages(session_id, timestamp);
CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL;

CREATE TABLE routing_decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT,
    message_text TEXT NOT NULL,
    routed_model TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX idx_routing_decisions_session ON routing_decisions(session_id);
INSERT INTO routing_decisions(session_id, message_text, routed_model, created_at)
    VALUES ('20240102_101500_a1b2c3', 'hi', 'some-model', 1704190500.0);

CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages, content_rowid=id);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;

INSERT INTO sessions(id, source, user_id, model, model_config, system_prompt, started_at, ended_at,
                     end_reason, message_count, input_tokens, output_tokens, billing_provider,
                     estimated_cost_usd, title)
    VALUES ('20240102_101500_a1b2c3', 'cli', 'u-1', 'anthropic/claude-sonnet', '{"temperature":0.2}',
            'You are Hermes.', 1704190500.0, 1704190800.0, 'user_exit', 2, 120, 80, 'openrouter',
            0.0123, 'Hermes Old Chat');
INSERT INTO messages(session_id, role, content, timestamp, token_count, finish_reason)
    VALUES ('20240102_101500_a1b2c3', 'user', 'What is a narwhal?', 1704190510.0, 6, NULL);
INSERT INTO messages(session_id, role, content, timestamp, token_count, finish_reason, reasoning)
    VALUES ('20240102_101500_a1b2c3', 'assistant', 'A narwhal is a toothed whale of the Arctic.',
            1704190520.0, 11, 'stop', 'simple question');
"#;

const OLD: &str = "20240102_101500_a1b2c3";

fn fts_hits(db: &rusqlite::Connection, word: &str) -> Vec<(i64, String)> {
    let mut st = db
        .prepare(
            "SELECT m.id, m.session_id FROM messages_fts f JOIN messages m ON m.id = f.rowid \
             WHERE messages_fts MATCH ?1 ORDER BY m.id",
        )
        .unwrap();
    st.query_map([word], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn prepare_home() -> TempHome {
    let home = TempHome::new("hermes-schema");
    let db = rusqlite::Connection::open(home.db_path()).unwrap();
    db.execute_batch(HERMES_DDL).expect("Hermes DDL");
    drop(db);
    home
}

#[test]
fn works_on_a_hermes_created_database() {
    let home = prepare_home();
    let (s, reply, resumed_id);
    {
        let mut g = Gateway::builder().home(&home.path).start();

        // Hermes' own session is listed and resumable
        let l = g.call("session.list", json!({}));
        let old = l["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == OLD)
            .unwrap_or_else(|| panic!("Hermes' session not listed: {l}"))
            .clone();
        assert_eq!(old["title"], "Hermes Old Chat", "{old}");
        assert_eq!(old["source"], "cli", "{old}");
        assert_eq!(old["message_count"], 2, "{old}");

        let r = g.call("session.resume", json!({"session_id": OLD}));
        assert_eq!(r["stored_session_id"], OLD, "{r}");
        assert_eq!(r["message_count"], 2, "{r}");
        assert_eq!(r["messages"][0]["role"], "user", "{r}");
        assert_eq!(r["messages"][0]["text"], "What is a narwhal?", "{r}");
        assert_eq!(r["messages"][1]["role"], "assistant", "{r}");
        assert_eq!(
            r["messages"][1]["text"], "A narwhal is a toothed whale of the Arctic.",
            "{r}"
        );
        resumed_id = r["session_id"].as_str().unwrap().to_string();
        let t = g.run_turn(&resumed_id, "continue about zanzibarnarwhal tusks");
        assert_plain_turn(&t, &resumed_id, "continue about zanzibarnarwhal tusks");

        // and by title
        g.call("session.close", json!({"session_id": resumed_id}));
        let r = g.call("session.resume", json!({"session_id": "Hermes Old Chat"}));
        assert_eq!(r["stored_session_id"], OLD, "{r}");
        assert_eq!(r["message_count"], 4, "{r}");

        // a new session of ours: create + turn + close
        s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "quokkaxylophone is our unique word");
        assert_plain_turn(&t, &s.id, "quokkaxylophone is our unique word");
        reply = t.text;
        // the title index is unique: taking Hermes' title gets a suffix, not an error
        let r = g.call(
            "session.title",
            json!({"session_id": s.id, "title": "Hermes Old Chat"}),
        );
        assert_eq!(r["title"], "Hermes Old Chat #2", "{r}");
        assert_eq!(
            g.call("session.close", json!({"session_id": s.id})),
            json!({"closed": true})
        );

        g.close_stdin();
        let st = g.wait_exit(secs(10));
        assert!(st.success(), "{st:?}\n{}", g.diag());
        g.assert_clean_stdout();
    }

    let db = open_db(&home.db_path());
    // our rows landed, with Hermes' defaults filled in
    let (source, title, ended, reason, mc, cache_read, state): (String, String, Option<f64>, Option<String>, i64, i64, String) = db
        .query_row(
            "SELECT source, title, ended_at, end_reason, message_count, cache_read_tokens, session_state \
             FROM sessions WHERE id=?1",
            [&s.stored],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)),
        )
        .expect("our sessions row");
    assert_eq!(source, "tui");
    assert_eq!(title, "Hermes Old Chat #2");
    assert!(ended.is_some());
    assert_eq!(reason.as_deref(), Some("tui_close"));
    assert_eq!(mc, 2);
    assert_eq!(cache_read, 0, "column default applies");
    assert_eq!(state, "active", "column default applies");

    let msgs: Vec<(String, String, i64)> = db
        .prepare("SELECT role, content, is_hidden FROM messages WHERE session_id=?1 ORDER BY id")
        .unwrap()
        .query_map([&s.stored], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        msgs,
        [
            (
                "user".to_string(),
                "quokkaxylophone is our unique word".to_string(),
                0
            ),
            ("assistant".to_string(), reply.clone(), 0)
        ]
    );

    // the FTS index (maintained by Hermes' triggers) knows our messages
    let hits = fts_hits(&db, "quokkaxylophone");
    assert!(!hits.is_empty(), "FTS does not find our message: {hits:?}");
    assert!(hits.iter().all(|(_, sid)| sid == &s.stored), "{hits:?}");
    let hits = fts_hits(&db, "zanzibarnarwhal");
    assert!(
        !hits.is_empty() && hits.iter().all(|(_, sid)| sid == OLD),
        "the turn appended to Hermes' session is indexed under it: {hits:?}"
    );
    // FTS consistency check passes (no stale entries from updates of partial text)
    db.execute_batch("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check');")
        .expect("messages_fts integrity-check");

    // Hermes' session: original rows untouched, new turn appended, no new sessions row for it
    let old_msgs: Vec<(String, String)> = db
        .prepare("SELECT role, content FROM messages WHERE session_id=?1 ORDER BY id")
        .unwrap()
        .query_map([OLD], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(old_msgs.len(), 4, "{old_msgs:?}");
    assert_eq!(old_msgs[0].1, "What is a narwhal?");
    assert_eq!(old_msgs[1].1, "A narwhal is a toothed whale of the Arctic.");
    assert_eq!(old_msgs[2].1, "continue about zanzibarnarwhal tusks");
    let (model_config, sys, cost, user): (String, String, f64, String) = db
        .query_row(
            "SELECT model_config, system_prompt, estimated_cost_usd, user_id FROM sessions WHERE id=?1",
            [OLD],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        model_config, r#"{"temperature":0.2}"#,
        "Hermes' columns are preserved"
    );
    assert_eq!(sys, "You are Hermes.");
    assert_eq!(cost, 0.0123);
    assert_eq!(user, "u-1");
    let n: i64 = db
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2, "one Hermes session + one of ours");
    let v: i64 = db
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 18, "foreign tables are left alone");
    let rd: i64 = db
        .query_row("SELECT count(*) FROM routing_decisions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rd, 1);
    let idx: i64 = db
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type='index' AND name='idx_sessions_title_unique'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(idx, 1, "Hermes' indexes are kept");
    let trig: i64 = db
        .query_row("SELECT count(*) FROM sqlite_master WHERE type='trigger' AND name LIKE 'messages_fts_%'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(trig, 3, "Hermes' triggers are kept");
}

#[test]
fn hermes_database_with_foreign_keys_enforced_and_most_recent() {
    // Hermes opens with foreign_keys=ON; our writes must satisfy the FK constraints
    let home = prepare_home();
    let mut g = Gateway::builder().home(&home.path).start();
    let r = g.call("session.most_recent", json!({}));
    assert_eq!(r["session_id"], OLD, "the only stored session: {r}");
    assert_eq!(r["source"], "cli", "{r}");
    let s = g.create_session(json!({"title": "fk check"}));
    g.run_turn(&s.id, "fk friendly");
    let db = g.db();
    let bad: i64 = db
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(bad, 0, "foreign key violations in the store");
    g.close_stdin();
    assert!(g.wait_exit(secs(10)).success(), "{}", g.diag());
}

/// On Hermes' database the gateway adds only its own indexes (named `idx_tui_…`, which no
/// Hermes migration creates or drops) and searches through Hermes' FTS5 index as it is; on a
/// database it creates, the index and its triggers are Hermes' own, word for word, so Hermes'
/// `CREATE … IF NOT EXISTS` finds them in place.
#[test]
fn search_uses_hermes_index_and_the_gateway_adds_only_its_own_indexes() {
    let home = prepare_home();
    let objects = |db: &rusqlite::Connection, like: &str| -> Vec<String> {
        let mut st = db
            .prepare("SELECT name FROM sqlite_master WHERE name LIKE ?1 ORDER BY name")
            .unwrap();
        st.query_map([like], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let fts_before = objects(&open_db(&home.db_path()), "messages_fts%");
    let out = std::process::Command::new(BIN)
        .args(["sessions", "search", "narwhal"])
        .env("HERMES_HOME", &home.path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(OLD) && stdout.contains("Hermes Old Chat"),
        "{stdout}"
    );
    assert!(stdout.contains(">>>narwhal<<<"), "{stdout}");
    let db = open_db(&home.db_path());
    assert_eq!(
        objects(&db, "messages_fts%"),
        fts_before,
        "Hermes' FTS untouched"
    );
    assert_eq!(
        objects(&db, "idx_tui_%"),
        ["idx_tui_messages_session", "idx_tui_sessions_recent"]
    );

    // A database the gateway creates carries Hermes' FTS5 table and triggers.
    let fresh = TempHome::new("hermes-fts");
    let mut g = Gateway::builder().home(&fresh.path).start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "a narwhal in our own database");
    let db = open_db(&fresh.db_path());
    let sql = |name: &str| -> String {
        db.query_row(
            "SELECT sql FROM sqlite_master WHERE name = ?1",
            [name],
            |r| r.get(0),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    assert!(sql("messages_fts").contains("USING fts5(\n    content\n)"));
    for t in [
        "messages_fts_insert",
        "messages_fts_delete",
        "messages_fts_update",
    ] {
        assert!(
            sql(t).starts_with(&format!("CREATE TRIGGER {t} AFTER")),
            "{}",
            sql(t)
        );
    }
    assert!(sql("messages_fts_insert").contains(
        "COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, '')"
    ));
    // Indexed in a batch by the flush tick after the turn (the gateway does the triggers'
    // work on its own connection).
    assert!(
        common::procfs::poll_until(Duration::from_secs(10), || fts_hits(&db, "narwhal").len()
            == 2),
        "prompt and reply indexed: {:?}",
        fts_hits(&db, "narwhal")
    );
    // Hermes' own statements find everything in place.
    db.execute_batch(
        "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content);
         CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN SELECT 1; END;
         CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
         CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL;",
    )
    .unwrap();
    g.run_turn(&s.id, "another narwhal");
    assert!(
        common::procfs::poll_until(Duration::from_secs(10), || fts_hits(&db, "narwhal").len()
            == 4),
        "{:?}",
        fts_hits(&db, "narwhal")
    );
}
