//! Where skills are and which are turned off, read from config.yaml as Hermes reads it:
//! `$HERMES_HOME/skills` first, then `skills.external_dirs` (`~` and `${VAR}` expanded,
//! relative to the home, folders that exist, each once); `skills.disabled` (and
//! `skills.platform_disabled.<HERMES_PLATFORM>`); which `environments` tags are active; where
//! plugins are and which are on (`plugins.rs`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use yaml_rust2::Yaml;

use super::header;

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    /// `$HERMES_HOME/skills`, then the external folders.
    pub roots: Vec<PathBuf>,
    /// Skill names turned off.
    pub disabled: BTreeSet<String>,
    /// Environment tags active here (`docker`, `s6`, `kanban`).
    pub environments: BTreeSet<String>,
    /// `$HERMES_HOME` (its `.env` and credential files).
    pub home: PathBuf,
    /// Folders holding plugins (`$HERMES_HOME/plugins`, …), and which plugins are on.
    pub plugin_roots: Vec<PathBuf>,
    pub plugin_gate: super::plugins::Gate,
}

/// Environment tags Hermes knows; others never hide a skill.
const KNOWN_ENVIRONMENTS: [&str; 3] = ["kanban", "docker", "s6"];

impl Settings {
    pub fn load(home: &Path) -> Settings {
        let doc = crate::config_file::load(home).unwrap_or(Yaml::Null);
        let local = home.join("skills");
        let mut roots = vec![local.clone()];
        let resolved_local = std::fs::canonicalize(&local).unwrap_or(local);
        for entry in strings(crate::config_file::lookup(&doc, "skills.external_dirs")) {
            let path = expand(&entry, home);
            let Ok(real) = std::fs::canonicalize(&path) else {
                continue;
            };
            if real.is_dir() && real != resolved_local && !roots.contains(&real) {
                roots.push(real);
            }
        }
        let mut disabled: BTreeSet<String> =
            strings(crate::config_file::lookup(&doc, "skills.disabled"))
                .into_iter()
                .collect();
        if let Ok(platform) = std::env::var("HERMES_PLATFORM") {
            let key = format!("skills.platform_disabled.{platform}");
            disabled.extend(strings(crate::config_file::lookup(&doc, &key)));
        }
        let plugins = |key: &str| -> BTreeSet<String> {
            strings(crate::config_file::lookup(&doc, key))
                .into_iter()
                .collect()
        };
        let enabled = match crate::config_file::lookup(&doc, "plugins.enabled") {
            Yaml::Array(_) => Some(plugins("plugins.enabled")),
            _ => None,
        };
        Settings {
            roots,
            disabled,
            environments: active_environments(),
            home: home.to_path_buf(),
            plugin_roots: super::plugins::roots(home),
            plugin_gate: super::plugins::Gate {
                enabled,
                disabled: plugins("plugins.disabled"),
            },
        }
    }

    /// Whether a skill tagged `environments` is relevant here (any tag active, or unknown).
    pub fn relevant(&self, environments: &[String]) -> bool {
        let tags: Vec<String> = environments
            .iter()
            .map(|e| e.trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect();
        tags.is_empty()
            || tags
                .iter()
                .any(|t| !KNOWN_ENVIRONMENTS.contains(&t.as_str()) || self.environments.contains(t))
    }
}

/// A list (or a lone string) of strings, trimmed, non-empty.
fn strings(y: &Yaml) -> Vec<String> {
    let json = crate::config_file::to_json_plain(y);
    header::list_of(match &json {
        serde_json::Value::Null => None,
        v => Some(v),
    })
}

/// `~` and `${VAR}`/`$VAR` expanded; relative to `home`.
fn expand(entry: &str, home: &Path) -> PathBuf {
    let mut s = entry.to_string();
    if let Some(rest) = s.strip_prefix('~')
        && (rest.is_empty() || rest.starts_with('/'))
        && let Some(h) = crate::util::user_home()
    {
        s = format!("{}{rest}", h.display());
    }
    let vars = regex::Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
        .expect("a valid pattern");
    let s = vars.replace_all(&s, |c: &regex::Captures<'_>| {
        let name = c.get(1).or_else(|| c.get(2)).map_or("", |m| m.as_str());
        std::env::var(name).unwrap_or_else(|_| c[0].to_string())
    });
    let p = PathBuf::from(s.as_ref());
    if p.is_absolute() { p } else { home.join(p) }
}

/// The environment tags active in this process (Hermes' detection).
fn active_environments() -> BTreeSet<String> {
    let mut on = BTreeSet::new();
    if std::env::var_os("HERMES_KANBAN_TASK").is_some()
        || std::env::var_os("HERMES_KANBAN_BOARD").is_some()
    {
        on.insert("kanban".to_string());
    }
    let cgroup = crate::util::read_proc("/proc/1/cgroup").unwrap_or_default();
    if Path::new("/.dockerenv").exists()
        || Path::new("/run/.containerenv").exists()
        || ["docker", "kubepods", "containerd", "lxc"]
            .iter()
            .any(|k| cgroup.contains(k))
    {
        on.insert("docker".to_string());
    }
    if Path::new("/run/s6").is_dir() || Path::new("/package/admin/s6-overlay").is_dir() {
        on.insert("s6".to_string());
    }
    on
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_external_folders_and_disabled_skills() {
        let root = std::env::temp_dir().join(format!("tuigw-skset-{}", crate::util::random_hex(8)));
        let (home, ext) = (root.join("home"), root.join("ext"));
        std::fs::create_dir_all(home.join("skills")).unwrap();
        std::fs::create_dir_all(&ext).unwrap();
        std::fs::write(
            home.join("config.yaml"),
            format!(
                "skills:\n  external_dirs: [{}, /nonexistent/x, skills]\n  disabled: [a, b]\n",
                ext.display()
            ),
        )
        .unwrap();
        let s = Settings::load(&home);
        assert_eq!(s.roots.len(), 2, "{s:?}");
        assert_eq!(s.roots[1], std::fs::canonicalize(&ext).unwrap());
        assert!(s.disabled.contains("a") && s.disabled.contains("b"));
        assert!(s.relevant(&[]) && s.relevant(&["mars".into()]));
        let none = Settings::default();
        assert!(!none.relevant(&["kanban".into()]));
        let _ = std::fs::remove_dir_all(&root);
    }
}
