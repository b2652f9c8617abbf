//! Text for a person on stdout. Output often goes through `| head` or `| less`: a reader that
//! closes the pipe ends the output quietly instead of panicking, and text that came from a model,
//! a tool or a title is shown with its control characters escaped, so it cannot move the cursor,
//! clear the screen, write the clipboard (OSC 52) or hide part of a line.

use std::io::Write as _;

pub use crate::util::{printable, push_printable};

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
