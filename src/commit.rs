//! Commit before publish: what a loop iteration appended is written in one transaction before
//! its frames are released; a failed commit keeps everything in memory and is retried.

use std::time::Instant;

use serde_json::json;

use crate::event_loop::Gateway;
use crate::session::Session;

impl Gateway {
    /// Commit what this iteration appended, unless a failed commit waits for its retry time.
    pub(crate) fn commit(&mut self, now: Instant) {
        if self.commit_retry_at.is_some_and(|t| now < t) {
            return;
        }
        if self.dirty.is_empty() && self.retired.is_empty() {
            return;
        }
        self.checkpoint_due = true;
        crate::flush::arm(self, now);
        if let Err(e) = self.commit_now() {
            self.commit_retry_at = Some(now + self.cfg.flush_interval);
            crate::flush::arm(self, now);
            self.report_commit_error(e);
        }
    }

    /// The flush tick's retry of a failed commit.
    pub(crate) fn retry_commit_now(&mut self, now: Instant) {
        self.commit_retry_at = None;
        self.commit(now);
    }

    /// Write every dirty session and retired session in one transaction.
    pub(crate) fn commit_now(&mut self) -> Result<(), String> {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.retain(|rid| self.sessions.contains_key(rid));
        let refs: Vec<&Session> = dirty
            .iter()
            .filter_map(|rid| self.sessions.get(rid))
            .chain(self.retired.iter())
            .collect();
        let several = refs.len() > 1;
        let result = match self.store.persist(&refs) {
            Ok(marks) => {
                self.apply_marks(&dirty, &marks);
                self.retired.clear();
                Ok(())
            }
            // One bad row must not hold back every other session: commit each on its own.
            Err(e) if several && !crate::store::is_contention(&e) => self.commit_one_by_one(dirty),
            Err(e) => {
                self.dirty = dirty;
                Err(e.to_string())
            }
        };
        if result.is_ok()
            && let Some(e) = self.commit_error.take()
        {
            crate::diag!("[gateway] state.db writable again; saved what was pending ({e})");
        }
        result
    }

    fn apply_marks(&mut self, rids: &[String], marks: &[crate::session::Persisted]) {
        for (rid, mark) in rids.iter().zip(marks) {
            if let Some(s) = self.sessions.get_mut(rid) {
                s.persisted = *mark;
                s.stored_keep = None;
                s.row_dirty = false;
                s.queue_dirty = false;
                s.dirty = false;
            }
        }
    }

    /// The slow path after a failed batch: every session in its own transaction; the ones
    /// that still fail stay pending (and are named on stderr).
    fn commit_one_by_one(&mut self, dirty: Vec<String>) -> Result<(), String> {
        let mut first_error = None;
        for rid in dirty {
            let Some(s) = self.sessions.get(&rid) else {
                continue;
            };
            match self.store.persist(&[s]) {
                Ok(marks) => self.apply_marks(std::slice::from_ref(&rid), &marks),
                Err(e) => {
                    crate::diag!("[gateway] cannot save session {}: {e}", s.stored_id);
                    first_error.get_or_insert(e.to_string());
                    self.dirty.push(rid);
                }
            }
        }
        for s in std::mem::take(&mut self.retired) {
            match self.store.persist(&[&s]) {
                Ok(_) => {}
                Err(e) => {
                    crate::diag!("[gateway] cannot save session {}: {e}", s.stored_id);
                    first_error.get_or_insert(e.to_string());
                    self.retired.push(s);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Tell the user once per outage that transcripts are held in memory.
    fn report_commit_error(&mut self, e: String) {
        if self.commit_error.is_some() {
            return;
        }
        crate::diag!(
            "[gateway] could not save to state.db ({e}); keeping it in memory and retrying"
        );
        let text = format!("could not save the transcript to state.db ({e}); retrying");
        let rids: Vec<String> = self.dirty.clone();
        for rid in rids {
            self.emit(&rid, "status.update", json!({"kind": "warn", "text": text}));
        }
        self.commit_error = Some(e);
    }
}
