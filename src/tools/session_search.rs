//! Hermes' `session_search {query?, limit?, sort?, session_id?, around_message_id?, window?,
//! role_filter?, profile?}` over `state.db`, in Hermes' four shapes, chosen by the arguments:
//! discovery (`query`: full-text search through [`Store::search`], one result per lineage with
//! the match in its window and the session's bookends), scroll (`session_id` +
//! `around_message_id`), read (`session_id`: a session's head and tail) and browse (nothing:
//! the recent sessions). The calling session's lineage is left out, as Hermes leaves it out:
//! its messages are in the model's context already. Other profiles' databases are not read.
//! A discovery runs in steps within the loop's budget ([`Discovery`]); the other shapes are a
//! few bounded reads and answer at their start.

use serde_json::{Map, Value, json};

use super::files::int_arg;
use super::stepped::{Advance, Stepped};
use super::{JobId, Start, Tool, ToolContext, ToolResult};
use crate::clock::Budget;
use crate::store::{SearchHit, SearchQuery, SessionMeta, Store, StoreError, StoredRow};

/// Sources left out of searches and lists (delegates and third-party tools).
const HIDDEN_SOURCES: [&str; 2] = ["subagent", "tool"];
/// Sources ranked below interactive sessions.
const DEMOTED_SOURCES: [&str; 1] = ["cron"];
/// Messages each side of a match; prose messages at each end of its session.
const MATCH_WINDOW: usize = 5;
const BOOKEND: usize = 3;
/// A read shows the head and tail of a longer session.
const READ_HEAD: usize = 20;
const READ_TAIL: usize = 10;

/// The tool: its discovery calls still going on, by job. A discovery is a full-text search
/// and then a few reads per session found (up to `3 × limit + 5` candidates); on a big
/// state.db that is more than one step's budget, so it goes in steps ([`Discovery`]).
pub struct SessionSearch {
    going: Stepped<Discovery>,
}

impl Default for SessionSearch {
    fn default() -> Self {
        SessionSearch {
            going: Stepped::failing_with(ToolResult::unsuccessful),
        }
    }
}

const NO_STORE: &str = "the session database is not available";

/// A Hermes integer argument: a number or a numeral, else `default`.
fn int_or(args: &Value, key: &str, default: i64) -> i64 {
    int_arg(args, key).unwrap_or(default)
}

fn text_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Hermes' `%B %d, %Y at %I:%M %p` of a Unix time (UTC here; Hermes uses local time).
pub fn when(unix: f64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let (y, mo, d, h, mi, _) = crate::util::utc_parts(unix);
    let (hour, half) = match h {
        0 => (12, "AM"),
        1..=11 => (h, "AM"),
        12 => (12, "PM"),
        _ => (h - 12, "PM"),
    };
    format!(
        "{} {d:02}, {y} at {hour:02}:{mi:02} {half}",
        MONTHS[(mo as usize).clamp(1, 12) - 1]
    )
}

/// Hermes' `_shape_message`: the row's fields that are set (content always), the anchor
/// flagged.
fn shape(m: &StoredRow, anchor: Option<i64>) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), json!(m.id));
    o.insert("role".into(), json!(m.role));
    o.insert("content".into(), json!(m.content));
    o.insert("timestamp".into(), json!(m.timestamp));
    if let Some(name) = m.tool_name.as_deref().filter(|n| !n.is_empty()) {
        o.insert("tool_name".into(), json!(name));
    }
    let calls = m
        .tool_calls
        .as_deref()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .filter(|v| v.as_array().is_none_or(|a| !a.is_empty()) && !v.is_null());
    if let Some(calls) = calls {
        o.insert("tool_calls".into(), calls);
    }
    if let Some(id) = m.tool_call_id.as_deref().filter(|i| !i.is_empty()) {
        o.insert("tool_call_id".into(), json!(id));
    }
    if anchor == Some(m.id) {
        o.insert("anchor".into(), json!(true));
    }
    Value::Object(o)
}

