//! `tui-gateway exec`: run tasks headless, for scripts, CI jobs and benchmarks.
//!
//! `exec PROMPT` (or `-`: the prompt from stdin) runs one task to completion in a new session
//! (or `--resume ID`) and prints the answer and a result record; `exec --tasks FILE.jsonl` runs
//! many through one gateway, `--parallel N` sessions at a time, each in its own working
//! directory, appending a record per task to a results file as each finishes.
//!
//! The gateway runs in this process, on this thread ([`embedded`]): no second process, no
//! second protocol — requests go in as JSON-RPC frames and the same frames the TUI reads come
//! out. See docs/EXEC.md.

mod batch;
mod embedded;
mod lines;
mod merge;
mod record;
mod shard;
mod stream;
mod tasks;
mod trajectories;

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Config;
use crate::config::{flag_value, split_flag};
use crate::methods::params::PROMPT_MAX;
use batch::{Approve, Batch, Settings, Sink, Source};
use embedded::Embedded;
use lines::Lines;
use record::{Outcome, Status, Totals, ms};
use shard::Shard;
use stream::Stream;
use tasks::{Results, Task, TaskStream};
use trajectories::Wanted;

/// Longest per-task timeout accepted (a week).
pub(crate) const TIMEOUT_MAX_S: f64 = 7.0 * 24.0 * 3600.0;
/// Most sessions run at once.
const PARALLEL_MAX: usize = 4096;
/// Exit code: bad arguments, an unreadable prompt or a bad tasks file.
const EXIT_USAGE: i32 = 2;
/// Exit code: the gateway could not start, or records could not be written.
const EXIT_GATEWAY: i32 = 6;
/// Exit code of `--tasks`: some task did not end `done` (its record says why).
const EXIT_SOME_FAILED: i32 = 7;
/// Redraws of the progress bar, at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

const USAGE: &str = "\
usage: tui-gateway exec [FLAGS] PROMPT...      one task; `-` reads the prompt from stdin
       tui-gateway exec [FLAGS] --tasks FILE.jsonl [--parallel N] [--results FILE] [--continue]
       tui-gateway exec merge [--sessions OUT.db] RESULTS.jsonl...  one summary of many
                                                results files (shards), their sessions joined

Runs tasks headless with the configured provider and tools, in this process (no UI, no
second gateway). One task prints its answer on stdout and its result record (one JSON line)
on stderr; with --json, stdout gets every event the TUI would get, one JSON object a line,
then the record. Many tasks append one record per task to the results file as each ends and
print a summary (one JSON line) on stdout at the end; a progress bar on a terminal.

exit codes: 0 done, 1 model error, 2 bad arguments or tasks file, 3 interrupted (SIGINT or
SIGTERM), 4 refused (by the gateway, or an approval under --approve ask-fails), 5 timeout,
6 the gateway could not start (or records could not be written), 7 (--tasks) some task did
not end done.

