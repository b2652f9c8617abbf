//! The gateway's side of skills (`src/skills/`): the scan stepped a slice per loop iteration
//! (`pump`), requests that need the skills held until the first scan is complete (in order,
//! and what comes after one that changes something held behind it; `ping` never waits), the
//! TUI's `skills.manage` and `skills.reload`, the banner's `info.skills`, skills and bundles
//! as slash commands (`/<slug>`, several skills at the start of one line) and
//! `HERMES_TUI_SKILLS`.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

use super::commands;
use super::params::{self, Params};
use crate::clock::Budget;
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::{Id, Request};
use crate::skills::{bundles, invoke, view};

/// The scan's slice of an iteration: half the others', so a `ping` behind it waits less.
const SCAN_SLICE: std::time::Duration = std::time::Duration::from_millis(2);
/// Requests held at most while the first scan runs (past it they are answered at once).
const HELD_MAX: usize = 4096;

/// Methods whose answer depends on the skills.
const NEEDS_SKILLS: [&str; 8] = [
    "prompt.submit",
    "prompt.background",
    "commands.catalog",
    "complete.slash",
    "slash.exec",
    "command.dispatch",
    "skills.manage",
    "skills.reload",
];

/// Of those, the ones that only read: a request behind one of them need not wait in line (no
/// answer it gives depends on theirs), so only what needs the skills waits for the first scan.
const QUERIES: [&str; 3] = ["commands.catalog", "complete.slash", "skills.manage"];

/// What waits for the skills.
#[derive(Default)]
pub struct Waiting {
    /// Requests held until the first scan is complete, in arrival order.
    held: std::collections::VecDeque<Request>,
    /// Of `held`, those that change something (a prompt, a command, a reload): what comes
    /// after one waits behind it, so it happens in the order it was asked.
    ordered: usize,
    /// `skills.reload` calls waiting for their scan, with the commands before it.
    reloads: Vec<(Id, BTreeMap<String, String>)>,
}

/// Whether `req`'s answer depends on the skills: one of [`NEEDS_SKILLS`], or a new session
/// when `HERMES_TUI_SKILLS` preloads skills into it.
fn needs_skills(req: &Request) -> bool {
    NEEDS_SKILLS.contains(&req.method.as_str())
        || (req.method == "session.create"
            && std::env::var_os("HERMES_TUI_SKILLS").is_some_and(|v| !v.is_empty()))
}

/// `Some(req)` to dispatch it now, `None` when it waits for the first scan: a request that
/// needs the skills, and any request behind one that changes something. `ping` never waits.
pub fn hold(gw: &mut Gateway, req: Request) -> Option<Request> {
    let w = &gw.skills_waiting;
    let needs = needs_skills(&req) || w.ordered > 0;
    if req.method == "ping" || !needs || w.held.len() >= HELD_MAX || gw.skills.borrow().ready() {
        return Some(req);
    }
    if !QUERIES.contains(&req.method.as_str()) {
        gw.skills_waiting.ordered += 1;
    }
    gw.skills_waiting.held.push_back(req);
    None
}

/// Whether the loop must not sleep: a scan is under way.
pub fn busy(gw: &Gateway) -> bool {
    gw.skills.borrow().scanning()
}

/// Step the scan within its slice; when one completes, tell the sessions, answer what
/// waited for it.
pub fn pump(gw: &mut Gateway, now: Instant) {
    if gw.shutdown.is_some() && gw.skills.borrow().scanning() {
        gw.skills.borrow_mut().abandon();
    } else {
        let done = gw
            .skills
            .borrow_mut()
            .step(&Budget::of(gw.clock, now, SCAN_SLICE), now);
        match done {
            Some(r) if r.changed => {
                let rids: Vec<String> = gw.sessions.keys().cloned().collect();
                for rid in rids {
                    gw.emit_info(&rid);
                }
            }
            _ => {}
        }
    }
    if !gw.skills.borrow().scanning() {
        for (id, before) in std::mem::take(&mut gw.skills_waiting.reloads) {
            let answer = reloaded(gw, &before);
            gw.outbox().answer(&id, &answer);
        }
    }
    if gw.skills.borrow().ready() {
        gw.skills_waiting.ordered = 0;
        while let Some(req) = gw.skills_waiting.held.pop_front() {
            gw.handle_request(req, now);
        }
    }
}

/// `{category: [names]}` of the skills offered (the banner's `info.skills`).
pub fn info(gw: &Gateway) -> Value {
    gw.skills.borrow().catalog().by_category()
}

/// A slash command a skill or a bundle makes.
pub struct SkillCommand {
    /// Without the slash.
    pub slug: String,
    pub description: String,
    /// The bundle's, for a bundle.
    pub bundle: Option<bundles::Bundle>,
}

