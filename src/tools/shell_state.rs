//! The `terminal` tool's persistent shell: each session's working directory and exported
//! variables, carried from one `bash -c` to the next and kept on disk, so a resumed session (in
//! another gateway process too) goes on where its last command left.
//!
//! Every command still runs as its own `bash -c` under the supervisor. Before it, the shell
//! sources a restore file the gateway wrote (`cd`, `export`, `unset`, and the function that
//! saves the state); its `EXIT` trap (and a call after the command, for a command that replaced
//! the trap) writes the state it ends with — `$PWD` and bash's `export -p` listing (one builtin,
//! no subshell: 50 shells stopped at once by a shutdown exit in half the time) —
//! to a capture file the gateway reads, bounded, when the run ends. What is kept is the
//! difference from the environment the gateway gives every command (variables set or changed,
//! variables unset), without what looks secret (`runner/secrets.rs`: the same rule decides what
//! is restored), in `$HERMES_HOME/shell/<stored session id>.json` (0600, written atomically).
//!
//! Pure parts (capture parsing, the difference, the restore script, the JSON) are unit-tested
//! here; the files are [`Dir`]'s.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::runner::secrets::is_withheld;

/// The most a capture (the exported environment as the shell ends) may weigh; a bigger one is
/// not kept, and the session goes on from its previous state.
pub const CAPTURE_MAX: usize = 256 * 1024;
/// The most a saved state file may weigh when it is read back.
const SAVED_MAX: u64 = 2 * 1024 * 1024;
/// First record of a capture, so a file of something else is not read as one.
const MAGIC: &str = "tuigw-shell 2";
/// Last record of a complete capture (a shell killed while writing leaves none).
const END: &str = "end";
/// Variables bash keeps for itself (some read-only): never saved or restored.
const BASH_OWN: &[&str] = &[
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "SHELLOPTS",
    "BASHOPTS",
    "UID",
    "EUID",
    "PPID",
    "BASHPID",
];
/// The function the restore file defines and the command's shell calls at its end.
const KEEP_FN: &str = "__tuigw_keep_state";

/// One session's shell state: how it differs from a fresh command's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellState {
    /// The directory the last command ended in (`None`: the session's working directory).
    pub cwd: Option<String>,
    /// Exported variables the session set or changed.
    pub set: BTreeMap<String, String>,
    /// Variables of the gateway's environment the session unset.
    pub unset: BTreeSet<String>,
}

/// What a command's shell wrote as it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub cwd: String,
    pub vars: Vec<(String, String)>,
}

/// Why a capture is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureError {
    /// No capture file: the shell never got to its end (`exec`, killed).
    Missing,
    /// Cut short or not one of ours.
    Incomplete,
    /// Over [`CAPTURE_MAX`] bytes.
    TooBig(u64),
}

/// Parse a capture: `MAGIC`, `$PWD`, the `export -p` listing, `END`, each ended by a NUL
/// (bash's values hold none).
pub fn parse_capture(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let records: Vec<&[u8]> = bytes.splitn(5, |&b| b == 0).collect();
    let [magic, cwd, listing, end, rest] = records[..] else {
        return Err(CaptureError::Incomplete);
    };
    if magic != MAGIC.as_bytes() || end != END.as_bytes() || !rest.is_empty() {
        return Err(CaptureError::Incomplete);
    }
    let cwd = std::str::from_utf8(cwd)
        .ok()
        .filter(|d| d.starts_with('/'))
        .ok_or(CaptureError::Incomplete)?
        .to_string();
    let vars = super::export_listing::parse(listing)
        .ok_or(CaptureError::Incomplete)?
        .into_iter()
        // A value that is not UTF-8 cannot be judged for secrets: it is not kept.
        .filter_map(|(name, value)| Some((name, String::from_utf8(value).ok()?)))
        .filter(|(name, _)| is_name(name))
        .collect();
    Ok(Capture { cwd, vars })
}

