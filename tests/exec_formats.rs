//! What harnesses read from `exec`, through the binary on a real state.db: ATIF trajectories
//! (`exec --atif DIR`, `sessions export ID --format atif`), every file validated by Harbor's own
//! models (`tests/atif/harbor-venv.sh` installs them, pinned, under target/), a compacted
//! session's and a delegating session's and its subagents' too; Hermes' JSONL export, read
//! back by Hermes' own `hermes_state.py`; `--output-format stream-json` in Claude Code's shape,
//! ending with a result line also when a signal stops the run; `--max-turns`; shards merged,
//! their session stores joined; `integrations/harbor`'s agent in a Harbor trial on a test
//! double of Harbor's environment.

use crate::common::*;
use crate::exec::*;
use crate::mockai::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The python of the venv with Harbor's models (made once per test run, cached across runs).
fn harbor_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| venv_python("tests/atif/harbor-venv.sh"))
}

/// Harbor's own validator (`harbor.utils.trajectory_validator.TrajectoryValidator`) on each
/// file, in one Python process: whether it accepts each, and its errors.
fn harbor_validates(paths: &[PathBuf]) -> Vec<(bool, String)> {
    let program = "import sys, json\n\
        from harbor.utils.trajectory_validator import TrajectoryValidator\n\
        for p in sys.argv[1:]:\n    v = TrajectoryValidator()\n    \
        print(json.dumps([v.validate(p), v.errors]), flush=True)\n";
    let child = Command::new(harbor_python())
        .arg("-c")
        .arg(program)
        .args(paths)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run Harbor's validator");
    let out = finish(child);
    assert!(
        out.status.success(),
        "Harbor's validator: {}",
        text(&out.stderr)
    );
    let said = json_lines(&out.stdout);
    assert_eq!(said.len(), paths.len(), "{}", text(&out.stdout));
    said.iter()
        .map(|v| (v[0] == true, v[1].to_string()))
        .collect()
}

/// The trajectories at `paths`, each of which Harbor's models accept.
fn valid_atifs(paths: &[PathBuf]) -> Vec<Value> {
    let verdicts = harbor_validates(paths);
    paths
        .iter()
        .zip(verdicts)
        .map(|(path, (ok, said))| {
            assert!(ok, "Harbor refuses {}: {said}", path.display());
            let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            assert_eq!(doc["schema_version"], "ATIF-v1.4", "{doc}");
            assert_eq!(doc["agent"]["name"], "tui-gateway", "{doc}");
            assert!(doc["agent"]["version"].is_string(), "{doc}");
            doc
        })
        .collect()
}

fn valid_atif(path: &Path) -> Value {
    valid_atifs(&[path.to_path_buf()]).remove(0)
}

fn sources(t: &Value) -> Vec<&str> {
    t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect()
}

