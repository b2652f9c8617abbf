//! The whole gateway in this process on a fake clock, driven by a seeded random client:
//! sessions created, prompts (replies, in-process tool calls, delegations to subagents),
//! interrupts, closes, resumes, history pages, clean restarts and crashes (the gateway dropped
//! at once, a new one started from what is on disk, also in the middle of a turn), deletes of
//! stored sessions, compactions (`session.compress`), commands the policy asks about (always
//! denied, so none runs), state.db's write lock held at times by another connection (as a
//! second gateway or Hermes would), and faults the store injects at its commits (busy past the
//! wait, a full disk that fails the journal too until space is freed, damage, a slow disk that
//! takes fake time). After every step it checks what the project promises a client: every
//! request answered once, under its id, never with an internal error; every reply the client
//! saw complete is what a later resume shows (or, for a compacted session, what state.db
//! keeps), across restarts and crashes; a deleted session stays deleted; a hold on a full disk
//! ends once space is freed and its held frames go out; no subagent runs once no turn does
//! and no background delegation's result is due (each comes, as a turn of its own); a closed
//! input ends the gateway; the gateway's own tables stay whole (`Gateway::check`). A failing seed prints the line that replays it.
//!
//! Seeds: `TUIGW_SIM_SEEDS` (how many, from `TUIGW_SIM_FIRST`), one seed alone with
//! `TUIGW_SIM_SEED`; client steps per seed: `TUIGW_SIM_STEPS`; threads running seeds:
//! `TUIGW_SIM_THREADS` (every core by default).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use serde_json::{Value, json};
use tui_gateway::client::{Lines, parse_frame, request};
use tui_gateway::clock::Clock;
use tui_gateway::model::offline::OfflineProvider;
use tui_gateway::reactor::Events;
use tui_gateway::store::ErrorKind;
use tui_gateway::store::faults::{FaultHook, StoreFaults};
use tui_gateway::{Config, Gateway, Io};

/// Seeds run when `TUIGW_SIM_SEEDS` is not set.
const SEEDS_DEFAULT: u64 = 300;
/// Runs of at least this many seeds must reach every kind of step.
const COVERAGE_SEEDS: u64 = 50;
/// Client steps per seed when `TUIGW_SIM_STEPS` is not set.
const STEPS: u64 = 60;
/// Loop iterations a step may take to settle before it counts as a hang.
const SETTLE_MAX: usize = 20_000;
/// Real time a step waits for input when nothing else can wake the gateway (the end of input).
const INPUT_WAIT: Duration = Duration::from_millis(5);
/// Where the homes go when it can hold them (a tmpfs).
const SHM: &str = "/dev/shm";
/// The fake time between offline reply words: turns take fake time, so interrupts land.
const WORD_DELAY: Duration = Duration::from_millis(20);

thread_local! {
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The simulation's clock: starts at the real time once, then moves only when told.
fn fake_now() -> Instant {
    NOW.with(|n| match n.get() {
        Some(t) => t,
        None => {
            let t = Instant::now();
            n.set(Some(t));
            t
        }
    })
}

fn advance(by: Duration) {
    let t = fake_now() + by;
    NOW.with(|n| n.set(Some(t)));
}

/// A fault the store injects at its commits until a time on the fake clock.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// SQLITE_BUSY, as a lock held past the wait would.
    Busy,
    /// SQLITE_FULL, and the journal's writes fail with ENOSPC: nothing can be written.
    Full,
    /// SQLITE_CORRUPT.
    Corrupt,
    /// Each commit takes this much (fake) time and then succeeds.
    Slow(Duration),
}

/// The faults in force, shared by the world and the gateways it starts.
#[derive(Default)]
struct Faults {
    now: Mutex<Option<(Fault, Instant)>>,
}

impl Faults {
    /// The fault in force now: one whose time is up is over (the lock let go, space freed).
    fn current(&self) -> Option<Fault> {
        let mut f = self.now.lock().unwrap();
        if f.is_some_and(|(_, until)| fake_now() >= until) {
            *f = None;
        }
        f.map(|(fault, _)| fault)
    }
    fn set(&self, fault: Option<(Fault, Instant)>) {
        *self.now.lock().unwrap() = fault;
    }
}

impl StoreFaults for Faults {
    fn commit(&self) -> Option<ErrorKind> {
        match self.current()? {
            Fault::Busy => Some(ErrorKind::Busy),
            Fault::Full => Some(ErrorKind::Full),
            Fault::Corrupt => Some(ErrorKind::Corrupt),
            Fault::Slow(d) => {
                advance(d);
                None
            }
        }
    }
    fn journal_full(&self) -> bool {
        self.current() == Some(Fault::Full)
    }
}

