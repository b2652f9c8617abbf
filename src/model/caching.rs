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
/// taken one: Hermes' "last three that can carry one" (system messages aside), except that the
/// previous request's last breakpoint is always kept. Hermes' rule drops it after an answer with
/// two or more tool calls on the Messages API (the call and its results take all three), so that
/// request reads only the system prompt's prefix and writes the whole conversation again; the
/// API's lookback (about 20 blocks) hides this until an answer calls more tools than that.
pub fn marked(messages: &[Message], layout: Layout) -> Vec<usize> {
    let carries = |i: &usize| messages[*i].role != Role::System && can_carry(&messages[*i], layout);
    let mut picked: Vec<usize> = (0..messages.len())
        .rev()
        .filter(carries)
        .take(BREAKPOINTS - 1)
        .collect();
    picked.reverse();
    if let Some(previous) = previous_end(messages, carries)
        && !picked.contains(&previous)
    {
        // The oldest of Hermes' three gives way; the request's own end stays last.
        picked[0] = previous;
        picked.sort_unstable();
    }
    picked
}

/// Where the previous request's breakpoints ended: its last message that could carry one. That
/// request is the one the latest answer replied to, so it ended before that answer (an answer
/// closing the transcript itself is not counted: a request never ends with its own answer).
fn previous_end(messages: &[Message], carries: impl Fn(&usize) -> bool) -> Option<usize> {
    let before_last = messages.len().checked_sub(1)?;
    let answer = messages[..before_last]
        .iter()
        .rposition(|m| m.role == Role::Assistant)?;
    (0..answer).rev().find(carries)
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
            msg(Role::Assistant, Some("one file")),
            msg(Role::User, Some("and now?")),
        ];
        assert_eq!(marked(&t, Layout::Native), [3, 4, 5]);
        // A bare tool call has no part to carry a marker.
        assert_eq!(marked(&t, Layout::Envelope), [3, 4, 5]);
        assert_eq!(marked(&t[..4], Layout::Native), [1, 2, 3]);
        assert_eq!(marked(&t[..4], Layout::Envelope), [1, 3]);
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

    #[test]
    fn after_an_answer_with_two_calls_the_previous_requests_end_keeps_its_breakpoint() {
        let t = [
            msg(Role::User, Some("read both")),
            msg(Role::Assistant, None),
            msg(Role::Tool, Some("a")),
            msg(Role::Tool, Some("")),
        ];
        // Hermes' rule gives [1, 2, 3]: the prompt, where the previous request's cache ends,
        // would be read no more.
        assert_eq!(marked(&t, Layout::Native), [0, 2, 3]);
        // An empty result has no part to carry a marker.
        assert_eq!(marked(&t, Layout::Envelope), [0, 2]);
    }

    /// Requests of a conversation whose answers call 0 to 4 tools (some results empty): each
    /// request keeps a breakpoint where the previous one's last was, ends with one on its own
    /// last message, and has at most three.
    #[test]
    fn every_request_reads_what_the_one_before_wrote() {
        for layout in [Layout::Native, Layout::Envelope] {
            let mut t = vec![msg(Role::User, Some("go"))];
            let mut before: Option<usize> = None;
            for (n, calls) in [2, 0, 1, 3, 0, 4, 2, 1, 0, 2].into_iter().enumerate() {
                let marks = marked(&t, layout);
                assert!(!marks.is_empty() && marks.len() < BREAKPOINTS, "{marks:?}");
                let last = (0..t.len()).rev().find(|&i| can_carry(&t[i], layout));
                assert_eq!(marks.last().copied(), last, "request {n}, {layout:?}");
                if let Some(b) = before {
                    assert!(marks.contains(&b), "request {n}, {layout:?}: {marks:?}");
                }
                before = marks.last().copied();
                if calls == 0 {
                    t.push(msg(Role::Assistant, Some("answer")));
                    t.push(msg(Role::User, Some("next")));
                } else {
                    t.push(msg(Role::Assistant, None));
                    for c in 0..calls {
                        t.push(msg(Role::Tool, Some(if c % 2 == 0 { "out" } else { "" })));
                    }
                }
            }
        }
    }
}
