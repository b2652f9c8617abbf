//! The gateway's clients: the one on stdin/stdout of a gateway the TUI spawned, or the ones a
//! persistent gateway serves (`detach.rs`), each a [`ClientConn`] with its own out-queue and
//! backpressure. Frames go where they belong: an answer to the client that asked, a session's
//! events to the clients watching that session, the gateway's own events to all.

use std::collections::HashSet;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use serde_json::Value;

use super::client_conn::ClientConn;
use super::frame::{self, Id};
use super::{Outbox, RpcError};

/// One client.
pub struct Client {
    pub conn: ClientConn,
    /// Which client this is: numbers only grow, so an answer never reaches a later client.
    pub number: u64,
    /// The sessions whose events it receives; `None`: every session's (the stdio client).
    watching: Option<HashSet<Box<str>>>,
    /// The connection of the relay that brought it (a persistent gateway's client).
    pub relay: Option<UnixStream>,
    /// Its output is in the poll (regular files and /dev/null cannot be: always ready).
    pub output_polled: bool,
}

impl Client {
    fn watches(&self, session_id: &str) -> bool {
        session_id.is_empty()
            || self
                .watching
                .as_ref()
                .is_none_or(|set| set.contains(session_id))
    }
}

/// Every client, by number.
#[derive(Default)]
pub struct Clients {
    /// In increasing number.
    list: Vec<Client>,
    next: u64,
    /// The client whose request is being handled: it hears what the request sets off (a new
    /// session's first events come before the answer that names it).
    serving: Option<u64>,
}

/// Queued bytes past this many times a client's cap let a client of several go at once: the
/// others are not paused for it, so only this bounds its queue before the stall deadline.
const HARD_CAP_FACTOR: usize = 8;

impl Clients {
    /// Serve `conn` from now on; `every_session`: it hears every session (the stdio client), else
    /// those it names. Returns its number.
    pub fn add(&mut self, conn: ClientConn, every_session: bool, relay: Option<UnixStream>) -> u64 {
        let number = self.next;
        self.next += 1;
        self.list.push(Client {
            conn,
            number,
            watching: (!every_session).then(HashSet::new),
            relay,
            output_polled: false,
        });
        number
    }

    /// Let client `number` go: nothing more is queued for it.
    pub fn remove(&mut self, number: u64) -> Option<Client> {
        let at = self.index(number)?;
        Some(self.list.remove(at))
    }

    fn index(&self, number: u64) -> Option<usize> {
        self.list.binary_search_by_key(&number, |c| c.number).ok()
    }

    pub fn get(&self, number: u64) -> Option<&Client> {
        self.index(number).map(|i| &self.list[i])
    }

