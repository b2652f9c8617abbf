//! Turn calls: submit a prompt, interrupt, answer an approval.

use std::time::Instant;

use serde_json::{Value, json};

use super::params::{self, Params};
use super::session::{live, unreadable};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::session::older;

pub fn submit(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let text = params::opt_str(p, "text")?.unwrap_or("");
    live(gw, p)?;
    params::not_shutting_down(gw)?;
    params::check_prompt(text)?;
    let rid = live(gw, p)?.runtime_id.clone();
    // A step's read of the older messages failed: retry it now (its end runs the prompts
    // queued behind it), or say why, rather than queue this one behind a read nobody runs.
    if live(gw, p)?.loading() && !gw.sessions.is_loading(&rid) {
        older::whole(gw, &rid, now).map_err(unreadable)?;
    }
    let status = match super::images::submit(gw, &rid, text, now) {
        true => "queued",
        false => "streaming",
    };
    Ok(json!({ "status": status }))
}

pub fn interrupt(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let rid = live(gw, p)?.runtime_id.clone();
    super::images::interrupt(gw, &rid);
    gw.interrupt_turn(&rid, now);
    Ok(json!({ "status": "interrupted" }))
}

pub fn approval_respond(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let choice = params::req_str(p, "choice")?;
    if !crate::tools::approval::CHOICES.contains(&choice) {
        return Err(RpcError::invalid_params(
            "invalid params: choice must be once, session, always or deny",
        ));
    }
    let request_id = params::opt_str(p, "request_id")?;
    let rid = live(gw, p)?.runtime_id.clone();
    let (tools, mut env) = gw.asking();
    let answered = tools.approvals.respond(&mut env, &rid, choice, request_id);
    let resolved = answered.len();
    for a in answered {
        crate::session::calls::approval_answered(gw, a, now);
    }
    Ok(json!({ "resolved": resolved }))
}

/// `clarify.respond {request_id, answer}`: the user's answer to a `clarify` question (an
/// empty answer dismisses it). Hermes' shape: `{status: "ok"}`, or error 4009 when no such
/// question waits.
pub fn clarify_respond(gw: &mut Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let request_id = params::opt_str(p, "request_id")?.unwrap_or("");
    let answer = params::opt_str(p, "answer")?.unwrap_or("");
    let (tools, mut env) = gw.asking();
    let Some((job, answer)) = tools.questions.respond(&mut env, request_id, answer) else {
        // Another client of the session answered first: this one's answer is not an error.
        if tools.questions.was_answered(request_id) {
            return Ok(json!({ "status": "ok", "answered": "elsewhere" }));
        }
        return Err(RpcError::new(
            crate::rpc::frame::code::BUSY,
            "no pending answer request",
        ));
    };
    crate::session::calls::question_answered(gw, job, answer, now);
    Ok(json!({ "status": "ok" }))
}

/// `shell.exec {command}`: answered when the command ends (`None` now).
pub fn shell_exec(
    gw: &mut Gateway,
    id: &crate::rpc::frame::Id,
    p: &Params,
    now: Instant,
) -> Option<Result<Value, RpcError>> {
    let command = match params::opt_str(p, "command") {
        Ok(c) => c.unwrap_or(""),
        Err(e) => return Some(Err(e)),
    };
    let timeout = gw.cfg.shell_timeout;
    match crate::tools::runs::shell_exec(gw, id.clone(), command, timeout, now) {
        Ok(()) => None,
        Err(e) => Some(Err(e)),
    }
}
