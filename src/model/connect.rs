//! Opening the connection for one HTTP request, on the loop: the name resolved on a short-lived
//! helper thread, a non-blocking connect that tries each address, through an HTTP proxy when
//! the environment names one (a `CONNECT` tunnel for https; plain http goes to the proxy in
//! absolute form), then TLS. Shared by the streaming provider and the model list fetch.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use mio::Interest;
use mio::net::{TcpStream, UnixStream};

use crate::reactor::Slot;

use super::http::{self, Transport, Url};

/// Longest proxy answer to a `CONNECT` we read.
const TUNNEL_REPLY_MAX: usize = 16 * 1024;

/// An HTTP proxy from `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` (or their lower-case forms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    /// `Proxy-Authorization` value (`Basic …`) from the proxy URL's user info.
    auth: Option<String>,
}

impl Proxy {
    /// The proxy the process environment names for `target`, honouring `NO_PROXY`.
    pub fn for_target(target: &Url) -> Result<Option<Proxy>, String> {
        Proxy::choose(target, |name| {
            std::env::var(name).ok().filter(|v| !v.trim().is_empty())
        })
    }

    /// As [`Proxy::for_target`], reading variables through `var`.
    pub fn choose(
        target: &Url,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Proxy>, String> {
        let either = |upper: &str| var(&upper.to_ascii_lowercase()).or_else(|| var(upper));
        if let Some(list) = either("NO_PROXY")
            && bypasses(&list, &target.host, target.port)
        {
            return Ok(None);
        }
        let named = if target.tls {
            either("HTTPS_PROXY")
        } else {
            // CGI programs get a client-chosen HTTP_PROXY; curl reads only the lower-case form.
            var("http_proxy")
        };
        let Some(text) = named.or_else(|| either("ALL_PROXY")) else {
            return Ok(None);
        };
        Proxy::parse(&text).map(Some)
    }

    fn parse(text: &str) -> Result<Proxy, String> {
        let text = text.trim();
        let rest = match text.split_once("://") {
            None => text,
            Some(("http", rest)) => rest,
            Some((scheme, _)) => {
                return Err(format!(
                    "proxy {:?}: only http:// proxies are supported, not {scheme}://",
                    redact(text)
                ));
            }
        };
        let rest = rest.split(['/', '?', '#']).next().unwrap_or("");
        let (auth, hostport) = match rest.rsplit_once('@') {
            Some((userinfo, hp)) => {
                let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let plain = format!("{}:{}", percent_decode(user), percent_decode(pass));
                (Some(format!("Basic {}", base64(plain.as_bytes()))), hp)
            }
            None => (None, rest),
        };
        let url = Url::parse(&format!("http://{hostport}"))
            .map_err(|e| format!("proxy {:?}: {e}", redact(text)))?;
        Ok(Proxy {
            host: url.host,
            port: url.port,
            auth,
        })
    }
}

/// The proxy URL without its password, for messages.
fn redact(text: &str) -> String {
    match text.rsplit_once('@') {
        Some((_, hp)) => format!("…@{hp}"),
        None => text.to_string(),
    }
}

/// `NO_PROXY`: `*`, or comma-separated hosts, domains (`.corp` or `corp` match `x.corp`), IPs,
/// each optionally with `:port`.
fn bypasses(list: &str, host: &str, port: u16) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    list.split(',').map(str::trim).any(|entry| {
        if entry == "*" {
            return true;
        }
        let (name, entry_port) = match entry.rsplit_once(':') {
            Some((n, p)) if !n.contains(':') || n.ends_with(']') => (n, p.parse::<u16>().ok()),
            _ => (entry, None),
        };
        if entry_port.is_some_and(|p| p != port) {
            return false;
        }
        let name = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        !name.is_empty() && (host == name || host.ends_with(&format!(".{name}")))
    })
}

