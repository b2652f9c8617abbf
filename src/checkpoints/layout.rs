//! Hermes' checkpoint store, as names and command lines (pure but for `normalize`): one
//! shared shadow git store under `$HERMES_HOME/checkpoints/store/`, a project known by the
//! first 16 hex digits of the SHA-256 of its absolute path, its branch tip at
//! `refs/hermes/<hash>`, its own index at `indexes/<hash>`, its metadata at
//! `projects/<hash>.json`, the shared excludes in `info/exclude`. Hermes and the gateway
//! read and write the same files, so each sees the other's checkpoints of a directory.

use std::path::{Path, PathBuf};

use crate::tools::shell_state::quote;

/// Under `$HERMES_HOME`.
pub const BASE_DIR: &str = "checkpoints";
const STORE_DIR: &str = "store";
pub const REFS_PREFIX: &str = "refs/hermes";
/// `checkpoints/.last_prune`: when the automatic sweep last ran (unix seconds, as text).
pub const PRUNE_MARKER: &str = ".last_prune";

/// What a snapshot never takes (Hermes' list, written to the store's `info/exclude`).
pub const DEFAULT_EXCLUDES: &[&str] = &[
    "node_modules/",
    "dist/",
    "build/",
    "target/",
    "out/",
    ".next/",
    ".nuxt/",
    "__pycache__/",
    "*.pyc",
    "*.pyo",
    ".cache/",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    "coverage/",
    ".coverage",
    ".venv/",
    "venv/",
    "env/",
    ".git/",
    ".hg/",
    ".svn/",
    ".worktrees/",
    "*.so",
    "*.dylib",
    "*.dll",
    "*.o",
    "*.a",
    "*.jar",
    "*.class",
    "*.exe",
    "*.obj",
    "*.mp4",
    "*.mov",
    "*.mkv",
    "*.webm",
    "*.zip",
    "*.tar",
    "*.tar.gz",
    "*.tgz",
    "*.7z",
    "*.rar",
    "*.iso",
    ".env",
    ".env.*",
    ".env.local",
    ".env.*.local",
    ".DS_Store",
    "Thumbs.db",
    "*.log",
];

/// The shared store of a home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    /// `$HERMES_HOME/checkpoints`.
    pub base: PathBuf,
    /// `…/checkpoints/store`: `GIT_DIR` of every command.
    pub dir: PathBuf,
}

impl Store {
    pub fn of_home(home: &Path) -> Store {
        let base = home.join(BASE_DIR);
        Store {
            dir: base.join(STORE_DIR),
            base,
        }
    }

    /// The project's own index (`GIT_INDEX_FILE`).
    pub fn index(&self, hash: &str) -> PathBuf {
        self.dir.join("indexes").join(hash)
    }

    /// `{workdir, created_at, last_touch}` of the project.
    pub fn meta(&self, hash: &str) -> PathBuf {
        self.dir.join("projects").join(format!("{hash}.json"))
    }

    pub fn projects(&self) -> PathBuf {
        self.dir.join("projects")
    }

    pub fn exclude(&self) -> PathBuf {
        self.dir.join("info").join("exclude")
    }

    /// The store has been initialised (`git init --bare` wrote `HEAD`).
    pub fn head(&self) -> PathBuf {
        self.dir.join("HEAD")
    }
}

/// A directory as Hermes names it: absolute, `~` expanded, links resolved (what does not
/// exist yet is kept as written).
pub fn normalize(path: &Path) -> PathBuf {
    let home = crate::util::user_home();
    let expanded = match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ => path.to_path_buf(),
    };
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        std::env::current_dir().unwrap_or_default().join(expanded)
    };
    std::fs::canonicalize(&absolute).unwrap_or(absolute)
}

/// The project's hash: `sha256(absolute path)[:16]`.
pub fn project_hash(dir: &Path) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, dir.as_os_str().as_encoded_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn ref_name(hash: &str) -> String {
    format!("{REFS_PREFIX}/{hash}")
}

/// A commit named by the user: 4–64 hex digits (never an option such as `--patch`).
pub fn check_commit(hash: &str) -> Result<(), String> {
    if hash.trim().is_empty() {
        return Err("Empty commit hash".into());
    }
    if hash.starts_with('-') {
        return Err(format!(
            "Invalid commit hash (must not start with '-'): {hash:?}"
        ));
    }
    let hex = hash.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex || !(4..=64).contains(&hash.len()) {
        return Err(format!(
            "Invalid commit hash (expected 4-64 hex characters): {hash:?}"
        ));
    }
    Ok(())
}

