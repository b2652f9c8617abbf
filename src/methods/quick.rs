//! `quick_commands` of `$HERMES_HOME/config.yaml`, the Hermes way:
//! `quick_commands: {name: {type: exec, command: ...}}` or `{type: alias, target: ...}`.
//! Read on demand (the file is small and local; `config_file` caps its size), never cached, so
//! an edit shows up at the next `/help` or command.

use std::path::Path;
use std::time::Duration;

use yaml_rust2::Yaml;

/// Quick commands kept at most (the rest are ignored with a warning).
const COUNT_MAX: usize = 200;
const NAME_MAX: usize = 64;
const COMMAND_MAX: usize = 8 * 1024;
/// Timeout of an `exec` quick command unless it sets `timeout` (Hermes uses 30 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `timeout` a quick command may ask for.
const TIMEOUT_MAX: f64 = 600.0;

#[derive(Debug, Clone, PartialEq)]
pub enum QuickAction {
    /// Run this shell command.
    Exec { command: String, timeout: Duration },
    /// Dispatch this command line instead (no leading slash).
    Alias { target: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct QuickCommand {
    pub name: String,
    pub description: String,
    pub action: QuickAction,
}

/// What config.yaml holds: the usable quick commands (sorted by name) and, when some entry or
/// the file could not be used, one line saying why.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Quick {
    pub commands: Vec<QuickCommand>,
    pub warning: Option<String>,
}

impl Quick {
    pub fn find(&self, name: &str) -> Option<&QuickCommand> {
        self.commands
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }
}

/// Read the quick commands of `home/config.yaml` (through `config_file`, which bounds size,
/// nesting and alias expansion); a missing file means none.
pub fn load(home: &Path) -> Quick {
    match crate::config_file::read_text(&crate::config_file::path(home)) {
        Ok(Some(text)) => parse(&text),
        Ok(None) => Quick::default(),
        Err(e) => warn(format!("quick_commands unavailable: {e}")),
    }
}

fn warn(w: String) -> Quick {
    Quick {
        commands: Vec::new(),
        warning: Some(w),
    }
}

/// Parse config.yaml text (pure; unit-tested).
pub fn parse(text: &str) -> Quick {
    match crate::config_file::parse(text) {
        Ok(doc) => from_doc(&doc),
        Err(e) => warn(format!("quick_commands unavailable: {e}")),
    }
}

fn from_doc(doc: &Yaml) -> Quick {
    let entries = match &doc["quick_commands"] {
        Yaml::BadValue | Yaml::Null => return Quick::default(),
        Yaml::Hash(h) => h,
        _ => return warn("quick_commands in config.yaml is not a mapping".into()),
    };
    let mut q = Quick::default();
    let mut skipped = Vec::new();
    for (key, value) in entries {
        let name = match key {
            Yaml::String(s) => s.trim().trim_start_matches('/').to_string(),
            Yaml::Integer(i) => i.to_string(),
            _ => String::new(),
        };
        match entry(&name, value) {
            Ok(c) if q.commands.len() < COUNT_MAX && q.find(&c.name).is_none() => {
                q.commands.push(c)
            }
            Ok(c) => skipped.push(format!("{} (too many or duplicate)", c.name)),
            Err(why) => skipped.push(why),
        }
    }
    q.commands.sort_by(|a, b| a.name.cmp(&b.name));
    if !skipped.is_empty() {
        q.warning = Some(format!(
            "quick_commands skipped: {}",
            crate::util::clip(&skipped.join("; "), 300)
        ));
    }
    q
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

fn entry(name: &str, v: &Yaml) -> Result<QuickCommand, String> {
    if !valid_name(name) {
        return Err(format!(
            "{:?}: a name is letters, digits, - _ . : (at most {NAME_MAX})",
            crate::util::clip(name, 40)
        ));
    }
    if !matches!(v, Yaml::Hash(_)) {
        return Err(format!("{name}: not a mapping"));
    }
    let s = |k: &str| v[k].as_str().map(str::trim).filter(|t| !t.is_empty());
    let description = s("description").map(|d| crate::util::clip(d, 120));
    let action = match s("type") {
        Some("exec") => {
            let command = s("command").ok_or_else(|| format!("{name}: exec needs a command"))?;
            if command.len() > COMMAND_MAX {
                return Err(format!("{name}: command longer than {COMMAND_MAX} bytes"));
            }
            let timeout = match &v["timeout"] {
                Yaml::BadValue | Yaml::Null => DEFAULT_TIMEOUT,
                t => {
                    let secs = t
                        .as_f64()
                        .or_else(|| t.as_i64().map(|i| i as f64))
                        .filter(|s| s.is_finite() && *s > 0.0)
                        .ok_or_else(|| format!("{name}: timeout must be a positive number"))?;
                    Duration::from_secs_f64(secs.min(TIMEOUT_MAX))
                }
            };
            QuickAction::Exec {
                command: command.to_string(),
                timeout,
            }
        }
        Some("alias") => {
            let target = s("target")
                .map(|t| t.trim_start_matches('/').trim().to_string())
                .filter(|t| !t.is_empty())
                .ok_or_else(|| format!("{name}: alias needs a target"))?;
            QuickAction::Alias { target }
        }
        Some(other) => return Err(format!("{name}: unknown type {other:?}")),
        None => return Err(format!("{name}: type (exec or alias) is missing")),
    };
    let description = description.unwrap_or_else(|| match &action {
        QuickAction::Exec { command, .. } => crate::util::clip(&format!("exec: {command}"), 120),
        QuickAction::Alias { target } => crate::util::clip(&format!("alias → /{target}"), 120),
    });
    Ok(QuickCommand {
        name: name.to_string(),
        description,
        action,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_and_alias_entries_are_read() {
        let q = parse(
            "model: x\nquick_commands:\n  gs: {type: exec, command: git status, timeout: 2}\n  st:\n    type: alias\n    target: /status\n    description: show it\n",
        );
        assert_eq!(q.warning, None);
        assert_eq!(q.commands.len(), 2);
        assert_eq!(
            q.find("GS").unwrap().action,
            QuickAction::Exec {
                command: "git status".into(),
                timeout: Duration::from_secs(2)
            }
        );
        let st = q.find("st").unwrap();
        assert_eq!(
            st.action,
            QuickAction::Alias {
                target: "status".into()
            }
        );
        assert_eq!(st.description, "show it");
    }

    #[test]
    fn bad_entries_are_skipped_with_a_warning() {
        let q = parse(
            "quick_commands:\n  ok: {type: exec, command: 'true'}\n  'bad name': {type: exec, command: x}\n  nocmd: {type: exec}\n  what: {type: magic}\n  notmap: 3\n  slow: {type: exec, command: x, timeout: -1}\n",
        );
        assert_eq!(q.commands.len(), 1, "{q:?}");
        let w = q.warning.unwrap();
        for part in ["bad name", "nocmd", "magic", "notmap", "slow"] {
            assert!(w.contains(part), "{w}");
        }
    }

    #[test]
    fn absent_broken_or_odd_sections() {
        assert_eq!(parse(""), Quick::default());
        assert_eq!(parse("model: x\n"), Quick::default());
        assert_eq!(parse("quick_commands:\n"), Quick::default());
        assert!(parse("quick_commands: [1, 2]\n").warning.is_some());
        assert!(parse("quick_commands: {a: [\n").warning.is_some());
        assert!(parse("- just\n- a list\n").commands.is_empty());
        let laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\nquick_commands: {a: {type: exec, command: x}}\n";
        assert!(parse(laughs).warning.is_some_and(|w| w.contains("refused")));
    }

    #[test]
    fn timeouts_are_capped() {
        let q = parse("quick_commands:\n  a: {type: exec, command: x, timeout: 99999}\n");
        let QuickAction::Exec { timeout, .. } = &q.commands[0].action else {
            panic!()
        };
        assert_eq!(timeout.as_secs(), 600);
    }
}
