//! The MCP client (streamable HTTP servers: `http.rs`): each stdio server of `config.yaml`'s `mcp_servers` (`config.rs`) runs as a
//! service process of the runner (`tools::runs::start_service`: supervised, so a killed
//! gateway leaves none behind), spoken to in newline-delimited JSON-RPC (`wire.rs`) over its
//! stdin and stdout; its stderr is captured boundedly and dropped. The handshake
//! (`initialize` with the version check, `notifications/initialized`, `tools/list` page by
//! page) registers each offered tool as an [`tool::McpTool`] named `mcp__<server>__<tool>`.
//! A server that exits, breaks the protocol (a line past [`LINE_MAX`]) or does not answer
//! `initialize` within `connect_timeout` is reported (`status.update`), its calls in flight
//! end with a tool error, and it is started again after a backoff (up to [`RESTARTS`] times).
//! Called by the loop: [`pump`] each iteration (writes what the tools queued), [`on_timer`],
//! [`shut_down`] at the shutdown's interrupt; `methods/` reads [`status`].

pub mod config;
pub mod http;
pub mod progress;
pub mod tls;
pub mod tool;
pub mod wire;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::effects::Effect;
use crate::runner::{NO_TIMEOUT, RunEvent, RunId, Spec, Stdin, Streams};
use crate::tools::ToolResult;
use crate::tools::WorkTimer;
use crate::tools::runs::{self, RunOwners};
use config::ServerConfig;
use wire::Incoming;

/// Longest line a server may send; a longer one is dropped as it streams and the server is
/// restarted (the answer it carried is lost).
pub const LINE_MAX: usize = 16 * 1024 * 1024;
/// Bytes queued for a server's stdin beyond what its pipe holds (also the largest request).
const STDIN_CAP: usize = 16 * 1024 * 1024;
/// Restarts of a server that keeps failing, with the backoff doubling from [`BACKOFF`].
pub const RESTARTS: u32 = 5;
const BACKOFF: Duration = Duration::from_secs(1);
/// Pages of `tools/list` read before the rest is ignored (a server that pages forever).
const LIST_PAGES: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Configured, not started (lazy, or not yet).
    Configured,
    /// `initialize` or `tools/list` in flight.
    Connecting,
    Connected,
    /// Gone; started again at `retry_at` when set.
    Failed,
    Disabled,
}

/// What a handshake request of ours was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Initialize,
    List,
}

struct Server {
    config: ServerConfig,
    phase: Phase,
    run: Option<RunId>,
    lines: wire::Lines,
    /// Our handshake request in flight.
    asked: Option<(u64, Asked)>,
    /// Tools listed so far (pages of `tools/list`).
    listed: Vec<Value>,
    pages: usize,
    /// Names registered for it.
    tools: Vec<String>,
    error: Option<String>,
    failures: u32,
    connect_deadline: Option<Instant>,
    retry_at: Option<Instant>,
    /// [`tls::files_stamp`] of its TLS files when it was configured or last connected.
    tls_files: u64,
}

impl Server {
    fn new(config: ServerConfig) -> Server {
        let phase = if config.enabled {
            Phase::Configured
        } else {
            Phase::Disabled
        };
        Server {
            phase,
            run: None,
            lines: wire::Lines::new(LINE_MAX),
            asked: None,
            listed: Vec::new(),
            pages: 0,
            tools: Vec::new(),
            error: None,
            failures: 0,
            connect_deadline: None,
            retry_at: None,
            tls_files: tls_files(&config),
            config,
        }
    }
}

/// [`tls::files_stamp`] of a `url` server's TLS files (0 for the others).
fn tls_files(config: &ServerConfig) -> u64 {
    match (&config.url, &config.tls) {
        (Some(_), Ok(t)) => tls::files_stamp(t),
        _ => 0,
    }
}

