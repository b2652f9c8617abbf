//! Commit before publish while the store fails, black-box:
//!
//! - state.db locked by another process: turns keep streaming, what they announce goes to the
//!   journal beside state.db (mode 0600), and a start after a SIGKILL folds it in, once;
//! - a full disk: the gateway says so once (`status.update`), holds every announcing frame
//!   (a `ping` is still answered), and when space is freed releases them by itself;
//! - one session whose row a writer refuses does not delay another session's commits.

use crate::common;
use crate::crashkit;

use common::*;
use crashkit::*;
use serde_json::json;

/// The journals beside state.db.
fn journals(home: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(home)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with("state.db.gateway-") && name.ends_with(".journal")
        })
        .collect();
    found.sort();
    found
}

/// A gateway on `home` with this flush interval (seconds): the retry interval too.
fn start(home: &TempHome, flush: &str) -> Gateway {
    Gateway::builder()
        .home(&home.path)
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", flush)
        .start()
}

/// Stdin closed: the gateway exits 0.
fn close(mut g: Gateway) {
    g.close_stdin();
    assert_eq!(g.wait_exit(secs(10)).code(), Some(0), "{}", g.diag());
}

/// `(role, content)` of a session's rows.
fn texts(db: &std::path::Path, stored: &str) -> Vec<(String, String)> {
    message_rows(db, stored)
        .into_iter()
        .map(|r| (r.role, r.content.unwrap_or_default()))
        .collect()
}

fn turn_rows(prompt: &str, reply: &str) -> Vec<(String, String)> {
    vec![
        ("user".to_string(), prompt.to_string()),
        ("assistant".to_string(), reply.to_string()),
    ]
}