/// A file to restore: relative, and inside the working directory once `..` is folded.
pub fn check_file(file: &str) -> Result<(), String> {
    if file.trim().is_empty() {
        return Err("Empty file path".into());
    }
    if Path::new(file).is_absolute() {
        return Err(format!(
            "File path must be relative, got absolute path: {file:?}"
        ));
    }
    let mut depth = 0i32;
    for part in Path::new(file).components() {
        match part {
            std::path::Component::ParentDir => depth -= 1,
            std::path::Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return Err(format!(
                "File path escapes the working directory via traversal: {file:?}"
            ));
        }
    }
    Ok(())
}

/// git's settings that keep it to one thread ([`ONE_THREAD`]) as `GIT_CONFIG_*` variables,
/// which reach the git commands a command starts (`gc`'s `repack` and `pack-objects`).
fn one_thread() -> String {
    let mut vars = format!("GIT_CONFIG_COUNT={}", ONE_THREAD.len());
    for (i, (key, value)) in ONE_THREAD.iter().enumerate() {
        vars.push_str(&format!(
            " GIT_CONFIG_KEY_{i}={key} GIT_CONFIG_VALUE_{i}={value}"
        ));
    }
    vars
}

/// git on one thread: no parallel `lstat` of the index (`core.preloadIndex`), the index read
/// and written on one thread, `gc`'s delta search and a checkout on one; so on two cores git
/// leaves one to the loop (what that does to `ping`'s tail under other load was within the
/// noise: docs/PERFORMANCE.md). None of them changes what is stored: the same objects, trees,
/// commits and refs (an index written on one thread lacks only the optional extensions that
/// threaded reads use, end-of-entries and the offset table).
pub const ONE_THREAD: [(&str, &str); 4] = [
    ("core.preloadIndex", "false"),
    ("index.threads", "1"),
    ("pack.threads", "1"),
    ("checkout.workers", "1"),
];

/// The environment every git command runs in: the store, the work tree, the project's index
/// (or none), none of the user's or the system's git config (signing, hooks, credential
/// helpers would stop a snapshot or ask for a passphrase), and one thread.
fn git_env(store: &Store, work_tree: &Path, index: Option<&Path>) -> String {
    let mut env = format!(
        "unset GIT_NAMESPACE GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_INDEX_FILE; \
         export GIT_DIR={} GIT_WORK_TREE={} GIT_CONFIG_GLOBAL=/dev/null \
         GIT_CONFIG_SYSTEM=/dev/null GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 LC_ALL=C {}",
        quote(&store.dir.to_string_lossy()),
        quote(&work_tree.to_string_lossy()),
        one_thread(),
    );
    if let Some(index) = index {
        env.push_str(&format!(
            " GIT_INDEX_FILE={}",
            quote(&index.to_string_lossy())
        ));
    }
    env
}

