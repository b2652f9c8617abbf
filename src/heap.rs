//! How the process heap gives memory back. glibc raises its mmap threshold to the size of the
//! largest block freed (up to 32 MiB), so after one 15 MiB tool result every later big buffer
//! comes from the heap and stays resident; a fixed threshold keeps big buffers mapped on their
//! own and returned to the system when dropped.

/// Blocks at least this large get their own mapping, unmapped when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const OWN_MAPPING_FROM: i32 = 256 * 1024;

/// Fix the threshold (the binary calls this first; an embedding program keeps its own tuning).
pub fn return_big_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's malloc parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_FROM);
    }
}

use std::time::{Duration, Instant};

/// Free heap memory worth a pass to give back (a pass walks every free block).
const TRIM_FROM: usize = 1024 * 1024;

/// When the heap's free memory goes back to the system: glibc returns only what is free at the
/// top of the heap, so after a peak (a burst of big results, many sessions' output) freed blocks
/// inside it stay resident. At a moment the loop would sleep, at most once per `period`, and
/// only after work since the last look (an idle gateway is never woken for it).
#[derive(Debug)]
pub struct Trimmer {
    period: Option<Duration>,
    last: Option<Instant>,
    owed: bool,
}

/// What the loop does about the heap before it sleeps.
#[derive(Debug, PartialEq, Eq)]
pub enum Idle {
    /// Nothing: no work since the last look, or trimming is off.
    Sleep,
    /// Look now: [`free_bytes`], and [`trim`] if [`Trimmer::worth`] says so.
    Look,
    /// The last look was too recent: wake by then to look.
    WakeBy(Instant),
}

impl Trimmer {
    /// `period` zero: never trim.
    pub fn new(period: Duration) -> Trimmer {
        Trimmer {
            period: (!period.is_zero()).then_some(period),
            last: None,
            owed: false,
        }
    }

    /// The loop did work this iteration.
    pub fn worked(&mut self) {
        self.owed = self.period.is_some();
    }

    /// The loop is about to sleep at `now`.
    pub fn at_idle(&mut self, now: Instant) -> Idle {
        let Some(period) = self.period.filter(|_| self.owed) else {
            return Idle::Sleep;
        };
        match self.last.map(|last| last + period) {
            Some(next) if next > now => Idle::WakeBy(next),
            _ => {
                self.last = Some(now);
                self.owed = false;
                Idle::Look
            }
        }
    }

    /// Whether `free` bytes of free heap are worth a trim pass.
    pub fn worth(free: usize) -> bool {
        free >= TRIM_FROM
    }
}

/// Bytes free inside the heap (glibc's count; 0 where it cannot be read).
pub fn free_bytes() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2 only reads malloc's own counters and returns them by value.
    unsafe {
        libc::mallinfo2().fordblks
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    0
}

/// Give the heap's free pages back to the system.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases pages of free blocks; it takes malloc's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_is_looked_at_after_work_at_most_once_per_period() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut trim = Trimmer::new(ms(1000));
        // Idle from the start: never woken for it.
        assert_eq!(trim.at_idle(t0), Idle::Sleep);
        trim.worked();
        assert_eq!(trim.at_idle(t0 + ms(5)), Idle::Look);
        // More work soon after: the next look waits for the period, and the loop wakes for it.
        trim.worked();
        assert_eq!(trim.at_idle(t0 + ms(300)), Idle::WakeBy(t0 + ms(1005)));
        assert_eq!(trim.at_idle(t0 + ms(1005)), Idle::Look);
        // Looked since the last work: nothing owed.
        assert_eq!(trim.at_idle(t0 + ms(5000)), Idle::Sleep);
    }

    #[test]
    fn a_zero_period_never_trims() {
        let mut trim = Trimmer::new(Duration::ZERO);
        trim.worked();
        assert_eq!(trim.at_idle(Instant::now()), Idle::Sleep);
    }
}
