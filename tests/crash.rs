//! Crash injection: under a load of several sessions running turns and tool calls, the gateway is
//! SIGKILLed at a random instant, many times. After each kill:
//!
//! - `PRAGMA integrity_check` is ok;
//! - every message whose announcing frame the client received is in `state.db`, in order, at
//!   the head of its session's rows (user prompts whose `prompt.submit` was answered or whose
//!   turn started, tool calls announced by `tool.start`, tool results by `tool.complete`, final
//!   texts by `message.complete`), and the rows form a well-formed transcript (nothing twice);
//! - every session whose `session.create` was answered has its row;
//! - no tool process survives (a unique marker in every command line, polled in /proc);
//! - a new gateway on the same home repairs the killed sessions, resumes every one of them by
//!   stored id with that history, every tool call answered exactly once, and runs a new turn.
//!
//! The same trials run with store faults injected at a random instant before the kill: another
//! process holding state.db's write lock across the kill (released before the checking restart),
//! and a full disk (`HERMES_HOME` a small tmpfs the test fills up; space freed before the
//! restart). A faulted trial's kill comes only after the gateway said a commit failed (then a
//! random while later), so the fault really overlaps the work the kill interrupts. Then the checks run after the restart's fold of the journal, and every announced
//! message must still be there.
//!
//! Knobs: `CRASH_TRIALS` (default 50), `CRASH_FAULT_TRIALS` (default 8 per fault),
//! `CRASH_PARALLEL` (default 2), `CRASH_SEED` (master seed), `CRASH_TRIAL_SEED` (run exactly one
//! trial with this seed, as printed on a failure).

use crate::common;
use crate::crashkit;

use common::*;
use crashkit::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A message the client has been told about.
#[derive(Clone, Debug)]
enum Seen {
    User(String),
    Call(String),
    Result(String, Value),
    Text(String),
}

#[derive(Debug)]
enum State {
    /// `session.create` sent, not answered.
    Creating,
    Idle,
    /// `prompt.submit` sent: request id, prompt, whether the turn is known to have started.
    Submitted(Value, String, bool),
    Running,
}

#[derive(Debug)]
struct Sess {
    rid: String,
    stored: String,
    seen: Vec<Seen>,
    state: State,
    /// A `tool.start` without its `tool.complete` yet.
    tool_open: bool,
    /// Text deltas of a model round seen, the round not finished.
    streaming: bool,
    turns: usize,
}

/// A store fault injected during a trial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// Another process holds state.db's write lock from a random instant until after the kill.
    Lock,
    /// The disk fills up at a random instant (and is freed after the kill).
    FullDisk,
}

/// The fault of a running trial.
enum Injected {
    Lock(DbLock),
    Disk,
}

#[derive(Default, Debug, Clone)]
struct Outcome {
    /// The gateway said the store failed (the fault really hit it).
    fault_hit: bool,
    kill_during_tool: bool,
    kill_mid_stream: bool,
    messages_verified: usize,
    sessions: usize,
    kill_after_ms: u64,
}

/// The next prompt of a session: plain text, a short command, or a command that leaves a
/// `setsid` grandchild behind (which the supervisor must kill too). Every command carries the
/// trial's marker in every process's command line.
fn next_prompt(rng: &mut XorShift, m: &str, sess: usize, n: usize) -> String {
    let roll = rng.range(0, 100);
    if roll < 45 {
        let words = rng.range(1, 40) as usize;
        long_prompt(&format!("plain s{sess} n{n}"), words)
    } else if roll < 90 {
        let hundredths = [0u64, 1, 2, 5, 10, 20][rng.range(0, 6) as usize];
        format!("$ echo out-{m}-{sess}-{n}; sleep 0.{hundredths:02}{m}; echo end-{n}")
    } else {
        format!("$ (setsid sleep 30.{m} &); echo bg-{m}-{sess}-{n}; sleep 0.05{m}")
    }
}

