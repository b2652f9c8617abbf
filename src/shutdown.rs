//! The ordered shutdown: one path for SIGTERM, SIGHUP, SIGINT (where handled), stdin EOF, a dead
//! stdout and a crash. Read top to bottom:
//!
//! 1. fence: `prompt.submit` answers 5035 and no tool process starts (`Gateway::shutdown` is set);
//! 2. flush every session, running ones too, within the exit-flush budget;
//! 3. interrupt running turns: abort model calls, SIGTERM tool groups, SIGKILL after the grace;
//! 4. each killed tool's result is appended (the tools module does it as the group dies);
//! 5. finalize: end every row (`tui_shutdown`), commit, WAL checkpoint, drain stdout, exit 0;
//! 6. hard deadline: past the shutdown grace, SIGKILL every live tool group and exit at once.
//!
//! The loop keeps running during the sequence (it answers `ping`, reaps children), and calls
//! [`step`] every iteration.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::event_loop::{Gateway, Timer};

/// Time kept back from the hard deadline for the final stdout drain.
const DRAIN_MARGIN: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Steps 2 and 3 run on the next `step`.
    Begin,
    /// Waiting for interrupted tools to die; SIGKILL at `kill_at`.
    Killing {
        kill_at: Instant,
        killed: bool,
    },
    /// Step 5.
    Finalize,
    Done,
}

pub struct Shutdown {
    pub reason: String,
    pub started: Instant,
    pub hard_deadline: Instant,
    flush_deadline: Instant,
    kill_grace: Duration,
    phase: Phase,
}

impl Shutdown {
    pub fn new(reason: &str, now: Instant, cfg: &Config) -> Shutdown {
        Shutdown {
            reason: reason.to_string(),
            started: now,
            hard_deadline: now + cfg.shutdown_grace,
            flush_deadline: now + cfg.exit_flush_budget.min(cfg.shutdown_grace),
            kill_grace: cfg.kill_grace,
            phase: Phase::Begin,
        }
    }
}

/// Advance the sequence as far as it can go now.
pub fn step(gw: &mut Gateway, now: Instant) {
    let Some(sd) = gw.shutdown.as_ref() else {
        return;
    };
    if sd.phase == Phase::Done {
        return;
    }
    if now >= sd.hard_deadline {
        hard_exit(gw, "shutdown grace exceeded");
        return;
    }
    let (flush_deadline, kill_grace, hard_deadline) =
        (sd.flush_deadline, sd.kill_grace, sd.hard_deadline);
    let mut phase = sd.phase;
    loop {
        phase = match phase {
            Phase::Begin => {
                // 2. Flush everything now, bounded by the exit-flush budget.
                flush_within(gw, flush_deadline, now);
                // 3. Interrupt running turns; their tools get SIGTERM.
                let running: Vec<String> = gw
                    .sessions
                    .iter()
                    .filter(|(_, s)| s.running())
                    .map(|(rid, _)| rid.clone())
                    .collect();
                for rid in running {
                    gw.interrupt_turn(&rid, now);
                }
                crate::tools::runs::stop_shell_commands(gw, now);
                crate::methods::models::answer_all(gw);
                let kill_at = now + kill_grace;
                gw.timers
                    .insert(kill_at.min(hard_deadline), Timer::ShutdownStep);
                Phase::Killing {
                    kill_at,
                    killed: false,
                }
            }
            Phase::Killing { kill_at, killed } => {
                if !gw.runner.any_alive() {
                    Phase::Finalize
                } else if !killed && now >= kill_at {
                    gw.runner.kill_all();
                    Phase::Killing {
                        kill_at,
                        killed: true,
                    }
                } else {
                    // The dying tools' pipes and the kill timer wake the loop; nothing to poll.
                    break;
                }
            }
            Phase::Finalize => {
                // 5. End every row, commit (waiting for a lock up to the deadline), checkpoint.
                let rids: Vec<String> = gw.sessions.keys().cloned().collect();
                for rid in rids {
                    gw.retire(&rid, "tui_shutdown", now);
                }
                flush_within(
                    gw,
                    hard_deadline
                        .checked_sub(DRAIN_MARGIN)
                        .map_or(now, |d| d.max(now)),
                    now,
                );
                report_unpersisted(gw);
                gw.persist.checkpoint_if_due();
                let reason = gw
                    .shutdown
                    .as_ref()
                    .map(|s| s.reason.clone())
                    .unwrap_or_default();
                gw.drain_output(hard_deadline.min(Instant::now() + Duration::from_secs(1)));
                crate::diag!("[gateway-exit] {reason}");
                gw.exit_code = Some(0);
                Phase::Done
            }
            Phase::Done => break,
        };
        if phase == Phase::Done {
            break;
        }
    }
    if let Some(sd) = gw.shutdown.as_mut() {
        sd.phase = phase;
    }
}

/// Commit everything, letting SQLite wait for another process's lock until `deadline`.
fn flush_within(gw: &mut Gateway, deadline: Instant, now: Instant) {
    gw.commit_final(deadline, now);
}

/// Say on stderr what is still only in memory (or only in the journal).
fn report_unpersisted(gw: &Gateway) {
    gw.persist.report_unpersisted(gw.sessions.values());
}

/// Leave now: SIGKILL every live tool group, say what is lost, exit.
pub fn hard_exit(gw: &mut Gateway, reason: &str) {
    gw.runner.kill_all();
    report_unpersisted(gw);
    crate::diag!("[gateway-exit] {reason}");
    gw.exit_code = Some(0);
    if let Some(sd) = gw.shutdown.as_mut() {
        sd.phase = Phase::Done;
    }
}
