//! The gateway: one thread, one `mio::Poll`. Each iteration reads input and dispatches it,
//! fires due timers, drives runnable turns (`session/driver.rs`), then takes the tools'
//! results (runs, stepped calls) and writes the MCP requests, steps the shutdown, commits
//! everything appended (`commit.rs`, `persist/`: state.db, else the journal), and only then
//! releases and writes the frames that announce it (held while nothing can be written).

use std::io;
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Token};
use serde_json::{Value, json};

use crate::clock::{Budget, Clock};
use crate::config::Config;
use crate::model::{ModelEvent, Provider};
use crate::persist::Persistence;
use crate::reactor::{Reactor, Slot};
use crate::rpc::client_conn::{ClientConn, ClientLimits, Read};
use crate::rpc::clients::{Client, Clients};
use crate::rpc::frame::{self, Incoming};
use crate::rpc::{Line, Outbox};
use crate::session::VERSION;
use crate::session::table::SessionTable;
use crate::shutdown::{Again, Shutdown};
use crate::timer::TimerWheel;
use crate::util;

const SIGNALS: Token = Token(2);
/// A tool call woken from another thread ([`crate::tools::JobWaker`]).
const TOOL_WAKER: Token = Token(3);
/// A persistent gateway's socket (`detach.rs`).
pub(crate) const LISTENER: Token = Token(4);
/// Tokens from here on are handed out to model calls (and later tool pipes).
const FIRST_DYNAMIC: usize = 16;

/// How long the exit waits for stderr to take the last diagnostics.
const EXIT_DIAG_BUDGET: Duration = Duration::from_millis(20);

/// Reads of the input per loop iteration before other work runs.
const READS_PER_ITERATION: usize = 8;

/// What a timer does when it fires: the sessions' work's (turns, tools, runs, approvals,
/// questions, MCP: [`crate::tools::WorkTimer`], set below the loop) or the gateway's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timer {
    /// A timer of the sessions' work.
    Work(crate::tools::WorkTimer),
    /// Retry failed commits and write the partial text of streaming replies.
    FlushTick,
    /// Evict sessions idle past the TTL.
    ReaperTick,
    /// Look again at the shutdown sequence's deadlines.
    ShutdownStep,
    /// A `model.options` fetch of the endpoint's model list waited too long.
    ModelList(u64),
    /// A session title's model call waits for this time, or for its deadline.
    Title(u64),
    /// A persistent gateway with no client looks whether it has been idle long enough to end.
    IdleExit,
}

impl From<crate::tools::WorkTimer> for Timer {
    fn from(work: crate::tools::WorkTimer) -> Timer {
        Timer::Work(work)
    }
}

/// Who owns a dynamic token's source.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TokenOwner {
    /// A model call of this session's turn.
    Turn(String),
    /// A pipe or exit descriptor of a run of the process runner.
    Run(crate::runner::RunId),
    /// The socket (or resolver) of a `model.options` fetch.
    ModelList(u64),
    /// The socket of a session title's model call (`titles.rs`).
    Title(u64),
    /// An exchange with a streamable HTTP MCP server (`mcp::http`).
    McpHttp(u64),
    /// The input of client `n` ([`crate::rpc::clients::Clients`]).
    ClientInput(u64),
    /// The output of client `n`.
    ClientOutput(u64),
    /// The connection of the relay that brought client `n` (`detach.rs`).
    Relay(u64),
    /// A new relay's connection, before its hello (`detach.rs`).
    Hello(u64),
}

pub use crate::rpc::client_conn::Io;

pub struct Gateway {
    pub(crate) cfg: Config,
    /// The poll and who owns each token (`reactor.rs`): nothing else sees either.
    pub(crate) reactor: Reactor<TokenOwner>,
    /// state.db, the journal, what is dirty, retries, WAL checkpoints.
    pub(crate) persist: Persistence<crate::session::Session>,
    pub(crate) provider: Box<dyn Provider>,
    /// Why the configured model could not be used, for `setup.status`.
    pub(crate) provider_warning: Option<String>,
    /// Providers sessions switched to with `/model … --provider` (the configured one is
    /// `provider`).
    pub(crate) switched_providers: Vec<Box<dyn Provider>>,
    /// `$HERMES_HOME/.env` as last read (`reload.env` says how many of its variables changed).
    pub(crate) dotenv: crate::hermes_env::HermesEnv,
    pub(crate) sessions: SessionTable,
    /// The caps of the sessions' event rings.
    pub(crate) rings: crate::session::ring::Rings,
    /// Who waits for each run, approvals.
    pub(crate) tools: crate::tools::Tools,
    /// Running commands.
    pub(crate) runner: crate::runner::Runner,
    /// The MCP servers and their calls in flight.
    pub(crate) mcp: crate::mcp::Mcp,
    /// Snapshots and `rollback.*` under way (their git commands).
    pub(crate) checkpoints: crate::checkpoints::Checkpoints,
    /// The skills found (and a scan under way), shared with the skill tools.
    pub(crate) skills: crate::skills::Shared,
    /// Requests waiting for the skills' first scan, and reloads waiting for theirs.
    pub(crate) skills_waiting: crate::methods::skills::Waiting,
    /// Prompts whose images are prepared off the loop before they run.
    pub(crate) preparing: crate::methods::images::Preparing,
    /// `model.options` requests waiting for the endpoint's model list.
    pub(crate) model_fetches: crate::methods::models::Fetches,
    /// Session titles being written by the sessions' models.
    pub(crate) titles: crate::titles::Titles,
    pub(crate) timers: TimerWheel<Timer>,
    /// When freed heap memory goes back to the system.
    heap: crate::heap::Trimmer,
    /// The clients: everything said to them goes through their [`Outbox`] ([`Gateway::outbox`]),
    /// which routes each frame.
    pub(crate) clients: Clients,
    /// The one buffer every client's input is read into (out while a read's lines are handled).
    read_buf: Vec<u8>,
    /// A persistent gateway's socket and connections before their hello (`detach.rs`); `None`
    /// on stdin/stdout.
    pub(crate) serving: Option<crate::detach::Serving>,
    pub(crate) shutdown: Option<Shutdown>,
    pub(crate) replay_epoch: String,
    signals: Option<signal_hook_mio::v1_0::Signals>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) scratch: Vec<ModelEvent>,
    /// When the last commit ran (a backlog commits in groups: `commit.rs`).
    pub(crate) last_commit: Option<Instant>,
    /// The only clock the gateway reads: once per wake-up, and for budgets (clock.rs).
    pub(crate) clock: Clock,
    /// What the layers asked of each other, waiting for [`Gateway::dispatch`].
    pub(crate) effects: crate::effects::Effects,
}

