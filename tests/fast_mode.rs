//! Hermes' fast mode, black-box: `/fast` (`config.set fast`) and config.yaml's
//! `agent.service_tier` ask Claude Opus 4.6 on Anthropic's own API for `speed: "fast"` (with its
//! beta) and OpenAI's models for the priority tier; a proxy is never sent Anthropic's field,
//! a model without a fast service refuses the switch, and config.yaml and new sessions follow
//! the switch.

use crate::common;
use crate::mockai;

use common::*;
use mockai::anthropic::{self as msgs, Usage};
use mockai::{MockAi, Recorded, Reply};
use serde_json::{Value, json};

const OPUS: &str = "claude-opus-4-6";

fn home_with(config: &str, env: &str) -> TempHome {
    let home = TempHome::new("fast");
    std::fs::write(home.path.join("config.yaml"), config).unwrap();
    std::fs::write(home.path.join(".env"), env).unwrap();
    home
}

fn claude_answers(n: usize) -> MockAi {
    let answer = || msgs::reply(msgs::text_answer(&["ok"], Usage(1, 0, 0, 1)));
    MockAi::script((0..n).map(|_| answer()).collect())
}

fn header<'a>(r: &'a Recorded, name: &str) -> &'a str {
    r.headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map_or("", |(_, v)| v.as_str())
}

/// The last `session.info` the session was sent.
fn last_info(g: &mut Gateway, sid: &str) -> Value {
    let events = g.events_of_session(sid);
    events
        .iter()
        .rev()
        .find(|e| e["type"] == "session.info")
        .map(|e| e["payload"].clone())
        .unwrap_or_else(|| panic!("no session.info in {events:?}"))
}

fn config_text(home: &TempHome) -> String {
    std::fs::read_to_string(home.path.join("config.yaml")).unwrap()
}

#[test]
fn fast_mode_on_anthropics_api_asks_for_speed_and_is_kept_in_config_yaml() {
    let mock = claude_answers(3);
    let home = home_with(
        &format!("model:\n  default: {OPUS}\n  provider: anthropic\n"),
        "ANTHROPIC_API_KEY=sk-ant-api03-mock\n",
    );
    let mut g = Gateway::builder()
        .tag("fast")
        .home(&home.path)
        .env("http_proxy", &format!("http://127.0.0.1:{}", mock.port))
        .env("ANTHROPIC_BASE_URL", "http://api.anthropic.com")
        .start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "before");
    // `/fast` with no word toggles it on, as the TUI sends it.
    let on = g.call(
        "config.set",
        json!({"key": "fast", "value": "", "session_id": s.id}),
    );
    assert_eq!(on["value"], "fast", "{on}");
    assert_eq!(last_info(&mut g, &s.id)["fast"], true);
    let status = g.call("config.get", json!({"key": "fast", "session_id": s.id}));
    assert_eq!(status["value"], "fast", "{status}");
    assert!(
        config_text(&home).contains("service_tier: fast"),
        "{}",
        config_text(&home)
    );
    g.run_turn(&s.id, "fast now");
    g.call(
        "config.set",
        json!({"key": "fast", "value": "normal", "session_id": s.id}),
    );
    g.run_turn(&s.id, "normal again");

    let reqs = mock.wait_requests(3, T);
    let fast_beta = "fast-mode-2026-02-01";
    assert_eq!(reqs[0].body.get("speed"), None, "{}", reqs[0].body);
    assert!(!header(&reqs[0], "anthropic-beta").contains(fast_beta));
    assert_eq!(reqs[1].body["speed"], "fast", "{}", reqs[1].body);
    let betas = header(&reqs[1], "anthropic-beta");
    assert!(betas.contains(fast_beta), "{betas}");
    assert!(
        betas.contains("interleaved-thinking"),
        "the usual betas stay: {betas}"
    );
    assert_eq!(reqs[2].body.get("speed"), None, "{}", reqs[2].body);
    assert!(config_text(&home).contains("service_tier: normal"));
}

#[test]
fn a_proxy_speaking_anthropics_api_is_never_sent_its_fast_field() {
    let mock = claude_answers(1);
    let home = home_with(
        &format!(
            "model:\n  default: {OPUS}\n  base_url: {}\n  api_mode: anthropic_messages\n  api_key: k\nagent:\n  service_tier: fast\n",
            mock.base_url()
        ),
        "",
    );
    let mut g = Gateway::builder().tag("fast").home(&home.path).start();
    let s = g.create_session(json!({}));
    assert_eq!(last_info(&mut g, &s.id)["fast"], true, "config.yaml's tier");
    g.run_turn(&s.id, "hi");
    let r = &mock.wait_requests(1, T)[0];
    assert_eq!(r.body.get("speed"), None, "{}", r.body);
    assert!(!header(r, "anthropic-beta").contains("fast-mode"));
}

#[test]
fn openai_models_get_the_priority_tier_from_config_yaml_and_new_sessions_follow_fast() {
    let answer = || Reply::text(&["ok"], (1, 1));
    let mock = MockAi::script(vec![answer(), answer()]);
    let home = home_with("agent:\n  service_tier: fast\n", "");
    let mut g = Gateway::builder()
        .tag("fast")
        .home(&home.path)
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", "sk-mock")
        .env("OPENAI_MODEL", "gpt-5.1")
        .start();
    let first = g.create_session(json!({}));
    g.run_turn(&first.id, "one");
    // Off without a session: config.yaml and the sessions made after it.
    let off = g.call("config.set", json!({"key": "fast", "value": "off"}));
    assert_eq!(off["value"], "normal", "{off}");
    let second = g.create_session(json!({}));
    assert_eq!(last_info(&mut g, &second.id)["fast"], false);
    g.run_turn(&second.id, "two");
    let reqs = mock.wait_requests(2, T);
    assert_eq!(reqs[0].body["service_tier"], "priority", "{}", reqs[0].body);
    assert_eq!(reqs[1].body.get("service_tier"), None, "{}", reqs[1].body);
}

#[test]
fn a_model_without_a_fast_service_refuses_the_switch_and_changes_nothing() {
    let mock = claude_answers(0);
    let config = format!(
        "model:\n  default: claude-sonnet-4-5\n  base_url: {}\n  api_mode: anthropic_messages\n  api_key: k\n",
        mock.base_url()
    );
    let home = home_with(&config, "");
    let mut g = Gateway::builder().tag("fast").home(&home.path).start();
    let s = g.create_session(json!({}));
    let (code, msg, _) = g.call_err(
        "config.set",
        json!({"key": "fast", "value": "fast", "session_id": s.id}),
    );
    assert_eq!(code, 4002);
    assert!(msg.contains("not available for this model"), "{msg}");
    let (code, msg, _) = g.call_err(
        "config.set",
        json!({"key": "fast", "value": "ludicrous", "session_id": s.id}),
    );
    assert_eq!((code, msg.as_str()), (4002, "unknown fast mode: ludicrous"));
    let status = g.call(
        "config.set",
        json!({"key": "fast", "value": "status", "session_id": s.id}),
    );
    assert_eq!(status["value"], "normal", "{status}");
    assert_eq!(config_text(&home), config, "config.yaml untouched");
}
