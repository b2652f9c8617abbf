//! Bash's `export -p` listing read back: the persistent shell saves its exported variables with
//! that one builtin (no subshell, so a shell stopped at shutdown exits fast), and this turns the
//! listing into names and values.
//!
//! Each variable is one statement, `declare -x NAME="value"` (`export NAME="value"` in POSIX
//! mode, other attribute letters beside `x`): the value in double quotes (`\` before `"`, `$`,
//! `` ` ``, `\`; a newline literal in older bash) or, for a value with control characters, in
//! `$'…'`; no value when the variable is exported but unset; `(…)` for an array, which bash does
//! not pass to a child's environment.

/// A variable of the listing: its name and value as bytes, as bash holds them.
pub type Exported = (String, Vec<u8>);

/// The exported variables with a value, in the listing's order; `None` when the text is not a
/// listing this reader understands (the caller then keeps nothing of it).
pub fn parse(text: &[u8]) -> Option<Vec<Exported>> {
    let mut r = Reader { text, at: 0 };
    let mut vars = Vec::new();
    loop {
        while r.eat(b'\n') {}
        if r.done() {
            return Some(vars);
        }
        if !(r.eat_word(b"declare") || r.eat_word(b"export")) {
            return None;
        }
        let mut array = false;
        if r.eat(b'-') {
            let flags = r.take_while(|b| b.is_ascii_alphabetic());
            array = flags.contains(&b'a') || flags.contains(&b'A');
            if flags.is_empty() || !r.eat(b' ') {
                return None;
            }
        }
        let name = r.take_while(|b| b.is_ascii_alphanumeric() || b == b'_');
        let name = std::str::from_utf8(name).ok().filter(|n| !n.is_empty())?;
        if !r.eat(b'=') {
            // Exported, never given a value: not in a child's environment.
            if r.done() || r.eat(b'\n') {
                continue;
            }
            return None;
        }
        if array || r.peek() == Some(b'(') {
            r.skip_array()?;
        } else {
            let value = r.word()?;
            vars.push((name.to_string(), value));
        }
        if !(r.done() || r.eat(b'\n')) {
            return None;
        }
    }
}