impl Gateway {
    /// Set up the loop on `io`, write `gateway.ready`, then open the store.
    pub fn new(cfg: Config, io: Io) -> Result<Gateway, String> {
        Gateway::with_clock(cfg, io, Clock::SYSTEM)
    }

    /// [`Gateway::new`] on `clock`: the only clock the gateway reads.
    pub fn with_clock(cfg: Config, io: Io, clock: Clock) -> Result<Gateway, String> {
        let now = clock.now();
        let mut reactor =
            Reactor::new(FIRST_DYNAMIC).map_err(|e| format!("cannot create the poll: {e}"))?;
        let mut clients = Clients::default();
        let client = ClientConn::new(io, client_limits(&cfg), cfg.rpc_log.as_deref(), now)?;
        let number = clients.add(client, true, None);
        register_client(&mut reactor, &mut clients, number);
        let replay_epoch = util::random_hex(16);
        greet(&mut clients, number, &replay_epoch, now);
        let persist = Persistence::open(&cfg, clock)?;
        let crate::model::select::Choice {
            provider,
            note: provider_warning,
            unreachable,
        } = crate::model::select::choose(&cfg);
        if let Some(w) = provider_warning.as_ref().filter(|_| unreachable) {
            crate::diag!("[gateway] {w}");
        }
        let cfg_home_for_tools = cfg.home.clone();
        // Without it, a call woken from another thread waits for the loop's next wake-up.
        let tool_waker = reactor
            .waker(TOOL_WAKER)
            .map_err(|e| crate::diag!("[gateway] no tool waker: {e}"))
            .ok();
        let kill_grace = cfg.kill_grace;
        let rings = crate::session::ring::Rings::new(
            cfg.event_ring,
            cfg.event_rings_total,
            cfg.event_ring_idle,
        );
        let tool_pidns = cfg.tool_pidns;
        let checkpoint_max_files = cfg.checkpoint_max_files;
        let signals = None;
        let skills = crate::skills::Skills::shared(&cfg.home);
        let mut tools = crate::tools::Tools::new(&cfg_home_for_tools, tool_waker);
        tools.add_skills(&skills);
        Ok(Gateway {
            clock,
            timers: TimerWheel::new(now),
            heap: crate::heap::Trimmer::new(cfg.heap_trim_every),
            cfg,
            reactor,
            persist,
            provider,
            provider_warning,
            switched_providers: Vec::new(),
            dotenv: crate::hermes_env::HermesEnv::load(&cfg_home_for_tools).unwrap_or_default(),
            sessions: SessionTable::new(),
            rings,
            tools,
            runner: crate::runner::Runner::new(
                crate::runner::supervisor::Executable::current(),
                kill_grace,
                tool_pidns,
            )
            .with_env_passthrough(crate::tools::passthrough::load(&cfg_home_for_tools)),
            mcp: Default::default(),
            checkpoints: crate::checkpoints::Checkpoints::new(checkpoint_max_files),
            skills,
            skills_waiting: Default::default(),
            preparing: Default::default(),
            model_fetches: Default::default(),
            titles: Default::default(),
            clients,
            read_buf: crate::rpc::client_conn::read_buffer(),
            serving: None,
            shutdown: None,
            replay_epoch,
            signals,
            exit_code: None,
            scratch: Vec::new(),
            last_commit: None,
            effects: Default::default(),
        })
    }

    /// Say `gateway.ready` to client `number`, which just came (the same replay epoch for
    /// every one).
    pub(crate) fn greet(&mut self, number: u64, now: Instant) {
        greet(&mut self.clients, number, &self.replay_epoch, now);
    }

