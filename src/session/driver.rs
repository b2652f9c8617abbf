//! Driving turns: a prompt starts a turn; each drive advances its model call, turns model
//! events into session events, and ends the round with the assistant message, tool calls or
//! the end of the turn. Also putting sessions into and out of the registry, and their event
//! emission.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use mio::Token;
use serde_json::{Value, json};

use crate::event_loop::{Gateway, Route};
use crate::model::{CallContext, ModelEvent, ModelRequest, Progress};
use crate::rpc::Outbox;
use crate::session::Session;
use crate::session::calls::CallOwners;
use crate::session::registry::Registry;
use crate::session::ring::Rings;
use crate::session::transcript::{Message, Role};
use crate::session::turn::Turn;
use crate::timer::{TimerId, TimerWheel};
use crate::tools::Timer;
use crate::tools::asked::Asker;
use crate::util;

/// What the user reads when a turn failed inside the gateway.
const INTERNAL_ERROR: &str =
    "[tui-gateway hit an internal error and ended this turn; the other sessions are unaffected]";

/// The key of the status-bar notice that says yolo is on.
const YOLO_NOTICE: &str = "tui-gateway.yolo";

/// What approvals and questions ask through on the gateway: the client, the sessions' events,
/// the timers ([`crate::tools::asked::Asker`]).
pub(crate) struct Asking<'a> {
    client: &'a mut crate::rpc::client_conn::ClientConn,
    sessions: &'a mut Registry,
    rings: &'a mut Rings,
    timers: &'a mut TimerWheel<crate::event_loop::Timer>,
}

impl Asker for Asking<'_> {
    fn outbox(&mut self) -> &mut dyn Outbox {
        self.client
    }
    fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
        if let Some(s) = self.sessions.get_mut(rid) {
            s.emit(self.client, kind, &payload, self.rings);
        }
        trim_rings(self.sessions, self.rings);
    }
    fn set_timer(&mut self, at: Instant, timer: Timer) -> TimerId {
        self.timers.insert(at, timer)
    }
    fn cancel_timer(&mut self, id: TimerId) {
        self.timers.cancel(id);
    }
}

