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
pub mod tool;
pub mod wire;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::event_loop::Gateway;
use crate::runner::{NO_TIMEOUT, RunEvent, RunId, Spec, Stdin, Streams};
use crate::tools::Timer;
use crate::tools::ToolResult;
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
}

impl Server {
    fn new(config: ServerConfig) -> Server {
        let phase = if config.enabled {
            Phase::Configured
        } else {
            Phase::Disabled
        };
        Server {
            config,
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
        }
    }
}

#[derive(Default)]
pub struct Mcp {
    servers: BTreeMap<String, Server>,
    by_run: HashMap<RunId, String>,
    /// The streamable HTTP servers' connections (`http.rs`).
    pub(crate) http: http::Clients,
    pub(crate) calls: tool::Shared,
    started: bool,
    /// Some `lazy` server waits for the first session to start it.
    lazy_waiting: bool,
    /// Servers hung up on (stdin closed), SIGTERMed at the time if still running.
    hanging: Vec<(RunId, Instant)>,
    stopping: bool,
    /// Bumped whenever the servers or their tools change (`config.get mtime` → `mcp_rev`).
    pub(crate) rev: u64,
}

/// What `reload.mcp` did.
pub struct Reloaded {
    pub servers: usize,
    /// Servers started, restarted or stopped because their configuration changed.
    pub changed: Vec<String>,
}

/// Read `config.yaml` once, at the first iteration (after `gateway.ready`), and start the
/// servers that are not lazy.
pub fn start_once(gw: &mut Gateway, now: Instant) {
    if gw.mcp.started {
        return;
    }
    gw.mcp.started = true;
    for (name, cfg) in config::load(&gw.cfg.home) {
        gw.mcp.servers.insert(name, Server::new(cfg));
    }
    start_due(gw, now);
}

/// Start the configured servers that are due: all but the `lazy` ones, and those too once a
/// session is open (the first client that can call their tools).
fn start_due(gw: &mut Gateway, now: Instant) {
    let session_open = gw.sessions.keys().next().is_some();
    let due: Vec<String> = gw
        .mcp
        .servers
        .iter()
        .filter(|(_, s)| s.phase == Phase::Configured && (session_open || !s.config.lazy))
        .map(|(name, _)| name.clone())
        .collect();
    gw.mcp.lazy_waiting = !session_open
        && gw
            .mcp
            .servers
            .values()
            .any(|s| s.phase == Phase::Configured && s.config.lazy);
    for name in due {
        connect(gw, &name, now);
    }
}

fn connect(gw: &mut Gateway, name: &str, now: Instant) {
    if gw.mcp.stopping || gw.shutdown.is_some() {
        return;
    }
    let home = gw.cfg.home.clone();
    let Some(s) = gw.mcp.servers.get_mut(name) else {
        return;
    };
    if let Some(url) = s.config.url.clone() {
        let headers = s.config.headers.clone();
        return match http::open(gw, name, &url, &headers) {
            Ok(()) => handshake(gw, name, now),
            Err(e) => failed(gw, name, e, now),
        };
    }
    let Some(line) = s.config.shell_line() else {
        s.phase = Phase::Failed;
        s.error = Some("no command configured".into());
        return;
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
    match crate::tools::runs::start_service(gw, &spec, now) {
        Ok(run) => {
            let s = gw.mcp.servers.get_mut(name).expect("looked up above");
            s.run = Some(run);
            gw.mcp.by_run.insert(run, name.to_string());
            handshake(gw, name, now);
        }
        Err(e) => failed(gw, name, format!("could not start: {e}"), now),
    }
}

/// The transport is open: send `initialize`, within `connect_timeout`.
fn handshake(gw: &mut Gateway, name: &str, now: Instant) {
    let id = gw.mcp.calls.borrow_mut().request_id();
    let Some(s) = gw.mcp.servers.get_mut(name) else {
        return;
    };
    s.phase = Phase::Connecting;
    s.lines = wire::Lines::new(LINE_MAX);
    s.asked = Some((id, Asked::Initialize));
    s.listed.clear();
    s.pages = 0;
    let deadline = now + s.config.connect_timeout;
    s.connect_deadline = Some(deadline);
    gw.timers.insert(deadline, Timer::Mcp(name.to_string()));
    send(
        gw,
        name,
        wire::request(id, "initialize", wire::initialize_params()),
    );
}

/// Write a line to a server (a refusal means it is not reading: it is restarted); an HTTP
/// server gets it as a POST.
fn send(gw: &mut Gateway, name: &str, line: Vec<u8>) {
    if gw.mcp.http.has(name) {
        return http::post(gw, name, line, Instant::now());
    }
    let Some(run) = gw.mcp.servers.get(name).and_then(|s| s.run) else {
        return;
    };
    if let Err(e) = crate::tools::runs::write_stdin(gw, run, &line) {
        crate::diag!("[mcp] {name}: {e}");
        crate::tools::runs::stop(gw, run, Instant::now());
    }
}

/// Write what the MCP tools queued (calls, cancellations).
pub fn pump(gw: &mut Gateway, now: Instant) {
    start_once(gw, now);
    if gw.mcp.lazy_waiting && gw.sessions.keys().next().is_some() {
        start_due(gw, now);
    }
    let outgoing = std::mem::take(&mut gw.mcp.calls.borrow_mut().outgoing);
    for (name, line) in outgoing {
        send(gw, &name, line);
    }
}

/// An event of a server's run (`tools::runs` service runs end here).
pub(crate) fn on_run_event(gw: &mut Gateway, event: RunEvent, now: Instant) {
    match event {
        RunEvent::Output { run, bytes } => {
            let Some(name) = gw.mcp.by_run.get(&run).cloned() else {
                return;
            };
            let mut lines = Vec::new();
            let Some(s) = gw.mcp.servers.get_mut(&name) else {
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
                if let Some(s) = gw.mcp.servers.get_mut(&name) {
                    s.error = Some(why);
                }
                crate::tools::runs::stop(gw, run, now);
            }
        }
        RunEvent::Ended { run, end } => {
            let Some(name) = gw.mcp.by_run.remove(&run) else {
                return;
            };
            let why = gw.mcp.servers.get(&name).and_then(|s| s.error.clone());
            let stderr = end.stderr.lines().last().unwrap_or("").to_string();
            let why = why.unwrap_or_else(|| match stderr.is_empty() {
                true => format!("exited (status {})", end.status),
                false => format!(
                    "exited (status {}): {}",
                    end.status,
                    crate::util::clip(&stderr, 200)
                ),
            });
            if let Some(s) = gw.mcp.servers.get_mut(&name) {
                s.run = None;
            }
            failed(gw, &name, why, now);
        }
    }
}

fn on_line(gw: &mut Gateway, name: &str, line: &[u8], now: Instant) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    on_message(gw, name, wire::parse(line), now);
}

