//! Hermes' filesystem checkpoints and `/rollback`: a snapshot of a directory before the first
//! file-changing tool call of a turn (`trigger.rs` decides which), in Hermes' shared shadow
//! git store (`layout.rs`), so Hermes and the gateway read each other's. Each operation is a
//! sequence of git commands (`seq.rs`, pure state machines) run one command at a time under
//! the process runner as a service run, so a snapshot of a large tree never stops the loop:
//! the tool call waits for its snapshot as a deferred start (the turn machine's), every other
//! session and `ping` go on. One sequence runs at a time (a gc must not race a snapshot).
//! Housekeeping (the automatic sweep, its `git gc`) never holds up a user: a snapshot or a
//! `rollback.*` request goes ahead of a queued sweep, and one that comes while the sweep runs
//! goes first once the sweep's command is over (a gc is stopped: git cleans up after a
//! SIGTERM; a short command is let finish); the sweep starts again behind it.
//! Pruning is `prune.rs` (pure). A snapshot that fails or is skipped never fails the call: it
//! is said once per session and reason (`status.update` kind `warn`, and on stderr).

pub mod layout;
pub mod prune;
pub mod seq;
pub mod trigger;

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::effects::Effect;
use crate::rpc::RpcError;
use crate::rpc::frame::{Id, code};
use crate::runner::{RunEnd, RunEvent, RunId, Spec, Stdin, Streams};
use crate::tools::runs::{self, RunOwners};
use layout::Store;
use seq::{Cmd, FsOp, Outcome, SnapshotLimits, Step, TakeEnd, Target};

/// What the user reads when `git` cannot be found.
pub const GIT_MISSING: &str =
    "checkpoints need git, and git is not on PATH: install git to use /rollback";
/// `rollback.diff` sends at most this much of the diff (Hermes' cut).
const DIFF_SHOWN: usize = 4000;
/// Hermes' error codes of `rollback.list`, `rollback.restore`, `rollback.diff`.
const LIST_FAILED: i64 = 5020;
const RESTORE_FAILED: i64 = 5021;
const DIFF_FAILED: i64 = 5022;

/// config.yaml's `checkpoints:` section, read as Hermes reads it (with its defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub enabled: bool,
    pub limits: SnapshotLimits,
    pub auto_prune: bool,
    pub retention_days: u64,
    pub min_interval_hours: u64,
}

impl Settings {
    /// From `$HERMES_HOME/config.yaml`; `HERMES_TUI_CHECKPOINTS` (what Hermes' TUI gateway
    /// reads), when set, says whether they are on. `max_files`: the gateway's knob.
    pub fn load(home: &Path, max_files: usize) -> Settings {
        let doc = crate::config_file::load(home).unwrap_or(yaml_rust2::Yaml::Null);
        let env = std::env::var("HERMES_TUI_CHECKPOINTS").ok();
        Settings::from_doc(&doc, env.as_deref(), max_files)
    }

    pub fn from_doc(doc: &yaml_rust2::Yaml, env: Option<&str>, max_files: usize) -> Settings {
        use yaml_rust2::Yaml;
        let at = |key: &str| crate::config_file::lookup(doc, &format!("checkpoints.{key}"));
        let int = |key: &str, default: u64| match at(key) {
            Yaml::Integer(i) => (*i).max(0) as u64,
            Yaml::Real(r) => r.parse::<f64>().map_or(default, |f| f.max(0.0) as u64),
            Yaml::String(s) => s.trim().parse().unwrap_or(default),
            _ => default,
        };
        let enabled = match env.filter(|v| !v.trim().is_empty()) {
            Some(v) => crate::util::truthy(v),
            None => match at("enabled") {
                Yaml::Boolean(b) => *b,
                Yaml::String(s) => crate::util::truthy(s),
                Yaml::Integer(i) => *i != 0,
                _ => false,
            },
        };
        let mb = 1024 * 1024;
        Settings {
            enabled,
            limits: SnapshotLimits {
                max_snapshots: int("max_snapshots", 20).max(1) as usize,
                max_file_bytes: int("max_file_size_mb", 10).saturating_mul(mb),
                max_total_bytes: int("max_total_size_mb", 500).saturating_mul(mb),
                max_files,
            },
            auto_prune: !matches!(at("auto_prune"), Yaml::Boolean(false)),
            retention_days: int("retention_days", 7),
            min_interval_hours: int("min_interval_hours", 24),
        }
    }
}

