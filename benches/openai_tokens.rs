//! What the gateway adds per streamed token of a remote model, on Chat Completions (default),
//! Anthropic's Messages API (`--wire anthropic`) or OpenAI's Responses API (`--wire responses`).
//!
//! A mock server (`tests/mockai`, a thread of this process) streams an answer of N tokens
//! (default 10,000), one event per token in its own chunk and its own write, as fast as it can:
//! a `data:` chunk of Chat Completions, Anthropic's `event: content_block_delta` with its
//! `data:` (a `text_delta`), or a `response.output_text.delta`. Measured, interleaved run by
//! run:
//!
//! - **baseline, raw**: a client that sends the request to the mock itself and reads the response
//!   bytes until the end of the body (pure transport);
//! - **baseline, parsing**: the same client also decoding the chunked body, splitting the SSE
//!   events and parsing each event's JSON to take the delta text (what any direct client does);
//! - **gateway**: the release gateway (`OPENAI_BASE_URL` → the mock; for the Messages API a
//!   config.yaml with `api_mode: anthropic_messages`, for the Responses API a `providers:`
//!   entry with `api_mode: codex_responses`), timed from writing
//!   `prompt.submit` on its stdin to reading `message.complete` on its stdout (every
//!   `message.delta` frame read on the way), a fresh session per run.
//!
//! The gateway's added time per token is `(gateway − baseline) / N` (medians); the target is
//! under 5 µs. The gateway's own CPU time per token (from `/proc/<pid>/schedstat`) is printed too:
//! on a loaded 2-core machine it is the steadier number.
//!
//! ```text
//! cargo bench --bench openai_tokens                  # 10,000 tokens, 15 runs
//! cargo bench --bench openai_tokens -- --tokens 50000 --runs 5
//! cargo bench --bench openai_tokens -- --wire anthropic
//! cargo bench --bench openai_tokens -- --wire responses
//! ```

// The bench reads and writes its own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

mod common;
#[path = "../tests/mockai/mod.rs"]
mod mockai;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{Client, TempDir, arg_string, arg_usize, fmt_duration, gateway_bin};
use mockai::anthropic as msgs;
use mockai::responses::{Answer, usage};
use mockai::{Conn, MockAi, Reply, ev_finish, ev_role, ev_text, ev_usage};

/// The API the mock speaks.
#[derive(Clone, Copy, PartialEq)]
enum Wire {
    Chat,
    Anthropic,
    Responses,
}

impl Wire {
    fn path(self) -> &'static str {
        match self {
            Wire::Chat => "/v1/chat/completions",
            Wire::Anthropic => "/v1/messages",
            Wire::Responses => "/v1/responses",
        }
    }

    /// The text one event's JSON adds to the answer.
    fn text_of(self, v: &Value) -> Option<&str> {
        match self {
            Wire::Chat => v["choices"][0]["delta"]["content"].as_str(),
            Wire::Anthropic => v["delta"]["text"].as_str(),
            Wire::Responses if v["type"] == "response.output_text.delta" => v["delta"].as_str(),
            Wire::Responses => None,
        }
    }
}

const STALL: Duration = Duration::from_secs(60);

/// The whole response body, pre-rendered: one chunk (`size\r\ndata: …\n\n\r\n`) per event.
struct Body {
    chunks: Vec<Vec<u8>>,
    text: String,
}

fn render(tokens: usize, wire: Wire) -> Body {
    let pieces: Vec<String> = (0..tokens).map(|i| format!(" w{i}")).collect();
    let text = pieces.concat();
    // Each event's text as it goes on the wire (its `event:` line, for the Messages API).
    let events: Vec<String> = match wire {
        Wire::Chat => {
            let mut events = vec![ev_role()];
            events.extend(pieces.iter().map(|t| ev_text(t)));
            events.push(ev_finish("stop"));
            events.push(ev_usage(20, tokens as u64));
            events.push("[DONE]".to_string());
            events.iter().map(|e| format!("data: {e}\n\n")).collect()
        }
        Wire::Anthropic => {
            let mut events = vec![msgs::message_start(20, 0, 0), msgs::text_start(0)];
            events.extend(pieces.iter().map(|t| msgs::text_delta(0, t)));
            events.push(msgs::block_stop(0));
            events.push(msgs::message_delta("end_turn", tokens as u64));
            events.push(msgs::message_stop());
            events
                .iter()
                .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
                .collect()
        }
        Wire::Responses => {
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            Answer::new()
                .text("msg_bench", &pieces)
                .completed(usage(20, 0, tokens as u64, 0))
                .iter()
                .map(|e| format!("data: {e}\n\n"))
                .collect()
        }
    };
    let mut chunks: Vec<Vec<u8>> = events
        .iter()
        .map(|data| {
            let mut c = format!("{:x}\r\n", data.len()).into_bytes();
            c.extend_from_slice(data.as_bytes());
            c.extend_from_slice(b"\r\n");
            c
        })
        .collect();
    chunks.push(b"0\r\n\r\n".to_vec());
    Body { chunks, text }
}