#[derive(Default)]
pub struct Mcp {
    servers: BTreeMap<String, Server>,
    by_run: HashMap<RunId, String>,
    /// The streamable HTTP servers' connections (`http.rs`).
    pub(crate) http: http::Clients,
    pub(crate) calls: tool::Shared,
    /// The calls' progress notices, paced (`progress.rs`).
    progress: progress::Progress,
    started: bool,
    /// Some `lazy` server waits for the first session to start it.
    lazy_waiting: bool,
    /// Servers hung up on (stdin closed), SIGTERMed at the time if still running.
    hanging: Vec<(RunId, Instant)>,
    stopping: bool,
    /// Bumped whenever the servers or their tools change (`config.get mtime` → `mcp_rev`).
    pub(crate) rev: u64,
    /// Sessions whose turn's first model call waits for the servers' handshakes ([`pending`]).
    turns_held: Vec<String>,
}

/// What MCP works on besides its own state ([`Mcp`]): its servers are service runs
/// ([`RunOwners`]: the runner as a [`runs::RunControl`] — spawn, stdin, stop — with the
/// run-watch view, timers, the tools' registry and due jobs, events to sessions); the home
/// and kill grace of the configuration; the sessions it reports to; and for HTTP servers the
/// loop's sockets ([`http::Sockets`]). The gateway lends it (`src/owners.rs`), unit tests a
/// fake (`tests.rs`).
pub(crate) trait McpOwners: RunOwners {
    fn mcp(&mut self) -> &mut Mcp;
    /// Where `config.yaml` is, and a stdio server's default working directory.
    fn home(&self) -> PathBuf;
    fn kill_grace(&self) -> Duration;
    /// Some session is open (a `lazy` server starts for the first).
    fn session_open(&self) -> bool;
    /// The live sessions, each with whether it is idle (no turn running).
    fn sessions_idle(&self) -> Vec<(String, bool)>;
    /// The loop's sockets, as HTTP exchanges open and release connections.
    fn sockets(&mut self) -> impl http::Sockets + '_;
}

/// What `reload.mcp` did.
pub struct Reloaded {
    pub servers: usize,
    /// Servers started, restarted or stopped because their configuration changed.
    pub changed: Vec<String>,
}

/// Read `config.yaml` once, at the first iteration (after `gateway.ready`), and start the
/// servers that are not lazy.
pub(crate) fn start_once(gw: &mut impl McpOwners, now: Instant) {
    if gw.mcp().started {
        return;
    }
    gw.mcp().started = true;
    for (name, cfg) in config::load(&gw.home()) {
        gw.mcp().servers.insert(name, Server::new(cfg));
    }
    start_due(gw, now);
}

/// Start the configured servers that are due: all but the `lazy` ones, and those too once a
/// session is open (the first client that can call their tools).
fn start_due(gw: &mut impl McpOwners, now: Instant) {
    let session_open = gw.session_open();
    let mcp = gw.mcp();
    let due: Vec<String> = mcp
        .servers
        .iter()
        .filter(|(_, s)| s.phase == Phase::Configured && (session_open || !s.config.lazy))
        .map(|(name, _)| name.clone())
        .collect();
    mcp.lazy_waiting = !session_open
        && mcp
            .servers
            .values()
            .any(|s| s.phase == Phase::Configured && s.config.lazy);
    for name in due {
        connect(gw, &name, now);
    }
}

/// No server is started while MCP stops or the gateway shuts down.
fn stopping(gw: &mut impl McpOwners) -> bool {
    gw.mcp().stopping || gw.shutting_down()
}

fn connect(gw: &mut impl McpOwners, name: &str, now: Instant) {
    if stopping(gw) {
        return;
    }
    let home = gw.home();
    let Some(s) = gw.mcp().servers.get_mut(name) else {
        return;
    };
    if s.config.url.is_some() {
        s.tls_files = tls_files(&s.config);
        let config = s.config.clone();
        let first = s.failures == 0;
        return match http::open(gw, name, &config) {
            Ok(warning) => {
                if let Some(w) = warning.filter(|_| first) {
                    let text = format!("MCP server '{name}': {w}");
                    crate::diag!("[mcp] {text}");
                    tell(gw, "warn", text);
                }
                handshake(gw, name, now)
            }
            Err(e) => misconfigured(gw, name, e, now),
        };
    }
    let Some(line) = s.config.shell_line() else {
        return misconfigured(gw, name, "no command configured".into(), now);
    };
    let cwd = s.config.cwd.as_ref().map_or(home, PathBuf::from);
    let spec = Spec {
        command: &line,
        cwd: &cwd,
        streams: Streams::Separate,
        stdin: Stdin::Pipe { cap: STDIN_CAP },
        timeout: NO_TIMEOUT,
        live: true,
    };
    match runs::start_service(gw, &spec, now) {
        Ok(run) => {
            let mcp = gw.mcp();
            mcp.servers.get_mut(name).expect("looked up above").run = Some(run);
            mcp.by_run.insert(run, name.to_string());
            handshake(gw, name, now);
        }
        Err(e) => failed(gw, name, format!("could not start: {e}"), now),
    }
}

