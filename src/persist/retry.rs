//! When to try the store again: after a failure of the store as a whole (locked, full,
//! read-only) nothing is tried before the store's retry time, which backs off from
//! [`FIRST_BACKOFF`] by doubling up to the flush interval (a lock is not waited for inside
//! SQLite, so a short one costs a short delay, a long one a retry per interval); after a
//! failure of one session's data only that session waits, so the others keep committing every
//! iteration. A lock another process holds for a moment (another gateway starting on the same
//! home, Hermes writing) is routine: it is said only once it has kept commits out for the
//! flush interval. Time is passed in (unit-tested with a fake clock).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The first wait after the store failed as a whole.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(10);

#[derive(Debug)]
pub struct Retries {
    interval: Duration,
    /// While the store fails as a whole.
    store: Option<Outage>,
    sessions: HashMap<String, Instant>,
}

/// A failure of the store as a whole, until a commit lands.
#[derive(Debug, Clone, Copy)]
struct Outage {
    /// When to try the store next, and the wait that led there.
    next: Instant,
    backoff: Duration,
    /// The first failed commit.
    since: Instant,
    /// The user was told.
    told: bool,
}

impl Retries {
    pub fn new(interval: Duration) -> Retries {
        Retries {
            interval,
            store: None,
            sessions: HashMap::new(),
        }
    }

    /// Whether the store may be tried now.
    pub fn store_due(&self, now: Instant) -> bool {
        self.store.is_none_or(|o| now >= o.next)
    }

    /// Whether this session may be tried now (its own wait, not the store's).
    pub fn session_due(&self, id: &str, now: Instant) -> bool {
        self.sessions.get(id).is_none_or(|at| now >= *at)
    }

    /// The store failed as a whole (`busy`: another process holds its lock); true when the
    /// user is to be told now: at once when it is full, read-only or damaged, and when it is
    /// locked once the lock has kept commits out for the interval.
    pub fn store_failed(&mut self, now: Instant, busy: bool) -> bool {
        let (since, backoff, told) = match self.store {
            Some(o) => (o.since, o.backoff * 2, o.told),
            None => (now, FIRST_BACKOFF, false),
        };
        let backoff = backoff.min(self.interval);
        let tell = !told && (!busy || now.saturating_duration_since(since) >= self.interval);
        self.store = Some(Outage {
            next: now + backoff,
            backoff,
            since,
            told: told || tell,
        });
        tell
    }

    /// The store took a commit; true when that ends an outage the user was told of.
    pub fn store_ok(&mut self) -> bool {
        self.store.take().is_some_and(|o| o.told)
    }

    /// One session's data was refused; true when it was not waiting already.
    pub fn session_failed(&mut self, id: &str, now: Instant) -> bool {
        self.sessions
            .insert(id.to_string(), now + self.interval)
            .is_none()
    }

    /// One session committed; true when it had been refused before.
    pub fn session_ok(&mut self, id: &str) -> bool {
        self.sessions.remove(id).is_some()
    }

    pub fn store_failing(&self) -> bool {
        self.store.is_some()
    }

    /// The earliest retry time, if anything waits.
    pub fn next_due(&self) -> Option<Instant> {
        let store = self.store.map(|o| o.next);
        self.sessions.values().copied().chain(store).min()
    }

    /// Make everything due now (the final commit at shutdown).
    pub fn make_due(&mut self, now: Instant) {
        let store = self.store.as_mut().map(|o| &mut o.next);
        for at in self.sessions.values_mut().chain(store) {
            *at = (*at).min(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_session_waits_alone() {
        let t0 = Instant::now();
        let mut r = Retries::new(Duration::from_secs(1));
        assert!(r.session_failed("a", t0));
        assert!(!r.session_failed("a", t0));
        assert!(!r.session_due("a", t0 + Duration::from_millis(999)));
        assert!(r.session_due("b", t0));
        assert!(r.store_due(t0));
        assert!(r.session_due("a", t0 + Duration::from_secs(1)));
        assert_eq!(r.next_due(), Some(t0 + Duration::from_secs(1)));
        assert!(r.session_ok("a"));
        assert!(!r.session_ok("a"));
        assert_eq!(r.next_due(), None);
    }

    #[test]
    fn a_store_outage_is_reported_once_and_retried_with_backoff_up_to_the_interval() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut r = Retries::new(Duration::from_secs(1));
        assert!(r.store_failed(t0, false));
        assert!(!r.store_due(t0 + ms(9)));
        assert!(r.store_due(t0 + ms(10)));
        assert!(!r.store_failed(t0 + ms(10), false));
        assert_eq!(r.next_due(), Some(t0 + ms(30)));
        let mut at = t0 + ms(30);
        for _ in 0..20 {
            r.store_failed(at, false);
            at = r.next_due().unwrap();
        }
        // Capped at the interval: one try per interval in a long outage.
        r.store_failed(at, false);
        assert_eq!(r.next_due(), Some(at + Duration::from_secs(1)));
        r.make_due(t0);
        assert!(r.store_due(t0));
        assert!(r.store_ok());
        assert!(!r.store_ok());
        assert!(!r.store_failing());
        // A new outage starts from the first backoff again.
        assert!(r.store_failed(t0, false));
        assert_eq!(r.next_due(), Some(t0 + ms(10)));
    }

    #[test]
    fn a_lock_is_said_only_once_it_has_kept_commits_out_for_the_interval() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut r = Retries::new(Duration::from_secs(1));
        // Another process's moment of writing: retried quietly, and its end not announced.
        assert!(!r.store_failed(t0, true));
        assert!(!r.store_failed(t0 + ms(10), true));
        assert!(!r.store_ok());
        // A lock that lasts: said once, when the interval has passed, and its end said too.
        let mut told = Vec::new();
        let mut at = t0;
        while at < t0 + ms(3000) {
            if r.store_failed(at, true) {
                told.push(at - t0);
            }
            at = r.next_due().unwrap();
        }
        assert_eq!(told, [ms(1270)], "the first try at or past the interval");
        assert!(r.store_ok());
    }
}
