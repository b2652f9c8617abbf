//! The loop's side of session titles (`session/title.rs` decides and cleans): after a session's
//! first exchange, one model call to its provider (or the one `auxiliary.title_generation`
//! names, which also titles an offline session), on the loop like a turn's — its socket under
//! its own token ([`TokenOwner::Title`]), a timer for its waits and its deadline. It never holds
//! up a turn; a failure is a diagnostic line; the call is dropped when its session leaves memory
//! or the gateway shuts down, so nothing is said of a session after it is closed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::event_loop::{Gateway, Timer, TokenOwner};
use crate::model::{CallContext, ModelCall, ModelEvent, ModelRequest, Progress, TokenUsage};
use crate::reactor::Slot;
use crate::session::title::{self, Settings};
use crate::timer::TimerId;
use crate::util;

/// Advances of a call that has more ready at once, per wake-up (the rest next iteration).
const ADVANCES: usize = 8;

struct Pending {
    rid: String,
    /// The stored session the title is for (a compaction moves the live one to another).
    stored_id: String,
    call: Box<dyn ModelCall>,
    slot: Slot,
    timer: Option<TimerId>,
    started: Instant,
    /// `auxiliary.title_generation.timeout`: the whole call's.
    timeout: Duration,
    answer: String,
}

impl Pending {
    fn deadline(&self) -> Instant {
        self.started + self.timeout
    }
}

/// Title calls in flight, at most one per session.
#[derive(Default)]
pub struct Titles {
    pending: HashMap<u64, Pending>,
    next: u64,
}

impl Titles {
    fn of_session(&self, rid: &str) -> Option<u64> {
        self.pending
            .iter()
            .find(|(_, p)| p.rid == rid)
            .map(|(id, _)| *id)
    }
}

/// A turn of `rid` completed: ask its model for a title if the session gets one.
pub(crate) fn after_turn(gw: &mut Gateway, rid: &str, now: Instant) {
    if !gw.cfg.auto_title || gw.shutdown.is_some() || gw.titles.of_session(rid).is_some() {
        return;
    }
    let Some(s) = gw.sessions.get(rid) else {
        return;
    };
    let Some((user, answer)) = title::exchange(s) else {
        return;
    };
    let doc = crate::config_file::load(&gw.cfg.home).unwrap_or(yaml_rust2::Yaml::Null);
    let settings = Settings::read(&doc);
    let own_endpoint = crate::model::auxiliary::names_endpoint(&doc, title::TASK);
    // The offline model cannot write a title worth a call; a provider named for titles can.
    if !settings.enabled || (s.provider == "offline" && !own_endpoint) {
        return;
    }
    let (system, message) = title::request(&user, &answer, &settings, crate::util::unix_now());
    let stored_id = s.stored_id.clone();
    // `auxiliary.title_generation` may name its own provider or endpoint; else the session's
    // provider answers, with the model it names or the session's.
    let (mut own, model) = match own_endpoint {
        true => match crate::model::select::side_provider(&gw.cfg, &doc, title::TASK) {
            Ok((p, model)) => (Some(p), model),
            Err(why) => {
                crate::diag!("[title] session {stored_id}: no title: {why}");
                return;
            }
        },
        false => (
            None,
            crate::model::auxiliary::setting(&doc, title::TASK, "model")
                .map_or_else(|| s.model.clone(), str::to_string),
        ),
    };
    let provider = s.provider.clone();
    let id = gw.titles.next;
    gw.titles.next += 1;
    let slot = gw.reactor.slot(TokenOwner::Title(id));
    let req = ModelRequest {
        system: Some(&system),
        messages: std::slice::from_ref(&message),
        model: &model,
        tools: &[],
        reasoning_effort: None,
        fast: false,
        session_id: None,
        limits: title::LIMITS,
    };
    let mut ctx = CallContext { slot: &slot };
    let mut providers = crate::model::Providers {
        default: gw.provider.as_mut(),
        switched: &mut gw.switched_providers,
    };
    let started = util::contained(|| match own.as_mut() {
        Some(p) => p.start(req, &mut ctx, now),
        None => providers.of(&provider).start(req, &mut ctx, now),
    });
    let Ok(call) = started.map_err(|why| {
        crate::diag!("[title] session {stored_id}: no title: the model call failed: {why}");
    }) else {
        gw.reactor.release(&TokenOwner::Title(id));
        return;
    };
    gw.titles.pending.insert(
        id,
        Pending {
            rid: rid.to_string(),
            stored_id,
            call,
            slot,
            timer: None,
            started: now,
            timeout: settings.timeout,
            answer: String::new(),
        },
    );
    advance(gw, id, now);
}

