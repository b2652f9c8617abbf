//! The ordered out-queue to stdout.
//!
//! Frames pushed during a loop iteration are *held* until [`OutQueue::release`], which the loop
//! calls only after the store committed what those frames announce (commit before publish).
//! Under backpressure consecutive `message.delta` frames of one message are merged (the final
//! `message.complete` carries the authoritative text); no other frame is ever dropped.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::time::Instant;

use super::call_log::{CallLog, Dir};
use super::frame;
use serde_json::json;

enum Queued {
    Bytes(Vec<u8>),
    /// A `message.delta` kept unserialised so later deltas of the same message can merge into it.
    Delta {
        session_id: String,
        seq: u64,
        text: String,
    },
}

impl Queued {
    fn len(&self) -> usize {
        match self {
            Queued::Bytes(b) => b.len(),
            Queued::Delta { text, .. } => text.len() + 100,
        }
    }
}

pub struct OutQueue {
    frames: VecDeque<Queued>,
    /// How many frames at the back are held until the next release.
    held: usize,
    /// How many frames at the front jumped the queue ([`OutQueue::push_urgent`]).
    urgent: usize,
    /// Bytes taken from `frames` and not yet written.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Bytes in `frames` plus unwritten bytes of `wbuf`.
    bytes: usize,
    /// Past this many queued bytes, deltas coalesce.
    coalesce_at: usize,
    /// When the queue was last empty or last made write progress.
    last_progress: Instant,
    /// Sees every frame as it leaves the queue (and, through [`OutQueue::call_log`], every
    /// frame read); off unless `--rpc-log` is set.
    log: CallLog,
}

/// Result of trying to write.
#[derive(Debug, PartialEq, Eq)]
pub enum Flush {
    /// Everything released is written.
    Drained,
    /// The writer would block; wait for writability.
    Blocked,
}

impl OutQueue {
    pub fn new(now: Instant) -> Self {
        OutQueue {
            frames: VecDeque::new(),
            held: 0,
            urgent: 0,
            wbuf: Vec::new(),
            wpos: 0,
            bytes: 0,
            coalesce_at: 256 * 1024,
            last_progress: now,
            log: CallLog::default(),
        }
    }

    /// Forget every queued frame (and a frame half written); the call log stays.
    pub fn clear(&mut self, now: Instant) {
        let log = std::mem::take(&mut self.log);
        *self = OutQueue::new(now);
        self.log = log;
    }

    /// Log every frame written from now on (`--rpc-log`).
    pub fn set_call_log(&mut self, log: CallLog) {
        self.log = log;
    }

    /// The call log, for the frames read.
    pub fn call_log(&mut self) -> &mut CallLog {
        &mut self.log
    }

    /// Queue a whole frame (already ending in `\n`).
    pub fn push(&mut self, bytes: Vec<u8>) {
        self.bytes += bytes.len();
        self.frames.push_back(Queued::Bytes(bytes));
        self.held += 1;
    }

    /// Queue a `message.delta` event; merges into the previous frame when it is a delta of the
    /// same session and the queue is backed up.
    pub fn push_delta(&mut self, session_id: &str, seq: u64, text: &str) {
        if self.bytes >= self.coalesce_at
            && let Some(Queued::Delta {
                session_id: last_sid,
                seq: last_seq,
                text: last_text,
            }) = self.frames.back_mut()
            && last_sid == session_id
        {
            last_text.push_str(text);
            *last_seq = seq;
            self.bytes += text.len();
            return;
        }
        let q = Queued::Delta {
            session_id: session_id.to_string(),
            seq,
            text: text.to_string(),
        };
        self.bytes += q.len();
        self.frames.push_back(q);
        self.held += 1;
    }

    /// Queue a frame that announces nothing durable and that a client waits on (a `ping`'s
    /// answer, a refused frame's, the notice that output is held) ahead of every frame not yet
    /// being written — held ones included — after the urgent ones before it: control traffic
    /// is not kept behind a backlog of events, nor behind a commit that cannot happen.
    pub fn push_urgent(&mut self, bytes: Vec<u8>) {
        self.bytes += bytes.len();
        self.frames.insert(self.urgent, Queued::Bytes(bytes));
        self.urgent += 1;
    }

    /// Whether a frame jumped the queue and waits to be written.
    pub fn has_urgent(&self) -> bool {
        self.urgent > 0
    }

