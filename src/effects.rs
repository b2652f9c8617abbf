//! What a layer below the loop asks of the parts above it. Instead of calling back up (a run's
//! end into the turn that waits, a service's event into its owner, a notice into the next
//! prompt) it finishes its own bookkeeping and pushes an [`Effect`]; the loop's one dispatcher
//! (`Gateway::dispatch` in `event_loop.rs`) drains the queue and routes each, so a layer's
//! state is never half-changed by a call re-entering it, and unit tests read the effects a
//! step produced instead of faking the parts above.

use std::collections::VecDeque;

use serde_json::Value;

use crate::rpc::frame::Id;
use crate::runner::{RunEnd, RunEvent};
use crate::session::machine::Status;
use crate::tools::JobId;

/// One thing a layer wants done by another.
#[derive(Debug)]
pub(crate) enum Effect {
    /// A run of a turn's tool call ended: the tool makes the call's result of it.
    RunEnded { job: JobId, end: RunEnd },
    /// An event of a service's run (an MCP server, a checkpoint's git command), as it happened.
    ServiceEvent(RunEvent),
    /// Run `text` as session `rid`'s next prompt (a background process's notice).
    SubmitPrompt { rid: String, text: String },
    /// The snapshot a tool call of `rid` waited for is over: the call starts.
    SnapshotOver { rid: String },
    /// A full `rollback.restore` took `rid`'s directory back: its last exchange leaves the
    /// history too, and request `reply_to` is answered `result` with how many messages went.
    UndoExchange {
        rid: String,
        reply_to: Id,
        result: Value,
    },
    /// Session `rid`'s `session.info` changed (an MCP server's tools): send it again.
    SessionInfo { rid: String },
    /// The tool side decided that turn `turn` of `rid` is over (`machine.rs`): the driver
    /// closes it (`message.complete`, the next queued prompt) unless it is already gone.
    TurnEnded(TurnEnd),
    /// Session `rid` left memory: its background processes stop, its title call is dropped,
    /// clients stop hearing of it.
    SessionLeft { rid: String },
    /// A turn of `rid` completed: its session may get a title.
    TurnCompleted { rid: String },
    /// `delegate_task` call `job` of `rid` started: its subagents are spawned.
    Delegate { rid: String, job: JobId },
    /// A subagent's turn ended: its parent hears it, its entry joins the call's result, and
    /// the session leaves memory.
    SubagentEnded(crate::session::subagent::End),
    /// `delegate_task` call `job` was stopped: its subagents still running stop too.
    SubagentsCancelled { job: JobId },
    /// A host's tool panicked in a call of `rid`'s turn: the turn ends with an internal error.
    TurnFailed { rid: String },
    /// Work of the gateway's own panicked and was caught: the loop goes on only if its tables
    /// are whole (`Gateway::check`).
    Panicked,
}

/// The end the tool side decided for turn `turn` of session `rid`.
#[derive(Debug)]
pub(crate) struct TurnEnd {
    pub rid: String,
    pub turn: u64,
    pub status: Status,
    pub error: Option<String>,
}

/// The effects pushed and not yet dispatched, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    queue: VecDeque<Effect>,
}

impl Effects {
    pub(crate) fn push(&mut self, effect: Effect) {
        self.queue.push_back(effect);
    }

    pub(crate) fn pop(&mut self) -> Option<Effect> {
        self.queue.pop_front()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Take the ends of `job`'s runs out of the queue (a caller that must record them now).
    pub(crate) fn take_run_ends(&mut self, job: JobId) -> Vec<RunEnd> {
        let mut ends = Vec::new();
        for effect in std::mem::take(&mut self.queue) {
            match effect {
                Effect::RunEnded { job: j, end } if j == job => ends.push(end),
                other => self.queue.push_back(other),
            }
        }
        ends
    }

    /// Take the end decided for turn `turn` of `rid` out of the queue (a caller that closes
    /// the turn now: an interrupt, a session leaving).
    pub(crate) fn take_turn_end(
        &mut self,
        rid: &str,
        turn: u64,
    ) -> Option<(Status, Option<String>)> {
        let at = self.queue.iter().position(
            |e| matches!(e, Effect::TurnEnded(end) if end.rid == rid && end.turn == turn),
        )?;
        match self.queue.remove(at) {
            Some(Effect::TurnEnded(end)) => Some((end.status, end.error)),
            _ => None,
        }
    }

    /// Everything pushed and not dispatched, in order (unit tests read what a step produced).
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Effect> {
        self.queue.iter()
    }
}
