//! The persistent gateway's clients: each relay's connection on the home's socket
//! (`rpc/listener.rs`) hands over a TUI's own pipes, which the gateway then serves as it serves
//! stdin/stdout, beside the other clients (`rpc/clients.rs`); a client is let go when its pipes
//! close or stall or its relay goes, while the sessions and their turns go on; and the gateway
//! ends once it has sat idle with no client.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use mio::Interest;
use mio::unix::SourceFd;

use crate::event_loop::{Gateway, LISTENER, Timer, TokenOwner};
use crate::rpc::client_conn::ClientConn;
use crate::rpc::listener::{self, Listener};

/// Connections waiting for their hello at most; a newer one closes the oldest (a connection
/// that never says hello holds nothing for long).
const MAX_PENDING: usize = 16;

/// What a persistent gateway holds beside its clients: the socket, the connections waiting for
/// their hello, and since when no client has been there.
pub(crate) struct Serving {
    listener: Listener,
    /// Oldest first, each under its own token ([`TokenOwner::Hello`]).
    pending: Vec<(u64, UnixStream)>,
    next_pending: u64,
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
            pending: Vec::new(),
            next_pending: 0,
            detached_since: None,
        });
        let now = self.clock.now();
        for number in self.clients.numbers() {
            self.detach_client(number, "serving the socket", now);
        }
        Ok(())
    }

    /// Client `number`'s input ended, or its output failed or stalled: a persistent gateway
    /// lets it go and serves the others; otherwise the gateway ends.
    pub(crate) fn client_gone(&mut self, number: u64, why: &str, now: Instant) {
        if self.serving.is_some() {
            self.detach_client(number, why, now);
        } else {
            self.begin_shutdown(why, now);
        }
    }

    fn detach_client(&mut self, number: u64, why: &str, now: Instant) {
        let Some(client) = self.clients.remove(number) else {
            return;
        };
        crate::event_loop::unregister_client(&mut self.reactor, &client);
        // Its relay ends, told why.
        if let Some(relay) = &client.relay {
            let _ = (&*relay).write_all(format!("{}{why}\n", listener::DETACHED).as_bytes());
        }
        let left = self.clients.len();
        crate::diag!("[gateway] client {number} left ({why}); {left} still attached");
        if left == 0 {
            if let Some(serving) = self.serving.as_mut() {
                serving.detached_since = Some(now);
            }
            self.timers
                .insert(now + self.cfg.idle_exit, Timer::IdleExit);
        }
    }

    /// The socket is readable: each waiting connection is the relay of a new client, served
    /// beside the others once its hello comes.
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
            let key = serving.next_pending;
            serving.next_pending += 1;
            if serving.pending.len() >= MAX_PENDING {
                let (old, conn) = serving.pending.remove(0);
                self.reactor.deregister(&mut SourceFd(&conn.as_raw_fd()));
                self.reactor.release(&TokenOwner::Hello(old));
            }
            let slot = self.reactor.slot(TokenOwner::Hello(key));
            if let Err(e) = slot.register(&mut SourceFd(&conn.as_raw_fd()), Interest::READABLE) {
                crate::diag!("[gateway] cannot poll a client's connection: {e}");
                self.reactor.release(&TokenOwner::Hello(key));
                continue;
            }
            if let Some(serving) = self.serving.as_mut() {
                serving.pending.push((key, conn));
            }
            // Its hello is usually there already.
            self.hello_readable(key, now);
        }
    }

    /// Waiting connection `key` is readable: its hello hands over a new client's pipes, which
    /// the gateway serves from now on; anything else closes it.
    pub(crate) fn hello_readable(&mut self, key: u64, now: Instant) {
        let Some(serving) = self.serving.as_mut() else {
            return;
        };
        let Some(at) = serving.pending.iter().position(|(k, _)| *k == key) else {
            return;
        };
        let hello = match listener::receive_hello(&serving.pending[at].1) {
            Ok(None) => return,
            Ok(Some(hello)) => Some(hello),
            Err(e) => {
                crate::diag!("[gateway] refused a connection: {e}");
                None
            }
        };
        let (_, conn) = serving.pending.remove(at);
        self.reactor.deregister(&mut SourceFd(&conn.as_raw_fd()));
        self.reactor.release(&TokenOwner::Hello(key));
        let Some(hello) = hello else {
            return;
        };
        let limits = crate::event_loop::client_limits(&self.cfg);
        let client = match ClientConn::new(hello.io, limits, hello.rpc_log.as_deref(), now) {
            Ok(client) => client,
            Err(e) => {
                crate::diag!("[gateway] cannot serve a client: {e}");
                return;
            }
        };
        let relay_fd = conn.as_raw_fd();
        let number = self.clients.add(client, false, Some(conn));
        crate::event_loop::register_client(&mut self.reactor, &mut self.clients, number);
        let relay = self.reactor.slot(TokenOwner::Relay(number));
        let _ = relay.register(&mut SourceFd(&relay_fd), Interest::READABLE);
        if let Some(serving) = self.serving.as_mut() {
            serving.detached_since = None;
        }
        self.greet(number, now);
    }

    /// The connection of client `number`'s relay is readable: only its end is expected (the
    /// client is gone with it).
    pub(crate) fn relay_readable(&mut self, number: u64, now: Instant) {
        let Some(conn) = self.clients.get(number).and_then(|c| c.relay.as_ref()) else {
            return;
        };
        let mut buf = [0u8; 256];
        loop {
            match (&*conn).read(&mut buf) {
                Ok(0) => return self.client_gone(number, "its relay went", now),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return self.client_gone(number, "its relay went", now),
            }
        }
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