/// Handles one frame of the load.
fn on_frame(f: &Value, sessions: &mut [Sess], creates: &mut HashMap<String, usize>) {
    if is_response(f) {
        let id = f["id"].to_string();
        if let Some(i) = creates.remove(&id) {
            let r = f
                .get("result")
                .unwrap_or_else(|| panic!("session.create failed: {f}"));
            let s = &mut sessions[i];
            s.rid = r["session_id"].as_str().unwrap().to_string();
            s.stored = r["stored_session_id"].as_str().unwrap().to_string();
            s.state = State::Idle;
            return;
        }
        for s in sessions.iter_mut() {
            if let State::Submitted(rid, prompt, started) = &s.state
                && rid == &f["id"]
            {
                let r = f
                    .get("result")
                    .unwrap_or_else(|| panic!("prompt.submit failed: {f}"));
                assert_eq!(r["status"], "streaming", "submit on an idle session: {f}");
                if !started {
                    s.seen.push(Seen::User(prompt.clone()));
                }
                s.state = State::Running;
                return;
            }
        }
        return;
    }
    let Some(ty) = event_type(f) else { return };
    let sid = f["params"]["session_id"].as_str().unwrap_or("");
    let Some(s) = sessions
        .iter_mut()
        .find(|s| s.rid == sid && !sid.is_empty())
    else {
        return;
    };
    let p = &f["params"]["payload"];
    match ty {
        "message.start" => {
            if let State::Submitted(_, prompt, started) = &mut s.state
                && !*started
            {
                *started = true;
                s.seen.push(Seen::User(prompt.clone()));
            }
        }
        "message.delta" => s.streaming = true,
        "tool.start" => {
            s.tool_open = true;
            s.streaming = false;
            s.seen
                .push(Seen::Call(p["tool_id"].as_str().unwrap().to_string()));
        }
        "tool.complete" => {
            s.tool_open = false;
            s.seen.push(Seen::Result(
                p["tool_id"].as_str().unwrap().to_string(),
                p["result"].clone(),
            ));
        }
        "message.complete" => {
            assert_eq!(p["status"], "complete", "{f}");
            if let Some(t) = p["text"].as_str() {
                s.seen.push(Seen::Text(t.to_string()));
            }
            s.turns += 1;
            s.streaming = false;
            s.state = State::Idle;
        }
        _ => {}
    }
}

fn row_brief(rows: &[MsgRow]) -> String {
    rows.iter()
        .map(|r| {
            format!(
                "  #{} {} calls={:?} answers={:?} finish={:?} {:?}\n",
                r.id,
                r.role,
                r.call_ids(),
                r.tool_call_id,
                r.finish_reason,
                r.content.as_deref().map(|c| truncate(c, 80))
            )
        })
        .collect()
}

/// The seen messages are the head of the rows, one for one.
fn check_seen_prefix(seen: &[Seen], rows: &[MsgRow]) -> Result<(), String> {
    if rows.len() < seen.len() {
        return Err(format!(
            "{} messages announced, {} rows",
            seen.len(),
            rows.len()
        ));
    }
    for (i, (s, r)) in seen.iter().zip(rows).enumerate() {
        let ok = match s {
            Seen::User(t) => r.role == "user" && r.content.as_deref() == Some(t.as_str()),
            Seen::Call(id) => r.role == "assistant" && r.call_ids() == vec![id.clone()],
            Seen::Result(id, res) => {
                r.role == "tool"
                    && r.tool_call_id.as_deref() == Some(id.as_str())
                    && &r.json() == res
            }
            Seen::Text(t) => {
                r.role == "assistant"
                    && r.content.as_deref() == Some(t.as_str())
                    && r.tool_calls.is_none()
                    && r.finish_reason.as_deref() == Some("stop")
            }
        };
        if !ok {
            return Err(format!(
                "message {i} announced as {s:?} but the row is {r:?}"
            ));
        }
    }
    Ok(())
}

