//! Hermes' `patch`: `replace` mode (`path`, `old_string`, `new_string`, `replace_all`)
//! through the fuzzy matcher, and `patch` mode (a V4A multi-file patch, checked whole before
//! anything is written). CRLF files are matched as LF and written back as CRLF. The result is
//! `{success, diff, files_modified, files_created, files_deleted}` or `{success: false,
//! error}`; the diff goes to the TUI as `inline_diff`. The work goes on across steps (`Edit`):
//! reading a file, each matcher of the fuzzy chain, the copy with the replacement, the CRLF
//! encoding and the diff each go a bounded unit at a time (`text.rs`), so a big file never
//! holds the loop for more than the step budget.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::fuzzy::{self, Finder};
use super::text::{Differ, Encoder, Loaded, Loader, Splicer, Text};
use super::v4a::{self, Hunk, Op};
use super::{Advance, Stepped, resolve, shown, string_arg, write_ask, write_atomic};
use crate::tools::{JobId, Start, Tool, ToolContext, ToolResult};

#[derive(Default)]
pub struct Patch {
    edits: Stepped<Edit>,
}

/// A file the edit has read: its text as read (LF), whether it is CRLF, and what the edit
/// makes of it (`None` deletes; unset while unchanged).
struct Entry {
    old: Option<Text>,
    crlf: bool,
    new: Option<Option<Text>>,
}

impl Entry {
    fn current(&self) -> Option<&Text> {
        match &self.new {
            Some(new) => new.as_ref(),
            None => self.old.as_ref(),
        }
    }

    fn changed(&self) -> bool {
        self.new
            .as_ref()
            .is_some_and(|new| new.as_ref().map(|t| &t.s) != self.old.as_ref().map(|t| &t.s))
    }
}

/// What is left to plan, in order.
enum Task {
    Replace {
        file: PathBuf,
        arg: String,
        old: String,
        new: String,
        all: bool,
    },
    Add {
        file: PathBuf,
        arg: String,
        content: String,
    },
    Delete {
        file: PathBuf,
        arg: String,
    },
    Move {
        from: (PathBuf, String),
        to: (PathBuf, String),
    },
    /// A V4A update's hunks not yet applied (`changed`: one before them did change it).
    Update {
        file: PathBuf,
        arg: String,
        hunks: VecDeque<Hunk>,
        changed: bool,
    },
}

impl Task {
    fn file(&self) -> &Path {
        match self {
            Task::Replace { file, .. }
            | Task::Add { file, .. }
            | Task::Delete { file, .. }
            | Task::Update { file, .. } => file,
            Task::Move { from, .. } => &from.0,
        }
    }
}

/// The unit of work under way.
enum Busy {
    Idle,
    Load(PathBuf, Loader, Task),
    /// Matching a replacement or a hunk (`hint`: the hunk's, for a repeated match).
    Find(Finder, Task, Option<Hunk>),
    Splice(Splicer, Task),
    /// The plan is made: each changed file in turn, encoded, written and diffed.
    Encode(PathBuf, Encoder),
    Diff(PathBuf, Differ),
}

/// One patch call's work, advanced step after step until it has its result.
struct Edit {
    here: String,
    v4a: bool,
    tasks: VecDeque<Task>,
    files: BTreeMap<PathBuf, Entry>,
    renames: Vec<(PathBuf, PathBuf)>,
    created: Vec<String>,
    modified: Vec<String>,
    deleted: Vec<String>,
    /// How a replacement matched, when the TUI's line should say.
    how: Option<String>,
    /// V4A: what does not apply (nothing is written then) and how many real changes there are.
    errors: Vec<String>,
    real: usize,
    busy: Busy,
    /// The changed files not yet written.
    to_write: VecDeque<PathBuf>,
    planned: bool,
    diff: String,
    write_errors: Vec<String>,
}

impl Edit {
    fn new(here: &str, v4a: bool, tasks: VecDeque<Task>) -> Edit {
        Edit {
            here: here.to_string(),
            v4a,
            tasks,
            files: BTreeMap::new(),
            renames: Vec::new(),
            created: Vec::new(),
            modified: Vec::new(),
            deleted: Vec::new(),
            how: None,
            errors: Vec::new(),
            real: 0,
            busy: Busy::Idle,
            to_write: VecDeque::new(),
            planned: false,
            diff: String::new(),
            write_errors: Vec::new(),
        }
    }

