//! Skills Hermes' plugins provide, named `<plugin>:<skill>`. Hermes learns them when a
//! plugin's `register(ctx)` calls `ctx.register_skill(name, path)`; this gateway runs no
//! plugin code, so it reads the layout Hermes' plugin guide prescribes for that call: an
//! enabled plugin folder (`plugin.yaml`) under `$HERMES_HOME/plugins/` (or
//! `./.hermes/plugins/` with `HERMES_ENABLE_PROJECT_PLUGINS`) whose `skills/<name>/SKILL.md`
//! each become `<plugin>:<name>`. As in Hermes they are loaded only by that qualified name
//! (`skill_view`): never in the system prompt's index, `skills_list`, the banner or the
//! slash commands. Gating as Hermes': `plugins.enabled` opts a plugin in (absent: none),
//! `plugins.disabled` wins, a missing `requires_env` variable leaves it out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::header;

/// A `plugin.yaml` larger than this is skipped.
const MANIFEST_MAX: u64 = 64 * 1024;
/// Plugin folders and skill folders looked at at most, per folder listed.
const ENTRIES_MAX: usize = 1000;

/// Which plugins config.yaml turns on.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Gate {
    /// `plugins.enabled` (`None`: the key is absent, so no plugin is on).
    pub enabled: Option<BTreeSet<String>>,
    /// `plugins.disabled`, which wins.
    pub disabled: BTreeSet<String>,
}

impl Gate {
    /// Whether a plugin known as any of `names` (its manifest name, its folder) is on.
    pub fn allows(&self, names: &[&str]) -> bool {
        let on = self
            .enabled
            .as_ref()
            .is_some_and(|e| names.iter().any(|n| e.contains(*n)));
        on && !names.iter().any(|n| self.disabled.contains(*n))
    }
}

/// Skills by plugin namespace, each `(name, SKILL.md)` in the order registered.
pub type ByNamespace = BTreeMap<String, Vec<(String, PathBuf)>>;
/// One plugin's namespace and its skills.
pub type Provided = (String, Vec<(String, PathBuf)>);

/// Hermes' namespace and skill-name rule: `[A-Za-z0-9_-]+`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The folders plugins are looked for in, later ones overriding earlier on a name clash.
pub fn roots(home: &Path) -> Vec<PathBuf> {
    let mut roots = vec![home.join("plugins")];
    let project = std::env::var("HERMES_ENABLE_PROJECT_PLUGINS").unwrap_or_default();
    if crate::util::truthy(&project)
        && let Ok(cwd) = std::env::current_dir()
    {
        roots.push(cwd.join(".hermes/plugins"));
    }
    roots
}

/// The plugin folders of `root` (those with a `plugin.yaml`), sorted.
pub fn list_root(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .take(ENTRIES_MAX)
        .flatten()
        .map(|e| e.path())
        .filter(|p| manifest_path(p).is_some())
        .collect();
    dirs.sort();
    dirs
}

fn manifest_path(dir: &Path) -> Option<PathBuf> {
    ["plugin.yaml", "plugin.yml"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// A plugin folder read: `Ok(Some((namespace, skills)))` when it is on and provides skills,
/// `Ok(None)` when it is off, an error when its manifest cannot be used. `set` says whether
/// an environment variable has a value (never what it is).
pub fn read_plugin(
    dir: &Path,
    gate: &Gate,
    set: &dyn Fn(&str) -> bool,
) -> Result<Option<Provided>, String> {
    let Some(manifest) = manifest_path(dir) else {
        return Ok(None);
    };
    let text = crate::util::read_regular(&manifest, MANIFEST_MAX)
        .map_err(|e| format!("{}: cannot read it: {e}", manifest.display()))?
        .unwrap_or_default();
    let doc = crate::config_file::parse_named(&text, "plugin.yaml")
        .map_err(|e| format!("{}: {e}", manifest.display()))?;
    let fields = match crate::config_file::to_json_plain(&doc) {
        Value::Object(m) => m,
        Value::Null => Default::default(),
        _ => return Err(format!("{}: not a mapping", manifest.display())),
    };
    let folder = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let namespace = header::text_of(fields.get("name"))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| folder.clone());
    if !gate.allows(&[&namespace, &folder]) {
        return Ok(None);
    }
    if !valid_name(&namespace) {
        return Err(format!(
            "plugin {namespace:?}: its name is not a skill namespace ([A-Za-z0-9_-]+), so its skills are not offered"
        ));
    }
    if required_env(fields.get("requires_env"))
        .iter()
        .any(|n| !set(n))
    {
        return Ok(None);
    }
    Ok(Some((namespace, skills_of(&dir.join("skills")))))
}

/// `requires_env`: names, or `{name: …}` entries.
fn required_env(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| header::text_of(Some(i)).or_else(|| header::text_of(i.get("name"))))
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect(),
        other => header::list_of(other),
    }
}

