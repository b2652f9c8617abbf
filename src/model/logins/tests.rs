//! The logins' unit tests: what the file's fields mean, the files and the lock, and whole
//! renewals against a token endpoint on this machine, driven by a real poll.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::jwt::token_with;
use super::state::{self, Decision};
use super::*;
use crate::util::{ScratchDir, unix_now};

const HOUR: f64 = 3600.0;

fn nous_token(exp: f64) -> String {
    token_with(&json!({"exp": exp as i64, "scope": "inference:invoke"}))
}

fn codex_token(exp: f64) -> String {
    token_with(
        &json!({"exp": exp as i64, "https://api.openai.com/auth": {"chatgpt_account_id": "acc-1"}}),
    )
}

fn nous_state(access: &str, refresh: Option<&str>) -> Value {
    let mut s = json!({"access_token": access, "agent_key": access, "scope": "inference:invoke",
        "client_id": "hermes-cli", "portal_base_url": "https://portal.nousresearch.com",
        "label": "mine"});
    if let Some(rt) = refresh {
        s["refresh_token"] = rt.into();
    }
    s
}

// ---- what the fields mean -------------------------------------------------------------------

#[test]
fn a_nous_token_is_used_until_two_minutes_before_it_expires() {
    let now = unix_now();
    let fresh = nous_token(now + HOUR);
    let s = nous_state(&fresh, Some("rt-1"));
    assert_eq!(state::decide(Kind::Nous, &s, now), Decision::Use(fresh));
    let soon = nous_state(&nous_token(now + 100.0), Some("rt-1"));
    assert_eq!(state::decide(Kind::Nous, &soon, now), Decision::Refresh);
    let gone = nous_state(&nous_token(now - HOUR), None);
    match state::decide(Kind::Nous, &gone, now) {
        Decision::Refuse(why) => assert!(
            why.contains("invoke_jwt_expiring") && why.contains("hermes auth add nous"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    // Without the inference scope (stored or claimed) it is renewed.
    let mut unscoped = nous_state(
        &token_with(&json!({"exp": (now + HOUR) as i64})),
        Some("rt"),
    );
    unscoped["scope"] = Value::Null;
    assert_eq!(state::decide(Kind::Nous, &unscoped, now), Decision::Refresh);
    // No exp: the stored expiry decides, and none known is as good as expiring.
    let no_exp = token_with(&json!({"scp": ["inference:invoke"]}));
    let mut s = nous_state(&no_exp, Some("rt"));
    assert_eq!(state::decide(Kind::Nous, &s, now), Decision::Refresh);
    s["expires_at"] = iso_time::iso(now + HOUR).into();
    assert_eq!(state::decide(Kind::Nous, &s, now), Decision::Use(no_exp));
}

#[test]
fn a_nous_key_that_is_not_a_jwt_is_renewed_or_else_sent_as_it_is() {
    let s = json!({"access_token": "eyJ.access", "agent_key": "eyJ.agent-key"});
    assert_eq!(
        state::decide(Kind::Nous, &s, unix_now()),
        Decision::Use("eyJ.agent-key".into())
    );
    let s = json!({"access_token": "opaque", "refresh_token": "rt"});
    assert_eq!(state::decide(Kind::Nous, &s, unix_now()), Decision::Refresh);
    match state::decide(Kind::Nous, &Value::Null, unix_now()) {
        Decision::Refuse(why) => assert!(why.contains("not logged into Nous Portal"), "{why}"),
        other => panic!("{other:?}"),
    }
    match state::decide(Kind::Nous, &json!({"refresh_token": "rt"}), unix_now()) {
        Decision::Refuse(why) => assert_eq!(why, "No access token found for Nous Portal login."),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_codex_token_is_renewed_within_120_seconds_of_its_exp() {
    let now = unix_now();
    let login = |access: &str| json!({"tokens": {"access_token": access, "refresh_token": "rt"}});
    let fresh = codex_token(now + 121.0 + 5.0);
    assert_eq!(
        state::decide(Kind::Codex, &login(&fresh), now),
        Decision::Use(fresh)
    );
    assert_eq!(
        state::decide(Kind::Codex, &login(&codex_token(now + 119.0)), now),
        Decision::Refresh
    );
    // Not a JWT, or no exp: never expiring (Hermes' rule).
    assert_eq!(
        state::decide(Kind::Codex, &login("opaque"), now),
        Decision::Use("opaque".into())
    );
    let no_exp = token_with(&json!({"sub": "x"}));
    assert_eq!(
        state::decide(Kind::Codex, &login(&no_exp), now),
        Decision::Use(no_exp)
    );
    for (s, said) in [
        (
            Value::Null,
            "No Codex credentials stored. Run `hermes auth` to authenticate.",
        ),
        (
            json!({"tokens": "x"}),
            "Codex auth state is missing tokens.",
        ),
        (
            json!({"tokens": {"refresh_token": "rt"}}),
            "Codex auth is missing access_token.",
        ),
        (
            json!({"tokens": {"access_token": "at"}}),
            "Codex auth is missing refresh_token.",
        ),
    ] {
        match state::decide(Kind::Codex, &s, now) {
            Decision::Refuse(why) => assert!(why.starts_with(said), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn each_nous_answer_shape() {
    let ok = state::nous_answer(
        200,
        br#"{"access_token":"a","refresh_token":"r","expires_in":3600}"#,
    )
    .unwrap();
    assert_eq!(ok["refresh_token"], "r");
    let e = state::nous_answer(200, br#"{"token_type":"Bearer"}"#).unwrap_err();
    assert_eq!(
        (e.message.as_str(), e.relogin),
        ("Refresh response missing access_token", true)
    );
    let e = state::nous_answer(
        400,
        br#"{"error":"invalid_grant","error_description":"Refresh token expired"}"#,
    )
    .unwrap_err();
    assert_eq!(e.message, "Refresh token expired");
    assert!(state::nous_terminal(&e));
    for reused in [
        &br#"{"error":"refresh_token_reused"}"#[..],
        br#"{"error":"invalid_request","error_description":"Token reuse detected"}"#,
    ] {
        let e = state::nous_answer(400, reused).unwrap_err();
        assert!(
            e.message
                .starts_with("Nous Portal detected refresh-token reuse"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .ends_with("Re-authenticate with: hermes auth add nous")
        );
        assert!(e.relogin);
    }
    let e = state::nous_answer(503, b"<html>busy</html>").unwrap_err();
    assert!(
        e.message.starts_with("Refresh token exchange failed"),
        "{}",
        e.message
    );
    let e = state::nous_answer(500, br#"{"error":"server_error"}"#).unwrap_err();
    assert!(!state::nous_terminal(&e), "a server error keeps the tokens");
}

#[test]
fn each_codex_answer_shape() {
    assert_eq!(
        state::codex_answer(
            200,
            None,
            br#"{"access_token":" new ","refresh_token":"rt2"}"#
        )
        .unwrap(),
        ("new".to_string(), Some("rt2".to_string()))
    );
    assert_eq!(
        state::codex_answer(200, None, br#"{"access_token":"new"}"#).unwrap(),
        ("new".to_string(), None)
    );
    let e = state::codex_answer(200, None, b"nope").unwrap_err();
    assert_eq!(e.message, "Codex token refresh returned invalid JSON.");
    let e = state::codex_answer(200, None, br#"{"id_token":"x"}"#).unwrap_err();
    assert_eq!(
        e.message,
        "Codex token refresh response was missing access_token."
    );
    let e = state::codex_answer(429, Some(30.0), b"").unwrap_err();
    assert_eq!(
        (e.message.as_str(), e.relogin),
        (
            "Codex provider quota exhausted (429); retry after 30s. Credentials are still valid.",
            false
        )
    );
    let e = state::codex_answer(429, None, b"").unwrap_err();
    assert!(
        e.message.contains("retry after the usage limit resets"),
        "{}",
        e.message
    );
    let e = state::codex_answer(401, None, br#"{"error":"refresh_token_reused"}"#).unwrap_err();
    assert_eq!(e.message, state::CODEX_REUSED);
    assert!(e.message.contains("run `hermes auth`"));
    let e = state::codex_answer(
        400,
        None,
        br#"{"error":"invalid_grant","error_description":"expired"}"#,
    )
    .unwrap_err();
    assert_eq!(
        (e.message.as_str(), e.relogin),
        ("Codex token refresh failed: expired", true)
    );
    let e = state::codex_answer(
        400,
        None,
        br#"{"error":{"code":"token_expired","message":"gone"}}"#,
    )
    .unwrap_err();
    assert_eq!(
        (e.message.as_str(), e.code.as_str(), e.relogin),
        ("Codex token refresh failed: gone", "token_expired", false)
    );
    let e = state::codex_answer(403, None, b"").unwrap_err();
    assert_eq!(
        (e.message.as_str(), e.relogin),
        ("Codex token refresh failed with status 403.", true)
    );
}

#[test]
fn a_nous_refresh_rotates_the_tokens_and_makes_the_new_one_the_key() {
    let now = unix_now();
    let new = nous_token(now + HOUR);
    let mut s = nous_state("old", Some("rt-1"));
    let answer = json!({"access_token": new, "refresh_token": "rt-2", "expires_in": 3600,
        "inference_base_url": "https://evil.example/v1"});
    state::nous_refreshed(
        &mut s,
        answer.as_object().unwrap(),
        "https://portal.nousresearch.com",
        now,
    )
    .unwrap();
    assert_eq!(
        (s["access_token"].as_str(), s["agent_key"].as_str()),
        (Some(new.as_str()), Some(new.as_str()))
    );
    assert_eq!(s["refresh_token"], "rt-2");
    assert_eq!(
        s["inference_base_url"],
        state::NOUS_INFERENCE,
        "an untrusted URL is not kept"
    );
    assert_eq!(
        s["agent_key_expires_at"],
        iso_time::iso((now + HOUR).trunc())
    );
    assert_eq!(
        (s["label"].as_str(), s["agent_key_reused"].as_bool()),
        (Some("mine"), Some(false))
    );
    assert_eq!(state::decide(Kind::Nous, &s, now), Decision::Use(new));
    // A token that cannot carry inference is refused, but its rotated refresh token is kept.
    let mut s = nous_state("old", Some("rt-1"));
    let answer = json!({"access_token": "opaque", "refresh_token": "rt-3"});
    let why = state::nous_refreshed(&mut s, answer.as_object().unwrap(), state::NOUS_PORTAL, now)
        .unwrap_err();
    assert!(why.contains("access_token_not_jwt"), "{why}");
    assert_eq!(s["refresh_token"], "rt-3");
}

#[test]
fn a_codex_refresh_keeps_the_other_tokens_and_mirrors_the_pool() {
    let mut auth = json!({
        "providers": {"openai-codex": {"tokens": {"access_token": "old", "refresh_token": "rt-1",
            "id_token": "idt"}, "auth_mode": "chatgpt", "label": "work"}},
        "credential_pool": {"openai-codex": [
            {"source": "device_code", "access_token": "old", "last_status": "exhausted"},
            {"source": "manual:device_code", "access_token": "old", "last_error_code": 401},
            {"source": "manual:device_code", "access_token": "other-account", "last_status": "ok"},
            {"source": "manual:api_key", "access_token": "sk-x"}]}});
    state::codex_refreshed(&mut auth, "new", Some("rt-2"), unix_now());
    let c = &auth["providers"]["openai-codex"];
    assert_eq!(
        c["tokens"],
        json!({"access_token": "new", "refresh_token": "rt-2", "id_token": "idt"})
    );
    assert!(c["last_refresh"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        (c["auth_mode"].as_str(), c["label"].as_str()),
        (Some("chatgpt"), Some("work"))
    );
    let pool = auth["credential_pool"]["openai-codex"].as_array().unwrap();
    assert_eq!(
        (
            pool[0]["access_token"].as_str(),
            pool[0]["refresh_token"].as_str()
        ),
        (Some("new"), Some("rt-2"))
    );
    assert_eq!(pool[0]["last_status"], Value::Null);
    assert_eq!(
        (
            pool[1]["access_token"].as_str(),
            &pool[1]["last_error_code"]
        ),
        (Some("new"), &Value::Null)
    );
    assert_eq!(
        (
            pool[2]["access_token"].as_str(),
            pool[2]["last_status"].as_str()
        ),
        (Some("other-account"), Some("ok"))
    );
    assert_eq!(pool[3]["access_token"], "sk-x");
    // A file without a pool gets none.
    let mut bare = json!({"providers": {"openai-codex": {"tokens": {"access_token": "old"}}}});
    state::codex_refreshed(&mut bare, "new", None, unix_now());
    assert!(bare.get("credential_pool").is_none(), "{bare}");
    state::sync_nous_pool(&mut bare, &json!({}));
    state::drop_nous_pool_entries(&mut bare);
    assert!(bare.get("credential_pool").is_none(), "{bare}");
}

#[test]
fn the_portal_asked_is_one_hermes_trusts() {
    let at = |url: &str| json!({"portal_base_url": url});
    assert_eq!(
        state::nous_portal(&at("https://portal.nousresearch.com/"), None),
        state::NOUS_PORTAL
    );
    assert_eq!(
        state::nous_portal(&at("http://127.0.0.1:8080"), None),
        "http://127.0.0.1:8080"
    );
    assert_eq!(
        state::nous_portal(&at("https://evil.example"), None),
        state::NOUS_PORTAL
    );
    assert_eq!(
        state::nous_portal(&at("http://portal.nousresearch.com"), None),
        state::NOUS_PORTAL
    );
    assert_eq!(
        state::nous_portal(&at("https://evil.example"), Some("http://10.1.1.1:9/")),
        "http://10.1.1.1:9"
    );
    assert_eq!(state::nous_portal(&Value::Null, None), state::NOUS_PORTAL);
}

#[test]
fn shared_nous_tokens_are_adopted_only_when_fresher() {
    let mut s = nous_state("a1", Some("rt-1"));
    s["expires_at"] = iso_time::iso(2000.0).into();
    let same =
        json!({"access_token": "a0", "refresh_token": "rt-1", "expires_at": iso_time::iso(1000.0)});
    assert!(!state::merge_shared_nous(&mut s, &same));
    assert_eq!(s["access_token"], "a1");
    let rotated = json!({"access_token": "a2", "refresh_token": "rt-2", "expires_at": iso_time::iso(3000.0),
        "client_id": ""});
    assert!(state::merge_shared_nous(&mut s, &rotated));
    assert_eq!(
        (
            s["access_token"].as_str(),
            s["refresh_token"].as_str(),
            s["client_id"].as_str()
        ),
        (Some("a2"), Some("rt-2"), Some("hermes-cli"))
    );
    let shared = state::shared_nous(&s, 0.0).unwrap();
    assert_eq!(
        (shared["_schema"].as_i64(), shared["refresh_token"].as_str()),
        (Some(1), Some("rt-2"))
    );
    assert!(shared.get("agent_key").is_none());
}

#[test]
fn forms_are_encoded() {
    assert_eq!(
        state::codex_form("a+b/c=d e"),
        "grant_type=refresh_token&refresh_token=a%2Bb%2Fc%3Dd+e&client_id=app_EMoamEEZ73f0CkXaXp7hrann"
    );
    assert_eq!(
        state::nous_form("hermes-cli"),
        "grant_type=refresh_token&client_id=hermes-cli"
    );
}

// ---- the files ------------------------------------------------------------------------------

fn files(dir: &Path) -> Files {
    Files::of(dir, dir.join("shared"), Some(dir))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_save_keeps_every_field_and_is_hermes_json() {
    let d = ScratchDir::new("logins-save");
    let f = files(d.path());
    assert_eq!(
        f.read().unwrap(),
        json!({"version": 1, "providers": {}}),
        "no file: Hermes' empty store"
    );
    let original = json!({"version": 1, "providers": {"nous": {"label": "café ✓", "x": [1, {"y": null}]},
        "spotify": {"token": "keep"}}, "credential_pool": {"nous": []}, "suppressed_sources": {"a": ["b"]},
        "future_field": 42});
    std::fs::write(&f.auth, original.to_string()).unwrap();
    std::fs::set_permissions(&f.auth, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut auth = f.read().unwrap();
    auth["providers"]["nous"]["access_token"] = "new".into();
    f.save(&mut auth, 1_777_633_200.0).unwrap();
    let text = std::fs::read_to_string(&f.auth).unwrap();
    assert!(
        text.ends_with("}\n") && text.contains("\n  \"providers\": {"),
        "{text}"
    );
    assert!(
        text.contains(r#""caf\u00e9 \u2713""#),
        "non-ASCII escaped as Python does: {text}"
    );
    let back: Value = serde_json::from_str(&text).unwrap();
    let mut expected = original.clone();
    expected["providers"]["nous"]["access_token"] = "new".into();
    expected["updated_at"] = "2026-05-01T11:00:00+00:00".into();
    assert_eq!(back, expected);
    assert_eq!(mode(&f.auth), 0o600);
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
}

#[test]
fn links_fifos_and_non_objects_are_not_read() {
    let d = ScratchDir::new("logins-read");
    let f = files(d.path());
    let elsewhere = d.path().join("elsewhere.json");
    std::fs::write(&elsewhere, "{}").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &f.auth).unwrap();
    assert!(f.read().unwrap_err().contains("symbolic link"));
    std::fs::remove_file(&f.auth).unwrap();
    nix::unistd::mkfifo(&f.auth, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let started = Instant::now();
    assert!(f.read().is_err(), "a FIFO is refused");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "and never waited on"
    );
    std::fs::remove_file(&f.auth).unwrap();
    std::fs::write(&f.auth, "[1]").unwrap();
    assert!(f.read().unwrap_err().contains("not a JSON object"));
    // The token never reaches the message.
    std::fs::write(
        &f.auth,
        r#"{"providers": {"nous": {"refresh_token": "rt-secret"#,
    )
    .unwrap();
    assert!(!f.read().unwrap_err().contains("rt-secret"));
}

#[test]
fn the_lock_is_tried_never_waited_on_and_let_go() {
    let d = ScratchDir::new("logins-lock");
    let f = files(d.path());
    let held = f.try_lock().unwrap().expect("a free lock is taken");
    let started = Instant::now();
    assert!(f.try_lock().unwrap().is_none(), "a held lock is busy");
    assert!(started.elapsed() < Duration::from_millis(500));
    drop(held);
    assert!(f.try_lock().unwrap().is_some(), "let go when dropped");
    assert_eq!(mode(&f.lock), 0o600);
}

#[test]
fn the_shared_folder_is_hermes_root_s() {
    let user = Path::new("/home/u");
    assert_eq!(
        store::shared_dir(Path::new("/opt/data"), Some(user), None),
        Path::new("/opt/data/shared")
    );
    assert_eq!(
        store::shared_dir(Path::new("/opt/data/profiles/coder"), Some(user), None),
        Path::new("/opt/data/shared")
    );
    assert_eq!(
        store::shared_dir(
            Path::new("/home/u/.hermes/profiles/coder"),
            Some(user),
            None
        ),
        Path::new("/home/u/.hermes/shared")
    );
    assert_eq!(
        store::shared_dir(Path::new("/x"), Some(user), Some("~/s")),
        Path::new("/home/u/s")
    );
}

// ---- whole renewals -------------------------------------------------------------------------

/// A token endpoint on this machine answering one request with `status` and `body`; the
/// request's text comes out of the receiver.
fn token_endpoint(status: u16, body: &str) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let reply = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).unwrap_or(0);
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + len || n == 0 {
                    let _ = tx.send(text);
                    break;
                }
            } else if n == 0 {
                break;
            }
        }
        let _ = s.write_all(reply.as_bytes());
    });
    (url, rx)
}

/// A port nothing listens on (a renewal that POSTs fails at once).
fn nowhere() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Drive `r` on a real poll until it ends (10 s at most); its outcome and notices.
fn drive(r: &mut Refresh) -> (Outcome, Vec<String>) {
    let mut poll = mio::Poll::new().unwrap();
    let slot = crate::reactor::Slot::on(&poll, mio::Token(1)).unwrap();
    let mut events = mio::Events::with_capacity(8);
    let mut notices = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let now = Instant::now();
        assert!(now < give_up, "the renewal never ended");
        match r.advance(&slot, now, &mut notices) {
            Outcome::Wait(at) => {
                let wait = at.map_or(Duration::from_millis(100), |at| {
                    at.saturating_duration_since(now)
                });
                poll.poll(&mut events, Some(wait.min(Duration::from_millis(100))))
                    .unwrap();
            }
            done => return (done, notices),
        }
    }
}

fn keeper(dir: &Path, kind: Kind, url: &str, auth: &Value) -> Keeper {
    std::fs::write(
        dir.join("auth.json"),
        serde_json::to_string_pretty(auth).unwrap(),
    )
    .unwrap();
    let login = Login {
        kind,
        url: Some(url.into()),
        timeout: Duration::from_secs(5),
    };
    Keeper::new(login, files(dir), auth)
}

fn on_disk(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("auth.json")).unwrap()).unwrap()
}

#[test]
fn an_expired_nous_token_is_renewed_saved_and_not_renewed_again() {
    let d = ScratchDir::new("logins-nous");
    let now = unix_now();
    let new = nous_token(now + HOUR);
    let answer = json!({"access_token": new, "refresh_token": "rt-2", "expires_in": 3600,
        "token_type": "Bearer", "scope": "inference:invoke"});
    let (url, request) = token_endpoint(200, &answer.to_string());
    let auth = json!({"version": 1, "active_provider": "openai-codex",
        "providers": {"nous": nous_state(&nous_token(now - 10.0), Some("rt-1")), "other": {"k": 1}},
        "credential_pool": {"nous": [{"id": "p1", "source": "device_code", "refresh_token": "rt-1",
            "label": "seeded"}, {"id": "p2", "source": "manual:api_key", "access_token": "k"}]}});
    let k = keeper(d.path(), Kind::Nous, &url, &auth);
    assert_eq!(k.decide(now), Decision::Refresh);
    let (outcome, notices) = drive(&mut k.refresh(Instant::now()));
    assert_eq!(outcome, Outcome::Key(new.clone()));
    assert!(notices.is_empty(), "{notices:?}");
    let req = request.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        req.starts_with("POST /api/oauth/token HTTP/1.1\r\n"),
        "{req}"
    );
    assert!(req.contains("x-nous-refresh-token: rt-1\r\n"), "{req}");
    assert!(
        req.ends_with("\r\n\r\ngrant_type=refresh_token&client_id=hermes-cli"),
        "{req}"
    );
    let disk = on_disk(d.path());
    let nous = &disk["providers"]["nous"];
    assert_eq!(
        (nous["access_token"].as_str(), nous["agent_key"].as_str()),
        (Some(new.as_str()), Some(new.as_str()))
    );
    assert_eq!(
        (nous["refresh_token"].as_str(), nous["label"].as_str()),
        (Some("rt-2"), Some("mine"))
    );
    assert_eq!(nous["portal_base_url"].as_str(), Some(url.as_str()));
    assert_eq!(
        (
            disk["providers"]["other"]["k"].as_i64(),
            disk["active_provider"].as_str()
        ),
        (Some(1), Some("nous"))
    );
    let shared: Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("shared/nous_auth.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        shared["refresh_token"], "rt-2",
        "the other profiles see the rotated token"
    );
    assert_eq!(
        k.decide(unix_now()),
        Decision::Use(new.clone()),
        "the next call sends it as it is"
    );
    assert!(
        k.files().try_lock().unwrap().is_some(),
        "the lock was let go"
    );
    let pool = &disk["credential_pool"]["nous"];
    assert_eq!(
        (
            pool[0]["refresh_token"].as_str(),
            pool[0]["agent_key"].as_str()
        ),
        (Some("rt-2"), Some(new.as_str()))
    );
    assert_eq!(
        (pool[0]["label"].as_str(), pool[0]["id"].as_str()),
        (Some("seeded"), Some("p1"))
    );
    assert_eq!(
        pool[1],
        json!({"id": "p2", "source": "manual:api_key", "access_token": "k"})
    );
}

#[test]
fn a_held_lock_delays_the_renewal_without_blocking() {
    let d = ScratchDir::new("logins-busy");
    let now = unix_now();
    let new = codex_token(now + HOUR);
    let (url, request) = token_endpoint(200, &json!({"access_token": new}).to_string());
    let auth = json!({"providers": {"openai-codex": {"tokens": {"access_token": codex_token(now - 5.0), "refresh_token": "rt-1"}}}});
    let k = keeper(d.path(), Kind::Codex, &url, &auth);
    let other = k.files().try_lock().unwrap().unwrap();
    let mut r = k.refresh(Instant::now());
    let mut notices = Vec::new();
    let poll = mio::Poll::new().unwrap();
    let slot = crate::reactor::Slot::on(&poll, mio::Token(1)).unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        match r.advance(&slot, started, &mut notices) {
            Outcome::Wait(Some(at)) => assert!(
                at <= started + Duration::from_millis(50),
                "tried again soon"
            ),
            other => panic!("{other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "a try returns at once"
        );
    }
    assert_eq!(notices.len(), 1, "said once: {notices:?}");
    assert!(notices[0].contains("another Hermes process"), "{notices:?}");
    assert!(
        request.try_recv().is_err(),
        "nothing sent while the lock is busy"
    );
    assert_eq!(on_disk(d.path()), auth, "nothing written");
    drop(other);
    assert_eq!(drive(&mut r).0, Outcome::Key(new.clone()));
    assert!(request.try_recv().unwrap().contains("refresh_token=rt-1"));
    let disk = on_disk(d.path());
    assert_eq!(
        disk["providers"]["openai-codex"]["tokens"]["access_token"],
        new.as_str()
    );
    assert_eq!(
        disk["providers"]["openai-codex"]["tokens"]["refresh_token"], "rt-1",
        "not rotated: kept"
    );
    assert_eq!(disk["active_provider"], "openai-codex");
    assert!(
        k.files().try_lock().unwrap().is_some(),
        "the lock was let go"
    );
}

#[test]
fn a_lock_held_past_hermes_timeout_ends_the_renewal() {
    let d = ScratchDir::new("logins-timeout");
    let auth =
        json!({"providers": {"nous": nous_state(&nous_token(unix_now() - 5.0), Some("rt-1"))}});
    let k = keeper(d.path(), Kind::Nous, &nowhere(), &auth);
    let _other = k.files().try_lock().unwrap().unwrap();
    let start = Instant::now();
    let mut r = k.refresh(start);
    let poll = mio::Poll::new().unwrap();
    let slot = crate::reactor::Slot::on(&poll, mio::Token(1)).unwrap();
    let mut notices = Vec::new();
    assert!(matches!(
        r.advance(&slot, start, &mut notices),
        Outcome::Wait(_)
    ));
    let later = start + Duration::from_secs(15);
    assert_eq!(
        r.advance(&slot, later, &mut notices),
        Outcome::Failed("Timed out waiting for auth store lock".into())
    );
    assert_eq!(on_disk(d.path()), auth);
}

#[test]
fn a_token_another_process_renewed_is_taken_without_asking() {
    let d = ScratchDir::new("logins-adopt");
    let now = unix_now();
    let old = json!({"providers": {"openai-codex": {"tokens": {"access_token": codex_token(now - 5.0), "refresh_token": "rt-1"}}}});
    let k = keeper(d.path(), Kind::Codex, &nowhere(), &old);
    let fresh = codex_token(now + HOUR);
    let renewed = json!({"providers": {"openai-codex": {"tokens": {"access_token": fresh, "refresh_token": "rt-2"}}}});
    std::fs::write(d.path().join("auth.json"), renewed.to_string()).unwrap();
    assert_eq!(
        drive(&mut k.refresh(Instant::now())).0,
        Outcome::Key(fresh.clone())
    );
    assert_eq!(k.decide(now), Decision::Use(fresh));
    assert_eq!(on_disk(d.path()), renewed, "nothing rewritten");
}

#[test]
fn a_refused_token_is_renewed_though_fresh_unless_another_one_is_there_by_then() {
    let d = ScratchDir::new("logins-refused");
    let now = unix_now();
    let refused = codex_token(now + HOUR);
    let login = |access: &str| json!({"providers": {"openai-codex": {"tokens": {"access_token": access, "refresh_token": "rt-1"}}}});
    // auth.json still holds the refused token: renewed, though its expiry is an hour away.
    let new = codex_token(now + 2.0 * HOUR);
    let (url, request) = token_endpoint(200, &json!({"access_token": new}).to_string());
    let k = keeper(d.path(), Kind::Codex, &url, &login(&refused));
    assert_eq!(k.decide(now), Decision::Use(refused.clone()));
    let (outcome, _) = drive(&mut k.renew_refused(refused.clone(), Instant::now()));
    assert_eq!(outcome, Outcome::Key(new.clone()));
    assert!(request.recv_timeout(Duration::from_secs(5)).is_ok());
    assert_eq!(k.decide(now), Decision::Use(new.clone()));
    // Another process put a different token there meanwhile: that one is taken, nothing asked.
    let k = keeper(d.path(), Kind::Codex, &nowhere(), &login(&refused));
    let other = codex_token(now + 3.0 * HOUR);
    std::fs::write(d.path().join("auth.json"), login(&other).to_string()).unwrap();
    let (outcome, _) = drive(&mut k.renew_refused(refused, Instant::now()));
    assert_eq!(outcome, Outcome::Key(other));
}

#[test]
fn a_spent_nous_refresh_token_ends_the_login_as_hermes_ends_it() {
    let d = ScratchDir::new("logins-reused");
    let (url, _request) = token_endpoint(400, r#"{"error":"refresh_token_reused"}"#);
    let mut auth = json!({"providers": {"nous": nous_state(&nous_token(unix_now() - 5.0), Some("rt-secret"))},
        "credential_pool": {"nous": [{"source": "device_code"}, {"source": "manual:api_key"}]}});
    auth["providers"]["nous"]["portal_base_url"] = url.as_str().into();
    let k = keeper(d.path(), Kind::Nous, &url, &auth);
    std::fs::create_dir_all(d.path().join("shared")).unwrap();
    std::fs::write(d.path().join("shared/nous_auth.json"), "{}").unwrap();
    let (outcome, _) = drive(&mut k.refresh(Instant::now()));
    let Outcome::Failed(why) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        why.starts_with("Nous Portal detected refresh-token reuse"),
        "{why}"
    );
    assert!(!why.contains("rt-secret"));
    let disk = on_disk(d.path());
    let nous = &disk["providers"]["nous"];
    assert!(
        nous.get("refresh_token").is_none() && nous.get("agent_key").is_none(),
        "{nous}"
    );
    assert_eq!(
        (
            nous["last_auth_error"]["code"].as_str(),
            nous["label"].as_str()
        ),
        (Some("refresh_token_reused"), Some("mine"))
    );
    assert_eq!(
        disk["credential_pool"]["nous"],
        json!([{"source": "manual:api_key"}])
    );
    assert!(!d.path().join("shared/nous_auth.json").exists());
    match k.decide(unix_now()) {
        Decision::Refuse(why) => assert!(why.contains("No access token"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_codex_refusal_keeps_the_file_and_says_what_to_do() {
    let d = ScratchDir::new("logins-codex-401");
    let (url, _request) = token_endpoint(
        401,
        r#"{"error":"invalid_grant","error_description":"Refresh token expired"}"#,
    );
    let auth = json!({"providers": {"openai-codex": {"tokens": {"access_token": codex_token(unix_now() - 5.0), "refresh_token": "rt-1"}}}});
    let k = keeper(d.path(), Kind::Codex, &url, &auth);
    assert_eq!(
        drive(&mut k.refresh(Instant::now())).0,
        Outcome::Failed("Codex token refresh failed: Refresh token expired".into())
    );
    assert_eq!(on_disk(d.path()), auth);
    assert_eq!(
        k.decide(unix_now()),
        Decision::Refresh,
        "tried again on the next call"
    );
    // An endpoint that is not there ends the renewal with a reason, not a hang.
    let k = keeper(d.path(), Kind::Codex, &nowhere(), &auth);
    let Outcome::Failed(why) = drive(&mut k.refresh(Instant::now())).0 else {
        panic!()
    };
    assert!(
        why.starts_with("could not renew the OpenAI Codex login's token"),
        "{why}"
    );
}

#[test]
fn the_environment_sets_up_the_logins() {
    let vars = |pairs: &'static [(&str, &str)]| {
        move |n: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    };
    let l = Login::of(
        Kind::Nous,
        &vars(&[
            ("NOUS_PORTAL_BASE_URL", "http://p"),
            ("HERMES_NOUS_TIMEOUT_SECONDS", "3"),
        ]),
    );
    assert_eq!(
        (l.url.as_deref(), l.timeout),
        (Some("http://p"), Duration::from_secs(3))
    );
    let l = Login::of(
        Kind::Codex,
        &vars(&[
            ("HERMES_CODEX_TOKEN_URL", "http://t/token"),
            ("HERMES_CODEX_REFRESH_TIMEOUT_SECONDS", "1"),
        ]),
    );
    assert_eq!(
        (l.url.as_deref(), l.timeout),
        (Some("http://t/token"), Duration::from_secs(5))
    );
    let l = Login::of(Kind::Codex, &vars(&[]));
    assert_eq!((l.url, l.timeout), (None, Duration::from_secs(20)));
}
