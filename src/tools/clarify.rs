//! Questions to the user: the `clarify` tool, and the questions any tool asks through
//! [`super::ToolContext::ask_user`]. Asked like approvals: the `clarify.request` event
//! answered by `clarify.respond {request_id, answer}` (today's TUI), or the `clarify` server
//! request for clients that declared `server_requests`; withdrawn (`request.cancel`) on
//! interrupt, and answered as "no answer" after `clarify_timeout`.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::{Value, json};

use super::{JobId, Question, Start, Tool, ToolContext, ToolResult, UserAnswer};
use crate::event_loop::{Gateway, Timer};
use crate::timer::TimerId;
use crate::util;

/// Hermes offers at most this many choices (the TUI adds "Other").
const MAX_CHOICES: usize = 4;

struct Pending {
    rid: String,
    job: JobId,
    srq_id: Option<String>,
    timer: TimerId,
}

/// The questions awaiting an answer, by request id.
#[derive(Default)]
pub struct Questions {
    pending: HashMap<String, Pending>,
}

/// Put `q` to the user of session `rid` for `job`; its answer steps the job.
pub(crate) fn ask(gw: &mut Gateway, rid: &str, job: JobId, q: &Question, now: Instant) {
    let request_id = format!("clr-{}", util::random_hex(12));
    let choices = (!q.choices.is_empty()).then(|| q.choices.clone());
    let payload = json!({"request_id": request_id, "question": q.question, "choices": choices});
    let srq_id = if gw.outbox().takes_server_requests() {
        let id = format!("srq-{}", util::random_hex(12));
        let mut params = payload.clone();
        params["session_id"] = json!(rid);
        gw.outbox().server_request(&id, "clarify", &params);
        Some(id)
    } else {
        gw.emit(rid, "clarify.request", payload);
        None
    };
    let timer = gw.timers.insert(
        now + gw.cfg.clarify_timeout,
        Timer::ClarifyTimeout(request_id.clone()),
    );
    gw.tools.questions.pending.insert(
        request_id,
        Pending {
            rid: rid.to_string(),
            job,
            srq_id,
            timer,
        },
    );
}

/// `clarify.respond {request_id, answer}`: false when no such question waits.
pub fn respond(gw: &mut Gateway, request_id: &str, answer: &str, now: Instant) -> bool {
    let Some(p) = take(gw, request_id) else {
        return false;
    };
    crate::session::calls::step_job(gw, p.job, Some(UserAnswer::Text(answer.into())), now);
    true
}

/// An answer to a `clarify` server request; false if no question was asked with that id.
pub fn on_answer(gw: &mut Gateway, id: &Value, result: Result<Value, Value>, now: Instant) -> bool {
    let Some(srq) = id.as_str() else { return false };
    let Some(request_id) = gw
        .tools
        .questions
        .pending
        .iter()
        .find(|(_, p)| p.srq_id.as_deref() == Some(srq))
        .map(|(id, _)| id.clone())
    else {
        return false;
    };
    let answer = match &result {
        Ok(v) => v.get("answer").and_then(Value::as_str).unwrap_or(""),
        Err(_) => "",
    };
    let answer = answer.to_string();
    respond(gw, &request_id, &answer, now)
}

/// The session a question belongs to.
pub fn owner_session(gw: &Gateway, request_id: &str) -> Option<String> {
    gw.tools
        .questions
        .pending
        .get(request_id)
        .map(|p| p.rid.clone())
}

/// No answer in time: the question is withdrawn and the call reads that nobody answered.
pub fn expire(gw: &mut Gateway, request_id: &str, now: Instant) {
    let Some(p) = gw.tools.questions.pending.get(request_id) else {
        return;
    };
    let job = p.job;
    withdraw(gw, request_id, "timeout");
    crate::session::calls::step_job(gw, job, Some(UserAnswer::Timeout), now);
}

/// Withdraw the question `job` waits on, if any (its call was interrupted or finished).
pub(crate) fn withdraw_for_job(gw: &mut Gateway, job: JobId, reason: &str) {
    let ids: Vec<String> = gw
        .tools
        .questions
        .pending
        .iter()
        .filter(|(_, p)| p.job == job)
        .map(|(id, _)| id.clone())
        .collect();
    for id in ids {
        withdraw(gw, &id, reason);
    }
}

