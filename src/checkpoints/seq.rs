//! The git command sequences of the checkpoints as small state machines: each is fed the
//! outcome of the command it asked for and answers with the next command (or a step on the
//! store's files, which the driver does) or its end. Nothing here runs anything, so every
//! path is testable by feeding outcomes. The sequences follow Hermes' `checkpoint_manager.py`
//! command for command where the result is stored (the commits, refs, index and metadata a
//! Hermes process reads back).

use std::path::PathBuf;

use serde_json::{Value, json};

use super::layout::{self, Store};
use super::prune::{self, CHAIN_FORMAT, Commit};

/// How a command ended: its exit status (127: not found; -1: it could not start) and output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.code == 0
    }
    fn out(&self) -> &str {
        self.stdout.trim()
    }
    /// What went wrong, in one line.
    fn why(&self) -> String {
        let text = self.stderr.trim();
        let text = if text.is_empty() {
            self.stdout.trim()
        } else {
            text
        };
        match text.lines().rev().find(|l| !l.trim().is_empty()) {
            Some(l) => l.trim().to_string(),
            None => format!("exit status {}", self.code),
        }
    }
    /// git itself was not found.
    pub fn git_missing(&self) -> bool {
        self.code == 127 && self.stderr.contains("git")
    }
}

/// What a sequence asks for next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// `bash -c line` in the work tree, stopped after `slow` times the git timeout.
    Run { line: String, slow: u32 },
    /// A step on the store's own files, done by the driver (`code` 0 when it worked; the
    /// probes answer 0 for yes, 1 for no).
    Fs(FsOp),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsOp {
    /// Does the store exist (`HEAD`)?
    StoreExists,
    /// Does the project's index exist?
    IndexExists,
    /// `store/`, `indexes/`, `projects/` made (before `git init`).
    MakeDirs,
    /// `info/exclude` written with the default excludes.
    WriteExclude,
    /// `projects/<hash>.json`: `last_touch` now, `created_at` kept, `workdir` the work tree.
    Touch,
    /// The project's index removed (its ref is gone).
    RemoveIndex,
    /// `refs/heads/` and `branches/` put back (a gc of a store of packed refs removes them,
    /// and git then no longer takes the directory for a repository).
    RepairDirs,
    /// The projects' metadata, one `hash\tlast_touch\tworkdir` line each.
    ReadProjects,
    /// A project's index and metadata removed.
    Forget(String),
    /// `checkpoints/.last_prune` written with the time now.
    MarkSwept,
}

/// A step of a sequence.
#[derive(Debug, PartialEq)]
pub enum Step<T> {
    Do(Cmd),
    Done(T),
}

impl<T> Step<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Step<U> {
        match self {
            Step::Do(cmd) => Step::Do(cmd),
            Step::Done(t) => Step::Done(f(t)),
        }
    }
}

/// The limits of a snapshot (config.yaml's `checkpoints:` section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotLimits {
    pub max_snapshots: usize,
    /// A file larger than this is left out of a snapshot (0: none is).
    pub max_file_bytes: u64,
    /// Past this the oldest snapshots go, a project at a time (0: no cap).
    pub max_total_bytes: u64,
    /// A tree with more entries than this is not snapshotted.
    pub max_files: usize,
}

/// What a sequence works on: the store, the directory it snapshots or restores (the work
/// tree), that directory's project hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub store: Store,
    pub work_tree: PathBuf,
    pub hash: String,
}

impl Target {
    pub fn new(store: Store, work_tree: PathBuf) -> Target {
        let hash = layout::project_hash(&work_tree);
        Target {
            store,
            work_tree,
            hash,
        }
    }

    fn ref_name(&self) -> String {
        layout::ref_name(&self.hash)
    }

    fn git(&self, args: &[&str]) -> Cmd {
        self.git_with(args, false, &[], 1)
    }

    fn git_indexed(&self, args: &[&str], slow: u32) -> Cmd {
        self.git_with(args, true, &[], slow)
    }

    /// Files over `bytes` out of the project's index (after `git add -A`).
    fn drop_oversize(&self, bytes: u64) -> Cmd {
        let index = self.store.index(&self.hash);
        let line = layout::drop_oversize_line(&self.store, &self.work_tree, &index, bytes);
        Cmd::Run { line, slow: 1 }
    }

