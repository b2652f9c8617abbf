//! A streamable HTTP MCP server over rustls, run in the test process: enough of the
//! transport for `initialize`, `tools/list` and `tools/call` (JSON answers, `202` for
//! notifications, `405` to the listening GET), one thread per connection; and the
//! certificates it and the gateway use, made at test time with rcgen.
#![allow(dead_code)]

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A certificate and its key, also written as PEM files (`<name>.pem`, `<name>.key`).
pub struct Identity {
    pub cert: CertificateDer<'static>,
    key: KeyPair,
    pub cert_pem: PathBuf,
    pub key_pem: PathBuf,
}

impl Identity {
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivatePkcs8KeyDer::from(self.key.serialize_der()).into()
    }

    /// A PEM file holding the certificate and then the key.
    pub fn combined_pem(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.pem"));
        let text = format!(
            "{}{}",
            std::fs::read_to_string(&self.cert_pem).unwrap(),
            self.key.serialize_pem()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    fn write(cert: rcgen::Certificate, key: KeyPair, dir: &Path, name: &str) -> Identity {
        let (cert_pem, key_pem) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert_pem, cert.pem()).unwrap();
        std::fs::write(&key_pem, key.serialize_pem()).unwrap();
        Identity {
            cert: cert.der().clone(),
            key,
            cert_pem,
            key_pem,
        }
    }

    /// A self-signed server certificate for 127.0.0.1 and localhost.
    pub fn self_signed(dir: &Path, name: &str) -> Identity {
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Identity::write(cert, key, dir, name)
    }
}

/// A certificate authority issuing client certificates.
pub struct Authority {
    pub identity: Identity,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    pub fn new(dir: &Path, name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let copy = KeyPair::from_pem(&key.serialize_pem()).unwrap();
        let identity = Identity::write(cert, copy, dir, name);
        Authority {
            identity,
            issuer: Issuer::new(params, key),
        }
    }

    /// A client certificate named `cn` signed by this authority.
    pub fn client(&self, dir: &Path, cn: &str) -> Identity {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Identity::write(cert, key, dir, cn)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's TLS: its certificate, and when `clients` is given, a client certificate
/// signed by that authority is required.
pub fn server_config(id: &Identity, clients: Option<&Authority>) -> Arc<rustls::ServerConfig> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.identity.cert.clone()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots.into(),
                provider(),
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    Arc::new(
        builder
            .with_single_cert(vec![id.cert.clone()], id.key_der())
            .unwrap(),
    )
}

/// The running server; stopped on drop.
pub struct TlsServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    /// What each connection came to: the method it carried, or why its handshake failed.
    log: Arc<Mutex<Vec<String>>>,
}

impl TlsServer {
    pub fn start(config: Arc<rustls::ServerConfig>) -> TlsServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (stop2, log2) = (stop.clone(), log.clone());
        let accept = std::thread::spawn(move || {
            for socket in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(socket) = socket else { continue };
                let (config, log) = (config.clone(), log2.clone());
                std::thread::spawn(move || serve(socket, config, &log));
            }
        });
        TlsServer {
            port,
            stop,
            accept: Some(accept),
            log,
        }
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// One connection: the handshake, one request, its answer, the close.
fn serve(socket: TcpStream, config: Arc<rustls::ServerConfig>, log: &Mutex<Vec<String>>) {
    // A bound, so a client that stalls does not hold the thread forever.
    let _ = socket.set_read_timeout(Some(Duration::from_secs(30)));
    let conn = rustls::ServerConnection::new(config).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, socket);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let (method, body) = loop {
        match tls.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => {
                log.lock().unwrap().push(format!("refused: {e}"));
                return;
            }
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(len)) = req.parse(&buf) else {
            continue;
        };
        let length = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
            .unwrap_or(0usize);
        if buf.len() >= len + length {
            break (
                req.method.unwrap_or("").to_string(),
                buf[len..len + length].to_vec(),
            );
        }
    };
    let client = match tls.conn.peer_certificates() {
        Some(_) => "a client certificate",
        None => "no client certificate",
    };
    let (status, answer) = answer(&method, &body, client);
    log.lock()
        .unwrap()
        .push(format!("{method} {}", answer["method"]));
    let body = answer["body"].to_string();
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nMcp-Session-Id: tls-1\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        if status.starts_with("200") {
            body.len()
        } else {
            0
        }
    );
    let _ = tls.write_all(head.as_bytes());
    if status.starts_with("200") {
        let _ = tls.write_all(body.as_bytes());
    }
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// The status line and `{method, body}` of the answer to `method` with `body`.
fn answer(http: &str, body: &[u8], client: &str) -> (&'static str, Value) {
    if http == "GET" {
        return ("405 Method Not Allowed", json!({"method": "GET"}));
    }
    if http != "POST" {
        return ("200 OK", json!({"method": http, "body": {}}));
    }
    let msg: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let method = msg["method"].clone();
    if msg.get("id").is_none() {
        return ("202 Accepted", json!({"method": method}));
    }
    let result = match method.as_str().unwrap_or("") {
        "initialize" => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tls-test", "version": "1"}
        }),
        "tools/list" => json!({"tools": [{
            "name": "whoami",
            "description": "says how the client connected",
            "inputSchema": {"type": "object", "properties": {}}
        }]}),
        "tools/call" => {
            json!({"content": [{"type": "text", "text": format!("over TLS with {client}")}]})
        }
        _ => {
            let error = json!({"code": -32601, "message": "no such method"});
            let reply = json!({"jsonrpc": "2.0", "id": msg["id"], "error": error});
            return ("200 OK", json!({"method": method, "body": reply}));
        }
    };
    let reply = json!({"jsonrpc": "2.0", "id": msg["id"], "result": result});
    ("200 OK", json!({"method": method, "body": reply}))
}
