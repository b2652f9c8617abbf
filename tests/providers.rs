//! Reaching the user's model as Hermes does (issue 29), black-box: real Hermes homes
//! (config.yaml as `hermes model` writes it, keys in `$HERMES_HOME/.env`, logins in
//! `auth.json`) against a local fake standing in for each provider's host, whose base URL the
//! provider's own variable points at.

use crate::common;
use crate::mockai;

use common::*;
use mockai::*;
use serde_json::{Value, json};

/// A home with these files.
fn home_with(tag: &str, config: &str, dotenv: &str) -> TempHome {
    let home = TempHome::new(tag);
    std::fs::write(home.path.join("config.yaml"), config).unwrap();
    std::fs::write(home.path.join(".env"), dotenv).unwrap();
    home
}

/// One turn answered by the fake; the request it got.
fn one_turn(g: &mut Gateway, mock: &MockAi, prompt: &str) -> (Turn, Recorded) {
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, prompt);
    let r = mock.wait_requests(1, T).remove(0);
    (t, r)
}

/// The API-key providers of Hermes' table that speak Chat Completions: id, a key variable
/// (`.env`), the base-URL variable (exported; `None`: the provider has none, config.yaml's
/// `model.base_url` points it).
const CHAT_PROVIDERS: &[(&str, &str, Option<&str>)] = &[
    (
        "openrouter",
        "OPENROUTER_API_KEY",
        Some("OPENROUTER_BASE_URL"),
    ),
    ("openai-api", "OPENAI_API_KEY", Some("OPENAI_BASE_URL")),
    ("gemini", "GEMINI_API_KEY", Some("GEMINI_BASE_URL")),
    ("zai", "ZAI_API_KEY", Some("GLM_BASE_URL")),
    ("kimi-coding", "KIMI_API_KEY", Some("KIMI_BASE_URL")),
    ("kimi-coding-cn", "KIMI_CN_API_KEY", None),
    ("stepfun", "STEPFUN_API_KEY", Some("STEPFUN_BASE_URL")),
    ("arcee", "ARCEEAI_API_KEY", Some("ARCEE_BASE_URL")),
    ("gmi", "GMI_API_KEY", Some("GMI_BASE_URL")),
    ("alibaba", "DASHSCOPE_API_KEY", Some("DASHSCOPE_BASE_URL")),
    (
        "alibaba-coding-plan",
        "ALIBABA_CODING_PLAN_API_KEY",
        Some("ALIBABA_CODING_PLAN_BASE_URL"),
    ),
    ("deepseek", "DEEPSEEK_API_KEY", Some("DEEPSEEK_BASE_URL")),
    ("nvidia", "NVIDIA_API_KEY", Some("NVIDIA_BASE_URL")),
    (
        "opencode-zen",
        "OPENCODE_ZEN_API_KEY",
        Some("OPENCODE_ZEN_BASE_URL"),
    ),
    (
        "opencode-go",
        "OPENCODE_GO_API_KEY",
        Some("OPENCODE_GO_BASE_URL"),
    ),
    ("kilocode", "KILOCODE_API_KEY", Some("KILOCODE_BASE_URL")),
    ("huggingface", "HF_TOKEN", Some("HF_BASE_URL")),
    ("xiaomi", "XIAOMI_API_KEY", Some("XIAOMI_BASE_URL")),
    (
        "tencent-tokenhub",
        "TOKENHUB_API_KEY",
        Some("TOKENHUB_BASE_URL"),
    ),
    ("ollama-cloud", "OLLAMA_API_KEY", Some("OLLAMA_BASE_URL")),
    (
        "azure-foundry",
        "AZURE_FOUNDRY_API_KEY",
        Some("AZURE_FOUNDRY_BASE_URL"),
    ),
    ("copilot", "GITHUB_TOKEN", Some("COPILOT_API_BASE_URL")),
    ("lmstudio", "LM_API_KEY", Some("LM_BASE_URL")),
];

#[test]
fn every_chat_completions_provider_is_reached_with_its_key_from_dotenv() {
    for (id, key_var, base_var) in CHAT_PROVIDERS {
        let mock = MockAi::script(vec![Reply::text(&["hi from ", id], (3, 2))]);
        let key = format!("key-{id}-0123");
        let mut config = format!("model:\n  provider: {id}\n  default: glm-4.6\n");
        if base_var.is_none() {
            config.push_str(&format!("  base_url: {}\n", mock.base_url()));
        }
        let home = home_with(
            "providers-row",
            &config,
            &format!("# saved by hermes setup\n{key_var}={key}\n"),
        );
        let mut b = Gateway::builder().tag("providers-row").home(&home.path);
        if let Some(var) = base_var {
            b = b.env(var, &mock.base_url());
        }
        let mut g = b.start();
        let st = g.call("setup.status", json!({}));
        assert_eq!(
            (&st["provider"], &st["warning"]),
            (&json!(id), &Value::Null),
            "{id}"
        );
        let (t, r) = one_turn(&mut g, &mock, "hello");
        assert_eq!(t.text, format!("hi from {id}"), "{id}: {:?}", t.complete);
        assert!(r.path.ends_with("/chat/completions"), "{id}: {}", r.path);
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {key}").as_str()),
            "{id}"
        );
        assert_eq!(r.body["model"], "glm-4.6", "{id}");
    }
}

