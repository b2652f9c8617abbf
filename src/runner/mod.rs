//! The process runner: every command runs under a supervisor, in a pid namespace of its own
//! where the kernel allows it, else in its own process group (`supervisor.rs`); its output
//! pipes and the supervisor's status pipe (`exit N` is the command's exit) are read here,
//! boundedly, with a timeout and a kill of everything it started (SIGTERM, then SIGKILL after
//! the grace). The supervisor runs as the command's user, so the runner never counts on it: a
//! hard kill, or a supervisor gone without saying `exit`, makes the runner itself kill the
//! supervisor and everything below it and below the zygote that no live run owns ([`sweep`]).
//!
//! It knows runs by its own [`RunId`] and nothing else: no sessions, turns, tools or store.
//! It hands its descriptors to the event loop ([`Runner::fds`]), which polls them and calls
//! [`Runner::mark_ready`]; what happened comes back as [`RunEvent`]s, the timers it wants as
//! [`Wake`]s, and the descriptors of finished runs as [`Closed`] for the loop to deregister.

pub mod capture;
mod pipe;
pub mod process;
pub mod secrets;
mod stdin;
pub mod supervisor;

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::rc::Rc;

use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

use crate::clock::Budget;

use capture::Capture;
use pipe::{Drained, Pipe};
pub use process::Streams;
pub use stdin::StdinRefused;
use stdin::{Flushed, StdinPipe};

/// Output kept per stream: this much of the head and of the tail.
const HEAD_KEEP: usize = 16 * 1024;
const TAIL_KEEP: usize = 32 * 1024;
/// Bytes read from one run per pump, so a flood cannot starve the loop.
const READ_BUDGET: usize = 256 * 1024;
/// After the supervisor exits, pipes still held by stragglers are read this much longer.
const DRAIN: Duration = Duration::from_millis(200);
/// Rounds of a sweep (read /proc, kill what no live run owns) before it leaves the rest to the
/// next one: a process SIGKILLed in one round forks no more, so a round finds only what its
/// predecessor's targets forked just before.
const SWEEP_ROUNDS: usize = 8;

/// A [`Spec::timeout`] that never fires: a process that lives until it is stopped (a server).
pub const NO_TIMEOUT: Duration = Duration::MAX;

/// A run, as the runner names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(pub u64);

/// Why a command stopped before its natural end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Timeout,
    Interrupted,
}

/// What a timer of the runner does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunTimer {
    /// The run's timeout passed: stop it.
    Timeout,
    /// The kill grace after SIGTERM passed: SIGKILL the group.
    Kill,
    /// Stragglers had their time to close the pipes: end the run.
    Drain,
}

/// A timer the runner wants: call [`Runner::on_timer`] at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    pub at: Instant,
    pub run: RunId,
    pub what: RunTimer,
}

/// What a run reads on its stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`.
    Null,
    /// A pipe the gateway writes ([`Runner::write_stdin`]), with at most `cap` bytes queued
    /// beyond what the pipe holds (so `cap` is also the largest one write).
    Pipe { cap: usize },
}

/// What to run.
pub struct Spec<'a> {
    /// Run as `bash -c command`.
    pub command: &'a str,
    pub cwd: &'a Path,
    pub streams: Streams,
    pub stdin: Stdin,
    /// Stopped (SIGTERM, then SIGKILL) this long after its start; [`NO_TIMEOUT`]: never.
    pub timeout: Duration,
    /// Report output as it arrives ([`RunEvent::Output`]), not only at the end.
    pub live: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    /// stdout (with stderr when merged), capped: head and tail kept, the cut said.
    pub stdout: String,
    pub stderr: String,
    /// The exit status the supervisor reported (`128+N` for signal N; -1 unknown).
    pub status: i32,
    /// Why it was stopped, if it was.
    pub ending: Option<Ending>,
    /// Why it could not start, as the supervisor reported it.
    pub start_error: Option<String>,
    /// The command's pid, as the gateway sees it, when the supervisor reported it.
    pub pid: Option<i32>,
    pub timeout: Duration,
    /// From the start to the end.
    pub duration: Duration,
}

