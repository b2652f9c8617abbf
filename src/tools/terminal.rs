//! The `terminal` tool, with Hermes' arguments (`command`, `timeout`, `workdir`, `background`,
//! `notify_on_complete`, `pty`; `cwd` is kept as another name of `workdir`): `bash -c command`
//! under the supervisor, in the session's working directory, with a timeout; dangerous commands
//! go through the policy and the approval flow.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use serde_json::{Value, json};

use super::shell_state::{self, CaptureError, ShellState};
use super::{Ask, JobId, Start, Tool, ToolContext, ToolResult, policy};
use crate::runner::{Ending, RunEnd, Spec, Stdin, Streams};

/// Hermes' longest foreground timeout (`TERMINAL_MAX_FOREGROUND_TIMEOUT`, 600 s by default):
/// a call asking for more is refused and pointed at `background`.
fn foreground_max_timeout_s() -> u64 {
    static MAX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("TERMINAL_MAX_FOREGROUND_TIMEOUT")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&v| v > 0)
            .unwrap_or(600)
    })
}

/// Hermes' description of the tool (`TERMINAL_TOOL_DESCRIPTION`).
const DESCRIPTION: &str = "Run a shell command (bash on Linux). The working directory and exported variables carry over to the next call, so set an environment up once a session.

For files use the file tools, not the shell: read_file (not cat, head, tail), search_files (not grep, find, ls), patch (not sed, awk), write_file (not echo or heredocs). The shell is for builds, tests, git, installs, scripts, processes and the network.

A command returns as soon as it ends, so a generous timeout costs nothing. Commands get no terminal and an empty stdin: give interactive programs (editors, pagers, REPLs, prompts) their non-interactive flags or pipe their input, and pipe git to cat.

Servers, watchers and long jobs go in the background with background=true (never `&`, nohup or setsid): you get a session_id for the process tool. A background job that ends (tests, builds, deploys) also wants notify_on_complete=true, or you will not hear that it finished. Check that a server is ready (a health check, its log) rather than sleeping.";

/// A call's arguments, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub command: String,
    /// Seconds asked for (`None`: the configured default).
    pub timeout: Option<f64>,
    /// `workdir` (or its older name `cwd`), as given.
    pub workdir: Option<String>,
    pub background: bool,
    pub notify_on_complete: bool,
    pub pty: bool,
}

impl Call {
    /// Check the arguments as the model sent them; the error is what the model reads.
    pub fn parse(args: &Value) -> Result<Call, String> {
        let Some(obj) = args.as_object() else {
            return Err(
                "invalid arguments: expected a JSON object like {\"command\": \"ls\"}".into(),
            );
        };
        // A null is an argument left out.
        let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
        let command = match get("command") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(format!(
                    "invalid arguments: command must be a string, got {}",
                    kind(other)
                ));
            }
            None => return Err("invalid arguments: command (a string) is required".into()),
        };
        if command.trim().is_empty() {
            return Err("empty command".into());
        }
        let timeout = match get("timeout") {
            None => None,
            Some(v) => {
                let secs = v
                    .as_f64()
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse::<f64>().ok()));
                match secs {
                    Some(t) if t.is_finite() && t > 0.0 => Some(t),
                    _ => {
                        return Err(format!(
                            "invalid arguments: timeout must be a positive number of seconds, got {v}"
                        ));
                    }
                }
            }
        };
        let text = |k: &str| -> Result<Option<String>, String> {
            match get(k) {
                None => Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!(
                    "invalid arguments: {k} must be a string (a directory path), got {}",
                    kind(other)
                )),
            }
        };
        let workdir = match text("workdir")? {
            Some(w) => Some(w),
            None => text("cwd")?,
        };
        let flag = |k: &str| -> Result<bool, String> {
            match get(k) {
                None => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
                Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
                Some(other) => Err(format!(
                    "invalid arguments: {k} must be true or false, got {other}"
                )),
            }
        };
        Ok(Call {
            command,
            timeout,
            workdir,
            background: flag("background")?,
            notify_on_complete: flag("notify_on_complete")?,
            pty: flag("pty")?,
        })
    }
}