/// What a `rollback.*` request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    List,
    Diff,
    Restore,
}

/// Who waits for a sequence.
#[derive(Debug)]
enum Waiter {
    /// A tool call of `rid`: its start waits (deferred) for the snapshot.
    Call { rid: String },
    /// A `rollback.*` request, answered at the end.
    Request { id: Id, rid: String, ask: Ask },
    /// The automatic sweep: nobody.
    Nobody,
}

#[derive(Debug)]
enum Work {
    Take(seq::Take),
    List(seq::List),
    /// A checkpoint named by its number in the list: the list first, then `then`.
    Resolve {
        list: seq::List,
        number: i64,
        then: Ask,
        file: Option<String>,
    },
    Diff(seq::Diff),
    Restore(seq::Restore),
    Sweep(seq::Sweep),
}

#[derive(Debug)]
struct Job {
    work: Work,
    waiter: Waiter,
    target: Target,
    limits: SnapshotLimits,
}

impl Job {
    /// Nobody waits for it (the automatic sweep): it gives way to anyone who does.
    fn housekeeping(&self) -> bool {
        matches!(self.waiter, Waiter::Nobody)
    }
}

/// The checkpoints' side of the gateway: the sequences waiting and the one running.
pub struct Checkpoints {
    queue: VecDeque<Job>,
    current: Option<Job>,
    /// The command of the current sequence that runs now.
    run: Option<RunId>,
    /// What was said already, by session (`None`: on stderr).
    reported: HashSet<(Option<String>, String)>,
    /// The automatic sweep was considered in this process.
    swept: bool,
    /// Housekeeping runs and someone waits: at the end of its running command (stopped if
    /// it is a long one, a gc), awaited as nothing else may run on the store meanwhile, the
    /// sweep gives way and starts over behind them.
    yielding: bool,
    /// The running command is a long one (`slow` over 1: `git add`, a checkout, a gc).
    long: bool,
    /// A tree with more entries than this is not snapshotted (`--checkpoint-max-files`).
    pub max_files: usize,
    /// One git command's timeout (`HERMES_CHECKPOINT_TIMEOUT`, 10–60 s as Hermes clamps it).
    git_timeout: Duration,
}

impl Checkpoints {
    pub fn new(max_files: usize) -> Checkpoints {
        let secs = std::env::var("HERMES_CHECKPOINT_TIMEOUT")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(30)
            .clamp(10, 60);
        Checkpoints {
            queue: VecDeque::new(),
            current: None,
            run: None,
            reported: HashSet::new(),
            swept: false,
            yielding: false,
            long: false,
            max_files,
            git_timeout: Duration::from_secs(secs),
        }
    }

    /// Whether `run` is a command of a sequence.
    pub fn owns(&self, run: RunId) -> bool {
        self.run == Some(run)
    }
}

/// What the checkpoints work on: the runs (their commands are service runs), the home,
/// the sessions' turns and directories, and where a snapshot's end goes.
pub(crate) trait CheckpointOwners: RunOwners {
    fn checkpoints(&mut self) -> &mut Checkpoints;
    fn checkpoint_home(&self) -> PathBuf;
    /// Where `rid`'s relative paths start (its terminal's directory, else its cwd).
    fn session_dir(&self, rid: &str) -> Option<String>;
    /// Mark `dir` snapshotted in `rid`'s running turn: false when it was already.
    fn first_in_turn(&mut self, rid: &str, dir: &Path) -> bool;
}

