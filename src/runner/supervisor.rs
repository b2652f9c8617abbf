//! Command supervision: the gateway's own binary re-executed once in a hidden mode (the
//! *zygote*), which forks one *supervisor* per command.
//!
//! ```text
//! gateway ──control socket──▶ zygote (own session; forks on request, never execs)
//!    │ lifeline pipe ─────────────▶ supervisor (child subreaper)
//!    │ ◀──── status pipe ──────────      └─ bash -c CMD  (new session = group G, leader)
//!    │ ◀──── stdout/stderr ─────────────────  └─ … every descendant
//! ```
//! A request carries the command, its cwd and — as `SCM_RIGHTS` — its output pipes, the read end
//! of its lifeline and the write end of its status pipe. The supervisor reports `sup <its pid>`,
//! `pid <G>`, forwards SIGTERM to G and reaps. When the command's leader exits, or when the
//! lifeline closes (the gateway asked for a hard kill, or died for any reason, SIGKILL
//! included), it SIGKILLs G and every descendant still alive — including ones that called
//! `setsid` and left G, which as a subreaper it can find — then reports `exit <status>`
//! (`128+N` for signal N) and exits. The supervisor is not in G, so the gateway can SIGKILL G
//! directly and the supervisor still cleans up after it.
//!
//! Forking a small single-threaded process per command instead of exec'ing the gateway binary
//! for each one keeps the cost of supervision to a fork (see docs/PERFORMANCE.md). The zygote
//! leaves when its control socket closes, that is when the gateway is gone.

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, kill, killpg, sigprocmask};
use nix::sys::signalfd::SignalFd;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// The hidden first argument that selects the zygote mode.
pub const ZYGOTE_ARG: &str = "__tui_gateway_zygote";
/// The descriptor the zygote receives its control socket on.
const CONTROL_FD: RawFd = 3;
/// Largest request: a command longer than an exec argument may be (128 KiB) cannot run anyway.
const REQUEST_MAX: usize = 160 * 1024;

/// How long the supervisor keeps killing and reaping descendants before giving up.
const CLEANUP_LIMIT: Duration = Duration::from_secs(2);

