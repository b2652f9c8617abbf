//! What travels on an MCP stdio server's pipes, as pure functions: newline-delimited JSON-RPC
//! lines cut from the bytes (a line longer than the cap is dropped as it streams, never
//! buffered), what a message is, the requests we send, the tool names and the schema
//! clean-up (Hermes' `_normalize_mcp_input_schema`).

use serde_json::{Map, Value, json};

/// The protocol versions we speak, newest first (the MCP specification's revisions).
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

/// Complete lines out of a byte stream, each at most `cap` bytes; a longer one is skipped to
/// its end and counted.
pub struct Lines {
    partial: Vec<u8>,
    cap: usize,
    /// Inside a line that passed the cap: drop bytes up to its newline.
    skipping: bool,
    pub too_long: u64,
}

impl Lines {
    pub fn new(cap: usize) -> Lines {
        Lines {
            partial: Vec::new(),
            cap,
            skipping: false,
            too_long: 0,
        }
    }

    /// Feed bytes; each complete line (without its newline) goes to `line`.
    pub fn feed(&mut self, mut bytes: &[u8], mut line: impl FnMut(&[u8])) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (chunk, rest, ends) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            if !self.skipping {
                if self.partial.len() + chunk.len() > self.cap {
                    self.partial = Vec::new();
                    self.skipping = true;
                    self.too_long += 1;
                } else {
                    self.partial.extend_from_slice(chunk);
                }
            }
            if ends {
                if !self.skipping {
                    line(&std::mem::take(&mut self.partial));
                }
                self.skipping = false;
            }
            bytes = rest;
        }
    }
}

/// One message a server sent.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// An answer to our request `id`.
    Answer {
        id: u64,
        result: Result<Value, String>,
    },
    /// A notification.
    Notice { method: String, params: Value },
    /// A request of the server to us (`ping`, or one we do not serve).
    Request { id: Value, method: String },
    /// Not JSON-RPC, or an answer to an id we never used.
    Garbage(String),
}

pub fn parse(line: &[u8]) -> Incoming {
    let text = String::from_utf8_lossy(line);
    let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(text.trim()) else {
        return Incoming::Garbage(crate::util::clip(&text, 120));
    };
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    match (method, msg.get("id")) {
        (Some(method), Some(id)) if !id.is_null() => Incoming::Request {
            id: id.clone(),
            method,
        },
        (Some(method), _) => Incoming::Notice {
            method,
            params: msg.get("params").cloned().unwrap_or(Value::Null),
        },
        (None, Some(id)) => {
            let Some(id) = id.as_u64() else {
                return Incoming::Garbage(format!("an answer to an id we never used: {id}"));
            };
            let result = match (msg.get("result"), msg.get("error")) {
                (_, Some(err)) => Err(err
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| err.to_string(), str::to_string)),
                (Some(result), None) => Ok(result.clone()),
                (None, None) => Err("an answer with neither result nor error".into()),
            };
            Incoming::Answer { id, result }
        }
        (None, None) => Incoming::Garbage(crate::util::clip(&text, 120)),
    }
}

/// A request line (with its newline).
pub fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

pub fn notification(method: &str, params: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

pub fn answer(id: &Value, result: Result<Value, (i64, &str)>) -> Vec<u8> {
    line(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    })
}

fn line(v: Value) -> Vec<u8> {
    let mut bytes = v.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSIONS[0],
        "capabilities": {},
        "clientInfo": {"name": "tui-gateway", "version": crate::VERSION},
    })
}

/// The version the server chose, if we speak it.
pub fn check_version(init: &Value) -> Result<String, String> {
    let v = init["protocolVersion"].as_str().unwrap_or("");
    if PROTOCOL_VERSIONS.contains(&v) {
        Ok(v.to_string())
    } else {
        Err(format!(
            "the server speaks MCP protocol version {v:?}; we speak {}",
            PROTOCOL_VERSIONS.join(", ")
        ))
    }
}

/// Hermes' name component: every character outside `[A-Za-z0-9_]` becomes `_`.
pub fn name_component(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `mcp__<server>__<tool>`, as Hermes names an MCP tool.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("mcp__{}__{}", name_component(server), name_component(tool))
}

/// A server's `inputSchema` made acceptable to model APIs: not an object → an empty object
/// schema; `definitions` → `$defs` (and local `$ref`s with it), property names kept;
/// an object shape gets `type: object` and `properties`, and `required` names only
/// properties that exist.
pub fn sanitize_schema(schema: Option<&Value>) -> Value {
    let Some(Value::Object(_)) = schema else {
        return json!({"type": "object", "properties": {}});
    };
    let mut s = repair(rewrite_refs(schema.cloned().unwrap_or_default()));
    if s.get("type").and_then(Value::as_str) == Some("object") && s.get("properties").is_none() {
        s["properties"] = json!({});
    }
    if s.get("type").is_none() {
        s["type"] = json!("object");
    }
    s
}

fn rewrite_refs(node: Value) -> Value {
    match node {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                if (key == "properties" || key == "patternProperties") && value.is_object() {
                    let props = value
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), rewrite_refs(v.clone())))
                        .collect();
                    out.insert(key, Value::Object(props));
                } else {
                    let key = if key == "definitions" {
                        "$defs".into()
                    } else {
                        key
                    };
                    out.insert(key, rewrite_refs(value));
                }
            }
            if let Some(Value::String(r)) = out.get("$ref")
                && let Some(rest) = r.strip_prefix("#/definitions/")
            {
                out.insert("$ref".into(), json!(format!("#/$defs/{rest}")));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(rewrite_refs).collect()),
        other => other,
    }
}

