//! One streamed model exchange over HTTP/1.1: a non-blocking socket in the gateway's poll (TLS
//! through rustls, driven by the loop), the response head parsed by httparse, chunked decoding
//! and server-sent events by hand; what the events mean is the wire's (`model/wire/`).
//!
//! The connection is opened by `connect.rs` (name resolution off the loop, each address tried,
//! an HTTP proxy from `HTTPS_PROXY`/`http_proxy`/`NO_PROXY`); the connect timeout bounds it.
//! Retries (429 and 5xx, with backoff) and timeouts (connect, first byte, idle) are here too.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Interest;
use serde_json::Value;

use super::connect::{Connector, Failure, Proxy, Route};
use super::http::{self, Chunked, Head, Transport, Url};
use super::sse::SseParser;
use super::wire::Decoder;
use super::{CallContext, ModelCall, ModelEvent, Progress};

/// Bytes of an error response kept for the message.
const ERROR_BODY_MAX: usize = 16 * 1024;
/// Bytes read per advance before yielding to the rest of the loop.
const READ_BUDGET: usize = 256 * 1024;

/// How long each phase may take, and how failures are retried.
#[derive(Debug, Clone)]
pub struct Timing {
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub retries: u32,
    /// Retries of a 429 at most (a provider with a credential pool tries its next key after
    /// one, as Hermes rotates at the second 429 in a row); `retries` otherwise.
    pub rate_limit_retries: u32,
    pub retry_base: Duration,
    /// Longest backoff, whatever the server's `Retry-After` says.
    pub retry_cap: Duration,
}

/// Where exchanges go: the endpoint's URL, the route to it, its TLS settings and timing, and
/// what a failure's message names.
#[derive(Clone)]
pub struct Destination {
    pub url: Url,
    pub route: Route,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub timing: Timing,
    /// The base URL as configured, for messages.
    pub base_url: String,
    /// Where the key comes from, for a refused key's hint (`OPENROUTER_API_KEY`).
    pub key_name: String,
}

