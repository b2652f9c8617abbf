//! Configuration and models, black-box: `config.set` / `config.get` as the stock TUI sends them,
//! config.yaml edited in place (comments and other keys kept byte for byte), yolo, model
//! switches the next turn uses, `model.options` with a mock `/v1/models` and with the server
//! down, hostile config files, and `model.api_key` / `api_key_env` as the bearer token.
//!
//! Every wait has a deadline; nothing relies on a bare sleep for synchronisation.

use crate::common;
use crate::mockai;

use common::*;
use mockai::*;
use serde_json::{Value, json};

/// A home holding `yaml` as config.yaml.
fn home_with(yaml: &str) -> TempHome {
    let home = TempHome::new("config");
    std::fs::write(home.path.join("config.yaml"), yaml).unwrap();
    home
}

/// A mock that answers every chat request with `text` and `GET /v1/models` with `models`.
fn mock_with_models(text: &'static str, models: &'static [&'static str]) -> MockAi {
    MockAi::start(move |r| {
        if r.method == "GET" {
            let data: Vec<Value> = models
                .iter()
                .map(|m| json!({"id": m, "object": "model"}))
                .collect();
            return Reply::status(200, &json!({"object": "list", "data": data}).to_string());
        }
        Reply::text(&[text], (3, 1))
    })
}

// ---------------------------------------------------------------------------------------------
// model.api_key / api_key_env
// ---------------------------------------------------------------------------------------------

fn first_chat_auth(yaml_extra: &str, envs: &[(&str, &str)]) -> Option<String> {
    let mock = mock_with_models("ok", &[]);
    let home = home_with(&format!(
        "model:\n  default: m\n  provider: custom\n  base_url: {}\n{yaml_extra}",
        mock.base_url()
    ));
    let mut b = Gateway::builder().tag("config-key").home(&home.path);
    for (k, v) in envs {
        b = b.env(k, v);
    }
    let mut g = b.start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hello");
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{}",
        t.complete
    );
    let reqs = mock.wait_requests(1, T);
    reqs[0].header("authorization").map(str::to_string)
}

#[test]
fn config_yaml_api_key_is_the_bearer_token() {
    assert_eq!(
        first_chat_auth("  api_key: sk-from-yaml\n", &[]).as_deref(),
        Some("Bearer sk-from-yaml")
    );
}

#[test]
fn api_key_env_names_the_variable_holding_the_token() {
    assert_eq!(
        first_chat_auth(
            "  api_key_env: MY_GATEWAY_TEST_KEY\n",
            &[("MY_GATEWAY_TEST_KEY", "sk-from-env")]
        )
        .as_deref(),
        Some("Bearer sk-from-env")
    );
    assert_eq!(
        first_chat_auth("", &[]),
        None,
        "no key configured: no header"
    );
}

// ---------------------------------------------------------------------------------------------
// config.set / config.get and config.yaml kept as the user wrote it
// ---------------------------------------------------------------------------------------------

const USER_YAML: &str = "# my hermes config\n\
model:\n  default: offline   # the built-in one\n  provider: offline\n\n\
display:\n  # how the TUI looks\n  skin: default\n  tui_compact: false\n\n\
custom_prompt: \"be brief\"  # keep me\n\
toolsets:\n  - terminal\n  - files\n";

/// Every line of `before` is in `after`, in the same order (added lines may sit between).
fn keeps_every_line(before: &str, after: &str) {
    let mut rest = after.lines();
    for line in before.lines() {
        assert!(
            rest.any(|l| l == line),
            "line {line:?} of the original was lost or moved:\n--- before\n{before}\n--- after\n{after}"
        );
    }
}

fn set(g: &mut Gateway, key: &str, value: &str) -> Value {
    g.call("config.set", json!({"key": key, "value": value}))
}

fn get(g: &mut Gateway, key: &str) -> Value {
    g.call("config.get", json!({"key": key}))["value"].clone()
}