/// A shell variable's name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The state a capture leaves, against `base` (the environment a fresh command gets), with the
/// names of the secret-looking variables left out of it.
pub fn state_of(
    capture: &Capture,
    base: &HashMap<String, String>,
    passthrough: &[String],
) -> (ShellState, Vec<String>) {
    let mut state = ShellState {
        cwd: Some(capture.cwd.clone()),
        ..Default::default()
    };
    let mut withheld = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, value) in &capture.vars {
        if BASH_OWN.contains(&name.as_str()) {
            continue;
        }
        seen.insert(name.as_str());
        if base.get(name) == Some(value) {
            continue;
        }
        if is_withheld(name, value, passthrough) {
            withheld.push(name.clone());
            continue;
        }
        state.set.insert(name.clone(), value.clone());
    }
    // A name bash cannot hold as a variable (`a-b`) is passed through the environment, never
    // listed by `export -p`, and no command could unset it.
    state.unset = base
        .keys()
        .filter(|n| is_name(n) && !seen.contains(n.as_str()) && !BASH_OWN.contains(&n.as_str()))
        .cloned()
        .collect();
    (state, withheld)
}

/// What a state says of one variable.
#[derive(PartialEq)]
enum Var<'a> {
    Set(&'a str),
    Unset,
    /// As the gateway's environment has it.
    Base,
}

fn var<'a>(state: &'a ShellState, name: &str) -> Var<'a> {
    match state.set.get(name) {
        Some(v) => Var::Set(v),
        None if state.unset.contains(name) => Var::Unset,
        None => Var::Base,
    }
}

/// The state a run leaves that started from `before` and ended with `after`, over `current`
/// (what the session's other runs that ended meanwhile saved): only what this run changed —
/// its directory, each variable it set, changed or unset — goes over `current`, so runs of one
/// session at once (two gateways on one session) each keep their changes; a variable both
/// changed is the last one's to end.
pub fn merge(current: &ShellState, before: &ShellState, after: &ShellState) -> ShellState {
    let mut merged = current.clone();
    if after.cwd != before.cwd {
        merged.cwd = after.cwd.clone();
    }
    let names: BTreeSet<&String> = [before, after]
        .into_iter()
        .flat_map(|s| s.set.keys().chain(&s.unset))
        .collect();
    for name in names {
        let now = var(after, name);
        if var(before, name) == now {
            continue;
        }
        merged.set.remove(name);
        merged.unset.remove(name);
        match now {
            Var::Set(value) => {
                merged.set.insert(name.clone(), value.to_string());
            }
            Var::Unset => {
                merged.unset.insert(name.clone());
            }
            Var::Base => {}
        }
    }
    merged
}

/// `s` as one bash word that means exactly `s` (`$'…'`: newlines and quotes escaped, so the
/// word stays on one line).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("$'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\{:03o}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The restore file: go to `cwd`, put back the variables of `state` (none that looks secret),
/// and define the function that writes the end state to `capture`.
pub fn restore_script(
    state: &ShellState,
    cwd: &str,
    capture: Option<&Path>,
    passthrough: &[String],
) -> String {
    let mut s = format!("builtin cd -- {} 2>/dev/null\n", quote(cwd));
    for (name, value) in &state.set {
        if is_name(name) && !is_withheld(name, value, passthrough) {
            // (A variable made read-only since is left as it is, without a word each command.)
            s.push_str(&format!(
                "builtin export {name}={} 2>/dev/null\n",
                quote(value)
            ));
        }
    }
    for name in state.unset.iter().filter(|n| is_name(n)) {
        s.push_str(&format!("builtin unset -v {name} 2>/dev/null\n"));
    }
    if let Some(capture) = capture {
        let file = quote(&capture.to_string_lossy());
        // Once per shell (the trap and the call after the command); `$?` is kept, so the
        // command's exit status is the shell's.
        s.push_str(&format!(
            "{KEEP_FN}() {{ builtin local __rc=$?; \
             [[ -n ${{__tuigw_kept-}} ]] && builtin return $__rc; __tuigw_kept=1; builtin set +eu; \
             {{ builtin printf '%s\\0%s\\0' {magic} \"$PWD\"; builtin export -p; \
             builtin printf '\\0%s\\0' {END}; }} >{file} 2>/dev/null; builtin return $__rc; }}\n",
            magic = quote(MAGIC),
        ));
    }
    s
}

/// The command line `bash -c` runs: the restore file sourced, then the command as it was
/// written (one `eval`, so its own syntax and `exit` stay its own), then the save.
pub fn wrapped_command(command: &str, restore: &Path, saves: bool) -> String {
    let source = format!(
        "builtin source {} || builtin exit 126",
        quote(&restore.to_string_lossy())
    );
    if saves {
        format!(
            "{source}; builtin trap {KEEP_FN} EXIT; builtin eval -- {}; {KEEP_FN}",
            quote_plain(command)
        )
    } else {
        format!("{source}; builtin eval -- {}", quote_plain(command))
    }
}

