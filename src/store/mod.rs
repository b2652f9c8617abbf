//! The SQLite store: `$HERMES_HOME/state.db`, Hermes Agent's `sessions` and `messages` tables.
//!
//! Memory is the source of truth while the gateway runs; [`Store::persist`] writes what each
//! session has not yet committed (its row, then its messages by position) in one transaction.
//! A failed transaction writes nothing, so retrying it can never write a message twice.

mod delta;
mod error;
mod export;
#[doc(hidden)]
pub mod faults;
mod fts;
mod recall;
mod repair;
mod schema;
mod search;
mod wal;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::clock::Budget;
use crate::transcript::{Message, Role};

pub use delta::{Delta, LiveChange, Usage};
pub use error::{ErrorKind, StoreError};
pub use recall::{AnchoredView, Around, SessionMeta, StoredRow};
pub use search::{SearchHit, SearchQuery, SnippetPart};

/// The sessions list: the preview is the session's first user message (its first rows, by
/// the `(session_id, id)` index), the order is the recent-activity index's.
const LIST_SQL: &str =
    "SELECT s.id, s.title, s.started_at, s.source, s.model, s.ended_at, s.end_reason,
            s.message_count,
            (SELECT substr(m.content, 1, 400) FROM messages m
             WHERE m.session_id = s.id AND m.role = 'user' ORDER BY m.id LIMIT 1)
     FROM sessions s
     WHERE (?1 IS NULL OR instr(lower(coalesce(s.title, '')), lower(?1)) > 0)
       AND (?2 IS NULL OR s.source = ?2)
       -- subagents' runs stay out of pickers unless asked for by source (as Hermes does)
       AND (?2 IS NOT NULL OR coalesce(s.source, '') <> 'subagent')
       AND (?3 IS NULL OR coalesce(s.last_activity_at, s.started_at) >= ?3)
       -- a compacted session is listed as its continuation (as Hermes does)
       AND NOT (s.end_reason = 'compression' AND EXISTS (
           SELECT 1 FROM sessions c
           WHERE c.parent_session_id = s.id AND c.started_at >= s.ended_at))
     ORDER BY coalesce(s.last_activity_at, s.started_at) DESC, s.started_at DESC
     LIMIT ?4 OFFSET ?5";

/// Messages a search indexes first at most (a normal backlog is one flush interval's).
pub const SEARCH_CATCH_UP: usize = 2_000;

/// Which sessions [`Store::list`] answers, and which page of them.
#[derive(Debug, Clone, Default)]
pub struct ListFilter<'a> {
    /// A case-insensitive substring of the title.
    pub title: Option<&'a str>,
    /// Exactly this `source` (`tui`, `cli`, `telegram`…).
    pub source: Option<&'a str>,
    /// Active at or after this unix time.
    pub since: Option<f64>,
    pub limit: usize,
    /// Sessions skipped before the page.
    pub offset: usize,
}

impl ListFilter<'_> {
    /// The first `limit` sessions, unfiltered.
    pub fn first(limit: usize) -> ListFilter<'static> {
        ListFilter {
            limit,
            ..ListFilter::default()
        }
    }
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// This process, as recorded in `tui_gateway_live`: `pid:start time` (`+N` for a later
    /// store of the same process).
    owner: String,
    /// This process's count of stores opened before this one ([`owner_alive`]).
    instance: u64,
    /// How long a write may wait for another process's lock: until this instant, measured
    /// when each transaction begins; `None`: not at all (the loop retries on its timer).
    wait_until: Option<Budget>,
    /// How Hermes' full-text indexes are kept on this connection (by triggers, or here).
    fts: fts::Indexes,
    /// What the WAL holds past the last checkpoint.
    wal: wal::WalWatch,
    /// A test's injected faults ([`faults`]); `None` outside the simulator.
    faults: Option<faults::FaultHook>,
}

/// Start a write transaction, waiting for another process's lock no later than `wait_until`
/// (measured now, so a wait is bounded by the deadline as it stands at this moment). With the
/// lock held the schema cannot change: a trigger another process added since the last write
/// is seen here, before anything is written without it.
fn begin<'c>(
    conn: &'c mut Connection,
    fts: &mut fts::Indexes,
    wait_until: Option<Budget>,
) -> rusqlite::Result<rusqlite::Transaction<'c>> {
    let wait = wait_until.and_then(|b| b.left()).unwrap_or(Duration::ZERO);
    conn.busy_timeout(wait)?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    fts.refresh(&tx)?;
    fts.begun();
    Ok(tx)
}

/// Commit a transaction of [`begin`], FTS5's merge setting put back first ([`fts::Indexes::hold`]);
/// a test's injected fault fails it as SQLite would, the transaction rolled back.
fn commit(
    tx: rusqlite::Transaction<'_>,
    fts: &fts::Indexes,
    faults: Option<&faults::FaultHook>,
) -> rusqlite::Result<()> {
    if let Some(kind) = faults.and_then(|f| f.0.commit()) {
        return Err(faults::sqlite_error(kind));
    }
    fts.release(&tx)?;
    tx.commit()
}

/// `pid:start time` of a process (the start time tells a reused pid apart), if it is alive.
pub fn process_identity(pid: u32) -> Option<String> {
    let stat = crate::util::read_proc(&format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 22 (starttime) is the 20th after the name.
    let start = after.split_whitespace().nth(19)?;
    Some(format!("{pid}:{start}"))
}

/// The stores open in this process, by instance: the first store a process opens is instance
/// 0 and its owner is `pid:start`; a later one (a gateway restarted in the same process: the
/// simulator, an embedding host) is `pid:start+N`. Once a store is dropped its instance is
/// dead, as a killed process is, so what it left open is repaired and its journal folded.
static OPEN_INSTANCES: std::sync::Mutex<std::collections::BTreeSet<u64>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());
static NEXT_INSTANCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// This process's `pid:start`, read once.
fn this_process() -> Option<&'static str> {
    static ME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ME.get_or_init(|| process_identity(std::process::id()))
        .as_deref()
}

/// A new instance of this process's stores, open until [`instance_closed`].
fn instance_opened() -> (u64, String) {
    let n = NEXT_INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = this_process().map_or_else(|| std::process::id().to_string(), str::to_string);
    if let Ok(mut open) = OPEN_INSTANCES.lock() {
        open.insert(n);
    }
    let owner = match n {
        0 => base,
        n => format!("{base}+{n}"),
    };
    (n, owner)
}

fn instance_closed(n: u64) {
    if let Ok(mut open) = OPEN_INSTANCES.lock() {
        open.remove(&n);
    }
}

