//! What one commit writes for one session: its row, ownership, queue, undo and new messages,
//! relative to what the store already holds. Plain data: the session fills one (borrowing
//! from itself, `session/stored.rs`) for a commit, the journal reads one back (owning its
//! data) for a fold.

use std::borrow::Cow;

use rusqlite::{ToSql, params, params_from_iter};
use serde::{Deserialize, Serialize};

use super::fts::{Indexes, Selection};
use crate::model::Accounting;
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
    /// The rows the session has in `messages` once this delta is written (maintained here, so
    /// a commit never counts them; a fold or a repair, which meet rows no delta accounts for,
    /// recounts).
    pub message_count: i64,
    pub tool_call_count: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Hermes' `api_call_count`: model calls. (Journals written before it read as 0.)
    #[serde(default)]
    pub api_call_count: i64,
    /// Hermes' `billing_provider`.
    #[serde(default)]
    pub billing_provider: Cow<'a, str>,
    /// Hermes' `billing_base_url`: the provider's endpoint (empty: it has none).
    #[serde(default)]
    pub billing_base_url: Cow<'a, str>,
    #[serde(default)]
    pub accounting: Accounting,
    /// What the session's calls added since its last commit, for `session_model_usage`.
    #[serde(default)]
    pub usage: Option<Usage>,
    pub last_activity_at: f64,
    /// The row is not in the store yet.
    pub insert_row: bool,
    /// The row's columns changed.
    pub update_row: bool,
    pub live: LiveChange,
    /// The prompts acknowledged and not yet run, when they changed.
    pub queue: Option<Vec<Cow<'a, str>>>,
    /// Its background delegations still running, when they changed: (id, the notice its
    /// transcript gets if the gateway dies before they end), for `tui_gateway_delegations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegations: Option<Vec<(Cow<'a, str>, Cow<'a, str>)>>,
    /// A subagent's row: the session that delegated it, Hermes' `model_config._delegate_from`
    /// (written with the row; a row's other `model_config` keys are never touched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegate_from: Option<Cow<'a, str>>,
    /// Undo: stored rows past this many go.
    pub keep: Option<usize>,
    /// Messages past what the store holds (a row id: that row is updated, not inserted).
    pub messages: Cow<'a, [Message]>,
}

/// A session's figures as Hermes' `session_model_usage` sums them (totals, or what a commit
/// adds to them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub api_calls: i64,
    pub input: i64,
    pub output: i64,
    pub cache_read: i64,
    pub cache_write: i64,
    pub reasoning: i64,
    /// Hermes' `estimated_cost_usd`: every known price.
    pub cost_usd: f64,
    /// Hermes' `actual_cost_usd`: the prices the provider reported.
    #[serde(default)]
    pub actual_cost_usd: f64,
}

impl Usage {
    /// What `self` has beyond `before`, or `None` when nothing grew (a figure that shrank —
    /// a row another writer changed — adds nothing rather than taking away).
    pub fn since(&self, before: &Usage) -> Option<Usage> {
        let grew = |now: i64, then: i64| (now - then).max(0);
        let added = Usage {
            api_calls: grew(self.api_calls, before.api_calls),
            input: grew(self.input, before.input),
            output: grew(self.output, before.output),
            cache_read: grew(self.cache_read, before.cache_read),
            cache_write: grew(self.cache_write, before.cache_write),
            reasoning: grew(self.reasoning, before.reasoning),
            cost_usd: (self.cost_usd - before.cost_usd).max(0.0),
            actual_cost_usd: (self.actual_cost_usd - before.actual_cost_usd).max(0.0),
        };
        (added != Usage::default()).then_some(added)
    }
}

/// Write one session's delta inside the open transaction; `owner` is who holds it open.
pub(super) fn write(
    tx: &rusqlite::Transaction<'_>,
    d: &Delta<'_>,
    owner: &str,
    fts: &Indexes,
) -> rusqlite::Result<()> {
    write_all_but_new(tx, d, owner, fts)?;
    insert_new(tx, std::iter::once(d))
}