/// Before a tool call starts: when it changes files and its directory has no checkpoint yet
/// in this turn, queue the snapshot and say `true` (the call waits for
/// [`Effect::SnapshotOver`]).
pub(crate) fn before_call(
    gw: &mut impl CheckpointOwners,
    rid: &str,
    tool: &str,
    args: &Value,
    now: Instant,
) -> bool {
    if !matches!(tool, "write_file" | "patch" | "terminal") {
        return false;
    }
    let Some(here) = gw.session_dir(rid) else {
        return false;
    };
    let resolve = |p: &str| crate::tools::files::resolve(&here, p);
    let Some(wanted) = trigger::wanted(tool, args, Path::new(&here), resolve) else {
        return false;
    };
    let home = gw.checkpoint_home();
    let settings = Settings::load(&home, gw.checkpoints().max_files);
    if !settings.enabled {
        return false;
    }
    let dir = layout::normalize(&wanted.dir);
    // Nothing to snapshot in a directory that does not exist (yet), nor in `/` or `~`.
    if trigger::too_broad(&dir) || !dir.is_dir() || !gw.first_in_turn(rid, &dir) {
        return false;
    }
    let target = Target::new(Store::of_home(&home), dir);
    let take = seq::Take::new(target.clone(), settings.limits, wanted.reason);
    let job = Job {
        work: Work::Take(take),
        waiter: Waiter::Call {
            rid: rid.to_string(),
        },
        target,
        limits: settings.limits,
    };
    enqueue(gw, job, now);
    pump(gw, now);
    // A snapshot over at once (git missing) has resumed nothing yet: the call starts now.
    let cp = gw.checkpoints();
    cp.current
        .iter()
        .chain(cp.queue.iter())
        .any(|j| matches!(&j.waiter, Waiter::Call { rid: r } if r == rid))
}

/// A `rollback.*` request: what it asks, of which checkpoint (`hash`: a commit, or its number
/// in the list), which file (none: the whole directory).
pub struct Rollback<'a> {
    pub ask: Ask,
    pub hash: Option<&'a str>,
    pub file: Option<&'a str>,
}

/// `rollback.list`, `rollback.diff`, `rollback.restore` for session `rid` working in `cwd`:
/// answered now (`Some`) or when the sequence ends.
pub(crate) fn request(
    gw: &mut impl CheckpointOwners,
    id: &Id,
    rid: &str,
    cwd: &str,
    asked: Rollback<'_>,
    now: Instant,
) -> Option<Result<Value, RpcError>> {
    let Rollback {
        ask,
        hash: target,
        file,
    } = asked;
    let home = gw.checkpoint_home();
    let settings = Settings::load(&home, gw.checkpoints().max_files);
    if ask == Ask::List && !settings.enabled {
        return Some(Ok(json!({"enabled": false, "checkpoints": []})));
    }
    let file = file.filter(|f| !f.is_empty()).map(str::to_string);
    if let Some(f) = &file
        && let Err(e) = layout::check_file(f)
    {
        return Some(Ok(json!({"success": false, "error": e})));
    }
    if !layout::git_on_path() {
        return Some(refused(ask, GIT_MISSING.to_string()));
    }
    let store = Store::of_home(&home);
    let dir = layout::normalize(Path::new(cwd));
    let t = Target::new(store.clone(), dir);
    if !store.head().exists() {
        return Some(match ask {
            Ask::List => Ok(json!({"enabled": true, "checkpoints": []})),
            _ => refused(ask, "No checkpoints exist for this directory".into()),
        });
    }
    let work = match (ask, target) {
        (Ask::List, _) => Work::List(seq::List::new(t.clone(), settings.limits.max_snapshots)),
        (_, Some(named)) => match named.trim().parse::<i64>() {
            Ok(number) => Work::Resolve {
                list: seq::List::new(t.clone(), settings.limits.max_snapshots),
                number,
                then: ask,
                file,
            },
            Err(_) => match layout::check_commit(named) {
                Err(e) => return Some(refused(ask, e)),
                Ok(()) => then_work(&t, settings.limits, ask, named.to_string(), file),
            },
        },
        (_, None) => {
            return Some(Err(RpcError::new(
                crate::rpc::frame::code::MISSING_ID,
                "hash required",
            )));
        }
    };
    let waiter = Waiter::Request {
        id: id.clone(),
        rid: rid.to_string(),
        ask,
    };
    let job = Job {
        work,
        waiter,
        target: t,
        limits: settings.limits,
    };
    enqueue(gw, job, now);
    pump(gw, now);
    None
}

