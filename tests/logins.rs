//! Hermes' own logins renewed as Hermes renews them, black-box: a home whose auth.json holds
//! an expired Nous Portal or OpenAI Codex token as `hermes auth` writes it (or whose user home
//! holds Claude Code's expired login), a local fake of the login's token endpoint (pointed at by
//! `HERMES_PORTAL_BASE_URL` / `HERMES_CODEX_TOKEN_URL` / `HERMES_ANTHROPIC_TOKEN_URL`) and of the
//! model (`NOUS_INFERENCE_BASE_URL` / `HERMES_CODEX_BASE_URL` / `ANTHROPIC_BASE_URL`).

use crate::common;
use crate::mockai;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use mockai::responses;
use mockai::*;
use serde_json::{Value, json};

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A JSON Web Token whose claims are `claims` (the signature is not checked by anyone here).
fn jwt(claims: Value) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = claims.to_string().into_bytes();
    let mut payload = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |a, b| (a << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            payload.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    format!("eyJhbGciOiJFUzI1NiJ9.{payload}.FAKESIG")
}

fn nous_jwt(exp: i64) -> String {
    jwt(json!({"scope": "inference:invoke", "exp": exp}))
}

fn codex_jwt(exp: i64) -> String {
    jwt(json!({"exp": exp, "https://api.openai.com/auth": {"chatgpt_account_id": "acc-FAKE"}}))
}

