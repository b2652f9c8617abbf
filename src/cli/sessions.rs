//! `tui-gateway sessions list|show`: read the store directly, for people.

use crate::config::Config;
use crate::session::transcript::Role;
use crate::store::Store;
use crate::util;

pub fn run(args: &[String]) -> i32 {
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
            eprintln!("usage: tui-gateway sessions list | sessions show ID");
            2
        }
    }
}

fn list(store: &Store) -> i32 {
    match store.list(200, None) {
        Ok(rows) => {
            for r in rows {
                let title = r.title.unwrap_or_default();
                let state = r.end_reason.unwrap_or_else(|| "open".into());
                println!(
                    "{}  {}  {:>4} msgs  {:<12} {}  {}",
                    r.id,
                    util::human_time(r.started_at),
                    r.message_count,
                    state,
                    title,
                    r.preview
                );
            }
            0
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
            eprintln!("no stored session {id:?}");
            return 1;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    println!("session {}  {}", s.id, s.title.as_deref().unwrap_or(""));
    println!(
        "started {}  model {}",
        util::human_time(s.started_at),
        s.model.as_deref().unwrap_or("?")
    );
    println!();
    for m in &s.messages {
        let when = util::human_time(m.timestamp);
        let text = m.content.as_deref().unwrap_or("");
        match m.role {
            Role::User => println!("[{when}] you:\n{text}\n"),
            Role::Assistant => {
                if !text.is_empty() {
                    println!("[{when}] assistant:\n{text}\n");
                }
                if let Some(calls) = &m.tool_calls {
                    println!("[{when}] assistant calls tools: {calls}\n");
                }
            }
            Role::Tool => println!(
                "[{when}] tool {}:\n{text}\n",
                m.tool_name.as_deref().unwrap_or("?")
            ),
            Role::System => println!("[{when}] system:\n{text}\n"),
        }
    }
    0
}
