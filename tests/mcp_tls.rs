//! `ssl_verify` and `client_cert` of streamable HTTP MCP servers, against a rustls MCP server
//! run in the test (`tests/mcp/tls_server.rs`) with certificates made at test time: a
//! self-signed certificate refused by default (the server reported failed, no tools), taken
//! with `ssl_verify: false` or with its own PEM as `ssl_verify`, refused with another bundle
//! (even when the system store trusts it); a missing bundle and a wrong type reported; a server requiring a client certificate
//! refusing a client without one or with one of another authority, serving one with
//! `client_cert` (list and combined PEM).

use crate::common;
use crate::mcp_support;
use crate::procs;
use crate::tls_server;

use common::*;
use mcp_support::*;
use procs::*;
use serde_json::{Value, json};
use tls_server::*;

/// A gateway whose `mcp_servers` are `entries` (YAML lines under each name), all at `port`.
fn gateway(home: &TempHome, port: u16, entries: &[(&str, &str)], env: &[(&str, &str)]) -> Gateway {
    let mut yaml = String::from("mcp_servers:\n");
    for (name, keys) in entries {
        yaml.push_str(&format!(
            "  {name}:\n    url: https://127.0.0.1:{port}/mcp\n    connect_timeout: 10\n"
        ));
        for line in keys.lines() {
            yaml.push_str(&format!("    {line}\n"));
        }
    }
    std::fs::write(home.path.join("config.yaml"), yaml).unwrap();
    let mut b = Gateway::builder().home(&home.path);
    for (k, v) in env {
        b = b.env(k, v);
    }
    b.start()
}

