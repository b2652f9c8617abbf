//! A mock OpenAI-compatible HTTP server for the black-box tests, in plain std: a
//! `TcpListener` on 127.0.0.1:0, one thread per connection.
//!
//! Every request is parsed (head, then exactly `Content-Length` bytes of body) and recorded with
//! its arrival time; the reply is chosen by a handler (or taken from a script) and written with
//! the framing the test asks for: SSE over `Transfer-Encoding: chunked`, SSE delimited by
//! `Connection: close`, a plain status reply, a stall, or anything a custom closure writes.
//! Each connection's fate is recorded too (when the peer closed it), so tests can check that the
//! gateway really dropped a request on interrupt / timeout.
//!
//! `MockAi::raw` starts a server that does not speak HTTP at all (for TLS failures).
//! `responses.rs` builds the Responses API's event streams (`POST /responses`).
#![allow(dead_code)]

pub mod anthropic;
pub mod responses;

use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// What was received
// ---------------------------------------------------------------------------------------------

/// One parsed request.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Order of arrival over the whole server (0-based).
    pub index: usize,
    /// Connection it came on (0-based accept order).
    pub conn: usize,
    pub method: String,
    pub path: String,
    pub version: String,
    /// Header names lower-cased, values trimmed, in order.
    pub headers: Vec<(String, String)>,
    pub body_raw: Vec<u8>,
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub body: Value,
    /// When the last byte of the body arrived.
    pub at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        let n = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.as_str())
    }

    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// `(role, text)` of every message but the system prompt, in order.
    pub fn conversation(&self) -> Vec<(String, String)> {
        self.messages()
            .iter()
            .filter(|m| m["role"] != "system")
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or("").to_string(),
                    content_text(&m["content"]),
                )
            })
            .collect()
    }

    /// Content of the last `user` message (empty when none).
    pub fn last_user_text(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| content_text(&m["content"]))
            .unwrap_or_default()
    }
}

