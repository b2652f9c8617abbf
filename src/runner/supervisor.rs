//! Command supervision: the gateway's own binary re-executed once in a hidden mode (the
//! *zygote*), which forks one *supervisor* per command.
//!
//! ```text
//! gateway ──control socket──▶ zygote (own session, subreaper, dies with the gateway)
//!    │ lifeline pipe ─────────────▶ supervisor (pid 1 of the command's own pid namespace
//!    │ ◀──── status pipe ──────────      │      where the kernel allows it; else a subreaper)
//!    │ ◀──── stdout/stderr ─────────────────  └─ bash -c CMD (new session = group G) └─ …
//! ```
//! A request carries the command, its cwd and — as `SCM_RIGHTS` — its output pipes, the read end
//! of its lifeline and the write end of its status pipe. The supervisor reports `sup <its pid>`
//! (as the gateway sees it), then, once the command runs, `cmd <its pid>` (as the gateway sees
//! it) when it runs in a pid namespace of its own or `pid <G>` when not (the command leads group
//! G), forwards SIGTERM to G and reaps. When the command's leader exits, or when
//! the lifeline closes (the gateway asked for a hard kill, or died for any reason, SIGKILL
//! included), it SIGKILLs everything the command started — the whole namespace, or G and every
//! descendant it finds as a subreaper — then reports `exit <status>` (`128+N` for signal N).
//!
//! Why a pid namespace: the command runs as the gateway's user and could signal, stop or kill
//! any process it can name. Inside its own namespace it can name none of ours, and the kernel
//! drops SIGKILL and SIGSTOP sent to a namespace's first process (the supervisor) from inside;
//! when that process dies, for whatever reason, the kernel kills the whole namespace. Both are
//! things the command cannot defeat. The zygote and the supervisor are not dumpable, so a
//! command of another uid (or without CAP_SYS_PTRACE) cannot trace them either. Where the
//! kernel refuses a namespace (an unprivileged user), the fallback is the subreaper tree, with
//! the gateway itself finding and killing what a stopped or killed supervisor left
//! (`Runner`'s sweep, see docs/SUPERVISION.md).
//!
//! Forking a small single-threaded process per command instead of exec'ing the gateway binary
//! for each one keeps the cost of supervision to a fork (see docs/PERFORMANCE.md). The zygote
//! leaves when its control socket closes, and the kernel kills it when the gateway dies.

use std::collections::{HashMap, HashSet};
use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, kill, killpg, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
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

/// The gateway's binary, opened once at start: the zygote is exec'd from this descriptor, so a
/// binary replaced on disk (an upgrade) still starts the zygote of the running version.
pub struct Executable {
    fd: Option<OwnedFd>,
    path: std::path::PathBuf,
}

impl Executable {
    /// The running binary (`/proc/self/exe`: its file even if already replaced or deleted).
    pub fn current() -> Executable {
        let path = std::env::current_exe().unwrap_or_else(|_| "tui-gateway".into());
        Executable::from(std::path::Path::new("/proc/self/exe"), path)
    }

    /// The binary at `path` (a host or a bench that runs the gateway's binary as the zygote).
    pub fn open(path: std::path::PathBuf) -> Executable {
        Executable::from(&path.clone(), path)
    }

    /// `file` opened and kept, to exec `path`.
    fn from(file: &std::path::Path, path: std::path::PathBuf) -> Executable {
        // Above the low descriptors the zygote's start rearranges (fd 3 is its control socket).
        let fd = crate::util::open_regular(file)
            .ok()
            .flatten()
            .and_then(|f| nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10)).ok())
            // SAFETY: F_DUPFD_CLOEXEC just returned this new descriptor, owned by nobody else.
            .map(|raw| unsafe { OwnedFd::from_raw_fd(raw) });
        Executable { fd, path }
    }

    /// What to exec: the kept descriptor through /proc (exec resolves it before it closes
    /// close-on-exec descriptors), or the path when it could not be opened.
    fn program(&self) -> std::path::PathBuf {
        match &self.fd {
            Some(fd) if Path::new("/proc/self/fd").is_dir() => {
                format!("/proc/self/fd/{}", fd.as_raw_fd()).into()
            }
            _ => self.path.clone(),
        }
    }
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
    /// The read end of the command's stdin pipe (`/dev/null` without one).
    pub stdin: Option<&'a OwnedFd>,
}

