//! A long-time user's `state.db`, built deterministically: `sessions` sessions of `per_session`
//! messages each (alternating user and assistant, a dozen words from a fixed vocabulary), with
//! the gateway's own schema, indexes and Hermes' full-text index and triggers (so the build
//! pays what real writes pay). Half the rows have no `last_activity_at`, as Hermes writes them;
//! sources are mostly `cli`, some `tui` and `telegram`. The same arguments give the same file.
//!
//! Built once per shape under `target/bench-state/` and copied for each run.
//!
//! Shared by the `big_db` bench (through `benches/common`) and the load driver
//! (`examples/load.rs` includes this file by path).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Ids, titles and texts of the synthetic sessions, for the requests that name them.
pub struct Shape {
    pub sessions: usize,
    pub per_session: usize,
}

impl Shape {
    pub fn stored_id(&self, i: usize) -> String {
        format!("20250101_000000_{i:06x}")
    }
    pub fn title(&self, i: usize) -> String {
        format!("topic {i}")
    }
    /// A word that occurs in about one message in `n` (n = 10, 1000, …: `vocabulary` order).
    pub fn word_of_rank(&self, rank: usize) -> String {
        word(rank)
    }
}

/// A pronounceable word for a vocabulary index.
fn word(mut n: usize) -> String {
    const SYL: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "fe", "hi", "jo",
        "be",
    ];
    let mut w = String::new();
    loop {
        w.push_str(SYL[n % 16]);
        n /= 16;
        if n == 0 {
            break;
        }
    }
    w
}

/// xorshift64*: the same stream for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Zipf-like: small indexes are common, large ones rare.
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((n as f64).powf(u) as usize).saturating_sub(1).min(n - 1)
    }
}

const VOCABULARY: usize = 20_000;
const WORDS: usize = 12;

/// The cached database of this shape, built first if needed; returns its path and, when it was
/// built now, how long that took.
pub fn cached(shape: &Shape) -> Result<(PathBuf, Option<f64>), String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-state");
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join(format!(
        "state-v2-{}x{}.db",
        shape.sessions, shape.per_session
    ));
    if path.exists() {
        return Ok((path, None));
    }
    let partial = path.with_extension("building");
    let _ = fs::remove_file(&partial);
    let started = Instant::now();
    build(&partial, shape)?;
    fs::rename(&partial, &path).map_err(|e| e.to_string())?;
    Ok((path, Some(started.elapsed().as_secs_f64())))
}

/// Write a copied database to disk before a gateway opens it, as a user's long-lived file is:
/// otherwise its first WAL checkpoint's `fsync` writes back the whole copy on the loop.
pub fn settle(path: &Path) -> Result<(), String> {
    fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| e.to_string())
}

/// Give session `id` `count` more messages (short ones, through Hermes' triggers), waiting
/// for the gateway's own writes as another writer of state.db does.
pub fn lengthen(path: &Path, id: &str, count: usize) -> Result<(), String> {
    let e = |e: rusqlite::Error| format!("lengthening a session: {e}");
    let mut conn = rusqlite::Connection::open(path).map_err(e)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(e)?;
    // The write lock first: a deferred transaction's late upgrade fails at once, unwaited,
    // when the gateway committed since its first read.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(e)?;
    {
        let mut message = tx
            .prepare(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(e)?;
        for j in 0..count {
            let role = if j % 2 == 0 { "user" } else { "assistant" };
            let text = format!("{role} message {j} {}", word(j % VOCABULARY));
            message
                .execute(rusqlite::params![
                    id,
                    role,
                    text,
                    1_800_000_000.0 + j as f64
                ])
                .map_err(e)?;
        }
    }
    tx.execute(
        "UPDATE sessions SET message_count = message_count + ?2 WHERE id = ?1",
        rusqlite::params![id, count as i64],
    )
    .map_err(e)?;
    tx.commit().map_err(e)
}

/// Build the database at `path` (which must not exist).
pub fn build(path: &Path, shape: &Shape) -> Result<(), String> {
    let e = |e: rusqlite::Error| e.to_string();
    // The gateway's own schema, indexes, and Hermes' FTS table and triggers.
    drop(tui_gateway::store::Store::open(path, "OFF")?);
    let mut conn = rusqlite::Connection::open(path).map_err(e)?;
    conn.execute_batch(
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-400000;",
    )
    .map_err(e)?;
    let tx = conn.transaction().map_err(e)?;
    // Bulk load: the triggers and indexes come off while the rows go in, and are put back
    // (the same SQL) after; the full-text index is then filled in one statement, as the
    // insert trigger would have filled it row by row, and its mark set past every row (the
    // gateway indexes only what comes after it).
    let deferred: Vec<(String, String)> = {
        let mut stmt = tx
            .prepare(
                "SELECT name, sql FROM sqlite_master WHERE type IN ('trigger', 'index')
                 AND sql IS NOT NULL AND tbl_name IN ('sessions', 'messages') ORDER BY name",
            )
            .map_err(e)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(e)?;
        rows.collect::<Result<_, _>>().map_err(e)?
    };
    for (name, sql) in &deferred {
        let kind = if sql
            .trim_start()
            .to_ascii_uppercase()
            .starts_with("CREATE TRIGGER")
        {
            "TRIGGER"
        } else {
            "INDEX"
        };
        tx.execute_batch(&format!("DROP {kind} \"{name}\""))
            .map_err(e)?;
    }
    {
        let mut session = tx
            .prepare(
                "INSERT INTO sessions (id, source, model, title, cwd, started_at, ended_at,
                     end_reason, message_count, last_activity_at)
                 VALUES (?1, ?2, 'gpt-4o-mini', ?3, '/home/user', ?4, ?5, 'tui_close', ?6, ?7)",
            )
            .map_err(e)?;
        let mut message = tx
            .prepare(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(e)?;
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        let base = 1_735_689_600.0; // 2025-01-01
        let mut text = String::new();
        for i in 0..shape.sessions {
            let started = base + i as f64 * 600.0;
            let ended = started + shape.per_session as f64 * 10.0;
            let source = match i % 20 {
                0..=2 => "tui",
                3 => "telegram",
                _ => "cli",
            };
            let last = (i % 2 == 0).then_some(ended);
            session
                .execute(rusqlite::params![
                    shape.stored_id(i),
                    source,
                    shape.title(i),
                    started,
                    ended,
                    shape.per_session as i64,
                    last
                ])
                .map_err(e)?;
            let id = shape.stored_id(i);
            for j in 0..shape.per_session {
                text.clear();
                for w in 0..WORDS {
                    if w > 0 {
                        text.push(' ');
                    }
                    text.push_str(&word(rng.skewed(VOCABULARY)));
                }
                let role = if j % 2 == 0 { "user" } else { "assistant" };
                message
                    .execute(rusqlite::params![id, role, text, started + j as f64 * 10.0])
                    .map_err(e)?;
            }
        }
    }
    tx.execute_batch(
        "INSERT INTO messages_fts(rowid, content) SELECT id,
             COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')
         FROM messages ORDER BY id;
         UPDATE tui_gateway_fts_indexed SET id = (SELECT max(id) FROM messages);",
    )
    .map_err(e)?;
    for (_, sql) in &deferred {
        tx.execute_batch(sql).map_err(e)?;
    }
    tx.commit().map_err(e)?;
    conn.execute_batch("PRAGMA journal_mode=WAL;").map_err(e)?;
    Ok(())
}