pub fn owner_alive(owner: &str) -> bool {
    let (base, instance) = match owner.split_once('+') {
        Some((base, n)) => match n.parse::<u64>() {
            Ok(n) => (base, n),
            Err(_) => return false,
        },
        None => (owner, 0),
    };
    // In this process, a store that was dropped is as dead as a killed process.
    if this_process() == Some(base) {
        return OPEN_INSTANCES
            .lock()
            .map_or(true, |open| open.contains(&instance));
    }
    base.split_once(':')
        .and_then(|(pid, _)| pid.parse::<u32>().ok())
        .filter(|pid| !exited(*pid))
        .and_then(process_identity)
        .is_some_and(|now| now == base)
}

/// Whether process `pid` has exited and waits to be reaped (a zombie holds nothing open).
pub(crate) fn exited(pid: u32) -> bool {
    crate::util::read_proc(&format!("/proc/{pid}/stat")).is_some_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| matches!(state, "Z" | "X" | "x"))
    })
}

/// Who holds a stored session open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    Nobody,
    /// This process.
    Me,
    /// Another gateway that is running (`pid:start time`).
    Live(String),
    /// A gateway that is gone without closing it.
    Dead(String),
}

/// Prepared statements kept: the store's own and one multi-row message INSERT per size
/// (`delta.rs`), so none is prepared again every commit.
pub(crate) const STATEMENT_CACHE: usize = 160;

/// One batch of a deleted session's messages removed ([`Store::purge_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    pub removed: usize,
    /// That session has no messages left.
    pub ended: bool,
}

/// What startup repair did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Repair {
    pub sessions_ended: usize,
    pub tool_results_added: usize,
    pub queued_prompts_kept: usize,
    /// Background delegations whose parent's transcript was told their outcome is unknown.
    pub delegations_unknown: usize,
}

/// A stored session as lists show it.
#[derive(Debug, Clone)]
pub struct StoredSummary {
    pub id: String,
    pub title: Option<String>,
    pub preview: String,
    pub started_at: f64,
    pub message_count: i64,
    pub source: String,
    pub model: Option<String>,
    pub ended_at: Option<f64>,
    pub end_reason: Option<String>,
}

/// The accounting columns from `first` on: cache read, cache write, reasoning, estimated cost,
/// actual cost, cost status, cost source, pricing version.
fn accounting_of(
    r: &rusqlite::Row<'_>,
    first: usize,
) -> rusqlite::Result<crate::model::Accounting> {
    use crate::model::pricing::{CostSource, CostStatus};
    let count = |i: usize| -> rusqlite::Result<u64> {
        Ok(r.get::<_, Option<i64>>(first + i)?.unwrap_or(0).max(0) as u64)
    };
    let estimated: Option<f64> = r.get(first + 3)?;
    let actual: Option<f64> = r.get(first + 4)?;
    let status: Option<String> = r.get(first + 5)?;
    let source: Option<String> = r.get(first + 6)?;
    let version: Option<String> = r.get(first + 7)?;
    Ok(crate::model::Accounting {
        cache_read_tokens: count(0)?,
        cache_write_tokens: count(1)?,
        reasoning_tokens: count(2)?,
        cost_usd: estimated.or(actual),
        actual_cost_usd: actual,
        cost_status: status
            .as_deref()
            .map_or_else(Default::default, CostStatus::parse),
        cost_source: source
            .as_deref()
            .map_or_else(Default::default, CostSource::parse),
        // One not of our table (Hermes' OpenRouter catalogue…) stays stored all the same: a
        // commit writes only a newer one.
        pricing_version: version
            .as_deref()
            .and_then(crate::model::pricing::known_version),
    })
}

/// A message as `messages` stores it: columns role, content, tool_call_id, tool_calls, tool_name,
/// timestamp, token_count, finish_reason, reasoning, reasoning_details, codex_reasoning_items,
/// codex_message_items.
fn message_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        role: Role::parse(&r.get::<_, Option<String>>(0)?.unwrap_or_default()),
        content: r.get(1)?,
        tool_call_id: r.get(2)?,
        tool_calls: r.get(3)?,
        tool_name: r.get(4)?,
        timestamp: r.get::<_, Option<f64>>(5)?.unwrap_or(0.0),
        token_count: r.get(6)?,
        finish_reason: r.get(7)?,
        reasoning: r.get(8)?,
        replay: crate::transcript::Replay {
            reasoning_details: r.get(9)?,
            codex_reasoning_items: r.get(10)?,
            codex_message_items: r.get(11)?,
        },
        row_id: None,
    })
}

/// What a stored session's subagents used, every level ([`Store::subagent_totals`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubagentTotals {
    pub count: u64,
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub calls: u64,
    pub cost_usd: Option<f64>,
}

/// A stored session with its transcript, for resume.
#[derive(Debug, Clone)]
pub struct StoredSession {
    pub id: String,
    pub source: String,
    pub model: Option<String>,
    pub title: Option<String>,
    pub cwd: Option<String>,
    pub started_at: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub tool_call_count: i64,
    /// `api_call_count`: model calls so far.
    pub api_call_count: i64,
    pub accounting: crate::model::Accounting,
    pub messages: Vec<Message>,
    /// What [`Store::load_newest`] left in state.db, before `messages`; `None`: nothing.
    pub older: Option<OlderRows>,
}

/// The older messages of a session whose newest were loaded: those before row `before_row`,
/// about `count` of them (the row's `message_count` says; the read that ends says exactly).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OlderRows {
    pub before_row: i64,
    pub count: usize,
}

/// How long opening waits for another process's hold on state.db.
const OPEN_WAIT: Duration = Duration::from_secs(2);
/// A preparation that failed busy is tried again after this pause, this many times (about
/// [`OPEN_WAIT`] in all).
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(2);
const OPEN_RETRIES: u32 = 1000;

/// WAL, `synchronous`, the schema and the full-text indexes: the journal mode SQLite ended in
/// and the indexes; on failure, what failed.
fn prepare(
    conn: &Connection,
    synchronous: &str,
) -> Result<(String, fts::Indexes), (&'static str, rusqlite::Error)> {
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(|e| ("cannot switch to WAL", e))?;
    conn.execute_batch(&format!("PRAGMA synchronous={synchronous}"))
        .map_err(|e| ("cannot configure", e))?;
    schema::ensure(conn).map_err(|e| ("cannot prepare the schema of", e))?;
    let fts = fts::Indexes::open(conn).map_err(|e| ("cannot prepare the full-text index of", e))?;
    Ok((mode, fts))
}

