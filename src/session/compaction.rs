//! Compaction: when a session's context nears the model's window (after a turn) or on
//! `/compress`, the model summarises the older turns; the live session moves to a new stored
//! session (`parent_session_id` = the old one) holding the summary and the latest turn, and the
//! old one keeps the full history, ended `compression` — all in one commit. It works on the
//! driver's [`TurnOwners`]; what becomes of a summary ([`judge`]) is a pure decision.

use std::time::Instant;

use serde_json::{Value, json};

use crate::rpc::frame::RpcError;
use crate::session::driver::{self, TurnOwners};
use crate::session::transcript::{self, Message, Role};
use crate::session::turn::Turn;
use crate::session::{Persisted, Session};
use crate::tools::asked::Asker;
use crate::util;

/// The conventions compaction writes into messages live with the messages (`transcript.rs`).
pub use crate::transcript::{SUMMARY_PREFIX, SUMMARY_REQUEST as INSTRUCTIONS, is_steer};
/// Share of the context window past which a finished turn triggers compaction.
const THRESHOLD: f64 = 0.75;
/// Longest text of one message put into the summary request.
const MESSAGE_CLIP: usize = 2_000;

/// A compaction in flight (the state of its turn).
pub struct Job {
    /// The `session.compress` request to answer; `None` for an automatic one.
    pub reply_to: Option<crate::rpc::frame::Id>,
    pub request: Vec<Message>,
    /// `transcript[..split]` is summarised, the rest kept.
    pub split: usize,
    pub before_messages: usize,
    pub before_tokens: u64,
}

/// The window compaction works against: config.yaml's `model.context_length`, else the
/// model's known window (`model::context`).
pub fn context_window(cfg: &crate::config::Config, model: &str) -> u64 {
    crate::model::context::context_window(cfg, model)
}

/// Rough request size: about four characters a token, plus a little per message.
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| {
            let chars = m
                .content
                .as_deref()
                .map_or(0, crate::transcript::weight_chars)
                + m.tool_calls.as_deref().map_or(0, str::len);
            chars.div_ceil(4) as u64 + 4
        })
        .sum()
}

/// Where the kept tail starts: the last user turn stays verbatim, everything before it is
/// summarised. `None` when there is no earlier turn, or too little to be worth it.
pub fn split_point(messages: &[Message]) -> Option<usize> {
    if messages.len() < 4 {
        return None;
    }
    let last_turn = messages
        .iter()
        .rposition(|m| m.role == Role::User && !is_steer(m))?;
    (last_turn >= 2).then_some(last_turn)
}

/// Whether a finished turn leaves the session near its model's window.
pub fn needs_compaction(messages: &[Message], window: u64) -> bool {
    let limit = (window as f64 * THRESHOLD) as u64;
    estimate_tokens(messages) > limit && split_point(messages).is_some()
}

/// The summary request: the instructions, then the older part as plain text.
pub fn build_request(older: &[Message], focus: Option<&str>) -> Vec<Message> {
    let mut instructions = INSTRUCTIONS.to_string();
    if let Some(f) = focus.filter(|f| !f.trim().is_empty()) {
        instructions.push_str(&format!(
            "\nFocus on: {}",
            util::clip(f.trim(), MESSAGE_CLIP)
        ));
    }
    let mut dump = String::new();
    for m in older {
        let flat = |t: &str| util::clip(&t.replace('\n', " "), MESSAGE_CLIP);
        let text = m.content.as_deref().map(crate::transcript::plain_text);
        if let Some(text) = text.as_deref().filter(|t| !t.trim().is_empty()) {
            let who = match m.role {
                Role::Tool => "tool result",
                other => other.as_str(),
            };
            dump.push_str(&format!("{who}: {}\n", flat(text)));
        }
        if let Some(calls) = m.tool_calls.as_deref() {
            dump.push_str(&format!("tool call: {}\n", flat(calls)));
        }
    }
    let now = util::unix_now();
    vec![
        Message::new(Role::System, Some(instructions), now),
        Message::new(Role::User, Some(dump), now),
    ]
}

/// The stored message that stands for the summarised turns.
pub fn summary_message(summary: &str, full_history_in: &str) -> Message {
    Message::new(
        Role::System,
        Some(format!("{SUMMARY_PREFIX}{full_history_in}]\n{summary}")),
        util::unix_now(),
    )
}

