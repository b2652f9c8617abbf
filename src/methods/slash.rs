//! `slash.exec {command, session_id?}` and `command.dispatch {name, arg?, session_id?}`: the
//! slash commands the TUI forwards to the gateway. Built-in reports answer at once; a quick
//! command of config.yaml either runs under the tool supervisor (answered when it ends) or
//! names another command (`{type: alias}`, which the TUI dispatches again). Anything else gets
//! one line saying it is not supported — never an error.

use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Value, json};

use super::commands::{self, Runner};
use super::params::{self, Params};
use super::quick::{self, QuickAction};
use super::reports;
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::code;
use crate::tools::{Ending, Outcome};

/// Command lines longer than this are refused (-32602).
const COMMAND_MAX: usize = 64 * 1024;
/// Quick-command aliases followed at most before giving up (a loop).
const ALIAS_DEPTH: usize = 8;
/// Characters of a quick command's output answered at most (the capture keeps more).
const OUTPUT_MAX: usize = 16 * 1024;

/// Which result shape the caller reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `slash.exec`: `{output}` (or a dispatch object for aliases).
    Exec,
    /// `command.dispatch`: `{type: "exec", output}` / `{type: "alias", target}`.
    Dispatch,
}

pub fn slash_exec(
    gw: &mut Gateway,
    id: &crate::rpc::frame::Id,
    p: &Params,
    now: Instant,
) -> super::Reply {
    let line = match params::opt_str(p, "command") {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Some(Err(RpcError::invalid_params(
                "invalid params: command is required",
            )));
        }
        Err(e) => return Some(Err(e)),
    };
    let line = line.trim().trim_start_matches('/');
    let (name, arg) = match line.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a.trim()),
        None => (line, ""),
    };
    run(gw, id, p, name, arg, Shape::Exec, now)
}

pub fn command_dispatch(
    gw: &mut Gateway,
    id: &crate::rpc::frame::Id,
    p: &Params,
    now: Instant,
) -> super::Reply {
    let name = match params::opt_str(p, "name") {
        Ok(Some(n)) => n.trim().trim_start_matches('/'),
        Ok(None) => {
            return Some(Err(RpcError::invalid_params(
                "invalid params: name is required",
            )));
        }
        Err(e) => return Some(Err(e)),
    };
    let arg = match params::opt_str(p, "arg") {
        Ok(a) => a.unwrap_or("").trim(),
        Err(e) => return Some(Err(e)),
    };
    run(gw, id, p, name, arg, Shape::Dispatch, now)
}

