//! Session calls: create, resume, list, history, title, usage, close, delete, events.

use std::time::Instant;

use serde_json::{Value, json};

use super::params::{self, Params};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::code;
use crate::session::{NewSession, Persisted, Session};
use crate::session::{older, transcript};
use crate::store::{Holder, ListFilter, StoreError, StoredSession};
use crate::util;

/// What a resume shows of a long transcript (its newest rows) and a history page at most: one
/// answer's work and size grow with what it shows, never with the session.
const SHOWN: transcript::Page = transcript::Page {
    rows: 500,
    bytes: 2 << 20,
};

/// The live session a call names by runtime id (4006 missing, 4001 unknown).
pub fn live<'a>(gw: &'a mut Gateway, p: &Params) -> Result<&'a mut Session, RpcError> {
    let rid = params::req_id(p, "session_id")?;
    gw.sessions
        .get_mut(rid)
        .ok_or_else(RpcError::session_not_found)
}

/// [`live`], with the older messages a resume left in state.db read first (`session/older.rs`):
/// for calls that read or change the whole transcript.
pub fn whole_live<'a>(
    gw: &'a mut Gateway,
    p: &Params,
    now: Instant,
) -> Result<&'a mut Session, RpcError> {
    let rid = live(gw, p)?.runtime_id.clone();
    older::whole(gw, &rid, now).map_err(unreadable)?;
    live(gw, p)
}

/// The display rows of a live session before message `before` (counted in the whole
/// transcript) as far as `page` allows, and the index of the first one shown; older messages
/// still in state.db are read first when the page reaches into them.
fn page(
    gw: &mut Gateway,
    rid: &str,
    before: usize,
    page: transcript::Page,
    now: Instant,
) -> Result<(Vec<Value>, usize), RpcError> {
    loop {
        let s = &gw.sessions[rid];
        let older = s.older.as_ref().map_or(0, older::Older::count);
        if let Some(local) = before.checked_sub(older) {
            let (rows, first) = transcript::display_tail(&s.transcript, local, page);
            // Stopped short of the tail's start: the page is whole.
            if older == 0 || first > 0 {
                return Ok((rows, first + older));
            }
        }
        older::whole(gw, rid, now).map_err(unreadable)?;
    }
}

pub(crate) fn new_runtime_id(gw: &Gateway) -> String {
    loop {
        let id = util::random_hex(8);
        if !gw.sessions.contains_key(&id) {
            return id;
        }
    }
}

/// A stored id no live, closing or stored session has.
pub(crate) fn new_stored_id(gw: &Gateway, started_at: f64) -> String {
    crate::session::naming::new_stored_id(&gw.sessions, &gw.persist, started_at)
}

/// `wanted`, or `wanted #N` when another session has it ([`crate::session::naming`]).
pub(crate) fn unique_title(gw: &Gateway, wanted: &str, stored_id: &str) -> String {
    crate::session::naming::unique_title(&gw.sessions, gw.persist.store(), wanted, stored_id)
}

pub(crate) fn opening(gw: &Gateway, rid: &str) -> Value {
    let s = &gw.sessions[rid];
    let mut info = s.info(
        gw.tools.set.toolsets(),
        super::skills::info(gw),
        crate::mcp::status(&gw.mcp),
    );
    // The TUI prints this under the banner as `warning: …`.
    if let Some(w) = &gw.provider_warning {
        info["config_warning"] = json!(w);
    }
    json!({
        "session_id": s.runtime_id,
        "stored_session_id": s.stored_id,
        "message_count": s.message_total(),
        // `resume` has read as much as this shows (`page`).
        "messages": transcript::display_tail(&s.transcript, s.transcript.len(), SHOWN).0,
        "info": info,
        "running": s.running(),
    })
}