fn shaped(rows: &[StoredRow], anchor: Option<i64>) -> Vec<Value> {
    rows.iter().map(|m| shape(m, anchor)).collect()
}

fn meta_json(meta: &SessionMeta) -> Value {
    json!({"when": when(meta.started_at), "source": meta.source, "model": meta.model,
           "title": meta.title})
}

/// The root of the calling session's lineage (`None` outside a session).
fn current_root(store: &Store, current: &str) -> Result<Option<String>, StoreError> {
    if current.is_empty() {
        return Ok(None);
    }
    store.lineage_root(current).map(Some)
}

impl Tool for SessionSearch {
    fn name(&self) -> &str {
        "session_search"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to find. Omit to list recent sessions."},
                "limit": {"type": "integer", "description": "How many sessions, 1 to 10.", "default": 3},
                "sort": {"type": "string", "enum": ["newest", "oldest"], "description": "Favour recent or early sessions; omit for relevance alone."},
                "session_id": {"type": "string", "description": "The session to read or scroll through."},
                "around_message_id": {"type": "integer", "description": "With session_id: the message to centre on."},
                "window": {"type": "integer", "description": "Messages on each side of it, 1 to 20.", "default": 5},
                "role_filter": {"type": "string", "description": "Comma-separated roles to search (default 'user,assistant'; add 'tool' for tool output)."},
                "profile": {"type": "string", "description": "Another Hermes profile to read (read-only)."}
            },
            "required": []
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let Some(store) = ctx.store else {
            return Start::Done(ToolResult::unsuccessful(NO_STORE));
        };
        match begin(store, ctx.session, args) {
            Begun::Done(result) => Start::Done(result),
            Begun::Discovery(d) => self.going.start(ctx, d),
        }
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        self.going.step(ctx, NO_STORE)
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        self.going.cancel(job)
    }
}

impl Advance for Discovery {
    fn advance(&mut self, ctx: &ToolContext<'_>) -> Option<ToolResult> {
        match ctx.store {
            Some(store) => self.advance_until(store, &ctx.budget),
            None => Some(ToolResult::unsuccessful(NO_STORE)),
        }
    }
}

/// A call's answer now, or the discovery that goes on in steps.
enum Begun {
    Done(ToolResult),
    Discovery(Discovery),
}

/// One call against `store` from the session stored as `current`, to its end (every step of
/// a discovery at once: for `sessions`-style callers off the loop and the bench).
pub fn call(store: &Store, current: &str, args: &Value) -> ToolResult {
    match begin(store, current, args) {
        Begun::Done(result) => result,
        Begun::Discovery(mut d) => loop {
            if let Some(result) = d.advance_until(store, &Budget::unlimited()) {
                break result;
            }
        },
    }
}

fn begin(store: &Store, current: &str, args: &Value) -> Begun {
    if let Some(profile) = text_arg(args, "profile") {
        return Begun::Done(ToolResult::unsuccessful(format!(
            "profile '{profile}': this gateway reads only its own state.db"
        )));
    }
    // An `@session:<profile>/<id>` link's value: the id is what follows the slash.
    let session_id = text_arg(args, "session_id").map(|s| match s.split_once('/') {
        Some((_, id)) if !id.is_empty() => id,
        _ => s,
    });
    let answered = match (session_id, args.get("around_message_id")) {
        (Some(sid), Some(anchor)) if !anchor.is_null() => scroll(store, current, sid, args),
        (Some(sid), _) => read(store, sid),
        (None, _) => {
            let limit = int_or(args, "limit", 3).clamp(1, 10) as usize;
            match text_arg(args, "query") {
                None => browse(store, current, limit),
                Some(query) => {
                    return Begun::Discovery(Discovery::new(current, query, limit, args));
                }
            }
        }
    };
    Begun::Done(answered.unwrap_or_else(failed))
}

fn failed(e: StoreError) -> ToolResult {
    ToolResult::unsuccessful(format!("Search failed: {e}"))
}

