//! What a login's state in auth.json says and how a refresh changes it, as Hermes decides and
//! writes it (`hermes_cli/auth.py`): pure functions over the JSON, no files, no network.

use serde_json::{Map, Value, json};

use super::{Kind, iso_time, jwt};

/// Renew a token this close to its expiry (Hermes' `ACCESS_TOKEN_REFRESH_SKEW_SECONDS` and
/// `CODEX_ACCESS_TOKEN_REFRESH_SKEW_SECONDS`).
pub const SKEW_SECS: f64 = 120.0;

pub const NOUS_CLIENT_ID: &str = "hermes-cli";
pub const NOUS_PORTAL: &str = "https://portal.nousresearch.com";
pub const NOUS_INFERENCE: &str = "https://inference-api.nousresearch.com/v1";
const NOUS_INVOKE_SCOPE: &str = "inference:invoke";
/// The hosts a stored portal URL may name (Hermes' allowlist: a poisoned value would receive
/// the refresh token).
const NOUS_PORTAL_HOSTS: &[&str] = &["portal.nousresearch.com", "localhost", "127.0.0.1"];
const NOUS_INFERENCE_HOST: &str = "inference-api.nousresearch.com";

pub const CODEX_CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
pub const CODEX_TOKEN_URL: &str = "https://auth.openai.com/oauth/token";

/// The Nous message when the login is gone.
pub const NOUS_NOT_LOGGED_IN: &str =
    "Hermes is not logged into Nous Portal: run `hermes auth add nous` (or `hermes model`)";

/// What a call does with the login's token now.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Send this key.
    Use(String),
    /// Renew the token first.
    Refresh,
    /// Neither: the text says why (and which `hermes` command logs in again).
    Refuse(String),
}

/// A login's state in its file (`providers.<id>` of auth.json, `claudeAiOauth` of Claude Code's;
/// `Null` when absent).
pub fn login_state(doc: &Value, kind: Kind) -> &Value {
    match kind {
        Kind::ClaudeCode => super::claude::state(doc),
        _ => &doc["providers"][kind.id()],
    }
}

/// Hermes' `clear_provider_auth(provider)` on `auth`: the login under `providers`, the
/// `credential_pool` entry and the `active_provider` mark dropped; whether anything was.
pub fn forget(auth: &mut Value, provider: &str) -> bool {
    let mut cleared = false;
    for section in ["providers", "credential_pool"] {
        if let Some(map) = auth.get_mut(section).and_then(Value::as_object_mut) {
            cleared |= map.remove(provider).is_some();
        }
    }
    if auth["active_provider"].as_str() == Some(provider) {
        auth["active_provider"] = Value::Null;
        cleared = true;
    }
    cleared
}

/// The key a login holds, whatever its age (resolution: is there a login at all?), or
/// Hermes' message for what is missing.
pub fn stored_key(kind: Kind, state: &Value) -> Result<String, String> {
    match kind {
        Kind::Nous => {
            if !state.is_object() {
                return Err(NOUS_NOT_LOGGED_IN.into());
            }
            nous_key(state)
                .map(str::to_string)
                .ok_or_else(|| "No access token found for Nous Portal login.".into())
        }
        Kind::Codex => codex_tokens(state).map(|(access, _)| access.to_string()),
        Kind::ClaudeCode => super::claude::stored_key(state),
    }
}

