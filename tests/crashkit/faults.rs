//! Store faults the tests inject: another process's write lock on state.db, and a full disk
//! (a small tmpfs mounted as `HERMES_HOME`, filled up by the test).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A gateway started on `home` once its store is open (journals folded, killed sessions
/// repaired: `gateway.ready` comes before the store opens, the `ping` answer after).
pub fn restart(home: &Path) -> crate::common::Gateway {
    let mut g = crate::common::Gateway::builder().home(home).start();
    g.ping();
    g
}

/// A connection of this test process holding the write lock of state.db (WAL: `BEGIN
/// IMMEDIATE` takes the one writer slot; readers still work).
pub struct DbLock(Option<rusqlite::Connection>);

impl DbLock {
    pub fn take(path: &Path) -> DbLock {
        let c = rusqlite::Connection::open(path).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c.execute_batch(
            "BEGIN IMMEDIATE;
             CREATE TABLE IF NOT EXISTS test_lock_holder(x INTEGER);
             INSERT INTO test_lock_holder VALUES (1);",
        )
        .unwrap();
        // verify: nobody else can write now
        let probe = rusqlite::Connection::open(path).unwrap();
        probe.busy_timeout(Duration::ZERO).unwrap();
        let r = probe.execute_batch("BEGIN IMMEDIATE");
        assert!(
            r.is_err(),
            "test setup: another connection could still take the write lock"
        );
        DbLock(Some(c))
    }

    pub fn release(&mut self) {
        if let Some(c) = self.0.take() {
            c.execute_batch("ROLLBACK").unwrap();
        }
    }
}

impl Drop for DbLock {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let _ = c.execute_batch("ROLLBACK");
        }
    }
}

/// A tmpfs mounted on a folder (unmounted on drop), and a filler file that uses up its space.
pub struct Tmpfs {
    pub path: PathBuf,
    filler: PathBuf,
}

impl Tmpfs {
    /// Mount a tmpfs of `kib` KiB on the (empty) folder `dir`. `None` when this process may
    /// not mount (the fault tests need root, as CI has).
    pub fn mount(dir: &Path, kib: u64) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={kib}k,mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs {
            path: dir.to_path_buf(),
            filler: dir.join("filler"),
        })
    }

    pub fn free_bytes(&self) -> u64 {
        let st = nix::sys::statvfs::statvfs(&self.path).expect("statvfs");
        st.blocks_available() as u64 * st.fragment_size() as u64
    }

    /// Write the filler until about `leave` bytes are free (or the disk is full).
    pub fn fill_leaving(&self, leave: u64) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.filler)
            .expect("create filler");
        let chunk = vec![0x5a_u8; 4096];
        while self.free_bytes() > leave {
            if f.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = f.sync_all();
    }

    /// Give the space back.
    pub fn unfill(&self) {
        let _ = std::fs::remove_file(&self.filler);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
