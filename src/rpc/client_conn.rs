//! The client connection: the input and output descriptors, the line reader, the out-queue,
//! what the client declared it can do, and whether each direction still works. The event loop
//! registers the descriptors and calls [`ClientConn::read`] and [`ClientConn::write`] on
//! readiness; everything else speaks to the client through [`Outbox`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::frame;
use super::out_queue::Flush;
use super::outbox::Outbox;
use super::{CallLog, Line, LineReader, OutQueue, RpcError};

/// Bytes read from the input per read call.
const READ_CHUNK: usize = 64 * 1024;

/// Stray answers logged before the rest are only counted.
const STRAY_ANSWERS_LOGGED: u64 = 10;

/// A buffer for [`ClientConn::read`]: one serves every client, which keeps only its partial
/// line between reads (a thousand clients do not hold 64 KiB each).
pub fn read_buffer() -> Vec<u8> {
    vec![0; READ_CHUNK]
}

/// Where the protocol flows: the process's stdin/stdout, or descriptors the host gives us.
pub struct Io {
    pub input: OwnedFd,
    pub output: OwnedFd,
}

impl Io {
    /// Duplicates of stdin and stdout.
    pub fn stdio() -> io::Result<Io> {
        Ok(Io {
            input: io::stdin().as_fd().try_clone_to_owned()?,
            output: io::stdout().as_fd().try_clone_to_owned()?,
        })
    }
}

/// The bounds the connection keeps.
pub struct ClientLimits {
    /// Longest input line accepted.
    pub frame_limit: usize,
    /// Queued output bytes past which the gateway stops reading and driving turns.
    pub queue_cap: usize,
    /// How long a full queue may make no write progress before the client counts as gone.
    pub stall: Duration,
}

/// What one read from the input gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Bytes (or an interrupted call: none); read again.
    Data,
    /// Nothing until the next readiness.
    Again,
    /// End of input: the last partial line was handed out, the input is closed.
    Eof,
    /// The read failed; the input is closed.
    Failed(String),
}

/// One read's bytes with the line reader, handed out so the caller can handle each line while
/// holding itself mutably; give it back with [`ClientConn::done`].
pub struct Chunk {
    reader: LineReader,
    buf: Vec<u8>,
    filled: usize,
    pub read: Read,
}

impl Chunk {
    /// Each complete line of this read (on EOF, also the unterminated last one).
    pub fn lines(&mut self, emit: impl FnMut(Line<'_>)) {
        match self.read {
            Read::Eof => self.reader.finish(emit),
            _ => self.reader.push(&self.buf[..self.filled], emit),
        }
        self.filled = 0;
    }
}

pub struct ClientConn {
    input: OwnedFd,
    output: OwnedFd,
    saved_flags: Vec<(RawFd, i32)>,
    /// The line reader (a partial line); out while a [`Chunk`] is handed out.
    inbox: Option<LineReader>,
    out: OutQueue,
    limits: ClientLimits,
    /// Readiness was reported and no `WouldBlock` seen since (or the fd cannot be polled).
    input_ready: bool,
    input_open: bool,
    output_dead: bool,
    /// The client declared it answers `approval` server requests.
    server_requests: bool,
    stray_answers: u64,
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<i32> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let new = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(new)).map_err(io::Error::from)?;
    Ok(flags)
}

struct FdWriter<'a>(&'a OwnedFd);

impl io::Write for FdWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        nix::unistd::write(self.0, buf).map_err(io::Error::from)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ClientConn {
    /// Take over `io` (made non-blocking until [`ClientConn::restore_flags`]).
    pub fn new(
        io: Io,
        limits: ClientLimits,
        rpc_log: Option<&Path>,
        now: Instant,
    ) -> Result<ClientConn, String> {
        let mut saved_flags = Vec::new();
        for fd in [&io.input, &io.output] {
            let flags =
                set_nonblocking(fd).map_err(|e| format!("cannot make fd non-blocking: {e}"))?;
            saved_flags.push((fd.as_raw_fd(), flags));
        }
        let mut out = OutQueue::new(now);
        if let Some(path) = rpc_log {
            out.set_call_log(CallLog::open(path));
        }
        Ok(ClientConn {
            inbox: Some(LineReader::new(limits.frame_limit)),
            input: io.input,
            output: io.output,
            saved_flags,
            out,
            limits,
            input_ready: true,
            input_open: true,
            output_dead: false,
            server_requests: false,
            stray_answers: 0,
        })
    }

