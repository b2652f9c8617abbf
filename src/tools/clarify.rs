//! Questions to the user: the `clarify` tool, and the questions any tool asks through
//! [`super::ToolContext::ask_user`]. Asked like approvals: the `clarify.request` event
//! answered by `clarify.respond {request_id, answer}` (today's TUI), or the `clarify` server
//! request for clients that declared `server_requests`; withdrawn (`request.cancel`) on
//! interrupt, and answered as "no answer" after `clarify_timeout`.

use std::time::Instant;

use serde_json::{Value, json};

use super::{JobId, Question, Start, Tool, ToolContext, ToolResult, UserAnswer, asked};
use crate::event_loop::{Gateway, Timer};
use crate::util;

/// Hermes offers at most this many choices (the TUI adds "Other").
const MAX_CHOICES: usize = 4;

/// How questions are asked; each waits with the job it steps.
const FORM: asked::Form<JobId> = asked::Form {
    method: "clarify",
    event: "clarify.request",
    prefix: "clr",
    timeout: Timer::ClarifyTimeout,
    asked: |tools| &mut tools.questions,
};

/// The questions awaiting an answer.
pub type Questions = asked::Asked<JobId>;

/// Put `q` to the user of session `rid` for `job`; its answer steps the job.
pub(crate) fn ask(gw: &mut Gateway, rid: &str, job: JobId, q: &Question, now: Instant) {
    let choices = (!q.choices.is_empty()).then(|| q.choices.clone());
    let payload = json!({"question": q.question, "choices": choices});
    let deadline = now + gw.cfg.clarify_timeout;
    asked::put(gw, &FORM, rid, payload, deadline, job);
}

/// The job waiting on the question has its answer.
fn answered(gw: &mut Gateway, job: JobId, answer: UserAnswer, now: Instant) {
    (gw.tools.hooks.question_answered)(gw, job, answer, now);
}

/// `clarify.respond {request_id, answer}`: false when no such question waits.
pub fn respond(gw: &mut Gateway, request_id: &str, answer: &str, now: Instant) -> bool {
    let Some(p) = asked::take(gw, &FORM, request_id) else {
        return false;
    };
    answered(gw, p.about, UserAnswer::Text(answer.into()), now);
    true
}

/// An answer to a `clarify` server request; false if no question was asked with that id.
pub fn on_answer(gw: &mut Gateway, id: &Value, result: Result<Value, Value>, now: Instant) -> bool {
    let Some(request_id) = gw.tools.questions.by_server_request(id) else {
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
    gw.tools.questions.owner(request_id)
}

/// No answer in time: the question is withdrawn and the call reads that nobody answered.
pub fn expire(gw: &mut Gateway, request_id: &str, now: Instant) {
    if let Some(p) = asked::withdraw(gw, &FORM, request_id, "timeout") {
        answered(gw, p.about, UserAnswer::Timeout, now);
    }
}

/// Withdraw the question `job` waits on, if any (its call was interrupted or finished).
pub(crate) fn withdraw_for_job(gw: &mut Gateway, job: JobId, reason: &str) {
    for id in gw.tools.questions.ids(|_, p| p.about == job) {
        asked::withdraw(gw, &FORM, &id, reason);
    }
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
