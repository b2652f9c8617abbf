//! The state of a running turn: the model call in flight, its tools, its approval.

use crate::model::{ModelCall, TokenUsage, ToolCall};
use crate::session::transcript::{Message, Role};
use crate::timer::TimerId;

/// The number the next turn gets.
static NEXT_NUMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub struct Turn {
    /// Which turn this is, unique in the process: an end decided for one turn never ends the
    /// next one of its session.
    pub number: u64,
    /// The model request in flight; `None` before the first call starts.
    pub call: Option<Box<dyn ModelCall>>,
    /// When the call in flight started (for the session's model time).
    pub call_started: Option<std::time::Instant>,
    /// Where the call's sockets are watched: their readiness comes back to this session.
    pub slot: crate::reactor::Slot,
    /// Text of the current model call so far.
    pub round_text: String,
    pub round_reasoning: String,
    /// What this round's answer asked to have sent back.
    pub round_replay: crate::transcript::Replay,
    /// Tool calls the current model call asked for.
    pub round_tool_calls: Vec<ToolCall>,
    pub round_finish: Option<(String, TokenUsage)>,
    pub round_error: Option<String>,
    /// Everything said in this turn, for `message.complete`.
    pub text: String,
    /// On the runnable list for the next drive.
    pub scheduled: bool,
    pub wake: Option<TimerId>,
    /// Where the turn is: model call, tool calls, approval (`machine.rs`).
    pub machine: crate::session::machine::TurnMachine,
    /// The partial row: the `messages` row holding the partial text written so far of this
    /// round's assistant message.
    pub partial_row: Option<i64>,
    /// Bytes of `round_text` already written to the partial row.
    pub partial_written: usize,
    /// `session.steer` texts waiting for the next model call of this turn.
    pub steer: Vec<String>,
    /// This turn asks the model for a summary instead of answering the user.
    pub compaction: Option<Box<crate::session::compaction::Job>>,
    /// The turn failed inside the gateway; it ends with this error however it is stopped.
    pub failure: Option<String>,
    /// Directories snapshotted (or being snapshotted) before a call of this turn changed
    /// them: one checkpoint per directory per turn (`src/checkpoints/`).
    pub checkpointed: Vec<std::path::PathBuf>,
}

/// What a closed model round leaves behind.
pub struct RoundEnd {
    /// The assistant message to append, if the round said or asked anything.
    pub message: Option<Message>,
    pub calls: Vec<ToolCall>,
    pub error: Option<String>,
}

impl Turn {
    pub fn new(slot: crate::reactor::Slot) -> Self {
        Turn {
            number: NEXT_NUMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            call: None,
            call_started: None,
            slot,
            round_text: String::new(),
            round_reasoning: String::new(),
            round_replay: Default::default(),
            round_tool_calls: Vec::new(),
            round_finish: None,
            round_error: None,
            text: String::new(),
            scheduled: false,
            wake: None,
            machine: Default::default(),
            partial_row: None,
            partial_written: 0,
            steer: Vec::new(),
            compaction: None,
            failure: None,
            checkpointed: Vec::new(),
        }
    }

    /// Whether this round has text not yet written to its partial row.
    pub fn partial_pending(&self) -> bool {
        // A summary being written is not a message of the transcript.
        self.compaction.is_none()
            && self.call.is_some()
            && self.round_text.len() > self.partial_written
    }

    /// Close the current model round (its call is over or aborted) and build its assistant
    /// message; `interrupted` marks one cut short.
    pub fn close_round(&mut self, interrupted: bool, now_unix: f64) -> RoundEnd {
        self.call = None;
        let text = std::mem::take(&mut self.round_text);
        let reasoning = std::mem::take(&mut self.round_reasoning);
        let replay = std::mem::take(&mut self.round_replay);
        let calls = std::mem::take(&mut self.round_tool_calls);
        let finish = self.round_finish.take();
        let error = self.round_error.take();
        let row = self.partial_row.take();
        self.partial_written = 0;
        let said = !text.is_empty() || !calls.is_empty() || !reasoning.is_empty();
        let message = (said || row.is_some()).then(|| {
            let mut m = Message::new(
                Role::Assistant,
                (!text.is_empty()).then_some(text),
                now_unix,
            );
            if !calls.is_empty() {
                m.tool_calls = Some(crate::tools::tool_calls_json(&calls));
            }
            m.reasoning = (!reasoning.is_empty()).then_some(reasoning);
            m.replay = replay;
            m.finish_reason = match (&finish, interrupted, &error) {
                (_, true, _) => Some("interrupted".into()),
                (Some((reason, _)), _, _) => Some(reason.clone()),
                (None, _, Some(_)) => Some("error".into()),
                _ => None,
            };
            m.token_count = finish.map(|(_, usage)| usage.output as i64);
            m.row_id = row;
            m
        });
        RoundEnd {
            message,
            calls,
            error,
        }
    }
}
