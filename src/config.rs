//! The gateway's knobs: defaults, the environment names the Hermes gateway already uses, and flags.

use std::path::PathBuf;
use std::time::Duration;

/// Everything the gateway can be tuned with. Build it with [`Config::from_env`] and then
/// [`Config::apply_flags`], or fill it in directly when embedding.
#[derive(Debug, Clone)]
pub struct Config {
    /// `$HERMES_HOME`: holds `state.db` and `config.yaml`.
    pub home: PathBuf,
    /// The partial text of streaming replies is written, and failed commits retried, at most
    /// once per interval.
    pub flush_interval: Duration,
    /// Budget for flushing every session at shutdown.
    pub exit_flush_budget: Duration,
    /// Time between SIGTERM and SIGKILL of a tool's process group.
    pub kill_grace: Duration,
    /// At most how often the free heap goes back to the system after work (zero: never).
    pub heap_trim_every: Duration,
    /// Run each command in a pid namespace of its own where the kernel allows it (`--tool-pidns`).
    pub tool_pidns: bool,
    /// After a session's first exchange, ask its model for a title (`--auto-title`; config.yaml's
    /// `auxiliary.title_generation.enabled: false` also turns it off).
    pub auto_title: bool,
    /// Hard deadline of the whole shutdown sequence.
    pub shutdown_grace: Duration,
    /// Sessions idle longer than this are flushed, ended and evicted from memory.
    pub session_ttl: Duration,
    /// Default timeout of a terminal command.
    pub command_timeout: Duration,
    /// Timeout of a `shell.exec` command (5002 past it).
    pub shell_timeout: Duration,
    /// Longest accepted input line, in bytes.
    pub frame_limit: usize,
    /// How long a peer that stopped reading stdout (with the out-queue full) is tolerated.
    pub stdout_stall: Duration,
    /// Out-queue size past which reading new work pauses and deltas coalesce.
    pub out_queue_cap: usize,
    /// Delay between words of the offline model (0: as fast as the loop runs).
    pub offline_word_delay: Duration,
    /// Bytes of recent events kept per session for `session.events.since`.
    pub event_ring: usize,
    /// Bytes of recent events kept for all sessions together.
    pub event_rings_total: usize,
    /// Bytes of events a session keeps once its turn has ended.
    pub event_ring_idle: usize,
    /// Largest journal (what state.db could not take yet), in bytes; past it the gateway holds
    /// its output until the store takes a commit.
    pub journal_cap: u64,
    /// `PRAGMA synchronous` value.
    pub synchronous: String,
    /// The provider asked for (Hermes' id or alias, or `offline`); unset: config.yaml's
    /// `model.provider`, else Hermes' `auto` order.
    pub provider: Option<String>,
    /// Model name for the network provider (`OPENAI_MODEL`, config.yaml `model.default`).
    pub model: Option<String>,
    /// OpenAI-compatible endpoint, e.g. `http://127.0.0.1:11434/v1` (provider `openai-api`,
    /// keyed by `OPENAI_API_KEY`).
    pub base_url: Option<String>,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    /// Retries of a model request answered 429 or 5xx.
    pub model_retries: u32,
    /// Model calls in one turn before it is stopped (Hermes' `max_turns`; a subagent's own
    /// `delegation.max_iterations` applies to it instead).
    pub max_turns: u32,
    /// First backoff between retries (doubling), unless the server says `Retry-After`.
    pub retry_base: Duration,
    /// Longest wait between retries, whatever `Retry-After` says.
    pub retry_cap: Duration,
    /// How long a dangerous command waits for the user's approval before it is denied.
    pub approval_timeout: Duration,
    /// How long a `clarify` question waits for the user's answer (then the model reads that
    /// nobody answered).
    pub clarify_timeout: Duration,
    /// The least `delegation.child_timeout_seconds` that config.yaml can set (Hermes' 30 s).
    pub subagent_timeout_floor: Duration,
    /// Install signal handlers (turn off when the host program owns signals).
    pub handle_signals: bool,
    /// Append every frame read and written to this file (`--rpc-log`), one JSON line each.
    pub rpc_log: Option<PathBuf>,
    /// A directory with more entries than this is not snapshotted (Hermes' 50,000).
    pub checkpoint_max_files: usize,
    /// Run as a relay to the home's persistent gateway (started when absent), so sessions
    /// outlive the client (`--persistent`; unset: config.yaml's `tui_gateway.persistent`).
    pub persistent: Option<bool>,
    /// How long a persistent gateway with no client, no turn and no background process waits
    /// before it ends.
    pub idle_exit: Duration,
    /// How long a relay waits for the persistent gateway it started to listen.
    pub relay_start: Duration,
    /// Largest image file read for a prompt or `vision_analyze` (Hermes' 25 MB upload cap);
    /// one past Hermes' send bounds is made smaller before it is sent (`images/shrink.rs`).
    pub image_max_bytes: u64,
    /// Faults the store injects (the simulator, `tests/sim.rs`); never set from outside a test.
    #[doc(hidden)]
    pub store_faults: Option<crate::store::faults::FaultHook>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            home: default_home(),
            flush_interval: Duration::from_secs(1),
            exit_flush_budget: Duration::from_secs(2),
            kill_grace: Duration::from_millis(500),
            heap_trim_every: Duration::from_millis(1000),
            tool_pidns: true,
            auto_title: true,
            shutdown_grace: Duration::from_secs(3),
            session_ttl: Duration::from_secs(6 * 3600),
            command_timeout: Duration::from_secs(180),
            shell_timeout: Duration::from_secs(30),
            frame_limit: 16 * 1024 * 1024,
            stdout_stall: Duration::from_secs(30),
            out_queue_cap: 8 * 1024 * 1024,
            offline_word_delay: Duration::ZERO,
            event_ring: 1024 * 1024,
            event_rings_total: 16 * 1024 * 1024,
            event_ring_idle: 64 * 1024,
            journal_cap: 64 * 1024 * 1024,
            synchronous: "NORMAL".into(),
            provider: None,
            model: None,
            base_url: None,
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
            model_retries: 2,
            max_turns: crate::session::machine::MAX_ROUNDS,
            retry_base: Duration::from_millis(500),
            retry_cap: Duration::from_secs(30),
            approval_timeout: Duration::from_secs(300),
            clarify_timeout: Duration::from_secs(300),
            subagent_timeout_floor: Duration::from_secs(30),
            handle_signals: true,
            rpc_log: None,
            checkpoint_max_files: 50_000,
            image_max_bytes: 25 * 1024 * 1024,
            persistent: None,
            idle_exit: Duration::from_secs(600),
            relay_start: Duration::from_secs(10),
            store_faults: None,
        }
    }
}