/// `'…'` quoting (`'` as `'\''`): the command keeps its own text, newlines included.
fn quote_plain(s: impl AsRef<str>) -> String {
    format!("'{}'", s.as_ref().replace('\'', "'\\''"))
}

impl ShellState {
    pub fn is_empty(&self) -> bool {
        self.cwd.is_none() && self.set.is_empty() && self.unset.is_empty()
    }

    pub fn to_json(&self) -> Value {
        json!({"version": 1, "cwd": self.cwd, "set": self.set, "unset": self.unset})
    }

    /// A saved state; `None` when it is not one (the session then starts afresh).
    pub fn from_json(v: &Value) -> Option<ShellState> {
        if v.get("version")?.as_u64()? != 1 {
            return None;
        }
        let cwd = match v.get("cwd") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        let set = v
            .get("set")?
            .as_object()?
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .filter(|(k, _)| is_name(k))
            .collect();
        let unset = v
            .get("unset")?
            .as_array()?
            .iter()
            .filter_map(|n| n.as_str())
            .filter(|n| is_name(n))
            .map(str::to_string)
            .collect();
        Some(ShellState { cwd, set, unset })
    }
}

/// `$HERMES_HOME/shell`: the saved states (`<id>.json`) and each run's restore and capture
/// files (`.run-<gateway pid>-<n>.in` / `.out`, removed when the run ends; those of a gateway
/// that was killed are removed by the next one to use the directory).
pub struct Dir {
    path: PathBuf,
}