    /// The project's last checkpoint (empty output when it has none).
    fn tip(&self) -> Cmd {
        let verify = format!("{}^{{commit}}", self.ref_name());
        self.git(&["rev-parse", "--verify", "--quiet", &verify])
    }

    fn git_with(&self, args: &[&str], index: bool, vars: &[(String, String)], slow: u32) -> Cmd {
        let index = index.then(|| self.store.index(&self.hash));
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Cmd::Run {
            line: layout::git_line(&self.store, &self.work_tree, index.as_deref(), vars, &args),
            slow,
        }
    }
}

// ---- rewriting a chain (pruning) ----

/// A project's chain rebuilt from `keep` (oldest first), the ref moved to the new tip only if
/// it still points where it did (a snapshot taken meanwhile is not lost).
#[derive(Debug)]
struct Rewrite {
    ref_name: String,
    old_tip: String,
    keep: Vec<Commit>,
    next: usize,
    parent: Option<String>,
    updating: bool,
}

impl Rewrite {
    fn new(ref_name: String, old_tip: String, keep: &[Commit]) -> Rewrite {
        Rewrite {
            ref_name,
            old_tip,
            keep: keep.to_vec(),
            next: 0,
            parent: None,
            updating: false,
        }
    }

    /// The next command, or `None` when the rewrite is over (or gave up, as Hermes does).
    fn step(&mut self, t: &Target, last: Option<&Outcome>) -> Option<Cmd> {
        if self.updating {
            return None;
        }
        if let Some(last) = last {
            if !last.ok() || last.out().is_empty() {
                return None;
            }
            self.parent = Some(last.out().to_string());
        }
        let Some(c) = self.keep.get(self.next) else {
            self.updating = true;
            let tip = self.parent.clone()?;
            return Some(t.git(&["update-ref", &self.ref_name, &tip, &self.old_tip]));
        };
        self.next += 1;
        let mut args = vec!["commit-tree", c.tree.as_str()];
        if let Some(p) = &self.parent {
            args.extend(["-p", p.as_str()]);
        }
        let subject = if c.subject.is_empty() {
            "checkpoint"
        } else {
            &c.subject
        };
        args.extend(["-m", subject, "--no-gpg-sign"]);
        let dates = [
            ("GIT_AUTHOR_DATE".to_string(), c.author_date.clone()),
            ("GIT_COMMITTER_DATE".to_string(), c.commit_date.clone()),
        ];
        Some(t.git_with(&args, false, &dates, 1))
    }
}

/// `reflog expire` and `gc --prune=now`, then the directories a gc may remove put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gc {
    Expire,
    Collect,
    Repair,
    Over,
}

impl Gc {
    fn step(&mut self, t: &Target) -> Option<Cmd> {
        let (cmd, next) = match self {
            Gc::Expire => (
                t.git(&["reflog", "expire", "--expire=now", "--all"]),
                Gc::Collect,
            ),
            Gc::Collect => (
                t.git_with(&["gc", "--prune=now", "--quiet"], false, &[], 3),
                Gc::Repair,
            ),
            Gc::Repair => (Cmd::Fs(FsOp::RepairDirs), Gc::Over),
            Gc::Over => return None,
        };
        *self = next;
        Some(cmd)
    }
}

/// The size cap: while the store is over `cap` bytes, each project's oldest snapshot goes
/// (a project keeps its last), then a gc; at most [`prune::CAP_ROUNDS`] rounds.
#[derive(Debug)]
struct Cap {
    cap: u64,
    round: usize,
    state: CapState,
    refs: Vec<String>,
    next_ref: usize,
    dropped: bool,
}

#[derive(Debug)]
enum CapState {
    Measure,
    Measured,
    Listed,
    Chain(String),
    Rewriting(Rewrite),
    Collecting(Gc),
    Over,
}

/// Commits of a chain read at most (the chains are `max_snapshots` long).
const CHAIN_READ: usize = 1000;

impl Cap {
    fn new(cap: u64) -> Cap {
        Cap {
            cap,
            round: 0,
            state: CapState::Measure,
            refs: Vec::new(),
            next_ref: 0,
            dropped: false,
        }
    }

