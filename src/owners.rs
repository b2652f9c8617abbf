//! What the gateway lends the layers below it: [`CallOwners`] and [`TurnOwners`] over its own
//! fields, so the tool side of a turn (`session/calls.rs`) and the driver (`session/driver.rs`,
//! `compaction.rs`, `older.rs`) work on the owners they use, not on the gateway, and
//! [`RunOwners`] for the runs (`tools/runs.rs`, `tools/process/`). The steps only the gateway
//! can take (a run into the poll, the runner's events delivered, a token routed or released, a
//! session's background processes stopped) go to the modules that take them. The
//! `impl Gateway` here is what `methods/` and the loop call: one-line forwards to those.

use std::time::Instant;

use crate::reactor::Slot;
use serde_json::Value;

use crate::event_loop::{Gateway, TokenOwner};
use crate::rpc::Outbox;
use crate::runner::{Closed, RunId};
use crate::session::Session;
use crate::session::calls::{CallOwners, CallParts};
use crate::session::driver::{self, ModelParts, TurnOwners};
use crate::session::ring::Rings;
use crate::session::table::SessionTable;
use crate::timer::{TimerId, TimerWheel};
use crate::tools::asked::Asker;
use crate::tools::runs::{RunControl, RunOwners};
use crate::tools::{Tools, WorkTimer};

/// What approvals and questions ask through on the gateway: the client, the sessions' events,
/// the timers ([`crate::tools::asked::Asker`]).
pub(crate) struct Asking<'a> {
    clients: &'a mut crate::rpc::clients::Clients,
    sessions: &'a mut SessionTable,
    rings: &'a mut Rings,
    timers: &'a mut TimerWheel<crate::event_loop::Timer>,
}

impl Asker for Asking<'_> {
    fn outbox(&mut self) -> &mut dyn Outbox {
        self.clients
    }
    fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
        let Some(s) = self.sessions.get_mut(rid) else {
            return;
        };
        s.emit(self.clients, kind, &payload, self.rings);
        // A subagent's parent hears of it as `subagent.*` (and its parent, up the tree).
        if let Some((parent, events)) = s.relay_to_parent(kind, &payload) {
            for (kind, payload) in events {
                self.emit(&parent, &kind, payload);
            }
        }
        trim_rings(self.sessions, self.rings);
    }
    fn set_timer(&mut self, at: Instant, timer: WorkTimer) -> TimerId {
        self.timers.insert(at, timer)
    }
    fn cancel_timer(&mut self, id: TimerId) {
        self.timers.cancel(id);
    }
}

/// Keep every session's event ring together under the total, now and then.
fn trim_rings(sessions: &mut SessionTable, rings: &mut Rings) {
    if rings.trim_due() {
        let all = sessions.values_mut().map(|s| &mut s.ring);
        crate::session::ring::trim_total(rings, all);
    }
}

impl Gateway {
    /// Put a session in memory.
    pub(crate) fn add_session(&mut self, s: Session) {
        // Callers look the ids up first; a refusal here is a bug, said rather than hidden.
        if let Err(s) = self.sessions.add(s) {
            crate::diag!(
                "[gateway] session {} ({}) is already live; not added again",
                s.runtime_id,
                s.stored_id
            );
        }
    }

    /// The runtime id of the live session with this stored id.
    pub(crate) fn live_rid(&self, stored_id: &str) -> Option<&str> {
        self.sessions.by_stored(stored_id)
    }

    /// The provider's endpoint, as Hermes' `billing_base_url` records it (empty: none).
    /// The endpoint of the provider named `name` (a session's), else of the configured one.
    pub(crate) fn base_url_of(&self, name: &str) -> String {
        self.switched_providers
            .iter()
            .find(|p| p.name() == name)
            .map_or(self.provider.as_ref(), |p| p.as_ref())
            .endpoint()
            .map_or_else(String::new, |e| e.base_url.clone())
    }

    pub(crate) fn provider_base_url(&self) -> String {
        self.provider
            .endpoint()
            .map_or_else(String::new, |e| e.base_url.clone())
    }

    /// Whether new sessions start in fast mode (config.yaml's `agent.service_tier`, or the
    /// last `/fast`).
    pub(crate) fn fast_default(&self) -> bool {
        self.provider.endpoint().is_some_and(|e| e.fast)
    }

