//! Hermes' full-text indexes (`messages_fts`, and `messages_fts_trigram` where Hermes made it),
//! kept up to date in batches instead of row by row.
//!
//! Hermes' triggers index each message as its row goes in, and FTS5 writes a new segment at
//! every commit that indexes something: about a third of a turn's cost. Where every trigger in
//! state.db is one of Hermes' FTS triggers, exactly as Hermes writes them, the gateway's
//! connection runs with triggers off and does their work itself:
//! - a deleted message leaves the indexes in the same statement batch, and an updated one is
//!   indexed again at once (as the triggers do);
//! - new messages are indexed in batches: the rows past the mark in `tui_gateway_fts_indexed`,
//!   on the flush tick and before a search. A row already indexed (by Hermes' own triggers,
//!   which stay on in its connections, or by an update) is never indexed twice.
//!
//! Any other trigger, or a Hermes trigger changed, and the connection keeps triggers on: the
//! batches then only catch up what an earlier run left behind the mark.

use std::cell::RefCell;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

/// The text Hermes' triggers index for a message row.
const CONTENT: &str =
    "COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')";

/// Hermes' FTS5 tables over `messages`, each kept by three triggers of its name.
const TABLES: [&str; 2] = ["messages_fts", "messages_fts_trigram"];

/// FTS5's `automerge` when its config table has none.
const DEFAULT_AUTOMERGE: i64 = 4;

/// One index and the statements that stand in for its triggers.
#[derive(Debug)]
struct Table {
    /// Its new rows between two marks, each unless already there.
    add: String,
    /// Drop the rows of messages chosen by `(session_id, offset-or-limit)`, see [`Selection`].
    forget_tail: String,
    forget_head: String,
    /// Index one updated row again: dropped, then added back if the mark has passed it
    /// (otherwise the next batch adds it).
    drop_row: String,
    readd_row: String,
    /// Its `automerge` setting: read, set (an FTS5 command), and back to FTS5's default.
    automerge_get: String,
    automerge_set: String,
    automerge_unset: String,
    /// Up to `?1` pages of FTS5's merge work.
    merge: String,
}

impl Table {
    fn new(name: &str) -> Table {
        Table {
            add: format!(
                "INSERT INTO {name}(rowid, content)
                 SELECT id, {CONTENT} FROM messages m WHERE id > ?1 AND id <= ?2
                   AND NOT EXISTS (SELECT 1 FROM {name} WHERE rowid = m.id)"
            ),
            forget_tail: format!(
                "DELETE FROM {name} WHERE rowid IN (SELECT id FROM messages
                     WHERE session_id = ?1 ORDER BY id LIMIT -1 OFFSET ?2)"
            ),
            forget_head: format!(
                "DELETE FROM {name} WHERE rowid IN (SELECT id FROM messages
                     WHERE session_id = ?1 ORDER BY id LIMIT ?2)"
            ),
            drop_row: format!("DELETE FROM {name} WHERE rowid = ?1"),
            readd_row: format!(
                "INSERT INTO {name}(rowid, content)
                 SELECT id, {CONTENT} FROM messages
                 WHERE id = ?1 AND id <= (SELECT id FROM tui_gateway_fts_indexed)"
            ),
            automerge_get: format!("SELECT v FROM {name}_config WHERE k = 'automerge'"),
            automerge_set: format!("INSERT INTO {name}({name}, rank) VALUES ('automerge', ?1)"),
            automerge_unset: format!("DELETE FROM {name}_config WHERE k = 'automerge'"),
            merge: format!("INSERT INTO {name}({name}, rank) VALUES ('merge', ?1)"),
        }
    }
}

/// Which of a session's messages a delete takes: those past the first `n` (an undo), or the
/// first `n` (a purge batch).
#[derive(Debug, Clone, Copy)]
pub enum Selection {
    After(usize),
    First(usize),
}

