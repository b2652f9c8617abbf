//! The slash commands we support, in one table: what `commands.catalog` lists (and so what the
//! TUI's `/help` and `/` popup show), what `complete.slash` completes, and who runs each one —
//! this gateway's `slash.exec`, or the TUI itself (with the method it calls).

use serde_json::{Map, Value, json};

use super::params::{self, Params};
use super::quick::{self, Quick};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;

/// Who carries a command out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// `slash.exec` / `command.dispatch` of this gateway answer it (the TUI may still run
    /// some of them itself: `/help` from the catalog, `/status` and `/usage` through
    /// `session.status` / `session.usage`).
    Gateway,
    /// The TUI runs it without asking `slash.exec`; the text names what it uses.
    Tui(&'static str),
}

#[derive(Debug)]
pub struct Command {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub category: &'static str,
    pub args: &'static str,
    pub help: &'static str,
    /// Words `complete.slash` offers after the name.
    pub subs: &'static [&'static str],
    pub runner: Runner,
}

const fn cmd(
    name: &'static str,
    aliases: &'static [&'static str],
    category: &'static str,
    args: &'static str,
    help: &'static str,
    runner: Runner,
) -> Command {
    Command {
        name,
        aliases,
        category,
        args,
        help,
        subs: &[],
        runner,
    }
}

const SESSION: &str = "Session";
const CONFIG: &str = "Configuration";
const TOOLS: &str = "Tools & Skills";
const INFO: &str = "Info";
const EXIT: &str = "Exit";
const TUI: &str = "TUI";
/// The category quick commands of config.yaml are listed under (as Hermes does).
pub const USER: &str = "User commands";

use Runner::{Gateway as Gw, Tui};