/// The transport is open: send `initialize`, within `connect_timeout`.
fn handshake(gw: &mut impl McpOwners, name: &str, now: Instant) {
    let mcp = gw.mcp();
    let id = mcp.calls.borrow_mut().request_id();
    let Some(s) = mcp.servers.get_mut(name) else {
        return;
    };
    s.phase = Phase::Connecting;
    s.lines = wire::Lines::new(LINE_MAX);
    s.asked = Some((id, Asked::Initialize));
    s.listed.clear();
    s.pages = 0;
    let deadline = now + s.config.connect_timeout;
    s.connect_deadline = Some(deadline);
    gw.set_timer(deadline, WorkTimer::Mcp(name.to_string()));
    send(
        gw,
        name,
        wire::request(id, "initialize", wire::initialize_params()),
        now,
    );
}

/// Write a line to a server (a refusal means it is not reading: it is restarted); an HTTP
/// server gets it as a POST.
fn send(gw: &mut impl McpOwners, name: &str, line: Vec<u8>, now: Instant) {
    if gw.mcp().http.has(name) {
        return http::post(gw, name, line, now);
    }
    let Some(run) = gw.mcp().servers.get(name).and_then(|s| s.run) else {
        return;
    };
    if let Err(e) = runs::write_stdin(gw, run, &line) {
        crate::diag!("[mcp] {name}: {e}");
        runs::stop(gw, run, now);
    }
}

/// Write what the MCP tools queued (calls, cancellations). Returns the sessions whose held
/// turn may call its model now: no server is connecting any more.
pub(crate) fn pump(gw: &mut impl McpOwners, now: Instant) -> Vec<String> {
    start_once(gw, now);
    if gw.mcp().lazy_waiting && gw.session_open() {
        start_due(gw, now);
    }
    let outgoing = std::mem::take(&mut gw.mcp().calls.borrow_mut().outgoing);
    for (name, line) in outgoing {
        send(gw, &name, line, now);
    }
    let mcp = gw.mcp();
    // Each iteration: looked at only while a turn is held.
    if mcp.turns_held.is_empty() || pending(mcp).is_some() {
        return Vec::new();
    }
    std::mem::take(&mut mcp.turns_held)
}

/// The servers a turn's first model call waits for, so the model is offered every tool that
/// is coming: those in their handshake or about to start (config.yaml not read yet: none
/// named). A server's `connect_timeout` bounds its handshake; one that failed or is disabled
/// is not waited for. `None`: nothing to wait for.
pub(crate) fn pending(mcp: &Mcp) -> Option<Vec<String>> {
    if mcp.stopping {
        return None;
    }
    if !mcp.started {
        return Some(Vec::new());
    }
    let names: Vec<String> = mcp
        .servers
        .iter()
        .filter(|(_, s)| matches!(s.phase, Phase::Connecting | Phase::Configured))
        .map(|(name, _)| name.clone())
        .collect();
    (!names.is_empty()).then_some(names)
}

/// Hold `rid`'s turn until no server is [`pending`] (`pump` hands it back).
pub(crate) fn hold_turn(mcp: &mut Mcp, rid: &str) {
    if !mcp.turns_held.iter().any(|r| r == rid) {
        mcp.turns_held.push(rid.to_string());
    }
}

