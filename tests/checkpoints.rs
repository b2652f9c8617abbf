//! Hermes' checkpoints and `/rollback` over the protocol: turns with `write_file`, `patch` and a
//! destructive `terminal` command on a scratch project snapshot it first (Hermes' shared shadow
//! store under `$HERMES_HOME/checkpoints/`), `rollback.list/diff/restore` (all, one file, and a
//! restore undone), off by default, Hermes' own Python reading our store and we reading its,
//! no `git` on `PATH`, a tree past the cap, a full disk (a small tmpfs in a namespace of the
//! gateway's own), Hermes' pre-v2 stores archived and old archives swept, the automatic sweep's
//! `git gc` giving way to a `rollback.list` and to the next snapshot, and a large tree
//! snapshotted while `ping` is answered throughout.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// A gateway whose one session works in a scratch project.
struct Bench {
    g: Gateway,
    home: TempHome,
    work: TempHome,
    sid: String,
}

fn bench(tag: &str, config: &str, env: &[(&str, &str)]) -> Bench {
    let home = TempHome::new(tag);
    let work = TempHome::new(&format!("{tag}-work"));
    std::fs::write(home.path.join("config.yaml"), config).unwrap();
    let mut b = Gateway::builder().tag(tag).home(&home.path);
    for (k, v) in env {
        b = b.env(k, v);
    }
    let mut g = b.start();
    let s = g.create_session(json!({"cwd": work.path.to_str().unwrap()}));
    Bench {
        g,
        home,
        work,
        sid: s.id,
    }
}

const ON: &str = "checkpoints:\n  enabled: true\n";

