//! The files we create or write (state.db and SQLite's files beside it, the saved approvals, the
//! call log, config.yaml edits): never through a symbolic link planted in their place, never a
//! file of another user, never readable by group or others once we hold transcripts in it.
//!
//! Every open is `O_NOFOLLOW | O_NONBLOCK` (a FIFO in the way is refused, not waited on), and
//! what was opened is checked and tightened through its descriptor (`fstat`, `fchmod`), so a
//! name swapped between a check and its use cannot redirect either.
//!
//! Its atomic [`replace`] is the gateway's one way to rewrite a file, the user's files the tools
//! edit included ([`replace_keeping_mode`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Flags added to `util::open_file`'s own (`O_NONBLOCK`, `O_CLOEXEC`).
const FLAGS: i32 = libc::O_NOFOLLOW;

/// `options` opened through the one opener without following a link; ELOOP said in words.
fn open(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    crate::util::open_file(options, path, FLAGS).map_err(explain)
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{why}; refused"))
}

/// ELOOP from `O_NOFOLLOW` said in words.
fn explain(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        refused("a symbolic link")
    } else {
        e
    }
}

/// Whether what `meta` describes is our user's.
fn is_ours(meta: &std::fs::Metadata) -> bool {
    meta.uid() == our_uid()
}

/// The user this process acts as.
pub fn our_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() }
}

/// A regular file of ours, or why not.
fn our_file(meta: &std::fs::Metadata) -> io::Result<()> {
    if !meta.is_file() {
        return Err(refused("not a regular file"));
    }
    if !is_ours(meta) {
        return Err(refused("owned by another user"));
    }
    Ok(())
}

/// A regular file of ours, made 0600 (keeping no group or other bit).
fn make_private(f: &File) -> io::Result<()> {
    let meta = f.metadata()?;
    our_file(&meta)?;
    if meta.mode() & 0o077 != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o700))?;
    }
    Ok(())
}

/// Open `path` for appending, created 0600 when absent; an existing one is tightened to 0600.
pub fn append(path: &Path) -> io::Result<File> {
    // Said before trying: a FIFO would answer the open with ENXIO, which names nothing.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_symlink() {
            return Err(refused("a symbolic link"));
        }
        if !meta.is_file() {
            return Err(refused("not a regular file"));
        }
    }
    let f = open(
        OpenOptions::new().append(true).create(true).mode(0o600),
        path,
    )?;
    make_private(&f)?;
    Ok(f)
}

/// Create `path` anew with `bytes`, 0600 (nothing already there, a link included, is used).
pub fn create_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = open(
        OpenOptions::new().write(true).create_new(true).mode(0o600),
        path,
    )?;
    f.write_all(bytes)
}

/// The bytes of a regular file of ours, at most `max` of them: `None` when there is none; a
/// link, another user's file or a bigger one is an error (`FileTooLarge` for the size).
pub fn read(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let file = match open(OpenOptions::new().read(true), path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    our_file(&meta)?;
    let too_big = |n: u64| {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("{n} bytes, over {max}"),
        )
    };
    if meta.len() > max {
        return Err(too_big(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

/// Tighten `path` to 0600 when it exists (SQLite's `-wal`, `-shm`, `-journal`, which SQLite
/// reuses as they are); whether it existed.
pub fn tighten_existing(path: &Path) -> io::Result<bool> {
    match open(OpenOptions::new().read(true), path) {
        Ok(f) => make_private(&f).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Write `bytes` to `path` (created 0600, an existing one of ours emptied first), unsynced:
/// for what is only read back soon, such as a spilled tool result.
pub fn overwrite(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = open(
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600),
        path,
    )?;
    make_private(&f)?;
    f.write_all(bytes)
}

/// Replace `path` with `bytes` (mode `mode`): written to a new temporary file beside it
/// (`O_EXCL`, so nothing planted under that name is followed or reused), fsync'd, renamed over
/// `path` (which replaces a link there rather than writing through it).
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let tmp = temporary_beside(path);
    let result = (|| {
        let mut f = open(
            OpenOptions::new().write(true).create_new(true).mode(mode),
            &tmp,
        )?;
        // The umask may have taken bits the file had.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// [`replace`] for a file that may be a symbolic link into someone's dotfiles (config.yaml, the
/// files the tools edit): the link's target is replaced, its mode kept (`new_mode` for a new
/// file).
pub fn replace_keeping_mode(file: &Path, bytes: &[u8], new_mode: u32) -> io::Result<()> {
    let target = link_target(file);
    let mode = std::fs::metadata(&target)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(new_mode);
    replace(&target, bytes, mode)
}

/// [`replace`] of a file of secrets that may be a symbolic link into someone's dotfiles
/// (`$HERMES_HOME/.env`): the link's target is replaced, 0600 whatever it was.
pub fn replace_private(file: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(&link_target(file), bytes, 0o600)
}

/// What `file` names once links are followed (itself when it does not exist yet).
fn link_target(file: &Path) -> PathBuf {
    std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf())
}

/// `base/parts…`, each folder created 0700 when absent, refused when one is a symbolic link,
/// not a folder or another user's: what we write there lands under `base`, nowhere a planted
/// link points.
pub fn private_dir(base: &Path, parts: &[&str]) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut dir = base.to_path_buf();
    for part in parts {
        dir.push(part);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = std::fs::symlink_metadata(&dir)?;
        if meta.file_type().is_symlink() {
            return Err(refused(&format!("{} is a symbolic link", dir.display())));
        }
        if !meta.is_dir() {
            return Err(refused(&format!("{} is not a folder", dir.display())));
        }
        if !is_ours(&meta) {
            return Err(refused(&format!("{} is another user's", dir.display())));
        }
    }
    Ok(dir)
}

/// `.<name>.<random>.tmp` in `path`'s directory.
pub fn temporary_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", crate::util::random_hex(8)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tuigw-unit-private-{tag}-{}-{}",
            std::process::id(),
            crate::util::random_hex(4)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o777
    }

    #[test]
    fn append_creates_0600_tightens_and_refuses_links() {
        let d = dir("append");
        let new = d.join("log");
        append(&new).unwrap();
        assert_eq!(mode(&new), 0o600);
        let old = d.join("old");
        std::fs::write(&old, "x").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        append(&old).unwrap();
        assert_eq!(mode(&old), 0o600);
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = append(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(mode(&victim), 0o644);
        assert!(!tighten_existing(&d.join("absent")).unwrap());
        assert!(tighten_existing(&link).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn read_is_bounded_and_refuses_links() {
        let d = dir("read");
        let f = d.join("f");
        create_new(&f, b"hello").unwrap();
        assert_eq!(mode(&f), 0o600);
        assert!(
            create_new(&f, b"again").is_err(),
            "never over what is there"
        );
        assert_eq!(read(&f, 5).unwrap().as_deref(), Some(&b"hello"[..]));
        assert_eq!(read(&f, 4).unwrap_err().kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(read(&d.join("absent"), 5).unwrap(), None);
        let link = d.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(
            read(&link, 5)
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn replace_never_writes_through_a_link() {
        let d = dir("replace");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = d.join("saved.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        replace(&path, b"{}", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            2,
            "no temporary left"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