    pub fn get_mut(&mut self, number: u64) -> Option<&mut Client> {
        self.index(number).map(|i| &mut self.list[i])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Client> {
        self.list.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Client> {
        self.list.iter_mut()
    }

    pub fn numbers(&self) -> Vec<u64> {
        self.list.iter().map(|c| c.number).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Client `number` hears session `session_id`'s events from now on.
    pub fn watch(&mut self, number: u64, session_id: &str) {
        if let Some(set) = self.get_mut(number).and_then(|c| c.watching.as_mut())
            && !set.contains(session_id)
        {
            set.insert(session_id.into());
        }
    }

    /// Client `number`'s request is being handled (`None`: done).
    pub fn serving(&mut self, number: Option<u64>) {
        self.serving = number;
    }

    /// No client hears session `session_id` any more (it is gone).
    pub fn forget(&mut self, session_id: &str) {
        for c in &mut self.list {
            if let Some(set) = c.watching.as_mut() {
                set.remove(session_id);
            }
        }
    }

    /// A frame that jumps client `number`'s queue (a `ping`'s answer, a refused frame's).
    pub fn push_urgent(&mut self, number: u64, frame: Vec<u8>) {
        if let Some(c) = self.get_mut(number) {
            c.conn.push_urgent(frame);
        }
    }

    /// An event outside its session's sequence that must reach the session's clients now.
    pub fn urgent_event(&mut self, session_id: &str, params: &str) {
        for c in self.list.iter_mut().filter(|c| c.watches(session_id)) {
            c.conn.push_urgent(frame::event_frame(params));
        }
    }

    /// Everything queued so far may be written (its content is committed).
    pub fn release(&mut self) {
        for c in &mut self.list {
            c.conn.release();
        }
    }

    /// Every client is past its queue's cap: produce nothing until one reads. One slow client
    /// of several pauses only its own input; its stall deadline or [`Clients::over_hard_cap`]
    /// lets it go.
    pub fn paused(&self) -> bool {
        !self.list.is_empty() && self.list.iter().all(|c| c.conn.paused())
    }

    /// The clients whose queue is past the bound no one waits beyond (several clients only).
    pub fn over_hard_cap(&self) -> Vec<u64> {
        if self.list.len() < 2 {
            return Vec::new();
        }
        self.list
            .iter()
            .filter(|c| c.conn.queued_bytes() > c.conn.queue_cap().saturating_mul(HARD_CAP_FACTOR))
            .map(|c| c.number)
            .collect()
    }

    /// The earliest time a client that stopped reading counts as gone.
    pub fn stall_deadline(&self) -> Option<Instant> {
        self.list
            .iter()
            .filter_map(|c| c.conn.stall_deadline())
            .min()
    }

    /// The clients past their stall deadline at `now`.
    pub fn stalled(&self, now: Instant) -> Vec<u64> {
        self.list
            .iter()
            .filter(|c| c.conn.stall_deadline().is_some_and(|d| now >= d))
            .map(|c| c.number)
            .collect()
    }

    /// Bytes waiting in the out-queues.
    pub fn queued_bytes(&self) -> usize {
        self.list.iter().map(|c| c.conn.queued_bytes()).sum()
    }

    /// Whether released frames wait for an output the poll cannot report writable.
    pub fn unpolled_released(&self) -> bool {
        self.list
            .iter()
            .any(|c| !c.output_polled && c.conn.has_released())
    }

    /// Whether a read now could return something.
    pub fn wants_read(&self) -> bool {
        self.list
            .iter()
            .any(|c| c.conn.wants_read() && !c.conn.paused())
    }

    /// Forget queued output (benches that do not read it).
    pub fn discard_output(&mut self, now: Instant) {
        for c in &mut self.list {
            c.conn.discard_output(now);
        }
    }

    /// Give every client's descriptors their original flags back.
    pub fn restore_flags(&self) {
        for c in &self.list {
            c.conn.restore_flags();
        }
    }

    fn watchers(&mut self, session_id: &str) -> impl Iterator<Item = &mut Client> {
        if let Some(number) = self.serving
            && !session_id.is_empty()
        {
            self.watch(number, session_id);
        }
        self.list.iter_mut().filter(move |c| c.watches(session_id))
    }
}

impl Outbox for Clients {
    fn answer(&mut self, id: &Id, result: &Value) {
        let Some(c) = self.get_mut(id.client()) else {
            return;
        };
        c.conn.answer(id, result);
        // The session a client was given (created, resumed, branched) is one it watches.
        if let Some(sid) = result.get("session_id").and_then(Value::as_str) {
            self.watch(id.client(), sid);
        }
    }
    fn error(&mut self, id: &Id, err: &RpcError) {
        if let Some(c) = self.get_mut(id.client()) {
            c.conn.error(id, err);
        }
    }
    fn event(&mut self, session_id: &str, params: &str) {
        for c in self.watchers(session_id) {
            c.conn.event(session_id, params);
        }
    }
    fn delta(&mut self, session_id: &str, seq: u64, text: &str) {
        for c in self.watchers(session_id) {
            c.conn.delta(session_id, seq, text);
        }
    }
    fn takes_server_requests(&self) -> bool {
        !self.list.is_empty() && self.list.iter().all(|c| c.conn.takes_server_requests())
    }
    fn server_request(&mut self, id: &str, method: &str, params: &Value) {
        let sid = params
            .get("session_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        for c in self.watchers(&sid) {
            c.conn.server_request(id, method, params);
        }
    }
    fn audience(&self, session_id: &str) -> Vec<u64> {
        self.list
            .iter()
            .filter(|c| c.watches(session_id) || Some(c.number) == self.serving)
            .map(|c| c.number)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::fd::OwnedFd;

    /// A client whose output a test reads without waiting (an empty pipe answers at once).
    fn conn(queue_cap: usize) -> (ClientConn, OwnedFd) {
        let (c, _, out_r) = crate::rpc::client_conn::testing::conn(queue_cap);
        nix::fcntl::fcntl(
            &out_r,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .expect("non-blocking");
        (c, out_r)
    }

    fn frames(clients: &mut Clients, out: &OwnedFd) -> Vec<Value> {
        clients.release();
        for c in clients.iter_mut() {
            c.conn.write(Instant::now()).expect("write");
        }
        let mut buf = vec![0; 64 * 1024];
        let n = nix::unistd::read(out, &mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .map(|l| serde_json::from_str(l).expect("a frame is JSON"))
            .collect()
    }

    fn event(sid: &str, kind: &str) -> String {
        frame::event_params(kind, sid, &json!({}), Some(1))
    }

    #[test]
    fn answers_go_to_the_asker_and_events_to_the_session_watchers() {
        let mut clients = Clients::default();
        let (a, a_out) = conn(1 << 20);
        let (b, b_out) = conn(1 << 20);
        let na = clients.add(a, false, None);
        let nb = clients.add(b, false, None);
        // A is given session s1 by an answer; B names it later.
        clients.answer(
            &Id::of(&json!(1)).from_client(na),
            &json!({"session_id": "s1"}),
        );
        clients.event("s1", &event("s1", "message.start"));
        clients.event("s2", &event("s2", "message.start"));
        clients.event("", &event("", "gateway.ready"));
        let got_a = frames(&mut clients, &a_out);
        assert_eq!(got_a.len(), 3, "{got_a:?}");
        assert_eq!(got_a[0]["id"], 1);
        assert_eq!(got_a[1]["params"]["session_id"], "s1");
        assert_eq!(got_a[2]["params"]["type"], "gateway.ready");
        let got_b = frames(&mut clients, &b_out);
        assert_eq!(got_b.len(), 1, "only the gateway's own event: {got_b:?}");
        clients.watch(nb, "s1");
        clients.delta("s1", 2, "hi");
        assert_eq!(frames(&mut clients, &a_out).len(), 1);
        assert_eq!(
            frames(&mut clients, &b_out)[0]["params"]["payload"]["text"],
            "hi"
        );
        assert_eq!(clients.audience("s1"), vec![na, nb]);
        // What a client's request sets off, it hears (a new session before its answer).
        clients.serving(Some(nb));
        clients.event("s3", &event("s3", "session.info"));
        clients.serving(None);
        assert_eq!(frames(&mut clients, &b_out).len(), 1);
        assert!(frames(&mut clients, &a_out).is_empty());
        // A client that left is answered nothing, and a later one never gets its answers.
        clients.remove(na);
        clients.error(
            &Id::of(&json!(2)).from_client(na),
            &RpcError::new(4001, "x"),
        );
        assert!(frames(&mut clients, &b_out).is_empty());
    }

    #[test]
    fn one_slow_client_of_two_pauses_nothing_and_is_past_the_hard_cap_alone() {
        let mut clients = Clients::default();
        let (a, _a_out) = conn(100);
        let (b, _b_out) = conn(1 << 20);
        let na = clients.add(a, true, None);
        clients.add(b, true, None);
        for _ in 0..20 {
            clients.event("", &event("", "x".repeat(50).as_str()));
        }
        assert!(!clients.paused(), "the other client still reads");
        assert_eq!(clients.over_hard_cap(), vec![na]);
        clients.remove(na);
        assert!(clients.over_hard_cap().is_empty());
    }
}
