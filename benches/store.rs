//! Commits to `state.db` (WAL, `synchronous=NORMAL`, on the temp dir's file system): one session
//! with one new message, and batches of many messages in one transaction, as the loop commits
//! at the end of an iteration. Throughput is in messages committed per second.
//!
//! ```text
//! cargo bench --bench store -- --warm-up-time 1 --measurement-time 3
//! ```

mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tui_gateway::session::transcript::{Message, Role};
use tui_gateway::session::{NewSession, Session};
use tui_gateway::store::Store;
use tui_gateway::util;

use common::TempDir;

/// Messages a session collects before the bench replaces it with a fresh one (memory stays flat;
/// the new session's first commit also inserts its row, as in real use).
const MESSAGES_PER_SESSION: usize = 1000;

const TEXT: &str = "(offline model) You said: please summarise the state of the session and \
                    what changed since the last turn";

fn new_session(n: usize) -> Session {
    let started_at = util::unix_now();
    Session::new(
        NewSession {
            runtime_id: util::random_hex(8),
            stored_id: format!("{}_{n}", util::stored_session_id(started_at)),
            title: None,
            model: "offline".into(),
            provider: "offline".into(),
            base_url: String::new(),
            cwd: "/tmp".into(),
            source: "tui".into(),
            started_at,
            cols: 100,
            context_max: 32_768,
            fast: false,
        },
        Instant::now(),
    )
}

/// `sessions` sessions, each given `per_session` new messages per commit.
struct Batch {
    store: Store,
    sessions: Vec<Session>,
    created: usize,
    per_session: usize,
    _home: TempDir,
}

impl Batch {
    fn new(sessions: usize, per_session: usize) -> Batch {
        let home = TempDir::new("store");
        let store = Store::open(&home.path().join("state.db"), "NORMAL").expect("open state.db");
        let mut batch = Batch {
            store,
            sessions: Vec::new(),
            created: 0,
            per_session,
            _home: home,
        };
        for _ in 0..sessions {
            let s = batch.fresh();
            batch.sessions.push(s);
        }
        // Their rows exist before measuring starts.
        batch.commit();
        batch
    }

    fn fresh(&mut self) -> Session {
        self.created += 1;
        new_session(self.created)
    }

    /// Appends the new messages and commits them in one `persist`; returns the time it took.
    fn append_and_commit(&mut self) -> Duration {
        for i in 0..self.sessions.len() {
            if self.sessions[i].transcript.len() + self.per_session > MESSAGES_PER_SESSION {
                self.sessions[i] = self.fresh();
            }
        }
        let start = Instant::now();
        let ts = util::unix_now();
        for s in &mut self.sessions {
            for k in 0..self.per_session {
                let role = if k % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                s.append(Message::new(role, Some(TEXT.to_string()), ts));
            }
        }
        self.commit();
        start.elapsed()
    }

    fn commit(&mut self) {
        let deltas: Vec<_> = self
            .sessions
            .iter()
            .filter(|s| s.unpersisted())
            .map(|s| (s.delta(), None))
            .collect();
        self.store.write(&deltas).expect("commit");
        for s in &mut self.sessions {
            s.persisted = s.committed_mark();
            s.row_dirty = false;
        }
    }
}

fn store(c: &mut Criterion) {
    let mut group = c.benchmark_group("store");
    for (sessions, per_session) in [(1, 1), (10, 10), (100, 1)] {
        let messages = sessions * per_session;
        group.throughput(Throughput::Elements(messages as u64));
        let name = format!("commit/{sessions}_sessions_x_{per_session}_messages");
        group.bench_function(name, |b| {
            let mut batch = Batch::new(sessions, per_session);
            b.iter_custom(|iters| (0..iters).map(|_| batch.append_and_commit()).sum());
        });
    }
    group.finish();
}

criterion_group!(benches, store);
criterion_main!(benches);