/// What a call does now with `state`, at Unix time `now`.
pub fn decide(kind: Kind, state: &Value, now: f64) -> Decision {
    match kind {
        Kind::Nous => {
            let Some(access) = text(state, "access_token") else {
                return match stored_key(kind, state) {
                    // Only an agent key, nothing to renew it with: the server judges it.
                    Ok(key) if text(state, "refresh_token").is_none() => Decision::Use(key),
                    Ok(_) => {
                        Decision::Refuse("No access token found for Nous Portal login.".into())
                    }
                    Err(why) => Decision::Refuse(why),
                };
            };
            match nous_status(access, &state["scope"], text(state, "expires_at"), now) {
                None => Decision::Use(access.to_string()),
                Some(_) if text(state, "refresh_token").is_some() => Decision::Refresh,
                // Not a JWT and nothing to renew it with (a hand-written or pre-JWT file): its
                // agent key is sent and the server judges it. Hermes refuses it.
                Some("access_token_not_jwt") => {
                    Decision::Use(nous_key(state).unwrap_or(access).to_string())
                }
                Some(reason) => Decision::Refuse(format!(
                    "Nous Portal access token is not a usable inference JWT ({reason}) and no \
                     refresh token is available. Re-authenticate with: hermes auth add nous"
                )),
            }
        }
        Kind::Codex => match codex_tokens(state) {
            Err(why) => Decision::Refuse(why),
            Ok((access, _)) if codex_expiring(access, now, SKEW_SECS) => Decision::Refresh,
            Ok((access, _)) => Decision::Use(access.to_string()),
        },
        Kind::ClaudeCode => super::claude::decide(state, now),
    }
}

/// A non-empty string field.
fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v[key].as_str().filter(|s| !s.trim().is_empty())
}

/// Nous' key: the agent key (Hermes keeps it a copy of the access token), else the access
/// token.
fn nous_key(state: &Value) -> Option<&str> {
    text(state, "agent_key").or_else(|| text(state, "access_token"))
}

/// Codex's access and refresh tokens, or Hermes' message for what is missing.
fn codex_tokens(state: &Value) -> Result<(&str, &str), String> {
    if !state.is_object() {
        return Err("No Codex credentials stored. Run `hermes auth` to authenticate.".into());
    }
    let tokens = &state["tokens"];
    if !tokens.is_object() {
        return Err(
            "Codex auth state is missing tokens. Run `hermes auth` to re-authenticate.".into(),
        );
    }
    let missing = |field: &str| {
        format!("Codex auth is missing {field}. Run `hermes auth` to re-authenticate.")
    };
    let access = text(tokens, "access_token").ok_or_else(|| missing("access_token"))?;
    let refresh = text(tokens, "refresh_token").ok_or_else(|| missing("refresh_token"))?;
    Ok((access.trim(), refresh.trim()))
}

/// Why a Nous token cannot carry inference now (Hermes' reasons), `None` when it can: it must
/// be a JWT, hold the `inference:invoke` scope (stored or claimed), and live past the skew
/// (its `exp`, else the stored expiry).
pub fn nous_status(
    token: &str,
    stored_scope: &Value,
    expires_at: Option<&str>,
    now: f64,
) -> Option<&'static str> {
    let Some(claims) = jwt::claims(token).filter(|c| !c.is_empty()) else {
        return Some("access_token_not_jwt");
    };
    let claimed = |key: &str| claims.get(key).unwrap_or(&Value::Null);
    let has_scope = [stored_scope, claimed("scope"), claimed("scp")]
        .iter()
        .any(|s| scopes(s).any(|s| s == NOUS_INVOKE_SCOPE));
    if !has_scope {
        return Some("missing_inference_invoke_scope");
    }
    match claims.get("exp").and_then(Value::as_f64) {
        Some(exp) if exp <= now + SKEW_SECS => Some("invoke_jwt_expiring"),
        Some(_) => None,
        None => match expires_at.and_then(iso_time::parse) {
            Some(at) if at > now + SKEW_SECS => None,
            _ => Some("invoke_jwt_expiry_unknown_or_expiring"),
        },
    }
}

/// The scopes of a scope value: a string split at spaces and commas, or a list of them.
fn scopes(v: &Value) -> Box<dyn Iterator<Item = &str> + '_> {
    match v {
        Value::String(s) => Box::new(s.split([' ', ',']).filter(|p| !p.is_empty())),
        Value::Array(list) => Box::new(list.iter().flat_map(scopes)),
        _ => Box::new(std::iter::empty()),
    }
}

