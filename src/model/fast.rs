//! Hermes' fast mode (`/fast`, `agent.service_tier: fast` in config.yaml): a quicker, dearer
//! service on the models that sell one — Anthropic's `speed: "fast"` (Claude Opus 4.6, on
//! Anthropic's own API) and OpenAI's priority processing (`service_tier: "priority"`, GPT and
//! o-series models but Codex). Other models have none, and `/fast` is refused for them.

use yaml_rust2::Yaml;

use super::ModelRequest;

/// The beta Anthropic's API wants beside `speed`.
pub const SPEED_BETA: &str = "fast-mode-2026-02-01";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fast {
    /// Anthropic's `speed: "fast"`.
    Speed,
    /// OpenAI's `service_tier: "priority"`.
    Priority,
}

/// The fast mode `model` offers, by its name with any `vendor/` prefix and `:variant` cut.
pub fn of(model: &str) -> Option<Fast> {
    let m = model.trim().to_ascii_lowercase();
    let bare = m.split_once('/').map_or(m.as_str(), |(_, b)| b);
    let base = bare.split(':').next().unwrap_or_default();
    if base.starts_with("claude-") {
        return (base.contains("opus-4-6") || base.contains("opus-4.6")).then_some(Fast::Speed);
    }
    let openai = ["gpt-", "o1", "o3", "o4"]
        .iter()
        .any(|p| base.starts_with(p));
    (openai && !base.contains("codex")).then_some(Fast::Priority)
}

/// The request asks for OpenAI's priority tier (`service_tier: "priority"`).
pub fn priority(req: &ModelRequest<'_>) -> bool {
    req.fast && of(req.model) == Some(Fast::Priority)
}

/// The request asks for Anthropic's `speed: "fast"` (only Anthropic's own API takes it).
pub fn speed(req: &ModelRequest<'_>) -> bool {
    req.fast && of(req.model) == Some(Fast::Speed)
}

/// Whether config.yaml's `agent.service_tier` asks for fast mode.
pub fn configured(config: &Yaml) -> bool {
    match &config["agent"]["service_tier"] {
        Yaml::String(s) => matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "fast" | "priority" | "on"
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_take_the_fast_mode_their_vendor_sells() {
        assert_eq!(of("claude-opus-4-6"), Some(Fast::Speed));
        assert_eq!(of("anthropic/claude-opus-4.6:beta"), Some(Fast::Speed));
        assert_eq!(of("claude-opus-4-7"), None);
        assert_eq!(of("claude-sonnet-4-5"), None);
        assert_eq!(of("gpt-5.1"), Some(Fast::Priority));
        assert_eq!(of("openai/o3-mini"), Some(Fast::Priority));
        assert_eq!(of("gpt-5-codex"), None);
        assert_eq!(of("deepseek-chat"), None);
        assert_eq!(of(""), None);
    }

    #[test]
    fn only_a_fast_service_tier_turns_it_on() {
        let yaml = |s: &str| crate::config_file::parse(s).unwrap();
        assert!(configured(&yaml("agent:\n  service_tier: fast\n")));
        assert!(configured(&yaml("agent:\n  service_tier: Priority\n")));
        assert!(!configured(&yaml("agent:\n  service_tier: normal\n")));
        assert!(!configured(&yaml("agent:\n  service_tier: true\n")));
        assert!(!configured(&yaml("agent: 3\n")));
    }
}
