//! The MCP client's lifecycle with fakes: a runner whose pipes hold what the test writes (the
//! server's side), a fake clock (timers fire when a test says what time it is), no network.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::effects::Effect;
use crate::model::connect::{Failure, Route};
use crate::rpc::outbox::Outbox;
use crate::runner::Closed;
use crate::tools::Tools;
use crate::tools::runs::RunControl;
use crate::tools::runs::fake::{FakeRuns, ended};
use crate::util::ScratchDir;

/// The gateway as MCP sees it, with a `config.yaml` of the test's own.
struct Fake {
    runs: FakeRuns,
    mcp: Mcp,
    home: ScratchDir,
    /// Sessions sent a fresh `session.info`.
    infos: Vec<String>,
}

/// No network here: every connection is refused.
struct NoSockets;

impl http::Sockets for NoSockets {
    fn connect(
        &mut self,
        _exchange: u64,
        _route: &Route,
        _tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Box<dyn http::Link>, Failure> {
        Err(Failure::Connect("no network in unit tests".into()))
    }
    fn release(&mut self, _exchange: u64, _link: Box<dyn http::Link>) {}
}

impl Fake {
    fn new(config_yaml: &str) -> Fake {
        let home = ScratchDir::new("mcp");
        std::fs::write(home.path().join("config.yaml"), config_yaml).unwrap();
        let mut runs = FakeRuns::new();
        runs.sessions = HashSet::from(["r1".to_string()]);
        Fake {
            runs,
            mcp: Mcp::default(),
            home,
            infos: Vec::new(),
        }
    }

    fn t0(&self) -> Instant {
        self.runs.asker.start
    }

    /// Every line written to run `run`'s stdin so far, parsed, and forget them.
    fn written(&mut self, run: RunId) -> Vec<Value> {
        let mut out = Vec::new();
        self.runs.runner.stdin.retain(|(r, bytes)| {
            if *r != run {
                return true;
            }
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                out.push(serde_json::from_slice(line).expect("we write JSON lines"));
            }
            false
        });
        out
    }

    /// The server of run `run` writes `lines` on its stdout; the loop reads them.
    fn server_says(&mut self, run: RunId, lines: &[Value], now: Instant) {
        let mut bytes = Vec::new();
        for l in lines {
            bytes.extend_from_slice(l.to_string().as_bytes());
            bytes.push(b'\n');
        }
        self.runs.runner.pipes.push(RunEvent::Output { run, bytes });
        self.pump(now);
    }

    /// The loop reads the servers' pipes; their events reach MCP as the dispatcher routes them.
    fn pump(&mut self, now: Instant) {
        runs::pump(self, now, &crate::clock::Budget::unlimited());
        self.dispatch(now);
    }

    /// Route what MCP and its servers' runs asked of the loop, as the loop's dispatcher does.
    fn dispatch(&mut self, now: Instant) {
        while let Some(effect) = self.runs.effects.pop() {
            match effect {
                Effect::ServiceEvent(event) => on_run_event(self, event, now),
                Effect::SessionInfo { rid } => self.infos.push(rid),
                other => panic!("MCP's servers asked for {other:?}"),
            }
        }
    }

    fn server_exits(&mut self, run: RunId, status: i32, now: Instant) {
        let end = ended(status);
        self.runs.runner.pipes.push(RunEvent::Ended { run, end });
        self.pump(now);
    }

    /// The last run started.
    fn last_run(&self) -> RunId {
        *self
            .runs
            .runner
            .started
            .last()
            .expect("a server was started")
    }

    /// Fire the MCP timers due by `at`.
    fn fire(&mut self, at: Instant) {
        for timer in self.runs.asker.due(at) {
            if let WorkTimer::Mcp(name) = timer {
                on_timer(self, &name, at);
            }
        }
        self.dispatch(at);
    }

    /// The status of server `name` as the banner reads it.
    fn status(&self, name: &str) -> Value {
        let all = status(&self.mcp);
        all.as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// The error of server `name`, which must be reported failed.
    fn failure(&self, name: &str) -> String {
        let status = self.status(name);
        assert_eq!(status["status"], "failed", "{status}");
        status["error"].as_str().unwrap_or_default().to_string()
    }

    /// The `status.update` texts said so far, and forget them.
    fn told(&mut self) -> Vec<String> {
        self.runs
            .events()
            .into_iter()
            .filter(|(kind, _)| kind == "status.update")
            .map(|(_, p)| p["text"].as_str().unwrap_or("").to_string())
            .collect()
    }

    fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .runs
            .tools
            .set
            .tools()
            .map(|t| t.name().to_string())
            .filter(|n| n.starts_with("mcp__"))
            .collect();
        names.sort();
        names
    }