/// The harmless command the policy asks about (it decodes to `true`): the workload only ever
/// denies it, and it would do nothing if it ran.
const ASKED_COMMAND: &str = "echo dHJ1ZQo= | base64 -d | sh";

/// xorshift64*: the one source of the workload's choices.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One gateway "process": its loop, its input held open, its output read back.
struct Running {
    gateway: Option<Gateway>,
    events: Events,
    input: Option<OwnedFd>,
    output: Lines<File>,
}

impl Running {
    fn start(home: &Path, faults: &Arc<Faults>) -> Running {
        let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).expect("a pipe");
        let (input_read, input_write) = pipe();
        let (output_read, output_write) = pipe();
        let cfg = Config {
            home: home.to_path_buf(),
            handle_signals: false,
            offline_word_delay: WORD_DELAY,
            // Durability across a clean exit needs no fsync; a power cut is not simulated.
            synchronous: "OFF".into(),
            store_faults: Some(FaultHook(faults.clone())),
            ..Config::default()
        };
        let io = Io {
            input: input_read,
            output: output_write,
        };
        let mut gateway =
            Gateway::with_clock(cfg, io, Clock::from_fn(fake_now)).expect("the gateway starts");
        gateway.set_provider(Box::new(OfflineProvider::new(WORD_DELAY)));
        Running {
            gateway: Some(gateway),
            events: Events::with_capacity(256),
            input: Some(input_write),
            output: Lines::new(File::from(output_read)),
        }
    }

    /// One iteration, waiting at most `wait` (real time) for input; the frames it wrote.
    /// `Some(code)` once it exited.
    fn step(&mut self, frames: &mut Vec<Value>, wait: Duration) -> Option<i32> {
        let mut exited = None;
        if let Some(g) = self.gateway.as_mut()
            && let Some(code) = g.step(&mut self.events, Some(wait))
        {
            exited = Some(code);
            self.gateway = None;
        }
        loop {
            while let Some(line) = self.output.buffered_line() {
                frames.extend(parse_frame(line));
            }
            if self.output.at_eof() || !matches!(self.output.fill(Instant::now()), Ok(true)) {
                break;
            }
        }
        exited
    }
}

/// What the client knows, and checks the gateway against.
struct Client {
    next_id: u64,
    /// Requests sent and not answered yet: id → method.
    waiting: HashMap<String, String>,
    /// Live sessions: runtime id → stored id.
    live: BTreeMap<String, String>,
    /// Sessions with a turn running (seen `message.start`, no `message.complete` yet).
    busy: BTreeMap<String, ()>,
    /// Every reply seen complete, by stored session: the user's prompt and the reply's text.
    seen: BTreeMap<String, Vec<(String, String)>>,
    /// The prompt each live session's running turn answers.
    asked: HashMap<String, String>,
    /// Answers to check once they come: id → what they must show.
    expect: HashMap<String, Expect>,
    /// Every stored session made, compacted ones and deleted ones aside.
    stored: BTreeSet<String>,
    /// Stored sessions deleted: no resume finds them again.
    deleted: BTreeSet<String>,
    /// Exchanges seen complete in sessions since compacted (resumed as their continuation):
    /// state.db keeps them.
    compacted: BTreeMap<String, Vec<(String, String)>>,
    /// Live sessions with an approval asked and not answered yet.
    asking: BTreeSet<String>,
    /// Live sessions told their output is held (a full disk), not yet told it is saved again.
    held: BTreeSet<String>,
    /// Live sessions' delegations running in the background (answered `dispatched`, their
    /// combined result not yet arrived): how many each.
    delegating: BTreeMap<String, usize>,
}

enum Expect {
    /// A resume or history of this stored session: every exchange seen complete is shown.
    Shows(String),
    /// A create: the runtime and stored ids go in `live`.
    Created,
    /// `delegation.status` with no turn running and no delegation's result due: no subagent
    /// may be active.
    NoSubagents,
    /// A delete of this stored session.
    Deleted(String),
    /// A resume of a deleted session: refused.
    Gone(String),
    /// A compaction of this live session.
    Compressed(String),
}

