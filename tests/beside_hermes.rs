//! Hermes' own Python gateway and ours on one fresh `HERMES_HOME`, under Hermes'
//! `max_concurrent_sessions`. Hermes (`hermes_cli/active_sessions.py`, the reference in
//! `../shared/hermes-reference/python`, run with the pinned venv `tests/hermes-venv.sh` makes)
//! keeps a cap, not an owner: every open session of any process holds a lease in
//! `runtime/active_sessions.json`; at the cap a create or resume is refused with 4090; a resume of
//! a session another process has open is opened all the same, with a lease of its own; a resume of
//! one open in the same process is that session again, without a lease; a dead process's leases
//! are pruned by the next process that takes the lock. Each gateway here is checked to do the same
//! against the other: the leases of both counted by each, the refusal's code and words from each
//! side, each resuming a session open in the other, each reclaiming the other's after a SIGKILL.

use crate::common::*;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::fcntl::{Flock, FlockArg};
use serde_json::{Value, json};

/// The python of the venv that runs Hermes' gateway (made once, cached across runs under target/).
fn hermes_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| venv_python("tests/hermes-venv.sh"))
}

/// Hermes' reference Python (`../shared/hermes-reference/python`): the gateway that runs.
fn reference() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hermes-reference/python");
    assert!(
        dir.join("tui_gateway/entry.py").is_file(),
        "Hermes' reference gateway is not at {}",
        dir.display()
    );
    dir
}

/// Hermes' gateway as the TUI starts it (`python -m tui_gateway.entry`) on `home`; it reaches
/// no model: sessions here are only opened, resumed and closed.
fn start_hermes(home: &Path, user_home: &Path) -> Gateway {
    Gateway::builder()
        .program(hermes_python())
        .args(&["-m", "tui_gateway.entry"])
        .home(home)
        .env("PYTHONPATH", reference().to_str().unwrap())
        .env("HOME", user_home.to_str().unwrap())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .tag("hermes")
        .start()
}

/// The registry's leases, as either gateway wrote the file last.
fn entries(home: &Path) -> Vec<Value> {
    let path = home.join("runtime/active_sessions.json");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e}): {text}", path.display()));
    v["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries list: {v}"))
        .clone()
}

