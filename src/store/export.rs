//! A stored session as Hermes exports it (`hermes_state.py`'s `export_session`): every column
//! of its `sessions` row, and `messages`, every column of each row in order, `tool_calls`
//! decoded from its JSON text and JSON-encoded content decoded (Hermes' `\0json:` prefix).
//! Rows Hermes marks inactive (an undo) are left out, as Hermes leaves them out.

use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row};
use serde_json::{Map, Value};

use super::{Store, StoreError};

/// Hermes' prefix of message content stored as JSON (`SessionDB._CONTENT_JSON_PREFIX`).
const CONTENT_JSON_PREFIX: &str = "\u{0}json:";

impl Store {
    /// The session `id_or_title` (an id first, then a title) as Hermes' export dict, or `None`.
    pub fn export(&self, id_or_title: &str) -> Result<Option<Value>, StoreError> {
        let row = self
            .conn
            .query_row(
                "SELECT * FROM sessions WHERE id = ?1 OR title = ?1
                 ORDER BY (id = ?1) DESC LIMIT 1",
                [id_or_title],
                object_of,
            )
            .optional()?;
        let Some(mut session) = row else {
            return Ok(None);
        };
        let id = session
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let active = if has_column(&self.conn, "messages", "active")? {
            " AND active = 1"
        } else {
            ""
        };
        let mut stmt = self.conn.prepare(&format!(
            "SELECT * FROM messages WHERE session_id = ?1{active} ORDER BY id"
        ))?;
        let mut messages = Vec::new();
        for row in stmt.query_map([&id], object_of)? {
            messages.push(Value::Object(decoded(row?)));
        }
        session.insert("messages".into(), Value::Array(messages));
        Ok(Some(Value::Object(session)))
    }
}

fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    let mut stmt = conn.prepare_cached("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?;
    stmt.exists([table, column])
}

/// A row as `{column: value}`: integers, reals, text as they are; a blob as lossy text.
fn object_of(row: &Row<'_>) -> rusqlite::Result<Map<String, Value>> {
    let stmt = row.as_ref();
    let mut out = Map::new();
    for i in 0..stmt.column_count() {
        let value = match row.get_ref(i)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(n) => Value::from(n),
            ValueRef::Real(x) => serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
            ValueRef::Text(t) | ValueRef::Blob(t) => {
                Value::String(String::from_utf8_lossy(t).into_owned())
            }
        };
        out.insert(stmt.column_name(i)?.to_string(), value);
    }
    Ok(out)
}

/// As Hermes' `get_messages` returns a row: `tool_calls` parsed (`[]` when it is not JSON),
/// JSON-encoded content decoded.
fn decoded(mut m: Map<String, Value>) -> Map<String, Value> {
    if let Some(Value::String(text)) = m.get("tool_calls")
        && !text.is_empty()
    {
        let calls = serde_json::from_str(text).unwrap_or(Value::Array(Vec::new()));
        m.insert("tool_calls".into(), calls);
    }
    if let Some(Value::String(text)) = m.get("content")
        && let Some(json) = text.strip_prefix(CONTENT_JSON_PREFIX)
        && let Ok(v) = serde_json::from_str::<Value>(json)
    {
        m.insert("content".into(), v);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_decode_as_hermes_reads_them() {
        let m = |v: Value| v.as_object().cloned().unwrap();
        let row = decoded(m(
            json!({"tool_calls": "[{\"id\":\"c1\"}]", "content": "\u{0}json:[1,2]"}),
        ));
        assert_eq!(
            Value::Object(row),
            json!({"tool_calls": [{"id": "c1"}], "content": [1, 2]})
        );
        let row = decoded(m(
            json!({"tool_calls": "not json", "content": "\u{0}json:{bad"}),
        ));
        assert_eq!(
            Value::Object(row),
            json!({"tool_calls": [], "content": "\u{0}json:{bad"})
        );
        let row = decoded(m(json!({"tool_calls": null, "content": "plain"})));
        assert_eq!(
            Value::Object(row),
            json!({"tool_calls": null, "content": "plain"})
        );
    }
}

/// What [`Store::absorb`] copied from another state.db.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Absorbed {
    /// Sessions copied, with their messages and per-model usage.
    pub sessions: usize,
    pub messages: usize,
    /// Sessions already here (by id), left as they are.
    pub already: usize,
}

