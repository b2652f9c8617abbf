//! A live session: its transcript, its stored row's state, its event ring and its turn.

pub(crate) mod calls;
pub mod compaction;
pub(crate) mod driver;
pub mod leases;
pub mod machine;
pub mod naming;
pub(crate) mod older;
pub mod ring;
mod stored;
pub mod subagent;
pub mod system_prompt;
pub mod table;
pub mod title;
pub mod turn;

use std::collections::VecDeque;
use std::time::Instant;

use serde_json::{Value, json};

use crate::rpc::{Outbox, frame};
use transcript::Message;
use turn::Turn;

pub use crate::VERSION;
pub use crate::transcript;
pub use crate::transcript::STEER_PREFIX;

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
    /// The provider's endpoint (Hermes' `billing_base_url`; empty for the offline model).
    pub base_url: String,
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
    /// Cache and reasoning tokens, cost (Hermes' accounting columns).
    pub accounting: crate::model::Accounting,
    /// The figures `session_model_usage` holds of this session's calls, as of the last commit.
    pub usage_committed: crate::store::Usage,
    /// How long this live session's model calls were in flight (not stored).
    pub model_time: std::time::Duration,
    pub tool_call_count: u64,
    /// Tokens the last model call was sent: what the context window holds now (0 before any).
    pub context_used: u64,
    /// The model's context window in tokens.
    pub context_max: u64,
    /// Times this live session's older turns were summarised into a continuation.
    pub compressions: u64,
    /// Last event sequence number used.
    pub seq: u64,
    /// Recent events for `session.events.since`, bounded in bytes.
    pub ring: ring::EventRing,
    pub turn: Option<Turn>,
    /// Prompts submitted while a turn ran; each runs after it. Committed with the session
    /// (`tui_gateway_queue`) so an acknowledged prompt survives a crash.
    pub queued: VecDeque<String>,
    /// Images attached (`image.attach`, `clipboard.paste`) for the next prompt: their paths.
    pub attached_images: Vec<std::path::PathBuf>,
    /// Prompts waiting for their images (`methods::images`), as kept if they never run (each
    /// image named as not sent): stored with the queue, so a SIGKILL keeps them too.
    pub images_waiting: Vec<String>,
    /// The user was told this session's model gets images as a note, not their pixels.
    pub told_no_vision: bool,
    /// `queued` (or `background_delegations`) changed since the last commit.
    pub queue_dirty: bool,
    /// Dangerous-command rules the user approved for this session.
    pub approved_rules: Vec<String>,
    /// `/yolo`: dangerous commands run without asking (refused ones stay refused).
    pub yolo: bool,
    /// `/reasoning LEVEL` for this session (`None`: config.yaml's or the default).
    pub reasoning_effort: Option<String>,
    /// `/fast`: its model calls ask for the model's fast service (`model/fast.rs`); it starts
    /// as config.yaml's `agent.service_tier` says.
    pub fast: bool,
    /// `/verbose` mode of this session (`off|new|all|verbose`; `None`: config.yaml's).
    pub tool_progress: Option<String>,
    /// The stored session this one branched or was compacted from (`parent_session_id`).
    pub parent_session_id: Option<String>,
    /// Undo shortened the transcript: only this many stored rows stay (the rest are deleted
    /// by the next commit).
    pub stored_keep: Option<usize>,
    /// A `prompt.background` task: its answer goes to the parent as `background.complete`.
    pub background: Option<Background>,
    /// The system prompt, built at the session's first model call in this process.
    pub system_prompt: Option<String>,
    /// The skills' generation the system prompt's index was built from (a change rebuilds it).
    pub prompt_generation: u64,
    /// The skills `HERMES_TUI_SKILLS` preloads, for the system prompt (empty: none).
    pub preloaded_skills: String,
    /// Resumed: the messages before `transcript` still being read from state.db (`older.rs`).
    pub older: Option<older::Older>,
    /// Its place under Hermes' cap on open sessions (`leases.rs`), given back when dropped.
    pub lease: Option<leases::Lease>,
    /// The personality chosen in this session (`/personality`): the system prompt's last
    /// part in place of config.yaml's `agent.system_prompt` (`Some("")`: cleared).
    pub overlay: Option<String>,
    /// A subagent: the `delegate_task` call it works for, and what its parent's client heard.
    pub delegated: Option<subagent::Delegated>,
    /// What its ended subagents used (in memory: each child's own row holds its figures).
    pub subagents: subagent::Rollup,
    /// Its `delegate_task` calls whose children still run in the background (their count is
    /// Hermes' `usage.active_subagents`, which the TUI shows as `⛓ N` and "resumes when…").
    /// Committed with the queue (`queue_dirty`), so a kill cannot leave one unreported.
    pub background_delegations: Vec<subagent::Awaited>,
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
    pub base_url: String,
    pub cwd: String,
    pub source: String,
    pub started_at: f64,
    pub cols: u64,
    pub context_max: u64,
    /// Fast mode (`/fast`) on for its model calls.
    pub fast: bool,
}

