//! `tui-gateway`: serve (default), chat, exec, sessions.

use std::process::ExitCode;

use tui_gateway::cli::out::write_stdout;
use tui_gateway::rpc::listener::{Bind, Listener};
use tui_gateway::{Config, Gateway, Io};

const USAGE: &str = "usage:
  tui-gateway [serve] [FLAGS]        speak JSON-RPC on stdin/stdout (what the TUI spawns); with
                                     --persistent on, relay them to the home's persistent gateway
  tui-gateway daemon [FLAGS]         the home's persistent gateway, on $HERMES_HOME/tui-gateway.sock
  tui-gateway chat [--resume ID]     a line-mode chat through a gateway child
  tui-gateway exec PROMPT | --tasks FILE.jsonl   run tasks headless (see exec --help)
  tui-gateway sessions list          stored sessions, most recent first
  tui-gateway sessions show ID       a stored session's transcript
flags:
";

const SERVE_USAGE: &str = "usage: tui-gateway [serve] [FLAGS]
  speak JSON-RPC on stdin/stdout; every flag can also be set by its environment variable
flags:
";

fn main() -> ExitCode {
    tui_gateway::heap::return_big_buffers();
    // A command's supervisor is this binary re-executed in a hidden mode.
    tui_gateway::runner::supervisor::run_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The tools this process runs (as the same user) must not read its secrets: not its
    // environment or memory (not dumpable), not its command line (secrets overwritten).
    tui_gateway::runner::secrets::forbid_inspection();
    tui_gateway::runner::secrets::redact_command_line();
    let code = match args.first().map(String::as_str) {
        None | Some("serve") => serve(args.get(1..).unwrap_or_default(), Mode::Stdio),
        // How the TUI launches its Python gateway: `<program> -m tui_gateway.entry`.
        Some("-m") => serve(args.get(2..).unwrap_or_default(), Mode::Stdio),
        Some("daemon") => serve(&args[1..], Mode::Daemon),
        Some("chat") => tui_gateway::cli::chat::run(&args[1..]),
        Some("exec") => tui_gateway::cli::exec::run(&args[1..]),
        Some("sessions") => tui_gateway::cli::sessions::run(&args[1..]),
        Some("-h" | "--help" | "help") => write_stdout(&format!("{USAGE}{}", Config::help())),
        Some(a) if a.starts_with("--") => serve(&args, Mode::Stdio),
        Some(other) => {
            eprintln!("unknown command {other:?}\n{USAGE}{}", Config::help());
            2
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

enum Mode {
    /// The client on stdin/stdout (or a relay to the persistent gateway, when it is on).
    Stdio,
    /// The home's persistent gateway, its clients on its socket.
    Daemon,
}

fn serve(args: &[String], mode: Mode) -> i32 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return write_stdout(&format!("{SERVE_USAGE}{}", Config::help()));
    }
    let mut cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("[gateway-exit] bad environment: {e}");
            return 2;
        }
    };
    match cfg
        .apply_flags(args)
        .and_then(|rest| cfg.overlay_dotenv(args).map(|()| rest))
    {
        Ok(rest) if rest.is_empty() => {}
        Ok(rest) => {
            eprintln!("[gateway-exit] unknown arguments: {}", rest.join(" "));
            return 2;
        }
        Err(e) => {
            eprintln!("[gateway-exit] {e}");
            return 2;
        }
    }
    let listener = match mode {
        Mode::Stdio if cfg.is_persistent() => return tui_gateway::cli::relay::run(&cfg, args),
        Mode::Stdio => None,
        Mode::Daemon => match Listener::bind(&cfg.home) {
            Ok(Bind::Bound(l)) => {
                // Each client holds three descriptors (its two pipes and its relay's socket).
                raise_descriptor_limit();
                Some(l)
            }
            Ok(Bind::Taken) => {
                // The relay that started this one connects to the one that serves.
                println!("taken");
                eprintln!(
                    "[gateway-exit] a persistent gateway already serves {}",
                    cfg.home.display()
                );
                return 0;
            }
            Err(e) => {
                eprintln!("[gateway-exit] {e}");
                return 1;
            }
        },
    };
    let io = match Io::stdio() {
        Ok(io) => io,
        Err(e) => {
            eprintln!("[gateway-exit] cannot use stdin/stdout: {e}");
            return 1;
        }
    };
    // A panic report must not block on a stderr nobody reads: it goes the diagnostics' way.
    std::panic::set_hook(Box::new(|info| {
        let trace = std::backtrace::Backtrace::capture();
        tui_gateway::diag::line(&format!("[gateway-panic] {info}\n{trace}"));
    }));
    let handle_signals = cfg.handle_signals;
    // Under a UI (stdin not a terminal) the UI owns Ctrl-C and sends session.interrupt.
    let stdin_is_tty = std::io::IsTerminal::is_terminal(&std::io::stdin());
    if handle_signals && !stdin_is_tty && !tui_gateway::signals::is_ignored(libc::SIGINT) {
        tui_gateway::signals::ignore(libc::SIGINT);
    }
    let mut gw = match Gateway::new(cfg, io) {
        Ok(gw) => gw,
        Err(e) => {
            eprintln!("[gateway-exit] {e}");
            return 1;
        }
    };
    if handle_signals && let Err(e) = gw.install_signals(stdin_is_tty) {
        eprintln!("[gateway-exit] {e}");
        return 1;
    }
    if let Some(listener) = listener
        && let Err(e) = gw.listen(listener)
    {
        eprintln!("[gateway-exit] {e}");
        return 1;
    }
    // Once started, the code only the start ran need not stay mapped (heap.rs).
    tui_gateway::heap::release_start_pages_when_idle();
    gw.run()
}

/// The soft limit on open descriptors up to the hard one: a persistent gateway's clients each
/// hold three, and the default soft limit (often 1,024) would refuse the 342nd.
fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        eprintln!("[gateway] cannot raise the open-file limit from {soft}: {e}");
    }
}
