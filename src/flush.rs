//! Periodic work on the timing wheel: writing the partial text of streaming replies, the
//! wake-up for retries of failed commits, folds and background steps, the start of indexing
//! after turns (each at most once per flush interval, `timer::Throttle`), and the idle-session
//! reaper.

use std::time::{Duration, Instant};

use crate::event_loop::{Gateway, Timer};

/// The flush tick: write the partial text, start indexing what the turns wrote; the
/// iteration's commit that follows retries what failed. Re-arms itself while there is
/// streaming text or unsaved work.
pub fn tick(gw: &mut Gateway, now: Instant) {
    if !gw.persist.tick_fired(now) {
        arm(gw, now);
        return;
    }
    if gw.persist.store_healthy() {
        write_partials(gw);
        gw.persist.tick_background();
        gw.persist.retry_folds();
    }
    let streaming = gw
        .sessions
        .values()
        .any(|s| s.turn.as_ref().is_some_and(|t| t.call.is_some()));
    if streaming || gw.persist.wants_tick() {
        arm(gw, now);
    }
}

/// Make sure a flush tick is scheduled (sooner than an interval when a commit retry is due).
pub fn arm(gw: &mut Gateway, now: Instant) {
    if let Some(at) = gw.persist.arm_tick(now) {
        gw.timers.insert(at, Timer::FlushTick);
    }
}

/// Write the text streamed so far of every assistant message still streaming.
fn write_partials(gw: &mut Gateway) {
    let mut rids = Vec::new();
    let mut items = Vec::new();
    let now_unix = crate::util::unix_now();
    for (rid, s) in gw.sessions.iter() {
        // Not ahead of the session's own messages: a tool result still waiting for the group
        // commit must get its row before the reply that follows it.
        let stored_all = s.persisted.messages >= s.transcript.len();
        if let Some(turn) = s
            .turn
            .as_ref()
            .filter(|t| stored_all && t.partial_pending())
        {
            rids.push(rid.clone());
            items.push((
                s.stored_id.as_str(),
                turn.partial_row,
                turn.round_text.as_str(),
                now_unix,
            ));
        }
    }
    if items.is_empty() {
        return;
    }
    match gw.persist.store_mut().write_partials(&items) {
        Ok(rows) => {
            for (rid, row) in rids.iter().zip(rows) {
                if let Some(turn) = gw.turn_mut(rid) {
                    turn.partial_row = Some(row);
                    turn.partial_written = turn.round_text.len();
                }
            }
        }
        Err(e) => crate::diag!(
            "[gateway] could not write the partial text of streaming replies ({e}); retrying"
        ),
    }
}

/// The reaper tick: sessions idle past the TTL are flushed, ended and evicted from memory
/// (not one whose background processes or delegations still run: evicting it would kill
/// them), and the journals of gateways that died meanwhile folded.
pub fn reap_idle(gw: &mut Gateway, now: Instant) {
    let ttl = gw.cfg.session_ttl;
    let processes = &gw.tools.processes;
    let idle: Vec<String> = gw
        .sessions
        .iter()
        .filter(|(_, s)| !s.running() && now.saturating_duration_since(s.last_active) >= ttl)
        .filter(|(rid, _)| !processes.any_running(rid))
        // Nor one whose background delegation runs: its result is to come to it.
        .filter(|(rid, _)| !crate::delegation::delegating(gw, rid))
        .map(|(rid, _)| rid.clone())
        .collect();
    for rid in idle {
        gw.retire(&rid, "session_ttl", now);
    }
    // Housekeeping's other half: what a gateway that died beside this one left in its journal.
    gw.adopt_dead_journals(now);
    gw.timers
        .insert(now + reaper_period(ttl), Timer::ReaperTick);
}

/// How often the reaper looks: a fraction of the TTL, between 50 ms and a minute.
pub fn reaper_period(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaper_period_is_bounded() {
        assert_eq!(
            reaper_period(Duration::from_secs(6 * 3600)),
            Duration::from_secs(60)
        );
        assert_eq!(
            reaper_period(Duration::from_millis(10)),
            Duration::from_millis(50)
        );
        assert_eq!(
            reaper_period(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
    }
}
