//! The system prompt a session's model calls are sent, assembled as Hermes does: the
//! identity (`$HERMES_HOME/SOUL.md`, else ours), the memory blocks (`memories/MEMORY.md`,
//! `USER.md`), the project's context file from the working directory (`.hermes.md` /
//! `HERMES.md`, else `AGENTS.md`, else `CLAUDE.md`, else `.cursorrules`), the tools offered,
//! the skills index (when the skill tools are offered), the skills `HERMES_TUI_SKILLS`
//! preloads and the working directory. Each file is bounded; the whole is built once per
//! session (again when the skills offered change).

use std::path::Path;

use serde_json::Value;

use crate::tools::memory::{self, Target};

/// A context file (or SOUL.md) is cut to this many characters: its head and its tail kept.
pub const CONTEXT_FILE_MAX_CHARS: usize = 20_000;
/// Files larger than this are not read at all.
const READ_MAX: u64 = 1024 * 1024;

const DEFAULT_IDENTITY: &str = "You are Hermes, a helpful assistant working in the user's \
terminal through tui-gateway. Use the tools you are offered to inspect and change the user's \
files and run commands; report what they did.";

/// Hermes' context files, by priority: the first group with a file present is loaded.
const CONTEXT_FILES: [&[&str]; 4] = [
    &[".hermes.md", "HERMES.md"],
    &["AGENTS.md", "agents.md"],
    &["CLAUDE.md", "claude.md"],
    &[".cursorrules"],
];

/// Head and tail of `text` within the bound, with a marker where the middle was.
fn bounded(text: &str, name: &str) -> String {
    let count = text.chars().count();
    if count <= CONTEXT_FILE_MAX_CHARS {
        return text.trim().to_string();
    }
    let head: String = text.chars().take(CONTEXT_FILE_MAX_CHARS * 7 / 10).collect();
    let tail: String = text
        .chars()
        .skip(count - CONTEXT_FILE_MAX_CHARS * 2 / 10)
        .collect();
    format!(
        "{head}\n\n[...truncated {name}: kept {} of {count} chars...]\n\n{tail}",
        head.chars().count() + tail.chars().count()
    )
}

fn read(path: &Path) -> Option<String> {
    crate::util::read_regular(path, READ_MAX)
        .ok()
        .flatten()
        .filter(|t| !t.trim().is_empty())
}

/// The context file of `cwd`, if any: `(name, bounded text)`.
pub fn context_file(cwd: &Path) -> Option<(String, String)> {
    CONTEXT_FILES.iter().find_map(|group| {
        group.iter().find_map(|name| {
            let text = read(&cwd.join(name))?;
            Some((name.to_string(), bounded(&text, name)))
        })
    })
}

/// What skills add to the system prompt.
#[derive(Default)]
pub struct Skills<'a> {
    /// The index ([`skills_index`]).
    pub index: &'a str,
    /// The preloaded skills' text.
    pub preloaded: &'a str,
    /// Hermes' ephemeral system prompt (config.yaml's `agent.system_prompt`, a session's
    /// personality, a subagent's task), last (empty: none).
    pub overlay: &'a str,
    /// A subagent's: without the user's memory or the project's context files (Hermes'
    /// `skip_memory`, `skip_context_files`), which its task's context stands in for.
    pub subagent: bool,
}

/// config.yaml's `agent.system_prompt` as Hermes reads it: text trimmed, a list's items one
/// per line (empty: none).
pub fn configured_overlay(home: &Path) -> String {
    let doc = crate::config_file::load(home).unwrap_or(yaml_rust2::Yaml::Null);
    match &doc["agent"]["system_prompt"] {
        yaml_rust2::Yaml::String(s) => s.trim().to_string(),
        yaml_rust2::Yaml::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::trim).filter(|t| !t.is_empty()))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Hermes' guidance when the model may write skills.
const SKILLS_GUIDANCE: &str = "After completing a complex task (5+ tool calls), fixing a \
tricky error, or discovering a non-trivial workflow, save the approach as a skill with \
skill_manage so you can reuse it next time.\nWhen using a skill and finding it outdated, \
incomplete, or wrong, patch it immediately with skill_manage(action='patch') — don't wait to be \
asked. Skills that aren't maintained become liabilities.";

