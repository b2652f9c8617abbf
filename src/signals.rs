//! Signals reach the loop through a self-pipe (signal-hook): handlers only write to the pipe,
//! the work runs in the loop. Handlers the host installed before us are chained (signal-hook
//! calls the previous handler after ours), and a signal whose inherited disposition is
//! `SIG_IGN` is left ignored.

use std::io;

use signal_hook::consts::signal::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

pub use signal_hook::consts::signal;

/// Whether the signal's current disposition is `SIG_IGN`.
pub fn is_ignored(sig: libc::c_int) -> bool {
    let mut old: libc::sigaction = zeroed_sigaction();
    // SAFETY: a null new action only queries the current one into `old`, which we own.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
    rc == 0 && old.sa_sigaction == libc::SIG_IGN
}

fn zeroed_sigaction() -> libc::sigaction {
    // SAFETY: sigaction is a plain C struct for which all-zero bytes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Set a signal's disposition to `SIG_IGN`.
pub fn ignore(sig: libc::c_int) {
    // SAFETY: installing SIG_IGN runs no code of ours in signal context.
    unsafe {
        libc::signal(sig, libc::SIG_IGN);
    }
}

/// Name for `[gateway-signal]` lines.
pub fn name(sig: libc::c_int) -> &'static str {
    match sig {
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        SIGINT => "SIGINT",
        SIGCHLD => "SIGCHLD",
        _ => "signal",
    }
}

/// Which signals the gateway takes.
pub struct Plan {
    /// SIGINT starts the shutdown (stdin is a terminal); otherwise the UI owns Ctrl-C.
    pub handle_sigint: bool,
}

/// Register the signal pipe for the signals the plan takes, skipping inherited `SIG_IGN`s.
pub fn install(plan: &Plan) -> io::Result<Signals> {
    let mut wanted = vec![SIGCHLD];
    for sig in [SIGTERM, SIGHUP] {
        if !is_ignored(sig) {
            wanted.push(sig);
        }
    }
    if plan.handle_sigint && !is_ignored(SIGINT) {
        wanted.push(SIGINT);
    }
    Signals::new(wanted)
}
