//! The reads behind the `session_search` tool, as Hermes' `hermes_state.py` answers them: a
//! session's row and lineage, a window of messages around one, a window with the session's
//! bookends, a session's head and tail, and the recent sessions. Each read is a few indexed
//! queries bounded by what it returns (`(session_id, id)` and the recent-activity index).

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;

/// Links followed from a session to the root of its lineage (one per compaction).
const LINEAGE_MAX: usize = 1000;

/// A stored message as `session_search` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRow {
    pub id: i64,
    pub role: String,
    pub content: Option<String>,
    pub timestamp: f64,
    pub tool_name: Option<String>,
    /// The stored JSON text of the calls.
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<String>,
}

/// A session's row, as `session_search` names it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionMeta {
    pub id: String,
    pub source: String,
    pub model: Option<String>,
    pub title: Option<String>,
    pub started_at: f64,
    pub last_active: f64,
    pub parent_session_id: Option<String>,
    pub message_count: i64,
    /// The first user message, cut to 60 characters.
    pub preview: String,
}

/// Messages around an anchor: `window` holds it and up to N each side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Around {
    pub window: Vec<StoredRow>,
    pub messages_before: usize,
    pub messages_after: usize,
}

/// [`Around`] kept to user and assistant messages (and the anchor), with the session's first
/// and last prose messages outside it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnchoredView {
    pub around: Around,
    pub bookend_start: Vec<StoredRow>,
    pub bookend_end: Vec<StoredRow>,
}

const ROW_COLUMNS: &str =
    "id, role, content, coalesce(timestamp, 0), tool_name, tool_calls, tool_call_id";

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRow> {
    Ok(StoredRow {
        id: r.get(0)?,
        role: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
        content: r.get(2)?,
        timestamp: r.get(3)?,
        tool_name: r.get(4)?,
        tool_calls: r.get(5)?,
        tool_call_id: r.get(6)?,
    })
}

fn rows(
    conn: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
) -> Result<Vec<StoredRow>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let found = stmt.query_map(args, row_of)?;
    Ok(found.collect::<rusqlite::Result<_>>()?)
}

const META_SQL: &str =
    "SELECT s.id, coalesce(s.source, ''), s.model, s.title, coalesce(s.started_at, 0),
        coalesce(s.last_activity_at, s.started_at, 0), s.parent_session_id,
        coalesce(s.message_count, 0),
        (SELECT substr(m.content, 1, 400) FROM messages m
         WHERE m.session_id = s.id AND m.role = 'user' ORDER BY m.id LIMIT 1)
     FROM sessions s";

fn meta_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionMeta> {
    Ok(SessionMeta {
        id: r.get(0)?,
        source: r.get(1)?,
        model: r.get(2)?,
        title: r.get(3)?,
        started_at: r.get(4)?,
        last_active: r.get(5)?,
        parent_session_id: r.get(6)?,
        message_count: r.get(7)?,
        preview: r
            .get::<_, Option<String>>(8)?
            .map(|t| crate::util::clip(&t, 60))
            .unwrap_or_default(),
    })
}

pub(super) fn session(conn: &Connection, id: &str) -> Result<Option<SessionMeta>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("{META_SQL} WHERE s.id = ?1"))?;
    Ok(stmt.query_row([id], meta_of).optional()?)
}

/// The first session of `id`'s `parent_session_id` chain (`id` itself when it has none or
/// is not stored).
pub(super) fn lineage_root(conn: &Connection, id: &str) -> Result<String, StoreError> {
    let mut parent = conn.prepare_cached("SELECT parent_session_id FROM sessions WHERE id = ?1")?;
    let mut seen = vec![id.to_string()];
    let mut at = id.to_string();
    while seen.len() < LINEAGE_MAX {
        let next: Option<String> = parent.query_row([&at], |r| r.get(0)).optional()?.flatten();
        match next {
            Some(p) if !p.is_empty() && !seen.contains(&p) => {
                seen.push(p.clone());
                at = p;
            }
            _ => break,
        }
    }
    Ok(at)
}

