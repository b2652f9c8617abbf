//! The small HTTP/1.1 client pieces the streaming provider needs, all sans-IO or non-blocking:
//! URL parsing, a plain-or-TLS transport over a mio socket (rustls driven by the loop), the
//! response head (httparse), and chunked transfer decoding.

use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::net::TcpStream;

/// `http[s]://host[:port][/path][?query]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path prefix without a trailing `/` (may be empty).
    pub path: String,
    /// `?…` kept for every request (Azure-style `?api-version=…`), or empty.
    pub query: String,
}

impl Url {
    pub fn parse(text: &str) -> Result<Url, String> {
        let text = text.trim();
        let (tls, rest) = if let Some(r) = text.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = text.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!(
                "base URL {text:?} must start with http:// or https://"
            ));
        };
        // A fragment is never sent; the query goes after each endpoint's path.
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let (rest, query) = match rest.find('?') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6
                .find(']')
                .ok_or_else(|| format!("bad IPv6 address in {text:?}"))?;
            let port = match &v6[end + 1..] {
                "" => default_port,
                p => p
                    .strip_prefix(':')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| format!("bad port in {text:?}"))?,
            };
            (v6[..end].to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse().map_err(|_| format!("bad port in {text:?}"))?,
                ),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(format!("no host in {text:?}"));
        }
        Ok(Url {
            tls,
            host,
            port,
            path: path.trim_end_matches('/').to_string(),
            query: if query == "?" {
                String::new()
            } else {
                query.to_string()
            },
        })
    }

    /// The request target of `endpoint` (`/chat/completions`) under this base URL.
    pub fn target(&self, endpoint: &str) -> String {
        format!("{}{endpoint}{}", self.path, self.query)
    }

    /// `host:port`, the port always written (a `CONNECT` target).
    pub fn authority_with_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// `Host:` header value.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.tls, self.port) {
            (true, 443) | (false, 80) => host,
            _ => format!("{host}:{}", self.port),
        }
    }
}

/// A TLS client configuration (built once per provider) trusting [`default_roots`].
pub fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let config = tls_builder()?
        .with_root_certificates(default_roots())
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The bundled webpki roots and the system's store (`SSL_CERT_FILE`/`SSL_CERT_DIR` when set),
/// so a corporate CA or a local server's own certificate can be trusted the usual way.
pub fn default_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    // Certificates the system store holds but rustls cannot parse are skipped.
    let _ = roots.add_parsable_certificates(native_certs());
    roots
}

/// The system's certificates: those of `SSL_CERT_FILE` and the files of each `SSL_CERT_DIR`
/// folder when either is set (read here without blocking, as `rustls-native-certs` would read
/// them), else the platform's store.
fn native_certs() -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    /// A certificate file larger than this is not read (a system bundle is a few hundred KiB).
    const CERT_FILE_MAX: u64 = 16 << 20;
    let file = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let dirs: Vec<std::path::PathBuf> = std::env::var_os("SSL_CERT_DIR")
        .map(|d| {
            std::env::split_paths(&d)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if file.is_none() && dirs.is_empty() {
        #[allow(
            clippy::disallowed_methods,
            reason = "without SSL_CERT_FILE / SSL_CERT_DIR it reads the system's own store only"
        )]
        return rustls_native_certs::load_native_certs().certs;
    }
    let listed = dirs.iter().flat_map(|d| {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
    });
    // Each file once, however many links name it (`openssl rehash` makes two per certificate).
    let mut seen = std::collections::HashSet::new();
    let mut certs: Vec<_> = file
        .into_iter()
        .chain(listed)
        .filter(|p| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p).is_ok_and(|m| seen.insert((m.dev(), m.ino())))
        })
        .filter_map(|p| {
            crate::util::read_regular_bytes(&p, CERT_FILE_MAX)
                .ok()
                .flatten()
        })
        .flat_map(|pem| {
            CertificateDer::pem_slice_iter(&pem)
                .filter_map(Result::ok)
                .collect::<Vec<_>>()
        })
        .collect();
    certs.sort_unstable_by(|a, b| a.as_ref().cmp(b.as_ref()));
    certs.dedup();
    certs
}

/// A client configuration on ring with the safe protocol versions, to choose how the
/// server's certificate is checked.
pub fn tls_builder()
-> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, String> {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))
}

/// A connected socket, with or without TLS on top.
pub struct Transport {
    pub socket: TcpStream,
    tls: Option<rustls::ClientConnection>,
}

