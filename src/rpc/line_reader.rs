//! Splits the input byte stream into lines, bounded by the frame limit.

/// One unit of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A complete, non-blank line without its `\n`.
    Frame(&'a [u8]),
    /// A line longer than the frame limit; it was discarded up to its newline.
    TooLong,
}

/// Accumulates partial lines across reads. Memory is bounded by the frame limit: an over-long
/// line is dropped as it arrives, not buffered.
pub struct LineReader {
    partial: Vec<u8>,
    limit: usize,
    discarding: bool,
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| b.is_ascii_whitespace())
}

impl LineReader {
    pub fn new(limit: usize) -> Self {
        LineReader {
            partial: Vec::new(),
            limit,
            discarding: false,
        }
    }

    /// Feed one chunk read from the input; `emit` is called for each line it completes.
    pub fn push(&mut self, mut data: &[u8], mut emit: impl FnMut(Line<'_>)) {
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&data[..nl], &data[nl + 1..]);
            if self.discarding {
                self.discarding = false;
                emit(Line::TooLong);
            } else if self.partial.is_empty() {
                if head.len() > self.limit {
                    emit(Line::TooLong);
                } else if !is_blank(head) {
                    emit(Line::Frame(head));
                }
            } else if self.partial.len() + head.len() > self.limit {
                self.partial.clear();
                emit(Line::TooLong);
            } else {
                self.partial.extend_from_slice(head);
                let line = std::mem::take(&mut self.partial);
                if !is_blank(&line) {
                    emit(Line::Frame(&line));
                }
                // Keep the allocation for the next partial line unless it grew large.
                if line.capacity() <= 64 * 1024 {
                    self.partial = line;
                    self.partial.clear();
                }
            }
            data = rest;
        }
        if self.discarding || data.is_empty() {
            return;
        }
        if self.partial.len() + data.len() > self.limit {
            self.partial = Vec::new();
            self.discarding = true;
        } else {
            self.partial.extend_from_slice(data);
        }
    }

    /// End of input: a final line without `\n` still counts.
    pub fn finish(&mut self, mut emit: impl FnMut(Line<'_>)) {
        if self.discarding {
            self.discarding = false;
            emit(Line::TooLong);
        } else if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            if !is_blank(&line) {
                emit(Line::Frame(&line));
            }
        }
    }

    #[cfg(test)]
    /// Bytes held for an unfinished line.
    pub fn buffered(&self) -> usize {
        self.partial.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(r: &mut LineReader, chunks: &[&[u8]]) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::new();
        for c in chunks {
            r.push(c, |l| {
                out.push(match l {
                    Line::Frame(f) => Some(f.to_vec()),
                    Line::TooLong => None,
                })
            });
        }
        out
    }

    #[test]
    fn partial_lines_join_across_reads_and_many_split_in_one() {
        let mut r = LineReader::new(100);
        let got = lines(&mut r, &[b"ab", b"c\nde\n\n  \nf", b"g\n"]);
        assert_eq!(
            got,
            vec![
                Some(b"abc".to_vec()),
                Some(b"de".to_vec()),
                Some(b"fg".to_vec())
            ]
        );
    }

    #[test]
    fn over_long_lines_are_dropped_then_reading_goes_on() {
        let mut r = LineReader::new(4);
        let got = lines(&mut r, &[b"123", b"45678", b"9\nok\n", b"toolongline\nx\n"]);
        assert_eq!(
            got,
            vec![None, Some(b"ok".to_vec()), None, Some(b"x".to_vec())]
        );
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_accepted() {
        let mut r = LineReader::new(4);
        assert_eq!(lines(&mut r, &[b"1234\n"]), vec![Some(b"1234".to_vec())]);
        assert_eq!(
            lines(&mut r, &[b"12", b"34\n"]),
            vec![Some(b"1234".to_vec())]
        );
    }

    #[test]
    fn finish_emits_the_unterminated_tail() {
        let mut r = LineReader::new(10);
        lines(&mut r, &[b"tail"]);
        let mut got = Vec::new();
        r.finish(|l| got.push(matches!(l, Line::Frame(b"tail"))));
        assert_eq!(got, vec![true]);
    }
}
