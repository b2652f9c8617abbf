//! Secrets of the gateway kept from the tools it runs, tested the way a hostile tool would try:
//! 35 secret-bearing variables through `$ env`, the `terminal.env_passthrough` knob, and the
//! gateway's own process (and every process between it and the tool) read through /proc —
//! environment, memory, command line — by a tool running as the same unprivileged user.
//!
//! The suite runs as root, who may read any process; so the gateway runs as `nobody` here
//! (its tools with it), which is what a user's gateway is to its tools.

use crate::common;

use common::procfs::marker;
use common::*;
use serde_json::{Value, json};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The uid the gateway runs as: `nobody` when we are root, else ourselves (already unprivileged).
fn unprivileged(b: GatewayBuilder) -> GatewayBuilder {
    if is_root() { b.run_as(65534) } else { b }
}

/// Run `command` as a terminal tool call in a new session; its output.
fn run_tool(g: &mut Gateway, command: &str) -> String {
    let s = g.create_session(json!({}));
    let start = submit(g, &s.id, &format!("$ {command}"));
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    let content = &c["payload"]["result"];
    let parsed: Value = match content {
        Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        v => v.clone(),
    };
    parsed["output"]
        .as_str()
        .unwrap_or_else(|| panic!("tool.complete without output: {c}"))
        .to_string()
}

/// 35 variables that hold secrets, each with a value that carries the marker `m`.
fn secret_vars(m: &str) -> Vec<(&'static str, String)> {
    let v = |s: &str| s.replace("M", m);
    vec![
        // caught by their names from the start
        ("OPENAI_API_KEY", v("sk-proj-M")),
        ("ANTHROPIC_API_KEY", v("sk-ant-M")),
        ("OPENROUTER_API_KEY", v("openrouter-M")),
        ("GITHUB_TOKEN", v("gho-M")),
        ("GH_TOKEN", v("gh-M")),
        ("AWS_ACCESS_KEY_ID", v("akid-M")),
        ("AWS_SECRET_ACCESS_KEY", v("aws-M")),
        ("AWS_SESSION_TOKEN", v("awss-M")),
        ("DB_PASSWORD", v("dbpw-M")),
        ("PGPASSWORD", v("pg-M")),
        ("NPM_TOKEN", v("npm-M")),
        ("SLACK_BOT_TOKEN", v("slack-M")),
        ("HF_TOKEN", v("hf-M")),
        ("GOOGLE_APPLICATION_CREDENTIALS", v("/keys/M.json")),
        ("DOCKER_AUTH_CONFIG", v("docker-M")),
        ("COOKIE_SECRET", v("cookie-M")),
        ("PRIVATE_KEY", v("pk-M")),
        ("TWILIO_AUTH_TOKEN", v("tw-M")),
        // missed by the name markers before: names as people write them, and values that tell
        (
            "DATABASE_URL",
            v("postgres://app:pw-M@db.internal:5432/app"),
        ),
        ("REDIS_URL", v("redis://:pw-M@cache:6379/0")),
        ("DB_PASS", v("dbpass-M")),
        ("MYSQL_PWD", v("mysql-M")),
        ("SENTRY_DSN", v("https://M@o1.ingest.sentry.io/1")),
        (
            "SLACK_WEBHOOK_URL",
            v("https://hooks.slack.com/services/T0/B0/M"),
        ),
        ("GH_PAT", v("ghp_M")),
        ("BW_SESSION", v("bw-M")),
        ("OP_SESSION_my_team", v("op-M")),
        ("CI_JOB_JWT", v("jwt-M")),
        ("PASSPHRASE", v("phrase-M")),
        ("HTTPS_PROXY", v("http://alice:pw-M@proxy.corp:3128")),
        ("PIP_INDEX_URL", v("https://alice:pw-M@pypi.corp/simple")),
        ("STRIPE_SK", v("sk_live_M")),
        ("CREDS", v("creds-M")),
        ("JWT_SIGNING", v("signing-M")),
        ("MY_APP_PASS", v("app-M")),
    ]
}

#[test]
fn no_secret_of_35_reaches_a_commands_environment() {
    let m = marker();
    let vars = secret_vars(&m);
    assert_eq!(vars.len(), 35);
    let mut b = unprivileged(Gateway::builder().args(&["serve", "--provider", "offline"]));
    for (k, v) in &vars {
        b = b.env(k, v);
    }
    // Harmless look-alikes stay.
    b = b
        .env("TUIGW_NOTE", &format!("plain-{m}"))
        .env("GIT_AUTHOR_NAME", &format!("author-{m}"))
        .env("DOCS_URL", &format!("https://example.com/{m}"));
    let mut g = b.start();
    let out = run_tool(&mut g, "env");
    for keep in ["TUIGW_NOTE", "GIT_AUTHOR_NAME", "DOCS_URL"] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{keep}="))),
            "{keep} must be passed on:\n{out}"
        );
    }
    assert!(out.lines().any(|l| l.starts_with("PATH=")), "{out}");
    let leaked: Vec<&str> = vars
        .iter()
        .filter(|(k, v)| out.contains(v.as_str()) || out.contains(&format!("\n{k}=")))
        .map(|(k, _)| *k)
        .collect();
    assert!(leaked.is_empty(), "leaked into `env`: {leaked:?}\n{out}");
    // A secret-looking value under an innocent name goes too.
    drop(g);
    let token = format!("ghp_{m}abcdefghijklmnopqrstuvwxyz");
    let mut g = unprivileged(Gateway::builder().args(&["serve", "--provider", "offline"]))
        .env("BUILD_NOTE", &format!("use {token} to push"))
        .start();
    let out = run_tool(&mut g, "env");
    assert!(!out.contains(&token), "{out}");
}

