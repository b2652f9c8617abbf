//! A JSON-RPC client for the gateway's stdio protocol (`PROTOCOL.md`), without threads: every
//! read waits with a deadline (poll, then read), and a write reads the gateway's output while it
//! waits, so neither side can block the other.
//!
//! `tui-gateway chat`, the black-box tests, the benches and the load driver all speak to the
//! gateway through it; an embedding host or a benchmark harness can too. It spawns the gateway
//! ([`Client::spawn`]) or wraps descriptors it is given ([`Client::from_fds`]).

mod lines;

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use serde_json::{Value, json};

pub use lines::Lines;
use lines::timeout_until;

#[derive(Debug)]
pub enum ClientError {
    /// The deadline passed first.
    Timeout,
    /// The gateway closed its output (or, for a write, its input is closed).
    Closed,
    /// The gateway answered a request with this error object.
    Refused(Value),
    Io(io::Error),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Timeout => write!(f, "timed out waiting for the gateway"),
            ClientError::Closed => write!(f, "the gateway closed its stdout"),
            ClientError::Refused(error) => write!(f, "the gateway answered with an error: {error}"),
            ClientError::Io(e) => write!(f, "i/o with the gateway failed: {e}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<ClientError> for String {
    fn from(e: ClientError) -> String {
        e.to_string()
    }
}

/// A connection to one gateway: its input (where requests go) and its output (where answers and
/// events come from), and the process when this client spawned it.
pub struct Client {
    /// Non-blocking write end; `None` once closed.
    input: Option<File>,
    output: Lines<File>,
    child: Option<Child>,
    next_id: u64,
    id_prefix: Option<String>,
    write_timeout: Duration,
}

impl Client {
    /// `program -m tui_gateway.entry`, as the TUI spawns the gateway (SIGHUP and SIGINT at
    /// their defaults, see [`default_signals`]).
    pub fn gateway_command(program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(["-m", "tui_gateway.entry"]);
        default_signals(&mut cmd);
        cmd
    }

