//! `$HERMES_HOME/config.yaml`: read bounded and parsed defensively (size, nesting and alias
//! expansion are limited, a parser panic is caught), and single keys edited in place, so the rest
//! of the user's file — comments, order, spacing — stays byte for byte.
//!
//! Editing works on lines: the key's line is rewritten (its trailing comment kept), a missing key
//! or section is appended at the end of its parent section. Every edit is checked by parsing the
//! result and comparing it with the old document changed structurally the same way; anything
//! else (a flow-style `{…}` section, several documents, a file that does not parse) is refused
//! and the file is left as it was.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use yaml_rust2::Yaml;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};
use yaml_rust2::yaml::Hash;

/// A config.yaml larger than this is refused (read and written).
pub const MAX_BYTES: u64 = 1024 * 1024;
/// Nodes a document may expand to, aliases counted at their full size ("billion laughs").
const MAX_NODES: u64 = 200_000;
/// Deepest nesting of sequences and mappings.
const MAX_DEPTH: usize = 64;

pub fn path(home: &Path) -> PathBuf {
    home.join("config.yaml")
}

/// The file's text; `Ok(None)` when there is none.
pub fn read_text(path: &Path) -> Result<Option<String>, String> {
    crate::util::read_regular(path, MAX_BYTES)
        .map_err(|e| format!("config.yaml: cannot read it: {e}"))
}

/// Builds the documents in one pass over the parser's events, counting what each would
/// expand to as it goes: past a limit it stops building (an alias is never copied once the
/// count is over), so a hostile document costs its parse and no more.
#[derive(Default)]
struct Loader {
    /// Open collections: (nodes so far, anchor id).
    stack: Vec<(u64, usize)>,
    anchors: HashMap<usize, u64>,
    too_big: bool,
    too_deep: bool,
    /// The documents built, and the nodes being built with their anchor ids.
    docs: Vec<Yaml>,
    building: Vec<(Yaml, usize)>,
    /// Per open mapping, the key whose value comes next (`BadValue`: a key comes next).
    keys: Vec<Yaml>,
    nodes: HashMap<usize, Yaml>,
    /// A duplicated key (as the crate's own loader refuses it).
    error: Option<yaml_rust2::ScanError>,
}

impl Loader {
    fn add(&mut self, n: u64) {
        match self.stack.last_mut() {
            Some(top) => {
                top.0 = top.0.saturating_add(n);
                self.too_big |= top.0 > MAX_NODES;
            }
            None => self.too_big |= n > MAX_NODES,
        }
    }

    /// Count the event; then build with it unless a limit or an error stopped the building.
    fn count(&mut self, ev: &Event) {
        match ev {
            Event::SequenceStart(aid, _) | Event::MappingStart(aid, _) => {
                self.stack.push((1, *aid));
                self.too_deep |= self.stack.len() > MAX_DEPTH;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((size, aid)) = self.stack.pop() {
                    if aid > 0 {
                        self.anchors.insert(aid, size);
                    }
                    self.add(size);
                }
            }
            Event::Scalar(_, _, aid, _) => {
                if *aid > 0 {
                    self.anchors.insert(*aid, 1);
                }
                self.add(1);
            }
            Event::Alias(id) => {
                let size = self.anchors.get(id).copied().unwrap_or(1);
                self.add(size);
            }
            _ => {}
        }
    }

    fn build(&mut self, ev: Event, mark: Marker) {
        match ev {
            Event::DocumentEnd => match self.building.pop() {
                Some((node, _)) => self.docs.push(node),
                None => self.docs.push(Yaml::BadValue),
            },
            Event::SequenceStart(aid, _) => self.building.push((Yaml::Array(Vec::new()), aid)),
            Event::MappingStart(aid, _) => {
                self.building.push((Yaml::Hash(Hash::new()), aid));
                self.keys.push(Yaml::BadValue);
            }
            Event::SequenceEnd => {
                if let Some(node) = self.building.pop() {
                    self.insert(node, mark);
                }
            }
            Event::MappingEnd => {
                self.keys.pop();
                if let Some(node) = self.building.pop() {
                    self.insert(node, mark);
                }
            }
            Event::Scalar(v, style, aid, tag) => {
                let node = scalar(v, style, tag);
                self.insert((node, aid), mark);
            }
            Event::Alias(id) => {
                let node = self.nodes.get(&id).cloned().unwrap_or(Yaml::BadValue);
                self.insert((node, 0), mark);
            }
            _ => {}
        }
    }

