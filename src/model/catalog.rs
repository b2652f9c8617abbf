//! `GET {base_url}/models` for the model picker, on the loop: the same connection opening
//! (`connect.rs`, proxy included), TLS, head parsing and chunked decoding as the streaming
//! provider, answer bounded in size.

use std::io;

use mio::{Registry, Token};
use serde_json::Value;

use super::connect::{Connector, Failure, Proxy, Route};
use super::http::{self, Chunked, Head, Transport, Url};

/// Largest answer read; a longer one is cut off and reported.
const BODY_MAX: usize = 4 * 1024 * 1024;
/// Model ids kept from one answer, and the longest id kept.
const IDS_MAX: usize = 1000;
const ID_LEN_MAX: usize = 256;

enum Phase {
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
        body: Vec<u8>,
    },
    Done,
}

/// One fetch in flight.
pub struct ModelsFetch {
    request: Vec<u8>,
    phase: Phase,
}

/// Where a fetch stands after being advanced.
pub enum Fetched {
    Pending,
    Done(Result<Vec<String>, String>),
}

/// A connection failure in words (also the MCP HTTP client's).
pub(crate) fn describe(f: Failure) -> String {
    match f {
        Failure::Connect(why) => format!("cannot connect: {why}"),
        Failure::Proxy(why) => format!("the proxy failed: {why}"),
        Failure::Resolve(why) | Failure::Setup(why) => why,
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl ModelsFetch {
    /// Start fetching; readiness of its sources is reported on `token`.
    pub fn start(
        base_url: &str,
        api_key: Option<&str>,
        registry: &Registry,
        token: Token,
    ) -> Result<ModelsFetch, String> {
        let url = Url::parse(base_url)?;
        let tls = if url.tls {
            Some(http::tls_config()?)
        } else {
            None
        };
        let route = Route::new(url.clone(), Proxy::for_target(&url)?);
        let mut request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tui-gateway/{}\r\n\
             Accept: application/json\r\nConnection: close\r\n{}",
            route.request_target("/models"),
            url.authority(),
            crate::VERSION,
            route.request_headers()
        );
        if let Some(key) = api_key.filter(|k| !k.is_empty()) {
            request.push_str(&format!("Authorization: Bearer {key}\r\n"));
        }
        request.push_str("\r\n");
        let connector = Connector::start(&route, tls, registry, token).map_err(describe)?;
        Ok(ModelsFetch {
            request: request.into_bytes(),
            phase: Phase::Opening(connector),
        })
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

    /// Make all the progress possible now (sources are edge-triggered: read to `WouldBlock`).
    pub fn advance(&mut self, registry: &Registry) -> Fetched {
        match self.step(registry) {
            Ok(Some(ids)) => {
                self.abort(registry);
                Fetched::Done(Ok(ids))
            }
            Ok(None) => Fetched::Pending,
            Err(e) => {
                self.abort(registry);
                Fetched::Done(Err(e))
            }
        }
    }

    fn step(&mut self, registry: &Registry) -> Result<Option<Vec<String>>, String> {
        loop {
            match &mut self.phase {
                Phase::Done => return Err("the fetch was stopped".into()),
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
                            Err(e) if would_block(&e) => return Ok(None),
                            Err(e) => return Err(format!("sending the request failed: {e}")),
                        }
                    }
                    let Phase::Sending { transport, .. } =
                        std::mem::replace(&mut self.phase, Phase::Done)
                    else {
                        unreachable!("matched above")
                    };
                    self.phase = Phase::Receiving {
                        transport,
                        buf: Vec::new(),
                        head: None,
                        chunked: None,
                        body: Vec::new(),
                    };
                }
                Phase::Receiving { .. } => return self.receive(),
            }
        }
    }

    fn receive(&mut self) -> Result<Option<Vec<String>>, String> {
        let Phase::Receiving {
            transport,
            buf,
            head,
            chunked,
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
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && !transport.handshaking() => 0,
                Err(e) => return Err(format!("reading the answer failed: {e}")),
            };
            let eof = n == 0;
            buf.extend_from_slice(&chunk[..n]);
            if head.is_none() {
                match http::parse_head(buf)? {
                    Some(h) => {
                        buf.drain(..h.len);
                        *chunked = h.chunked.then(Chunked::default);
                        *head = Some(h);
                    }
                    None if eof => return Err("the server closed without answering".into()),
                    None => continue,
                }
            }
            let h = head.as_ref().ok_or("no response head")?;
            let complete = match chunked {
                Some(dec) => dec.feed(buf, body)?,
                None => {
                    body.extend_from_slice(buf);
                    h.content_length.is_some_and(|len| body.len() as u64 >= len)
                }
            };
            buf.clear();
            if body.len() > BODY_MAX {
                return Err(format!(
                    "the model list is larger than {} MiB",
                    BODY_MAX >> 20
                ));
            }
            if complete || eof {
                if h.status != 200 {
                    return Err(format!("the server answered {} {}", h.status, h.reason));
                }
                return parse_ids(body).map(Some);
            }
        }
    }
}

/// Model ids of an OpenAI-style `{"data": [{"id": …}]}` answer (or Ollama's
/// `{"models": [{"name": …}]}`), in the server's order, bounded.
pub fn parse_ids(body: &[u8]) -> Result<Vec<String>, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the model list is not JSON ({e})"))?;
    let list = v
        .get("data")
        .or_else(|| v.get("models"))
        .and_then(Value::as_array)
        .ok_or("the model list has no `data` array")?;
    let mut ids: Vec<String> = Vec::new();
    for m in list {
        let id = m
            .get("id")
            .or_else(|| m.get("name"))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|id| {
                !id.is_empty() && id.len() <= ID_LEN_MAX && !id.contains(char::is_control)
            });
        if let Some(id) = id
            && !ids.iter().any(|i| i == id)
        {
            ids.push(id.to_string());
            if ids.len() >= IDS_MAX {
                break;
            }
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_order_deduplicated_and_bounded() {
        let ids =
            parse_ids(br#"{"data":[{"id":"b"},{"id":"a"},{"id":"b"},{"x":1},{"id":""}]}"#).unwrap();
        assert_eq!(ids, ["b", "a"]);
        let ids = parse_ids(br#"{"models":[{"name":"llama3"}]}"#).unwrap();
        assert_eq!(ids, ["llama3"]);
        assert!(parse_ids(b"<html>").is_err());
        assert!(parse_ids(br#"{"data":3}"#).is_err());
        let many: Vec<Value> = (0..5000)
            .map(|i| serde_json::json!({ "id": format!("m{i}") }))
            .collect();
        let body = serde_json::json!({ "data": many }).to_string();
        assert_eq!(parse_ids(body.as_bytes()).unwrap().len(), IDS_MAX);
    }
}
