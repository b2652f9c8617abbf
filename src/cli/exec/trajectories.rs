//! `--atif DIR`: each task's session, read back from state.db once the gateway has committed
//! it and exited, written as an ATIF trajectory ([`crate::cli::atif`]) to `DIR/trajectory.json`
//! (one task) or `DIR/<task dir>/trajectory.json` (a tasks file), each file whole or not at all
//! (written beside, then renamed), 0600.

use std::path::{Path, PathBuf};

use crate::store::Store;

/// Where a trajectory goes, and the stored session it is built from.
pub struct Wanted {
    pub file: PathBuf,
    pub session_id: String,
}

/// Writes every wanted trajectory; the first failure stops it and says which.
pub fn write_all(db: &Path, synchronous: &str, wanted: &[Wanted]) -> Result<(), String> {
    if wanted.is_empty() {
        return Ok(());
    }
    let store = Store::open(db, synchronous)?;
    for w in wanted {
        let session = match store.export(&w.session_id) {
            Ok(Some(s)) => s,
            Ok(None) => return Err(format!("no stored session {}", w.session_id)),
            Err(e) => return Err(format!("cannot read session {}: {e}", w.session_id)),
        };
        let doc = crate::cli::atif::trajectory(&session);
        write_whole(&w.file, format!("{doc:#}\n").as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", w.file.display()))?;
    }
    Ok(())
}

/// Mode 0600, as state.db's: a transcript may hold what a tool printed.
fn write_whole(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::private_file::replace(file, bytes, 0o600)
}
