//! `tui-gateway sessions list|show|search|export`: read the store directly, for people (and,
//! `export`, for harnesses: Hermes' JSONL or an ATIF trajectory).

use std::io::IsTerminal;

use crate::cli::out::{Out, printable};
use crate::config::{Config, flag_value, split_flag};
use crate::session::transcript::Role;
use crate::store::{ListFilter, SearchQuery, Store};
use crate::util;

const USAGE: &str = "usage:
  tui-gateway sessions list [LIST FLAGS] [FLAGS]       stored sessions, most recent activity first
  tui-gateway sessions show ID [FLAGS]                 a stored session's transcript (ID or title)
  tui-gateway sessions search TEXT [SEARCH FLAGS] [FLAGS]
                                                       sessions whose messages hold every word of
                                                       TEXT (`word*`: a prefix; \"a phrase\"), best
                                                       match first, with a snippet
  tui-gateway sessions export ID [--format jsonl|atif] [FLAGS]
                                                       a stored session (ID or title) on stdout:
                                                       jsonl (default): one line, Hermes' export
                                                       (its sessions columns and messages);
                                                       atif: an ATIF-v1.4 trajectory (Harbor's)
list flags:
  --source NAME   only sessions of this source (tui, cli, telegram…)
  --since WHEN    only sessions active since WHEN: YYYY-MM-DD (UTC), or 30m, 12h, 7d, 4w ago
  --limit N       sessions per page (default 50)
  --page N        which page (default 1)
search flags:
  --source NAME   as above
  --limit N       sessions at most (default 20)
flags:
";

/// Sessions per page of `sessions list`, and results of `sessions search`, by default.
const LIST_LIMIT: usize = 50;
const SEARCH_LIMIT: usize = 20;
/// The largest `--limit`.
const LIMIT_MAX: usize = 10_000;

/// The flags of `list` and `search`, and the words left.
#[derive(Debug, Default, PartialEq)]
struct Picked {
    source: Option<String>,
    since: Option<f64>,
    limit: Option<usize>,
    page: Option<usize>,
    format: Option<Format>,
    words: Vec<String>,
}

/// What `sessions export` writes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    Jsonl,
    Atif,
}

fn pick_flags(args: &[String], now: f64) -> Result<Picked, String> {
    let mut p = Picked::default();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let (name, inline) = split_flag(arg);
        if !matches!(
            name,
            "--source" | "--since" | "--limit" | "--page" | "--format"
        ) {
            p.words.push(arg.clone());
            continue;
        }
        let value = flag_value(name, inline, args, &mut i)?;
        let count = |v: &str| {
            v.parse::<usize>()
                .ok()
                .filter(|n| (1..=LIMIT_MAX).contains(n))
                .ok_or(format!(
                    "{name}: {v:?} is not a number from 1 to {LIMIT_MAX}"
                ))
        };
        match name {
            "--source" => p.source = Some(value),
            "--since" => p.since = Some(parse_since(&value, now)?),
            "--limit" => p.limit = Some(count(&value)?),
            "--format" => {
                p.format = Some(match value.as_str() {
                    "jsonl" => Format::Jsonl,
                    "atif" => Format::Atif,
                    other => return Err(format!("--format: {other:?} is not jsonl or atif")),
                })
            }
            _ => p.page = Some(count(&value)?),
        }
    }
    Ok(p)
}