#[test]
fn the_gateway_and_its_helpers_are_unreadable_to_a_tool_of_the_same_user() {
    let m = marker();
    let key = format!("sk-proj-{m}abcdefghijklmnopqrstuvwxyz");
    let url_secret = format!("hunter2x{m}");
    let base_url = format!("http://alice:{url_secret}@127.0.0.1:9/v1");
    let mut g = unprivileged(Gateway::builder().args(&[
        "serve",
        "--provider",
        "offline",
        "--base-url",
        &base_url,
    ]))
    .env("OPENAI_API_KEY", &key)
    .start();
    let gw = g.pid();
    // Walk up from the tool's shell to the gateway: every process on the way is the gateway's
    // (supervisor, zygote) or the gateway itself. The needle is built at run time, so the
    // command text (in the shell's own command line) does not hold it.
    let half = url_secret.len() / 2;
    let (a, b) = url_secret.split_at(half);
    let script = format!(
        "n={a}; n=\"$n\"{b}; p=$$; hops=0; \
         while [ \"$p\" != {gw} ] && [ \"$p\" -gt 1 ] && [ $hops -lt 8 ]; do \
           p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2); hops=$((hops+1)); \
           echo \"ancestor $p\"; \
           cat /proc/$p/environ >/dev/null 2>&1 && echo \"environ-readable $p\"; \
           (: </proc/$p/mem) 2>/dev/null && echo \"mem-readable $p\"; \
           grep -qa \"$n\" /proc/$p/cmdline && echo \"cmdline-secret $p\"; \
           tr '\\0' ' ' </proc/$p/cmdline; echo; \
         done; id -u"
    );
    let out = run_tool(&mut g, &script);
    assert!(
        out.lines().any(|l| l == format!("ancestor {gw}")),
        "the walk must reach the gateway {gw}:\n{out}"
    );
    if is_root() {
        assert_eq!(out.lines().last(), Some("65534"), "{out}");
    }
    for bad in ["environ-readable", "mem-readable", "cmdline-secret"] {
        assert!(
            !out.lines().any(|l| l.starts_with(bad)),
            "{bad}: a tool can read the gateway's secrets:\n{out}"
        );
    }
    assert!(!out.contains(&key), "{out}");
    // The command line still says what runs, with the secret hidden.
    assert!(out.contains("--base-url http://"), "{out}");
}

#[test]
fn env_passthrough_lets_named_variables_through_but_never_the_gateway_key() {
    let m = marker();
    let home = TempHome::new("passthrough");
    std::fs::write(
        home.path.join("config.yaml"),
        "terminal:\n  env_passthrough: [GH_PAT, MY_APP_PASS, OPENAI_API_KEY]\n",
    )
    .unwrap();
    let mut g =
        unprivileged(
            Gateway::builder()
                .home(&home.path)
                .args(&["serve", "--provider", "offline"]),
        )
        .env("GH_PAT", &format!("ghp_{m}abcdefghijklmnopqrstuvwxyz0123"))
        .env("MY_APP_PASS", &format!("app-{m}"))
        .env("DB_PASS", &format!("db-{m}"))
        .env("OPENAI_API_KEY", &format!("sk-{m}"))
        .start();
    let out = run_tool(&mut g, "env");
    assert!(
        out.lines()
            .any(|l| l == format!("GH_PAT=ghp_{m}abcdefghijklmnopqrstuvwxyz0123")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l == format!("MY_APP_PASS=app-{m}")),
        "{out}"
    );
    assert!(
        !out.contains(&format!("db-{m}")),
        "not listed, not passed:\n{out}"
    );
    assert!(
        !out.contains(&format!("sk-{m}")),
        "the gateway's key:\n{out}"
    );
    let stderr = g.stderr_with("terminal.env_passthrough: OPENAI_API_KEY", T);
    assert!(
        stderr.contains("terminal.env_passthrough: OPENAI_API_KEY is the gateway's own key"),
        "{stderr}"
    );
}

#[test]
fn a_key_saved_from_the_model_picker_reaches_no_tool_and_no_log() {
    let m = marker();
    let key = format!("sk-or-{m}abcdefghijklmnop");
    let home = TempHome::new("saved-key");
    let log = home.path.join("calls.jsonl");
    let mut g =
        unprivileged(
            Gateway::builder()
                .home(&home.path)
                .args(&["serve", "--provider", "offline"]),
        )
        .env("TUI_GATEWAY_RPC_LOG", log.to_str().unwrap())
        .start();
    let r = g.call(
        "model.save_key",
        json!({"slug": "openrouter", "api_key": key}),
    );
    assert_eq!(r["provider"]["authenticated"], true, "{r}");
    let saved = std::fs::read_to_string(home.path.join(".env")).unwrap();
    assert_eq!(saved, format!("OPENROUTER_API_KEY={key}\n"));
    let out = run_tool(&mut g, "env");
    assert!(out.lines().any(|l| l.starts_with("PATH=")), "{out}");
    assert!(!out.contains(&key), "the saved key reached a tool:\n{out}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("(not logged)"), "{logged}");
    assert!(!logged.contains(&key), "the saved key is in the call log");
    assert!(!g.stderr_text().contains(&key));
}