impl Bench {
    fn path(&self, name: &str) -> PathBuf {
        self.work.path.join(name)
    }
    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }
    /// A `%tool {args}` turn that completes; its `tool.complete` payload.
    fn tool(&mut self, tool: &str, args: Value) -> Value {
        let done = self.g.tool_turn(&self.sid, tool, &args);
        assert!(done.get("error").is_none(), "{done}");
        done
    }
    fn list(&mut self) -> Vec<Value> {
        let r = self
            .g
            .call("rollback.list", json!({"session_id": self.sid}));
        assert_eq!(r["enabled"], true, "{r}");
        r["checkpoints"].as_array().unwrap().clone()
    }
    fn restore(&mut self, hash: &str, file: Option<&str>) -> Value {
        let mut p = json!({"session_id": self.sid, "hash": hash});
        if let Some(f) = file {
            p["file_path"] = json!(f);
        }
        self.g.call("rollback.restore", p)
    }
    fn warnings(&mut self) -> Vec<String> {
        let sid = self.sid.clone();
        self.g
            .events_of_session(&sid)
            .iter()
            .filter(|e| e["type"] == "status.update" && e["payload"]["kind"] == "warn")
            .map(|e| e["payload"]["text"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

fn reasons(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|c| c["message"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn edits_are_snapshotted_first_and_rolled_back_whole_or_by_file() {
    let mut b = bench("cp-roll", ON, &[]);
    std::fs::write(b.path("a.txt"), "one\n").unwrap();
    std::fs::write(b.path("b.txt"), "bee\n").unwrap();
    b.tool("write_file", json!({"path": "a.txt", "content": "two\n"}));
    // A second edit of the same turn's directory would not snapshot again; a new turn does.
    b.tool(
        "patch",
        json!({"mode": "replace", "path": "a.txt", "old_string": "two", "new_string": "three"}),
    );
    b.tool("write_file", json!({"path": "b.txt", "content": "bzz\n"}));
    assert_eq!(b.read("a.txt"), "three\n");
    let list = b.list();
    assert_eq!(
        reasons(&list),
        ["before write_file", "before patch", "before write_file"],
        "{list:?}"
    );
    assert!(
        list.iter()
            .all(|c| c["hash"].as_str().unwrap().len() == 40 && c["timestamp"].is_string())
    );
    // Nothing of the store is in the project.
    assert!(!b.path(".git").exists());

    // The oldest checkpoint (number 3) against the tree now.
    let d =
        b.g.call("rollback.diff", json!({"session_id": b.sid, "hash": "3"}));
    let diff = d["diff"].as_str().unwrap();
    assert!(diff.contains("-one") && diff.contains("+three"), "{d}");
    assert!(d["stat"].as_str().unwrap().contains("a.txt"), "{d}");

    // One file back to checkpoint 2 (a.txt was "two" then); b.txt stays.
    let r = b.restore("2", Some("a.txt"));
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["file"], "a.txt");
    assert_eq!(
        (b.read("a.txt"), b.read("b.txt")),
        ("two\n".into(), "bzz\n".into())
    );

    // The whole directory back to the first checkpoint, by its hash; the last exchange
    // leaves the history as in Hermes.
    let first = b.list().last().unwrap()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let r = b.restore(&first, None);
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["reason"], "before write_file");
    assert!(r["history_removed"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(
        (b.read("a.txt"), b.read("b.txt")),
        ("one\n".into(), "bee\n".into())
    );

    // Each restore was snapshotted first: the last one is undone.
    let list = b.list();
    assert!(
        reasons(&list)[0].starts_with("pre-rollback snapshot (restoring to "),
        "{list:?}"
    );
    let undo = list[0]["hash"].as_str().unwrap().to_string();
    assert_eq!(b.restore(&undo, None)["success"], true);
    assert_eq!(
        (b.read("a.txt"), b.read("b.txt")),
        ("two\n".into(), "bzz\n".into())
    );

    // Refusals in Hermes' words.
    let r = b.restore("99", None);
    assert_eq!(r["success"], false, "{r}");
    let r = b.restore("--patch", Some("a.txt"));
    assert!(
        r["error"].as_str().unwrap().contains("Invalid commit hash"),
        "{r}"
    );
    let r = b.restore("1", Some("../outside"));
    assert!(r["error"].as_str().unwrap().contains("escapes"), "{r}");
    b.g.expect_code("rollback.diff", json!({"session_id": b.sid}), 4014);
    assert!(b.warnings().is_empty(), "{:?}", b.warnings());
}

#[test]
fn a_destructive_command_is_snapshotted_first_and_a_harmless_one_is_not() {
    let mut b = bench("cp-term", ON, &[]);
    std::fs::write(b.path("gone.txt"), "keep me\n").unwrap();
    let turn = b.g.run_turn(&b.sid, "$ ls");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    assert!(b.list().is_empty());
    let turn = b.g.run_turn(&b.sid, "$ rm -f gone.txt");
    assert_eq!(turn.complete["payload"]["status"], "complete");
    assert!(!b.path("gone.txt").exists());
    assert_eq!(reasons(&b.list()), ["before terminal: rm -f gone.txt"]);
    assert_eq!(b.restore("1", Some("gone.txt"))["success"], true);
    assert_eq!(b.read("gone.txt"), "keep me\n");
}

#[test]
fn checkpoints_are_off_unless_config_turns_them_on() {
    let mut b = bench("cp-off", "checkpoints:\n  enabled: false\n", &[]);
    b.tool("write_file", json!({"path": "a.txt", "content": "x\n"}));
    let r = b.g.call("rollback.list", json!({"session_id": b.sid}));
    assert_eq!(r, json!({"enabled": false, "checkpoints": []}));
    assert!(!b.home.path.join("checkpoints").exists());
    // Hermes' TUI switch turns them on whatever config.yaml says.
    let mut b = bench("cp-env", "", &[("HERMES_TUI_CHECKPOINTS", "1")]);
    b.tool("write_file", json!({"path": "a.txt", "content": "x\n"}));
    assert_eq!(
        b.list().len(),
        0,
        "an empty directory has nothing to snapshot"
    );
    b.tool("write_file", json!({"path": "a.txt", "content": "y\n"}));
    assert_eq!(reasons(&b.list()), ["before write_file"]);
}

#[test]
fn without_git_the_call_succeeds_and_the_user_is_told_once() {
    // A PATH with bash and nothing else: no git.
    let bin = TempHome::new("cp-nogit-bin");
    std::os::unix::fs::symlink("/bin/bash", bin.path.join("bash")).unwrap();
    let path = bin.path.to_str().unwrap().to_string();
    let mut b = bench("cp-nogit", ON, &[("PATH", &path)]);
    std::fs::write(b.path("a.txt"), "one\n").unwrap();
    b.tool("write_file", json!({"path": "a.txt", "content": "two\n"}));
    b.tool("write_file", json!({"path": "a.txt", "content": "three\n"}));
    assert_eq!(b.read("a.txt"), "three\n");
    let warned = b.warnings();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("git is not on PATH"), "{warned:?}");
    let (code, message, _) = b.g.call_err("rollback.list", json!({"session_id": b.sid}));
    assert_eq!(code, 5020);
    assert!(message.contains("git is not on PATH"), "{message}");
}

#[test]
fn a_tree_past_the_cap_is_skipped_said_once_and_the_edit_made() {
    let mut b = bench("cp-cap", ON, &[("TUI_GATEWAY_CHECKPOINT_MAX_FILES", "10")]);
    for i in 0..20 {
        std::fs::write(b.path(&format!("f{i}")), "x").unwrap();
    }
    b.tool("write_file", json!({"path": "a.txt", "content": "one\n"}));
    b.tool("write_file", json!({"path": "a.txt", "content": "two\n"}));
    assert_eq!(b.read("a.txt"), "two\n");
    let warned = b.warnings();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("more than 10 files"), "{warned:?}");
    assert!(b.list().is_empty());
}

/// Files of the large tree (`TUI_GATEWAY_TEST_CHECKPOINT_FILES`, default 20,000).
fn large_tree_files() -> usize {
    std::env::var("TUI_GATEWAY_TEST_CHECKPOINT_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn a_large_tree_is_snapshotted_while_every_ping_is_answered() {
    let files = large_tree_files();
    let mut b = bench(
        "cp-large",
        ON,
        &[(
            "TUI_GATEWAY_CHECKPOINT_MAX_FILES",
            &(files + 1000).to_string(),
        )],
    );
    for d in 0..(files / 1000).max(1) {
        let dir = b.path(&format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..1000.min(files) {
            std::fs::write(dir.join(format!("f{i}.txt")), format!("{d} {i}\n")).unwrap();
        }
    }
    let began = Instant::now();
    let start = submit(
        &mut b.g,
        &b.sid.clone(),
        r#"%write_file {"path": "new.txt", "content": "hi\n"}"#,
    );
    let (mut pings, mut worst) = (0u32, Duration::ZERO);
    let deadline = Instant::now() + secs(300);
    let sid = b.sid.clone();
    loop {
        let asked = Instant::now();
        let r = b.g.request("ping", json!({}));
        assert_eq!(r["result"], json!({"pong": true}), "{r}");
        worst = worst.max(asked.elapsed());
        pings += 1;
        let done = b.g.events_of_session_from(&sid, start);
        if done.iter().any(|e| e["type"] == "message.complete") {
            break;
        }
        assert!(Instant::now() < deadline, "the turn did not end");
    }
    eprintln!(
        "large tree: {files} files, {pings} pings answered during the turn ({:.1} s), longest wait {worst:?}",
        began.elapsed().as_secs_f64()
    );
    let turn = b.g.finish_turn(&sid, start, T);
    assert_eq!(turn.complete["payload"]["status"], "complete");
    assert_eq!(b.read("new.txt"), "hi\n");
    // The first snapshot queued the automatic sweep, whose `git gc` of the large store is
    // running: the list does not wait for it (one answer's deadline).
    let asked = Instant::now();
    let r = b.g.request("rollback.list", json!({"session_id": b.sid}));
    eprintln!(
        "large tree: rollback.list answered in {:?}",
        asked.elapsed()
    );
    let list = r["result"]["checkpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(reasons(&list), ["before write_file"], "{r}");
    assert!(b.warnings().is_empty(), "{:?}", b.warnings());
}

/// The first `git` on `PATH` (the real one, behind the stand-in).
fn real_git() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .expect("git on PATH")
}

/// Housekeeping never holds up a user: the automatic sweep's `git gc` (here a stand-in `git`
/// whose `gc` never ends) is stopped for a `rollback.list` and for the next edit's snapshot,
/// each answered at once, and starts again behind them; the store stays sound.
#[test]
fn rollback_and_snapshots_do_not_wait_behind_the_sweeps_gc() {
    let bin = TempHome::new("cp-gc-bin");
    let log = bin.path.join("gc.log");
    let fake = bin.path.join("git");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n# A git whose gc never ends (until it is stopped); the rest is git.\n\
             for a in \"$@\"; do [ \"$a\" = gc ] && {{ echo gc >> {log:?}; exec sleep 600; }}; done\n\
             exec {real:?} \"$@\"\n",
            real = real_git(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // One git command's timeout at its least (10 s; a gc gets three times that): well past
    // one answer's deadline, so waiting behind the gc would fail the list.
    let mut b = bench(
        "cp-gc",
        ON,
        &[("PATH", &path), ("HERMES_CHECKPOINT_TIMEOUT", "10")],
    );
    let gcs = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    std::fs::write(b.path("a.txt"), "one\n").unwrap();
    b.tool("write_file", json!({"path": "a.txt", "content": "two\n"}));
    assert!(
        procfs::poll_until(T, || gcs() == 1),
        "the first snapshot queues the sweep, whose gc runs"
    );
    // Answered within one answer's deadline, not the gc's.
    assert_eq!(reasons(&b.list()), ["before write_file"]);
    assert!(
        procfs::poll_until(T, || gcs() == 2),
        "the sweep starts again behind the list"
    );
    // The next edit's snapshot does not wait for it either.
    b.tool("write_file", json!({"path": "a.txt", "content": "three\n"}));
    assert_eq!(
        reasons(&b.list()),
        ["before write_file", "before write_file"]
    );
    assert!(procfs::poll_until(T, || gcs() >= 3), "and again");
    assert_eq!(b.restore("1", Some("a.txt"))["success"], true);
    assert_eq!(b.read("a.txt"), "two\n");
    let fsck = std::process::Command::new(real_git())
        .arg("--git-dir")
        .arg(b.home.path.join("checkpoints/store"))
        .args(["fsck", "--no-progress"])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "the store is sound after the stopped gcs: {}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    assert!(b.warnings().is_empty(), "{:?}", b.warnings());
}

// ---- Hermes' own Python on the same store ----

/// Hermes' reference Python, when it is there (`../shared/hermes-reference/python`).
fn hermes_python() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hermes-reference/python");
    let manager = dir.join("tools/checkpoint_manager.py");
    let python = std::process::Command::new("python3").arg("-V").output();
    (manager.is_file() && python.is_ok_and(|o| o.status.success())).then_some(dir)
}

/// Run Hermes' `CheckpointManager` on `work` with `HERMES_HOME=home`: `script` is Python with
/// `m` the manager and `W` the directory; prints JSON. The two helpers the reference imports
/// but does not ship (`utils.env_int`, `hermes_cli._subprocess_compat.windows_hide_flags`)
/// are stood in for with their obvious one-liners.
fn hermes(reference: &Path, home: &Path, work: &Path, script: &str) -> Value {
    let stubs = TempHome::new("cp-py-stubs");
    std::fs::create_dir_all(stubs.path.join("hermes_cli")).unwrap();
    std::fs::write(
        stubs.path.join("utils.py"),
        "import os\ndef env_int(name, default):\n    try:\n        return int(os.environ.get(name, default))\n    except ValueError:\n        return default\n",
    )
    .unwrap();
    std::fs::write(
        stubs.path.join("hermes_cli/_subprocess_compat.py"),
        "def windows_hide_flags():\n    return 0\n",
    )
    .unwrap();
    let program = format!(
        "import sys, json\nsys.path.insert(0, {ref:?})\nsys.path.insert(1, {stubs:?})\n\
         from tools.checkpoint_manager import CheckpointManager\n\
         m = CheckpointManager(enabled=True)\nW = {work:?}\n{script}\n",
        ref = reference.to_str().unwrap(),
        stubs = stubs.path.to_str().unwrap(),
        work = work.to_str().unwrap(),
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(program)
        .env("HERMES_HOME", home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap()
}

#[test]
fn hermes_reads_our_checkpoints_and_we_read_hermes() {
    let Some(reference) = hermes_python() else {
        eprintln!("skipped: no python3 or no Hermes reference next to the repository");
        return;
    };
    let mut b = bench("cp-hermes", ON, &[]);
    std::fs::write(b.path("a.txt"), "one\n").unwrap();
    b.tool("write_file", json!({"path": "a.txt", "content": "two\n"}));
    let ours = b.list();
    let work = std::fs::canonicalize(&b.work.path).unwrap();
    let theirs = hermes(
        &reference,
        &b.home.path,
        &work,
        "print(json.dumps(m.list_checkpoints(W)))",
    );
    assert_eq!(theirs.as_array().unwrap().len(), 1, "{theirs}");
    assert_eq!(theirs[0]["hash"], ours[0]["hash"]);
    assert_eq!(theirs[0]["reason"], "before write_file");

    // Hermes snapshots the same directory: our list shows it on top, and we restore it.
    let theirs = hermes(
        &reference,
        &b.home.path,
        &work,
        "print(json.dumps(m.ensure_checkpoint(W, 'taken by hermes')))",
    );
    assert_eq!(theirs, json!(true));
    std::fs::write(b.path("a.txt"), "three\n").unwrap();
    assert_eq!(reasons(&b.list()), ["taken by hermes", "before write_file"]);
    assert_eq!(b.restore("1", Some("a.txt"))["success"], true);
    assert_eq!(b.read("a.txt"), "two\n");
    // And Hermes restores from a chain we added to.
    let theirs = hermes(
        &reference,
        &b.home.path,
        &work,
        "cps = m.list_checkpoints(W)\nprint(json.dumps(m.restore(W, cps[-1]['hash'])))",
    );
    assert_eq!(theirs["success"], true, "{theirs}");
    assert_eq!(b.read("a.txt"), "one\n");
}

/// Hermes' migration of pre-v2 checkpoints: when the shared store is first made, what else is in
/// `checkpoints/` (a per-project store of the old layout) is moved into `legacy-<time>/`; the
/// automatic sweep then removes `legacy-*` archives older than `retention_days` and keeps newer.
#[test]
fn old_per_project_stores_are_archived_and_old_archives_swept() {
    let mut b = bench("cp-legacy", ON, &[]);
    let base = b.home.path.join("checkpoints");
    let old_store = base.join("0123456789abcdef");
    std::fs::create_dir_all(old_store.join("objects")).unwrap();
    std::fs::write(old_store.join("HEAD"), "ref: refs/heads/master\n").unwrap();
    let stale = base.join("legacy-20200101-000000");
    let fresh = base.join("legacy-20990101-000000");
    for dir in [&stale, &fresh] {
        std::fs::create_dir_all(dir.join("x")).unwrap();
        std::fs::write(dir.join("x").join("HEAD"), "old\n").unwrap();
    }
    let touched = std::process::Command::new("touch")
        .args(["-d", "2020-01-01 00:00:00"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(touched.success());
    std::fs::write(b.path("a.txt"), "one\n").unwrap();
    b.tool("write_file", json!({"path": "a.txt", "content": "two\n"}));
    assert_eq!(b.list().len(), 1, "the snapshot went to the new store");
    assert!(!old_store.exists(), "the old store is moved away");
    let archived: Vec<PathBuf> = std::fs::read_dir(&base)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("0123456789abcdef").join("HEAD").is_file())
        .collect();
    assert_eq!(archived.len(), 1, "moved whole into one archive");
    let name = archived[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("legacy-") && name.len() == "legacy-20261207-120000".len(),
        "{name}"
    );
    // The sweep runs after the first snapshot: the stale archive goes, the others stay.
    let swept = procfs::poll_until(secs(20), || !stale.exists());
    assert!(swept, "the archive older than retention_days is removed");
    assert!(fresh.join("x").join("HEAD").is_file());
    assert!(archived[0].join("0123456789abcdef").join("HEAD").is_file());
    b.g.ping();
}

/// A full disk while snapshotting: the gateway runs in a user and mount namespace of its own
/// (`unshare -rm`, nothing seen outside it) with a 256 KiB tmpfs as `$HERMES_HOME/checkpoints`;
/// a project of 2 MB that does not compress cannot be stored there. The edits are made, the
/// failure is said once with git's reason, and the gateway goes on. Prints why and passes where
/// user namespaces are not allowed.
#[test]
fn a_full_disk_while_snapshotting_never_fails_the_edit_and_is_said_once() {
    let allowed = std::process::Command::new("unshare")
        .args(["-rm", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !allowed {
        eprintln!("SKIPPED: no user namespace here (unshare -rm) to mount a small tmpfs in");
        return;
    }
    let home = TempHome::new("cp-full");
    let work = TempHome::new("cp-full-work");
    std::fs::write(home.path.join("config.yaml"), ON).unwrap();
    let base = home.path.join("checkpoints");
    std::fs::create_dir_all(&base).unwrap();
    let wrapper = home.path.join("in-small-disk.sh");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\n# Its own user and mount namespace: a 256 KiB tmpfs as the checkpoints folder.\n\
         exec unshare -rm sh -c 'mount -t tmpfs -o size=256k tmpfs \"$1\" && shift && exec \"$@\"' sh \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut g = Gateway::builder()
        .tag("cp-full")
        .home(&home.path)
        .program(&wrapper)
        .args(&[base.to_str().unwrap(), BIN])
        .start();
    let s = g.create_session(json!({"cwd": work.path.to_str().unwrap()}));
    // 2 MB of bytes that do not compress.
    let mut seed = 99u32;
    let noise: Vec<u8> = (0..2_000_000)
        .map(|_| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as u8
        })
        .collect();
    std::fs::write(work.path.join("blob.bin"), &noise).unwrap();
    for (turn, text) in ["one\n", "two\n"].into_iter().enumerate() {
        let done = g.tool_turn(
            &s.id,
            "write_file",
            &json!({"path": "a.txt", "content": text}),
        );
        assert!(done.get("error").is_none(), "turn {turn}: {done}");
        assert_eq!(
            std::fs::read_to_string(work.path.join("a.txt")).unwrap(),
            text
        );
    }
    let warned: Vec<String> = g
        .events_of_session(&s.id)
        .iter()
        .filter(|e| e["type"] == "status.update" && e["payload"]["kind"] == "warn")
        .map(|e| e["payload"]["text"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(warned.len(), 1, "said once: {warned:?}");
    eprintln!("full disk: {}", warned[0]);
    assert!(
        warned[0].to_lowercase().contains("no space left"),
        "git's reason: {warned:?}"
    );
    g.ping();
}
