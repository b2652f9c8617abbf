//! A scan of the skill folders, one bounded unit a step (a folder listed, or one SKILL.md
//! read), so the loop gives it a slice of each iteration and nothing waits behind a thousand
//! skills. Walks as Hermes' `iter_skill_index_files` does: links followed, `.git`, `.hub`,
//! `.archive`, virtualenvs and caches skipped, and a skill's own `references/`, `templates/`,
//! `assets/`, `scripts/` not searched for skills. Bounded: depth, folders, entries per folder,
//! bytes per file. Then the enabled plugins' skills (`plugins.rs`), a plugin a step.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use super::catalog::{Catalog, Meta, Record, Scanned};
use super::header;
use super::settings::Settings;
use crate::clock::Budget;

/// Folders never searched.
pub const EXCLUDED: [&str; 14] = [
    ".git",
    ".github",
    ".hub",
    ".archive",
    ".venv",
    "venv",
    "node_modules",
    "site-packages",
    "__pycache__",
    ".tox",
    ".nox",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
];
/// A skill's supporting folders (loaded with `skill_view`'s `file_path`, not skills).
pub const SUPPORT: [&str; 4] = ["references", "templates", "assets", "scripts"];
/// A SKILL.md or DESCRIPTION.md larger than this is skipped.
pub const FILE_MAX: u64 = 1024 * 1024;
/// A SKILL.md is read this far first (its header and description, nearly always).
const HEAD: usize = 8 * 1024;
/// Deepest folder searched under a root (links can make cycles).
const DEPTH_MAX: usize = 12;
/// Folders listed at most in one scan.
const FOLDERS_MAX: usize = 50_000;
/// Entries of one folder looked at at most.
const ENTRIES_MAX: usize = 10_000;
/// Legacy flat skills (`<name>.md`) remembered at most in one scan.
const FLAT_MAX: usize = 10_000;

enum Phase {
    /// Listing folders of root `usize`.
    Walking(usize),
    /// Listing plugin folder root `usize`.
    PluginRoots(usize),
    /// Reading the plugins found, one a step.
    Plugins,
    /// Reading the files found.
    Reading,
    Done,
}

/// A scan in progress.
pub struct Scan {
    settings: Settings,
    phase: Phase,
    folders: Vec<(PathBuf, usize)>,
    folders_listed: usize,
    /// SKILL.md (`true`) and DESCRIPTION.md files of the root being walked.
    found: Vec<(PathBuf, bool)>,
    to_read: VecDeque<(usize, PathBuf, bool)>,
    records: Vec<Record>,
    /// `.md` files other than SKILL.md outside support folders, by root: what `skill_view`
    /// finds as Hermes' legacy flat `<name>.md` skills (listed, not read).
    flat: Vec<(usize, PathBuf)>,
    descriptions: BTreeMap<String, String>,
    problems: Vec<String>,
    plugin_dirs: VecDeque<PathBuf>,
    plugins: super::plugins::ByNamespace,
    /// `$HERMES_HOME/.env`, read once for plugins' `requires_env` (names looked at, never
    /// values said).
    env: Option<crate::hermes_env::HermesEnv>,
    /// What an earlier scan read, by path: a file found unchanged is not read again.
    known: std::collections::HashMap<PathBuf, Record>,
}

impl Scan {
    pub fn new(settings: Settings) -> Scan {
        let mut scan = Scan {
            settings,
            phase: Phase::Walking(0),
            folders: Vec::new(),
            folders_listed: 0,
            found: Vec::new(),
            to_read: VecDeque::new(),
            records: Vec::new(),
            flat: Vec::new(),
            descriptions: BTreeMap::new(),
            problems: Vec::new(),
            plugin_dirs: VecDeque::new(),
            plugins: Default::default(),
            env: None,
            known: Default::default(),
        };
        scan.enter_root(0);
        scan
    }

