//! Hermes' `todo {todos?, merge?}`: the session's task list. The list lives in the
//! transcript: each call's result carries the whole list, so the newest `todo` result is the
//! session's list (a resumed session has it back with its messages, nothing else to store).
//! `tool.complete` carries it as `todos`, which the TUI renders. Compaction keeps the list in
//! the new session as Hermes re-injects it ([`snapshot`]: the pending and in-progress items,
//! in Hermes' words, a system message after the summary), and the list is read back from it.

use serde_json::{Map, Value, json};

use super::{Start, Tool, ToolContext, ToolResult};
use crate::transcript::{Message, Role};

const STATUSES: [&str; 4] = ["pending", "in_progress", "completed", "cancelled"];
const MAX_ITEMS: usize = 256;
const MAX_CONTENT_CHARS: usize = 4000;
const TRUNCATED: &str = "… [truncated]";
/// The first line of Hermes' post-compression todo block.
pub const SNAPSHOT_HEADER: &str =
    "[Your active task list was preserved across context compression]";

pub struct Todo;

#[derive(Debug, Clone, PartialEq)]
struct Item {
    id: String,
    content: String,
    status: String,
}

impl Item {
    fn json(&self) -> Value {
        json!({"id": self.id, "content": self.content, "status": self.status})
    }

    /// Hermes' normalisation: a missing id is `?`, empty content `(no description)`, an
    /// unknown status `pending`.
    fn from_value(v: &Value) -> Item {
        let Some(o) = v.as_object() else {
            return Item {
                id: "?".into(),
                content: "(invalid item)".into(),
                status: "pending".into(),
            };
        };
        let id = text(o, "id");
        let content = text(o, "content");
        let status = text(o, "status").to_lowercase();
        Item {
            id: if id.is_empty() { "?".into() } else { id },
            content: if content.is_empty() {
                "(no description)".into()
            } else {
                cap(&content)
            },
            status: if STATUSES.contains(&status.as_str()) {
                status
            } else {
                "pending".into()
            },
        }
    }
}

