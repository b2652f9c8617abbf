//! What the gateway lends the layers below it: [`CallOwners`] over its own fields, so the tool
//! side of a turn (`session/calls.rs`) works on the owners it uses, not on the gateway. The
//! steps only the gateway can take (a run into the poll, the runner's events delivered, the
//! turn ended) go to the gateway-side modules that take them.

use std::time::Instant;

use crate::event_loop::Gateway;
use crate::runner::{RunId, Runner};
use crate::session::calls::{CallOwners, CallParts};
use crate::session::driver::TurnOwners;
use crate::session::registry::Registry;
use crate::tools::asked::Asker;
use crate::tools::runs::{self, Owner};
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
    fn runs_of(&self, job: JobId) -> Vec<RunId> {
        runs::runs_of(self, job)
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