#[test]
fn display_keys_persist_in_place_and_read_back() {
    let home = home_with(USER_YAML);
    let mut g = Gateway::builder()
        .tag("config-set")
        .home(&home.path)
        .start();
    let cases: &[(&str, &str, &str)] = &[
        ("busy", "queue", "queue"),
        ("details_mode", "expanded", "expanded"),
        ("thinking_mode", "truncated", "truncated"),
        ("compact", "on", "on"),
        ("statusbar", "bottom", "bottom"),
        ("mouse", "scroll", "wheel"),
        ("indicator", "ascii", "ascii"),
        ("skin", "mono", "mono"),
    ];
    for (key, value, answer) in cases {
        let r = set(&mut g, key, value);
        assert_eq!(r["value"], *answer, "config.set {key}: {r}");
        assert_eq!(get(&mut g, key), *answer, "config.get {key}");
    }
    let r = set(&mut g, "details_mode.tools", "hidden");
    assert_eq!(r["value"], "hidden", "{r}");
    let after = read_config(&home);
    keeps_every_line(
        &USER_YAML
            .replace("  skin: default\n", "")
            .replace("  tui_compact: false\n", ""),
        &after,
    );
    assert!(after.contains("  skin: mono\n"), "{after}");
    assert!(after.contains("  tui_compact: true\n"), "{after}");
    assert!(after.contains("  busy_input_mode: queue\n"), "{after}");
    assert!(after.contains("    tools: hidden\n"), "{after}");
    // config.get full is what the TUI applies at start-up: the file, as JSON.
    let full = g.call("config.get", json!({"key": "full"}));
    let display = &full["config"]["display"];
    assert_eq!(display["busy_input_mode"], "queue", "{full}");
    // thinking_mode (set after details_mode) keeps details_mode in step, as Hermes does.
    assert_eq!(display["details_mode"], "collapsed", "{full}");
    assert_eq!(display["sections"]["thinking"], "expanded", "{full}");
    assert_eq!(display["sections"]["tools"], "hidden", "{full}");
    assert_eq!(display["tui_compact"], true, "{full}");
    assert_eq!(full["config"]["custom_prompt"], "be brief", "{full}");
    // Clearing a section override removes just that line.
    set(&mut g, "details_mode.tools", "");
    let cleared = read_config(&home);
    assert!(!cleared.contains("tools: hidden"), "{cleared}");
    assert_eq!(
        cleared.lines().count() + 1,
        after.lines().count(),
        "{cleared}"
    );
    // The mtime poll sees the change.
    let m = g.call("config.get", json!({"key": "mtime"}));
    assert!(m["mtime"].as_f64().unwrap() > 0.0, "{m}");
}

#[test]
fn an_untouched_file_stays_byte_for_byte_and_a_missing_one_is_created() {
    let home = home_with(USER_YAML);
    let mut g = Gateway::builder()
        .tag("config-same")
        .home(&home.path)
        .start();
    for key in [
        "full",
        "busy",
        "details_mode",
        "reasoning",
        "skin",
        "indicator",
        "mouse",
    ] {
        g.call("config.get", json!({"key": key}));
    }
    // Setting a key to the value it has changes nothing either.
    set(&mut g, "skin", "default");
    assert_eq!(read_config(&home), USER_YAML);

    let empty = TempHome::new("config-new");
    let mut g = Gateway::builder()
        .tag("config-new")
        .home(&empty.path)
        .start();
    set(&mut g, "busy", "steer");
    assert_eq!(read_config(&empty), "display:\n  busy_input_mode: steer\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(empty.path.join("config.yaml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "a new config.yaml is private");
}

#[test]
fn the_file_mode_is_kept() {
    use std::os::unix::fs::PermissionsExt;
    let home = home_with(USER_YAML);
    let file = home.path.join("config.yaml");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut g = Gateway::builder()
        .tag("config-mode")
        .home(&home.path)
        .start();
    set(&mut g, "indicator", "emoji");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert!(read_config(&home).contains("tui_status_indicator: emoji"));
}