fn repair(node: Value) -> Value {
    match node {
        Value::Array(items) => Value::Array(items.into_iter().map(repair).collect()),
        Value::Object(map) => {
            let mut r: Map<String, Value> = map.into_iter().map(|(k, v)| (k, repair(v))).collect();
            let untyped = r.get("type").is_none_or(Value::is_null);
            if untyped && (r.contains_key("properties") || r.contains_key("required")) {
                r.insert("type".into(), json!("object"));
            }
            if r.get("type").and_then(Value::as_str) == Some("object") {
                if !r.get("properties").is_some_and(Value::is_object) {
                    r.insert("properties".into(), json!({}));
                }
                if let Some(Value::Array(required)) = r.get("required") {
                    let props = &r["properties"];
                    let valid: Vec<Value> = required
                        .iter()
                        .filter(|n| n.as_str().is_some_and(|n| props.get(n).is_some()))
                        .cloned()
                        .collect();
                    if valid.is_empty() {
                        r.remove("required");
                    } else {
                        r.insert("required".into(), Value::Array(valid));
                    }
                }
            }
            Value::Object(r)
        }
        other => other,
    }
}

/// A `tools/call` result as the tool message's content and its one-line summary: the text
/// parts joined, the structured content when there is one, `isError` as the error.
pub fn call_result(result: &Value) -> (Value, String, Option<String>) {
    let text: Vec<&str> = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| match part["type"].as_str() {
            Some("text") => part["text"].as_str(),
            _ => None,
        })
        .collect();
    let text = text.join("\n");
    let others = result["content"].as_array().map_or(0, |parts| {
        parts.iter().filter(|p| p["type"] != "text").count()
    });
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let mut content = json!({"result": text});
    if let Some(s) = result.get("structuredContent").filter(|s| !s.is_null()) {
        content["structuredContent"] = s.clone();
    }
    if others > 0 {
        content["non_text_parts"] = json!(others);
    }
    let summary = crate::util::clip(text.lines().next().unwrap_or(""), 120);
    if is_error {
        let why = if text.is_empty() {
            "the MCP tool failed".into()
        } else {
            text
        };
        return (
            json!({"error": why}),
            crate::util::clip(&why, 120),
            Some(why),
        );
    }
    (content, summary, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_and_an_overlong_one_is_skipped_not_kept() {
        let mut lines = Lines::new(8);
        let mut got = Vec::new();
        lines.feed(b"abc\nde", |l| got.push(l.to_vec()));
        lines.feed(b"f\n0123456789", |l| got.push(l.to_vec()));
        lines.feed(b"0123456789", |l| got.push(l.to_vec()));
        assert!(lines.partial.is_empty(), "an overlong line is not buffered");
        lines.feed(b"tail\nok\n", |l| got.push(l.to_vec()));
        assert_eq!(got, vec![b"abc".to_vec(), b"def".to_vec(), b"ok".to_vec()]);
        assert_eq!(lines.too_long, 1);
    }

    #[test]
    fn messages_are_told_apart_and_garbage_named() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#),
            Incoming::Answer {
                id: 3,
                result: Ok(json!({"a":1}))
            }
        );
        assert_eq!(
            parse(br#"{"id":4,"error":{"code":-1,"message":"no"}}"#),
            Incoming::Answer {
                id: 4,
                result: Err("no".into())
            }
        );
        assert!(matches!(
            parse(br#"{"method":"ping","id":"x"}"#),
            Incoming::Request { .. }
        ));
        assert!(matches!(
            parse(br#"{"method":"notifications/progress","params":{"progress":1}}"#),
            Incoming::Notice { .. }
        ));
        assert!(matches!(parse(b"hello world"), Incoming::Garbage(_)));
        assert!(matches!(
            parse(br#"{"id":"str","result":1}"#),
            Incoming::Garbage(_)
        ));
    }

    #[test]
    fn names_and_versions_follow_hermes_and_the_spec() {
        assert_eq!(tool_name("my-fs", "read.file"), "mcp__my_fs__read_file");
        assert!(check_version(&json!({"protocolVersion": "2025-03-26"})).is_ok());
        assert!(check_version(&json!({"protocolVersion": "1999-01-01"})).is_err());
    }

    #[test]
    fn schemas_that_are_not_json_schema_become_acceptable_ones() {
        assert_eq!(
            sanitize_schema(None),
            json!({"type":"object","properties":{}})
        );
        assert_eq!(
            sanitize_schema(Some(&json!("nope"))),
            json!({"type":"object","properties":{}})
        );
        let s = sanitize_schema(Some(&json!({
            "required": ["a", "ghost"],
            "properties": {"a": {"$ref": "#/definitions/A"}, "definitions": {"type": "string"}},
            "definitions": {"A": {"type": "string"}}
        })));
        assert_eq!(s["type"], "object");
        assert_eq!(s["required"], json!(["a"]));
        assert_eq!(s["properties"]["a"]["$ref"], "#/$defs/A");
        assert!(
            s["properties"].get("definitions").is_some(),
            "a property name is kept"
        );
        assert!(s.get("$defs").is_some());
    }

    #[test]
    fn call_results_carry_text_structure_and_errors() {
        let (c, summary, err) = call_result(&json!({
            "content": [{"type":"text","text":"hi"},{"type":"image","data":"x"}],
            "structuredContent": {"n": 1}}));
        assert_eq!(
            (c["result"].as_str(), summary.as_str(), err),
            (Some("hi"), "hi", None)
        );
        assert_eq!(c["structuredContent"]["n"], 1);
        assert_eq!(c["non_text_parts"], 1);
        let (c, _, err) =
            call_result(&json!({"content":[{"type":"text","text":"bad"}],"isError":true}));
        assert_eq!(
            (c["error"].as_str(), err.as_deref()),
            (Some("bad"), Some("bad"))
        );
    }
}
