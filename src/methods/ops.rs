//! Session operations behind the TUI's slash commands: undo, status, save, branch, activate,
//! steer, compress, background prompts, stopping commands, reloads.

use std::time::Instant;

use serde_json::{Value, json};

use super::params::{self, Params};
use super::session::{live, new_runtime_id, new_stored_id, opening, unique_title, whole_live};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::code;
use crate::session::Background;
use crate::session::compaction;
use crate::session::older;
use crate::session::transcript::{Message, Role};
use crate::util;

/// Prompts longer than this are refused (as `prompt.submit` does).
/// Save/export failures (Hermes' code for them).
const SAVE_FAILED: i64 = 5011;
/// Nothing to branch from (Hermes' code).
const NOTHING_TO_BRANCH: i64 = 4008;

pub(super) fn busy(what: &str) -> RpcError {
    RpcError::new(
        code::BUSY,
        format!("session busy — /interrupt the current turn before /{what}"),
    )
}

/// How many messages `/undo` removes from the end: the replies and tool rows of the last
/// turn (steering notes included), then its user prompt.
fn undo_len(t: &[Message]) -> usize {
    let mut n = t.len();
    while n > 0
        && (matches!(t[n - 1].role, Role::Assistant | Role::Tool)
            || compaction::is_steer(&t[n - 1]))
    {
        n -= 1;
    }
    if n > 0 && t[n - 1].role == Role::User {
        n -= 1;
    }
    t.len() - n
}

pub fn undo(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let s = whole_live(gw, p, now)?;
    if s.running() {
        return Err(busy("undo"));
    }
    let rid = s.runtime_id.clone();
    Ok(json!({ "removed": drop_last_exchange(gw, &rid, now) }))
}

/// The last exchange (the last user message and what answered it) leaves `rid`'s history
/// and state.db (`/undo`, a whole `/rollback`): how many messages went.
pub(crate) fn drop_last_exchange(gw: &mut Gateway, rid: &str, now: Instant) -> usize {
    if older::whole(gw, rid, now).is_err() {
        return 0;
    }
    let Some(s) = gw.sessions.get_mut(rid) else {
        return 0;
    };
    let removed = undo_len(&s.transcript);
    if removed > 0 {
        let keep = s.transcript.len() - removed;
        s.truncate(keep);
        gw.mark_dirty(rid);
    }
    removed
}

fn utc(unix: f64) -> String {
    let (y, mo, d, h, mi, _) = util::utc_parts(unix);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02} UTC")
}

pub fn status(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let home = gw.cfg.home.display().to_string();
    let model = whole_live(gw, p, now)?.model.clone();
    let window = compaction::context_window(&gw.cfg, &model);
    let s = live(gw, p)?;
    let mut lines = vec![
        "Hermes TUI Status".to_string(),
        String::new(),
        format!("Session ID: {}", s.stored_id),
        format!("Path: {home}"),
    ];
    if let Some(t) = s.title.as_deref().filter(|t| !t.trim().is_empty()) {
        lines.push(format!("Title: {t}"));
    }
    if let Some(parent) = &s.parent_session_id {
        lines.push(format!("Parent: {parent}"));
    }
    lines.extend([
        format!("Model: {} ({})", s.model, s.provider),
        format!("Created: {}", utc(s.started_at)),
        format!("Last Activity: {}", utc(s.last_activity_at)),
        format!("Messages: {}", s.transcript.len()),
        format!(
            "Tokens: {} (context ~{} of {})",
            s.input_tokens + s.output_tokens,
            compaction::estimate_tokens(&s.transcript),
            window
        ),
        format!("Agent Running: {}", if s.running() { "Yes" } else { "No" }),
    ]);
    Ok(json!({ "output": lines.join("\n") }))
}