pub fn create(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    params::not_shutting_down(gw)?;
    let cols = params::opt_u64(p, "cols")?.map_or(80, |c| c.clamp(1, 10_000));
    let cwd = params::opt_str(p, "cwd")?
        .map(str::to_string)
        .unwrap_or_else(util::default_cwd);
    let model = params::opt_str(p, "model")?
        .map(str::to_string)
        .unwrap_or_else(|| gw.provider.default_model().to_string());
    let source = session_source(p)?;
    let started_at = util::unix_now();
    let stored_id = new_stored_id(gw, started_at);
    let title = match params::opt_str(p, "title")? {
        Some(t) if !t.trim().is_empty() => Some(unique_title(gw, t, &stored_id)),
        _ => None,
    };
    let rid = new_runtime_id(gw);
    let lease = claim_lease(gw, &stored_id, &rid, &source)?;
    let context_max = gw.context_window_for(&model);
    let mut session = Session::new(
        NewSession {
            runtime_id: rid.clone(),
            stored_id,
            title,
            model,
            provider: gw.provider.name().to_string(),
            base_url: gw.provider_base_url(),
            cwd,
            source,
            started_at,
            cols,
            context_max,
            fast: gw.fast_default(),
        },
        now,
    );
    session.lease = lease;
    session.preloaded_skills = super::skills::preload(gw, &session.stored_id);
    gw.skills.borrow_mut().rescan_if_stale(now);
    gw.add_session(session);
    gw.mark_dirty(&rid);
    gw.emit_info(&rid);
    Ok(opening(gw, &rid))
}

pub fn resume(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let mut wanted = params::req_id(p, "session_id")?.to_string();
    // Checked before anything else, so a live session's resume refuses a bad one too.
    let cols = params::opt_u64(p, "cols")?.map(|c| c.clamp(1, 10_000));
    // A compacted session resumes as its continuation, where the conversation went on.
    if gw.live_rid(&wanted).is_none()
        && let Ok(Some(tip)) = gw.persist.store().compression_tip(&wanted)
    {
        wanted = tip;
    }
    let live = gw.live_rid(&wanted).map(str::to_string).or_else(|| {
        gw.sessions
            .values()
            .find(|s| s.title.as_deref() == Some(wanted.as_str()))
            .map(|s| s.runtime_id.clone())
    });
    if let Some(rid) = live {
        let mut v = opening(gw, &rid);
        v["resumed"] = json!(gw.sessions[&rid].stored_id);
        return Ok(v);
    }
    params::not_shutting_down(gw)?;
    gw.adopt_dead_journals(now);
    if gw.persist.unfolded(&wanted) {
        return Err(RpcError::new(
            code::INTERNAL,
            format!(
                "session {wanted} has records in a killed gateway's journal that state.db could not take yet (locked?); try again"
            ),
        ));
    }
    let rid = new_runtime_id(gw);
    // Claimed before anything is taken, so a refusal leaves everything where it was.
    let lease = claim_lease(gw, &wanted, &rid, &session_source(p)?)?;
    // A session closed this iteration may still wait for its commit; resume that copy.
    let stored = gw.persist.take_retired(&wanted);
    let mut session = match stored {
        Some(mut s) => {
            s.runtime_id = rid.clone();
            s
        }
        None => {
            let row = load_unheld(gw, &wanted)?;
            let model = row
                .model
                .unwrap_or_else(|| gw.provider.default_model().to_string());
            let context_max = gw.context_window_for(&model);
            let mut s = Session::new(
                NewSession {
                    runtime_id: rid.clone(),
                    stored_id: row.id,
                    title: row.title,
                    model,
                    provider: gw.provider.name().to_string(),
                    base_url: gw.provider_base_url(),
                    cwd: row.cwd.unwrap_or_else(util::default_cwd),
                    source: row.source,
                    started_at: row.started_at,
                    cols: 80,
                    context_max,
                    fast: gw.fast_default(),
                },
                now,
            );
            s.persisted = Persisted {
                row: true,
                messages: row.messages.len(),
                live: false,
            };
            s.last_activity_at = row.messages.last().map_or(row.started_at, |m| m.timestamp);
            s.transcript = row.messages;
            s.older = row.older.map(older::Older::new);
            s.input_tokens = row.input_tokens.max(0) as u64;
            s.output_tokens = row.output_tokens.max(0) as u64;
            s.tool_call_count = row.tool_call_count.max(0) as u64;
            s.model_calls = row.api_call_count.max(0) as u64;
            s.accounting = row.accounting;
            // The rollup of its subagents from their own rows (unreadable: none, as before).
            if let Ok(rollup) = gw.persist.store().subagent_totals(&s.stored_id) {
                s.subagents = rollup;
            }
            // What the row already counts was summed into session_model_usage by its writer.
            s.usage_committed = s.usage_totals();
            s
        }
    };
    session.cols = cols.unwrap_or(session.cols);
    if let Some(lease) = &lease
        && session.stored_id != wanted
    {
        lease.transfer(&session.stored_id);
    }
    session.lease = lease;
    // Reopen the row: it is live again.
    session.ended = None;
    session.row_dirty = true;
    session.last_active = now;
    let resumed = session.stored_id.clone();
    let total = session.message_total();
    gw.add_session(session);
    // What the answer shows is read now; the older rest a step per iteration (`older.rs`).
    page(gw, &rid, total, SHOWN, now)?;
    gw.mark_dirty(&rid);
    gw.emit_info(&rid);
    let mut v = opening(gw, &rid);
    v["resumed"] = json!(resumed);
    Ok(v)
}