    fn name(&self, file: &Path) -> String {
        shown(&self.here, file)
    }

    fn current(&self, file: &Path) -> Option<&Text> {
        self.files.get(file).and_then(Entry::current)
    }

    fn set(&mut self, file: &Path, text: Option<Text>) {
        if let Some(e) = self.files.get_mut(file) {
            e.new = Some(text);
        }
    }

    /// Whether `file` exists as the patch has it so far.
    fn exists(&self, file: &Path) -> bool {
        match self.files.get(file) {
            Some(e) => e.current().is_some(),
            None => file.exists(),
        }
    }

    /// A task failed: the whole call in replace mode, the task in a V4A patch.
    fn fail(&mut self, why: String) -> Option<ToolResult> {
        if self.v4a {
            self.errors.push(why);
            None
        } else {
            Some(ToolResult::unsuccessful(why))
        }
    }

    /// One unit of work: the result once the call is over.
    fn unit(&mut self, out_of_time: &dyn Fn() -> bool) -> Option<ToolResult> {
        match std::mem::replace(&mut self.busy, Busy::Idle) {
            Busy::Idle => self.next(),
            Busy::Load(file, mut loader, task) => match loader.advance(out_of_time) {
                None => {
                    self.busy = Busy::Load(file, loader, task);
                    None
                }
                Some(Ok(Loaded { text, crlf })) => {
                    let entry = Entry {
                        old: Some(text),
                        crlf,
                        new: None,
                    };
                    self.files.insert(file, entry);
                    self.tasks.push_front(task);
                    None
                }
                Some(Err(e)) => self.fail(e),
            },
            Busy::Find(mut finder, task, hunk) => {
                let Some(text) = self.current(task.file()) else {
                    return self.fail(format!("{}: file not found", task.file().display()));
                };
                match finder.advance(text, out_of_time) {
                    None => {
                        self.busy = Busy::Find(finder, task, hunk);
                        None
                    }
                    Some(Ok(decided)) => {
                        if let Task::Replace { .. } = task {
                            let count = decided.edits.len();
                            self.how = match (count, decided.strategy) {
                                (1, "exact") => None,
                                (n, "exact") => Some(format!("{n} replacements")),
                                (1, fuzzy) => Some(format!("matched {fuzzy}")),
                                (n, fuzzy) => Some(format!("{n} replacements, matched {fuzzy}")),
                            };
                        }
                        self.busy = Busy::Splice(Splicer::new(decided.edits), task);
                        None
                    }
                    Some(Err(e)) => self.not_matched(e, task, hunk),
                }
            }
            Busy::Splice(mut splicer, task) => {
                let text = self.current(task.file())?;
                match splicer.advance(text, out_of_time) {
                    None => {
                        self.busy = Busy::Splice(splicer, task);
                        None
                    }
                    Some(out) => self.spliced(task, out),
                }
            }
            Busy::Encode(file, mut encoder) => {
                let entry = self.files.get(&file)?;
                let lf = entry.current().map_or("", |t| t.s.as_str());
                match encoder.advance(lf, out_of_time) {
                    None => {
                        self.busy = Busy::Encode(file, encoder);
                        None
                    }
                    Some(crlf) => {
                        self.write(file, Some(crlf));
                        None
                    }
                }
            }
            Busy::Diff(file, mut differ) => {
                let entry = self.files.get(&file)?;
                let old = entry.old.as_ref().map_or("", |t| t.s.as_str());
                let new = entry.current().map_or("", |t| t.s.as_str());
                match differ.advance(old, new, out_of_time) {
                    None => self.busy = Busy::Diff(file, differ),
                    Some(d) => self.diff.push_str(&d),
                }
                None
            }
        }
    }

