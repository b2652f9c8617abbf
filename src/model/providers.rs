//! Hermes' providers as data: each one's id, name, how it is logged into, default base URL,
//! key variables (in Hermes' order), base-URL variable and the API it speaks; and the names
//! Hermes also accepts for them. One table, read by `resolve.rs`.

/// How a provider's credentials are had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Login {
    /// An API key in one of `key_vars` (environment or `$HERMES_HOME/.env`).
    Key,
    /// Nous Portal: the agent key `hermes login` keeps in `auth.json`.
    Nous,
    /// OpenAI Codex: the ChatGPT tokens `hermes login` keeps in `auth.json`.
    Codex,
    /// Credentials this gateway cannot use; the text says what Hermes does instead.
    Elsewhere(&'static str),
}

/// Which API a provider's endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaks {
    /// This one (Hermes' `api_mode`), whatever the URL or model.
    Always(&'static str),
    /// What the base URL says (`api_mode_for_url`), else Chat Completions; `model.api_mode`
    /// may choose.
    ByUrl,
    /// OpenCode's gateways: by model family (`zen`: Zen's rules, else Go's).
    OpenCode { zen: bool },
}

#[derive(Debug)]
pub struct ProviderSpec {
    pub id: &'static str,
    pub name: &'static str,
    pub login: Login,
    pub base_url: &'static str,
    pub key_vars: &'static [&'static str],
    pub base_url_var: Option<&'static str>,
    pub speaks: Speaks,
    /// Whether Hermes' `auto` may choose it because one of its key variables is set.
    pub auto: bool,
}

const fn key(
    id: &'static str,
    name: &'static str,
    base_url: &'static str,
    key_vars: &'static [&'static str],
    base_url_var: Option<&'static str>,
) -> ProviderSpec {
    ProviderSpec {
        id,
        name,
        login: Login::Key,
        base_url,
        key_vars,
        base_url_var,
        speaks: Speaks::ByUrl,
        auto: true,
    }
}

const fn elsewhere(
    id: &'static str,
    name: &'static str,
    base_url: &'static str,
    why: &'static str,
) -> ProviderSpec {
    ProviderSpec {
        id,
        name,
        login: Login::Elsewhere(why),
        base_url,
        key_vars: &[],
        base_url_var: None,
        speaks: Speaks::ByUrl,
        auto: false,
    }
}

const MESSAGES: Speaks = Speaks::Always("anthropic_messages");
const RESPONSES: Speaks = Speaks::Always("codex_responses");

