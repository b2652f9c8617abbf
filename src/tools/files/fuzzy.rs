//! Find-and-replace that forgives what models get wrong in `old_string`: a chain of matchers
//! from exact to loose (Hermes' order: exact, line-trimmed, whitespace-normalised,
//! indentation-flexible, escape-normalised, unicode-normalised, block-anchor). The first
//! matcher that finds anything decides; more than one match is an error unless all are to be
//! replaced. A loose match re-indents `new_string` to the file's indentation.

use super::text::{Span, Text};

/// Bytes of the content an exact matcher looks through in one unit of work.
const WINDOW: usize = 1 << 20;
/// Line starts a line matcher tries in one unit of work.
const LINES: usize = 4096;

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn unicode_ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\u{201c}' | '\u{201d}' => out.push('"'),
            '\u{2018}' | '\u{2019}' => out.push('\''),
            '\u{2014}' => out.push_str("--"),
            '\u{2013}' => out.push('-'),
            '\u{2026}' => out.push_str("..."),
            '\u{00a0}' => out.push(' '),
            c => out.push(c),
        }
    }
    out.trim().to_string()
}

fn leading_ws(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

fn first_meaningful(text: &str) -> Option<&str> {
    text.lines().find(|l| !l.trim().is_empty())
}

/// `new` moved from `old`'s indentation to that of the region it replaces: each indent of
/// `old` maps to the indent of the file line it matched; other indents scale by the ratio of
/// the first pair that differs.
fn reindent(region: &str, old: &str, new: &str) -> String {
    let mut map: Vec<(&str, &str)> = Vec::new();
    let mut scale: Option<(usize, usize, char)> = None;
    for (theirs, ours) in region.split('\n').zip(old.split('\n')) {
        if theirs.trim().is_empty() || ours.trim().is_empty() {
            continue;
        }
        let (t, o) = (leading_ws(theirs), leading_ws(ours));
        if !map.iter().any(|(k, _)| *k == o) {
            map.push((o, t));
        }
        if t != o && scale.is_none() && !o.is_empty() {
            scale = Some((t.len(), o.len(), t.chars().next().unwrap_or(' ')));
        }
    }
    if map.iter().all(|(o, t)| o == t) {
        return new.to_string();
    }
    new.split('\n')
        .map(|line| {
            if line.trim().is_empty() {
                return line.to_string();
            }
            let ws = leading_ws(line);
            let indent = match (map.iter().find(|(o, _)| *o == ws), scale) {
                (Some((_, t)), _) => t.to_string(),
                (None, Some((t, o, unit))) => unit.to_string().repeat(ws.len() * t / o),
                (None, None) => ws.to_string(),
            };
            format!("{indent}{}", &line[ws.len()..])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A successful replacement.
#[derive(Debug)]
pub struct Replaced {
    pub content: String,
    pub count: usize,
    /// Which matcher took (the tests read it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub strategy: &'static str,
}

/// The matchers of the chain, in order.
const STRATEGIES: [&str; 7] = [
    "exact",
    "line_trimmed",
    "whitespace_normalized",
    "indentation_flexible",
    "escape_normalized",
    "unicode_normalized",
    "block_anchor",
];

fn norm_of(strategy: usize) -> fn(&str) -> String {
    match strategy {
        1 => |l| l.trim().to_string(),
        2 => collapse_ws,
        3 => |l| l.trim_start().to_string(),
        _ => unicode_ascii,
    }
}

/// What the chain decided: the spans to replace and what replaces each.
#[derive(Debug)]
pub struct Decided {
    pub edits: Vec<(Span, String)>,
    pub strategy: &'static str,
}

/// The chain run on a text a unit at a time (a window of bytes or a run of lines), so a big
/// file is matched across steps with the results of a run at once.
pub struct Finder {
    old: String,
    new: String,
    all: bool,
    unescaped: String,
    strategy: usize,
    /// Where the current matcher goes on: a byte (exact) or a line (the others).
    cursor: usize,
    spans: Vec<Span>,
    /// The pattern's lines as the current line matcher normalises them.
    want: Vec<String>,
    started: bool,
}

impl Finder {
    pub fn new(old: &str, new: &str, all: bool) -> Result<Finder, String> {
        if old.is_empty() {
            return Err("old_string cannot be empty".into());
        }
        if old == new {
            return Err("old_string and new_string are identical".into());
        }
        Ok(Finder {
            old: old.to_string(),
            new: new.to_string(),
            all,
            unescaped: old.replace("\\n", "\n").replace("\\t", "\t"),
            strategy: 0,
            cursor: 0,
            spans: Vec::new(),
            want: Vec::new(),
            started: false,
        })
    }

    /// Match on until `out_of_time`: what to replace once the chain has decided, or why
    /// nothing is.
    pub fn advance(
        &mut self,
        text: &Text,
        out_of_time: &dyn Fn() -> bool,
    ) -> Option<Result<Decided, String>> {
        loop {
            if self.strategy == STRATEGIES.len() {
                return Some(Err(
                    "Could not find a match for old_string in the file".into()
                ));
            }
            if self.unit(text) {
                if !self.spans.is_empty() {
                    return Some(self.decide(text));
                }
                self.strategy += 1;
                self.cursor = 0;
                self.started = false;
            }
            if out_of_time() {
                return None;
            }
        }
    }

    /// One unit of the current matcher: whether it has looked through the whole text.
    fn unit(&mut self, text: &Text) -> bool {
        let pattern = self.old.strip_suffix('\n').unwrap_or(&self.old).to_string();
        match self.strategy {
            0 => self.exact(text, false),
            4 if self.unescaped == self.old => true,
            4 => self.exact(text, true),
            6 => self.block_anchor(text, &pattern),
            k => {
                if !self.started {
                    self.started = true;
                    let norm = norm_of(k);
                    self.want = pattern.split('\n').map(norm).collect();
                }
                if self.want.iter().all(|l| l.is_empty()) {
                    return true;
                }
                self.by_lines(text, norm_of(k))
            }
        }
    }

    /// Non-overlapping exact matches in the next window of bytes.
    fn exact(&mut self, text: &Text, unescaped: bool) -> bool {
        let pattern = if unescaped {
            &self.unescaped
        } else {
            &self.old
        };
        let (hay, n) = (text.s.as_bytes(), pattern.len());
        let end = hay.len().min(self.cursor + WINDOW + n);
        if self.cursor >= hay.len() {
            return true;
        }
        match memchr::memmem::find(&hay[self.cursor..end], pattern.as_bytes()) {
            Some(i) => {
                self.spans.push((self.cursor + i, self.cursor + i + n));
                self.cursor += i + n;
                false
            }
            None if end == hay.len() => true,
            None => {
                self.cursor += WINDOW + 1;
                false
            }
        }
    }

    /// Windows of whole lines whose normalised text equals the pattern's, line by line.
    fn by_lines(&mut self, text: &Text, norm: fn(&str) -> String) -> bool {
        let (lines, n) = (&text.lines, self.want.len());
        let line = |k: usize| &text.s[lines[k].0..lines[k].1];
        let stop = self.cursor + LINES;
        while self.cursor + n <= lines.len() {
            if self.cursor >= stop {
                return false;
            }
            let i = self.cursor;
            if (0..n).all(|k| norm(line(i + k)) == self.want[k]) {
                self.spans.push((lines[i].0, lines[i + n - 1].1));
                self.cursor += n;
            } else {
                self.cursor += 1;
            }
        }
        true
    }

    /// First and last lines match (trimmed), the middle is at least half alike.
    fn block_anchor(&mut self, text: &Text, pattern: &str) -> bool {
        let want: Vec<&str> = pattern.split('\n').collect();
        if want.len() < 3 {
            return true;
        }
        let (first, last) = (want[0].trim(), want[want.len() - 1].trim());
        if first.is_empty() || last.is_empty() {
            return true;
        }
        let lines = &text.lines;
        let n = want.len();
        let line = |k: usize| &text.s[lines[k].0..lines[k].1];
        let stop = self.cursor + LINES;
        while self.cursor < lines.len().saturating_sub(n - 1) {
            if self.cursor >= stop {
                return false;
            }
            let i = self.cursor;
            self.cursor += 1;
            if line(i).trim() != first || line(i + n - 1).trim() != last {
                continue;
            }
            let middle = want[1..n - 1].join("\n");
            let theirs = &text.s[lines[i + 1].0..lines[i + n - 2].1];
            let ratio = similar::TextDiff::configure()
                .timeout(std::time::Duration::from_millis(2))
                .diff_chars(middle.as_str(), theirs)
                .ratio();
            if ratio >= 0.5 {
                self.spans.push((lines[i].0, lines[i + n - 1].1));
            }
            // A character diff is a unit of its own.
            return false;
        }
        true
    }

    /// The current matcher found spans: replace them, or refuse several where one is meant.
    fn decide(&mut self, text: &Text) -> Result<Decided, String> {
        let name = STRATEGIES[self.strategy];
        let mut spans = std::mem::take(&mut self.spans);
        if spans.len() > 1 && !self.all {
            return Err(format!(
                "Found {} matches for old_string. Provide more context to make it unique, or \
                 use replace_all=True.",
                spans.len()
            ));
        }
        // A line match ends before its last newline: take it when old_string had one.
        if name != "exact" && name != "escape_normalized" && self.old.ends_with('\n') {
            for s in &mut spans {
                if text.s[s.1..].starts_with('\n') {
                    s.1 += 1;
                }
            }
        }
        let edits = spans
            .into_iter()
            .map(|(a, b)| {
                let with = if name == "exact" {
                    self.new.clone()
                } else {
                    reindent(&text.s[a..b], &self.old, &self.new)
                };
                ((a, b), with)
            })
            .collect();
        Ok(Decided {
            edits,
            strategy: name,
        })
    }
}

/// Replace `old` by `new` in `content` (every match with `all`, else the one match), at once
/// (a text small enough not to need steps: a skill's file).
pub fn replace(content: &str, old: &str, new: &str, all: bool) -> Result<Replaced, String> {
    let text = Text::new(content);
    let mut finder = Finder::new(old, new, all)?;
    let decided = finder
        .advance(&text, &|| false)
        .unwrap_or_else(|| Err(String::new()))?;
    let count = decided.edits.len();
    let mut splicer = super::text::Splicer::new(decided.edits);
    let out = splicer.advance(&text, &|| false).unwrap_or_default();
    Ok(Replaced {
        content: out.s,
        count,
        strategy: decided.strategy,
    })
}

/// Lines of `text` near the first line of `old`, to show a model whose match failed.
pub fn closest_lines(old: &str, text: &Text) -> String {
    let Some(first) = first_meaningful(old).map(str::trim) else {
        return String::new();
    };
    // The longest word of the first line: lines holding it are the candidates.
    let Some(word) = first
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .max_by_key(|w| w.len())
        .filter(|w| w.len() >= 3)
    else {
        return String::new();
    };
    let mut hits: Vec<usize> = Vec::new();
    for at in memchr::memmem::find_iter(text.s.as_bytes(), word.as_bytes()) {
        let line = text.line_of(at);
        if hits.last() != Some(&line) {
            hits.push(line);
        }
        if hits.len() == 3 {
            break;
        }
    }
    let lines = &text.lines;
    let mut out = Vec::new();
    for i in hits {
        let (from, to) = (i.saturating_sub(2), (i + 3).min(lines.len()));
        let block: Vec<String> = (from..to)
            .map(|j| format!("{:4}| {}", j + 1, &text.s[lines[j].0..lines[j].1]))
            .collect();
        out.push(block.join("\n"));
    }
    out.join("\n---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(content: &str, old: &str, new: &str) -> (String, &'static str) {
        let r = replace(content, old, new, false).unwrap_or_else(|e| panic!("{e}"));
        (r.content, r.strategy)
    }

    #[test]
    fn the_chain_forgives_whitespace_indent_escapes_and_quotes() {
        let code = "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n";
        assert_eq!(ok(code, "let x = 1;", "let x = 2;").1, "exact");
        // Trailing spaces and a different indent in the model's old_string.
        let (out, s) = ok(
            code,
            "  let x = 1;   \n  println!(\"{x}\");",
            "  let y = 1;\n  println!(\"{y}\");",
        );
        assert_eq!(s, "line_trimmed");
        assert_eq!(
            out,
            "fn main() {\n    let y = 1;\n    println!(\"{y}\");\n}\n"
        );
        let (_, s) = ok(code, "let  x =   1;", "let x = 3;");
        assert_eq!(s, "whitespace_normalized");
        let spaced = "a  =  1\nb = 2\n";
        assert_eq!(ok(spaced, "a = 1", "a = 9").1, "whitespace_normalized");
        assert_eq!(
            ok(code, "let x = 1;\\n    println", "let x = 1;\n    eprintln").1,
            "escape_normalized"
        );
        let quoted = "say(\u{201c}hi\u{201d})\n";
        assert_eq!(
            ok(quoted, "say(\"hi\")", "say(\"bye\")").0,
            "say(\"bye\")\n"
        );
        let block = "if a {\n    one();\n    two();\n}\n";
        let (out, s) = ok(block, "if a {\n    one();\n    too();\n}", "if b {\n}");
        assert_eq!((out.as_str(), s), ("if b {\n}\n", "block_anchor"));
    }

    #[test]
    fn repeated_and_missing_matches_are_errors_unless_all_are_meant() {
        let text = "x = 1\ny = 2\nx = 1\n";
        assert!(
            replace(text, "x = 1", "x = 5", false)
                .unwrap_err()
                .contains("Found 2 matches")
        );
        let all = replace(text, "x = 1", "x = 5", true).unwrap();
        assert_eq!(
            (all.content.as_str(), all.count),
            ("x = 5\ny = 2\nx = 5\n", 2)
        );
        assert!(
            replace(text, "z = 9", "z", false)
                .unwrap_err()
                .contains("Could not find")
        );
        assert!(replace(text, "", "z", false).is_err());
        assert!(
            replace(text, "x", "x", false)
                .unwrap_err()
                .contains("identical")
        );
        let near = closest_lines("let value = 3", &Text::new("a\nlet value = 2\nc\n"));
        assert!(near.contains("   2| let value = 2"), "{near}");
    }

    #[test]
    fn a_line_match_of_whole_lines_keeps_the_line_count() {
        let text = "a\n  b\nc\n";
        let (out, _) = ok(text, " b \n", " B\n");
        assert_eq!(out, "a\n  B\nc\n");
    }
}
