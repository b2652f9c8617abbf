//! The ordered shutdown: one path for SIGTERM, SIGHUP, SIGINT (where handled), stdin EOF, a dead
//! stdout and a crash. Read top to bottom:
//!
//! 1. fence: `prompt.submit` answers 5035 and no tool process starts (`Gateway::shutdown` is set);
//! 2. flush every session, running ones too, within the exit-flush budget;
//! 3. interrupt running turns: abort model calls, SIGTERM tool groups, SIGKILL after the grace;
//!    the sessions that wait for nothing end now (their rows commit while the tools die);
//! 4. each killed tool's result is appended (the tools module does it as the group dies);
//! 5. finalize: end every other row (`tui_shutdown`), commit, WAL checkpoint, drain stdout, exit 0;
//! 6. hard deadline: past the shutdown grace, SIGKILL every live tool group and exit at once;
//!    so does a second signal, or a crash during the sequence.
//!
//! [`Shutdown`] only decides: given the time and a [`View`] of what is still alive, it returns
//! the [`ShutdownAction`]s due. The gateway does them ([`Gateway::step_shutdown`]) and asks again until
//! nothing is due. The loop keeps running during the sequence (it answers `ping`, reaps
//! children) and steps the shutdown every iteration.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::event_loop::{Gateway, Timer};

/// Time kept back from the hard deadline for the final stdout drain.
const DRAIN_MARGIN: Duration = Duration::from_millis(100);

/// Longest the final drain waits for a client that does not read.
const DRAIN_AT_MOST: Duration = Duration::from_secs(1);

/// The sequence's time limits.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// From the trigger to the hard exit.
    pub grace: Duration,
    /// How long the first flush may wait for a lock.
    pub flush_budget: Duration,
    /// From SIGTERM to SIGKILL of interrupted tools.
    pub kill_grace: Duration,
}

impl Timing {
    pub fn of(cfg: &Config) -> Timing {
        Timing {
            grace: cfg.shutdown_grace,
            flush_budget: cfg.exit_flush_budget,
            kill_grace: cfg.kill_grace,
        }
    }
}

/// What the sequence needs to know about the gateway.
#[derive(Debug, Clone, Copy)]
pub struct View {
    /// Some tool process group has not been reaped yet, or an MCP session's `DELETE` is
    /// still waited for.
    pub tools_alive: bool,
}

/// Something for the gateway to do, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShutdownAction {
    /// Step the sequence again at this time.
    WakeAt(Instant),
    /// Commit everything, letting SQLite wait for another process's lock until `until`.
    Flush { until: Instant },
    /// Interrupt running turns (their tools get SIGTERM), stop shell commands, answer waiting
    /// model-list fetches.
    Interrupt,
    /// SIGKILL every live tool group.
    KillTools,
    /// End the row of every session that waits for nothing (no turn, no process of its
    /// own), so their commit runs while the interrupted tools die.
    EndIdleSessions,
    /// End every live session's row (`tui_shutdown`).
    EndSessions,
    /// Say on stderr what is still only in memory.
    ReportUnpersisted,
    /// Fold the WAL into the database.
    Checkpoint,
    /// Write what is queued, waiting for the client until `until` but no longer than
    /// `at_most` from when the drain starts.
    Drain { until: Instant, at_most: Duration },
    /// Log the reason and exit with `code`.
    Exit { code: i32, reason: String },
}

/// A trigger that arrives while the sequence runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// Another SIGTERM/SIGHUP/SIGINT: the user means now.
    Signal,
    /// A panic during the sequence: leave rather than loop on it.
    Crash,
    /// Input closed, output dead, poll failed: the sequence already handles it.
    Io,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Steps 2 and 3 are due.
    Begin,
    /// Waiting for interrupted tools to die; SIGKILL at `kill_at`.
    Killing {
        kill_at: Instant,
        killed: bool,
    },
    /// Step 5 is due.
    Finalize,
    Done,
}

pub struct Shutdown {
    /// What started the sequence, said at the exit.
    reason: String,
    hard_deadline: Instant,
    flush_deadline: Instant,
    kill_grace: Duration,
    phase: Phase,
}