exec flags:
  --json                 stdout: events and the record as JSON lines
  --output-format FMT    text | stream-json: stdout gets Claude Code's stream-json lines
                         (init, assistant text and tool use, tool results, the result)
  --atif DIR             write each task's ATIF trajectory (Harbor's ATIF-v1.4) to
                         DIR/trajectory.json (one task) or DIR/<task id>/trajectory.json
  --max-turns N          model calls per task's turn (the gateway's --max-turns)
  --resume ID|TITLE      continue a stored session (one task)
  --cwd DIR              working directory of the one task          default .
  --approve MODE         never | always | ask-fails: how approvals are answered
                         env TUI_GATEWAY_EXEC_APPROVE               default ask-fails
  --timeout SECS         per task; 0: none; a task's own \"timeout\" wins
                         env TUI_GATEWAY_EXEC_TIMEOUT_S             default 3600
  --tasks FILE           JSONL: {\"id\", \"prompt\", \"cwd\"?, \"timeout\"?, \"model\"?, \"resume\"?}
  --parallel N           sessions at a time (1..4096)
                         env TUI_GATEWAY_EXEC_PARALLEL              default 8
  --results FILE         where records go          default FILE with .results.jsonl
  --workdir DIR          each task without a cwd runs in DIR/<id>
                         env TUI_GATEWAY_EXEC_WORKDIR               default results FILE with .work
  --continue             append to the results file, skipping tasks it records as finished
  --shard I/N            run only shard I (0..N-1) of the tasks, picked by a hash of each id;
                         default results FILE.shard-I-of-N.results.jsonl. Without it:
                         JOB_COMPLETION_INDEX with TUI_GATEWAY_EXEC_SHARDS (a Kubernetes
                         Indexed Job), or SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_COUNT
  -h, --help             this help
gateway flags (as for serve):
";

#[derive(Debug, Clone, PartialEq)]
struct Options {
    json: bool,
    /// `--output-format stream-json`.
    stream_json: bool,
    atif: Option<PathBuf>,
    prompt: Vec<String>,
    resume: Option<String>,
    cwd: Option<PathBuf>,
    approve: Approve,
    timeout: Option<Duration>,
    tasks: Option<PathBuf>,
    parallel: usize,
    results: Option<PathBuf>,
    workdir: Option<PathBuf>,
    resume_run: bool,
    /// `--shard I/N` (or the scheduler's environment): run only the tasks of shard I.
    shard: Option<Shard>,
    /// Everything else: the gateway's own flags.
    gateway: Vec<String>,
}

#[derive(Debug, PartialEq)]
enum Args {
    Help,
    Run(Box<Options>),
}

/// Runs `exec`; `args` are the arguments after `exec`. Returns the exit code.
pub fn run(args: &[String]) -> i32 {
    if args.first().is_some_and(|a| a == "merge") {
        return merge::run(&args[1..]);
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let opts = match parse_args(args, &env) {
        Ok(Args::Help) => {
            return crate::cli::out::write_stdout(&format!("{USAGE}{}", Config::help()));
        }
        Ok(Args::Run(opts)) => *opts,
        Err(message) => {
            eprint_line(&format!("error: {message}\n(see tui-gateway exec --help)"));
            return EXIT_USAGE;
        }
    };
    let mut cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprint_line(&format!("error: bad environment: {e}"));
            return EXIT_USAGE;
        }
    };
    match cfg
        .apply_flags(&opts.gateway)
        .and_then(|rest| cfg.overlay_dotenv(&opts.gateway).map(|()| rest))
    {
        Ok(rest) if rest.is_empty() => {}
        Ok(rest) => {
            eprint_line(&format!("error: unknown arguments: {}", rest.join(" ")));
            return EXIT_USAGE;
        }
        Err(e) => {
            eprint_line(&format!("error: {e}"));
            return EXIT_USAGE;
        }
    }
    // A headless run ends with its turn: a title call would be cut short, or paid for nothing.
    cfg.auto_title = false;
    match &opts.tasks {
        Some(file) => run_tasks(&opts, file.clone(), cfg),
        None => run_one(&opts, cfg),
    }
}

