//! JSON-RPC 2.0 frame shapes: parsing requests, building responses, errors and events.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Error codes of PROTOCOL.md.
pub mod code {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const UNKNOWN_METHOD: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32000;
    pub const SESSION_NOT_FOUND: i64 = 4001;
    /// A value Hermes refuses: an empty prompt, an unknown mode or provider.
    pub const INVALID_VALUE: i64 = 4002;
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
    /// state.db refused a delete (Hermes' code).
    pub const DELETE_FAILED: i64 = 5036;
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

/// A request's id exactly as the client wrote it: its JSON text (a string, a number or `null`),
/// echoed byte for byte, so a 30-digit integer, `-0`, `1.50` or `"\u0041"` come back as sent;
/// and the client that sent it, whom its answer goes to (`rpc/clients.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Id {
    json: Box<str>,
    client: u64,
}

impl Id {
    fn new(json: Box<str>) -> Id {
        Id { json, client: 0 }
    }

    /// The id of a request that had none (or one that could not be read).
    pub fn null() -> Id {
        Id::new("null".into())
    }

    /// The id whose JSON text is `value`'s (ids built in code, tests).
    pub fn of(value: &Value) -> Id {
        Id::new(value.to_string().into())
    }

    /// The same id, sent by client `number`.
    pub fn from_client(mut self, number: u64) -> Id {
        self.client = number;
        self
    }

    /// The client that sent it.
    pub fn client(&self) -> u64 {
        self.client
    }

    /// The JSON text, as the client sent it.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The id as a JSON value (a huge number may lose precision here, never on the wire).
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.json)
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
        id: Id,
        error: RpcError,
    },
}

#[derive(Debug)]
pub struct Request {
    /// Echoed as given; `null` when the request had none.
    pub id: Id,
    pub method: String,
    pub params: Map<String, Value>,
}

/// How [`Envelope::read`] takes the members other than `id`.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Members {
    /// Parsed into `rest` (the request's own reading).
    Values,
    /// Kept as their JSON text in `raw`, read with no depth limit, any number, any escape.
    Raw,
    /// Skipped, their strings' bytes unchecked (a line that is not UTF-8).
    Skipped,
}

/// One input line as an object: the id's raw text, the other members as [`Members`] asks (the
/// last of a repeated key wins, as in a parsed object), and whether it answers a server request
/// (a `result` or an `error` and no `method`).
pub(super) struct Envelope<'a> {
    pub id: Option<&'a RawValue>,
    pub rest: Map<String, Value>,
    pub raw: Vec<(String, &'a RawValue)>,
    pub answer: bool,
}

impl<'a> Envelope<'a> {
    /// `line` read as one JSON object, as `serde_json::from_slice` reads it.
    pub(super) fn read(line: &'a [u8], members: Members) -> serde_json::Result<Envelope<'a>> {
        let mut de = serde_json::Deserializer::from_slice(line);
        let envelope = de.deserialize_map(Reader(members))?;
        de.end()?;
        Ok(envelope)
    }
}

/// Reads an [`Envelope`].
struct Reader(Members);

impl<'de> Visitor<'de> for Reader {
    type Value = Envelope<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
        let mut envelope = Envelope {
            id: None,
            rest: Map::new(),
            raw: Vec::new(),
            answer: false,
        };
        let (mut method, mut outcome) = (false, false);
        while let Some(Key(key)) = map.next_key()? {
            if key == b"id" {
                envelope.id = Some(map.next_value()?);
                continue;
            }
            method |= key == b"method";
            outcome |= key == b"result" || key == b"error";
            match self.0 {
                Members::Values => {
                    let key = String::from_utf8(key)
                        .map_err(|_| de::Error::custom("a member name is not UTF-8"))?;
                    envelope.rest.insert(key, map.next_value()?);
                }
                Members::Raw => {
                    let key = String::from_utf8_lossy(&key).into_owned();
                    envelope.raw.push((key, map.next_value()?));
                }
                Members::Skipped => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        envelope.answer = outcome && !method;
        Ok(envelope)
    }
}

/// A member's name as bytes (serde_json reads a key as bytes without checking its UTF-8).
struct Key(Vec<u8>);

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Key, E> {
                Ok(Key(v.to_vec()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.as_bytes().to_vec()))
            }
        }
        d.deserialize_bytes(Bytes)
    }
}