/// Keep every session's event ring together under the total, now and then.
fn trim_rings(sessions: &mut Registry, rings: &mut Rings) {
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

    /// Take a session out of memory.
    pub(crate) fn take_session(&mut self, rid: &str) -> Option<Session> {
        self.sessions.take(rid)
    }

    /// The runtime id of the live session with this stored id.
    pub(crate) fn live_rid(&self, stored_id: &str) -> Option<&str> {
        self.sessions.by_stored(stored_id)
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
    pub(crate) fn turn_mut(&mut self, rid: &str) -> Option<&mut Turn> {
        self.sessions.get_mut(rid).and_then(|s| s.turn.as_mut())
    }

    pub(crate) fn alloc_token(&mut self, route: Route) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        self.by_token.insert(t, route);
        t
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
            s.emit_delta(&mut self.client, text, &mut self.rings);
        }
        trim_rings(&mut self.sessions, &mut self.rings);
    }

    /// The tools (their approvals and questions), and the client and timers they ask through.
    pub(crate) fn asking(&mut self) -> (&mut crate::tools::Tools, Asking<'_>) {
        let env = Asking {
            client: &mut self.client,
            sessions: &mut self.sessions,
            rings: &mut self.rings,
            timers: &mut self.timers,
        };
        (&mut self.tools, env)
    }

    /// Append the user's prompt and start a turn for it.
    pub(crate) fn start_prompt(&mut self, rid: &str, text: String, now: Instant) {
        start_prompt(self, rid, text, now);
    }

    /// Run `text` as the session's next prompt: now when it is idle, else after the running
    /// turn (queued, and stored with the queue). Whether it was queued.
    pub(crate) fn submit_prompt(&mut self, rid: &str, text: String, now: Instant) -> bool {
        submit_prompt(self, rid, text, now)
    }

    /// Drive the runnable turns; true when one streamed text (the loop arms the flush tick
    /// that checkpoints it: the turn does not know the flush).
    pub(crate) fn drive_turns(&mut self, now: Instant) -> bool {
        if self.paused() {
            return false;
        }
        let mut streamed = false;
        let list = self.sessions.take_runnable();
        for rid in list {
            if let Some(turn) = self.sessions.get_mut(&rid).and_then(|s| s.turn.as_mut()) {
                turn.scheduled = false;
                self.isolated(Some(&rid), now, |gw| streamed |= gw.drive(&rid, now));
            }
        }
        streamed
    }

    /// Do work on behalf of `owner`'s session; a panic in it ends that session's turn with an
    /// error instead of ending the gateway (every other session goes on). Work nobody owns runs
    /// unguarded: its panic reaches the loop, which starts the shutdown.
    pub(crate) fn isolated(
        &mut self,
        owner: Option<&str>,
        now: Instant,
        work: impl FnOnce(&mut Gateway),
    ) {
        let Some(rid) = owner else {
            return work(self);
        };
        let Err(panic) = catch_unwind(AssertUnwindSafe(|| work(self))) else {
            return;
        };
        let text = util::panic_text(&panic);
        crate::diag!("[gateway-panic] a turn of session {rid} failed: {text}");
        let failed = catch_unwind(AssertUnwindSafe(|| self.fail_turn(rid, now)));
        if failed.is_err() {
            // Failing the turn cleanly failed too: drop it (its model call and tools with it).
            crate::session::calls::abandon(self, rid, now);
            if let Some(turn) = self.sessions.get_mut(rid).and_then(|s| s.turn.take()) {
                self.by_token.remove(&turn.token);
            }
        }
    }

    /// End a turn that hit an internal error: what it said so far is kept, its model call and
    /// tools are stopped, the transcript says what happened, and `message.complete` carries
    /// status `error`.
    fn fail_turn(&mut self, rid: &str, now: Instant) {
        let Some(turn) = self.turn_mut(rid) else {
            return;
        };
        turn.failure = Some(INTERNAL_ERROR.to_string());
        self.interrupt_turn(rid, now);
    }

    /// Drive one turn; true when it streamed text the flush tick must checkpoint.
    fn drive(&mut self, rid: &str, now: Instant) -> bool {
        let Some(s) = self.sessions.get_mut(rid) else {
            return false;
        };
        let Some(turn) = s.turn.as_mut() else {
            return false;
        };
        if turn.call.is_none() && self.persist.holding() {
            // Nothing can be saved: the next model call waits for the store.
            self.persist.park(rid);
            return false;
        }
        if turn.call.is_none() {
            let first = turn.machine.rounds() == 0;
            // Steering reaches the model as a user note before its next call.
            let steer = std::mem::take(&mut turn.steer);
            if !steer.is_empty() {
                let note = format!("{}{}", crate::session::STEER_PREFIX, steer.join("\n"));
                s.append(Message::new(Role::User, Some(note), util::unix_now()));
                // Out of the stored queue in the same commit that stores the note.
                s.queue_dirty = true;
                self.mark_dirty(rid);
            }
            let Some(s) = self.sessions.get_mut(rid) else {
                return false;
            };
            let Some(turn) = s.turn.as_mut() else {
                return false;
            };
            turn.machine.model_call_started();
            let mut ctx = CallContext {
                registry: self.poll.registry(),
                token: turn.token,
            };
            let compacting = turn.compaction.is_some();
            if s.system_prompt.is_none() {
                // Built once per session in memory, as Hermes freezes it (a stable prefix).
                s.system_prompt = Some(crate::session::system_prompt::build(
                    &self.cfg.home,
                    &s.cwd,
                    self.tools.registry.schemas(),
                ));
            }
            let req = ModelRequest {
                system: match compacting {
                    true => None,
                    false => s.system_prompt.as_deref(),
                },
                messages: match turn.compaction.as_ref() {
                    Some(job) => &job.request,
                    None => &s.transcript,
                },
                model: &s.model,
                tools: self.tools.registry.schemas(),
            };
            turn.call = Some(self.provider.start(req, &mut ctx));
            turn.call_started = Some(Instant::now());
            if first && !compacting {
                self.emit(rid, "message.start", Value::Null);
            }
        }
        let mut evs = std::mem::take(&mut self.scratch);
        let progress = {
            let Some(turn) = self.sessions.get_mut(rid).and_then(|s| s.turn.as_mut()) else {
                return false;
            };
            let Some(call) = turn.call.as_mut() else {
                return false;
            };
            let mut ctx = CallContext {
                registry: self.poll.registry(),
                token: turn.token,
            };
            call.advance(&mut ctx, now, &mut evs)
        };
        let mut streamed = false;
        for ev in evs.drain(..) {
            streamed |= on_model_event(self, rid, ev);
        }
        self.scratch = evs;
        match progress {
            Progress::Ready => self.schedule(rid),
            Progress::Wait(Some(at)) => {
                let id = self.timers.insert(at, Timer::TurnWake(rid.to_string()));
                if let Some(turn) = self.sessions.get_mut(rid).and_then(|s| s.turn.as_mut())
                    && let Some(old) = turn.wake.replace(id)
                {
                    self.timers.cancel(old);
                }
            }
            Progress::Wait(None) => {}
            Progress::Finished => {
                let connection = self
                    .turn_mut(rid)
                    .and_then(|t| t.call.as_mut())
                    .and_then(|c| c.take_connection());
                if let Some(connection) = connection {
                    self.provider.recycle(connection);
                }
                count_model_time(self, rid);
                self.end_model_round(rid, now)
            }
        }
        streamed
    }

    /// The model call of this round is over: record the assistant message, then run the tool
    /// calls it asked for or end the turn.
    fn end_model_round(&mut self, rid: &str, now: Instant) {
        let Some(s) = self.sessions.get_mut(rid) else {
            return;
        };
        let Some(turn) = s.turn.as_mut() else { return };
        let round = turn.close_round(false, util::unix_now());
        if turn.compaction.is_some() {
            let result = match round.error {
                Some(e) => Err(e),
                None => Ok(round.message.and_then(|m| m.content).unwrap_or_default()),
            };
            self.close_compaction(rid, result, now);
            return;
        }
        let (calls, error) = (round.calls, round.error);
        if let Some(m) = round.message {
            s.tool_call_count += calls.len() as u64;
            s.append(m);
            self.mark_dirty(rid);
        }
        crate::session::calls::model_answered(self, rid, calls, error, now);
    }

    /// Close the turn: `message.complete`, then `session.info`; then a queued prompt may run.
    pub(crate) fn end_turn(
        &mut self,
        rid: &str,
        status: &str,
        error: Option<String>,
        now: Instant,
    ) {
        let Some(s) = self.sessions.get_mut(rid) else {
            return;
        };
        if s.turn.as_ref().is_some_and(|t| t.compaction.is_some()) {
            let why = error.unwrap_or_else(|| format!("the compaction was {status}"));
            self.close_compaction(rid, Err(why), now);
            return;
        }
        let Some(mut turn) = s.turn.take() else {
            return;
        };
        // A turn that failed inside the gateway ends as an error, however it was stopped.
        let (status, error) = match turn.failure.take() {
            Some(why) => {
                let mut note = Message::new(Role::Assistant, Some(why.clone()), util::unix_now());
                note.finish_reason = Some("error".into());
                s.append(note);
                ("error", Some(why))
            }
            None => (status, error),
        };
        s.last_active = now;
        // Steering that never reached a model call runs as the next prompt instead.
        if !turn.steer.is_empty() {
            s.queued
                .push_front(std::mem::take(&mut turn.steer).join("\n"));
            s.queue_dirty = true;
        }
        if let Some(id) = turn.wake {
            self.timers.cancel(id);
        }
        self.by_token.remove(&turn.token);
        let usage = s.usage();
        let mut payload = json!({
            "text": (!turn.text.is_empty()).then_some(turn.text),
            "usage": usage,
            "status": status,
        });
        if let Some(e) = error {
            payload["error"] = json!(e);
        }
        self.emit(rid, "message.complete", payload);
        self.emit_info(rid);
        self.mark_dirty(rid);
        let background = self.sessions.get_mut(rid).and_then(|s| s.background.take());
        if let Some(bg) = background {
            self.finish_background(rid, bg, now);
            return;
        }
        if self.shutdown.is_some() {
            return;
        }
        let near_window = status == "complete"
            && self.sessions.get(rid).is_some_and(|s| {
                let window = crate::session::compaction::context_window(&self.cfg, &s.model);
                crate::session::compaction::needs_compaction(&s.transcript, window)
            });
        if near_window && self.start_compaction(rid, None, None, now) {
            return;
        }
        self.run_next_queued(rid, now);
    }

    /// The compaction turn is over: tidy it like any turn, then apply or drop its summary.
    fn close_compaction(&mut self, rid: &str, result: Result<String, String>, now: Instant) {
        let Some(turn) = self.sessions.get_mut(rid).and_then(|s| s.turn.take()) else {
            return;
        };
        if let Some(id) = turn.wake {
            self.timers.cancel(id);
        }
        self.by_token.remove(&turn.token);
        if let Some(job) = turn.compaction {
            self.finish_compaction(rid, *job, result, now);
        }
    }

    /// A background task's turn ended: its answer goes to the parent session, and the child
    /// session is ended (it stays in the store, linked by `parent_session_id`).
    fn finish_background(&mut self, rid: &str, bg: crate::session::Background, now: Instant) {
        let text = self
            .sessions
            .get(rid)
            .and_then(|s| s.transcript.last())
            .filter(|m| m.role == Role::Assistant)
            .and_then(|m| m.content.clone())
            .unwrap_or_else(|| "(no answer)".to_string());
        self.emit(
            &bg.parent_rid,
            "background.complete",
            json!({"task_id": bg.task_id, "text": text}),
        );
        self.retire(rid, "background_complete", now);
    }

    /// Start the oldest queued prompt, if any.
    pub(crate) fn run_next_queued(&mut self, rid: &str, now: Instant) {
        run_next_queued(self, rid, now);
    }

    pub(crate) fn emit_info(&mut self, rid: &str) {
        let tools = self.tools.registry.toolsets();
        let mcp = crate::mcp::status(&self.mcp);
        if let Some(info) = self.sessions.get(rid).map(|s| s.info(tools, mcp)) {
            self.emit(rid, "session.info", info);
        }
    }

    /// The TUI's status bar has no yolo mark of its own: a sticky notice stands there while the
    /// session the TUI shows has yolo on. Sent when yolo changes and when a session comes into
    /// view (created, resumed, activated), since the notice belongs to the TUI, not the session.
    pub(crate) fn emit_yolo_notice(&mut self, rid: &str) {
        let Some(on) = self.sessions.get(rid).map(|s| s.yolo) else {
            return;
        };
        if on {
            self.emit(
                rid,
                "notification.show",
                json!({"key": YOLO_NOTICE, "kind": "sticky", "level": "warn", "text": "yolo on"}),
            );
        } else {
            self.emit(rid, "notification.clear", json!({ "key": YOLO_NOTICE }));
        }
    }

    /// Stop a running turn: abort the model call, keep what it said, end it `interrupted`.
    pub(crate) fn interrupt_turn(&mut self, rid: &str, now: Instant) -> bool {
        let Some(s) = self.sessions.get_mut(rid) else {
            return false;
        };
        let Some(turn) = s.turn.as_mut() else {
            return false;
        };
        if let Some(mut call) = turn.call.take() {
            let mut ctx = CallContext {
                registry: self.poll.registry(),
                token: turn.token,
            };
            call.abort(&mut ctx);
            if let Some(started) = turn.call_started.take() {
                s.model_time += started.elapsed();
            }
            let round = turn.close_round(true, util::unix_now());
            // A summary cut short is dropped, not kept as a reply.
            if let Some(m) = round.message.filter(|_| turn.compaction.is_none()) {
                s.tool_call_count += round.calls.len() as u64;
                s.append(m);
                self.mark_dirty(rid);
            }
        }
        if crate::session::calls::interrupt(self, rid, now) {
            // A tool's group is dying; the turn ends when it is reaped.
            return true;
        }
        self.end_turn(rid, "interrupted", None, now);
        true
    }

    /// End a session's row and take it out of memory; it stays resumable from the store.
    pub(crate) fn retire(&mut self, rid: &str, reason: &str, now: Instant) {
        // Taken first so ending the turn does not start the next prompt; steering that never
        // reached the model is kept too, before them.
        let mut queued = self
            .sessions
            .get_mut(rid)
            .map(|s| {
                let mut all: std::collections::VecDeque<String> = s.steer_notes().into();
                all.extend(std::mem::take(&mut s.queued));
                if let Some(turn) = s.turn.as_mut() {
                    turn.steer.clear();
                }
                all
            })
            .unwrap_or_default();
        crate::session::calls::abandon(self, rid, now);
        self.interrupt_turn(rid, now);
        crate::tools::process::session_gone(self, rid, now);
        if let Some(mut s) = self.take_session(rid) {
            // Prompts accepted as `queued` never ran; they are kept, not lost.
            let now_unix = util::unix_now();
            while let Some(text) = queued.pop_front() {
                s.append(Message::new(Role::User, Some(text), now_unix));
                s.queue_dirty = true;
            }
            s.ended = Some((util::unix_now(), reason.to_string()));
            s.row_dirty = true;
            // Its turn's token went with the turn.
            self.persist.retire(s);
        }
    }
}