/// A home whose config.yaml names `provider` and whose auth.json is `auth`.
fn home(tag: &str, provider: &str, model: &str, auth: &Value) -> TempHome {
    let home = TempHome::new(tag);
    let config = format!("model:\n  provider: {provider}\n  default: {model}\n");
    std::fs::write(home.path.join("config.yaml"), config).unwrap();
    std::fs::write(
        home.path.join("auth.json"),
        serde_json::to_string_pretty(auth).unwrap() + "\n",
    )
    .unwrap();
    std::fs::set_permissions(
        home.path.join("auth.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    home
}

/// auth.json after a Nous login whose invoke JWT expired a minute ago (Hermes' fields).
fn expired_nous_login() -> Value {
    let old = nous_jwt(now() - 60);
    json!({
        "version": 1,
        "providers": {"nous": {
            "access_token": old, "refresh_token": "nrt_OLD_0123456789",
            "client_id": "hermes-cli", "portal_base_url": "https://portal.nousresearch.com",
            "inference_base_url": "https://inference-api.nousresearch.com/v1",
            "token_type": "Bearer", "scope": "inference:invoke",
            "obtained_at": "2026-05-01T11:00:00.123456+00:00", "expires_at": "2026-05-01T12:00:00+00:00",
            "agent_key": old, "agent_key_expires_at": "2026-05-01T12:00:00+00:00",
            "tls": {"insecure": false, "ca_bundle": null}, "expires_in": 0, "agent_key_id": null,
            "agent_key_expires_in": 0, "agent_key_reused": false,
            "agent_key_obtained_at": "2026-05-01T11:00:00.234567+00:00", "label": "my portal"},
            "spotify": {"access_token": "spotify-token"}},
        "active_provider": "nous",
        "updated_at": "2026-05-01T11:00:00.345678+00:00",
        "credential_pool": {"openrouter": [{"id": "k1", "source": "manual:api_key"}]},
        "suppressed_sources": {"nous": ["env"]}
    })
}

fn on_disk(home: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(home.join("auth.json")).unwrap()).unwrap()
}

/// A token endpoint answering `status` with `body` to every request.
fn token_endpoint(status: u16, body: Value) -> MockAi {
    let body = body.to_string();
    MockAi::start(move |_| Reply::status(status, &body))
}

fn portal_url(m: &MockAi) -> String {
    format!("http://127.0.0.1:{}", m.port)
}

fn nous_gateway(tag: &str, home: &TempHome, portal: &MockAi, model: &MockAi) -> Gateway {
    Gateway::builder()
        .tag(tag)
        .home(&home.path)
        .env("HERMES_PORTAL_BASE_URL", &portal_url(portal))
        .env("NOUS_INFERENCE_BASE_URL", &model.base_url())
        .start()
}

#[test]
fn an_expired_nous_token_is_renewed_saved_and_sent() {
    let new = nous_jwt(now() + 3600);
    let portal = token_endpoint(
        200,
        json!({"access_token": new, "refresh_token": "nrt_NEW_9876543210",
        "token_type": "Bearer", "scope": "inference:invoke", "expires_in": 3600,
        "inference_base_url": "https://inference-api.nousresearch.com/v1"}),
    );
    let model = MockAi::script(vec![
        Reply::text(&["renewed"], (5, 1)),
        Reply::text(&["again"], (5, 1)),
    ]);
    let before = expired_nous_login();
    let home = home("logins-nous", "nous", "Hermes-4-405B", &before);
    let mut g = nous_gateway("logins-nous", &home, &portal, &model);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.text, "renewed", "{:?}", t.complete);

    // The refresh as Hermes sends it: the refresh token in its header only.
    let asked = portal.wait_requests(1, T).remove(0);
    assert_eq!(
        (asked.method.as_str(), asked.path.as_str()),
        ("POST", "/api/oauth/token")
    );
    assert_eq!(
        asked.header("x-nous-refresh-token"),
        Some("nrt_OLD_0123456789")
    );
    assert_eq!(
        String::from_utf8_lossy(&asked.body_raw),
        "grant_type=refresh_token&client_id=hermes-cli"
    );
    let r = model.wait_requests(1, T).remove(0);
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {new}").as_str())
    );

    // auth.json: the new tokens, every other field as it was, 0600.
    let after = on_disk(&home.path);
    let nous = &after["providers"]["nous"];
    assert_eq!(nous["access_token"], new.as_str());
    assert_eq!(nous["agent_key"], new.as_str());
    assert_eq!(nous["refresh_token"], "nrt_NEW_9876543210");
    assert_ne!(
        nous["agent_key_expires_at"],
        before["providers"]["nous"]["agent_key_expires_at"]
    );
    assert_eq!(nous["label"], "my portal");
    assert_eq!(
        after["providers"]["spotify"],
        before["providers"]["spotify"]
    );
    for kept in [
        "credential_pool",
        "suppressed_sources",
        "active_provider",
        "version",
    ] {
        assert_eq!(after[kept], before[kept], "{kept}");
    }
    assert_ne!(after["updated_at"], before["updated_at"]);
    let mode = std::fs::metadata(home.path.join("auth.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The next prompt sends the renewed token without renewing it again.
    let t = g.run_turn(&s.id, "and again");
    assert_eq!(t.text, "again", "{:?}", t.complete);
    let r = model.wait_requests(2, T).remove(1);
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {new}").as_str())
    );
    assert_eq!(portal.request_count(), 1, "renewed once");

    // No token in what the client was told.
    let said = serde_json::to_string(&g.events_of_session(&s.id)).unwrap();
    assert!(!said.contains("nrt_") && !said.contains(&new), "{said}");
}

