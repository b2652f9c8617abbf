//! What a model call cost, by Hermes' rules (`agent/usage_pricing.py`): the route a provider
//! and model bill through, Hermes' price table, and how sure the figure is (`cost_status`).
//! Pure: no network, no clock. Prices are kept as integers (millionths of a dollar per
//! million tokens) so a call's cost is exact until it becomes the session's float.

use serde::{Deserialize, Serialize};

use super::TokenUsage;
use super::providers::host_within;

/// How sure a cost is: Hermes' `cost_status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostStatus {
    /// The provider said what the call cost.
    Actual,
    /// Computed from the price table.
    Estimated,
    /// Paid by a subscription (`openai-codex`).
    Included,
    #[default]
    Unknown,
}

impl CostStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CostStatus::Actual => "actual",
            CostStatus::Estimated => "estimated",
            CostStatus::Included => "included",
            CostStatus::Unknown => "unknown",
        }
    }

    /// A stored `cost_status` (anything else, such as an older gateway's `partial`, is unknown).
    pub fn parse(s: &str) -> CostStatus {
        match s {
            "actual" => CostStatus::Actual,
            "estimated" => CostStatus::Estimated,
            "included" => CostStatus::Included,
            _ => CostStatus::Unknown,
        }
    }
}

/// Where a cost came from: Hermes' `cost_source` (every value it declares or writes, so a
/// resumed Hermes row keeps its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    ProviderCostApi,
    ProviderGenerationApi,
    ProviderModelsApi,
    OfficialDocsSnapshot,
    UserOverride,
    CustomContract,
    Subagent,
    #[default]
    None,
}

impl CostSource {
    const ALL: [CostSource; 8] = [
        CostSource::ProviderCostApi,
        CostSource::ProviderGenerationApi,
        CostSource::ProviderModelsApi,
        CostSource::OfficialDocsSnapshot,
        CostSource::UserOverride,
        CostSource::CustomContract,
        CostSource::Subagent,
        CostSource::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CostSource::ProviderCostApi => "provider_cost_api",
            CostSource::ProviderGenerationApi => "provider_generation_api",
            CostSource::ProviderModelsApi => "provider_models_api",
            CostSource::OfficialDocsSnapshot => "official_docs_snapshot",
            CostSource::UserOverride => "user_override",
            CostSource::CustomContract => "custom_contract",
            CostSource::Subagent => "subagent",
            CostSource::None => "none",
        }
    }

    /// A stored `cost_source` (an unknown word is `none`).
    pub fn parse(s: &str) -> CostSource {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .unwrap_or_default()
    }
}

/// What one call cost and how sure that is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// US dollars (`None`: unknown).
    pub usd: Option<f64>,
    pub status: CostStatus,
    pub source: CostSource,
    /// The price table's version the estimate came from (Hermes' `pricing_version`).
    pub pricing_version: Option<&'static str>,
}

impl Cost {
    const UNKNOWN: Cost = Cost {
        usd: None,
        status: CostStatus::Unknown,
        source: CostSource::None,
        pricing_version: None,
    };
}

/// Hermes' `pricing_version` of its subscription routes.
pub const INCLUDED_ROUTE: &str = "included-route";

/// The price of one call made through `provider` (Hermes' id: `anthropic`, `openai-api`,
/// `openrouter`, `custom:lab`…) at `base_url` to `model`, which used `usage`.
///
/// In order: a subscription route is `included` ($0); a price the provider reported (OpenRouter's
/// `usage.cost`) is `actual`; one the table gives is `estimated`, unless the call used a kind of
/// token the table has no price for; anything else is `unknown`.
pub fn price(provider: &str, base_url: &str, model: &str, usage: &TokenUsage) -> Cost {
    let route = route(provider, base_url, model);
    if route.billing == Billing::Subscription {
        return Cost {
            usd: Some(0.0),
            status: CostStatus::Included,
            source: CostSource::None,
            pricing_version: Some(INCLUDED_ROUTE),
        };
    }
    if let Some(usd) = usage.cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
        return Cost {
            usd: Some(usd),
            status: CostStatus::Actual,
            source: CostSource::ProviderCostApi,
            pricing_version: None,
        };
    }
    match route.entry() {
        Some(entry) => estimate(entry, usage),
        None => Cost::UNKNOWN,
    }
}