    /// Start the next task, or the next write once all are planned.
    fn next(&mut self) -> Option<ToolResult> {
        if self.planned {
            return self.write_next();
        }
        let Some(task) = self.tasks.pop_front() else {
            return self.plan_done();
        };
        let file = task.file().to_path_buf();
        if !self.files.contains_key(&file) && !matches!(task, Task::Move { .. }) {
            match Loader::open(&file) {
                Ok(Some(loader)) => self.busy = Busy::Load(file, loader, task),
                Ok(None) => {
                    let entry = Entry {
                        old: None,
                        crlf: false,
                        new: None,
                    };
                    self.files.insert(file, entry);
                    self.tasks.push_front(task);
                }
                Err(e) => return self.fail(e),
            }
            return None;
        }
        match task {
            Task::Replace {
                ref arg,
                ref old,
                ref new,
                all,
                ..
            } => {
                if self.current(&file).is_none() {
                    return self.fail(format!("File not found: {arg}"));
                }
                match Finder::new(&old.replace("\r\n", "\n"), &new.replace("\r\n", "\n"), all) {
                    Ok(finder) => self.busy = Busy::Find(finder, task, None),
                    Err(e) => return self.fail(e),
                }
            }
            Task::Add { arg, content, .. } => {
                if self.current(&file).is_some() {
                    return self.fail(format!("{arg}: file already exists (use Update File)"));
                }
                self.set(&file, Some(Text::new(&content)));
                self.created.push(self.name(&file));
                self.real += 1;
            }
            Task::Delete { arg, .. } => {
                if self.current(&file).is_none() {
                    return self.fail(format!("{arg}: file not found for deletion"));
                }
                self.set(&file, None);
                self.deleted.push(self.name(&file));
                self.real += 1;
            }
            Task::Move { from, to } => {
                self.real += 1;
                if !self.exists(&from.0) {
                    self.fail(format!("{}: source file not found for move", from.1));
                }
                if self.exists(&to.0) {
                    self.fail(format!(
                        "{}: destination already exists — move would overwrite",
                        to.1
                    ));
                }
                self.modified
                    .push(format!("{} -> {}", self.name(&from.0), self.name(&to.0)));
                self.renames.push((from.0, to.0));
            }
            Task::Update {
                file,
                arg,
                mut hunks,
                changed,
            } => {
                if self.current(&file).is_none() {
                    return self.fail(format!("{arg}: file not found"));
                }
                while hunks.front().is_some_and(|h| !h.changes()) {
                    hunks.pop_front();
                }
                let Some(hunk) = hunks.pop_front() else {
                    if changed {
                        self.modified.push(self.name(&file));
                    }
                    return None;
                };
                self.real += 1;
                let task = Task::Update {
                    file,
                    arg,
                    hunks,
                    changed: true,
                };
                return self.start_hunk(task, hunk);
            }
        }
        None
    }

    /// Apply one V4A hunk to the task's file: an addition at its hint, or a replacement.
    fn start_hunk(&mut self, task: Task, hunk: Hunk) -> Option<ToolResult> {
        let search = hunk.search();
        let replacement = hunk.replacement();
        let text = self.current(task.file())?;
        if search.trim().is_empty() {
            // Only additions: after the hint's line, else at the end.
            let at = match &hunk.hint {
                Some(hint) => match hint_at(&text.s, hint) {
                    Ok(i) => text.s[i..].find('\n').map_or(text.s.len(), |n| i + n + 1),
                    Err(e) => return self.hunk_failed(&task, e),
                },
                None => text.s.len(),
            };
            let mut with = String::new();
            if at > 0 && !text.s[..at].ends_with('\n') {
                with.push('\n');
            }
            with.push_str(&replacement);
            with.push('\n');
            self.busy = Busy::Splice(Splicer::new(vec![((at, at), with)]), task);
            return None;
        }
        match Finder::new(&search, &replacement, false) {
            Ok(finder) => self.busy = Busy::Find(finder, task, Some(hunk)),
            Err(e) => return self.hunk_failed(&task, format!("hunk did not apply — {e}")),
        }
        None
    }

    fn hunk_failed(&mut self, task: &Task, e: String) -> Option<ToolResult> {
        let arg = match task {
            Task::Update { arg, .. } => arg.as_str(),
            _ => "",
        };
        self.fail(format!("{arg}: {e}"))
    }