/// The surface a session is opened from, as Hermes resolves it (`_resolve_session_source`): the
/// call's `source`, else `desktop` under Hermes' desktop app (`HERMES_DESKTOP` set, and not its
/// terminal pane's `HERMES_DESKTOP_TERMINAL`), else `tui`.
fn session_source(p: &Params) -> Result<String, RpcError> {
    if let Some(s) = params::opt_str(p, "source")?
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        return Ok(s.to_string());
    }
    let set = |name: &str| std::env::var(name).is_ok_and(|v| util::truthy(&v));
    let desktop = set("HERMES_DESKTOP") && !set("HERMES_DESKTOP_TERMINAL");
    Ok(if desktop { "desktop" } else { "tui" }.to_string())
}

/// A place for stored session `stored_id` under Hermes' cap on open sessions
/// (`max_concurrent_sessions`), or Hermes' 4090 refusal at the cap.
pub(super) fn claim_lease(
    gw: &Gateway,
    stored_id: &str,
    rid: &str,
    source: &str,
) -> Result<Option<crate::session::leases::Lease>, RpcError> {
    use crate::session::leases::{self, Claim};
    let config = crate::config_file::load(&gw.cfg.home).unwrap_or(yaml_rust2::Yaml::Null);
    let cap = leases::cap(&config);
    match leases::claim(&gw.cfg.home, cap, stored_id, rid, source, gw.clock) {
        Claim::Held(lease) => Ok(Some(lease)),
        Claim::Uncounted => Ok(None),
        Claim::Refused(message) => Err(RpcError::new(leases::LIMIT_CODE, message)),
    }
}

/// A read of state.db that failed, as the client is told.
pub(super) fn unreadable(e: StoreError) -> RpcError {
    RpcError::new(code::INTERNAL, format!("cannot read state.db: {e}"))
}

/// A stored session, by id or title, unless another running gateway holds it open (4023: two
/// gateways writing one transcript would interleave it). One a dead gateway left open is
/// repaired first, as start-up repair would have.
fn load_unheld(gw: &mut Gateway, wanted: &str) -> Result<StoredSession, RpcError> {
    let missing = || {
        RpcError::new(
            code::STORED_NOT_FOUND,
            format!("stored session not found: {wanted}"),
        )
    };
    let store = gw.persist.store();
    let row = store
        .load_newest(wanted, older::NEWEST)
        .map_err(unreadable)?
        .ok_or_else(missing)?;
    match store.holder(&row.id).map_err(unreadable)? {
        Holder::Nobody | Holder::Me => Ok(row),
        Holder::Live(owner) => Err(RpcError::new(
            code::SESSION_ACTIVE,
            format!(
                "session {} is open in another running gateway (pid {}); close it there first",
                row.id,
                owner.split(':').next().unwrap_or("?")
            ),
        )),
        Holder::Dead(_) => {
            gw.persist
                .store_mut()
                .repair_abandoned(&row.id)
                .map_err(|e| {
                    RpcError::new(
                        code::INTERNAL,
                        format!("cannot repair session {} left open by a gateway that died ({e}); try again", row.id),
                    )
                })?;
            gw.persist
                .store()
                .load_newest(&row.id, older::NEWEST)
                .map_err(unreadable)?
                .ok_or_else(missing)
        }
    }
}

