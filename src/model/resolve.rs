//! Which model endpoint a Hermes home reaches, decided as Hermes decides it: the provider
//! asked for (flag, config.yaml's `model.provider`, `HERMES_INFERENCE_PROVIDER`) or Hermes'
//! `auto` order; its base URL and key; the API it speaks. Pure: config.yaml, the environment
//! (`.env` over the process's) and `auth.json` come in as values.
//!
//! Where this differs from Hermes (each in docs/PROVIDERS.md): a provider that cannot be reached
//! is said so, never replaced; `OPENAI_BASE_URL` with nothing else configured means
//! `openai-api` there; no credential pools, no network probes while resolving.

use serde_json::{Map, Value};
use yaml_rust2::Yaml;

use super::endpoint::{ByModel, Endpoint};
use super::logins::{self, Kind};
use super::providers::{self, Login, ProviderSpec, Speaks};
use super::wire::Wire;
use super::wire::messages::hosts::is_oauth_token;

/// What the user asked for outside config.yaml: flags and their environment variables.
#[derive(Debug, Default, Clone, Copy)]
pub struct Asked<'a> {
    /// `--provider` / `TUI_GATEWAY_PROVIDER`.
    pub provider: Option<&'a str>,
    /// `--model` / `OPENAI_MODEL`.
    pub model: Option<&'a str>,
    /// `--base-url` / `OPENAI_BASE_URL`: the `openai-api` endpoint.
    pub base_url: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// The offline model: `asked` for (`provider: offline`), or no provider is configured.
    Offline {
        asked: bool,
    },
    Remote(Box<Endpoint>),
    /// A provider was asked for (or found) that cannot be reached; `why` is for the user,
    /// `model` the one it would have been asked for (what the session shows).
    Unreachable {
        provider: String,
        why: String,
        model: Option<String>,
    },
}

/// What resolution reads.
pub struct Inputs<'a> {
    pub asked: Asked<'a>,
    /// config.yaml (`Yaml::BadValue` when there is none).
    pub config: &'a Yaml,
    /// A variable's value: `.env`'s, else the process's; `None` when unset or empty.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// auth.json (`Value::Null` when there is none).
    pub auth: &'a Value,
    /// Claude Code's `~/.claude/.credentials.json` (`Value::Null` when there is none).
    pub claude: &'a Value,
    /// Unix time now, which a login's expiry is judged against.
    pub now: f64,
}

/// Hermes' placeholders that are not keys (`has_usable_secret`).
const PLACEHOLDERS: &[&str] = &[
    "*",
    "**",
    "***",
    "changeme",
    "your_api_key",
    "your_api_key_here",
    "your-api-key",
    "placeholder",
    "example",
    "dummy",
    "null",
    "none",
];

/// What LM Studio is sent when no key is set (it wants one, any).
const LMSTUDIO_NO_KEY: &str = "dummy-lm-api-key";

fn usable(secret: &str) -> bool {
    let s = secret.trim();
    s.len() >= 4 && !PLACEHOLDERS.contains(&s.to_ascii_lowercase().as_str())
}

pub fn resolve(inp: &Inputs<'_>) -> Resolved {
    let r = Resolver { inp };
    match r.resolve() {
        Resolved::Unreachable { provider, why, .. } => Resolved::Unreachable {
            provider,
            why,
            model: r.model(None),
        },
        resolved => resolved,
    }
}

struct Resolver<'a, 'b> {
    inp: &'b Inputs<'a>,
}

/// A key and where it came from.
struct Key {
    value: String,
    from: String,
}

impl Resolver<'_, '_> {
    fn model_cfg(&self) -> &Yaml {
        &self.inp.config["model"]
    }

    /// A string of the `model:` section (`model: NAME` is its `default`).
    fn model_str(&self, key: &str) -> Option<String> {
        let m = self.model_cfg();
        let v = match (m, key) {
            (Yaml::String(s), "default") => Some(s.as_str()),
            (Yaml::Hash(_), _) => m[key].as_str(),
            _ => None,
        };
        v.map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }

