//! `skill_manage`: create, edit, patch, delete a skill, write and remove its supporting
//! files — Hermes' actions, checks, messages and result JSON (`tools/skill_manager_tool.py`).
//! Every write stays inside a skills root: no `..`, no absolute path, and no symbolic link
//! on the way from the root to the file (refused, never followed); files are replaced
//! atomically (a temporary file beside, fsync'd, renamed). The caller puts the [`Change`] into
//! the catalog, so the next model call's index shows it.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::catalog::{Catalog, Meta};
use super::header::{self, DESCRIPTION_MAX, NAME_MAX};
use crate::util::grouped;

/// Characters of SKILL.md (or a supporting file) a model may write.
pub const CONTENT_MAX: usize = 100_000;
/// Bytes of a supporting file a model may write.
pub const FILE_BYTES_MAX: usize = 1024 * 1024;
/// Where supporting files go.
const ALLOWED_SUBDIRS: [&str; 4] = ["assets", "references", "scripts", "templates"];

/// How the catalog changes after a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    None,
    /// This SKILL.md (under root `usize`) was written: read it again.
    Wrote(usize, PathBuf),
    /// This SKILL.md is gone.
    Removed(PathBuf),
}

/// A find-and-replace in a text: `(new text, replacements)` or why not.
pub type Matcher<'a> = &'a dyn Fn(&str, &str, &str, bool) -> Result<(String, usize), String>;

/// The arguments, as the model sent them.
pub struct Args<'a> {
    pub action: &'a str,
    pub name: &'a str,
    pub content: Option<&'a str>,
    pub category: Option<&'a str>,
    pub file_path: Option<&'a str>,
    pub file_content: Option<&'a str>,
    pub old_string: Option<&'a str>,
    pub new_string: Option<&'a str>,
    pub replace_all: bool,
}