/// SQLite's connection to `path`, refused when `path` is a symlink: the check above and
/// SQLite's own open are two opens, and a link planted between them must not redirect it.
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::default() | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW,
    )
}

impl Store {
    /// Open (creating if needed) the database with mode 0600 in WAL mode, and bring the schema
    /// up to what we need without touching anything else in it.
    pub fn open(path: &Path, synchronous: &str) -> Result<Store, String> {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| format!("{what} {}: {e}", path.display());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail("cannot create the folder of", &e))?;
        }
        // Neither state.db nor SQLite's files beside it may be a link, another user's, or
        // readable by others (SQLite reuses an existing -wal or -shm as it finds it).
        crate::private_file::append(path).map_err(|e| fail("cannot open", &e))?;
        for side in ["-wal", "-shm", "-journal"] {
            let mut name = path.as_os_str().to_owned();
            name.push(side);
            crate::private_file::tighten_existing(Path::new(&name))
                .map_err(|e| fail(&format!("cannot open the {side} file of"), &e))?;
        }
        let waiting_connection = || -> Result<Connection, String> {
            let conn = connect(path).map_err(|e| fail("cannot open", &e))?;
            conn.busy_timeout(OPEN_WAIT)
                .map_err(|e| fail("cannot configure", &e))?;
            Ok(conn)
        };
        let mut conn = waiting_connection()?;
        // Another gateway preparing the same database at once can make a step fail busy at
        // once, without SQLite's busy wait (the switch to WAL, a read that must become a
        // write): the preparation is tried again, as the busy wait would, about as long.
        let mut attempts = 0;
        let mut repaired = false;
        let (mode, fts) = loop {
            match prepare(&conn, synchronous) {
                Ok(prepared) => break prepared,
                Err((_, e)) if error::kind_of(&e) == ErrorKind::Busy && attempts < OPEN_RETRIES => {
                    attempts += 1;
                    std::thread::sleep(OPEN_RETRY_PAUSE);
                }
                // Hermes repairs a malformed schema once, then opens again.
                Err((what, e)) if repair::is_malformed(&e) && !repaired => {
                    repaired = true;
                    drop(conn);
                    let done =
                        repair::repair(path).map_err(|why| fail(what, &format!("{e}; {why}")))?;
                    crate::diag!(
                        "[gateway] warning: {} was malformed ({e}): {}; a copy of it as it was is {}",
                        path.display(),
                        done.strategy,
                        done.backup
                            .map_or("not needed".into(), |b| b.display().to_string())
                    );
                    conn = waiting_connection()?;
                }
                Err((what, e)) => return Err(fail(what, &e)),
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            crate::diag!(
                "[gateway] warning: {} stays in journal mode {mode}",
                path.display()
            );
        }
        // In place of SQLite's own checkpoint at commits: the loop checkpoints when the WAL's
        // backlog is worth it, between requests (`persist/`), the hook only as a backstop.
        let wal = wal::WalWatch::install(&mut conn).map_err(|e| fail("cannot configure", &e))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // Reads never wait (WAL readers are not blocked by a writer); writes wait only as
        // `wait_until` allows.
        conn.busy_timeout(Duration::ZERO)
            .map_err(|e| fail("cannot configure", &e))?;
        let (instance, owner) = instance_opened();
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            owner,
            instance,
            wait_until: None,
            fts,
            wal,
            faults: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fail or slow down the commits from now on as `hook` says (the simulator).
    #[doc(hidden)]
    pub fn set_faults(&mut self, hook: Option<faults::FaultHook>) {
        self.faults = hook;
    }

    /// How long the next writes may wait for another process's lock: until `deadline`
    /// (re-measured as each begins), or not at all.
    pub fn wait_until(&mut self, deadline: Option<Budget>) {
        self.wait_until = deadline;
    }

    /// Write these deltas in one transaction, all or nothing. A delta with a journal seq also
    /// records that this process's journal is folded up to it for that session, so a fold
    /// after a kill skips what this commit wrote.
    pub fn write(&mut self, deltas: &[(Delta<'_>, Option<u64>)]) -> Result<(), StoreError> {
        let name = self.journal_name();
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        for (d, seq) in deltas {
            delta::write_all_but_new(&tx, d, &self.owner, &self.fts)?;
            if let Some(seq) = seq {
                mark_folded(&tx, &name, &d.id, *seq)?;
            }
        }
        // Every session's new messages together: one FTS5 segment per commit, not per session.
        delta::insert_new(&tx, deltas.iter().map(|(d, _)| d))?;
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(())
    }

    /// This process's journal, as its marks in `tui_gateway_folded` name it.
    pub fn journal_name(&self) -> String {
        journal_name_of(&self.owner)
    }

    /// Who this process is in `tui_gateway_live`.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Fold one journal of `owner` (records: seq and delta, in any order) into the database,
    /// in one transaction: per session its latest record, unless a commit or an earlier fold
    /// already covered it. A record whose title another session took meanwhile is written
    /// without the title. Returns how many sessions it wrote.
    pub fn fold(&mut self, owner: &str, records: &[(u64, Delta<'_>)]) -> Result<usize, StoreError> {
        let name = journal_name_of(owner);
        let mut latest: std::collections::HashMap<&str, (u64, &Delta<'_>)> = Default::default();
        for (seq, d) in records {
            let e = latest.entry(d.id.as_ref()).or_insert((*seq, d));
            if *seq >= e.0 {
                *e = (*seq, d);
            }
        }
        let mut order: Vec<(u64, &Delta<'_>)> = latest.into_values().collect();
        order.sort_by_key(|(seq, _)| *seq);
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        let mut written = 0;
        for (seq, d) in order {
            let done: Option<i64> = tx
                .query_row(
                    "SELECT seq FROM tui_gateway_folded WHERE journal = ?1 AND session_id = ?2",
                    params![name, d.id],
                    |r| r.get(0),
                )
                .optional()?;
            if done.is_some_and(|done| done as u64 >= seq) {
                continue;
            }
            tx.execute_batch("SAVEPOINT fold_one")?;
            let first = delta::write(&tx, d, owner, &self.fts);
            if let Err(e) = first {
                tx.execute_batch("ROLLBACK TO fold_one")?;
                let e = StoreError::from(e);
                if e.kind != ErrorKind::Conflict {
                    return Err(e);
                }
                let mut untitled = d.clone();
                untitled.title = None;
                delta::write(&tx, &untitled, owner, &self.fts)?;
                crate::diag!(
                    "[gateway] folded session {} without its title (another session has it)",
                    d.id
                );
            }
            tx.execute_batch("RELEASE fold_one")?;
            recount(&tx, &d.id)?;
            mark_folded(&tx, &name, &d.id, seq)?;
            written += 1;
        }
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(written)
    }

    /// The journals fold marks are kept for.
    pub fn folded_journals(&self) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT journal FROM tui_gateway_folded")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Forget the fold marks of a journal (its gateway is gone and so is the file).
    pub fn forget_folds(&mut self, journal: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM tui_gateway_folded WHERE journal = ?1",
            [journal],
        )?;
        Ok(())
    }

    /// Write the partial text of streaming assistant messages, one transaction:
    /// `(stored session id, row written before, text, timestamp)` → the row of each.
    pub fn write_partials(
        &mut self,
        items: &[(&str, Option<i64>, &str, f64)],
    ) -> Result<Vec<i64>, StoreError> {
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        let mut rows = Vec::with_capacity(items.len());
        for (session_id, row, text, ts) in items {
            match row {
                Some(id) => {
                    tx.prepare_cached("UPDATE messages SET content = ?2 WHERE id = ?1")?
                        .execute(params![id, text])?;
                    self.fts.updated(&tx, *id)?;
                    rows.push(*id);
                }
                None => {
                    tx.prepare_cached(
                        "INSERT INTO messages (session_id, role, content, timestamp)
                         VALUES (?1, 'assistant', ?2, ?3)",
                    )?
                    .execute(params![session_id, text, ts])?;
                    rows.push(tx.last_insert_rowid());
                    // The row counts now: a kill before the final message leaves it there.
                    tx.prepare_cached(
                        "UPDATE sessions SET message_count = coalesce(message_count, 0) + 1
                         WHERE id = ?1",
                    )?
                    .execute([session_id])?;
                }
            }
        }
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(rows)
    }

    /// Sessions, most recent activity first, as `filter` narrows and pages them. Walks the
    /// recent-activity index and stops after the page: the cost grows with what it returns
    /// (and, with a filter, with the sessions it skips), not with the database.
    pub fn list(&self, filter: &ListFilter<'_>) -> Result<Vec<StoredSummary>, StoreError> {
        let mut stmt = self.conn.prepare_cached(LIST_SQL)?;
        let rows = stmt.query_map(
            params![
                filter.title,
                filter.source,
                filter.since,
                filter.limit as i64,
                filter.offset as i64
            ],
            |r| {
                Ok(StoredSummary {
                    id: r.get(0)?,
                    title: r.get(1)?,
                    started_at: r.get::<_, Option<f64>>(2)?.unwrap_or(0.0),
                    source: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
                    model: r.get(4)?,
                    ended_at: r.get(5)?,
                    end_reason: r.get(6)?,
                    message_count: r.get::<_, Option<i64>>(7)?.unwrap_or(0),
                    preview: r
                        .get::<_, Option<String>>(8)?
                        .map(|t| crate::util::clip(&t, 60))
                        .unwrap_or_default(),
                })
            },
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Full-text search over every stored message, through Hermes' `messages_fts` (see
    /// [`search`]). The newest messages are indexed first (up to [`SEARCH_CATCH_UP`] of them),
    /// unless another process holds the write lock: then the search sees what is indexed.
    pub fn search(&self, query: &SearchQuery<'_>) -> Result<Vec<SearchHit>, StoreError> {
        if self.fts.behind(&self.conn).unwrap_or(false)
            && let Ok(tx) = self.conn.unchecked_transaction()
        {
            self.fts.begun();
            if self.fts.step(&tx, SEARCH_CATCH_UP).is_ok() {
                let _ = commit(tx, &self.fts, self.faults.as_ref());
            }
        }
        search::run(&self.conn, query)
    }

    /// Index up to `batch` of the messages not in the full-text indexes yet (the flush
    /// tick's and the loop's steps): how many rows it looked at, fewer than `batch` when none
    /// is left.
    pub fn index_step(&mut self, batch: usize) -> Result<usize, StoreError> {
        if !self.fts.behind(&self.conn)? {
            return Ok(0);
        }
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        let rows = self.fts.step(&tx, batch)?;
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(rows)
    }

    /// Whether state.db has a full-text index for [`Store::merge_step`] to merge.
    pub fn has_full_text_index(&self) -> bool {
        self.fts.any()
    }

    /// Up to `pages` pages of the full-text indexes' merge work, in one transaction: whether
    /// there was any.
    pub fn merge_step(&mut self, pages: usize) -> Result<bool, StoreError> {
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        let worked = self.fts.merge(&tx, pages)?;
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(worked)
    }

    /// A session and its messages, by stored id or else by exact title.
    pub fn load(&self, id_or_title: &str) -> Result<Option<StoredSession>, StoreError> {
        let Some(mut s) = self.session_row(id_or_title)? else {
            return Ok(None);
        };
        s.messages = self.messages(&s.id)?;
        Ok(Some(s))
    }

    /// A session with only its newest `newest` messages, and where the rest starts (`older`):
    /// a resume reads what it shows, the rest follows in steps ([`Store::messages_before`]).
    pub fn load_newest(
        &self,
        id_or_title: &str,
        newest: usize,
    ) -> Result<Option<StoredSession>, StoreError> {
        let Some(mut s) = self.session_row(id_or_title)? else {
            return Ok(None);
        };
        let (messages, oldest) = self.messages_before(&s.id, i64::MAX, newest)?;
        if messages.len() == newest
            && let Some(before_row) = oldest
        {
            let stored: Option<i64> = self.conn.query_row(
                "SELECT message_count FROM sessions WHERE id = ?1",
                [&s.id],
                |r| r.get(0),
            )?;
            let stored = stored.unwrap_or(0).max(0) as usize;
            // The row's count, unless it cannot be true (rows written by something that did not
            // count them): then the rows are counted, which reads the session's index.
            let count = match stored.checked_sub(newest) {
                Some(older) if older > 0 => older,
                _ => self.conn.query_row(
                    "SELECT count(*) FROM messages WHERE session_id = ?1 AND id < ?2",
                    params![s.id, before_row],
                    |r| r.get::<_, i64>(0),
                )? as usize,
            };
            s.older = Some(OlderRows { before_row, count });
        }
        s.messages = messages;
        Ok(Some(s))
    }

    fn session_row(&self, id_or_title: &str) -> Result<Option<StoredSession>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, source, model, title, cwd, started_at, input_tokens, output_tokens,
                        tool_call_count, api_call_count, cache_read_tokens, cache_write_tokens,
                        reasoning_tokens, estimated_cost_usd, actual_cost_usd, cost_status,
                        cost_source, pricing_version
                 FROM sessions WHERE id = ?1 OR title = ?1
                 ORDER BY (id = ?1) DESC LIMIT 1",
                [id_or_title],
                |r| {
                    Ok(StoredSession {
                        id: r.get(0)?,
                        source: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                        model: r.get(2)?,
                        title: r.get(3)?,
                        cwd: r.get(4)?,
                        started_at: r.get::<_, Option<f64>>(5)?.unwrap_or(0.0),
                        input_tokens: r.get::<_, Option<i64>>(6)?.unwrap_or(0),
                        output_tokens: r.get::<_, Option<i64>>(7)?.unwrap_or(0),
                        tool_call_count: r.get::<_, Option<i64>>(8)?.unwrap_or(0),
                        api_call_count: r.get::<_, Option<i64>>(9)?.unwrap_or(0),
                        accounting: accounting_of(r, 10)?,
                        messages: Vec::new(),
                        older: None,
                    })
                },
            )
            .optional()?)
    }

    /// The messages of a stored session, in order.
    pub fn messages(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT role, content, tool_call_id, tool_calls, tool_name, timestamp, token_count,
                    finish_reason, reasoning, reasoning_details, codex_reasoning_items,
                    codex_message_items
             FROM messages WHERE session_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([session_id], message_of)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Up to `limit` messages of a session stored before row `before_row`, the newest ones, in
    /// order; and the row id of the first of them (`None`: there were none).
    pub fn messages_before(
        &self,
        session_id: &str,
        before_row: i64,
        limit: usize,
    ) -> Result<(Vec<Message>, Option<i64>), StoreError> {
        let (mut messages, oldest) = self.messages_where(
            "id < ?2 ORDER BY id DESC LIMIT ?3",
            params![session_id, before_row, limit.min(i64::MAX as usize) as i64],
        )?;
        messages.reverse();
        Ok((messages, oldest))
    }

    /// Up to `limit` messages of a session stored after row `after_row` and before row
    /// `before_row`, the oldest ones, in order; and the row id of the last of them.
    pub fn messages_between(
        &self,
        session_id: &str,
        (after_row, before_row): (i64, i64),
        limit: usize,
    ) -> Result<(Vec<Message>, Option<i64>), StoreError> {
        self.messages_where(
            "id > ?2 AND id < ?3 ORDER BY id LIMIT ?4",
            params![
                session_id,
                after_row,
                before_row,
                limit.min(i64::MAX as usize) as i64
            ],
        )
    }

    /// The messages of session `?1` that `condition` selects, as it orders them, and the row id
    /// of the last one.
    fn messages_where(
        &self,
        condition: &str,
        args: impl rusqlite::Params,
    ) -> Result<(Vec<Message>, Option<i64>), StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT role, content, tool_call_id, tool_calls, tool_name, timestamp, token_count,
                    finish_reason, reasoning, reasoning_details, codex_reasoning_items,
                    codex_message_items, id
             FROM messages WHERE session_id = ?1 AND {condition}"
        ))?;
        let mut last = None;
        let rows = stmt.query_map(args, |r| {
            last = Some(r.get::<_, i64>(12)?);
            message_of(r)
        })?;
        let messages = rows.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok((messages, last))
    }

    /// What the subagents below stored session `id` used, every level: rows of source
    /// `subagent` linked by `parent_session_id`, below it and below the sessions it continues
    /// (compaction's predecessors, as [`Store::compression_tip`] follows them). A resumed
    /// session's rolled-up figures, as its turns summed them before the restart.
    pub fn subagent_totals(&self, id: &str) -> Result<SubagentTotals, StoreError> {
        let mut q = self.conn.prepare_cached(
            "WITH RECURSIVE
               chain(id) AS (
                 SELECT ?1
                 UNION
                 SELECT p.id FROM chain c JOIN sessions s ON s.id = c.id
                   JOIN sessions p ON p.id = s.parent_session_id
                 WHERE p.end_reason = 'compression' AND s.started_at >= p.ended_at
               ),
               tree(id) AS (
                 SELECT s.id FROM chain c JOIN sessions s ON s.parent_session_id = c.id
                 WHERE s.source = 'subagent'
                 UNION
                 SELECT s.id FROM tree t JOIN sessions s ON s.parent_session_id = t.id
                 WHERE s.source = 'subagent'
               )
             SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
                    COALESCE(SUM(reasoning_tokens), 0), COALESCE(SUM(api_call_count), 0),
                    SUM(estimated_cost_usd)
             FROM sessions WHERE id IN (SELECT id FROM tree)",
        )?;
        let totals = q.query_row([id], |r| {
            let count = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
            Ok(SubagentTotals {
                count: count(0)?,
                input: count(1)?,
                output: count(2)?,
                reasoning: count(3)?,
                calls: count(4)?,
                cost_usd: r.get(5)?,
            })
        })?;
        Ok(totals)
    }

    /// The session a stored id or title continues in: compaction ends a session
    /// `compression` and starts its continuation (`parent_session_id`, started as the parent
    /// ended); follow that chain to its end. `None` when nothing has this id or title.
    pub fn compression_tip(&self, id_or_title: &str) -> Result<Option<String>, StoreError> {
        let Some(mut id) = self
            .conn
            .query_row(
                "SELECT id FROM sessions WHERE id = ?1 OR title = ?1
                 ORDER BY (id = ?1) DESC LIMIT 1",
                [id_or_title],
                |r| r.get::<_, String>(0),
            )
            .optional()?
        else {
            return Ok(None);
        };
        let mut next = self.conn.prepare_cached(
            "SELECT c.id FROM sessions p JOIN sessions c ON c.parent_session_id = p.id
             WHERE p.id = ?1 AND p.end_reason = 'compression' AND c.started_at >= p.ended_at
             ORDER BY c.started_at, c.id LIMIT 1",
        )?;
        // Bounded: a chain is one link per compaction.
        for _ in 0..1000 {
            match next
                .query_row([&id], |r| r.get::<_, String>(0))
                .optional()?
            {
                Some(child) if child != id => id = child,
                _ => break,
            }
        }
        Ok(Some(id))
    }

    /// Whether a session row with this id exists.
    pub fn session_exists(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT 1 FROM sessions WHERE id = ?1", [id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Whether a session other than `except_id` has the title `base`, and the highest `N` of
    /// the titles `base #N` they have: one range scan of the title index over just that
    /// family of titles (a title's ` #N` follows its base in the index; `$` follows `#`).
    pub fn title_family(
        &self,
        base: &str,
        except_id: &str,
    ) -> Result<(bool, Option<u64>), StoreError> {
        let suffix_at = base.chars().count() as i64 + 3;
        let (taken, highest): (Option<bool>, Option<i64>) = self
            .conn
            .prepare_cached(
                "SELECT max(title = ?1),
                        max(CASE WHEN substr(title, ?3) GLOB '[1-9]*'
                                  AND NOT substr(title, ?3) GLOB '*[^0-9]*'
                                  AND substr(title, 1, ?3 - 1) = ?1 || ' #'
                             THEN CAST(substr(title, ?3) AS INTEGER) END)
                 FROM sessions
                 WHERE title >= ?1 AND title < ?1 || ' $' AND id != ?2",
            )?
            .query_row(params![base, except_id, suffix_at], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        Ok((taken.unwrap_or(false), highest.map(|n| n.max(0) as u64)))
    }

    /// Delete a stored session; false when there was none. The session row goes at once
    /// (no reader, ours or Hermes', sees it after this), its children are unlinked from it as
    /// Hermes does, and its messages are left for [`Store::purge_step`] to remove a batch at a
    /// time. `journal_seq`: the latest record of it in this process's journal, which a later
    /// fold must skip.
    pub fn delete(&mut self, id: &str, journal_seq: Option<u64>) -> Result<bool, StoreError> {
        // The messages outlive their session row for a while, against the schema's foreign
        // key, which SQLite enforces per connection (ours does, the bundled build's default):
        // off for this one write (it cannot change inside a transaction).
        let enforced: bool = self
            .conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
        self.conn.execute_batch("PRAGMA foreign_keys = OFF")?;
        let deleted = self.delete_row(id, journal_seq);
        if enforced {
            self.conn.execute_batch("PRAGMA foreign_keys = ON")?;
        }
        deleted
    }

    fn delete_row(&mut self, id: &str, journal_seq: Option<u64>) -> Result<bool, StoreError> {
        let name = self.journal_name();
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        let n = tx.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
        tx.execute(
            "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?1",
            [id],
        )?;
        tx.execute(
            "DELETE FROM session_model_usage WHERE session_id = ?1",
            [id],
        )?;
        tx.execute("DELETE FROM tui_gateway_queue WHERE session_id = ?1", [id])?;
        tx.execute(
            "DELETE FROM tui_gateway_delegations WHERE session_id = ?1",
            [id],
        )?;
        tx.execute(
            "INSERT OR IGNORE INTO tui_gateway_purge (session_id)
             SELECT ?1 WHERE EXISTS (SELECT 1 FROM messages WHERE session_id = ?1)",
            [id],
        )?;
        if let Some(seq) = journal_seq {
            mark_folded(&tx, &name, id, seq)?;
        }
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(n > 0)
    }

    /// Whether some deleted session still has messages to remove.
    pub fn purge_pending(&self) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT EXISTS (SELECT 1 FROM tui_gateway_purge)", [], |r| {
                r.get(0)
            })?)
    }

    /// Remove up to `batch` messages of a deleted session (the oldest deletion first), in one
    /// transaction; the session's purge ends when none is left. What was done: `None` when
    /// no deleted session has messages left.
    pub fn purge_step(&mut self, batch: usize) -> Result<Option<Purged>, StoreError> {
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        let id: Option<String> = tx
            .prepare_cached("SELECT session_id FROM tui_gateway_purge ORDER BY rowid LIMIT 1")?
            .query_row([], |r| r.get(0))
            .optional()?;
        let Some(id) = id else {
            return Ok(None);
        };
        // Also where Hermes' triggers do the deletes on this connection.
        self.fts.hold(&tx)?;
        self.fts.forget(&tx, &id, fts::Selection::First(batch))?;
        let removed = tx
            .prepare_cached(
                "DELETE FROM messages WHERE id IN
                     (SELECT id FROM messages WHERE session_id = ?1 ORDER BY id LIMIT ?2)",
            )?
            .execute(params![id, batch as i64])?;
        let ended = removed < batch;
        if ended {
            tx.prepare_cached("DELETE FROM tui_gateway_purge WHERE session_id = ?1")?
                .execute([&id])?;
        }
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(Some(Purged { removed, ended }))
    }

    /// End the sessions a killed gateway left open (`gateway_killed`; they stay resumable) and
    /// give every tool call left without a result one saying its outcome is unknown. Looks only
    /// at the sessions `tui_gateway_live` holds open, never at the rest of the database.
    pub fn repair_killed(&mut self) -> Result<Repair, StoreError> {
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        let orphans: Vec<String> = {
            let mut stmt = tx.prepare("SELECT session_id, owner FROM tui_gateway_live")?;
            let rows =
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
            rows.filter_map(Result::ok)
                .filter(|(_, owner)| *owner != self.owner && !owner_alive(owner))
                .map(|(id, _)| id)
                .collect()
        };
        let mut repair = Repair::default();
        for id in &orphans {
            let one = repair_one(&tx, id)?;
            repair.sessions_ended += one.sessions_ended;
            repair.tool_results_added += one.tool_results_added;
            repair.queued_prompts_kept += one.queued_prompts_kept;
            repair.delegations_unknown += one.delegations_unknown;
        }
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(repair)
    }

    /// Who holds a stored session open, as `tui_gateway_live` records it.
    pub fn holder(&self, session_id: &str) -> Result<Holder, StoreError> {
        let owner: Option<String> = self
            .conn
            .prepare_cached("SELECT owner FROM tui_gateway_live WHERE session_id = ?1")?
            .query_row([session_id], |r| r.get(0))
            .optional()?;
        Ok(match owner {
            None => Holder::Nobody,
            Some(o) if o == self.owner => Holder::Me,
            Some(o) if owner_alive(&o) => Holder::Live(o),
            Some(o) => Holder::Dead(o),
        })
    }

    /// Repair one session a gateway that died while this one ran left open, as start-up
    /// repair would have (so it can be resumed).
    pub fn repair_abandoned(&mut self, session_id: &str) -> Result<Repair, StoreError> {
        let tx = begin(&mut self.conn, &mut self.fts, self.wait_until)?;
        let repair = repair_one(&tx, session_id)?;
        commit(tx, &self.fts, self.faults.as_ref())?;
        Ok(repair)
    }

    /// Copy the WAL into the database file so committed data survives power loss too.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let frames: Option<(i64, i64)> = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(1)?, r.get(2)?))
            })
            .optional()?;
        if let Some((in_wal, copied)) = frames {
            self.wal.checkpointed(in_wal, copied);
        }
        Ok(())
    }

    /// WAL frames our commits wrote that no checkpoint has copied yet (what the next one
    /// copies, at most).
    pub fn wal_backlog(&self) -> usize {
        self.wal.backlog()
    }
}

