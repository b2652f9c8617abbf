//! Reading skills for the model and for activation: `skills_list` and `skill_view` results
//! in Hermes' JSON shapes (`tools/skills_tool.py`), a skill's supporting files, and a
//! skill loaded by name for a slash command, a bundle or a preload. Files are read through
//! `util::open_regular` (non-blocking, regular files only), each bounded.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use super::catalog::{Catalog, Flat, Offer, Skill};
use super::header;
use super::scan::FILE_MAX;

/// A supporting file is read up to this many bytes (the rest is said to be cut).
pub const LINKED_MAX: usize = 256 * 1024;
/// Supporting files listed at most per skill.
const LINKED_LIST_MAX: usize = 500;

/// `skills_list {category?}`.
pub fn skills_list(c: &Catalog, category: Option<&str>) -> Value {
    let mut skills: Vec<&Skill> = c
        .offered()
        .filter(|s| category.is_none_or(|want| s.category.as_deref() == Some(want)))
        .collect();
    if skills.is_empty() && category.is_none() {
        return json!({"success": true, "skills": [], "categories": [],
                      "message": "No skills found in skills/ directory."});
    }
    skills.sort_by(|a, b| {
        (a.category.as_deref().unwrap_or(""), a.name())
            .cmp(&(b.category.as_deref().unwrap_or(""), b.name()))
    });
    let mut categories: Vec<&str> = skills
        .iter()
        .filter_map(|s| s.category.as_deref())
        .collect();
    categories.dedup();
    let rows: Vec<Value> = skills
        .iter()
        .map(|s| json!({"name": s.name(), "description": s.meta.description, "category": s.category}))
        .collect();
    json!({
        "success": true,
        "skills": rows,
        "categories": categories,
        "count": skills.len(),
        "hint": "Use skill_view(name) to see full content, tags, and linked files",
    })
}

fn failure(error: impl Into<String>) -> Value {
    json!({"success": false, "error": error.into()})
}

/// Why a name or a path a model gives may not be used, if it may not.
fn path_error(name: &str, what: &str) -> Option<String> {
    let p = Path::new(name.trim());
    // A Windows drive (`C:\x`, `C:x`) too, so `C:` is never read as a plugin's namespace.
    let mut chars = name.trim().chars();
    let drive = chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.next() == Some(':');
    if p.is_absolute() || name.trim().starts_with('\\') || drive {
        return Some(format!(
            "{what} must be a relative path within the skills directory."
        ));
    }
    if p.components().any(|c| matches!(c, Component::ParentDir)) || name.contains("..\\") {
        return Some(format!(
            "{what} cannot contain '..' path traversal components."
        ));
    }
    None
}

/// What a name resolves to: a skill's folder, or a legacy flat `<name>.md` file.
#[derive(Debug, Clone, Copy)]
pub enum Found<'a> {
    Skill(&'a Skill),
    Flat(&'a Flat),
}

/// The one skill `name` means, or the failure `skill_view` answers.
pub fn resolve<'a>(c: &'a Catalog, name: &str) -> Result<&'a Skill, Value> {
    match resolve_any(c, name)? {
        Found::Skill(s) => Ok(s),
        Found::Flat(_) => Err(not_found(c, name)),
    }
}

/// The one skill or flat file `name` means (Hermes' lookups: a path under a root, a folder
/// or header named so, a `<name>.md` file), or the failure `skill_view` answers; more than
/// one is ambiguous.
pub fn resolve_any<'a>(c: &'a Catalog, name: &str) -> Result<Found<'a>, Value> {
    if let Some(why) = path_error(name, "Skill name") {
        return Err(json!({"success": false, "error": why,
            "hint": "Use a skill name or relative path within the skills directory."}));
    }
    let found: Vec<Found> = (c.lookup(name).into_iter().map(Found::Skill))
        .chain(c.lookup_flat(name).into_iter().map(Found::Flat))
        .collect();
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(not_found(c, name)),
        many => {
            let paths: Vec<String> = many
                .iter()
                .map(|f| match f {
                    Found::Skill(s) => s.skill_md().display().to_string(),
                    Found::Flat(f) => f.path.display().to_string(),
                })
                .collect();
            Err(json!({"success": false,
                "error": format!("Ambiguous skill name '{name}': {} skills match across your local skills dir and external_dirs. Refusing to guess — load one explicitly by its categorized path.", many.len()),
                "matches": paths,
                "hint": "Pass the full relative path instead of the bare name (e.g., 'category/skill-name'), or rename one of the colliding skills so each name is unique."}))
        }
    }
}