/// What a seed's workload did, so a run that checked nothing fails.
#[derive(Default, Debug)]
struct Covered {
    exchanges_seen: usize,
    exchanges_checked: usize,
    interrupts: usize,
    restarts: usize,
    crashes: usize,
    tool_calls: usize,
    subagents_ended: usize,
    /// Times another connection took state.db's write lock.
    store_locks: usize,
    /// Faults the store was told to inject, and holds (a full disk) seen to end.
    faults: usize,
    holds_ended: usize,
    crashes_mid_turn: usize,
    deletes: usize,
    compactions: usize,
    approvals_denied: usize,
}

impl Covered {
    fn add(&mut self, c: &Covered) {
        self.exchanges_seen += c.exchanges_seen;
        self.exchanges_checked += c.exchanges_checked;
        self.interrupts += c.interrupts;
        self.restarts += c.restarts;
        self.crashes += c.crashes;
        self.tool_calls += c.tool_calls;
        self.subagents_ended += c.subagents_ended;
        self.store_locks += c.store_locks;
        self.faults += c.faults;
        self.holds_ended += c.holds_ended;
        self.crashes_mid_turn += c.crashes_mid_turn;
        self.deletes += c.deletes;
        self.compactions += c.compactions;
        self.approvals_denied += c.approvals_denied;
    }
}

struct World {
    seed: u64,
    covered: Covered,
    rng: Rng,
    home: PathBuf,
    run: Running,
    client: Client,
    log: Vec<String>,
    /// Another connection holding state.db's write lock (an open `BEGIN IMMEDIATE`).
    store_lock: Option<rusqlite::Connection>,
    faults: Arc<Faults>,
    /// Crash after this many more loop iterations that wrote frames (a crash mid-turn).
    crash_in: Option<usize>,
}

impl World {
    fn new(seed: u64) -> World {
        let name = format!(
            "tuigw-sim-{}-{seed}-{}",
            std::process::id(),
            tui_gateway::util::random_hex(4)
        );
        // In memory where there is a tmpfs: the journal's and the folders' fsyncs cost
        // nothing there, and a power cut is not what the sim simulates.
        let home = [Path::new(SHM), &std::env::temp_dir()]
            .iter()
            .map(|root| root.join(&name))
            .find(|home| std::fs::create_dir_all(home).is_ok())
            .expect("a folder for the home");
        let faults = Arc::new(Faults::default());
        let run = Running::start(&home, &faults);
        World {
            seed,
            covered: Covered::default(),
            rng: Rng::new(seed),
            home,
            run,
            client: Client {
                next_id: 0,
                waiting: HashMap::new(),
                live: BTreeMap::new(),
                busy: BTreeMap::new(),
                seen: BTreeMap::new(),
                asked: HashMap::new(),
                expect: HashMap::new(),
                stored: BTreeSet::new(),
                deleted: BTreeSet::new(),
                compacted: BTreeMap::new(),
                asking: BTreeSet::new(),
                held: BTreeSet::new(),
                delegating: BTreeMap::new(),
            },
            log: Vec::new(),
            store_lock: None,
            faults,
            crash_in: None,
        }
    }

    /// Take state.db's write lock from another connection, or give it back.
    fn toggle_store_lock(&mut self) {
        match self.store_lock.take() {
            Some(c) => {
                self.log.push("store unlocked".into());
                c.execute_batch("ROLLBACK").expect("the lock is given back");
            }
            None => {
                self.log.push("store locked".into());
                self.covered.store_locks += 1;
                let c =
                    rusqlite::Connection::open(self.home.join("state.db")).expect("state.db opens");
                c.execute_batch("BEGIN IMMEDIATE")
                    .expect("the write lock is free");
                self.store_lock = Some(c);
            }
        }
    }

    /// A gateway starting waits for the lock (on the clock, which stands still here): the
    /// lock is given back first.
    fn unlock_store(&mut self) {
        if self.store_lock.is_some() {
            self.toggle_store_lock();
        }
    }

    fn fail(&self, why: &str) -> ! {
        panic!(
            "sim seed {} failed: {why}\nsteps:\n  {}\nreplay: TUIGW_SIM_SEED={}{} cargo test --release --test blackbox sim::",
            self.seed,
            self.log.join("\n  "),
            self.seed,
            env_u64("TUIGW_SIM_STEPS").map_or(String::new(), |n| format!(" TUIGW_SIM_STEPS={n}"))
        );
    }

