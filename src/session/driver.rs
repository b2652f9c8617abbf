//! Driving turns: a prompt starts a turn; each drive advances its model call, turns model
//! events into session events, and ends the round with the assistant message, tool calls or
//! the end of the turn; a turn ends, is interrupted, fails (a panic in its work ends it
//! alone), and a session retires. All of it works on [`TurnOwners`] — lent by the gateway
//! (`src/owners.rs`) or by the unit tests' fakes — never on the gateway itself.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Instant;

use crate::reactor::Slot;
use serde_json::{Value, json};

use crate::clock::Budget;
use crate::effects::TurnEnd;
use crate::model::{CallContext, ModelEvent, ModelRequest, Progress};
use crate::session::Session;
use crate::session::calls::CallOwners;
use crate::session::table::SessionTable;
use crate::session::transcript::{Message, Role};
use crate::session::turn::Turn;
use crate::tools::WorkTimer;
use crate::tools::asked::Asker;
use crate::util;

/// What the user reads when a turn failed inside the gateway.
const INTERNAL_ERROR: &str =
    "[tui-gateway hit an internal error and ended this turn; the other sessions are unaffected]";

/// What driving a turn works on beyond the tool side's owners ([`CallOwners`]).
pub(crate) trait TurnOwners: CallOwners {
    /// A `message.delta` of session `rid`.
    fn emit_delta(&mut self, rid: &str, text: &str);
    /// The token the turn of `rid`'s model call is known by in the poll.
    fn turn_slot(&mut self, rid: &str) -> Slot;
    /// The MCP servers `rid`'s first model call must wait for (its turn is held until their
    /// handshakes are over; none named while config.yaml is not read yet), or `None`.
    fn hold_for_mcp(&mut self, rid: &str) -> Option<Vec<String>>;
    /// `rid`'s turn is over: its slot routes nothing any more.
    fn release_turn_slot(&mut self, rid: &str);
    /// What a model call is made with, lent together.
    fn model_parts(&mut self) -> ModelParts<'_>;
    /// The `session.info` payload of `rid`'s session.
    fn session_info(&mut self, rid: &str) -> Option<Value>;
    /// The window compaction works against for `model` (`compaction::context_window`).
    fn compaction_window(&self, model: &str) -> u64;
    /// The session left memory: persistence commits its end.
    fn retire_session(&mut self, s: Session);
    /// A fresh stored id, and `title` made unique for it (a compaction's new session).
    fn fresh_names(&mut self, title: Option<&str>, started_at: f64) -> (String, Option<String>);
}

/// What a model call is started, advanced and aborted with: the sessions (its request is one
/// of their transcripts), the provider, the registry its sockets go in, what it is offered.
pub(crate) struct ModelParts<'a> {
    pub sessions: &'a mut SessionTable,
    pub providers: crate::model::Providers<'a>,
    /// The tools offered (each session is sent the schemas of its reach).
    pub tools: &'a crate::tools::ToolSet,
    pub home: &'a Path,
    /// The skills, for the system prompt's index (`None`: none).
    pub skills: Option<&'a crate::skills::Shared>,
    /// Reused for each advance's events.
    pub events: &'a mut Vec<ModelEvent>,
}

/// Drive the runnable turns, each once, in the order they became runnable, until `budget` is
/// spent (at least one: the rest keep their place for the next iteration, so that control
/// traffic is not kept waiting behind a thousand sessions); true when one streamed text (the
/// loop arms the flush tick that writes its partial text: the turn does not know the flush).
pub(crate) fn drive_turns(gw: &mut impl TurnOwners, now: Instant, budget: &Budget) -> bool {
    let mut streamed = false;
    // Those that become runnable while these are driven wait for the next iteration.
    let waiting = gw.sessions().runnable_count();
    for _ in 0..waiting {
        let Some(rid) = gw.sessions().pop_runnable() else {
            break;
        };
        if let Some(turn) = gw.turn_mut(&rid) {
            turn.scheduled = false;
            isolated(gw, Some(&rid), now, |gw| streamed |= drive(gw, &rid, now));
        }
        if budget.spent() {
            break;
        }
    }
    streamed
}

