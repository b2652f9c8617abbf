//! Approvals of dangerous commands, in both forms of PROTOCOL.md: the `approval.request` event
//! answered by `approval.respond` (the default), and the `approval` server request for clients
//! that declared `server_requests`. `always` approvals persist in
//! `$HERMES_HOME/tui_gateway_approvals.json`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};

use super::{Ask, ToolResult, asked};
use crate::event_loop::{Gateway, Timer};
use crate::util;

pub const CHOICES: [&str; 4] = ["once", "session", "always", "deny"];

/// How the user answered an approval.
pub enum Answer {
    Allow,
    /// The call's result says why it did not run.
    Deny(ToolResult),
}

/// Tell the turn of `rid` how its approval was answered.
fn answered(gw: &mut Gateway, rid: &str, answer: Answer, now: Instant) {
    (gw.tools.hooks.approval_answered)(gw, rid, answer, now);
}

/// How approvals are asked; each waits with the rule it would approve.
const FORM: asked::Form<&'static str> = asked::Form {
    method: "approval",
    event: "approval.request",
    prefix: "apr",
    timeout: Timer::ApprovalTimeout,
    asked: |tools| &mut tools.approvals.pending,
};

/// Bound on the saved "always" list we read at start.
const ALWAYS_FILE_MAX: u64 = 1024 * 1024;

pub struct Approvals {
    pending: asked::Asked<&'static str>,
    always: BTreeSet<String>,
    path: PathBuf,
}

impl Approvals {
    pub fn load(home: &Path) -> Approvals {
        let path = home.join("tui_gateway_approvals.json");
        let always = crate::util::read_regular(&path, ALWAYS_FILE_MAX)
            .map_err(|e| crate::diag!("[gateway] {}: {e}; no saved approvals", path.display()))
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| {
                v.get("always").and_then(Value::as_array).map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
            })
            .unwrap_or_default();
        Approvals {
            pending: Default::default(),
            always,
            path,
        }
    }

    fn save(&self) -> std::io::Result<()> {
        let text = json!({ "always": self.always }).to_string();
        crate::private_file::replace(&self.path, text.as_bytes(), 0o600)
    }
}

/// Approved without asking: always, for this session, or the session is in yolo mode.
pub fn pre_approved(gw: &Gateway, rid: &str, rule: &str) -> bool {
    gw.tools.approvals.always.contains(rule)
        || gw
            .sessions
            .get(rid)
            .is_some_and(|s| s.yolo || s.approved_rules.iter().any(|r| r == rule))
}

/// Ask the user about a dangerous call; the turn waits. Returns the request's id.
pub fn ask(gw: &mut Gateway, rid: &str, ask: &Ask, now: Instant) -> String {
    let payload = json!({
        // Shown to a person who decides on it: a CR or `ESC[2K` must not hide what bash runs.
        "command": util::printable(&ask.command),
        "description": util::printable(&ask.description),
        "choices": CHOICES,
    });
    let deadline = now + gw.cfg.approval_timeout;
    asked::put(gw, &FORM, rid, payload, deadline, ask.rule)
}

/// `approval.respond`: resolve the session's pending approvals (the named one, if given).
pub fn respond(
    gw: &mut Gateway,
    rid: &str,
    choice: &str,
    request_id: Option<&str>,
    now: Instant,
) -> usize {
    let ids = gw
        .tools
        .approvals
        .pending
        .ids(|id, p| p.rid == rid && request_id.is_none_or(|want| want == id));
    for id in &ids {
        resolve(gw, id, choice, now);
    }
    ids.len()
}

/// An answer to an `approval` server request. False if no approval asked with that id.
pub fn on_answer(gw: &mut Gateway, id: &Value, result: Result<Value, Value>, now: Instant) -> bool {
    let Some(request_id) = gw.tools.approvals.pending.by_server_request(id) else {
        return false;
    };
    let choice = match &result {
        Ok(v) => v.get("choice").and_then(Value::as_str).unwrap_or("deny"),
        Err(_) => "deny",
    };
    resolve(gw, &request_id, choice, now);
    true
}

/// The session an approval request belongs to.
pub fn owner_session(gw: &Gateway, request_id: &str) -> Option<String> {
    gw.tools.approvals.pending.owner(request_id)
}

/// No answer in time: withdraw and deny.
pub fn expire(gw: &mut Gateway, request_id: &str, now: Instant) {
    let Some(p) = asked::withdraw(gw, &FORM, request_id, "timeout") else {
        return;
    };
    answered(gw, &p.rid, Answer::Deny(denial("no answer (timeout)")), now);
}

/// Withdraw an unanswered request (`request.cancel`); returns the denial for the caller to
/// finish the call with.
pub fn withdraw_quietly(gw: &mut Gateway, request_id: &str, reason: &str) -> Option<ToolResult> {
    asked::withdraw(gw, &FORM, request_id, reason)?;
    Some(denial(&format!("no answer ({reason})")))
}

fn resolve(gw: &mut Gateway, request_id: &str, choice: &str, now: Instant) {
    match choice {
        "once" | "session" | "always" => {
            let Some(p) = asked::take(gw, &FORM, request_id) else {
                return;
            };
            if choice == "session"
                && let Some(s) = gw.sessions.get_mut(&p.rid)
            {
                s.approved_rules.push(p.about.to_string());
            }
            if choice == "always" {
                gw.tools.approvals.always.insert(p.about.to_string());
                if let Err(e) = gw.tools.approvals.save() {
                    crate::diag!("[gateway] could not save the approval: {e}");
                }
            }
            answered(gw, &p.rid, Answer::Allow, now);
        }
        "deny" => deny(gw, request_id, "denied by the user", now),
        other => deny(gw, request_id, &format!("unknown choice {other:?}"), now),
    }
}

/// The result of a call the user did not approve.
fn denial(why: &str) -> ToolResult {
    ToolResult::terminal(
        &format!("Command not run: {why}."),
        None,
        Some("denied".into()),
    )
}

fn deny(gw: &mut Gateway, request_id: &str, why: &str, now: Instant) {
    let Some(p) = asked::take(gw, &FORM, request_id) else {
        return;
    };
    answered(gw, &p.rid, Answer::Deny(denial(why)), now);
}