/// Queue `job` for someone waiting: ahead of queued housekeeping, and the housekeeping that
/// runs now asked to give way (its gc stopped; a short command, which may be removing files,
/// is let finish).
fn enqueue(gw: &mut impl CheckpointOwners, job: Job, now: Instant) {
    let cp = gw.checkpoints();
    let at = cp
        .queue
        .iter()
        .position(Job::housekeeping)
        .unwrap_or(cp.queue.len());
    cp.queue.insert(at, job);
    let running = cp.current.as_ref().is_some_and(Job::housekeeping);
    if let (true, false, Some(run)) = (running, cp.yielding, cp.run) {
        cp.yielding = true;
        if cp.long {
            runs::stop(gw, run, now);
        }
    }
}

/// A `rollback.*` request that cannot be done, answered as Hermes answers it: an error for a
/// list or a diff, `{success: false, error}` for a restore.
fn refused(ask: Ask, why: String) -> Result<Value, RpcError> {
    match ask {
        Ask::List => Err(RpcError::new(LIST_FAILED, why)),
        Ask::Diff => Err(RpcError::new(DIFF_FAILED, why)),
        Ask::Restore => Ok(json!({"success": false, "error": why})),
    }
}

fn then_work(
    t: &Target,
    limits: SnapshotLimits,
    ask: Ask,
    commit: String,
    file: Option<String>,
) -> Work {
    match ask {
        Ask::Diff => Work::Diff(seq::Diff::new(t.clone(), limits, commit)),
        _ => Work::Restore(seq::Restore::new(t.clone(), limits, commit, file)),
    }
}

/// A command of a sequence ended: the sequence goes on.
pub(crate) fn on_run_event(gw: &mut impl CheckpointOwners, event: RunEvent, now: Instant) {
    let RunEvent::Ended { run, end } = event else {
        return;
    };
    if gw.checkpoints().run != Some(run) {
        return;
    }
    gw.checkpoints().run = None;
    if std::mem::take(&mut gw.checkpoints().yielding) {
        // Someone waits and the command is over: they go first, the sweep again after.
        if let Some(job) = gw.checkpoints().current.take() {
            let store = job.target.store.clone();
            if let Some(again) = sweep_job(gw, &store) {
                gw.checkpoints().queue.push_back(again);
            }
        }
        pump(gw, now);
        return;
    }
    let outcome = outcome_of(end);
    advance(gw, Some(outcome), now);
    pump(gw, now);
}

fn outcome_of(end: RunEnd) -> Outcome {
    let code = end.code();
    match (end.start_error, end.ending) {
        (Some(e), _) => Outcome {
            code: -1,
            stdout: String::new(),
            stderr: e,
        },
        (None, Some(_)) => Outcome {
            code,
            stdout: end.stdout,
            stderr: format!("git timed out after {}s", end.timeout.as_secs_f64().round()),
        },
        (None, None) => Outcome {
            code: end.status,
            stdout: end.stdout,
            stderr: end.stderr,
        },
    }
}

/// Run the current sequence until it waits for a command, taking the next when it ends.
fn pump(gw: &mut impl CheckpointOwners, now: Instant) {
    loop {
        let cp = gw.checkpoints();
        if cp.run.is_some() {
            return;
        }
        if cp.current.is_none() {
            let Some(job) = cp.queue.pop_front() else {
                return;
            };
            cp.current = Some(job);
            if !layout::git_on_path() {
                finish(gw, Err(GIT_MISSING.to_string()));
                continue;
            }
            advance(gw, None, now);
        }
    }
}