#[test]
fn session_keys_yolo_reasoning_and_verbose() {
    let home = home_with(USER_YAML);
    let mut g = Gateway::builder()
        .tag("config-session")
        .home(&home.path)
        .start();
    let s = g.create_session(json!({}));
    let sid = s.id.as_str();
    // yolo toggles (Shift+Tab sends no value) and announces session.info.
    let r = g.call("config.set", json!({"key": "yolo", "session_id": sid}));
    assert_eq!(r["value"], "1", "{r}");
    let info = g.wait_session_event(sid, "session.info", T);
    assert_eq!(
        info["payload"]["yolo"], true,
        "the status bar's info says so: {info}"
    );
    let r = g.call("config.set", json!({"key": "yolo", "session_id": sid}));
    assert_eq!(r["value"], "0", "{r}");
    let info = g.wait_session_event(sid, "session.info", T);
    assert_eq!(info["payload"]["yolo"], false, "{info}");
    // As the Python gateway: no notice of its own, so the status bar keeps saying `ready`.
    assert!(
        !g.frames
            .iter()
            .any(|f| f["params"]["type"] == "notification.show"),
        "a yolo notice was sent"
    );
    let r = g.call("config.get", json!({"key": "yolo", "session_id": sid}));
    assert_eq!(r["value"], "0", "{r}");
    // A reasoning level is the session's; show/hide are display settings in the file.
    let r = g.call(
        "config.set",
        json!({"key": "reasoning", "session_id": sid, "value": "high"}),
    );
    assert_eq!(r["value"], "high", "{r}");
    // The status bar shows the level from the info it is sent.
    g.wait_frame(
        |f| {
            event_type(f) == Some("session.info")
                && f["params"]["payload"]["reasoning_effort"] == "high"
        },
        T,
    )
    .expect("a session.info showing reasoning_effort high");
    let r = g.call("config.get", json!({"key": "reasoning", "session_id": sid}));
    assert_eq!(
        (r["value"].as_str(), r["display"].as_str()),
        (Some("high"), Some("show")),
        "{r}"
    );
    // `/reasoning` with no argument asks without a session id: the active session answers.
    let r = g.call("config.get", json!({"key": "reasoning"}));
    assert_eq!(r["value"], "high", "{r}");
    let r = g.call(
        "config.set",
        json!({"key": "reasoning", "session_id": sid, "value": "hide"}),
    );
    assert_eq!(r["value"], "hide", "{r}");
    let r = g.call("config.get", json!({"key": "reasoning"}));
    assert_eq!(
        (r["value"].as_str(), r["display"].as_str()),
        (Some("high"), Some("hide")),
        "{r}"
    );
    // verbose cycles off → new → all → verbose → off, starting from the default (all).
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = g.call(
            "config.set",
            json!({"key": "verbose", "session_id": sid, "value": "cycle"}),
        );
        seen.push(r["value"].as_str().unwrap().to_string());
    }
    assert_eq!(seen, ["verbose", "off", "new", "all"]);
    assert!(read_config(&home).contains("  tool_progress: all\n"));
    keeps_every_line(USER_YAML, &read_config(&home));
}

#[test]
fn bad_values_unknown_keys_and_sessions_are_refused_clearly() {
    let home = home_with(USER_YAML);
    let mut g = Gateway::builder()
        .tag("config-bad")
        .home(&home.path)
        .start();
    for (key, value) in [
        ("busy", "sometimes"),
        ("details_mode", "loud"),
        ("details_mode.nowhere", "hidden"),
        ("indicator", "fireworks"),
        ("skin", "../../etc"),
        ("reasoning", "extreme"),
        ("verbose", "chatty"),
        ("no_such_key", "1"),
    ] {
        let m = g.expect_code("config.set", json!({"key": key, "value": value}), -32602);
        assert!(m.contains("invalid params"), "{key}: {m}");
    }
    g.expect_code("config.set", json!({"value": "x"}), -32602);
    g.expect_code(
        "config.set",
        json!({"key": "busy", "value": ["queue"]}),
        -32602,
    );
    g.expect_code("config.set", json!({"key": "yolo"}), 4006);
    g.expect_code(
        "config.set",
        json!({"key": "yolo", "session_id": "nope"}),
        4001,
    );
    g.expect_code("config.set", json!({"key": "model", "value": "m"}), 4006);
    g.expect_code(
        "config.set",
        json!({"key": "model", "value": "--session", "session_id": "x"}),
        -32602,
    );
    assert_eq!(read_config(&home), USER_YAML, "nothing refused was written");
    g.ping();
}

