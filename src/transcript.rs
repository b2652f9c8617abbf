//! Messages of a conversation, as stored and as shown, and the conventions written into them
//! (a steering note, a summary request and the summary that stands for earlier turns). A leaf:
//! the store, the models and the sessions all build on it, it builds on nothing of theirs.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How a `session.steer` text starts when it reaches the model as a user note.
pub const STEER_PREFIX: &str = "[The user adds, while you work:] ";
/// The system message of a request to summarise a conversation (compaction).
pub const SUMMARY_REQUEST: &str = "[compaction] Summarise the conversation below for your own later \
use: what the user wants, what was decided and done (commands run and their outcomes), and what \
is still open. Be concise; keep names, paths and numbers exactly.";
/// How a stored summary starts; the id of the session holding the full history follows.
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation; full history in session ";

/// How Hermes stores content made of parts (a prompt with images): this prefix, then the JSON
/// array of OpenAI-style parts (`text`, `image_url` with a data URL). NUL never starts typed text.
pub const PARTS_PREFIX: &str = "\u{0}json:";
/// What an image part weighs in the rough token count (about Anthropic's largest image).
const IMAGE_PART_CHARS: usize = 6_400;

/// The parts of stored content, when it is made of parts.
pub fn parts_of(content: &str) -> Option<Vec<Value>> {
    match serde_json::from_str(content.strip_prefix(PARTS_PREFIX)?) {
        Ok(Value::Array(parts)) => Some(parts),
        _ => None,
    }
}

/// Content made of `parts`, as Hermes stores it.
pub fn encode_parts(parts: &[Value]) -> String {
    format!("{PARTS_PREFIX}{}", Value::Array(parts.to_vec()))
}

/// Whether a part is an image (in any dialect's naming).
pub fn is_image_part(part: &Value) -> bool {
    matches!(
        part["type"].as_str(),
        Some("image_url" | "input_image" | "image")
    )
}

/// Content as a person reads it: the parts' text, each image as `[image]`.
pub fn plain_text(content: &str) -> std::borrow::Cow<'_, str> {
    let Some(parts) = parts_of(content) else {
        return content.into();
    };
    let shown: Vec<&str> = parts
        .iter()
        .map(|p| match p["text"].as_str() {
            Some(text) => text,
            None if is_image_part(p) => "[image]",
            None => "",
        })
        .filter(|t| !t.is_empty())
        .collect();
    shown.join("\n").into()
}

/// Content as Hermes' gateway shows it in a resumed or paged transcript (`_coerce_message_text`):
/// the parts' text, each image's URL (a `data:` URL included) on a line of its own after it, so a
/// client that renders images finds them; `[image]` for an image part without a URL.
pub fn shown_text(content: &str) -> std::borrow::Cow<'_, str> {
    let Some(parts) = parts_of(content) else {
        return content.into();
    };
    let mut out = String::new();
    for p in &parts {
        if let Some(text) = p["text"].as_str() {
            out.push_str(text);
        } else if is_image_part(p) {
            let url = p["image_url"]["url"]
                .as_str()
                .or_else(|| p["image_url"].as_str())
                .filter(|u| !u.is_empty());
            out.push('\n');
            out.push_str(url.unwrap_or("[image]"));
        }
    }
    out.into()
}

/// Characters content counts as in the rough token count: an image as a fixed weight, not its
/// base64 text.
pub fn weight_chars(content: &str) -> usize {
    match parts_of(content) {
        Some(parts) => parts
            .iter()
            .map(|p| match p["text"].as_str() {
                Some(text) => text.len(),
                None if is_image_part(p) => IMAGE_PART_CHARS,
                None => 0,
            })
            .sum(),
        None => content.len(),
    }
}

/// A steering note the user added while a turn ran.
pub fn is_steer(m: &Message) -> bool {
    m.role == Role::User
        && m.content
            .as_deref()
            .is_some_and(|c| c.starts_with(STEER_PREFIX))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Role {
        match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => Role::System,
        }
    }
}

/// Parts of an answer that its API wants back, unchanged, in later requests, kept in Hermes'
/// columns of the same names (JSON text): Anthropic's thinking blocks with their signatures
/// (`reasoning_details`), the Responses API's reasoning and message items.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Replay {
    pub reasoning_details: Option<String>,
    pub codex_reasoning_items: Option<String>,
    pub codex_message_items: Option<String>,
}

/// One row of `messages` (serialised in the journal, `store::Delta`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Option<String>,
    pub tool_call_id: Option<String>,
    /// JSON array text, as in Hermes' `messages.tool_calls`.
    pub tool_calls: Option<String>,
    pub tool_name: Option<String>,
    /// Unix seconds.
    pub timestamp: f64,
    pub token_count: Option<i64>,
    pub finish_reason: Option<String>,
    pub reasoning: Option<String>,
    /// What the model's API asked to have sent back with this answer.
    #[serde(default)]
    pub replay: Replay,
    /// The `messages` row already written for it (its partial row), if any: the
    /// commit then updates that row instead of inserting another.
    pub row_id: Option<i64>,
}

impl Message {
    pub fn new(role: Role, content: Option<String>, timestamp: f64) -> Self {
        Message {
            role,
            content,
            tool_call_id: None,
            tool_calls: None,
            tool_name: None,
            timestamp,
            token_count: None,
            finish_reason: None,
            reasoning: None,
            replay: Replay::default(),
            row_id: None,
        }
    }