impl Zygote {
    /// Start the gateway's binary as the zygote, with the environment scrubbed of secrets
    /// but for the `passthrough` names (commands inherit it).
    pub fn start(exe: &Executable, passthrough: &[String]) -> std::io::Result<Zygote> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let mut cmd = Command::new(exe.program());
        cmd.arg0("tui-gateway")
            .arg(ZYGOTE_ARG)
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

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Ask for `bash -c command` in `cwd`, in a pid namespace of its own if `pidns` and the
    /// kernel allows; never blocks (a full socket is an error).
    pub fn run(
        &mut self,
        bash: &Path,
        command: &str,
        cwd: &Path,
        pidns: bool,
        fds: CommandFds<'_>,
    ) -> std::io::Result<()> {
        let request =
            json!({"bash": bash, "command": command, "cwd": cwd, "pidns": pidns}).to_string();
        if request.len() > REQUEST_MAX {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "command too long",
            ));
        }
        let mut raw = vec![
            fds.stdout.as_raw_fd(),
            fds.stderr.as_raw_fd(),
            fds.lifeline.as_raw_fd(),
            fds.status.as_raw_fd(),
        ];
        raw.extend(fds.stdin.map(|fd| fd.as_raw_fd()));
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

    /// Whether the zygote process has exited (reaped if so).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

/// Fields of `clone3`'s argument, as far as this file uses them (`CLONE_ARGS_SIZE_VER0`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
}

/// Which side of a fork this is.
enum Forked {
    Child { in_pidns: bool },
    Parent(i32),
}

/// Fork a supervisor, as the first process of a new pid namespace when asked and allowed. A
/// refusal is remembered: the zygote does not ask the kernel again.
fn fork_supervisor(pidns: bool, refused: &mut bool) -> Result<Forked, Errno> {
    if pidns && !*refused {
        let args = CloneArgs {
            flags: libc::CLONE_NEWPID as u64,
            exit_signal: libc::SIGCHLD as u64,
            ..CloneArgs::default()
        };
        // SAFETY: clone3 without CLONE_VM is fork: the child gets a copy of this
        // single-threaded process and returns here with 0.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        match rc {
            0 => return Ok(Forked::Child { in_pidns: true }),
            pid if pid > 0 => return Ok(Forked::Parent(pid as i32)),
            _ => *refused = true,
        }
    }
    // SAFETY: the zygote is single-threaded, so the child may run ordinary code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child { in_pidns: false }),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child.as_raw())),
    }
}

