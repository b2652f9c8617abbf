//! Embedding the gateway in another Rust program.
//!
//! The host installs its own SIGTERM handler first; the gateway's signal handling chains to it
//! (signal-hook calls the handler that was installed before), so on SIGTERM the gateway runs
//! its ordered shutdown *and* the host's handler runs. Pass `--no-signals` to leave signals to
//! the host entirely.
//!
//! The host also offers the model tools of its own next to the built-in ones: `host_note`,
//! answered at once (the offline model calls it with a prompt `%host_note {"text": "..."}`),
//! and `host_sum`, whose work runs on a thread of the host and finishes the call later through
//! the call's `JobWaker` (`%host_sum {"n": 1000}`): the gateway's loop never waits for it.
//!
//! Run: `cargo run --example embed` and type JSON-RPC frames, e.g.
//! `{"jsonrpc":"2.0","id":1,"method":"ping"}`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use serde_json::{Value, json};
use tui_gateway::tools::{JobId, Start, Tool, ToolContext, ToolResult};
use tui_gateway::{Config, Gateway, Io};

/// The host's tool: it keeps the notes the model hands it and says how many it holds.
#[derive(Default)]
struct HostNote {
    notes: Vec<String>,
}

impl Tool for HostNote {
    fn name(&self) -> &str {
        "host_note"
    }
    fn toolset(&self) -> &str {
        "host"
    }
    fn description(&self) -> &str {
        "Hand the embedding host a note to keep. Returns how many notes it holds."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The note."}},
            "required": ["text"]
        })
    }
    fn start(&mut self, _ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let Some(text) = args.get("text").and_then(Value::as_str) else {
            return Start::Done(ToolResult::failed(
                "invalid arguments: text (a string) is required",
            ));
        };
        self.notes.push(text.to_string());
        let held = self.notes.len();
        let mut result = ToolResult::new(
            json!({"kept": text, "notes_held": held, "by": "the embedding host"}),
            format!("{held} note(s) held"),
        );
        // The client sees every note on the call's `tool.complete`; the model sees the result.
        result
            .event_fields
            .insert("notes".into(), json!(self.notes));
        Start::Done(result)
    }
}

/// The host's slow tool: the sum of 1..=n, computed on a thread; the thread wakes the call and
/// the gateway steps it to collect the answer.
#[derive(Default)]
struct HostSum {
    /// Each call's answer to come, and the flag that stops its thread.
    pending: HashMap<JobId, (mpsc::Receiver<u64>, Arc<AtomicBool>)>,
}

/// 1 + 2 + … + n, counted one by one (a stand-in for real work), given up when `stop` is set.
fn count_up(n: u64, stop: &AtomicBool) -> Option<u64> {
    let mut sum = 0u64;
    for x in 1..=n {
        if x % (1 << 20) == 0 && stop.load(Ordering::Relaxed) {
            return None;
        }
        sum = sum.wrapping_add(std::hint::black_box(x));
    }
    Some(sum)
}

impl Tool for HostSum {
    fn name(&self) -> &str {
        "host_sum"
    }
    fn toolset(&self) -> &str {
        "host"
    }
    fn description(&self) -> &str {
        "Add up 1..=n on the embedding host's own thread."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"n": {"type": "integer", "description": "How far to count."}},
            "required": ["n"]
        })
    }
    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let Some(n) = args.get("n").and_then(Value::as_u64) else {
            return Start::Done(ToolResult::failed(
                "invalid arguments: n (a whole number) is required",
            ));
        };
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (waker, stopped) = (ctx.waker(), stop.clone());
        std::thread::spawn(move || {
            if let Some(sum) = count_up(n, &stopped) {
                let _ = tx.send(sum);
                waker.wake();
            }
        });
        self.pending.insert(ctx.job, (rx, stop));
        Start::Later
    }
    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        let sum = self.pending.get(&ctx.job)?.0.try_recv().ok()?;
        self.pending.remove(&ctx.job);
        Some(ToolResult::new(json!({"sum": sum}), format!("sum {sum}")))
    }
    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        if let Some((_, stop)) = self.pending.remove(&job) {
            stop.store(true, Ordering::Relaxed);
        }
        Some(ToolResult::failed("interrupted"))
    }
}

static HOST_SAW_SIGTERM: AtomicBool = AtomicBool::new(false);

extern "C" fn host_on_sigterm(_: libc::c_int) {
    HOST_SAW_SIGTERM.store(true, Ordering::SeqCst);
}

fn main() {
    // Commands run under a supervisor that is this very binary re-executed: let it take over
    // before anything else happens.
    tui_gateway::runner::supervisor::run_if_requested();

    // SAFETY: installing a handler that only stores to an atomic is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            host_on_sigterm as *const () as libc::sighandler_t,
        );
    }

    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = Config::from_env().unwrap_or_else(|e| {
        eprintln!("[host] bad environment: {e}");
        std::process::exit(2)
    });
    if let Err(e) = cfg.apply_flags(&args) {
        eprintln!("[host] {e}");
        std::process::exit(2);
    }
    let handle_signals = cfg.handle_signals;
    let io = Io::stdio().expect("stdin/stdout");
    let mut gateway = Gateway::new(cfg, io).unwrap_or_else(|e| {
        eprintln!("[host] gateway failed to start: {e}");
        std::process::exit(1)
    });
    for tool in [
        Box::new(HostNote::default()) as Box<dyn Tool>,
        Box::new(HostSum::default()),
    ] {
        if let Err(e) = gateway.register_tool(tool) {
            eprintln!("[host] {e}");
        }
    }
    if handle_signals && let Err(e) = gateway.install_signals(false) {
        eprintln!("[host] {e}");
    }
    let code = gateway.run();
    if HOST_SAW_SIGTERM.load(Ordering::SeqCst) {
        eprintln!("[host] my SIGTERM handler ran too");
    }
    std::process::exit(code);
}
