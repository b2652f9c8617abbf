//! Subagents in the loop: a `delegate_task` call's children are sessions of their own, driven
//! like any other. This spawns them (a child of the caller per task: its system prompt from the
//! goal, its tools without those a child never gets, the caller's shell state as its start),
//! takes each child's end (`subagent.complete` to the parent's client, its entry into the call's
//! batch, the child out of memory), and answers the agents overlay (`delegation.status`,
//! `subagent.interrupt`). A top-level session's call runs in the background, as in Hermes: it
//! is answered once its children are spawned, and the last child's end brings their combined
//! result into the parent's conversation the way a background process's notice comes; closing
//! the parent ends them; until then the parent's stored session keeps a notice saying their
//! outcome is unknown, which a restart after a kill adds to its transcript (`store/`'s
//! repair). An orchestrator child's call waits: the last end finishes it, and
//! stopping it stops them. The tool's side and the limits: `tools/delegate.rs`; a child's
//! identity, relay and result: `session/subagent.rs`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::event_loop::Gateway;
use crate::session::subagent::{self, Delegated};
use crate::tools::JobId;
use crate::tools::delegate::{Background, Batch, Limits};
use crate::util;

/// Why a subagent's stored session ended.
const END_REASON: &str = "subagent_complete";

/// Spawn the children of call `job` of session `parent_rid`, one per task, all at once (a
/// batch is within `max_concurrent_children`).
pub(crate) fn spawn(gw: &mut Gateway, parent_rid: &str, job: JobId, now: Instant) {
    let board = gw.tools.delegations.clone();
    let Some((tasks, child_depth, limits)) = board
        .borrow()
        .batches
        .get(&job)
        .map(|b| (b.tasks.clone(), b.child_depth, b.limits.clone()))
    else {
        return;
    };
    if !gw.sessions.contains_key(parent_rid) {
        return;
    }
    let mode = mode_of(gw, parent_rid, &limits);
    let parent = &gw.sessions[parent_rid];
    let parent_stored = parent.stored_id.clone();
    let parent_subagent = parent.delegated.as_ref().map(|d| d.subagent_id.clone());
    let workspace = crate::tools::shell_state::cwd_of(&gw.cfg.home, &parent_stored)
        .unwrap_or_else(|| parent.cwd.clone());
    // config.yaml's `delegation.model` / `delegation.provider`, else the parent's.
    let model = limits.model.clone().unwrap_or_else(|| parent.model.clone());
    // `delegation.base_url` (an endpoint of the children's own, as Hermes), else
    // `delegation.provider`, else the parent's.
    let parent_provider = parent.provider.clone();
    let chosen = match (limits.base_url.as_deref(), limits.provider.as_deref()) {
        (Some(url), _) => {
            let api_mode = limits.api_mode.as_deref();
            crate::model::select::delegation_provider(
                &gw.cfg,
                url,
                api_mode,
                &parent_provider,
                &model,
            )
            .map(|p| crate::methods::config::adopt_provider(gw, p))
            .map_err(|e| format!("delegation.base_url: {e}"))
        }
        (None, Some(want)) if !crate::methods::config::same_provider(want, &parent_provider) => {
            crate::methods::config::switch_provider(gw, want, &model)
                .map_err(|e| format!("delegation.provider {want:?}: {}", e.message))
        }
        _ => Ok(parent_provider),
    };
    let provider = match chosen {
        Ok(name) => name,
        Err(why) => {
            board.borrow_mut().batches.remove(&job);
            let result = crate::tools::ToolResult::error(why);
            crate::session::calls::finish_job(gw, job, result, now);
            return;
        }
    };
    let (base_url, window) = (gw.base_url_of(&provider), gw.context_window_for(&model));
    // Hermes' floor keeps a mistyped timeout from cutting every child off at once.
    let floor = gw.cfg.subagent_timeout_floor.as_secs_f64();
    let timeout = limits
        .child_timeout
        .map(|t| Duration::from_secs_f64(t.max(floor)));
    let count = tasks.len();
    // Every child is made and announced (`subagent.spawn_requested`: a queued row in the
    // agents overlay) before any starts, as Hermes builds them all before running them.
    let mut made = Vec::with_capacity(count);
    for (index, task) in tasks.into_iter().enumerate() {
        let started_at = util::unix_now();
        let rid = crate::methods::session::new_runtime_id(gw);
        let stored = crate::methods::session::new_stored_id(gw, started_at);
        let parent = &gw.sessions[parent_rid];
        let mut child = parent.like(rid.clone(), stored.clone(), None, started_at, now);
        child.reasoning_effort = parent.reasoning_effort.clone();
        (child.model, child.provider) = (model.clone(), provider.clone());
        (child.base_url, child.context_max) = (base_url.clone(), window);
        // Hermes' source for delegated runs: pickers and session_search leave them out.
        child.source = "subagent".into();
        child.parent_session_id = Some(parent_stored.clone());
        crate::tools::shell_state::inherit(&gw.cfg.home, &parent_stored, &stored);
        let orchestrating = task.orchestrator.then_some((child_depth, limits.max_depth));
        // The task is the last part of its system prompt (Hermes' ephemeral prompt).
        child.overlay = Some(subagent::system_prompt(
            &task.goal,
            task.context.as_deref(),
            &workspace,
            orchestrating,
        ));
        let d = Delegated {
            parent_rid: parent_rid.to_string(),
            job,
            subagent_id: format!("sa-{index}-{}", util::random_hex(4)),
            parent_subagent_id: parent_subagent.clone(),
            delegate_from: parent_stored.clone(),
            task_index: index,
            task_count: count,
            goal: task.goal.clone(),
            depth: child_depth,
            orchestrator: task.orchestrator,
            max_rounds: limits.max_iterations,
            auto_approve: limits.auto_approve,
            started: now,
            started_unix: util::unix_now(),
            heard: Default::default(),
            timeout,
            timed_out: false,
        };
        // Hermes' preview of both announcements is the goal.
        let mut start = Value::Object(d.identity(&child.model, &stored));
        start["text"] = json!(task.goal);
        child.delegated = Some(d);
        gw.add_session(child);
        gw.mark_dirty(&rid);
        gw.emit(parent_rid, "subagent.spawn_requested", start.clone());
        made.push((rid, task.goal, start));
    }
    let children: Vec<(String, String)> = made
        .iter()
        .map(|(_, _, start)| {
            let id = |key: &str| start[key].as_str().unwrap_or_default().to_string();
            (id("subagent_id"), id("child_session_id"))
        })
        .collect();
    for (rid, goal, start) in made {
        gw.emit(parent_rid, "subagent.start", start);
        if let Some(t) = timeout {
            // Fires harmlessly if the child has ended by then (it is no longer in memory).
            let timer = crate::tools::WorkTimer::SubagentTimeout(rid.clone());
            gw.timers.insert(now + t, timer);
        }
        gw.start_prompt(&rid, goal, now);
    }
    let answer = {
        let mut board = board.borrow_mut();
        let Some(batch) = board.batches.get_mut(&job) else {
            return;
        };
        match mode {
            Mode::Background => {
                let bg = Background {
                    id: format!("deleg_{}", util::random_hex(8)),
                    parent_rid: parent_rid.to_string(),
                    dispatched_unix: util::unix_now(),
                    model,
                };
                let answer = batch.dispatched(&bg.id);
                let awaited = subagent::Awaited {
                    id: bg.id.clone(),
                    if_lost: batch.lost_notice(&bg, &children),
                };
                batch.background = Some(bg);
                Some((answer, awaited))
            }
            Mode::Waits(note) => {
                batch.note = note;
                None
            }
        }
    };
    // In the background the call is answered now; the children's ends make a new message.
    // What the parent learns if the gateway dies first is stored with it before the answer
    // is (commit before publish).
    if let Some((answer, awaited)) = answer {
        if let Some(parent) = gw.sessions.get_mut(parent_rid) {
            parent.background_delegations.push(awaited);
            parent.queue_dirty = true;
        }
        gw.mark_dirty(parent_rid);
        crate::session::calls::finish_job(gw, job, answer, now);
    }
}