fn parse_args(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Args, String> {
    let mut o = Options {
        json: false,
        stream_json: false,
        atif: None,
        prompt: Vec::new(),
        resume: None,
        cwd: None,
        approve: Approve::AskFails,
        timeout: Some(Duration::from_secs(3600)),
        tasks: None,
        parallel: 8,
        results: None,
        workdir: None,
        resume_run: false,
        shard: None,
        gateway: Vec::new(),
    };
    if let Some(v) = env("TUI_GATEWAY_EXEC_APPROVE") {
        o.approve = Approve::parse(&v).map_err(|e| format!("TUI_GATEWAY_EXEC_APPROVE: {e}"))?;
    }
    if let Some(v) = env("TUI_GATEWAY_EXEC_TIMEOUT_S") {
        o.timeout = parse_timeout(&v).map_err(|e| format!("TUI_GATEWAY_EXEC_TIMEOUT_S: {e}"))?;
    }
    if let Some(v) = env("TUI_GATEWAY_EXEC_PARALLEL") {
        o.parallel = parse_parallel(&v).map_err(|e| format!("TUI_GATEWAY_EXEC_PARALLEL: {e}"))?;
    }
    o.workdir = env("TUI_GATEWAY_EXEC_WORKDIR").map(PathBuf::from);
    let mut i = 0;
    let mut prompt_only = false;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if prompt_only || arg == "-" || !arg.starts_with('-') {
            o.prompt.push(arg.to_string());
            continue;
        }
        let (name, inline) = split_flag(arg);
        let mut value = || flag_value(name, inline, args, &mut i);
        match name {
            "-h" | "--help" => return Ok(Args::Help),
            "--" => prompt_only = true,
            "--json" => o.json = true,
            "--output-format" => {
                o.stream_json = match value()?.as_str() {
                    "text" => false,
                    "stream-json" => true,
                    other => {
                        return Err(format!(
                            "--output-format: {other:?} is not text or stream-json"
                        ));
                    }
                }
            }
            "--atif" => o.atif = Some(PathBuf::from(value()?)),
            "--continue" => o.resume_run = true,
            "--shard" => {
                o.shard = Some(Shard::parse(&value()?).map_err(|e| format!("--shard: {e}"))?)
            }
            "--resume" | "-r" => {
                let v = value()?;
                if v.trim().is_empty() {
                    return Err("--resume needs a stored session id or title".into());
                }
                o.resume = Some(v);
            }
            "--cwd" => o.cwd = Some(PathBuf::from(value()?)),
            "--approve" => o.approve = Approve::parse(&value()?)?,
            "--timeout" => {
                o.timeout = parse_timeout(&value()?).map_err(|e| format!("--timeout: {e}"))?
            }
            "--tasks" => o.tasks = Some(PathBuf::from(value()?)),
            "--parallel" => {
                o.parallel = parse_parallel(&value()?).map_err(|e| format!("--parallel: {e}"))?
            }
            "--results" => o.results = Some(PathBuf::from(value()?)),
            "--workdir" => o.workdir = Some(PathBuf::from(value()?)),
            // The gateway's own flags (and their values), checked by its configuration.
            _ => {
                o.gateway.push(arg.to_string());
                if inline.is_none() && Config::flag_takes_value(name) && i < args.len() {
                    o.gateway.push(args[i].clone());
                    i += 1;
                }
            }
        }
    }
    if o.shard.is_none() && o.tasks.is_some() {
        o.shard = Shard::from_env(env)?;
    }
    match &o.tasks {
        _ if o.json && o.stream_json => {
            Err("--json and --output-format stream-json both write stdout: give one".into())
        }
        Some(_) if !o.prompt.is_empty() => Err("give a PROMPT or --tasks FILE, not both".into()),
        Some(_) if o.resume.is_some() || o.cwd.is_some() => {
            Err("--resume and --cwd are for one task; a tasks file sets them per task".into())
        }
        None if o.prompt.is_empty() => {
            Err("no prompt: give PROMPT, `-` (stdin) or --tasks FILE".into())
        }
        None if o.resume_run => Err("--continue is for --tasks".into()),
        None if o.shard.is_some() => Err("--shard is for --tasks".into()),
        _ => Ok(Args::Run(Box::new(o))),
    }
}

fn parse_timeout(v: &str) -> Result<Option<Duration>, String> {
    match v.trim().parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(s) if s > 0.0 && s <= TIMEOUT_MAX_S => Ok(Some(Duration::from_secs_f64(s))),
        _ => Err(format!("{v:?} is not seconds in [0, {TIMEOUT_MAX_S}]")),
    }
}

fn parse_parallel(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=PARALLEL_MAX).contains(&n) => Ok(n),
        _ => Err(format!("{v:?} is not a number in [1, {PARALLEL_MAX}]")),
    }
}

