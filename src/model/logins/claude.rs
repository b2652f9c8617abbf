//! Claude Code's login, which Hermes sends to provider `anthropic` (`agent/anthropic_adapter.py`):
//! the OAuth tokens Claude Code keeps in `~/.claude/.credentials.json` under `claudeAiOauth`
//! (`accessToken`, `refreshToken`, `expiresAt` in Unix milliseconds, `scopes`). A token within a
//! minute of its expiry is renewed at Anthropic's token endpoint and written back as Hermes
//! writes it. Pure functions over the JSON: no files, no network.

use serde_json::{Value, json};

use super::state::{Decision, form_value};

/// Claude Code's OAuth client, which a renewal names.
pub const CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";
/// Anthropic's token endpoints, asked in this order (the second is the older host).
pub const TOKEN_URLS: [&str; 2] = [
    "https://platform.claude.com/v1/oauth/token",
    "https://console.anthropic.com/v1/oauth/token",
];
/// The field of the credentials file that holds the login.
const FIELD: &str = "claudeAiOauth";
/// Renew a token this close to its expiry (Hermes' 60 s).
const SKEW_MS: f64 = 60_000.0;
/// How long a renewed token lives when the endpoint does not say (Hermes' default).
const DEFAULT_LIFETIME_SECS: f64 = 3600.0;

/// What to run when there is no usable login.
const LOG_IN: &str = "run `claude /login` (or `claude setup-token`) to log Claude Code in";

/// The login in the credentials file (`Null` when there is none).
pub fn state(doc: &Value) -> &Value {
    &doc[FIELD]
}

/// `state` put back into the credentials file, every other field of it kept.
pub fn put(doc: &mut Value, state: Value) {
    if !doc.is_object() {
        *doc = json!({});
    }
    doc[FIELD] = state;
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v[key].as_str().map(str::trim).filter(|s| !s.is_empty())
}

/// The access token the login holds, whatever its age.
pub fn stored_key(state: &Value) -> Result<String, String> {
    text(state, "accessToken")
        .map(str::to_string)
        .ok_or_else(|| {
            format!("Claude Code holds no login in ~/.claude/.credentials.json: {LOG_IN}")
        })
}

pub fn refresh_token(state: &Value) -> Option<&str> {
    text(state, "refreshToken")
}

/// When the access token expires (Unix ms); `None`: it carries no expiry (a managed key).
fn expires_at_ms(state: &Value) -> Option<f64> {
    state["expiresAt"].as_f64().filter(|ms| *ms > 0.0)
}

/// Whether the login can be sent at Unix time `now` as it is, or renewed: Hermes uses Claude
/// Code's login only then, and else goes on to the next source of a key.
pub fn usable(state: &Value, now: f64) -> bool {
    stored_key(state).is_ok()
        && (refresh_token(state).is_some()
            || expires_at_ms(state).is_none_or(|exp| now * 1000.0 < exp - SKEW_MS))
}

/// What a call does with the login at Unix time `now`.
pub fn decide(state: &Value, now: f64) -> Decision {
    let key = match stored_key(state) {
        Ok(key) => key,
        Err(why) => return Decision::Refuse(why),
    };
    match expires_at_ms(state) {
        Some(exp) if now * 1000.0 >= exp - SKEW_MS => match refresh_token(state) {
            Some(_) => Decision::Refresh,
            None => Decision::Refuse(format!(
                "Claude Code's token has expired and it holds no refresh token: {LOG_IN}"
            )),
        },
        _ => Decision::Use(key),
    }
}

/// The renewal's form (Hermes sends it form-encoded).
pub fn form(refresh_token: &str) -> String {
    format!(
        "grant_type=refresh_token&refresh_token={}&client_id={CLIENT_ID}",
        form_value(refresh_token)
    )
}

/// A renewal's answer: the new access token, the refresh token if it rotated, and how long the
/// access token lives (seconds); or why not, for the user (never a token).
pub fn answer(status: u16, body: &[u8]) -> Result<(String, Option<String>, f64), String> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let payload = parsed.unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        let code = text(&payload, "error")
            .or_else(|| text(&payload["error"], "type"))
            .map(|c| format!(" ({})", crate::util::clip(c, 100)))
            .unwrap_or_default();
        return Err(format!(
            "Anthropic's token endpoint refused to renew Claude Code's token: HTTP {status}{code}; \
             {LOG_IN}"
        ));
    }
    let Some(access) = text(&payload, "access_token") else {
        return Err("Anthropic's renewal answer holds no access_token".into());
    };
    let lifetime = payload["expires_in"]
        .as_f64()
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_LIFETIME_SECS);
    let refresh = text(&payload, "refresh_token").map(str::to_string);
    Ok((access.to_string(), refresh, lifetime))
}

