//! One plain HTTP request on the loop (a token endpoint's form POST, the model list's GET): the
//! connection opened as the model's are (`connect.rs`: resolution off the loop, proxies, TLS),
//! the request written and the whole answer read as readiness allows, bounded in size and time.

use std::io;
use std::time::{Duration, Instant};

use crate::reactor::Slot;

use super::connect::{Connector, Failure, Proxy, Route};
use super::http::{self, Response, Transport, Url};

/// A connection failure in words (also the MCP HTTP client's).
pub(crate) fn describe(f: Failure) -> String {
    match f {
        Failure::Connect(why) => format!("cannot connect: {why}"),
        Failure::Proxy(why) => format!("the proxy failed: {why}"),
        Failure::Resolve(why) | Failure::Setup(why) => why,
    }
}

/// What to send.
pub struct Request<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    pub url: &'a str,
    /// Below the URL's path (`/models`); empty: the URL is the whole target.
    pub path: &'a str,
    /// Never logged: a token may be among them.
    pub headers: &'a [(&'a str, &'a str)],
    /// A form (`application/x-www-form-urlencoded`) for a POST; none for a GET.
    pub form: Option<&'a str>,
    /// Largest answer read.
    pub answer_max: usize,
}

enum Phase {
    Opening(Connector),
    Sending {
        transport: Transport,
        sent: usize,
    },
    Receiving {
        transport: Transport,
        response: Box<Response>,
        body: Vec<u8>,
    },
    Done,
}

/// A request in flight.
pub struct OneShot {
    request: Vec<u8>,
    phase: Phase,
    deadline: Instant,
    timeout: Duration,
    answer_max: usize,
}

/// What came back.
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub reason: String,
    pub retry_after: Option<f64>,
    pub body: Vec<u8>,
}

impl OneShot {
    /// Send `req`; readiness is reported on `token`; the whole exchange may take `timeout`.
    pub fn start(
        req: &Request<'_>,
        timeout: Duration,
        slot: &Slot,
        now: Instant,
    ) -> Result<OneShot, String> {
        let parsed = Url::parse(req.url)?;
        let tls = if parsed.tls {
            Some(http::tls_config()?)
        } else {
            None
        };
        let route = Route::new(parsed.clone(), Proxy::for_target(&parsed)?);
        let target = match req.path {
            // The URL is the whole target (`/` when it names no path).
            "" if parsed.path.is_empty() => "/",
            path => path,
        };
        let mut request = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tui-gateway/{}\r\nAccept: application/json\r\n\
             Connection: close\r\n{}",
            req.method,
            route.request_target(target),
            parsed.authority(),
            crate::VERSION,
            route.request_headers()
        );
        if let Some(form) = req.form {
            request.push_str(&format!(
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
                form.len()
            ));
        }
        for (name, value) in req.headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(req.form.unwrap_or(""));
        let connector = Connector::start(&route, tls, slot).map_err(describe)?;
        Ok(OneShot {
            request: request.into_bytes(),
            phase: Phase::Opening(connector),
            deadline: now + timeout,
            timeout,
            answer_max: req.answer_max,
        })
    }

    /// When the exchange gives up.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Stop and release every source.
    pub fn abort(&mut self, slot: &Slot) {
        match &mut self.phase {
            Phase::Opening(c) => c.release(slot),
            Phase::Sending { transport, .. } | Phase::Receiving { transport, .. } => {
                let _ = slot.deregister(&mut transport.socket);
            }
            Phase::Done => {}
        }
        self.phase = Phase::Done;
    }

    /// All the progress possible now: `None` while it goes on; the answer, or why there is
    /// none, once it is over (its sources released).
    pub fn advance(&mut self, slot: &Slot, now: Instant) -> Option<Result<Answer, String>> {
        let result = match self.step(slot) {
            Ok(None) if now >= self.deadline => {
                Err(format!("no answer within {}s", self.timeout.as_secs()))
            }
            Ok(None) => return None,
            other => other.and_then(|a| a.ok_or_else(|| "no answer".into())),
        };
        self.abort(slot);
        Some(result)
    }

    fn step(&mut self, slot: &Slot) -> Result<Option<Answer>, String> {
        loop {
            match &mut self.phase {
                Phase::Done => return Err("the request was stopped".into()),
                Phase::Opening(connector) => match connector.advance(slot) {
                    Ok(None) => return Ok(None),
                    Ok(Some(transport)) => self.phase = Phase::Sending { transport, sent: 0 },
                    Err(f) => return Err(describe(f)),
                },
                Phase::Sending { transport, sent } => {
                    while *sent < self.request.len() {
                        match transport.write_plain(&self.request[*sent..]) {
                            Ok(0) => return Err("the connection closed".into()),
                            Ok(n) => *sent += n,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                            Err(e) => return Err(format!("sending the request failed: {e}")),
                        }
                    }
                    let Phase::Sending { transport, .. } =
                        std::mem::replace(&mut self.phase, Phase::Done)
                    else {
                        return Err("the request was stopped".into());
                    };
                    self.phase = Phase::Receiving {
                        transport,
                        response: Box::default(),
                        body: Vec::new(),
                    };
                }
                Phase::Receiving { .. } => return self.receive(),
            }
        }
    }

    fn receive(&mut self) -> Result<Option<Answer>, String> {
        let Phase::Receiving {
            transport,
            response,
            body,
        } = &mut self.phase
        else {
            return Ok(None);
        };
        transport
            .flush_tls()
            .map_err(|e| format!("sending the request failed: {e}"))?;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = match transport.read_plain(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && !transport.handshaking() => 0,
                Err(e) => return Err(format!("reading the answer failed: {e}")),
            };
            let complete = if n == 0 {
                response.closed()?;
                true
            } else {
                response.feed(&chunk[..n], body)?
            };
            if body.len() > self.answer_max {
                return Err(format!(
                    "the answer is larger than {} KiB",
                    self.answer_max / 1024
                ));
            }
            if complete {
                let head = response.head().ok_or("no answer")?;
                return Ok(Some(Answer {
                    status: head.status,
                    reason: head.reason.clone(),
                    retry_after: head.retry_after,
                    body: std::mem::take(body),
                }));
            }
        }
    }
}
