//! What the supervisor costs per command: `bash -c true` started through
//! `runner::process::spawn` (the zygote — the gateway binary re-executed once — forks a supervisor
//! that starts bash in a new session, reports, reaps it and cleans up its group) against a bare
//! `bash -c true` spawn and wait. Target: the supervisor path under 2x the bare one.
//!
//! ```text
//! cargo bench --bench tools -- --warm-up-time 1 --measurement-time 3
//! ```

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use std::io::Read;

use tui_gateway::runner::process::{self, Streams};
use tui_gateway::runner::supervisor::{Executable, Zygote};

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

    let mut zygote = Zygote::start(&Executable::open(bin), &[]).expect("start the zygote");
    for (name, pidns) in [
        ("spawn_wait/supervised_bash_true", false),
        ("spawn_wait/supervised_pidns_bash_true", true),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let spawned = process::spawn(
                    &mut zygote,
                    "true",
                    cwd.path(),
                    Streams::Merged,
                    false,
                    pidns,
                )
                .expect("spawn through the supervisor");
                // The supervisor's report ends with `exit STATUS` and EOF once it is gone.
                let mut report = String::new();
                let mut status = std::fs::File::from(spawned.status);
                loop {
                    match status.read_to_string(&mut report) {
                        Ok(_) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::yield_now()
                        }
                        Err(e) => panic!("status pipe: {e}"),
                    }
                }
                assert!(report.contains("exit 0"), "{report}");
            });
        });
    }
    group.finish();
}

criterion_group!(benches, tools);
criterion_main!(benches);