    /// Whether a client is there to read what is queued.
    fn output_alive(&self) -> bool {
        !self.output_dead
    }

    /// The descriptors, for the loop to register.
    pub fn input_fd(&self) -> RawFd {
        self.input.as_raw_fd()
    }

    pub fn output_fd(&self) -> RawFd {
        self.output.as_raw_fd()
    }

    pub fn frame_limit(&self) -> usize {
        self.limits.frame_limit
    }

    // ---- input ----

    /// The loop saw the input readable.
    pub fn input_readable(&mut self) {
        self.input_ready = true;
    }

    pub fn input_open(&self) -> bool {
        self.input_open
    }

    /// A read now could return something.
    pub fn wants_read(&self) -> bool {
        self.input_open && self.input_ready
    }

    /// Read once into `buf` (every client's one buffer: [`read_buffer`]). Handle the chunk's
    /// lines, then give it back with [`ClientConn::done`], which returns the buffer.
    pub fn read(&mut self, mut buf: Vec<u8>) -> Chunk {
        let reader = self
            .inbox
            .take()
            // Lost only if a line handler panicked; start clean rather than refuse input.
            .unwrap_or_else(|| LineReader::new(self.limits.frame_limit));
        if buf.len() < READ_CHUNK {
            buf = read_buffer();
        }
        let mut filled = 0;
        let read = match nix::unistd::read(&self.input, &mut buf) {
            Ok(0) => {
                self.input_open = false;
                Read::Eof
            }
            Ok(n) => {
                filled = n;
                Read::Data
            }
            Err(nix::errno::Errno::EAGAIN) => {
                self.input_ready = false;
                Read::Again
            }
            Err(nix::errno::Errno::EINTR) => Read::Data,
            Err(e) => {
                self.input_open = false;
                Read::Failed(e.to_string())
            }
        };
        Chunk {
            reader,
            buf,
            filled,
            read,
        }
    }

    pub fn done(&mut self, chunk: Chunk) -> Vec<u8> {
        self.inbox = Some(chunk.reader);
        chunk.buf
    }

