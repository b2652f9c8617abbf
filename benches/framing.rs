//! Framing: the bounded line reader plus frame parsing of client input, and the serialisation of
//! what the gateway writes (a response, an event).
//!
//! ```text
//! cargo bench --bench framing -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use tui_gateway::rpc::frame::{self, Incoming};
use tui_gateway::rpc::{Line, LineReader};

/// The frame limit of the default configuration.
const FRAME_LIMIT: usize = 16 * 1024 * 1024;

/// A `prompt.submit` as the TUI sends it, with its newline.
fn prompt_submit(id: u64) -> Vec<u8> {
    let mut line = json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "prompt.submit",
        "params": {
            "session_id": "3f9a1c2e",
            "text": "please summarise the state of the session and what changed since the last turn"
        }
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

/// Feeds `chunk` to the reader and parses every frame; returns how many were requests.
fn read_and_parse(reader: &mut LineReader, chunk: &[u8]) -> usize {
    let mut requests = 0;
    reader.push(chunk, |line| {
        if let Line::Frame(bytes) = line
            && let Incoming::Request(req) = frame::parse_line(bytes)
        {
            black_box(&req);
            requests += 1;
        }
    });
    requests
}

fn framing(c: &mut Criterion) {
    let mut group = c.benchmark_group("framing");

    let one = prompt_submit(42);
    group.throughput(Throughput::Elements(1));
    group.bench_function("read_parse/prompt.submit", |b| {
        let mut reader = LineReader::new(FRAME_LIMIT);
        b.iter(|| assert_eq!(read_and_parse(&mut reader, black_box(&one)), 1));
    });

    // The same frame arriving in two reads (the partial line is buffered, then joined).
    let (head, tail) = one.split_at(one.len() / 2);
    group.bench_function("read_parse/prompt.submit_split_in_2_reads", |b| {
        let mut reader = LineReader::new(FRAME_LIMIT);
        b.iter(|| {
            let first = read_and_parse(&mut reader, black_box(head));
            let second = read_and_parse(&mut reader, black_box(tail));
            assert_eq!(first + second, 1);
        });
    });

    let batch: Vec<u8> = (0..100).flat_map(prompt_submit).collect();
    group.throughput(Throughput::Elements(100));
    group.bench_function("read_parse/100_frames_one_chunk", |b| {
        let mut reader = LineReader::new(FRAME_LIMIT);
        b.iter(|| assert_eq!(read_and_parse(&mut reader, black_box(&batch)), 100));
    });

    let ping = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n";
    group.throughput(Throughput::Elements(1));
    group.bench_function("read_parse/ping", |b| {
        let mut reader = LineReader::new(FRAME_LIMIT);
        b.iter(|| assert_eq!(read_and_parse(&mut reader, black_box(ping)), 1));
    });

    let id = frame::Id::of(&json!(42));
    let result = json!({"status": "streaming"});
    group.bench_function("serialise/response", |b| {
        b.iter(|| frame::response(black_box(&id), black_box(&result)));
    });

    let delta = json!({"text": " summarise"});
    group.bench_function("serialise/event_message.delta", |b| {
        b.iter(|| {
            let params =
                frame::event_params("message.delta", "3f9a1c2e", black_box(&delta), Some(17));
            frame::event_frame(&params)
        });
    });

    let complete = json!({
        "text": "(offline model) You said: please summarise the state of the session",
        "usage": {"model": "offline", "input": 120, "output": 14, "total": 134, "calls": 9},
        "status": "complete",
    });
    group.bench_function("serialise/event_message.complete", |b| {
        b.iter(|| {
            let params = frame::event_params(
                "message.complete",
                "3f9a1c2e",
                black_box(&complete),
                Some(18),
            );
            frame::event_frame(&params)
        });
    });
    group.finish();
}

criterion_group!(benches, framing);
criterion_main!(benches);