    fn step(&mut self, t: &Target, last: Option<&Outcome>) -> Option<Cmd> {
        loop {
            match &mut self.state {
                CapState::Measure => {
                    if self.cap == 0 || self.round >= prune::CAP_ROUNDS {
                        self.state = CapState::Over;
                        continue;
                    }
                    self.state = CapState::Measured;
                    return Some(Cmd::Run {
                        line: layout::size_line(&t.store),
                        slow: 1,
                    });
                }
                CapState::Measured => {
                    let size: u64 = last.map_or(0, |o| o.out().parse().unwrap_or(0));
                    if size <= self.cap {
                        self.state = CapState::Over;
                        continue;
                    }
                    self.state = CapState::Listed;
                    let prefix = layout::REFS_PREFIX;
                    return Some(t.git(&["for-each-ref", "--format=%(refname)", prefix]));
                }
                CapState::Listed => {
                    self.refs = last
                        .filter(|o| o.ok())
                        .map(|o| o.out().lines().map(str::to_string).collect())
                        .unwrap_or_default();
                    self.next_ref = 0;
                    self.dropped = false;
                    return self.next_chain(t);
                }
                CapState::Chain(ref_name) => {
                    let ref_name = ref_name.clone();
                    let chain = last
                        .filter(|o| o.ok())
                        .map(|o| prune::parse_chain(&o.stdout))
                        .unwrap_or_default();
                    match (prune::drop_oldest(&chain), chain.last()) {
                        (Some(keep), Some(tip)) => {
                            let mut rw = Rewrite::new(ref_name, tip.sha.clone(), keep);
                            let cmd = rw.step(t, None);
                            self.state = CapState::Rewriting(rw);
                            self.dropped = true;
                            if cmd.is_some() {
                                return cmd;
                            }
                        }
                        _ => return self.next_chain(t),
                    }
                }
                CapState::Rewriting(rw) => match rw.step(t, last) {
                    Some(cmd) => return Some(cmd),
                    None => return self.next_chain(t),
                },
                CapState::Collecting(gc) => match gc.step(t) {
                    Some(cmd) => return Some(cmd),
                    None => {
                        self.round += 1;
                        self.state = CapState::Measure;
                    }
                },
                CapState::Over => return None,
            }
        }
    }

    /// The next project's chain, or the gc ending the round.
    fn next_chain(&mut self, t: &Target) -> Option<Cmd> {
        if let Some(r) = self.refs.get(self.next_ref).cloned() {
            self.next_ref += 1;
            let n = format!("-n{CHAIN_READ}");
            let cmd = t.git(&["log", "--reverse", &n, CHAIN_FORMAT, &r]);
            self.state = CapState::Chain(r);
            return Some(cmd);
        }
        if !self.dropped {
            self.state = CapState::Over;
            return None;
        }
        let mut gc = Gc::Expire;
        let cmd = gc.step(t);
        self.state = CapState::Collecting(gc);
        cmd
    }
}

// ---- a snapshot ----

/// How a snapshot went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeEnd {
    /// A new checkpoint: its commit.
    Taken(String),
    /// Nothing changed since the last one (or the tree is empty): none taken.
    Unchanged,
    /// Not taken, and why (a tree past the cap): reported once, the call goes on.
    Skipped(String),
    /// A command failed: reported once, the call goes on.
    Failed(String),
}

#[derive(Debug)]
enum TakeAt {
    Begin,
    StoreKnown,
    DirsMade,
    Inited,
    Configured(usize),
    Excluded,
    Touched,
    Counted,
    IndexKnown,
    SeedRef,
    Seeded,
    Added,
    Dropped,
    ParentKnown,
    Compared,
    Tree,
    Committed,
    Updated,
    Chain,
    Trimming(Rewrite),
    TrimGc(Gc),
    Capping(Cap),
}

/// Hermes' `_take`: the store made if need be, the project touched, the tree counted, then
/// `git add -A` into the project's index (seeded from its last checkpoint), files over the
/// size limit left out, and — when anything changed — a commit on the project's ref; then the
/// chain cut to `max_snapshots` and the store to its size cap.
#[derive(Debug)]
pub struct Take {
    t: Target,
    limits: SnapshotLimits,
    reason: String,
    at: TakeAt,
    parent: Option<String>,
    taken: Option<String>,
}