    /// The context window of `model` in tokens.
    pub(crate) fn context_window_for(&self, model: &str) -> u64 {
        // The offline model runs whatever the session's model is called.
        let model = if self.provider.name() == "offline" {
            "offline"
        } else {
            model
        };
        crate::model::context::context_window(&self.cfg, model)
    }

    /// The running turn of a session.
    pub(crate) fn turn_mut(&mut self, rid: &str) -> Option<&mut crate::session::turn::Turn> {
        self.sessions.get_mut(rid).and_then(|s| s.turn.as_mut())
    }

    pub(crate) fn mark_dirty(&mut self, rid: &str) {
        if self.sessions.contains_key(rid) {
            self.persist.mark_dirty(rid);
        }
    }

    pub(crate) fn schedule(&mut self, rid: &str) {
        self.sessions.mark_runnable(rid);
    }

    /// Emit an event bound to a session: next seq, into the ring, onto the out-queue.
    pub(crate) fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
        self.asking().1.emit(rid, kind, payload);
    }

    pub(crate) fn emit_delta(&mut self, rid: &str, text: &str) {
        if let Some(s) = self.sessions.get_mut(rid) {
            s.emit_delta(&mut self.clients, text, &mut self.rings);
        }
        trim_rings(&mut self.sessions, &mut self.rings);
    }

    /// The tools (their approvals and questions), and the client and timers they ask through.
    pub(crate) fn asking(&mut self) -> (&mut Tools, Asking<'_>) {
        let env = Asking {
            clients: &mut self.clients,
            sessions: &mut self.sessions,
            rings: &mut self.rings,
            timers: &mut self.timers,
        };
        (&mut self.tools, env)
    }

    /// Append the user's prompt and start a turn for it.
    pub(crate) fn start_prompt(&mut self, rid: &str, text: String, now: Instant) {
        driver::start_prompt(self, rid, text, now);
    }

    /// Run `text` as the session's next prompt: now when it is idle, else after the running
    /// turn (queued, and stored with the queue). Whether it was queued.
    pub(crate) fn submit_prompt(&mut self, rid: &str, text: String, now: Instant) -> bool {
        driver::submit_prompt(self, rid, text, now)
    }

    /// Drive the runnable turns (none while the client is not reading); true when one
    /// streamed text.
    pub(crate) fn drive_turns(&mut self, now: Instant, budget: &crate::clock::Budget) -> bool {
        !self.paused() && driver::drive_turns(self, now, budget)
    }

    /// Do work on behalf of `owner`'s session; a panic in it ends that turn alone.
    pub(crate) fn isolated(
        &mut self,
        owner: Option<&str>,
        now: Instant,
        work: impl FnOnce(&mut Gateway),
    ) {
        driver::isolated(self, owner, now, work);
    }

    pub(crate) fn emit_info(&mut self, rid: &str) {
        driver::emit_info(self, rid);
    }

    /// Stop a running turn: abort the model call, keep what it said, end it `interrupted`.
    pub(crate) fn interrupt_turn(&mut self, rid: &str, now: Instant) -> bool {
        driver::interrupt_turn(self, rid, now)
    }

    /// End a session's row and take it out of memory; it stays resumable from the store.
    pub(crate) fn retire(&mut self, rid: &str, reason: &str, now: Instant) {
        // Its background delegations end with it; their results join its queue, kept below.
        crate::delegation::parent_closing(self, rid, now);
        // Prompts still waiting for their images were accepted: kept like the queued ones.
        let unsent = crate::methods::images::take_unsent(self, rid);
        if let Some(s) = self.sessions.get_mut(rid)
            && !unsent.is_empty()
        {
            s.queued.extend(unsent);
            s.queue_dirty = true;
        }
        driver::retire(self, rid, reason, now);
    }

    /// Start summarising the older part of the session's transcript as its turn.
    pub(crate) fn start_compaction(
        &mut self,
        rid: &str,
        reply_to: Option<crate::rpc::frame::Id>,
        focus: Option<&str>,
        now: Instant,
    ) -> bool {
        crate::session::compaction::start(self, rid, reply_to, focus, now)
    }
}

