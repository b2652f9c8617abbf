//! The live sessions: by runtime id, by stored id, and which have a turn to drive. The three
//! indexes are private and kept in step here, so no caller can leave one stale.

use std::collections::{HashMap, VecDeque};

use super::Session;

struct Entry {
    /// The stored id `by_stored` holds this session under (see [`SessionTable::reindex`]).
    indexed_as: String,
    session: Session,
}

#[derive(Default)]
pub struct SessionTable {
    by_rid: HashMap<String, Entry>,
    /// Runtime id of each live session, by stored id.
    by_stored: HashMap<String, String>,
    /// Sessions with a turn to drive, each once, in the order they became runnable.
    runnable: VecDeque<String>,
    /// Sessions whose older messages are still being read from state.db (`older.rs`).
    loading: Vec<String>,
}

impl SessionTable {
    pub fn new() -> SessionTable {
        SessionTable::default()
    }

    /// Put a session in; refused (handed back) when its runtime or stored id is already live.
    pub fn add(&mut self, s: Session) -> Result<(), Box<Session>> {
        if self.by_rid.contains_key(&s.runtime_id) || self.by_stored.contains_key(&s.stored_id) {
            return Err(Box::new(s));
        }
        self.by_stored
            .insert(s.stored_id.clone(), s.runtime_id.clone());
        if s.older.is_some() {
            self.loading.push(s.runtime_id.clone());
        }
        self.by_rid.insert(
            s.runtime_id.clone(),
            Entry {
                indexed_as: s.stored_id.clone(),
                session: s,
            },
        );
        Ok(())
    }

    /// Take a session out, with its place on the runnable list.
    pub fn take(&mut self, rid: &str) -> Option<Session> {
        let e = self.by_rid.remove(rid)?;
        self.by_stored.remove(&e.indexed_as);
        self.runnable.retain(|r| r != rid);
        self.done_loading(rid);
        Some(e.session)
    }

    /// After a session's `stored_id` changed (compaction continues it under a new row): index
    /// it under the new one. False (index unchanged) when another live session has that id.
    pub fn reindex(&mut self, rid: &str) -> bool {
        let Some(e) = self.by_rid.get_mut(rid) else {
            return false;
        };
        if e.indexed_as == e.session.stored_id {
            return true;
        }
        if self.by_stored.contains_key(&e.session.stored_id) {
            return false;
        }
        self.by_stored.remove(&e.indexed_as);
        e.indexed_as = e.session.stored_id.clone();
        self.by_stored.insert(e.indexed_as.clone(), rid.to_string());
        true
    }

    pub fn get(&self, rid: &str) -> Option<&Session> {
        self.by_rid.get(rid).map(|e| &e.session)
    }

    pub fn get_mut(&mut self, rid: &str) -> Option<&mut Session> {
        self.by_rid.get_mut(rid).map(|e| &mut e.session)
    }

    pub fn contains_key(&self, rid: &str) -> bool {
        self.by_rid.contains_key(rid)
    }

    /// The runtime id of the live session with this stored id.
    pub fn by_stored(&self, stored_id: &str) -> Option<&str> {
        self.by_stored.get(stored_id).map(String::as_str)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_rid.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_rid.is_empty()
    }