/// Rows form a transcript: user, then model rounds (a tool call answered by its result, or a
/// text); only the last turn may be cut short; a partial (unfinished) text only at the very
/// end; nothing twice. `repaired`: every call must be answered.
fn check_well_formed(rows: &[MsgRow], repaired: bool) -> Result<(), String> {
    let mut open_calls: Vec<String> = Vec::new();
    let mut answered: Vec<String> = Vec::new();
    // what the previous row allows next
    let mut after_text = true; // at the start, or after a final text: a user row may come
    let mut after_user = false;
    for (i, r) in rows.iter().enumerate() {
        let last = i + 1 == rows.len();
        match r.role.as_str() {
            "user" => {
                if !after_text {
                    return Err(format!("user row #{} in the middle of a turn", r.id));
                }
                if !open_calls.is_empty() {
                    return Err(format!("unanswered calls {open_calls:?} before #{}", r.id));
                }
                after_user = true;
                after_text = false;
            }
            "assistant" => {
                if after_text {
                    return Err(format!("assistant row #{} without a prompt", r.id));
                }
                if !open_calls.is_empty() {
                    return Err(format!(
                        "assistant #{} before calls {open_calls:?} were answered",
                        r.id
                    ));
                }
                let calls = r.call_ids();
                if calls.is_empty() {
                    if r.finish_reason.is_none() && !last {
                        return Err(format!("partial assistant row #{} is not the last", r.id));
                    }
                    after_text = true;
                } else {
                    for c in &calls {
                        if answered.contains(c) || open_calls.contains(c) {
                            return Err(format!("call id {c} used twice"));
                        }
                    }
                    open_calls = calls;
                }
                after_user = false;
            }
            "tool" => {
                let id = r.tool_call_id.clone().unwrap_or_default();
                let Some(pos) = open_calls.iter().position(|c| *c == id) else {
                    return Err(format!("tool row #{} answers no open call ({id})", r.id));
                };
                open_calls.remove(pos);
                answered.push(id);
                after_user = false;
            }
            other => return Err(format!("row #{} has role {other}", r.id)),
        }
    }
    let _ = after_user;
    if repaired && !open_calls.is_empty() {
        return Err(format!("after repair, calls {open_calls:?} have no result"));
    }
    Ok(())
}

/// Display form of what was seen, as `resume` returns it: (role, text; None for tool calls).
fn seen_display(seen: &[Seen]) -> Vec<(String, Option<String>)> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::User(t) => Some(("user".into(), Some(t.clone()))),
            Seen::Call(_) => Some(("tool".into(), None)),
            Seen::Result(..) => None,
            Seen::Text(t) => Some(("assistant".into(), Some(t.clone()))),
        })
        .collect()
}