impl<'a> Args<'a> {
    pub fn of(v: &'a Value) -> Args<'a> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        Args {
            action: s("action").unwrap_or(""),
            name: s("name").unwrap_or(""),
            content: s("content"),
            category: s("category"),
            file_path: s("file_path"),
            file_content: s("file_content"),
            old_string: s("old_string"),
            new_string: s("new_string"),
            replace_all: v
                .get("replace_all")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }
}

fn fail(error: impl Into<String>) -> (Value, Change) {
    (
        json!({"success": false, "error": error.into()}),
        Change::None,
    )
}

/// Run one `skill_manage` call against the skills of `c`.
pub fn run(c: &Catalog, a: &Args<'_>, matcher: Matcher<'_>) -> (Value, Change) {
    match a.action {
        "create" => match a.content.filter(|t| !t.is_empty()) {
            None => fail(
                "content is required for 'create'. Provide the full SKILL.md text (frontmatter + body).",
            ),
            Some(content) => create(c, a.name, content, a.category),
        },
        "edit" => match a.content.filter(|t| !t.is_empty()) {
            None => fail("content is required for 'edit'. Provide the full updated SKILL.md text."),
            Some(content) => edit(c, a.name, content),
        },
        "patch" => match (a.old_string.filter(|t| !t.is_empty()), a.new_string) {
            (None, _) => fail("old_string is required for 'patch'. Provide the text to find."),
            (_, None) => {
                fail("new_string is required for 'patch'. Use empty string to delete matched text.")
            }
            (Some(old), Some(new)) => patch(c, a, old, new, matcher),
        },
        "delete" => delete(c, a.name),
        "write_file" => match (a.file_path.filter(|p| !p.is_empty()), a.file_content) {
            (None, _) => {
                fail("file_path is required for 'write_file'. Example: 'references/api-guide.md'")
            }
            (_, None) => fail("file_content is required for 'write_file'."),
            (Some(fp), Some(text)) => write_file(c, a.name, fp, text),
        },
        "remove_file" => match a.file_path.filter(|p| !p.is_empty()) {
            None => fail("file_path is required for 'remove_file'."),
            Some(fp) => remove_file(c, a.name, fp),
        },
        other => fail(format!(
            "Unknown action '{other}'. Use: create, edit, patch, delete, write_file, remove_file"
        )),
    }
}

fn valid_segment(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

fn name_error(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("Skill name is required.".into());
    }
    if name.chars().count() > NAME_MAX {
        return Some(format!("Skill name exceeds {NAME_MAX} characters."));
    }
    (!valid_segment(name)).then(|| {
        format!(
            "Invalid skill name '{name}'. Use lowercase letters, numbers, hyphens, dots, and \
             underscores. Must start with a letter or digit."
        )
    })
}

fn category_error(category: &str) -> Option<String> {
    let bad = || {
        format!(
            "Invalid category '{category}'. Use lowercase letters, numbers, hyphens, dots, and \
             underscores. Categories must be a single directory name."
        )
    };
    if category.contains(['/', '\\']) {
        return Some(bad());
    }
    if category.chars().count() > NAME_MAX {
        return Some(format!("Category exceeds {NAME_MAX} characters."));
    }
    (!valid_segment(category)).then(bad)
}

/// Hermes' checks of a SKILL.md a model writes.
pub fn frontmatter_error(content: &str) -> Option<String> {
    if content.trim().is_empty() {
        return Some("Content cannot be empty.".into());
    }
    if !content.starts_with("---") {
        return Some(
            "SKILL.md must start with YAML frontmatter (---). See existing skills for format."
                .into(),
        );
    }
    let (yaml, body) = match header::split(content) {
        Ok(Some(split)) => split,
        _ => {
            return Some(
                "SKILL.md frontmatter is not closed. Ensure you have a closing '---' line.".into(),
            );
        }
    };
    let fields = match crate::config_file::parse_named(yaml, "YAML frontmatter") {
        Err(e) => return Some(format!("YAML frontmatter parse error: {e}")),
        Ok(doc) => match crate::config_file::to_json_plain(&doc) {
            Value::Object(m) => m,
            _ => return Some("Frontmatter must be a YAML mapping (key: value pairs).".into()),
        },
    };
    if !fields.contains_key("name") {
        return Some("Frontmatter must include 'name' field.".into());
    }
    let Some(description) = fields.get("description") else {
        return Some("Frontmatter must include 'description' field.".into());
    };
    let d = header::text_of(Some(description)).unwrap_or_else(|| description.to_string());
    if d.chars().count() > DESCRIPTION_MAX {
        return Some(format!("Description exceeds {DESCRIPTION_MAX} characters."));
    }
    body.trim().is_empty().then(|| {
        "SKILL.md must have content after the frontmatter (instructions, procedures, etc.).".into()
    })
}

fn size_error(content: &str, label: &str) -> Option<String> {
    let n = content.chars().count();
    (n > CONTENT_MAX).then(|| {
        format!(
            "{label} content is {} characters (limit: {}). Consider splitting into a smaller \
             SKILL.md with supporting files in references/ or templates/.",
            grouped(n),
            grouped(CONTENT_MAX)
        )
    })
}

fn not_found(name: &str, suffix: &str) -> String {
    format!(
        "Skill '{name}' not found in active profile 'default'. Use skills_list() to see \
         available skills.{suffix}"
    )
}

/// `root/parts…`, each folder made when `create` and absent; refused when one is a symbolic
/// link or not a folder (a write never lands where a link points).
pub fn confined(root: &Path, parts: &[&str], create: bool) -> std::io::Result<PathBuf> {
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    let mut dir = root.to_path_buf();
    for part in parts {
        if part.is_empty() || *part == "." || *part == ".." || part.contains('/') {
            return Err(refuse(format!("{part:?} is not a folder name")));
        }
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refuse(format!(
                    "{} is a symbolic link; refused",
                    dir.display()
                )));
            }
            Ok(m) if !m.is_dir() => {
                return Err(refuse(format!("{} is not a folder", dir.display())));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                std::fs::create_dir(&dir)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(dir)
}

/// Replace `file` (in a folder [`confined`] gave) with `text`, refusing a link there.
fn write_atomic(file: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is a symbolic link; refused", file.display()),
        ));
    }
    crate::private_file::replace(file, text.as_bytes(), 0o644)
}

/// The skill folder named `name`: `(root, folder)` confined (no links on the way).
fn existing(c: &Catalog, name: &str) -> Result<(usize, PathBuf), String> {
    let s = c.by_dir_name(name).ok_or_else(|| not_found(name, ""))?;
    let parts: Vec<&str> = s.rel.split('/').collect();
    confined(&c.settings.roots[s.root], &parts, false)
        .map(|dir| (s.root, dir))
        .map_err(|e| format!("Skill '{name}' cannot be changed: {e}"))
}