/// `git config` of a new store, as Hermes sets it.
const STORE_CONFIG: [[&str; 2]; 5] = [
    ["user.email", "hermes@local"],
    ["user.name", "Hermes Checkpoint"],
    ["commit.gpgsign", "false"],
    ["tag.gpgSign", "false"],
    ["gc.auto", "0"],
];

impl Take {
    pub fn new(t: Target, limits: SnapshotLimits, reason: String) -> Take {
        Take {
            t,
            limits,
            reason,
            at: TakeAt::Begin,
            parent: None,
            taken: None,
        }
    }

    pub fn step(&mut self, last: Option<&Outcome>) -> Step<TakeEnd> {
        let fail = |what: &str, o: Option<&Outcome>| {
            let why = o.map(Outcome::why).unwrap_or_default();
            Step::Done(TakeEnd::Failed(format!("{what}: {why}")))
        };
        let t = &self.t;
        loop {
            let (next, cmd) = match &mut self.at {
                TakeAt::Begin => (TakeAt::StoreKnown, Cmd::Fs(FsOp::StoreExists)),
                TakeAt::StoreKnown if last.is_some_and(Outcome::ok) => {
                    (TakeAt::Touched, Cmd::Fs(FsOp::Touch))
                }
                TakeAt::StoreKnown => (TakeAt::DirsMade, Cmd::Fs(FsOp::MakeDirs)),
                TakeAt::DirsMade if !last.is_some_and(Outcome::ok) => {
                    return fail("could not create the checkpoint store", last);
                }
                TakeAt::DirsMade => (
                    TakeAt::Inited,
                    Cmd::Run {
                        line: layout::init_line(&t.store),
                        slow: 1,
                    },
                ),
                TakeAt::Inited if !last.is_some_and(Outcome::ok) => {
                    return fail("shadow store init failed", last);
                }
                TakeAt::Inited => {
                    self.at = TakeAt::Configured(0);
                    continue;
                }
                TakeAt::Configured(i) => match STORE_CONFIG.get(*i) {
                    Some([key, value]) => {
                        let cmd = t.git(&["config", key, value]);
                        *i += 1;
                        return Step::Do(cmd);
                    }
                    None => (TakeAt::Excluded, Cmd::Fs(FsOp::WriteExclude)),
                },
                TakeAt::Excluded => (TakeAt::Touched, Cmd::Fs(FsOp::Touch)),
                TakeAt::Touched => (
                    TakeAt::Counted,
                    Cmd::Run {
                        line: layout::count_line(self.limits.max_files),
                        slow: 1,
                    },
                ),
                TakeAt::Counted => {
                    let counted: usize = last.map_or(0, |o| o.out().parse().unwrap_or(0));
                    if counted > self.limits.max_files {
                        return Step::Done(TakeEnd::Skipped(format!(
                            "more than {} files in {}",
                            self.limits.max_files,
                            t.work_tree.display()
                        )));
                    }
                    (TakeAt::IndexKnown, Cmd::Fs(FsOp::IndexExists))
                }
                TakeAt::IndexKnown if last.is_some_and(Outcome::ok) => (TakeAt::SeedRef, t.tip()),
                TakeAt::IndexKnown => (TakeAt::Added, t.git_indexed(&["add", "-A"], 2)),
                TakeAt::SeedRef => match last.filter(|o| o.ok() && !o.out().is_empty()) {
                    Some(o) => {
                        let sha = o.out().to_string();
                        (TakeAt::Seeded, t.git_indexed(&["read-tree", &sha], 1))
                    }
                    None => (TakeAt::Seeded, Cmd::Fs(FsOp::RemoveIndex)),
                },
                TakeAt::Seeded => (TakeAt::Added, t.git_indexed(&["add", "-A"], 2)),
                TakeAt::Added if !last.is_some_and(Outcome::ok) => {
                    return fail("git add failed", last);
                }
                TakeAt::Added if self.limits.max_file_bytes > 0 => {
                    (TakeAt::Dropped, t.drop_oversize(self.limits.max_file_bytes))
                }
                TakeAt::Added | TakeAt::Dropped => (TakeAt::ParentKnown, t.tip()),
                TakeAt::ParentKnown => {
                    self.parent = last
                        .filter(|o| o.ok() && !o.out().is_empty())
                        .map(|o| o.out().to_string());
                    match &self.parent {
                        Some(p) => {
                            let p = p.clone();
                            let args = ["diff-index", "--cached", "--quiet", p.as_str()];
                            (TakeAt::Compared, t.git_indexed(&args, 1))
                        }
                        None => {
                            let line = format!(
                                "{} | head -n 1",
                                cmd_line(t.git_indexed(&["ls-files", "--cached"], 1))
                            );
                            (TakeAt::Compared, Cmd::Run { line, slow: 1 })
                        }
                    }
                }
                TakeAt::Compared => {
                    let unchanged = match (&self.parent, last) {
                        (Some(_), Some(o)) => o.ok(),
                        (None, Some(o)) => o.ok() && o.out().is_empty(),
                        _ => false,
                    };
                    if unchanged {
                        return Step::Done(TakeEnd::Unchanged);
                    }
                    (TakeAt::Tree, t.git_indexed(&["write-tree"], 1))
                }
                TakeAt::Tree => {
                    let Some(tree) = last.filter(|o| o.ok() && !o.out().is_empty()) else {
                        return fail("git write-tree failed", last);
                    };
                    let tree = tree.out().to_string();
                    let mut args = vec!["commit-tree", tree.as_str()];
                    if let Some(p) = &self.parent {
                        args.extend(["-p", p.as_str()]);
                    }
                    args.extend(["-m", self.reason.as_str(), "--no-gpg-sign"]);
                    (TakeAt::Committed, t.git(&args))
                }
                TakeAt::Committed => {
                    let Some(sha) = last.filter(|o| o.ok() && !o.out().is_empty()) else {
                        return fail("git commit-tree failed", last);
                    };
                    let sha = sha.out().to_string();
                    let r = t.ref_name();
                    let mut args = vec!["update-ref", r.as_str(), sha.as_str()];
                    if let Some(p) = &self.parent {
                        args.push(p.as_str());
                    }
                    let cmd = t.git(&args);
                    self.taken = Some(sha);
                    (TakeAt::Updated, cmd)
                }
                TakeAt::Updated => {
                    if !last.is_some_and(Outcome::ok) {
                        return fail("git update-ref failed", last);
                    }
                    let n = format!("-n{}", self.limits.max_snapshots.max(1) + 1);
                    let r = t.ref_name();
                    (
                        TakeAt::Chain,
                        t.git(&["log", "--reverse", &n, CHAIN_FORMAT, &r]),
                    )
                }
                TakeAt::Chain => {
                    let chain = last
                        .filter(|o| o.ok())
                        .map(|o| prune::parse_chain(&o.stdout))
                        .unwrap_or_default();
                    let keep = prune::keep_newest(&chain, self.limits.max_snapshots);
                    match (keep, chain.last()) {
                        (Some(keep), Some(tip)) => {
                            let mut rw = Rewrite::new(t.ref_name(), tip.sha.clone(), keep);
                            let cmd = rw.step(t, None);
                            self.at = TakeAt::Trimming(rw);
                            match cmd {
                                Some(cmd) => return Step::Do(cmd),
                                None => continue,
                            }
                        }
                        _ => {
                            self.at = TakeAt::Capping(Cap::new(self.limits.max_total_bytes));
                            continue;
                        }
                    }
                }
                TakeAt::Trimming(rw) => match rw.step(t, last) {
                    Some(cmd) => return Step::Do(cmd),
                    None => {
                        let mut gc = Gc::Expire;
                        let cmd = gc.step(t);
                        self.at = TakeAt::TrimGc(gc);
                        match cmd {
                            Some(cmd) => return Step::Do(cmd),
                            None => continue,
                        }
                    }
                },
                TakeAt::TrimGc(gc) => match gc.step(t) {
                    Some(cmd) => return Step::Do(cmd),
                    None => {
                        self.at = TakeAt::Capping(Cap::new(self.limits.max_total_bytes));
                        continue;
                    }
                },
                TakeAt::Capping(cap) => match cap.step(t, last) {
                    Some(cmd) => return Step::Do(cmd),
                    None => {
                        let sha = self.taken.clone().unwrap_or_default();
                        return Step::Done(TakeEnd::Taken(sha));
                    }
                },
            };
            self.at = next;
            return Step::Do(cmd);
        }
    }
}

