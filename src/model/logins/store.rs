//! The files of Hermes' logins as Hermes keeps them: `$HERMES_HOME/auth.json` (read bounded, no
//! link or FIFO followed; rewritten whole and atomically, 0600, every field it held kept), its
//! lock `auth.lock` (flock, only ever tried: a busy lock is tried again later by the caller,
//! never waited on), the Nous store Hermes shares between profiles (`nous_auth.json` and
//! its lock beside it), and Claude Code's `~/.claude/.credentials.json` (read and rewritten the
//! same way, in the form Hermes writes it; Hermes takes no lock for it, a renewal here holds
//! auth.lock so that this home's gateways renew it one at a time).

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde_json::{Value, json};

use super::{Kind, iso_time};
use crate::private_file;

/// Larger files are not read: no login holds that much.
const FILE_MAX: u64 = 1024 * 1024;

/// Where one home's login files are.
#[derive(Debug, Clone, PartialEq)]
pub struct Files {
    pub auth: PathBuf,
    pub lock: PathBuf,
    /// Hermes' folder of files shared between profiles (`<root>/shared`).
    pub shared_dir: PathBuf,
    /// Claude Code's credentials (`~/.claude/.credentials.json`; `None` without a home).
    pub claude: Option<PathBuf>,
}

/// A lock held until dropped.
pub struct Locked(#[allow(dead_code)] Flock<File>);

impl Files {
    /// `user_home`: the user's home, where Claude Code keeps its login.
    pub fn of(home: &Path, shared_dir: PathBuf, user_home: Option<&Path>) -> Files {
        Files {
            auth: home.join("auth.json"),
            lock: home.join("auth.lock"),
            shared_dir,
            claude: user_home.map(|h| h.join(".claude").join(".credentials.json")),
        }
    }

    /// auth.json as it is now (a missing file is Hermes' empty store). Errors name the file and
    /// never its content.
    pub fn read(&self) -> Result<Value, String> {
        read_object(&self.auth, "run `hermes auth` to repair it")
            .map(|v| v.unwrap_or_else(|| json!({"version": 1, "providers": {}})))
    }

    /// The file `kind`'s login is kept in, as it is now.
    pub fn read_of(&self, kind: Kind) -> Result<Value, String> {
        match (kind, &self.claude) {
            (Kind::ClaudeCode, Some(path)) => {
                read_object(path, "run `claude /login` to repair it").map(Option::unwrap_or_default)
            }
            (Kind::ClaudeCode, None) => Ok(Value::Null),
            _ => self.read(),
        }
    }

    /// Write `doc` over the file `kind`'s login is kept in: auth.json as [`Files::save`] does,
    /// Claude Code's as Hermes writes it (`json.dump(…, indent=2)`: no final newline, nothing
    /// added).
    pub fn save_of(&self, kind: Kind, doc: &mut Value, now: f64) -> Result<(), String> {
        match (kind, &self.claude) {
            (Kind::ClaudeCode, Some(path)) => replace_synced(path, hermes_json(doc).as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", path.display())),
            (Kind::ClaudeCode, None) => Err("no home folder holds Claude Code's login".into()),
            _ => self.save(doc, now),
        }
    }

    /// Write `auth` over auth.json as Hermes does: `version` 1, `updated_at` now, two-space
    /// JSON with non-ASCII escaped and a final newline, through a new 0600 file renamed over
    /// the old one, the folder synced after.
    pub fn save(&self, auth: &mut Value, now: f64) -> Result<(), String> {
        if !auth.is_object() {
            *auth = json!({"providers": {}});
        }
        auth["version"] = 1.into();
        auth["updated_at"] = iso_time::iso(now).into();
        let mut text = hermes_json(auth);
        text.push('\n');
        replace_synced(&self.auth, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", self.auth.display()))
    }

    /// auth.lock taken now (`Ok(None)`: another process, or another call here, holds it).
    pub fn try_lock(&self) -> Result<Option<Locked>, String> {
        try_lock(&self.lock)
    }

    fn shared_store(&self) -> PathBuf {
        self.shared_dir.join("nous_auth.json")
    }

    /// The shared Nous store's lock taken now (`Ok(None)`: busy).
    pub fn try_lock_shared(&self) -> Result<Option<Locked>, String> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.shared_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.shared_dir.display()))?;
        try_lock(&self.shared_dir.join("nous_auth.lock"))
    }

    /// The shared Nous store when it holds both tokens (anything else reads as none).
    pub fn read_shared(&self) -> Option<Value> {
        let bytes = private_file::read(&self.shared_store(), FILE_MAX).ok()??;
        let v: Value = serde_json::from_slice(&bytes).ok()?;
        let has = |k: &str| v[k].as_str().is_some_and(|s| !s.trim().is_empty());
        (has("access_token") && has("refresh_token")).then_some(v)
    }

    /// Replace the shared Nous store (sorted keys, no final newline, 0600: Hermes' form).
    pub fn write_shared(&self, shared: &Value) -> Result<(), String> {
        let path = self.shared_store();
        let text = serde_json::to_string_pretty(shared).unwrap_or_default();
        replace_synced(&path, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Remove the shared Nous store (its tokens are dead).
    pub fn remove_shared(&self) {
        let _ = std::fs::remove_file(self.shared_store());
    }
}

/// A JSON object file as it is now (`None`: missing). Errors name the file, never its content.
fn read_object(path: &Path, repair: &str) -> Result<Option<Value>, String> {
    let bytes = private_file::read(path, FILE_MAX)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match bytes.map(|b| serde_json::from_slice::<Value>(&b)) {
        None => Ok(None),
        Some(Ok(v)) if v.is_object() => Ok(Some(v)),
        Some(_) => Err(format!(
            "{} is not a JSON object; it is left as it is ({repair})",
            path.display()
        )),
    }
}

/// `path`'s exclusive flock, tried once.
fn try_lock(path: &Path) -> Result<Option<Locked>, String> {
    let file = private_file::append(path)
        .map_err(|e| format!("cannot open the lock {}: {e}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => Ok(Some(Locked(held))),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// [`private_file::replace`], then the folder synced so the rename survives a crash.
fn replace_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    private_file::replace(path, bytes, 0o600)?;
    if let Some(dir) = path.parent() {
        crate::util::sync_dir(dir)?;
    }
    Ok(())
}

/// JSON as Python's `json.dumps(v, indent=2)` writes it: two-space indent, every character
/// past ASCII as a `\uXXXX` escape (keys sorted: serde_json's maps are).
pub fn hermes_json(v: &Value) -> String {
    let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
    let mut out = String::with_capacity(pretty.len());
    for c in pretty.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            // Outside strings JSON is all ASCII, so every such character is inside one.
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Hermes' folder of files shared between profiles: `HERMES_SHARED_AUTH_DIR`, else `shared`
/// under Hermes' root — `~/.hermes` for any home inside it, `<root>` for a
/// `<root>/profiles/<name>` home elsewhere, the home itself otherwise.
pub fn shared_dir(home: &Path, user_home: Option<&Path>, env_dir: Option<&str>) -> PathBuf {
    if let Some(dir) = env_dir.map(str::trim).filter(|d| !d.is_empty()) {
        return match (dir.strip_prefix("~/"), user_home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ => PathBuf::from(dir),
        };
    }
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if let Some(native) = user_home.map(|h| h.join(".hermes"))
        && real(home).starts_with(real(&native))
    {
        return native.join("shared");
    }
    match home.parent() {
        Some(parent) if parent.file_name().is_some_and(|n| n == "profiles") => {
            parent.parent().unwrap_or(parent).join("shared")
        }
        _ => home.join("shared"),
    }
}