/// An event of a server's run (`tools::runs` service runs end here).
pub(crate) fn on_run_event(gw: &mut impl McpOwners, event: RunEvent, now: Instant) {
    match event {
        RunEvent::Output { run, bytes } => {
            let mcp = gw.mcp();
            let Some(name) = mcp.by_run.get(&run).cloned() else {
                return;
            };
            let mut lines = Vec::new();
            let Some(s) = mcp.servers.get_mut(&name) else {
                return;
            };
            let too_long = s.lines.too_long;
            s.lines.feed(&bytes, |l| lines.push(l.to_vec()));
            let overlong = s.lines.too_long > too_long;
            for line in lines {
                on_line(gw, &name, &line, now);
            }
            if overlong {
                let why = format!("sent a line longer than {LINE_MAX} bytes");
                crate::diag!("[mcp] {name}: {why}; restarting it");
                if let Some(s) = gw.mcp().servers.get_mut(&name) {
                    s.error = Some(why);
                }
                runs::stop(gw, run, now);
            }
        }
        RunEvent::Ended { run, end } => {
            let mcp = gw.mcp();
            let Some(name) = mcp.by_run.remove(&run) else {
                return;
            };
            mcp.progress.forget_server(&name);
            let why = mcp.servers.get(&name).and_then(|s| s.error.clone());
            let why = why.unwrap_or_else(|| exit_reason(end.status, &end.stderr));
            if let Some(s) = mcp.servers.get_mut(&name) {
                s.run = None;
            }
            failed(gw, &name, why, now);
        }
    }
}

fn on_line(gw: &mut impl McpOwners, name: &str, line: &[u8], now: Instant) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    on_message(gw, name, wire::parse(line), now);
}

/// One message from a server, whichever transport brought it.
fn on_message(gw: &mut impl McpOwners, name: &str, message: Incoming, now: Instant) {
    match message {
        Incoming::Answer { id, result } => on_answer(gw, name, id, result, now),
        Incoming::Notice { method, params } => on_notice(gw, name, &method, &params, now),
        Incoming::Request { id, method } => {
            let answer = match method.as_str() {
                "ping" => wire::answer(&id, Ok(json!({}))),
                _ => wire::answer(&id, Err((-32601, "method not found"))),
            };
            send(gw, name, answer, now);
        }
        Incoming::Garbage(what) => crate::diag!("[mcp] {name}: not JSON-RPC, ignored: {what}"),
    }
}

fn on_answer(
    gw: &mut impl McpOwners,
    name: &str,
    id: u64,
    result: Result<Value, String>,
    now: Instant,
) {
    let asked = gw.mcp().servers.get(name).and_then(|s| s.asked);
    if let Some((want, what)) = asked
        && want == id
    {
        gw.mcp().servers.get_mut(name).expect("asked above").asked = None;
        return match (what, result) {
            (_, Err(e)) => stop_failed(gw, name, format!("{what:?} failed: {e}"), now),
            (Asked::Initialize, Ok(init)) => match wire::check_version(&init) {
                Err(e) => stop_failed(gw, name, e, now),
                Ok(_) => {
                    send(
                        gw,
                        name,
                        wire::notification("notifications/initialized", json!({})),
                        now,
                    );
                    list(gw, name, None, now);
                    if gw.mcp().http.has(name) {
                        http::listen(gw, name, now);
                    }
                }
            },
            (Asked::List, Ok(page)) => on_list_page(gw, name, page, now),
        };
    }
    let job = gw.mcp().calls.borrow().job_of(name, id);
    let Some(job) = job else {
        crate::diag!("[mcp] {name}: an answer to an unknown request {id}, ignored");
        return;
    };
    // What its progress held goes out before its result.
    if let Some(shown) = gw.mcp().progress.end(job) {
        show_progress(gw, job, shown);
    }
    let result = match result {
        Ok(r) => {
            let (content, summary, error) = wire::call_result(&r);
            let mut t = ToolResult::new(content, summary);
            t.error = error;
            t
        }
        Err(e) => ToolResult::error(format!("MCP server '{name}': {e}")),
    };
    let mut calls = gw.mcp().calls.borrow_mut();
    calls.pending.remove(&job);
    calls.results.insert(job, result);
    drop(calls);
    gw.tools().due.add(job);
}