/// The login after a renewal at Unix time `now` (Hermes' `_write_claude_code_credentials`): the
/// tokens and expiry replaced, the scopes kept.
pub fn refreshed(state: &mut Value, access: &str, refresh: Option<&str>, lifetime: f64, now: f64) {
    if !state.is_object() {
        *state = json!({});
    }
    let kept_refresh = refresh
        .map(str::to_string)
        .or_else(|| refresh_token(state).map(str::to_string));
    state["accessToken"] = access.into();
    if let Some(rt) = kept_refresh {
        state["refreshToken"] = rt.into();
    }
    state["expiresAt"] = (((now + lifetime) * 1000.0) as i64).into();
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: f64 = 1_800_000_000.0;

    fn login(expires_in_secs: f64, refresh: Option<&str>) -> Value {
        let mut v = json!({"accessToken": "sk-ant-oat01-OLD",
            "expiresAt": ((NOW + expires_in_secs) * 1000.0) as i64,
            "scopes": ["user:inference"]});
        if let Some(rt) = refresh {
            v["refreshToken"] = rt.into();
        }
        v
    }

    #[test]
    fn a_token_is_renewed_within_a_minute_of_its_expiry() {
        assert_eq!(
            decide(&login(61.0, Some("rt")), NOW),
            Decision::Use("sk-ant-oat01-OLD".into())
        );
        assert_eq!(decide(&login(59.0, Some("rt")), NOW), Decision::Refresh);
        assert!(matches!(
            decide(&login(-5.0, None), NOW),
            Decision::Refuse(why) if why.contains("claude /login")
        ));
        // No expiry: a managed key, sent as it is.
        let managed = json!({"accessToken": "k"});
        assert_eq!(decide(&managed, NOW), Decision::Use("k".into()));
        assert!(matches!(decide(&Value::Null, NOW), Decision::Refuse(_)));
    }

    #[test]
    fn an_expired_login_without_a_refresh_token_is_not_usable() {
        assert!(usable(&login(-5.0, Some("rt")), NOW));
        assert!(!usable(&login(-5.0, None), NOW));
        assert!(usable(&login(600.0, None), NOW));
        assert!(!usable(&json!({"refreshToken": "rt"}), NOW));
    }

    #[test]
    fn a_renewal_keeps_the_scopes_and_a_refresh_token_that_did_not_rotate() {
        let mut s = login(-5.0, Some("rt-old"));
        let (access, refresh, life) = answer(
            200,
            br#"{"access_token":"sk-ant-oat01-NEW","expires_in":7200}"#,
        )
        .unwrap();
        refreshed(&mut s, &access, refresh.as_deref(), life, NOW);
        assert_eq!(s["accessToken"], "sk-ant-oat01-NEW");
        assert_eq!(s["refreshToken"], "rt-old");
        assert_eq!(s["expiresAt"], ((NOW + 7200.0) * 1000.0) as i64);
        assert_eq!(s["scopes"], json!(["user:inference"]));
        let (_, rotated, life) =
            answer(200, br#"{"access_token":"a","refresh_token":"rt-new"}"#).unwrap();
        assert_eq!((rotated.as_deref(), life), (Some("rt-new"), 3600.0));
    }

    #[test]
    fn a_refusal_names_the_status_and_the_code_never_a_token() {
        let why = answer(
            400,
            br#"{"error":"invalid_grant","refresh_token":"rt-secret"}"#,
        )
        .unwrap_err();
        assert!(why.contains("HTTP 400 (invalid_grant)"), "{why}");
        assert!(!why.contains("rt-secret"));
        assert!(answer(200, b"not json").is_err());
        assert!(answer(200, br#"{"access_token":""}"#).is_err());
    }

    #[test]
    fn the_form_escapes_the_refresh_token() {
        assert_eq!(
            form("a+b/c"),
            format!("grant_type=refresh_token&refresh_token=a%2Bb%2Fc&client_id={CLIENT_ID}")
        );
    }
}