    fn enter_root(&mut self, root: usize) {
        match self.settings.roots.get(root) {
            Some(dir) => {
                self.folders = vec![(dir.clone(), 0)];
                self.phase = Phase::Walking(root);
            }
            None => self.phase = Phase::PluginRoots(0),
        }
    }

    /// Reuse what `earlier` read for each file found unchanged (same mtime, size, inode).
    pub fn knowing(mut self, earlier: &[Record]) -> Scan {
        self.known = earlier
            .iter()
            .filter(|r| r.stamp.is_some())
            .map(|r| (r.skill_md.clone(), r.clone()))
            .collect();
        self
    }

    /// Work until `budget` is spent (a unit at least); true once the scan is complete.
    pub fn run(&mut self, budget: &Budget) -> bool {
        loop {
            if self.step() {
                return true;
            }
            if budget.spent() {
                return false;
            }
        }
    }

    /// One unit of work; true once the scan is complete.
    pub fn step(&mut self) -> bool {
        match self.phase {
            Phase::Walking(root) => {
                match self.folders.pop() {
                    Some((dir, depth)) => self.list(root, &dir, depth),
                    None => {
                        // Hermes reads a root's files in path order.
                        let mut found = std::mem::take(&mut self.found);
                        found.sort();
                        self.to_read
                            .extend(found.into_iter().map(|(p, skill)| (root, p, skill)));
                        self.enter_root(root + 1);
                    }
                }
                false
            }
            Phase::PluginRoots(i) => {
                match self.settings.plugin_roots.get(i) {
                    Some(root) => {
                        let dirs = super::plugins::list_root(root);
                        self.plugin_dirs.extend(dirs);
                        self.phase = Phase::PluginRoots(i + 1);
                    }
                    None => self.phase = Phase::Plugins,
                }
                false
            }
            Phase::Plugins => {
                match self.plugin_dirs.pop_front() {
                    Some(dir) => self.read_plugin(&dir),
                    None => self.phase = Phase::Reading,
                }
                false
            }
            Phase::Reading => {
                match self.to_read.pop_front() {
                    Some((root, path, true)) => self.read_skill(root, path),
                    Some((root, path, false)) => self.read_description(root, &path),
                    None => self.phase = Phase::Done,
                }
                matches!(self.phase, Phase::Done)
            }
            Phase::Done => true,
        }
    }

