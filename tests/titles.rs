//! Session titles (issue 32 item 5), black-box: after a session's first exchange the gateway
//! asks the session's model for a title (`tests/mockai` answers it), as Hermes'
//! `title_generator.py` does. The title is in `session.list`, in state.db and announced as
//! `session.title`; a failing or slow title call leaves the session untitled and its turns
//! unaffected; a title the user set first is kept; a closed session's call is dropped.
//! (The tests' gateways run with titles off unless a test turns them on: `scrub_env`.)

use crate::common;
use crate::mockai;

use common::*;
use mockai::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// How Hermes' title request begins.
const TITLE_PROMPT: &str = "Generate a short, descriptive title";

fn is_title_request(r: &Recorded) -> bool {
    r.messages().first().is_some_and(|m| {
        m["role"] == "system" && content_text(&m["content"]).starts_with(TITLE_PROMPT)
    })
}

/// A gateway on `mock` with titles on, and config.yaml's `auxiliary.title_generation` lines
/// (the home goes when the test ends, after the gateway).
fn start_titled(mock: &MockAi, title_config: &str) -> (TempHome, Gateway) {
    let home = TempHome::new("titles");
    if !title_config.is_empty() {
        std::fs::write(
            home.path.join("config.yaml"),
            format!("auxiliary:\n  title_generation:\n{title_config}"),
        )
        .unwrap();
    }
    let g = Gateway::builder()
        .home(&home.path)
        .openai_mock(&mock.base_url())
        .env("TUI_GATEWAY_AUTO_TITLE", "on")
        .start();
    (home, g)
}

/// The title request went to `model` with Hermes' answer cap and temperature.
fn assert_hermes_parameters(r: &Recorded, model: &str) {
    assert_eq!(r.body["model"], model, "{}", r.body);
    assert_eq!(r.body["max_tokens"], 500, "{}", r.body);
    assert_eq!(r.body["temperature"], 0.3, "{}", r.body);
}

/// The stored title of a session, as `session.list` lists it.
fn listed_title(g: &mut Gateway, stored: &str) -> Value {
    let list = g.call("session.list", json!({}));
    list["sessions"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == stored))
        .map_or(Value::Null, |r| r["title"].clone())
}

fn stored_title(g: &Gateway, stored: &str) -> Option<String> {
    g.db()
        .query_row("SELECT title FROM sessions WHERE id = ?1", [stored], |r| {
            r.get(0)
        })
        .ok()
        .flatten()
}

/// Answers a title request with `title`, every other with the turn's answer.
fn answering(title: &'static str) -> MockAi {
    MockAi::start(move |r| {
        if is_title_request(r) {
            Reply::text(&[title], (40, 6))
        } else {
            Reply::text(&["Use ", "a borrow."], (12, 5))
        }
    })
}

#[test]
fn the_first_exchange_gets_the_title_the_model_writes_in_the_list_and_the_store() {
    let mock = answering("\"Title: Borrowing in Rust\"");
    let (_home, mut g) = start_titled(&mock, "");
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "how do I share a value in rust?");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    assert_eq!(turn.text, "Use a borrow.");
    let said = g.wait_session_event(&s.id, "session.title", T);
    assert_eq!(
        said["payload"],
        json!({"session_id": s.stored, "title": "Borrowing in Rust"}),
        "cleaned as Hermes cleans it: quotes and the prefix off"
    );
    assert_eq!(listed_title(&mut g, &s.stored), "Borrowing in Rust");
    assert_eq!(
        stored_title(&g, &s.stored).as_deref(),
        Some("Borrowing in Rust")
    );

    // The request: Hermes' prompt, the exchange, no tools.
    let asked: Vec<Recorded> = mock
        .requests()
        .into_iter()
        .filter(is_title_request)
        .collect();
    assert_eq!(asked.len(), 1, "one title call");
    assert_eq!(
        asked[0].conversation(),
        [(
            "user".to_string(),
            "User: how do I share a value in rust?\n\nAssistant: Use a borrow.".to_string()
        )]
    );
    assert!(
        asked[0].body["tools"]
            .as_array()
            .is_none_or(|t| t.is_empty()),
        "{}",
        asked[0].body
    );
    // Hermes' parameters, to the session's model.
    assert_hermes_parameters(&asked[0], "mock-model");
    // Its cost is the session's: the turn's 12 + 5 tokens and the title's 40 + 6.
    let u = g.call("session.usage", json!({"session_id": s.id}));
    let u = u.get("usage").unwrap_or(&u).clone();
    assert_eq!(
        (u["input"].as_u64(), u["output"].as_u64()),
        (Some(52), Some(11)),
        "{u}"
    );

    // A titled session is not titled again.
    g.run_turn(&s.id, "and mutably?");
    let titles = mock
        .requests()
        .iter()
        .filter(|r| is_title_request(r))
        .count();
    assert_eq!(titles, 1, "no second title call");
    assert_eq!(listed_title(&mut g, &s.stored), "Borrowing in Rust");
}

