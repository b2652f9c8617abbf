//! Commit before publish, the loop's side: what an iteration appended goes to the persistence
//! owner (`persist/`); its answer decides whether the frames queued so far are released, and
//! its notices become `status.update` events. Parked turns resume when a hold ends.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::event_loop::Gateway;
use crate::persist::{Notice, Publish};
use crate::rpc::frame;

/// While turns or commands wait for the next iteration, a commit waits until this long after
/// the last one: a transaction per 4 ms slice of a thousand sessions' work would write the same
/// hot pages again each time (fewer turns a second, more checkpoints); a `ping` is answered
/// ahead of the held frames, and an idle or lightly loaded gateway commits every iteration.
pub const COMMIT_GROUP: Duration = Duration::from_millis(12);

/// Whether this iteration commits: always when nothing waits for the next one (the frames a
/// user waits for go out now), else once [`COMMIT_GROUP`] has passed since the last commit.
pub fn commit_due(backlog: bool, last: Option<Instant>, now: Instant) -> bool {
    !backlog || last.is_none_or(|last| now >= last + COMMIT_GROUP)
}

impl Gateway {
    /// Commit what this iteration appended (or, under a backlog, what the group since the
    /// last commit appended), then release the frames if that made it durable.
    pub(crate) fn commit(&mut self, now: Instant) {
        let backlog = self.sessions.has_runnable() || self.runner.has_work();
        if !commit_due(backlog, self.last_commit, now) {
            return;
        }
        self.last_commit = Some(now);
        let publish = self.persist.commit(&mut self.sessions, now);
        self.publish(publish, now);
    }

    /// One step of state.db's background work, once this iteration's answers were written:
    /// it never delays what a commit announces.
    pub(crate) fn background_step(&mut self, now: Instant) {
        if self.persist.background_step() && self.persist.wants_tick() {
            crate::flush::arm(self, now);
        }
    }

    /// Fold the journals of gateways that died while this one ran, before their sessions are
    /// listed or resumed; one state.db cannot take yet is retried on the flush tick.
    pub(crate) fn adopt_dead_journals(&mut self, now: Instant) {
        self.persist.adopt_dead_journals();
        if self.persist.wants_tick() {
            crate::flush::arm(self, now);
        }
    }

    /// The final commit of the shutdown, waiting for another process's lock until `deadline`.
    pub(crate) fn commit_final(&mut self, deadline: Instant, now: Instant) {
        let publish = self.persist.commit_final(&mut self.sessions, deadline, now);
        self.publish(publish, now);
    }

    fn publish(&mut self, publish: Publish, now: Instant) {
        for notice in self.persist.take_notices() {
            self.tell(notice);
        }
        if publish == Publish::Release {
            self.clients.release();
        }
        for rid in self.persist.take_resumed() {
            self.resume_parked(&rid, now);
        }
        if self.persist.wants_tick() {
            crate::flush::arm(self, now);
        }
    }

    fn tell(&mut self, notice: Notice) {
        match notice {
            Notice::Unsaved { rids, text } => {
                for rid in rids {
                    self.emit(&rid, "status.update", json!({"kind": "warn", "text": text}));
                }
            }
            Notice::Holding { text } => {
                // Ahead of the held frames and outside each session's sequence (it is not
                // part of what the held frames announce, and must reach the client now).
                let rids: Vec<String> = self.sessions.keys().cloned().collect();
                let payload = json!({"kind": "warn", "text": text});
                for rid in rids {
                    let params = frame::event_params("status.update", &rid, &payload, None);
                    self.clients.urgent_event(&rid, &params);
                }
            }
            Notice::Saved { text } => {
                let rids: Vec<String> = self.sessions.keys().cloned().collect();
                for rid in rids {
                    self.emit(&rid, "status.update", json!({"kind": "info", "text": text}));
                }
            }
        }
    }

    /// A turn parked by the hold goes on: the tool call it deferred, or its next model call.
    fn resume_parked(&mut self, rid: &str, now: Instant) {
        let Some(turn) = self.turn_mut(rid) else {
            return;
        };
        if turn.machine.deferred() {
            let rid = rid.to_string();
            self.isolated(Some(&rid), now, |gw| {
                crate::session::calls::start_deferred(gw, &rid, now)
            });
        } else if turn.call.is_none()
            && matches!(
                turn.machine.state(),
                crate::session::machine::State::AwaitingModel
            )
        {
            self.schedule(rid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backlog_commits_in_groups_and_an_idle_loop_at_once() {
        let t0 = Instant::now();
        assert!(commit_due(true, None, t0), "the first commit");
        assert!(commit_due(false, Some(t0), t0), "nothing waits: now");
        assert!(!commit_due(true, Some(t0), t0 + COMMIT_GROUP / 2));
        assert!(commit_due(true, Some(t0), t0 + COMMIT_GROUP));
    }
}