/// `skills/<name>/SKILL.md` of a plugin, by name.
fn skills_of(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .take(ENTRIES_MAX)
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let md = e.path().join("SKILL.md");
            (valid_name(&name) && md.is_file()).then_some((name, md))
        })
        .collect();
    out.sort();
    out
}

/// `skill_view` of `<namespace>:<bare>`: `None` when no plugin has that namespace (the name
/// is then looked for on disk as `namespace/bare`, as Hermes falls through).
pub fn view(plugins: &ByNamespace, namespace: &str, bare: &str) -> Option<Value> {
    let skills = plugins.get(namespace).filter(|s| !s.is_empty())?;
    let qualified = format!("{namespace}:{bare}");
    let Some((_, skill_md)) = skills.iter().find(|(n, _)| n == bare) else {
        let names: Vec<String> = skills
            .iter()
            .map(|(n, _)| format!("{namespace}:{n}"))
            .collect();
        return Some(json!({"success": false,
            "error": format!("Skill '{bare}' not found in plugin '{namespace}'."),
            "available_skills": names,
            "hint": format!("The '{namespace}' plugin provides {} skill(s).", skills.len())}));
    };
    let content = match crate::util::read_regular(skill_md, super::scan::FILE_MAX) {
        Ok(Some(t)) => t,
        Ok(None) => {
            return Some(json!({"success": false, "error": format!(
                "Skill '{qualified}' file no longer exists at {}. The registry entry has been \
                 cleaned up — try again after the plugin is reloaded.",
                skill_md.display()
            )}));
        }
        Err(e) => {
            return Some(json!({"success": false,
                "error": format!("Failed to read skill '{qualified}': {e}")}));
        }
    };
    let fields = header::parse(&content)
        .map(|p| p.fields)
        .unwrap_or_default();
    if !header::matches_platform(&header::list_of(fields.get("platforms"))) {
        return Some(json!({"success": false,
            "error": format!("Skill '{qualified}' is not supported on this platform."),
            "readiness_status": "unsupported"}));
    }
    let siblings: Vec<&str> = skills
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != bare)
        .collect();
    let banner = match siblings.first() {
        Some(first) => format!(
            "[Bundle context: This skill is part of the '{namespace}' plugin.\nSibling skills: \
             {}.\nUse qualified form to invoke siblings (e.g. {namespace}:{first}).]\n\n",
            siblings.join(", ")
        ),
        None => format!("[Bundle context: This skill is part of the '{namespace}' plugin.]\n\n"),
    };
    let description = header::text_of(fields.get("description")).unwrap_or_default();
    Some(json!({
        "success": true,
        "name": qualified,
        "content": format!("{banner}{content}"),
        "description": header::cut(&description, header::DESCRIPTION_MAX),
        "linked_files": null,
        "readiness_status": "available",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enabled_plugin_names_its_skills_and_a_disabled_or_unready_one_none() {
        let root =
            std::env::temp_dir().join(format!("tuigw-skplug-{}", crate::util::random_hex(8)));
        let dir = root.join("plugins/tools-pack");
        for s in ["review", "plan", "bad name"] {
            std::fs::create_dir_all(dir.join("skills").join(s)).unwrap();
            std::fs::write(dir.join("skills").join(s).join("SKILL.md"), "x").unwrap();
        }
        std::fs::write(
            dir.join("plugin.yaml"),
            "name: pack\nrequires_env:\n  - name: PACK_KEY\n",
        )
        .unwrap();
        assert_eq!(list_root(&root.join("plugins")), std::slice::from_ref(&dir));
        let on = Gate {
            enabled: Some(["pack".to_string()].into()),
            ..Default::default()
        };
        let (ns, skills) = read_plugin(&dir, &on, &|_| true).unwrap().unwrap();
        assert_eq!(ns, "pack");
        let names: Vec<&str> = skills.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["plan", "review"]);
        assert_eq!(read_plugin(&dir, &on, &|_| false).unwrap(), None);
        assert_eq!(
            read_plugin(&dir, &Gate::default(), &|_| true).unwrap(),
            None
        );
        let off = Gate {
            disabled: ["tools-pack".to_string()].into(),
            ..on.clone()
        };
        assert_eq!(read_plugin(&dir, &off, &|_| true).unwrap(), None);
        let by: ByNamespace = [(ns, skills)].into();
        let v = view(&by, "pack", "review").unwrap();
        assert_eq!(v["name"], "pack:review");
        assert!(v["content"].as_str().unwrap().starts_with(
            "[Bundle context: This skill is part of the 'pack' plugin.\nSibling skills: plan.\n"
        ));
        let missing = view(&by, "pack", "nope").unwrap();
        assert_eq!(
            missing["available_skills"],
            json!(["pack:plan", "pack:review"])
        );
        assert!(view(&by, "other", "review").is_none());
        let _ = std::fs::remove_dir_all(&root);
    }
}
