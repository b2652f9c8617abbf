//! How long one kind of bulk work may run in a loop iteration: the loop gives each kind
//! (driving turns, pumping commands' pipes) its own slice and the work stops at a unit's end
//! once the slice is spent, leaving the rest for the next iteration, so that a `ping`, an
//! interrupt or an approval never waits behind a thousand sessions' work.

use std::time::{Duration, Instant};

/// The slice of an iteration each kind of bulk work gets.
pub const SLICE: Duration = Duration::from_millis(4);

/// A slice of work time, ending at a deadline the loop sets from its own clock.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    until: Instant,
}

impl Budget {
    /// A slice of `SLICE` starting at the loop's `now`.
    pub fn slice(now: Instant) -> Budget {
        Budget { until: now + SLICE }
    }

    /// A slice of `length` starting at the loop's `now` (work that yields sooner).
    pub fn of(now: Instant, length: Duration) -> Budget {
        Budget {
            until: now + length,
        }
    }

    /// No limit (work that must finish at once, and the unit tests).
    pub fn unlimited() -> Budget {
        Budget {
            until: Instant::now() + Duration::from_secs(365 * 24 * 3600),
        }
    }

    /// A slice already spent: the work does one unit.
    #[cfg(test)]
    pub fn spent_already() -> Budget {
        Budget {
            until: Instant::now(),
        }
    }

    /// Whether the slice is spent: the work stops after the unit it is in.
    pub fn spent(&self) -> bool {
        Instant::now() >= self.until
    }
}