/// Feed the current sequence `last` and carry out its steps until it runs a command or ends.
fn advance(gw: &mut impl CheckpointOwners, mut last: Option<Outcome>, now: Instant) {
    loop {
        if last.as_ref().is_some_and(Outcome::git_missing) {
            return finish(gw, Err(GIT_MISSING.to_string()));
        }
        let Some(job) = gw.checkpoints().current.as_mut() else {
            return;
        };
        let step = match &mut job.work {
            Work::Take(take) => take.step(last.as_ref()).map(Ended::Take),
            Work::List(list) => list.step(last.as_ref()).map(Ended::List),
            Work::Resolve { list, .. } => list.step(last.as_ref()).map(Ended::Resolved),
            Work::Diff(diff) => diff.step(last.as_ref()).map(Ended::Diff),
            Work::Restore(restore) => restore.step(last.as_ref()).map(Ended::Restore),
            Work::Sweep(sweep) => sweep.step(last.as_ref()).map(Ended::Sweep),
        };
        match step {
            Step::Do(Cmd::Fs(op)) => {
                let target = job.target.clone();
                last = Some(fs_op(&op, &target, crate::util::unix_now()));
            }
            Step::Do(Cmd::Run { line, slow }) => {
                let cwd = job.target.work_tree.clone();
                let timeout = gw.checkpoints().git_timeout * slow;
                let line = layout::lowered(&line);
                let spec = Spec {
                    command: &line,
                    cwd: &cwd,
                    streams: Streams::Separate,
                    stdin: Stdin::Null,
                    timeout,
                    live: false,
                };
                match runs::start_service(gw, &spec, now) {
                    Ok(run) => {
                        let cp = gw.checkpoints();
                        cp.run = Some(run);
                        cp.long = slow > 1;
                        return;
                    }
                    Err(e) => {
                        last = Some(Outcome {
                            code: -1,
                            stdout: String::new(),
                            stderr: format!("could not start git: {e}"),
                        });
                    }
                }
            }
            Step::Done(Ended::Resolved(entries)) => {
                let Some(Job {
                    work:
                        Work::Resolve {
                            number, then, file, ..
                        },
                    ..
                }) = gw.checkpoints().current.as_ref()
                else {
                    return;
                };
                let (number, then, file) = (*number, *then, file.clone());
                let picked = usize::try_from(number - 1)
                    .ok()
                    .and_then(|i| entries.get(i));
                let Some(entry) = picked else {
                    let why = format!("Invalid checkpoint number. Use 1-{}.", entries.len());
                    return finish(gw, Err(why));
                };
                let Some(job) = gw.checkpoints().current.as_mut() else {
                    return;
                };
                job.work = then_work(&job.target, job.limits, then, entry.hash.clone(), file);
                last = None;
            }
            Step::Done(ended) => return finish(gw, Ok(ended)),
        }
    }
}

/// How a sequence ended, by kind.
enum Ended {
    Take(TakeEnd),
    List(Vec<seq::Entry>),
    Resolved(Vec<seq::Entry>),
    Diff(seq::DiffEnd),
    Restore(Value),
    Sweep(usize),
}

/// The current sequence is over (`Err`: it could not go on): tell whoever waits.
fn finish(gw: &mut impl CheckpointOwners, ended: Result<Ended, String>) {
    let Some(job) = gw.checkpoints().current.take() else {
        return;
    };
    match job.waiter {
        Waiter::Call { rid } => {
            let problem = match ended {
                Err(why) => Some(why),
                Ok(Ended::Take(TakeEnd::Skipped(why))) => {
                    Some(format!("checkpoint skipped: {why}"))
                }
                Ok(Ended::Take(TakeEnd::Failed(why))) => Some(format!("checkpoint failed: {why}")),
                Ok(_) => None,
            };
            if let Some(text) = problem {
                report(gw, Some(&rid), &text);
            }
            gw.effects().push(Effect::SnapshotOver { rid: rid.clone() });
            queue_sweep(gw, &job.target);
        }
        Waiter::Request { id, rid, ask } => match answer(ask, ended) {
            // The history follows the directory back; the loop answers once it has.
            Ok(result)
                if ask == Ask::Restore
                    && result["success"] == true
                    && result.get("file").is_none() =>
            {
                let reply_to = id;
                gw.effects().push(Effect::UndoExchange {
                    rid,
                    reply_to,
                    result,
                });
            }
            reply => gw.outbox().reply(&id, reply),
        },
        Waiter::Nobody => match ended {
            Err(why) => report(gw, None, &format!("checkpoint sweep: {why}")),
            Ok(Ended::Sweep(n)) if n > 0 => {
                crate::diag!(
                    "[checkpoints] sweep: {n} project(s) untouched past retention_days forgotten"
                );
            }
            Ok(_) => {}
        },
    }
}

