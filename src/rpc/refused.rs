//! A line the parse refused, read again: its lone surrogate escapes mended, then read as
//! leniently as serde_json can read (nesting of any depth, any number, string bytes that are
//! not UTF-8), so the answer goes back under the line's id whenever that id can be read, and
//! says what exactly was wrong. Both readings are serde_json's, so they agree on what JSON is:
//! only what the strict parse refuses comes here, and the lenient one tells apart exactly its
//! own leniencies.

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::frame::{Envelope, Id, Incoming, Members, RpcError, code, id_of};

/// The deepest nesting a request may have, its own object counted (serde_json's limit: the
/// stack stays bounded whatever a line holds).
pub const MAX_DEPTH: usize = 127;

/// `line` with every lone surrogate escape (`\ud800` not followed by its low half, or a low
/// half alone) written `\ufffd`, each in its own place; `None` when it has none. Python's
/// `json.loads` takes them and Node's `JSON.stringify` can write them; a Rust string cannot
/// hold one, so it becomes U+FFFD, the replacement character.
pub(super) fn mend_surrogates(line: &[u8]) -> Option<Vec<u8>> {
    let unit = |at: usize| -> Option<u16> {
        let digits = line.get(at..at + 4)?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let mut mended: Option<Vec<u8>> = None;
    let (mut i, mut in_string) = (0, false);
    while i < line.len() {
        match line[i] {
            b'"' => {
                in_string = !in_string;
                i += 1;
            }
            b'\\' if in_string => {
                let Some(u) = (line.get(i + 1) == Some(&b'u'))
                    .then(|| unit(i + 2))
                    .flatten()
                else {
                    i += 2;
                    continue;
                };
                let paired = (0xD800..0xDC00).contains(&u)
                    && line.get(i + 6..i + 8) == Some(b"\\u")
                    && unit(i + 8).is_some_and(|low| (0xDC00..0xE000).contains(&low));
                if paired {
                    i += 12;
                    continue;
                }
                if (0xD800..0xE000).contains(&u) {
                    mended.get_or_insert_with(|| line.to_vec())[i + 2..i + 6]
                        .copy_from_slice(b"fffd");
                }
                i += 6;
            }
            _ => i += 1,
        }
    }
    mended
}

/// The answer to a line the strict parse refused with `error`.
pub(super) fn answer(line: &[u8], error: &serde_json::Error) -> Incoming {
    let utf8 = std::str::from_utf8(line).is_ok();
    let members = if utf8 { Members::Raw } else { Members::Skipped };
    let Ok(envelope) = Envelope::read(line, members) else {
        return Incoming::Bad {
            id: Id::null(),
            error: not_a_request(line, error),
        };
    };
    let id = match id_of(envelope.id.map(RawValue::get)) {
        // The id of an answer to a server request is ours, not a request's to answer under.
        Ok(_) if envelope.answer => Id::null(),
        Ok(id) => id,
        Err(refused) => return refused,
    };
    let error = if utf8 {
        why(&envelope.raw, error)
    } else {
        RpcError::new(code::PARSE, "parse error: invalid UTF-8")
    };
    Incoming::Bad { id, error }
}

/// Why a line that is not an object is refused: not JSON at all, or JSON of another kind.
fn not_a_request(line: &[u8], error: &serde_json::Error) -> RpcError {
    if std::str::from_utf8(line).is_err() {
        return RpcError::new(code::PARSE, "parse error: invalid UTF-8");
    }
    match serde_json::from_slice::<IgnoredAny>(line) {
        Ok(_) => RpcError::new(code::INVALID_REQUEST, "invalid request: not an object"),
        Err(_) => RpcError::new(code::PARSE, format!("parse error: {error}")),
    }
}

/// The first member the strict parse cannot take, and why: -32602 for `params`, -32600 for
/// another member.
fn why(members: &[(String, &RawValue)], error: &serde_json::Error) -> RpcError {
    for (key, raw) in members {
        let problem = if 1 + depth(raw.get()) > MAX_DEPTH {
            format!("nests deeper than {MAX_DEPTH} levels")
        } else if let Err(e) = serde_json::from_str::<serde_json::Value>(raw.get()) {
            let text = e.to_string();
            let cut = text.rfind(" at line ").unwrap_or(text.len());
            format!("holds {}", &text[..cut])
        } else {
            continue;
        };
        return if key == "params" {
            RpcError::invalid_params(format!("invalid params: params {problem}"))
        } else {
            RpcError::new(
                code::INVALID_REQUEST,
                format!("invalid request: {key:?} {problem}"),
            )
        };
    }
    RpcError::new(code::PARSE, format!("parse error: {error}"))
}

/// How deep the arrays and objects of the JSON text `text` nest (strings skipped).
fn depth(text: &str) -> usize {
    let (mut now, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for b in text.bytes() {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') | (false, _, b'"') => in_string = !in_string,
            (false, _, b'[' | b'{') => {
                now += 1;
                deepest = deepest.max(now);
            }
            (false, _, b']' | b'}') => now = now.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_are_mended_in_place_and_pairs_kept() {
        let mend = |s: &str| mend_surrogates(s.as_bytes()).map(|m| String::from_utf8(m).unwrap());
        assert_eq!(
            mend(r#"{"a":"\ud800"}"#).as_deref(),
            Some(r#"{"a":"\ufffd"}"#)
        );
        assert_eq!(
            mend(r#"{"a":"x\uDC00y"}"#).as_deref(),
            Some(r#"{"a":"x\ufffdy"}"#)
        );
        // A high half followed by another high half: both lone.
        assert_eq!(
            mend(r#"["\ud800\ud800\udc00"]"#).as_deref(),
            Some(r#"["\ufffd\ud800\udc00"]"#)
        );
        for kept in [
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"\\ud800"}"#,
            r#"{"a":"\"\u0041"}"#,
            r#"{"\u00e9":1}"#,
        ] {
            assert_eq!(mend(kept), None, "{kept}");
        }
    }

    #[test]
    fn depth_counts_containers_outside_strings() {
        assert_eq!(depth(r#"{"a":[1,{"b":"[[[{"}]}"#), 3);
        assert_eq!(depth(r#""\"[""#), 0);
        assert_eq!(depth("7"), 0);
    }
}