impl Transport {
    pub fn new(
        socket: TcpStream,
        tls: Option<(Arc<rustls::ClientConfig>, &str)>,
    ) -> Result<Self, String> {
        let tls = match tls {
            None => None,
            Some((config, host)) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| format!("TLS: bad server name {host:?}: {e}"))?;
                let mut conn = rustls::ClientConnection::new(config, name)
                    .map_err(|e| format!("TLS setup failed: {e}"))?;
                // The request (bounded by the prompt limit) is handed over whole, before the
                // handshake is done; the loop pushes it out as the socket allows.
                conn.set_buffer_limit(None);
                Some(conn)
            }
        };
        Ok(Transport { socket, tls })
    }

    /// Queue (TLS) or write (plain) request bytes; returns how many were taken.
    pub fn write_plain(&mut self, data: &[u8]) -> io::Result<usize> {
        match &mut self.tls {
            Some(tls) => tls.writer().write(data),
            None => self.socket.write(data),
        }
    }

    /// Push pending TLS records to the socket. True when nothing is left to write.
    pub fn flush_tls(&mut self) -> io::Result<bool> {
        match &mut self.tls {
            Some(tls) => push_records(tls, &mut self.socket),
            None => Ok(true),
        }
    }

    /// Read decrypted bytes. `Ok(0)` is the end of the stream; `WouldBlock` means wait.
    pub fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = &mut self.tls else {
            return self.socket.read(buf);
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // No plaintext buffered: pull records from the socket.
            match tls.read_tls(&mut self.socket) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed",
                    ));
                }
                Ok(_) => {
                    tls.process_new_packets().map_err(|e| {
                        io::Error::new(io::ErrorKind::InvalidData, TlsRefused::new(&e))
                    })?;
                    // Handshake replies must go out for the stream to progress.
                    push_records(tls, &mut self.socket)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A TLS handshake still under way.
    pub fn handshaking(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.is_handshaking())
    }
}

/// A TLS session that failed (the peer's certificate, an alert it sent), as the `io::Error`
/// reading it carries: [`tls_refusal`] tells it from other read errors.
#[derive(Debug)]
pub struct TlsRefused(String);

impl TlsRefused {
    fn new(e: &rustls::Error) -> TlsRefused {
        TlsRefused(tls_words(e))
    }
}

impl std::fmt::Display for TlsRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TLS: {}", self.0)
    }
}

impl std::error::Error for TlsRefused {}

/// The words of a TLS failure, when `e` is one.
pub fn tls_refusal(e: &io::Error) -> Option<String> {
    let refused = e.get_ref()?.downcast_ref::<TlsRefused>()?;
    Some(refused.to_string())
}

/// What a TLS failure means for the one who configured it (rustls' own name in brackets).
fn tls_words(e: &rustls::Error) -> String {
    use rustls::AlertDescription as Alert;
    use rustls::CertificateError as Cert;
    match e {
        rustls::Error::AlertReceived(Alert::CertificateRequired) => {
            "the server requires a client certificate".into()
        }
        rustls::Error::AlertReceived(
            a @ (Alert::UnknownCA
            | Alert::BadCertificate
            | Alert::CertificateUnknown
            | Alert::AccessDenied),
        ) => format!("the server refused our client certificate ({a:?})"),
        rustls::Error::InvalidCertificate(c) => {
            let what = match c {
                Cert::UnknownIssuer => "is not issued by a trusted CA",
                Cert::BadSignature => "is not signed by a trusted CA",
                Cert::NotValidForName | Cert::NotValidForNameContext { .. } => {
                    "is not for this host name"
                }
                Cert::Expired | Cert::ExpiredContext { .. } => "has expired",
                Cert::NotValidYet | Cert::NotValidYetContext { .. } => "is not valid yet",
                Cert::Revoked => "is revoked",
                _ => "is refused",
            };
            let name = format!("{c:?}");
            let name = name.split([' ', '{', '(']).next().unwrap_or_default();
            format!("the server's certificate {what} ({name})")
        }
        other => other.to_string(),
    }
}

/// Write pending TLS records; true when none are left.
fn push_records(tls: &mut rustls::ClientConnection, socket: &mut TcpStream) -> io::Result<bool> {
    while tls.wants_write() {
        match tls.write_tls(socket) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The parsed head of a response.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub status: u16,
    pub reason: String,
    pub chunked: bool,
    pub content_length: Option<u64>,
    pub retry_after: Option<f64>,
    /// The server will close the connection after this response.
    pub close: bool,
    /// Bytes of the head, to strip from the buffer.
    pub len: usize,
}

/// Parse a response head from the start of `buf`; `Ok(None)` until it is complete.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    parse_head_seeing(buf, |_, _| {})
}