impl Dir {
    /// The directory under `home`, created 0700 (not a link, ours), tightened to 0700.
    pub fn open(home: &Path) -> io::Result<Dir> {
        let path = crate::private_file::private_dir(home, &["shell"])?;
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Dir { path })
    }

    fn saved(&self, session: &str) -> Option<PathBuf> {
        file_stem(session).map(|s| self.path.join(format!("{s}.json")))
    }

    /// The state saved for `session` (empty when none, or unreadable: said on stderr).
    pub fn load(&self, session: &str) -> ShellState {
        let Some(path) = self.saved(session) else {
            return ShellState::default();
        };
        match crate::private_file::read(&path, SAVED_MAX) {
            Ok(None) => ShellState::default(),
            Ok(Some(bytes)) => serde_json::from_slice(&bytes)
                .ok()
                .and_then(|v| ShellState::from_json(&v))
                .unwrap_or_else(|| {
                    crate::diag!("[gateway] {}: not a shell state; ignored", path.display());
                    ShellState::default()
                }),
            Err(e) => {
                crate::diag!("[gateway] cannot read {}: {e}", path.display());
                ShellState::default()
            }
        }
    }

    /// Keep `state` for `session` (an empty state removes the file).
    pub fn save(&self, session: &str, state: &ShellState) -> io::Result<()> {
        let Some(path) = self.saved(session) else {
            return Ok(());
        };
        if state.is_empty() {
            return remove_quietly(&path);
        }
        crate::private_file::replace(&path, state.to_json().to_string().as_bytes(), 0o600)
    }

    /// The restore and capture files of one run.
    pub fn run_files(&self, n: u64) -> (PathBuf, PathBuf) {
        let stem = format!(".run-{}-{n}", std::process::id());
        (
            self.path.join(format!("{stem}.in")),
            self.path.join(format!("{stem}.out")),
        )
    }

    /// Remove the run files of gateways no longer running.
    pub fn remove_stale_runs(&self) {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(".run-"))
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            // SAFETY: kill with signal 0 only checks that the process exists.
            let alive = unsafe { libc::kill(pid, 0) } == 0
                || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
            if !alive {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// The shell state of `from` becomes `to`'s too (a branch, a compaction's new session, a
/// background prompt): the new session's commands go on where the parent's left.
pub fn inherit(home: &Path, from: &str, to: &str) {
    let Ok(dir) = Dir::open(home) else {
        return;
    };
    let state = dir.load(from);
    if !state.is_empty()
        && let Err(e) = dir.save(to, &state)
    {
        crate::diag!("[gateway] cannot keep the shell state of session {to}: {e}");
    }
}

/// Forget the shell state of a deleted session.
pub fn forget(home: &Path, session: &str) {
    if let Ok(dir) = Dir::open(home)
        && let Some(path) = dir.saved(session)
    {
        let _ = remove_quietly(&path);
    }
}

/// The directory `session`'s shell is in, where a command left it (`None`: the session's
/// own), read without creating anything: the file tools resolve paths against it.
pub fn cwd_of(home: &Path, session: &str) -> Option<String> {
    let dir = Dir {
        path: home.join("shell"),
    };
    dir.saved(session).filter(|p| p.exists())?;
    dir.load(session).cwd
}

pub(crate) fn remove_quietly(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// A file name for a stored session id: the id itself when it is plain, else its bytes in hex.
fn file_stem(session: &str) -> Option<String> {
    if session.is_empty() {
        return None;
    }
    let plain = session.len() <= 128
        && !session.starts_with('.')
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if plain {
        Some(session.to_string())
    } else {
        let hex: String = session
            .bytes()
            .take(128)
            .map(|b| format!("{b:02x}"))
            .collect();
        Some(format!("x-{hex}"))
    }
}

/// Read a run's capture file (bounded) and remove it.
pub fn take_capture(path: &Path) -> Result<Capture, CaptureError> {
    let size = std::fs::symlink_metadata(path).map_or(0, |m| m.len());
    let read = crate::private_file::read(path, CAPTURE_MAX as u64);
    let _ = remove_quietly(path);
    match read {
        Ok(Some(bytes)) => parse_capture(&bytes),
        Ok(None) => Err(CaptureError::Missing),
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => Err(CaptureError::TooBig(size)),
        Err(_) => Err(CaptureError::Incomplete),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(records: &[&str]) -> Vec<u8> {
        let mut b = Vec::new();
        for r in records {
            b.extend_from_slice(r.as_bytes());
            b.push(0);
        }
        b
    }

    #[test]
    fn a_capture_is_read_only_when_whole() {
        let listing = "declare -x FOO=\"bar\"\ndeclare -x ML=$'a\\nb=\\'c\\''\n\
                       declare -x E=\"\"\ndeclare -x UNSET\n";
        let whole = capture(&[MAGIC, "/tmp/x", listing, END]);
        let c = parse_capture(&whole).unwrap();
        assert_eq!(c.cwd, "/tmp/x");
        assert_eq!(
            c.vars,
            vec![
                ("FOO".into(), "bar".into()),
                ("ML".into(), "a\nb='c'".into()),
                ("E".into(), String::new())
            ]
        );
        let cut = &whole[..whole.len() - 4];
        assert_eq!(parse_capture(cut), Err(CaptureError::Incomplete));
        assert_eq!(parse_capture(b""), Err(CaptureError::Incomplete));
        for records in [
            ["something else", "/", listing, END],
            [MAGIC, "relative", listing, END],
            [MAGIC, "/", "not a listing", END],
            ["tuigw-shell 1", "/", "FOO=bar", END],
        ] {
            assert_eq!(
                parse_capture(&capture(&records)),
                Err(CaptureError::Incomplete),
                "{records:?}"
            );
        }
        let mut trailing = whole.clone();
        trailing.extend_from_slice(b"more\0");
        assert_eq!(parse_capture(&trailing), Err(CaptureError::Incomplete));
        // A value that is not UTF-8 is skipped, the rest kept.
        let odd = capture(&[
            MAGIC,
            "/",
            "declare -x X=$'\\377'\ndeclare -x Y=\"1\"\n",
            END,
        ]);
        assert_eq!(
            parse_capture(&odd).unwrap().vars,
            vec![("Y".into(), "1".into())]
        );
    }

    #[test]
    fn the_state_is_what_differs_from_a_fresh_command_without_secrets() {
        let base: HashMap<String, String> = [("PATH", "/bin"), ("HOME", "/h"), ("GONE", "1")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let c = Capture {
            cwd: "/srv".into(),
            vars: [
                ("PATH", "/venv/bin:/bin"),
                ("HOME", "/h"),
                ("FOO", "bar"),
                ("PWD", "/srv"),
                ("SHLVL", "1"),
                ("MY_TOKEN", "abc"),
                ("HARMLESS", "postgres://u:pw@db/x"),
                ("GH_PAT", "kept-by-passthrough"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        };
        let (state, withheld) = state_of(&c, &base, &["GH_PAT".to_string()]);
        assert_eq!(state.cwd.as_deref(), Some("/srv"));
        assert_eq!(
            state.set.keys().collect::<Vec<_>>(),
            ["FOO", "GH_PAT", "PATH"]
        );
        assert_eq!(state.unset.iter().collect::<Vec<_>>(), ["GONE"]);
        assert_eq!(withheld, ["MY_TOKEN", "HARMLESS"]);
    }

    #[test]
    fn a_variable_bash_cannot_name_is_not_taken_for_unset() {
        // `cargo` gives its children `CARGO_BIN_EXE_tui-gateway`: bash passes it on, never
        // lists it, and no command can unset it, so it is no change to save after each run.
        let base: HashMap<String, String> = [("PATH", "/bin"), ("CARGO_BIN_EXE_a-b", "/x")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let c = Capture {
            cwd: "/srv".into(),
            vars: vec![("PATH".into(), "/bin".into())],
        };
        let (state, _) = state_of(&c, &base, &[]);
        assert!(state.unset.is_empty(), "{:?}", state.unset);
        assert!(state.set.is_empty());
    }

    #[test]
    fn a_run_merges_only_what_it_changed_over_what_others_saved_meanwhile() {
        let state = |cwd: Option<&str>, set: &[(&str, &str)], unset: &[&str]| ShellState {
            cwd: cwd.map(str::to_string),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            unset: unset.iter().map(|n| n.to_string()).collect(),
        };
        let before = state(Some("/a"), &[("KEEP", "1"), ("DROP", "1")], &["GONE"]);
        // Another run saved meanwhile: moved to /b, set OTHER, changed KEEP, set GONE again.
        let current = state(
            Some("/b"),
            &[("KEEP", "2"), ("DROP", "1"), ("OTHER", "x"), ("GONE", "y")],
            &[],
        );
        // This run stayed in /a, set MINE, removed DROP (back to the base), unset LANG.
        let after = state(
            Some("/a"),
            &[("KEEP", "1"), ("MINE", "m")],
            &["GONE", "LANG"],
        );
        assert_eq!(
            merge(&current, &before, &after),
            state(
                Some("/b"),
                &[("KEEP", "2"), ("OTHER", "x"), ("GONE", "y"), ("MINE", "m")],
                &["LANG"]
            )
        );
        // Alone, a run's end is its state; its change of directory is kept.
        assert_eq!(merge(&before, &before, &after), after);
        let moved = state(Some("/c"), &[], &[]);
        assert_eq!(merge(&current, &before, &moved).cwd.as_deref(), Some("/c"));
    }

    #[test]
    fn quoting_keeps_any_value_on_one_line() {
        assert_eq!(quote("plain"), "$'plain'");
        assert_eq!(
            quote("it's \\ \"x\"\n\t$HOME `x`"),
            "$'it\\'s \\\\ \"x\"\\n\\011$HOME `x`'"
        );
        assert_eq!(quote_plain("echo 'a'"), "'echo '\\''a'\\'''");
        let mut state = ShellState::default();
        state.set.insert("A".into(), "x\ny".into());
        state.set.insert("SECRET_KEY".into(), "s".into());
        state.set.insert("bad-name".into(), "z".into());
        state.unset.insert("GONE".into());
        let script = restore_script(&state, "/d'ir", None, &[]);
        assert_eq!(
            script,
            "builtin cd -- $'/d\\'ir' 2>/dev/null\nbuiltin export A=$'x\\ny' 2>/dev/null\n\
             builtin unset -v GONE 2>/dev/null\n"
        );
    }

    #[test]
    fn a_state_survives_its_json_and_garbage_is_no_state() {
        let mut state = ShellState {
            cwd: Some("/tmp/x".into()),
            ..Default::default()
        };
        state.set.insert("FOO".into(), "a\"b\n".into());
        state.unset.insert("LANG".into());
        let text = state.to_json().to_string();
        let back = ShellState::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, state);
        assert_eq!(ShellState::from_json(&json!({"version": 2})), None);
        assert_eq!(ShellState::from_json(&json!([1])), None);
        assert!(ShellState::default().is_empty());
    }

    #[test]
    fn session_ids_become_plain_file_names() {
        assert_eq!(
            file_stem("20261202_010500_ab12").as_deref(),
            Some("20261202_010500_ab12")
        );
        assert_eq!(file_stem("../x").as_deref(), Some("x-2e2e2f78"));
        assert_eq!(file_stem(""), None);
    }
}