/// The shell line of a command (to pipe it on).
fn cmd_line(cmd: Cmd) -> String {
    match cmd {
        Cmd::Run { line, .. } => line,
        Cmd::Fs(_) => String::new(),
    }
}

// ---- listing ----

/// A checkpoint as `rollback.list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub hash: String,
    pub short_hash: String,
    pub timestamp: String,
    pub reason: String,
    pub files_changed: u64,
    pub insertions: u64,
    pub deletions: u64,
}

impl Entry {
    pub fn to_json(&self) -> Value {
        json!({
            "hash": self.hash, "short_hash": self.short_hash, "timestamp": self.timestamp,
            "message": self.reason, "reason": self.reason, "files_changed": self.files_changed,
            "insertions": self.insertions, "deletions": self.deletions,
        })
    }
}

/// The newest `max` checkpoints of a directory, newest first, each with what it changed
/// from the one before (one `git log --shortstat`; none for the first of a chain, as Hermes
/// counts it).
#[derive(Debug)]
pub struct List {
    t: Target,
    max: usize,
    asked: bool,
}

const ENTRY_MARK: char = '\x1e';

impl List {
    pub fn new(t: Target, max: usize) -> List {
        List {
            t,
            max,
            asked: false,
        }
    }

    pub fn step(&mut self, last: Option<&Outcome>) -> Step<Vec<Entry>> {
        if !self.asked {
            self.asked = true;
            let n = format!("-n{}", self.max.max(1));
            let r = self.t.ref_name();
            let format = format!("--format={ENTRY_MARK}%H|%h|%aI|%P|%s");
            // No stat for a chain's first commit (`log.showRoot` off): Hermes counts none, and
            // against the empty tree it is every file of the directory (seconds for 100,000).
            let args = [
                "-c",
                "log.showRoot=false",
                "log",
                &r,
                &format,
                "--shortstat",
                &n,
            ];
            return Step::Do(self.t.git(&args));
        }
        let out = last.filter(|o| o.ok()).map_or("", |o| o.stdout.as_str());
        Step::Done(parse_entries(out))
    }
}