#[test]
fn a_refused_nous_refresh_ends_the_prompt_with_hermes_message() {
    for (status, answer, said) in [
        (
            401,
            json!({"error": "invalid_grant", "error_description": "Refresh session has been revoked"}),
            "Refresh session has been revoked",
        ),
        (
            400,
            json!({"error": "refresh_token_reused"}),
            "Nous Portal detected refresh-token reuse and revoked this session.",
        ),
    ] {
        let portal = token_endpoint(status, answer);
        let model = MockAi::script(vec![]);
        let home = home(
            "logins-nous-refused",
            "nous",
            "Hermes-4-405B",
            &expired_nous_login(),
        );
        let mut g = nous_gateway("logins-nous-refused", &home, &portal, &model);
        let s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "hi");
        assert_eq!(t.complete["payload"]["status"], "error", "{:?}", t.complete);
        let error = t.complete["payload"]["error"].as_str().unwrap_or("");
        assert!(error.contains(said), "{error}");
        assert!(
            !error.contains("nrt_OLD"),
            "no token in the message: {error}"
        );
        assert_eq!(
            model.request_count(),
            0,
            "the model is not asked with a dead key"
        );
        // Hermes' quarantine: the dead tokens leave auth.json, the error stays for `hermes auth status`.
        let nous = &on_disk(&home.path)["providers"]["nous"];
        assert!(
            nous.get("refresh_token").is_none() && nous.get("access_token").is_none(),
            "{nous}"
        );
        assert_eq!(nous["last_auth_error"]["relogin_required"], true);
        assert_eq!(nous["label"], "my portal");
        // The next prompt says the login is gone, without asking the portal again.
        let t = g.run_turn(&s.id, "again");
        assert_eq!(t.complete["payload"]["status"], "error");
        assert_eq!(portal.request_count(), 1);
    }
}

#[test]
fn a_lock_held_by_another_process_delays_the_write_not_the_gateway() {
    let new = nous_jwt(now() + 3600);
    let portal = token_endpoint(
        200,
        json!({"access_token": new, "refresh_token": "nrt_NEW", "expires_in": 3600}),
    );
    let model = MockAi::script(vec![Reply::text(&["after the lock"], (5, 1))]);
    let before = expired_nous_login();
    let home = home("logins-lock", "nous", "Hermes-4-405B", &before);
    // Another Hermes process holds auth.json's lock (this test's process is not the gateway).
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.path.join("auth.lock"))
        .unwrap();
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap();
    let mut g = nous_gateway("logins-lock", &home, &portal, &model);
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "hi");
    let waiting = g
        .wait_frame(
            |f| {
                f["params"]["type"] == "status.update"
                    && f["params"]["payload"]["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("another Hermes process"))
            },
            T,
        )
        .unwrap_or_else(|| panic!("no word of the busy lock\n{}", g.diag()));
    assert_eq!(waiting["params"]["session_id"], s.id.as_str());
    // The gateway answers while the prompt waits for the lock.
    for _ in 0..5 {
        let asked = Instant::now();
        g.ping();
        assert!(asked.elapsed() < Duration::from_secs(2), "ping stalled");
    }
    assert_eq!(
        portal.request_count(),
        0,
        "nothing spent while the lock is held"
    );
    assert_eq!(
        on_disk(&home.path),
        before,
        "nothing written while the lock is held"
    );
    drop(held);
    let t = g.finish_turn(&s.id, start, T);
    assert_eq!(t.text, "after the lock", "{:?}", t.complete);
    assert_eq!(portal.request_count(), 1);
    assert_eq!(
        on_disk(&home.path)["providers"]["nous"]["access_token"],
        new.as_str()
    );
}

/// auth.json after a Codex login whose access token expired a minute ago, with the pool entry
/// Hermes seeds from it.
fn expired_codex_login() -> Value {
    let old = codex_jwt(now() - 60);
    json!({"version": 1,
        "providers": {"openai-codex": {"tokens": {"access_token": old, "refresh_token": "rt_OLD",
            "id_token": "idt-old", "account_id": "acc-FAKE"},
            "last_refresh": "2026-05-01T11:00:00.123456Z", "auth_mode": "chatgpt"}},
        "active_provider": "nous",
        "credential_pool": {"openai-codex": [{"id": "FAKE1", "source": "device_code",
            "access_token": old, "refresh_token": "rt_OLD", "last_status": "exhausted"}]}})
}

fn codex_gateway(tag: &str, home: &TempHome, token: &MockAi, model: &MockAi) -> Gateway {
    Gateway::builder()
        .tag(tag)
        .home(&home.path)
        .env(
            "HERMES_CODEX_TOKEN_URL",
            &format!("{}/oauth/token", portal_url(token)),
        )
        .env("HERMES_CODEX_BASE_URL", &model.base_url())
        .start()
}

