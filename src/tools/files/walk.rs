//! The search's walk over a tree, in path order, a bounded number of directory entries per
//! unit of work, so a directory of any size never holds the loop: its entries are read
//! `ENTRIES` at a time into a heap (the order comes out as they are taken, never as one sort
//! of the whole directory). What is skipped is ripgrep's (the `ignore` crate's matchers, as its
//! own walker applies them with `require_git(false)`): the `file_glob` override first, then
//! `.ignore`, `.gitignore` and `.git/info/exclude` of each directory from the deepest up
//! (those of the root's parents too) and git's global excludes, then hidden names. Every
//! ignore file and git config is read through `util::read_regular` (the crate's own readers
//! would block on a FIFO put there).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;

/// Directory entries read (and matched) in one unit of work.
pub(crate) const ENTRIES: usize = 512;
/// An ignore file or git config larger than this is not read.
const IGNORE_FILE_MAX: u64 = 1 << 20;

/// The matcher of the gitignore-format `files` (rooted at `dir`), read as the `ignore` crate
/// reads them (a line that is not UTF-8 or not a glob is left out), without blocking.
fn gitignore(dir: &Path, files: &[PathBuf]) -> Gitignore {
    let mut b = GitignoreBuilder::new(dir);
    for f in files {
        let Ok(Some(bytes)) = crate::util::read_regular_bytes(f, IGNORE_FILE_MAX) else {
            continue;
        };
        for (i, line) in bytes.split(|&c| c == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Ok(mut line) = std::str::from_utf8(line) else {
                continue;
            };
            if i == 0 {
                line = line.trim_start_matches('\u{feff}');
            }
            let _ = b.add_line(Some(f.clone()), line);
        }
    }
    b.build().unwrap_or_else(|_| Gitignore::empty())
}

/// Git's global excludes file (`core.excludesFile` of `GIT_CONFIG_GLOBAL`, else
/// `~/.gitconfig`, the XDG git config or the system's, else `$XDG_CONFIG_HOME/git/ignore`),
/// found and read as the `ignore` crate's `Gitignore::global` does.
fn global_excludes() -> Gitignore {
    let Ok(cwd) = std::env::current_dir() else {
        return Gitignore::empty();
    };
    let home = crate::util::user_home();
    let env_path = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let xdg = env_path("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
    let configs = [
        env_path("GIT_CONFIG_GLOBAL"),
        home.as_ref().map(|h| h.join(".gitconfig")),
        xdg.as_ref().map(|x| x.join("git/config")),
        Some(env_path("GIT_CONFIG_SYSTEM").unwrap_or_else(|| "/etc/gitconfig".into())),
    ];
    let named = configs.iter().flatten().find_map(|c| {
        let text = crate::util::read_regular_bytes(c, IGNORE_FILE_MAX).ok()??;
        excludes_file(&text, home.as_deref())
    });
    match named.or_else(|| xdg.map(|x| x.join("git/ignore"))) {
        Some(path) => gitignore(&cwd, &[path]),
        None => Gitignore::empty(),
    }
}

/// `core.excludesFile` of a git config's text (the `ignore` crate's lenient reading: any
/// `excludesfile = …` line), a leading `~` expanded.
fn excludes_file(config: &[u8], home: Option<&Path>) -> Option<PathBuf> {
    static LINE: std::sync::OnceLock<Option<regex::bytes::Regex>> = std::sync::OnceLock::new();
    let line = LINE
        .get_or_init(|| {
            regex::bytes::Regex::new(r#"(?im-u)^\s*excludesfile\s*=\s*"?\s*(\S+?)\s*"?\s*$"#).ok()
        })
        .as_ref()?;
    let value = std::str::from_utf8(line.captures(config)?.get(1)?.as_bytes()).ok()?;
    match (value.strip_prefix('~'), home) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            Some(PathBuf::from(format!("{}{rest}", home.display())))
        }
        _ => Some(PathBuf::from(value)),
    }
}

/// One directory's ignore files.
struct Level {
    ignore: Gitignore,
    git: Gitignore,
    exclude: Gitignore,
}

impl Level {
    fn of(dir: &Path) -> Level {
        Level {
            ignore: gitignore(dir, &[dir.join(".ignore")]),
            git: gitignore(dir, &[dir.join(".gitignore")]),
            exclude: gitignore(dir, &[dir.join(".git/info/exclude")]),
        }
    }
}

/// A directory being walked: its entries still to read, and those read not yet taken.
struct Frame {
    dir: PathBuf,
    reading: Option<std::fs::ReadDir>,
    kept: BinaryHeap<Reverse<(OsString, bool)>>,
}

