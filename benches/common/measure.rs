//! Measuring a spawned gateway through `tui_gateway::client`: spawning it for a measurement,
//! `ping` round trips and the bare-pipe round trips they are held against (both can be pinned to
//! one CPU), windowed session creation, memory, percentiles and formatting.
//!
//! Shared by the benches (through `benches/common`) and the load driver (`examples/load.rs`
//! includes this file by path).
#![allow(dead_code)]

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tui_gateway::client::{Client, event_type};

/// How long any single expected frame may take before a measurement gives up.
pub const STALL: Duration = Duration::from_secs(30);

/// Spawns `bin` as the TUI does (`-m tui_gateway.entry`) with `HERMES_HOME=home`, working
/// directory `home`, stderr into `home/gateway.stderr`, and waits for `gateway.ready`.
pub fn spawn_gateway(bin: &Path, home: &Path) -> Result<Client, String> {
    spawn_gateway_with(bin, home, &[])
}

/// [`spawn_gateway`] with `env` added to the gateway's environment.
pub fn spawn_gateway_with(bin: &Path, home: &Path, env: &[(&str, &str)]) -> Result<Client, String> {
    let stderr = fs::File::create(home.join("gateway.stderr")).map_err(|e| e.to_string())?;
    let spawned = Instant::now();
    let mut command = Client::gateway_command(bin);
    command
        .env("HERMES_HOME", home)
        .current_dir(home)
        .stderr(stderr);
    for (k, v) in env {
        command.env(k, v);
    }
    let mut client =
        Client::spawn(&mut command).map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    client.wait_event("gateway.ready", spawned + STALL)?;
    Ok(client)
}

/// `count` sequential `ping` round trips after `warmup` untimed ones; frames that are not the
/// answer (events of running turns) go to `other`.
pub fn ping_round_trips(
    client: &mut Client,
    warmup: usize,
    count: usize,
    mut other: impl FnMut(&Value),
) -> Result<Vec<Duration>, String> {
    let mut samples = Vec::with_capacity(count);
    for i in 0..warmup + count {
        let start = Instant::now();
        let id = client.send_request("ping", json!({}))?;
        let answer = client.wait_response(&id, start + STALL, |_, frame| other(&frame))?;
        if answer["result"]["pong"] != json!(true) {
            return Err(format!("unexpected ping answer: {answer}"));
        }
        if i >= warmup {
            samples.push(start.elapsed());
        }
    }
    Ok(samples)
}

/// The same round trips through `cat`, the floor any stdio gateway is measured against: the same
/// client writes the same `ping` request and reads it back as a frame. `cpu` pins `cat` as well.
pub fn pipe_round_trips(
    warmup: usize,
    count: usize,
    cpu: Option<usize>,
) -> Result<Vec<Duration>, String> {
    let mut cat =
        Client::spawn(&mut Command::new("cat")).map_err(|e| format!("cannot start cat: {e}"))?;
    if let (Some(cpu), Some(pid)) = (cpu, cat.pid()) {
        pin_to_cpu(pid, cpu)?;
    }
    let mut samples = Vec::with_capacity(count);
    for i in 0..warmup + count {
        let start = Instant::now();
        let id = cat.send_request("ping", json!({}))?;
        cat.wait_for(start + STALL, |f| f.get("id") == Some(&id))?;
        if i >= warmup {
            samples.push(start.elapsed());
        }
    }
    Ok(samples)
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>, String> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(|e| format!("sched_getaffinity: {e}"))?;
    Ok((0..CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect())
}

/// Restricts process `pid` (0: this process) to `cpu`; returns the set it had.
pub fn pin_to_cpu(pid: u32, cpu: usize) -> Result<CpuSet, String> {
    let pid = Pid::from_raw(pid as i32);
    let before = sched_getaffinity(pid).map_err(|e| format!("sched_getaffinity: {e}"))?;
    let mut only = CpuSet::new();
    only.set(cpu).map_err(|e| format!("cpu {cpu}: {e}"))?;
    sched_setaffinity(pid, &only).map_err(|e| format!("pin to cpu {cpu}: {e}"))?;
    Ok(before)
}

/// Gives process `pid` (0: this process) back the CPUs it had.
pub fn unpin(pid: u32, set: &CpuSet) -> Result<(), String> {
    sched_setaffinity(Pid::from_raw(pid as i32), set).map_err(|e| format!("sched_setaffinity: {e}"))
}

/// Creates `count` sessions, keeping up to `window` requests in flight; returns their ids.
pub fn create_sessions(
    client: &mut Client,
    count: usize,
    window: usize,
) -> Result<Vec<String>, String> {
    let mut ids = Vec::with_capacity(count);
    let mut in_flight = std::collections::HashSet::new();
    let mut sent = 0;
    while ids.len() < count {
        while sent < count && in_flight.len() < window.max(1) {
            in_flight.insert(client.send_request("session.create", json!({"cols": 100}))?);
            sent += 1;
        }
        let frame = client
            .wait_for(Instant::now() + STALL, |f| {
                event_type(f).is_none() && f.get("id").is_some_and(|id| in_flight.contains(id))
            })
            .map_err(|e| format!("{e} ({} of {count} sessions created)", ids.len()))?;
        in_flight.remove(&frame["id"]);
        match frame["result"]["session_id"].as_str() {
            Some(session) => ids.push(session.to_string()),
            None => return Err(format!("session.create failed: {frame}")),
        }
    }
    Ok(ids)
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
pub fn memory_kb(pid: u32) -> Option<(u64, u64)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some((status_kb(&status, "VmRSS")?, status_kb(&status, "VmHWM")?))
}

/// The value of a `Key:   1234 kB` line of `/proc/<pid>/status`.
pub fn status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `p50 … p99 … max … (n <what>)`; sorts the samples.
pub fn fmt_percentiles(samples: &mut [Duration], what: &str) -> String {
    if samples.is_empty() {
        return format!("no {what}");
    }
    samples.sort_unstable();
    format!(
        "p50 {}  p99 {}  max {}  ({} {what})",
        fmt_duration(percentile(samples, 50.0)),
        fmt_duration(percentile(samples, 99.0)),
        fmt_duration(samples[samples.len() - 1]),
        samples.len()
    )
}

pub fn fmt_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

pub fn fmt_kb(kb: u64) -> String {
    fmt_bytes(kb as f64 * 1024.0)
}

pub fn fmt_bytes(bytes: f64) -> String {
    if bytes < 1024.0 {
        format!("{bytes:.0} B")
    } else if bytes < 1024.0 * 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    }
}
