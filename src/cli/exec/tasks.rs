//! The tasks of `exec --tasks FILE.jsonl` and the results file their records go to.
//!
//! A tasks file holds one JSON object per line: `id` (a string or number, unique) and `prompt`
//! (a non-empty string) are required; `cwd`, `timeout` (seconds), `model` and `resume` (a
//! stored session id or title) are optional; other fields are ignored; blank lines are
//! skipped. A file with any bad line is refused as a whole, each bad line named. The file is
//! read twice, a line at a time ([`Lines`]): once to check it ([`scan`]) before anything runs,
//! then as the tasks are dispatched ([`TaskStream`]), the shard's filter and a continuation's
//! skipping applied as it goes — so a file of a million tasks is never held.
//!
//! The results file gets one record per task as it finishes. A continuation (`--continue`)
//! reads it back ([`read_results`]) and skips every task whose record says it finished (any
//! status but `interrupted`); a last line cut short by a kill is cut off the file (its task
//! runs again), and any other line that is not a record refuses the run, named `FILE:LINE`.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::lines::{Line, Lines, Text};
use super::record::Status;
use super::shard::Shard;
use crate::methods::params::PROMPT_MAX;

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

/// Bad lines found by [`scan`]: the first [`ERRORS_SHOWN`] named, the rest counted.
#[derive(Default)]
struct Errors {
    shown: Vec<String>,
    more: usize,
}

impl Errors {
    fn push(&mut self, e: String) {
        if self.shown.len() < ERRORS_SHOWN {
            self.shown.push(e);
        } else {
            self.more += 1;
        }
    }

    fn into_result<T>(mut self, ok: T) -> Result<T, Vec<String>> {
        if self.shown.is_empty() {
            return Ok(ok);
        }
        if self.more > 0 {
            self.shown
                .push(format!("… and {} more bad lines", self.more));
        }
        Err(self.shown)
    }
}

/// A task id as the sets of ids hold it: two independent 64-bit hashes (both colliding among a
/// million ids: about 1e-27), 16 bytes whatever the id's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdKey(u64, u64);

pub fn id_key(id: &str) -> IdKey {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    IdKey(stable_hash(id), h.finish())
}

/// What [`scan`] found in a tasks file.
#[derive(Debug, Default, PartialEq)]
pub struct Scan {
    /// Tasks of this shard (every task without one).
    pub tasks: usize,
    /// Of those, recorded as finished by the results file.
    pub skipped: usize,
}

/// Checks every line of a tasks file, a line at a time: the problems (`line N: …`), or what it
/// holds for `shard`; `finished` is called with each finished task of the shard (its id).
/// Duplicate ids are looked for among the shard's tasks (an id's shard is always the same).
pub fn scan(
    lines: &mut Lines<impl std::io::Read>,
    shard: Option<Shard>,
    finished: &HashMap<IdKey, Option<String>>,
    mut on_finished: impl FnMut(&str, Option<&String>),
) -> Result<Scan, Vec<String>> {
    let mut errors = Errors::default();
    let mut seen = HashSet::new();
    let mut scan = Scan::default();
    let mut any = false;
    loop {
        let line = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                errors.push(format!("cannot read: {e}"));
                break;
            }
        };
        let number = line.number;
        let task = match task_of(line) {
            None => continue,
            Some(Ok(task)) => task,
            Some(Err(e)) => {
                errors.push(format!("line {number}: {e}"));
                continue;
            }
        };
        any = true;
        if shard.is_some_and(|s| !s.holds(&task.id)) {
            continue;
        }
        let key = id_key(&task.id);
        if !seen.insert(key) {
            errors.push(format!("line {number}: duplicate id {:?}", task.id));
            continue;
        }
        scan.tasks += 1;
        if let Some(session) = finished.get(&key) {
            scan.skipped += 1;
            on_finished(&task.id, session.as_ref());
        }
    }
    if !any && errors.shown.is_empty() {
        errors.push("no tasks".to_string());
    }
    errors.into_result(scan)
}

