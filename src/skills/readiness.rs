//! What a skill needs before it can be used, checked as Hermes' `skill_view` checks it
//! (`tools/skills_tool.py`): the environment variables it names (`required_environment_variables`,
//! `setup.collect_secrets`, the legacy `prerequisites.env_vars`) set in `$HERMES_HOME/.env` or
//! the environment, and its `required_credential_files` present under `$HERMES_HOME`. Only names
//! and whether each is there come out — never a value.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::header::text_of;
use crate::hermes_env::HermesEnv;

/// A skill's requirements and which are not met.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Readiness {
    /// `{name, prompt, help?, required_for?, optional?}` of each variable, as Hermes lists them.
    pub required: Vec<Value>,
    /// Required (not optional) variables without a value.
    pub missing_env: Vec<String>,
    /// Credential files (relative to `$HERMES_HOME`) that are not there.
    pub missing_files: Vec<String>,
    /// The first variable's help (`setup_help`).
    pub help: Option<String>,
}

impl Readiness {
    /// The requirements of header `fields`, checked against `home`'s `.env`, the environment
    /// and `home`'s files.
    pub fn check(fields: &Map<String, Value>, home: &Path) -> Readiness {
        let required = required_variables(fields);
        // No home (a catalog built in a unit test): no `.env` to read.
        let env = if required.is_empty() || home.as_os_str().is_empty() {
            HermesEnv::default()
        } else {
            HermesEnv::load(home).unwrap_or_default()
        };
        let missing_env = required
            .iter()
            .filter(|v| v.get("optional").is_none())
            .filter_map(|v| v["name"].as_str())
            .filter(|n| !super::view::env_is_set(&env, n))
            .map(str::to_string)
            .collect();
        let help = required
            .iter()
            .find_map(|v| v["help"].as_str().map(str::to_string));
        Readiness {
            required,
            missing_env,
            missing_files: missing_credential_files(fields.get("required_credential_files"), home),
            help,
        }
    }

    pub fn setup_needed(&self) -> bool {
        !self.missing_env.is_empty() || !self.missing_files.is_empty()
    }

    /// Hermes' `setup_note`: what is missing, then the help (`None` when nothing is).
    pub fn note(&self) -> Option<String> {
        if !self.setup_needed() {
            return None;
        }
        let items: Vec<String> = self
            .missing_env
            .iter()
            .map(|n| format!("env ${n}"))
            .chain(self.missing_files.iter().map(|p| format!("file {p}")))
            .collect();
        let note = format!(
            "Setup needed before using this skill: missing {}.",
            items.join(", ")
        );
        Some(match &self.help {
            Some(h) => format!("{note} {h}"),
            None => note,
        })
    }
}