fn start_mock(body: Arc<Body>) -> MockAi {
    MockAi::start(move |_req| {
        let body = body.clone();
        Reply::Custom(Box::new(move |c: &mut Conn| {
            if !c.write_raw(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                  Transfer-Encoding: chunked\r\n\r\n",
            ) {
                return;
            }
            for ch in &body.chunks {
                if !c.write_raw(ch) {
                    return;
                }
            }
        }))
    })
}

// ---------------------------------------------------------------------------------------------
// Baseline: a client reading the mock directly
// ---------------------------------------------------------------------------------------------

fn direct_request(port: u16, wire: Wire) -> TcpStream {
    let body = json!({
        "model": "mock-model",
        "messages": [{"role": "user", "content": "stream please"}],
        "stream": true,
        "max_tokens": 1024,
    })
    .to_string();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the mock");
    s.set_nodelay(true).unwrap();
    let req = format!(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Authorization: Bearer sk-bench\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        wire.path(),
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s
}

/// Reads until the terminating chunk; returns the bytes read.
fn baseline_raw(port: u16, wire: Wire) -> (Duration, usize) {
    let t0 = Instant::now();
    let mut s = direct_request(port, wire);
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0usize;
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = s.read(&mut buf).expect("read from the mock");
        if n == 0 {
            break;
        }
        total += n;
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 16 {
            tail.drain(..tail.len() - 16);
        }
        if tail.ends_with(b"\r\n0\r\n\r\n") {
            break;
        }
    }
    (t0.elapsed(), total)
}

/// Reads, decodes chunked, splits SSE events and parses each one's JSON; returns the text.
fn baseline_parsing(port: u16, wire: Wire) -> (Duration, String) {
    let t0 = Instant::now();
    let mut s = direct_request(port, wire);
    let mut buf = vec![0u8; 64 * 1024];
    let mut raw: Vec<u8> = Vec::new();
    let mut pos = 0usize;
    let mut head_done = false;
    enum St {
        Size,
        Data(usize),
        Crlf,
    }
    let mut st = St::Size;
    let mut body: Vec<u8> = Vec::new();
    let mut text = String::new();
    let mut done = false;
    while !done {
        let n = s.read(&mut buf).expect("read from the mock");
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if !head_done {
            match raw.windows(4).position(|w| w == b"\r\n\r\n") {
                Some(p) => {
                    pos = p + 4;
                    head_done = true;
                }
                None => continue,
            }
        }
        // chunked decoding
        loop {
            match st {
                St::Size => {
                    let Some(nl) = raw[pos..].iter().position(|&b| b == b'\n') else {
                        break;
                    };
                    let line = std::str::from_utf8(&raw[pos..pos + nl]).unwrap().trim();
                    let size = usize::from_str_radix(line, 16).expect("chunk size");
                    pos += nl + 1;
                    if size == 0 {
                        done = true;
                        break;
                    }
                    st = St::Data(size);
                }
                St::Data(k) => {
                    let avail = (raw.len() - pos).min(k);
                    body.extend_from_slice(&raw[pos..pos + avail]);
                    pos += avail;
                    if avail < k {
                        st = St::Data(k - avail);
                        break;
                    }
                    st = St::Crlf;
                }
                St::Crlf => {
                    if raw.len() - pos < 2 {
                        break;
                    }
                    pos += 2;
                    st = St::Size;
                }
            }
        }
        raw.drain(..pos);
        pos = 0;
        // SSE events
        let mut start = 0;
        while let Some(p) = body[start..].windows(2).position(|w| w == b"\n\n") {
            let ev = &body[start..start + p];
            start += p + 2;
            let Some(data) = ev
                .split(|&b| b == b'\n')
                .find_map(|l| l.strip_prefix(b"data: "))
            else {
                continue;
            };
            if data == b"[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_slice(data).expect("event JSON");
            if let Some(t) = wire.text_of(&v) {
                text.push_str(t);
            }
        }
        body.drain(..start);
    }
    (t0.elapsed(), text)
}

