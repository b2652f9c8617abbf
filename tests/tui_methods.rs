//! Every method the stock Hermes TUI can call, found in its own source, gets an answer: a
//! result or a documented error, never "unknown method". Skipped (with the reason) when the
//! TUI's source is not beside the project.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::json;

/// The TUI's TypeScript source: `HERMES_TUI_SRC`, else the reference copy beside the project.
fn tui_source() -> Option<PathBuf> {
    let dir = std::env::var_os("HERMES_TUI_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hermes-reference/tui/src")
        });
    dir.is_dir().then_some(dir)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "__tests__") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "ts" || x == "tsx") {
            out.push(p);
        }
    }
}

/// Method names in `rpc('…')` / `request<T>('…')` calls, plus the completion calls.
fn called_methods(dir: &Path) -> Vec<String> {
    let call = regex::Regex::new(r#"(?:rpc|request)(?:<[^(]*>)?\(\s*['"]([a-z_]+\.[a-z_.]+)['"]"#)
        .unwrap();
    let complete = regex::Regex::new(r#"['"](complete\.[a-z_]+)['"]"#).unwrap();
    let mut files = Vec::new();
    sources(dir, &mut files);
    let mut names = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for re in [&call, &complete] {
            names.extend(re.captures_iter(&text).map(|c| c[1].to_string()));
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_method_the_tui_calls_is_answered() {
    let Some(dir) = tui_source() else {
        eprintln!(
            "skipped: the Hermes TUI source is not at ../shared/hermes-reference/tui/src (set HERMES_TUI_SRC)"
        );
        return;
    };
    let methods = called_methods(&dir);
    assert!(
        methods.len() >= 60,
        "found only {} method names in {}: {methods:?}",
        methods.len(),
        dir.display()
    );
    let mut g = Gateway::start();
    let mut unknown = Vec::new();
    for m in &methods {
        // A fresh session for each call: some calls close, compress or branch theirs.
        let s = g.create_session(json!({}));
        let id = g.send_request(m, json!({"session_id": s.id}));
        let answer = g.wait_response(&id, secs(20));
        if answer["error"]["code"] == -32601 {
            unknown.push(m.clone());
        }
    }
    assert!(
        unknown.is_empty(),
        "answered as unknown methods: {unknown:?}"
    );
    g.ping();
}
