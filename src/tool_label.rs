//! The line a person reads for a tool call (`tool.start`'s `context`, a resumed transcript's
//! rows), phrased as Hermes phrases it (`agent/display.py`): a verb for the built-in tools
//! ("Reading app.py L10-29", "Running make + 2 commands", "Updating tasks planning 3 task(s)"),
//! the call's main argument otherwise. Pure.

use serde_json::Value;

/// Longest label, in characters (Hermes' gateway asks for 80).
const LABEL_CHARS_MAX: usize = 80;

/// Hermes' verb for a built-in tool.
fn verb(tool: &str) -> Option<&'static str> {
    Some(match tool {
        "web_search" => "Searching the web",
        "web_extract" => "Reading",
        "read_file" => "Reading",
        "write_file" => "Writing",
        "patch" => "Editing",
        "search_files" => "Searching files",
        "terminal" => "Running",
        "execute_code" => "Running code",
        "vision_analyze" => "Looking at the image",
        "session_search" => "Searching past sessions",
        "skill_view" => "Reading skill",
        "skills_list" => "Listing skills",
        "skill_manage" => "Updating skill",
        "delegate_task" => "Delegating",
        "clarify" => "Asking",
        "memory" => "Updating memory",
        "todo" => "Updating tasks",
        _ => return None,
    })
}

/// The label of a call to `tool` with `args`; `None` when nothing describes it.
pub fn label(tool: &str, args: &Value) -> Option<String> {
    let preview = preview(tool, args);
    let Some(verb) = verb(tool) else {
        return preview;
    };
    Some(match preview {
        _ if matches!(tool, "skills_list" | "session_search") => verb.to_string(),
        None => verb.to_string(),
        Some(p) if matches!(tool, "web_search" | "search_files") => format!("{verb} for {p}"),
        Some(p) => format!("{verb} {p}"),
    })
}

