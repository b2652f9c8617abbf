//! Asking the user and waiting, as approvals (`approval.rs`) and questions (`clarify.rs`) both
//! do: the request goes out as an event (answered by a `*.respond` method) or, for clients that
//! declared `server_requests`, as a server request; it waits here with its timeout timer until
//! it is answered, expires or is withdrawn (`request.cancel`).

use std::collections::HashMap;
use std::time::Instant;

use serde_json::{Value, json};

use super::Tools;
use crate::event_loop::{Gateway, Timer};
use crate::timer::TimerId;
use crate::util;

/// One kind of request: how it is put to the client and where its requests wait.
pub(crate) struct Form<T: 'static> {
    /// The server request's method, and what `request.cancel` names.
    pub method: &'static str,
    /// The event of the event form.
    pub event: &'static str,
    /// Request ids start with it.
    pub prefix: &'static str,
    /// The timer that expires a request.
    pub timeout: fn(String) -> Timer,
    pub asked: fn(&mut Tools) -> &mut Asked<T>,
}

/// A request awaiting the user's answer.
pub(crate) struct Request<T> {
    /// The session asked.
    pub rid: String,
    /// The server-request id when asked in that form.
    srq_id: Option<String>,
    timer: TimerId,
    /// What the kind keeps of it (the approval's rule, the question's job).
    pub about: T,
}

/// The requests of one kind awaiting an answer, by request id.
pub struct Asked<T> {
    pending: HashMap<String, Request<T>>,
}

impl<T> Default for Asked<T> {
    fn default() -> Self {
        Asked {
            pending: HashMap::new(),
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
}

/// Put a request to the client of session `rid`, expiring at `deadline`; its request id.
pub(crate) fn put<T>(
    gw: &mut Gateway,
    form: &Form<T>,
    rid: &str,
    mut payload: Value,
    deadline: Instant,
    about: T,
) -> String {
    let request_id = format!("{}-{}", form.prefix, util::random_hex(12));
    payload["request_id"] = json!(request_id);
    let srq_id = if gw.outbox().takes_server_requests() {
        let id = format!("srq-{}", util::random_hex(12));
        payload["session_id"] = json!(rid);
        gw.outbox().server_request(&id, form.method, &payload);
        Some(id)
    } else {
        gw.emit(rid, form.event, payload);
        None
    };
    let timer = gw
        .timers
        .insert(deadline, (form.timeout)(request_id.clone()));
    let request = Request {
        rid: rid.to_string(),
        srq_id,
        timer,
        about,
    };
    (form.asked)(&mut gw.tools)
        .pending
        .insert(request_id.clone(), request);
    request_id
}

/// The request answered: no longer waiting, its timer cancelled.
pub(crate) fn take<T>(gw: &mut Gateway, form: &Form<T>, request_id: &str) -> Option<Request<T>> {
    let r = (form.asked)(&mut gw.tools).pending.remove(request_id)?;
    gw.timers.cancel(r.timer);
    Some(r)
}

/// Withdraw an unanswered request: the client is told (`request.cancel`) why.
pub(crate) fn withdraw<T>(
    gw: &mut Gateway,
    form: &Form<T>,
    request_id: &str,
    reason: &str,
) -> Option<Request<T>> {
    let r = take(gw, form, request_id)?;
    let id = r.srq_id.as_deref().unwrap_or(request_id);
    let cancel = json!({"id": id, "method": form.method, "reason": reason});
    gw.emit(&r.rid, "request.cancel", cancel);
    Some(r)
}
