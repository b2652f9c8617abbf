//! The agents overlay's calls: `delegation.status` / `delegation.pause` / `subagent.interrupt`
//! over the running subagents (`src/delegation.rs`), and Hermes' spawn-tree snapshots — the
//! TUI posts a finished turn's tree (`spawn_tree.save`) and browses them later
//! (`spawn_tree.list`, `spawn_tree.load`) — kept as Hermes keeps them, under
//! `$HERMES_HOME/spawn-trees/<session>/`, with a line per snapshot in `_index.jsonl`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};

use super::params::{self, Params};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;

const ROOT: &str = "spawn-trees";
const INDEX: &str = "_index.jsonl";
/// The largest snapshot read back, and the largest index read.
const SNAPSHOT_MAX: u64 = 16 * 1024 * 1024;
const INDEX_MAX: u64 = 4 * 1024 * 1024;
/// Session folders looked at for a `cross_session` list.
const SESSIONS_LISTED_MAX: usize = 1_000;

fn refusal(code: i64, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message.into())
}

pub fn status(gw: &Gateway) -> Value {
    crate::delegation::status(gw)
}

/// `delegation.pause {paused = true}`: new `delegate_task` calls are refused; running children go on.
pub fn pause(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let paused = params::opt_bool(p, "paused")?.unwrap_or(true);
    gw.tools.delegations.borrow_mut().paused = paused;
    Ok(json!({ "paused": paused }))
}

/// `subagent.interrupt {subagent_id}`: that child alone stops; its summary says so.
pub fn interrupt(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let id = params::opt_str(p, "subagent_id")?.unwrap_or("").trim();
    if id.is_empty() {
        return Err(refusal(4000, "subagent_id required"));
    }
    let found = crate::delegation::interrupt(gw, id, now);
    Ok(json!({ "found": found, "subagent_id": id }))
}

/// A session id as a folder name: letters, digits, `-` and `_` kept, the rest `_`.
fn folder_of(session: &str) -> String {
    let safe: String = session
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                true => c,
                false => '_',
            },
        )
        .collect();
    match safe.is_empty() {
        true => "unknown".into(),
        false => safe,
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> RpcError {
    refusal(5000, format!("{what} failed: {e}"))
}

/// `spawn_tree.save {session_id, subagents, started_at?, finished_at?, label?}`.
pub fn save(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let session = params::opt_str(p, "session_id")?
        .unwrap_or("")
        .trim()
        .to_string();
    let subagents = match p.get("subagents") {
        Some(Value::Array(a)) if !a.is_empty() => a.clone(),
        _ => return Err(refusal(4000, "subagents list required")),
    };
    let number = |key: &str| p.get(key).and_then(Value::as_f64);
    let finished_at = number("finished_at").unwrap_or_else(crate::util::unix_now);
    let started_at = number("started_at");
    let label = params::opt_str(p, "label")?.unwrap_or("").to_string();
    let folder = match session.is_empty() {
        true => "default".to_string(),
        false => folder_of(&session),
    };
    let dir = crate::private_file::private_dir(&gw.cfg.home, &[ROOT, &folder])
        .map_err(|e| failed("spawn_tree.save", e))?;
    let (y, mo, d, h, mi, s) = crate::util::utc_parts(finished_at);
    let stamp = format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}");
    // Two saves in one second keep both (Hermes' name, then a suffix).
    let path = (0..100)
        .map(|n| match n {
            0 => dir.join(format!("{stamp}.json")),
            n => dir.join(format!("{stamp}-{n}.json")),
        })
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .ok_or_else(|| failed("spawn_tree.save", "too many snapshots in one second"))?;
    let count = subagents.len();
    let snapshot = json!({
        "session_id": session,
        "started_at": started_at,
        "finished_at": finished_at,
        "label": label,
        "subagents": subagents,
    });
    crate::private_file::replace_private(&path, snapshot.to_string().as_bytes())
        .map_err(|e| failed("spawn_tree.save", e))?;
    let entry = json!({
        "path": path.display().to_string(),
        "session_id": session,
        "started_at": started_at,
        "finished_at": finished_at,
        "label": label,
        "count": count,
    });
    // The index only spares a list from reading every snapshot: a lost line costs a scan.
    if let Ok(mut f) = crate::private_file::append(&dir.join(INDEX)) {
        let _ = writeln!(f, "{entry}");
    }
    Ok(json!({ "path": path.display().to_string(), "session_id": session }))
}

