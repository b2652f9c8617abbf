//! What kind of Messages endpoint a base URL names, as Hermes tells them apart: Anthropic's own
//! (where OAuth tokens and signed thinking are understood), Kimi's `/coding`, DeepSeek's and
//! MiniMax's `/anthropic`, Azure Foundry, any other proxy; and which key is an OAuth token.

use crate::model::http::Url;
pub use crate::model::providers::{host_of, host_within as host_matches};

/// The base URL as the SDK is given it: trimmed, without a trailing `/` or `/v1`.
pub fn normalized_base(base_url: &str) -> &str {
    let b = base_url.trim().trim_end_matches('/');
    b.strip_suffix("/v1").unwrap_or(b)
}

/// Anthropic's own API (no base URL, or one on `anthropic.com`): the only place OAuth tokens and
/// thinking signatures are understood.
pub fn is_native(base_url: &str) -> bool {
    let b = base_url.trim();
    b.is_empty() || b.to_ascii_lowercase().contains("anthropic.com")
}

/// Kimi's `/coding` endpoint (it wants Claude Code's user agent).
pub fn is_kimi_coding(base_url: &str) -> bool {
    base_url
        .trim()
        .trim_end_matches('/')
        .to_ascii_lowercase()
        .starts_with("https://api.kimi.com/coding")
}

/// A Kimi / Moonshot model name (`kimi-k2.5`, `moonshotai/kimi-k2`, `k2-thinking`…).
pub fn is_kimi_family_model(model: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "kimi-",
        "kimi_",
        "moonshot-",
        "moonshot_",
        "k1.",
        "k1-",
        "k2.",
        "k2-",
        "k25",
        "k2.5",
    ];
    let m = model.trim().to_ascii_lowercase();
    let last = m.rsplit('/').next().unwrap_or("");
    !last.is_empty() && PREFIXES.iter().any(|p| last.starts_with(p))
}

/// Kimi's thinking contract applies: its hosts, or a Kimi model behind any gateway.
pub fn is_kimi_family(base_url: &str, model: &str) -> bool {
    is_kimi_coding(base_url)
        || ["api.kimi.com", "moonshot.ai", "moonshot.cn"]
            .iter()
            .any(|d| host_matches(base_url, d))
        || is_kimi_family_model(model)
}

/// DeepSeek's Anthropic-compatible route (unsigned thinking must come back).
pub fn is_deepseek_anthropic(base_url: &str) -> bool {
    host_matches(base_url, "api.deepseek.com")
        && base_url
            .trim()
            .trim_end_matches('/')
            .to_ascii_lowercase()
            .contains("/anthropic")
}

fn lower_base(base_url: &str) -> String {
    normalized_base(base_url).to_ascii_lowercase()
}

/// MiniMax's `/anthropic` endpoints (they refuse the tool-streaming and 1M-context betas).
pub fn is_minimax(base_url: &str) -> bool {
    let b = lower_base(base_url);
    b.starts_with("https://api.minimax.io/anthropic")
        || b.starts_with("https://api.minimaxi.com/anthropic")
}

/// Endpoints that take the key as `Authorization: Bearer` (MiniMax, Azure).
pub fn wants_bearer(base_url: &str) -> bool {
    is_minimax(base_url) || lower_base(base_url).contains("azure.com")
}

/// Azure Foundry's Anthropic route, which needs an `api-version` query on every request.
pub fn is_azure_anthropic(base_url: &str) -> bool {
    let base = normalized_base(base_url);
    let host = format!(".{}.", host_of(base));
    let path = Url::parse(base)
        .map(|u| u.path.to_ascii_lowercase())
        .unwrap_or_default();
    (host.contains(".services.ai.azure.") || host.contains(".openai.azure."))
        && path.contains("/anthropic")
}

/// An Anthropic OAuth token (a Claude subscription's setup token, a JWT, a Claude Code token),
/// not a console API key.
pub fn is_oauth_token(key: &str) -> bool {
    if key.starts_with("sk-ant-api") {
        return false;
    }
    key.starts_with("sk-ant-") || key.starts_with("eyJ") || key.starts_with("cc-")
}

/// The `anthropic-beta` values every request to this endpoint carries.
pub fn common_betas(base_url: &str) -> Vec<&'static str> {
    let mut betas = vec!["interleaved-thinking-2025-05-14"];
    if !is_minimax(base_url) {
        betas.push("fine-grained-tool-streaming-2025-05-14");
        if lower_base(base_url).contains("azure.com") {
            betas.push("context-1m-2025-08-07");
        }
    }
    betas
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_themselves_and_their_subdomains_only() {
        assert!(host_matches(
            "https://openrouter.ai/api/v1",
            "openrouter.ai"
        ));
        assert!(host_matches(
            "https://eu.OpenRouter.ai/api",
            "openrouter.ai"
        ));
        assert!(!host_matches(
            "https://notopenrouter.ai/v1",
            "openrouter.ai"
        ));
        assert!(!host_matches(
            "https://openrouter.ai.evil.com",
            "openrouter.ai"
        ));
        assert!(!host_matches("not a url", "openrouter.ai"));
        assert_eq!(host_of("http://127.0.0.1:8080/v1"), "127.0.0.1");
    }

    #[test]
    fn endpoints_are_told_apart_as_hermes_does() {
        assert_eq!(
            normalized_base(" https://api.minimax.io/anthropic/v1/ "),
            "https://api.minimax.io/anthropic"
        );
        assert!(is_native("") && is_native("https://api.anthropic.com"));
        assert!(!is_native("http://127.0.0.1:9/v1"));
        assert!(is_kimi_coding("https://api.kimi.com/coding/"));
        assert!(is_kimi_family("https://api.moonshot.ai/anthropic", "x"));
        assert!(is_kimi_family("http://gw.local", "moonshotai/kimi-k2.5"));
        assert!(is_kimi_family("http://gw.local", "k2-thinking"));
        assert!(!is_kimi_family(
            "https://api.anthropic.com",
            "claude-opus-4-6"
        ));
        assert!(is_deepseek_anthropic("https://api.deepseek.com/anthropic"));
        assert!(!is_deepseek_anthropic("https://api.deepseek.com/v1"));
        assert!(wants_bearer("https://api.minimaxi.com/anthropic/v1"));
        assert!(wants_bearer("https://x.services.ai.azure.com/anthropic"));
        assert!(!wants_bearer("https://api.anthropic.com"));
        assert!(is_azure_anthropic(
            "https://res.services.ai.azure.com/anthropic/v1"
        ));
        assert!(!is_azure_anthropic(
            "https://res.services.ai.azure.com/openai"
        ));
    }

    #[test]
    fn oauth_tokens_are_recognised_by_their_shape() {
        assert!(is_oauth_token("sk-ant-oat01-abc"));
        assert!(is_oauth_token("eyJhbGciOi"));
        assert!(is_oauth_token("cc-123"));
        assert!(!is_oauth_token("sk-ant-api03-abc"));
        assert!(!is_oauth_token("sk-minimax"));
        assert!(!is_oauth_token(""));
    }

    #[test]
    fn betas_per_endpoint() {
        assert_eq!(
            common_betas("https://api.anthropic.com").join(","),
            "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
        );
        assert_eq!(
            common_betas("https://api.minimax.io/anthropic").join(","),
            "interleaved-thinking-2025-05-14"
        );
        assert_eq!(
            common_betas("https://r.services.ai.azure.com/anthropic").join(","),
            "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14,context-1m-2025-08-07"
        );
    }
}