/// Whether a Codex access token expires within `skew` seconds (a token that is not a JWT, or
/// has no `exp`, never does: Hermes' rule).
pub fn codex_expiring(token: &str, now: f64, skew: f64) -> bool {
    jwt::expiry(token).is_some_and(|exp| exp <= now + skew.max(0.0))
}

/// Nous' portal: the environment's (trusted as it is), else the stored one when Hermes trusts
/// it (https on the portal's host, or plain http on this machine), else the portal's own.
pub fn nous_portal(state: &Value, env_portal: Option<&str>) -> String {
    if let Some(url) = env_portal.map(base).filter(|u| !u.is_empty()) {
        return url;
    }
    let Some(stored) = text(state, "portal_base_url").map(base) else {
        return NOUS_PORTAL.into();
    };
    let host = super::super::providers::host_of(&stored);
    let loopback_http =
        stored.starts_with("http://") && matches!(host.as_str(), "localhost" | "127.0.0.1");
    match NOUS_PORTAL_HOSTS.contains(&host.as_str())
        && (stored.starts_with("https://") || loopback_http)
    {
        true => stored,
        false => NOUS_PORTAL.into(),
    }
}

/// A base URL without surrounding space or trailing slashes.
fn base(url: &str) -> String {
    url.trim().trim_end_matches('/').to_string()
}

/// An inference URL from the portal, if Hermes would trust it (https on Nous' inference host).
fn trusted_inference_url(v: &Value) -> Option<String> {
    let url = base(v.as_str()?);
    (url.starts_with("https://") && super::super::providers::host_of(&url) == NOUS_INFERENCE_HOST)
        .then_some(url)
}

/// Adopt the shared Nous store's tokens when they are another generation (a different refresh
/// token) or live longer; whether they were adopted.
pub fn merge_shared_nous(state: &mut Value, shared: &Value) -> bool {
    let (Some(shared_refresh), Some(_)) =
        (text(shared, "refresh_token"), text(shared, "access_token"))
    else {
        return false;
    };
    let expiry = |v: &Value| {
        text(v, "expires_at")
            .and_then(iso_time::parse)
            .unwrap_or(0.0)
    };
    let changed = shared_refresh.trim() != text(state, "refresh_token").unwrap_or("").trim();
    if !changed && expiry(shared) <= expiry(state) {
        return false;
    }
    let Some(map) = state.as_object_mut() else {
        return false;
    };
    for key in [
        "access_token",
        "refresh_token",
        "token_type",
        "scope",
        "client_id",
        "portal_base_url",
        "inference_base_url",
        "obtained_at",
        "expires_at",
    ] {
        match &shared[key] {
            Value::Null => {}
            Value::String(s) if s.is_empty() => {}
            v => {
                map.insert(key.into(), v.clone());
            }
        }
    }
    true
}

/// The shared Nous store's content for `state` (Hermes' `_write_shared_nous_state`), `None`
/// when it holds nothing worth sharing.
pub fn shared_nous(state: &Value, now: f64) -> Option<Value> {
    let (refresh, access) = (text(state, "refresh_token")?, text(state, "access_token")?);
    let or = |key: &str, default: &str| text(state, key).unwrap_or(default).to_string();
    Some(json!({
        "_schema": 1,
        "access_token": access,
        "refresh_token": refresh,
        "token_type": or("token_type", "Bearer"),
        "scope": or("scope", NOUS_INVOKE_SCOPE),
        "client_id": or("client_id", NOUS_CLIENT_ID),
        "portal_base_url": or("portal_base_url", NOUS_PORTAL),
        "inference_base_url": or("inference_base_url", NOUS_INFERENCE),
        "obtained_at": state["obtained_at"],
        "expires_at": state["expires_at"],
        "updated_at": iso_time::iso(now),
    }))
}

