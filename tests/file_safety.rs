//! Files we create or write under HERMES_HOME are safe against links and modes, and the text an
//! approval shows a person is safe to print. Each test is the smallest reproduction of a defect:
//! SQLite's `-wal`/`-shm` left readable by others, a symlinked state.db or approvals temporary
//! redirecting our writes or chmods, a symlinked call log, and an `approval.request` whose CR and
//! `ESC[2K` could hide part of the command on the user's screen.

use crate::common;

use common::procfs::marker;
use common::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

fn file_with_mode(p: &Path, text: &str, mode: u32) {
    std::fs::write(p, text).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn sqlite_files_found_readable_by_others_are_made_private_before_any_transcript_reaches_them() {
    let home = TempHome::new("wal-mode");
    for side in ["state.db-wal", "state.db-shm"] {
        file_with_mode(&home.path.join(side), "", 0o644);
    }
    let m = marker();
    let mut g = Gateway::builder().home(&home.path).start();
    let s = g.create_session(json!({}));
    g.run_turn(&s.id, &format!("private words {m}"));
    for name in ["state.db", "state.db-wal", "state.db-shm"] {
        assert_eq!(mode(&home.path.join(name)), 0o600, "{name}");
    }
    let stored: String = g
        .db()
        .query_row(
            "SELECT content FROM messages WHERE content LIKE ?1",
            [format!("%private words {m}%")],
            |r| r.get(0),
        )
        .expect("the turn is stored");
    assert!(stored.contains(&m));
}

#[test]
fn a_symlinked_state_db_or_wal_is_refused_and_its_target_untouched() {
    for name in ["state.db", "state.db-wal"] {
        let home = TempHome::new("db-link");
        let victim = home.path.join("victim");
        file_with_mode(&victim, "precious", 0o644);
        std::os::unix::fs::symlink(&victim, home.path.join(name)).unwrap();
        let mut g = Gateway::builder().home(&home.path).spawn();
        let status = g.wait_exit(T);
        assert_eq!(status.code(), Some(1), "{name}: {}", g.diag());
        let stderr = g.stderr_text();
        assert!(
            stderr.contains("a symbolic link; refused"),
            "{name}: {stderr}"
        );
        assert_eq!(mode(&victim), 0o644, "{name}: the target's mode changed");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }
}

#[test]
fn saving_an_always_approval_never_writes_through_a_planted_link() {
    let m = marker();
    let fake_home = TempHome::new("always-home");
    let hermes = TempHome::new("always-link");
    let victim = hermes.path.join("victim");
    file_with_mode(&victim, "precious", 0o644);
    // Both the old fixed temporary name and the file itself point at the victim.
    for name in [
        "tui_gateway_approvals.json.tmp",
        "tui_gateway_approvals.json",
    ] {
        std::os::unix::fs::symlink(&victim, hermes.path.join(name)).unwrap();
    }
    let scratch = fake_home.path.join(format!("scratch-{m}"));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut g = Gateway::builder()
        .home(&hermes.path)
        .env("HOME", fake_home.path.to_str().unwrap())
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, &format!("$ rm -rf ~/scratch-{m}"));
    let asked = g.wait_session_event(&s.id, "approval.request", T);
    let r = g.call(
        "approval.respond",
        json!({"session_id": s.id, "choice": "always",
               "request_id": asked["payload"]["request_id"]}),
    );
    assert_eq!(r["resolved"], 1, "{r}");
    g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    assert!(!scratch.exists(), "the approved command ran");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(mode(&victim), 0o644);
    let saved = hermes.path.join("tui_gateway_approvals.json");
    let meta = std::fs::symlink_metadata(&saved).unwrap();
    assert!(meta.is_file(), "the link was replaced by our own file");
    assert_eq!(mode(&saved), 0o600);
    assert!(std::fs::read_to_string(&saved).unwrap().contains("always"));
}