    /// Take SIGTERM, SIGHUP (and SIGINT when `handle_sigint`) through the loop.
    pub fn install_signals(&mut self, handle_sigint: bool) -> Result<(), String> {
        let mut signals = crate::signals::install(&crate::signals::Plan { handle_sigint })
            .map_err(|e| format!("cannot install signal handlers: {e}"))?;
        self.reactor
            .register_fixed(&mut signals, SIGNALS, Interest::READABLE)
            .map_err(|e| format!("cannot watch signals: {e}"))?;
        self.signals = Some(signals);
        Ok(())
    }

    /// Offer `tool` to the model from the next model call on: an embedding host's own tool.
    /// Refused when its name is taken or is not one a model API accepts.
    pub fn register_tool(&mut self, tool: Box<dyn crate::tools::Tool>) -> Result<(), String> {
        self.tools.set.register(tool)
    }

    /// Use `provider` for every model call from now on: an embedding host's own model.
    pub fn set_provider(&mut self, provider: Box<dyn Provider>) {
        self.provider = provider;
        self.provider_warning = None;
    }

    /// Run until the gateway exits; returns the exit status.
    pub fn run(mut self) -> i32 {
        let mut events = Events::with_capacity(256);
        let now = self.clock.now();
        self.timers.insert(
            now + crate::flush::reaper_period(self.cfg.session_ttl),
            Timer::ReaperTick,
        );
        loop {
            if let Some(code) = self.step(&mut events, None) {
                return code;
            }
        }
    }

