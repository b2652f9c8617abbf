//! The sequences against a real git (`bash -c` here, in place of the runner) on scratch
//! directories: what they leave in the store is what Hermes reads back.

use std::path::Path;

use super::*;
use crate::util::ScratchDir;

/// Carry a sequence to its end, running its commands in the work tree.
fn drive<T>(t: &Target, mut step: impl FnMut(Option<&Outcome>) -> Step<T>) -> T {
    let mut last: Option<Outcome> = None;
    for _ in 0..10_000 {
        match step(last.as_ref()) {
            Step::Done(v) => return v,
            Step::Do(Cmd::Fs(op)) => last = Some(super::super::fs_op(&op, t, 1_000.0)),
            Step::Do(Cmd::Run { line, .. }) => {
                let out = std::process::Command::new("bash")
                    .arg("-c")
                    .arg(&line)
                    .current_dir(&t.work_tree)
                    .output()
                    .unwrap();
                last = Some(Outcome {
                    code: out.status.code().unwrap_or(-1),
                    stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                });
            }
        }
    }
    panic!("the sequence did not end");
}

const LIMITS: SnapshotLimits = SnapshotLimits {
    max_snapshots: 20,
    max_file_bytes: 1024,
    max_total_bytes: 0,
    max_files: 1000,
};

struct Bench {
    _scratch: ScratchDir,
    t: Target,
}

fn bench(tag: &str) -> Bench {
    let scratch = ScratchDir::new(tag);
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let work = std::fs::canonicalize(&work).unwrap();
    let store = layout::Store::of_home(&scratch.path().join("home"));
    Bench {
        t: Target::new(store, work),
        _scratch: scratch,
    }
}

impl Bench {
    fn take(&self, limits: SnapshotLimits, reason: &str) -> TakeEnd {
        let mut take = Take::new(self.t.clone(), limits, reason.into());
        drive(&self.t, |last| take.step(last))
    }
    fn list(&self) -> Vec<Entry> {
        let mut list = List::new(self.t.clone(), 20);
        drive(&self.t, |last| list.step(last))
    }
    fn write(&self, name: &str, text: &str) {
        let path = self.t.work_tree.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.t.work_tree.join(name)).unwrap_or_default()
    }
}

#[test]
fn snapshots_list_diff_and_restore_through_the_shared_store() {
    let b = bench("cp-seq");
    b.write("a.txt", "one\n");
    b.write("src/b.txt", "bee\n");
    let TakeEnd::Taken(first) = b.take(LIMITS, "before write_file") else {
        panic!("no first snapshot")
    };
    assert_eq!(b.take(LIMITS, "again"), TakeEnd::Unchanged);
    // The store is Hermes' layout; nothing of it is in the project.
    assert!(b.t.store.index(&b.t.hash).is_file());
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(b.t.store.meta(&b.t.hash)).unwrap()).unwrap();
    assert_eq!(meta["workdir"], b.t.work_tree.display().to_string());
    assert!(!b.t.work_tree.join(".git").exists());
    let exclude = std::fs::read_to_string(b.t.store.exclude()).unwrap();
    assert!(exclude.lines().any(|l| l == "node_modules/"));

    b.write("a.txt", "two\n");
    b.write("big.bin", &"x".repeat(2048));
    let TakeEnd::Taken(second) = b.take(LIMITS, "before patch") else {
        panic!("no second snapshot")
    };
    let list = b.list();
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[0].hash.as_str(), list[0].reason.as_str()),
        (second.as_str(), "before patch")
    );
    assert_eq!(
        (list[0].files_changed, list[0].insertions, list[0].deletions),
        (1, 1, 1)
    );
    assert_eq!(
        (list[1].hash.as_str(), list[1].files_changed),
        (first.as_str(), 0)
    );

    b.write("a.txt", "three\n");
    let mut diff = Diff::new(b.t.clone(), LIMITS, first.clone());
    let (stat, text) = drive(&b.t, |last| diff.step(last)).unwrap();
    assert!(stat.contains("a.txt"), "{stat}");
    assert!(text.contains("-one") && text.contains("+three"), "{text}");
    assert!(
        !text.contains("big.bin"),
        "a file over the size limit is left out: {text}"
    );

    // One file back; the rest stays.
    b.write("src/b.txt", "changed\n");
    let mut r = Restore::new(b.t.clone(), LIMITS, first.clone(), Some("a.txt".into()));
    let result = drive(&b.t, |last| r.step(last));
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(result["reason"], "before write_file");
    assert_eq!(
        (b.read("a.txt"), b.read("src/b.txt")),
        ("one\n".into(), "changed\n".into())
    );
    // The restore snapshotted the tree first: it can be undone.
    let list = b.list();
    assert!(
        list[0]
            .reason
            .starts_with("pre-rollback snapshot (restoring to "),
        "{list:?}"
    );
    let mut undo = Restore::new(b.t.clone(), LIMITS, list[0].hash.clone(), None);
    assert_eq!(drive(&b.t, |last| undo.step(last))["success"], true);
    assert_eq!(b.read("a.txt"), "three\n");

    let mut missing = Restore::new(b.t.clone(), LIMITS, "abcdef12".into(), None);
    let result = drive(&b.t, |last| missing.step(last));
    assert_eq!(result["error"], "Checkpoint 'abcdef12' not found");
}