/// `usage` priced by `entry`: unknown as a whole when a kind of token the call used has no
/// price (Hermes checks input, output, cache read, cache write, in that order).
fn estimate(entry: &Entry, usage: &TokenUsage) -> Cost {
    // `input` counts every input token; the table prices the uncached ones apart.
    let uncached = usage
        .input
        .saturating_sub(usage.cache_read)
        .saturating_sub(usage.cache_write);
    let buckets = [
        (uncached, entry.input),
        (usage.output, entry.output),
        (usage.cache_read, entry.cache_read),
        (usage.cache_write, entry.cache_write),
    ];
    let mut pico_usd: u128 = 0;
    for (tokens, rate) in buckets {
        match rate {
            Some(r) => pico_usd += u128::from(tokens) * u128::from(r.0),
            None if tokens > 0 => {
                return Cost {
                    source: CostSource::OfficialDocsSnapshot,
                    ..Cost::UNKNOWN
                };
            }
            None => {}
        }
    }
    Cost {
        usd: Some(pico_usd as f64 / 1e12),
        status: CostStatus::Estimated,
        source: CostSource::OfficialDocsSnapshot,
        pricing_version: Some(entry.version),
    }
}

/// How Hermes bills a route (its `billing_mode`, as far as it changes the price).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Billing {
    /// `subscription_included`.
    Subscription,
    /// Priced from the provider's `/models` catalogue (OpenRouter, Nous), which we do not fetch.
    ModelsApi,
    /// The price table.
    Table,
}

/// The (provider, model) pair Hermes looks prices up by.
#[derive(Debug, PartialEq, Eq)]
struct PriceKey {
    provider: String,
    model: String,
    billing: Billing,
}

/// Hermes' `resolve_billing_route`.
fn route(provider: &str, base_url: &str, model: &str) -> PriceKey {
    let mut provider = provider.trim().to_ascii_lowercase();
    let mut model = model.trim();
    // A bare model named `vendor/model` says its vendor when the provider does not.
    if provider.is_empty()
        && let Some((vendor, bare)) = model.split_once('/')
        && matches!(vendor, "anthropic" | "openai" | "google")
    {
        provider = vendor.to_string();
        model = bare;
    }
    let last_segment = model.rsplit('/').next().unwrap_or(model);
    let to = |provider: &str, model: &str, billing| PriceKey {
        provider: provider.to_string(),
        model: model.to_string(),
        billing,
    };
    let base_host_within = |domain| !base_url.is_empty() && host_within(base_url, domain);
    if provider == "openai-codex" {
        return to(&provider, model, Billing::Subscription);
    }
    if provider == "openrouter" || base_host_within("openrouter.ai") {
        return to("openrouter", model, Billing::ModelsApi);
    }
    if provider == "nous" || base_host_within("inference-api.nousresearch.com") {
        return to("nous", model, Billing::ModelsApi);
    }
    match provider.as_str() {
        "anthropic" => return to("anthropic", last_segment, Billing::Table),
        // `openai-api` is direct api.openai.com, billed as `openai`.
        "openai" | "openai-api" => return to("openai", last_segment, Billing::Table),
        "minimax" | "minimax-cn" => return to(&provider, last_segment, Billing::Table),
        _ => {}
    }
    // Hermes' quirk: Vertex routes to `gemini` while the table says `google`, so it never
    // matches.
    if provider == "vertex" || base_host_within("aiplatform.googleapis.com") {
        return to("gemini", last_segment, Billing::Table);
    }
    if matches!(provider.as_str(), "custom" | "local")
        || base_url.to_ascii_lowercase().contains("localhost")
    {
        let provider = if provider.is_empty() {
            "custom"
        } else {
            &provider
        };
        return to(provider, model, Billing::Table);
    }
    let provider = if provider.is_empty() {
        "unknown"
    } else {
        &provider
    };
    to(provider, last_segment, Billing::Table)
}