/// `git ARGS` against the store as one `bash -c` line (`vars`: more of the environment, such
/// as a rewritten commit's dates).
pub fn git_line(
    store: &Store,
    work_tree: &Path,
    index: Option<&Path>,
    vars: &[(String, String)],
    args: &[String],
) -> String {
    let mut line = git_env(store, work_tree, index);
    for (name, value) in vars {
        line.push_str(&format!(" {name}={}", quote(value)));
    }
    line.push_str("; exec git");
    for arg in args {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    line
}

/// `git init --bare STORE`: no work tree (git refuses one here), none of the user's config.
pub fn init_line(store: &Store) -> String {
    format!(
        "unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_NAMESPACE GIT_ALTERNATE_OBJECT_DIRECTORIES; \
         export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_SYSTEM=/dev/null GIT_CONFIG_NOSYSTEM=1 LC_ALL=C {}; \
         exec git init --quiet --bare {}",
        one_thread(),
        quote(&store.dir.to_string_lossy())
    )
}

/// Entries under the work tree, counted up to `cap + 1` (Hermes skips a tree past `cap`).
pub fn count_line(cap: usize) -> String {
    format!(
        "find . -mindepth 1 2>/dev/null | head -n {} | wc -l",
        cap.saturating_add(1)
    )
}

/// Files larger than `bytes` taken out of the project's index after `git add -A`.
pub fn drop_oversize_line(store: &Store, work_tree: &Path, index: &Path, bytes: u64) -> String {
    format!(
        "{}; find . -path ./.git -prune -o -type f -size +{bytes}c -print0 2>/dev/null \
         | xargs -0 -r git --literal-pathspecs rm --cached --quiet --ignore-unmatch -- \
         >/dev/null",
        git_env(store, work_tree, Some(index))
    )
}

/// The bytes of the store's files (Hermes' size cap measures the same).
pub fn size_line(store: &Store) -> String {
    format!(
        "find {} -type f -printf '%s\\n' 2>/dev/null | awk '{{s+=$1}} END {{print s+0}}'",
        quote(&store.dir.to_string_lossy())
    )
}

/// How Hermes names the folders its pre-v2 per-project stores are moved into.
pub const LEGACY_PREFIX: &str = "legacy-";

/// Removes the `legacy-*` archives last changed over `retention_days` ago (Hermes' sweep;
/// run in the checkpoints' base folder, never following a link).
pub fn legacy_sweep_line(store: &Store, retention_days: u64) -> String {
    format!(
        "find {} -mindepth 1 -maxdepth 1 -type d -name '{LEGACY_PREFIX}*' -mmin +{} -exec rm -rf -- {{}} +",
        quote(&store.base.to_string_lossy()),
        retention_days.saturating_mul(24 * 60)
    )
}

/// The niceness a checkpoint's commands run at (the shell's own, inherited by everything it
/// starts; what the snapshot stores is unchanged). It orders git behind the loop only where
/// the kernel schedules processes one by one: with autogroups (Linux's default outside a
/// cgroup's CPU controller, as on the machine of docs/PERFORMANCE.md) each command is a
/// session of its own (the runner's `setsid`) and competes with the loop's session as an
/// equal whatever its niceness. Lowering the session as well (`/proc/self/autogroup`) was
/// measured and left out: under other processes' load the snapshot starved past git's
/// timeout and `ping` did no better.
pub const NICENESS: u8 = 10;

/// `line` run at [`NICENESS`] (the shell lowers its own priority first, so everything it
/// starts inherits it; a system without `renice` runs it as it is).
pub fn lowered(line: &str) -> String {
    format!("renice -n {NICENESS} -p $$ >/dev/null 2>&1; {line}")
}

/// Whether `git` is on `PATH` (what the commands will find).
pub fn git_on_path() -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join("git"))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_hermes_names() {
        // sha256("/tmp/proj") = 3b5c…; Hermes keeps the first 16 hex digits.
        let hash = project_hash(Path::new("/tmp/proj"));
        assert_eq!(hash.len(), 16);
        let full = ring::digest::digest(&ring::digest::SHA256, b"/tmp/proj");
        let hex: String = full.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hash, hex[..16]);
        assert_eq!(ref_name(&hash), format!("refs/hermes/{hash}"));
        let s = Store::of_home(Path::new("/h"));
        assert_eq!(s.dir, Path::new("/h/checkpoints/store"));
        assert_eq!(s.index("ab"), Path::new("/h/checkpoints/store/indexes/ab"));
        assert_eq!(
            s.meta("ab"),
            Path::new("/h/checkpoints/store/projects/ab.json")
        );
    }

    #[test]
    fn user_named_commits_and_files_are_checked() {
        assert!(check_commit("abcd").is_ok());
        assert!(check_commit("--patch").unwrap_err().contains("'-'"));
        assert!(check_commit("xyz1").is_err());
        assert!(check_commit("abc").is_err());
        assert!(check_commit(" ").is_err());
        assert!(check_file("src/a.rs").is_ok());
        assert!(check_file("a/../b").is_ok());
        assert!(check_file("/etc/passwd").unwrap_err().contains("relative"));
        assert!(check_file("a/../../b").unwrap_err().contains("escapes"));
    }

    #[test]
    fn git_runs_against_the_store_and_never_the_users_config() {
        let s = Store::of_home(Path::new("/h"));
        let line = git_line(
            &s,
            Path::new("/w it's"),
            Some(&s.index("ab")),
            &[],
            &["commit-tree".into(), "-m".into(), "a 'b'\n".into()],
        );
        assert!(line.contains("GIT_DIR=$'/h/checkpoints/store'"), "{line}");
        assert!(line.contains("GIT_WORK_TREE=$'/w it\\'s'"), "{line}");
        assert!(line.contains("GIT_INDEX_FILE=$'/h/checkpoints/store/indexes/ab'"));
        assert!(line.contains("GIT_CONFIG_GLOBAL=/dev/null"));
        assert!(
            line.ends_with("exec git $'commit-tree' $'-m' $'a \\'b\\'\\n'"),
            "{line}"
        );
        let plain = git_line(&s, Path::new("/w"), None, &[], &["gc".into()]);
        assert!(!plain.contains("GIT_INDEX_FILE="), "{plain}");
    }

    #[test]
    fn a_lowered_line_renices_its_shell_then_runs_as_written() {
        let line = lowered("exec git gc");
        assert_eq!(
            line, "renice -n 10 -p $$ >/dev/null 2>&1; exec git gc",
            "the shell itself is reniced, so git and its pipes inherit it"
        );
    }

    #[test]
    fn git_runs_on_one_thread() {
        let s = Store::of_home(Path::new("/h"));
        let line = git_line(&s, Path::new("/w"), None, &[], &["gc".into()]);
        assert!(
            line.contains(
                "GIT_CONFIG_COUNT=4 GIT_CONFIG_KEY_0=core.preloadIndex GIT_CONFIG_VALUE_0=false"
            ),
            "{line}"
        );
        assert!(
            line.contains("GIT_CONFIG_KEY_2=pack.threads GIT_CONFIG_VALUE_2=1"),
            "{line}"
        );
    }
}
