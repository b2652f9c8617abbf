//! A file's text as `patch` works on it, and the pieces of that work that go on across steps,
//! each a bounded unit at a time (`UNIT` bytes): reading a file in (`Loader`: CRLF folded to
//! LF, its lines found as it comes), copying it with replacements (`Splicer`), writing LF back
//! as CRLF (`Encoder`) and the unified diff of an edit (`Differ`: the equal head and tail are
//! found a unit at a time, and only the lines between them, with their context, are diffed).

use std::io::Read;
use std::path::Path;

use super::{EDIT_MAX, editable, too_big};

/// Bytes handled in one unit of work: well under a millisecond.
pub(crate) const UNIT: usize = 1 << 20;
/// Lines the diff shows around a change.
const CONTEXT: usize = 3;
/// A changed region larger than this (old and new together) is shown removed and added whole
/// rather than diffed line by line (which would hold the loop).
const DIFF_REGION_MAX: usize = 2 << 20;

/// A byte range of a text.
pub(crate) type Span = (usize, usize);

/// LF text and its lines as byte spans (without their `\n`).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Text {
    pub s: String,
    pub lines: Vec<Span>,
}

impl Text {
    pub fn new(s: &str) -> Text {
        let mut b = Builder::default();
        b.push(s);
        b.finish()
    }

    /// The index of the line holding byte `at`.
    pub fn line_of(&self, at: usize) -> usize {
        self.lines.partition_point(|&(_, end)| end < at)
    }
}

/// Text put together piece by piece, its lines noted as they come.
#[derive(Default)]
pub(crate) struct Builder {
    s: String,
    lines: Vec<Span>,
    line_start: usize,
}

impl Builder {
    pub fn push(&mut self, piece: &str) {
        let from = self.s.len();
        self.s.push_str(piece);
        for nl in memchr::memchr_iter(b'\n', piece.as_bytes()) {
            self.lines.push((self.line_start, from + nl));
            self.line_start = from + nl + 1;
        }
    }

    pub fn finish(mut self) -> Text {
        if self.line_start < self.s.len() {
            self.lines.push((self.line_start, self.s.len()));
        }
        Text {
            s: self.s,
            lines: self.lines,
        }
    }
}

/// `text[at..]` cut to at most `UNIT` bytes, on a character boundary.
fn piece(text: &str, at: usize, to: usize) -> &str {
    let mut end = to.min(at + UNIT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[at..end]
}

/// A file being read in for an edit.
pub(crate) struct Loader {
    file: std::fs::File,
    path: String,
    read: u64,
    /// The bytes of a character cut by the end of the last read.
    carry: Vec<u8>,
    /// The last read ended in `\r`: whether it is a CRLF's depends on the next.
    pending_cr: bool,
    crlf: bool,
    text: Builder,
    buf: Vec<u8>,
}

/// A file read in: its text (LF) and whether it is written back with CRLF.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub text: Text,
    pub crlf: bool,
}

impl Loader {
    /// `None` when the file does not exist; an error when it is not a regular file of a size
    /// we edit.
    pub fn open(path: &Path) -> Result<Option<Loader>, String> {
        if !editable(path)? {
            return Ok(None);
        }
        let file = match crate::util::open_regular(path) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Ok(Some(Loader {
            file,
            path: path.display().to_string(),
            read: 0,
            carry: Vec::new(),
            pending_cr: false,
            crlf: false,
            text: Builder::default(),
            buf: Vec::new(),
        }))
    }

    /// Read on, a unit at a time, until `out_of_time`: the text once the file is read.
    pub fn advance(&mut self, out_of_time: &dyn Fn() -> bool) -> Option<Result<Loaded, String>> {
        loop {
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            buf.append(&mut self.carry);
            let n = match (&mut self.file).take(UNIT as u64).read_to_end(&mut buf) {
                Ok(n) => n,
                Err(e) => return Some(Err(format!("cannot read {}: {e}", self.path))),
            };
            self.read += n as u64;
            if self.read > EDIT_MAX {
                return Some(Err(too_big(Path::new(&self.path))));
            }
            let valid = match std::str::from_utf8(&buf) {
                Ok(s) => s,
                Err(e) if e.error_len().is_none() && n > 0 => {
                    // A character cut by the read: its bytes go with the next.
                    self.carry = buf[e.valid_up_to()..].to_vec();
                    std::str::from_utf8(&buf[..e.valid_up_to()]).unwrap_or_default()
                }
                Err(_) => {
                    return Some(Err(format!("cannot read {}: not valid UTF-8", self.path)));
                }
            };
            self.fold(valid);
            self.buf = buf;
            if n == 0 {
                if self.pending_cr {
                    self.text.push("\r");
                }
                let text = std::mem::take(&mut self.text).finish();
                return Some(Ok(Loaded {
                    text,
                    crlf: self.crlf,
                }));
            }
            if out_of_time() {
                return None;
            }
        }
    }

