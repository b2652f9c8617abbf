//! Small helpers shared across modules: time, ids, text clipping.

use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// 64 random bits (std's randomly keyed SipHash over a counter and the clock).
pub fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

pub fn random_hex(chars: usize) -> String {
    let mut s = String::with_capacity(chars);
    while s.len() < chars {
        s.push_str(&format!("{:016x}", random_u64()));
    }
    s.truncate(chars);
    s
}

/// Civil date (UTC) of a Unix time: (year, month, day, hour, minute, second).
pub fn utc_parts(unix: f64) -> (i64, u32, u32, u32, u32, u32) {
    let secs = unix.max(0.0) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

/// A stored session id: `YYYYMMDD_HHMMSS_<6 hex>` (UTC).
pub fn stored_session_id(unix: f64) -> String {
    let (y, mo, d, h, mi, s) = utc_parts(unix);
    format!("{y:04}{mo:02}{d:02}_{h:02}{mi:02}{s:02}_{}", random_hex(6))
}

/// `YYYY-MM-DD HH:MM:SS` (UTC), for people.
pub fn human_time(unix: f64) -> String {
    let (y, mo, d, h, mi, s) = utc_parts(unix);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
}

/// Drop up to `budget` of `v`'s last elements (a long vector freed a piece at a time); how
/// many were dropped.
pub fn shed_tail<T>(v: &mut Vec<T>, budget: usize) -> usize {
    let n = v.len().min(budget);
    v.truncate(v.len() - n);
    n
}

/// At most `max` characters of `s`, with `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Where sessions and `shell.exec` work by default: `HERMES_CWD` (set by the TUI), else the
/// gateway's own directory.
pub fn default_cwd() -> String {
    std::env::var("HERMES_CWD")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            std::env::current_dir()
                .ok()
                .map(|d| d.display().to_string())
        })
        .unwrap_or_else(|| "/".into())
}

/// Run code that changes only its own state (a host's model adapter or tool): a panic in it
/// comes back as its message, having unwound through nothing of the gateway's.
pub fn contained<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_text(&p))
}

/// The message a panic carried.
pub fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".into()
    }
}

/// The one way the gateway opens a file (`clippy.toml` refuses every other): `O_NONBLOCK`, so a
/// FIFO or a device put where a file is named is never waited on, and refused unless what was
/// opened is a regular file (checked on the descriptor, so a name swapped meanwhile cannot
/// slip through). `extra` adds open flags (`O_NOFOLLOW`).
pub fn open_file(
    options: &mut std::fs::OpenOptions,
    path: &std::path::Path,
    extra: i32,
) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let refused = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file; refused",
        )
    };
    #[allow(
        clippy::disallowed_methods,
        reason = "the opener: non-blocking, regular files only"
    )]
    let opened = options
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | extra)
        .open(path);
    let f = match opened {
        Ok(f) => f,
        // A FIFO opened for writing with no reader (or a device without its driver).
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(refused()),
        Err(e) => return Err(e),
    };
    if !f.metadata()?.is_file() {
        return Err(refused());
    }
    Ok(f)
}

/// Open a file we read (config, saved approvals, what a tool or a server names) through
/// [`open_file`]. `Ok(None)` when there is none; an error naming the problem when it is not a
/// regular file.
pub fn open_regular(path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    match open_file(std::fs::OpenOptions::new().read(true), path, 0) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The bytes of a file we read whole, at most `max` of them, through [`open_regular`].
/// `Ok(None)` when there is none; a bigger one is an error saying so.
pub fn read_regular_bytes(path: &std::path::Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let Some(f) = open_regular(path)? else {
        return Ok(None);
    };
    let mut buf = Vec::new();
    f.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {} KiB; refused", max / 1024),
        ));
    }
    Ok(Some(buf))
}

/// The text of a file we read whole, at most `max` bytes, through [`open_regular`]. `Ok(None)`
/// when there is none; errors say what was wrong (not a regular file, too large, not UTF-8).
pub fn read_regular(path: &std::path::Path, max: u64) -> std::io::Result<Option<String>> {
    let Some(buf) = read_regular_bytes(path, max)? else {
        return Ok(None);
    };
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not valid UTF-8"))
}

/// The text of a kernel file under `/proc` (they never block; bounded all the same).
/// The user's home (`$HOME`), when it is set to an absolute path: an empty or relative one is
/// none, so nothing joined to it lands in the working directory.
/// Hermes' `is_truthy_value` of a text: `1`, `true`, `yes`, `on`, in any case.
pub fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

pub fn user_home() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .filter(|h| h.is_absolute())
}

pub fn read_proc(path: &str) -> Option<String> {
    read_regular(std::path::Path::new(path), 1 << 20)
        .ok()
        .flatten()
}

/// fsync the folder `dir` (so a rename or a removal in it survives a crash), opened as a
/// folder only (`O_DIRECTORY`: anything else is refused at once, never waited on).
pub fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    #[allow(
        clippy::disallowed_methods,
        reason = "O_DIRECTORY | O_NONBLOCK: a folder or an error, at once"
    )]
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(dir)?;
    f.sync_all()
}

/// `s` with every control character except newline and tab written as a visible escape
/// (`\x1b`, `\r`, `\u{202e}`): C0, DEL, C1 and the bidirectional overrides that reorder a line.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_printable(&mut out, s);
    out
}

/// [`printable`] appended to `out`.
pub fn push_printable(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    for c in s.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || ('\u{80}'..='\u{9f}').contains(&c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// `n` with its thousands separated by commas (Python's `{:,}`, which Hermes' messages use).
pub fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// A folder of a unit test's own under the temporary directory, removed when dropped.
#[cfg(test)]
pub(crate) struct ScratchDir(std::path::PathBuf);

#[cfg(test)]
impl ScratchDir {
    pub(crate) fn new(tag: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("tgw-{tag}-{}", random_hex(8)));
        std::fs::create_dir_all(&dir).expect("the temporary directory takes a folder");
        ScratchDir(dir)
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days-from-civil).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(15_728_650), "15,728,650");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(utc_parts(0.0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(utc_parts(951_782_400.0), (2000, 2, 29, 0, 0, 0));
        assert_eq!(utc_parts(1_798_761_599.0), (2026, 12, 31, 23, 59, 59));
        let id = stored_session_id(1_798_761_599.0);
        assert!(id.starts_with("20261231_235959_") && id.len() == 22, "{id}");
    }

    #[test]
    fn open_regular_refuses_a_fifo_without_blocking() {
        let dir = std::env::temp_dir().join(format!("tuigw-util-{}", random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("config.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = open_regular(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(open_regular(&dir.join("absent")).unwrap().is_none());
        std::fs::write(dir.join("plain"), "x").unwrap();
        assert!(open_regular(&dir.join("plain")).unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 5), "hi");
    }

    #[test]
    fn escapes_what_a_terminal_would_obey() {
        assert_eq!(printable("a\x1b]52;c;aGk=\x07b"), "a\\x1b]52;c;aGk=\\x07b");
        assert_eq!(printable("ok\r\x1b[2Kevil"), "ok\\r\\x1b[2Kevil");
        assert_eq!(printable("\u{9b}31m"), "\\x9b31m");
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(printable("del\x7f"), "del\\x7f");
    }

    #[test]
    fn keeps_ordinary_text() {
        let s = "line one\n\tindented — ünïcode ✓ 日本\n";
        assert_eq!(printable(s), s);
    }
}
