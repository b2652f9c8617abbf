//! What the TUI's `/tools list|enable|disable` calls: `tools.list`, `tools.show` and
//! `tools.configure` (turns toolsets or tools off and on; `tools/toolsets.rs` keeps it).

use serde_json::{Value, json};

use super::params::{self, Params};
use crate::rpc::RpcError;
use crate::tools::ToolSet;

/// Turn toolsets or tools (by name) on or off: `(changed, unknown)`. Kept across restarts;
/// the model is offered the change from its next call.
pub fn configure(
    registry: &mut ToolSet,
    names: &[&str],
    enable: bool,
) -> (Vec<String>, Vec<String>) {
    let (known, unknown): (Vec<&str>, Vec<&str>) = names
        .iter()
        .partition(|n| registry.has_toolset(n) || registry.contains(n));
    let mut rule = registry.rule().clone();
    if let Err(e) = rule.set(&known, enable) {
        crate::diag!("[gateway] could not keep the tool choice: {e}");
    }
    registry.set_rule(rule);
    let owned = |v: Vec<&str>| v.into_iter().map(str::to_string).collect();
    (owned(known), owned(unknown))
}

/// The toolsets, sorted (only those with a tool offered with `offered`).
fn toolsets(registry: &ToolSet, offered: bool) -> Vec<&str> {
    sections(registry, offered)
        .into_iter()
        .map(|(toolset, _)| toolset)
        .collect()
}

/// Every toolset, sorted, with whether the model is offered any of its tools.
pub fn toolset_states(registry: &ToolSet) -> Vec<(&str, bool)> {
    sections(registry, false)
        .into_iter()
        .map(|(toolset, tools)| (toolset, tools.iter().any(|(n, _)| registry.is_offered(n))))
        .collect()
}

/// `tools.configure {action, names, session_id?}`: Hermes' shape `{changed, enabled_toolsets,
/// unknown, missing_servers, reset}`; names are toolsets (`file`) or tools (`patch`).
pub fn tools_configure(p: &Params, registry: &mut ToolSet) -> Result<Value, RpcError> {
    let action = params::req_str(p, "action")?;
    if !matches!(action, "enable" | "disable") {
        return Err(RpcError::invalid_params(
            "invalid params: action must be enable or disable",
        ));
    }
    params::opt_str(p, "session_id")?;
    let names: Vec<&str> = match p.get("names") {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect(),
        _ => {
            return Err(RpcError::invalid_params(
                "invalid params: names must be a list of strings",
            ));
        }
    };
    let (changed, unknown) = configure(registry, &names, action == "enable");
    Ok(
        json!({"changed": changed, "enabled_toolsets": toolsets(registry, true),
              "unknown": unknown, "missing_servers": [], "reset": false}),
    )
}

/// `/tools enable|disable NAME…` typed into slash.exec: the change and what is offered now.
pub fn tools_command(registry: &mut ToolSet, sub: &str, names: &[&str]) -> String {
    if names.is_empty() {
        return format!(
            "usage: /tools {sub} NAME… (toolsets: {})",
            toolset_names(registry)
        );
    }
    let (changed, unknown) = configure(registry, names, sub == "enable");
    let mut out = Vec::new();
    if !changed.is_empty() {
        let done = if sub == "enable" {
            "Enabled"
        } else {
            "Disabled"
        };
        out.push(format!("{done}: {}.", changed.join(", ")));
    }
    if !unknown.is_empty() {
        out.push(format!(
            "Unknown: {} (toolsets: {}).",
            unknown.join(", "),
            toolset_names(registry)
        ));
    }
    out.push(format!(
        "The model is offered {} tool(s) from its next call.",
        registry.schemas().len()
    ));
    out.join(" ")
}

fn toolset_names(registry: &ToolSet) -> String {
    toolsets(registry, false).join(", ")
}

/// `tools.list {session_id?}`: every toolset registered, each with its tools, `enabled` when
/// the model is offered them.
pub fn tools_list(p: &Params, registry: &ToolSet) -> Result<Value, RpcError> {
    params::opt_str(p, "session_id")?;
    let toolsets: Vec<Value> = sections(registry, false)
        .into_iter()
        .map(|(toolset, tools)| {
            let names: Vec<&str> = tools.iter().map(|(name, _)| *name).collect();
            let enabled = names.iter().any(|n| registry.is_offered(n));
            json!({"name": toolset, "description": format!("the {toolset} tools"),
                   "tool_count": names.len(), "enabled": enabled, "tools": names})
        })
        .collect();
    Ok(json!({ "toolsets": toolsets }))
}

/// `tools.show {session_id?}`: every tool offered with the first sentence of its description,
/// grouped by toolset.
pub fn tools_show(p: &Params, registry: &ToolSet) -> Result<Value, RpcError> {
    params::opt_str(p, "session_id")?;
    let groups = sections(registry, true);
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

/// Tools by toolset, both sorted by name: `(toolset, [(name, description)])` (only those
/// offered with `offered`).
fn sections(registry: &ToolSet, offered: bool) -> Vec<(&str, Vec<(&str, &str)>)> {
    let mut groups: std::collections::BTreeMap<&str, Vec<(&str, &str)>> = Default::default();
    for tool in registry
        .tools()
        .filter(|t| !offered || registry.is_offered(t.name()))
    {
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
pub fn first_sentence(description: &str) -> &str {
    let line = description.lines().next().unwrap_or("");
    match line.find(". ") {
        Some(i) => &line[..=i],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::frame::code;

    fn p(v: Value) -> Params {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn tools_list_and_show_name_the_registered_tools() {
        let builtin = ToolSet::builtin();
        let list = tools_list(&p(json!({})), &builtin).unwrap();
        let names: Vec<&str> = list["toolsets"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "clarify",
                "file",
                "memory",
                "session_search",
                "terminal",
                "todo",
                "vision"
            ]
        );
        assert_eq!(
            list["toolsets"][1]["tools"],
            json!(["patch", "read_file", "search_files", "write_file"])
        );
        let show = tools_show(&p(json!({})), &builtin).unwrap();
        assert_eq!(show["total"], 11);
        assert_eq!(first_sentence("Run it. Then more.\nsecond"), "Run it.");
    }

    #[test]
    fn tools_configure_turns_toolsets_and_tools_off_and_on() {
        let mut r = ToolSet::builtin();
        let off = tools_configure(
            &p(json!({"action": "disable", "names": ["web", "file", "todo"]})),
            &mut r,
        )
        .unwrap();
        assert_eq!(off["unknown"], json!(["web"]));
        assert_eq!(off["changed"], json!(["file", "todo"]));
        assert_eq!(
            off["enabled_toolsets"],
            json!(["clarify", "memory", "session_search", "terminal", "vision"])
        );
        assert_eq!(tools_show(&p(json!({})), &r).unwrap()["total"], 6);
        let list = tools_list(&p(json!({})), &r).unwrap();
        assert_eq!(list["toolsets"][1]["enabled"], false);
        tools_configure(&p(json!({"action": "enable", "names": ["file"]})), &mut r).unwrap();
        assert!(r.is_offered("patch") && !r.is_offered("todo"));
        let text = tools_command(&mut r, "enable", &["todo", "zzz"]);
        assert!(
            text.contains("Enabled: todo.") && text.contains("Unknown: zzz"),
            "{text}"
        );
        assert_eq!(
            tools_configure(&p(json!({"action": "enable"})), &mut r)
                .unwrap_err()
                .code,
            code::INVALID_PARAMS
        );
    }
}