// ---------------------------------------------------------------------------------------------
// Hostile config files
// ---------------------------------------------------------------------------------------------

#[test]
fn hostile_config_files_are_refused_and_left_alone() {
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 0..9 {
        let prev = if i == 0 {
            "a".to_string()
        } else {
            format!("l{}", i - 1)
        };
        let refs = vec![format!("*{prev}"); 10].join(", ");
        bomb.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
    }
    let huge = format!("display:\n  skin: x\n# {}\n", "#".repeat(2 * 1024 * 1024));
    let broken = "display:\n  skin: [unclosed\n".to_string();
    let deep = format!("display: {}{}\n", "[".repeat(5000), "]".repeat(5000));
    let flow = "display: {skin: x, tui_compact: true}\n".to_string();
    for (name, text) in [
        ("alias bomb", bomb),
        ("huge", huge),
        ("broken", broken),
        ("deep", deep),
        ("flow", flow),
    ] {
        let home = home_with(&text);
        let mut g = Gateway::builder()
            .tag("config-hostile")
            .home(&home.path)
            .start();
        let full = g.call("config.get", json!({"key": "full"}));
        assert!(full["config"].is_object(), "{name}: {full}");
        let (code, msg, _) = g.call_err("config.set", json!({"key": "busy", "value": "queue"}));
        assert_eq!(code, -32000, "{name}: {msg}");
        assert!(msg.contains("config.yaml"), "{name}: {msg}");
        assert_eq!(read_config(&home), text, "{name}: the file was changed");
        // The gateway still works: a session, a turn — which, with no readable config.yaml to
        // say which model, says so instead of answering from another.
        let s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "still here");
        if name == "flow" {
            assert_eq!(t.complete["payload"]["status"], "complete", "{name}");
        } else {
            assert_eq!(t.complete["payload"]["status"], "error", "{name}");
            let why = t.complete["payload"]["error"].as_str().unwrap_or("");
            assert!(why.contains("config.yaml"), "{name}: {}", t.complete);
        }
        g.ping();
    }
}