#[test]
fn an_expired_codex_token_is_renewed_saved_and_sent_with_its_account() {
    let new = codex_jwt(now() + 3600);
    let token = token_endpoint(
        200,
        json!({"access_token": new, "refresh_token": "rt_NEW",
        "id_token": "idt"}),
    );
    let model = MockAi::script(vec![
        responses::reply(
            responses::Answer::new()
                .text("msg_1", &["codex"])
                .completed(responses::usage(5, 0, 1, 0)),
        ),
        responses::reply(
            responses::Answer::new()
                .text("msg_2", &["still"])
                .completed(responses::usage(5, 0, 1, 0)),
        ),
    ]);
    let before = expired_codex_login();
    let home = home("logins-codex", "openai-codex", "gpt-5.2-codex", &before);
    let mut g = codex_gateway("logins-codex", &home, &token, &model);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.text, "codex", "{:?}", t.complete);
    let asked = token.wait_requests(1, T).remove(0);
    assert_eq!(
        (asked.method.as_str(), asked.path.as_str()),
        ("POST", "/oauth/token")
    );
    assert_eq!(
        asked.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(
        String::from_utf8_lossy(&asked.body_raw),
        "grant_type=refresh_token&refresh_token=rt_OLD&client_id=app_EMoamEEZ73f0CkXaXp7hrann"
    );
    let r = model.wait_requests(1, T).remove(0);
    assert_eq!(r.path, "/v1/responses");
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {new}").as_str())
    );
    assert_eq!(r.header("chatgpt-account-id"), Some("acc-FAKE"));
    assert_eq!(r.header("originator"), Some("codex_cli_rs"));
    // What Hermes saves: the tokens (others kept), last_refresh, the login active, the pool.
    let after = on_disk(&home.path);
    let c = &after["providers"]["openai-codex"];
    assert_eq!(c["tokens"]["access_token"], new.as_str());
    assert_eq!(c["tokens"]["refresh_token"], "rt_NEW");
    assert_eq!(
        (
            c["tokens"]["id_token"].as_str(),
            c["tokens"]["account_id"].as_str()
        ),
        (Some("idt-old"), Some("acc-FAKE"))
    );
    assert_ne!(
        c["last_refresh"],
        before["providers"]["openai-codex"]["last_refresh"]
    );
    assert_eq!(after["active_provider"], "openai-codex");
    let pooled = &after["credential_pool"]["openai-codex"][0];
    assert_eq!(
        (
            pooled["access_token"].as_str(),
            pooled["refresh_token"].as_str()
        ),
        (Some(new.as_str()), Some("rt_NEW"))
    );
    assert_eq!(pooled["last_status"], Value::Null);
    // Renewed once.
    next_prompt_sends_without_renewal(&mut g, &s.id, (&model, 2, "still"), &new, &token);
}

/// The next prompt is answered `answer`, its request (the `n`th the model got) sent with
/// `bearer` at once: the token endpoint was asked once in all.
fn next_prompt_sends_without_renewal(
    g: &mut Gateway,
    sid: &str,
    (model, n, answer): (&MockAi, usize, &str),
    bearer: &str,
    token: &MockAi,
) {
    let t = g.run_turn(sid, "more");
    assert_eq!(t.text, answer, "{:?}", t.complete);
    assert_eq!(
        model.wait_requests(n, T)[n - 1].header("authorization"),
        Some(format!("Bearer {bearer}").as_str())
    );
    assert_eq!(token.request_count(), 1);
}

