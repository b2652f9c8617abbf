//! Hermes' file tools: `read_file` (here), `write_file` (here), `patch` (`patch.rs`, with
//! the fuzzy matcher `fuzzy.rs` and V4A patches `v4a.rs`) and `search_files` (`search.rs`).
//! Paths are resolved against the session's working directory; writes are atomic (a fresh
//! temporary file renamed over the target, its mode kept) and ask for approval outside the
//! working directory, inside `$HERMES_HOME` and on sensitive files. Edits carry a unified
//! diff in `tool.complete.inline_diff`.

pub(crate) mod fuzzy;
mod patch;
mod read;
mod search;
mod text;
mod v4a;
mod walk;
mod write;

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

pub use patch::Patch;
pub use read::ReadFile;
pub use search::SearchFiles;
pub use write::WriteFile;

use super::sensitive_files::{account_files, sensitive_file};
use super::stepped::{Advance, Stepped};
use super::{Ask, ToolContext, ToolResult};

/// Files larger than this are not edited or diffed in memory.
pub(crate) const EDIT_MAX: u64 = 16 * 1024 * 1024;
/// The inline diff the TUI is sent is cut to this many bytes.
pub(crate) const DIFF_MAX: usize = 64 * 1024;
/// Longest a diff may take before it settles for a coarser one.
const DIFF_TIMEOUT: Duration = Duration::from_millis(5);

/// Replace `file` atomically, keeping its mode (0644 for a new file).
pub fn write_atomic(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::private_file::replace_keeping_mode(file, bytes, 0o644)
}