/// The registry's leases as (stored session, pid), in the file's order.
fn holders(home: &Path) -> Vec<(String, u64)> {
    entries(home)
        .iter()
        .map(|e| {
            (
                e["session_id"].as_str().unwrap_or("?").to_string(),
                e["pid"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn keys(entry: &Value) -> BTreeSet<String> {
    entry.as_object().unwrap().keys().cloned().collect()
}

fn held(pairs: &[(&str, u32)]) -> Vec<(String, u64)> {
    pairs
        .iter()
        .map(|(s, p)| (s.to_string(), u64::from(*p)))
        .collect()
}

const FULL: &str =
    "Hermes is at the active session limit (2/2). Try again when another session finishes.";

fn refused_at_cap(g: &mut Gateway, who: &str, method: &str, params: Value) {
    let (code, message, _) = g.call_err(method, params);
    assert_eq!((code, message.as_str()), (4090, FULL), "{who} {method}");
}

#[test]
fn hermes_and_ours_share_one_cap_on_open_sessions() {
    let root = TempHome::new("beside-hermes");
    let (home, user_home) = (root.path.join("home"), root.path.join("user"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&user_home).unwrap();
    std::fs::write(home.join("config.yaml"), "max_concurrent_sessions: 2\n").unwrap();
    let mut ours = Gateway::builder().home(&home).start();
    let mut hermes = start_hermes(&home, &user_home);
    let (our_pid, hermes_pid) = (ours.pid(), hermes.pid());

    // One session each: both leases in the one file, each written as the other writes them.
    let s1 = ours.create_session(json!({}));
    let p1 = hermes.call("session.create", json!({}));
    let p1_stored = p1["stored_session_id"].as_str().unwrap().to_string();
    assert_eq!(
        holders(&home),
        held(&[(&s1.stored, our_pid), (&p1_stored, hermes_pid)])
    );
    let both = entries(&home);
    assert_eq!(keys(&both[0]), keys(&both[1]), "{both:?}");
    assert!(
        both.iter().all(|e| e["process_start_time"].is_f64()
            && e["surface"] == "tui"
            && e["metadata"]["live_session_id"].is_string()),
        "{both:?}"
    );

    // At the cap each refuses, with Hermes' code and words, counting the other's lease.
    refused_at_cap(&mut ours, "ours", "session.create", json!({}));
    refused_at_cap(&mut hermes, "hermes", "session.create", json!({}));
    assert_eq!(holders(&home).len(), 2);

    // Hermes closes its session: its place goes back.
    let closed = hermes.call("session.close", json!({"session_id": p1["session_id"]}));
    assert_eq!(closed["closed"], true);
    assert_eq!(holders(&home), held(&[(&s1.stored, our_pid)]));

    // A session open in ours, resumed in Hermes: opened there too, with a lease of its own.
    let pr = hermes.call("session.resume", json!({"session_id": s1.stored}));
    assert_eq!(pr["resumed"], s1.stored.as_str());
    assert_eq!(
        holders(&home),
        held(&[(&s1.stored, our_pid), (&s1.stored, hermes_pid)])
    );
    refused_at_cap(&mut ours, "ours", "session.create", json!({}));
    // Resumed again where it is open: the same session, no new lease, even at the cap.
    let again = hermes.call("session.resume", json!({"session_id": s1.stored}));
    assert_eq!(again["session_id"], pr["session_id"]);
    let ours_again = ours.call("session.resume", json!({"session_id": s1.stored}));
    assert_eq!(ours_again["session_id"], s1.id.as_str());
    assert_eq!(holders(&home).len(), 2);

    // Closed in ours, so open only in Hermes, then resumed in ours: opened, with a lease.
    ours.call("session.close", json!({"session_id": s1.id}));
    assert_eq!(holders(&home), held(&[(&s1.stored, hermes_pid)]));
    let r = ours.call("session.resume", json!({"session_id": s1.stored}));
    assert_eq!(r["resumed"], s1.stored.as_str());
    assert_eq!(
        holders(&home),
        held(&[(&s1.stored, hermes_pid), (&s1.stored, our_pid)])
    );
    refused_at_cap(&mut hermes, "hermes", "session.create", json!({}));

    // Ours killed: its lease stays in the file until Hermes' next claim prunes it.
    ours.signal(libc::SIGKILL);
    ours.wait_exit(secs(10));
    assert_eq!(holders(&home).len(), 2);
    let p2 = hermes.call("session.create", json!({}));
    let p2_stored = p2["stored_session_id"].as_str().unwrap().to_string();
    assert_eq!(
        holders(&home),
        held(&[(&s1.stored, hermes_pid), (&p2_stored, hermes_pid)])
    );

    // A new gateway of ours counts Hermes' two leases, then reclaims them once Hermes is killed.
    let mut ours = Gateway::builder().home(&home).start();
    refused_at_cap(&mut ours, "ours", "session.create", json!({}));
    hermes.signal(libc::SIGKILL);
    hermes.wait_exit(secs(10));
    let s2 = ours.create_session(json!({}));
    assert_eq!(holders(&home), held(&[(&s2.stored, ours.pid())]));

    // Where ours differs (DIFFERENCES.md): the registry's lock held elsewhere is tried for a few
    // milliseconds, not waited on (Hermes waits); the session opens uncounted, and says so.
    let lock = std::fs::File::open(home.join("runtime/active_sessions.lock")).unwrap();
    let held_lock = Flock::lock(lock, FlockArg::LockExclusiveNonblock).unwrap();
    let s3 = ours.create_session(json!({}));
    let said = ours.stderr_with("is not counted", T);
    assert!(
        said.contains(&format!("session {} is not counted", s3.stored)),
        "{said}"
    );
    drop(held_lock);
    assert_eq!(holders(&home), held(&[(&s2.stored, ours.pid())]));
}