/// A token endpoint's refusal: Hermes' message for the user, its code, and whether only a new
/// login helps (then the stored tokens are dead).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub message: String,
    pub code: String,
    pub relogin: bool,
}

/// The form Nous' token endpoint is sent (the refresh token goes in a header, not here).
pub fn nous_form(client_id: &str) -> String {
    format!(
        "grant_type=refresh_token&client_id={}",
        form_value(client_id)
    )
}

/// The form OpenAI's token endpoint is sent.
pub fn codex_form(refresh_token: &str) -> String {
    format!(
        "grant_type=refresh_token&refresh_token={}&client_id={CODEX_CLIENT_ID}",
        form_value(refresh_token)
    )
}

/// `application/x-www-form-urlencoded` of one value.
pub(super) fn form_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Nous' token endpoint's answer: its payload, or why not (Hermes' `_refresh_access_token`).
pub fn nous_answer(status: u16, body: &[u8]) -> Result<Map<String, Value>, Refusal> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    if status == 200 {
        return match parsed {
            Some(Value::Object(map))
                if map
                    .get("access_token")
                    .and_then(Value::as_str)
                    .is_some_and(|t| !t.is_empty()) =>
            {
                Ok(map)
            }
            _ => Err(Refusal {
                message: "Refresh response missing access_token".into(),
                code: "invalid_token".into(),
                relogin: true,
            }),
        };
    }
    let Some(Value::Object(err)) = parsed else {
        return Err(Refusal {
            message: format!("Refresh token exchange failed (HTTP {status})"),
            code: "invalid_grant".into(),
            relogin: true,
        });
    };
    let code = match &err.get("error") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "invalid_grant".into(),
        Some(other) => other.to_string(),
    };
    let mut message = err
        .get("error_description")
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
        .map(|d| crate::util::clip(d, 500))
        .unwrap_or_else(|| "Refresh token exchange failed".into());
    let mut relogin = matches!(
        code.as_str(),
        "invalid_grant" | "invalid_token" | "refresh_token_reused"
    );
    if code == "refresh_token_reused" || message.to_ascii_lowercase().contains("reuse") {
        message = NOUS_REUSED.into();
        relogin = true;
    }
    Err(Refusal {
        message,
        code,
        relogin,
    })
}

/// Hermes' words when the portal saw a refresh token spent twice.
pub const NOUS_REUSED: &str = "Nous Portal detected refresh-token reuse and revoked this session.\n\
This usually means an external process (monitoring script, custom self-heal hook, or another \
Hermes install sharing ~/.hermes/auth.json) called POST /api/oauth/token with Hermes's refresh \
token without persisting the rotated token back.\n\
Nous refresh tokens are single-use — only Hermes may call the refresh endpoint. For health \
checks, use `hermes auth status` instead.\n\
Re-authenticate with: hermes auth add nous";

/// Whether a Nous refusal means the tokens are dead (Hermes then removes them).
pub fn nous_terminal(r: &Refusal) -> bool {
    r.relogin
        && matches!(
            r.code.as_str(),
            "invalid_grant" | "invalid_token" | "refresh_token_reused"
        )
}