    /// Answer run `run`'s handshake: `initialize`, then `tools/list` in `pages`.
    fn handshake(&mut self, run: RunId, pages: &[Value], now: Instant) {
        let asked = self.written(run);
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0]["method"], "initialize");
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake", "version": "1"}});
        self.server_says(run, &[answer(&asked[0], init)], now);
        for (i, page) in pages.iter().enumerate() {
            let asked = self.written(run);
            let list = asked.iter().find(|m| m["method"] == "tools/list");
            let list = list.unwrap_or_else(|| panic!("no tools/list for page {i}: {asked:?}"));
            if i == 0 {
                assert!(
                    asked
                        .iter()
                        .any(|m| m["method"] == "notifications/initialized")
                );
                assert!(list["params"].get("cursor").is_none(), "{list}");
            } else {
                assert_eq!(list["params"]["cursor"], format!("page{i}"), "{list}");
            }
            self.server_says(run, &[answer(list, page.clone())], now);
        }
    }
}

/// A gateway with stdio server `name` connected, offering `tools`: it, the server's run, and
/// the time it started.
fn connected(name: &str, tools: &[&str]) -> (Fake, RunId, Instant) {
    let mut f = Fake::new(&stdio_config(&[name]));
    let t0 = f.t0();
    pump(&mut f, t0);
    let run = f.last_run();
    let listed: Vec<Value> = tools.iter().map(|t| tool(t)).collect();
    f.handshake(run, &[json!({ "tools": listed })], t0);
    (f, run, t0)
}

fn answer(request: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": request["id"], "result": result})
}

fn tool(name: &str) -> Value {
    json!({"name": name, "inputSchema": {"type": "object", "properties": {}}})
}

fn stdio_config(names: &[&str]) -> String {
    let mut yaml = String::from("mcp_servers:\n");
    for n in names {
        yaml.push_str(&format!(
            "  {n}:\n    command: fake-{n}\n    connect_timeout: 5\n"
        ));
    }
    yaml
}

impl RunOwners for Fake {
    fn tools(&mut self) -> &mut Tools {
        self.runs.tools()
    }
    fn runner(&mut self) -> &mut dyn RunControl {
        self.runs.runner()
    }
    fn watch_run(&mut self, run: RunId) -> std::io::Result<()> {
        self.runs.watch_run(run)
    }
    fn unwatch_run(&mut self, closed: Closed) {
        self.runs.unwatch_run(closed)
    }
    fn set_timer(&mut self, at: Instant, timer: WorkTimer) {
        self.runs.set_timer(at, timer)
    }
    fn emit(&mut self, rid: &str, kind: &str, payload: Value) {
        self.runs.emit(rid, kind, payload)
    }
    fn outbox(&mut self) -> &mut dyn Outbox {
        self.runs.outbox()
    }
    fn paused(&self) -> bool {
        self.runs.paused()
    }
    fn shutting_down(&self) -> bool {
        self.runs.shutting_down()
    }
    fn has_session(&self, rid: &str) -> bool {
        self.runs.has_session(rid)
    }
    fn effects(&mut self) -> &mut crate::effects::Effects {
        self.runs.effects()
    }
}

impl McpOwners for Fake {
    fn mcp(&mut self) -> &mut Mcp {
        &mut self.mcp
    }
    fn home(&self) -> PathBuf {
        self.home.path().to_path_buf()
    }
    fn kill_grace(&self) -> Duration {
        Duration::from_secs(2)
    }
    fn session_open(&self) -> bool {
        !self.runs.sessions.is_empty()
    }
    fn sessions_idle(&self) -> Vec<(String, bool)> {
        self.runs
            .sessions
            .iter()
            .map(|r| (r.clone(), true))
            .collect()
    }
    fn sockets(&mut self) -> impl http::Sockets + '_ {
        NoSockets
    }
}

#[test]
fn a_stdio_server_is_initialised_listed_page_by_page_and_its_tools_offered() {
    let mut f = Fake::new(&stdio_config(&["fs"]));
    let t0 = f.t0();
    pump(&mut f, t0);
    assert_eq!(f.status("fs")["status"], "connecting");
    let run = f.last_run();
    let pages = [
        json!({"tools": [tool("read.file")], "nextCursor": "page1"}),
        json!({"tools": [tool("write")]}),
    ];
    f.handshake(run, &pages, t0);
    assert_eq!(f.tool_names(), ["mcp__fs__read_file", "mcp__fs__write"]);
    let status = f.status("fs");
    assert_eq!(
        (&status["status"], &status["tools"]),
        (&json!("connected"), &json!(2))
    );
    // The idle session's banner is redrawn.
    assert_eq!(f.infos, ["r1"]);
    // The connect deadline passing after the handshake changes nothing.
    f.fire(t0 + Duration::from_secs(6));
    assert_eq!(f.status("fs")["status"], "connected");
    assert!(f.runs.runner.stopped.is_empty());
}