/// [`parse_head`], showing every header (name, value) of a complete head to `seen`.
fn parse_head_seeing(buf: &[u8], mut seen: impl FnMut(&str, &str)) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > 64 * 1024 {
                return Err("response head larger than 64 KiB".into());
            }
            return Ok(None);
        }
        Err(e) => return Err(format!("malformed HTTP response: {e}")),
    };
    let mut head = Head {
        status: resp.code.unwrap_or(0),
        reason: resp.reason.unwrap_or("").to_string(),
        chunked: false,
        content_length: None,
        retry_after: None,
        close: resp.version == Some(0),
        len,
    };
    for h in resp.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        seen(h.name, &value);
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value.to_ascii_lowercase().contains("chunked");
        } else if h.name.eq_ignore_ascii_case("content-length") {
            head.content_length = value.trim().parse().ok();
        } else if h.name.eq_ignore_ascii_case("connection") {
            head.close = value.to_ascii_lowercase().contains("close");
        } else if h.name.eq_ignore_ascii_case("retry-after") {
            head.retry_after = value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0);
        }
    }
    Ok(Some(head))
}

/// A response read as its bytes arrive: the head, then the body by its framing (chunked,
/// `Content-Length`, or up to the close); the caller bounds what it keeps of the body.
#[derive(Debug, Default)]
pub struct Response {
    buf: Vec<u8>,
    head: Option<Head>,
    /// `Content-Type`'s media type, lower-case, without parameters (empty when absent).
    pub content_type: String,
    /// `Mcp-Session-Id` (the MCP streamable HTTP session).
    pub mcp_session: Option<String>,
    chunked: Option<Chunked>,
    body_read: u64,
    complete: bool,
}

impl Response {
    /// Feed received bytes; body bytes are appended to `body`. True once the body is complete.
    pub fn feed(&mut self, input: &[u8], body: &mut Vec<u8>) -> Result<bool, String> {
        let input = if self.head.is_none() {
            self.buf.extend_from_slice(input);
            let (mut content_type, mut mcp_session) = (String::new(), None);
            let seen = |name: &str, value: &str| {
                if name.eq_ignore_ascii_case("content-type") {
                    let media = value.split(';').next().unwrap_or("");
                    content_type = media.trim().to_ascii_lowercase();
                } else if name.eq_ignore_ascii_case("mcp-session-id") {
                    mcp_session = Some(value.trim().to_string());
                }
            };
            let Some(h) = parse_head_seeing(&self.buf, seen)? else {
                return Ok(false);
            };
            self.content_type = content_type;
            self.mcp_session = mcp_session;
            self.buf.drain(..h.len);
            self.chunked = h.chunked.then(Chunked::default);
            self.complete = !h.chunked && h.content_length == Some(0);
            self.head = Some(h);
            std::mem::take(&mut self.buf)
        } else {
            input.to_vec()
        };
        if self.complete {
            return Ok(true);
        }
        let before = body.len();
        self.complete = match &mut self.chunked {
            Some(dec) => dec.feed(&input, body)?,
            None => {
                let head = self.head.as_ref().ok_or("no response head")?;
                let take = match head.content_length {
                    Some(len) => (len - self.body_read).min(input.len() as u64) as usize,
                    None => input.len(),
                };
                body.extend_from_slice(&input[..take]);
                head.content_length
                    .is_some_and(|len| self.body_read + take as u64 >= len)
            }
        };
        self.body_read += (body.len() - before) as u64;
        Ok(self.complete)
    }

    /// The body ended where its length or its last chunk says (not at a close).
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The head, once it is in.
    pub fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    /// The connection closed: whether the body was whole (a body without a length ends there).
    pub fn closed(&self) -> Result<(), String> {
        match &self.head {
            None => Err("the server closed the connection without answering".into()),
            Some(h) if !self.complete && (h.chunked || h.content_length.is_some()) => {
                Err("the server closed the connection in the middle of the answer".into())
            }
            Some(_) => Ok(()),
        }
    }
}

/// Chunked transfer decoding, fed as bytes arrive.
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

