//! `tui-gateway exec`, through the binary: one task (its answer, result record, `--json`
//! events, exit codes, approvals, timeouts, `--resume`), a tasks file (bad files refused whole,
//! a record per task in its own working directory, a summary, SIGINT and SIGKILL mid-run then
//! `--continue`), and the accounting columns every session row fills (exec's and the TUI's),
//! with the offline model and the OpenAI mock for cache, reasoning and cost figures.

use crate::common;
use crate::mockai;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use common::*;
use mockai::*;
use serde_json::{Value, json};

/// A prepared `tui-gateway exec` in a private home (and working directory).
pub(crate) struct Exec {
    pub(crate) home: TempHome,
}

impl Exec {
    pub(crate) fn new(tag: &str) -> Exec {
        Exec {
            home: TempHome::new(&format!("exec-{tag}")),
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.home.path
    }

    fn command(&self, args: &[&str]) -> Command {
        self.subcommand("exec", args)
    }

    /// `tui-gateway sessions ARGS` on this home, to its end.
    pub(crate) fn sessions(&self, args: &[&str]) -> Output {
        finish(
            self.subcommand("sessions", args)
                .spawn()
                .expect("spawn sessions"),
        )
    }

    pub(crate) fn subcommand(&self, sub: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        scrub_env(&mut cmd);
        cmd.arg(sub)
            .args(args)
            .current_dir(self.dir())
            .env("HERMES_HOME", self.dir())
            .env("HOME", self.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A user's Ctrl-C reaches exec: a SIGINT that whoever ran the tests ignores (a
        // background job's, nohup's) is not passed on, as a terminal would not pass it on.
        // SAFETY: between fork and exec only `signal`, which is async-signal-safe, runs.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        cmd
    }

    pub(crate) fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("spawn exec")
    }

    /// Runs to the end (killed and failed past the test deadline).
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[])
    }

    pub(crate) fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        finish(self.spawn(args, env))
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    pub(crate) fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.home.db_path()).unwrap()
    }
}

/// Ctrl-C, as a terminal sends it to `exec`.
pub(crate) fn sigint(child: &Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
}

/// Waits for `child` with a deadline; its output. Its pipes are read while it runs, so a
/// chatty `--json` never blocks on a full pipe.
pub(crate) fn finish(child: Child) -> Output {
    // Unreaped until the waiter returns, so the pid cannot be reused meanwhile.
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (ended, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || ended.send(child.wait_with_output().unwrap()));
    match output.recv_timeout(T) {
        Ok(out) => out,
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let out = output.recv().unwrap();
            panic!("exec did not end: {}", text(&out.stderr));
        }
    }
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The record `exec PROMPT` prints last on stderr (or stdout with `--json`).
pub(crate) fn record_in(stream: &[u8]) -> Value {
    let t = text(stream);
    let line = t
        .lines()
        .rev()
        .find(|l| l.contains("\"exec.result\""))
        .unwrap_or_else(|| panic!("no result record in: {t}"));
    serde_json::from_str(line).unwrap()
}

pub(crate) fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub(crate) fn summary_in(stdout: &[u8]) -> Value {
    let t = text(stdout);
    let line = t
        .lines()
        .find(|l| l.contains("\"exec.summary\""))
        .unwrap_or_else(|| panic!("no summary in: {t}"));
    serde_json::from_str(line).unwrap()
}