    /// Everything queued so far may be written.
    pub fn release(&mut self) {
        self.held = 0;
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Whether released frames wait to be written.
    pub fn has_released(&self) -> bool {
        self.wpos < self.wbuf.len() || self.frames.len() > self.held
    }

    /// How long the writer has made no progress while frames waited.
    pub fn stalled_since(&self) -> Option<Instant> {
        self.has_released().then_some(self.last_progress)
    }

    /// Write released frames until done or the writer would block. Errors other than
    /// `WouldBlock`/`Interrupted` are returned (EPIPE: the peer is gone).
    pub fn write_to(&mut self, w: &mut impl Write, now: Instant) -> io::Result<Flush> {
        loop {
            if self.wpos == self.wbuf.len() {
                self.wbuf.clear();
                self.wpos = 0;
                self.fill_wbuf();
                if self.wbuf.is_empty() {
                    self.last_progress = now;
                    return Ok(Flush::Drained);
                }
            }
            match w.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "stdout closed")),
                Ok(n) => {
                    self.wpos += n;
                    self.bytes -= n;
                    self.last_progress = now;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flush::Blocked),
                Err(e) => return Err(e),
            }
        }
    }

    /// Move released frames into the write buffer, up to a batch size.
    fn fill_wbuf(&mut self) {
        const BATCH: usize = 64 * 1024;
        while self.frames.len() > self.held && self.wbuf.len() < BATCH {
            let Some(q) = self.frames.pop_front() else {
                break;
            };
            self.urgent = self.urgent.saturating_sub(1);
            let queued_len = q.len();
            let bytes = match q {
                Queued::Bytes(b) => b,
                Queued::Delta {
                    session_id,
                    seq,
                    text,
                } => frame::event_frame(&frame::event_params(
                    "message.delta",
                    &session_id,
                    &json!({ "text": text }),
                    Some(seq),
                )),
            };
            if self.log.is_on() {
                self.log.record(Dir::Out, &bytes);
            }
            // Account for the exact serialised size from here on.
            self.bytes = self.bytes - queued_len + bytes.len();
            self.wbuf.extend_from_slice(&bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that accepts `budget` bytes and then would block.
    struct Pipe {
        data: Vec<u8>,
        budget: usize,
    }
    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.budget == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.budget);
            self.budget -= n;
            self.data.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn lines(data: &[u8]) -> Vec<serde_json::Value> {
        data.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn held_frames_wait_for_release() {
        let now = Instant::now();
        let mut q = OutQueue::new(now);
        let mut p = Pipe {
            data: vec![],
            budget: usize::MAX,
        };
        q.push(b"{\"a\":1}\n".to_vec());
        assert_eq!(q.write_to(&mut p, now).unwrap(), Flush::Drained);
        assert!(p.data.is_empty());
        q.release();
        q.write_to(&mut p, now).unwrap();
        assert_eq!(p.data, b"{\"a\":1}\n");
        assert!(q.is_empty());
    }

    #[test]
    fn urgent_frames_jump_the_backlog_in_their_own_order() {
        let mut q = OutQueue::new(Instant::now());
        q.push(b"{\"n\":1}\n".to_vec());
        q.push(b"{\"n\":2}\n".to_vec());
        q.release();
        q.push(b"{\"n\":3}\n".to_vec());
        q.push_urgent(b"{\"pong\":1}\n".to_vec());
        q.push_urgent(b"{\"pong\":2}\n".to_vec());
        assert!(q.has_urgent());
        let mut w = Pipe {
            data: Vec::new(),
            budget: usize::MAX,
        };
        q.write_to(&mut w, Instant::now()).unwrap();
        let got = lines(&w.data);
        assert_eq!(
            got,
            [
                json!({"pong": 1}),
                json!({"pong": 2}),
                json!({"n": 1}),
                json!({"n": 2})
            ],
            "the held frame stays held"
        );
        assert!(!q.has_urgent());
        q.release();
        q.write_to(&mut w, Instant::now()).unwrap();
        assert_eq!(lines(&w.data).last(), Some(&json!({"n": 3})));
    }

    #[test]
    fn a_frame_pushed_ahead_goes_before_held_frames() {
        let now = Instant::now();
        let mut q = OutQueue::new(now);
        let mut p = Pipe {
            data: vec![],
            budget: usize::MAX,
        };
        q.push(b"{\"held\":1}\n".to_vec());
        q.push_urgent(b"{\"pong\":1}\n".to_vec());
        q.write_to(&mut p, now).unwrap();
        assert_eq!(p.data, b"{\"pong\":1}\n");
        q.release();
        q.write_to(&mut p, now).unwrap();
        assert_eq!(p.data, b"{\"pong\":1}\n{\"held\":1}\n");
    }

    #[test]
    fn deltas_coalesce_only_under_backpressure_and_order_holds() {
        let now = Instant::now();
        let mut q = OutQueue::new(now);
        q.coalesce_at = 0;
        q.push_delta("s1", 1, "a");
        q.push_delta("s1", 2, "b");
        q.push(b"{\"control\":true}\n".to_vec());
        q.push_delta("s1", 4, "c");
        q.push_delta("s2", 5, "x");
        q.release();
        let mut p = Pipe {
            data: vec![],
            budget: usize::MAX,
        };
        q.write_to(&mut p, now).unwrap();
        let got = lines(&p.data);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0]["params"]["payload"]["text"], "ab");
        assert_eq!(got[0]["params"]["seq"], 2);
        assert_eq!(got[1]["control"], true);
        assert_eq!(got[2]["params"]["payload"]["text"], "c");
        assert_eq!(got[3]["params"]["session_id"], "s2");
    }

    #[test]
    fn a_blocked_writer_keeps_the_rest_and_resumes_mid_frame() {
        let now = Instant::now();
        let mut q = OutQueue::new(now);
        for i in 0..100 {
            q.push(format!("{{\"i\":{i}}}\n").into_bytes());
        }
        q.release();
        let mut p = Pipe {
            data: vec![],
            budget: 37,
        };
        assert_eq!(q.write_to(&mut p, now).unwrap(), Flush::Blocked);
        assert!(q.stalled_since().is_some());
        p.budget = usize::MAX;
        assert_eq!(q.write_to(&mut p, now).unwrap(), Flush::Drained);
        let got = lines(&p.data);
        assert_eq!(got.len(), 100);
        assert_eq!(got[99]["i"], 99);
        assert_eq!(q.bytes(), 0);
    }
}
