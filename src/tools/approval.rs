//! Approvals of dangerous commands, in both forms of PROTOCOL.md: the `approval.request` event
//! answered by `approval.respond` (the default), and the `approval` server request for clients
//! that declared `server_requests`. `always` approvals persist in
//! `$HERMES_HOME/tui_gateway_approvals.json`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};

use super::asked::{self, Asker};
use super::{Ask, ToolResult};
use crate::tools::WorkTimer;
use crate::util;

pub const CHOICES: [&str; 4] = ["once", "session", "always", "deny"];

/// How the user answered an approval.
pub enum Answer {
    Allow,
    /// The call's result says why it did not run.
    Deny(ToolResult),
}

/// An approval answered (or expired): the turn of session `rid` goes on with `answer`.
pub struct Answered {
    pub rid: String,
    pub answer: Answer,
    /// The rule the user approved for the rest of the session ("session"), for the session
    /// to remember.
    pub for_session: Option<&'static str>,
}

/// How approvals are asked.
const FORM: asked::Form = asked::Form {
    method: "approval",
    event: "approval.request",
    prefix: "apr",
    timeout: WorkTimer::ApprovalTimeout,
};

/// Bound on the saved "always" list we read at start.
const ALWAYS_FILE_MAX: u64 = 1024 * 1024;

/// The approvals awaiting an answer (each with the rule it would approve) and the rules
/// approved "always".
pub struct Approvals {
    pending: asked::Asked<&'static str>,
    always: BTreeSet<String>,
    path: PathBuf,
}

impl Approvals {
    pub fn load(home: &Path) -> Approvals {
        let path = home.join("tui_gateway_approvals.json");
        let always = crate::util::read_regular(&path, ALWAYS_FILE_MAX)
            .map_err(|e| crate::diag!("[gateway] {}: {e}; no saved approvals", path.display()))
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| {
                v.get("always").and_then(Value::as_array).map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
            })
            .unwrap_or_default();
        Approvals {
            pending: Default::default(),
            always,
            path,
        }
    }

    fn save(&self) -> std::io::Result<()> {
        let text = json!({ "always": self.always }).to_string();
        crate::private_file::replace(&self.path, text.as_bytes(), 0o600)
    }

    /// Approved without asking: always, for this session (`session_rules`), or the session
    /// is in yolo mode.
    pub fn pre_approved(&self, rule: &str, yolo: bool, session_rules: &[String]) -> bool {
        yolo || self.always.contains(rule) || session_rules.iter().any(|r| r == rule)
    }

    /// Ask the user of session `rid` about a dangerous call, unanswered by `deadline`; the
    /// turn waits. Returns the request's id.
    pub fn ask(&mut self, env: &mut dyn Asker, rid: &str, ask: &Ask, deadline: Instant) -> String {
        let payload = json!({
            // Shown to a person who decides on it: a CR or `ESC[2K` must not hide what bash runs.
            "command": util::printable(&ask.command),
            "description": util::printable(&ask.description),
            "choices": CHOICES,
        });
        self.pending
            .put(env, &FORM, rid, payload, deadline, ask.rule)
    }

    /// Put session `rid`'s waiting approvals to a client that attached since they were asked.
    pub fn put_again(&mut self, env: &mut dyn Asker, rid: &str, client: u64) {
        self.pending.put_again(env, &FORM, rid, client);
    }

    /// `approval.respond`: resolve the session's pending approvals (the named one, if given).
    pub fn respond(
        &mut self,
        env: &mut dyn Asker,
        rid: &str,
        choice: &str,
        request_id: Option<&str>,
    ) -> Vec<Answered> {
        let ids = self
            .pending
            .ids(|id, p| p.rid == rid && request_id.is_none_or(|want| want == id));
        ids.iter()
            .filter_map(|id| self.resolve(env, id, choice))
            .collect()
    }

    /// An answer to an `approval` server request; `None` if no approval asked with that id.
    pub fn on_answer(
        &mut self,
        env: &mut dyn Asker,
        id: &Value,
        result: &Result<Value, Value>,
    ) -> Option<Answered> {
        let request_id = self.pending.by_server_request(id)?;
        let choice = match result {
            Ok(v) => v.get("choice").and_then(Value::as_str).unwrap_or("deny"),
            Err(_) => "deny",
        };
        self.resolve(env, &request_id, choice)
    }

    /// The session an approval request belongs to.
    pub fn owner_session(&self, request_id: &str) -> Option<String> {
        self.pending.owner(request_id)
    }

    /// No answer in time: withdrawn and denied as any unanswered request is.
    pub fn expire(&mut self, env: &mut dyn Asker, request_id: &str) -> Option<Answered> {
        let rid = self.pending.owner(request_id)?;
        let denial = self.withdraw(env, request_id, "timeout")?;
        Some(Answered {
            rid,
            answer: Answer::Deny(denial),
            for_session: None,
        })
    }

    /// Withdraw an unanswered request (`request.cancel`); returns the denial for the caller
    /// to finish the call with.
    pub fn withdraw(
        &mut self,
        env: &mut dyn Asker,
        request_id: &str,
        reason: &str,
    ) -> Option<ToolResult> {
        self.pending.withdraw(env, &FORM, request_id, reason)?;
        Some(denial(&format!("no answer ({reason})")))
    }

    fn resolve(&mut self, env: &mut dyn Asker, request_id: &str, choice: &str) -> Option<Answered> {
        let why = match choice {
            "once" | "session" | "always" => None,
            "deny" => Some("denied by the user".to_string()),
            other => Some(format!("unknown choice {other:?}")),
        };
        let p = self.pending.answered(env, &FORM, request_id)?;
        if let Some(why) = why {
            return Some(denied(p.rid, &why));
        }
        if choice == "always" {
            self.always.insert(p.about.to_string());
            if let Err(e) = self.save() {
                crate::diag!("[gateway] could not save the approval: {e}");
            }
        }
        Some(Answered {
            rid: p.rid,
            answer: Answer::Allow,
            for_session: (choice == "session").then_some(p.about),
        })
    }
}

