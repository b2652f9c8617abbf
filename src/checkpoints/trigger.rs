//! Which tool calls take a checkpoint first, as Hermes decides: `write_file` and `patch`
//! (the project of the file they edit), and a `terminal` command that looks like it changes
//! or deletes files (its working directory). Pure but for the look for a project's markers.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

/// A checkpoint a call wants before it runs: of `dir`, saying `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub dir: PathBuf,
    pub reason: String,
}

/// Hermes' heuristic: `rm`, `rmdir`, `mv`, `sed -i`, `truncate`, `dd`, `shred`,
/// `git reset|clean|checkout` as a word, or an output redirect that overwrites (`>`, not `>>`).
pub fn destructive(command: &str) -> bool {
    static WORDS: OnceLock<regex::Regex> = OnceLock::new();
    static OVERWRITE: OnceLock<regex::Regex> = OnceLock::new();
    let words = WORDS.get_or_init(|| {
        regex::Regex::new(
            r"(?:^|\s|&&|\|\||;|`)(?:rm\s|rmdir\s|mv\s|sed\s+-i|truncate\s|dd\s|shred\s|git\s+(?:reset|clean|checkout)\s)",
        )
        .expect("a valid pattern")
    });
    let overwrite =
        OVERWRITE.get_or_init(|| regex::Regex::new(r"[^>]>[^>]|^>[^>]").expect("a valid pattern"));
    !command.is_empty() && (words.is_match(command) || overwrite.is_match(command))
}

/// What `tool` called with `args` wants snapshotted first, if anything. `resolve` turns a
/// path argument into the absolute path the tool will touch; `cwd` is where the session's
/// commands run.
pub fn wanted(
    tool: &str,
    args: &Value,
    cwd: &Path,
    resolve: impl Fn(&str) -> PathBuf,
) -> Option<Wanted> {
    match tool {
        "write_file" | "patch" => {
            let dir = match args.get("path").and_then(Value::as_str) {
                Some(p) if !p.trim().is_empty() => project_of(&resolve(p)),
                // A V4A patch names its files inside the patch: the session's directory.
                _ if tool == "patch" => cwd.to_path_buf(),
                _ => return None,
            };
            Some(Wanted {
                dir,
                reason: format!("before {tool}"),
            })
        }
        "terminal" => {
            let command = args.get("command").and_then(Value::as_str)?;
            if !destructive(command) {
                return None;
            }
            let workdir = ["workdir", "cwd"]
                .iter()
                .find_map(|k| args.get(*k).and_then(Value::as_str))
                .filter(|w| !w.trim().is_empty());
            let dir = workdir.map_or_else(|| cwd.to_path_buf(), resolve);
            let head: String = command.chars().take(60).collect();
            Some(Wanted {
                dir,
                reason: format!("before terminal: {head}"),
            })
        }
        _ => None,
    }
}

/// The project a file belongs to: the nearest directory above it holding a project marker
/// (`.git`, `Cargo.toml`, `package.json`…), else the file's own directory.
pub fn project_of(file: &Path) -> PathBuf {
    const MARKERS: [&str; 9] = [
        ".git",
        "pyproject.toml",
        "package.json",
        "Cargo.toml",
        "go.mod",
        "Makefile",
        "pom.xml",
        ".hg",
        "Gemfile",
    ];
    let start = if file.is_dir() {
        file.to_path_buf()
    } else {
        file.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let mut at = start.as_path();
    while let Some(parent) = at.parent() {
        if MARKERS.iter().any(|m| at.join(m).exists()) {
            return at.to_path_buf();
        }
        at = parent;
    }
    start
}

/// A directory too broad to snapshot (Hermes skips `/` and the user's home).
pub fn too_broad(dir: &Path) -> bool {
    dir == Path::new("/") || crate::util::user_home().is_some_and(|h| h == dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn destructive_commands_are_told_as_hermes_tells_them() {
        for yes in [
            "rm -rf build",
            "ls && rm x",
            "mv a b",
            "sed -i s/a/b/ f",
            "echo hi > f",
            ">f",
            "git checkout -- .",
            "cd x; git reset --hard",
            "truncate -s0 f",
            // A heuristic: the word is enough.
            "grep rm file",
        ] {
            assert!(destructive(yes), "{yes}");
        }
        for no in [
            "",
            "ls -la",
            "echo hi >> log",
            "cargo build",
            "git status",
            "firm x",
        ] {
            assert!(!destructive(no), "{no}");
        }
    }

    #[test]
    fn a_call_wants_the_directory_it_changes() {
        let dir = std::env::temp_dir().join(format!("cp-trigger-{}", std::process::id()));
        let proj = dir.join("proj");
        std::fs::create_dir_all(proj.join("src")).unwrap();
        std::fs::write(proj.join("Cargo.toml"), "").unwrap();
        let resolve = |p: &str| proj.join(p);
        let w = wanted("write_file", &json!({"path": "src/a.rs"}), &dir, resolve).unwrap();
        assert_eq!(w.dir, proj);
        assert_eq!(w.reason, "before write_file");
        let w = wanted(
            "patch",
            &json!({"mode": "patch", "patch": "…"}),
            &dir,
            resolve,
        );
        assert_eq!(w.unwrap().dir, dir);
        let w = wanted("terminal", &json!({"command": "rm -f x"}), &dir, resolve).unwrap();
        assert_eq!(
            (w.dir.as_path(), w.reason.as_str()),
            (dir.as_path(), "before terminal: rm -f x")
        );
        let w = wanted(
            "terminal",
            &json!({"command": "rm x", "workdir": "src"}),
            &dir,
            resolve,
        );
        assert_eq!(w.unwrap().dir, proj.join("src"));
        assert_eq!(
            wanted("terminal", &json!({"command": "ls"}), &dir, resolve),
            None
        );
        assert_eq!(
            wanted("read_file", &json!({"path": "a"}), &dir, resolve),
            None
        );
        assert_eq!(wanted("write_file", &json!({}), &dir, resolve), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
