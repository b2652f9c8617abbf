//! Work on state.db that no request waits for, one step per loop iteration once the
//! iteration's answers are written, the most urgent first: a WAL checkpoint once the batches
//! wrote [`BATCH_FRAMES`] or the WAL holds [`WAL_FRAMES`] more than the last one left, a step of FTS5's merges that the batches
//! left (before the next batch adds to them), a batch of a deleted session's messages, a batch
//! of new messages for the full-text indexes. Each batch aims at [`paced::TARGET`]; no
//! iteration carries more than one step.

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

/// The background step an iteration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Checkpoint,
    Merge,
    Purge,
    Index,
}

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
        }
    }

    /// The step due now, the most urgent first: a checkpoint the WAL's growth made worth it,
    /// the merging the batches left (before the next batch adds to it), their next batch.
    /// `backlog` is the WAL's frames past the last checkpoint's copy; `indexed`, whether
    /// state.db has a full-text index to merge.
    pub fn next_step(&self, backlog: usize, indexed: bool) -> Option<Step> {
        let checkpoint = self.batch_frames >= BATCH_FRAMES
            || backlog.saturating_sub(self.checkpoint_left) >= WAL_FRAMES;
        if checkpoint && !self.checkpoint_failed {
            Some(Step::Checkpoint)
        } else if self.merging.due() && self.merge_budget > 0 && indexed {
            Some(Step::Merge)
        } else if self.purge.due() {
            Some(Step::Purge)
        } else if self.indexing.due() {
            Some(Step::Index)
        } else {
            None
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
        self.next_background_step().is_some()
    }

    fn next_background_step(&self) -> Option<Step> {
        if !self.store_healthy() {
            return None;
        }
        self.bg
            .next_step(self.store.wal_backlog(), self.store.has_full_text_index())
    }

    /// One step of background work ([`Background::next_step`]), if one is due: whether it ran.
    pub fn background_step(&mut self) -> bool {
        let Some(step) = self.next_background_step() else {
            return false;
        };
        match step {
            Step::Checkpoint => self.checkpoint(),
            Step::Merge => self.merge_step(),
            Step::Purge => self.purge_step(),
            Step::Index => self.index_step(),
        }
        true
    }

    /// Run one batch on the store, counting the WAL frames it wrote towards the next
    /// checkpoint and, for a batch that holds merges off (`held`), as the merging it owes.
    fn counted<T>(&mut self, held: bool, batch: impl FnOnce(&mut Store) -> T) -> T {
        let before = self.store.wal_backlog();
        let out = batch(&mut self.store);
        let frames = self.store.wal_backlog().saturating_sub(before);
        self.bg.batch_frames += frames;
        if held {
            self.bg.merge_budget += frames;
        }
        out
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

    /// Copy the WAL into the database file now, if it holds frames no checkpoint copied
    /// (the shutdown's last step).
    pub fn checkpoint_if_due(&mut self) {
        if self.store.wal_backlog() > 0 {
            self.checkpoint();
        }
    }

    fn checkpoint(&mut self) {
        match self.store.checkpoint() {
            Ok(()) => {
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
        let started = self.clock.now();
        let batch = self.bg.purge.batch();
        match self.counted(true, |store| store.purge_step(batch)) {
            Ok(None) => self.bg.purge.finished(),
            Ok(Some(done)) => self
                .bg
                .purge
                .removed(done.removed, self.clock.since(started)),
            Err(e) => step_failed(&mut self.bg.purge, &e, "deleted messages not removed yet"),
        }
    }

    /// Index one batch of new messages.
    fn index_step(&mut self) {
        let started = self.clock.now();
        let batch = self.bg.indexing.batch();
        match self.counted(true, |store| store.index_step(batch)) {
            Ok(rows) if rows < batch => self.bg.indexing.finished(),
            Ok(rows) => self.bg.indexing.removed(rows, self.clock.since(started)),
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
        let started = self.clock.now();
        let pages = self.bg.merging.batch().min(self.bg.merge_budget);
        match self.counted(false, |store| store.merge_step(pages)) {
            Ok(true) => {
                self.bg.merge_budget -= pages;
                self.bg.merging.removed(pages, self.clock.since(started));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> Background {
        Background::new(false, false)
    }

    #[test]
    fn nothing_runs_when_nothing_waits() {
        assert_eq!(idle().next_step(WAL_FRAMES - 1, true), None);
    }

    #[test]
    fn a_checkpoint_comes_first_once_the_batches_or_the_wal_grew_enough() {
        let mut bg = Background::new(true, true);
        assert_eq!(bg.next_step(0, false), Some(Step::Purge));
        bg.batch_frames = BATCH_FRAMES;
        assert_eq!(bg.next_step(0, false), Some(Step::Checkpoint));
        bg.batch_frames = 0;
        assert_eq!(bg.next_step(WAL_FRAMES, false), Some(Step::Checkpoint));
        // Frames a reader's snapshot kept from the last checkpoint do not count again.
        bg.checkpoint_left = 100;
        assert_eq!(bg.next_step(WAL_FRAMES, false), Some(Step::Purge));
        assert_eq!(
            bg.next_step(WAL_FRAMES + 100, false),
            Some(Step::Checkpoint)
        );
    }

    #[test]
    fn a_failed_checkpoint_waits_for_the_tick_while_the_batches_go_on() {
        let mut bg = Background::new(true, false);
        bg.batch_frames = BATCH_FRAMES;
        bg.checkpoint_failed = true;
        assert_eq!(bg.next_step(WAL_FRAMES, false), Some(Step::Purge));
        assert!(bg.wants_tick());
        bg.checkpoint_failed = false; // the tick
        assert_eq!(bg.next_step(0, false), Some(Step::Checkpoint));
    }

    #[test]
    fn merging_runs_before_the_next_batch_and_only_within_its_budget() {
        let mut bg = Background::new(true, true);
        assert_eq!(bg.next_step(0, true), Some(Step::Purge), "no budget yet");
        bg.merge_budget = 40;
        assert_eq!(bg.next_step(0, true), Some(Step::Merge));
        assert_eq!(
            bg.next_step(0, false),
            Some(Step::Purge),
            "no full-text index to merge"
        );
        bg.merging.fail();
        assert_eq!(bg.next_step(0, true), Some(Step::Purge), "failed: the tick");
    }

    #[test]
    fn a_deleted_sessions_messages_go_before_new_ones_are_indexed() {
        let mut bg = Background::new(true, true);
        assert_eq!(bg.next_step(0, false), Some(Step::Purge));
        bg.purge.finished();
        assert_eq!(bg.next_step(0, false), Some(Step::Index));
        bg.indexing.finished();
        assert_eq!(bg.next_step(0, false), None);
    }
}