/// The task of a line: `None` for a blank one.
fn task_of(line: Line) -> Option<Result<Task, String>> {
    match line.text {
        Text::Line(text) if text.trim().is_empty() => None,
        Text::Line(text) => Some(parse_line(&text)),
        Text::TooLong => Some(Err(format!(
            "longer than {} MiB",
            super::lines::LINE_MAX >> 20
        ))),
        Text::NotUtf8 => Some(Err("not UTF-8".to_string())),
    }
}

/// The tasks of a checked tasks file as they are dispatched: this shard's, less those the
/// results file records as finished, each without a `cwd` given `WORKDIR/<id>` (created).
pub struct TaskStream<R> {
    lines: Lines<R>,
    shard: Option<Shard>,
    finished: HashMap<IdKey, Option<String>>,
    workdir: PathBuf,
    /// Why the file could not be read to its end after it was checked (it changed, or a read
    /// failed): the tasks after that point were not run.
    pub broken: Option<String>,
}

impl<R: std::io::Read> TaskStream<R> {
    pub fn new(
        lines: Lines<R>,
        shard: Option<Shard>,
        finished: HashMap<IdKey, Option<String>>,
        workdir: PathBuf,
    ) -> TaskStream<R> {
        TaskStream {
            lines,
            shard,
            finished,
            workdir,
            broken: None,
        }
    }

    pub fn next_task(&mut self) -> Option<Task> {
        while self.broken.is_none() {
            let line = match self.lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(e) => {
                    self.broken = Some(format!("cannot read: {e}"));
                    return None;
                }
            };
            let number = line.number;
            let mut task = match task_of(line) {
                None => continue,
                Some(Ok(task)) => task,
                Some(Err(e)) => {
                    self.broken = Some(format!("line {number} changed since it was checked: {e}"));
                    return None;
                }
            };
            if self.shard.is_some_and(|s| !s.holds(&task.id))
                || self.finished.contains_key(&id_key(&task.id))
            {
                continue;
            }
            let dir = match task.cwd.take() {
                Some(dir) => dir,
                None => {
                    let dir = self.workdir.join(dir_name(&task.id));
                    // One that cannot be made is refused by the batch, with the reason.
                    let _ = std::fs::create_dir_all(&dir);
                    dir
                }
            };
            task.cwd = Some(std::path::absolute(&dir).unwrap_or(dir));
            return Some(task);
        }
        None
    }
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

/// What a results file holds, read a line at a time.
#[derive(Debug, Default)]
pub struct Existing {
    /// Task records in it.
    pub records: usize,
    /// The tasks it records as finished (any status but `interrupted`), with their stored
    /// session ids when asked to keep them.
    pub finished: HashMap<IdKey, Option<String>>,
    /// A last line a kill cut short: where it starts. [`Results::open`] cuts it off; its task
    /// runs again.
    pub cut_short_at: Option<u64>,
    /// The last record is whole but has no newline after it.
    pub unended: bool,
}

/// The record of a task a results line holds, if it is one: `(task id, status, session id)`.
pub fn record_of(text: &str) -> Option<(String, Status, Option<String>)> {
    let r: Value = serde_json::from_str(text).ok()?;
    if r["type"] != "exec.result" {
        return None;
    }
    let status = r["status"].as_str().and_then(Status::from_name)?;
    let id = r["task_id"].as_str()?.to_string();
    Some((id, status, r["session_id"].as_str().map(str::to_string)))
}

/// Reads a results file: every line a task's record, save blank ones and a last line a kill
/// cut short; any other line refuses it (`FILE:LINE: …`, the first [`ERRORS_SHOWN`] named).
/// An absent file holds nothing.
pub fn read_results(path: &Path, keep_sessions: bool) -> Result<Existing, Vec<String>> {
    let mut lines = match Lines::open(path) {
        Ok(Some(lines)) => lines,
        Ok(None) => return Ok(Existing::default()),
        Err(e) => return Err(vec![e]),
    };
    let mut existing = Existing::default();
    let mut errors = Errors::default();
    let name = path.display();
    loop {
        let line = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                errors.push(format!("{name}: cannot read: {e}"));
                break;
            }
        };
        let record = match &line.text {
            Text::Line(text) if text.trim().is_empty() => continue,
            Text::Line(text) => record_of(text),
            _ => None,
        };
        match record {
            Some((id, status, session)) => {
                existing.records += 1;
                existing.unended = !line.ended;
                let key = id_key(&id);
                if status == Status::Interrupted {
                    existing.finished.remove(&key);
                } else {
                    existing
                        .finished
                        .insert(key, session.filter(|_| keep_sessions));
                }
            }
            // Only the last line can lack its newline: what a SIGKILL cut off mid-write.
            None if !line.ended => existing.cut_short_at = Some(line.start),
            None => errors.push(format!(
                "{name}:{}: not a result record of a task",
                line.number
            )),
        }
    }
    errors.into_result(existing)
}