/// The call's main argument, shortened (Hermes' `build_tool_preview`).
fn preview(tool: &str, args: &Value) -> Option<String> {
    let text = |key: &str| args.get(key).and_then(Value::as_str);
    let shown = match tool {
        "process" => {
            let mut parts: Vec<String> = Vec::new();
            let action = text("action").unwrap_or("");
            parts.extend((!action.is_empty()).then(|| action.to_string()));
            if let Some(sid) = text("session_id").filter(|s| !s.is_empty()) {
                parts.push(sid.chars().take(16).collect());
            }
            if let Some(data) = text("data").filter(|s| !s.is_empty()) {
                parts.push(format!(
                    "\"{}\"",
                    one_line(&data.chars().take(20).collect::<String>())
                ));
            }
            let timeout = args.get("timeout").filter(|t| !t.is_null());
            if let Some(t) = timeout.filter(|_| action == "wait") {
                parts.push(format!(
                    "{}s",
                    t.as_str().map_or(t.to_string(), str::to_string)
                ));
            }
            return (!parts.is_empty()).then(|| parts.join(" "));
        }
        "todo" => {
            let count = args.get("todos").map(|t| t.as_array().map_or(0, Vec::len));
            let merge = args.get("merge").and_then(Value::as_bool).unwrap_or(false);
            return Some(match count {
                None => "reading task list".to_string(),
                Some(n) if merge => format!("updating {n} task(s)"),
                Some(n) => format!("planning {n} task(s)"),
            });
        }
        "terminal" => shell_summary(text("command")?),
        "read_file" => {
            let path = text("path")?;
            let name = path.replace('\\', "/");
            let name = name
                .rsplit('/')
                .next()
                .filter(|n| !n.is_empty())
                .unwrap_or(path);
            let offset = args
                .get("offset")
                .and_then(Value::as_i64)
                .filter(|o| *o > 0);
            let limit = args.get("limit").and_then(Value::as_i64);
            match (offset, limit) {
                (None, _) => name.to_string(),
                (Some(o), Some(l)) if l > 1 => format!("{name} L{o}-{}", o + l - 1),
                (Some(o), _) => format!("{name} L{o}"),
            }
        }
        "session_search" => {
            let query = one_line(text("query").unwrap_or(""));
            let short: String = query.chars().take(25).collect();
            let more = if query.chars().count() > 25 {
                "..."
            } else {
                ""
            };
            return Some(format!("recall: \"{short}{more}\""));
        }
        "memory" => {
            let target = text("target").unwrap_or("");
            let quoted = |key: &str, n: usize| {
                let t = one_line(text(key).unwrap_or(""));
                let more = if key == "content" && t.chars().count() > n {
                    "..."
                } else {
                    ""
                };
                (t.chars().take(n).collect::<String>(), more)
            };
            return Some(match text("action").unwrap_or("") {
                "add" => {
                    let (t, more) = quoted("content", 25);
                    format!("+{target}: \"{t}{more}\"")
                }
                "replace" => format!("~{target}: \"{}\"", quoted("old_text", 20).0),
                "remove" => format!("-{target}: \"{}\"", quoted("old_text", 20).0),
                other => other.to_string(),
            });
        }
        // A batch: how many and each goal, short (one task shows its goal, below).
        "delegate_task" if args["tasks"].as_array().is_some_and(|t| !t.is_empty()) => {
            let tasks = args["tasks"].as_array().map_or(&[][..], Vec::as_slice);
            let goals: Vec<String> = tasks
                .iter()
                .map(|t| {
                    let goal = one_line(t["goal"].as_str().unwrap_or("?"));
                    let short: String = goal.chars().take(40).collect();
                    let more = if goal.chars().count() > 40 { "..." } else { "" };
                    format!("{short}{more}")
                })
                .collect();
            format!("{} tasks: {}", tasks.len(), goals.join(" | "))
        }
        "skill_view" => {
            let name = one_line(text("name").unwrap_or(""));
            match text("file_path").map(one_line) {
                Some(f) if name.is_empty() => f,
                Some(f) => format!("{name} → {f}"),
                None => name,
            }
        }
        _ => {
            let key = match tool {
                "web_search" => "query",
                "read_file" | "write_file" | "patch" => "path",
                "search_files" => "pattern",
                "vision_analyze" | "clarify" => "question",
                "skills_list" => "category",
                "skill_manage" => "name",
                "delegate_task" => "goal",
                "execute_code" => "code",
                _ => [
                    "query", "text", "command", "path", "name", "prompt", "code", "goal",
                ]
                .into_iter()
                .find(|k| args.get(*k).is_some())?,
            };
            let value = match args.get(key)? {
                Value::Array(items) => items.first().cloned().unwrap_or(Value::Null),
                v => v.clone(),
            };
            one_line(
                value
                    .as_str()
                    .map_or(value.to_string(), str::to_string)
                    .as_str(),
            )
        }
    };
    (!shown.is_empty()).then(|| clip(&shown))
}

fn clip(text: &str) -> String {
    if text.chars().count() <= LABEL_CHARS_MAX {
        return text.to_string();
    }
    let head: String = text.chars().take(LABEL_CHARS_MAX - 3).collect();
    head + "..."
}

/// Whitespace, newlines included, collapsed to single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A shell command as Hermes shows it: its first real command, and how many more follow
/// (`cd`, `export` and such, redirections and a trailing `| head` left out).
fn shell_summary(command: &str) -> String {
    let original = one_line(command);
    let segments = split_compound(&original);
    if segments.len() <= 1 {
        let only = segments.first().map_or(original.clone(), |s| clean(s));
        return if only.is_empty() { original } else { only };
    }
    let core: Vec<String> = segments
        .iter()
        .map(|s| clean(s))
        .filter(|c| !c.is_empty() && !SILENT.contains(&head_word(c).as_str()) && !is_echo_marker(c))
        .collect();
    match core.len() {
        0 => original,
        1 => core[0].clone(),
        n => format!(
            "{} + {} {}",
            core[0],
            n - 1,
            if n == 2 { "command" } else { "commands" }
        ),
    }
}