fn parse_entries(out: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    for block in out.split(ENTRY_MARK).skip(1) {
        let mut lines = block.lines();
        let Some(head) = lines.next() else { continue };
        let f: Vec<&str> = head.splitn(5, '|').collect();
        let [hash, short, timestamp, parents, reason] = f[..] else {
            continue;
        };
        let stat = lines.find(|l| !l.trim().is_empty()).unwrap_or("");
        let (files, ins, del) = match parents.trim() {
            "" => (0, 0, 0),
            _ => prune::shortstat(stat),
        };
        entries.push(Entry {
            hash: hash.to_string(),
            short_hash: short.to_string(),
            timestamp: timestamp.to_string(),
            reason: reason.to_string(),
            files_changed: files,
            insertions: ins,
            deletions: del,
        });
    }
    entries
}

// ---- diff and restore ----

/// `rollback.diff`: the checkpoint against the directory as it is now (staged into the
/// project's index as a snapshot would stage it, then put back to the project's last
/// checkpoint).
#[derive(Debug)]
pub struct Diff {
    t: Target,
    limits: SnapshotLimits,
    commit: String,
    at: DiffAt,
    stat: String,
    diff: String,
}

#[derive(Debug, Clone, Copy)]
enum DiffAt {
    Begin,
    Found,
    Added,
    Dropped,
    Stat,
    Diffed,
    Reset,
}

/// How `rollback.diff` went: `(stat, diff)` or why not.
pub type DiffEnd = Result<(String, String), String>;

impl Diff {
    pub fn new(t: Target, limits: SnapshotLimits, commit: String) -> Diff {
        Diff {
            t,
            limits,
            commit,
            at: DiffAt::Begin,
            stat: String::new(),
            diff: String::new(),
        }
    }