fn list(gw: &mut impl McpOwners, name: &str, cursor: Option<&str>, now: Instant) {
    let mcp = gw.mcp();
    let id = mcp.calls.borrow_mut().request_id();
    if let Some(s) = mcp.servers.get_mut(name) {
        s.asked = Some((id, Asked::List));
        s.pages += 1;
    }
    let params = match cursor {
        Some(c) => json!({"cursor": c}),
        None => json!({}),
    };
    send(gw, name, wire::request(id, "tools/list", params), now);
}

fn on_list_page(gw: &mut impl McpOwners, name: &str, page: Value, now: Instant) {
    let Some(s) = gw.mcp().servers.get_mut(name) else {
        return;
    };
    s.listed
        .extend(page["tools"].as_array().into_iter().flatten().cloned());
    if let Some(cursor) = page["nextCursor"].as_str().filter(|c| !c.is_empty())
        && s.pages < LIST_PAGES
    {
        let cursor = cursor.to_string();
        return list(gw, name, Some(&cursor), now);
    }
    register_tools(gw, name, now);
}

fn register_tools(gw: &mut impl McpOwners, name: &str, _now: Instant) {
    let mcp = gw.mcp();
    let Some(s) = mcp.servers.get_mut(name) else {
        return;
    };
    let old = std::mem::take(&mut s.tools);
    let listed = std::mem::take(&mut s.listed);
    let config = s.config.clone();
    let calls = mcp.calls.clone();
    let registry = &mut gw.tools().set;
    for t in &old {
        registry.unregister(t);
    }
    let mut names = Vec::new();
    for t in listed {
        let Some(tool) = t["name"].as_str() else {
            continue;
        };
        // `mcp__<server>__` names no tool: the model could not call it by a name of its own.
        if tool.trim().is_empty() {
            crate::diag!("[mcp] {name}: a tool with an empty name is not offered");
            continue;
        }
        if !config.offers(tool) {
            continue;
        }
        let full = wire::tool_name(name, tool);
        let description = t["description"]
            .as_str()
            .map_or_else(|| format!("MCP tool {tool} from {name}"), str::to_string);
        let registered = registry.register(Box::new(tool::McpTool {
            name: full.clone(),
            server: name.to_string(),
            toolset: format!("mcp-{name}"),
            tool: tool.to_string(),
            description,
            schema: wire::sanitize_schema(t.get("inputSchema")),
            timeout: config.call_timeout,
            calls: calls.clone(),
        }));
        match registered {
            Ok(()) => names.push(full),
            Err(e) => crate::diag!("[mcp] {name}: tool {tool} not offered: {e}"),
        }
    }
    let count = names.len();
    let mcp = gw.mcp();
    let s = mcp.servers.get_mut(name).expect("looked up above");
    s.tools = names;
    s.phase = Phase::Connected;
    s.error = None;
    s.failures = 0;
    s.connect_deadline = None;
    mcp.rev += 1;
    mcp.calls.borrow_mut().ready.insert(name.to_string());
    tell(
        gw,
        "info",
        format!("MCP server '{name}' connected: {count} tools"),
    );
}

fn on_notice(gw: &mut impl McpOwners, name: &str, method: &str, params: &Value, now: Instant) {
    match method {
        "notifications/tools/list_changed" => {
            let Some(s) = gw.mcp().servers.get_mut(name) else {
                return;
            };
            if s.phase == Phase::Connected {
                s.listed.clear();
                s.pages = 0;
                list(gw, name, None, now);
            }
        }
        "notifications/progress" => {
            let Some(token) = params["progressToken"].as_u64() else {
                return;
            };
            let Some(job) = gw.mcp().calls.borrow().job_of(name, token) else {
                return;
            };
            let progress = params["progress"].as_f64().unwrap_or(0.0);
            let text = match (params["message"].as_str(), params["total"].as_f64()) {
                (Some(m), _) => crate::util::clip(m, 4096),
                (None, Some(total)) => format!("{progress}/{total}"),
                (None, None) => format!("{progress}"),
            };
            match gw.mcp().progress.notice(job, name, &text, now) {
                progress::Notice::Show(shown) => show_progress(gw, job, shown),
                progress::Notice::Held(Some(at)) => {
                    gw.set_timer(at, WorkTimer::Mcp(name.to_string()))
                }
                progress::Notice::Held(None) => {}
            }
        }
        _ => {}
    }
}

