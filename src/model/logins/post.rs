//! One form POST to a token endpoint, on the loop: the connection opened as the model's are
//! (`connect.rs`: resolution off the loop, proxies, TLS), the request written and the answer
//! read as readiness allows, bounded in size and in time.

use std::io;
use std::time::{Duration, Instant};

use mio::{Registry, Token};

use super::super::catalog::describe;
use super::super::connect::{Connector, Proxy, Route};
use super::super::http::{self, Response, Transport, Url};

/// Largest answer read (a token endpoint's answer is a few KiB).
const BODY_MAX: usize = 64 * 1024;

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

/// A POST in flight.
pub struct FormPost {
    request: Vec<u8>,
    phase: Phase,
    deadline: Instant,
    timeout: Duration,
}

/// What came back.
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<f64>,
    pub body: Vec<u8>,
}

impl FormPost {
    /// POST `form` to `url` with `headers` (never logged: a refresh token may be among them);
    /// readiness is reported on `token`; the whole exchange may take `timeout`.
    pub fn start(
        url: &str,
        headers: &[(&str, &str)],
        form: &str,
        timeout: Duration,
        registry: &Registry,
        token: Token,
        now: Instant,
    ) -> Result<FormPost, String> {
        let parsed = Url::parse(url)?;
        let tls = if parsed.tls {
            Some(http::tls_config()?)
        } else {
            None
        };
        let route = Route::new(parsed.clone(), Proxy::for_target(&parsed)?);
        let mut request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tui-gateway/{}\r\nAccept: application/json\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
             Connection: close\r\n{}",
            // The token URL is the whole target (`/` when it names no path).
            route.request_target(if parsed.path.is_empty() { "/" } else { "" }),
            parsed.authority(),
            crate::VERSION,
            form.len(),
            route.request_headers()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(form);
        let connector = Connector::start(&route, tls, registry, token).map_err(describe)?;
        Ok(FormPost {
            request: request.into_bytes(),
            phase: Phase::Opening(connector),
            deadline: now + timeout,
            timeout,
        })
    }

    /// When the exchange gives up.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Stop and release every source.
    pub fn abort(&mut self, registry: &Registry) {
        match &mut self.phase {
            Phase::Opening(c) => c.release(registry),
            Phase::Sending { transport, .. } | Phase::Receiving { transport, .. } => {
                let _ = registry.deregister(&mut transport.socket);
            }
            Phase::Done => {}
        }
        self.phase = Phase::Done;
    }

    /// All the progress possible now: `None` while it goes on; the answer, or why there is
    /// none, once it is over (its sources released).
    pub fn advance(&mut self, registry: &Registry, now: Instant) -> Option<Result<Answer, String>> {
        let result = match self.step(registry) {
            Ok(None) if now >= self.deadline => {
                Err(format!("no answer within {}s", self.timeout.as_secs()))
            }
            Ok(None) => return None,
            other => other.and_then(|a| a.ok_or_else(|| "no answer".into())),
        };
        self.abort(registry);
        Some(result)
    }

    fn step(&mut self, registry: &Registry) -> Result<Option<Answer>, String> {
        loop {
            match &mut self.phase {
                Phase::Done => return Err("the request was stopped".into()),
                Phase::Opening(connector) => match connector.advance(registry) {
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
            if body.len() > BODY_MAX {
                return Err(format!("the answer is larger than {} KiB", BODY_MAX / 1024));
            }
            if complete {
                let head = response.head().ok_or("no answer")?;
                return Ok(Some(Answer {
                    status: head.status,
                    retry_after: head.retry_after,
                    body: std::mem::take(body),
                }));
            }
        }
    }
}