/// What driving a turn works on beyond the tool side's owners ([`CallOwners`]).
pub(crate) trait TurnOwners: CallOwners {
    /// A `message.delta` of session `rid`.
    fn emit_delta(&mut self, rid: &str, text: &str);
    /// The token the turn of `rid`'s model call is known by in the poll.
    fn turn_token(&mut self, rid: &str) -> Token;
}

/// Append the user's prompt and start a turn for it.
fn start_prompt(gw: &mut impl TurnOwners, rid: &str, text: String, now: Instant) {
    let token = gw.turn_token(rid);
    let Some(s) = gw.sessions().get_mut(rid) else {
        return;
    };
    s.append(Message::new(Role::User, Some(text), util::unix_now()));
    s.last_active = now;
    s.turn = Some(Turn::new(token));
    gw.mark_dirty(rid);
    gw.sessions().mark_runnable(rid);
}

/// Run `text` as the session's next prompt: now when it is idle, else after the running turn
/// (queued, and stored with the queue). Whether it was queued.
fn submit_prompt(gw: &mut impl TurnOwners, rid: &str, text: String, now: Instant) -> bool {
    let Some(s) = gw.sessions().get_mut(rid) else {
        return false;
    };
    // A resumed session still reading its older messages runs it once they are read.
    if s.running() || s.loading() {
        s.queued.push_back(text);
        s.queue_dirty = true;
        gw.mark_dirty(rid);
        return true;
    }
    start_prompt(gw, rid, text, now);
    false
}

