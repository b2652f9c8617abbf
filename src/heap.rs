//! How the process heap gives memory back. glibc raises its mmap threshold to the size of the
//! largest block freed (up to 32 MiB), so after one 15 MiB tool result every later big buffer
//! comes from the heap and stays resident; a fixed threshold keeps big buffers mapped on their
//! own and returned to the system when dropped. And the pages of code only the start ran are
//! let go once the gateway is up ([`release_start_pages`]).

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

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Armed by the binary ([`release_start_pages_when_idle`]): the loop's idle moments let go of
/// the code pages only past work ran.
static RELEASE_PAGES: AtomicBool = AtomicBool::new(false);

/// The first time the loop is about to sleep (the start done: store open, first iteration run),
/// and at each later look after work (at most once a trim period), [`release_start_pages`]; the
/// first time [`trim`] too unless trimming is off. The binary arms it; an embedding program keeps
/// its pages.
pub fn release_start_pages_when_idle() {
    RELEASE_PAGES.store(true, Ordering::Relaxed);
}

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
    /// The first idle moment has come (the start's pages were let go, when armed).
    started: bool,
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
            started: false,
        }
    }

    /// The loop did work this iteration.
    pub fn worked(&mut self) {
        self.owed = self.period.is_some();
    }

    /// The loop is about to sleep at `now` (armed, the pages only past work ran go first: the
    /// start's, then at each look after work).
    pub fn at_idle(&mut self, now: Instant) -> Idle {
        let release = RELEASE_PAGES.load(Ordering::Relaxed);
        if release && !std::mem::replace(&mut self.started, true) {
            release_start_pages();
            if self.period.is_some() {
                trim();
            }
        }
        let Some(period) = self.period.filter(|_| self.owed) else {
            return Idle::Sleep;
        };
        match self.last.map(|last| last + period) {
            Some(next) if next > now => Idle::WakeBy(next),
            _ => {
                self.last = Some(now);
                self.owed = false;
                // What the work ran (a tool's, a turn's code) goes back with its heap.
                if release {
                    release_start_pages();
                }
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

/// Let go of the program's code and read-only data the start touched, once the gateway is up.
///
/// RSS counts every page of a file mapped into the process, and the kernel maps code in blocks
/// around each page first run (64 KiB, or the page cache's whole large folio): opening the
/// store, checking its schema, building the tool table and the first iteration leave most of the
/// binary's code mapped (7 of its 9.5 MB) though a running gateway runs less of it. This unmaps the pages of each read-only mapping of a file (the program's code
/// and constants, the C library's) that holds no private copy (`Anonymous: 0 kB` in
/// `/proc/self/smaps`, so nothing in it was ever written, not by relocation nor by a debugger):
/// they stay in the page cache, and a page the gateway runs again is mapped again by its next
/// use (a minor fault). Writable mappings, shared ones and relocated read-only data are left.
/// Returns the bytes unmapped (0 where `/proc` cannot be read).
pub fn release_start_pages() -> usize {
    #[cfg(target_os = "linux")]
    {
        let Some(smaps) = crate::util::read_proc("/proc/self/smaps") else {
            return 0;
        };
        let mut released = 0;
        for (start, end) in clean_read_only_file_mappings(&smaps) {
            // SAFETY: the range is a whole mapping of a file, read-only and private, with no
            // private copy of any page: MADV_DONTNEED only removes its page table entries, and
            // every later access maps the same bytes again from the file.
            let done = unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED)
            };
            if done == 0 {
                released += end - start;
            }
        }
        released
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// The address ranges in `smaps` (the text of `/proc/PID/smaps`) mapped from a file, private,
/// readable, not writable, with resident pages and none of them a private copy.
fn clean_read_only_file_mappings(smaps: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    // The current mapping if it qualifies by its header: (start, end, resident seen).
    let mut current: Option<(usize, usize, bool)> = None;
    let mut anonymous_seen = false;
    let mut finish = |current: Option<(usize, usize, bool)>, anonymous: bool| {
        if let Some((start, end, true)) = current
            && !anonymous
        {
            found.push((start, end));
        }
    };
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-')
            && !first.ends_with(':')
        {
            finish(current.take(), anonymous_seen);
            anonymous_seen = false;
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3).unwrap_or("");
            let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) else {
                continue;
            };
            let b = perms.as_bytes();
            let read_only_private = b.len() == 4 && b[0] == b'r' && b[1] == b'-' && b[3] == b'p';
            if read_only_private && path.starts_with('/') && end > start {
                current = Some((start, end, false));
            }
            continue;
        }
        let kb = fields.next().and_then(|v| v.parse::<u64>().ok());
        match (first, current.as_mut()) {
            ("Rss:", Some(mapping)) => mapping.2 = kb.is_some_and(|kb| kb > 0),
            // Any private copy, or a field that cannot be read: leave the mapping.
            ("Anonymous:", Some(_)) => anonymous_seen |= kb != Some(0),
            _ => {}
        }
    }
    finish(current.take(), anonymous_seen);
    found
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

    #[test]
    fn only_clean_read_only_file_mappings_are_released() {
        let smaps = "\
5600-5700 r--p 00000000 fd:01 42 /usr/bin/gw
Rss:                 100 kB
Anonymous:             0 kB
5700-5900 r-xp 00001000 fd:01 42 /usr/bin/gw
Rss:                7000 kB
Anonymous:             0 kB
5900-5a00 r--p 00003000 fd:01 42 /usr/bin/gw
Rss:                 400 kB
Anonymous:           400 kB
5a00-5b00 rw-p 00004000 fd:01 42 /usr/bin/gw
Rss:                  24 kB
Anonymous:            24 kB
5b00-5c00 r-xp 00000000 fd:01 43 /usr/lib/libc.so.6
Rss:                   0 kB
Anonymous:             0 kB
5c00-5d00 rw-s 00000000 fd:01 44 /tmp/h/state.db-shm
Rss:                  32 kB
Anonymous:             0 kB
5d00-5e00 r--p 00000000 00:00 0 [vvar]
Rss:                   4 kB
Anonymous:             0 kB
5e00-5f00 r-xp 00000000 fd:01 43 /usr/lib/libc.so.6
Rss:                 900 kB
Anonymous:             0 kB
";
        // The program's code and constants and libc's resident code; not the relocated
        // constants, the data, a mapping with nothing resident, a shared mapping, the kernel's.
        assert_eq!(
            clean_read_only_file_mappings(smaps),
            vec![(0x5600, 0x5700), (0x5700, 0x5900), (0x5e00, 0x5f00)]
        );
    }
}
