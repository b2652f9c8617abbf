//! Streamable HTTP MCP servers (`url`, `headers`), as the MCP specification (2025-06-18)
//! defines the transport: each message of ours is a POST to the server's URL (connections
//! opened by `model::connect` on the loop: resolution, proxy, TLS; one whose answer ended
//! cleanly is kept, up to [`IDLE_MAX`] a server for [`IDLE_FOR`], for the next POST), with `Accept:
//! application/json, text/event-stream`; a request is answered as one JSON body or as an SSE
//! stream of messages ending with the answer; a notification or answer gets `202 Accepted`.
//! The `Mcp-Session-Id` the server gives with its `initialize` answer and the negotiated
//! `MCP-Protocol-Version` go with every later request; a `404` to them means the session is
//! gone and the client initialises again; the session is ended with a `DELETE`.
//! After `initialize` a GET opens the listening stream, where the server sends messages
//! outside any answer (`list_changed`, `ping`); a `405` means it offers none. A stream that
//! drops is opened again with `Last-Event-ID` (the listening stream after the SSE `retry:`
//! wait, with backoff, up to [`LISTEN_RETRIES`] failures in a row; an answer's stream after
//! its own `retry:` or at once, up to [`RESUMES`] times), so the server replays what was cut.
//! What arrives is handed to the same protocol logic as stdio (`super::on_message`, `wire.rs`).
//! Bounded: an answer of more than [`ANSWER_MAX`] bytes (an SSE stream counts all its events),
//! an event over [`LINE_MAX`], a wrong content type or status is refused with a clear error
//! for the request it carried; a server that cannot be reached is failed like an exited one.
//! Called by `mod.rs` ([`open`], [`post`], [`listen`], [`close`], [`end_session`],
//! [`on_timer`]) and by the loop for readiness of an exchange's sources ([`on_ready`]).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::config::ServerConfig;
use super::wire::{self, Incoming};
use super::{LINE_MAX, McpOwners};
use crate::model::connect::{self, Failure, Proxy};
use crate::model::http::{Response, Url, tls_refusal};
use crate::model::oneshot::describe;
use crate::tools::WorkTimer;

/// Bytes one answer may bring (an SSE stream counts all its events, comments included).
pub const ANSWER_MAX: usize = 4 * LINE_MAX;
/// POSTs to one server in flight at once; past it a message is refused.
const IN_FLIGHT_MAX: usize = 64;
/// Failures in a row of the listening stream before it is given up.
pub const LISTEN_RETRIES: u32 = 5;
/// The wait before the listening stream is opened again when the server gave no `retry:`;
/// it doubles with each failure in a row, between the floor and the ceiling.
const LISTEN_RETRY: Duration = Duration::from_secs(1);
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// A listening stream open this long counts as working even without events.
const LISTEN_STEADY: Duration = Duration::from_secs(30);
/// Times one answer's stream is resumed before its request is refused.
pub const RESUMES: u32 = 5;
/// Longest event id sent back as `Last-Event-ID` (a longer one is not kept).
const EVENT_ID_MAX: usize = 1024;
/// The longest the `DELETE` ending a session is waited for.
const DELETE_WAIT: Duration = Duration::from_secs(2);
/// Open connections kept per server between POSTs, and for how long (under the 5 s after which
/// common servers, Node's among them, close an idle one).
pub const IDLE_MAX: usize = 4;
pub const IDLE_FOR: Duration = Duration::from_secs(4);

/// The loop's sockets as the exchanges use them: a connection per exchange, opened and
/// released by the loop (which alone knows the poll and its tokens) and its readiness routed
/// back to [`on_ready`].
pub(crate) trait Sockets {
    /// Start connecting to `route` for exchange `exchange` (resolution, proxy, TLS).
    fn connect(
        &mut self,
        exchange: u64,
        route: &connect::Route,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Box<dyn Link>, Failure>;
    /// The exchange is over: its connection leaves the poll and closes, its token is freed.
    fn release(&mut self, exchange: u64, link: Box<dyn Link>);
}

/// One exchange's connection, as the exchange drives it.
pub(crate) trait Link {
    /// Make all the progress possible opening it; `Ok(true)` once it is open.
    fn open(&mut self) -> Result<bool, Failure>;
    /// Queue (TLS) or write request bytes; how many were taken.
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize>;
    /// Push what is queued to the socket; true when nothing is left.
    fn flush(&mut self) -> io::Result<bool>;
    /// Read answer bytes; `Ok(0)` is the end of the stream, `WouldBlock` means wait.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// A TLS handshake still under way.
    fn handshaking(&self) -> bool;
}

/// The streamable HTTP servers and their exchanges in flight.
#[derive(Default)]
pub struct Clients {
    servers: HashMap<String, Client>,
    exchanges: HashMap<u64, Exchange>,
    next: u64,
}

impl Clients {
    pub fn has(&self, name: &str) -> bool {
        self.servers.contains_key(name)
    }

    pub fn names(&self) -> Vec<String> {
        self.servers.keys().cloned().collect()
    }