/// Classify one line of input. A line the parse refuses is read again leniently
/// (`refused.rs`): a lone surrogate escape becomes U+FFFD and the line is taken, and anything
/// else wrong is answered under the line's id whenever that id can be read.
pub fn parse_line(line: &[u8]) -> Incoming {
    let error = match Envelope::read(line, Members::Values) {
        Ok(Envelope { id, rest, .. }) => return classify(id.map(RawValue::get), rest),
        Err(e) => e,
    };
    let Some(mended) = super::refused::mend_surrogates(line) else {
        return super::refused::answer(line, &error);
    };
    match Envelope::read(&mended, Members::Values) {
        // The id as the client wrote it: the mend keeps every byte's place.
        Ok(Envelope { id, rest, .. }) => {
            let id = id.map(|raw| {
                let at = raw.get().as_ptr() as usize - mended.as_ptr() as usize;
                std::str::from_utf8(&line[at..at + raw.get().len()]).unwrap_or(raw.get())
            });
            classify(id, rest)
        }
        Err(error) => super::refused::answer(&mended, &error),
    }
}

/// The id whose JSON text is `raw` (`null` when there is none), or the refusal of a line whose
/// id cannot be one: an id is a string, a number or `null`.
pub(super) fn id_of(raw: Option<&str>) -> Result<Id, Incoming> {
    match raw {
        None => Ok(Id::null()),
        Some(text)
            if matches!(
                text.as_bytes().first(),
                Some(b'"' | b'-' | b'0'..=b'9' | b'n')
            ) =>
        {
            Ok(Id::new(text.into()))
        }
        Some(_) => Err(Incoming::Bad {
            id: Id::null(),
            error: RpcError::new(
                code::INVALID_REQUEST,
                "invalid request: id must be a string or a number",
            ),
        }),
    }
}