impl RunEnd {
    /// The shell's convention for the status: 124 timed out, 130 interrupted.
    pub fn code(&self) -> i32 {
        match self.ending {
            Some(Ending::Timeout) => 124,
            Some(Ending::Interrupted) => 130,
            None => self.status,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// Bytes the command printed (runs started with `live`).
    Output { run: RunId, bytes: Vec<u8> },
    /// The run is over and forgotten.
    Ended { run: RunId, end: RunEnd },
}

impl RunEvent {
    /// The run it is of.
    pub fn run(&self) -> RunId {
        match self {
            RunEvent::Output { run, .. } | RunEvent::Ended { run, .. } => *run,
        }
    }
}

/// Descriptors of a run that are done with, for the loop to deregister before they close:
/// all of them when the run ended (`run_over`), else its stdin pipe alone.
pub struct Closed {
    pub run: RunId,
    pub fds: Vec<OwnedFd>,
    pub run_over: bool,
}

struct Run {
    /// The supervisor, once it reported its pid (polite SIGTERM goes there).
    supervisor: Option<process::SupervisorHandle>,
    /// The command's process group (= its pid), once the supervisor reported it (not reported
    /// from a pid namespace, where the namespace is what gets killed: a run reported a group
    /// only when it is not contained in one).
    group: Option<i32>,
    /// The command's pid as the gateway sees it (its group's id, or `cmd PID` from a namespace).
    pid: Option<i32>,
    /// The supervisor said `exit`: it killed everything before it left.
    exit_reported: bool,
    /// The supervisor's end without `exit` was answered with a sweep.
    swept: bool,
    status: Pipe,
    stdout: Pipe,
    stderr: Option<Pipe>,
    stdin: Option<StdinPipe>,
    /// Bytes of the status pipe not yet parsed into lines.
    status_buf: Vec<u8>,
    start_error: Option<String>,
    lifeline: Option<OwnedFd>,
    out: Capture,
    err: Capture,
    exit: Option<i32>,
    ending: Option<Ending>,
    timeout: Duration,
    started: Instant,
    live: bool,
    drain_until: Option<Instant>,
    /// Readiness was reported on one of its pipes and not yet read to `WouldBlock`.
    ready: bool,
}

impl Run {
    /// Give the run up: read what its pipes hold, SIGKILL its group now and drop the
    /// lifeline. The caller sweeps, which kills its supervisor and everything below it,
    /// whatever state the supervisor is in. The status pipe is read first: once `exit` is
    /// reported the group is gone and reaped, and its id may already name someone else's
    /// processes.
    fn abandon(&mut self, id: RunId, events: &mut Vec<RunEvent>) {
        read_pipes(self, id, events);
        process::kill_group(group_to_kill(self.group, self.exit_reported));
        self.lifeline = None;
    }

    /// The supervisor is there and the run is wanted: what is below it is the run's.
    fn owns_its_tree(&self) -> bool {
        self.lifeline.is_some() && self.status.open
    }

    fn pipes_done(&self) -> bool {
        !self.stdout.open && self.stderr.as_ref().is_none_or(|p| !p.open)
    }
}

pub struct Runner {
    runs: HashMap<RunId, Run>,
    next_id: u64,
    /// Runs with readable pipes to pump.
    work: Vec<RunId>,
    /// Program re-executed as the zygote (the gateway's own binary, opened at start).
    exe: supervisor::Executable,
    /// Ask for a pid namespace per command.
    pidns: bool,
    /// Said once that the kernel refused the namespace (a run reported its group: only an uncontained one does).
    said_fallback: bool,
    zygote: Option<supervisor::Zygote>,
    /// Zygotes replaced while not yet reaped.
    retired: Vec<supervisor::Zygote>,
    kill_grace: Duration,
    /// Secret-looking variables the user lets commands inherit (`secrets::withheld`).
    env_passthrough: Vec<String>,
    /// The environment every command starts with, worked out once (the gateway's does not
    /// change): judging each variable for secrets is regex work.
    base_environment: std::cell::OnceCell<Rc<HashMap<String, String>>>,
    events: Vec<RunEvent>,
    wakes: Vec<Wake>,
    closed: Vec<Closed>,
}

impl Runner {
    /// `exe` is started as the zygote (opened already, so a file replaced since does not
    /// matter); `pidns`: run each command in a pid namespace of its own where allowed.
    pub fn new(exe: supervisor::Executable, kill_grace: Duration, pidns: bool) -> Runner {
        Runner {
            runs: HashMap::new(),
            next_id: 1,
            work: Vec::new(),
            exe,
            pidns,
            said_fallback: false,
            zygote: None,
            retired: Vec::new(),
            kill_grace,
            env_passthrough: Vec::new(),
            base_environment: std::cell::OnceCell::new(),
            events: Vec::new(),
            wakes: Vec::new(),
            closed: Vec::new(),
        }
    }

    /// Let commands inherit these variables even when they look secret (from the next zygote on).
    pub fn with_env_passthrough(mut self, names: Vec<String>) -> Runner {
        self.env_passthrough = names;
        self.base_environment = std::cell::OnceCell::new();
        self
    }

    /// The environment every command starts with: the gateway's, without what looks secret
    /// but for the passthrough names (what the zygote passes on).
    pub fn base_environment(&self) -> Rc<HashMap<String, String>> {
        self.base_environment
            .get_or_init(|| {
                Rc::new(
                    std::env::vars_os()
                        .filter_map(|(n, v)| Some((n.into_string().ok()?, v.into_string().ok()?)))
                        .filter(|(n, v)| !secrets::is_withheld(n, v, &self.env_passthrough))
                        .collect(),
                )
            })
            .clone()
    }

    /// The secret-looking variables commands inherit all the same (`terminal.env_passthrough`).
    pub fn env_passthrough(&self) -> &[String] {
        &self.env_passthrough
    }

    /// Start a command through the zygote, (re)starting the zygote when it is not there. The
    /// caller registers [`Runner::fds`] with its poll.
    pub fn start(&mut self, spec: &Spec<'_>, now: Instant) -> std::io::Result<RunId> {
        let spawned = self.spawn(spec)?;
        let id = RunId(self.next_id);
        self.next_id += 1;
        let pipe = Pipe::new;
        self.runs.insert(
            id,
            Run {
                supervisor: None,
                group: None,
                pid: None,
                exit_reported: false,
                swept: false,
                status: pipe(spawned.status),
                stdout: pipe(spawned.stdout),
                stderr: spawned.stderr.map(pipe),
                stdin: match (spawned.stdin, spec.stdin) {
                    (Some(fd), Stdin::Pipe { cap }) => Some(StdinPipe::new(fd, cap)),
                    _ => None,
                },
                status_buf: Vec::new(),
                start_error: None,
                lifeline: Some(spawned.lifeline),
                out: Capture::new(HEAD_KEEP, TAIL_KEEP),
                err: Capture::new(HEAD_KEEP, TAIL_KEEP),
                exit: None,
                ending: None,
                timeout: spec.timeout,
                started: now,
                live: spec.live,
                drain_until: None,
                ready: true,
            },
        );
        if let Some(at) = now.checked_add(spec.timeout) {
            self.wake(at, id, RunTimer::Timeout);
        }
        self.work.push(id);
        Ok(id)
    }

    fn spawn(&mut self, spec: &Spec<'_>) -> std::io::Result<process::Spawned> {
        let stdin_pipe = matches!(spec.stdin, Stdin::Pipe { .. });
        let (command, cwd, streams) = (spec.command, spec.cwd, spec.streams);
        if let Some(z) = self.zygote.as_mut()
            && !z.exited()
        {
            match process::spawn(z, command, cwd, streams, stdin_pipe, self.pidns) {
                // Only a zygote that is gone is replaced (a command too long is not its fault).
                Err(e) if zygote_gone(&e) => {}
                done => return done,
            }
        }
        if let Some(old) = self.zygote.take() {
            self.retired.push(old);
        }
        let z = self
            .zygote
            .insert(supervisor::Zygote::start(&self.exe, &self.env_passthrough)?);
        process::spawn(z, command, cwd, streams, stdin_pipe, self.pidns)
    }

    /// The write end of a run's stdin pipe, to watch for writability (readiness of it marks
    /// the run ready like its other descriptors: the pump writes what is queued).
    pub fn stdin_fd(&self, id: RunId) -> Option<RawFd> {
        let pipe = self.runs.get(&id)?.stdin.as_ref()?;
        pipe.fd().map(|fd| fd.as_raw_fd())
    }

    /// Send `bytes` to a run's stdin: written now as far as the pipe takes them, the rest
    /// queued (all or nothing: refused when the queue would pass its cap). Returns the bytes
    /// left queued.
    pub fn write_stdin(&mut self, id: RunId, bytes: &[u8]) -> Result<usize, StdinRefused> {
        let run = self.runs.get_mut(&id).ok_or(StdinRefused::NoPipe)?;
        let pipe = run.stdin.as_mut().ok_or(StdinRefused::NoPipe)?;
        let flushed = pipe.write(bytes)?;
        let queued = pipe.queued();
        self.stdin_done(id, flushed);
        Ok(queued)
    }

    /// Close a run's stdin once what is queued is written (the command reads end of file).
    pub fn close_stdin(&mut self, id: RunId) {
        let Some(pipe) = self.runs.get_mut(&id).and_then(|r| r.stdin.as_mut()) else {
            return;
        };
        pipe.close();
        let flushed = pipe.flush();
        self.stdin_done(id, flushed);
    }

    /// Bytes waiting for a run's stdin to take them.
    pub fn stdin_queued(&self, id: RunId) -> usize {
        self.runs
            .get(&id)
            .and_then(|r| r.stdin.as_ref())
            .map_or(0, StdinPipe::queued)
    }

    /// Hand the loop a stdin pipe that is closed or broken after `flushed`.
    fn stdin_done(&mut self, id: RunId, flushed: Flushed) {
        let Some(pipe) = self.runs.get_mut(&id).and_then(|r| r.stdin.as_mut()) else {
            return;
        };
        if let Some(fd) = pipe.take_if_done(flushed) {
            self.closed.push(Closed {
                run: id,
                fds: vec![fd],
                run_over: false,
            });
        }
    }

    /// The descriptors of a run to watch for readability.
    pub fn fds(&self, id: RunId) -> Vec<RawFd> {
        let Some(run) = self.runs.get(&id) else {
            return Vec::new();
        };
        [Some(&run.stdout), run.stderr.as_ref(), Some(&run.status)]
            .into_iter()
            .flatten()
            .map(|p| p.fd.as_raw_fd())
            .collect()
    }

    /// Forget a run whose descriptors could not be watched: kill it, report nothing.
    pub fn discard(&mut self, id: RunId) {
        if let Some(run) = self.runs.get_mut(&id) {
            run.abandon(id, &mut Vec::new());
            self.sweep();
        }
        self.runs.remove(&id);
        self.work.retain(|w| *w != id);
    }

    pub fn has_work(&self) -> bool {
        !self.work.is_empty()
    }

    pub fn mark_ready(&mut self, id: RunId) {
        if let Some(run) = self.runs.get_mut(&id)
            && !run.ready
        {
            run.ready = true;
            self.work.push(id);
        }
    }

    /// Whether the run is there and not told to stop yet.
    pub fn is_stoppable(&self, id: RunId) -> bool {
        self.runs
            .get(&id)
            .is_some_and(|r| r.exit.is_none() && r.ending.is_none())
    }

    /// The command's pid as the gateway sees it, once its supervisor reported it.
    pub fn pid(&self, id: RunId) -> Option<i32> {
        self.runs.get(&id)?.pid
    }

    pub fn any_alive(&self) -> bool {
        !self.runs.is_empty()
    }

    /// Begin stopping a command: SIGTERM to its group now, SIGKILL after the kill grace.
    pub fn stop(&mut self, id: RunId, ending: Ending, now: Instant) {
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        if run.ending.is_some() || run.exit.is_some() {
            return;
        }
        run.ending = Some(ending);
        // Before the supervisor reported its pid, the SIGTERM goes out when it does.
        if let Some(sup) = &run.supervisor {
            sup.signal(Signal::SIGTERM);
        }
        self.wake(now + self.kill_grace, id, RunTimer::Kill);
    }

    /// Kill a command at once and end it now (its `Ended` event is queued).
    pub fn kill_now(&mut self, id: RunId, now: Instant) {
        if let Some(run) = self.runs.get_mut(&id) {
            run.ending.get_or_insert(Ending::Interrupted);
        }
        self.finish(id, now);
    }

    /// The hard exit: SIGKILL every live run at once.
    pub fn kill_all(&mut self) {
        for (id, run) in self.runs.iter_mut().filter(|(_, r)| r.exit.is_none()) {
            run.ending.get_or_insert(Ending::Interrupted);
            run.abandon(*id, &mut self.events);
        }
        self.sweep();
    }

    pub fn on_timer(&mut self, id: RunId, what: RunTimer, now: Instant) {
        match what {
            RunTimer::Timeout => self.stop(id, Ending::Timeout, now),
            RunTimer::Kill => {
                if let Some(run) = self.runs.get_mut(&id)
                    && run.exit.is_none()
                {
                    run.abandon(id, &mut self.events);
                    self.sweep();
                }
            }
            RunTimer::Drain => self.finish(id, now),
        }
    }

    /// SIGCHLD: a zygote may have died; reap it (the next command starts a new one).
    pub fn on_child_exit(&mut self) {
        if let Some(z) = self.zygote.as_mut()
            && z.exited()
        {
            self.zygote = None;
        }
        self.retired.retain_mut(|z| !z.exited());
    }

    /// Kill, round after round until a round finds nothing: each abandoned run's supervisor and
    /// everything below it, and everything below a zygote that is not a supervisor of a run
    /// still wanted (orphans of a supervisor that was killed or died). Nothing here trusts a
    /// process the command can signal: it works with the supervisor and the zygote stopped.
    fn sweep(&mut self) {
        let zygotes: Vec<i32> = self
            .zygote
            .iter()
            .chain(&self.retired)
            .map(|z| z.pid())
            .collect();
        for _ in 0..SWEEP_ROUNDS {
            let tree = supervisor::ProcessTree::read();
            let wanted: HashSet<i32> = self
                .runs
                .values()
                .filter(|r| r.owns_its_tree())
                .filter_map(|r| r.supervisor.as_ref().map(|s| s.pid))
                .collect();
            let doomed: Vec<&process::SupervisorHandle> = self
                .runs
                .values()
                .filter(|r| !r.owns_its_tree() && r.status.open)
                .filter_map(|r| r.supervisor.as_ref())
                .collect();
            let doomed_pids: Vec<i32> = doomed.iter().map(|s| s.pid).collect();
            let targets = sweep_targets(&tree, &doomed_pids, &zygotes, &wanted);
            supervisor::kill_all(&targets);
            // By its pidfd: even reparented away from the zygote, it is this one.
            for sup in doomed {
                sup.signal(Signal::SIGKILL);
            }
            if targets.is_empty() {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Read every ready run's pipes within the per-run budget.
    /// Read and reap the runs that are ready, until `budget` is spent (at least one); those
    /// left keep their place ahead of the runs that become ready later.
    pub fn pump(&mut self, now: Instant, budget: &Budget) {
        let mut work = std::mem::take(&mut self.work).into_iter();
        for id in work.by_ref() {
            self.pump_one(id, now);
            if budget.spent() {
                break;
            }
        }
        let mut left: Vec<RunId> = work.collect();
        if !left.is_empty() {
            left.append(&mut self.work);
            self.work = left;
        }
    }

    pub fn take_events(&mut self) -> Vec<RunEvent> {
        std::mem::take(&mut self.events)
    }

    pub fn take_wakes(&mut self) -> Vec<Wake> {
        std::mem::take(&mut self.wakes)
    }

    pub fn take_closed(&mut self) -> Vec<Closed> {
        std::mem::take(&mut self.closed)
    }

    fn wake(&mut self, at: Instant, run: RunId, what: RunTimer) {
        self.wakes.push(Wake { at, run, what });
    }

    fn pump_one(&mut self, id: RunId, now: Instant) {
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        run.ready = false;
        let more = read_pipes(run, id, &mut self.events);
        if fallback_to_say(self.pidns, self.said_fallback, run.group) {
            self.said_fallback = true;
            crate::diag!(
                "[gateway] the kernel refused a pid namespace for commands: they run under the subreaper fallback (see --tool-pidns)"
            );
        }
        if let Some(pipe) = run.stdin.as_mut().filter(|p| p.queued() > 0) {
            let flushed = pipe.flush();
            self.stdin_done(id, flushed);
        }
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        if !run.status.open && !run.exit_reported && !run.swept {
            // The supervisor is gone without saying it killed everything (a command killed
            // it): what it left is found and killed here.
            run.swept = true;
            self.sweep();
        }
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        if run.exit.is_some() && run.drain_until.is_none() {
            // The supervisor killed everything before it left; give the pipes a moment.
            run.drain_until = Some(now + DRAIN);
            self.wake(now + DRAIN, id, RunTimer::Drain);
        }
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        if run.exit.is_some() && run.pipes_done() {
            self.finish(id, now);
        } else if more {
            self.mark_ready(id);
        }
    }

    /// The command is over (or abandoned): release it and report its end.
    fn finish(&mut self, id: RunId, now: Instant) {
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        if run.exit.is_none() {
            // Abandoned while alive: kill it and everything below it (what its pipes hold
            // is read first, its exit too if it just reported one).
            run.abandon(id, &mut self.events);
            run.exit.get_or_insert(128 + libc::SIGKILL);
            self.sweep();
        } else {
            // Whatever is still buffered in the pipes belongs to the result.
            read_pipes(run, id, &mut self.events);
        }
        let Some(mut run) = self.runs.remove(&id) else {
            return;
        };
        // (An exited supervisor already killed its group; its id may belong to another process now.)
        run.lifeline = None;
        self.work.retain(|w| *w != id);
        let end = RunEnd {
            stdout: run.out.text(),
            stderr: run.err.text(),
            status: run.exit.unwrap_or(-1),
            ending: run.ending,
            start_error: run.start_error.take(),
            pid: run.pid,
            timeout: run.timeout,
            duration: now.saturating_duration_since(run.started),
        };
        let mut fds = vec![run.stdout.fd, run.status.fd];
        fds.extend(run.stderr.map(|p| p.fd));
        fds.extend(
            run.stdin
                .as_mut()
                .and_then(|p| p.take_if_done(Flushed::Broken)),
        );
        self.closed.push(Closed {
            run: id,
            fds,
            run_over: true,
        });
        self.events.push(RunEvent::Ended { run: id, end });
    }
}

/// What a sweep kills by pid: everything below a supervisor given up (`doomed`, signalled by
/// pidfd itself), and every child of a zygote that is not a `wanted` supervisor, with
/// everything below it.
fn sweep_targets(
    tree: &supervisor::ProcessTree,
    doomed: &[i32],
    zygotes: &[i32],
    wanted: &HashSet<i32>,
) -> Vec<i32> {
    let kept = |child| wanted.contains(&child) || doomed.contains(&child);
    let strays = zygotes.iter().flat_map(|&z| tree.strays(z, kept));
    doomed
        .iter()
        .flat_map(|&s| tree.below(s))
        .chain(strays)
        .collect()
}

/// Whether a request failed because the zygote is gone (its socket closed), not because of
/// the request.
fn zygote_gone(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED)
    )
}

/// A line of the supervisor's status pipe.
#[derive(Debug, PartialEq)]
enum Report {
    /// `sup PID`: the supervisor's pid.
    Supervisor(Option<i32>),
    /// `pid GROUP`: the command's process group (its leader's pid), outside a pid namespace.
    Group(Option<i32>),
    /// `cmd PID`: the command's pid, from a pid namespace of its own.
    Command(Option<i32>),
    /// `exit STATUS` (-1 when unreadable).
    Exit(i32),
    /// `error WHY`: the command could not start.
    Error(String),
}

/// The process group a kill may signal: none once the supervisor reported the exit (it killed
/// and reaped the group, so the number is free for the kernel to reuse).
fn group_to_kill(group: Option<i32>, exit_reported: bool) -> Option<i32> {
    group.filter(|_| !exit_reported)
}

/// Whether to say that commands run without the pid namespace asked for: a run reported its
/// process group, which only an uncontained supervisor does, and it was not said yet.
fn fallback_to_say(asked: bool, said: bool, group: Option<i32>) -> bool {
    asked && !said && group.is_some()
}

fn parse_report(line: &str) -> Option<Report> {
    let (key, value) = line.split_once(' ').unwrap_or((line, ""));
    Some(match key {
        "sup" => Report::Supervisor(value.parse().ok()),
        "pid" => Report::Group(value.parse().ok()),
        "cmd" => Report::Command(value.parse().ok()),
        "exit" => Report::Exit(value.parse().unwrap_or(-1)),
        "error" => Report::Error(value.to_string()),
        _ => return None,
    })
}

/// One report of the supervisor.
fn on_status_line(run: &mut Run, line: &str) {
    match parse_report(line) {
        Some(Report::Supervisor(pid)) => {
            run.supervisor =
                pid.and_then(|pid| process::SupervisorHandle::open(pid, &run.status.fd));
            // A stop asked before the supervisor was known goes out now (a kill asked before
            // is done by the supervisor, whose lifeline is closed, and by the next sweep).
            if let (Some(sup), Some(_)) = (&run.supervisor, run.ending) {
                sup.signal(if run.lifeline.is_none() {
                    Signal::SIGKILL
                } else {
                    Signal::SIGTERM
                });
            }
        }
        Some(Report::Group(group)) => {
            run.group = group;
            run.pid = group;
            if run.ending.is_some() && run.lifeline.is_none() {
                process::kill_group(run.group);
            }
        }
        Some(Report::Command(pid)) => run.pid = pid,
        Some(Report::Exit(status)) => {
            run.exit = Some(status);
            run.exit_reported = true;
        }
        Some(Report::Error(why)) => run.start_error = Some(why),
        None => {}
    }
}

/// Read what is there; true if the budget ran out before every pipe would block.
fn read_pipes(run: &mut Run, id: RunId, events: &mut Vec<RunEvent>) -> bool {
    let mut buf = [0u8; 64 * 1024];
    // The status pipe: `sup PID`, `pid GROUP` or `cmd PID`, then `exit STATUS` (or `error
    // WHY`); its end is the supervisor's.
    if run.status.open {
        let mut unbounded = usize::MAX;
        let status_buf = &mut run.status_buf;
        let drained = run
            .status
            .drain(&mut buf, &mut unbounded, "status pipe", |b| {
                status_buf.extend_from_slice(b)
            });
        if drained == Drained::Ended {
            run.exit.get_or_insert(-1);
        }
        let text = std::mem::take(&mut run.status_buf);
        let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        run.status_buf = text[complete..].to_vec();
        for line in String::from_utf8_lossy(&text[..complete]).lines() {
            on_status_line(run, line);
        }
    }
    let mut budget = READ_BUDGET;
    let mut more = false;
    let live = run.live;
    for (pipe, capture, what) in [
        (Some(&mut run.stdout), &mut run.out, "stdout"),
        (run.stderr.as_mut(), &mut run.err, "stderr"),
    ] {
        let Some(p) = pipe else {
            continue;
        };
        let drained = p.drain(&mut buf, &mut budget, what, |bytes| {
            capture.push(bytes);
            if live {
                events.push(RunEvent::Output {
                    run: id,
                    bytes: bytes.to_vec(),
                });
            }
        });
        more |= drained == Drained::Budget;
    }
    more
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supervisor_reports_are_parsed_and_garbage_ignored() {
        assert_eq!(parse_report("sup 41"), Some(Report::Supervisor(Some(41))));
        assert_eq!(parse_report("pid 42"), Some(Report::Group(Some(42))));
        assert_eq!(parse_report("pid x"), Some(Report::Group(None)));
        assert_eq!(parse_report("cmd 43"), Some(Report::Command(Some(43))));
        // After `exit` the group's number is no longer ours to signal.
        assert_eq!(group_to_kill(Some(42), false), Some(42));
        assert_eq!(group_to_kill(Some(42), true), None);
        // Asked for a namespace and not given one: said once; contained or not asked: never.
        assert!(fallback_to_say(true, false, Some(42)));
        assert!(!fallback_to_say(true, true, Some(42)));
        assert!(!fallback_to_say(true, false, None));
        assert!(!fallback_to_say(false, false, Some(42)));
        assert_eq!(parse_report("exit 137"), Some(Report::Exit(137)));
        assert_eq!(parse_report("exit"), Some(Report::Exit(-1)));
        assert_eq!(
            parse_report("error no such dir"),
            Some(Report::Error("no such dir".into()))
        );
        assert_eq!(parse_report("hello"), None);
    }

    #[test]
    fn a_sweep_spares_wanted_supervisors_and_kills_what_no_run_owns() {
        // zygote 10: wanted supervisor 11 (its command 12), given-up supervisor 13 (its command
        // 14 and that one's child 15), an orphan 16 of a killed supervisor (with its child 17).
        let tree = supervisor::ProcessTree::from_parents(&[
            (11, 10),
            (12, 11),
            (13, 10),
            (14, 13),
            (15, 14),
            (16, 10),
            (17, 16),
        ]);
        let wanted = HashSet::from([11]);
        let mut targets = sweep_targets(&tree, &[13], &[10], &wanted);
        targets.sort();
        assert_eq!(targets, vec![14, 15, 16, 17]);
        assert!(sweep_targets(&tree, &[], &[10], &HashSet::from([11, 13, 16])).is_empty());
        // A given-up supervisor already reparented away from the zygote is still swept below.
        let moved = supervisor::ProcessTree::from_parents(&[(13, 1), (14, 13)]);
        assert_eq!(sweep_targets(&moved, &[13], &[10], &wanted), vec![14]);
    }

    #[test]
    fn a_stopped_run_ends_with_the_shells_status() {
        let end = |ending| RunEnd {
            stdout: String::new(),
            stderr: String::new(),
            status: 143,
            ending,
            start_error: None,
            pid: None,
            timeout: Duration::from_secs(1),
            duration: Duration::ZERO,
        };
        assert_eq!(end(None).code(), 143);
        assert_eq!(end(Some(Ending::Timeout)).code(), 124);
        assert_eq!(end(Some(Ending::Interrupted)).code(), 130);
    }
}
