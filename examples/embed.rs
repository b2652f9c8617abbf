//! Embedding the gateway in another Rust program.
//!
//! The host installs its own SIGTERM handler first; the gateway's signal handling chains to it
//! (signal-hook calls the handler that was installed before), so on SIGTERM the gateway runs
//! its ordered shutdown *and* the host's handler runs. Pass `--no-signals` to leave signals to
//! the host entirely.
//!
//! The host also offers the model a tool of its own, `host_note`, next to the built-in
//! `terminal` (the offline model calls it with a prompt `%host_note {"text": "..."}`).
//!
//! Run: `cargo run --example embed` and type JSON-RPC frames, e.g.
//! `{"jsonrpc":"2.0","id":1,"method":"ping"}`.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use tui_gateway::tools::{Start, Tool, ToolContext, ToolResult};
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
    if let Err(e) = gateway.register_tool(Box::new(HostNote::default())) {
        eprintln!("[host] {e}");
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
