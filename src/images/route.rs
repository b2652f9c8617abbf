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
    match declared.unwrap_or_else(|| family_sees(model)) {
        true => Mode::Native,
        false => Mode::Text,
    }
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
}