/// The lines `/compress` prints: before → after.
pub fn figures(before: (usize, u64), after: (usize, u64)) -> Value {
    json!({
        "headline": format!("Compressed: {} → {} messages", before.0, after.0),
        "token_line": format!("Rough transcript estimate: ~{} → ~{} tokens", before.1, after.1),
        "note": null,
        "noop": false,
    })
}

/// Start summarising `transcript[..split]` as this session's turn.
pub(crate) fn start(
    gw: &mut impl TurnOwners,
    rid: &str,
    reply_to: Option<crate::rpc::frame::Id>,
    focus: Option<&str>,
    now: Instant,
) -> bool {
    let slot = gw.turn_slot(rid);
    let Some(s) = gw.sessions().get_mut(rid) else {
        gw.release_turn_slot(rid);
        return false;
    };
    let Some(split) = split_point(&s.transcript) else {
        gw.release_turn_slot(rid);
        return false;
    };
    let job = Job {
        reply_to,
        request: build_request(&s.transcript[..split], focus),
        split,
        before_messages: s.transcript.len(),
        before_tokens: estimate_tokens(&s.transcript),
    };
    let text = format!(
        "⠋ compressing {} messages (~{} tok)…",
        job.before_messages, job.before_tokens
    );
    let mut turn = Turn::new(slot);
    turn.compaction = Some(Box::new(job));
    s.turn = Some(turn);
    s.last_active = now;
    gw.emit(
        rid,
        "status.update",
        json!({"kind": "compressing", "text": text}),
    );
    gw.sessions().mark_runnable(rid);
    true
}

/// What becomes of a summary: applied, or why not.
fn judge(job: &Job, s: Option<&Session>, result: Result<String, String>) -> Result<String, String> {
    match result {
        Ok(summary) if summary.trim().is_empty() => {
            Err("the model returned an empty summary".to_string())
        }
        // Automatic compaction must shrink the context, or it would run again after every
        // turn for nothing.
        Ok(summary) if job.reply_to.is_none() && !s.is_some_and(|s| shrinks(s, job, &summary)) => {
            Err("the summary would not be smaller than what it replaces".to_string())
        }
        other => other,
    }
}

/// The compaction turn ended: with the summary, or with why not.
pub(crate) fn finish(
    gw: &mut impl TurnOwners,
    rid: &str,
    job: Job,
    result: Result<String, String>,
    now: Instant,
) {
    let outcome = judge(&job, gw.sessions().get(rid), result).map(|s| rotate(gw, rid, &job, &s));
    match (&job.reply_to, outcome) {
        (Some(id), Ok(answer)) => gw.asking().1.outbox().answer(id, &answer),
        (Some(id), Err(e)) => {
            let err = RpcError::new(5005, format!("compression failed: {e}"));
            gw.asking().1.outbox().error(id, &err);
        }
        (None, Ok(answer)) => {
            let text = format!(
                "✓ context compacted: {} · {}",
                answer["summary"]["headline"].as_str().unwrap_or(""),
                answer["summary"]["token_line"].as_str().unwrap_or("")
            );
            gw.emit(
                rid,
                "status.update",
                json!({"kind": "compressing", "text": text}),
            );
        }
        (None, Err(e)) => gw.emit(
            rid,
            "status.update",
            json!({"kind": "warn", "text": format!("context compaction failed: {e}")}),
        ),
    }
    driver::emit_info(gw, rid);
    gw.emit(
        rid,
        "status.update",
        json!({"kind": "status", "text": "ready"}),
    );
    gw.mark_dirty(rid);
    driver::run_next_queued(gw, rid, now);
}

/// Whether the summary plus the kept tail is smaller than the transcript now.
fn shrinks(s: &Session, job: &Job, summary: &str) -> bool {
    let tail = &s.transcript[job.split.min(s.transcript.len())..];
    let after = estimate_tokens(&[summary_message(summary, &s.stored_id)]) + estimate_tokens(tail);
    after < estimate_tokens(&s.transcript)
}