fn not_found(c: &Catalog, name: &str) -> Value {
    let mut offered: Vec<&Skill> = c.offered().collect();
    offered.sort_by(|a, b| {
        (a.category.as_deref().unwrap_or(""), a.name())
            .cmp(&(b.category.as_deref().unwrap_or(""), b.name()))
    });
    let names: Vec<&str> = offered.iter().take(20).map(|s| s.name()).collect();
    json!({"success": false, "error": format!("Skill '{name}' not found."),
        "available_skills": names, "hint": "Use skills_list to see all available skills"})
}

/// Whether `s` may be loaded (an explicit load ignores `environments`), else the failure.
fn loadable(s: &Skill) -> Result<(), Value> {
    match s.offer {
        Offer::Unsupported => Err(json!({"success": false,
            "error": format!("Skill '{}' is not supported on this platform.", s.name()),
            "readiness_status": "unsupported"})),
        Offer::Disabled => Err(failure(format!(
            "Skill '{}' is disabled. Enable it with `hermes skills` or inspect the files directly on disk.",
            s.name()
        ))),
        _ => Ok(()),
    }
}

/// At most `max` bytes of the regular file `path`: the bytes and whether there was more.
pub fn read_head(path: &Path, max: usize) -> std::io::Result<Option<(Vec<u8>, bool)>> {
    let Some(f) = crate::util::open_regular(path)? else {
        return Ok(None);
    };
    let mut buf = Vec::new();
    f.take(max as u64 + 1).read_to_end(&mut buf)?;
    let more = buf.len() > max;
    buf.truncate(max);
    Ok(Some((buf, more)))
}

/// `skill_view {name, file_path?}`: `<plugin>:<skill>` is a plugin's skill when that plugin
/// is on, else the skill at `<plugin>/<skill>` on disk (Hermes' fall-through).
pub fn skill_view(c: &Catalog, name: &str, file_path: Option<&str>) -> Value {
    if path_error(name, "Skill name").is_none()
        && let Some((namespace, bare)) = name.trim().split_once(':')
    {
        if !super::plugins::valid_name(namespace) {
            return failure(format!(
                "Invalid namespace '{namespace}' in '{}'. Namespaces must match [a-zA-Z0-9_-]+.",
                name.trim()
            ));
        }
        if let Some(v) = super::plugins::view(&c.plugins, namespace, bare) {
            return v;
        }
    }
    let s = match resolve_any(c, name) {
        Ok(Found::Skill(s)) => s,
        // Hermes shows a flat skill itself whatever `file_path` asks (it has no folder).
        Ok(Found::Flat(f)) => return view_flat(c, f),
        Err(v) => return v,
    };
    if let Err(v) = loadable(s) {
        return v;
    }
    match file_path.filter(|p| !p.trim().is_empty()) {
        Some(fp) => view_file(s, name, fp),
        None => view_skill(c, s),
    }
}

fn view_file(s: &Skill, name: &str, file_path: &str) -> Value {
    let hint = "Use a relative path within the skill directory";
    if path_error(file_path, "file_path").is_some() {
        return json!({"success": false, "error": "Path traversal ('..') is not allowed.", "hint": hint});
    }
    let target = s.dir.join(file_path);
    let inside = match (
        std::fs::canonicalize(&target),
        std::fs::canonicalize(&s.dir),
    ) {
        (Ok(t), Ok(d)) => t.starts_with(&d),
        // Not there: listed below.
        (Err(_), _) => true,
        (_, Err(_)) => false,
    };
    if !inside {
        return json!({"success": false,
            "error": format!("Path escapes the skill directory: {file_path}"), "hint": hint});
    }
    let (bytes, more) = match read_head(&target, LINKED_MAX) {
        Ok(Some(read)) => read,
        Ok(None) => {
            return json!({"success": false,
                "error": format!("File '{file_path}' not found in skill '{name}'."),
                "available_files": available_files(&s.dir),
                "hint": "Use one of the available file paths listed above"});
        }
        Err(e) => return failure(format!("Cannot read '{file_path}': {e}")),
    };
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        // A cut may split a character: keep what is whole.
        Err(e) if more && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut b = e.into_bytes();
            b.truncate(valid);
            String::from_utf8(b).unwrap_or_default()
        }
        Err(_) => {
            let size = std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0);
            let file = target.file_name().map(|n| n.to_string_lossy().into_owned());
            return json!({"success": true, "name": name, "file": file_path,
                "content": format!("[Binary file: {}, size: {size} bytes]", file.unwrap_or_default()),
                "is_binary": true});
        }
    };
    let suffix = target
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let mut v = json!({"success": true, "name": name, "file": file_path, "content": text,
                       "file_type": suffix});
    if more {
        v["truncated"] = json!(true);
        v["hint"] = json!(format!(
            "Only the first {} KiB are shown; read the rest with read_file on {}",
            LINKED_MAX / 1024,
            target.display()
        ));
    }
    v
}

