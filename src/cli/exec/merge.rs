//! `tui-gateway exec merge RESULTS.jsonl...`: the shards' results files joined into one summary,
//! the same figures a single run of every task would print. A task recorded more than once (an
//! `interrupted` record, then a `--continue`'s) counts as its last record. A last line cut short
//! by a kill is left out; any other line that is not a result record refuses the merge, every
//! such line named (`FILE:LINE`).
//!
//! `--sessions OUT.db` also joins the shards' session stores: every session (its messages and
//! per-model usage) of each shard's state.db — the ones the records name (`state_db`), or
//! those given with `--from` — copied into `OUT.db` (Hermes' schema, created when absent), which
//! `tui-gateway sessions` and Hermes read like any state.db.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::lines::{Line, Lines, Text};
use super::record::Totals;
use super::tasks::{IdKey, id_key};
use super::{EXIT_GATEWAY, EXIT_SOME_FAILED, EXIT_USAGE, eprint_line, print_out};
use crate::config::{flag_value, split_flag};

const USAGE: &str =
    "usage: tui-gateway exec merge [--sessions OUT.db [--from DB|HOME]...] RESULTS.jsonl...
One exec.summary line of the records in every results file (the shards' of
`exec --tasks --shard I/N`); a task's last record counts.
  --sessions OUT.db   also copy every session of the shards' state.db files into OUT.db
                      (created when absent; sessions already in it are kept)
  --from DB|HOME      a shard's state.db (or its HERMES_HOME), repeatable; default: the
                      state.db each record names
";

