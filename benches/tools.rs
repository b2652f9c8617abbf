//! What the supervisor costs per command: `bash -c true` started through
//! `tools::process::spawn` (the gateway binary re-executed as the supervisor, which starts bash in
//! a new session, reports its pid, reaps it and cleans up its group) against a bare
//! `bash -c true` spawn and wait. Target: the supervisor path under 2x the bare one.
//!
//! ```text
//! cargo bench --bench tools -- --warm-up-time 1 --measurement-time 3
//! ```

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use tui_gateway::tools::process::{self, Streams};

use common::{TempDir, gateway_bin};

fn tools(c: &mut Criterion) {
    let bin: PathBuf = gateway_bin();
    let cwd = TempDir::new("tools");
    let mut group = c.benchmark_group("tools");
    group.sample_size(30);

    group.bench_function("spawn_wait/bare_bash_true", |b| {
        b.iter(|| {
            let status = Command::new("bash")
                .args(["-c", "true"])
                .current_dir(cwd.path())
                .stdin(Stdio::null())
                .status()
                .expect("bash");
            assert!(status.success());
        });
    });

    group.bench_function("spawn_wait/supervised_bash_true", |b| {
        b.iter(|| {
            let mut spawned = process::spawn(&bin, "true", cwd.path(), Streams::Merged)
                .expect("spawn through the supervisor");
            let status = spawned.child.wait().expect("wait for the supervisor");
            assert_eq!(process::exit_code(status), 0);
        });
    });
    group.finish();
}

criterion_group!(benches, tools);
criterion_main!(benches);