    /// Some `DELETE` ending a session is still in flight (the shutdown waits for it).
    pub fn ending_sessions(&self) -> bool {
        self.exchanges
            .values()
            .any(|e| e.purpose == Purpose::Delete)
    }
}

/// One server: where it is, what every request carries.
struct Client {
    route: connect::Route,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The configured header lines, ready to send.
    headers: String,
    session: Option<String>,
    version: Option<String>,
    /// Bounds an exchange that carries no request (a notification, an answer, the DELETE).
    quiet_timeout: Duration,
    /// Bumped by [`close`]: an exchange of an older epoch is dropped.
    epoch: u64,
    listen: Listen,
    /// The last event id of the listening stream (its `Last-Event-ID` when reopened).
    listen_last_id: Option<String>,
    /// The listening stream's SSE `retry:`, the wait before it is reopened.
    retry: Option<Duration>,
    listen_failures: u32,
    /// Cut answers waiting out their stream's `retry:` before they are resumed, by when.
    resumes_due: Vec<(Instant, Sending)>,
    /// Connections whose last answer ended cleanly, kept for the next POST (most recent last).
    idle: Vec<Idle>,
}

/// A kept connection: still routed under the id of the exchange that opened it.
struct Idle {
    id: u64,
    link: Box<dyn Link>,
    since: Instant,
}

/// The GET listening stream of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listen {
    /// Not opened (before `initialize` is answered).
    Off,
    /// Exchange `id` is the stream.
    Open(u64),
    /// Dropped; opened again at this time.
    Reopen(Instant),
    /// The server answered `405`: it offers none.
    NotOffered,
    /// Failed [`LISTEN_RETRIES`] times in a row.
    GivenUp,
}

/// What an exchange is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// A POST of one message of ours.
    Post,
    /// The GET listening stream.
    Listen,
    /// A GET resuming the cut SSE answer to request `waiting` (`Last-Event-ID`).
    Resume,
    /// The DELETE ending the session: outlives its client, only logged.
    Delete,
}

/// How the answer's body is read, once its head says.
enum Body {
    Json(Vec<u8>),
    Events(Events),
    /// A 2xx to a message that is not a request: nothing in it matters.
    Ignored,
}

/// One request and its answer on a connection of its own.
struct Exchange {
    id: u64,
    server: String,
    epoch: u64,
    purpose: Purpose,
    bytes: Vec<u8>,
    sent: usize,
    /// The id of our request it carries, until it is answered.
    waiting: Option<u64>,
    initialize: bool,
    /// Sent with a session id (a 404 then means the session is gone).
    in_session: bool,
    deadline: Option<Instant>,
    link: Box<dyn Link>,
    /// The link is open: the request is being written, or its answer read.
    open: bool,
    response: Response,
    body: Option<Body>,
    /// Body bytes of the answer so far (over all its resumed streams).
    received: usize,
    /// Times this answer's stream was resumed.
    resumes: u32,
    /// The event id a resumed stream continues from.
    resumed_from: Option<String>,
    opened_at: Instant,
}

/// Why an exchange ended before its answer.
enum Ended {
    /// The server cannot be reached: it is failed like a server that exited.
    Unreachable(String),
    /// A 404 to a request of the session: initialise again.
    SessionGone,
    /// The connection broke (or the stream ended) before the answer: resumable.
    Cut(String),
    /// TLS failed (a certificate refused, by either side): retrying cannot help.
    Untrusted(String),
    /// A `405` to the listening GET: the server offers no stream.
    NotOffered,
    /// The answer is unusable; the request it carried gets this error.
    Refused(String),
}

/// SSE events (`data:` lines up to a blank line) cut from the body with the stdio line cap;
/// `id:` and `retry:` are kept for reconnecting.
struct Events {
    lines: wire::Lines,
    data: Vec<u8>,
    has_data: bool,
    overlong: bool,
    /// The last-event-ID buffer (`id:`), and its value at the last event dispatched.
    id_buffer: Option<String>,
    last_id: Option<String>,
    /// The last `retry:` (milliseconds).
    retry: Option<u64>,
    /// Events dispatched.
    count: u64,
}

impl Events {
    fn new(resumed_from: Option<String>) -> Events {
        Events {
            lines: wire::Lines::new(LINE_MAX),
            data: Vec::new(),
            has_data: false,
            overlong: false,
            id_buffer: resumed_from.clone(),
            last_id: resumed_from,
            retry: None,
            count: 0,
        }
    }

    /// Feed body bytes; each complete event's data goes to `event`.
    fn feed(&mut self, bytes: &[u8], mut event: impl FnMut(&[u8])) -> Result<(), String> {
        let Events {
            lines,
            data,
            has_data,
            overlong,
            id_buffer,
            last_id,
            retry,
            count,
        } = self;
        let before = lines.too_long;
        lines.feed(bytes, |line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                *last_id = id_buffer.clone();
                if *has_data {
                    *count += 1;
                    event(data);
                }
                data.clear();
                *has_data = false;
                return;
            }
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &[][..]),
            };
            let value = value.strip_prefix(b" ").unwrap_or(value);
            match field {
                b"data" => {}
                b"id" => {
                    if let Some(id) = event_id(value) {
                        *id_buffer = (!id.is_empty()).then_some(id);
                    }
                    return;
                }
                b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                    return *retry = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                }
                _ => return, // a comment (keep-alive), `event:`
            }
            if data.len() + value.len() + 1 > LINE_MAX {
                *overlong = true;
                return;
            }
            if *has_data {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
            *has_data = true;
        });
        if lines.too_long > before || *overlong {
            return Err(format!(
                "the server sent an event longer than {} MiB",
                LINE_MAX >> 20
            ));
        }
        Ok(())
    }
}