/// The answer to a `rollback.*` request.
fn answer(ask: Ask, ended: Result<Ended, String>) -> Result<Value, RpcError> {
    match (ask, ended) {
        (Ask::List, Ok(Ended::List(entries))) => Ok(json!({
            "enabled": true,
            "checkpoints": entries.iter().map(seq::Entry::to_json).collect::<Vec<_>>(),
        })),
        (Ask::Diff, Ok(Ended::Diff(Ok((stat, diff))))) => {
            let mut cut = diff.len().min(DIFF_SHOWN);
            while !diff.is_char_boundary(cut) {
                cut -= 1;
            }
            Ok(json!({"stat": stat, "diff": &diff[..cut]}))
        }
        (_, Ok(Ended::Diff(Err(why))) | Err(why)) => refused(ask, why),
        (Ask::Restore, Ok(Ended::Restore(result))) => Ok(result),
        _ => Err(RpcError::new(
            RESTORE_FAILED,
            "checkpoint sequence lost its way",
        )),
    }
}

/// Say `text` once: to the session (`status.update` kind `warn`) and on stderr.
fn report(gw: &mut impl CheckpointOwners, rid: Option<&str>, text: &str) {
    let key = (rid.map(str::to_string), text.to_string());
    if !gw.checkpoints().reported.insert(key) {
        return;
    }
    if gw.checkpoints().reported.insert((None, text.to_string())) {
        crate::diag!("[checkpoints] {text}");
    }
    if let Some(rid) = rid {
        gw.emit(rid, "status.update", json!({"kind": "warn", "text": text}));
    }
}

/// After the first snapshot of this process: Hermes' automatic sweep, when config.yaml
/// allows it and it has not run for `min_interval_hours` (behind everything queued).
fn queue_sweep(gw: &mut impl CheckpointOwners, snapped: &Target) {
    if std::mem::replace(&mut gw.checkpoints().swept, true) {
        return;
    }
    if let Some(job) = sweep_job(gw, &snapped.store) {
        gw.checkpoints().queue.push_back(job);
    }
}

/// The automatic sweep of `store`, when it is due.
fn sweep_job(gw: &mut impl CheckpointOwners, store: &Store) -> Option<Job> {
    let home = gw.checkpoint_home();
    let settings = Settings::load(&home, gw.checkpoints().max_files);
    let marker = crate::util::read_regular(&store.base.join(layout::PRUNE_MARKER), 64)
        .ok()
        .flatten();
    let now = crate::util::unix_now();
    let due = prune::sweep_due(marker.as_deref(), now, settings.min_interval_hours);
    if !settings.auto_prune || !due || !store.head().exists() {
        return None;
    }
    let target = Target {
        store: store.clone(),
        work_tree: store.base.clone(),
        hash: String::new(),
    };
    let sweep = seq::Sweep::new(
        target.clone(),
        settings.retention_days,
        settings.limits.max_total_bytes,
        now,
    );
    Some(Job {
        work: Work::Sweep(sweep),
        waiter: Waiter::Nobody,
        target,
        limits: settings.limits,
    })
}

/// The shutdown: the running command is stopped, requests are told, nothing more starts
/// (a waiting call is answered by its turn's interrupt).
pub(crate) fn shut_down(gw: &mut impl CheckpointOwners, now: Instant) {
    if let Some(run) = gw.checkpoints().run {
        runs::stop(gw, run, now);
    }
    let cp = gw.checkpoints();
    let mut jobs: Vec<Job> = cp.queue.drain(..).collect();
    jobs.extend(cp.current.take());
    cp.run = None;
    cp.yielding = false;
    for job in jobs {
        if let Waiter::Request { id, .. } = job.waiter {
            let e = RpcError::new(code::SHUTTING_DOWN, "gateway is shutting down");
            gw.outbox().reply(&id, Err(e));
        }
    }
}

