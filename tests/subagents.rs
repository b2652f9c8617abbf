//! Subagents through the binary: `delegate_task` (the offline model's `%delegate_task {…}`;
//! each child's goal is its own prompt, so a goal `$ CMD` makes the child run CMD) spawns
//! child sessions driven by the same loop; their progress reaches the parent's client as
//! `subagent.*`. From a top-level session the call runs in the background, as in Hermes 0.18:
//! it answers `dispatched` at once, the parent's turn ends, and the children's combined result
//! arrives as a new message of the parent's (a turn of its own); an orchestrator child's call
//! waits and returns the results. Children are stored as Hermes stores them, and an interrupt,
//! a close or a kill leaves none of them or their commands running. Commands carry a marker
//! only this test's processes have; every wait polls with a deadline.

use crate::common;
use crate::mockai;
use crate::procs;

use common::*;
use procs::*;
use serde_json::{Value, json};

/// A parent session on a gateway, and a marker only this test's processes carry.
struct Tree {
    g: Gateway,
    sid: String,
    stored: String,
    m: String,
    _reaper: Reaper,
}

/// config.yaml with one line of its `delegation:` section.
fn delegation_config(home: &TempHome, line: &str) {
    let text = format!("delegation:\n  {line}\n");
    std::fs::write(home.path.join("config.yaml"), text).unwrap();
}

fn tree_in(home: &TempHome, tag: &str) -> Tree {
    tree_with(home, tag, &[])
}

/// A tree whose gateway has these extra environment variables.
fn tree_with(home: &TempHome, tag: &str, envs: &[(&str, &str)]) -> Tree {
    let m = marker();
    let _reaper = Reaper(format!(".{m}"));
    // A private HOME: `~/…` in a child's command names the test's own folder.
    let mut b = Gateway::builder()
        .home(&home.path)
        .env("HOME", home.path.to_str().unwrap())
        .tag(tag)
        .own_process_group();
    for (k, v) in envs {
        b = b.env(k, v);
    }
    let mut g = b.start();
    let s = g.create_session(json!({}));
    Tree {
        g,
        sid: s.id,
        stored: s.stored,
        m,
        _reaper,
    }
}

fn delegate_prompt(args: Value) -> String {
    format!("%delegate_task {args}")
}

impl Tree {
    /// Goal text for a child that runs `command` (`{m}` stands for the marker).
    fn runs(&self, command: &str) -> String {
        format!("$ {}", command.replace("{m}", &self.m))
    }

    /// Run a delegating turn: the call answers `dispatched` and the turn ends; then the
    /// children's combined result arrives as a turn of its own.
    fn delegate(&mut self, args: Value) -> Background {
        let (dispatch, answer) = self.dispatch(args);
        let (result, text) = self.result_of(&answer);
        Background {
            dispatch,
            answer,
            result,
            text,
        }
    }

    /// Run a delegating turn to its end: the turn and the call's answer (`dispatched`).
    fn dispatch(&mut self, args: Value) -> (Turn, Value) {
        let sid = self.sid.clone();
        let start = submit(&mut self.g, &sid, &delegate_prompt(args));
        let dispatch = self.g.finish_turn(&sid, start, T);
        let answer = call_result(&dispatch);
        assert_eq!(answer["status"], "dispatched", "{answer}");
        (dispatch, answer)
    }

    /// The next turn of the parent, which the combined result of delegation `answer` starts;
    /// and that result's text.
    fn result_of(&mut self, answer: &Value) -> (Turn, String) {
        let sid = self.sid.clone();
        let next = self.g.frames.len();
        let result = self.g.finish_turn(&sid, next, T);
        let text = notice_of(&self.g.events_of_session(&sid), answer);
        (result, text)
    }

    /// A delegating turn the tool refuses: the turn and the call's result.
    fn refused(&mut self, args: Value) -> (Turn, Value) {
        let turn = self.g.run_turn(&self.sid.clone(), &delegate_prompt(args));
        let result = call_result(&turn);
        assert!(result["error"].is_string(), "{result}");
        (turn, result)
    }

    /// The stored children of the parent session: (id, source, end_reason).
    fn stored_children(&self) -> Vec<(String, String, Option<String>)> {
        stored_children(&self.g.db(), &self.stored)
    }

    fn active(&mut self) -> Vec<Value> {
        let st = self.g.call("delegation.status", json!({}));
        st["active"].as_array().cloned().unwrap_or_default()
    }
}

/// A background delegation seen through: the turn that dispatched it, the call's answer, the
/// turn its combined result started, and that result's text.
struct Background {
    dispatch: Turn,
    answer: Value,
    result: Turn,
    text: String,
}

/// The result of the turn's `delegate_task` call.
fn call_result(turn: &Turn) -> Value {
    let done = turn
        .events
        .iter()
        .find(|e| e["type"] == "tool.complete" && e["payload"]["name"] == "delegate_task")
        .unwrap_or_else(|| panic!("no delegate_task tool.complete: {:?}", types(&turn.events)));
    done["payload"]["result"].clone()
}

/// The combined result of the delegation `answer` names, as the parent's client was told it.
fn notice_of(events: &[Value], answer: &Value) -> String {
    let id = answer["delegation_id"].as_str().unwrap();
    let head = format!("[ASYNC DELEGATION BATCH COMPLETE — {id}]");
    let told = events.iter().find(|e| {
        e["type"] == "status.update"
            && e["payload"]["kind"] == "process"
            && e["payload"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(&head))
    });
    let told = told.unwrap_or_else(|| panic!("no notice of {id}: {:?}", types(events)));
    told["payload"]["text"].as_str().unwrap().to_string()
}

/// The section of a combined result about task `n` (1-based): its header and report.
fn task_part(text: &str, n: usize) -> String {
    let at = text
        .find(&format!(" TASK {n}/"))
        .unwrap_or_else(|| panic!("no task {n} in {text}"));
    let rest = &text[at..];
    let end = rest[1..].find("\n--- ").map_or(rest.len(), |e| e + 1);
    rest[..end].to_string()
}

