//! The TUI's gateway as a thin relay to the home's persistent gateway (`daemon`): connect to
//! its socket (starting it, detached, when nobody listens), hand it this process's stdin and
//! stdout (the TUI's pipes, which it then serves itself: no frame passes through here), and
//! live as long as that attachment. The relay's end (the TUI's SIGTERM) or the pipes' (EOF)
//! only ends the attachment: the persistent gateway lets the client go and its sessions go on.

use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::Config;
use crate::rpc::listener::{DETACHED, send_hello, socket_path};

/// Hand stdin/stdout to the home's persistent gateway and wait while it serves them; `flags`
/// are passed to it when this relay starts it.
pub fn run(cfg: &Config, flags: &[String]) -> i32 {
    let stream = match connect_or_start(cfg, flags).and_then(|s| {
        send_hello(&s, [0, 1], cfg.rpc_log.as_deref())
            .map(|()| s)
            .map_err(|e| format!("cannot attach: {e}"))
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("[gateway-exit] {e}");
            return 1;
        }
    };
    // Frames go between the TUI and the gateway directly; this end hears only why it ends.
    let mut said = Vec::new();
    let _ = (&stream).take(4096).read_to_end(&mut said);
    let said = String::from_utf8_lossy(&said);
    match said.lines().find_map(|l| l.strip_prefix(DETACHED)) {
        Some("stdin closed") => 0,
        Some(why) => {
            eprintln!("[gateway-exit] the persistent gateway let this client go: {why}");
            1
        }
        None => {
            eprintln!("[gateway-exit] the persistent gateway closed the connection (it ended)");
            1
        }
    }
}

fn connect_or_start(cfg: &Config, flags: &[String]) -> Result<UnixStream, String> {
    let path = socket_path(&cfg.home);
    if let Ok(s) = UnixStream::connect(&path) {
        return Ok(s);
    }
    let log = crate::private_file::private_dir(&cfg.home, &["logs"])
        .and_then(|dir| crate::private_file::append(&dir.join("tui-gateway.log")))
        .map_err(|e| format!("cannot open the persistent gateway's log: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon")
        .args(without_call_log(flags))
        .env("HERMES_HOME", &cfg.home)
        // Each client's frames go to its own relay's call log (named in its hello).
        .env_remove("TUI_GATEWAY_RPC_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        // Its own session: the terminal's hangup and the TUI's signals never reach it.
        cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(io::Error::from));
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the persistent gateway: {e}"))?;
    let deadline = Instant::now() + cfg.relay_start;
    // Its first line says it listens (or that another one already does); its end, that it failed.
    let said = child
        .stdout
        .take()
        .and_then(|out| {
            let mut lines = crate::client::Lines::new(out);
            let line = lines.next_line(deadline).ok()?;
            Some(String::from_utf8_lossy(line).into_owned())
        })
        .unwrap_or_default();
    loop {
        match UnixStream::connect(&path) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline || (said.is_empty() && exited(&mut child)) => {
                return Err(format!(
                    "the persistent gateway for {} did not start ({e}); see {}",
                    cfg.home.display(),
                    cfg.home.join("logs/tui-gateway.log").display()
                ));
            }
            // Another relay's gateway won the lock and is still binding: a moment.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
}

/// `flags` without `--rpc-log` (and its value).
fn without_call_log(flags: &[String]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut skip = false;
    for f in flags {
        if std::mem::take(&mut skip) {
            continue;
        }
        match f.as_str() {
            "--rpc-log" => skip = true,
            _ if f.starts_with("--rpc-log=") => {}
            _ => kept.push(f.clone()),
        }
    }
    kept
}

fn exited(child: &mut std::process::Child) -> bool {
    matches!(child.try_wait(), Ok(Some(_)))
}
