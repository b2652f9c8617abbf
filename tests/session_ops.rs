//! Session operations behind the TUI's slash commands (/undo, /retry, /status, /save, /branch,
//! /compress, /steer, /background, /stop, /reload, /reload-mcp, session switching), through the
//! real binary. Every operation that changes the store is checked after a SIGKILL right after
//! its answer and a restart + resume: the user sees what they saw before.

use crate::common;
use crate::mockai;

use common::*;
use serde_json::{Value, json};
use std::path::Path;

/// SIGKILL the gateway (right after the answer just read) and start a new one on the same home.
fn kill_and_restart(g: &mut Gateway, home: &Path, envs: &[(&str, &str)]) -> Gateway {
    g.signal(libc::SIGKILL);
    g.wait_exit(secs(10));
    let mut b = Gateway::builder().home(home);
    for (k, v) in envs {
        b = b.env(k, v);
    }
    let mut g = b.start();
    // gateway.ready is written before the store is opened and repaired; an answer comes after.
    g.ping();
    g
}

fn roles(db: &rusqlite::Connection, stored: &str) -> Vec<String> {
    rows_of(db, stored).into_iter().map(|r| r.role).collect()
}

fn session_col(db: &rusqlite::Connection, id: &str, col: &str) -> Option<String> {
    db.query_row(
        &format!("SELECT {col} FROM sessions WHERE id = ?1"),
        [id],
        |r| r.get(0),
    )
    .unwrap_or_else(|e| panic!("sessions.{col} of {id}: {e}"))
}

fn resume(g: &mut Gateway, stored: &str) -> Value {
    g.call("session.resume", json!({"session_id": stored}))
}

#[test]
fn undo_removes_the_last_exchange_durably_and_retry_resubmits() {
    let home = TempHome::new("ops-undo");
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    let first = g.run_turn(&s.id, "first question");
    g.run_turn(&s.id, "$ echo undo-me");
    assert_eq!(
        roles(&g.db(), &s.stored),
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    let r = g.call("session.undo", json!({"session_id": s.id}));
    assert_eq!(r["removed"], 4, "{r}");
    // The answer left only after the rows were gone.
    assert_eq!(roles(&g.db(), &s.stored), ["user", "assistant"]);

    let mut g = kill_and_restart(&mut g, &home.path, &[]);
    let r = resume(&mut g, &s.stored);
    assert_eq!(
        shown(&r["messages"]),
        [
            ("user".to_string(), "first question".to_string()),
            ("assistant".to_string(), first.text.clone())
        ]
    );
    let sid = r["session_id"].as_str().unwrap().to_string();

    // /retry: undo, then the same prompt again.
    let r = g.call("session.undo", json!({"session_id": sid}));
    assert_eq!(r["removed"], 2);
    let again = g.run_turn(&sid, "first question");
    assert_eq!(again.text, first.text);
    assert_eq!(roles(&g.db(), &s.stored), ["user", "assistant"]);

    // Down to nothing, then nothing more to undo.
    assert_eq!(
        g.call("session.undo", json!({"session_id": sid}))["removed"],
        2
    );
    assert_eq!(
        g.call("session.undo", json!({"session_id": sid}))["removed"],
        0
    );
    let mut g = kill_and_restart(&mut g, &home.path, &[]);
    assert_eq!(resume(&mut g, &s.stored)["message_count"], 0);
    assert!(rows_of(&g.db(), &s.stored).is_empty());
}

#[test]
fn undo_is_refused_while_a_turn_runs_and_bad_ids_get_their_codes() {
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "30")
        .start();
    let s = g.create_session(json!({}));
    g.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": long_prompt("busy", 100)}),
    );
    g.wait_session_event(&s.id, "message.delta", T);
    g.expect_code("session.undo", json!({"session_id": s.id}), 4009);
    g.expect_code("session.compress", json!({"session_id": s.id}), 4009);
    g.expect_code("session.branch", json!({"session_id": s.id}), 4009);
    g.call("session.interrupt", json!({"session_id": s.id}));
    g.wait_session_event(&s.id, "message.complete", T);

    for method in [
        "session.undo",
        "session.status",
        "session.save",
        "session.branch",
        "session.activate",
        "session.compress",
    ] {
        g.expect_code(method, json!({}), 4006);
        g.expect_code(method, json!({"session_id": "nope"}), 4001);
        g.expect_code(method, json!({"session_id": 7}), -32602);
    }
    g.expect_code("session.steer", json!({"session_id": s.id}), 4002);
    g.expect_code(
        "session.steer",
        json!({"session_id": s.id, "text": 5}),
        -32602,
    );
    g.expect_code(
        "session.steer",
        json!({"session_id": "nope", "text": "x"}),
        4001,
    );
    g.expect_code(
        "session.branch",
        json!({"session_id": s.id, "name": []}),
        -32602,
    );
    g.expect_code(
        "session.compress",
        json!({"session_id": s.id, "focus_topic": 1}),
        -32602,
    );
    g.expect_code("prompt.background", json!({"session_id": s.id}), 4002);
    g.expect_code(
        "prompt.background",
        json!({"session_id": "nope", "text": "x"}),
        4001,
    );
    g.expect_code("process.stop", json!({"session_id": "nope"}), 4001);
    g.ping();
}