/// One message from a server, whichever transport brought it.
fn on_message(gw: &mut Gateway, name: &str, message: Incoming, now: Instant) {
    match message {
        Incoming::Answer { id, result } => on_answer(gw, name, id, result, now),
        Incoming::Notice { method, params } => on_notice(gw, name, &method, &params),
        Incoming::Request { id, method } => {
            let answer = match method.as_str() {
                "ping" => wire::answer(&id, Ok(json!({}))),
                _ => wire::answer(&id, Err((-32601, "method not found"))),
            };
            send(gw, name, answer);
        }
        Incoming::Garbage(what) => crate::diag!("[mcp] {name}: not JSON-RPC, ignored: {what}"),
    }
}

fn on_answer(gw: &mut Gateway, name: &str, id: u64, result: Result<Value, String>, now: Instant) {
    let asked = gw.mcp.servers.get(name).and_then(|s| s.asked);
    if let Some((want, what)) = asked
        && want == id
    {
        gw.mcp.servers.get_mut(name).expect("asked above").asked = None;
        return match (what, result) {
            (_, Err(e)) => stop_failed(gw, name, format!("{what:?} failed: {e}"), now),
            (Asked::Initialize, Ok(init)) => match wire::check_version(&init) {
                Err(e) => stop_failed(gw, name, e, now),
                Ok(_) => {
                    send(
                        gw,
                        name,
                        wire::notification("notifications/initialized", json!({})),
                    );
                    list(gw, name, None);
                }
            },
            (Asked::List, Ok(page)) => on_list_page(gw, name, page, now),
        };
    }
    let job = gw.mcp.calls.borrow().job_of(name, id);
    let Some(job) = job else {
        crate::diag!("[mcp] {name}: an answer to an unknown request {id}, ignored");
        return;
    };
    let result = match result {
        Ok(r) => {
            let (content, summary, error) = wire::call_result(&r);
            let mut t = ToolResult::new(content, summary);
            t.error = error;
            t
        }
        Err(e) => ToolResult::error(format!("MCP server '{name}': {e}")),
    };
    let mut calls = gw.mcp.calls.borrow_mut();
    calls.pending.remove(&job);
    calls.results.insert(job, result);
    drop(calls);
    gw.tools.due.add(job);
}

fn list(gw: &mut Gateway, name: &str, cursor: Option<&str>) {
    let id = gw.mcp.calls.borrow_mut().request_id();
    if let Some(s) = gw.mcp.servers.get_mut(name) {
        s.asked = Some((id, Asked::List));
        s.pages += 1;
    }
    let params = match cursor {
        Some(c) => json!({"cursor": c}),
        None => json!({}),
    };
    send(gw, name, wire::request(id, "tools/list", params));
}

