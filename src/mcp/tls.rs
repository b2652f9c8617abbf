//! The TLS client configuration of one `url` MCP server from its `ssl_verify` and
//! `client_cert` (`config::Tls`): the default roots, no check at all (`ssl_verify: false`,
//! insecure), or a CA bundle as the only roots; a client certificate and key for mutual TLS.
//! Built by `http::open`, once per connection setup of the server; the files are read then,
//! bounded, and a missing file or one without the PEM it needs is a clear error.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::config::{Tls, Verify};
use crate::model::http::{default_roots, tls_builder, tls_config};

/// The largest PEM file read (a system CA bundle is a few hundred KiB).
const PEM_MAX: u64 = 4 << 20;

/// The client configuration `tls` asks for.
pub fn client_config(tls: &Tls) -> Result<Arc<rustls::ClientConfig>, String> {
    if *tls == Tls::default() {
        return tls_config();
    }
    let builder = tls_builder()?;
    let builder = match &tls.verify {
        Verify::Roots => builder.with_root_certificates(default_roots()),
        Verify::Bundle(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(path, "ssl_verify")? {
                roots
                    .add(cert)
                    .map_err(|e| format!("ssl_verify: a certificate in {path:?}: {e}"))?;
            }
            builder.with_root_certificates(roots)
        }
        Verify::Off => {
            let algorithms =
                rustls::crypto::ring::default_provider().signature_verification_algorithms;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(algorithms)))
        }
    };
    let config = match &tls.client_cert {
        None => builder.with_no_client_auth(),
        Some(c) => {
            let chain = certificates(&c.cert, "client_cert")?;
            let key = private_key(&c.key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client_cert: {e}"))?
        }
    };
    Ok(Arc::new(config))
}

/// What the files `tls` names hold now, as one hash (their text, or why it cannot be read):
/// a reload restarts a server whose files changed though its keys did not.
pub fn files_stamp(tls: &Tls) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut paths: Vec<&Path> = Vec::new();
    if let Verify::Bundle(path) = &tls.verify {
        paths.push(path);
    }
    if let Some(c) = &tls.client_cert {
        paths.extend([c.cert.as_path(), c.key.as_path()]);
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for path in paths {
        read(path, "").hash(&mut hasher);
    }
    hasher.finish()
}

/// The PEM text of `path` (key `label`), at most [`PEM_MAX`] bytes, read without blocking (a
/// FIFO or a device there is refused).
fn read(path: &Path, label: &str) -> Result<Vec<u8>, String> {
    match crate::util::read_regular_bytes(path, PEM_MAX) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(format!("{label}: cannot read {path:?}: no such file")),
        Err(e) => Err(format!("{label}: cannot read {path:?}: {e}")),
    }
}

/// The certificates of the PEM file `path`; none is an error.
fn certificates(path: &Path, label: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(path, label)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{label}: {path:?} is not readable PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{label}: {path:?} holds no PEM certificate"));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) of the PEM file `path`.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let label = "client_key";
    let bytes = read(path, label)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        if memchr::memmem::find(&bytes, b"ENCRYPTED").is_some() {
            format!("{label}: the key in {path:?} is encrypted; give it decrypted")
        } else if matches!(e, rustls::pki_types::pem::Error::NoItemsFound) {
            format!("{label}: {path:?} holds no PEM private key")
        } else {
            format!("{label}: {path:?} is not readable PEM: {e}")
        }
    })
}

/// `ssl_verify: false`: INSECURE, any certificate of any name is accepted (the handshake's
/// signatures are still checked, so the peer holds the key of the certificate it sent).
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::config::ClientCert;
    use std::path::PathBuf;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tgw-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let d = dir("bad");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (pem, key) = (d.join("c.pem"), d.join("k.pem"));
        std::fs::write(&pem, cert.cert.pem()).unwrap();
        std::fs::write(&key, cert.signing_key.serialize_pem()).unwrap();
        std::fs::write(d.join("junk"), "not pem at all").unwrap();
        std::fs::write(
            d.join("enc"),
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        std::fs::write(d.join("broken"), "-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap();
        let bundle = |p: &str| Tls {
            verify: Verify::Bundle(d.join(p)),
            client_cert: None,
        };
        let pair = |c: &str, k: &str| Tls {
            verify: Verify::Roots,
            client_cert: Some(ClientCert {
                cert: d.join(c),
                key: d.join(k),
            }),
        };
        for (tls, says) in [
            (bundle("missing"), "ssl_verify: cannot read"),
            (bundle("junk"), "holds no PEM certificate"),
            (bundle("broken"), "is not readable PEM"),
            (pair("c.pem", "c.pem"), "holds no PEM private key"),
            (pair("junk", "k.pem"), "client_cert: "),
            (pair("c.pem", "enc"), "is encrypted"),
            (pair("c.pem", "missing"), "client_key: cannot read"),
        ] {
            let why = client_config(&tls).unwrap_err();
            assert!(why.contains(says), "{tls:?}: {why}");
        }
        assert!(client_config(&bundle("c.pem")).is_ok());
        assert!(client_config(&pair("c.pem", "k.pem")).is_ok());
        let _ = std::fs::remove_dir_all(&d);
    }
}
