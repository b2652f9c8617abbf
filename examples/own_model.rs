//! An embedding host that brings its own model: the built-in offline model, except that a
//! prompt containing `panic-now` makes the model call panic; and its own tool, `host_fault`,
//! whose every call panics (the offline model calls it for the prompt `%host_fault`). The
//! gateway ends that one turn with an error and keeps serving every other session (the
//! fault-isolation tests use it).
//!
//! Run: `cargo run --example own_model` and type JSON-RPC frames.

use std::time::Instant;

use tui_gateway::model::offline::OfflineProvider;
use tui_gateway::model::{CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider};
use tui_gateway::session::transcript::Role;
use tui_gateway::tools::{Start, Tool, ToolContext};
use tui_gateway::{Config, Gateway, Io};

struct HostModel {
    inner: OfflineProvider,
}

/// A call that fails the way a bug in a model adapter would.
struct Faulty;

impl ModelCall for Faulty {
    fn advance(
        &mut self,
        _ctx: &mut CallContext<'_>,
        _now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        out.push(ModelEvent::Text("about to fail ".into()));
        panic!("the host's model adapter failed");
    }
    fn abort(&mut self, _ctx: &mut CallContext<'_>) {}
}

impl Provider for HostModel {
    fn name(&self) -> &str {
        "host"
    }
    fn default_model(&self) -> &str {
        "host-model"
    }
    fn start(
        &mut self,
        req: ModelRequest<'_>,
        ctx: &mut CallContext<'_>,
        now: Instant,
    ) -> Box<dyn ModelCall> {
        let asked = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .and_then(|m| m.content.as_deref())
            .unwrap_or("");
        if asked.contains("panic-now") {
            return Box::new(Faulty);
        }
        self.inner.start(req, ctx, now)
    }
}

/// A tool whose start fails the way a bug in a host's tool would.
struct FaultyTool;

impl Tool for FaultyTool {
    fn name(&self) -> &str {
        "host_fault"
    }
    fn description(&self) -> &str {
        "Fail inside the host."
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {}})
    }
    fn start(&mut self, _ctx: &mut ToolContext<'_>, _args: &serde_json::Value) -> Start {
        panic!("the host's tool failed");
    }
}

fn main() {
    tui_gateway::runner::supervisor::run_if_requested();
    let cfg = Config::from_env().unwrap_or_else(|e| {
        eprintln!("[host] bad environment: {e}");
        std::process::exit(2)
    });
    let delay = cfg.offline_word_delay;
    let io = Io::stdio().expect("stdin/stdout");
    let mut gateway = Gateway::new(cfg, io).unwrap_or_else(|e| {
        eprintln!("[host] gateway failed to start: {e}");
        std::process::exit(1)
    });
    gateway.set_provider(Box::new(HostModel {
        inner: OfflineProvider::new(delay),
    }));
    if let Err(e) = gateway.register_tool(Box::new(FaultyTool)) {
        eprintln!("[host] {e}");
    }
    if let Err(e) = gateway.install_signals(false) {
        eprintln!("[host] {e}");
    }
    std::process::exit(gateway.run());
}