#[test]
fn a_failing_or_slow_title_call_leaves_the_session_untitled_and_its_turns_unaffected() {
    // The first session's title call is refused, the second's never answered.
    let mock = MockAi::start(|r| {
        if !is_title_request(r) {
            Reply::text(&["fine"], (3, 1))
        } else if r.last_user_text().contains("refuse") {
            Reply::status(400, r#"{"error":{"message":"no titles here"}}"#)
        } else {
            Reply::Stall
        }
    });
    let (_home, mut g) = start_titled(&mock, "    timeout: 1\n");
    for (prompt, why) in [
        ("refuse me", "no titles here"),
        ("stall me", "no answer within 1s"),
    ] {
        let s = g.create_session(json!({}));
        let turn = g.run_turn(&s.id, prompt);
        assert_eq!(turn.complete["payload"]["status"], "complete");
        assert_eq!(turn.text, "fine");
        let said = g.stderr_with(why, T);
        assert!(
            said.lines()
                .any(|l| l.contains("[title]") && l.contains(why)),
            "a diagnostic line: {said}"
        );
        // The turns go on as if nothing happened, and nobody was told of an error.
        let next = g.run_turn(&s.id, "again");
        assert_eq!(next.complete["payload"]["status"], "complete");
        let events = g.events_of_session(&s.id);
        assert!(
            !types(&events)
                .iter()
                .any(|t| t == "error" || t == "session.title"),
            "{:?}",
            types(&events)
        );
        assert_eq!(listed_title(&mut g, &s.stored), Value::Null);
        assert_eq!(stored_title(&g, &s.stored), None);
        // Its cost was not counted: the turns' alone.
        let u = g.call("session.usage", json!({"session_id": s.id}));
        let u = u.get("usage").unwrap_or(&u).clone();
        assert_eq!(u["input"], 6, "{u}");
    }
    // The stalled call's connection was closed at its deadline.
    let stalled = mock
        .requests()
        .iter()
        .find(|r| is_title_request(r) && r.last_user_text().contains("stall"))
        .map(|r| r.conn)
        .expect("the stalled title request");
    assert!(mock.wait_peer_closed(stalled, T).is_some());
}

#[test]
fn a_title_the_user_set_is_kept_and_a_closed_sessions_call_is_dropped() {
    let mock = MockAi::start(|r| {
        if is_title_request(r) {
            Reply::Stall
        } else {
            Reply::text(&["done"], (3, 1))
        }
    });
    let (_home, mut g) = start_titled(&mock, "");
    // `/title` before the first answer: no title call at all.
    let named = g.create_session(json!({}));
    g.call(
        "session.title",
        json!({"session_id": named.id, "title": "My own"}),
    );
    g.run_turn(&named.id, "first");
    g.run_turn(&named.id, "second");
    assert!(
        !mock.requests().iter().any(is_title_request),
        "no title call for a titled session"
    );
    assert_eq!(listed_title(&mut g, &named.stored), "My own");

    // A session closed while its title is being written: the call is dropped, nothing said.
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "close me soon");
    let deadline = Instant::now() + T;
    let conn = loop {
        if let Some(r) = mock.requests().into_iter().find(is_title_request) {
            break r.conn;
        }
        assert!(Instant::now() < deadline, "no title call\n{}", g.diag());
        std::thread::sleep(Duration::from_millis(20));
    };
    g.call("session.close", json!({"session_id": s.id}));
    assert!(
        mock.wait_peer_closed(conn, T).is_some(),
        "the title call's connection is closed with its session"
    );
    g.ping();
    assert!(
        !g.frames
            .iter()
            .any(|f| event_type(f) == Some("session.title")
                && f["params"]["session_id"] == s.id.as_str()),
        "nothing said of a closed session"
    );
    assert_eq!(stored_title(&g, &s.stored), None);
}