    /// The frame, after the call log saw it.
    pub fn log_in<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        let log = self.out.call_log();
        if log.is_on() {
            log.record(super::call_log::Dir::In, bytes);
        }
        bytes
    }

    /// An answer to no server request of ours: logged (boundedly) and dropped.
    pub fn stray_answer(&mut self, id: &Value) {
        self.stray_answers += 1;
        if self.stray_answers <= STRAY_ANSWERS_LOGGED {
            crate::diag!("[gateway] ignoring an answer to unknown server request {id}");
        }
    }

    /// `client.capabilities`: whether the client answers `approval` server requests.
    pub fn set_server_requests(&mut self, on: bool) {
        self.server_requests = on;
    }

    // ---- output ----

    /// Everything queued so far may be written (its content is committed).
    pub fn release(&mut self) {
        self.out.release();
    }

    /// An answer a client waits on that announces nothing (a `ping`'s): ahead of every queued
    /// frame, written before the iteration's other work ([`ClientConn::write_urgent`]).
    pub fn push_urgent(&mut self, frame: Vec<u8>) {
        if self.output_alive() {
            self.out.push_urgent(frame);
        }
    }

    /// Write now if a frame jumped the queue (and what is released behind it, as far as the
    /// pipe takes it).
    pub fn write_urgent(&mut self, now: Instant) -> Result<(), String> {
        if self.out.has_urgent() {
            self.write(now)
        } else {
            Ok(())
        }
    }

    /// Write what is released until done or the output would block. On a write error the
    /// output is dead (its queue dropped) and the error is returned, once.
    pub fn write(&mut self, now: Instant) -> Result<(), String> {
        if self.output_dead || !self.out.has_released() {
            return Ok(());
        }
        match self.out.write_to(&mut FdWriter(&self.output), now) {
            Ok(Flush::Drained | Flush::Blocked) => Ok(()),
            Err(e) => {
                self.output_dead = true;
                self.out.clear(now);
                Err(e.to_string())
            }
        }
    }

    /// Whether released frames wait to be written to a live output.
    pub fn has_released(&self) -> bool {
        !self.output_dead && self.out.has_released()
    }

    /// Block until the output is writable, at most `at_most` (and a second).
    pub fn wait_writable(&self, at_most: Duration) {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let ms = at_most.as_millis().min(1000) as u16;
        let mut fds = [PollFd::new(self.output.as_fd(), PollFlags::POLLOUT)];
        let _ = poll(&mut fds, PollTimeout::from(ms.max(1)));
    }

    /// Bytes waiting in the out-queue.
    pub fn queued_bytes(&self) -> usize {
        self.out.bytes()
    }

    /// Queued bytes past which the client's queue is paused.
    pub fn queue_cap(&self) -> usize {
        self.limits.queue_cap
    }

    /// The queue is past its cap: stop producing until the client reads.
    pub fn paused(&self) -> bool {
        self.out.bytes() > self.limits.queue_cap
    }

    /// When a paused queue that makes no progress counts as a gone client.
    pub fn stall_deadline(&self) -> Option<Instant> {
        if !self.paused() {
            return None;
        }
        self.out
            .stalled_since()
            .map(|since| since + self.limits.stall)
    }

    /// Forget queued output (benches that do not read it).
    pub fn discard_output(&mut self, now: Instant) {
        self.out = OutQueue::new(now);
    }

    /// Give the descriptors back their original flags (the host may use them after us).
    pub fn restore_flags(&self) {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        for (fd, flags) in &self.saved_flags {
            let owned = if *fd == self.input.as_raw_fd() {
                &self.input
            } else {
                &self.output
            };
            let _ = fcntl(owned, FcntlArg::F_SETFL(OFlag::from_bits_truncate(*flags)));
        }
    }
}

// With no client to read them (its output dead), frames are dropped, not queued.
impl Outbox for ClientConn {
    fn answer(&mut self, id: &frame::Id, result: &Value) {
        if self.output_alive() {
            self.out.push(frame::response(id, result));
        }
    }
    fn error(&mut self, id: &frame::Id, err: &RpcError) {
        if self.output_alive() {
            self.out.push(frame::error(id, err));
        }
    }
    fn event(&mut self, _session_id: &str, params: &str) {
        if self.output_alive() {
            self.out.push(frame::event_frame(params));
        }
    }
    fn delta(&mut self, session_id: &str, seq: u64, text: &str) {
        if self.output_alive() {
            self.out.push_delta(session_id, seq, text);
        }
    }
    fn takes_server_requests(&self) -> bool {
        self.server_requests
    }
    fn server_request(&mut self, id: &str, method: &str, params: &Value) {
        if self.output_alive() {
            self.out.push(frame::server_request(id, method, params));
        }
    }
}