/// Hermes' `PROVIDER_REGISTRY` in its order (the order `auto` tries key variables in), then
/// `openrouter`, which Hermes resolves outside it.
pub static PROVIDERS: &[ProviderSpec] = &[
    ProviderSpec {
        login: Login::Nous,
        base_url_var: Some("NOUS_INFERENCE_BASE_URL"),
        auto: false,
        ..key(
            "nous",
            "Nous Portal",
            "https://inference-api.nousresearch.com/v1",
            &[],
            None,
        )
    },
    ProviderSpec {
        login: Login::Codex,
        base_url_var: Some("HERMES_CODEX_BASE_URL"),
        speaks: RESPONSES,
        auto: false,
        ..key(
            "openai-codex",
            "OpenAI Codex",
            "https://chatgpt.com/backend-api/codex",
            &[],
            None,
        )
    },
    // OPENAI_API_KEY alone means OpenRouter to `auto` (Hermes' order); this one is chosen by name.
    ProviderSpec {
        auto: false,
        ..key(
            "openai-api",
            "OpenAI API",
            "https://api.openai.com/v1",
            &["OPENAI_API_KEY"],
            Some("OPENAI_BASE_URL"),
        )
    },
    elsewhere(
        "xai-oauth",
        "xAI Grok OAuth (SuperGrok / Premium+)",
        "https://api.x.ai/v1",
        "its login is xAI's OAuth, which `hermes login` keeps; use provider xai with XAI_API_KEY here",
    ),
    elsewhere(
        "qwen-oauth",
        "Qwen OAuth",
        "https://portal.qwen.ai/v1",
        "its login is the Qwen CLI's OAuth; use provider alibaba with DASHSCOPE_API_KEY here",
    ),
    ProviderSpec {
        auto: false,
        ..key(
            "lmstudio",
            "LM Studio",
            "http://127.0.0.1:1234/v1",
            &["LM_API_KEY"],
            Some("LM_BASE_URL"),
        )
    },
    ProviderSpec {
        auto: false,
        ..key(
            "copilot",
            "GitHub Copilot",
            "https://api.githubcopilot.com",
            &["COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN"],
            Some("COPILOT_API_BASE_URL"),
        )
    },
    elsewhere(
        "copilot-acp",
        "GitHub Copilot ACP",
        "acp://copilot",
        "it runs the Copilot CLI as a subprocess agent, which this gateway does not",
    ),
    key(
        "gemini",
        "Google AI Studio",
        "https://generativelanguage.googleapis.com/v1beta",
        &["GOOGLE_API_KEY", "GEMINI_API_KEY"],
        Some("GEMINI_BASE_URL"),
    ),
    key(
        "zai",
        "Z.AI / GLM",
        "https://api.z.ai/api/paas/v4",
        &["GLM_API_KEY", "ZAI_API_KEY", "Z_AI_API_KEY"],
        Some("GLM_BASE_URL"),
    ),
    key(
        "kimi-coding",
        "Kimi / Moonshot",
        "https://api.moonshot.ai/v1",
        &["KIMI_API_KEY", "KIMI_CODING_API_KEY"],
        Some("KIMI_BASE_URL"),
    ),
    key(
        "kimi-coding-cn",
        "Kimi / Moonshot (China)",
        "https://api.moonshot.cn/v1",
        &["KIMI_CN_API_KEY"],
        None,
    ),
    key(
        "stepfun",
        "StepFun Step Plan",
        "https://api.stepfun.ai/step_plan/v1",
        &["STEPFUN_API_KEY"],
        Some("STEPFUN_BASE_URL"),
    ),
    key(
        "arcee",
        "Arcee AI",
        "https://api.arcee.ai/api/v1",
        &["ARCEEAI_API_KEY"],
        Some("ARCEE_BASE_URL"),
    ),
    key(
        "gmi",
        "GMI Cloud",
        "https://api.gmi-serving.com/v1",
        &["GMI_API_KEY"],
        Some("GMI_BASE_URL"),
    ),
    key(
        "minimax",
        "MiniMax",
        "https://api.minimax.io/anthropic",
        &["MINIMAX_API_KEY"],
        Some("MINIMAX_BASE_URL"),
    ),
    ProviderSpec {
        speaks: MESSAGES,
        ..elsewhere(
            "minimax-oauth",
            "MiniMax (OAuth · minimax.io)",
            "https://api.minimax.io/anthropic",
            "its login is MiniMax's OAuth, which `hermes login` keeps; use provider minimax with MINIMAX_API_KEY here",
        )
    },
    ProviderSpec {
        speaks: MESSAGES,
        ..key(
            "anthropic",
            "Anthropic",
            "https://api.anthropic.com",
            // Hermes' runtime order: an OAuth token first, the API key last.
            &[
                "ANTHROPIC_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
                "ANTHROPIC_API_KEY",
            ],
            Some("ANTHROPIC_BASE_URL"),
        )
    },
    key(
        "alibaba",
        "Qwen Cloud",
        "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
        &["DASHSCOPE_API_KEY"],
        Some("DASHSCOPE_BASE_URL"),
    ),
    key(
        "alibaba-coding-plan",
        "Alibaba Cloud (Coding Plan)",
        "https://coding-intl.dashscope.aliyuncs.com/v1",
        &["ALIBABA_CODING_PLAN_API_KEY", "DASHSCOPE_API_KEY"],
        Some("ALIBABA_CODING_PLAN_BASE_URL"),
    ),
    key(
        "minimax-cn",
        "MiniMax (China)",
        "https://api.minimaxi.com/anthropic",
        &["MINIMAX_CN_API_KEY"],
        Some("MINIMAX_CN_BASE_URL"),
    ),
    key(
        "deepseek",
        "DeepSeek",
        "https://api.deepseek.com/v1",
        &["DEEPSEEK_API_KEY"],
        Some("DEEPSEEK_BASE_URL"),
    ),
    ProviderSpec {
        speaks: RESPONSES,
        ..key(
            "xai",
            "xAI",
            "https://api.x.ai/v1",
            &["XAI_API_KEY"],
            Some("XAI_BASE_URL"),
        )
    },
    key(
        "nvidia",
        "NVIDIA NIM",
        "https://integrate.api.nvidia.com/v1",
        &["NVIDIA_API_KEY"],
        Some("NVIDIA_BASE_URL"),
    ),
    ProviderSpec {
        speaks: Speaks::OpenCode { zen: true },
        ..key(
            "opencode-zen",
            "OpenCode Zen",
            "https://opencode.ai/zen/v1",
            &["OPENCODE_ZEN_API_KEY"],
            Some("OPENCODE_ZEN_BASE_URL"),
        )
    },
    ProviderSpec {
        speaks: Speaks::OpenCode { zen: false },
        ..key(
            "opencode-go",
            "OpenCode Go",
            "https://opencode.ai/zen/go/v1",
            &["OPENCODE_GO_API_KEY"],
            Some("OPENCODE_GO_BASE_URL"),
        )
    },
    key(
        "kilocode",
        "Kilo Code",
        "https://api.kilo.ai/api/gateway",
        &["KILOCODE_API_KEY"],
        Some("KILOCODE_BASE_URL"),
    ),
    key(
        "huggingface",
        "Hugging Face",
        "https://router.huggingface.co/v1",
        &["HF_TOKEN"],
        Some("HF_BASE_URL"),
    ),
    key(
        "xiaomi",
        "Xiaomi MiMo",
        "https://api.xiaomimimo.com/v1",
        &["XIAOMI_API_KEY"],
        Some("XIAOMI_BASE_URL"),
    ),
    key(
        "tencent-tokenhub",
        "Tencent TokenHub",
        "https://tokenhub.tencentmaas.com/v1",
        &["TOKENHUB_API_KEY"],
        Some("TOKENHUB_BASE_URL"),
    ),
    key(
        "ollama-cloud",
        "Ollama Cloud",
        "https://ollama.com/v1",
        &["OLLAMA_API_KEY"],
        Some("OLLAMA_BASE_URL"),
    ),
    elsewhere(
        "bedrock",
        "AWS Bedrock",
        "https://bedrock-runtime.us-east-1.amazonaws.com",
        "it signs requests with the AWS SDK's credentials, which this gateway does not",
    ),
    // No default endpoint: the user's own, from AZURE_FOUNDRY_BASE_URL or model.base_url.
    key(
        "azure-foundry",
        "Azure Foundry",
        "",
        &["AZURE_FOUNDRY_API_KEY"],
        Some("AZURE_FOUNDRY_BASE_URL"),
    ),
    ProviderSpec {
        auto: false,
        ..key(
            "openrouter",
            "OpenRouter",
            "https://openrouter.ai/api/v1",
            &["OPENROUTER_API_KEY", "OPENAI_API_KEY"],
            Some("OPENROUTER_BASE_URL"),
        )
    },
];

