//! Whether a model gets an attached image's pixels or a pointer to `vision_analyze` (Hermes'
//! `agent/image_routing.py`): `agent.image_input_mode` (`native`, `text`, `auto`), then the
//! user's `supports_vision` (`model.supports_vision`, or
//! `providers.<provider>.models.<model>.supports_vision`), then what is known of the model's
//! family. Pure: config.yaml comes in as a value.

use yaml_rust2::Yaml;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The image goes to the model as image parts.
    Native,
    /// The model gets a note naming the image and `vision_analyze`.
    Text,
}

/// Model families known to take images (in place of Hermes' models.dev lookup).
fn family_sees(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    const SEEING: &[&str] = &[
        "claude-3",
        "claude-sonnet-4",
        "claude-opus-4",
        "claude-haiku-4",
        "claude-4",
        "gpt-4o",
        "gpt-4.1",
        "gpt-4-turbo",
        "gpt-5",
        "o1",
        "o3",
        "o4",
        "chatgpt-4o",
        "gemini",
        "gemma-3",
        "grok-4",
        "grok-2-vision",
        "pixtral",
        "llava",
        "qwen-vl",
        "qwen2-vl",
        "qwen2.5-vl",
        "qwen3-vl",
        "llama-4",
        "llama-3.2-11b-vision",
        "llama-3.2-90b-vision",
        "kimi-k2.5",
        "glm-4.5v",
        "glm-4.6v",
        "minicpm-v",
    ];
    SEEING.iter().any(|f| m.starts_with(f))
}

/// How `model` of `provider` takes attached images under `config`.
pub fn decide(config: &Yaml, provider: &str, model: &str) -> Mode {
    let mode = config["agent"]["image_input_mode"]
        .as_str()
        .map(|s| s.trim().to_ascii_lowercase());
    match mode.as_deref() {
        Some("native") => return Mode::Native,
        Some("text") => return Mode::Text,
        _ => {}
    }
    match sees(config, provider, model) {
        true => Mode::Native,
        false => Mode::Text,
    }
}

/// Whether `model` of `provider` takes images: the user's `supports_vision`, else its family.
pub fn sees(config: &Yaml, provider: &str, model: &str) -> bool {
    let declared = crate::config_file::flag(&config["model"]["supports_vision"]).or_else(|| {
        let configured = config["model"]["provider"].as_str().unwrap_or("");
        [provider, configured]
            .into_iter()
            .filter(|p| !p.is_empty())
            .find_map(|p| {
                crate::config_file::flag(
                    &config["providers"][p]["models"][model]["supports_vision"],
                )
            })
    });
    declared.unwrap_or_else(|| family_sees(model))
}

/// The home's settings a vision request (an image's description, `vision_analyze`) of a
/// session on `model` of `provider` is resolved with. Hermes asks the turn's own model first
/// (its auxiliary client's `auto`, fed the live runtime): when `auxiliary.vision` names no
/// provider or endpoint of its own, the session's provider answers, with the model
/// `auxiliary.vision.model` names, else the session's model if it takes images. A session
/// whose model sees no images (where Hermes goes on to OpenRouter or Nous) keeps the
/// configured model, as before a `/model`.
pub fn vision_settings(
    cfg: &crate::config::Config,
    config: &Yaml,
    provider: &str,
    model: &str,
) -> crate::config::Config {
    let mut cfg = cfg.clone();
    let own = crate::model::auxiliary::names_endpoint(config, "vision");
    let named = crate::model::auxiliary::setting(config, "vision", "model").is_some();
    let session = !provider.is_empty() && provider != "offline" && !model.is_empty();
    if !own && session && (named || sees(config, provider, model)) {
        cfg.provider = Some(provider.to_string());
        cfg.model = Some(model.to_string());
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Yaml {
        crate::config_file::parse(text).unwrap()
    }

    #[test]
    fn the_mode_the_config_and_the_model_decide() {
        let none = Yaml::Null;
        assert_eq!(
            decide(&none, "anthropic", "claude-sonnet-4-5"),
            Mode::Native
        );
        assert_eq!(
            decide(&none, "openrouter", "openai/gpt-4o-mini"),
            Mode::Native
        );
        assert_eq!(decide(&none, "custom", "deepseek-chat"), Mode::Text);
        let off = cfg("model:\n  supports_vision: 'false'\n");
        assert_eq!(decide(&off, "anthropic", "claude-sonnet-4-5"), Mode::Text);
        let on = cfg(
            "providers:\n  mine:\n    models:\n      local-7b:\n        supports_vision: true\n",
        );
        assert_eq!(decide(&on, "mine", "local-7b"), Mode::Native);
        let text = cfg("agent:\n  image_input_mode: text\nmodel:\n  supports_vision: true\n");
        assert_eq!(decide(&text, "x", "gpt-4o"), Mode::Text);
    }

    #[test]
    fn a_vision_request_goes_to_the_sessions_model_unless_auxiliary_vision_names_one() {
        let home = crate::config::Config::default();
        let asked = |config: &Yaml, provider: &str, model: &str| {
            let c = vision_settings(&home, config, provider, model);
            (c.provider, c.model)
        };
        let session = (
            Some("openrouter".to_string()),
            Some("openai/gpt-4.1".to_string()),
        );
        assert_eq!(asked(&Yaml::Null, "openrouter", "openai/gpt-4.1"), session);
        // A model that sees no images: the configured one, as before.
        assert_eq!(asked(&Yaml::Null, "custom", "deepseek-chat"), (None, None));
        assert_eq!(asked(&Yaml::Null, "offline", "gpt-4o"), (None, None));
        // `auxiliary.vision.model` alone: asked of the session's provider.
        let model = cfg("auxiliary:\n  vision:\n    model: pixtral-large\n");
        assert_eq!(
            asked(&model, "mistral", "mistral-small").0.as_deref(),
            Some("mistral")
        );
        // A provider or an endpoint of its own: as `auxiliary.vision` says.
        let own = cfg("auxiliary:\n  vision:\n    provider: zai\n");
        assert_eq!(asked(&own, "openrouter", "openai/gpt-4.1"), (None, None));
        let url = cfg("auxiliary:\n  vision:\n    base_url: http://127.0.0.1:1/v1\n");
        assert_eq!(asked(&url, "openrouter", "openai/gpt-4.1"), (None, None));
    }
}