/// Commands that only set the stage.
const SILENT: [&str; 11] = [
    "cd", "pushd", "popd", "export", "set", "unset", "source", ".", "true", "false", ":",
];
/// Commands that only trim what the one before printed, after a pipe.
const PIPE_TAILS: [&str; 5] = ["head", "tail", "wc", "sort", "uniq"];

/// `text` cut where `separator` (given the characters and a position outside quotes) says a
/// separator of that many characters starts; the quotes are kept in the pieces, empty pieces
/// left out.
fn split_outside_quotes(text: &str, separator: impl Fn(&[char], usize) -> usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut pieces = Vec::new();
    let mut piece = String::new();
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let ch = chars[i];
        let cut = if quote.is_none() {
            separator(&chars, i)
        } else {
            0
        };
        if cut > 0 {
            pieces.extend((!piece.trim().is_empty()).then(|| std::mem::take(&mut piece)));
            piece.clear();
            i += cut;
            continue;
        }
        match quote {
            Some(q) if ch == q && (i == 0 || chars[i - 1] != '\\') => quote = None,
            None if ch == '\'' || ch == '"' => quote = Some(ch),
            _ => {}
        }
        piece.push(ch);
        i += 1;
    }
    pieces.extend((!piece.trim().is_empty()).then_some(piece));
    pieces
}

/// Words split on blanks outside quotes (the quotes kept).
fn words(segment: &str) -> Vec<String> {
    split_outside_quotes(segment, |c, i| usize::from(c[i].is_whitespace()))
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// `segment` without a trailing `| head`-like pipe.
fn strip_pipe_tail(segment: &str) -> String {
    let w = words(segment);
    let end = (0..w.len())
        .find(|&i| {
            w[i] == "|"
                && w.get(i + 1)
                    .is_some_and(|n| PIPE_TAILS.contains(&basename(n)))
        })
        .unwrap_or(w.len());
    w[..end].join(" ").trim().to_string()
}

/// The command split at `&&`, `||`, `;` and newlines outside quotes, each without a trailing
/// `| head`-like pipe.
fn split_compound(command: &str) -> Vec<String> {
    let operator = |c: &[char], i: usize| match (c[i], c.get(i + 1)) {
        ('&', Some('&')) | ('|', Some('|')) => 2,
        (';' | '\n', _) => 1,
        _ => 0,
    };
    split_outside_quotes(command, operator)
        .iter()
        .map(|segment| strip_pipe_tail(segment.trim()))
        .filter(|segment| !segment.is_empty())
        .collect()
}

/// The command word, past `NAME=value` assignments.
fn head_word(segment: &str) -> String {
    let w = words(segment);
    let is_assignment = |word: &str| {
        let name = word.split('=').next().unwrap_or("");
        word.contains('=')
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    w.iter()
        .find(|word| !is_assignment(word))
        .map_or(String::new(), |word| basename(word).to_string())
}

/// `segment` without its redirections (`> file`, `2>&1`, `< in`).
fn clean(segment: &str) -> String {
    let w = words(segment);
    let mut out = Vec::new();
    let mut i = 0;
    while i < w.len() {
        let word = w[i].as_str();
        let digits = word.trim_start_matches(|c: char| c.is_ascii_digit());
        if matches!(digits, ">" | ">>" | "<") {
            i += 2;
            continue;
        }
        let dup = digits
            .strip_prefix(">&")
            .or_else(|| digits.strip_prefix("<&"));
        if dup.is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())) {
            i += 1;
            continue;
        }
        out.push(word);
        i += 1;
    }
    out.join(" ").trim().to_string()
}