    pub fn step(&mut self, last: Option<&Outcome>) -> Step<DiffEnd> {
        let (t, c) = (&self.t, self.commit.as_str());
        let (next, cmd) = match self.at {
            DiffAt::Begin => (DiffAt::Found, t.git(&["cat-file", "-t", c])),
            DiffAt::Found if !last.is_some_and(Outcome::ok) => {
                return Step::Done(Err(format!("Checkpoint '{c}' not found")));
            }
            DiffAt::Found => (DiffAt::Added, t.git_indexed(&["add", "-A"], 2)),
            DiffAt::Added if self.limits.max_file_bytes > 0 => {
                (DiffAt::Dropped, t.drop_oversize(self.limits.max_file_bytes))
            }
            DiffAt::Added | DiffAt::Dropped => (
                DiffAt::Stat,
                t.git_indexed(&["diff", "--stat", c, "--cached"], 1),
            ),
            DiffAt::Stat => {
                self.stat = last
                    .filter(|o| o.ok())
                    .map(|o| o.out().to_string())
                    .unwrap_or_default();
                (
                    DiffAt::Diffed,
                    t.git_indexed(&["diff", c, "--cached", "--no-color"], 1),
                )
            }
            DiffAt::Diffed => {
                self.diff = last
                    .filter(|o| o.ok())
                    .map(|o| o.stdout.clone())
                    .unwrap_or_default();
                (
                    DiffAt::Reset,
                    t.git_indexed(&["read-tree", &t.ref_name()], 1),
                )
            }
            DiffAt::Reset => {
                return Step::Done(Ok((
                    std::mem::take(&mut self.stat),
                    std::mem::take(&mut self.diff),
                )));
            }
        };
        self.at = next;
        Step::Do(cmd)
    }
}

/// `rollback.restore`: the directory (or one file of it) back to a checkpoint, after a
/// snapshot of it as it is (so the restore can be undone).
#[derive(Debug)]
pub struct Restore {
    t: Target,
    limits: SnapshotLimits,
    commit: String,
    file: Option<String>,
    at: RestoreAt,
}

#[derive(Debug)]
enum RestoreAt {
    Begin,
    Found,
    Snapshot(Box<Take>),
    CheckedOut,
    Reason,
}

impl Restore {
    pub fn new(t: Target, limits: SnapshotLimits, commit: String, file: Option<String>) -> Restore {
        Restore {
            t,
            limits,
            commit,
            file,
            at: RestoreAt::Begin,
        }
    }

    /// The result Hermes answers: `{success, restored_to, reason, directory, file?}` or
    /// `{success: false, error}`.
    pub fn step(&mut self, last: Option<&Outcome>) -> Step<Value> {
        let failed = |error: String| Step::Done(json!({"success": false, "error": error}));
        let short: String = self.commit.chars().take(8).collect();
        match &mut self.at {
            RestoreAt::Begin => {
                self.at = RestoreAt::Found;
                Step::Do(self.t.git(&["cat-file", "-t", &self.commit]))
            }
            RestoreAt::Found => {
                if !last.is_some_and(Outcome::ok) {
                    return failed(format!("Checkpoint '{}' not found", self.commit));
                }
                let reason = format!("pre-rollback snapshot (restoring to {short})");
                self.at =
                    RestoreAt::Snapshot(Box::new(Take::new(self.t.clone(), self.limits, reason)));
                self.step_snapshot(None)
            }
            RestoreAt::Snapshot(_) => self.step_snapshot(last),
            RestoreAt::CheckedOut => {
                if !last.is_some_and(Outcome::ok) {
                    let why = last.map(Outcome::why).unwrap_or_default();
                    return failed(format!("Restore failed: {why}"));
                }
                self.at = RestoreAt::Reason;
                Step::Do(self.t.git(&["log", "--format=%s", "-1", &self.commit]))
            }
            RestoreAt::Reason => {
                let reason = last
                    .filter(|o| o.ok())
                    .map_or("unknown".to_string(), |o| o.out().to_string());
                let mut result = json!({
                    "success": true, "restored_to": short, "reason": reason,
                    "directory": self.t.work_tree.display().to_string(),
                });
                if let Some(f) = &self.file {
                    result["file"] = json!(f);
                }
                Step::Done(result)
            }
        }
    }