/// Every command we list, in `/help` order.
pub static COMMANDS: &[Command] = &[
    cmd(
        "new",
        &["reset"],
        SESSION,
        "[title]",
        "Start a new session",
        Tui("session.create"),
    ),
    cmd(
        "clear",
        &[],
        SESSION,
        "",
        "Clear the screen and start a new session",
        Tui("session.create"),
    ),
    cmd(
        "title",
        &[],
        SESSION,
        "[name]",
        "Show or set the session's title",
        Tui("session.title"),
    ),
    cmd(
        "status",
        &[],
        SESSION,
        "",
        "Show session, model, token and cwd info",
        Gw,
    ),
    cmd(
        "sessions",
        &["switch", "resume"],
        SESSION,
        "",
        "Browse and resume sessions",
        Tui("session.list, session.resume"),
    ),
    cmd(
        "history",
        &[],
        SESSION,
        "",
        "Show the conversation so far",
        Tui("its own transcript"),
    ),
    cmd(
        "save",
        &[],
        SESSION,
        "",
        "Save the conversation as JSON",
        Tui("session.save"),
    ),
    cmd(
        "undo",
        &[],
        SESSION,
        "[N]",
        "Back up the last exchange",
        Tui("session.undo"),
    ),
    cmd(
        "rollback",
        &[],
        SESSION,
        "[list|diff N|N [file]]",
        "List or restore filesystem checkpoints",
        Tui("rollback.list, rollback.diff, rollback.restore"),
    ),
    cmd(
        "retry",
        &[],
        SESSION,
        "",
        "Resend the last message",
        Tui("session.undo"),
    ),
    cmd(
        "branch",
        &["fork"],
        SESSION,
        "[name]",
        "Branch the session into a new one",
        Tui("session.branch"),
    ),
    cmd(
        "compress",
        &[],
        SESSION,
        "",
        "Summarise older turns to free context",
        Tui("session.compress"),
    ),
    cmd(
        "stop",
        &[],
        SESSION,
        "",
        "Stop running background processes",
        Tui("process.stop"),
    ),
    cmd(
        "background",
        &["bg", "btw"],
        SESSION,
        "<prompt>",
        "Run a prompt in the background",
        Tui("prompt.background"),
    ),
    cmd(
        "queue",
        &["q"],
        SESSION,
        "<prompt>",
        "Queue a prompt for after this turn",
        Tui("prompt.submit"),
    ),
    cmd(
        "steer",
        &[],
        SESSION,
        "<prompt>",
        "Inject a message into the running turn",
        Tui("session.steer"),
    ),
    cmd(
        "redraw",
        &[],
        SESSION,
        "",
        "Repaint the screen",
        Tui("nothing from the gateway"),
    ),
    cmd(
        "config",
        &[],
        CONFIG,
        "",
        "Show where the configuration lives and the effective settings",
        Gw,
    ),
    cmd(
        "model",
        &[],
        CONFIG,
        "[name] [--global]",
        "Switch the model (no name opens the picker)",
        Tui("config.set, model.options"),
    ),
    cmd(
        "yolo",
        &[],
        CONFIG,
        "",
        "Toggle skipping dangerous-command approvals for the session",
        Tui("config.set"),
    ),
    Command {
        subs: &[
            "none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra", "show", "hide",
            "on", "off", "full", "clamp",
        ],
        ..cmd(
            "reasoning",
            &[],
            CONFIG,
            "[level|show|hide]",
            "Set reasoning effort and display",
            Tui("config.set"),
        )
    },
    Command {
        subs: &["normal", "fast", "status", "on", "off"],
        ..cmd(
            "fast",
            &[],
            CONFIG,
            "[normal|fast|status]",
            "Toggle fast mode: the model's faster, dearer service (OpenAI, Claude Opus 4.6)",
            Tui("config.set"),
        )
    },
    cmd(
        "verbose",
        &[],
        CONFIG,
        "",
        "Cycle the tool progress display",
        Tui("config.set"),
    ),
    Command {
        subs: &["queue", "steer", "interrupt", "status"],
        ..cmd(
            "busy",
            &[],
            CONFIG,
            "[queue|steer|interrupt|status]",
            "What Enter does while a turn runs",
            Tui("config.get, config.set"),
        )
    },
    Command {
        subs: &["kaomoji", "emoji", "unicode", "ascii"],
        ..cmd(
            "indicator",
            &[],
            CONFIG,
            "[kaomoji|emoji|unicode|ascii]",
            "Pick the busy-indicator style",
            Tui("config.get, config.set"),
        )
    },
    cmd(
        "skin",
        &[],
        CONFIG,
        "[name]",
        "Show or change the display skin",
        Tui("config.get, config.set"),
    ),
    cmd(
        "personality",
        &[],
        CONFIG,
        "[name|none]",
        "Switch the personality for this session (config.yaml's agent.personalities)",
        Tui("config.set"),
    ),
    Command {
        subs: &["list", "enable", "disable"],
        ..cmd(
            "tools",
            &[],
            TOOLS,
            "[list|enable NAME|disable NAME]",
            "List the tools the model is offered; turn toolsets or tools on and off",
            Gw,
        )
    },
    cmd(
        "skills",
        &[],
        TOOLS,
        "",
        "Browse and inspect skills (/<skill> [instruction] uses one)",
        Gw,
    ),
    cmd(
        "reload-mcp",
        &["reload_mcp"],
        TOOLS,
        "",
        "Reload MCP servers from config",
        Tui("reload.mcp"),
    ),
    cmd(
        "reload",
        &[],
        TOOLS,
        "",
        "Reload .env variables into the running session",
        Tui("reload.env"),
    ),
    cmd("help", &[], INFO, "", "List commands and hotkeys", Gw),
    cmd(
        "usage",
        &[],
        INFO,
        "",
        "Show token usage of the session",
        Gw,
    ),
    cmd(
        "version",
        &["v"],
        INFO,
        "",
        "Show the gateway's version",
        Gw,
    ),
    cmd(
        "copy",
        &[],
        INFO,
        "[number]",
        "Copy the last assistant answer",
        Tui("the clipboard"),
    ),
    cmd(
        "quit",
        &["exit"],
        EXIT,
        "",
        "Exit",
        Tui("nothing from the gateway"),
    ),
    Command {
        subs: &[
            "hidden",
            "collapsed",
            "expanded",
            "cycle",
            "thinking",
            "tools",
            "subagents",
            "activity",
        ],
        ..cmd(
            "details",
            &["detail"],
            TUI,
            "[mode]",
            "Set how much agent detail is shown",
            Tui("config.set"),
        )
    },
    cmd(
        "compact",
        &[],
        TUI,
        "",
        "Toggle compact display mode",
        Tui("config.set"),
    ),
    Command {
        subs: &["on", "off", "toggle", "wheel", "buttons", "all"],
        ..cmd(
            "mouse",
            &["scroll"],
            TUI,
            "[on|off|toggle|wheel|buttons|all]",
            "Set mouse tracking",
            Tui("config.set"),
        )
    },
    Command {
        subs: &["on", "off", "top", "bottom", "toggle"],
        ..cmd(
            "statusbar",
            &["sb"],
            TUI,
            "[on|off|top|bottom]",
            "Status bar position",
            Tui("config.set"),
        )
    },
    cmd(
        "logs",
        &[],
        TUI,
        "[lines]",
        "Show recent gateway log lines",
        Tui("its own log"),
    ),
];

