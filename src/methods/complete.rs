//! `complete.path {word, cwd?, session_id?}`: file names for the word under the cursor —
//! relative to the session's cwd, `~/`, absolute, and the `@file:` / `@folder:` hints.
//! One directory is read, at most `ENTRIES_MAX` entries and `TIME_MAX`, so a huge directory
//! cannot stall the loop; a directory that cannot be read completes to nothing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::clock::Budget;

use serde_json::{Value, json};

use super::params::{self, Params};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;

/// Directory entries looked at per call.
const ENTRIES_MAX: usize = 5_000;
/// Time spent reading one directory per call.
const TIME_MAX: Duration = Duration::from_millis(50);
/// Items answered at most.
const ITEMS_MAX: usize = 30;
/// Longer words complete to nothing.
const WORD_MAX: usize = 4096;

pub fn complete_path(gw: &Gateway, p: &Params, now: Instant) -> Result<Value, RpcError> {
    let word = params::opt_str(p, "word")?.unwrap_or("");
    let cwd = params::opt_str(p, "cwd")?;
    let sid = params::opt_str(p, "session_id")?;
    if word.is_empty() || word.len() > WORD_MAX {
        return Ok(json!({"items": []}));
    }
    let root = cwd
        .map(str::to_string)
        .or_else(|| sid.and_then(|s| gw.sessions.get(s)).map(|s| s.cwd.clone()))
        .unwrap_or_else(crate::util::default_cwd);
    let home = crate::util::user_home().map(|h| h.to_string_lossy().into_owned());
    let budget = Budget::of(gw.clock, now, TIME_MAX);
    let items = complete(word, Path::new(&root), home.as_deref(), &budget);
    Ok(json!({"items": items}))
}

/// What kind of entries a word asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A plain path: files and directories.
    Plain,
    /// `@file:` — files, and directories to walk into.
    File,
    /// `@folder:` — directories only.
    Folder,
    /// A bare `@name`: each entry gets the tag of its kind.
    Either,
}

