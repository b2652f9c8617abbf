//! Calls about the gateway itself, which the TUI makes from its first second: none may fail.

use serde_json::{Value, json};

use super::params::Params;
use crate::event_loop::Gateway;
use crate::rpc::RpcError;

/// `client.capabilities {server_requests?}`: `true` or a list naming `approval` turns on the
/// server-request form of approvals.
pub fn client_capabilities(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let wants = match p.get("server_requests") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Array(list)) => list.iter().any(|m| m.as_str() == Some("approval")),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "invalid params: server_requests must be a boolean or a list of method names",
            ));
        }
    };
    gw.server_requests = wants;
    let list: Vec<&str> = if wants { vec!["approval"] } else { vec![] };
    Ok(json!({ "server_requests": list }))
}

pub fn capabilities() -> Value {
    json!({
        "server_requests": true,
        "events_since": true,
        "session_resume": true,
        "prompt_queue": true,
        "interrupt": true,
        "approvals": true,
        "shell_exec": true,
        "tool_output": true,
        "change_events": false,
    })
}

/// The offline model can always run, so the TUI is never blocked; a configuration we could
/// not use is reported as a warning.
pub fn setup_status(gw: &Gateway) -> Value {
    json!({
        "provider_configured": true,
        "provider": gw.provider.name(),
        "model": gw.provider.default_model(),
        "warning": gw.provider_warning,
    })
}

fn config_mtime(gw: &Gateway) -> f64 {
    std::fs::metadata(gw.cfg.home.join("config.yaml"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

pub fn config_get(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let key = super::params::opt_str(p, "key")?.unwrap_or("full");
    Ok(match key {
        "full" => json!({
            "config": {
                "model": { "default": gw.provider.default_model(), "provider": gw.provider.name() },
                "hermes_home": gw.cfg.home.display().to_string(),
            }
        }),
        "mtime" => json!({ "mtime": config_mtime(gw) }),
        // Keys we hold nothing for answer an empty value rather than an error.
        _ => json!({ "key": key, "value": null }),
    })
}

/// `input.detect_drop {session_id, text}`: we recognise no dropped files.
pub fn detect_drop(p: &Params) -> Result<Value, RpcError> {
    super::params::opt_str(p, "text")?;
    super::params::opt_str(p, "session_id")?;
    Ok(json!({ "matched": false }))
}
