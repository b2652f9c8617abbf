//! `mcp_servers` in `config.yaml`, with Hermes' keys and defaults: `command`, `args`, `env`,
//! `cwd`, `timeout` (per call, 300 s), `connect_timeout` (60 s), `enabled`, `tools.include`
//! / `tools.exclude` (include wins), and our `lazy` (Hermes has no such key: start when the
//! first session opens instead of at start-up; default false); `url` and `headers` for a
//! streamable HTTP server (`http.rs`), with Hermes' `ssl_verify` and `client_cert` /
//! `client_key` for its TLS (read here by shape; the files by `tls.rs`). `${VAR}` (and Cursor's `${env:VAR}`) in any string
//! value is replaced by the gateway's environment variable, as Hermes does; an unset or
//! empty one stays as written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

const DEFAULT_CALL_TIMEOUT: f64 = 300.0;
const DEFAULT_CONNECT_TIMEOUT: f64 = 60.0;

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub url: Option<String>,
    /// Header lines sent with every request to a `url` server.
    pub headers: BTreeMap<String, String>,
    pub call_timeout: Duration,
    pub connect_timeout: Duration,
    pub enabled: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// Started when the first session opens instead of at start-up (our key `lazy`).
    pub lazy: bool,
    /// How a `url` server's TLS is set up, or why its keys are wrong (it then fails).
    pub tls: Result<Tls, String>,
}

/// Hermes' `ssl_verify` and `client_cert` / `client_key` of a `url` server.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tls {
    pub verify: Verify,
    pub client_cert: Option<ClientCert>,
}

/// How the server's certificate is checked (`ssl_verify`, as httpx's `verify=`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Verify {
    /// `true` (the default): the bundled roots and the system's store.
    #[default]
    Roots,
    /// `false`: not checked at all (insecure).
    Off,
    /// A path: the certificates of this PEM file are the only roots trusted.
    Bundle(PathBuf),
}

/// The certificate (chain) and private key presented to the server (mutual TLS).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientCert {
    pub cert: PathBuf,
    /// The same file as `cert` when one PEM holds both.
    pub key: PathBuf,
}

impl ServerConfig {
    /// Whether a tool of the server is offered (Hermes: include, else exclude, else all).
    pub fn offers(&self, tool: &str) -> bool {
        if !self.include.is_empty() {
            return self.include.iter().any(|t| t == tool);
        }
        !self.exclude.iter().any(|t| t == tool)
    }

    /// The `bash -c` line that starts it: `exec env K=V … command args…`, each word quoted.
    pub fn shell_line(&self) -> Option<String> {
        let command = self.command.as_deref()?;
        let mut words = vec!["exec".to_string(), "env".to_string()];
        words.extend(self.env.iter().map(|(k, v)| quote(&format!("{k}={v}"))));
        words.push(quote(command));
        words.extend(self.args.iter().map(|a| quote(a)));
        Some(words.join(" "))
    }

    pub fn transport(&self) -> &'static str {
        if self.url.is_some() { "http" } else { "stdio" }
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn seconds(v: &Value, default: f64) -> Duration {
    let s = v
        .as_f64()
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(default);
    Duration::from_secs_f64(s.min(86_400.0))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| match s {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

fn boolish(v: &Value, default: bool) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => true,
            "false" | "0" | "no" | "off" => false,
            _ => default,
        },
        _ => default,
    }
}

/// A mapping of names to texts (a value that is not a string is written as JSON); names
/// that are empty or fail `keep` are skipped.
fn text_map(v: &Value, keep: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.is_empty() && keep(k))
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str().map_or_else(|| v.to_string(), str::to_string),
            )
        })
        .collect()
}

/// `${NAME}` / `${env:NAME}` in `text` replaced by `var(NAME)`; a name that is unset or
/// empty keeps its placeholder (Hermes' `_interpolate_env_vars`).
fn interpolate_text(text: &str, var: &impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let placeholder = &rest[start..start + 2 + len + 1];
        let inner = rest[start + 2..start + 2 + len].trim();
        let name = inner.strip_prefix("env:").map_or(inner, str::trim);
        out.push_str(&rest[..start]);
        match var(name).filter(|v| !v.is_empty()) {
            Some(value) => out.push_str(&value),
            None => out.push_str(placeholder),
        }
        rest = &rest[start + placeholder.len()..];
    }
    out.push_str(rest);
    out
}

