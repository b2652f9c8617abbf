//! The text reports of the slash commands this gateway runs itself: `/status`, `/usage`,
//! `/tools`, `/skills`, `/version`, `/config`, `/help`.

use serde_json::Value;

use super::commands::{self, COMMANDS};
use super::quick;
use crate::event_loop::Gateway;
use crate::session::{Session, VERSION};

/// The report of built-in command `name` (canonical) for session `rid`, if any.
pub fn report(gw: &Gateway, name: &str, rid: Option<&str>) -> String {
    let session = rid.and_then(|r| gw.sessions.get(r));
    match name {
        "status" => session.map_or_else(no_session, status),
        "usage" => session.map_or_else(no_session, usage),
        "tools" => tools(gw, session),
        "skills" => super::skills::report(gw),
        "version" => format!("tui-gateway {VERSION}"),
        "config" => config(gw),
        "help" => help(gw),
        other => format!("/{other} has no report"),
    }
}

fn no_session() -> String {
    "no active session".to_string()
}

fn rows(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn tokens(s: &Session) -> String {
    format!(
        "{} in · {} out · {} total ({} model call{})",
        s.input_tokens,
        s.output_tokens,
        s.input_tokens + s.output_tokens,
        s.model_calls,
        if s.model_calls == 1 { "" } else { "s" }
    )
}

fn status(s: &Session) -> String {
    let running = match (s.running(), s.queued.len()) {
        (true, 0) => "yes".to_string(),
        (true, n) => format!("yes, {n} prompt(s) queued"),
        (false, _) => "no".to_string(),
    };
    let context = if s.context_max > 0 {
        let pct = (s.context_used as f64 / s.context_max as f64 * 100.0).round();
        format!(
            "{} of {} tokens ({}%)",
            s.context_used,
            s.context_max,
            pct.min(100.0)
        )
    } else {
        format!("{} tokens", s.context_used)
    };
    rows(&[
        (
            "Session",
            format!("{} (stored {})", s.runtime_id, s.stored_id),
        ),
        ("Title", s.title.clone().unwrap_or_else(|| "(none)".into())),
        ("Model", format!("{} ({})", s.model, s.provider)),
        ("Cwd", s.cwd.clone()),
        ("Messages", s.message_total().to_string()),
        ("Tokens", tokens(s)),
        ("Context", context),
        ("Tool calls", s.tool_call_count.to_string()),
        ("Running", running),
    ])
}

fn usage(s: &Session) -> String {
    let mut rows = vec![
        ("Model", s.model.clone()),
        ("Input tokens", s.input_tokens.to_string()),
        ("Output tokens", s.output_tokens.to_string()),
        ("Total", (s.input_tokens + s.output_tokens).to_string()),
        ("Model calls", s.model_calls.to_string()),
        ("Cost", cost(s)),
    ];
    let r = &s.subagents;
    if r.count > 0 {
        let spent = r.cost_usd.map_or(String::new(), |c| format!(", ~${c:.4}"));
        rows.push((
            "Subagents",
            format!(
                "{} ran: {} in / {} out tokens, {} model calls{spent}",
                r.count, r.input, r.output, r.calls
            ),
        ));
        if let Some(total) = s.usage()["total_cost_usd"].as_f64() {
            rows.push(("Cost with subagents", format!("~${total:.4}")));
        }
    }
    self::rows(&rows)
}

/// The session's cost and how sure it is (the stock TUI's `/usage` panel shows no cost).
fn cost(s: &Session) -> String {
    use crate::model::pricing::{CostSource, CostStatus};
    let a = &s.accounting;
    let usd = |x: f64| format!("${x:.4}");
    match (a.cost_status, a.cost_usd) {
        _ if s.model_calls == 0 => "no model calls yet".to_string(),
        (CostStatus::Included, _) => "included in the subscription".to_string(),
        (CostStatus::Actual, Some(x)) => format!("{} (reported by the provider)", usd(x)),
        (CostStatus::Estimated, Some(x)) => {
            let table = a.pricing_version.unwrap_or("Hermes' price table");
            format!("~{} (estimated from {table})", usd(x))
        }
        (_, known) => {
            let why = match a.cost_source {
                CostSource::None => format!("no price known for {} on {}", s.model, s.provider),
                _ => "the price table lacks a kind of token the last call used".to_string(),
            };
            match known {
                Some(x) if x > 0.0 => format!("n/a: {why} (earlier calls: ~{})", usd(x)),
                _ => format!("n/a: {why}"),
            }
        }
    }
}

/// The tools offered to the model, from the schema it is sent, under their toolsets (an MCP
/// server's are `mcp-<server>`), then the MCP servers not connected and why. Each line fits the session's terminal: the TUI's pager counts
/// lines, so a line it wraps would push the end of the list off the screen.
fn tools(gw: &Gateway, session: Option<&Session>) -> String {
    // The pager takes 8 columns (a margin, its border, two paddings, the transcript's
    // scrollbar), the indent 2, the `…` 1.
    let width = session.map_or(80, |s| s.cols as usize).max(40) - 11;
    let registry = &gw.tools.set;
    let mut out = format!("Tools offered to the model ({}):", registry.schemas().len());
    for (toolset, schemas) in registry.offered_by_toolset() {
        out.push_str(&format!("\n{toolset} ({}):", schemas.len()));
        for f in schemas.iter().map(|t| &t["function"]) {
            let line = format!(
                "{}({}): {}",
                f["name"].as_str().unwrap_or("?"),
                arguments(&f["parameters"]).join(", "),
                super::toolbox::first_sentence(f["description"].as_str().unwrap_or(""))
            );
            out.push_str("\n  ");
            out.push_str(&crate::util::clip(&line, width));
        }
    }
    // MCP servers that offer nothing now, and why (the banner's view of them).
    let servers = crate::mcp::status(&gw.mcp);
    for s in servers.as_array().into_iter().flatten() {
        if s["connected"] == true {
            continue;
        }
        let mut line = format!(
            "MCP server {}: {}",
            s["name"].as_str().unwrap_or("?"),
            s["status"].as_str().unwrap_or("?")
        );
        if let Some(e) = s["error"].as_str() {
            line.push_str(" (");
            line.push_str(e);
            line.push(')');
        }
        out.push('\n');
        out.push_str(&crate::util::clip(&line, width + 2));
    }
    out
}

/// A schema's parameters as `name` (required) or `name?`.
fn arguments(parameters: &Value) -> Vec<String> {
    let required: Vec<&str> = parameters["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    parameters["properties"]
        .as_object()
        .map(|props| {
            props
                .keys()
                .map(|k| match required.contains(&k.as_str()) {
                    true => k.clone(),
                    false => format!("{k}?"),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn secs(d: std::time::Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

fn config(gw: &Gateway) -> String {
    let c = &gw.cfg;
    let path = c.home.join("config.yaml");
    let file = match std::fs::metadata(&path) {
        Ok(_) => path.display().to_string(),
        Err(_) => format!("{} (not found: defaults apply)", path.display()),
    };
    let q = quick::load(&c.home);
    let names: Vec<String> = commands::usable_quick(&q)
        .map(|qc| format!("/{}", qc.name))
        .collect();
    let mut quick_line = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(" ")
    };
    if let Some(w) = &q.warning {
        quick_line.push_str(&format!(" ({w})"));
    }
    let mut r = vec![
        ("Config file", file),
        ("Hermes home", c.home.display().to_string()),
        ("Database", c.db_path().display().to_string()),
        ("Provider", gw.provider.name().to_string()),
        ("Model", gw.provider.default_model().to_string()),
    ];
    if let Some(w) = &gw.provider_warning {
        r.push(("Model warning", w.clone()));
    }
    r.extend([
        ("Command timeout", secs(c.command_timeout)),
        ("Approval timeout", secs(c.approval_timeout)),
        ("Session TTL", secs(c.session_ttl)),
        ("Flush interval", secs(c.flush_interval)),
        ("Quick commands", quick_line),
    ]);
    rows(&r)
}

fn help(gw: &Gateway) -> String {
    let mut out = String::new();
    let mut last = "";
    for c in COMMANDS {
        if c.category != last {
            out.push_str(&format!(
                "{}{}:\n",
                if last.is_empty() { "" } else { "\n" },
                c.category
            ));
            last = c.category;
        }
        out.push_str(&format!("  /{:<12} {}\n", c.name, commands::describe(c)));
    }
    let q = quick::load(&gw.cfg.home);
    let mut first = true;
    for qc in commands::usable_quick(&q) {
        if first {
            out.push_str(&format!("\n{}:\n", commands::USER));
            first = false;
        }
        out.push_str(&format!("  /{:<12} {}\n", qc.name, qc.description));
    }
    out.trim_end().to_string()
}