/// Start the oldest queued prompt, if any (none while the gateway exits).
fn run_next_queued(gw: &mut impl TurnOwners, rid: &str, now: Instant) {
    if gw.call_parts().shutting_down {
        return;
    }
    let next = gw.sessions().get_mut(rid).and_then(|s| {
        let next = s.queued.pop_front()?;
        s.queue_dirty = true;
        Some(next)
    });
    if let Some(next) = next {
        start_prompt(gw, rid, next, now);
    }
}

/// The call in flight is over: its time counts to the session's model time.
fn count_model_time(gw: &mut impl CallOwners, rid: &str) {
    if let Some(s) = gw.sessions().get_mut(rid)
        && let Some(started) = s.turn.as_mut().and_then(|t| t.call_started.take())
    {
        s.model_time += started.elapsed();
    }
}

/// One model event into the turn and out to the client; true when it was text shown.
fn on_model_event(gw: &mut impl TurnOwners, rid: &str, ev: ModelEvent) -> bool {
    let Some(s) = gw.sessions().get_mut(rid) else {
        return false;
    };
    let Some(turn) = s.turn.as_mut() else {
        return false;
    };
    // A summary being written is not shown as a reply.
    let quiet = turn.compaction.is_some();
    match ev {
        ModelEvent::Text(t) => {
            turn.round_text.push_str(&t);
            turn.text.push_str(&t);
            if !quiet {
                gw.emit_delta(rid, &t);
                return true;
            }
        }
        ModelEvent::Reasoning(t) => {
            turn.round_reasoning.push_str(&t);
            if !quiet {
                gw.emit(rid, "reasoning.delta", json!({ "text": t }));
            }
        }
        ModelEvent::ToolCall(call) if !quiet => turn.round_tool_calls.push(call),
        ModelEvent::ToolCall(_) => {}
        ModelEvent::ToolDrafting(name) if !quiet => {
            gw.emit(rid, "tool.generating", json!({ "name": name }));
        }
        ModelEvent::ToolDrafting(_) => {}
        ModelEvent::Done {
            finish_reason,
            usage,
        } => {
            turn.round_finish = Some((finish_reason, usage));
            s.input_tokens += usage.input;
            s.accounting.add(&usage);
            // What this call was sent is what the context window holds now.
            s.context_used = usage.input;
            s.output_tokens += usage.output;
            s.model_calls += 1;
            s.row_dirty = true;
            gw.mark_dirty(rid);
        }
        ModelEvent::Failed(e) => turn.round_error = Some(e),
        ModelEvent::Notice(text) => {
            gw.emit(rid, "status.update", json!({"kind": "info", "text": text}));
        }
    }
    false
}