/// A connection on two pipes, for unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A connection with a 64-byte frame limit; returns it with the client's ends (what writes
    /// its input, what reads its output).
    pub fn conn(queue_cap: usize) -> (ClientConn, OwnedFd, OwnedFd) {
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let (in_r, in_w) = pipe();
        let (out_r, out_w) = pipe();
        let limits = ClientLimits {
            frame_limit: 64,
            queue_cap,
            stall: Duration::from_secs(5),
        };
        let io = Io {
            input: in_r,
            output: out_w,
        };
        let c = ClientConn::new(io, limits, None, Instant::now()).expect("conn");
        (c, in_w, out_r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use super::testing::conn;

    /// Read until `Again` or the end, collecting lines (`None` for a too-long one).
    fn read_all(c: &mut ClientConn) -> (Vec<Option<String>>, Read) {
        let mut lines = Vec::new();
        loop {
            let mut chunk = c.read(read_buffer());
            chunk.lines(|l| {
                lines.push(match l {
                    Line::Frame(b) => Some(String::from_utf8_lossy(b).into_owned()),
                    Line::TooLong => None,
                })
            });
            let read = std::mem::replace(&mut chunk.read, Read::Again);
            c.done(chunk);
            if read != Read::Data {
                return (lines, read);
            }
        }
    }

    fn written(out_r: &OwnedFd) -> Vec<serde_json::Value> {
        let mut buf = vec![0; 64 * 1024];
        let n = nix::unistd::read(out_r, &mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .map(|l| serde_json::from_str(l).expect("a frame is JSON"))
            .collect()
    }

    #[test]
    fn lines_split_across_reads_and_the_last_one_comes_at_eof() {
        let (mut c, in_w, _out_r) = conn(1 << 20);
        nix::unistd::write(&in_w, b"{\"a\":1}\n{\"b\"").unwrap();
        let (lines, read) = read_all(&mut c);
        assert_eq!(lines, vec![Some("{\"a\":1}".to_string())]);
        assert_eq!(read, Read::Again);
        assert!(!c.wants_read(), "no read until the loop sees readiness");
        c.input_readable();
        nix::unistd::write(
            &in_w,
            format!(":2}}\n{}\n{{\"c\"", "x".repeat(100)).as_bytes(),
        )
        .unwrap();
        drop(in_w);
        let (lines, read) = read_all(&mut c);
        assert_eq!(
            lines,
            vec![
                Some("{\"b\":2}".to_string()),
                None,
                Some("{\"c\"".to_string())
            ]
        );
        assert_eq!(read, Read::Eof);
        assert!(!c.input_open());
        assert!(!c.wants_read());
    }

    #[test]
    fn frames_are_held_until_released_then_written_in_order() {
        let (mut c, _in_w, out_r) = conn(1 << 20);
        let now = Instant::now();
        c.answer(&frame::Id::of(&json!(1)), &json!({"ok": true}));
        c.delta("s1", 1, "he");
        c.delta("s1", 2, "llo");
        c.error(&frame::Id::of(&json!("x")), &RpcError::new(4002, "nope"));
        c.write(now).unwrap();
        assert!(!c.has_released());
        assert!(c.queued_bytes() > 0, "held, not dropped");
        c.release();
        assert!(c.has_released());
        c.write(now).unwrap();
        assert_eq!(c.queued_bytes(), 0);
        let frames = written(&out_r);
        assert_eq!(frames.len(), 4);
        assert_eq!(frames[0]["result"]["ok"], true);
        assert_eq!(frames[1]["params"]["payload"]["text"], "he");
        assert_eq!(frames[2]["params"]["seq"], 2);
        assert_eq!(frames[3]["error"]["code"], 4002);
    }

    #[test]
    fn a_dead_output_is_reported_once_and_drops_its_queue() {
        let (mut c, _in_w, out_r) = conn(1 << 20);
        drop(out_r);
        let now = Instant::now();
        c.event("", "{\"type\":\"x\",\"session_id\":\"\",\"payload\":{}}");
        c.release();
        assert!(c.write(now).is_err());
        assert!(!c.has_released());
        assert_eq!(c.queued_bytes(), 0);
        c.answer(&frame::Id::of(&json!(2)), &json!(null));
        c.release();
        assert!(c.write(now).is_ok(), "reported once");
        assert!(!c.has_released());
    }

    #[test]
    fn a_queue_past_its_cap_pauses_and_gets_a_stall_deadline() {
        let (mut c, _in_w, _out_r) = conn(100);
        assert!(!c.paused());
        assert_eq!(c.stall_deadline(), None);
        c.answer(&frame::Id::of(&json!(1)), &json!("x".repeat(200)));
        assert!(c.paused());
        // Held frames are not a stall: the client was never asked to read them.
        assert_eq!(c.stall_deadline(), None);
        c.release();
        assert!(c.stall_deadline().is_some());
        c.discard_output(Instant::now());
        assert!(!c.paused());
    }

    #[test]
    fn server_requests_follow_the_declared_capability() {
        let (mut c, _in_w, _out_r) = conn(1 << 20);
        assert!(!c.takes_server_requests());
        c.set_server_requests(true);
        assert!(c.takes_server_requests());
    }
}
