//! Background work on state.db done a batch per loop iteration, each batch sized from the last
//! one's time so a step stays near [`TARGET`] whatever a row costs on this disk:
//! - the purge: `session.delete` removes the session row at once, its messages (each also
//!   leaving the full-text indexes) go in batches;
//! - the full-text indexing of new messages (`store/fts.rs`), started by the flush tick.

use std::time::Duration;

/// Loop time one batch aims at (the loop's budget for any request is 10 ms).
pub const TARGET: Duration = Duration::from_millis(3);
const FIRST: usize = 256;
pub const MIN: usize = 16;
const MAX: usize = 16_384;

#[derive(Debug)]
pub struct Paced {
    /// Some work may be left.
    pending: bool,
    /// The last batch failed (state.db locked, full): tried again at the flush tick.
    failed: bool,
    batch: usize,
    /// The largest batch (work of uneven cost keeps a lower cap).
    max: usize,
}

impl Paced {
    pub fn new(pending: bool) -> Paced {
        Paced::within(pending, FIRST, MAX)
    }

    /// Batches from `first` up to `max` (work whose unit costs much more than a row, or
    /// varies more).
    pub fn within(pending: bool, first: usize, max: usize) -> Paced {
        let max = max.clamp(MIN, MAX);
        Paced {
            pending,
            failed: false,
            batch: first.clamp(MIN, max),
            max,
        }
    }

    /// There is work: batches run from the next iteration.
    pub fn started(&mut self) {
        self.pending = true;
    }

    /// Whether a batch should run in this iteration.
    pub fn due(&self) -> bool {
        self.pending && !self.failed
    }

    /// Whether the flush tick has a failed batch to try again.
    pub fn failed(&self) -> bool {
        self.pending && self.failed
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    /// A batch did `removed` rows in `took`: the next is sized to take about [`TARGET`]
    /// (at most half or twice this one, so one slow or fast batch does not swing it).
    pub fn removed(&mut self, removed: usize, took: Duration) {
        if removed < self.batch / 2 {
            return; // a short batch says little about a full one
        }
        let per_row = took.as_secs_f64() / removed as f64;
        let fits = if per_row > 0.0 {
            (TARGET.as_secs_f64() / per_row).round() as usize
        } else {
            MAX
        };
        self.batch = fits
            .clamp(self.batch / 2, self.batch * 2)
            .clamp(MIN, self.max);
    }

    /// Nothing is left.
    pub fn finished(&mut self) {
        self.pending = false;
    }

    pub fn fail(&mut self) {
        self.failed = true;
    }

    /// The flush tick: work that failed goes on.
    pub fn retry(&mut self) {
        self.failed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: f64) -> Duration {
        Duration::from_secs_f64(n / 1000.0)
    }

    #[test]
    fn the_batch_follows_the_cost_of_a_row_within_a_factor_of_two_a_step() {
        let mut p = Paced::new(true);
        assert_eq!(p.batch(), FIRST);
        // Fast rows: the batch doubles each step up to its cap, never past it.
        for _ in 0..20 {
            let b = p.batch();
            p.removed(b, ms(0.1));
        }
        assert_eq!(p.batch(), MAX);
        // Rows turn slow (a cold cache): it halves per step until a batch fits the target.
        p.removed(MAX, ms(300.0));
        assert_eq!(p.batch(), MAX / 2);
        let mut steps = 0;
        while p.batch() > 200 {
            let b = p.batch();
            p.removed(b, ms(b as f64 * 0.015)); // 15 µs a row: 200 rows fit 3 ms
            steps += 1;
            assert!(steps < 10, "never settled: {}", p.batch());
        }
        let b = p.batch();
        p.removed(b, ms(b as f64 * 0.015));
        assert_eq!(p.batch(), 200, "settled on what fits the target");
        // A short last batch (the session's end) changes nothing; nor can it go below MIN.
        p.removed(3, ms(50.0));
        assert_eq!(p.batch(), 200);
        for _ in 0..20 {
            let b = p.batch();
            p.removed(b, ms(1_000.0));
        }
        assert_eq!(p.batch(), MIN);
    }

    #[test]
    fn a_failed_batch_waits_for_the_tick_and_finished_work_for_the_next_start() {
        let mut p = Paced::new(false);
        assert!(!p.due() && !p.failed());
        p.started();
        assert!(p.due());
        p.fail();
        assert!(!p.due() && p.failed(), "no spinning on a locked store");
        p.retry();
        assert!(p.due());
        p.finished();
        assert!(!p.due() && !p.failed());
    }
}