fn default_home() -> PathBuf {
    match crate::util::user_home() {
        Some(h) => h.join(".hermes"),
        None => PathBuf::from(".hermes"),
    }
}

/// A knob: its flag, its environment variable (if any), and how to set it from text.
struct Knob {
    flag: &'static str,
    env: &'static str,
    /// The value in effect, for `--help` (which shows the defaults).
    show: fn(&Config) -> String,
    set: fn(&mut Config, &str) -> Result<(), String>,
}

fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// `on` or `off`.
fn on_off(v: &str) -> Result<bool, String> {
    crate::config_file::flag_text(v)
        .ok_or_else(|| format!("expected on or off, got {:?}", v.trim()))
}

/// A number of seconds between `lo` and `hi`: a knob outside a sane range is refused, not
/// accepted and then found to make every request fail.
fn seconds(v: &str, lo: f64, hi: f64) -> Result<Duration, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (lo..=hi).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("expected seconds from {lo} to {hi}, got {v:?}")),
    }
}

fn millis(v: &str, hi: u64) -> Result<Duration, String> {
    match v.trim().parse::<u64>() {
        Ok(ms) if ms <= hi => Ok(Duration::from_millis(ms)),
        _ => Err(format!("expected milliseconds from 0 to {hi}, got {v:?}")),
    }
}

fn count(v: &str, lo: usize, hi: usize) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a whole number from {lo} to {hi}, got {v:?}"
        )),
    }
}

