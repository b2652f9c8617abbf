//! A session's recent events for `session.events.since`, bounded in bytes: each ring by its own
//! cap (oldest events leave first), all rings together by [`trim_total`] (the oldest events of
//! any session leave first, so idle sessions give theirs up before the active one).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// What an entry costs besides its text (seq, stamp, the string's header, the deque slot).
const ENTRY_OVERHEAD: usize = 48;

/// The byte caps of the rings, and the order stamp they share.
#[derive(Debug)]
pub struct Rings {
    /// Largest ring of one session.
    pub per_session: usize,
    /// Largest sum of all rings.
    pub total: usize,
    /// Largest ring of a session whose turn has ended (its messages are in the store).
    pub idle: usize,
    /// Bytes recorded since the last [`trim_total`]: the sum is looked at every so often,
    /// not at each event.
    since_trim: usize,
    next_stamp: u64,
}

impl Rings {
    pub fn new(per_session: usize, total: usize, idle: usize) -> Rings {
        Rings {
            per_session,
            total,
            idle,
            since_trim: 0,
            next_stamp: 0,
        }
    }

    /// Whether enough was recorded since the last trim that the sum may be past the total.
    pub fn trim_due(&self) -> bool {
        self.since_trim > self.total / 16
    }
}

struct Entry {
    seq: u64,
    /// Order of recording across every ring.
    stamp: u64,
    params: Box<str>,
}

impl Entry {
    fn cost(&self) -> usize {
        self.params.len() + ENTRY_OVERHEAD
    }
}

#[derive(Default)]
pub struct EventRing {
    events: VecDeque<Entry>,
    bytes: usize,
    /// The highest seq that left the ring (0: none): a client that saw less missed events.
    evicted_through: u64,
}

/// What `session.events.since` answers from a ring.
pub struct Since<'a> {
    /// The params of each kept event after `last_seen`, oldest first.
    pub events: Vec<&'a str>,
    /// Some event after `last_seen` is no longer kept.
    pub truncated: bool,
}

impl EventRing {
    /// Record event `seq` (its params JSON); the oldest events leave while the ring is over its
    /// cap. An event larger than the whole cap is not kept (and counts as left).
    pub fn push(&mut self, rings: &mut Rings, seq: u64, params: &str) {
        let entry = Entry {
            seq,
            stamp: rings.next_stamp,
            params: params.into(),
        };
        rings.next_stamp += 1;
        let cost = entry.cost();
        if cost > rings.per_session {
            self.evicted_through = self.evicted_through.max(seq);
            return;
        }
        while self.bytes + cost > rings.per_session {
            self.pop_oldest();
        }
        self.bytes += cost;
        rings.since_trim += cost;
        self.events.push_back(entry);
    }

    /// A turn ended: keep its newest events within the idle cap, and no room for the rest.
    pub fn settle(&mut self, rings: &Rings) {
        while self.bytes > rings.idle {
            self.pop_oldest();
        }
        self.fit_capacity();
    }

    pub fn since(&self, last_seen: u64) -> Since<'_> {
        Since {
            events: self
                .events
                .iter()
                .filter(|e| e.seq > last_seen)
                .map(|e| &*e.params)
                .collect(),
            truncated: last_seen < self.evicted_through,
        }
    }

    /// Bytes the ring holds (text and per-event overhead).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    fn oldest_stamp(&self) -> Option<u64> {
        self.events.front().map(|e| e.stamp)
    }

    /// Give back the slots of events gone: a ring emptied by the total keeps no room for the
    /// thousands it once held.
    fn fit_capacity(&mut self) {
        if self.events.capacity() > 2 * self.events.len() + 16 {
            self.events
                .shrink_to(self.events.len() + self.events.len() / 2);
        }
    }

    fn pop_oldest(&mut self) {
        if let Some(e) = self.events.pop_front() {
            self.bytes -= e.cost();
            self.evicted_through = self.evicted_through.max(e.seq);
        }
    }
}