impl PriceKey {
    /// Hermes' `_lookup_official_docs_pricing`: the exact (provider, lower-cased model), then
    /// Anthropic's and Bedrock's spelling variants. No prefix matching, no date stripping.
    fn entry(&self) -> Option<&'static Entry> {
        if self.billing != Billing::Table {
            return None;
        }
        let model = self.model.to_ascii_lowercase();
        let find = |model: &str| {
            TABLE
                .iter()
                .find(|e| e.provider == self.provider && e.model == model)
        };
        find(&model).or_else(|| match self.provider.as_str() {
            "anthropic" => find(&dots_to_dashes(
                model.strip_prefix("anthropic/").unwrap_or(&model),
            )),
            "bedrock" => {
                let bare = ["us.", "global.", "eu.", "ap.", "jp."]
                    .iter()
                    .find_map(|p| model.strip_prefix(p))
                    .unwrap_or(&model);
                find(&dots_to_dashes(bare))
            }
            _ => None,
        })
    }
}

/// `4.7` → `4-7`: every dot between two digits becomes a dash (Hermes' `(\d+)\.(\d+)`).
fn dots_to_dashes(model: &str) -> String {
    let b = model.as_bytes();
    model
        .char_indices()
        .map(|(i, c)| {
            let between_digits = c == '.'
                && i > 0
                && b[i - 1].is_ascii_digit()
                && b.get(i + 1).is_some_and(u8::is_ascii_digit);
            if between_digits { '-' } else { c }
        })
        .collect()
}

/// A price in millionths of a US dollar per million tokens (= picodollars per token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rate(u64);

/// One row of the price table: USD per million tokens of each kind (`None`: no price, which is
/// not zero: a call that uses that kind is unknown).
#[derive(Debug)]
struct Entry {
    provider: &'static str,
    model: &'static str,
    input: Option<Rate>,
    output: Option<Rate>,
    cache_read: Option<Rate>,
    cache_write: Option<Rate>,
    version: &'static str,
}

/// `"3.125"` (dollars per million tokens) as a [`Rate`]; evaluated at compile time, so a
/// malformed figure in the table fails the build.
const fn usd(s: &str) -> Option<Rate> {
    let b = s.as_bytes();
    let (mut whole, mut frac, mut frac_digits, mut seen_dot, mut i) = (0u64, 0u64, 0u32, false, 0);
    while i < b.len() {
        match b[i] {
            b'.' if !seen_dot => seen_dot = true,
            d @ b'0'..=b'9' if !seen_dot => whole = whole * 10 + (d - b'0') as u64,
            d @ b'0'..=b'9' if frac_digits < 6 => {
                frac = frac * 10 + (d - b'0') as u64;
                frac_digits += 1;
            }
            _ => panic!("a price is dollars with at most six decimals"),
        }
        i += 1;
    }
    while frac_digits < 6 {
        frac *= 10;
        frac_digits += 1;
    }
    Some(Rate(whole * 1_000_000 + frac))
}

const NONE: Option<Rate> = None;

const OPENAI_56: &str = "openai-gpt-5.6-2026-07";
const OPENAI: &str = "openai-pricing-2026-03-16";
const ANTHROPIC: &str = "anthropic-pricing-2026-05";
const DEEPSEEK: &str = "deepseek-pricing-2026-03-16";
const DEEPSEEK_V4: &str = "deepseek-pricing-2026-05-12";
const GOOGLE: &str = "google-pricing-2026-03-16";
const BEDROCK: &str = "bedrock-pricing-2026-04";
const MINIMAX: &str = "minimax-pricing-2026-04";