impl Shutdown {
    /// The sequence, started at `now` (the fence is up from here); with the first actions:
    /// wake at once and at the hard deadline.
    pub fn begin(reason: &str, now: Instant, timing: Timing) -> (Shutdown, Vec<ShutdownAction>) {
        let sd = Shutdown {
            reason: reason.to_string(),
            hard_deadline: now + timing.grace,
            flush_deadline: now + timing.flush_budget.min(timing.grace),
            kill_grace: timing.kill_grace,
            phase: Phase::Begin,
        };
        let actions = vec![
            ShutdownAction::WakeAt(now),
            ShutdownAction::WakeAt(sd.hard_deadline),
        ];
        (sd, actions)
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// What is due now. Do the actions, then ask again with a fresh view until this returns
    /// none: the world they change may make more due at once.
    pub fn step(&mut self, now: Instant, view: &View) -> Vec<ShutdownAction> {
        if self.phase == Phase::Done {
            return Vec::new();
        }
        if now >= self.hard_deadline {
            return self.hard_exit("shutdown grace exceeded");
        }
        loop {
            match self.phase {
                Phase::Begin => {
                    let kill_at = now + self.kill_grace;
                    self.phase = Phase::Killing {
                        kill_at,
                        killed: false,
                    };
                    return vec![
                        ShutdownAction::Flush {
                            until: self.flush_deadline,
                        },
                        ShutdownAction::Interrupt,
                        ShutdownAction::EndIdleSessions,
                        ShutdownAction::WakeAt(kill_at.min(self.hard_deadline)),
                    ];
                }
                Phase::Killing { kill_at, killed } => {
                    if !view.tools_alive {
                        self.phase = Phase::Finalize;
                    } else if !killed && now >= kill_at {
                        self.phase = Phase::Killing {
                            kill_at,
                            killed: true,
                        };
                        return vec![ShutdownAction::KillTools];
                    } else {
                        // The dying tools' pipes and the kill timer wake the loop.
                        return Vec::new();
                    }
                }
                Phase::Finalize => {
                    self.phase = Phase::Done;
                    let commit_until = self
                        .hard_deadline
                        .checked_sub(DRAIN_MARGIN)
                        .map_or(now, |d| d.max(now));
                    return vec![
                        ShutdownAction::EndSessions,
                        ShutdownAction::Flush {
                            until: commit_until,
                        },
                        ShutdownAction::ReportUnpersisted,
                        ShutdownAction::Checkpoint,
                        ShutdownAction::Drain {
                            until: self.hard_deadline,
                            at_most: DRAIN_AT_MOST,
                        },
                        ShutdownAction::Exit {
                            code: 0,
                            reason: self.reason.clone(),
                        },
                    ];
                }
                Phase::Done => return Vec::new(),
            }
        }
    }

    /// Another trigger while the sequence runs.
    pub fn again(&mut self, cause: Again) -> Vec<ShutdownAction> {
        match cause {
            _ if self.phase == Phase::Done => Vec::new(),
            Again::Signal => self.hard_exit("second signal"),
            Again::Crash => self.hard_exit("crash during shutdown"),
            Again::Io => Vec::new(),
        }
    }

    /// Leave now: SIGKILL every live tool group, say what is lost, exit.
    fn hard_exit(&mut self, reason: &str) -> Vec<ShutdownAction> {
        self.phase = Phase::Done;
        vec![
            ShutdownAction::KillTools,
            ShutdownAction::ReportUnpersisted,
            ShutdownAction::Exit {
                code: 0,
                reason: reason.to_string(),
            },
        ]
    }
}

// ---- doing ----

impl Gateway {
    /// Start the ordered shutdown (once; a later trigger goes through [`Gateway::shutdown_again`]).
    pub fn begin_shutdown(&mut self, reason: &str, now: Instant) {
        if self.shutdown.is_some() {
            self.shutdown_again(Again::Io, now);
            return;
        }
        let (sd, actions) = Shutdown::begin(reason, now, Timing::of(&self.cfg));
        self.shutdown = Some(sd);
        // No title is set once the gateway is on its way out.
        crate::titles::drop_all(self);
        self.do_shutdown_actions(actions, now);
    }

    /// A trigger while the shutdown runs (a second signal, a crash in it).
    pub(crate) fn shutdown_again(&mut self, cause: Again, now: Instant) {
        let actions = match self.shutdown.as_mut() {
            Some(sd) => sd.again(cause),
            None => return,
        };
        self.do_shutdown_actions(actions, now);
    }

    /// Advance the sequence as far as it can go now.
    pub(crate) fn step_shutdown(&mut self, now: Instant) {
        loop {
            let view = View {
                // An MCP session's DELETE is waited for like a dying tool (bounded by it).
                tools_alive: self.runner.any_alive() || self.mcp.http.ending_sessions(),
            };
            let actions = match self.shutdown.as_mut() {
                Some(sd) => sd.step(now, &view),
                None => return,
            };
            if actions.is_empty() {
                return;
            }
            self.do_shutdown_actions(actions, now);
        }
    }