/// The skills index for a model offered `tools` (OpenAI schemas) from `toolsets` (none unless
/// a skill tool is among them): a skill's `requires_toolsets` / `fallback_for_toolsets` are
/// judged by the toolsets, its `requires_tools` / `fallback_for_tools` by the tools.
pub fn skills_index(
    skills: &crate::skills::Skills,
    tools: &[Value],
    toolsets: &std::collections::BTreeSet<String>,
) -> String {
    let names: std::collections::BTreeSet<String> = tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect();
    if !["skills_list", "skill_view", "skill_manage"]
        .iter()
        .any(|n| names.contains(*n))
    {
        return String::new();
    }
    skills.catalog().prompt_index(&names, toolsets)
}

/// The system prompt for a session in `cwd` offered `tools` (OpenAI schemas).
pub fn build(home: &Path, cwd: &str, tools: &[Value], skills: &Skills<'_>) -> String {
    let mut parts = vec![match read(&home.join("SOUL.md")) {
        Some(soul) => bounded(&soul, "SOUL.md"),
        None => DEFAULT_IDENTITY.to_string(),
    }];
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    if !names.is_empty() {
        parts.push(format!("Tools available: {}.", names.join(", ")));
    }
    if names.contains(&"skill_manage") {
        parts.push(SKILLS_GUIDANCE.to_string());
    }
    let limits = memory::MemoryLimits::load(home);
    for target in [Target::Memory, Target::User]
        .into_iter()
        .filter(|_| !skills.subagent)
    {
        if let Some(block) = memory::prompt_block(home, target, &limits) {
            parts.push(block);
        }
    }
    if !skills.index.is_empty() {
        parts.push(skills.index.to_string());
    }
    let context = context_file(Path::new(cwd)).filter(|_| !skills.subagent);
    if let Some((name, text)) = context {
        parts.push(format!(
            "# Project Context\n\nThe following project context files have been loaded and \
             should be followed:\n\n## {name}\n\n{text}"
        ));
    }
    if !skills.preloaded.is_empty() {
        parts.push(skills.preloaded.to_string());
    }
    parts.push(format!("Current working directory: {cwd}"));
    if !skills.overlay.is_empty() {
        parts.push(skills.overlay.to_string());
    }
    parts.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_names_the_cwd_and_loads_bounded_files() {
        let root = std::env::temp_dir().join(format!("tuigw-sp-{}", crate::util::random_hex(8)));
        let (home, cwd) = (root.join("home"), root.join("proj"));
        std::fs::create_dir_all(home.join("memories")).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        let plain = build(&home, cwd.to_str().unwrap(), &[], &Skills::default());
        assert!(
            plain.starts_with("You are Hermes")
                && plain.ends_with(&format!("directory: {}", cwd.display()))
        );
        std::fs::write(home.join("SOUL.md"), "You are Pirate.").unwrap();
        std::fs::write(home.join("memories/MEMORY.md"), "repo uses tabs").unwrap();
        std::fs::write(cwd.join("CLAUDE.md"), "claude rules").unwrap();
        std::fs::write(
            cwd.join("AGENTS.md"),
            format!("agent rules{}", "x".repeat(30_000)),
        )
        .unwrap();
        let tools = [serde_json::json!({"function": {"name": "patch"}})];
        let p = build(&home, cwd.to_str().unwrap(), &tools, &Skills::default());
        assert!(p.starts_with("You are Pirate."), "{p}");
        assert!(p.contains("MEMORY (your personal notes)") && p.contains("repo uses tabs"));
        assert!(p.contains("## AGENTS.md\n\nagent rules") && !p.contains("claude rules"));
        assert!(p.contains("[...truncated AGENTS.md"));
        assert!(p.contains("Tools available: patch."));
        assert!(p.len() < 25_000);
        let _ = std::fs::remove_dir_all(&root);
    }
}
