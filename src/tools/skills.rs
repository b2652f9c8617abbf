//! The `skills` toolset under Hermes' names, arguments and result JSON: `skills_list`,
//! `skill_view` (a skill, or one of its files with `file_path`, read bounded) and
//! `skill_manage` (`src/skills/manage.rs`; a change goes into the shared catalog at once, so
//! the next model call's index and the commands catalog have it).

use serde_json::{Value, json};

use super::{Start, Tool, ToolContext, ToolResult};
use crate::skills::{Shared, manage, view};

const TOOLSET: &str = "skills";

/// The three tools, sharing `skills`.
pub fn tools(skills: &Shared) -> [Box<dyn Tool>; 3] {
    [
        Box::new(SkillsList(skills.clone())),
        Box::new(SkillView(skills.clone())),
        Box::new(SkillManage(skills.clone())),
    ]
}

/// A result whose JSON says `success`: failed ones carry the error to the TUI too.
fn result(content: Value, summary: String) -> ToolResult {
    let mut r = ToolResult::new(content, summary);
    if r.content["success"] == false {
        let why = r.content["error"].as_str().unwrap_or("failed").to_string();
        r.summary = crate::util::clip(&why, 120);
        r.error = Some(why);
    }
    r
}

pub struct SkillsList(Shared);

impl Tool for SkillsList {
    fn name(&self) -> &str {
        "skills_list"
    }
    fn toolset(&self) -> &str {
        TOOLSET
    }
    fn description(&self) -> &str {
        "List available skills (name + description). Use skill_view(name) to load full content."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"category": {"type": "string",
            "description": "Optional category filter to narrow results"}}, "required": []})
    }
    fn start(&mut self, _ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let category = args
            .get("category")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty());
        let v = view::skills_list(self.0.borrow().catalog(), category);
        let n = v["count"].as_u64().unwrap_or(0);
        Start::Done(result(v, format!("{n} skill(s)")))
    }
}

pub struct SkillView(Shared);

impl Tool for SkillView {
    fn name(&self) -> &str {
        "skill_view"
    }
    fn toolset(&self) -> &str {
        TOOLSET
    }
    fn description(&self) -> &str {
        "Skills allow for loading information about specific tasks and workflows, as well as \
         scripts and templates. Load a skill's full content or access its linked files \
         (references, templates, scripts). First call returns SKILL.md content plus a \
         'linked_files' dict showing available references/templates/scripts. To access those, \
         call again with file_path parameter."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string", "description": "The skill name (use skills_list to see available skills). For plugin-provided skills, use the qualified form 'plugin:skill' (e.g. 'superpowers:writing-plans')."},
            "file_path": {"type": "string", "description": "OPTIONAL: Path to a linked file within the skill (e.g., 'references/api.md', 'templates/config.yaml', 'scripts/validate.py'). Omit to get the main SKILL.md content."}
        }, "required": ["name"]})
    }
    fn start(&mut self, _ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let Some(name) = args.get("name").and_then(Value::as_str) else {
            return Start::Done(ToolResult::unsuccessful("name is required"));
        };
        let file_path = args.get("file_path").and_then(Value::as_str);
        let v = view::skill_view(self.0.borrow().catalog(), name, file_path);
        let summary = match file_path {
            Some(fp) => format!("{name} · {fp}"),
            None => name.to_string(),
        };
        Start::Done(result(v, summary))
    }
}

pub struct SkillManage(Shared);

fn patch_text(content: &str, old: &str, new: &str, all: bool) -> Result<(String, usize), String> {
    super::files::fuzzy::replace(content, old, new, all).map(|r| (r.content, r.count))
}

impl Tool for SkillManage {
    fn name(&self) -> &str {
        "skill_manage"
    }
    fn toolset(&self) -> &str {
        TOOLSET
    }
    fn description(&self) -> &str {
        "Manage skills (create, update, delete). Skills are your procedural memory — reusable \
         approaches for recurring task types. New skills go to ~/.hermes/skills/; existing \
         skills can be modified wherever they live.\n\nActions: create (full SKILL.md + \
         optional category), patch (old_string/new_string — preferred for fixes), edit (full \
         SKILL.md rewrite — major overhauls only), delete, write_file, remove_file.\n\nCreate \
         when: complex task succeeded (5+ calls), errors overcome, user-corrected approach \
         worked, non-trivial workflow discovered, or user asks you to remember a procedure.\n\
         Update when: instructions stale/wrong, OS-specific failures, missing steps or pitfalls \
         found during use. If you used a skill and hit issues not covered by it, patch it \
         immediately.\n\nAfter difficult/iterative tasks, offer to save as a skill. Skip for \
         simple one-offs. Confirm with user before creating/deleting.\n\nGood skills: trigger \
         conditions, numbered steps with exact commands, pitfalls section, verification steps. \
         Use skill_view() to see format examples."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["create", "patch", "edit", "delete", "write_file", "remove_file"], "description": "The action to perform."},
            "name": {"type": "string", "description": "Skill name (lowercase, hyphens/underscores, max 64 chars). Must match an existing skill for patch/edit/delete/write_file/remove_file."},
            "content": {"type": "string", "description": "Full SKILL.md content (YAML frontmatter + markdown body). Required for 'create' and 'edit'. For 'edit', read the skill first with skill_view() and provide the complete updated text."},
            "old_string": {"type": "string", "description": "Text to find in the file (required for 'patch'). Must be unique unless replace_all=true. Include enough surrounding context to ensure uniqueness."},
            "new_string": {"type": "string", "description": "Replacement text (required for 'patch'). Can be empty string to delete the matched text."},
            "replace_all": {"type": "boolean", "description": "For 'patch': replace all occurrences instead of requiring a unique match (default: false)."},
            "category": {"type": "string", "description": "Optional category/domain for organizing the skill (e.g., 'devops', 'data-science', 'mlops'). Creates a subdirectory grouping. Only used with 'create'."},
            "file_path": {"type": "string", "description": "Path to a supporting file within the skill directory. For 'write_file'/'remove_file': required, must be under references/, templates/, scripts/, or assets/. For 'patch': optional, defaults to SKILL.md if omitted."},
            "file_content": {"type": "string", "description": "Content for the file. Required for 'write_file'."},
            "absorbed_into": {"type": "string", "description": "For 'delete' only — the umbrella skill this one's content was merged into, or an empty string when it is pruned."}
        }, "required": ["action", "name"]})
    }
    fn start(&mut self, _ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let a = manage::Args::of(args);
        let (v, change) = {
            let skills = self.0.borrow();
            manage::run(skills.catalog(), &a, &patch_text)
        };
        self.0.borrow_mut().apply(&change);
        let summary = format!("{} {}", a.action, a.name);
        Start::Done(result(v, summary))
    }
}