    /// The chain found nothing to replace (or too much): say why, or — a hunk's repeated
    /// match with a hint — take the first match after the hint.
    fn not_matched(&mut self, e: String, task: Task, hunk: Option<Hunk>) -> Option<ToolResult> {
        let text = self.current(task.file())?;
        let Some(hunk) = hunk else {
            // Replace mode: the error, with the nearest lines when nothing matched.
            let mut msg = e.clone();
            if let Task::Replace { old, .. } = &task
                && e.starts_with("Could not find")
            {
                let near = fuzzy::closest_lines(&old.replace("\r\n", "\n"), text);
                if !near.is_empty() {
                    msg.push_str("\n\nDid you mean one of these sections?\n");
                    msg.push_str(&near);
                }
            }
            return self.fail(msg);
        };
        let search = hunk.search();
        if let (true, Some(hint)) = (e.starts_with("Found"), &hunk.hint) {
            let found = hint_at(&text.s, hint).and_then(|i| {
                memchr::memmem::find(&text.s.as_bytes()[i..], search.as_bytes())
                    .map(|first| i + first)
                    .ok_or(e.clone())
            });
            return match found {
                Ok(at) => {
                    let edit = ((at, at + search.len()), hunk.replacement());
                    self.busy = Busy::Splice(Splicer::new(vec![edit]), task);
                    None
                }
                Err(e) => self.hunk_failed(&task, e),
            };
        }
        let mut msg = format!("hunk did not apply — {e}");
        let near = fuzzy::closest_lines(&search, text);
        if !near.is_empty() {
            msg.push_str("\n\nDid you mean one of these sections?\n");
            msg.push_str(&near);
        }
        self.hunk_failed(&task, msg)
    }

    /// A replacement or hunk is in: the file's new text; a V4A update goes on with its next
    /// hunk.
    fn spliced(&mut self, task: Task, out: Text) -> Option<ToolResult> {
        let file = task.file().to_path_buf();
        self.set(&file, Some(out));
        match task {
            Task::Replace { .. } => self.modified.push(self.name(&file)),
            update @ Task::Update { .. } => self.tasks.push_front(update),
            _ => {}
        }
        None
    }

    /// Every task is planned: refuse what does not apply, else start writing.
    fn plan_done(&mut self) -> Option<ToolResult> {
        if self.v4a {
            if self.errors.is_empty() && self.real == 0 {
                self.errors
                    .push("Patch contains no changes (only context lines were provided)".into());
            }
            if !self.errors.is_empty() {
                return Some(ToolResult::unsuccessful(format!(
                    "Patch validation failed (no files were modified):\n{}",
                    bullets(&self.errors)
                )));
            }
        }
        self.planned = true;
        self.to_write = self
            .files
            .iter()
            .filter(|(_, e)| e.changed())
            .map(|(f, _)| f.clone())
            .collect();
        None
    }

    /// Write the next changed file (CRLF files encoded first), then the moves, then the
    /// result.
    fn write_next(&mut self) -> Option<ToolResult> {
        let Some(file) = self.to_write.pop_front() else {
            return Some(self.finish());
        };
        let entry = self.files.get(&file)?;
        match entry.current() {
            Some(_) if entry.crlf => self.busy = Busy::Encode(file, Encoder::new()),
            Some(_) => self.write(file, None),
            None => self.write(file, None),
        }
        None
    }

    /// Write (or delete) `file` — `crlf`: its text encoded — and start its diff.
    fn write(&mut self, file: PathBuf, crlf: Option<String>) {
        let Some(entry) = self.files.get(&file) else {
            return;
        };
        let written = match (entry.current(), &crlf) {
            (Some(_), Some(bytes)) => write_creating(&file, bytes),
            (Some(text), None) => write_creating(&file, &text.s),
            (None, _) => std::fs::remove_file(&file),
        };
        match written {
            Ok(()) => self.busy = Busy::Diff(file.clone(), Differ::new(&self.name(&file))),
            Err(e) => self.write_errors.push(format!("{}: {e}", file.display())),
        }
    }

    fn finish(&mut self) -> ToolResult {
        for (from, to) in std::mem::take(&mut self.renames) {
            let moved = to
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::rename(&from, &to));
            match moved {
                Ok(()) => self.diff.push_str(&format!(
                    "# Moved: {} -> {}\n",
                    self.name(&from),
                    self.name(&to)
                )),
                Err(e) => {
                    self.write_errors
                        .push(format!("{} -> {}: {e}", from.display(), to.display()))
                }
            }
        }
        if !self.write_errors.is_empty() {
            return ToolResult::unsuccessful(format!(
                "Apply phase failed (state may be inconsistent — run `git diff` to assess):\n{}",
                bullets(&self.write_errors)
            ));
        }
        let diff = std::mem::take(&mut self.diff);
        let mut content = json!({"success": true, "diff": diff});
        for (key, list) in [
            ("files_modified", &self.modified),
            ("files_created", &self.created),
            ("files_deleted", &self.deleted),
        ] {
            if !list.is_empty() {
                content[key] = json!(list);
            }
        }
        let touched = self.modified.len() + self.created.len() + self.deleted.len();
        let mut summary = match (touched, self.modified.first()) {
            (1, Some(name)) => format!("patched {name}"),
            _ => format!("patched {touched} file(s)"),
        };
        if let Some(how) = &self.how {
            summary.push_str(&format!(" ({how})"));
        }
        let mut result = ToolResult::new(content, summary);
        if !diff.is_empty() {
            result
                .event_fields
                .insert("inline_diff".into(), json!(diff));
        }
        result
    }
}