/// How this connection keeps the full-text indexes.
#[derive(Debug, Default)]
pub struct Indexes {
    /// The indexes whose triggers are Hermes' own (the batches add to these).
    tables: Vec<Table>,
    /// Triggers are off on this connection: the statements here do their work.
    kept_here: bool,
    /// `PRAGMA schema_version` when this was decided (a change means a new look).
    schema_version: i64,
    /// This transaction holds FTS5's automatic merges off: each table's `automerge` before
    /// (`None`: unset), for [`Indexes::release`] to put back.
    held: RefCell<Vec<Option<i64>>>,
}

/// Hermes' trigger `<table>_<kind>` (`insert`, `delete`, `update`), as SQLite stores it.
fn hermes_trigger(table: &str, kind: &str) -> String {
    let content = CONTENT.replace("COALESCE(", "COALESCE(new.");
    let add = format!("INSERT INTO {table}(rowid, content) VALUES (new.id, {content})");
    let body = match kind {
        "insert" => add,
        "delete" => format!("DELETE FROM {table} WHERE rowid = old.id"),
        _ => format!("DELETE FROM {table} WHERE rowid = old.id; {add}"),
    };
    format!(
        "CREATE TRIGGER {table}_{kind} AFTER {} ON messages BEGIN {body}; END",
        kind.to_uppercase()
    )
}

/// SQL compared without its spacing, case, `IF NOT EXISTS` or final `;`.
fn normal(sql: &str) -> String {
    let s: String = sql
        .chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    s.replacen("ifnotexists", "", 1)
        .trim_end_matches(';')
        .to_string()
}

/// What the triggers in a database say: the indexes Hermes' triggers keep, and whether every
/// trigger there is one of those (so the gateway may do their work itself).
fn decide(triggers: &[(String, Option<String>)], tables: &[&str]) -> (Vec<&'static str>, bool) {
    let is = |name: &str, table: &str, kind: &str| {
        triggers.iter().any(|(n, sql)| {
            n == name
                && sql
                    .as_deref()
                    .is_some_and(|s| normal(s) == normal(&hermes_trigger(table, kind)))
        })
    };
    let kept: Vec<&'static str> = TABLES
        .into_iter()
        .filter(|t| tables.contains(t))
        .filter(|t| {
            ["insert", "delete", "update"]
                .iter()
                .all(|k| is(&format!("{t}_{k}"), t, k))
        })
        .collect();
    let all_known = triggers.iter().all(|(n, _)| {
        kept.iter().any(|t| {
            ["insert", "delete", "update"]
                .iter()
                .any(|k| *n == format!("{t}_{k}"))
        })
    });
    let every_index_kept = TABLES
        .iter()
        .filter(|t| tables.contains(t))
        .all(|t| kept.contains(t));
    let here = !kept.is_empty() && all_known && every_index_kept;
    (kept, here)
}

fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA schema_version", [], |r| r.get(0))
}