/// The name a journal of `owner` (`pid:start`) goes by in `tui_gateway_folded`.
impl Drop for Store {
    fn drop(&mut self) {
        instance_closed(self.instance);
    }
}

pub fn journal_name_of(owner: &str) -> String {
    owner.replacen(':', "-", 1)
}

/// The owner (`pid:start`) of a journal name.
pub fn journal_owner(name: &str) -> String {
    name.replacen('-', ":", 1)
}

fn mark_folded(
    tx: &rusqlite::Transaction<'_>,
    journal: &str,
    session_id: &str,
    seq: u64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO tui_gateway_folded (journal, session_id, seq) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![journal, session_id, seq as i64])?;
    Ok(())
}

/// One session a killed gateway left open: unknown results for its cut-off tool calls, its
/// queued prompts kept, its row ended and its counts made true, its ownership dropped.
fn repair_one(tx: &rusqlite::Transaction<'_>, id: &str) -> rusqlite::Result<Repair> {
    let tool_results_added = add_unknown_results(tx, id)?;
    let queued_prompts_kept = keep_queued_prompts(tx, id)?;
    let delegations_unknown = report_lost_delegations(tx, id)?;
    let sessions_ended = tx.execute(
        "UPDATE sessions SET end_reason = 'gateway_killed',
             ended_at = coalesce((SELECT max(timestamp) FROM messages WHERE session_id = ?1),
                                 started_at)
         WHERE id = ?1 AND ended_at IS NULL",
        [id],
    )?;
    // The rows the repair added (and any partial text written after the last commit) are activity.
    tx.execute(
        "UPDATE sessions SET last_activity_at = max(coalesce(last_activity_at, started_at),
             coalesce((SELECT max(timestamp) FROM messages WHERE session_id = ?1), 0))
         WHERE id = ?1",
        [id],
    )?;
    recount(tx, id)?;
    tx.execute("DELETE FROM tui_gateway_live WHERE session_id = ?1", [id])?;
    Ok(Repair {
        sessions_ended,
        tool_results_added,
        queued_prompts_kept,
        delegations_unknown,
    })
}

