//! In-process dispatch: a `ping` through `Gateway::handle_frame`, a `ping` through the loop's
//! pipes, and a whole turn on the offline model (read `prompt.submit` from the input pipe, run the
//! turn, commit its messages to `state.db`, write every frame through the output pipe until
//! `message.complete`): the gateway's overhead per turn. And subagents: a turn whose one tool
//! call delegates to one child, through the turn its result starts (against the same turn with a
//! `todo` call in its place: the difference is what a child and its result's turn add), and 50
//! children of one call against 50 sessions' turns at once.
//!
//! ```text
//! cargo bench --bench dispatch -- --warm-up-time 1 --measurement-time 3
//! ```

mod common;

use std::hint::black_box;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mio::Events;
use serde_json::{Value, json};
use tui_gateway::{Config, Gateway, Io};

use common::TempDir;
use tui_gateway::client::request;

/// Turns per session before the bench moves to a fresh one: the offline model counts the words
/// of the whole transcript per call, so a session that grows without bound would slowly change
/// what is measured. 50 turns = 100 messages, a realistic conversation.
const TURNS_PER_SESSION: usize = 50;

/// A gateway in this process, its input and output being pipes the bench holds the other end of.
struct InProcess {
    gw: Gateway,
    events: Events,
    /// Write end of the gateway's input.
    input: OwnedFd,
    /// Read end of the gateway's output (non-blocking).
    output: OwnedFd,
    /// Output read and not yet consumed.
    buf: Vec<u8>,
    next_id: u64,
    _home: TempDir,
}

fn set_nonblocking(fd: &OwnedFd) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(fd, FcntlArg::F_GETFL).expect("F_GETFL");
    fcntl(
        fd,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .expect("F_SETFL");
}

/// Where `needle` starts in `haystack` (a first-byte check keeps this cheap: it runs inside the
/// timed region).
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|w| w[0] == needle[0] && w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

impl InProcess {
    fn new() -> InProcess {
        InProcess::with_config("")
    }

    /// A gateway whose home's config.yaml is `config_yaml`.
    fn with_config(config_yaml: &str) -> InProcess {
        let home = TempDir::new("dispatch");
        if !config_yaml.is_empty() {
            let path = home.path().join("config.yaml");
            tui_gateway::private_file::replace_private(&path, config_yaml.as_bytes())
                .expect("config.yaml");
        }
        let cfg = Config {
            home: home.path().to_path_buf(),
            handle_signals: false,
            ..Config::default()
        };
        let (in_r, in_w) = nix::unistd::pipe().expect("pipe");
        let (out_r, out_w) = nix::unistd::pipe().expect("pipe");
        set_nonblocking(&out_r);
        let gw = Gateway::new(
            cfg,
            Io {
                input: in_r,
                output: out_w,
            },
        )
        .expect("gateway");
        let mut this = InProcess {
            gw,
            events: Events::with_capacity(256),
            input: in_w,
            output: out_r,
            buf: Vec::with_capacity(1 << 16),
            next_id: 0,
            _home: home,
        };
        this.read_output();
        assert!(contains(&this.buf, b"gateway.ready"), "no gateway.ready");
        this.buf.clear();
        this
    }