/// Files under a skill (not SKILL.md) by kind, for a `file_path` not found.
fn available_files(dir: &Path) -> Value {
    let mut by = serde_json::Map::new();
    for rel in files_under(dir, dir, 0, &mut 0) {
        let kind = ["references", "templates", "assets", "scripts"]
            .into_iter()
            .find(|k| rel.starts_with(&format!("{k}/")));
        let ext_ok = [".md", ".py", ".yaml", ".yml", ".json", ".tex", ".sh"]
            .iter()
            .any(|e| rel.ends_with(e));
        let key = match kind {
            Some(k) => k,
            None if ext_ok && rel != "SKILL.md" => "other",
            None => continue,
        };
        if let Some(list) = by.entry(key).or_insert_with(|| json!([])).as_array_mut() {
            list.push(json!(rel));
        }
    }
    Value::Object(by)
}

/// Relative paths of regular files under `dir` (sorted, bounded in number and depth).
fn files_under(base: &Path, dir: &Path, depth: usize, seen: &mut usize) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if *seen >= LINKED_LIST_MAX {
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() && depth < 6 {
            out.extend(files_under(base, &p, depth + 1, seen));
        } else if meta.is_file() {
            *seen += 1;
            if let Ok(rel) = p.strip_prefix(base) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// Hermes' `linked_files`: `references/*.md`, templates and assets (any depth), scripts.
pub fn linked_files(dir: &Path) -> Vec<(&'static str, Vec<String>)> {
    let all = files_under(dir, dir, 0, &mut 0);
    let pick = |kind: &str, exts: &[&str], nested: bool| -> Vec<String> {
        all.iter()
            .filter(|rel| {
                let Some(rest) = rel.strip_prefix(&format!("{kind}/")) else {
                    return false;
                };
                (nested || !rest.contains('/'))
                    && (exts.is_empty() || exts.iter().any(|e| rest.ends_with(e)))
            })
            .cloned()
            .collect()
    };
    [
        ("references", pick("references", &[".md"], false)),
        (
            "templates",
            pick(
                "templates",
                &[".md", ".py", ".yaml", ".yml", ".json", ".tex", ".sh"],
                true,
            ),
        ),
        ("assets", pick("assets", &[], true)),
        (
            "scripts",
            pick(
                "scripts",
                &[".py", ".sh", ".bash", ".js", ".ts", ".rb"],
                false,
            ),
        ),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .collect()
}

/// Whether `name` has a value as Hermes sees it: `.env`'s when it sets the name (empty is
/// none), else the process's. Only whether: the value is never taken out.
pub fn env_is_set(env: &crate::hermes_env::HermesEnv, name: &str) -> bool {
    if env.sets(name) {
        return env.file_value(name).is_some();
    }
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// A skill's SKILL.md text, read now.
pub fn read_skill_md(s: &Skill) -> Result<String, String> {
    match crate::util::read_regular(&s.skill_md(), FILE_MAX) {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err(format!("Skill '{}' is gone from disk.", s.name())),
        Err(e) => Err(format!("Failed to read skill '{}': {e}", s.name())),
    }
}

fn view_skill(c: &Catalog, s: &Skill) -> Value {
    match read_skill_md(s) {
        Ok(content) => describe(c, content, s.name(), display_path(c, s), Some(&s.dir)),
        Err(e) => failure(e),
    }
}

/// A flat skill's text with the fields it names itself by, or the failure `skill_view`
/// answers (unreadable, not for this platform, disabled).
fn read_flat(c: &Catalog, f: &Flat) -> Result<(String, String), Value> {
    let stem = f.path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let stem = stem.unwrap_or_default();
    let content = match crate::util::read_regular(&f.path, FILE_MAX) {
        Ok(Some(t)) => t,
        Ok(None) => return Err(failure(format!("Skill '{stem}' is gone from disk."))),
        Err(e) => return Err(failure(format!("Failed to read skill '{stem}': {e}"))),
    };
    let fields = header::parse(&content)
        .map(|p| p.fields)
        .unwrap_or_default();
    let name = header::text_of(fields.get("name"))
        .filter(|n| !n.trim().is_empty())
        .unwrap_or(stem);
    let platforms = header::list_of(fields.get("platforms"));
    if !header::matches_platform(&platforms) {
        return Err(json!({"success": false,
            "error": format!("Skill '{name}' is not supported on this platform."),
            "readiness_status": "unsupported"}));
    }
    if c.settings.disabled.contains(&name) {
        return Err(failure(format!(
            "Skill '{name}' is disabled. Enable it with `hermes skills` or inspect the files directly on disk."
        )));
    }
    Ok((content, name))
}

/// `skill_view` of a legacy flat skill: the file, no folder and no linked files.
fn view_flat(c: &Catalog, f: &Flat) -> Value {
    let (content, name) = match read_flat(c, f) {
        Ok(read) => read,
        Err(v) => return v,
    };
    // Under the local root: its path there; an external one's under its folder's parent.
    let path = match f.root {
        0 => f.rel.clone(),
        _ => {
            let base = f.path.parent().and_then(Path::parent).unwrap_or(&f.path);
            let rel = f.path.strip_prefix(base).unwrap_or(&f.path);
            rel.to_string_lossy().into_owned()
        }
    };
    describe(c, content, &name, path, None)
}

/// `skill_view`'s answer for a skill's text `content` (SKILL.md, or a flat skill's file
/// with no `dir`).
fn describe(c: &Catalog, content: String, name: &str, path: String, dir: Option<&Path>) -> Value {
    let fields = header::parse(&content)
        .map(|p| p.fields)
        .unwrap_or_default();
    let hermes = header::hermes_meta(&fields);
    let tags = header::list_of(hermes.get("tags").or_else(|| fields.get("tags")));
    let related = header::list_of(
        hermes
            .get("related_skills")
            .or_else(|| fields.get("related_skills")),
    );
    let linked = dir.map(linked_files).unwrap_or_default();
    let linked_json = if linked.is_empty() {
        Value::Null
    } else {
        Value::Object(
            linked
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect(),
        )
    };
    let ready = super::readiness::Readiness::check(&fields, &c.settings.home);
    let setup_needed = ready.setup_needed();
    let mut v = json!({
        "success": true,
        "name": name,
        "description": header::text_of(fields.get("description")).unwrap_or_default(),
        "tags": tags,
        "related_skills": related,
        "content": content,
        "path": path,
        "skill_dir": dir.map(|d| d.display().to_string()),
        "linked_files": linked_json,
        "usage_hint": if linked.is_empty() { Value::Null } else { json!("To view linked files, call skill_view(name, file_path) where file_path is e.g. 'references/api.md' or 'assets/config.yaml'") },
        "required_environment_variables": ready.required,
        "required_commands": [],
        "missing_required_environment_variables": ready.missing_env,
        "missing_credential_files": ready.missing_files,
        "missing_required_commands": [],
        "setup_needed": setup_needed,
        "setup_skipped": false,
        "readiness_status": if setup_needed { "setup_needed" } else { "available" },
    });
    if let Some(help) = &ready.help {
        v["setup_help"] = json!(help);
    }
    if let Some(note) = ready.note() {
        v["setup_note"] = json!(note);
    }
    if let Some(compat) = fields.get("compatibility").filter(|c| !c.is_null()) {
        v["compatibility"] = compat.clone();
    }
    if let Some(m @ Value::Object(_)) = fields.get("metadata") {
        v["metadata"] = m.clone();
    }
    v
}

/// SKILL.md under the local root (`github/x/SKILL.md`), else under its parent's parent.
fn display_path(c: &Catalog, s: &Skill) -> String {
    let md = s.skill_md();
    let base = match s.root {
        0 => c.settings.roots[0].clone(),
        _ => s
            .dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| s.dir.clone()),
    };
    md.strip_prefix(&base)
        .unwrap_or(&md)
        .to_string_lossy()
        .into_owned()
}

/// A skill read for activation (a slash command, a bundle, a preload).
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub name: String,
    /// SKILL.md as it is on disk (header included, as Hermes sends it).
    pub content: String,
    pub dir: PathBuf,
    /// Supporting files, relative to `dir`.
    pub supporting: Vec<String>,
    /// What `skill_view`'s `name` is for them: the path under the local root, else the
    /// folder's name.
    pub view_name: String,
    /// `(key, value)` of the skill's `metadata.hermes.config`, from config.yaml or defaults.
    pub config: Vec<(String, String)>,
    /// Hermes' `setup_note` when something it needs is missing (names only, never values).
    pub setup_note: Option<String>,
}

/// Load `identifier` (a name or a path under a root) for activation; `None` when it is not a
/// skill that may be loaded (missing, ambiguous, disabled, unsupported, unreadable).
pub fn load(c: &Catalog, identifier: &str, home: &Path) -> Option<Loaded> {
    let (name, content, dir, view_name) = match resolve_any(c, identifier).ok()? {
        Found::Skill(s) => {
            loadable(s).ok()?;
            let view_name = if s.root == 0 {
                s.rel.clone()
            } else {
                s.dir_name().to_string()
            };
            let content = read_skill_md(s).ok()?;
            (s.name().to_string(), content, s.dir.clone(), view_name)
        }
        // Hermes takes a flat skill's folder for its own (its files, `skill_view`'s name).
        Found::Flat(f) => {
            let (content, name) = read_flat(c, f).ok()?;
            let dir = f.path.parent()?.to_path_buf();
            let view_name = match f.root {
                0 => f
                    .rel
                    .rsplit_once('/')
                    .map(|(d, _)| d)
                    .unwrap_or("")
                    .to_string(),
                _ => dir.file_name()?.to_string_lossy().into_owned(),
            };
            (name, content, dir, view_name)
        }
    };
    let fields = header::parse(&content)
        .map(|p| p.fields)
        .unwrap_or_default();
    let supporting = linked_files(&dir)
        .into_iter()
        .flat_map(|(_, v)| v)
        .collect();
    let setup_note = super::readiness::Readiness::check(&fields, home).note();
    Some(Loaded {
        name,
        content,
        dir,
        supporting,
        view_name,
        config: config_values(&fields, home),
        setup_note,
    })
}

/// A skill's declared config (`metadata.hermes.config: [{key, description, default}]`) with
/// the values config.yaml holds under `skills.config.<key>` (else the default).
fn config_values(fields: &serde_json::Map<String, Value>, home: &Path) -> Vec<(String, String)> {
    let declared = match header::hermes_meta(fields).get("config") {
        Some(Value::Array(a)) => a.clone(),
        Some(v @ Value::Object(_)) => vec![v.clone()],
        _ => return Vec::new(),
    };
    let mut doc = None;
    let mut out: Vec<(String, String)> = Vec::new();
    for item in declared {
        let key = header::text_of(item.get("key")).unwrap_or_default();
        let described =
            header::text_of(item.get("description")).is_some_and(|d| !d.trim().is_empty());
        if key.trim().is_empty() || !described || out.iter().any(|(k, _)| *k == key) {
            continue;
        }
        let doc = doc.get_or_insert_with(|| {
            crate::config_file::load(home).unwrap_or(yaml_rust2::Yaml::Null)
        });
        let value = crate::config_file::string_at(doc, &format!("skills.config.{key}"))
            .or_else(|| header::text_of(item.get("default")))
            .unwrap_or_default();
        out.push((key, value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_escape_are_refused() {
        assert!(path_error("/etc/passwd", "x").is_some());
        assert!(path_error("a/../../b", "x").is_some());
        assert!(path_error("dev/review", "x").is_none());
    }
}