impl Advance for Edit {
    fn advance(&mut self, ctx: &ToolContext<'_>) -> Option<ToolResult> {
        let out_of_time = || ctx.out_of_time();
        loop {
            if let Some(result) = self.unit(&out_of_time) {
                return Some(result);
            }
            if out_of_time() {
                return None;
            }
        }
    }
}

fn bullets(lines: &[String]) -> String {
    lines
        .iter()
        .map(|e| format!("  • {e}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn write_creating(file: &Path, text: &str) -> std::io::Result<()> {
    file.parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| write_atomic(file, text.as_bytes()))
}

/// Where the one occurrence of a hunk's hint starts.
fn hint_at(text: &str, hint: &str) -> Result<usize, String> {
    let mut hits = memchr::memmem::find_iter(text.as_bytes(), hint.as_bytes());
    match (hits.next(), hits.next()) {
        (Some(one), None) => Ok(one),
        (None, _) => Err(format!("context hint '{hint}' not found")),
        (Some(_), Some(_)) => Err(format!(
            "context hint '{hint}' is ambiguous ({} occurrences)",
            2 + hits.count()
        )),
    }
}

impl Tool for Patch {
    fn name(&self) -> &str {
        "patch"
    }

    fn toolset(&self) -> &str {
        "file"
    }

    fn description(&self) -> &str {
        "Edit files in place (not sed or awk in the terminal); returns the diff. mode='replace' \
         (the default) takes path, old_string and new_string: old_string must occur once \
         unless replace_all, and small differences of whitespace or indentation are forgiven. \
         mode='patch' takes a V4A patch, which may change several files."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": ["replace", "patch"], "default": "replace"},
                "path": {"type": "string", "description": "replace: the file."},
                "old_string": {"type": "string", "description": "replace: the text to change, with enough around it to be unique."},
                "new_string": {"type": "string", "description": "replace: what takes its place ('' deletes it)."},
                "replace_all": {"type": "boolean", "default": false, "description": "replace: change every occurrence."},
                "patch": {"type": "string", "description": "patch: V4A text, e.g.\n*** Begin Patch\n*** Update File: path\n@@ hint @@\n context\n-old line\n+new line\n*** End Patch"}
            },
            "required": ["mode"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let mode = match args.get("mode") {
            None | Some(Value::Null) => "replace",
            Some(Value::String(m)) => m.as_str(),
            Some(other) => {
                return Start::Done(ToolResult::unsuccessful(format!(
                    "patch: 'mode' must be 'replace' or 'patch', got {}",
                    super::kind(other)
                )));
            }
        };
        let here = super::here(ctx);
        let planned = match mode {
            "replace" => plan_replace(&here, args),
            "patch" => plan_v4a(&here, args),
            other => Err(ToolResult::unsuccessful(format!(
                "patch: unknown mode '{other}': use 'replace' or 'patch'"
            ))),
        };
        let (edit, paths) = match planned {
            Ok(p) => p,
            Err(result) => return Start::Done(result),
        };
        if !ctx.approved
            && let Some(ask) = paths.iter().find_map(|p| write_ask(ctx, p))
        {
            return Start::Ask(ask);
        }
        self.edits.start(ctx, edit)
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        self.edits.step(ctx, "patch: the edit was lost")
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        self.edits.cancel(job)
    }
}

/// The edit to make and the paths it writes (which may need approval).
type Plan = Result<(Edit, Vec<PathBuf>), ToolResult>;

fn plan_replace(here: &str, args: &Value) -> Plan {
    let path = string_arg(args, "patch", "path").map_err(with_failure)?;
    let old = string_arg(args, "patch", "old_string").map_err(with_failure)?;
    let new = string_arg(args, "patch", "new_string").map_err(with_failure)?;
    let all = match args.get("replace_all") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        Some(other) => {
            return Err(ToolResult::unsuccessful(format!(
                "patch: 'replace_all' must be a boolean, got {}",
                super::kind(other)
            )));
        }
    };
    let file = resolve(here, path);
    let task = Task::Replace {
        file: file.clone(),
        arg: path.to_string(),
        old: old.to_string(),
        new: new.to_string(),
        all,
    };
    Ok((Edit::new(here, false, VecDeque::from([task])), vec![file]))
}