pub(crate) fn tasks_file(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

pub(crate) fn wait_records(path: &Path, at_least: usize) -> Vec<Value> {
    let deadline = Instant::now() + T;
    loop {
        let r = records(path);
        if r.len() >= at_least {
            return r;
        }
        assert!(Instant::now() < deadline, "only {} records", r.len());
        std::thread::sleep(ms(5));
    }
}

/// A `sleep` command whose every process (supervisor, shell, sleep) carries a marker.
pub(crate) fn marked_sleep(secs: u64) -> (String, String) {
    let marker = common::procfs::marker();
    (format!("$ sleep {secs}.{marker}"), marker)
}

pub(crate) fn assert_nothing_left(marker: &str) {
    common::procfs::assert_none_left(marker, T, "exec's tools");
}

#[test]
fn help_lists_every_flag_with_env_names_and_defaults() {
    let e = Exec::new("help");
    let out = e.run(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    assert!(help.starts_with("usage"), "{help}");
    for flag in [
        "--json",
        "--resume",
        "--cwd",
        "--approve",
        "--timeout",
        "--tasks",
        "--parallel",
        "--results",
        "--workdir",
        "--continue",
        "env TUI_GATEWAY_EXEC_APPROVE",
        "default ask-fails",
        "env TUI_GATEWAY_EXEC_TIMEOUT_S",
        "default 3600",
        "env TUI_GATEWAY_EXEC_PARALLEL",
        "default 8",
        "env TUI_GATEWAY_EXEC_WORKDIR",
        "exit codes",
        // The gateway's own knobs apply too.
        "env TUI_GATEWAY_FRAME_LIMIT",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn one_task_prints_its_answer_and_a_result_record() {
    let e = Exec::new("one");
    let out = e.run(&["say", "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "(offline model) You said: say hello\n");
    let r = record_in(&out.stderr);
    assert_eq!(r["status"], "done", "{r}");
    assert_eq!(r["exit_code"], 0);
    assert_eq!(
        (r["turns"].as_u64(), r["model_calls"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(r["tool_calls"], 0);
    // The offline model counts words: 2 in, 6 out.
    assert_eq!(r["tokens"]["input"], 2, "{r}");
    assert_eq!(r["tokens"]["output"], 6, "{r}");
    // The offline model says what it cost: nothing.
    assert_eq!(
        (&r["cost_usd"], &r["cost_status"]),
        (&json!(0.0), &json!("actual")),
        "{r}"
    );
    for key in ["wall_ms", "model_ms", "tool_ms", "overhead_ms", "cpu_ms"] {
        assert!(r[key].as_f64().is_some(), "{key}: {r}");
    }
    let stored = r["session_id"].as_str().unwrap().to_string();
    let (source, reason, messages): (String, String, i64) = e
        .db()
        .query_row(
            "SELECT source, end_reason, message_count FROM sessions WHERE id = ?1",
            [&stored],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert_eq!((source.as_str(), messages), ("exec", 2));
    assert_eq!(reason, "tui_close");

    // `-`: the prompt is stdin.
    let mut child = e.command(&["-"]).stdin(Stdio::piped()).spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from stdin")
        .unwrap();
    let out = finish(child);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "(offline model) You said: from stdin\n");
}

#[test]
fn json_prints_the_events_the_tui_gets_then_the_record() {
    let e = Exec::new("json");
    let out = e.run(&["--json", "$ echo out-of-tool"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("no {k}: {kinds:?}"))
    };
    assert_eq!(kinds[0], "gateway.ready");
    assert!(at("session.info") < at("tool.start"));
    assert!(at("tool.start") < at("tool.complete"));
    assert!(at("tool.complete") < at("message.complete"));
    assert_eq!(*kinds.last().unwrap(), "exec.result");
    let done = &lines[at("tool.complete")];
    assert_eq!(
        done["payload"]["result"]["output"], "out-of-tool\n",
        "{done}"
    );
    let r = lines.last().unwrap();
    assert_eq!(
        (r["tool_calls"].as_u64(), r["model_calls"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(r["tool_ms"].as_f64().unwrap() > 0.0, "{r}");
    // The answer is in the record, not printed apart.
    assert!(r["answer"].as_str().unwrap().contains("out-of-tool"), "{r}");
}

#[test]
fn resume_continues_a_stored_session_and_counts_only_the_new_task() {
    let e = Exec::new("resume");
    let first = record_in(&e.run(&["one two three"]).stderr);
    let stored = first["session_id"].as_str().unwrap();
    let out = e.run(&["--resume", stored, "four"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let second = record_in(&out.stderr);
    assert_eq!(second["session_id"], stored);
    assert_eq!(second["model_calls"], 1, "{second}");
    // The model read the whole conversation (3 + 7 + 1 words); only this task is counted.
    assert_eq!(second["tokens"]["input"], 11, "{second}");
    let (messages, calls): (i64, i64) = e
        .db()
        .query_row(
            "SELECT message_count, api_call_count FROM sessions WHERE id = ?1",
            [stored],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((messages, calls), (4, 2));
}

#[test]
fn exit_codes_say_what_happened() {
    let e = Exec::new("codes");
    // Usage errors: 2, with a reason.
    for args in [
        &[][..],
        &["--parallel", "0", "x"],
        &["--approve", "perhaps", "x"],
        &["--timeout", "soon", "x"],
        &["--frame-limit", "1", "x"],
        &["--tasks", "missing.jsonl"],
    ] {
        let out = e.run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stderr).contains("error"), "{args:?}");
    }
    // Refused by the gateway: 4.
    let out = e.run(&["--resume", "20200101_000000_000000", "hi"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(r["status"], "refused");
    assert!(r["error"].as_str().unwrap().contains("not found"), "{r}");
    let out = e.run(&["--cwd", "no-such-dir", "hi"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        record_in(&out.stderr)["error"]
            .as_str()
            .unwrap()
            .contains("not a directory")
    );
    // Timeout: 5, and the tool is gone.
    let (sleep, marker) = marked_sleep(30);
    let _reaper = common::procfs::Reaper(marker.clone());
    let out = e.run(&["--timeout", "0.3", &sleep]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(r["status"], "timeout", "{r}");
    assert!(r["error"].as_str().unwrap().contains("timed out"), "{r}");
    assert_nothing_left(&marker);
    // A model error: 1.
    let mock = MockAi::script(vec![Reply::status(
        400,
        r#"{"error":{"message":"mock says no"}}"#,
    )]);
    let out = e.run_env(
        &["--provider", "openai", "--model-retries", "0", "hi"],
        &[
            ("OPENAI_BASE_URL", &mock.base_url()),
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_MODEL", "mock-model"),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(r["status"], "model_error", "{r}");
    assert!(r["error"].as_str().unwrap().contains("mock says no"), "{r}");
}

/// The record's times add up: the model's time is what the model took (a slow offline model
/// here), the overhead is the wall time in neither the model nor a tool.
#[test]
fn the_record_splits_wall_time_into_model_tool_and_gateway_overhead() {
    let e = Exec::new("times");
    let out = e.run_env(&["$ sleep 0.2"], &[("TUI_GATEWAY_OFFLINE_DELAY_MS", "20")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    let (wall, model, tool, overhead) =
        (f("wall_ms"), f("model_ms"), f("tool_ms"), f("overhead_ms"));
    // Two model calls of a few words at 20 ms a word; a 0.2 s tool.
    assert!(model >= 40.0, "model_ms {model}: {r}");
    assert!(tool >= 200.0, "tool_ms {tool}: {r}");
    assert!(overhead >= 0.0 && overhead < wall, "{r}");
    assert!(
        (wall - model - tool - overhead).abs() < 1.0,
        "wall = model + tool + overhead: {r}"
    );
}

#[test]
fn sigint_interrupts_one_task_with_exit_3_and_its_record() {
    let e = Exec::new("sigint-one");
    let (sleep, marker) = marked_sleep(30);
    let _reaper = common::procfs::Reaper(marker.clone());
    let child = e.spawn(&[&sleep], &[]);
    common::procfs::wait_for_proc("sleep", &marker, T);
    sigint(&child);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(r["status"], "interrupted", "{r}");
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_nothing_left(&marker);
    // The session is stored and ended.
    let stored = r["session_id"].as_str().unwrap().to_string();
    let ended: Option<f64> = e
        .db()
        .query_row(
            "SELECT ended_at FROM sessions WHERE id = ?1",
            [&stored],
            |row| row.get(0),
        )
        .unwrap();
    assert!(ended.is_some(), "{r}");
}

#[test]
fn a_gateway_that_cannot_start_exits_6() {
    let e = Exec::new("nostart");
    // state.db cannot be opened: a directory stands where it goes.
    std::fs::create_dir_all(e.home.db_path().join("x")).unwrap();
    let out = e.run(&["hi"]);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot start the gateway"));
}

/// A dangerous but harmless command: `rm -rf` of a scratch directory of the test.
fn scratch(e: &Exec, name: &str) -> (PathBuf, String) {
    let dir = e.dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), "x").unwrap();
    let prompt = format!("$ rm -rf {}", dir.display());
    (dir, prompt)
}

#[test]
fn approvals_follow_the_flag_and_never_wait() {
    let e = Exec::new("approve");
    for (mode, approved, ran) in [("never", 0, false), ("always", 1, true)] {
        let (dir, prompt) = scratch(&e, mode);
        let out = e.run(&["--approve", mode, &prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let r = record_in(&out.stderr);
        assert_eq!(
            r["approvals"],
            json!({"asked": 1, "approved": approved, "denied": 1 - approved}),
            "{mode}: {r}"
        );
        assert_eq!(!dir.exists(), ran, "{mode}: the command ran? {r}");
    }

    // The default is ask-fails: refused, exit 4, the command never ran.
    let (dir, prompt) = scratch(&e, "keep-fails");
    let out = e.run(&[&prompt]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(r["status"], "refused", "{r}");
    assert!(r["error"].as_str().unwrap().contains("ask-fails"), "{r}");
    assert!(dir.exists());
    // And through the environment.
    let (dir, prompt) = scratch(&e, "gone-env");
    let out = e.run_env(&[&prompt], &[("TUI_GATEWAY_EXEC_APPROVE", "always")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.exists());
}

#[test]
fn bad_task_files_are_refused_whole_with_every_bad_line_named() {
    let e = Exec::new("badfile");
    let file = e.write(
        "bad.jsonl",
        "{\"id\":\"ok\",\"prompt\":\"fine\"}\n{not json\n{\"id\":\"p\"}\n{\"prompt\":\"no id\"}\n{\"id\":\"ok\",\"prompt\":\"dup\"}\n{\"id\":\"t\",\"prompt\":\"x\",\"timeout\":\"soon\"}\n[1,2]\n{\"id\":\"e\",\"prompt\":\"  \"}\n",
    );
    let out = e.run(&["--tasks", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    for want in [
        "line 2: invalid JSON",
        "line 3: missing \"prompt\"",
        "line 4: missing \"id\"",
        "line 5: duplicate id \"ok\"",
        "line 6: \"timeout\"",
        "line 7: not a JSON object",
        "line 8: \"prompt\" must be a non-empty string",
        "nothing was run",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    assert!(!e.dir().join("bad.results.jsonl").exists());
    assert!(
        !e.home.db_path().exists(),
        "the gateway started for a bad file"
    );
    let empty = e.write("empty.jsonl", "\n\n");
    let out = e.run(&["--tasks", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no tasks"));
}

#[test]
fn tasks_run_in_parallel_each_in_its_own_directory_with_a_record_each() {
    let e = Exec::new("tasks");
    let own = e.dir().join("own");
    std::fs::create_dir_all(&own).unwrap();
    let mut lines: Vec<Value> = (0..6)
        .map(|i| json!({"id": format!("t{i}"), "prompt": "$ pwd"}))
        .collect();
    lines.push(json!({"id": "own", "prompt": "$ pwd", "cwd": own}));
    let (sleep, marker) = marked_sleep(30);
    let _reaper = common::procfs::Reaper(marker.clone());
    lines.push(json!({"id": "slow", "prompt": sleep, "timeout": 0.3}));
    lines.push(json!({"id": 9, "prompt": "plain words"}));
    let file = e.write("bench.jsonl", &tasks_file(&lines));
    let out = e.run(&["--tasks", file.to_str().unwrap(), "--parallel", "3"]);
    // One task timed out: 7.
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("tasks/s"), "a progress bar on a pipe: {err}");
    let recs = records(&e.dir().join("bench.results.jsonl"));
    assert_eq!(recs.len(), lines.len());
    let by_id = |id: &str| {
        recs.iter()
            .find(|r| r["task_id"] == id)
            .unwrap_or_else(|| panic!("{id}"))
    };
    let workdir = e.dir().join("bench.results.work");
    for i in 0..6 {
        let r = by_id(&format!("t{i}"));
        assert_eq!(r["status"], "done", "{r}");
        let here = workdir.join(format!("t{i}"));
        assert!(
            r["answer"]
                .as_str()
                .unwrap()
                .contains(&here.to_string_lossy().to_string()),
            "{r}"
        );
    }
    assert!(
        by_id("own")["answer"]
            .as_str()
            .unwrap()
            .contains(&own.to_string_lossy().to_string())
    );
    assert_eq!(by_id("slow")["status"], "timeout");
    assert_eq!(by_id("9")["status"], "done");
    let s = summary_in(&out.stdout);
    assert_eq!(
        (s["tasks"].as_u64(), s["ran"].as_u64()),
        (Some(9), Some(9)),
        "{s}"
    );
    assert_eq!(
        (s["done"].as_u64(), s["timeout"].as_u64()),
        (Some(8), Some(1)),
        "{s}"
    );
    assert_eq!(s["tool_calls"], 8, "{s}");
    assert!(
        s["tasks_per_s"].as_f64().unwrap() > 0.0 && s["cpu_ms_per_task"].as_f64().unwrap() > 0.0
    );
    // Every session is stored, ended, distinct.
    let n: i64 = e
        .db()
        .query_row("SELECT COUNT(DISTINCT id) FROM sessions WHERE source = 'exec' AND ended_at IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 9);
    assert_nothing_left(&marker);
    // A second run does not overwrite the records.
    let again = e.run(&["--tasks", file.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("--continue"));
    assert_eq!(
        records(&e.dir().join("bench.results.jsonl")).len(),
        lines.len()
    );
}

/// `n` tasks sleeping 0.1–0.3 s, every process carrying `marker`.
fn sleepy_tasks(n: usize, marker: &str) -> String {
    let lines: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("s{i}"), "prompt": format!("$ sleep 0.{}{marker}", 1 + i % 3)}))
        .collect();
    tasks_file(&lines)
}

#[test]
fn sigint_keeps_finished_records_marks_the_rest_and_continue_finishes_them() {
    let e = Exec::new("sigint");
    let marker = common::procfs::marker();
    let _reaper = common::procfs::Reaper(marker.clone());
    let file = e.write("s.jsonl", &sleepy_tasks(12, &marker));
    let results = e.dir().join("s.results.jsonl");
    let child = e.spawn(&["--tasks", file.to_str().unwrap(), "--parallel", "2"], &[]);
    wait_records(&results, 2);
    sigint(&child);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let s = summary_in(&out.stdout);
    let recs = records(&results);
    let count = |st: &str| recs.iter().filter(|r| r["status"] == st).count();
    assert!(count("done") >= 2, "{recs:?}");
    assert!(count("interrupted") >= 1, "{recs:?}");
    assert_eq!(count("done") + count("interrupted"), recs.len());
    assert_eq!(
        s["not_started"].as_u64().unwrap() as usize + recs.len(),
        12,
        "{s}"
    );
    assert_nothing_left(&marker);

    let out = e.run(&[
        "--tasks",
        file.to_str().unwrap(),
        "--parallel",
        "4",
        "--continue",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let s = summary_in(&out.stdout);
    assert_eq!(
        s["skipped"].as_u64().unwrap() as usize,
        count("done"),
        "{s}"
    );
    let done: std::collections::HashSet<String> = records(&results)
        .iter()
        .filter(|r| r["status"] == "done")
        .map(|r| r["task_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(done.len(), 12);
    assert_eq!(
        records(&results)
            .iter()
            .filter(|r| r["status"] == "done")
            .count(),
        12,
        "a task ran twice"
    );
}

#[test]
fn a_kill_mid_run_then_continue_skips_the_finished_tasks() {
    let e = Exec::new("kill");
    let marker = common::procfs::marker();
    let _reaper = common::procfs::Reaper(marker.clone());
    let file = e.write("k.jsonl", &sleepy_tasks(10, &marker));
    let results = e.dir().join("k.results.jsonl");
    let mut child = e.spawn(&["--tasks", file.to_str().unwrap(), "--parallel", "2"], &[]);
    let before = wait_records(&results, 3).len();
    child.kill().unwrap();
    let _ = child.wait();
    let kept = records(&results);
    assert!(
        kept.len() >= before && kept.iter().all(|r| r["status"] == "done"),
        "{kept:?}"
    );
    let out = e.run(&["--tasks", file.to_str().unwrap(), "--continue"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let s = summary_in(&out.stdout);
    assert_eq!(s["skipped"].as_u64().unwrap() as usize, kept.len(), "{s}");
    assert_eq!(s["ran"].as_u64().unwrap() as usize, 10 - kept.len(), "{s}");
    let all = records(&results);
    assert_eq!(all.len(), 10, "{all:?}");
    let ids: std::collections::HashSet<&str> =
        all.iter().map(|r| r["task_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 10);
    assert_nothing_left(&marker);
}

#[test]
fn a_progress_bar_shows_on_a_terminal() {
    use std::io::Read;
    let e = Exec::new("progress");
    let lines: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("p{i}"), "prompt": "hello"}))
        .collect();
    let file = e.write("p.jsonl", &tasks_file(&lines));
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let mut cmd = e.command(&["--tasks", file.to_str().unwrap()]);
    cmd.stderr(Stdio::from(pty.slave));
    let child = cmd.spawn().unwrap();
    drop(cmd);
    let mut master = std::fs::File::from(pty.master);
    let (chunks, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // Ends when the last holder of the terminal closes it (EIO) or the test is gone.
        while let Ok(n @ 1..) = master.read(&mut buf) {
            if chunks.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let out = finish(child);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let mut terminal = Vec::new();
    let deadline = Instant::now() + T;
    while !text(&terminal).contains("tasks/s\r\n") && Instant::now() < deadline {
        match seen.recv_timeout(ms(50)) {
            Ok(chunk) => terminal.extend(chunk),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    let terminal = text(&terminal);
    assert!(
        terminal.contains("] 3/3  done 3  failed 0"),
        "no finished bar: {terminal:?}"
    );
    assert!(
        terminal.contains("\x1b[K"),
        "redrawn in place: {terminal:?}"
    );
}

#[test]
fn continue_cuts_off_a_record_cut_short_and_reruns_its_task() {
    let e = Exec::new("cut");
    let lines: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|id| json!({"id": id, "prompt": "hello"}))
        .collect();
    let file = e.write("c.jsonl", &tasks_file(&lines));
    // As a SIGKILL mid-write leaves it: one whole record, then half of the next.
    let whole = json!({"type": "exec.result", "task_id": "a", "status": "done"});
    e.write(
        "c.results.jsonl",
        &format!("{whole}\n{{\"type\":\"exec.result\",\"task_id\":\"b\",\"sta"),
    );
    let out = e.run(&["--tasks", file.to_str().unwrap(), "--continue"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let s = summary_in(&out.stdout);
    assert_eq!(
        (s["skipped"].as_u64(), s["ran"].as_u64()),
        (Some(1), Some(2)),
        "{s}"
    );
    let recs = records(&e.dir().join("c.results.jsonl"));
    let ids: Vec<&str> = recs
        .iter()
        .map(|r| r["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "every whole line parses: {recs:?}");
    assert!(ids.contains(&"b") && ids.contains(&"c"), "{ids:?}");
    // Repaired: the cut-short text is gone from the file, every line of it a record.
    let after = std::fs::read_to_string(e.dir().join("c.results.jsonl")).unwrap();
    assert_eq!(after.lines().count(), 3, "{after}");
    assert!(after.starts_with(&format!("{whole}\n{{")), "{after}");
}

/// A results file with a line that is not a record anywhere but at its cut-short end (a
/// file edited or mixed up, not a kill) is refused on `--continue`, the line named, nothing run.
#[test]
fn continue_refuses_a_results_file_with_a_bad_line_naming_it() {
    let e = Exec::new("badresults");
    let lines: Vec<Value> = ["a", "b"]
        .iter()
        .map(|id| json!({"id": id, "prompt": "hello"}))
        .collect();
    let file = e.write("t.jsonl", &tasks_file(&lines));
    let whole = json!({"type": "exec.result", "task_id": "a", "status": "done"});
    let results = format!("{whole}\n{{\"type\":\"exec.result\",\"task_id\":\"b\",\"sta\n{whole}\n");
    let path = e.write("t.results.jsonl", &results);
    let out = e.run(&["--tasks", file.to_str().unwrap(), "--continue"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let want = format!("{}:2: not a result record of a task", path.display());
    assert!(err.contains(&want), "{err}");
    assert!(err.contains("nothing was run"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), results);
    assert!(!e.home.db_path().exists(), "the gateway started");
}

#[test]
fn a_provider_that_reports_no_price_leaves_the_cost_unknown() {
    let mock = MockAi::start(|_| Reply::Stream(Stream::new(text_events(&["fine"], "stop", None))));
    let e = Exec::new("noprice");
    let out = e.run_env(
        &["--provider", "openai", "hi"],
        &[
            ("OPENAI_BASE_URL", &mock.base_url()),
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_MODEL", "mock-model"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert!(r["cost_usd"].is_null(), "{r}");
    assert_eq!(r["cost_status"], "unknown", "{r}");
    let stored = r["session_id"].as_str().unwrap().to_string();
    let (estimated, actual, status, source): (Option<f64>, Option<f64>, String, String) = e
        .db()
        .query_row(
            "SELECT estimated_cost_usd, actual_cost_usd, cost_status, cost_source
             FROM sessions WHERE id = ?1",
            [&stored],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        (estimated, actual, status.as_str(), source.as_str()),
        (None, None, "unknown", "none")
    );
}

/// GPT-4.1 has a price in Hermes' table: 10,000 prompt tokens of which 8,000 cached, 200 out
/// are 2,000 × $2 + 8,000 × $0.50 + 200 × $8 per million = $0.0096, estimated.
#[test]
fn a_task_on_a_model_with_a_price_records_its_estimated_cost() {
    let usage = json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1700000000,
        "model": "gpt-4.1", "choices": [],
        "usage": {"prompt_tokens": 10_000, "completion_tokens": 200, "total_tokens": 10_200,
            "prompt_tokens_details": {"cached_tokens": 8_000}},
    })
    .to_string();
    let mock = MockAi::start(move |_| {
        let mut events = text_events(&["priced"], "stop", None);
        events.push(usage.clone());
        Reply::Stream(Stream::new(events))
    });
    let e = Exec::new("priced");
    let out = e.run_env(
        &["--provider", "openai", "hi"],
        &[
            ("OPENAI_BASE_URL", &mock.base_url()),
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_MODEL", "gpt-4.1"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    let cost = r["cost_usd"].as_f64().unwrap_or(f64::NAN);
    assert!((cost - 0.0096).abs() < 1e-9, "{r}");
    assert_eq!(r["cost_status"], "estimated", "{r}");
    let stored = r["session_id"].as_str().unwrap().to_string();
    type Row = (f64, Option<f64>, String, String, String);
    let row: Row = e
        .db()
        .query_row(
            "SELECT estimated_cost_usd, actual_cost_usd, cost_status, cost_source, pricing_version
             FROM sessions WHERE id = ?1",
            [&stored],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert!((row.0 - 0.0096).abs() < 1e-9, "{row:?}");
    assert_eq!(
        (row.1, row.2.as_str(), row.3.as_str(), row.4.as_str()),
        (
            None,
            "estimated",
            "official_docs_snapshot",
            "openai-pricing-2026-03-16"
        )
    );
}

#[test]
fn session_rows_fill_hermes_accounting_columns() {
    // A provider that reports cache, reasoning and cost figures (OpenAI and OpenRouter names).
    let usage = json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1700000000,
        "model": "mock-model", "choices": [],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 8},
            "completion_tokens_details": {"reasoning_tokens": 12}, "cost": 0.0042},
    })
    .to_string();
    let reply = move || {
        let mut events = text_events(&["all ", "good"], "stop", None);
        events.push(usage.clone());
        Reply::Stream(Stream::new(events))
    };
    let mock = MockAi::start(move |_| reply());
    let e = Exec::new("accounting");
    let env = [
        ("OPENAI_BASE_URL", mock.base_url()),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("OPENAI_MODEL", "mock-model".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = e.run_env(&["--provider", "openai", "hi"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(
        r["tokens"],
        json!({"input": 120, "output": 30, "cache_read": 100, "cache_write": 8, "reasoning": 12}),
        "{r}"
    );
    assert_eq!(
        (&r["cost_usd"], &r["cost_status"]),
        (&json!(0.0042), &json!("actual"))
    );
    let stored = r["session_id"].as_str().unwrap().to_string();
    let out = e.run_env(
        &["--provider", "openai", "--resume", &stored, "again"],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    type Row = (i64, i64, i64, i64, i64, i64, f64, String, String, String);
    let row: Row = e
        .db()
        .query_row(
            "SELECT api_call_count, input_tokens, output_tokens, cache_read_tokens,
                    cache_write_tokens, reasoning_tokens, estimated_cost_usd, cost_status,
                    cost_source, billing_provider
             FROM sessions WHERE id = ?1",
            [&stored],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                ))
            },
        )
        .unwrap();
    // Two tasks, the second resumed: the columns add up across both.
    assert_eq!(
        (row.0, row.1, row.2, row.3, row.4, row.5),
        (2, 240, 60, 200, 16, 24),
        "{row:?}"
    );
    assert!((row.6 - 0.0084).abs() < 1e-9, "{row:?}");
    let actual: f64 = e
        .db()
        .query_row(
            "SELECT actual_cost_usd FROM sessions WHERE id = ?1",
            [&stored],
            |r| r.get(0),
        )
        .unwrap();
    assert!((actual - 0.0084).abs() < 1e-9, "actual_cost_usd {actual}");
    assert_eq!(
        (row.7.as_str(), row.8.as_str(), row.9.as_str()),
        ("actual", "provider_cost_api", "openai-api")
    );
    let base_url: String = e
        .db()
        .query_row(
            "SELECT billing_base_url FROM sessions WHERE id = ?1",
            [&stored],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(base_url, mock.base_url());
    // Hermes' per-model usage: one row for the model and route, summed over both runs' calls.
    type UsageRow = (
        String,
        String,
        String,
        String,
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
        f64,
    );
    let usage: Vec<UsageRow> = {
        let db = e.db();
        let mut stmt = db
            .prepare(
                "SELECT model, billing_provider, billing_base_url, billing_mode, api_call_count,
                        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                        reasoning_tokens, estimated_cost_usd
                 FROM session_model_usage WHERE session_id = ?1",
            )
            .unwrap();
        stmt.query_map([&stored], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    };
    assert_eq!(usage.len(), 1, "{usage:?}");
    let u = &usage[0];
    assert_eq!(
        (u.1.as_str(), u.2.as_str(), u.3.as_str()),
        ("openai-api", mock.base_url().as_str(), ""),
        "{u:?}"
    );
    assert_eq!(
        (u.4, u.5, u.6, u.7, u.8, u.9),
        (2, 240, 60, 200, 16, 24),
        "{u:?}"
    );
    assert!((u.10 - 0.0084).abs() < 1e-9, "{u:?}");

    // A TUI session (serve) fills them too.
    let home = TempHome::new("exec-accounting-tui");
    let mut gw = Gateway::builder()
        .home(&home.path)
        .tag("accounting")
        .start();
    let s = gw.create_session(json!({}));
    gw.run_turn(&s.id, "$ echo hi");
    gw.close_stdin();
    assert_eq!(gw.wait_exit(secs(5)).code(), Some(0));
    let (calls, status): (i64, String) = gw
        .db()
        .query_row(
            "SELECT api_call_count, cost_status FROM sessions WHERE id = ?1",
            [&s.stored],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((calls, status.as_str()), (2, "actual"));
    let (provider, usage_calls): (String, i64) = gw
        .db()
        .query_row(
            "SELECT billing_provider, api_call_count FROM session_model_usage
             WHERE session_id = ?1",
            [&s.stored],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((provider.as_str(), usage_calls), ("offline", 2));
}

#[test]
fn resume_by_title_continues_that_session_and_an_unknown_title_is_refused() {
    let e = Exec::new("resume-title");
    // A session the TUI titled.
    let mut gw = Gateway::builder().home(e.dir()).tag("titled").start();
    let s = gw.create_session(json!({"title": "release notes"}));
    gw.run_turn(&s.id, "first draft");
    gw.close_stdin();
    assert_eq!(gw.wait_exit(secs(5)).code(), Some(0));

    let out = e.run(&["--resume", "release notes", "second draft"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(r["status"], "done", "{r}");
    assert_eq!(r["session_id"], s.stored.as_str(), "{r}");
    let users: Vec<String> = {
        let db = e.db();
        let mut stmt = db
            .prepare(
                "SELECT content FROM messages WHERE session_id = ?1 AND role = 'user' ORDER BY id",
            )
            .unwrap();
        stmt.query_map([&s.stored], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(users, ["first draft", "second draft"]);

    let out = e.run(&["--resume", "no such title", "hi"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(r["status"], "refused", "{r}");
    assert!(r["error"].as_str().unwrap().contains("not found"), "{r}");
}

#[test]
fn a_prompt_over_the_limit_is_refused_while_stdin_is_still_being_written() {
    /// `prompt.submit`'s limit, the one `exec` reads stdin up to.
    const LIMIT: usize = 1 << 20;
    let e = Exec::new("big-stdin");
    let mut child = e.command(&["-"]).stdin(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    // 64 times the limit: far more than exec may read before it refuses.
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 << 10];
        for _ in 0..(64 * LIMIT) / chunk.len() {
            input.write_all(&chunk)?;
        }
        Ok::<(), std::io::Error>(())
    });
    let out = finish(child);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("the prompt on stdin is longer than 1048576 bytes (1 MiB)"),
        "{said}"
    );
    // exec stopped reading and left while the writer still had data to send.
    let written = writer.join().unwrap();
    let refused = written.as_ref().map_err(std::io::Error::kind);
    assert_eq!(refused, Err(std::io::ErrorKind::BrokenPipe));
    // Words over the limit are refused the same way, before anything starts.
    let word = "y".repeat(100 << 10);
    let words: Vec<&str> = std::iter::repeat_n(word.as_str(), 11).collect();
    let out = e.run(&words);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("the prompt is longer than 1048576 bytes"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_delegating_task_counts_its_subagents() {
    let e = Exec::new("delegate");
    let prompt = r#"%delegate_task {"tasks": [{"goal": "$ echo one"}, {"goal": "$ echo two"}]}"#;
    let out = e.run(&[prompt]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    let subs = &r["subagents"];
    assert_eq!(subs["count"], 2, "{r}");
    // Each child: the goal, a terminal call, its report — two model calls of its own.
    assert_eq!(subs["model_calls"], 4, "{r}");
    assert!(subs["tokens"]["output"].as_u64().unwrap() > 0, "{r}");
    // The task's own figures are its session's: one delegating call and the report.
    assert_eq!(r["model_calls"], 2, "{r}");
    let children: i64 = e
        .db()
        .query_row(
            "SELECT count(*) FROM sessions WHERE parent_session_id = ?1 AND source = 'subagent'",
            [r["session_id"].as_str().unwrap()],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(children, 2);
}

/// Runs `cmd` (stdout and stderr to files in `dir`) to its end, with a deadline; its exit code,
/// stdout, stderr and peak resident memory in KiB — the program's own high-water mark
/// (`VmHWM`), sampled until it ends.
#[allow(clippy::zombie_processes, reason = "reaped by waitpid")]
fn run_measuring_memory(mut cmd: Command, dir: &Path) -> (Option<i32>, String, String, i64) {
    let (out, err) = (dir.join("measured.out"), dir.join("measured.err"));
    cmd.stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let child = cmd.spawn().expect("spawn exec");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // The high-water mark of the exec'd program's own memory, read while it runs: wait4's
    // ru_maxrss also counts the test process's pages the child shared before its exec.
    let mut peak_kib = 0;
    let ended = common::procfs::poll_until(std::time::Duration::from_secs(120), || {
        if let Some((_, hwm)) = common::procfs::rss_hwm_kib(pid as u32) {
            peak_kib = peak_kib.max(hwm as i64);
        }
        // SAFETY: waits (without blocking) for our own child; the pointer is to a local.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
    });
    if !ended {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        panic!(
            "exec did not end: {}",
            std::fs::read_to_string(&err).unwrap()
        );
    }
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    assert!(peak_kib > 0, "the run's memory was never read");
    (code, read(&out), read(&err), peak_kib)
}

/// A tasks file of a million lines (114 MB) streams: checked and dispatched a line at a time,
/// a shard's thousand tasks run, then `--continue` skips them all, each run in a few MiB —
/// far below the file, which reading it whole would hold (and its tasks several times over).
#[test]
fn a_million_line_tasks_file_streams_in_bounded_memory() {
    let e = Exec::new("million");
    let path = e.dir().join("big.jsonl");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..1_000_000 {
        let prompt =
            format!("hello there, this is task number {i} of a long benchmark file that streams");
        writeln!(
            w,
            "{}",
            json!({"id": format!("task-{i:07}"), "prompt": prompt})
        )
        .unwrap();
    }
    w.into_inner().unwrap().sync_all().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size > 100 << 20, "{size}");
    // Generous: the process itself is a few MiB; reading the file whole needs more than it.
    const BOUND_KIB: i64 = 64 << 10;
    let args = ["--tasks", path.to_str().unwrap(), "--shard", "0/1000"];
    let (code, stdout, stderr, rss) = run_measuring_memory(e.subcommand("exec", &args), e.dir());
    assert_eq!(code, Some(0), "{stderr}");
    let s = summary_in(stdout.as_bytes());
    let shard_tasks = s["tasks"].as_u64().unwrap();
    assert!((800..1200).contains(&shard_tasks), "{s}");
    assert_eq!(
        (s["ran"].as_u64(), s["done"].as_u64()),
        (Some(shard_tasks), Some(shard_tasks))
    );
    let results = e.dir().join("big.shard-0-of-1000.results.jsonl");
    assert_eq!(records(&results).len() as u64, shard_tasks);
    assert!(rss < BOUND_KIB, "peak RSS {rss} KiB for a {size}-byte file");
    // A continuation reads the results and the file again, a line at a time: nothing to run.
    let args = [&args[..], &["--continue"]].concat();
    let (code, stdout, stderr, rss) = run_measuring_memory(e.subcommand("exec", &args), e.dir());
    assert_eq!(code, Some(0), "{stderr}");
    let s = summary_in(stdout.as_bytes());
    assert_eq!(
        (s["skipped"].as_u64(), s["ran"].as_u64()),
        (Some(shard_tasks), Some(0)),
        "{s}"
    );
    assert!(rss < BOUND_KIB, "peak RSS {rss} KiB on --continue");
}