#[test]
fn hermes_default_home_reaches_openrouter_with_the_key_in_dotenv() {
    // What `hermes setup` leaves: provider auto, a model, the key in .env (an exported key
    // that went stale is beaten by it).
    let mock = MockAi::script(vec![Reply::text(&["routed"], (5, 1))]);
    let home = home_with(
        "providers-auto",
        "model:\n  default: anthropic/claude-sonnet-4.5\n  provider: auto\n",
        "OPENROUTER_API_KEY=sk-or-fresh\n",
    );
    let mut g = Gateway::builder()
        .tag("providers-auto")
        .home(&home.path)
        .env("OPENROUTER_API_KEY", "sk-or-stale")
        .env("OPENROUTER_BASE_URL", &mock.base_url())
        .start();
    let (t, r) = one_turn(&mut g, &mock, "hi");
    assert_eq!(t.text, "routed", "{:?}", t.complete);
    assert_eq!(r.header("authorization"), Some("Bearer sk-or-fresh"));
    assert_eq!(r.body["model"], "anthropic/claude-sonnet-4.5");
    assert_eq!(t.event("session.info")["payload"]["provider"], "openrouter");
}

#[test]
fn deepseek_as_hermes_model_writes_it_sends_its_key() {
    let mock = MockAi::script(vec![Reply::text(&["deep"], (5, 1))]);
    // `hermes model` writes the provider's public base URL; the test's variable moves it.
    let home = home_with(
        "providers-deepseek",
        "model:\n  default: deepseek-chat\n  provider: deepseek\n",
        "DEEPSEEK_API_KEY=sk-ds-0123\n",
    );
    let mut g = Gateway::builder()
        .tag("providers-deepseek")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &mock.base_url())
        .start();
    let (t, r) = one_turn(&mut g, &mock, "hi");
    assert_eq!(t.text, "deep", "{:?}", t.complete);
    assert_eq!(r.header("authorization"), Some("Bearer sk-ds-0123"));
}

#[test]
fn a_providers_entry_sends_its_key_headers_and_extra_body() {
    let mock = MockAi::script(vec![Reply::text(&["lab"], (5, 1))]);
    let config = format!(
        "model:\n  provider: custom:lab\nproviders:\n  lab:\n    name: Lab\n    base_url: {}\n    \
         key_env: LAB_KEY\n    default_model: lab-7b\n    extra_headers:\n      X-Team: research\n    \
         extra_body:\n      top_k: 5\n",
        mock.base_url()
    );
    let home = home_with("providers-entry", &config, "LAB_KEY=lab-secret-1\n");
    let mut g = Gateway::builder()
        .tag("providers-entry")
        .home(&home.path)
        .start();
    let (t, r) = one_turn(&mut g, &mock, "hi");
    assert_eq!(t.text, "lab", "{:?}", t.complete);
    assert_eq!(r.header("authorization"), Some("Bearer lab-secret-1"));
    assert_eq!(r.header("x-team"), Some("research"));
    assert_eq!(
        (&r.body["model"], &r.body["top_k"]),
        (&json!("lab-7b"), &json!(5))
    );
    assert_eq!(t.event("session.info")["payload"]["provider"], "custom:lab");
}

#[test]
fn an_entrys_api_mode_or_transport_chooses_its_api() {
    // A `providers:` entry saying `transport`, a `custom_providers:` one saying `api_mode`:
    // each is sent the Messages API (`/v1/messages`, `x-api-key`), as Hermes reads them.
    let answer = || {
        use mockai::anthropic::{Usage, reply, text_answer};
        MockAi::script(vec![reply(text_answer(&["messages"], Usage(5, 0, 0, 1)))])
    };
    for (tag, entry) in [
        (
            "providers-transport",
            "model:\n  provider: custom:lab\nproviders:\n  lab:\n    base_url: {url}\n    \
             api_key: sk-lab-1\n    default_model: lab-claude\n    transport: anthropic_messages\n",
        ),
        (
            "providers-api-mode",
            "model:\n  provider: custom:lab\ncustom_providers:\n  - name: lab\n    base_url: {url}\n    \
             api_key: sk-lab-1\n    model: lab-claude\n    api_mode: anthropic_messages\n",
        ),
    ] {
        let mock = answer();
        let home = home_with(tag, &entry.replace("{url}", &mock.base_url()), "");
        let mut g = Gateway::builder().tag(tag).home(&home.path).start();
        let (t, r) = one_turn(&mut g, &mock, "hi");
        assert_eq!(t.text, "messages", "{tag}: {:?}", t.complete);
        assert!(r.path.ends_with("/messages"), "{tag}: {}", r.path);
        assert_eq!(r.header("x-api-key"), Some("sk-lab-1"), "{tag}");
        assert_eq!(r.body["model"], "lab-claude", "{tag}");
    }
}

