//! One HTTP exchange on a worker thread, never on the loop (`vision_analyze`'s download and its
//! model call): blocking sockets with timeouts, the addresses a host resolves to checked before
//! connecting (so a name cannot lead to a private address the check refused), TLS with the
//! model client's roots, the answer read through the model client's response reader and
//! bounded in size. No proxy: a worker's exchange goes direct.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::http::{self, Response, Url};

/// What to send.
pub struct Exchange<'a> {
    pub method: &'a str,
    pub url: &'a Url,
    /// The request target (`/v1/chat/completions?x=1`).
    pub target: &'a str,
    pub headers: &'a [(String, String)],
    pub body: Option<&'a [u8]>,
    /// Largest body kept; a longer one is an error.
    pub answer_max: usize,
    /// The whole exchange, connection included.
    pub timeout: Duration,
    /// Whether an address may be connected to; `Err` says why not.
    pub address_ok: &'a dyn Fn(IpAddr) -> Result<(), String>,
}

/// What came back.
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    /// `Location`, for a redirect.
    pub location: Option<String>,
    pub body: Vec<u8>,
}

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// The addresses `host:port` resolves to, each allowed by `ok`; the first refusal when none is.
fn addresses(
    host: &str,
    port: u16,
    ok: &dyn Fn(IpAddr) -> Result<(), String>,
) -> Result<Vec<SocketAddr>, String> {
    let all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let mut refusal = None;
    let allowed: Vec<SocketAddr> = all
        .into_iter()
        .filter(|a| match ok(a.ip()) {
            Ok(()) => true,
            Err(why) => {
                refusal.get_or_insert(why);
                false
            }
        })
        .collect();
    match (allowed.is_empty(), refusal) {
        (false, _) => Ok(allowed),
        (true, Some(why)) => Err(why),
        (true, None) => Err(format!("{host} resolves to no address")),
    }
}

/// Run the exchange.
pub fn exchange(x: &Exchange<'_>) -> Result<Answer, String> {
    let deadline = Instant::now() + x.timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("no answer within {}s", x.timeout.as_secs()))
    };
    let host = x.url.host.trim_start_matches('[').trim_end_matches(']');
    let mut last_error = String::new();
    let mut socket = None;
    for addr in addresses(host, x.url.port, x.address_ok)? {
        match TcpStream::connect_timeout(&addr, left()?) {
            Ok(s) => {
                socket = Some(s);
                break;
            }
            Err(e) => last_error = format!("cannot connect to {addr}: {e}"),
        }
    }
    let socket = socket.ok_or(last_error)?;
    let mut stream: Box<dyn Stream> = if x.url.tls {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("TLS: bad server name {host:?}: {e}"))?;
        let conn = rustls::ClientConnection::new(http::tls_config()?, name)
            .map_err(|e| format!("TLS setup failed: {e}"))?;
        Box::new(rustls::StreamOwned::new(
            conn,
            socket.try_clone().map_err(|e| e.to_string())?,
        ))
    } else {
        Box::new(socket.try_clone().map_err(|e| e.to_string())?)
    };
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        x.method,
        x.target,
        x.url.authority(),
    );
    // Ours unless the caller names another (an OAuth endpoint's).
    if !x
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
    {
        head.push_str(&format!("User-Agent: tui-gateway/{}\r\n", crate::VERSION));
    }
    for (name, value) in x.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = x.body {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let io = |e: std::io::Error| format!("the exchange failed: {e}");
    socket.set_write_timeout(Some(left()?)).map_err(io)?;
    stream.write_all(head.as_bytes()).map_err(io)?;
    if let Some(body) = x.body {
        stream.write_all(body).map_err(io)?;
    }
    stream.flush().map_err(io)?;
    let mut response = Response::default();
    let mut body = Vec::new();
    let mut location = None;
    let mut chunk = [0u8; 16 * 1024];
    let mut head_bytes = Vec::new();
    loop {
        socket.set_read_timeout(Some(left()?)).map_err(io)?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            // A server closing without TLS's close_notify after a whole answer.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return Err(format!("no answer within {}s", x.timeout.as_secs()));
            }
            Err(e) => return Err(io(e)),
        };
        if n == 0 {
            response.closed()?;
            break;
        }
        if response.head().is_none() && head_bytes.len() < 64 * 1024 {
            head_bytes.extend_from_slice(&chunk[..n]);
        }
        if response.feed(&chunk[..n], &mut body)? {
            break;
        }
        if body.len() > x.answer_max {
            return Err(format!(
                "the answer is larger than {} KiB; refused",
                x.answer_max / 1024
            ));
        }
    }
    if body.len() > x.answer_max {
        return Err(format!(
            "the answer is larger than {} KiB; refused",
            x.answer_max / 1024
        ));
    }
    let status = response.head().map_or(0, |h| h.status);
    if (300..400).contains(&status) {
        location = header(&head_bytes, "location");
    }
    Ok(Answer {
        status,
        content_type: response.content_type.clone(),
        location,
        body,
    })
}

/// A header's value in a response head.
fn header(head: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let head = text.split("\r\n\r\n").next()?;
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}