/// Live sessions answered by `session.active_list` unless it asks for more: the TUI polls it
/// every 1.5 s, and an embedder may hold thousands of sessions.
const ACTIVE_LIST_DEFAULT: usize = 200;
const ACTIVE_LIST_MAX: usize = 10_000;

pub fn active_list(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let current = params::opt_str(p, "current_session_id")?;
    let limit = params::opt_u64(p, "limit")?
        .map_or(ACTIVE_LIST_DEFAULT, |n| (n as usize).min(ACTIVE_LIST_MAX));
    // Background tasks and subagents are not sessions the user switches to.
    let mut live: Vec<&Session> = gw
        .sessions
        .values()
        .filter(|s| s.background.is_none() && s.delegated.is_none())
        .collect();
    let total = live.len();
    // The most recently active `limit`, without sorting all of them; the current one always.
    let recent = std::cmp::Reverse;
    if live.len() > limit {
        let cur = current.and_then(|c| live.iter().position(|s| s.runtime_id == c));
        let keep_current = cur.map(|i| live.swap_remove(i));
        let room = limit.saturating_sub(usize::from(keep_current.is_some()));
        if room > 0 && live.len() > room {
            live.select_nth_unstable_by_key(room - 1, |s| recent(s.last_active));
        }
        live.truncate(room);
        live.extend(keep_current);
    }
    live.sort_by_key(|s| recent(s.last_active));
    let sessions: Vec<Value> = live
        .iter()
        .map(|s| {
            json!({
                "id": s.runtime_id,
                "session_key": s.stored_id,
                "current": Some(s.runtime_id.as_str()) == current,
                "title": s.title,
                "preview": s.preview(),
                "model": s.model,
                "message_count": s.message_total(),
                "started_at": s.started_at,
                "last_active": s.last_activity_at,
                "status": s.status_word(),
            })
        })
        .collect();
    Ok(json!({ "sessions": sessions, "total": total }))
}

pub fn list(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let limit = params::opt_u64(p, "limit")?.unwrap_or(200).min(10_000) as usize;
    let offset = params::opt_u64(p, "offset")?.unwrap_or(0).min(1 << 40) as usize;
    let filter = ListFilter {
        title: params::opt_str(p, "title")?,
        source: params::opt_str(p, "source")?,
        limit,
        offset,
        ..ListFilter::default()
    };
    gw.adopt_dead_journals(gw.clock.now());
    let rows = gw.persist.store().list(&filter).map_err(unreadable)?;
    let sessions: Vec<Value> = rows
        .into_iter()
        .map(|r| {
            json!({"id": r.id, "title": r.title, "preview": r.preview, "started_at": r.started_at,
                   "message_count": r.message_count, "source": r.source})
        })
        .collect();
    Ok(json!({ "sessions": sessions }))
}

pub fn most_recent(gw: &mut Gateway) -> Result<Value, RpcError> {
    let rows = gw
        .persist
        .store()
        .list(&ListFilter::first(1))
        .map_err(unreadable)?;
    Ok(match rows.into_iter().next() {
        Some(r) => {
            json!({"session_id": r.id, "title": r.title, "started_at": r.started_at, "source": r.source})
        }
        None => json!({ "session_id": null }),
    })
}

