//! A live session: its transcript, its stored row's state, its event ring and its turn.

pub mod compaction;
mod driver;
pub mod transcript;
pub mod turn;

use std::collections::VecDeque;
use std::time::Instant;

use serde_json::{Value, json};

use transcript::Message;
use turn::Turn;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How a `session.steer` text starts when it reaches the model as a user note.
pub const STEER_PREFIX: &str = "[The user adds, while you work:] ";

/// How far the stored copy of a session has caught up with memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Persisted {
    /// The `sessions` row exists.
    pub row: bool,
    /// `transcript[..messages]` are rows of `messages`.
    pub messages: usize,
    /// `tui_gateway_live` records this process as the session's owner.
    pub live: bool,
}

pub struct Session {
    /// 8 hex characters, lives only in memory.
    pub runtime_id: String,
    /// The `sessions.id` of the stored row.
    pub stored_id: String,
    pub title: Option<String>,
    pub model: String,
    pub provider: String,
    pub cwd: String,
    pub source: String,
    pub started_at: f64,
    pub last_activity_at: f64,
    pub last_active: Instant,
    pub cols: u64,
    pub transcript: Vec<Message>,
    pub persisted: Persisted,
    /// Row fields changed since the last commit.
    pub row_dirty: bool,
    /// `(ended_at, end_reason)` once the session ended.
    pub ended: Option<(f64, String)>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model_calls: u64,
    pub tool_call_count: u64,
    /// Last event sequence number used.
    pub seq: u64,
    /// Recent events `(seq, params JSON)` for `session.events.since`.
    pub ring: VecDeque<(u64, String)>,
    pub turn: Option<Turn>,
    /// Prompts submitted while a turn ran; each runs after it. Committed with the session
    /// (`tui_gateway_queue`) so an acknowledged prompt survives a crash.
    pub queued: VecDeque<String>,
    /// `queued` changed since the last commit.
    pub queue_dirty: bool,
    /// On the gateway's list of sessions to commit this iteration.
    pub dirty: bool,
    /// Dangerous-command rules the user approved for this session.
    pub approved_rules: Vec<String>,
    /// The stored session this one branched or was compacted from (`parent_session_id`).
    pub parent_session_id: Option<String>,
    /// Undo shortened the transcript: only this many stored rows stay (the rest are deleted
    /// by the next commit).
    pub stored_keep: Option<usize>,
    /// A `prompt.background` task: its answer goes to the parent as `background.complete`.
    pub background: Option<Background>,
}

/// Who waits for a background session's answer.
#[derive(Debug, Clone)]
pub struct Background {
    pub parent_rid: String,
    pub task_id: String,
}

/// What a session starts from.
pub struct NewSession {
    pub runtime_id: String,
    pub stored_id: String,
    pub title: Option<String>,
    pub model: String,
    pub provider: String,
    pub cwd: String,
    pub source: String,
    pub started_at: f64,
    pub cols: u64,
}

impl Session {
    pub fn new(n: NewSession, now: Instant) -> Self {
        Session {
            runtime_id: n.runtime_id,
            stored_id: n.stored_id,
            title: n.title,
            model: n.model,
            provider: n.provider,
            cwd: n.cwd,
            source: n.source,
            started_at: n.started_at,
            last_activity_at: n.started_at,
            last_active: now,
            cols: n.cols,
            transcript: Vec::new(),
            persisted: Persisted::default(),
            row_dirty: true,
            ended: None,
            input_tokens: 0,
            output_tokens: 0,
            model_calls: 0,
            tool_call_count: 0,
            seq: 0,
            ring: VecDeque::new(),
            turn: None,
            queued: VecDeque::new(),
            queue_dirty: false,
            dirty: false,
            approved_rules: Vec::new(),
            parent_session_id: None,
            stored_keep: None,
            background: None,
        }
    }

    pub fn running(&self) -> bool {
        self.turn.is_some()
    }

    /// Whether memory holds anything the store has not committed.
    pub fn unpersisted(&self) -> bool {
        !self.persisted.row
            || self.row_dirty
            || self.queue_dirty
            || self.stored_keep.is_some()
            || self.persisted.messages < self.transcript.len()
    }

    pub fn usage(&self) -> Value {
        json!({
            "model": self.model,
            "input": self.input_tokens,
            "output": self.output_tokens,
            "total": self.input_tokens + self.output_tokens,
            "calls": self.model_calls,
        })
    }

    pub fn info(&self) -> Value {
        json!({
            "model": self.model,
            "provider": self.provider,
            "cwd": self.cwd,
            "title": self.title,
            "running": self.running(),
            "usage": self.usage(),
            "stored_session_id": self.stored_id,
            "session_id": self.runtime_id,
            "version": VERSION,
        })
    }

    /// First user text, clipped, for lists.
    pub fn preview(&self) -> String {
        self.transcript
            .iter()
            .find(|m| m.role == transcript::Role::User)
            .and_then(|m| m.content.as_deref())
            .map(|t| crate::util::clip(t, 60))
            .unwrap_or_default()
    }

    /// Record an event in the ring; returns its seq.
    pub fn record_event(&mut self, params: &str, seq: u64, cap: usize) {
        if self.ring.len() >= cap {
            self.ring.pop_front();
        }
        self.ring.push_back((seq, params.to_string()));
    }

    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Shorten the transcript to `len` messages; the next commit deletes the stored rows past
    /// it (memory is the truth, so kept messages not yet written are written afresh).
    pub fn truncate(&mut self, len: usize) {
        if len >= self.transcript.len() {
            return;
        }
        self.transcript.truncate(len);
        let keep = self.stored_keep.map_or(len, |k| k.min(len));
        self.stored_keep = Some(keep.min(self.persisted.messages));
        self.persisted.messages = self.persisted.messages.min(len);
        for m in &mut self.transcript[self.persisted.messages..] {
            m.row_id = None;
        }
        self.last_activity_at = self
            .transcript
            .last()
            .map_or(self.started_at, |m| m.timestamp);
        self.row_dirty = true;
    }

    /// Append a message to the transcript (committed at the end of this loop iteration).
    pub fn append(&mut self, m: Message) {
        self.last_activity_at = m.timestamp;
        self.transcript.push(m);
        self.row_dirty = true;
    }
}