fn settings(opts: &Options, cfg: &Config, parallel: usize) -> Settings {
    Settings {
        parallel,
        approve: opts.approve,
        timeout: opts.timeout,
        // An interrupted turn ends once its tools are killed and their results committed.
        stop_grace: cfg.kill_grace + cfg.exit_flush_budget,
        source: "exec".to_string(),
    }
}

fn start_gateway(cfg: Config) -> Result<Embedded, i32> {
    Embedded::start(cfg).map_err(|e| {
        eprint_line(&format!("error: cannot start the gateway: {e}"));
        EXIT_GATEWAY
    })
}

// ---- one task ---------------------------------------------------------------------------------

/// The prompt `exec -` reads: at most [`PROMPT_MAX`] bytes, refused as soon as one more comes
/// (the rest is never read, nor held).
fn read_prompt(input: impl Read) -> Result<String, String> {
    let mut bytes = Vec::new();
    input
        .take(PROMPT_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the prompt from stdin: {e}"))?;
    if bytes.len() > PROMPT_MAX {
        return Err(tasks::too_long("the prompt on stdin"));
    }
    String::from_utf8(bytes).map_err(|_| "the prompt on stdin is not UTF-8".to_string())
}

fn run_one(opts: &Options, cfg: Config) -> i32 {
    let prompt = if opts.prompt == ["-"] {
        match read_prompt(std::io::stdin().lock()) {
            Ok(text) => text,
            Err(why) => {
                eprint_line(&format!("error: {why}"));
                return EXIT_USAGE;
            }
        }
    } else {
        opts.prompt.join(" ")
    };
    if prompt.len() > PROMPT_MAX {
        eprint_line(&format!("error: {}", tasks::too_long("the prompt")));
        return EXIT_USAGE;
    }
    if prompt.trim().is_empty() {
        eprint_line("error: the prompt is empty");
        return EXIT_USAGE;
    }
    let cwd = opts
        .cwd
        .as_ref()
        .map(|d| std::path::absolute(d).unwrap_or(d.clone()));
    let mut task = vec![Task::single(prompt, cwd, opts.resume.clone())].into_iter();
    let settings = settings(opts, &cfg, 1);
    let cpu = cpu_time();
    let store = StoreAt::of(&cfg);
    let gw = match start_gateway(cfg) {
        Ok(gw) => gw,
        Err(code) => return code,
    };
    let mut sink = OneSink {
        json: opts.json,
        stream: opts.stream_json.then(|| Stream::new(store.max_turns)),
        permission_mode: opts.approve.name(),
        outcome: None,
    };
    let end = Batch::new(gw, &mut task, settings).run(&mut sink);
    if let (Some(dir), Some(outcome)) = (&opts.atif, &sink.outcome) {
        let wanted: Vec<Wanted> = (outcome.stored_session_id.iter())
            .map(|id| Wanted {
                file: dir.join("trajectory.json"),
                session_id: id.clone(),
            })
            .collect();
        if let Err(code) = store.write(&wanted) {
            return code;
        }
    }
    let Some(outcome) = sink.outcome else {
        eprint_line("error: the task did not run");
        return if end.stopped {
            Status::Interrupted.exit_code()
        } else {
            EXIT_GATEWAY
        };
    };
    let mut record = outcome.record(None);
    record["cpu_ms"] = json!(ms(cpu_time().saturating_sub(cpu)));
    if opts.stream_json {
        eprint_line(&record.to_string());
    } else if opts.json {
        print_out(&format!("{record}\n"));
    } else {
        if let Some(answer) = &outcome.answer {
            let mut text = answer.clone();
            if std::io::stdout().is_terminal() {
                let mut shown = String::new();
                crate::cli::out::push_printable(&mut shown, answer);
                text = shown;
            }
            if !text.ends_with('\n') {
                text.push('\n');
            }
            print_out(&text);
        }
        eprint_line(&record.to_string());
    }
    outcome.status.exit_code()
}

struct OneSink {
    json: bool,
    stream: Option<Stream>,
    permission_mode: &'static str,
    outcome: Option<Outcome>,
}

impl Sink for OneSink {
    fn event(&mut self, params: &Value) {
        show_event(self.json, self.stream.as_mut(), params);
    }
    fn opened(&mut self, _index: usize, result: &Value) {
        show_opened(self.stream.as_mut(), result, self.permission_mode);
    }
    fn finished(&mut self, _index: usize, _task: &Task, outcome: &Outcome) {
        if let Some(stream) = &mut self.stream {
            print_out(&format!("{}\n", stream.result(outcome, None)));
        }
        self.outcome = Some(outcome.clone());
    }
}

/// An event on stdout as `--json` or `--output-format stream-json` wants it.
fn show_event(json: bool, stream: Option<&mut Stream>, params: &Value) {
    if json {
        print_out(&format!("{params}\n"));
    }
    if let Some(stream) = stream {
        for line in stream.event(params) {
            print_out(&format!("{line}\n"));
        }
    }
}

fn show_opened(stream: Option<&mut Stream>, result: &Value, permission_mode: &str) {
    if let Some(line) = stream.and_then(|s| s.opened(result, permission_mode)) {
        print_out(&format!("{line}\n"));
    }
}

/// state.db as the gateway was configured to open it, for the trajectories read back after it
/// exited.
struct StoreAt {
    db: PathBuf,
    synchronous: String,
    max_turns: u32,
}

impl StoreAt {
    fn of(cfg: &Config) -> StoreAt {
        StoreAt {
            db: cfg.db_path(),
            synchronous: cfg.synchronous.clone(),
            max_turns: cfg.max_turns,
        }
    }

    /// Writes the trajectories; the exit code when they could not be written.
    fn write(&self, wanted: &[Wanted]) -> Result<(), i32> {
        trajectories::write_all(&self.db, &self.synchronous, wanted).map_err(|e| {
            eprint_line(&format!("error: trajectories: {e}"));
            EXIT_GATEWAY
        })
    }
}

// ---- many tasks -------------------------------------------------------------------------------

fn run_tasks(opts: &Options, file: PathBuf, cfg: Config) -> i32 {
    let usage_error = |lines: Vec<String>| {
        let lines: Vec<String> = lines.iter().map(|e| format!("error: {e}")).collect();
        eprint_line(&format!("{}\nnothing was run", lines.join("\n")));
        EXIT_USAGE
    };
    let open = |path: &Path| match Lines::open(path) {
        Ok(Some(lines)) => Ok(lines),
        Ok(None) => Err(format!("{}: no such file", path.display())),
        Err(e) => Err(e),
    };
    // Shards sharing a file system each get their own results (and working directories).
    let results_name = match opts.shard {
        Some(s) => format!("shard-{}-of-{}.results.jsonl", s.index, s.count),
        None => "results.jsonl".to_string(),
    };
    let results_path = opts
        .results
        .clone()
        .unwrap_or_else(|| beside(&file, &results_name));
    let existing = match tasks::read_results(&results_path, opts.atif.is_some()) {
        Ok(existing) => existing,
        Err(errors) => return usage_error(errors),
    };
    if existing.records > 0 && !opts.resume_run {
        eprint_line(&format!(
            "error: {} already holds records: pass --continue to skip the tasks it records as finished, or remove it",
            results_path.display()
        ));
        return EXIT_USAGE;
    }
    // Checked whole, a line at a time, before anything runs; read again as tasks are dispatched.
    let mut lines = match open(&file) {
        Ok(lines) => lines,
        Err(e) => return usage_error(vec![e]),
    };
    let mut missing = Vec::new();
    let scan = tasks::scan(&mut lines, opts.shard, &existing.finished, |id, session| {
        // A continuation writes the trajectories a killed run did not get to.
        if let (Some(dir), Some(session)) = (&opts.atif, session) {
            let file = trajectory_file(dir, id);
            if !file.exists() {
                missing.push(Wanted {
                    file,
                    session_id: session.clone(),
                });
            }
        }
    });
    let scan = match scan {
        Ok(scan) => scan,
        Err(errors) => {
            let shown = file.display();
            return usage_error(errors.iter().map(|e| format!("{shown}: {e}")).collect());
        }
    };
    drop(lines);
    let workdir = opts
        .workdir
        .clone()
        .unwrap_or_else(|| beside(&results_path, "work"));
    let workdir = std::path::absolute(&workdir).unwrap_or(workdir);
    let lines = match open(&file) {
        Ok(lines) => lines,
        Err(e) => return usage_error(vec![e]),
    };
    let results = match Results::open(&results_path, &existing) {
        Ok(r) => r,
        Err(e) => {
            eprint_line(&format!("error: {e}"));
            return EXIT_USAGE;
        }
    };
    let to_run = scan.tasks - scan.skipped;
    let mut stream = Counted {
        tasks: TaskStream::new(lines, opts.shard, existing.finished, workdir),
        left: to_run,
    };
    let settings = settings(opts, &cfg, opts.parallel);
    let cpu = cpu_time();
    let started = Instant::now();
    let store = StoreAt::of(&cfg);
    let gw = match start_gateway(cfg) {
        Ok(gw) => gw,
        Err(code) => return code,
    };
    let mut sink = TasksSink {
        results,
        json: opts.json,
        stream: opts.stream_json.then(|| Stream::new(store.max_turns)),
        permission_mode: opts.approve.name(),
        atif: opts.atif.clone(),
        trajectories: missing,
        totals: Totals::default(),
        shard: opts.shard,
        host: host_name(),
        state_db: std::path::absolute(&store.db)
            .unwrap_or(store.db.clone())
            .to_string_lossy()
            .into_owned(),
        write_error: None,
        progress: std::io::stderr()
            .is_terminal()
            .then(|| Progress::new(to_run)),
    };
    let end = Batch::new(gw, &mut stream, settings).run(&mut sink);
    if let Some(p) = &mut sink.progress {
        p.clear();
    }
    let wrote_trajectories = store.write(&sink.trajectories);
    let wall = started.elapsed();
    let cpu = cpu_time().saturating_sub(cpu);
    let ran = sink.totals.ended();
    let mut summary = json!({
        "type": "exec.summary",
        "tasks": scan.tasks,
        "skipped": scan.skipped,
        "ran": ran,
        "not_started": end.not_started,
        "results": results_path.to_string_lossy(),
        "wall_s": wall.as_secs_f64(),
        "tasks_per_s": if wall.is_zero() { 0.0 } else { ran as f64 / wall.as_secs_f64() },
        "cpu_s": cpu.as_secs_f64(),
        "cpu_ms_per_task": if ran == 0 { 0.0 } else { ms(cpu) / ran as f64 },
    });
    merge_into(&mut summary, sink.totals.json());
    if let Some(shard) = opts.shard {
        summary["shard"] = json!(shard.name());
    }
    print_out(&format!("{summary}\n"));
    if let Some(e) = &sink.write_error {
        eprint_line(&format!("error: records could not be written: {e}"));
        return EXIT_GATEWAY;
    }
    if let Err(code) = wrote_trajectories {
        return code;
    }
    if let Some(why) = &stream.tasks.broken {
        eprint_line(&format!(
            "error: {}: {why}; the tasks after it were not run",
            file.display()
        ));
        return EXIT_USAGE;
    }
    if end.stopped {
        Status::Interrupted.exit_code()
    } else if sink.totals.counts[0] == ran {
        0
    } else {
        EXIT_SOME_FAILED
    }
}

fn trajectory_file(dir: &Path, task_id: &str) -> PathBuf {
    dir.join(tasks::dir_name(task_id)).join("trajectory.json")
}

/// A tasks file's stream, counting what it has not handed out yet (for `not_started`).
struct Counted<R> {
    tasks: TaskStream<R>,
    left: usize,
}

impl<R: Read> Source for Counted<R> {
    fn next_task(&mut self) -> Option<Task> {
        let task = self.tasks.next_task()?;
        self.left = self.left.saturating_sub(1);
        Some(task)
    }
    fn left(&self) -> usize {
        self.left
    }
}

/// `dir/stem.<suffix>` for `dir/stem.ext`.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tasks".into());
    path.with_file_name(format!("{stem}.{suffix}"))
}

