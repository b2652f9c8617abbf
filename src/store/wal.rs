//! How much of the WAL the next checkpoint copies, as SQLite's commit hook reports it.
//!
//! The hook replaces SQLite's automatic checkpoint (the same hook, which would run one inside
//! whichever commit crosses its threshold): the loop checkpoints between requests instead, sized
//! by [`WalWatch::backlog`], and the hook checkpoints only past [`BACKSTOP`].

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::Connection;
use rusqlite::hooks::Wal;
use rusqlite::wal::CheckpointMode;

/// Frames in the WAL at which a commit checkpoints itself: twice the loop's own threshold
/// (`persist::background::WAL_FRAMES`), reached only when the loop's checkpoints fail or do
/// not run.
pub const BACKSTOP: i64 = 20_000;

#[derive(Debug, Default)]
struct Frames {
    /// Frames in the WAL after the last commit.
    in_wal: i64,
    /// Of those, how many the last checkpoint copied.
    copied: i64,
}

/// Shared with the hook (SQLite asks for `Send`); only the loop's thread touches either.
#[derive(Debug, Clone, Default)]
pub struct WalWatch(Arc<Mutex<Frames>>);

impl WalWatch {
    pub fn install(conn: &mut Connection) -> rusqlite::Result<WalWatch> {
        let watch = WalWatch::default();
        let hooked = watch.clone();
        conn.wal_hook(Some(move |wal: &mut Wal, pages: c_int| {
            let mut f = hooked.frames();
            let pages = i64::from(pages);
            if pages < f.in_wal {
                f.copied = 0; // the WAL started over from its first frame
            }
            f.in_wal = pages;
            if pages >= BACKSTOP {
                let (in_wal, copied) = wal.checkpoint_v2(CheckpointMode::PASSIVE)?;
                f.in_wal = i64::from(in_wal);
                f.copied = i64::from(copied);
            }
            Ok(())
        }))?;
        Ok(watch)
    }

    fn frames(&self) -> MutexGuard<'_, Frames> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A checkpoint ran: the WAL holds `in_wal` frames, `copied` of them are in the database.
    pub fn checkpointed(&self, in_wal: i64, copied: i64) {
        let mut f = self.frames();
        f.in_wal = in_wal.max(0);
        f.copied = copied.clamp(0, f.in_wal);
    }

    /// Frames past the last checkpoint's copy.
    pub fn backlog(&self) -> usize {
        let f = self.frames();
        (f.in_wal - f.copied).max(0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_grows_with_commits_and_a_checkpoint_clears_it() {
        let dir = crate::util::ScratchDir::new("wal-watch");
        let mut conn = Connection::open(dir.path().join("w.db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (x BLOB)")
            .unwrap();
        let watch = WalWatch::install(&mut conn).unwrap();
        let before = watch.backlog();
        for _ in 0..20 {
            conn.execute("INSERT INTO t VALUES (zeroblob(8000))", [])
                .unwrap();
        }
        let grown = watch.backlog();
        assert!(
            grown >= before + 40,
            "20 commits of 2+ pages: {before} → {grown}"
        );
        let (in_wal, copied): (i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(1)?, r.get(2)?))
            })
            .unwrap();
        watch.checkpointed(in_wal, copied);
        assert_eq!(watch.backlog(), 0, "nothing else reads: all copied");
        // The WAL starts over: the next commit's frames are the backlog, not the old ones.
        conn.execute("INSERT INTO t VALUES (1)", []).unwrap();
        let after = watch.backlog();
        assert!((1..10).contains(&after), "one small commit: {after}");
    }
}