    /// One loop iteration: wait for readiness (at most `max_wait` beyond what the loop itself
    /// needs), then do the work. Returns the exit status once the gateway is done.
    pub fn step(&mut self, events: &mut Events, max_wait: Option<Duration>) -> Option<i32> {
        let now = self.clock.now();
        let mut timeout = self.poll_timeout(now);
        if timeout == Some(Duration::ZERO) {
            self.heap.worked();
        } else {
            timeout = self.before_sleep(now, timeout);
        }
        if let Some(cap) = max_wait {
            timeout = Some(timeout.map_or(cap, |t| t.min(cap)));
        }
        if let Err(e) = self.reactor.poll(events, timeout)
            && e.kind() != io::ErrorKind::Interrupted
        {
            crate::diag!("[gateway-crash] poll failed: {e}");
            self.begin_shutdown("poll failed", self.clock.now());
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| self.iteration(events)));
        if let Err(panic) = outcome {
            crate::diag!("[gateway-crash] {}", util::panic_text(&panic));
            if self.shutdown.is_some() {
                self.shutdown_again(Again::Crash, self.clock.now());
            } else {
                self.begin_shutdown("crash", self.clock.now());
            }
        }
        let code = self.exit_code?;
        // Last words for a reader that is slow but there; a stderr nobody reads costs this once.
        let now = self.clock.now();
        crate::diag::flush_for(&Budget::of(self.clock, now, EXIT_DIAG_BUDGET));
        self.clients.restore_flags();
        Some(code)
    }

    /// Handle one input line as if it had been read from the input (benches, tests); its
    /// answer is queued for output.
    pub fn handle_frame(&mut self, line: &[u8]) {
        let now = self.clock.now();
        let first = self.clients.numbers().first().copied().unwrap_or(0);
        self.handle_line(Line::Frame(line), first, now);
        self.dispatch(now);
    }

    /// How long the loop may sleep from now: zero when it has work, `None` when only input
    /// can wake it (a host driving it with its own clock moves that clock this far).
    pub fn next_wake(&mut self) -> Option<Duration> {
        self.poll_timeout(self.clock.now())
    }

    /// Bytes waiting in the out-queue.
    pub fn queued_output(&self) -> usize {
        self.clients.queued_bytes()
    }

    /// Forget queued output (benches that do not read it).
    pub fn discard_output(&mut self) {
        self.clients.discard_output(self.clock.now());
    }

    /// Where answers, errors, events and server requests to the clients go.
    pub(crate) fn outbox(&mut self) -> &mut dyn Outbox {
        &mut self.clients
    }

    /// No client is reading: produce nothing more until one does.
    pub(crate) fn paused(&self) -> bool {
        self.clients.paused()
    }

    /// What the loop does before it sleeps: give the heap's free memory back after a burst of
    /// work (or wake when that is due). Returns the wait.
    fn before_sleep(&mut self, now: Instant, timeout: Option<Duration>) -> Option<Duration> {
        use crate::heap::{Idle, Trimmer};
        match self.heap.at_idle(now) {
            Idle::Sleep => timeout,
            Idle::Look => {
                if Trimmer::worth(crate::heap::free_bytes()) {
                    crate::heap::trim();
                }
                timeout
            }
            Idle::WakeBy(by) => {
                let wait = by.saturating_duration_since(now);
                Some(timeout.map_or(wait, |t| t.min(wait)))
            }
        }
    }

    fn poll_timeout(&mut self, now: Instant) -> Option<Duration> {
        let busy = !self.paused()
            && (self.clients.wants_read()
                || self.sessions.has_runnable()
                || self.sessions.has_loading()
                || self.persist.freeing()
                || self.persist.background_due()
                || self.runner.has_work()
                || crate::methods::skills::busy(self)
                || !self.tools.due.is_empty()
                || !self.effects.is_empty());
        if busy || self.exit_code.is_some() {
            return Some(Duration::ZERO);
        }
        let mut deadline = self.timers.next_deadline();
        if let Some(stall) = self.clients.stall_deadline() {
            deadline = Some(deadline.map_or(stall, |d| d.min(stall)));
        }
        if self.clients.unpolled_released() {
            deadline = Some(now + Duration::from_millis(1));
        }
        deadline.map(|d| d.saturating_duration_since(now))
    }

    fn iteration(&mut self, events: &Events) {
        let now = self.clock.now();
        for ev in events.iter() {
            match ev.token() {
                LISTENER => self.accept_clients(now),
                SIGNALS => self.on_signals(now),
                // The woken jobs are listed with the wakers; stepping them takes the list.
                TOOL_WAKER => {}
                token => self.on_source_ready(token, ev.is_error() || ev.is_write_closed(), now),
            }
        }
        self.read_input(now);
        // A `ping` read now is answered now, not after the turns this iteration drives.
        self.write_urgent(now);
        self.fire_timers(now);
        crate::session::older::step(self, now);
        // Each kind of bulk work gets its own slice of the iteration (clock.rs).
        if self.drive_turns(now, &Budget::slice(self.clock, now)) {
            crate::flush::arm(self, now);
        }
        // After the turns: a tool's result is committed and released in its own iteration,
        // and the turn it wakes goes on to its next model call in the next one.
        // Its slice starts when it does, not at the wake-up the turns' slice spent.
        let slice = Budget::slice(self.clock, self.clock.now());
        crate::tools::runs::pump(self, now, &slice);
        // The jobs that are due go on within their budgets, each for its session.
        for (rid, job) in crate::session::calls::due_jobs(self) {
            self.isolated(Some(&rid), now, |gw| {
                crate::session::calls::step_job(gw, job, None, now);
            });
        }
        self.dispatch(now);
        for rid in crate::mcp::pump(self, now) {
            self.schedule(&rid);
        }
        crate::methods::skills::pump(self, now);
        crate::methods::images::pump(self, now);
        self.step_shutdown(now);
        self.dispatch(now);
        self.commit(now);
        self.write_output(now);
        self.background_step(now);
        self.check_stall(now);
        crate::diag::flush();
    }

    /// Carry out what the layers asked of each other ([`crate::effects`]), oldest first, until
    /// none is left (an effect's work may push more). Each is done for the session it concerns:
    /// a panic in it ends that session's turn alone.
    fn dispatch(&mut self, now: Instant) {
        use crate::effects::Effect;
        while let Some(effect) = self.effects.pop() {
            match effect {
                Effect::RunEnded { job, end } => {
                    let owner = self.tools.jobs.get(&job).map(|j| j.rid.clone());
                    self.isolated(owner.as_deref(), now, |gw| {
                        crate::session::calls::run_ended(gw, job, end, now);
                    });
                }
                Effect::ServiceEvent(event) => {
                    if self.checkpoints.owns(event.run()) {
                        crate::checkpoints::on_run_event(self, event, now);
                    } else {
                        crate::mcp::on_run_event(self, event, now);
                    }
                }
                Effect::SubmitPrompt { rid, text } => {
                    self.isolated(Some(&rid), now, |gw| {
                        gw.submit_prompt(&rid, text, now);
                    });
                }
                Effect::SnapshotOver { rid } => {
                    self.isolated(Some(&rid), now, |gw| {
                        crate::session::calls::start_deferred(gw, &rid, now);
                    });
                }
                Effect::UndoExchange {
                    rid,
                    reply_to,
                    mut result,
                } => {
                    let removed = crate::methods::drop_last_exchange(self, &rid, now);
                    result["history_removed"] = json!(removed);
                    self.clients.reply(&reply_to, Ok(result));
                }
                Effect::SessionInfo { rid } => self.emit_info(&rid),
                Effect::TurnEnded(end) => {
                    let rid = end.rid.clone();
                    self.isolated(Some(&rid), now, |gw| {
                        crate::session::driver::turn_ended(gw, end, now);
                    });
                }
                Effect::SessionLeft { rid } => {
                    crate::tools::process::session_gone(self, &rid, now);
                    crate::titles::session_gone(self, &rid);
                    self.clients.forget(&rid);
                }
                Effect::TurnCompleted { rid } => crate::titles::after_turn(self, &rid, now),
                Effect::Delegate { rid, job } => {
                    self.isolated(Some(&rid), now, |gw| {
                        crate::delegation::spawn(gw, &rid, job, now);
                    });
                }
                Effect::SubagentEnded(end) => {
                    let parent = end.parent_rid.clone();
                    self.isolated(Some(&parent), now, |gw| {
                        crate::delegation::subagent_ended(gw, end, now);
                    });
                }
                Effect::SubagentsCancelled { job } => crate::delegation::cancelled(self, job, now),
                Effect::TurnFailed { rid } => {
                    self.isolated(Some(&rid), now, |gw| {
                        crate::session::driver::fail_turn(gw, &rid, now);
                    });
                }
                Effect::Panicked => self.after_panic(now),
            }
        }
    }

    // ---- input ----

    /// Each client's input in turn, a bounded number of reads each; a client whose queue is
    /// past its cap is not read until it reads.
    fn read_input(&mut self, now: Instant) {
        // The common case, nothing to read, costs no list of clients.
        if !self.clients.wants_read() {
            return;
        }
        for number in self.clients.numbers() {
            for _ in 0..READS_PER_ITERATION {
                let paused = self.paused();
                let Some(c) = self.clients.get_mut(number) else {
                    break;
                };
                if paused || !c.conn.wants_read() || c.conn.paused() {
                    break;
                }
                let buf = std::mem::take(&mut self.read_buf);
                let mut chunk = c.conn.read(buf);
                chunk.lines(|line| self.handle_line(line, number, now));
                let read = std::mem::replace(&mut chunk.read, Read::Again);
                let Some(c) = self.clients.get_mut(number) else {
                    break;
                };
                self.read_buf = c.conn.done(chunk);
                match read {
                    Read::Data | Read::Again => {}
                    Read::Eof => {
                        self.reactor.deregister(&mut SourceFd(&c.conn.input_fd()));
                        self.client_gone(number, "stdin closed", now);
                    }
                    Read::Failed(e) => {
                        self.client_gone(number, &format!("stdin read failed: {e}"), now)
                    }
                }
            }
        }
    }

    /// One line from client `from`.
    fn handle_line(&mut self, line: Line<'_>, from: u64, now: Instant) {
        let Some(c) = self.clients.get_mut(from) else {
            return;
        };
        match line {
            // A refused frame's answer announces nothing: it goes ahead like a `ping`'s, in
            // the order the frames came.
            Line::TooLong => {
                let limit = c.conn.frame_limit();
                c.conn.push_urgent(frame::error(
                    &frame::Id::null(),
                    &frame::RpcError::new(
                        frame::code::INVALID_REQUEST,
                        format!("invalid request: frame larger than {limit} bytes"),
                    ),
                ))
            }
            Line::Frame(bytes) => match frame::parse_line(c.conn.log_in(bytes)) {
                Incoming::Bad { id, error } => c.conn.push_urgent(frame::error(&id, &error)),
                Incoming::Answer { id, result } => self.on_answer(id, result, from, now),
                Incoming::Request(mut req) => {
                    req.id = req.id.from_client(from);
                    // A client that names a live session hears it from now on (only live
                    // ones: what a client names must not grow what is kept for it).
                    if let Some(sid) = req.params.get("session_id").and_then(Value::as_str)
                        && self.sessions.get(sid).is_some()
                    {
                        self.clients.watch(from, sid);
                    }
                    if let Some(req) = crate::methods::skills::hold(self, req) {
                        self.handle_request(req, now);
                    }
                }
            },
        }
    }

    /// Dispatch one request and queue its answer (unless it is answered later).
    pub(crate) fn handle_request(&mut self, req: crate::rpc::Request, now: Instant) {
        let id = req.id.clone();
        let quiet = crate::persist::announces_nothing(&req.method);
        self.clients.serving(Some(id.client()));
        let reply = catch_unwind(AssertUnwindSafe(|| crate::methods::call(self, req, now)));
        // What the request set off (a turn it ended) is done before its answer goes.
        self.dispatch(now);
        self.clients.serving(None);
        if reply.is_err() {
            self.after_panic(now);
        }
        let reply = reply.unwrap_or_else(|panic| {
            Some(Err(frame::RpcError::new(
                frame::code::INTERNAL,
                format!("internal error: {}", util::panic_text(&panic)),
            )))
        });
        // `None`: answered later.
        if let Some(reply) = reply {
            if quiet {
                let bytes = match reply {
                    Ok(result) => frame::response(&id, &result),
                    Err(err) => frame::error(&id, &err),
                };
                self.clients.push_urgent(id.client(), bytes);
            } else {
                self.clients.reply(&id, reply);
            }
        }
    }

    /// The invariants of the loop's own tables (sessions, timers, the poll's owners): what a
    /// panic caught in the middle of changing them could leave broken. The loop checks them
    /// after each panic it caught; the simulator after every step.
    pub fn check(&self) -> Result<(), String> {
        self.sessions
            .check()
            .map_err(|e| format!("sessions: {e}"))?;
        self.timers.check().map_err(|e| format!("timers: {e}"))?;
        self.reactor.check().map_err(|e| format!("poll: {e}"))
    }

    /// After a caught panic: go on only with whole tables, else stop as a crash does (every
    /// transcript flushed, every run stopped) rather than serve from broken ones.
    fn after_panic(&mut self, now: Instant) {
        let Err(why) = self.check() else { return };
        crate::diag!("[gateway-crash] a panic left the gateway's state broken ({why})");
        if self.shutdown.is_none() {
            self.begin_shutdown("crash", now);
        }
    }

    /// An answer to a server request: resolve what asked, or log (boundedly) and drop it.
    fn on_answer(&mut self, id: Value, result: Result<Value, Value>, from: u64, now: Instant) {
        let (tools, mut env) = self.asking();
        if let Some((job, answer)) = tools.questions.on_answer(&mut env, &id, &result) {
            return crate::session::calls::question_answered(self, job, answer, now);
        }
        if let Some(answered) = tools.approvals.on_answer(&mut env, &id, &result) {
            return crate::session::calls::approval_answered(self, answered, now);
        }
        if let Some(c) = self.clients.get_mut(from) {
            c.conn.stray_answer(&id);
        }
    }

    // ---- output ----

    fn write_output(&mut self, now: Instant) {
        self.write_each(now, |conn, now| conn.write(now));
    }

    fn write_urgent(&mut self, now: Instant) {
        self.write_each(now, |conn, now| conn.write_urgent(now));
    }

    /// `write` on each client's connection; a client whose output failed is gone.
    fn write_each(
        &mut self,
        now: Instant,
        write: impl Fn(&mut ClientConn, Instant) -> Result<(), String>,
    ) {
        let failed: Vec<(u64, String)> = self
            .clients
            .iter_mut()
            .filter_map(|c| write(&mut c.conn, now).err().map(|e| (c.number, e)))
            .collect();
        for (number, e) in failed {
            crate::diag!("[gateway] stdout write failed: {e}");
            self.client_gone(number, "stdout closed", now);
        }
    }

    /// Try to write everything released, waiting for writability up to `until`.
    pub(crate) fn drain_output(&mut self, until: Instant) {
        loop {
            let now = self.clock.now();
            if !self.persist.holding() {
                self.clients.release();
            }
            self.write_output(now);
            let Some(waiting) = self.clients.iter().find(|c| c.conn.has_released()) else {
                return;
            };
            if now >= until {
                return;
            }
            waiting
                .conn
                .wait_writable(until.saturating_duration_since(now));
        }
    }

    /// A client that stopped reading while its queue is full is gone past the stall deadline
    /// (or at once, one of several past the hard cap: [`Clients::over_hard_cap`]).
    fn check_stall(&mut self, now: Instant) {
        if self.shutdown.is_some() {
            return;
        }
        for number in self.clients.stalled(now) {
            let queued = self
                .clients
                .get(number)
                .map_or(0, |c| c.conn.queued_bytes());
            crate::diag!(
                "[gateway] stdout made no progress for {:.1}s with {queued} bytes queued",
                self.cfg.stdout_stall.as_secs_f64(),
            );
            self.client_gone(number, "stdout stalled", now);
        }
        for number in self.clients.over_hard_cap() {
            self.client_gone(number, "it reads too slowly", now);
        }
    }

    // ---- signals ----

    fn on_signals(&mut self, now: Instant) {
        let Some(signals) = self.signals.as_mut() else {
            return;
        };
        let pending: Vec<i32> = signals.pending().collect();
        for sig in pending {
            if sig == crate::signals::signal::SIGCHLD {
                self.runner.on_child_exit();
                continue;
            }
            crate::diag!("[gateway-signal] {}", crate::signals::name(sig));
            if self.shutdown.is_some() {
                self.shutdown_again(Again::Signal, now);
            } else {
                self.begin_shutdown(crate::signals::name(sig), now);
            }
        }
    }

    // ---- timers ----

    fn fire_timers(&mut self, now: Instant) {
        let mut due = Vec::new();
        self.timers.expire(now, &mut due);
        for t in due {
            match t {
                Timer::Work(work) => self.fire_work_timer(work, now),
                Timer::FlushTick => crate::flush::tick(self, now),
                Timer::ReaperTick => crate::flush::reap_idle(self, now),
                Timer::IdleExit => self.idle_exit_due(now),
                Timer::ShutdownStep => {}
                Timer::ModelList(id) => crate::methods::models::on_timeout(self, id),
                Timer::Title(id) => crate::titles::advance(self, id, now),
            }
        }
    }

    /// A timer of the sessions' work fired: back to its owner.
    fn fire_work_timer(&mut self, timer: crate::tools::WorkTimer, now: Instant) {
        use crate::tools::WorkTimer;
        match timer {
            WorkTimer::TurnWake(rid) => {
                if let Some(turn) = self.sessions.get_mut(&rid).and_then(|s| s.turn.as_mut()) {
                    turn.wake = None;
                }
                self.schedule(&rid);
            }
            WorkTimer::Run(id, what) => crate::tools::runs::on_run_timer(self, id, what, now),
            WorkTimer::LiveOutput(id) => {
                let owner = self.tools.run_session(id);
                self.isolated(owner.as_deref(), now, |gw| {
                    crate::tools::runs::flush_live(gw, id, now)
                });
            }
            WorkTimer::ApprovalTimeout(request_id) => {
                let owner = self.tools.approvals.owner_session(&request_id);
                self.isolated(owner.as_deref(), now, |gw| {
                    let (tools, mut env) = gw.asking();
                    if let Some(answered) = tools.approvals.expire(&mut env, &request_id) {
                        crate::session::calls::approval_answered(gw, answered, now);
                    }
                });
            }
            WorkTimer::ToolWake(job) => self.tools.due.add(job),
            WorkTimer::Mcp(name) => crate::mcp::on_timer(self, &name, now),
            WorkTimer::SubagentTimeout(rid) => crate::delegation::timed_out(self, &rid, now),
            WorkTimer::ClarifyTimeout(request_id) => {
                let owner = self.tools.questions.owner_session(&request_id);
                self.isolated(owner.as_deref(), now, |gw| {
                    let (tools, mut env) = gw.asking();
                    if let Some((job, answer)) = tools.questions.expire(&mut env, &request_id) {
                        crate::session::calls::question_answered(gw, job, answer, now);
                    }
                });
            }
        }
    }

    /// Put a started run's descriptors in the poll (their readiness marks the run ready); a
    /// run that cannot be watched is killed and forgotten.
    pub(crate) fn watch_run(&mut self, id: crate::runner::RunId) -> io::Result<()> {
        let slot = self.reactor.slot(TokenOwner::Run(id));
        let readable = self
            .runner
            .fds(id)
            .into_iter()
            .map(|fd| (fd, Interest::READABLE));
        let writable = self.runner.stdin_fd(id).map(|fd| (fd, Interest::WRITABLE));
        let fds: Vec<_> = readable.chain(writable).collect();
        let registered = fds
            .iter()
            .try_for_each(|(fd, interest)| slot.register(&mut SourceFd(fd), *interest));
        if let Err(e) = registered {
            for (fd, _) in &fds {
                self.reactor.deregister(&mut SourceFd(fd));
            }
            self.runner.discard(id);
            self.reactor.release(&TokenOwner::Run(id));
            return Err(e);
        }
        Ok(())
    }

    /// A run ended, or closed its stdin pipe: those descriptors leave the poll before they
    /// close (the run's token with the last of them).
    pub(crate) fn unwatch_run(&mut self, closed: crate::runner::Closed) {
        for fd in &closed.fds {
            self.reactor.deregister(&mut SourceFd(&fd.as_raw_fd()));
        }
        if closed.run_over {
            self.reactor.release(&TokenOwner::Run(closed.run));
        }
    }

    /// A dynamic token is ready (`closed`: the peer of an output hung up).
    fn on_source_ready(&mut self, token: Token, closed: bool, now: Instant) {
        match self.reactor.owner(token).cloned() {
            Some(TokenOwner::ClientInput(n)) => {
                if let Some(c) = self.clients.get_mut(n) {
                    c.conn.input_readable();
                }
            }
            // The reader went away: noticed now, not at a next write that may never come.
            Some(TokenOwner::ClientOutput(n)) if closed => {
                crate::diag!("[gateway] stdout closed by the reader");
                self.client_gone(n, "stdout closed", now);
            }
            Some(TokenOwner::ClientOutput(_)) => {}
            Some(TokenOwner::Relay(n)) => self.relay_readable(n, now),
            Some(TokenOwner::Hello(k)) => self.hello_readable(k, now),
            Some(TokenOwner::Turn(rid)) => self.schedule(&rid),
            Some(TokenOwner::Run(id)) => self.runner.mark_ready(id),
            Some(TokenOwner::ModelList(id)) => crate::methods::models::on_ready(self, id, now),
            Some(TokenOwner::Title(id)) => crate::titles::advance(self, id, now),
            Some(TokenOwner::McpHttp(id)) => crate::mcp::http::on_ready(self, id, now),
            None => {}
        }
    }
}