/// Text of a message `content`, which may be a string or an array of `{type:"text", text}` parts.
pub fn content_text(c: &Value) -> String {
    match c {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// What happened to one accepted connection.
#[derive(Clone, Debug)]
pub struct ConnLog {
    pub index: usize,
    pub accepted_at: Instant,
    /// Requests read on it (indexes into the request log).
    pub requests: Vec<usize>,
    /// When the mock saw the peer close (read 0 / reset / write failure), if it did.
    pub peer_closed_at: Option<Instant>,
    /// A write to the peer failed.
    pub write_failed: bool,
    /// The mock itself finished with the connection (closed or dropped it).
    pub finished: bool,
}

// ---------------------------------------------------------------------------------------------
// What to answer
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Transfer-Encoding: chunked`, one chunk per event (unless `split` says otherwise).
    Chunked,
    /// No length; the end of the body is the close of the connection.
    Close,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// `data: [DONE]`, then the end of the body (terminating chunk / close).
    Done,
    /// The end of the body right after the events, no `[DONE]` (an API whose last event
    /// says it is the last, as the Responses API's `response.completed` does).
    Last,
    /// Close the socket abruptly after the events (no [DONE], no terminating chunk).
    Cut,
    /// Stop sending after the events and hold the connection open until the peer closes it.
    Stall,
}

/// A 200 `text/event-stream` reply.
#[derive(Clone, Debug)]
pub struct Stream {
    /// `data:` payloads (without the `data: ` prefix), in order.
    pub events: Vec<String>,
    pub framing: Framing,
    /// Pause before each event (after the head).
    pub delay: Duration,
    pub end: End,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
    /// Line ending used inside the event stream (`"\n"` by default).
    pub eol: &'static str,
    /// Comment lines (`: keep-alive`) before every event.
    pub comments: bool,
    /// When set, the whole body is written in pieces of at most this many bytes (each its own
    /// chunk in chunked framing, and a flush + short pause between pieces), so that events,
    /// chunk boundaries and UTF-8 characters are split across reads.
    pub split: Option<usize>,
}

impl Stream {
    pub fn new(events: Vec<String>) -> Stream {
        Stream {
            events,
            framing: Framing::Chunked,
            delay: Duration::ZERO,
            end: End::Done,
            headers: Vec::new(),
            eol: "\n",
            comments: false,
            split: None,
        }
    }
    pub fn framing(mut self, f: Framing) -> Self {
        self.framing = f;
        self
    }
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
    pub fn end(mut self, e: End) -> Self {
        self.end = e;
        self
    }
    pub fn eol(mut self, e: &'static str) -> Self {
        self.eol = e;
        self
    }
    pub fn comments(mut self) -> Self {
        self.comments = true;
        self
    }
    pub fn split(mut self, n: usize) -> Self {
        self.split = Some(n.max(1));
        self
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.to_string(), v.to_string()));
        self
    }
}

pub enum Reply {
    Stream(Stream),
    /// A complete non-streaming reply (e.g. 401, 429, 500) with a `Content-Length` body.
    Status {
        code: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Read the request, then send nothing and hold the connection until the peer closes it.
    Stall,
    /// Anything: the closure gets the connection after the request was read.
    Custom(Box<dyn FnOnce(&mut Conn) + Send>),
}

impl Reply {
    /// The answer to `GET …/models` when `r` asks it: these ids in OpenAI's list shape.
    pub fn model_list(r: &Recorded, ids: &[&str]) -> Option<Reply> {
        let data: Vec<Value> = ids.iter().map(|id| json!({"id": id})).collect();
        let list = json!({"object": "list", "data": data});
        r.path
            .ends_with("/models")
            .then(|| Reply::status(200, &list.to_string()))
    }

    pub fn status(code: u16, body: &str) -> Reply {
        Reply::Status {
            code,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }
    pub fn status_with(code: u16, headers: &[(&str, &str)], body: &str) -> Reply {
        Reply::Status {
            code,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_string(),
        }
    }
    /// A well-formed streamed text answer: role chunk, one chunk per piece, finish `stop`,
    /// usage, `[DONE]`; chunked framing.
    pub fn text(pieces: &[&str], usage: (u64, u64)) -> Reply {
        Reply::Stream(Stream::new(text_events(pieces, "stop", Some(usage))))
    }
}

pub fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

// ---------------------------------------------------------------------------------------------
// Event builders (the `data:` payloads)
// ---------------------------------------------------------------------------------------------

fn chunk(choices: Value) -> String {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "mock-model",
        "choices": choices,
    })
    .to_string()
}

/// The first chunk real servers send: role, empty content.
pub fn ev_role() -> String {
    chunk(json!([{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]))
}

pub fn ev_text(t: &str) -> String {
    chunk(json!([{"index":0,"delta":{"content":t},"finish_reason":null}]))
}

pub fn ev_reasoning_content(t: &str) -> String {
    chunk(json!([{"index":0,"delta":{"reasoning_content":t},"finish_reason":null}]))
}

pub fn ev_reasoning(t: &str) -> String {
    chunk(json!([{"index":0,"delta":{"reasoning":t},"finish_reason":null}]))
}

/// First fragment of a tool call (carries id, type, name).
pub fn ev_tool_start(idx: u64, id: &str, name: &str, args: &str) -> String {
    chunk(json!([{"index":0,"delta":{"tool_calls":[{
        "index": idx, "id": id, "type": "function",
        "function": {"name": name, "arguments": args}
    }]},"finish_reason":null}]))
}

/// A later fragment of the arguments of tool call `idx`.
pub fn ev_tool_args(idx: u64, args: &str) -> String {
    chunk(json!([{"index":0,"delta":{"tool_calls":[{
        "index": idx, "function": {"arguments": args}
    }]},"finish_reason":null}]))
}

pub fn ev_finish(reason: &str) -> String {
    chunk(json!([{"index":0,"delta":{},"finish_reason":reason}]))
}

pub fn ev_usage(prompt: u64, completion: u64) -> String {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "mock-model",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    })
    .to_string()
}

/// role, texts, finish, usage (when given).
pub fn text_events(pieces: &[&str], finish: &str, usage: Option<(u64, u64)>) -> Vec<String> {
    let mut v = vec![ev_role()];
    v.extend(pieces.iter().map(|p| ev_text(p)));
    v.push(ev_finish(finish));
    if let Some((p, c)) = usage {
        v.push(ev_usage(p, c));
    }
    v
}

/// A `terminal` tool call with its arguments JSON streamed in fragments of `frag` bytes,
/// finish `tool_calls`, usage.
pub fn tool_call_events(id: &str, command: &str, frag: usize, usage: (u64, u64)) -> Vec<String> {
    let args = json!({ "command": command }).to_string();
    let bytes = args.as_bytes();
    let mut pieces = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let mut j = (i + frag.max(1)).min(bytes.len());
        while !args.is_char_boundary(j) {
            j += 1;
        }
        pieces.push(&args[i..j]);
        i = j;
    }
    let mut v = vec![ev_role()];
    v.push(ev_tool_start(
        0,
        id,
        "terminal",
        pieces.first().copied().unwrap_or(""),
    ));
    for p in pieces.iter().skip(1) {
        v.push(ev_tool_args(0, p));
    }
    v.push(ev_finish("tool_calls"));
    v.push(ev_usage(usage.0, usage.1));
    v
}

// ---------------------------------------------------------------------------------------------
// The connection a reply is written to
// ---------------------------------------------------------------------------------------------

pub struct Conn {
    pub stream: TcpStream,
    pub index: usize,
    shared: Arc<Shared>,
    chunked: bool,
}

impl Conn {
    fn log<F: FnOnce(&mut ConnLog)>(&self, f: F) {
        let mut conns = self.shared.conns.lock().unwrap();
        if let Some(c) = conns.get_mut(self.index) {
            f(c);
        }
        self.shared.cv.notify_all();
    }

    fn mark_closed(&self) {
        self.log(|c| {
            if c.peer_closed_at.is_none() {
                c.peer_closed_at = Some(Instant::now());
            }
        });
    }

    /// Non-blocking check whether the peer has closed (read returns 0 or an error).
    /// Bytes the peer sent meanwhile are discarded.
    pub fn peer_closed(&mut self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let mut buf = [0u8; 4096];
        let closed = loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break true,
            }
        };
        let _ = self.stream.set_nonblocking(false);
        if closed {
            self.mark_closed();
        }
        closed
    }

    /// Writes raw bytes; false (and the connection marked closed) when the peer is gone.
    pub fn write_raw(&mut self, b: &[u8]) -> bool {
        match self.stream.write_all(b).and_then(|_| self.stream.flush()) {
            Ok(()) => true,
            Err(_) => {
                self.log(|c| c.write_failed = true);
                self.mark_closed();
                false
            }
        }
    }

    /// Writes body bytes, as one chunk when the reply is chunked.
    pub fn write_body(&mut self, b: &[u8]) -> bool {
        if b.is_empty() {
            return true;
        }
        if self.chunked {
            let mut out = format!("{:x}\r\n", b.len()).into_bytes();
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
            self.write_raw(&out)
        } else {
            self.write_raw(b)
        }
    }

    /// `200 OK` SSE head.
    pub fn sse_head(&mut self, framing: Framing, extra: &[(String, String)]) -> bool {
        let mut h = String::from(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n",
        );
        match framing {
            Framing::Chunked => h.push_str("Transfer-Encoding: chunked\r\n"),
            Framing::Close => h.push_str("Connection: close\r\n"),
        }
        for (k, v) in extra {
            h.push_str(&format!("{k}: {v}\r\n"));
        }
        h.push_str("\r\n");
        self.chunked = framing == Framing::Chunked;
        self.write_raw(h.as_bytes())
    }

    /// One `data: …\n\n` event (one chunk when chunked).
    pub fn event(&mut self, data: &str) -> bool {
        self.write_body(format!("data: {data}\n\n").as_bytes())
    }

    /// `data: [DONE]` and the terminating chunk (chunked framing).
    pub fn done(&mut self) -> bool {
        if !self.event("[DONE]") {
            return false;
        }
        self.finish_body()
    }

    /// The terminating zero chunk (chunked framing only).
    pub fn finish_body(&mut self) -> bool {
        if self.chunked {
            self.write_raw(b"0\r\n\r\n")
        } else {
            true
        }
    }

    /// Holds the connection (reading and discarding) until the peer closes it or the server
    /// stops. Records the close.
    pub fn hold_until_peer_closes(&mut self) {
        let _ = self
            .stream
            .set_read_timeout(Some(Duration::from_millis(25)));
        let mut buf = [0u8; 4096];
        loop {
            if self.shared.stop.load(Ordering::SeqCst) {
                return;
            }
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut
                        || e.kind() == io::ErrorKind::Interrupted =>
                {
                    continue;
                }
                Err(_) => break,
            }
        }
        self.mark_closed();
    }

    /// Sleeps `d` in small steps; false as soon as the peer closed or the server stops.
    pub fn pause(&mut self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if self.shared.stop.load(Ordering::SeqCst) || self.peer_closed() {
                return false;
            }
            let now = Instant::now();
            if now >= end {
                return true;
            }
            thread::sleep((end - now).min(Duration::from_millis(5)));
        }
    }

    pub fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

type Handler = Box<dyn Fn(&Recorded) -> Reply + Send + Sync>;
type RawHandler = Box<dyn Fn(TcpStream) + Send + Sync>;

enum Mode {
    Http(Handler),
    Raw(RawHandler),
}

struct Shared {
    requests: Mutex<Vec<Recorded>>,
    conns: Mutex<Vec<ConnLog>>,
    cv: Condvar,
    stop: AtomicBool,
    mode: Mode,
    next_req: AtomicUsize,
    /// Pause (ms) between reading a request head and reading its body (a slow reader).
    read_delay_ms: AtomicUsize,
}

impl Shared {
    fn notify(&self) {
        // take a lock so a waiter cannot miss the notification between check and wait
        let _g = self.conns.lock().unwrap();
        self.cv.notify_all();
    }
}

pub struct MockAi {
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<thread::JoinHandle<()>>,
}

impl MockAi {
    /// A server whose replies are chosen by `handler` for each request.
    pub fn start<F>(handler: F) -> MockAi
    where
        F: Fn(&Recorded) -> Reply + Send + Sync + 'static,
    {
        Self::with_mode(Mode::Http(Box::new(handler)))
    }

    /// A server answering requests with `replies` in order; once they are used up, every
    /// further request gets a 500 saying so.
    pub fn script(replies: Vec<Reply>) -> MockAi {
        let q = Mutex::new(VecDeque::from(replies));
        Self::start(move |_r| {
            q.lock().unwrap().pop_front().unwrap_or_else(|| {
                Reply::status(
                    500,
                    r#"{"error":{"message":"mock: no more scripted replies"}}"#,
                )
            })
        })
    }

    /// A server that does not speak HTTP: `handler` gets each accepted socket as is.
    pub fn raw<F>(handler: F) -> MockAi
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        Self::with_mode(Mode::Raw(Box::new(handler)))
    }

    fn with_mode(mode: Mode) -> MockAi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind mock");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            conns: Mutex::new(Vec::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            mode,
            next_req: AtomicUsize::new(0),
            read_delay_ms: AtomicUsize::new(0),
        });
        let sh = shared.clone();
        let accept = thread::Builder::new()
            .name("mockai-accept".into())
            .spawn(move || {
                for s in listener.incoming() {
                    if sh.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = s else { continue };
                    let _ = stream.set_nodelay(true);
                    let index = {
                        let mut conns = sh.conns.lock().unwrap();
                        let index = conns.len();
                        conns.push(ConnLog {
                            index,
                            accepted_at: Instant::now(),
                            requests: Vec::new(),
                            peer_closed_at: None,
                            write_failed: false,
                            finished: false,
                        });
                        sh.cv.notify_all();
                        index
                    };
                    let sh2 = sh.clone();
                    let _ = thread::Builder::new()
                        .name(format!("mockai-conn-{index}"))
                        .spawn(move || serve_conn(sh2, stream, index));
                }
            })
            .expect("spawn mock accept thread");
        MockAi {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The `Authorization` header of the first POST it got (a prompt, not a model list).
    pub fn first_post_bearer(&self) -> Option<String> {
        self.requests()
            .into_iter()
            .find(|r| r.method == "POST")
            .and_then(|r| r.header("authorization").map(str::to_string))
    }

    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    pub fn conns(&self) -> Vec<ConnLog> {
        self.shared.conns.lock().unwrap().clone()
    }

    /// Waits on the shared condvar (woken on every new connection, request or connection
    /// change; re-checked at least every `step`) until `ready` gives a value, or None once
    /// `timeout` has passed.
    fn wait_for<R>(
        &self,
        timeout: Duration,
        step: Duration,
        mut ready: impl FnMut(&[ConnLog]) -> Option<R>,
    ) -> Option<R> {
        let deadline = Instant::now() + timeout;
        let mut g = self.shared.conns.lock().unwrap();
        loop {
            if let Some(r) = ready(&g) {
                return Some(r);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            g = self
                .shared
                .cv
                .wait_timeout(g, (deadline - now).min(step))
                .unwrap()
                .0;
        }
    }

    /// Waits until at least `n` requests arrived; returns them all (panics on timeout).
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let got = self.wait_for(timeout, Duration::from_millis(50), |_| {
            let r = self.shared.requests.lock().unwrap();
            (r.len() >= n).then(|| r.clone())
        });
        got.unwrap_or_else(|| {
            let r = self.shared.requests.lock().unwrap();
            panic!(
                "mock: expected {n} requests within {timeout:?}, got {}: {:?}",
                r.len(),
                r.iter()
                    .map(|q| format!("{} {}", q.method, q.path))
                    .collect::<Vec<_>>()
            )
        })
    }

    /// Waits until more than `seen` requests have arrived: how many there are then, or None
    /// once `timeout` has passed without one.
    pub fn wait_past(&self, seen: usize, timeout: Duration) -> Option<usize> {
        self.wait_for(timeout, Duration::from_millis(50), |_| {
            let n = self.shared.requests.lock().unwrap().len();
            (n > seen).then_some(n)
        })
    }

    /// Waits until at least `n` connections were accepted.
    pub fn wait_conns(&self, n: usize, timeout: Duration) -> Vec<ConnLog> {
        self.wait_for(timeout, Duration::from_millis(50), |c| {
            (c.len() >= n).then(|| c.to_vec())
        })
        .unwrap_or_else(|| {
            panic!(
                "mock: expected {n} connections within {timeout:?}, got {}",
                self.shared.conns.lock().unwrap().len()
            )
        })
    }

    /// Waits until the mock saw the peer close connection `idx`; returns when, or None on
    /// timeout.
    pub fn wait_peer_closed(&self, idx: usize, timeout: Duration) -> Option<Instant> {
        self.wait_for(timeout, Duration::from_millis(20), |c| {
            c.get(idx).and_then(|c| c.peer_closed_at)
        })
    }

    /// From now on, wait `d` after each request head before reading the body (the client's
    /// writes then hit a full socket buffer).
    pub fn set_read_delay(&self, d: Duration) {
        self.shared
            .read_delay_ms
            .store(d.as_millis() as usize, Ordering::SeqCst);
    }

    pub fn stop(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        // wake the accept loop
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        self.shared.notify();
    }
}

impl Drop for MockAi {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads one request head + body. `Ok(None)` on a clean EOF before any byte.
fn read_request(
    stream: &mut TcpStream,
    carry: &mut Vec<u8>,
    read_delay: Duration,
) -> io::Result<Option<RawReq>> {
    let mut buf = [0u8; 16 * 1024];
    // head
    let head_end = loop {
        if let Some(p) = find(carry, b"\r\n\r\n") {
            break p;
        }
        if carry.len() > 1 << 20 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "head too large"));
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            if carry.is_empty() {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof inside request head",
            ));
        }
        carry.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&carry[..head_end]).to_string();
    carry.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let start = lines.next().unwrap_or("");
    let mut parts = start.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let version = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if !read_delay.is_zero() {
        thread::sleep(read_delay);
    }
    while carry.len() < len {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof inside request body",
            ));
        }
        carry.extend_from_slice(&buf[..n]);
    }
    let body: Vec<u8> = carry.drain(..len).collect();
    Ok(Some(RawReq {
        method,
        path,
        version,
        headers,
        body,
    }))
}

struct RawReq {
    method: String,
    path: String,
    version: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fn serve_conn(sh: Arc<Shared>, stream: TcpStream, index: usize) {
    match &sh.mode {
        Mode::Raw(h) => {
            h(stream);
            let mut c = sh.conns.lock().unwrap();
            c[index].finished = true;
            sh.cv.notify_all();
            return;
        }
        Mode::Http(_) => {}
    }
    let mut conn = Conn {
        stream,
        index,
        shared: sh.clone(),
        chunked: false,
    };
    let mut carry = Vec::new();
    loop {
        let _ = conn.stream.set_read_timeout(None);
        let delay = Duration::from_millis(sh.read_delay_ms.load(Ordering::SeqCst) as u64);
        let req = match read_request(&mut conn.stream, &mut carry, delay) {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => {
                conn.mark_closed();
                break;
            }
        };
        let ri = sh.next_req.fetch_add(1, Ordering::SeqCst);
        let rec = Recorded {
            index: ri,
            conn: index,
            body: serde_json::from_slice(&req.body).unwrap_or(Value::Null),
            method: req.method,
            path: req.path,
            version: req.version,
            headers: req.headers,
            body_raw: req.body,
            at: Instant::now(),
        };
        {
            let mut rs = sh.requests.lock().unwrap();
            // keep the log in index order even if two connections race
            let pos = rs.iter().position(|r| r.index > ri).unwrap_or(rs.len());
            rs.insert(pos, rec.clone());
        }
        {
            let mut c = sh.conns.lock().unwrap();
            c[index].requests.push(ri);
            sh.cv.notify_all();
        }
        let reply = match &sh.mode {
            Mode::Http(h) => h(&rec),
            Mode::Raw(_) => unreachable!(),
        };
        let keep_alive = write_reply(&mut conn, reply);
        if !keep_alive || sh.stop.load(Ordering::SeqCst) {
            break;
        }
    }
    let _ = conn.stream.shutdown(Shutdown::Both);
    let mut c = sh.conns.lock().unwrap();
    c[index].finished = true;
    sh.cv.notify_all();
}

/// Writes one reply; true when the connection may carry another request.
fn write_reply(conn: &mut Conn, reply: Reply) -> bool {
    match reply {
        Reply::Status {
            code,
            headers,
            body,
        } => {
            let mut h = format!(
                "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
                reason_phrase(code),
                body.len()
            );
            for (k, v) in &headers {
                h.push_str(&format!("{k}: {v}\r\n"));
            }
            h.push_str("\r\n");
            h.push_str(&body);
            conn.write_raw(h.as_bytes())
        }
        Reply::Stall => {
            conn.hold_until_peer_closes();
            false
        }
        Reply::Custom(f) => {
            f(conn);
            false
        }
        Reply::Stream(s) => write_stream(conn, s),
    }
}

pub fn write_stream(conn: &mut Conn, s: Stream) -> bool {
    if !conn.sse_head(s.framing, &s.headers) {
        return false;
    }
    let eol = s.eol;
    let mut events: Vec<String> = s.events.clone();
    if s.end == End::Done {
        events.push("[DONE]".to_string());
    }
    let render = |e: &str| -> String {
        let mut out = String::new();
        if s.comments {
            out.push_str(&format!(": keep-alive{eol}{eol}"));
        }
        out.push_str(&format!("data: {e}{eol}{eol}"));
        out
    };
    match s.split {
        None => {
            for e in &events {
                if !s.delay.is_zero() && !conn.pause(s.delay) {
                    return false;
                }
                if !conn.write_body(render(e).as_bytes()) {
                    return false;
                }
            }
        }
        Some(n) => {
            let body: String = events.iter().map(|e| render(e)).collect();
            let bytes = body.as_bytes();
            for piece in bytes.chunks(n) {
                if !conn.write_body(piece) {
                    return false;
                }
                // give the peer a chance to read each piece on its own
                thread::sleep(Duration::from_micros(300));
            }
        }
    }
    match s.end {
        End::Done | End::Last => {
            if !conn.finish_body() {
                return false;
            }
            // chunked: the connection may be reused; close-delimited: close now
            s.framing == Framing::Chunked
        }
        End::Cut => {
            let _ = conn.stream.shutdown(Shutdown::Both);
            false
        }
        End::Stall => {
            conn.hold_until_peer_closes();
            false
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A real TLS server with a self-signed certificate (for certificate failures)
// ---------------------------------------------------------------------------------------------

/// Self-signed P-256 certificate for CN=mock-openai, SAN IP:127.0.0.1 and DNS:localhost,
/// valid for 100 years (generated once with openssl; no trust anchor knows it).
pub const SELF_SIGNED_CERT_DER: &[u8] = &[
    0x30, 0x82, 0x01, 0xc2, 0x30, 0x82, 0x01, 0x69, 0xa0, 0x03, 0x02, 0x01, 0x02, 0x02, 0x14, 0x1d,
    0xd7, 0x48, 0xc7, 0x2e, 0x90, 0x29, 0x8a, 0xa1, 0xf8, 0x0e, 0x47, 0xfc, 0x76, 0xdd, 0x95, 0x2d,
    0xa3, 0x38, 0x18, 0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02, 0x30,
    0x16, 0x31, 0x14, 0x30, 0x12, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x0b, 0x6d, 0x6f, 0x63, 0x6b,
    0x2d, 0x6f, 0x70, 0x65, 0x6e, 0x61, 0x69, 0x30, 0x20, 0x17, 0x0d, 0x32, 0x36, 0x31, 0x31, 0x33,
    0x30, 0x32, 0x32, 0x31, 0x33, 0x33, 0x31, 0x5a, 0x18, 0x0f, 0x32, 0x31, 0x32, 0x36, 0x31, 0x31,
    0x30, 0x36, 0x32, 0x32, 0x31, 0x33, 0x33, 0x31, 0x5a, 0x30, 0x16, 0x31, 0x14, 0x30, 0x12, 0x06,
    0x03, 0x55, 0x04, 0x03, 0x0c, 0x0b, 0x6d, 0x6f, 0x63, 0x6b, 0x2d, 0x6f, 0x70, 0x65, 0x6e, 0x61,
    0x69, 0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
    0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04, 0x07, 0x71, 0x31, 0xb8,
    0xb9, 0x01, 0xc3, 0x83, 0xb6, 0x84, 0x85, 0x0d, 0x52, 0xc6, 0xf7, 0x7b, 0x6b, 0x50, 0xe0, 0x5b,
    0xce, 0xf1, 0x25, 0x33, 0x91, 0x7a, 0x26, 0x54, 0x6f, 0xde, 0x32, 0xd5, 0x78, 0x25, 0xb6, 0x35,
    0x51, 0x06, 0x96, 0xa4, 0xad, 0x7e, 0x57, 0x5f, 0x77, 0xb6, 0xe0, 0xba, 0x13, 0x3b, 0x8a, 0x50,
    0xd6, 0x11, 0x30, 0x48, 0xb6, 0x83, 0xac, 0xec, 0xbe, 0xb3, 0x31, 0x79, 0xa3, 0x81, 0x92, 0x30,
    0x81, 0x8f, 0x30, 0x1d, 0x06, 0x03, 0x55, 0x1d, 0x0e, 0x04, 0x16, 0x04, 0x14, 0xe1, 0xca, 0xca,
    0x61, 0x85, 0xbd, 0x9e, 0x8a, 0xe9, 0x6a, 0xf2, 0xd9, 0x95, 0xf6, 0xc3, 0x4e, 0x36, 0x98, 0x89,
    0xed, 0x30, 0x1f, 0x06, 0x03, 0x55, 0x1d, 0x23, 0x04, 0x18, 0x30, 0x16, 0x80, 0x14, 0xe1, 0xca,
    0xca, 0x61, 0x85, 0xbd, 0x9e, 0x8a, 0xe9, 0x6a, 0xf2, 0xd9, 0x95, 0xf6, 0xc3, 0x4e, 0x36, 0x98,
    0x89, 0xed, 0x30, 0x1a, 0x06, 0x03, 0x55, 0x1d, 0x11, 0x04, 0x13, 0x30, 0x11, 0x87, 0x04, 0x7f,
    0x00, 0x00, 0x01, 0x82, 0x09, 0x6c, 0x6f, 0x63, 0x61, 0x6c, 0x68, 0x6f, 0x73, 0x74, 0x30, 0x0c,
    0x06, 0x03, 0x55, 0x1d, 0x13, 0x01, 0x01, 0xff, 0x04, 0x02, 0x30, 0x00, 0x30, 0x0e, 0x06, 0x03,
    0x55, 0x1d, 0x0f, 0x01, 0x01, 0xff, 0x04, 0x04, 0x03, 0x02, 0x07, 0x80, 0x30, 0x13, 0x06, 0x03,
    0x55, 0x1d, 0x25, 0x04, 0x0c, 0x30, 0x0a, 0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03,
    0x01, 0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02, 0x03, 0x47, 0x00,
    0x30, 0x44, 0x02, 0x20, 0x47, 0x60, 0x62, 0x98, 0x39, 0xef, 0x91, 0xef, 0x3e, 0x95, 0x0d, 0xdc,
    0x5b, 0x0c, 0x1e, 0x8f, 0x48, 0xa9, 0x91, 0x33, 0x81, 0x55, 0x04, 0x57, 0xd2, 0x28, 0x7e, 0xc0,
    0xc4, 0x2f, 0xa2, 0x0c, 0x02, 0x20, 0x23, 0xf8, 0x18, 0x54, 0xa4, 0x44, 0xb8, 0xbe, 0x06, 0x6e,
    0xa5, 0x1e, 0xad, 0x3e, 0x3b, 0x89, 0x8b, 0xcf, 0xb8, 0x13, 0x3b, 0x90, 0x7a, 0xed, 0xd8, 0xcb,
    0xae, 0x78, 0x79, 0x95, 0x21, 0x3d,
];

/// Its private key (PKCS#8).
const SELF_SIGNED_KEY_PKCS8_DER: &[u8] = &[
    0x30, 0x81, 0x87, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02,
    0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x6d, 0x30, 0x6b, 0x02,
    0x01, 0x01, 0x04, 0x20, 0x14, 0xb2, 0x76, 0x2a, 0xe3, 0xe8, 0x22, 0xeb, 0x27, 0x57, 0x3a, 0x03,
    0xd1, 0xb8, 0x12, 0x9a, 0xe6, 0xe5, 0xa0, 0x21, 0xba, 0xa7, 0x16, 0xc6, 0xcf, 0x15, 0xcc, 0x93,
    0x64, 0xa1, 0x2c, 0x90, 0xa1, 0x44, 0x03, 0x42, 0x00, 0x04, 0x07, 0x71, 0x31, 0xb8, 0xb9, 0x01,
    0xc3, 0x83, 0xb6, 0x84, 0x85, 0x0d, 0x52, 0xc6, 0xf7, 0x7b, 0x6b, 0x50, 0xe0, 0x5b, 0xce, 0xf1,
    0x25, 0x33, 0x91, 0x7a, 0x26, 0x54, 0x6f, 0xde, 0x32, 0xd5, 0x78, 0x25, 0xb6, 0x35, 0x51, 0x06,
    0x96, 0xa4, 0xad, 0x7e, 0x57, 0x5f, 0x77, 0xb6, 0xe0, 0xba, 0x13, 0x3b, 0x8a, 0x50, 0xd6, 0x11,
    0x30, 0x48, 0xb6, 0x83, 0xac, 0xec, 0xbe, 0xb3, 0x31, 0x79,
];

impl MockAi {
    /// A TLS server presenting a self-signed certificate; it completes the handshake if the
    /// client accepts it (then answers every request with a short streamed text) and records
    /// how each handshake ended in `tls_results`.
    pub fn tls_self_signed() -> (MockAi, Arc<Mutex<Vec<String>>>) {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let results: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
        let res = results.clone();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(SELF_SIGNED_CERT_DER.to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(SELF_SIGNED_KEY_PKCS8_DER.to_vec())),
        )
        .expect("server certificate");
        let config = Arc::new(config);
        let mock = MockAi::raw(move |mut sock| {
            let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
            let mut conn = match rustls::ServerConnection::new(config.clone()) {
                Ok(c) => c,
                Err(e) => {
                    res.lock().unwrap().push(format!("setup: {e}"));
                    return;
                }
            };
            let outcome = loop {
                if !conn.is_handshaking() {
                    break "handshake complete".to_string();
                }
                match conn.complete_io(&mut sock) {
                    Ok((0, 0)) => break "eof during handshake".to_string(),
                    Ok(_) => {}
                    Err(e) => break format!("handshake error: {e}"),
                }
            };
            res.lock().unwrap().push(outcome.clone());
            if outcome == "handshake complete" {
                let mut tls = rustls::StreamOwned::new(conn, sock);
                let mut buf = [0u8; 64 * 1024];
                let _ = tls.read(&mut buf);
                let mut body = String::new();
                for e in text_events(&["tls ", "ok"], "stop", Some((1, 1))) {
                    body.push_str(&format!("data: {e}\n\n"));
                }
                body.push_str("data: [DONE]\n\n");
                let _ = tls.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{body}"
                    )
                    .as_bytes(),
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        (mock, results)
    }
}

// ---------------------------------------------------------------------------------------------
// An HTTP proxy
// ---------------------------------------------------------------------------------------------

/// A forwarding HTTP proxy on 127.0.0.1: `CONNECT host:port` opens a tunnel, an absolute-form
/// request is forwarded in origin form. It records each request head's first line and its
/// `Proxy-Authorization`, and refuses everything with `refuse` when set (e.g. 407).
/// What the proxy saw: each request line and its `Proxy-Authorization`.
type ProxyLog = Mutex<Vec<(String, Option<String>)>>;

pub struct TestProxy {
    pub port: u16,
    seen: Arc<ProxyLog>,
}

impl TestProxy {
    pub fn start(refuse: Option<u16>) -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<ProxyLog> = Arc::default();
        let log = seen.clone();
        thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let log = log.clone();
                thread::spawn(move || proxy_one(client, refuse, &log));
            }
        });
        TestProxy { port, seen }
    }

    /// `(request line, Proxy-Authorization)` of every request so far.
    pub fn seen(&self) -> Vec<(String, Option<String>)> {
        self.seen.lock().unwrap().clone()
    }
}

fn proxy_one(mut client: TcpStream, refuse: Option<u16>, log: &ProxyLog) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(20)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("").to_string();
    let auth = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("proxy-authorization"))
        .map(|(_, v)| v.trim().to_string());
    log.lock().unwrap().push((first.clone(), auth));
    if let Some(code) = refuse {
        let _ = client.write_all(
            format!(
                "HTTP/1.1 {code} {}\r\nContent-Length: 0\r\n\r\n",
                reason_phrase(code)
            )
            .as_bytes(),
        );
        return;
    }
    let mut parts = first.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (upstream_addr, forward) = if method == "CONNECT" {
        (target.to_string(), None)
    } else {
        let rest = target.strip_prefix("http://").unwrap_or(target);
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let origin = text.replacen(target, if path.is_empty() { "/" } else { path }, 1);
        (authority.to_string(), Some(origin))
    };
    let Ok(mut upstream) = TcpStream::connect(&upstream_addr) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    match forward {
        None => {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .is_err()
            {
                return;
            }
        }
        Some(origin) => {
            if upstream.write_all(origin.as_bytes()).is_err() {
                return;
            }
        }
    }
    let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let up = thread::spawn(move || {
        let _ = io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(Shutdown::Write);
    });
    let _ = io::copy(&mut upstream, &mut client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = up.join();
}
