//! Hermes features the gateway does not have: each TUI call gets the empty state the TUI
//! renders, or a one-line "not supported" error naming the feature — never "unknown method".

use crate::common;

use common::*;
use serde_json::json;

#[test]
fn empty_states_are_answered_as_the_tui_reads_them() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let r = g.call("rollback.list", json!({"session_id": s.id}));
    assert_eq!(r["enabled"], false, "{r}");
    assert_eq!(r["checkpoints"], json!([]), "{r}");
    // Nothing was ever snapshotted: a restore says so, as Hermes does.
    let r = g.call(
        "rollback.restore",
        json!({"session_id": s.id, "hash": "abcd"}),
    );
    assert_eq!(r["success"], false, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("No checkpoints"),
        "{r}"
    );
    let r = g.call("spawn_tree.list", json!({"session_id": s.id, "limit": 30}));
    assert_eq!(r["entries"], json!([]), "{r}");
    let r = g.call("delegation.status", json!({}));
    assert_eq!(r["active"], json!([]), "{r}");
    let r = g.call("delegation.pause", json!({"paused": true}));
    assert_eq!(r["paused"], true, "{r}");
    g.expect_code("delegation.pause", json!({"paused": "yes"}), -32602);
    let r = g.call("voice.toggle", json!({"action": "status"}));
    assert_eq!(r["enabled"], false, "{r}");
    let r = g.call("clipboard.paste", json!({"session_id": s.id}));
    assert_eq!(r["attached"], false, "{r}");
    assert!(r["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
    let r = g.call("pet.gallery", json!({}));
    assert_eq!(r["pets"], json!([]), "{r}");
    let r = g.call("plugins.manage", json!({"action": "list"}));
    assert_eq!(r["plugins"], json!([]), "{r}");
}

#[test]
fn a_browser_connect_says_why_on_the_session() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let r = g.call(
        "browser.manage",
        json!({"action": "connect", "session_id": s.id, "url": "http://127.0.0.1:9222"}),
    );
    assert_eq!(r["connected"], false, "{r}");
    let ev = g.wait_session_event(&s.id, "browser.progress", secs(5));
    assert!(
        ev["payload"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no browser")),
        "{ev}"
    );
    g.expect_code("browser.manage", json!({"action": 7}), -32602);
}

#[test]
fn features_we_lack_are_refused_by_name_not_as_unknown_methods() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    for (method, feature) in [
        ("credits.view", "billing"),
        ("billing.state", "billing"),
        ("pdf.attach", "attachments"),
        ("voice.record", "voice"),
        ("learning.detail", "learning"),
    ] {
        let msg = g.expect_code(method, json!({"session_id": s.id, "path": "x.png"}), 4040);
        assert!(
            msg.contains("not supported") && msg.contains(feature),
            "{method}: {msg}"
        );
    }
    // A name the TUI never calls is still an unknown method.
    g.expect_code("no.such.method", json!({}), -32601);
}
