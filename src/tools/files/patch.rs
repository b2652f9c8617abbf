//! Hermes' `patch`: `replace` mode (`path`, `old_string`, `new_string`, `replace_all`)
//! through the fuzzy matcher, and `patch` mode (a V4A multi-file patch, checked whole before
//! anything is written). CRLF files are matched as LF and written back as CRLF. The result is
//! `{success, diff, files_modified, files_created, files_deleted}` or `{success: false,
//! error}`; the diff goes to the TUI as `inline_diff`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::v4a::{self, Hunk, Op};
use super::{fuzzy, read_text, resolve, shown, string_arg, unified_diff, write_ask, write_atomic};
use crate::tools::{Ask, Start, Tool, ToolContext, ToolResult};

pub struct Patch;

/// Text as matched (LF), and whether it is written back with CRLF.
fn to_lf(text: &str) -> (String, bool) {
    if text.contains("\r\n") {
        (text.replace("\r\n", "\n"), true)
    } else {
        (text.to_string(), false)
    }
}

fn from_lf(text: &str, crlf: bool) -> String {
    if crlf {
        text.replace('\n', "\r\n")
    } else {
        text.to_string()
    }
}

/// What an edit changes on disk, per file: `None` deletes.
struct Changes {
    files: BTreeMap<PathBuf, (Option<String>, Option<String>)>,
    created: Vec<String>,
    modified: Vec<String>,
    deleted: Vec<String>,
    /// How a replacement matched, when the TUI's line should say.
    how: Option<String>,
}

impl Changes {
    fn new() -> Changes {
        Changes {
            files: BTreeMap::new(),
            created: Vec::new(),
            modified: Vec::new(),
            deleted: Vec::new(),
            how: None,
        }
    }

    /// The file's text as the patch has it so far.
    fn current(&mut self, path: &Path) -> Result<Option<String>, String> {
        if let Some((_, new)) = self.files.get(path) {
            return Ok(new.clone());
        }
        let old = read_text(path)?;
        self.files
            .insert(path.to_path_buf(), (old.clone(), old.clone()));
        Ok(old)
    }

    fn set(&mut self, path: &Path, text: Option<String>) {
        if let Some(entry) = self.files.get_mut(path) {
            entry.1 = text;
        }
    }

