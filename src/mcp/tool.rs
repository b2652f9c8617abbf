//! One MCP server tool as a [`Tool`]: its start queues a `tools/call` for the server (the
//! client in `mod.rs` writes it to the server's stdin) and returns `Start::Later`; the answer
//! (or the server's end) puts the result in [`Calls`] and makes the job due, and the step
//! hands it over. The per-call timeout is a wake at the deadline. One mechanism: stepped calls.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::tools::{JobId, Start, Tool, ToolContext, ToolResult};

/// A `tools/call` sent and not answered.
pub struct Pending {
    pub server: String,
    pub request: u64,
    pub deadline: Instant,
}

/// What the MCP tools share with the client: requests to write, calls in flight, results.
#[derive(Default)]
pub struct Calls {
    /// `(server, line)` to write to the server's stdin, in order.
    pub outgoing: Vec<(String, Vec<u8>)>,
    pub pending: HashMap<JobId, Pending>,
    pub results: HashMap<JobId, ToolResult>,
    /// The servers ready for calls.
    pub ready: std::collections::HashSet<String>,
    pub next_request: u64,
}

impl Calls {
    pub fn request_id(&mut self) -> u64 {
        self.next_request += 1;
        self.next_request
    }

    /// The job waiting for `request` of `server`.
    pub fn job_of(&self, server: &str, request: u64) -> Option<JobId> {
        self.pending
            .iter()
            .find(|(_, p)| p.server == server && p.request == request)
            .map(|(job, _)| *job)
    }

    /// Whether `job` still waits for its server's answer.
    pub fn is_pending(&self, job: JobId) -> bool {
        self.pending.contains_key(&job)
    }

    /// Tell the server a call is abandoned (`notifications/cancelled`).
    fn cancel(&mut self, job: JobId, reason: &str) {
        if let Some(p) = self.pending.remove(&job) {
            let line = super::wire::notification(
                "notifications/cancelled",
                json!({"requestId": p.request, "reason": reason}),
            );
            self.outgoing.push((p.server, line));
        }
    }
}

pub type Shared = Rc<RefCell<Calls>>;

pub struct McpTool {
    pub name: String,
    pub server: String,
    /// `mcp-<server>`, Hermes' toolset of a server's tools.
    pub toolset: String,
    /// The server's own name for it.
    pub tool: String,
    pub description: String,
    pub schema: Value,
    pub timeout: Duration,
    pub calls: Shared,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn toolset(&self) -> &str {
        &self.toolset
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let mut calls = self.calls.borrow_mut();
        if !calls.ready.contains(&self.server) {
            return Start::Done(ToolResult::error(format!(
                "MCP server '{}' is not connected",
                self.server
            )));
        }
        let arguments = if args.is_object() {
            args.clone()
        } else {
            json!({})
        };
        let request = calls.request_id();
        let line = super::wire::request(
            request,
            "tools/call",
            json!({"name": self.tool, "arguments": arguments,
                   "_meta": {"progressToken": request}}),
        );
        calls.outgoing.push((self.server.clone(), line));
        let deadline = ctx.now + self.timeout;
        calls.pending.insert(
            ctx.job,
            Pending {
                server: self.server.clone(),
                request,
                deadline,
            },
        );
        ctx.wake_at(deadline);
        Start::Later
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        let mut calls = self.calls.borrow_mut();
        if let Some(result) = calls.results.remove(&ctx.job) {
            return Some(result);
        }
        let deadline = calls.pending.get(&ctx.job)?.deadline;
        if ctx.now >= deadline {
            calls.cancel(ctx.job, "timed out");
            return Some(ToolResult::error(format!(
                "MCP tool {} timed out after {}s",
                self.name,
                self.timeout.as_secs_f64()
            )));
        }
        ctx.wake_at(deadline);
        None
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        let mut calls = self.calls.borrow_mut();
        calls.results.remove(&job);
        calls.cancel(job, "interrupted by the user");
        Some(ToolResult::error("interrupted"))
    }
}