/// Other names Hermes accepts, and what they name. `custom` is a user's own endpoint.
static ALIASES: &[(&str, &str)] = &[
    ("glm", "zai"),
    ("z-ai", "zai"),
    ("z.ai", "zai"),
    ("zhipu", "zai"),
    ("google", "gemini"),
    ("google-gemini", "gemini"),
    ("google-ai-studio", "gemini"),
    ("x-ai", "xai"),
    ("x.ai", "xai"),
    ("grok", "xai"),
    ("x-ai-oauth", "xai-oauth"),
    ("grok-oauth", "xai-oauth"),
    ("xai-grok-oauth", "xai-oauth"),
    ("kimi", "kimi-coding"),
    ("kimi-for-coding", "kimi-coding"),
    ("moonshot", "kimi-coding"),
    ("kimi-cn", "kimi-coding-cn"),
    ("moonshot-cn", "kimi-coding-cn"),
    ("step", "stepfun"),
    ("stepfun-coding-plan", "stepfun"),
    ("arcee-ai", "arcee"),
    ("arceeai", "arcee"),
    ("gmi-cloud", "gmi"),
    ("gmicloud", "gmi"),
    ("minimax-china", "minimax-cn"),
    ("minimax_cn", "minimax-cn"),
    ("minimax-portal", "minimax-oauth"),
    ("minimax-global", "minimax-oauth"),
    ("minimax_oauth", "minimax-oauth"),
    ("alibaba_coding", "alibaba-coding-plan"),
    ("alibaba-coding", "alibaba-coding-plan"),
    ("alibaba_coding_plan", "alibaba-coding-plan"),
    ("claude", "anthropic"),
    ("claude-code", "anthropic"),
    ("github", "copilot"),
    ("github-copilot", "copilot"),
    ("github-models", "copilot"),
    ("github-model", "copilot"),
    ("github-copilot-acp", "copilot-acp"),
    ("copilot-acp-agent", "copilot-acp"),
    ("opencode", "opencode-zen"),
    ("zen", "opencode-zen"),
    ("qwen-portal", "qwen-oauth"),
    ("qwen-cli", "qwen-oauth"),
    ("hf", "huggingface"),
    ("hugging-face", "huggingface"),
    ("huggingface-hub", "huggingface"),
    ("mimo", "xiaomi"),
    ("xiaomi-mimo", "xiaomi"),
    ("tencent", "tencent-tokenhub"),
    ("tokenhub", "tencent-tokenhub"),
    ("tencent-cloud", "tencent-tokenhub"),
    ("tencentmaas", "tencent-tokenhub"),
    ("aws", "bedrock"),
    ("aws-bedrock", "bedrock"),
    ("amazon-bedrock", "bedrock"),
    ("amazon", "bedrock"),
    ("go", "opencode-go"),
    ("opencode-go-sub", "opencode-go"),
    ("kilo", "kilocode"),
    ("kilo-code", "kilocode"),
    ("kilo-gateway", "kilocode"),
    ("lm-studio", "lmstudio"),
    ("lm_studio", "lmstudio"),
    ("ollama_cloud", "ollama-cloud"),
    // Local servers: a user's own endpoint.
    ("ollama", "custom"),
    ("vllm", "custom"),
    ("llamacpp", "custom"),
    ("llama.cpp", "custom"),
    ("llama-cpp", "custom"),
    // Not Hermes': this gateway's own earlier name for the OpenAI endpoint.
    ("openai", "openai-api"),
];