    fn send(&mut self, method: &str, params: Value) -> String {
        self.client.next_id += 1;
        let id = format!("s{}", self.client.next_id);
        self.log.push(format!("{id} {method} {params}"));
        self.client.waiting.insert(id.clone(), method.to_string());
        let frame = request(&Value::String(id.clone()), method, params);
        if let Some(g) = self.run.gateway.as_mut() {
            g.handle_frame(frame.to_string().as_bytes());
        }
        id
    }

    /// One loop iteration, its frames taken in: whether there were any, and the exit status
    /// once the gateway exited.
    fn step_once(&mut self) -> (bool, Option<i32>) {
        self.step_waiting(Duration::ZERO)
    }

    /// [`World::step_once`], the poll waiting up to `wait` of real time for input.
    fn step_waiting(&mut self, wait: Duration) -> (bool, Option<i32>) {
        let mut frames = Vec::new();
        let exited = self.run.step(&mut frames, wait);
        if let Some(Err(why)) = self.run.gateway.as_ref().map(Gateway::check) {
            self.fail(&format!("the gateway's tables are not whole: {why}"));
        }
        let got = !frames.is_empty();
        for f in frames {
            self.on_frame(f);
        }
        (got, exited)
    }

    /// Run the loop until nothing is left to do now, moving the fake clock to each wake-up.
    fn settle(&mut self) {
        let mut quiet = 0;
        for _ in 0..SETTLE_MAX {
            let (got, exited) = self.step_once();
            if let Some(code) = exited {
                self.fail(&format!(
                    "the gateway exited ({code}) while its input was open"
                ));
            }
            self.deny_asked();
            if got {
                quiet = 0;
                match self.crash_in {
                    Some(0) => {
                        self.crash_in = None;
                        self.covered.crashes_mid_turn += 1;
                        self.crash();
                    }
                    Some(n) => self.crash_in = Some(n - 1),
                    None => {}
                }
                continue;
            }
            let wake = self.run.gateway.as_mut().and_then(Gateway::next_wake);
            match wake {
                Some(d) if d.is_zero() => quiet = 0,
                Some(d) => {
                    // Timers far off (the reaper, flush ticks) are not worth waiting for.
                    if self.client.waiting.is_empty() && self.quiet_sessions() {
                        return;
                    }
                    advance(d.min(Duration::from_secs(1)));
                }
                None => {
                    quiet += 1;
                    if quiet > 2 {
                        if self.quiet_sessions() && self.client.waiting.is_empty() {
                            return;
                        }
                        self.fail(&format!(
                            "nothing to wake the loop, but {:?} unanswered, {:?} busy, {:?} delegating",
                            self.client.waiting, self.client.busy, self.client.delegating
                        ));
                    }
                }
            }
        }
        self.fail("the loop did not settle (a hang)");
    }