/// A JSON value's kind, for an error message.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[derive(Default)]
pub struct Terminal {
    /// Commands running with their session's shell state, by call.
    pending: BTreeMap<JobId, Pending>,
    /// Run files of gateways killed earlier were removed.
    swept: bool,
    /// `$HERMES_HOME/shell` could not be used (said once).
    said_no_dir: bool,
    /// Background starts waiting for their process's pid, by call.
    starting: BTreeMap<JobId, Starting>,
}

/// A background start's answer, held until the pid of `process` is known or `until`.
struct Starting {
    result: ToolResult,
    process: String,
    until: std::time::Instant,
}

/// How long a background start waits for its supervisor to report the command's pid (it
/// takes milliseconds; a supervisor slower than this is answered `pid: null`, as Hermes
/// says before it knows).
const PID_WAIT: Duration = Duration::from_secs(2);
/// How often a waiting background start looks for the pid.
const PID_POLL: Duration = Duration::from_millis(2);

impl Tool for Terminal {
    fn name(&self) -> &str {
        "terminal"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        let max = foreground_max_timeout_s();
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line to run."},
                "background": {
                    "type": "boolean",
                    "description": "Start it in the background and return at once with its session_id.",
                    "default": false
                },
                "timeout": {
                    "type": "integer",
                    "description": format!("Seconds to wait for it (default 180; in the foreground at most {max}, longer jobs go in the background)."),
                    "minimum": 1
                },
                "workdir": {
                    "type": "string",
                    "description": "Absolute directory to run it in (default: the session's)."
                },
                "pty": {
                    "type": "boolean",
                    "description": "A pseudo-terminal for interactive programs: not available here.",
                    "default": false
                },
                "notify_on_complete": {
                    "type": "boolean",
                    "description": "With background=true: you are told once when it exits. Set it for every job that ends.",
                    "default": false
                }
            },
            "required": ["command"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let call = match Call::parse(args) {
            Ok(call) => call,
            Err(e) => return Start::Done(ToolResult::failed(e)),
        };
        if call.pty {
            return Start::Done(ToolResult::failed(
                "pty=true is not supported: commands run without a terminal (stdin is /dev/null); \
                 use non-interactive flags or pipe the input instead",
            ));
        }
        let max = foreground_max_timeout_s();
        if !call.background
            && let Some(t) = call.timeout
            && t > max as f64
        {
            return Start::Done(ToolResult::failed(format!(
                "Foreground timeout {t}s exceeds the maximum of {max}s. Use background=true with \
                 notify_on_complete=true for long-running commands."
            )));
        }
        let shell = self.shell_of(ctx);
        let mut notes = Vec::new();
        let here = match shell.as_ref().and_then(|(_, state)| state.cwd.clone()) {
            Some(d) if Path::new(&d).is_dir() => d,
            Some(d) => {
                notes.push(format!(
                    "[the working directory {d} no longer exists: this command ran in {}]",
                    ctx.cwd
                ));
                ctx.cwd.clone()
            }
            None => ctx.cwd.clone(),
        };
        let cwd = match &call.workdir {
            Some(w) => resolve_dir(w, &here),
            None => here,
        };
        let command = call.command.as_str();
        match policy::check(command, Path::new(&cwd)) {
            policy::Verdict::Refuse { reason } => {
                return Start::Done(ToolResult::failed(format!("blocked: {reason}")));
            }
            policy::Verdict::Ask { key, description } if !ctx.approved => {
                return Start::Ask(Ask {
                    rule: key,
                    description: description.to_string(),
                    command: command.to_string(),
                });
            }
            _ => {}
        }
        if ctx.shutting_down {
            let out = "[host is exiting: command not started]";
            return Start::Done(ToolResult::terminal(out, Some(130), None));
        }
        let passthrough = ctx.runner.env_passthrough().to_vec();
        if call.background {
            // `background: true`: a process of the session that outlives the call (`process/`),
            // checked and approved like any call, in its resolved working directory and with
            // the session's variables (its end changes the session's shell state in nothing).
            let restore = shell.and_then(|(dir, before)| {
                restore_file(&dir, ctx.job, &before, &cwd, None, &passthrough)
            });
            let wrapped = restore
                .as_ref()
                .map(|file| shell_state::wrapped_command(command, file, false));
            let launch = super::process::Launch {
                command,
                run: wrapped.as_deref().unwrap_or(command),
                restore,
                cwd: &cwd,
                notify: call.notify_on_complete,
            };
            let mut result = super::process::start_background(ctx, launch);
            // Where it runs, when not where the session's shell was: the model reads it.
            if result.error.is_none()
                && let Some(Value::String(output)) = result.content.get_mut("output")
            {
                for note in &notes {
                    output.push('\n');
                    output.push_str(note);
                }
            }
            // Hermes answers the process's pid: the supervisor reports it shortly after.
            let id = result.content["session_id"].as_str().map(str::to_string);
            let Some(process) = id.filter(|_| result.content["pid"].is_null()) else {
                return Start::Done(result);
            };
            let until = ctx.now + PID_WAIT;
            self.starting.insert(
                ctx.job,
                Starting {
                    result,
                    process,
                    until,
                },
            );
            ctx.wake_at(ctx.now + PID_POLL);
            return Start::Later;
        }
        if call.workdir.is_some() && !Path::new(&cwd).is_dir() {
            return Start::Done(ToolResult::failed(format!(
                "workdir is not a directory: {cwd}"
            )));
        }
        let timeout = call
            .timeout
            .map(Duration::from_secs_f64)
            .unwrap_or(ctx.command_timeout);
        // The command between its shell's restore and save, when the session has a shell state.
        let pending = shell.and_then(|(dir, before)| {
            let (_, capture) = dir.run_files(ctx.job.0);
            let restore = restore_file(&dir, ctx.job, &before, &cwd, Some(&capture), &passthrough)?;
            let wrapped = shell_state::wrapped_command(command, &restore, true);
            Some((
                wrapped,
                Pending {
                    dir,
                    session: ctx.session.to_string(),
                    before,
                    restore,
                    capture,
                    session_cwd: ctx.cwd.clone(),
                    start_dir: call.workdir.is_some().then(|| cwd.clone()),
                    passthrough,
                    base: ctx.runner.base_environment(),
                    notes: Vec::new(),
                },
            ))
        });
        let (wrapped, pending) = match pending {
            Some((wrapped, mut pending)) => {
                pending.notes = notes;
                (wrapped, Some(pending))
            }
            None => (command.to_string(), None),
        };
        let spec = Spec {
            command: &wrapped,
            cwd: Path::new(&cwd),
            streams: Streams::Merged,
            stdin: Stdin::Null,
            timeout,
            live: true,
        };
        match ctx.run(&spec) {
            Ok(_) => {
                if let Some(p) = pending {
                    self.remember(ctx.job, p);
                }
                Start::Later
            }
            Err(e) => {
                if let Some(p) = pending {
                    let _ = shell_state::remove_quietly(&p.restore);
                }
                Start::Done(ToolResult::failed(format!(
                    "could not start the command: {e}"
                )))
            }
        }
    }