/// An `echo` that only marks where output starts or ends (`echo ---`, `echo "exit=$?"`).
fn is_echo_marker(segment: &str) -> bool {
    let w = words(segment);
    if w.first().map(|f| basename(f)) != Some("echo") {
        return false;
    }
    let rest = w[1..].join(" ");
    rest.contains("--")
        || rest.contains("_exit=")
        || rest.contains("PIPESTATUS")
        || ["$?", "${"].iter().any(|m| {
            rest.match_indices(m)
                .any(|(at, _)| at == 0 || matches!(rest.as_bytes()[at - 1], b' ' | b'\t' | b'='))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn l(tool: &str, args: Value) -> String {
        label(tool, &args).unwrap_or_default()
    }

    #[test]
    fn built_in_tools_read_as_hermes_labels_them() {
        assert_eq!(
            l("read_file", json!({"path": "src/app.py"})),
            "Reading app.py"
        );
        assert_eq!(
            l(
                "read_file",
                json!({"path": "a/b.rs", "offset": 10, "limit": 20})
            ),
            "Reading b.rs L10-29"
        );
        assert_eq!(
            l("write_file", json!({"path": "notes.txt"})),
            "Writing notes.txt"
        );
        assert_eq!(
            l("search_files", json!({"pattern": "fn main"})),
            "Searching files for fn main"
        );
        assert_eq!(
            l("todo", json!({"todos": [{}, {}, {}]})),
            "Updating tasks planning 3 task(s)"
        );
        assert_eq!(l("todo", json!({})), "Updating tasks reading task list");
        assert_eq!(
            l("todo", json!({"todos": [{}], "merge": true})),
            "Updating tasks updating 1 task(s)"
        );
        assert_eq!(
            l(
                "process",
                json!({"action": "wait", "session_id": "proc_0123456789abcdef99", "timeout": 15})
            ),
            "wait proc_0123456789a 15s"
        );
        assert_eq!(
            l("session_search", json!({"query": "x"})),
            "Searching past sessions"
        );
        assert_eq!(
            l(
                "memory",
                json!({"action": "add", "target": "user", "content": "likes tea"})
            ),
            "Updating memory +user: \"likes tea\""
        );
        assert_eq!(
            l("clarify", json!({"question": "which\none?"})),
            "Asking which one?"
        );
        assert_eq!(
            l(
                "delegate_task",
                json!({"tasks": [{"goal": "a"}, {"goal": "b\nc"}]})
            ),
            "Delegating 2 tasks: a | b c"
        );
        assert_eq!(
            l("delegate_task", json!({"goal": "fix it"})),
            "Delegating fix it"
        );
    }

    #[test]
    fn a_shell_command_shows_its_first_real_command_and_how_many_follow() {
        let run = |c: &str| l("terminal", json!({ "command": c }));
        assert_eq!(
            run("cd /srv && echo checking build && make 2>&1 | tail -5 && echo ---"),
            "Running echo checking build + 1 command"
        );
        assert_eq!(
            run("echo checking build; make; make test; ls"),
            "Running echo checking build + 3 commands"
        );
        assert_eq!(run("ls -la > out.txt"), "Running ls -la");
        assert_eq!(run("export A=1; cargo test"), "Running cargo test");
        assert_eq!(run("echo 'a && b'"), "Running echo 'a && b'");
        assert_eq!(run("cd /tmp"), "Running cd /tmp");
    }

    #[test]
    fn other_tools_show_their_main_argument_and_long_ones_are_cut() {
        assert_eq!(l("mcp__x__search", json!({"query": "rust"})), "rust");
        assert_eq!(l("mcp__x__y", json!({"steps": 5})), "");
        let long = "w".repeat(200);
        let shown = l("mcp__x__y", json!({ "text": long }));
        assert_eq!(shown.chars().count(), LABEL_CHARS_MAX);
        assert!(shown.ends_with("..."));
    }
}
