//! Tasks and results files read a line at a time, each line bounded, so a file of a million
//! lines costs the memory of one line, whatever its size. Each line knows its number, where it
//! starts in the file and whether a newline ended it (a results file's last line without one
//! is what a kill cut short).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Longest line read: a task's prompt may be 1 MiB, which JSON escapes may make six times
/// longer (`\u0001`), plus its other fields.
pub const LINE_MAX: usize = 8 << 20;

#[derive(Debug, PartialEq)]
pub enum Text {
    Line(String),
    /// Longer than the cap: skipped to its end, not held.
    TooLong,
    NotUtf8,
}

#[derive(Debug)]
pub struct Line {
    /// From 1.
    pub number: usize,
    /// The offset of its first byte.
    pub start: u64,
    /// A newline ended it (else it is the file's last and was cut short or never ended).
    pub ended: bool,
    pub text: Text,
}

pub struct Lines<R> {
    reader: BufReader<R>,
    cap: usize,
    number: usize,
    offset: u64,
    buf: Vec<u8>,
}

impl Lines<File> {
    /// The lines of the regular file `path` (a FIFO or device is refused, never waited on);
    /// `None` when there is none.
    pub fn open(path: &Path) -> Result<Option<Lines<File>>, String> {
        match crate::util::open_regular(path) {
            Ok(Some(file)) => Ok(Some(Lines::new(file, LINE_MAX))),
            Ok(None) => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }
}

impl<R: Read> Lines<R> {
    pub fn new(reader: R, cap: usize) -> Lines<R> {
        Lines {
            reader: BufReader::with_capacity(64 << 10, reader),
            cap,
            number: 0,
            offset: 0,
            buf: Vec::new(),
        }
    }

    /// The next line, or `None` at the end of the file.
    pub fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        self.buf.clear();
        let start = self.offset;
        let n = (&mut self.reader)
            .take(self.cap as u64 + 1)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.offset += n as u64;
        self.number += 1;
        let mut ended = self.buf.last() == Some(&b'\n');
        let text = if !ended && n > self.cap {
            ended = self.skip_rest()?;
            self.buf = Vec::new();
            Text::TooLong
        } else {
            if ended {
                self.buf.pop();
                if self.buf.last() == Some(&b'\r') {
                    self.buf.pop();
                }
            }
            match std::str::from_utf8(&self.buf) {
                Ok(s) => Text::Line(s.to_string()),
                Err(_) => Text::NotUtf8,
            }
        };
        Ok(Some(Line {
            number: self.number,
            start,
            ended,
            text,
        }))
    }

    /// Reads past the rest of an over-long line without holding it; whether a newline ended it.
    fn skip_rest(&mut self) -> std::io::Result<bool> {
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                return Ok(false);
            }
            let (used, found) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            self.reader.consume(used);
            self.offset += used as u64;
            if found {
                return Ok(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8], cap: usize) -> Vec<(usize, u64, bool, Text)> {
        let mut lines = Lines::new(bytes, cap);
        let mut out = Vec::new();
        while let Some(l) = lines.next_line().unwrap() {
            out.push((l.number, l.start, l.ended, l.text));
        }
        out
    }

    #[test]
    fn lines_know_their_place_and_long_ones_are_skipped() {
        let got = all(b"ab\r\n\nlong-line\nx\xffy\ncut", 4);
        let line = |s: &str| Text::Line(s.to_string());
        assert_eq!(
            got,
            vec![
                (1, 0, true, line("ab")),
                (2, 4, true, line("")),
                (3, 5, true, Text::TooLong),
                (4, 15, true, Text::NotUtf8),
                (5, 19, false, line("cut")),
            ]
        );
        // A line exactly at the cap, with or without its newline, is whole.
        assert_eq!(all(b"abcd\nabcd", 4)[1], (2, 5, false, line("abcd")));
        assert_eq!(all(b"abcdefgh", 4), vec![(1, 0, false, Text::TooLong)]);
    }
}
