//! Time. The loop reads its [`Clock`] when it wakes and passes `now` down; nothing below it
//! reads a clock of its own. Work that must stop on time (driving turns, pumping commands'
//! pipes, a tool's step, a store's lock wait) gets a [`Budget`]: a deadline with the loop's
//! clock to check it against, so the whole gateway runs on a fake clock as on the real one.
//!
//! Each kind of bulk work gets its own slice of an iteration and stops at a unit's end once
//! the slice is spent, leaving the rest for the next iteration, so that a `ping`, an interrupt
//! or an approval never waits behind a thousand sessions' work.

use std::time::{Duration, Instant};

/// Where the time comes from: the system's monotonic clock, or a test's fake one.
#[derive(Clone, Copy)]
pub struct Clock(fn() -> Instant);

impl Clock {
    /// The system's monotonic clock.
    pub const SYSTEM: Clock = Clock(Instant::now);

    /// A clock that reads `now` (a fake clock: the function reads the test's time).
    pub const fn from_fn(now: fn() -> Instant) -> Clock {
        Clock(now)
    }

    /// The time now.
    pub fn now(self) -> Instant {
        (self.0)()
    }

    /// How long since `then`, on this clock (work timed as it goes).
    pub fn since(self, then: Instant) -> Duration {
        self.now().saturating_duration_since(then)
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::SYSTEM
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// The slice of an iteration each kind of bulk work gets.
pub const SLICE: Duration = Duration::from_millis(4);

/// Work time, ending at a deadline the loop sets from its own clock.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// `None`: no limit.
    until: Option<Instant>,
    clock: Clock,
}

impl Budget {
    /// A slice of `SLICE` starting at the loop's `now`.
    pub fn slice(clock: Clock, now: Instant) -> Budget {
        Budget::of(clock, now, SLICE)
    }

    /// A slice of `length` starting at the loop's `now` (work that yields sooner).
    pub fn of(clock: Clock, now: Instant, length: Duration) -> Budget {
        Budget::until(clock, now + length)
    }

    /// Work until `deadline` on `clock`.
    pub fn until(clock: Clock, deadline: Instant) -> Budget {
        Budget {
            until: Some(deadline),
            clock,
        }
    }

    /// No limit (work that must finish at once, and the unit tests).
    pub fn unlimited() -> Budget {
        Budget {
            until: None,
            clock: Clock::SYSTEM,
        }
    }

    /// A slice already spent: the work does one unit.
    #[cfg(test)]
    pub fn spent_already() -> Budget {
        Budget::until(Clock::SYSTEM, Instant::now())
    }

    /// Whether the slice is spent: the work stops after the unit it is in.
    pub fn spent(&self) -> bool {
        self.until.is_some_and(|until| self.clock.now() >= until)
    }

    /// What is left of it, measured now (`None`: no limit).
    pub fn left(&self) -> Option<Duration> {
        self.until
            .map(|until| until.saturating_duration_since(self.clock.now()))
    }
}
