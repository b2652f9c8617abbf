//! Questions to the user: the `clarify` tool, and the questions any tool asks through
//! [`super::ToolContext::ask_user`]. Asked like approvals: the `clarify.request` event
//! answered by `clarify.respond {request_id, answer}` (today's TUI), or the `clarify` server
//! request for clients that declared `server_requests`; withdrawn (`request.cancel`) on
//! interrupt, and answered as "no answer" after `clarify_timeout`.

use std::time::Instant;

use serde_json::{Value, json};

use super::asked::{self, Asker};
use super::{JobId, Question, Start, Tool, ToolContext, ToolResult, UserAnswer};
use crate::tools::WorkTimer;
use crate::util;

/// Hermes offers at most this many choices (the TUI adds "Other").
const MAX_CHOICES: usize = 4;

/// How questions are asked.
const FORM: asked::Form = asked::Form {
    method: "clarify",
    event: "clarify.request",
    prefix: "clr",
    timeout: WorkTimer::ClarifyTimeout,
};

/// The questions awaiting an answer, each with the job its answer steps.
#[derive(Default)]
pub struct Questions {
    pending: asked::Asked<JobId>,
}

impl Questions {
    /// Put `q` to the user of session `rid` for `job`, unanswered by `deadline`.
    pub(crate) fn ask(
        &mut self,
        env: &mut dyn Asker,
        rid: &str,
        job: JobId,
        q: &Question,
        deadline: Instant,
    ) {
        let choices = (!q.choices.is_empty()).then(|| q.choices.clone());
        let payload = json!({"question": q.question, "choices": choices});
        self.pending.put(env, &FORM, rid, payload, deadline, job);
    }

    /// Put session `rid`'s waiting questions to a client that attached since they were asked.
    pub fn put_again(&mut self, env: &mut dyn Asker, rid: &str, client: u64) {
        self.pending.put_again(env, &FORM, rid, client);
    }

    /// `clarify.respond {request_id, answer}`: the job to step with the answer; `None` when
    /// no such question waits.
    pub fn respond(
        &mut self,
        env: &mut dyn Asker,
        request_id: &str,
        answer: &str,
    ) -> Option<(JobId, UserAnswer)> {
        let p = self.pending.answered(env, &FORM, request_id)?;
        Some((p.about, UserAnswer::Text(answer.into())))
    }

    /// Whether question `request_id` was answered lately (a second client's answer came late).
    pub fn was_answered(&self, request_id: &str) -> bool {
        self.pending.was_answered(request_id)
    }

    /// An answer to a `clarify` server request; `None` if no question was asked with that id.
    pub fn on_answer(
        &mut self,
        env: &mut dyn Asker,
        id: &Value,
        result: &Result<Value, Value>,
    ) -> Option<(JobId, UserAnswer)> {
        let request_id = self.pending.by_server_request(id)?;
        let answer = match result {
            Ok(v) => v.get("answer").and_then(Value::as_str).unwrap_or(""),
            Err(_) => "",
        };
        self.respond(env, &request_id, answer)
    }

    /// The session a question belongs to.
    pub fn owner_session(&self, request_id: &str) -> Option<String> {
        self.pending.owner(request_id)
    }

    /// No answer in time: the question is withdrawn and the call reads that nobody answered.
    pub fn expire(&mut self, env: &mut dyn Asker, request_id: &str) -> Option<(JobId, UserAnswer)> {
        let p = self.pending.withdraw(env, &FORM, request_id, "timeout")?;
        Some((p.about, UserAnswer::Timeout))
    }

    /// Withdraw the question `job` waits on, if any (its call was interrupted or finished).
    pub(crate) fn withdraw_for_job(&mut self, env: &mut dyn Asker, job: JobId, reason: &str) {
        for id in self.pending.ids(|_, p| p.about == job) {
            self.pending.withdraw(env, &FORM, &id, reason);
        }
    }
}

/// Hermes' `clarify {question, choices?}`: asks and waits for the user's answer.
pub struct Clarify;

impl Tool for Clarify {
    fn name(&self) -> &str {
        "clarify"
    }

