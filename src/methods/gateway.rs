//! Calls about the gateway itself, which the TUI makes from its first second: none may fail.

use serde_json::{Value, json};

use super::params::Params;
use crate::event_loop::Gateway;
use crate::rpc::RpcError;

/// `client.capabilities {server_requests?}`: `true` or a list naming `approval` turns on the
/// server-request form of approvals.
pub fn client_capabilities(
    gw: &mut Gateway,
    id: &crate::rpc::frame::Id,
    p: &Params,
) -> Result<Value, RpcError> {
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
    if let Some(c) = gw.clients.get_mut(id.client()) {
        c.conn.set_server_requests(wants);
    }
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
