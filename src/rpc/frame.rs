//! JSON-RPC 2.0 frame shapes: parsing requests, building responses, errors and events.

use serde_json::{Map, Value};

/// Error codes of PROTOCOL.md.
pub mod code {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const UNKNOWN_METHOD: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32000;
    pub const SESSION_NOT_FOUND: i64 = 4001;
    pub const EMPTY_PROMPT: i64 = 4002;
    pub const EMPTY_COMMAND: i64 = 4004;
    pub const BLOCKED: i64 = 4005;
    pub const MISSING_ID: i64 = 4006;
    pub const STORED_NOT_FOUND: i64 = 4007;
    pub const BUSY: i64 = 4009;
    /// A live session cannot be deleted.
    pub const SESSION_ACTIVE: i64 = 4023;
    /// A Hermes feature this gateway does not have.
    pub const NOT_SUPPORTED: i64 = 4040;
    pub const TIMED_OUT: i64 = 5002;
    pub const SHUTTING_DOWN: i64 = 5035;
}

#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }
    pub fn session_not_found() -> Self {
        Self::new(code::SESSION_NOT_FOUND, "session not found")
    }
}

/// What one input line turned out to be.
#[derive(Debug)]
pub enum Incoming {
    Request(Request),
    /// An answer to a server request (`srq-…` ids): `result` or `error`, no `method`.
    Answer {
        id: Value,
        result: Result<Value, Value>,
    },
    /// A line that could not be understood; answer it with this error and `id`.
    Bad {
        id: Value,
        error: RpcError,
    },
}

#[derive(Debug)]
pub struct Request {
    /// Echoed as given; `Value::Null` when the request had none.
    pub id: Value,
    pub method: String,
    pub params: Map<String, Value>,
}

/// Classify one line of input.
pub fn parse_line(line: &[u8]) -> Incoming {
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            let what = if std::str::from_utf8(line).is_err() {
                "parse error: invalid UTF-8".to_string()
            } else {
                format!("parse error: {e}")
            };
            return Incoming::Bad {
                id: Value::Null,
                error: RpcError::new(code::PARSE, what),
            };
        }
    };
    let Value::Object(mut obj) = value else {
        return Incoming::Bad {
            id: Value::Null,
            error: RpcError::new(code::INVALID_REQUEST, "invalid request: not an object"),
        };
    };
    let id = match obj.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id,
        None => Value::Null,
        Some(_) => {
            return Incoming::Bad {
                id: Value::Null,
                error: RpcError::new(
                    code::INVALID_REQUEST,
                    "invalid request: id must be a string or a number",
                ),
            };
        }
    };
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return Incoming::Bad {
                id,
                error: RpcError::new(
                    code::INVALID_REQUEST,
                    "invalid request: method must be a string",
                ),
            };
        }
        None => {
            if let Some(result) = obj.remove("result") {
                return Incoming::Answer {
                    id,
                    result: Ok(result),
                };
            }
            if let Some(error) = obj.remove("error") {
                return Incoming::Answer {
                    id,
                    result: Err(error),
                };
            }
            return Incoming::Bad {
                id,
                error: RpcError::new(code::INVALID_REQUEST, "invalid request: method missing"),
            };
        }
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Incoming::Bad {
                id,
                error: RpcError::invalid_params("invalid params: params must be an object"),
            };
        }
    };
    Incoming::Request(Request { id, method, params })
}

fn finish(mut frame: Vec<u8>) -> Vec<u8> {
    frame.push(b'\n');
    frame
}

