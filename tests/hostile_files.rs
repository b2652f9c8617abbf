//! Files that are not what they should be: a FIFO where config.yaml, the saved approvals, `.env`
//! or state.db belongs, files flipped to FIFOs while `search_files` walks them, FIFOs named as an
//! MCP server's TLS files — refused with a reason, never a hang: `ping` answered throughout,
//! SIGTERM honoured.

use crate::common;
use crate::mcp_support;
use crate::tls_server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use mcp_support::*;
use serde_json::json;
use tls_server::*;

fn fifo(home: &TempHome, name: &str) {
    let path = home.path.join(name);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

#[test]
fn fifos_in_place_of_files_we_read_are_refused_and_the_gateway_answers() {
    let home = TempHome::new("fifo-read");
    for name in ["config.yaml", "tui_gateway_approvals.json", ".env"] {
        fifo(&home, name);
    }
    let mut g = Gateway::builder().home(&home.path).start();
    g.ping();
    let s = g.create_session(json!({}));
    // Which model the home names cannot be read: the turn says so, at once.
    let turn = g.run_turn(&s.id, "still here");
    let why = turn.complete["payload"]["error"].as_str().unwrap_or("");
    assert!(why.contains("not a regular file"), "{}", g.diag());
    let (_, message, _) = g.call_err("reload.env", json!({}));
    assert!(message.contains("not a regular file"), "{message}");
    let stderr = g.stderr_with("config.yaml: cannot read it: not a regular file", T);
    assert!(
        stderr.contains("config.yaml: cannot read it: not a regular file"),
        "{stderr}"
    );
    let stderr = g.stderr_with("tui_gateway_approvals.json: not a regular file", T);
    assert!(
        stderr.contains("tui_gateway_approvals.json: not a regular file"),
        "{stderr}"
    );
}

#[test]
fn a_fifo_in_place_of_state_db_ends_the_gateway_with_the_reason() {
    let home = TempHome::new("fifo-db");
    fifo(&home, "state.db");
    let mut g = Gateway::builder().home(&home.path).spawn();
    let status = g.wait_exit(T);
    assert_eq!(status.code(), Some(1), "{}", g.diag());
    let stderr = g.stderr_text();
    assert!(
        stderr.contains("state.db: not a regular file; refused"),
        "{stderr}"
    );
}

/// A state.db whose schema SQLite cannot parse (a second `messages_fts` row in `sqlite_master`,
/// the case Hermes repairs): the gateway keeps a copy, repairs it as Hermes does and starts; the
/// stored conversation is all there and the next turn is stored and found by search.
#[test]
fn a_malformed_state_db_schema_is_repaired_with_a_copy_kept_and_nothing_lost() {
    let home = TempHome::new("malformed-db");
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("malformed-1")
        .start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, "remember the walrus");
    g.close_stdin();
    g.wait_exit(T);
    let db = home.path.join("state.db");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "PRAGMA writable_schema=ON;
             INSERT INTO sqlite_master SELECT * FROM sqlite_master WHERE name = 'messages_fts';
             PRAGMA writable_schema=OFF;",
        )
        .unwrap();
    }
    let broken = rusqlite::Connection::open(&db)
        .and_then(|c| c.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0)));
    assert!(
        broken
            .as_ref()
            .is_err_and(|e| e.to_string().contains("malformed")),
        "{broken:?}"
    );

    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("malformed-2")
        .start();
    let r = g.call("session.resume", json!({"session_id": s.stored}));
    let texts: Vec<String> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("remember the walrus")),
        "{r}\n{}",
        g.stderr_text()
    );
    let rid = r["session_id"].as_str().unwrap().to_string();
    g.run_turn(&rid, "and the carpenter");
    // Stored, and in the full-text index that was broken.
    let found = common::procfs::poll_until(T, || {
        rusqlite::Connection::open(&db)
            .and_then(|c| {
                c.query_row(
                    "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'carpenter'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .is_ok_and(|n| n > 0)
    });
    assert!(found, "the new turn is not in the full-text index");
    let stderr = g.stderr_text();
    assert!(stderr.contains("was malformed"), "{stderr}");
    // The copy as it was, private, beside it.
    let copies: Vec<_> = std::fs::read_dir(&home.path)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.starts_with("state.db.malformed-backup-") && !name.ends_with("-wal")
        })
        .collect();
    assert_eq!(copies.len(), 1, "{stderr}");
    use std::os::unix::fs::PermissionsExt;
    let mode = copies[0].metadata().unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let kept = rusqlite::Connection::open(copies[0].path()).unwrap();
    let still = kept.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0));
    assert!(still.is_err(), "the copy is the file as it was: {still:?}");
}