struct Reader<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.at >= self.text.len()
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.at += usize::from(hit);
        hit
    }

    /// `word` then a space.
    fn eat_word(&mut self, word: &[u8]) -> bool {
        let rest = &self.text[self.at..];
        if rest.starts_with(word) && rest.get(word.len()) == Some(&b' ') {
            self.at += word.len() + 1;
            true
        } else {
            false
        }
    }

    fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &'a [u8] {
        let start = self.at;
        while self.peek().is_some_and(&keep) {
            self.at += 1;
        }
        &self.text[start..self.at]
    }

    /// One quoted value: `"…"` or `$'…'` (bash prints no other form for a variable).
    fn word(&mut self) -> Option<Vec<u8>> {
        if self.eat(b'"') {
            self.double_quoted()
        } else if self.text[self.at..].starts_with(b"$'") {
            self.at += 2;
            self.ansi_c_quoted()
        } else {
            None
        }
    }

    fn double_quoted(&mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(out);
                }
                b'\\' if matches!(self.text.get(self.at + 1), Some(b'"' | b'$' | b'`' | b'\\')) => {
                    out.push(self.text[self.at + 1]);
                    self.at += 2;
                }
                b'\\' if self.text.get(self.at + 1) == Some(&b'\n') => self.at += 2,
                b => {
                    out.push(b);
                    self.at += 1;
                }
            }
        }
    }

    fn ansi_c_quoted(&mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let b = self.peek()?;
            self.at += 1;
            match b {
                b'\'' => return Some(out),
                b'\\' => self.escape(&mut out)?,
                b => out.push(b),
            }
        }
    }

    /// The escape after a `\` inside `$'…'`, as bash reads it.
    fn escape(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let b = self.peek()?;
        self.at += 1;
        let simple = match b {
            b'a' => Some(0x07),
            b'b' => Some(0x08),
            b'e' | b'E' => Some(0x1b),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(0x0b),
            b'\\' | b'\'' | b'"' | b'?' => Some(b),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            return Some(());
        }
        match b {
            b'0'..=b'7' => {
                self.at -= 1;
                let (n, _) = self.number(8, 3);
                out.push((n & 0xff) as u8);
            }
            b'x' | b'u' | b'U' => {
                let most = match b {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                match self.number(16, most) {
                    (_, 0) => out.extend_from_slice(&[b'\\', b]),
                    (n, _) if b == b'x' => out.push(n as u8),
                    (n, _) => {
                        let c = char::from_u32(n)?;
                        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                }
            }
            b'c' => {
                let c = self.peek()?;
                self.at += 1;
                out.push(c.to_ascii_uppercase() & 0x1f);
            }
            _ => out.extend_from_slice(&[b'\\', b]),
        }
        Some(())
    }

    /// Up to `most` digits in `radix`: the number and how many digits it took.
    fn number(&mut self, radix: u32, most: usize) -> (u32, usize) {
        let mut n = 0u32;
        let mut digits = 0;
        while digits < most {
            let Some(d) = self.peek().and_then(|b| (b as char).to_digit(radix)) else {
                break;
            };
            n = n * radix + d;
            self.at += 1;
            digits += 1;
        }
        (n, digits)
    }

    /// An array's `(…)`: its elements' quoted values read past, to the closing parenthesis.
    fn skip_array(&mut self) -> Option<()> {
        if !self.eat(b'(') {
            return None;
        }
        loop {
            match self.peek()? {
                b')' => {
                    self.at += 1;
                    return Some(());
                }
                b'"' => {
                    self.word()?;
                }
                b'$' if self.text[self.at..].starts_with(b"$'") => {
                    self.word()?;
                }
                _ => self.at += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(text: &str) -> Option<Vec<(String, String)>> {
        parse(text.as_bytes()).map(|v| {
            v.into_iter()
                .map(|(n, b)| (n, String::from_utf8(b).unwrap()))
                .collect()
        })
    }

    fn pairs(list: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
        Some(
            list.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn both_quotings_bash_prints_are_read_back() {
        let listing = "declare -x A=$'x\\ny'\n\
                       declare -x B=\"q\\\"\\$\\`\\\\\"\n\
                       declare -x C=$'\\t\\001\\303\\251'\n\
                       declare -x D=\"\"\n\
                       declare -x E\n\
                       declare -ix G=\"3\"\n\
                       declare -x X=$'\\E\\a\\v\\b\\f\\r\\177\\'\\\\'\n\
                       declare -x OLD=\"two\nlines\"\n";
        assert_eq!(
            vars(listing),
            pairs(&[
                ("A", "x\ny"),
                ("B", "q\"$`\\"),
                ("C", "\t\u{1}é"),
                ("D", ""),
                ("G", "3"),
                ("X", "\u{1b}\u{7}\u{b}\u{8}\u{c}\r\u{7f}'\\"),
                ("OLD", "two\nlines"),
            ])
        );
    }

    #[test]
    fn posix_mode_and_arrays() {
        let listing = "export A=\"1\"\nexport E\nexport -a F=([0]=\"1\" [1]=$'a)\\nb')\n\
                       declare -ax G=([0]=\")\")\nexport Z=$'\\x41\\u00e9'\n";
        assert_eq!(vars(listing), pairs(&[("A", "1"), ("Z", "Aé")]));
        assert_eq!(vars(""), pairs(&[]));
    }

    #[test]
    fn what_is_not_a_listing_is_refused() {
        for text in [
            "A=1\n",
            "declare -x A=unquoted\n",
            "declare -x A=\"open\n",
            "declare -x A=$'open\\\n",
            "declare -x =\"1\"\n",
            "declare -x A=\"1\" trailing\n",
            "declare - A=\"1\"\n",
            "declare -x F=([0]=\"1\"\n",
        ] {
            assert_eq!(vars(text), None, "{text:?}");
        }
    }
}
