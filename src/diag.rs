//! Diagnostics on stderr that never panic, never block the loop and never grow without bound.
//!
//! A line is written at once when stderr can take it without blocking (checked with a zero
//! `poll`, and written in pieces no larger than `PIPE_BUF`, which a writable pipe takes whole);
//! otherwise it waits in a bounded buffer that the loop drains each iteration ([`flush`]). When
//! the buffer is full, lines are dropped and counted, and the count is reported once stderr
//! drains. When stderr is gone (its reader closed it), diagnostics stop silently.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::Budget;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// Bytes of diagnostics held while stderr is not read.
const CAP: usize = 64 * 1024;
/// Largest single write: a pipe that polls writable takes this much without blocking.
const PIECE: usize = 4096;

struct Log {
    pending: Vec<u8>,
    dropped: u64,
    gone: bool,
}

static LOG: Mutex<Log> = Mutex::new(Log {
    pending: Vec::new(),
    dropped: 0,
    gone: false,
});

fn with_log<R>(f: impl FnOnce(&mut Log) -> R) -> R {
    // A panic while the lock was held must not turn every later diagnostic into a panic.
    let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut log)
}

/// Queue one line for stderr and write what can be written now.
pub fn line(text: &str) {
    with_log(|log| {
        log.push(text);
        write_some(log, std::io::stderr().as_fd(), PollTimeout::ZERO);
    });
}

/// Write what waits, as far as stderr takes it without blocking (the loop calls this).
pub fn flush() {
    with_log(|log| write_some(log, std::io::stderr().as_fd(), PollTimeout::ZERO));
}

/// Before exiting: wait within `budget` for stderr to take what waits.
pub fn flush_for(budget: &Budget) {
    with_log(|log| {
        while !log.gone && (!log.pending.is_empty() || log.dropped > 0) {
            let left = budget.left().unwrap_or(Duration::MAX);
            if left.is_zero() {
                return;
            }
            let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
            if !write_some(log, std::io::stderr().as_fd(), PollTimeout::from(ms)) {
                return;
            }
        }
    });
}

impl Log {
    fn push(&mut self, text: &str) {
        if self.gone {
            return;
        }
        if self.pending.len() + text.len() + 1 > CAP {
            self.dropped += 1;
        } else {
            self.pending.extend_from_slice(text.as_bytes());
            self.pending.push(b'\n');
        }
    }
}

/// Write to `fd` what it takes without blocking (waiting at most `wait` for the first piece).
/// True when something was written.
fn write_some(log: &mut Log, fd: BorrowedFd<'_>, wait: PollTimeout) -> bool {
    let mut wrote = false;
    loop {
        if log.pending.is_empty() && log.dropped > 0 {
            let note = format!(
                "[gateway] {} diagnostic lines dropped: stderr was not read\n",
                log.dropped
            );
            log.pending.extend_from_slice(note.as_bytes());
            log.dropped = 0;
        }
        if log.gone || log.pending.is_empty() {
            return wrote;
        }
        let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
        let timeout = if wrote { PollTimeout::ZERO } else { wait };
        match poll(&mut fds, timeout) {
            Ok(n) if n > 0 => {}
            Ok(_) | Err(nix::errno::Errno::EINTR) => return wrote,
            Err(_) => {
                log.gone = true;
                return wrote;
            }
        }
        let revents = fds[0].revents().unwrap_or(PollFlags::empty());
        if revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
            log.gone = true;
            log.pending.clear();
            return wrote;
        }
        let n = log.pending.len().min(PIECE);
        match nix::unistd::write(fd, &log.pending[..n]) {
            Ok(0) => return wrote,
            Ok(k) => {
                log.pending.drain(..k);
                wrote = true;
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return wrote,
            Err(_) => {
                // The reader is gone (EPIPE) or stderr is closed: nobody will read these.
                log.gone = true;
                log.pending.clear();
                return wrote;
            }
        }
    }
}

/// `diag!("…", args)`: one diagnostic line on stderr, through [`line`].
#[macro_export]
macro_rules! diag {
    ($($arg:tt)*) => {
        $crate::diag::line(&format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn fresh() -> Log {
        Log {
            pending: Vec::new(),
            dropped: 0,
            gone: false,
        }
    }

    #[test]
    fn a_full_pipe_holds_lines_then_drops_and_counts_them() {
        let (read, write) = nix::unistd::pipe().unwrap();
        use nix::fcntl::{FcntlArg, fcntl};
        let size = fcntl(&write, FcntlArg::F_SETPIPE_SZ(4096)).unwrap() as usize;
        // Fill the pipe so nothing more fits.
        let filler = vec![b'.'; size];
        assert_eq!(nix::unistd::write(&write, &filler).unwrap(), size);
        let mut log = fresh();
        let line = "x".repeat(1023);
        for _ in 0..100 {
            log.push(&line);
            assert!(!write_some(&mut log, write.as_fd(), PollTimeout::ZERO));
        }
        assert_eq!(log.pending.len(), CAP);
        assert_eq!(log.dropped as usize, 100 - CAP / 1024);
        // Drain the reader side: what was held comes out, then the count.
        let mut reader = std::fs::File::from(read);
        let mut got = Vec::new();
        let mut buf = vec![0; 65536];
        while !(log.pending.is_empty() && log.dropped == 0) {
            let n = reader.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            write_some(&mut log, write.as_fd(), PollTimeout::ZERO);
        }
        drop(write);
        reader.read_to_end(&mut got).unwrap();
        let text = String::from_utf8(got).unwrap();
        assert_eq!(text.matches(&line).count(), CAP / 1024);
        assert!(text.ends_with(&format!(
            "[gateway] {} diagnostic lines dropped: stderr was not read\n",
            100 - CAP / 1024
        )));
    }

    #[test]
    fn a_closed_reader_stops_diagnostics() {
        let (read, write) = nix::unistd::pipe().unwrap();
        drop(read);
        let mut log = fresh();
        log.push("nobody will read this");
        write_some(&mut log, write.as_fd(), PollTimeout::ZERO);
        assert!(log.gone && log.pending.is_empty());
        log.push("nor this");
        assert!(log.pending.is_empty());
    }
}
