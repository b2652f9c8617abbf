//! `\n`-terminated lines from a pipe with a deadline (poll, then read) and no thread, for clients
//! whose round-trip timings must include nothing but the pipe and the peer: the load driver and
//! the benches.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use serde_json::Value;

pub struct DeadlineLines<R> {
    source: R,
    buf: Vec<u8>,
    start: usize,
}

impl<R: Read + AsFd> DeadlineLines<R> {
    pub fn new(source: R) -> Self {
        DeadlineLines {
            source,
            buf: Vec::with_capacity(1 << 16),
            start: 0,
        }
    }

    /// The next line without its newline; `Ok(None)` at end of file.
    pub fn next_line(&mut self, deadline: Instant) -> Result<Option<&[u8]>, String> {
        loop {
            if let Some(pos) = self.buf[self.start..].iter().position(|&b| b == b'\n') {
                let line = self.start..self.start + pos;
                self.start += pos + 1;
                return Ok(Some(&self.buf[line]));
            }
            self.buf.drain(..self.start);
            self.start = 0;
            if !self.wait_readable(deadline)? {
                return Err(format!(
                    "timed out waiting for a line (deadline passed {:?} ago)",
                    Instant::now().saturating_duration_since(deadline)
                ));
            }
            let len = self.buf.len();
            self.buf.resize(len + (1 << 16), 0);
            match self.source.read(&mut self.buf[len..]) {
                Ok(0) => {
                    self.buf.truncate(len);
                    return Ok(None);
                }
                Ok(n) => self.buf.truncate(len + n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.buf.truncate(len),
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    }

    /// The next JSON object frame; other lines are skipped; end of file is an error.
    pub fn next_frame(&mut self, deadline: Instant) -> Result<Value, String> {
        loop {
            let line = self
                .next_line(deadline)?
                .ok_or("the gateway closed its stdout")?;
            if let Ok(frame @ Value::Object(_)) = serde_json::from_slice::<Value>(line) {
                return Ok(frame);
            }
        }
    }

    /// The source back (bytes already buffered are dropped).
    pub fn into_inner(self) -> R {
        self.source
    }

    /// Whether the source became readable before `deadline`.
    fn wait_readable(&self, deadline: Instant) -> Result<bool, String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let step = left.min(Duration::from_millis(60_000)).as_millis() as u16;
            let mut fds = [PollFd::new(self.source.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(step)) {
                Ok(n) if n > 0 => return Ok(true),
                Ok(_) if left.is_zero() || Instant::now() >= deadline => return Ok(false),
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(format!("poll failed: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_frames_arrive_across_writes_and_time_out() {
        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut lines = DeadlineLines::new(r);
        let mut w = w;
        use std::io::Write;
        w.write_all(b"not json\n{\"a\":1}\n{\"b\"").unwrap();
        let soon = Instant::now() + Duration::from_secs(2);
        assert_eq!(lines.next_frame(soon).unwrap()["a"], 1);
        w.write_all(b":2}\n").unwrap();
        assert_eq!(lines.next_frame(soon).unwrap()["b"], 2);
        assert!(
            lines
                .next_line(Instant::now() + Duration::from_millis(20))
                .is_err()
        );
        drop(w);
        assert_eq!(lines.next_line(soon).unwrap(), None);
    }
}