#[test]
fn a_chain_is_cut_to_max_snapshots_keeping_dates_and_reasons() {
    let b = bench("cp-trim");
    let limits = SnapshotLimits {
        max_snapshots: 2,
        ..LIMITS
    };
    for i in 0..4 {
        b.write("a.txt", &format!("{i}\n"));
        assert!(matches!(
            b.take(limits, &format!("snap {i}")),
            TakeEnd::Taken(_)
        ));
    }
    let list = b.list();
    let reasons: Vec<&str> = list.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["snap 3", "snap 2"]);
    // The oldest kept is the first of its chain now, with its own tree.
    let mut r = Restore::new(b.t.clone(), limits, list[1].hash.clone(), None);
    assert_eq!(drive(&b.t, |last| r.step(last))["success"], true);
    assert_eq!(b.read("a.txt"), "2\n");
}

#[test]
fn a_tree_past_the_cap_is_skipped_and_a_stale_project_swept() {
    let b = bench("cp-cap");
    for i in 0..5 {
        b.write(&format!("f{i}"), "x");
    }
    let few = SnapshotLimits {
        max_files: 3,
        ..LIMITS
    };
    match b.take(few, "r") {
        TakeEnd::Skipped(why) => assert!(why.contains("more than 3 files"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(b.take(LIMITS, "r"), TakeEnd::Taken(_)));
    // Touched long ago: the sweep forgets it (ref, index, metadata).
    let meta = json!({"workdir": b.t.work_tree, "created_at": 1.0, "last_touch": 1.0});
    std::fs::write(b.t.store.meta(&b.t.hash), meta.to_string()).unwrap();
    let base = Target {
        store: b.t.store.clone(),
        work_tree: b.t.store.base.clone(),
        hash: String::new(),
    };
    let mut sweep = Sweep::new(base.clone(), 7, 0, 30.0 * 86400.0);
    assert_eq!(drive(&base, |last| sweep.step(last)), 1);
    assert!(b.list().is_empty());
    assert!(!b.t.store.meta(&b.t.hash).exists() && !b.t.store.index(&b.t.hash).exists());
    assert!(b.t.store.base.join(layout::PRUNE_MARKER).is_file());
    assert!(Path::new(&b.t.store.dir.join("refs/heads")).is_dir());
}

#[test]
fn a_tree_counted_past_the_cap_runs_no_git_add() {
    let t = Target::new(layout::Store::of_home(Path::new("/h")), "/w".into());
    let mut take = Take::new(t, LIMITS, "r".into());
    let yes = Outcome::default();
    assert_eq!(take.step(None), Step::Do(Cmd::Fs(FsOp::StoreExists)));
    assert_eq!(take.step(Some(&yes)), Step::Do(Cmd::Fs(FsOp::Touch)));
    assert!(matches!(take.step(Some(&yes)), Step::Do(Cmd::Run { .. })));
    let counted = Outcome {
        stdout: "1001\n".into(),
        ..Outcome::default()
    };
    assert!(matches!(
        take.step(Some(&counted)),
        Step::Done(TakeEnd::Skipped(_))
    ));
}
