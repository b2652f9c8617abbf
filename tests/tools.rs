//! The `terminal` tool through a turn, over the real binary: event order and payloads, the
//! transcript rows in `state.db`, timeouts, interrupts (TERM and the KILL after the kill grace),
//! an output flood (bounded memory, `ping` still answered), no orphans after SIGKILL of the
//! gateway, the scrubbed environment and stdin `/dev/null`.
//!
//! Processes are found through /proc by a unique marker in their arguments (`sleep 300.<marker>`);
//! every wait is a poll with a deadline.

use crate::common;
use crate::procs;

use common::*;
use procs::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn payload_str<'a>(e: &'a Value, k: &str) -> &'a str {
    e["payload"][k]
        .as_str()
        .unwrap_or_else(|| panic!("payload.{k} must be a string: {e}"))
}

fn output_of(complete: &Value) -> String {
    tool_result(complete)["output"]
        .as_str()
        .unwrap_or_else(|| panic!("tool.complete result.output must be a string: {complete}"))
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// Round trip
// ---------------------------------------------------------------------------------------------

#[test]
fn tool_round_trip_events_and_transcript_rows() {
    let m = marker();
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let cmd = format!("echo out-{m}; echo err-{m} >&2; exit 3");
    let prompt = format!("$ {cmd}");
    let start = submit(&mut g, &s.id, &prompt);

    // Commit before publish: when tool.start is seen, the user row and the assistant tool call
    // are already in state.db; when tool.complete is seen, the tool result is too.
    let tstart = g.wait_session_event(&s.id, "tool.start", T);
    let rows = message_rows(&g.db_path(), &s.stored);
    let roles: Vec<&str> = rows.iter().map(|r| r.role.as_str()).collect();
    assert!(
        roles.len() >= 2 && roles[0] == "user" && roles[1] == "assistant",
        "at tool.start the user row and the assistant tool-call row must be committed: {rows:#?}"
    );
    let tcomplete = g.wait_session_event(&s.id, "tool.complete", T);
    let rows = message_rows(&g.db_path(), &s.stored);
    assert!(
        rows.iter().any(|r| r.role == "tool"),
        "at tool.complete the tool row must be committed: {rows:#?}"
    );
    // ... and when message.complete is seen, the final assistant message is too.
    let sid = s.id.clone();
    see_frame(
        &mut g,
        |f| event_type(f) == Some("message.complete") && f["params"]["session_id"] == sid.as_str(),
        T,
    );
    let rows = message_rows(&g.db_path(), &s.stored);
    assert_eq!(
        rows.len(),
        4,
        "at message.complete the final assistant row must be committed: {rows:#?}"
    );
    let turn = g.finish_turn(&s.id, start, T);
    // The command's supervisor and shell are gone once the result is out.
    assert_none_left(&format!("out-{m}"), secs(3), "a finished command");
    let ev = &turn.events;
    let ty = types(ev);
    assert_seq_increasing(ev);

    // Order: message.start, tool.generating, tool.start, (tool.progress|tool.output)*,
    // tool.complete, message.delta+, message.complete, session.info
    assert_eq!(ty[0], "message.start", "{ty:?}");
    assert_eq!(ty[1], "tool.generating", "{ty:?}");
    assert_eq!(payload_str(&ev[1], "name"), "terminal", "{:?}", ev[1]);
    assert_eq!(ty[2], "tool.start", "{ty:?}");
    let ci = ty
        .iter()
        .position(|t| t == "tool.complete")
        .expect("tool.complete");
    for t in &ty[3..ci] {
        assert!(
            t == "tool.output" || t == "tool.progress",
            "only live output between tool.start and tool.complete: {ty:?}"
        );
    }
    let mi = ty
        .iter()
        .position(|t| t == "message.complete")
        .expect("message.complete");
    assert!(
        mi > ci + 1,
        "the model's report must stream after tool.complete: {ty:?}"
    );
    for t in &ty[ci + 1..mi] {
        assert_eq!(t, "message.delta", "{ty:?}");
    }
    assert_eq!(ty[mi + 1], "session.info", "{ty:?}");
    assert_eq!(ty.len(), mi + 2, "nothing after session.info: {ty:?}");

    // tool.start
    let tool_id = payload_str(&tstart, "tool_id").to_string();
    assert!(!tool_id.is_empty());
    assert_eq!(payload_str(&tstart, "name"), "terminal", "{tstart}");
    // Labelled as Hermes labels it: the verb, the first command, how many follow.
    assert_eq!(
        payload_str(&tstart, "context"),
        format!("Running echo out-{m} + 2 commands"),
        "{tstart}"
    );
    // tool.output: live text of this tool
    let mut live = String::new();
    for e in &ev[3..ci] {
        assert_eq!(payload_str(e, "tool_id"), tool_id, "{e}");
        if e["type"] == "tool.progress" {
            // The live preview the TUI shows on the tool's row: a line the command printed.
            let preview = payload_str(e, "preview");
            assert!(preview.ends_with(&m.to_string()), "{e}");
        } else {
            live.push_str(payload_str(e, "text"));
        }
    }
    assert!(
        live.contains(&format!("out-{m}")) && live.contains(&format!("err-{m}")),
        "tool.output text {live:?}"
    );
    // tool.complete
    let p = &tcomplete["payload"];
    assert_eq!(p["tool_id"], tool_id.as_str(), "{tcomplete}");
    assert_eq!(p["name"], "terminal", "{tcomplete}");
    assert_eq!(p["args"], json!({"command": cmd}), "{tcomplete}");
    let d = p["duration_s"].as_f64().expect("duration_s number");
    assert!((0.0..10.0).contains(&d), "duration_s {d}");
    let res = &p["result"];
    assert_eq!(res["exit_code"], 3, "{res}");
    assert!(res["error"].is_null(), "{res}");
    // What the TUI shows on the finished tool's row.
    assert_eq!(p["summary"], "exit 3 · 2 lines", "{tcomplete}");
    assert!(
        p.get("error").is_none(),
        "a command that ran is no error: {tcomplete}"
    );
    let out = res["output"].as_str().unwrap();
    assert!(out.contains(&format!("out-{m}\n")), "{out:?}");
    assert!(out.contains(&format!("err-{m}\n")), "{out:?}");

    // The model's report
    let complete = &turn.complete["payload"];
    assert_eq!(complete["status"], "complete", "{complete}");
    let deltas: String = ev[ci + 1..mi]
        .iter()
        .map(|e| payload_str(e, "text").to_string())
        .collect();
    assert_eq!(deltas, turn.text, "deltas vs message.complete text");
    assert!(
        turn.text.contains("exited with status 3") && turn.text.contains(&format!("out-{m}")),
        "final text {:?}",
        turn.text
    );
    assert_usage(&complete["usage"]);
    assert_eq!(ev[mi + 1]["payload"]["running"], false);

    // Transcript rows, in order
    let rows = message_rows(&g.db_path(), &s.stored);
    assert_eq!(rows.len(), 4, "exactly 4 rows: {rows:#?}");
    for w in rows.windows(2) {
        assert!(w[0].id < w[1].id);
        assert!(
            w[0].timestamp <= w[1].timestamp,
            "timestamps in order: {rows:#?}"
        );
    }
    let (u, a, t, f) = (&rows[0], &rows[1], &rows[2], &rows[3]);
    assert_eq!(u.role, "user");
    assert_eq!(u.content.as_deref(), Some(prompt.as_str()));

    assert_eq!(a.role, "assistant");
    assert!(
        a.content.is_none(),
        "tool-call row content must be NULL: {a:?}"
    );
    assert_eq!(a.finish_reason.as_deref(), Some("tool_calls"), "{a:?}");
    let calls: Value =
        serde_json::from_str(a.tool_calls.as_deref().expect("tool_calls JSON")).unwrap();
    let calls = calls.as_array().expect("tool_calls is an array");
    assert_eq!(calls.len(), 1, "{calls:?}");
    let c = &calls[0];
    assert_eq!(c["id"], tool_id.as_str(), "{c}");
    assert_eq!(c["type"], "function", "{c}");
    assert_eq!(c["function"]["name"], "terminal", "{c}");
    let args: Value = serde_json::from_str(
        c["function"]["arguments"]
            .as_str()
            .expect("arguments string"),
    )
    .unwrap();
    assert_eq!(args["command"], cmd.as_str(), "{c}");

    assert_eq!(t.role, "tool");
    assert_eq!(t.tool_call_id.as_deref(), Some(tool_id.as_str()), "{t:?}");
    assert_eq!(t.tool_name.as_deref(), Some("terminal"), "{t:?}");
    let tc: Value = serde_json::from_str(t.content.as_deref().unwrap()).unwrap();
    assert_eq!(tc["exit_code"], 3, "{tc}");
    assert!(tc["error"].is_null(), "{tc}");
    assert_eq!(
        tc["output"], res["output"],
        "tool row output vs tool.complete: {tc}"
    );

    assert_eq!(f.role, "assistant");
    assert_eq!(f.content.as_deref(), Some(turn.text.as_str()), "{f:?}");
    assert!(f.tool_calls.is_none(), "{f:?}");
    g.assert_clean_stdout();
}

#[test]
fn command_runs_in_the_session_cwd() {
    let dir = TempHome::new("cwd");
    let mut g = Gateway::start();
    let cwd = dir.path.to_str().unwrap().to_string();
    let s = g.create_session(json!({"cwd": cwd}));
    let start = submit(&mut g, &s.id, "$ pwd");
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    let out = output_of(&c);
    let real = std::fs::canonicalize(&dir.path).unwrap();
    assert!(
        out.trim() == cwd || out.trim() == real.to_str().unwrap(),
        "pwd printed {out:?}, session cwd {cwd:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Timeout
// ---------------------------------------------------------------------------------------------

#[test]
fn command_timeout_gives_124_and_a_note_and_kills_the_group() {
    let m = marker();
    let _r = Reaper(format!("3519.{m}"));
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_COMMAND_TIMEOUT_S", "1")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, &format!("$ echo before-{m}; sleep 3519.{m}"));
    let sleeps = wait_for_procs("sleep", &format!("3519.{m}"), 1, T);
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    let res = tool_result(&c);
    assert_eq!(res["exit_code"], 124, "{c}");
    let out = output_of(&c);
    assert!(
        out.contains(&format!("before-{m}")),
        "partial output kept: {out:?}"
    );
    assert!(
        out.trim_end().ends_with("[Command timed out after 1s]"),
        "timeout note: {out:?}"
    );
    let d = c["payload"]["duration_s"].as_f64().unwrap();
    assert!((0.9..6.0).contains(&d), "duration_s {d} for a 1 s timeout");
    wait_gone(
        &sleeps.iter().map(|p| p.pid).collect::<Vec<_>>(),
        secs(3),
        "timed-out command",
    );
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(
        turn.complete["payload"]["status"], "complete",
        "{}",
        turn.complete
    );
    assert!(
        turn.text.contains("124"),
        "the model reports the status: {:?}",
        turn.text
    );
    let row = stored_tool_result(&g, &s.stored, &c);
    assert_eq!(row["exit_code"], 124, "{row}");
    assert_eq!(row["output"], res["output"], "{row}");
}

// ---------------------------------------------------------------------------------------------
// Interrupt
// ---------------------------------------------------------------------------------------------

#[test]
fn interrupt_kills_every_sleep_records_130_and_runs_the_queued_prompt() {
    let m = marker();
    let needle = format!("300.{m}");
    let _r = Reaper(needle.clone());
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let cmd = format!("echo partial-{m}; bash -c 'sleep 300.{m} & sleep 300.{m}; wait'");
    let start = submit(&mut g, &s.id, &format!("$ {cmd}"));
    let sleeps = wait_for_procs("sleep", &needle, 2, T);
    // The command runs in its own session and process group, not the gateway's.
    let gw = proc_info(g.pid() as i32).expect("gateway in /proc");
    for p in &sleeps {
        assert_ne!(
            p.pgid,
            gw.pgid,
            "command in the gateway's process group:\n{}",
            describe(&sleeps)
        );
        assert_ne!(
            p.sid,
            gw.sid,
            "command in the gateway's session:\n{}",
            describe(&sleeps)
        );
    }
    // every process of the command (supervisor, shells, sleeps)
    let all: Vec<i32> = procs_matching(&needle).iter().map(|p| p.pid).collect();
    wait_output_containing(&mut g, &s.id, &format!("partial-{m}"), T);

    let q = g.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": format!("queued-after-{m}")}),
    );
    assert_eq!(q["status"], "queued", "prompt while a tool runs: {q}");

    let t0 = Instant::now();
    let r = g.call("session.interrupt", json!({"session_id": s.id}));
    assert_eq!(r["status"], "interrupted", "{r}");
    let took = wait_gone(&all, secs(5), "interrupted command");
    eprintln!(
        "interrupt: every process gone {:?} after session.interrupt",
        t0.elapsed()
    );
    let _ = took;

    let c = g.wait_session_event(&s.id, "tool.complete", T);
    let res = tool_result(&c);
    assert_eq!(res["exit_code"], 130, "{c}");
    let out = output_of(&c);
    assert!(
        out.contains(&format!("partial-{m}")),
        "partial output kept: {out:?}"
    );
    assert!(
        out.trim_end().ends_with("[Command interrupted]"),
        "interrupt note: {out:?}"
    );
    let mc = g.wait_session_event(&s.id, "message.complete", T);
    assert_eq!(mc["payload"]["status"], "interrupted", "{mc}");
    let info = g.wait_session_event(&s.id, "session.info", T);
    assert_eq!(info["payload"]["running"], false, "{info}");
    let ev = g.events_of_session_from(&s.id, start);
    let ty = types(&ev);
    let tc = ty.iter().position(|t| t == "tool.complete").unwrap();
    let mci = ty.iter().position(|t| t == "message.complete").unwrap();
    assert!(tc < mci, "tool.complete before message.complete: {ty:?}");

    // The queued prompt runs next, as a complete turn of its own.
    let mseq = mc["seq"].as_u64();
    let sid2 = s.id.clone();
    g.wait_frame(
        move |f| {
            event_type(f) == Some("message.start")
                && f["params"]["session_id"] == sid2.as_str()
                && f["params"]["seq"].as_u64() > mseq
        },
        T,
    )
    .unwrap_or_else(|| panic!("the queued prompt did not start\n{}", g.diag()));
    let qc = g.wait_session_event(&s.id, "message.complete", T);
    assert_eq!(qc["payload"]["status"], "complete", "{qc}");
    assert!(
        qc["payload"]["text"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("queued-after-{m}")),
        "{qc}"
    );
    g.wait_session_event(&s.id, "session.info", T);

    // Transcript: user, assistant call, tool (130), [assistant?], user (queued), assistant
    let tool_id = c["payload"]["tool_id"].as_str().unwrap();
    let row = tool_row_content(&g.db_path(), &s.stored, tool_id);
    assert_eq!(row["exit_code"], 130, "{row}");
    assert!(
        row["output"]
            .as_str()
            .unwrap_or("")
            .contains("[Command interrupted]"),
        "{row}"
    );
    let rows = message_rows(&g.db_path(), &s.stored);
    let users: Vec<&str> = rows
        .iter()
        .filter(|r| r.role == "user")
        .map(|r| r.content.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(users.len(), 2, "{rows:#?}");
    assert_eq!(users[1], format!("queued-after-{m}"));
}

#[test]
fn command_ignoring_sigterm_gets_sigkill_after_the_kill_grace() {
    let m = marker();
    let needle = format!("3518.{m}");
    let _r = Reaper(needle.clone());
    let grace = 1.0;
    let mut g = Gateway::builder()
        .env("TUI_GATEWAY_KILL_GRACE_S", "1")
        .start();
    let s = g.create_session(json!({}));
    let start = submit(
        &mut g,
        &s.id,
        &format!("$ trap '' TERM; echo armed-{m}; sleep 3518.{m}; echo after-{m}"),
    );
    let sleeps = wait_for_procs("sleep", &needle, 1, T);
    let all: Vec<i32> = procs_matching(&needle).iter().map(|p| p.pid).collect();
    wait_output_containing(&mut g, &s.id, &format!("armed-{m}"), T);

    let t0 = Instant::now();
    let r = g.call("session.interrupt", json!({"session_id": s.id}));
    assert_eq!(r["status"], "interrupted", "{r}");
    // The sleep ignores SIGTERM (inherited SIG_IGN): only the SIGKILL after the grace ends it.
    wait_gone(&[sleeps[0].pid], secs(6), "TERM-ignoring sleep");
    let took = t0.elapsed();
    eprintln!("TERM-ignoring sleep gone {took:?} after session.interrupt (grace {grace}s)");
    assert!(
        took.as_secs_f64() >= grace * 0.9,
        "the sleep ignores SIGTERM, so it cannot be gone before the kill grace ({took:?})"
    );
    assert!(
        took.as_secs_f64() < grace + 3.0,
        "SIGKILL must follow the kill grace promptly ({took:?})"
    );
    wait_gone(&all, secs(3), "TERM-ignoring command");

    let c = g.wait_session_event(&s.id, "tool.complete", T);
    assert_eq!(tool_result(&c)["exit_code"], 130, "{c}");
    let out = output_of(&c);
    assert!(out.contains(&format!("armed-{m}")), "{out:?}");
    assert!(!out.contains(&format!("after-{m}")), "{out:?}");
    assert!(out.trim_end().ends_with("[Command interrupted]"), "{out:?}");
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(
        turn.complete["payload"]["status"], "interrupted",
        "{}",
        turn.complete
    );
    let row = stored_tool_result(&g, &s.stored, &c);
    assert_eq!(row["exit_code"], 130, "result recorded: {row}");
}

// ---------------------------------------------------------------------------------------------
// Output flood
// ---------------------------------------------------------------------------------------------

#[test]
fn output_flood_keeps_memory_bounded_and_ping_answered() {
    const CAP_KIB: u64 = 64 * 1024;
    const BYTES: u64 = 300_000_000;
    let m = marker();
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let gpid = g.pid();
    let cmd = format!("head -c {BYTES} /dev/zero | tr '\\0' a; echo; echo flood-done-{m}");
    submit(&mut g, &s.id, &format!("$ {cmd}"));
    // From here on frames are read unlogged (the harness log would otherwise hold every
    // tool.output of the flood).
    let is_ev = |f: &Value, ty: &str| {
        event_type(f) == Some(ty) && f["params"]["session_id"] == s.id.as_str()
    };
    let mut complete: Option<Value> = None;
    let mut final_text: Option<Value> = None;
    let mut pings_during = 0usize;
    let mut lat_max = Duration::ZERO;
    let mut lats = Vec::new();
    let mut rss_max = 0u64;
    let mut output_events = 0usize;
    let mut output_bytes = 0usize;
    let mut max_event_text = 0usize;
    let flood_start = Instant::now();
    let deadline = flood_start + secs(120);
    while complete.is_none() {
        assert!(
            Instant::now() < deadline,
            "flood did not finish within 120 s\n{}",
            g.diag()
        );
        let id = g.send_request("ping", json!({}));
        let sent = Instant::now();
        let mut answered = false;
        while !answered {
            let f = g.recv_unlogged(secs(10)).unwrap_or_else(|| {
                panic!(
                    "no frame for 10 s during the flood (ping {id} unanswered)\n{}",
                    g.diag()
                )
            });
            if f.get("id") == Some(&id) && is_response(&f) {
                assert_eq!(f["result"], json!({"pong": true}), "{f}");
                let l = sent.elapsed();
                lats.push(l);
                lat_max = lat_max.max(l);
                answered = true;
            } else if is_ev(&f, "tool.output") {
                output_events += 1;
                let n = f["params"]["payload"]["text"]
                    .as_str()
                    .map(|t| t.len())
                    .unwrap_or(0);
                output_bytes += n;
                max_event_text = max_event_text.max(n);
            } else if is_ev(&f, "tool.complete") {
                complete = Some(f["params"].clone());
            } else if is_ev(&f, "message.complete") {
                final_text = Some(f["params"]["payload"].clone());
            }
        }
        if complete.is_none() {
            pings_during += 1;
        }
        if let Some((rss, _)) = rss_hwm_kib(gpid) {
            rss_max = rss_max.max(rss);
            assert!(
                rss < CAP_KIB,
                "gateway VmRSS {rss} KiB during the flood (cap {CAP_KIB} KiB)"
            );
        }
    }
    let flood_took = flood_start.elapsed();
    let c = complete.unwrap();
    // the rest of the turn
    while final_text.is_none() {
        let f = g
            .recv_unlogged(T)
            .unwrap_or_else(|| panic!("no message.complete after the flood"));
        if is_ev(&f, "message.complete") {
            final_text = Some(f["params"]["payload"].clone());
        }
    }
    let (rss, hwm) = rss_hwm_kib(gpid).unwrap();
    lats.sort();
    let p99 = lats[(lats.len() * 99 / 100).min(lats.len() - 1)];
    eprintln!(
        "flood: {BYTES} bytes in {flood_took:?}; {pings_during} pings answered during it, max latency \
         {lat_max:?}, p99 {p99:?}; VmRSS max sampled {rss_max} KiB, now {rss} KiB, VmHWM {hwm} KiB; \
         {output_events} tool.output events, {output_bytes} bytes, largest {max_event_text}"
    );
    assert!(
        hwm < CAP_KIB,
        "gateway peak RSS (VmHWM) {hwm} KiB over the {CAP_KIB} KiB cap"
    );
    assert!(
        pings_during >= 3,
        "ping must keep being answered during the flood ({pings_during} answered before tool.complete in {flood_took:?})"
    );
    assert!(
        lat_max < secs(2),
        "ping latency during the flood {lat_max:?}"
    );
    assert!(
        (output_bytes as u64) < BYTES,
        "tool.output must not forward the whole flood ({output_bytes} bytes)"
    );

    let res = tool_result(&c);
    assert_eq!(res["exit_code"], 0, "{}", truncate(&c.to_string(), 400));
    let out = output_of(&c);
    assert!(
        out.len() < 64 * 1024,
        "captured output is capped: {} bytes",
        out.len()
    );
    assert!(
        out.starts_with("aaaa"),
        "head kept: {}",
        truncate(&out, 100)
    );
    assert!(
        out.contains(&format!("flood-done-{m}")),
        "tail kept: ...{}",
        &out[out.len().saturating_sub(200)..]
    );
    let cut = out
        .split("[... ")
        .nth(1)
        .and_then(|r| r.split(" bytes of output cut ...]").next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no cut note in the output: {}", truncate(&out, 200)));
    assert!(
        cut > BYTES - 64 * 1024 && cut < BYTES,
        "cut count {cut} for {BYTES} bytes"
    );
    assert_eq!(final_text.unwrap()["status"], "complete");
    // the gateway still answers
    g.ping();
}

// ---------------------------------------------------------------------------------------------
// No orphans after SIGKILL of the gateway
// ---------------------------------------------------------------------------------------------

#[test]
fn sigkill_of_the_gateway_leaves_no_process_behind() {
    let m = marker();
    let needle = format!(".{m}");
    let _r = Reaper(needle.clone());
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    submit(
        &mut g,
        &s.id,
        &format!("$ setsid sleep 301.{m} & sleep 300.{m}; wait"),
    );
    let sleeps = wait_for_procs("sleep", &needle, 2, T);
    let a = sleeps.iter().find(|p| p.cmdline.contains("300.")).unwrap();
    let b = sleeps.iter().find(|p| p.cmdline.contains("301.")).unwrap();
    assert_ne!(
        a.sid,
        b.sid,
        "setup: the grandchild must have left the session:\n{}",
        describe(&sleeps)
    );
    let mut all = procs_matching(&needle);
    // The zygote (the gateway's child) and the command's supervisor (the zygote's child) must
    // go too.
    let gateway = g.pid() as i32;
    let zygotes: Vec<Proc> = procs_matching("__tui_gateway_zygote")
        .into_iter()
        .filter(|p| p.ppid == gateway)
        .collect();
    assert_eq!(
        zygotes.len(),
        1,
        "one zygote per gateway:\n{}",
        describe(&zygotes)
    );
    let supervisors: Vec<Proc> = procs_matching("__tui_gateway_zygote")
        .into_iter()
        .filter(|p| p.ppid == zygotes[0].pid)
        .collect();
    assert_eq!(supervisors.len(), 1, "{}", describe(&supervisors));
    all.extend(zygotes);
    all.extend(supervisors);
    eprintln!("processes of the command:\n{}", describe(&all));
    let pids: Vec<i32> = all.iter().map(|p| p.pid).collect();

    let t0 = Instant::now();
    g.signal(libc::SIGKILL);
    let took = wait_gone(&pids, secs(1), "after SIGKILL of the gateway");
    eprintln!(
        "all {} processes gone {took:?} after SIGKILL ({:?} incl. polling)",
        pids.len(),
        t0.elapsed()
    );
    g.wait_exit(secs(5));
    assert!(
        procs_matching(&needle).is_empty(),
        "{}",
        describe(&procs_matching(&needle))
    );
}

// ---------------------------------------------------------------------------------------------
// Environment and stdin
// ---------------------------------------------------------------------------------------------

#[test]
fn environment_is_scrubbed_of_secrets() {
    let m = marker();
    let secrets = [
        "FOO_API_KEY",
        "GITHUB_TOKEN",
        "MY_SECRET",
        "DB_PASSWORD",
        "LDAP_PASSWD",
        "AWS_CREDENTIALS_FILE",
        "PROXY_AUTH",
        "BROWSER_COOKIE",
        "CLAUDE_SESSION_ID",
        "GPG_PRIVATE_PATH",
        "SSH_KEY_PATH",
    ];
    let mut b = Gateway::builder();
    for (i, k) in secrets.iter().enumerate() {
        b = b.env(k, &format!("sekrit-{m}-{i}"));
    }
    b = b.env("TUIGW_HARMLESS", &format!("visible-{m}"));
    let mut g = b.start();
    let s = g.create_session(json!({}));
    let start = submit(&mut g, &s.id, "$ env");
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    let out = output_of(&c);
    assert!(
        out.lines()
            .any(|l| l == format!("TUIGW_HARMLESS=visible-{m}")),
        "harmless variable must be passed on: {out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("PATH=")),
        "PATH kept: {out}"
    );
    for (i, k) in secrets.iter().enumerate() {
        assert!(
            !out.contains(&format!("sekrit-{m}-{i}"))
                && !out.lines().any(|l| l.starts_with(&format!("{k}="))),
            "secret {k} leaked into the command's environment:\n{out}"
        );
    }
}

#[test]
fn command_stdin_is_dev_null() {
    let m = marker();
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let start = submit(
        &mut g,
        &s.id,
        &format!("$ readlink /proc/self/fd/0; cat; echo cat-rc-$?-{m}"),
    );
    // The default command timeout is 180 s: a cat reading anything but /dev/null would hold
    // the turn far past this deadline.
    let c = g.wait_session_event(&s.id, "tool.complete", secs(10));
    g.finish_turn(&s.id, start, T);
    let out = output_of(&c);
    assert!(out.contains("/dev/null"), "stdin of the command: {out:?}");
    assert!(out.contains(&format!("cat-rc-0-{m}")), "{out:?}");
    assert_eq!(tool_result(&c)["exit_code"], 0, "{c}");
    assert!(c["payload"]["duration_s"].as_f64().unwrap() < 5.0, "{c}");
    // the gateway's own stdin was not handed to the command
    g.ping();
    g.ping();
}

// ---------------------------------------------------------------------------------------------
// Pipes held open by a grandchild; live output; binary output; sessions in parallel
// ---------------------------------------------------------------------------------------------

#[test]
fn grandchild_holding_the_pipe_does_not_hold_the_turn_nor_outlive_the_gateway() {
    let m = marker();
    let needle = format!(".{m}");
    let _r = Reaper(needle.clone());
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    // The leader exits at once; one background sleep keeps stdout open, another left the
    // session with its output elsewhere.
    let start = submit(
        &mut g,
        &s.id,
        &format!(
            "$ (sleep 3521.{m} &); setsid sleep 3522.{m} >/dev/null 2>&1 & echo leader-done-{m}"
        ),
    );
    // The default command timeout is 180 s: a turn waiting for the pipe's EOF would hold far
    // past this deadline.
    let c = g.wait_session_event(&s.id, "tool.complete", secs(10));
    let out = output_of(&c);
    assert!(out.contains(&format!("leader-done-{m}")), "{out:?}");
    assert_eq!(tool_result(&c)["exit_code"], 0, "{c}");
    assert!(c["payload"]["duration_s"].as_f64().unwrap() < 5.0, "{c}");
    g.finish_turn(&s.id, start, T);
    eprintln!(
        "after tool.complete, still running:\n{}",
        describe(&procs_matching(&needle))
    );
    // Whatever the policy for leftovers after the leader exits, none outlives the gateway.
    g.close_stdin();
    let st = g.wait_exit(secs(10));
    assert!(st.success(), "gateway exit {st:?}");
    assert_none_left(&needle, secs(2), "the command after the gateway's exit");
}

#[test]
fn tool_output_is_live_complete_and_rate_bounded() {
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    // 100 lines over at least one second
    let start = submit(
        &mut g,
        &s.id,
        "$ for i in $(seq 1 100); do echo line-$i; sleep 0.01; done",
    );
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    let ev = g.events_of_session_from(&s.id, start);
    let outs: Vec<&Value> = ev.iter().filter(|e| e["type"] == "tool.output").collect();
    let live: String = outs
        .iter()
        .map(|e| e["payload"]["text"].as_str().unwrap_or(""))
        .collect();
    let expected: String = (1..=100).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(output_of(&c), expected, "result output");
    assert_eq!(
        live, expected,
        "the live output, concatenated, is the whole output"
    );
    let d = c["payload"]["duration_s"].as_f64().unwrap();
    eprintln!("{} tool.output events over {d} s", outs.len());
    assert!(
        outs.len() >= 2,
        "output must be streamed while the command runs, not at its end"
    );
    assert!(
        (outs.len() as f64) <= d * 10.0 + 5.0,
        "{} tool.output events in {d} s: the rate must be bounded (batched ~100 ms)",
        outs.len()
    );
}

#[test]
fn binary_output_becomes_valid_text() {
    let m = marker();
    let mut g = Gateway::start();
    let s = g.create_session(json!({}));
    let start = submit(
        &mut g,
        &s.id,
        &format!("$ printf '\\xff\\xfe\\x00\\x80 ok-{m}\\n'; head -c 4096 /dev/urandom"),
    );
    let c = g.wait_session_event(&s.id, "tool.complete", T);
    g.finish_turn(&s.id, start, T);
    assert!(output_of(&c).contains(&format!(" ok-{m}")), "{c}");
    let row = stored_tool_result(&g, &s.stored, &c);
    assert_eq!(row["output"], tool_result(&c)["output"]);
    g.assert_clean_stdout();
}

#[test]
fn a_running_tool_does_not_hold_other_sessions() {
    let m = marker();
    let needle = format!("3523.{m}");
    let _r = Reaper(needle.clone());
    let mut g = Gateway::start();
    let a = g.create_session(json!({}));
    let b = g.create_session(json!({}));
    let sa = submit(&mut g, &a.id, &format!("$ sleep 3523.{m}"));
    wait_for_procs("sleep", &needle, 1, T);
    let sb = submit(&mut g, &b.id, &format!("$ echo other-{m}"));
    let cb = g.wait_session_event(&b.id, "tool.complete", T);
    assert!(output_of(&cb).contains(&format!("other-{m}")), "{cb}");
    let tb = g.finish_turn(&b.id, sb, T);
    assert_eq!(tb.complete["payload"]["status"], "complete");
    // a is still running its tool
    assert!(
        !procs_named("sleep", &needle).is_empty(),
        "session a's tool ended early"
    );
    let list = g.call("session.active_list", json!({}));
    let st = list["sessions"]
        .as_array()
        .and_then(|v| v.iter().find(|e| e["id"] == a.id.as_str()))
        .map(|e| e["status"].clone());
    assert_eq!(st, Some(json!("working")), "{list}");
    g.call("session.interrupt", json!({"session_id": a.id}));
    let ta = g.finish_turn(&a.id, sa, T);
    assert_eq!(ta.complete["payload"]["status"], "interrupted");
}
