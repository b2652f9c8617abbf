//! The files whose change the user is asked about whoever changes them: the terminal's
//! command policy (`policy/`) and the file tools (`files/`) judge writes against this one list,
//! so a shell redirect, `truncate` or `unlink` asks wherever `write_file` would.

use std::path::{Path, PathBuf};

/// What a sensitive file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SensitiveFile {
    /// A device node that holds a filesystem or memory.
    Device,
    /// A control of the running kernel (`/proc/sysrq-trigger`, `/proc/sys`, `/sys`).
    Kernel,
    /// System configuration (`/etc`).
    SystemConfig,
    /// An account's keys, logins or shell start-up files.
    Account,
}

/// In an account's home: what runs in each new shell, what logs in as the user, and their
/// credentials (`.ssh` with everything under it).
pub const ACCOUNT_FILES: &[&str] = &[
    ".ssh",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".config/fish/config.fish",
    ".netrc",
    ".pgpass",
    ".npmrc",
    ".pypirc",
];

/// What `path` (absolute, `.`/`..` folded) is, if it is sensitive; `home` is the user's home.
/// Any account's files count: the user's, root's and those under `/home`.
pub fn sensitive_file(path: &Path, home: Option<&Path>) -> Option<SensitiveFile> {
    if block_device(path) {
        Some(SensitiveFile::Device)
    } else if kernel_control(path) {
        Some(SensitiveFile::Kernel)
    } else if path.starts_with("/etc") {
        Some(SensitiveFile::SystemConfig)
    } else if account_homes(path, home).any(|h| in_account_files(path, &h)) {
        Some(SensitiveFile::Account)
    } else {
        None
    }
}

/// The account files of `home` as paths (to be resolved where symlinks matter).
pub fn account_files(home: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    ACCOUNT_FILES.iter().map(move |f| home.join(f))
}

fn in_account_files(path: &Path, home: &Path) -> bool {
    path.strip_prefix(home)
        .is_ok_and(|rel| ACCOUNT_FILES.iter().any(|f| rel.starts_with(f)))
}

/// The homes `path` may lie in: the user's, root's and `/home/NAME`.
fn account_homes(path: &Path, home: Option<&Path>) -> impl Iterator<Item = PathBuf> {
    let under_home = path
        .strip_prefix("/home")
        .ok()
        .and_then(|rel| rel.components().next())
        .map(|name| Path::new("/home").join(name));
    home.map(Path::to_path_buf)
        .into_iter()
        .chain(Some(PathBuf::from("/root")))
        .chain(under_home)
}

/// A file whose write changes the running kernel: `/proc/sysrq-trigger` reboots or crashes the
/// machine at once, `/proc/sys` and `/sys` retune it.
fn kernel_control(p: &Path) -> bool {
    p == Path::new("/proc/sysrq-trigger") || p.starts_with("/proc/sys") || p.starts_with("/sys")
}

/// A device node that holds a filesystem or memory (not `/dev/null`, ttys, `/dev/shm`…).
pub fn block_device(p: &Path) -> bool {
    let Ok(rel) = p.strip_prefix("/dev") else {
        return false;
    };
    let Some(first) = rel.components().next() else {
        return false;
    };
    let name = first.as_os_str().to_string_lossy();
    const PREFIXES: &[&str] = &[
        "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "loop", "dm-", "md", "nbd", "sr", "zram", "rbd",
        "mtd", "ram",
    ];
    const NAMES: &[&str] = &["mapper", "disk", "mem", "kmem", "port", "root"];
    PREFIXES.iter().any(|pre| name.starts_with(pre)) || NAMES.contains(&name.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(p: &str) -> Option<SensitiveFile> {
        sensitive_file(Path::new(p), Some(Path::new("/home/u")))
    }

    #[test]
    fn the_list_names_what_it_protects_and_nothing_beside() {
        use SensitiveFile::*;
        for (p, want) in [
            ("/dev/sda", Some(Device)),
            ("/dev/null", None),
            ("/proc/sysrq-trigger", Some(Kernel)),
            ("/proc/sys/kernel/panic", Some(Kernel)),
            ("/sys/power/state", Some(Kernel)),
            ("/proc/self/status", None),
            ("/system", None),
            ("/etc/hosts", Some(SystemConfig)),
            ("/etcetera", None),
            ("/home/u/.bashrc", Some(Account)),
            ("/home/u/.ssh/authorized_keys", Some(Account)),
            ("/home/u/.ssh", Some(Account)),
            ("/home/u/.config/fish/config.fish", Some(Account)),
            ("/home/u/.netrc", Some(Account)),
            ("/home/other/.zshrc", Some(Account)),
            ("/root/.ssh/authorized_keys", Some(Account)),
            ("/home/u/.bashrc.bak", None),
            ("/home/u/.sshd", None),
            ("/home/u/proj/.bashrc", None),
            ("/home/u/notes.txt", None),
            ("/home/.bashrc", None),
        ] {
            assert_eq!(kind(p), want, "{p}");
        }
        // a home elsewhere is the user's too
        assert_eq!(
            sensitive_file(Path::new("/data/u/.profile"), Some(Path::new("/data/u"))),
            Some(Account)
        );
        assert_eq!(sensitive_file(Path::new("/data/u/.profile"), None), None);
    }
}
