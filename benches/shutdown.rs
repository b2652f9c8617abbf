//! SIGTERM to exit with many live sessions (a bench binary without criterion: every sample is a
//! fresh gateway with a thousand sessions).
//!
//! Per trial: spawn the release gateway as the TUI does; create `--sessions` sessions (default
//! 1,000); run one ordinary turn in `--prompted` of them (default 100) so they hold transcripts;
//! start `sleep 300` as a `terminal` tool call in `--tools` of them (default 50; sleep obeys
//! SIGTERM) and wait until every sleep runs; then SIGTERM the gateway and time until it has exited
//! (`waitpid`), while a thread keeps reading its stdout as the TUI would. Afterwards: every sleep
//! must be gone, every session row ended `tui_shutdown`, every interrupted tool result
//! committed. Target (issue 4): under 50 ms when tools obey SIGTERM.
//!
//! ```text
//! cargo bench --bench shutdown -- [--trials 5] [--sessions 1000] [--prompted 100] [--tools 50]
//! ```

// The bench reads and writes its own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use common::{
    Client, Proc, STALL, TempDir, arg_usize, bench_mode, create_sessions, descendants, event_type,
    fmt_duration, fmt_kb, gateway_bin, memory_kb, percentile, spawn_gateway, still_alive,
};

struct Trial {
    exit: Duration,
    setup: Duration,
    rss_kb: u64,
    sleeps: usize,
    sleeps_alive_at_exit: usize,
    stdout_bytes_after_signal: u64,
    ended_rows: i64,
    interrupted_results: i64,
    status: String,
}

fn main() {
    // Under `cargo test --benches` (no `--bench`): one small smoke trial.
    let full = bench_mode();
    let trials = arg_usize("--trials", if full { 5 } else { 1 });
    let sessions = arg_usize("--sessions", if full { 1000 } else { 100 });
    let prompted = arg_usize("--prompted", if full { 100 } else { 10 }).min(sessions);
    let tools = arg_usize("--tools", if full { 50 } else { 5 }).min(sessions);
    let bin = gateway_bin();
    println!(
        "shutdown: {} (trials {trials}, sessions {sessions}, prompted {prompted}, sleep tools {tools})",
        bin.display()
    );
    let mut exits = Vec::new();
    let mut failures = 0;
    for trial in 1..=trials {
        let home = TempDir::new("shutdown");
        match run_trial(&bin, home.path(), sessions, prompted, tools) {
            Ok(t) => {
                println!(
                    "trial {trial}: SIGTERM->exit {:>9}  ({}; setup {}, rss {}, sleeps {} of which alive \
                     at exit {}, stdout after signal {} B, rows ended {}, interrupted results {})",
                    fmt_duration(t.exit),
                    t.status,
                    fmt_duration(t.setup),
                    fmt_kb(t.rss_kb),
                    t.sleeps,
                    t.sleeps_alive_at_exit,
                    t.stdout_bytes_after_signal,
                    t.ended_rows,
                    t.interrupted_results,
                );
                let ok = t.sleeps == tools
                    && t.sleeps_alive_at_exit == 0
                    && t.ended_rows == sessions as i64
                    && t.interrupted_results == tools as i64
                    && t.status == "exit status: 0";
                if !ok {
                    failures += 1;
                    let stderr = clipped_stderr(home.path());
                    println!(
                        "trial {trial}: FAILED a check (see the line above); {}; home kept: {}\n\
                         --- gateway stderr ---\n{stderr}",
                        db_summary(home.path()),
                        home.keep().display()
                    );
                }
                exits.push(t.exit);
            }
            Err(e) => {
                failures += 1;
                let stderr =
                    std::fs::read_to_string(home.path().join("gateway.stderr")).unwrap_or_default();
                println!(
                    "trial {trial}: error: {e}; home kept: {}\n--- gateway stderr ---\n{stderr}",
                    home.keep().display()
                );
            }
        }
    }
    exits.sort_unstable();
    if !exits.is_empty() {
        println!(
            "SIGTERM->exit over {} trials: min {}  median {}  max {}  (target < 50 ms: {})",
            exits.len(),
            fmt_duration(exits[0]),
            fmt_duration(percentile(&exits, 50.0)),
            fmt_duration(exits[exits.len() - 1]),
            if exits[exits.len() - 1] < Duration::from_millis(50) {
                "met in every trial"
            } else if percentile(&exits, 50.0) < Duration::from_millis(50) {
                "met at the median, not in every trial"
            } else {
                "NOT met"
            }
        );
    }
    if failures > 0 {
        println!("{failures} trial(s) failed");
        std::process::exit(1);
    }
}