    /// A background start waiting for its process's pid: answered once the runner knows it
    /// (or its run ended), or at `PID_WAIT` without one.
    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        let starting = self.starting.get(&ctx.job)?;
        let runner = &*ctx.runner;
        ctx.processes.registry.learn_pids(|run| runner.pid(run));
        let owner = ctx.processes.owner;
        let pid = ctx
            .processes
            .registry
            .get_mut(owner, &starting.process)
            .and_then(|e| e.pid);
        if pid.is_none() && ctx.now < starting.until {
            ctx.wake_at((ctx.now + PID_POLL).min(starting.until));
            return None;
        }
        let mut result = self.starting.remove(&ctx.job)?.result;
        result.content["pid"] = json!(pid);
        Some(result)
    }

    /// The process of a background start runs on: its answer, without a pid if not known yet.
    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        match self.starting.remove(&job) {
            Some(s) => Some(s.result),
            None => Some(ToolResult::failed("interrupted")),
        }
    }

    fn run_ended(&mut self, job: JobId, _args: &Value, end: RunEnd) -> Option<ToolResult> {
        let code = end.code();
        let notes = match self.pending.remove(&job) {
            Some(p) => p.finish(&end),
            None => Vec::new(),
        };
        let mut output = end.stdout;
        let ending = match end.ending {
            Some(Ending::Timeout) => Some(format!(
                "[Command timed out after {}s]",
                end.timeout.as_secs_f64().round()
            )),
            Some(Ending::Interrupted) => Some("[Command interrupted]".to_string()),
            None => None,
        };
        for note in notes.iter().chain(&ending) {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(note);
        }
        let error = end
            .start_error
            .map(|e| format!("could not start the command: {e}"));
        Some(ToolResult::terminal(&output, Some(code), error))
    }
}

