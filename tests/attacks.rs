//! Commands that attack their own supervision, over the protocol through the real binary: each
//! case checks that the call ends (`tool.complete`, then `message.complete`) and that no process
//! the command started survives the call, or the gateway's exit.
//!
//! Most cases run twice: with the pid namespace per command (`--tool-pidns on`, the default;
//! the kernel makes the supervisor unkillable from inside and hides every other process) and
//! with the fallback (`off`: subreapers, and the gateway's own sweep of what a stopped or
//! killed supervisor left). Where the kernel refuses namespaces (an unprivileged user) the `on`
//! runs use the fallback too, and the case only the namespace can win is skipped, saying so;
//! as root it must be in effect.
//!
//! Processes are found through /proc by a unique marker in their arguments; every wait is a poll
//! with a deadline. A command says its attack is done by creating a file (a witness).

use crate::common;
use crate::procs;

use common::*;
use procs::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn gateway(pidns: bool) -> Gateway {
    Gateway::builder()
        .env("TUI_GATEWAY_TOOL_PIDNS", if pidns { "on" } else { "off" })
        .own_process_group()
        .start()
}

/// Where a command writes its witness, in the gateway's home.
fn witness(g: &Gateway, m: &str) -> PathBuf {
    g.home.join(format!("witness-{m}"))
}

/// The `tool.complete` of session `sid` among the frames from `start` on, if it came.
fn tool_complete_since(g: &mut Gateway, sid: &str, start: usize) -> Option<Value> {
    g.drain_available();
    g.frames[start..]
        .iter()
        .find(|f| event_type(f) == Some("tool.complete") && f["params"]["session_id"] == sid)
        .map(|f| f["params"].clone())
}

/// Submit `command` as a tool call and wait until its attack is done (its witness exists) or
/// the call ended by itself; returns the frame index the turn started at.
fn start_attack(g: &mut Gateway, sid: &str, command: &str, witness: &Path) -> usize {
    let start = submit(g, sid, &format!("$ {command}"));
    let done = poll_until(T, || {
        witness.exists() || tool_complete_since(g, sid, start).is_some()
    });
    assert!(
        done,
        "the attack neither finished nor ended the call\n{}",
        g.diag()
    );
    start
}

/// Run `command` as a tool call; once its attack is done or the call ended by itself,
/// interrupt; return `tool.complete` once the turn is complete.
fn run_attack(g: &mut Gateway, sid: &str, command: &str, witness: &Path) -> Value {
    let start = start_attack(g, sid, command, witness);
    if tool_complete_since(g, sid, start).is_none() {
        g.call("session.interrupt", json!({"session_id": sid}));
    }
    let mut complete = None;
    let ended = poll_until(T, || {
        complete = tool_complete_since(g, sid, start);
        complete.is_some()
    });
    assert!(ended, "no tool.complete after the interrupt\n{}", g.diag());
    g.finish_turn(sid, start, T);
    complete.unwrap()
}

/// The gateway's children in any state (zombies included): its zygotes.
fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|f| f.parse::<i32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

fn zygote_of(g: &Gateway) -> i32 {
    let z = children_of(g.pid() as i32);
    assert_eq!(z.len(), 1, "one zygote per gateway: {z:?}");
    z[0]
}

/// Whether this gateway's commands run in a pid namespace of their own; as root they must.
fn in_pidns(g: &mut Gateway) -> bool {
    let s = g.create_session(json!({}));
    let start = submit(g, &s.id, "$ grep NSpid /proc/self/status");
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    let levels = tool_result(&c)["output"]
        .as_str()
        .unwrap_or("")
        .split_whitespace()
        .count();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(levels, 3, "as root, a command runs in a pid namespace: {c}");
    }
    levels == 3
}

// ---------------------------------------------------------------------------------------------
// The supervisor killed, stopped; the zygote killed; the command's own group killed
// ---------------------------------------------------------------------------------------------

/// One attack: a gateway, a session, the marker every process of the command carries (`.M`
/// after a `sleep` number) and the witness file the command creates once its attack is done.
struct Case {
    m: String,
    needle: String,
    g: Gateway,
    sid: String,
    w: PathBuf,
    _reaper: Reaper,
}

