//! Faults a test injects into the store (the simulator, `tests/sim.rs`): asked at each commit
//! of state.db and each journal write, so the failures a real disk or another process causes
//! (busy past the wait, full, damaged, slow) can be made at will, on a fake clock. Not a
//! user's knob: nothing sets it but an embedding test.

use std::sync::Arc;

use super::ErrorKind;

/// What the store asks before it writes.
pub trait StoreFaults: Send + Sync {
    /// A transaction of state.db is about to commit: the failure SQLite reports instead, if
    /// any (the transaction is rolled back). A slow disk takes its time here (the test moves
    /// its clock).
    fn commit(&self) -> Option<ErrorKind>;
    /// The journal is about to be written: whether the disk is full (`ENOSPC`).
    fn journal_full(&self) -> bool;
}

/// The hook as [`crate::config::Config`] carries it.
#[derive(Clone)]
pub struct FaultHook(pub Arc<dyn StoreFaults>);

impl std::fmt::Debug for FaultHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultHook")
    }
}

/// SQLite's error for a fault of this kind, as its own commit would report it.
pub fn sqlite_error(kind: ErrorKind) -> rusqlite::Error {
    use rusqlite::ffi;
    let code = match kind {
        ErrorKind::Busy => ffi::SQLITE_BUSY,
        ErrorKind::Full => ffi::SQLITE_FULL,
        ErrorKind::ReadOnly => ffi::SQLITE_READONLY,
        ErrorKind::Corrupt => ffi::SQLITE_CORRUPT,
        ErrorKind::Conflict => ffi::SQLITE_CONSTRAINT_UNIQUE,
        ErrorKind::Other => ffi::SQLITE_IOERR,
    };
    rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some("injected fault".into()))
}

/// The journal's error on a full disk.
pub fn journal_error() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::ENOSPC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::error::kind_of;

    #[test]
    fn an_injected_fault_is_the_kind_it_was_asked_to_be() {
        for kind in [
            ErrorKind::Busy,
            ErrorKind::Full,
            ErrorKind::ReadOnly,
            ErrorKind::Corrupt,
            ErrorKind::Conflict,
            ErrorKind::Other,
        ] {
            assert_eq!(kind_of(&sqlite_error(kind)), kind);
        }
        assert_eq!(
            journal_error().kind(),
            std::io::ErrorKind::StorageFull,
            "the journal treats it as a full disk"
        );
    }
}