/// Nous' state after the portal's `answer` at Unix time `now` (Hermes'
/// `resolve_nous_runtime_credentials`): the rotated tokens, their expiry, the trusted inference
/// URL; then, if the new token can carry inference, the agent key fields. `Err`: it cannot
/// (the state is still to be saved: its refresh token is the live one).
pub fn nous_refreshed(
    state: &mut Value,
    answer: &Map<String, Value>,
    portal: &str,
    now: f64,
) -> Result<(), String> {
    if !state.is_object() {
        *state = json!({});
    }
    let old = state.clone();
    let pick = |key: &str| {
        answer
            .get(key)
            .filter(|v| !v.is_null() && v.as_str() != Some(""))
            .cloned()
    };
    let ttl = match answer.get("expires_in") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0.0),
        _ => 0.0,
    }
    .max(0.0)
    .trunc();
    let Some(map) = state.as_object_mut() else {
        return Err("Failed to resolve a Nous inference API key".into());
    };
    let access = answer.get("access_token").cloned().unwrap_or_default();
    map.insert("access_token".into(), access);
    if let Some(rt) = pick("refresh_token") {
        map.insert("refresh_token".into(), rt);
    }
    let token_type = pick("token_type")
        .or_else(|| pick_of(&old, "token_type"))
        .unwrap_or_else(|| "Bearer".into());
    map.insert("token_type".into(), token_type);
    if let Some(scope) = pick("scope").or_else(|| pick_of(&old, "scope")) {
        map.insert("scope".into(), scope);
    }
    let inference = answer
        .get("inference_base_url")
        .and_then(trusted_inference_url)
        .unwrap_or_else(|| NOUS_INFERENCE.into());
    map.insert("inference_base_url".into(), inference.into());
    map.insert("obtained_at".into(), iso_time::iso(now).into());
    map.insert("expires_in".into(), json!(ttl as u64));
    map.insert("expires_at".into(), iso_time::iso(now + ttl).into());
    map.insert("portal_base_url".into(), portal.into());
    if text(state, "client_id").is_none() {
        state["client_id"] = NOUS_CLIENT_ID.into();
    }
    let token = text(state, "access_token").unwrap_or("").to_string();
    if let Some(reason) = nous_status(&token, &state["scope"], text(state, "expires_at"), now) {
        return Err(format!(
            "Nous Portal access token is not a usable inference JWT ({reason}). \
             Re-authenticate with: hermes auth add nous"
        ));
    }
    select_nous_key(state, now);
    Ok(())
}

fn pick_of(v: &Value, key: &str) -> Option<Value> {
    text(v, key).map(|s| s.into())
}

/// The access token made the agent key (Hermes' `_set_nous_agent_key_from_invoke_jwt`), its
/// expiry the JWT's own.
pub fn select_nous_key(state: &mut Value, now: f64) {
    let Some(token) = text(state, "access_token").map(str::to_string) else {
        return;
    };
    let expires_at = jwt::expiry(&token)
        .map(iso_time::iso)
        .or_else(|| text(state, "expires_at").map(str::to_string));
    let expires_in = match expires_at.as_deref().and_then(iso_time::parse) {
        Some(at) => (at - now).max(0.0) as u64,
        None => state["expires_in"].as_u64().unwrap_or(0),
    };
    let obtained = match (
        text(state, "agent_key"),
        text(state, "agent_key_obtained_at"),
    ) {
        (Some(k), Some(at)) if k == token => at.to_string(),
        _ => iso_time::iso(now),
    };
    if let Some(at) = &expires_at {
        state["expires_at"] = at.as_str().into();
        state["expires_in"] = json!(expires_in);
    }
    state["agent_key"] = token.into();
    state["agent_key_id"] = Value::Null;
    state["agent_key_expires_at"] = expires_at.map_or(Value::Null, Value::from);
    state["agent_key_expires_in"] = json!(expires_in);
    state["agent_key_reused"] = false.into();
    state["agent_key_obtained_at"] = obtained.into();
}

/// The pool entry Hermes seeded from the Nous login (`device_code`) given the login's new
/// state, as Hermes' next pool load would: a pool read before that never holds a spent token.
pub fn sync_nous_pool(auth: &mut Value, state: &Value) {
    let Some(entries) = pool_mut(auth, "nous") else {
        return;
    };
    for entry in entries.iter_mut().filter(|e| e["source"] == "device_code") {
        for key in [
            "access_token",
            "refresh_token",
            "expires_at",
            "token_type",
            "scope",
            "client_id",
            "portal_base_url",
            "inference_base_url",
            "agent_key",
            "agent_key_expires_at",
            "obtained_at",
            "expires_in",
            "agent_key_id",
            "agent_key_expires_in",
            "agent_key_reused",
            "agent_key_obtained_at",
        ] {
            entry[key] = state[key].clone();
        }
    }
}