impl Terminal {
    /// The session's shell directory and its state, where it has one: a session of the store
    /// and a `$HERMES_HOME/shell` to keep it in (else commands run as fresh shells, said once).
    fn shell_of(&mut self, ctx: &ToolContext<'_>) -> Option<(shell_state::Dir, ShellState)> {
        // (The files are named to bash: a home that is not UTF-8 could not be.)
        if ctx.session.is_empty() || ctx.home.to_str().is_none() {
            return None;
        }
        let dir = match shell_state::Dir::open(ctx.home) {
            Ok(dir) => dir,
            Err(e) => {
                if !self.said_no_dir {
                    self.said_no_dir = true;
                    crate::diag!(
                        "[gateway] {}/shell: {e}; the terminal's directory and variables are not kept between commands",
                        ctx.home.display()
                    );
                }
                return None;
            }
        };
        if !self.swept {
            self.swept = true;
            dir.remove_stale_runs();
        }
        let state = dir.load(ctx.session);
        Some((dir, state))
    }

    fn remember(&mut self, job: JobId, pending: Pending) {
        // A job gone without its run's end leaves its entry; the oldest go first.
        while self.pending.len() >= PENDING_MAX {
            self.pending.pop_first();
        }
        self.pending.insert(job, pending);
    }
}

/// Runs of a call at most remembered at once (far more than any session runs).
const PENDING_MAX: usize = 4096;

/// A command running with its session's shell state: what its end is compared with.
struct Pending {
    dir: shell_state::Dir,
    session: String,
    before: ShellState,
    restore: PathBuf,
    capture: PathBuf,
    session_cwd: String,
    /// Where a call with `workdir` started: ending there leaves the session's directory as it was.
    start_dir: Option<String>,
    passthrough: Vec<String>,
    /// The environment a fresh command gets (the runner's, shared).
    base: Rc<HashMap<String, String>>,
    /// What the model is told about the state at the end of the output.
    notes: Vec<String>,
}

impl Pending {
    /// Keep the state the command ended with (what is known of it); the notes for the model.
    fn finish(mut self, end: &RunEnd) -> Vec<String> {
        let _ = shell_state::remove_quietly(&self.restore);
        let capture = match shell_state::take_capture(&self.capture) {
            Ok(c) => c,
            Err(CaptureError::TooBig(n)) => {
                self.notes.push(format!(
                    "[shell state not kept: the exported environment is {n} bytes, over the {} kept; \
                     the next command starts from the previous directory and variables]",
                    shell_state::CAPTURE_MAX
                ));
                return self.notes;
            }
            // Stopped (timeout, interrupt) or never started: the previous state stands.
            Err(_) if end.ending.is_some() || end.start_error.is_some() => return self.notes,
            Err(_) => {
                self.notes.push(
                    "[shell state not kept: the shell ended before saving it (exec, or a signal); \
                     the next command starts from the previous directory and variables]"
                        .to_string(),
                );
                return self.notes;
            }
        };
        let (mut state, withheld) = shell_state::state_of(&capture, &self.base, &self.passthrough);
        if self
            .start_dir
            .as_deref()
            .is_some_and(|d| same_dir(d, &capture.cwd))
        {
            // `workdir` is for this command: ending where it started moves the session nowhere.
            state.cwd = self.before.cwd.clone();
        }
        if state
            .cwd
            .as_deref()
            .is_some_and(|d| same_dir(d, &self.session_cwd))
        {
            state.cwd = None;
        }
        if !withheld.is_empty() {
            self.notes.push(format!(
                "[not kept for the next commands, as they look secret: {} \
                 (terminal.env_passthrough in config.yaml lists names to keep)]",
                withheld.join(", ")
            ));
        }
        // Only what this run changed goes over what the session's other runs saved meanwhile.
        let current = self.dir.load(&self.session);
        let state = shell_state::merge(&current, &self.before, &state);
        if state != current
            && let Err(e) = self.dir.save(&self.session, &state)
        {
            self.notes
                .push(format!("[shell state not kept: cannot save it: {e}]"));
        }
        self.notes
    }
}