/// `%XX` escapes decoded (a malformed one kept as it is; also `file://` paths).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(Some(h)), Some(Some(l))) = (
                bytes.get(i + 1).map(|b| hex(*b)),
                bytes.get(i + 2).map(|b| hex(*b)),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Base64 or base64url, padding optional (as Python's lenient decoders take both alphabets);
/// `None` on any other character or a dangling sextet.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = ((acc << 6) | u32::from(v)) & 0xff_ffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Standard base64 with padding (also images' data URLs).
pub(crate) fn base64(input: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ABC[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// How a request to `target` goes out: straight, or through a proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub target: Url,
    pub proxy: Option<Proxy>,
}

impl Route {
    pub fn new(target: Url, proxy: Option<Proxy>) -> Route {
        Route { target, proxy }
    }

    /// Plain http through a proxy: the request itself goes to the proxy.
    fn forwarded(&self) -> bool {
        self.proxy.is_some() && !self.target.tls
    }

    /// The request line's target for `endpoint`: absolute form when a proxy forwards it.
    pub fn request_target(&self, endpoint: &str) -> String {
        let path = self.target.target(endpoint);
        if self.forwarded() {
            format!("http://{}{path}", self.target.authority())
        } else {
            path
        }
    }

    /// Header lines the request needs for the route (the proxy's credentials when it forwards).
    pub fn request_headers(&self) -> String {
        match &self.proxy {
            Some(Proxy {
                auth: Some(auth), ..
            }) if self.forwarded() => format!("Proxy-Authorization: {auth}\r\n"),
            _ => String::new(),
        }
    }

    /// Where the socket connects: the proxy, or the target.
    fn first_hop(&self) -> (&str, u16) {
        match &self.proxy {
            Some(p) => (&p.host, p.port),
            None => (&self.target.host, self.target.port),
        }
    }
}

/// Why a connection could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The name (of the target or the proxy) did not resolve.
    Resolve(String),
    /// No address accepted the connection.
    Connect(String),
    /// The proxy refused or broke the tunnel.
    Proxy(String),
    /// Setting up TLS or watching a source failed.
    Setup(String),
}

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
    Tunneling {
        socket: TcpStream,
        sent: usize,
        reply: Vec<u8>,
    },
    Done,
}

/// One connection being opened; readiness of its sources is reported on its slot.
pub struct Connector {
    route: Route,
    tls: Option<Arc<rustls::ClientConfig>>,
    phase: Phase,
    tunnel_request: Vec<u8>,
}

impl Connector {
    pub fn start(
        route: &Route,
        tls: Option<Arc<rustls::ClientConfig>>,
        slot: &Slot,
    ) -> Result<Connector, Failure> {
        let tunnel_request = match &route.proxy {
            Some(p) if route.target.tls => {
                let at = route.target.authority_with_port();
                let auth = p
                    .auth
                    .as_ref()
                    .map_or(String::new(), |a| format!("Proxy-Authorization: {a}\r\n"));
                format!("CONNECT {at} HTTP/1.1\r\nHost: {at}\r\n{auth}\r\n").into_bytes()
            }
            _ => Vec::new(),
        };
        let mut c = Connector {
            route: route.clone(),
            tls,
            phase: Phase::Done,
            tunnel_request,
        };
        let (host, port) = c.route.first_hop();
        if let Ok(ip) = host.parse::<IpAddr>() {
            c.connect(slot, vec![SocketAddr::new(ip, port)], 0)?;
        } else {
            let what = host.to_string();
            let mut rx = spawn_resolver(host, port)
                .map_err(|e| Failure::Resolve(format!("cannot resolve {what:?}: {e}")))?;
            slot.register(&mut rx, Interest::READABLE)
                .map_err(|e| Failure::Setup(format!("cannot watch name resolution: {e}")))?;
            c.phase = Phase::Resolving {
                rx,
                text: Vec::new(),
            };
        }
        Ok(c)
    }

    /// Still resolving or connecting (for timeout messages).
    pub fn connecting(&self) -> bool {
        matches!(
            self.phase,
            Phase::Resolving { .. } | Phase::Connecting { .. }
        )
    }