    /// Writes one line (plus newline) into the gateway's input.
    fn write_line(&mut self, line: &[u8]) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line);
        bytes.push(b'\n');
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = nix::unistd::write(&self.input, rest).expect("write to the gateway's input");
            rest = &rest[n..];
        }
    }

    /// Appends whatever the gateway has written to `buf`.
    fn read_output(&mut self) {
        let mut chunk = [0u8; 1 << 16];
        loop {
            match nix::unistd::read(&self.output, &mut chunk) {
                Ok(0) | Err(nix::errno::Errno::EAGAIN) => return,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => panic!("read of the gateway's output failed: {e}"),
            }
        }
    }

    /// One loop iteration (never waits longer than 10 ms), then collect its output.
    fn step(&mut self) {
        if let Some(code) = self
            .gw
            .step(&mut self.events, Some(Duration::from_millis(10)))
        {
            panic!("the gateway exited ({code})");
        }
        self.read_output();
    }

    /// Steps until the output holds a complete line containing `needle` (it may hold one
    /// already); returns its end offset.
    fn step_until(&mut self, needle: &[u8]) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut searched = 0usize;
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                self.step();
            }
            let from = searched.saturating_sub(needle.len());
            if let Some(at) = find(&self.buf[from..], needle)
                && let Some(nl) = self.buf[from + at..].iter().position(|&b| b == b'\n')
            {
                return from + at + nl + 1;
            }
            searched = self.buf.len();
            assert!(
                Instant::now() < deadline,
                "no {} within 10 s",
                String::from_utf8_lossy(needle)
            );
        }
    }

    /// A request through the input pipe, stepping until its answer; returns the answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.buf.clear();
        self.write_line(request_line(id, method, params).as_bytes());
        let marker = format!("\"id\":{id},");
        let end = self.step_until(marker.as_bytes());
        let text = &self.buf[..end];
        let line = text
            .split(|&b| b == b'\n')
            .find(|l| contains(l, marker.as_bytes()))
            .expect("answer line");
        let frame: Value = serde_json::from_slice(line).expect("answer is JSON");
        frame
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{method} failed: {frame}"))
    }

    fn create_session(&mut self) -> String {
        let result = self.call("session.create", json!({"cols": 100}));
        result["session_id"]
            .as_str()
            .expect("session_id")
            .to_string()
    }
}

/// A request line (no newline) with a numeric id.
fn request_line(id: u64, method: &str, params: Value) -> String {
    request(&json!(id), method, params).to_string()
}

fn prompt_line(id: u64, session: &str, turn: usize) -> Vec<u8> {
    request_line(
        id,
        "prompt.submit",
        json!({"session_id": session, "text": format!("t{turn} please summarise the state of the session now")}),
    )
    .into_bytes()
}

fn dispatch(c: &mut Criterion) {
    let mut group = c.benchmark_group("dispatch");
    group.throughput(Throughput::Elements(1));

    group.bench_function("ping/handle_frame", |b| {
        let mut gp = InProcess::new();
        let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        b.iter(|| {
            gp.gw.handle_frame(black_box(ping));
            if gp.gw.queued_output() > 1 << 20 {
                gp.gw.discard_output();
            }
        });
    });

    // The loop's whole path for one request: read(2) from the input pipe, line reader, parse,
    // dispatch, serialise, write(2) to the output pipe; plus the bench's own read(2).
    group.bench_function("ping/through_pipes", |b| {
        let mut gp = InProcess::new();
        let mut id = 0u64;
        b.iter(|| {
            id += 1;
            gp.buf.clear();
            gp.write_line(request_line(id, "ping", json!({})).as_bytes());
            gp.step_until(b"\"pong\"");
        });
    });

    // Gateway overhead per turn on the offline model, commit included: from writing
    // `prompt.submit` into the input pipe to reading `message.complete` from the output pipe.
    group.bench_function("turn/offline_model_with_commit", |b| {
        let mut gp = InProcess::new();
        let mut session = gp.create_session();
        let mut turns = 0usize;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if turns == TURNS_PER_SESSION {
                    gp.call("session.close", json!({"session_id": session}));
                    session = gp.create_session();
                    turns = 0;
                }
                gp.next_id += 1;
                let line = prompt_line(gp.next_id, &session, turns);
                gp.buf.clear();
                let start = Instant::now();
                gp.write_line(&line);
                gp.step_until(b"\"message.complete\"");
                total += start.elapsed();
                turns += 1;
            }
            total
        });
    });
    group.finish();
}