#[test]
fn undo_keeps_hermes_full_text_index_in_step() {
    let home = TempHome::new("ops-undo-fts");
    {
        // Our schema first, then an older Hermes' external-content FTS index and its triggers
        // in place of the one the gateway creates.
        let mut g = Gateway::builder().home(&home.path).start();
        g.close_stdin();
        g.wait_exit(secs(10));
        let db = open_db(&home.db_path());
        db.execute_batch(
            "DROP TRIGGER messages_fts_insert; DROP TRIGGER messages_fts_delete;
             DROP TRIGGER messages_fts_update; DROP TABLE messages_fts;
             CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages, content_rowid=id);
             CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
                 INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
             END;
             CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
                 INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
             END;
             CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
                 INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
                 INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
             END;",
        )
        .expect("FTS DDL");
    }
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "keep wombatkeeper");
    g.run_turn(&s.id, "drop platypusdropped");
    assert_eq!(
        g.call("session.undo", json!({"session_id": s.id}))["removed"],
        2
    );
    let db = g.db();
    let hits = |word: &str| -> i64 {
        db.query_row(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?1",
            [word],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(hits("platypusdropped"), 0);
    assert!(hits("wombatkeeper") >= 1);
    db.execute_batch("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check');")
        .expect("messages_fts integrity-check");
}

#[test]
fn branch_copies_the_transcript_into_a_linked_session_that_survives_a_kill() {
    let home = TempHome::new("ops-branch");
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({"title": "Trunk"}));
    g.expect_code("session.branch", json!({"session_id": s.id}), 4008);
    let t = g.run_turn(&s.id, "$ echo branch-point");
    let r = g.call("session.branch", json!({"session_id": s.id, "name": ""}));
    assert_eq!(r["title"], "Trunk #2", "{r}");
    assert_eq!(r["parent"], s.stored.as_str());
    let child = r["session_id"].as_str().unwrap().to_string();
    let child_stored = r["stored_session_id"].as_str().unwrap().to_string();
    assert!(is_runtime_id(&child) && is_stored_id(&child_stored), "{r}");
    // The TUI closes the old session and goes on in the branch.
    g.call("session.close", json!({"session_id": s.id}));
    let next = g.run_turn(&child, "after the fork");
    let named = g.call(
        "session.branch",
        json!({"session_id": child, "name": "Side"}),
    );
    assert_eq!(named["title"], "Side");

    let mut g = kill_and_restart(&mut g, &home.path, &[]);
    let db = g.db();
    assert_eq!(
        session_col(&db, &child_stored, "parent_session_id").as_deref(),
        Some(s.stored.as_str())
    );
    assert_eq!(
        roles(&db, &s.stored),
        ["user", "assistant", "tool", "assistant"]
    );
    assert_eq!(
        roles(&db, &child_stored),
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ]
    );
    let r = resume(&mut g, &child_stored);
    let msgs = shown(&r["messages"]);
    assert_eq!(msgs.first().unwrap().1, "$ echo branch-point");
    assert_eq!(msgs.last().unwrap().1, next.text);
    assert!(msgs.iter().any(|(_, text)| *text == t.text));
    // The parent is untouched.
    assert_eq!(resume(&mut g, &s.stored)["message_count"], 4);
}

