//! What the gateway lends the layers below it: [`CallOwners`] over its own fields, so the tool
//! side of a turn (`session/calls.rs`) works on the owners it uses, not on the gateway, and
//! [`RunOwners`] for the runs (`tools/runs.rs`, `tools/process/`). The steps only the gateway
//! can take (a run into the poll, the runner's events delivered, the turn ended) go to the
//! modules that take them.

use std::time::Instant;

use serde_json::Value;

use crate::event_loop::Gateway;
use crate::rpc::Outbox;
use crate::runner::{Closed, RunEnd, RunEvent, RunId, Runner};
use crate::session::calls::{CallOwners, CallParts};
use crate::session::driver::TurnOwners;
use crate::session::registry::Registry;
use crate::tools::Timer;
use crate::tools::asked::Asker;
use crate::tools::runs::{self, Owner, RunControl, RunOwners};
use crate::tools::{JobId, Tools};

impl CallOwners for Gateway {
    fn sessions(&mut self) -> &mut Registry {
        &mut self.sessions
    }
    fn tools(&mut self) -> &mut Tools {
        &mut self.tools
    }
    fn runner(&mut self) -> &mut Runner {
        &mut self.runner
    }
    fn asking(&mut self) -> (&mut Tools, impl Asker + '_) {
        Gateway::asking(self)
    }
    fn call_parts(&mut self) -> CallParts<'_> {
        CallParts {
            sessions: &self.sessions,
            tools: &mut self.tools,
            runner: &mut self.runner,
            store: Some(self.persist.store()),
            home: &self.cfg.home,
            command_timeout: self.cfg.command_timeout,
            approval_timeout: self.cfg.approval_timeout,
            clarify_timeout: self.cfg.clarify_timeout,
            shutting_down: self.shutdown.is_some(),
        }
    }
    fn holding(&self) -> bool {
        self.persist.holding()
    }
    fn park(&mut self, rid: &str) {
        self.persist.park(rid);
    }
    fn mark_dirty(&mut self, rid: &str) {
        Gateway::mark_dirty(self, rid);
    }
    fn watch_run(&mut self, run: RunId, job: JobId, now: Instant) -> std::io::Result<()> {
        runs::watch(self, run, Owner::Job(job), now)
    }
    fn settle_runs(&mut self, now: Instant) {
        runs::after_runner(self, now);
    }
    fn after_tool(&mut self, now: Instant) {
        crate::tools::process::after_tool(self, now);
    }
    fn end_turn(&mut self, rid: &str, status: &str, error: Option<String>, now: Instant) {
        Gateway::end_turn(self, rid, status, error, now);
    }
    fn isolated(&mut self, owner: Option<&str>, now: Instant, work: impl FnOnce(&mut Self)) {
        Gateway::isolated(self, owner, now, work);
    }
}

impl TurnOwners for Gateway {
    fn emit_delta(&mut self, rid: &str, text: &str) {
        Gateway::emit_delta(self, rid, text);
    }
    fn turn_token(&mut self, rid: &str) -> mio::Token {
        self.alloc_token(crate::event_loop::Route::Turn(rid.to_string()))
    }
}

impl RunOwners for Gateway {
    fn tools(&mut self) -> &mut Tools {
        &mut self.tools
    }
    fn runner(&mut self) -> &mut dyn RunControl {
        &mut self.runner
    }
    fn watch_run(&mut self, run: RunId) -> std::io::Result<()> {
        Gateway::watch_run(self, run)
    }
    fn unwatch_run(&mut self, closed: Closed) {
        Gateway::unwatch_run(self, closed);
    }
    fn set_timer(&mut self, at: Instant, timer: Timer) {
        self.timers.insert(at, timer);
    }
    fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
        Gateway::emit(self, rid, kind, payload);
    }
    fn outbox(&mut self) -> &mut dyn Outbox {
        Gateway::outbox(self)
    }
    fn paused(&self) -> bool {
        Gateway::paused(self)
    }
    fn shutting_down(&self) -> bool {
        self.shutdown.is_some()
    }
    fn has_session(&self, rid: &str) -> bool {
        self.sessions.contains_key(rid)
    }
    fn isolated(&mut self, owner: Option<&str>, now: Instant, work: impl FnOnce(&mut Self)) {
        Gateway::isolated(self, owner, now, work);
    }
    fn run_ended(&mut self, job: JobId, end: RunEnd, now: Instant) {
        crate::session::calls::run_ended(self, job, end, now);
    }
    fn service_event(&mut self, event: RunEvent, now: Instant) {
        crate::mcp::on_run_event(self, event, now);
    }
    fn submit_prompt(&mut self, rid: &str, text: String, now: Instant) {
        Gateway::submit_prompt(self, rid, text, now);
    }
}