#[test]
fn a_nous_login_in_auth_json_is_used() {
    let mock = MockAi::script(vec![Reply::text(&["nous"], (5, 1))]);
    let home = home_with("providers-nous", "model:\n  default: Hermes-4-405B\n", "");
    let auth = json!({"version": 1, "active_provider": "nous", "providers": {"nous": {
        "access_token": "eyJ.access", "agent_key": "eyJ.agent-key",
        "inference_base_url": "https://inference-api.nousresearch.com/v1"}}});
    std::fs::write(home.path.join("auth.json"), auth.to_string()).unwrap();
    let mut g = Gateway::builder()
        .tag("providers-nous")
        .home(&home.path)
        .env("NOUS_INFERENCE_BASE_URL", &mock.base_url())
        .start();
    let (t, r) = one_turn(&mut g, &mock, "hi");
    assert_eq!(t.text, "nous", "{:?}", t.complete);
    assert_eq!(r.header("authorization"), Some("Bearer eyJ.agent-key"));
    assert_eq!(t.event("session.info")["payload"]["provider"], "nous");
}

#[test]
fn a_provider_that_cannot_be_reached_says_why_instead_of_answering_offline() {
    for (config, dotenv, why) in [
        (
            "model:\n  provider: anthropic\n  default: claude-sonnet-4-5\n",
            "",
            "ANTHROPIC_API_KEY",
        ),
        (
            "model:\n  provider: nous\n  default: Hermes-4-405B\n",
            "",
            "not logged into Nous Portal",
        ),
        (
            "model:\n  provider: sumthing\n  default: m\n",
            "",
            "Unknown provider 'sumthing'",
        ),
        (
            "model:\n  provider: openrouter\n",
            "OPENROUTER_API_KEY=sk-or-0123\n",
            "no model is chosen",
        ),
    ] {
        let home = home_with("providers-unreachable", config, dotenv);
        let mut g = Gateway::builder()
            .tag("providers-unreachable")
            .home(&home.path)
            .start();
        let st = g.call("setup.status", json!({}));
        let warning = st["warning"].as_str().unwrap_or("");
        assert!(warning.contains(why), "{config}: {st}");
        let s = g.create_session(json!({}));
        let t = g.run_turn(&s.id, "hello");
        assert_eq!(t.complete["payload"]["status"], "error", "{config}");
        let error = t.complete["payload"]["error"].as_str().unwrap_or("");
        assert!(error.contains(why), "{config}: {error}");
        // The reason is the answer; the offline model never answers instead.
        assert_eq!(t.text, format!("Error: {error}"), "{config}");
        assert!(!t.text.contains("(offline model)"), "{config}: {}", t.text);
    }
}

#[test]
fn a_key_from_dotenv_never_reaches_a_tool() {
    let secret = "sk-or-dotenv-only-5150";
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(tool_call_events(
            "call_env",
            "env; cat /proc/$PPID/environ 2>&1 | tr '\\0' '\\n'",
            7,
            (10, 5),
        ))),
        Reply::text(&["looked"], (20, 2)),
    ]);
    let home = home_with(
        "providers-secret",
        "model:\n  provider: openrouter\n  default: m\n",
        &format!("OPENROUTER_API_KEY={secret}\n"),
    );
    let mut g = Gateway::builder()
        .tag("providers-secret")
        .home(&home.path)
        .env("OPENROUTER_BASE_URL", &mock.base_url())
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "show me your environment");
    assert_eq!(t.text, "looked", "{:?}", t.complete);
    let reqs = mock.wait_requests(2, T);
    let tool_result = reqs[1]
        .messages()
        .into_iter()
        .find(|m| m["role"] == "tool")
        .expect("the tool's result went back to the model");
    let output = content_text(&tool_result["content"]);
    assert!(output.contains("PATH="), "the command ran: {output}");
    assert!(
        !output.contains(secret),
        "the key reached the tool: {output}"
    );
    let rows = g.db().query_row(
        "SELECT count(*) FROM messages WHERE content LIKE ?1",
        [format!("%{secret}%")],
        |r| r.get::<_, i64>(0),
    );
    assert_eq!(rows.unwrap(), 0, "the key is in the transcript");
}

/// The API-key providers of Hermes' table that speak Anthropic's Messages API: id, key
/// variable, base-URL variable, and the path below the fake that the variable names (Hermes
/// tells MiniMax's API by its `/anthropic` path). On a host that is not the vendor's own the
/// key goes in `x-api-key`, as Hermes sends it to any Messages endpoint it does not know.
const MESSAGES_PROVIDERS: &[(&str, &str, &str, &str)] = &[
    ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ""),
    (
        "minimax",
        "MINIMAX_API_KEY",
        "MINIMAX_BASE_URL",
        "/anthropic",
    ),
    (
        "minimax-cn",
        "MINIMAX_CN_API_KEY",
        "MINIMAX_CN_BASE_URL",
        "/anthropic",
    ),
];

#[test]
fn every_messages_provider_is_reached_with_its_key_from_dotenv() {
    use mockai::anthropic::{Usage, reply, text_answer};
    for (id, key_var, base_var, path) in MESSAGES_PROVIDERS {
        let mock = MockAi::script(vec![reply(text_answer(
            &["hi from ", id],
            Usage(3, 0, 0, 2),
        ))]);
        let key = format!("key-{id}-0123");
        let home = home_with(
            "providers-messages",
            &format!("model:\n  provider: {id}\n  default: claude-sonnet-4-5\n"),
            &format!("{key_var}={key}\n"),
        );
        let base = format!("http://127.0.0.1:{}{path}", mock.port);
        let mut g = Gateway::builder()
            .tag("providers-messages")
            .home(&home.path)
            .env(base_var, &base)
            .start();
        let (t, r) = one_turn(&mut g, &mock, "hello");
        assert_eq!(t.text, format!("hi from {id}"), "{id}: {:?}", t.complete);
        assert_eq!(r.path, format!("{path}/v1/messages"), "{id}");
        assert_eq!(r.header("x-api-key"), Some(key.as_str()), "{id}");
        assert!(r.header("anthropic-version").is_some(), "{id}");
    }
}

