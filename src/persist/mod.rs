//! Persistence, one owner: the store, what is dirty (by session), sessions closed and
//! awaiting their last commit, retries per session, the journal, WAL checkpoints.
//!
//! Commit before publish: [`Persistence::commit`] runs at the end of every loop iteration and
//! says whether the frames queued so far may be released. They may when everything they
//! announce is durable — in `state.db`, or else in the journal (`journal.rs`), which keeps
//! what the store could not take (locked by another process, a session's row refused) until
//! the next commit covers it or the next start folds it in. When neither can be written (disk
//! full, read-only home) the owner *holds*: frames stay queued, new model calls and tool starts
//! wait ([`Persistence::holding`], [`Persistence::park`]), the client is told once, and the
//! first commit that works again releases everything and resumes the parked turns.

mod background;
pub mod journal;
mod paced;
pub mod retry;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::clock::{Budget, Clock};
use crate::store::{Delta, ErrorKind, Store, StoreError};
use crate::timer::Throttle;
use journal::{Journal, Record, Sink};
use retry::Retries;

/// How long start-up waits for a lock to fold a killed gateway's journal and repair what it
/// left open. While the loop runs a write never waits for a lock: it fails at once and is
/// retried on the timer (`retry.rs`), so other sessions are not stalled.
const FOLD_WAIT: Duration = Duration::from_secs(2);

/// Messages of committed closed sessions freed per loop iteration: dropping a 100,000-message
/// transcript at once held the loop for ~5–18 ms (a free per string); a step of this many
/// costs a fraction of a millisecond.
pub const FREE_STEP: usize = 8_192;

/// Methods whose answers announce nothing durable, so they are written even while the output
/// is held: every other frame (an answer saying a prompt, a session or a title was taken, any
/// session event) waits for the commit that makes what it announces durable.
const QUIET_METHODS: &[&str] = &["ping"];

/// Whether the answer to `method` announces nothing durable.
pub fn announces_nothing(method: &str) -> bool {
    QUIET_METHODS.contains(&method)
}

