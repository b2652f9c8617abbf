//! One non-blocking pipe of a run, read as far as it goes now within a budget. Its end is end
//! of file or any read error other than "would block" (said once on stderr): a pipe that
//! fails is not waited on again.

use std::os::fd::OwnedFd;

use nix::errno::Errno;

pub struct Pipe {
    pub fd: OwnedFd,
    pub open: bool,
}

/// How a drain stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Nothing more now: wait for readiness.
    WouldBlock,
    /// The budget ran out with the pipe still readable: read again soon.
    Budget,
    /// End of file, or the read failed: the pipe is closed.
    Ended,
}

impl Pipe {
    pub fn new(fd: OwnedFd) -> Pipe {
        Pipe { fd, open: true }
    }

    /// Read into `sink` until the pipe would block or ends, or `budget` bytes were taken
    /// (`budget` is lowered by what was read). `what` names the pipe in the diagnostic.
    pub fn drain(
        &mut self,
        buf: &mut [u8],
        budget: &mut usize,
        what: &str,
        sink: impl FnMut(&[u8]),
    ) -> Drained {
        if !self.open {
            return Drained::Ended;
        }
        let fd = &self.fd;
        let drained = drain_from(|b| nix::unistd::read(fd, b), buf, budget, what, sink);
        if drained == Drained::Ended {
            self.open = false;
        }
        drained
    }
}

/// [`Pipe::drain`] over any `read`, so the loop's handling of each outcome is tested without
/// a process.
fn drain_from(
    mut read: impl FnMut(&mut [u8]) -> nix::Result<usize>,
    buf: &mut [u8],
    budget: &mut usize,
    what: &str,
    mut sink: impl FnMut(&[u8]),
) -> Drained {
    loop {
        if *budget == 0 {
            return Drained::Budget;
        }
        let want = buf.len().min(*budget);
        match read(&mut buf[..want]) {
            Ok(0) => return Drained::Ended,
            Ok(n) => {
                *budget -= n;
                sink(&buf[..n]);
            }
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => return Drained::WouldBlock,
            Err(e) => {
                crate::diag!(
                    "[gateway] reading a command's {what} failed ({e}); it counts as closed"
                );
                return Drained::Ended;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that hands out `script` one step per call.
    fn scripted(
        script: Vec<nix::Result<&'static [u8]>>,
    ) -> impl FnMut(&mut [u8]) -> nix::Result<usize> {
        let mut steps = script.into_iter();
        move |buf| match steps.next().unwrap_or(Err(Errno::EAGAIN)) {
            Ok(bytes) => {
                let n = bytes.len().min(buf.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                Ok(n)
            }
            Err(e) => Err(e),
        }
    }

    fn run(script: Vec<nix::Result<&'static [u8]>>, budget: usize) -> (Drained, Vec<u8>, usize) {
        let mut got = Vec::new();
        let mut budget = budget;
        let mut buf = [0u8; 8];
        let drained = drain_from(scripted(script), &mut buf, &mut budget, "stdout", |b| {
            got.extend_from_slice(b)
        });
        (drained, got, budget)
    }

    #[test]
    fn would_block_and_interrupts_keep_the_pipe_open() {
        let (d, got, left) = run(
            vec![Ok(b"ab"), Err(Errno::EINTR), Ok(b"c"), Err(Errno::EAGAIN)],
            100,
        );
        assert_eq!(
            (d, got.as_slice(), left),
            (Drained::WouldBlock, &b"abc"[..], 97)
        );
    }

    #[test]
    fn end_of_file_and_any_other_error_end_the_pipe() {
        let (d, got, _) = run(vec![Ok(b"ab"), Ok(b"")], 100);
        assert_eq!((d, got.as_slice()), (Drained::Ended, &b"ab"[..]));
        for errno in [Errno::EIO, Errno::EBADF, Errno::EINVAL] {
            let (d, got, _) = run(vec![Ok(b"xy"), Err(errno), Ok(b"never read")], 100);
            assert_eq!((d, got.as_slice()), (Drained::Ended, &b"xy"[..]), "{errno}");
        }
    }

    #[test]
    fn the_budget_bounds_one_drain() {
        let (d, got, left) = run(vec![Ok(b"abcd"), Ok(b"efgh"), Ok(b"ijkl")], 6);
        assert_eq!(
            (d, got.as_slice(), left),
            (Drained::Budget, &b"abcdef"[..], 0)
        );
    }
}