// ---------------------------------------------------------------------------------------------
// The gateway
// ---------------------------------------------------------------------------------------------

struct Gw {
    client: Client,
    pid: u32,
    _home: TempDir,
}

impl Gw {
    fn spawn(bin: &Path, base_url: &str, wire: Wire) -> Gw {
        let home = TempDir::new("openai-tokens");
        let stderr = std::fs::File::create(home.path().join("gateway.stderr")).unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("serve").current_dir(home.path()).stderr(stderr);
        for (k, _) in std::env::vars() {
            if k.starts_with("HERMES_")
                || k.starts_with("TUI_GATEWAY_")
                || k.starts_with("OPENAI_")
                || k.ends_with("_API_KEY")
            {
                cmd.env_remove(&k);
            }
        }
        cmd.env("HERMES_HOME", home.path());
        match wire {
            Wire::Chat => {
                cmd.env("OPENAI_BASE_URL", base_url)
                    .env("OPENAI_API_KEY", "sk-bench")
                    .env("OPENAI_MODEL", "mock-model");
            }
            Wire::Anthropic => std::fs::write(
                home.path().join("config.yaml"),
                format!(
                    "model:\n  default: claude-sonnet-4-5\n  base_url: {base_url}\n  \
                     api_mode: anthropic_messages\n  api_key: sk-bench\n"
                ),
            )
            .unwrap(),
            // Hermes takes `api_mode: codex_responses` for a local URL from a providers: entry.
            Wire::Responses => std::fs::write(
                home.path().join("config.yaml"),
                format!(
                    "model:\n  provider: bench\n  default: mock-model\nproviders:\n  bench:\n    \
                     base_url: {base_url}\n    api_mode: codex_responses\n    api_key: sk-bench\n"
                ),
            )
            .unwrap(),
        }
        let client = Client::spawn(&mut cmd).expect("spawn the gateway");
        let pid = client.pid().unwrap();
        let mut gw = Gw {
            client,
            pid,
            _home: home,
        };
        gw.wait_line(|l| contains(l, b"\"gateway.ready\""));
        gw
    }

    fn send(&mut self, method: &str, params: Value) -> Value {
        self.client
            .send_request(method, params)
            .expect("write to the gateway")
    }