struct TasksSink {
    results: Results,
    json: bool,
    stream: Option<Stream>,
    permission_mode: &'static str,
    /// `--atif DIR`, and the trajectories to write there once the gateway exited.
    atif: Option<PathBuf>,
    trajectories: Vec<Wanted>,
    totals: Totals,
    /// Written into each record: which shard and machine ran the task.
    shard: Option<Shard>,
    host: String,
    /// The state.db holding the task's session, for `exec merge --sessions`.
    state_db: String,
    write_error: Option<String>,
    progress: Option<Progress>,
}

impl Sink for TasksSink {
    fn event(&mut self, params: &Value) {
        show_event(self.json, self.stream.as_mut(), params);
    }

    fn opened(&mut self, _index: usize, result: &Value) {
        show_opened(self.stream.as_mut(), result, self.permission_mode);
    }

    fn finished(&mut self, _index: usize, task: &Task, outcome: &Outcome) {
        if let Some(stream) = &mut self.stream {
            print_out(&format!("{}\n", stream.result(outcome, Some(&task.id))));
        }
        if let (Some(dir), Some(id)) = (&self.atif, &outcome.stored_session_id) {
            self.trajectories.push(Wanted {
                file: trajectory_file(dir, &task.id),
                session_id: id.clone(),
            });
        }
        let mut record = outcome.record(Some(&task.id));
        if let Some(shard) = self.shard {
            record["shard"] = json!(shard.name());
        }
        record["host"] = json!(self.host);
        record["state_db"] = json!(self.state_db);
        if let Err(e) = self.results.write(&record)
            && self.write_error.is_none()
        {
            eprint_line(&format!("error: cannot write a record: {e}"));
            self.write_error = Some(e.to_string());
        }
        self.totals.add(
            outcome.status,
            &outcome.usage,
            &outcome.subagents,
            outcome.tool_calls,
        );
        if let Some(p) = &mut self.progress {
            p.update(&self.totals.counts);
        }
    }
}