#[test]
fn a_tool_with_an_empty_name_is_not_offered() {
    let mut f = Fake::new(&stdio_config(&["fs"]));
    let t0 = f.t0();
    pump(&mut f, t0);
    let run = f.last_run();
    f.handshake(
        run,
        &[json!({"tools": [tool(""), tool("  "), tool("ok")]})],
        t0,
    );
    assert_eq!(f.tool_names(), ["mcp__fs__ok"]);
    assert_eq!(f.status("fs")["tools"], json!(1));
}

#[test]
fn garbage_a_ping_and_an_answer_to_an_unknown_id_leave_the_server_working() {
    let (mut f, run, t0) = connected("fs", &["echo"]);
    f.runs.runner.pipes.push(RunEvent::Output {
        run,
        bytes: b"not json at all\n\n".to_vec(),
    });
    f.pump(t0);
    f.server_says(
        run,
        &[
            json!({"jsonrpc": "2.0", "id": 9999, "result": {}}),
            json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage"}),
        ],
        t0,
    );
    let said = f.written(run);
    assert_eq!(said.len(), 2, "{said:?}");
    assert_eq!(
        (&said[0]["id"], &said[0]["result"]),
        (&json!("p1"), &json!({}))
    );
    assert_eq!(
        (&said[1]["id"], &said[1]["error"]["code"]),
        (&json!(7), &json!(-32601))
    );
    assert_eq!(f.status("fs")["status"], "connected");
    assert_eq!(f.tool_names(), ["mcp__fs__echo"]);
    assert!(f.runs.runner.stopped.is_empty());
}

#[test]
fn a_server_that_exits_is_restarted_with_a_doubling_backoff_then_given_up() {
    let (mut f, mut run, t0) = connected("fs", &["echo"]);
    f.told();
    let mut now = t0;
    for restart in 1..=RESTARTS {
        f.server_exits(run, 1, now);
        let status = f.status("fs");
        assert_eq!(status["status"], "failed", "{status}");
        assert_eq!(status["error"], "exited (status 1)", "{status}");
        let wait = BACKOFF * 2u32.pow(restart - 1);
        let told = f.told();
        assert_eq!(
            told,
            [format!(
                "MCP server 'fs' exited (status 1); restarting in {}s",
                wait.as_secs()
            )]
        );
        // Not before the backoff is over.
        f.fire(now + wait - Duration::from_millis(1));
        assert_eq!(f.last_run(), run, "restart {restart} came early");
        now += wait;
        f.fire(now);
        assert_ne!(f.last_run(), run, "restart {restart} did not come");
        run = f.last_run();
        assert_eq!(f.written(run)[0]["method"], "initialize");
    }
    f.server_exits(run, 1, now);
    assert_eq!(
        f.told(),
        [format!(
            "MCP server 'fs' exited (status 1); given up after {RESTARTS} restarts"
        )]
    );
    f.fire(now + Duration::from_secs(3600));
    assert_eq!(f.last_run(), run);
    assert_eq!(f.runs.runner.started.len() as u32, RESTARTS + 1);
}

#[test]
fn a_server_that_never_answers_initialize_is_stopped_at_its_connect_timeout() {
    let mut f = Fake::new(&stdio_config(&["mute"]));
    let t0 = f.t0();
    pump(&mut f, t0);
    let run = f.last_run();
    f.fire(t0 + Duration::from_millis(4999));
    assert!(f.runs.runner.stopped.is_empty());
    f.fire(t0 + Duration::from_secs(5));
    assert_eq!(f.runs.runner.stopped, [run]);
    f.server_exits(run, 143, t0 + Duration::from_secs(5));
    let why = f.failure("mute");
    assert!(
        why.contains("did not finish the handshake within 5s"),
        "{why}"
    );
}