/// The newest session titled `title`, else its newest `title #N` continuation (Hermes'
/// `resolve_session_by_title`: a numbered continuation wins over the exact title).
pub(super) fn by_title(conn: &Connection, title: &str) -> Result<Option<String>, StoreError> {
    let numbered: Option<String> = conn
        .prepare_cached(
            "SELECT id FROM sessions WHERE title > ?1 || ' #' AND title < ?1 || ' $'
             ORDER BY started_at DESC LIMIT 1",
        )?
        .query_row([title], |r| r.get(0))
        .optional()?;
    if numbered.is_some() {
        return Ok(numbered);
    }
    Ok(conn
        .prepare_cached("SELECT id FROM sessions WHERE title = ?1 LIMIT 1")?
        .query_row([title], |r| r.get(0))
        .optional()?)
}

pub(super) fn around(
    conn: &Connection,
    session: &str,
    anchor: i64,
    window: usize,
) -> Result<Around, StoreError> {
    let exists = conn
        .prepare_cached("SELECT 1 FROM messages WHERE id = ?1 AND session_id = ?2")?
        .query_row(params![anchor, session], |_| Ok(()))
        .optional()?;
    if exists.is_none() {
        return Ok(Around::default());
    }
    let mut before = rows(
        conn,
        &format!(
            "SELECT {ROW_COLUMNS} FROM messages WHERE session_id = ?1 AND id <= ?2
             ORDER BY id DESC LIMIT ?3"
        ),
        params![session, anchor, window as i64 + 1],
    )?;
    let after = rows(
        conn,
        &format!(
            "SELECT {ROW_COLUMNS} FROM messages WHERE session_id = ?1 AND id > ?2
             ORDER BY id LIMIT ?3"
        ),
        params![session, anchor, window as i64],
    )?;
    before.reverse();
    let messages_before = before.len().saturating_sub(1);
    let messages_after = after.len();
    before.extend(after);
    Ok(Around {
        window: before,
        messages_before,
        messages_after,
    })
}

const PROSE: &str = "role IN ('user', 'assistant') AND length(content) > 0";

pub(super) fn anchored(
    conn: &Connection,
    session: &str,
    anchor: i64,
    window: usize,
    bookend: usize,
) -> Result<AnchoredView, StoreError> {
    let mut around = around(conn, session, anchor, window)?;
    let (Some(first), Some(last)) = (around.window.first(), around.window.last()) else {
        return Ok(AnchoredView::default());
    };
    let (first, last) = (first.id, last.id);
    around
        .window
        .retain(|m| m.id == anchor || m.role == "user" || m.role == "assistant");
    let bookend_start = rows(
        conn,
        &format!(
            "SELECT {ROW_COLUMNS} FROM messages WHERE session_id = ?1 AND id < ?2 AND {PROSE}
             ORDER BY id LIMIT ?3"
        ),
        params![session, first, bookend as i64],
    )?;
    let mut bookend_end = rows(
        conn,
        &format!(
            "SELECT {ROW_COLUMNS} FROM messages WHERE session_id = ?1 AND id > ?2 AND {PROSE}
             ORDER BY id DESC LIMIT ?3"
        ),
        params![session, last, bookend as i64],
    )?;
    bookend_end.reverse();
    Ok(AnchoredView {
        around,
        bookend_start,
        bookend_end,
    })
}

