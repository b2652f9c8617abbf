//! Asking the user and waiting, as approvals (`approval.rs`) and questions (`clarify.rs`) both
//! do: the request goes out as an event (answered by a `*.respond` method) or, for clients that
//! declared `server_requests`, as a server request; it waits here with its timeout timer until
//! it is answered, expires or is withdrawn (`request.cancel`). Everything here works on an
//! [`Asker`] (the client and the timers), never on the gateway, so it is unit-tested with a
//! fake outbox and a timer wheel driven by a fake clock.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::{Value, json};

use crate::rpc::Outbox;
use crate::timer::TimerId;
use crate::tools::WorkTimer;
use crate::util;

/// What asking needs of the rest of the gateway: the client and the timers.
pub trait Asker {
    /// Where server requests go (and whether the client takes them).
    fn outbox(&mut self) -> &mut dyn Outbox;
    /// An event of session `rid` (its next seq, into its ring, out through the outbox).
    fn emit(&mut self, rid: &str, kind: &str, payload: Value);
    /// `timer` fires at `at`.
    fn set_timer(&mut self, at: Instant, timer: WorkTimer) -> TimerId;
    fn cancel_timer(&mut self, id: TimerId);
}

/// An asker lent on (a view that holds one by reference).
impl<A: Asker + ?Sized> Asker for &mut A {
    fn outbox(&mut self) -> &mut dyn Outbox {
        (**self).outbox()
    }
    fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
        (**self).emit(rid, kind, payload);
    }
    fn set_timer(&mut self, at: Instant, timer: WorkTimer) -> TimerId {
        (**self).set_timer(at, timer)
    }
    fn cancel_timer(&mut self, id: TimerId) {
        (**self).cancel_timer(id);
    }
}

/// One kind of request: how it is put to the client.
pub(crate) struct Form {
    /// The server request's method, and what `request.cancel` names.
    pub method: &'static str,
    /// The event of the event form.
    pub event: &'static str,
    /// Request ids start with it.
    pub prefix: &'static str,
    /// The timer that expires a request.
    pub timeout: fn(String) -> WorkTimer,
}

/// A request awaiting the user's answer.
pub(crate) struct Request<T> {
    /// The session asked.
    pub rid: String,
    /// The server-request id when asked in that form.
    srq_id: Option<String>,
    timer: TimerId,
    /// What the client was shown, to show a client that attaches later.
    payload: Value,
    /// The clients it was put to ([`crate::rpc::Outbox::audience`]).
    asked_of: Vec<u64>,
    /// What the kind keeps of it (the approval's rule, the question's job).
    pub about: T,
}

impl<T> Request<T> {
    /// Say it to the client in the form it takes: a server request or an event.
    fn put_to_client(&mut self, env: &mut dyn Asker, form: &Form) {
        self.asked_of = env.outbox().audience(&self.rid);
        if env.outbox().takes_server_requests() {
            let id = self
                .srq_id
                .get_or_insert_with(|| format!("srq-{}", util::random_hex(12)))
                .clone();
            let mut payload = self.payload.clone();
            payload["session_id"] = json!(self.rid);
            env.outbox().server_request(&id, form.method, &payload);
        } else {
            env.emit(&self.rid, form.event, self.payload.clone());
        }
    }
}

/// The requests of one kind awaiting an answer, by request id.
pub struct Asked<T> {
    pending: HashMap<String, Request<T>>,
    /// The last requests answered that were put to several clients, newest last: a second
    /// client's late answer to one is not an error (the first answer won).
    answered: std::collections::VecDeque<String>,
}

/// Answered request ids remembered.
const ANSWERED_KEPT: usize = 64;

impl<T> Default for Asked<T> {
    fn default() -> Self {
        Asked {
            pending: HashMap::new(),
            answered: Default::default(),
        }
    }
}

impl<T> Asked<T> {
    /// The session a request belongs to.
    pub fn owner(&self, request_id: &str) -> Option<String> {
        self.pending.get(request_id).map(|r| r.rid.clone())
    }