/// The loop's sockets lent to MCP HTTP exchanges: each connection under a token of its own,
/// routed to its exchange ([`TokenOwner::McpHttp`]).
pub(crate) struct ExchangeSockets<'a> {
    reactor: &'a mut Reactor<TokenOwner>,
}

impl Gateway {
    pub(crate) fn exchange_sockets(&mut self) -> ExchangeSockets<'_> {
        ExchangeSockets {
            reactor: &mut self.reactor,
        }
    }
}

impl crate::mcp::http::Sockets for ExchangeSockets<'_> {
    fn connect(
        &mut self,
        exchange: u64,
        route: &crate::model::connect::Route,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Box<dyn crate::mcp::http::Link>, crate::model::connect::Failure> {
        let owner = TokenOwner::McpHttp(exchange);
        let slot = self.reactor.slot(owner.clone());
        match crate::model::connect::Connector::start(route, tls, &slot) {
            Ok(connector) => Ok(Box::new(SocketLink {
                slot,
                phase: LinkPhase::Opening(Box::new(connector)),
            })),
            Err(e) => {
                self.reactor.release(&owner);
                Err(e)
            }
        }
    }

    fn release(&mut self, exchange: u64, link: Box<dyn crate::mcp::http::Link>) {
        drop(link);
        self.reactor.release(&TokenOwner::McpHttp(exchange));
    }
}