/// Bundles, then skills, each `/<slug>` once and none a built-in command takes.
pub fn skill_commands(gw: &Gateway) -> (Vec<SkillCommand>, Vec<String>) {
    let (found, problems) = bundles::load(&gw.cfg.home);
    let mut out: Vec<SkillCommand> = Vec::new();
    let taken = |out: &Vec<SkillCommand>, slug: &str| {
        commands::find(slug).is_some() || out.iter().any(|c| c.slug == slug)
    };
    for b in found {
        if !taken(&out, &b.slug) {
            out.push(SkillCommand {
                slug: b.slug.clone(),
                description: b.description.clone(),
                bundle: Some(b),
            });
        }
    }
    let skills = gw.skills.borrow();
    for s in skills.catalog().offered() {
        let slug = crate::skills::catalog::slug(s.name());
        if slug.is_empty() || taken(&out, &slug) {
            continue;
        }
        let d = &s.meta.description;
        let description = if d.is_empty() {
            format!("Invoke the {} skill", s.name())
        } else {
            d.clone()
        };
        out.push(SkillCommand {
            slug,
            description,
            bundle: None,
        });
    }
    (out, problems)
}

/// The one-line description a catalog shows (Hermes cuts at 120).
pub fn short(d: &str) -> String {
    if d.chars().count() > 120 {
        format!("{}…", d.chars().take(120).collect::<String>())
    } else {
        d.to_string()
    }
}

/// What the skills' problems add to the catalog's warning.
pub fn warnings(gw: &Gateway) -> Vec<String> {
    let skills = gw.skills.borrow();
    let bad: Vec<&str> = skills.catalog().malformed().collect();
    match bad.len() {
        0 => Vec::new(),
        n => vec![format!(
            "{n} skill(s) skipped (malformed SKILL.md): {}",
            bad.join("; ")
        )],
    }
}

