//! How many tokens a model's context window holds: config.yaml's `model.context_length` for the
//! configured model, else a per-model default.

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::SystemTime;

use super::select::ModelSection;
use crate::config::Config;

/// The offline model's window: small, so a context meter visibly moves in a demo.
pub const OFFLINE_WINDOW: u64 = 8192;
/// A model we know nothing about.
pub const GENERIC_WINDOW: u64 = 131_072;

/// The context window of `model` under `cfg`'s `$HERMES_HOME/config.yaml`. The file is parsed
/// again only when its size or mtime changed (one `stat` per call otherwise).
pub fn context_window(cfg: &Config, model: &str) -> u64 {
    let section = cached_section(cfg);
    window_for(&section, model)
}

/// The pure rule: `context_length` applies to the model config.yaml names as `model.default`
/// (or to every model when it names none); other models get [`default_window`].
pub fn window_for(section: &ModelSection, model: &str) -> u64 {
    match (section.context_length, section.default.as_deref()) {
        (Some(n), None) => n,
        (Some(n), Some(d)) if d == model => n,
        _ => default_window(model),
    }
}

/// Known windows by model name (a `provider/` prefix is ignored), else [`GENERIC_WINDOW`].
pub fn default_window(model: &str) -> u64 {
    let m = model.trim().to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    let table: &[(&str, u64)] = &[
        ("offline", OFFLINE_WINDOW),
        ("gpt-4.1", 1_047_576),
        ("gpt-4o", 128_000),
        ("gpt-4-turbo", 128_000),
        ("gpt-4-32k", 32_768),
        ("gpt-4", 8_192),
        ("gpt-3.5-turbo", 16_385),
        ("gpt-5", 400_000),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4", 200_000),
        ("claude", 200_000),
        ("gemini", 1_048_576),
        ("deepseek", 128_000),
    ];
    table
        .iter()
        .find(|(prefix, _)| m.starts_with(prefix))
        .map_or(GENERIC_WINDOW, |(_, n)| *n)
}

type Stamp = (PathBuf, Option<SystemTime>, u64);

thread_local! {
    /// The last parsed `model:` section and the file state it was read from.
    static CACHE: RefCell<Option<(Stamp, ModelSection)>> = const { RefCell::new(None) };
}

fn cached_section(cfg: &Config) -> ModelSection {
    let path = crate::config_file::path(&cfg.home);
    let meta = std::fs::metadata(&path).ok();
    let stamp: Stamp = (
        path,
        meta.as_ref().and_then(|m| m.modified().ok()),
        meta.as_ref().map_or(0, |m| m.len()),
    );
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((s, section)) = c.as_ref()
            && *s == stamp
        {
            return section.clone();
        }
        let section = super::select::load_model_section(cfg).unwrap_or_default();
        *c = Some((stamp, section.clone()));
        section
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_by_model_family() {
        assert_eq!(default_window("gpt-4o-mini"), 128_000);
        assert_eq!(default_window("openai/gpt-4o"), 128_000);
        assert_eq!(default_window("gpt-4"), 8_192);
        assert_eq!(default_window("offline"), OFFLINE_WINDOW);
        assert_eq!(default_window("llama3.1:8b"), GENERIC_WINDOW);
    }

    #[test]
    fn config_length_applies_to_the_configured_model() {
        let s = ModelSection {
            default: Some("qwen".into()),
            context_length: Some(32_000),
            ..Default::default()
        };
        assert_eq!(window_for(&s, "qwen"), 32_000);
        assert_eq!(window_for(&s, "gpt-4o"), 128_000);
        let any = ModelSection {
            context_length: Some(4096),
            ..Default::default()
        };
        assert_eq!(window_for(&any, "whatever"), 4096);
    }

    #[test]
    fn read_from_config_yaml_and_reread_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("tgw-ctx-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = Config {
            home: dir.clone(),
            ..Config::default()
        };
        assert_eq!(context_window(&cfg, "m"), GENERIC_WINDOW);
        std::fs::write(
            dir.join("config.yaml"),
            "model:\n  default: m\n  context_length: 1000\n",
        )
        .unwrap();
        assert_eq!(context_window(&cfg, "m"), 1000);
        std::fs::write(
            dir.join("config.yaml"),
            "model:\n  default: m\n  context_length: 20000\n",
        )
        .unwrap();
        assert_eq!(context_window(&cfg, "m"), 20000);
        let _ = std::fs::remove_dir_all(dir);
    }
}