/// A built-in command by name or alias (any case, with or without the slash).
pub fn find(name: &str) -> Option<&'static Command> {
    let name = name.trim_start_matches('/');
    COMMANDS.iter().find(|c| {
        c.name.eq_ignore_ascii_case(name) || c.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    })
}

/// The one-line description shown in `/help` and the popup.
pub fn describe(c: &Command) -> String {
    if c.args.is_empty() {
        c.help.to_string()
    } else {
        format!("{} (usage: /{} {})", c.help, c.name, c.args)
    }
}

/// Quick commands a built-in does not shadow (the built-in wins, as in the TUI).
pub fn usable_quick(q: &Quick) -> impl Iterator<Item = &quick::QuickCommand> {
    q.commands.iter().filter(|c| find(&c.name).is_none())
}

/// `commands.catalog`: the TUI's `SlashCatalog` (`pairs`, `categories`, `canon`, `sub`,
/// `skill_count`, `warning`).
pub fn catalog(gw: &Gateway) -> Value {
    let q = quick::load(&gw.cfg.home);
    let mut pairs = Vec::new();
    let mut canon = Map::new();
    let mut sub = Map::new();
    let mut categories: Vec<(&str, Vec<Value>)> = Vec::new();
    let mut add = |category: &'static str, pair: Value| {
        match categories.iter_mut().find(|(n, _)| *n == category) {
            Some((_, list)) => list.push(pair.clone()),
            None => categories.push((category, vec![pair.clone()])),
        }
        pairs.push(pair);
    };
    for c in COMMANDS {
        let slash = format!("/{}", c.name);
        for a in c.aliases {
            canon.insert(format!("/{a}"), json!(slash));
        }
        canon.insert(slash.clone(), json!(slash));
        if !c.subs.is_empty() {
            sub.insert(slash.clone(), json!(c.subs));
        }
        add(c.category, json!([slash, describe(c)]));
    }
    let mut warnings: Vec<String> = q.warning.iter().cloned().collect();
    for qc in &q.commands {
        let slash = format!("/{}", qc.name);
        if find(&qc.name).is_some() {
            warnings.push(format!(
                "quick command {slash} is shadowed by the built-in command"
            ));
            continue;
        }
        canon.insert(slash.to_ascii_lowercase(), json!(slash));
        add(USER, json!([slash, qc.description]));
    }
    // Skills and bundles: in `pairs` (the popup) and `skill_count` (/help), as Hermes; in
    // `canon` too, so the TUI takes `/<skill>` as itself, not as a prefix of a built-in.
    let (skill_cmds, bundle_problems) = super::skills::skill_commands(gw);
    for c in &skill_cmds {
        let slash = format!("/{}", c.slug);
        canon.insert(slash.clone(), json!(slash));
        pairs.push(json!([slash, super::skills::short(&c.description)]));
    }
    let skill_count = skill_cmds.len();
    warnings.extend(bundle_problems);
    warnings.extend(super::skills::warnings(gw));
    let categories: Vec<Value> = categories
        .into_iter()
        .map(|(name, pairs)| json!({"name": name, "pairs": pairs}))
        .collect();
    json!({
        "pairs": pairs,
        "categories": categories,
        "canon": canon,
        "sub": sub,
        "skill_count": skill_count,
        "warning": warnings.join("; "),
    })
}

/// Inputs longer than this complete to nothing (nobody types a 4 KiB command name).
const SLASH_TEXT_MAX: usize = 4096;
/// Items answered at most.
const ITEMS_MAX: usize = 30;