#[test]
fn xai_is_reached_on_the_responses_api_with_its_key_from_dotenv() {
    use mockai::responses::{Answer, reply, usage};
    let mock = MockAi::script(vec![reply(
        Answer::new()
            .text("msg_1", &["hi from ", "xai"])
            .completed(usage(3, 0, 2, 0)),
    )]);
    let home = home_with(
        "providers-xai",
        "model:\n  provider: grok\n  default: grok-4\n",
        "XAI_API_KEY=xai-key-0123\n",
    );
    let mut g = Gateway::builder()
        .tag("providers-xai")
        .home(&home.path)
        .env("XAI_BASE_URL", &mock.base_url())
        .start();
    let (t, r) = one_turn(&mut g, &mock, "hello");
    assert_eq!(t.text, "hi from xai", "{:?}", t.complete);
    assert!(r.path.ends_with("/responses"), "{}", r.path);
    assert_eq!(r.header("authorization"), Some("Bearer xai-key-0123"));
    assert_eq!(t.event("session.info")["payload"]["provider"], "xai");
}

/// A fake provider that lists `models` on `GET /models` and answers every prompt with `text`.
fn listing_fake(text: &'static str, models: &'static [&'static str]) -> MockAi {
    MockAi::start(move |r| {
        if r.method == "GET" {
            let data: Vec<Value> = models.iter().map(|m| json!({"id": m})).collect();
            return Reply::status(200, &json!({"object": "list", "data": data}).to_string());
        }
        Reply::text(&[text], (3, 1))
    })
}

#[test]
fn a_key_saved_from_the_picker_reaches_its_provider_at_once() {
    let key = "sk-ds-picker-5151";
    let mock = listing_fake("from deepseek", &["deepseek-chat", "deepseek-reasoner"]);
    let home = home_with(
        "providers-save-key",
        "model:\n  default: deepseek-chat\n",
        "# mine\nexport OTHER_API_KEY=keep-me # note\nDEEPSEEK_API_KEY=\n",
    );
    let env_file = home.path.join(".env");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let log = home.path.join("rpc.log");
    let mut g = Gateway::builder()
        .tag("providers-save-key")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &mock.base_url())
        .env("TUI_GATEWAY_RPC_LOG", log.to_str().unwrap())
        .start();
    let s = g.create_session(json!({}));
    // The picker offers DeepSeek without a key, with the variable it goes in.
    let o = g.call("model.options", json!({"include_unconfigured": true}));
    let row = |o: &Value| {
        o["providers"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["slug"] == "deepseek"))
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        (&row(&o)["authenticated"], &row(&o)["key_env"]),
        (&json!(false), &json!("DEEPSEEK_API_KEY")),
        "{o}"
    );
    let r = g.call(
        "model.save_key",
        json!({"slug": "deepseek", "api_key": format!(" {key}\n"), "session_id": s.id}),
    );
    let p = &r["provider"];
    assert_eq!(
        (&p["slug"], &p["authenticated"], &p["auth_type"]),
        (&json!("deepseek"), &json!(true), &json!("api_key")),
        "{r}"
    );
    let models = p["models"].as_array().cloned().unwrap_or_default();
    assert!(models.contains(&json!("deepseek-reasoner")), "{r}");
    assert_eq!(p["total_models"], models.len(), "{r}");
    // Saved as Hermes saves it: its line replaced, the others kept, private.
    let text = std::fs::read_to_string(&env_file).unwrap();
    assert_eq!(
        text,
        format!("# mine\nexport OTHER_API_KEY=keep-me # note\nDEEPSEEK_API_KEY={key}\n")
    );
    let mode = std::fs::metadata(&env_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // The picker shows it authenticated from now on, and the session's next prompt is
    // answered by DeepSeek with that key (`auto` now finds it).
    let o = g.call("model.options", json!({"include_unconfigured": true}));
    assert_eq!(row(&o)["authenticated"], true, "{o}");
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.text, "from deepseek", "{:?}", t.complete);
    assert_eq!(mock.first_post_bearer(), Some(format!("Bearer {key}")));
    // The key is in no log, no stderr line, no transcript.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("model.save_key"), "the call is logged");
    assert!(!logged.contains(key), "the key is in the call log");
    assert!(!g.stderr_text().contains(key), "{}", g.stderr_text());
    let rows = g.db().query_row(
        "SELECT count(*) FROM messages WHERE content LIKE ?1",
        [format!("%{key}%")],
        |r| r.get::<_, i64>(0),
    );
    assert_eq!(rows.unwrap(), 0, "the key is in the transcript");
}

