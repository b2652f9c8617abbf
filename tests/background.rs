//! Background processes over the protocol through the binary: `terminal` with
//! `background: true` answers at once with the process's id and the command keeps running; the
//! `process` tool (`list`, `poll`, `log`, `wait`, `kill`, `write`, `submit`, `close`) in
//! Hermes' shapes; `notify_on_complete` starts a turn when it ends (queued behind a running
//! one); an interrupt leaves it running, `process.stop` and closing the session kill it, and
//! nothing survives the gateway's SIGTERM, stdin EOF or SIGKILL. Processes are found by a
//! marker in their command line, every wait is a poll with a deadline.

use crate::common;
use crate::mockai;
use crate::procs;

use common::*;
use mockai::*;
use procs::*;
use serde_json::{Value, json};

/// A gateway, a session, and a marker only this test's processes carry.
struct Bg {
    g: Gateway,
    sid: String,
    stored: String,
    m: String,
    _reaper: Reaper,
}

fn bg(tag: &str) -> Bg {
    bg_with(Gateway::builder().tag(tag).own_process_group())
}

fn bg_with(builder: GatewayBuilder) -> Bg {
    let m = marker();
    let _reaper = Reaper(format!(".{m}"));
    let mut g = builder.start();
    let s = g.create_session(json!({}));
    Bg {
        g,
        sid: s.id,
        stored: s.stored,
        m,
        _reaper,
    }
}

impl Bg {
    /// Call tool `name` with `args` in a whole turn (the offline model's `%NAME {JSON}`); the
    /// result the model reads.
    fn tool(&mut self, name: &str, args: Value) -> Value {
        let turn = self.g.run_turn(&self.sid, &format!("%{name} {args}"));
        turn.event("tool.complete")["payload"]["result"].clone()
    }

    fn process(&mut self, args: Value) -> Value {
        self.tool("process", args)
    }