fn scroll(
    store: &Store,
    current: &str,
    session_id: &str,
    args: &Value,
) -> Result<ToolResult, StoreError> {
    let Some(anchor) = int_arg(args, "around_message_id") else {
        return Ok(ToolResult::unsuccessful(
            "scroll requires integer around_message_id",
        ));
    };
    let window = int_or(args, "window", 5).clamp(1, 20) as usize;
    let root = store.lineage_root(session_id)?;
    if current_root(store, current)?.is_some_and(|c| c == root) {
        return Ok(ToolResult::unsuccessful(
            "scroll rejected: anchor lives in the current session lineage (already in your active context)",
        ));
    }
    let Some(mut meta) = store.session_meta(session_id)? else {
        return Ok(ToolResult::unsuccessful(format!(
            "session_id not found: {session_id}"
        )));
    };
    let mut session_id = session_id.to_string();
    let mut view = store.messages_around(&session_id, anchor, window)?;
    let mut warning = None;
    // The anchor may live in a continuation of the named session: rebind to it.
    if view.window.is_empty()
        && let Some(owner) = store.message_owner(anchor)?
        && owner != session_id
        && store.lineage_root(&owner)? == root
    {
        view = store.messages_around(&owner, anchor, window)?;
        if !view.window.is_empty() {
            warning = Some(format!(
                "around_message_id {anchor} lives in {owner} (child of {session_id}); rebound transparently"
            ));
            meta = store.session_meta(&owner)?.unwrap_or(meta);
            session_id = owner;
        }
    }
    if view.window.is_empty() {
        return Ok(ToolResult::unsuccessful(format!(
            "around_message_id {anchor} not in session_id {session_id}"
        )));
    }
    let mut content = json!({
        "success": true, "mode": "scroll", "session_id": session_id,
        "around_message_id": anchor, "session_meta": meta_json(&meta), "window": window,
        "messages": shaped(&view.window, Some(anchor)),
        "messages_before": view.messages_before, "messages_after": view.messages_after,
    });
    if let Some(w) = warning {
        content["warning"] = json!(w);
    }
    let line = format!("{} message(s) of {session_id}", view.window.len());
    Ok(ToolResult::new(content, line))
}

fn read(store: &Store, session_id: &str) -> Result<ToolResult, StoreError> {
    let Some(meta) = store.session_meta(session_id)? else {
        return Ok(ToolResult::unsuccessful(format!(
            "session_id not found: {session_id}"
        )));
    };
    let (total, rows) = store.head_and_tail(session_id, READ_HEAD, READ_TAIL)?;
    let truncated = total > READ_HEAD + READ_TAIL;
    let mut content = json!({
        "success": true, "mode": "read", "session_id": session_id,
        "session_meta": meta_json(&meta), "message_count": total, "truncated": truncated,
        "messages": shaped(&rows, None),
    });
    if truncated {
        content["message"] = json!(format!(
            "Session has {total} messages; showing first {READ_HEAD} + last {READ_TAIL}. \
             Pass around_message_id (any id above) to scroll the middle."
        ));
    }
    Ok(ToolResult::new(content, format!("{total} message(s)")))
}

fn browse(store: &Store, current: &str, limit: usize) -> Result<ToolResult, StoreError> {
    let root = current_root(store, current)?;
    let recent = store.recent_roots(limit + 5, &HIDDEN_SOURCES)?;
    let results: Vec<Value> = recent
        .iter()
        .filter(|s| root.as_deref() != Some(s.id.as_str()) && s.id != current)
        .take(limit)
        .map(|s| {
            json!({"session_id": s.id, "title": s.title, "source": s.source,
                   "started_at": s.started_at, "last_active": s.last_active,
                   "message_count": s.message_count, "preview": s.preview})
        })
        .collect();
    let n = results.len();
    let content = json!({
        "success": true, "mode": "browse", "results": results, "count": n,
        "message": format!("Showing {n} most recent sessions. Pass a query= to search, or session_id+around_message_id to scroll."),
    });
    Ok(ToolResult::new(content, format!("{n} recent session(s)")))
}