#[test]
fn a_key_the_picker_cannot_save_is_refused_without_repeating_it() {
    let home = home_with("providers-save-refused", "model:\n  default: m\n", "A=1\n");
    let mut g = Gateway::builder()
        .tag("providers-save-refused")
        .home(&home.path)
        .start();
    let secret = "sk-never-shown-7272";
    let long = format!("{secret}{}", "x".repeat(9000));
    for (params, code, why) in [
        (
            json!({"slug": "deepseek", "api_key": "  "}),
            4001,
            "required",
        ),
        (json!({"api_key": secret}), 4001, "required"),
        (
            json!({"slug": "deepseek", "api_key": format!("{secret}\nEVIL=1")}),
            4001,
            "line breaks",
        ),
        (
            json!({"slug": "deepseek", "api_key": format!("{secret} x")}),
            4001,
            "spaces",
        ),
        (
            json!({"slug": "deepseek", "api_key": long}),
            4001,
            "longer than",
        ),
        (
            json!({"slug": "no-such", "api_key": secret}),
            4002,
            "unknown provider",
        ),
        (
            json!({"slug": "nous", "api_key": secret}),
            4003,
            "hermes model",
        ),
        (json!({"slug": "deepseek", "api_key": 7}), -32602, "string"),
    ] {
        let (got, message, _) = g.call_err("model.save_key", params.clone());
        assert_eq!(got, code, "{params}: {message}");
        assert!(message.contains(why), "{params}: {message}");
        assert!(!message.contains(secret), "{params}: {message}");
    }
    assert_eq!(
        std::fs::read_to_string(home.path.join(".env")).unwrap(),
        "A=1\n",
        "nothing refused was written"
    );
    assert!(!g.stderr_text().contains(secret));
}

/// The prompts a fake got (not its model lists).
fn posts(mock: &MockAi) -> Vec<Recorded> {
    let mut sent = mock.requests();
    sent.retain(|r| r.method == "POST");
    sent
}