/// Hermes' cheap model for side tasks per provider (`auxiliary_client.py`'s
/// `_API_KEY_PROVIDER_AUX_MODELS_FALLBACK`, the providers of this table): what a title or vision
/// call asks for when `auxiliary.<task>` names the provider but no model.
static AUX_MODELS: &[(&str, &str)] = &[
    ("gemini", "gemini-3.6-flash"),
    ("zai", "glm-4.5-flash"),
    ("kimi-coding", "kimi-k2-turbo-preview"),
    ("stepfun", "step-3.5-flash"),
    ("kimi-coding-cn", "kimi-k2-turbo-preview"),
    ("gmi", "google/gemini-3.1-flash-lite-preview"),
    ("anthropic", "claude-haiku-4-5-20251001"),
    ("opencode-zen", "gemini-3-flash"),
    ("opencode-go", "glm-5"),
    ("kilocode", "google/gemini-3.6-flash"),
    ("ollama-cloud", "nemotron-3-nano:30b"),
    ("tencent-tokenhub", "hy4-preview"),
];

/// Hermes' vision models for providers whose chat models see no images
/// (`_PROVIDER_VISION_MODELS`): asked first for `auxiliary.vision`.
static VISION_MODELS: &[(&str, &str)] = &[("xiaomi", "mimo-v2.5"), ("zai", "glm-5v-turbo")];

/// The model Hermes' auxiliary client asks provider `id` for, for `task`, when none is named.
pub fn aux_model(id: &str, task: &str) -> Option<&'static str> {
    let vision = VISION_MODELS.iter().filter(|_| task == "vision");
    vision
        .chain(AUX_MODELS)
        .find(|(p, _)| *p == id)
        .map(|(_, model)| *model)
}

/// The id a name stands for (trimmed, lower-cased, aliases followed); unknown names as given.
pub fn canonical(name: &str) -> String {
    let name = name.trim().to_ascii_lowercase();
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, id)| id.to_string())
}

/// The table's row for an id (not an alias).
pub fn spec(id: &str) -> Option<&'static ProviderSpec> {
    PROVIDERS.iter().find(|p| p.id == id)
}

/// Hermes' `api_mode` for a base URL, when the URL says (`_detect_api_mode_for_url`'s rules).
pub fn api_mode_for_url(base_url: &str) -> Option<&'static str> {
    let host = host_of(base_url);
    let lower = base_url.trim().to_ascii_lowercase();
    let path = lower.trim_end_matches('/');
    match host.as_str() {
        "api.x.ai" | "api.openai.com" => Some("codex_responses"),
        "api.anthropic.com" => Some("anthropic_messages"),
        _ if path.ends_with("/anthropic") || path.ends_with("/anthropic/v1") => {
            Some("anthropic_messages")
        }
        "api.kimi.com" if lower.contains("/coding") => Some("anthropic_messages"),
        _ => None,
    }
}