/// Call first thing in `main`: runs the zygote and exits if this process was started as one;
/// returns otherwise. Embedding hosts that let the gateway spawn tools call it too.
pub fn run_if_requested() {
    if std::env::args().nth(1).as_deref() == Some(ZYGOTE_ARG) {
        // The exec reset it: supervisors (forks of this process) must not be inspectable either.
        super::secrets::forbid_inspection();
        // SAFETY: fd 3 was placed there by the gateway for this process alone; owned once.
        let control = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
        zygote(control);
        std::process::exit(0);
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> i32 {
    let _ = writeln!(std::io::stderr(), "[tool-supervisor] {what}: {e}");
    127
}

/// The gateway's handle on its zygote.
pub struct Zygote {
    child: Child,
    control: OwnedFd,
}

/// The descriptors a command is started with (moved to the supervisor).
pub struct CommandFds<'a> {
    pub stdout: &'a OwnedFd,
    pub stderr: &'a OwnedFd,
    pub lifeline: &'a OwnedFd,
    pub status: &'a OwnedFd,
}

impl Zygote {
    /// Start `program` (the gateway's binary) as the zygote, with the environment scrubbed of
    /// secrets but for the `passthrough` names (commands inherit it).
    pub fn start(program: &Path, passthrough: &[String]) -> std::io::Result<Zygote> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let mut cmd = Command::new(program);
        cmd.arg(ZYGOTE_ARG)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for name in super::secrets::withheld(std::env::vars_os(), passthrough) {
            cmd.env_remove(name);
        }
        let fd = theirs.as_raw_fd();
        // SAFETY: between fork and exec only async-signal-safe calls (fcntl, dup2, setsid).
        unsafe {
            cmd.pre_exec(move || {
                let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
                if high < 0 || libc::dup2(high, CONTROL_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Terminal signals aimed at the gateway's group never reach the zygote.
                libc::setsid();
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(theirs);
        Ok(Zygote {
            child,
            control: ours,
        })
    }

    /// Ask for `bash -c command` in `cwd`; never blocks (a full socket is an error).
    pub fn run(
        &mut self,
        bash: &Path,
        command: &str,
        cwd: &Path,
        fds: CommandFds<'_>,
    ) -> std::io::Result<()> {
        let request = json!({"bash": bash, "command": command, "cwd": cwd}).to_string();
        if request.len() > REQUEST_MAX {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "command too long",
            ));
        }
        let raw = [
            fds.stdout.as_raw_fd(),
            fds.stderr.as_raw_fd(),
            fds.lifeline.as_raw_fd(),
            fds.status.as_raw_fd(),
        ];
        let iov = [IoSlice::new(request.as_bytes())];
        let cmsg = [ControlMessage::ScmRights(&raw)];
        sendmsg::<()>(
            self.control.as_raw_fd(),
            &iov,
            &cmsg,
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            None,
        )?;
        Ok(())
    }

    /// Whether the zygote process has exited (it is then restarted on the next command).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

/// The zygote: receive requests, fork a supervisor for each, until the gateway is gone.
fn zygote(control: OwnedFd) {
    // Supervisors are reaped by the kernel; the zygote never waits for them.
    // SAFETY: setting a disposition to SIG_IGN runs no code in signal context.
    let _ = unsafe { nix::sys::signal::signal(Signal::SIGCHLD, SigHandler::SigIgn) };
    let mut buf = vec![0u8; REQUEST_MAX + 1];
    loop {
        let mut cmsg = nix::cmsg_space!([RawFd; 4]);
        let (len, fds) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            match recvmsg::<()>(
                control.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(msg) => {
                    let fds: Vec<RawFd> = msg
                        .cmsgs()
                        .into_iter()
                        .flatten()
                        .flat_map(|c| match c {
                            ControlMessageOwned::ScmRights(fds) => fds,
                            _ => Vec::new(),
                        })
                        .collect();
                    (msg.bytes, fds)
                }
                Err(Errno::EINTR) => continue,
                Err(_) => return,
            }
        };
        // SAFETY: the kernel just created these descriptors for this process.
        let fds: Vec<OwnedFd> = fds
            .into_iter()
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect();
        if len == 0 && fds.is_empty() {
            return; // the gateway closed the socket
        }
        let Ok(request) = serde_json::from_slice::<Value>(&buf[..len]) else {
            continue;
        };
        let [stdout, stderr, lifeline, status]: [OwnedFd; 4] = match fds.try_into() {
            Ok(f) => f,
            Err(_) => continue,
        };
        // SAFETY: the zygote is single-threaded, so the child may run ordinary code.
        match unsafe { nix::unistd::fork() } {
            Ok(nix::unistd::ForkResult::Child) => {
                drop(control);
                let code = supervisor(&request, stdout, stderr, lifeline, status);
                std::process::exit(code);
            }
            Ok(nix::unistd::ForkResult::Parent { .. }) => {}
            Err(e) => {
                let _ = writeln!(std::fs::File::from(status), "error cannot fork: {e}");
            }
        }
    }
}

/// One command's supervisor (a fresh fork of the zygote).
fn supervisor(
    request: &Value,
    stdout: OwnedFd,
    stderr: OwnedFd,
    lifeline: OwnedFd,
    status: OwnedFd,
) -> i32 {
    // SAFETY: restoring the default disposition runs no code in signal context.
    let _ = unsafe { nix::sys::signal::signal(Signal::SIGCHLD, SigHandler::SigDfl) };
    let mut status = std::fs::File::from(status);
    let _ = writeln!(status, "sup {}", std::process::id());
    let bash = request["bash"].as_str().unwrap_or("bash");
    let command = request["command"].as_str().unwrap_or("");
    let cwd = request["cwd"].as_str().unwrap_or("/");
    let code = supervise(
        bash,
        command,
        cwd,
        stdout,
        stderr,
        lifeline.as_fd(),
        &mut status,
    );
    let _ = writeln!(status, "exit {code}");
    code
}

/// Start `bash -c command` in its own session and watch it until it ends or the lifeline
/// closes; returns its status.
fn supervise(
    bash: &str,
    command: &str,
    cwd: &str,
    stdout: OwnedFd,
    stderr: OwnedFd,
    lifeline: BorrowedFd<'_>,
    status: &mut std::fs::File,
) -> i32 {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        return fail("cannot become a child subreaper", e);
    }
    let mut mask = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        mask.add(s);
    }
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None) {
        return fail("cannot block signals", e);
    }
    let sigfd = match SignalFd::with_flags(
        &mask,
        nix::sys::signalfd::SfdFlags::SFD_NONBLOCK | nix::sys::signalfd::SfdFlags::SFD_CLOEXEC,
    ) {
        Ok(fd) => fd,
        Err(e) => return fail("cannot open a signalfd", e),
    };
    let mut command_line = Command::new(bash);
    command_line
        .args(["-c", command])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    // SAFETY: setsid, signal and sigprocmask are async-signal-safe. The command must not
    // inherit our blocked signals (SIGTERM would never reach it).
    unsafe {
        command_line.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            // Dispositions the gateway chose for itself (SIGINT ignored under a UI) are not
            // the command's: it starts with the defaults.
            for sig in [
                Signal::SIGINT,
                Signal::SIGTERM,
                Signal::SIGHUP,
                Signal::SIGQUIT,
            ] {
                nix::sys::signal::signal(sig, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(std::io::Error::from)
        });
    }
    let child = match command_line.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(status, "error cannot start the command in {cwd}: {e}");
            return fail(&format!("cannot start {bash}"), e);
        }
    };
    drop(command_line); // our copies of the output pipes: EOF reaches the gateway with the command
    let leader = Pid::from_raw(child.id() as i32);
    let _ = writeln!(status, "pid {leader}");
    let code = watch(leader, lifeline, &sigfd);
    kill_everything(leader);
    code.unwrap_or(128 + libc::SIGKILL)
}

