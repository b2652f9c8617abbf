//! Files under HERMES_HOME that are not what they should be: a FIFO where config.yaml, the saved
//! approvals, `.env` or state.db belongs must be refused with a reason, never hang the gateway.

use crate::common;

use common::*;
use serde_json::json;

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