#[cfg(test)]
mod tests {
    //! Prompts and model events through the owners' views with fakes (`calls::fake`).

    use super::*;
    use crate::model::TokenUsage;
    use crate::session::calls::fake::{Fake, RID};

    impl TurnOwners for Fake {
        fn emit_delta(&mut self, rid: &str, text: &str) {
            self.asker.out.delta(rid, 0, text);
        }
        fn turn_token(&mut self, _rid: &str) -> Token {
            Token(7)
        }
    }

    /// A fake whose session is idle.
    fn idle() -> Fake {
        let mut gw = Fake::new();
        gw.sessions.get_mut(RID).unwrap().turn = None;
        gw
    }

    #[test]
    fn a_prompt_to_an_idle_session_starts_a_turn_and_one_during_a_turn_waits_its_turn() {
        let mut gw = idle();
        let now = gw.now();
        assert!(!submit_prompt(&mut gw, RID, "first".into(), now));
        assert_eq!(
            gw.sessions.take_runnable(),
            [RID],
            "the turn is driven next"
        );
        assert_eq!(gw.dirty, [RID], "the prompt is committed");
        assert!(submit_prompt(&mut gw, RID, "second".into(), now), "queued");
        let s = gw.sessions.get(RID).unwrap();
        assert_eq!(s.queued, ["second"]);
        assert!(s.queue_dirty, "the queue is stored with the session");
        let users = s.transcript.iter().filter(|m| m.role == Role::User).count();
        assert_eq!(users, 1, "the queued prompt is not in the transcript yet");
        // The turn ends: the queued prompt runs.
        gw.sessions.get_mut(RID).unwrap().turn = None;
        run_next_queued(&mut gw, RID, now);
        let s = gw.sessions.get(RID).unwrap();
        assert!(s.queued.is_empty() && s.turn.is_some());
        assert_eq!(
            s.transcript.last().unwrap().content.as_deref(),
            Some("second")
        );
    }

