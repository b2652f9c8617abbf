//! What the TUI's `/tools list|enable|disable` calls: `tools.list`, `tools.show` and
//! `tools.configure` (turns toolsets, tools or an MCP server's `server:tool` off and on;
//! `tools/toolsets.rs` keeps it).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::params::{self, Params};
use crate::rpc::RpcError;
use crate::tools::ToolSet;

/// What a `/tools enable|disable` changed.
#[derive(Debug, Default, PartialEq)]
pub struct Configured {
    pub changed: Vec<String>,
    /// Toolset or tool names that name nothing.
    pub unknown: Vec<String>,
    /// Servers of `server:tool` names that config.yaml does not configure.
    pub missing_servers: Vec<String>,
}

/// The MCP servers config.yaml configures (connected or not).
pub fn mcp_servers(mcp: &crate::mcp::Mcp) -> BTreeSet<String> {
    let status = crate::mcp::status(mcp);
    status
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str().map(str::to_string))
        .collect()
}

/// Turn toolsets or tools on or off: a toolset (`file`), a tool (`patch`), or one MCP
/// server's tool as Hermes names it, `server:tool` (as long as `servers` has the server,
/// whether or not it offers that tool yet). Kept across restarts; the model is offered the
/// change from its next call.
pub fn configure(
    registry: &mut ToolSet,
    names: &[&str],
    enable: bool,
    servers: &BTreeSet<String>,
) -> Configured {
    let mut out = Configured::default();
    let mut rule_names: Vec<String> = Vec::new();
    for name in names {
        match name.split_once(':') {
            Some((server, tool)) if servers.contains(server) => {
                rule_names.push(crate::mcp::wire::tool_name(server, tool));
                out.changed.push(name.to_string());
            }
            Some((server, _)) => {
                if !out.missing_servers.iter().any(|m| m == server) {
                    out.missing_servers.push(server.to_string());
                }
            }
            None if registry.has_toolset(name) || registry.contains(name) => {
                rule_names.push(name.to_string());
                out.changed.push(name.to_string());
            }
            None => out.unknown.push(name.to_string()),
        }
    }
    out.missing_servers.sort();
    let mut rule = registry.rule().clone();
    let known: Vec<&str> = rule_names.iter().map(String::as_str).collect();
    if let Err(e) = rule.set(&known, enable) {
        crate::diag!("[gateway] could not keep the tool choice: {e}");
    }
    registry.set_rule(rule);
    out
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
/// unknown, missing_servers, reset}`; names are toolsets (`file`), tools (`patch`) or MCP
/// tools (`github:create_issue`) of the configured `servers`.
pub fn tools_configure(
    p: &Params,
    registry: &mut ToolSet,
    servers: &BTreeSet<String>,
) -> Result<Value, RpcError> {
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
    let c = configure(registry, &names, action == "enable", servers);
    Ok(
        json!({"changed": c.changed, "enabled_toolsets": toolsets(registry, true),
              "unknown": c.unknown, "missing_servers": c.missing_servers, "reset": false}),
    )
}

/// `/tools enable|disable NAME…` typed into slash.exec: the change and what is offered now.
pub fn tools_command(
    registry: &mut ToolSet,
    sub: &str,
    names: &[&str],
    servers: &BTreeSet<String>,
) -> String {
    if names.is_empty() {
        return format!(
            "usage: /tools {sub} NAME… (toolsets: {})",
            toolset_names(registry)
        );
    }
    let Configured {
        changed,
        unknown,
        missing_servers,
    } = configure(registry, names, sub == "enable", servers);
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
    if !missing_servers.is_empty() {
        out.push(format!(
            "Missing MCP servers: {}.",
            missing_servers.join(", ")
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
        let servers: BTreeSet<String> = ["github".to_string()].into();
        let off = tools_configure(
            &p(json!({"action": "disable", "names": ["web", "file", "todo", "github:create_issue", "gitlab:x", "gitlab:y"]})),
            &mut r,
            &servers,
        )
        .unwrap();
        assert_eq!(off["unknown"], json!(["web"]));
        assert_eq!(
            off["changed"],
            json!(["file", "todo", "github:create_issue"])
        );
        assert_eq!(off["missing_servers"], json!(["gitlab"]));
        // The server's tool, as the model is offered it, is off whenever it comes.
        assert!(!r.rule().offers("mcp__github__create_issue", "mcp-github"));
        assert!(r.rule().offers("mcp__github__list_issues", "mcp-github"));
        assert_eq!(
            off["enabled_toolsets"],
            json!(["clarify", "memory", "session_search", "terminal", "vision"])
        );
        assert_eq!(tools_show(&p(json!({})), &r).unwrap()["total"], 6);
        let list = tools_list(&p(json!({})), &r).unwrap();
        assert_eq!(list["toolsets"][1]["enabled"], false);
        tools_configure(
            &p(json!({"action": "enable", "names": ["file", "github:create_issue"]})),
            &mut r,
            &servers,
        )
        .unwrap();
        assert!(r.is_offered("patch") && !r.is_offered("todo"));
        assert!(r.rule().offers("mcp__github__create_issue", "mcp-github"));
        let text = tools_command(&mut r, "enable", &["todo", "zzz", "nope:t"], &servers);
        assert!(
            text.contains("Enabled: todo.")
                && text.contains("Unknown: zzz")
                && text.contains("Missing MCP servers: nope."),
            "{text}"
        );
        assert_eq!(
            tools_configure(&p(json!({"action": "enable"})), &mut r, &servers)
                .unwrap_err()
                .code,
            code::INVALID_PARAMS
        );
    }
}