#[test]
fn the_call_log_is_private_and_never_written_through_a_link() {
    let home = TempHome::new("log-files");
    let log = home.path.join("calls.log");
    file_with_mode(&log, "", 0o644);
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_RPC_LOG", log.to_str().unwrap())
        .start();
    g.ping();
    assert_eq!(mode(&log), 0o600);
    drop(g);

    let victim = home.path.join("victim");
    file_with_mode(&victim, "precious", 0o644);
    let link = home.path.join("linked.log");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let mut g = Gateway::builder()
        .home(&home.path)
        .env("TUI_GATEWAY_RPC_LOG", link.to_str().unwrap())
        .start();
    g.ping();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let stderr = g.stderr_with("not opened: a symbolic link; refused", T);
    assert!(
        stderr.contains("not opened: a symbolic link; refused"),
        "{stderr}"
    );
}

#[test]
fn an_approval_request_shows_control_characters_instead_of_obeying_them() {
    let m = marker();
    let fake_home = TempHome::new("esc-home");
    let mut g = Gateway::builder()
        .env("HOME", fake_home.path.to_str().unwrap())
        .start();
    let s = g.create_session(json!({}));
    // On a terminal, the CR and ESC[2K would erase "echo ok" and leave only an innocent line.
    let start = submit(
        &mut g,
        &s.id,
        &format!("$ echo ok\r\x1b[2K; rm -rf ~/esc-{m}"),
    );
    let asked = g.wait_session_event(&s.id, "approval.request", T);
    let command = asked["payload"]["command"].as_str().unwrap().to_string();
    assert!(
        !command.contains('\r') && !command.contains('\x1b'),
        "{command:?}"
    );
    assert_eq!(command, format!("echo ok\\r\\x1b[2K; rm -rf ~/esc-{m}"));
    let description = asked["payload"]["description"].as_str().unwrap();
    assert!(
        !description.chars().any(|c| c.is_control()),
        "{description:?}"
    );
    g.call(
        "approval.respond",
        json!({"session_id": s.id, "choice": "deny",
               "request_id": asked["payload"]["request_id"]}),
    );
    g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
}

#[test]
fn a_tools_context_and_live_preview_show_control_characters_instead_of_obeying_them() {
    let m = marker();
    let dir = TempHome::new("esc-tool");
    let go = dir.path.join("go");
    let mut g = Gateway::builder().start();
    let s = g.create_session(json!({}));
    // The command line itself and the line it prints carry a screen clear and an OSC 52
    // clipboard write; it waits for the test's go-ahead so its output is shown live first.
    let start = submit(
        &mut g,
        &s.id,
        &format!(
            "$ printf '\x1b]52;c;aGk=\x07\x1b[2Jok-{m}\\n'; while [ ! -e {} ]; do sleep 0.05; done",
            go.display()
        ),
    );
    let started = g.wait_session_event(&s.id, "tool.start", T);
    let context = started["payload"]["context"].as_str().unwrap().to_string();
    assert!(
        context.starts_with("Running printf '\\x1b]52;c;aGk=\\x07\\x1b[2Jok-"),
        "{context:?}"
    );
    let progress = g.wait_session_event(&s.id, "tool.progress", T);
    let preview = progress["payload"]["preview"].as_str().unwrap().to_string();
    assert_eq!(preview, format!("\\x1b]52;c;aGk=\\x07\\x1b[2Jok-{m}"));
    std::fs::write(&go, "").unwrap();
    g.finish_turn(&s.id, start, T);
}

#[test]
fn session_save_never_writes_through_a_symlinked_sessions_folder() {
    let hermes = TempHome::new("save-home");
    let elsewhere = TempHome::new("save-elsewhere");
    std::os::unix::fs::symlink(&elsewhere.path, hermes.path.join("sessions")).unwrap();
    let mut g = Gateway::builder().home(&hermes.path).start();
    let s = g.create_session(json!({}));
    let (_, message, _) = g.call_err("session.save", json!({"session_id": s.id}));
    assert!(message.contains("symbolic link"), "{message}");
    let planted: Vec<_> = std::fs::read_dir(&elsewhere.path).unwrap().collect();
    assert!(planted.is_empty(), "wrote through the link: {planted:?}");
}