/// A one-line progress bar on stderr (a terminal), redrawn at most every [`PROGRESS_EVERY`].
struct Progress {
    total: usize,
    started: Instant,
    drawn: Option<Instant>,
}

impl Progress {
    fn new(total: usize) -> Progress {
        Progress {
            total,
            started: Instant::now(),
            drawn: None,
        }
    }

    fn update(&mut self, counts: &[usize]) {
        let ended: usize = counts.iter().sum();
        let now = Instant::now();
        if ended < self.total && self.drawn.is_some_and(|at| now < at + PROGRESS_EVERY) {
            return;
        }
        self.drawn = Some(now);
        let line = progress_line(counts, self.total, now - self.started);
        let _ = write!(std::io::stderr(), "\r\x1b[K{line}");
    }

    fn clear(&mut self) {
        if self.drawn.is_some() {
            let _ = writeln!(std::io::stderr());
        }
    }
}

fn progress_line(counts: &[usize], total: usize, elapsed: Duration) -> String {
    const WIDTH: usize = 30;
    let ended: usize = counts.iter().sum();
    let filled = (ended * WIDTH).checked_div(total).unwrap_or(WIDTH);
    let rate = ended as f64 / elapsed.as_secs_f64().max(1e-9);
    format!(
        "[{}{}] {ended}/{total}  done {}  failed {}  {rate:.1} tasks/s",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        counts[0],
        ended - counts[0],
    )
}