fn withdraw(gw: &mut Gateway, request_id: &str, reason: &str) {
    let Some(p) = take(gw, request_id) else {
        return;
    };
    let id = p.srq_id.unwrap_or_else(|| request_id.to_string());
    gw.emit(
        &p.rid,
        "request.cancel",
        json!({"id": id, "method": "clarify", "reason": reason}),
    );
}

fn take(gw: &mut Gateway, request_id: &str) -> Option<Pending> {
    let p = gw.tools.questions.pending.remove(request_id)?;
    gw.timers.cancel(p.timer);
    Some(p)
}

/// Hermes' `clarify {question, choices?}`: asks and waits for the user's answer.
pub struct Clarify;

impl Tool for Clarify {
    fn name(&self) -> &str {
        "clarify"
    }

    fn description(&self) -> &str {
        "Ask the user a question when you need clarification, feedback, or a decision before \
         proceeding. Supports two modes:\n\n1. **Multiple choice** — provide up to 4 choices. \
         The user picks one or types their own answer via a 5th 'Other' option.\n2. \
         **Open-ended** — omit choices entirely. The user types a free-form response.\n\nPut \
         each option ONLY in the `choices` array, never in the `question` text.\n\nDo NOT use \
         this tool for yes/no confirmation of dangerous commands (the terminal tool handles \
         that). Prefer making a reasonable default choice yourself when the decision is \
         low-stakes."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question itself, and ONLY the question."},
                "choices": {
                    "type": "array", "items": {"type": "string"}, "maxItems": MAX_CHOICES,
                    "description": "Each selectable option as its own element (up to 4). Omit for an open-ended question."
                }
            },
            "required": ["question"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        match parse(args) {
            Ok(q) => {
                ctx.ask_user(q);
                Start::Later
            }
            Err(e) => Start::Done(ToolResult::error(e)),
        }
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Option<ToolResult> {
        let answer = ctx.answer.take()?;
        let q = parse(args).ok()?;
        let choices = (!q.choices.is_empty()).then_some(q.choices);
        let (response, summary) = match answer {
            UserAnswer::Text(t) => {
                let t = t.trim().to_string();
                let summary = if t.is_empty() {
                    "no answer".to_string()
                } else {
                    util::clip(&t, 80)
                };
                (t, summary)
            }
            UserAnswer::Timeout => (String::new(), "no answer (timed out)".to_string()),
        };
        Some(ToolResult::new(
            json!({"question": q.question, "choices_offered": choices, "user_response": response}),
            summary,
        ))
    }
}

/// The question and choices of a call, as Hermes normalises them.
fn parse(args: &Value) -> Result<Question, String> {
    let question = args
        .get("question")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .ok_or("Question text is required.")?;
    let choices = match args.get("choices") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(choice_text)
            .filter(|c| !c.is_empty())
            .take(MAX_CHOICES)
            .collect(),
        Some(_) => return Err("choices must be a list of strings.".into()),
    };
    Ok(Question {
        question: question.to_string(),
        choices,
    })
}

/// A choice as the user reads it: models sometimes send `{"label": …}` objects.
fn choice_text(c: &Value) -> String {
    match c {
        Value::String(s) => s.trim().to_string(),
        Value::Object(o) => ["label", "description", "text", "title"]
            .iter()
            .find_map(|k| o.get(*k).and_then(Value::as_str).map(str::trim))
            .filter(|s| !s.is_empty())
            .unwrap_or("")
            .to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_normalised_like_hermes() {
        let q = parse(
            &json!({"question": " Which? ", "choices": ["a", {"label": "b"}, "", 3, "d", "e"]}),
        )
        .unwrap();
        assert_eq!(q.question, "Which?");
        assert_eq!(q.choices, ["a", "b", "3", "d"]);
        assert!(parse(&json!({"question": "  "})).is_err());
        assert!(parse(&json!({"question": "q", "choices": "a,b"})).is_err());
        assert!(parse(&Value::Null).is_err());
        assert!(parse(&json!({"question": "q"})).unwrap().choices.is_empty());
    }
}