fn read_config(home: &TempHome) -> String {
    std::fs::read_to_string(home.path.join("config.yaml")).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// yolo skips approvals for that session only
// ---------------------------------------------------------------------------------------------

#[test]
fn yolo_runs_a_dangerous_command_unasked_in_that_session_only() {
    let home = TempHome::new("config-yolo");
    let mut g = Gateway::builder()
        .tag("config-yolo")
        .home(&home.path)
        .env("HOME", home.path.to_str().unwrap())
        .start();
    let a = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    let r = g.call(
        "config.set",
        json!({"key": "yolo", "session_id": a.id, "value": "on"}),
    );
    assert_eq!(r["value"], "1", "{r}");
    std::fs::create_dir_all(home.path.join("scratch-a/sub")).unwrap();
    std::fs::create_dir_all(home.path.join("scratch-b/sub")).unwrap();

    let start = submit(&mut g, &a.id, "$ rm -rf ~/scratch-a");
    let done = g.wait_session_event(&a.id, "tool.complete", T);
    g.finish_turn(&a.id, start, T);
    let asked = g.frames[start..]
        .iter()
        .any(|f| event_type(f) == Some("approval.request"));
    assert!(!asked, "yolo session was asked:\n{}", g.diag());
    assert!(
        !home.path.join("scratch-a").exists(),
        "the command did not run: {done}"
    );

    let start = submit(&mut g, &b.id, "$ rm -rf ~/scratch-b");
    let req = g.wait_session_event(&b.id, "approval.request", T);
    let rid = req["payload"]["request_id"].as_str().unwrap().to_string();
    g.call(
        "approval.respond",
        json!({"session_id": b.id, "choice": "deny", "request_id": rid}),
    );
    g.finish_turn(&b.id, start, T);
    assert!(
        home.path.join("scratch-b").exists(),
        "the other session's command ran"
    );
}

// ---------------------------------------------------------------------------------------------
// Model switches and model.options
// ---------------------------------------------------------------------------------------------

fn openai_home(mock: &MockAi, extra: &str) -> TempHome {
    home_with(&format!(
        "# models\nmodel:\n  default: first-model  # start here\n  provider: custom\n  base_url: {}\n{extra}display:\n  skin: default\n",
        mock.base_url()
    ))
}

#[test]
fn a_model_switch_is_what_the_next_turn_uses_and_global_persists() {
    let mock = mock_with_models("ok", &[]);
    let home = openai_home(&mock, "");
    let before = read_config(&home);
    let mut g = Gateway::builder()
        .tag("config-model")
        .home(&home.path)
        .start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "one");
    // What the picker sends for a session-only switch.
    let r = g.call(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "second-model --provider custom --session"}),
    );
    assert_eq!(r["value"], "second-model", "{r}");
    let info = g.wait_session_event(&s.id, "session.info", T);
    assert_eq!(info["payload"]["model"], "second-model", "{info}");
    g.run_turn(&s.id, "two");
    let reqs = mock.wait_requests(2, T);
    let models: Vec<&Value> = reqs.iter().map(|r| &r.body["model"]).collect();
    assert_eq!(models, [&json!("first-model"), &json!("second-model")]);
    assert_eq!(
        read_config(&home),
        before,
        "a session switch leaves config.yaml alone"
    );

    // --global: this session, config.yaml's model.default (comment kept) and new sessions.
    let r = g.call(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "third-model --global"}),
    );
    assert_eq!(r["value"], "third-model", "{r}");
    let after = read_config(&home);
    assert_eq!(
        after,
        before.replace(
            "default: first-model  # start here",
            "default: third-model  # start here"
        )
    );
    let s2 = g.create_session(json!({}));
    g.run_turn(&s2.id, "three");
    let reqs = mock.wait_requests(3, T);
    assert_eq!(reqs[2].body["model"], "third-model");

    // A provider this home has no key for is refused, saying why.
    let m = g.expect_code(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "x --provider anthropic"}),
        4040,
    );
    assert!(m.contains("ANTHROPIC_API_KEY"), "{m}");
}

#[test]
fn a_session_switches_between_apis_mid_session_and_back() {
    use mockai::anthropic::{Usage, reply, text_answer};
    let chat = mock_with_models("from chat", &["first-model"]);
    let claude = MockAi::script(vec![reply(text_answer(
        &["from claude"],
        Usage(9, 0, 0, 2),
    ))]);
    let home = openai_home(&chat, "");
    std::fs::write(
        home.path.join(".env"),
        "ANTHROPIC_API_KEY=sk-ant-api03-switch\n",
    )
    .unwrap();
    let mut g = Gateway::builder()
        .tag("config-switch")
        .home(&home.path)
        .env("ANTHROPIC_BASE_URL", &claude.base_url())
        .start();
    let s = g.create_session(json!({}));
    assert_eq!(g.run_turn(&s.id, "one").text, "from chat");
    // The picker's offer names the provider the key in .env makes ready.
    let options = g.call("model.options", json!({"session_id": s.id}));
    let slugs: Vec<&str> = options["providers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["slug"].as_str())
        .collect();
    assert!(slugs.contains(&"anthropic"), "{options}");
    g.call(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "claude-sonnet-4-5 --provider claude --session"}),
    );
    let info = g.wait_session_event(&s.id, "session.info", T);
    assert_eq!(info["payload"]["provider"], "anthropic", "{info}");
    assert_eq!(g.run_turn(&s.id, "two").text, "from claude");
    let r = &claude.wait_requests(1, T)[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("sk-ant-api03-switch"));
    // The whole conversation went along, in the Messages shape.
    let first = &r.body["messages"][0]["content"];
    assert!(first.to_string().contains("one"), "{}", r.body);
    // A new session starts on the configured provider; and this one can go back.
    let other = g.call("session.create", json!({}));
    assert_eq!(other["info"]["provider"], "custom", "{other}");
    g.call(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "first-model --provider custom"}),
    );
    let t = g.run_turn(&s.id, "three");
    assert_eq!(t.text, "from chat", "{:?}", t.complete);
    let back = chat.wait_requests(3, T).pop().unwrap();
    assert!(back.path.ends_with("/chat/completions"), "{}", back.path);
    // The Messages answer went along too, in the chat shape.
    assert!(
        back.body.to_string().contains("from claude"),
        "{}",
        back.body
    );
}