    #[test]
    fn model_text_streams_to_the_client_and_its_usage_is_counted_and_stored() {
        let mut gw = Fake::new();
        assert!(on_model_event(&mut gw, RID, ModelEvent::Text("Hel".into())));
        assert!(on_model_event(&mut gw, RID, ModelEvent::Text("lo".into())));
        let usage = TokenUsage {
            input: 120,
            output: 8,
            ..Default::default()
        };
        let done = ModelEvent::Done {
            finish_reason: "stop".into(),
            usage,
        };
        assert!(!on_model_event(&mut gw, RID, done), "no text shown");
        let deltas: Vec<String> = gw
            .asker
            .said()
            .iter()
            .filter(|f| f["params"]["type"] == "message.delta")
            .map(|f| f["params"]["payload"]["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(deltas, ["Hel", "lo"]);
        let s = gw.sessions.get(RID).unwrap();
        assert_eq!(s.turn.as_ref().unwrap().text, "Hello");
        assert_eq!(
            (s.input_tokens, s.output_tokens, s.model_calls),
            (120, 8, 1)
        );
        assert_eq!(
            s.context_used, 120,
            "what the call was sent fills the window"
        );
        assert!(s.row_dirty && gw.dirty == [RID], "the counts are committed");
    }

    #[test]
    fn a_summary_being_written_is_not_shown_as_a_reply() {
        let mut gw = Fake::new();
        let job = crate::session::compaction::Job {
            reply_to: None,
            request: Vec::new(),
            split: 0,
            before_messages: 0,
            before_tokens: 0,
        };
        let turn = gw.sessions.get_mut(RID).unwrap().turn.as_mut().unwrap();
        turn.compaction = Some(Box::new(job));
        assert!(!on_model_event(
            &mut gw,
            RID,
            ModelEvent::Text("summary".into())
        ));
        on_model_event(&mut gw, RID, ModelEvent::Reasoning("thinking".into()));
        assert!(
            gw.said().is_empty(),
            "nothing of the summary reaches the client"
        );
        let turn = gw.sessions.get(RID).unwrap().turn.as_ref().unwrap();
        assert_eq!(turn.text, "summary", "kept for the compaction");
    }
}