    /// Append `s` with its CRLFs as LF.
    fn fold(&mut self, mut s: &str) {
        if std::mem::take(&mut self.pending_cr) {
            if s.starts_with('\n') {
                self.crlf = true;
            } else if !s.is_empty() {
                self.text.push("\r");
            } else {
                self.pending_cr = true;
            }
        }
        if let Some(rest) = s.strip_suffix('\r') {
            self.pending_cr = true;
            s = rest;
        }
        let mut parts = s.split("\r\n");
        if let Some(first) = parts.next() {
            self.text.push(first);
        }
        for part in parts {
            self.crlf = true;
            self.text.push("\n");
            self.text.push(part);
        }
    }
}

/// A text copied with some of its spans replaced, a unit at a time.
pub(crate) struct Splicer {
    /// Sorted, not overlapping, each with what replaces it.
    edits: Vec<(Span, String)>,
    next: usize,
    at: usize,
    out: Builder,
}

impl Splicer {
    pub fn new(edits: Vec<(Span, String)>) -> Splicer {
        Splicer {
            edits,
            next: 0,
            at: 0,
            out: Builder::default(),
        }
    }

    pub fn advance(&mut self, text: &Text, out_of_time: &dyn Fn() -> bool) -> Option<Text> {
        loop {
            let to = self.edits.get(self.next).map_or(text.s.len(), |e| e.0.0);
            if self.at < to {
                let p = piece(&text.s, self.at, to);
                self.at += p.len();
                self.out.push(p);
            } else if let Some(((_, end), with)) = self.edits.get(self.next) {
                self.out.push(with);
                self.at = *end;
                self.next += 1;
            } else {
                return Some(std::mem::take(&mut self.out).finish());
            }
            if out_of_time() {
                return None;
            }
        }
    }
}

/// LF text written back with CRLF, a unit at a time.
pub(crate) struct Encoder {
    at: usize,
    out: String,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            at: 0,
            out: String::new(),
        }
    }

    pub fn advance(&mut self, text: &str, out_of_time: &dyn Fn() -> bool) -> Option<String> {
        while self.at < text.len() {
            let p = piece(text, self.at, text.len());
            self.at += p.len();
            self.out.push_str(&p.replace('\n', "\r\n"));
            if out_of_time() {
                return None;
            }
        }
        Some(std::mem::take(&mut self.out))
    }
}

/// The unified diff of `old` → `new`, found across steps.
pub(crate) struct Differ {
    name: String,
    phase: Phase,
    /// Bytes equal at the head (so far, then in all).
    head: usize,
    /// Bytes equal at the tail (so far, then in all).
    tail: usize,
    /// Where the diffed region starts (a line start, `CONTEXT` lines before the first change).
    from: usize,
    /// Lines before `from`, counted so far up to `counted`.
    lines_before: usize,
    counted: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Head,
    Tail,
    Count,
    Diff,
}

impl Differ {
    pub fn new(name: &str) -> Differ {
        Differ {
            name: name.to_string(),
            phase: Phase::Head,
            head: 0,
            tail: 0,
            from: 0,
            lines_before: 0,
            counted: 0,
        }
    }

    /// Work on until `out_of_time`: the diff once done (empty when nothing changed).
    pub fn advance(
        &mut self,
        old: &str,
        new: &str,
        out_of_time: &dyn Fn() -> bool,
    ) -> Option<String> {
        let (a, b) = (old.as_bytes(), new.as_bytes());
        loop {
            match self.phase {
                Phase::Head => {
                    let n = UNIT.min(a.len() - self.head).min(b.len() - self.head);
                    let (x, y) = (&a[self.head..self.head + n], &b[self.head..self.head + n]);
                    match x.iter().zip(y).position(|(p, q)| p != q) {
                        Some(i) => {
                            self.head += i;
                            self.phase = Phase::Tail;
                        }
                        None if n == 0 => {
                            if a.len() == b.len() {
                                return Some(String::new());
                            }
                            self.phase = Phase::Tail;
                        }
                        None => self.head += n,
                    }
                }
                Phase::Tail => {
                    let room = a.len().min(b.len()) - self.head;
                    let n = UNIT.min(room - self.tail);
                    let (ea, eb) = (a.len() - self.tail, b.len() - self.tail);
                    let (x, y) = (&a[ea - n..ea], &b[eb - n..eb]);
                    match x.iter().rev().zip(y.iter().rev()).position(|(p, q)| p != q) {
                        Some(i) => {
                            self.tail += i;
                            self.settle(a, b);
                        }
                        None if n == 0 => self.settle(a, b),
                        None => self.tail += n,
                    }
                }
                Phase::Count => {
                    let to = self.from.min(self.counted + UNIT);
                    self.lines_before += memchr::memchr_iter(b'\n', &a[self.counted..to]).count();
                    self.counted = to;
                    if to == self.from {
                        self.phase = Phase::Diff;
                    }
                }
                Phase::Diff => {
                    // The equal tail, cut back to a line start in both, and `CONTEXT` lines
                    // of it shown.
                    let (ta, tb) = (a.len() - self.tail, b.len() - self.tail);
                    let at_line = |t: &[u8], i: usize| i == 0 || t[i - 1] == b'\n';
                    let start = if at_line(a, ta) && at_line(b, tb) {
                        ta
                    } else {
                        memchr::memchr(b'\n', &a[ta..]).map_or(a.len(), |i| ta + i + 1)
                    };
                    let mut end = start;
                    for _ in 0..CONTEXT {
                        if end < a.len() {
                            end = memchr::memchr(b'\n', &a[end..]).map_or(a.len(), |i| end + i + 1);
                        }
                    }
                    let (old_end, new_end) = (end, b.len() - (a.len() - end));
                    let old = &old[self.from..old_end];
                    let new = &new[self.from..new_end];
                    return Some(if old.len() + new.len() > DIFF_REGION_MAX {
                        whole(&self.name, old, new, self.lines_before)
                    } else {
                        super::unified_diff_at(&self.name, old, new, self.lines_before)
                    });
                }
            }
            if out_of_time() {
                return None;
            }
        }
    }

