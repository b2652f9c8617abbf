//! Commit before publish, the loop's side: what an iteration appended goes to the persistence
//! owner (`persist/`); its answer decides whether the frames queued so far are released, and
//! its notices become `status.update` events. Parked turns resume when a hold ends.

use std::time::Instant;

use serde_json::json;

use crate::event_loop::Gateway;
use crate::persist::{Notice, Publish};
use crate::rpc::frame;

impl Gateway {
    /// Commit what this iteration appended, then release the frames if that made it durable.
    pub(crate) fn commit(&mut self, now: Instant) {
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
            self.client.release();
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
                    self.client.push_ahead(frame::event_frame(&params));
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
