//! The claims of a JSON Web Token, read as Hermes reads them (`_decode_jwt_claims`): three
//! dot-separated parts, the middle one base64url JSON naming an object. The signature is not
//! checked: the claims only tell when to renew a token and whose it is.

use serde_json::{Map, Value};

/// Longer tokens are not read (a login's tokens are a few KiB).
const TOKEN_MAX: usize = 64 * 1024;

/// The claims object (`None`: not three parts, not base64url, not a JSON object).
pub fn claims(token: &str) -> Option<Map<String, Value>> {
    if token.len() > TOKEN_MAX || token.matches('.').count() != 2 {
        return None;
    }
    let payload = token.split('.').nth(1)?;
    match serde_json::from_slice(&crate::model::connect::base64_decode(payload)?).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// The `exp` claim in Unix seconds (`None`: no claims, or no numeric `exp`).
pub fn expiry(token: &str) -> Option<f64> {
    claims(token)?.get("exp")?.as_f64()
}

/// A token whose claims are `claims` (for tests: header and signature are placeholders).
#[cfg(test)]
pub fn token_with(claims: &Value) -> String {
    format!(
        "eyJhbGciOiJub25lIn0.{}.sig",
        base64url_encode(claims.to_string().as_bytes())
    )
}

#[cfg(test)]
pub fn base64url_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |a, b| (a << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_of_a_token() {
        let t = token_with(&json!({"exp": 1777636800, "scope": "inference:invoke"}));
        assert_eq!(expiry(&t), Some(1777636800.0));
        assert_eq!(claims(&t).unwrap()["scope"], "inference:invoke");
        // Hermes' own example token (its payload is unpadded).
        let hermes = "eyJhbGciOiJFUzI1NiJ9.eyJzY29wZSI6ImluZmVyZW5jZTppbnZva2UiLCJleHAiOjE3Nzc2MzY4MDB9.FAKESIG";
        assert_eq!(expiry(hermes), Some(1777636800.0));
        assert_eq!(expiry(&token_with(&json!({"exp": 12.5}))), Some(12.5));
    }

    #[test]
    fn what_is_not_a_token_has_no_claims() {
        for bad in [
            "",
            "sk-plain-api-key",
            "eyJ.agent-key",
            "a.b.c.d",
            "a..b",
            "a.!!!.b",
            "a.e30xx.b", // a dangling character
        ] {
            assert_eq!(claims(bad), None, "{bad:?}");
        }
        // Base64 of text that is not JSON, and of JSON that is not an object.
        let not_json = format!("h.{}.s", base64url_encode(b"not json"));
        assert_eq!(claims(&not_json), None);
        assert_eq!(claims(&token_with(&json!([1, 2]))), None);
        // Claims without a usable exp.
        assert_eq!(expiry(&token_with(&json!({"sub": "x"}))), None);
        assert_eq!(expiry(&token_with(&json!({"exp": "soon"}))), None);
        assert!(claims(&token_with(&json!({}))).is_some());
        let huge = format!("a.{}.b", "A".repeat(TOKEN_MAX));
        assert_eq!(claims(&huge), None);
    }
}