/// An `id:` value as it may go back in a `Last-Event-ID` header (visible ASCII, bounded);
/// `None` for one that is not usable (ignored, the old id stays).
fn event_id(value: &[u8]) -> Option<String> {
    let usable = value.len() <= EVENT_ID_MAX && value.iter().all(|b| (0x20..0x7f).contains(b));
    usable.then(|| String::from_utf8_lossy(value).into_owned())
}

/// The messages of a JSON answer body: one message, or a batch (2025-03-26).
fn json_messages(body: &[u8], out: &mut Vec<Incoming>) {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(batch)) => {
            out.extend(batch.iter().map(|m| wire::parse(m.to_string().as_bytes())));
        }
        _ => out.push(wire::parse(body)),
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// Header lines from `config.yaml`'s `headers`, refused when one could break the request.
fn header_lines(headers: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    for (name, value) in headers {
        let token = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if name.is_empty() || !token || value.contains(['\r', '\n']) {
            return Err(format!("header {name:?} is not a valid HTTP header"));
        }
        out.push_str(&format!("{name}: {}\r\n", value.trim()));
    }
    Ok(out)
}

/// Set up the server `name` at its `url`, its TLS configuration built once here (nothing is
/// connected until a message is posted). `Ok(Some(warning))`: set up, but a key has no effect.
pub(crate) fn open(
    gw: &mut impl McpOwners,
    name: &str,
    config: &ServerConfig,
) -> Result<Option<String>, String> {
    close(gw, name);
    let target = Url::parse(config.url.as_deref().unwrap_or_default())?;
    let mut warning = None;
    let tls = if target.tls {
        Some(super::tls::client_config(config.tls.as_ref()?)?)
    } else {
        if config.tls != Ok(super::config::Tls::default()) {
            // As in Hermes (httpx), a plain http:// URL is used as it is; say so.
            warning = Some("ssl_verify and client_cert have no effect on an http:// URL".into());
        }
        None
    };
    let proxy = Proxy::for_target(&target)?;
    let quiet_timeout = gw
        .mcp()
        .servers
        .get(name)
        .map_or(Duration::from_secs(60), |s| s.config.connect_timeout);
    let epoch = gw.mcp().http.servers.get(name).map_or(0, |c| c.epoch + 1);
    gw.mcp().http.servers.insert(
        name.to_string(),
        Client {
            route: connect::Route::new(target, proxy),
            tls,
            headers: header_lines(&config.headers)?,
            session: None,
            version: None,
            quiet_timeout,
            epoch,
            listen: Listen::Off,
            listen_last_id: None,
            retry: None,
            listen_failures: 0,
            resumes_due: Vec::new(),
            idle: Vec::new(),
        },
    );
    Ok(warning)
}

