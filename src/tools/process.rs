//! One command run through the supervisor: spawning it, its pipes, its exit, killing its group.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::supervisor::{LIFELINE_FD, MODE_ARG, STATUS_FD};

/// Environment variables whose names contain one of these (case-insensitively) are secrets of
/// the gateway and never reach a command.
const SECRET_MARKERS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION_ID",
    "PRIVATE",
];

/// Whether an environment variable is withheld from commands.
pub fn is_secret_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

/// Where the command's stderr goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// stderr joins stdout in one pipe, as a terminal shows them.
    Merged,
    /// Two pipes.
    Separate,
}

pub struct Spawned {
    pub child: Child,
    pub stdout: OwnedFd,
    pub stderr: Option<OwnedFd>,
    /// Reports the command's pid (its group id) on one line.
    pub status: OwnedFd,
    /// Held open while we want the command alive; dropping it makes the supervisor SIGKILL
    /// everything the command started.
    pub lifeline: OwnedFd,
    /// A pidfd of the supervisor, readable once it exits (None where the kernel has none).
    pub pidfd: Option<OwnedFd>,
}

/// `bash`, found on `PATH` once, so no command pays for the search again.
fn bash() -> &'static Path {
    static BASH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BASH.get_or_init(|| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("bash"))
            .find(|p| {
                use std::os::unix::fs::PermissionsExt;
                p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| "bash".into())
    })
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    fcntl(
        fd,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(io::Error::from)?;
    Ok(())
}

/// Start `bash -c command` under the supervisor `program` in `cwd`, with stdin `/dev/null`
/// and the environment scrubbed of secrets.
pub fn spawn(program: &Path, command: &str, cwd: &Path, streams: Streams) -> io::Result<Spawned> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = match streams {
        Streams::Merged => (None, out_w.try_clone()?),
        Streams::Separate => {
            let (r, w) = pipe()?;
            (Some(r), w)
        }
    };
    let (life_r, life_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let mut cmd = Command::new(program);
    cmd.arg(MODE_ARG)
        .arg("--")
        .arg(bash())
        .args(["-c", command])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_none_or(is_secret_env) {
            cmd.env_remove(&name);
        }
    }
    let (life_fd, status_fd) = (life_r.as_raw_fd(), status_w.as_raw_fd());
    // SAFETY: between fork and exec we only call async-signal-safe functions (fcntl, dup2, setsid)
    // on descriptors that stay open in the parent until spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            // Move both out of the way first so neither dup2 clobbers the other's source.
            let life = libc::fcntl(life_fd, libc::F_DUPFD_CLOEXEC, 10);
            let status = libc::fcntl(status_fd, libc::F_DUPFD_CLOEXEC, 10);
            if life < 0
                || status < 0
                || libc::dup2(life, LIFELINE_FD) < 0
                || libc::dup2(status, STATUS_FD) < 0
            {
                return Err(io::Error::last_os_error());
            }
            // Terminal signals aimed at the gateway's group never reach the supervisor.
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(cmd); // closes our copies of the write ends the child holds
    drop(life_r);
    drop(status_w);
    for fd in [Some(&out_r), err_r.as_ref(), Some(&status_r)]
        .into_iter()
        .flatten()
    {
        nonblocking(fd)?;
    }
    let pidfd = pidfd_open(child.id() as i32);
    Ok(Spawned {
        child,
        stdout: out_r,
        stderr: err_r,
        status: status_r,
        lifeline: life_w,
        pidfd,
    })
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Some(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// Politely stop the command: the supervisor forwards SIGTERM to the command's group.
pub fn terminate(supervisor: u32) {
    let _ = kill(Pid::from_raw(supervisor as i32), Signal::SIGTERM);
}

/// SIGKILL the command's group now (when its id is known). The caller then drops the lifeline
/// so the supervisor kills descendants that left the group.
pub fn kill_group(group: Option<i32>) {
    if let Some(g) = group.filter(|g| *g > 1) {
        let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
    }
}

/// Exit status of a finished supervisor as the command's code (`128+N` for signal N).
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised_by_name() {
        for secret in [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "my_auth",
        ] {
            assert!(is_secret_env(secret), "{secret}");
        }
        for plain in ["PATH", "HOME", "LANG", "TERM", "HERMES_HOME"] {
            assert!(!is_secret_env(plain), "{plain}");
        }
    }
}