/// Nous' state after a terminal refusal: the dead tokens and their key removed, the error
/// kept for `hermes auth status` (Hermes' `_quarantine_nous_oauth_state`).
pub fn nous_quarantined(state: &mut Value, refusal: &Refusal, now: f64) {
    let Some(map) = state.as_object_mut() else {
        return;
    };
    for key in [
        "access_token",
        "refresh_token",
        "expires_at",
        "expires_in",
        "obtained_at",
        "agent_key",
        "agent_key_id",
        "agent_key_expires_at",
        "agent_key_expires_in",
        "agent_key_reused",
        "agent_key_obtained_at",
    ] {
        map.remove(key);
    }
    map.insert(
        "last_auth_error".into(),
        json!({
            "provider": "nous",
            "code": refusal.code,
            "message": refusal.message,
            "reason": "runtime_access_refresh_failure",
            "relogin_required": true,
            "at": iso_time::iso(now),
        }),
    );
}

/// The pool entries Hermes seeded from the dead Nous login, removed.
pub fn drop_nous_pool_entries(auth: &mut Value) {
    if let Some(entries) = pool_mut(auth, "nous") {
        entries.retain(|e| {
            !matches!(
                e["source"].as_str(),
                Some("device_code" | "manual:device_code")
            )
        });
    }
}

/// OpenAI's token endpoint's answer: the new access token and, when it rotated, the refresh
/// token; or why not (Hermes' `refresh_codex_oauth_pure`).
pub fn codex_answer(
    status: u16,
    retry_after: Option<f64>,
    body: &[u8],
) -> Result<(String, Option<String>), Refusal> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    if status == 429 {
        let message = match retry_after {
            Some(secs) => format!(
                "Codex provider quota exhausted (429); retry after {}s. Credentials are still valid.",
                secs as u64
            ),
            None => "Codex provider quota exhausted (429). Credentials are still valid; retry \
                     after the usage limit resets."
                .into(),
        };
        return Err(Refusal {
            message,
            code: "codex_rate_limited".into(),
            relogin: false,
        });
    }
    if status != 200 {
        let mut code = "codex_refresh_failed".to_string();
        let mut message = format!("Codex token refresh failed with status {status}.");
        let said = |m: &str| {
            format!(
                "Codex token refresh failed: {}",
                crate::util::clip(m.trim(), 500)
            )
        };
        match parsed.as_ref().map(|v| &v["error"]) {
            Some(Value::Object(e)) => {
                if let Some(c) = e
                    .get("code")
                    .or(e.get("type"))
                    .and_then(Value::as_str)
                    .filter(|c| !c.trim().is_empty())
                {
                    code = c.trim().to_string();
                }
                if let Some(m) = e
                    .get("message")
                    .and_then(Value::as_str)
                    .filter(|m| !m.trim().is_empty())
                {
                    message = said(m);
                }
            }
            Some(Value::String(c)) if !c.trim().is_empty() => {
                code = c.trim().to_string();
                let v = parsed.as_ref().unwrap_or(&Value::Null);
                if let Some(m) = text(v, "error_description").or(text(v, "message")) {
                    message = said(m);
                }
            }
            _ => {}
        }
        let mut relogin = matches!(
            code.as_str(),
            "invalid_grant" | "invalid_token" | "invalid_request"
        );
        if code == "refresh_token_reused" {
            message = CODEX_REUSED.into();
            relogin = true;
        }
        relogin |= matches!(status, 401 | 403);
        return Err(Refusal {
            message,
            code,
            relogin,
        });
    }
    let Some(payload) = parsed else {
        return Err(Refusal {
            message: "Codex token refresh returned invalid JSON.".into(),
            code: "codex_refresh_invalid_json".into(),
            relogin: true,
        });
    };
    let Some(access) = text(&payload, "access_token") else {
        return Err(Refusal {
            message: "Codex token refresh response was missing access_token.".into(),
            code: "codex_refresh_missing_access_token".into(),
            relogin: true,
        });
    };
    let refresh = text(&payload, "refresh_token").map(|r| r.trim().to_string());
    Ok((access.trim().to_string(), refresh))
}