/// Whether a call's children run in the background or the call waits for them.
enum Mode {
    Background,
    /// The call waits; the note says why, when Hermes would have run it in the background.
    Waits(Option<String>),
}

/// Hermes runs a top-level session's delegation in the background; an orchestrator child's
/// waits (it needs the results within its turn), as does a headless `exec` task's (nothing
/// is left to hear a result after its turn: Hermes' fallback where no result can come back),
/// and one past the cap on background delegations at once (`max_concurrent_children`).
fn mode_of(gw: &Gateway, parent_rid: &str, limits: &Limits) -> Mode {
    let parent = &gw.sessions[parent_rid];
    if parent.delegated.is_some() || parent.source == "exec" {
        return Mode::Waits(None);
    }
    let board = gw.tools.delegations.borrow();
    let running = board.batches.values();
    let running = running.filter(|b| b.background.is_some()).count();
    if running >= limits.max_children {
        return Mode::Waits(Some(format!(
            "{running} delegations were already running in the background (the most \
             delegation.max_concurrent_children allows), so these subagents ran while this \
             call waited and their results are above. Raise \
             delegation.max_concurrent_children in config.yaml for more background \
             delegations at once."
        )));
    }
    Mode::Background
}

/// Child `rid` reached its `delegation.child_timeout_seconds`: its turn is stopped (its tools
/// with it) and its end says it timed out.
pub(crate) fn timed_out(gw: &mut Gateway, rid: &str, now: Instant) {
    let Some(d) = gw.sessions.get_mut(rid).and_then(|s| s.delegated.as_mut()) else {
        return;
    };
    d.timed_out = true;
    if !gw.interrupt_turn(rid, now)
        && let Some(d) = gw.sessions.get_mut(rid).and_then(|s| s.delegated.as_mut())
    {
        // No turn to stop: it had already ended, and that end stands.
        d.timed_out = false;
    }
}

