//! What Hermes knows of each model behind the Messages API: its wire name, its longest answer,
//! and how it thinks (adaptive effort on Claude 4.6 and later, a token budget before, none on
//! Haiku or Kimi).

use serde_json::{Value, json};

/// Longest answer per model family; the longest key found in the model's name wins.
const OUTPUT_LIMITS: [(&str, u64); 18] = [
    ("claude-fable", 128_000),
    ("claude-opus-4-8", 128_000),
    ("claude-opus-4-7", 128_000),
    ("claude-opus-4-6", 128_000),
    ("claude-sonnet-4-6", 64_000),
    ("claude-opus-4-5", 64_000),
    ("claude-sonnet-4-5", 64_000),
    ("claude-haiku-4-5", 64_000),
    ("claude-opus-4", 32_000),
    ("claude-sonnet-4", 64_000),
    ("claude-3-7-sonnet", 128_000),
    ("claude-3-5-sonnet", 8_192),
    ("claude-3-5-haiku", 8_192),
    ("claude-3-opus", 4_096),
    ("claude-3-sonnet", 4_096),
    ("claude-3-haiku", 4_096),
    ("minimax", 131_072),
    ("qwen3", 65_536),
];
/// A model not in the table is assumed to be a new one, with the newest models' limit.
const DEFAULT_OUTPUT_LIMIT: u64 = 128_000;

/// Claude families that think with a token budget, not adaptively.
const LEGACY_THINKING: [&str; 15] = [
    "claude-3",
    "claude-opus-4-0",
    "claude-opus-4.0",
    "claude-opus-4-1",
    "claude-opus-4.1",
    "claude-sonnet-4-0",
    "claude-sonnet-4.0",
    "claude-opus-4-2025",
    "claude-sonnet-4-2025",
    "claude-opus-4-5",
    "claude-opus-4.5",
    "claude-sonnet-4-5",
    "claude-sonnet-4.5",
    "claude-haiku-4-5",
    "claude-haiku-4.5",
];
/// Adaptive models that know no `xhigh` effort (it became `max`).
const NO_XHIGH: [&str; 4] = [
    "claude-opus-4-6",
    "claude-opus-4.6",
    "claude-sonnet-4-6",
    "claude-sonnet-4.6",
];

/// The model's name as the API wants it: no `anthropic/` prefix, and dots as dashes in Claude
/// versions (`claude-opus-4.6` → `claude-opus-4-6`); Bedrock ids and other vendors' names as they
/// are.
pub fn wire_name(model: &str) -> String {
    let model = match model.get(..10) {
        Some(p) if p.eq_ignore_ascii_case("anthropic/") => &model[10..],
        _ => model,
    };
    let lower = model.to_ascii_lowercase();
    let bedrock = ["global.", "us.", "eu.", "ap.", "jp.", "anthropic."]
        .iter()
        .any(|p| lower.starts_with(p));
    if !bedrock && lower.starts_with("claude-") {
        model.replace('.', "-")
    } else {
        model.to_string()
    }
}

/// The longest answer the model may write.
pub fn output_limit(model: &str) -> u64 {
    known_output_limit(model).unwrap_or(DEFAULT_OUTPUT_LIMIT)
}

/// The longest answer of a model family the table knows (`None`: not one of them).
pub fn known_output_limit(model: &str) -> Option<u64> {
    let m = model.to_ascii_lowercase().replace('.', "-");
    OUTPUT_LIMITS
        .iter()
        .filter(|(key, _)| m.contains(key))
        .max_by_key(|(key, _)| key.len())
        .map(|(_, limit)| *limit)
}

fn is_claude(lower: &str) -> bool {
    lower.contains("claude")
}

/// Claude 4.6 and later (and unknown Claude models) choose their own thinking budget.
fn is_adaptive(lower: &str) -> bool {
    is_claude(lower) && !LEGACY_THINKING.iter().any(|v| lower.contains(v))
}

/// How the answer may think, from a Hermes effort level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Thinking {
    /// No `thinking` field (none asked, or a model that has none).
    Off,
    /// `thinking: {type: adaptive}` with `output_config.effort`.
    Adaptive(&'static str),
    /// `thinking: {type: enabled, budget_tokens}`, which wants `temperature: 1`.
    Budget(u64),
}

