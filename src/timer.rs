//! A hashed timing wheel. The loop sleeps until [`TimerWheel::next_deadline`] and then collects
//! what is due with [`TimerWheel::expire`]. Time is passed in, never read here, so tests can drive
//! it with a fake clock.

use std::time::{Duration, Instant};

/// Width of one slot.
const TICK: Duration = Duration::from_millis(1);
/// Slots in the wheel (a power of two); deadlines further out wrap around and wait their round.
const SLOTS: usize = 1024;

/// Handle to cancel a timer (its slot is known from its tick, so cancelling is cheap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerId {
    id: u64,
    tick: u64,
}

struct Entry<T> {
    id: u64,
    tick: u64,
    deadline: Instant,
    value: T,
}

pub struct TimerWheel<T> {
    origin: Instant,
    slots: Vec<Vec<Entry<T>>>,
    /// Every tick before this one has been expired.
    cursor: u64,
    next_id: u64,
    len: usize,
    /// Earliest deadline held, if known; `None` with `len > 0` means "recompute".
    earliest: Option<Instant>,
}

impl<T> TimerWheel<T> {
    pub fn new(origin: Instant) -> Self {
        TimerWheel {
            origin,
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            cursor: 0,
            next_id: 0,
            len: 0,
            earliest: None,
        }
    }

    fn tick_of(&self, t: Instant) -> u64 {
        let since = t.saturating_duration_since(self.origin);
        // Round up so a timer never fires before its deadline.
        since.as_nanos().div_ceil(TICK.as_nanos()) as u64
    }

    /// Fire `value` (anything that becomes a `T`: the loop's wheel takes its owners' timers) at
    /// `deadline` (or at the next expire if the deadline has passed).
    pub fn insert(&mut self, deadline: Instant, value: impl Into<T>) -> TimerId {
        let value = value.into();
        let tick = self.tick_of(deadline).max(self.cursor);
        let id = self.next_id;
        self.next_id += 1;
        self.slots[(tick as usize) & (SLOTS - 1)].push(Entry {
            id,
            tick,
            deadline,
            value,
        });
        self.len += 1;
        if self.len == 1 || self.earliest.is_some_and(|e| deadline < e) {
            self.earliest = Some(deadline);
        }
        TimerId { id, tick }
    }

    /// Remove a timer that has not fired; returns its value.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let slot = &mut self.slots[(id.tick as usize) & (SLOTS - 1)];
        let pos = slot.iter().position(|e| e.id == id.id)?;
        let e = slot.swap_remove(pos);
        self.len -= 1;
        if self.earliest == Some(e.deadline) {
            self.earliest = None;
        }
        Some(e.value)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The earliest deadline held.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        if self.earliest.is_none() {
            self.earliest = self.slots.iter().flatten().map(|e| e.deadline).min();
        }
        self.earliest
    }

    /// What must hold for every timer to fire (`Gateway::check`): each in the slot of its
    /// tick, none behind the cursor, the count and the known earliest deadline right.
    pub fn check(&self) -> Result<(), String> {
        let mut held = 0;
        let mut earliest: Option<Instant> = None;
        for (i, slot) in self.slots.iter().enumerate() {
            for e in slot {
                held += 1;
                earliest = Some(earliest.map_or(e.deadline, |t| t.min(e.deadline)));
                if (e.tick as usize) & (SLOTS - 1) != i || e.tick < self.cursor {
                    return Err(format!("timer {} misplaced (tick {})", e.id, e.tick));
                }
            }
        }
        if held != self.len {
            return Err(format!("{held} timers held, {} counted", self.len));
        }
        if self.earliest.is_some_and(|e| Some(e) != earliest) {
            return Err("the earliest deadline known is not the earliest held".into());
        }
        Ok(())
    }

    /// Take every timer whose deadline is at or before `now`, earliest first.
    pub fn expire(&mut self, now: Instant, due: &mut Vec<T>) {
        if self.len == 0 {
            self.cursor = self.cursor.max(self.tick_of(now));
            return;
        }
        let now_tick = self.tick_of(now);
        let start = due.len();
        let mut fired: Vec<(Instant, u64, T)> = Vec::new();
        // Visit each slot at most once per call, even after a long sleep.
        let last = now_tick.min(self.cursor + SLOTS as u64 - 1);
        for tick in self.cursor..=last {
            let slot = &mut self.slots[(tick as usize) & (SLOTS - 1)];
            let mut i = 0;
            while i < slot.len() {
                if slot[i].tick <= now_tick && slot[i].deadline <= now {
                    let e = slot.swap_remove(i);
                    fired.push((e.deadline, e.id, e.value));
                } else {
                    i += 1;
                }
            }
        }
        self.cursor = if now_tick > last { now_tick } else { last };
        // Entries whose deadline is in the current (partial) tick stay for the next call.
        if !fired.is_empty() {
            self.len -= fired.len();
            self.earliest = None;
            fired.sort_by_key(|f| (f.0, f.1));
            due.extend(fired.into_iter().map(|f| f.2));
        }
        debug_assert!(due.len() >= start);
    }
}