fn text(o: &Map<String, Value>, key: &str) -> String {
    match o.get(key) {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn cap(content: &str) -> String {
    if content.chars().count() <= MAX_CONTENT_CHARS {
        return content.to_string();
    }
    let keep = MAX_CONTENT_CHARS - TRUNCATED.chars().count();
    content.chars().take(keep).collect::<String>() + TRUNCATED
}

/// The list the newest `todo` result (or compaction snapshot) of the transcript holds
/// (empty before any).
fn current(transcript: &[Message]) -> Vec<Item> {
    transcript
        .iter()
        .rev()
        .find_map(|m| match m.role {
            Role::Tool if m.tool_name.as_deref() == Some("todo") => {
                let v: Value = serde_json::from_str(m.content.as_deref()?).ok()?;
                let list = v.get("todos")?.as_array()?;
                Some(list.iter().map(Item::from_value).collect())
            }
            Role::System => from_snapshot(m.content.as_deref()?),
            _ => None,
        })
        .unwrap_or_default()
}

const MARKERS: [(&str, &str); 2] = [("in_progress", "[>]"), ("pending", "[ ]")];

/// Hermes' `format_for_injection`: the pending and in-progress items, one a line.
fn snapshot_text(items: &[Item]) -> Option<String> {
    let mut lines = vec![SNAPSHOT_HEADER.to_string()];
    for item in items {
        if let Some((_, marker)) = MARKERS.iter().find(|(s, _)| *s == item.status) {
            lines.push(format!(
                "- {marker} {}. {} ({})",
                item.id, item.content, item.status
            ));
        }
    }
    (lines.len() > 1).then(|| lines.join("\n"))
}

/// The items of a snapshot message; `None` when `text` is not one.
fn from_snapshot(text: &str) -> Option<Vec<Item>> {
    let body = text.strip_prefix(SNAPSHOT_HEADER)?;
    // An item starts a line with its marker; its content may go on over the next lines.
    let mut raw: Vec<(&str, String)> = Vec::new();
    for line in body.split('\n').skip(1) {
        let start = MARKERS.iter().find_map(|(status, marker)| {
            let rest = line
                .strip_prefix("- ")?
                .strip_prefix(marker)?
                .strip_prefix(' ')?;
            Some((*status, rest.to_string()))
        });
        match (start, raw.last_mut()) {
            (Some(item), _) => raw.push(item),
            (None, Some((_, text))) => {
                text.push('\n');
                text.push_str(line);
            }
            (None, None) => {}
        }
    }
    let items = raw
        .into_iter()
        .filter_map(|(status, text)| {
            let rest = text.strip_suffix(&format!(" ({status})"))?;
            let (id, content) = rest.split_once(". ")?;
            Some(Item {
                id: id.to_string(),
                content: content.to_string(),
                status: status.to_string(),
            })
        })
        .collect();
    Some(items)
}

/// What compaction keeps of the list when `kept` (the messages the new session starts with)
/// holds no `todo` result of its own: the system message Hermes re-injects, made of the list
/// `transcript` ends with. `None` when there is nothing pending.
pub fn snapshot(transcript: &[Message], kept: &[Message]) -> Option<Message> {
    let own = kept
        .iter()
        .any(|m| m.role == Role::Tool && m.tool_name.as_deref() == Some("todo"));
    if own {
        return None;
    }
    let text = snapshot_text(&current(transcript))?;
    Some(Message::new(
        Role::System,
        Some(text),
        crate::util::unix_now(),
    ))
}

/// Keep the last of each id, in the position of that last one.
fn dedupe(todos: &[Value]) -> Vec<&Value> {
    let key = |i: usize, v: &Value| match v.as_object() {
        Some(o) => {
            let id = text(o, "id");
            if id.is_empty() { "?".to_string() } else { id }
        }
        None => format!("\0invalid{i}"),
    };
    let keys: Vec<String> = todos.iter().enumerate().map(|(i, v)| key(i, v)).collect();
    todos
        .iter()
        .enumerate()
        .filter(|(i, _)| !keys[i + 1..].contains(&keys[*i]))
        .map(|(_, v)| v)
        .collect()
}

/// Write `todos` over `items`: replace the list, or (merge) update by id and append.
fn write(items: Vec<Item>, todos: &[Value], merge: bool) -> Vec<Item> {
    let incoming = dedupe(todos);
    let mut out: Vec<Item> = if !merge {
        incoming.into_iter().map(Item::from_value).collect()
    } else {
        let mut items = items;
        for v in incoming {
            let Some(o) = v.as_object() else { continue };
            let id = text(o, "id");
            if id.is_empty() {
                continue;
            }
            match items.iter_mut().find(|i| i.id == id) {
                Some(item) => {
                    let content = text(o, "content");
                    if !content.is_empty() {
                        item.content = cap(&content);
                    }
                    let status = text(o, "status").to_lowercase();
                    if STATUSES.contains(&status.as_str()) {
                        item.status = status;
                    }
                }
                None => items.push(Item::from_value(v)),
            }
        }
        items
    };
    out.truncate(MAX_ITEMS);
    out
}

impl Tool for Todo {
    fn name(&self) -> &str {
        "todo"
    }

    fn description(&self) -> &str {
        "This session's task list, for work of three steps or more or several requests at \
         once. Without arguments it reads the list. 'todos' writes items {id, content, status: \
         pending|in_progress|completed|cancelled}: merge=false (the default) replaces the list, \
         merge=true updates items by id and adds new ones. The order is the priority; one item \
         in_progress at a time; mark an item completed as soon as it is; cancel one that failed \
         and add its replacement. Returns the whole list."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "description": "Items to write; omit to read the list.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "content": {"type": "string"},
                            "status": {"type": "string", "enum": STATUSES}
                        },
                        "required": ["id", "content", "status"]
                    }
                },
                "merge": {"type": "boolean", "description": "Update by id instead of replacing the list.", "default": false}
            },
            "required": []
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        Start::Done(call(ctx.transcript, args))
    }
}

