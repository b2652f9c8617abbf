//! The TUI's gateway as a thin relay to the home's persistent gateway (`daemon`): connect to
//! its socket (starting it, detached, when nobody listens), then copy lines both ways until
//! either side ends. The relay's end (the TUI's SIGTERM or EOF) only closes the connection:
//! the persistent gateway lets the client go and its sessions go on.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::Config;
use crate::rpc::call_log::{CallLog, Dir};
use crate::rpc::listener::socket_path;
use crate::rpc::{Line, LineReader};

/// Bytes moved per read in each direction.
const CHUNK: usize = 64 * 1024;

/// Relay stdin/stdout to the home's persistent gateway; `flags` are passed to it when this
/// relay starts it.
pub fn run(cfg: &Config, flags: &[String]) -> i32 {
    let stream = match connect_or_start(cfg, flags) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("[gateway-exit] {e}");
            return 1;
        }
    };
    let log = Watch::new(cfg);
    match copy_both_ways(&stream, log) {
        Ok(End::ClientClosed) => 0,
        Ok(End::GatewayClosed) => {
            eprintln!(
                "[gateway-exit] the persistent gateway closed the connection (it ended, or another client took over)"
            );
            1
        }
        Err(e) => {
            eprintln!("[gateway-exit] relay failed: {e}");
            1
        }
    }
}

fn connect_or_start(cfg: &Config, flags: &[String]) -> Result<UnixStream, String> {
    let path = socket_path(&cfg.home);
    if let Ok(s) = UnixStream::connect(&path) {
        return Ok(s);
    }
    let log = crate::private_file::private_dir(&cfg.home, &["logs"])
        .and_then(|dir| crate::private_file::append(&dir.join("tui-gateway.log")))
        .map_err(|e| format!("cannot open the persistent gateway's log: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon")
        .args(without_call_log(flags))
        .env("HERMES_HOME", &cfg.home)
        // Each relay logs its own client's frames; the gateway serves many.
        .env_remove("TUI_GATEWAY_RPC_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        // Its own session: the terminal's hangup and the TUI's signals never reach it.
        cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(io::Error::from));
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the persistent gateway: {e}"))?;
    let deadline = Instant::now() + cfg.relay_start;
    // Its first line says it listens (or that another one already does); its end, that it failed.
    let said = child
        .stdout
        .take()
        .map(|out| first_line(out, deadline))
        .unwrap_or_default();
    loop {
        match UnixStream::connect(&path) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline || (said.is_empty() && exited(&mut child)) => {
                return Err(format!(
                    "the persistent gateway for {} did not start ({e}); see {}",
                    cfg.home.display(),
                    cfg.home.join("logs/tui-gateway.log").display()
                ));
            }
            // Another relay's gateway won the lock and is still binding: a moment.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
}

/// `flags` without `--rpc-log` (and its value).
fn without_call_log(flags: &[String]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut skip = false;
    for f in flags {
        if std::mem::take(&mut skip) {
            continue;
        }
        match f.as_str() {
            "--rpc-log" => skip = true,
            _ if f.starts_with("--rpc-log=") => {}
            _ => kept.push(f.clone()),
        }
    }
    kept
}

/// The relay's call log (`--rpc-log`): the frames of its one client, split into lines as they
/// pass each way.
struct Watch {
    log: CallLog,
    lines: [LineReader; 2],
}

impl Watch {
    fn new(cfg: &Config) -> Watch {
        Watch {
            log: cfg
                .rpc_log
                .as_deref()
                .map(CallLog::open)
                .unwrap_or_default(),
            lines: [
                LineReader::new(cfg.frame_limit),
                LineReader::new(cfg.frame_limit),
            ],
        }
    }

    fn saw(&mut self, dir: Dir, bytes: &[u8]) {
        if !self.log.is_on() {
            return;
        }
        let Watch { log, lines } = self;
        lines[dir as usize].push(bytes, |line| {
            if let Line::Frame(frame) = line {
                log.record(dir, frame);
            }
        });
    }
}

fn exited(child: &mut std::process::Child) -> bool {
    matches!(child.try_wait(), Ok(Some(_)))
}

/// The first line `out` gives before `deadline` (empty at its end or the deadline).
fn first_line(mut out: std::process::ChildStdout, deadline: Instant) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.contains(&b'\n') && got.len() < 4096 {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(u16::MAX as u128) as u16;
        let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLIN)];
        if ms == 0 || !matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0) {
            break;
        }
        match out.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