    fn connect(&mut self, slot: &Slot, addrs: Vec<SocketAddr>, from: usize) -> Result<(), Failure> {
        let mut last = String::from("no address");
        for (i, addr) in addrs.iter().enumerate().skip(from) {
            match TcpStream::connect(*addr) {
                Ok(mut socket) => {
                    if let Err(e) =
                        slot.register(&mut socket, Interest::READABLE | Interest::WRITABLE)
                    {
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
        Err(self.connect_failure(&last))
    }

    fn connect_failure(&self, why: &str) -> Failure {
        match &self.route.proxy {
            Some(p) => Failure::Connect(format!(
                "cannot connect to the proxy {}:{}: {why}",
                p.host, p.port
            )),
            None => Failure::Connect(why.to_string()),
        }
    }

    /// Stop and release every source.
    pub fn release(&mut self, slot: &Slot) {
        match &mut self.phase {
            Phase::Resolving { rx, .. } => {
                let _ = slot.deregister(rx);
            }
            Phase::Connecting { socket, .. } | Phase::Tunneling { socket, .. } => {
                let _ = slot.deregister(socket);
            }
            Phase::Done => {}
        }
        self.phase = Phase::Done;
    }

    /// Make all the progress possible now; `Some` once the connection is open (its socket
    /// stays registered on the slot).
    pub fn advance(&mut self, slot: &Slot) -> Result<Option<Transport>, Failure> {
        let result = self.step(slot);
        if result.is_err() {
            self.release(slot);
        }
        result
    }

    fn step(&mut self, slot: &Slot) -> Result<Option<Transport>, Failure> {
        loop {
            match &mut self.phase {
                Phase::Done => return Err(Failure::Setup("the connection was stopped".into())),
                Phase::Resolving { rx, text } => {
                    let mut buf = [0u8; 1024];
                    loop {
                        match rx.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) if text.len() < 64 * 1024 => text.extend_from_slice(&buf[..n]),
                            Ok(_) => {}
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                return Err(Failure::Resolve(format!(
                                    "name resolution failed: {e}"
                                )));
                            }
                        }
                    }
                    let text = String::from_utf8_lossy(text).into_owned();
                    let _ = slot.deregister(rx);
                    self.phase = Phase::Done;
                    let addrs: Vec<SocketAddr> = text
                        .lines()
                        .filter_map(|l| l.strip_prefix("addr ")?.parse().ok())
                        .collect();
                    if addrs.is_empty() {
                        let why = text
                            .lines()
                            .find_map(|l| l.strip_prefix("error "))
                            .unwrap_or("no addresses");
                        let (host, _) = self.route.first_hop();
                        return Err(Failure::Resolve(format!("cannot resolve {host:?}: {why}")));
                    }
                    self.connect(slot, addrs, 0)?;
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
                            Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(None),
                            Err(e) => Some(e.to_string()),
                        },
                    };
                    if let Some(why) = failed {
                        let _ = slot.deregister(socket);
                        let (addrs, next) = (std::mem::take(addrs), *next);
                        self.phase = Phase::Done;
                        if next < addrs.len() {
                            self.connect(slot, addrs, next)?;
                            continue;
                        }
                        return Err(self.connect_failure(&why));
                    }
                    let _ = socket.set_nodelay(true);
                    let Phase::Connecting { socket, .. } =
                        std::mem::replace(&mut self.phase, Phase::Done)
                    else {
                        unreachable!("matched above")
                    };
                    if self.tunnel_request.is_empty() {
                        return self.open(socket).map(Some);
                    }
                    self.phase = Phase::Tunneling {
                        socket,
                        sent: 0,
                        reply: Vec::new(),
                    };
                }
                Phase::Tunneling {
                    socket,
                    sent,
                    reply,
                } => {
                    while *sent < self.tunnel_request.len() {
                        match socket.write(&self.tunnel_request[*sent..]) {
                            Ok(0) => return Err(Failure::Proxy("the proxy closed".into())),
                            Ok(n) => *sent += n,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(Failure::Proxy(format!("writing to it: {e}"))),
                        }
                    }
                    // Byte by byte up to the blank line: nothing after the proxy's answer may be
                    // taken from the socket, it belongs to TLS.
                    let mut byte = [0u8; 1];
                    while !reply.ends_with(b"\r\n\r\n") {
                        match socket.read(&mut byte) {
                            Ok(0) => {
                                return Err(Failure::Proxy(
                                    "the proxy closed the connection instead of answering".into(),
                                ));
                            }
                            Ok(_) if reply.len() >= TUNNEL_REPLY_MAX => {
                                return Err(Failure::Proxy("its answer is too long".into()));
                            }
                            Ok(_) => reply.push(byte[0]),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(Failure::Proxy(format!("reading from it: {e}"))),
                        }
                    }
                    let head = http::parse_head(reply)
                        .map_err(Failure::Proxy)?
                        .ok_or_else(|| Failure::Proxy("a malformed answer".into()))?;
                    if !(200..300).contains(&head.status) {
                        return Err(Failure::Proxy(format!(
                            "it refused the tunnel: {} {}",
                            head.status, head.reason
                        )));
                    }
                    let Phase::Tunneling { socket, .. } =
                        std::mem::replace(&mut self.phase, Phase::Done)
                    else {
                        unreachable!("matched above")
                    };
                    return self.open(socket).map(Some);
                }
            }
        }
    }

    fn open(&self, socket: TcpStream) -> Result<Transport, Failure> {
        let tls = self
            .tls
            .clone()
            .map(|c| (c, self.route.target.host.as_str()));
        Transport::new(socket, tls).map_err(Failure::Setup)
    }
}