/// The request head of `method` to the client's URL, with the session's headers; a POST
/// carries a body of `body_len` bytes, a GET asks for an event stream (from `last_event_id`).
fn request_head(c: &Client, method: &str, body_len: usize, last_event_id: Option<&str>) -> String {
    let mut target = c.route.request_target("");
    if !target.starts_with(['/', 'h']) {
        target.insert(0, '/');
    }
    // A POST's connection may be kept for the next; a stream's or the DELETE's is not.
    let connection = if method == "POST" {
        ""
    } else {
        "Connection: close\r\n"
    };
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tui-gateway/{}\r\n\
         {connection}{}{}",
        c.route.target.authority(),
        crate::VERSION,
        c.route.request_headers(),
        c.headers,
    );
    match method {
        "GET" => head.push_str("Accept: text/event-stream\r\n"),
        "POST" => head.push_str(&format!(
            "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
             Content-Length: {body_len}\r\n"
        )),
        _ => head.push_str("Accept: application/json, text/event-stream\r\n"),
    }
    if let Some(id) = last_event_id {
        head.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    if let Some(s) = &c.session {
        head.push_str(&format!("Mcp-Session-Id: {s}\r\n"));
    }
    if let Some(v) = &c.version {
        head.push_str(&format!("MCP-Protocol-Version: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// What a message of ours is, as far as its transport cares.
#[derive(serde::Deserialize)]
struct Peek {
    id: Option<Value>,
    method: Option<String>,
    params: Option<PeekParams>,
}

#[derive(serde::Deserialize)]
struct PeekParams {
    #[serde(rename = "requestId")]
    request_id: Option<u64>,
}

/// POST one message (a `wire` line) to the server.
pub(crate) fn post(gw: &mut impl McpOwners, name: &str, line: Vec<u8>, now: Instant) {
    let peek: Option<Peek> = serde_json::from_slice(&line).ok();
    let method = peek.as_ref().and_then(|p| p.method.clone());
    let request = peek
        .as_ref()
        .filter(|p| p.method.is_some())
        .and_then(|p| p.id.as_ref()?.as_u64());
    if method.as_deref() == Some("notifications/cancelled")
        && let Some(id) = peek.as_ref().and_then(|p| p.params.as_ref()?.request_id)
    {
        // The spec's cancellation is the notification; the answer's stream is dropped too.
        abort_waiting(gw, name, id);
    }
    let http = &gw.mcp().http;
    if !http.has(name) {
        return;
    }
    let in_flight = http
        .exchanges
        .values()
        .filter(|e| e.server == name && matches!(e.purpose, Purpose::Post | Purpose::Resume))
        .count();
    if in_flight >= IN_FLIGHT_MAX {
        let why = format!("more than {IN_FLIGHT_MAX} requests in flight to it");
        return refuse(gw, name, request, why, now);
    }
    let c = &gw.mcp().http.servers[name];
    let mut bytes = request_head(c, "POST", line.len(), None).into_bytes();
    bytes.extend_from_slice(&line);
    let sending = Sending {
        purpose: Purpose::Post,
        bytes,
        waiting: request,
        initialize: method.as_deref() == Some("initialize"),
        in_session: c.session.is_some(),
        deadline: request.is_none().then(|| now + c.quiet_timeout),
        resumes: 0,
        resumed_from: None,
        received: 0,
    };
    start(gw, name, sending, now);
}

/// Open the GET listening stream of `name` (once `initialize` is answered, and again when it
/// dropped), from the last event id it gave.
pub(crate) fn listen(gw: &mut impl McpOwners, name: &str, now: Instant) {
    let Some(c) = gw.mcp().http.servers.get(name) else {
        return;
    };
    if !matches!(c.listen, Listen::Off | Listen::Reopen(_)) {
        return;
    }
    let bytes = request_head(c, "GET", 0, c.listen_last_id.as_deref()).into_bytes();
    let sending = Sending {
        purpose: Purpose::Listen,
        bytes,
        waiting: None,
        initialize: false,
        in_session: c.session.is_some(),
        deadline: None,
        resumes: 0,
        resumed_from: c.listen_last_id.clone(),
        received: 0,
    };
    start(gw, name, sending, now);
}

/// What an exchange sends and how it ends.
struct Sending {
    purpose: Purpose,
    bytes: Vec<u8>,
    waiting: Option<u64>,
    initialize: bool,
    in_session: bool,
    deadline: Option<Instant>,
    resumes: u32,
    resumed_from: Option<String>,
    received: usize,
}

/// The request `id` cannot be sent or answered: it gets `why` as its error answer.
fn refuse(gw: &mut impl McpOwners, name: &str, id: Option<u64>, why: String, now: Instant) {
    match id {
        Some(id) => {
            let answer = Incoming::Answer {
                id,
                result: Err(why),
            };
            super::on_message(gw, name, answer, now);
        }
        None => crate::diag!("[mcp] {name}: a message was not delivered: {why}"),
    }
}

fn start(gw: &mut impl McpOwners, name: &str, sending: Sending, now: Instant) {
    let kept = match sending.purpose {
        Purpose::Post => take_idle(gw, name, now),
        _ => None,
    };
    if let Some((id, link)) = kept {
        return begin(gw, name, id, link, true, sending, now);
    }
    let Some(c) = gw.mcp().http.servers.get(name) else {
        return;
    };
    let (route, tls, epoch) = (c.route.clone(), c.tls.clone(), c.epoch);
    let http = &mut gw.mcp().http;
    let id = http.next;
    http.next += 1;
    let connected = gw.sockets().connect(id, &route, tls);
    let link = match connected {
        Ok(link) => link,
        Err(f) => {
            let why = describe(f);
            return match sending.purpose {
                Purpose::Delete => crate::diag!("[mcp] {name}: ending the session failed: {why}"),
                Purpose::Listen => listen_ended(gw, name, epoch, false, why, now),
                Purpose::Post | Purpose::Resume => super::failed(gw, name, why, now),
            };
        }
    };
    begin(gw, name, id, link, false, sending, now);
}

/// Exchange `id` sends `sending` on `link` (`open`: a kept connection).
fn begin(
    gw: &mut impl McpOwners,
    name: &str,
    id: u64,
    link: Box<dyn Link>,
    open: bool,
    sending: Sending,
    now: Instant,
) {
    let Some(epoch) = gw.mcp().http.servers.get(name).map(|c| c.epoch) else {
        return gw.sockets().release(id, link);
    };
    let deadline = sending.deadline;
    gw.mcp().http.exchanges.insert(
        id,
        Exchange {
            id,
            server: name.to_string(),
            epoch,
            purpose: sending.purpose,
            bytes: sending.bytes,
            sent: 0,
            waiting: sending.waiting,
            initialize: sending.initialize,
            in_session: sending.in_session,
            deadline,
            link,
            open,
            response: Response::default(),
            body: None,
            received: sending.received,
            resumes: sending.resumes,
            resumed_from: sending.resumed_from,
            opened_at: now,
        },
    );
    if sending.purpose == Purpose::Listen
        && let Some(c) = gw.mcp().http.servers.get_mut(name)
    {
        c.listen = Listen::Open(id);
    }
    if let Some(at) = deadline {
        gw.set_timer(at, WorkTimer::Mcp(name.to_string()));
    }
    // A literal address may already be connected: look at once.
    on_ready(gw, id, now);
}

/// A source of exchange `id` is ready: make all the progress possible, hand over what came.
pub(crate) fn on_ready(gw: &mut impl McpOwners, id: u64, now: Instant) {
    let Some(mut ex) = gw.mcp().http.exchanges.remove(&id) else {
        return idle_ready(gw, id);
    };
    let mut messages = Vec::new();
    let mut ended = ex.advance(&mut messages);
    let name = ex.server.clone();
    if ex.purpose == Purpose::Delete {
        if let Some(Err(
            Ended::Refused(why) | Ended::Unreachable(why) | Ended::Cut(why) | Ended::Untrusted(why),
        )) = &ended
        {
            crate::diag!("[mcp] {name}: ending the session failed: {why}");
        }
        return match ended {
            Some(_) => finish(gw, ex),
            None => {
                gw.mcp().http.exchanges.insert(id, ex);
            }
        };
    }
    if let Some(c) = gw.mcp().http.servers.get_mut(&name)
        && c.epoch == ex.epoch
    {
        if ex.initialize
            && let Some(session) = ex.response.mcp_session.clone()
        {
            c.session = Some(session);
        }
        if let Some(Body::Events(events)) = &ex.body
            && ex.purpose == Purpose::Listen
        {
            if let Some(ms) = events.retry {
                c.retry = Some(Duration::from_millis(ms));
            }
            c.listen_last_id = events.last_id.clone();
        }
    }
    for message in messages {
        if let Incoming::Answer {
            id: answered,
            result,
        } = &message
            && ex.waiting == Some(*answered)
        {
            ex.waiting = None;
            if ex.initialize
                && let Ok(init) = result
                && let Some(c) = gw.mcp().http.servers.get_mut(&name)
            {
                c.version = init["protocolVersion"].as_str().map(str::to_string);
            }
        }
        super::on_message(gw, &name, message, now);
    }
    if ended.is_none() && ex.purpose != Purpose::Listen && ex.waiting.is_none() && ex.body.is_some()
    {
        // Answered: what a stream sends after the answer belongs to no request of ours.
        ended = Some(Ok(()));
    }
    let current = gw
        .mcp()
        .http
        .servers
        .get(&name)
        .is_some_and(|c| c.epoch == ex.epoch);
    let Some(ended) = ended else {
        if current {
            gw.mcp().http.exchanges.insert(id, ex);
        } else {
            finish(gw, ex);
        }
        return;
    };
    let waiting = ex.waiting;
    let events = match &ex.body {
        Some(Body::Events(events)) => events.count,
        _ => 0,
    };
    let (resume, resume_wait) = match &ex.body {
        Some(Body::Events(events)) if ex.resumes < RESUMES => {
            let wait = events
                .retry
                .map(|ms| Duration::from_millis(ms).clamp(RETRY_MIN, RETRY_MAX));
            (events.last_id.clone(), wait)
        }
        _ => (None, None),
    };
    let steady = events > 0 || now.duration_since(ex.opened_at) >= LISTEN_STEADY;
    let (purpose, epoch, resumes, received, initialize) =
        (ex.purpose, ex.epoch, ex.resumes, ex.received, ex.initialize);
    if current && ended.is_ok() && ex.reusable() {
        keep_idle(gw, &name, ex, now);
    } else {
        finish(gw, ex);
    }
    if !current {
        return;
    }
    match ended {
        Err(Ended::SessionGone) => super::session_gone(gw, &name, now),
        Err(Ended::NotOffered) => {
            if let Some(c) = gw.mcp().http.servers.get_mut(&name) {
                c.listen = Listen::NotOffered;
            }
        }
        Ok(()) if purpose == Purpose::Listen => {
            listen_ended(gw, &name, epoch, steady, String::new(), now)
        }
        Err(
            Ended::Cut(why) | Ended::Refused(why) | Ended::Unreachable(why) | Ended::Untrusted(why),
        ) if purpose == Purpose::Listen => listen_ended(gw, &name, epoch, steady, why, now),
        Ok(()) | Err(Ended::Cut(_)) if waiting.is_some() && resume.is_some() => {
            let Some(c) = gw.mcp().http.servers.get(&name) else {
                return;
            };
            let sending = Sending {
                purpose: Purpose::Resume,
                bytes: request_head(c, "GET", 0, resume.as_deref()).into_bytes(),
                waiting,
                initialize,
                in_session: c.session.is_some(),
                deadline: None,
                resumes: resumes + 1,
                resumed_from: resume,
                received,
            };
            // The stream's own `retry:` is how long the server asks to be left alone.
            match resume_wait {
                None => start(gw, &name, sending, now),
                Some(wait) => {
                    let at = now + wait;
                    if let Some(c) = gw.mcp().http.servers.get_mut(&name) {
                        c.resumes_due.push((at, sending));
                    }
                    gw.set_timer(at, WorkTimer::Mcp(name.clone()));
                }
            }
        }
        Ok(()) if waiting.is_some() => {
            let why = "the server ended its answer without answering the request";
            refuse(gw, &name, waiting, why.into(), now);
        }
        Ok(()) => {}
        Err(Ended::Refused(why) | Ended::Cut(why)) => refuse(gw, &name, waiting, why, now),
        Err(Ended::Unreachable(why)) => super::failed(gw, &name, why, now),
        Err(Ended::Untrusted(why)) => super::misconfigured(gw, &name, why, now),
    }
}

/// The listening stream of epoch `epoch` ended (`why`, empty when the server closed it): it
/// is opened again after the server's `retry:` (doubled with each failure in a row, a stream
/// that worked, `steady`, resetting the count), or given up after [`LISTEN_RETRIES`].
fn listen_ended(
    gw: &mut impl McpOwners,
    name: &str,
    epoch: u64,
    steady: bool,
    why: String,
    now: Instant,
) {
    let Some(c) = gw.mcp().http.servers.get_mut(name) else {
        return;
    };
    if c.epoch != epoch {
        return;
    }
    if steady {
        c.listen_failures = 0;
    }
    c.listen_failures += 1;
    let why = if why.is_empty() {
        "the server closed it".to_string()
    } else {
        why
    };
    if c.listen_failures > LISTEN_RETRIES {
        c.listen = Listen::GivenUp;
        return crate::diag!(
            "[mcp] {name}: the listening stream is given up after {LISTEN_RETRIES} failures \
             in a row: {why}"
        );
    }
    let wait = listen_wait(c.retry, c.listen_failures);
    let at = now + wait;
    c.listen = Listen::Reopen(at);
    gw.set_timer(at, WorkTimer::Mcp(name.to_string()));
    crate::diag!(
        "[mcp] {name}: the listening stream ended ({why}); reopening it in {} ms",
        wait.as_millis()
    );
}

/// The wait before the listening stream is opened again after `failures` in a row: the
/// server's `retry:` (or [`LISTEN_RETRY`]), doubled per failure, within the floor and ceiling.
fn listen_wait(retry: Option<Duration>, failures: u32) -> Duration {
    let base = retry.unwrap_or(LISTEN_RETRY).clamp(RETRY_MIN, RETRY_MAX);
    base.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(RETRY_MAX)
}

/// Release an exchange's connection.
fn finish(gw: &mut impl McpOwners, ex: Exchange) {
    gw.sockets().release(ex.id, ex.link);
}

/// Keep the connection of an exchange that ended cleanly for the next POST to `name`.
fn keep_idle(gw: &mut impl McpOwners, name: &str, ex: Exchange, now: Instant) {
    let Some(c) = gw.mcp().http.servers.get_mut(name) else {
        return finish(gw, ex);
    };
    c.idle.push(Idle {
        id: ex.id,
        link: ex.link,
        since: now,
    });
    let surplus = c.idle.len().saturating_sub(IDLE_MAX);
    let oldest: Vec<Idle> = c.idle.drain(..surplus).collect();
    for idle in oldest {
        gw.sockets().release(idle.id, idle.link);
    }
}

/// The most recent kept connection of `name` still fresh and open; those seen closed or old
/// on the way are closed. A POST is not sent twice, so a connection the server may be closing
/// is not tried: kept under [`IDLE_FOR`] and seen open just before, it is not one.
fn take_idle(gw: &mut impl McpOwners, name: &str, now: Instant) -> Option<(u64, Box<dyn Link>)> {
    let c = gw.mcp().http.servers.get_mut(name)?;
    let mut gone = Vec::new();
    let mut taken = None;
    while let Some(mut idle) = c.idle.pop() {
        if now.duration_since(idle.since) < IDLE_FOR && quiet(idle.link.as_mut()) {
            taken = Some((idle.id, idle.link));
            break;
        }
        gone.push(idle);
    }
    for idle in gone {
        gw.sockets().release(idle.id, idle.link);
    }
    taken
}

/// A kept connection is readable: the server closed it (or sent what no request asked for).
fn idle_ready(gw: &mut impl McpOwners, id: u64) {
    let found = gw.mcp().http.servers.values_mut().find_map(|c| {
        let at = c.idle.iter().position(|i| i.id == id)?;
        let closed = !quiet(c.idle[at].link.as_mut());
        closed.then(|| c.idle.remove(at))
    });
    if let Some(idle) = found {
        gw.sockets().release(idle.id, idle.link);
    }
}

/// Nothing to read on `link` and it is still open.
fn quiet(link: &mut dyn Link) -> bool {
    let mut probe = [0u8; 1];
    matches!(link.read(&mut probe), Err(e) if would_block(&e))
}

/// Drop the exchange waiting for request `id` of `name` (abandoned by the caller).
fn abort_waiting(gw: &mut impl McpOwners, name: &str, id: u64) {
    let found = gw
        .mcp()
        .http
        .exchanges
        .iter()
        .find(|(_, e)| e.server == name && e.waiting == Some(id))
        .map(|(k, _)| *k);
    if let Some(ex) = found.and_then(|k| gw.mcp().http.exchanges.remove(&k)) {
        finish(gw, ex);
    }
    if let Some(c) = gw.mcp().http.servers.get_mut(name) {
        c.resumes_due.retain(|(_, s)| s.waiting != Some(id));
    }
}

/// Drop every exchange of `name` in flight (the server failed or is being replaced); what
/// they waited for is ended by the caller.
pub(crate) fn close(gw: &mut impl McpOwners, name: &str) {
    let mut idle = Vec::new();
    if let Some(c) = gw.mcp().http.servers.get_mut(name) {
        c.epoch += 1;
        c.listen = Listen::Off;
        c.resumes_due.clear();
        idle = std::mem::take(&mut c.idle);
    }
    for i in idle {
        gw.sockets().release(i.id, i.link);
    }
    let ids: Vec<u64> = gw
        .mcp()
        .http
        .exchanges
        .iter()
        .filter(|(_, e)| e.server == name && e.purpose != Purpose::Delete)
        .map(|(k, _)| *k)
        .collect();
    for id in ids {
        if let Some(ex) = gw.mcp().http.exchanges.remove(&id) {
            finish(gw, ex);
        }
    }
}

/// The server is dropped (a reload, the shutdown): its exchanges go, and its session is
/// ended with a `DELETE`, waited for up to [`DELETE_WAIT`] (the shutdown waits for it; a
/// server may answer 405).
pub(crate) fn end_session(gw: &mut impl McpOwners, name: &str, now: Instant) {
    close(gw, name);
    let Some(c) = gw.mcp().http.servers.get(name) else {
        return;
    };
    let delete = c
        .session
        .is_some()
        .then(|| request_head(c, "DELETE", 0, None).into_bytes());
    let deadline = now + c.quiet_timeout.min(DELETE_WAIT);
    if let Some(bytes) = delete {
        let sending = Sending {
            purpose: Purpose::Delete,
            bytes,
            waiting: None,
            initialize: false,
            in_session: true,
            deadline: Some(deadline),
            resumes: 0,
            resumed_from: None,
            received: 0,
        };
        start(gw, name, sending, now);
    }
    gw.mcp().http.servers.remove(name);
}

/// `WorkTimer::Mcp`: exchanges of `name` past their deadline are dropped; a listening stream and
/// cut answers due are opened again.
pub(crate) fn on_timer(gw: &mut impl McpOwners, name: &str, now: Instant) {
    let ids: Vec<u64> = gw
        .mcp()
        .http
        .exchanges
        .iter()
        .filter(|(_, e)| e.server == name && e.deadline.is_some_and(|d| now >= d))
        .map(|(k, _)| *k)
        .collect();
    for id in ids {
        if let Some(ex) = gw.mcp().http.exchanges.remove(&id) {
            crate::diag!("[mcp] {name}: the server did not take a message in time");
            finish(gw, ex);
        }
    }
    let due = gw
        .mcp()
        .http
        .servers
        .get(name)
        .is_some_and(|c| matches!(c.listen, Listen::Reopen(at) if now >= at));
    if due {
        listen(gw, name, now);
    }
    let resumes: Vec<Sending> = match gw.mcp().http.servers.get_mut(name) {
        Some(c) => {
            let (ready, later) = std::mem::take(&mut c.resumes_due)
                .into_iter()
                .partition(|(at, _)| now >= *at);
            c.resumes_due = later;
            ready.into_iter().map(|(_, s)| s).collect()
        }
        None => Vec::new(),
    };
    for sending in resumes {
        start(gw, name, sending, now);
    }
}

impl Exchange {
    /// A POST whose answer ended where its length said, on a connection the server keeps
    /// open with nothing more on it: the next POST may use it.
    fn reusable(&mut self) -> bool {
        let kept_open = self.response.head().is_some_and(|h| !h.close);
        self.purpose == Purpose::Post
            && kept_open
            && self.response.is_complete()
            && quiet(self.link.as_mut())
    }

    /// Make all the progress possible; `Some` once the exchange is over (`Ok`: the answer
    /// ended). Messages that arrived go to `out`, in order.
    fn advance(&mut self, out: &mut Vec<Incoming>) -> Option<Result<(), Ended>> {
        if !self.open {
            match self.link.open() {
                Ok(false) => return None,
                Ok(true) => self.open = true,
                Err(Failure::Connect(why)) => {
                    return Some(Err(Ended::Unreachable(format!("cannot connect: {why}"))));
                }
                Err(f) => return Some(Err(Ended::Unreachable(describe(f)))),
            }
        }
        self.exchange(out).transpose()
    }

    /// Write the request, read the answer. `Ok(None)`: wait for readiness.
    fn exchange(&mut self, out: &mut Vec<Incoming>) -> Result<Option<()>, Ended> {
        let refused = |doing: &str, e: io::Error| Ended::Refused(format!("{doing} failed: {e}"));
        while self.sent < self.bytes.len() {
            match self.link.write(&self.bytes[self.sent..]) {
                Ok(0) => return Err(Ended::Refused("the server closed the connection".into())),
                Ok(n) => self.sent += n,
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(refused("sending the request", e)),
            }
        }
        if !self
            .link
            .flush()
            .map_err(|e| refused("sending the request", e))?
        {
            return Ok(None);
        }
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = match self.link.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && !self.link.handshaking() => 0,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => 0,
                Err(e) => match tls_refusal(&e) {
                    Some(why) => return Err(Ended::Untrusted(why)),
                    None => return Err(Ended::Cut(format!("reading the answer failed: {e}"))),
                },
            };
            if n == 0 {
                if matches!(self.body, Some(Body::Ignored)) {
                    return Ok(Some(()));
                }
                self.response.closed().map_err(Ended::Cut)?;
                self.end_of_body(out);
                return Ok(Some(()));
            }
            let mut body = Vec::new();
            let complete = self
                .response
                .feed(&chunk[..n], &mut body)
                .map_err(Ended::Refused)?;
            if self.body.is_none() && self.response.head().is_some() {
                self.body = Some(self.body_kind()?);
            }
            self.received += body.len();
            if self.received > ANSWER_MAX && self.purpose != Purpose::Listen {
                return Err(Ended::Refused(format!(
                    "the server's answer passed {} MiB",
                    ANSWER_MAX >> 20
                )));
            }
            match &mut self.body {
                Some(Body::Json(json)) if json.len() + body.len() > LINE_MAX => {
                    return Err(Ended::Refused(format!(
                        "the server's answer is larger than {} MiB",
                        LINE_MAX >> 20
                    )));
                }
                Some(Body::Json(json)) => json.extend_from_slice(&body),
                Some(Body::Events(events)) => {
                    events
                        .feed(&body, |data| out.push(wire::parse(data)))
                        .map_err(Ended::Refused)?;
                }
                // Read to its end all the same, so the connection can be kept.
                Some(Body::Ignored) | None => {}
            }
            if complete {
                self.end_of_body(out);
                return Ok(Some(()));
            }
        }
    }

    /// The head is in: how to read the body, or why the answer is refused.
    fn body_kind(&self) -> Result<Body, Ended> {
        let head = self.response.head().expect("the caller saw the head");
        if head.status == 404 && self.in_session && self.purpose != Purpose::Delete {
            return Err(Ended::SessionGone);
        }
        if head.status == 405 && self.purpose == Purpose::Listen {
            return Err(Ended::NotOffered);
        }
        if !(200..300).contains(&head.status) {
            return Err(Ended::Refused(format!(
                "the server answered HTTP {} {}",
                head.status, head.reason
            )));
        }
        if self.waiting.is_none() && self.purpose != Purpose::Listen {
            return Ok(Body::Ignored);
        }
        match self.response.content_type.as_str() {
            "application/json" if self.purpose == Purpose::Post => Ok(Body::Json(Vec::new())),
            "text/event-stream" => Ok(Body::Events(Events::new(self.resumed_from.clone()))),
            _ if head.status == 202 => Err(Ended::Refused(
                "the server accepted the request (202) without answering it".into(),
            )),
            other if self.purpose == Purpose::Post => Err(Ended::Refused(format!(
                "the server answered with content type {other:?}, not application/json or \
                 text/event-stream"
            ))),
            other => Err(Ended::Refused(format!(
                "the server answered a GET with content type {other:?}, not text/event-stream"
            ))),
        }
    }

    /// The body is complete: a JSON body is parsed now (an SSE event not closed by its blank
    /// line is dropped, as SSE says).
    fn end_of_body(&mut self, out: &mut Vec<Incoming>) {
        if let Some(Body::Json(json)) = &mut self.body {
            json_messages(json, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_cut_across_splits_and_an_overlong_one_is_refused() {
        let stream =
            b": ping\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nid: 7\ndata: x\n\n";
        for split in 1..stream.len() {
            let mut events = Events::new(None);
            let mut got = Vec::new();
            events
                .feed(&stream[..split], |d| got.push(d.to_vec()))
                .unwrap();
            events
                .feed(&stream[split..], |d| got.push(d.to_vec()))
                .unwrap();
            assert_eq!(got, vec![b"{\"a\":\n1}".to_vec(), b"x".to_vec()], "{split}");
        }
        let mut events = Events::new(None);
        let line = vec![b'x'; 1024 * 1024];
        let mut result = Ok(());
        for _ in 0..(LINE_MAX >> 20) + 1 {
            result = result.and(events.feed(b"data: ", |_| {}));
            result = result.and(events.feed(&line, |_| {}));
            result = result.and(events.feed(b"\n", |_| {}));
        }
        assert!(result.unwrap_err().contains("longer than 16 MiB"));
        assert!(
            events.data.len() <= LINE_MAX,
            "an overlong event is not kept"
        );
    }

    #[test]
    fn event_ids_and_retry_are_kept_for_reconnecting() {
        let mut events = Events::new(Some("L-1".into()));
        let mut got = Vec::new();
        events
            .feed(
                b"retry: 250\n\nid: L-2\ndata: a\n\nid: bad\x01id\ndata: b\n\n",
                |d| got.push(d.to_vec()),
            )
            .unwrap();
        assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(events.retry, Some(250));
        assert_eq!(
            events.last_id.as_deref(),
            Some("L-2"),
            "an unusable id is ignored"
        );
        // An event cut before its blank line is not dispatched, and its id does not count.
        events
            .feed(b"id: L-3\ndata: c", |d| got.push(d.to_vec()))
            .unwrap();
        assert_eq!((got.len(), events.last_id.as_deref()), (2, Some("L-2")));
        // An empty id clears it: nothing to resume from.
        events.feed(b"\nid:\n\n", |_| {}).unwrap();
        assert_eq!(events.last_id, None);
        assert_eq!(Events::new(None).last_id, None);
    }

    #[test]
    fn the_listening_stream_backs_off_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(listen_wait(None, 1), LISTEN_RETRY);
        assert_eq!(listen_wait(Some(ms(250)), 1), ms(250));
        assert_eq!(listen_wait(Some(ms(250)), 3), ms(1000));
        assert_eq!(
            listen_wait(Some(ms(0)), 1),
            RETRY_MIN,
            "retry: 0 does not spin"
        );
        assert_eq!(listen_wait(Some(ms(u64::MAX)), 1), RETRY_MAX);
        assert_eq!(listen_wait(None, 40), RETRY_MAX);
    }

    #[test]
    fn json_bodies_may_be_one_message_or_a_batch() {
        let mut out = Vec::new();
        json_messages(br#"{"id":1,"result":{}}"#, &mut out);
        json_messages(
            br#"[{"id":2,"result":{}},{"method":"notifications/x"}]"#,
            &mut out,
        );
        json_messages(b"<html>", &mut out);
        assert!(matches!(out[0], Incoming::Answer { id: 1, .. }));
        assert!(matches!(out[1], Incoming::Answer { id: 2, .. }));
        assert!(matches!(out[2], Incoming::Notice { .. }));
        assert!(matches!(out[3], Incoming::Garbage(_)));
    }

    #[test]
    fn configured_headers_cannot_break_the_request() {
        let ok = BTreeMap::from([("Authorization".to_string(), "Bearer t".to_string())]);
        assert_eq!(header_lines(&ok).unwrap(), "Authorization: Bearer t\r\n");
        for (k, v) in [("X", "a\r\nEvil: 1"), ("Bad Name", "v"), ("", "v")] {
            let bad = BTreeMap::from([(k.to_string(), v.to_string())]);
            assert!(header_lines(&bad).is_err(), "{k:?}");
        }
    }
}