const KNOBS: &[Knob] = &[
    Knob {
        flag: "--home",
        env: "HERMES_HOME",
        show: |c| c.home.display().to_string(),
        set: |c, v| {
            if v.is_empty() {
                return Err("empty path".into());
            }
            c.home = PathBuf::from(v);
            Ok(())
        },
    },
    Knob {
        flag: "--flush-interval",
        env: "HERMES_TUI_SESSION_FLUSH_INTERVAL_S",
        show: |c| secs(c.flush_interval),
        set: |c, v| {
            c.flush_interval = seconds(v, 0.01, 3600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--exit-flush-budget",
        env: "HERMES_TUI_EXIT_FLUSH_BUDGET_S",
        show: |c| secs(c.exit_flush_budget),
        set: |c, v| {
            c.exit_flush_budget = seconds(v, 0.0, 600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--kill-grace",
        env: "TUI_GATEWAY_KILL_GRACE_S",
        show: |c| secs(c.kill_grace),
        set: |c, v| {
            c.kill_grace = seconds(v, 0.01, 600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--shutdown-grace",
        env: "HERMES_TUI_GATEWAY_SHUTDOWN_GRACE_S",
        show: |c| secs(c.shutdown_grace),
        set: |c, v| {
            c.shutdown_grace = seconds(v, 0.1, 3600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--journal-cap-kb",
        env: "TUI_GATEWAY_JOURNAL_CAP_KB",
        show: |c| format!("{}", c.journal_cap / 1024),
        set: |c, v| {
            c.journal_cap = count(v, 16, 16 * 1024 * 1024)? as u64 * 1024;
            Ok(())
        },
    },
    Knob {
        flag: "--session-ttl",
        env: "HERMES_TUI_SESSION_TTL_S",
        show: |c| secs(c.session_ttl),
        set: |c, v| {
            c.session_ttl = seconds(v, 1.0, 2592000.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--command-timeout",
        env: "TUI_GATEWAY_COMMAND_TIMEOUT_S",
        show: |c| secs(c.command_timeout),
        set: |c, v| {
            c.command_timeout = seconds(v, 0.1, 604800.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--checkpoint-max-files",
        env: "TUI_GATEWAY_CHECKPOINT_MAX_FILES",
        show: |c| format!("{}", c.checkpoint_max_files),
        set: |c, v| {
            c.checkpoint_max_files = count(v, 1, 10_000_000)?;
            Ok(())
        },
    },
    Knob {
        flag: "--image-max-kb",
        env: "TUI_GATEWAY_IMAGE_MAX_KB",
        show: |c| (c.image_max_bytes / 1024).to_string(),
        set: |c, v| {
            c.image_max_bytes = count(v, 1, 1024 * 1024)? as u64 * 1024;
            Ok(())
        },
    },
    Knob {
        flag: "--shell-timeout",
        env: "TUI_GATEWAY_SHELL_TIMEOUT_S",
        show: |c| secs(c.shell_timeout),
        set: |c, v| {
            c.shell_timeout = seconds(v, 0.1, 86400.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--event-ring-kb",
        env: "TUI_GATEWAY_EVENT_RING_KB",
        show: |c| (c.event_ring / 1024).to_string(),
        set: |c, v| {
            c.event_ring = count(v, 16, 1024 * 1024)? * 1024;
            Ok(())
        },
    },
    Knob {
        flag: "--event-rings-total-kb",
        env: "TUI_GATEWAY_EVENT_RINGS_TOTAL_KB",
        show: |c| (c.event_rings_total / 1024).to_string(),
        set: |c, v| {
            c.event_rings_total = count(v, 64, 16 * 1024 * 1024)? * 1024;
            Ok(())
        },
    },
    Knob {
        flag: "--event-ring-idle-kb",
        env: "TUI_GATEWAY_EVENT_RING_IDLE_KB",
        show: |c| (c.event_ring_idle / 1024).to_string(),
        set: |c, v| {
            c.event_ring_idle = count(v, 0, 1024 * 1024)? * 1024;
            Ok(())
        },
    },
    Knob {
        flag: "--frame-limit",
        env: "TUI_GATEWAY_FRAME_LIMIT",
        show: |c| c.frame_limit.to_string(),
        set: |c, v| {
            c.frame_limit = count(v, 1024, 1 << 30)?;
            Ok(())
        },
    },
    Knob {
        flag: "--out-queue",
        env: "TUI_GATEWAY_OUT_QUEUE",
        show: |c| c.out_queue_cap.to_string(),
        set: |c, v| {
            c.out_queue_cap = count(v, 4096, 1 << 30)?;
            Ok(())
        },
    },
    Knob {
        flag: "--stdout-stall",
        env: "TUI_GATEWAY_STDOUT_STALL_S",
        show: |c| secs(c.stdout_stall),
        set: |c, v| {
            c.stdout_stall = seconds(v, 0.1, 86400.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--offline-delay-ms",
        env: "TUI_GATEWAY_OFFLINE_DELAY_MS",
        show: |c| c.offline_word_delay.as_millis().to_string(),
        set: |c, v| {
            c.offline_word_delay = millis(v, 60_000)?;
            Ok(())
        },
    },
    Knob {
        flag: "--heap-trim-ms",
        env: "TUI_GATEWAY_HEAP_TRIM_MS",
        show: |c| c.heap_trim_every.as_millis().to_string(),
        set: |c, v| {
            c.heap_trim_every = millis(v, 3_600_000)?;
            Ok(())
        },
    },
    Knob {
        flag: "--approval-timeout",
        env: "TUI_GATEWAY_APPROVAL_TIMEOUT_S",
        show: |c| secs(c.approval_timeout),
        set: |c, v| {
            c.approval_timeout = seconds(v, 0.1, 86400.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--clarify-timeout",
        env: "TUI_GATEWAY_CLARIFY_TIMEOUT_S",
        show: |c| secs(c.clarify_timeout),
        set: |c, v| {
            c.clarify_timeout = seconds(v, 0.1, 86400.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--subagent-timeout-floor",
        env: "TUI_GATEWAY_SUBAGENT_TIMEOUT_FLOOR_S",
        show: |c| secs(c.subagent_timeout_floor),
        set: |c, v| {
            c.subagent_timeout_floor = seconds(v, 0.1, 86400.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--provider",
        env: "TUI_GATEWAY_PROVIDER",
        show: |c| {
            c.provider.clone().unwrap_or(
                "config.yaml model.provider, else Hermes' auto order (keys in ~/.hermes/.env), \
                 else offline"
                    .into(),
            )
        },
        set: |c, v| {
            let v = v.trim().to_ascii_lowercase();
            let named = v
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "._:-".contains(ch));
            if v.is_empty() || v.len() > 64 || !named {
                return Err(format!(
                    "expected a provider name (offline, auto, openrouter, anthropic, \
                     custom:NAME, …), got {v:?}"
                ));
            }
            c.provider = Some(v);
            Ok(())
        },
    },
    Knob {
        flag: "--model",
        env: "OPENAI_MODEL",
        show: |c| {
            c.model
                .clone()
                .unwrap_or("config.yaml model.default, else gpt-4o-mini".into())
        },
        set: |c, v| {
            c.model = Some(v.trim().to_string()).filter(|m| !m.is_empty());
            Ok(())
        },
    },
    Knob {
        flag: "--base-url",
        env: "OPENAI_BASE_URL",
        show: |c| {
            c.base_url
                .clone()
                .unwrap_or("config.yaml model.base_url, else none".into())
        },
        set: |c, v| {
            c.base_url = Some(v.trim().to_string()).filter(|u| !u.is_empty());
            Ok(())
        },
    },
    Knob {
        flag: "--connect-timeout",
        env: "TUI_GATEWAY_CONNECT_TIMEOUT_S",
        show: |c| secs(c.connect_timeout),
        set: |c, v| {
            c.connect_timeout = seconds(v, 0.1, 600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--first-byte-timeout",
        env: "TUI_GATEWAY_FIRST_BYTE_TIMEOUT_S",
        show: |c| secs(c.first_byte_timeout),
        set: |c, v| {
            c.first_byte_timeout = seconds(v, 0.1, 3600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--idle-timeout",
        env: "TUI_GATEWAY_IDLE_TIMEOUT_S",
        show: |c| secs(c.idle_timeout),
        set: |c, v| {
            c.idle_timeout = seconds(v, 0.1, 3600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--model-retries",
        env: "TUI_GATEWAY_MODEL_RETRIES",
        show: |c| c.model_retries.to_string(),
        set: |c, v| {
            c.model_retries = v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= 20)
                .ok_or(format!("expected a whole number up to 20, got {v:?}"))?;
            Ok(())
        },
    },
    Knob {
        flag: "--max-turns",
        env: "HERMES_TUI_MAX_TURNS",
        show: |c| c.max_turns.to_string(),
        set: |c, v| {
            c.max_turns = count(v, 1, 10_000)? as u32;
            Ok(())
        },
    },
    Knob {
        flag: "--retry-base",
        env: "TUI_GATEWAY_RETRY_BASE_S",
        show: |c| secs(c.retry_base),
        set: |c, v| {
            c.retry_base = seconds(v, 0.001, 600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--retry-cap",
        env: "TUI_GATEWAY_RETRY_CAP_S",
        show: |c| secs(c.retry_cap),
        set: |c, v| {
            c.retry_cap = seconds(v, 0.01, 3600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--rpc-log",
        env: "TUI_GATEWAY_RPC_LOG",
        show: |c| {
            c.rpc_log
                .as_ref()
                .map_or("off".into(), |p| p.display().to_string())
        },
        set: |c, v| {
            c.rpc_log = Some(PathBuf::from(v)).filter(|p| !p.as_os_str().is_empty());
            Ok(())
        },
    },
    Knob {
        flag: "--tool-pidns",
        env: "TUI_GATEWAY_TOOL_PIDNS",
        show: |c| if c.tool_pidns { "on" } else { "off" }.into(),
        set: |c, v| {
            c.tool_pidns = on_off(v)?;
            Ok(())
        },
    },
    Knob {
        flag: "--persistent",
        env: "HERMES_TUI_GATEWAY_PERSISTENT",
        show: |c| {
            match c.persistent {
                Some(true) => "on",
                Some(false) => "off",
                None => "config.yaml",
            }
            .into()
        },
        set: |c, v| {
            c.persistent = Some(on_off(v)?);
            Ok(())
        },
    },
    Knob {
        flag: "--idle-exit",
        env: "TUI_GATEWAY_IDLE_EXIT_S",
        show: |c| secs(c.idle_exit),
        set: |c, v| {
            c.idle_exit = seconds(v, 0.01, 30.0 * 86400.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--relay-start",
        env: "TUI_GATEWAY_RELAY_START_S",
        show: |c| secs(c.relay_start),
        set: |c, v| {
            c.relay_start = seconds(v, 0.1, 600.0)?;
            Ok(())
        },
    },
    Knob {
        flag: "--auto-title",
        env: "TUI_GATEWAY_AUTO_TITLE",
        show: |c| if c.auto_title { "on" } else { "off" }.into(),
        set: |c, v| {
            c.auto_title = on_off(v)?;
            Ok(())
        },
    },
    Knob {
        flag: "--synchronous",
        env: "TUI_GATEWAY_SYNCHRONOUS",
        show: |c| c.synchronous.clone(),
        set: |c, v| {
            let v = v.trim().to_ascii_uppercase();
            if !["OFF", "NORMAL", "FULL", "EXTRA"].contains(&v.as_str()) {
                return Err(format!("expected OFF, NORMAL, FULL or EXTRA, got {v:?}"));
            }
            c.synchronous = v;
            Ok(())
        },
    },
];

impl Config {
    /// Defaults overridden by the environment. Bad values are reported, not ignored.
    pub fn from_env() -> Result<Config, String> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let mut c = Config::default();
        for k in KNOBS {
            if let Some(v) = lookup(k.env) {
                if k.env == "HERMES_HOME" && v.is_empty() {
                    continue;
                }
                (k.set)(&mut c, &v).map_err(|e| format!("{}: {e}", k.env))?;
            }
        }
        Ok(c)
    }

    /// The environment's knobs again with `$HERMES_HOME/.env` over them (as Hermes loads it),
    /// then `flags` again: for when the home, known only now, has a `.env` naming a knob. An
    /// unreadable `.env` changes nothing here (the provider's resolution reports it).
    pub fn overlay_dotenv(&mut self, flags: &[String]) -> Result<(), String> {
        let Ok(env) = crate::hermes_env::HermesEnv::load(&self.home) else {
            return Ok(());
        };
        if !KNOBS
            .iter()
            .any(|k| k.env != "HERMES_HOME" && env.sets(k.env))
        {
            return Ok(());
        }
        let home = self.home.clone();
        let mut c = Config::from_lookup(|name| match name {
            "HERMES_HOME" => None,
            _ => env.get(name),
        })
        .map_err(|e| format!("{e} (in {})", home.join(".env").display()))?;
        c.home = home;
        c.apply_flags(flags)?;
        *self = c;
        Ok(())
    }

    /// Whether `name` is one of the flags [`Config::apply_flags`] reads a value for.
    pub(crate) fn flag_takes_value(name: &str) -> bool {
        KNOBS.iter().any(|k| k.flag == name)
    }

    /// Apply `--flag value` / `--flag=value` pairs; returns the arguments that are not knobs.
    pub fn apply_flags(&mut self, args: &[String]) -> Result<Vec<String>, String> {
        let mut rest = Vec::new();
        let mut i = 0;
        while let Some(arg) = args.get(i) {
            i += 1;
            let (name, inline) = split_flag(arg);
            if name == "--no-signals" {
                self.handle_signals = false;
                continue;
            }
            match KNOBS.iter().find(|k| k.flag == name) {
                Some(k) => {
                    let value = flag_value(name, inline, args, &mut i)?;
                    (k.set)(self, &value).map_err(|e| format!("{name}: {e}"))?;
                }
                None => rest.push(arg.clone()),
            }
        }
        Ok(rest)
    }

    /// One line per knob for `--help`: flag, environment name, default.
    pub fn help() -> String {
        let defaults = Config::default();
        let mut s = String::new();
        for k in KNOBS {
            s.push_str(&format!(
                "  {:<22} env {:<38} default {}\n",
                k.flag,
                k.env,
                (k.show)(&defaults)
            ));
        }
        s.push_str("  --no-signals           leave signal handling to the host\n");
        s
    }

    pub fn db_path(&self) -> PathBuf {
        self.home.join("state.db")
    }

    /// Whether the TUI's gateway is a relay to a persistent one: the flag or environment,
    /// else config.yaml's `tui_gateway.persistent`.
    pub fn is_persistent(&self) -> bool {
        self.persistent.unwrap_or_else(|| {
            crate::config_file::load(&self.home)
                .ok()
                .and_then(|c| crate::config_file::flag(&c["tui_gateway"]["persistent"]))
                .unwrap_or(false)
        })
    }
}

/// A flag argument split at its first `=`: `--name=value` is (`--name`, `value`); anything
/// else is itself, with no value.
pub(crate) fn split_flag(arg: &str) -> (&str, Option<&str>) {
    match arg.split_once('=') {
        Some((name, value)) if name.starts_with('-') => (name, Some(value)),
        _ => (arg, None),
    }
}

/// The value of flag `name`: its `inline` one (after `=`), else `args[*next]`, which `*next`
/// then moves past.
pub(crate) fn flag_value(
    name: &str,
    inline: Option<&str>,
    args: &[String],
    next: &mut usize,
) -> Result<String, String> {
    if let Some(value) = inline {
        return Ok(value.to_string());
    }
    let value = args.get(*next).ok_or(format!("{name} needs a value"))?;
    *next += 1;
    Ok(value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_and_leave_the_rest() {
        let mut c = Config::default();
        let rest = c
            .apply_flags(&[
                "--flush-interval=0.25".into(),
                "serve".into(),
                "--frame-limit".into(),
                "1024".into(),
            ])
            .unwrap();
        assert_eq!(rest, vec!["serve".to_string()]);
        assert_eq!(c.flush_interval, Duration::from_millis(250));
        assert_eq!(c.frame_limit, 1024);
    }

    #[test]
    fn bad_values_are_refused_with_the_name() {
        let mut c = Config::default();
        let err = c
            .apply_flags(&["--kill-grace".into(), "soon".into()])
            .unwrap_err();
        assert!(err.contains("--kill-grace"), "{err}");
        assert!(c.apply_flags(&["--frame-limit".into()]).is_err());
        assert!(c.apply_flags(&["--synchronous=maybe".into()]).is_err());
    }
}