/// Move the live session to a new stored session holding the summary and the kept tail;
/// the old stored session is ended `compression` with its full history. Returns the
/// `session.compress` answer.
fn rotate(gw: &mut impl TurnOwners, rid: &str, job: &Job, summary: &str) -> Value {
    let started_at = util::unix_now();
    let old_title = gw.sessions().get(rid).and_then(|s| s.title.clone());
    let (new_id, new_title) = gw.fresh_names(old_title.as_deref(), started_at);
    let Some(s) = gw.sessions().get_mut(rid) else {
        return Value::Null;
    };
    let old_id = s.stored_id.clone();
    let mut old = s.like(
        String::new(),
        old_id.clone(),
        s.title.clone(),
        s.started_at,
        s.last_active,
    );
    old.transcript = s.transcript.clone();
    old.last_activity_at = s.last_activity_at;
    old.persisted = s.persisted;
    old.stored_keep = s.stored_keep.take();
    old.parent_session_id = s.parent_session_id.clone();
    old.input_tokens = s.input_tokens;
    old.output_tokens = s.output_tokens;
    old.model_calls = s.model_calls;
    old.accounting = s.accounting;
    old.tool_call_count = s.tool_call_count;
    // Its queued prompts move to the new session.
    old.queue_dirty = true;
    old.ended = Some((started_at, "compression".to_string()));
    old.row_dirty = true;

    let tail = &s.transcript[job.split.min(s.transcript.len())..];
    let mut kept = vec![summary_message(summary, &old_id)];
    // The todo list goes on in the new session (Hermes re-injects it the same way).
    kept.extend(crate::tools::todo::snapshot(&s.transcript, tail));
    kept.extend(tail.iter().cloned());
    for m in &mut kept {
        m.row_id = None;
    }
    s.transcript = kept;
    s.stored_id = new_id.clone();
    if let Some(lease) = &s.lease {
        lease.transfer(&new_id);
    }
    s.parent_session_id = Some(old_id.clone());
    s.title = new_title;
    s.started_at = started_at;
    s.persisted = Persisted::default();
    s.row_dirty = true;
    s.queue_dirty = true;
    s.compressions += 1;
    let after = (s.transcript.len(), estimate_tokens(&s.transcript));
    // The context gauge shows the compacted size until the next model call measures it.
    s.context_used = after.1;
    let messages = transcript::display(&s.transcript);
    let usage = s.usage();
    crate::tools::shell_state::inherit(gw.call_parts().home, &old_id, &new_id);
    let info = gw.session_info(rid);
    let answer = json!({
        "status": "compressed",
        "removed": job.before_messages.saturating_sub(after.0),
        "before_messages": job.before_messages,
        "after_messages": after.0,
        "before_tokens": job.before_tokens,
        "after_tokens": after.1,
        "summary": figures((job.before_messages, job.before_tokens), after),
        "usage": usage,
        "info": info,
        "messages": messages,
        "session_key": new_id,
        "parent_session_id": old_id,
    });
    gw.sessions().reindex(rid);
    gw.retire_session(old);
    gw.mark_dirty(rid);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelEvent;

    fn msg(role: Role, text: &str) -> Message {
        Message::new(role, Some(text.to_string()), 0.0)
    }

    fn exchange(n: usize) -> Vec<Message> {
        (0..n)
            .flat_map(|i| {
                [
                    msg(Role::User, &format!("question {i}")),
                    msg(Role::Assistant, &format!("answer {i}")),
                ]
            })
            .collect()
    }

    #[test]
    fn the_last_turn_is_kept_and_one_turn_is_too_little() {
        assert_eq!(split_point(&exchange(1)), None);
        assert_eq!(split_point(&exchange(2)), Some(2));
        assert_eq!(split_point(&exchange(5)), Some(8));
    }

    #[test]
    fn a_steer_note_does_not_start_a_turn() {
        let mut t = exchange(2);
        t.push(msg(
            Role::User,
            &format!("{}more detail", crate::session::STEER_PREFIX),
        ));
        t.push(msg(Role::Assistant, "ok"));
        assert_eq!(split_point(&t), Some(2));
    }

    #[test]
    fn the_offline_summary_is_deterministic_and_names_what_the_user_said() {
        // The offline model reads the request this module writes.
        use crate::model::offline::offline_summary;
        let req = build_request(&exchange(2), None);
        let a = offline_summary(&req).unwrap();
        assert_eq!(a, offline_summary(&req).unwrap());
        assert!(a.contains("\"question 0\"; \"question 1\""), "{a}");
        assert!(a.contains("replied 2 time(s)"), "{a}");
        assert_eq!(offline_summary(&exchange(2)), None);
    }

    #[test]
    fn focus_goes_into_the_instructions() {
        let req = build_request(&exchange(2), Some("the database"));
        assert!(
            req[0]
                .content
                .as_deref()
                .unwrap()
                .ends_with("Focus on: the database")
        );
    }

    #[test]
    fn estimate_grows_with_text() {
        let small = estimate_tokens(&exchange(1));
        let big = estimate_tokens(&[msg(Role::User, &"word ".repeat(400))]);
        assert!(big > small && big >= 500);
    }

    fn long_exchange(n: usize) -> Vec<Message> {
        (0..n)
            .flat_map(|i| {
                [
                    msg(
                        Role::User,
                        &format!("question {i} {}", "detail ".repeat(50)),
                    ),
                    msg(
                        Role::Assistant,
                        &format!("answer {i} {}", "reply ".repeat(50)),
                    ),
                ]
            })
            .collect()
    }

    fn job(reply_to: Option<crate::rpc::frame::Id>, transcript: &[Message]) -> Job {
        Job {
            reply_to,
            request: Vec::new(),
            split: split_point(transcript).unwrap(),
            before_messages: transcript.len(),
            before_tokens: estimate_tokens(transcript),
        }
    }

    #[test]
    fn an_empty_summary_is_refused_and_an_automatic_one_must_shrink_the_context() {
        let mut s = crate::session::bare_session("r1", "s1");
        s.transcript = long_exchange(4);
        let auto = job(None, &s.transcript);
        let asked = job(Some(crate::rpc::frame::Id::null()), &s.transcript);
        let empty = judge(&auto, Some(&s), Ok("  ".into()));
        assert_eq!(empty.unwrap_err(), "the model returned an empty summary");
        let big = "summary ".repeat(2_000);
        let refused = judge(&auto, Some(&s), Ok(big.clone()));
        assert_eq!(
            refused.unwrap_err(),
            "the summary would not be smaller than what it replaces"
        );
        assert_eq!(
            judge(&asked, Some(&s), Ok(big.clone())).unwrap(),
            big,
            "a /compress the user asked for is applied anyway"
        );
        assert_eq!(judge(&auto, Some(&s), Ok("short".into())).unwrap(), "short");
        let failed = judge(&auto, Some(&s), Err("the model failed".into()));
        assert_eq!(failed.unwrap_err(), "the model failed");
    }

    #[test]
    fn a_finished_turn_near_the_window_needs_compaction() {
        let t = long_exchange(4);
        let size = estimate_tokens(&t);
        assert!(needs_compaction(&t, size));
        assert!(!needs_compaction(&t, size * 2), "well under the window");
        assert!(
            !needs_compaction(&long_exchange(1), 1),
            "one turn has nothing older to summarise"
        );
    }

    #[test]
    fn a_compaction_moves_the_session_to_a_new_stored_session_with_the_summary() {
        use crate::session::calls::fake::{Fake, RID, Then, done};
        let mut gw = Fake::new();
        let now = gw.now();
        let s = gw.sessions.get_mut(RID).unwrap();
        s.turn = None;
        s.transcript = long_exchange(4);
        assert!(start(&mut gw, RID, None, None, now));
        gw.model.round(
            vec![ModelEvent::Text("they talked".into()), done()],
            Then::Finish,
        );
        crate::session::driver::drive_turns(&mut gw, now, &crate::clock::Budget::unlimited());
        let said = gw.said();
        let texts: Vec<(&str, &str)> = said
            .iter()
            .map(|(k, p)| (k.as_str(), p["text"].as_str().unwrap_or("")))
            .collect();
        assert_eq!(texts.len(), 4, "{texts:?}");
        assert!(texts[0].1.starts_with("⠋ compressing 8 messages"));
        assert!(
            texts[1]
                .1
                .starts_with("✓ context compacted: Compressed: 8 → 3 messages")
        );
        assert_eq!(texts[2].0, "session.info");
        assert_eq!(texts[3], ("status.update", "ready"));
        assert!(
            said.iter().all(|(k, _)| k != "message.delta"),
            "the summary is not shown as a reply"
        );
        let s = gw.sessions.get(RID).unwrap();
        assert!(s.turn.is_none());
        assert_eq!(
            (s.stored_id.as_str(), s.parent_session_id.as_deref()),
            ("s2", Some("s1"))
        );
        assert!(
            s.transcript[0]
                .content
                .as_deref()
                .unwrap()
                .ends_with("they talked")
        );
        assert_eq!(s.transcript.len(), 3, "the summary and the last turn");
        assert_eq!(
            gw.sessions.by_stored("s2"),
            Some(RID),
            "found by its new stored id"
        );
        let [old] = gw.retired.as_slice() else {
            panic!("the old stored session is retired");
        };
        assert_eq!(old.stored_id, "s1");
        assert_eq!(old.transcript.len(), 8, "with its full history");
        assert_eq!(
            old.ended.as_ref().map(|e| e.1.as_str()),
            Some("compression")
        );
    }
}