#[test]
fn a_refused_codex_refresh_ends_the_prompt_with_hermes_message() {
    for (status, answer, said) in [
        (
            401,
            json!({"error": "refresh_token_reused"}),
            "Run `codex` in your terminal to generate fresh tokens, then run `hermes auth` to re-authenticate.",
        ),
        (
            400,
            json!({"error": "invalid_grant", "error_description": "Refresh token expired"}),
            "Codex token refresh failed: Refresh token expired",
        ),
        (429, json!({}), "Codex provider quota exhausted (429)"),
    ] {
        let token = token_endpoint(status, answer);
        let model = MockAi::script(vec![]);
        let before = expired_codex_login();
        let home = home(
            "logins-codex-refused",
            "openai-codex",
            "gpt-5.2-codex",
            &before,
        );
        let mut g = codex_gateway("logins-codex-refused", &home, &token, &model);
        let s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "hi");
        assert_eq!(t.complete["payload"]["status"], "error", "{:?}", t.complete);
        let error = t.complete["payload"]["error"].as_str().unwrap_or("");
        assert!(error.contains(said), "{error}");
        assert!(!error.contains("rt_OLD"), "{error}");
        assert_eq!(model.request_count(), 0);
        assert_eq!(
            on_disk(&home.path),
            before,
            "Hermes keeps the Codex login as it was"
        );
    }
}

/// `login` with its tokens replaced by `access` (good for an hour by its claims): a token the
/// server may still refuse (revoked, or expired before its time).
fn live_login(mut login: Value, kind: &str, access: &str) -> Value {
    match kind {
        "nous" => {
            let n = &mut login["providers"]["nous"];
            n["access_token"] = json!(access);
            n["agent_key"] = json!(access);
            n["expires_at"] = json!("2099-01-01T00:00:00+00:00");
            n["agent_key_expires_at"] = json!("2099-01-01T00:00:00+00:00");
        }
        _ => login["providers"]["openai-codex"]["tokens"]["access_token"] = json!(access),
    }
    login
}

fn refused_key() -> Reply {
    Reply::status(401, r#"{"error":{"message":"token revoked"}}"#)
}

#[test]
fn a_codex_token_refused_mid_session_is_renewed_once_and_the_call_sent_again() {
    let revoked = codex_jwt(now() + 3600);
    let new = codex_jwt(now() + 7200);
    let token = token_endpoint(200, json!({"access_token": new, "refresh_token": "rt_NEW"}));
    let answer = |id: &str, text: &str| {
        responses::reply(
            responses::Answer::new()
                .text(id, &[text])
                .completed(responses::usage(5, 0, 1, 0)),
        )
    };
    let model = MockAi::script(vec![
        refused_key(),
        answer("msg_1", "renewed after 401"),
        answer("msg_2", "no renewal now"),
    ]);
    let home = home(
        "logins-codex-401",
        "openai-codex",
        "gpt-5.2-codex",
        &live_login(expired_codex_login(), "openai-codex", &revoked),
    );
    let mut g = codex_gateway("logins-codex-401", &home, &token, &model);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.text, "renewed after 401", "{:?}", t.complete);
    let sent = model.wait_requests(2, T);
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {revoked}").as_str())
    );
    assert_eq!(
        sent[1].header("authorization"),
        Some(format!("Bearer {new}").as_str())
    );
    assert_eq!(sent[0].body, sent[1].body, "the same request, sent again");
    assert_eq!(token.request_count(), 1);
    let c = &on_disk(&home.path)["providers"]["openai-codex"]["tokens"];
    assert_eq!(
        (c["access_token"].as_str(), c["refresh_token"].as_str()),
        (Some(new.as_str()), Some("rt_NEW"))
    );
    next_prompt_sends_without_renewal(&mut g, &s.id, (&model, 3, "no renewal now"), &new, &token);
}