#[test]
fn titles_are_off_when_config_yaml_turns_them_off() {
    let mock = answering("Never asked");
    let (_home, mut g) = start_titled(&mock, "    enabled: false\n");
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "one");
    g.run_turn(&s.id, "two");
    assert!(!mock.requests().iter().any(is_title_request));
    assert_eq!(listed_title(&mut g, &s.stored), Value::Null);
}

#[test]
fn the_title_call_goes_where_auxiliary_title_generation_says() {
    // The sessions run on `session_side`; the title goes to DeepSeek's endpoint or to one of its
    // own when config.yaml says so.
    let session_side = answering("From the session's provider");
    let title_only = |title: &'static str| {
        MockAi::start(move |r| match is_title_request(r) {
            true => Reply::text(&[title], (20, 4)),
            false => Reply::status(500, r#"{"error":{"message":"titles only"}}"#),
        })
    };
    let deepseek = title_only("From DeepSeek");
    let own = title_only("From its own endpoint");
    let home = TempHome::new("titles-aux");
    let config = home.path.join("config.yaml");
    let mut g = Gateway::builder()
        .home(&home.path)
        .openai_mock(&session_side.base_url())
        .env("TUI_GATEWAY_AUTO_TITLE", "on")
        .env("DEEPSEEK_API_KEY", "sk-ds-title")
        .env("DEEPSEEK_BASE_URL", &deepseek.base_url())
        .start();
    let title_requests = |m: &MockAi| -> Vec<Recorded> {
        m.requests().into_iter().filter(is_title_request).collect()
    };
    // config.yaml's section `aux`, a new session's first exchange: its title is `expected`,
    // from one request to `mock` for `model` with the key `bearer`.
    let titled =
        |g: &mut Gateway, aux: &str, expected: &str, mock: &MockAi, model: &str, bearer: &str| {
            std::fs::write(&config, format!("auxiliary:\n  title_generation:\n{aux}")).unwrap();
            let s = g.create_session(json!({}));
            let turn = g.run_turn(&s.id, "how do I share a value in rust?");
            assert_eq!(turn.text, "Use a borrow.");
            let said = g.wait_session_event(&s.id, "session.title", T);
            assert_eq!(said["payload"]["title"], expected, "{aux}");
            let asked = title_requests(mock);
            assert_eq!(asked.len(), 1, "{aux}");
            assert_hermes_parameters(&asked[0], model);
            assert_eq!(
                asked[0].header("authorization"),
                Some(format!("Bearer {bearer}").as_str()),
                "{aux}"
            );
        };

    // A model named alone: the session's provider (its key), that model.
    titled(
        &mut g,
        "    model: title-small\n",
        "From the session's provider",
        &session_side,
        "title-small",
        "sk-test",
    );
    // A provider of Hermes' table: its endpoint and key, the model named.
    titled(
        &mut g,
        "    provider: deepseek\n    model: deepseek-chat\n",
        "From DeepSeek",
        &deepseek,
        "deepseek-chat",
        "sk-ds-title",
    );
    // An endpoint of its own with its key.
    titled(
        &mut g,
        &format!(
            "    base_url: {}\n    api_key: sk-own-title\n    model: titler\n",
            own.base_url()
        ),
        "From its own endpoint",
        &own,
        "titler",
        "sk-own-title",
    );
    // Neither went to the session's provider.
    assert_eq!(title_requests(&session_side).len(), 1);

    // A provider that cannot be reached: no title, a diagnostic line, the turn unaffected.
    std::fs::write(
        &config,
        "auxiliary:\n  title_generation:\n    provider: anthropic\n",
    )
    .unwrap();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "untitled?");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    let said = g.stderr_with("[title]", T);
    assert!(
        said.lines()
            .any(|l| l.contains("[title]") && l.contains("anthropic")),
        "{said}"
    );
    assert_eq!(stored_title(&g, &s.stored), None);
}

