//! Text for a person on stdout. Output often goes through `| head` or `| less`: a reader that
//! closes the pipe ends the output quietly instead of panicking, and text that came from a model,
//! a tool or a title is shown with its control characters escaped, so it cannot move the cursor,
//! clear the screen, write the clipboard (OSC 52) or hide part of a line.

use std::fmt::Write as _;
use std::io::Write as _;

/// Lines collected for stdout, written at once by [`Out::finish`].
#[derive(Default)]
pub struct Out {
    text: String,
}

impl Out {
    pub fn new() -> Out {
        Out::default()
    }

    /// A line of our own text (no escaping).
    pub fn line(&mut self, s: &str) {
        self.text.push_str(s);
        self.text.push('\n');
    }

    /// Text from outside (a title, a prompt, tool output), control characters made visible.
    pub fn foreign(&mut self, s: &str) {
        push_printable(&mut self.text, s);
    }

    /// Write everything: exit code 0, also when the reader closed the pipe early; 1 when stdout
    /// cannot be written otherwise (a full disk behind a redirection).
    pub fn finish(self) -> i32 {
        write_stdout(&self.text)
    }
}

/// Write `text` to stdout; a closed pipe is not an error.
pub fn write_stdout(text: &str) -> i32 {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: cannot write to stdout: {e}");
            1
        }
    }
}

/// `s` with every control character except newline and tab written as a visible escape
/// (`\x1b`, `\r`, `\u{202e}`): C0, DEL, C1 and the bidirectional overrides that reorder a line.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_printable(&mut out, s);
    out
}

pub fn push_printable(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || ('\u{80}'..='\u{9f}').contains(&c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_a_terminal_would_obey() {
        assert_eq!(printable("a\x1b]52;c;aGk=\x07b"), "a\\x1b]52;c;aGk=\\x07b");
        assert_eq!(printable("ok\r\x1b[2Kevil"), "ok\\r\\x1b[2Kevil");
        assert_eq!(printable("\u{9b}31m"), "\\x9b31m");
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(printable("del\x7f"), "del\\x7f");
    }

    #[test]
    fn keeps_ordinary_text() {
        let s = "line one\n\tindented — ünïcode ✓ 日本\n";
        assert_eq!(printable(s), s);
    }
}