fn run_trial(seed: u64, fault: Fault) -> Outcome {
    let mut rng = XorShift::new(seed);
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("crash");
    let disk = (fault == Fault::FullDisk)
        .then(|| Tmpfs::mount(&home.path, 16 * 1024).expect("mount a tmpfs home"));
    let delay = ["0", "2", "5"][rng.range(0, 3) as usize];
    let flush = ["0.05", "0.2"][rng.range(0, 2) as usize];
    let nsess = rng.range(2, 5) as usize;
    let kill_after = Duration::from_millis(rng.range(5, 700));
    // The fault starts within the first two thirds of the run (once a session exists, so the
    // schema does); a full disk keeps a random few KiB free so the database fills mid-run.
    let (fault_after, leave_free) = match fault {
        Fault::None => (kill_after, 0),
        _ => (
            Duration::from_millis(rng.range(0, kill_after.as_millis() as u64 * 2 / 3 + 1)),
            rng.range(0, 8) * 4096,
        ),
    };
    let mut injected: Option<Injected> = None;

    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_OFFLINE_DELAY_MS", delay)
        .env("HERMES_TUI_SESSION_FLUSH_INTERVAL_S", flush)
        .start();
    let t0 = Instant::now();
    let mut sessions: Vec<Sess> = Vec::new();
    let mut creates: HashMap<String, usize> = HashMap::new();
    for i in 0..nsess {
        let id = g.send_request("session.create", json!({}));
        creates.insert(id.to_string(), i);
        sessions.push(Sess {
            rid: String::new(),
            stored: String::new(),
            seen: Vec::new(),
            state: State::Creating,
            tool_open: false,
            streaming: false,
            turns: 0,
        });
    }
    let mut cursor = g.frames.len();
    let mut n = 0usize;
    let mut kill_at = t0 + kill_after;
    // With a fault, the kill waits until the gateway said the store failed (the fault overlaps
    // a commit for certain), and then a random while longer; past `give_up` it kills anyway
    // (a full disk with room left may never fail).
    let after_hit = Duration::from_millis(rng.range(0, 150));
    let mut hit_seen = fault == Fault::None;
    let mut give_up: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if !hit_seen && injected.is_some() && store_failed(&g.stderr_text()) {
            hit_seen = true;
            kill_at = kill_at.max(now + after_hit);
        }
        if now >= kill_at && (hit_seen || give_up.is_some_and(|at| now >= at)) {
            break;
        }
        if injected.is_none()
            && fault != Fault::None
            && now >= t0 + fault_after
            && sessions.iter().any(|s| !s.stored.is_empty())
        {
            injected = Some(match fault {
                Fault::Lock => Injected::Lock(DbLock::take(&home.db_path())),
                _ => {
                    disk.as_ref().unwrap().fill_leaving(leave_free);
                    Injected::Disk
                }
            });
            give_up = Some(Instant::now() + secs(3));
        }
        g.pump_until(Instant::now() + Duration::from_millis(2));
        g.drain_available();
        while cursor < g.frames.len() {
            let f = g.frames[cursor].clone();
            on_frame(&f, &mut sessions, &mut creates);
            cursor += 1;
        }
        for (i, s) in sessions.iter_mut().enumerate() {
            if matches!(s.state, State::Idle) {
                n += 1;
                let prompt = next_prompt(&mut rng, &m, i, n);
                let id = g.send_request(
                    "prompt.submit",
                    json!({"session_id": s.rid, "text": prompt}),
                );
                s.state = State::Submitted(id, prompt, false);
            }
        }
        assert!(
            g.try_exit().is_none(),
            "gateway died under load\n{}",
            g.diag()
        );
    }
    g.signal(libc::SIGKILL);
    let st = g.wait_exit(secs(10));
    assert_eq!(st.code(), None, "not killed by the signal? {st:?}");
    let fault_hit = store_failed(&g.stderr_text());
    // The fault ends before the checking restart: the lock is released, the space freed.
    match injected.take() {
        Some(Injected::Lock(mut lock)) => lock.release(),
        Some(Injected::Disk) => disk.as_ref().unwrap().unfill(),
        None => {}
    }
    g.drain_available();
    while cursor < g.frames.len() {
        let f = g.frames[cursor].clone();
        on_frame(&f, &mut sessions, &mut creates);
        cursor += 1;
    }
    // A SIGKILL may cut the very last frame short; anything else must be a whole frame.
    assert!(
        g.garbage.len() <= 1 && g.garbage.iter().all(|b| b.starts_with(b"{")),
        "stdout carried non-frame lines: {:?}",
        g.garbage
            .iter()
            .map(|b| String::from_utf8_lossy(b).to_string())
            .collect::<Vec<_>>()
    );
    for f in &g.frames {
        assert_eq!(f["jsonrpc"], "2.0", "{f}");
    }
    let kill_during_tool = sessions.iter().any(|s| s.tool_open);
    let kill_mid_stream = sessions.iter().any(|s| s.streaming);
    let ctx = |what: &str| {
        format!(
            "trial seed {seed} (kill after {:?}, delay {delay} ms, flush {flush} s): {what}",
            kill_at.duration_since(t0)
        )
    };

    // no tool process survives its gateway
    assert_none_left(&m, secs(1), &ctx("tool processes after SIGKILL"));

    // After a fault, what the client saw may be in the journal: the checks run after the
    // restart folded it in (and repaired).
    let restarted = (fault != Fault::None).then(|| restart(&home.path));

    // the store
    let db = home.db_path();
    if let Err(e) = integrity_ok(&db) {
        panic!("{}", ctx(&e));
    }
    let created: Vec<&Sess> = sessions.iter().filter(|s| !s.stored.is_empty()).collect();
    let conn = open_db(&db);
    // (gateway.ready comes before the store is opened: a very early kill may leave no schema)
    let has_schema: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sessions'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        has_schema == 1 || created.is_empty(),
        "{}",
        ctx("sessions were created but there is no sessions table")
    );
    let open_rows: i64 = if has_schema == 1 && restarted.is_none() {
        conn.query_row(
            "SELECT count(*) FROM sessions WHERE ended_at IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap()
    } else {
        0
    };
    let mut verified = 0;
    for s in &created {
        let exists: i64 = conn
            .query_row(
                "SELECT count(*) FROM sessions WHERE id = ?1",
                [&s.stored],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            exists,
            1,
            "{}",
            ctx(&format!("no row for created session {}", s.stored))
        );
        let rows = rows_of(&conn, &s.stored);
        if let Err(e) = check_seen_prefix(&s.seen, &rows) {
            panic!(
                "{}\nseen: {:#?}\nrows:\n{}",
                ctx(&format!("session {}: {e}", s.stored)),
                s.seen,
                row_brief(&rows)
            );
        }
        if let Err(e) = check_well_formed(&rows, false) {
            panic!(
                "{}\nrows:\n{}",
                ctx(&format!("session {}: {e}", s.stored)),
                row_brief(&rows)
            );
        }
        verified += s.seen.len();
    }
    drop(conn);

    // a new gateway repairs and resumes every session
    let mut g2 = restarted.unwrap_or_else(|| restart(&home.path));
    if open_rows > 0 {
        wait_stderr(
            &mut g2,
            &format!("ended {open_rows} session(s) left open by a killed gateway"),
            secs(5),
        );
    }
    for s in &created {
        let (ended_at, reason) = session_end(&db, &s.stored);
        assert!(
            ended_at.is_some() && reason.is_some(),
            "{}",
            ctx(&format!("session {} still open after repair", s.stored))
        );
        let rows = message_rows(&db, &s.stored);
        if let Err(e) = check_well_formed(&rows, true) {
            panic!(
                "{}\nrows:\n{}",
                ctx(&format!("after repair {}: {e}", s.stored)),
                row_brief(&rows)
            );
        }
        let r = g2.call("session.resume", json!({"session_id": s.stored}));
        assert_eq!(r["stored_session_id"], s.stored.as_str(), "{r}");
        assert_eq!(
            r["message_count"].as_u64(),
            Some(rows.len() as u64),
            "{}",
            ctx(&format!("resume of {}: {r}", s.stored))
        );
        let shown: Vec<(String, Option<String>)> = r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                let role = v["role"].as_str().unwrap_or("?").to_string();
                let text = (role != "tool").then(|| v["text"].as_str().unwrap_or("").to_string());
                (role, text)
            })
            .collect();
        let want = seen_display(&s.seen);
        assert!(
            shown.len() >= want.len() && shown[..want.len()] == want[..],
            "{}\nwant (head): {want:#?}\nshown: {shown:#?}",
            ctx(&format!("resumed history of {}", s.stored))
        );
        let rid = r["session_id"].as_str().unwrap().to_string();
        let t = g2.run_turn(&rid, "after the crash");
        assert_eq!(t.complete["payload"]["status"], "complete");
    }
    g2.close_stdin();
    assert_eq!(g2.wait_exit(secs(10)).code(), Some(0), "{}", g2.diag());
    assert_none_left(&m, secs(1), &ctx("tool processes at the end"));

    drop(disk);
    Outcome {
        fault_hit,
        kill_during_tool,
        kill_mid_stream,
        messages_verified: verified,
        sessions: created.len(),
        kill_after_ms: kill_at.duration_since(t0).as_millis() as u64,
    }
}