/// Write the restore file of call `job`'s run (its shell state, `cwd`, and the save into
/// `capture` when the run saves its end); `None` when it cannot be written (said on stderr).
fn restore_file(
    dir: &shell_state::Dir,
    job: JobId,
    before: &ShellState,
    cwd: &str,
    capture: Option<&Path>,
    passthrough: &[String],
) -> Option<PathBuf> {
    let (restore, _) = dir.run_files(job.0);
    let script = shell_state::restore_script(before, cwd, capture, passthrough);
    let _ = shell_state::remove_quietly(&restore);
    if let Err(e) = crate::private_file::create_new(&restore, script.as_bytes()) {
        crate::diag!(
            "[gateway] shell state not restored: {}: {e}",
            restore.display()
        );
        return None;
    }
    Some(restore)
}

/// Two names of one directory.
fn same_dir(a: &str, b: &str) -> bool {
    let trim = |s: &str| s.trim_end_matches('/').to_string();
    trim(a) == trim(b)
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// `workdir` as a directory: `~` is `$HOME` (without one, a plain name taken from `base`: never
/// `/`), a relative path is taken from `base`.
fn resolve_dir(workdir: &str, base: &str) -> String {
    let home = crate::util::user_home().map(|h| h.to_string_lossy().into_owned());
    let path = match (workdir, workdir.strip_prefix("~/"), home) {
        ("~", _, Some(h)) => h,
        (_, Some(rest), Some(h)) => format!("{h}/{rest}"),
        _ => workdir.to_string(),
    };
    if Path::new(&path).is_absolute() {
        path
    } else {
        Path::new(base).join(path).to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hermes_arguments_are_read_and_cwd_is_another_name_of_workdir() {
        let c = Call::parse(&json!({"command": "ls", "timeout": 5, "workdir": "/tmp",
            "background": false, "notify_on_complete": "true", "pty": null}))
        .unwrap();
        assert_eq!(c.command, "ls");
        assert_eq!(c.timeout, Some(5.0));
        assert_eq!(c.workdir.as_deref(), Some("/tmp"));
        assert!(!c.background && c.notify_on_complete && !c.pty);
        let old = Call::parse(&json!({"command": "ls", "cwd": "/srv", "timeout": "2.5"})).unwrap();
        assert_eq!(old.workdir.as_deref(), Some("/srv"));
        assert_eq!(old.timeout, Some(2.5));
        let both = Call::parse(&json!({"command": "ls", "cwd": "/a", "workdir": "/b"})).unwrap();
        assert_eq!(both.workdir.as_deref(), Some("/b"));
    }

    #[test]
    fn bad_arguments_are_errors_the_model_can_read() {
        let err = |v: Value| Call::parse(&v).unwrap_err();
        assert!(err(Value::Null).contains("JSON object"));
        assert!(err(json!({})).contains("command (a string) is required"));
        assert!(err(json!({"command": 3})).contains("command must be a string"));
        assert_eq!(err(json!({"command": "  "})), "empty command");
        assert!(err(json!({"command": "ls", "timeout": -1})).contains("timeout must be"));
        assert!(err(json!({"command": "ls", "timeout": "soon"})).contains("timeout must be"));
        assert!(err(json!({"command": "ls", "workdir": 7})).contains("workdir must be a string"));
        assert!(err(json!({"command": "ls", "pty": "yes"})).contains("pty must be true or false"));
    }

    #[test]
    fn workdir_is_taken_from_the_session_directory_when_relative() {
        assert_eq!(resolve_dir("/abs", "/base"), "/abs");
        assert_eq!(resolve_dir("sub/dir", "/base"), "/base/sub/dir");
        if let Some(home) = crate::util::user_home() {
            assert_eq!(resolve_dir("~/x", "/base"), format!("{}/x", home.display()));
        }
    }
}
