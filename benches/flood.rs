//! `ping` during an output flood (a bench binary without criterion).
//!
//! Spawns the release gateway, measures sequential `ping` round trips on an idle gateway, then
//! starts `yes | head -c BYTES` as a `terminal` tool call of a session (default 500,000,000 bytes)
//! and measures sequential pings again while the command floods its pipe (the gateway reads it
//! all, keeps the head and tail, and streams `tool.output` at a bounded rate). Only pings that
//! completed before `tool.complete` arrived count as "during the flood"; it also reports how long
//! the flood took, the `tool.output` traffic, and the gateway's peak RSS.
//!
//! ```text
//! cargo bench --bench flood -- [--pings 2000] [--bytes 500000000]
//! ```

// The bench reads and writes its own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{
    STALL, TempDir, arg_usize, bench_mode, event_type, fmt_duration, fmt_kb, fmt_percentiles,
    gateway_bin, memory_kb, ping_round_trips, spawn_gateway,
};

fn main() {
    // Under `cargo test --benches` (no `--bench`): a small smoke run.
    let full = bench_mode();
    let pings = arg_usize("--pings", if full { 2000 } else { 200 });
    let bytes = arg_usize("--bytes", if full { 500_000_000 } else { 50_000_000 });
    let bin = gateway_bin();
    let home = TempDir::new("flood");
    println!(
        "flood: {} (pings {pings}, flood {bytes} bytes)",
        bin.display()
    );
    if let Err(e) = run(&bin, home.path(), pings, bytes) {
        let stderr =
            std::fs::read_to_string(home.path().join("gateway.stderr")).unwrap_or_default();
        println!("error: {e}\n--- gateway stderr ---\n{stderr}");
        std::process::exit(1);
    }
}

fn report(metric: &str, value: impl std::fmt::Display) {
    println!("{metric:<40} {value}");
}

fn run(
    bin: &std::path::Path,
    home: &std::path::Path,
    pings: usize,
    bytes: usize,
) -> Result<(), String> {
    let mut client = spawn_gateway(bin, home)?;
    let pid = client.pid().ok_or("no gateway process")?;
    let session = client.call(
        "session.create",
        json!({"cols": 100}),
        Instant::now() + STALL,
    )?["session_id"]
        .as_str()
        .ok_or("no session_id")?
        .to_string();

    let mut idle = ping_round_trips(&mut client, pings / 10, pings, |_| {})?;
    report("ping, idle gateway", fmt_percentiles(&mut idle, "pings"));

    client.send_request(
        "prompt.submit",
        json!({"session_id": session, "text": format!("$ yes | head -c {bytes}")}),
    )?;
    client.wait_event("tool.start", Instant::now() + STALL)?;
    let flood_start = Instant::now();

    let mut during = Vec::with_capacity(pings);
    let mut after = 0usize;
    let mut flood_end = None;
    let mut outputs = 0usize;
    let mut output_bytes = 0usize;
    let mut peak_kb = 0u64;
    let mut note = |frame: &Value, flood_end: &mut Option<Instant>| match event_type(frame) {
        Some("tool.output") => {
            outputs += 1;
            output_bytes += frame["params"]["payload"]["text"]
                .as_str()
                .map_or(0, str::len);
        }
        Some("tool.complete") if flood_end.is_none() => *flood_end = Some(Instant::now()),
        _ => {}
    };
    for i in 0..pings {
        let mut sample = ping_round_trips(&mut client, 0, 1, |f| note(f, &mut flood_end))?;
        let elapsed = sample.pop().unwrap_or_default();
        if flood_end.is_none() {
            during.push(elapsed);
        } else {
            after += 1;
        }
        if i % 100 == 0
            && let Some((_, hwm)) = memory_kb(pid)
        {
            peak_kb = peak_kb.max(hwm);
        }
    }
    let pings_done = Instant::now();
    // Let the flood finish (it is not part of the measurement).
    while flood_end.is_none() {
        let frame = client.next_frame(Instant::now() + Duration::from_secs(120))?;
        note(&frame, &mut flood_end);
    }
    if let Some((_, hwm)) = memory_kb(pid) {
        peak_kb = peak_kb.max(hwm);
    }
    let flood_end = flood_end.unwrap_or(pings_done);
    report(
        "ping, during the flood",
        fmt_percentiles(&mut during, "pings"),
    );
    if after > 0 {
        report(
            "pings after the flood ended (dropped)",
            format!("{after} (the flood was shorter than the pings; raise --bytes)"),
        );
    }
    report(
        "flood duration (tool.start→complete)",
        format!(
            "{} ({:.0} MB/s through the gateway)",
            fmt_duration(flood_end - flood_start),
            bytes as f64 / 1e6 / (flood_end - flood_start).as_secs_f64()
        ),
    );
    report(
        "tool.output events during the pings",
        format!("{outputs} ({output_bytes} bytes of text)"),
    );
    report("gateway peak RSS (VmHWM)", fmt_kb(peak_kb));
    let status = client
        .close(Instant::now() + STALL)
        .map_err(|killed| format!("the gateway did not exit in time (killed: {killed:?})"))?;
    report("gateway exit after stdin close", status);
    Ok(())
}
