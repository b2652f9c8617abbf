//! Configuration and models, black-box: `config.set` / `config.get` as the stock TUI sends them,
//! config.yaml edited in place (comments and other keys kept byte for byte), yolo, model
//! switches the next turn uses, `model.options` with a mock `/v1/models` and with the server
//! down, hostile config files, and `model.api_key` / `api_key_env` as the bearer token.
//!
//! Every wait has a deadline; nothing relies on a bare sleep for synchronisation.

mod common;
mod mockai;

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