    fn insert(&mut self, (node, aid): (Yaml, usize), mark: Marker) {
        if aid > 0 {
            self.nodes.insert(aid, node.clone());
        }
        let Some(parent) = self.building.last_mut() else {
            self.building.push((node, aid));
            return;
        };
        match &mut parent.0 {
            Yaml::Array(items) => items.push(node),
            Yaml::Hash(h) => {
                let Some(key) = self.keys.last_mut() else {
                    return;
                };
                if key.is_badvalue() {
                    *key = node;
                } else {
                    let key = std::mem::replace(key, Yaml::BadValue);
                    if h.insert(key, node).is_some()
                        && let Some((k, _)) = h.back()
                    {
                        self.error = Some(yaml_rust2::ScanError::new_string(
                            mark,
                            format!("{k:?}: duplicated key in mapping"),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
}

/// A scalar as the crate's loader resolves it: quoted ones are strings, plain ones typed by
/// their text or their core-schema tag.
fn scalar(v: String, style: TScalarStyle, tag: Option<Tag>) -> Yaml {
    if style != TScalarStyle::Plain {
        return Yaml::String(v);
    }
    let Some(tag) = tag else {
        return Yaml::from_str(&v);
    };
    if tag.handle != "tag:yaml.org,2002:" {
        return Yaml::String(v);
    }
    match tag.suffix.as_str() {
        "bool" => match v.as_str() {
            "true" | "True" | "TRUE" => Yaml::Boolean(true),
            "false" | "False" | "FALSE" => Yaml::Boolean(false),
            _ => Yaml::BadValue,
        },
        "int" => v.parse::<i64>().map_or(Yaml::BadValue, Yaml::Integer),
        "float" if is_float(&v) => Yaml::Real(v),
        "float" => Yaml::BadValue,
        "null" => match v.as_str() {
            "~" | "null" => Yaml::Null,
            _ => Yaml::BadValue,
        },
        _ => Yaml::String(v),
    }
}

/// Whether `!!float` admits `v` (the crate's rule: YAML's infinities and NaN, or Rust's float
/// syntax with a digit in it).
fn is_float(v: &str) -> bool {
    matches!(
        v,
        ".inf"
            | ".Inf"
            | ".INF"
            | "+.inf"
            | "+.Inf"
            | "+.INF"
            | "-.inf"
            | "-.Inf"
            | "-.INF"
            | ".nan"
            | ".NaN"
            | ".NAN"
    ) || (v.bytes().any(|b| b.is_ascii_digit()) && v.parse::<f64>().is_ok())
}

impl MarkedEventReceiver for Loader {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        self.count(&ev);
        if !(self.too_big || self.too_deep || self.error.is_some()) {
            self.build(ev, mark);
        }
    }
}

/// The first document of `text` (`Yaml::Null` when empty), refused when hostile.
pub fn parse(text: &str) -> Result<Yaml, String> {
    parse_named(text, "config.yaml")
}

/// [`parse`] for any YAML text (a SKILL.md header, a skill bundle): errors name `what`.
/// One pass: the limits are counted while the document is built.
pub fn parse_named(text: &str, what: &str) -> Result<Yaml, String> {
    let result = std::panic::catch_unwind(|| {
        let mut loader = Loader::default();
        Parser::new_from_str(text)
            .load(&mut loader, true)
            .map_err(|e| format!("{what}: {e}"))?;
        if loader.too_deep {
            return Err(format!(
                "{what} nests deeper than {MAX_DEPTH} levels; refused"
            ));
        }
        if loader.too_big {
            return Err(format!(
                "{what} expands to more than {MAX_NODES} nodes (aliases counted); refused"
            ));
        }
        if let Some(e) = loader.error {
            return Err(format!("{what}: {e}"));
        }
        Ok(loader.docs.into_iter().next().unwrap_or(Yaml::Null))
    });
    result.unwrap_or_else(|_| Err(format!("{what} could not be parsed")))
}

/// The parsed config.yaml of `home` (`Yaml::Null` when there is none).
pub fn load(home: &Path) -> Result<Yaml, String> {
    match read_text(&path(home))? {
        Some(text) => parse(&text),
        None => Ok(Yaml::Null),
    }
}

/// The node at a dotted path (`display.sections`), `Yaml::BadValue` when absent.
pub fn lookup<'a>(doc: &'a Yaml, dotted: &str) -> &'a Yaml {
    dotted.split('.').fold(doc, |node, key| &node[key])
}

/// A trimmed, non-empty string at a dotted path.
pub fn string_at(doc: &Yaml, dotted: &str) -> Option<String> {
    match lookup(doc, dotted) {
        Yaml::String(s) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Real(r) => Some(r.clone()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A YAML value read as a boolean the way Hermes reads one (`"false"` is false).
pub fn flag(v: &Yaml) -> Option<bool> {
    match v {
        Yaml::Boolean(b) => Some(*b),
        Yaml::Integer(0) => Some(false),
        Yaml::Integer(1) => Some(true),
        Yaml::String(s) => flag_text(s),
        _ => None,
    }
}

/// A yes/no written as text (`true`, `yes`, `on`, `1` and their opposites, any case): config.yaml's
/// quoted flags and the on/off knobs alike.
pub fn flag_text(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// Keys whose values are never shown back (`config.get full`).
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("api_key") || k.contains("token") || k.contains("secret") || k == "password"
}

/// The document as JSON, secret values replaced by `"***"`.
pub fn to_json(y: &Yaml) -> Value {
    json_of(y, true)
}

/// The document as JSON, every value as written (a skill's header).
pub fn to_json_plain(y: &Yaml) -> Value {
    json_of(y, false)
}

fn json_of(y: &Yaml, mask: bool) -> Value {
    match y {
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| Value::String(r.clone()), Value::Number),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(a) => Value::Array(a.iter().map(|v| json_of(v, mask)).collect()),
        Yaml::Hash(h) => {
            let mut m = serde_json::Map::new();
            for (k, v) in h {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    Yaml::Real(r) => r.clone(),
                    _ => continue,
                };
                let value = if mask && is_secret_key(&key) && !v.is_null() {
                    Value::String("***".into())
                } else {
                    json_of(v, mask)
                };
                m.insert(key, value);
            }
            Value::Object(m)
        }
        Yaml::Alias(_) | Yaml::Null | Yaml::BadValue => Value::Null,
    }
}

/// A value the gateway writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Str(String),
    Bool(bool),
}

impl Scalar {
    pub fn str(s: &str) -> Scalar {
        Scalar::Str(s.to_string())
    }

    fn yaml(&self) -> Yaml {
        match self {
            Scalar::Str(s) => Yaml::String(s.clone()),
            Scalar::Bool(b) => Yaml::Boolean(*b),
        }
    }

    /// YAML text: plain when it reads back as the same string, else double-quoted (JSON
    /// escaping is valid YAML).
    fn text(&self) -> String {
        match self {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Str(s) => {
                let plain = !s.is_empty()
                    && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-./@+".contains(c))
                    && matches!(Yaml::from_str(s), Yaml::String(_));
                if plain {
                    s.clone()
                } else {
                    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
                }
            }
        }
    }
}

/// One change: set the dotted key to a value, or remove it (`None`).
pub type Edit<'a> = (&'a str, Option<Scalar>);

/// Apply `edits` to the file in `home`, in place, atomically. Nothing is written on error.
pub fn update(home: &Path, edits: &[Edit<'_>]) -> Result<(), String> {
    let file = path(home);
    let old = read_text(&file)?.unwrap_or_default();
    let mut doc = parse(&old).map_err(|e| format!("{e}; not changed"))?;
    let mut text = old.clone();
    for (dotted, value) in edits {
        let keys: Vec<&str> = dotted.split('.').collect();
        text = edit_text(&text, &keys, value.as_ref())?;
        set_structurally(&mut doc, &keys, value.as_ref())?;
    }
    if text == old {
        return Ok(());
    }
    if text.len() as u64 > MAX_BYTES {
        return Err("config.yaml would grow past its size limit; not changed".into());
    }
    let got = parse(&text).map_err(|e| format!("editing config.yaml failed ({e}); not changed"))?;
    if got != doc {
        return Err(
            "config.yaml is laid out in a way this gateway cannot edit in place; not changed"
                .into(),
        );
    }
    // A user's config.yaml often links into their dotfiles: the link's target is replaced.
    crate::private_file::replace_keeping_mode(&file, text.as_bytes(), 0o600)
        .map_err(|e| format!("cannot write config.yaml: {e}"))
}

/// The same edit on the parsed document, for checking the text edit.
fn set_structurally(doc: &mut Yaml, keys: &[&str], value: Option<&Scalar>) -> Result<(), String> {
    if doc.is_null() {
        if value.is_none() {
            return Ok(());
        }
        *doc = Yaml::Hash(Hash::new());
    }
    let Yaml::Hash(h) = doc else {
        return Err("config.yaml: a section to edit is not a mapping; not changed".into());
    };
    let key = Yaml::String(keys[0].to_string());
    if keys.len() == 1 {
        match value {
            Some(v) => match h.get_mut(&key) {
                Some(slot) => *slot = v.yaml(),
                None => {
                    h.insert(key, v.yaml());
                }
            },
            None => {
                h.remove(&key);
            }
        }
        return Ok(());
    }
    if !h.contains_key(&key) {
        if value.is_none() {
            return Ok(());
        }
        h.insert(key.clone(), Yaml::Hash(Hash::new()));
    }
    let child = h.get_mut(&key).ok_or("config.yaml: lost a section")?;
    set_structurally(child, &keys[1..], value)
}

// ---- the line editor ----

/// A line that opens a mapping entry: its indent, key, and where the value starts.
struct KeyLine {
    indent: usize,
    key: String,
    value_at: usize,
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Blank or comment-only: no part of the structure.
fn is_filler(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

fn parse_key_line(line: &str) -> Option<KeyLine> {
    let indent = indent_of(line);
    let rest = &line[indent..];
    let (key, after) = if let Some(q) = rest.strip_prefix('"') {
        let end = q.find('"')?;
        (q[..end].to_string(), indent + 1 + end + 1)
    } else if let Some(q) = rest.strip_prefix('\'') {
        let end = q.find('\'')?;
        (q[..end].to_string(), indent + 1 + end + 1)
    } else {
        let first = rest.chars().next()?;
        if "-?#[]{}&*!|>%@`,\"'".contains(first) {
            return None;
        }
        let bytes = rest.as_bytes();
        let mut end = None;
        for i in 0..bytes.len() {
            if bytes[i] == b':'
                && bytes
                    .get(i + 1)
                    .is_none_or(|b| *b == b' ' || *b == b'\n' || *b == b'\r')
            {
                end = Some(i);
                break;
            }
            if bytes[i] == b'#' && i > 0 && bytes[i - 1] == b' ' {
                return None;
            }
        }
        let end = end?;
        (rest[..end].trim_end().to_string(), indent + end)
    };
    let tail = &line[after..];
    let colon = tail.strip_prefix(':')?;
    if !(colon.is_empty() || colon.starts_with([' ', '\n', '\r'])) {
        return None;
    }
    Some(KeyLine {
        indent,
        key,
        value_at: after + 1,
    })
}

/// The inline value of a key line (comment and line end cut) and the comment (with the
/// spaces before it).
fn split_value(rest: &str) -> (&str, &str) {
    let body = rest.trim_end_matches(['\n', '\r']);
    let (mut single, mut double, mut prev_space) = (false, false, true);
    for (i, c) in body.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_space => {
                let start = body[..i].trim_end().len();
                return (body[..start].trim(), &body[start..]);
            }
            _ => {}
        }
        prev_space = c == ' ' || c == '\t';
    }
    (body.trim(), "")
}

/// End (exclusive) of the entry opened at `at`: its value's lines, not the filler after them.
fn entry_end(lines: &[String], at: usize, end: usize, indent: usize, inline_empty: bool) -> usize {
    let mut last = at;
    for (i, line) in lines.iter().enumerate().take(end).skip(at + 1) {
        if is_filler(line) {
            continue;
        }
        let ind = indent_of(line);
        let list_item = ind == indent && line[ind..].starts_with('-') && inline_empty;
        if ind <= indent && !list_item {
            break;
        }
        last = i;
    }
    last + 1
}

fn end_of_content(lines: &[String], start: usize, end: usize) -> usize {
    (start..end)
        .rev()
        .find(|&i| !is_filler(&lines[i]))
        .map_or(start, |i| i + 1)
}

/// New lines for `keys` = `value` at `indent`, nested two spaces per level.
fn new_lines(keys: &[&str], value: &Scalar, indent: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (depth, key) in keys.iter().enumerate() {
        let pad = " ".repeat(indent + 2 * depth);
        let key = Scalar::str(key).text();
        if depth + 1 == keys.len() {
            out.push(format!("{pad}{key}: {}\n", value.text()));
        } else {
            out.push(format!("{pad}{key}:\n"));
        }
    }
    out
}

/// Set (or remove) `keys` within `lines[start..end]`, whose entries are indented deeper than
/// `parent` (`None` at the top level).
fn edit_block(
    lines: &mut Vec<String>,
    start: usize,
    end: usize,
    parent: Option<usize>,
    keys: &[&str],
    value: Option<&Scalar>,
) -> Result<(), String> {
    let first = (start..end).find(|&i| !is_filler(&lines[i]));
    let child_indent = match first {
        Some(i) => indent_of(&lines[i]),
        None => parent.map_or(0, |p| p + 2),
    };
    if parent.is_some_and(|p| child_indent <= p) {
        return Err("config.yaml: a section to edit is not a mapping; not changed".into());
    }
    let mut found = None;
    for (i, line) in lines.iter().enumerate().take(end).skip(start) {
        if is_filler(line) || indent_of(line) != child_indent {
            continue;
        }
        match parse_key_line(line) {
            Some(k) if k.key == keys[0] => {
                found = Some((i, k));
                break;
            }
            Some(_) => {}
            None if line[child_indent..].starts_with('-') => {
                return Err("config.yaml: a section to edit is a list; not changed".into());
            }
            None => {}
        }
    }
    let Some((at, k)) = found else {
        let Some(value) = value else { return Ok(()) };
        let insert_at = end_of_content(lines, start, end);
        if insert_at > 0 && !lines[insert_at - 1].ends_with('\n') {
            lines[insert_at - 1].push('\n');
        }
        for (n, l) in new_lines(keys, value, child_indent).into_iter().enumerate() {
            lines.insert(insert_at + n, l);
        }
        return Ok(());
    };
    let (inline, comment) = {
        let (v, c) = split_value(&lines[at][k.value_at..]);
        (v.to_string(), c.to_string())
    };
    let stop = entry_end(lines, at, end, k.indent, inline.is_empty());
    let eol = if lines[at].ends_with('\n') { "\n" } else { "" };
    if keys.len() == 1 {
        match value {
            Some(v) => {
                let head = lines[at][..k.value_at].to_string();
                lines[at] = format!("{head} {}{comment}{eol}", v.text());
                lines.drain(at + 1..stop);
            }
            None => {
                lines.drain(at..stop);
            }
        }
        return Ok(());
    }
    match inline.as_str() {
        "" => {}
        "{}" | "~" | "null" => {
            if value.is_none() {
                return Ok(());
            }
            let head = lines[at][..k.value_at].to_string();
            lines[at] = format!("{head}{comment}\n");
        }
        _ => {
            return Err(format!(
                "config.yaml: `{}` is written inline ({inline}); edit it by hand; not changed",
                keys[0]
            ));
        }
    }
    edit_block(lines, at + 1, stop, Some(k.indent), &keys[1..], value)
}

/// `text` with `keys` set to `value` (or removed), everything else untouched.
pub fn edit_text(text: &str, keys: &[&str], value: Option<&Scalar>) -> Result<String, String> {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    let mut start = 0;
    let mut seen_content = false;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_end();
        if t == "---" || t.starts_with("--- ") || t == "..." || t.starts_with('%') {
            if seen_content {
                return Err(
                    "config.yaml holds several documents; edit it by hand; not changed".into(),
                );
            }
            start = i + 1;
        } else if !is_filler(line) {
            seen_content = true;
        }
    }
    if let Some(i) = (start..lines.len()).find(|&i| !is_filler(&lines[i]))
        && (lines[i].trim_start().starts_with('{') || lines[i].trim_start().starts_with('-'))
    {
        return Err("config.yaml is not a block mapping; edit it by hand; not changed".into());
    }
    let end = lines.len();
    edit_block(&mut lines, start, end, None, keys, value)?;
    Ok(lines.concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use yaml_rust2::YamlLoader;

    fn set(text: &str, key: &str, v: &str) -> String {
        let keys: Vec<&str> = key.split('.').collect();
        edit_text(text, &keys, Some(&Scalar::str(v))).unwrap()
    }

    #[test]
    fn a_leaf_is_rewritten_in_place_with_its_comment() {
        let text = "# top\nmodel:\n  default: a   # mine\n  provider: x\n\ndisplay:\n  skin: s\n";
        assert_eq!(
            set(text, "model.default", "b"),
            "# top\nmodel:\n  default: b   # mine\n  provider: x\n\ndisplay:\n  skin: s\n"
        );
    }

    #[test]
    fn missing_keys_and_sections_are_appended_where_they_belong() {
        let text = "model:\n  default: a\n\n# display follows\ndisplay:\n    skin: s\n# tail\n";
        assert_eq!(
            set(text, "display.busy_input_mode", "queue"),
            "model:\n  default: a\n\n# display follows\ndisplay:\n    skin: s\n    busy_input_mode: queue\n# tail\n"
        );
        assert_eq!(
            set(text, "display.sections.tools", "expanded"),
            "model:\n  default: a\n\n# display follows\ndisplay:\n    skin: s\n    sections:\n      tools: expanded\n# tail\n"
        );
        assert_eq!(set("", "a.b", "c"), "a:\n  b: c\n");
        assert_eq!(set("x: 1", "a", "c"), "x: 1\na: c\n");
        assert_eq!(
            set("display: {}\n", "display.skin", "s"),
            "display:\n  skin: s\n"
        );
    }

    #[test]
    fn a_block_value_is_replaced_and_a_key_removed() {
        let text = "a:\n  b:\n    - 1\n    - 2\n  c: 3\n";
        assert_eq!(set(text, "a.b", "x"), "a:\n  b: x\n  c: 3\n");
        assert_eq!(
            edit_text(text, &["a", "c"], None).unwrap(),
            "a:\n  b:\n    - 1\n    - 2\n"
        );
    }

    #[test]
    fn values_are_quoted_when_plain_would_change_them() {
        assert_eq!(Scalar::str("gpt-4o").text(), "gpt-4o");
        assert_eq!(Scalar::str("true").text(), "\"true\"");
        assert_eq!(Scalar::str("12").text(), "\"12\"");
        assert_eq!(Scalar::str("a: b # c").text(), "\"a: b # c\"");
        assert_eq!(Scalar::Bool(true).text(), "true");
    }

    #[test]
    fn layouts_it_cannot_edit_are_refused() {
        assert!(
            edit_text(
                "display: {skin: s}\n",
                &["display", "x"],
                Some(&Scalar::str("y"))
            )
            .is_err()
        );
        assert!(edit_text("- a\n- b\n", &["x"], Some(&Scalar::str("y"))).is_err());
        assert!(edit_text("a: 1\n---\nb: 2\n", &["x"], Some(&Scalar::str("y"))).is_err());
    }

    #[test]
    fn hostile_documents_are_refused_not_expanded() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..9 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("l{}", i - 1)
            };
            bomb.push_str(&format!(
                "l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        assert!(parse(&bomb).unwrap_err().contains("expands"));
        let deep = format!("a: {}{}\n", "[".repeat(500), "]".repeat(500));
        assert!(parse(&deep).is_err());
        assert!(parse("a: [unclosed").is_err());
    }

    #[test]
    fn the_one_pass_loader_builds_what_the_crate_loader_builds() {
        let docs = [
            "",
            "a: 1\nb: [x, 2, 3.5, true, ~, 0x1f, +7, .inf]\nc:\n  d: {e: 'q', f: \"r\"}\n",
            "a: &x {k: [1, 2]}\nb: *x\nc: *x\n",
            "- !!str 12\n- !!int 3\n- !!int x\n- !!float 1e3\n- !!float x\n- !!bool True\n- !!null ~\n- !!bool maybe\n- !custom v\n",
            "? [complex, key]\n: v\nplain: value\n",
            "name: a\n---\nname: b\n",
            "text: |\n  two\n  lines\nfolded: >\n  one\n  line\n",
            "nested:\n  - a: 1\n    b: [c, {d: e}]\n  - *undefined_is_an_error\n",
        ];
        for text in docs {
            let crate_loader = YamlLoader::load_from_str(text)
                .map(|d| d.into_iter().next().unwrap_or(Yaml::Null))
                .map_err(|e| format!("config.yaml: {e}"));
            assert_eq!(parse(text), crate_loader, "{text:?}");
        }
        // A duplicated key is refused as the crate's loader refuses it, with its words.
        let text = "a: 1\nb: 2\na: 3\n";
        let theirs = YamlLoader::load_from_str(text).unwrap_err();
        assert_eq!(parse(text).unwrap_err(), format!("config.yaml: {theirs}"));
    }

    #[test]
    fn secrets_are_not_shown() {
        let doc = parse("model:\n  api_key: sk-1\n  default: m\n").unwrap();
        let v = to_json(&doc);
        assert_eq!(v["model"]["api_key"], "***");
        assert_eq!(v["model"]["default"], "m");
    }
}