/// Hermes' words when OpenAI saw the refresh token spent by another client.
pub const CODEX_REUSED: &str = "Codex refresh token was already consumed by another client (e.g. \
Codex CLI or VS Code extension). Run `codex` in your terminal to generate fresh tokens, then run \
`hermes auth` to re-authenticate.";

/// Codex's state after a refresh (Hermes' `_save_codex_tokens`): the tokens replaced (other keys
/// of `tokens` kept), `last_refresh`, `auth_mode`; and the pool entries that mirror this login
/// given the same tokens (`_sync_codex_pool_entries`).
pub fn codex_refreshed(auth: &mut Value, access: &str, refresh: Option<&str>, now: f64) {
    let last_refresh = iso_time::iso_z(now);
    let state = &mut auth["providers"][Kind::Codex.id()];
    if !state.is_object() {
        *state = json!({});
    }
    let previous_access = state["tokens"]["access_token"].as_str().map(str::to_string);
    if !state["tokens"].is_object() {
        state["tokens"] = json!({});
    }
    state["tokens"]["access_token"] = access.into();
    if let Some(rt) = refresh {
        state["tokens"]["refresh_token"] = rt.into();
    }
    let refresh_now = state["tokens"]["refresh_token"].clone();
    state["last_refresh"] = last_refresh.as_str().into();
    state["auth_mode"] = "chatgpt".into();
    let Some(entries) = pool_mut(auth, Kind::Codex.id()) else {
        return;
    };
    for entry in entries.iter_mut().filter(|e| e.is_object()) {
        let mirrors = match entry["source"].as_str() {
            Some("device_code") => true,
            // An alias of this login (its token was this login's), not another account.
            Some("manual:device_code") => {
                previous_access.is_some()
                    && entry["access_token"].as_str() == previous_access.as_deref()
            }
            _ => false,
        };
        if !mirrors {
            continue;
        }
        entry["access_token"] = access.into();
        if refresh_now.is_string() {
            entry["refresh_token"] = refresh_now.clone();
        }
        entry["last_refresh"] = last_refresh.as_str().into();
        for key in [
            "last_status",
            "last_status_at",
            "last_error_code",
            "last_error_reason",
            "last_error_message",
            "last_error_reset_at",
        ] {
            entry[key] = Value::Null;
        }
    }
}

/// `state` put back as the login's, which Hermes then makes the active provider (every save of
/// an auth.json login does).
pub fn put_login(auth: &mut Value, kind: Kind, state: Value) {
    if kind == Kind::ClaudeCode {
        return super::claude::put(auth, state);
    }
    if !auth.is_object() {
        *auth = json!({"version": 1, "providers": {}});
    }
    if !auth["providers"].is_object() {
        auth["providers"] = json!({});
    }
    auth["providers"][kind.id()] = state;
    auth["active_provider"] = kind.id().into();
}

/// The refresh token of a login's state, to send.
pub fn refresh_token(kind: Kind, state: &Value) -> Option<&str> {
    match kind {
        Kind::Nous => text(state, "refresh_token"),
        Kind::Codex => text(&state["tokens"], "refresh_token"),
        Kind::ClaudeCode => super::claude::refresh_token(state),
    }
    .map(str::trim)
}

/// A provider's list in auth.json's `credential_pool`, when there is one (nothing is added).
fn pool_mut<'a>(auth: &'a mut Value, id: &str) -> Option<&'a mut Vec<Value>> {
    auth.get_mut("credential_pool")?.get_mut(id)?.as_array_mut()
}