/// The `pricing_version` a stored or journalled string names, if it is one of ours.
pub fn known_version(s: &str) -> Option<&'static str> {
    TABLE
        .iter()
        .map(|e| e.version)
        .chain([INCLUDED_ROUTE])
        .find(|v| *v == s)
}

const fn row(
    provider: &'static str,
    model: &'static str,
    [input, output, cache_read, cache_write]: [Option<Rate>; 4],
    version: &'static str,
) -> Entry {
    Entry {
        provider,
        model,
        input,
        output,
        cache_read,
        cache_write,
        version,
    }
}

/// Hermes' official-docs price table (`_OFFICIAL_DOCS_PRICING`, v0.18.2): input, output, cache
/// read, cache write in USD per million tokens. Its figures as they are, quirks included
/// (Bedrock's Opus 4.6 and Haiku 4.5 differ from Anthropic's own).
#[rustfmt::skip]
static TABLE: &[Entry] = &[
    row("openai", "gpt-5.6-sol", [usd("5.00"), usd("30.00"), usd("0.50"), usd("6.25")], OPENAI_56),
    row("openai", "gpt-5.6-terra", [usd("2.50"), usd("15.00"), usd("0.25"), usd("3.125")], OPENAI_56),
    row("openai", "gpt-5.6-luna", [usd("1.00"), usd("6.00"), usd("0.10"), usd("1.25")], OPENAI_56),
    // The `-pro` variants bill at their base tier's rates (Hermes aliases the entries).
    row("openai", "gpt-5.6-sol-pro", [usd("5.00"), usd("30.00"), usd("0.50"), usd("6.25")], OPENAI_56),
    row("openai", "gpt-5.6-terra-pro", [usd("2.50"), usd("15.00"), usd("0.25"), usd("3.125")], OPENAI_56),
    row("openai", "gpt-5.6-luna-pro", [usd("1.00"), usd("6.00"), usd("0.10"), usd("1.25")], OPENAI_56),
    row("anthropic", "claude-opus-4-8", [usd("5.00"), usd("25.00"), usd("0.50"), usd("6.25")], ANTHROPIC),
    row("anthropic", "claude-opus-4-8-fast", [usd("10.00"), usd("50.00"), usd("1.00"), usd("12.50")], ANTHROPIC),
    row("anthropic", "claude-opus-4-7", [usd("5.00"), usd("25.00"), usd("0.50"), usd("6.25")], ANTHROPIC),
    row("anthropic", "claude-opus-4-7-20250507", [usd("5.00"), usd("25.00"), usd("0.50"), usd("6.25")], ANTHROPIC),
    row("anthropic", "claude-opus-4-6", [usd("5.00"), usd("25.00"), usd("0.50"), usd("6.25")], ANTHROPIC),
    row("anthropic", "claude-opus-4-6-20250414", [usd("5.00"), usd("25.00"), usd("0.50"), usd("6.25")], ANTHROPIC),
    row("anthropic", "claude-sonnet-4-6", [usd("3.00"), usd("15.00"), usd("0.30"), usd("3.75")], ANTHROPIC),
    row("anthropic", "claude-sonnet-4-6-20250414", [usd("3.00"), usd("15.00"), usd("0.30"), usd("3.75")], ANTHROPIC),
    row("anthropic", "claude-opus-4-5", [usd("5.00"), usd("25.00"), usd("0.50"), usd("6.25")], ANTHROPIC),
    row("anthropic", "claude-sonnet-4-5", [usd("3.00"), usd("15.00"), usd("0.30"), usd("3.75")], ANTHROPIC),
    row("anthropic", "claude-haiku-4-5", [usd("1.00"), usd("5.00"), usd("0.10"), usd("1.25")], ANTHROPIC),
    row("anthropic", "claude-opus-4-20250514", [usd("15.00"), usd("75.00"), usd("1.50"), usd("18.75")], ANTHROPIC),
    row("anthropic", "claude-sonnet-4-20250514", [usd("3.00"), usd("15.00"), usd("0.30"), usd("3.75")], ANTHROPIC),
    row("openai", "gpt-4o", [usd("2.50"), usd("10.00"), usd("1.25"), NONE], OPENAI),
    row("openai", "gpt-4o-mini", [usd("0.15"), usd("0.60"), usd("0.075"), NONE], OPENAI),
    row("openai", "gpt-4.1", [usd("2.00"), usd("8.00"), usd("0.50"), NONE], OPENAI),
    row("openai", "gpt-4.1-mini", [usd("0.40"), usd("1.60"), usd("0.10"), NONE], OPENAI),
    row("openai", "gpt-4.1-nano", [usd("0.10"), usd("0.40"), usd("0.025"), NONE], OPENAI),
    row("openai", "o3", [usd("10.00"), usd("40.00"), usd("2.50"), NONE], OPENAI),
    row("openai", "o3-mini", [usd("1.10"), usd("4.40"), usd("0.55"), NONE], OPENAI),
    row("anthropic", "claude-3-5-sonnet-20241022", [usd("3.00"), usd("15.00"), usd("0.30"), usd("3.75")], ANTHROPIC),
    row("anthropic", "claude-3-5-haiku-20241022", [usd("0.80"), usd("4.00"), usd("0.08"), usd("1.00")], ANTHROPIC),
    row("anthropic", "claude-3-opus-20240229", [usd("15.00"), usd("75.00"), usd("1.50"), usd("18.75")], ANTHROPIC),
    row("anthropic", "claude-3-haiku-20240307", [usd("0.25"), usd("1.25"), usd("0.03"), usd("0.30")], ANTHROPIC),
    row("deepseek", "deepseek-chat", [usd("0.14"), usd("0.28"), NONE, NONE], DEEPSEEK),
    row("deepseek", "deepseek-reasoner", [usd("0.55"), usd("2.19"), NONE, NONE], DEEPSEEK),
    row("deepseek", "deepseek-v4-pro", [usd("1.74"), usd("3.48"), usd("0.0145"), NONE], DEEPSEEK_V4),
    row("google", "gemini-2.5-pro", [usd("1.25"), usd("10.00"), NONE, NONE], GOOGLE),
    row("google", "gemini-2.5-flash", [usd("0.15"), usd("0.60"), NONE, NONE], GOOGLE),
    row("google", "gemini-2.0-flash", [usd("0.10"), usd("0.40"), NONE, NONE], GOOGLE),
    row("bedrock", "anthropic.claude-opus-4-6", [usd("15.00"), usd("75.00"), usd("1.50"), usd("18.75")], BEDROCK),
    row("bedrock", "anthropic.claude-sonnet-4-6", [usd("3.00"), usd("15.00"), usd("0.30"), usd("3.75")], BEDROCK),
    row("bedrock", "anthropic.claude-sonnet-4-5", [usd("3.00"), usd("15.00"), usd("0.30"), usd("3.75")], BEDROCK),
    row("bedrock", "anthropic.claude-haiku-4-5", [usd("0.80"), usd("4.00"), usd("0.08"), usd("1.00")], BEDROCK),
    row("bedrock", "amazon.nova-pro", [usd("0.80"), usd("3.20"), NONE, NONE], BEDROCK),
    row("bedrock", "amazon.nova-lite", [usd("0.06"), usd("0.24"), NONE, NONE], BEDROCK),
    row("bedrock", "amazon.nova-micro", [usd("0.035"), usd("0.14"), NONE, NONE], BEDROCK),
    row("minimax", "minimax-m2.7", [usd("0.30"), usd("1.20"), NONE, NONE], MINIMAX),
    row("minimax-cn", "minimax-m2.7", [usd("0.30"), usd("1.20"), NONE, NONE], MINIMAX),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> TokenUsage {
        TokenUsage {
            input,
            output,
            cache_read,
            cache_write,
            ..Default::default()
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[test]
    fn claude_with_cache_reads_and_writes_is_estimated_from_the_table() {
        // 1,000 uncached, 50,000 read, 2,000 written, 500 out on Sonnet 4.6 ($3/$15/$0.30/$3.75):
        // 0.003 + 0.0075 + 0.015 + 0.0075 = 0.033.
        let c = price(
            "anthropic",
            "https://api.anthropic.com",
            "claude-sonnet-4-6",
            &usage(53_000, 500, 50_000, 2_000),
        );
        assert!(close(c.usd, 0.033), "{c:?}");
        assert_eq!(
            (c.status, c.source, c.pricing_version),
            (
                CostStatus::Estimated,
                CostSource::OfficialDocsSnapshot,
                Some(ANTHROPIC)
            )
        );
        // Dotted versions and a vendor prefix name the same model.
        let dotted = price(
            "anthropic",
            "",
            "anthropic/claude-sonnet-4.6",
            &usage(53_000, 500, 50_000, 2_000),
        );
        assert!(close(dotted.usd, 0.033), "{dotted:?}");
    }

    #[test]
    fn an_openai_model_with_cached_tokens_prices_them_apart() {
        // 10,000 prompt tokens of which 8,000 cached, 200 out, on gpt-4.1 ($2/$8/$0.50):
        // 2,000 × 2 + 8,000 × 0.5 + 200 × 8 per million = 0.004 + 0.004 + 0.0016 = 0.0096.
        let c = price(
            "openai-api",
            "https://api.openai.com/v1",
            "gpt-4.1",
            &usage(10_000, 200, 8_000, 0),
        );
        assert!(close(c.usd, 0.0096), "{c:?}");
        assert_eq!(c.status, CostStatus::Estimated);
        assert_eq!(c.pricing_version, Some(OPENAI));
        // Sub-cent prices stay exact: 1 token of gpt-4.1-nano's cache is $0.025 per million.
        let tiny = price("openai", "", "gpt-4.1-nano", &usage(1, 0, 1, 0));
        assert_eq!(tiny.usd, Some(0.025e-6));
    }

    #[test]
    fn an_unknown_model_has_no_price() {
        for (provider, model) in [
            ("anthropic", "claude-sonnet-4-5-20250929"), // no date stripping
            ("openai-api", "gpt-4o-2024-08-06"),
            ("openai-api", "gpt-5.5"),
            ("custom:lab", "claude-sonnet-4-6"), // a custom endpoint is not Anthropic
            ("gemini", "gemini-2.5-pro"),        // the table says `google`
            ("offline", "offline"),
        ] {
            let c = price(provider, "http://10.0.0.2/v1", model, &usage(100, 10, 0, 0));
            assert_eq!(c, Cost::UNKNOWN, "{provider} {model}");
        }
    }

    #[test]
    fn a_kind_of_token_the_table_has_no_price_for_makes_the_call_unknown() {
        // DeepSeek chat has no cache price: priced without cache hits, unknown with them.
        let cold = price("deepseek", "", "deepseek-chat", &usage(1_000_000, 0, 0, 0));
        assert!(close(cold.usd, 0.14), "{cold:?}");
        let warm = price("deepseek", "", "deepseek-chat", &usage(1_000_000, 0, 10, 0));
        assert_eq!(
            (warm.usd, warm.status, warm.source),
            (None, CostStatus::Unknown, CostSource::OfficialDocsSnapshot)
        );
        // GPT-4o has no cache-write price.
        let written = price("openai", "", "gpt-4o", &usage(100, 1, 0, 50));
        assert_eq!(written.status, CostStatus::Unknown);
    }

    #[test]
    fn a_price_the_provider_reports_is_actual() {
        let mut u = usage(1_000, 10, 0, 0);
        u.cost_usd = Some(0.0042);
        let c = price(
            "openrouter",
            "https://openrouter.ai/api/v1",
            "anthropic/claude-sonnet-4.6",
            &u,
        );
        assert_eq!(
            c,
            Cost {
                usd: Some(0.0042),
                status: CostStatus::Actual,
                source: CostSource::ProviderCostApi,
                pricing_version: None,
            }
        );
        // It wins over the table too.
        assert_eq!(
            price("anthropic", "", "claude-haiku-4-5", &u).usd,
            Some(0.0042)
        );
        // OpenRouter without a reported cost: Hermes prices it from OpenRouter's catalogue,
        // which is not fetched here, never from the table.
        u.cost_usd = None;
        assert_eq!(
            price("openrouter", "", "anthropic/claude-sonnet-4.6", &u),
            Cost::UNKNOWN
        );
        assert_eq!(
            price(
                "custom",
                "https://openrouter.ai/api/v1",
                "openai/gpt-4.1",
                &u
            ),
            Cost::UNKNOWN,
            "an OpenRouter URL is OpenRouter whatever the provider is called"
        );
        u.cost_usd = Some(f64::NAN);
        assert_eq!(price("openrouter", "", "x", &u).status, CostStatus::Unknown);
    }

    #[test]
    fn a_subscription_is_included() {
        let mut u = usage(5_000, 100, 0, 0);
        u.cost_usd = Some(1.0);
        let c = price(
            "openai-codex",
            "https://chatgpt.com/backend-api/codex",
            "gpt-5.4",
            &u,
        );
        assert_eq!(
            (c.usd, c.status, c.source, c.pricing_version),
            (
                Some(0.0),
                CostStatus::Included,
                CostSource::None,
                Some(INCLUDED_ROUTE)
            )
        );
    }

    #[test]
    fn routes_follow_hermes() {
        let r = |p, b, m| {
            let r = route(p, b, m);
            (r.provider, r.model)
        };
        let pair = |p: &str, m: &str| (p.to_string(), m.to_string());
        assert_eq!(
            r("", "", "google/gemini-2.5-pro"),
            pair("google", "gemini-2.5-pro")
        );
        assert_eq!(
            r(" OpenAI-API ", "", "openai/gpt-4o"),
            pair("openai", "gpt-4o")
        );
        assert_eq!(
            r("vertex", "", "google/gemini-2.5-pro"),
            pair("gemini", "gemini-2.5-pro")
        );
        assert_eq!(r("custom", "", "org/model"), pair("custom", "org/model"));
        assert_eq!(
            r("", "http://localhost:8080/v1", "a/b"),
            pair("custom", "a/b")
        );
        assert_eq!(
            r("bedrock", "", "us.anthropic.claude-sonnet-4.6"),
            pair("bedrock", "us.anthropic.claude-sonnet-4.6")
        );
        let bedrock = price(
            "bedrock",
            "",
            "us.anthropic.claude-sonnet-4.6",
            &usage(1_000_000, 0, 0, 0),
        );
        assert!(close(bedrock.usd, 3.0), "{bedrock:?}");
        assert_eq!(dots_to_dashes("claude-3.5.1-x.y"), "claude-3-5-1-x.y");
    }

    #[test]
    fn figures_parse_exactly_and_versions_are_known() {
        assert_eq!(usd("3.125"), Some(Rate(3_125_000)));
        assert_eq!(usd("0.0145"), Some(Rate(14_500)));
        assert_eq!(usd("15"), Some(Rate(15_000_000)));
        assert_eq!(known_version(ANTHROPIC), Some(ANTHROPIC));
        assert_eq!(known_version(INCLUDED_ROUTE), Some(INCLUDED_ROUTE));
        assert_eq!(known_version("openrouter-models-api"), None);
        assert_eq!(CostStatus::parse("partial"), CostStatus::Unknown);
        for s in CostSource::ALL {
            assert_eq!(CostSource::parse(s.as_str()), s);
        }
    }
}
