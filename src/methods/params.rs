//! Reading params with errors that say which field is wrong.

use serde_json::{Map, Value};

use crate::rpc::RpcError;
use crate::rpc::frame::code;

pub type Params = Map<String, Value>;

/// An optional string field; wrong type → -32602 naming it.
pub fn opt_str<'a>(p: &'a Params, key: &str) -> Result<Option<&'a str>, RpcError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_params(format!(
            "invalid params: {key} must be a string"
        ))),
    }
}

/// A required string field; missing → -32602 naming it.
pub fn req_str<'a>(p: &'a Params, key: &str) -> Result<&'a str, RpcError> {
    opt_str(p, key)?
        .ok_or_else(|| RpcError::invalid_params(format!("invalid params: {key} is required")))
}

/// A required id (session_id…); missing or empty → 4006.
pub fn req_id<'a>(p: &'a Params, key: &str) -> Result<&'a str, RpcError> {
    match opt_str(p, key)? {
        Some(s) if !s.trim().is_empty() => Ok(s.trim()),
        _ => Err(RpcError::new(
            code::MISSING_ID,
            format!("{key} is required"),
        )),
    }
}

/// An optional boolean field.
pub fn opt_bool(p: &Params, key: &str) -> Result<Option<bool>, RpcError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(RpcError::invalid_params(format!(
            "invalid params: {key} must be a boolean"
        ))),
    }
}

/// An optional non-negative integer field.
pub fn opt_u64(p: &Params, key: &str) -> Result<Option<u64>, RpcError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                    .map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "invalid params: {key} must be a non-negative integer"
                ))
            }),
    }
}

/// Prompts longer than this are refused rather than sent to a model.
pub const PROMPT_MAX: usize = 1024 * 1024;

/// A prompt's text (submit, steer, background): not blank (4002), not over [`PROMPT_MAX`].
pub fn check_prompt(text: &str) -> Result<(), RpcError> {
    if text.trim().is_empty() {
        return Err(RpcError::new(code::INVALID_VALUE, "empty prompt"));
    }
    if text.len() > PROMPT_MAX {
        return Err(RpcError::invalid_params(format!(
            "invalid params: text is longer than {PROMPT_MAX} bytes"
        )));
    }
    Ok(())
}

/// Calls that would start something are refused once the shutdown began (5035).
pub fn not_shutting_down(gw: &crate::event_loop::Gateway) -> Result<(), RpcError> {
    match gw.shutdown {
        Some(_) => Err(RpcError::new(
            code::SHUTTING_DOWN,
            "gateway is shutting down",
        )),
        None => Ok(()),
    }
}
