//! `terminal.env_passthrough` of config.yaml (Hermes' name): the variables a command inherits
//! even when they look secret. Read once, at the gateway's start; the gateway's own model keys
//! are never passed, whatever the list says.

use std::path::Path;

use yaml_rust2::Yaml;

/// Variables the gateway takes its own bearer token from (see `model::select`).
const OWN_KEYS: &[&str] = &["OPENAI_API_KEY", "OPENROUTER_API_KEY"];

/// The names listed in `$HERMES_HOME/config.yaml` `terminal.env_passthrough`, without the
/// gateway's own keys (each refusal said on stderr). A file that cannot be read lists none.
pub fn load(home: &Path) -> Vec<String> {
    let Ok(doc) = crate::config_file::load(home) else {
        return Vec::new(); // the reader says why where it matters (model selection)
    };
    let (names, refused) = from_doc(&doc);
    for name in refused {
        crate::diag!(
            "[gateway] terminal.env_passthrough: {name} is the gateway's own key; not passed to commands"
        );
    }
    names
}

/// The pure rule: (names passed, names refused).
pub fn from_doc(doc: &Yaml) -> (Vec<String>, Vec<String>) {
    let own_env = crate::config_file::string_at(doc, "model.api_key_env");
    let listed = match crate::config_file::lookup(doc, "terminal.env_passthrough") {
        Yaml::Array(items) => items
            .iter()
            .filter_map(Yaml::as_str)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        Yaml::String(one) => vec![one.trim().to_string()],
        _ => Vec::new(),
    };
    listed
        .into_iter()
        .partition(|n| !OWN_KEYS.contains(&n.as_str()) && own_env.as_deref() != Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_names_but_never_the_gateway_keys() {
        let doc = crate::config_file::parse(
            "model:\n  api_key_env: MY_LLM_KEY\nterminal:\n  env_passthrough: [GH_PAT, ' DB_PASS ', OPENAI_API_KEY, MY_LLM_KEY, 3]\n",
        )
        .unwrap();
        let (names, refused) = from_doc(&doc);
        assert_eq!(names, ["GH_PAT", "DB_PASS"]);
        assert_eq!(refused, ["OPENAI_API_KEY", "MY_LLM_KEY"]);
        assert_eq!(from_doc(&Yaml::Null), (vec![], vec![]));
    }
}