/// The snapshots of one session folder, from its index or, without one, by reading each.
fn entries_of(dir: &Path) -> Vec<Value> {
    let indexed = crate::util::read_regular(&dir.join(INDEX), INDEX_MAX)
        .ok()
        .flatten()
        .map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|e| e["path"].as_str().is_some_and(|p| Path::new(p).is_file()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if !indexed.is_empty() {
        return indexed;
    }
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    listing
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let raw: Value = crate::util::read_regular(&p, SNAPSHOT_MAX)
                .ok()
                .flatten()
                .and_then(|t| serde_json::from_str(&t).ok())?;
            let count = raw["subagents"].as_array().map_or(0, Vec::len);
            Some(json!({
                "path": p.display().to_string(),
                "session_id": raw["session_id"],
                "finished_at": raw["finished_at"],
                "started_at": raw["started_at"],
                "label": raw["label"].as_str().unwrap_or(""),
                "count": count,
            }))
        })
        .collect()
}

/// `spawn_tree.list {session_id?, limit = 50, cross_session?}`: newest first.
pub fn list(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let session = params::opt_str(p, "session_id")?
        .unwrap_or("")
        .trim()
        .to_string();
    let limit = params::opt_u64(p, "limit")?.unwrap_or(50).clamp(1, 1_000) as usize;
    let root = gw.cfg.home.join(ROOT);
    let dirs: Vec<PathBuf> = match params::opt_bool(p, "cross_session")?.unwrap_or(false) {
        true => std::fs::read_dir(&root)
            .map(|l| {
                l.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .take(SESSIONS_LISTED_MAX)
                    .collect()
            })
            .unwrap_or_default(),
        false => vec![root.join(match session.is_empty() {
            true => "default".to_string(),
            false => folder_of(&session),
        })],
    };
    let mut entries: Vec<Value> = dirs.iter().flat_map(|d| entries_of(d)).collect();
    let finished = |e: &Value| e["finished_at"].as_f64().unwrap_or(0.0);
    entries.sort_by(|a, b| finished(b).total_cmp(&finished(a)));
    entries.truncate(limit);
    Ok(json!({ "entries": entries }))
}

/// `spawn_tree.load {path}`: a snapshot under the spawn-trees folder, nowhere else.
pub fn load(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let raw = params::opt_str(p, "path")?.unwrap_or("").trim();
    if raw.is_empty() {
        return Err(refusal(4000, "path required"));
    }
    let outside = |why: String| refusal(4030, format!("path outside spawn-trees root: {why}"));
    let root = std::fs::canonicalize(gw.cfg.home.join(ROOT)).map_err(|e| outside(e.to_string()))?;
    let path = std::fs::canonicalize(raw).map_err(|e| outside(e.to_string()))?;
    if !path.starts_with(&root) {
        return Err(outside(path.display().to_string()));
    }
    let text = crate::util::read_regular(&path, SNAPSHOT_MAX)
        .map_err(|e| failed("spawn_tree.load", e))?
        .ok_or_else(|| failed("spawn_tree.load", "no such snapshot"))?;
    serde_json::from_str(&text).map_err(|e| failed("spawn_tree.load", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_becomes_a_folder_name_without_separators() {
        assert_eq!(folder_of("20260101_abc-1"), "20260101_abc-1");
        assert_eq!(folder_of("../../etc"), "______etc");
        assert_eq!(folder_of(""), "unknown");
    }
}
