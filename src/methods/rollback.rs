//! `rollback.list`, `rollback.diff`, `rollback.restore` (the TUI's `/rollback`): Hermes'
//! checkpoints of the session's working directory (`src/checkpoints/`), answered when their
//! git commands end — other calls, `ping` included, go on meanwhile.

use std::time::Instant;

use super::Reply;
use super::params::{self, Params};
use crate::checkpoints::{self, Ask};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::{Id, code};

/// Hermes' "hash required".
const HASH_REQUIRED: i64 = 4014;

/// What `method` asks, when it is one of `rollback.*`.
pub fn ask_of(method: &str) -> Option<Ask> {
    match method {
        "rollback.list" => Some(Ask::List),
        "rollback.diff" => Some(Ask::Diff),
        "rollback.restore" => Some(Ask::Restore),
        _ => None,
    }
}

pub fn call(gw: &mut Gateway, id: &Id, ask: Ask, p: &Params, now: Instant) -> Reply {
    let checked = (|| {
        let rid = params::req_id(p, "session_id")?.to_string();
        let s = gw
            .sessions
            .get(&rid)
            .ok_or_else(RpcError::session_not_found)?;
        let (cwd, running) = (s.cwd.clone(), s.running());
        let hash = params::opt_str(p, "hash")?.map(str::to_string);
        let file = params::opt_str(p, "file_path")?.map(str::to_string);
        let whole = file.as_deref().is_none_or(str::is_empty);
        if ask != Ask::List && hash.as_deref().is_none_or(str::is_empty) {
            return Err(RpcError::new(HASH_REQUIRED, "hash required"));
        }
        // A whole restore takes the last exchange out of the history: not under a turn.
        if ask == Ask::Restore && whole && running {
            return Err(RpcError::new(
                code::BUSY,
                "session busy — /interrupt the current turn before full rollback.restore",
            ));
        }
        Ok((rid, cwd, hash, file))
    })();
    let (rid, cwd, hash, file) = match checked {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    let asked = checkpoints::Rollback {
        ask,
        hash: hash.as_deref(),
        file: file.as_deref(),
    };
    checkpoints::request(gw, id, &rid, &cwd, asked, now)
}
