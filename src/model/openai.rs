//! Provider `openai`: `POST {base_url}/chat/completions` with `stream: true`, HTTP/1.1 on a
//! non-blocking socket in the gateway's poll (TLS through rustls, driven by the loop), the
//! response head parsed by httparse, chunked decoding and SSE parsing by hand.
//!
//! The connection is opened by `connect.rs` (name resolution off the loop, each address tried,
//! an HTTP proxy from `HTTPS_PROXY`/`http_proxy`/`NO_PROXY`); the connect timeout bounds it.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Interest;
use serde_json::{Value, json};

use super::connect::{Connector, Failure, Proxy, Route};
use super::http::{self, Chunked, Head, Transport, Url};
use super::sse::SseParser;
use super::{
    CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider, TokenUsage, ToolCall,
};
use crate::transcript::{Message, Role};

/// Everything the provider needs to know, resolved from flags, environment and config.yaml.
#[derive(Debug, Clone)]
pub struct OpenAiSettings {
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub retries: u32,
    pub retry_base: Duration,
    /// Longest backoff, whatever the server's `Retry-After` says.
    pub retry_cap: Duration,
}

const SYSTEM_PROMPT: &str = "You are a helpful assistant working in the user's terminal. \
You can run shell commands with the `terminal` tool; report what they printed.";

/// Bytes of an error response kept for the message.
const ERROR_BODY_MAX: usize = 16 * 1024;
/// Bytes read per advance before yielding to the rest of the loop.
const READ_BUDGET: usize = 256 * 1024;
/// Idle connections kept for the next request, and how long one is trusted to stay open.
const IDLE_MAX: usize = 4;
const IDLE_KEEP: Duration = Duration::from_secs(30);

pub struct OpenAiProvider {
    settings: OpenAiSettings,
    url: Url,
    route: Route,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Connections whose last answer ended cleanly (HTTP/1.1 keep-alive), newest last.
    idle: Vec<(Transport, Instant)>,
}

impl OpenAiProvider {
    pub fn new(settings: OpenAiSettings) -> Result<Self, String> {
        let url = Url::parse(&settings.base_url)?;
        let tls = if url.tls {
            Some(http::tls_config()?)
        } else {
            None
        };
        let route = Route::new(url.clone(), Proxy::for_target(&url)?);
        Ok(OpenAiProvider {
            settings,
            url,
            route,
            tls,
            idle: Vec::new(),
        })
    }
}

/// The chat messages of a transcript, in the OpenAI shape.
pub fn request_messages(transcript: &[Message]) -> Vec<Value> {
    let mut out = vec![json!({"role": "system", "content": SYSTEM_PROMPT})];
    for m in transcript {
        let v = match m.role {
            Role::User | Role::System => {
                json!({"role": m.role.as_str(), "content": m.content.as_deref().unwrap_or("")})
            }
            Role::Assistant => {
                let mut v = json!({"role": "assistant", "content": m.content});
                if let Some(calls) = m
                    .tool_calls
                    .as_deref()
                    .and_then(|t| serde_json::from_str::<Value>(t).ok())
                {
                    v["tool_calls"] = calls;
                }
                v
            }
            Role::Tool => json!({
                "role": "tool",
                "tool_call_id": m.tool_call_id.as_deref().unwrap_or(""),
                "content": m.content.as_deref().unwrap_or(""),
            }),
        };
        out.push(v);
    }
    out
}

impl OpenAiProvider {
    /// The newest idle connection young enough to still be open.
    fn take_idle(&mut self) -> Option<Transport> {
        let now = Instant::now();
        self.idle
            .retain(|(_, since)| now.duration_since(*since) < IDLE_KEEP);
        self.idle.pop().map(|(t, _)| t)
    }
}

impl Provider for OpenAiProvider {
    fn recycle(&mut self, connection: Box<dyn std::any::Any>) {
        if let Ok(t) = connection.downcast::<Transport>() {
            self.idle.push((*t, Instant::now()));
            if self.idle.len() > IDLE_MAX {
                self.idle.remove(0);
            }
        }
    }