    fn list(&mut self, root: usize, dir: &Path, depth: usize) {
        if self.folders_listed >= FOLDERS_MAX {
            if self.folders_listed == FOLDERS_MAX {
                self.problems.push(format!(
                    "stopped listing folders after {FOLDERS_MAX} (is a link making a cycle?)"
                ));
                self.folders_listed += 1;
            }
            return;
        }
        self.folders_listed += 1;
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            // A root that is not there yet is no problem.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                self.problems
                    .push(format!("{}: cannot list it: {e}", dir.display()));
                return;
            }
        };
        let mut subdirs = Vec::new();
        let mut has_skill = false;
        for entry in entries.take(ENTRIES_MAX).flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let is_dir = match entry.file_type() {
                Ok(t) if t.is_symlink() => std::fs::metadata(&path).is_ok_and(|m| m.is_dir()),
                Ok(t) => t.is_dir(),
                Err(_) => false,
            };
            if is_dir {
                if !EXCLUDED.contains(&name.as_str()) {
                    subdirs.push((name, path));
                }
            } else if name == "SKILL.md" {
                has_skill = true;
                self.found.push((path, true));
            } else {
                if name == "DESCRIPTION.md" {
                    self.found.push((path.clone(), false));
                }
                if name.ends_with(".md") && self.flat.len() < FLAT_MAX {
                    self.flat.push((root, path));
                }
            }
        }
        if depth >= DEPTH_MAX {
            return;
        }
        for (name, path) in subdirs {
            if !(has_skill && SUPPORT.contains(&name.as_str())) {
                self.folders.push((path, depth + 1));
            }
        }
    }

    fn read_plugin(&mut self, dir: &Path) {
        let home = &self.settings.home;
        let env = self
            .env
            .get_or_insert_with(|| crate::hermes_env::HermesEnv::load(home).unwrap_or_default());
        let set = |n: &str| super::view::env_is_set(env, n);
        match super::plugins::read_plugin(dir, &self.settings.plugin_gate, &set) {
            // A later folder's plugin of the same name replaces an earlier one (Hermes').
            Ok(Some((namespace, skills))) => {
                self.plugins.insert(namespace, skills);
            }
            Ok(None) => {}
            Err(e) => self.problems.push(e),
        }
    }

    fn read_skill(&mut self, root: usize, path: PathBuf) {
        if let Some(known) = self.known.remove(&path) {
            let stamp = stamp_of(&path);
            if stamp.is_some() && known.stamp == stamp {
                self.records.push(Record { root, ..known });
                return;
            }
        }
        let dir_name = path
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (read, stamp) = match read_header(&path, &dir_name) {
            Ok(Some(read)) => read,
            Ok(None) => return,
            Err(e) => (Err(format!("cannot read it: {e}")), None),
        };
        self.records.push(Record {
            root,
            skill_md: path,
            read,
            stamp,
        });
    }

    fn read_description(&mut self, root: usize, path: &Path) {
        let Ok(Some(text)) = crate::util::read_regular(path, FILE_MAX) else {
            return;
        };
        let Ok(parsed) = header::parse(&text) else {
            return;
        };
        let Some(d) = header::text_of(parsed.fields.get("description")) else {
            return;
        };
        let base = &self.settings.roots[root];
        let category = path
            .parent()
            .and_then(|p| p.strip_prefix(base).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "general".to_string());
        // The local root's description wins over an external one's.
        self.descriptions
            .entry(category)
            .or_insert_with(|| d.trim().trim_matches(|c| c == '"' || c == '\'').to_string());
    }

    /// The catalog of a complete scan.
    pub fn finish(self) -> Catalog {
        Catalog::new(Scanned {
            settings: self.settings,
            records: self.records,
            flat: self.flat,
            descriptions: self.descriptions,
            problems: self.problems,
            plugins: self.plugins,
        })
    }
}

/// `(mtime ns, size, inode)` of `path` (links followed), if it can be looked at.
fn stamp_of(path: &Path) -> Option<(i128, u64, u64)> {
    Some(stamp(&std::fs::metadata(path).ok()?))
}

fn stamp(m: &std::fs::Metadata) -> (i128, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let ns = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    (ns, m.size(), m.ino())
}