impl CallOwners for Gateway {
    fn sessions(&mut self) -> &mut SessionTable {
        &mut self.sessions
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
            max_turns: self.cfg.max_turns,
            shutting_down: self.shutdown.is_some(),
            clock: self.clock,
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
    fn checkpoint_first(&mut self, rid: &str, tool: &str, args: &Value, now: Instant) -> bool {
        crate::checkpoints::before_call(self, rid, tool, args, now)
    }
}

impl crate::checkpoints::CheckpointOwners for Gateway {
    fn checkpoints(&mut self) -> &mut crate::checkpoints::Checkpoints {
        &mut self.checkpoints
    }
    fn checkpoint_home(&self) -> std::path::PathBuf {
        self.cfg.home.clone()
    }
    fn session_dir(&self, rid: &str) -> Option<String> {
        let s = self.sessions.get(rid)?;
        Some(crate::tools::files::session_here(
            &self.cfg.home,
            &s.stored_id,
            &s.cwd,
        ))
    }
    fn first_in_turn(&mut self, rid: &str, dir: &std::path::Path) -> bool {
        let Some(turn) = self.sessions.get_mut(rid).and_then(|s| s.turn.as_mut()) else {
            return false;
        };
        if turn.checkpointed.iter().any(|d| d == dir) {
            return false;
        }
        turn.checkpointed.push(dir.to_path_buf());
        true
    }
}

impl TurnOwners for Gateway {
    fn emit_delta(&mut self, rid: &str, text: &str) {
        Gateway::emit_delta(self, rid, text);
    }
    fn turn_slot(&mut self, rid: &str) -> Slot {
        self.reactor.slot(TokenOwner::Turn(rid.to_string()))
    }
    fn hold_for_mcp(&mut self, rid: &str) -> Option<Vec<String>> {
        let servers = crate::mcp::pending(&self.mcp)?;
        crate::mcp::hold_turn(&mut self.mcp, rid);
        Some(servers)
    }
    fn release_turn_slot(&mut self, rid: &str) {
        self.reactor.release(&TokenOwner::Turn(rid.to_string()));
    }
    fn model_parts(&mut self) -> ModelParts<'_> {
        ModelParts {
            sessions: &mut self.sessions,
            providers: crate::model::Providers {
                default: self.provider.as_mut(),
                switched: &mut self.switched_providers,
            },
            tools: &self.tools.set,
            home: &self.cfg.home,
            skills: Some(&self.skills),
            events: &mut self.scratch,
        }
    }
    fn session_info(&mut self, rid: &str) -> Option<Value> {
        let tools = self.tools.set.toolsets();
        let mcp = crate::mcp::status(&self.mcp);
        let skills = crate::methods::skills::info(self);
        self.sessions.get(rid).map(|s| s.info(tools, skills, mcp))
    }
    fn compaction_window(&self, model: &str) -> u64 {
        crate::session::compaction::context_window(&self.cfg, model)
    }
    fn retire_session(&mut self, s: Session) {
        self.persist.retire(s);
    }
    fn fresh_names(&mut self, title: Option<&str>, started_at: f64) -> (String, Option<String>) {
        use crate::session::naming;
        let id = naming::new_stored_id(&self.sessions, &self.persist, started_at);
        let store = self.persist.store();
        let title = title.map(|t| naming::unique_title(&self.sessions, store, t, &id));
        (id, title)
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
    fn set_timer(&mut self, at: Instant, timer: WorkTimer) {
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
    fn effects(&mut self) -> &mut crate::effects::Effects {
        &mut self.effects
    }
}

impl crate::mcp::McpOwners for Gateway {
    fn mcp(&mut self) -> &mut crate::mcp::Mcp {
        &mut self.mcp
    }
    fn home(&self) -> std::path::PathBuf {
        self.cfg.home.clone()
    }
    fn kill_grace(&self) -> std::time::Duration {
        self.cfg.kill_grace
    }
    fn session_open(&self) -> bool {
        self.sessions.keys().next().is_some()
    }
    fn sessions_idle(&self) -> Vec<(String, bool)> {
        self.sessions
            .values()
            .map(|s| (s.runtime_id.clone(), !s.running()))
            .collect()
    }
    fn sockets(&mut self) -> impl crate::mcp::http::Sockets + '_ {
        self.exchange_sockets()
    }
}