/// The gateway's stderr says a commit failed (the injected fault hit the store).
fn store_failed(stderr: &str) -> bool {
    stderr.contains("could not save to state.db") || stderr.contains("cannot save anything")
}

/// A trial's seed and its outcome or failure message.
type TrialResult = (u64, Result<Outcome, String>);

/// A line on the real stderr (not captured by the test harness), so the summary always shows.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[test]
fn sigkill_at_random_instants_under_load_loses_nothing_announced() {
    run_suite(Fault::None, env_usize("CRASH_TRIALS", 50));
}

#[test]
fn sigkill_with_another_process_holding_the_lock_loses_nothing_announced() {
    run_suite(Fault::Lock, env_usize("CRASH_FAULT_TRIALS", 8));
}

#[test]
fn sigkill_on_a_full_disk_loses_nothing_announced() {
    let probe = TempHome::new("crash-mount-probe");
    if Tmpfs::mount(&probe.path, 64).is_none() {
        say("SKIPPED: the full-disk crash suite needs to mount a tmpfs (root)");
        return;
    }
    run_suite(Fault::FullDisk, env_usize("CRASH_FAULT_TRIALS", 8));
}

fn run_suite(fault: Fault, trials: usize) {
    let started = Instant::now();
    let seeds: Vec<u64> = match std::env::var("CRASH_TRIAL_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        Some(s) => vec![s],
        None => {
            let mut master = XorShift::from_env_or_time();
            say(&format!(
                "crash suite: master seed {} (CRASH_SEED to repeat)",
                master.0
            ));
            (0..trials).map(|_| master.next()).collect()
        }
    };
    let parallel = env_usize("CRASH_PARALLEL", 2).max(1);
    let next = Arc::new(AtomicUsize::new(0));
    let results: Arc<Mutex<Vec<TrialResult>>> = Arc::new(Mutex::new(Vec::new()));
    let seeds = Arc::new(seeds);
    let workers: Vec<_> = (0..parallel)
        .map(|_| {
            let (next, results, seeds) = (next.clone(), results.clone(), seeds.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&seed) = seeds.get(i) else { return };
                    let r = std::panic::catch_unwind(|| run_trial(seed, fault))
                        .map_err(|p| tui_gateway::util::panic_text(&p));
                    let failed = r.is_err();
                    results.lock().unwrap().push((seed, r));
                    if failed {
                        // stop handing out trials; the others finish theirs
                        next.store(usize::MAX / 2, Ordering::SeqCst);
                        return;
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let results = results.lock().unwrap();
    let ok: Vec<&Outcome> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let during_tools = ok.iter().filter(|o| o.kill_during_tool).count();
    let mid_stream = ok.iter().filter(|o| o.kill_mid_stream).count();
    let messages: usize = ok.iter().map(|o| o.messages_verified).sum();
    let sessions: usize = ok.iter().map(|o| o.sessions).sum();
    let hit = ok.iter().filter(|o| o.fault_hit).count();
    let summary = format!(
        "crash suite ({fault:?}): {} trials ok of {} run ({} planned), {hit} with the store failing, \
         {} kills during a tool, {} mid-stream, \
         {} sessions, {} announced messages verified, kill instants {}..{} ms, {:.1}s",
        ok.len(),
        results.len(),
        seeds.len(),
        during_tools,
        mid_stream,
        sessions,
        messages,
        ok.iter().map(|o| o.kill_after_ms).min().unwrap_or(0),
        ok.iter().map(|o| o.kill_after_ms).max().unwrap_or(0),
        started.elapsed().as_secs_f64()
    );
    say(&summary);
    if let Some((seed, Err(e))) = results.iter().find(|(_, r)| r.is_err()) {
        panic!("{summary}\nfailed trial (CRASH_TRIAL_SEED={seed} to repeat it):\n{e}");
    }
    assert_eq!(results.len(), seeds.len());
    if fault == Fault::Lock {
        // The kill waits for the lock to make a commit fail: every trial is a locked one.
        assert_eq!(
            hit,
            ok.len(),
            "a lock trial's store never failed: {summary}"
        );
    } else if fault != Fault::None && seeds.len() >= 4 {
        assert!(hit > 0, "the fault never made the store fail: {summary}");
    }
    if seeds.len() >= 20 {
        assert!(
            during_tools > 0,
            "no kill landed during a tool call: {summary}"
        );
        assert!(messages > 0, "{summary}");
    }
}

// ---------------------------------------------------------------------------------------------
// A prompt acknowledged as `queued` is announced too
// ---------------------------------------------------------------------------------------------

/// The prompt acknowledged as `queued` behind a running command.
const QUEUED: &str = "queued behind the command";

/// A gateway on `home` whose session runs `$ sleep 300.<m>` and has `QUEUED` acknowledged as
/// `queued` behind it; returns the gateway and the stored session id.
fn gateway_with_a_queued_prompt(home: &TempHome, m: &str) -> (Gateway, String) {
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    let r = g.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": format!("$ sleep 300.{m}")}),
    );
    assert_eq!(r["status"], "streaming");
    g.wait_session_event(&s.id, "tool.start", T);
    let r = g.call("prompt.submit", json!({"session_id": s.id, "text": QUEUED}));
    assert_eq!(r["status"], "queued", "{r}");
    (g, s.stored)
}

/// `prompt.submit` on a busy session answers `{status:"queued"}`: the client has been told its
/// prompt was accepted, so a SIGKILL must not lose it — the next gateway's resume shows it.
#[test]
fn a_prompt_acknowledged_as_queued_survives_sigkill() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("crash-queued");
    let stored = {
        let (mut g, stored) = gateway_with_a_queued_prompt(&home, &m);
        g.signal(libc::SIGKILL);
        g.wait_exit(secs(10));
        stored
    };
    assert_none_left(&m, secs(1), "after SIGKILL");
    let mut g = Gateway::builder().home(&home.path).start();
    let texts = g.resumed_user_texts(&stored);
    assert!(
        texts.iter().any(|t| t == QUEUED),
        "the acknowledged (queued) prompt was lost by SIGKILL; resumed user messages: {texts:?}\nrows:\n{}",
        row_brief(&message_rows(&home.db_path(), &stored))
    );
}

/// The same on the graceful path: SIGTERM fences new turns, so the queued prompt cannot run,
/// but it was acknowledged and must be in the transcript the next gateway resumes.
#[test]
fn a_prompt_acknowledged_as_queued_survives_sigterm() {
    let m = marker();
    let _reaper = Reaper(m.clone());
    let home = TempHome::new("crash-queued-term");
    let stored = {
        let (mut g, stored) = gateway_with_a_queued_prompt(&home, &m);
        g.signal(libc::SIGTERM);
        assert_eq!(g.wait_exit(secs(10)).code(), Some(0));
        stored
    };
    assert_none_left(&m, secs(1), "after SIGTERM");
    let mut g = Gateway::builder().home(&home.path).start();
    let texts = g.resumed_user_texts(&stored);
    assert!(
        texts.iter().any(|t| t == QUEUED),
        "the acknowledged (queued) prompt was dropped by the graceful shutdown; resumed user \
         messages: {texts:?}\nrows:\n{}",
        row_brief(&message_rows(&home.db_path(), &stored))
    );
}
