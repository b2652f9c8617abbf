//! `tui-gateway exec merge RESULTS.jsonl...`: the shards' results files joined into one summary,
//! the same figures a single run of every task would print. A task recorded more than once (an
//! `interrupted` record, then a `--continue`'s) counts as its last record. A last line cut short
//! by a kill is left out; any other line that is not a result record refuses the merge, every
//! such line named (`FILE:LINE`).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde_json::{Value, json};

use super::record::Totals;
use super::tasks::read_limited;
use super::{EXIT_SOME_FAILED, EXIT_USAGE, eprint_line, print_out};

pub fn run(args: &[String]) -> i32 {
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") {
        let usage = "usage: tui-gateway exec merge RESULTS.jsonl...\n\
                     One exec.summary line of the records in every results file (the shards' of\n\
                     `exec --tasks --shard I/N`); a task's last record counts.\n";
        return if args.is_empty() {
            eprint_line(usage.trim_end());
            EXIT_USAGE
        } else {
            crate::cli::out::write_stdout(usage)
        };
    }
    let mut last: HashMap<String, Value> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut errors = Vec::new();
    let mut cut_short = 0;
    for file in args {
        let path = Path::new(file);
        let text = match read_limited(path) {
            Ok(Some(t)) => t,
            Ok(None) => {
                errors.push(format!("{file}: no such file"));
                continue;
            }
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let record = serde_json::from_str::<Value>(line)
                .ok()
                .filter(|r| r["type"] == "exec.result" && r["status"].is_string());
            let id = record.as_ref().and_then(|r| r["task_id"].as_str());
            match (&record, id) {
                (Some(r), Some(id)) => {
                    if last.insert(id.to_string(), r.clone()).is_none() {
                        order.push(id.to_string());
                    }
                }
                // What a SIGKILL cut off mid-write: the task reruns under --continue.
                _ if n + 1 == lines.len() && !text.ends_with('\n') => cut_short += 1,
                _ => errors.push(format!("{file}:{}: not a result record of a task", n + 1)),
            }
        }
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
    for id in &order {
        let r = &last[id];
        if !totals.add_record(r) {
            eprint_line(&format!("error: the record of task {id:?} has no figures"));
            return EXIT_USAGE;
        }
        shards.extend(r["shard"].as_str().map(str::to_string));
        hosts.extend(r["host"].as_str().map(str::to_string));
    }
    let mut summary = json!({
        "type": "exec.summary",
        "merged": args,
        "tasks": order.len(),
        "shards": shards,
        "hosts": hosts,
        "cut_short": cut_short,
    });
    super::merge_into(&mut summary, totals.json());
    print_out(&format!("{summary}\n"));
    if totals.counts[0] == order.len() {
        0
    } else {
        EXIT_SOME_FAILED
    }
}
