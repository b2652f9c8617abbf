//! Which provider runs: flags and environment first, then the `model:` section of
//! `$HERMES_HOME/config.yaml` (read bounded by `config_file`), else the offline model.

use std::time::Duration;

use yaml_rust2::Yaml;

use super::Provider;
use super::endpoint::Endpoint;
use super::exchange::Timing;
use super::offline::OfflineProvider;
use super::remote::RemoteProvider;
use super::wire::Wire;
use crate::config::Config;

/// The `model:` section of Hermes' config.yaml (a string, or a map with these keys).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ModelSection {
    pub default: Option<String>,
    pub provider: Option<String>,
    pub base_url: Option<String>,
    /// `model.api_key`: the bearer token, written in the file.
    pub api_key: Option<String>,
    /// `model.api_key_env`: the name of an environment variable holding the token.
    pub api_key_env: Option<String>,
    /// `model.api_mode`: the API the endpoint speaks (`chat_completions`, `anthropic_messages`,
    /// `codex_responses`).
    pub api_mode: Option<String>,
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
            base_url: s(&model["base_url"]),
            api_key: s(&model["api_key"]),
            api_key_env: s(&model["api_key_env"]),
            api_mode: s(&model["api_mode"]),
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

/// The bearer token: the environment's `OPENAI_API_KEY` (already in `cfg`), else config.yaml's
/// `model.api_key`, else the variable `model.api_key_env` names, else the known provider's.
fn api_key_for(
    cfg: &Config,
    section: &ModelSection,
    known_var: Option<&str>,
    from_env: bool,
) -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|k| !k.trim().is_empty());
    cfg.api_key
        .clone()
        .or_else(|| (!from_env).then(|| section.api_key.clone()).flatten())
        .or_else(|| {
            (!from_env)
                .then_some(section.api_key_env.as_deref())
                .flatten()
                .and_then(var)
        })
        .or_else(|| known_var.and_then(var))
}

/// Base URL and key variable of providers known to speak `/v1/chat/completions`.
fn known_endpoint(provider: &str) -> Option<(&'static str, &'static str)> {
    match provider {
        "openai" => Some(("https://api.openai.com/v1", "OPENAI_API_KEY")),
        "openrouter" => Some(("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY")),
        _ => None,
    }
}

