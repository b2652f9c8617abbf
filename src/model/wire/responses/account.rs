//! The ChatGPT account a Codex access token belongs to, read from the token's own claims (a
//! JSON Web Token, `logins::jwt`): the Codex backend wants it in `ChatGPT-Account-ID`.

use crate::model::logins::jwt;

/// The `chatgpt_account_id` claim (`None`: not a JWT, or no such claim).
pub fn chatgpt_account_id(token: &str) -> Option<String> {
    let claims = jwt::claims(token.trim())?;
    let id = claims
        .get("https://api.openai.com/auth")?
        .get("chatgpt_account_id")?
        .as_str()?
        .trim();
    // A header value may hold no line break or other control character.
    (!id.is_empty() && !id.chars().any(char::is_control)).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_account_claim_is_read_from_the_token() {
        let t = jwt::token_with(
            &json!({"exp": 1, "https://api.openai.com/auth": {"chatgpt_account_id": "acc-FAKE"}}),
        );
        assert_eq!(chatgpt_account_id(&t).as_deref(), Some("acc-FAKE"));
        assert_eq!(
            chatgpt_account_id(&jwt::token_with(&json!({"exp": 1}))),
            None
        );
        let forged = jwt::token_with(
            &json!({"https://api.openai.com/auth": {"chatgpt_account_id": "a\r\nX: y"}}),
        );
        assert_eq!(chatgpt_account_id(&forged), None, "no header injection");
        assert_eq!(chatgpt_account_id("sk-plain-api-key"), None);
        assert_eq!(chatgpt_account_id("a.b*c.d"), None);
        assert_eq!(chatgpt_account_id(""), None);
    }
}