pub fn run(args: &[String]) -> i32 {
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") {
        return if args.is_empty() {
            eprint_line(USAGE.trim_end());
            EXIT_USAGE
        } else {
            crate::cli::out::write_stdout(USAGE)
        };
    }
    let mut files: Vec<String> = Vec::new();
    let mut into: Option<PathBuf> = None;
    let mut from: Vec<PathBuf> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let (name, inline) = split_flag(arg);
        let value = match name {
            "--sessions" | "--from" => match flag_value(name, inline, args, &mut i) {
                Ok(v) => PathBuf::from(v),
                Err(e) => {
                    eprint_line(&format!("error: {e}\n{}", USAGE.trim_end()));
                    return EXIT_USAGE;
                }
            },
            _ if arg.starts_with("--") => {
                eprint_line(&format!("error: unknown flag {arg}\n{}", USAGE.trim_end()));
                return EXIT_USAGE;
            }
            _ => {
                files.push(arg.clone());
                continue;
            }
        };
        if name == "--sessions" {
            into = Some(value);
        } else {
            from.push(value);
        }
    }
    if files.is_empty() || (!from.is_empty() && into.is_none()) {
        eprint_line(USAGE.trim_end());
        return EXIT_USAGE;
    }
    let args = &files[..];
    // Two readings, a line at a time: which line holds each task's last record (a few bytes
    // a task), then the figures of those lines — never every record at once.
    let mut last: HashMap<IdKey, (usize, usize)> = HashMap::new();
    let mut errors = Vec::new();
    let mut cut_short = 0;
    for (f, file) in args.iter().enumerate() {
        let failed = each_record(file, |line, record| match record {
            Some((id, _)) => {
                last.insert(id_key(id), (f, line.number));
            }
            // What a SIGKILL cut off mid-write: the task reruns under --continue.
            None if !line.ended => cut_short += 1,
            None => errors.push(format!(
                "{file}:{}: not a result record of a task",
                line.number
            )),
        });
        errors.extend(failed);
    }
    if !errors.is_empty() {
        eprint_line(&format!(
            "{}\nnothing was merged",
            errors
                .iter()
                .map(|e| format!("error: {e}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
        return EXIT_USAGE;
    }
    let mut totals = Totals::default();
    let mut shards = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    let mut stores = BTreeSet::new();
    let mut no_figures = None;
    for (f, file) in args.iter().enumerate() {
        let failed = each_record(file, |line, record| {
            let Some((id, r)) = record else { return };
            if last.get(&id_key(id)) != Some(&(f, line.number)) {
                return;
            }
            if !totals.add_record(r) {
                no_figures.get_or_insert_with(|| id.to_string());
            }
            stores.extend(r["state_db"].as_str().map(PathBuf::from));
            shards.extend(r["shard"].as_str().map(str::to_string));
            hosts.extend(r["host"].as_str().map(str::to_string));
        });
        if let Some(e) = failed {
            eprint_line(&format!("error: {e}\nnothing was merged"));
            return EXIT_USAGE;
        }
    }
    if let Some(id) = no_figures {
        eprint_line(&format!("error: the record of task {id:?} has no figures"));
        return EXIT_USAGE;
    }
    let tasks = last.len();
    let mut summary = json!({
        "type": "exec.summary",
        "merged": args,
        "tasks": tasks,
        "shards": shards,
        "hosts": hosts,
        "cut_short": cut_short,
    });
    super::merge_into(&mut summary, totals.json());
    if let Some(into) = &into {
        let sources: Vec<PathBuf> = if from.is_empty() {
            stores.into_iter().collect()
        } else {
            from.iter().map(|p| state_db_of(p)).collect()
        };
        match join_sessions(into, &sources) {
            Ok(joined) => summary["sessions"] = joined,
            Err(e) => {
                eprint_line(&format!("error: --sessions {}: {e}", into.display()));
                return EXIT_GATEWAY;
            }
        }
    }
    print_out(&format!("{summary}\n"));
    if totals.counts[0] == tasks {
        0
    } else {
        EXIT_SOME_FAILED
    }
}

/// A shard's state.db: the file given, or `state.db` in the home given.
fn state_db_of(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("state.db")
    } else {
        path.to_path_buf()
    }
}

/// Copies every session of each of `sources` into the state.db `into`; what was copied.
fn join_sessions(into: &Path, sources: &[PathBuf]) -> Result<Value, String> {
    if sources.is_empty() {
        return Err(
            "the records name no state.db (written by an older exec?): give each shard's with --from"
                .to_string(),
        );
    }
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
    for source in sources {
        if !source.is_file() {
            return Err(format!("{}: no such state.db", source.display()));
        }
        if same(source, into) {
            return Err(format!("{} is one of the shards' stores", into.display()));
        }
    }
    let mut store = crate::store::Store::open(into, "NORMAL")?;
    let (mut sessions, mut messages, mut already) = (0, 0, 0);
    for source in sources {
        let got = store
            .absorb(source)
            .map_err(|e| format!("from {}: {e}", source.display()))?;
        sessions += got.sessions;
        messages += got.messages;
        already += got.already;
    }
    Ok(json!({
        "into": into.to_string_lossy(),
        "from": sources.iter().map(|s| s.to_string_lossy()).collect::<Vec<_>>(),
        "copied": sessions,
        "messages": messages,
        "already": already,
    }))
}

/// Calls `f` with each non-blank line of the results file `file` and the task record it holds,
/// if any (`(task id, record)`); an error when the file cannot be read.
fn each_record(file: &str, mut f: impl FnMut(&Line, Option<(&str, &Value)>)) -> Option<String> {
    let mut lines = match Lines::open(Path::new(file)) {
        Ok(Some(lines)) => lines,
        Ok(None) => return Some(format!("{file}: no such file")),
        Err(e) => return Some(e),
    };
    loop {
        let line = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => return None,
            Err(e) => return Some(format!("{file}: cannot read: {e}")),
        };
        let record = match &line.text {
            Text::Line(text) if text.trim().is_empty() => continue,
            Text::Line(text) => serde_json::from_str::<Value>(text)
                .ok()
                .filter(|r| r["type"] == "exec.result" && r["status"].is_string()),
            _ => None,
        };
        let id = record.as_ref().and_then(|r| r["task_id"].as_str());
        match (id, &record) {
            (Some(id), Some(r)) => f(&line, Some((id, r))),
            _ => f(&line, None),
        }
    }
}
