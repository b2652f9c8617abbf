//! When to try the store again: after a failure of the store as a whole (locked, full,
//! read-only) nothing is tried before the store's retry time, which backs off from
//! [`FIRST_BACKOFF`] by doubling up to the flush interval (a lock is not waited for inside
//! SQLite, so a short one costs a short delay, a long one a retry per interval); after a
//! failure of one session's data only that session waits, so the others keep committing every
//! iteration. Time is passed in (unit-tested with a fake clock).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The first wait after the store failed as a whole.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(10);

#[derive(Debug)]
pub struct Retries {
    interval: Duration,
    /// While the store fails as a whole: when to try it next, and the wait that led there.
    store: Option<(Instant, Duration)>,
    sessions: HashMap<String, Instant>,
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
        self.store.is_none_or(|(at, _)| now >= at)
    }

    /// Whether this session may be tried now (its own wait, not the store's).
    pub fn session_due(&self, id: &str, now: Instant) -> bool {
        self.sessions.get(id).is_none_or(|at| now >= *at)
    }

    /// The store failed as a whole; true when that starts an outage.
    pub fn store_failed(&mut self, now: Instant) -> bool {
        let backoff = self
            .store
            .map_or(FIRST_BACKOFF, |(_, backoff)| backoff * 2)
            .min(self.interval);
        self.store.replace((now + backoff, backoff)).is_none()
    }

    /// The store took a commit; true when that ends an outage.
    pub fn store_ok(&mut self) -> bool {
        self.store.take().is_some()
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
        let store = self.store.map(|(at, _)| at);
        self.sessions.values().copied().chain(store).min()
    }

    /// Make everything due now (the final commit at shutdown).
    pub fn make_due(&mut self, now: Instant) {
        let store = self.store.as_mut().map(|(at, _)| at);
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
        assert!(r.store_failed(t0));
        assert!(!r.store_due(t0 + ms(9)));
        assert!(r.store_due(t0 + ms(10)));
        assert!(!r.store_failed(t0 + ms(10)));
        assert_eq!(r.next_due(), Some(t0 + ms(30)));
        let mut at = t0 + ms(30);
        for _ in 0..20 {
            r.store_failed(at);
            at = r.next_due().unwrap();
        }
        // Capped at the interval: one try per interval in a long outage.
        r.store_failed(at);
        assert_eq!(r.next_due(), Some(at + Duration::from_secs(1)));
        r.make_due(t0);
        assert!(r.store_due(t0));
        assert!(r.store_ok());
        assert!(!r.store_ok());
        assert!(!r.store_failing());
        // A new outage starts from the first backoff again.
        assert!(r.store_failed(t0));
        assert_eq!(r.next_due(), Some(t0 + ms(10)));
    }
}
