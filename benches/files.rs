//! The file tools against the external tool a shell user would run, each timed the same way:
//! the whole call from start to result (ours run in-process, stepped with the loop's 8 ms
//! budget as a gateway steps them; theirs spawned and waited for, output read), the median of
//! `RUNS` runs after one warm-up, reported as a ratio (ours / theirs), with the longest any
//! one start or step of ours held the loop over all its runs (the loop's budget is 8 ms a step).
//!
//! - `read_file` of a 500-line page in the middle of a 10 MB file against `sed -n`;
//! - `search_files` for a regex over a 100,000-file tree against `rg` — or, where `rg` is not
//!   installed (it says so), `grep -rn`; the tree has no `.gitignore`, so both search it all;
//! - the same over one directory of 200,000 files (its entries read across steps);
//! - `patch` (replace mode) of one line of a 1 MB file against `patch` with a unified diff of
//!   the same edit (each run on a fresh copy, not timed).
//!
//! ```text
//! cargo bench --bench files
//! ```

// The bench reads and writes its own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tui_gateway::tools::{STEP_BUDGET, Tool, alone, files};

const RUNS: usize = 7;

fn median(mut f: impl FnMut() -> Duration) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..RUNS).map(|_| f()).collect();
    times.sort();
    times[RUNS / 2]
}

thread_local! {
    /// The longest any start or step of ours held the loop, over every run of this case.
    static WORST_STEP: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

fn ours(tool: &mut dyn Tool, dir: &Path, args: &serde_json::Value) -> Duration {
    let t = Instant::now();
    let r = alone::run(tool, dir.to_str().unwrap(), dir, args, STEP_BUDGET);
    assert!(r.result.error.is_none(), "{:?}", r.result);
    WORST_STEP.with(|w| w.set(w.get().max(r.worst_step)));
    t.elapsed()
}

fn theirs(cmd: &mut Command) -> Duration {
    let t = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{cmd:?}");
    t.elapsed()
}

fn report(what: &str, ours: Duration, theirs: Duration, baseline: &str) {
    let worst = WORST_STEP.with(|w| w.replace(Duration::ZERO));
    println!(
        "{what:<40} ours {:>9.2} ms  {baseline} {:>9.2} ms  ratio {:.2}x  (our longest step {:.2} ms)",
        ours.as_secs_f64() * 1e3,
        theirs.as_secs_f64() * 1e3,
        ours.as_secs_f64() / theirs.as_secs_f64(),
        worst.as_secs_f64() * 1e3
    );
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

fn main() {
    let root = match Path::new("/dev/shm") {
        shm if shm.is_dir() => shm.to_path_buf(),
        _ => std::env::temp_dir(),
    };
    let dir: PathBuf = root.join(format!("tuigw-bench-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // read_file: a page from the middle of a 10 MB file.
    let big = dir.join("big.txt");
    let line = "the quick brown fox jumps over the lazy dog, line of a ten megabyte file ..\n";
    let lines = 10_000_000 / line.len();
    std::fs::write(&big, line.repeat(lines)).unwrap();
    let from = lines / 2;
    let o = median(|| {
        ours(
            &mut files::ReadFile::default(),
            &dir,
            &json!({"path": "big.txt", "offset": from, "limit": 500}),
        )
    });
    let t = median(|| {
        theirs(
            Command::new("sed")
                .arg("-n")
                .arg(format!("{from},{}p", from + 499))
                .arg(&big),
        )
    });
    report("read_file 500 lines mid 10 MB", o, t, "sed -n");

    // patch: one line of a 1 MB file.
    let (one, fresh) = (dir.join("one.txt"), dir.join("one.orig"));
    let text: String = (0..14_000)
        .map(|i| format!("line {i:06} of a one megabyte file to patch ....\n"))
        .collect();
    std::fs::write(&fresh, &text).unwrap();
    let diff = dir.join("one.diff");
    std::fs::write(
        &diff,
        "--- one.txt\n+++ one.txt\n@@ -7001,1 +7001,1 @@\n-line 007000 of a one megabyte file to patch ....\n+line 007000 was patched\n",
    )
    .unwrap();
    let args = json!({"path": "one.txt", "old_string": "line 007000 of a one megabyte file to patch ....", "new_string": "line 007000 was patched"});
    let o = median(|| {
        std::fs::copy(&fresh, &one).unwrap();
        ours(&mut files::Patch::default(), &dir, &args)
    });
    let t = median(|| {
        std::fs::copy(&fresh, &one).unwrap();
        theirs(Command::new("patch").arg("-s").arg(&one).arg(&diff))
    });
    assert!(
        std::fs::read_to_string(&one)
            .unwrap()
            .contains("was patched")
    );
    report("patch one line of 1 MB", o, t, "patch");
    for f in [&big, &one, &fresh, &diff] {
        let _ = std::fs::remove_file(f);
    }

    // search_files: 100,000 files (hard links to two bodies), one in 100 matching.
    let tree = dir.join("tree");
    let (hit, miss) = (dir.join("hit"), dir.join("miss"));
    std::fs::write(&hit, "fn one() {}\nlet needle_42 = 1;\nfn two() {}\n").unwrap();
    std::fs::write(&miss, "fn one() {}\nlet hay = 1;\nfn two() {}\n").unwrap();
    for d in 0..500 {
        let sub = tree.join(format!("d{d:03}"));
        std::fs::create_dir_all(&sub).unwrap();
        for i in 0..200 {
            let body = if i % 100 == 7 { &hit } else { &miss };
            std::fs::hard_link(body, sub.join(format!("f{i:03}.rs"))).unwrap();
        }
    }
    let args = json!({"pattern": "needle_\\d+", "path": "tree", "limit": 50});
    let o = median(|| ours(&mut files::SearchFiles::default(), &dir, &args));
    let (baseline, t) = if on_path("rg") {
        (
            "rg",
            median(|| theirs(Command::new("rg").args(["-n", "needle_\\d+"]).arg(&tree))),
        )
    } else {
        println!("rg is not installed: the search baseline is grep -rnE");
        (
            "grep -rnE",
            median(|| {
                theirs(
                    Command::new("grep")
                        .args(["-rnE", "needle_[0-9]+"])
                        .arg(&tree),
                )
            }),
        )
    };
    report("search_files 100,000 files", o, t, baseline);

    // search_files: one directory of 200,000 entries (read 512 a step), one in 1,000 matching.
    let flat = dir.join("flat");
    std::fs::create_dir_all(&flat).unwrap();
    for i in 0..200_000 {
        let body = if i % 1000 == 7 { &hit } else { &miss };
        std::fs::hard_link(body, flat.join(format!("f{i:06}.rs"))).unwrap();
    }
    let args = json!({"pattern": "needle_\\d+", "path": "flat", "limit": 50});
    let o = median(|| ours(&mut files::SearchFiles::default(), &dir, &args));
    let t = if baseline == "rg" {
        median(|| theirs(Command::new("rg").args(["-n", "needle_\\d+"]).arg(&flat)))
    } else {
        median(|| {
            theirs(
                Command::new("grep")
                    .args(["-rnE", "needle_[0-9]+"])
                    .arg(&flat),
            )
        })
    };
    report("search_files one dir of 200,000 files", o, t, baseline);
    let _ = std::fs::remove_dir_all(&dir);
}