/// The provider to run, and a warning for the user when the configuration could not be used.
pub fn choose(cfg: &Config) -> (Box<dyn Provider>, Option<String>) {
    let offline = || Box::new(OfflineProvider::new(cfg.offline_word_delay)) as Box<dyn Provider>;
    if cfg.provider.as_deref() == Some("offline") {
        return (offline(), None);
    }
    let section = match load_model_section(cfg) {
        Ok(s) => s,
        Err(e) => return (offline(), Some(e)),
    };
    let from_env = cfg.base_url.is_some() || cfg.api_key.is_some() || cfg.provider.is_some();
    let yaml_provider = section.provider.clone().unwrap_or_default();
    let yaml_endpoint = known_endpoint(&yaml_provider);
    let base_url = cfg
        .base_url
        .clone()
        .or_else(|| (!from_env).then(|| section.base_url.clone()).flatten())
        .or_else(|| yaml_endpoint.filter(|_| !from_env).map(|e| e.0.to_string()))
        .or_else(|| from_env.then(|| "https://api.openai.com/v1".to_string()));
    let Some(base_url) = base_url else {
        let warning = (!yaml_provider.is_empty()).then(|| {
            format!("config.yaml names provider {yaml_provider:?}, which this gateway cannot reach without a base_url; using the offline model")
        });
        return (offline(), warning);
    };
    let api_key = api_key_for(cfg, &section, yaml_endpoint.map(|e| e.1), from_env);
    let wire = section
        .api_mode
        .as_deref()
        .and_then(Wire::from_api_mode)
        .unwrap_or(Wire::ChatCompletions);
    let endpoint = Endpoint {
        key_name: "OPENAI_API_KEY".into(),
        model: cfg
            .model
            .clone()
            .or(section.default)
            .unwrap_or_else(|| "gpt-4o-mini".into()),
        ..Endpoint::new("openai", &base_url, api_key, wire)
    };
    let timing = Timing {
        connect_timeout: cfg.connect_timeout.max(Duration::from_millis(1)),
        first_byte_timeout: cfg.first_byte_timeout.max(Duration::from_millis(1)),
        idle_timeout: cfg.idle_timeout.max(Duration::from_millis(1)),
        retries: cfg.model_retries,
        retry_base: cfg.retry_base,
        retry_cap: cfg.retry_cap,
    };
    match RemoteProvider::new(endpoint, timing) {
        Ok(p) => (Box::new(p), None),
        Err(e) => (offline(), Some(format!("{e}; using the offline model"))),
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
        assert_eq!(s.base_url.as_deref(), Some("http://127.0.0.1:11434/v1"));
        let s = read_model_section("model: gpt-4o\nother: 1\n").unwrap();
        assert_eq!(s.default.as_deref(), Some("gpt-4o"));
        assert_eq!(
            read_model_section("display:\n  skin: x\n").unwrap(),
            ModelSection::default()
        );
        assert!(read_model_section("model: [unclosed").is_err());
    }

    fn home_with(yaml: &str) -> Config {
        let dir = std::env::temp_dir().join(format!("tgw-select-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.yaml"), yaml).unwrap();
        Config {
            home: dir,
            ..Config::default()
        }
    }

    #[test]
    fn nothing_configured_means_offline() {
        let (p, w) = choose(&home_with("display: {}\n"));
        assert_eq!((p.name(), w), ("offline", None));
    }

    #[test]
    fn a_base_url_in_config_yaml_selects_openai() {
        let (p, w) = choose(&home_with(
            "model:\n  default: qwen\n  base_url: http://127.0.0.1:9/v1\n",
        ));
        assert_eq!((p.name(), p.default_model(), w), ("openai", "qwen", None));
    }

    #[test]
    fn flags_beat_config_yaml_and_offline_can_be_forced() {
        let mut cfg = home_with("model:\n  default: qwen\n  base_url: http://127.0.0.1:9/v1\n");
        cfg.model = Some("m2".into());
        cfg.base_url = Some("http://127.0.0.1:10/v1".into());
        let (p, _) = choose(&cfg);
        assert_eq!(p.default_model(), "m2");
        cfg.provider = Some("offline".into());
        assert_eq!(choose(&cfg).0.name(), "offline");
    }

    #[test]
    fn an_unusable_configuration_falls_back_with_a_warning() {
        let (p, w) = choose(&home_with("model:\n  provider: anthropic\n"));
        assert_eq!(p.name(), "offline");
        assert!(w.unwrap().contains("anthropic"));
        let cfg = Config {
            home: std::env::temp_dir(),
            base_url: Some("ftp://nope".into()),
            ..Config::default()
        };
        let (p, w) = choose(&cfg);
        assert_eq!(p.name(), "offline");
        assert!(w.unwrap().contains("http://"));
    }

    #[test]
    fn the_key_comes_from_config_yaml_or_the_variable_it_names() {
        let cfg = home_with("model:\n  base_url: http://127.0.0.1:9/v1\n  api_key: sk-file\n");
        let section = load_model_section(&cfg).unwrap();
        assert_eq!(
            api_key_for(&cfg, &section, None, false).as_deref(),
            Some("sk-file")
        );
        // An endpoint from the environment never gets config.yaml's key.
        assert_eq!(api_key_for(&cfg, &section, None, true), None);
        // Any variable will do: PATH is always set.
        let cfg = home_with("model:\n  base_url: http://127.0.0.1:9/v1\n  api_key_env: PATH\n");
        let section = load_model_section(&cfg).unwrap();
        let path = std::env::var("PATH").unwrap();
        assert_eq!(api_key_for(&cfg, &section, None, false), Some(path));
        let with_env_key = Config {
            api_key: Some("sk-flag".into()),
            ..cfg
        };
        assert_eq!(
            api_key_for(&with_env_key, &section, None, false).as_deref(),
            Some("sk-flag")
        );
    }
}