/// Do work on behalf of `owner`'s session; a panic in it ends that session's turn with an
/// error instead of ending the gateway (every other session goes on). Work nobody owns runs
/// unguarded: its panic reaches the loop, which starts the shutdown.
pub(crate) fn isolated<O: TurnOwners>(
    gw: &mut O,
    owner: Option<&str>,
    now: Instant,
    work: impl FnOnce(&mut O),
) {
    let Some(rid) = owner else {
        return work(gw);
    };
    let Err(panic) = catch_unwind(AssertUnwindSafe(|| work(gw))) else {
        return;
    };
    let text = util::panic_text(&panic);
    crate::diag!("[gateway-panic] a turn of session {rid} failed: {text}");
    // The unwind went through the gateway's own tables: the loop checks them before going on.
    gw.effects().push(crate::effects::Effect::Panicked);
    let failed = catch_unwind(AssertUnwindSafe(|| fail_turn(gw, rid, now)));
    if failed.is_err() {
        // Failing the turn cleanly failed too: drop it (its model call and tools with it).
        crate::session::calls::abandon(gw, rid, now);
        if gw
            .sessions()
            .get_mut(rid)
            .and_then(|s| s.turn.take())
            .is_some()
        {
            gw.release_turn_slot(rid);
        }
    }
}

/// End a turn that hit an internal error: what it said so far is kept, its model call and
/// tools are stopped, the transcript says what happened, and `message.complete` carries
/// status `error`.
pub(crate) fn fail_turn(gw: &mut impl TurnOwners, rid: &str, now: Instant) {
    let Some(turn) = gw.turn_mut(rid) else {
        return;
    };
    turn.failure = Some(INTERNAL_ERROR.to_string());
    interrupt_turn(gw, rid, now);
}

/// Drive one turn; true when it streamed text whose partial text the flush tick must write.
fn drive(gw: &mut impl TurnOwners, rid: &str, now: Instant) -> bool {
    let Some(turn) = gw.turn_mut(rid) else {
        return false;
    };
    let first_call = turn.machine.rounds() == 0 && turn.compaction.is_none();
    if turn.call.is_none() {
        if gw.holding() {
            // Nothing can be saved: the next model call waits for the store.
            gw.park(rid);
            return false;
        }
        if first_call && let Some(servers) = gw.hold_for_mcp(rid) {
            if !servers.is_empty() {
                let quoted: Vec<String> = servers.iter().map(|s| format!("'{s}'")).collect();
                let plural = if servers.len() > 1 { "s" } else { "" };
                let text = format!(
                    "waiting for MCP server{plural} {} to connect…",
                    quoted.join(", ")
                );
                gw.emit(rid, "status.update", json!({"kind": "mcp", "text": text}));
            }
            return false;
        }
        start_model_call(gw, rid, now);
    }
    let parts = gw.model_parts();
    let mut evs = std::mem::take(parts.events);
    let progress = {
        let Some(turn) = parts.sessions.get_mut(rid).and_then(|s| s.turn.as_mut()) else {
            return false;
        };
        let Some(call) = turn.call.as_mut() else {
            return false;
        };
        let mut ctx = CallContext { slot: &turn.slot };
        let advanced = util::contained(|| call.advance(&mut ctx, now, &mut evs));
        if advanced.is_err() {
            // Dropped here: what the panicked call holds is its own.
            let _ = util::contained(|| drop(turn.call.replace(Box::new(Stopped))));
        }
        advanced
    };
    let progress = match progress {
        Ok(progress) => progress,
        Err(why) => {
            evs.clear();
            *gw.model_parts().events = evs;
            adapter_failed(gw, rid, &why, now);
            return false;
        }
    };
    let mut streamed = false;
    for ev in evs.drain(..) {
        streamed |= on_model_event(gw, rid, ev);
    }
    *gw.model_parts().events = evs;
    match progress {
        Progress::Ready => {
            gw.sessions().mark_runnable(rid);
        }
        Progress::Wait(Some(at)) => {
            let id = gw
                .asking()
                .1
                .set_timer(at, WorkTimer::TurnWake(rid.to_string()));
            if let Some(old) = gw.turn_mut(rid).and_then(|t| t.wake.replace(id)) {
                gw.asking().1.cancel_timer(old);
            }
        }
        Progress::Wait(None) => {}
        Progress::Finished => {
            let mut parts = gw.model_parts();
            let session = parts.sessions.get_mut(rid);
            let provider = session.as_ref().map(|s| s.provider.clone());
            let connection = session
                .and_then(|s| s.turn.as_mut())
                .and_then(|t| t.call.as_mut())
                .and_then(|c| c.take_connection());
            if let (Some(connection), Some(provider)) = (connection, provider) {
                parts.providers.of(&provider).recycle(connection, now);
            }
            count_model_time(gw, rid, now);
            end_model_round(gw, rid, now)
        }
    }
    streamed
}