/// `YYYY-MM-DD` (midnight UTC) or an age (`30m`, `12h`, `7d`, `4w`) → unix seconds.
fn parse_since(v: &str, now: f64) -> Result<f64, String> {
    let bad = || format!("--since: {v:?} is neither YYYY-MM-DD nor an age like 30m, 12h, 7d, 4w");
    if let Some((n, unit)) = v.len().checked_sub(1).map(|i| v.split_at(i)) {
        let per = match unit {
            "m" => Some(60.0),
            "h" => Some(3600.0),
            "d" => Some(86_400.0),
            "w" => Some(7.0 * 86_400.0),
            _ => None,
        };
        if let (Some(per), Ok(n)) = (per, n.parse::<u32>()) {
            return Ok(now - f64::from(n) * per);
        }
    }
    let parts: Vec<&str> = v.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return Err(bad());
    };
    let (Ok(y), Ok(m), Ok(d)) = (y.parse::<i64>(), m.parse::<i64>(), d.parse::<i64>()) else {
        return Err(bad());
    };
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    Ok(crate::util::days_from_civil(y, m, d) as f64 * 86_400.0)
}

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
    let rest = match cfg
        .apply_flags(args)
        .and_then(|rest| cfg.overlay_dotenv(args).map(|()| rest))
    {
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
            crate::persist::fold_dead_journals(&mut s, crate::clock::Clock::SYSTEM);
            s
        }
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let picked = match pick_flags(&rest, util::unix_now()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let words: Vec<&str> = picked.words.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["list"] | [] if picked.format.is_none() => list(&store, &picked),
        ["show", id]
            if picked
                == Picked {
                    words: picked.words.clone(),
                    ..Picked::default()
                } =>
        {
            show(&store, id)
        }
        ["export", id]
            if picked
                == Picked {
                    words: picked.words.clone(),
                    format: picked.format,
                    ..Picked::default()
                } =>
        {
            export(&store, id, picked.format.unwrap_or(Format::Jsonl))
        }
        ["search", text @ ..]
            if !text.is_empty()
                && picked.since.is_none()
                && picked.page.is_none()
                && picked.format.is_none() =>
        {
            search(&store, &text.join(" "), &picked)
        }
        _ => {
            eprintln!("{USAGE}{}", Config::help());
            2
        }
    }
}

fn search(store: &Store, text: &str, picked: &Picked) -> i32 {
    let query = SearchQuery {
        text,
        limit: picked.limit.unwrap_or(SEARCH_LIMIT),
        source: picked.source.as_deref(),
        ..SearchQuery::default()
    };
    let hits = match store.search(&query) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    // Matches in bold on a terminal; marked as Hermes marks them elsewhere.
    let (open, close) = if std::io::stdout().is_terminal() {
        ("\x1b[1m", "\x1b[0m")
    } else {
        (">>>", "<<<")
    };
    let mut out = Out::new();
    for h in &hits {
        out.foreign(&format!(
            "{}  {}  {}",
            h.session_id,
            util::human_time(h.message_at),
            h.title.as_deref().unwrap_or("")
        ));
        out.line("");
        out.line("");
        let mut snippet = String::from("    ");
        for part in &h.snippet {
            // The text is escaped; only our own marks are written as they are.
            let text = printable(&part.text).replace('\n', " ");
            if part.hit {
                snippet.push_str(&format!("{open}{text}{close}"));
            } else {
                snippet.push_str(&text);
            }
        }
        out.line(snippet.trim_end());
    }
    if hits.is_empty() {
        eprintln!("no session matches {:?}", printable(text));
    }
    out.finish()
}

fn list(store: &Store, picked: &Picked) -> i32 {
    let limit = picked.limit.unwrap_or(LIST_LIMIT);
    let page = picked.page.unwrap_or(1);
    let filter = ListFilter {
        title: None,
        source: picked.source.as_deref(),
        since: picked.since,
        limit,
        offset: (page - 1) * limit,
    };
    match store.list(&filter) {
        Ok(rows) => {
            if rows.len() == limit {
                eprintln!("(more: --page {})", page + 1);
            }
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

/// The stored session `id` read, or the exit code after saying why there is none.
fn found<T>(id: &str, read: Result<Option<T>, crate::store::StoreError>) -> Result<T, i32> {
    match read {
        Ok(Some(s)) => Ok(s),
        Ok(None) => {
            eprintln!("no stored session {:?}", printable(id));
            Err(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(1)
        }
    }
}

fn export(store: &Store, id: &str, format: Format) -> i32 {
    let session = match found(id, store.export(id)) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let doc = match format {
        Format::Jsonl => session,
        Format::Atif => crate::cli::atif::trajectory(&session),
    };
    crate::cli::out::write_stdout(&format!("{doc}\n"))
}

fn show(store: &Store, id: &str) -> i32 {
    let s = match found(id, store.load(id)) {
        Ok(s) => s,
        Err(code) => return code,
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
