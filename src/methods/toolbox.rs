//! What the TUI's `/skills` hub and `/tools enable|disable` call: `skills.manage` (we have no
//! skills: empty lists, and a refusal to install) and `tools.configure` (every registered tool
//! is always offered).

use serde_json::{Value, json};

use super::params::{self, Params};
use crate::rpc::RpcError;
use crate::rpc::frame::code;
use crate::tools::Registry;

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

/// `tools.configure {action, names}`: nothing changes; names not registered are unknown.
pub fn tools_configure(p: &Params, registry: &Registry) -> Result<Value, RpcError> {
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
    if let Some(name) = names.iter().find(|n| registry.contains(n)) {
        return Err(RpcError::new(
            code::NOT_SUPPORTED,
            format!(
                "not supported by tui-gateway: the {name} tool is always offered ({action} ignored)"
            ),
        ));
    }
    Ok(json!({"changed": [], "unknown": names, "reset": false}))
}

/// `tools.list {session_id?}`: the toolsets offered, each with its tools (all enabled).
pub fn tools_list(p: &Params, registry: &Registry) -> Result<Value, RpcError> {
    params::opt_str(p, "session_id")?;
    let toolsets: Vec<Value> = sections(registry)
        .into_iter()
        .map(|(toolset, tools)| {
            let names: Vec<&str> = tools.iter().map(|(name, _)| *name).collect();
            json!({"name": toolset, "description": format!("the {toolset} tools"),
                   "tool_count": names.len(), "enabled": true, "tools": names})
        })
        .collect();
    Ok(json!({ "toolsets": toolsets }))
}

/// `tools.show {session_id?}`: every tool offered with the first sentence of its description,
/// grouped by toolset.
pub fn tools_show(p: &Params, registry: &Registry) -> Result<Value, RpcError> {
    params::opt_str(p, "session_id")?;
    let groups = sections(registry);
    let total: usize = groups.iter().map(|(_, tools)| tools.len()).sum();
    let sections: Vec<Value> = groups
        .into_iter()
        .map(|(toolset, tools)| {
            let rows: Vec<Value> = tools
                .into_iter()
                .map(|(name, description)| {
                    json!({"name": name, "description": first_sentence(description)})
                })
                .collect();
            json!({"name": toolset, "tools": rows})
        })
        .collect();
    Ok(json!({"sections": sections, "total": total}))
}

/// Tools by toolset, both sorted by name: `(toolset, [(name, description)])`.
fn sections(registry: &Registry) -> Vec<(&str, Vec<(&str, &str)>)> {
    let mut groups: std::collections::BTreeMap<&str, Vec<(&str, &str)>> = Default::default();
    for tool in registry.tools() {
        groups
            .entry(tool.toolset())
            .or_default()
            .push((tool.name(), tool.description()));
    }
    groups
        .into_iter()
        .map(|(toolset, mut tools)| {
            tools.sort();
            (toolset, tools)
        })
        .collect()
}

/// The first line of a description, up to its first sentence's end.
fn first_sentence(description: &str) -> &str {
    let line = description.lines().next().unwrap_or("");
    match line.find(". ") {
        Some(i) => &line[..=i],
        None => line,
    }
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
    fn tools_list_and_show_name_the_registered_tools() {
        let builtin = Registry::builtin();
        let list = tools_list(&p(json!({})), &builtin).unwrap();
        assert_eq!(list["toolsets"][0]["name"], "terminal");
        assert_eq!(list["toolsets"][0]["tools"], json!(["terminal"]));
        let show = tools_show(&p(json!({})), &builtin).unwrap();
        assert_eq!(show["total"], 1);
        assert_eq!(show["sections"][0]["tools"][0]["name"], "terminal");
        assert_eq!(first_sentence("Run it. Then more.\nsecond"), "Run it.");
    }

    #[test]
    fn tools_configure_changes_nothing() {
        let builtin = Registry::builtin();
        let r =
            tools_configure(&p(json!({"action": "disable", "names": ["web"]})), &builtin).unwrap();
        assert_eq!(r["unknown"], json!(["web"]));
        let e = tools_configure(
            &p(json!({"action": "disable", "names": ["terminal"]})),
            &builtin,
        )
        .unwrap_err();
        assert!(e.message.contains("always offered"));
        assert_eq!(
            tools_configure(&p(json!({"action": "enable"})), &builtin)
                .unwrap_err()
                .code,
            code::INVALID_PARAMS
        );
    }
}
