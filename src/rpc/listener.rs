//! The persistent gateway's door: a Unix socket in `HERMES_HOME` that clients (the relays the
//! TUI spawns) connect to. One gateway serves a home: the socket is bound only under the
//! exclusive `flock` of the lock file beside it, held for the gateway's life. The socket is
//! owner-only and each peer's uid is checked (`SO_PEERCRED`) before it is served.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
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

    /// The next waiting connection of this user, as a client's descriptors; `None` when no
    /// connection waits. Another user's connection is closed unserved.
    pub fn accept(&self) -> io::Result<Option<Io>> {
        loop {
            let stream = match self.socket.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The peer gave up before we took it: not the listener's failure.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(e),
            };
            let input = OwnedFd::from(stream);
            let peer =
                nix::sys::socket::getsockopt(&input, nix::sys::socket::sockopt::PeerCredentials)
                    .map_err(io::Error::from)?;
            if peer.uid() != crate::private_file::our_uid() {
                crate::diag!(
                    "[gateway] refused a connection from uid {} on {}",
                    peer.uid(),
                    self.path.display()
                );
                continue;
            }
            let output = input.try_clone()?;
            return Ok(Some(Io { input, output }));
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Still under the lock: the path is ours.
        let _ = std::fs::remove_file(&self.path);
    }
}