impl Indexes {
    /// Look at state.db's triggers and set the connection up to match (on a connection with
    /// no statement prepared yet, or after [`Indexes::refresh`] flushed them).
    pub fn open(conn: &Connection) -> rusqlite::Result<Indexes> {
        let mut triggers = Vec::new();
        let mut tables = Vec::new();
        {
            let mut stmt = conn.prepare(
                "SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'table')",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })?;
            for row in rows {
                let (kind, name, sql) = row?;
                if kind == "trigger" {
                    triggers.push((name, sql));
                } else {
                    tables.push(name);
                }
            }
        }
        let tables: Vec<&str> = tables.iter().map(String::as_str).collect();
        let (kept, here) = decide(&triggers, &tables);
        if !kept.is_empty() {
            // Everything up to now is indexed (the triggers did it); the batches start here.
            // `max(id)` alone in its query: SQLite reads it off the rowid's end, where a
            // WHERE beside it made every start scan the whole table.
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS tui_gateway_fts_indexed (id INTEGER NOT NULL);
                 INSERT INTO tui_gateway_fts_indexed (id)
                     SELECT coalesce((SELECT max(id) FROM messages), 0)
                     WHERE NOT EXISTS (SELECT 1 FROM tui_gateway_fts_indexed);",
            )?;
        }
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER,
            !here,
        )?;
        Ok(Indexes {
            tables: kept.into_iter().map(Table::new).collect(),
            kept_here: here,
            schema_version: schema_version(conn)?,
            held: RefCell::default(),
        })
    }

    /// A transaction begins: nothing is held in it yet.
    pub fn begun(&self) {
        self.held.borrow_mut().clear();
    }

    /// Hold FTS5's automatic merges off for the rest of this transaction. FTS5 merges at the
    /// commit after every 64 leaf pages written, up to 64 pages per level of the index at
    /// once (tens of milliseconds on a big index); held off, that work waits for the paced
    /// steps of [`Indexes::merge`]. [`Indexes::release`] must run before the commit, so the
    /// setting in state.db (Hermes' too) never changes; a rollback undoes the hold with the rest.
    pub fn hold(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let mut held = self.held.borrow_mut();
        if !held.is_empty() {
            return Ok(());
        }
        let mut was = Vec::with_capacity(self.tables.len());
        for t in &self.tables {
            let v: Option<Value> = tx
                .prepare_cached(&t.automerge_get)?
                .query_row([], |r| r.get(0))
                .optional()?;
            match v {
                None => was.push(None),
                Some(Value::Integer(n)) => was.push(Some(n)),
                // A setting FTS5 would not take back: merges stay as they are.
                Some(_) => return Ok(()),
            }
        }
        for t in &self.tables {
            tx.prepare_cached(&t.automerge_set)?.execute([0])?;
        }
        *held = was;
        Ok(())
    }

    /// Put back what [`Indexes::hold`] changed (FTS5 first writes out what it holds in memory,
    /// with merges still off); the commit may follow.
    pub fn release(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let held = std::mem::take(&mut *self.held.borrow_mut());
        if held.is_empty() {
            return Ok(());
        }
        for (t, was) in self.tables.iter().zip(&held) {
            tx.prepare_cached(&t.automerge_set)?
                .execute([was.unwrap_or(DEFAULT_AUTOMERGE)])?;
            if was.is_none() {
                tx.prepare_cached(&t.automerge_unset)?.execute([])?;
            }
        }
        Ok(())
    }

    /// Whether there is a full-text index to merge.
    pub fn any(&self) -> bool {
        !self.tables.is_empty()
    }

    /// Up to `pages` pages of FTS5's merge work in each index (on levels with at least
    /// FTS5's `usermerge` segments, 4 unless set): whether there was any.
    pub fn merge(&self, tx: &Transaction<'_>, pages: usize) -> rusqlite::Result<bool> {
        let mut worked = false;
        for t in &self.tables {
            let before = tx.total_changes();
            tx.prepare_cached(&t.merge)?.execute([pages as i64])?;
            // FTS5's documented test: two or more changes mean the command merged something.
            worked |= tx.total_changes() - before >= 2;
        }
        Ok(worked)
    }

    /// Look again if the schema changed since (Hermes may have added a trigger or an index).
    pub fn refresh(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        if schema_version(conn)? == self.schema_version {
            return Ok(());
        }
        // Statements compiled for the other trigger setting must not run again.
        conn.flush_prepared_statement_cache();
        *self = Indexes::open(conn)?;
        Ok(())
    }

    /// The messages of `session_id` that `which` selects are about to be deleted.
    pub fn forget(
        &self,
        tx: &Transaction<'_>,
        session_id: &str,
        which: Selection,
    ) -> rusqlite::Result<()> {
        if !self.kept_here {
            return Ok(());
        }
        self.hold(tx)?;
        for t in &self.tables {
            let (sql, n) = match which {
                Selection::After(n) => (&t.forget_tail, n),
                Selection::First(n) => (&t.forget_head, n),
            };
            tx.prepare_cached(sql)?
                .execute(params![session_id, n as i64])?;
        }
        Ok(())
    }

    /// Message `row` was just updated.
    pub fn updated(&self, tx: &Transaction<'_>, row: i64) -> rusqlite::Result<()> {
        if !self.kept_here {
            return Ok(());
        }
        self.hold(tx)?;
        for t in &self.tables {
            tx.prepare_cached(&t.drop_row)?.execute([row])?;
            tx.prepare_cached(&t.readd_row)?.execute([row])?;
        }
        Ok(())
    }

    /// Index up to `batch` message rows past the mark, and move the mark past them. Returns how
    /// many rows it looked at (fewer than `batch`: none is left).
    pub fn step(&self, tx: &Transaction<'_>, batch: usize) -> rusqlite::Result<usize> {
        if self.tables.is_empty() {
            return Ok(0);
        }
        let Some(mark) = mark(tx)? else {
            return Ok(0);
        };
        let (last, rows): (Option<i64>, usize) = tx
            .prepare_cached(
                "SELECT max(id), count(*) FROM
                     (SELECT id FROM messages WHERE id > ?1 ORDER BY id LIMIT ?2)",
            )?
            .query_row(params![mark, batch as i64], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)? as usize))
            })?;
        let Some(last) = last else {
            return Ok(0);
        };
        self.hold(tx)?;
        for t in &self.tables {
            tx.prepare_cached(&t.add)?.execute(params![mark, last])?;
        }
        tx.prepare_cached("UPDATE tui_gateway_fts_indexed SET id = ?1")?
            .execute([last])?;
        Ok(rows)
    }

    /// Whether some message row is past the mark (a read: no transaction needed).
    pub fn behind(&self, conn: &Connection) -> rusqlite::Result<bool> {
        if self.tables.is_empty() {
            return Ok(false);
        }
        let Some(mark) = mark(conn)? else {
            return Ok(false);
        };
        conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM messages WHERE id > ?1)")?
            .query_row([mark], |r| r.get(0))
    }
}

