//! Find-and-replace that forgives what models get wrong in `old_string`: a chain of matchers
//! from exact to loose (Hermes' order: exact, line-trimmed, whitespace-normalised,
//! indentation-flexible, escape-normalised, unicode-normalised, block-anchor). The first
//! matcher that finds anything decides; more than one match is an error unless all are to be
//! replaced. A loose match re-indents `new_string` to the file's indentation.

/// A byte range of the content.
type Span = (usize, usize);
/// One matcher of the chain: the spans it finds.
type Matcher<'a> = Box<dyn Fn() -> Vec<Span> + 'a>;

/// The lines of `text` as byte spans (without their `\n`).
fn line_spans(text: &str) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b'\n' {
            spans.push((start, i));
            start = i + 1;
        }
    }
    if start < text.len() {
        spans.push((start, text.len()));
    }
    spans
}

fn exact(content: &str, pattern: &str) -> Vec<Span> {
    content
        .match_indices(pattern)
        .map(|(i, m)| (i, i + m.len()))
        .collect()
}

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

/// Windows of whole lines whose normalised text equals the pattern's, line by line.
fn by_lines(content: &str, pattern: &str, norm: fn(&str) -> String) -> Vec<Span> {
    let pattern = pattern.strip_suffix('\n').unwrap_or(pattern);
    let want: Vec<String> = pattern.split('\n').map(norm).collect();
    if want.iter().all(|l| l.is_empty()) {
        return Vec::new();
    }
    let lines = line_spans(content);
    let have: Vec<String> = lines.iter().map(|&(a, b)| norm(&content[a..b])).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + want.len() <= lines.len() {
        if have[i..i + want.len()] == want[..] {
            out.push((lines[i].0, lines[i + want.len() - 1].1));
            i += want.len();
        } else {
            i += 1;
        }
    }
    out
}

/// First and last lines match (trimmed), the middle is at least half alike.
fn block_anchor(content: &str, pattern: &str) -> Vec<Span> {
    let pattern = pattern.strip_suffix('\n').unwrap_or(pattern);
    let want: Vec<&str> = pattern.split('\n').collect();
    if want.len() < 3 {
        return Vec::new();
    }
    let (first, last) = (want[0].trim(), want[want.len() - 1].trim());
    if first.is_empty() || last.is_empty() {
        return Vec::new();
    }
    let middle = want[1..want.len() - 1].join("\n");
    let lines = line_spans(content);
    let n = want.len();
    let mut out = Vec::new();
    for i in 0..lines.len().saturating_sub(n - 1) {
        let line = |k: usize| &content[lines[k].0..lines[k].1];
        if line(i).trim() != first || line(i + n - 1).trim() != last {
            continue;
        }
        let theirs = &content[lines[i + 1].0..lines[i + n - 2].1];
        let ratio = similar::TextDiff::configure()
            .timeout(std::time::Duration::from_millis(2))
            .diff_chars(middle.as_str(), theirs)
            .ratio();
        if ratio >= 0.5 {
            out.push((lines[i].0, lines[i + n - 1].1));
        }
    }
    out
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
    pub strategy: &'static str,
}

/// Replace `old` by `new` in `content` (every match with `all`, else the one match).
pub fn replace(content: &str, old: &str, new: &str, all: bool) -> Result<Replaced, String> {
    if old.is_empty() {
        return Err("old_string cannot be empty".into());
    }
    if old == new {
        return Err("old_string and new_string are identical".into());
    }
    let unescaped = old.replace("\\n", "\n").replace("\\t", "\t");
    let strategies: [(&'static str, Matcher<'_>); 7] = [
        ("exact", Box::new(|| exact(content, old))),
        (
            "line_trimmed",
            Box::new(|| by_lines(content, old, |l| l.trim().to_string())),
        ),
        (
            "whitespace_normalized",
            Box::new(|| by_lines(content, old, collapse_ws)),
        ),
        (
            "indentation_flexible",
            Box::new(|| by_lines(content, old, |l| l.trim_start().to_string())),
        ),
        (
            "escape_normalized",
            Box::new(|| {
                if unescaped == old {
                    Vec::new()
                } else {
                    exact(content, &unescaped)
                }
            }),
        ),
        (
            "unicode_normalized",
            Box::new(|| by_lines(content, old, unicode_ascii)),
        ),
        ("block_anchor", Box::new(|| block_anchor(content, old))),
    ];
    for (name, find) in strategies {
        let mut spans = find();
        if spans.is_empty() {
            continue;
        }
        if spans.len() > 1 && !all {
            return Err(format!(
                "Found {} matches for old_string. Provide more context to make it unique, or \
                 use replace_all=True.",
                spans.len()
            ));
        }
        // A line match ends before its last newline: take it when old_string had one.
        if name != "exact" && name != "escape_normalized" && old.ends_with('\n') {
            for s in &mut spans {
                if content[s.1..].starts_with('\n') {
                    s.1 += 1;
                }
            }
        }
        let mut out = String::with_capacity(content.len() + new.len());
        let mut at = 0;
        for &(a, b) in &spans {
            out.push_str(&content[at..a]);
            if name == "exact" {
                out.push_str(new);
            } else {
                out.push_str(&reindent(&content[a..b], old, new));
            }
            at = b;
        }
        out.push_str(&content[at..]);
        return Ok(Replaced {
            content: out,
            count: spans.len(),
            strategy: name,
        });
    }
    Err("Could not find a match for old_string in the file".into())
}

/// Lines of `content` near the first line of `old`, to show a model whose match failed.
pub fn closest_lines(old: &str, content: &str) -> String {
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
    let lines: Vec<&str> = content.lines().collect();
    let hits: Vec<usize> = (0..lines.len())
        .filter(|i| lines[*i].contains(word))
        .take(3)
        .collect();
    let mut out = Vec::new();
    for i in hits {
        let (from, to) = (i.saturating_sub(2), (i + 3).min(lines.len()));
        let block: Vec<String> = (from..to)
            .map(|j| format!("{:4}| {}", j + 1, lines[j]))
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
        let near = closest_lines("let value = 3", "a\nlet value = 2\nc\n");
        assert!(near.contains("   2| let value = 2"), "{near}");
    }

    #[test]
    fn a_line_match_of_whole_lines_keeps_the_line_count() {
        let text = "a\n  b\nc\n";
        let (out, _) = ok(text, " b \n", " B\n");
        assert_eq!(out, "a\n  B\nc\n");
    }
}