fn json_lines(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Runs one task to `done` (approvals granted); its stored session id.
fn stored_run(e: &Exec, prompt: &str) -> String {
    let out = e.run(&["--approve", "always", prompt]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    record_in(&out.stderr)["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn row_i64(e: &Exec, column: &str, id: &str) -> i64 {
    e.db()
        .query_row(
            &format!("SELECT {column} FROM sessions WHERE id = ?1"),
            [id],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn sessions_export_gives_hermes_jsonl_and_a_trajectory_harbor_accepts() {
    let e = Exec::new("export");
    let id = stored_run(&e, "$ echo exported-marker");

    // Hermes' JSONL: one line, every column of the row and of each message row.
    let out = e.sessions(&["export", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 1, "{}", text(&out.stdout));
    let s = &lines[0];
    let columns = |table: &str| -> Vec<String> {
        let db = e.db();
        let mut stmt = db
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    for c in columns("sessions") {
        assert!(s.get(&c).is_some(), "sessions.{c} missing: {s}");
    }
    assert_eq!((&s["id"], &s["source"]), (&json!(id), &json!("exec")));
    let messages = s["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"], "{s}");
    for c in columns("messages") {
        assert!(messages[0].get(&c).is_some(), "messages.{c} missing: {s}");
    }
    // tool_calls decoded, as Hermes' get_messages returns them.
    let call = &messages[1]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "terminal", "{s}");
    assert_eq!(messages[2]["tool_call_id"], call["id"], "{s}");

    // ATIF, accepted by Harbor.
    let out = e.sessions(&["export", &id, "--format=atif"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let path = e.write("exported.json", &text(&out.stdout));
    let t = valid_atif(&path);
    assert_eq!(t["session_id"], json!(id));
    assert_eq!(t["agent"]["model_name"], "offline");
    assert_eq!(sources(&t), ["user", "agent", "agent"], "{t}");
    let acting = &t["steps"][1];
    let atif_call = &acting["tool_calls"][0];
    assert_eq!(atif_call["function_name"], "terminal", "{t}");
    assert_eq!(
        atif_call["arguments"]["command"], "echo exported-marker",
        "{t}"
    );
    let result = &acting["observation"]["results"][0];
    assert_eq!(result["source_call_id"], atif_call["tool_call_id"], "{t}");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("exported-marker"),
        "{t}"
    );
    assert_eq!(
        acting["metrics"]["completion_tokens"], messages[1]["token_count"],
        "{t}"
    );
    let f = &t["final_metrics"];
    assert_eq!(f["total_prompt_tokens"], row_i64(&e, "input_tokens", &id));
    assert_eq!(
        f["total_completion_tokens"],
        row_i64(&e, "output_tokens", &id)
    );
    assert_eq!(f["total_steps"], 3);
    assert_eq!(f["extra"]["api_call_count"], 2);

    // The validator is not a formality: a trajectory out of order is refused.
    let mut broken = t.clone();
    broken["steps"][0]["step_id"] = json!(2);
    let (ok, said) = harbor_validates(&[e.write("broken.json", &broken.to_string())]).remove(0);
    assert!(
        !ok,
        "Harbor accepted a trajectory whose steps start at 2: {said}"
    );

    let out = e.sessions(&["export", "no-such-session", "--format", "atif"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let out = e.sessions(&["export", &id, "--format", "yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("jsonl or atif"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn exec_atif_writes_a_trajectory_per_task_that_harbor_accepts() {
    let e = Exec::new("atif-tasks");
    let tasks = e.write(
        "bench.jsonl",
        &tasks_file(&[
            json!({"id": "tool", "prompt": "$ echo from-a-task"}),
            json!({"id": "talk", "prompt": "hello there"}),
            json!({"id": "nested/id", "prompt": "$ exit 3"}),
        ]),
    );
    let dir = e.dir().join("trajectories");
    let out = e.run(&[
        "--tasks",
        tasks.to_str().unwrap(),
        "--approve",
        "always",
        "--atif",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let records = records(&e.dir().join("bench.results.jsonl"));
    assert_eq!(records.len(), 3);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|d| d.unwrap().path().join("trajectory.json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    for (file, t) in files.iter().zip(valid_atifs(&files)) {
        let record = records
            .iter()
            .find(|r| r["session_id"] == t["session_id"])
            .unwrap_or_else(|| panic!("no record for {}", file.display()));
        let task = record["task_id"].as_str().unwrap();
        let want: &[&str] = if task == "talk" {
            &["user", "agent"]
        } else {
            &["user", "agent", "agent"]
        };
        assert_eq!(sources(&t), want, "{task}: {t}");
        assert_eq!(
            t["final_metrics"]["extra"]["api_call_count"], record["model_calls"],
            "{task}"
        );
    }
    assert!(dir.join("tool/trajectory.json").is_file(), "{files:?}");
}

/// A model with a price, tool calls and usage (the scripted mock): each answer's output tokens
/// are its step's metrics, the session's tokens and estimated cost the final metrics.
#[test]
fn a_scripted_model_s_calls_and_cost_reach_the_trajectory() {
    let mock = MockAi::script(vec![
        Reply::Stream(Stream::new(tool_call_events(
            "call_1",
            "echo scripted",
            5,
            (20, 9),
        ))),
        Reply::text(&["It printed ", "scripted."], (40, 6)),
    ]);
    let e = Exec::new("atif-mock");
    let dir = e.dir().join("t");
    let out = e.run_env(
        &[
            "--provider",
            "openai",
            "--approve",
            "always",
            "--atif",
            dir.to_str().unwrap(),
            "run it",
        ],
        &[
            ("OPENAI_BASE_URL", &mock.base_url()),
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_MODEL", "gpt-4.1"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = record_in(&out.stderr)["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let t = valid_atif(&dir.join("trajectory.json"));
    assert_eq!(t["agent"]["model_name"], "gpt-4.1");
    assert_eq!(sources(&t), ["user", "agent", "agent"], "{t}");
    assert_eq!(t["steps"][1]["metrics"]["completion_tokens"], 9, "{t}");
    assert_eq!(t["steps"][2]["metrics"]["completion_tokens"], 6, "{t}");
    assert_eq!(t["steps"][2]["message"], "It printed scripted.", "{t}");
    let f = &t["final_metrics"];
    assert_eq!(
        (&f["total_prompt_tokens"], &f["total_completion_tokens"]),
        (&json!(60), &json!(15)),
        "{t}"
    );
    let cost: f64 = e
        .db()
        .query_row(
            "SELECT estimated_cost_usd FROM sessions WHERE id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(cost > 0.0);
    let written = f["total_cost_usd"].as_f64().unwrap_or(f64::NAN);
    assert!((written - cost).abs() < 1e-12, "{cost}: {t}");
    assert_eq!(f["extra"]["cost_status"], "estimated", "{t}");
}

#[test]
fn stream_json_reads_as_claude_code_s_lines() {
    let e = Exec::new("stream");
    let out = e.run(&[
        "--output-format",
        "stream-json",
        "--approve",
        "always",
        "$ echo streamed-marker",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let record = record_in(&out.stderr);
    let lines = json_lines(&out.stdout);
    let kinds: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            let block = l["message"]["content"][0]["type"].as_str();
            (
                l["type"].as_str().unwrap(),
                l["subtype"].as_str().or(block).unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("system", "init"),
            ("assistant", "tool_use"),
            ("user", "tool_result"),
            ("assistant", "text"),
            ("result", "success"),
        ],
        "{}",
        text(&out.stdout)
    );
    for l in &lines {
        assert_eq!(l["session_id"], record["session_id"], "{l}");
    }
    assert!(
        lines[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("terminal"))
    );
    let tool_use = &lines[1]["message"]["content"][0];
    assert_eq!(tool_use["name"], "terminal");
    assert_eq!(tool_use["input"]["command"], "echo streamed-marker");
    let tool_result = &lines[2]["message"]["content"][0];
    assert_eq!(tool_result["tool_use_id"], tool_use["id"]);
    assert!(
        tool_result["content"]
            .as_str()
            .unwrap()
            .contains("streamed-marker")
    );
    let result = &lines[4];
    assert_eq!(result["is_error"], false);
    assert_eq!(result["num_turns"], record["model_calls"]);
    assert_eq!(result["result"], record["answer"]);
    assert_eq!(result["usage"]["output_tokens"], record["tokens"]["output"]);

    let out = e.run(&["--output-format", "stream-json", "--json", "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn max_turns_stops_a_task_and_its_result_says_so() {
    let e = Exec::new("max-turns");
    // `$ cmd` takes two model calls with the offline model: one to call, one to answer.
    for (args, env) in [
        (&["--max-turns", "1"][..], &[][..]),
        (&[][..], &[("HERMES_TUI_MAX_TURNS", "1")][..]),
    ] {
        let mut all = vec!["--output-format", "stream-json", "--approve", "always"];
        all.extend_from_slice(args);
        all.push("$ echo capped");
        let out = e.run_env(&all, env);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let last = json_lines(&out.stdout).pop().unwrap();
        assert_eq!(
            (
                &last["type"],
                &last["subtype"],
                &last["is_error"],
                &last["num_turns"]
            ),
            (
                &json!("result"),
                &json!("error_max_turns"),
                &json!(true),
                &json!(1)
            ),
            "{last}"
        );
        assert_eq!(record_in(&out.stderr)["model_calls"], 1);
    }
}

#[test]
fn a_signal_mid_task_ends_the_stream_with_a_result_and_keeps_the_trajectory() {
    let e = Exec::new("stream-sigint");
    let (sleep, marker) = marked_sleep(30);
    let _reaper = procfs::Reaper(marker.clone());
    let dir = e.dir().join("t");
    let child = e.spawn(
        &[
            "--output-format",
            "stream-json",
            "--approve",
            "always",
            "--atif",
            dir.to_str().unwrap(),
            &sleep,
        ],
        &[],
    );
    procfs::wait_for_proc("sleep", &marker, T);
    sigint(&child);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    let last = lines.last().unwrap();
    assert_eq!(
        (&last["type"], &last["subtype"], &last["status"]),
        (
            &json!("result"),
            &json!("error_during_execution"),
            &json!("interrupted")
        ),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(lines[0]["subtype"], "init");
    assert_nothing_left(&marker);
    let t = valid_atif(&dir.join("trajectory.json"));
    assert_eq!(t["steps"][0]["message"], json!(sleep), "{t}");
    // The call that was running when the signal came, and what became of it.
    let acting = &t["steps"][1];
    assert_eq!(acting["tool_calls"][0]["function_name"], "terminal", "{t}");
    assert_eq!(
        acting["observation"]["results"][0]["source_call_id"],
        acting["tool_calls"][0]["tool_call_id"],
        "{t}"
    );
}

/// Hermes' reference Python, when it is there (`../shared/hermes-reference/python`).
fn hermes_reference() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hermes-reference/python");
    dir.join("hermes_state.py").is_file().then_some(dir)
}

/// Hermes' own `SessionDB.import_sessions` takes the JSONL export, and its `export_session`
/// gives back the same session (the one helper the reference imports but does not ship,
/// `agent.memory_manager.sanitize_context`, is stood in for; this import never calls it).
#[test]
fn hermes_reads_the_jsonl_export_back() {
    let Some(reference) = hermes_reference() else {
        eprintln!("skipped: no Hermes reference Python beside the repository");
        return;
    };
    let e = Exec::new("export-hermes");
    let id = stored_run(&e, "$ echo round-trip");
    let out = e.sessions(&["export", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
    let export = e.write("export.jsonl", &text(&out.stdout));
    let said = hermes_state_says(
        &e,
        &reference,
        &e.dir().join("hermes-state.db"),
        &format!(
            "rows = [json.loads(l) for l in open({export:?})]\n\
             print(json.dumps(db.import_sessions(rows)))\n\
             print(json.dumps(db.export_session(rows[0]['id'])))\n",
            export = export.to_str().unwrap(),
        ),
    );
    assert_eq!(said[0]["imported"], 1, "{}", said[0]);
    let theirs = &said[1];
    for key in [
        "id",
        "source",
        "model",
        "cwd",
        "input_tokens",
        "output_tokens",
        "api_call_count",
        "estimated_cost_usd",
        "cost_status",
        "billing_provider",
    ] {
        assert_eq!(theirs[key], ours[key], "{key}: {theirs}");
    }
    let fields = |s: &Value| -> Vec<Value> {
        s["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                json!([
                    m["role"],
                    m["content"],
                    m["tool_calls"],
                    m["tool_call_id"],
                    m["token_count"]
                ])
            })
            .collect()
    };
    assert_eq!(fields(theirs), fields(&ours));
    assert_eq!(fields(&ours).len(), 4);
}

/// A session compacted through the TUI's `session.compress`: both the old session and the one
/// that goes on from it export as trajectories Harbor accepts.
#[test]
fn a_compacted_session_exports_as_valid_trajectories() {
    let e = Exec::new("atif-compacted");
    let mut g = Gateway::builder().home(e.dir()).tag("atif-compact").start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "$ echo before-compaction");
    g.run_turn(&s.id, "tell me about otters");
    let r = g.call("session.compress", json!({"session_id": s.id}));
    assert_eq!(r["status"], "compressed", "{r}");
    let new_stored = r["session_key"].as_str().unwrap().to_string();
    g.run_turn(&s.id, "$ echo after-compaction");
    g.close_stdin();
    g.wait_exit(T);
    let parent: String = e
        .db()
        .query_row(
            "SELECT parent_session_id FROM sessions WHERE id = ?1",
            [&new_stored],
            |r| r.get(0),
        )
        .unwrap();
    for (marker, id) in [
        ("before-compaction", &parent),
        ("after-compaction", &new_stored),
    ] {
        let out = e.sessions(&["export", id, "--format", "atif"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let t = valid_atif(&e.write(&format!("{marker}.json"), &text(&out.stdout)));
        assert!(t.to_string().contains(marker), "{marker}: {t}");
    }
    let out = e.sessions(&["export", &new_stored, "--format", "atif"]);
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["extra"]["parent_session_id"], json!(parent), "{t}");
}

// ---- shards ------------------------------------------------------------------------------------

/// The figures of a summary that a merge of shards must give as one run does.
fn figures(s: &Value) -> Value {
    let keys = [
        "tasks",
        "done",
        "model_error",
        "interrupted",
        "refused",
        "timeout",
        "model_calls",
        "tool_calls",
        "tokens",
        "cost_usd",
        "cost_status",
        "subagents",
    ];
    Value::Object(
        keys.iter()
            .map(|k| (k.to_string(), s[*k].clone()))
            .collect(),
    )
}

/// Four shards of one tasks file run as separate processes (by `--shard`, a Kubernetes
/// Indexed Job's environment and a Slurm array's), one SIGKILLed mid-task and continued:
/// `exec merge` of their results gives the figures one run of the whole file gives.
#[test]
fn four_shards_one_killed_and_continued_merge_to_one_run_s_figures() {
    let e = Exec::new("shards");
    let marker = procfs::marker();
    let _reaper = procfs::Reaper(marker.clone());
    let go = e.dir().join("GO");
    let mut lines: Vec<Value> = (0..120)
        .map(|n| match n % 3 {
            0 => json!({"id": format!("t{n}"), "prompt": format!("$ echo t{n}")}),
            1 => json!({"id": format!("t{n}"), "prompt": format!("say t{n}")}),
            // A number for an id, and a command that fails (the turn still completes).
            _ => json!({"id": n, "prompt": "$ exit 3"}),
        })
        .collect();
    // One task waits for a file the test creates: its shard is killed while it waits.
    let gate = format!(
        "$ until [ -e {} ]; do sleep 0.02; done; echo gated # {marker}",
        go.display()
    );
    lines.push(json!({"id": "gate", "prompt": gate}));
    let tasks = e.write("bench.jsonl", &tasks_file(&lines));
    let tasks = tasks.to_str().unwrap();
    let atif = e.dir().join("trajectories");
    let atif = atif.to_str().unwrap();
    let common = [
        "--tasks",
        tasks,
        "--approve",
        "always",
        "--parallel",
        "4",
        "--atif",
        atif,
    ];
    let shard_env = |i: usize| -> Vec<(&str, String)> {
        match i {
            1 => vec![
                ("JOB_COMPLETION_INDEX", "1".into()),
                ("TUI_GATEWAY_EXEC_SHARDS", "4".into()),
            ],
            2 => vec![
                ("SLURM_ARRAY_TASK_ID", "7".into()),
                ("SLURM_ARRAY_TASK_MIN", "5".into()),
                ("SLURM_ARRAY_TASK_COUNT", "4".into()),
            ],
            _ => Vec::new(),
        }
    };
    let spawn_shard = |i: usize, more: &[&str]| {
        let flag = format!("{i}/4");
        let mut args = common.to_vec();
        if shard_env(i).is_empty() {
            args.extend(["--shard", &flag]);
        }
        args.extend_from_slice(more);
        let env = shard_env(i);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        e.spawn(&args, &env)
    };
    let mut shards: Vec<Option<std::process::Child>> =
        (0..4).map(|i| Some(spawn_shard(i, &[]))).collect();
    // The shard running the gate is the one whose working directories its shell is in.
    let waiting = procfs::wait_for_proc("bash", &marker, T);
    let cwd = std::fs::read_link(format!("/proc/{}/cwd", waiting.pid)).unwrap();
    let killed = (0..4)
        .find(|i| cwd.to_string_lossy().contains(&format!("shard-{i}-of-4")))
        .unwrap_or_else(|| panic!("the gate runs in {}", cwd.display()));
    // Killed once it has finished tasks whose trajectories it has not written yet.
    let victim_results = e
        .dir()
        .join(format!("bench.shard-{killed}-of-4.results.jsonl"));
    wait_records(&victim_results, 5);
    let mut victim = shards[killed].take().unwrap();
    victim.kill().unwrap();
    let _ = victim.wait();
    for child in shards.into_iter().flatten() {
        let out = finish(child);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    std::fs::write(&go, "").unwrap();
    let out = finish(spawn_shard(killed, &["--continue"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let continued = summary_in(&out.stdout);
    assert_eq!(
        continued["shard"],
        json!(format!("{killed}/4")),
        "{continued}"
    );
    assert!(continued["skipped"].as_u64() >= Some(5), "{continued}");

    let results: Vec<PathBuf> = (0..4)
        .map(|i| e.dir().join(format!("bench.shard-{i}-of-4.results.jsonl")))
        .collect();
    for (i, file) in results.iter().enumerate() {
        let recs = records(file);
        assert!(!recs.is_empty(), "shard {i} ran nothing");
        for r in &recs {
            assert_eq!(r["shard"], json!(format!("{i}/4")), "{r}");
            assert!(r["host"].is_string(), "{r}");
        }
    }
    // Every task's trajectory, those the killed shard finished before the kill included
    // (its continuation wrote them).
    let files: Vec<PathBuf> = std::fs::read_dir(atif)
        .unwrap()
        .map(|d| d.unwrap().path().join("trajectory.json"))
        .collect();
    assert_eq!(files.len(), 121);
    let sessions: std::collections::HashSet<String> = valid_atifs(&files)
        .iter()
        .map(|t| t["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sessions.len(), 121);
    let mut merge_args = vec!["merge"];
    merge_args.extend(results.iter().map(|p| p.to_str().unwrap()));
    let out = finish(e.subcommand("exec", &merge_args).spawn().unwrap());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let merged = summary_in(&out.stdout);
    assert_eq!(
        merged["shards"].as_array().map(Vec::len),
        Some(4),
        "{merged}"
    );

    let out = e.run(&[
        "--tasks",
        tasks,
        "--approve",
        "always",
        "--results",
        "one.jsonl",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let one = summary_in(&out.stdout);
    assert_eq!(
        figures(&merged),
        figures(&one),
        "merged {merged}\none run {one}"
    );
    assert_eq!(
        (one["tasks"].as_u64(), one["done"].as_u64()),
        (Some(121), Some(121)),
        "{one}"
    );
}

#[test]
fn merge_names_every_line_that_is_not_a_record_and_skips_one_cut_short() {
    let e = Exec::new("merge-bad");
    let record = json!({"type": "exec.result", "task_id": "a", "status": "done",
        "model_calls": 1, "tool_calls": 0, "tokens": {"input": 3, "output": 2},
        "cost_usd": 0.0, "cost_status": "actual", "subagents": {"count": 0}});
    let good = e.write("good.jsonl", &format!("{record}\n{{\"type\":\"exec.res"));
    let bad = e.write("bad.jsonl", &format!("{record}\nnot json\n{record}\n[1]\n"));
    let out = finish(
        e.subcommand("exec", &["merge", good.to_str().unwrap()])
            .spawn()
            .unwrap(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let s = summary_in(&out.stdout);
    assert_eq!(
        (&s["tasks"], &s["done"], &s["cut_short"]),
        (&json!(1), &json!(1), &json!(1)),
        "{s}"
    );
    let out = finish(
        e.subcommand(
            "exec",
            &["merge", good.to_str().unwrap(), bad.to_str().unwrap()],
        )
        .spawn()
        .unwrap(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    for line in [":2:", ":4:"] {
        assert!(said.contains(&format!("bad.jsonl{line}")), "{said}");
    }
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

/// One Harbor trial of `integrations/harbor`'s installed agent (`tests/atif/harbor_agent_trial.py`:
/// Harbor's own agent classes, driven as its `Trial` drives them, on a test double of its
/// environment that runs the agent's commands on this machine under `root`); its printed JSON.
/// `None` when the venv's Python cannot import Harbor's agent classes (they need Python 3.12).
fn harbor_trial(root: &Path, spec: &Value) -> Option<Value> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = harbor_python();
    let mut probe = Command::new(python);
    probe.args(["-c", "import harbor.agents.installed.base"]);
    if !probe.output().is_ok_and(|o| o.status.success()) {
        eprintln!(
            "SKIPPED: Harbor's agent classes need Python 3.12, which tests/atif/harbor-venv.sh did not find"
        );
        return None;
    }
    std::fs::create_dir_all(root).unwrap();
    let mut cmd = Command::new(python);
    scrub_env(&mut cmd);
    let child = cmd
        .arg(manifest.join("tests/atif/harbor_agent_trial.py"))
        .arg(root)
        .arg(spec.to_string())
        .env("PYTHONPATH", manifest.join("integrations/harbor"))
        // No __pycache__ left in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the Harbor trial");
    let out = finish(child);
    assert!(out.status.success(), "the trial: {}", text(&out.stderr));
    Some(json_lines(&out.stdout).remove(0))
}

/// `integrations/harbor`'s agent, through Harbor's agent interface on a double of its
/// environment: the binary installed, `exec` run with the instruction and the model (the
/// offline one) in the task's working directory, a key passed by Hermes' name to that run
/// alone, and the trajectory it collected into Harbor's logs directory valid for Harbor, its
/// figures in Harbor's context.
#[test]
fn harbor_s_installed_agent_runs_exec_and_collects_a_valid_trajectory() {
    let e = Exec::new("harbor-agent");
    let root = e.dir().join("trial");
    let secret = "sk-or-harbor-trial-not-a-real-key";
    let instruction = "$ echo made-in-the-trial > proof.txt && pwd";
    let spec = json!({
        "binary": BIN,
        "model": "offline/offline",
        "instruction": instruction,
        "extra_env": {"OPENROUTER_API_KEY": secret},
        "kwargs": {"max_turns": 5},
    });
    let Some(trial) = harbor_trial(&root, &spec) else {
        return;
    };
    assert!(trial.get("error").is_none(), "{trial:#}");
    // Installed where the environment keeps installed agents, and run there.
    assert!(root.join("installed-agent/tui-gateway").is_file());
    let proof = std::fs::read_to_string(root.join("app/proof.txt")).unwrap();
    assert_eq!(proof, "made-in-the-trial\n");
    let logs = root.join("host-logs");
    let t = valid_atif(&logs.join("trajectory.json"));
    assert_eq!(t["steps"][0]["source"], "user", "{t}");
    assert_eq!(t["steps"][0]["message"], instruction, "{t}");
    assert_eq!(t["steps"][1]["tool_calls"][0]["function_name"], "terminal");
    assert_eq!(t["extra"]["cwd"], root.join("app").to_str().unwrap());
    // Harbor's context gets the trajectory's figures and the binary's version.
    let context = &trial["context"];
    let totals = &t["final_metrics"];
    assert!(totals["total_completion_tokens"].as_i64() > Some(0), "{t}");
    assert_eq!(
        context["n_output_tokens"],
        totals["total_completion_tokens"]
    );
    assert_eq!(context["n_input_tokens"], totals["total_prompt_tokens"]);
    assert_eq!(context["cost_usd"], totals["total_cost_usd"]);
    assert_eq!(trial["version"], t["agent"]["version"]);
    // stream-json and the result record beside the trajectory.
    let stream = std::fs::read(logs.join("tui-gateway.stream.jsonl")).unwrap();
    let lines = json_lines(&stream);
    assert_eq!(lines[0]["subtype"], "init");
    let last = lines.last().unwrap();
    assert_eq!(
        (&last["type"], &last["subtype"]),
        (&json!("result"), &json!("success"))
    );
    assert_eq!(last["session_id"], t["session_id"]);
    let stderr = std::fs::read(logs.join("tui-gateway.stderr.txt")).unwrap();
    assert_eq!(record_in(&stderr)["status"], "done");
    // The key went to the run's environment by its Hermes name, and nowhere it was written.
    let commands = trial["commands"].as_array().unwrap();
    let run = commands
        .iter()
        .find(|c| c["command"].as_str().unwrap().contains(" exec - "))
        .expect("the exec command");
    assert!(
        run["env"]
            .as_array()
            .unwrap()
            .contains(&json!("OPENROUTER_API_KEY")),
        "{run}"
    );
    assert!(!run["command"].as_str().unwrap().contains(secret));
    for entry in std::fs::read_dir(&logs).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(!text(&bytes).contains(secret), "{}", path.display());
        }
    }
}

/// What Harbor records when the agent cannot run: no binary named refuses the setup with how
/// to give one; a provider the gateway does not know fails the run with the gateway's reason
/// (Harbor's `NonZeroAgentExitCodeError`), after which the logs still come back.
#[test]
fn harbor_s_installed_agent_says_why_it_cannot_run() {
    let e = Exec::new("harbor-agent-fails");
    let spec = json!({"model": "offline/offline", "instruction": "hello"});
    let Some(trial) = harbor_trial(&e.dir().join("no-binary"), &spec) else {
        return;
    };
    let error = trial["error"].as_str().unwrap_or_default();
    assert!(error.contains("--ak binary=PATH"), "{trial:#}");
    let root = e.dir().join("bad-provider");
    let spec = json!({"binary": BIN, "model": "no-such-provider/m", "instruction": "hello"});
    let trial = harbor_trial(&root, &spec).unwrap();
    let error = trial["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("NonZeroAgentExitCodeError"), "{trial:#}");
    assert!(error.contains("no-such-provider"), "{trial:#}");
    assert!(root.join("host-logs/tui-gateway.stderr.txt").is_file());
}

/// `exec merge --sessions` joins the shards' session stores: two shards, each with its own
/// home, merged into one state.db that `tui-gateway sessions` lists and searches and Hermes'
/// own `hermes_state.py` reads (when the reference is there); merging again copies nothing.
#[test]
fn merge_joins_the_shards_session_stores_into_one_state_db() {
    let e = Exec::new("merge-sessions");
    let mut lines: Vec<Value> = (0..6)
        .map(|n| json!({"id": format!("t{n}"), "prompt": format!("hello number {n}")}))
        .collect();
    lines.push(json!({"id": "tool", "prompt": "$ echo tooled-in-a-shard"}));
    let tasks = e.write("m.jsonl", &tasks_file(&lines));
    let mut stored = Vec::new();
    let mut tool_session = String::new();
    for shard in 0..2 {
        let home = e.dir().join(format!("home-{shard}"));
        let shard_arg = format!("{shard}/2");
        let args = [
            "--tasks",
            tasks.to_str().unwrap(),
            "--shard",
            &shard_arg,
            "--approve",
            "always",
        ];
        let out = e.run_env(&args, &[("HERMES_HOME", home.to_str().unwrap())]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let results = e.dir().join(format!("m.shard-{shard}-of-2.results.jsonl"));
        for r in records(&results) {
            assert_eq!(
                r["state_db"],
                home.join("state.db").to_str().unwrap(),
                "{r}"
            );
            stored.push(r["session_id"].as_str().unwrap().to_string());
            if r["task_id"] == "tool" {
                tool_session = stored.last().unwrap().clone();
            }
        }
    }
    stored.sort();
    assert_eq!(stored.len(), 7);
    let shard_messages: i64 = (0..2)
        .map(|s| {
            let db =
                rusqlite::Connection::open(e.dir().join(format!("home-{s}/state.db"))).unwrap();
            db.query_row("SELECT count(*) FROM messages", [], |r| r.get::<_, i64>(0))
                .unwrap()
        })
        .sum();
    let merged_home = e.dir().join("merged");
    let merged = merged_home.join("state.db");
    let merge = |extra: &[&str]| {
        let mut args = vec!["merge", "--sessions", merged.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.extend([
            "m.shard-0-of-2.results.jsonl",
            "m.shard-1-of-2.results.jsonl",
        ]);
        let out = finish(e.subcommand("exec", &args).spawn().unwrap());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        summary_in(&out.stdout)["sessions"].clone()
    };
    let joined = merge(&[]);
    assert_eq!(joined["copied"], 7, "{joined}");
    assert_eq!(joined["messages"], shard_messages, "{joined}");
    assert_eq!(joined["already"], 0, "{joined}");
    // The merged store reads as any state.db: every session listed, its messages searchable.
    let list = finish(
        e.subcommand("sessions", &["list", "--limit", "100"])
            .env("HERMES_HOME", &merged_home)
            .spawn()
            .unwrap(),
    );
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    let listed = text(&list.stdout);
    for id in &stored {
        assert!(listed.contains(id.as_str()), "{id} not in {listed}");
    }
    let search = finish(
        e.subcommand("sessions", &["search", "tooled-in-a-shard"])
            .env("HERMES_HOME", &merged_home)
            .spawn()
            .unwrap(),
    );
    assert_eq!(search.status.code(), Some(0), "{}", text(&search.stderr));
    let found = text(&search.stdout);
    assert!(found.contains(&tool_session), "{found}");
    assert_eq!(found.matches("\n").count(), 3, "one hit: {found}");
    // Again, naming the homes: nothing new to copy.
    let again = merge(&[
        "--from",
        e.dir().join("home-0").to_str().unwrap(),
        "--from",
        e.dir().join("home-1").to_str().unwrap(),
    ]);
    assert_eq!(
        (&again["copied"], &again["already"]),
        (&json!(0), &json!(7)),
        "{again}"
    );
    let Some(reference) = hermes_reference() else {
        eprintln!("skipped the Hermes part: no Hermes reference Python beside the repository");
        return;
    };
    let said = hermes_state_says(
        &e,
        &reference,
        &merged,
        "rows = db.list_sessions_rich(limit=100)\n\
         print(json.dumps(sorted(r['id'] for r in rows)))\n\
         print(json.dumps(sum(len(db.get_messages(r['id'])) for r in rows)))\n",
    );
    assert_eq!(said[0], json!(stored));
    assert_eq!(said[1], shard_messages);
}

/// A task that delegates (the offline model's `%delegate_task`, two subagents each running a
/// command): its trajectory and each subagent's session exported as ATIF are valid for
/// Harbor; the parent's step holds the delegate_task call and its result, each child's names
/// its parent and holds its own command.
#[test]
fn a_session_with_subagents_exports_as_trajectories_harbor_accepts() {
    let e = Exec::new("atif-subagents");
    let dir = e.dir().join("atif");
    let prompt =
        r#"%delegate_task {"tasks": [{"goal": "$ echo sub-one"}, {"goal": "$ echo sub-two"}]}"#;
    let out = e.run(&["--atif", dir.to_str().unwrap(), prompt]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = record_in(&out.stderr);
    assert_eq!(r["subagents"]["count"], 2, "{r}");
    let parent_id = r["session_id"].as_str().unwrap().to_string();
    let children: Vec<String> = {
        let db = e.db();
        let mut stmt = db
            .prepare("SELECT id FROM sessions WHERE parent_session_id = ?1 ORDER BY started_at")
            .unwrap();
        stmt.query_map([&parent_id], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(children.len(), 2);
    let mut files = vec![dir.join("trajectory.json")];
    for (n, child) in children.iter().enumerate() {
        let out = e.sessions(&["export", child, "--format", "atif"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        files.push(e.write(&format!("child-{n}.json"), &text(&out.stdout)));
    }
    let docs = valid_atifs(&files);
    let parent = &docs[0];
    assert_eq!(parent["session_id"], parent_id.as_str());
    let call_step = parent["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["tool_calls"][0]["function_name"] == "delegate_task")
        .unwrap_or_else(|| panic!("no delegate_task step: {parent}"));
    let call = &call_step["tool_calls"][0];
    assert_eq!(
        call["arguments"]["tasks"][1]["goal"], "$ echo sub-two",
        "{call}"
    );
    let result = &call_step["observation"]["results"][0];
    assert_eq!(
        result["source_call_id"], call["tool_call_id"],
        "{call_step}"
    );
    let said = result["content"].as_str().unwrap();
    assert!(
        said.contains("sub-one") && said.contains("sub-two"),
        "{said}"
    );
    let mut echoed = Vec::new();
    for child in &docs[1..] {
        assert_eq!(
            child["extra"]["parent_session_id"],
            parent_id.as_str(),
            "{child}"
        );
        let commands: Vec<&Value> = child["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s.get("tool_calls"))
            .flat_map(|c| c.as_array().unwrap())
            .collect();
        assert_eq!(commands.len(), 1, "{child}");
        assert_eq!(commands[0]["function_name"], "terminal");
        echoed.push(
            commands[0]["arguments"]["command"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    echoed.sort();
    assert_eq!(echoed, ["echo sub-one", "echo sub-two"]);
}

/// Runs `body` in Hermes' reference Python with `db` open as `db` (its `hermes_state.SessionDB`;
/// one module it imports stubbed), and returns the JSON lines it printed.
fn hermes_state_says(e: &Exec, reference: &Path, db: &Path, body: &str) -> Vec<Value> {
    let stubs = e.dir().join("py-stubs");
    std::fs::create_dir_all(stubs.join("agent")).unwrap();
    std::fs::write(
        stubs.join("agent/memory_manager.py"),
        "def sanitize_context(text, *args, **kwargs):\n    return text\n",
    )
    .unwrap();
    let program = format!(
        "import sys, json, pathlib\nsys.path[:0] = [{reference:?}, {stubs:?}]\n\
         import hermes_state\n\
         db = hermes_state.SessionDB(pathlib.Path({db:?}))\n{body}",
        reference = reference.to_str().unwrap(),
        stubs = stubs.to_str().unwrap(),
        db = db.to_str().unwrap(),
    );
    let child = Command::new("python3")
        .arg("-c")
        .arg(program)
        .env("HERMES_HOME", e.dir().join("hermes-home"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(child);
    assert!(out.status.success(), "{}", text(&out.stderr));
    json_lines(&out.stdout)
}