#[test]
fn a_server_whose_tls_files_cannot_be_read_is_reported_once_and_not_restarted() {
    let yaml = "mcp_servers:\n  web:\n    url: https://127.0.0.1:9/mcp\n    \
                ssl_verify: /nonexistent/tuigw/ca.pem\n";
    let mut f = Fake::new(yaml);
    let t0 = f.t0();
    pump(&mut f, t0);
    let why = f.failure("web");
    assert!(why.starts_with("ssl_verify: cannot read"), "{why}");
    let told = f.told();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].ends_with("; it starts again on /reload-mcp"),
        "{told:?}"
    );
    // No restart was planned: an hour later nothing was tried again.
    let timers = f.runs.asker.due(t0 + Duration::from_secs(3600));
    assert!(
        !timers.iter().any(|t| matches!(t, WorkTimer::Mcp(_))),
        "{timers:?}"
    );
    assert_eq!(f.status("web")["status"], "failed");
}

#[test]
fn an_unreachable_http_server_is_restarted_with_backoff() {
    let yaml = "mcp_servers:\n  web:\n    url: http://127.0.0.1:9/mcp\n";
    let mut f = Fake::new(yaml);
    let t0 = f.t0();
    pump(&mut f, t0);
    assert_eq!(f.failure("web"), "cannot connect: no network in unit tests");
    let told = f.told();
    assert_eq!(
        told,
        ["MCP server 'web' cannot connect: no network in unit tests; restarting in 1s"]
    );
}

#[test]
fn a_reload_restarts_the_changed_and_the_failed_servers_only() {
    let mut f = Fake::new(&stdio_config(&["keep", "edit", "gone"]));
    let t0 = f.t0();
    pump(&mut f, t0);
    let started: Vec<RunId> = f.runs.runner.started.clone();
    assert_eq!(started.len(), 3);
    let run_of = |f: &Fake, name: &str| f.mcp.servers[name].run.unwrap();
    let (keep, edit, gone) = (run_of(&f, "keep"), run_of(&f, "edit"), run_of(&f, "gone"));
    for run in [keep, edit, gone] {
        f.handshake(run, &[json!({"tools": [tool("t")]})], t0);
    }
    let yaml = stdio_config(&["keep", "new"])
        + "  edit:\n    command: fake-edit\n    args: [--verbose]\n    connect_timeout: 5\n";
    std::fs::write(f.home.path().join("config.yaml"), yaml).unwrap();
    let rev = f.mcp.rev;
    let done = reload(&mut f, t0);
    assert_eq!(done.changed, ["edit", "gone", "new"]);
    assert_eq!(done.servers, 3);
    assert!(f.mcp.rev > rev);
    // The unchanged server keeps its process and tools; the others lose theirs.
    assert_eq!(run_of(&f, "keep"), keep);
    assert!(f.tool_names().contains(&"mcp__keep__t".to_string()));
    assert!(!f.tool_names().contains(&"mcp__gone__t".to_string()));
    assert!(!f.mcp.servers.contains_key("gone"));
    assert_ne!(run_of(&f, "edit"), edit);
    assert_eq!(f.mcp.servers["new"].phase, Phase::Connecting);
    // A reload with nothing changed touches nothing.
    assert!(reload(&mut f, t0).changed.is_empty());
    assert_eq!(run_of(&f, "keep"), keep);
}

#[test]
fn tls_files_stamp_follows_the_files_content() {
    let dir = ScratchDir::new("mcp-tls");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "one").unwrap();
    let tls = config::Tls {
        verify: config::Verify::Bundle(ca.clone()),
        client_cert: None,
    };
    let first = tls::files_stamp(&tls);
    assert_eq!(tls::files_stamp(&tls), first);
    std::fs::write(&ca, "two").unwrap();
    let second = tls::files_stamp(&tls);
    assert_ne!(second, first);
    std::fs::remove_file(&ca).unwrap();
    assert_ne!(tls::files_stamp(&tls), second);
}

#[test]
fn an_exit_is_told_with_its_signal_and_the_last_stderr_line_marked_as_such() {
    assert_eq!(exit_reason(1, ""), "exited (status 1)");
    assert_eq!(
        exit_reason(143, "Starting default (STDIO) server...\n"),
        "exited (status 143: killed by SIGTERM); its last stderr line: Starting default (STDIO) server..."
    );
    assert_eq!(
        exit_reason(2, "usage: srv DIR\n\n  \n"),
        "exited (status 2); its last stderr line: usage: srv DIR"
    );
    // Not a signal number: the status alone; control characters shown, not sent to the TUI.
    assert_eq!(exit_reason(250, ""), "exited (status 250)");
    assert_eq!(
        exit_reason(1, "bad\u{1b}[2J"),
        format!(
            "exited (status 1); its last stderr line: {}",
            crate::util::printable("bad\u{1b}[2J")
        )
    );
}