/// The stored children of session `parent`: (id, source, end_reason), oldest first.
fn stored_children(
    db: &rusqlite::Connection,
    parent: &str,
) -> Vec<(String, String, Option<String>)> {
    let mut stmt = db
        .prepare(
            "SELECT id, source, end_reason FROM sessions WHERE parent_session_id = ?1
             ORDER BY started_at, id",
        )
        .unwrap();
    stmt.query_map([parent], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

#[test]
fn a_delegation_answers_at_once_and_its_result_arrives_as_a_new_message() {
    let home = TempHome::new("sub-one");
    let mut t = tree_in(&home, "sub-one");
    let goal = t.runs("echo child-says-{m}");
    let d = t.delegate(json!({"goal": goal, "context": "just run it"}));

    // Hermes' answer: the call returns at once and the parent's turn ends.
    let a = &d.answer;
    assert_eq!(
        (&a["mode"], &a["count"]),
        (&json!("background"), &json!(1)),
        "{a}"
    );
    assert!(
        a["delegation_id"].as_str().unwrap().starts_with("deleg_"),
        "{a}"
    );
    assert_eq!(a["goals"], json!([goal]));
    assert!(a["note"].as_str().unwrap().contains("new message"), "{a}");
    assert_eq!(d.dispatch.complete["payload"]["status"], "complete");
    // The TUI's status bar reads it: `⛓ 1`, "resumes when subagent finishes".
    let running = |turn: &Turn| turn.complete["payload"]["usage"]["active_subagents"].clone();
    assert_eq!(running(&d.dispatch), 1, "{}", d.dispatch.complete);
    assert!(
        of_type(&d.dispatch.events, "subagent.complete").is_empty(),
        "the turn did not wait for the child: {:?}",
        types(&d.dispatch.events)
    );
    // The child started before the call answered.
    let start = of_type(&d.dispatch.events, "subagent.start");
    assert_eq!(start.len(), 1, "{:?}", types(&d.dispatch.events));
    let p = &start[0]["payload"];
    assert_eq!(p["goal"], goal.as_str());
    assert_eq!((&p["task_index"], &p["depth"]), (&json!(0), &json!(0)));
    let subagent_id = p["subagent_id"].as_str().unwrap().to_string();

    // Its result is a new message of the parent's: a turn of its own, the model answering it.
    let text = &d.text;
    assert!(
        text.contains("TASK 1/1: ") && text.contains("status=completed"),
        "{text}"
    );
    assert!(text.contains(&format!("child-says-{}", t.m)), "{text}");
    assert!(text.contains("Context you provided: just run it"), "{text}");
    assert!(text.contains("api_calls=2"), "{text}");
    assert_eq!(of_type(&d.result.events, "message.start").len(), 1);
    assert_eq!(d.result.complete["payload"]["status"], "complete");
    assert_eq!(running(&d.result), 0, "{}", d.result.complete);
    // (The model's echo of its prompt, trimmed.)
    assert!(d.result.text.contains(text.trim()), "{}", d.result.text);
    let rows = message_rows(&t.g.db_path(), &t.stored);
    let user: Vec<&str> = (rows.iter().filter(|r| r.role == "user"))
        .filter_map(|r| r.content.as_deref())
        .collect();
    assert_eq!(user.last(), Some(&text.as_str()), "{rows:?}");
    assert_eq!(rows.last().unwrap().role, "assistant", "{rows:?}");

    // The parent's client heard the child use its tool and end, after the call answered.
    let sid = t.sid.clone();
    let events = t.g.events_of_session(&sid);
    let tool = of_type(&events, "subagent.tool");
    assert_eq!(tool[0]["payload"]["tool_name"], "terminal");
    assert_eq!(tool[0]["payload"]["subagent_id"], subagent_id.as_str());
    let complete = of_type(&events, "subagent.complete");
    assert_eq!(complete.len(), 1);
    assert_eq!(complete[0]["payload"]["status"], "completed");
    let said = complete[0]["payload"]["summary"].as_str().unwrap();
    assert!(said.contains("child-says"), "{}", complete[0]);

    // Stored as Hermes stores a delegated run, and ended; nothing of it is still live.
    let children = t.stored_children();
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(children[0].1, "subagent");
    assert_eq!(children[0].2.as_deref(), Some("subagent_complete"));
    let rows = message_rows(&t.g.db_path(), &children[0].0);
    assert_eq!(rows[0].role, "user");
    assert_eq!(rows[0].content.as_deref(), Some(goal.as_str()));
    assert!(rows.iter().any(|r| r.role == "tool"), "{rows:?}");
    assert!(t.active().is_empty());
    // Pickers list the parent, not its subagent's run.
    let list = t.g.call("session.list", json!({"limit": 50}));
    let ids = listed_ids(&list);
    assert!(!ids.contains(&children[0].0.as_str()), "{list}");
}

#[test]
fn a_batch_runs_its_children_at_the_same_time_and_reports_them_together() {
    let home = TempHome::new("sub-batch");
    let mut t = tree_in(&home, "sub-batch");
    // Each child waits until all three have started: only concurrent children finish.
    let dir = home.path.join("meet");
    std::fs::create_dir_all(&dir).unwrap();
    let meet = |i: usize| {
        format!(
            "touch {d}/{i} && for n in $(seq 1 600); do [ $(ls {d} | wc -l) -ge 3 ] && break; \
             sleep 0.05; done; echo met-$(ls {d} | wc -l)-{{m}}",
            d = dir.display()
        )
    };
    let tasks: Vec<Value> = (0..3).map(|i| json!({"goal": t.runs(&meet(i))})).collect();
    let d = t.delegate(json!({"tasks": tasks}));
    assert_eq!(d.answer["count"], 3, "{}", d.answer);
    assert!(d.text.contains("3 subagent(s)"), "{}", d.text);
    for n in 1..=3 {
        let part = task_part(&d.text, n);
        assert!(part.contains("status=completed"), "{part}");
        assert!(part.contains(&format!("met-3-{}", t.m)), "{part}");
    }
    // One message for the three, once all of them are done.
    assert_eq!(d.text.matches("[ASYNC DELEGATION").count(), 1);
    let sid = t.sid.clone();
    let events = t.g.events_of_session(&sid);
    assert_eq!(of_type(&events, "subagent.start").len(), 3);
    assert_eq!(of_type(&events, "subagent.complete").len(), 3);
    assert_eq!(t.stored_children().len(), 3);
}

/// Hermes announces each child as it is made (`subagent.spawn_requested`: the TUI puts a
/// queued row in its agents overlay and nudges toward /agents), all of them before the first
/// starts; each announcement names the child as its `subagent.start` does.
#[test]
fn each_child_is_announced_before_any_starts() {
    let home = TempHome::new("sub-spawn");
    let mut t = tree_in(&home, "sub-spawn");
    let goals = [t.runs("echo first-{m}"), t.runs("echo second-{m}")];
    let tasks: Vec<Value> = goals.iter().map(|g| json!({"goal": g})).collect();
    let d = t.delegate(json!({"tasks": tasks}));
    let events = &d.dispatch.events;
    let at = |ty: &str| -> Vec<usize> {
        let all = events.iter().enumerate();
        all.filter(|(_, e)| e["type"] == ty)
            .map(|(i, _)| i)
            .collect()
    };
    let (asked, started) = (at("subagent.spawn_requested"), at("subagent.start"));
    assert_eq!((asked.len(), started.len()), (2, 2), "{:?}", types(events));
    assert!(
        asked[1] < started[0],
        "all announced first: {:?}",
        types(events)
    );
    let answered = events
        .iter()
        .position(|e| e["type"] == "tool.complete" && e["payload"]["name"] == "delegate_task");
    assert!(started[1] < answered.unwrap(), "{:?}", types(events));
    for (i, (a, s)) in asked.iter().zip(&started).enumerate() {
        let (a, s) = (&events[*a]["payload"], &events[*s]["payload"]);
        assert_eq!(a["goal"], goals[i].as_str(), "{a}");
        assert_eq!(a["text"], goals[i].as_str(), "the preview is the goal: {a}");
        assert_eq!((&a["task_index"], &a["task_count"]), (&json!(i), &json!(2)));
        assert_eq!(
            (&a["depth"], &a["tool_count"]),
            (&json!(0), &json!(0)),
            "{a}"
        );
        assert!(a.get("status").is_none(), "the TUI marks it queued: {a}");
        assert!(a["model"].is_string(), "{a}");
        for key in ["subagent_id", "child_session_id", "goal", "model"] {
            assert_eq!(a[key], s[key], "{key}: {a} vs {s}");
        }
    }
    let children: Vec<String> = t.stored_children().into_iter().map(|c| c.0).collect();
    let announced: Vec<&Value> = asked.iter().map(|i| &events[*i]["payload"]).collect();
    for a in announced {
        let id = a["child_session_id"].as_str().unwrap();
        assert!(children.iter().any(|c| c == id), "{id} in {children:?}");
    }
}

/// Hermes marks a delegated child's row `model_config._delegate_from` = its parent (its
/// pickers leave such rows out by it); ours is marked too, in a state.db the gateway created
/// and in one from before the column existed (which gains it: Hermes' own have it).
#[test]
fn a_childs_stored_row_names_its_parent_in_model_config() {
    for older in [false, true] {
        let home = TempHome::new("sub-from");
        if older {
            let db = rusqlite::Connection::open(home.path.join("state.db")).unwrap();
            db.execute_batch(
                "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL,
                     started_at REAL NOT NULL);
                 CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
                     session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT,
                     timestamp REAL NOT NULL);",
            )
            .unwrap();
        }
        let mut t = tree_in(&home, "sub-from");
        t.delegate(json!({"goal": t.runs("echo from-{m}")}));
        let children = t.stored_children();
        assert_eq!(children.len(), 1, "{children:?}");
        let db = t.g.db();
        let config = |id: &str| -> Option<String> {
            let sql = "SELECT model_config FROM sessions WHERE id = ?1";
            db.query_row(sql, [id], |r| r.get(0)).unwrap()
        };
        let child = config(&children[0].0).expect("the child's row has a model_config");
        let child: Value = serde_json::from_str(&child).unwrap();
        assert_eq!(child, json!({"_delegate_from": t.stored}), "older: {older}");
        assert_eq!(config(&t.stored), None, "the parent is no one's delegate");
        // Hermes' own test for a delegated row finds it.
        let marked: String = db
            .query_row(
                "SELECT id FROM sessions
                 WHERE json_extract(COALESCE(model_config, '{}'), '$._delegate_from') = ?1",
                [&t.stored],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(marked, children[0].0);
    }
}

#[test]
fn limits_and_the_pause_refuse_with_the_reason() {
    let home = TempHome::new("sub-limits");
    let mut t = tree_in(&home, "sub-limits");
    let many: Vec<Value> = (0..1000)
        .map(|i| json!({"goal": format!("g{i}")}))
        .collect();
    let (_, result) = t.refused(json!({"tasks": many}));
    let err = result["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}"));
    assert!(
        err.contains("1000 provided") && err.contains("is 3"),
        "{err}"
    );
    assert!(t.stored_children().is_empty());

    let paused = t.g.call("delegation.pause", json!({"paused": true}));
    assert_eq!(paused["paused"], true);
    let st = t.g.call("delegation.status", json!({}));
    assert_eq!(st["paused"], true);
    assert_eq!(st["max_concurrent_children"], 3);
    assert_eq!(st["max_spawn_depth"], 1);
    let (_, result) = t.refused(json!({"goal": "anything"}));
    assert!(
        result["error"].as_str().unwrap().contains("paused"),
        "{result}"
    );
    t.g.call("delegation.pause", json!({"paused": false}));

    // A child cannot delegate (depth 1 of 1) or ask the user: it is not offered either.
    let inner = delegate_prompt(json!({"goal": "deeper"}));
    let d = t.delegate(json!({"goal": inner}));
    let refused = "tool delegate_task is not available to a subagent";
    assert!(d.text.contains(refused), "{}", d.text);
    // (The 1,000 tasks above made the parent compact: its child is its continuation's.)
    let start = &of_type(&d.dispatch.events, "subagent.start")[0]["payload"];
    let child = start["child_session_id"].as_str().unwrap();
    let rows = message_rows(&t.g.db_path(), child);
    let refusal = rows.iter().find(|r| r.role == "tool").unwrap();
    assert_eq!(refusal.tool_name.as_deref(), Some("delegate_task"));
    assert!(
        refusal.content.as_deref().unwrap().contains(refused),
        "{refusal:?}"
    );
}

