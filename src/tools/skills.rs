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
        "List the skills, each with its description; load one with skill_view."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"category": {"type": "string",
            "description": "Only this category."}}, "required": []})
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
        "Load a skill: its SKILL.md, with the files it links (references, templates, scripts) \
         listed in linked_files; call again with file_path to read one of them."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string", "description": "The skill's name; a plugin's skill is 'plugin:skill'."},
            "file_path": {"type": "string", "description": "One of its files, e.g. 'references/api.md'; omit for SKILL.md."}
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
        "Write skills: your own procedures for the kinds of task that come back. New ones go in \
         ~/.hermes/skills/. Actions: create (a whole SKILL.md, in an optional category), patch \
         (old_string to new_string: for fixes), edit (a whole new SKILL.md: read it first), \
         delete, write_file and remove_file (files under references/, templates/, scripts/ or \
         assets/).\n\nCreate one after a hard task went well (five calls or more, errors \
         overcome, an approach the user corrected) or when the user asks you to remember how; \
         patch one as soon as using it shows it wrong or incomplete. Ask the user before you \
         create or delete one. A good skill says when it applies, gives numbered steps with \
         exact commands, its pitfalls and how to check the result."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["create", "patch", "edit", "delete", "write_file", "remove_file"]},
            "name": {"type": "string", "description": "Lowercase letters, digits, '.', '-' and '_', at most 64; an existing skill but for create."},
            "content": {"type": "string", "description": "create, edit: the whole SKILL.md (YAML front matter, then markdown)."},
            "old_string": {"type": "string", "description": "patch: the text to replace, unique unless replace_all."},
            "new_string": {"type": "string", "description": "patch: its replacement ('' deletes it)."},
            "replace_all": {"type": "boolean", "description": "patch: replace every occurrence."},
            "category": {"type": "string", "description": "create: a folder to group it in, e.g. 'devops'."},
            "file_path": {"type": "string", "description": "write_file, remove_file: the file, under references/, templates/, scripts/ or assets/; patch: a file other than SKILL.md."},
            "file_content": {"type": "string", "description": "write_file: the file's content."},
            "absorbed_into": {"type": "string", "description": "delete: the skill that took in its content, or '' when it is dropped."}
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