/// Hermes' title match: a query naming a session's title finds it first.
fn title_match(
    store: &Store,
    query: &str,
    current_root: Option<&str>,
) -> Result<Option<(String, Value)>, StoreError> {
    let title = query.trim().trim_matches(['`', '\'', '"']);
    if title.is_empty() {
        return Ok(None);
    }
    let Some(sid) = store.session_by_title(title)? else {
        return Ok(None);
    };
    let root = store.lineage_root(&sid)?;
    if current_root == Some(root.as_str()) {
        return Ok(None);
    }
    let meta = match store.session_meta(&root)? {
        Some(m) => Some(m),
        None => store.session_meta(&sid)?,
    }
    .unwrap_or_default();
    if HIDDEN_SOURCES.contains(&meta.source.as_str()) {
        return Ok(None);
    }
    let (total, ends) = store.head_and_tail(&sid, BOOKEND, BOOKEND)?;
    let first = ends.first().map(|m| m.id);
    let view = match first {
        Some(id) => store.anchored_view(&sid, id, MATCH_WINDOW, BOOKEND)?,
        None => Default::default(),
    };
    // As Hermes' `or`: an empty slice of the view falls back to the session's ends.
    let or_ends = |slice: &[StoredRow], ends: &[StoredRow]| {
        if slice.is_empty() {
            shaped(ends, None)
        } else {
            shaped(slice, None)
        }
    };
    let head = &ends[..ends.len().min(BOOKEND)];
    let tail = &ends[ends.len().saturating_sub(BOOKEND)..];
    let title = meta.title.clone().unwrap_or_else(|| title.to_string());
    let mut entry = json!({
        "session_id": sid, "when": when(meta.started_at),
        "source": if meta.source.is_empty() { "unknown" } else { meta.source.as_str() },
        "model": meta.model.as_deref().unwrap_or("unknown"), "title": title,
        "matched_role": "session_title", "match_message_id": first,
        "snippet": format!("Session title matched: {title}"),
        "bookend_start": or_ends(&view.bookend_start, head),
        "messages": shaped(&view.around.window, first),
        "bookend_end": or_ends(&view.bookend_end, tail),
        "messages_before": view.around.messages_before,
        "messages_after": if first.is_some() { view.around.messages_after } else { total.saturating_sub(5) },
    });
    if root != sid {
        entry["parent_session_id"] = json!(root);
    }
    Ok(Some((root, entry)))
}

/// Hermes' discovery shape, a unit of work at a time: the caller's lineage and the title
/// match, then the full-text search (always at the start of a step: it is the one read whose
/// cost grows with how common the words are), then one candidate session per unit.
struct Discovery {
    current: String,
    query: String,
    limit: usize,
    roles: Vec<String>,
    sort: Option<String>,
    stage: Stage,
}

enum Stage {
    Title,
    Search {
        current_root: Option<String>,
        title: Option<(String, Value)>,
    },
    Hits {
        current_root: Option<String>,
        hits: std::vec::IntoIter<SearchHit>,
        roots: Vec<String>,
        results: Vec<Value>,
    },
    Over,
}

/// What one unit of a discovery did.
enum Unit {
    Next,
    Answer(ToolResult),
}