    /// The ids of the requests `pick` chooses.
    pub(crate) fn ids(&self, pick: impl Fn(&str, &Request<T>) -> bool) -> Vec<String> {
        self.pending
            .iter()
            .filter(|(id, r)| pick(id, r))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The request put as the server request `id`.
    pub(crate) fn by_server_request(&self, id: &Value) -> Option<String> {
        let srq = id.as_str()?;
        self.ids(|_, r| r.srq_id.as_deref() == Some(srq))
            .into_iter()
            .next()
    }

    /// Put a request to the client of session `rid`, expiring at `deadline`; its request id.
    pub(crate) fn put(
        &mut self,
        env: &mut dyn Asker,
        form: &Form,
        rid: &str,
        mut payload: Value,
        deadline: Instant,
        about: T,
    ) -> String {
        let request_id = format!("{}-{}", form.prefix, util::random_hex(12));
        payload["request_id"] = json!(request_id);
        let timer = env.set_timer(deadline, (form.timeout)(request_id.clone()));
        let mut request = Request {
            rid: rid.to_string(),
            srq_id: None,
            timer,
            payload,
            asked_of: Vec::new(),
            about,
        };
        request.put_to_client(env, form);
        self.pending.insert(request_id.clone(), request);
        request_id
    }

    /// Put the requests of session `rid` again when `client`, which was not among those they
    /// were put to, attaches to it (a persistent gateway's next client, or another one).
    pub(crate) fn put_again(&mut self, env: &mut dyn Asker, form: &Form, rid: &str, client: u64) {
        for r in self.pending.values_mut() {
            if r.rid == rid && !r.asked_of.contains(&client) {
                r.put_to_client(env, form);
            }
        }
    }

    /// The request answered: no longer waiting, its timer cancelled.
    pub(crate) fn take(&mut self, env: &mut dyn Asker, request_id: &str) -> Option<Request<T>> {
        let r = self.pending.remove(request_id)?;
        env.cancel_timer(r.timer);
        Some(r)
    }

    /// The request answered by one client: taken as [`Asked::take`] does, and withdrawn from the
    /// other clients it was put to (`request.cancel`, reason `answered`).
    pub(crate) fn answered(
        &mut self,
        env: &mut dyn Asker,
        form: &Form,
        request_id: &str,
    ) -> Option<Request<T>> {
        let r = self.take(env, request_id)?;
        if r.asked_of.len() > 1 {
            if self.answered.len() == ANSWERED_KEPT {
                self.answered.pop_front();
            }
            self.answered.push_back(request_id.to_string());
            let id = r.srq_id.as_deref().unwrap_or(request_id);
            let cancel = json!({"id": id, "method": form.method, "reason": "answered"});
            env.emit(&r.rid, "request.cancel", cancel);
        }
        Some(r)
    }

    /// Whether `request_id`, put to several clients, was answered lately by one of them.
    pub(crate) fn was_answered(&self, request_id: &str) -> bool {
        self.answered.iter().any(|id| id == request_id)
    }

    /// Withdraw an unanswered request: the client is told (`request.cancel`) why.
    pub(crate) fn withdraw(
        &mut self,
        env: &mut dyn Asker,
        form: &Form,
        request_id: &str,
        reason: &str,
    ) -> Option<Request<T>> {
        let r = self.take(env, request_id)?;
        let id = r.srq_id.as_deref().unwrap_or(request_id);
        let cancel = json!({"id": id, "method": form.method, "reason": reason});
        env.emit(&r.rid, "request.cancel", cancel);
        Some(r)
    }
}

/// An [`Asker`] for unit tests: a fake outbox (events as frames without seq) and a timer wheel
/// that only fires when a test says what time it is.
#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use crate::rpc::frame;
    use crate::rpc::outbox::FakeOutbox;
    use crate::timer::TimerWheel;

    pub struct FakeAsker {
        pub out: FakeOutbox,
        pub timers: TimerWheel<WorkTimer>,
        pub start: Instant,
    }

    impl FakeAsker {
        pub fn new(server_requests: bool) -> FakeAsker {
            let start = Instant::now();
            FakeAsker {
                out: FakeOutbox {
                    server_requests,
                    audience: vec![0],
                    ..Default::default()
                },
                timers: TimerWheel::new(start),
                start,
            }
        }

        /// The timers due by `at`.
        pub fn due(&mut self, at: Instant) -> Vec<WorkTimer> {
            let mut due = Vec::new();
            self.timers.expire(at, &mut due);
            due
        }

        /// The frames said so far, and forget them.
        pub fn said(&mut self) -> Vec<Value> {
            std::mem::take(&mut self.out.frames)
        }
    }

    impl Asker for FakeAsker {
        fn outbox(&mut self) -> &mut dyn Outbox {
            &mut self.out
        }
        fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
            self.out
                .event(rid, &frame::event_params(kind, rid, &payload, None));
        }
        fn set_timer(&mut self, at: Instant, timer: WorkTimer) -> TimerId {
            self.timers.insert(at, timer)
        }
        fn cancel_timer(&mut self, id: TimerId) {
            self.timers.cancel(id);
        }
    }
}