/// The newest display rows of a live session (at most `limit`, default and cap [`SHOWN`]),
/// or those before message `before`; `first` is the `before` of the page preceding this one
/// (0: none), `total` the session's message count.
pub fn history(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let limit =
        params::opt_u64(p, "limit")?.map_or(SHOWN.rows, |n| (n as usize).clamp(1, SHOWN.rows));
    let before = params::opt_u64(p, "before")?;
    let s = live(gw, p)?;
    let (rid, total) = (s.runtime_id.clone(), s.message_total());
    let before = before.map_or(total, |b| (b as usize).min(total));
    let rows = transcript::Page {
        rows: limit,
        ..SHOWN
    };
    let (messages, first) = page(gw, &rid, before, rows, now)?;
    // Reading the older messages may have corrected their count.
    let total = gw.sessions[&rid].message_total();
    Ok(json!({ "count": messages.len(), "messages": messages, "first": first, "total": total }))
}

pub fn title(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let new_title = params::opt_str(p, "title")?;
    let rid = live(gw, p)?.runtime_id.clone();
    if let Some(t) = new_title.filter(|t| !t.trim().is_empty()) {
        let current = gw.sessions[&rid].title.clone();
        if current.as_deref() != Some(t.trim()) {
            set_title(gw, &rid, t);
        }
    }
    Ok(json!({ "title": gw.sessions[&rid].title }))
}

/// Title the live session `rid` `wanted` (made unique), stored with the next commit and said
/// to the client as `session.title` (the user's `/title`, or the one its model wrote).
pub(crate) fn set_title(gw: &mut Gateway, rid: &str, wanted: &str) {
    let Some(stored_id) = gw.sessions.get(rid).map(|s| s.stored_id.clone()) else {
        return;
    };
    let unique = unique_title(gw, wanted, &stored_id);
    if let Some(s) = gw.sessions.get_mut(rid) {
        s.title = Some(unique.clone());
        s.row_dirty = true;
    }
    gw.mark_dirty(rid);
    gw.emit(
        rid,
        "session.title",
        json!({"session_id": stored_id, "title": unique}),
    );
}

/// `session.usage`: the flat figures the TUI's `/usage` reads.
pub fn usage(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    Ok(live(gw, p)?.usage())
}

pub fn close(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let rid = live(gw, p)?.runtime_id.clone();
    gw.retire(&rid, "tui_close", now);
    Ok(json!({ "closed": true }))
}

/// `session.delete {session_id}`: remove a stored session; a live one is refused (4023), as
/// Hermes does, since its rows are still being written. Answers the deleted id.
pub fn delete(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let stored_id = params::req_id(p, "session_id")?.to_string();
    if gw.live_rid(&stored_id).is_some() {
        return Err(RpcError::new(
            code::SESSION_ACTIVE,
            "cannot delete an active session",
        ));
    }
    let deleted = gw
        .persist
        .delete(&stored_id)
        .map_err(|e| RpcError::new(code::DELETE_FAILED, format!("delete failed: {e}")))?;
    if deleted {
        crate::tools::shell_state::forget(&gw.cfg.home, &stored_id);
        Ok(json!({ "deleted": stored_id }))
    } else {
        Err(RpcError::new(
            code::STORED_NOT_FOUND,
            format!("stored session not found: {stored_id}"),
        ))
    }
}

pub fn events_since(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let last_seen = params::opt_u64(p, "last_seen")?.unwrap_or(0);
    let epoch = gw.replay_epoch.clone();
    let s = live(gw, p)?;
    let since = s.ring.since(last_seen);
    let truncated = since.truncated;
    let events: Vec<Value> = since
        .events
        .iter()
        .filter_map(|params| serde_json::from_str(params).ok())
        .collect();
    Ok(json!({
        "events": events,
        "latest_seq": s.seq,
        "truncated": truncated,
        "count": events.len(),
        "epoch": epoch,
    }))
}

pub fn resize(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let cols = params::opt_u64(p, "cols")?;
    let s = live(gw, p)?;
    let Some(cols) = cols else {
        return Err(RpcError::invalid_params("invalid params: cols is required"));
    };
    s.cols = cols.clamp(1, 10_000);
    Ok(json!({ "cols": s.cols }))
}
