//! The commit logic with a fake store, a fake journal and a fake clock: retries per session,
//! the journal as fallback, the hold and its end.

use super::*;
use crate::session::Session;
use crate::store::ErrorKind;
use crate::transcript::{Message, Role};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

const SEC: Duration = Duration::from_secs(1);

/// What the fake store and journal hold and how they fail; shared with the test.
#[derive(Default)]
struct World {
    /// Stored id → messages committed.
    db: HashMap<String, usize>,
    /// Every store write attempted (stored ids of one transaction).
    attempts: Vec<Vec<String>>,
    /// Sessions whose writes are refused (a title taken meanwhile).
    refused: Vec<String>,
    /// The whole store fails with this.
    down: Option<ErrorKind>,
    /// Journal records written: (seq, stored id, messages).
    journal: Vec<(u64, String, usize)>,
    journal_down: bool,
    cleared: usize,
}

type Shared = Rc<RefCell<World>>;

struct FakeStore(Shared);
struct FakeJournal(Shared, PathBuf);

impl Backend for FakeStore {
    fn write(&mut self, deltas: &[(Delta<'_>, Option<u64>)]) -> Result<(), StoreError> {
        let mut w = self.0.borrow_mut();
        w.attempts
            .push(deltas.iter().map(|(d, _)| d.id.to_string()).collect());
        if let Some(kind) = w.down {
            return Err(StoreError::new(kind, "store down"));
        }
        if let Some((d, _)) = deltas
            .iter()
            .find(|(d, _)| w.refused.iter().any(|r| *r == d.id))
        {
            return Err(StoreError::new(
                ErrorKind::Conflict,
                format!("UNIQUE constraint failed ({})", d.id),
            ));
        }
        for (d, _) in deltas {
            *w.db.entry(d.id.to_string()).or_default() += d.messages.len();
        }
        Ok(())
    }
    fn wait_until(&mut self, _: Option<crate::clock::Budget>) {}
    fn delete(&mut self, stored_id: &str, _: Option<u64>) -> Result<bool, StoreError> {
        let mut w = self.0.borrow_mut();
        if let Some(kind) = w.down {
            return Err(StoreError::new(kind, "store down"));
        }
        Ok(w.db.remove(stored_id).is_some())
    }
}

impl Sink for FakeJournal {
    fn append(&mut self, records: &[Record<'_>]) -> std::io::Result<()> {
        let mut w = self.0.borrow_mut();
        if w.journal_down {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        for r in records {
            w.journal
                .push((r.seq, r.delta.id.to_string(), r.delta.messages.len()));
        }
        Ok(())
    }
    fn rewrite(&mut self, records: &[Record<'_>]) -> std::io::Result<()> {
        self.0.borrow_mut().journal.clear();
        self.append(records)
    }
    fn clear(&mut self) -> std::io::Result<()> {
        let mut w = self.0.borrow_mut();
        w.journal.clear();
        w.cleared += 1;
        Ok(())
    }
    fn path(&self) -> &Path {
        &self.1
    }
}

struct Rig {
    world: Shared,
    p: Persistence<Session, FakeStore, FakeJournal>,
    sessions: HashMap<String, Session>,
    t0: Instant,
}

impl Rig {
    fn new(names: &[&str]) -> Rig {
        let world: Shared = Default::default();
        let p = Persistence::new(
            FakeStore(world.clone()),
            FakeJournal(world.clone(), PathBuf::from("journal")),
            SEC,
        );
        let t0 = Instant::now();
        let mut sessions = HashMap::new();
        for n in names {
            let s = crate::session::bare_session(n, &format!("stored-{n}"));
            sessions.insert(n.to_string(), s);
        }
        let mut rig = Rig {
            world,
            p,
            sessions,
            t0,
        };
        for n in names {
            rig.p.mark_dirty(n);
        }
        rig
    }

    /// A message appended to session `rid` (as a turn does), marked dirty.
    fn say(&mut self, rid: &str) {
        let s = self.sessions.get_mut(rid).unwrap();
        s.append(Message::new(Role::User, Some("hi".into()), 2.0));
        self.p.mark_dirty(rid);
    }

    fn commit(&mut self, at: Duration) -> Publish {
        self.p.commit(&mut self.sessions, self.t0 + at)
    }

    fn stored(&self, rid: &str) -> usize {
        self.world
            .borrow()
            .db
            .get(&format!("stored-{rid}"))
            .copied()
            .unwrap_or(0)
    }

    fn attempts_of(&self, rid: &str) -> usize {
        let id = format!("stored-{rid}");
        self.world
            .borrow()
            .attempts
            .iter()
            .filter(|a| a.contains(&id))
            .count()
    }
}

#[test]
fn a_session_that_cannot_commit_does_not_slow_the_others() {
    let mut r = Rig::new(&["a", "b"]);
    r.world.borrow_mut().refused.push("stored-b".into());
    assert_eq!(r.commit(Duration::ZERO), Publish::Release);
    assert_eq!(r.stored("a"), 0); // a row, no messages yet
    assert!(r.world.borrow().db.contains_key("stored-a"));
    assert!(!r.world.borrow().db.contains_key("stored-b"));
    // b's work is in the journal (so its frames could go), and the client was told once
    assert!(r.world.borrow().journal.iter().any(|j| j.1 == "stored-b"));
    let notices = r.p.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(matches!(&notices[0], Notice::Unsaved { rids, .. } if rids == &["b".to_string()]));
    // every iteration within b's retry interval commits a at once, without trying b
    let b_tries = r.attempts_of("b");
    for i in 1..=5 {
        r.say("a");
        r.say("b");
        let at = Duration::from_millis(100 * i);
        assert_eq!(r.commit(at), Publish::Release);
        assert_eq!(r.stored("a"), i as usize, "a commits every iteration");
    }
    assert_eq!(
        r.attempts_of("b"),
        b_tries,
        "b waits for its own retry time"
    );
    assert!(r.p.take_notices().is_empty(), "told once");
    // b's latest record has all of its messages
    let last_b = r
        .world
        .borrow()
        .journal
        .iter()
        .rfind(|j| j.1 == "stored-b")
        .unwrap()
        .2;
    assert_eq!(last_b, 5);
    // at its retry time b is tried alone, and lands once the conflict is gone
    r.world.borrow_mut().refused.clear();
    assert_eq!(r.commit(SEC), Publish::Release);
    assert_eq!(r.stored("b"), 5);
    assert!(r.p.store_healthy());
    assert!(
        r.world.borrow().cleared >= 1,
        "the journal is removed once nothing needs it"
    );
}

#[test]
fn a_locked_store_is_retried_with_backoff_while_the_journal_keeps_the_work() {
    let mut r = Rig::new(&["a"]);
    assert_eq!(r.commit(Duration::ZERO), Publish::Release);
    r.world.borrow_mut().down = Some(ErrorKind::Busy);
    let mut tried_at = Vec::new();
    let mut said = 0;
    // An iteration every 10 ms for 1.5 s; something new to save in the first eight.
    for t in (10..1500).step_by(10) {
        if said < 8 {
            r.say("a");
            said += 1;
        }
        let before = r.world.borrow().attempts.len();
        assert_eq!(r.commit(Duration::from_millis(t)), Publish::Release);
        if r.world.borrow().attempts.len() > before {
            tried_at.push(t);
        }
    }
    // The first retry after 10 ms, then doubling, capped at the flush interval.
    assert_eq!(tried_at, [10, 20, 40, 80, 160, 320, 640, 1280]);
    assert!(!r.p.store_healthy());
    assert!(r.p.wants_tick());
    let notices = r.p.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    // one journal record per iteration that changed something, each with all pending messages
    let journal = r.world.borrow().journal.clone();
    assert_eq!(journal.len(), 8);
    assert_eq!(journal.last().unwrap().2, 8);
    assert!(journal.windows(2).all(|w| w[0].0 < w[1].0), "seqs increase");
    // the lock goes: the retry writes everything, once
    r.world.borrow_mut().down = None;
    assert_eq!(r.commit(Duration::from_millis(2280)), Publish::Release);
    assert_eq!(r.stored("a"), 8);
    assert!(r.p.store_healthy());
    assert!(r.world.borrow().journal.is_empty());
    assert!(!r.p.holding());
}

#[test]
fn the_flush_tick_comes_sooner_for_a_retry_and_never_spins() {
    let mut r = Rig::new(&["a"]);
    let t0 = r.t0;
    let ms = Duration::from_millis;
    assert_eq!(
        r.p.arm_tick(t0),
        Some(t0 + SEC),
        "nothing to retry: an interval"
    );
    assert_eq!(r.p.arm_tick(t0), None, "already armed");
    r.world.borrow_mut().down = Some(ErrorKind::Busy);
    r.commit(ms(0));
    assert_eq!(r.p.arm_tick(t0), Some(t0 + ms(10)), "the retry is sooner");
    r.p.tick_fired(t0 + ms(10));
    // A retry already due is not re-armed for now: at least the first backoff ahead.
    assert_eq!(r.p.arm_tick(t0 + ms(50)), Some(t0 + ms(60)));
}

#[test]
fn when_nothing_can_be_written_frames_are_held_turns_park_and_both_resume_by_themselves() {
    let mut r = Rig::new(&["a", "b"]);
    assert_eq!(r.commit(Duration::ZERO), Publish::Release);
    r.world.borrow_mut().down = Some(ErrorKind::Full);
    r.world.borrow_mut().journal_down = true;
    r.say("a");
    assert_eq!(r.commit(Duration::from_millis(10)), Publish::Hold);
    assert!(r.p.holding());
    r.p.park("a");
    let notices = r.p.take_notices();
    assert_eq!(notices.len(), 1, "one notice for the outage: {notices:?}");
    assert!(matches!(notices[0], Notice::Holding { .. }), "{notices:?}");
    // still held on every iteration, and said only once
    for i in 2..6 {
        r.say("b");
        assert_eq!(r.commit(Duration::from_millis(100 * i)), Publish::Hold);
    }
    assert!(r.p.take_notices().is_empty());
    assert!(r.p.take_resumed().is_empty());
    // space comes back: the next retry commits, releases and resumes the parked turn
    {
        let mut w = r.world.borrow_mut();
        w.down = None;
        w.journal_down = false;
    }
    assert_eq!(r.commit(Duration::from_millis(1100)), Publish::Release);
    assert!(!r.p.holding());
    assert_eq!(r.stored("a"), 1);
    assert_eq!(r.stored("b"), 4);
    assert_eq!(r.p.take_resumed(), vec!["a".to_string()]);
    let notices = r.p.take_notices();
    assert!(
        notices.iter().any(|n| matches!(n, Notice::Saved { .. })),
        "{notices:?}"
    );
}

#[test]
fn the_journal_alone_ends_a_hold_while_the_store_stays_full() {
    let mut r = Rig::new(&["a"]);
    r.world.borrow_mut().down = Some(ErrorKind::Full);
    r.world.borrow_mut().journal_down = true;
    assert_eq!(r.commit(Duration::ZERO), Publish::Hold);
    r.world.borrow_mut().journal_down = false;
    // the journal is retried at its own retry time, not before
    r.say("a");
    assert_eq!(r.commit(Duration::from_millis(500)), Publish::Hold);
    assert_eq!(r.commit(SEC), Publish::Release);
    assert!(!r.p.holding());
    assert_eq!(r.world.borrow().journal.last().unwrap().2, 1);
}

#[test]
fn a_closed_session_waits_for_its_commit_and_can_be_taken_back() {
    let mut r = Rig::new(&["a"]);
    r.world.borrow_mut().down = Some(ErrorKind::Busy);
    r.say("a");
    assert_eq!(r.commit(Duration::ZERO), Publish::Release);
    let mut s = r.sessions.remove("a").unwrap();
    s.ended = Some((3.0, "tui_close".into()));
    r.p.retire(s);
    assert_eq!(r.commit(Duration::from_millis(10)), Publish::Release);
    assert!(r.p.is_retired("stored-a"));
    let journal = r.world.borrow().journal.clone();
    assert_eq!(journal.len(), 2, "the close is journaled too: {journal:?}");
    let back = r.p.take_retired("stored-a").unwrap();
    assert!(!r.p.is_retired("stored-a"));
    r.sessions.insert("a2".into(), back);
    r.p.mark_dirty("a2");
    r.world.borrow_mut().down = None;
    assert_eq!(r.commit(Duration::from_millis(1010)), Publish::Release);
    assert_eq!(r.stored("a"), 1);
}

/// A delete the store refuses (locked) leaves the closed session waiting for its commit: it
/// is not dropped from memory with its unsaved messages (found by the simulator, seed 1032).
#[test]
fn a_refused_delete_keeps_the_closed_session_for_its_commit() {
    let mut r = Rig::new(&["a"]);
    r.world.borrow_mut().down = Some(ErrorKind::Busy);
    r.say("a");
    r.commit(Duration::ZERO);
    let s = r.sessions.remove("a").unwrap();
    r.p.retire(s);
    r.commit(Duration::from_millis(10));
    assert!(
        r.p.delete_folded("stored-a").is_err(),
        "the locked store refuses"
    );
    assert!(r.p.is_retired("stored-a"), "the closed session stays");
    r.world.borrow_mut().down = None;
    r.commit(Duration::from_millis(1010));
    assert_eq!(r.stored("a"), 1, "its message is committed as before");
    assert!(r.p.delete_folded("stored-a").unwrap());
    assert!(!r.p.is_retired("stored-a"));
    assert_eq!(r.stored("a"), 0);
}

/// A session a dead gateway's journal holds, not folded yet (state.db was locked then), is
/// not deleted meanwhile: the fold would bring it back.
#[test]
fn a_delete_waits_for_the_fold_of_a_dead_journal_holding_the_session() {
    let mut r = Rig::new(&["a"]);
    r.say("a");
    r.commit(Duration::ZERO);
    let s = r.sessions.remove("a").unwrap();
    r.p.retire(s);
    r.commit(Duration::from_millis(10));
    assert_eq!(r.stored("a"), 1);
    r.p.unfolded = vec![Unfolded {
        sessions: vec!["stored-a".into()],
    }];
    let refused = r.p.delete_folded("stored-a").unwrap_err();
    assert!(refused.to_string().contains("try again"), "{refused}");
    assert_eq!(r.stored("a"), 1, "nothing deleted");
    r.p.unfolded.clear();
    assert!(r.p.delete_folded("stored-a").unwrap());
    assert_eq!(r.stored("a"), 0);
}

/// A long closed session stays whole until the store holds it, then its memory is freed
/// `FREE_STEP` messages per commit (no iteration pays for all of it).
#[test]
fn a_long_closed_session_is_freed_a_step_per_commit_once_stored() {
    let mut r = Rig::new(&["a"]);
    assert_eq!(r.commit(Duration::ZERO), Publish::Release);
    let long = FREE_STEP * 2 + 1;
    let mut s = r.sessions.remove("a").unwrap();
    for i in 0..long {
        s.append(Message::new(Role::User, Some(format!("m{i}")), 2.0));
    }
    s.ended = Some((3.0, "tui_close".into()));
    r.world.borrow_mut().down = Some(ErrorKind::Busy);
    r.p.retire(s);
    assert_eq!(r.commit(Duration::from_millis(10)), Publish::Release);
    assert!(r.p.is_retired("stored-a"), "kept whole until stored");
    assert!(!r.p.freeing());
    r.world.borrow_mut().down = None;
    r.commit(Duration::from_millis(1010));
    assert_eq!(r.stored("a"), long);
    assert!(!r.p.is_retired("stored-a"));
    assert!(r.p.freeing(), "a step freed, the rest waits");
    r.commit(Duration::from_millis(1020));
    assert!(r.p.freeing());
    r.commit(Duration::from_millis(1030));
    assert!(!r.p.freeing(), "2 steps and 1 message: freed in 3 commits");
}

#[test]
fn the_final_commit_tries_everything_at_once() {
    let mut r = Rig::new(&["a"]);
    r.world.borrow_mut().refused.push("stored-a".into());
    assert_eq!(r.commit(Duration::ZERO), Publish::Release);
    r.world.borrow_mut().refused.clear();
    let p =
        r.p.commit_final(&mut r.sessions, r.t0 + SEC, r.t0 + Duration::from_millis(1));
    assert_eq!(p, Publish::Release);
    assert!(r.world.borrow().db.contains_key("stored-a"));
}

#[test]
fn the_refused_session_is_the_one_named_when_others_had_nothing_to_write() {
    let mut r = Rig::new(&["a", "b"]);
    assert_eq!(r.commit(Duration::ZERO), Publish::Release);
    r.world.borrow_mut().refused.push("stored-b".into());
    r.p.mark_dirty("a"); // touched, nothing new
    r.say("b");
    assert_eq!(r.commit(Duration::from_millis(10)), Publish::Release);
    let notices = r.p.take_notices();
    assert!(
        matches!(&notices[..], [Notice::Unsaved { rids, .. }] if rids == &["b".to_string()]),
        "{notices:?}"
    );
    assert!(r.world.borrow().journal.iter().all(|j| j.1 == "stored-b"));
}

/// The exit report says what a session lacks: its messages, or only its row when every
/// message is saved (never "0 of N messages unsaved").
#[test]
fn the_exit_report_says_what_is_unsaved() {
    assert_eq!(unsaved_line("s1", 4, 2), "s1 (2 of 4 messages unsaved)");
    let row_only = unsaved_line("s1", 4, 0);
    assert!(!row_only.contains("0 of"), "{row_only}");
    assert_eq!(
        row_only,
        "s1 (its row or queue unsaved; all 4 messages saved)"
    );
}
