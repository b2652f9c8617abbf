//! Paths as a command would reach them: resolved against the working directory, `.`/`..` folded
//! lexically (symlinks are not followed), globs judged by the directory they expand in.

use std::path::{Component, Path, PathBuf};

use super::Place;
use super::words::Arg;
pub(crate) use crate::tools::sensitive_files::block_device;

/// What an operand names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// This path.
    Exact(PathBuf),
    /// Every entry of this directory (`dir/*`, `dir/.*`, an unfiltered `find dir`).
    Entries(PathBuf),
    /// Some entries of this directory (`dir/*.o`, `find dir -name x`).
    Some(PathBuf),
    /// Only known when the command runs.
    Unknown,
}

/// Directories whose contents belong to the system (besides every top-level directory).
const SYSTEM: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc",
    "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/snap", "/nix",
];

/// `.` and `..` folded, repeated `/` collapsed; `..` at `/` stays `/` (as the kernel does).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The target of an operand, relative paths taken from `cwd` (`None`: not known here).
pub(crate) fn target(arg: &Arg, cwd: Option<&Path>) -> Target {
    if let Some(t) = &arg.find_target {
        return t.clone();
    }
    if arg.dynamic || arg.text.is_empty() {
        return Target::Unknown;
    }
    let absolute = arg.pattern.starts_with('/');
    let base = match (absolute, cwd) {
        (true, _) => String::new(),
        (false, Some(c)) => escape_glob(&c.to_string_lossy()),
        (false, None) => return Target::Unknown,
    };
    let full = format!("{base}/{}", arg.pattern);
    let mut comps: Vec<&str> = Vec::new();
    for c in full.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                comps.pop();
            }
            c => comps.push(c),
        }
    }
    let literal = |cs: &[&str]| {
        let mut p = PathBuf::from("/");
        for c in cs {
            p.push(unescape(c));
        }
        p
    };
    match comps.iter().position(|c| has_glob(c)) {
        None => Target::Exact(literal(&comps)),
        Some(g) if comps[g..].iter().all(|c| broad_glob(c)) => {
            Target::Entries(literal(&comps[..g]))
        }
        Some(g) => Target::Some(literal(&comps[..g])),
    }
}

fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if matches!(ch, '*' | '?' | '[' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

fn unescape(c: &str) -> String {
    let mut out = String::with_capacity(c.len());
    let mut chars = c.chars();
    while let Some(ch) = chars.next() {
        if ch == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(ch);
        }
    }
    out
}

fn has_glob(c: &str) -> bool {
    let mut escaped = false;
    for ch in c.chars() {
        match (escaped, ch) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '*' | '?' | '[') => return true,
            _ => {}
        }
    }
    false
}

/// A glob that matches whatever a directory holds: no letter or digit outside brackets (`*`,
/// `.*`, `*.*`, `[a-z]*`, `?*`).
fn broad_glob(c: &str) -> bool {
    let mut in_bracket = false;
    let mut escaped = false;
    for ch in c.chars() {
        match (escaped, in_bracket, ch) {
            (true, _, ch) => {
                escaped = false;
                if !in_bracket && ch.is_alphanumeric() {
                    return false;
                }
            }
            (false, _, '\\') => escaped = true,
            (false, false, '[') => in_bracket = true,
            (false, true, ']') => in_bracket = false,
            (false, false, ch) if ch.is_alphanumeric() => return false,
            _ => {}
        }
    }
    true
}

fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// Paths whose loss breaks the machine or the user's account: `/`, every top-level directory,
/// home and its ancestors, any user's home, `/etc` and the system directories' contents — except,
/// outside `/etc`, what lies inside a working directory that is itself deep in one (a project in
/// `/var/www/app` or `/opt/x/src`).
pub(crate) fn protected(p: &Path, place: &Place) -> bool {
    if depth(p) <= 1 || p.starts_with("/etc") {
        return true;
    }
    if place.home.as_deref().is_some_and(|h| h.starts_with(p)) {
        return true;
    }
    if p.starts_with("/home") && depth(p) == 2 {
        return true;
    }
    let in_deep_project = depth(&place.cwd) >= 3 && p.starts_with(&place.cwd);
    SYSTEM.iter().any(|s| p.starts_with(s)) && !in_deep_project
}

/// A representative entry of `dir`, for judging "some entries of `dir`".
pub(crate) fn entry_of(dir: &Path) -> PathBuf {
    dir.join("entry")
}

/// `p` is the working directory itself or lies below it.
pub(crate) fn within(p: &Path, dir: &Path) -> bool {
    p.starts_with(dir)
}