impl Chunked {
    /// Decode `input` into `out`; true once the final chunk and trailer are through.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<bool, String> {
        while !input.is_empty() {
            match self.state {
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let Some(nl) = input.iter().position(|&b| b == b'\n') else {
                        self.line.extend_from_slice(input);
                        if self.line.len() > 4096 {
                            return Err("malformed chunked encoding: line too long".into());
                        }
                        return Ok(false);
                    };
                    self.line.extend_from_slice(&input[..nl]);
                    input = &input[nl + 1..];
                    let line = String::from_utf8_lossy(&self.line).trim().to_string();
                    self.line.clear();
                    self.state = match self.state {
                        ChunkState::Size => {
                            let hex = line.split(';').next().unwrap_or("").trim();
                            let size = u64::from_str_radix(hex, 16)
                                .map_err(|_| format!("malformed chunked encoding: size {hex:?}"))?;
                            if size == 0 {
                                ChunkState::Trailer
                            } else {
                                ChunkState::Data(size)
                            }
                        }
                        ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
                        ChunkState::DataEnd => {
                            return Err(
                                "malformed chunked encoding: missing CRLF after data".into()
                            );
                        }
                        _ if line.is_empty() => ChunkState::Done,
                        _ => ChunkState::Trailer,
                    };
                }
                ChunkState::Data(left) => {
                    let take = (left as usize).min(input.len());
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::Done => return Ok(true),
            }
        }
        Ok(self.state == ChunkState::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("https://api.openai.com/v1/").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (true, "api.openai.com", 443, "/v1")
        );
        assert_eq!(u.authority(), "api.openai.com");
        let u = Url::parse("http://127.0.0.1:8080/v1").unwrap();
        assert_eq!(
            (u.port, u.authority()),
            (8080, "127.0.0.1:8080".to_string())
        );
        let u = Url::parse("http://[::1]:11434").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 11434, "")
        );
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://h:notaport/").is_err());
        assert!(Url::parse("http:///v1").is_err());
    }

    #[test]
    fn a_query_follows_every_endpoint() {
        let u =
            Url::parse("https://x.openai.azure.com/openai/deployments/d/?api-version=2024-06-01")
                .unwrap();
        assert_eq!(u.host, "x.openai.azure.com");
        assert_eq!(
            u.target("/chat/completions"),
            "/openai/deployments/d/chat/completions?api-version=2024-06-01"
        );
        let u = Url::parse("http://127.0.0.1:9?k=v#frag").unwrap();
        assert_eq!(
            (u.port, u.target("/models")),
            (9, "/models?k=v".to_string())
        );
        assert_eq!(
            Url::parse("http://h/v1?").unwrap().target("/models"),
            "/v1/models"
        );
    }

    #[test]
    fn heads_parse_when_complete() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Ty").unwrap(), None);
        let h = parse_head(
            b"HTTP/1.1 429 Too Many\r\nRetry-After: 2\r\nTransfer-Encoding: chunked\r\n\r\nrest",
        )
        .unwrap()
        .unwrap();
        assert_eq!((h.status, h.chunked, h.retry_after), (429, true, Some(2.0)));
        assert_eq!(h.len, 69);
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn responses_are_read_by_their_framing_across_splits() {
        let whole = b"HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream; charset=utf-8\r\n\
            Mcp-Session-Id: s1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        for split in 1..whole.len() {
            let mut r = Response::default();
            let mut body = Vec::new();
            let first = r.feed(&whole[..split], &mut body).unwrap();
            let done = r.feed(&whole[split..], &mut body).unwrap();
            assert!(done && !first, "split {split}");
            assert_eq!(body, b"abc");
            assert_eq!(r.content_type, "text/event-stream");
            assert_eq!(r.mcp_session.as_deref(), Some("s1"));
        }
        let mut r = Response::default();
        let mut body = Vec::new();
        assert!(
            r.feed(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabcd",
                &mut body
            )
            .unwrap()
        );
        assert_eq!(body, b"ab", "bytes past the length are not the body");
        let mut r = Response::default();
        r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab", &mut body)
            .unwrap();
        assert!(r.closed().is_err());
        let mut r = Response::default();
        r.feed(b"HTTP/1.1 200 OK\r\n\r\nuntil the close", &mut body)
            .unwrap();
        assert!(r.closed().is_ok());
        assert!(Response::default().closed().is_err());
    }

    #[test]
    fn chunked_bodies_decode_across_arbitrary_splits() {
        let body =
            b"4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nX-T: y\r\n\r\n";
        for split in 1..body.len() {
            let mut d = Chunked::default();
            let mut out = Vec::new();
            let first = d.feed(&body[..split], &mut out).unwrap();
            let done = d.feed(&body[split..], &mut out).unwrap();
            assert!(done || first, "split {split}");
            assert_eq!(out, b"Wikipedia in \r\n\r\nchunks.", "split {split}");
        }
        assert!(Chunked::default().feed(b"zz\r\n", &mut Vec::new()).is_err());
    }
}