/// What Hermes' reasoning effort asks of this model. `effort`: the session's or the
/// endpoint's level; `None`, an empty or an unknown word is "the provider's default", which on
/// this API is no thinking; `none`/`false`/`disabled` (and YAML's `off`/`no`) turn it off.
pub fn thinking(effort: Option<&str>, model: &str, kimi: bool) -> Thinking {
    let lower = model.to_ascii_lowercase();
    // Kimi thinks server-side; no Haiku thinks.
    if kimi || lower.contains("haiku") {
        return Thinking::Off;
    }
    let effort = effort
        .map(|e| e.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let known = ["minimal", "low", "medium", "high", "xhigh", "max", "ultra"];
    if !known.contains(&effort.as_str()) {
        return Thinking::Off;
    }
    if is_adaptive(&lower) {
        let level = match effort.as_str() {
            "ultra" | "max" => "max",
            "xhigh" if NO_XHIGH.iter().any(|v| lower.contains(v)) => "max",
            "xhigh" => "xhigh",
            "high" => "high",
            "low" | "minimal" => "low",
            _ => "medium",
        };
        return Thinking::Adaptive(level);
    }
    Thinking::Budget(match effort.as_str() {
        "xhigh" => 32_000,
        "high" => 16_000,
        "low" => 4_000,
        _ => 8_000,
    })
}

/// The body's `max_tokens` and thinking fields: the configured limit (else the model's own),
/// raised to leave room for a thinking budget.
pub fn limits_and_thinking(
    body: &mut serde_json::Map<String, Value>,
    max_tokens: Option<u64>,
    thinking: &Thinking,
    model: &str,
) {
    let mut limit = max_tokens
        .filter(|n| *n > 0)
        .unwrap_or_else(|| output_limit(model));
    match thinking {
        Thinking::Off => {}
        Thinking::Adaptive(level) => {
            body.insert(
                "thinking".into(),
                json!({"type": "adaptive", "display": "summarized"}),
            );
            body.insert("output_config".into(), json!({ "effort": level }));
        }
        Thinking::Budget(budget) => {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
            body.insert("temperature".into(), json!(1));
            limit = limit.max(budget + 4096);
        }
    }
    body.insert("max_tokens".into(), json!(limit));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names() {
        assert_eq!(wire_name("anthropic/claude-opus-4.6"), "claude-opus-4-6");
        assert_eq!(
            wire_name("Anthropic/Claude-Sonnet-4.5"),
            "Claude-Sonnet-4-5"
        );
        assert_eq!(
            wire_name("us.anthropic.claude-sonnet-4-5-v1:0"),
            "us.anthropic.claude-sonnet-4-5-v1:0"
        );
        assert_eq!(wire_name("MiniMax-M2.7"), "MiniMax-M2.7");
        assert_eq!(wire_name("gpt-5.4"), "gpt-5.4");
        assert_eq!(wire_name("é"), "é");
    }

    #[test]
    fn output_limits_take_the_longest_key() {
        assert_eq!(output_limit("claude-opus-4-1"), 32_000);
        assert_eq!(output_limit("claude-opus-4.6"), 128_000);
        assert_eq!(output_limit("claude-sonnet-4-5-20250929"), 64_000);
        assert_eq!(output_limit("claude-3-5-haiku-latest"), 8_192);
        assert_eq!(output_limit("MiniMax-M2.7"), 131_072);
        assert_eq!(output_limit("some-new-model"), 128_000);
    }

    #[test]
    fn efforts_map_to_adaptive_levels_or_budgets() {
        let t = |e: &str, m: &str| thinking(Some(e), m, false);
        assert_eq!(t("xhigh", "claude-opus-4-7"), Thinking::Adaptive("xhigh"));
        assert_eq!(t("xhigh", "claude-sonnet-4-6"), Thinking::Adaptive("max"));
        assert_eq!(t("ultra", "claude-opus-4-8"), Thinking::Adaptive("max"));
        assert_eq!(t("minimal", "claude-fable-5"), Thinking::Adaptive("low"));
        assert_eq!(t(" HIGH ", "claude-opus-4-6"), Thinking::Adaptive("high"));
        assert_eq!(t("high", "claude-sonnet-4-5"), Thinking::Budget(16_000));
        assert_eq!(t("xhigh", "claude-3-7-sonnet"), Thinking::Budget(32_000));
        assert_eq!(t("max", "claude-opus-4-1"), Thinking::Budget(8_000));
        assert_eq!(t("low", "MiniMax-M2.7"), Thinking::Budget(4_000));
        assert_eq!(t("high", "claude-haiku-4-5"), Thinking::Off);
        assert_eq!(t("none", "claude-opus-4-7"), Thinking::Off);
        assert_eq!(t("", "claude-opus-4-7"), Thinking::Off);
        assert_eq!(thinking(None, "claude-opus-4-7", false), Thinking::Off);
        assert_eq!(thinking(Some("high"), "kimi-k2", true), Thinking::Off);
    }

    #[test]
    fn a_budget_raises_max_tokens_and_sets_temperature() {
        let mut body = serde_json::Map::new();
        limits_and_thinking(
            &mut body,
            Some(1000),
            &Thinking::Budget(16_000),
            "claude-sonnet-4-5",
        );
        assert_eq!(body["max_tokens"], 20_096);
        assert_eq!(body["temperature"], 1);
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 16000})
        );
        let mut body = serde_json::Map::new();
        limits_and_thinking(
            &mut body,
            None,
            &Thinking::Adaptive("max"),
            "claude-sonnet-4-6",
        );
        assert_eq!(body["max_tokens"], 64_000);
        assert_eq!(body["output_config"], json!({"effort": "max"}));
        assert!(!body.contains_key("temperature"));
        let mut body = serde_json::Map::new();
        limits_and_thinking(&mut body, Some(0), &Thinking::Off, "claude-opus-4-1");
        assert_eq!(body["max_tokens"], 32_000, "a zero limit is no limit");
        assert!(!body.contains_key("thinking"));
    }
}
