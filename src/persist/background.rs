//! Work on state.db that no request waits for, one paced step per loop iteration after the
//! commit's release, the most urgent first: a WAL checkpoint once the batches wrote
//! [`CHECKPOINT_FRAMES`], a step of FTS5's merges that the batches left (before the next
//! batch adds to them), a batch of a deleted session's messages, a batch of new messages for
//! the full-text indexes. Each batch aims at [`paced::TARGET`]; no iteration carries more
//! than one step.

use std::time::Instant;

use super::{Persistence, Unit, journal::Journal, paced};
use crate::store::Store;

/// Pages of FTS5's merge output a step may ask for: a merge of deletes reads far more than it
/// writes, so a step's cost follows its pages loosely and the batch stays small.
const MERGE_MAX: usize = 64;

/// WAL frames the batches write before a checkpoint runs between requests. A batch's frames
/// are distinct pages (a purge touches the whole of a session's rows and index entries), so
/// left to the flush tick they made one checkpoint of thousands of pages, tens of ms on the
/// loop; this many copy in a few ms (each checkpoint also syncs the WAL and state.db). A
/// turn's frames are mostly the same few pages again: they wait for the tick, as before.
pub const CHECKPOINT_FRAMES: usize = 512;

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
    /// The last checkpoint failed: none between requests until the flush tick.
    checkpoint_failed: bool,
    /// A commit happened since the last checkpoint.
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
            checkpoint_failed: false,
            checkpoint_due: false,
        }
    }

    /// Whether the flush tick has work: a checkpoint, indexing to start, a failed batch.
    pub fn wants_tick(&self) -> bool {
        self.checkpoint_due
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

    /// One step of background work, the most urgent first.
    pub fn background_step(&mut self) {
        if !self.store_healthy() {
            return;
        }
        if self.checkpoint_worth() {
            self.checkpoint();
            return;
        }
        if self.merging_due() {
            self.merge_step();
        } else if self.bg.purge.due() {
            self.purge_step();
        } else if self.bg.indexing.due() {
            self.index_step();
        }
    }

    /// WAL frames written since `before` (a backlog): they count towards the next checkpoint
    /// and, for a batch that held merges off, towards the merging it owes.
    fn wrote(&mut self, before: usize, held: bool) {
        let frames = self.store.wal_backlog().saturating_sub(before);
        self.bg.batch_frames += frames;
        if held {
            self.bg.merge_budget += frames;
        }
    }

    fn checkpoint_worth(&self) -> bool {
        !self.bg.checkpoint_failed && self.bg.batch_frames >= CHECKPOINT_FRAMES
    }

    fn merging_due(&self) -> bool {
        self.bg.merging.due() && self.bg.merge_budget > 0 && self.store.merges_owed()
    }

    /// The flush tick's checkpoint: copy the WAL into the database file, if a commit
    /// happened since the last time.
    pub fn checkpoint_if_due(&mut self) {
        self.bg.checkpoint_failed = false;
        if std::mem::take(&mut self.bg.checkpoint_due) {
            self.checkpoint();
        }
    }

    fn checkpoint(&mut self) {
        self.bg.batch_frames = 0;
        if let Err(e) = self.store.checkpoint() {
            self.bg.checkpoint_failed = true;
            crate::diag!("[gateway] WAL checkpoint failed: {e}");
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
            Err(e) => {
                if e.kind != crate::store::ErrorKind::Busy {
                    crate::diag!("[gateway] deleted messages not removed yet: {e}");
                }
                self.bg.purge.fail();
            }
        }
    }

    /// The flush tick: batches that failed go on.
    pub fn retry_background(&mut self) {
        self.bg.purge.retry();
        self.bg.merging.retry();
    }

    /// The flush tick: index what the commits since the last tick wrote (one batch now, the
    /// rest a batch per iteration), and go on where a failed batch stopped.
    pub fn start_indexing(&mut self) {
        self.bg.indexing.retry();
        if std::mem::take(&mut self.bg.index_wanted) {
            self.bg.indexing.started();
        }
        if self.bg.indexing.due() && self.store_healthy() {
            self.index_step();
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
            Err(e) => {
                if e.kind != crate::store::ErrorKind::Busy {
                    crate::diag!("[gateway] new messages not in the search index yet: {e}");
                }
                self.bg.indexing.fail();
            }
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
            Err(e) => {
                if e.kind != crate::store::ErrorKind::Busy {
                    crate::diag!("[gateway] full-text index merge not done yet: {e}");
                }
                self.bg.merging.fail();
            }
        }
    }
}
