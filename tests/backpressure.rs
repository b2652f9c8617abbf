//! A client that stops reading stdout while 1,000 turns stream: the gateway's memory stays
//! bounded, and once the client reads again the gateway is alive, answers ping, and every turn
//! completes (deltas may be coalesced; no other frame is dropped).

use crate::common;

use common::procfs::poll_until;
use common::*;
use serde_json::json;
use std::collections::HashMap;
use std::time::Instant;

const SESSIONS: usize = 50;
const PROMPTS: usize = 20;
/// Words per prompt; the reply repeats the prompt, one delta per word, so ~1M delta frames
/// (> 100 MiB of JSON) are produced in total: an unbounded out-queue cannot stay under the limit.
const WORDS: usize = 1000;
const RSS_LIMIT_KIB: u64 = 64 * 1024;

#[test]
fn stalled_reader_keeps_memory_bounded() {
    let t0 = Instant::now();
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_STDOUT_STALL_S", "120")
        .start();
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(g.create_session(json!({})).id);
    }
    let baseline = procfs::rss_kib(g.pid()).expect("VmRSS of the gateway");

    // stop reading, then submit all prompts from a writer thread (the gateway may stop reading
    // stdin as backpressure; the writer must not block the test)
    g.pause_reading();
    let mut payload = Vec::new();
    for k in 0..PROMPTS {
        for (si, sid) in sessions.iter().enumerate() {
            let text = long_prompt(&format!("bp-s{si}-p{k}"), WORDS);
            payload.extend_from_slice(
                json!({"jsonrpc":"2.0","id":format!("bp-{si}-{k}"),"method":"prompt.submit",
                       "params":{"session_id":sid,"text":text}})
                .to_string()
                .as_bytes(),
            );
            payload.push(b'\n');
        }
    }
    let writer = g.write_in_background(payload);

    // sample RSS while the client is not reading: until all turns are in the store, or 10 s
    let db = g.db();
    let pause_end = Instant::now() + secs(10);
    let mut max_rss = 0u64;
    let mut samples = 0u32;
    let mut stored = 0i64;
    while Instant::now() < pause_end {
        assert!(
            g.try_exit().is_none(),
            "gateway exited while the client was not reading\n{}",
            g.diag()
        );
        let kib = procfs::rss_kib(g.pid()).expect("VmRSS");
        max_rss = max_rss.max(kib);
        samples += 1;
        stored = db
            .query_row(
                "SELECT count(*) FROM messages WHERE role='assistant'",
                [],
                |r| r.get(0),
            )
            .unwrap_or(stored);
        if stored as usize >= SESSIONS * PROMPTS {
            break;
        }
        // sampling cadence; stdout is deliberately not being read
        std::thread::sleep(ms(100));
    }
    drop(db);
    eprintln!(
        "backpressure: baseline {baseline} KiB, max RSS {max_rss} KiB over {samples} samples, \
         {stored} assistant messages stored while stalled"
    );
    assert!(samples >= 5, "too few RSS samples");
    assert!(
        max_rss < RSS_LIMIT_KIB,
        "gateway RSS reached {max_rss} KiB (limit {RSS_LIMIT_KIB}) while the client was not reading \
         (baseline {baseline} KiB)\n{}",
        g.diag()
    );

    // read again: alive, answers ping, and every turn completes
    g.resume_reading();
    let ping_id = g.send_request("ping", json!({}));
    let deadline = t0 + secs(40);
    let mut pong = false;
    let mut submits: HashMap<String, String> = HashMap::new();
    let mut completes: HashMap<String, Vec<String>> = HashMap::new();
    let mut n_complete = 0usize;
    while !(pong && n_complete == SESSIONS * PROMPTS && submits.len() == SESSIONS * PROMPTS) {
        let left = deadline.saturating_duration_since(Instant::now());
        let f = g.recv_unlogged(left).unwrap_or_else(|| {
            panic!(
                "after resuming: pong={pong}, {} prompt answers, {n_complete} message.complete of {}\n{}",
                submits.len(),
                SESSIONS * PROMPTS,
                g.diag()
            )
        });
        if f["id"] == ping_id {
            assert_eq!(f["result"], json!({"pong": true}), "{f}");
            pong = true;
        } else if let Some(id) = f["id"].as_str() {
            if id.starts_with("bp-") {
                let st = f["result"]["status"]
                    .as_str()
                    .unwrap_or_else(|| panic!("prompt.submit failed: {f}"));
                assert!(st == "streaming" || st == "queued", "{f}");
                assert!(
                    submits.insert(id.to_string(), st.to_string()).is_none(),
                    "answered twice: {f}"
                );
            }
        } else if event_type(&f) == Some("message.complete") {
            let p = &f["params"];
            assert_eq!(
                p["payload"]["status"],
                "complete",
                "{}",
                truncate(&f.to_string(), 300)
            );
            let text = p["payload"]["text"].as_str().unwrap_or("");
            let sid = p["session_id"].as_str().unwrap().to_string();
            completes.entry(sid).or_default().push(text.to_string());
            n_complete += 1;
        }
    }
    writer.join().unwrap().expect("writing the prompts");
    assert!(g.try_exit().is_none(), "gateway exited");

    // every turn of every session completed, in submission order, with its full text
    for (si, sid) in sessions.iter().enumerate() {
        let texts = completes
            .get(sid)
            .unwrap_or_else(|| panic!("no turns completed for session {si}"));
        assert_eq!(texts.len(), PROMPTS, "session {si}");
        for (k, text) in texts.iter().enumerate() {
            let want = long_prompt(&format!("bp-s{si}-p{k}"), WORDS);
            assert!(
                text.contains(&want),
                "session {si} turn {k}: text does not contain its prompt (starts {:?})",
                truncate(text, 80)
            );
        }
    }
    g.ping();
    g.assert_clean_stdout();
    eprintln!("backpressure: total {:?}", t0.elapsed());
}