/// Bring the sum of `all` rings under `rings.total`, the oldest events of any ring first.
pub fn trim_total<'a>(rings: &mut Rings, all: impl Iterator<Item = &'a mut EventRing>) {
    rings.since_trim = 0;
    let mut all: Vec<&mut EventRing> = all.collect();
    let mut sum: usize = all.iter().map(|r| r.bytes).sum();
    if sum <= rings.total {
        return;
    }
    let mut oldest: BinaryHeap<Reverse<(u64, usize)>> = all
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some(Reverse((r.oldest_stamp()?, i))))
        .collect();
    while sum > rings.total {
        let Some(Reverse((_, i))) = oldest.pop() else {
            break;
        };
        let ring = &mut all[i];
        let before = ring.bytes;
        ring.pop_oldest();
        sum -= before - ring.bytes;
        if let Some(stamp) = ring.oldest_stamp() {
            oldest.push(Reverse((stamp, i)));
        }
    }
    for ring in all {
        ring.fit_capacity();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, len: usize) -> String {
        format!("{seq:>4}{}", "x".repeat(len - 4))
    }

    fn seqs(ring: &EventRing, last_seen: u64) -> Vec<u64> {
        ring.since(last_seen)
            .events
            .iter()
            .map(|p| p[..4].trim().parse().unwrap())
            .collect()
    }

    #[test]
    fn a_ring_keeps_the_newest_events_within_its_bytes_and_says_what_was_lost() {
        let cost = 100 + ENTRY_OVERHEAD;
        let mut rings = Rings::new(3 * cost, usize::MAX, usize::MAX);
        let mut ring = EventRing::default();
        for seq in 1..=2 {
            ring.push(&mut rings, seq, &event(seq, 100));
        }
        assert_eq!(seqs(&ring, 0), [1, 2]);
        assert!(!ring.since(0).truncated);
        for seq in 3..=5 {
            ring.push(&mut rings, seq, &event(seq, 100));
        }
        assert_eq!(seqs(&ring, 0), [3, 4, 5]);
        assert_eq!(ring.bytes(), 3 * cost);
        assert!(ring.since(0).truncated && ring.since(1).truncated);
        assert!(!ring.since(2).truncated, "nothing after 2 was lost");
        assert!(!ring.since(u64::MAX).truncated);
        // An event larger than the cap is not kept, and a client before it missed it.
        ring.push(&mut rings, 6, &event(6, 10_000));
        assert_eq!(seqs(&ring, 2), [3, 4, 5]);
        assert!(ring.since(5).truncated);
        assert!(!ring.since(6).truncated);
    }

    #[test]
    fn an_ended_turn_keeps_its_newest_events_within_the_idle_cap_and_no_spare_room() {
        let cost = 100 + ENTRY_OVERHEAD;
        let rings = &mut Rings::new(10_000 * cost, usize::MAX, 2 * cost);
        let mut ring = EventRing::default();
        for seq in 1..=5_000 {
            ring.push(rings, seq, &event(seq, 100));
        }
        ring.settle(rings);
        assert_eq!(seqs(&ring, 0), [4_999, 5_000]);
        assert!(ring.since(0).truncated && !ring.since(4_998).truncated);
        assert!(ring.events.capacity() < 100, "{}", ring.events.capacity());
    }

    #[test]
    fn the_total_gives_up_the_oldest_events_of_any_session_first() {
        let cost = 100 + ENTRY_OVERHEAD;
        let mut rings = Rings::new(10 * cost, 4 * cost, usize::MAX);
        let (mut idle, mut busy) = (EventRing::default(), EventRing::default());
        for seq in 1..=3 {
            idle.push(&mut rings, seq, &event(seq, 100));
        }
        for seq in 1..=3 {
            busy.push(&mut rings, seq, &event(seq, 100));
        }
        assert!(rings.trim_due());
        trim_total(&mut rings, [&mut idle, &mut busy].into_iter());
        assert!(!rings.trim_due());
        assert_eq!(idle.bytes() + busy.bytes(), 4 * cost);
        assert_eq!(seqs(&idle, 0), [3]);
        assert_eq!(seqs(&busy, 0), [1, 2, 3]);
        assert!(idle.since(0).truncated && !busy.since(0).truncated);
        // Under the total, nothing leaves.
        trim_total(&mut rings, [&mut idle, &mut busy].into_iter());
        assert_eq!((idle.len(), busy.len()), (1, 3));
    }
}