/// `/<name> arg` when `name` is a bundle's or a skill's command: `{type: "skill", name,
/// message}` (a bundle: `{type: "send", message, notice}`), or a refusal saying why.
pub fn dispatch(gw: &Gateway, name: &str, arg: &str, rid: Option<&str>) -> Option<Value> {
    let key = name.replace('_', "-");
    let (cmds, _) = skill_commands(gw);
    let cmd = cmds.iter().find(|c| c.slug == key)?;
    let session = rid
        .and_then(|r| gw.sessions.get(r))
        .map(|s| s.stored_id.clone())
        .unwrap_or_default();
    let skills = gw.skills.borrow();
    let catalog = skills.catalog();
    let home = &gw.cfg.home;
    if let Some(b) = &cmd.bundle {
        let (mut loaded, mut missing, mut disabled) = (Vec::new(), Vec::new(), Vec::new());
        for id in &b.skills {
            match view::load(catalog, id, home) {
                Some(l) => loaded.push(l),
                None if catalog
                    .lookup(id)
                    .iter()
                    .any(|s| s.offer == crate::skills::catalog::Offer::Disabled) =>
                {
                    disabled.push(id.clone())
                }
                None => missing.push(id.clone()),
            }
        }
        if loaded.is_empty() {
            return Some(json!({"type": "exec",
                "output": format!("/{}: none of the bundle's skills could be loaded ({})", b.slug, b.skills.join(", "))}));
        }
        let notes = invoke::BundleNotes {
            name: &b.name,
            missing: &missing,
            disabled: &disabled,
            instruction: &b.instruction,
        };
        let mut notice = format!("⚡ Loading bundle: {} ({} skills)", b.name, loaded.len());
        if !missing.is_empty() {
            notice.push_str(&format!("\nSkipped missing skills: {}", missing.join(", ")));
        }
        let message = invoke::bundle(&loaded, &notes, arg, &session);
        return Some(json!({"type": "send", "message": message, "notice": notice}));
    }
    let by_slug = |slug: &str| {
        catalog
            .offered()
            .find(|s| crate::skills::catalog::slug(s.name()) == slug)
            .map(|s| s.rel.clone())
    };
    let first = by_slug(&key)?;
    let Some(first) = view::load(catalog, &first, home) else {
        return Some(
            json!({"type": "exec", "output": format!("/{key}: the skill could not be read")}),
        );
    };
    // Further `/skill` words at the start of the line load too (Hermes: up to 5 in all).
    let mut keys = vec![format!("/{key}")];
    let mut stacked = vec![first];
    let mut rest = arg.trim_start();
    while stacked.len() < invoke::STACKED_MAX && rest.starts_with('/') {
        let (token, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let slug = token.trim_start_matches('/').replace('_', "-");
        let is_skill = cmds.iter().any(|c| c.slug == slug && c.bundle.is_none());
        let Some(loaded) = by_slug(&slug)
            .filter(|_| is_skill && !keys.contains(&format!("/{slug}")))
            .and_then(|rel| view::load(catalog, &rel, home))
        else {
            break;
        };
        keys.push(format!("/{slug}"));
        stacked.push(loaded);
        rest = tail.trim_start();
    }
    let message = if stacked.len() == 1 {
        invoke::single(&stacked[0], rest.trim(), &session)
    } else {
        invoke::stacked(&stacked, &keys.join(" "), &[], rest.trim(), &session)
    };
    Some(json!({"type": "skill", "name": stacked[0].name, "message": message}))
}

/// The system-prompt text of the skills `HERMES_TUI_SKILLS` names (empty without any).
pub fn preload(gw: &Gateway, session: &str) -> String {
    let Ok(raw) = std::env::var("HERMES_TUI_SKILLS") else {
        return String::new();
    };
    let names = invoke::preload_names(&raw);
    let skills = gw.skills.borrow();
    let mut loaded = Vec::new();
    for n in &names {
        match view::load(skills.catalog(), n, &gw.cfg.home) {
            Some(l) => loaded.push(l),
            None => {
                crate::diag!("[skills] HERMES_TUI_SKILLS: unknown or disabled skill {n:?}, skipped")
            }
        }
    }
    invoke::preloaded(&loaded, session)
}

/// `skills.manage {action, query?, page?}`: `list` and `inspect` from the skills found;
/// the online hub (`search`, `browse`, `install`) is not supported.
pub fn manage(gw: &Gateway, p: &Params) -> Result<Value, RpcError> {
    let action = params::req_str(p, "action")?;
    let query = params::opt_str(p, "query")?.unwrap_or("").trim();
    params::opt_u64(p, "page")?;
    match action {
        "list" => Ok(json!({"skills": info(gw)})),
        "inspect" => {
            let skills = gw.skills.borrow();
            let c = skills.catalog();
            let info = match view::resolve(c, query) {
                Ok(s) => json!({
                    "name": s.name(),
                    "category": s.category.as_deref().unwrap_or("general"),
                    "description": s.meta.description,
                    "path": s.dir.display().to_string(),
                }),
                Err(_) => json!({}),
            };
            Ok(json!({"info": info}))
        }
        "search" | "browse" | "install" => Err(RpcError::new(
            crate::rpc::frame::code::NOT_SUPPORTED,
            format!(
                "not supported by tui-gateway: {action} needs Hermes' online skills hub \
                 (skills in ~/.hermes/skills and skills.external_dirs are found)"
            ),
        )),
        _ => Err(RpcError::invalid_params(
            "invalid params: action must be list, inspect, search, browse or install",
        )),
    }
}

/// The commands skills make, by slug, for a reload's difference.
fn snapshot(gw: &Gateway) -> BTreeMap<String, String> {
    let skills = gw.skills.borrow();
    skills
        .catalog()
        .offered()
        .map(|s| (s.name().to_string(), s.meta.description.clone()))
        .collect()
}

/// `skills.reload`: scan again; answered when the scan is complete.
pub fn reload(gw: &mut Gateway, id: &Id) -> super::Reply {
    let before = snapshot(gw);
    gw.skills.borrow_mut().rescan();
    gw.skills_waiting.reloads.push((id.clone(), before));
    None
}

/// `{output, result: {added, removed, unchanged, total, commands}}` after a reload.
fn reloaded(gw: &Gateway, before: &BTreeMap<String, String>) -> Value {
    let after = snapshot(gw);
    let pick = |from: &BTreeMap<String, String>, not_in: &BTreeMap<String, String>| -> Vec<Value> {
        from.iter()
            .filter(|(n, _)| !not_in.contains_key(*n))
            .map(|(n, d)| json!({"name": n, "description": d}))
            .collect()
    };
    let (added, removed) = (pick(&after, before), pick(before, &after));
    let unchanged: Vec<&String> = after.keys().filter(|n| before.contains_key(*n)).collect();
    let mut lines = vec!["Reloading skills...".to_string()];
    if added.is_empty() && removed.is_empty() {
        lines.push("No new skills detected.".into());
    }
    for (title, list) in [("Added skills:", &added), ("Removed skills:", &removed)] {
        if !list.is_empty() {
            lines.push(title.into());
            lines.extend(
                list.iter()
                    .map(|i| format!("  - {}", i["name"].as_str().unwrap_or(""))),
            );
        }
    }
    lines.extend(warnings(gw));
    lines.push(format!("{} skill(s) available", after.len()));
    let commands = skill_commands(gw)
        .0
        .iter()
        .filter(|c| c.bundle.is_none())
        .count();
    json!({"output": lines.join("\n"), "result": {"added": added, "removed": removed,
           "unchanged": unchanged, "total": after.len(), "commands": commands}})
}

/// `/skills` typed into `slash.exec`: what is installed, by category.
pub fn report(gw: &Gateway) -> String {
    let by = info(gw);
    let Some(map) = by.as_object().filter(|m| !m.is_empty()) else {
        return "No skills found (put them in ~/.hermes/skills/<category>/<name>/SKILL.md)."
            .to_string();
    };
    let total: usize = map.values().filter_map(Value::as_array).map(Vec::len).sum();
    let mut lines = vec![format!("{total} skill(s) in {} categories:", map.len())];
    for (cat, names) in map {
        let names: Vec<&str> = names
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        lines.push(format!("  {cat}: {}", names.join(", ")));
    }
    lines.extend(warnings(gw));
    lines.push("Type /<skill> [instruction] to use one; /skills opens the hub.".into());
    lines.join("\n")
}