    fn name(&self) -> &str {
        "openai"
    }

    fn default_model(&self) -> &str {
        &self.settings.model
    }

    fn set_default_model(&mut self, model: &str) {
        self.settings.model = model.to_string();
    }

    fn endpoint(&self) -> Option<(&str, Option<&str>)> {
        Some((&self.settings.base_url, self.settings.api_key.as_deref()))
    }

    fn start(&mut self, req: ModelRequest<'_>, ctx: &mut CallContext<'_>) -> Box<dyn ModelCall> {
        let mut body = json!({
            "model": req.model,
            "messages": request_messages(req.messages),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        // An empty list is an error to some servers: no tools, no key.
        if !req.tools.is_empty() {
            body["tools"] = json!(req.tools);
        }
        let body = body.to_string();
        let mut request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tui-gateway/{}\r\n\
             Content-Type: application/json\r\nAccept: text/event-stream\r\n\
             Content-Length: {}\r\n",
            self.route.request_target("/chat/completions"),
            self.url.authority(),
            crate::VERSION,
            body.len()
        );
        if let Some(key) = self.settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            request.push_str(&format!("Authorization: Bearer {key}\r\n"));
        }
        request.push_str(&self.route.request_headers());
        request.push_str("\r\n");
        request.push_str(&body);
        let mut call = OpenAiCall {
            settings: self.settings.clone(),
            url: self.url.clone(),
            route: self.route.clone(),
            tls: self.tls.clone(),
            request: request.into_bytes(),
            phase: Phase::Idle,
            deadline: None,
            attempt: 0,
            stream: StreamState::default(),
            pending_failure: None,
            reuse: self.take_idle(),
            reused: false,
            reusable: None,
        };
        call.begin(ctx, Instant::now());
        Box::new(call)
    }
}

enum Phase {
    /// Not started, or between attempts.
    Idle,
    /// Resolving, connecting, tunnelling through a proxy.
    Opening(Connector),
    Sending {
        transport: Transport,
        sent: usize,
    },
    Receiving {
        transport: Transport,
        buf: Vec<u8>,
        head: Option<Head>,
        chunked: Option<Chunked>,
        body_read: u64,
        error_body: Vec<u8>,
    },
    Backoff {
        until: Instant,
    },
    Finished,
}

/// What arrived of the streamed answer.
#[derive(Default)]
struct StreamState {
    sse: SseParser,
    /// Tool calls by index: (id, name, arguments so far).
    tools: BTreeMap<u64, (String, String, String)>,
    finish_reason: Option<String>,
    usage: TokenUsage,
    done: bool,
}

struct OpenAiCall {
    settings: OpenAiSettings,
    url: Url,
    route: Route,
    tls: Option<Arc<rustls::ClientConfig>>,
    request: Vec<u8>,
    phase: Phase,
    /// When the current phase times out.
    deadline: Option<Instant>,
    attempt: u32,
    stream: StreamState,
    /// A failure found while starting, reported on the next advance.
    pending_failure: Option<String>,
    /// An idle connection to try first.
    reuse: Option<Transport>,
    /// The current attempt runs on a reused connection (a server may have closed it meanwhile:
    /// then the request goes out again on a fresh one).
    reused: bool,
    /// The connection, once the answer ended cleanly, for the provider to keep.
    reusable: Option<Transport>,
}