    /// The display form the TUI renders; `None` for rows it does not show.
    pub fn display(&self) -> Vec<Value> {
        match self.role {
            Role::User => {
                let text = shown_text(self.content.as_deref().unwrap_or(""));
                vec![json!({"role": "user", "text": text})]
            }
            Role::Assistant => {
                let mut out = Vec::new();
                if let Some(text) = self.content.as_deref().filter(|t| !t.is_empty()) {
                    out.push(json!({"role": "assistant", "text": text}));
                }
                for call in self.parsed_tool_calls() {
                    out.push(json!({"role": "tool", "name": call.0, "context": call.1}));
                }
                out
            }
            // A compaction summary is shown; other system rows are not.
            Role::System => self
                .content
                .as_deref()
                .filter(|t| t.starts_with(SUMMARY_PREFIX))
                .and_then(|t| t.split_once('\n'))
                .map(|(_, summary)| vec![json!({"role": "system", "text": summary})])
                .unwrap_or_default(),
            Role::Tool => Vec::new(),
        }
    }

    /// (name, short description) of each tool call of this message.
    fn parsed_tool_calls(&self) -> Vec<(String, String)> {
        let Some(text) = self.tool_calls.as_deref() else {
            return Vec::new();
        };
        let Ok(Value::Array(calls)) = serde_json::from_str::<Value>(text) else {
            return Vec::new();
        };
        calls
            .iter()
            .map(|c| {
                let f = &c["function"];
                let name = f["name"].as_str().unwrap_or("tool").to_string();
                let args: Value = f["arguments"]
                    .as_str()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or(Value::Null);
                (name.clone(), tool_context(&name, &args))
            })
            .collect()
    }
}

/// A one-line description of a tool call: Hermes' label (`tool_label`), else its first text
/// argument (an MCP tool's `message`…), else `Calling NAME`. A person reads it (`tool.start`, a resumed transcript), so the model's
/// control characters are escaped visibly.
pub fn tool_context(name: &str, args: &Value) -> String {
    let line = crate::tool_label::label(name, args).unwrap_or_else(|| {
        let text = args.as_object().into_iter().flat_map(|o| o.values());
        let about = text
            .filter_map(Value::as_str)
            .map(str::trim)
            .find(|t| !t.is_empty());
        match about {
            Some(text) => crate::util::clip(text.lines().next().unwrap_or(""), 80),
            None => format!("Calling {name}"),
        }
    });
    crate::util::printable(&line)
}

/// The display form of a whole transcript.
pub fn display(messages: &[Message]) -> Vec<Value> {
    messages.iter().flat_map(Message::display).collect()
}

/// How much of a transcript one answer shows (a resume, a page of history).
#[derive(Debug, Clone, Copy)]
pub struct Page {
    /// Display rows at most.
    pub rows: usize,
    /// Text bytes at most (the first row is shown whatever its size).
    pub bytes: usize,
}

/// The display form of the newest messages before `before`, as far as `page` allows, and the
/// index of the first message shown (`before` when none): what a resume of a long session
/// shows, and where the page before it ends. Walks back only as far as it shows.
pub fn display_tail(messages: &[Message], before: usize, page: Page) -> (Vec<Value>, usize) {
    let before = before.min(messages.len());
    let mut rows: Vec<Value> = Vec::new();
    let mut bytes = 0usize;
    let mut first = before;
    for (i, m) in messages[..before].iter().enumerate().rev() {
        let shown = m.display();
        // What is shown counts (an image's URL too), so a page of images stays bounded.
        let size = m.content.as_deref().map_or(0, |c| match m.role {
            Role::User => shown_text(c).len(),
            _ => weight_chars(c),
        }) + m.tool_calls.as_deref().map_or(0, str::len);
        let full = rows.len() + shown.len() > page.rows || bytes + size > page.bytes;
        if !rows.is_empty() && !shown.is_empty() && full {
            break;
        }
        bytes += size;
        first = i;
        rows.extend(shown.into_iter().rev());
    }
    rows.reverse();
    (rows, first)
}

#[cfg(test)]
mod tests {
    use super::tool_context;
    use serde_json::json;

    #[test]
    fn content_with_an_image_reads_as_its_text_and_weighs_little() {
        use super::{encode_parts, plain_text, weight_chars};
        let big = format!("data:image/png;base64,{}", "A".repeat(100_000));
        let stored = encode_parts(&[
            json!({"type": "text", "text": "look"}),
            json!({"type": "image_url", "image_url": {"url": big}}),
        ]);
        assert_eq!(plain_text(&stored), "look\n[image]");
        assert_eq!(super::shown_text(&stored), format!("look\n{big}"));
        let no_url = encode_parts(&[json!({"type": "image"})]);
        assert_eq!(super::shown_text(&no_url), "\n[image]");
        assert!(weight_chars(&stored) < 10_000, "{}", weight_chars(&stored));
        assert_eq!(plain_text("plain"), "plain");
    }

    #[test]
    fn a_call_is_described_by_what_it_is_about() {
        let ctx = |args| tool_context("mcp__everything__echo", &args);
        assert_eq!(
            ctx(json!({"command": "ls -la\nmore", "path": "/x"})),
            "ls -la more"
        );
        assert_eq!(ctx(json!({"path": "/srv", "message": "hi"})), "/srv");
        // No known key: the first text argument, as an MCP tool's.
        assert_eq!(
            ctx(json!({"message": "hi from audit", "n": 2})),
            "hi from audit"
        );
        assert_eq!(ctx(json!({"a": "  ", "b": "second"})), "second");
        assert_eq!(ctx(json!({"steps": 5})), "Calling mcp__everything__echo");
        assert_eq!(ctx(json!("not an object")), "Calling mcp__everything__echo");
        assert_eq!(
            ctx(json!({"message": "\u{1b}[2Jboom"})),
            crate::util::printable("\u{1b}[2Jboom")
        );
    }
}