fn on_list_page(gw: &mut Gateway, name: &str, page: Value, now: Instant) {
    let Some(s) = gw.mcp.servers.get_mut(name) else {
        return;
    };
    s.listed
        .extend(page["tools"].as_array().into_iter().flatten().cloned());
    if let Some(cursor) = page["nextCursor"].as_str().filter(|c| !c.is_empty())
        && s.pages < LIST_PAGES
    {
        let cursor = cursor.to_string();
        return list(gw, name, Some(&cursor));
    }
    register_tools(gw, name, now);
}

fn register_tools(gw: &mut Gateway, name: &str, _now: Instant) {
    let Some(s) = gw.mcp.servers.get_mut(name) else {
        return;
    };
    let old = std::mem::take(&mut s.tools);
    let listed = std::mem::take(&mut s.listed);
    let config = s.config.clone();
    for t in &old {
        gw.tools.registry.unregister(t);
    }
    let mut names = Vec::new();
    for t in listed {
        let Some(tool) = t["name"].as_str() else {
            continue;
        };
        if !config.offers(tool) {
            continue;
        }
        let full = wire::tool_name(name, tool);
        let description = t["description"]
            .as_str()
            .map_or_else(|| format!("MCP tool {tool} from {name}"), str::to_string);
        let registered = gw.tools.registry.register(Box::new(tool::McpTool {
            name: full.clone(),
            server: name.to_string(),
            toolset: format!("mcp-{name}"),
            tool: tool.to_string(),
            description,
            schema: wire::sanitize_schema(t.get("inputSchema")),
            timeout: config.call_timeout,
            calls: gw.mcp.calls.clone(),
        }));
        match registered {
            Ok(()) => names.push(full),
            Err(e) => crate::diag!("[mcp] {name}: tool {tool} not offered: {e}"),
        }
    }
    let count = names.len();
    let s = gw.mcp.servers.get_mut(name).expect("looked up above");
    s.tools = names;
    gw.mcp.rev += 1;
    s.phase = Phase::Connected;
    s.error = None;
    s.failures = 0;
    s.connect_deadline = None;
    gw.mcp.calls.borrow_mut().ready.insert(name.to_string());
    tell(
        gw,
        "info",
        format!("MCP server '{name}' connected: {count} tools"),
    );
}

fn on_notice(gw: &mut Gateway, name: &str, method: &str, params: &Value) {
    match method {
        "notifications/tools/list_changed" => {
            let connected = gw
                .mcp
                .servers
                .get(name)
                .is_some_and(|s| s.phase == Phase::Connected);
            if connected {
                if let Some(s) = gw.mcp.servers.get_mut(name) {
                    s.listed.clear();
                    s.pages = 0;
                }
                list(gw, name, None);
            }
        }
        "notifications/progress" => {
            let Some(token) = params["progressToken"].as_u64() else {
                return;
            };
            let Some(job) = gw.mcp.calls.borrow().job_of(name, token) else {
                return;
            };
            let Some((rid, tool_id, tool)) = gw
                .tools
                .jobs
                .get(&job)
                .map(|j| (j.rid.clone(), j.call.id.clone(), j.call.name.clone()))
            else {
                return;
            };
            let progress = params["progress"].as_f64().unwrap_or(0.0);
            let text = match (params["message"].as_str(), params["total"].as_f64()) {
                (Some(m), _) => m.to_string(),
                (None, Some(total)) => format!("{progress}/{total}"),
                (None, None) => format!("{progress}"),
            };
            let preview = crate::util::clip(&text, 80);
            gw.emit(
                &rid,
                "tool.progress",
                json!({"tool_id": tool_id, "name": tool, "preview": preview}),
            );
            gw.emit(
                &rid,
                "tool.output",
                json!({"tool_id": tool_id, "text": format!("{text}\n")}),
            );
        }
        _ => {}
    }
}

/// Stop a server that broke the handshake; its end reports it.
fn stop_failed(gw: &mut Gateway, name: &str, why: String, now: Instant) {
    let run = gw.mcp.servers.get_mut(name).and_then(|s| {
        s.error = Some(why.clone());
        s.run
    });
    match run {
        Some(run) => crate::tools::runs::stop(gw, run, now),
        None => failed(gw, name, why, now),
    }
}

/// The MCP stdio ending: close the server's stdin, give it half the kill grace to exit by
/// itself, then stop it (SIGTERM, SIGKILL after the kill grace; the shutdown's own SIGKILL of
/// every tool comes one kill grace after its interrupt, so all of it stays inside the grace).
fn hang_up(gw: &mut Gateway, name: &str, run: RunId, now: Instant) {
    crate::tools::runs::close_stdin(gw, run);
    let at = now + gw.cfg.kill_grace / 2;
    gw.mcp.hanging.push((run, at));
    gw.timers.insert(at, Timer::Mcp(name.to_string()));
}