/// A peer that stops reading for good (queue full, no write progress past the stall deadline)
/// is treated as gone: the gateway takes the ordered shutdown, persists, and exits.
#[test]
fn a_peer_that_never_reads_again_is_treated_as_gone() {
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_STDOUT_STALL_S", "1")
        // The exit reason under test is the stall; a loaded CI machine must not turn it into the
        // grace cap (how fast the shutdown is, is the benches' business).
        .env("HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S", "30")
        .start();
    let sessions: Vec<Session> = (0..20).map(|_| g.create_session(json!({}))).collect();
    g.pause_reading();
    // ~200 turns of ~10,000-word replies: far more output than the out-queue holds, even with
    // deltas coalesced (each `message.complete` carries its whole text).
    let mut payload = Vec::new();
    for k in 0..10 {
        for (si, s) in sessions.iter().enumerate() {
            let text = long_prompt(&format!("gone-s{si}-p{k}"), 10 * WORDS);
            let frame = json!({"jsonrpc":"2.0","id":format!("g-{si}-{k}"),"method":"prompt.submit",
                               "params":{"session_id":s.id,"text":text}});
            payload.extend_from_slice(frame.to_string().as_bytes());
            payload.push(b'\n');
        }
    }
    // The write fails with EPIPE once the gateway is gone; that is expected.
    let writer = g.write_in_background(payload);
    // About 5 s on an idle machine (200 long turns start before the stall is seen); a loaded
    // one has taken over 30 s, so the bound is generous: a gateway that never sees the stall
    // never exits.
    assert!(
        poll_until(secs(120), || g.try_exit().is_some()),
        "a peer that never reads was not treated as gone\n{}",
        g.diag()
    );
    let status = g.wait_exit(secs(5));
    assert_eq!(status.code(), Some(0), "{}", g.diag());
    let stderr = g.stderr_text();
    assert!(stderr.contains("[gateway-exit] stdout stalled"), "{stderr}");
    let _ = writer.join();
    let db = g.db();
    let open: i64 = db
        .query_row(
            // A session whose context filled up was compacted into a continuation and ended
            // `compression` earlier, by design.
            "SELECT count(*) FROM sessions
             WHERE end_reason IS NULL OR end_reason NOT IN ('tui_shutdown', 'compression')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(open, 0, "every session ended by the shutdown");
    let answered: i64 = db
        .query_row(
            "SELECT count(*) FROM messages WHERE role = 'assistant'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(answered > 0, "the turns that ran are in the store");
}

/// Many tools flood their output while the client reads slowly: the gateway stops reading the
/// tools' pipes while its out-queue is over its cap (each tool waits on its write), so its
/// memory stays bounded; and every byte each tool printed is accounted for in its stored
/// result (head and tail kept, the rest counted exactly).
#[test]
fn flooding_tools_with_a_slow_reader_keep_memory_bounded_and_lose_nothing() {
    const TOOLS: usize = 48;
    const CHUNKS: usize = 120;
    const CHUNK: usize = 100_000;
    const SLOW_BYTES_PER_S: f64 = 256.0 * 1024.0;
    // Above the idle gateway: the out-queue cap (8 MiB), the event rings (2 MiB here), each run's
    // pipe buffers and the allocator's slack. Unbounded output would be 48 x 12 MB.
    const RSS_GROWTH_LIMIT_KIB: u64 = 36 * 1024;
    let m = procfs::marker();
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_STDOUT_STALL_S", "120")
        .env("TUI_GATEWAY_EVENT_RINGS_TOTAL_KB", "2048")
        .start();
    let sessions: Vec<Session> = (0..TOOLS).map(|_| g.create_session(json!({}))).collect();
    let baseline = procfs::rss_kib(g.pid()).expect("VmRSS of the gateway");
    let rss_limit_kib = baseline + RSS_GROWTH_LIMIT_KIB;
    // Each tool prints 12 MB over at least 6 s (its own pauses), then its end marker.
    let end_line = format!("END-{m}\n");
    let command = format!(
        "for i in $(seq {CHUNKS}); do yes 0123456789abcdef | head -c {CHUNK}; sleep 0.05; done; \
         printf {}",
        end_line.trim_end()
    );
    let mut payload = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        let frame = json!({"jsonrpc":"2.0","id":format!("flood-{i}"),"method":"prompt.submit",
                           "params":{"session_id":s.id,"text":format!("$ {command}; echo")}});
        payload.extend_from_slice(frame.to_string().as_bytes());
        payload.push(b'\n');
    }
    let writer = g.write_in_background(payload);

    // Read slowly for a while (pacing the reader, not synchronising), then at full speed until
    // every turn completed; sample the gateway's memory all along.
    let t0 = Instant::now();
    let slow_until = t0 + secs(6);
    let deadline = t0 + secs(90);
    let mut read = 0usize;
    let mut max_rss = baseline;
    let mut completed = 0usize;
    let mut next_sample = Instant::now();
    while completed < TOOLS {
        let now = Instant::now();
        assert!(
            now < deadline,
            "{completed} of {TOOLS} turns completed\n{}",
            g.diag()
        );
        if now >= next_sample {
            max_rss = max_rss.max(procfs::rss_kib(g.pid()).expect("VmRSS"));
            next_sample = now + ms(50);
        }
        let allowed = SLOW_BYTES_PER_S * now.duration_since(t0).as_secs_f64();
        if now < slow_until && read as f64 > allowed {
            std::thread::sleep(ms(5));
            continue;
        }
        let Some(f) = g.recv_unlogged(ms(50)) else {
            continue;
        };
        read += f.to_string().len();
        if event_type(&f) == Some("message.complete") {
            assert_eq!(
                f["params"]["payload"]["status"],
                "complete",
                "{}",
                truncate(&f.to_string(), 300)
            );
            completed += 1;
        }
    }
    writer.join().unwrap().expect("writing the prompts");
    eprintln!(
        "flood: baseline {baseline} KiB, max RSS {max_rss} KiB, {read} bytes read, took {:?}",
        t0.elapsed()
    );
    assert!(
        max_rss < rss_limit_kib,
        "gateway RSS reached {max_rss} KiB (limit {rss_limit_kib}) with {TOOLS} flooding tools \
         and a slow reader (baseline {baseline} KiB)\n{}",
        g.diag()
    );

    // Nothing was lost: each stored result has the head, the tail with the end marker, and
    // counts exactly the bytes cut between them.
    let printed = CHUNKS * CHUNK + end_line.len();
    let cut = printed - 16 * 1024 - 32 * 1024;
    let db = g.db();
    for (i, s) in sessions.iter().enumerate() {
        let rows = rows_of(&db, &s.stored);
        let tool = rows
            .iter()
            .find(|r| r.role == "tool")
            .unwrap_or_else(|| panic!("session {i}: no tool row: {rows:?}"));
        let result = tool.json();
        let output = result["output"]
            .as_str()
            .unwrap_or_else(|| panic!("{result}"));
        assert!(
            output.starts_with("0123456789abcdef\n"),
            "session {i}: {}",
            truncate(output, 100)
        );
        assert!(
            output.contains(&format!("[... {cut} bytes of output cut ...]")),
            "session {i}: expected {cut} bytes cut: {}",
            truncate(output, 200)
        );
        assert!(
            output.ends_with(&end_line),
            "session {i}: {:?}",
            &output[output.len() - 40..]
        );
        assert_eq!(result["exit_code"], 0, "session {i}: {result}");
    }
    g.ping();
}

/// Issue 30's idle-session case: sessions that each ran a chatty command, then sit idle. Beyond
/// what they keep by design (their transcripts, and the newest events of an ended turn up to
/// the idle ring's cap), the memory the commands' output took goes back within 2x of idle.
#[test]
fn idle_sessions_after_chatty_commands_give_their_memory_back() {
    const SESSIONS: usize = 80;
    /// Lines each command prints (about 1.3 MB).
    const LINES: usize = 200_000;
    const IDLE_RING_KB: u64 = 64;
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_EVENT_RING_IDLE_KB", &IDLE_RING_KB.to_string())
        .start();
    let ids: Vec<String> = (0..SESSIONS)
        .map(|_| g.create_session(json!({})).id)
        .collect();
    g.ping();
    let idle_kib = procfs::rss_kib(g.pid()).expect("VmRSS");
    for chunk in ids.chunks(8) {
        for sid in chunk {
            let command = json!({"command": format!("seq 1 {LINES}")});
            submit(&mut g, sid, &format!("%terminal {command}"));
        }
        for sid in chunk {
            g.wait_session_event(sid, "message.complete", secs(60));
        }
    }
    let db = rusqlite::Connection::open(g.db_path()).unwrap();
    let transcripts_kib: u64 = db
        .query_row(
            "SELECT COALESCE(SUM(LENGTH(content)), 0) FROM messages",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as u64
        / 1024;
    let kept_kib = transcripts_kib + SESSIONS as u64 * IDLE_RING_KB;
    let mut now_kib = 0;
    let back = poll_until(secs(10), || {
        g.ping();
        now_kib = procfs::rss_kib(g.pid()).expect("VmRSS");
        now_kib <= 2 * idle_kib + kept_kib
    });
    eprintln!(
        "{SESSIONS} sessions after {LINES}-line commands: idle {idle_kib} KiB, now {now_kib} KiB, \
         kept by design {kept_kib} KiB (transcripts {transcripts_kib} KiB)"
    );
    assert!(
        back,
        "{SESSIONS} idle sessions hold {now_kib} KiB: over 2x idle ({idle_kib} KiB) plus the \
         {kept_kib} KiB they keep by design"
    );
}