/// A call's progress, as the terminal's live output is shown: the latest notice and the lines.
fn show_progress(gw: &mut impl McpOwners, job: crate::tools::JobId, shown: progress::Shown) {
    let Some((rid, tool_id, tool)) = gw
        .tools()
        .jobs
        .get(&job)
        .map(|j| (j.rid.clone(), j.call.id.clone(), j.call.name.clone()))
    else {
        return;
    };
    let preview = crate::util::clip(&shown.preview, 80);
    gw.emit(
        &rid,
        "tool.progress",
        json!({"tool_id": tool_id, "name": tool, "preview": preview}),
    );
    gw.emit(
        &rid,
        "tool.output",
        json!({"tool_id": tool_id, "text": shown.output}),
    );
}

/// Stop a server that broke the handshake; its end reports it.
fn stop_failed(gw: &mut impl McpOwners, name: &str, why: String, now: Instant) {
    let run = gw.mcp().servers.get_mut(name).and_then(|s| {
        s.error = Some(why.clone());
        s.run
    });
    match run {
        Some(run) => runs::stop(gw, run, now),
        None => failed(gw, name, why, now),
    }
}

/// The MCP stdio ending: close the server's stdin, give it half the kill grace to exit by
/// itself, then stop it (SIGTERM, SIGKILL after the kill grace; the shutdown's own SIGKILL of
/// every tool comes one kill grace after its interrupt, so all of it stays inside the grace).
fn hang_up(gw: &mut impl McpOwners, name: &str, run: RunId, now: Instant) {
    runs::close_stdin(gw, run);
    let at = now + gw.kill_grace() / 2;
    gw.mcp().hanging.push((run, at));
    gw.set_timer(at, WorkTimer::Mcp(name.to_string()));
}

/// SIGTERM the servers hung up on that are still running when their wait is over.
fn stop_hung_up(gw: &mut impl McpOwners, now: Instant) {
    let mcp = gw.mcp();
    let (due, waiting) = std::mem::take(&mut mcp.hanging)
        .into_iter()
        .partition(|(_, at)| *at <= now);
    mcp.hanging = waiting;
    for (run, _) in due {
        runs::stop(gw, run, now);
    }
}

/// End the server's calls in flight with a tool error saying what happened to it (`why`),
/// and drop what was queued for it, so nothing stale reaches its successor.
fn end_calls_in_flight(gw: &mut impl McpOwners, name: &str, why: &str) {
    let mut calls = gw.mcp().calls.borrow_mut();
    calls.ready.remove(name);
    let jobs: Vec<_> = calls
        .pending
        .iter()
        .filter(|(_, p)| p.server == name)
        .map(|(j, _)| *j)
        .collect();
    for job in &jobs {
        calls.pending.remove(job);
        calls.results.insert(
            *job,
            ToolResult::error(format!("MCP server '{name}' {why} during the call")),
        );
    }
    calls.outgoing.retain(|(s, _)| s != name);
    drop(calls);
    http::close(gw, name);
    for job in jobs {
        gw.tools().due.add(job);
    }
}

/// Why a server's process ended, in words: its status (a signal named), and the last line it
/// wrote on stderr labelled as such (often only its start-up banner, not a reason).
fn exit_reason(status: i32, stderr: &str) -> String {
    let signal = nix::sys::signal::Signal::try_from(status - 128)
        .ok()
        .filter(|_| status > 128);
    let mut why = match signal {
        Some(sig) => format!("exited (status {status}: killed by {})", sig.as_str()),
        None => format!("exited (status {status})"),
    };
    let last = stderr.lines().rev().map(str::trim).find(|l| !l.is_empty());
    if let Some(line) = last {
        why.push_str("; its last stderr line: ");
        why.push_str(&crate::util::printable(&crate::util::clip(line, 200)));
    }
    why
}

