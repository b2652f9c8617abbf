//! A SKILL.md's YAML header ("frontmatter") as Hermes reads it: the text between a leading
//! `---` and the next `\n---` line, a mapping (`name`, `description`, `platforms`,
//! `environments`, `metadata.hermes.{tags, related_skills, requires_*, fallback_for_*,
//! config}`, …). Pure: text in, fields out. A header that is not closed, does not parse or is
//! not a mapping is an error (the skill is reported and skipped); a file without one is a
//! skill named after its folder.

use std::sync::LazyLock;

use serde_json::{Map, Value};
use yaml_rust2::Yaml;

/// Longest name and description Hermes keeps (Anthropic's limits).
pub const NAME_MAX: usize = 64;
pub const DESCRIPTION_MAX: usize = 1024;

static CLOSING: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"\n---\s*\n").expect("a valid pattern"));

/// The header's fields and the body after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed<'a> {
    pub fields: Map<String, Value>,
    pub body: &'a str,
}

/// Split `text` into its header's YAML and its body: `Ok(None)` when there is no header,
/// an error when it is not closed.
pub fn split(text: &str) -> Result<Option<(&str, &str)>, String> {
    if !text.starts_with("---") {
        return Ok(None);
    }
    let Some(end) = CLOSING.find(&text[3..]) else {
        return Err("the YAML header is not closed (no '---' line after it)".into());
    };
    Ok(Some((&text[3..3 + end.start()], &text[3 + end.end()..])))
}

/// The header of `text` as JSON fields (none without a header) and the body.
pub fn parse(text: &str) -> Result<Parsed<'_>, String> {
    let Some((yaml, body)) = split(text)? else {
        return Ok(Parsed {
            fields: Map::new(),
            body: text,
        });
    };
    let doc = crate::config_file::parse_named(yaml, "the YAML header")?;
    match crate::config_file::to_json_plain(&doc) {
        Value::Object(fields) => Ok(Parsed { fields, body }),
        _ => Err("the YAML header is not a mapping (key: value pairs)".into()),
    }
}

/// The header of `text` as parsed YAML — a mapping, `Yaml::Null` without a header — and the
/// body: what [`parse`] gives without turning the whole header into JSON (the scan reads a few
/// fields of each of a thousand headers; [`field`] turns only those).
pub fn parse_yaml(text: &str) -> Result<(Yaml, &str), String> {
    let Some((yaml, body)) = split(text)? else {
        return Ok((Yaml::Null, text));
    };
    let doc = crate::config_file::parse_named(yaml, "the YAML header")?;
    match doc {
        Yaml::Hash(_) => Ok((doc, body)),
        _ => Err("the YAML header is not a mapping (key: value pairs)".into()),
    }
}

/// The field `key` of a mapping from [`parse_yaml`] as [`parse`] has it (`None`: absent, or
/// not a mapping), so [`text_of`] and [`list_of`] read it the same.
pub fn field(map: &Yaml, key: &str) -> Option<Value> {
    match map {
        Yaml::Hash(h) => h
            .get(&Yaml::String(key.to_string()))
            .map(crate::config_file::to_json_plain),
        _ => None,
    }
}

/// A scalar field as text (`name: 42` is "42"); `None` for lists, mappings and null.
pub fn text_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A list field (or a lone scalar, or Hermes' `"[a, b]"` / `"a, b"` strings) as strings.
pub fn list_of(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| text_of(Some(i)))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        Some(other) => {
            let Some(s) = text_of(Some(other)) else {
                return Vec::new();
            };
            let s = s.trim();
            let s = s
                .strip_prefix('[')
                .and_then(|s| s.strip_suffix(']'))
                .unwrap_or(s);
            s.split(',')
                .map(|t| t.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
                .filter(|t| !t.is_empty())
                .collect()
        }
        None => Vec::new(),
    }
}

/// `metadata.hermes` (empty when absent or not a mapping).
pub fn hermes_meta(fields: &Map<String, Value>) -> Map<String, Value> {
    match fields.get("metadata").and_then(|m| m.get("hermes")) {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    }
}

/// The description a listing shows: the header's, else the body's first line that is not a
/// heading, cut to [`DESCRIPTION_MAX`].
pub fn description(fields: &Map<String, Value>, body: &str) -> String {
    let mut d = text_of(fields.get("description")).unwrap_or_default();
    if d.is_empty() {
        d = body
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .unwrap_or("")
            .to_string();
    }
    cut(&d, DESCRIPTION_MAX)
}

/// `s` in at most `max` characters, `...` ending a cut one (Hermes' `s[:max-3] + "..."`).
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(3)).collect();
    out.push_str("...");
    out
}

/// Whether a `platforms` list admits this machine (absent or empty: every platform).
pub fn matches_platform(platforms: &[String]) -> bool {
    let current = std::env::consts::OS;
    platforms.is_empty()
        || platforms.iter().any(|p| {
            let p = p.trim().to_ascii_lowercase();
            let mapped = match p.as_str() {
                "macos" | "darwin" => "macos",
                "windows" | "win32" => "windows",
                other => other,
            };
            mapped == current
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_split_parse_and_refuse() {
        let p = parse("---\nname: a\ndescription: \"x: y\"\n---\n\n# T\nbody\n").unwrap();
        assert_eq!(p.fields["name"], "a");
        assert_eq!(p.fields["description"], "x: y");
        assert_eq!(p.body, "# T\nbody\n");
        let none = parse("# Title\nfirst line\n").unwrap();
        assert!(none.fields.is_empty());
        assert_eq!(description(&none.fields, none.body), "first line");
        assert!(parse("---\nname: a\n").unwrap_err().contains("not closed"));
        assert!(parse("---\nname: [a\n---\nb").is_err());
        assert!(parse("---\n- a\n---\nb").unwrap_err().contains("mapping"));
    }

    #[test]
    fn lists_descriptions_and_platforms() {
        assert_eq!(list_of(Some(&"[a, 'b']".into())), ["a", "b"]);
        assert_eq!(list_of(Some(&serde_json::json!(["x", 2]))), ["x", "2"]);
        assert_eq!(cut("abcdef", 5), "ab...");
        assert!(matches_platform(&[]));
        assert_eq!(
            matches_platform(&["macos".into()]),
            cfg!(target_os = "macos")
        );
        assert_eq!(
            matches_platform(&["windows".into(), "linux".into()]),
            cfg!(target_os = "linux") || cfg!(target_os = "windows")
        );
        assert!(!matches_platform(&["plan9".into()]));
    }
}