/// A child's turn ended: its parent's client hears it, the child leaves memory (its stored
/// session stays), and its entry joins the call's result; the last one finishes the call.
pub(crate) fn subagent_ended(gw: &mut Gateway, end: subagent::End, now: Instant) {
    let subagent::End {
        child_rid,
        parent_rid,
        job,
        task_index,
        ended,
    } = end;
    gw.emit(&parent_rid, "subagent.complete", ended.complete);
    // What the child used rolls up into its parent's figures (Hermes' cost rollup).
    let used = gw.sessions.get(&child_rid).map(|child| {
        let mut used = subagent::Rollup::default();
        used.add_child(child);
        used
    });
    if let (Some(used), Some(parent)) = (used, gw.sessions.get_mut(&parent_rid)) {
        parent.subagents.add(&used);
    }
    gw.retire(&child_rid, END_REASON, now);
    let board = gw.tools.delegations.clone();
    let finished = {
        let mut board = board.borrow_mut();
        let Some(batch) = board.batches.get_mut(&job) else {
            // The call was stopped first: its result already says this child was cut off.
            return;
        };
        if let Some(slot) = batch.entries.get_mut(task_index) {
            *slot = Some(ended.entry);
        }
        if !batch.done() {
            return;
        }
        board.batches.remove(&job)
    };
    let Some(mut batch) = finished else {
        return;
    };
    match batch.background.take() {
        Some(bg) => background_done(gw, batch, bg, now),
        None => crate::session::calls::finish_job(gw, job, batch.result(now), now),
    }
}

/// Every child of a background delegation ended: the combined result goes to the parent as
/// a background process's notice does (a status line, then a prompt after a running turn);
/// during the shutdown it is kept in the parent's queue, which its end stores.
fn background_done(gw: &mut Gateway, batch: Batch, bg: Background, now: Instant) {
    let parent = bg.parent_rid.clone();
    settled(gw, &parent, &bg.id);
    let why = "It was stopped before it finished.";
    let text = batch.notice(&bg, now, util::unix_now(), why);
    if crate::tools::process::notify(gw, parent.clone(), text.clone()) {
        return;
    }
    match gw.sessions.get_mut(&parent) {
        Some(s) => {
            s.queued.push_back(text);
            s.queue_dirty = true;
            gw.mark_dirty(&parent);
        }
        // Its session's close took the delegation's result first (`parent_closing`).
        None => crate::diag!("[delegation] {} ended after its session", bg.id),
    }
}