    fn on_frame(&mut self, f: Value) {
        if f.get("method").and_then(Value::as_str) == Some("event") {
            return self.on_event(&f["params"]);
        }
        if f.get("method").is_some() {
            // A server request (approval, clarify): the workload starts none.
            self.fail(&format!("unexpected server request {f}"));
        }
        let Some(id) = f["id"].as_str().map(str::to_string) else {
            self.fail(&format!("an answer without our id: {f}"));
        };
        let Some(method) = self.client.waiting.remove(&id) else {
            self.fail(&format!("an answer to {id} twice, or never asked: {f}"));
        };
        if let Some(e) = f.get("error") {
            if e["code"] == -32603 {
                self.fail(&format!("{method} ({id}) hit an internal error: {e}"));
            }
            self.log.push(format!("  {id} refused: {}", e["message"]));
            self.client.expect.remove(&id);
            return;
        }
        let result = &f["result"];
        match self.client.expect.remove(&id) {
            Some(Expect::Created) => {
                let rid = result["session_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let stored = result["stored_session_id"]
                    .as_str()
                    .or_else(|| result["info"]["stored_session_id"].as_str())
                    .unwrap_or_default()
                    .to_string();
                if rid.is_empty() || stored.is_empty() {
                    self.fail(&format!("session.create without ids: {result}"));
                }
                self.client.stored.insert(stored.clone());
                self.client.live.insert(rid, stored);
            }
            Some(Expect::NoSubagents)
                if result["active"].as_array().is_some_and(|a| !a.is_empty()) =>
            {
                self.fail(&format!("subagents run with no turn running: {result}"));
            }
            Some(Expect::Shows(stored)) => {
                if method == "session.resume"
                    && let Some(rid) = result["session_id"].as_str()
                {
                    self.client.live.insert(rid.to_string(), stored.clone());
                }
                self.check_shows(&stored, result);
            }
            Some(Expect::Deleted(stored)) => {
                self.covered.deletes += 1;
                self.client.stored.remove(&stored);
                self.client.seen.remove(&stored);
                self.client.deleted.insert(stored);
            }
            Some(Expect::Gone(stored)) => {
                self.fail(&format!("{stored} was deleted, yet resumes: {result}"));
            }
            Some(Expect::Compressed(rid)) => {
                if result["status"] == "compressed" {
                    self.compacted(&rid, result);
                }
            }
            Some(Expect::NoSubagents) | None => {}
        }
    }

    /// Live session `rid` goes on in a new stored session; what was seen in the old one is
    /// checked in state.db from now on (a resume of it shows the continuation).
    fn compacted(&mut self, rid: &str, result: &Value) {
        let (Some(new), Some(old)) = (
            result["session_key"].as_str(),
            result["parent_session_id"].as_str(),
        ) else {
            self.fail(&format!("session.compress without its ids: {result}"));
        };
        if self.client.live.get(rid).map(String::as_str) != Some(old) {
            self.fail(&format!(
                "{rid} compacted from {old}, not the session it was"
            ));
        }
        self.covered.compactions += 1;
        self.client.live.insert(rid.to_string(), new.to_string());
        self.client.stored.remove(old);
        self.client.stored.insert(new.to_string());
        let seen = self.client.seen.remove(old).unwrap_or_default();
        self.client
            .compacted
            .entry(old.to_string())
            .or_default()
            .extend(seen);
    }

    /// Every approval asked is denied (so no command runs).
    fn deny_asked(&mut self) {
        for rid in std::mem::take(&mut self.client.asking) {
            self.covered.approvals_denied += 1;
            self.send(
                "approval.respond",
                json!({"session_id": rid, "choice": "deny"}),
            );
        }
    }

    fn on_event(&mut self, p: &Value) {
        let rid = p["session_id"].as_str().unwrap_or_default().to_string();
        match p["type"].as_str() {
            Some("message.start") => {
                self.client.busy.insert(rid, ());
            }
            Some("tool.complete") => {
                self.covered.tool_calls += 1;
                let done = &p["payload"];
                if done["name"] == "delegate_task" && done["result"]["status"] == "dispatched" {
                    *self.client.delegating.entry(rid).or_default() += 1;
                }
            }
            Some("approval.request") => {
                self.client.asking.insert(rid);
            }
            Some("status.update") => {
                let text = p["payload"]["text"].as_str().unwrap_or_default();
                if text.starts_with("[ASYNC DELEGATION")
                    && let Some(n) = self.client.delegating.get_mut(&rid)
                {
                    *n -= 1;
                    if *n == 0 {
                        self.client.delegating.remove(&rid);
                    }
                } else if text.contains("output is held") {
                    self.client.held.insert(rid);
                } else if text.contains("saving works again") && self.client.held.remove(&rid) {
                    self.covered.holds_ended += 1;
                }
            }
            Some("subagent.complete") => self.covered.subagents_ended += 1,
            Some("message.complete") => {
                self.client.busy.remove(&rid);
                let asked = self.client.asked.remove(&rid);
                let status = p["payload"]["status"].as_str().unwrap_or("complete");
                let text = p["payload"]["text"].as_str().unwrap_or_default();
                if status == "complete"
                    && let (Some(asked), Some(stored)) = (asked, self.client.live.get(&rid))
                {
                    self.client
                        .seen
                        .entry(stored.clone())
                        .or_default()
                        .push((asked, text.to_string()));
                    self.covered.exchanges_seen += 1;
                }
            }
            _ => {}
        }
    }

    /// Every exchange the client saw complete in `stored` is in what the gateway shows.
    fn check_shows(&mut self, stored: &str, result: &Value) {
        let rows = result["messages"].as_array().cloned().unwrap_or_default();
        let texts: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r["role"].as_str().unwrap_or(""),
                    r["text"].as_str().unwrap_or(""),
                )
            })
            .collect();
        for (asked, reply) in self.client.seen.get(stored).into_iter().flatten() {
            let at = texts
                .iter()
                .position(|(role, t)| *role == "user" && t == asked);
            let replied = at.is_some_and(|i| {
                texts[i + 1..]
                    .iter()
                    .any(|(role, t)| *role == "assistant" && t == reply)
            });
            if !replied {
                self.fail(&format!(
                    "{stored} shows {texts:?}, which lacks the exchange seen complete: {asked:?} → {reply:?}"
                ));
            }
        }
        self.covered.exchanges_checked += self.client.seen.get(stored).map_or(0, Vec::len);
    }

    fn any_live(&mut self) -> Option<String> {
        let n = self.client.live.len();
        (n > 0).then(|| {
            let i = self.rng.below(n);
            self.client.live.keys().nth(i).cloned().unwrap()
        })
    }

    /// One random client action, then the loop settles and the checks run.
    fn act(&mut self) {
        if self.rng.below(8) == 0 {
            self.toggle_store_lock();
        }
        if self.rng.below(10) == 0 {
            self.inject_fault();
        }
        if self.rng.below(12) == 0 {
            self.crash_in = Some(self.rng.below(30));
        }
        match self.rng.below(10) {
            0 | 1 if self.client.live.len() < 4 => {
                let id = self.send("session.create", json!({"cols": 80}));
                self.client.expect.insert(id, Expect::Created);
            }
            2..=5 => {
                let Some(rid) = self.any_live() else { return };
                // A background delegation's result starts a turn of its own when it comes.
                if self.client.busy.contains_key(&rid)
                    || self.client.asked.contains_key(&rid)
                    || self.client.delegating.contains_key(&rid)
                {
                    return;
                }
                let words = 1 + self.rng.below(12);
                let text = match self.rng.below(6) {
                    // The policy asks; the answer is always no.
                    5 => format!("$ {ASKED_COMMAND}"),
                    0 => format!(
                        "%todo {{\"todos\": [{{\"id\": \"t{words}\", \"content\": \"task {words}\", \"status\": \"pending\"}}]}}"
                    ),
                    // Children that answer in words (their goal is their prompt), one or a batch.
                    1 => {
                        let goals: Vec<Value> = (0..1 + self.rng.below(3))
                            .map(|g| json!({"goal": format!("g{g} w{}", self.rng.below(100))}))
                            .collect();
                        format!("%delegate_task {}", json!({"tasks": goals}))
                    }
                    _ => (0..words)
                        .map(|w| format!("w{w}-{}", self.rng.below(100)))
                        .collect::<Vec<_>>()
                        .join(" "),
                };
                self.client.asked.insert(rid.clone(), text.clone());
                self.send("prompt.submit", json!({"session_id": rid, "text": text}));
                // Part of the turn goes by before the next action.
                let steps = self.rng.below(6);
                for _ in 0..steps {
                    self.step_once();
                    advance(WORD_DELAY);
                }
                if self.rng.below(3) == 0 {
                    self.covered.interrupts += 1;
                    self.send("session.interrupt", json!({"session_id": rid}));
                }
            }
            6 => {
                let Some(rid) = self.any_live() else { return };
                let stored = self.client.live[&rid].clone();
                let id = self.send("session.history", json!({"session_id": rid}));
                self.client.expect.insert(id, Expect::Shows(stored));
            }
            7 => {
                let Some(rid) = self.any_live() else { return };
                self.send("session.close", json!({"session_id": rid}));
                self.client.live.remove(&rid);
                self.client.busy.remove(&rid);
                self.client.asked.remove(&rid);
                self.client.delegating.remove(&rid);
            }
            8 => {
                let closed = self.stored_not_live();
                match self.rng.below(4) {
                    // A deleted one: refused.
                    0 if !self.client.deleted.is_empty() => {
                        let gone: Vec<String> = self.client.deleted.iter().cloned().collect();
                        let s = gone[self.rng.below(gone.len())].clone();
                        let id = self.send("session.resume", json!({"session_id": s, "cols": 80}));
                        self.client.expect.insert(id, Expect::Gone(s));
                    }
                    1 if !closed.is_empty() => {
                        let s = closed[self.rng.below(closed.len())].clone();
                        let id = self.send("session.delete", json!({"session_id": s}));
                        self.client.expect.insert(id, Expect::Deleted(s));
                    }
                    _ if !closed.is_empty() => {
                        let s = closed[self.rng.below(closed.len())].clone();
                        let id = self.send("session.resume", json!({"session_id": s, "cols": 80}));
                        self.client.expect.insert(id, Expect::Shows(s));
                    }
                    _ => return,
                }
            }
            9 if self.rng.below(3) == 0 => {
                let Some(rid) = self.any_live() else { return };
                if self.client.busy.contains_key(&rid)
                    || self.client.asked.contains_key(&rid)
                    || self.client.delegating.contains_key(&rid)
                {
                    return;
                }
                let id = self.send("session.compress", json!({"session_id": rid}));
                self.client.expect.insert(id, Expect::Compressed(rid));
            }
            9 if self.rng.below(2) == 0 => self.crash(),
            _ => self.restart(),
        }
        self.settle();
        if self.quiet_sessions() && self.run.gateway.is_some() {
            let id = self.send("delegation.status", json!({}));
            self.client.expect.insert(id, Expect::NoSubagents);
            self.settle();
            self.check_hold_ended();
        }
    }

    /// No turn runs and no delegation's result is due.
    fn quiet_sessions(&self) -> bool {
        self.client.busy.is_empty() && self.client.delegating.is_empty()
    }

    /// Stored sessions that are not live here.
    fn stored_not_live(&self) -> Vec<String> {
        (self.client.stored.iter())
            .filter(|s| !self.client.live.values().any(|l| l == *s))
            .cloned()
            .collect()
    }

    /// From now until a random (fake) time ahead, the store fails or slows its commits.
    fn inject_fault(&mut self) {
        let fault = match self.rng.below(4) {
            0 => Fault::Busy,
            1 => Fault::Full,
            2 => Fault::Corrupt,
            _ => Fault::Slow(Duration::from_millis(10 + self.rng.below(1500) as u64)),
        };
        let lasts = Duration::from_millis(self.rng.below(4000) as u64);
        self.log.push(format!("fault {fault:?} for {lasts:?}"));
        self.covered.faults += 1;
        self.faults.set(Some((fault, fake_now() + lasts)));
    }

    /// Once no fault is left, a hold (a full disk) has ended for every live session told of
    /// it: the probe just answered was held with the rest and has come out.
    fn check_hold_ended(&self) {
        if self.faults.current().is_some() {
            return;
        }
        let live: Vec<&String> = (self.client.held.iter())
            .filter(|rid| self.client.live.contains_key(*rid))
            .collect();
        if !live.is_empty() {
            self.fail(&format!(
                "space was freed and the output flowed, yet {live:?} were not told saving works again"
            ));
        }
    }

    /// The gateway is gone at once, as if killed: nothing it held in memory survives, nothing
    /// it would do at exit is done. A new one starts from what is on disk.
    fn crash(&mut self) {
        self.log.push("crash".into());
        self.covered.crashes += 1;
        self.unlock_store();
        self.forget_the_old();
        self.run = Running::start(&self.home, &self.faults);
    }

    /// What the client asked of a gateway that is gone is gone with it.
    fn forget_the_old(&mut self) {
        self.client.waiting.clear();
        self.client.expect.clear();
        self.client.live.clear();
        self.client.busy.clear();
        self.client.asked.clear();
        self.client.asking.clear();
        self.client.held.clear();
        self.client.delegating.clear();
        self.crash_in = None;
    }

    /// Close the input: the gateway finishes what it must and exits; a new one starts on the
    /// same home and every stored session still shows what was seen.
    fn restart(&mut self) {
        self.log.push("restart".into());
        self.covered.restarts += 1;
        self.unlock_store();
        self.run.input = None;
        let mut exited = None;
        // Said if it does not exit: whether it kept busy (a wake-up of zero: the fake clock
        // stood still), kept waiting for time that passed, or for its input's end.
        let (mut busy, mut moved, mut idle) = (0usize, Duration::ZERO, 0usize);
        let mut wait = Duration::ZERO;
        for _ in 0..SETTLE_MAX {
            exited = self.step_waiting(wait).1;
            if exited.is_some() {
                break;
            }
            wait = Duration::ZERO;
            match self.run.gateway.as_mut().and_then(Gateway::next_wake) {
                // Only its input can wake it: the end of input is real I/O, which a process
                // another test forks meanwhile can hold back (it shares the pipe until its exec).
                None => {
                    idle += 1;
                    wait = INPUT_WAIT;
                }
                Some(wake) => {
                    busy += usize::from(wake.is_zero());
                    let step = wake.min(Duration::from_secs(1));
                    moved += step;
                    advance(step);
                }
            }
        }
        match exited {
            Some(0) => {}
            Some(code) => self.fail(&format!("the gateway exited {code} at the end of input")),
            None => self.fail(&format!(
                "the gateway did not exit at the end of its input ({SETTLE_MAX} steps, {busy} of them busy, {idle} waiting for input, {moved:?} of fake time)"
            )),
        }
        self.forget_the_old();
        self.run = Running::start(&self.home, &self.faults);
    }
}