/// Wait for the leader to exit (its exit code) or the lifeline to close (`None`).
fn watch(leader: Pid, lifeline: BorrowedFd<'_>, sigfd: &SignalFd) -> Option<i32> {
    loop {
        let mut fds = [
            PollFd::new(lifeline, PollFlags::POLLIN),
            PollFd::new(sigfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return None,
        }
        let lifeline_events = fds[0].revents().unwrap_or(PollFlags::empty());
        let signal_events = fds[1].revents().unwrap_or(PollFlags::empty());
        if !lifeline_events.is_empty() {
            let mut byte = [0u8; 1];
            match nix::unistd::read(lifeline, &mut byte) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {} // nothing is ever written; ignore
            }
        }
        if signal_events.is_empty() {
            continue;
        }
        while let Ok(Some(info)) = sigfd.read_signal() {
            if info.ssi_signo as i32 != libc::SIGCHLD {
                // Politely ask the command's group to stop; SIGKILL comes from the gateway.
                let _ = killpg(leader, Signal::SIGTERM);
            }
        }
        if let Some(code) = reap(Some(leader)) {
            return Some(code);
        }
    }
}

/// Reap every exited child; returns the leader's exit code if it was among them.
fn reap(leader: Option<Pid>) -> Option<i32> {
    let mut leader_code = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if Some(pid) == leader => leader_code = Some(code),
            Ok(WaitStatus::Signaled(pid, sig, _)) if Some(pid) == leader => {
                leader_code = Some(128 + sig as i32)
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return leader_code,
            Ok(_) => {}
        }
    }
}

/// SIGKILL the command's group and every descendant of this process, and reap them all.
fn kill_everything(leader: Pid) {
    let _ = killpg(leader, Signal::SIGKILL);
    let me = nix::unistd::getpid();
    let deadline = Instant::now() + CLEANUP_LIMIT;
    loop {
        reap(None);
        // A subreaper inherits every orphaned descendant: no child left means none at all, so
        // the usual case (nothing left behind) needs no /proc scan.
        let no_children = matches!(
            waitpid(None, Some(WaitPidFlag::WNOHANG)),
            Err(Errno::ECHILD)
        );
        if no_children || Instant::now() >= deadline {
            return;
        }
        for pid in descendants(me) {
            let _ = kill(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every process whose chain of parents leads to `root`, read from /proc.
pub fn descendants(root: Pid) -> Vec<Pid> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(ppid) = parent_of(&stat) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![root.as_raw()];
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            out.push(Pid::from_raw(c));
            stack.push(c);
        }
    }
    out
}

/// The ppid field of a /proc/PID/stat line (the name may hold spaces and parentheses).
fn parent_of(stat: &str) -> Option<i32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_field_survives_odd_names() {
        assert_eq!(parent_of("42 (a) b) c) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of("1 (init) S 0 1 1"), Some(0));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn descendants_of_this_process_include_a_child() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let found = descendants(nix::unistd::getpid());
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&Pid::from_raw(child.id() as i32)));
    }
}