/// The server is gone: end its calls in flight, report, restart after the backoff.
fn failed(gw: &mut impl McpOwners, name: &str, why: String, now: Instant) {
    fail(gw, name, why, true, now);
}

/// The server cannot work as configured (a key or a file it names is wrong, TLS refused):
/// reported once like [`failed`], and not restarted until a reload.
fn misconfigured(gw: &mut impl McpOwners, name: &str, why: String, now: Instant) {
    fail(gw, name, why, false, now);
}

fn fail(gw: &mut impl McpOwners, name: &str, why: String, restart: bool, now: Instant) {
    end_calls_in_flight(gw, name, &why);
    let stopping = stopping(gw);
    let mcp = gw.mcp();
    mcp.rev += 1;
    let Some(s) = mcp.servers.get_mut(name) else {
        return;
    };
    s.phase = Phase::Failed;
    s.asked = None;
    s.connect_deadline = None;
    s.error = Some(why.clone());
    if stopping {
        return;
    }
    s.failures += 1;
    s.retry_at =
        (restart && s.failures <= RESTARTS).then(|| now + BACKOFF * 2u32.pow(s.failures - 1));
    let text = match s.retry_at {
        None if !restart => {
            format!("MCP server '{name}' cannot be used: {why}; it starts again on /reload-mcp")
        }
        Some(at) => {
            gw.set_timer(at, WorkTimer::Mcp(name.to_string()));
            let wait = at - now;
            format!(
                "MCP server '{name}' {why}; restarting in {}s",
                wait.as_secs()
            )
        }
        None => format!("MCP server '{name}' {why}; given up after {RESTARTS} restarts"),
    };
    crate::diag!("[mcp] {text}");
    tell(gw, "warn", text);
}

/// An HTTP server forgot our session (a 404): its calls in flight end, and a working one is
/// initialised again at once (a 404 during the handshake fails it, restarted with backoff).
fn session_gone(gw: &mut impl McpOwners, name: &str, now: Instant) {
    let why = "ended the MCP session (HTTP 404)";
    let connected = gw
        .mcp()
        .servers
        .get(name)
        .is_some_and(|s| s.phase == Phase::Connected);
    if !connected {
        return failed(gw, name, why.into(), now);
    }
    end_calls_in_flight(gw, name, why);
    let mcp = gw.mcp();
    mcp.rev += 1;
    if let Some(s) = mcp.servers.get_mut(name) {
        s.error = Some(why.into());
    }
    let text = format!("MCP server '{name}' {why}; starting a new session now");
    crate::diag!("[mcp] {text}");
    tell(gw, "warn", text);
    connect(gw, name, now);
}

/// A `status.update` to every live session, and a fresh `session.info` to the idle ones (the
/// TUI redraws its banner's servers and tools from it; a running one gets its own at the end
/// of the turn).
fn tell(gw: &mut impl McpOwners, kind: &str, text: String) {
    for (rid, idle) in gw.sessions_idle() {
        gw.emit(&rid, "status.update", json!({"kind": kind, "text": text}));
        if idle {
            gw.effects().push(Effect::SessionInfo { rid });
        }
    }
}

/// `reload.mcp`: read `config.yaml` again; servers whose configuration changed (or that are
/// new, gone, or failed) are stopped and started again, the others are not touched.
pub(crate) fn reload(gw: &mut impl McpOwners, now: Instant) -> Reloaded {
    start_once(gw, now);
    let wanted = config::load(&gw.home());
    let changed = changes(&gw.mcp().servers, &wanted);
    for name in &changed {
        forget(gw, name, now);
    }
    for (name, cfg) in wanted {
        gw.mcp()
            .servers
            .entry(name)
            .or_insert_with(|| Server::new(cfg));
    }
    start_due(gw, now);
    let mcp = gw.mcp();
    mcp.rev += 1;
    Reloaded {
        servers: mcp.servers.len(),
        changed,
    }
}

