//! A session as the store sees it: the [`Delta`] one commit writes for it (borrowing from the
//! session), and its marks once the store holds everything. The store itself knows only the
//! plain `Delta`; this is the one place that maps a session's fields onto it.

use std::borrow::Cow;

use super::{Persisted, Session};
use crate::persist::Unit;
use crate::store::{Delta, LiveChange};

impl Session {
    /// What committing this session writes, relative to what the store already holds.
    pub fn delta(&self) -> Delta<'_> {
        let (ended_at, end_reason) = match &self.ended {
            Some((at, why)) => (Some(*at), Some(Cow::Borrowed(why.as_str()))),
            None => (None, None),
        };
        let live = if self.ended.is_some() {
            if self.row_dirty {
                LiveChange::Release
            } else {
                LiveChange::Keep
            }
        } else if !self.persisted.live {
            LiveChange::Claim
        } else {
            LiveChange::Keep
        };
        let queue = self.queue_dirty.then(|| {
            self.pending_texts()
                .into_iter()
                .map(Cow::Owned)
                .collect::<Vec<_>>()
        });
        // Written with the queue: a delegation's result replaces its notice in one commit.
        let delegations = self.queue_dirty.then(|| {
            let awaited = self.background_delegations.iter();
            awaited
                .map(|a| {
                    (
                        Cow::Borrowed(a.id.as_str()),
                        Cow::Borrowed(a.if_lost.as_str()),
                    )
                })
                .collect::<Vec<_>>()
        });
        // Only the row's insert writes it (a journal record need not carry it otherwise).
        let delegate_from = self
            .delegated
            .as_ref()
            .filter(|_| !self.persisted.row)
            .map(|d| Cow::Borrowed(d.delegate_from.as_str()));
        let stored = self.persisted.messages.min(self.transcript.len());
        // A streaming reply's partial row is a row the transcript has no message for yet.
        let partial_row = self.turn.as_ref().is_some_and(|t| t.partial_row.is_some());
        Delta {
            id: Cow::Borrowed(&self.stored_id),
            source: Cow::Borrowed(&self.source),
            model: Cow::Borrowed(&self.model),
            title: self.title.as_deref().map(Cow::Borrowed),
            cwd: Cow::Borrowed(&self.cwd),
            parent_session_id: self.parent_session_id.as_deref().map(Cow::Borrowed),
            started_at: self.started_at,
            ended_at,
            end_reason,
            message_count: (self.message_total() + usize::from(partial_row)) as i64,
            tool_call_count: self.tool_call_count as i64,
            input_tokens: self.input_tokens as i64,
            output_tokens: self.output_tokens as i64,
            api_call_count: self.model_calls as i64,
            billing_provider: Cow::Borrowed(&self.provider),
            billing_base_url: Cow::Borrowed(&self.base_url),
            accounting: self.accounting,
            usage: self.usage_totals().since(&self.usage_committed),
            last_activity_at: self.last_activity_at,
            insert_row: !self.persisted.row,
            update_row: self.row_dirty,
            live,
            queue,
            delegations,
            delegate_from,
            keep: self.stored_keep,
            messages: Cow::Borrowed(&self.transcript[stored..]),
        }
    }

    /// The marks once the store holds everything this session has.
    pub fn committed_mark(&self) -> Persisted {
        Persisted {
            row: true,
            messages: self.transcript.len(),
            live: self.ended.is_none(),
        }
    }
}