fn description_of(content: &str) -> String {
    header::parse(content)
        .ok()
        .and_then(|p| header::text_of(p.fields.get("description")))
        .map(|d| d.chars().take(120).collect())
        .unwrap_or_default()
}

fn create(c: &Catalog, name: &str, content: &str, category: Option<&str>) -> (Value, Change) {
    let category = category.map(str::trim).filter(|c| !c.is_empty());
    if let Some(e) = name_error(name)
        .or_else(|| category.and_then(category_error))
        .or_else(|| frontmatter_error(content))
        .or_else(|| size_error(content, "SKILL.md"))
    {
        return fail(e);
    }
    let root = &c.settings.roots[0];
    if let Some(s) = c.by_dir_name(name) {
        return fail(format!(
            "A skill named '{name}' already exists at {}.",
            s.dir.display()
        ));
    }
    let mut parts: Vec<&str> = category.into_iter().collect();
    parts.push(name);
    let target = root.join(parts.join("/"));
    if target.exists() {
        return fail(format!(
            "A skill named '{name}' already exists at {}.",
            target.display()
        ));
    }
    if let Err(e) = std::fs::create_dir_all(root) {
        return fail(format!("Cannot create {}: {e}", root.display()));
    }
    let dir = match confined(root, &parts, true) {
        Ok(d) => d,
        Err(e) => return fail(format!("Cannot create the skill: {e}")),
    };
    let skill_md = dir.join("SKILL.md");
    if let Err(e) = write_atomic(&skill_md, content) {
        return fail(format!("Cannot write SKILL.md: {e}"));
    }
    let mut v = json!({
        "success": true,
        "message": format!("Skill '{name}' created."),
        "path": parts.join("/"),
        "skill_md": skill_md.display().to_string(),
        "_change": {"description": description_of(content)},
    });
    if let Some(cat) = category {
        v["category"] = json!(cat);
    }
    v["hint"] = json!(format!(
        "To add reference files, templates, or scripts, use skill_manage(action='write_file', \
         name='{name}', file_path='references/example.md', file_content='...')"
    ));
    (v, Change::Wrote(0, skill_md))
}

fn edit(c: &Catalog, name: &str, content: &str) -> (Value, Change) {
    if let Some(e) = frontmatter_error(content).or_else(|| size_error(content, "SKILL.md")) {
        return fail(e);
    }
    let (root, dir) = match existing(c, name) {
        Ok(found) => found,
        Err(e) => return fail(e),
    };
    let skill_md = dir.join("SKILL.md");
    if let Err(e) = write_atomic(&skill_md, content) {
        return fail(format!("Cannot write SKILL.md: {e}"));
    }
    let v = json!({
        "success": true,
        "message": format!("Skill '{name}' updated (full rewrite)."),
        "path": dir.display().to_string(),
        "_change": {"description": description_of(content)},
    });
    (v, Change::Wrote(root, skill_md))
}

/// Hermes' check of a supporting file's path.
fn file_path_error(file_path: &str) -> Option<String> {
    let p = Path::new(file_path);
    let parts: Vec<String> = p
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.iter().any(|c| c == "..") {
        return Some("Path traversal ('..') is not allowed.".into());
    }
    if p.is_absolute() {
        return Some(format!(
            "File must be under one of: {}. Got: '{file_path}'",
            ALLOWED_SUBDIRS.join(", ")
        ));
    }
    if parts.last().is_some_and(|l| l == "SKILL.md") && parts.len() <= 2 {
        return None;
    }
    if parts.is_empty() || !ALLOWED_SUBDIRS.contains(&parts[0].as_str()) {
        return Some(format!(
            "File must be under one of: {}. Got: '{file_path}'",
            ALLOWED_SUBDIRS.join(", ")
        ));
    }
    (parts.len() < 2).then(|| {
        format!(
            "Provide a file path, not just a directory. Example: '{}/myfile.md'",
            parts[0]
        )
    })
}

/// The file `file_path` names in skill folder `dir`: its folder confined (made when
/// `create`), and the file. `SKILL.md` and `<name>/SKILL.md` are the skill's own.
fn target(dir: &Path, file_path: &str, create: bool) -> Result<PathBuf, String> {
    let parts: Vec<&str> = file_path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.last() == Some(&"SKILL.md") && parts.len() <= 2 {
        return Ok(dir.join("SKILL.md"));
    }
    let (file, folders) = parts.split_last().ok_or("file_path is required.")?;
    confined(dir, folders, create)
        .map(|d| d.join(file))
        .map_err(|e| format!("Path escapes the skill directory or is refused: {e}"))
}