    /// `(runtime id, session)` in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Session)> {
        self.by_rid.iter().map(|(rid, e)| (rid, &e.session))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.by_rid.keys()
    }

    pub fn values(&self) -> impl Iterator<Item = &Session> {
        self.by_rid.values().map(|e| &e.session)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Session> {
        self.by_rid.values_mut().map(|e| &mut e.session)
    }

    /// Put the session's turn on the runnable list (once); false when it has no turn.
    pub fn mark_runnable(&mut self, rid: &str) -> bool {
        let Some(turn) = self.get_mut(rid).and_then(|s| s.turn.as_mut()) else {
            return false;
        };
        if !turn.scheduled {
            turn.scheduled = true;
            self.runnable.push_back(rid.to_string());
        }
        true
    }

    /// Whether some turn waits to be driven.
    pub fn has_runnable(&self) -> bool {
        !self.runnable.is_empty()
    }

    /// Whether some session's older messages wait to be read.
    pub fn has_loading(&self) -> bool {
        !self.loading.is_empty()
    }

    /// Whether the session's older messages are still read a step per iteration.
    pub fn is_loading(&self, rid: &str) -> bool {
        self.loading.iter().any(|r| r == rid)
    }

    /// The session whose older messages are read next.
    pub fn next_loading(&self) -> Option<String> {
        self.loading.first().cloned()
    }

    /// The session's older messages are read (or cannot be, for now).
    pub fn done_loading(&mut self, rid: &str) {
        self.loading.retain(|r| r != rid);
    }

    /// How many sessions have a turn to drive.
    pub fn runnable_count(&self) -> usize {
        self.runnable.len()
    }

    /// The first session of the runnable list, taken off it (the rest keep their place ahead
    /// of those that become runnable later); the caller clears the turn's `scheduled` as it
    /// drives it.
    pub fn pop_runnable(&mut self) -> Option<String> {
        self.runnable.pop_front()
    }

    /// What must hold between the indexes (`Gateway::check`): each live session is indexed
    /// under its runtime id and the stored id it was added or reindexed with, every turn
    /// marked scheduled is on the runnable list (else it is never driven), and the lists name
    /// live sessions only.
    pub fn check(&self) -> Result<(), String> {
        if self.by_stored.len() != self.by_rid.len() {
            return Err(format!(
                "{} sessions, {} stored ids indexed",
                self.by_rid.len(),
                self.by_stored.len()
            ));
        }
        for (rid, e) in &self.by_rid {
            if e.session.runtime_id != *rid {
                return Err(format!("session {} filed as {rid}", e.session.runtime_id));
            }
            if self.by_stored.get(&e.indexed_as) != Some(rid) {
                return Err(format!("session {rid} not indexed as {}", e.indexed_as));
            }
            let scheduled = e.session.turn.as_ref().is_some_and(|t| t.scheduled);
            if scheduled && !self.runnable.contains(rid) {
                return Err(format!(
                    "session {rid}'s turn is scheduled and not runnable"
                ));
            }
        }
        let named = self.runnable.iter().chain(&self.loading);
        if let Some(rid) = named.into_iter().find(|r| !self.by_rid.contains_key(*r)) {
            return Err(format!("{rid} is listed and not live"));
        }
        Ok(())
    }

    /// The whole runnable list, emptied.
    #[cfg(test)]
    pub fn take_runnable(&mut self) -> Vec<String> {
        self.runnable.drain(..).collect()
    }
}

/// Persistence reads and marks the live sessions through this.
impl crate::persist::Sessions<Session> for SessionTable {
    fn get(&self, rid: &str) -> Option<&Session> {
        SessionTable::get(self, rid)
    }
    fn get_mut(&mut self, rid: &str) -> Option<&mut Session> {
        SessionTable::get_mut(self, rid)
    }
}

impl std::ops::Index<&str> for SessionTable {
    type Output = Session;

    fn index(&self, rid: &str) -> &Session {
        self.get(rid).expect("no live session with this runtime id")
    }
}

impl std::ops::Index<&String> for SessionTable {
    type Output = Session;

