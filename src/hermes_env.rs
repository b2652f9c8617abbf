//! The environment as Hermes sees it: `$HERMES_HOME/.env` over the process's own, `.env`
//! winning (Hermes loads it with override, so a key saved by `hermes setup` beats a stale
//! exported one). Read, never exported: what `.env` holds reaches the model client through
//! [`HermesEnv::get`] and nothing else — no tool's environment, no child's `/proc/<pid>/environ`.
//!
//! The file is parsed as python-dotenv parses it: `export ` prefixes, `#` comments (inline
//! ones after whitespace), single quotes (literal), double quotes (with escapes), quoted values
//! over several lines, `${NAME}` and `${NAME:-default}`.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// Larger files are refused rather than read into memory.
pub const DOTENV_MAX: u64 = 1024 * 1024;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct HermesEnv {
    /// What `.env` set, in file order of first appearance (a later line wins).
    file: HashMap<String, String>,
}

impl HermesEnv {
    /// `$home/.env` (none: an empty overlay). A file that cannot be read is an error.
    pub fn load(home: &Path) -> Result<HermesEnv, String> {
        let path = home.join(".env");
        let text = crate::util::read_regular(&path, DOTENV_MAX)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .unwrap_or_default();
        Ok(HermesEnv::parse(&text, |name| std::env::var(name).ok()))
    }

    /// The overlay a dotenv text makes; `outside` answers `${NAME}` for names the text has
    /// not set (yet).
    pub fn parse(text: &str, outside: impl Fn(&str) -> Option<String>) -> HermesEnv {
        let mut file: HashMap<String, String> = HashMap::new();
        for (key, value) in parse_dotenv(text) {
            let value = match value {
                Value::Literal(v) => v,
                Value::Expand(v) => {
                    expand(&v, |name| file.get(name).cloned().or_else(|| outside(name)))
                }
            };
            file.insert(key, value);
        }
        HermesEnv { file }
    }

    /// `name`: its non-empty `.env` value, else the process's non-empty one (unless
    /// [`withdraw`]n). A secret's
    /// name (`*_API_KEY`, `*_TOKEN`, `*_SECRET`, `*_KEY`) loses any non-ASCII characters, as
    /// Hermes strips them (a pasted key with a stray quote mark still works).
    pub fn get(&self, name: &str) -> Option<String> {
        let value = self
            .file_value(name)
            .map(str::to_string)
            .or_else(|| exported(name))?;
        let secret = ["_API_KEY", "_TOKEN", "_SECRET", "_KEY"]
            .iter()
            .any(|s| name.ends_with(s));
        Some(match secret {
            true => value.chars().filter(char::is_ascii).collect(),
            false => value,
        })
    }

    /// `name` as `.env` sets it, when not empty.
    pub fn file_value(&self, name: &str) -> Option<&str> {
        self.file
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    /// How many variables `.env` sets differently from `before` (added, changed or gone).
    pub fn changes_from(&self, before: &HermesEnv) -> usize {
        let changed = self
            .file
            .iter()
            .filter(|(k, v)| before.file.get(*k) != Some(v));
        let gone = before.file.keys().filter(|k| !self.file.contains_key(*k));
        changed.count() + gone.count()
    }

    /// Whether `.env` sets `name` at all.
    pub fn sets(&self, name: &str) -> bool {
        self.file.contains_key(name)
    }
}

/// `text` with `name` set to `value` as Hermes' `save_env_value` sets it: its first assignment
/// replaced in place (later ones of the same name dropped, since the last would win), else a
/// line appended; every other line kept as written. `value` is printable ASCII without spaces
/// (the caller checks): bare when that reads back the same, else single-quoted.
pub fn with_value(text: &str, name: &str, value: &str) -> String {
    let plain = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.~+/=:@%,".contains(&b));
    let line = match plain {
        true => format!("{name}={value}\n"),
        false => format!(
            "{name}='{}'\n",
            value.replace('\\', "\\\\").replace('\'', "\\'")
        ),
    };
    let mut out = String::with_capacity(text.len() + line.len() + 1);
    let mut copied = 0;
    let mut placed = false;
    for a in assignments(text).into_iter().filter(|a| a.key == name) {
        out.push_str(&text[copied..a.span.start]);
        if !placed {
            out.push_str(&line);
            placed = true;
        }
        copied = a.span.end;
    }
    out.push_str(&text[copied..]);
    if !placed {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&line);
    }
    out
}