/// Pure completion of `word` against `root` (the cwd) and `home` (for `~/`).
fn complete(word: &str, root: &Path, home: Option<&str>, budget: &Budget) -> Vec<Value> {
    let (lead, word) = match word.strip_prefix(['"', '\'']) {
        Some(rest) => (&word[..1], rest),
        None => ("", word),
    };
    let (kind, path) = match word.strip_prefix('@') {
        None => (Kind::Plain, word),
        Some("") => return hints(),
        Some("file") => (Kind::File, ""),
        Some("folder") => (Kind::Folder, ""),
        Some(q) => match (q.strip_prefix("file:"), q.strip_prefix("folder:")) {
            (Some(p), _) => (Kind::File, p),
            (_, Some(p)) => (Kind::Folder, p),
            _ => (Kind::Either, q),
        },
    };
    // What the user typed up to the last slash stays as typed; the rest is the name prefix.
    let (typed_dir, prefix) = match path.rfind('/') {
        Some(i) => (&path[..=i], &path[i + 1..]),
        None => ("", path),
    };
    let dir = match expand(typed_dir, root, home) {
        Some(d) => d,
        None => return Vec::new(),
    };
    // `@fi` also offers the `@file:` hint itself.
    let mut items: Vec<Value> = match kind {
        Kind::Either if typed_dir.is_empty() => hints()
            .into_iter()
            .filter(|h| h["text"].as_str().is_some_and(|t| t[1..].starts_with(path)))
            .map(|mut h| {
                h["text"] = json!(format!("{lead}{}", h["text"].as_str().unwrap_or("")));
                h
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut found = list(&dir, prefix, kind, budget);
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let entries = found
        .into_iter()
        .take(ITEMS_MAX - items.len())
        .map(|(name, is_dir)| {
            let suffix = if is_dir { "/" } else { "" };
            let tag = match kind {
                Kind::Plain => "",
                Kind::File => "@file:",
                Kind::Folder => "@folder:",
                Kind::Either if is_dir => "@folder:",
                Kind::Either => "@file:",
            };
            json!({
                "text": format!("{lead}{tag}{typed_dir}{name}{suffix}"),
                "display": format!("{name}{suffix}"),
                "meta": if is_dir { "dir" } else { "" },
            })
        });
    items.extend(entries);
    items
}

fn hints() -> Vec<Value> {
    vec![
        json!({"text": "@file:", "display": "@file:", "meta": "attach a file"}),
        json!({"text": "@folder:", "display": "@folder:", "meta": "attach a folder"}),
    ]
}

/// The directory a typed prefix names: `~/…` under home, `/…` as is, else under root.
fn expand(typed_dir: &str, root: &Path, home: Option<&str>) -> Option<PathBuf> {
    if typed_dir.is_empty() {
        return Some(root.to_path_buf());
    }
    if let Some(rest) = typed_dir.strip_prefix("~/") {
        return Some(Path::new(home?).join(rest));
    }
    if typed_dir.starts_with('~') {
        return None; // `~user/` is not expanded
    }
    Some(root.join(typed_dir)) // an absolute typed_dir replaces root
}

/// Entries of `dir` starting with `prefix` (any case), within the entry and time budgets.
/// Hidden entries only when the prefix starts with a dot.
fn list(dir: &Path, prefix: &str, kind: Kind, budget: &Budget) -> Vec<(String, bool)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let want = prefix.to_lowercase();
    let hidden = prefix.starts_with('.');
    let mut out = Vec::new();
    for (n, entry) in entries.enumerate() {
        if n >= ENTRIES_MAX || (n % 256 == 255 && budget.spent()) {
            break;
        }
        let Ok(entry) = entry else { continue };
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if (name.starts_with('.') && !hidden) || !name.to_lowercase().starts_with(&want) {
            continue;
        }
        let is_dir = match entry.file_type() {
            Ok(t) if t.is_symlink() => entry.path().is_dir(),
            Ok(t) => t.is_dir(),
            Err(_) => false,
        };
        if kind == Kind::Folder && !is_dir {
            continue;
        }
        out.push((name, is_dir));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tuigw-complete-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("src/deep")).unwrap();
        for f in [
            "src/main.rs",
            "src/lib.rs",
            "README.md",
            ".hidden",
            "Readme.txt",
        ] {
            std::fs::write(d.join(f), "x").unwrap();
        }
        d
    }

    fn texts(items: &[Value]) -> Vec<&str> {
        items.iter().map(|i| i["text"].as_str().unwrap()).collect()
    }

    #[test]
    fn relative_absolute_home_and_hints() {
        let d = tree("forms");
        assert_eq!(
            texts(&complete("sr", &d, None, &Budget::unlimited())),
            ["src/"]
        );
        assert_eq!(
            texts(&complete("src/", &d, None, &Budget::unlimited())),
            ["src/deep/", "src/lib.rs", "src/main.rs"]
        );
        assert_eq!(
            texts(&complete("./src/m", &d, None, &Budget::unlimited())),
            ["./src/main.rs"]
        );
        assert_eq!(
            texts(&complete("re", &d, None, &Budget::unlimited())),
            ["README.md", "Readme.txt"]
        );
        let abs = format!("{}/src/l", d.display());
        assert_eq!(
            texts(&complete(&abs, Path::new("/"), None, &Budget::unlimited())),
            [format!("{abs}ib.rs")]
        );
        let home = d.to_str().unwrap();
        assert_eq!(
            texts(&complete(
                "~/src/d",
                Path::new("/"),
                Some(home),
                &Budget::unlimited()
            )),
            ["~/src/deep/"]
        );
        assert!(complete("~/x", Path::new("/"), None, &Budget::unlimited()).is_empty());
        assert_eq!(
            texts(&complete("@", &d, None, &Budget::unlimited())),
            ["@file:", "@folder:"]
        );
        assert_eq!(
            texts(&complete("@folder:", &d, None, &Budget::unlimited())),
            ["@folder:src/"]
        );
        assert_eq!(
            texts(&complete("@file:src/", &d, None, &Budget::unlimited())),
            ["@file:src/deep/", "@file:src/lib.rs", "@file:src/main.rs"]
        );
        assert_eq!(
            texts(&complete("@sr", &d, None, &Budget::unlimited())),
            ["@folder:src/"]
        );
        assert_eq!(
            texts(&complete("@fi", &d, None, &Budget::unlimited())),
            ["@file:"]
        );
        assert_eq!(
            texts(&complete("@f", &d, None, &Budget::unlimited())),
            ["@file:", "@folder:"]
        );
        assert_eq!(
            texts(&complete("'README.m", &d, None, &Budget::unlimited())),
            ["'README.md"]
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn hidden_only_on_a_leading_dot_and_missing_dirs_are_empty() {
        let d = tree("hidden");
        assert!(
            !texts(&complete("src/../", &d, None, &Budget::unlimited()))
                .contains(&"src/../.hidden")
        );
        assert_eq!(
            texts(&complete(".h", &d, None, &Budget::unlimited())),
            [".hidden"]
        );
        assert!(complete("nope/x", &d, None, &Budget::unlimited()).is_empty());
        assert!(complete("README.md/", &d, None, &Budget::unlimited()).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }
}