#[test]
fn status_save_and_activate_answer_what_the_tui_reads() {
    let home = TempHome::new("ops-save");
    let mut g = Gateway::builder().home(&home.path).start();
    let a = g.create_session(json!({"title": "Alpha"}));
    let b = g.create_session(json!({}));
    g.run_turn(&a.id, "$ echo saved-output");

    let st = g.call("session.status", json!({"session_id": a.id}));
    let out = st["output"].as_str().unwrap();
    assert!(out.contains(&format!("Session ID: {}", a.stored)), "{out}");
    assert!(
        out.contains("Title: Alpha") && out.contains("Agent Running: No"),
        "{out}"
    );

    let r = g.call("session.save", json!({"session_id": a.id}));
    let file = r["file"].as_str().unwrap().to_string();
    assert!(
        Path::new(&file).starts_with(home.path.join("sessions")),
        "{file}"
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(doc["session_id"], a.stored.as_str());
    let msgs = doc["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[0]["content"], "$ echo saved-output");
    assert_eq!(msgs[1]["tool_calls"][0]["function"]["name"], "terminal");
    assert!(
        msgs[2]["content"]
            .as_str()
            .unwrap()
            .contains("saved-output")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A second save in the same second gets its own file.
    let again = g.call("session.save", json!({"session_id": a.id}));
    assert_ne!(again["file"], r["file"]);

    let act = g.call("session.activate", json!({"session_id": a.id}));
    assert_eq!(act["session_id"], a.id.as_str());
    assert_eq!(act["session_key"], a.stored.as_str());
    assert_eq!(act["message_count"], 4);
    assert_eq!(act["status"], "idle");
    assert_eq!(act["info"]["title"], "Alpha");
    let act_b = g.call("session.activate", json!({"session_id": b.id}));
    assert_eq!(act_b["messages"], json!([]));
}

#[test]
fn steer_reaches_the_next_model_call_or_runs_next_and_is_rejected_when_idle() {
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "20")
        .start();
    let s = g.create_session(json!({}));
    let idle = g.call(
        "session.steer",
        json!({"session_id": s.id, "text": "hello"}),
    );
    assert_eq!(idle["status"], "rejected");

    // During a tool: the note is in the transcript before the model's next call.
    let start = submit(&mut g, &s.id, "$ sleep 0.5; echo slept");
    g.wait_session_event(&s.id, "tool.start", T);
    let r = g.call(
        "session.steer",
        json!({"session_id": s.id, "text": "also check the logs"}),
    );
    assert_eq!(
        r,
        json!({"status": "queued", "text": "also check the logs"})
    );
    g.finish_turn(&s.id, start, T);
    let rows = rows_of(&g.db(), &s.stored);
    let kinds: Vec<&str> = rows.iter().map(|r| r.role.as_str()).collect();
    assert_eq!(kinds, ["user", "assistant", "tool", "user", "assistant"]);
    assert!(
        rows[3]
            .content
            .as_deref()
            .unwrap()
            .ends_with("also check the logs")
    );

    // During a plain reply there is no next model call: it runs as the next prompt.
    let start = submit(&mut g, &s.id, &long_prompt("streaming", 40));
    g.wait_session_event(&s.id, "message.delta", T);
    let r = g.call(
        "session.steer",
        json!({"session_id": s.id, "text": "then this"}),
    );
    assert_eq!(r["status"], "queued");
    g.finish_turn(&s.id, start, T);
    let next = g.wait_session_event(&s.id, "message.complete", T);
    assert_eq!(
        next["payload"]["text"],
        "(offline model) You said: then this"
    );
    // Undo takes back that prompt as one exchange.
    assert_eq!(
        g.call("session.undo", json!({"session_id": s.id}))["removed"],
        2
    );
}

#[test]
fn compress_summarises_into_a_linked_session_and_survives_a_kill() {
    let home = TempHome::new("ops-compress");
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({"title": "Long talk"}));
    g.run_turn(&s.id, "tell me about otters");
    let noop = g.call("session.compress", json!({"session_id": s.id}));
    assert_eq!(noop["summary"]["noop"], true, "{noop}");
    g.run_turn(&s.id, "$ echo river");
    let last = g.run_turn(&s.id, "and beavers");

    let r = g.call(
        "session.compress",
        json!({"session_id": s.id, "focus_topic": "animals"}),
    );
    assert_eq!(r["status"], "compressed", "{r}");
    assert_eq!(r["before_messages"], 8);
    assert_eq!(r["after_messages"], 3);
    assert_eq!(r["removed"], 5);
    assert_eq!(
        r["usage"]["compressions"], 1,
        "the status bar counts it: {r}"
    );
    assert!(
        r["before_tokens"].as_u64() > r["after_tokens"].as_u64(),
        "{r}"
    );
    assert!(r["summary"]["headline"].as_str().unwrap().contains("8 → 3"));
    let new_stored = r["session_key"].as_str().unwrap().to_string();
    assert_ne!(new_stored, s.stored);
    assert_eq!(r["info"]["stored_session_id"], new_stored.as_str());
    let summary = shown(&r["messages"]);
    assert_eq!(summary[0].0, "system");
    assert!(
        summary[0].1.contains("\"tell me about otters\""),
        "{summary:?}"
    );
    assert_eq!(summary.last().unwrap().1, last.text);

    let mut g = kill_and_restart(&mut g, &home.path, &[]);
    let db = g.db();
    // The full history stays in the old session, ended by the compression.
    assert_eq!(rows_of(&db, &s.stored).len(), 8);
    assert_eq!(
        session_col(&db, &s.stored, "end_reason").as_deref(),
        Some("compression")
    );
    assert_eq!(
        session_col(&db, &new_stored, "parent_session_id").as_deref(),
        Some(s.stored.as_str())
    );
    assert_eq!(roles(&db, &new_stored), ["system", "user", "assistant"]);
    assert_eq!(
        session_col(&db, &new_stored, "title").as_deref(),
        Some("Long talk #2")
    );
    // The most recent session is the continuation, and it resumes as the user saw it.
    let recent = g.call("session.most_recent", json!({}));
    assert_eq!(recent["session_id"], new_stored.as_str());
    // Lists show the continuation only, and resuming the old id or title lands in it.
    let list = g.call("session.list", json!({}));
    assert_eq!(listed_ids(&list), [new_stored.as_str()], "{list}");
    let resumed = resume(&mut g, "Long talk");
    assert_eq!(resumed["resumed"], new_stored.as_str());
    let again = resume(&mut g, &s.stored);
    assert_eq!(again["session_id"], resumed["session_id"]);
    assert_eq!(shown(&resumed["messages"]), summary);
    let sid = resumed["session_id"].as_str().unwrap().to_string();
    // And the conversation goes on in it.
    g.run_turn(&sid, "one more");
    assert_eq!(rows_of(&g.db(), &new_stored).len(), 5);
}

#[test]
fn a_session_near_its_context_window_is_compacted_after_a_turn() {
    let home = TempHome::new("ops-auto");
    // A small window, from config.yaml as a user would set it.
    std::fs::write(
        home.path.join("config.yaml"),
        "model:\n  context_length: 120\n",
    )
    .unwrap();
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, &long_prompt("first", 30));
    let start = submit(&mut g, &s.id, &long_prompt("second", 30));
    g.finish_turn(&s.id, start, T);
    let done = g
        .wait_frame(
            |f| {
                event_type(f) == Some("status.update")
                    && f["params"]["payload"]["text"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("✓ context compacted"))
            },
            T,
        )
        .unwrap_or_else(|| panic!("no compaction\n{}", g.diag()));
    let text = done["params"]["payload"]["text"].as_str().unwrap();
    assert!(text.contains("4 → 3 messages"), "{text}");
    let info = g.wait_session_event(&s.id, "session.info", T);
    let new_stored = info["payload"]["stored_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_stored, s.stored);
    // A prompt after it runs in the continuation, which (the window being tiny) is compacted
    // in its turn.
    let short = g.run_turn(&s.id, "short");
    g.wait_frame(
        |f| {
            event_type(f) == Some("status.update")
                && f["params"]["payload"]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("✓ context compacted"))
        },
        T,
    )
    .unwrap_or_else(|| panic!("no second compaction\n{}", g.diag()));

    let mut g = kill_and_restart(&mut g, &home.path, &[]);
    let db = g.db();
    assert_eq!(rows_of(&db, &s.stored).len(), 4);
    assert_eq!(
        session_col(&db, &new_stored, "parent_session_id").as_deref(),
        Some(s.stored.as_str())
    );
    assert_eq!(
        roles(&db, &new_stored),
        ["system", "user", "assistant", "user", "assistant"]
    );
    // Resuming the first id follows the chain to where the conversation went on.
    let r = resume(&mut g, &s.stored);
    let tip = r["resumed"].as_str().unwrap().to_string();
    assert_eq!(
        session_col(&db, &tip, "parent_session_id").as_deref(),
        Some(new_stored.as_str())
    );
    let msgs = shown(&r["messages"]);
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert_eq!(msgs[0].0, "system");
    assert_eq!(msgs[2].1, short.text);
}