/// The servers a reload would start, restart or stop now (`config.yaml` read again): what
/// `/reload-mcp` asks the user to confirm.
pub(crate) fn pending_reload(gw: &mut impl McpOwners) -> Vec<String> {
    let wanted = config::load(&gw.home());
    changes(&gw.mcp().servers, &wanted)
}

/// Servers whose entry was added, removed or changed (its TLS files too), or that failed, in
/// name order.
fn changes(
    running: &BTreeMap<String, Server>,
    wanted: &BTreeMap<String, ServerConfig>,
) -> Vec<String> {
    let mut changed: Vec<String> = running
        .iter()
        .filter(|(name, s)| {
            let same = wanted
                .get(*name)
                .is_some_and(|w| *w == s.config && tls_files(w) == s.tls_files);
            !same || s.phase == Phase::Failed
        })
        .map(|(name, _)| name.clone())
        .collect();
    changed.extend(wanted.keys().filter(|n| !running.contains_key(*n)).cloned());
    changed.sort();
    changed
}

/// Stop a server for good (a reload drops or replaces it): its tools go, its calls fail.
fn forget(gw: &mut impl McpOwners, name: &str, now: Instant) {
    let Some(s) = gw.mcp().servers.remove(name) else {
        return;
    };
    for t in &s.tools {
        gw.tools().set.unregister(t);
    }
    if let Some(run) = s.run {
        gw.mcp().by_run.remove(&run);
        hang_up(gw, name, run, now);
    }
    http::end_session(gw, name, now);
    end_calls_in_flight(gw, name, "was reloaded");
}

/// `WorkTimer::Mcp`: a connect deadline or a restart is due.
pub(crate) fn on_timer(gw: &mut impl McpOwners, name: &str, now: Instant) {
    let mcp = gw.mcp();
    let calls = mcp.calls.clone();
    mcp.progress.retain(|job| calls.borrow().is_pending(job));
    let (due, next) = mcp.progress.due(name, now);
    for (job, shown) in due {
        show_progress(gw, job, shown);
    }
    if let Some(at) = next {
        gw.set_timer(at, WorkTimer::Mcp(name.to_string()));
    }
    stop_hung_up(gw, now);
    http::on_timer(gw, name, now);
    let Some(s) = gw.mcp().servers.get(name) else {
        return;
    };
    if s.phase == Phase::Connecting && s.connect_deadline.is_some_and(|d| now >= d) {
        let secs = s.config.connect_timeout.as_secs_f64();
        return stop_failed(
            gw,
            name,
            format!("did not finish the handshake within {secs}s"),
            now,
        );
    }
    if s.phase == Phase::Failed && s.retry_at.is_some_and(|t| now >= t) && s.run.is_none() {
        connect(gw, name, now);
    }
}

/// The shutdown: each server gets the MCP stdio sequence ([`hang_up`]).
pub(crate) fn shut_down(gw: &mut impl McpOwners, now: Instant) {
    let mcp = gw.mcp();
    mcp.stopping = true;
    let runs: Vec<(RunId, String)> = mcp.by_run.iter().map(|(r, n)| (*r, n.clone())).collect();
    for (run, name) in runs {
        hang_up(gw, &name, run, now);
    }
    for name in gw.mcp().http.names() {
        http::end_session(gw, &name, now);
    }
}

/// Each configured server as the TUI's banner reads it (`info.mcp_servers`).
pub fn status(mcp: &Mcp) -> Value {
    let list: Vec<Value> = mcp
        .servers
        .iter()
        .map(|(name, s)| {
            let status = match s.phase {
                Phase::Configured => "configured",
                Phase::Connecting => "connecting",
                Phase::Connected => "connected",
                Phase::Failed => "failed",
                Phase::Disabled => "disabled",
            };
            let mut v = json!({"name": name, "transport": s.config.transport(),
                "tools": s.tools.len(), "connected": s.phase == Phase::Connected,
                "disabled": s.phase == Phase::Disabled, "status": status});
            if let Some(e) = &s.error {
                v["error"] = json!(e);
            }
            v
        })
        .collect();
    Value::Array(list)
}