impl Session {
    pub fn new(n: NewSession, now: Instant) -> Self {
        Session {
            runtime_id: n.runtime_id,
            stored_id: n.stored_id,
            title: n.title,
            model: n.model,
            provider: n.provider,
            base_url: n.base_url,
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
            accounting: Default::default(),
            usage_committed: Default::default(),
            model_time: Default::default(),
            tool_call_count: 0,
            context_used: 0,
            context_max: n.context_max,
            compressions: 0,
            seq: 0,
            ring: ring::EventRing::default(),
            turn: None,
            queued: VecDeque::new(),
            attached_images: Vec::new(),
            images_waiting: Vec::new(),
            told_no_vision: false,
            queue_dirty: false,
            approved_rules: Vec::new(),
            yolo: false,
            reasoning_effort: None,
            fast: n.fast,
            tool_progress: None,
            parent_session_id: None,
            stored_keep: None,
            background: None,
            system_prompt: None,
            prompt_generation: 0,
            preloaded_skills: String::new(),
            older: None,
            lease: None,
            overlay: None,
            delegated: None,
            subagents: Default::default(),
            background_delegations: Vec::new(),
        }
    }

    /// A new session that runs like this one (model, provider, cwd, source, width, window),
    /// with its own ids: a branch, a background task, a compacted session's stored half.
    pub fn like(
        &self,
        runtime_id: String,
        stored_id: String,
        title: Option<String>,
        started_at: f64,
        now: Instant,
    ) -> Session {
        Session::new(
            NewSession {
                runtime_id,
                stored_id,
                title,
                model: self.model.clone(),
                provider: self.provider.clone(),
                base_url: self.base_url.clone(),
                cwd: self.cwd.clone(),
                source: self.source.clone(),
                started_at,
                cols: self.cols,
                context_max: self.context_max,
                fast: self.fast,
            },
            now,
        )
    }

    pub fn running(&self) -> bool {
        self.turn.is_some()
    }

    /// Older messages are still being read: no turn may start (`older.rs`).
    pub fn loading(&self) -> bool {
        self.older.is_some()
    }

    /// The session's messages, those still being read from state.db included.
    pub fn message_total(&self) -> usize {
        self.older.as_ref().map_or(0, older::Older::count) + self.transcript.len()
    }