/// Start the turn's next model call (the steering first, as a user note).
fn start_model_call(gw: &mut impl TurnOwners, rid: &str, now: Instant) {
    let Some(s) = gw.sessions().get_mut(rid) else {
        return;
    };
    let Some(turn) = s.turn.as_mut() else {
        return;
    };
    let first = turn.machine.rounds() == 0;
    // Steering reaches the model as a user note before its next call.
    let steer = std::mem::take(&mut turn.steer);
    if !steer.is_empty() {
        let note = format!("{}{}", crate::session::STEER_PREFIX, steer.join("\n"));
        s.append(Message::new(Role::User, Some(note), util::unix_now()));
        // Out of the stored queue in the same commit that stores the note.
        s.queue_dirty = true;
        gw.mark_dirty(rid);
    }
    let mut parts = gw.model_parts();
    let Some(s) = parts.sessions.get_mut(rid) else {
        return;
    };
    let schemas = parts.tools.schemas_for(s.reach());
    let reach = s.reach();
    let Some(turn) = s.turn.as_mut() else {
        return;
    };
    turn.machine.model_call_started();
    let mut ctx = CallContext { slot: &turn.slot };
    let compacting = turn.compaction.is_some();
    let generation = parts.skills.map_or(0, |k| k.borrow().generation());
    if s.system_prompt.is_none() || s.prompt_generation != generation {
        // Built once per session in memory, as Hermes freezes it (a stable prefix), and again
        // when the skills offered changed (a skill the model wrote is in its next call).
        // A personality chosen in this session or a subagent's task, else config.yaml's
        // (Hermes' ephemeral prompt).
        let overlay = s
            .overlay
            .clone()
            .unwrap_or_else(|| crate::session::system_prompt::configured_overlay(parts.home));
        let index = parts
            .skills
            .map(|k| {
                let toolsets = parts.tools.toolsets_for(reach);
                crate::session::system_prompt::skills_index(&k.borrow(), schemas, &toolsets)
            })
            .unwrap_or_default();
        s.system_prompt = Some(crate::session::system_prompt::build(
            parts.home,
            &s.cwd,
            schemas,
            &crate::session::system_prompt::Skills {
                index: &index,
                preloaded: &s.preloaded_skills,
                overlay: &overlay,
                subagent: s.delegated.is_some(),
            },
        ));
        s.prompt_generation = generation;
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
        tools: schemas,
        reasoning_effort: s.reasoning_effort.as_deref(),
        fast: s.fast,
        session_id: Some(&s.stored_id),
        limits: Default::default(),
    };
    let provider = parts.providers.of(&s.provider);
    let started = util::contained(|| provider.start(req, &mut ctx, now));
    let panicked = started.as_ref().err().cloned();
    turn.call = Some(started.unwrap_or_else(|_| Box::new(Stopped)));
    turn.call_started = Some(now);
    if first && !compacting {
        // The turn's input, so a client beside the one that sent it sees the prompt too.
        let input = s
            .transcript
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .and_then(|m| m.content.as_deref())
            .map(|t| crate::transcript::plain_text(t).into_owned())
            .unwrap_or_default();
        gw.emit(rid, "message.start", json!({ "input": input }));
    }
    if let Some(why) = panicked {
        adapter_failed(gw, rid, &why, now);
    }
}

/// The model adapter panicked (a host's provider or call): the turn fails as a panic in its
/// work would, the unwind having gone through the adapter alone.
fn adapter_failed(gw: &mut impl TurnOwners, rid: &str, why: &str, now: Instant) {
    crate::diag!("[gateway-panic] the model call of session {rid} failed: {why}");
    fail_turn(gw, rid, now);
}

/// In place of a call that panicked: over, with nothing to stop.
struct Stopped;