    /// The head and tail are known: where the diffed region starts.
    fn settle(&mut self, a: &[u8], _b: &[u8]) {
        let head_line = memchr::memrchr(b'\n', &a[..self.head]).map_or(0, |i| i + 1);
        let mut from = head_line;
        for _ in 0..CONTEXT {
            if from == 0 {
                break;
            }
            from = memchr::memrchr(b'\n', &a[..from - 1]).map_or(0, |i| i + 1);
        }
        self.from = from;
        self.counted = 0;
        self.phase = Phase::Count;
    }
}

/// A region too large to diff by lines: all of it removed, all of it added (cut at the diff
/// limit, as any diff is).
fn whole(name: &str, old: &str, new: &str, before: usize) -> String {
    let range = |t: &str| {
        let n = t.lines().count();
        match n {
            1 => format!("{}", before + 1),
            0 => format!("{before},0"),
            n => format!("{},{n}", before + 1),
        }
    };
    let mut out = format!(
        "--- a/{name}\n+++ b/{name}\n@@ -{} +{} @@\n",
        range(old),
        range(new)
    );
    for (sign, t) in [('-', old), ('+', new)] {
        for line in t.split_inclusive('\n') {
            if out.len() > super::DIFF_MAX {
                return super::cut_diff(out);
            }
            out.push(sign);
            out.push_str(line);
            if !line.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    super::cut_diff(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_diff(old: &str, new: &str) -> String {
        let mut d = Differ::new("f");
        loop {
            if let Some(out) = d.advance(old, new, &|| true) {
                return out;
            }
        }
    }

    /// The whole file's diff, with no time limit (the one `unified_diff` has may settle for a
    /// coarser one on a slow machine).
    fn whole(old: &str, new: &str) -> String {
        similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .context_radius(3)
            .header("a/f", "b/f")
            .to_string()
    }

    #[test]
    fn the_stepped_diff_is_the_whole_files_diff() {
        let big: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        let edits: [(&str, &str); 6] = [
            ("line 1500\n", "line 1500 changed\n"),
            ("line 0\n", ""),
            ("line 2999\n", "line 2999"),
            ("line 10\n", "line 10\nline 10\n"),
            ("line 7\n", "new a\nline 7\nnew b\n"),
            ("line 1", "line one"),
        ];
        for (from, to) in edits {
            let new = big.replacen(from, to, 1);
            assert_eq!(
                run_diff(&big, &new),
                whole(&big, &new),
                "{from:?} -> {to:?}"
            );
        }
        assert_eq!(run_diff("same\n", "same\n"), "");
        assert_eq!(
            run_diff("", "a\n"),
            super::super::unified_diff_at("f", "", "a\n", 0)
        );
        assert_eq!(
            run_diff("a\nb", ""),
            super::super::unified_diff_at("f", "a\nb", "", 0)
        );
    }

    #[test]
    fn a_file_loads_a_unit_at_a_time_with_crlf_folded() {
        let dir = std::env::temp_dir().join(format!("tuigw-tx-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.txt");
        // CRLFs and a multi-byte character across the unit's edges.
        let mut text = "a".repeat(UNIT - 1);
        text.push_str("\r\n");
        text.push_str(&"é".repeat(UNIT / 2));
        text.push_str("\r\nend\r");
        std::fs::write(&f, &text).unwrap();
        let mut l = Loader::open(&f).unwrap().unwrap();
        let loaded = loop {
            if let Some(r) = l.advance(&|| true) {
                break r.unwrap();
            }
        };
        assert!(loaded.crlf);
        assert_eq!(loaded.text, Text::new(&text.replace("\r\n", "\n")));
        std::fs::write(&f, b"ok\n\xff\n").unwrap();
        let mut l = Loader::open(&f).unwrap().unwrap();
        assert!(
            l.advance(&|| false)
                .unwrap()
                .unwrap_err()
                .contains("not valid UTF-8")
        );
        assert!(Loader::open(&dir.join("none")).unwrap().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