/// OpenCode's API for a model: Zen serves Claude and Qwen on Messages and GPT on Responses,
/// Go MiniMax and Qwen on Messages; the rest Chat Completions.
pub fn api_mode_for_opencode(zen: bool, model: &str) -> &'static str {
    let model = model.to_ascii_lowercase();
    let model = model.rsplit('/').next().unwrap_or(&model);
    match (zen, model) {
        (true, m) if m.starts_with("claude-") || m.starts_with("qwen") => "anthropic_messages",
        (true, m) if m.starts_with("gpt-") => "codex_responses",
        (false, m) if m.starts_with("minimax-") || m.starts_with("qwen") => "anthropic_messages",
        _ => "chat_completions",
    }
}

/// GitHub Copilot serves GPT-5 and later (but the mini) on Responses.
pub fn api_mode_for_copilot(model: &str) -> &'static str {
    let model = model.to_ascii_lowercase();
    let major = model
        .strip_prefix("gpt-")
        .map(|r| {
            r.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|d| d.parse::<u32>().ok());
    match major {
        Some(n) if n >= 5 && !model.starts_with("gpt-5-mini") => "codex_responses",
        _ => "chat_completions",
    }
}

/// The lower-cased host of a URL (or of a bare host).
pub fn host_of(url: &str) -> String {
    let rest = url.trim();
    let rest = rest.split_once("://").map_or(rest, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `url`'s host is `domain` or below it (`api.openrouter.ai` is below `openrouter.ai`).
pub fn host_within(url: &str, domain: &str) -> bool {
    let host = host_of(url);
    host == domain || host.ends_with(&format!(".{domain}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auxiliary_models_are_for_providers_of_the_table() {
        for (id, _) in AUX_MODELS.iter().chain(VISION_MODELS) {
            assert!(spec(id).is_some(), "{id}");
        }
        assert_eq!(aux_model("zai", "title_generation"), Some("glm-4.5-flash"));
        assert_eq!(aux_model("zai", "vision"), Some("glm-5v-turbo"));
        assert_eq!(aux_model("xiaomi", "title_generation"), None);
        assert_eq!(aux_model("deepseek", "vision"), None);
    }

    #[test]
    fn every_alias_names_a_provider_of_the_table_or_custom() {
        for (alias, id) in ALIASES {
            assert!(*id == "custom" || spec(id).is_some(), "{alias} → {id}");
            assert!(spec(alias).is_none(), "{alias} shadows an id");
        }
        let mut ids: Vec<_> = PROVIDERS.iter().map(|p| p.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), PROVIDERS.len(), "an id twice");
        assert_eq!(canonical(" Claude "), "anthropic");
        assert_eq!(canonical("ollama"), "custom");
        assert_eq!(canonical("deepseek"), "deepseek");
    }

    #[test]
    fn the_url_says_the_api() {
        for (url, mode) in [
            ("https://api.openai.com/v1", Some("codex_responses")),
            ("https://api.x.ai/v1/", Some("codex_responses")),
            ("https://api.anthropic.com", Some("anthropic_messages")),
            (
                "https://api.minimax.io/anthropic",
                Some("anthropic_messages"),
            ),
            (
                "http://127.0.0.1:8/x/Anthropic/v1/",
                Some("anthropic_messages"),
            ),
            ("https://api.kimi.com/coding", Some("anthropic_messages")),
            ("https://api.kimi.com/v1", None),
            ("https://openrouter.ai/api/v1", None),
            ("https://evil.api.openai.com.example/v1", None),
        ] {
            assert_eq!(api_mode_for_url(url), mode, "{url}");
        }
    }

    #[test]
    fn opencode_chooses_by_model() {
        assert_eq!(
            api_mode_for_opencode(true, "claude-sonnet-4"),
            "anthropic_messages"
        );
        assert_eq!(
            api_mode_for_opencode(true, "opencode/gpt-5"),
            "codex_responses"
        );
        assert_eq!(api_mode_for_opencode(false, "gpt-5"), "chat_completions");
        assert_eq!(
            api_mode_for_opencode(false, "MiniMax-M2"),
            "anthropic_messages"
        );
        assert_eq!(api_mode_for_opencode(false, "glm-4.6"), "chat_completions");
    }

    #[test]
    fn hosts() {
        assert_eq!(
            host_of("https://u:p@API.Example.com:8443/v1"),
            "api.example.com"
        );
        assert_eq!(host_of("http://[::1]:9/v1"), "::1");
        assert_eq!(host_of("localhost:1234"), "localhost");
        assert!(host_within("https://openrouter.ai/api/v1", "openrouter.ai"));
        assert!(host_within(
            "https://eu.openrouter.ai/api/v1",
            "openrouter.ai"
        ));
        assert!(!host_within("https://notopenrouter.ai/", "openrouter.ai"));
    }
}