fn call(transcript: &[Message], args: &Value) -> ToolResult {
    let items = current(transcript);
    let merge = args.get("merge").and_then(Value::as_bool).unwrap_or(false);
    let items = match args.get("todos") {
        None | Some(Value::Null) => items,
        Some(Value::Array(list)) => write(items, list, merge),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Array(list)) => write(items, &list, merge),
            _ => {
                return ToolResult::error(
                    "todos must be a list of objects, got unparseable string",
                );
            }
        },
        Some(other) => {
            let kind = match other {
                Value::Bool(_) => "bool",
                Value::Number(_) => "number",
                _ => "object",
            };
            return ToolResult::error(format!("todos must be a list, got {kind}"));
        }
    };
    let count = |s: &str| items.iter().filter(|i| i.status == s).count();
    let summary = json!({
        "total": items.len(), "pending": count("pending"), "in_progress": count("in_progress"),
        "completed": count("completed"), "cancelled": count("cancelled"),
    });
    let list: Vec<Value> = items.iter().map(Item::json).collect();
    let line = format!(
        "{} task(s) · {} done",
        items.len(),
        count("completed") + count("cancelled")
    );
    let mut result = ToolResult::new(json!({"todos": list, "summary": summary}), line);
    result.event_fields.insert("todos".into(), json!(list));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result_message(content: &Value) -> Message {
        let mut m = Message::new(Role::Tool, Some(content.to_string()), 0.0);
        m.tool_name = Some("todo".into());
        m
    }

    #[test]
    fn the_list_is_written_merged_and_read_back_from_the_transcript() {
        let first = call(
            &[],
            &json!({"todos": [{"id": "1", "content": "plan", "status": "in_progress"},
                              {"id": "2", "content": "build", "status": "weird"},
                              {"id": "1", "content": "plan again", "status": "pending"}]}),
        );
        assert_eq!(
            first.content["todos"],
            json!([{"id": "2", "content": "build", "status": "pending"},
                   {"id": "1", "content": "plan again", "status": "pending"}])
        );
        assert_eq!(first.event_fields["todos"], first.content["todos"]);
        let transcript = [result_message(&first.content)];
        let merged = call(
            &transcript,
            &json!({"merge": true, "todos": [{"id": "2", "status": "completed"}, {"id": "3", "content": "ship"}]}),
        );
        assert_eq!(merged.content["summary"]["total"], 3);
        assert_eq!(merged.content["todos"][0]["status"], "completed");
        assert_eq!(merged.content["todos"][2]["content"], "ship");
        assert_eq!(merged.summary, "3 task(s) · 1 done");
        let transcript = [
            result_message(&first.content),
            result_message(&merged.content),
        ];
        assert_eq!(call(&transcript, &json!({})).content, merged.content);
        assert!(
            call(&[], &json!({"todos": 5}))
                .error
                .unwrap()
                .contains("must be a list")
        );
        assert!(call(&[], &json!({"todos": "[{"})).error.is_some());
        assert_eq!(call(&[], &Value::Null).content["summary"]["total"], 0);
        let long = "x".repeat(5000);
        let capped = call(&[], &json!({"todos": [{"id": "a", "content": long}]}));
        assert_eq!(
            capped.content["todos"][0]["content"]
                .as_str()
                .unwrap()
                .chars()
                .count(),
            MAX_CONTENT_CHARS
        );
    }

    #[test]
    fn compaction_keeps_the_active_items_as_hermes_reinjects_them() {
        let list = call(
            &[],
            &json!({"todos": [{"id": "1", "content": "plan", "status": "completed"},
                              {"id": "2", "content": "build. then\ntest", "status": "in_progress"},
                              {"id": "3", "content": "ship", "status": "pending"}]}),
        );
        let transcript = [result_message(&list.content)];
        let kept = snapshot(&transcript, &[]).unwrap();
        assert_eq!(
            kept.content.as_deref().unwrap(),
            "[Your active task list was preserved across context compression]\n\
             - [>] 2. build. then\ntest (in_progress)\n- [ ] 3. ship (pending)"
        );
        // A new session starting with the snapshot reads the list from it.
        let read = call(std::slice::from_ref(&kept), &json!({}));
        assert_eq!(
            read.content["todos"],
            json!([{"id": "2", "content": "build. then\ntest", "status": "in_progress"},
                   {"id": "3", "content": "ship", "status": "pending"}])
        );
        // Kept messages with a todo result of their own, or nothing active: no snapshot.
        assert!(snapshot(&transcript, &transcript).is_none());
        let done = call(
            &[],
            &json!({"todos": [{"id": "1", "content": "x", "status": "completed"}]}),
        );
        assert!(snapshot(&[result_message(&done.content)], &[]).is_none());
    }
}