#[test]
fn a_model_switch_waits_for_the_turn_to_end() {
    let mock = MockAi::start(|_| {
        Reply::Stream(Stream::new(text_events(&["slow"], "stop", Some((1, 1)))).delay(ms(300)))
    });
    let home = openai_home(&mock, "");
    let mut g = Gateway::builder()
        .tag("config-busy")
        .home(&home.path)
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "hi");
    g.expect_code(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "other"}),
        4009,
    );
    g.finish_turn(&s.id, start, T);
}

#[test]
fn model_options_lists_config_and_endpoint_models() {
    let mock = mock_with_models("ok", &["served-a", "served-b", "first-model"]);
    let home = openai_home(&mock, "  models: [listed-in-yaml]\n  api_key: sk-list\n");
    let mut g = Gateway::builder()
        .tag("config-options")
        .home(&home.path)
        .start();
    let s = g.create_session(json!({}));
    let r = g.call(
        "model.options",
        json!({"session_id": s.id, "include_unconfigured": true}),
    );
    assert_eq!(r["model"], "first-model", "{r}");
    assert_eq!(r["provider"], "custom", "{r}");
    let p = &r["providers"][0];
    assert_eq!(p["slug"], "custom", "{r}");
    assert_eq!(p["is_current"], true, "{r}");
    assert_eq!(p["authenticated"], true, "{r}");
    assert_eq!(
        p["models"],
        json!(["first-model", "listed-in-yaml", "served-a", "served-b"]),
        "{r}"
    );
    assert_eq!(p["total_models"], 4, "{r}");
    assert!(p["warning"].is_null(), "{r}");
    let reqs = mock.wait_requests(1, T);
    assert_eq!(
        (reqs[0].method.as_str(), reqs[0].path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(reqs[0].header("authorization"), Some("Bearer sk-list"));
    // Picking one of them works like /model NAME.
    let r = g.call(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "served-b --provider custom --session"}),
    );
    assert_eq!(r["value"], "served-b", "{r}");
}

#[test]
fn model_options_with_the_server_down_answers_with_a_warning() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let home = home_with(&format!(
        "model:\n  default: lonely\n  base_url: http://127.0.0.1:{port}/v1\n"
    ));
    let mut g = Gateway::builder()
        .tag("config-down")
        .home(&home.path)
        .start();
    let r = g.call("model.options", json!({}));
    let p = &r["providers"][0];
    assert_eq!(p["models"], json!(["lonely"]), "{r}");
    let w = p["warning"]
        .as_str()
        .unwrap_or_else(|| panic!("no warning: {r}"));
    assert!(w.contains("could not list"), "{w}");
}

