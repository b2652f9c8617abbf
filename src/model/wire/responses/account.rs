//! The ChatGPT account a Codex access token belongs to, read from the token's own claims (a
//! JSON Web Token): the Codex backend wants it in `ChatGPT-Account-ID`.

use serde_json::Value;

/// Longest token read: anything longer is not a login's access token.
const TOKEN_MAX: usize = 64 * 1024;

/// The `chatgpt_account_id` claim (`None`: not a JWT, or no such claim).
pub fn chatgpt_account_id(token: &str) -> Option<String> {
    if token.len() > TOKEN_MAX {
        return None;
    }
    let mut parts = token.trim().split('.');
    let (_header, payload) = (parts.next()?, parts.next()?);
    let claims: Value = serde_json::from_slice(&base64url(payload)?).ok()?;
    let id = claims
        .get("https://api.openai.com/auth")?
        .get("chatgpt_account_id")?
        .as_str()?
        .trim();
    // A header value may hold no line break or other control character.
    (!id.is_empty() && !id.chars().any(char::is_control)).then(|| id.to_string())
}

/// Base64url without padding (a JWT's parts); `None` on any other character.
fn base64url(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token whose payload is `claims` (header and signature are not checked).
    fn token(claims: &str) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut payload = String::new();
        for chunk in claims.as_bytes().chunks(3) {
            let n =
                chunk.iter().fold(0u32, |a, b| (a << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                payload.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        format!("eyJhbGciOiJSUzI1NiJ9.{payload}.sig")
    }

    #[test]
    fn the_account_claim_is_read_from_the_token() {
        let t =
            token(r#"{"exp":1,"https://api.openai.com/auth":{"chatgpt_account_id":"acc-FAKE"}}"#);
        assert_eq!(chatgpt_account_id(&t).as_deref(), Some("acc-FAKE"));
        assert_eq!(chatgpt_account_id(&token(r#"{"exp":1}"#)), None);
        let forged = token(r#"{"https://api.openai.com/auth":{"chatgpt_account_id":"a\r\nX: y"}}"#);
        assert_eq!(chatgpt_account_id(&forged), None, "no header injection");
        assert_eq!(chatgpt_account_id("sk-plain-api-key"), None);
        assert_eq!(chatgpt_account_id("a.b*c.d"), None);
        assert_eq!(chatgpt_account_id(""), None);
    }
}