/// A bad-argument result in the patch result's shape.
fn with_failure(r: ToolResult) -> ToolResult {
    ToolResult::unsuccessful(r.error.unwrap_or_default())
}

fn plan_v4a(here: &str, args: &Value) -> Plan {
    let text = string_arg(args, "patch", "patch").map_err(with_failure)?;
    let ops = v4a::parse(text).map_err(ToolResult::unsuccessful)?;
    if ops.is_empty() {
        return Err(ToolResult::unsuccessful(
            "patch: no operations found (expected '*** Begin Patch' … '*** End Patch')",
        ));
    }
    let at = |p: &str| (resolve(here, p), p.to_string());
    let mut paths = Vec::new();
    let tasks: VecDeque<Task> = ops
        .into_iter()
        .map(|op| match op {
            Op::Add { path, content } => Task::Add {
                file: resolve(here, &path),
                arg: path,
                content,
            },
            Op::Delete { path } => Task::Delete {
                file: resolve(here, &path),
                arg: path,
            },
            Op::Move { from, to } => Task::Move {
                from: at(&from),
                to: at(&to),
            },
            Op::Update { path, hunks } => Task::Update {
                file: resolve(here, &path),
                arg: path,
                hunks: hunks.into(),
                changed: false,
            },
        })
        .inspect(|t| {
            paths.push(t.file().to_path_buf());
            if let Task::Move { to, .. } = t {
                paths.push(to.0.clone());
            }
        })
        .collect();
    Ok((Edit::new(here, true, tasks), paths))
}

/// Realistic model edits through the tool, each on a fresh tree: the files it ends with, or
/// the error the model reads (and nothing written).
#[cfg(test)]
mod corpus {
    use super::*;
    use crate::tools::alone;
    use serde_json::json;
    use std::time::Duration;