impl Discovery {
    fn new(current: &str, query: &str, limit: usize, args: &Value) -> Discovery {
        let roles = match text_arg(args, "role_filter") {
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_string)
                .collect(),
            None => vec!["user".to_string(), "assistant".to_string()],
        };
        Discovery {
            current: current.to_string(),
            query: query.to_string(),
            limit,
            roles,
            sort: args
                .get("sort")
                .and_then(Value::as_str)
                .map(|s| s.trim().to_ascii_lowercase()),
            stage: Stage::Title,
        }
    }

    /// Work within `budget` (at least one unit): the answer once it is complete.
    fn advance_until(&mut self, store: &Store, budget: &Budget) -> Option<ToolResult> {
        let mut units = 0;
        loop {
            if units > 0 && (budget.spent() || matches!(self.stage, Stage::Search { .. })) {
                return None;
            }
            units += 1;
            match self.unit(store) {
                Ok(Unit::Next) => {}
                Ok(Unit::Answer(result)) => return Some(result),
                Err(e) => {
                    self.stage = Stage::Over;
                    return Some(failed(e));
                }
            }
        }
    }

    fn unit(&mut self, store: &Store) -> Result<Unit, StoreError> {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Title => {
                let current_root = current_root(store, &self.current)?;
                let title = title_match(store, &self.query, current_root.as_deref())?;
                self.stage = Stage::Search {
                    current_root,
                    title,
                };
                Ok(Unit::Next)
            }
            Stage::Search {
                current_root,
                title,
            } => {
                let roles: Vec<&str> = self.roles.iter().map(String::as_str).collect();
                // More sessions than asked for: some are the caller's lineage, hidden, or
                // share a root.
                let mut hits: Vec<SearchHit> = store.search(&SearchQuery {
                    text: &self.query,
                    limit: self.limit * 3 + 5,
                    source: None,
                    roles: &roles,
                })?;
                match self.sort.as_deref() {
                    Some("newest") => hits.sort_by(|a, b| b.message_at.total_cmp(&a.message_at)),
                    Some("oldest") => hits.sort_by(|a, b| a.message_at.total_cmp(&b.message_at)),
                    _ => {}
                }
                hits.retain(|h| !HIDDEN_SOURCES.contains(&h.source.as_str()));
                // Interactive sessions first, each class in its order (a stable sort).
                hits.sort_by_key(|h| DEMOTED_SOURCES.contains(&h.source.as_str()));
                if hits.is_empty() && title.is_none() {
                    let content = json!({"success": true, "mode": "discover", "query": self.query,
                        "results": [], "count": 0, "message": "No matching sessions found."});
                    return Ok(Unit::Answer(ToolResult::new(
                        content,
                        "no matching sessions",
                    )));
                }
                let (mut roots, mut results) = (Vec::new(), Vec::new());
                if let Some((root, entry)) = title {
                    roots.push(root);
                    results.push(entry);
                }
                self.stage = Stage::Hits {
                    current_root,
                    hits: hits.into_iter(),
                    roots,
                    results,
                };
                Ok(Unit::Next)
            }
            Stage::Hits {
                current_root,
                mut hits,
                mut roots,
                mut results,
            } => {
                let next = if roots.len() < self.limit {
                    hits.next()
                } else {
                    None
                };
                let Some(hit) = next else {
                    let n = results.len();
                    let content = json!({"success": true, "mode": "discover", "query": self.query,
                        "results": results, "count": n, "sessions_searched": roots.len()});
                    return Ok(Unit::Answer(ToolResult::new(
                        content,
                        format!("{n} session(s) found"),
                    )));
                };
                let root = store.lineage_root(&hit.session_id)?;
                if current_root.as_deref() != Some(root.as_str())
                    && hit.session_id != self.current
                    && !roots.contains(&root)
                {
                    results.push(hit_entry(store, &hit, &root)?);
                    roots.push(root);
                }
                self.stage = Stage::Hits {
                    current_root,
                    hits,
                    roots,
                    results,
                };
                Ok(Unit::Next)
            }
            Stage::Over => Ok(Unit::Answer(ToolResult::unsuccessful("Search failed"))),
        }
    }
}