/// The fields of the SKILL.md at `path` (in folder `dir_name`) and its stamp, reading what
/// they need only: the first [`HEAD`] bytes hold the header and the description of nearly
/// every skill (Hermes' average 12 KB), so the rest is read only when the header is not closed
/// in them or the description must come from the body. One open, one `fstat` for the stamp,
/// one read in the common case. `Ok(None)`: gone.
#[allow(
    clippy::type_complexity,
    reason = "the record's two parts, as Record holds them"
)]
fn read_header(
    path: &Path,
    dir_name: &str,
) -> std::io::Result<Option<(Result<Meta, String>, Option<(i128, u64, u64)>)>> {
    use std::io::Read;
    let Some(mut f) = crate::util::open_regular(path)? else {
        return Ok(None);
    };
    let meta = f.metadata()?;
    if meta.len() > FILE_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {} KiB; refused", FILE_MAX / 1024),
        ));
    }
    // As much as `fstat` says there is, up to HEAD, without the read that finds the end: a
    // file that grew since is read as it was (its stamp says the old size, so the next scan
    // reads it again).
    let mut buf = vec![0; (meta.len() as usize).min(HEAD)];
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    let cut = got == HEAD && meta.len() > HEAD as u64;
    let head = match std::str::from_utf8(&buf) {
        Ok(t) => Some(t),
        // The cut split a character: what precedes it is whole.
        Err(e) if cut && e.error_len().is_none() => {
            std::str::from_utf8(&buf[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    let read = head.map(|t| Meta::read(t, dir_name));
    let settled = match &read {
        Some(Ok(m)) => !cut || m.header_described,
        Some(Err(_)) | None => !cut,
    };
    let read = match read {
        Some(read) if settled => read,
        None if settled => return Err(utf8_error()),
        _ => {
            (&mut f)
                .take(FILE_MAX + 1 - HEAD as u64)
                .read_to_end(&mut buf)?;
            if buf.len() as u64 > FILE_MAX {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::FileTooLarge,
                    format!("larger than {} KiB; refused", FILE_MAX / 1024),
                ));
            }
            let text = std::str::from_utf8(&buf).map_err(|_| utf8_error())?;
            Meta::read(text, dir_name)
        }
    };
    Ok(Some((read, Some(stamp(&meta)))))
}

fn utf8_error() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "not valid UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_walks_in_steps_skipping_support_and_excluded_folders() {
        let root =
            std::env::temp_dir().join(format!("tuigw-skscan-{}", crate::util::random_hex(8)));
        let skills = root.join("skills");
        let write = |rel: &str, text: &str| {
            let p = skills.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("dev/a/SKILL.md", "---\nname: a\ndescription: A\n---\nbody");
        write(
            "dev/a/references/old/SKILL.md",
            "---\nname: old\ndescription: o\n---\nb",
        );
        write(
            "dev/.git/x/SKILL.md",
            "---\nname: git\ndescription: g\n---\nb",
        );
        write("dev/DESCRIPTION.md", "---\ndescription: Dev things\n---\n");
        write("b/SKILL.md", "---\nname: b\n");
        write(
            "scripts/c/SKILL.md",
            "---\nname: c\ndescription: C\n---\nbody",
        );
        let settings = Settings {
            roots: vec![skills.clone(), root.join("missing")],
            ..Default::default()
        };
        let mut scan = Scan::new(settings);
        let mut steps = 0;
        while !scan.step() {
            steps += 1;
            assert!(steps < 100);
        }
        assert!(steps > 5, "one unit a step: {steps}");
        let c = scan.finish();
        let names: Vec<&str> = c.offered().map(|s| s.name()).collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(c.malformed().count(), 1);
        let none = Default::default();
        assert!(
            c.prompt_index(&none, &none)
                .contains("  dev: Dev things\n    - a: A")
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_header_or_a_description_past_the_first_read_is_read_whole() {
        let dir = std::env::temp_dir().join(format!("tuigw-skhead-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let pad = "# heading\n\n".repeat(HEAD / 8);
        let cases = [
            // A long header: closed past the first read.
            (
                format!(
                    "---\nname: long\ntags: \"{}\"\ndescription: D\n---\nb",
                    "x".repeat(HEAD)
                ),
                "long",
                "D",
            ),
            // No description: the body's first line, past the first read.
            (
                format!("---\nname: nodesc\n---\n{pad}Body says so.\n"),
                "nodesc",
                "Body says so.",
            ),
            (
                format!("{pad}Headerless body.\n"),
                "dir",
                "Headerless body.",
            ),
            // A description in the header: the rest of the body is not needed.
            (
                format!("---\nname: short\ndescription: S\n---\n{pad}"),
                "short",
                "S",
            ),
        ];
        for (text, name, description) in cases {
            let p = dir.join("SKILL.md");
            std::fs::write(&p, &text).unwrap();
            let (read, stamp) = read_header(&p, "dir").unwrap().unwrap();
            let m = read.unwrap();
            assert_eq!(
                (m.name.as_str(), m.description.as_str()),
                (name, description)
            );
            assert_eq!(stamp, stamp_of(&p));
        }
        std::fs::write(dir.join("SKILL.md"), "---\nname: open\n").unwrap();
        let (read, _) = read_header(&dir.join("SKILL.md"), "dir").unwrap().unwrap();
        assert!(read.unwrap_err().contains("not closed"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