/// The parent of every orphan below it (not dumpable already: `run_if_requested`).
fn become_subreaper() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// The zygote: receive requests, fork a supervisor for each, until the gateway is gone; kill
/// whatever a supervisor that died by a signal left behind (its orphans come here), and when
/// the gateway is gone, everything below it.
fn zygote(control: OwnedFd) {
    serve_requests(control);
    let me = nix::unistd::getpid().as_raw();
    let deadline = Instant::now() + CLEANUP_LIMIT;
    while kill_below(&ProcessTree::read(), me) && Instant::now() < deadline {
        while let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
            waitpid(None, Some(WaitPidFlag::WNOHANG))
        {}
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The zygote's life while the gateway is there.
fn serve_requests(control: OwnedFd) {
    become_subreaper();
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None);
    let Ok(sigfd) = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
    else {
        return;
    };
    let mut supervisors: HashSet<i32> = HashSet::new();
    let mut pidns_refused = false;
    let mut buf = vec![0u8; REQUEST_MAX + 1];
    loop {
        let mut fds = [
            PollFd::new(control.as_fd(), PollFlags::POLLIN),
            PollFd::new(sigfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
        let request_ready = fds[0].revents().is_some_and(|r| !r.is_empty());
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            while let Ok(Some(_)) = sigfd.read_signal() {}
            reap_children(&mut supervisors);
        }
        if !request_ready {
            continue;
        }
        let mut cmsg = nix::cmsg_space!([RawFd; 5]);
        let (len, fds) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            match recvmsg::<()>(
                control.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
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
                Err(Errno::EINTR | Errno::EAGAIN) => continue,
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
        // Four descriptors, and a fifth when the command reads a pipe as its stdin.
        let mut fds = fds.into_iter();
        let (Some(stdout), Some(stderr), Some(lifeline), Some(status), stdin, None) = (
            fds.next(),
            fds.next(),
            fds.next(),
            fds.next(),
            fds.next(),
            fds.next(),
        ) else {
            continue;
        };
        let pidns = request["pidns"].as_bool().unwrap_or(false);
        match fork_supervisor(pidns, &mut pidns_refused) {
            Ok(Forked::Child { in_pidns }) => {
                drop(control);
                drop(sigfd);
                let streams = Streams {
                    stdin,
                    stdout,
                    stderr,
                };
                let code = supervisor(&request, in_pidns, streams, lifeline, status);
                std::process::exit(code);
            }
            Ok(Forked::Parent(pid)) => {
                supervisors.insert(pid);
            }
            Err(e) => {
                let _ = writeln!(std::fs::File::from(status), "error cannot fork: {e}");
            }
        }
    }
}

/// Reap the zygote's children. A supervisor that died by a signal (a command killed it) left
/// its orphans here, and an orphan that died means there may be more: kill every child that
/// is not a live supervisor, with everything below it.
fn reap_children(supervisors: &mut HashSet<i32>) {
    let mut strays_possible = false;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, _)) => {
                strays_possible |= !supervisors.remove(&pid.as_raw());
            }
            Ok(WaitStatus::Signaled(pid, ..)) => {
                supervisors.remove(&pid.as_raw());
                strays_possible = true;
            }
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(_) => {}
        }
    }
    if strays_possible {
        let me = nix::unistd::getpid().as_raw();
        kill_all(&ProcessTree::read().strays(me, |child| supervisors.contains(&child)));
    }
}

/// SIGKILL everything below `root`; whether there was anything.
fn kill_below(tree: &ProcessTree, root: i32) -> bool {
    let below = tree.below(root);
    kill_all(&below);
    !below.is_empty()
}

