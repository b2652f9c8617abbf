//! Store errors that say what kind of failure they are, so code above the store decides
//! (wait, journal, hold, give up on one session) without looking at SQLite codes.

use std::fmt;

/// What went wrong, as far as what to do next is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Another connection holds the lock: waiting helps.
    Busy,
    /// The disk (or the quota) is full.
    Full,
    /// The file or its folder cannot be written.
    ReadOnly,
    /// The file is damaged or not a database.
    Corrupt,
    /// The data of one session breaks a constraint (a title another writer took meanwhile).
    Conflict,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// A failure of the store as a whole (every session would fail the same way), as opposed
    /// to one about a session's own data.
    pub fn store_wide(self) -> bool {
        matches!(
            self,
            ErrorKind::Busy | ErrorKind::Full | ErrorKind::ReadOnly | ErrorKind::Corrupt
        )
    }
}

#[derive(Debug, Clone)]
pub struct StoreError {
    pub kind: ErrorKind,
    text: String,
}

impl StoreError {
    pub fn new(kind: ErrorKind, text: impl Into<String>) -> StoreError {
        StoreError {
            kind,
            text: text.into(),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for StoreError {}

/// What kind of failure SQLite's error is.
pub fn kind_of(e: &rusqlite::Error) -> ErrorKind {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DatabaseBusy | C::DatabaseLocked) => ErrorKind::Busy,
        Some(C::DiskFull) => ErrorKind::Full,
        Some(C::ReadOnly | C::CannotOpen | C::PermissionDenied) => ErrorKind::ReadOnly,
        Some(C::DatabaseCorrupt | C::NotADatabase) => ErrorKind::Corrupt,
        Some(C::ConstraintViolation) => ErrorKind::Conflict,
        // A failed write of the file (a full tmpfs can report it as an I/O error).
        Some(C::SystemIoFailure) if full_disk_io(e) => ErrorKind::Full,
        _ => ErrorKind::Other,
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::new(kind_of(&e), e.to_string())
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> StoreError {
        let kind = match e.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => ErrorKind::Full,
            Some(libc::EROFS | libc::EACCES | libc::EPERM) => ErrorKind::ReadOnly,
            _ => ErrorKind::Other,
        };
        StoreError::new(kind, e.to_string())
    }
}

fn full_disk_io(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_IOERR_WRITE
            || f.extended_code == rusqlite::ffi::SQLITE_IOERR_FSYNC
            || f.extended_code == rusqlite::ffi::SQLITE_IOERR_TRUNCATE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32) -> StoreError {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None).into()
    }

    #[test]
    fn sqlite_codes_map_to_kinds() {
        use rusqlite::ffi;
        for (code, kind) in [
            (ffi::SQLITE_BUSY, ErrorKind::Busy),
            (ffi::SQLITE_LOCKED, ErrorKind::Busy),
            (ffi::SQLITE_FULL, ErrorKind::Full),
            (ffi::SQLITE_READONLY, ErrorKind::ReadOnly),
            (ffi::SQLITE_CORRUPT, ErrorKind::Corrupt),
            (ffi::SQLITE_CONSTRAINT_UNIQUE, ErrorKind::Conflict),
            (ffi::SQLITE_MISMATCH, ErrorKind::Other),
        ] {
            assert_eq!(sqlite(code).kind, kind, "SQLite code {code}");
        }
        assert!(ErrorKind::Busy.store_wide() && !ErrorKind::Conflict.store_wide());
    }

    #[test]
    fn io_errors_map_to_kinds() {
        let e = |n| StoreError::from(std::io::Error::from_raw_os_error(n)).kind;
        assert_eq!(e(libc::ENOSPC), ErrorKind::Full);
        assert_eq!(e(libc::EROFS), ErrorKind::ReadOnly);
        assert_eq!(e(libc::EIO), ErrorKind::Other);
    }
}
