//! The older part of a resumed session's transcript, still in state.db. A resume reads only
//! the newest messages (what it shows); the rest is read a step per loop iteration ([`step`]),
//! so a resume's loop time grows with what it shows, not with the session's length.
//!
//! Until the read ends the session's `transcript` is its tail: appending to it is safe (the
//! tail is what persistence counts from), but a turn (the model is sent it all), undo (it
//! counts stored rows) and every call that reads the whole transcript must not run on it:
//! prompts queue and run when the read ends; other calls read the rest at once ([`whole`]).

use std::time::Instant;

use crate::session::driver::{self, TurnOwners};
use crate::store::{ErrorKind, OlderRows, StoreError};
use crate::transcript::Message;

/// Messages a resume reads at once: enough for what it shows (500 display rows) unless
/// most of them show nothing; then it reads the rest (`methods::session::page`).
pub const NEWEST: usize = 1_000;
/// Messages one loop iteration reads (about 5 ms on the 2-core bench machine).
pub const STEP: usize = 4_096;
/// The most older messages reserved for up front (past it the vector grows as it reads).
const RESERVE_CAP: usize = 1 << 20;

/// What is still stored before a session's transcript, and what was read of it so far.
#[derive(Debug)]
pub struct Older {
    rows: OlderRows,
    /// The last row read (0: none yet).
    after_row: i64,
    /// Read so far, oldest first: each step appends, so nothing read is moved again.
    read: Vec<Message>,
}

impl Older {
    pub fn new(rows: OlderRows) -> Older {
        Older {
            rows,
            after_row: 0,
            read: Vec::new(),
        }
    }

    /// The older messages as the row's `message_count` promised (the read that ends counts them).
    pub fn count(&self) -> usize {
        self.rows.count
    }

    /// Free up to `budget` of the messages read so far (a closed session's memory, freed in
    /// steps); how many were freed.
    pub fn shed(&mut self, budget: usize) -> usize {
        crate::util::shed_tail(&mut self.read, budget)
    }
}

/// Read one step for the sessions still loading, [`STEP`] messages in all per iteration.
pub(crate) fn step(gw: &mut impl TurnOwners, now: Instant) {
    let Some(rid) = gw.sessions().next_loading() else {
        return;
    };
    if let Err(e) = read(gw, &rid, STEP, now) {
        // Left for `whole`, which the next call needing it (a prompt too) runs and reports.
        crate::diag!("[gateway] cannot read the older messages of session {rid}: {e}");
        gw.sessions().done_loading(&rid);
    }
}

/// Read everything still stored before the session's transcript, now.
pub(crate) fn whole(gw: &mut impl TurnOwners, rid: &str, now: Instant) -> Result<(), StoreError> {
    while gw.sessions().get(rid).is_some_and(|s| s.older.is_some()) {
        read(gw, rid, STEP * 16, now)?;
    }
    Ok(())
}

/// Read up to `limit` older messages; the last read puts them all before the transcript,
/// then runs the prompts that waited for it.
fn read(gw: &mut impl TurnOwners, rid: &str, limit: usize, now: Instant) -> Result<(), StoreError> {
    let parts = gw.call_parts();
    let Some(s) = parts.sessions.get(rid) else {
        return Ok(());
    };
    let Some(older) = &s.older else {
        return Ok(());
    };
    let Some(store) = parts.store else {
        return Err(StoreError::new(ErrorKind::Other, "no store to read from"));
    };
    let (messages, last) = store.messages_between(
        &s.stored_id,
        (older.after_row, older.rows.before_row),
        limit,
    )?;
    let s = gw.sessions().get_mut(rid).expect("looked up above");
    let older = s.older.as_mut().expect("looked up above");
    let ended = messages.len() < limit;
    if older.read.is_empty() {
        // Room for them all (and the tail), so no step copies what the others read; the
        // count is the row's word, so a corrupt one reserves no more than RESERVE_CAP.
        older
            .read
            .reserve(older.count().max(messages.len()).min(RESERVE_CAP) + s.transcript.len() + 64);
    }
    older.read.extend(messages);
    if let Some(row) = last {
        older.after_row = row;
    }
    if !ended {
        return Ok(());
    }
    let mut older = s.older.take().expect("looked up above");
    let read = older.read.len();
    older.read.append(&mut s.transcript);
    s.transcript = older.read;
    s.persisted.messages += read;
    if read != older.rows.count {
        // The row's count was wrong: the next commit writes the true one.
        s.row_dirty = true;
        gw.mark_dirty(rid);
    }
    gw.sessions().done_loading(rid);
    if !gw.sessions().get(rid).is_some_and(|s| s.running()) {
        driver::run_next_queued(gw, rid, now);
    }
    Ok(())
}