/// Set `name` to `value` in `$home/.env` ([`with_value`]). Errors name the file, never the
/// value.
pub fn save(home: &Path, name: &str, value: &str) -> Result<(), String> {
    rewrite(home, |text| Some(with_value(text, name, value))).map(|_| ())
}

/// `text` without any assignment of a name in `names` (each line it spans, a quoted value's
/// later lines too), every other line kept as written: Hermes' `remove_env_value`.
pub fn without(text: &str, names: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for a in assignments(text)
        .into_iter()
        .filter(|a| names.contains(&a.key.as_str()))
    {
        out.push_str(&text[copied..a.span.start]);
        copied = a.span.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Remove every assignment of `names` from `$home/.env` ([`without`]); the names it assigned
/// (none: the file, if any, is left untouched).
pub fn remove<'a>(home: &Path, names: &[&'a str]) -> Result<Vec<&'a str>, String> {
    let mut removed = Vec::new();
    rewrite(home, |text| {
        let set: Vec<String> = assignments(text).into_iter().map(|a| a.key).collect();
        removed = names
            .iter()
            .copied()
            .filter(|n| set.iter().any(|k| k == n))
            .collect();
        (!removed.is_empty()).then(|| without(text, names))
    })?;
    Ok(removed)
}

/// `$home/.env` replaced by what `edit` makes of its text (`None`: left as it is): atomically
/// (a link's target, as Hermes' `hermes setup` leaves it), made 0600. Whether it was written.
fn rewrite(home: &Path, edit: impl FnOnce(&str) -> Option<String>) -> Result<bool, String> {
    let path = home.join(".env");
    let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let text = crate::util::read_regular(&path, DOTENV_MAX)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .unwrap_or_default();
    let Some(next) = edit(&text) else {
        return Ok(false);
    };
    if next.len() as u64 > DOTENV_MAX {
        return Err(format!(
            "{} would grow past {} KiB; refused",
            path.display(),
            DOTENV_MAX / 1024
        ));
    }
    crate::private_file::replace_private(&path, next.as_bytes()).map_err(failed)?;
    Ok(true)
}

/// Names whose exported value no longer counts (Hermes popped them from its environment).
static WITHDRAWN: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());

/// From now on the exported values of `names` are not read ([`HermesEnv::get`]), as Hermes'
/// `remove_env_value` pops them from its own environment.
pub fn withdraw(names: &[&str]) {
    if let Ok(mut withdrawn) = WITHDRAWN.lock() {
        withdrawn.extend(names.iter().map(|n| n.to_string()));
    }
}

/// The process's own non-empty value of `name`, unless withdrawn.
fn exported(name: &str) -> Option<String> {
    let withdrawn = WITHDRAWN.lock().is_ok_and(|n| n.contains(name));
    (!withdrawn)
        .then(|| std::env::var(name).ok())
        .flatten()
        .filter(|v| !v.trim().is_empty())
}

/// A value as written: expanded (`${…}`) unless single-quoted.
#[derive(Debug, PartialEq)]
enum Value {
    Literal(String),
    Expand(String),
}

/// The assignments of a dotenv text, in order; lines that are not assignments are skipped.
fn parse_dotenv(text: &str) -> Vec<(String, Value)> {
    assignments(text)
        .into_iter()
        .map(|a| (a.key, a.value))
        .collect()
}

/// One assignment and the bytes of the text it spans (its lines, through the last newline).
struct Assignment {
    key: String,
    value: Value,
    span: std::ops::Range<usize>,
}

fn assignments(text: &str) -> Vec<Assignment> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let start = text.len() - rest.len();
        let (line_end, next) = match rest.find('\n') {
            Some(i) => (i, i + 1),
            None => (rest.len(), rest.len()),
        };
        let line = rest[..line_end].trim_start();
        let mut consumed = next;
        if let Some(assignment) = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .or(Some(line))
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            && let Some((key, after)) = split_key(assignment)
        {
            // `after` starts inside `rest`; a quoted value may run past this line.
            let offset = after.as_ptr() as usize - rest.as_ptr() as usize;
            if let Some((value, used)) = read_value(&rest[offset..]) {
                consumed = offset + used;
                let span = start..start + consumed.min(rest.len());
                out.push(Assignment { key, value, span });
            }
        }
        rest = &rest[consumed.min(rest.len())..];
    }
    out
}

