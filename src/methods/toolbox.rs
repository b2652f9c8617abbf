//! What the TUI's `/skills` hub and `/tools enable|disable` call: `skills.manage` (we have no
//! skills: empty lists, and a refusal to install) and `tools.configure` (the one tool is always
//! offered).

use serde_json::{Value, json};

use super::params::{self, Params};
use crate::rpc::RpcError;
use crate::rpc::frame::code;

/// `skills.manage {action, query?, page?}`.
pub fn skills_manage(p: &Params) -> Result<Value, RpcError> {
    let action = params::req_str(p, "action")?;
    params::opt_str(p, "query")?;
    let page = params::opt_u64(p, "page")?.unwrap_or(1).max(1);
    match action {
        "list" => Ok(json!({"skills": {}})),
        "inspect" => Ok(json!({"info": {}})),
        "search" => Ok(json!({"results": []})),
        "browse" => Ok(json!({"items": [], "page": page, "total": 0, "total_pages": 0})),
        "install" => Err(RpcError::new(
            code::NOT_SUPPORTED,
            "not supported by tui-gateway: installing skills (it has no skill support)",
        )),
        _ => Err(RpcError::invalid_params(
            "invalid params: action must be list, inspect, search, browse or install",
        )),
    }
}

/// `tools.configure {action, names}`: nothing changes; names other than ours are unknown.
pub fn tools_configure(p: &Params) -> Result<Value, RpcError> {
    let action = params::req_str(p, "action")?;
    if !matches!(action, "enable" | "disable") {
        return Err(RpcError::invalid_params(
            "invalid params: action must be enable or disable",
        ));
    }
    params::opt_str(p, "session_id")?;
    let names: Vec<&str> = match p.get("names") {
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
        _ => {
            return Err(RpcError::invalid_params(
                "invalid params: names must be a list of strings",
            ));
        }
    };
    if names.contains(&"terminal") {
        return Err(RpcError::new(
            code::NOT_SUPPORTED,
            format!(
                "not supported by tui-gateway: the terminal tool is always offered ({action} ignored)"
            ),
        ));
    }
    Ok(json!({"changed": [], "unknown": names, "reset": false}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: Value) -> Params {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn skills_are_empty_and_install_is_refused() {
        assert_eq!(
            skills_manage(&p(json!({"action": "list"}))).unwrap(),
            json!({"skills": {}})
        );
        assert_eq!(
            skills_manage(&p(json!({"action": "install", "query": "x"})))
                .unwrap_err()
                .code,
            code::NOT_SUPPORTED
        );
        assert_eq!(
            skills_manage(&p(json!({"action": "zap"})))
                .unwrap_err()
                .code,
            code::INVALID_PARAMS
        );
        assert_eq!(
            skills_manage(&p(json!({}))).unwrap_err().code,
            code::INVALID_PARAMS
        );
    }

    #[test]
    fn tools_configure_changes_nothing() {
        let r = tools_configure(&p(json!({"action": "disable", "names": ["web"]}))).unwrap();
        assert_eq!(r["unknown"], json!(["web"]));
        let e =
            tools_configure(&p(json!({"action": "disable", "names": ["terminal"]}))).unwrap_err();
        assert!(e.message.contains("always offered"));
        assert_eq!(
            tools_configure(&p(json!({"action": "enable"})))
                .unwrap_err()
                .code,
            code::INVALID_PARAMS
        );
    }
}
