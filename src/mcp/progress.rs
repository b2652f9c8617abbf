//! A server's `notifications/progress`, paced like a command's live output: a call's first
//! notice is shown at once, the ones after it within each [`INTERVAL`] are held and shown
//! together when it ends (the latest as `tool.progress`, the newest of their lines as one
//! `tool.output`, bounded), and whatever a call holds is shown before its result. A server that sends
//! 100,000 notices costs the client a few frames a second. Pure: the caller gives the time and
//! sets the timers.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::tools::JobId;

/// How often a call's progress is shown at the most (the terminal's live-output interval).
pub const INTERVAL: Duration = Duration::from_millis(100);

/// Bytes of held lines shown in one `tool.output`: the newest are kept, the older counted.
const OUTPUT_MAX: usize = 16 * 1024;

/// What to show for a call now.
#[derive(Debug, Default, PartialEq)]
pub struct Shown {
    /// The latest notice, for `tool.progress`.
    pub preview: String,
    /// The notices' lines, for `tool.output`.
    pub output: String,
}

/// What became of a notice.
#[derive(Debug, PartialEq)]
pub enum Notice {
    /// Show it now.
    Show(Shown),
    /// Held; the server's timer is to fire at this instant (`None`: one is already set).
    Held(Option<Instant>),
}

struct Pace {
    server: String,
    /// Before this, notices are held.
    quiet_until: Instant,
    held: Option<Shown>,
    /// Bytes of older lines dropped from `held.output`.
    skipped: usize,
    /// A timer is set for `quiet_until`.
    armed: bool,
}

/// The calls with progress, by job.
#[derive(Default)]
pub struct Progress {
    calls: HashMap<JobId, Pace>,
}

impl Progress {
    /// A notice `text` of `job`, a call to `server`.
    pub fn notice(&mut self, job: JobId, server: &str, text: &str, now: Instant) -> Notice {
        let pace = self.calls.entry(job).or_insert_with(|| Pace {
            server: server.to_string(),
            quiet_until: now,
            held: None,
            skipped: 0,
            armed: false,
        });
        if now >= pace.quiet_until && pace.held.is_none() {
            pace.quiet_until = now + INTERVAL;
            return Notice::Show(Shown {
                preview: text.to_string(),
                output: format!("{text}\n"),
            });
        }
        let held = pace.held.get_or_insert_with(Shown::default);
        held.preview = text.to_string();
        held.output.push_str(text);
        held.output.push('\n');
        if held.output.len() > OUTPUT_MAX {
            // Drop the oldest lines, down to half the bound (a line's end, a char's boundary).
            let mut cut = held.output.len() - OUTPUT_MAX / 2;
            while !held.output.is_char_boundary(cut) {
                cut += 1;
            }
            let cut = held.output[cut..]
                .find('\n')
                .map_or(held.output.len(), |i| cut + i + 1);
            held.output.drain(..cut);
            pace.skipped += cut;
        }
        if pace.armed {
            return Notice::Held(None);
        }
        pace.armed = true;
        Notice::Held(Some(pace.quiet_until))
    }

    /// `server`'s timer fired: what its calls held that is due now, and when the timer is to
    /// fire next for the rest.
    pub fn due(&mut self, server: &str, now: Instant) -> (Vec<(JobId, Shown)>, Option<Instant>) {
        let mut shown = Vec::new();
        let mut next: Option<Instant> = None;
        for (job, pace) in self.calls.iter_mut().filter(|(_, p)| p.server == server) {
            if !pace.armed {
                continue;
            }
            if now < pace.quiet_until {
                next = Some(next.map_or(pace.quiet_until, |n| n.min(pace.quiet_until)));
                continue;
            }
            pace.armed = false;
            pace.quiet_until = now + INTERVAL;
            if let Some(held) = take(pace) {
                shown.push((*job, held));
            }
        }
        (shown, next)
    }

    /// `job` ended (answered, failed, withdrawn): what it held, to show before its result.
    pub fn end(&mut self, job: JobId) -> Option<Shown> {
        self.calls.remove(&job).as_mut().and_then(take)
    }

    /// Keep only the calls `live` says still wait (one withdrawn leaves nothing behind).
    pub fn retain(&mut self, mut live: impl FnMut(JobId) -> bool) {
        self.calls.retain(|job, _| live(*job));
    }

    /// `server` is gone: its calls' held notices with it.
    pub fn forget_server(&mut self, server: &str) {
        self.calls.retain(|_, p| p.server != server);
    }
}

/// What `pace` holds, after a line saying how much older progress was left out.
fn take(pace: &mut Pace) -> Option<Shown> {
    let mut held = pace.held.take()?;
    if pace.skipped > 0 {
        held.output.insert_str(
            0,
            &format!("[... {} bytes of progress not shown ...]\n", pace.skipped),
        );
        pace.skipped = 0;
    }
    Some(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: JobId = JobId(7);

    #[test]
    fn the_first_notice_shows_and_a_flood_becomes_one_frame_an_interval() {
        let mut p = Progress::default();
        let t0 = Instant::now();
        assert!(matches!(p.notice(JOB, "s", "step 1", t0), Notice::Show(_)));
        assert_eq!(
            p.notice(JOB, "s", "step 2", t0),
            Notice::Held(Some(t0 + INTERVAL))
        );
        for n in 3..1000 {
            assert_eq!(
                p.notice(JOB, "s", &format!("step {n}"), t0),
                Notice::Held(None)
            );
        }
        let (early, next) = p.due("s", t0 + INTERVAL / 2);
        assert!(early.is_empty());
        assert_eq!(next, Some(t0 + INTERVAL));
        let (shown, next) = p.due("s", t0 + INTERVAL);
        assert_eq!(next, None);
        let [(job, shown)] = &shown[..] else {
            panic!("one call shown: {shown:?}");
        };
        assert_eq!(*job, JOB);
        assert_eq!(shown.preview, "step 999");
        assert!(shown.output.starts_with("step 2\nstep 3\n"));
        assert!(shown.output.ends_with("step 999\n"));
        // Quiet again: the next notice is held for the new interval, not shown.
        assert_eq!(
            p.notice(JOB, "s", "step 1000", t0 + INTERVAL),
            Notice::Held(Some(t0 + INTERVAL * 2))
        );
    }

    #[test]
    fn held_lines_are_bounded_and_shown_before_the_result() {
        let mut p = Progress::default();
        let t0 = Instant::now();
        p.notice(JOB, "s", "first", t0);
        let line = "é".repeat(500);
        for _ in 0..100 {
            p.notice(JOB, "s", &line, t0);
        }
        p.notice(JOB, "s", "the last", t0);
        let shown = p.end(JOB).expect("held");
        assert!(
            shown.output.len() <= OUTPUT_MAX + 100,
            "{}",
            shown.output.len()
        );
        assert!(shown.output.starts_with("[... "), "{}", &shown.output[..40]);
        assert!(shown.output.ends_with("\nthe last\n"));
        assert_eq!(p.end(JOB), None, "ended once");
    }

    #[test]
    fn a_gone_server_takes_its_calls_with_it() {
        let mut p = Progress::default();
        let t0 = Instant::now();
        p.notice(JOB, "s", "a", t0);
        p.notice(JobId(8), "other", "b", t0);
        p.notice(JOB, "s", "held", t0);
        p.forget_server("s");
        assert_eq!(p.end(JOB), None);
        assert!(p.end(JobId(8)).is_none(), "shown at once, nothing held");
    }
}
