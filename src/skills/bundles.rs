//! Skill bundles: `$HERMES_HOME/skill-bundles/*.yaml` (`name`, `description`, `skills`,
//! `instruction`), each a `/<slug>` that loads several skills at once (Hermes'
//! `agent/skill_bundles.py`). A broken file is skipped and said; the first of two with one
//! slug wins. Read when asked (a few small files, each bounded).

use std::path::Path;

use super::catalog::slug;

/// Bundle files read at most, and their size.
const FILES_MAX: usize = 200;
const FILE_MAX: u64 = 64 * 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    pub name: String,
    pub slug: String,
    pub description: String,
    pub skills: Vec<String>,
    pub instruction: String,
}

/// The bundles of `home` by file name, and the problems of those skipped.
pub fn load(home: &Path) -> (Vec<Bundle>, Vec<String>) {
    let dir = home.join("skill-bundles");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (Vec::new(), Vec::new());
    };
    let mut files: Vec<std::path::PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .take(FILES_MAX)
        .collect();
    files.sort();
    let (mut bundles, mut problems) = (Vec::<Bundle>::new(), Vec::new());
    for f in files {
        let stem = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = match crate::util::read_regular(&f, FILE_MAX) {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                problems.push(format!("{}: {e}", f.display()));
                continue;
            }
        };
        match parse(&text, &stem) {
            Ok(b) if bundles.iter().any(|o| o.slug == b.slug) => {
                problems.push(format!(
                    "{}: /{} is taken by an earlier bundle",
                    f.display(),
                    b.slug
                ));
            }
            Ok(b) => bundles.push(b),
            Err(why) => problems.push(format!("{}: {why}", f.display())),
        }
    }
    (bundles, problems)
}

/// One bundle file's text (`stem`: its file name, the name when it names none).
pub fn parse(text: &str, stem: &str) -> Result<Bundle, String> {
    let doc = crate::config_file::parse_named(text, "the bundle")?;
    let json = crate::config_file::to_json_plain(&doc);
    if !json.is_object() {
        return Err("not a mapping".into());
    }
    let field = |k: &str| super::header::text_of(json.get(k)).unwrap_or_default();
    let name = Some(field("name").trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| stem.to_string());
    let skills = match json.get("skills") {
        Some(serde_json::Value::Array(_)) => super::header::list_of(json.get("skills")),
        _ => Vec::new(),
    };
    if skills.is_empty() {
        return Err("no skills list".into());
    }
    let slug = slug(&name);
    if slug.is_empty() {
        return Err(format!("the name {name:?} makes no command"));
    }
    let description = Some(field("description").trim().to_string())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| format!("Load {} skills as a bundle", skills.len()));
    Ok(Bundle {
        name,
        slug,
        description,
        skills,
        instruction: field("instruction").trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_parse_as_hermes_reads_them() {
        let b = parse(
            "name: Backend Dev\nskills: [a, b]\ninstruction: |\n  go\n",
            "x",
        )
        .unwrap();
        assert_eq!(b.slug, "backend-dev");
        assert_eq!(b.description, "Load 2 skills as a bundle");
        assert_eq!(b.instruction, "go");
        assert_eq!(parse("skills:\n  - a\n", "stem").unwrap().name, "stem");
        assert!(parse("name: x\n", "x").is_err());
        assert!(parse("- a\n", "x").is_err());
    }
}
