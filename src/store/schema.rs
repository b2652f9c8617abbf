//! The columns we need, created where missing. An existing Hermes Agent database keeps all of
//! its own columns, tables, indexes and triggers; we only add what is absent.

use rusqlite::Connection;

/// (column, declaration used when it has to be added to an existing table)
const SESSION_COLUMNS: &[(&str, &str)] = &[
    ("source", "TEXT NOT NULL DEFAULT 'tui'"),
    ("model", "TEXT"),
    // Hermes' per-session model settings (JSON); ours holds only a subagent's `_delegate_from`.
    ("model_config", "TEXT"),
    ("title", "TEXT"),
    ("cwd", "TEXT"),
    ("parent_session_id", "TEXT"),
    ("started_at", "REAL NOT NULL DEFAULT 0"),
    ("ended_at", "REAL"),
    ("end_reason", "TEXT"),
    ("message_count", "INTEGER DEFAULT 0"),
    ("tool_call_count", "INTEGER DEFAULT 0"),
    ("input_tokens", "INTEGER DEFAULT 0"),
    ("output_tokens", "INTEGER DEFAULT 0"),
    ("last_activity_at", "REAL"),
    // Hermes' accounting columns, as hermes_state.py declares them.
    ("cache_read_tokens", "INTEGER DEFAULT 0"),
    ("cache_write_tokens", "INTEGER DEFAULT 0"),
    ("reasoning_tokens", "INTEGER DEFAULT 0"),
    ("billing_provider", "TEXT"),
    ("billing_base_url", "TEXT"),
    ("billing_mode", "TEXT"),
    ("estimated_cost_usd", "REAL"),
    ("actual_cost_usd", "REAL"),
    ("cost_status", "TEXT"),
    ("cost_source", "TEXT"),
    ("pricing_version", "TEXT"),
    ("api_call_count", "INTEGER DEFAULT 0"),
];

const MESSAGE_COLUMNS: &[(&str, &str)] = &[
    ("session_id", "TEXT"),
    ("role", "TEXT NOT NULL DEFAULT 'user'"),
    ("content", "TEXT"),
    ("tool_call_id", "TEXT"),
    ("tool_calls", "TEXT"),
    ("tool_name", "TEXT"),
    ("timestamp", "REAL NOT NULL DEFAULT 0"),
    ("token_count", "INTEGER"),
    ("finish_reason", "TEXT"),
    ("reasoning", "TEXT"),
    ("reasoning_details", "TEXT"),
    ("codex_reasoning_items", "TEXT"),
    ("codex_message_items", "TEXT"),
];

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    model TEXT,
    model_config TEXT,
    title TEXT,
    cwd TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    last_activity_at REAL,
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
    api_call_count INTEGER DEFAULT 0
);
CREATE TABLE IF NOT EXISTS messages (
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
    codex_message_items TEXT
);
";

/// Hermes' `session_model_usage`: one row per session, model and billing route, its figures
/// summed over the calls made there (created as `hermes_state.py` creates it).
const USAGE: &str = "
CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT,
    cost_source TEXT,
    first_seen REAL,
    last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode)
);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage(model);
";

/// Hermes Agent's full-text index over messages, exactly as `hermes_state.py` creates it (its
/// `FTS_SQL`): a database created here is searchable by Hermes and by `sessions search`.
/// Hermes' triggers keep it up to date in Hermes' connections; the gateway's does their work
/// itself, new rows in batches (`fts.rs`).
const FTS: &str = "
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content
);

CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (
        new.id,
        COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, '')
    );
END;

CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
END;

CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
    INSERT INTO messages_fts(rowid, content) VALUES (
        new.id,
        COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, '')
    );
END;
";

/// Indexes the gateway's queries need, on its own databases and on Hermes' (whose own indexes
/// cover other queries; names of ours start `idx_tui_` so Hermes' migrations, which create
/// theirs with `IF NOT EXISTS` by name, never meet them). Each makes one request grow with what
/// it returns, not with the database:
/// - the picker's list and `most_recent`, newest activity first (an expression index: the
///   order is exactly the list's `ORDER BY`);
/// - compaction chains (`parent_session_id`; Hermes has the same index by this name);
/// - a session's messages in order, its preview and its count (Hermes indexes
///   `(session_id, timestamp)`, which leaves `ORDER BY id` to a sort of the whole session).
const INDEXES: &str = "
CREATE INDEX IF NOT EXISTS idx_tui_sessions_recent
    ON sessions(coalesce(last_activity_at, started_at) DESC, started_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
";

fn table_exists(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// The columns of an index, in order (empty when there is none by that name).
fn index_columns(conn: &Connection, index: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA index_info({index})"))?;
    let cols = stmt.query_map([], |r| r.get::<_, Option<String>>(2))?;
    Ok(cols
        .collect::<rusqlite::Result<Vec<_>>>()?
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect())
}

fn existing_columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
    let cols = stmt.query_map([], |r| r.get::<_, String>(1))?;
    cols.collect()
}

fn add_missing(conn: &Connection, table: &str, wanted: &[(&str, &str)]) -> rusqlite::Result<()> {
    let have = existing_columns(conn, table)?;
    for (col, decl) in wanted {
        if !have.iter().any(|h| h.eq_ignore_ascii_case(col)) {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {col} {decl}"))?;
        }
    }
    Ok(())
}

/// This file: what `ensure` adds changes only with it.
const SOURCE: &str = include_str!("schema.rs");

/// The schema as it stands and as this build brings it: equal to what the last full
/// [`ensure`] left (kept in `tui_gateway_schema`), there is nothing to add, and a start skips
/// parsing every statement of it again.
fn fingerprint(conn: &Connection) -> rusqlite::Result<String> {
    use std::hash::{Hash, Hasher};
    let master: String = conn.query_row(
        "SELECT coalesce(group_concat(type || ' ' || name || ' ' || coalesce(sql, ''), char(10)), '')
           FROM (SELECT type, name, sql FROM sqlite_master ORDER BY type, name)",
        [],
        |r| r.get(0),
    )?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    SOURCE.hash(&mut h);
    master.hash(&mut h);
    Ok(format!("{:016x}", h.finish()))
}

pub fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    // A database without messages yet gets Hermes' full-text index; one that has messages
    // keeps what it has (building the index over them belongs to Hermes' own migration).
    let fresh = !table_exists(conn, "messages")?
        || conn.query_row("SELECT NOT EXISTS (SELECT 1 FROM messages)", [], |r| {
            r.get::<_, bool>(0)
        })?;
    let now = fingerprint(conn)?;
    let kept: Option<String> = conn
        .query_row("SELECT fingerprint FROM tui_gateway_schema", [], |r| {
            r.get(0)
        })
        .ok();
    let fts_wanted = fresh && !table_exists(conn, "messages_fts")?;
    if kept.as_deref() == Some(now.as_str()) && !fts_wanted {
        return Ok(());
    }
    ensure_fully(conn, fresh)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS tui_gateway_schema (fingerprint TEXT NOT NULL);
         DELETE FROM tui_gateway_schema;",
    )?;
    conn.execute(
        "INSERT INTO tui_gateway_schema (fingerprint) VALUES (?1)",
        [fingerprint(conn)?],
    )?;
    Ok(())
}

