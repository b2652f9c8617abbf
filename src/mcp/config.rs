//! `mcp_servers` in `config.yaml`, with Hermes' keys and defaults: `command`, `args`, `env`,
//! `cwd`, `timeout` (per call, 300 s), `connect_timeout` (60 s), `enabled`, `tools.include`
//! / `tools.exclude` (include wins), and our `lazy` (Hermes has no such key: start when the
//! first session opens instead of at start-up; default false); `url` and `headers` for a
//! streamable HTTP server (`http.rs`). `${VAR}` (and Cursor's `${env:VAR}`) in any string
//! value is replaced by the gateway's environment variable, as Hermes does; an unset or
//! empty one stays as written.

use std::collections::BTreeMap;
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
            },
        );
    }
    out
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