/// Resolve `host` on a helper thread; its answer arrives on the returned socket as lines
/// `addr A` or `error E`, then EOF.
fn spawn_resolver(host: &str, port: u16) -> io::Result<UnixStream> {
    let (tx, rx) = std::os::unix::net::UnixStream::pair()?;
    rx.set_nonblocking(true)?;
    let host = host.to_string();
    std::thread::Builder::new()
        .name("tui-gateway-resolve".into())
        .spawn(move || {
            let mut tx = tx;
            let answer = match (host.as_str(), port).to_socket_addrs() {
                Ok(addrs) => addrs.map(|a| format!("addr {a}\n")).collect::<String>(),
                Err(e) => format!("error {e}\n"),
            };
            let _ = tx.write_all(answer.as_bytes());
        })?;
    Ok(UnixStream::from_std(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn the_proxy_is_chosen_by_scheme_and_no_proxy() {
        let vars = [
            ("HTTPS_PROXY", "http://alice:s%40cret@proxy.corp:3128"),
            ("http_proxy", "proxy.corp:8080"),
            ("NO_PROXY", "localhost, .internal,10.0.0.7,api.local:9000"),
        ];
        let p = Proxy::choose(&url("https://api.openai.com/v1"), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!((p.host.as_str(), p.port), ("proxy.corp", 3128));
        assert_eq!(p.auth.as_deref(), Some("Basic YWxpY2U6c0BjcmV0"));
        let p = Proxy::choose(&url("http://models.example/v1"), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!((p.port, p.auth), (8080, None));
        for direct in [
            "http://localhost:11434/v1",
            "https://llm.internal/v1",
            "https://internal/v1",
            "http://10.0.0.7/v1",
            "http://api.local:9000/v1",
        ] {
            assert_eq!(
                Proxy::choose(&url(direct), env(&vars)),
                Ok(None),
                "{direct}"
            );
        }
        // Another port of a NO_PROXY host:port entry goes through the proxy.
        assert!(
            Proxy::choose(&url("http://api.local:9001/v1"), env(&vars))
                .unwrap()
                .is_some()
        );
        assert_eq!(
            Proxy::choose(
                &url("https://x/v1"),
                env(&[("NO_PROXY", "*"), ("ALL_PROXY", "p:1")])
            ),
            Ok(None)
        );
        assert_eq!(Proxy::choose(&url("https://x/v1"), env(&[])), Ok(None));
    }

    #[test]
    fn only_http_proxies_and_no_password_in_messages() {
        let e = Proxy::choose(
            &url("https://x/v1"),
            env(&[("https_proxy", "socks5://bob:hunter2@p:1080")]),
        )
        .unwrap_err();
        assert!(e.contains("only http://") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn plain_http_through_a_proxy_uses_the_absolute_form() {
        let proxy = Proxy::parse("http://u:p@proxy:3128").unwrap();
        let r = Route::new(url("http://10.1.2.3:8000/v1?k=v"), Some(proxy.clone()));
        assert_eq!(
            r.request_target("/chat/completions"),
            "http://10.1.2.3:8000/v1/chat/completions?k=v"
        );
        assert_eq!(r.request_headers(), "Proxy-Authorization: Basic dTpw\r\n");
        // https tunnels: the request inside the tunnel is the ordinary one.
        let r = Route::new(url("https://api.example/v1"), Some(proxy));
        assert_eq!(r.request_target("/models"), "/v1/models");
        assert_eq!(r.request_headers(), "");
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(base64(b""), "");
    }
}
