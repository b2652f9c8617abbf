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
use crate::rpc::frame::{self, Incoming};
use crate::rpc::{Line, Outbox};
use crate::session::VERSION;
use crate::session::table::SessionTable;
use crate::shutdown::{Again, Shutdown};
use crate::timer::TimerWheel;
use crate::util;

pub(crate) const STDIN: Token = Token(0);
pub(crate) const STDOUT: Token = Token(1);
const SIGNALS: Token = Token(2);
/// A tool call woken from another thread ([`crate::tools::JobWaker`]).
const TOOL_WAKER: Token = Token(3);
/// A persistent gateway's socket (`detach.rs`).
pub(crate) const LISTENER: Token = Token(4);
/// The connection of the relay a persistent gateway serves.
pub(crate) const RELAY: Token = Token(5);
/// A new relay's connection, before its hello.
pub(crate) const PENDING: Token = Token(6);
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
    /// `model.options` requests waiting for the endpoint's model list.
    pub(crate) model_fetches: crate::methods::models::Fetches,
    /// Session titles being written by the sessions' models.
    pub(crate) titles: crate::titles::Titles,
    pub(crate) timers: TimerWheel<Timer>,
    /// The client: everything said to it goes through its [`Outbox`] ([`Gateway::outbox`]).
    pub(crate) client: ClientConn,
    /// A persistent gateway's socket and client state (`detach.rs`); `None` on stdin/stdout.
    pub(crate) serving: Option<crate::detach::Serving>,
    /// The output descriptor is registered with the poll (regular files and /dev/null are not).
    pub(crate) output_polled: bool,
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
        let reactor =
            Reactor::new(FIRST_DYNAMIC).map_err(|e| format!("cannot create the poll: {e}"))?;
        let limits = ClientLimits {
            frame_limit: cfg.frame_limit,
            queue_cap: cfg.out_queue_cap,
            stall: cfg.stdout_stall,
        };
        let mut client = ClientConn::new(io, limits, cfg.rpc_log.as_deref(), now)?;
        let output_polled = register_client(&reactor, &client);
        let replay_epoch = util::random_hex(16);
        greet(&mut client, &replay_epoch, now);
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
            model_fetches: Default::default(),
            titles: Default::default(),
            client,
            serving: None,
            output_polled,
            shutdown: None,
            replay_epoch,
            signals,
            exit_code: None,
            scratch: Vec::new(),
            last_commit: None,
            effects: Default::default(),
        })
    }

    /// Say `gateway.ready` to a client that just came (the same replay epoch for every one).
    pub(crate) fn greet(&mut self, now: Instant) {
        greet(&mut self.client, &self.replay_epoch, now);
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
        let mut timeout = self.poll_timeout(self.clock.now());
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
        self.client.restore_flags();
        Some(code)
    }

    /// Handle one input line as if it had been read from the input (benches, tests); its
    /// answer is queued for output.
    pub fn handle_frame(&mut self, line: &[u8]) {
        let now = self.clock.now();
        self.handle_line(Line::Frame(line), now);
        self.dispatch(now);
    }

    /// How long the loop may sleep from now: zero when it has work, `None` when only input
    /// can wake it (a host driving it with its own clock moves that clock this far).
    pub fn next_wake(&mut self) -> Option<Duration> {
        self.poll_timeout(self.clock.now())
    }

    /// Bytes waiting in the out-queue.
    pub fn queued_output(&self) -> usize {
        self.client.queued_bytes()
    }

    /// Forget queued output (benches that do not read it).
    pub fn discard_output(&mut self) {
        self.client.discard_output(self.clock.now());
    }

    /// Where answers, errors, events and server requests to the client go.
    pub(crate) fn outbox(&mut self) -> &mut dyn Outbox {
        &mut self.client
    }

    /// The client is not reading: produce nothing more until it does.
    pub(crate) fn paused(&self) -> bool {
        self.client.paused()
    }

    fn poll_timeout(&mut self, now: Instant) -> Option<Duration> {
        let busy = !self.paused()
            && (self.client.wants_read()
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
        if let Some(stall) = self.client.stall_deadline() {
            deadline = Some(deadline.map_or(stall, |d| d.min(stall)));
        }
        if !self.output_polled && self.client.has_released() {
            deadline = Some(now + Duration::from_millis(1));
        }
        deadline.map(|d| d.saturating_duration_since(now))
    }

    fn iteration(&mut self, events: &Events) {
        let now = self.clock.now();
        for ev in events.iter() {
            match ev.token() {
                STDIN => self.client.input_readable(),
                // The reader went away: noticed now, not at a next write that may never come.
                STDOUT if ev.is_error() || ev.is_write_closed() => {
                    crate::diag!("[gateway] stdout closed by the reader");
                    self.client_gone("stdout closed", now);
                }
                LISTENER => self.accept_clients(now),
                RELAY => self.relay_readable(now),
                PENDING => self.hello_readable(now),
                STDOUT => {}
                SIGNALS => self.on_signals(now),
                // The woken jobs are listed with the wakers; stepping them takes the list.
                TOOL_WAKER => {}
                token => self.on_source_ready(token, now),
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
                    self.client.reply(&reply_to, Ok(result));
                }
                Effect::SessionInfo { rid } => self.emit_info(&rid),
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
            }
        }
    }

    // ---- input ----

    fn read_input(&mut self, now: Instant) {
        for _ in 0..READS_PER_ITERATION {
            if !self.client.wants_read() || self.paused() {
                return;
            }
            let mut chunk = self.client.read();
            chunk.lines(|line| self.handle_line(line, now));
            let read = std::mem::replace(&mut chunk.read, Read::Again);
            self.client.done(chunk);
            match read {
                Read::Data | Read::Again => {}
                Read::Eof => {
                    self.reactor
                        .deregister(&mut SourceFd(&self.client.input_fd()));
                    self.client_gone("stdin closed", now);
                }
                Read::Failed(e) => self.client_gone(&format!("stdin read failed: {e}"), now),
            }
        }
    }

    fn handle_line(&mut self, line: Line<'_>, now: Instant) {
        match line {
            // A refused frame's answer announces nothing: it goes ahead like a `ping`'s, in
            // the order the frames came.
            Line::TooLong => {
                let limit = self.client.frame_limit();
                self.client.push_urgent(frame::error(
                    &frame::Id::null(),
                    &frame::RpcError::new(
                        frame::code::INVALID_REQUEST,
                        format!("invalid request: frame larger than {limit} bytes"),
                    ),
                ))
            }
            Line::Frame(bytes) => match frame::parse_line(self.client.log_in(bytes)) {
                Incoming::Bad { id, error } => self.client.push_urgent(frame::error(&id, &error)),
                Incoming::Answer { id, result } => self.on_answer(id, result, now),
                Incoming::Request(req) => {
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
        let reply = catch_unwind(AssertUnwindSafe(|| crate::methods::call(self, req, now)));
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
                self.client.push_urgent(bytes);
            } else {
                self.client.reply(&id, reply);
            }
        }
    }

    /// An answer to a server request: resolve what asked, or log (boundedly) and drop it.
    fn on_answer(&mut self, id: Value, result: Result<Value, Value>, now: Instant) {
        let (tools, mut env) = self.asking();
        if let Some((job, answer)) = tools.questions.on_answer(&mut env, &id, &result) {
            return crate::session::calls::question_answered(self, job, answer, now);
        }
        if let Some(answered) = tools.approvals.on_answer(&mut env, &id, &result) {
            return crate::session::calls::approval_answered(self, answered, now);
        }
        self.client.stray_answer(&id);
    }

    // ---- output ----

    fn write_output(&mut self, now: Instant) {
        let written = self.client.write(now);
        self.output_written(written, now);
    }

    fn write_urgent(&mut self, now: Instant) {
        let written = self.client.write_urgent(now);
        self.output_written(written, now);
    }

    fn output_written(&mut self, written: Result<(), String>, now: Instant) {
        if let Err(e) = written {
            crate::diag!("[gateway] stdout write failed: {e}");
            self.client_gone("stdout closed", now);
        }
    }

    /// Try to write everything released, waiting for writability up to `until`.
    pub(crate) fn drain_output(&mut self, until: Instant) {
        loop {
            let now = self.clock.now();
            if !self.persist.holding() {
                self.client.release();
            }
            self.write_output(now);
            if !self.client.has_released() || now >= until {
                return;
            }
            self.client
                .wait_writable(until.saturating_duration_since(now));
        }
    }

    /// A peer that stopped reading while the queue is full is gone past the stall deadline.
    fn check_stall(&mut self, now: Instant) {
        if self.shutdown.is_some() {
            return;
        }
        if let Some(deadline) = self.client.stall_deadline()
            && now >= deadline
        {
            crate::diag!(
                "[gateway] stdout made no progress for {:.1}s with {} bytes queued",
                self.cfg.stdout_stall.as_secs_f64(),
                self.client.queued_bytes()
            );
            self.client_gone("stdout stalled", now);
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

    fn on_source_ready(&mut self, token: Token, now: Instant) {
        match self.reactor.owner(token).cloned() {
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
fn greet(client: &mut ClientConn, replay_epoch: &str, now: Instant) {
    client.event(&frame::event_params(
        "gateway.ready",
        "",
        &json!({"change_events": false, "replay_epoch": replay_epoch, "version": VERSION}),
        None,
    ));
    client.release();
    let _ = client.write(now);
}

/// Watch the client's descriptors; whether its output could be (regular files and /dev/null
/// cannot be polled, EPERM: they are always ready).
pub(crate) fn register_client(reactor: &Reactor<TokenOwner>, client: &ClientConn) -> bool {
    let _ = reactor.register_fixed(&mut SourceFd(&client.input_fd()), STDIN, Interest::READABLE);
    reactor
        .register_fixed(
            &mut SourceFd(&client.output_fd()),
            STDOUT,
            Interest::WRITABLE,
        )
        .is_ok()
}