/// Rows of the full-text index caught up per transaction after an [`Store::absorb`].
const ABSORB_INDEX_BATCH: usize = 10_000;

impl Store {
    /// Copies every session of the state.db at `other` that this one lacks (by id), with its
    /// messages in their order (given new row ids here) and its `session_model_usage` rows, in
    /// one transaction: the columns both files have (either may be an older Hermes schema).
    /// `other` is opened read-only and left as it is; the full-text index then catches up.
    /// How `exec merge --sessions` joins the shards' stores.
    pub fn absorb(&mut self, other: &Path) -> Result<Absorbed, StoreError> {
        self.conn
            .execute("ATTACH DATABASE ?1 AS shard", [read_only_uri(other)])?;
        let copied = self.absorb_attached();
        let detached = self.conn.execute("DETACH DATABASE shard", []);
        let copied = copied?;
        detached?;
        while self.index_step(ABSORB_INDEX_BATCH)? == ABSORB_INDEX_BATCH {}
        Ok(copied)
    }

    fn absorb_attached(&mut self) -> Result<Absorbed, StoreError> {
        let tx = super::begin(&mut self.conn, &mut self.fts, None)?;
        let shared = |table: &str, skip: &[&str]| -> rusqlite::Result<String> {
            let mut stmt = tx.prepare(
                "SELECT name FROM pragma_table_info(?1, 'main')
                 WHERE name IN (SELECT name FROM pragma_table_info(?1, 'shard')) ORDER BY cid",
            )?;
            let names: Vec<String> = stmt
                .query_map([table], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(names
                .into_iter()
                .filter(|n| !skip.contains(&n.as_str()))
                .map(|n| format!("\"{}\"", n.replace('"', "\"\"")))
                .collect::<Vec<_>>()
                .join(", "))
        };
        let session_cols = shared("sessions", &[])?;
        let message_cols = shared("messages", &["id"])?;
        let usage_cols = shared("session_model_usage", &[])?;
        tx.execute_batch(
            "DROP TABLE IF EXISTS temp.absorbed;
             CREATE TEMP TABLE absorbed AS
               SELECT id FROM shard.sessions WHERE id NOT IN (SELECT id FROM main.sessions);",
        )?;
        let total: i64 = tx.query_row("SELECT count(*) FROM shard.sessions", [], |r| r.get(0))?;
        let sessions = tx.execute(
            &format!(
                "INSERT INTO main.sessions ({session_cols}) SELECT {session_cols}
                 FROM shard.sessions WHERE id IN (SELECT id FROM temp.absorbed)"
            ),
            [],
        )?;
        let messages = tx.execute(
            &format!(
                "INSERT INTO main.messages ({message_cols}) SELECT {message_cols}
                 FROM shard.messages WHERE session_id IN (SELECT id FROM temp.absorbed)
                 ORDER BY id"
            ),
            [],
        )?;
        if !usage_cols.is_empty() {
            tx.execute(
                &format!(
                    "INSERT OR IGNORE INTO main.session_model_usage ({usage_cols})
                     SELECT {usage_cols} FROM shard.session_model_usage
                     WHERE session_id IN (SELECT id FROM temp.absorbed)"
                ),
                [],
            )?;
        }
        tx.execute_batch("DROP TABLE temp.absorbed")?;
        super::commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(Absorbed {
            sessions,
            messages,
            already: (total as usize).saturating_sub(sessions),
        })
    }
}

/// `path` as a read-only SQLite URI (`?`, `#` and `%` escaped, as URIs need).
fn read_only_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            '%' => uri.push_str("%25"),
            c => uri.push(c),
        }
    }
    uri.push_str("?mode=ro");
    uri
}
