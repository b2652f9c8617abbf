//! The persistent gateway's door: a Unix socket in `HERMES_HOME` that clients (the relays the
//! TUI spawns) connect to. One gateway serves a home: the socket is bound only under the
//! exclusive `flock` of the lock file beside it, held for the gateway's life. The socket is
//! owner-only and each peer's uid is checked (`SO_PEERCRED`) before it is served.
//!
//! A relay's first message (its hello) carries its stdin and stdout (`SCM_RIGHTS`): the gateway
//! then reads and writes the TUI's own pipes, so a frame takes no extra hop; the connection
//! stays open as the attachment itself (either side closing it ends the attachment).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::client_conn::Io;

/// The socket's name in `HERMES_HOME`.
pub const SOCKET: &str = "tui-gateway.sock";
/// The lock file whose holder serves the home (its pid written in it).
pub const LOCK: &str = "tui-gateway.lock";

/// Where a home's persistent gateway listens.
pub fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET)
}

pub struct Listener {
    socket: UnixListener,
    path: PathBuf,
    _lock: Flock<File>,
}

/// What binding a home's socket found.
pub enum Bind {
    Bound(Listener),
    /// Another gateway holds the home's lock (it serves, or is starting to).
    Taken,
}

impl Listener {
    /// Take the home's lock and listen on its socket (a stale socket left by a killed gateway
    /// is replaced; anything else where the socket belongs is refused).
    pub fn bind(home: &Path) -> Result<Bind, String> {
        let lock_path = home.join(LOCK);
        let file = crate::private_file::append(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => held,
            Err((_, Errno::EWOULDBLOCK)) => return Ok(Bind::Taken),
            Err((_, e)) => return Err(format!("cannot lock {}: {e}", lock_path.display())),
        };
        // Who serves the home, for a person (or a test) looking.
        let _ = lock
            .set_len(0)
            .and_then(|()| writeln!(&*lock, "{}", std::process::id()));
        let path = socket_path(home);
        match std::fs::symlink_metadata(&path) {
            // Ours to replace: whoever bound it held the lock we hold now, so it is gone.
            Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(&path)
                .map_err(|e| format!("cannot remove the stale {}: {e}", path.display()))?,
            Ok(_) => {
                return Err(format!(
                    "{} is not a socket; refusing to replace it",
                    path.display()
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot check {}: {e}", path.display())),
        }
        // Owner-only from its creation: no moment in which another user could connect.
        let old_mask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
        let bound = UnixListener::bind(&path);
        nix::sys::stat::umask(old_mask);
        let socket = bound.map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot make {} owner-only: {e}", path.display()))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("cannot make {} non-blocking: {e}", path.display()))?;
        Ok(Bind::Bound(Listener {
            socket,
            path,
            _lock: lock,
        }))
    }

    /// The descriptor, for the loop to register.
    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// The next waiting connection of this user (non-blocking); `None` when no connection
    /// waits. Another user's connection is closed unserved.
    pub fn accept(&self) -> io::Result<Option<UnixStream>> {
        loop {
            let stream = match self.socket.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The peer gave up before we took it: not the listener's failure.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(e),
            };
            // A peer whose uid cannot be read is refused like another user's, and the rest of
            // the backlog still taken (the socket's readiness is edge-triggered).
            let uid =
                nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
                    .map(|peer| peer.uid());
            if uid != Ok(crate::private_file::our_uid()) {
                crate::diag!(
                    "[gateway] refused a connection on {} (uid {uid:?})",
                    self.path.display()
                );
                continue;
            }
            stream.set_nonblocking(true)?;
            return Ok(Some(stream));
        }
    }
}

/// A relay's hello: the client's pipes, and where to log its frames (`--rpc-log`).
pub struct Hello {
    pub io: Io,
    pub rpc_log: Option<PathBuf>,
}

/// How the gateway's last line to an attached relay starts: the client was let go (not a crash).
pub const DETACHED: &str = "detached: ";

/// Longest hello line.
const HELLO_MAX: usize = 4096;

/// Send the hello on `conn`: the client's input and output (a relay's own stdin and stdout:
/// `[0, 1]`), and its call log's path.
pub fn send_hello(conn: &UnixStream, fds: [RawFd; 2], rpc_log: Option<&Path>) -> io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    let line = format!(
        "{}\n",
        serde_json::json!({"attach": 1, "rpc_log": rpc_log.map(|p| p.display().to_string())})
    );
    if line.len() > HELLO_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the call log's path is too long",
        ));
    }
    sendmsg::<()>(
        conn.as_raw_fd(),
        &[io::IoSlice::new(line.as_bytes())],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )?;
    Ok(())
}

/// Take a relay's hello from `conn` if it came: `Ok(None)` while it has not; an error for
/// anything but a hello with two descriptors.
pub fn receive_hello(conn: &UnixStream) -> io::Result<Option<Hello>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::FromRawFd;
    let mut buf = [0u8; HELLO_MAX];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    let flags = MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT;
    let msg = match recvmsg::<()>(conn.as_raw_fd(), &mut iov, Some(&mut space), flags) {
        Ok(m) => m,
        Err(Errno::EAGAIN | Errno::EINTR) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: the kernel just put these descriptors in our table for us alone.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
    }
    let bytes = msg.bytes;
    if bytes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed before its hello",
        ));
    }
    let hello: serde_json::Value = std::str::from_utf8(&buf[..bytes])
        .ok()
        .and_then(|t| serde_json::from_str(t.trim_end()).ok())
        .filter(|v: &serde_json::Value| v["attach"] == 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a relay's hello"))?;
    let mut fds = fds.into_iter();
    let (Some(input), Some(output), None) = (fds.next(), fds.next(), fds.next()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a hello without the client's two pipes",
        ));
    };
    Ok(Some(Hello {
        io: Io { input, output },
        rpc_log: hello["rpc_log"].as_str().map(PathBuf::from),
    }))
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Still under the lock: the path is ours.
        let _ = std::fs::remove_file(&self.path);
    }
}