/// `complete.slash {text}`: command names (and aliases) starting with what follows the `/`;
/// after a known command and a space, its words. `replace_from` is where the TUI splices the
/// item's text in (after the `/`, or after the last space).
pub fn complete_slash(gw: &Gateway, p: &Params) -> Result<Value, RpcError> {
    let text = params::opt_str(p, "text")?.unwrap_or("");
    if !text.starts_with('/') || text.len() > SLASH_TEXT_MAX {
        return Ok(json!({"items": [], "replace_from": 1}));
    }
    if let Some(items) = super::slash_args::details(text) {
        let replace_from = text
            .rfind(char::is_whitespace)
            .map_or(text.len(), |i| i + 1);
        return Ok(json!({"items": items, "replace_from": replace_from}));
    }
    if let Some(space) = text.find(char::is_whitespace) {
        let replace_from = text.rfind(char::is_whitespace).map_or(space, |i| i + 1);
        let items = complete_sub(gw, text, space);
        return Ok(json!({"items": items, "replace_from": replace_from}));
    }
    let word = text[1..].to_ascii_lowercase();
    let mut items = Vec::new();
    let mut push = |name: &str, meta: String| {
        if name.to_ascii_lowercase().starts_with(&word) && items.len() < ITEMS_MAX {
            // An exact name gets a trailing space, so the popup stays open and Enter runs it.
            let text = if name.eq_ignore_ascii_case(&word) {
                format!("{name} ")
            } else {
                name.to_string()
            };
            items.push(json!({"text": text, "display": format!("/{name}"), "meta": meta}));
        }
    };
    for c in COMMANDS {
        push(c.name, describe(c));
        // An alias only when its command's own name does not match already (`/fo` → fork).
        if !c.name.starts_with(&word) {
            for a in c.aliases {
                push(a, format!("alias for /{}", c.name));
            }
        }
    }
    let q = quick::load(&gw.cfg.home);
    for qc in usable_quick(&q) {
        push(&qc.name, qc.description.clone());
    }
    for c in super::skills::skill_commands(gw).0 {
        push(&c.slug, super::skills::short(&c.description));
    }
    // The name typed in full comes first, so Enter runs it rather than a longer name.
    items.sort_by_key(|i| !i["text"].as_str().is_some_and(|t| t.ends_with(' ')));
    Ok(json!({"items": items, "replace_from": 1}))
}

/// The words after a command: the toolsets of `/tools enable|disable`, the skins and the
/// personalities, else the second word of a command with fixed words (`/mouse wh` → `wheel`).
fn complete_sub(gw: &Gateway, text: &str, space: usize) -> Vec<Value> {
    let rest = text[space..].trim_start();
    let one_word = !rest.contains(char::is_whitespace);
    // Not a command of the catalog (the TUI runs it), but Hermes completes its names.
    if text[..space].eq_ignore_ascii_case("/personality") && one_word {
        let configured = super::config::personalities(&super::config::doc(gw));
        return super::slash_args::personalities(rest, &configured);
    }
    let Some(c) = find(&text[..space]) else {
        return Vec::new();
    };
    if c.name == "skin" && one_word {
        return super::slash_args::skins(rest, &super::config::user_skins(&gw.cfg.home));
    }
    if c.name == "tools" {
        let states = super::toolbox::toolset_states(&gw.tools.set);
        if let Some(items) = super::slash_args::tools(rest, &states) {
            return items;
        }
    }
    fixed_words(c, rest)
}

fn fixed_words(c: &Command, rest: &str) -> Vec<Value> {
    if rest.contains(char::is_whitespace) {
        return Vec::new();
    }
    let prefix = rest.to_ascii_lowercase();
    c.subs
        .iter()
        .filter(|s| s.starts_with(&prefix) && **s != prefix)
        .map(|s| json!({"text": s, "display": s, "meta": ""}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in COMMANDS {
            for n in std::iter::once(&c.name).chain(c.aliases) {
                assert!(seen.insert(n.to_ascii_lowercase()), "/{n} listed twice");
            }
        }
    }

    #[test]
    fn find_takes_aliases_case_and_slash() {
        assert_eq!(find("/V").map(|c| c.name), Some("version"));
        assert_eq!(find("fork").map(|c| c.name), Some("branch"));
        assert!(find("nonesuch").is_none());
    }

    #[test]
    fn sub_words_complete_after_a_space() {
        let mouse = find("mouse").unwrap();
        assert_eq!(
            fixed_words(mouse, "wh"),
            vec![json!({"text": "wheel", "display": "wheel", "meta": ""})]
        );
        assert!(fixed_words(mouse, "wheel x").is_empty());
        assert_eq!(fixed_words(find("sb").unwrap(), "").len(), 5);
    }
}