/// SIGTERM the servers hung up on that are still running when their wait is over.
fn stop_hung_up(gw: &mut Gateway, now: Instant) {
    let (due, waiting) = std::mem::take(&mut gw.mcp.hanging)
        .into_iter()
        .partition(|(_, at)| *at <= now);
    gw.mcp.hanging = waiting;
    for (run, _) in due {
        crate::tools::runs::stop(gw, run, now);
    }
}

/// End the server's calls in flight with a tool error saying what happened to it (`why`),
/// and drop what was queued for it, so nothing stale reaches its successor.
fn end_calls_in_flight(gw: &mut Gateway, name: &str, why: &str) {
    let mut calls = gw.mcp.calls.borrow_mut();
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
        gw.tools.due.add(job);
    }
}

/// The server is gone: end its calls in flight, report, restart after the backoff.
fn failed(gw: &mut Gateway, name: &str, why: String, now: Instant) {
    end_calls_in_flight(gw, name, &why);
    let stopping = gw.mcp.stopping || gw.shutdown.is_some();
    gw.mcp.rev += 1;
    let Some(s) = gw.mcp.servers.get_mut(name) else {
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
    let text = if s.failures <= RESTARTS {
        let wait = BACKOFF * 2u32.pow(s.failures - 1);
        let at = now + wait;
        s.retry_at = Some(at);
        gw.timers.insert(at, Timer::Mcp(name.to_string()));
        format!(
            "MCP server '{name}' {why}; restarting in {}s",
            wait.as_secs()
        )
    } else {
        s.retry_at = None;
        format!("MCP server '{name}' {why}; given up after {RESTARTS} restarts")
    };
    crate::diag!("[mcp] {text}");
    tell(gw, "warn", text);
}

/// A `status.update` to every live session, and a fresh `session.info` to the idle ones (the
/// TUI redraws its banner's servers and tools from it; a running one gets its own at the end
/// of the turn).
fn tell(gw: &mut Gateway, kind: &str, text: String) {
    let rids: Vec<String> = gw.sessions.keys().cloned().collect();
    for rid in rids {
        gw.emit(&rid, "status.update", json!({"kind": kind, "text": text}));
        if gw.sessions.get(&rid).is_some_and(|s| !s.running()) {
            gw.emit_info(&rid);
        }
    }
}

/// `reload.mcp`: read `config.yaml` again; servers whose configuration changed (or that are
/// new, gone, or failed) are stopped and started again, the others are not touched.
pub fn reload(gw: &mut Gateway, now: Instant) -> Reloaded {
    start_once(gw, now);
    let wanted = config::load(&gw.cfg.home);
    let mut changed = Vec::new();
    let names: Vec<String> = gw.mcp.servers.keys().cloned().collect();
    for name in names {
        let s = &gw.mcp.servers[&name];
        let same = wanted.get(&name) == Some(&s.config);
        if same && s.phase != Phase::Failed {
            continue;
        }
        changed.push(name.clone());
        forget(gw, &name, now);
    }
    for (name, cfg) in wanted {
        if gw.mcp.servers.contains_key(&name) {
            continue;
        }
        if !changed.contains(&name) {
            changed.push(name.clone());
        }
        gw.mcp.servers.insert(name.clone(), Server::new(cfg));
    }
    start_due(gw, now);
    gw.mcp.rev += 1;
    changed.sort();
    Reloaded {
        servers: gw.mcp.servers.len(),
        changed,
    }
}

/// Stop a server for good (a reload drops or replaces it): its tools go, its calls fail.
fn forget(gw: &mut Gateway, name: &str, now: Instant) {
    let Some(s) = gw.mcp.servers.remove(name) else {
        return;
    };
    for t in &s.tools {
        gw.tools.registry.unregister(t);
    }
    if let Some(run) = s.run {
        gw.mcp.by_run.remove(&run);
        hang_up(gw, name, run, now);
    }
    http::end_session(gw, name, now);
    end_calls_in_flight(gw, name, "was reloaded");
}

/// `Timer::Mcp`: a connect deadline or a restart is due.
pub fn on_timer(gw: &mut Gateway, name: &str, now: Instant) {
    stop_hung_up(gw, now);
    http::expire(gw, name, now);
    let Some(s) = gw.mcp.servers.get(name) else {
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
pub fn shut_down(gw: &mut Gateway, now: Instant) {
    gw.mcp.stopping = true;
    let runs: Vec<(RunId, String)> = gw.mcp.by_run.iter().map(|(r, n)| (*r, n.clone())).collect();
    for (run, name) in runs {
        hang_up(gw, &name, run, now);
    }
    for name in gw.mcp.http.names() {
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