// ---- small things -----------------------------------------------------------------------------

/// `extra`'s fields set in `into` (both objects).
fn merge_into(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

/// This machine's name, for the records (empty when it has none).
fn host_name() -> String {
    crate::util::read_proc("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// User + system CPU time of this process (the gateway and `exec` together; not the tools).
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes one plain struct we own; no pointers are kept.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// One line in one `write`, so records of processes sharing a log file never interleave.
fn eprint_line(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn parse(list: &[&str]) -> Result<Options, String> {
        match parse_args(&args(list), &|_| None)? {
            Args::Run(o) => Ok(*o),
            Args::Help => Err("help".into()),
        }
    }

    #[test]
    fn parses_one_task_and_passes_gateway_flags_on() {
        let o = parse(&[
            "--json",
            "say",
            "hi",
            "--flush-interval",
            "0.5",
            "--no-signals",
        ])
        .unwrap();
        assert!(o.json);
        assert_eq!(o.prompt, ["say", "hi"]);
        assert_eq!(o.gateway, ["--flush-interval", "0.5", "--no-signals"]);
        // A flag the gateway does not know takes no word of the prompt with it.
        let o = parse(&["--bogus", "p", "--home=x"]).unwrap();
        assert_eq!(
            (o.gateway, o.prompt),
            (args(&["--bogus", "--home=x"]), args(&["p"]))
        );
        assert_eq!(o.approve, Approve::AskFails);
        assert_eq!(o.timeout, Some(Duration::from_secs(3600)));
        let o = parse(&["--timeout=0", "--approve", "always", "-", "--resume", "x"]).unwrap();
        assert_eq!((o.timeout, o.approve), (None, Approve::Always));
        assert_eq!(o.prompt, ["-"]);
        assert_eq!(o.resume.as_deref(), Some("x"));
        assert_eq!(parse(&["--", "--json"]).unwrap().prompt, ["--json"]);
        assert_eq!(parse_args(&args(&["x", "-h"]), &|_| None), Ok(Args::Help));
    }

    #[test]
    fn refuses_what_does_not_fit() {
        for bad in [
            &[][..],
            &["--tasks", "t.jsonl", "prompt"],
            &["--tasks", "t.jsonl", "--resume", "x"],
            &["--continue", "p"],
            &["--parallel", "0", "p"],
            &["--parallel", "5000", "p"],
            &["--timeout", "-1", "p"],
            &["--approve", "maybe", "p"],
            &["--resume"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn environment_sets_the_defaults_and_flags_win() {
        let env = |k: &str| match k {
            "TUI_GATEWAY_EXEC_PARALLEL" => Some("3".to_string()),
            "TUI_GATEWAY_EXEC_APPROVE" => Some("never".to_string()),
            "TUI_GATEWAY_EXEC_TIMEOUT_S" => Some("2.5".to_string()),
            _ => None,
        };
        let Ok(Args::Run(o)) = parse_args(&args(&["--tasks", "t", "--parallel", "4"]), &env) else {
            panic!("parse failed")
        };
        assert_eq!((o.parallel, o.approve), (4, Approve::Never));
        assert_eq!(o.timeout, Some(Duration::from_millis(2500)));
        let bad = |k: &str| (k == "TUI_GATEWAY_EXEC_PARALLEL").then(|| "lots".to_string());
        let err = parse_args(&args(&["p"]), &bad).unwrap_err();
        assert!(err.starts_with("TUI_GATEWAY_EXEC_PARALLEL"), "{err}");
    }

    #[test]
    fn results_and_workdir_sit_beside_the_tasks_file() {
        let results = beside(Path::new("/data/swe.jsonl"), "results.jsonl");
        assert_eq!(results, Path::new("/data/swe.results.jsonl"));
        assert_eq!(
            beside(&results, "work"),
            Path::new("/data/swe.results.work")
        );
    }

    #[test]
    fn progress_line_counts_and_fills() {
        let line = progress_line(&[3, 1, 0, 0, 0], 8, Duration::from_secs(2));
        assert!(
            line.starts_with("[###############---------------] 4/8"),
            "{line}"
        );
        assert!(line.contains("done 3  failed 1  2.0 tasks/s"), "{line}");
    }
}