#[test]
fn locked_db_turns_keep_streaming_into_the_journal_and_the_next_start_folds_it_once() {
    let home = TempHome::new("lock-journal");
    let mut g = start(&home, "0.2");
    let s = g.create_session(json!({}));
    let one = g.run_turn(&s.id, "before the lock");
    let mut lock = DbLock::take(&home.db_path());
    let two = g.run_turn(&s.id, "during the lock");
    let three = g.run_turn(&s.id, "still locked");
    wait_stderr(&mut g, "keeping it in the journal", secs(5));
    // what the client saw is in the journal, not (yet) in state.db
    let found = journals(&home.path);
    assert_eq!(found.len(), 1, "{found:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&found[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "journal mode");
    let journal = std::fs::read_to_string(&found[0]).unwrap();
    assert!(journal.contains(&three.text), "{journal}");
    assert_eq!(texts(&home.db_path(), &s.stored).len(), 2);

    g.signal(libc::SIGKILL);
    g.wait_exit(secs(5));
    lock.release();

    let mut want = turn_rows("before the lock", &one.text);
    want.extend(turn_rows("during the lock", &two.text));
    want.extend(turn_rows("still locked", &three.text));
    let mut g2 = restart(&home.path);
    assert_eq!(texts(&home.db_path(), &s.stored), want, "folded, once");
    assert!(
        journals(&home.path).is_empty(),
        "the folded journal is removed"
    );
    wait_stderr(&mut g2, "folded 1 session(s) from the journal", secs(5));
    let r = g2.call("session.resume", json!({"session_id": s.stored}));
    assert_eq!(r["message_count"], 6, "{r}");
    close(g2);
    // a second start finds nothing left to fold and changes nothing
    let g3 = restart(&home.path);
    assert_eq!(texts(&home.db_path(), &s.stored).len(), 6);
    close(g3);
}

#[test]
fn a_journal_folded_but_not_removed_before_a_kill_is_not_folded_twice() {
    // The lock goes while the gateway runs: its retry commits what the journal holds (and
    // marks the journal folded that far). A copy of the journal taken before stands for a
    // kill between that commit and the journal's removal.
    let home = TempHome::new("lock-refold");
    let mut g = start(&home, "0.2");
    let s = g.create_session(json!({}));
    let mut lock = DbLock::take(&home.db_path());
    g.run_turn(&s.id, "journaled then committed");
    wait_stderr(&mut g, "keeping it in the journal", secs(5));
    let found = journals(&home.path);
    assert_eq!(found.len(), 1);
    let copy = std::fs::read(&found[0]).unwrap();
    lock.release();
    wait_stderr(&mut g, "writable again", secs(5));
    let db = home.db_path();
    assert!(poll_until(secs(5), || journals(&home.path).is_empty()));
    assert_eq!(texts(&db, &s.stored).len(), 2);
    g.signal(libc::SIGKILL);
    g.wait_exit(secs(5));
    std::fs::write(&found[0], copy).unwrap();
    let g2 = restart(&home.path);
    assert_eq!(texts(&db, &s.stored).len(), 2, "nothing written twice");
    assert!(journals(&home.path).is_empty());
    close(g2);
}

/// A full-disk home, or `None` (and a note) where this process may not mount.
fn full_disk_home(tag: &str, kib: u64) -> Option<(TempHome, Tmpfs)> {
    let home = TempHome::new(tag);
    match Tmpfs::mount(&home.path, kib) {
        Some(fs) => Some((home, fs)),
        None => {
            eprintln!("SKIPPED: cannot mount a tmpfs here (needs root)");
            None
        }
    }
}

#[test]
fn a_full_disk_holds_the_frames_says_so_once_and_resumes_when_space_is_freed() {
    let Some((home, fs)) = full_disk_home("full", 16384) else {
        return;
    };
    let mut g = start(&home, "0.2");
    let s = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    let first = g.run_turn(&s.id, "before the disk filled");
    let outside = TempHome::new("full-outside");
    let ran = outside.path.join("ran");
    fs.fill_leaving(0);
    // a prompt bigger than any space SQLite has in hand: nothing can take it
    let prompt = long_prompt("after the disk filled", 40_000);
    let start = g.frames.len();
    let id = g.send_request("prompt.submit", json!({"session_id": s.id, "text": prompt}));
    let warn = g.wait_session_event(&s.id, "status.update", secs(5));
    assert_eq!(warn["payload"]["kind"], "warn", "{warn}");
    assert!(
        warn["payload"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("held")),
        "{warn}"
    );
    // a prompt for another session: its model call (and so its command) waits for the store
    let b_id = g.send_request(
        "prompt.submit",
        json!({"session_id": b.id, "text": format!("$ touch {}", ran.display())}),
    );
    // pings are answered; what announces the prompt (its answer, its turn) is held
    g.ping();
    g.ping();
    let held = g.collect_for(ms(600));
    assert!(
        !held
            .iter()
            .any(|f| f["id"] == id || event_type(f).is_some_and(|t| t.starts_with("message."))),
        "announcing frames went out while nothing could be saved: {held:#?}"
    );
    wait_stderr(&mut g, "cannot save anything", secs(5));
    assert_eq!(
        g.stderr_text().matches("cannot save anything").count(),
        1,
        "said once on stderr"
    );
    assert!(!ran.exists(), "a command ran while nothing could be saved");

    fs.unfill();
    let answer = g.wait_response(&id, secs(10));
    assert_eq!(answer["result"]["status"], "streaming", "{answer}");
    let turn = g.finish_turn(&s.id, start, secs(60)); // ~37,000 deltas: slow on a loaded machine
    assert_eq!(turn.complete["payload"]["status"], "complete");
    let sid = s.id.clone();
    g.wait_frame(
        move |f| {
            event_type(f) == Some("status.update")
                && f["params"]["session_id"] == sid.as_str()
                && f["params"]["payload"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("saved"))
        },
        secs(5),
    )
    .expect("told it is saved again");
    let warnings: Vec<_> = g
        .events_of_session_from(&s.id, start)
        .into_iter()
        .filter(|e| {
            e["type"] == "status.update"
                && e["payload"]["kind"] == "warn"
                && e["payload"]["text"].as_str().unwrap_or("").contains("sav")
        })
        .collect();
    assert_eq!(warnings.len(), 1, "told once: {warnings:#?}");
    wait_stderr(&mut g, "saving works again", secs(5));
    // the parked turn went on by itself
    assert_eq!(
        g.wait_response(&b_id, secs(10))["result"]["status"],
        "streaming"
    );
    g.wait_session_event(&b.id, "message.complete", secs(10));
    assert!(ran.exists(), "the parked command ran after the hold");
    // durable: what the client now saw is on disk (state.db or the journal) — prove it by a
    // kill and a fresh start
    g.signal(libc::SIGKILL);
    g.wait_exit(secs(5));
    let g2 = restart(&home.path);
    let mut want = turn_rows("before the disk filled", &first.text);
    want.extend(turn_rows(&prompt, &turn.text));
    assert_eq!(texts(&home.db_path(), &s.stored), want);
    close(g2);
    drop(fs);
}

#[test]
fn a_command_approved_during_a_hold_starts_only_when_saving_works_again() {
    let Some((home, fs)) = full_disk_home("full-approve", 16384) else {
        return;
    };
    let mut g = start(&home, "0.2");
    let s = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    // a dangerous but harmless command: `rm -rf` of a scratch directory outside the home
    let outside = TempHome::new("full-approve-outside");
    let scratch = outside.path.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::write(scratch.join("file"), "x").unwrap();
    let start = submit(&mut g, &s.id, &format!("$ rm -rf {}", scratch.display()));
    let ask = g.wait_session_event(&s.id, "approval.request", T);
    let request_id = ask["payload"]["request_id"].as_str().unwrap().to_string();

    // The store goes on hold: the disk is full and another session's prompt needs saving.
    fs.fill_leaving(0);
    g.send_request(
        "prompt.submit",
        json!({"session_id": b.id, "text": long_prompt("needs the disk", 40_000)}),
    );
    wait_stderr(&mut g, "cannot save anything", secs(5));
    // Approved while on hold: the command waits like any other tool start (the answer and
    // the turn's frames are held; a ping still goes through).
    let respond = g.send_request(
        "approval.respond",
        json!({"session_id": s.id, "choice": "once", "request_id": request_id}),
    );
    g.ping();
    assert!(
        !poll_until(ms(800), || !scratch.exists()),
        "the approved command ran while nothing could be saved"
    );
    assert!(
        !g.frames.iter().any(|f| f["id"] == respond),
        "the approval's answer went out while nothing could be saved"
    );

    fs.unfill();
    let r = g.wait_response(&respond, secs(10));
    assert_eq!(r["result"]["resolved"], 1, "{r}");
    let turn = g.finish_turn(&s.id, start, secs(60)); // ~37,000 deltas: slow on a loaded machine
    assert_eq!(turn.complete["payload"]["status"], "complete");
    assert!(!scratch.exists(), "the approved command ran after the hold");
    let done = g
        .events_of_session_from(&s.id, start)
        .into_iter()
        .find(|e| e["type"] == "tool.complete")
        .unwrap_or_else(|| panic!("no tool.complete\n{}", g.diag()));
    assert_eq!(done["payload"]["result"]["exit_code"], 0, "{done}");
    close(g);
    drop(fs);
}

#[test]
fn a_session_whose_row_a_writer_refuses_does_not_delay_another_sessions_commits() {
    let home = TempHome::new("refused");
    // A long flush interval: a commit that waited for a retry would show.
    let mut g = start(&home, "60");
    let a = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    let db = home.db_path();
    // Another writer's rule refuses a's row from now on, as a unique title taken by another
    // writer meanwhile does.
    open_db(&db)
        .execute_batch(&format!(
            "CREATE TRIGGER refuse_a BEFORE UPDATE ON sessions WHEN NEW.id = '{}'
             BEGIN SELECT RAISE(ABORT, 'UNIQUE constraint failed: sessions.title'); END;",
            a.stored
        ))
        .unwrap();
    let ta = g.run_turn(&a.id, "a is refused");
    wait_stderr(
        &mut g,
        &format!("cannot save session {}", a.stored),
        secs(5),
    );
    let warn = g.wait_session_event(&a.id, "status.update", secs(5));
    assert_eq!(warn["payload"]["kind"], "warn");
    for i in 0..3 {
        let prompt = format!("b goes on {i}");
        let t = g.run_turn(&b.id, &prompt);
        // b's turn is in state.db right away, not a flush interval later
        let rows = texts(&db, &b.stored);
        assert_eq!(
            rows[rows.len() - 2..],
            turn_rows(&prompt, &t.text)[..],
            "b committed with its turn"
        );
    }
    assert!(texts(&db, &a.stored).is_empty(), "a really was refused");
    // a's turn was announced, so it is in the journal: a kill and a start fold it in
    g.signal(libc::SIGKILL);
    g.wait_exit(secs(5));
    open_db(&db).execute_batch("DROP TRIGGER refuse_a").unwrap();
    let g2 = restart(&home.path);
    assert_eq!(texts(&db, &a.stored), turn_rows("a is refused", &ta.text));
    assert_eq!(texts(&db, &b.stored).len(), 6);
    close(g2);
}

#[test]
fn the_journal_is_not_written_through_a_symlink() {
    let home = TempHome::new("journal-link");
    let mut g = start(&home, "0.2");
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "before the lock");
    // plant a symlink where this gateway's journal will go
    let pid = g.pid();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    let victim = home.path.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = home
        .path
        .join(format!("state.db.gateway-{pid}-{start}.journal"));
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let mut lock = DbLock::take(&home.db_path());
    // nothing can be made durable: the prompt's answer is held, not written via the link
    let id = g.send_request(
        "prompt.submit",
        json!({"session_id": s.id, "text": "while locked"}),
    );
    wait_stderr(&mut g, "cannot save anything", secs(5));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    lock.release();
    let answer = g.wait_response(&id, secs(10));
    assert_eq!(answer["result"]["status"], "streaming", "{answer}");
    g.wait_session_event(&s.id, "message.complete", secs(10));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    close(g);
}

/// A delete state.db refuses (another process holds its write lock) is answered with Hermes'
/// 5036 and the reason; nothing is lost, and the same delete goes through once the lock is gone.
#[test]
fn a_delete_state_db_refuses_is_answered_as_hermes_does_and_works_later() {
    let home = TempHome::new("delete-locked");
    let mut g = start(&home, "1");
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "keep me");
    g.call("session.close", json!({"session_id": s.id}));
    let mut lock = DbLock::take(&home.db_path());
    let (code, message, _) = g.call_err("session.delete", json!({"session_id": s.stored}));
    assert_eq!(code, 5036, "{message}");
    assert!(message.starts_with("delete failed: "), "{message}");
    lock.release();
    let shown = g.call("session.resume", json!({"session_id": s.stored}));
    assert!(shown.to_string().contains("keep me"), "{shown}");
    g.call("session.close", json!({"session_id": shown["session_id"]}));
    let r = g.call("session.delete", json!({"session_id": s.stored}));
    assert_eq!(r["deleted"], s.stored.as_str(), "{r}");
    close(g);
}
