//! Hermes' `memory {action?, target, content?, old_text?, operations?}`: durable notes in
//! `$HERMES_HOME/memories/MEMORY.md` (the agent's) and `USER.md` (about the user), entries
//! separated by `\n§\n`, each file bounded by its character limit. The same files Python
//! Hermes reads; both go into the system prompt (`system_prompt.rs`) as Hermes renders them.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Start, Tool, ToolContext, ToolResult};
use crate::util::grouped;

pub const ENTRY_DELIMITER: &str = "\n§\n";
/// Hermes' default limits, in characters.
const MEMORY_LIMIT: usize = 2200;
const USER_LIMIT: usize = 1375;

/// Each target's character limit: config.yaml's `memory.memory_char_limit` and
/// `memory.user_char_limit`, read as Hermes reads them (`int()` of the value; a value that is
/// not a number leaves that one and those after it at their defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    pub memory: usize,
    pub user: usize,
}

impl Default for MemoryLimits {
    fn default() -> MemoryLimits {
        MemoryLimits {
            memory: MEMORY_LIMIT,
            user: USER_LIMIT,
        }
    }
}

impl MemoryLimits {
    pub fn load(home: &Path) -> MemoryLimits {
        match crate::config_file::load(home) {
            Ok(doc) => MemoryLimits::from_doc(&doc),
            Err(_) => MemoryLimits::default(),
        }
    }

    pub fn from_doc(doc: &yaml_rust2::Yaml) -> MemoryLimits {
        use yaml_rust2::Yaml;
        // Python's int(): an integer, a float cut toward zero, a numeral string, a bool.
        let int = |y: &Yaml| -> Option<i64> {
            match y {
                Yaml::Integer(i) => Some(*i),
                Yaml::Real(r) => r
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .map(|f| f as i64),
                Yaml::String(s) => s.trim().replace('_', "").parse().ok(),
                Yaml::Boolean(b) => Some(i64::from(*b)),
                _ => None,
            }
        };
        let mut limits = MemoryLimits::default();
        let at = |key: &str| crate::config_file::lookup(doc, &format!("memory.{key}"));
        let absent = |y: &Yaml| matches!(y, Yaml::BadValue);
        for (key, slot) in [
            ("memory_char_limit", &mut limits.memory),
            ("user_char_limit", &mut limits.user),
        ] {
            let y = at(key);
            if absent(y) {
                continue;
            }
            match int(y) {
                // A limit below 1 refuses every entry, as Hermes' does.
                Some(n) => *slot = n.max(0) as usize,
                None => break,
            }
        }
        limits
    }

    fn of(self, target: Target) -> usize {
        match target {
            Target::Memory => self.memory,
            Target::User => self.user,
        }
    }
}

/// A memory file larger than this is not read (it was not written by a memory tool).
const FILE_MAX: u64 = 256 * 1024;

pub struct Memory;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Memory,
    User,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Memory => "memory",
            Target::User => "user",
        }
    }

    pub fn path(self, home: &Path) -> PathBuf {
        let file = match self {
            Target::Memory => "MEMORY.md",
            Target::User => "USER.md",
        };
        home.join("memories").join(file)
    }
}

/// The entries of a memory file (none when it is missing or unreadable).
pub fn entries(home: &Path, target: Target) -> Vec<String> {
    let raw = crate::util::read_regular(&target.path(home), FILE_MAX)
        .ok()
        .flatten()
        .unwrap_or_default();
    raw.split(ENTRY_DELIMITER)
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

fn chars(entries: &[String]) -> usize {
    entries.join(ENTRY_DELIMITER).chars().count()
}

/// `(current, limit, percent used)`, the first two as Hermes prints them (`2,200`).
fn usage(limit: usize, entries: &[String]) -> (String, String, usize) {
    let current = chars(entries);
    let pct = (current * 100).checked_div(limit).map_or(0, |p| p.min(100));
    (grouped(current), grouped(limit), pct)
}

/// The system prompt block of a target, as Hermes renders it; `None` when it is empty.
pub fn prompt_block(home: &Path, target: Target, limits: &MemoryLimits) -> Option<String> {
    let entries = entries(home, target);
    if entries.is_empty() {
        return None;
    }
    let (current, limit, pct) = usage(limits.of(target), &entries);
    let header = match target {
        Target::User => {
            format!("USER PROFILE (who the user is) [{pct}% — {current}/{limit} chars]")
        }
        Target::Memory => {
            format!("MEMORY (your personal notes) [{pct}% — {current}/{limit} chars]")
        }
    };
    let bar = "═".repeat(46);
    Some(format!(
        "{bar}\n{header}\n{bar}\n{}",
        entries.join(ENTRY_DELIMITER)
    ))
}

/// One operation of a batch.
struct Op<'a> {
    action: &'a str,
    content: String,
    old_text: String,
}

