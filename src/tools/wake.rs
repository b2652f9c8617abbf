//! Waking calls that run on: the jobs due for a [`super::Tool::step`] on the next iteration,
//! and the [`JobWaker`] any thread uses to make one due. The loop owns the poll and hands in
//! the `mio::Waker` that interrupts its wait; this module never sees the poll.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::JobId;

/// What the wakers share with the gateway.
pub struct Shared {
    inner: Arc<Inner>,
}

struct Inner {
    woken: Mutex<Vec<JobId>>,
    /// Interrupts the loop's poll; `None` in unit tests (the next iteration sees the jobs).
    poll_waker: Option<mio::Waker>,
}

/// Steps a call from any thread: `wake` makes the gateway call the tool's `step` for it on
/// its next loop iteration. Waking a call that has finished does nothing.
#[derive(Clone)]
pub struct JobWaker {
    job: JobId,
    inner: Arc<Inner>,
}

impl JobWaker {
    pub fn job(&self) -> JobId {
        self.job
    }

    pub fn wake(&self) {
        // A poisoned lock still holds a valid list: a panicking waker cannot lose others.
        let mut woken = self.inner.woken.lock().unwrap_or_else(|p| p.into_inner());
        woken.push(self.job);
        drop(woken);
        if let Some(w) = &self.inner.poll_waker {
            // Nothing to do if it fails: the job is listed and any later iteration steps it.
            let _ = w.wake();
        }
    }
}

impl Shared {
    pub fn new(poll_waker: Option<mio::Waker>) -> Shared {
        Shared {
            inner: Arc::new(Inner {
                woken: Mutex::new(Vec::new()),
                poll_waker,
            }),
        }
    }

    pub fn waker(&self, job: JobId) -> JobWaker {
        JobWaker {
            job,
            inner: self.inner.clone(),
        }
    }

    /// The jobs woken from other threads since the last call.
    fn take_woken(&self) -> Vec<JobId> {
        let mut woken = self.inner.woken.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *woken)
    }
}

/// The jobs due for a step on the next iteration, in id order (each stepped once however
/// often it was woken).
#[derive(Default)]
pub struct Due {
    jobs: BTreeSet<JobId>,
}

impl Due {
    pub fn add(&mut self, job: JobId) {
        self.jobs.insert(job);
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The jobs to step now: those made due in the loop and those woken elsewhere.
    pub fn take(&mut self, shared: &Shared) -> Vec<JobId> {
        self.jobs.extend(shared.take_woken());
        std::mem::take(&mut self.jobs).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_woken_from_another_thread_is_due_once() {
        let shared = Shared::new(None);
        let mut due = Due::default();
        let waker = shared.waker(JobId(7));
        let other = waker.clone();
        std::thread::spawn(move || {
            other.wake();
            other.wake();
        })
        .join()
        .unwrap();
        due.add(JobId(3));
        assert_eq!(due.take(&shared), [JobId(3), JobId(7)]);
        assert!(due.take(&shared).is_empty());
        assert_eq!(waker.job(), JobId(7));
    }
}
