//! Prompt caching as Hermes does it: which endpoints get `cache_control` breakpoints, in which
//! layout, and on which messages ("system and 3": the system prompt and the last three other
//! messages, four breakpoints at most). Pure: the wires apply what this decides.

use serde_json::{Value, json};

use super::wire::Wire;
use super::wire::messages::hosts::{host_matches, host_of, is_kimi_family_model};
use crate::transcript::{Message, Role};

/// Where a breakpoint may sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Anthropic's Messages API: any message, its marker on the block it ends with.
    Native,
    /// An OpenAI-wire proxy (OpenRouter, Nous, Alibaba): only on a content part, so a message
    /// without content (a bare tool call, an empty result) cannot carry one.
    Envelope,
}

/// Breakpoints in a request at most (the API's limit).
const BREAKPOINTS: usize = 4;

/// Whether requests to this endpoint get breakpoints, and in which layout (Hermes'
/// `anthropic_prompt_cache_policy`; its `moa` virtual provider does not exist here).
pub fn policy(provider: &str, base_url: &str, wire: Wire, model: &str) -> Option<Layout> {
    let model = model.to_ascii_lowercase();
    let provider = provider.trim().to_ascii_lowercase();
    let claude = model.contains("claude");
    let kimi = is_kimi_family_model(&model) || model.contains("moonshot");
    let qwen = model.contains("qwen");
    let messages_wire = wire == Wire::AnthropicMessages;
    let openrouter = host_matches(base_url, "openrouter.ai");
    let nous = base_url.to_ascii_lowercase().contains("nousresearch");
    if messages_wire && (provider == "anthropic" || host_of(base_url) == "api.anthropic.com") {
        return Some(Layout::Native);
    }
    if (openrouter || nous) && (claude || kimi) {
        return Some(Layout::Envelope);
    }
    if nous && qwen {
        return Some(Layout::Envelope);
    }
    // Any gateway speaking Anthropic's protocol for a Claude model (Azure, LiteLLM, Bedrock).
    if messages_wire && claude {
        return Some(Layout::Native);
    }
    let minimax = matches!(provider.as_str(), "minimax" | "minimax-cn")
        || host_matches(base_url, "api.minimax.io")
        || host_matches(base_url, "api.minimaxi.com");
    if messages_wire && minimax {
        return Some(Layout::Native);
    }
    let alibaba = matches!(
        provider.as_str(),
        "opencode" | "opencode-zen" | "opencode-go" | "alibaba"
    );
    if alibaba && qwen {
        return Some(Layout::Envelope);
    }
    None
}

/// The breakpoint itself (Hermes' default five-minute lifetime).
pub fn marker() -> Value {
    json!({"type": "ephemeral"})
}

/// Which of `messages` get a breakpoint (their indexes, ascending), the system prompt having
/// taken one: the last three that can carry one, system messages aside.
pub fn marked(messages: &[Message], layout: Layout) -> Vec<usize> {
    let mut picked: Vec<usize> = messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| m.role != Role::System && can_carry(m, layout))
        .map(|(i, _)| i)
        .take(BREAKPOINTS - 1)
        .collect();
    picked.reverse();
    picked
}