fn denied(rid: String, why: &str) -> Answered {
    Answered {
        rid,
        answer: Answer::Deny(denial(why)),
        for_session: None,
    }
}

/// The result of a call the user did not approve.
fn denial(why: &str) -> ToolResult {
    ToolResult::terminal(
        &format!("Command not run: {why}."),
        None,
        Some("denied".into()),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tools::asked::fake::FakeAsker;
    use crate::util::ScratchDir;

    const WAIT: Duration = Duration::from_secs(60);

    fn rm() -> Ask {
        Ask {
            rule: "recursive delete",
            description: "recursive delete".into(),
            // What a person reads must not be rewritten by the terminal it is shown on.
            command: "rm -rf /tmp/x\r\x1b[2Kls".into(),
        }
    }

    /// Approvals in a fresh home, and the id of one asked of session `s1`.
    fn asked(server_requests: bool) -> (ScratchDir, Approvals, FakeAsker, String) {
        let home = ScratchDir::new("approval");
        let mut a = Approvals::load(home.path());
        let mut env = FakeAsker::new(server_requests);
        let deadline = env.start + WAIT;
        let id = a.ask(&mut env, "s1", &rm(), deadline);
        (home, a, env, id)
    }

    fn allowed(a: &Answered) -> bool {
        matches!(a.answer, Answer::Allow)
    }

    fn denial_text(a: &Answered) -> String {
        match &a.answer {
            Answer::Deny(r) => r.content["output"].as_str().unwrap().to_string(),
            Answer::Allow => panic!("allowed"),
        }
    }

    #[test]
    fn a_waiting_approval_is_put_again_only_to_a_client_that_came_since() {
        for server_requests in [false, true] {
            let (_home, mut a, mut env, id) = asked(server_requests);
            let first = env.said();
            a.put_again(&mut env, "s1", 0);
            assert!(env.said().is_empty(), "the client asked is not asked twice");
            env.out.audience = vec![0, 1];
            a.put_again(&mut env, "s2", 1);
            assert!(env.said().is_empty(), "another session's approval");
            a.put_again(&mut env, "s1", 1);
            let again = env.said();
            assert_eq!(again.len(), 1, "{again:?}");
            // The same request (and server-request id): either client's answer resolves it.
            assert_eq!(again[0]["id"], first[0]["id"]);
            let payload = |f: &serde_json::Value| {
                f["params"]
                    .get("payload")
                    .cloned()
                    .unwrap_or(f["params"].clone())
            };
            assert_eq!(payload(&again[0])["request_id"], id.as_str());
            a.put_again(&mut env, "s1", 1);
            assert!(env.said().is_empty(), "asked once of each client");
            assert_eq!(a.respond(&mut env, "s1", "once", Some(&id)).len(), 1);
        }
    }

    #[test]
    fn an_approval_put_to_two_clients_is_withdrawn_from_the_other_once_answered() {
        let home = ScratchDir::new("approval");
        let mut a = Approvals::load(home.path());
        let mut env = FakeAsker::new(false);
        env.out.audience = vec![0, 1];
        let deadline = env.start + WAIT;
        let id = a.ask(&mut env, "s1", &rm(), deadline);
        env.said();
        assert_eq!(a.respond(&mut env, "s1", "deny", Some(&id)).len(), 1);
        let said = env.said();
        let cancel = &said[0]["params"];
        assert_eq!(cancel["type"], "request.cancel", "{said:?}");
        assert_eq!(cancel["payload"]["id"], id.as_str());
        assert_eq!(cancel["payload"]["reason"], "answered");
        // The late answer resolves nothing.
        assert!(a.respond(&mut env, "s1", "once", Some(&id)).is_empty());
    }

    #[test]
    fn an_asked_approval_is_answered_once_and_its_timer_cancelled() {
        let (_home, mut a, mut env, id) = asked(false);
        let t0 = env.start;
        let said = env.said();
        assert_eq!(said.len(), 1);
        let ev = &said[0]["params"];
        assert_eq!(ev["type"], "approval.request");
        assert_eq!(ev["session_id"], "s1");
        assert_eq!(ev["payload"]["request_id"], id.as_str());
        assert_eq!(ev["payload"]["choices"], json!(CHOICES));
        let shown = ev["payload"]["command"].as_str().unwrap();
        assert!(!shown.contains('\r') && !shown.contains('\x1b'), "{shown}");
        assert_eq!(a.owner_session(&id).as_deref(), Some("s1"));
        // Another session's answer does not reach it.
        assert!(a.respond(&mut env, "s2", "once", None).is_empty());

        let answered = a.respond(&mut env, "s1", "once", Some(&id));
        assert_eq!(answered.len(), 1);
        assert!(allowed(&answered[0]) && answered[0].rid == "s1");
        assert_eq!(answered[0].for_session, None);
        assert!(a.respond(&mut env, "s1", "once", None).is_empty());
        assert!(
            env.due(t0 + WAIT * 2).is_empty(),
            "the timeout was not cancelled"
        );
        assert!(env.said().is_empty());
        // "once" approves this call only.
        assert!(!a.pre_approved(rm().rule, false, &[]));
    }

    #[test]
    fn no_answer_in_time_withdraws_and_denies() {
        let (_home, mut a, mut env, id) = asked(false);
        let t0 = env.start;
        env.said();
        assert!(env.due(t0 + WAIT / 2).is_empty());
        let due = env.due(t0 + WAIT);
        assert_eq!(due, vec![WorkTimer::ApprovalTimeout(id.clone())]);
        let answered = a.expire(&mut env, &id).unwrap();
        assert_eq!(answered.rid, "s1");
        assert_eq!(
            denial_text(&answered),
            "Command not run: no answer (timeout)."
        );
        let said = env.said();
        assert_eq!(said[0]["params"]["type"], "request.cancel");
        assert_eq!(
            said[0]["params"]["payload"],
            json!({"id": id, "method": "approval", "reason": "timeout"})
        );
        // A late answer finds nothing to resolve; a second expiry does nothing.
        assert!(a.respond(&mut env, "s1", "once", Some(&id)).is_empty());
        assert!(a.expire(&mut env, &id).is_none() && env.said().is_empty());
    }

    #[test]
    fn the_server_request_form_is_answered_by_its_id() {
        let (_home, mut a, mut env, id) = asked(true);
        let t0 = env.start;
        let said = env.said();
        assert_eq!(said.len(), 1);
        let srq = &said[0];
        assert_eq!(srq["method"], "approval");
        assert_eq!(srq["params"]["session_id"], "s1");
        assert_eq!(srq["params"]["request_id"], id.as_str());
        let srq_id = srq["id"].clone();
        assert!(srq_id.as_str().unwrap().starts_with("srq-"), "{srq_id}");
        // An answer to some other request, or the request id itself, is not this one's.
        let ok = Ok(json!({"choice": "once"}));
        assert!(a.on_answer(&mut env, &json!("srq-other"), &ok).is_none());
        assert!(a.on_answer(&mut env, &json!(id), &ok).is_none());
        // A client that answers with an error denies.
        let err = Err(json!({"code": -1, "message": "no"}));
        let answered = a.on_answer(&mut env, &srq_id, &err).unwrap();
        assert_eq!(
            denial_text(&answered),
            "Command not run: denied by the user."
        );
        assert!(a.on_answer(&mut env, &srq_id, &ok).is_none());

        // Withdrawn, the cancel names the server request.
        let second = a.ask(&mut env, "s1", &rm(), t0 + WAIT);
        let srq_id = env.said()[0]["id"].clone();
        a.withdraw(&mut env, &second, "interrupted").unwrap();
        let cancel = &env.said()[0]["params"]["payload"];
        assert_eq!(cancel["id"], srq_id);
        // A choice it does not know denies, saying which.
        let third = a.ask(&mut env, "s1", &rm(), t0 + WAIT);
        let srq_id = env.said()[0]["id"].clone();
        let odd = Ok(json!({"choice": "sometimes"}));
        let answered = a.on_answer(&mut env, &srq_id, &odd).unwrap();
        assert!(denial_text(&answered).contains("unknown choice \"sometimes\""));
        assert!(a.owner_session(&third).is_none());
    }

    #[test]
    fn an_interrupt_withdraws_the_request_and_denies_the_call() {
        let (_home, mut a, mut env, id) = asked(false);
        let t0 = env.start;
        env.said();
        let denial = a.withdraw(&mut env, &id, "interrupted").unwrap();
        assert_eq!(
            denial.content["output"],
            "Command not run: no answer (interrupted)."
        );
        assert_eq!(denial.error.as_deref(), Some("denied"));
        let said = env.said();
        assert_eq!(said.len(), 1);
        assert_eq!(said[0]["params"]["session_id"], "s1");
        assert_eq!(
            said[0]["params"]["payload"],
            json!({"id": id, "method": "approval", "reason": "interrupted"})
        );
        assert!(env.due(t0 + WAIT).is_empty(), "the timeout outlived it");
        assert!(a.respond(&mut env, "s1", "once", None).is_empty());
        assert!(a.withdraw(&mut env, &id, "interrupted").is_none());
    }

    #[test]
    fn session_is_for_the_session_and_always_is_remembered_across_a_restart() {
        let (home, mut a, mut env, _) = asked(false);
        let t0 = env.start;
        let answered = a.respond(&mut env, "s1", "session", None);
        assert!(allowed(&answered[0]));
        assert_eq!(answered[0].for_session, Some("recursive delete"));
        assert!(!a.pre_approved("recursive delete", false, &[]));
        assert!(a.pre_approved("recursive delete", false, &["recursive delete".into()]));
        assert!(
            a.pre_approved("anything", true, &[]),
            "yolo approves everything"
        );

        a.ask(&mut env, "s2", &rm(), t0 + WAIT);
        let answered = a.respond(&mut env, "s2", "always", None);
        assert!(allowed(&answered[0]) && answered[0].for_session.is_none());
        assert!(a.pre_approved("recursive delete", false, &[]));
        let again = Approvals::load(home.path());
        assert!(again.pre_approved("recursive delete", false, &[]));
        assert!(!again.pre_approved("other rule", false, &[]));
    }
}
