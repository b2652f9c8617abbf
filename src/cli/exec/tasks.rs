//! The tasks of `exec --tasks FILE.jsonl` and the results file their records go to.
//!
//! A tasks file holds one JSON object per line: `id` (a string or number, unique) and `prompt`
//! (a non-empty string) are required; `cwd`, `timeout` (seconds), `model` and `resume` (a
//! stored session id or title) are optional; other fields are ignored; blank lines are
//! skipped. A file with any bad line is refused as a whole, each bad line named.
//!
//! The results file gets one record per task as it finishes. A continuation (`--continue`)
//! reads it back and skips every task whose record says it finished (any status but
//! `interrupted`); a last line cut short by a kill is ignored.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::record::Status;
use crate::methods::params::PROMPT_MAX;

/// Largest tasks or results file read.
pub const FILE_LIMIT: u64 = 256 << 20;
/// Bad lines named before the rest are only counted.
const ERRORS_SHOWN: usize = 20;

#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub prompt: String,
    pub cwd: Option<PathBuf>,
    pub timeout: Option<Duration>,
    pub model: Option<String>,
    pub resume: Option<String>,
}

impl Task {
    /// A task run by `exec PROMPT` (no id).
    pub fn single(prompt: String, cwd: Option<PathBuf>, resume: Option<String>) -> Task {
        Task {
            id: String::new(),
            prompt,
            cwd,
            timeout: None,
            model: None,
            resume,
        }
    }
}

/// Why a prompt (`what`) is refused for its length: `prompt.submit`'s limit, said up front.
pub fn too_long(what: &str) -> String {
    format!(
        "{what} is longer than {PROMPT_MAX} bytes ({} MiB), the most a prompt may be",
        PROMPT_MAX >> 20
    )
}

/// The text of a file of at most [`FILE_LIMIT`] bytes; `None` when there is none.
pub fn read_limited(path: &Path) -> Result<Option<String>, String> {
    crate::util::read_regular(path, FILE_LIMIT).map_err(|e| format!("{}: {e}", path.display()))
}

/// The tasks of a tasks file's text, or every problem found (`line N: …`).
pub fn parse(text: &str) -> Result<Vec<Task>, Vec<String>> {
    let mut tasks = Vec::new();
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line) {
            Ok(task) if !seen.insert(task.id.clone()) => {
                errors.push(format!("line {}: duplicate id {:?}", i + 1, task.id));
            }
            Ok(task) => tasks.push(task),
            Err(e) => errors.push(format!("line {}: {e}", i + 1)),
        }
    }
    if tasks.is_empty() && errors.is_empty() {
        errors.push("no tasks".to_string());
    }
    if errors.is_empty() {
        return Ok(tasks);
    }
    if errors.len() > ERRORS_SHOWN {
        let more = errors.len() - ERRORS_SHOWN;
        errors.truncate(ERRORS_SHOWN);
        errors.push(format!("… and {more} more bad lines"));
    }
    Err(errors)
}

fn parse_line(line: &str) -> Result<Task, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(o) = v else {
        return Err("not a JSON object".to_string());
    };
    let id = match o.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => return Err("\"id\" must be a non-empty string or a number".to_string()),
        None => return Err("missing \"id\"".to_string()),
    };
    let prompt = match o.get("prompt") {
        Some(Value::String(s)) if s.len() > PROMPT_MAX => return Err(too_long("\"prompt\"")),
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(_) => return Err("\"prompt\" must be a non-empty string".to_string()),
        None => return Err("missing \"prompt\"".to_string()),
    };
    let text = |key: &str| -> Result<Option<String>, String> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(format!("\"{key}\" must be a non-empty string")),
        }
    };
    let timeout = match o.get("timeout") {
        None | Some(Value::Null) => None,
        Some(t) => match t.as_f64() {
            Some(secs) if secs > 0.0 && secs <= super::TIMEOUT_MAX_S => {
                Some(Duration::from_secs_f64(secs))
            }
            _ => {
                return Err(format!(
                    "\"timeout\" must be seconds in (0, {}]",
                    super::TIMEOUT_MAX_S
                ));
            }
        },
    };
    Ok(Task {
        id,
        prompt,
        cwd: text("cwd")?.map(PathBuf::from),
        timeout,
        model: text("model")?,
        resume: text("resume")?,
    })
}

/// A directory name for a task id, unique per id: what is not a letter, digit, `-`, `_` or `.`
/// becomes `_` (and a leading `.` too, so no id names `..`), and a changed name gets a hash of
/// the id so two ids never share a directory.
pub fn dir_name(id: &str) -> String {
    let mut name: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.starts_with('.') {
        name.replace_range(..1, "_");
    }
    if name != id {
        name.push_str(&format!("-{:08x}", stable_hash(id) as u32));
    }
    name
}