#[test]
fn a_childs_command_that_needs_approval_is_denied_unless_the_config_allows() {
    let home = TempHome::new("sub-approve");
    let mut t = tree_in(&home, "sub-approve");
    // Dangerous in form, harmless in fact: `rm -rf ~/…` of a folder of the test's private HOME.
    let name = format!("scratch-{}", t.m);
    let scratch = home.path.join(&name);
    make_dir_with_file(&scratch);
    let goal = format!("$ rm -rf ~/{name}");
    let d = t.delegate(json!({"goal": goal}));
    let sid = t.sid.clone();
    let asked = |g: &mut Gateway| of_type(&g.events_of_session(&sid), "approval.request").len();
    assert_eq!(asked(&mut t.g), 0, "nobody is asked");
    assert!(
        task_part(&d.text, 1).contains("status=completed"),
        "{}",
        d.text
    );
    assert!(scratch.exists(), "the denied command did not run");
    let child = &t.stored_children()[0].0;
    let rows = message_rows(&t.g.db_path(), child);
    let denial = rows.iter().find(|r| r.role == "tool").unwrap();
    assert!(
        denial
            .content
            .as_deref()
            .unwrap()
            .contains("subagent_auto_approve"),
        "{denial:?}"
    );

    // With `delegation.subagent_auto_approve: true` it runs, still without asking.
    delegation_config(&home, "subagent_auto_approve: true");
    t.delegate(json!({"goal": goal}));
    assert_eq!(asked(&mut t.g), 0);
    assert!(!scratch.exists(), "the approved command ran");
}

#[test]
fn the_parent_goes_on_while_its_children_run_and_its_interrupt_leaves_them_running() {
    let home = TempHome::new("sub-interrupt");
    let mut t = tree_in(&home, "sub-interrupt");
    let tasks: Vec<Value> = (0..2)
        .map(|i| json!({"goal": t.runs(&format!("sleep 30{i}.{{m}}"))}))
        .collect();
    let (_, answer) = t.dispatch(json!({"tasks": tasks}));
    wait_for_proc("sleep", &format!("300.{}", t.m), T);
    wait_for_proc("sleep", &format!("301.{}", t.m), T);
    assert_eq!(t.active().len(), 2);
    // Subagents are not sessions the user switches to: the picker lists the parent alone.
    let live = t.g.call("session.active_list", json!({}));
    assert_eq!(listed_ids(&live), [t.sid.as_str()], "{live}");

    // The parent's next turn runs while they work; interrupting it stops that turn alone
    // (Hermes' Stop: background subagents are not the turn's).
    let sid = t.sid.clone();
    let own = t.runs("sleep 302.{m}");
    let start = submit(&mut t.g, &sid, &own);
    wait_for_proc("sleep", &format!("302.{}", t.m), T);
    t.g.call("session.interrupt", json!({"session_id": sid}));
    let turn = t.g.finish_turn(&sid, start, T);
    assert_eq!(turn.complete["payload"]["status"], "interrupted");
    assert_none_left(&format!("302.{}", t.m), T, "the parent's own command");
    wait_for_proc("sleep", &format!("300.{}", t.m), T);
    wait_for_proc("sleep", &format!("301.{}", t.m), T);
    assert_eq!(t.active().len(), 2);

    // Stopped from the agents overlay, each says so in the result that then arrives.
    for a in t.active() {
        let r = t.g.call(
            "subagent.interrupt",
            json!({"subagent_id": a["subagent_id"]}),
        );
        assert_eq!(r["found"], true, "{r}");
    }
    let (result, text) = t.result_of(&answer);
    assert_eq!(result.complete["payload"]["status"], "complete");
    for n in 1..=2 {
        assert!(task_part(&text, n).contains("status=interrupted"), "{text}");
    }
    assert_none_left(&format!(".{}", t.m), T, "children's commands");
    assert!(t.active().is_empty());
    assert_eq!(
        of_type(&t.g.events_of_session(&sid), "subagent.complete").len(),
        2
    );
}