/// Whether a breakpoint on this message counts: always in the native layout; in the envelope
/// one only on content (there is no part to put it on otherwise).
fn can_carry(m: &Message, layout: Layout) -> bool {
    match layout {
        Layout::Native => true,
        Layout::Envelope => m.content.as_deref().is_some_and(|c| !c.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: Wire = Wire::ChatCompletions;
    const MSGS: Wire = Wire::AnthropicMessages;

    #[test]
    fn the_decision_table() {
        use Layout::{Envelope, Native};
        let rows: &[(&str, &str, Wire, &str, Option<Layout>)] = &[
            // 1: Anthropic itself, by provider or by host.
            (
                "anthropic",
                "http://127.0.0.1:9",
                MSGS,
                "anything",
                Some(Native),
            ),
            (
                "custom",
                "https://api.anthropic.com",
                MSGS,
                "x",
                Some(Native),
            ),
            (
                "anthropic",
                "https://api.anthropic.com",
                CHAT,
                "gpt-4o",
                None,
            ),
            // 2: OpenRouter or Nous with Claude or Kimi: envelope, whatever the wire.
            (
                "openrouter",
                "https://openrouter.ai/api/v1",
                CHAT,
                "anthropic/claude-sonnet-4.6",
                Some(Envelope),
            ),
            (
                "custom",
                "https://openrouter.ai/api/v1",
                CHAT,
                "moonshotai/kimi-k2.6",
                Some(Envelope),
            ),
            (
                "custom",
                "https://openrouter.ai/api/v1",
                CHAT,
                "moonshot-v1-8k",
                Some(Envelope),
            ),
            (
                "nous",
                "https://inference-api.nousresearch.com/v1",
                CHAT,
                "Claude-Opus-4.7",
                Some(Envelope),
            ),
            (
                "openrouter",
                "https://openrouter.ai/api/v1",
                CHAT,
                "openai/gpt-5.4",
                None,
            ),
            (
                "openrouter",
                "https://openrouter.ai/api/v1",
                MSGS,
                "anthropic/claude-opus-4.6",
                Some(Envelope),
            ),
            // 3: Nous with Qwen.
            (
                "nous",
                "https://inference-api.nousresearch.com/v1",
                CHAT,
                "qwen3.6-plus",
                Some(Envelope),
            ),
            (
                "openrouter",
                "https://openrouter.ai/api/v1",
                CHAT,
                "qwen/qwen3-coder",
                None,
            ),
            // 4: any Anthropic-protocol gateway with a Claude model.
            (
                "custom",
                "https://r.services.ai.azure.com/anthropic",
                MSGS,
                "claude-opus-4-6",
                Some(Native),
            ),
            (
                "custom",
                "http://litellm.local/v1",
                MSGS,
                "claude-sonnet-4-5",
                Some(Native),
            ),
            (
                "custom",
                "http://litellm.local/v1",
                CHAT,
                "claude-sonnet-4-5",
                None,
            ),
            // 5: MiniMax on its Anthropic endpoint, by provider or host.
            (
                "minimax",
                "http://proxy.local",
                MSGS,
                "MiniMax-M2.7",
                Some(Native),
            ),
            (
                "custom",
                "https://api.minimaxi.com/anthropic",
                MSGS,
                "MiniMax-M2.7",
                Some(Native),
            ),
            (
                "minimax",
                "https://api.minimax.io/v1",
                CHAT,
                "MiniMax-M2.7",
                None,
            ),
            // 6: Qwen on OpenCode or Alibaba.
            (
                "opencode-go",
                "https://opencode.ai/zen/go/v1",
                CHAT,
                "qwen3.6-plus",
                Some(Envelope),
            ),
            (
                "alibaba",
                "https://dashscope.aliyuncs.com/v1",
                CHAT,
                "Qwen3-Max",
                Some(Envelope),
            ),
            (
                "alibaba",
                "https://dashscope.aliyuncs.com/v1",
                CHAT,
                "deepseek-v4",
                None,
            ),
            // 7: the rest.
            (
                "kimi-coding",
                "https://api.kimi.com/coding",
                MSGS,
                "kimi-k2.5",
                None,
            ),
            (
                "deepseek",
                "https://api.deepseek.com/anthropic",
                MSGS,
                "deepseek-v4-pro",
                None,
            ),
            ("openai", "https://api.openai.com/v1", CHAT, "gpt-4o", None),
            (
                "custom",
                "http://127.0.0.1:9/v1",
                CHAT,
                "claude-local",
                None,
            ),
        ];
        for (provider, base, wire, model, want) in rows {
            assert_eq!(
                policy(provider, base, *wire, model),
                *want,
                "{provider} {base} {wire:?} {model}"
            );
        }
    }

    fn msg(role: Role, content: Option<&str>) -> Message {
        Message::new(role, content.map(str::to_string), 0.0)
    }

    #[test]
    fn the_last_three_messages_that_can_carry_one_are_marked() {
        let t = [
            msg(Role::System, Some("summary of before")),
            msg(Role::User, Some("list /tmp")),
            msg(Role::Assistant, None),
            msg(Role::Tool, Some("a.txt")),
            msg(Role::Tool, Some("")),
            msg(Role::Assistant, Some("done")),
        ];
        assert_eq!(marked(&t, Layout::Native), [3, 4, 5]);
        // A bare tool call and an empty result have no part to carry a marker.
        assert_eq!(marked(&t, Layout::Envelope), [1, 3, 5]);
        assert_eq!(
            marked(&t[..2], Layout::Native),
            [1],
            "fewer messages than breakpoints"
        );
        assert!(
            marked(&t[..1], Layout::Native).is_empty(),
            "system messages never count"
        );
        assert_eq!(marker(), json!({"type": "ephemeral"}));
    }
}