fn patch(c: &Catalog, a: &Args<'_>, old: &str, new: &str, matcher: Matcher<'_>) -> (Value, Change) {
    let name = a.name;
    let (root, dir) = match existing(c, name) {
        Ok(found) => found,
        Err(e) => return fail(e),
    };
    let file_path = a.file_path.filter(|p| !p.is_empty());
    let file = match file_path {
        Some(fp) => match file_path_error(fp).map_or_else(|| target(&dir, fp, false), Err) {
            Ok(f) => f,
            Err(e) => return fail(e),
        },
        None => dir.join("SKILL.md"),
    };
    let label = file_path.unwrap_or("SKILL.md");
    let content = match crate::util::read_regular(&file, (CONTENT_MAX * 4) as u64) {
        Ok(Some(t)) => t,
        Ok(None) => return fail(format!("File not found: {label}")),
        Err(e) => return fail(format!("Cannot read {label}: {e}")),
    };
    let (updated, count) = match matcher(&content, old, new, a.replace_all) {
        Ok(done) => done,
        Err(e) => {
            let preview: String = content.chars().take(500).collect();
            let more = if content.chars().count() > 500 {
                "..."
            } else {
                ""
            };
            return (
                json!({"success": false, "error": e, "file_preview": format!("{preview}{more}")}),
                Change::None,
            );
        }
    };
    if let Some(e) = size_error(&updated, label) {
        return fail(e);
    }
    let is_skill_md = file.file_name().is_some_and(|n| n == "SKILL.md");
    if is_skill_md && let Some(e) = frontmatter_error(&updated) {
        return fail(format!("Patch would break SKILL.md structure: {e}"));
    }
    if let Err(e) = write_atomic(&file, &updated) {
        return fail(format!("Cannot write {label}: {e}"));
    }
    let clip = |s: &str| {
        let cut: String = s.chars().take(200).collect();
        if s.chars().count() > 200 {
            format!("{cut}…")
        } else {
            cut
        }
    };
    let v = json!({
        "success": true,
        "message": format!("Patched {label} in skill '{name}' ({count} replacement{}).",
                           if count > 1 { "s" } else { "" }),
        "_change": {"old": clip(old), "new": clip(new)},
    });
    let change = if is_skill_md {
        Change::Wrote(root, file)
    } else {
        Change::None
    };
    (v, change)
}

fn delete(c: &Catalog, name: &str) -> (Value, Change) {
    let (root, dir) = match existing(c, name) {
        Ok(found) => found,
        Err(e) => return fail(e),
    };
    let root_dir = &c.settings.roots[root];
    if dir == *root_dir || !dir.starts_with(root_dir) {
        return fail(format!("Refusing to delete {}", dir.display()));
    }
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        return fail(format!("Cannot delete skill '{name}': {e}"));
    }
    remove_if_empty(dir.parent(), root_dir);
    (
        json!({"success": true, "message": format!("Skill '{name}' deleted.")}),
        Change::Removed(dir.join("SKILL.md")),
    )
}

fn write_file(c: &Catalog, name: &str, file_path: &str, text: &str) -> (Value, Change) {
    if let Some(e) = file_path_error(file_path) {
        return fail(e);
    }
    if text.len() > FILE_BYTES_MAX {
        return fail(format!(
            "File content is {} bytes (limit: {} bytes / 1 MiB). Consider splitting into \
             smaller files.",
            grouped(text.len()),
            grouped(FILE_BYTES_MAX)
        ));
    }
    if let Some(e) = size_error(text, file_path) {
        return fail(e);
    }
    let (root, dir) = match existing(c, name) {
        Ok(found) => found,
        Err(_) => return fail(not_found(name, " Create it first with action='create'.")),
    };
    let file = match target(&dir, file_path, true) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    if let Err(e) = write_atomic(&file, text) {
        return fail(format!("Cannot write {file_path}: {e}"));
    }
    let change = if file.file_name().is_some_and(|n| n == "SKILL.md") {
        Change::Wrote(root, file.clone())
    } else {
        Change::None
    };
    (
        json!({"success": true,
               "message": format!("File '{file_path}' written to skill '{name}'."),
               "path": file.display().to_string()}),
        change,
    )
}