impl World {
    /// Every exchange seen in a session since compacted is in state.db, as its rows.
    fn check_compacted(&mut self) {
        if self.client.compacted.is_empty() {
            return;
        }
        let db = rusqlite::Connection::open_with_flags(
            self.home.join("state.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("state.db opens");
        for (stored, seen) in self.client.compacted.clone() {
            let rows: Vec<(String, String)> = db
                .prepare("SELECT role, coalesce(content, '') FROM messages WHERE session_id = ?1 ORDER BY id")
                .and_then(|mut q| {
                    q.query_map([&stored], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect()
                })
                .expect("the messages read");
            for (asked, reply) in &seen {
                let at = rows
                    .iter()
                    .position(|(role, t)| role == "user" && t == asked);
                let kept = at.is_some_and(|i| {
                    rows[i + 1..]
                        .iter()
                        .any(|(role, t)| role == "assistant" && t == reply)
                });
                if !kept {
                    self.fail(&format!(
                        "compacted {stored} lacks in state.db the exchange seen complete: {asked:?} → {reply:?}; it has {rows:?}"
                    ));
                }
                self.covered.exchanges_checked += 1;
            }
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // The gateway closes its files before its home goes.
        self.run.gateway = None;
        // Only the home this world made.
        if (self.home.starts_with(std::env::temp_dir()) || self.home.starts_with(SHM))
            && self.home.to_string_lossy().contains("tuigw-sim-")
        {
            let _ = std::fs::remove_dir_all(&self.home);
        }
    }
}

fn run_seed(seed: u64, total: &mut Covered) {
    let mut w = World::new(seed);
    w.settle();
    for _ in 0..env_u64("TUIGW_SIM_STEPS").unwrap_or(STEPS) {
        w.act();
    }
    // At the end, everything seen is shown by a fresh gateway on a store without faults.
    w.faults.set(None);
    w.restart();
    let stored: Vec<String> = w.client.seen.keys().cloned().collect();
    for s in stored {
        let id = w.send("session.resume", json!({"session_id": s, "cols": 80}));
        w.client.expect.insert(id, Expect::Shows(s));
        w.settle();
    }
    w.check_compacted();
    total.add(&w.covered);
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn random_workloads_keep_every_promise() {
    let seeds = match env_u64("TUIGW_SIM_SEED") {
        Some(seed) => seed..seed + 1,
        None => {
            let first = env_u64("TUIGW_SIM_FIRST").unwrap_or(1);
            first..first + env_u64("TUIGW_SIM_SEEDS").unwrap_or(SEEDS_DEFAULT)
        }
    };
    let many = seeds.end - seeds.start >= COVERAGE_SEEDS;
    let started = Instant::now();
    let n = seeds.end - seeds.start;
    // Seeds are independent worlds (own home, own gateway, own fake clock per thread): they run
    // on every core, a thread taking the next seed as it finishes one; the first failure stops
    // the others from starting more.
    let threads = env_u64("TUIGW_SIM_THREADS")
        .map(|t| t.max(1) as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()))
        .min(n.max(1) as usize);
    let next = std::sync::atomic::AtomicU64::new(seeds.start);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let total = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut covered = Covered::default();
                    while !failed.load(std::sync::atomic::Ordering::Relaxed) {
                        let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if seed >= seeds.end {
                            break;
                        }
                        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            run_seed(seed, &mut covered)
                        }));
                        if let Err(panic) = ran {
                            failed.store(true, std::sync::atomic::Ordering::Relaxed);
                            std::panic::resume_unwind(panic);
                        }
                    }
                    covered
                })
            })
            .collect();
        let mut total = Covered::default();
        for worker in workers {
            match worker.join() {
                Ok(c) => total.add(&c),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        total
    });
    let took = started.elapsed();
    eprintln!(
        "[sim] {n} seeds in {took:.1?} ({:.0} seeds/s): {total:?}",
        n as f64 / took.as_secs_f64()
    );
    // The workload reached what it is there to check (a replay of one seed need not).
    assert!(
        !many
            || total.exchanges_checked > 0
                && total.restarts > 0
                && total.crashes > 0
                && total.interrupts > 0
                && total.subagents_ended > 0
                && total.store_locks > 0
                && total.faults > 0
                && total.crashes_mid_turn > 0
                && total.approvals_denied > 0
                && total.holds_ended > 0
                && total.deletes > 0
                && total.compactions > 0,
        "the workload checked nothing: {total:?}"
    );
}