/// A step on the store's own files (small: a directory, a few bytes of JSON).
pub(crate) fn fs_op(op: &FsOp, t: &Target, now: f64) -> Outcome {
    let yes_no = |b: bool| Outcome {
        code: i32::from(!b),
        ..Outcome::default()
    };
    let done = |r: std::io::Result<()>| match r {
        Ok(()) => Outcome::default(),
        Err(e) => Outcome {
            code: 1,
            stdout: String::new(),
            stderr: e.to_string(),
        },
    };
    let store = &t.store;
    match op {
        FsOp::StoreExists => yes_no(store.head().is_file()),
        FsOp::IndexExists => yes_no(store.index(&t.hash).is_file()),
        FsOp::MakeDirs => {
            if !store.dir.exists() {
                archive_legacy(store, now);
            }
            done(
                std::fs::create_dir_all(store.dir.join("indexes"))
                    .and_then(|()| std::fs::create_dir_all(store.projects())),
            )
        }
        FsOp::WriteExclude => {
            let mut text = layout::DEFAULT_EXCLUDES.join("\n");
            text.push('\n');
            let info = store.dir.join("info");
            done(std::fs::create_dir_all(&info).and_then(|()| {
                crate::tools::files::write_atomic(&store.exclude(), text.as_bytes())
            }))
        }
        FsOp::Touch => done(touch(store, t, now)),
        FsOp::RemoveIndex => done(remove_if_there(&store.index(&t.hash))),
        FsOp::RepairDirs => done(
            std::fs::create_dir_all(store.dir.join("refs").join("heads"))
                .and_then(|()| std::fs::create_dir_all(store.dir.join("branches"))),
        ),
        FsOp::ReadProjects => Outcome {
            stdout: read_projects(store),
            ..Outcome::default()
        },
        FsOp::Forget(hash) => done(
            remove_if_there(&store.index(hash)).and_then(|()| remove_if_there(&store.meta(hash))),
        ),
        FsOp::MarkSwept => done(crate::tools::files::write_atomic(
            &store.base.join(layout::PRUNE_MARKER),
            now.to_string().as_bytes(),
        )),
    }
}

/// Before the shared store is first made: whatever else is in the checkpoints' folder (Hermes'
/// pre-v2 per-project stores) moved into `legacy-<YYYYmmdd-HHMMSS>/`, as Hermes' migration does;
/// an entry that cannot be moved stays (Hermes logs it and goes on). Renames in one folder.
fn archive_legacy(store: &Store, now: f64) {
    let Ok(entries) = std::fs::read_dir(&store.base) else {
        return;
    };
    let mut archive: Option<std::path::PathBuf> = None;
    // Hermes' pre-v2 stores are one per project: a few entries, never a big listing.
    for entry in entries.flatten().take(10_000) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let reserved = name == "store" || name == layout::PRUNE_MARKER;
        if reserved || name.starts_with(layout::LEGACY_PREFIX) {
            continue;
        }
        let dir = match &archive {
            Some(d) => d.clone(),
            None => {
                let (y, mo, d, h, mi, s) = crate::util::utc_parts(now);
                let stamp = format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}");
                let d = store.base.join(format!("{}{stamp}", layout::LEGACY_PREFIX));
                if std::fs::create_dir_all(&d).is_err() {
                    return;
                }
                archive = Some(d.clone());
                d
            }
        };
        let _ = std::fs::rename(entry.path(), dir.join(&name));
    }
}

fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Metadata files read at most this large.
const META_MAX: u64 = 64 * 1024;

/// `projects/<hash>.json` with `last_touch` now (`created_at` kept), as Hermes writes it.
fn touch(store: &Store, t: &Target, now: f64) -> std::io::Result<()> {
    let path = store.meta(&t.hash);
    let old: Value = crate::util::read_regular(&path, META_MAX)
        .ok()
        .flatten()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    let created = old.get("created_at").cloned().unwrap_or(json!(now));
    let meta = json!({
        "workdir": t.work_tree.display().to_string(),
        "created_at": created,
        "last_touch": now,
    });
    std::fs::create_dir_all(store.projects())?;
    crate::tools::files::write_atomic(&path, meta.to_string().as_bytes())
}

/// Every project's `hash\tlast_touch\tworkdir` (unreadable ones left out, as Hermes does).
fn read_projects(store: &Store) -> String {
    let Ok(dir) = std::fs::read_dir(store.projects()) else {
        return String::new();
    };
    let mut out = String::new();
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(hash) = name.strip_suffix(".json") else {
            continue;
        };
        let meta: Option<Value> = crate::util::read_regular(&entry.path(), META_MAX)
            .ok()
            .flatten()
            .and_then(|text| serde_json::from_str(&text).ok());
        let Some(meta) = meta.filter(Value::is_object) else {
            continue;
        };
        let touched = meta["last_touch"].as_f64().unwrap_or(0.0);
        let workdir = meta["workdir"]
            .as_str()
            .unwrap_or("")
            .replace(['\t', '\n'], " ");
        out.push_str(&format!("{hash}\t{touched}\t{workdir}\n"));
    }
    out
}
