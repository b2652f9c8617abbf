//! A side task's model (`auxiliary.<task>` of config.yaml: `provider`, `model`, `base_url`,
//! `api_key`, as Hermes' auxiliary client reads them; `auto` or `main` names none): what it
//! asks resolution for, the flags filling in what it leaves out, and the model it asks for (a
//! provider named without a model: Hermes' cheap one for it). Its key stays in `model/`.

use yaml_rust2::Yaml;

use super::endpoint::Endpoint;
use super::resolve::Asked;
use crate::config::Config;

/// What `auxiliary.<task>` asks for.
pub struct Side<'a> {
    pub task: &'a str,
    pub asked: Asked<'a>,
    /// `model`: the model asked for by name (else the endpoint's).
    pub model: Option<&'a str>,
    /// `api_key`: sent instead of the key resolution finds.
    pub api_key: Option<&'a str>,
    /// `provider` names one (not `auto`/`main`).
    pub names_provider: bool,
}

impl Side<'_> {
    /// The model the call asks `endpoint` for: the one named, else (a provider named) Hermes'
    /// cheap model for that provider, else the endpoint's.
    pub fn model_for(&self, endpoint: &Endpoint) -> String {
        let cheap = || {
            self.names_provider
                .then(|| super::providers::aux_model(&endpoint.provider, self.task))
                .flatten()
        };
        self.model
            .or_else(cheap)
            .map_or_else(|| endpoint.model.clone(), str::to_string)
    }
}

/// One of `auxiliary.<task>`'s settings: trimmed, `None` when empty, `auto` or `main`.
pub fn setting<'a>(config: &'a Yaml, task: &str, key: &str) -> Option<&'a str> {
    config["auxiliary"][task][key]
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("auto") && *s != "main")
}

/// Whether `auxiliary.<task>` names a provider or an endpoint of its own.
pub fn names_endpoint(config: &Yaml, task: &str) -> bool {
    setting(config, task, "provider").is_some() || setting(config, task, "base_url").is_some()
}

/// What `auxiliary.<task>` asks for, `cfg`'s flags (`--provider`, `--model`, `--base-url`)
/// filling in what it leaves out.
pub fn side<'a>(cfg: &'a Config, config: &'a Yaml, task: &'a str) -> Side<'a> {
    let text = |key: &str| setting(config, task, key);
    Side {
        task,
        asked: Asked {
            provider: text("provider").or(cfg.provider.as_deref()),
            model: text("model").or(cfg.model.as_deref()),
            base_url: text("base_url").or(cfg.base_url.as_deref()),
        },
        model: text("model"),
        api_key: text("api_key"),
        names_provider: text("provider").is_some(),
    }
}
