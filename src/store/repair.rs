//! Hermes' self-repair of a state.db whose schema SQLite cannot parse (most often a second
//! `messages_fts` definition in `sqlite_master`: then every statement fails, the switch to WAL
//! first) or whose full-text index refuses writes. The canonical `sessions` and `messages`
//! rows are never touched: a raw copy of the file is kept beside it first, then the least
//! destructive of three repairs that leaves the database healthy is kept — the full-text
//! indexes rebuilt in place, `sqlite_master` de-duplicated, or the full-text schema dropped
//! (the open that follows makes it again from the messages).

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::connect;

/// The text of the errors this repair is for (SQLite's own wording).
const MALFORMED: [&str; 2] = [
    "malformed database schema",
    "database disk image is malformed",
];

/// The full-text tables Hermes may have made.
const FTS_TABLES: [&str; 2] = ["messages_fts", "messages_fts_trigram"];

/// Whether `e` says the schema or the file is malformed.
pub(super) fn is_malformed(e: &rusqlite::Error) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    MALFORMED.iter().any(|m| text.contains(m))
}

/// One repair, on its own connection.
type Attempt = fn(&Connection) -> rusqlite::Result<()>;

/// What a repair did.
#[derive(Debug)]
pub(super) struct Repaired {
    pub strategy: &'static str,
    pub backup: Option<PathBuf>,
}

/// Keep a copy of `path` (and its `-wal`), then repair it; the reason when nothing worked.
pub(super) fn repair(path: &Path) -> Result<Repaired, String> {
    if healthy(path).is_none() {
        return Ok(Repaired {
            strategy: "already healthy",
            backup: None,
        });
    }
    let backup = back_up(path).map_err(|e| format!("cannot keep a copy first: {e}"))?;
    let attempts: [(&'static str, Attempt); 3] = [
        ("full-text indexes rebuilt", rebuild_fts),
        ("duplicate schema rows removed", dedupe_schema),
        ("full-text schema dropped, to be made again", drop_fts),
    ];
    let mut last = String::new();
    for (strategy, attempt) in attempts {
        // Each on its own connection: a schema changed under writable_schema is read afresh.
        let outcome = connect(path).and_then(|conn| attempt(&conn));
        if let Err(e) = outcome {
            last = e.to_string();
            continue;
        }
        match healthy(path) {
            None => {
                return Ok(Repaired {
                    strategy,
                    backup: Some(backup),
                });
            }
            Some(why) => last = why,
        }
    }
    Err(format!(
        "could not repair it ({last}); a copy of it as it was is {}",
        backup.display()
    ))
}

/// Why the database at `path` is not healthy, on a fresh connection: its schema parses, the
/// integrity check passes, sessions read, and a message can be written (in a transaction
/// rolled back: a broken full-text index fails only writes).
fn healthy(path: &Path) -> Option<String> {
    let conn = match connect(path) {
        Ok(c) => c,
        Err(e) => return Some(e.to_string()),
    };
    let checked = (|| -> rusqlite::Result<Option<String>> {
        conn.query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))?;
        let mut stmt = conn.prepare("PRAGMA integrity_check(3)")?;
        let problems: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<_>>()?;
        if problems.iter().any(|p| !p.eq_ignore_ascii_case("ok")) {
            return Ok(Some(problems.join("; ")));
        }
        conn.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0))?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let probe = conn.execute_batch(
            "INSERT INTO sessions (id, source, started_at) VALUES ('_repair_probe', '_probe', 0);
             INSERT INTO messages (session_id, role, content, timestamp)
               VALUES ('_repair_probe', 'user', '_probe', 0);",
        );
        conn.execute_batch("ROLLBACK")?;
        probe?;
        Ok(None)
    })();
    match checked {
        Ok(found) => found,
        // A table not made yet is a new database, not a broken one.
        Err(e) if e.to_string().contains("no such table") => None,
        Err(e) => Some(e.to_string()),
    }
}

/// A raw copy of the file (and its WAL) beside it, named as Hermes names its copies.
fn back_up(path: &Path) -> std::io::Result<PathBuf> {
    let (y, mo, d, h, mi, s) = crate::util::utc_parts(crate::util::unix_now());
    let stamp = format!("{y:04}{mo:02}{d:02}_{h:02}{mi:02}{s:02}");
    let name = |suffix: &str| {
        let mut n = path.as_os_str().to_owned();
        n.push(format!(".malformed-backup-{stamp}{suffix}"));
        PathBuf::from(n)
    };
    let backup = name("");
    copy(path, &backup)?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    if wal.exists() {
        copy(&wal, &name("-wal"))?;
    }
    Ok(backup)
}

fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut source = crate::util::open_regular(from)?
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "gone"))?;
    use std::os::unix::fs::OpenOptionsExt;
    // The copy holds every transcript: as private as state.db.
    let mut target = crate::util::open_file(
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600),
        to,
        libc::O_NOFOLLOW,
    )?;
    std::io::copy(&mut source, &mut target)?;
    target.sync_all()
}

fn rebuild_fts(conn: &Connection) -> rusqlite::Result<()> {
    for table in FTS_TABLES {
        // A table Hermes did not make is skipped.
        let _ = conn.execute_batch(&format!("INSERT INTO {table}({table}) VALUES('rebuild')"));
    }
    Ok(())
}

fn dedupe_schema(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "PRAGMA writable_schema=ON;
         DELETE FROM sqlite_master WHERE rowid NOT IN
           (SELECT MIN(rowid) FROM sqlite_master GROUP BY type, name);
         PRAGMA writable_schema=OFF;",
    )
}

fn drop_fts(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "PRAGMA writable_schema=ON;
         DELETE FROM sqlite_master WHERE name LIKE 'messages_fts%';
         PRAGMA writable_schema=OFF;",
    )?;
    conn.execute_batch("VACUUM")
}