    /// The next raw line that satisfies `want` (no JSON parsing: the client's cost stays out of
    /// the measurement).
    fn wait_line(&mut self, mut want: impl FnMut(&[u8]) -> bool) -> Vec<u8> {
        let deadline = Instant::now() + STALL;
        loop {
            let line = self
                .client
                .next_line(deadline)
                .unwrap_or_else(|e| panic!("gateway: {e}"));
            if want(line) {
                return line.to_vec();
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.client
            .call(method, params, Instant::now() + STALL)
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }

    /// One turn: (wall time submit → complete, delta frames, complete text, gateway CPU time).
    fn turn(&mut self) -> (Duration, usize, String, Option<Duration>) {
        let sid = self.call("session.create", json!({"cols": 100}))["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        // let the session.info event through
        let cpu0 = cpu_time(self.pid);
        let t0 = Instant::now();
        let id = self.send(
            "prompt.submit",
            json!({"session_id": sid, "text": "stream please"}),
        );
        let mut deltas = 0usize;
        let id_needle = format!("\"id\":{id}").into_bytes();
        let mut answered = false;
        let complete = self.wait_line(|l| {
            // event frames end with `"type":"…"}}` (sorted keys): look at the tail first
            let tail = &l[l.len().saturating_sub(40)..];
            if contains(tail, b"\"message.delta\"") {
                deltas += 1;
                return false;
            }
            if contains(tail, b"\"message.complete\"") {
                return true;
            }
            if !answered && contains(l, &id_needle) {
                answered = true;
                return false;
            }
            if contains(l, b"\"message.delta\"") {
                deltas += 1;
                return false;
            }
            contains(l, b"\"message.complete\"")
        });
        let wall = t0.elapsed();
        let cpu1 = cpu_time(self.pid);
        let v: Value = serde_json::from_slice(&complete).unwrap();
        let p = &v["params"]["payload"];
        assert_eq!(p["status"], "complete", "{p}");
        let text = p["text"].as_str().unwrap_or("").to_string();
        // wait for the settled session.info so the next run starts idle
        self.wait_line(|l| contains(l, b"\"session.info\""));
        let cpu = match (cpu0, cpu1) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        (wall, deltas, text, cpu)
    }
}

fn contains(h: &[u8], n: &[u8]) -> bool {
    h.windows(n.len()).any(|w| w == n)
}

/// CPU time the process has run so far (`/proc/<pid>/schedstat`, ns; else utime+stime ticks).
fn cpu_time(pid: u32) -> Option<Duration> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        && let Some(ns) = s
            .split_whitespace()
            .next()
            .and_then(|x| x.parse::<u64>().ok())
    {
        return Some(Duration::from_nanos(ns));
    }
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn per_token(d: Duration, n: usize) -> String {
    format!("{:.2} µs/token", d.as_secs_f64() * 1e6 / n as f64)
}

fn signed_per_token(a: Duration, b: Duration, n: usize) -> f64 {
    (a.as_secs_f64() - b.as_secs_f64()) * 1e6 / n as f64
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--test`-less args too; `--list` etc. are
    // not criterion here: run the measurement unless asked only to list.
    if std::env::args().any(|a| a == "--list") {
        println!("openai_tokens: bench");
        return;
    }
    let tokens = arg_usize("--tokens", 10_000);
    let runs = arg_usize("--runs", 15).max(1);
    let wire = match arg_string("--wire", "chat").as_str() {
        "chat" => Wire::Chat,
        "anthropic" => Wire::Anthropic,
        "responses" => Wire::Responses,
        other => panic!("--wire: chat, anthropic or responses, not {other:?}"),
    };
    let body = Arc::new(render(tokens, wire));
    let mock = start_mock(body.clone());
    let bin = gateway_bin();
    let mut gw = Gw::spawn(&bin, &mock.base_url(), wire);

    // warm-up (connection paths, page cache, allocator)
    let (_, raw_bytes) = baseline_raw(mock.port, wire);
    let (_, t) = baseline_parsing(mock.port, wire);
    assert_eq!(
        t, body.text,
        "the parsing baseline must read the whole answer"
    );
    let (_, _, t, _) = gw.turn();
    assert_eq!(t, body.text, "the gateway must relay the whole answer");

    let mut raw = Vec::new();
    let mut parsing = Vec::new();
    let mut gateway = Vec::new();
    let mut cpu = Vec::new();
    let mut frames = Vec::new();
    for _ in 0..runs {
        raw.push(baseline_raw(mock.port, wire).0);
        let (d, t) = baseline_parsing(mock.port, wire);
        assert_eq!(t.len(), body.text.len());
        parsing.push(d);
        let (d, n, t, c) = gw.turn();
        assert_eq!(t, body.text, "the gateway must relay the whole answer");
        gateway.push(d);
        frames.push(n);
        if let Some(c) = c {
            cpu.push(c);
        }
    }
    let order = format!(
        "  runs in order (ms): raw {:?}\n                     parsing {:?}\n                     gateway {:?}",
        raw.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
        parsing.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
        gateway.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
    );
    let (mr, mp, mg) = (median(&mut raw), median(&mut parsing), median(&mut gateway));
    println!(
        "openai_tokens: {tokens} tokens ({} KiB of chunked SSE, {}), {runs} runs, medians",
        raw_bytes / 1024,
        wire.path()
    );
    println!(
        "  baseline, raw read          {:>10}  {}",
        fmt_duration(mr),
        per_token(mr, tokens)
    );
    println!(
        "  baseline, parsing client    {:>10}  {}",
        fmt_duration(mp),
        per_token(mp, tokens)
    );
    println!(
        "  through the gateway         {:>10}  {}   (message.delta frames per turn: {:?})",
        fmt_duration(mg),
        per_token(mg, tokens),
        frames
    );
    let added = signed_per_token(mg, mp, tokens);
    let added_raw = signed_per_token(mg, mr, tokens);
    println!(
        "  gateway adds                {added:>7.2} µs/token over the parsing client, \
         {added_raw:.2} µs/token over the raw read"
    );
    if !cpu.is_empty() {
        let mc = median(&mut cpu);
        println!(
            "  gateway CPU per turn        {:>10}  {}",
            fmt_duration(mc),
            per_token(mc, tokens)
        );
    }
    println!(
        "  target: under 5 µs/token added → {}",
        if added < 5.0 { "met" } else { "NOT met" }
    );
    println!("{order}");
}