    /// Start `command` in the background (`{m}` stands for the marker); its process id.
    fn start(&mut self, command: &str, notify: bool) -> String {
        let command = command.replace("{m}", &self.m);
        let r = self.tool(
            "terminal",
            json!({"command": command, "background": true, "notify_on_complete": notify}),
        );
        assert_eq!(r["output"], "Background process started", "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
        let id = r["session_id"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert!(id.starts_with("proc_"), "{r}");
        id.to_string()
    }

    /// The `sleep` of `sleep N.{m}` runs.
    fn wait_sleep(&self, n: u32) -> Proc {
        wait_for_proc("sleep", &format!("{n}.{}", self.m), T)
    }

    fn assert_none_left(&self, what: &str) {
        assert_none_left(&format!(".{}", self.m), T, what);
    }
}

/// The start answers the command's pid, as Hermes does: a live process of this machine whose
/// command line is the command's; `process list` says the same pid.
#[test]
fn a_background_start_answers_the_commands_live_pid() {
    let mut b = bg("bg-pid");
    let command = format!("sleep 302.{}", b.m);
    let r = b.tool("terminal", json!({"command": command, "background": true}));
    let pid = r["pid"].as_i64().unwrap_or_else(|| panic!("no pid: {r}"));
    let cmdline = proc_info(pid as i32).map(|p| p.cmdline);
    assert!(
        cmdline.as_deref().is_some_and(|c| c.contains(&command)),
        "pid {pid} is {cmdline:?}: {r}"
    );
    let list = b.process(json!({"action": "list"}));
    assert_eq!(list["processes"][0]["pid"], pid, "{list}");
    b.process(json!({"action": "kill", "session_id": r["session_id"]}));
    b.assert_none_left("the killed process");
}

#[test]
fn a_background_command_runs_on_past_its_call_and_an_interrupt() {
    let mut b = bg("bg-basic");
    let id = b.start("echo started; sleep 300.{m}", false);
    b.wait_sleep(300);
    // Still there after its call and its turn ended, and after another turn is interrupted.
    let start = submit(&mut b.g, &b.sid, &format!("$ sleep 301.{}", b.m));
    b.wait_sleep(301);
    b.g.call("session.interrupt", json!({"session_id": b.sid}));
    let t = b.g.finish_turn(&b.sid, start, T);
    assert_eq!(
        t.complete["payload"]["status"], "interrupted",
        "{:?}",
        t.complete
    );
    assert_none_left(&format!("301.{}", b.m), T, "the interrupted command");
    b.wait_sleep(300);

    let list = b.process(json!({"action": "list"}));
    let procs = list["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{list}");
    assert_eq!(procs[0]["session_id"], id.as_str(), "{list}");
    assert_eq!(procs[0]["status"], "running", "{list}");
    assert!(
        procs[0]["command"].as_str().unwrap().contains("sleep 300."),
        "{list}"
    );
    // The pid is the command's as this machine sees it (not its namespace's).
    let pid = procs[0]["pid"].as_i64().unwrap_or_else(|| panic!("{list}"));
    let cmdline = proc_info(pid as i32).map(|p| p.cmdline);
    assert!(
        cmdline
            .as_deref()
            .is_some_and(|c| c.contains(&format!("300.{}", b.m))),
        "pid {pid} is {cmdline:?}: {list}"
    );

    let mut poll = Value::Null;
    let seen = poll_until(T, || {
        poll = b.process(json!({"action": "poll", "session_id": id}));
        poll["output_preview"] == "started\n"
    });
    assert!(seen, "{poll}");
    assert_eq!(poll["status"], "running", "{poll}");
    let log = b.process(json!({"action": "log", "session_id": id}));
    assert_eq!(
        (&log["output"], &log["total_lines"], &log["showing"]),
        (&json!("started"), &json!(1), &json!("1 lines")),
        "{log}"
    );

    assert_eq!(poll["pid"], pid, "{poll}");

    // A wait the turn's interrupt ends says so, with the output so far; the process runs on.
    let start = submit(
        &mut b.g,
        &b.sid,
        &format!("%process {}", json!({"action": "wait", "session_id": id})),
    );
    b.g.wait_session_event(&b.sid, "tool.start", T);
    b.g.call("session.interrupt", json!({"session_id": b.sid}));
    let t = b.g.finish_turn(&b.sid, start, T);
    let w = &t.event("tool.complete")["payload"]["result"];
    assert_eq!(
        (&w["status"], &w["output"]),
        (&json!("interrupted"), &json!("started\n")),
        "{w}"
    );
    b.wait_sleep(300);

    let kill = b.process(json!({"action": "kill", "session_id": id}));
    assert_eq!(kill["status"], "killed", "{kill}");
    assert_eq!(kill["termination_source"], "process.kill", "{kill}");
    b.assert_none_left("after process kill");
    let poll = b.process(json!({"action": "poll", "session_id": id}));
    assert_eq!(
        (
            &poll["status"],
            &poll["exit_code"],
            &poll["completion_reason"]
        ),
        (&json!("exited"), &json!(-15), &json!("killed")),
        "{poll}"
    );
    let again = b.process(json!({"action": "kill", "session_id": id}));
    assert_eq!(again["status"], "already_exited", "{again}");
    // The tool rows are the results the model read.
    let rows = message_rows(&b.g.db_path(), &b.stored);
    assert!(
        rows.iter().any(|r| r.role == "tool"
            && r.tool_name.as_deref() == Some("process")
            && r.content.as_deref().unwrap_or("").contains("\"killed\"")),
        "{rows:#?}"
    );
}

#[test]
fn wait_ends_with_the_process_or_at_its_timeout_and_stop_kills_them_all() {
    let mut b = bg("bg-wait");
    let quick = b.start("sleep 0.2; echo done; exit 3", false);
    let w = b.process(json!({"action": "wait", "session_id": quick, "timeout": 60}));
    assert_eq!(
        (&w["status"], &w["exit_code"], &w["output"]),
        (&json!("exited"), &json!(3), &json!("done\n")),
        "{w}"
    );
    let slow = b.start("sleep 300.{m}", false);
    let other = b.start("sleep 302.{m}", false);
    let w = b.process(json!({"action": "wait", "session_id": slow, "timeout": 0.3}));
    assert_eq!(w["status"], "timeout", "{w}");
    assert_eq!(
        w["timeout_note"], "Waited 0.3s, process still running",
        "{w}"
    );
    b.wait_sleep(300);
    b.wait_sleep(302);
    assert_eq!(b.g.call("process.stop", json!({}))["killed"], 2);
    b.assert_none_left("after process.stop");
    let poll = b.process(json!({"action": "poll", "session_id": other}));
    assert_eq!(poll["termination_source"], "kill_all", "{poll}");
}

/// When the session ended, and why (`sessions.ended_at`, `end_reason`).
fn session_end(g: &Gateway, stored: &str) -> (Option<f64>, Option<String>) {
    g.db()
        .query_row(
            "SELECT ended_at, end_reason FROM sessions WHERE id = ?1",
            [stored],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or_else(|e| panic!("sessions row {stored}: {e}"))
}

#[test]
fn the_idle_reaper_spares_a_session_while_its_background_processes_run() {
    let mut b = bg_with(
        Gateway::builder()
            .tag("bg-ttl")
            .own_process_group()
            .env("HERMES_TUI_SESSION_TTL_S", "1"),
    );
    let id = b.start("sleep 300.{m}", false);
    b.wait_sleep(300);
    let idle = b.g.create_session(json!({}));
    b.g.run_turn(&idle.id, "nothing runs here");
    let reaped =
        |g: &Gateway, stored: &str| session_end(g, stored).1.as_deref() == Some("session_ttl");
    let gone = poll_until(secs(10), || {
        b.g.collect_for(ms(50));
        reaped(&b.g, &idle.stored)
    });
    assert!(
        gone,
        "the idle session was not reaped (TTL 1 s)\n{}",
        b.g.diag()
    );
    // The one with a running process is not, and its process runs on.
    assert_eq!(session_end(&b.g, &b.stored), (None, None));
    b.wait_sleep(300);
    let poll = b.process(json!({"action": "poll", "session_id": id}));
    assert_eq!(poll["status"], "running", "{poll}");
    // Once it ended, the session is idle like any.
    b.process(json!({"action": "kill", "session_id": id}));
    b.assert_none_left("after process kill");
    let gone = poll_until(secs(10), || {
        b.g.collect_for(ms(50));
        reaped(&b.g, &b.stored)
    });
    assert!(gone, "reaped once its process ended\n{}", b.g.diag());
}

#[test]
fn write_submit_and_close_reach_the_processs_stdin() {
    let mut b = bg("bg-stdin");
    let id = b.start(
        "while read -r line; do echo \"got:$line\"; done; echo eof",
        false,
    );
    let w = b.process(json!({"action": "write", "session_id": id, "data": "ab"}));
    assert_eq!(
        (&w["status"], &w["bytes_written"]),
        (&json!("ok"), &json!(2)),
        "{w}"
    );
    let s = b.process(json!({"action": "submit", "session_id": id, "data": "c"}));
    assert_eq!(
        (&s["status"], &s["bytes_written"]),
        (&json!("ok"), &json!(2)),
        "{s}"
    );
    let mut poll = Value::Null;
    let seen = poll_until(T, || {
        poll = b.process(json!({"action": "poll", "session_id": id}));
        poll["output_preview"] == "got:abc\n"
    });
    assert!(seen, "{poll}");
    let c = b.process(json!({"action": "close", "session_id": id}));
    assert_eq!(c["status"], "ok", "{c}");
    let w = b.process(json!({"action": "wait", "session_id": id}));
    assert_eq!(
        (&w["status"], &w["exit_code"], &w["output"]),
        (&json!("exited"), &json!(0), &json!("got:abc\neof\n")),
        "{w}"
    );
    let late = b.process(json!({"action": "submit", "session_id": id, "data": "x"}));
    assert_eq!(late["status"], "already_exited", "{late}");
}

#[test]
fn a_background_command_whose_shell_directory_is_gone_says_where_it_ran() {
    let mut b = bg("bg-gone-dir");
    let gone = std::env::temp_dir().join(format!("tuigw-gone-{}", b.m));
    std::fs::create_dir_all(&gone).unwrap();
    let r = b.tool(
        "terminal",
        json!({"command": format!("cd {}", gone.display())}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    std::fs::remove_dir_all(&gone).unwrap();
    let command = format!("pwd # .{}", b.m);
    let r = b.tool("terminal", json!({"command": command, "background": true}));
    let output = r["output"].as_str().unwrap_or_else(|| panic!("{r}"));
    let note = format!(
        "Background process started\n[the working directory {} no longer exists: this command ran in ",
        gone.display()
    );
    assert!(output.starts_with(&note), "{r}");
    let ran_in = output[note.len()..].trim_end_matches(']');
    let id = r["session_id"].as_str().unwrap().to_string();
    let w = b.process(json!({"action": "wait", "session_id": id}));
    assert_eq!(
        w["output"],
        format!("{ran_in}\n"),
        "it ran where it says: {w}"
    );
}

#[test]
fn output_past_the_cap_drops_the_oldest_and_log_says_so() {
    let mut b = bg("bg-cap");
    // 588,895 bytes, well past the 200,000 kept.
    let id = b.start("seq 1 100000", false);
    let w = b.process(json!({"action": "wait", "session_id": id}));
    assert_eq!(w["exit_code"], 0, "{w}");
    let log = b.process(json!({"action": "log", "session_id": id, "limit": 2}));
    assert_eq!(log["output"], "99999\n100000", "{log}");
    let dropped = log["dropped_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("{log}"));
    assert!(dropped >= 388_895, "{log}");
    let total = log["total_lines"].as_u64().unwrap();
    assert!(
        total < 40_000,
        "only the last 200,000 bytes are kept: {log}"
    );
    assert!(log["note"].as_str().unwrap().contains("dropped"), "{log}");
    let first = b.process(json!({"action": "log", "session_id": id, "offset": 1, "limit": 1}));
    assert_eq!(first["showing"], "1 lines", "{first}");
}

#[test]
fn bad_process_calls_are_errors_the_model_reads() {
    let mut b = bg("bg-bad");
    let cases = [
        (json!({}), "Unknown process action"),
        (
            json!({"action": "explode"}),
            "Unknown process action: explode",
        ),
        (json!({"action": "poll"}), "session_id is required for poll"),
        (
            json!({"action": "wait", "session_id": "proc_nope"}),
            "No process with ID proc_nope",
        ),
    ];
    for (args, want) in cases {
        let r = b.process(args.clone());
        assert!(
            r["error"].as_str().unwrap_or("").contains(want),
            "{args} -> {r}"
        );
    }
    let id = b.start("sleep 300.{m}", false);
    for args in [
        json!({"action": "log", "session_id": id, "offset": -1}),
        json!({"action": "log", "session_id": id, "limit": 0}),
        json!({"action": "wait", "session_id": id, "timeout": "soon"}),
    ] {
        let r = b.process(args.clone());
        assert!(
            r["error"]
                .as_str()
                .unwrap_or("")
                .contains("invalid arguments"),
            "{args} -> {r}"
        );
    }
    // Arguments that are not JSON at all.
    let turn = b.g.run_turn(&b.sid, "%process not json");
    let r = &turn.event("tool.complete")["payload"]["result"];
    assert!(
        r["error"].as_str().unwrap().contains("invalid arguments"),
        "{r}"
    );
    // Another session does not see this one's processes; closing this one kills them.
    let other = b.g.create_session(json!({}));
    let seen = b.g.run_turn(
        &other.id,
        &format!("%process {}", json!({"action": "poll", "session_id": id})),
    );
    assert_eq!(
        seen.event("tool.complete")["payload"]["result"]["status"],
        "not_found"
    );
    b.g.call("session.close", json!({"session_id": b.sid}));
    b.assert_none_left("after session.close");
}

#[test]
fn notify_on_complete_starts_a_turn_after_the_running_one() {
    let mut b = bg("bg-notify");
    let go = b.g.home.join(format!("go-{}", b.m));
    let done = b.g.home.join(format!("done-{}", b.m));
    let id = b.start(
        &format!(
            "while [ ! -e {} ]; do sleep 0.02; done; echo finished",
            go.display()
        ),
        true,
    );
    // A turn runs when the process ends: its notice waits for that turn.
    let start = submit(
        &mut b.g,
        &b.sid,
        &format!(
            "$ touch {}; while [ ! -e {} ]; do sleep 0.02; done",
            go.display(),
            done.display()
        ),
    );
    let status = b.g.wait_session_event(&b.sid, "status.update", T);
    assert_eq!(status["payload"]["kind"], "process", "{status}");
    let text = status["payload"]["text"].as_str().unwrap().to_string();
    assert_eq!(
        text,
        format!(
            "[IMPORTANT: Background process {id} completed normally (exit code 0).\nCommand: while [ ! -e {} ]; do sleep 0.02; done; echo finished\nOutput:\nfinished\n]",
            go.display()
        )
    );
    std::fs::write(&done, b"").unwrap();
    let first = b.g.finish_turn(&b.sid, start, T);
    assert_eq!(first.complete["payload"]["status"], "complete");
    // Then the notice is a turn of its own: message.start .. message.complete.
    let next = b.g.frames.len();
    let notified = b.g.finish_turn(&b.sid, next, T);
    assert_eq!(
        notified.events[0]["type"], "message.start",
        "{:?}",
        notified.events
    );
    assert!(
        notified.text.contains("[IMPORTANT: Background process"),
        "{}",
        notified.text
    );
    let rows = message_rows(&b.g.db_path(), &b.stored);
    let user = rows
        .iter()
        .rposition(|r| r.role == "user")
        .map(|i| &rows[i])
        .unwrap();
    assert_eq!(user.content.as_deref(), Some(text.as_str()), "{rows:#?}");
    assert_eq!(rows.last().unwrap().role, "assistant", "{rows:#?}");
}

#[test]
fn a_models_background_call_and_its_notice_round_trip_through_the_api() {
    let m = marker();
    let args = json!({"command": "echo api-bg", "background": true, "notify_on_complete": true});
    let call = vec![
        ev_role(),
        ev_tool_start(0, "call_bg", "terminal", &args.to_string()),
        ev_finish("tool_calls"),
        ev_usage(10, 5),
    ];
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(call)),
        Reply::text(&["started ", &m], (10, 2)),
        Reply::text(&["it ", "finished"], (10, 2)),
    ]);
    let builder = Gateway::builder()
        .tag("bg-api")
        .openai_mock(&mock.base_url());
    let mut b = bg_with(builder);
    let first = b.g.run_turn(&b.sid, "run it in the background");
    let result = &first.event("tool.complete")["payload"]["result"];
    assert_eq!(result["notify_on_complete"], true, "{result}");
    let id = result["session_id"].as_str().unwrap().to_string();
    let next = b.g.frames.len();
    let notified = b.g.finish_turn(&b.sid, next, T);
    assert_eq!(notified.text, "it finished");
    let reqs = mock.wait_requests(3, T);
    let last = reqs[2].last_user_text();
    assert!(
        last.starts_with(&format!(
            "[IMPORTANT: Background process {id} completed normally (exit code 0)."
        )),
        "{last}"
    );
    assert!(last.contains("Output:\napi-bg\n]"), "{last}");
    let rows = message_rows(&b.g.db_path(), &b.stored);
    let roles: Vec<&str> = rows.iter().map(|r| r.role.as_str()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ],
        "{rows:#?}"
    );
}

/// Start a background process (one of its children in a session of its own), then end the
/// gateway with `end`: nothing of it is left.
fn gateway_end_leaves_nothing(tag: &str, end: fn(&mut Gateway)) {
    let mut b = bg(tag);
    b.start("setsid sleep 301.{m} & sleep 300.{m}", false);
    b.wait_sleep(300);
    b.wait_sleep(301);
    end(&mut b.g);
    b.g.wait_exit(T);
    b.assert_none_left(tag);
}

#[test]
fn nothing_survives_a_sigterm_of_the_gateway() {
    gateway_end_leaves_nothing("bg-sigterm", |g| g.signal(libc::SIGTERM));
}

#[test]
fn nothing_survives_the_end_of_the_gateways_stdin() {
    gateway_end_leaves_nothing("bg-eof", |g| g.close_stdin());
}

#[test]
fn nothing_survives_a_sigkill_of_the_gateway() {
    gateway_end_leaves_nothing("bg-sigkill", |g| g.signal(libc::SIGKILL));
}