/// Where commits go; the SQLite [`Store`], or a fake in unit tests.
pub trait Backend {
    /// Write these deltas (with the journal seq each covers) in one transaction.
    fn write(&mut self, deltas: &[(Delta<'_>, Option<u64>)]) -> Result<(), StoreError>;
    /// Until when a write may wait for another process's lock (`None`: not at all).
    fn wait_until(&mut self, deadline: Option<Budget>);
    /// Delete a stored session (and mark this process's journal folded past `journal_seq`
    /// for it); false when there was none.
    fn delete(&mut self, stored_id: &str, journal_seq: Option<u64>) -> Result<bool, StoreError>;
}

impl Backend for Store {
    fn write(&mut self, deltas: &[(Delta<'_>, Option<u64>)]) -> Result<(), StoreError> {
        Store::write(self, deltas)
    }
    fn delete(&mut self, stored_id: &str, journal_seq: Option<u64>) -> Result<bool, StoreError> {
        Store::delete(self, stored_id, journal_seq)
    }
    fn wait_until(&mut self, deadline: Option<Budget>) {
        Store::wait_until(self, deadline)
    }
}

/// One session of the report at exit: what of it the store lacks (a session can lack only its
/// row or queue — a title, counts, its end — with every message saved).
pub(crate) fn unsaved_line(stored_id: &str, messages: usize, unsaved: usize) -> String {
    match unsaved {
        0 => format!("{stored_id} (its row or queue unsaved; all {messages} messages saved)"),
        n => format!("{stored_id} ({n} of {messages} messages unsaved)"),
    }
}

/// A session as persistence sees it: its ids and what a commit writes, in the store's terms
/// ([`Delta`]). The session implements it (`session/stored.rs`); nothing here names sessions.
pub trait Unit {
    /// Its id among the live sessions.
    fn runtime_id(&self) -> &str;
    fn stored_id(&self) -> &str;
    fn title(&self) -> Option<&str>;
    /// It holds something the store lacks.
    fn unpersisted(&self) -> bool;
    /// What committing it writes, relative to what the store holds.
    fn delta(&self) -> Delta<'_>;
    /// The store holds everything it has now.
    fn committed(&mut self);
    /// Its messages, and how many of them the store lacks (for the report at exit).
    fn messages(&self) -> (usize, usize);
    /// Free up to `budget` of the messages it holds in memory, once the store holds it all
    /// and it is gone from memory's point of view; how many were freed (fewer than `budget`:
    /// none is left, and dropping the rest costs little).
    fn shed(&mut self, budget: usize) -> usize;
}

/// The live sessions by runtime id, as the owner reads and marks them (the session registry).
pub trait Sessions<U> {
    fn get(&self, rid: &str) -> Option<&U>;
    fn get_mut(&mut self, rid: &str) -> Option<&mut U>;
}

impl<U> Sessions<U> for HashMap<String, U> {
    fn get(&self, rid: &str) -> Option<&U> {
        HashMap::get(self, rid)
    }
    fn get_mut(&mut self, rid: &str) -> Option<&mut U> {
        HashMap::get_mut(self, rid)
    }
}

/// What the loop may do with the frames queued so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// Everything they announce is durable: release them.
    Release,
    /// Something they announce is only in memory: keep them.
    Hold,
}

/// What the client is told about the store (the loop turns these into `status.update`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// These sessions' work could not go into state.db (it is kept in the journal); in order.
    Unsaved { rids: Vec<String>, text: String },
    /// Nothing can be written: output held and turns paused. To every live session, ahead of
    /// the held frames.
    Holding { text: String },
    /// Saving works again after a hold: held output released, turns resumed.
    Saved { text: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Ok,
    /// state.db refuses some or all commits; the journal keeps them.
    Journaling,
    /// Nothing can be written; frames are held.
    Holding,
}

struct Retired<U> {
    session: U,
    /// Changes neither the store nor the journal holds.
    unjournaled: bool,
}

/// A killed gateway's journal that could not be folded yet (state.db locked at start-up).
pub struct Unfolded {
    /// The stored sessions it has records of.
    sessions: Vec<String>,
}

pub struct Persistence<U, S = Store, J = Journal> {
    store: S,
    journal: J,
    retries: Retries,
    /// Live sessions (runtime ids) holding something the store does not.
    dirty: BTreeSet<String>,
    /// Live sessions holding changes neither the store nor the journal has: frames announcing
    /// them must wait.
    unjournaled: BTreeSet<String>,
    retired: Vec<Retired<U>>,
    /// Closed sessions the store holds whole (or deleted), their memory freed [`FREE_STEP`]
    /// messages per commit so no iteration pays for a whole long transcript.
    freeing: VecDeque<U>,
    /// WAL checkpoints, purges, indexing and merges between requests.
    bg: background::Background,
    /// Stored id → seq of its latest journal record, until a commit covers it.
    journaled: HashMap<String, u64>,
    next_seq: u64,
    /// No journal write before this (it failed).
    journal_retry_at: Option<Instant>,
    health: Health,
    last_error: Option<String>,
    notices: Vec<Notice>,
    /// Sessions whose next model call or tool start waits for the hold to end.
    parked: Vec<String>,
    /// The hold just ended: the loop resumes the parked turns.
    resumed: bool,
    throttle: Throttle,
    /// When the flush tick scheduled last fires (none scheduled: `None`).
    tick_armed: Option<Instant>,
    unfolded: Vec<Unfolded>,
    interval: Duration,
    /// The journal file has records (so it is removed once nothing needs them).
    journal_used: bool,
    /// The loop's clock, for lock waits and timing background work.
    clock: Clock,
}

impl<U: Unit> Persistence<U, Store, Journal> {
    /// Open `state.db`, fold what killed gateways left in their journals (before anything
    /// reads it), then repair the sessions they left open.
    pub fn open(cfg: &crate::config::Config, clock: Clock) -> Result<Persistence<U>, String> {
        let db = cfg.db_path();
        let mut store = Store::open(&db, &cfg.synchronous)?;
        store.set_faults(cfg.store_faults.clone());
        let unfolded = fold_dead_journals(&mut store, clock);
        store.wait_until(Some(Budget::of(clock, clock.now(), FOLD_WAIT)));
        let repaired = store.repair_killed();
        store.wait_until(None);
        match repaired {
            Ok(r) if r != crate::store::Repair::default() => crate::diag!(
                "[gateway] ended {} session(s) left open by a killed gateway ({} tool result(s) marked unknown){}",
                r.sessions_ended,
                r.tool_results_added,
                match r.queued_prompts_kept {
                    0 => String::new(),
                    n => format!("; kept {n} queued prompt(s) as user messages"),
                } + &match r.delegations_unknown {
                    0 => String::new(),
                    n => format!(
                        "; told {n} session(s) a background delegation's outcome is unknown"
                    ),
                }
            ),
            Ok(_) => {}
            Err(e) => crate::diag!("[gateway] startup repair skipped: {e}"),
        }
        let mut journal = Journal::new(&db, store.owner(), cfg.journal_cap);
        journal.set_faults(cfg.store_faults.clone());
        let purging = store.purge_pending().unwrap_or(true);
        let mut p = Persistence::new(store, journal, cfg.flush_interval);
        p.clock = clock;
        p.unfolded = unfolded;
        // What a killed gateway left unindexed is caught up from the first iteration.
        p.bg = background::Background::new(purging, true);
        Ok(p)
    }

    /// The store, for reads.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store, for the writes that are not commits (the partial text of streaming replies).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// Fold the journals of gateways that are gone: those start-up could not (state.db was
    /// locked then) and those of gateways that died while this one ran (a second gateway on
    /// the same home), so their sessions are whole before anyone resumes or lists them. One
    /// state.db cannot take yet is kept for the flush tick's retries. Never waits for a lock.
    pub fn adopt_dead_journals(&mut self) {
        let me = self.store.owner().to_string();
        self.unfolded = journal::beside(self.store.path())
            .into_iter()
            .filter(|(_, owner)| *owner != me && !crate::store::owner_alive(owner))
            .filter_map(|(path, owner)| fold_or_keep(&mut self.store, &path, &owner))
            .collect();
    }

    /// Delete a stored session (and a closed copy waiting for its commit); false when there
    /// was none. A later fold of this process's journal skips it; a dead gateway's journal
    /// that holds it is folded first.
    pub fn delete(&mut self, stored_id: &str) -> Result<bool, StoreError> {
        self.adopt_dead_journals();
        self.delete_folded(stored_id)
    }

    /// The flush tick's retry of the journals state.db could not take yet.
    pub fn retry_folds(&mut self) {
        if !self.unfolded.is_empty() {
            self.adopt_dead_journals();
        }
    }
}

/// One session in its own transaction (after a batch failed on some session's data); true
/// when something was written, false when it had nothing the store lacks.
fn write_alone<S: Backend>(
    store: &mut S,
    journaled: &HashMap<String, u64>,
    s: &impl Unit,
) -> Result<bool, StoreError> {
    if !s.unpersisted() {
        return Ok(false);
    }
    let seq = journaled.get(s.stored_id()).copied();
    store.write(&[(s.delta(), seq)]).map(|()| true)
}

impl<U: Unit, S: Backend, J: Sink> Persistence<U, S, J> {
    pub fn new(mut store: S, journal: J, flush_interval: Duration) -> Self {
        store.wait_until(None);
        Persistence {
            store,
            journal,
            retries: Retries::new(flush_interval),
            dirty: BTreeSet::new(),
            unjournaled: BTreeSet::new(),
            retired: Vec::new(),
            freeing: VecDeque::new(),
            bg: background::Background::new(false, false),
            journaled: HashMap::new(),
            next_seq: 1,
            journal_retry_at: None,
            health: Health::Ok,
            last_error: None,
            notices: Vec::new(),
            parked: Vec::new(),
            resumed: false,
            throttle: Throttle::new(flush_interval),
            tick_armed: None,
            unfolded: Vec::new(),
            interval: flush_interval,
            journal_used: false,
            clock: Clock::SYSTEM,
        }
    }

    /// [`Persistence::delete`] once dead gateways' journals were looked for: refused ("try
    /// again") while one not folded yet holds the session, whose fold would bring it back.
    /// When the store refuses (locked, full), the closed copy stays, to be committed as before.
    fn delete_folded(&mut self, stored_id: &str) -> Result<bool, StoreError> {
        if self.unfolded(stored_id) {
            return Err(StoreError::new(
                ErrorKind::Busy,
                "the journal of a killed gateway holding this session is not folded into state.db yet; try again",
            ));
        }
        let seq = self.journaled.get(stored_id).copied();
        let deleted = self.store.delete(stored_id, seq)?;
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retired)
            .into_iter()
            .partition(|r| r.session.stored_id() == stored_id);
        self.retired = kept;
        let was_retired = !gone.is_empty();
        self.freeing.extend(gone.into_iter().map(|r| r.session));
        self.bg.purge.started();
        self.journaled.remove(stored_id);
        self.retries.session_ok(stored_id);
        Ok(deleted || was_retired)
    }

    /// The live session `rid` changed: commit it at the end of this iteration.
    pub fn mark_dirty(&mut self, rid: &str) {
        if !self.unjournaled.contains(rid) {
            self.unjournaled.insert(rid.to_string());
        }
        if !self.dirty.contains(rid) {
            self.dirty.insert(rid.to_string());
        }
    }

    /// A session left memory (closed, evicted, replaced by its compaction): its last state is
    /// committed with the next commit; until then it can be resumed from here.
    pub fn retire(&mut self, session: U) {
        self.dirty.remove(session.runtime_id());
        self.unjournaled.remove(session.runtime_id());
        self.retired.push(Retired {
            session,
            unjournaled: true,
        });
    }

    /// Take back a closed session not committed yet (resume), by stored id or title.
    pub fn take_retired(&mut self, id_or_title: &str) -> Option<U> {
        let i = self.retired.iter().position(|r| {
            r.session.stored_id() == id_or_title || r.session.title() == Some(id_or_title)
        })?;
        Some(self.retired.remove(i).session)
    }

    /// Whether a closed session with this stored id waits for its commit.
    pub fn is_retired(&self, stored_id: &str) -> bool {
        self.retired
            .iter()
            .any(|r| r.session.stored_id() == stored_id)
    }

    /// Whether a killed gateway's journal not folded yet holds this session (its rows in
    /// state.db are behind, so it must not be resumed from there).
    pub fn unfolded(&self, stored_id: &str) -> bool {
        self.unfolded
            .iter()
            .any(|u| u.sessions.iter().any(|s| s == stored_id))
    }

    /// Nothing can be written: new model calls and tool starts wait.
    pub fn holding(&self) -> bool {
        self.health == Health::Holding
    }

    /// A turn could not start its model call or tool because of the hold; it is resumed when
    /// the hold ends.
    pub fn park(&mut self, rid: &str) {
        if !self.parked.iter().any(|r| r == rid) {
            self.parked.push(rid.to_string());
        }
    }

    /// The turns to resume, once the hold ended.
    pub fn take_resumed(&mut self) -> Vec<String> {
        if std::mem::take(&mut self.resumed) {
            std::mem::take(&mut self.parked)
        } else {
            Vec::new()
        }
    }

    /// What to tell the client.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    /// Commit what changed, where it can go, and say whether the frames may be released.
    pub fn commit(&mut self, sessions: &mut impl Sessions<U>, now: Instant) -> Publish {
        self.dirty.retain(|rid| sessions.get(rid).is_some());
        self.unjournaled.retain(|rid| sessions.get(rid).is_some());
        if !self.dirty.is_empty() || !self.retired.is_empty() {
            if self.retries.store_due(now) {
                self.write_store(sessions, now);
            }
            self.write_journal(sessions, now);
        }
        self.free_step();
        self.settle()
    }

    /// Whether closed sessions' memory is still being freed (the loop must come round again).
    pub fn freeing(&self) -> bool {
        !self.freeing.is_empty()
    }

    /// Free up to [`FREE_STEP`] messages of the committed closed sessions, oldest close first.
    fn free_step(&mut self) {
        let mut budget = FREE_STEP;
        while budget > 0
            && let Some(s) = self.freeing.front_mut()
        {
            let freed = s.shed(budget);
            if freed < budget {
                self.freeing.pop_front();
            }
            budget -= freed;
        }
    }

    /// The final commit at shutdown: every retry is due and a lock is waited for until
    /// `deadline` (each write measures what is left of it when it begins).
    pub fn commit_final(
        &mut self,
        sessions: &mut impl Sessions<U>,
        deadline: Instant,
        now: Instant,
    ) -> Publish {
        self.retries.make_due(now);
        self.journal_retry_at = None;
        self.store
            .wait_until(Some(Budget::until(self.clock, deadline)));
        let publish = self.commit(sessions, now);
        self.store.wait_until(None);
        publish
    }

    /// Whether the flush tick has work: a retry, a fold, background work to start or retry.
    pub fn wants_tick(&self) -> bool {
        self.bg.wants_tick()
            || self.retries.next_due().is_some()
            || self.journal_retry_at.is_some()
            || self.health != Health::Ok
            || !self.unfolded.is_empty()
    }

    /// When the flush tick should fire, if no tick scheduled already fires by then (and now
    /// one is): within a flush interval, sooner when a store retry is due sooner (never
    /// sooner than the first backoff from now, so nothing spins).
    pub fn arm_tick(&mut self, now: Instant) -> Option<Instant> {
        let mut at = now + self.interval;
        if (!self.dirty.is_empty() || !self.retired.is_empty())
            && let Some(retry) = self.retries.next_due()
        {
            at = at.min(retry.max(now + retry::FIRST_BACKOFF));
        }
        if self.tick_armed.is_some_and(|armed| armed <= at) {
            return None;
        }
        self.tick_armed = Some(at);
        Some(at)
    }

    /// The flush tick fired; true when its work may run (at most once per flush interval).
    pub fn tick_fired(&mut self, now: Instant) -> bool {
        if self.tick_armed.is_some_and(|armed| armed <= now) {
            self.tick_armed = None;
        }
        self.throttle.try_run(now)
    }

    /// Whether state.db takes commits (the partial text is not written while it does not).
    pub fn store_healthy(&self) -> bool {
        !self.retries.store_failing() && self.health != Health::Holding
    }

    /// Say on stderr what is not in state.db at exit, and whether the journal keeps it.
    pub fn report_unpersisted<'a>(&'a self, live: impl Iterator<Item = &'a U>)
    where
        U: 'a,
    {
        let mut kept = Vec::new();
        let mut lost = Vec::new();
        for s in live
            .chain(self.retired.iter().map(|r| &r.session))
            .filter(|s| s.unpersisted())
        {
            let (messages, unsaved) = s.messages();
            let line = unsaved_line(s.stored_id(), messages, unsaved);
            let in_journal = self.journaled.contains_key(s.stored_id())
                && !self.unjournaled.contains(s.runtime_id())
                && !self
                    .retired
                    .iter()
                    .any(|r| r.unjournaled && r.session.stored_id() == s.stored_id());
            if in_journal { &mut kept } else { &mut lost }.push(line);
        }
        let why = self.last_error.as_deref().unwrap_or("unknown error");
        if !kept.is_empty() {
            crate::diag!(
                "[gateway] could not persist before exit to state.db ({why}); kept in {} for the next start to fold in: {}",
                self.journal.path().display(),
                kept.join(", ")
            );
        }
        if !lost.is_empty() {
            crate::diag!(
                "[gateway] could not persist before exit ({why}): {}",
                lost.join(", ")
            );
        }
    }

    // ---- the commit, step by step ----

    /// Write every dirty session whose retry is due in one transaction; when that fails for
    /// a reason of one session's data, each on its own, so the others still land.
    fn write_store(&mut self, sessions: &mut impl Sessions<U>, now: Instant) {
        let live: Vec<String> = self
            .dirty
            .iter()
            .filter(|rid| {
                sessions
                    .get(rid)
                    .is_some_and(|s| self.retries.session_due(s.stored_id(), now))
            })
            .cloned()
            .collect();
        let retired: Vec<usize> = (0..self.retired.len())
            .filter(|&i| {
                self.retries
                    .session_due(self.retired[i].session.stored_id(), now)
            })
            .collect();
        if live.is_empty() && retired.is_empty() {
            return;
        }
        self.bg.index_wanted = true;
        let deltas: Vec<(Delta<'_>, Option<u64>)> = live
            .iter()
            .filter_map(|rid| sessions.get(rid))
            .chain(retired.iter().map(|&i| &self.retired[i].session))
            .filter(|s| s.unpersisted())
            .map(|s| (s.delta(), self.journaled.get(s.stored_id()).copied()))
            .collect();
        let result = if deltas.is_empty() {
            Ok(())
        } else {
            self.store.write(&deltas)
        };
        drop(deltas);
        match result {
            Ok(()) => {
                self.store_ok();
                for rid in &live {
                    self.committed_live(sessions, rid);
                }
                self.committed_retired(&retired);
            }
            Err(e) if e.kind.store_wide() => self.store_failed(e, now),
            // About some session's data: each on its own, so the refused one is named and the
            // others land.
            Err(_) => self.write_one_by_one(sessions, live, retired, now),
        }
    }

    fn write_one_by_one(
        &mut self,
        sessions: &mut impl Sessions<U>,
        live: Vec<String>,
        retired: Vec<usize>,
        now: Instant,
    ) {
        let mut landed = Vec::new();
        for rid in live {
            let Some(s) = sessions.get(&rid) else {
                continue;
            };
            let stored = s.stored_id().to_string();
            match write_alone(&mut self.store, &self.journaled, s) {
                Ok(wrote) => {
                    if wrote {
                        self.store_ok();
                    }
                    self.committed_live(sessions, &rid);
                }
                Err(e) if e.kind.store_wide() => return self.store_failed(e, now),
                Err(e) => self.session_failed(&stored, Some(rid), e, now),
            }
        }
        for i in retired {
            let s = &self.retired[i].session;
            let stored = s.stored_id().to_string();
            match write_alone(&mut self.store, &self.journaled, s) {
                Ok(wrote) => {
                    if wrote {
                        self.store_ok();
                    }
                    landed.push(i);
                }
                Err(e) if e.kind.store_wide() => {
                    self.store_failed(e, now);
                    break;
                }
                Err(e) => self.session_failed(&stored, None, e, now),
            }
        }
        self.committed_retired(&landed);
    }

    /// The store holds everything of live session `rid` now.
    fn committed_live(&mut self, sessions: &mut impl Sessions<U>, rid: &str) {
        self.dirty.remove(rid);
        self.unjournaled.remove(rid);
        if let Some(s) = sessions.get_mut(rid) {
            s.committed();
            self.journaled.remove(s.stored_id());
            if self.retries.session_ok(s.stored_id()) {
                crate::diag!("[gateway] saved session {} again", s.stored_id());
            }
        }
    }

    /// The store holds these closed sessions now (indexes into `retired`).
    fn committed_retired(&mut self, landed: &[usize]) {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retired)
            .into_iter()
            .enumerate()
            .partition(|(i, _)| landed.contains(i));
        self.retired = kept.into_iter().map(|(_, r)| r).collect();
        for (_, r) in gone {
            self.journaled.remove(r.session.stored_id());
            self.retries.session_ok(r.session.stored_id());
            self.freeing.push_back(r.session);
        }
    }

    fn store_ok(&mut self) {
        if self.retries.store_ok() {
            let e = self.last_error.take().unwrap_or_default();
            crate::diag!("[gateway] state.db writable again; saved what was pending ({e})");
        }
    }

    fn store_failed(&mut self, e: StoreError, now: Instant) {
        if self.retries.store_failed(now, e.kind == ErrorKind::Busy) {
            crate::diag!(
                "[gateway] could not save to state.db ({e}); keeping it in the journal and retrying"
            );
            self.notices.push(Notice::Unsaved {
                rids: self.dirty.iter().cloned().collect(),
                text: format!("could not save the transcript to state.db ({e}); retrying"),
            });
        }
        self.last_error = Some(e.to_string());
    }

    fn session_failed(&mut self, stored: &str, rid: Option<String>, e: StoreError, now: Instant) {
        if self.retries.session_failed(stored, now) {
            crate::diag!("[gateway] cannot save session {stored}: {e}");
            if let Some(rid) = rid {
                self.notices.push(Notice::Unsaved {
                    rids: vec![rid],
                    text: format!(
                        "could not save this session to state.db ({e}); kept in the journal, retrying"
                    ),
                });
            }
        }
        self.last_error = Some(e.to_string());
    }

    /// Append a record for every session with changes the store did not take and the journal
    /// does not have; past the journal's cap, rewrite it with one record per unsaved session.
    fn write_journal(&mut self, sessions: &impl Sessions<U>, now: Instant) {
        let due = self.journal_retry_at.is_none_or(|at| now >= at);
        let live_new: Vec<&U> = self
            .unjournaled
            .iter()
            .filter(|rid| self.dirty.contains(*rid))
            .filter_map(|rid| sessions.get(rid))
            .filter(|s| s.unpersisted())
            .collect();
        let retired_new = self
            .retired
            .iter()
            .filter(|r| r.unjournaled && r.session.unpersisted());
        let fresh: Vec<&U> = live_new
            .into_iter()
            .chain(retired_new.map(|r| &r.session))
            .collect();
        if fresh.is_empty() || !due {
            if fresh.is_empty() {
                self.all_journaled();
            }
            return;
        }
        let mut seq = self.next_seq;
        let records: Vec<Record<'_>> = fresh
            .iter()
            .map(|s| {
                seq += 1;
                Record {
                    seq,
                    delta: s.delta(),
                }
            })
            .collect();
        let mut written = self.journal.append(&records);
        let mut all = records;
        if written
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::StorageFull)
        {
            // Compaction: the latest state of every unsaved session replaces the file.
            let fresh_ids: Vec<&str> = all.iter().map(|r| r.delta.id.as_ref()).collect();
            let others: Vec<&U> = self
                .dirty
                .iter()
                .filter_map(|rid| sessions.get(rid))
                .chain(self.retired.iter().map(|r| &r.session))
                .filter(|s| s.unpersisted() && !fresh_ids.contains(&s.stored_id()))
                .collect();
            for s in others {
                seq += 1;
                all.push(Record {
                    seq,
                    delta: s.delta(),
                });
            }
            written = self.journal.rewrite(&all);
            if written.is_ok() {
                self.journaled.clear();
            }
        }
        match written {
            Ok(()) => {
                for r in &all {
                    self.journaled.insert(r.delta.id.to_string(), r.seq);
                }
                self.next_seq = seq;
                self.journal_retry_at = None;
                self.journal_used = true;
                self.all_journaled();
            }
            Err(e) => {
                self.next_seq = seq;
                self.journal_retry_at = Some(now + self.interval);
                self.last_error = Some(match &self.last_error {
                    Some(db) => format!("{db}; the journal: {e}"),
                    None => format!("the journal: {e}"),
                });
            }
        }
    }

    /// Every change is in the store or the journal.
    fn all_journaled(&mut self) {
        let dirty = &self.dirty;
        self.unjournaled.retain(|rid| !dirty.contains(rid));
        for r in &mut self.retired {
            r.unjournaled = false;
        }
    }

    /// Health after this commit, what to tell the client, and whether frames may go.
    fn settle(&mut self) -> Publish {
        let exposed = !self.unjournaled.is_empty() || self.retired.iter().any(|r| r.unjournaled);
        let unsaved = !self.dirty.is_empty() || !self.retired.is_empty();
        if exposed {
            if self.health != Health::Holding {
                let why = self.last_error.as_deref().unwrap_or("unknown error");
                crate::diag!(
                    "[gateway] cannot save anything ({why}); holding output and pausing turns until the store recovers"
                );
                // One notice for the whole outage: the hold says it all.
                self.notices
                    .retain(|n| !matches!(n, Notice::Unsaved { .. }));
                self.notices.push(Notice::Holding {
                    text: format!(
                        "cannot save the transcript ({why}); output is held and turns are paused until saving works again"
                    ),
                });
                self.health = Health::Holding;
            }
            return Publish::Hold;
        }
        if self.health == Health::Holding {
            crate::diag!("[gateway] saving works again; released the held output");
            self.notices.push(Notice::Saved {
                text: "saving works again; the transcript is saved".to_string(),
            });
            self.resumed = true;
        }
        self.health = if unsaved {
            Health::Journaling
        } else {
            Health::Ok
        };
        if self.journal_used && self.journaled.is_empty() && !unsaved {
            match self.journal.clear() {
                Ok(()) => self.journal_used = false,
                Err(e) => crate::diag!(
                    "[gateway] cannot remove {}: {e}",
                    self.journal.path().display()
                ),
            }
        }
        Publish::Release
    }
}

/// Fold every journal beside state.db whose gateway is gone; returns the ones that could not
/// be folded yet. Used at start-up (and by `sessions` in the CLI) before anything reads.
pub fn fold_dead_journals(store: &mut Store, clock: Clock) -> Vec<Unfolded> {
    let db = store.path().to_path_buf();
    let me = store.owner().to_string();
    store.wait_until(Some(Budget::of(clock, clock.now(), FOLD_WAIT)));
    let unfolded = journal::beside(&db)
        .into_iter()
        .filter(|(_, owner)| *owner != me && !crate::store::owner_alive(owner))
        .filter_map(|(path, owner)| fold_or_keep(store, &path, &owner))
        .collect();
    // Marks of a journal are needed while its file may still be folded: its gateway is alive
    // (it may write the file again) or the file is there.
    let files: Vec<String> = journal::beside(&db)
        .iter()
        .map(|(_, owner)| crate::store::journal_name_of(owner))
        .collect();
    let stale: Vec<String> = store
        .folded_journals()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| {
            let owner = crate::store::journal_owner(n);
            !files.contains(n) && owner != me && !crate::store::owner_alive(&owner)
        })
        .collect();
    for name in stale {
        if let Err(e) = store.forget_folds(&name) {
            crate::diag!("[gateway] cannot tidy the journal marks: {e}");
        }
    }
    store.wait_until(None);
    unfolded
}

/// Fold a dead gateway's journal, or say what it holds when state.db cannot take it yet.
fn fold_or_keep(store: &mut Store, path: &Path, owner: &str) -> Option<Unfolded> {
    let e = fold_one(store, path, owner).err()?;
    if e.kind != crate::store::ErrorKind::Busy {
        crate::diag!("[gateway] cannot fold {} yet: {e}", path.display());
    }
    let sessions = journal::read(path)
        .map(|b| journal::decode(&b).0)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.delta.id.into_owned())
        .collect();
    Some(Unfolded { sessions })
}

/// Fold one dead gateway's journal into state.db, then remove it.
fn fold_one(store: &mut Store, path: &Path, owner: &str) -> Result<usize, StoreError> {
    let bytes = match journal::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let (records, skipped) = journal::decode(&bytes);
    let records: Vec<(u64, Delta<'_>)> = records.into_iter().map(|r| (r.seq, r.delta)).collect();
    let written = store.fold(owner, &records)?;
    std::fs::remove_file(path)?;
    if let Some(dir) = path.parent() {
        let _ = crate::util::sync_dir(dir);
    }
    if written > 0 || skipped > 0 {
        crate::diag!(
            "[gateway] folded {written} session(s) from the journal of a killed gateway into state.db ({skipped} torn line(s) skipped)"
        );
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
