//! The state of a running turn: model call in flight (later: tools, approvals).

use std::collections::VecDeque;
use std::time::Instant;

use crate::model::{ModelCall, TokenUsage, ToolCall};
use crate::timer::TimerId;

pub struct Turn {
    /// The model request in flight; `None` before the first call starts.
    pub call: Option<Box<dyn ModelCall>>,
    /// Token that routes the call's readiness to this session.
    pub token: mio::Token,
    /// Text of the current model call so far.
    pub round_text: String,
    pub round_reasoning: String,
    /// Tool calls the current model call asked for.
    pub round_tool_calls: Vec<ToolCall>,
    pub round_finish: Option<(String, TokenUsage)>,
    pub round_error: Option<String>,
    /// Everything said in this turn, for `message.complete`.
    pub text: String,
    pub started: Instant,
    /// Model calls made in this turn.
    pub rounds: u32,
    /// On the runnable list for the next drive.
    pub scheduled: bool,
    pub wake: Option<TimerId>,
    /// Tool calls of the last model round not yet run.
    pub pending_tools: VecDeque<ToolCall>,
    /// The tool call running now (its run id in the tool registry).
    pub tool: Option<u64>,
    /// The approval this turn waits for.
    pub approval: Option<String>,
    /// An interrupt arrived while a tool was dying; end the turn when it is reaped.
    pub interrupting: bool,
}

impl Turn {
    pub fn new(token: mio::Token, now: Instant) -> Self {
        Turn {
            call: None,
            token,
            round_text: String::new(),
            round_reasoning: String::new(),
            round_tool_calls: Vec::new(),
            round_finish: None,
            round_error: None,
            text: String::new(),
            started: now,
            rounds: 0,
            scheduled: false,
            wake: None,
            pending_tools: VecDeque::new(),
            tool: None,
            approval: None,
            interrupting: false,
        }
    }
}
