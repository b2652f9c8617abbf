//! Which provider runs: the files of a Hermes home read (config.yaml, `.env`, `auth.json`, each
//! bounded), `resolve.rs` asked, and what it decided built.

use std::time::Duration;

use yaml_rust2::Yaml;

use super::Provider;
use super::exchange::Timing;
use super::logins::{Files, Keeper};
use super::offline::OfflineProvider;
use super::providers::Login;
use super::remote::RemoteProvider;
use super::resolve::{Asked, Inputs, Resolved, resolve};
use super::unreachable::Unreachable;
use crate::config::Config;
use crate::hermes_env::HermesEnv;

/// What of config.yaml's `model:` section the rest of the gateway reads (the context window,
/// the picker's provider); resolution reads the whole file itself.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ModelSection {
    pub default: Option<String>,
    pub provider: Option<String>,
    /// `model.context_length`: the context window of the configured model, in tokens.
    pub context_length: Option<u64>,
}

#[cfg(test)]
pub fn read_model_section(text: &str) -> Result<ModelSection, String> {
    Ok(model_section(&crate::config_file::parse(text)?))
}

/// The `model:` section of a parsed config.yaml.
pub fn model_section(doc: &Yaml) -> ModelSection {
    let model = &doc["model"];
    let s = |y: &Yaml| {
        y.as_str()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    match model {
        Yaml::String(name) => ModelSection {
            default: Some(name.trim().to_string()).filter(|n| !n.is_empty()),
            ..Default::default()
        },
        Yaml::Hash(_) => ModelSection {
            default: s(&model["default"]).or_else(|| s(&model["name"])),
            provider: s(&model["provider"]).map(|p| p.to_ascii_lowercase()),
            context_length: match &model["context_length"] {
                Yaml::Integer(n) if *n > 0 => Some(*n as u64),
                Yaml::String(t) => t.trim().parse().ok().filter(|n| *n > 0),
                _ => None,
            },
        },
        _ => ModelSection::default(),
    }
}

/// The `model:` section of `$HERMES_HOME/config.yaml` (empty when there is no file).
pub fn load_model_section(cfg: &Config) -> Result<ModelSection, String> {
    crate::config_file::load(&cfg.home).map(|doc| model_section(&doc))
}

/// What the loop runs: the provider, and a note for the user (why a provider cannot be
/// reached, or that the offline model answers because none is configured).
pub struct Choice {
    pub provider: Box<dyn Provider>,
    pub note: Option<String>,
    /// The note says why the provider cannot be reached (worth a line on stderr).
    pub unreachable: bool,
}

/// The provider `cfg`'s flags, `$HERMES_HOME/config.yaml`, `.env`, the environment and
/// `auth.json` choose (`resolve.rs`), built.
pub fn choose(cfg: &Config) -> Choice {
    choose_asking(cfg, cfg.provider.as_deref())
}

/// Provider `provider` built for `model`, as the configuration would resolve it (a session's
/// `/model … --provider`, one rebuilt after its key went).
pub fn choose_for(cfg: &Config, provider: &str, model: &str) -> Choice {
    let mut cfg = cfg.clone();
    cfg.model = Some(model.to_string());
    choose_asking(&cfg, Some(provider))
}

/// As [`choose`], with `provider` asked for instead of `cfg`'s (`/model … --provider`).
pub fn choose_asking(cfg: &Config, provider: Option<&str>) -> Choice {
    let offline = |note: Option<String>| Choice {
        provider: Box::new(OfflineProvider::new(cfg.offline_word_delay)),
        note,
        unreachable: false,
    };
    if provider == Some("offline") {
        return offline(None);
    }
    let asked = Asked {
        provider,
        model: cfg.model.as_deref(),
        base_url: cfg.base_url.as_deref(),
    };
    let (resolved, files, auth) = match resolve_home(cfg, asked) {
        Ok(r) => r,
        // Without its files, which provider the home names is not known.
        Err(e) => return unreachable(provider.unwrap_or("unknown"), cfg.model.as_deref(), e),
    };
    match resolved {
        Resolved::Offline { asked: false } => offline(Some(NOTHING_CONFIGURED.to_string())),
        Resolved::Offline { asked: true } => offline(None),
        Resolved::Unreachable {
            provider,
            why,
            model,
        } => unreachable(&provider, model.as_deref(), why),
        Resolved::Remote(endpoint) => {
            let (provider, model) = (endpoint.provider.clone(), endpoint.model.clone());
            match remote(cfg, *endpoint, files, &auth) {
                Ok(p) => Choice {
                    provider: with_fallbacks(cfg, p),
                    note: None,
                    unreachable: false,
                },
                Err(e) => unreachable(&provider, Some(&model), e),
            }
        }
    }
}

/// The provider of `endpoint`, its login (if its key is one) renewed from `files`, or its keys
/// rotated through auth.json's credential pool when it has one (`pool.rs`).
fn remote(
    cfg: &Config,
    endpoint: super::endpoint::Endpoint,
    files: Files,
    auth: &serde_json::Value,
) -> Result<Box<dyn Provider>, String> {
    let login = endpoint.login.clone();
    let pool = super::pool::keys(auth, &endpoint);
    let mut timing = timing(cfg);
    if !pool.is_empty() {
        timing.rate_limit_retries = timing.retries.min(1);
    }
    let p = RemoteProvider::new(endpoint, timing)?;
    Ok(match login {
        Some(login) => {
            // Claude Code's login is in its own file, the others in auth.json.
            let doc = match login.kind {
                super::logins::Kind::ClaudeCode => files.read_of(login.kind).unwrap_or_default(),
                _ => auth.clone(),
            };
            Box::new(p.with_login(Keeper::new(login, files, &doc)))
        }
        None if !pool.is_empty() => Box::new(super::pool::WithPool::new(p, pool)),
        None => Box::new(p),
    })
}

/// `primary` with the fallbacks config.yaml names (`fallback.rs`), each resolved as the
/// configured provider is; one that cannot be reached, or that a login keys, is left out with a
/// line on stderr.
fn with_fallbacks(cfg: &Config, primary: Box<dyn Provider>) -> Box<dyn Provider> {
    let config = crate::config_file::load(&cfg.home).unwrap_or(Yaml::Null);
    let mut fallbacks = Vec::new();
    for entry in super::fallback::chain(&config) {
        let asked = Asked {
            provider: Some(&entry.provider),
            model: Some(&entry.model),
            base_url: entry.base_url.as_deref(),
        };
        let built = resolve_home(cfg, asked)
            .and_then(|(resolved, _, _)| reached(resolved))
            .and_then(|mut endpoint| {
                if let Some(key) = &entry.api_key {
                    endpoint.api_key = Some(key.clone());
                    endpoint.login = None;
                }
                if endpoint.login.is_some() {
                    return Err("a login's provider is not a fallback here".to_string());
                }
                RemoteProvider::new(endpoint, timing(cfg))
            });
        match built {
            Ok(p) => fallbacks.push((p, entry.model)),
            Err(why) => crate::diag!("[model] fallback {} left out: {why}", entry.provider),
        }
    }
    match fallbacks.is_empty() {
        true => primary,
        false => Box::new(super::fallback::WithFallbacks::new(primary, fallbacks)),
    }
}

/// The provider and model `auxiliary.<task>` of `config` names (a title call's), built as the
/// configured one is; why it cannot be had.
pub fn side_provider(
    cfg: &Config,
    config: &Yaml,
    task: &str,
) -> Result<(Box<dyn Provider>, String), String> {
    let side = super::auxiliary::side(cfg, config, task);
    let (resolved, files, auth) = resolve_home(cfg, side.asked)?;
    let mut endpoint = reached(resolved)?;
    if let Some(key) = side.api_key {
        // The key given replaces a login's.
        endpoint.api_key = Some(key.to_string());
        endpoint.login = None;
    }
    let model = side.model_for(&endpoint);
    Ok((remote(cfg, endpoint, files, &auth)?, model))
}

/// The provider name subagents' own endpoint (`delegation.base_url`) is known by.
pub const DELEGATION_PROVIDER: &str = "custom:delegation";

/// Subagents' own endpoint, as Hermes reads `delegation.base_url` of config.yaml: `url`, keyed
/// by `delegation.api_key` (read here: keys stay in `model/`), else by the key of `parent` (the
/// parent session's provider); its API `api_mode`, else what the URL implies, else chat
/// completions; asked for `model`. `Err` says why it cannot be had.
pub fn delegation_provider(
    cfg: &Config,
    url: &str,
    api_mode: Option<&str>,
    parent: &str,
    model: &str,
) -> Result<Box<dyn Provider>, String> {
    let url = url.trim_end_matches('/');
    let api_mode = api_mode
        .filter(|m| super::wire::Wire::from_api_mode(m).is_some())
        .or_else(|| super::providers::api_mode_for_url(url))
        .unwrap_or("chat_completions");
    let wire = super::wire::Wire::from_api_mode(api_mode)
        .ok_or_else(|| format!("its API ({api_mode}) is not one this gateway speaks"))?;
    let config = crate::config_file::load(&cfg.home)?;
    let (key, key_name) = match crate::config_file::string_at(&config, "delegation.api_key") {
        Some(k) => (Some(k), "delegation.api_key".to_string()),
        None => {
            let asked = Asked {
                provider: Some(parent),
                model: cfg.model.as_deref(),
                base_url: cfg.base_url.as_deref(),
            };
            let inherited = endpoint(cfg, asked).ok().and_then(|e| e.api_key);
            (inherited, format!("the key of provider {parent}"))
        }
    };
    let mut e = super::endpoint::Endpoint::new(DELEGATION_PROVIDER, url, key, wire);
    e.key_name = key_name;
    e.model = model.to_string();
    Ok(Box::new(RemoteProvider::new(e, timing(cfg))?))
}

/// What `cfg`'s home resolves to when `asked` is asked for, with the login files and auth.json
/// read for it.
fn resolve_home(
    cfg: &Config,
    asked: Asked<'_>,
) -> Result<(Resolved, Files, serde_json::Value), String> {
    let config = crate::config_file::load(&cfg.home)?;
    let env = HermesEnv::load(&cfg.home)?;
    let files = login_files(cfg, &env);
    // Not readable as a JSON object (or a link, a FIFO): a login then reads as missing.
    let auth = files.read().unwrap_or(serde_json::Value::Null);
    let claude = files
        .read_of(super::logins::Kind::ClaudeCode)
        .unwrap_or(serde_json::Value::Null);
    let lookup = |name: &str| env.get(name);
    let inputs = Inputs {
        asked,
        config: &config,
        env: &lookup,
        auth: &auth,
        claude: &claude,
        now: crate::util::unix_now(),
    };
    Ok((resolve(&inputs), files, auth))
}

/// The endpoint `cfg`'s home reaches when `asked` is asked for (a side call's: the vision
/// model's), or why there is none.
pub fn endpoint(cfg: &Config, asked: Asked<'_>) -> Result<super::endpoint::Endpoint, String> {
    reached(resolve_home(cfg, asked)?.0)
}

/// The endpoint resolution reached, or why there is none.
fn reached(resolved: Resolved) -> Result<super::endpoint::Endpoint, String> {
    match resolved {
        Resolved::Remote(e) => Ok(*e),
        Resolved::Offline { .. } => Err("no model provider is configured".into()),
        Resolved::Unreachable { provider, why, .. } => {
            Err(format!("provider {provider} cannot be reached: {why}"))
        }
    }
}

/// A provider the `/model` picker can offer.
pub struct Available {
    pub id: String,
    pub name: String,
    /// Its key or login is there (else the picker says where a key would go).
    pub ready: bool,
    pub auth_type: &'static str,
    /// The variable its key goes in.
    pub key_env: Option<&'static str>,
    /// The model config.yaml names for it.
    pub model: Option<String>,
}

/// The providers of Hermes' table that take a key or a login, ready or not, then config.yaml's
/// `providers:` entries; in the table's order.
pub fn available(cfg: &Config, config: &Yaml) -> Vec<Available> {
    let env = HermesEnv::load(&cfg.home).unwrap_or_default();
    let files = login_files(cfg, &env);
    let auth = files.read().unwrap_or(serde_json::Value::Null);
    // Anthropic is ready on Claude Code's login too.
    let claude_code = files
        .read_of(super::logins::Kind::ClaudeCode)
        .is_ok_and(|doc| {
            let login = super::logins::claude::state(&doc);
            super::logins::claude::usable(login, crate::util::unix_now())
        });
    let configured = config["model"]["provider"]
        .as_str()
        .map(super::providers::canonical);
    let model_default = config["model"]["default"].as_str().map(str::to_string);
    let mut out = Vec::new();
    for p in super::providers::PROVIDERS {
        let (ready, auth_type) = match p.login {
            Login::Key if p.id == "anthropic" && claude_code => (true, "oauth"),
            Login::Key => (p.key_vars.iter().any(|v| env.get(v).is_some()), "api_key"),
            Login::Nous | Login::Codex => (!auth["providers"][p.id].is_null(), "oauth"),
            Login::Elsewhere(_) => continue,
        };
        out.push(Available {
            id: p.id.to_string(),
            name: p.name.to_string(),
            ready,
            auth_type,
            key_env: p.key_vars.first().copied(),
            model: model_default
                .clone()
                .filter(|_| configured.as_deref() == Some(p.id)),
        });
    }
    if let Yaml::Hash(entries) = &config["providers"] {
        for (key, entry) in entries {
            let Some(key) = key.as_str() else { continue };
            let name = entry["name"].as_str().unwrap_or(key);
            out.push(Available {
                id: format!(
                    "custom:{}",
                    key.trim().to_ascii_lowercase().replace(' ', "-")
                ),
                name: name.to_string(),
                ready: true,
                auth_type: "api_key",
                key_env: None,
                model: entry["default_model"].as_str().map(str::to_string),
            });
        }
    }
    out
}

/// Forget `provider`'s login in this home's auth.json ([`super::logins::forget`]).
pub fn forget_login(cfg: &Config, provider: &str) -> Result<bool, String> {
    let env = HermesEnv::load(&cfg.home).unwrap_or_default();
    super::logins::forget(&login_files(cfg, &env), provider)
}

/// What the banner says when nothing names a provider.
const NOTHING_CONFIGURED: &str = "no provider is configured: the built-in offline model answers \
(run `hermes model`, or put a key in ~/.hermes/.env)";

/// Where Hermes' logins are kept for this home: its auth.json and lock, and the shared Nous
/// store.
fn login_files(cfg: &Config, env: &HermesEnv) -> Files {
    let user_home = crate::util::user_home();
    let shared = super::logins::store::shared_dir(
        &cfg.home,
        user_home.as_deref(),
        env.get("HERMES_SHARED_AUTH_DIR").as_deref(),
    );
    Files::of(&cfg.home, shared, user_home.as_deref())
}

fn unreachable(provider: &str, model: Option<&str>, why: String) -> Choice {
    let note = format!("provider {provider} cannot be reached: {why}");
    Choice {
        provider: Box::new(Unreachable::new(provider, model, &note)),
        note: Some(note),
        unreachable: true,
    }
}

fn timing(cfg: &Config) -> Timing {
    Timing {
        connect_timeout: cfg.connect_timeout.max(Duration::from_millis(1)),
        first_byte_timeout: cfg.first_byte_timeout.max(Duration::from_millis(1)),
        idle_timeout: cfg.idle_timeout.max(Duration::from_millis(1)),
        retries: cfg.model_retries,
        rate_limit_retries: cfg.model_retries,
        retry_base: cfg.retry_base,
        retry_cap: cfg.retry_cap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_sections_of_both_shapes() {
        let s = read_model_section("model:\n  default: llama3\n  provider: Custom\n  base_url: http://127.0.0.1:11434/v1\n").unwrap();
        assert_eq!(s.default.as_deref(), Some("llama3"));
        assert_eq!(s.provider.as_deref(), Some("custom"));
        let s = read_model_section("model: gpt-4o\nother: 1\n").unwrap();
        assert_eq!(s.default.as_deref(), Some("gpt-4o"));
        assert_eq!(
            read_model_section("display:\n  skin: x\n").unwrap(),
            ModelSection::default()
        );
        assert!(read_model_section("model: [unclosed").is_err());
    }
}