/// Everything of one delta but its new messages, which [`insert_new`] writes (after every
/// delta of a commit has written its row, so the messages' sessions exist); `fts` stands in
/// for Hermes' triggers where they are off.
pub(super) fn write_all_but_new(
    tx: &rusqlite::Transaction<'_>,
    d: &Delta<'_>,
    owner: &str,
    fts: &Indexes,
) -> rusqlite::Result<()> {
    let a = &d.accounting;
    let (cache_read, cache_write, reasoning) = (
        a.cache_read_tokens as i64,
        a.cache_write_tokens as i64,
        a.reasoning_tokens as i64,
    );
    let (cost_status, cost_source) = (a.cost_status.as_str(), a.cost_source.as_str());
    let billing_mode = billing_mode(a);
    // The columns a commit may change, the same in both statements (after the row's own):
    // its counts, then Hermes' accounting.
    let changing: [&dyn ToSql; 17] = [
        &d.message_count,
        &d.tool_call_count,
        &d.input_tokens,
        &d.output_tokens,
        &d.last_activity_at,
        &d.api_call_count,
        &cache_read,
        &cache_write,
        &reasoning,
        &a.cost_usd,
        &cost_status,
        &cost_source,
        &d.billing_provider,
        &d.billing_base_url,
        &a.actual_cost_usd,
        &a.pricing_version,
        &billing_mode,
    ];
    if d.insert_row {
        let model_config = d
            .delegate_from
            .as_ref()
            .map(|parent| serde_json::json!({ "_delegate_from": parent }).to_string());
        let row: [&dyn ToSql; 10] = [
            &d.id,
            &d.source,
            &d.model,
            &d.title,
            &d.cwd,
            &d.parent_session_id,
            &d.started_at,
            &d.ended_at,
            &d.end_reason,
            &model_config,
        ];
        tx.prepare_cached(
            "INSERT INTO sessions (id, source, model, title, cwd, parent_session_id, started_at,
                 ended_at, end_reason, model_config, message_count, tool_call_count,
                 input_tokens, output_tokens, last_activity_at, api_call_count,
                 cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated_cost_usd,
                 cost_status, cost_source, billing_provider, billing_base_url, actual_cost_usd,
                 pricing_version, billing_mode)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, NULLIF(?27, ''))",
        )?
        .execute(params_from_iter(row.iter().chain(&changing)))?;
    } else if d.update_row {
        let row: [&dyn ToSql; 5] = [&d.id, &d.model, &d.title, &d.ended_at, &d.end_reason];
        tx.prepare_cached(
            "UPDATE sessions SET model = ?2, title = ?3, ended_at = ?4, end_reason = ?5,
                 message_count = ?6, tool_call_count = ?7, input_tokens = ?8, output_tokens = ?9,
                 last_activity_at = ?10, api_call_count = ?11, cache_read_tokens = ?12,
                 cache_write_tokens = ?13, reasoning_tokens = ?14, estimated_cost_usd = ?15,
                 cost_status = ?16, cost_source = ?17, billing_provider = ?18,
                 billing_base_url = ?19, actual_cost_usd = ?20,
                 pricing_version = COALESCE(?21, pricing_version),
                 billing_mode = COALESCE(billing_mode, NULLIF(?22, ''))
             WHERE id = ?1",
        )?
        .execute(params_from_iter(row.iter().chain(&changing)))?;
    }
    if let Some(u) = &d.usage {
        add_usage(tx, d, u)?;
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
    if let Some(delegations) = &d.delegations {
        tx.prepare_cached("DELETE FROM tui_gateway_delegations WHERE session_id = ?1")?
            .execute([&d.id])?;
        let mut add = tx.prepare_cached(
            "INSERT OR REPLACE INTO tui_gateway_delegations (session_id, delegation_id, notice)
             VALUES (?1, ?2, ?3)",
        )?;
        for (id, notice) in delegations {
            add.execute(params![d.id, id, notice])?;
        }
    }
    if let Some(keep) = d.keep {
        // Undo: the rows past the kept prefix go, from the full-text indexes first.
        fts.forget(tx, &d.id, Selection::After(keep))?;
        tx.prepare_cached(
            "DELETE FROM messages WHERE id IN
                 (SELECT id FROM messages WHERE session_id = ?1 ORDER BY id LIMIT -1 OFFSET ?2)",
        )?
        .execute(params![d.id, keep as i64])?;
    }
    let mut update = tx.prepare_cached(
        "UPDATE messages SET role = ?2, content = ?3, tool_call_id = ?4, tool_calls = ?5,
             tool_name = ?6, timestamp = ?7, token_count = ?8, finish_reason = ?9, reasoning = ?10,
             reasoning_details = ?11, codex_reasoning_items = ?12, codex_message_items = ?13
         WHERE id = ?1",
    )?;
    for m in d.messages.iter() {
        if let Some(row) = &m.row_id {
            update.execute(params![
                row,
                m.role.as_str(),
                m.content,
                m.tool_call_id,
                m.tool_calls,
                m.tool_name,
                m.timestamp,
                m.token_count,
                m.finish_reason,
                m.reasoning,
                m.replay.reasoning_details,
                m.replay.codex_reasoning_items,
                m.replay.codex_message_items,
            ])?;
            fts.updated(tx, *row)?;
        }
    }
    Ok(())
}

/// The new messages (no row id yet) of every delta, in order, in as few statements as
/// [`INSERT_ROWS`] allows.
pub(super) fn insert_new<'d, 'a: 'd>(
    tx: &rusqlite::Transaction<'_>,
    deltas: impl Iterator<Item = &'d Delta<'a>>,
) -> rusqlite::Result<()> {
    let new: Vec<(&str, &Message)> = deltas
        .flat_map(|d| {
            d.messages
                .iter()
                .filter(|m| m.row_id.is_none())
                .map(|m| (d.id.as_ref(), m))
        })
        .collect();
    for chunk in new.chunks(INSERT_ROWS) {
        insert_messages(tx, chunk)?;
    }
    Ok(())
}

