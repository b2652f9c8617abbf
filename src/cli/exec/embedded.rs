//! The gateway run in this process, on this thread, for `exec`: requests go in through
//! [`Gateway::handle_frame`] (no input pipe, no serialisation beyond the frame itself), and what
//! the gateway writes — the same JSON-RPC frames the TUI reads — comes back through a pipe that
//! is drained after each loop iteration with the project's one client reader
//! ([`crate::client::Lines`], [`crate::client::parse_frame`]).
//!
//! Its input is a pipe whose write end is held here and never written: dropping it is the
//! end of input, which makes the gateway run its ordered shutdown (flush, rows ended, exit).

use std::fs::File;
use std::os::fd::OwnedFd;
use std::time::Instant;

use nix::fcntl::OFlag;
use serde_json::Value;

use crate::client::{Lines, error_response, parse_frame, request};
use crate::{Config, Gateway, Io};

/// Events per poll.
const EVENTS: usize = 256;

pub struct Embedded {
    /// `None` once the gateway exited.
    gateway: Option<Gateway>,
    events: mio::Events,
    /// The gateway's input stays open while this is held.
    input: Option<OwnedFd>,
    output: Lines<File>,
    next_id: u64,
    /// Frames were handed to the gateway since its last iteration: run one without waiting.
    handed: bool,
    exit_code: Option<i32>,
}

impl Embedded {
    /// Opens the gateway (store, provider, signal handling unless `--no-signals`).
    pub fn start(cfg: Config) -> Result<Embedded, String> {
        let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"));
        let (input_read, input_write) = pipe()?;
        let (output_read, output_write) = pipe()?;
        let handle_signals = cfg.handle_signals;
        let io = Io {
            input: input_read,
            output: output_write,
        };
        let mut gateway = Gateway::new(cfg, io)?;
        if handle_signals {
            // No UI owns Ctrl-C here: SIGINT, like SIGTERM, starts the ordered shutdown.
            gateway.install_signals(true)?;
        }
        Ok(Embedded {
            gateway: Some(gateway),
            events: mio::Events::with_capacity(EVENTS),
            input: Some(input_write),
            output: Lines::new(File::from(output_read)),
            next_id: 0,
            handed: false,
            exit_code: None,
        })
    }

    /// Hands the gateway a request; returns its id (answered in a later [`Embedded::step`]).
    pub fn request(&mut self, method: &str, params: Value) -> String {
        self.next_id += 1;
        let id = format!("x{}", self.next_id);
        self.hand(&request(&Value::String(id.clone()), method, params));
        id
    }

    /// Answers a server request with an error (we announce no server-request support).
    pub fn refuse(&mut self, id: &Value, message: &str) {
        self.hand(&error_response(id, -32601, message));
    }

    /// A frame to the gateway, as if read from its input (dropped once it has exited).
    fn hand(&mut self, frame: &Value) {
        if let Some(gateway) = &mut self.gateway {
            gateway.handle_frame(frame.to_string().as_bytes());
            self.handed = true;
        }
    }

    /// One gateway iteration, waiting for its sources at most until `deadline`; the frames it
    /// wrote are appended to `frames`. Returns the gateway's exit status once it has exited.
    pub fn step(&mut self, deadline: Option<Instant>, frames: &mut Vec<Value>) -> Option<i32> {
        if let Some(gateway) = &mut self.gateway {
            let now = Instant::now();
            let wait = match (self.handed, deadline) {
                (true, _) => Some(std::time::Duration::ZERO),
                (false, Some(at)) => Some(at.saturating_duration_since(now)),
                (false, None) => None,
            };
            self.handed = false;
            if let Some(code) = gateway.step(&mut self.events, wait) {
                self.exit_code = Some(code);
                // Its end of the output closes: what is left in the pipe is read to the end.
                self.gateway = None;
            }
        }
        self.drain(frames);
        self.exit_code
    }

    /// The gateway has begun its shutdown (a signal, the end of input): start nothing new.
    pub fn shutting_down(&self) -> bool {
        self.gateway.as_ref().is_none_or(|g| g.shutdown.is_some())
    }

    /// Ends the gateway's input: it flushes, ends its sessions' rows and exits.
    pub fn close_input(&mut self) {
        self.input = None;
    }

    pub fn input_open(&self) -> bool {
        self.input.is_some()
    }

    /// Reads what the gateway wrote, without waiting (until the end once it has exited).
    fn drain(&mut self, frames: &mut Vec<Value>) {
        let until = Instant::now();
        loop {
            while let Some(line) = self.output.buffered_line() {
                if let Some(frame) = parse_frame(line) {
                    frames.push(frame);
                }
            }
            if self.output.at_eof() {
                return;
            }
            // Still running: only what is there now; exited: to the end of the pipe.
            let read = match self.gateway {
                Some(_) => self.output.fill(until),
                None => self
                    .output
                    .fill(Instant::now() + std::time::Duration::from_secs(1)),
            };
            if !matches!(read, Ok(true)) {
                return;
            }
        }
    }
}