/// The DeepSeek row of a `model.options` answer.
fn deepseek_row(o: &Value) -> Value {
    o["providers"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["slug"] == "deepseek"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn a_disconnected_key_is_gone_from_dotenv_and_no_longer_sent() {
    let saved = "sk-ds-saved-6161";
    let exported = "sk-ds-exported-6262";
    let mock = listing_fake("from deepseek", &["deepseek-chat"]);
    let home = home_with(
        "providers-disconnect",
        "model:\n  provider: deepseek\n  default: deepseek-chat\n",
        "# mine\nexport OTHER_API_KEY=keep-me # note\nDEEPSEEK_API_KEY=old\n",
    );
    let env_file = home.path.join(".env");
    let log = home.path.join("rpc.log");
    let mut g = Gateway::builder()
        .tag("providers-disconnect")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &mock.base_url())
        // Also exported: Hermes drops it from its environment when it disconnects.
        .env("DEEPSEEK_API_KEY", exported)
        .env("TUI_GATEWAY_RPC_LOG", log.to_str().unwrap())
        .start();
    let s = g.create_session(json!({}));
    g.call(
        "model.save_key",
        json!({"slug": "deepseek", "api_key": saved, "session_id": s.id}),
    );
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.text, "from deepseek", "{:?}", t.complete);
    assert_eq!(mock.first_post_bearer(), Some(format!("Bearer {saved}")));

    let r = g.call("model.disconnect", json!({"slug": " deepseek "}));
    assert_eq!(
        r,
        json!({"slug": "deepseek", "name": "DeepSeek", "disconnected": true})
    );
    // Its line is gone, the others kept as written, the file still private.
    assert_eq!(
        std::fs::read_to_string(&env_file).unwrap(),
        "# mine\nexport OTHER_API_KEY=keep-me # note\n"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&env_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // At once: the picker shows it without a key, and the next prompt sends neither key.
    let o = g.call("model.options", json!({"include_unconfigured": true}));
    assert_eq!(deepseek_row(&o)["authenticated"], false, "{o}");
    let sent_before = posts(&mock).len();
    let t = g.run_turn(&s.id, "again");
    assert_eq!(t.complete["payload"]["status"], "error", "{:?}", t.complete);
    let error = t.complete["payload"]["error"].as_str().unwrap_or("");
    assert!(error.contains("DEEPSEEK_API_KEY"), "{error}");
    assert_eq!(
        posts(&mock).len(),
        sent_before,
        "a prompt went out without its key"
    );
    for r in posts(&mock) {
        let auth = r.header("authorization").unwrap_or("");
        assert!(
            !auth.contains(exported),
            "the exported key was sent: {auth}"
        );
    }
    // Nothing left to disconnect; neither key in an answer, the call log or stderr.
    let m = g.expect_code("model.disconnect", json!({"slug": "deepseek"}), 4005);
    assert!(m.contains("no credentials found for deepseek"), "{m}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("model.disconnect"), "the call is logged");
    for key in [saved, exported] {
        assert!(!logged.contains(key), "the key is in the call log");
        assert!(!g.stderr_text().contains(key), "{}", g.stderr_text());
    }
}

#[test]
fn disconnect_refuses_as_hermes_does() {
    let home = home_with(
        "providers-disconnect-refused",
        "model:\n  default: m\n",
        "A=1\n",
    );
    let mut g = Gateway::builder()
        .tag("providers-disconnect-refused")
        .home(&home.path)
        .start();
    for (params, code, why) in [
        (json!({}), 4001, "slug is required"),
        (json!({"slug": "  "}), 4001, "slug is required"),
        (json!({"slug": 7}), -32602, "string"),
        (
            json!({"slug": "deepseek"}),
            4005,
            "no credentials found for deepseek",
        ),
        (
            json!({"slug": "no-such"}),
            4005,
            "no credentials found for no-such",
        ),
    ] {
        let (got, message, _) = g.call_err("model.disconnect", params.clone());
        assert_eq!(got, code, "{params}: {message}");
        assert!(message.contains(why), "{params}: {message}");
    }
    assert_eq!(
        std::fs::read_to_string(home.path.join(".env")).unwrap(),
        "A=1\n"
    );
}

#[test]
fn a_managed_install_keeps_its_credentials() {
    let secret = "sk-ds-managed-7373";
    let dotenv = "DEEPSEEK_API_KEY=kept-as-is\n";
    // The marker file of NixOS' activation script, then the service's variable.
    for (marker, var) in [
        (Some(""), None),
        (Some("nixos\n"), None),
        (None, Some("true")),
    ] {
        let home = home_with("providers-managed", "model:\n  default: m\n", dotenv);
        if let Some(text) = marker {
            std::fs::write(home.path.join(".managed"), text).unwrap();
        }
        let mut b = Gateway::builder().tag("providers-managed").home(&home.path);
        if let Some(v) = var {
            b = b.env("HERMES_MANAGED", v);
        }
        let mut g = b.start();
        let m = g.expect_code(
            "model.save_key",
            json!({"slug": "deepseek", "api_key": secret}),
            4006,
        );
        assert_eq!(m, "managed install — credentials are read-only");
        let m = g.expect_code("model.disconnect", json!({"slug": "deepseek"}), 4006);
        assert_eq!(m, "managed install — credentials are read-only");
        assert_eq!(
            std::fs::read_to_string(home.path.join(".env")).unwrap(),
            dotenv,
            "{marker:?} {var:?}"
        );
        assert!(!g.stderr_text().contains(secret));
    }
    // Hermes' opt-out: the variable says it is not managed, whatever the file says.
    let home = home_with("providers-managed-off", "model:\n  default: m\n", dotenv);
    std::fs::write(home.path.join(".managed"), "nixos").unwrap();
    let mut g = Gateway::builder()
        .tag("providers-managed-off")
        .home(&home.path)
        .env("HERMES_MANAGED", "false")
        .start();
    g.call("model.disconnect", json!({"slug": "deepseek"}));
    assert_eq!(std::fs::read_to_string(home.path.join(".env")).unwrap(), "");
}

#[test]
fn a_session_switched_to_a_disconnected_provider_no_longer_sends_its_key() {
    let key = "sk-or-switched-8484";
    let deepseek = listing_fake("from deepseek", &[]);
    let openrouter = listing_fake("from openrouter", &[]);
    let home = home_with(
        "providers-disconnect-switched",
        "model:\n  provider: deepseek\n  default: deepseek-chat\n",
        &format!("DEEPSEEK_API_KEY=sk-ds-stays\nOPENROUTER_API_KEY={key}\n"),
    );
    let mut g = Gateway::builder()
        .tag("providers-disconnect-switched")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &deepseek.base_url())
        .env("OPENROUTER_BASE_URL", &openrouter.base_url())
        .start();
    let s = g.create_session(json!({}));
    g.call(
        "config.set",
        json!({"key": "model", "session_id": s.id, "value": "m --provider openrouter --session"}),
    );
    assert_eq!(g.run_turn(&s.id, "hi").text, "from openrouter");
    assert_eq!(
        openrouter.first_post_bearer(),
        Some(format!("Bearer {key}"))
    );
    g.call("model.disconnect", json!({"slug": "openrouter"}));
    let t = g.run_turn(&s.id, "again");
    assert_eq!(t.complete["payload"]["status"], "error", "{:?}", t.complete);
    assert_eq!(
        posts(&openrouter).len(),
        1,
        "the switched session sent again"
    );
    assert!(
        posts(&deepseek).is_empty(),
        "it fell back to another provider"
    );
    // The other provider's key is untouched.
    let other = g.create_session(json!({}));
    assert_eq!(g.run_turn(&other.id, "hi").text, "from deepseek");
    assert_eq!(
        std::fs::read_to_string(home.path.join(".env")).unwrap(),
        "DEEPSEEK_API_KEY=sk-ds-stays\n"
    );
}

#[test]
fn disconnect_waits_for_the_running_turn() {
    let mock = MockAi::script(vec![Reply::Stream(
        Stream::new(text_events(&["still "], "stop", None)).end(End::Stall),
    )]);
    let dotenv = "DEEPSEEK_API_KEY=sk-ds-in-use\n";
    let home = home_with(
        "providers-disconnect-busy",
        "model:\n  provider: deepseek\n  default: deepseek-chat\n",
        dotenv,
    );
    let mut g = Gateway::builder()
        .tag("providers-disconnect-busy")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &mock.base_url())
        .start();
    let s = g.create_session(json!({}));
    submit(&mut g, &s.id, "hi");
    g.wait_session_event(&s.id, "message.delta", T);
    let m = g.expect_code("model.disconnect", json!({"slug": "deepseek"}), 4009);
    assert!(m.contains("a turn is running"), "{m}");
    assert_eq!(
        std::fs::read_to_string(home.path.join(".env")).unwrap(),
        dotenv
    );
    g.call("session.interrupt", json!({"session_id": s.id}));
    g.wait_session_event(&s.id, "message.complete", T);
    g.call("model.disconnect", json!({"slug": "deepseek"}));
    assert_eq!(std::fs::read_to_string(home.path.join(".env")).unwrap(), "");
}