    fn index(&self, rid: &String) -> &Session {
        &self[rid.as_str()]
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::session::turn::Turn;

    fn session(rid: &str, stored: &str) -> Session {
        crate::session::bare_session(rid, stored)
    }

    fn with_turn(rid: &str, stored: &str) -> Session {
        let mut s = session(rid, stored);
        s.turn = Some(Turn::new(crate::reactor::Slot::detached(99)));
        s
    }

    #[test]
    fn add_and_take_keep_the_stored_index() {
        let mut r = SessionTable::new();
        assert!(r.add(session("a", "s1")).is_ok());
        assert!(r.add(session("b", "s2")).is_ok());
        assert_eq!(r.by_stored("s1"), Some("a"));
        assert_eq!(r.by_stored("s2"), Some("b"));
        assert_eq!(r.len(), 2);
        let s = r.take("a").expect("a is live");
        assert_eq!(s.stored_id, "s1");
        assert_eq!(r.by_stored("s1"), None);
        assert!(r.get("a").is_none());
        assert_eq!(r.by_stored("s2"), Some("b"));
        assert!(r.take("a").is_none());
        // The stored id is free again.
        assert!(r.add(session("c", "s1")).is_ok());
        assert_eq!(r.by_stored("s1"), Some("c"));
    }

    #[test]
    fn duplicates_are_refused_and_change_nothing() {
        let mut r = SessionTable::new();
        assert!(r.add(session("a", "s1")).is_ok());
        let back = r.add(session("a", "s9")).err().unwrap();
        assert_eq!(back.stored_id, "s9");
        let back = r.add(session("b", "s1")).err().unwrap();
        assert_eq!(back.runtime_id, "b");
        assert_eq!(r.len(), 1);
        assert_eq!(r.by_stored("s1"), Some("a"));
        assert_eq!(r.by_stored("s9"), None);
        assert!(!r.contains_key("b"));
    }

    #[test]
    fn reindex_follows_a_changed_stored_id() {
        let mut r = SessionTable::new();
        assert!(r.add(session("a", "old")).is_ok());
        assert!(r.add(session("b", "taken")).is_ok());
        r.get_mut("a").unwrap().stored_id = "new".into();
        assert!(r.reindex("a"));
        assert_eq!(r.by_stored("old"), None);
        assert_eq!(r.by_stored("new"), Some("a"));
        // Taking it frees the id it is indexed under, not a stale one.
        assert!(r.add(session("c", "old")).is_ok());
        r.get_mut("a").unwrap().stored_id = "taken".into();
        assert!(!r.reindex("a"));
        assert_eq!(r.by_stored("taken"), Some("b"));
        r.take("a");
        assert_eq!(r.by_stored("new"), None);
        assert_eq!(r.by_stored("old"), Some("c"));
        assert_eq!(r.by_stored("taken"), Some("b"));
    }

    #[test]
    fn runnable_lists_each_turn_once_and_never_an_absent_session() {
        let mut r = SessionTable::new();
        assert!(r.add(with_turn("a", "s1")).is_ok());
        assert!(r.add(with_turn("b", "s2")).is_ok());
        assert!(r.add(session("idle", "s3")).is_ok());
        assert!(r.mark_runnable("a"));
        assert!(r.mark_runnable("a"));
        assert!(r.mark_runnable("b"));
        assert!(!r.mark_runnable("idle"));
        assert!(!r.mark_runnable("absent"));
        r.take("b");
        assert_eq!(r.take_runnable(), vec!["a".to_string()]);
        assert!(!r.has_runnable());
        // Still scheduled until the driver clears it: not listed twice.
        r.mark_runnable("a");
        assert!(!r.has_runnable());
        r.get_mut("a").unwrap().turn.as_mut().unwrap().scheduled = false;
        r.mark_runnable("a");
        assert_eq!(r.take_runnable(), vec!["a".to_string()]);
    }

    #[test]
    fn check_finds_a_turn_scheduled_and_never_driven_and_a_stale_index() {
        let mut r = SessionTable::new();
        assert!(r.add(with_turn("a", "s1")).is_ok());
        r.mark_runnable("a");
        assert_eq!(r.check(), Ok(()));
        // A panic between taking it off the list and driving it: never driven again.
        r.pop_runnable();
        assert!(
            r.check()
                .unwrap_err()
                .contains("scheduled and not runnable")
        );
        r.get_mut("a").unwrap().turn.as_mut().unwrap().scheduled = false;
        assert_eq!(r.check(), Ok(()));
        // A stored id changed and not reindexed is still found under the old one: whole.
        r.get_mut("a").unwrap().stored_id = "s2".into();
        assert_eq!(r.check(), Ok(()));
        r.by_stored.clear();
        assert!(r.check().is_err(), "a session its stored id does not find");
    }

    #[test]
    fn turns_left_over_keep_their_place_ahead_of_later_ones() {
        let mut r = SessionTable::new();
        for rid in ["a", "b", "c", "d"] {
            assert!(r.add(with_turn(rid, &format!("s-{rid}"))).is_ok());
        }
        for rid in ["a", "b", "c"] {
            r.mark_runnable(rid);
        }
        assert_eq!(r.pop_runnable().as_deref(), Some("a"));
        assert_eq!(r.pop_runnable().as_deref(), Some("b"));
        r.mark_runnable("d");
        assert_eq!(r.take_runnable(), ["c", "d"]);
        assert!(!r.has_runnable());
    }
}