/// `path` as the session means it: `~` is the user's home, relative is against `cwd`;
/// `.` and `..` are folded (without touching the disk).
pub fn resolve(cwd: &str, path: &str) -> PathBuf {
    let home = crate::util::user_home();
    let joined = match (path.strip_prefix('~'), home) {
        (Some(""), Some(h)) => h,
        (Some(rest), Some(h)) if rest.starts_with('/') => h.join(rest.trim_start_matches('/')),
        _ => Path::new(cwd).join(path),
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Where the session's relative paths start: the directory its terminal's shell is in (a
/// `cd` there moves them, as in Hermes), else the session's working directory.
pub(crate) fn here(ctx: &ToolContext<'_>) -> String {
    session_here(ctx.home, ctx.session, &ctx.cwd)
}

/// [`here`] of the session stored as `session` working in `cwd`.
pub(crate) fn session_here(home: &Path, session: &str, cwd: &str) -> String {
    if session.is_empty() {
        return cwd.to_string();
    }
    super::shell_state::cwd_of(home, session)
        .filter(|d| Path::new(d).is_dir())
        .unwrap_or_else(|| cwd.to_string())
}

/// What `path` really is: the existing part canonicalised (symlinks followed), the rest
/// appended.
fn real(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut head = path.to_path_buf();
    loop {
        if let Ok(c) = std::fs::canonicalize(&head) {
            return rest
                .iter()
                .rev()
                .fold(c, |p, n: &std::ffi::OsString| p.join(n));
        }
        match (head.file_name().map(|n| n.to_os_string()), head.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                head = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Why a write to `path` needs the user's approval, if it does: the rule and what to say.
pub(crate) fn write_ask(ctx: &ToolContext<'_>, path: &Path) -> Option<Ask> {
    let target = real(path);
    let under = |root: &Path| {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        target.starts_with(&root)
    };
    let user_home = crate::util::user_home();
    // The terminal's policy judges the same list; here a start-up file that is a link to a
    // dotfiles checkout protects what it points to as well.
    let sensitive = sensitive_file(&target, user_home.as_deref()).is_some()
        || user_home
            .as_ref()
            .is_some_and(|h| account_files(h).any(|f| target.starts_with(real(&f))));
    let (rule, why) = if sensitive {
        ("file_write_sensitive", "write to a sensitive file")
    } else if under(ctx.home) {
        ("file_write_hermes_home", "write inside HERMES_HOME")
    } else if !ctx.cwd.is_empty() && !under(Path::new(&ctx.cwd)) {
        (
            "file_write_outside_cwd",
            "write outside the working directory",
        )
    } else {
        return None;
    };
    Some(Ask {
        rule,
        description: why.to_string(),
        command: format!("write {}", target.display()),
    })
}

/// `path` as shown back: relative to the working directory when under it.
pub(crate) fn shown(cwd: &str, path: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(rel) if !cwd.is_empty() && !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => path.display().to_string(),
    }
}

/// The unified diff of an edit of `name`, as the TUI shows it (bounded).
#[cfg(test)]
pub(crate) fn unified_diff(name: &str, old: &str, new: &str) -> String {
    unified_diff_at(name, old, new, 0)
}

/// The unified diff of a region of `name` that starts after `before` lines of the file (its
/// hunks numbered as in the whole file), bounded.
pub(crate) fn unified_diff_at(name: &str, old: &str, new: &str, before: usize) -> String {
    let diff = similar::TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string();
    if before == 0 {
        return cut_diff(text);
    }
    let shift = |range: &str| match range.split_once(',') {
        Some((at, len)) => format!("{},{len}", at.parse::<usize>().unwrap_or(0) + before),
        None => format!("{}", range.parse::<usize>().unwrap_or(0) + before),
    };
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let header = line
            .strip_prefix("@@ -")
            .and_then(|r| r.strip_suffix(" @@\n"))
            .and_then(|r| r.split_once(" +"));
        match header {
            Some((o, n)) => out.push_str(&format!("@@ -{} +{} @@\n", shift(o), shift(n))),
            None => out.push_str(line),
        }
    }
    cut_diff(out)
}

/// A diff cut to `DIFF_MAX` bytes, saying so.
pub(crate) fn cut_diff(mut text: String) -> String {
    if text.len() > DIFF_MAX {
        let mut cut = DIFF_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… [diff truncated]");
    }
    text
}

/// A required string argument, or the error the model reads.
pub(crate) fn string_arg<'a>(
    args: &'a Value,
    tool: &str,
    key: &str,
) -> Result<&'a str, ToolResult> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(ToolResult::error(format!(
            "{tool}: missing required field '{key}'"
        ))),
        Some(other) => Err(ToolResult::error(format!(
            "{tool}: '{key}' must be a string, got {}",
            kind(other)
        ))),
    }
}

pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An optional integer argument (numbers in strings too, as models send them).
pub(crate) fn int_arg(args: &Value, key: &str) -> Option<i64> {
    match args.get(key)? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Whether `path` is a file we edit: false when it does not exist; an error when it is a
/// directory, not a regular file, or over `EDIT_MAX`.
pub(crate) fn editable(path: &Path) -> Result<bool, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if meta.is_dir() {
        return Err(format!("{} is a directory", path.display()));
    }
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.len() > EDIT_MAX {
        return Err(too_big(path));
    }
    Ok(true)
}

/// The refusal of a file over `EDIT_MAX`.
pub(crate) fn too_big(path: &Path) -> String {
    format!(
        "{} is larger than {} MiB; edit it with terminal tools",
        path.display(),
        EDIT_MAX >> 20
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_against_the_cwd_and_home() {
        assert_eq!(resolve("/w", "a/../b.txt"), PathBuf::from("/w/b.txt"));
        assert_eq!(resolve("/w", "/etc/./x"), PathBuf::from("/etc/x"));
        assert_eq!(resolve("/w", "../../.."), PathBuf::from("/"));
        if let Some(h) = crate::util::user_home() {
            assert_eq!(resolve("/w", "~/.ssh/k"), h.join(".ssh/k"));
        }
        assert_eq!(shown("/w", Path::new("/w/a/b")), "a/b");
        assert_eq!(shown("/w", Path::new("/x")), "/x");
    }
}