    /// Spawns `cmd` with its stdin and stdout piped to this client (everything else, stderr
    /// included, is as the caller set it).
    pub fn spawn(cmd: &mut Command) -> io::Result<Client> {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("the gateway's pipes are missing"));
        };
        let mut client = Client::from_fds(stdin.into(), stdout.into())?;
        client.child = Some(child);
        Ok(client)
    }

    /// A client on descriptors: `input` is where it writes (made non-blocking), `output` where it
    /// reads.
    pub fn from_fds(input: OwnedFd, output: OwnedFd) -> io::Result<Client> {
        set_nonblocking(&input)?;
        Ok(Client {
            input: Some(File::from(input)),
            output: Lines::new(File::from(output)),
            child: None,
            next_id: 0,
            id_prefix: None,
            write_timeout: Duration::from_secs(60),
        })
    }

    /// Request ids become strings `<prefix><n>` instead of numbers.
    pub fn with_id_prefix(mut self, prefix: &str) -> Client {
        self.id_prefix = Some(prefix.to_string());
        self
    }

    /// How long one write may wait for the gateway to take its input (default 60 s).
    pub fn with_write_timeout(mut self, timeout: Duration) -> Client {
        self.write_timeout = timeout;
        self
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    // ---- writing --------------------------------------------------------------------------

    /// The next request id.
    pub fn fresh_id(&mut self) -> Value {
        self.next_id += 1;
        match &self.id_prefix {
            Some(prefix) => json!(format!("{prefix}{}", self.next_id)),
            None => json!(self.next_id),
        }
    }

    /// Sends a request without waiting for its answer; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.fresh_id();
        self.send(&request(&id, method, params))?;
        Ok(id)
    }

    /// Answers a request the gateway sent (a server request).
    pub fn respond(&mut self, id: &Value, result: Value) -> Result<(), ClientError> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }

    /// Refuses a request the gateway sent.
    pub fn respond_error(
        &mut self,
        id: &Value,
        code: i64,
        message: &str,
    ) -> Result<(), ClientError> {
        self.send(&error_response(id, code, message))
    }

    /// One frame and its newline.
    pub fn send(&mut self, frame: &Value) -> Result<(), ClientError> {
        let mut line = frame.to_string().into_bytes();
        line.push(b'\n');
        self.send_raw(&line)
    }

    /// Bytes as they are. While the gateway does not take them, its output is read into the
    /// buffer (so a gateway that waits for its reader to catch up is not deadlocked).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let deadline = Instant::now() + self.write_timeout;
        let input = self.input.as_mut().ok_or(ClientError::Closed)?;
        let mut rest = bytes;
        while !rest.is_empty() {
            match input.write(rest) {
                Ok(n) => {
                    rest = &rest[n..];
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::Io(e)),
            }
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout);
            }
            let reading = !self.output.at_eof();
            let mut fds = vec![PollFd::new(input.as_fd(), PollFlags::POLLOUT)];
            if reading {
                fds.push(PollFd::new(self.output.source().as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, timeout_until(deadline)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(ClientError::Io(e.into())),
            }
            let readable = reading && fds[1].any().unwrap_or(false);
            if readable {
                self.output.read_once()?;
            }
        }
        Ok(())
    }

    /// Closes the gateway's input (a real end of file for it).
    pub fn close_input(&mut self) {
        self.input = None;
    }

    pub fn input_open(&self) -> bool {
        self.input.is_some()
    }

    /// Another descriptor for the gateway's input, for a writer of its own (non-blocking, like
    /// this client's: a write may return `WouldBlock`). The gateway sees end of file only once
    /// every copy is closed.
    pub fn input_copy(&self) -> io::Result<File> {
        let input = self.input.as_ref().ok_or(io::ErrorKind::BrokenPipe)?;
        input.try_clone()
    }

    // ---- reading --------------------------------------------------------------------------

    /// The next line of the gateway's output, without its newline.
    pub fn next_line(&mut self, deadline: Instant) -> Result<&[u8], ClientError> {
        self.output.next_line(deadline)
    }

    /// The next JSON object the gateway wrote; other lines are skipped.
    pub fn next_frame(&mut self, deadline: Instant) -> Result<Value, ClientError> {
        loop {
            if let Some(frame) = parse_frame(self.output.next_line(deadline)?) {
                return Ok(frame);
            }
        }
    }

    /// Reads what arrives before `deadline` into the buffer, without taking a line; false when
    /// nothing did (or the output is at its end).
    pub fn pump(&mut self, deadline: Instant) -> Result<bool, ClientError> {
        self.output.fill(deadline)
    }

    pub fn has_buffered_line(&self) -> bool {
        self.output.has_buffered_line()
    }

    /// Whether the gateway's output reached its end (lines may still be buffered).
    pub fn output_closed(&self) -> bool {
        self.output.at_eof()
    }

    /// Stops reading: this client's read end of the gateway's output closes (the gateway's
    /// next write meets EPIPE when no one else holds one), and reads see the end from here on.
    pub fn close_output(&mut self) -> io::Result<()> {
        // An empty source at its end stands in for the closed one.
        #[allow(clippy::disallowed_methods, reason = "/dev/null never blocks")]
        let mut ended = Lines::new(File::open("/dev/null")?);
        ended.read_once().map_err(io::Error::other)?;
        self.output = ended;
        Ok(())
    }

    /// The next frame that satisfies `want`; the others are dropped.
    pub fn wait_for(
        &mut self,
        deadline: Instant,
        mut want: impl FnMut(&Value) -> bool,
    ) -> Result<Value, ClientError> {
        loop {
            let frame = self.next_frame(deadline)?;
            if want(&frame) {
                return Ok(frame);
            }
        }
    }

    /// The next event of type `kind` (the whole frame); other frames are dropped.
    pub fn wait_event(&mut self, kind: &str, deadline: Instant) -> Result<Value, ClientError> {
        self.wait_for(deadline, |f| event_type(f) == Some(kind))
    }

    /// The answer to request `id` (the whole frame); every other frame before it goes to
    /// `other` (events, server requests to answer, answers to other requests).
    pub fn wait_response(
        &mut self,
        id: &Value,
        deadline: Instant,
        mut other: impl FnMut(&mut Client, Value),
    ) -> Result<Value, ClientError> {
        loop {
            let frame = self.next_frame(deadline)?;
            if is_response(&frame) && frame.get("id") == Some(id) {
                return Ok(frame);
            }
            other(self, frame);
        }
    }

    /// Sends a request and returns its `result`; an error answer is [`ClientError::Refused`].
    /// Frames before the answer are dropped.
    pub fn call(
        &mut self,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value, ClientError> {
        let id = self.send_request(method, params)?;
        let mut answer = self.wait_response(&id, deadline, |_, _| {})?;
        match answer.get_mut("error") {
            Some(error) => Err(ClientError::Refused(error.take())),
            None => Ok(answer
                .get_mut("result")
                .map(Value::take)
                .unwrap_or(Value::Null)),
        }
    }

    /// Waits until the gateway wrote something, one of `others` is readable, or `deadline`
    /// (`None`: no deadline). A line already buffered counts as written.
    pub fn wait_readable(
        &self,
        others: &[BorrowedFd<'_>],
        deadline: Option<Instant>,
    ) -> Result<Readable, ClientError> {
        let mut ready = Readable {
            output: self.has_buffered_line(),
            others: 0,
        };
        let watch_output = !ready.output && !self.output.at_eof();
        let mut fds: Vec<PollFd> = others
            .iter()
            .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
            .collect();
        if watch_output {
            fds.push(PollFd::new(self.output.source().as_fd(), PollFlags::POLLIN));
        }
        let timeout = match deadline {
            _ if ready.output => PollTimeout::ZERO,
            Some(deadline) => timeout_until(deadline),
            None => PollTimeout::NONE,
        };
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(ClientError::Io(e.into())),
        }
        for (i, fd) in fds.iter().enumerate() {
            if fd.any().unwrap_or(false) {
                match i.checked_sub(others.len()) {
                    Some(_) => ready.output = true,
                    None => ready.others |= 1 << i,
                }
            }
        }
        // At its end the output is "readable" for good: reading it tells the caller so.
        ready.output |= self.output.at_eof();
        Ok(ready)
    }

    // ---- the process ----------------------------------------------------------------------

    /// The exit status, if the spawned gateway has exited (reaps it; never waits).
    pub fn try_exit(&mut self) -> io::Result<Option<ExitStatus>> {
        match &mut self.child {
            Some(child) => child.try_wait(),
            None => Ok(None),
        }
    }

    /// Waits for the spawned gateway to exit, reading its output into the buffer meanwhile (so it
    /// never blocks on a full pipe; the lines stay readable).
    pub fn wait_exit(&mut self, deadline: Instant) -> Result<ExitStatus, ClientError> {
        let child = self.child.as_mut().ok_or(ClientError::Closed)?;
        if let Some(status) = child.try_wait().map_err(ClientError::Io)? {
            return Ok(status);
        }
        let exited = pidfd_open(child.id());
        loop {
            if let Some(status) = child.try_wait().map_err(ClientError::Io)? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout);
            }
            let reading = !self.output.at_eof();
            let mut fds = Vec::with_capacity(2);
            if reading {
                fds.push(PollFd::new(self.output.source().as_fd(), PollFlags::POLLIN));
            }
            let timeout = match &exited {
                Some(pidfd) => {
                    fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
                    timeout_until(deadline)
                }
                // Without a pidfd (kernels before 5.3) the exit is looked for every 5 ms.
                None => timeout_until(deadline.min(Instant::now() + Duration::from_millis(5))),
            };
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(ClientError::Io(e.into())),
            }
            if reading && fds[0].any().unwrap_or(false) {
                self.output.read_once()?;
            }
        }
    }

    /// Closes the input and waits for the gateway to exit; kills it if it has not by `deadline`.
    /// `Err` holds the status after the kill.
    pub fn close(&mut self, deadline: Instant) -> Result<ExitStatus, Option<ExitStatus>> {
        self.close_input();
        match self.wait_exit(deadline) {
            Ok(status) => Ok(status),
            Err(_) => Err(self.kill()),
        }
    }

    /// SIGKILL and reap; the status, if there is a process.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for Client {
    /// A gateway this client spawned and that still runs is killed: nothing is left behind.
    fn drop(&mut self) {
        if let Ok(None) = self.try_exit() {
            self.kill();
        }
    }
}