fn remove_file(c: &Catalog, name: &str, file_path: &str) -> (Value, Change) {
    if let Some(e) = file_path_error(file_path) {
        return fail(e);
    }
    let (_, dir) = match existing(c, name) {
        Ok(found) => found,
        Err(e) => return fail(e),
    };
    let file = target(&dir, file_path, false);
    let present = file
        .as_ref()
        .is_ok_and(|f| std::fs::symlink_metadata(f).is_ok_and(|m| !m.is_dir()));
    let file = match file {
        Ok(f) if present => f,
        _ => {
            let mut available = Vec::new();
            for sub in ALLOWED_SUBDIRS {
                if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
                    available.extend(
                        entries
                            .flatten()
                            .take(200)
                            .map(|e| format!("{sub}/{}", e.file_name().to_string_lossy())),
                    );
                }
            }
            return (
                json!({"success": false,
                       "error": format!("File '{file_path}' not found in skill '{name}'."),
                       "available_files": if available.is_empty() { Value::Null } else { json!(available) }}),
                Change::None,
            );
        }
    };
    if file.file_name().is_some_and(|n| n == "SKILL.md") {
        return fail("SKILL.md is the skill itself: delete the skill with action='delete'.");
    }
    if let Err(e) = std::fs::remove_file(&file) {
        return fail(format!("Cannot remove {file_path}: {e}"));
    }
    remove_if_empty(file.parent(), &dir);
    (
        json!({"success": true,
               "message": format!("File '{file_path}' removed from skill '{name}'.")}),
        Change::None,
    )
}

/// Take away `folder` when it is empty and not `keep` (a category, a supporting folder left
/// empty, as Hermes does).
fn remove_if_empty(folder: Option<&Path>, keep: &Path) {
    if let Some(f) = folder
        && f != keep
        && std::fs::read_dir(f).is_ok_and(|mut d| d.next().is_none())
    {
        let _ = std::fs::remove_dir(f);
    }
}

/// The catalog after `change`.
pub fn apply(c: &mut Catalog, change: &Change) -> bool {
    match change {
        Change::None => false,
        Change::Wrote(root, skill_md) => {
            let dir_name = skill_md
                .parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let read = match crate::util::read_regular(skill_md, super::scan::FILE_MAX) {
                Ok(Some(t)) => Meta::read(&t, &dir_name),
                Ok(None) => return false,
                Err(e) => Err(format!("cannot read it: {e}")),
            };
            c.replace(*root, skill_md, Some(read));
            true
        }
        Change::Removed(skill_md) => {
            c.replace(0, skill_md, None);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_paths_and_headers_are_checked_as_hermes_does() {
        assert!(
            name_error("Bad Name")
                .unwrap()
                .contains("Invalid skill name")
        );
        assert!(name_error("ok-name_1.2").is_none());
        assert!(category_error("a/b").is_some());
        assert!(
            frontmatter_error("no header")
                .unwrap()
                .contains("must start")
        );
        assert!(
            frontmatter_error("---\nname: a\n---\nbody")
                .unwrap()
                .contains("'description'")
        );
        assert!(
            frontmatter_error("---\nname: a\ndescription: d\n---\n  \n")
                .unwrap()
                .contains("content after")
        );
        assert!(frontmatter_error("---\nname: a\ndescription: d\n---\nbody").is_none());
        assert!(file_path_error("../x").is_some());
        assert!(
            file_path_error("notes/x.md")
                .unwrap()
                .contains("must be under")
        );
        assert!(
            file_path_error("references")
                .unwrap()
                .contains("not just a directory")
        );
        assert!(file_path_error("references/a/b.md").is_none());
        assert!(file_path_error("x/SKILL.md").is_none());
        assert_eq!(grouped(100000), "100,000");
    }

    #[test]
    fn confined_refuses_links_on_the_way() {
        let root = std::env::temp_dir().join(format!("tuigw-skman-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink("/tmp", root.join("link")).unwrap();
        assert!(confined(&root, &["real", "new"], true).is_ok());
        assert!(confined(&root, &["link", "x"], true).is_err());
        assert!(confined(&root, &[".."], true).is_err());
        assert!(confined(&root, &["absent"], false).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