    /// The TUI's word for what the session is doing: `idle`, `waiting` (on an approval) or
    /// `working`.
    pub fn status_word(&self) -> &'static str {
        match &self.turn {
            None => "idle",
            Some(t) if t.machine.awaiting_approval() => "waiting",
            Some(_) => "working",
        }
    }

    /// Whether memory holds anything the store has not committed.
    pub fn unpersisted(&self) -> bool {
        !self.persisted.row
            || self.row_dirty
            || self.queue_dirty
            || self.stored_keep.is_some()
            || self.persisted.messages < self.transcript.len()
    }

    /// Flat usage figures, as the TUI's status bar and `/usage` read them.
    pub fn usage(&self) -> Value {
        let mut u = json!({
            "model": self.model,
            "input": self.input_tokens,
            "output": self.output_tokens,
            "prompt": self.input_tokens,
            "completion": self.output_tokens,
            "reasoning": self.accounting.reasoning_tokens,
            "cache_read": self.accounting.cache_read_tokens,
            "cache_write": self.accounting.cache_write_tokens,
            "cost_usd": self.accounting.cost_usd,
            "cost_status": self.accounting.cost_status.as_str(),
            "cost_source": self.accounting.cost_source.as_str(),
            "total": self.input_tokens + self.output_tokens,
            "calls": self.model_calls,
            "model_ms": self.model_time.as_millis() as u64,
            "compressions": self.compressions,
            "active_subagents": self.background_delegations.len(),
        });
        // Hermes folds its children's cost into the session's; ours stays the session's own
        // (what its stored row holds) and the rolled-up figures come beside it.
        if self.subagents.count > 0 {
            u["subagents"] = self.subagents.json();
            let total = match (self.accounting.cost_usd, self.subagents.cost_usd) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            };
            u["total_cost_usd"] = json!(total);
        }
        if self.context_max > 0 {
            u["context_used"] = json!(self.context_used);
            u["context_max"] = json!(self.context_max);
            let pct = (self.context_used as f64 / self.context_max as f64 * 100.0).round();
            u["context_percent"] = json!(pct.clamp(0.0, 100.0) as u64);
        }
        u
    }

    /// Everything the TUI's banner and status bar show about the session.
    /// `mcp_servers`: each MCP server's state (`mcp::status`).
    /// `skills`: `{category: [names]}` of the skills offered.
    pub fn info(&self, toolsets: Value, skills: Value, mcp_servers: Value) -> Value {
        json!({
            "model": self.model,
            "provider": self.provider,
            "cwd": self.cwd,
            "title": self.title,
            "running": self.running(),
            "usage": self.usage(),
            "tools": toolsets,
            "skills": skills,
            "mcp_servers": mcp_servers,
            "stored_session_id": self.stored_id,
            "session_id": self.runtime_id,
            "version": VERSION,
            "reasoning_effort": self.reasoning_effort.as_deref().unwrap_or(""),
            "fast": self.fast,
            "service_tier": if self.fast { json!("priority") } else { Value::Null },
            "yolo": self.yolo,
            "approval_mode": if self.yolo { "off" } else { "manual" },
        })
    }

    /// First user text, clipped, for lists.
    pub fn preview(&self) -> String {
        self.transcript
            .iter()
            .find(|m| m.role == transcript::Role::User)
            .and_then(|m| m.content.as_deref())
            .map(|t| crate::util::clip(&transcript::plain_text(t), 60))
            .unwrap_or_default()
    }

    /// Say an event of this session: the next seq, into the ring (within `rings`' caps), out.
    pub fn emit(
        &mut self,
        out: &mut dyn Outbox,
        kind: &str,
        payload: &Value,
        rings: &mut ring::Rings,
    ) {
        let seq = self.next_seq();
        let params = frame::event_params(kind, &self.runtime_id, payload, Some(seq));
        self.ring.push(rings, seq, &params);
        out.event(&self.runtime_id, &params);
        // A turn's end: its transcript is stored, so its streamed events need not all stay.
        if kind == "message.complete" {
            self.ring.settle(rings);
        }
    }

    /// [`Session::emit`] for a `message.delta`, which the outbox may merge with the one before.
    pub fn emit_delta(&mut self, out: &mut dyn Outbox, text: &str, rings: &mut ring::Rings) {
        let seq = self.next_seq();
        let payload = json!({ "text": text });
        let params = frame::event_params("message.delta", &self.runtime_id, &payload, Some(seq));
        self.ring.push(rings, seq, &params);
        out.delta(&self.runtime_id, seq, text);
    }

    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Steering texts accepted and not yet given to the model, as the notes they become.
    pub fn steer_notes(&self) -> Vec<String> {
        self.turn
            .as_ref()
            .map(|t| {
                t.steer
                    .iter()
                    .map(|x| format!("{STEER_PREFIX}{x}"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Everything acknowledged and not yet in the transcript, in the order it will enter it:
    /// steering notes, queued prompts, then prompts waiting for their images. Stored
    /// (`tui_gateway_queue`) so a crash keeps it.
    pub fn pending_texts(&self) -> Vec<String> {
        let mut all = self.steer_notes();
        all.extend(self.queued.iter().cloned());
        all.extend(self.images_waiting.iter().cloned());
        all
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

    /// Count one model call it made: tokens, price, the call (stored with the next commit).
    pub fn count_call(&mut self, usage: &crate::model::TokenUsage) {
        self.input_tokens += usage.input;
        let cost = crate::model::pricing::price(&self.provider, &self.base_url, &self.model, usage);
        self.accounting.add(usage, &cost);
        self.output_tokens += usage.output;
        self.model_calls += 1;
        self.row_dirty = true;
    }

    /// This session's figures as `session_model_usage` sums them.
    pub fn usage_totals(&self) -> crate::store::Usage {
        let a = &self.accounting;
        crate::store::Usage {
            api_calls: self.model_calls as i64,
            input: self.input_tokens as i64,
            output: self.output_tokens as i64,
            cache_read: a.cache_read_tokens as i64,
            cache_write: a.cache_write_tokens as i64,
            reasoning: a.reasoning_tokens as i64,
            cost_usd: a.cost_usd.unwrap_or(0.0),
            actual_cost_usd: a.actual_cost_usd.unwrap_or(0.0),
        }
    }

    pub fn append(&mut self, mut m: Message) {
        self.last_activity_at = m.timestamp;
        // Text streamed into a growing buffer keeps up to twice its length: kept, it costs that.
        if let Some(text) = m.content.as_mut() {
            text.shrink_to_fit();
        }
        self.transcript.push(m);
        self.row_dirty = true;
    }
}

/// A session with nothing in it, for unit tests of the code that holds sessions.
#[cfg(test)]
pub(crate) fn bare_session(rid: &str, stored: &str) -> Session {
    Session::new(
        NewSession {
            runtime_id: rid.into(),
            stored_id: stored.into(),
            title: None,
            model: "m".into(),
            provider: "offline".into(),
            base_url: String::new(),
            cwd: "/".into(),
            source: "tui".into(),
            started_at: 1.0,
            cols: 80,
            context_max: 1000,
            fast: false,
        },
        Instant::now(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        bare_session("r", "s")
    }

    #[test]
    fn usage_is_flat_with_a_context_gauge() {
        let mut s = session();
        s.input_tokens = 300;
        s.output_tokens = 20;
        s.model_calls = 2;
        s.context_used = 155;
        let u = s.usage();
        assert_eq!(u["total"], 320);
        assert_eq!(u["calls"], 2);
        assert_eq!(u["context_used"], 155);
        assert_eq!(u["context_max"], 1000);
        assert_eq!(u["context_percent"], 16);
    }

    #[test]
    fn info_carries_what_the_banner_reads() {
        let info = session().info(
            crate::tools::ToolSet::builtin().toolsets(),
            json!({}),
            json!([]),
        );
        for k in ["tools", "skills"] {
            assert!(info[k].is_object(), "{k}: {info}");
        }
        assert!(info["mcp_servers"].is_array());
        assert_eq!(info["usage"]["calls"], 0);
    }

    #[test]
    fn status_words_are_the_tuis() {
        assert_eq!(session().status_word(), "idle");
    }

    #[test]
    fn events_go_out_numbered_and_the_ring_keeps_the_last_ones() {
        let mut s = session();
        let mut out = crate::rpc::outbox::FakeOutbox::default();
        let mut rings = ring::Rings::new(1 << 20, 1 << 20, 1 << 20);
        s.emit(&mut out, "a", &json!({"n": 1}), &mut rings);
        s.emit_delta(&mut out, "hi", &mut rings);
        s.emit(&mut out, "b", &json!({}), &mut rings);
        let events = out.events();
        let seqs: Vec<_> = events.iter().map(|e| e["seq"].as_u64()).collect();
        assert_eq!(seqs, vec![Some(1), Some(2), Some(3)]);
        assert_eq!(events[0]["session_id"], "r");
        assert_eq!(events[1]["type"], "message.delta");
        assert_eq!(events[1]["payload"]["text"], "hi");
        // The ring holds what a reconnecting client replays: the same params.
        let since = s.ring.since(1);
        assert!(!since.truncated);
        let replayed: Vec<Value> = since
            .events
            .iter()
            .map(|p| serde_json::from_str(p).unwrap())
            .collect();
        assert_eq!(replayed.iter().collect::<Vec<_>>(), events[1..]);
    }
}