    fn env(&self, name: &str) -> Option<String> {
        (self.inp.env)(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// The first of `vars` holding a usable key.
    fn key_from(&self, vars: &[&str]) -> Option<Key> {
        vars.iter().find_map(|var| {
            self.env(var).filter(|v| usable(v)).map(|value| Key {
                value,
                from: var.to_string(),
            })
        })
    }

    /// The model to ask for: the flag's, else `entry`'s, else config.yaml's.
    fn model(&self, entry_default: Option<String>) -> Option<String> {
        self.inp
            .asked
            .model
            .map(str::to_string)
            .or(entry_default)
            .or_else(|| self.model_str("default"))
            .or_else(|| self.model_str("model"))
            .or_else(|| self.model_str("name"))
    }

    /// The provider asked for: the flag, else config.yaml, else `HERMES_INFERENCE_PROVIDER`.
    fn requested(&self) -> String {
        self.inp
            .asked
            .provider
            .map(str::to_string)
            .or_else(|| self.model_str("provider"))
            .or_else(|| self.env("HERMES_INFERENCE_PROVIDER"))
            .map(|p| p.trim().to_ascii_lowercase())
            .unwrap_or_else(|| "auto".into())
    }

    fn resolve(&self) -> Resolved {
        let requested = self.requested();
        if requested == "offline" {
            return Resolved::Offline { asked: true };
        }
        if requested != "auto" {
            return self.by_name(&requested);
        }
        self.auto()
    }

    /// Hermes' `auto`: a local `model.base_url`, then `OPENAI_API_KEY`/`OPENROUTER_API_KEY`
    /// (OpenRouter), then each provider's own key variables in table order, then the login
    /// `auth.json` says is active.
    fn auto(&self) -> Resolved {
        if let Some(url) = self.inp.asked.base_url {
            return self.table_provider(providers_spec("openai-api"), Some(url));
        }
        if let Some(url) = self.model_str("base_url").filter(|u| {
            !["openrouter.ai", "anthropic.com", "openai.com"]
                .iter()
                .any(|d| providers::host_within(u, d))
        }) {
            return self.custom_at(&url, "custom");
        }
        if self
            .key_from(&["OPENAI_API_KEY", "OPENROUTER_API_KEY"])
            .is_some()
        {
            return self.table_provider(providers_spec("openrouter"), None);
        }
        if let Some(p) = providers::PROVIDERS
            .iter()
            .find(|p| p.auto && p.login == Login::Key && self.key_from(p.key_vars).is_some())
        {
            return self.table_provider(p, None);
        }
        if let Some(active) = self.inp.auth["active_provider"].as_str()
            && let Some(p) = providers::spec(active)
            && matches!(p.login, Login::Nous | Login::Codex)
            && self.login_key(p).is_ok()
        {
            return self.table_provider(p, None);
        }
        Resolved::Offline { asked: false }
    }

    /// A provider asked for by name: a `providers:`/`custom_providers:` entry, `custom`, or a
    /// provider of the table (aliases followed).
    fn by_name(&self, requested: &str) -> Resolved {
        let id = providers::canonical(requested);
        let builtin = providers::spec(&id).filter(|_| id == requested);
        if builtin.is_none()
            && let Some(entry) = self.named_entry(requested)
        {
            return self.entry_endpoint(requested, &entry);
        }
        if id == "custom" {
            let url = self
                .inp
                .asked
                .base_url
                .map(str::to_string)
                .or_else(|| self.model_str("base_url"))
                .or_else(|| self.env("CUSTOM_BASE_URL"));
            return match url {
                Some(url) => self.custom_at(&url, "custom"),
                None => unreachable(
                    "custom",
                    "provider custom needs an endpoint: set model.base_url in config.yaml \
                     (or CUSTOM_BASE_URL)",
                ),
            };
        }
        match providers::spec(&id) {
            Some(p) => {
                let url = self.inp.asked.base_url.filter(|_| id == "openai-api");
                self.table_provider(p, url)
            }
            None => unreachable(
                requested,
                &format!(
                    "Unknown provider '{requested}'. Known providers: {}, custom, custom:NAME \
                     for a providers: entry of config.yaml, offline",
                    providers::PROVIDERS
                        .iter()
                        .map(|p| p.id)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        }
    }

    /// A provider of the table; `url` (the `openai-api` endpoint of `--base-url`) beats the
    /// others.
    fn table_provider(&self, p: &ProviderSpec, url: Option<&str>) -> Resolved {
        let mut login = login_kind(p);
        let key = match p.login {
            Login::Elsewhere(why) => {
                return unreachable(p.id, &format!("{} cannot be used here: {why}", p.name));
            }
            Login::Key if p.id == "anthropic" => {
                let (key, claude) = self.anthropic_key(p);
                login = claude.then_some(Kind::ClaudeCode);
                key
            }
            Login::Nous | Login::Codex => match self.login_key(p) {
                Ok(k) => Some(k),
                Err(why) => return unreachable(p.id, &why),
            },
            Login::Key => self.key_from(p.key_vars).or_else(|| {
                super::pool::stored_key(self.inp.auth, p.id).map(|value| Key {
                    value,
                    from: super::pool::source_name(p.id),
                })
            }),
        };
        let configured_here = self
            .model_str("provider")
            .is_some_and(|c| providers::canonical(&c) == p.id);
        let mut base = url
            .map(str::to_string)
            .or_else(|| {
                // OpenRouter never takes model.base_url (Hermes' rule: it is another endpoint's).
                configured_here
                    .then(|| self.model_str("base_url"))
                    .flatten()
                    .filter(|_| p.id != "openrouter")
            })
            .or_else(|| p.base_url_var.and_then(|v| self.env(v)))
            .or_else(|| login_base_url(self.inp.auth, p))
            .unwrap_or_else(|| p.base_url.to_string());
        let key = match (key, p.id) {
            (Some(k), _) => Some(k),
            (None, "lmstudio") => Some(Key {
                value: LMSTUDIO_NO_KEY.into(),
                from: "LM_API_KEY".into(),
            }),
            (None, _) => {
                return unreachable(
                    p.id,
                    &format!(
                        "No usable credentials found for provider '{}'. Set {} in \
                         ~/.hermes/.env (or the environment)",
                        p.id,
                        p.key_vars.join(" or ")
                    ),
                );
            }
        };
        if p.id.starts_with("kimi-coding")
            && key
                .as_ref()
                .is_some_and(|k| k.value.starts_with("sk-kimi-"))
            && p.base_url_var.and_then(|v| self.env(v)).is_none()
            && !configured_here
        {
            // Kimi Code's keys work only on its own (Anthropic-speaking) endpoint.
            base = "https://api.kimi.com/coding".into();
        }
        if base.is_empty() {
            return unreachable(
                p.id,
                &format!(
                    "{} needs its endpoint: set {} or model.base_url",
                    p.name,
                    p.base_url_var.unwrap_or("model.base_url")
                ),
            );
        }
        if p.id == "lmstudio" {
            base = lmstudio_base(&base);
        }
        let model = self.model(None);
        let api_mode = match p.speaks {
            Speaks::Always(m) => m.to_string(),
            Speaks::OpenCode { zen } => {
                providers::api_mode_for_opencode(zen, model.as_deref().unwrap_or("")).into()
            }
            Speaks::ByUrl if p.id == "copilot" => {
                providers::api_mode_for_copilot(model.as_deref().unwrap_or("")).into()
            }
            Speaks::ByUrl => self
                .model_str("api_mode")
                .filter(|_| self.model_str("provider").is_none() || configured_here)
                .or_else(|| providers::api_mode_for_url(&base).map(str::to_string))
                .unwrap_or_else(|| "chat_completions".into()),
        };
        let wire_by_model = match p.speaks {
            Speaks::OpenCode { zen } => Some(ByModel::OpenCode { zen }),
            Speaks::ByUrl if p.id == "copilot" => Some(ByModel::Copilot),
            _ => None,
        };
        // OpenCode's base stays Chat Completions' (`…/v1`): the Messages wire takes a base that
        // ends `/v1` too, and a session's `/model` may move between them.
        if matches!(p.speaks, Speaks::OpenCode { .. }) {
            base = opencode_base(&base, "chat_completions");
        }
        let headers = match p.id {
            "openrouter" => openrouter_headers(),
            _ => Vec::new(),
        };
        self.endpoint(Draft {
            model,
            headers,
            login: login.map(|kind| logins::Login::of(kind, self.inp.env)),
            wire_by_model,
            ..Draft::new(p.id, &base, key, api_mode)
        })
    }

    /// A user's own endpoint at `url` (Hermes' `custom`): its key from config.yaml's model
    /// section, else the variable its host suggests.
    fn custom_at(&self, url: &str, label: &str) -> Resolved {
        let key = self
            .model_str("api_key")
            .filter(|k| usable(k))
            .map(|value| Key {
                value,
                from: "model.api_key in config.yaml".into(),
            })
            .or_else(|| {
                ["key_env", "api_key_env"].iter().find_map(|field| {
                    self.model_str(field)
                        .and_then(|var| self.key_from(&[var.as_str()]))
                })
            })
            .or_else(|| self.host_key(url));
        let api_mode = self
            .model_str("api_mode")
            .filter(|m| m != "codex_responses" || providers::api_mode_for_url(url) == Some(m))
            .or_else(|| providers::api_mode_for_url(url).map(str::to_string))
            .unwrap_or_else(|| "chat_completions".into());
        self.endpoint(Draft {
            model: self.model(None),
            ..Draft::new(label, url, key, api_mode)
        })
    }

    /// The key Hermes sends to an endpoint it knows only by URL: OpenAI's and OpenRouter's by
    /// their hosts, else `<VENDOR>_API_KEY` from the host's name (`api.deepseek.com` →
    /// `DEEPSEEK_API_KEY`).
    fn host_key(&self, url: &str) -> Option<Key> {
        if providers::host_within(url, "openai.com")
            || providers::host_within(url, "openai.azure.com")
        {
            return self.key_from(&["OPENAI_API_KEY"]);
        }
        if providers::host_within(url, "openrouter.ai") {
            return self.key_from(&["OPENROUTER_API_KEY", "OPENAI_API_KEY"]);
        }
        if providers::host_within(url, "ollama.com") {
            return self.key_from(&["OLLAMA_API_KEY"]);
        }
        let var = vendor_key_var(url)?;
        self.key_from(&[var.as_str()])
    }

    /// The `providers:` (a map) or `custom_providers:` (a list) entry `requested` names.
    fn named_entry(&self, requested: &str) -> Option<Entry> {
        let want = normalise(requested);
        let want = want.strip_prefix("custom:").unwrap_or(&want).to_string();
        if want.is_empty() || want == "auto" || want == "custom" {
            return None;
        }
        if let Yaml::Hash(map) = &self.inp.config["providers"] {
            for (k, v) in map {
                let (Some(k), Yaml::Hash(_)) = (k.as_str(), v) else {
                    continue;
                };
                let name = v["name"].as_str().map(normalise);
                if normalise(k) == want || name.as_deref() == Some(want.as_str()) {
                    return Some(Entry::of(k, v, true));
                }
            }
        }
        if let Yaml::Array(list) = &self.inp.config["custom_providers"] {
            for v in list {
                let Some(name) = v["name"].as_str() else {
                    continue;
                };
                if normalise(name) == want {
                    return Some(Entry::of(name, v, false));
                }
            }
        }
        None
    }

    fn entry_endpoint(&self, requested: &str, e: &Entry) -> Resolved {
        let Some(url) = e.url.clone() else {
            return unreachable(
                requested,
                &format!(
                    "the providers: entry {:?} in config.yaml has no base_url",
                    e.name
                ),
            );
        };
        let from_var = e.key_env.as_deref().and_then(|v| self.key_from(&[v]));
        let inline = e.api_key.clone().filter(|k| usable(k)).map(|value| Key {
            value,
            from: format!("api_key of providers entry {:?}", e.name),
        });
        // A `providers:` entry's key_env beats its api_key; a legacy entry's is the other way.
        let key = match e.modern {
            true => from_var.or(inline),
            false => inline.or(from_var),
        }
        .or_else(|| self.host_key(&url));
        let api_mode = e
            .api_mode
            .clone()
            .or_else(|| providers::api_mode_for_url(&url).map(str::to_string))
            .unwrap_or_else(|| "chat_completions".into());
        self.endpoint(Draft {
            model: self.model(e.default_model.clone()),
            headers: e.headers.clone(),
            extra_body: e.extra_body.clone(),
            max_tokens: e.max_tokens,
            ..Draft::new(
                &format!("custom:{}", normalise(&e.name)),
                &url,
                key,
                api_mode,
            )
        })
    }

    /// Anthropic's key in Hermes' order (`resolve_anthropic_token`): an OAuth token from
    /// `ANTHROPIC_TOKEN` or `CLAUDE_CODE_OAUTH_TOKEN` — unless Claude Code's login can renew
    /// itself, which is then preferred —, Claude Code's login when it is good or renewable, a
    /// pooled key, `ANTHROPIC_API_KEY`. True when the key is Claude Code's login.
    fn anthropic_key(&self, p: &ProviderSpec) -> (Option<Key>, bool) {
        let claude = logins::claude::state(self.inp.claude);
        let claude_key = || {
            logins::claude::stored_key(claude).ok().map(|value| Key {
                value,
                from: "Claude Code's login (~/.claude/.credentials.json)".into(),
            })
        };
        let renewable = logins::claude::refresh_token(claude).is_some();
        if let Some(env) = self.key_from(&["ANTHROPIC_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"]) {
            return match claude_key() {
                Some(k) if renewable && is_oauth_token(&env.value) => (Some(k), true),
                _ => (Some(env), false),
            };
        }
        if logins::claude::usable(claude, self.inp.now) {
            return (claude_key(), true);
        }
        let key = self.key_from(&["ANTHROPIC_API_KEY"]).or_else(|| {
            super::pool::stored_key(self.inp.auth, p.id).map(|value| Key {
                value,
                from: super::pool::source_name(p.id),
            })
        });
        (key, false)
    }

    /// The key a login in auth.json holds for `p` (Nous' agent key, Codex's access token),
    /// whatever its age: the call renews it when it is about to expire.
    fn login_key(&self, p: &ProviderSpec) -> Result<Key, String> {
        let kind = login_kind(p).ok_or("not a login")?;
        let state = logins::state::login_state(self.inp.auth, kind);
        logins::state::stored_key(kind, state).map(|value| Key {
            value,
            from: format!("the {} login in auth.json", p.name),
        })
    }

    /// The endpoint a draft makes, with config.yaml's request knobs; unreachable when its
    /// API is not one spoken here or no model is named.
    fn endpoint(&self, d: Draft) -> Resolved {
        let Some(wire) = Wire::from_api_mode(&d.api_mode) else {
            return unreachable(
                &d.provider,
                &format!("its API ({}) is not one this gateway speaks", d.api_mode),
            );
        };
        let Some(model) = d.model else {
            return unreachable(
                &d.provider,
                "no model is chosen: set model.default in config.yaml (`hermes model` does), \
                 or pass --model",
            );
        };
        let (key, key_name) = match d.key {
            Some(k) => (Some(k.value), k.from),
            None => (None, "the endpoint's key".to_string()),
        };
        let base = d.base_url.trim().trim_end_matches('/');
        let mut e = Endpoint::new(&d.provider, base, key, wire);
        e.key_name = key_name;
        e.model = model;
        e.headers = d.headers;
        e.extra_body = d.extra_body;
        e.wire_by_model = d.wire_by_model;
        e.login = d.login;
        if d.provider == "openrouter"
            && let Some(routing) = openrouter_routing(&self.inp.config["provider_routing"])
        {
            e.extra_body.entry("provider").or_insert(routing);
        }
        e.max_tokens = d
            .max_tokens
            .or_else(|| match &self.model_cfg()["max_tokens"] {
                Yaml::Integer(n) if *n > 0 => Some(*n as u64),
                _ => None,
            });
        e.reasoning_effort = match &self.inp.config["agent"]["reasoning_effort"] {
            Yaml::Boolean(false) => Some("none".into()),
            Yaml::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                "" => None,
                // YAML 1.1 (Hermes' reader) takes a bare `off` or `no` for false.
                "off" | "no" | "false" => Some("none".into()),
                level => Some(level.to_string()),
            },
            _ => None,
        };
        e.fast = crate::model::fast::configured(self.inp.config);
        Resolved::Remote(Box::new(e))
    }
}

/// An endpoint before its wire and knobs are settled.
struct Draft {
    provider: String,
    base_url: String,
    key: Option<Key>,
    api_mode: String,
    model: Option<String>,
    headers: Vec<(String, String)>,
    extra_body: Map<String, Value>,
    max_tokens: Option<u64>,
    login: Option<logins::Login>,
    wire_by_model: Option<ByModel>,
}

impl Draft {
    fn new(provider: &str, base_url: &str, key: Option<Key>, api_mode: String) -> Draft {
        Draft {
            provider: provider.to_string(),
            base_url: base_url.to_string(),
            key,
            api_mode,
            model: None,
            headers: Vec::new(),
            extra_body: Map::new(),
            max_tokens: None,
            login: None,
            wire_by_model: None,
        }
    }
}

/// The Hermes login a provider's key comes from.
fn login_kind(p: &ProviderSpec) -> Option<Kind> {
    match p.login {
        Login::Nous => Some(Kind::Nous),
        Login::Codex => Some(Kind::Codex),
        _ => None,
    }
}

fn unreachable(provider: &str, why: &str) -> Resolved {
    Resolved::Unreachable {
        provider: provider.to_string(),
        why: why.to_string(),
        model: None,
    }
}

fn providers_spec(id: &str) -> &'static ProviderSpec {
    providers::spec(id).expect("the table has it")
}

/// A name as Hermes compares provider names: trimmed, lower-cased, spaces as dashes.
fn normalise(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace(' ', "-")
}

/// A `providers:` or `custom_providers:` entry of config.yaml.
struct Entry {
    name: String,
    /// A `providers:` entry (else a legacy `custom_providers:` one).
    modern: bool,
    url: Option<String>,
    key_env: Option<String>,
    api_key: Option<String>,
    api_mode: Option<String>,
    default_model: Option<String>,
    headers: Vec<(String, String)>,
    extra_body: Map<String, Value>,
    max_tokens: Option<u64>,
}

impl Entry {
    fn of(key: &str, v: &Yaml, modern: bool) -> Entry {
        let s = |k: &str| {
            v[k].as_str()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let first = |keys: &[&str]| keys.iter().find_map(|k| s(k));
        let url_keys: &[&str] = match modern {
            true => &["api", "url", "base_url"],
            false => &["base_url", "url", "api"],
        };
        let headers = ["extra_headers", "headers"]
            .iter()
            .find_map(|k| v[*k].as_hash())
            .map(|h| {
                h.iter()
                    .filter_map(|(k, v)| Some((k.as_str()?.to_string(), scalar_text(v)?)))
                    .filter(|(k, v)| header_safe(k) && header_safe(v))
                    .collect()
            })
            .unwrap_or_default();
        let extra_body = match crate::config_file::to_json(&v["extra_body"]) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Entry {
            name: s("name").unwrap_or_else(|| key.to_string()),
            modern,
            url: first(url_keys),
            key_env: first(&["key_env", "api_key_env"]),
            api_key: s("api_key"),
            api_mode: first(&["api_mode", "transport"]).map(|m| m.to_ascii_lowercase()),
            default_model: match modern {
                true => s("default_model"),
                false => first(&["model", "default_model"]),
            },
            headers,
            extra_body,
            max_tokens: ["max_output_tokens", "max_tokens"]
                .iter()
                .find_map(|k| v[*k].as_i64().filter(|n| *n > 0).map(|n| n as u64)),
        }
    }
}

/// A YAML scalar as text (a header's value may be written as a number).
fn scalar_text(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Integer(n) => Some(n.to_string()),
        Yaml::Real(r) => Some(r.clone()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Whether a header name or value can go on the wire as it is (no line breaks to smuggle a
/// header in, nothing but visible ASCII, spaces and tabs).
fn header_safe(s: &str) -> bool {
    !s.is_empty() && s.len() <= 8192 && s.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// `auth.json`'s stored base URL of a login (Nous keeps its inference URL there).
fn login_base_url(auth: &Value, p: &ProviderSpec) -> Option<String> {
    (p.login == Login::Nous)
        .then(|| auth["providers"][p.id]["inference_base_url"].as_str())
        .flatten()
        .filter(|u| {
            u.starts_with("https://") && providers::host_of(u) == "inference-api.nousresearch.com"
        })
        .map(str::to_string)
}

/// `<VENDOR>_API_KEY` for a host (`api.deepseek.com` → `DEEPSEEK_API_KEY`); none for an
/// address, localhost, a one-word host, or OpenAI/OpenRouter/Ollama (keyed by their own).
fn vendor_key_var(url: &str) -> Option<String> {
    let host = providers::host_of(url);
    let labels: Vec<&str> = host.split('.').filter(|l| !l.is_empty()).collect();
    let last = labels.last()?;
    if host.contains(':') || host == "localhost" || last.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut labels = labels.as_slice();
    while let Some((first, rest)) = labels.split_first()
        && (*first == "api" || *first == "www")
    {
        labels = rest;
    }
    if labels.len() < 2 {
        return None;
    }
    let vendor: String = labels[labels.len() - 2]
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    let known = ["OPENAI", "OPENROUTER", "OLLAMA"];
    (vendor.starts_with(|c: char| c.is_ascii_alphabetic()) && !known.contains(&vendor.as_str()))
        .then(|| format!("{vendor}_API_KEY"))
}

/// LM Studio's server root with `/v1`, whichever of `/v1`, `/api`, `/api/v1` was written.
fn lmstudio_base(url: &str) -> String {
    let root = url.trim().trim_end_matches('/');
    let root = ["/api/v1", "/api", "/v1"]
        .iter()
        .find_map(|s| root.strip_suffix(s))
        .unwrap_or(root);
    match root.is_empty() {
        true => "http://127.0.0.1:1234/v1".into(),
        false => format!("{root}/v1"),
    }
}

/// OpenCode's base URL for the API chosen: Messages below the root, the others below `/v1`.
fn opencode_base(url: &str, api_mode: &str) -> String {
    let url = url.trim_end_matches('/');
    if api_mode == "anthropic_messages" {
        return url.strip_suffix("/v1").unwrap_or(url).to_string();
    }
    match !url.ends_with("/v1") && providers::host_within(url, "opencode.ai") {
        true => format!("{url}/v1"),
        false => url.to_string(),
    }
}

/// The attribution OpenRouter lists an app under.
fn openrouter_headers() -> Vec<(String, String)> {
    [
        ("HTTP-Referer", "https://hermes-agent.nousresearch.com"),
        ("X-OpenRouter-Title", "Hermes Agent"),
        ("X-OpenRouter-Categories", "productivity,cli-agent"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// config.yaml's `provider_routing` as OpenRouter's `provider` object.
fn openrouter_routing(routing: &Yaml) -> Option<Value> {
    let Yaml::Hash(map) = routing else {
        return None;
    };
    let mut out = Map::new();
    for (k, v) in map {
        let Some(k) = k.as_str() else { continue };
        let value = crate::config_file::to_json(v);
        let keep = match k {
            "only" | "ignore" | "order" => value.is_array(),
            "sort" => matches!(value.as_str(), Some("price" | "latency" | "throughput")),
            "require_parameters" => value.is_boolean(),
            "data_collection" => matches!(value.as_str(), Some("allow" | "deny")),
            _ => false,
        };
        if keep {
            out.insert(k.to_string(), value);
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Resolve a home: its config.yaml, its variables, its auth.json.
    fn home(yaml: &str, vars: &[(&str, &str)], auth: Value) -> Resolved {
        home_asking(Asked::default(), yaml, vars, auth)
    }

    fn home_asking(asked: Asked<'_>, yaml: &str, vars: &[(&str, &str)], auth: Value) -> Resolved {
        resolve_home(asked, yaml, vars, auth, Value::Null)
    }

    /// Unix time in these tests.
    const NOW: f64 = 1_800_000_000.0;

    fn resolve_home(
        asked: Asked<'_>,
        yaml: &str,
        vars: &[(&str, &str)],
        auth: Value,
        claude: Value,
    ) -> Resolved {
        let config = match yaml {
            "" => Yaml::BadValue,
            y => crate::config_file::parse(y).unwrap(),
        };
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| vars.get(name).cloned();
        resolve(&Inputs {
            asked,
            config: &config,
            env: &env,
            auth: &auth,
            claude: &claude,
            now: NOW,
        })
    }

    fn remote(r: Resolved) -> Endpoint {
        match r {
            Resolved::Remote(e) => *e,
            other => panic!("not an endpoint: {other:?}"),
        }
    }

    fn refused(r: Resolved) -> (String, String) {
        match r {
            Resolved::Unreachable { provider, why, .. } => (provider, why),
            other => panic!("reachable: {other:?}"),
        }
    }

    const MODEL: &str = "model:\n  default: some-model\n";

    /// Claude Code's credentials file holding a login that expires `secs` from [`NOW`].
    fn claude_login(secs: f64, refresh: Option<&str>) -> Value {
        let mut login = serde_json::json!({"accessToken": "sk-ant-oat01-CC",
            "expiresAt": ((NOW + secs) * 1000.0) as i64});
        if let Some(rt) = refresh {
            login["refreshToken"] = rt.into();
        }
        serde_json::json!({"claudeAiOauth": login})
    }

    #[test]
    fn anthropic_takes_claude_codes_login_in_hermes_order() {
        const ANTHROPIC: &str = "model:\n  provider: anthropic\n  default: claude-sonnet-4-6\n";
        let with = |vars: &[(&str, &str)], claude: Value| {
            let e = remote(resolve_home(
                Asked::default(),
                ANTHROPIC,
                vars,
                Value::Null,
                claude,
            ));
            (
                e.api_key.unwrap_or_default(),
                e.login.map(|l| l.kind),
                e.key_name,
            )
        };
        let renewable = || claude_login(-10.0, Some("rt"));
        // Alone, an expired but renewable login is the key, renewed by the call.
        let (key, login, from) = with(&[], renewable());
        assert_eq!(
            (key.as_str(), login),
            ("sk-ant-oat01-CC", Some(Kind::ClaudeCode))
        );
        assert!(from.contains("Claude Code"), "{from}");
        // A static OAuth token in the environment gives way to a login that can renew itself…
        let env_oauth = [("ANTHROPIC_TOKEN", "sk-ant-oat01-ENV")];
        assert_eq!(with(&env_oauth, renewable()).1, Some(Kind::ClaudeCode));
        // …but not to one that cannot, and an API key in ANTHROPIC_TOKEN is sent as it is.
        let (key, login, _) = with(&env_oauth, claude_login(3600.0, None));
        assert_eq!((key.as_str(), login), ("sk-ant-oat01-ENV", None));
        let (key, login, _) = with(&[("ANTHROPIC_TOKEN", "sk-ant-api03-K")], renewable());
        assert_eq!((key.as_str(), login), ("sk-ant-api03-K", None));
        // The login beats ANTHROPIC_API_KEY while it is usable; an expired one that cannot be
        // renewed leaves the API key to be sent.
        let api = [("ANTHROPIC_API_KEY", "sk-ant-api03-A")];
        assert_eq!(
            with(&api, claude_login(3600.0, None)).1,
            Some(Kind::ClaudeCode)
        );
        let (key, login, _) = with(&api, claude_login(-10.0, None));
        assert_eq!((key.as_str(), login), ("sk-ant-api03-A", None));
        // No login, no key: unreachable, saying which variables would do.
        let (_, why) = refused(resolve_home(
            Asked::default(),
            ANTHROPIC,
            &[],
            Value::Null,
            claude_login(-10.0, None),
        ));
        assert!(why.contains("ANTHROPIC_API_KEY"), "{why}");
    }

    #[test]
    fn auto_takes_an_openrouter_key_then_an_openai_key_to_openrouter() {
        let e = remote(home(
            MODEL,
            &[("OPENROUTER_API_KEY", "sk-or-1")],
            Value::Null,
        ));
        assert_eq!(
            (
                e.provider.as_str(),
                e.base_url.as_str(),
                e.api_key.as_deref()
            ),
            (
                "openrouter",
                "https://openrouter.ai/api/v1",
                Some("sk-or-1")
            )
        );
        assert_eq!(
            (e.wire, e.model.as_str()),
            (Wire::ChatCompletions, "some-model")
        );
        assert!(
            e.headers
                .iter()
                .any(|(k, v)| k == "X-OpenRouter-Title" && v == "Hermes Agent")
        );
        let e = remote(home(MODEL, &[("OPENAI_API_KEY", "sk-oa-1")], Value::Null));
        assert_eq!(
            (e.provider.as_str(), e.key_name.as_str()),
            ("openrouter", "OPENAI_API_KEY")
        );
        let url = [
            ("OPENROUTER_API_KEY", "sk-or-1"),
            ("OPENROUTER_BASE_URL", "http://127.0.0.1:9/v1/"),
        ];
        assert_eq!(
            remote(home(MODEL, &url, Value::Null)).base_url,
            "http://127.0.0.1:9/v1"
        );
    }

    #[test]
    fn auto_then_tries_each_providers_own_key_in_hermes_order() {
        let e = remote(home(
            MODEL,
            &[("DEEPSEEK_API_KEY", "sk-ds-1"), ("NVIDIA_API_KEY", "nv-1")],
            Value::Null,
        ));
        assert_eq!(
            (e.provider.as_str(), e.base_url.as_str()),
            ("deepseek", "https://api.deepseek.com/v1")
        );
        // GitHub tokens are for tools, not a reason to pick Copilot.
        assert_eq!(
            home(MODEL, &[("GITHUB_TOKEN", "ghp_1234")], Value::Null),
            Resolved::Offline { asked: false }
        );
        // A placeholder is no key.
        assert_eq!(
            home(MODEL, &[("OPENROUTER_API_KEY", "changeme")], Value::Null),
            Resolved::Offline { asked: false }
        );
        assert_eq!(
            home(
                "model:\n  provider: offline\n",
                &[("OPENROUTER_API_KEY", "sk-or-1")],
                Value::Null
            ),
            Resolved::Offline { asked: true }
        );
    }

    #[test]
    fn a_named_provider_takes_its_own_key_and_base_url_variable() {
        // What `hermes model` writes for DeepSeek, with the key in .env.
        let yaml = "model:\n  provider: deepseek\n  default: deepseek-chat\n  base_url: https://api.deepseek.com/v1\n";
        let e = remote(home(yaml, &[("DEEPSEEK_API_KEY", "sk-ds-1")], Value::Null));
        assert_eq!(
            (e.api_key.as_deref(), e.key_name.as_str()),
            (Some("sk-ds-1"), "DEEPSEEK_API_KEY")
        );
        let yaml = "model:\n  provider: deepseek\n  default: deepseek-chat\n";
        let e = remote(home(
            yaml,
            &[
                ("DEEPSEEK_API_KEY", "sk-ds-1"),
                ("DEEPSEEK_BASE_URL", "http://127.0.0.1:7/v1"),
            ],
            Value::Null,
        ));
        assert_eq!(e.base_url, "http://127.0.0.1:7/v1");
        let (p, why) = refused(home(yaml, &[], Value::Null));
        assert_eq!(p, "deepseek");
        assert!(why.contains("DEEPSEEK_API_KEY"), "{why}");
        // An alias names the same provider.
        let e = remote(home(
            "model:\n  provider: GLM\n  default: glm-4.6\n",
            &[("ZAI_API_KEY", "zk-12345")],
            Value::Null,
        ));
        assert_eq!(
            (e.provider.as_str(), e.base_url.as_str()),
            ("zai", "https://api.z.ai/api/paas/v4")
        );
    }

    #[test]
    fn what_cannot_be_reached_is_said_not_replaced() {
        let (p, why) = refused(home(
            "model:\n  provider: nosuch\n  default: m\n",
            &[("OPENROUTER_API_KEY", "sk-or-1")],
            Value::Null,
        ));
        assert_eq!(p, "nosuch");
        assert!(
            why.contains("Unknown provider 'nosuch'") && why.contains("deepseek"),
            "{why}"
        );
        let (_, why) = refused(home(
            "model:\n  provider: bedrock\n  default: m\n",
            &[],
            Value::Null,
        ));
        assert!(why.contains("AWS"), "{why}");
        let (_, why) = refused(home(
            "model:\n  provider: openrouter\n",
            &[("OPENROUTER_API_KEY", "sk-or-1")],
            Value::Null,
        ));
        assert!(why.contains("no model is chosen"), "{why}");
        let (_, why) = refused(home(
            "model:\n  provider: custom\n  default: m\n",
            &[],
            Value::Null,
        ));
        assert!(why.contains("model.base_url"), "{why}");
        let (_, why) = refused(home(
            "model:\n  provider: nous\n  default: m\n",
            &[],
            Value::Null,
        ));
        assert!(why.contains("not logged into Nous Portal"), "{why}");
    }

    #[test]
    fn a_local_base_url_is_the_users_own_endpoint() {
        let yaml = "model:\n  default: llama3\n  base_url: http://127.0.0.1:11434/v1\n";
        let e = remote(home(
            yaml,
            &[("OPENROUTER_API_KEY", "sk-or-1")],
            Value::Null,
        ));
        assert_eq!(
            (e.provider.as_str(), e.api_key.as_deref()),
            ("custom", None)
        );
        let yaml =
            "model:\n  default: m\n  base_url: http://127.0.0.1:9/v1\n  api_key_env: MY_KEY\n";
        let e = remote(home(yaml, &[("MY_KEY", "sk-mine-1")], Value::Null));
        assert_eq!(e.api_key.as_deref(), Some("sk-mine-1"));
        // The variable the host names: api.groq.com → GROQ_API_KEY.
        let yaml = "model:\n  provider: custom\n  default: m\n  base_url: https://api.groq.com/openai/v1\n";
        let e = remote(home(yaml, &[("GROQ_API_KEY", "gsk-1234")], Value::Null));
        assert_eq!(
            (e.api_key.as_deref(), e.key_name.as_str()),
            (Some("gsk-1234"), "GROQ_API_KEY")
        );
        // --base-url / OPENAI_BASE_URL: the openai-api endpoint with OPENAI_API_KEY.
        let asked = Asked {
            base_url: Some("http://127.0.0.1:5/v1"),
            ..Asked::default()
        };
        let e = remote(home_asking(
            asked,
            MODEL,
            &[("OPENAI_API_KEY", "sk-oa-1")],
            Value::Null,
        ));
        assert_eq!(
            (
                e.provider.as_str(),
                e.base_url.as_str(),
                e.api_key.as_deref()
            ),
            ("openai-api", "http://127.0.0.1:5/v1", Some("sk-oa-1"))
        );
    }

    #[test]
    fn providers_entries_are_chosen_by_name() {
        let yaml = "model:\n  provider: custom:lab\nproviders:\n  lab:\n    name: Lab\n    base_url: http://10.0.0.2:8000/v1\n    key_env: LAB_KEY\n    api_key: inline-key\n    default_model: lab-model\n    extra_body:\n      top_k: 5\n    extra_headers:\n      X-Team: research\n      X-Bad: \"a\\r\\nInjected: 1\"\n    max_output_tokens: 2048\n";
        let e = remote(home(yaml, &[("LAB_KEY", "lab-secret")], Value::Null));
        assert_eq!(
            (e.provider.as_str(), e.model.as_str()),
            ("custom:lab", "lab-model")
        );
        assert_eq!(
            e.api_key.as_deref(),
            Some("lab-secret"),
            "key_env beats api_key"
        );
        assert_eq!(e.extra_body["top_k"], 5);
        assert_eq!(
            e.headers,
            vec![("X-Team".to_string(), "research".to_string())]
        );
        assert_eq!(e.max_tokens, Some(2048));
        let e = remote(home(yaml, &[], Value::Null));
        assert_eq!(e.api_key.as_deref(), Some("inline-key"));
        let legacy = "model:\n  provider: Local Box\ncustom_providers:\n  - name: local box\n    base_url: http://127.0.0.1:8080/v1\n    model: qwen3\n    api_mode: anthropic_messages\n";
        match home(legacy, &[], Value::Null) {
            Resolved::Remote(e) => assert_eq!(
                (e.provider.as_str(), e.model.as_str()),
                ("custom:local-box", "qwen3")
            ),
            Resolved::Unreachable { why, .. } => {
                assert!(why.contains("anthropic_messages"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        // A built-in's own name is never an entry's.
        let shadow = "model:\n  provider: deepseek\n  default: m\nproviders:\n  deepseek:\n    base_url: http://127.0.0.1:1/v1\n";
        assert_eq!(
            remote(home(
                shadow,
                &[("DEEPSEEK_API_KEY", "sk-ds-1")],
                Value::Null
            ))
            .base_url,
            "https://api.deepseek.com/v1"
        );
    }

    #[test]
    fn a_nous_login_in_auth_json_is_used_and_auto_falls_back_to_it() {
        let auth = serde_json::json!({"active_provider": "nous", "providers": {"nous": {
            "agent_key": "eyJ.agent.key", "inference_base_url": "https://inference-api.nousresearch.com/v1"}}});
        let e = remote(home(MODEL, &[], auth.clone()));
        assert_eq!(
            (e.provider.as_str(), e.api_key.as_deref()),
            ("nous", Some("eyJ.agent.key"))
        );
        assert_eq!(e.base_url, "https://inference-api.nousresearch.com/v1");
        // A key in the environment is asked for more plainly than a login.
        assert_eq!(
            remote(home(
                MODEL,
                &[("DEEPSEEK_API_KEY", "sk-ds-1")],
                auth.clone()
            ))
            .provider,
            "deepseek"
        );
        // A stored URL elsewhere is not trusted with the key.
        let mut elsewhere = auth;
        elsewhere["providers"]["nous"]["inference_base_url"] = "https://evil.example/v1".into();
        assert_eq!(
            remote(home(MODEL, &[], elsewhere)).base_url,
            "https://inference-api.nousresearch.com/v1"
        );
    }

    #[test]
    fn knobs_of_config_yaml_reach_the_endpoint() {
        let yaml = "model:\n  provider: openrouter\n  default: m\n  max_tokens: 4096\nagent:\n  reasoning_effort: High\nprovider_routing:\n  sort: price\n  only: [anthropic]\n  bogus: 1\n";
        let e = remote(home(
            yaml,
            &[("OPENROUTER_API_KEY", "sk-or-1")],
            Value::Null,
        ));
        assert_eq!(e.max_tokens, Some(4096));
        assert_eq!(e.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(
            e.extra_body["provider"],
            serde_json::json!({"sort": "price", "only": ["anthropic"]})
        );
        let off = remote(home(
            "model:\n  provider: openrouter\n  default: m\nagent:\n  reasoning_effort: off\n",
            &[("OPENROUTER_API_KEY", "sk-or-1")],
            Value::Null,
        ));
        assert_eq!(off.reasoning_effort.as_deref(), Some("none"));
    }

    #[test]
    fn lm_studio_and_opencode_shape_their_urls() {
        let e = remote(home(
            "model:\n  provider: lmstudio\n  default: m\n",
            &[("LM_BASE_URL", "http://box:1234/api/v1")],
            Value::Null,
        ));
        assert_eq!(
            (e.base_url.as_str(), e.api_key.as_deref()),
            ("http://box:1234/v1", Some(LMSTUDIO_NO_KEY))
        );
        let e = remote(home(
            "model:\n  provider: opencode-go\n  default: glm-4.6\n",
            &[("OPENCODE_GO_API_KEY", "oc-12345")],
            Value::Null,
        ));
        assert_eq!(
            (e.base_url.as_str(), e.wire),
            ("https://opencode.ai/zen/go/v1", Wire::ChatCompletions)
        );
    }

    #[test]
    fn opencode_and_copilot_choose_the_api_by_the_model_asked() {
        let e = remote(home(
            "model:\n  provider: opencode-zen\n  default: glm-4.6\n",
            &[("OPENCODE_ZEN_API_KEY", "oc-12345")],
            Value::Null,
        ));
        assert_eq!(e.base_url, "https://opencode.ai/zen/v1");
        let rule = e.wire_by_model.expect("by model");
        assert_eq!(rule.wire("glm-4.6"), Wire::ChatCompletions);
        assert_eq!(rule.wire("claude-sonnet-4-5"), Wire::AnthropicMessages);
        assert_eq!(rule.wire("gpt-5"), Wire::CodexResponses);
        let e = remote(home(
            "model:\n  provider: copilot\n  default: gpt-5\n",
            &[("GITHUB_TOKEN", "ghp_12345")],
            Value::Null,
        ));
        assert_eq!(e.wire, Wire::CodexResponses);
        assert_eq!(
            e.wire_by_model.unwrap().wire("gpt-4.1"),
            Wire::ChatCompletions
        );
        let plain = remote(home(MODEL, &[("DEEPSEEK_API_KEY", "sk-ds-1")], Value::Null));
        assert_eq!(plain.wire_by_model, None);
    }

    #[test]
    fn vendor_variables_from_hosts() {
        assert_eq!(
            vendor_key_var("https://api.deepseek.com/v1").as_deref(),
            Some("DEEPSEEK_API_KEY")
        );
        assert_eq!(
            vendor_key_var("https://generativelanguage.googleapis.com").as_deref(),
            Some("GOOGLEAPIS_API_KEY")
        );
        for none in [
            "http://127.0.0.1:8/v1",
            "http://localhost/v1",
            "https://api.openai.com/v1",
            "http://box/v1",
            "http://[::1]/",
        ] {
            assert_eq!(vendor_key_var(none), None, "{none}");
        }
    }
}