#[test]
fn a_nous_token_refused_again_after_its_renewal_ends_the_prompt() {
    let revoked = nous_jwt(now() + 3600);
    let new = nous_jwt(now() + 7200);
    let portal = token_endpoint(
        200,
        json!({"access_token": new, "refresh_token": "nrt_NEW_9876543210",
        "token_type": "Bearer", "scope": "inference:invoke", "expires_in": 3600}),
    );
    // Refused before and after the renewal: one renewal, one retry, then the error.
    let model = MockAi::script(vec![refused_key(), refused_key(), refused_key()]);
    let home = home(
        "logins-nous-401",
        "nous",
        "Hermes-4-405B",
        &live_login(expired_nous_login(), "nous", &revoked),
    );
    let mut g = nous_gateway("logins-nous-401", &home, &portal, &model);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.complete["payload"]["status"], "error", "{:?}", t.complete);
    let error = t.complete["payload"]["error"].as_str().unwrap_or("");
    assert!(error.contains("HTTP 401"), "{error}");
    assert!(!error.contains(&new) && !error.contains("nrt_"), "{error}");
    let sent = model.wait_requests(2, T);
    assert_eq!(
        sent[1].header("authorization"),
        Some(format!("Bearer {new}").as_str())
    );
    let asked = portal.wait_requests(1, T).remove(0);
    assert_eq!(
        asked.header("x-nous-refresh-token"),
        Some("nrt_OLD_0123456789")
    );
    assert_eq!(
        on_disk(&home.path)["providers"]["nous"]["refresh_token"],
        "nrt_NEW_9876543210",
        "the rotated refresh token is kept"
    );
    // Settled: exactly two calls and one renewal for the prompt.
    assert_eq!((model.request_count(), portal.request_count()), (2, 1));
}