/// `(message count, the first `head` and the last `tail` messages)`; all of them when there
/// are no more than `head + tail`.
pub(super) fn head_and_tail(
    conn: &Connection,
    session: &str,
    head: usize,
    tail: usize,
) -> Result<(usize, Vec<StoredRow>), StoreError> {
    let count: i64 = conn
        .prepare_cached("SELECT count(*) FROM messages WHERE session_id = ?1")?
        .query_row([session], |r| r.get(0))?;
    let first =
        format!("SELECT {ROW_COLUMNS} FROM messages WHERE session_id = ?1 ORDER BY id LIMIT ?2");
    let mut out = rows(conn, &first, params![session, head as i64 + tail as i64])?;
    if count as usize > head + tail {
        out.truncate(head);
        let mut end = rows(
            conn,
            &format!(
                "SELECT {ROW_COLUMNS} FROM messages WHERE session_id = ?1 ORDER BY id DESC LIMIT ?2"
            ),
            params![session, tail as i64],
        )?;
        end.reverse();
        out.extend(end);
    }
    Ok((count as usize, out))
}

/// The recent roots, newest activity first. The parent test is an expression no index has,
/// so the walk is the recent-activity index's and stops after the page: with the parent index
/// the planner sorted every root session first, computing each one's preview (1.3 s at 50,000
/// sessions).
pub(super) fn recent_roots_sql() -> String {
    format!(
        "{META_SQL} WHERE coalesce(s.parent_session_id, '') = ''
         ORDER BY coalesce(s.last_activity_at, s.started_at) DESC, s.started_at DESC"
    )
}

/// Sessions by most recent activity, up to `limit`, skipping `sources` and any session with a
/// parent (a continuation or a delegate).
pub(super) fn recent_roots(
    conn: &Connection,
    limit: usize,
    hidden_sources: &[&str],
) -> Result<Vec<SessionMeta>, StoreError> {
    let mut stmt = conn.prepare_cached(&recent_roots_sql())?;
    let mut out = Vec::new();
    let mut found = stmt.query([])?;
    while let Some(r) = found.next()? {
        let meta = meta_of(r)?;
        if !hidden_sources.contains(&meta.source.as_str()) {
            out.push(meta);
        }
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

impl super::Store {
    /// A stored session's row.
    pub fn session_meta(&self, id: &str) -> Result<Option<SessionMeta>, StoreError> {
        session(&self.conn, id)
    }

    /// The root of a session's `parent_session_id` chain.
    pub fn lineage_root(&self, id: &str) -> Result<String, StoreError> {
        lineage_root(&self.conn, id)
    }

    /// The session a remembered title names (see [`by_title`]).
    pub fn session_by_title(&self, title: &str) -> Result<Option<String>, StoreError> {
        by_title(&self.conn, title)
    }

    /// Up to `window` messages each side of message `anchor` of `session` (empty when the
    /// anchor is not one of its messages).
    pub fn messages_around(
        &self,
        session: &str,
        anchor: i64,
        window: usize,
    ) -> Result<Around, StoreError> {
        around(&self.conn, session, anchor, window)
    }

    /// [`Store::messages_around`] kept to prose, with `bookend` messages of the session's
    /// start and end outside the window.
    pub fn anchored_view(
        &self,
        session: &str,
        anchor: i64,
        window: usize,
        bookend: usize,
    ) -> Result<AnchoredView, StoreError> {
        anchored(&self.conn, session, anchor, window, bookend)
    }

    /// A session's message count and its first `head` and last `tail` messages.
    pub fn head_and_tail(
        &self,
        session: &str,
        head: usize,
        tail: usize,
    ) -> Result<(usize, Vec<StoredRow>), StoreError> {
        head_and_tail(&self.conn, session, head, tail)
    }

    /// The most recently active sessions without a parent, other sources than `hidden`.
    pub fn recent_roots(
        &self,
        limit: usize,
        hidden: &[&str],
    ) -> Result<Vec<SessionMeta>, StoreError> {
        recent_roots(&self.conn, limit, hidden)
    }
}

/// The session message `id` belongs to.
pub(super) fn owner_of(conn: &Connection, id: i64) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT session_id FROM messages WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

impl super::Store {
    /// The session a message belongs to.
    pub fn message_owner(&self, id: i64) -> Result<Option<String>, StoreError> {
        owner_of(&self.conn, id)
    }
}
