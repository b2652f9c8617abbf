//! Words as bash expands them: braces, quotes and escapes removed, `~` and the variables the
//! policy knows substituted, globs kept as patterns, substitutions walked (they run) and marked.

use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::ParserOptions;
use brush_parser::word::{
    self, BraceExpressionMember, BraceExpressionOrText, Parameter, ParameterExpr, TildeExpr,
    WordPiece, WordPieceWithSource,
};

use super::Danger;
use super::paths::Target;
use super::walk::Walker;

/// A brace expansion making more words than this is judged as unknown.
const MAX_BRACE_WORDS: usize = 64;

/// One expanded word.
#[derive(Debug, Clone, Default)]
pub(crate) struct Arg {
    /// The value (what is known of it).
    pub(crate) text: String,
    /// The value as a glob pattern: unquoted `*?[` active, quoted ones escaped with `\`.
    pub(crate) pattern: String,
    /// The value as a nested shell would read it (`bash -c ARG`): unknown variables kept as
    /// `${NAME}` for that shell to treat as unknown too.
    pub(crate) script: String,
    /// Part of the value is only known when the command runs.
    pub(crate) dynamic: bool,
    /// It holds a command or process substitution's output.
    pub(crate) substituted: bool,
    /// ... from a command that downloads.
    pub(crate) download: bool,
    /// `{}` of `find -exec`: the files find visits.
    pub(crate) find_target: Option<Target>,
}

impl Arg {
    pub(crate) fn literal(s: &str) -> Arg {
        let mut a = Arg::default();
        a.push_quoted(s);
        a
    }

    pub(crate) fn unknown() -> Arg {
        Arg {
            dynamic: true,
            script: "${__unknown}".into(),
            ..Arg::default()
        }
    }

    pub(crate) fn substituted(download: bool) -> Arg {
        Arg {
            substituted: true,
            download,
            ..Arg::unknown()
        }
    }

    /// Several words as one, space-separated (`eval a b`, a here-string).
    pub(crate) fn join(args: &[Arg]) -> Arg {
        let mut out = Arg::default();
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                out.push_quoted(" ");
            }
            out.text.push_str(&a.text);
            out.pattern.push_str(&a.pattern);
            out.script.push_str(&a.script);
            out.dynamic |= a.dynamic;
            out.substituted |= a.substituted;
            out.download |= a.download;
        }
        out
    }

    fn push_quoted(&mut self, s: &str) {
        self.text.push_str(s);
        for ch in s.chars() {
            if matches!(ch, '*' | '?' | '[' | '\\') {
                self.pattern.push('\\');
            }
            self.pattern.push(ch);
        }
        self.script.push_str(s);
    }

    fn push_unquoted(&mut self, s: &str) {
        self.text.push_str(s);
        self.pattern.push_str(s);
        self.script.push_str(s);
    }

    /// An expansion the policy cannot know: `source` is what a nested shell would see.
    fn push_unknown(&mut self, source: &str) {
        self.dynamic = true;
        self.script.push_str(source);
    }
}

fn options() -> ParserOptions {
    ParserOptions::default()
}

/// A parser call that may panic on odd input: `None` then.
fn guarded<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).ok().flatten()
}