#[test]
fn an_offline_session_is_titled_by_the_provider_auxiliary_title_generation_names() {
    // The offline model answers the turns; the title comes from DeepSeek's endpoint only when
    // config.yaml names a provider for titles.
    let deepseek = MockAi::start(|r| match is_title_request(r) {
        true => Reply::text(&["Greeting the offline model"], (20, 4)),
        false => Reply::status(500, r#"{"error":{"message":"titles only"}}"#),
    });
    let home = TempHome::new("titles-offline");
    let config = home.path.join("config.yaml");
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_PROVIDER", "offline")
        .env("TUI_GATEWAY_AUTO_TITLE", "on")
        .env("DEEPSEEK_API_KEY", "sk-ds-offline-title")
        .env("DEEPSEEK_BASE_URL", &deepseek.base_url())
        .start();
    let title_requests = || -> Vec<Recorded> {
        deepseek
            .requests()
            .into_iter()
            .filter(is_title_request)
            .collect()
    };

    // No provider named for titles: the offline model is not asked, no call goes out.
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "hello offline");
    assert!(
        turn.text.contains("You said: hello offline"),
        "{}",
        turn.text
    );
    g.run_turn(&s.id, "still there?");
    assert!(deepseek.requests().is_empty());
    assert_eq!(listed_title(&mut g, &s.stored), Value::Null);

    // DeepSeek named for titles: the next new session's first exchange is titled there.
    std::fs::write(
        &config,
        "auxiliary:\n  title_generation:\n    provider: deepseek\n    model: deepseek-chat\n",
    )
    .unwrap();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "hello offline");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    let said = g.wait_session_event(&s.id, "session.title", T);
    assert_eq!(said["payload"]["title"], "Greeting the offline model");
    assert_eq!(
        stored_title(&g, &s.stored).as_deref(),
        Some("Greeting the offline model")
    );
    let asked = title_requests();
    assert_eq!(asked.len(), 1);
    assert_hermes_parameters(&asked[0], "deepseek-chat");
    assert_eq!(
        asked[0].header("authorization"),
        Some("Bearer sk-ds-offline-title")
    );
    assert_eq!(
        asked[0].conversation(),
        [(
            "user".to_string(),
            "User: hello offline\n\nAssistant: (offline model) You said: hello offline".to_string()
        )]
    );
}

#[test]
fn a_provider_named_for_titles_without_a_model_is_asked_for_hermes_cheap_one() {
    // `provider: zai` alone: Hermes' auxiliary default for Z.AI (glm-4.5-flash), not the
    // session's model; a provider with no default of Hermes' (DeepSeek) gets the model
    // resolution gives it.
    let titler = |title: &'static str| {
        MockAi::start(move |r| match is_title_request(r) {
            true => Reply::text(&[title], (20, 4)),
            false => Reply::status(500, r#"{"error":{"message":"titles only"}}"#),
        })
    };
    let (zai, deepseek) = (titler("From Z.AI"), titler("From DeepSeek"));
    let session_side = answering("From the session's provider");
    let home = TempHome::new("titles-aux-default");
    let config = home.path.join("config.yaml");
    let mut g = Gateway::builder()
        .home(&home.path)
        .openai_mock(&session_side.base_url())
        .env("TUI_GATEWAY_AUTO_TITLE", "on")
        .env("GLM_API_KEY", "sk-glm-title")
        .env("GLM_BASE_URL", &zai.base_url())
        .env("DEEPSEEK_API_KEY", "sk-ds-title")
        .env("DEEPSEEK_BASE_URL", &deepseek.base_url())
        .start();
    for (provider, mock, expected, model) in [
        ("zai", &zai, "From Z.AI", "glm-4.5-flash"),
        ("deepseek", &deepseek, "From DeepSeek", "mock-model"),
    ] {
        std::fs::write(
            &config,
            format!("auxiliary:\n  title_generation:\n    provider: {provider}\n"),
        )
        .unwrap();
        let s = g.create_session(json!({}));
        g.run_turn(&s.id, "how do I share a value in rust?");
        let said = g.wait_session_event(&s.id, "session.title", T);
        assert_eq!(said["payload"]["title"], expected);
        let asked: Vec<Recorded> = mock
            .requests()
            .into_iter()
            .filter(is_title_request)
            .collect();
        assert_eq!(asked.len(), 1, "{provider}");
        assert_hermes_parameters(&asked[0], model);
    }
}