enum End {
    ClientClosed,
    GatewayClosed,
}

/// One direction: what was read and not yet written on.
struct Pipe {
    buf: Vec<u8>,
    at: usize,
}

/// What a read or write gave.
enum Moved {
    Some,
    /// Nothing now (it would block).
    Later,
    /// The other side is gone.
    Ended,
}

fn moved(r: nix::Result<usize>) -> io::Result<(Moved, usize)> {
    use nix::errno::Errno;
    match r {
        Ok(0) => Ok((Moved::Ended, 0)),
        Ok(n) => Ok((Moved::Some, n)),
        Err(Errno::EAGAIN | Errno::EINTR) => Ok((Moved::Later, 0)),
        Err(Errno::EPIPE | Errno::ECONNRESET) => Ok((Moved::Ended, 0)),
        Err(e) => Err(e.into()),
    }
}

impl Pipe {
    fn new() -> Pipe {
        Pipe {
            buf: vec![0; CHUNK],
            at: CHUNK,
        }
    }

    fn pending(&self) -> bool {
        self.at < self.buf.len()
    }

    /// Read once from `from`, which was readable.
    fn fill(&mut self, from: BorrowedFd<'_>) -> io::Result<Moved> {
        self.buf.resize(CHUNK, 0);
        let (m, n) = moved(nix::unistd::read(from, &mut self.buf))?;
        self.buf.truncate(n);
        self.at = 0;
        Ok(m)
    }

    /// Write what is pending to `to` as far as it takes it.
    fn drain(&mut self, to: BorrowedFd<'_>) -> io::Result<Moved> {
        while self.pending() {
            match moved(nix::unistd::write(to, &self.buf[self.at..]))? {
                (Moved::Some, n) => self.at += n,
                (other, _) => return Ok(other),
            }
        }
        Ok(Moved::Some)
    }
}

/// Copy stdin to the socket and the socket to stdout, neither direction waiting on the other:
/// a side is read again only once what it gave last was written on, so each side's
/// backpressure reaches the other.
fn copy_both_ways(stream: &UnixStream, mut watch: Watch) -> io::Result<End> {
    stream.set_nonblocking(true)?;
    // SAFETY: stdin and stdout stay open for the whole process.
    let (input, output) = unsafe { (BorrowedFd::borrow_raw(0), BorrowedFd::borrow_raw(1)) };
    let socket = stream.as_fd();
    let (mut up, mut down) = (Pipe::new(), Pipe::new());
    let when = |on: bool, flags: PollFlags| if on { flags } else { PollFlags::empty() };
    loop {
        let mut fds = [
            PollFd::new(input, when(!up.pending(), PollFlags::POLLIN)),
            PollFd::new(
                socket,
                when(!down.pending(), PollFlags::POLLIN) | when(up.pending(), PollFlags::POLLOUT),
            ),
            PollFd::new(output, when(down.pending(), PollFlags::POLLOUT)),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        if ready[0] && !up.pending() {
            if matches!(up.fill(input)?, Moved::Ended) {
                return Ok(End::ClientClosed);
            }
            watch.saw(Dir::In, &up.buf);
        }
        if ready[1] && !down.pending() {
            if matches!(down.fill(socket)?, Moved::Ended) {
                return Ok(End::GatewayClosed);
            }
            watch.saw(Dir::Out, &down.buf);
        }
        if up.pending() && matches!(up.drain(socket)?, Moved::Ended) {
            return Ok(End::GatewayClosed);
        }
        if down.pending() && matches!(down.drain(output)?, Moved::Ended) {
            return Ok(End::ClientClosed);
        }
    }
}