    /// Write everything (a file at a time: each write is atomic) and diff it.
    fn apply(self, cwd: &str) -> ToolResult {
        let mut diff = String::new();
        let mut errors = Vec::new();
        for (path, (old, new)) in &self.files {
            if old == new {
                continue;
            }
            let written = match new {
                Some(text) => path
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| write_atomic(path, text.as_bytes())),
                None => std::fs::remove_file(path),
            };
            if let Err(e) = written {
                errors.push(format!("{}: {e}", path.display()));
                continue;
            }
            let (old, _) = to_lf(old.as_deref().unwrap_or(""));
            let (new, _) = to_lf(new.as_deref().unwrap_or(""));
            diff.push_str(&unified_diff(&shown(cwd, path), &old, &new));
        }
        if !errors.is_empty() {
            return ToolResult::unsuccessful(format!(
                "Apply phase failed (state may be inconsistent — run `git diff` to assess):\n{}",
                errors
                    .iter()
                    .map(|e| format!("  • {e}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
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

impl Tool for Patch {
    fn name(&self) -> &str {
        "patch"
    }

    fn toolset(&self) -> &str {
        "file"
    }

    fn description(&self) -> &str {
        "Targeted find-and-replace edits in files. Use this instead of sed/awk in terminal. \
         Uses fuzzy matching so minor whitespace/indentation differences won't break it. \
         Returns a unified diff.\n\nREPLACE MODE (mode='replace', default): find a unique \
         string and replace it. REQUIRED PARAMETERS: mode, path, old_string, new_string.\n\
         PATCH MODE (mode='patch'): apply V4A multi-file patches for bulk changes. REQUIRED \
         PARAMETERS: mode, patch."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": ["replace", "patch"], "default": "replace",
                         "description": "Edit mode. 'replace' (default): requires path + old_string + new_string. 'patch': requires patch content only."},
                "path": {"type": "string", "description": "REQUIRED when mode='replace'. File path to edit."},
                "old_string": {"type": "string", "description": "REQUIRED when mode='replace'. Exact text to find and replace. Must be unique in the file unless replace_all=true. Include surrounding context lines to ensure uniqueness."},
                "new_string": {"type": "string", "description": "REQUIRED when mode='replace'. Replacement text. Pass empty string '' to delete the matched text."},
                "replace_all": {"type": "boolean", "default": false, "description": "Replace all occurrences instead of requiring a unique match (default: false)"},
                "patch": {"type": "string", "description": "REQUIRED when mode='patch'. V4A format patch content. Format:\n*** Begin Patch\n*** Update File: path/to/file\n@@ context hint @@\n context line\n-removed line\n+added line\n*** End Patch"}
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
            "replace" => plan_replace(ctx, &here, args),
            "patch" => plan_v4a(ctx, &here, args),
            other => Err(ToolResult::unsuccessful(format!(
                "patch: unknown mode '{other}': use 'replace' or 'patch'"
            ))),
        };
        match planned {
            Err(result) => Start::Done(result),
            Ok((_, Some(ask))) if !ctx.approved => Start::Ask(ask),
            Ok((changes, _)) => Start::Done(changes.apply(&here)),
        }
    }
}

type Plan = Result<(Changes, Option<Ask>), ToolResult>;

fn plan_replace(ctx: &ToolContext<'_>, here: &str, args: &Value) -> Plan {
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
    let ask = write_ask(ctx, &file);
    let mut changes = Changes::new();
    let text = match changes.current(&file) {
        Ok(Some(t)) => t,
        Ok(None) => return Err(ToolResult::unsuccessful(format!("File not found: {path}"))),
        Err(e) => return Err(ToolResult::unsuccessful(e)),
    };
    let (lf, crlf) = to_lf(&text);
    let (old, new) = (old.replace("\r\n", "\n"), new.replace("\r\n", "\n"));
    match fuzzy::replace(&lf, &old, &new, all) {
        Ok(r) => {
            changes.set(&file, Some(from_lf(&r.content, crlf)));
            changes.modified.push(shown(here, &file));
            changes.how = match (r.count, r.strategy) {
                (1, "exact") => None,
                (n, "exact") => Some(format!("{n} replacements")),
                (1, fuzzy) => Some(format!("matched {fuzzy}")),
                (n, fuzzy) => Some(format!("{n} replacements, matched {fuzzy}")),
            };
            Ok((changes, ask))
        }
        Err(e) => {
            let mut msg = e.clone();
            if e.starts_with("Could not find") {
                let near = fuzzy::closest_lines(&old, &lf);
                if !near.is_empty() {
                    msg.push_str("\n\nDid you mean one of these sections?\n");
                    msg.push_str(&near);
                }
            }
            Err(ToolResult::unsuccessful(msg))
        }
    }
}

/// A bad-argument result in the patch result's shape.
fn with_failure(r: ToolResult) -> ToolResult {
    ToolResult::unsuccessful(r.error.unwrap_or_default())
}

fn plan_v4a(ctx: &ToolContext<'_>, here: &str, args: &Value) -> Plan {
    let text = string_arg(args, "patch", "patch").map_err(with_failure)?;
    let ops = v4a::parse(text).map_err(ToolResult::unsuccessful)?;
    if ops.is_empty() {
        return Err(ToolResult::unsuccessful(
            "patch: no operations found (expected '*** Begin Patch' … '*** End Patch')",
        ));
    }
    let mut changes = Changes::new();
    let mut errors = Vec::new();
    let mut ask = None;
    let mut real_changes = 0;
    for op in &ops {
        let paths: Vec<&str> = match op {
            Op::Update { path, .. } | Op::Add { path, .. } | Op::Delete { path } => vec![path],
            Op::Move { from, to } => vec![from, to],
        };
        for p in &paths {
            if ask.is_none() {
                ask = write_ask(ctx, &resolve(here, p));
            }
        }
        if let Err(e) = plan_op(here, op, &mut changes, &mut real_changes) {
            errors.push(e);
        }
    }
    if errors.is_empty() && real_changes == 0 {
        errors.push("Patch contains no changes (only context lines were provided)".to_string());
    }
    if !errors.is_empty() {
        return Err(ToolResult::unsuccessful(format!(
            "Patch validation failed (no files were modified):\n{}",
            errors
                .iter()
                .map(|e| format!("  • {e}"))
                .collect::<Vec<_>>()
                .join("\n")
        )));
    }
    Ok((changes, ask))
}

fn plan_op(here: &str, op: &Op, changes: &mut Changes, real: &mut usize) -> Result<(), String> {
    let name = |p: &str| shown(here, &resolve(here, p));
    match op {
        Op::Add { path, content } => {
            let file = resolve(here, path);
            if changes.current(&file)?.is_some() {
                return Err(format!("{path}: file already exists (use Update File)"));
            }
            changes.set(&file, Some(content.clone()));
            changes.created.push(name(path));
            *real += 1;
        }
        Op::Delete { path } => {
            let file = resolve(here, path);
            if changes.current(&file)?.is_none() {
                return Err(format!("{path}: file not found for deletion"));
            }
            changes.set(&file, None);
            changes.deleted.push(name(path));
            *real += 1;
        }
        Op::Move { from, to } => {
            let (src, dst) = (resolve(here, from), resolve(here, to));
            let Some(text) = changes.current(&src)? else {
                return Err(format!("{from}: source file not found for move"));
            };
            if changes.current(&dst)?.is_some() {
                return Err(format!("{from}: destination {to} already exists"));
            }
            changes.set(&src, None);
            changes.set(&dst, Some(text));
            changes.deleted.push(name(from));
            changes.created.push(name(to));
            *real += 1;
        }
        Op::Update { path, hunks } => {
            let file = resolve(here, path);
            let Some(text) = changes.current(&file)? else {
                return Err(format!("{path}: file not found"));
            };
            let (mut lf, crlf) = to_lf(&text);
            let mut changed = false;
            for hunk in hunks.iter().filter(|h| h.changes()) {
                lf = apply_hunk(&lf, hunk).map_err(|e| format!("{path}: {e}"))?;
                changed = true;
                *real += 1;
            }
            if changed {
                changes.set(&file, Some(from_lf(&lf, crlf)));
                changes.modified.push(name(path));
            }
        }
    }
    Ok(())
}

/// One hunk applied to LF text.
fn apply_hunk(text: &str, hunk: &Hunk) -> Result<String, String> {
    let search = hunk.search();
    let replacement = hunk.replacement();
    let hint_at = |hint: &str| -> Result<usize, String> {
        let hits: Vec<usize> = text.match_indices(hint).map(|(i, _)| i).collect();
        match hits.as_slice() {
            [one] => Ok(*one),
            [] => Err(format!("context hint '{hint}' not found")),
            _ => Err(format!(
                "context hint '{hint}' is ambiguous ({} occurrences)",
                hits.len()
            )),
        }
    };
    if search.trim().is_empty() {
        // Only additions: after the hint's line, else at the end.
        let at = match &hunk.hint {
            Some(hint) => {
                let i = hint_at(hint)?;
                text[i..].find('\n').map_or(text.len(), |n| i + n + 1)
            }
            None => text.len(),
        };
        let mut out = text[..at].to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&replacement);
        out.push('\n');
        out.push_str(&text[at..]);
        return Ok(out);
    }
    match fuzzy::replace(text, &search, &replacement, false) {
        Ok(r) => Ok(r.content),
        // The hint says which of several matches is meant: the first after it.
        Err(e) if e.starts_with("Found") && hunk.hint.is_some() => {
            let i = hint_at(hunk.hint.as_deref().unwrap_or(""))?;
            let tail = &text[i..];
            let first = tail.find(search.as_str()).ok_or(e)?;
            let mut out = text[..i + first].to_string();
            out.push_str(&replacement);
            out.push_str(&tail[first + search.len()..]);
            Ok(out)
        }
        Err(e) => {
            let mut msg = format!("hunk did not apply — {e}");
            let near = fuzzy::closest_lines(&search, text);
            if !near.is_empty() {
                msg.push_str("\n\nDid you mean one of these sections?\n");
                msg.push_str(&near);
            }
            Err(msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunks_apply_with_hints_and_additions() {
        let text = "def a():\n    return 1\n\ndef b():\n    return 1\n";
        let h = |hint: Option<&str>, lines: &[(char, &str)]| Hunk {
            hint: hint.map(str::to_string),
            lines: lines.iter().map(|(p, l)| (*p, l.to_string())).collect(),
        };
        let hunk = h(
            Some("def b():"),
            &[('-', "    return 1"), ('+', "    return 2")],
        );
        assert_eq!(
            apply_hunk(text, &hunk).unwrap(),
            "def a():\n    return 1\n\ndef b():\n    return 2\n"
        );
        let ambiguous = h(None, &[('-', "    return 1"), ('+', "    return 2")]);
        assert!(
            apply_hunk(text, &ambiguous)
                .unwrap_err()
                .contains("Found 2 matches")
        );
        let add = h(Some("def a():"), &[('+', "    # first")]);
        assert!(
            apply_hunk(text, &add)
                .unwrap()
                .starts_with("def a():\n    # first\n    return 1\n")
        );
        assert_eq!(to_lf("a\r\nb\r\n"), ("a\nb\n".to_string(), true));
        assert_eq!(from_lf("a\nb\n", true), "a\r\nb\r\n");
    }
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
            let r = alone::run(&mut Patch, cwd, &dir, &args, Duration::from_secs(5)).result;
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
}