/// `KEY =` at the start of `line`: the key, and what follows the `=` (spaces skipped).
fn split_key(line: &str) -> Option<(String, &str)> {
    let (key, rest) = if let Some(quoted) = line.strip_prefix('\'') {
        let end = quoted.find('\'')?;
        (&quoted[..end], &quoted[end + 1..])
    } else {
        let end = line
            .find(|c: char| c == '=' || c == '#' || c.is_whitespace())
            .unwrap_or(line.len());
        (&line[..end], &line[end..])
    };
    let rest = rest.trim_start_matches([' ', '\t']).strip_prefix('=')?;
    (!key.is_empty()).then(|| (key.to_string(), rest.trim_start_matches([' ', '\t'])))
}

/// The value at the start of `text` and how many bytes of `text` it used (through its line's
/// end); `None` for a malformed value (text after a closing quote), whose line is skipped.
fn read_value(text: &str) -> Option<(Value, usize)> {
    let line_end = text.find('\n').map_or(text.len(), |i| i + 1);
    let Some(quote @ ('\'' | '"')) = text.chars().next() else {
        let line = text[..line_end].trim_end_matches(['\n', '\r']);
        // A `#` after whitespace starts a comment.
        let mut end = line.len();
        for (i, c) in line.char_indices() {
            if c == '#' && line[..i].ends_with([' ', '\t']) {
                end = i;
                break;
            }
        }
        return Some((Value::Expand(line[..end].trim_end().to_string()), line_end));
    };
    let mut value = String::new();
    let mut chars = text[1..].char_indices();
    let close = loop {
        let (i, c) = chars.next()?;
        match c {
            c if c == quote => break 1 + i + 1,
            '\\' => {
                let (_, e) = chars.next()?;
                let unescaped = match (quote, e) {
                    (_, '\\') => Some('\\'),
                    (_, '\'') => Some('\''),
                    ('"', '"') => Some('"'),
                    ('"', 'n') => Some('\n'),
                    ('"', 't') => Some('\t'),
                    ('"', 'r') => Some('\r'),
                    ('"', 'a') => Some('\x07'),
                    ('"', 'b') => Some('\x08'),
                    ('"', 'f') => Some('\x0c'),
                    ('"', 'v') => Some('\x0b'),
                    _ => None,
                };
                match unescaped {
                    Some(u) => value.push(u),
                    None => {
                        value.push('\\');
                        value.push(e);
                    }
                }
            }
            c => value.push(c),
        }
    };
    // After the closing quote: only blanks and a comment may follow on the line.
    let after_end = text[close..]
        .find('\n')
        .map_or(text.len(), |i| close + i + 1);
    let after = text[close..after_end].trim();
    if !after.is_empty() && !after.starts_with('#') {
        return None;
    }
    let value = match quote {
        '\'' => Value::Literal(value),
        _ => Value::Expand(value),
    };
    Some((value, after_end))
}