/// Every string in `v` (mapping values and list items, at any depth) interpolated.
fn interpolate(v: &Value, var: &impl Fn(&str) -> Option<String>) -> Value {
    match v {
        Value::String(s) => Value::String(interpolate_text(s, var)),
        Value::Array(items) => Value::Array(items.iter().map(|i| interpolate(i, var)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), interpolate(v, var)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The servers of `mcp_servers` (as JSON), by name, `${VAR}`s read from the environment;
/// what is not a mapping is skipped.
pub fn parse(servers: &Value) -> BTreeMap<String, ServerConfig> {
    parse_with(servers, &|name| std::env::var(name).ok())
}

fn parse_with(
    servers: &Value,
    var: &impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, ServerConfig> {
    let mut out = BTreeMap::new();
    for (name, cfg) in servers.as_object().into_iter().flatten() {
        if !cfg.is_object() {
            continue;
        }
        let cfg = &interpolate(cfg, var);
        let text = |k: &str| cfg[k].as_str().map(str::to_string);
        let env = text_map(&cfg["env"], |k| !k.contains('='));
        let headers = text_map(&cfg["headers"], |k| !k.contains(':'));
        out.insert(
            name.clone(),
            ServerConfig {
                command: text("command"),
                args: strings(&cfg["args"]),
                env,
                cwd: text("cwd"),
                url: text("url"),
                headers,
                call_timeout: seconds(&cfg["timeout"], DEFAULT_CALL_TIMEOUT),
                connect_timeout: seconds(&cfg["connect_timeout"], DEFAULT_CONNECT_TIMEOUT),
                enabled: boolish(&cfg["enabled"], true),
                include: strings(&cfg["tools"]["include"]),
                exclude: strings(&cfg["tools"]["exclude"]),
                lazy: boolish(&cfg["lazy"], false),
                tls: tls(cfg),
            },
        );
    }
    out
}

/// `ssl_verify` and `client_cert` / `client_key` of an entry, as Hermes'
/// `_resolve_client_cert` takes them: `client_cert` a PEM holding both, or with `client_key`,
/// or a list `[cert, key]`; a passphrase (`[cert, key, pass]`) is refused (no encrypted keys).
fn tls(cfg: &Value) -> Result<Tls, String> {
    let verify = match &cfg["ssl_verify"] {
        Value::Null | Value::Bool(true) => Verify::Roots,
        Value::Bool(false) => Verify::Off,
        Value::String(_) => Verify::Bundle(path(&cfg["ssl_verify"], "ssl_verify")?),
        other => {
            return Err(format!(
                "ssl_verify must be true, false or the path of a CA bundle (PEM), not {other}"
            ));
        }
    };
    let (raw_cert, raw_key) = (&cfg["client_cert"], &cfg["client_key"]);
    let client_cert = match (raw_cert, raw_key) {
        (Value::Null, Value::Null) => None,
        (Value::Null, _) => return Err("client_key is set without client_cert".into()),
        (Value::Array(_), key) if !key.is_null() => {
            return Err("give client_cert as a list [cert, key] or client_cert and                         client_key, not both"
                .into());
        }
        (Value::Array(parts), _) => match parts.as_slice() {
            [cert, key] => Some(ClientCert {
                cert: path(cert, "client_cert[0]")?,
                key: path(key, "client_cert[1]")?,
            }),
            [_, _, _] => {
                return Err("client_cert: encrypted client keys (a passphrase) are not                             supported; give the key decrypted"
                    .into());
            }
            _ => {
                return Err(format!(
                    "client_cert as a list must be [cert, key], not {} items",
                    parts.len()
                ));
            }
        },
        (cert, Value::Null) => {
            let cert = path(cert, "client_cert")?;
            Some(ClientCert {
                key: cert.clone(),
                cert,
            })
        }
        (cert, key) => Some(ClientCert {
            cert: path(cert, "client_cert")?,
            key: path(key, "client_key")?,
        }),
    };
    Ok(Tls {
        verify,
        client_cert,
    })
}

/// A non-empty path string of key `label`, `~/` expanded to `$HOME` (as Hermes does).
fn path(v: &Value, label: &str) -> Result<PathBuf, String> {
    let text = v.as_str().map(str::trim).unwrap_or("");
    if text.is_empty() {
        return Err(format!("{label} must be a non-empty path, not {v}"));
    }
    match (text.strip_prefix("~/"), crate::util::user_home()) {
        (Some(rest), Some(home)) => Ok(home.join(rest)),
        _ => Ok(PathBuf::from(text)),
    }
}

/// `config.yaml`'s `mcp_servers` under `home`; none when absent or unreadable.
pub fn load(home: &std::path::Path) -> BTreeMap<String, ServerConfig> {
    match crate::config_file::load(home) {
        Ok(doc) => parse(&crate::config_file::to_json(crate::config_file::lookup(
            &doc,
            "mcp_servers",
        ))),
        Err(_) => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hermes_keys_and_defaults_are_read() {
        let s = parse(&json!({
            "fs": {"command": "npx", "args": ["-y", "x y", 3], "env": {"A": "it's"},
                   "timeout": 5, "tools": {"include": ["read"], "exclude": ["read"]}},
            "remote": {"url": "https://h/mcp", "enabled": "no"},
            "junk": 7
        }));
        let fs = &s["fs"];
        assert_eq!(fs.call_timeout, Duration::from_secs(5));
        assert_eq!(fs.connect_timeout, Duration::from_secs(60));
        assert!(fs.offers("read") && !fs.offers("write"));
        assert_eq!(
            fs.shell_line().unwrap(),
            r"exec env 'A=it'\''s' 'npx' '-y' 'x y' '3'"
        );
        assert!(!s["remote"].enabled && s["remote"].transport() == "http");
        assert!(!s.contains_key("junk"));
        assert_eq!(
            fs.tls,
            Ok(Tls::default()),
            "verified against the roots by default"
        );
    }

    #[test]
    fn ssl_verify_and_client_cert_take_hermes_shapes_and_refuse_others() {
        let tls_of = |entry: Value| parse(&json!({ "s": entry }))["s"].tls.clone();
        let off = tls_of(json!({"url": "https://h", "ssl_verify": false})).unwrap();
        assert_eq!(off.verify, Verify::Off);
        let bundle = tls_of(json!({"ssl_verify": "/etc/ca.pem", "client_cert": "/c.pem"}));
        let bundle = bundle.unwrap();
        assert_eq!(bundle.verify, Verify::Bundle("/etc/ca.pem".into()));
        let combined = bundle.client_cert.unwrap();
        assert_eq!(
            (combined.cert, combined.key),
            ("/c.pem".into(), "/c.pem".into())
        );
        for entry in [
            json!({"client_cert": ["/c.pem", "/k.pem"]}),
            json!({"client_cert": "/c.pem", "client_key": "/k.pem"}),
        ] {
            let pair = tls_of(entry).unwrap().client_cert.unwrap();
            assert_eq!((pair.cert, pair.key), ("/c.pem".into(), "/k.pem".into()));
        }
        for (entry, says) in [
            (
                json!({"ssl_verify": 1}),
                "ssl_verify must be true, false or the path",
            ),
            (
                json!({"ssl_verify": ""}),
                "ssl_verify must be a non-empty path",
            ),
            (
                json!({"client_key": "/k.pem"}),
                "client_key is set without client_cert",
            ),
            (
                json!({"client_cert": 7}),
                "client_cert must be a non-empty path",
            ),
            (
                json!({"client_cert": ["/c"]}),
                "must be [cert, key], not 1 items",
            ),
            (json!({"client_cert": ["/c", "/k", "pw"]}), "a passphrase"),
            (json!({"client_cert": ["/c", 3]}), "client_cert[1] must be"),
            (
                json!({"client_cert": ["/c", "/k"], "client_key": "/k"}),
                "not both",
            ),
        ] {
            let why = tls_of(entry.clone()).unwrap_err();
            assert!(why.contains(says), "{entry}: {why}");
        }
    }

    #[test]
    fn env_placeholders_are_filled_in_every_string_value() {
        let var = |n: &str| match n {
            "TOKEN" => Some("s3cret".to_string()),
            "HOST" => Some("mcp.example.com".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let s = parse_with(
            &json!({
                "web": {"url": "https://${HOST}/mcp",
                        "headers": {"Authorization": "Bearer ${env:TOKEN}"}},
                "cli": {"command": "${HOST}-server", "args": ["--key=${TOKEN}", "${NOPE}"],
                        "env": {"K": "${ TOKEN }${EMPTY}", "L": "${unclosed"}}
            }),
            &var,
        );
        assert_eq!(s["web"].url.as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(s["web"].headers["Authorization"], "Bearer s3cret");
        assert_eq!(s["cli"].command.as_deref(), Some("mcp.example.com-server"));
        assert_eq!(s["cli"].args, ["--key=s3cret", "${NOPE}"]);
        assert_eq!(s["cli"].env["K"], "s3cret${EMPTY}");
        assert_eq!(s["cli"].env["L"], "${unclosed");
    }
}
