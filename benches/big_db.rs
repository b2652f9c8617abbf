//! A long-time user's state.db: every request the TUI makes, and session search, on a database
//! of 50,000 sessions and 1,000,000 messages (built deterministically by `common/bigdb.rs`,
//! cached under `target/bench-state/`), against the same requests on a baseline database of
//! 200 sessions of the same shape (so each request returns as much on both); then the worst
//! loop stall, seen as a `ping` sent right behind each picker request, while 10 sessions
//! stream. Figures are medians (and the worst) of round trips through the gateway's stdio;
//! search and the `session_search` tool's work are timed in process, the tool's loop time as
//! the worst ping behind a turn that calls it, `sessions search` as a process start to exit.
//!
//! ```text
//! cargo bench --bench big_db [-- --sessions 50000 --per-session 20 --repeat 15]
//! ```

// The bench reads and writes its own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tui_gateway::client::Client;
use tui_gateway::store::{SearchQuery, Store};
use tui_gateway::tools::session_search;

use common::bigdb::{Shape, cached};
use common::{STALL, TempDir, fmt_duration, gateway_bin};

struct Figures {
    /// (request, median, worst)
    requests: Vec<(String, Duration, Duration)>,
    stall: Duration,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut sessions, mut per_session, mut repeat) = (50_000usize, 20usize, 15usize);
    while let Some(a) = args.next() {
        let mut value = || args.next().and_then(|v| v.parse().ok()).expect("a number");
        match a.as_str() {
            "--sessions" => sessions = value(),
            "--per-session" => per_session = value(),
            "--repeat" => repeat = value(),
            _ => {} // cargo bench passes --bench
        }
    }
    let big = Shape {
        sessions,
        per_session,
    };
    let base = Shape {
        sessions: 200,
        per_session,
    };
    let run = || -> Result<(), String> {
        let (big_path, built) = cached(&big)?;
        let size = std::fs::metadata(&big_path)
            .map_err(|e| e.to_string())?
            .len();
        println!(
            "database: {} sessions x {} messages = {} messages, {:.0} MB{}",
            big.sessions,
            big.per_session,
            big.sessions * big.per_session,
            size as f64 / 1e6,
            built.map_or(" (cached)".to_string(), |s| format!(", built in {s:.1} s"))
        );
        let (base_path, _) = cached(&base)?;
        let b = measure(&base_path, &base, repeat)?;
        let g = measure(&big_path, &big, repeat)?;
        println!(
            "\n{:<44} {:>20} {:>20} {:>7}",
            "request (median / worst)", "200 sessions", "big database", "ratio"
        );
        for ((what, bm, bw), (_, gm, gw)) in b.requests.iter().zip(&g.requests) {
            println!(
                "{what:<44} {:>20} {:>20} {:>6.2}x",
                format!("{} / {}", fmt_duration(*bm), fmt_duration(*bw)),
                format!("{} / {}", fmt_duration(*gm), fmt_duration(*gw)),
                gm.as_secs_f64() / bm.as_secs_f64().max(1e-9)
            );
        }
        println!(
            "{:<44} {:>20} {:>20} {:>6.2}x",
            "worst ping behind a request, 10 streaming",
            fmt_duration(b.stall),
            fmt_duration(g.stall),
            g.stall.as_secs_f64() / b.stall.as_secs_f64().max(1e-9)
        );
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn spawn(home: &Path) -> Result<Client, String> {
    let stderr = std::fs::File::create(home.join("gateway.stderr")).map_err(|e| e.to_string())?;
    let mut client = Client::spawn(
        Client::gateway_command(&gateway_bin())
            .env("HERMES_HOME", home)
            .env("TUI_GATEWAY_PROVIDER", "offline")
            .env("TUI_GATEWAY_OFFLINE_DELAY_MS", "2")
            .current_dir(home)
            .stderr(stderr),
    )
    .map_err(|e| e.to_string())?;
    client.wait_event("gateway.ready", Instant::now() + STALL)?;
    Ok(client)
}

fn call(c: &mut Client, method: &str, params: Value) -> Result<Value, String> {
    c.call(method, params, Instant::now() + STALL)
        .map_err(|e| format!("{method}: {e}"))
}

/// Median and worst of `repeat` runs of `f`.
fn timed(
    repeat: usize,
    mut f: impl FnMut(usize) -> Result<(), String>,
) -> Result<(Duration, Duration), String> {
    let mut samples = Vec::with_capacity(repeat);
    for i in 0..repeat {
        let t = Instant::now();
        f(i)?;
        samples.push(t.elapsed());
    }
    samples.sort_unstable();
    Ok((samples[samples.len() / 2], samples[samples.len() - 1]))
}

fn measure(db: &Path, shape: &Shape, repeat: usize) -> Result<Figures, String> {
    let home = TempDir::new("big-db");
    std::fs::copy(db, home.path().join("state.db")).map_err(|e| e.to_string())?;
    // The copy's 300 MB of dirty pages on disk first: else the gateway's first checkpoint
    // fsync writes them all back and a ping waits for that (the 47–760 ms worst stalls).
    common::bigdb::settle(&home.path().join("state.db"))?;
    let mut requests = Vec::new();
    let started = Instant::now();
    let mut c = spawn(home.path())?;
    requests.push((
        "start-up to gateway.ready".to_string(),
        started.elapsed(),
        started.elapsed(),
    ));
    let mut add = |what: &str, r: (Duration, Duration)| requests.push((what.to_string(), r.0, r.1));
    add(
        "session.list {limit: 200}",
        timed(repeat, |_| {
            call(&mut c, "session.list", json!({"limit": 200})).map(drop)
        })?,
    );
    add(
        "session.most_recent",
        timed(repeat, |_| {
            call(&mut c, "session.most_recent", json!({})).map(drop)
        })?,
    );
    let middle = |i: usize| (shape.sessions / 2 + i * 7) % shape.sessions;
    add(
        "session.resume by id (+ close)",
        timed(repeat, |i| {
            let r = call(
                &mut c,
                "session.resume",
                json!({"session_id": shape.stored_id(middle(i))}),
            )?;
            let rid = r["session_id"].as_str().ok_or("no session_id")?.to_string();
            call(&mut c, "session.close", json!({"session_id": rid})).map(drop)
        })?,
    );
    add(
        "session.resume by title (+ close)",
        timed(repeat, |i| {
            let r = call(
                &mut c,
                "session.resume",
                json!({"session_id": shape.title(middle(i + 1000))}),
            )?;
            let rid = r["session_id"].as_str().ok_or("no session_id")?.to_string();
            call(&mut c, "session.close", json!({"session_id": rid})).map(drop)
        })?,
    );
    let live = {
        let r = call(
            &mut c,
            "session.resume",
            json!({"session_id": shape.stored_id(middle(0))}),
        )?;
        r["session_id"].as_str().ok_or("no session_id")?.to_string()
    };
    add(
        "session.history",
        timed(repeat, |_| {
            call(&mut c, "session.history", json!({"session_id": live})).map(drop)
        })?,
    );
    add(
        "session.create with a taken title",
        timed(repeat, |_| {
            call(&mut c, "session.create", json!({"title": shape.title(7)})).map(drop)
        })?,
    );
    add(
        "session.active_list",
        timed(repeat, |_| {
            call(&mut c, "session.active_list", json!({})).map(drop)
        })?,
    );
    // A session of 100,000 messages: resume shows its newest rows, history pages back.
    let long = shape.stored_id(3);
    common::bigdb::lengthen(&home.path().join("state.db"), &long, 100_000)?;
    add(
        "session.resume, 100,000 messages (+ close)",
        timed(repeat.min(5), |_| {
            let r = call(&mut c, "session.resume", json!({"session_id": long}))?;
            let rid = r["session_id"].as_str().ok_or("no session_id")?.to_string();
            call(&mut c, "session.close", json!({"session_id": rid})).map(drop)
        })?,
    );
    // Loop time of that resume: the worst ping sent right behind it and while the session's
    // older messages are read (a step per iteration), over half a second.
    let mut worst = Duration::ZERO;
    for _ in 0..repeat.min(5) {
        let id = c.send_request("session.resume", json!({"session_id": long}))?;
        let end = Instant::now() + Duration::from_millis(500);
        let mut rid = None;
        while Instant::now() < end {
            let sent = Instant::now();
            let ping = c.send_request("ping", json!({}))?;
            c.wait_response(&ping, sent + STALL, |_, frame| {
                if frame.get("id") == Some(&id) {
                    rid = frame["result"]["session_id"].as_str().map(str::to_string);
                }
            })?;
            worst = worst.max(sent.elapsed());
        }
        let rid = rid.ok_or("no session_id")?;
        call(&mut c, "session.close", json!({"session_id": rid}))?;
    }
    add("worst ping behind that resume, 0.5 s", (worst, worst));
    // Attaching to that session while it is live (a persistent gateway's next client, or a
    // second one, calls session.activate): its newest rows, however long the session.
    let live = call(&mut c, "session.resume", json!({"session_id": long}))?;
    let rid = live["session_id"]
        .as_str()
        .ok_or("no session_id")?
        .to_string();
    add(
        "session.activate, live 100,000-message session",
        timed(repeat, |_| {
            call(&mut c, "session.activate", json!({"session_id": rid})).map(drop)
        })?,
    );
    call(&mut c, "session.close", json!({"session_id": rid}))?;
    // Search, as `sessions search` and the session_search tool call it.
    let store = Store::open(&home.path().join("state.db"), "NORMAL")
        .map_err(|e| format!("the bench's own store: {e}"))?;
    for (what, rank) in [
        ("search: a common word", 1usize),
        ("search: a rare word", 5000),
    ] {
        let text = shape.word_of_rank(rank);
        add(
            what,
            timed(repeat, |_| {
                store
                    .search(&SearchQuery {
                        text: &text,
                        limit: 20,
                        source: None,
                        ..SearchQuery::default()
                    })
                    .map(drop)
                    .map_err(|e| e.to_string())
            })?,
        );
    }
    // The session_search tool's work for a call (every step of it), in process.
    let long_args = json!({"session_id": long});
    let tool_calls = [
        (
            "session_search: a common word, limit 10",
            json!({"query": shape.word_of_rank(1), "limit": 10}),
        ),
        (
            "session_search: a rare word, limit 10",
            json!({"query": shape.word_of_rank(5000), "limit": 10}),
        ),
        ("session_search: browse", json!({})),
        ("session_search: read the long session", long_args),
    ];
    for (what, args) in &tool_calls {
        add(
            what,
            timed(repeat, |_| {
                let r = session_search::call(&store, "", args);
                match r.error {
                    Some(e) => Err(format!("{what}: {e}")),
                    None => Ok(()),
                }
            })?,
        );
    }
    drop(store);
    // Its loop time: the worst ping sent back to back while a turn calls it (the offline
    // model's `%TOOL {args}`), from the prompt to the turn's end.
    let searcher = call(&mut c, "session.create", json!({}))?;
    let searcher = searcher["session_id"]
        .as_str()
        .ok_or("no session_id")?
        .to_string();
    for (what, args) in &tool_calls[..2] {
        let mut worst = Duration::ZERO;
        for _ in 0..repeat.min(5) {
            let text = format!("%session_search {args}");
            let id = c.send_request(
                "prompt.submit",
                json!({"session_id": searcher, "text": text}),
            )?;
            let mut ended = false;
            let mut answered = false;
            let end = Instant::now() + STALL;
            while !(ended && answered) && Instant::now() < end {
                let sent = Instant::now();
                let ping = c.send_request("ping", json!({}))?;
                c.wait_response(&ping, sent + STALL, |_, frame| {
                    answered |= frame.get("id") == Some(&id);
                    ended |= tui_gateway::client::event_type(&frame) == Some("message.complete");
                })?;
                worst = worst.max(sent.elapsed());
            }
            if !ended {
                return Err(format!("{what}: the turn did not end"));
            }
        }
        add(&format!("worst ping behind {what}"), (worst, worst));
    }
    // `tui-gateway sessions search TEXT`: a process of its own, start to exit.
    for (what, rank) in [
        ("`sessions search` (CLI): a common word", 1usize),
        ("`sessions search` (CLI): a rare word", 5000),
    ] {
        let text = shape.word_of_rank(rank);
        add(
            what,
            timed(repeat.min(5), |_| {
                let out = std::process::Command::new(gateway_bin())
                    .args(["sessions", "search", &text])
                    .env("HERMES_HOME", home.path())
                    .output()
                    .map_err(|e| e.to_string())?;
                if out.status.success() {
                    Ok(())
                } else {
                    Err(format!("{what}: {}", String::from_utf8_lossy(&out.stderr)))
                }
            })?,
        );
    }

    // `session.delete` of the 100,000-message session: its answer, then the worst ping sent
    // back to back until its messages have left state.db (a batch per loop iteration).
    let db = rusqlite::Connection::open(home.path().join("state.db")).map_err(|e| e.to_string())?;
    let left = || -> Result<i64, String> {
        db.query_row(
            "SELECT count(*) FROM messages WHERE session_id = ?1",
            [&long],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())
    };
    let sent = Instant::now();
    call(&mut c, "session.delete", json!({"session_id": long}))?;
    let answered = sent.elapsed();
    add(
        "session.delete, 100,000 messages (the answer)",
        (answered, answered),
    );
    let mut worst = Duration::ZERO;
    let end = Instant::now() + STALL;
    let mut pings = 0;
    while (pings % 16 != 0 || left()? > 0) && Instant::now() < end {
        let sent = Instant::now();
        let ping = c.send_request("ping", json!({}))?;
        c.wait_response(&ping, sent + STALL, |_, _| {})?;
        worst = worst.max(sent.elapsed());
        pings += 1;
    }
    if left()? > 0 {
        return Err("the deleted session's messages did not leave state.db".into());
    }
    add(
        "worst ping behind that delete, until its rows are gone",
        (worst, worst),
    );

    // The worst stall: 10 sessions stream while the picker's requests run, each with a ping
    // right behind it (its answer waits for whatever the loop does before it).
    let mut streaming = Vec::new();
    for _ in 0..10 {
        let r = call(&mut c, "session.create", json!({}))?;
        streaming.push(r["session_id"].as_str().ok_or("no session_id")?.to_string());
    }
    let prompt = "stream ".repeat(1500);
    for rid in &streaming {
        call(
            &mut c,
            "prompt.submit",
            json!({"session_id": rid, "text": prompt}),
        )?;
    }
    let mut stall = Duration::ZERO;
    let end = Instant::now() + Duration::from_secs(2);
    let mut i = 0;
    while Instant::now() < end {
        let (method, params) = match i % 3 {
            0 => ("session.list", json!({"limit": 200})),
            1 => ("session.most_recent", json!({})),
            _ => ("session.active_list", json!({})),
        };
        i += 1;
        c.send_request(method, params)?;
        let sent = Instant::now();
        let id = c.send_request("ping", json!({}))?;
        c.wait_response(&id, sent + STALL, |_, _| {})?;
        stall = stall.max(sent.elapsed());
    }
    for rid in &streaming {
        let _ = call(&mut c, "session.interrupt", json!({"session_id": rid}));
    }
    c.close_input();
    let _ = c.wait_exit(Instant::now() + STALL);
    Ok(Figures { requests, stall })
}
