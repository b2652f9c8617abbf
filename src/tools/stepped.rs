//! The calls of one tool that go on past their start ([`Stepped`]): each call's work in
//! progress, advanced in the start's budget and then a step at a time until it has its
//! result, and dropped when it is done or cancelled. The file tools and `session_search` keep
//! their long calls here.

use std::collections::HashMap;

use super::{JobId, Start, ToolContext, ToolResult};

/// A call's work that goes on over several steps (a read, a search, an edit).
pub(crate) trait Advance {
    /// Work on until `ctx.deadline`: the result once the work is over.
    fn advance(&mut self, ctx: &ToolContext<'_>) -> Option<ToolResult>;
}

/// One tool's calls under way, by job. `fail` makes the tool's failed result (Hermes' tools
/// differ: most answer `{error}`, `session_search` `{success: false, error}`).
pub(crate) struct Stepped<W> {
    work: HashMap<JobId, W>,
    fail: fn(String) -> ToolResult,
}

impl<W> Default for Stepped<W> {
    fn default() -> Self {
        Stepped::failing_with(ToolResult::error)
    }
}

impl<W> Stepped<W> {
    pub(crate) fn failing_with(fail: fn(String) -> ToolResult) -> Self {
        Stepped {
            work: HashMap::new(),
            fail,
        }
    }
}

impl<W: Advance> Stepped<W> {
    /// Advance new work in the start's budget; what is left goes on in the next step.
    pub(crate) fn start(&mut self, ctx: &mut ToolContext<'_>, mut work: W) -> Start {
        match work.advance(ctx) {
            Some(result) => Start::Done(result),
            None => {
                self.work.insert(ctx.job, work);
                ctx.again();
                Start::Later
            }
        }
    }

    /// Advance the work of `ctx.job` (`lost`: the failure when there is none).
    pub(crate) fn step(&mut self, ctx: &mut ToolContext<'_>, lost: &str) -> Option<ToolResult> {
        let Some(work) = self.work.get_mut(&ctx.job) else {
            return Some((self.fail)(lost.to_string()));
        };
        let result = work.advance(ctx);
        match result {
            Some(_) => {
                self.work.remove(&ctx.job);
            }
            None => ctx.again(),
        }
        result
    }

    pub(crate) fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        self.work.remove(&job);
        Some((self.fail)("interrupted".to_string()))
    }
}
