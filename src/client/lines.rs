//! `\n`-terminated lines from a descriptor, read with a deadline (poll, then read) and no thread.

use std::io::{self, Read};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::ClientError;

/// Bytes asked for per read.
const CHUNK: usize = 1 << 16;

pub struct Lines<R> {
    source: R,
    buf: Vec<u8>,
    /// Where the first line not yet handed out starts.
    start: usize,
    eof: bool,
}

impl<R: Read + AsFd> Lines<R> {
    pub fn new(source: R) -> Self {
        Lines {
            source,
            buf: Vec::with_capacity(CHUNK),
            start: 0,
            eof: false,
        }
    }

    /// The next line without its newline: a buffered one, else one read before `deadline`. At
    /// end of file an unterminated last line is still a line; after it, [`ClientError::Closed`].
    pub fn next_line(&mut self, deadline: Instant) -> Result<&[u8], ClientError> {
        loop {
            if let Some(line) = self.take_line() {
                return Ok(&self.buf[line]);
            }
            if self.eof {
                return Err(ClientError::Closed);
            }
            if !wait_readable(self.source.as_fd(), deadline)? {
                return Err(ClientError::Timeout);
            }
            self.read_once()?;
        }
    }

    /// A line already buffered, without reading.
    pub fn buffered_line(&mut self) -> Option<&[u8]> {
        let line = self.take_line()?;
        Some(&self.buf[line])
    }

    pub fn has_buffered_line(&self) -> bool {
        self.buf[self.start..].contains(&b'\n') || (self.eof && self.start < self.buf.len())
    }

    /// Whether end of file was read.
    pub fn at_eof(&self) -> bool {
        self.eof
    }

    /// Reads what arrives before `deadline` into the buffer (one read); false when nothing did.
    pub fn fill(&mut self, deadline: Instant) -> Result<bool, ClientError> {
        if self.eof {
            return Ok(false);
        }
        if !wait_readable(self.source.as_fd(), deadline)? {
            return Ok(false);
        }
        self.read_once()?;
        Ok(true)
    }

    /// One read into the buffer; call it when the source is readable (it blocks otherwise).
    pub fn read_once(&mut self) -> Result<(), ClientError> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + CHUNK, 0);
        let read = self.source.read(&mut self.buf[len..]);
        self.buf.truncate(len + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) => self.eof = true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => return Err(ClientError::Io(e)),
        }
        Ok(())
    }

    pub fn source(&self) -> &R {
        &self.source
    }

    fn take_line(&mut self) -> Option<Range<usize>> {
        let rest = &self.buf[self.start..];
        let (len, skip) = match rest.iter().position(|&b| b == b'\n') {
            Some(pos) => (pos, pos + 1),
            None if self.eof && !rest.is_empty() => (rest.len(), rest.len()),
            None => return None,
        };
        let line = self.start..self.start + len;
        self.start += skip;
        Some(line)
    }
}

/// Whether `fd` became readable (or hung up) before `deadline`; polls at least once.
pub(super) fn wait_readable(fd: BorrowedFd<'_>, deadline: Instant) -> Result<bool, ClientError> {
    loop {
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, timeout_until(deadline)) {
            Ok(n) if n > 0 => return Ok(true),
            Ok(_) if Instant::now() >= deadline => return Ok(false),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(ClientError::Io(e.into())),
        }
    }
}

/// A poll timeout that ends at `deadline` (in steps of at most a minute).
pub(super) fn timeout_until(deadline: Instant) -> PollTimeout {
    let left = deadline.saturating_duration_since(Instant::now());
    let step = left.min(Duration::from_secs(60));
    // Rounded up, so a wait never ends just before its deadline and spins.
    let ms = step.as_micros().div_ceil(1000) as u16;
    PollTimeout::from(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lines_arrive_across_writes_and_time_out() {
        let (r, mut w) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut lines = Lines::new(r);
        w.write_all(b"not json\n{\"a\":1}\n{\"b\"").unwrap();
        let soon = Instant::now() + Duration::from_secs(2);
        assert_eq!(lines.next_line(soon).unwrap(), b"not json");
        assert_eq!(lines.next_line(soon).unwrap(), b"{\"a\":1}");
        assert!(!lines.has_buffered_line());
        w.write_all(b":2}\n").unwrap();
        assert_eq!(lines.next_line(soon).unwrap(), b"{\"b\":2}");
        let brief = Instant::now() + Duration::from_millis(20);
        assert!(matches!(lines.next_line(brief), Err(ClientError::Timeout)));
        w.write_all(b"tail").unwrap();
        drop(w);
        assert_eq!(lines.next_line(soon).unwrap(), b"tail");
        assert!(matches!(lines.next_line(soon), Err(ClientError::Closed)));
    }
}