/// What persistence reads and marks of a session (it knows nothing else of it).
impl Unit for Session {
    fn runtime_id(&self) -> &str {
        &self.runtime_id
    }
    fn stored_id(&self) -> &str {
        &self.stored_id
    }
    fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }
    fn unpersisted(&self) -> bool {
        Session::unpersisted(self)
    }
    fn delta(&self) -> Delta<'_> {
        Session::delta(self)
    }
    fn committed(&mut self) {
        self.persisted = self.committed_mark();
        self.usage_committed = self.usage_totals();
        self.stored_keep = None;
        self.row_dirty = false;
        self.queue_dirty = false;
    }
    fn messages(&self) -> (usize, usize) {
        let all = self.transcript.len();
        (all, all - self.persisted.messages.min(all))
    }
    fn shed(&mut self, budget: usize) -> usize {
        let older = self.older.as_mut().map_or(0, |o| o.shed(budget));
        older + crate::util::shed_tail(&mut self.transcript, budget - older)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{bare_session, turn::Turn};
    use crate::store::{ListFilter, Store};
    use crate::transcript::{Message, Role};

    /// A commit writes the count it carries (the store never counts the rows on the commit's
    /// path), so that count includes the partial row a streaming reply's text is written to.
    #[test]
    fn a_commit_mid_stream_counts_the_partial_row() {
        let dir = std::env::temp_dir().join(format!("tgw-count-{}", crate::util::random_hex(8)));
        let mut store = Store::open(&dir.join("state.db"), "NORMAL").unwrap();
        let count = |store: &Store| store.list(&ListFilter::first(1)).unwrap()[0].message_count;
        let mut s = bare_session("r", "s");
        s.append(Message::new(Role::User, Some("hi".into()), 1.0));
        store.write(&[(s.delta(), None)]).unwrap();
        s.persisted = s.committed_mark();
        s.row_dirty = false;
        assert_eq!(count(&store), 1);

        let rows = store
            .write_partials(&[("s", None, "streamed so far", 2.0)])
            .unwrap();
        assert_eq!(count(&store), 2);
        let mut turn = Turn::new(crate::reactor::Slot::detached(1));
        turn.partial_row = Some(rows[0]);
        s.turn = Some(turn);
        // Renamed while the reply streams: the row is written again, the count with it.
        s.title = Some("renamed".into());
        s.row_dirty = true;
        store.write(&[(s.delta(), None)]).unwrap();
        assert_eq!(count(&store), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The cost columns read back as written (a resume goes on from them), and a later call
    /// whose price is unknown keeps the dollars and the table's version stored before it.
    #[test]
    fn the_cost_columns_read_back_and_an_unknown_last_call_keeps_the_stored_version() {
        use crate::model::TokenUsage;
        use crate::model::pricing::{CostSource, CostStatus, price};
        let dir = std::env::temp_dir().join(format!("tgw-cost-{}", crate::util::random_hex(8)));
        let mut store = Store::open(&dir.join("state.db"), "NORMAL").unwrap();
        let mut s = bare_session("r", "s");
        s.provider = "anthropic".into();
        s.model = "claude-sonnet-4-6".into();
        let u = TokenUsage {
            input: 53_000,
            output: 500,
            cache_read: 50_000,
            cache_write: 2_000,
            ..Default::default()
        };
        s.accounting.add(&u, &price(&s.provider, "", &s.model, &u));
        s.model_calls = 1;
        store.write(&[(s.delta(), None)]).unwrap();
        let a = store.load("s").unwrap().unwrap().accounting;
        assert_eq!(a, s.accounting);
        assert_eq!(a.pricing_version, Some("anthropic-pricing-2026-05"));

        // Resumed: the row's figures come back without a version in memory; the next call
        // (a model the table lacks) is unknown.
        let mut resumed = bare_session("r2", "s");
        resumed.persisted.row = true;
        resumed.accounting = crate::model::Accounting {
            pricing_version: None,
            ..a
        };
        resumed.model = "no-such-model".into();
        resumed
            .accounting
            .add(&u, &price("anthropic", "", "no-such-model", &u));
        store.write(&[(resumed.delta(), None)]).unwrap();
        let row: (f64, String, String, String) = rusqlite::Connection::open(dir.join("state.db"))
            .unwrap()
            .query_row(
                "SELECT estimated_cost_usd, cost_status, cost_source, pricing_version
                 FROM sessions WHERE id = 's'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert!((row.0 - 0.033).abs() < 1e-12, "{row:?}");
        assert_eq!(
            (row.1.as_str(), row.2.as_str(), row.3.as_str()),
            (
                CostStatus::Unknown.as_str(),
                CostSource::None.as_str(),
                "anthropic-pricing-2026-05"
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A commit of more new messages than one INSERT carries (64), of two sessions (one of
    /// them new in it), writes them all, each session's in order and under its own id.
    #[test]
    fn a_commit_of_many_messages_keeps_their_order() {
        let dir = std::env::temp_dir().join(format!("tgw-many-{}", crate::util::random_hex(8)));
        let mut store = Store::open(&dir.join("state.db"), "NORMAL").unwrap();
        let mut s = bare_session("r", "s");
        s.append(Message::new(Role::User, Some("first".into()), 1.0));
        store.write(&[(s.delta(), None)]).unwrap();
        s.persisted = s.committed_mark();
        let mut t = bare_session("r2", "t");
        let texts: Vec<String> = (0..150).map(|i| format!("m{i}")).collect();
        for (i, text) in texts.iter().enumerate() {
            let role = if i % 2 == 0 {
                Role::Assistant
            } else {
                Role::User
            };
            s.append(Message::new(role, Some(text.clone()), 2.0 + i as f64));
            t.append(Message::new(
                role,
                Some(format!("t-{text}")),
                2.0 + i as f64,
            ));
        }
        store
            .write(&[(s.delta(), None), (t.delta(), None)])
            .unwrap();
        let stored = |id: &str| -> Vec<String> {
            store
                .messages_between(id, (0, i64::MAX), 1_000)
                .unwrap()
                .0
                .into_iter()
                .map(|m| m.content.unwrap_or_default())
                .collect()
        };
        let mut want = vec!["first".to_string()];
        want.extend(texts.iter().cloned());
        assert_eq!(stored("s"), want);
        let want_t: Vec<String> = texts.iter().map(|x| format!("t-{x}")).collect();
        assert_eq!(stored("t"), want_t);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
