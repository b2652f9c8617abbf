//! The timers the sessions' work sets — turns, tool calls, runs, approvals, questions, MCP
//! servers — as plain values, so their owners (layer 2) need nothing of the loop; the loop's
//! own timer (`event_loop::Timer`) wraps one of these and fires it back to its owner.

use crate::runner::{RunId, RunTimer};
use crate::tools::JobId;

/// What a timer of the sessions' work does when it fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkTimer {
    /// A turn asked to be driven again at this time.
    TurnWake(String),
    /// Something about a run of the process runner is due.
    Run(RunId, RunTimer),
    /// Send a run's live output.
    LiveOutput(RunId),
    /// An approval waited too long: deny it.
    ApprovalTimeout(String),
    /// A tool call asked to be stepped at this time.
    ToolWake(JobId),
    /// A question to the user (`clarify`) waited too long.
    ClarifyTimeout(String),
    /// An MCP server's connect deadline or restart is due.
    Mcp(String),
    /// A subagent (this runtime id) reached `delegation.child_timeout_seconds`.
    SubagentTimeout(String),
}