#[test]
fn one_child_can_be_interrupted_alone() {
    let home = TempHome::new("sub-one-stop");
    let mut t = tree_in(&home, "sub-one-stop");
    let tasks = vec![
        json!({"goal": t.runs("sleep 310.{m}")}),
        json!({"goal": t.runs("sleep 2.{m}; echo second-done")}),
    ];
    let (_, answer) = t.dispatch(json!({"tasks": tasks}));
    wait_for_proc("sleep", &format!("310.{}", t.m), T);
    let first = t
        .active()
        .into_iter()
        .find(|a| a["goal"].as_str().unwrap().contains("310"))
        .unwrap();
    let id = first["subagent_id"].as_str().unwrap();
    let r = t.g.call("subagent.interrupt", json!({"subagent_id": id}));
    assert_eq!(r["found"], true, "{r}");
    let (_, text) = t.result_of(&answer);
    assert!(task_part(&text, 1).contains("status=interrupted"), "{text}");
    let second = task_part(&text, 2);
    assert!(
        second.contains("status=completed") && second.contains("second-done"),
        "{text}"
    );
    let again = t.g.call("subagent.interrupt", json!({"subagent_id": id}));
    assert_eq!(again["found"], false);
    assert_eq!(
        t.g.expect_code("subagent.interrupt", json!({}), 4000),
        "subagent_id required"
    );
}

/// A command that waits for `file` to exist.
fn wait_for_file(file: &std::path::Path) -> String {
    format!("while [ ! -e {} ]; do sleep 0.02; done", file.display())
}

#[test]
fn a_result_that_comes_during_a_turn_waits_for_its_end() {
    let home = TempHome::new("sub-held");
    let mut t = tree_in(&home, "sub-held");
    let go = home.path.join(format!("go-{}", t.m));
    let done = home.path.join(format!("done-{}", t.m));
    let goal = t.runs(&format!(
        "{}; echo child-finished-{{m}}",
        wait_for_file(&go)
    ));
    let (_, answer) = t.dispatch(json!({"goal": goal}));
    // The parent's next turn lets the child finish, then waits: the result comes meanwhile.
    let sid = t.sid.clone();
    let own = format!("$ touch {}; {}", go.display(), wait_for_file(&done));
    let start = submit(&mut t.g, &sid, &own);
    let status = t.g.wait_session_event(&sid, "status.update", T);
    let text = status["payload"]["text"].as_str().unwrap().to_string();
    assert!(text.contains("child-finished-"), "{status}");
    std::fs::write(&done, b"").unwrap();
    let turn = t.g.finish_turn(&sid, start, T);
    assert_eq!(turn.complete["payload"]["status"], "complete");
    assert!(turn.text.contains("exited with status 0"), "{}", turn.text);
    // Then the result is a turn of its own, after that one.
    let (result, said) = t.result_of(&answer);
    assert_eq!(said, text);
    assert!(result.text.contains(text.trim()), "{}", result.text);
    let rows = message_rows(&t.g.db_path(), &t.stored);
    let users: Vec<&str> = (rows.iter().filter(|r| r.role == "user"))
        .filter_map(|r| r.content.as_deref())
        .collect();
    assert_eq!(
        users[users.len() - 2..],
        [own.as_str(), text.as_str()],
        "{rows:?}"
    );
}

#[test]
fn past_the_cap_on_background_delegations_a_call_waits_and_says_why() {
    let home = TempHome::new("sub-cap");
    delegation_config(&home, "max_concurrent_children: 1");
    let mut t = tree_in(&home, "sub-cap");
    let go = home.path.join(format!("go-{}", t.m));
    let first = t.runs(&format!("{}; echo first-{{m}}", wait_for_file(&go)));
    let (_, answer) = t.dispatch(json!({"goal": first}));
    // One runs in the background: the next call waits for its child, as Hermes' does.
    let sid = t.sid.clone();
    let turn = t.g.run_turn(
        &sid,
        &delegate_prompt(json!({"goal": t.runs("echo second-{m}")})),
    );
    let result = call_result(&turn);
    assert_eq!(result["results"][0]["status"], "completed", "{result}");
    let summary = result["results"][0]["summary"].as_str().unwrap();
    assert!(summary.contains("second-"), "{result}");
    let note = result["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("delegation.max_concurrent_children"),
        "{result}"
    );
    // The first goes on, and its result comes as ever.
    std::fs::write(&go, b"").unwrap();
    let (_, text) = t.result_of(&answer);
    assert!(text.contains("first-"), "{text}");
}