/// Where records are appended, one line each, written as one `write` so a kill leaves whole
/// lines (at most the last one cut short).
pub struct Results {
    file: std::fs::File,
}

impl Results {
    /// Opens `path` for appending (mode 0600 when created); a last line cut short by a kill is
    /// cut off, and a last record without its newline ended, so the next record starts on its
    /// own line.
    pub fn open(path: &Path, existing: &Existing) -> Result<Results, String> {
        let mut file = crate::util::open_file(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600),
            path,
            0,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        let failed = |e: std::io::Error| format!("{}: {e}", path.display());
        if let Some(at) = existing.cut_short_at {
            file.set_len(at).map_err(failed)?;
        } else if existing.unended {
            file.write_all(b"\n").map_err(failed)?;
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

    /// The tasks of a whole file's text, as `scan` then `TaskStream` give them.
    fn parse(text: &str) -> Result<Vec<Task>, Vec<String>> {
        let none = HashMap::new();
        scan(
            &mut Lines::new(text.as_bytes(), 8 << 20),
            None,
            &none,
            |_, _| {},
        )?;
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let work = std::env::temp_dir().join(format!("exec-tasks-{}-{n}", std::process::id()));
        let lines = Lines::new(text.as_bytes(), 8 << 20);
        let mut stream = TaskStream::new(lines, None, none, work.clone());
        let mut tasks = Vec::new();
        while let Some(mut task) = stream.next_task() {
            // The working directory made for a task without one is not part of what it said.
            task.cwd = task.cwd.filter(|d| !d.starts_with(&work));
            tasks.push(task);
        }
        let _ = std::fs::remove_dir_all(&work);
        Ok(tasks)
    }

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
    fn finished_tasks_are_those_whose_last_record_is_final() {
        let dir = std::env::temp_dir().join(format!("exec-results-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.jsonl");
        let rec = |id: &str, status: &str| {
            format!(
                "{{\"type\":\"exec.result\",\"task_id\":\"{id}\",\"status\":\"{status}\",\"session_id\":\"s-{id}\"}}\n"
            )
        };
        let text = [
            rec("a", "done"),
            rec("b", "interrupted"),
            "\n".to_string(),
            rec("c", "timeout"),
            rec("d", "done"),
            rec("d", "interrupted"),
            "{\"type\":\"exec.result\",\"task_id\":\"e\",\"sta".to_string(),
        ]
        .concat();
        std::fs::write(&path, &text).unwrap();
        let existing = read_results(&path, true).unwrap();
        assert_eq!(existing.records, 5);
        assert_eq!(existing.finished.len(), 2);
        assert_eq!(existing.finished[&id_key("a")].as_deref(), Some("s-a"));
        assert!(existing.finished.contains_key(&id_key("c")));
        // The cut-short line is cut off when the file is opened to append.
        let cut = text.rfind('{').unwrap() as u64;
        assert_eq!(
            (existing.cut_short_at, existing.unended),
            (Some(cut), false)
        );
        let mut results = Results::open(&path, &existing).unwrap();
        results.write(&serde_json::json!({"n": 1})).unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        assert_eq!(after, format!("{}{{\"n\":1}}\n", &text[..cut as usize]));
        // Any other line that is not a record refuses the file, named FILE:LINE.
        std::fs::write(
            &path,
            format!("{}not json\n{}", rec("a", "done"), rec("b", "done")),
        )
        .unwrap();
        let errors = read_results(&path, false).unwrap_err();
        assert_eq!(
            errors,
            [format!(
                "{}:2: not a result record of a task",
                path.display()
            )]
        );
        std::fs::remove_dir_all(&dir).unwrap();
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
