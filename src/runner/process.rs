//! One command run through the supervisor: spawning it, its pipes, its exit, killing its group.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::supervisor::{CommandFds, Zygote};

/// Where the command's stderr goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// stderr joins stdout in one pipe, as a terminal shows them.
    Merged,
    /// Two pipes.
    Separate,
}

pub struct Spawned {
    pub stdout: OwnedFd,
    pub stderr: Option<OwnedFd>,
    /// The supervisor's reports: `sup PID`, `pid GROUP` or `cmd PID`, `exit STATUS` (or
    /// `error WHY`); EOF when the supervisor is gone.
    pub status: OwnedFd,
    /// Held open while we want the command alive; dropping it makes the supervisor SIGKILL
    /// everything the command started.
    pub lifeline: OwnedFd,
    /// The write end of the command's stdin (non-blocking), when it was asked for.
    pub stdin: Option<OwnedFd>,
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
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| "bash".into())
    })
}

/// Start `bash -c command` in `cwd` through the zygote (stdin a pipe when `stdin_pipe`, else
/// `/dev/null`; the environment the zygote was started with: the gateway's, without its
/// secrets — `secrets.rs`), in a pid namespace of its own when `pidns` and the kernel allows.
pub fn spawn(
    zygote: &mut Zygote,
    command: &str,
    cwd: &Path,
    streams: Streams,
    stdin_pipe: bool,
    pidns: bool,
) -> io::Result<Spawned> {
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
    let (stdin_r, stdin_w) = match stdin_pipe {
        true => {
            let (r, w) = pipe()?;
            (Some(r), Some(w))
        }
        false => (None, None),
    };
    zygote.run(
        bash(),
        command,
        cwd,
        pidns,
        CommandFds {
            stdout: &out_w,
            stderr: &err_w,
            lifeline: &life_r,
            status: &status_w,
            stdin: stdin_r.as_ref(),
        },
    )?;
    // Our copies of the ends the supervisor now holds are closed here.
    drop((out_w, err_w, life_r, status_w, stdin_r));
    for fd in [
        Some(&out_r),
        err_r.as_ref(),
        Some(&status_r),
        stdin_w.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        nonblocking(fd)?;
    }
    Ok(Spawned {
        stdout: out_r,
        stderr: err_r,
        status: status_r,
        lifeline: life_w,
        stdin: stdin_w,
    })
}

/// A supervisor as the gateway holds it: its pid and, where the kernel has them, a pidfd, so a
/// signal never reaches another process that got the number after it died.
pub struct SupervisorHandle {
    pub pid: i32,
    pidfd: Option<OwnedFd>,
}

impl SupervisorHandle {
    /// The supervisor that reported `pid` on `status`. The pidfd is kept only if the status
    /// pipe is still open after it was taken: then that pid was still the supervisor's.
    pub fn open(pid: i32, status: &OwnedFd) -> Option<SupervisorHandle> {
        if pid <= 1 {
            return None;
        }
        // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        // SAFETY: a descriptor the kernel just returned, owned by nobody else.
        let pidfd = (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw as i32) });
        let mut fds = [nix::poll::PollFd::new(
            status.as_fd(),
            nix::poll::PollFlags::empty(),
        )];
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO);
        let hung_up = fds[0]
            .revents()
            .is_some_and(|r| r.intersects(nix::poll::PollFlags::POLLHUP));
        (!hung_up).then_some(SupervisorHandle { pid, pidfd })
    }

    pub fn signal(&self, sig: Signal) {
        match &self.pidfd {
            Some(fd) => {
                // SAFETY: pidfd_send_signal on our own pidfd; no siginfo.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        sig as i32,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
            }
            None => {
                let _ = kill(Pid::from_raw(self.pid), sig);
            }
        }
    }
}

/// SIGKILL the command's group now (when its id is known).
pub fn kill_group(group: Option<i32>) {
    if let Some(g) = group.filter(|g| *g > 1) {
        let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
    }
}