    /// The snapshot before the restore (its end does not matter, as in Hermes), then the
    /// checkout.
    fn step_snapshot(&mut self, last: Option<&Outcome>) -> Step<Value> {
        let RestoreAt::Snapshot(take) = &mut self.at else {
            return Step::Done(json!({"success": false, "error": "lost the snapshot"}));
        };
        if let Step::Do(cmd) = take.step(last) {
            return Step::Do(cmd);
        }
        self.at = RestoreAt::CheckedOut;
        let target = self.file.clone().unwrap_or_else(|| ".".into());
        let args = ["checkout", self.commit.as_str(), "--", target.as_str()];
        Step::Do(self.t.git_indexed(&args, 2))
    }
}

// ---- the automatic sweep ----

/// Hermes' automatic sweep: projects untouched for `retention_days` forgotten (their ref,
/// index and metadata), `legacy-*` archives as old removed, a gc, the size cap, the marker
/// written.
#[derive(Debug)]
pub struct Sweep {
    t: Target,
    retention_days: u64,
    max_total_bytes: u64,
    now: f64,
    at: SweepAt,
    stale: Vec<String>,
    forgotten: usize,
    /// Its ref deleted; its index and metadata go next.
    forgetting: Option<String>,
}

#[derive(Debug)]
enum SweepAt {
    Begin,
    Read,
    Forget,
    Legacy,
    Collect(Gc),
    Capping(Cap),
    Marked,
}

impl Sweep {
    /// `t`: the store, with its base directory as the work tree.
    pub fn new(t: Target, retention_days: u64, max_total_bytes: u64, now: f64) -> Sweep {
        Sweep {
            t,
            retention_days,
            max_total_bytes,
            now,
            at: SweepAt::Begin,
            stale: Vec::new(),
            forgotten: 0,
            forgetting: None,
        }
    }

    /// The number of projects forgotten, once over.
    pub fn step(&mut self, last: Option<&Outcome>) -> Step<usize> {
        loop {
            match &mut self.at {
                SweepAt::Begin => {
                    self.at = SweepAt::Read;
                    return Step::Do(Cmd::Fs(FsOp::ReadProjects));
                }
                SweepAt::Read => {
                    let projects: Vec<prune::Project> = last
                        .map(|o| o.stdout.lines().filter_map(parse_project_line).collect())
                        .unwrap_or_default();
                    self.stale = prune::stale(&projects, self.now, self.retention_days);
                    self.at = SweepAt::Forget;
                }
                SweepAt::Forget => {
                    if let Some(hash) = self.forgetting.take() {
                        self.forgotten += 1;
                        return Step::Do(Cmd::Fs(FsOp::Forget(hash)));
                    }
                    match self.stale.pop() {
                        Some(hash) => {
                            let cmd = self.t.git(&["update-ref", "-d", &layout::ref_name(&hash)]);
                            self.forgetting = Some(hash);
                            return Step::Do(cmd);
                        }
                        None => self.at = SweepAt::Legacy,
                    }
                }
                SweepAt::Legacy => {
                    self.at = SweepAt::Collect(Gc::Expire);
                    // Hermes: archives of pre-v2 stores go by the same retention.
                    if self.retention_days > 0 {
                        let line = layout::legacy_sweep_line(&self.t.store, self.retention_days);
                        return Step::Do(Cmd::Run { line, slow: 1 });
                    }
                }
                SweepAt::Collect(gc) => match gc.step(&self.t) {
                    Some(cmd) => return Step::Do(cmd),
                    None => self.at = SweepAt::Capping(Cap::new(self.max_total_bytes)),
                },
                SweepAt::Capping(cap) => match cap.step(&self.t, last) {
                    Some(cmd) => return Step::Do(cmd),
                    None => {
                        self.at = SweepAt::Marked;
                        return Step::Do(Cmd::Fs(FsOp::MarkSwept));
                    }
                },
                SweepAt::Marked => return Step::Done(self.forgotten),
            }
        }
    }
}

fn parse_project_line(line: &str) -> Option<prune::Project> {
    let mut f = line.splitn(3, '\t');
    Some(prune::Project {
        hash: f.next()?.to_string(),
        last_touch: f.next()?.parse().ok()?,
        workdir: f.next().unwrap_or("").to_string(),
    })
}

#[cfg(test)]
mod tests;