#[test]
fn a_background_prompt_answers_with_background_complete_in_a_child_session() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let r = g.call(
        "prompt.background",
        json!({"session_id": s.id, "text": "summarise the repo"}),
    );
    let task = r["task_id"].as_str().unwrap().to_string();
    assert!(task.starts_with("bg_"), "{r}");
    let ev = g.wait_session_event(&s.id, "background.complete", T);
    assert_eq!(ev["payload"]["task_id"], task.as_str());
    assert_eq!(
        ev["payload"]["text"],
        "(offline model) You said: summarise the repo"
    );
    // The parent's transcript is untouched; the child is stored, linked and ended.
    assert_eq!(rows_of(&g.db(), &s.stored).len(), 0);
    let db = g.db();
    let (child, reason): (String, Option<String>) = db
        .query_row(
            "SELECT id, end_reason FROM sessions WHERE parent_session_id = ?1",
            [&s.stored],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(reason.as_deref(), Some("background_complete"));
    assert_eq!(roles(&db, &child), ["user", "assistant"]);
    // It is not offered as a live session to switch to.
    let list = g.call("session.active_list", json!({}));
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");

    // A dangerous command cannot wait for an approval nobody sees: refused at once.
    g.call(
        "prompt.background",
        json!({"session_id": s.id, "text": "$ rm -rf /tmp/some-dir-bg"}),
    );
    let ev = g.wait_session_event(&s.id, "background.complete", T);
    let text = ev["payload"]["text"].as_str().unwrap();
    assert!(
        text.contains("background task cannot ask for approval"),
        "{text}"
    );
}