/// A message as the export shows it: the chat-completions shape.
fn export_message(m: &Message) -> Value {
    let mut v = json!({"role": m.role.as_str(), "content": m.content, "timestamp": m.timestamp});
    if let Some(calls) = m.tool_calls.as_deref() {
        v["tool_calls"] = serde_json::from_str(calls).unwrap_or_else(|_| json!(calls));
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    if let Some(name) = &m.tool_name {
        v["name"] = json!(name);
    }
    if let Some(r) = &m.reasoning {
        v["reasoning"] = json!(r);
    }
    v
}

pub fn save(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let home = gw.cfg.home.clone();
    let dir = home.join("sessions").join("saved");
    let s = whole_live(gw, p, now)?;
    let doc = json!({
        "model": s.model,
        "session_id": s.stored_id,
        "title": s.title,
        "session_start": utc(s.started_at),
        "system_prompt": "",
        "messages": s.transcript.iter().map(export_message).collect::<Vec<_>>(),
    });
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        RpcError::new(SAVE_FAILED, format!("{what} {}: {e}", dir.display()))
    };
    std::fs::create_dir_all(&home).map_err(|e| fail("cannot create", &e))?;
    let dir = crate::private_file::private_dir(&home, &["sessions", "saved"])
        .map_err(|e| fail("cannot create", &e))?;
    let text = serde_json::to_vec_pretty(&doc).map_err(|e| fail("cannot encode for", &e))?;
    let stamp = util::stored_session_id(util::unix_now());
    let stamp = &stamp[..15]; // YYYYMMDD_HHMMSS
    let path = write_new(&dir, &format!("hermes_conversation_{stamp}"), &text)
        .map_err(|e| fail("cannot write into", &e))?;
    Ok(json!({ "file": path.display().to_string() }))
}