#[test]
fn a_disconnected_login_leaves_auth_json_and_is_no_longer_sent() {
    let key = nous_jwt(now() + 3600);
    let portal = token_endpoint(500, json!({}));
    let model = MockAi::script(vec![Reply::text(&["logged in"], (5, 1))]);
    let mut before = live_login(expired_nous_login(), "nous", &key);
    before["credential_pool"]["nous"] = json!([{"id": "p1", "source": "device_code"}]);
    let home = home("logins-disconnect", "nous", "Hermes-4-405B", &before);
    let mut g = nous_gateway("logins-disconnect", &home, &portal, &model);
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.text, "logged in", "{:?}", t.complete);

    // Another Hermes process writing auth.json: refused, nothing changed, try again.
    let lock = || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.path.join("auth.lock"))
            .unwrap();
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap()
    };
    let held = lock();
    let m = g.expect_code("model.disconnect", json!({"slug": "nous"}), 5035);
    assert!(m.contains("another Hermes process"), "{m}");
    assert_eq!(on_disk(&home.path), before);
    drop(held);

    let r = g.call("model.disconnect", json!({"slug": "nous"}));
    assert_eq!(
        r,
        json!({"slug": "nous", "name": "Nous Portal", "disconnected": true})
    );
    // As `hermes logout nous`: its login, pool entry and active mark gone, the rest kept.
    let after = on_disk(&home.path);
    let mut expected = before.clone();
    expected["providers"]
        .as_object_mut()
        .unwrap()
        .remove("nous");
    expected["credential_pool"]
        .as_object_mut()
        .unwrap()
        .remove("nous");
    expected["active_provider"] = Value::Null;
    expected["updated_at"] = after["updated_at"].clone();
    assert_eq!(after, expected);
    let mode = std::fs::metadata(home.path.join("auth.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // The next prompt ends with the login Hermes asks for; the model is not called again.
    let t = g.run_turn(&s.id, "again");
    assert_eq!(t.complete["payload"]["status"], "error", "{:?}", t.complete);
    let error = t.complete["payload"]["error"].as_str().unwrap_or("");
    assert!(error.contains("not logged into Nous Portal"), "{error}");
    assert_eq!(model.requests().len(), 1);
    assert!(!g.stderr_text().contains(&key));
    g.expect_code("model.disconnect", json!({"slug": "nous"}), 4005);
}

/// Claude Code's credentials file, as Claude Code writes it, under `user_home`.
fn claude_credentials(user_home: &Path) -> std::path::PathBuf {
    user_home.join(".claude").join(".credentials.json")
}

#[test]
fn claude_codes_expired_login_is_renewed_written_back_and_sent_to_anthropic() {
    let token = token_endpoint(
        200,
        json!({"access_token": "sk-ant-oat01-NEW", "refresh_token": "rt-ant-NEW",
            "expires_in": 28800, "token_type": "Bearer"}),
    );
    let model = MockAi::script(vec![
        mockai::anthropic::reply(mockai::anthropic::text_answer(
            &["from claude"],
            mockai::anthropic::Usage(5, 0, 0, 2),
        )),
        mockai::anthropic::reply(mockai::anthropic::text_answer(
            &["again"],
            mockai::anthropic::Usage(5, 0, 0, 1),
        )),
    ]);
    let home = TempHome::new("logins-claude");
    std::fs::write(
        home.path.join("config.yaml"),
        "model:\n  provider: anthropic\n  default: claude-sonnet-4-6\n",
    )
    .unwrap();
    // The user's home is the test's own folder (Claude Code's file lives there).
    let user_home = home.path.join("user");
    let creds = claude_credentials(&user_home);
    std::fs::create_dir_all(creds.parent().unwrap()).unwrap();
    let expired_ms = (now() - 60) * 1000;
    std::fs::write(
        &creds,
        json!({"claudeAiOauth": {"accessToken": "sk-ant-oat01-OLD", "refreshToken": "rt-ant-OLD",
            "expiresAt": expired_ms, "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "max"}, "mcpOAuth": {"keep": "me"}})
        .to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut g = Gateway::builder()
        .tag("logins-claude")
        .home(&home.path)
        .env("HOME", user_home.to_str().unwrap())
        .env(
            "HERMES_ANTHROPIC_TOKEN_URL",
            &format!("{}/v1/oauth/token", portal_url(&token)),
        )
        // Anthropic's own host (an OAuth token goes as a bearer only there), reached through the
        // model's fake as the proxy; the token endpoint's fake is asked directly.
        .env("ANTHROPIC_BASE_URL", "http://api.anthropic.com")
        .env("http_proxy", &portal_url(&model))
        .env("NO_PROXY", "127.0.0.1")
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.text, "from claude", "{:?}", t.complete);
    let asked = token.wait_requests(1, T).remove(0);
    assert_eq!(
        (asked.method.as_str(), asked.path.as_str()),
        ("POST", "/v1/oauth/token")
    );
    assert_eq!(
        String::from_utf8_lossy(&asked.body_raw),
        "grant_type=refresh_token&refresh_token=rt-ant-OLD\
         &client_id=9d1c250a-e61b-44d9-88ed-5944d1962f5e"
    );
    let r = model.wait_requests(1, T).remove(0);
    assert_eq!(r.path, "http://api.anthropic.com/v1/messages");
    assert_eq!(r.header("authorization"), Some("Bearer sk-ant-oat01-NEW"));
    assert_eq!(r.header("x-api-key"), None);
    // Written back as Hermes writes it: the tokens and expiry replaced, the rest kept, 0600.
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&creds).unwrap()).unwrap();
    let login = &after["claudeAiOauth"];
    assert_eq!(
        (
            login["accessToken"].as_str(),
            login["refreshToken"].as_str()
        ),
        (Some("sk-ant-oat01-NEW"), Some("rt-ant-NEW"))
    );
    let expires = login["expiresAt"].as_i64().unwrap();
    assert!(expires > (now() + 28_000) * 1000, "{expires}");
    assert_eq!(login["scopes"], json!(["user:inference", "user:profile"]));
    assert_eq!(login["subscriptionType"], "max");
    assert_eq!(after["mcpOAuth"], json!({"keep": "me"}));
    let mode = std::fs::metadata(&creds).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Renewed once; no token reaches stderr.
    next_prompt_sends_without_renewal(
        &mut g,
        &s.id,
        (&model, 2, "again"),
        "sk-ant-oat01-NEW",
        &token,
    );
    let said = g.stderr_text();
    for secret in [
        "sk-ant-oat01-OLD",
        "sk-ant-oat01-NEW",
        "rt-ant-OLD",
        "rt-ant-NEW",
    ] {
        assert!(!said.contains(secret), "{secret} on stderr: {said}");
    }
}