/// One found session as Hermes shows it: the match in its window, the session's bookends.
fn hit_entry(store: &Store, hit: &SearchHit, root: &str) -> Result<Value, StoreError> {
    let view = store.anchored_view(&hit.session_id, hit.message_id, MATCH_WINDOW, BOOKEND)?;
    let meta = store.session_meta(root)?.unwrap_or_default();
    let source = [meta.source.as_str(), hit.source.as_str()]
        .into_iter()
        .find(|s| !s.is_empty())
        .unwrap_or("unknown");
    let started = if meta.started_at > 0.0 {
        meta.started_at
    } else {
        hit.started_at
    };
    let mut entry = json!({
        "session_id": hit.session_id, "when": when(started), "source": source,
        "model": meta.model.as_deref().unwrap_or("unknown"),
        "title": meta.title.clone().or_else(|| hit.title.clone()),
        "matched_role": hit.role, "match_message_id": hit.message_id,
        "snippet": hit.snippet_marked(">>>", "<<<"),
        "bookend_start": shaped(&view.bookend_start, None),
        "messages": shaped(&view.around.window, Some(hit.message_id)),
        "bookend_end": shaped(&view.bookend_end, None),
        "messages_before": view.around.messages_before,
        "messages_after": view.around.messages_after,
    });
    if root != hit.session_id {
        entry["parent_session_id"] = json!(root);
    }
    Ok(entry)
}

const DESCRIPTION: &str = "Look through past conversations kept in this Hermes home: a full-text search over the stored messages that returns the messages themselves.

Four ways to call it:
- `query`: the sessions whose messages match, best first. Each comes with session_id, title, when, source, a snippet, match_message_id, the messages around the match (the match flagged) and the session's opening and closing exchanges.
- `session_id` + `around_message_id`: the messages around that id. To read on, pass the last id you got; to read back, the first.
- `session_id` alone: the whole session (its first 20 and last 10 messages when long). For an `@session:PROFILE/ID` link, pass `profile` and the id.
- nothing: the recent sessions, newest first.

Every word of a query must match; \"a phrase\" in quotes matches exactly, `word*` a prefix; OR and NOT count as plain words, so look for alternatives one call each.

This records what was said, not how things are now: when the user names a file, URL, contact or system, look at it first, and never decide something does not exist because this found nothing.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::bare_session;
    use crate::transcript::{Message, Role};

    /// A store of `n` sessions, each with a user message naming quokkas and an answer.
    fn store_with(n: usize) -> (std::path::PathBuf, Store) {
        let dir = std::env::temp_dir().join(format!("tgw-recall-{}", crate::util::random_hex(8)));
        let mut store = Store::open(&dir.join("state.db"), "NORMAL").unwrap();
        for i in 0..n {
            let mut s = bare_session(&format!("r{i}"), &format!("s{i:03}"));
            let at = 1_700_000_000.0 + i as f64;
            s.append(Message::new(
                Role::User,
                Some(format!("about quokkas, number {i}")),
                at,
            ));
            s.append(Message::new(
                Role::Assistant,
                Some("noted".into()),
                at + 0.5,
            ));
            store.write(&[(s.delta(), None)]).unwrap();
        }
        (dir, store)
    }

    /// A discovery steps one unit at a time when its budget is spent and gives the answer the
    /// whole call gives; with budget to spare the search still starts a step of its own.
    #[test]
    fn a_discovery_goes_in_steps_and_answers_as_the_whole_call() {
        let (dir, store) = store_with(12);
        let args = json!({"query": "quokkas", "limit": 10});
        let whole = call(&store, "", &args);
        assert_eq!(whole.content["count"], 10, "{}", whole.content);
        let budget_of = |length| {
            let clock = crate::clock::Clock::SYSTEM;
            Budget::of(clock, clock.now(), length)
        };
        let steps_with = |budget: std::time::Duration| {
            let Begun::Discovery(mut d) = begin(&store, "", &args) else {
                panic!("not a discovery");
            };
            let mut steps = 1;
            loop {
                if let Some(r) = d.advance_until(&store, &budget_of(budget)) {
                    return (steps, r);
                }
                steps += 1;
            }
        };
        let (steps, stepped) = steps_with(std::time::Duration::ZERO);
        assert_eq!(stepped.content, whole.content);
        // The title match, the search, the 10 sessions found, the answer.
        assert_eq!(steps, 13);
        let (steps, roomy) = steps_with(std::time::Duration::from_secs(60));
        assert_eq!(roomy.content, whole.content);
        assert_eq!(steps, 2, "the search begins its own step");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