impl Walker<'_> {
    /// Expand one word of the command (braces make several); substitutions inside run now.
    pub(crate) fn word(&mut self, raw: &str) -> Vec<Arg> {
        let words = if raw.contains('{') {
            match guarded(|| word::parse_brace_expansions(raw, &options()).ok()) {
                Some(Some(parts)) => match expand_braces(&parts) {
                    Some(words) => words,
                    None => {
                        // Too many words to judge one by one; their substitutions still run.
                        self.expand(raw);
                        return vec![Arg::unknown()];
                    }
                },
                _ => vec![raw.to_string()],
            }
        } else {
            vec![raw.to_string()]
        };
        if words.len() > self.words_left {
            self.words_left = 0;
            self.flag(Danger::TooComplex);
            return vec![Arg::unknown()];
        }
        self.words_left -= words.len();
        words.iter().map(|w| self.expand(w)).collect()
    }

    fn expand(&mut self, raw: &str) -> Arg {
        let mut arg = Arg::default();
        match guarded(|| word::parse(raw, &options()).ok()) {
            Some(pieces) => self.pieces(&pieces, raw, false, &mut arg),
            None => {
                self.flag(Danger::Unparsed);
                arg = Arg::unknown();
            }
        }
        arg
    }

    /// A here-document's body, expanded (its delimiter was unquoted).
    pub(crate) fn heredoc(&mut self, body: &str) -> Arg {
        let mut arg = Arg::default();
        match guarded(|| word::parse_heredoc(body, &options()).ok()) {
            Some(pieces) => self.pieces(&pieces, body, true, &mut arg),
            None => {
                self.flag(Danger::Unparsed);
                arg = Arg::unknown();
            }
        }
        arg
    }

    fn pieces(&mut self, pieces: &[WordPieceWithSource], raw: &str, quoted: bool, arg: &mut Arg) {
        for p in pieces {
            let source = raw.get(p.start_index..p.end_index).unwrap_or("");
            match &p.piece {
                WordPiece::Text(t) if quoted => arg.push_quoted(t),
                WordPiece::Text(t) => arg.push_unquoted(t),
                WordPiece::SingleQuotedText(t) => arg.push_quoted(t),
                WordPiece::AnsiCQuotedText(t) => arg.push_quoted(&ansi_c(t)),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, raw, true, arg)
                }
                WordPiece::EscapeSequence(e) => {
                    let ch = e.strip_prefix('\\').unwrap_or(e);
                    if quoted && !ch.starts_with(['$', '`', '"', '\\', '\n']) {
                        arg.push_quoted(e);
                    } else if ch != "\n" {
                        arg.push_quoted(ch);
                    }
                }
                WordPiece::TildeExpansion(t) => {
                    let value = match t {
                        TildeExpr::Home => self.home().map(|h| h.to_string_lossy().into_owned()),
                        TildeExpr::UserHome(u) if u == "root" => Some("/root".into()),
                        TildeExpr::UserHome(u) => Some(format!("/home/{u}")),
                        TildeExpr::WorkingDir => {
                            self.cwd.as_ref().map(|c| c.to_string_lossy().into_owned())
                        }
                        _ => None,
                    };
                    match value {
                        Some(v) => arg.push_quoted(&v),
                        None => arg.push_unknown(source),
                    }
                }
                WordPiece::ParameterExpansion(e) => {
                    let known = match e {
                        ParameterExpr::Parameter {
                            parameter: Parameter::Named(name),
                            indirect: false,
                        } => self.lookup(name),
                        _ => None,
                    };
                    match known {
                        Some(v) if quoted => arg.push_quoted(&v),
                        Some(v) => arg.push_unquoted(&v),
                        None => {
                            // `${X:-$(cmd)}` runs cmd: walk what the expansion holds.
                            if source.contains("$(") || source.contains('`') {
                                arg.substituted = true;
                                let inner =
                                    source.strip_prefix("${").and_then(|s| s.strip_suffix('}'));
                                // Only ever a shorter text: the recursion ends.
                                if let Some(inner) = inner {
                                    let held = self.word(inner);
                                    arg.download |= held.iter().any(|a| a.download);
                                }
                            }
                            arg.push_unknown(source);
                        }
                    }
                }
                WordPiece::CommandSubstitution(s) | WordPiece::BackquotedCommandSubstitution(s) => {
                    let before = self.downloads;
                    self.script(s);
                    arg.substituted = true;
                    arg.download |= self.downloads > before;
                    arg.push_unknown(source);
                }
                WordPiece::ArithmeticExpression(e) => {
                    if e.value.contains("$(") || e.value.contains('`') {
                        let held = self.word(&e.value);
                        arg.substituted |= held.iter().any(|a| a.substituted);
                        arg.download |= held.iter().any(|a| a.download);
                    }
                    arg.push_unknown(source);
                }
            }
        }
    }
}

/// Brace expansion of a word, at most [`MAX_BRACE_WORDS`] words (`None`: more).
fn expand_braces(parts: &[BraceExpressionOrText]) -> Option<Vec<String>> {
    let mut words = vec![String::new()];
    for part in parts {
        let alternatives = match part {
            BraceExpressionOrText::Text(t) => vec![t.clone()],
            BraceExpressionOrText::Expr(members) => {
                let mut alts = Vec::new();
                for m in members {
                    match m {
                        BraceExpressionMember::Child(c) => alts.extend(expand_braces(c)?),
                        BraceExpressionMember::NumberSequence {
                            start,
                            end,
                            increment,
                        } => {
                            let step = i128::from(increment.unsigned_abs().max(1));
                            let span = (i128::from(*start) - i128::from(*end)).abs() / step;
                            if span >= MAX_BRACE_WORDS as i128 {
                                return None;
                            }
                            let lo = i128::from(*start.min(end));
                            alts.extend((0..=span).map(|k| (lo + k * step).to_string()));
                        }
                        BraceExpressionMember::CharSequence { start, end, .. } => {
                            let (lo, hi) = (*start.min(end) as u32, *start.max(end) as u32);
                            if hi - lo >= MAX_BRACE_WORDS as u32 {
                                return None;
                            }
                            alts.extend((lo..=hi).filter_map(char::from_u32).map(String::from));
                        }
                    }
                    if alts.len() > MAX_BRACE_WORDS {
                        return None;
                    }
                }
                alts
            }
        };
        let mut next = Vec::new();
        for w in &words {
            for a in &alternatives {
                next.push(format!("{w}{a}"));
            }
        }
        if next.len() > MAX_BRACE_WORDS {
            return None;
        }
        words = next;
    }
    Some(words)
}

/// The text of `$'…'`: the escapes bash knows.
fn ansi_c(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let simple = match e {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(ch) = simple {
            out.push(ch);
            continue;
        }
        let (radix, max) = match e {
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            '0'..='7' => (8, 3),
            _ => {
                out.push('\\');
                out.push(e);
                continue;
            }
        };
        let mut digits = String::new();
        if radix == 8 {
            digits.push(e);
        }
        while digits.len() < max {
            match chars.peek() {
                Some(d) if d.is_digit(radix) => {
                    digits.push(*d);
                    chars.next();
                }
                _ => break,
            }
        }
        match u32::from_str_radix(&digits, radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(ch) => out.push(ch),
            None => {
                out.push('\\');
                out.push(e);
                out.push_str(&digits);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_c_escapes() {
        assert_eq!(ansi_c(r"r\x6d"), "rm");
        assert_eq!(ansi_c(r"\162m"), "rm");
        assert_eq!(ansi_c(r"a\nb\'"), "a\nb'");
        assert_eq!(ansi_c(r"\u0072m"), "rm");
    }
}
