//! Work on state.db that no request waits for, one step per loop iteration once the
//! iteration's answers are written, the most urgent first: a WAL checkpoint once the batches
//! wrote [`BATCH_FRAMES`] or the WAL holds [`WAL_FRAMES`] more than the last one left, a step of FTS5's merges that the batches
//! left (before the next batch adds to them), a batch of a deleted session's messages, a batch
//! of new messages for the full-text indexes. Each batch aims at [`paced::TARGET`]; no
//! iteration carries more than one step.

use std::time::Instant;

use super::{Persistence, Unit, journal::Journal, paced};
use crate::store::Store;

/// Pages of FTS5's merge output a step may ask for: a merge of deletes reads far more than it
/// writes, so a step's cost follows its pages loosely and the batch stays small.
const MERGE_MAX: usize = 64;

/// WAL frames the background batches write before a checkpoint runs between requests. A
/// batch's frames are distinct pages (a purge touches the whole of a session's rows and index
/// entries), so the WAL would otherwise hold the whole purge and one checkpoint copy it all;
/// this many (2 MiB) copy in a few ms beside the checkpoint's two syncs (of the WAL, then of
/// state.db: 5–25 ms on a small VM's disk, whatever is copied).
pub const BATCH_FRAMES: usize = 512;

/// WAL frames of any kind before a checkpoint runs between requests: SQLite's automatic
/// checkpoint was set here before. A turn's commits write a dozen frames, mostly the same few
/// pages again, so checkpointing them costs the syncs and little else: at 4,096 those syncs
/// added 16 µs to every turn of `benches/dispatch.rs`, at 10,000 no more than its noise, and
/// run after every burst of turns (as the flush tick did) they were 5–25 ms on the loop each
/// time. The shutdown checkpoints whatever is left.
pub const WAL_FRAMES: usize = 10_000;

/// Where background work stands between iterations.
#[derive(Debug)]
pub struct Background {
    /// Deleted sessions' messages, removed a batch per iteration.
    pub(super) purge: paced::Paced,
    /// New messages into the full-text indexes, started by the flush tick after commits.
    pub(super) indexing: paced::Paced,
    /// A commit wrote since indexing last started.
    pub(super) index_wanted: bool,
    /// FTS5's merge work, which the batches leave for these steps (pages per step).
    merging: paced::Paced,
    /// Pages of merging the batches left: as many as they wrote, the share FTS5's own
    /// automerge would have spent on them. Not until no merge is left: FTS5 always has one
    /// under way, and finishing it can rewrite a whole level of a big index.
    merge_budget: usize,
    /// WAL frames the batches wrote since the last checkpoint.
    batch_frames: usize,
    /// The WAL backlog the last checkpoint left (frames a reader's snapshot kept it from
    /// copying): the next one waits for `WAL_FRAMES` more.
    checkpoint_left: usize,
    /// The last checkpoint failed: none between requests until the flush tick.
    checkpoint_failed: bool,
    /// A commit happened since the last checkpoint (the shutdown's checkpoint runs then).
    pub(super) checkpoint_due: bool,
}

impl Background {
    pub fn new(purging: bool, indexing: bool) -> Background {
        Background {
            purge: paced::Paced::new(purging),
            indexing: paced::Paced::new(indexing),
            index_wanted: false,
            merging: paced::Paced::within(true, paced::MIN, MERGE_MAX),
            merge_budget: 0,
            batch_frames: 0,
            checkpoint_left: 0,
            checkpoint_failed: false,
            checkpoint_due: false,
        }
    }

    /// Whether the flush tick has work: indexing to start, a failed checkpoint or batch.
    pub fn wants_tick(&self) -> bool {
        self.checkpoint_failed
            || self.index_wanted
            || self.purge.failed()
            || self.indexing.failed()
            || self.merging.failed()
    }
}

impl<U: Unit> Persistence<U, Store, Journal> {
    /// Whether background work waits (the loop must come round again without sleeping).
    pub fn background_due(&self) -> bool {
        self.store_healthy()
            && (self.checkpoint_worth()
                || self.bg.purge.due()
                || self.bg.indexing.due()
                || self.merging_due())
    }

    /// One step of background work, the most urgent first: a checkpoint the WAL's growth made
    /// worth it, merging the batches left, their next batch.
    pub fn background_step(&mut self) {
        if !self.store_healthy() {
            return;
        }
        if self.checkpoint_worth() {
            self.checkpoint();
        } else if self.merging_due() {
            self.merge_step();
        } else if self.bg.purge.due() {
            self.purge_step();
        } else if self.bg.indexing.due() {
            self.index_step();
        }
    }