/// FNV-1a of a task id: the same across runs, builds and machines, which a continuation and
/// the shards' assignment rely on.
pub fn stable_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The tasks a results file records as finished, with their stored session ids.
pub fn finished(text: &str) -> HashMap<String, Option<String>> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| {
            r["status"]
                .as_str()
                .and_then(Status::from_name)
                .is_some_and(|s| s != Status::Interrupted)
        })
        .filter_map(|r| {
            let session = r["session_id"].as_str().map(str::to_string);
            r["task_id"].as_str().map(|id| (id.to_string(), session))
        })
        .collect()
}

/// Where records are appended, one line each, written as one `write` so a kill leaves whole
/// lines (at most the last one cut short).
pub struct Results {
    file: std::fs::File,
}

impl Results {
    /// Opens `path` for appending (mode 0600 when created); a last line cut short by a kill is
    /// ended first so the next record starts on its own line.
    pub fn open(path: &Path, existing: &str) -> Result<Results, String> {
        let mut file = crate::util::open_file(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600),
            path,
            0,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        if !existing.is_empty() && !existing.ends_with('\n') {
            file.write_all(b"\n")
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(Results { file })
    }

    pub fn write(&mut self, record: &Value) -> std::io::Result<()> {
        let mut line = record.to_string();
        line.push('\n');
        self.file.write_all(line.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tasks_and_names_every_bad_line() {
        let good = "{\"id\":\"a\",\"prompt\":\"hi\"}\n\n{\"id\":2,\"prompt\":\"$ ls\",\"timeout\":1.5,\"cwd\":\"/tmp\",\"extra\":1}\n";
        let tasks = parse(good).unwrap();
        assert_eq!(tasks.len(), 2);
        assert_eq!(tasks[1].id, "2");
        assert_eq!(tasks[1].timeout, Some(Duration::from_millis(1500)));
        assert_eq!(tasks[1].cwd.as_deref(), Some(Path::new("/tmp")));

        let bad = "{\"id\":\"a\",\"prompt\":\"hi\"}\nnot json\n[1]\n{\"prompt\":\"x\"}\n{\"id\":\"b\"}\n{\"id\":\"a\",\"prompt\":\"again\"}\n{\"id\":\"c\",\"prompt\":\"x\",\"timeout\":-1}\n{\"id\":\"d\",\"prompt\":\"\"}\n";
        let errors = parse(bad).unwrap_err();
        assert_eq!(errors.len(), 7, "{errors:?}");
        assert!(errors[0].starts_with("line 2: invalid JSON"), "{errors:?}");
        assert_eq!(errors[1], "line 3: not a JSON object");
        assert_eq!(errors[2], "line 4: missing \"id\"");
        assert_eq!(errors[3], "line 5: missing \"prompt\"");
        assert_eq!(errors[4], "line 6: duplicate id \"a\"");
        assert!(errors[5].starts_with("line 7: \"timeout\""), "{errors:?}");
        assert!(errors[6].starts_with("line 8: \"prompt\""), "{errors:?}");
        assert_eq!(parse("\n \n").unwrap_err(), vec!["no tasks".to_string()]);
        let many: String = (0..30).map(|_| "x\n").collect();
        let errors = parse(&many).unwrap_err();
        assert_eq!(errors.len(), ERRORS_SHOWN + 1);
        assert_eq!(errors[ERRORS_SHOWN], "… and 10 more bad lines");
    }

    #[test]
    fn finished_tasks_are_those_with_a_final_record() {
        let text = "{\"task_id\":\"a\",\"status\":\"done\"}\n{\"task_id\":\"b\",\"status\":\"interrupted\"}\n{\"task_id\":\"c\",\"status\":\"timeout\"}\n{\"task_id\":\"d\",\"sta";
        let ids = finished(text);
        assert_eq!(ids.len(), 2);
        assert!(ids.contains_key("a") && ids.contains_key("c"));
    }

    #[test]
    fn task_ids_become_safe_directory_names() {
        assert_eq!(dir_name("django__django-1234"), "django__django-1234");
        assert!(dir_name("../etc/passwd").starts_with("_._etc_passwd-"));
        assert!(dir_name(".hidden").starts_with("_hidden-"));
        assert_ne!(dir_name("a b"), dir_name("a_b"));
        assert_eq!(dir_name("a b"), dir_name("a b"));
    }
    #[test]
    fn a_prompt_over_prompt_submits_limit_is_a_bad_line() {
        let long = "z".repeat(PROMPT_MAX + 1);
        let text = format!("{}\n", serde_json::json!({"id": "big", "prompt": long}));
        let errors = parse(&text).unwrap_err();
        assert_eq!(
            errors,
            ["line 1: \"prompt\" is longer than 1048576 bytes (1 MiB), the most a prompt may be"]
        );
        let fits = format!(
            "{}\n",
            serde_json::json!({"id": "ok", "prompt": "z".repeat(PROMPT_MAX)})
        );
        assert_eq!(parse(&fits).unwrap()[0].prompt.len(), PROMPT_MAX);
    }
}