/// Make `sessions.message_count` say how many rows `messages` holds (Hermes' tools read it),
/// where no delta's count can be trusted: after a fold (a kill may have left a partial row
/// the journal never saw) and a repair. A commit's delta carries the count (`Delta`).
fn recount(tx: &rusqlite::Transaction<'_>, id: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE sessions SET message_count = (SELECT count(*) FROM messages WHERE session_id = ?1)
         WHERE id = ?1",
    )?
    .execute([id])?;
    Ok(())
}

/// Prompts a killed gateway had acknowledged as queued become user messages.
fn keep_queued_prompts(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
) -> rusqlite::Result<usize> {
    kept_as_user_messages(tx, session_id, "tui_gateway_queue", "text", "position")
}

/// The background delegations a killed gateway was running for the session: each one's
/// notice (their outcome is unknown) becomes a user message, as a delivered result would.
fn report_lost_delegations(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
) -> rusqlite::Result<usize> {
    kept_as_user_messages(tx, session_id, "tui_gateway_delegations", "notice", "rowid")
}

/// The session's texts a killed gateway kept in `table` (our own tables, named here) become
/// its user messages in `order`, and leave the table; how many.
fn kept_as_user_messages(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    table: &str,
    column: &str,
    order: &str,
) -> rusqlite::Result<usize> {
    let texts: Vec<String> = {
        let mut stmt = tx.prepare(&format!(
            "SELECT {column} FROM {table} WHERE session_id = ?1 ORDER BY {order}"
        ))?;
        let rows = stmt.query_map([session_id], |r| r.get::<_, String>(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let now = crate::util::unix_now();
    for text in &texts {
        tx.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?1, 'user', ?2, ?3)",
            params![session_id, text, now],
        )?;
    }
    tx.execute(
        &format!("DELETE FROM {table} WHERE session_id = ?1"),
        [session_id],
    )?;
    Ok(texts.len())
}

/// For each tool call of the session without a tool result, append a result saying so.
fn add_unknown_results(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
) -> rusqlite::Result<usize> {
    // (call id, tool name, when the call was made)
    let mut calls: Vec<(String, String, f64)> = Vec::new();
    {
        let mut stmt = tx.prepare(
            "SELECT tool_calls, timestamp FROM messages
             WHERE session_id = ?1 AND tool_calls IS NOT NULL ORDER BY id",
        )?;
        let rows = stmt.query_map([session_id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?))
        })?;
        for (text, at) in rows.filter_map(Result::ok) {
            let Ok(serde_json::Value::Array(list)) = serde_json::from_str(&text) else {
                continue;
            };
            for c in list {
                if let Some(id) = c["id"].as_str() {
                    let name = c["function"]["name"].as_str().unwrap_or("tool");
                    calls.push((id.to_string(), name.to_string(), at));
                }
            }
        }
    }
    let answered: Vec<String> = {
        let mut stmt = tx.prepare(
            "SELECT tool_call_id FROM messages WHERE session_id = ?1 AND tool_call_id IS NOT NULL",
        )?;
        let rows = stmt.query_map([session_id], |r| r.get::<_, String>(0))?;
        rows.filter_map(Result::ok).collect()
    };
    let mut added = 0;
    for (id, name, at) in calls.iter().filter(|(id, ..)| !answered.contains(id)) {
        let content = if name == "delegate_task" {
            cut_off_delegation(tx, session_id, *at)?
        } else {
            serde_json::json!({
                "output": "[outcome unknown: the gateway stopped while this command ran]",
                "exit_code": null,
                "error": "outcome unknown",
            })
        };
        tx.execute(
            "INSERT INTO messages (session_id, role, content, tool_call_id, tool_name, timestamp)
             VALUES (?1, 'tool', ?2, ?3, ?4, ?5)",
            params![
                session_id,
                content.to_string(),
                id,
                name,
                crate::util::unix_now()
            ],
        )?;
        added += 1;
    }
    Ok(added)
}