    /// WAL frames a batch wrote since `before` (a backlog): they count towards the next
    /// checkpoint and, for a batch that held merges off, are the merging it owes.
    fn wrote(&mut self, before: usize, held: bool) {
        let frames = self.store.wal_backlog().saturating_sub(before);
        self.bg.batch_frames += frames;
        if held {
            self.bg.merge_budget += frames;
        }
    }

    fn checkpoint_worth(&self) -> bool {
        let backlog = self.store.wal_backlog();
        !self.bg.checkpoint_failed
            && (self.bg.batch_frames >= BATCH_FRAMES
                || backlog.saturating_sub(self.bg.checkpoint_left) >= WAL_FRAMES)
    }

    fn merging_due(&self) -> bool {
        self.bg.merging.due() && self.bg.merge_budget > 0 && self.store.merges_owed()
    }

    /// The flush tick: indexing of what the commits since the last tick wrote; failed steps
    /// go on.
    pub fn tick_background(&mut self) {
        self.bg.checkpoint_failed = false;
        self.bg.indexing.retry();
        if std::mem::take(&mut self.bg.index_wanted) {
            self.bg.indexing.started();
        }
        self.bg.purge.retry();
        self.bg.merging.retry();
    }

    /// Copy the WAL into the database file now, if a commit happened since the last time
    /// (the shutdown's last step).
    pub fn checkpoint_if_due(&mut self) {
        if self.bg.checkpoint_due {
            self.checkpoint();
        }
    }

    fn checkpoint(&mut self) {
        match self.store.checkpoint() {
            Ok(()) => {
                self.bg.checkpoint_due = false;
                self.bg.batch_frames = 0;
                self.bg.checkpoint_left = self.store.wal_backlog();
            }
            Err(e) => {
                self.bg.checkpoint_failed = true;
                crate::diag!("[gateway] WAL checkpoint failed: {e}");
            }
        }
    }

    /// Remove one batch of a deleted session's messages; a failure waits for the flush tick.
    fn purge_step(&mut self) {
        let started = Instant::now();
        let before = self.store.wal_backlog();
        let step = self.store.purge_step(self.bg.purge.batch());
        self.wrote(before, true);
        match step {
            Ok(None) => self.bg.purge.finished(),
            Ok(Some(done)) => {
                self.bg.checkpoint_due = true;
                self.bg.purge.removed(done.removed, started.elapsed());
            }
            Err(e) => step_failed(&mut self.bg.purge, &e, "deleted messages not removed yet"),
        }
    }

    /// Index one batch of new messages.
    fn index_step(&mut self) {
        let started = Instant::now();
        let batch = self.bg.indexing.batch();
        let before = self.store.wal_backlog();
        let step = self.store.index_step(batch);
        self.wrote(before, true);
        match step {
            Ok(rows) => {
                if rows > 0 {
                    self.bg.checkpoint_due = true;
                }
                if rows < batch {
                    self.bg.indexing.finished();
                } else {
                    self.bg.indexing.removed(rows, started.elapsed());
                }
            }
            Err(e) => step_failed(
                &mut self.bg.indexing,
                &e,
                "new messages not in the search index yet",
            ),
        }
    }

    /// One step of FTS5's merges, within what the batches left; none left: nothing until a
    /// batch leaves more.
    fn merge_step(&mut self) {
        let started = Instant::now();
        let pages = self.bg.merging.batch().min(self.bg.merge_budget);
        let before = self.store.wal_backlog();
        let step = self.store.merge_step(pages);
        self.wrote(before, false);
        match step {
            Ok(true) => {
                self.bg.checkpoint_due = true;
                self.bg.merge_budget -= pages;
                self.bg.merging.removed(pages, started.elapsed());
            }
            Ok(false) => self.bg.merge_budget = 0,
            Err(e) => step_failed(
                &mut self.bg.merging,
                &e,
                "full-text index merge not done yet",
            ),
        }
    }
}

/// A step failed: it waits for the flush tick; said on stderr unless another process merely
/// held the lock.
fn step_failed(paced: &mut paced::Paced, e: &crate::store::StoreError, what: &str) {
    if e.kind != crate::store::ErrorKind::Busy {
        crate::diag!("[gateway] {what}: {e}");
    }
    paced.fail();
}