    /// `(files before, arguments, Ok(files after) | Err(words the error holds))`.
    type Case = (
        &'static [(&'static str, &'static str)],
        Value,
        Result<&'static [(&'static str, Option<&'static str>)], &'static [&'static str]>,
    );

    fn cases() -> Vec<Case> {
        const PY: &str =
            "class A:\n\tdef run(self):\n\t\treturn 1\n\n\tdef stop(self):  \n\t\treturn 0\n";
        vec![
            // Whitespace drift: spaces for the file's tabs, its trailing spaces dropped.
            (
                &[("a.py", PY)],
                json!({"path": "a.py", "old_string": "    def stop(self):\n        return 0", "new_string": "    def stop(self):\n        return 2"}),
                Ok(&[(
                    "a.py",
                    Some(
                        "class A:\n\tdef run(self):\n\t\treturn 1\n\n\tdef stop(self):\n\t\treturn 2\n",
                    ),
                )]),
            ),
            // CRLF file, LF old_string, replace_all: every match, CRLF kept.
            (
                &[("w.bat", "set X=1\r\necho %X%\r\nset X=1\r\n")],
                json!({"path": "w.bat", "old_string": "set X=1\n", "new_string": "set X=2\n", "replace_all": true}),
                Ok(&[("w.bat", Some("set X=2\r\necho %X%\r\nset X=2\r\n"))]),
            ),
            // CRLF old_string against an LF file.
            (
                &[("u.txt", "one\ntwo\n")],
                json!({"path": "u.txt", "old_string": "one\r\ntwo", "new_string": "one\r\n2"}),
                Ok(&[("u.txt", Some("one\n2\n"))]),
            ),
            // Repeated match: the error says how many and asks for more context.
            (
                &[("r.js", "let a = 0;\nf(a);\nlet a = 0;\n")],
                json!({"path": "r.js", "old_string": "let a = 0;", "new_string": "let a = 1;"}),
                Err(&["Found 2 matches", "replace_all"]),
            ),
            // Missing match: the error shows the nearest lines.
            (
                &[("m.rs", "fn main() {\n    let total = sum(&v);\n}\n")],
                json!({"path": "m.rs", "old_string": "let total = sum(v);", "new_string": "let total = 0;"}),
                Err(&["Could not find", "Did you mean", "let total = sum(&v);"]),
            ),
            (
                &[],
                json!({"path": "nope.rs", "old_string": "a", "new_string": "b"}),
                Err(&["File not found: nope.rs"]),
            ),
            // Multi-file V4A: two updates (one CRLF), an add, a move and a delete.
            (
                &[
                    ("src/a.py", "def a():\n    return 1\n"),
                    ("src/b.py", "x = 1\r\ny = 2\r\n"),
                    ("old.md", "# old\n"),
                    ("tmp.txt", "t\n"),
                ],
                json!({"mode": "patch", "patch": "*** Begin Patch\n*** Update File: src/a.py\n def a():\n-    return 1\n+    return 11\n*** Update File: src/b.py\n x = 1\n-y = 2\n+y = 22\n*** Add File: src/c.py\n+z = 3\n*** Move File: old.md -> new.md\n*** Delete File: tmp.txt\n*** End Patch"}),
                Ok(&[
                    ("src/a.py", Some("def a():\n    return 11\n")),
                    ("src/b.py", Some("x = 1\r\ny = 22\r\n")),
                    ("src/c.py", Some("z = 3\n")),
                    ("old.md", None),
                    ("new.md", Some("# old\n")),
                    ("tmp.txt", None),
                ]),
            ),
            // V4A with whitespace drift in its context lines.
            (
                &[("k.go", "func k() {\n\tif x {\n\t\treturn\n\t}\n}\n")],
                json!({"mode": "patch", "patch": "*** Begin Patch\n*** Update File: k.go\n@@ func k() {\n     if x {\n-        return\n+        return nil\n*** End Patch"}),
                Ok(&[(
                    "k.go",
                    Some("func k() {\n\tif x {\n\t\treturn nil\n\t}\n}\n"),
                )]),
            ),
            // V4A: one good file, one missing match, one missing file: nothing written.
            (
                &[("g.txt", "good\n"), ("h.txt", "here\n")],
                json!({"mode": "patch", "patch": "*** Begin Patch\n*** Update File: g.txt\n-good\n+better\n*** Update File: h.txt\n-absent line\n+x\n*** Update File: gone.txt\n-a\n+b\n*** End Patch"}),
                Err(&[
                    "no files were modified",
                    "h.txt",
                    "gone.txt: file not found",
                ]),
            ),
            // V4A: a hint picks which of two matches; an addition goes after its hint's line.
            (
                &[("h.py", "def a():\n    return 1\n\ndef b():\n    return 1\n")],
                json!({"mode": "patch", "patch": "*** Begin Patch\n*** Update File: h.py\n@@ def b(): @@\n-    return 1\n+    return 2\n@@ def a(): @@\n+    # first\n*** End Patch"}),
                Ok(&[(
                    "h.py",
                    Some("def a():\n    # first\n    return 1\n\ndef b():\n    return 2\n"),
                )]),
            ),
            // V4A move (Hermes spells it `*** Move File: src -> dst`): a rename, into a new
            // directory; a move onto an existing file is refused whole.
            (
                &[("a/x.txt", "x\n")],
                json!({"mode": "patch", "patch": "*** Begin Patch\n*** Move File: a/x.txt -> b/c/y.txt\n*** End Patch"}),
                Ok(&[("a/x.txt", None), ("b/c/y.txt", Some("x\n"))]),
            ),
            (
                &[("p.txt", "p\n"), ("q.txt", "q\n")],
                json!({"mode": "patch", "patch": "*** Begin Patch\n*** Move File: p.txt -> q.txt\n*** Move File: none.txt -> r.txt\n*** End Patch"}),
                Err(&[
                    "no files were modified",
                    "q.txt: destination already exists — move would overwrite",
                    "none.txt: source file not found for move",
                ]),
            ),
            // V4A: a repeated match without a hint to choose.
            (
                &[("d.txt", "v = 0\nw\nv = 0\n")],
                json!({"mode": "patch", "patch": "*** Begin Patch\n*** Update File: d.txt\n-v = 0\n+v = 1\n*** End Patch"}),
                Err(&["no files were modified", "Found 2 matches"]),
            ),
        ]
    }

    #[test]
    fn realistic_model_edits_apply_or_say_why_not() {
        for (i, (before, args, want)) in cases().into_iter().enumerate() {
            let dir = std::env::temp_dir().join(format!("tuigw-pc-{}", crate::util::random_hex(8)));
            std::fs::create_dir_all(&dir).unwrap();
            for (name, text) in before {
                let f = dir.join(name);
                std::fs::create_dir_all(f.parent().unwrap()).unwrap();
                std::fs::write(f, text).unwrap();
            }
            let cwd = dir.to_str().unwrap();
            // Stepped a unit at a time on a copy of the tree, then at once: the same result
            // and the same files.
            let copy = dir.with_extension("stepped");
            copy_tree(&dir, &copy);
            let stepped = alone::run(
                &mut Patch::default(),
                copy.to_str().unwrap(),
                &copy,
                &args,
                Duration::ZERO,
            );
            let r = alone::run(
                &mut Patch::default(),
                cwd,
                &dir,
                &args,
                Duration::from_secs(5),
            )
            .result;
            assert_eq!(
                stepped
                    .result
                    .content
                    .to_string()
                    .replace(copy.to_str().unwrap(), cwd),
                r.content.to_string(),
                "case {i}"
            );
            assert_eq!(stepped.result.event_fields, r.event_fields, "case {i}");
            assert_eq!(tree_of(&copy), tree_of(&dir), "case {i}");
            let _ = std::fs::remove_dir_all(&copy);
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
            match want {
                Ok(after) => {
                    assert_eq!(r.content["success"], true, "case {i}: {}", r.content);
                    assert!(r.event_fields.contains_key("inline_diff"), "case {i}");
                    for (name, text) in after {
                        assert_eq!(read(name).as_deref(), *text, "case {i}: {name}");
                    }
                }
                Err(words) => {
                    assert_eq!(r.content["success"], false, "case {i}: {}", r.content);
                    let error = r.content["error"].as_str().unwrap_or_default();
                    for w in words {
                        assert!(error.contains(w), "case {i}: {w:?} not in {error}");
                    }
                    for (name, text) in before {
                        assert_eq!(
                            read(name).as_deref(),
                            Some(*text),
                            "case {i}: {name} untouched"
                        );
                    }
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    fn copy_tree(from: &Path, to: &Path) {
        for (name, bytes) in tree_of(from) {
            let f = to.join(name);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, bytes).unwrap();
        }
        std::fs::create_dir_all(to).unwrap();
    }

    /// Every file under `dir`: its path below it and its bytes.
    fn tree_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    todo.push(p);
                } else {
                    let name = p.strip_prefix(dir).unwrap().display().to_string();
                    out.insert(name, std::fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    /// A 1 MB file's edit goes a unit a step (many steps) and ends as the edit at once does;
    /// so do a replace-all over it and a miss with its nearest lines.
    #[test]
    fn a_big_files_edit_goes_across_steps_with_the_same_result() {
        let dir = std::env::temp_dir().join(format!("tuigw-pb-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let text: String = (0..20_000)
            .map(|i| format!("line {i:06} of a one megabyte file\r\n"))
            .collect();
        let cwd = dir.to_str().unwrap();
        let cases = [
            json!({"path": "big.txt", "old_string": "line 010000 of a one megabyte file", "new_string": "patched"}),
            json!({"path": "big.txt", "old_string": "  line 019999 of a one megabyte file  ", "new_string": "last"}),
            json!({"path": "big.txt", "old_string": "megabyte", "new_string": "mb", "replace_all": true}),
            json!({"path": "big.txt", "old_string": "line 9 of a one megabyte file", "new_string": "x"}),
        ];
        for args in cases {
            let mut results = Vec::new();
            for budget in [Duration::ZERO, Duration::from_secs(10)] {
                std::fs::write(dir.join("big.txt"), &text).unwrap();
                let r = alone::run(&mut Patch::default(), cwd, &dir, &args, budget);
                if budget.is_zero() {
                    assert!(r.steps >= 10, "{args}: {} steps", r.steps);
                }
                let after = std::fs::read(dir.join("big.txt")).unwrap();
                results.push((r.result.content, r.result.event_fields, after));
            }
            assert_eq!(results[0], results[1], "{args}");
            let c = &results[0].0;
            if args["new_string"] == "x" {
                let error = c["error"].as_str().unwrap_or_default();
                assert!(error.contains("Did you mean"), "{c}");
            } else {
                assert_eq!(c["success"], true, "{c}");
                assert_ne!(results[0].2, text.as_bytes(), "{args}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