/// How a step of the state machine ended.
enum Step {
    /// Go on with the next phase now.
    Continue,
    /// Wait for readiness or the deadline.
    Wait,
    /// More input may be there; yield and come back next iteration.
    Yield,
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl OpenAiCall {
    /// Start an attempt: resolve (or take the IP literal), then connect.
    fn begin(&mut self, ctx: &mut CallContext<'_>, now: Instant) {
        self.deadline = Some(now + self.settings.connect_timeout);
        self.reused = false;
        if let Some(mut transport) = self.reuse.take()
            && ctx
                .registry
                .register(
                    &mut transport.socket,
                    ctx.token,
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_ok()
        {
            self.reused = true;
            self.phase = Phase::Sending { transport, sent: 0 };
            return;
        }
        match Connector::start(&self.route, self.tls.clone(), ctx.registry, ctx.token) {
            Ok(c) => self.phase = Phase::Opening(c),
            Err(f) => self.fail_now(self.describe_failure(f)),
        }
    }

    fn fail_now(&mut self, msg: String) {
        self.phase = Phase::Finished;
        self.pending_failure = Some(msg);
    }

    fn describe_failure(&self, f: Failure) -> String {
        match f {
            Failure::Resolve(why) => {
                format!("{why} (the model's base URL {})", self.settings.base_url)
            }
            Failure::Connect(why) => self.describe_connect_error(&why),
            Failure::Proxy(why) => format!(
                "the proxy on the way to the model at {} failed: {why}",
                self.settings.base_url
            ),
            Failure::Setup(why) => why,
        }
    }

    fn describe_connect_error(&self, why: &str) -> String {
        let lower = why.to_ascii_lowercase();
        if lower.contains("refused") {
            format!(
                "cannot connect to the model at {}: connection refused (is the server running?)",
                self.settings.base_url
            )
        } else {
            format!(
                "cannot connect to the model at {}: {why}",
                self.settings.base_url
            )
        }
    }

    fn release(&mut self, ctx: &mut CallContext<'_>) {
        match &mut self.phase {
            Phase::Opening(c) => c.release(ctx.registry),
            Phase::Sending { transport, .. } | Phase::Receiving { transport, .. } => {
                let _ = ctx.registry.deregister(&mut transport.socket);
            }
            _ => {}
        }
    }

    fn step(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Result<Step, String> {
        match &mut self.phase {
            Phase::Idle => {
                self.begin(ctx, now);
                Ok(Step::Continue)
            }
            Phase::Finished => Ok(Step::Wait),
            Phase::Backoff { until } => {
                if now < *until {
                    self.deadline = Some(*until);
                    return Ok(Step::Wait);
                }
                self.phase = Phase::Idle;
                Ok(Step::Continue)
            }
            Phase::Opening(connector) => match connector.advance(ctx.registry) {
                Ok(None) => Ok(Step::Wait),
                Ok(Some(transport)) => {
                    self.phase = Phase::Sending { transport, sent: 0 };
                    Ok(Step::Continue)
                }
                Err(f) => Err(self.describe_failure(f)),
            },
            Phase::Sending { transport, sent } => {
                // TLS takes the whole request into its buffer; its records (and the handshake)
                // are pushed out while receiving.
                while *sent < self.request.len() {
                    match transport.write_plain(&self.request[*sent..]) {
                        Ok(0) if self.reused => return Ok(self.start_fresh(ctx)),
                        Ok(0) => {
                            let e = io::Error::new(io::ErrorKind::WriteZero, "connection closed");
                            return Err(self.transport_error("sending the request", &e));
                        }
                        Ok(n) => *sent += n,
                        Err(e) if would_block(&e) => return Ok(Step::Wait),
                        Err(_) if self.reused => return Ok(self.start_fresh(ctx)),
                        Err(e) => return Err(self.transport_error("sending the request", &e)),
                    }
                }
                let Phase::Sending { transport, .. } =
                    std::mem::replace(&mut self.phase, Phase::Idle)
                else {
                    unreachable!("matched above")
                };
                self.deadline = Some(now + self.settings.first_byte_timeout);
                self.phase = Phase::Receiving {
                    transport,
                    buf: Vec::new(),
                    head: None,
                    chunked: None,
                    body_read: 0,
                    error_body: Vec::new(),
                };
                Ok(Step::Continue)
            }
            Phase::Receiving { .. } => self.receive(ctx, now, out),
        }
    }

    fn transport_error(&self, doing: &str, e: &io::Error) -> String {
        let text = e.to_string();
        if text.contains("TLS") || e.kind() == io::ErrorKind::InvalidData && self.url.tls {
            format!(
                "TLS failure talking to {} while {doing}: {text}",
                self.settings.base_url
            )
        } else {
            format!("connection to the model failed while {doing}: {text}")
        }
    }

    fn receive(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Result<Step, String> {
        if let Phase::Receiving { transport, .. } = &mut self.phase
            && let Err(e) = transport.flush_tls()
        {
            return Err(self.transport_error("sending the request", &e));
        }
        let mut chunk = [0u8; 16 * 1024];
        let mut budget = READ_BUDGET;
        loop {
            let Phase::Receiving { transport, buf, .. } = &mut self.phase else {
                return Ok(Step::Continue);
            };
            if budget == 0 {
                return Ok(Step::Yield);
            }
            let n = match transport.read_plain(&mut chunk) {
                Ok(n) => n,
                Err(e) if would_block(&e) => return Ok(Step::Wait),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && transport.handshaking() => {
                    return Err(format!(
                        "TLS handshake with {} failed: the server closed the connection",
                        self.settings.base_url
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => 0,
                Err(e) => return Err(self.transport_error("reading the answer", &e)),
            };
            budget = budget.saturating_sub(n.max(1));
            self.deadline = Some(now + self.settings.idle_timeout);
            if n == 0 {
                if self.reused && head_and_buf_empty(&self.phase) {
                    // The server closed the idle connection before we reused it.
                    return Ok(self.start_fresh(ctx));
                }
                return self.on_eof(ctx, now, out);
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(step) = self.on_bytes(ctx, now, out)? {
                return Ok(step);
            }
        }
    }

    /// New bytes are in `buf`: parse the head, then decode the body. `Some` ends the read loop.
    fn on_bytes(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Result<Option<Step>, String> {
        let Phase::Receiving {
            buf,
            head,
            chunked,
            body_read,
            error_body,
            ..
        } = &mut self.phase
        else {
            return Ok(None);
        };
        if head.is_none() {
            let Some(h) = http::parse_head(buf)? else {
                return Ok(None);
            };
            buf.drain(..h.len);
            *chunked = h.chunked.then(Chunked::default);
            *head = Some(h);
        }
        let h = head.as_ref().cloned().ok_or("no head")?;
        let mut body = Vec::new();
        let complete = match chunked {
            Some(dec) => dec.feed(buf, &mut body)?,
            None => {
                body.extend_from_slice(buf);
                *body_read += buf.len() as u64;
                h.content_length.is_some_and(|len| *body_read >= len)
            }
        };
        buf.clear();
        if h.status != 200 {
            let room = ERROR_BODY_MAX.saturating_sub(error_body.len());
            error_body.extend_from_slice(&body[..body.len().min(room)]);
            if complete || error_body.len() >= ERROR_BODY_MAX {
                return self.on_http_error(ctx, now, out).map(Some);
            }
            return Ok(None);
        }
        let mut events: Vec<String> = Vec::new();
        self.stream
            .sse
            .feed(&body, |d| events.push(d.to_string()))?;
        for data in events {
            self.on_data(&data, out)?;
            if self.stream.done {
                let keep = complete && !h.close;
                self.finish(ctx, out, keep);
                return Ok(Some(Step::Wait));
            }
        }
        if complete {
            return self.on_eof(ctx, now, out).map(Some);
        }
        Ok(None)
    }

    /// One SSE event's data.
    fn on_data(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), String> {
        let data = data.trim();
        if data == "[DONE]" {
            self.stream.done = true;
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            format!(
                "malformed event stream from the model ({e}): {}",
                crate::util::clip(data, 120)
            )
        })?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_string);
            return Err(format!("the model reported an error: {msg}"));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.stream.usage = usage_of(u);
        }
        let Some(choices) = v.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        for choice in choices {
            let delta = &choice["delta"];
            if let Some(t) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                out.push(ModelEvent::Text(t.to_string()));
            }
            for key in ["reasoning_content", "reasoning"] {
                if let Some(t) = delta
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    out.push(ModelEvent::Reasoning(t.to_string()));
                }
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (pos, c) in calls.iter().enumerate() {
                    let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                    let entry = self.stream.tools.entry(index).or_default();
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        entry.0 = id.to_string();
                    }
                    let f = &c["function"];
                    if let Some(name) = f.get("name").and_then(Value::as_str) {
                        let first = entry.1.is_empty() && !name.is_empty();
                        entry.1.push_str(name);
                        if first {
                            out.push(ModelEvent::ToolDrafting(entry.1.clone()));
                        }
                    }
                    if let Some(args) = f.get("arguments").and_then(Value::as_str) {
                        entry.2.push_str(args);
                    }
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.stream.finish_reason = Some(reason.to_string());
            }
        }
        Ok(())
    }

    /// The body ended (EOF or its declared end).
    fn on_eof(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Result<Step, String> {
        let Phase::Receiving { head, .. } = &self.phase else {
            return Ok(Step::Wait);
        };
        let Some(h) = head.clone() else {
            return Err(format!(
                "the model server at {} closed the connection without answering",
                self.settings.base_url
            ));
        };
        if h.status != 200 {
            return self.on_http_error(ctx, now, out);
        }
        let mut events = Vec::new();
        self.stream.sse.finish(|d| events.push(d.to_string()));
        for data in events {
            self.on_data(&data, out)?;
        }
        if self.stream.done || self.stream.finish_reason.is_some() {
            self.finish(ctx, out, false);
            return Ok(Step::Wait);
        }
        Err("the model's stream ended before it finished (the connection closed mid-answer)".into())
    }

    fn on_http_error(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Result<Step, String> {
        let Phase::Receiving {
            head: Some(h),
            error_body,
            ..
        } = &self.phase
        else {
            return Err("HTTP error without a head".into());
        };
        let (status, reason, retry_after) = (h.status, h.reason.clone(), h.retry_after);
        let detail = error_detail(error_body);
        let retryable = status == 429 || (500..600).contains(&status);
        if retryable && self.attempt < self.settings.retries {
            self.attempt += 1;
            // A server's number (1e30 included) or our doubling, never past the cap.
            let cap = self.settings.retry_cap;
            let backoff = match retry_after {
                Some(secs) => Duration::try_from_secs_f64(secs).unwrap_or(cap),
                None => self
                    .settings
                    .retry_base
                    .checked_mul(2u32.saturating_pow(self.attempt - 1))
                    .unwrap_or(cap),
            }
            .min(cap);
            self.release(ctx);
            self.phase = Phase::Backoff {
                until: now + backoff,
            };
            self.deadline = Some(now + backoff);
            out.push(ModelEvent::Notice(format!(
                "the model answered HTTP {status} {reason}; retrying in {:.1}s (attempt {} of {})",
                backoff.as_secs_f64(),
                self.attempt + 1,
                self.settings.retries + 1
            )));
            return Ok(Step::Wait);
        }
        let tries = if retryable {
            format!(" after {} attempts", self.attempt + 1)
        } else {
            String::new()
        };
        let hint = match status {
            401 | 403 => " — the API key was refused: check OPENAI_API_KEY".to_string(),
            404 => format!(
                " — check the base URL ({}) and the model name ({})",
                self.settings.base_url, self.settings.model
            ),
            429 => " — rate limited by the provider".to_string(),
            500..=599 => " — the provider failed".to_string(),
            _ => String::new(),
        };
        Err(format!(
            "the model answered HTTP {status} {reason}{tries}{hint}{detail}"
        ))
    }

    /// Send the request again on a new connection (the reused one was closed by the server).
    fn start_fresh(&mut self, ctx: &mut CallContext<'_>) -> Step {
        self.release(ctx);
        self.reused = false;
        self.phase = Phase::Idle;
        Step::Continue
    }

    /// The answer is complete: tool calls (by index), then `Done`. `keep`: the connection
    /// ended the response cleanly and may carry the next request.
    fn finish(&mut self, ctx: &mut CallContext<'_>, out: &mut Vec<ModelEvent>, keep: bool) {
        self.release(ctx);
        if let Phase::Receiving { transport, .. } =
            std::mem::replace(&mut self.phase, Phase::Finished)
            && keep
        {
            self.reusable = Some(transport);
        }
        self.phase = Phase::Finished;
        self.deadline = None;
        let tools = std::mem::take(&mut self.stream.tools);
        for (index, (id, name, arguments)) in tools {
            let id = if id.is_empty() {
                format!("call_{}_{index}", crate::util::random_hex(8))
            } else {
                id
            };
            let arguments = if arguments.trim().is_empty() {
                "{}".to_string()
            } else {
                arguments
            };
            out.push(ModelEvent::ToolCall(ToolCall {
                id,
                name,
                arguments,
            }));
        }
        out.push(ModelEvent::Done {
            finish_reason: self
                .stream
                .finish_reason
                .clone()
                .unwrap_or_else(|| "stop".into()),
            usage: self.stream.usage,
        });
    }

    fn timeout_message(&self) -> String {
        match &self.phase {
            Phase::Opening(_) | Phase::Sending { .. } => format!(
                "timed out connecting to the model at {} after {:.0}s",
                self.settings.base_url,
                self.settings.connect_timeout.as_secs_f64()
            ),
            Phase::Receiving {
                head: None, buf, ..
            } if buf.is_empty() => format!(
                "timed out waiting for the model's first byte after {:.0}s",
                self.settings.first_byte_timeout.as_secs_f64()
            ),
            _ => format!(
                "timed out: the model sent nothing for {:.0}s (idle timeout)",
                self.settings.idle_timeout.as_secs_f64()
            ),
        }
    }
}

/// Nothing of an answer has arrived yet.
fn head_and_buf_empty(phase: &Phase) -> bool {
    matches!(phase, Phase::Receiving { head: None, buf, .. } if buf.is_empty())
}

/// The message of a JSON error body, or its text, for the user.
fn error_detail(body: &[u8]) -> String {
    if body.is_empty() {
        return String::new();
    }
    let text = String::from_utf8_lossy(body);
    let msg = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("error"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| text.trim().to_string());
    format!(": {}", crate::util::clip(&msg, 300))
}

impl ModelCall for OpenAiCall {
    fn advance(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        if let Some(msg) = self.pending_failure.take() {
            out.push(ModelEvent::Failed(msg));
            return Progress::Finished;
        }
        loop {
            if matches!(self.phase, Phase::Finished) {
                return Progress::Finished;
            }
            if self.deadline.is_some_and(|d| now >= d)
                && !matches!(self.phase, Phase::Backoff { .. } | Phase::Idle)
            {
                let msg = self.timeout_message();
                self.release(ctx);
                self.phase = Phase::Finished;
                out.push(ModelEvent::Failed(msg));
                return Progress::Finished;
            }
            match self.step(ctx, now, out) {
                Ok(Step::Continue) => {
                    if let Some(msg) = self.pending_failure.take() {
                        self.release(ctx);
                        self.phase = Phase::Finished;
                        out.push(ModelEvent::Failed(msg));
                        return Progress::Finished;
                    }
                }
                Ok(Step::Wait) => {
                    if matches!(self.phase, Phase::Finished) {
                        return Progress::Finished;
                    }
                    return Progress::Wait(self.deadline);
                }
                Ok(Step::Yield) => return Progress::Ready,
                Err(msg) => {
                    self.release(ctx);
                    self.phase = Phase::Finished;
                    out.push(ModelEvent::Failed(msg));
                    return Progress::Finished;
                }
            }
        }
    }

    fn take_connection(&mut self) -> Option<Box<dyn std::any::Any>> {
        self.reusable
            .take()
            .map(|t| Box::new(t) as Box<dyn std::any::Any>)
    }

    fn abort(&mut self, ctx: &mut CallContext<'_>) {
        self.release(ctx);
        self.phase = Phase::Finished;
        self.deadline = None;
    }
}

/// The counts of a `usage` object: OpenAI's names (`prompt_tokens_details.cached_tokens`,
/// `completion_tokens_details.reasoning_tokens`), the Responses/Anthropic-style ones
/// (`input_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`), and OpenRouter's
/// `cost` (US dollars) and `prompt_tokens_details.cache_write_tokens`.
fn usage_of(u: &Value) -> TokenUsage {
    let at = |path: &[&str]| {
        path.iter()
            .try_fold(u, |v, key| v.get(key))
            .and_then(Value::as_u64)
    };
    let first = |paths: &[&[&str]]| paths.iter().find_map(|p| at(p)).unwrap_or(0);
    TokenUsage {
        input: first(&[&["prompt_tokens"], &["input_tokens"]]),
        output: first(&[&["completion_tokens"], &["output_tokens"]]),
        cache_read: first(&[
            &["prompt_tokens_details", "cached_tokens"],
            &["input_tokens_details", "cached_tokens"],
            &["cache_read_input_tokens"],
        ]),
        cache_write: first(&[
            &["prompt_tokens_details", "cache_write_tokens"],
            &["cache_creation_input_tokens"],
        ]),
        reasoning: first(&[
            &["completion_tokens_details", "reasoning_tokens"],
            &["output_tokens_details", "reasoning_tokens"],
        ]),
        cost_usd: u
            .get("cost")
            .and_then(Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcripts_map_to_chat_messages() {
        let mut call = Message::new(Role::Assistant, None, 0.0);
        call.tool_calls = Some(
            r#"[{"id":"c1","type":"function","function":{"name":"terminal","arguments":"{}"}}]"#
                .into(),
        );
        let mut result = Message::new(Role::Tool, Some("out".into()), 0.0);
        result.tool_call_id = Some("c1".into());
        let msgs = request_messages(&[
            Message::new(Role::User, Some("hi".into()), 0.0),
            call,
            result,
        ]);
        assert_eq!(msgs[0]["role"], "system");
        assert_eq!(msgs[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(msgs[2]["tool_calls"][0]["id"], "c1");
        assert_eq!(msgs[2]["content"], Value::Null);
        assert_eq!(
            msgs[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "out"})
        );
    }

    #[test]
    fn error_bodies_become_readable_details() {
        assert_eq!(
            error_detail(br#"{"error":{"message":"bad key"}}"#),
            ": bad key"
        );
        assert_eq!(error_detail(b"plain text\n"), ": plain text");
        assert_eq!(error_detail(b""), "");
    }

    #[test]
    fn usage_reads_cache_reasoning_and_cost_fields() {
        let openai = json!({"prompt_tokens": 100, "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 5},
            "completion_tokens_details": {"reasoning_tokens": 7}, "cost": 0.0025});
        let u = usage_of(&openai);
        assert_eq!(
            (u.input, u.output, u.cache_read, u.cache_write, u.reasoning),
            (100, 20, 60, 5, 7)
        );
        assert_eq!(u.cost_usd, Some(0.0025));
        let anthropic = json!({"input_tokens": 9, "output_tokens": 3,
            "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2});
        let u = usage_of(&anthropic);
        assert_eq!(
            (u.input, u.output, u.cache_read, u.cache_write, u.reasoning),
            (9, 3, 4, 2, 0)
        );
        assert_eq!(u.cost_usd, None);
        assert_eq!(
            usage_of(&json!({"cost": -1, "prompt_tokens": "x"})),
            TokenUsage::default()
        );
    }
}