/// The call's socket is ready, or its timer fired: make progress, set the title when done.
pub(crate) fn advance(gw: &mut Gateway, id: u64, now: Instant) {
    let Some(p) = gw.titles.pending.get_mut(&id) else {
        return;
    };
    let mut events = Vec::new();
    let mut progress = Progress::Ready;
    let mut outcome = None;
    for _ in 0..ADVANCES {
        let mut ctx = CallContext { slot: &p.slot };
        match util::contained(|| p.call.advance(&mut ctx, now, &mut events)) {
            Ok(next) => progress = next,
            Err(why) => {
                outcome = Some(Err(format!("the model call failed: {why}")));
                break;
            }
        }
        if progress != Progress::Ready {
            break;
        }
    }
    for ev in events {
        match ev {
            ModelEvent::Text(t) => p.answer.push_str(&t),
            ModelEvent::Done { usage, .. } => outcome = Some(Ok(usage)),
            ModelEvent::Failed(why) => outcome = Some(Err(why)),
            _ => {}
        }
    }
    if p.answer.len() > title::ANSWER_MAX {
        outcome = Some(Err(format!(
            "the answer is longer than {} bytes",
            title::ANSWER_MAX
        )));
    }
    if outcome.is_none() && progress == Progress::Finished {
        outcome = Some(Err("the call ended without an answer".into()));
    }
    if outcome.is_none() && now >= p.deadline() {
        outcome = Some(Err(format!(
            "no answer within {}s",
            p.timeout.as_secs_f64()
        )));
    }
    if let Some(outcome) = outcome {
        return finish(gw, id, outcome);
    }
    let wake = match progress {
        Progress::Ready => now,
        Progress::Wait(Some(at)) => at.min(p.deadline()),
        Progress::Wait(None) | Progress::Finished => p.deadline(),
    };
    if let Some(old) = p.timer.take() {
        gw.timers.cancel(old);
    }
    let timer = gw.timers.insert(wake, Timer::Title(id));
    if let Some(p) = gw.titles.pending.get_mut(&id) {
        p.timer = Some(timer);
    }
}

/// The call is over: its cost counts to the session, and its answer, cleaned, is the title of a
/// session still live, still the same stored session and still untitled.
fn finish(gw: &mut Gateway, id: u64, outcome: Result<TokenUsage, String>) {
    let Some(p) = drop_call(gw, id) else {
        return;
    };
    let live = gw
        .sessions
        .get_mut(&p.rid)
        .filter(|s| s.stored_id == p.stored_id);
    let Some(s) = live else {
        return;
    };
    let usage = match outcome {
        Ok(usage) => usage,
        Err(why) => {
            crate::diag!("[title] session {}: no title: {why}", p.stored_id);
            return;
        }
    };
    s.count_call(&usage);
    gw.mark_dirty(&p.rid);
    let Some(wanted) = title::clean(&p.answer) else {
        crate::diag!(
            "[title] session {}: the model's answer held no title",
            p.stored_id
        );
        return;
    };
    if gw.sessions.get(&p.rid).is_some_and(|s| s.title.is_none()) {
        crate::methods::session::set_title(gw, &p.rid, &wanted);
    }
}

/// Stop a call and forget it; what it was, for its end.
fn drop_call(gw: &mut Gateway, id: u64) -> Option<Pending> {
    let mut p = gw.titles.pending.remove(&id)?;
    if let Some(timer) = p.timer.take() {
        gw.timers.cancel(timer);
    }
    p.call.abort(&mut CallContext { slot: &p.slot });
    gw.reactor.release(&TokenOwner::Title(id));
    Some(p)
}

/// `rid` leaves memory: its title call, if any, is dropped.
pub(crate) fn session_gone(gw: &mut Gateway, rid: &str) {
    if let Some(id) = gw.titles.of_session(rid) {
        drop_call(gw, id);
    }
}

/// Shutdown: every call is dropped.
pub(crate) fn drop_all(gw: &mut Gateway) {
    let ids: Vec<u64> = gw.titles.pending.keys().copied().collect();
    for id in ids {
        drop_call(gw, id);
    }
}