fn field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or("")
        .to_string()
}

/// Apply `ops` to `entries` all or nothing; the error says which failed.
fn apply(entries: &mut Vec<String>, ops: &[Op<'_>]) -> Result<(), String> {
    let mut working = entries.clone();
    for (i, op) in ops.iter().enumerate() {
        let pos = format!("Operation {} ({})", i + 1, op.action);
        let find = |working: &[String]| -> Result<usize, String> {
            if op.old_text.is_empty() {
                return Err(format!("{pos}: old_text is required."));
            }
            let hits: Vec<usize> = (0..working.len())
                .filter(|j| working[*j].contains(&op.old_text))
                .collect();
            let Some(first) = hits.first() else {
                return Err(format!("{pos}: no entry matched '{}'.", op.old_text));
            };
            if hits.iter().any(|j| working[*j] != working[*first]) {
                return Err(format!(
                    "{pos}: '{}' matched multiple distinct entries -- be more specific.",
                    op.old_text
                ));
            }
            Ok(*first)
        };
        match op.action {
            "add" if op.content.is_empty() => return Err(format!("{pos}: content is required.")),
            "add" => {
                if !working.contains(&op.content) {
                    working.push(op.content.clone());
                }
            }
            "replace" => {
                let at = find(&working)?;
                if op.content.is_empty() {
                    return Err(format!(
                        "{pos}: content is required (use action='remove' to delete)."
                    ));
                }
                working[at] = op.content.clone();
            }
            "remove" => {
                let at = find(&working)?;
                working.remove(at);
            }
            _ => {
                return Err(format!(
                    "{pos}: unknown action. Use add, replace, or remove."
                ));
            }
        }
    }
    *entries = working;
    Ok(())
}

impl Tool for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    fn description(&self) -> &str {
        "Keep facts that should outlast this session. They go into the system prompt of every \
         later session, so keep entries short and worth their place. Two stores: 'user' (who \
         the user is: name, role, preferences, style) and 'memory' (your notes: the \
         environment, conventions, tool quirks, lessons). Make all your changes in one call \
         with 'operations' (applied together; the size limit applies to the result); the \
         single action/content/old_text fields are for one change alone. Leave out what is \
         easy to find again, raw data, the progress of the task at hand and to-dos."
    }

    fn parameters(&self) -> Value {
        let actions = json!(["add", "replace", "remove"]);
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": actions, "description": "One change (omit with 'operations')."},
                "target": {"type": "string", "enum": ["memory", "user"], "description": "Which store."},
                "content": {"type": "string", "description": "The entry, for add and replace."},
                "old_text": {"type": "string", "description": "For replace and remove: a short piece of text found in one entry only."},
                "operations": {
                    "type": "array",
                    "description": "Several changes, each {action, content?, old_text?}, applied together.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "action": {"type": "string", "enum": actions},
                            "content": {"type": "string"},
                            "old_text": {"type": "string"}
                        },
                        "required": ["action"]
                    }
                }
            },
            "required": ["target"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        Start::Done(call(ctx.home, MemoryLimits::load(ctx.home), args))
    }
}

