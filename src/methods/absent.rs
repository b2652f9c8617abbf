//! Calls for Hermes features this gateway does not have (billing, voice, uploads, browser,
//! pets, plugins, the learning journey). Each answers in the shape the
//! TUI reads: the empty state where that is the truth (voice off, no plugins),
//! otherwise a one-line "not supported" error naming the feature — never `-32601`.

use serde_json::{Value, json};

use super::params::{self, Params};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::code;

/// The answer to `method`, or `None` when it is not one of the absent features.
pub fn call(gw: &mut Gateway, method: &str, p: &Params) -> Option<Result<Value, RpcError>> {
    let answer = match method {
        "browser.manage" => browser(gw, p),
        "voice.toggle" => Ok(json!({
            "enabled": false, "tts": false, "available": false,
            "audio_available": false, "stt_available": false,
            "details": "tui-gateway has no voice input or speech output",
        })),
        // No path: the TUI keeps the pasted text inline.
        "paste.collapse" => Ok(json!({})),
        "pet.gallery" => Ok(json!({ "enabled": false, "active": "", "pets": [] })),
        "plugins.manage" => Ok(json!({ "plugins": [], "user_count": 0, "bundled_count": 0 })),
        "learning.frames" => Ok(json!({
            "axis": { "start": "", "end": "" }, "buckets": [], "count": 0, "frames": [],
            "legend": [], "summary": ["tui-gateway records no skills or memories"],
        })),
        // We never ask these questions, so there is nothing to answer.
        "sudo.respond" | "secret.respond" => Ok(json!({ "ok": false })),
        "credits.view"
        | "billing.state"
        | "billing.charge"
        | "billing.charge_status"
        | "billing.auto_reload"
        | "billing.step_up" => not_supported("Nous Portal billing"),
        "voice.record" | "voice.tts" => not_supported("voice input and speech output"),
        "pdf.attach" | "file.attach" => {
            not_supported("attachments other than images (files, uploads, the clipboard's)")
        }
        "pet.select" | "pet.info" | "pet.remove" | "pet.generate" | "pet.hatch" => {
            not_supported("pets")
        }
        "learning.detail" | "learning.delete" | "learning.edit" => {
            not_supported("the learning journey")
        }
        _ => return None,
    };
    Some(answer)
}

fn not_supported(what: &str) -> Result<Value, RpcError> {
    Err(RpcError::new(
        code::NOT_SUPPORTED,
        format!("not supported by tui-gateway: {what}"),
    ))
}

/// `browser.manage {action, session_id?, url?}`: never connected; a connect attempt says why
/// on the session (the TUI prints `browser.progress` messages).
fn browser(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let action = params::opt_str(p, "action")?.unwrap_or("status");
    params::opt_str(p, "url")?;
    let why = "tui-gateway has no browser tools: nothing to connect";
    if action == "connect"
        && let Some(rid) = params::opt_str(p, "session_id")?
        && gw.sessions.contains_key(rid)
    {
        gw.emit(
            rid,
            "browser.progress",
            json!({ "level": "warn", "message": why }),
        );
    }
    Ok(json!({ "connected": false, "messages": [why] }))
}