impl Case {
    fn new(pidns: bool) -> Case {
        let m = marker();
        let needle = format!(".{m}");
        let _reaper = Reaper(needle.clone());
        let mut g = gateway(pidns);
        let sid = g.create_session(json!({})).id;
        let w = witness(&g, &m);
        Case {
            m,
            needle,
            g,
            sid,
            w,
            _reaper,
        }
    }

    /// `setsid sleep 4001.M & ATTACK; touch WITNESS; sleep 4000.M`, with `{m}` in the attack
    /// standing for the marker.
    fn command(&self, attack: &str) -> String {
        let m = &self.m;
        format!(
            "setsid sleep 4001.{m} & {}; touch {}; sleep 4000.{m}",
            attack.replace("{m}", m),
            self.w.display()
        )
    }

    /// Run the attack to the end of its turn (interrupted if it did not end by itself).
    fn run(&mut self, attack: &str) -> Value {
        let command = self.command(attack);
        run_attack(&mut self.g, &self.sid, &command, &self.w)
    }

    /// Start the attack and wait until it is done (or ended the call); the turn's first frame.
    fn start(&mut self, attack: &str) -> usize {
        let command = self.command(attack);
        start_attack(&mut self.g, &self.sid, &command, &self.w)
    }

    fn assert_none_left(&self, what: &str) {
        assert_none_left(&self.needle, secs(5), what);
    }
}

/// A case run with the pid namespace (`_namespace`) and with the fallback (`_fallback`).
macro_rules! both_ways {
    ($case:ident) => {
        mod $case {
            #[test]
            fn namespace() {
                super::$case(true);
            }
            #[test]
            fn fallback() {
                super::$case(false);
            }
        }
    };
}

/// `kill -9 $PPID`: the call ends and leaves nothing; the gateway goes on.
fn supervisor_killed_by_its_command(pidns: bool) {
    let mut c = Case::new(pidns);
    let complete = c.run("kill -9 $PPID");
    assert!(tool_result(&complete).is_object(), "{complete}");
    c.assert_none_left("after the call");
    c.g.ping();
}
both_ways!(supervisor_killed_by_its_command);

/// The command kills or stops its supervisor, then the gateway is SIGKILLed: nothing of the
/// command, nor the zygote or a supervisor, survives it.
fn attacked_then_gateway_sigkilled(pidns: bool, attack: &str) {
    let mut c = Case::new(pidns);
    c.start(attack);
    let zygote = zygote_of(&c.g);
    let mut ours = children_of(zygote);
    ours.push(zygote);
    c.g.signal(libc::SIGKILL);
    c.g.wait_exit(T);
    c.assert_none_left("after SIGKILL of the gateway");
    wait_gone(&ours, secs(5), "the zygote and the supervisor");
}

fn supervisor_killed_then_gateway_sigkilled(pidns: bool) {
    attacked_then_gateway_sigkilled(pidns, "kill -9 $PPID");
}
both_ways!(supervisor_killed_then_gateway_sigkilled);

fn supervisor_stopped_then_gateway_sigkilled(pidns: bool) {
    attacked_then_gateway_sigkilled(pidns, "kill -STOP $PPID");
}
both_ways!(supervisor_stopped_then_gateway_sigkilled);

/// `kill -STOP $PPID`: the interrupt still ends the call within the kill grace (no `exit` ever
/// comes from a stopped supervisor), nothing is left, and the EOF shutdown is clean.
fn supervisor_stopped_then_interrupt(pidns: bool) {
    let mut c = Case::new(pidns);
    let start = c.start("kill -STOP $PPID");
    let supervisors = children_of(zygote_of(&c.g));
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    c.g.call("session.interrupt", json!({"session_id": c.sid}));
    let complete = c.g.wait_session_event(&c.sid, "tool.complete", T);
    assert_eq!(tool_result(&complete)["exit_code"], 130, "{complete}");
    let turn = c.g.finish_turn(&c.sid, start, T);
    assert_eq!(
        turn.complete["payload"]["status"], "interrupted",
        "{:?}",
        turn.complete
    );
    c.assert_none_left("after the interrupted call");
    wait_gone(&supervisors, secs(5), "the stopped supervisor");
    c.g.close_stdin();
    let st = c.g.wait_exit(T);
    assert!(st.success(), "gateway exit {st:?}\n{}", c.g.diag());
}
both_ways!(supervisor_stopped_then_interrupt);

