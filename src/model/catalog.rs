//! `GET {base_url}/models` for the model picker, on the loop: the same non-blocking socket, TLS,
//! head parsing and chunked decoding as the streaming provider, answer bounded in size. Name
//! resolution runs on the provider's short-lived helper thread.

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};

use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};
use serde_json::Value;

use super::http::{self, Chunked, Head, Transport, Url};

/// Largest answer read; a longer one is cut off and reported.
const BODY_MAX: usize = 4 * 1024 * 1024;
/// Model ids kept from one answer, and the longest id kept.
const IDS_MAX: usize = 1000;
const ID_LEN_MAX: usize = 256;

enum Phase {
    Resolving {
        rx: UnixStream,
        text: Vec<u8>,
    },
    Connecting {
        socket: TcpStream,
        addrs: Vec<SocketAddr>,
        next: usize,
    },
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
    url: Url,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    request: Vec<u8>,
    token: Token,
    phase: Phase,
}

/// Where a fetch stands after being advanced.
pub enum Fetched {
    Pending,
    Done(Result<Vec<String>, String>),
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
        let mut request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tui-gateway/{}\r\n\
             Accept: application/json\r\nConnection: close\r\n",
            url.target("/models"),
            url.authority(),
            crate::session::VERSION
        );
        if let Some(key) = api_key.filter(|k| !k.is_empty()) {
            request.push_str(&format!("Authorization: Bearer {key}\r\n"));
        }
        request.push_str("\r\n");
        let mut fetch = ModelsFetch {
            url,
            tls,
            request: request.into_bytes(),
            token,
            phase: Phase::Done,
        };
        if let Ok(ip) = fetch.url.host.parse::<IpAddr>() {
            fetch.connect(registry, vec![SocketAddr::new(ip, fetch.url.port)], 0)?;
        } else {
            let mut rx = super::openai::spawn_resolver(&fetch.url.host, fetch.url.port)
                .map_err(|e| format!("cannot resolve {}: {e}", fetch.url.host))?;
            registry
                .register(&mut rx, token, Interest::READABLE)
                .map_err(|e| format!("cannot watch name resolution: {e}"))?;
            fetch.phase = Phase::Resolving {
                rx,
                text: Vec::new(),
            };
        }
        Ok(fetch)
    }

    fn connect(
        &mut self,
        registry: &Registry,
        addrs: Vec<SocketAddr>,
        from: usize,
    ) -> Result<(), String> {
        let mut last = String::from("no address");
        for (i, addr) in addrs.iter().enumerate().skip(from) {
            match TcpStream::connect(*addr) {
                Ok(mut socket) => {
                    if let Err(e) = registry.register(
                        &mut socket,
                        self.token,
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        last = e.to_string();
                        continue;
                    }
                    self.phase = Phase::Connecting {
                        socket,
                        addrs,
                        next: i + 1,
                    };
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("cannot connect: {last}"))
    }

    /// Stop and release every source.
    pub fn abort(&mut self, registry: &Registry) {
        match &mut self.phase {
            Phase::Resolving { rx, .. } => {
                let _ = registry.deregister(rx);
            }
            Phase::Connecting { socket, .. } => {
                let _ = registry.deregister(socket);
            }
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
                Phase::Resolving { rx, text } => {
                    let mut buf = [0u8; 1024];
                    loop {
                        match rx.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) if text.len() < 64 * 1024 => text.extend_from_slice(&buf[..n]),
                            Ok(_) => {}
                            Err(e) if would_block(&e) => return Ok(None),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(format!("name resolution failed: {e}")),
                        }
                    }
                    let text = String::from_utf8_lossy(text).into_owned();
                    let _ = registry.deregister(rx);
                    let addrs: Vec<SocketAddr> = text
                        .lines()
                        .filter_map(|l| l.strip_prefix("addr ")?.parse().ok())
                        .collect();
                    if addrs.is_empty() {
                        let why = text
                            .lines()
                            .find_map(|l| l.strip_prefix("error "))
                            .unwrap_or("no addresses");
                        return Err(format!("cannot resolve {:?}: {why}", self.url.host));
                    }
                    self.connect(registry, addrs, 0)?;
                }
                Phase::Connecting {
                    socket,
                    addrs,
                    next,
                } => {
                    let failed = match socket.take_error() {
                        Ok(Some(e)) | Err(e) => Some(e.to_string()),
                        Ok(None) => match socket.peer_addr() {
                            Ok(_) => None,
                            Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                                return Ok(None);
                            }
                            Err(e) => Some(e.to_string()),
                        },
                    };
                    if let Some(why) = failed {
                        let _ = registry.deregister(socket);
                        let (addrs, next) = (std::mem::take(addrs), *next);
                        if next < addrs.len() {
                            self.connect(registry, addrs, next)?;
                            continue;
                        }
                        return Err(format!("cannot connect: {why}"));
                    }
                    let Phase::Connecting { socket, .. } =
                        std::mem::replace(&mut self.phase, Phase::Done)
                    else {
                        unreachable!("matched above")
                    };
                    let tls = self.tls.clone().map(|c| (c, self.url.host.as_str()));
                    let transport = Transport::new(socket, tls)?;
                    self.phase = Phase::Sending { transport, sent: 0 };
                }
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