/// Lets work run at most once per interval.
#[derive(Debug, Clone)]
pub struct Throttle {
    every: Duration,
    last: Option<Instant>,
}

impl Throttle {
    pub fn new(every: Duration) -> Self {
        Throttle { every, last: None }
    }

    /// True (and counted as a run) when the interval since the last run has passed.
    pub fn try_run(&mut self, now: Instant) -> bool {
        match self.last {
            Some(last) if now < last + self.every => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }

    #[cfg(test)]
    /// When the next run may happen.
    pub fn next_allowed(&self, now: Instant) -> Instant {
        self.last.map_or(now, |l| (l + self.every).max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_holds_through_inserts_cancels_and_expiries_and_finds_a_lost_count() {
        let t0 = Instant::now();
        let mut w: TimerWheel<u32> = TimerWheel::new(t0);
        let ids: Vec<_> = (0..50u32)
            .map(|i| w.insert(t0 + Duration::from_millis(u64::from(i) * 37), i))
            .collect();
        assert_eq!(w.check(), Ok(()));
        w.cancel(ids[0]);
        w.next_deadline();
        assert_eq!(w.check(), Ok(()));
        let mut due = Vec::new();
        w.expire(t0 + Duration::from_millis(900), &mut due);
        assert_eq!(w.check(), Ok(()));
        w.next_deadline();
        assert_eq!(w.check(), Ok(()));
        // A panic between taking an entry out and counting it.
        w.len += 1;
        assert!(w.check().unwrap_err().contains("counted"));
    }

    #[test]
    fn throttle_runs_at_most_once_per_interval() {
        let t0 = Instant::now();
        let mut t = Throttle::new(Duration::from_secs(300));
        assert!(t.try_run(t0));
        assert!(!t.try_run(t0 + Duration::from_secs(299)));
        assert_eq!(
            t.next_allowed(t0 + Duration::from_secs(10)),
            t0 + Duration::from_secs(300)
        );
        assert!(t.try_run(t0 + Duration::from_secs(301)));
        assert!(!t.try_run(t0 + Duration::from_secs(302)));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn fires_in_deadline_order_and_not_early() {
        let t0 = Instant::now();
        let mut w = TimerWheel::<&str>::new(t0);
        w.insert(t0 + ms(30), "c");
        w.insert(t0 + ms(10), "a");
        w.insert(t0 + ms(20), "b");
        assert_eq!(w.next_deadline(), Some(t0 + ms(10)));
        let mut due = Vec::new();
        w.expire(t0 + ms(9), &mut due);
        assert!(due.is_empty());
        w.expire(t0 + ms(25), &mut due);
        assert_eq!(due, vec!["a", "b"]);
        assert_eq!(w.next_deadline(), Some(t0 + ms(30)));
        due.clear();
        w.expire(t0 + ms(30), &mut due);
        assert_eq!(due, vec!["c"]);
        assert!(w.is_empty());
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn deadlines_beyond_one_turn_of_the_wheel_wait_their_round() {
        let t0 = Instant::now();
        let mut w = TimerWheel::<i32>::new(t0);
        let far = t0 + TICK * (SLOTS as u32 + 5);
        w.insert(far, 1);
        w.insert(t0 + TICK * 5, 2);
        let mut due = Vec::new();
        w.expire(t0 + TICK * 6, &mut due);
        assert_eq!(due, vec![2]);
        due.clear();
        w.expire(t0 + TICK * (SLOTS as u32), &mut due);
        assert!(due.is_empty(), "fired a round early");
        w.expire(far, &mut due);
        assert_eq!(due, vec![1]);
    }

    #[test]
    fn a_long_sleep_fires_everything_due() {
        let t0 = Instant::now();
        let mut w = TimerWheel::<u64>::new(t0);
        for i in 0..50u64 {
            w.insert(t0 + ms(i * 97), i);
        }
        let mut due = Vec::new();
        w.expire(t0 + Duration::from_secs(60), &mut due);
        assert_eq!(due, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn cancel_removes_and_updates_the_next_deadline() {
        let t0 = Instant::now();
        let mut w = TimerWheel::<char>::new(t0);
        let a = w.insert(t0 + ms(5), 'a');
        w.insert(t0 + ms(8), 'b');
        assert_eq!(w.cancel(a), Some('a'));
        assert_eq!(w.cancel(a), None);
        assert_eq!(w.next_deadline(), Some(t0 + ms(8)));
        let mut due = Vec::new();
        w.expire(t0 + ms(100), &mut due);
        assert_eq!(due, vec!['b']);
    }

    #[test]
    fn a_past_deadline_fires_on_the_next_expire() {
        let t0 = Instant::now();
        let mut w = TimerWheel::<char>::new(t0);
        let mut due = Vec::new();
        w.expire(t0 + ms(50), &mut due);
        w.insert(t0 + ms(10), 'x');
        w.expire(t0 + ms(50), &mut due);
        assert_eq!(due, vec!['x']);
    }
}