fn mark(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT id FROM tui_gateway_fts_indexed")?
        .query_row([], |r| r.get(0))
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(dir: &crate::util::ScratchDir) -> (Connection, Indexes) {
        let conn = Connection::open(dir.path().join("state.db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL").unwrap();
        super::super::schema::ensure(&conn).unwrap();
        conn.execute_batch(
            "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES ('s', 'tui', 1)",
        )
        .unwrap();
        let idx = Indexes::open(&conn).unwrap();
        (conn, idx)
    }

    fn add(conn: &Connection, text: &str) -> i64 {
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s', 'user', ?1, 1)",
            [text],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    fn hits(conn: &Connection, word: &str) -> i64 {
        conn.query_row(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?1",
            [word],
            |r| r.get(0),
        )
        .unwrap()
    }

    fn in_tx<T>(conn: &mut Connection, idx: &Indexes, f: impl FnOnce(&Transaction<'_>) -> T) -> T {
        let tx = conn.transaction().unwrap();
        idx.begun();
        let out = f(&tx);
        idx.release(&tx).unwrap();
        tx.commit().unwrap();
        out
    }

    fn automerge(conn: &Connection, table: &str) -> Option<i64> {
        conn.query_row(
            &format!("SELECT v FROM {table}_config WHERE k = 'automerge'"),
            [],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
    }

    fn data_rows(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM messages_fts_data", [], |r| r.get(0))
            .unwrap()
    }

    fn intact(conn: &Connection) {
        conn.execute_batch("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
            .expect("the index matches its rows");
    }

    #[test]
    fn new_messages_are_indexed_by_the_batch_and_deletes_and_updates_at_once() {
        let dir = crate::util::ScratchDir::new("fts");
        let (mut conn, idx) = db(&dir);
        assert!(
            idx.kept_here,
            "a database made here has only Hermes' FTS triggers"
        );
        add(&conn, "alpha one");
        let b = add(&conn, "bravo two");
        assert_eq!(hits(&conn, "alpha"), 0, "not indexed at the insert");
        assert!(idx.behind(&conn).unwrap());
        assert_eq!(in_tx(&mut conn, &idx, |tx| idx.step(tx, 1).unwrap()), 1);
        assert_eq!((hits(&conn, "alpha"), hits(&conn, "bravo")), (1, 0));
        assert_eq!(in_tx(&mut conn, &idx, |tx| idx.step(tx, 10).unwrap()), 1);
        assert_eq!(hits(&conn, "bravo"), 1);
        assert!(!idx.behind(&conn).unwrap());
        // An indexed row updated is indexed again at once; one past the mark waits its batch.
        let c = add(&conn, "charlie");
        in_tx(&mut conn, &idx, |tx| {
            tx.execute(
                "UPDATE messages SET content = 'bravo renamed' WHERE id = ?1",
                [b],
            )
            .unwrap();
            idx.updated(tx, b).unwrap();
            tx.execute(
                "UPDATE messages SET content = 'charlie later' WHERE id = ?1",
                [c],
            )
            .unwrap();
            idx.updated(tx, c).unwrap();
        });
        assert_eq!((hits(&conn, "two"), hits(&conn, "renamed")), (0, 1));
        assert_eq!(hits(&conn, "later"), 0);
        in_tx(&mut conn, &idx, |tx| idx.step(tx, 10).unwrap());
        assert_eq!(hits(&conn, "later"), 1);
        // Deleted rows leave the index (an undo's tail, a purge's head).
        in_tx(&mut conn, &idx, |tx| {
            idx.forget(tx, "s", Selection::After(2)).unwrap();
            tx.execute("DELETE FROM messages WHERE id = ?1", [c])
                .unwrap();
            idx.forget(tx, "s", Selection::First(1)).unwrap();
            tx.execute("DELETE FROM messages WHERE content = 'alpha one'", [])
                .unwrap();
        });
        assert_eq!((hits(&conn, "later"), hits(&conn, "alpha")), (0, 0));
        intact(&conn);
    }

    #[test]
    fn rows_hermes_triggers_indexed_are_not_indexed_twice() {
        let dir = crate::util::ScratchDir::new("fts");
        let (mut conn, idx) = db(&dir);
        add(&conn, "ours");
        // Hermes' own connection: triggers on.
        let hermes = Connection::open(dir.path().join("state.db")).unwrap();
        add(&hermes, "theirs");
        assert_eq!(hits(&conn, "theirs"), 1);
        assert_eq!(in_tx(&mut conn, &idx, |tx| idx.step(tx, 10).unwrap()), 2);
        assert_eq!((hits(&conn, "ours"), hits(&conn, "theirs")), (1, 1));
        intact(&conn);
    }

    #[test]
    fn with_another_trigger_in_the_database_the_triggers_stay_on() {
        let dir = crate::util::ScratchDir::new("fts");
        {
            let (conn, _) = db(&dir);
            conn.execute_batch(
                "CREATE TABLE audit (n INTEGER);
                 CREATE TRIGGER audit_messages AFTER INSERT ON messages BEGIN
                     INSERT INTO audit VALUES (new.id); END;",
            )
            .unwrap();
        }
        let (conn, idx) = db(&dir);
        assert!(!idx.kept_here);
        add(&conn, "indexed");
        assert_eq!(hits(&conn, "indexed"), 1, "Hermes' trigger ran");
        let audited: i64 = conn
            .query_row("SELECT count(*) FROM audit", [], |r| r.get(0))
            .unwrap();
        assert_eq!(audited, 1, "and the other one");
    }

    fn hermes(tables: &[&str]) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        for t in tables {
            for k in ["insert", "delete", "update"] {
                out.push((format!("{t}_{k}"), Some(hermes_trigger(t, k))));
            }
        }
        out
    }

    #[test]
    fn hermes_own_triggers_as_sqlite_stores_them_are_recognised() {
        // As `sqlite_master` holds Hermes' FTS_SQL (IF NOT EXISTS and the final `;` gone).
        let stored = "CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
    INSERT INTO messages_fts(rowid, content) VALUES (
        new.id,
        COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, '')
    );
END";
        assert_eq!(
            normal(stored),
            normal(&hermes_trigger("messages_fts", "update"))
        );
    }

    #[test]
    fn the_gateway_does_the_triggers_work_only_when_every_trigger_is_hermes_fts() {
        let fts = ["messages", "messages_fts"];
        let both = ["messages", "messages_fts", "messages_fts_trigram"];
        assert_eq!(
            decide(&hermes(&["messages_fts"]), &fts),
            (vec!["messages_fts"], true)
        );
        assert_eq!(
            decide(&hermes(&["messages_fts", "messages_fts_trigram"]), &both),
            (vec!["messages_fts", "messages_fts_trigram"], true)
        );
        // Another trigger: triggers stay on, the batches still know Hermes' index.
        let mut other = hermes(&["messages_fts"]);
        other.push((
            "audit".into(),
            Some("CREATE TRIGGER audit AFTER INSERT ON sessions BEGIN SELECT 1; END".into()),
        ));
        assert_eq!(decide(&other, &fts), (vec!["messages_fts"], false));
        // A Hermes trigger that indexes something else.
        let mut changed = hermes(&["messages_fts"]);
        changed[0].1 = Some(
            "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
             INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END"
                .into(),
        );
        assert_eq!(decide(&changed, &fts), (vec![], false));
        // An index whose triggers are gone (Hermes repairing it): nobody else's work to do.
        assert_eq!(
            decide(&hermes(&["messages_fts"]), &both),
            (vec!["messages_fts"], false)
        );
        assert_eq!(decide(&[], &fts), (vec![], false));
        assert_eq!(decide(&[], &["messages"]), (vec![], false));
    }

    #[test]
    fn batches_hold_merges_off_without_changing_the_setting_and_merge_steps_do_the_work() {
        let dir = crate::util::ScratchDir::new("fts");
        let (mut conn, idx) = db(&dir);
        let tables = ["messages_fts", "messages_fts_trigram"];
        let present: Vec<&str> = tables
            .into_iter()
            .filter(|t| {
                idx.tables
                    .iter()
                    .any(|k| k.automerge_get.contains(&format!("{t}_config")))
            })
            .collect();
        assert!(present.contains(&"messages_fts"));
        let before: Vec<_> = present.iter().map(|t| automerge(&conn, t)).collect();
        // Many small batches, each its own segment: nothing merges them while held.
        for i in 0..12 {
            for j in 0..3 {
                add(&conn, &format!("word{i} other{j} common"));
            }
            in_tx(&mut conn, &idx, |tx| {
                idx.hold(tx).unwrap();
                let held = automerge(tx, "messages_fts");
                assert_eq!(held, Some(0), "held off inside the transaction");
                idx.step(tx, 100).unwrap()
            });
        }
        let after: Vec<_> = present.iter().map(|t| automerge(&conn, t)).collect();
        assert_eq!(
            before, after,
            "the stored setting is as it was (unset: FTS5's default)"
        );
        let unmerged = data_rows(&conn);
        let mut steps = 0;
        while in_tx(&mut conn, &idx, |tx| idx.merge(tx, 16).unwrap()) {
            steps += 1;
            assert!(steps < 100, "merging never ends");
        }
        assert!(steps > 0, "the held batches left merge work");
        assert!(
            data_rows(&conn) < unmerged,
            "segments merged: {unmerged} → {}",
            data_rows(&conn)
        );
        assert_eq!((hits(&conn, "common"), hits(&conn, "word7")), (36, 3));
        intact(&conn);
        // A setting of its own is put back as it was.
        conn.execute_batch("INSERT INTO messages_fts(messages_fts, rank) VALUES ('automerge', 8)")
            .unwrap();
        add(&conn, "later");
        in_tx(&mut conn, &idx, |tx| idx.step(tx, 100).unwrap());
        assert_eq!(automerge(&conn, "messages_fts"), Some(8));
        assert_eq!(hits(&conn, "later"), 1);
        // A rollback takes the hold with it; the next transaction holds afresh.
        {
            let tx = conn.transaction().unwrap();
            idx.begun();
            idx.hold(&tx).unwrap();
        }
        assert_eq!(automerge(&conn, "messages_fts"), Some(8));
        in_tx(&mut conn, &idx, |tx| {
            idx.hold(tx).unwrap();
            assert_eq!(automerge(tx, "messages_fts"), Some(0));
        });
        assert_eq!(automerge(&conn, "messages_fts"), Some(8));
    }
}
