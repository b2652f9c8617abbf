//! The write end of a run's stdin pipe (non-blocking) and the bytes queued for it, bounded:
//! what the pipe does not take now waits here until it is writable again; a write that would
//! pass the cap is refused whole, so the caller sees it and nothing is cut.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;

use nix::errno::Errno;

/// Why bytes for a run's stdin were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdinRefused {
    /// No such run, or it was started without a stdin pipe.
    NoPipe,
    /// `close_stdin` was asked, or the command closed its end (or exited).
    Closed,
    /// Queueing these bytes would pass the cap: nothing of them was taken.
    Full { queued: usize, cap: usize },
}

impl std::fmt::Display for StdinRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StdinRefused::NoPipe => write!(f, "the process has no stdin pipe"),
            StdinRefused::Closed => write!(f, "the process's stdin is closed"),
            StdinRefused::Full { queued, cap } => write!(
                f,
                "the process is not reading its stdin: {queued} bytes queued already (cap {cap})"
            ),
        }
    }
}

impl std::error::Error for StdinRefused {}

/// How a flush of the queue stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Everything queued is in the pipe.
    Empty,
    /// The pipe is full: wait for writability.
    WouldBlock,
    /// The reader is gone (or the write failed): the pipe is closed, the queue dropped.
    Broken,
}

pub struct StdinPipe {
    /// `None` once closed (the descriptor went to the loop to deregister).
    fd: Option<OwnedFd>,
    queue: VecDeque<u8>,
    cap: usize,
    /// Close once the queue is written.
    closing: bool,
}

impl StdinPipe {
    pub fn new(fd: OwnedFd, cap: usize) -> StdinPipe {
        StdinPipe {
            fd: Some(fd),
            queue: VecDeque::new(),
            cap,
            closing: false,
        }
    }

    pub fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Queue `bytes` (all or nothing) and write what the pipe takes now.
    pub fn write(&mut self, bytes: &[u8]) -> Result<Flushed, StdinRefused> {
        if self.fd.is_none() || self.closing {
            return Err(StdinRefused::Closed);
        }
        if self.queue.len() + bytes.len() > self.cap {
            return Err(StdinRefused::Full {
                queued: self.queue.len(),
                cap: self.cap,
            });
        }
        self.queue.extend(bytes);
        Ok(self.flush())
    }

    /// Ask to close: now when nothing is queued, else once the queue is written.
    pub fn close(&mut self) {
        self.closing = true;
    }

    /// Write what is queued as far as the pipe takes it.
    pub fn flush(&mut self) -> Flushed {
        let Some(fd) = &self.fd else {
            return Flushed::Broken;
        };
        let flushed = flush_to(|b| nix::unistd::write(fd, b), &mut self.queue);
        if flushed == Flushed::Broken {
            self.queue = VecDeque::new();
        }
        flushed
    }

    /// The descriptor, once the pipe is done with: closed as asked with the queue written, or
    /// broken. The caller deregisters it before it drops it.
    pub fn take_if_done(&mut self, flushed: Flushed) -> Option<OwnedFd> {
        let done = flushed == Flushed::Broken || (self.closing && self.queue.is_empty());
        if done { self.fd.take() } else { None }
    }
}

/// [`StdinPipe::flush`] over any `write`, so each outcome is tested without a process.
fn flush_to(
    mut write: impl FnMut(&[u8]) -> nix::Result<usize>,
    queue: &mut VecDeque<u8>,
) -> Flushed {
    while !queue.is_empty() {
        let (front, _) = queue.as_slices();
        match write(front) {
            Ok(0) => return Flushed::Broken,
            Ok(n) => {
                queue.drain(..n);
            }
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => return Flushed::WouldBlock,
            // EPIPE (the reader left) or anything else: nothing more will go through.
            Err(_) => return Flushed::Broken,
        }
    }
    Flushed::Empty
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pipe_keeps_the_rest_queued_and_a_broken_one_drops_it() {
        let mut q: VecDeque<u8> = b"abcdef".iter().copied().collect();
        let mut taken = Vec::new();
        let mut steps = vec![Ok(2), Err(Errno::EINTR), Ok(1), Err(Errno::EAGAIN)].into_iter();
        let f = flush_to(
            |b| {
                let step = steps.next().unwrap();
                if let Ok(n) = step {
                    taken.extend_from_slice(&b[..n]);
                }
                step
            },
            &mut q,
        );
        assert_eq!(f, Flushed::WouldBlock);
        assert_eq!(taken, b"abc");
        assert_eq!(q.iter().copied().collect::<Vec<u8>>(), b"def");
        assert_eq!(flush_to(|_| Err(Errno::EPIPE), &mut q), Flushed::Broken);
        assert_eq!(flush_to(|b| Ok(b.len()), &mut q), Flushed::Empty);
    }

    #[test]
    fn writes_past_the_cap_are_refused_whole_and_closing_refuses_more() {
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .unwrap();
        // The cap bounds what is queued with the pipe itself full (64 KiB filled here).
        let chunk = vec![b'x'; 64 * 1024];
        assert_eq!(nix::unistd::write(&w, &chunk), Ok(chunk.len()));
        let mut pipe = StdinPipe::new(w, 1000);
        assert_eq!(pipe.write(&[b'y'; 600]), Ok(Flushed::WouldBlock));
        assert_eq!(pipe.queued(), 600);
        assert_eq!(
            pipe.write(&[b'z'; 500]),
            Err(StdinRefused::Full {
                queued: 600,
                cap: 1000
            })
        );
        pipe.close();
        assert_eq!(pipe.write(b"more"), Err(StdinRefused::Closed));
        // Still queued: not done until the reader takes it.
        let flushed = pipe.flush();
        assert!(pipe.take_if_done(flushed).is_none());
        let mut buf = vec![0u8; 128 * 1024];
        let n = nix::unistd::read(&r, &mut buf).unwrap();
        assert_eq!(n, 64 * 1024);
        let flushed = pipe.flush();
        assert_eq!(flushed, Flushed::Empty);
        assert!(pipe.take_if_done(flushed).is_some());
        // The reader gone: the next write breaks the pipe (SIGPIPE is ignored by Rust programs).
        let (r2, w2) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        drop(r2);
        let mut gone = StdinPipe::new(w2, 10);
        assert_eq!(gone.write(b"hi"), Ok(Flushed::Broken));
        assert!(gone.take_if_done(Flushed::Broken).is_some());
        assert_eq!(gone.write(b"hi"), Err(StdinRefused::Closed));
    }
}
