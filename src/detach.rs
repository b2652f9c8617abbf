//! The persistent gateway's client: a relay's connection on the home's socket
//! (`rpc/listener.rs`) hands over the TUI's own pipes, which the gateway then serves as it
//! serves stdin/stdout; the client is let go when its pipes close or stall or its relay goes,
//! while the sessions and their turns go on; the next connection takes over; and the gateway
//! ends once it has sat idle with no client.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use mio::Interest;
use mio::unix::SourceFd;

use crate::event_loop::{Gateway, LISTENER, PENDING, RELAY, Timer};
use crate::rpc::listener::{self, Listener};

/// What a persistent gateway holds beside its client: the socket, the connection of the
/// relay being served, the newest one waiting for its hello, and since when no client has
/// been there.
pub(crate) struct Serving {
    listener: Listener,
    relay: Option<UnixStream>,
    pending: Option<UnixStream>,
    detached_since: Option<Instant>,
}

impl Gateway {
    /// Serve clients from `listener` from now on; the client the gateway started with (none
    /// that reads: the persistent gateway is started detached) is let go.
    pub fn listen(&mut self, listener: Listener) -> Result<(), String> {
        self.reactor
            .register_fixed(&mut SourceFd(&listener.fd()), LISTENER, Interest::READABLE)
            .map_err(|e| format!("cannot poll the socket: {e}"))?;
        self.serving = Some(Serving {
            listener,
            relay: None,
            pending: None,
            detached_since: None,
        });
        let now = self.clock.now();
        self.detach_client("serving the socket", now);
        Ok(())
    }

    /// The client's input ended, or its output failed or stalled: a persistent gateway lets it
    /// go and serves the next one; otherwise the gateway ends.
    pub(crate) fn client_gone(&mut self, why: &str, now: Instant) {
        if self.serving.is_some() {
            self.detach_client(why, now);
        } else {
            self.begin_shutdown(why, now);
        }
    }

    fn detach_client(&mut self, why: &str, now: Instant) {
        self.drop_relay(why);
        self.reactor
            .deregister(&mut SourceFd(&self.client.input_fd()));
        self.reactor
            .deregister(&mut SourceFd(&self.client.output_fd()));
        self.output_polled = false;
        if let Err(e) = self.client.detach(now) {
            crate::diag!("[gateway] cannot let the client go: {e}");
            self.begin_shutdown("client lost", now);
            return;
        }
        crate::diag!("[gateway] no client ({why}); sessions go on");
        if let Some(serving) = self.serving.as_mut() {
            serving.detached_since = Some(now);
        }
        self.timers
            .insert(now + self.cfg.idle_exit, Timer::IdleExit);
    }

    /// The socket is readable: each waiting connection is the relay of a new client, which
    /// takes over from the one before it (one client at a time) once its hello comes. Only the
    /// newest waits for its hello.
    pub(crate) fn accept_clients(&mut self, now: Instant) {
        loop {
            let Some(serving) = self.serving.as_mut() else {
                return;
            };
            let conn = match serving.listener.accept() {
                Ok(Some(conn)) => conn,
                Ok(None) => return,
                Err(e) => {
                    crate::diag!("[gateway] cannot accept a client: {e}");
                    return;
                }
            };
            // Closed unserved: the relay sees the end at once rather than a gateway that will
            // not answer.
            if self.shutdown.is_some() {
                continue;
            }
            if let Some(old) = serving.pending.take() {
                self.reactor.deregister(&mut SourceFd(&old.as_raw_fd()));
            }
            if let Err(e) = self.reactor.register_fixed(
                &mut SourceFd(&conn.as_raw_fd()),
                PENDING,
                Interest::READABLE,
            ) {
                crate::diag!("[gateway] cannot poll a client's connection: {e}");
                continue;
            }
            if let Some(serving) = self.serving.as_mut() {
                serving.pending = Some(conn);
            }
            // Its hello is usually there already.
            self.hello_readable(now);
        }
    }

    /// The waiting connection is readable: its hello hands over a new client's pipes, which
    /// the gateway serves from now on; anything else closes it.
    pub(crate) fn hello_readable(&mut self, now: Instant) {
        let Some(conn) = self.serving.as_ref().and_then(|s| s.pending.as_ref()) else {
            return;
        };
        let received = listener::receive_hello(conn);
        let hello = match received {
            Ok(None) => return,
            Ok(Some(hello)) => Some(hello),
            Err(e) => {
                crate::diag!("[gateway] refused a connection: {e}");
                None
            }
        };
        let Some(conn) = self.serving.as_mut().and_then(|s| s.pending.take()) else {
            return;
        };
        self.reactor.deregister(&mut SourceFd(&conn.as_raw_fd()));
        let Some(hello) = hello else {
            return;
        };
        if self.client.attached() {
            self.detach_client("a new client took over", now);
        }
        if let Err(e) = self.client.attach(hello.io, hello.rpc_log.as_deref(), now) {
            crate::diag!("[gateway] cannot serve a client: {e}");
            return;
        }
        let _ = self.reactor.register_fixed(
            &mut SourceFd(&conn.as_raw_fd()),
            RELAY,
            Interest::READABLE,
        );
        if let Some(serving) = self.serving.as_mut() {
            serving.detached_since = None;
            serving.relay = Some(conn);
        }
        self.output_polled = crate::event_loop::register_client(&self.reactor, &self.client);
        self.greet(now);
    }

    /// The served relay's connection is readable: only its end is expected (the client is
    /// gone with it).
    pub(crate) fn relay_readable(&mut self, now: Instant) {
        let Some(conn) = self.serving.as_ref().and_then(|s| s.relay.as_ref()) else {
            return;
        };
        let mut buf = [0u8; 256];
        loop {
            match (&*conn).read(&mut buf) {
                Ok(0) => return self.client_gone("its relay went", now),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return self.client_gone("its relay went", now),
            }
        }
    }

    /// Close the served relay's connection (it ends), telling it why.
    fn drop_relay(&mut self, why: &str) {
        let Some(conn) = self.serving.as_mut().and_then(|s| s.relay.take()) else {
            return;
        };
        self.reactor.deregister(&mut SourceFd(&conn.as_raw_fd()));
        let _ = (&conn).write_all(format!("{}{why}\n", listener::DETACHED).as_bytes());
    }

    /// The idle timer fired: with no client, no turn running and no background process for a
    /// whole idle time, the persistent gateway ends.
    pub(crate) fn idle_exit_due(&mut self, now: Instant) {
        let Some(since) = self.serving.as_ref().and_then(|s| s.detached_since) else {
            return;
        };
        if self.shutdown.is_some() {
            return;
        }
        // A timer of an earlier absence: this one has its own.
        if now < since + self.cfg.idle_exit {
            return;
        }
        let busy = self
            .sessions
            .iter()
            .any(|(rid, s)| s.running() || self.tools.processes.any_running(rid));
        if busy {
            self.timers
                .insert(now + self.cfg.idle_exit, Timer::IdleExit);
        } else {
            self.begin_shutdown("idle with no client", now);
        }
    }
}