/// New messages one INSERT statement writes at most (10 parameters each, far below SQLite's
/// limit on parameters).
const INSERT_ROWS: usize = 64;

/// Insert `rows` (session id, message) in one statement, in order. One statement, because
/// Hermes' FTS5 index writes a new segment (and merges) at every statement that changes
/// `messages`: a commit of many messages, of one session or many, in one statement costs one
/// segment, not one each.
fn insert_messages(
    tx: &rusqlite::Transaction<'_>,
    rows: &[(&str, &Message)],
) -> rusqlite::Result<()> {
    let role: Vec<&str> = rows.iter().map(|(_, m)| m.role.as_str()).collect();
    let mut values: Vec<&dyn ToSql> = Vec::with_capacity(rows.len() * 13);
    for ((id, m), role) in rows.iter().zip(&role) {
        values.extend([
            id as &dyn ToSql,
            role,
            &m.content,
            &m.tool_call_id,
            &m.tool_calls,
            &m.tool_name,
            &m.timestamp,
            &m.token_count,
            &m.finish_reason,
            &m.reasoning,
            &m.replay.reasoning_details,
            &m.replay.codex_reasoning_items,
            &m.replay.codex_message_items,
        ]);
    }
    // One cached statement per size (the store's cache holds them all, `super::STATEMENT_CACHE`).
    tx.prepare_cached(insert_sql(rows.len()))?
        .execute(params_from_iter(values))?;
    Ok(())
}

/// The INSERT of `n` (1 to [`INSERT_ROWS`]) rows: a prefix of the one of `INSERT_ROWS` rows,
/// built once, so a commit formats no SQL.
fn insert_sql(n: usize) -> &'static str {
    const HEAD: &str = "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, \
        tool_name, timestamp, token_count, finish_reason, reasoning, reasoning_details, \
        codex_reasoning_items, codex_message_items) VALUES ";
    const ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    const SEP: &str = ", ";
    static ALL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let all = ALL.get_or_init(|| HEAD.to_string() + &vec![ROW; INSERT_ROWS].join(SEP));
    let n = n.clamp(1, INSERT_ROWS);
    &all[..HEAD.len() + n * ROW.len() + (n - 1) * SEP.len()]
}

/// Hermes' `billing_mode` of the session's latest call: `subscription_included` when its cost
/// was included, else empty.
fn billing_mode(a: &Accounting) -> &'static str {
    match a.cost_status {
        crate::model::pricing::CostStatus::Included => "subscription_included",
        _ => "",
    }
}

/// Add what a commit's calls used to the session's row of Hermes' `session_model_usage` for
/// its model and billing route (as `hermes_state.py` sums a call's figures).
fn add_usage(tx: &rusqlite::Transaction<'_>, d: &Delta<'_>, u: &Usage) -> rusqlite::Result<()> {
    let a = &d.accounting;
    tx.prepare_cached(
        "INSERT INTO session_model_usage (session_id, model, billing_provider, billing_base_url,
             billing_mode, api_call_count, input_tokens, output_tokens, cache_read_tokens,
             cache_write_tokens, reasoning_tokens, estimated_cost_usd, actual_cost_usd,
             cost_status, cost_source, first_seen, last_seen)
         VALUES (?1, ?2, ?3, ?4, ?15, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?16, ?12, ?13, ?14, ?14)
         ON CONFLICT (session_id, model, billing_provider, billing_base_url, billing_mode)
         DO UPDATE SET
             api_call_count = api_call_count + excluded.api_call_count,
             input_tokens = input_tokens + excluded.input_tokens,
             output_tokens = output_tokens + excluded.output_tokens,
             cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
             cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
             reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
             estimated_cost_usd = estimated_cost_usd + excluded.estimated_cost_usd,
             actual_cost_usd = actual_cost_usd + excluded.actual_cost_usd,
             cost_status = excluded.cost_status,
             cost_source = excluded.cost_source,
             last_seen = excluded.last_seen",
    )?
    .execute(params![
        d.id,
        d.model,
        d.billing_provider,
        d.billing_base_url,
        u.api_calls,
        u.input,
        u.output,
        u.cache_read,
        u.cache_write,
        u.reasoning,
        u.cost_usd,
        a.cost_status.as_str(),
        a.cost_source.as_str(),
        d.last_activity_at,
        billing_mode(a),
        u.actual_cost_usd,
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_insert_of_n_rows_has_n_rows_of_thirteen_parameters() {
        for n in [1, 2, 17, INSERT_ROWS] {
            let sql = insert_sql(n);
            let rows = sql.split(" VALUES ").nth(1).unwrap();
            assert_eq!(rows.matches('(').count(), n, "{sql}");
            assert_eq!(rows.matches('?').count(), n * 13, "{sql}");
            assert!(rows.ends_with("?)"), "{sql}");
        }
    }
}