impl Destination {
    pub fn new(base_url: &str, timing: Timing, key_name: String) -> Result<Destination, String> {
        let url = Url::parse(base_url)?;
        let tls = if url.tls {
            Some(http::tls_config()?)
        } else {
            None
        };
        let route = Route::new(url.clone(), Proxy::for_target(&url)?);
        Ok(Destination {
            url,
            route,
            tls,
            timing,
            base_url: base_url.to_string(),
            key_name,
        })
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

/// One request in flight, from the first connect to the end of its answer (retries included).
pub struct Exchange {
    to: Destination,
    /// The model asked, for messages.
    model: String,
    request: Vec<u8>,
    phase: Phase,
    /// When the current phase times out.
    deadline: Option<Instant>,
    attempt: u32,
    sse: SseParser,
    decoder: Box<dyn Decoder>,
    /// The decoder saw the answer's end marker.
    done: bool,
    /// A failure found while starting, reported on the next advance.
    pending_failure: Option<String>,
    /// An idle connection to try first.
    reuse: Option<Transport>,
    /// The current attempt runs on a reused connection (a server may have closed it meanwhile:
    /// then the request goes out again on a fresh one).
    reused: bool,
    /// The connection, once the answer ended cleanly, for the provider to keep.
    reusable: Option<Transport>,
    /// The call ended on HTTP 401: the server refused the key.
    key_refused: bool,
    /// The key the request carries: a provider's message that quotes it is passed on without it.
    secret: Option<String>,
    /// The HTTP status the call failed on, if it failed on one.
    failed_status: Option<u16>,
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

impl Exchange {
    /// Send `request` (the whole HTTP message) to `to`, on `reuse` first when given.
    pub fn start(
        to: &Destination,
        model: &str,
        request: Vec<u8>,
        decoder: Box<dyn Decoder>,
        reuse: Option<Transport>,
        ctx: &mut CallContext<'_>,
        now: Instant,
    ) -> Exchange {
        let mut exchange = Exchange {
            to: to.clone(),
            model: model.to_string(),
            request,
            phase: Phase::Idle,
            deadline: None,
            attempt: 0,
            sse: SseParser::default(),
            decoder,
            done: false,
            pending_failure: None,
            reuse,
            reused: false,
            reusable: None,
            key_refused: false,
            secret: None,
            failed_status: None,
        };
        exchange.begin(ctx, now);
        exchange
    }

    /// The request carries `key`: no failure this call reports quotes it.
    pub fn hiding(mut self, key: Option<&str>) -> Exchange {
        // A key this short would blank ordinary words of the message (no real key is).
        self.secret = key.filter(|k| k.len() >= 6).map(str::to_string);
        self
    }

    /// Start an attempt: resolve (or take the IP literal), then connect.
    fn begin(&mut self, ctx: &mut CallContext<'_>, now: Instant) {
        self.deadline = Some(now + self.to.timing.connect_timeout);
        self.reused = false;
        if let Some(mut transport) = self.reuse.take()
            && ctx
                .slot
                .register(
                    &mut transport.socket,
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_ok()
        {
            self.reused = true;
            self.phase = Phase::Sending { transport, sent: 0 };
            return;
        }
        match Connector::start(&self.to.route, self.to.tls.clone(), ctx.slot) {
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
                format!("{why} (the model's base URL {})", self.to.base_url)
            }
            Failure::Connect(why) => self.describe_connect_error(&why),
            Failure::Proxy(why) => format!(
                "the proxy on the way to the model at {} failed: {why}",
                self.to.base_url
            ),
            Failure::Setup(why) => why,
        }
    }

    fn describe_connect_error(&self, why: &str) -> String {
        let lower = why.to_ascii_lowercase();
        if lower.contains("refused") {
            format!(
                "cannot connect to the model at {}: connection refused (is the server running?)",
                self.to.base_url
            )
        } else {
            format!("cannot connect to the model at {}: {why}", self.to.base_url)
        }
    }

    fn release(&mut self, ctx: &mut CallContext<'_>) {
        match &mut self.phase {
            Phase::Opening(c) => c.release(ctx.slot),
            Phase::Sending { transport, .. } | Phase::Receiving { transport, .. } => {
                let _ = ctx.slot.deregister(&mut transport.socket);
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
            Phase::Opening(connector) => match connector.advance(ctx.slot) {
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
                self.deadline = Some(now + self.to.timing.first_byte_timeout);
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
        if text.contains("TLS") || e.kind() == io::ErrorKind::InvalidData && self.to.url.tls {
            format!(
                "TLS failure talking to {} while {doing}: {text}",
                self.to.base_url
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
                        self.to.base_url
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => 0,
                Err(e) => return Err(self.transport_error("reading the answer", &e)),
            };
            budget = budget.saturating_sub(n.max(1));
            self.deadline = Some(now + self.to.timing.idle_timeout);
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
        self.sse.feed(&body, |d| events.push(d.to_string()))?;
        for data in events {
            self.on_data(&data, out)?;
            if self.done {
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

    /// One SSE event's data, read by the wire's decoder.
    fn on_data(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), String> {
        if self.decoder.on_data(data, out)? {
            self.done = true;
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
                self.to.base_url
            ));
        };
        if h.status != 200 {
            return self.on_http_error(ctx, now, out);
        }
        let mut events = Vec::new();
        self.sse.finish(|d| events.push(d.to_string()));
        for data in events {
            self.on_data(&data, out)?;
        }
        if self.done || self.decoder.whole_at_eof() {
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
        let allowed = match status {
            429 => self.to.timing.rate_limit_retries,
            _ => self.to.timing.retries,
        };
        if retryable && self.attempt < allowed {
            self.attempt += 1;
            // A server's number (1e30 included) or our doubling, never past the cap.
            let cap = self.to.timing.retry_cap;
            let backoff = match retry_after {
                Some(secs) => Duration::try_from_secs_f64(secs).unwrap_or(cap),
                None => self
                    .to
                    .timing
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
                self.to.timing.retries + 1
            )));
            return Ok(Step::Wait);
        }
        self.key_refused = status == 401;
        self.failed_status = Some(status);
        let tries = if retryable {
            format!(" after {} attempts", self.attempt + 1)
        } else {
            String::new()
        };
        let hint = match status {
            401 | 403 => format!(" — the API key was refused: check {}", self.to.key_name),
            404 => format!(
                " — check the base URL ({}) and the model name ({})",
                self.to.base_url, self.model
            ),
            429 => " — rate limited by the provider".to_string(),
            // Anthropic's "overloaded" (and Cloudflare's unknown error elsewhere).
            529 => " — the provider is overloaded".to_string(),
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
        self.decoder.finish(out);
    }

    fn timeout_message(&self) -> String {
        match &self.phase {
            Phase::Opening(_) | Phase::Sending { .. } => format!(
                "timed out connecting to the model at {} after {:.0}s",
                self.to.base_url,
                self.to.timing.connect_timeout.as_secs_f64()
            ),
            Phase::Receiving {
                head: None, buf, ..
            } if buf.is_empty() => format!(
                "timed out waiting for the model's first byte after {:.0}s",
                self.to.timing.first_byte_timeout.as_secs_f64()
            ),
            _ => format!(
                "timed out: the model sent nothing for {:.0}s (idle timeout)",
                self.to.timing.idle_timeout.as_secs_f64()
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

impl Exchange {
    /// One advance of the call (failures as they are worded, the key not yet hidden).
    fn advance_call(
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
}

impl ModelCall for Exchange {
    fn advance(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        let from = out.len();
        let progress = self.advance_call(ctx, now, out);
        if let Some(key) = &self.secret {
            for ev in &mut out[from..] {
                if let ModelEvent::Failed(why) = ev
                    && why.contains(key.as_str())
                {
                    *why = why.replace(key.as_str(), "[the API key]");
                }
            }
        }
        progress
    }

    fn take_connection(&mut self) -> Option<Box<dyn std::any::Any>> {
        self.reusable
            .take()
            .map(|t| Box::new(t) as Box<dyn std::any::Any>)
    }

    fn key_refused(&self) -> bool {
        self.key_refused
    }

    fn may_fall_back(&self) -> bool {
        // Hermes' triggers: 429 and 5xx (after the retries), 401/403/404 at once, and every
        // failure without a status (connection, TLS, timeouts, a stream cut or refused).
        match self.failed_status {
            Some(s) => matches!(s, 401 | 403 | 404 | 429) || s >= 500,
            None => true,
        }
    }

    fn failed_status(&self) -> Option<u16> {
        self.failed_status
    }

    fn abort(&mut self, ctx: &mut CallContext<'_>) {
        self.release(ctx);
        self.phase = Phase::Finished;
        self.deadline = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_become_readable_details() {
        assert_eq!(
            error_detail(br#"{"error":{"message":"bad key"}}"#),
            ": bad key"
        );
        assert_eq!(error_detail(b"plain text\n"), ": plain text");
        // Anthropic's shape: {type: error, error: {type, message}}.
        assert_eq!(
            error_detail(
                br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#
            ),
            ": invalid x-api-key"
        );
        assert_eq!(error_detail(b""), "");
    }
}