/// What one unit of the walk came to.
pub(crate) enum Walked {
    /// A regular file to search.
    File(PathBuf),
    /// Work done, nothing to hand over yet.
    Nothing,
    /// The walk is over.
    Done,
}

pub(crate) struct Walk {
    /// The directories being walked, the deepest last, each with its ignore files.
    frames: Vec<(Frame, Level)>,
    /// The ignore files of the root's parents, the nearest first.
    parents: Vec<Level>,
    global: Gitignore,
    overrides: Override,
    /// A root that is a file: searched alone.
    file: Option<PathBuf>,
}

impl Walk {
    pub fn new(root: &Path, overrides: Override) -> Walk {
        let mut walk = Walk {
            frames: Vec::new(),
            parents: Vec::new(),
            global: global_excludes(),
            overrides,
            file: None,
        };
        if root.is_dir() {
            walk.parents = root.ancestors().skip(1).map(Level::of).collect();
            walk.enter(root.to_path_buf());
        } else if root.is_file() {
            walk.file = Some(root.to_path_buf());
        }
        walk
    }

    fn enter(&mut self, dir: PathBuf) {
        let level = Level::of(&dir);
        let frame = Frame {
            reading: std::fs::read_dir(&dir).ok(),
            dir,
            kept: BinaryHeap::new(),
        };
        self.frames.push((frame, level));
    }

    /// Whether the walk skips `path` (ripgrep's order of precedence).
    fn skips(&self, path: &Path, name: &OsString, is_dir: bool) -> bool {
        match self.overrides.matched(path, is_dir) {
            Match::Whitelist(_) => return false,
            Match::Ignore(_) => return true,
            Match::None => {}
        }
        let levels = self.frames.iter().rev().map(|(_, l)| l);
        let (mut ignore, mut git, mut exclude) = (Match::None, Match::None, Match::None);
        for level in levels.chain(self.parents.iter()) {
            if ignore.is_none() {
                ignore = level.ignore.matched(path, is_dir);
            }
            if git.is_none() {
                git = level.git.matched(path, is_dir);
            }
            if exclude.is_none() {
                exclude = level.exclude.matched(path, is_dir);
            }
        }
        let verdict = ignore
            .or(git)
            .or(exclude)
            .or(self.global.matched(path, is_dir));
        match verdict {
            Match::Ignore(_) => true,
            Match::Whitelist(_) => false,
            Match::None => name.as_encoded_bytes().starts_with(b"."),
        }
    }