/// The command SIGKILLs the zygote (named by the test); the call still ends and leaves nothing,
/// and the next command runs.
fn zygote_killed_by_a_command(pidns: bool) {
    let mut c = Case::new(pidns);
    let start = submit(&mut c.g, &c.sid, "$ true");
    c.g.finish_turn(&c.sid, start, T);
    let zygote = zygote_of(&c.g);
    c.run(&format!("kill -9 {zygote}"));
    c.assert_none_left("after the call");
    let start = submit(&mut c.g, &c.sid, "$ echo again");
    let complete = c.g.wait_session_event(&c.sid, "tool.complete", T);
    c.g.finish_turn(&c.sid, start, T);
    assert_eq!(tool_result(&complete)["exit_code"], 0, "{complete}");
    c.g.close_stdin();
    assert!(c.g.wait_exit(T).success());
}
both_ways!(zygote_killed_by_a_command);

/// `kill -9 0`: the command kills its own group; what left the group goes too.
fn kill_of_its_own_group(pidns: bool) {
    let mut c = Case::new(pidns);
    let complete = c.run("sleep 4002.{m} & kill -9 0");
    assert!(tool_result(&complete).is_object(), "{complete}");
    c.assert_none_left("after the call");
}
both_ways!(kill_of_its_own_group);

/// SIGCONTs a process group when dropped, so a failing case never leaves a stopped gateway.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: kill(2) of a process group this test created.
        unsafe { libc::kill(-self.0, libc::SIGCONT) };
    }
}

/// The command SIGSTOPs every member of the gateway's process group it can see, and the
/// group. Only a pid namespace can win this (a stopped gateway runs nothing).
#[test]
fn gateway_group_stopped_by_a_command() {
    let mut c = Case::new(true);
    let group = c.g.pid() as i32;
    let _resume = Resume(group);
    if !in_pidns(&mut c.g) {
        eprintln!("skipped: the kernel refuses a pid namespace to this user");
        return;
    }
    let complete = c.run(&format!(
        "for p in /proc/[0-9]*; do read -r _ _ _ _ pg _ < $p/stat && [ \"$pg\" = {group} ] \
         && kill -STOP ${{p#/proc/}}; done 2>/dev/null; kill -STOP -{group} {group}"
    ));
    assert_eq!(tool_result(&complete)["exit_code"], 130, "{complete}");
    c.assert_none_left("after the call");
}

// ---------------------------------------------------------------------------------------------
// The zygote's request limit; the binary replaced on disk
// ---------------------------------------------------------------------------------------------

/// A command longer than the zygote takes fails alone: it does not replace the zygote (which
/// would leave the old one a zombie).
#[test]
fn commands_too_long_for_the_zygote_leave_no_zombie() {
    let mut g = gateway(true);
    let long = format!(": {}", "x".repeat(170 * 1024));
    // A session each: the transcript of one would grow with every long command.
    for _ in 0..3 {
        let s = g.create_session(json!({}));
        let start = submit(&mut g, &s.id, &format!("$ {long}"));
        g.wait_session_event(&s.id, "approval.request", T);
        g.call(
            "approval.respond",
            json!({"session_id": s.id, "choice": "once"}),
        );
        let c = g.wait_session_event(&s.id, "tool.complete", T);
        g.finish_turn(&s.id, start, T);
        assert_ne!(tool_result(&c)["exit_code"], 0, "{c}");
    }
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "$ echo short");
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    assert_eq!(tool_result(&c)["exit_code"], 0, "{c}");
    let children = children_of(g.pid() as i32);
    assert_eq!(children.len(), 1, "one zygote, no zombies: {children:?}");
}

/// An upgrade replaces the binary while the gateway runs: its commands still start (the zygote
/// is the running version, exec'd from the file opened at start).
#[test]
fn commands_run_after_the_binary_is_replaced_on_disk() {
    let dir = TempHome::new("upgrade");
    let exe = dir.path.join("tui-gateway");
    std::fs::copy(BIN, &exe).unwrap();
    let mut g = Gateway::builder().program(&exe).start();
    std::fs::remove_file(&exe).unwrap();
    std::fs::write(&exe, "#!/bin/sh\nexit 3\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "$ echo still-running");
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    assert_eq!(tool_result(&c)["exit_code"], 0, "{c}");
    assert!(
        tool_result(&c)["output"]
            .as_str()
            .unwrap_or("")
            .contains("still-running"),
        "{c}"
    );
    g.close_stdin();
    assert!(g.wait_exit(T).success());
}