/// SIGKILL each of `pids` (a SIGKILLed process forks no more).
pub fn kill_all(pids: &[i32]) {
    for &pid in pids {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// The command's standard descriptors, as the supervisor received them.
struct Streams {
    /// `None`: `/dev/null`.
    stdin: Option<OwnedFd>,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

/// One command's supervisor (a fresh fork of the zygote).
fn supervisor(
    request: &Value,
    in_pidns: bool,
    streams: Streams,
    lifeline: OwnedFd,
    status: OwnedFd,
) -> i32 {
    if in_pidns {
        // The namespace dies with this process; this process dies with the zygote.
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    }
    let mut status = std::fs::File::from(status);
    // /proc is the gateway's mount: /proc/self names this process as the gateway sees it.
    let pid = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
        .unwrap_or_else(std::process::id);
    let _ = writeln!(status, "sup {pid}");
    let bash = request["bash"].as_str().unwrap_or("bash");
    let command = request["command"].as_str().unwrap_or("");
    let cwd = request["cwd"].as_str().unwrap_or("/");
    let code = supervise(
        bash,
        command,
        cwd,
        in_pidns.then_some(pid),
        streams,
        lifeline.as_fd(),
        &mut status,
    );
    let _ = writeln!(status, "exit {code}");
    code
}

/// Start `bash -c command` in its own session and watch it until it ends or the lifeline
/// closes; returns its status. `pidns`: this process's pid (as the gateway sees it) when it
/// is the first of a pid namespace of its own.
fn supervise(
    bash: &str,
    command: &str,
    cwd: &str,
    pidns: Option<u32>,
    streams: Streams,
    lifeline: BorrowedFd<'_>,
    status: &mut std::fs::File,
) -> i32 {
    // (Not inherited from the zygote, unlike not being dumpable.)
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        return fail("cannot become a child subreaper", e);
    }
    // SIGCHLD is already blocked (inherited from the zygote); the rest join it.
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
    let sigfd = match SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(fd) => fd,
        Err(e) => return fail("cannot open a signalfd", e),
    };
    let mut command_line = Command::new(bash);
    command_line
        .args(["-c", command])
        .current_dir(cwd)
        .stdin(streams.stdin.map_or_else(Stdio::null, Stdio::from))
        .stdout(Stdio::from(streams.stdout))
        .stderr(Stdio::from(streams.stderr));
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
                Signal::SIGCHLD,
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
    match pidns {
        // Inside a namespace the group's number means nothing to the gateway: the command's
        // pid as the gateway sees it is read from its /proc (this process's only child).
        Some(me) => {
            if let Some(pid) = only_child(me) {
                let _ = writeln!(status, "cmd {pid}");
            }
        }
        None => {
            let _ = writeln!(status, "pid {leader}");
        }
    }
    let in_pidns = pidns.is_some();
    let code = watch(leader, lifeline, &sigfd);
    kill_everything(leader, in_pidns);
    code.unwrap_or(128 + libc::SIGKILL)
}

/// The one child of process `me`, by the pid the mounted /proc shows (the gateway's).
fn only_child(me: u32) -> Option<i32> {
    let children = crate::util::read_proc(&format!("/proc/{me}/task/{me}/children"))?;
    let mut pids = children.split_whitespace().map(str::parse::<i32>);
    match (pids.next(), pids.next()) {
        (Some(Ok(pid)), None) => Some(pid),
        _ => None,
    }
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

/// SIGKILL everything the command started, and reap it all: in a namespace of its own, every
/// other process of it (`kill(-1)` from its first process); else the command's group and every
/// descendant of this process.
fn kill_everything(leader: Pid, in_pidns: bool) {
    let _ = killpg(leader, Signal::SIGKILL);
    let me = nix::unistd::getpid();
    let deadline = Instant::now() + CLEANUP_LIMIT;
    loop {
        if in_pidns {
            let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        }
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
        if !in_pidns {
            kill_below(&ProcessTree::read(), me.as_raw());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Who is whose parent, read from /proc at one moment.
#[derive(Default)]
pub struct ProcessTree {
    children: HashMap<i32, Vec<i32>>,
}

impl ProcessTree {
    pub fn read() -> ProcessTree {
        let mut tree = ProcessTree::default();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return tree;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let Some(stat) = crate::util::read_proc(&format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let Some((ppid, state)) = parent_of(&stat) {
                // A zombie runs nothing; its parent reaps it.
                if state != 'Z' && state != 'X' {
                    tree.children.entry(ppid).or_default().push(pid);
                }
            }
        }
        tree
    }

    /// A tree of `(pid, parent)` pairs, for tests of what a sweep picks.
    pub fn from_parents(pairs: &[(i32, i32)]) -> ProcessTree {
        let mut tree = ProcessTree::default();
        for &(pid, ppid) in pairs {
            tree.children.entry(ppid).or_default().push(pid);
        }
        tree
    }

    fn children_of(&self, pid: i32) -> &[i32] {
        self.children.get(&pid).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Every child of `root` that is not `kept`, with everything below it: what a supervisor
    /// that is gone left below the zygote (asked by the zygote and by the gateway's sweep).
    pub fn strays(&self, root: i32, kept: impl Fn(i32) -> bool) -> Vec<i32> {
        let mut out = Vec::new();
        for &child in self.children_of(root).iter().filter(|&&c| !kept(c)) {
            out.push(child);
            out.extend(self.below(child));
        }
        out
    }

    /// Every live process whose chain of parents leads to `root` (`root` excluded).
    pub fn below(&self, root: i32) -> Vec<i32> {
        let mut out = Vec::new();
        let mut stack = vec![root];
        while let Some(p) = stack.pop() {
            for &c in self.children_of(p) {
                out.push(c);
                stack.push(c);
            }
        }
        out
    }
}

/// The ppid and state fields of a /proc/PID/stat line (the name may hold spaces and
/// parentheses).
fn parent_of(stat: &str) -> Option<(i32, char)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((fields.next()?.parse().ok()?, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_field_survives_odd_names() {
        assert_eq!(parent_of("42 (a) b) c) S 7 42 42 0"), Some((7, 'S')));
        assert_eq!(parent_of("1 (init) Z 0 1 1"), Some((0, 'Z')));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn the_tree_below_this_process_includes_a_child() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let found = ProcessTree::read().below(nix::unistd::getpid().as_raw());
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&(child.id() as i32)));
    }
}
