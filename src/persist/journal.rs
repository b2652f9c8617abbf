//! The journal: an append-only file beside `state.db` that keeps what a commit could not write
//! (database locked, a session's row refused) durable until the next commit or start-up folds
//! it in. One file per gateway process (`state.db.gateway-<pid>-<start>.journal`), created
//! with mode 0600 and `O_NOFOLLOW`, fsync'd before the frames it covers are released.
//!
//! Format: a header line, then one line per record, `<16 hex digits> <json>\n`, the digits an
//! FNV-1a hash of the JSON `{"seq":N,"delta":{…}}`. A record is a session's whole pending
//! delta relative to what `state.db` holds, so a session's latest record supersedes its
//! earlier ones; a torn or damaged line (a kill mid-write) is skipped.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::Delta;
use crate::store::faults::FaultHook;

const HEADER: &[u8] = b"tui-gateway journal 1\n";
/// The largest journal a fold reads (a bigger file is not one we wrote).
const READ_MAX: u64 = 1 << 30;

#[derive(Serialize, Deserialize)]
pub struct Record<'a> {
    pub seq: u64,
    pub delta: Delta<'a>,
}

/// Where the persistence owner writes records; a fake in unit tests.
pub trait Sink {
    /// Append records and sync them; on error the file is as it was. Refused (`Full`) when the
    /// file would grow past its cap.
    fn append(&mut self, records: &[Record<'_>]) -> io::Result<()>;
    /// Replace the whole file with these records, atomically (compaction past the cap).
    fn rewrite(&mut self, records: &[Record<'_>]) -> io::Result<()>;
    /// Nothing in the file is needed any more: remove it.
    fn clear(&mut self) -> io::Result<()>;
    fn path(&self) -> &Path;
}

pub struct Journal {
    path: PathBuf,
    file: Option<File>,
    len: u64,
    cap: u64,
    /// A test's injected full disk ([`crate::store::faults`]).
    faults: Option<FaultHook>,
}

/// The journal of `owner` (`pid:start`) beside the database at `db`.
pub fn path_for(db: &Path, owner: &str) -> PathBuf {
    let name = db
        .file_name()
        .map_or("state.db".into(), |n| n.to_string_lossy());
    db.with_file_name(format!(
        "{name}.gateway-{}.journal",
        crate::store::journal_name_of(owner)
    ))
}

impl Journal {
    pub fn new(db: &Path, owner: &str, cap: u64) -> Journal {
        Journal {
            path: path_for(db, owner),
            file: None,
            len: 0,
            cap,
            faults: None,
        }
    }

    /// Fail the writes as a full disk would while `hook` says so (the simulator).
    #[doc(hidden)]
    pub fn set_faults(&mut self, hook: Option<FaultHook>) {
        self.faults = hook;
    }

    /// The disk is full, as a test's fault has it.
    fn injected_full(&self) -> io::Result<()> {
        match &self.faults {
            Some(f) if f.0.journal_full() => Err(crate::store::faults::journal_error()),
            _ => Ok(()),
        }
    }

    fn open(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            let f = crate::util::open_file(
                OpenOptions::new().create(true).append(true).mode(0o600),
                &self.path,
                libc::O_NOFOLLOW,
            )?;
            self.len = f.metadata()?.len();
            sync_dir(&self.path)?;
            self.file = Some(f);
        }
        Ok(self.file.as_mut().expect("opened above"))
    }
}

impl Sink for Journal {
    fn append(&mut self, records: &[Record<'_>]) -> io::Result<()> {
        let cap = self.cap;
        self.injected_full()?;
        self.open()?;
        let mut buf = Vec::new();
        if self.len == 0 {
            buf.extend_from_slice(HEADER);
        }
        encode(records, &mut buf);
        if self.len + buf.len() as u64 > cap {
            return Err(journal_full());
        }
        let before = self.len;
        let f = self.file.as_mut().expect("opened above");
        let written = f.write_all(&buf).and_then(|()| f.sync_data());
        match written {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Leave no torn record behind (a fold would skip it, but the next append must
                // not follow garbage).
                let _ = f.set_len(before);
                Err(e)
            }
        }
    }

    fn rewrite(&mut self, records: &[Record<'_>]) -> io::Result<()> {
        self.injected_full()?;
        let mut buf = HEADER.to_vec();
        encode(records, &mut buf);
        if buf.len() as u64 > self.cap {
            return Err(journal_full());
        }
        let tmp = self.path.with_extension("journal.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut f = crate::util::open_file(
            OpenOptions::new().write(true).create_new(true).mode(0o600),
            &tmp,
            libc::O_NOFOLLOW,
        )?;
        let done = f
            .write_all(&buf)
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .and_then(|()| sync_dir(&self.path));
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.file = None;
        self.open()?;
        Ok(())
    }

    fn clear(&mut self) -> io::Result<()> {
        if self.file.take().is_some() || self.path.exists() {
            match std::fs::remove_file(&self.path) {
                Ok(()) => sync_dir(&self.path)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.len = 0;
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

fn journal_full() -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        "the journal reached its size cap",
    )
}

/// The folder holding `path` synced.
fn sync_dir(path: &Path) -> io::Result<()> {
    crate::util::sync_dir(path.parent().unwrap_or(Path::new("")))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn encode(records: &[Record<'_>], out: &mut Vec<u8>) {
    for r in records {
        let json = serde_json::to_vec(r).expect("a record always serialises");
        out.extend_from_slice(format!("{:016x} ", fnv1a(&json)).as_bytes());
        out.extend_from_slice(&json);
        out.push(b'\n');
    }
}

/// The records of a journal's bytes, and how many lines were skipped (torn or damaged).
pub fn decode(bytes: &[u8]) -> (Vec<Record<'static>>, usize) {
    let body = bytes.strip_prefix(HEADER).unwrap_or(bytes);
    let mut records = Vec::new();
    let mut skipped = 0;
    for line in body.split_inclusive(|&b| b == b'\n') {
        let Some(line) = line.strip_suffix(b"\n") else {
            skipped += 1; // the last line, cut short
            continue;
        };
        let parsed = line
            .split_at_checked(16)
            .filter(|(sum, rest)| {
                rest.first() == Some(&b' ')
                    && std::str::from_utf8(sum)
                        .ok()
                        .and_then(|s| u64::from_str_radix(s, 16).ok())
                        == Some(fnv1a(&rest[1..]))
            })
            .and_then(|(_, rest)| serde_json::from_slice::<Record<'static>>(&rest[1..]).ok());
        match parsed {
            Some(r) => records.push(r),
            None => skipped += 1,
        }
    }
    (records, skipped)
}

/// Read a journal file without following a symlink, bounded.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    let f = crate::util::open_file(OpenOptions::new().read(true), path, libc::O_NOFOLLOW)?;
    let meta = f.metadata()?;
    if meta.len() > READ_MAX {
        return Err(io::Error::other("not a journal this gateway wrote"));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(READ_MAX).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The journals beside `db` and the owner (`pid:start`) each belongs to.
pub fn beside(db: &Path) -> Vec<(PathBuf, String)> {
    let name = db
        .file_name()
        .map_or("state.db".into(), |n| n.to_string_lossy());
    let prefix = format!("{name}.gateway-");
    let dir = db.parent().filter(|d| !d.as_os_str().is_empty());
    let Ok(entries) = std::fs::read_dir(dir.unwrap_or(Path::new("."))) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().to_string();
            let id = file.strip_prefix(&prefix)?.strip_suffix(".journal")?;
            let (pid, start) = id.split_once('-')?;
            pid.parse::<u32>().ok()?;
            Some((e.path(), format!("{pid}:{start}")))
        })
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{Message, Role};
    use std::borrow::Cow;

    fn delta(id: &str, texts: &[&str]) -> Delta<'static> {
        Delta {
            id: Cow::Owned(id.into()),
            source: "tui".into(),
            model: "m".into(),
            title: None,
            cwd: "/".into(),
            parent_session_id: None,
            started_at: 1.0,
            ended_at: None,
            end_reason: None,
            message_count: texts.len() as i64,
            tool_call_count: 0,
            input_tokens: 0,
            output_tokens: 0,
            api_call_count: 0,
            billing_provider: "offline".into(),
            billing_base_url: "".into(),
            usage: None,
            accounting: Default::default(),
            last_activity_at: 1.0,
            insert_row: true,
            update_row: true,
            live: crate::store::LiveChange::Claim,
            queue: None,
            delegations: None,
            delegate_from: None,
            keep: None,
            messages: texts
                .iter()
                .map(|t| Message::new(Role::User, Some(t.to_string()), 1.0))
                .collect::<Vec<_>>()
                .into(),
        }
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tgw-journal-{tag}-{}-{}",
            std::process::id(),
            crate::util::random_hex(4)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_is_skipped() {
        let dir = temp_dir("rt");
        let db = dir.join("state.db");
        let mut j = Journal::new(&db, "123:456", 1 << 20);
        j.append(&[Record {
            seq: 1,
            delta: delta("a", &["one"]),
        }])
        .unwrap();
        j.append(&[Record {
            seq: 2,
            delta: delta("a", &["one", "two"]),
        }])
        .unwrap();
        let mut bytes = read(j.path()).unwrap();
        bytes.extend_from_slice(b"0123456789abcdef {\"seq\":3,\"del");
        let (records, skipped) = decode(&bytes);
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].delta.messages.len(), 2);
        assert_eq!(skipped, 1);
        // a damaged line in the middle is skipped too
        let text = String::from_utf8(read(j.path()).unwrap()).unwrap();
        let damaged = text.replacen("\"one\"", "\"0ne\"", 1);
        assert_eq!(decode(damaged.as_bytes()).0.len(), 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(j.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            beside(&db),
            vec![(j.path().to_path_buf(), "123:456".to_string())]
        );
        j.clear().unwrap();
        assert!(!j.path().exists());
        assert!(beside(&db).is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_symlink_in_its_place_is_refused() {
        let dir = temp_dir("link");
        let db = dir.join("state.db");
        let target = dir.join("elsewhere");
        std::fs::write(&target, b"precious").unwrap();
        let mut j = Journal::new(&db, "1:2", 1 << 20);
        std::os::unix::fs::symlink(&target, j.path()).unwrap();
        assert!(
            j.append(&[Record {
                seq: 1,
                delta: delta("a", &["x"])
            }])
            .is_err()
        );
        assert!(read(j.path()).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn past_its_cap_it_refuses_and_a_rewrite_compacts() {
        let dir = temp_dir("cap");
        let db = dir.join("state.db");
        let big = Record {
            seq: 1,
            delta: delta("a", &["x"; 3]),
        };
        let mut one = Vec::new();
        encode(std::slice::from_ref(&big), &mut one);
        // room for one record and a smaller one, not for two of them
        let mut j = Journal::new(&db, "1:2", (HEADER.len() + 2 * one.len() - 1) as u64);
        j.append(std::slice::from_ref(&big)).unwrap();
        let e = j
            .append(&[Record {
                seq: 2,
                delta: delta("a", &["x"; 3]),
            }])
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        j.rewrite(&[Record {
            seq: 3,
            delta: delta("a", &["y"; 3]),
        }])
        .unwrap();
        let (records, _) = decode(&read(j.path()).unwrap());
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].seq, 3);
        // appends continue after the rewrite
        assert!(
            j.append(&[Record {
                seq: 4,
                delta: delta("b", &[])
            }])
            .is_ok()
        );
        assert_eq!(decode(&read(j.path()).unwrap()).0.len(), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
