//! The persistent gateway's client: served over the home's socket (`rpc/listener.rs`) instead
//! of stdin/stdout, let go when it closes or stalls while the sessions and their turns go on,
//! replaced by the next connection, and the gateway's exit once it has sat idle with no client.

use std::time::Instant;

use mio::Interest;
use mio::unix::SourceFd;

use crate::event_loop::{Gateway, LISTENER, STDIN, STDOUT, Timer};
use crate::rpc::listener::Listener;

/// What a persistent gateway holds beside its client: the socket, and since when no client
/// has been there.
pub(crate) struct Serving {
    listener: Listener,
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

    /// The socket is readable: serve each waiting connection, the newest taking over from the
    /// client before it (one client at a time).
    pub(crate) fn accept_clients(&mut self, now: Instant) {
        loop {
            let Some(serving) = self.serving.as_mut() else {
                return;
            };
            let io = match serving.listener.accept() {
                Ok(Some(io)) => io,
                Ok(None) => return,
                Err(e) => {
                    crate::diag!("[gateway] cannot accept a client: {e}");
                    return;
                }
            };
            // Closed unserved: the client sees the end at once rather than a gateway that
            // will not answer.
            if self.shutdown.is_some() {
                continue;
            }
            if self.client.attached() {
                self.detach_client("a new client took over", now);
            }
            if let Err(e) = self.client.attach(io, now) {
                crate::diag!("[gateway] cannot serve a client: {e}");
                continue;
            }
            if let Some(serving) = self.serving.as_mut() {
                serving.detached_since = None;
            }
            let _ = self.reactor.register_fixed(
                &mut SourceFd(&self.client.input_fd()),
                STDIN,
                Interest::READABLE,
            );
            self.output_polled = self
                .reactor
                .register_fixed(
                    &mut SourceFd(&self.client.output_fd()),
                    STDOUT,
                    Interest::WRITABLE,
                )
                .is_ok();
            self.greet(now);
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
