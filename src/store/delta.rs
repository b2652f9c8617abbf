//! What one commit writes for one session: its row, ownership, queue, undo and new messages,
//! relative to what the store already holds. Plain data: the session fills one (borrowing
//! from itself, `session/stored.rs`) for a commit, the journal reads one back (owning its
//! data) for a fold.

use std::borrow::Cow;

use rusqlite::params;
use serde::{Deserialize, Serialize};

use crate::transcript::Message;

/// How the session's row in `tui_gateway_live` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LiveChange {
    Keep,
    /// The session went live (this owner holds it open).
    Claim,
    /// The session ended.
    Release,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delta<'a> {
    pub id: Cow<'a, str>,
    pub source: Cow<'a, str>,
    pub model: Cow<'a, str>,
    pub title: Option<Cow<'a, str>>,
    pub cwd: Cow<'a, str>,
    pub parent_session_id: Option<Cow<'a, str>>,
    pub started_at: f64,
    pub ended_at: Option<f64>,
    pub end_reason: Option<Cow<'a, str>>,
    pub message_count: i64,
    pub tool_call_count: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub last_activity_at: f64,
    /// The row is not in the store yet.
    pub insert_row: bool,
    /// The row's columns changed.
    pub update_row: bool,
    pub live: LiveChange,
    /// The prompts acknowledged and not yet run, when they changed.
    pub queue: Option<Vec<Cow<'a, str>>>,
    /// Undo: stored rows past this many go.
    pub keep: Option<usize>,
    /// Messages past what the store holds (a row id: that row is updated, not inserted).
    pub messages: Cow<'a, [Message]>,
}

/// Write one session's delta inside the open transaction; `owner` is who holds it open.
pub(super) fn write(
    tx: &rusqlite::Transaction<'_>,
    d: &Delta<'_>,
    owner: &str,
) -> rusqlite::Result<()> {
    if d.insert_row {
        tx.prepare_cached(
            "INSERT INTO sessions (id, source, model, title, cwd, started_at, ended_at, end_reason,
                 message_count, tool_call_count, input_tokens, output_tokens, last_activity_at,
                 parent_session_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )?
        .execute(params![
            d.id,
            d.source,
            d.model,
            d.title,
            d.cwd,
            d.started_at,
            d.ended_at,
            d.end_reason,
            d.message_count,
            d.tool_call_count,
            d.input_tokens,
            d.output_tokens,
            d.last_activity_at,
            d.parent_session_id,
        ])?;
    } else if d.update_row {
        tx.prepare_cached(
            "UPDATE sessions SET model = ?2, title = ?3, ended_at = ?4, end_reason = ?5,
                 message_count = ?6, tool_call_count = ?7, input_tokens = ?8, output_tokens = ?9,
                 last_activity_at = ?10
             WHERE id = ?1",
        )?
        .execute(params![
            d.id,
            d.model,
            d.title,
            d.ended_at,
            d.end_reason,
            d.message_count,
            d.tool_call_count,
            d.input_tokens,
            d.output_tokens,
            d.last_activity_at,
        ])?;
    }
    // Ownership is written when the session goes live and removed when it ends, not per commit.
    match d.live {
        LiveChange::Keep => {}
        LiveChange::Release => {
            tx.prepare_cached("DELETE FROM tui_gateway_live WHERE session_id = ?1")?
                .execute([&d.id])?;
        }
        LiveChange::Claim => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO tui_gateway_live (session_id, owner) VALUES (?1, ?2)",
            )?
            .execute(params![d.id, owner])?;
        }
    }
    if let Some(queue) = &d.queue {
        tx.prepare_cached("DELETE FROM tui_gateway_queue WHERE session_id = ?1")?
            .execute([&d.id])?;
        let mut add = tx.prepare_cached(
            "INSERT INTO tui_gateway_queue (session_id, position, text) VALUES (?1, ?2, ?3)",
        )?;
        for (i, text) in queue.iter().enumerate() {
            add.execute(params![d.id, i as i64, text])?;
        }
    }
    if let Some(keep) = d.keep {
        // Undo: the rows past the kept prefix go (Hermes' FTS triggers follow the delete).
        tx.prepare_cached(
            "DELETE FROM messages WHERE id IN
                 (SELECT id FROM messages WHERE session_id = ?1 ORDER BY id LIMIT -1 OFFSET ?2)",
        )?
        .execute(params![d.id, keep as i64])?;
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name,
             timestamp, token_count, finish_reason, reasoning)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    let mut update = tx.prepare_cached(
        "UPDATE messages SET role = ?2, content = ?3, tool_call_id = ?4, tool_calls = ?5,
             tool_name = ?6, timestamp = ?7, token_count = ?8, finish_reason = ?9, reasoning = ?10
         WHERE id = ?1",
    )?;
    for m in d.messages.iter() {
        // ?1 is the row to update, or the session of a new row; the rest are the same.
        let (stmt, first): (&mut rusqlite::CachedStatement<'_>, &dyn rusqlite::ToSql) =
            match &m.row_id {
                Some(row) => (&mut update, row),
                None => (&mut insert, &d.id),
            };
        stmt.execute(params![
            first,
            m.role.as_str(),
            m.content,
            m.tool_call_id,
            m.tool_calls,
            m.tool_name,
            m.timestamp,
            m.token_count,
            m.finish_reason,
            m.reasoning,
        ])?;
    }
    Ok(())
}