/// Pings one at a time until `done` holds, each answered (a loop blocked in an open never
/// answers: `wait_response` fails the test); how many, and the longest wait, which is reported,
/// not asserted (a measurement, docs/PERFORMANCE.md).
fn ping_until(g: &mut Gateway, mut done: impl FnMut(&mut Gateway) -> bool) -> (usize, Duration) {
    let (mut count, mut longest) = (0, Duration::ZERO);
    loop {
        let sent = Instant::now();
        let id = g.send_request("ping", json!({}));
        let answer = g.wait_response(&id, T);
        assert_eq!(answer["result"], json!({"pong": true}), "{answer}");
        longest = longest.max(sent.elapsed());
        count += 1;
        if done(g) {
            return (count, longest);
        }
    }
}

/// The test's own thread swapping each of `names` in a folder with a FIFO of a hidden name
/// beside it (one atomic `renameat2(RENAME_EXCHANGE)` each), over and over, so a file the
/// search listed as regular is often a FIFO by the time it is opened; stopped when dropped.
struct Flipper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Flipper {
    fn start(dir: &Path, names: &[String]) -> Flipper {
        let pairs: Vec<(PathBuf, PathBuf)> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let fifo = dir.join(format!(".fifo{i:03}"));
                nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
                    .expect("mkfifo");
                (dir.join(name), fifo)
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut swaps = 0;
            while !halt.load(Ordering::Relaxed) {
                for (file, fifo) in &pairs {
                    let at = nix::fcntl::AT_FDCWD;
                    let exchange = nix::fcntl::RenameFlags::RENAME_EXCHANGE;
                    nix::fcntl::renameat2(at, file, at, fifo, exchange).expect("renameat2");
                    swaps += 1;
                }
            }
            swaps
        });
        Flipper {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the swapping; how many swaps were made.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

impl Drop for Flipper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn files_flipped_to_fifos_during_searches_never_stall_the_gateway() {
    let home = TempHome::new("fifo-search");
    let dir = home.path.join("tree");
    std::fs::create_dir_all(&dir).unwrap();
    const FILES: usize = 200;
    // The files searched, and the ignore file the walk reads in each folder.
    let mut names: Vec<String> = (0..FILES).map(|i| format!("f{i:03}.txt")).collect();
    names.push(".gitignore".into());
    for name in &names {
        std::fs::write(dir.join(name), "hit\n").unwrap();
    }
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({"cwd": dir.to_str().unwrap()}));
    let flipper = Flipper::start(&dir, &names);
    let args = json!({"pattern": "hit", "path": dir.to_str().unwrap()});
    let (mut pings, mut longest) = (0, Duration::ZERO);
    for _ in 0..40 {
        submit(&mut g, &s.id, &format!("%search_files {args}"));
        // The turn is over at its `session.info` after `message.complete`.
        let mut complete: Option<Option<u64>> = None;
        let (n, worst) = ping_until(&mut g, |g| match complete {
            None => {
                complete = g
                    .try_wait_session_event(&s.id, "message.complete", Duration::ZERO)
                    .map(|c| c["seq"].as_u64());
                false
            }
            Some(seq) => g
                .wait_frame(
                    |f| {
                        event_type(f) == Some("session.info")
                            && f["params"]["session_id"] == s.id.as_str()
                            && f["params"]["seq"].as_u64() > seq
                    },
                    Duration::ZERO,
                )
                .is_some(),
        });
        pings += n;
        longest = longest.max(worst);
    }
    // SIGTERM is honoured with the flipping still going.
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_exit(T).code(), Some(0), "{}", g.diag());
    let swaps = flipper.stop();
    eprintln!(
        "search_files x40 over {FILES} files, {swaps} FIFO swaps: {pings} pings, longest wait {longest:?}"
    );
}

#[test]
fn fifos_named_as_an_mcp_servers_tls_files_are_refused_and_sigterm_still_exits() {
    let home = TempHome::new("fifo-tls");
    let dir = &home.path;
    let server_id = Identity::self_signed(dir, "server");
    let server = TlsServer::start(server_config(&server_id, None));
    fifo(&home, "bundle.pem");
    fifo(&home, "client.pem");
    let (bundle, cert) = (dir.join("bundle.pem"), dir.join("client.pem"));
    let yaml = format!(
        "mcp_servers:\n  \
           bundle:\n    url: https://127.0.0.1:{port}/mcp\n    ssl_verify: {bundle}\n  \
           cert:\n    url: https://127.0.0.1:{port}/mcp\n    ssl_verify: false\n    client_cert: [{cert}, {key}]\n",
        port = server.port,
        bundle = bundle.display(),
        cert = cert.display(),
        key = server_id.key_pem.display(),
    );
    std::fs::write(dir.join("config.yaml"), yaml).unwrap();
    let mut g = Gateway::builder().home(dir).start();
    ping_until(&mut g, |_| true);
    for (name, says) in [
        ("bundle", "ssl_verify: cannot read"),
        ("cert", "client_cert: cannot read"),
    ] {
        let status = wait_status(&mut g, name, |s| s["status"] == "failed");
        let error = status["error"].as_str().unwrap_or("");
        assert!(
            error.contains(says) && error.contains("not a regular file"),
            "{name}: {status}"
        );
    }
    g.ping();
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_exit(T).code(), Some(0), "{}", g.diag());
}
