//! Which registered tools the model is offered. `config.yaml` chooses as Hermes does:
//! `platform_toolsets.cli` (else `toolsets`) lists toolset or tool names (`hermes-cli`,
//! `all` or `*` for everything; absent: everything). `/tools disable|enable NAME`
//! (`tools.configure`) turns toolsets or tools off and on again from the next model call; the
//! choice is kept in `$HERMES_HOME/tui_gateway_tools.json` (config.yaml is left as written).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Names that stand for every tool.
const ALL: [&str; 3] = ["hermes-cli", "all", "*"];
const FILE_MAX: u64 = 64 * 1024;

#[derive(Debug, Default, Clone)]
pub struct Offered {
    /// What config.yaml enables (`None`: everything).
    enabled: Option<BTreeSet<String>>,
    /// Toolsets and tools turned off with `/tools disable`.
    disabled: BTreeSet<String>,
    /// Where `disabled` is kept (`None`: not kept, in unit tests).
    path: Option<PathBuf>,
}

impl Offered {
    pub fn load(home: &Path) -> Offered {
        let doc = crate::config_file::load(home).unwrap_or(yaml_rust2::Yaml::Null);
        let list = |dotted: &str| match crate::config_file::lookup(&doc, dotted) {
            yaml_rust2::Yaml::Array(a) => Some(
                a.iter()
                    .filter_map(|y| y.as_str().map(str::to_string))
                    .collect::<BTreeSet<String>>(),
            ),
            _ => None,
        };
        let enabled = list("platform_toolsets.cli")
            .or_else(|| list("toolsets"))
            .filter(|set| !set.iter().any(|n| ALL.contains(&n.as_str())));
        let path = home.join("tui_gateway_tools.json");
        let disabled = crate::util::read_regular(&path, FILE_MAX)
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| {
                v["disabled"].as_array().map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
            })
            .unwrap_or_default();
        Offered {
            enabled,
            disabled,
            path: Some(path),
        }
    }

    /// Whether tool `name` of `toolset` is offered.
    pub fn offers(&self, name: &str, toolset: &str) -> bool {
        let named = |set: &BTreeSet<String>| set.contains(name) || set.contains(toolset);
        self.enabled.as_ref().is_none_or(named) && !named(&self.disabled)
    }

    /// Turn `names` (toolsets or tools) on or off; the enabled ones are added to
    /// config.yaml's choice for this gateway too.
    pub fn set(&mut self, names: &[&str], enable: bool) -> std::io::Result<()> {
        for name in names {
            if enable {
                self.disabled.remove(*name);
                if let Some(enabled) = self.enabled.as_mut() {
                    enabled.insert(name.to_string());
                }
            } else {
                self.disabled.insert(name.to_string());
            }
        }
        let Some(path) = &self.path else {
            return Ok(());
        };
        let text = json!({ "disabled": self.disabled }).to_string();
        crate::private_file::replace_keeping_mode(path, text.as_bytes(), 0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_enables_and_the_user_disables() {
        let mut all = Offered::default();
        assert!(all.offers("patch", "file"));
        all.set(&["file"], false).unwrap();
        assert!(!all.offers("patch", "file") && all.offers("terminal", "terminal"));
        all.set(&["file"], true).unwrap();
        assert!(all.offers("patch", "file"));
        let mut some = Offered {
            enabled: Some(["terminal".to_string(), "todo".to_string()].into()),
            ..Default::default()
        };
        assert!(some.offers("terminal", "terminal") && !some.offers("read_file", "file"));
        some.set(&["read_file"], true).unwrap();
        assert!(some.offers("read_file", "file") && !some.offers("patch", "file"));
    }
}