fn to_vec(v: &impl serde::Serialize) -> Vec<u8> {
    // Serialising a serde_json::Value or a map of them cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

/// `{"jsonrpc":"2.0","id":…,"result":…}\n`
pub fn response(id: &Value, result: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(&to_vec(id));
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(&to_vec(result));
    out.push(b'}');
    finish(out)
}

/// `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}\n`
pub fn error(id: &Value, err: &RpcError) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(&to_vec(id));
    out.extend_from_slice(br#","error":{"code":"#);
    out.extend_from_slice(err.code.to_string().as_bytes());
    out.extend_from_slice(br#","message":"#);
    out.extend_from_slice(&to_vec(&err.message));
    out.extend_from_slice(b"}}");
    finish(out)
}

/// The `params` of an event frame, serialised: `{"type":…,"session_id":…,"payload":…[,"seq":…]}`.
pub fn event_params(kind: &str, session_id: &str, payload: &Value, seq: Option<u64>) -> String {
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(br#"{"type":"#);
    out.extend_from_slice(&to_vec(&kind));
    out.extend_from_slice(br#","session_id":"#);
    out.extend_from_slice(&to_vec(&session_id));
    out.extend_from_slice(br#","payload":"#);
    out.extend_from_slice(&to_vec(payload));
    if let Some(seq) = seq {
        out.extend_from_slice(br#","seq":"#);
        out.extend_from_slice(seq.to_string().as_bytes());
    }
    out.push(b'}');
    // Built only from serde_json output and ASCII.
    String::from_utf8(out).unwrap_or_default()
}

/// A whole event frame around already serialised params.
pub fn event_frame(params: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(params.len() + 40);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"event","params":"#);
    out.extend_from_slice(params.as_bytes());
    out.push(b'}');
    finish(out)
}

/// A server request: `{"jsonrpc":"2.0","id":…,"method":…,"params":…}\n`
pub fn server_request(id: &str, method: &str, params: &Value) -> Vec<u8> {
    let frame = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    finish(to_vec(&frame))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bad(line: &str) -> (Value, i64) {
        match parse_line(line.as_bytes()) {
            Incoming::Bad { id, error } => (id, error.code),
            other => panic!("expected an error for {line}: {other:?}"),
        }
    }

    #[test]
    fn requests_parse_with_ids_as_given() {
        let Incoming::Request(r) = parse_line(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)
        else {
            panic!()
        };
        assert_eq!(
            (r.id, r.method.as_str(), r.params.len()),
            (json!(7), "ping", 0)
        );
        let Incoming::Request(r) = parse_line(br#"{"id":"a","method":"x","params":null}"#) else {
            panic!()
        };
        assert_eq!(r.id, json!("a"));
    }

    #[test]
    fn malformed_lines_get_the_protocol_codes() {
        assert_eq!(bad("{nope"), (Value::Null, code::PARSE));
        assert_eq!(bad("[1,2]"), (Value::Null, code::INVALID_REQUEST));
        assert_eq!(bad(r#"{"id":1}"#), (json!(1), code::INVALID_REQUEST));
        assert_eq!(
            bad(r#"{"id":1,"method":5}"#),
            (json!(1), code::INVALID_REQUEST)
        );
        assert_eq!(
            bad(r#"{"id":1,"method":"m","params":[1]}"#),
            (json!(1), code::INVALID_PARAMS)
        );
        match parse_line(b"\xff\xfe") {
            Incoming::Bad { error, .. } => assert!(error.message.contains("UTF-8")),
            _ => panic!(),
        }
    }

    #[test]
    fn answers_to_server_requests_are_recognised() {
        assert!(matches!(
            parse_line(br#"{"jsonrpc":"2.0","id":"srq-1","result":{"choice":"once"}}"#),
            Incoming::Answer { result: Ok(_), .. }
        ));
    }

    #[test]
    fn frames_are_one_json_line_without_ascii_escaping() {
        let f = response(&json!("r1"), &json!({"text": "héllo"}));
        assert!(f.ends_with(b"\n") && !f[..f.len() - 1].contains(&b'\n'));
        let v: Value = serde_json::from_slice(&f).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":"r1","result":{"text":"héllo"}})
        );
        assert!(String::from_utf8(f).unwrap().contains("héllo"));
        let e: Value =
            serde_json::from_slice(&error(&Value::Null, &RpcError::new(4001, "x"))).unwrap();
        assert_eq!(e["error"]["code"], 4001);
        let ev: Value = serde_json::from_slice(&event_frame(&event_params(
            "message.delta",
            "abcd1234",
            &json!({"text":"hi"}),
            Some(3),
        )))
        .unwrap();
        assert_eq!(ev["params"]["seq"], 3);
        assert_eq!(ev["method"], "event");
    }
}