fn ensure_fully(conn: &Connection, fresh: bool) -> rusqlite::Result<()> {
    conn.execute_batch(CREATE)?;
    add_missing(conn, "sessions", SESSION_COLUMNS)?;
    add_missing(conn, "messages", MESSAGE_COLUMNS)?;
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, id)",
    )?;
    if index_columns(conn, "idx_messages_session")? != ["session_id", "id"] {
        conn.execute_batch(
            "CREATE INDEX IF NOT EXISTS idx_tui_messages_session ON messages(session_id, id)",
        )?;
    }
    conn.execute_batch(INDEXES)?;
    if fresh && !table_exists(conn, "messages_fts")? {
        // Without FTS5 in this SQLite the store still works, unsearchable.
        if let Err(e) = conn.execute_batch(FTS) {
            crate::diag!("[gateway] no full-text index for session search: {e}");
        }
    }
    // Which gateway process holds which session open, so a later start can tell the sessions
    // of a killed gateway from those of another one still running.
    // Prompts acknowledged as `queued` and not yet run, so a crash cannot lose them.
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS tui_gateway_queue (
             session_id TEXT NOT NULL,
             position INTEGER NOT NULL,
             text TEXT NOT NULL,
             PRIMARY KEY (session_id, position)
         )",
    )?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS tui_gateway_live (
             session_id TEXT PRIMARY KEY,
             owner TEXT NOT NULL
         )",
    )?;
    // How far each journal (a gateway's fallback while state.db could not be written) has
    // been folded in, per session: a fold after a kill skips what a commit already wrote.
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS tui_gateway_folded (
             journal TEXT NOT NULL,
             session_id TEXT NOT NULL,
             seq INTEGER NOT NULL,
             PRIMARY KEY (journal, session_id)
         )",
    )?;
    // Background delegations still running, each with what its parent's transcript gets if
    // the gateway dies before they end (a start's repair adds it, as Hermes reports a
    // delegation whose owner died: outcome unknown).
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS tui_gateway_delegations (
             session_id TEXT NOT NULL,
             delegation_id TEXT NOT NULL,
             notice TEXT NOT NULL,
             PRIMARY KEY (session_id, delegation_id)
         )",
    )?;
    // Deleted sessions whose messages are still being removed, a bounded batch per loop
    // iteration (`Store::purge_step`); a later start goes on where a killed gateway stopped.
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS tui_gateway_purge (session_id TEXT PRIMARY KEY)",
    )?;
    // Hermes' per-model usage (its schema v20), so its insights see our sessions' calls.
    conn.execute_batch(USAGE)?;
    // Titles are unique in Hermes; an older file holding duplicates keeps working without it.
    let _ = conn.execute_batch(
        "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique
             ON sessions(title) WHERE title IS NOT NULL",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(conn: &Connection) -> String {
        conn.query_row("SELECT fingerprint FROM tui_gateway_schema", [], |r| {
            r.get(0)
        })
        .unwrap()
    }

    #[test]
    fn a_schema_changed_since_the_last_start_is_brought_back_and_one_left_alone_is_skipped() {
        let conn = Connection::open_in_memory().unwrap();
        ensure(&conn).unwrap();
        assert_eq!(kept(&conn), fingerprint(&conn).unwrap());
        ensure(&conn).unwrap();
        assert_eq!(kept(&conn), fingerprint(&conn).unwrap(), "nothing to add");
        // Another program dropped a table and an index of ours: the next start adds them.
        conn.execute_batch("DROP TABLE tui_gateway_purge; DROP INDEX idx_messages_session")
            .unwrap();
        ensure(&conn).unwrap();
        assert!(table_exists(&conn, "tui_gateway_purge").unwrap());
        assert!(table_exists(&conn, "idx_messages_session").unwrap());
        assert_eq!(kept(&conn), fingerprint(&conn).unwrap());
    }
}