/// The result of a `delegate_task` call the gateway was killed in: each subagent it started
/// (rows of source `subagent` below the session, started since the call) cut off, its report
/// lost, its session keeping what it did — in the shape of Hermes' interrupted results.
fn cut_off_delegation(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    called_at: f64,
) -> rusqlite::Result<serde_json::Value> {
    let mut stmt = tx.prepare(
        "SELECT id FROM sessions WHERE parent_session_id = ?1 AND source = 'subagent'
           AND started_at >= ?2 ORDER BY started_at, id LIMIT 100",
    )?;
    let children: Vec<String> = stmt
        .query_map(params![session_id, called_at], |r| r.get(0))?
        .filter_map(Result::ok)
        .collect();
    let results: Vec<serde_json::Value> = children
        .iter()
        .enumerate()
        .map(|(i, child)| {
            serde_json::json!({
                "task_index": i,
                "status": "interrupted",
                "summary": null,
                "session_id": child,
                "error": "the gateway stopped while this subagent ran: it was cut off and its report is lost; its session keeps what it did",
            })
        })
        .collect();
    Ok(serde_json::json!({
        "results": results,
        "error": "outcome unknown",
        "output": format!(
            "[outcome unknown: the gateway stopped while the subagents ran; {} were cut off and their reports are lost]",
            children.len()
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_never_opens_state_db_through_a_link() {
        let dir =
            std::env::temp_dir().join(format!("tuigw-nofollow-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("elsewhere.db");
        drop(Connection::open(&target).unwrap());
        let link = dir.join("state.db");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(connect(&link).is_err(), "opened through a symlink");
        assert!(connect(&dir.join("plain.db")).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Gateways starting at once on one home (two TUIs, a relay and its daemon) each prepare
    /// the schema and the indexes: none of them fails on the other's write lock.
    #[test]
    fn stores_opened_at_once_on_a_fresh_database_all_open() {
        for round in 0..40 {
            let dir = std::env::temp_dir()
                .join(format!("tuigw-race-{}-{round}", crate::util::random_hex(8)));
            let path = dir.join("state.db");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
            let openers: Vec<_> = (0..4)
                .map(|_| {
                    let (path, barrier) = (path.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        Store::open(&path, "NORMAL").map(drop)
                    })
                })
                .collect();
            for opener in openers {
                let opened = opener.join().expect("no panic");
                assert!(opened.is_ok(), "round {round}: {opened:?}");
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// A resumed session's subagents, every level, counted once: its own children and theirs,
    /// and the children of the sessions it continues after a compaction; not a branch's parent's
    /// children, nor a child that is not a subagent.
    #[test]
    fn subagent_totals_count_every_level_below_a_session_and_its_compacted_past() {
        let dir = std::env::temp_dir().join(format!("tuigw-sub-{}", crate::util::random_hex(8)));
        let store = Store::open(&dir.join("state.db"), "NORMAL").unwrap();
        let row = |id: &str,
                   source: &str,
                   parent: Option<&str>,
                   times: (f64, Option<f64>),
                   end: Option<&str>,
                   tokens: i64,
                   cost: Option<f64>| {
            store
                .conn
                .execute(
                    "INSERT INTO sessions (id, source, parent_session_id, started_at, ended_at,
                       end_reason, input_tokens, output_tokens, reasoning_tokens, api_call_count,
                       estimated_cost_usd)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7 / 10, 1, 1, ?8)",
                    rusqlite::params![id, source, parent, times.0, times.1, end, tokens, cost],
                )
                .unwrap();
        };
        // `old` compacted into `tip` at t=10; a branch of `old` taken at t=5.
        row(
            "old",
            "tui",
            None,
            (0.0, Some(10.0)),
            Some("compression"),
            0,
            None,
        );
        row("tip", "tui", Some("old"), (10.0, None), None, 0, None);
        row("branch", "tui", Some("old"), (5.0, None), None, 0, None);
        row(
            "c-old",
            "subagent",
            Some("old"),
            (1.0, None),
            None,
            100,
            Some(0.5),
        );
        row(
            "c-tip",
            "subagent",
            Some("tip"),
            (11.0, None),
            None,
            1000,
            Some(1.0),
        );
        row(
            "grandchild",
            "subagent",
            Some("c-tip"),
            (12.0, None),
            None,
            10,
            None,
        );
        row(
            "c-branch",
            "subagent",
            Some("branch"),
            (6.0, None),
            None,
            7,
            Some(9.0),
        );
        row(
            "not-a-subagent",
            "tui",
            Some("tip"),
            (13.0, None),
            None,
            5,
            Some(9.0),
        );

        let tip = store.subagent_totals("tip").unwrap();
        assert_eq!(
            (tip.count, tip.input, tip.output, tip.reasoning, tip.calls),
            (3, 1110, 111, 3, 3)
        );
        assert_eq!(tip.cost_usd, Some(1.5));
        let branch = store.subagent_totals("branch").unwrap();
        assert_eq!((branch.count, branch.input), (1, 7));
        let none = store.subagent_totals("c-old").unwrap();
        assert_eq!(none, SubagentTotals::default());
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The plan SQLite chooses for `sql`, one line per step.
    fn plan(store: &Store, sql: &str) -> String {
        let mut stmt = store
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap();
        let nulls: Vec<Option<i64>> = vec![None; stmt.parameter_count()];
        let rows = stmt
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    /// The TUI's requests read through indexes and stop after their page: no step scans a
    /// table and none sorts, on our own database and on one with Hermes' indexes (whose
    /// `idx_messages_session` is `(session_id, timestamp)`).
    #[test]
    fn the_pickers_queries_walk_indexes_and_never_sort_or_scan() {
        for hermes in [false, true] {
            let dir = std::env::temp_dir().join(format!("tgw-plan-{}", crate::util::random_hex(8)));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("state.db");
            if hermes {
                let c = Connection::open(&path).unwrap();
                c.execute_batch(
                    "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL,
                         started_at REAL NOT NULL, title TEXT, parent_session_id TEXT);
                     CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
                         session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT,
                         timestamp REAL NOT NULL);
                     CREATE INDEX idx_messages_session ON messages(session_id, timestamp);
                     INSERT INTO messages (session_id, role, timestamp) VALUES ('x', 'user', 1);",
                )
                .unwrap();
            }
            let store = Store::open(&path, "NORMAL").unwrap();
            let messages = "SELECT role FROM messages WHERE session_id = ?1 ORDER BY id";
            let family = "SELECT max(title) FROM sessions WHERE title >= ?1 AND title < ?1 || ' $'";
            let recent = super::recall::recent_roots_sql();
            for sql in [LIST_SQL, messages, family, recent.as_str()] {
                let p = plan(&store, sql);
                let scans = p
                    .lines()
                    .any(|l| l.trim_start().starts_with("SCAN") && !l.contains("INDEX"));
                assert!(
                    !scans && !p.contains("TEMP B-TREE"),
                    "hermes schema {hermes}: {sql}\n{p}"
                );
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