impl crate::model::ModelCall for Stopped {
    fn advance(
        &mut self,
        _: &mut CallContext<'_>,
        _: Instant,
        _: &mut Vec<ModelEvent>,
    ) -> Progress {
        Progress::Finished
    }
    fn abort(&mut self, _: &mut CallContext<'_>) {}
}

/// The model call of this round is over: record the assistant message, then run the tool
/// calls it asked for or end the turn.
fn end_model_round(gw: &mut impl TurnOwners, rid: &str, now: Instant) {
    let Some(s) = gw.sessions().get_mut(rid) else {
        return;
    };
    let Some(turn) = s.turn.as_mut() else { return };
    let round = turn.close_round(false, util::unix_now());
    if turn.compaction.is_some() {
        let result = match round.error {
            Some(e) => Err(e),
            None => Ok(round.message.and_then(|m| m.content).unwrap_or_default()),
        };
        close_compaction(gw, rid, result, now);
        return;
    }
    let (calls, error) = (round.calls, round.error);
    if let Some(m) = round.message {
        s.tool_call_count += calls.len() as u64;
        s.append(m);
        gw.mark_dirty(rid);
    }
    crate::session::calls::model_answered(gw, rid, calls, error, now);
}

/// The end the tool side decided for turn `turn` of `rid` ([`Effect::TurnEnded`]), as the
/// loop dispatches it: the turn closes unless it is gone already (interrupted, its session
/// closed) — a later turn of the session is not this one.
///
/// [`Effect::TurnEnded`]: crate::effects::Effect::TurnEnded
pub(crate) fn turn_ended(gw: &mut impl TurnOwners, end: TurnEnd, now: Instant) {
    let rid = end.rid.as_str();
    if gw.turn_mut(rid).is_some_and(|t| t.number == end.turn) {
        end_turn(gw, rid, end.status.as_str(), end.error, now);
    }
}

/// Close `rid`'s turn now if the tool side already decided its end and the loop has not
/// dispatched it yet; whether it did.
fn end_if_decided(gw: &mut impl TurnOwners, rid: &str, now: Instant) -> bool {
    let Some(turn) = gw.turn_mut(rid).map(|t| t.number) else {
        return false;
    };
    let Some((status, error)) = gw.effects().take_turn_end(rid, turn) else {
        return false;
    };
    end_turn(gw, rid, status.as_str(), error, now);
    true
}

/// Close the turn: `message.complete`, then `session.info`; then a queued prompt may run.
pub(crate) fn end_turn(
    gw: &mut impl TurnOwners,
    rid: &str,
    status: &str,
    error: Option<String>,
    now: Instant,
) {
    let Some(s) = gw.sessions().get_mut(rid) else {
        return;
    };
    if s.turn.as_ref().is_some_and(|t| t.compaction.is_some()) {
        let why = error.unwrap_or_else(|| format!("the compaction was {status}"));
        close_compaction(gw, rid, Err(why), now);
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
    let usage = s.usage();
    if let Some(id) = turn.wake {
        gw.asking().1.cancel_timer(id);
    }
    gw.release_turn_slot(rid);
    let text = match (status, &error) {
        ("error", Some(e)) => Some(with_reason(turn.text, e)),
        _ => (!turn.text.is_empty()).then_some(turn.text),
    };
    let mut payload = json!({
        "text": text,
        "usage": usage,
        "status": status,
    });
    let error_text = error.clone();
    if let Some(e) = error {
        payload["error"] = json!(e);
    }
    gw.emit(rid, "message.complete", payload);
    emit_info(gw, rid);
    gw.mark_dirty(rid);
    let background = gw.sessions().get_mut(rid).and_then(|s| s.background.take());
    if let Some(bg) = background {
        finish_background(gw, rid, bg, now);
        return;
    }
    if let Some(s) = gw.sessions().get(rid)
        && let Some(d) = &s.delegated
    {
        // A subagent's one turn is its whole task: what it did goes to the parent's call.
        let end = crate::session::subagent::End {
            child_rid: rid.to_string(),
            parent_rid: d.parent_rid.clone(),
            job: d.job,
            task_index: d.task_index,
            ended: crate::session::subagent::ended(s, d, status, error_text.as_deref(), now),
        };
        gw.effects()
            .push(crate::effects::Effect::SubagentEnded(end));
        return;
    }
    if gw.call_parts().shutting_down {
        return;
    }
    if status == "complete" {
        // Its session may get a title (`titles.rs`, routed by the loop).
        let rid = rid.to_string();
        gw.effects()
            .push(crate::effects::Effect::TurnCompleted { rid });
    }
    let model = (status == "complete")
        .then(|| gw.sessions().get(rid).map(|s| s.model.clone()))
        .flatten();
    let near_window = model.is_some_and(|model| {
        let window = gw.compaction_window(&model);
        gw.sessions()
            .get(rid)
            .is_some_and(|s| crate::session::compaction::needs_compaction(&s.transcript, window))
    });
    if near_window && crate::session::compaction::start(gw, rid, None, None, now) {
        return;
    }
    run_next_queued(gw, rid, now);
}

/// The text a failed turn ends with: what it said, then `Error: <why>` as Hermes' gateway words
/// a failed turn (the TUI shows only the text; Hermes shows the reason when nothing was said).
fn with_reason(said: String, why: &str) -> String {
    match said.trim_end() {
        "" => format!("Error: {why}"),
        said => format!("{said}\n\nError: {why}"),
    }
}

/// The compaction turn is over: tidy it like any turn, then apply or drop its summary.
fn close_compaction(
    gw: &mut impl TurnOwners,
    rid: &str,
    result: Result<String, String>,
    now: Instant,
) {
    let Some(turn) = gw.sessions().get_mut(rid).and_then(|s| s.turn.take()) else {
        return;
    };
    if let Some(id) = turn.wake {
        gw.asking().1.cancel_timer(id);
    }
    gw.release_turn_slot(rid);
    if let Some(job) = turn.compaction {
        crate::session::compaction::finish(gw, rid, *job, result, now);
    }
}

/// A background task's turn ended: its answer goes to the parent session, and the child
/// session is ended (it stays in the store, linked by `parent_session_id`).
fn finish_background(
    gw: &mut impl TurnOwners,
    rid: &str,
    bg: crate::session::Background,
    now: Instant,
) {
    let text = gw
        .sessions()
        .get(rid)
        .and_then(|s| s.transcript.last())
        .filter(|m| m.role == Role::Assistant)
        .and_then(|m| m.content.clone())
        .unwrap_or_else(|| "(no answer)".to_string());
    gw.emit(
        &bg.parent_rid,
        "background.complete",
        json!({"task_id": bg.task_id, "text": text}),
    );
    retire(gw, rid, "background_complete", now);
}

/// `session.info` of the session, to the client.
pub(crate) fn emit_info(gw: &mut impl TurnOwners, rid: &str) {
    if let Some(info) = gw.session_info(rid) {
        gw.emit(rid, "session.info", info);
    }
}

/// Stop a running turn: abort the model call, keep what it said, end it `interrupted`.
pub(crate) fn interrupt_turn(gw: &mut impl TurnOwners, rid: &str, now: Instant) -> bool {
    // A turn whose end was decided is over already: that end stands, nothing is stopped.
    if end_if_decided(gw, rid, now) {
        return false;
    }
    let parts = gw.model_parts();
    let Some(s) = parts.sessions.get_mut(rid) else {
        return false;
    };
    let Some(turn) = s.turn.as_mut() else {
        return false;
    };
    if let Some(mut call) = turn.call.take() {
        let mut ctx = CallContext { slot: &turn.slot };
        call.abort(&mut ctx);
        if let Some(started) = turn.call_started.take() {
            s.model_time += now.saturating_duration_since(started);
        }
        let round = turn.close_round(true, util::unix_now());
        // A summary cut short is dropped, not kept as a reply.
        if let Some(m) = round.message.filter(|_| turn.compaction.is_none()) {
            s.tool_call_count += round.calls.len() as u64;
            s.append(m);
            gw.mark_dirty(rid);
        }
    }
    let stopping = crate::session::calls::interrupt(gw, rid, now);
    // Stopping what ran may have ended the turn at once (a withdrawn approval, a call that
    // was not running): the caller sees it closed when this returns.
    if end_if_decided(gw, rid, now) || stopping {
        // Otherwise a tool's group is dying; the turn ends when it is reaped.
        return true;
    }
    end_turn(gw, rid, "interrupted", None, now);
    true
}

/// End a session's row and take it out of memory; it stays resumable from the store.
pub(crate) fn retire(gw: &mut impl TurnOwners, rid: &str, reason: &str, now: Instant) {
    // Taken first so ending the turn does not start the next prompt; steering that never
    // reached the model is kept too, before them.
    let mut queued = gw
        .sessions()
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
    crate::session::calls::abandon(gw, rid, now);
    interrupt_turn(gw, rid, now);
    // What else it held (background processes, a title call, clients' interest) goes when
    // the loop dispatches this.
    let left = crate::effects::Effect::SessionLeft {
        rid: rid.to_string(),
    };
    gw.effects().push(left);
    if let Some(mut s) = gw.sessions().take(rid) {
        // Prompts accepted as `queued` never ran; they are kept, not lost.
        let now_unix = util::unix_now();
        while let Some(text) = queued.pop_front() {
            s.append(Message::new(Role::User, Some(text), now_unix));
            s.queue_dirty = true;
        }
        s.ended = Some((util::unix_now(), reason.to_string()));
        s.row_dirty = true;
        // Out of memory: its place under the cap on open sessions goes now, not at its commit.
        s.lease = None;
        // Its turn's token went with the turn.
        gw.retire_session(s);
    }
}

/// Append the user's prompt and start a turn for it.
pub(crate) fn start_prompt(gw: &mut impl TurnOwners, rid: &str, text: String, now: Instant) {
    let slot = gw.turn_slot(rid);
    let max_turns = gw.call_parts().max_turns;
    let Some(s) = gw.sessions().get_mut(rid) else {
        return;
    };
    s.append(Message::new(Role::User, Some(text), util::unix_now()));
    s.last_active = now;
    let mut turn = Turn::new(slot);
    // A subagent's budget of model calls is its own (`delegation.max_iterations`).
    turn.machine
        .limit_rounds(s.delegated.as_ref().map_or(max_turns, |d| d.max_rounds));
    s.turn = Some(turn);
    gw.mark_dirty(rid);
    gw.sessions().mark_runnable(rid);
}

/// Run `text` as the session's next prompt: now when it is idle, else after the running turn
/// (queued, and stored with the queue). Whether it was queued.
pub(crate) fn submit_prompt(
    gw: &mut impl TurnOwners,
    rid: &str,
    text: String,
    now: Instant,
) -> bool {
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
pub(crate) fn run_next_queued(gw: &mut impl TurnOwners, rid: &str, now: Instant) {
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
fn count_model_time(gw: &mut impl CallOwners, rid: &str, now: Instant) {
    if let Some(s) = gw.sessions().get_mut(rid)
        && let Some(started) = s.turn.as_mut().and_then(|t| t.call_started.take())
    {
        s.model_time += now.saturating_duration_since(started);
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
        ModelEvent::Replay(r) => turn.round_replay = r,
        ModelEvent::Done {
            finish_reason,
            usage,
        } => {
            turn.round_finish = Some((finish_reason, usage));
            s.count_call(&usage);
            // What this call was sent is what the context window holds now.
            s.context_used = usage.input;
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
    //! Prompts, model calls, turn ends, interrupts, retires and failures through the owners'
    //! views with fakes (`calls::fake`: a fake outbox and clock, scripted tools and model).

    use super::*;
    use crate::model::{TokenUsage, ToolCall};
    use crate::session::calls::fake::{Fake, RID, Then, done};

    /// A fake whose session is idle.
    fn idle() -> Fake {
        let mut gw = Fake::new();
        gw.sessions.get_mut(RID).unwrap().turn = None;
        gw
    }

    #[test]
    fn a_decided_end_is_closed_by_an_interrupt_and_never_ends_the_next_turn() {
        let mut gw = idle();
        let now = gw.now();
        gw.model
            .round(vec![ModelEvent::Text("Hello".into()), done()], Then::Finish);
        prompted(&mut gw, "first");
        let first = gw.sessions.get(RID).unwrap().turn.as_ref().unwrap().number;
        assert!(submit_prompt(&mut gw, RID, "second".into(), now), "queued");
        // The answer decided the end; an interrupt before the loop dispatched it closes the
        // turn with that end (it had completed), and the queued prompt starts.
        assert!(
            !interrupt_turn(&mut gw, RID, now),
            "nothing was left to stop"
        );
        let said = gw.asker.said();
        let complete = said
            .iter()
            .find(|f| f["params"]["type"] == "message.complete")
            .expect("the first turn closed");
        assert_eq!(complete["params"]["payload"]["status"], "complete");
        let second = gw.sessions.get(RID).unwrap().turn.as_ref().unwrap().number;
        assert_ne!(first, second, "the queued prompt runs as a turn of its own");
        // An end decided for the first turn, dispatched late, leaves the second running.
        let stale = TurnEnd {
            rid: RID.into(),
            turn: first,
            status: crate::session::machine::Status::Complete,
            error: None,
        };
        gw.effects.push(crate::effects::Effect::TurnEnded(stale));
        gw.dispatch_turn_ends(now);
        let turn = gw
            .sessions
            .get(RID)
            .unwrap()
            .turn
            .as_ref()
            .map(|t| t.number);
        assert_eq!(turn, Some(second));
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

    /// The session's events, as (type, payload), said since last asked.
    fn events(gw: &mut Fake) -> Vec<(String, Value)> {
        gw.said()
    }

    fn kinds(said: &[(String, Value)]) -> Vec<&str> {
        said.iter().map(|(k, _)| k.as_str()).collect()
    }

    fn complete(said: &[(String, Value)]) -> &Value {
        &said
            .iter()
            .find(|(k, _)| k == "message.complete")
            .expect("a message.complete")
            .1
    }

    /// A fake whose idle session is sent `prompt`, its turn driven once.
    fn prompted(gw: &mut Fake, prompt: &str) -> bool {
        let now = gw.now();
        submit_prompt(gw, RID, prompt.into(), now);
        drive_turns(gw, now, &crate::clock::Budget::unlimited())
    }

    #[test]
    fn a_spent_budget_drives_one_turn_and_the_others_keep_their_place() {
        let mut gw = idle();
        assert!(
            gw.sessions
                .add(crate::session::bare_session("rid-2", "s2"))
                .is_ok()
        );
        let now = gw.now();
        gw.model
            .round(vec![ModelEvent::Text("Hello".into()), done()], Then::Finish);
        submit_prompt(&mut gw, RID, "first".into(), now);
        submit_prompt(&mut gw, "rid-2", "second".into(), now);
        drive_turns(&mut gw, now, &crate::clock::Budget::spent_already());
        gw.dispatch_turn_ends(now);
        assert_eq!(gw.ended.len(), 1, "one turn driven to its end");
        assert_eq!(gw.sessions.take_runnable(), ["rid-2"], "the other waits");
    }

    #[test]
    fn a_model_answer_ends_the_turn_and_the_next_queued_prompt_starts() {
        let mut gw = idle();
        let now = gw.now();
        gw.model
            .round(vec![ModelEvent::Text("Hello".into()), done()], Then::Finish);
        submit_prompt(&mut gw, RID, "first".into(), now);
        assert!(submit_prompt(&mut gw, RID, "second".into(), now), "queued");
        assert!(
            drive_turns(&mut gw, now, &crate::clock::Budget::unlimited()),
            "text was streamed"
        );
        let said = events(&mut gw);
        assert_eq!(
            kinds(&said),
            [
                "message.start",
                "message.delta",
                "message.complete",
                "session.info"
            ]
        );
        let done = complete(&said);
        assert_eq!(
            (done["status"].as_str(), done["text"].as_str()),
            (Some("complete"), Some("Hello"))
        );
        assert_eq!(
            gw.released,
            [RID],
            "the finished turn's token is given back"
        );
        let s = gw.sessions.get(RID).unwrap();
        let texts: Vec<_> = s
            .transcript
            .iter()
            .map(|m| (m.role, m.content.as_deref()))
            .collect();
        assert_eq!(
            texts,
            [
                (Role::User, Some("first")),
                (Role::Assistant, Some("Hello")),
                (Role::User, Some("second")),
            ]
        );
        assert!(
            s.queued.is_empty() && s.turn.is_some(),
            "the queued prompt runs"
        );
        assert_eq!(gw.sessions.take_runnable(), [RID], "and is driven next");
    }

    #[test]
    fn a_model_error_ends_the_turn_with_status_error() {
        let mut gw = idle();
        let failed = ModelEvent::Failed("the model server answered 500".into());
        gw.model.round(vec![failed], Then::Finish);
        prompted(&mut gw, "hi");
        let said = events(&mut gw);
        let done = complete(&said);
        assert_eq!(done["status"], "error");
        assert_eq!(done["error"], "the model server answered 500");
        let s = gw.sessions.get(RID).unwrap();
        assert!(s.turn.is_none(), "the turn is over");
    }

    #[test]
    fn an_interrupt_during_a_model_call_aborts_it_and_keeps_the_partial_text() {
        let mut gw = idle();
        let now = gw.now();
        gw.model
            .round(vec![ModelEvent::Text("Half an ans".into())], Then::Wait);
        prompted(&mut gw, "hi");
        events(&mut gw);
        assert!(interrupt_turn(&mut gw, RID, now));
        assert_eq!(gw.model.aborted.get(), 1, "the call in flight is aborted");
        let said = events(&mut gw);
        let done = complete(&said);
        assert_eq!(done["status"], "interrupted");
        assert_eq!(done["text"], "Half an ans");
        let s = gw.sessions.get(RID).unwrap();
        let last = s.transcript.last().unwrap();
        assert_eq!(
            (last.role, last.content.as_deref()),
            (Role::Assistant, Some("Half an ans"))
        );
        assert_eq!(last.finish_reason.as_deref(), Some("interrupted"));
        assert!(s.turn.is_none());
    }

    #[test]
    fn an_interrupt_during_a_tool_call_cancels_it_and_keeps_what_the_model_said() {
        let mut gw = idle();
        let now = gw.now();
        let call = ToolCall {
            id: "c1".into(),
            name: "waits".into(),
            arguments: "{}".into(),
        };
        let said_first = ModelEvent::Text("Let me look.".into());
        gw.model.round(
            vec![said_first, ModelEvent::ToolCall(call), done()],
            Then::Finish,
        );
        prompted(&mut gw, "look");
        let said = events(&mut gw);
        assert_eq!(kinds(&said).last(), Some(&"tool.start"), "the call runs on");
        assert!(interrupt_turn(&mut gw, RID, now));
        let said = events(&mut gw);
        assert_eq!(
            kinds(&said),
            ["tool.complete", "message.complete", "session.info"]
        );
        assert_eq!(said[0].1["error"], "cancelled");
        let done = complete(&said);
        assert_eq!(done["status"], "interrupted");
        assert_eq!(done["text"], "Let me look.");
        assert_eq!(gw.model.started, 1, "the model is not called again");
        assert!(gw.tools.jobs.is_empty());
    }

    #[test]
    fn retiring_a_session_ends_its_turn_and_keeps_its_queued_prompts() {
        let mut gw = idle();
        let now = gw.now();
        gw.model
            .round(vec![ModelEvent::Text("Working".into())], Then::Wait);
        prompted(&mut gw, "first");
        assert!(submit_prompt(&mut gw, RID, "later".into(), now));
        events(&mut gw);
        retire(&mut gw, RID, "tui_close", now);
        let said = events(&mut gw);
        assert_eq!(complete(&said)["status"], "interrupted");
        assert_eq!(gw.model.aborted.get(), 1);
        assert!(gw.sessions.get(RID).is_none(), "out of memory");
        let left = gw.effects.iter().any(
            |e| matches!(e, crate::effects::Effect::SessionLeft { rid } if rid.as_str() == RID),
        );
        assert!(
            left,
            "what else it held is let go (its background processes stop)"
        );
        let [s] = gw.retired.as_slice() else {
            panic!("one session retired, not {}", gw.retired.len());
        };
        assert_eq!(s.ended.as_ref().map(|e| e.1.as_str()), Some("tui_close"));
        let texts: Vec<_> = s.transcript.iter().map(|m| m.content.as_deref()).collect();
        assert_eq!(
            texts,
            [Some("first"), Some("Working"), Some("later")],
            "the partial answer and the queued prompt are kept"
        );
        assert!(s.row_dirty && s.queue_dirty, "its end is committed");
    }

    #[test]
    fn a_panic_in_a_turn_ends_that_turn_with_an_error_and_no_other() {
        let mut gw = idle();
        let now = gw.now();
        gw.model
            .round(vec![ModelEvent::Text("Before the bug".into())], Then::Panic);
        gw.model
            .round(vec![ModelEvent::Text("Still here".into())], Then::Wait);
        submit_prompt(&mut gw, RID, "hi".into(), now);
        // Another session with a turn, driven after the one that fails.
        let mut other = crate::session::bare_session("r2", "s2");
        other.turn = Some(Turn::new(crate::reactor::Slot::detached(8)));
        assert!(gw.sessions.add(other).is_ok());
        gw.sessions.mark_runnable("r2");
        drive_turns(&mut gw, now, &crate::clock::Budget::unlimited());
        let frames = gw.asker.said();
        let of = |kind: &str| -> Vec<&Value> {
            let kind = json!(kind);
            frames
                .iter()
                .filter(|f| f["params"]["type"] == kind)
                .collect()
        };
        let ended = of("message.complete");
        assert_eq!(ended.len(), 1, "one turn ended: {ended:?}");
        let done = &ended[0]["params"]["payload"];
        assert_eq!(done["status"], "error");
        assert_eq!(done["error"], INTERNAL_ERROR);
        let deltas: Vec<&Value> = of("message.delta")
            .into_iter()
            .map(|f| &f["params"]["payload"]["text"])
            .collect();
        assert_eq!(deltas, ["Still here"], "the other session streams on");
        let s = gw.sessions.get(RID).unwrap();
        assert!(s.turn.is_none(), "the failed turn is over");
        let last = s.transcript.last().unwrap();
        assert_eq!(
            (last.content.as_deref(), last.finish_reason.as_deref()),
            (Some(INTERNAL_ERROR), Some("error")),
            "the transcript says what happened"
        );
        assert_eq!(gw.released, [RID]);
        assert!(gw.sessions.get("r2").unwrap().turn.is_some());
    }
}