#[test]
fn an_idle_parent_is_not_reaped_while_its_children_run() {
    let home = TempHome::new("sub-reap");
    let mut t = tree_with(&home, "sub-reap", &[("HERMES_TUI_SESSION_TTL_S", "1")]);
    let go = home.path.join(format!("go-{}", t.m));
    let goal = t.runs(&format!("{}; echo late-{{m}}", wait_for_file(&go)));
    let (_, answer) = t.dispatch(json!({"goal": goal}));
    // An idle session beside it is reaped; the delegating one stays.
    let other = t.g.create_session(json!({}));
    let live = |g: &mut Gateway| {
        listed_ids(&g.call("session.active_list", json!({})))
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    assert!(
        poll_until(T, || !live(&mut t.g).contains(&other.id)),
        "never reaped"
    );
    assert!(live(&mut t.g).contains(&t.sid));
    assert_eq!(t.active().len(), 1);
    std::fs::write(&go, b"").unwrap();
    let (_, text) = t.result_of(&answer);
    assert!(text.contains("late-"), "{text}");
}

#[test]
fn a_child_past_its_timeout_is_stopped_and_reported_as_timed_out() {
    let home = TempHome::new("sub-timeout");
    // config.yaml asks for 0.1 s; the floor (Hermes' 30 s, lowered here) makes it 1 s.
    let floor = [("TUI_GATEWAY_SUBAGENT_TIMEOUT_FLOOR_S", "1")];
    let mut t = tree_with(&home, "sub-timeout", &floor);
    delegation_config(&home, "child_timeout_seconds: 0.1");
    let tasks = vec![
        json!({"goal": t.runs("sleep 320.{m}")}),
        json!({"goal": t.runs("echo quick-{m}")}),
    ];
    let d = t.delegate(json!({"tasks": tasks}));
    let slow = task_part(&d.text, 1);
    assert!(slow.contains("(status=timeout, api_calls=1,"), "{slow}");
    assert!(slow.contains("(no summary — status=timeout: "), "{slow}");
    assert!(slow.contains("timed out after 1.0s"), "{slow}");
    // Its sibling, done in time, is untouched.
    let quick = task_part(&d.text, 2);
    assert!(
        quick.contains("status=completed") && quick.contains("quick-"),
        "{quick}"
    );
    // The command it was running is gone, and nothing of it stays in memory.
    assert_none_left(&format!("320.{}", t.m), T, "a timed-out child's command");
    assert!(t.active().is_empty());
    let sid = t.sid.clone();
    let completes = of_type(&t.g.events_of_session(&sid), "subagent.complete")
        .into_iter()
        .map(|e| e["payload"].clone())
        .collect::<Vec<_>>();
    let said = completes.iter().find(|p| p["task_index"] == 0).unwrap();
    assert_eq!(said["status"], "timeout", "{said}");
    assert_eq!(said["summary"], "");
    assert!(
        said["text"]
            .as_str()
            .unwrap()
            .starts_with("Timed out after"),
        "{said}"
    );
    // Both children are stored as ended subagents; the parent goes on.
    assert_eq!(t.stored_children().len(), 2);
    let next = t.g.run_turn(&sid, "hello again");
    assert_eq!(next.complete["payload"]["status"], "complete");
}

#[test]
fn a_kill_mid_batch_leaves_nothing_running_and_valid_transcripts() {
    let home = TempHome::new("sub-kill");
    let mut t = tree_in(&home, "sub-kill");
    let tasks: Vec<Value> = (0..2)
        .map(|i| json!({"goal": t.runs(&format!("sleep 32{i}.{{m}}"))}))
        .collect();
    t.dispatch(json!({"tasks": tasks}));
    wait_for_proc("sleep", &format!("320.{}", t.m), T);
    wait_for_proc("sleep", &format!("321.{}", t.m), T);
    t.g.signal(libc::SIGKILL);
    t.g.wait_exit(T);
    assert_none_left(&format!(".{}", t.m), T, "children's commands after SIGKILL");

    // A new gateway on the same home: the parent resumes, its call answered (`dispatched`).
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("sub-kill-2")
        .start();
    let r = g.call("session.resume", json!({"session_id": t.stored}));
    let sid = r["session_id"].as_str().unwrap().to_string();
    let rows = message_rows(&g.db_path(), &t.stored);
    let calls: Vec<String> = rows.iter().flat_map(|r| r.call_ids()).collect();
    assert!(!calls.is_empty(), "{rows:?}");
    for id in &calls {
        assert!(
            rows.iter()
                .any(|r| r.role == "tool" && r.tool_call_id.as_deref() == Some(id)),
            "call {id} has a result: {rows:?}"
        );
    }
    let turn = g.run_turn(&sid, "still there?");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    // Every child is ended and its transcript holds its goal.
    let children = stored_children(&g.db(), &t.stored);
    assert_eq!(children.len(), 2, "{children:?}");
    for (id, _, end) in &children {
        assert!(end.is_some(), "child {id} ended");
        let rows = message_rows(&g.db_path(), id);
        assert_eq!(rows[0].role, "user", "{rows:?}");
    }
}

/// Hermes' next start reports a background delegation whose owner process died as an
/// `unknown` outcome; ours does too: after a SIGKILL the restart's repair adds the notice to
/// the parent's transcript, naming each child (goal, subagent, session), once. A delegation
/// whose result had arrived before the kill is not reported again.
#[test]
fn a_background_delegation_cut_off_by_a_kill_is_reported_as_unknown_after_the_restart() {
    let home = TempHome::new("sub-lost");
    let mut t = tree_in(&home, "sub-lost");
    let done = t.delegate(json!({"goal": t.runs("echo done-{m}")}));
    let done_id = done.answer["delegation_id"].as_str().unwrap().to_string();
    let goals = [t.runs("sleep 350.{m}"), t.runs("sleep 351.{m}")];
    let tasks: Vec<Value> = goals.iter().map(|g| json!({"goal": g})).collect();
    let (dispatch, answer) = t.dispatch(json!({"tasks": tasks}));
    let lost_id = answer["delegation_id"].as_str().unwrap().to_string();
    let started = of_type(&dispatch.events, "subagent.start");
    let named: Vec<(String, String)> = started
        .iter()
        .map(|e| {
            let p = &e["payload"];
            let id = |k: &str| p[k].as_str().unwrap().to_string();
            (id("subagent_id"), id("child_session_id"))
        })
        .collect();
    assert_eq!(named.len(), 2, "{:?}", types(&dispatch.events));
    wait_for_procs("sleep", &format!(".{}", t.m), 2, T);
    t.g.signal(libc::SIGKILL);
    t.g.wait_exit(T);
    assert_none_left(&format!(".{}", t.m), T, "children's commands after SIGKILL");

    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("sub-lost-2")
        .start();
    let r = g.call("session.resume", json!({"session_id": t.stored}));
    let texts = shown(&r["messages"]);
    let head = |id: &str| format!("[ASYNC DELEGATION BATCH COMPLETE — {id}]");
    let about = |id: &str| -> Vec<String> {
        let told = texts
            .iter()
            .filter(|(role, text)| role == "user" && text.starts_with(&head(id)));
        told.map(|(_, text)| text.clone()).collect()
    };
    assert_eq!(about(&done_id).len(), 1, "the finished one once: {texts:?}");
    // The start says what its repair did.
    let said = g.stderr_with("background delegation's outcome is unknown", T);
    assert!(
        said.contains("told 1 session(s) a background delegation's outcome is unknown"),
        "{said}"
    );
    let lost = about(&lost_id);
    assert_eq!(lost.len(), 1, "{texts:?}\n{}", g.stderr_text());
    let lost = &lost[0];
    assert!(lost.contains("outcome is unknown"), "{lost}");
    for (i, (subagent, session)) in named.iter().enumerate() {
        let part = task_part(lost, i + 1);
        assert!(part.contains(&goals[i]), "{part}");
        assert!(part.contains("status=unknown"), "{part}");
        assert!(part.contains(subagent) && part.contains(session), "{part}");
    }
    // The model reads it with the next prompt; a later restart does not add it again.
    let sid = r["session_id"].as_str().unwrap().to_string();
    let turn = g.run_turn(&sid, "what happened?");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    drop(g);
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("sub-lost-3")
        .start();
    let r = g.call("session.resume", json!({"session_id": t.stored}));
    let again = shown(&r["messages"]);
    let told = again
        .iter()
        .filter(|(_, text)| text.starts_with(&head(&lost_id)));
    assert_eq!(told.count(), 1, "{again:?}");
}

/// The same when the gateway dies beside another that runs on: resuming the parent there
/// repairs it first, and the notice is in what the resume shows.
#[test]
fn a_lost_delegation_is_reported_to_the_gateway_that_resumes_its_parent() {
    let home = TempHome::new("sub-lost-beside");
    let mut t = tree_in(&home, "sub-lost-beside");
    let goal = t.runs("sleep 360.{m}");
    let (_, answer) = t.dispatch(json!({"goal": goal}));
    let id = answer["delegation_id"].as_str().unwrap().to_string();
    wait_for_proc("sleep", &format!("360.{}", t.m), T);
    let mut other = Gateway::builder()
        .home(&home.path)
        .tag("sub-lost-beside-2")
        .start();
    t.g.signal(libc::SIGKILL);
    t.g.wait_exit(T);
    assert_none_left(&format!(".{}", t.m), T, "the child's command after SIGKILL");
    let r = other.call("session.resume", json!({"session_id": t.stored}));
    let texts = shown(&r["messages"]);
    let head = format!("[ASYNC DELEGATION BATCH COMPLETE — {id}]");
    let (role, text) = texts.last().unwrap();
    assert!(
        role == "user" && text.starts_with(&head),
        "the last message is the notice: {texts:?}"
    );
    assert!(task_part(text, 1).contains("status=unknown"), "{text}");
    assert!(task_part(text, 1).contains(&goal), "{text}");
}

#[test]
fn spawn_trees_saved_by_the_tui_are_listed_and_loaded_after_a_restart() {
    let home = TempHome::new("sub-trees");
    let mut g = Gateway::builder().home(&home.path).tag("sub-trees").start();
    let tree = json!([{"id": "sa-0-x", "goal": "look", "status": "completed"}]);
    let saved = g.call(
        "spawn_tree.save",
        json!({"session_id": "s/1", "subagents": tree, "label": "look", "finished_at": 1.8e9}),
    );
    let path = saved["path"].as_str().unwrap().to_string();
    assert!(path.contains("spawn-trees/s_1/"), "{path}");
    assert_eq!(
        g.expect_code(
            "spawn_tree.save",
            json!({"session_id": "s", "subagents": []}),
            4000
        ),
        "subagents list required"
    );
    drop(g);
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("sub-trees-2")
        .start();
    let list = g.call("spawn_tree.list", json!({"session_id": "s/1"}));
    assert_eq!(list["entries"][0]["path"], path.as_str(), "{list}");
    assert_eq!(list["entries"][0]["count"], 1);
    let all = g.call("spawn_tree.list", json!({"cross_session": true}));
    assert_eq!(all["entries"].as_array().unwrap().len(), 1);
    let loaded = g.call("spawn_tree.load", json!({"path": path}));
    assert_eq!(loaded["subagents"], tree);
    let outside = home.path.join("config.yaml");
    std::fs::write(&outside, "x: 1\n").unwrap();
    let (code, msg, _) = g.call_err("spawn_tree.load", json!({"path": outside}));
    assert_eq!(code, 4030, "{msg}");
}

/// Every delegate_task call in the parent's stored transcript has its result.
fn assert_calls_answered(db: &std::path::Path, stored: &str) {
    let rows = message_rows(db, stored);
    let calls: Vec<String> = rows.iter().flat_map(|r| r.call_ids()).collect();
    assert!(!calls.is_empty(), "{rows:?}");
    for id in &calls {
        assert!(
            rows.iter()
                .any(|r| r.role == "tool" && r.tool_call_id.as_deref() == Some(id)),
            "call {id} has a result: {rows:?}"
        );
    }
}

#[test]
fn closing_the_parent_or_sigterm_mid_delegation_ends_every_child_and_keeps_the_result() {
    let home = TempHome::new("sub-close");
    let mut t = tree_in(&home, "sub-close");
    let tasks = vec![
        json!({"goal": t.runs("sleep 340.{m}")}),
        json!({"goal": t.runs("echo early-{m}")}),
    ];
    t.dispatch(json!({"tasks": tasks}));
    wait_for_proc("sleep", &format!("340.{}", t.m), T);
    let sid = t.sid.clone();
    poll_until(T, || {
        of_type(&t.g.events_of_session(&sid), "subagent.complete").len() == 1
    });
    t.g.call("session.close", json!({"session_id": t.sid}));
    assert_none_left(
        &format!("340.{}", t.m),
        T,
        "the child's command after session.close",
    );
    poll_until(T, || t.active().is_empty());
    assert_calls_answered(&t.g.db_path(), &t.stored);
    // The parent's stored transcript ends with the result as it stood: the finished child's
    // report, the other cut off by the close.
    let kept = |db: &std::path::Path, stored: &str| {
        let rows = message_rows(db, stored);
        let last = rows.last().unwrap();
        assert_eq!(last.role, "user", "{rows:?}");
        last.content.clone().unwrap()
    };
    let text = kept(&t.g.db_path(), &t.stored);
    assert!(
        text.starts_with("[ASYNC DELEGATION BATCH COMPLETE — deleg_"),
        "{text}"
    );
    let first = task_part(&text, 1);
    assert!(first.contains("status=interrupted"), "{text}");
    assert!(first.contains("parent session was closed"), "{text}");
    let second = task_part(&text, 2);
    assert!(
        second.contains("status=completed") && second.contains("early-"),
        "{text}"
    );

    // SIGTERM with children running: the ordered shutdown ends them with the parent, and the
    // parent's transcript keeps what happened.
    let s = t.g.create_session(json!({}));
    let tasks: Vec<Value> = (0..2)
        .map(|i| json!({"goal": t.runs(&format!("sleep 35{i}.{{m}}"))}))
        .collect();
    let start = submit(&mut t.g, &s.id, &delegate_prompt(json!({"tasks": tasks})));
    let turn = t.g.finish_turn(&s.id, start, T);
    assert_eq!(call_result(&turn)["status"], "dispatched");
    wait_for_proc("sleep", &format!("351.{}", t.m), T);
    t.g.signal(libc::SIGTERM);
    t.g.wait_exit(T);
    assert_none_left(&format!(".{}", t.m), T, "children's commands after SIGTERM");
    assert_calls_answered(&t.g.db_path(), &s.stored);
    let text = kept(&t.g.db_path(), &s.stored);
    for n in 1..=2 {
        let part = task_part(&text, n);
        assert!(part.contains("status=interrupted"), "{text}");
        assert!(part.contains("gateway shut down"), "{text}");
    }
    let db = t.g.db();
    let open: i64 = db
        .query_row(
            "SELECT count(*) FROM sessions WHERE source = 'subagent' AND ended_at IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(open, 0, "every child's row is ended");
}

#[test]
fn an_orchestrator_childs_delegation_waits_for_its_own_children() {
    let home = TempHome::new("sub-orch");
    delegation_config(&home, "max_spawn_depth: 2");
    let mut t = tree_in(&home, "sub-orch");
    let inner = delegate_prompt(json!({"goal": t.runs("echo grandchild-{m}")}));
    let d = t.delegate(json!({"goal": inner, "role": "orchestrator"}));
    // The orchestrator's own call waited: its result holds the grandchild's report.
    let children = t.stored_children();
    assert_eq!(children.len(), 1, "{children:?}");
    let rows = message_rows(&t.g.db_path(), &children[0].0);
    let call = rows.iter().find(|r| r.role == "tool").unwrap();
    assert_eq!(call.tool_name.as_deref(), Some("delegate_task"));
    let result: Value = serde_json::from_str(call.content.as_deref().unwrap()).unwrap();
    assert!(result.get("status").is_none(), "not dispatched: {result}");
    let entry = &result["results"][0];
    assert_eq!(entry["status"], "completed", "{result}");
    let said = entry["summary"].as_str().unwrap();
    assert!(said.contains(&format!("grandchild-{}", t.m)), "{result}");
    // Its report, made with that result, reaches the parent in the one message.
    let part = task_part(&d.text, 1);
    assert!(
        part.contains("status=completed") && part.contains("grandchild-"),
        "{part}"
    );
    let grandchildren = stored_children(&t.g.db(), &children[0].0);
    assert_eq!(grandchildren.len(), 1, "{grandchildren:?}");
    // The grandchild's events reached the parent's client, a level down.
    let sid = t.sid.clone();
    let starts = of_type(&t.g.events_of_session(&sid), "subagent.start")
        .into_iter()
        .map(|e| e["payload"]["depth"].clone())
        .collect::<Vec<_>>();
    assert_eq!(starts, [json!(0), json!(1)]);
}

/// A model call of the mock: one tool call `name(args)`.
fn call_reply(name: &str, args: &Value, id: &str) -> mockai::Reply {
    let events = vec![
        mockai::ev_role(),
        mockai::ev_tool_start(0, id, name, &args.to_string()),
        mockai::ev_finish("tool_calls"),
        mockai::ev_usage(10, 5),
    ];
    mockai::Reply::Stream(mockai::Stream::new(events))
}

/// The parent's side of a mock model that delegates `tasks` once per prompt: the call, then
/// "parent done" after its answer, then "results read" after the children's combined result.
fn parent_reply(messages: &[Value], tasks: &Value) -> mockai::Reply {
    let last = messages.last().unwrap();
    if last["role"] == "tool" {
        return mockai::Reply::text(&["parent done"], (10, 2));
    }
    let text = last["content"].as_str().unwrap_or("");
    if text.starts_with("[ASYNC DELEGATION BATCH COMPLETE") {
        return mockai::Reply::text(&["results read"], (10, 2));
    }
    call_reply("delegate_task", tasks, "d1")
}

/// A mock model: a subagent's calls (its system prompt holds its task) are answered by
/// `child` (given how many messages it was sent); the parent delegates `goal` ([`parent_reply`]).
fn delegating_model(
    goal: &'static str,
    child: impl Fn(usize) -> mockai::Reply + Send + Sync + 'static,
) -> mockai::MockAi {
    mockai::MockAi::start(move |r| {
        let messages = r.messages();
        let system = messages[0]["content"].as_str().unwrap_or("");
        if system.contains("YOUR TASK:") {
            return child(messages.len());
        }
        parent_reply(&messages, &json!({"goal": goal}))
    })
}

/// A parent's prompt that delegates, seen through: the turn that dispatched, then the one the
/// combined result started (the model's "results read"); that turn, and the result as the
/// model got it.
fn delegating_turns(
    g: &mut Gateway,
    sid: &str,
    mock: &mockai::MockAi,
    prompt: &str,
) -> (Turn, String) {
    let turn = g.run_turn(sid, prompt);
    assert_eq!(turn.text, "parent done", "{:?}", turn.events);
    assert_eq!(call_result(&turn)["status"], "dispatched");
    let next = g.frames.len();
    let result = g.finish_turn(sid, next, T);
    assert_eq!(result.text, "results read", "{:?}", result.events);
    let requests = mock.requests();
    let seen = requests.iter().rev().find_map(|r| {
        let messages = r.messages();
        let last = messages.last()?["content"].as_str()?.to_string();
        last.starts_with("[ASYNC DELEGATION").then_some(last)
    });
    (
        result,
        seen.expect("the model was sent the combined result"),
    )
}

/// A gateway on `home` against `mock`, a session, and the text of its first delegation's
/// combined result as the model was sent it.
fn delegating_turn(home: &TempHome, mock: &mockai::MockAi, tag: &str) -> (Gateway, String, String) {
    let mut g = Gateway::builder()
        .home(&home.path)
        .openai_mock(&mock.base_url())
        .tag(tag)
        .start();
    let s = g.create_session(json!({}));
    let (_, seen) = delegating_turns(&mut g, &s.id, mock, "split the work");
    (g, s.id, seen)
}

#[test]
fn a_child_that_never_stops_ends_at_its_budget_with_only_a_childs_tools() {
    let home = TempHome::new("sub-budget");
    delegation_config(&home, "max_iterations: 3");
    std::fs::create_dir_all(home.path.join("memories")).unwrap();
    std::fs::write(home.path.join("memories/MEMORY.md"), "user-note-7f3").unwrap();
    // The parent delegates once, then reports; the child calls `terminal` forever.
    let mock = delegating_model("loop forever", |n| {
        call_reply("terminal", &json!({"command": "true"}), &format!("c{n}"))
    });
    let (_g, _, seen) = delegating_turn(&home, &mock, "sub-budget");
    let part = task_part(&seen, 1);
    assert!(part.contains("(status=failed, api_calls=3,"), "{part}");
    assert!(part.contains("stopped after 3 model calls"), "{part}");

    let requests = mock.requests();
    let child: Vec<_> = requests
        .iter()
        .filter(|r| {
            r.messages()[0]["content"]
                .as_str()
                .is_some_and(|c| c.contains("YOUR TASK:\nloop forever"))
        })
        .collect();
    assert_eq!(child.len(), 3, "three model calls, then the budget");
    let offered: Vec<&str> = child[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"terminal"), "{offered:?}");
    for blocked in ["delegate_task", "clarify", "memory"] {
        assert!(
            !offered.contains(&blocked),
            "{blocked} offered to a child: {offered:?}"
        );
    }
    let parent_tools = requests[0].body["tools"].to_string();
    assert!(parent_tools.contains("delegate_task"));
    // The user's memory is the parent's, not the child's (Hermes' `skip_memory`).
    let system = |r: &mockai::Recorded| {
        r.messages()[0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(system(&requests[0]).contains("user-note-7f3"));
    let child_system = system(child[0]);
    assert!(!child_system.contains("user-note-7f3"), "{child_system}");
    assert!(child_system.starts_with("You are Hermes"), "{child_system}");
}

#[test]
fn children_run_on_the_model_delegation_names_and_a_provider_it_cannot_reach_is_said() {
    let home = TempHome::new("sub-model");
    delegation_config(&home, "model: small-child-model");
    let mock = delegating_model("look", |_| mockai::Reply::text(&["done"], (10, 2)));
    let (mut g, sid, seen) = delegating_turn(&home, &mock, "sub-model");
    assert!(seen.contains("Model: small-child-model"), "{seen}");
    let mut models: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or("").to_string())
        .collect();
    // The child's call and the parent's second one run at the same time.
    models.sort();
    assert_eq!(
        models,
        [
            "mock-model",
            "mock-model",
            "mock-model",
            "small-child-model"
        ],
        "{models:?}"
    );

    delegation_config(&home, "provider: no-such-provider");
    let turn = g.run_turn(&sid, "again");
    let done = of_type(&turn.events, "tool.complete");
    let err = done[0]["payload"]["result"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        err.contains("delegation.provider \"no-such-provider\""),
        "{}",
        done[0]
    );
}

#[test]
fn children_reach_the_endpoint_delegation_base_url_names_with_the_parents_key_or_their_own() {
    let home = TempHome::new("sub-base-url");
    let own = mockai::MockAi::start(|_| mockai::Reply::text(&["child done"], (10, 2)));
    let config = |extra: &str| {
        let text = format!("delegation:\n  base_url: {}/\n{extra}", own.base_url());
        std::fs::write(home.path.join("config.yaml"), text).unwrap();
    };
    config("");
    let mock = delegating_model("look", |_| {
        mockai::Reply::text(&["wrong endpoint"], (10, 2))
    });
    let (mut g, sid, seen) = delegating_turn(&home, &mock, "sub-base-url");
    assert!(task_part(&seen, 1).ends_with(") ---\nchild done"), "{seen}");
    let parent_side = |mock: &mockai::MockAi| {
        mock.requests()
            .iter()
            .filter(|r| {
                r.messages()[0]["content"]
                    .as_str()
                    .unwrap_or("")
                    .contains("YOUR TASK:")
            })
            .count()
    };
    assert_eq!(
        parent_side(&mock),
        0,
        "no child's call reached the parent's endpoint"
    );
    let asked = own.requests();
    assert_eq!(asked.len(), 1);
    // No key of its own: the parent's (Hermes' inheritance), on the parent's model.
    assert_eq!(asked[0].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(asked[0].body["model"], "mock-model");

    config("  api_key: sk-child-own-5e1\n  model: child-model\n");
    let (_, seen) = delegating_turns(&mut g, &sid, &mock, "again");
    assert!(task_part(&seen, 1).ends_with(") ---\nchild done"), "{seen}");
    let asked = own.requests();
    assert_eq!(
        asked[1].header("authorization"),
        Some("Bearer sk-child-own-5e1")
    );
    assert_eq!(asked[1].body["model"], "child-model");
    // The key reaches the endpoint only: nothing of it is in the store's files.
    for file in ["state.db", "state.db-wal"] {
        let bytes = std::fs::read(home.path.join(file)).unwrap_or_default();
        let found = bytes.windows(16).any(|w| w == b"sk-child-own-5e1");
        assert!(!found, "the key is in {file}");
    }
}

#[test]
fn a_delegation_journaled_under_a_lock_survives_a_kill() {
    let home = TempHome::new("sub-journal");
    let mut t = tree_in(&home, "sub-journal");
    let mut lock = crate::crashkit::DbLock::take(&t.g.db_path());
    let d = t.delegate(json!({"tasks": [{"goal": "g0 w50"}, {"goal": "g1 w83"}]}));
    assert_eq!(d.dispatch.complete["payload"]["status"], "complete");
    assert!(
        task_part(&d.text, 2).contains("status=completed"),
        "{}",
        d.text
    );
    lock.release();
    t.g.signal(libc::SIGKILL);
    t.g.wait_exit(T);
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("sub-journal-2")
        .start();
    let r = g.call("session.resume", json!({"session_id": t.stored}));
    let texts = shown(&r["messages"]);
    assert!(
        texts
            .iter()
            .any(|(_, t)| t.contains("delegate_task returned")),
        "{texts:?}\n{}",
        g.stderr_text()
    );
    assert!(
        texts.iter().any(|(_, t)| *t == d.text),
        "the combined result is kept: {texts:?}"
    );
}

/// Hermes folds its children's cost into the parent's; here the parent's figures stay its own
/// (what its state.db row holds) and what its subagents used comes beside them, so a sum over
/// state.db's rows counts every session once.
#[test]
fn what_the_children_used_rolls_up_into_the_parents_usage_without_counting_twice() {
    let home = TempHome::new("sub-usage");
    // A priced model (GPT-4.1): each child answers at once with 1,000 tokens in, 100 out.
    let mock = mockai::MockAi::start(move |r| {
        let messages = r.messages();
        let system = messages[0]["content"].as_str().unwrap_or("");
        if system.contains("YOUR TASK:") {
            return mockai::Reply::text(&["child report"], (1_000, 100));
        }
        let tasks = json!({"tasks": [{"goal": "part a"}, {"goal": "part b"}]});
        parent_reply(&messages, &tasks)
    });
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("sub-usage")
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "gpt-4.1")
        .start();
    let s = g.create_session(json!({}));
    let (turn, _) = delegating_turns(&mut g, &s.id, &mock, "split the work");
    // The end of the turn the result started carries the rollup (the TUI reads `usage` there).
    let at_end = &turn.complete["payload"]["usage"];
    assert_eq!(at_end["subagents"]["count"], 2, "{at_end}");

    let u = g.call("session.usage", json!({"session_id": s.id}));
    let sub = &u["subagents"];
    assert_eq!(
        (&sub["count"], &sub["input"], &sub["output"], &sub["calls"]),
        (&json!(2), &json!(2_000), &json!(200), &json!(2)),
        "{u}"
    );
    // The parent's own figures are its three calls alone (the call, its answer, the result's).
    assert_eq!((&u["input"], &u["calls"]), (&json!(30), &json!(3)), "{u}");
    let own = u["cost_usd"].as_f64().unwrap();
    let children = sub["cost_usd"].as_f64().unwrap();
    assert!(children > 0.0 && own > 0.0, "{u}");
    let total = u["total_cost_usd"].as_f64().unwrap();
    assert!((total - (own + children)).abs() < 1e-12, "{u}");

    // state.db: the parent's row holds its own cost, each child's row its own; their sum is
    // the rolled-up total, counted once.
    let db = g.db_path();
    let rows = || -> Option<(f64, f64, i64)> {
        let db = rusqlite::Connection::open(&db).ok()?;
        let parent: f64 = db
            .query_row(
                "SELECT estimated_cost_usd FROM sessions WHERE id = ?1",
                [&s.stored],
                |r| r.get(0),
            )
            .ok()?;
        let (kids, n): (f64, i64) = db
            .query_row(
                "SELECT coalesce(sum(estimated_cost_usd), 0), count(*) FROM sessions
                 WHERE parent_session_id = ?1 AND source = 'subagent'",
                [&s.stored],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .ok()?;
        Some((parent, kids, n))
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    let mut seen = None;
    let stored = poll_until(T, || {
        seen = rows();
        seen.is_some_and(|(p, k, n)| n == 2 && close(p, own) && close(k, children))
    });
    assert!(stored, "state.db rows {seen:?}, usage {u}");

    // `/usage` says it too.
    let report = g.call(
        "slash.exec",
        json!({"command": "usage", "session_id": s.id}),
    );
    let text = report["output"].as_str().unwrap_or_default();
    assert!(
        text.contains("Subagents") && text.contains("2 ran"),
        "{report}"
    );
    assert!(text.contains("Cost with subagents"), "{report}");

    // After a restart, the resumed parent shows the same rollup, read from its children's rows.
    g.close_stdin();
    g.wait_exit(T);
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("sub-usage-2")
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "gpt-4.1")
        .start();
    let r = g.call("session.resume", json!({"session_id": s.stored}));
    let rid = r["session_id"].as_str().unwrap().to_string();
    let again = g.call("session.usage", json!({"session_id": rid}));
    assert_eq!(again["subagents"], u["subagents"], "{again}");
    let total_again = again["total_cost_usd"].as_f64().unwrap();
    assert!(close(total_again, total), "{again} against {u}");
}