#[test]
fn a_failing_provider_falls_back_as_config_yaml_says() {
    // The configured endpoint fails as the prompt says; DeepSeek (`fallback_providers:`) and a
    // `fallback_model:` endpoint answer. Each call tries the configured one first.
    let primary = MockAi::start(|r| {
        let asked = r.last_user_text();
        match () {
            _ if asked.contains("overloaded") || asked.contains("tool turn") => {
                Reply::status(503, r#"{"error":{"message":"overloaded"}}"#)
            }
            _ if asked.contains("bad request") => {
                Reply::status(400, r#"{"error":{"message":"context too long"}}"#)
            }
            _ if asked.contains("no key") => {
                Reply::status(401, r#"{"error":{"message":"who are you"}}"#)
            }
            _ => Reply::text(&["primary"], (5, 1)),
        }
    });
    let deepseek = MockAi::start(|r| {
        let asked = r.last_user_text();
        let after_tool = r.messages().iter().any(|m| m["role"] == "tool");
        match () {
            _ if asked.contains("deepseek down") => {
                Reply::status(500, r#"{"error":{"message":"also down"}}"#)
            }
            _ if asked.contains("tool turn") && !after_tool => Reply::Stream(Stream::new(
                tool_call_events("call_fb", "echo fell-back", 5, (5, 5)),
            )),
            _ if asked.contains("tool turn") => Reply::text(&["tool turn done"], (5, 1)),
            _ => Reply::text(&["from deepseek"], (5, 1)),
        }
    });
    let last = MockAi::start(|_| Reply::text(&["from the last one"], (5, 1)));
    let config = format!(
        "model:\n  provider: custom\n  base_url: {}\n  api_key: sk-primary-1\n  default: main-model\n\
         fallback_providers:\n  - provider: deepseek\n    model: deepseek-chat\n\
         fallback_model:\n  provider: custom\n  model: last-model\n  base_url: {}\n  api_key: sk-last-1\n",
        primary.base_url(),
        last.base_url()
    );
    let home = home_with(
        "providers-fallback",
        &config,
        "DEEPSEEK_API_KEY=sk-ds-fallback\n",
    );
    let mut g = Gateway::builder()
        .tag("providers-fallback")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &deepseek.base_url())
        .env("TUI_GATEWAY_RETRY_BASE_S", "0.05")
        .start();
    let s = g.create_session(json!({}));
    let posts = |m: &MockAi, word: &str| {
        m.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.last_user_text().contains(word))
            .collect::<Vec<_>>()
    };

    // A 503 after its retries: DeepSeek answers, with its model and key; the switch is said.
    let t = g.run_turn(&s.id, "overloaded?");
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{}",
        t.complete
    );
    assert_eq!(t.text, "from deepseek");
    assert_eq!(
        posts(&primary, "overloaded").len(),
        3,
        "tried, then retried twice"
    );
    let asked = posts(&deepseek, "overloaded");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].body["model"], "deepseek-chat");
    assert_eq!(
        asked[0].header("authorization"),
        Some("Bearer sk-ds-fallback")
    );
    let said: Vec<String> = t
        .events
        .iter()
        .filter(|e| e["type"] == "status.update")
        .filter_map(|e| e["payload"]["text"].as_str().map(str::to_string))
        .collect();
    assert!(
        said.iter()
            .any(|l| l.contains("falling back to deepseek (deepseek-chat)") && l.contains("503")),
        "{said:?}"
    );

    // The next prompt tries the configured provider first.
    let t = g.run_turn(&s.id, "fine now?");
    assert_eq!(t.text, "primary");

    // A turn that fell back stays there: the call after its tool's result goes to DeepSeek
    // without asking the configured provider again.
    let t = g.run_turn(&s.id, "a tool turn");
    assert_eq!(t.text, "tool turn done", "{}", t.complete);
    assert_eq!(posts(&primary, "tool turn").len(), 3, "one call's attempts");
    assert_eq!(posts(&deepseek, "tool turn").len(), 2);
    let t = g.run_turn(&s.id, "fine again?");
    assert_eq!(t.text, "primary");

    // A 401 falls back at once; both fallbacks tried in order when the first fails too.
    let t = g.run_turn(&s.id, "no key and deepseek down");
    assert_eq!(t.text, "from the last one", "{}", t.complete);
    assert_eq!(posts(&primary, "no key").len(), 1, "a 401 is not retried");
    let last_asked = posts(&last, "no key");
    assert_eq!(last_asked.len(), 1);
    assert_eq!(last_asked[0].body["model"], "last-model");

    // A request the provider refuses as such (400) is not sent elsewhere.
    let t = g.run_turn(&s.id, "bad request");
    assert_eq!(t.complete["payload"]["status"], "error");
    assert!(
        t.text.starts_with("Error: ") && t.text.contains("context too long"),
        "{}",
        t.text
    );
    assert!(posts(&deepseek, "bad request").is_empty());
    assert!(posts(&last, "bad request").is_empty());
}