/// Which descriptors [`Client::wait_readable`] found readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readable {
    pub output: bool,
    /// Bit `i`: `others[i]`.
    pub others: u64,
}

impl Readable {
    pub fn other(&self, i: usize) -> bool {
        self.others & (1 << i) != 0
    }
}

/// SIGHUP and SIGINT start at their defaults in the program `cmd` runs, whatever this process
/// inherited (`nohup` ignores SIGHUP, a shell's background job ignores SIGINT): the gateway
/// keeps an inherited `SIG_IGN`, so it would ignore them too. `pre_exec` hooks run in the order
/// they were added: call this before adding one that sets dispositions of its own.
pub fn default_signals(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the hook only calls signal(2), which is
    // async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGHUP, libc::SIGINT] {
                if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        })
    }
}

// ---- frames -------------------------------------------------------------------------------

/// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`.
pub fn request(id: &Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}`: a refusal of request `id`.
pub fn error_response(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A line of the gateway's output as a JSON object; anything else (not JSON, arrays) is `None`.
pub fn parse_frame(line: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(line.trim_ascii()).ok()?;
    value.is_object().then_some(value)
}

/// `params.type` of an event frame.
pub fn event_type(frame: &Value) -> Option<&str> {
    if frame.get("method").and_then(Value::as_str) == Some("event") && frame.get("id").is_none() {
        frame["params"]["type"].as_str()
    } else {
        None
    }
}

/// An answer to a request: no method, a result or an error.
pub fn is_response(frame: &Value) -> bool {
    frame.get("method").is_none() && (frame.get("result").is_some() || frame.get("error").is_some())
}

/// The kinds of frame a client reacts to.
#[derive(Debug, PartialEq)]
pub enum Frame<'a> {
    Event {
        kind: &'a str,
        session_id: &'a str,
        payload: &'a Value,
    },
    Response {
        /// The id as text (a number's digits).
        id: String,
        outcome: Result<&'a Value, String>,
    },
    ServerRequest {
        id: &'a Value,
        method: &'a str,
    },
    Other,
}

static NULL: Value = Value::Null;

pub fn classify(frame: &Value) -> Frame<'_> {
    let method = frame.get("method").and_then(Value::as_str);
    let id = frame.get("id").filter(|id| !id.is_null());
    match (method, id) {
        (Some("event"), _) => {
            let params = frame.get("params").unwrap_or(&NULL);
            let text = |key| params.get(key).and_then(Value::as_str).unwrap_or("");
            Frame::Event {
                kind: text("type"),
                session_id: text("session_id"),
                payload: params.get("payload").unwrap_or(&NULL),
            }
        }
        (Some(method), Some(id)) => Frame::ServerRequest { id, method },
        (None, Some(id)) => {
            let id = match id {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let outcome = match frame.get("error") {
                Some(error) => Err(error_message(error)),
                None => Ok(frame.get("result").unwrap_or(&NULL)),
            };
            Frame::Response { id, outcome }
        }
        _ => Frame::Other,
    }
}

/// The `message` of a JSON-RPC error object (the whole object when it has none).
pub fn error_message(error: &Value) -> String {
    match error.get("message").and_then(Value::as_str) {
        Some(message) => message.to_string(),
        None => error.to_string(),
    }
}

// ---- the system boundary ------------------------------------------------------------------

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(fd, FcntlArg::F_GETFL)?;
    fcntl(
        fd,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )?;
    Ok(())
}

/// A descriptor that becomes readable when process `pid` (our unreaped child, so the pid cannot
/// be reused) exits; `None` where the kernel has no `pidfd_open`.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a new descriptor that nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd as std::os::fd::RawFd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_json_objects() {
        assert!(parse_frame(b"{\"jsonrpc\":\"2.0\"}\n").is_some());
        assert!(parse_frame(b"  {\"a\":1}\r\n").is_some());
        assert!(parse_frame(b"not json\n").is_none());
        assert!(parse_frame(b"[1,2]\n").is_none());
        assert!(parse_frame(b"\n").is_none());
        assert!(parse_frame(b"\xff\xfe{}\n").is_none());
    }

    #[test]
    fn classifies_frames() {
        let event = json!({"jsonrpc":"2.0","method":"event","params":{
            "type":"message.delta","session_id":"a1b2c3d4","payload":{"text":"hi"},"seq":3}});
        assert_eq!(
            classify(&event),
            Frame::Event {
                kind: "message.delta",
                session_id: "a1b2c3d4",
                payload: &json!({"text":"hi"}),
            }
        );
        assert_eq!(event_type(&event), Some("message.delta"));
        let bare = json!({"method":"event"});
        assert!(matches!(
            classify(&bare),
            Frame::Event {
                kind: "",
                session_id: "",
                ..
            }
        ));

        let ok = json!({"jsonrpc":"2.0","id":"c1","result":{"pong":true}});
        assert_eq!(
            classify(&ok),
            Frame::Response {
                id: "c1".to_string(),
                outcome: Ok(&json!({"pong":true})),
            }
        );
        assert!(is_response(&ok) && event_type(&ok).is_none());
        let numeric =
            json!({"jsonrpc":"2.0","id":7,"error":{"code":4001,"message":"session not found"}});
        assert_eq!(
            classify(&numeric),
            Frame::Response {
                id: "7".to_string(),
                outcome: Err("session not found".to_string()),
            }
        );
        let odd_error = json!({"id":"c2","error":"boom"});
        assert!(
            matches!(classify(&odd_error), Frame::Response { outcome: Err(m), .. } if m == "\"boom\"")
        );

        let srq = json!({"jsonrpc":"2.0","id":"srq-1","method":"approval","params":{}});
        assert_eq!(
            classify(&srq),
            Frame::ServerRequest {
                id: &json!("srq-1"),
                method: "approval",
            }
        );
        assert!(!is_response(&srq));
        assert_eq!(classify(&json!({"id":null,"result":{}})), Frame::Other);
        assert_eq!(classify(&json!({"jsonrpc":"2.0"})), Frame::Other);
    }

    /// A peer that echoes each line back with `"id"` as the answer, through a socket pair.
    fn echo_pair() -> (Client, std::os::unix::net::UnixStream) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let write = ours.try_clone().unwrap();
        let client = Client::from_fds(write.into(), ours.into()).unwrap();
        (client, theirs)
    }

    #[test]
    fn waits_for_the_answer_while_handing_over_other_frames() {
        let (mut client, mut peer) = echo_pair();
        let id = client.send_request("ping", json!({})).unwrap();
        assert_eq!(id, json!(1));
        let mut got = String::new();
        let mut reader = io::BufReader::new(peer.try_clone().unwrap());
        io::BufRead::read_line(&mut reader, &mut got).unwrap();
        let sent: Value = serde_json::from_str(&got).unwrap();
        assert_eq!(sent["method"], "ping");
        peer.write_all(
            b"garbage\n{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"type\":\"x\"}}\n",
        )
        .unwrap();
        peer.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"pong\":true}}\n")
            .unwrap();
        let mut others = Vec::new();
        let soon = Instant::now() + Duration::from_secs(5);
        let answer = client
            .wait_response(&id, soon, |_, f| others.push(f))
            .unwrap();
        assert_eq!(answer["result"]["pong"], true);
        assert_eq!(others.len(), 1);
        assert_eq!(event_type(&others[0]), Some("x"));
        let brief = Instant::now() + Duration::from_millis(20);
        assert!(matches!(
            client.next_frame(brief),
            Err(ClientError::Timeout)
        ));
        drop((peer, reader));
        assert!(matches!(client.next_frame(soon), Err(ClientError::Closed)));
    }

    #[test]
    fn a_write_the_peer_does_not_take_yet_reads_meanwhile() {
        let (mut client, peer) = echo_pair();
        // The peer writes more than a socket buffer holds before it reads anything.
        let big = vec![b'x'; 4 << 20];
        let writer = std::thread::spawn(move || {
            let mut peer = peer;
            let mut line = b"{\"a\":1}\n".to_vec();
            line.splice(0..0, std::iter::repeat_n(b' ', 1 << 20));
            for _ in 0..4 {
                peer.write_all(&line).unwrap();
            }
            let mut sink = vec![0u8; 1 << 16];
            let mut total = 0;
            while total < (4 << 20) + 1 {
                total += io::Read::read(&mut peer, &mut sink).unwrap();
            }
            total
        });
        let mut frame = big;
        frame.push(b'\n');
        client.send_raw(&frame).unwrap();
        assert_eq!(writer.join().unwrap(), (4 << 20) + 1);
        let soon = Instant::now() + Duration::from_secs(5);
        for _ in 0..4 {
            assert_eq!(client.next_frame(soon).unwrap()["a"], 1);
        }
    }

    #[test]
    fn waits_for_a_spawned_process_to_exit() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo '{\"a\":1}'; read _; exit 3"]);
        let mut client = Client::spawn(&mut cmd).unwrap();
        let soon = Instant::now() + Duration::from_secs(5);
        assert!(matches!(
            client.wait_exit(Instant::now() + Duration::from_millis(50)),
            Err(ClientError::Timeout)
        ));
        let status = client.close(soon).unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(client.next_frame(soon).unwrap()["a"], 1);
        assert!(matches!(client.next_frame(soon), Err(ClientError::Closed)));
    }
}