/// A parsed object line: a request, an answer to a server request, or why neither.
fn classify(raw_id: Option<&str>, mut obj: Map<String, Value>) -> Incoming {
    let id = match id_of(raw_id) {
        Ok(id) => id,
        Err(refused) => return refused,
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
                    id: id.value(),
                    result: Ok(result),
                };
            }
            if let Some(error) = obj.remove("error") {
                return Incoming::Answer {
                    id: id.value(),
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
pub fn response(id: &Id, result: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.json().as_bytes());
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(&to_vec(result));
    out.push(b'}');
    finish(out)
}

/// `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}\n`
pub fn error(id: &Id, err: &RpcError) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.json().as_bytes());
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
            Incoming::Bad { id, error } => (id.value(), error.code),
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
            (r.id.value(), r.method.as_str(), r.params.len()),
            (json!(7), "ping", 0)
        );
        let Incoming::Request(r) = parse_line(br#"{"id":"a","method":"x","params":null}"#) else {
            panic!()
        };
        assert_eq!(r.id.value(), json!("a"));
    }

    #[test]
    fn ids_are_echoed_byte_for_byte() {
        for id in [
            "123456789012345678901234567890",
            "-98765432109876543210",
            "-0",
            "1.50",
            "0.1000000000000000055511151231257827",
            "1E+400",
            "\"plain\"",
            "\"\\u0041\\n\\ud83d\\ude00\"",
            "null",
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id": {id} ,"method":"ping"}}"#);
            let Incoming::Request(r) = parse_line(line.as_bytes()) else {
                panic!("{line}")
            };
            let answer = response(&r.id, &json!({"pong": true}));
            let want =
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"pong\":true}}}}\n");
            assert_eq!(String::from_utf8(answer).unwrap(), want);
            let refused = format!(r#"{{"id":{id},"method":5}}"#);
            let Incoming::Bad { id: echoed, .. } = parse_line(refused.as_bytes()) else {
                panic!("{refused}")
            };
            assert_eq!(echoed.json(), id);
        }
        // The last of a repeated member wins, as in a parsed object.
        let Incoming::Request(r) = parse_line(br#"{"id":1,"id":2,"method":"ping"}"#) else {
            panic!()
        };
        assert_eq!(r.id.json(), "2");
        for id in ["true", "[1]", r#"{"a":1}"#] {
            let line = format!(r#"{{"id":{id},"method":"ping"}}"#);
            assert_eq!(bad(&line), (Value::Null, code::INVALID_REQUEST), "{line}");
        }
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

    /// `{"id":7,"method":"m","params":{"a":{"a":…1…}}}`, `depth` levels deep in all.
    fn nested(depth: usize) -> String {
        format!(
            r#"{{"id":7,"method":"m","params":{}1{}}}"#,
            r#"{"a":"#.repeat(depth - 1),
            "}".repeat(depth - 1)
        )
    }

    fn refused(line: &[u8]) -> (String, i64, String) {
        match parse_line(line) {
            Incoming::Bad { id, error } => (id.json().to_string(), error.code, error.message),
            other => panic!("{}: {other:?}", String::from_utf8_lossy(line)),
        }
    }

    #[test]
    fn what_the_parse_refuses_is_answered_under_the_id_it_can_read() {
        use crate::rpc::refused::MAX_DEPTH;
        // The deepest request serde_json takes, and one level more.
        let deepest = nested(MAX_DEPTH);
        assert!(matches!(
            parse_line(deepest.as_bytes()),
            Incoming::Request(_)
        ));
        let (id, code, message) = refused(nested(MAX_DEPTH + 1).as_bytes());
        assert_eq!((id.as_str(), code), ("7", code::INVALID_PARAMS));
        assert_eq!(
            message,
            "invalid params: params nests deeper than 127 levels"
        );
        let deep = format!(
            r#"{{"x":{}{},"id":"q","method":"m"}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let (id, code, message) = refused(deep.as_bytes());
        assert_eq!((id.as_str(), code), (r#""q""#, code::INVALID_REQUEST));
        assert_eq!(
            message,
            r#"invalid request: "x" nests deeper than 127 levels"#
        );
        let (id, code, message) = refused(br#"{"id":8,"method":"m","params":{"n":1e400}}"#);
        assert_eq!((id.as_str(), code), ("8", code::INVALID_PARAMS));
        assert!(message.contains("number out of range"), "{message}");
        let (id, code, message) =
            refused(b"{\"id\":9,\"method\":\"m\",\"params\":{\"t\":\"\xff\"}}");
        assert_eq!((id.as_str(), code), ("9", code::PARSE));
        assert!(message.contains("UTF-8"), "{message}");
        // Nothing to read an id from: not an object, not JSON, a bad id, an answer.
        let deep_array = format!("{}{}", "[".repeat(300), "]".repeat(300));
        assert_eq!(
            refused(deep_array.as_bytes()),
            (
                "null".into(),
                code::INVALID_REQUEST,
                "invalid request: not an object".into()
            )
        );
        assert_eq!(refused(br#"{"id":1,"method":"m""#).0, "null");
        assert_eq!(
            refused(br#"{"id":[1],"method":"m","params":{"n":1e400}}"#).0,
            "null"
        );
        assert_eq!(refused(br#"{"id":"srq-1","result":{"n":1e400}}"#).0, "null");
    }

    #[test]
    fn a_lone_surrogate_becomes_the_replacement_character_and_the_id_is_kept() {
        let line = br#"{"id":"\ud800","method":"m","params":{"text":"a\udc00b\ud83d\ude00"}}"#;
        let Incoming::Request(r) = parse_line(line) else {
            panic!()
        };
        assert_eq!(r.id.json(), r#""\ud800""#);
        assert_eq!(r.params["text"], "a\u{fffd}b\u{1f600}");
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
        let f = response(&Id::of(&json!("r1")), &json!({"text": "héllo"}));
        assert!(f.ends_with(b"\n") && !f[..f.len() - 1].contains(&b'\n'));
        let v: Value = serde_json::from_slice(&f).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":"r1","result":{"text":"héllo"}})
        );
        assert!(String::from_utf8(f).unwrap().contains("héllo"));
        let e: Value =
            serde_json::from_slice(&error(&Id::null(), &RpcError::new(4001, "x"))).unwrap();
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
