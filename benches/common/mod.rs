//! Helpers shared by the benches: temporary homes, the gateway binary, process-tree probes, and
//! (in `measure`, shared with the load driver) spawning and measuring a gateway through
//! `tui_gateway::client`, and result formatting.
//!
//! Each bench includes this module with `mod common;` and uses a different part of it.
#![allow(dead_code)]
// Benches read and write their own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

pub mod bigdb;
mod measure;

// Each bench uses a different part.
#[allow(unused_imports)]
pub use measure::*;
#[allow(unused_imports)]
pub use tui_gateway::client::{Client, event_type};

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "tui-gateway-bench-{tag}-{}-{nanos:08x}-{n}",
            std::process::id()
        ));
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the directory (for inspection after a failure); returns its path.
    pub fn keep(self) -> PathBuf {
        let path = self.path.clone();
        std::mem::forget(self);
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The release gateway binary (`target/release/tui-gateway`). Cargo builds it before it builds a
/// bench and names it in `CARGO_BIN_EXE_tui-gateway`; the path next to the bench executable
/// (`target/release/deps/<bench>` → `target/release/tui-gateway`) is the fallback.
pub fn gateway_bin() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_tui-gateway"));
    if built.is_file() {
        return built;
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("tui-gateway")));
    match beside {
        Some(path) if path.is_file() => path,
        _ => {
            eprintln!(
                "error: the gateway binary is missing ({}); build it first with \
                 `cargo build --release`",
                built.display()
            );
            std::process::exit(2);
        }
    }
}

/// A process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub state: char,
    pub start: u64,
}

pub fn read_proc(pid: u32) -> Option<Proc> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_string();
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    Some(Proc {
        pid,
        comm,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        // Field 22 of stat, the 20th after the name and state.
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Every process whose chain of parents leads to `root` (not `root` itself).
pub fn descendants(root: u32) -> Vec<Proc> {
    let all: Vec<Proc> = fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(read_proc)
                .collect()
        })
        .unwrap_or_default();
    let parent: std::collections::HashMap<u32, u32> = all.iter().map(|p| (p.pid, p.ppid)).collect();
    all.into_iter()
        .filter(|p| {
            let mut at = p.ppid;
            for _ in 0..64 {
                if at == root {
                    return true;
                }
                match parent.get(&at) {
                    Some(&up) if up != at => at = up,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// Whether the process recorded in `p` still runs (a zombie or a reused pid does not count).
pub fn still_alive(p: &Proc) -> bool {
    read_proc(p.pid).is_some_and(|now| now.start == p.start && now.state != 'Z')
}

/// Whether cargo ran this binary as a bench (`cargo bench` passes `--bench`); `cargo test
/// --benches` does not, and then the bench binaries run a small smoke version.
pub fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A `--name value` option among the bench binary's arguments (cargo adds `--bench`; other
/// arguments are ignored).
pub fn arg_usize(name: &str, default: usize) -> usize {
    arg_value(name)
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
        })
        .unwrap_or(default)
}

/// A `--name value` option as text, as [`arg_usize`].
pub fn arg_string(name: &str, default: &str) -> String {
    arg_value(name).unwrap_or_else(|| default.to_string())
}

fn arg_value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone())
}
