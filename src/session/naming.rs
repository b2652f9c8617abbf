//! Naming stored sessions: a fresh stored id, and a title no other session has. Used when a
//! session is created or branched (`methods/`) and when a compaction moves it (through the
//! gateway's `TurnOwners::fresh_names`, `src/owners.rs`).

use crate::persist::Persistence;
use crate::session::Session;
use crate::session::table::SessionTable;
use crate::store::Store;
use crate::util;

/// Longest title kept.
const TITLE_MAX: usize = 200;

/// A stored id no live, closing or stored session has (the random part is only 24 bits).
pub fn new_stored_id(
    sessions: &SessionTable,
    persist: &Persistence<Session>,
    started_at: f64,
) -> String {
    loop {
        let id = util::stored_session_id(started_at);
        let taken = sessions.by_stored(&id).is_some()
            || persist.is_retired(&id)
            || persist.store().session_exists(&id).unwrap_or(false);
        if !taken {
            return id;
        }
    }
}

/// `wanted`, or else `wanted #N` with `N` one past the highest any other session has (live
/// or stored, as Hermes numbers a lineage), so that no other session has it. One indexed query
/// of the store, whatever the number of titles.
pub fn unique_title(
    sessions: &SessionTable,
    store: &Store,
    wanted: &str,
    stored_id: &str,
) -> String {
    let base = util::clip(wanted.trim(), TITLE_MAX);
    let stored = store
        .title_family(&base, stored_id)
        .unwrap_or((false, None));
    let live = sessions
        .values()
        .filter(|s| s.stored_id != stored_id)
        .filter_map(|s| s.title.as_deref());
    next_title(base, stored, live)
}

/// `base` unless taken, else one past the highest `base #N`: `stored` is what the store holds
/// (`base` taken, the highest N), `live` the other live sessions' titles.
fn next_title<'a>(
    base: String,
    stored: (bool, Option<u64>),
    live: impl Iterator<Item = &'a str>,
) -> String {
    let (mut taken, mut highest) = stored;
    let prefix = format!("{base} #");
    for t in live {
        if t == base {
            taken = true;
        } else if let Some(n) = t
            .strip_prefix(&prefix)
            .filter(|n| !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok())
        {
            highest = highest.max(Some(n));
        }
    }
    if !taken {
        return base;
    }
    let next = highest.unwrap_or(1).max(1).saturating_add(1);
    format!("{base} #{next}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(stored: (bool, Option<u64>), live: &[&str]) -> String {
        next_title("plan".into(), stored, live.iter().copied())
    }

    #[test]
    fn a_taken_title_gets_the_next_number_of_its_lineage() {
        assert_eq!(next((false, None), &["other", "plan #3"]), "plan");
        assert_eq!(next((true, None), &[]), "plan #2");
        assert_eq!(next((false, None), &["plan"]), "plan #2");
        assert_eq!(next((true, Some(4)), &["plan", "plan #2"]), "plan #5");
        assert_eq!(next((false, Some(2)), &["plan", "plan #7"]), "plan #8");
        // Only plain numbers count: not `#07`, `#x`, or another title's family.
        assert_eq!(
            next((true, None), &["plan #07", "plan #x", "plans #9"]),
            "plan #2"
        );
        assert_eq!(
            next((true, Some(u64::MAX)), &[]),
            format!("plan #{}", u64::MAX)
        );
    }
}