/// Python's truthiness of a header value.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// A non-empty trimmed string field.
fn text(v: Option<&Value>) -> Option<String> {
    text_of(v)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// A mapping or a list of them (other items dropped).
fn entries(v: Option<&Value>) -> Vec<Value> {
    match v {
        Some(o @ Value::Object(_)) => vec![o.clone()],
        Some(Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    }
}

fn valid_env_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every variable the header names, each once, in Hermes' order.
fn required_variables(fields: &Map<String, Value>) -> Vec<Value> {
    let setup = fields.get("setup").filter(|s| s.is_object());
    let setup_help = text(setup.and_then(|s| s.get("help")));
    let mut out: Vec<Value> = Vec::new();
    let mut add = |entry: &Value| {
        let Some(name) = text(entry.get("name")).or_else(|| text(entry.get("env_var"))) else {
            return;
        };
        if !valid_env_name(&name) || out.iter().any(|v| v["name"] == name.as_str()) {
            return;
        }
        let prompt = text(entry.get("prompt")).unwrap_or_else(|| format!("Enter value for {name}"));
        let mut v = json!({"name": name, "prompt": prompt});
        let help = ["help", "provider_url", "url"]
            .iter()
            .find_map(|k| text(entry.get(*k)))
            .or_else(|| setup_help.clone());
        if let Some(h) = help {
            v["help"] = json!(h);
        }
        if let Some(r) = text(entry.get("required_for")) {
            v["required_for"] = json!(r);
        }
        if truthy(entry.get("optional")) {
            v["optional"] = json!(true);
        }
        out.push(v);
    };
    for item in entries(fields.get("required_environment_variables")) {
        match &item {
            Value::String(s) => add(&json!({ "name": s })),
            o @ Value::Object(_) => add(o),
            _ => {}
        }
    }
    for item in entries(setup.and_then(|s| s.get("collect_secrets"))) {
        if item.is_object() {
            let help = text(item.get("provider_url")).or_else(|| text(item.get("url")));
            add(
                &json!({"env_var": item.get("env_var"), "prompt": item.get("prompt"),
                        "help": help}),
            );
        }
    }
    let legacy = fields
        .get("prerequisites")
        .filter(|p| p.is_object())
        .and_then(|p| p.get("env_vars"));
    for name in super::header::list_of(legacy.filter(|v| truthy(Some(v)))) {
        add(&json!({ "name": name }));
    }
    out
}

/// `required_credential_files` (paths, or `{path}` / `{name}`) not present as files under
/// `home`; one that is absolute or leaves `home` counts as missing, as Hermes refuses it.
fn missing_credential_files(v: Option<&Value>, home: &Path) -> Vec<String> {
    let Some(Value::Array(items)) = v else {
        return Vec::new();
    };
    let real_home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    items
        .iter()
        .filter_map(|i| match i {
            Value::String(s) => Some(s.trim().to_string()),
            Value::Object(_) => text(i.get("path")).or_else(|| text(i.get("name"))),
            _ => None,
        })
        .filter(|p| !p.is_empty())
        .filter(|p| {
            let rel = Path::new(p);
            let present = !rel.is_absolute()
                && std::fs::canonicalize(home.join(rel))
                    .is_ok_and(|real| real.starts_with(&real_home) && real.is_file());
            !present
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_files_are_checked_and_only_their_names_said() {
        let home =
            std::env::temp_dir().join(format!("tuigw-skready-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join(".env"),
            "SKREADY_SET=s3cr3t-value\nSKREADY_EMPTY=\n",
        )
        .unwrap();
        std::fs::write(home.join("token.json"), "{}").unwrap();
        let fields = crate::skills::header::parse(
            "---\nname: x\nrequired_environment_variables:\n  - name: SKREADY_SET\n  - name: SKREADY_EMPTY\n    help: Get one at example.com\n    required_for: search\n  - name: SKREADY_OPT\n    optional: true\n  - 9BAD\nsetup:\n  collect_secrets:\n    - env_var: SKREADY_SECRET\n      provider_url: https://keys.example\nprerequisites:\n  env_vars: [SKREADY_LEGACY, SKREADY_SET]\nrequired_credential_files:\n  - token.json\n  - path: missing.json\n  - /etc/passwd\n  - ../outside.json\n---\nbody",
        )
        .unwrap()
        .fields;
        let r = Readiness::check(&fields, &home);
        let names: Vec<&str> = r
            .required
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "SKREADY_SET",
                "SKREADY_EMPTY",
                "SKREADY_OPT",
                "SKREADY_SECRET",
                "SKREADY_LEGACY"
            ]
        );
        assert_eq!(r.required[1]["required_for"], "search");
        assert_eq!(r.required[3]["help"], "https://keys.example");
        assert_eq!(
            r.missing_env,
            ["SKREADY_EMPTY", "SKREADY_SECRET", "SKREADY_LEGACY"]
        );
        assert_eq!(
            r.missing_files,
            ["missing.json", "/etc/passwd", "../outside.json"]
        );
        let note = r.note().unwrap();
        assert_eq!(
            note,
            "Setup needed before using this skill: missing env $SKREADY_EMPTY, env $SKREADY_SECRET, env $SKREADY_LEGACY, file missing.json, file /etc/passwd, file ../outside.json. Get one at example.com"
        );
        let all = format!("{:?}{note}", r.required);
        assert!(!all.contains("s3cr3t"), "a value came out: {all}");
        let none = Readiness::check(&Map::new(), &home);
        assert!(!none.setup_needed() && none.note().is_none());
        let _ = std::fs::remove_dir_all(&home);
    }
}