fn run(
    gw: &mut Gateway,
    id: &crate::rpc::frame::Id,
    p: &Params,
    name: &str,
    arg: &str,
    shape: Shape,
    now: Instant,
) -> super::Reply {
    if name.is_empty() {
        return Some(Err(RpcError::new(code::EMPTY_COMMAND, "empty command")));
    }
    if name.len() + arg.len() > COMMAND_MAX {
        return Some(Err(RpcError::invalid_params(format!(
            "invalid params: command is longer than {COMMAND_MAX} bytes"
        ))));
    }
    // A session named must exist; none named is fine (reports then say so).
    let rid = match params::opt_str(p, "session_id") {
        Ok(Some(s)) if !s.trim().is_empty() => {
            if !gw.sessions.contains_key(s.trim()) {
                return Some(Err(RpcError::session_not_found()));
            }
            Some(s.trim().to_string())
        }
        Ok(_) => None,
        Err(e) => return Some(Err(e)),
    };
    let name = name.to_ascii_lowercase();
    if let Some(c) = commands::find(&name) {
        let mut words = arg.split_whitespace();
        let sub = words.next().unwrap_or("");
        let text = match c.runner {
            Runner::Gateway if c.name == "tools" && matches!(sub, "enable" | "disable") => {
                let names: Vec<&str> = words.collect();
                let servers = super::toolbox::mcp_servers(&gw.mcp);
                super::toolbox::tools_command(&mut gw.tools.set, sub, &names, &servers)
            }
            Runner::Gateway => reports::report(gw, c.name, rid.as_deref()),
            Runner::Tui(via) => format!(
                "/{} is carried out by the TUI itself ({via}), not by slash.exec",
                c.name
            ),
        };
        return Some(Ok(answer_text(shape, text)));
    }
    let q = quick::load(&gw.cfg.home);
    let mut current = name.clone();
    for _ in 0..ALIAS_DEPTH {
        let Some(qc) = q.find(&current) else {
            break;
        };
        match &qc.action {
            QuickAction::Exec { command, timeout } => {
                let cwd = rid
                    .as_deref()
                    .and_then(|r| gw.sessions.get(r))
                    .map(|s| s.cwd.clone())
                    .unwrap_or_else(crate::util::default_cwd);
                let done = match shape {
                    Shape::Exec => exec_answer as fn(&Outcome) -> Value,
                    Shape::Dispatch => dispatch_answer,
                };
                let (cmd, timeout) = (command.clone(), *timeout);
                return match crate::tools::runs::run_for_request(
                    gw,
                    id.clone(),
                    &cmd,
                    &PathBuf::from(cwd),
                    timeout,
                    done,
                    now,
                ) {
                    Ok(()) => None,
                    Err(why) => Some(Ok(answer_text(shape, format!("/{}: {why}", qc.name)))),
                };
            }
            QuickAction::Alias { target } => {
                let target_name = target.split_whitespace().next().unwrap_or("");
                if q.find(target_name).is_some() && commands::find(target_name).is_none() {
                    current = target_name.to_ascii_lowercase();
                    continue;
                }
                return Some(Ok(json!({"type": "alias", "target": target})));
            }
        }
    }
    if current != name {
        return Some(Ok(answer_text(
            shape,
            format!("/{name}: quick command aliases loop (or nest deeper than {ALIAS_DEPTH})"),
        )));
    }
    if let Some(answer) = super::skills::dispatch(gw, &name, arg, rid.as_deref()) {
        return Some(Ok(answer));
    }
    Some(Ok(answer_text(
        shape,
        format!("/{name} is not supported by this gateway (/help lists the commands)"),
    )))
}

fn answer_text(shape: Shape, text: String) -> Value {
    match shape {
        Shape::Exec => json!({"output": text}),
        Shape::Dispatch => json!({"type": "exec", "output": text}),
    }
}

/// The text a finished quick command answers with: its output, then how it ended when that
/// was not a plain success.
pub fn outcome_text(o: &Outcome) -> String {
    let mut text = o.output.trim_end().to_string();
    if text.len() > OUTPUT_MAX {
        let mut cut = text.len() - OUTPUT_MAX;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text = format!("[... {cut} bytes cut ...]\n{}", &text[cut..]);
    }
    let note = match (&o.start_error, o.ending) {
        (Some(e), _) => Some(format!("[could not start the command: {e}]")),
        (None, Some(Ending::Timeout)) => Some(format!(
            "[Command timed out after {}s]",
            o.timeout.as_secs_f64().round()
        )),
        (None, Some(Ending::Interrupted)) => Some("[Command interrupted]".to_string()),
        (None, None) if o.code != 0 => Some(format!("[exit {}]", o.code)),
        (None, None) => None,
    };
    if let Some(note) = note {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&note);
    }
    if text.is_empty() {
        text = "(no output)".to_string();
    }
    text
}

fn exec_answer(o: &Outcome) -> Value {
    json!({"output": outcome_text(o)})
}

fn dispatch_answer(o: &Outcome) -> Value {
    json!({"type": "exec", "output": outcome_text(o)})
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn o(output: &str, code: i32, ending: Option<Ending>) -> Outcome {
        Outcome {
            output: output.into(),
            code,
            ending,
            timeout: Duration::from_secs(2),
            start_error: None,
        }
    }

    #[test]
    fn outcomes_read_as_one_text() {
        assert_eq!(outcome_text(&o("hi\n", 0, None)), "hi");
        assert_eq!(outcome_text(&o("", 0, None)), "(no output)");
        assert_eq!(outcome_text(&o("bad\n", 3, None)), "bad\n[exit 3]");
        assert_eq!(
            outcome_text(&o("part", 124, Some(Ending::Timeout))),
            "part\n[Command timed out after 2s]"
        );
        let long = "é".repeat(OUTPUT_MAX);
        let t = outcome_text(&o(&long, 0, None));
        assert!(
            t.starts_with("[... ") && t.len() < OUTPUT_MAX + 40,
            "{}",
            t.len()
        );
    }
}