/// The toolset names `tools.list` offers.
fn toolsets(g: &mut Gateway) -> Vec<String> {
    let r = g.call("tools.list", json!({}));
    r["toolsets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

/// Server `name` is reported failed with an error saying `says`; its tools are not offered.
fn assert_refused(g: &mut Gateway, name: &str, says: &str) {
    let status = wait_status(g, name, |s| s["status"] == "failed");
    let error = status["error"].as_str().unwrap_or("");
    assert!(error.contains(says), "{name}: {status}");
    assert_eq!(status["connected"], json!(false), "{status}");
    assert!(
        !toolsets(g).contains(&format!("mcp-{name}")),
        "{name}'s tools are offered"
    );
    // Said once, and not retried: trying again cannot help until the configuration changes.
    let said = g.stderr_with(&format!("MCP server '{name}' "), WAIT);
    let about: Vec<&str> = said
        .lines()
        .filter(|l| l.contains(&format!("MCP server '{name}' ")))
        .collect();
    let refused = |l: &&str| l.contains("cannot be used") && l.contains("/reload-mcp");
    assert!(!about.is_empty() && about.iter().all(refused), "{about:#?}");
}

/// Server `name` connects and its tool answers through a turn; the tool's text.
fn call_whoami(g: &mut Gateway, name: &str) -> String {
    let tools = wait_tools(g, name);
    assert_eq!(tools, [format!("mcp__{name}__whoami")]);
    let s = g.create_session(json!({}));
    let done = call_tool(g, &s.id, &format!("mcp__{name}__whoami"), json!({}));
    assert_eq!(tool_error(&done), "", "{done}");
    let stored: Value = stored_tool_result(g, &s.stored, &done);
    stored["result"].as_str().unwrap_or("").to_string()
}

#[test]
fn a_self_signed_server_is_refused_unless_ssl_verify_says_how_to_trust_it() {
    let home = TempHome::new("mcptls");
    let dir = &home.path;
    let server_id = Identity::self_signed(dir, "server");
    let other = Identity::self_signed(dir, "other");
    let server = TlsServer::start(server_config(&server_id, None));
    let bundle = format!("ssl_verify: {}", server_id.cert_pem.display());
    let wrong = format!("ssl_verify: {}", other.cert_pem.display());
    let missing = format!("ssl_verify: {}", dir.join("nope.pem").display());
    let mut g = gateway(
        &home,
        server.port,
        &[
            ("strict", ""),
            ("insecure", "ssl_verify: false"),
            ("pinned", &bundle),
            ("wrong", &wrong),
            ("missing", &missing),
            ("typo", "ssl_verify: 3"),
        ],
        &[],
    );
    assert_eq!(
        call_whoami(&mut g, "insecure"),
        "over TLS with no client certificate"
    );
    assert_eq!(
        call_whoami(&mut g, "pinned"),
        "over TLS with no client certificate"
    );
    assert_refused(&mut g, "strict", "certificate");
    assert_refused(&mut g, "wrong", "certificate");
    assert_refused(&mut g, "missing", "ssl_verify: cannot read");
    assert_refused(&mut g, "typo", "ssl_verify must be true, false or the path");
    // The refusals were the gateway's, in the handshake: the server saw them fail.
    assert!(
        poll_until(WAIT, || server
            .log()
            .iter()
            .any(|l| l.starts_with("refused"))),
        "{:?}",
        server.log()
    );
}

#[test]
fn a_server_requiring_a_client_certificate_serves_only_a_client_that_presents_one() {
    let home = TempHome::new("mcpmtls");
    let dir = &home.path;
    let server_id = Identity::self_signed(dir, "server");
    let other = Identity::self_signed(dir, "other");
    let clients = Authority::new(dir, "clients");
    let client = clients.client(dir, "gateway");
    let stranger = Authority::new(dir, "strangers").client(dir, "stranger");
    let server = TlsServer::start(server_config(&server_id, Some(&clients)));
    let pair = format!(
        "client_cert: [{}, {}]",
        client.cert_pem.display(),
        client.key_pem.display()
    );
    let combined = format!(
        "client_cert: {}",
        client.combined_pem(dir, "both").display()
    );
    let split = format!(
        "client_cert: {}\nclient_key: {}",
        stranger.cert_pem.display(),
        stranger.key_pem.display()
    );
    let only_bundle = format!("ssl_verify: {}\n{pair}", other.cert_pem.display());
    // The system store trusts the server, so `ssl_verify` may stay at its default here.
    let cert_file = server_id.cert_pem.to_str().unwrap();
    let mut g = gateway(
        &home,
        server.port,
        &[
            ("anonymous", ""),
            ("mtls", &pair),
            ("combined", &combined),
            ("stranger", &split),
            ("only_bundle", &only_bundle),
        ],
        &[("SSL_CERT_FILE", cert_file)],
    );
    assert_eq!(
        call_whoami(&mut g, "mtls"),
        "over TLS with a client certificate"
    );
    assert_eq!(
        call_whoami(&mut g, "combined"),
        "over TLS with a client certificate"
    );
    // Without a certificate, or with one the server's authority did not sign, the server
    // ends the handshake; the gateway reports it failed.
    assert_refused(&mut g, "anonymous", "TLS");
    assert_refused(&mut g, "stranger", "TLS");
    // A CA bundle is the only trust root: the system store that trusts the server is not used.
    assert_refused(&mut g, "only_bundle", "certificate");
    let refused_ours = |l: &String| l.starts_with("refused") && l.contains("certificate");
    assert!(
        poll_until(WAIT, || server.log().iter().any(refused_ours)),
        "{:?}",
        server.log()
    );
}

#[test]
fn a_reload_after_the_trusted_bundle_is_fixed_connects_the_refused_server() {
    let home = TempHome::new("mcptlsfix");
    let dir = &home.path;
    let server_id = Identity::self_signed(dir, "server");
    let other = Identity::self_signed(dir, "other");
    let server = TlsServer::start(server_config(&server_id, None));
    let bundle = dir.join("bundle.pem");
    std::fs::copy(&other.cert_pem, &bundle).unwrap();
    let pinned = format!("ssl_verify: {}", bundle.display());
    let mut g = gateway(
        &home,
        server.port,
        &[("pinned", &pinned), ("insecure", "ssl_verify: false")],
        &[],
    );
    wait_tools(&mut g, "insecure");
    assert_refused(&mut g, "pinned", "certificate");
    let s = g.create_session(json!({}));
    let reload = |g: &mut Gateway| {
        let r = g.call("reload.mcp", json!({"session_id": s.id, "confirm": true}));
        assert_eq!(r["status"], "reloaded", "{r}");
        r["changed"].clone()
    };
    // config.yaml is as it was; the file it names now holds the server's certificate.
    std::fs::copy(&server_id.cert_pem, &bundle).unwrap();
    assert_eq!(reload(&mut g), json!(["pinned"]));
    assert_eq!(
        call_whoami(&mut g, "pinned"),
        "over TLS with no client certificate"
    );
    // Nothing changed since: the reload leaves both servers alone.
    assert_eq!(reload(&mut g), json!([]));
    // The same file rewritten with other content is a change, though config.yaml is not.
    std::fs::copy(&other.cert_pem, &bundle).unwrap();
    assert_eq!(reload(&mut g), json!(["pinned"]));
    assert_refused(&mut g, "pinned", "certificate");
}