    fn do_shutdown_actions(&mut self, actions: Vec<ShutdownAction>, now: Instant) {
        for action in actions {
            match action {
                ShutdownAction::WakeAt(at) => {
                    self.timers.insert(at, Timer::ShutdownStep);
                }
                ShutdownAction::Flush { until } => flush_within(self, until, now),
                ShutdownAction::Interrupt => {
                    let running: Vec<String> = self
                        .sessions
                        .iter()
                        .filter(|(_, s)| s.running())
                        .map(|(rid, _)| rid.clone())
                        .collect();
                    for rid in running {
                        self.interrupt_turn(&rid, now);
                    }
                    crate::tools::runs::stop_shell_commands(self, now);
                    crate::mcp::shut_down(self, now);
                    crate::checkpoints::shut_down(self, now);
                    crate::methods::models::answer_all(self);
                }
                ShutdownAction::KillTools => self.runner.kill_all(),
                ShutdownAction::EndIdleSessions => self.end_sessions(true, now),
                ShutdownAction::EndSessions => self.end_sessions(false, now),
                ShutdownAction::ReportUnpersisted => report_unpersisted(self),
                ShutdownAction::Checkpoint => {
                    self.persist.checkpoint_if_due();
                }
                ShutdownAction::Drain { until, at_most } => {
                    self.drain_output(until.min(self.clock.now() + at_most));
                }
                ShutdownAction::Exit { code, reason } => {
                    crate::diag!("[gateway-exit] {reason}");
                    self.exit_code = Some(code);
                }
            }
        }
    }
}

impl Gateway {
    /// End the rows of the live sessions (`tui_shutdown`); `idle_only`: only those that wait
    /// for nothing (no turn, no background process of theirs).
    fn end_sessions(&mut self, idle_only: bool, now: Instant) {
        let rids: Vec<String> = self
            .sessions
            .iter()
            .filter(|(rid, s)| {
                !idle_only || (!s.running() && !self.tools.processes.any_running(rid))
            })
            .map(|(rid, _)| rid.clone())
            .collect();
        for rid in rids {
            self.retire(&rid, "tui_shutdown", now);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn timing() -> Timing {
        Timing {
            grace: 10 * SEC,
            flush_budget: 2 * SEC,
            kill_grace: 3 * SEC,
        }
    }

    fn alive(tools_alive: bool) -> View {
        View { tools_alive }
    }

    fn finalize(t0: Instant, reason: &str) -> Vec<ShutdownAction> {
        let hard = t0 + timing().grace;
        vec![
            ShutdownAction::EndSessions,
            ShutdownAction::Flush {
                until: hard - DRAIN_MARGIN,
            },
            ShutdownAction::ReportUnpersisted,
            ShutdownAction::Checkpoint,
            ShutdownAction::Drain {
                until: hard,
                at_most: DRAIN_AT_MOST,
            },
            ShutdownAction::Exit {
                code: 0,
                reason: reason.into(),
            },
        ]
    }

    fn hard_exit(reason: &str) -> Vec<ShutdownAction> {
        vec![
            ShutdownAction::KillTools,
            ShutdownAction::ReportUnpersisted,
            ShutdownAction::Exit {
                code: 0,
                reason: reason.into(),
            },
        ]
    }

    /// Flush until `flush_until`, interrupt, end the idle sessions, step again at `kill_wake`.
    fn steps_2_and_3(flush_until: Instant, kill_wake: Instant) -> Vec<ShutdownAction> {
        vec![
            ShutdownAction::Flush { until: flush_until },
            ShutdownAction::Interrupt,
            ShutdownAction::EndIdleSessions,
            ShutdownAction::WakeAt(kill_wake),
        ]
    }

    /// Begun at `t0` and past steps 2 and 3.
    fn interrupted(reason: &str, t0: Instant) -> Shutdown {
        let (mut sd, wakes) = Shutdown::begin(reason, t0, timing());
        assert_eq!(
            wakes,
            vec![
                ShutdownAction::WakeAt(t0),
                ShutdownAction::WakeAt(t0 + 10 * SEC)
            ]
        );
        assert_eq!(
            sd.step(t0, &alive(true)),
            steps_2_and_3(t0 + 2 * SEC, t0 + 3 * SEC)
        );
        sd
    }

    #[test]
    fn the_ordered_path_flushes_interrupts_waits_then_finalizes() {
        let t0 = Instant::now();
        let mut sd = interrupted("SIGTERM", t0);
        // Tools dying: nothing due until their pipes or the kill timer wake the loop.
        assert_eq!(sd.step(t0, &alive(true)), vec![]);
        assert_eq!(sd.step(t0 + SEC, &alive(true)), vec![]);
        assert!(!sd.is_done());
        assert_eq!(sd.step(t0 + SEC, &alive(false)), finalize(t0, "SIGTERM"));
        assert!(sd.is_done());
        assert_eq!(sd.step(t0 + 2 * SEC, &alive(false)), vec![]);
        assert_eq!(
            sd.step(t0 + 20 * SEC, &alive(false)),
            vec![],
            "no hard exit after"
        );
    }

    #[test]
    fn tools_that_die_at_once_finalize_in_the_same_instant() {
        let t0 = Instant::now();
        let mut sd = interrupted("stdin closed", t0);
        assert_eq!(sd.step(t0, &alive(false)), finalize(t0, "stdin closed"));
    }

    #[test]
    fn tools_that_ignore_sigterm_get_sigkill_once_at_the_kill_grace() {
        let t0 = Instant::now();
        let mut sd = interrupted("SIGTERM", t0);
        let kill_at = t0 + 3 * SEC;
        assert_eq!(
            sd.step(kill_at - Duration::from_millis(1), &alive(true)),
            vec![]
        );
        assert_eq!(
            sd.step(kill_at, &alive(true)),
            vec![ShutdownAction::KillTools]
        );
        assert_eq!(sd.step(kill_at, &alive(true)), vec![]);
        assert_eq!(sd.step(kill_at + SEC, &alive(true)), vec![], "killed once");
        assert_eq!(
            sd.step(kill_at + SEC, &alive(false)),
            finalize(t0, "SIGTERM")
        );
    }

    #[test]
    fn the_hard_deadline_exits_at_once_and_finalize_leaves_the_drain_margin() {
        let t0 = Instant::now();
        let hard = t0 + 10 * SEC;
        let mut sd = interrupted("SIGTERM", t0);
        assert_eq!(
            sd.step(t0 + 3 * SEC, &alive(true)),
            vec![ShutdownAction::KillTools]
        );
        assert_eq!(
            sd.step(hard, &alive(true)),
            hard_exit("shutdown grace exceeded")
        );
        assert!(sd.is_done());
        assert_eq!(sd.step(hard + SEC, &alive(true)), vec![]);

        // Finalizing inside the margin: the commit may not wait at all, the drain ends by the
        // hard deadline.
        let mut sd = interrupted("SIGTERM", t0);
        let late = hard - DRAIN_MARGIN / 2;
        let actions = sd.step(late, &alive(false));
        assert_eq!(actions[1], ShutdownAction::Flush { until: late });
        assert!(matches!(actions[4], ShutdownAction::Drain { until, .. } if until == hard));

        // Limits longer than the grace are cut to it.
        let long = Timing {
            grace: 2 * SEC,
            flush_budget: 5 * SEC,
            kill_grace: 5 * SEC,
        };
        let (mut sd, _) = Shutdown::begin("SIGTERM", t0, long);
        assert_eq!(
            sd.step(t0, &alive(true)),
            steps_2_and_3(t0 + 2 * SEC, t0 + 2 * SEC)
        );
        assert_eq!(
            sd.step(t0 + 2 * SEC, &alive(true)),
            hard_exit("shutdown grace exceeded")
        );
    }

    #[test]
    fn a_second_signal_or_a_crash_exits_now_but_eof_changes_nothing() {
        let t0 = Instant::now();
        let mut sd = interrupted("SIGTERM", t0);
        // Input closing or output dying mid-sequence is part of the sequence.
        assert_eq!(sd.again(Again::Io), vec![]);
        assert_eq!(sd.again(Again::Signal), hard_exit("second signal"));
        assert!(sd.is_done());
        assert_eq!(sd.again(Again::Signal), vec![], "exits once");
        assert_eq!(sd.step(t0 + SEC, &alive(false)), vec![]);

        let mut sd = interrupted("crash", t0);
        assert_eq!(sd.again(Again::Crash), hard_exit("crash during shutdown"));
    }

    #[test]
    fn the_exit_says_what_started_the_sequence() {
        let t0 = Instant::now();
        for reason in ["stdin closed", "SIGHUP", "stdout closed"] {
            let mut sd = interrupted(reason, t0);
            sd.again(Again::Io);
            let actions = sd.step(t0, &alive(false));
            assert_eq!(
                actions.last(),
                Some(&ShutdownAction::Exit {
                    code: 0,
                    reason: reason.into()
                })
            );
        }
    }
}