#[test]
fn stop_kills_the_running_command_and_the_turn_goes_on() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    assert_eq!(g.call("process.stop", json!({}))["killed"], 0);
    let start = submit(&mut g, &s.id, "$ sleep 60");
    g.wait_session_event(&s.id, "tool.start", T);
    assert_eq!(g.call("process.stop", json!({}))["killed"], 1);
    let done = g.wait_session_event(&s.id, "tool.complete", T);
    assert!(
        done["payload"]["result"]["output"]
            .as_str()
            .unwrap()
            .contains("[Command interrupted]"),
        "{done}"
    );
    let t = g.finish_turn(&s.id, start, T);
    assert_eq!(t.complete["payload"]["status"], "complete");
}

#[test]
fn reloads_say_what_they_did() {
    let home = TempHome::new("ops-reload");
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    // No server configured, none running: the TUI's confirmation slot says so.
    let r = g.call("reload.mcp", json!({"session_id": s.id}));
    assert_eq!(r["status"], "confirm_required");
    assert!(
        r["message"].as_str().unwrap().contains("nothing to reload"),
        "{r}"
    );
    let r = g.call("reload.mcp", json!({"session_id": s.id, "confirm": true}));
    assert_eq!(
        (&r["status"], &r["servers"]),
        (&json!("reloaded"), &json!(0))
    );
    g.expect_code("reload.mcp", json!({"confirm": "yes"}), -32602);
    assert_eq!(g.call("reload.env", json!({}))["updated"], 0);

    // A key added to .env takes effect: the next turn goes to the network model.
    let mock = mockai::MockAi::script(vec![mockai::Reply::text(&["from ", "the net"], (3, 2))]);
    std::fs::write(
        home.path.join(".env"),
        format!(
            "# keys\nexport OPENAI_BASE_URL={}\nOPENAI_API_KEY='sk-test'\nOPENAI_MODEL=m\nOTHER=1\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let r = g.call("reload.env", json!({}));
    assert_eq!(r["updated"], 4, "{r}");
    assert_eq!(r["provider"], "openai-api");
    let t = g.run_turn(&s.id, "hello network");
    assert_eq!(t.text, "from the net", "{:?}", t.complete);
    assert_eq!(mock.request_count(), 1);
    assert_eq!(g.call("reload.env", json!({}))["updated"], 0);
}

#[test]
fn a_kill_during_a_compaction_leaves_the_session_as_it_was() {
    let home = TempHome::new("ops-compress-kill");
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "40")
        .start();
    let s = g.create_session(json!({}));
    for text in ["one", "two", "three"] {
        g.run_turn_timeout(&s.id, text, secs(30));
    }
    let id = g.send_request("session.compress", json!({"session_id": s.id}));
    g.wait_frame(
        |f| {
            event_type(f) == Some("status.update")
                && f["params"]["payload"]["kind"] == "compressing"
        },
        T,
    )
    .unwrap_or_else(|| panic!("no compressing status\n{}", g.diag()));
    // The summary is being written (slowly): no answer, nothing changed yet.
    g.drain_available();
    assert!(
        !g.frames.iter().any(|f| f["id"] == id),
        "compress answered before its summary was written"
    );
    let mut g = kill_and_restart(&mut g, &home.path, &[]);
    let db = g.db();
    assert_eq!(rows_of(&db, &s.stored).len(), 6);
    let children: i64 = db
        .query_row(
            "SELECT count(*) FROM sessions WHERE parent_session_id = ?1",
            [&s.stored],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(children, 0);
    assert_eq!(resume(&mut g, &s.stored)["message_count"], 6);
}

#[test]
fn an_acknowledged_steer_survives_a_kill() {
    let home = TempHome::new("ops-steer-kill");
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    submit(&mut g, &s.id, "$ sleep 30");
    g.wait_session_event(&s.id, "tool.start", T);
    let r = g.call(
        "session.steer",
        json!({"session_id": s.id, "text": "do not forget me"}),
    );
    assert_eq!(r["status"], "queued");
    let g2 = kill_and_restart(&mut g, &home.path, &[]);
    let rows = rows_of(&g2.db(), &s.stored);
    let last = rows.last().unwrap();
    assert_eq!(last.role, "user");
    let text = last.content.as_deref().unwrap();
    assert!(
        text.starts_with("[The user adds") && text.ends_with("do not forget me"),
        "{rows:?}"
    );
}

#[test]
fn closing_a_session_keeps_its_pending_steer_without_starting_a_turn() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    submit(&mut g, &s.id, "$ sleep 30");
    g.wait_session_event(&s.id, "tool.start", T);
    g.call(
        "session.steer",
        json!({"session_id": s.id, "text": "late note"}),
    );
    g.call("session.close", json!({"session_id": s.id}));
    let rows = rows_of(&g.db(), &s.stored);
    let kinds: Vec<&str> = rows.iter().map(|r| r.role.as_str()).collect();
    assert_eq!(kinds, ["user", "assistant", "tool", "user"], "{rows:?}");
    assert!(rows[3].content.as_deref().unwrap().ends_with("late note"));
    let resumed = g.call("session.resume", json!({"session_id": s.stored}));
    assert_eq!(resumed["running"], false, "{resumed}");
}

#[test]
fn an_automatic_compaction_that_would_not_shrink_the_context_is_dropped() {
    let home = TempHome::new("ops-auto-noshrink");
    std::fs::write(
        home.path.join("config.yaml"),
        "model:\n  context_length: 10\n",
    )
    .unwrap();
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "a");
    g.run_turn(&s.id, "b");
    let warn = g
        .wait_frame(
            |f| event_type(f) == Some("status.update") && f["params"]["payload"]["kind"] == "warn",
            T,
        )
        .unwrap_or_else(|| panic!("no warning\n{}", g.diag()));
    let text = warn["params"]["payload"]["text"].as_str().unwrap();
    assert!(text.contains("would not be smaller"), "{text}");
    // The session goes on as it was.
    let t = g.run_turn(&s.id, "c");
    assert_eq!(t.text, "(offline model) You said: c");
    assert_eq!(rows_of(&g.db(), &s.stored).len(), 6);
    let children: i64 = g
        .db()
        .query_row(
            "SELECT count(*) FROM sessions WHERE parent_session_id = ?1",
            [&s.stored],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(children, 0);
}

#[test]
fn resuming_a_long_session_shows_its_newest_messages_and_history_pages_back() {
    let home = TempHome::new("long-resume");
    let stored = {
        let mut g = Gateway::builder().home(&home.path).start();
        let s = g.create_session(json!({"title": "long one"}));
        g.call("session.close", json!({"session_id": s.id}));
        g.close_stdin();
        g.wait_exit(T);
        s.stored
    };
    let total = 1_200;
    {
        let mut c = rusqlite::Connection::open(home.path.join("state.db")).unwrap();
        let tx = c.transaction().unwrap();
        for i in 0..total {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            tx.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![stored, role, format!("m{i}"), 1e9 + i as f64],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let mut g = Gateway::builder().home(&home.path).start();
    let r = g.call("session.resume", json!({"session_id": "long one"}));
    assert_eq!(r["message_count"], total, "{}", r["message_count"]);
    let shown = r["messages"].as_array().unwrap();
    // The newest 500, in order, ending with the last message.
    assert_eq!(shown.len(), 500);
    assert_eq!(shown[0]["text"], "m700");
    assert_eq!(shown[499]["text"], format!("m{}", total - 1));
    let rid = r["session_id"].as_str().unwrap().to_string();
    // History pages back from the newest to the first message.
    let mut before: Option<u64> = None;
    let mut seen = Vec::new();
    loop {
        let mut p = json!({"session_id": rid, "limit": 300});
        if let Some(b) = before {
            p["before"] = json!(b);
        }
        let h = g.call("session.history", p);
        assert_eq!(h["total"], total);
        let page: Vec<String> = h["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap().to_string())
            .collect();
        assert!(page.len() <= 300 && !page.is_empty(), "{h}");
        seen.splice(0..0, page);
        let first = h["first"].as_u64().unwrap();
        if first == 0 {
            break;
        }
        before = Some(first);
    }
    let want: Vec<String> = (0..total).map(|i| format!("m{i}")).collect();
    assert_eq!(seen, want);
}

/// The leases of `home`'s registry of open sessions (Hermes' `active_sessions.json`).
fn leases(home: &Path) -> Vec<Value> {
    let path = home.join("runtime/active_sessions.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&text).unwrap();
    v["entries"].as_array().cloned().unwrap_or_default()
}

/// Hermes' `max_concurrent_sessions` counts the open sessions of every process on the home:
/// at the cap a new or resumed session is refused with Hermes' 4090, a closed one gives its
/// place back, and a killed process's places are reclaimed.
#[test]
fn the_cap_on_open_sessions_holds_across_processes() {
    let home = TempHome::new("ops-cap");
    std::fs::write(
        home.path.join("config.yaml"),
        "max_concurrent_sessions: 2\n",
    )
    .unwrap();
    let mut a = Gateway::builder().home(&home.path).start();
    let s1 = a.create_session(json!({}));
    let s2 = a.create_session(json!({}));
    let held: Vec<String> = leases(&home.path)
        .iter()
        .map(|e| e["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(held, [s1.stored.clone(), s2.stored.clone()]);
    assert!(
        leases(&home.path)
            .iter()
            .all(|e| e["pid"] == a.pid() && e["process_start_time"].is_f64()),
        "{:?}",
        leases(&home.path)
    );
    let (code, message, _) = a.call_err("session.create", json!({}));
    assert_eq!(code, 4090);
    assert!(message.contains("active session limit (2/2)"), "{message}");

    // Another process on the same home counts the same places.
    let mut b = Gateway::builder().home(&home.path).start();
    assert_eq!(b.call_err("session.create", json!({})).0, 4090);

    // A closed session's place goes back, and a resume takes one like a new session.
    a.call("session.close", json!({"session_id": s1.id}));
    assert_eq!(leases(&home.path).len(), 1);
    let again = b.call("session.resume", json!({"session_id": s1.stored}));
    assert_eq!(again["resumed"], s1.stored.as_str());
    assert_eq!(b.call_err("session.create", json!({})).0, 4090);

    // A killed gateway's places are reclaimed by the next claim.
    a.signal(libc::SIGKILL);
    a.wait_exit(secs(10));
    b.create_session(json!({}));
    let owners: Vec<Value> = leases(&home.path)
        .iter()
        .map(|e| e["pid"].clone())
        .collect();
    assert_eq!(owners, [json!(b.pid()), json!(b.pid())]);
}

/// A session's surface as Hermes resolves it: the call's `source`, else `desktop` under Hermes'
/// desktop app (`HERMES_DESKTOP`), else `tui` — in state.db's row and in the lease of Hermes'
/// registry of open sessions, for a new session and a resumed one alike.
#[test]
fn a_sessions_surface_is_the_calls_source_else_the_desktop_app_else_tui() {
    let home = TempHome::new("ops-surface");
    // Leases are kept under a cap.
    std::fs::write(
        home.path.join("config.yaml"),
        "max_concurrent_sessions: 8\n",
    )
    .unwrap();
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("HERMES_DESKTOP", "1")
        .start();
    let surface_of = |stored: &str| {
        leases(&home.path)
            .iter()
            .find(|e| e["session_id"] == stored)
            .map(|e| e["surface"].clone())
            .unwrap_or(Value::Null)
    };
    let desktop = g.create_session(json!({}));
    assert_eq!(surface_of(&desktop.stored), "desktop");
    let told = g.create_session(json!({"source": "cli"}));
    assert_eq!(surface_of(&told.stored), "cli");
    g.call("session.close", json!({"session_id": desktop.id}));
    g.call(
        "session.resume",
        json!({"session_id": desktop.stored, "source": "telegram"}),
    );
    assert_eq!(surface_of(&desktop.stored), "telegram");
    let row: String = g
        .db()
        .query_row(
            "SELECT source FROM sessions WHERE id = ?1",
            [&told.stored],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(row, "cli");
    // Hermes' desktop terminal pane runs the TUI: `tui` there.
    let mut pane = Gateway::builder()
        .home(&home.path)
        .env("HERMES_DESKTOP", "1")
        .env("HERMES_DESKTOP_TERMINAL", "1")
        .start();
    let s = pane.create_session(json!({}));
    assert_eq!(surface_of(&s.stored), "tui");
}