fn call(home: &Path, limits: MemoryLimits, args: &Value) -> ToolResult {
    let target = match args.get("target") {
        None | Some(Value::Null) => Target::Memory,
        Some(v) if v == "memory" => Target::Memory,
        Some(v) if v == "user" => Target::User,
        Some(v) => {
            return ToolResult::unsuccessful(format!(
                "Invalid target '{}'. Use 'memory' or 'user'.",
                v.as_str().unwrap_or(&v.to_string())
            ));
        }
    };
    let batch: Vec<Op<'_>> = match args.get("operations") {
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .map(|op| Op {
                action: op
                    .get("action")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown"),
                content: field(op, "content"),
                old_text: field(op, "old_text"),
            })
            .collect(),
        Some(Value::Array(_)) | None | Some(Value::Null) => {
            let Some(action) = args.get("action").and_then(Value::as_str) else {
                return ToolResult::unsuccessful(
                    "action (add, replace or remove) or operations is required.",
                );
            };
            vec![Op {
                action,
                content: field(args, "content"),
                old_text: field(args, "old_text"),
            }]
        }
        Some(_) => {
            return ToolResult::unsuccessful(
                "operations must be a list of {action, content?, old_text?} objects.",
            );
        }
    };
    let limit = limits.of(target);
    let before = entries(home, target);
    let mut list = before.clone();
    if let Err(e) = apply(&mut list, &batch) {
        let (current, limit, _) = usage(limit, &before);
        let mut r = ToolResult::unsuccessful(format!(
            "{e} No operations were applied (batch is all-or-nothing)."
        ));
        r.content["current_entries"] = json!(before);
        r.content["usage"] = json!(format!("{current}/{limit}"));
        return r;
    }
    let total = chars(&list);
    if total > limit {
        let (current, shown_limit, _) = usage(limit, &before);
        let error = match (args.get("operations"), batch.first()) {
            (Some(Value::Array(ops)), _) if !ops.is_empty() => format!(
                "After applying all {} operations, memory would be at {}/{shown_limit} chars \
                 -- over the limit. Remove or shorten more entries in the same batch (see \
                 current_entries below), then retry.",
                batch.len(),
                grouped(total)
            ),
            (_, Some(op)) if op.action == "add" => format!(
                "Memory at {current}/{shown_limit} chars. Adding this entry ({} chars) would \
                 exceed the limit. Consolidate now: use 'replace' to merge overlapping entries \
                 into shorter ones or 'remove' stale or less important entries (see \
                 current_entries below), then retry this add — all in this turn.",
                op.content.chars().count()
            ),
            _ => format!(
                "Replacement would put memory at {}/{shown_limit} chars. Shorten the new \
                 content, or 'remove' other stale or less important entries to make room (see \
                 current_entries below), then retry — all in this turn.",
                grouped(total)
            ),
        };
        let mut r = ToolResult::unsuccessful(error);
        r.content["current_entries"] = json!(before);
        r.content["usage"] = json!(format!("{current}/{shown_limit}"));
        return r;
    }
    let (current, limit, pct) = usage(limit, &list);
    let path = target.path(home);
    let text = list.join(ENTRY_DELIMITER);
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| super::files::write_atomic(&path, text.as_bytes()));
    if let Err(e) = written {
        return ToolResult::unsuccessful(format!("could not save {}: {e}", path.display()));
    }
    let message = if batch.len() == 1 {
        match batch[0].action {
            "add" => "Entry added.".to_string(),
            "replace" => "Entry replaced.".to_string(),
            _ => "Entry removed.".to_string(),
        }
    } else {
        format!("Applied {} operation(s).", batch.len())
    };
    ToolResult::new(
        json!({
            "success": true, "done": true, "target": target.name(),
            "usage": format!("{pct}% — {current}/{limit} chars"), "entry_count": list.len(),
            "message": message, "note": "Write saved. This update is complete — do not repeat it.",
        }),
        format!("{} · {} entries", target.name(), list.len()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_added_replaced_removed_and_bounded() {
        let home = std::env::temp_dir().join(format!("tuigw-mem-{}", crate::util::random_hex(8)));
        let add = |c: &str| {
            call(
                &home,
                MemoryLimits::default(),
                &json!({"target": "user", "action": "add", "content": c}),
            )
        };
        assert_eq!(add("likes tea").content["success"], true);
        assert_eq!(add("likes tea").content["entry_count"], 1);
        add("works on rust");
        let text = std::fs::read_to_string(Target::User.path(&home)).unwrap();
        assert_eq!(text, "likes tea\n§\nworks on rust");
        let r = call(
            &home,
            MemoryLimits::default(),
            &json!({"target": "user", "operations": [
                {"action": "replace", "old_text": "tea", "content": "likes coffee"},
                {"action": "remove", "old_text": "rust"}]}),
        );
        assert_eq!(r.content["message"], "Applied 2 operation(s).");
        assert_eq!(entries(&home, Target::User), ["likes coffee"]);
        let miss = call(
            &home,
            MemoryLimits::default(),
            &json!({"target": "user", "action": "remove", "old_text": "zzz"}),
        );
        assert!(miss.error.unwrap().contains("no entry matched"));
        assert_eq!(miss.content["current_entries"], json!(["likes coffee"]));
        let big = call(
            &home,
            MemoryLimits::default(),
            &json!({"target": "user", "action": "add", "content": "x".repeat(2000)}),
        );
        assert!(big.error.unwrap().starts_with(
            "Memory at 12/1,375 chars. Adding this entry (2000 chars) would exceed the limit."
        ),);
        assert_eq!(entries(&home, Target::User), ["likes coffee"]);
        assert!(
            call(
                &home,
                MemoryLimits::default(),
                &json!({"target": "nope", "action": "add"})
            )
            .error
            .is_some()
        );
        assert!(
            call(&home, MemoryLimits::default(), &json!({"target": "memory"}))
                .error
                .is_some()
        );
        let block = prompt_block(&home, Target::User, &MemoryLimits::default()).unwrap();
        assert!(
            block.contains("USER PROFILE (who the user is) [") && block.ends_with("likes coffee")
        );
        assert!(prompt_block(&home, Target::Memory, &MemoryLimits::default()).is_none());
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn limits_come_from_config_as_hermes_reads_them() {
        let doc = |t: &str| MemoryLimits::from_doc(&crate::config_file::parse(t).unwrap());
        assert_eq!(doc(""), MemoryLimits::default());
        assert_eq!(
            doc("memory:\n  memory_char_limit: 3000\n  user_char_limit: '500'\n"),
            MemoryLimits {
                memory: 3000,
                user: 500
            }
        );
        assert_eq!(doc("memory:\n  user_char_limit: 99.9\n").user, 99);
        // int() fails: this one and the next keep their defaults.
        assert_eq!(
            doc("memory:\n  memory_char_limit: lots\n  user_char_limit: 10\n"),
            MemoryLimits::default()
        );
        assert_eq!(grouped(2200), "2,200");
        assert_eq!(grouped(1234567), "1,234,567");
        assert_eq!(grouped(999), "999");

        let home = std::env::temp_dir().join(format!("tuigw-meml-{}", crate::util::random_hex(8)));
        let small = MemoryLimits {
            memory: 20,
            user: 10,
        };
        let add = |c: &str| call(&home, small, &json!({"action": "add", "content": c}));
        assert_eq!(add("0123456789").content["usage"], "50% — 10/20 chars");
        let over = add("abcdefghij");
        assert_eq!(
            over.error.as_deref(),
            Some(
                "Memory at 10/20 chars. Adding this entry (10 chars) would exceed the limit. Consolidate now: use 'replace' to merge overlapping entries into shorter ones or 'remove' stale or less important entries (see current_entries below), then retry this add — all in this turn."
            )
        );
        assert_eq!(over.content["usage"], "10/20");
        assert_eq!(over.content["current_entries"], json!(["0123456789"]));
        let replace = call(
            &home,
            small,
            &json!({"action": "replace", "old_text": "0123", "content": "x".repeat(21)}),
        );
        assert!(
            replace
                .error
                .unwrap()
                .starts_with("Replacement would put memory at 21/20 chars.")
        );
        let batch = call(
            &home,
            small,
            &json!({"operations": [{"action": "add", "content": "abc"}, {"action": "add", "content": "defg"}]}),
        );
        assert!(batch.error.unwrap().starts_with(
            "After applying all 2 operations, memory would be at 23/20 chars -- over the limit."
        ),);
        assert_eq!(entries(&home, Target::Memory), ["0123456789"]);
        let _ = std::fs::remove_dir_all(&home);
    }
}