    /// One unit of the walk: up to `ENTRIES` entries of the current directory read, or the
    /// next entry in path order taken.
    pub fn unit(&mut self) -> Walked {
        if let Some(file) = self.file.take() {
            return Walked::File(file);
        }
        let Some((frame, _)) = self.frames.last_mut() else {
            return Walked::Done;
        };
        if let Some(reading) = &mut frame.reading {
            let mut read = Vec::with_capacity(ENTRIES);
            for entry in reading.by_ref().take(ENTRIES) {
                // An entry that cannot be read is skipped, as the walk skips a directory it
                // cannot open.
                let Ok(entry) = entry else { continue };
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                // Links are not followed: only regular files and directories are walked.
                if kind.is_file() || kind.is_dir() {
                    read.push((entry.file_name(), kind.is_dir()));
                }
            }
            if read.is_empty() {
                frame.reading = None;
            }
            let dir = frame.dir.clone();
            for (name, is_dir) in read {
                let path = dir.join(&name);
                if !self.skips(&path, &name, is_dir) {
                    let (frame, _) = self.frames.last_mut().expect("the frame being read");
                    frame.kept.push(Reverse((name, is_dir)));
                }
            }
            return Walked::Nothing;
        }
        match frame.kept.pop() {
            None => {
                self.frames.pop();
                Walked::Nothing
            }
            Some(Reverse((name, true))) => {
                let dir = frame.dir.join(name);
                self.enter(dir);
                Walked::Nothing
            }
            Some(Reverse((name, false))) => Walked::File(frame.dir.join(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk_all(root: &Path, globs: &[&str]) -> (Vec<String>, usize) {
        let mut o = ignore::overrides::OverrideBuilder::new(root);
        for g in globs {
            o.add(g).unwrap();
        }
        let mut walk = Walk::new(root, o.build().unwrap());
        let (mut files, mut units) = (Vec::new(), 0);
        loop {
            units += 1;
            match walk.unit() {
                Walked::File(f) => files.push(f.strip_prefix(root).unwrap().display().to_string()),
                Walked::Nothing => {}
                Walked::Done => return (files, units),
            }
        }
    }

    /// What ripgrep's own walker (sorted by path) lists.
    fn ripgreps(root: &Path, globs: &[&str]) -> Vec<String> {
        let mut b = ignore::WalkBuilder::new(root);
        b.require_git(false).sort_by_file_path(|a, b| a.cmp(b));
        let mut o = ignore::overrides::OverrideBuilder::new(root);
        for g in globs {
            o.add(g).unwrap();
        }
        b.overrides(o.build().unwrap());
        b.build()
            .flatten()
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(|e| e.path().strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn ignore_files_are_read_without_blocking_bom_and_crlf_as_git_reads_them() {
        let dir = crate::util::ScratchDir::new("wk-fifo");
        let dir = dir.path();
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for f in ["a.rs", "a.log", "sub/b.rs", "sub/b.tmp"] {
            std::fs::write(dir.join(f), "x\n").unwrap();
        }
        // A FIFO where an ignore file belongs is left out, not waited on.
        let fifo = dir.join(".gitignore");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::write(dir.join(".ignore"), "*.log\n").unwrap();
        std::fs::write(dir.join("sub/.gitignore"), "\u{feff}*.tmp\r\n").unwrap();
        let (files, _) = walk_all(dir, &[]);
        assert_eq!(files, ["a.rs", "sub/b.rs"]);
    }

    #[test]
    fn the_excludes_file_of_a_git_config_is_found_as_the_ignore_crate_finds_it() {
        let home = Path::new("/home/u");
        let found = |text: &str| excludes_file(text.as_bytes(), Some(home));
        assert_eq!(
            found("[core]\n\texcludesFile = ~/.gitignore_global\n"),
            Some(PathBuf::from("/home/u/.gitignore_global"))
        );
        assert_eq!(
            found("[core]\nexcludesfile = \"/etc/ignore\"\n"),
            Some(PathBuf::from("/etc/ignore"))
        );
        assert_eq!(found("[core]\nexcludeFile = /x\n"), None);
        assert_eq!(found("[user]\nname = u\n"), None);
    }

    #[test]
    fn the_walk_skips_what_ripgrep_skips_in_path_order() {
        let dir = std::env::temp_dir().join(format!("tuigw-wk-{}", crate::util::random_hex(8)));
        for d in ["a", "a/deep", "b", "b/build", ".hidden", "c", ".git/info"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        for f in [
            "z.txt",
            "a/1.rs",
            "a/2.log",
            "a/deep/k.rs",
            "a/deep/keep.log",
            "b/x.rs",
            "b/build/out.rs",
            ".hidden/h.rs",
            ".env",
            "c/y.txt",
            "c/secret.rs",
            "B.rs",
        ] {
            std::fs::write(dir.join(f), "x\n").unwrap();
        }
        std::fs::write(dir.join(".gitignore"), "*.log\nbuild/\n").unwrap();
        std::fs::write(dir.join("a/deep/.gitignore"), "!keep.log\n").unwrap();
        std::fs::write(dir.join("c/.ignore"), "secret.rs\n").unwrap();
        std::fs::write(dir.join(".git/info/exclude"), "z.txt\n").unwrap();
        for globs in [&[][..], &["*.rs"][..], &["!a/**"][..]] {
            let (ours, _) = walk_all(&dir, globs);
            assert_eq!(ours, ripgreps(&dir, globs), "{globs:?}");
        }
        let (ours, _) = walk_all(&dir, &[]);
        assert_eq!(
            ours,
            [
                "B.rs",
                "a/1.rs",
                "a/deep/k.rs",
                "a/deep/keep.log",
                "b/x.rs",
                "c/y.txt"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_huge_directory_is_read_a_bounded_number_of_entries_a_unit() {
        let dir = std::env::temp_dir().join(format!("tuigw-wh-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let n = 20 * ENTRIES + 7;
        for i in 0..n {
            std::fs::write(
                dir.join(format!("f{i:06}.{}", if i % 2 == 0 { "rs" } else { "md" })),
                "",
            )
            .unwrap();
        }
        let (ours, units) = walk_all(&dir, &["*.rs"]);
        assert_eq!(ours, ripgreps(&dir, &["*.rs"]));
        assert_eq!(ours.len(), n.div_ceil(2));
        // Every entry read in units of at most ENTRIES, then each kept one taken in its own.
        assert!(units > n / ENTRIES + ours.len(), "{units}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