/// One turn of `session` on `text`, from writing `prompt.submit` to reading its
/// `message.complete`; `session` is replaced by a fresh one every [`TURNS_PER_SESSION`] turns.
/// A delegating text waits for the second: the turn its children's result starts (a top-level
/// delegation runs in the background).
fn timed_turn(gp: &mut InProcess, session: &mut String, turns: &mut usize, text: &str) -> Duration {
    let mut completes: usize = if text.starts_with("%delegate_task") {
        2
    } else {
        1
    };
    if *turns == TURNS_PER_SESSION {
        gp.call("session.close", json!({"session_id": session}));
        *session = gp.create_session();
        *turns = 0;
    }
    gp.next_id += 1;
    let params = json!({"session_id": session, "text": text});
    let line = request_line(gp.next_id, "prompt.submit", params);
    let needle = format!("\"session_id\":\"{session}\"");
    gp.buf.clear();
    let start = Instant::now();
    gp.write_line(line.as_bytes());
    // The parent's own `message.complete` (its children's carry their own ids).
    loop {
        let end = gp.step_until(b"\"message.complete\"");
        let done = gp.buf[..end]
            .split(|&b| b == b'\n')
            .filter(|l| contains(l, b"\"message.complete\"") && contains(l, needle.as_bytes()))
            .count();
        gp.buf.drain(..end);
        completes = completes.saturating_sub(done);
        if completes == 0 {
            break;
        }
    }
    *turns += 1;
    start.elapsed()
}

fn subagents(c: &mut Criterion) {
    let mut group = c.benchmark_group("subagents");
    group.throughput(Throughput::Elements(1));
    let todo = r#"%todo {"todos": [{"id": "a", "content": "look", "status": "pending"}]}"#;
    let delegate = r#"%delegate_task {"goal": "look around please"}"#;
    for (name, text) in [
        ("turn/todo_call", todo),
        ("turn/delegate_one_child", delegate),
    ] {
        group.bench_function(name, |b| {
            let mut gp = InProcess::new();
            let mut session = gp.create_session();
            let mut turns = 0usize;
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| timed_turn(&mut gp, &mut session, &mut turns, text))
                    .sum()
            });
        });
    }

    // 50 children of one call, against 50 sessions each running one turn at once.
    const N: usize = 50;
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("batch/50_children", |b| {
        let mut gp = InProcess::with_config("delegation:\n  max_concurrent_children: 50\n");
        let mut session = gp.create_session();
        let mut turns = 0usize;
        let goals: Vec<Value> = (0..N)
            .map(|i| json!({"goal": format!("task {i} look")}))
            .collect();
        let text = format!("%delegate_task {}", json!({"tasks": goals}));
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| timed_turn(&mut gp, &mut session, &mut turns, &text))
                .sum()
        });
    });
    group.bench_function("batch/50_sessions", |b| {
        let mut gp = InProcess::new();
        let sessions: Vec<String> = (0..N).map(|_| gp.create_session()).collect();
        let mut turn = 0usize;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if turn == TURNS_PER_SESSION {
                    // Long transcripts would change what is measured: clear them.
                    for s in &sessions {
                        gp.call("session.undo", json!({"session_id": s}));
                    }
                    turn = 0;
                }
                gp.buf.clear();
                let start = Instant::now();
                for s in &sessions {
                    gp.next_id += 1;
                    let params = json!({"session_id": s, "text": format!("task {turn} look")});
                    gp.write_line(request_line(gp.next_id, "prompt.submit", params).as_bytes());
                }
                let mut done = 0;
                while done < N {
                    let end = gp.step_until(b"\"message.complete\"");
                    done += gp.buf[..end]
                        .split(|&b| b == b'\n')
                        .filter(|l| contains(l, b"\"message.complete\""))
                        .count();
                    gp.buf.drain(..end);
                }
                total += start.elapsed();
                turn += 1;
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, dispatch, subagents);
criterion_main!(benches);