/// A home for DeepSeek whose `.env` key is `dotenv_key` and whose auth.json holds a credential
/// pool of `entries` (as `hermes auth add` writes them).
fn pooled_home(tag: &str, dotenv_key: &str, entries: Value) -> TempHome {
    let home = home_with(
        tag,
        "model:\n  default: deepseek-chat\n  provider: deepseek\n",
        &format!("DEEPSEEK_API_KEY={dotenv_key}\n"),
    );
    let auth = json!({"version": 1, "credential_pool": {"deepseek": entries}});
    std::fs::write(home.path.join("auth.json"), auth.to_string()).unwrap();
    home
}

/// The keys the fake was sent for the turns' calls (those offering tools: a title's offers
/// none), in order.
fn keys_sent(mock: &MockAi) -> Vec<String> {
    posts(mock)
        .iter()
        .filter(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .map(|r| r.header("authorization").unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_credential_pool_rotates_past_rate_limited_and_refused_keys_and_keeps_the_one_that_works() {
    let mock = MockAi::start(|r| match r.header("authorization") {
        Some("Bearer sk-ds-spent") => {
            Reply::status(429, r#"{"error":{"message":"rate limit reached"}}"#)
        }
        Some("Bearer sk-ds-revoked") => {
            Reply::status(401, r#"{"error":{"message":"invalid key"}}"#)
        }
        Some("Bearer sk-ds-good") => Reply::text(&["from the good key"], (5, 1)),
        _ => Reply::status(400, r#"{"error":{"message":"unexpected key"}}"#),
    });
    let home = pooled_home(
        "providers-pool",
        "sk-ds-spent",
        json!([
            {"id": "revoked1", "source": "manual", "auth_type": "api_key",
             "access_token": "sk-ds-revoked"},
            {"id": "good2", "label": "team key", "source": "manual", "auth_type": "api_key",
             "access_token": "sk-ds-good"},
        ]),
    );
    let mut g = Gateway::builder()
        .tag("providers-pool")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &mock.base_url())
        .env("TUI_GATEWAY_RETRY_BASE_S", "0.05")
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(
        t.complete["payload"]["status"], "complete",
        "{}",
        t.complete
    );
    assert_eq!(t.text, "from the good key");
    // The `.env` key first (its 429 retried once: the second rotates, as in Hermes), then the
    // pool's keys in their order.
    assert_eq!(
        keys_sent(&mock),
        [
            "Bearer sk-ds-spent",
            "Bearer sk-ds-spent",
            "Bearer sk-ds-revoked",
            "Bearer sk-ds-good"
        ]
    );
    // Each switch is said, naming the keys by their label, never by their value.
    let said: Vec<String> = t
        .events
        .iter()
        .filter(|e| e["type"] == "status.update")
        .filter_map(|e| e["payload"]["text"].as_str().map(str::to_string))
        .collect();
    assert!(
        said.iter()
            .any(|l| l.contains("DEEPSEEK_API_KEY") && l.contains("429") && l.contains("revoked1")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|l| l.contains("revoked1") && l.contains("401") && l.contains("team key")),
        "{said:?}"
    );
    for e in &t.events {
        assert!(!e.to_string().contains("sk-ds-"), "a key in an event: {e}");
    }

    // The next prompt starts with the key that worked.
    let t = g.run_turn(&s.id, "again");
    assert_eq!(t.text, "from the good key");
    assert_eq!(keys_sent(&mock).len(), 5);
    assert_eq!(keys_sent(&mock)[4], "Bearer sk-ds-good");
}

#[test]
fn a_pool_whose_every_key_is_refused_ends_the_turn_with_the_last_refusal() {
    let mock = MockAi::start(|_| Reply::status(401, r#"{"error":{"message":"invalid key"}}"#));
    let home = pooled_home(
        "providers-pool-spent",
        "sk-ds-one",
        json!([{"id": "two", "source": "manual", "access_token": "sk-ds-two"}]),
    );
    let mut g = Gateway::builder()
        .tag("providers-pool-spent")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &mock.base_url())
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert!(
        t.text.contains("Error:") && t.text.contains("401"),
        "{}",
        t.complete
    );
    assert!(!t.text.contains("sk-ds-"), "{}", t.text);
    // Each key once, no loop back to the first.
    assert_eq!(keys_sent(&mock), ["Bearer sk-ds-one", "Bearer sk-ds-two"]);
}

#[test]
fn a_provider_whose_keys_are_only_in_its_pool_is_reached_with_them() {
    let mock = MockAi::start(|r| match r.header("authorization") {
        Some("Bearer sk-ds-pool-2") => Reply::text(&["pooled"], (5, 1)),
        _ => Reply::status(401, r#"{"error":{"message":"invalid key"}}"#),
    });
    let home = pooled_home(
        "providers-pool-only",
        "",
        json!([
            {"id": "first", "source": "manual", "access_token": "sk-ds-pool-1"},
            {"id": "second", "source": "manual", "access_token": "sk-ds-pool-2"},
        ]),
    );
    let mut g = Gateway::builder()
        .tag("providers-pool-only")
        .home(&home.path)
        .env("DEEPSEEK_BASE_URL", &mock.base_url())
        .start();
    let s = g.create_session(json!({}));
    let t = g.run_turn(&s.id, "hi");
    assert_eq!(t.text, "pooled", "{}", t.complete);
    assert_eq!(
        keys_sent(&mock),
        ["Bearer sk-ds-pool-1", "Bearer sk-ds-pool-2"]
    );
    assert_eq!(t.event("session.info")["payload"]["provider"], "deepseek");
}