#[test]
fn a_slow_model_list_does_not_hold_up_the_loop_and_times_out() {
    let mock = MockAi::start(|r| {
        if r.method == "GET" {
            Reply::Stall
        } else {
            Reply::text(&["ok"], (1, 1))
        }
    });
    let home = openai_home(&mock, "");
    let mut g = Gateway::builder()
        .tag("config-slow")
        .home(&home.path)
        .start();
    let id = g.send_request("model.options", json!({}));
    mock.wait_requests(1, T);
    // Meanwhile the gateway answers, and a turn runs.
    g.ping();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "while listing");
    let answer = g.wait_response(&id, secs(20));
    let r = &answer["result"];
    assert_eq!(
        r["providers"][0]["models"],
        json!(["first-model"]),
        "{answer}"
    );
    let w = r["providers"][0]["warning"].as_str().unwrap_or("");
    assert!(w.contains("no answer within"), "{answer}");
}

#[test]
fn offline_lists_the_offline_model_and_disconnect_finds_nothing() {
    let mut g = Gateway::builder().tag("config-offline").start();
    let r = g.call("model.options", json!({}));
    assert_eq!(r["provider"], "offline", "{r}");
    assert_eq!(r["providers"][0]["models"], json!(["offline"]), "{r}");
    g.expect_code("model.disconnect", json!({"slug": "openai-api"}), 4005);
    let m = g.expect_code(
        "config.set",
        json!({"key": "personality", "value": "pirate"}),
        5001,
    );
    assert!(m.ends_with("No personalities configured."), "{m}");
    g.expect_code("model.options", json!({"session_id": "nope"}), 4001);
}

#[test]
fn context_length_from_config_yaml_and_a_switch_updates_the_gauge() {
    let mock = mock_with_models("ok", &[]);
    let home = openai_home(&mock, "  context_length: 4096\n");
    let mut g = Gateway::builder()
        .tag("config-ctx")
        .home(&home.path)
        .start();
    let s = g.create_session(json!({}));
    assert_eq!(
        s.result["info"]["usage"]["context_max"], 4096,
        "{}",
        s.result
    );
    g.call(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "gpt-4o-mini"}),
    );
    let info = g.wait_session_event(&s.id, "session.info", T);
    assert_eq!(info["payload"]["usage"]["context_max"], 128_000, "{info}");
}

/// A personality chosen with `/personality` is the last part of the session's system prompt from
/// its next model call on, with a note in its history, and is saved for the next sessions as
/// Hermes saves it; `none` clears it.
#[test]
fn a_personality_reaches_the_model_and_none_clears_it() {
    let mock = mock_with_models("ok", &[]);
    let extra = "agent:\n  personalities:\n    teacher:\n      system_prompt: You teach.\n      tone: warm\n";
    let home = openai_home(&mock, extra);
    let mut g = Gateway::builder()
        .tag("config-persona")
        .home(&home.path)
        .start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "one");
    let r = g.call(
        "config.set",
        json!({"key": "personality", "session_id": s.id, "value": "Teacher"}),
    );
    assert_eq!(
        (&r["value"], &r["history_reset"]),
        (&json!("Teacher"), &json!(false)),
        "{r}"
    );
    let saved = read_config(&home);
    assert!(saved.contains("personality: teacher"), "{saved}");
    assert!(saved.contains("You teach."), "{saved}");
    assert_eq!(
        g.call("config.get", json!({"key": "personality"}))["value"],
        "teacher"
    );
    g.run_turn(&s.id, "two");
    let system = |req: &mockai::Recorded| {
        let msgs = req.body["messages"].as_array().unwrap().clone();
        (msgs[0]["content"].as_str().unwrap_or("").to_string(), msgs)
    };
    let posts: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    let (first, _) = system(&posts[0]);
    let (second, msgs) = system(&posts[1]);
    assert!(!first.contains("You teach."), "{first}");
    assert!(second.ends_with("You teach.\nTone: warm"), "{second}");
    let note = msgs
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with("[System: The user has changed the assistant's personality."));
    assert!(note.is_some_and(|n| n.contains("You teach.")), "{msgs:?}");

    g.call(
        "config.set",
        json!({"key": "personality", "session_id": s.id, "value": "none"}),
    );
    g.run_turn(&s.id, "three");
    let posts: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    let (third, _) = system(&posts[2]);
    assert!(!third.contains("You teach."), "{third}");
}