    fn description(&self) -> &str {
        "Ask the user a question when you need a fact, an opinion or a decision before going on. \
         Give up to 4 'choices' (the user may still type an answer of their own), or none for \
         a free answer; options go in 'choices', never in the question. Not for approving \
         commands (the terminal asks for those itself); when little is at stake, choose a \
         sensible default yourself."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question alone."},
                "choices": {
                    "type": "array", "items": {"type": "string"}, "maxItems": MAX_CHOICES,
                    "description": "Up to 4 options, one an element; omit for a free answer."
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

#[cfg(test)]
mod asking_tests {
    use std::time::Duration;

    use super::*;
    use crate::tools::asked::fake::FakeAsker;

    const WAIT: Duration = Duration::from_secs(30);

    fn which() -> Question {
        Question {
            question: "Which?".into(),
            choices: vec!["a".into(), "b".into()],
        }
    }

    fn text(a: Option<(JobId, UserAnswer)>) -> (JobId, String) {
        match a {
            Some((job, UserAnswer::Text(t))) => (job, t),
            Some((_, UserAnswer::Timeout)) => panic!("timed out"),
            None => panic!("no question answered"),
        }
    }

    #[test]
    fn a_question_is_answered_in_either_form_and_only_once() {
        let mut qs = Questions::default();
        let mut env = FakeAsker::new(false);
        let t0 = env.start;
        qs.ask(&mut env, "s1", JobId(7), &which(), t0 + WAIT);
        let ev = &env.said()[0]["params"];
        assert_eq!(ev["type"], "clarify.request");
        assert_eq!(ev["payload"]["choices"], json!(["a", "b"]));
        let id = ev["payload"]["request_id"].as_str().unwrap().to_string();
        assert_eq!(qs.owner_session(&id).as_deref(), Some("s1"));
        assert_eq!(text(qs.respond(&mut env, &id, "b")), (JobId(7), "b".into()));
        assert!(qs.respond(&mut env, &id, "b").is_none());
        assert!(env.due(t0 + WAIT).is_empty());

        let mut env = FakeAsker::new(true);
        let t0 = env.start;
        qs.ask(&mut env, "s1", JobId(8), &which(), t0 + WAIT);
        let srq = env.said().remove(0);
        assert_eq!(srq["method"], "clarify");
        let ok = Ok(json!({"answer": "a"}));
        assert!(qs.on_answer(&mut env, &json!("srq-x"), &ok).is_none());
        assert_eq!(
            text(qs.on_answer(&mut env, &srq["id"], &ok)),
            (JobId(8), "a".into())
        );
        // An error answer reads as an empty answer (dismissed).
        qs.ask(&mut env, "s1", JobId(9), &which(), t0 + WAIT);
        let srq = env.said().remove(0);
        let err = Err(json!({"code": 1}));
        assert_eq!(text(qs.on_answer(&mut env, &srq["id"], &err)).1, "");
    }

    #[test]
    fn a_question_expires_or_is_withdrawn_with_its_call() {
        let mut qs = Questions::default();
        let mut env = FakeAsker::new(false);
        let t0 = env.start;
        qs.ask(&mut env, "s1", JobId(1), &which(), t0 + WAIT);
        qs.ask(&mut env, "s1", JobId(2), &which(), t0 + WAIT * 2);
        let ids: Vec<String> = env
            .said()
            .iter()
            .map(|f| {
                f["params"]["payload"]["request_id"]
                    .as_str()
                    .unwrap()
                    .into()
            })
            .collect();
        let due = env.due(t0 + WAIT);
        assert_eq!(due, vec![WorkTimer::ClarifyTimeout(ids[0].clone())]);
        assert!(matches!(
            qs.expire(&mut env, &ids[0]),
            Some((JobId(1), UserAnswer::Timeout))
        ));
        assert_eq!(env.said()[0]["params"]["payload"]["reason"], "timeout");
        // The call of job 2 is interrupted: its question is withdrawn, its timer with it.
        qs.withdraw_for_job(&mut env, JobId(2), "interrupted");
        let cancel = &env.said()[0]["params"]["payload"];
        assert_eq!(
            *cancel,
            json!({"id": ids[1], "method": "clarify", "reason": "interrupted"})
        );
        assert!(env.due(t0 + WAIT * 3).is_empty());
        assert!(qs.respond(&mut env, &ids[1], "late").is_none());
    }
}