/// `${NAME}` and `${NAME:-default}` replaced by `lookup`'s answer (empty when it has none);
/// `$NAME` without braces stays as written.
fn expand(value: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        out.push_str(&rest[..start]);
        let inner = &rest[start + 2..start + 2 + len];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let found = lookup(name.trim()).filter(|v| !v.is_empty());
        out.push_str(&found.or(default.map(str::to_string)).unwrap_or_default());
        rest = &rest[start + 2 + len + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(text: &str) -> HermesEnv {
        HermesEnv::parse(text, |n| (n == "OUTSIDE").then(|| "out".to_string()))
    }

    fn get<'a>(e: &'a HermesEnv, k: &str) -> Option<&'a str> {
        e.file.get(k).map(String::as_str)
    }

    #[test]
    fn python_dotenv_lines() {
        let e = env(
            "# comment\n\nexport A=1\nB = \"two # x\"\nC='3'\nD=4 # note\nE=a#b\n\
             not a line\n=x\nF=\nG=\"line1\nline2\"\nH='${A}'\nI=${A}-${NOPE:-dflt}-${OUTSIDE}\n\
             J=\"x\\ny\\\"\" # c\nK=\"bad\" trailing\nL=$A\n  M  =  spaced  \n'N'=quoted key\n",
        );
        assert_eq!(get(&e, "A"), Some("1"));
        assert_eq!(get(&e, "B"), Some("two # x"));
        assert_eq!(get(&e, "C"), Some("3"));
        assert_eq!(get(&e, "D"), Some("4"));
        assert_eq!(get(&e, "E"), Some("a#b"));
        assert_eq!(get(&e, "F"), Some(""));
        assert_eq!(get(&e, "G"), Some("line1\nline2"));
        assert_eq!(get(&e, "H"), Some("${A}"));
        assert_eq!(get(&e, "I"), Some("1-dflt-out"));
        assert_eq!(get(&e, "J"), Some("x\ny\""));
        assert_eq!(get(&e, "K"), None);
        assert_eq!(get(&e, "L"), Some("$A"));
        assert_eq!(get(&e, "M"), Some("spaced"));
        assert_eq!(get(&e, "N"), Some("quoted key"));
        assert!(!e.sets("not"));
        assert_eq!(e.file.len(), 13, "{:?}", e.file);
    }

    #[test]
    fn an_unclosed_quote_or_odd_bytes_end_nothing_badly() {
        for text in [
            "A=\"never closed\nB=2\n",
            "A='\\",
            "\u{feff}A=1",
            "A=\"\\",
            "=",
            "'",
        ] {
            let _ = env(text);
        }
        // A value whose quote never closes is skipped; the next line is read as usual.
        let e = env("A=\"open\nB=2\n");
        assert_eq!((get(&e, "A"), get(&e, "B")), (None, Some("2")));
    }

    #[test]
    fn a_saved_value_replaces_its_line_keeps_the_others_and_reads_back() {
        let text = "# keys\nexport A_KEY=old # note\nB=\"two\nlines\"\nA_KEY=older\nC=3";
        let next = with_value(text, "A_KEY", "sk-new_1.2");
        assert_eq!(next, "# keys\nA_KEY=sk-new_1.2\nB=\"two\nlines\"\nC=3");
        let next = with_value(&next, "D_KEY", "it's\\#${x} ");
        assert!(next.starts_with("# keys\nA_KEY=sk-new_1.2\n"), "{next}");
        let e = env(&next);
        assert_eq!(get(&e, "D_KEY"), Some("it's\\#${x} "));
        assert_eq!(get(&e, "B"), Some("two\nlines"));
        assert_eq!(get(&e, "C"), Some("3"));
        assert_eq!(with_value("", "K", "v"), "K=v\n");
        // A line inside a quoted value is not an assignment.
        let text = "Q=\"a\nK=inside\"\n";
        assert_eq!(with_value(text, "K", "v"), format!("{text}K=v\n"));
    }

    #[test]
    fn a_removed_name_leaves_every_assignment_and_nothing_else() {
        let text = "# keys\nexport A_KEY=old # note\nB=\"two\nA_KEY=inside\"\nA_KEY='x'\nC=3";
        assert_eq!(
            without(text, &["A_KEY"]),
            "# keys\nB=\"two\nA_KEY=inside\"\nC=3"
        );
        assert_eq!(without(text, &["A_KEY", "C", "B"]), "# keys\n");
        assert_eq!(without(text, &["NONE"]), text);
        let e = env(&without(text, &["A_KEY"]));
        assert_eq!((get(&e, "A_KEY"), get(&e, "C")), (None, Some("3")));
    }

    #[test]
    fn the_file_wins_unless_empty_and_secrets_lose_non_ascii() {
        // PATH is always set in the process.
        let e = env("PATH=\nX_API_KEY=\u{201c}sk-abc\u{201d}\n");
        assert_eq!(e.get("PATH"), std::env::var("PATH").ok());
        assert_eq!(e.get("X_API_KEY").as_deref(), Some("sk-abc"));
        let e = env("PATH=/only/this\n");
        assert_eq!(e.get("PATH").as_deref(), Some("/only/this"));
    }
}
