//! What the rest of the gateway says to its clients, whatever carries it: one connection
//! ([`super::client_conn::ClientConn`]), or every client with each frame routed
//! ([`super::clients::Clients`]); another transport or dialect is another implementation. Frames said here are held until the loop releases them (commit before
//! publish), so a caller never decides when they leave.

use serde_json::Value;

use super::RpcError;
#[cfg(test)]
use super::frame;
use super::frame::Id;

pub trait Outbox {
    /// The result of request `id`.
    fn answer(&mut self, id: &Id, result: &Value);
    /// The error answer to request `id` (`null` when the request had no readable id).
    fn error(&mut self, id: &Id, err: &RpcError);
    /// An event of session `session_id` (empty: the gateway's own), `params` as
    /// [`frame::event_params`] builds them.
    fn event(&mut self, session_id: &str, params: &str);
    /// A `message.delta` event of session `session_id` (may merge with the one before it).
    fn delta(&mut self, session_id: &str, seq: u64, text: &str);
    /// [`Outbox::answer`] or [`Outbox::error`], whichever `reply` is.
    fn reply(&mut self, id: &Id, reply: Result<Value, RpcError>) {
        match reply {
            Ok(result) => self.answer(id, &result),
            Err(err) => self.error(id, &err),
        }
    }
    /// Whether the client declared it answers server requests (`client.capabilities`).
    fn takes_server_requests(&self) -> bool;
    /// A request to the client (`approval`); its answer comes back as an input frame.
    fn server_request(&mut self, id: &str, method: &str, params: &Value);
    /// The clients that hear session `session_id` now (a request put to them is put again to
    /// a client that attaches later).
    fn audience(&self, _session_id: &str) -> Vec<u64> {
        vec![0]
    }
}

/// An outbox that records every frame as the JSON it would have written, for unit tests.
#[cfg(test)]
#[derive(Default)]
pub struct FakeOutbox {
    pub frames: Vec<Value>,
    pub server_requests: bool,
    /// The clients hearing every session.
    pub audience: Vec<u64>,
}

#[cfg(test)]
impl FakeOutbox {
    fn record(&mut self, bytes: Vec<u8>) {
        let value = serde_json::from_slice(&bytes).expect("a frame is JSON");
        self.frames.push(value);
    }

    /// The `params` of each event frame recorded, in order.
    pub fn events(&self) -> Vec<&Value> {
        self.frames
            .iter()
            .filter(|f| f["method"] == "event")
            .map(|f| &f["params"])
            .collect()
    }
}

#[cfg(test)]
impl Outbox for FakeOutbox {
    fn answer(&mut self, id: &Id, result: &Value) {
        self.record(frame::response(id, result));
    }
    fn error(&mut self, id: &Id, err: &RpcError) {
        self.record(frame::error(id, err));
    }
    fn event(&mut self, _session_id: &str, params: &str) {
        self.record(frame::event_frame(params));
    }
    fn delta(&mut self, session_id: &str, seq: u64, text: &str) {
        let params = frame::event_params(
            "message.delta",
            session_id,
            &serde_json::json!({ "text": text }),
            Some(seq),
        );
        self.record(frame::event_frame(&params));
    }
    fn takes_server_requests(&self) -> bool {
        self.server_requests
    }
    fn server_request(&mut self, id: &str, method: &str, params: &Value) {
        self.record(frame::server_request(id, method, params));
    }
    fn audience(&self, _session_id: &str) -> Vec<u64> {
        self.audience.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fake_records_what_the_wire_would_carry() {
        let mut out = FakeOutbox::default();
        out.reply(&Id::of(&json!(1)), Ok(json!({"a": 1})));
        out.reply(&Id::of(&json!(2)), Err(RpcError::new(4001, "bad")));
        out.event("s", &frame::event_params("x", "s", &json!({}), Some(3)));
        out.server_request("srq-1", "approval", &json!({"session_id": "s"}));
        assert_eq!(out.frames[0]["result"]["a"], 1);
        assert_eq!(out.frames[1]["error"]["code"], 4001);
        assert_eq!(out.events()[0]["seq"], 3);
        assert_eq!(out.frames[3]["method"], "approval");
    }
}
