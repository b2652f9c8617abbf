//! The supervisor: the gateway's own binary re-executed in a hidden mode, one per command.
//!
//! ```text
//! gateway ──lifeline pipe (fd 3)──▶ supervisor (child subreaper, own session)
//!         ◀──status pipe (fd 4)───      └─ bash -c CMD  (new session = group G, leader)
//!                                            └─ … every descendant
//! ```
//! The supervisor starts `bash -c CMD` in a new session, reports its pid (= G) on fd 4, forwards
//! SIGTERM to G, and reaps. When the command's leader exits, or when the lifeline closes (the
//! gateway asked for a hard kill, or died for any reason, SIGKILL included), it SIGKILLs G and
//! every descendant still alive — including ones that called `setsid` and left G, which as a
//! subreaper it can find — then exits with the command's status (`128+N` for signal N).
//! The supervisor is not in G, so the gateway can SIGKILL G directly and the supervisor still
//! cleans up after it.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, killpg, sigprocmask};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// The hidden first argument that selects this mode.
pub const MODE_ARG: &str = "__tui_gateway_supervise";
/// Descriptor numbers the supervisor receives its pipes on.
pub const LIFELINE_FD: i32 = 3;
pub const STATUS_FD: i32 = 4;

/// How long the supervisor keeps killing and reaping descendants before giving up.
const CLEANUP_LIMIT: Duration = Duration::from_secs(2);

/// Call first thing in `main`: runs the supervisor and exits if this process was started as
/// one; returns otherwise. Embedding hosts that let the gateway spawn tools call it too.
pub fn run_if_requested() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(MODE_ARG) {
        let code = supervise(&args[2..]);
        std::process::exit(code);
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> i32 {
    let _ = writeln!(std::io::stderr(), "[tool-supervisor] {what}: {e}");
    127
}

/// `args`: `-- PROGRAM ARGS…`.
fn supervise(args: &[String]) -> i32 {
    let Some(("--", cmd)) = args.split_first().map(|(a, r)| (a.as_str(), r)) else {
        return fail("usage", "expected -- PROGRAM ARGS");
    };
    let Some((program, program_args)) = cmd.split_first() else {
        return fail("usage", "no program");
    };
    // SAFETY: fds 3 and 4 were placed there by the gateway for this process alone; we take
    // ownership exactly once.
    let (lifeline, status) = unsafe {
        (
            OwnedFd::from_raw_fd(LIFELINE_FD),
            OwnedFd::from_raw_fd(STATUS_FD),
        )
    };
    for fd in [&lifeline, &status] {
        let _ = nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
    }
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
    let mut command = Command::new(program);
    command.args(program_args);
    // SAFETY: setsid, signal and sigprocmask are async-signal-safe. The command must not
    // inherit our blocked signals (SIGTERM would never reach it).
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            // Dispositions the gateway chose for itself (SIGINT ignored under a UI) are not
            // the command's: it starts with the defaults.
            for sig in [
                Signal::SIGINT,
                Signal::SIGTERM,
                Signal::SIGHUP,
                Signal::SIGQUIT,
            ] {
                nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl)
                    .map_err(std::io::Error::from)?;
            }
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(std::io::Error::from)
        });
    }
    let child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(std::fs::File::from(status), "error {e}");
            return fail(&format!("cannot start {program}"), e);
        }
    };
    let leader = Pid::from_raw(child.id() as i32);
    {
        let mut report = std::fs::File::from(status);
        let _ = writeln!(report, "pid {leader}");
    }
    let code = watch(leader, lifeline.as_fd(), &sigfd);
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
