//! A background process's output as the `process` tool reads it: the last `cap` bytes, the
//! oldest dropped first, with a count of what was dropped so `log` can say so.

use std::collections::VecDeque;

pub struct OutputBuffer {
    bytes: VecDeque<u8>,
    cap: usize,
    /// Bytes dropped from the front since the start.
    dropped: u64,
}

impl OutputBuffer {
    pub fn new(cap: usize) -> OutputBuffer {
        OutputBuffer {
            bytes: VecDeque::new(),
            cap,
            dropped: 0,
        }
    }

    /// Keep `chunk`, dropping the oldest bytes past the cap.
    pub fn push(&mut self, chunk: &[u8]) {
        // Only the last `cap` bytes of a chunk can be kept at all.
        let keep = &chunk[chunk.len().saturating_sub(self.cap)..];
        self.dropped += (chunk.len() - keep.len()) as u64;
        let over = (self.bytes.len() + keep.len()).saturating_sub(self.cap);
        self.bytes.drain(..over);
        self.dropped += over as u64;
        self.bytes.extend(keep);
        // A character cut in two at the front is dropped whole.
        while self.bytes.front().is_some_and(|b| b & 0xC0 == 0x80) {
            self.bytes.pop_front();
            self.dropped += 1;
        }
    }

    /// Bytes dropped so far (0 while everything printed is kept).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Everything kept, as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        String::from_utf8_lossy(&all).into_owned()
    }

    /// The last `max` bytes kept, cut to whole characters (only they are decoded).
    pub fn tail(&self, max: usize) -> String {
        let from = self.bytes.len().saturating_sub(max);
        let mut tail: Vec<u8> = self.bytes.range(from..).copied().collect();
        // A character cut in two at the front is left out whole.
        let cut = tail.iter().take_while(|b| *b & 0xC0 == 0x80).count();
        tail.drain(..cut);
        String::from_utf8_lossy(&tail).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_bytes_leave_first_and_are_counted() {
        let mut b = OutputBuffer::new(10);
        b.push(b"hello ");
        assert_eq!((b.text().as_str(), b.dropped()), ("hello ", 0));
        b.push(b"world!");
        assert_eq!((b.text().as_str(), b.dropped()), ("llo world!", 2));
        // A chunk longer than the cap keeps its own tail.
        b.push(b"0123456789abc");
        assert_eq!((b.text().as_str(), b.dropped()), ("3456789abc", 15));
        assert_eq!(b.tail(4), "9abc");
        assert_eq!(b.tail(100), "3456789abc");
    }

    #[test]
    fn characters_are_never_cut_in_two() {
        let mut b = OutputBuffer::new(5);
        b.push("aé€".as_bytes()); // 1 + 2 + 3 bytes
        assert_eq!(b.text(), "é€");
        b.push(b"x");
        // "é" would lose its first byte: it goes whole.
        assert_eq!(b.text(), "€x");
        assert_eq!(b.dropped(), 3);
        assert_eq!(b.tail(3), "x");
        assert_eq!(b.tail(4), "€x");
    }
}