/// An MCP exchange's connection: opening, then open; out of the poll when dropped.
struct SocketLink {
    slot: Slot,
    phase: LinkPhase,
}

enum LinkPhase {
    Opening(Box<crate::model::connect::Connector>),
    Open(Box<crate::model::http::Transport>),
}

impl SocketLink {
    fn transport(&mut self) -> io::Result<&mut crate::model::http::Transport> {
        match &mut self.phase {
            LinkPhase::Open(t) => Ok(t),
            LinkPhase::Opening(_) => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl crate::mcp::http::Link for SocketLink {
    fn open(&mut self) -> Result<bool, crate::model::connect::Failure> {
        if let LinkPhase::Opening(c) = &mut self.phase {
            match c.advance(&self.slot)? {
                Some(t) => self.phase = LinkPhase::Open(Box::new(t)),
                None => return Ok(false),
            }
        }
        Ok(true)
    }
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.transport()?.write_plain(bytes)
    }
    fn flush(&mut self) -> io::Result<bool> {
        self.transport()?.flush_tls()
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.transport()?.read_plain(buf)
    }
    fn handshaking(&self) -> bool {
        matches!(&self.phase, LinkPhase::Open(t) if t.handshaking())
    }
}

impl Drop for SocketLink {
    fn drop(&mut self) {
        match &mut self.phase {
            LinkPhase::Opening(c) => c.release(&self.slot),
            LinkPhase::Open(t) => {
                let _ = self.slot.deregister(&mut t.socket);
            }
        }
    }
}

/// The first frame a client reads, written at once.
fn greet(clients: &mut Clients, number: u64, replay_epoch: &str, now: Instant) {
    let Some(c) = clients.get_mut(number) else {
        return;
    };
    c.conn.event(
        "",
        &frame::event_params(
            "gateway.ready",
            "",
            &json!({"change_events": false, "replay_epoch": replay_epoch, "version": VERSION}),
            None,
        ),
    );
    c.conn.release();
    let _ = c.conn.write(now);
}

/// What a client's connection is bounded by.
pub(crate) fn client_limits(cfg: &Config) -> ClientLimits {
    ClientLimits {
        frame_limit: cfg.frame_limit,
        queue_cap: cfg.out_queue_cap,
        stall: cfg.stdout_stall,
    }
}

/// Watch client `number`'s descriptors, and note whether its output could be (regular files
/// and /dev/null cannot be polled, EPERM: they are always ready).
pub(crate) fn register_client(
    reactor: &mut Reactor<TokenOwner>,
    clients: &mut Clients,
    number: u64,
) {
    let Some(c) = clients.get_mut(number) else {
        return;
    };
    let input = reactor.slot(TokenOwner::ClientInput(number));
    let _ = input.register(&mut SourceFd(&c.conn.input_fd()), Interest::READABLE);
    let output = reactor.slot(TokenOwner::ClientOutput(number));
    c.output_polled = output
        .register(&mut SourceFd(&c.conn.output_fd()), Interest::WRITABLE)
        .is_ok();
}

/// Take client `number`'s descriptors (and its relay's connection) out of the poll.
pub(crate) fn unregister_client(reactor: &mut Reactor<TokenOwner>, client: &Client) {
    reactor.deregister(&mut SourceFd(&client.conn.input_fd()));
    reactor.deregister(&mut SourceFd(&client.conn.output_fd()));
    if let Some(relay) = &client.relay {
        reactor.deregister(&mut SourceFd(&relay.as_raw_fd()));
    }
    for owner in [
        TokenOwner::ClientInput(client.number),
        TokenOwner::ClientOutput(client.number),
        TokenOwner::Relay(client.number),
    ] {
        reactor.release(&owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::Effect;

    /// A gateway on pipes in a home of its own (removed when the test ends).
    fn gateway(tag: &str) -> (Gateway, std::path::PathBuf, [std::os::fd::OwnedFd; 2]) {
        let home = std::env::temp_dir().join(format!("tuigw-{tag}-{}", util::random_hex(6)));
        std::fs::create_dir_all(&home).expect("a home");
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("a pipe");
        let (input, keep_input) = pipe();
        let (keep_output, output) = pipe();
        let cfg = Config {
            home: home.clone(),
            handle_signals: false,
            ..Config::default()
        };
        let gw = Gateway::new(cfg, Io { input, output }).expect("the gateway starts");
        (gw, home, [keep_input, keep_output])
    }

    #[test]
    fn a_caught_panic_goes_on_with_whole_tables_and_stops_cleanly_with_broken_ones() {
        let (mut gw, home, _pipes) = gateway("after-panic");
        let now = gw.clock.now();
        let mut s = crate::session::bare_session("r1", "s1");
        s.turn = Some(crate::session::turn::Turn::new(
            gw.reactor.slot(TokenOwner::Turn("r1".into())),
        ));
        assert!(gw.sessions.add(s).is_ok());
        gw.sessions.mark_runnable("r1");
        gw.effects.push(Effect::Panicked);
        gw.dispatch(now);
        assert!(gw.shutdown.is_none(), "whole tables: the gateway goes on");
        // Taken off the runnable list and left marked: a turn nobody would drive again.
        gw.sessions.pop_runnable();
        gw.effects.push(Effect::Panicked);
        gw.dispatch(now);
        assert!(
            gw.shutdown.is_some(),
            "broken tables: the gateway stops as a crash does"
        );
        drop(gw);
        let _ = std::fs::remove_dir_all(&home);
    }
}
