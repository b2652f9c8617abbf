//! Bounded capture of a command's output: the head and the tail are kept, the middle is
//! counted and cut.

use std::collections::VecDeque;

pub struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    pub fn new(head_cap: usize, tail_cap: usize) -> Self {
        Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap,
            total: 0,
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.head.len() < self.head_cap {
            let take = data.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(data);
    }

    #[cfg(test)]
    /// Bytes seen in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes that were cut from the middle.
    pub fn cut(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The kept output as text, saying how much was cut.
    pub fn text(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let cut = self.cut();
        if cut > 0 {
            out.push_str(&format!("\n[... {cut} bytes of output cut ...]\n"));
        }
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = Capture::new(8, 8);
        c.push(b"hello ");
        c.push(b"world");
        assert_eq!(c.text(), "hello world");
        assert_eq!(c.cut(), 0);
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_says_what_was_cut() {
        let mut c = Capture::new(4, 4);
        for chunk in [&b"abcdef"[..], b"ghij", b"klmnopqrstuvwxyz"] {
            c.push(chunk);
        }
        assert_eq!(c.total(), 26);
        assert_eq!(c.cut(), 18);
        let t = c.text();
        assert!(t.starts_with("abcd") && t.ends_with("wxyz"), "{t}");
        assert!(t.contains("18 bytes"), "{t}");
    }
}