fn run_trial(
    bin: &Path,
    home: &Path,
    sessions: usize,
    prompted: usize,
    tools: usize,
) -> Result<Trial, String> {
    let setup_start = Instant::now();
    // Dropping the client on an error kills the gateway.
    let mut client = spawn_gateway(bin, home)?;
    let pid = client.pid().ok_or("no gateway process")?;
    let sleeps = prepare(&mut client, sessions, prompted, tools)?;
    let setup = setup_start.elapsed();
    let (rss_kb, _) = memory_kb(pid).unwrap_or((0, 0));

    // The UI keeps reading stdout while the gateway shuts down (`wait_exit` reads it meanwhile).
    let start = Instant::now();
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).map_err(|e| format!("kill: {e}"))?;
    let status = client
        .wait_exit(start + STALL)
        .map_err(|e| format!("wait: {e}"))?;
    let exit = start.elapsed();
    let sleeps_alive_at_exit = sleeps.iter().filter(|p| still_alive(p)).count();
    client.close_input();
    let mut stdout_bytes_after_signal = 0u64;
    while let Ok(line) = client.next_line(Instant::now() + STALL) {
        stdout_bytes_after_signal += line.len() as u64 + 1;
    }

    let db = rusqlite::Connection::open(home.join("state.db")).map_err(|e| e.to_string())?;
    let ended_rows: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM sessions WHERE end_reason = 'tui_shutdown'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())?;
    let interrupted_results: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM messages WHERE role = 'tool' AND content LIKE '%[Command interrupted]%'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())?;
    Ok(Trial {
        exit,
        setup,
        rss_kb,
        sleeps: sleeps.len(),
        sleeps_alive_at_exit,
        stdout_bytes_after_signal,
        ended_rows,
        interrupted_results,
        status: status.to_string(),
    })
}

/// The gateway's stderr, each line cut to 300 characters.
fn clipped_stderr(home: &Path) -> String {
    let text = std::fs::read_to_string(home.join("gateway.stderr")).unwrap_or_default();
    text.lines()
        .map(|line| match line.char_indices().nth(300) {
            Some((i, _)) => format!("{}…", &line[..i]),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Row counts of `state.db`, for a failure report.
fn db_summary(home: &Path) -> String {
    let count = |sql: &str| -> String {
        rusqlite::Connection::open(home.join("state.db"))
            .and_then(|db| db.query_row(sql, [], |r| r.get::<_, i64>(0)))
            .map_or_else(|e| format!("error: {e}"), |n| n.to_string())
    };
    format!(
        "state.db: {} sessions, {} ended, {} messages, {} tool results",
        count("SELECT COUNT(*) FROM sessions"),
        count("SELECT COUNT(*) FROM sessions WHERE ended_at IS NOT NULL"),
        count("SELECT COUNT(*) FROM messages"),
        count("SELECT COUNT(*) FROM messages WHERE role = 'tool'"),
    )
}

/// Creates the sessions, runs the ordinary turns, starts the sleeps; returns the sleep processes.
fn prepare(
    client: &mut Client,
    sessions: usize,
    prompted: usize,
    tools: usize,
) -> Result<Vec<Proc>, String> {
    let ids = create_sessions(client, sessions, 100)?;

    // Ordinary turns, all in flight at once, then wait for each to complete.
    for (i, id) in ids.iter().take(prompted).enumerate() {
        client.send_request(
            "prompt.submit",
            json!({"session_id": id, "text": format!("turn {i}: please summarise the state of the session")}),
        )?;
    }
    let mut completed = 0;
    while completed < prompted {
        let frame = client.wait_for(Instant::now() + STALL, |f| {
            event_type(f) == Some("message.complete")
        })?;
        if frame["params"]["payload"]["status"] != json!("complete") {
            return Err(format!("a turn did not complete: {frame}"));
        }
        completed += 1;
    }

    // The sleeps: the last `tools` sessions (some of them also prompted when counts overlap).
    for id in ids.iter().rev().take(tools) {
        client.send_request(
            "prompt.submit",
            json!({"session_id": id, "text": "$ sleep 300"}),
        )?;
    }
    let mut started = 0;
    while started < tools {
        let frame = client.wait_for(Instant::now() + STALL, |f| {
            event_type(f) == Some("tool.start") || f.get("error").is_some()
        })?;
        if frame.get("error").is_some() {
            return Err(format!("prompt.submit failed: {frame}"));
        }
        started += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sleeps: Vec<Proc> = descendants(client.pid().unwrap_or(0))
            .into_iter()
            .filter(|p| p.comm == "sleep" && p.state != 'Z')
            .collect();
        if sleeps.len() >= tools {
            return Ok(sleeps);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {tools} sleeps running after 10 s",
                sleeps.len()
            ));
        }
        // Keep reading so the gateway is never blocked on its stdout meanwhile.
        let _ = client.wait_for(Instant::now() + Duration::from_millis(5), |_: &Value| true);
    }
}
