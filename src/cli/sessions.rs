//! `tui-gateway sessions list|show`: read the store directly, for people.

use crate::cli::out::{Out, printable};
use crate::config::Config;
use crate::session::transcript::Role;
use crate::store::Store;
use crate::util;

const USAGE: &str = "usage:
  tui-gateway sessions list [FLAGS]      stored sessions, most recent first
  tui-gateway sessions show ID [FLAGS]   a stored session's transcript (ID or title)
flags:
";

pub fn run(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return crate::cli::out::write_stdout(&format!("{USAGE}{}", Config::help()));
    }
    let mut cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let rest = match cfg.apply_flags(args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let path = cfg.db_path();
    if !path.exists() {
        eprintln!("no sessions yet ({} does not exist)", path.display());
        return 1;
    }
    let store = match Store::open(&path, &cfg.synchronous) {
        Ok(mut s) => {
            // What a killed gateway left in its journal is part of the sessions.
            crate::persist::fold_dead_journals(&mut s);
            s
        }
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    match rest
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["list"] | [] => list(&store),
        ["show", id] => show(&store, id),
        _ => {
            eprintln!("{USAGE}{}", Config::help());
            2
        }
    }
}

fn list(store: &Store) -> i32 {
    match store.list(200, None) {
        Ok(rows) => {
            let mut out = Out::new();
            for r in rows {
                let state = r.end_reason.unwrap_or_else(|| "open".into());
                out.foreign(&format!(
                    "{}  {}  {:>4} msgs  {:<12} {}  {}",
                    r.id,
                    util::human_time(r.started_at),
                    r.message_count,
                    state,
                    r.title.unwrap_or_default(),
                    r.preview
                ));
                out.line("");
            }
            out.finish()
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn show(store: &Store, id: &str) -> i32 {
    let s = match store.load(id) {
        Ok(Some(s)) => s,
        Ok(None) => {
            eprintln!("no stored session {:?}", printable(id));
            return 1;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let mut out = Out::new();
    out.foreign(&format!(
        "session {}  {}\nstarted {}  model {}\n\n",
        s.id,
        s.title.as_deref().unwrap_or(""),
        util::human_time(s.started_at),
        s.model.as_deref().unwrap_or("?")
    ));
    for m in &s.messages {
        let when = util::human_time(m.timestamp);
        let text = m.content.as_deref().unwrap_or("");
        let block = match m.role {
            Role::User => format!("[{when}] you:\n{text}\n\n"),
            Role::Assistant => {
                let mut b = String::new();
                if !text.is_empty() {
                    b.push_str(&format!("[{when}] assistant:\n{text}\n\n"));
                }
                if let Some(calls) = &m.tool_calls {
                    b.push_str(&format!("[{when}] assistant calls tools: {calls}\n\n"));
                }
                b
            }
            Role::Tool => format!(
                "[{when}] tool {}:\n{text}\n\n",
                m.tool_name.as_deref().unwrap_or("?")
            ),
            Role::System => format!("[{when}] system:\n{text}\n\n"),
        };
        out.foreign(&block);
    }
    out.finish()
}