/// Write `bytes` to `<stem>.json` in `dir` (or `<stem>_2.json`… if taken), mode 0600, through
/// a temporary file so a crash never leaves half a file under the final name.
fn write_new(
    dir: &std::path::Path,
    stem: &str,
    bytes: &[u8],
) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{stem}.{}.tmp", util::random_hex(8)));
    let mut f = util::open_file(
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600),
        &tmp,
        libc::O_NOFOLLOW,
    )?;
    let written = f.write_all(bytes).and_then(|_| f.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    for n in 1..1000 {
        let name = match n {
            1 => format!("{stem}.json"),
            n => format!("{stem}_{n}.json"),
        };
        let path = dir.join(name);
        // A hard link fails when the name is taken, so no export overwrites another.
        match std::fs::hard_link(&tmp, &path) {
            Ok(()) => {
                let _ = std::fs::remove_file(&tmp);
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        }
    }
    let _ = std::fs::remove_file(&tmp);
    Err(std::io::Error::other("too many exports in one second"))
}

pub fn branch(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let name = params::opt_str(p, "name")?
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    let (rid, parent) = {
        let s = whole_live(gw, p, now)?;
        (s.runtime_id.clone(), s.stored_id.clone())
    };
    params::not_shutting_down(gw)?;
    let s = &gw.sessions[&rid];
    if s.running() {
        return Err(busy("branch"));
    }
    if s.transcript.is_empty() {
        return Err(RpcError::new(
            NOTHING_TO_BRANCH,
            "nothing to branch — send a message first",
        ));
    }
    let started_at = util::unix_now();
    let stored_id = new_stored_id(gw, started_at);
    let wanted = name.unwrap_or_else(|| {
        gw.sessions[&rid]
            .title
            .clone()
            .unwrap_or_else(|| "branch".to_string())
    });
    let title = unique_title(gw, &wanted, &stored_id);
    let new_rid = new_runtime_id(gw);
    let source = gw.sessions[&rid].source.clone();
    let lease = super::session::claim_lease(gw, &stored_id, &new_rid, &source)?;
    let s = &gw.sessions[&rid];
    let mut branch = s.like(
        new_rid.clone(),
        stored_id.clone(),
        Some(title.clone()),
        started_at,
        now,
    );
    branch.transcript = s.transcript.clone();
    for m in &mut branch.transcript {
        m.row_id = None;
    }
    branch.last_activity_at = s.last_activity_at;
    branch.approved_rules = s.approved_rules.clone();
    branch.parent_session_id = Some(parent.clone());
    branch.lease = lease;
    crate::tools::shell_state::inherit(&gw.cfg.home, &parent, &stored_id);
    gw.add_session(branch);
    gw.mark_dirty(&new_rid);
    gw.emit_info(&new_rid);
    Ok(json!({
        "session_id": new_rid,
        "stored_session_id": stored_id,
        "title": title,
        "parent": parent,
    }))
}

pub fn activate(
    gw: &mut Gateway,
    client: u64,
    p: &Params,
    now: Instant,
) -> Result<Value, RpcError> {
    let wanted = params::req_id(p, "session_id")?;
    let rid = if gw.sessions.contains_key(wanted) {
        wanted.to_string()
    } else {
        gw.live_rid(wanted)
            .map(str::to_string)
            .ok_or_else(RpcError::session_not_found)?
    };
    let s = gw
        .sessions
        .get_mut(&rid)
        .ok_or_else(RpcError::session_not_found)?;
    s.last_active = now;
    let status = s.status_word();
    let (key, started_at) = (s.stored_id.clone(), s.started_at);
    // A client attaching (a persistent gateway's next one, or another beside the first): what
    // the session waits on is asked of it too.
    let (tools, mut env) = gw.asking();
    tools.approvals.put_again(&mut env, &rid, client);
    tools.questions.put_again(&mut env, &rid, client);
    let mut v = opening(gw, &rid);
    v["session_key"] = json!(key);
    v["started_at"] = json!(started_at);
    v["status"] = json!(status);
    Ok(v)
}

pub fn steer(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let text = params::opt_str(p, "text")?.unwrap_or("").trim().to_string();
    params::check_prompt(&text)?;
    let s = live(gw, p)?;
    let accepted = match s.turn.as_mut() {
        Some(turn) if turn.compaction.is_none() && !turn.machine.interrupting() => {
            turn.steer.push(text.clone());
            true
        }
        _ => false,
    };
    if accepted {
        // Stored with the queue before the answer leaves, so a crash cannot lose it.
        s.queue_dirty = true;
        let rid = s.runtime_id.clone();
        gw.mark_dirty(&rid);
    }
    let status = if accepted { "queued" } else { "rejected" };
    Ok(json!({ "status": status, "text": text }))
}

/// `session.compress {focus_topic?}`: answered when the summary is written (`None` now), or
/// at once when there is nothing to compress.
pub fn compress(
    gw: &mut Gateway,
    id: &crate::rpc::frame::Id,
    p: &Params,
    now: Instant,
) -> super::Reply {
    let answer = (|| {
        let focus = params::opt_str(p, "focus_topic")?.map(str::to_string);
        let toolsets = gw.tools.set.toolsets();
        let mcp_servers = crate::mcp::status(&gw.mcp);
        let skills = super::skills::info(gw);
        let s = whole_live(gw, p, now)?;
        if s.running() {
            return Err(busy("compress"));
        }
        let rid = s.runtime_id.clone();
        if compaction::split_point(&s.transcript).is_none() {
            let n = s.transcript.len();
            let tokens = compaction::estimate_tokens(&s.transcript);
            return Ok(Some(json!({
                "status": "noop",
                "removed": 0,
                "before_messages": n,
                "after_messages": n,
                "before_tokens": tokens,
                "after_tokens": tokens,
                "summary": {
                    "headline": format!("Nothing to compress yet: {n} messages (~{tokens} tokens)"),
                    "token_line": "",
                    "note": "the latest turn is always kept as it is",
                    "noop": true,
                },
                "usage": s.usage(),
                "info": s.info(toolsets, skills, mcp_servers),
            })));
        }
        params::not_shutting_down(gw)?;
        if gw.start_compaction(&rid, Some(id.clone()), focus.as_deref(), now) {
            Ok(None)
        } else {
            Err(RpcError::new(
                code::INTERNAL,
                "could not start the compaction",
            ))
        }
    })();
    match answer {
        Ok(Some(v)) => Some(Ok(v)),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    }
}

pub fn background(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let text = params::opt_str(p, "text")?.unwrap_or("").trim().to_string();
    let parent_rid = live(gw, p)?.runtime_id.clone();
    params::check_prompt(&text)?;
    params::not_shutting_down(gw)?;
    let task_id = format!("bg_{}", util::random_hex(6));
    let started_at = util::unix_now();
    let rid = new_runtime_id(gw);
    let stored_id = new_stored_id(gw, started_at);
    let parent = &gw.sessions[&parent_rid];
    let parent_stored = parent.stored_id.clone();
    let mut child = parent.like(rid.clone(), stored_id, None, started_at, now);
    crate::tools::shell_state::inherit(&gw.cfg.home, &parent_stored, &child.stored_id);
    child.parent_session_id = Some(parent_stored);
    child.background = Some(Background {
        parent_rid,
        task_id: task_id.clone(),
    });
    gw.add_session(child);
    gw.mark_dirty(&rid);
    gw.start_prompt(&rid, text, now);
    Ok(json!({ "task_id": task_id, "session_id": rid }))
}

pub fn process_stop(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let rid = match params::opt_str(p, "session_id")? {
        Some(_) => Some(live(gw, p)?.runtime_id.clone()),
        None => None,
    };
    let killed = crate::tools::runs::stop_turn_commands(gw, rid.as_deref(), now)
        + crate::tools::process::kill_all(gw, rid.as_deref(), now);
    Ok(json!({ "killed": killed }))
}

/// `reload.mcp {confirm?}`: without `confirm` the TUI prints our `message` (its confirmation
/// slot: Hermes' warning that the prompt cache is lost); with it (`/reload-mcp now`, the
/// config watcher) `config.yaml` is read again and the servers whose configuration changed
/// are reconnected (`mcp::reload`); the session's `session.info` follows.
pub fn reload_mcp(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let rid = params::opt_str(p, "session_id")?.map(str::to_string);
    let confirm = match p.get("confirm") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "invalid params: confirm must be a boolean",
            ));
        }
    };
    if !confirm {
        let pending = crate::mcp::pending_reload(gw);
        let message = if pending.is_empty() {
            "The MCP servers running are the ones config.yaml lists (the TUI reloads them when \
             config.yaml changes): nothing to reload."
                .to_string()
        } else {
            format!(
                "/reload-mcp reconnects the MCP servers whose config.yaml entry changed or that \
                 failed ({}); their tools change from the next model call (which re-sends the \
                 full input). Reply `/reload-mcp now` to proceed.",
                pending.join(", ")
            )
        };
        return Ok(json!({ "status": "confirm_required", "message": message }));
    }
    let done = crate::mcp::reload(gw, now);
    if let Some(rid) = rid.and_then(|r| gw.sessions.contains_key(&r).then_some(r)) {
        gw.emit_info(&rid);
    }
    Ok(json!({ "status": "reloaded", "servers": done.servers, "changed": done.changed }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: Role, text: &str) -> Message {
        Message::new(role, Some(text.to_string()), 0.0)
    }

    #[test]
    fn undo_takes_the_whole_last_turn_and_stops_at_a_summary() {
        let steer = format!("{}more", crate::session::STEER_PREFIX);
        let t = [
            m(Role::User, "a"),
            m(Role::Assistant, "b"),
            m(Role::User, "c"),
            m(Role::Assistant, "calls"),
            m(Role::Tool, "out"),
            m(Role::User, &steer),
            m(Role::Assistant, "done"),
        ];
        assert_eq!(undo_len(&t), 5);
        assert_eq!(undo_len(&t[..2]), 2);
        assert_eq!(undo_len(&[]), 0);
        // A compaction summary (system) is not undone.
        assert_eq!(undo_len(&[m(Role::System, "summary")]), 0);
        assert_eq!(
            undo_len(&[m(Role::System, "summary"), m(Role::User, "x")]),
            1
        );
    }
}