/// Session `rid` has a delegation running in the background.
pub(crate) fn delegating(gw: &Gateway, rid: &str) -> bool {
    let board = gw.tools.delegations.borrow();
    let mut batches = board.batches.values();
    batches.any(|b| b.background.as_ref().is_some_and(|bg| bg.parent_rid == rid))
}

/// Session `rid` is closing (`session.close`, the shutdown): its background delegations end
/// with it, as in Hermes. Their children are interrupted, and each delegation's result as it
/// stands (children cut off say so) joins the session's queue, which its close keeps in its
/// stored transcript: nothing runs on, nothing is lost.
pub(crate) fn parent_closing(gw: &mut Gateway, rid: &str, now: Instant) {
    let board = gw.tools.delegations.clone();
    let mine: Vec<JobId> = {
        let board = board.borrow();
        let batches = board.batches.iter();
        let owned =
            batches.filter(|(_, b)| b.background.as_ref().is_some_and(|bg| bg.parent_rid == rid));
        owned.map(|(job, _)| *job).collect()
    };
    let why = if gw.shutdown.is_some() {
        "The gateway shut down before this subagent finished."
    } else {
        "Its parent session was closed before this subagent finished."
    };
    for job in mine {
        let Some(mut batch) = board.borrow_mut().batches.remove(&job) else {
            continue;
        };
        // Their ends find the delegation gone and only leave memory.
        cancelled(gw, job, now);
        let Some(bg) = batch.background.take() else {
            continue;
        };
        let text = batch.notice(&bg, now, util::unix_now(), why);
        settled(gw, rid, &bg.id);
        if let Some(s) = gw.sessions.get_mut(rid) {
            s.queued.push_back(text);
        }
    }
}

/// Background delegation `id` of session `rid` has its result: the notice kept for a kill
/// goes, in the same commit as the result's message (or queued prompt) comes.
fn settled(gw: &mut Gateway, rid: &str, id: &str) {
    if let Some(s) = gw.sessions.get_mut(rid) {
        s.background_delegations.retain(|a| a.id != id);
        s.queue_dirty = true;
        gw.mark_dirty(rid);
    }
}

/// Call `job` was stopped (its turn interrupted, its session closed): the children still
/// running are interrupted; each one's end still reaches the parent's client.
pub(crate) fn cancelled(gw: &mut Gateway, job: JobId, now: Instant) {
    let children: Vec<String> = gw
        .sessions
        .values()
        .filter(|s| s.delegated.as_ref().is_some_and(|d| d.job == job))
        .map(|s| s.runtime_id.clone())
        .collect();
    for rid in children {
        gw.interrupt_turn(&rid, now);
    }
}

/// `subagent.interrupt`: stop the child `subagent_id` alone; whether it was running.
pub(crate) fn interrupt(gw: &mut Gateway, subagent_id: &str, now: Instant) -> bool {
    let rid = gw
        .sessions
        .values()
        .find(|s| {
            s.delegated
                .as_ref()
                .is_some_and(|d| d.subagent_id == subagent_id)
        })
        .map(|s| s.runtime_id.clone());
    match rid {
        Some(rid) => gw.interrupt_turn(&rid, now),
        None => false,
    }
}

/// `delegation.status`: the children running, whether spawning is paused, the limits.
pub(crate) fn status(gw: &Gateway) -> Value {
    let limits = Limits::load(&gw.cfg.home);
    let mut active: Vec<(f64, Value)> = gw
        .sessions
        .values()
        .filter_map(|s| {
            let d = s.delegated.as_ref()?;
            Some((d.started_unix, d.record(&s.model)))
        })
        .collect();
    active.sort_by(|a, b| a.0.total_cmp(&b.0));
    json!({
        "active": active.into_iter().map(|(_, r)| r).collect::<Vec<_>>(),
        "paused": gw.tools.delegations.borrow().paused,
        "max_spawn_depth": limits.max_depth,
        "max_concurrent_children": limits.max_children,
    })
}
