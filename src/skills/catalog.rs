//! What a scan found, and what follows from it, pure: each SKILL.md read (a [`Record`]), the
//! skills it makes (name, description, category, whether it is offered: platform,
//! `environments`, `skills.disabled`, a name taken first), the problems to report, the
//! banner's `{category: [names]}`, the system prompt's index, the lookup `skill_view` does and
//! the `/slug` of each skill. Hermes' rules throughout (`tools/skills_tool.py`,
//! `agent/prompt_builder.py`, `agent/skill_commands.py`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::header::{self, NAME_MAX};
use super::settings::Settings;

/// Descriptions in the system prompt's index are cut to this (Hermes' 60).
const INDEX_DESCRIPTION_MAX: usize = 60;

/// One SKILL.md as read by a scan: its fields, or why it was skipped.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// Which of the roots it is under (0: `$HERMES_HOME/skills`).
    pub root: usize,
    pub skill_md: PathBuf,
    pub read: Result<Meta, String>,
    /// The file's `(mtime ns, size, inode)` when read, so a later scan that finds it the same
    /// reuses `read` (`None`: read again).
    #[serde(default)]
    pub stamp: Option<(i128, u64, u64)>,
}

/// The fields of a header the catalog uses.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    /// The header's `name` (else the folder's), at most 64 characters.
    pub name: String,
    /// The header's `description` (else the body's first line), at most 1,024.
    pub description: String,
    /// `description` is the header's: only then does the index show it (Hermes' index has no
    /// body fallback; `skills_list` has). Kept scans from before this field said so: true.
    #[serde(default = "header_described")]
    pub header_described: bool,
    pub platforms: Vec<String>,
    pub environments: Vec<String>,
    /// `metadata.hermes` `requires_tools`, `requires_toolsets`, `fallback_for_tools`,
    /// `fallback_for_toolsets`: when the index shows the skill.
    pub conditions: BTreeMap<String, Vec<String>>,
}

impl Meta {
    /// The fields of SKILL.md `text` in folder `dir_name`.
    pub fn read(text: &str, dir_name: &str) -> Result<Meta, String> {
        let (doc, body) = header::parse_yaml(text)?;
        let name = header::text_of(header::field(&doc, "name").as_ref())
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| dir_name.to_string());
        let hermes = &doc["metadata"]["hermes"];
        let conditions = [
            "requires_tools",
            "requires_toolsets",
            "fallback_for_tools",
            "fallback_for_toolsets",
        ]
        .iter()
        .map(|k| {
            (
                k.to_string(),
                header::list_of(header::field(hermes, k).as_ref()),
            )
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
        let description = header::field(&doc, "description");
        let mut fields = Map::new();
        if let Some(d) = &description {
            fields.insert("description".into(), d.clone());
        }
        Ok(Meta {
            name: name.chars().take(NAME_MAX).collect(),
            description: header::description(&fields, body),
            header_described: header::text_of(description.as_ref()).is_some_and(|d| !d.is_empty()),
            platforms: header::list_of(header::field(&doc, "platforms").as_ref()),
            environments: header::list_of(header::field(&doc, "environments").as_ref()),
            conditions,
        })
    }
}

fn header_described() -> bool {
    true
}

/// Whether a skill is offered (listed, indexed, a command), and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    Yes,
    /// `skills.disabled` names it.
    Disabled,
    /// Its `platforms` leave this machine out.
    Unsupported,
    /// Tagged for an environment not active here (still loadable by name).
    Irrelevant,
    /// An earlier skill took its name.
    Shadowed,
}

/// A legacy flat skill: a `.md` file that is not a SKILL.md, found by `skill_view` only
/// (never listed, indexed or a command; Hermes').
#[derive(Debug, Clone, PartialEq)]
pub struct Flat {
    pub root: usize,
    pub path: PathBuf,
    /// The path under its root, `/`-separated (`devops/deploy.md`).
    pub rel: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub meta: Meta,
    /// `skills_list`'s category: the first folder of a skill two or more folders deep.
    pub category: Option<String>,
    /// The index's category (Hermes' prompt builder: the folders above the skill's).
    pub index_category: String,
    pub root: usize,
    pub dir: PathBuf,
    /// The folder under its root, `/`-separated (`github/github-code-review`).
    pub rel: String,
    pub offer: Offer,
}

impl Skill {
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    pub fn skill_md(&self) -> PathBuf {
        self.dir.join("SKILL.md")
    }

    /// The folder's own name.
    pub fn dir_name(&self) -> &str {
        self.rel.rsplit('/').next().unwrap_or(&self.rel)
    }
}

/// What a complete scan found: the catalog's input, and what `cache.rs` keeps for the next start.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Scanned {
    pub settings: Settings,
    pub records: Vec<Record>,
    /// Other `.md` files (legacy flat skills `skill_view` finds by name), by root.
    #[serde(default)]
    pub flat: Vec<(usize, PathBuf)>,
    /// Categories' `DESCRIPTION.md` descriptions, for the index.
    pub descriptions: BTreeMap<String, String>,
    /// What the scan could not read.
    pub problems: Vec<String>,
    /// Enabled plugins' skills (`<plugin>:<skill>`, loaded by that name only).
    pub plugins: super::plugins::ByNamespace,
}

/// Everything a scan found and what follows from it.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub settings: Settings,
    records: Vec<Record>,
    /// Legacy flat skills: `.md` files other than SKILL.md, loaded by `skill_view` only.
    pub flat: Vec<Flat>,
    /// Categories' `DESCRIPTION.md` descriptions, for the index.
    descriptions: BTreeMap<String, String>,
    /// Every SKILL.md that read, in scan order (local first, then by path).
    pub skills: Vec<Skill>,
    /// `path: why` of each SKILL.md skipped, and of what the scan could not read.
    pub problems: Vec<String>,
    /// Enabled plugins' skills (`<plugin>:<skill>`, loaded by that name only).
    pub plugins: super::plugins::ByNamespace,
}

impl Catalog {
    pub fn new(found: Scanned) -> Catalog {
        let Scanned {
            settings,
            mut records,
            flat,
            descriptions,
            problems,
            plugins,
        } = found;
        records.sort_by(|a, b| (a.root, &a.skill_md).cmp(&(b.root, &b.skill_md)));
        let mut flat: Vec<Flat> = flat
            .into_iter()
            .filter_map(|(root, path)| {
                let rel = path.strip_prefix(settings.roots.get(root)?).ok()?;
                let rel = rel.to_string_lossy().into_owned();
                Some(Flat { root, path, rel })
            })
            .collect();
        flat.sort_by(|a, b| (a.root, &a.path).cmp(&(b.root, &b.path)));
        let mut c = Catalog {
            settings,
            records,
            flat,
            descriptions,
            skills: Vec::new(),
            problems,
            plugins,
        };
        c.derive();
        c
    }

    fn derive(&mut self) {
        let mut taken = BTreeSet::new();
        let mut skills = Vec::new();
        self.problems.retain(|p| !p.starts_with(MALFORMED));
        for r in &self.records {
            let meta = match &r.read {
                Ok(m) => m.clone(),
                Err(why) => {
                    self.problems
                        .push(format!("{MALFORMED}{}: {why}", r.skill_md.display()));
                    continue;
                }
            };
            let root = &self.settings.roots[r.root];
            let dir = r.skill_md.parent().unwrap_or(root).to_path_buf();
            let rel_parts: Vec<String> = dir
                .strip_prefix(root)
                .unwrap_or(&dir)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let rel = rel_parts.join("/");
            let dir_name = rel_parts.last().cloned().unwrap_or_default();
            let offer = if !header::matches_platform(&meta.platforms) {
                Offer::Unsupported
            } else if !self.settings.relevant(&meta.environments) {
                Offer::Irrelevant
            } else if self.settings.disabled.contains(&meta.name)
                || self.settings.disabled.contains(&dir_name)
            {
                Offer::Disabled
            } else if !taken.insert(meta.name.clone()) {
                Offer::Shadowed
            } else {
                Offer::Yes
            };
            let category = (rel_parts.len() >= 2).then(|| rel_parts[0].clone());
            let index_category = match rel_parts.len() {
                0 => "general".to_string(),
                1 => rel_parts[0].clone(),
                n => rel_parts[..n - 1].join("/"),
            };
            skills.push(Skill {
                meta,
                category,
                index_category,
                root: r.root,
                dir,
                rel,
                offer,
            });
        }
        self.skills = skills;
    }

    /// Each SKILL.md the scan read (a rescan skips those unchanged).
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// What the scan found, to keep for the next start (`cache.rs`).
    pub fn scanned(&self) -> Scanned {
        let problems = self.problems.iter().filter(|p| !p.starts_with(MALFORMED));
        Scanned {
            settings: self.settings.clone(),
            records: self.records.clone(),
            flat: self.flat.iter().map(|f| (f.root, f.path.clone())).collect(),
            descriptions: self.descriptions.clone(),
            problems: problems.cloned().collect(),
            plugins: self.plugins.clone(),
        }
    }

    /// The skills offered, in scan order.
    pub fn offered(&self) -> impl Iterator<Item = &Skill> {
        self.skills.iter().filter(|s| s.offer == Offer::Yes)
    }

    /// The skills' problems of this scan (malformed headers, unreadable folders).
    pub fn malformed(&self) -> impl Iterator<Item = &str> {
        self.problems
            .iter()
            .filter_map(|p| p.strip_prefix(MALFORMED))
    }

    /// Put the SKILL.md at `skill_md` (under root `root`) in, as now read (a skill created
    /// or edited), or take it out with `read: None` (deleted).
    pub fn replace(&mut self, root: usize, skill_md: &Path, read: Option<Result<Meta, String>>) {
        self.records.retain(|r| r.skill_md != skill_md);
        if let Some(read) = read {
            let at = self
                .records
                .partition_point(|r| (r.root, r.skill_md.as_path()) < (root, skill_md));
            self.records.insert(
                at,
                Record {
                    root,
                    skill_md: skill_md.to_path_buf(),
                    read,
                    stamp: None,
                },
            );
        }
        self.derive();
    }

    /// The skills offered by category (`general` for those at the top), names in order:
    /// the banner's `info.skills` and `skills.manage list`.
    pub fn by_category(&self) -> Value {
        let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for s in self.offered() {
            let cat = s.category.as_deref().unwrap_or("general");
            by.entry(cat).or_default().push(s.name());
        }
        for names in by.values_mut() {
            names.sort_unstable();
        }
        let map: Map<String, Value> = by.into_iter().map(|(k, v)| (k.into(), json!(v))).collect();
        Value::Object(map)
    }

    /// The system prompt's skills section for a model offered `tools` of `toolsets`, as
    /// Hermes writes it (empty when no skill is shown).
    pub fn prompt_index(&self, tools: &BTreeSet<String>, toolsets: &BTreeSet<String>) -> String {
        let mut by: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
        // Hermes' index keeps a local skill whose name another local one took first (only
        // external ones give way to a name seen).
        let indexed = self
            .skills
            .iter()
            .filter(|s| s.offer == Offer::Yes || (s.offer == Offer::Shadowed && s.root == 0));
        for s in indexed.filter(|s| shown(&s.meta.conditions, tools, toolsets)) {
            let description = if s.meta.header_described {
                s.meta.description.as_str()
            } else {
                ""
            };
            by.entry(&s.index_category)
                .or_default()
                .entry(s.name())
                .or_insert(description);
        }
        if by.is_empty() {
            return String::new();
        }
        let mut lines = Vec::new();
        for (category, skills) in by {
            match self.descriptions.get(category) {
                Some(d) => lines.push(format!("  {category}: {d}")),
                None => lines.push(format!("  {category}:")),
            }
            for (name, description) in skills {
                let d = index_description(description);
                if d.is_empty() {
                    lines.push(format!("    - {name}"));
                } else {
                    lines.push(format!("    - {name}: {d}"));
                }
            }
        }
        format!(
            "{INDEX_HEAD}\n<available_skills>\n{}\n</available_skills>\n\n{INDEX_TAIL}",
            lines.join("\n")
        )
    }

    /// The skills `name` could mean (`skill_view`): its folder under a root
    /// (`github/github-code-review`, `category:skill` too), or a folder or header named
    /// so. More than one is ambiguous.
    pub fn lookup(&self, name: &str) -> Vec<&Skill> {
        let name = name.trim().trim_matches('/');
        let as_path = name.replacen(':', "/", 1);
        self.skills
            .iter()
            .filter(|s| {
                s.rel == name || s.rel == as_path || s.dir_name() == name || s.meta.name == name
            })
            .collect()
    }

    /// The legacy flat skills `name` could mean, as Hermes finds them: `<name>.md` under a root
    /// (`category/name` too, or `category:name`), or a file so named in any folder searched.
    pub fn lookup_flat(&self, name: &str) -> Vec<&Flat> {
        let name = name.trim().trim_matches('/');
        if name.is_empty() {
            return Vec::new();
        }
        let direct = [
            format!("{name}.md"),
            format!("{}.md", name.replacen(':', "/", 1)),
        ];
        let anywhere = format!("/{name}.md");
        self.flat
            .iter()
            .filter(|f| direct.contains(&f.rel) || f.rel.ends_with(&anywhere))
            .collect()
    }

    /// Every skill whose folder is named `name` (`skill_manage`'s lookup, as Hermes').
    pub fn by_dir_name(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.dir_name() == name)
    }
}

/// Marks a problem that is a skill skipped (as opposed to a folder that could not be read).
const MALFORMED: &str = "skipped ";

/// Hermes' rule for a skill's conditions: hidden when a required tool or toolset is missing,
/// or when the one it stands in for is there.
fn shown(
    conditions: &BTreeMap<String, Vec<String>>,
    tools: &BTreeSet<String>,
    toolsets: &BTreeSet<String>,
) -> bool {
    let all = |k: &str| conditions.get(k).into_iter().flatten();
    !all("fallback_for_toolsets").any(|t| toolsets.contains(t))
        && !all("fallback_for_tools").any(|t| tools.contains(t))
        && all("requires_toolsets").all(|t| toolsets.contains(t))
        && all("requires_tools").all(|t| tools.contains(t))
}

/// Hermes' index description: quotes trimmed, cut to 60 characters.
fn index_description(d: &str) -> String {
    let d = d.trim().trim_matches(|c| c == '"' || c == '\'');
    header::cut(d, INDEX_DESCRIPTION_MAX)
}

/// `/slug` of a skill name as Hermes makes it: lower case, spaces and `_` as `-`, other
/// characters dropped, runs of `-` as one, none at the ends (empty: no command).
pub fn slug(name: &str) -> String {
    let lowered = name.to_lowercase().replace([' ', '_'], "-");
    let kept: String = lowered
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .collect();
    let mut out = String::with_capacity(kept.len());
    for c in kept.chars() {
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    out.trim_matches('-').to_string()
}

const INDEX_HEAD: &str = "## Skills (mandatory)\n\
Before replying, scan the skills below. If a skill matches or is even partially relevant to \
your task, you MUST load it with skill_view(name) and follow its instructions. Err on the side \
of loading — it is always better to have context you don't need than to miss critical steps, \
pitfalls, or established workflows. Skills contain specialized knowledge — API endpoints, \
tool-specific commands, and proven workflows that outperform general-purpose approaches. Load \
the skill even if you think you could handle the task with basic tools like web_search or \
terminal. Skills also encode the user's preferred approach, conventions, and quality standards \
for tasks like code review, planning, and testing — load them even for tasks you already know \
how to do, because the skill defines how it should be done here.\n\
Whenever the user asks you to configure, set up, install, enable, disable, modify, or \
troubleshoot Hermes Agent itself — its CLI, config, models, providers, tools, skills, voice, \
gateway, plugins, or any feature — load the `hermes-agent` skill first. It has the actual \
commands (e.g. `hermes config set …`, `hermes tools`, `hermes setup`) so you don't have to \
guess or invent workarounds.\n\
If a skill has issues, fix it with skill_manage(action='patch').\n\
After difficult/iterative tasks, offer to save as a skill. If a skill you loaded was missing \
steps, had wrong commands, or needed pitfalls you discovered, update it before finishing.\n";

const INDEX_TAIL: &str =
    "Only proceed without loading a skill if genuinely none are relevant to the task.";

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields as read through the whole header turned into JSON (before `parse_yaml`).
    fn read_through_json(text: &str, dir_name: &str) -> Result<Meta, String> {
        let parsed = header::parse(text)?;
        let f = &parsed.fields;
        let name = header::text_of(f.get("name"))
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| dir_name.to_string());
        let hermes = header::hermes_meta(f);
        let conditions = [
            "requires_tools",
            "requires_toolsets",
            "fallback_for_tools",
            "fallback_for_toolsets",
        ]
        .iter()
        .map(|k| (k.to_string(), header::list_of(hermes.get(*k))))
        .filter(|(_, v)| !v.is_empty())
        .collect();
        Ok(Meta {
            name: name.chars().take(NAME_MAX).collect(),
            description: header::description(f, parsed.body),
            header_described: header::text_of(f.get("description")).is_some_and(|d| !d.is_empty()),
            platforms: header::list_of(f.get("platforms")),
            environments: header::list_of(f.get("environments")),
            conditions,
        })
    }

    #[test]
    fn a_header_reads_the_same_without_the_detour_through_json() {
        let mut texts: Vec<String> = [
            "---\nname: 42\ndescription: 7.50\nplatforms: linux, macos\n---\nb",
            "---\nname: ''\ndescription: ~\n---\n# T\n\nBody line.\n",
            "---\nname: x\ndescription: [a, b]\nenvironments: [ci]\nmetadata:\n  hermes:\n    requires_tools: [terminal]\n    fallback_for_toolsets: web\n---\n",
            "---\nmetadata: [hermes]\nplatforms: {a: b}\n---\nbody",
            "---\nmetadata:\n  hermes: [requires_tools]\ndescription: true\n---\n",
            "---\nname: a\nname: b\n---\n",
            "---\n- a\n---\n",
            "---\n---\nbody",
            "no header\n",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        // Hermes' bundled skills, when the reference is beside the repository.
        let bundled =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hermes-reference/skills");
        let mut dirs = vec![bundled];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.file_name().is_some_and(|n| n == "SKILL.md") {
                    texts.push(std::fs::read_to_string(&p).unwrap());
                }
            }
        }
        for t in &texts {
            assert_eq!(Meta::read(t, "dir"), read_through_json(t, "dir"), "{t}");
        }
    }

    fn record(root: usize, path: &str, text: &str) -> Record {
        let p = PathBuf::from(path);
        let dir_name = p.parent().unwrap().file_name().unwrap().to_string_lossy();
        Record {
            root,
            read: Meta::read(text, &dir_name),
            skill_md: p,
            stamp: None,
        }
    }

    fn settings() -> Settings {
        Settings {
            roots: vec!["/h/skills".into(), "/ext".into()],
            disabled: ["off".to_string()].into(),
            ..Default::default()
        }
    }

    fn catalog() -> Catalog {
        Catalog::new(Scanned {
            settings: settings(),
            records: vec![
                record(
                    0,
                    "/h/skills/dev/review/SKILL.md",
                    "---\nname: review\ndescription: Review code carefully and thoroughly, step by step, every single line\n---\nbody",
                ),
                record(0, "/h/skills/top/SKILL.md", "# Top\nThe top skill.\n"),
                record(
                    0,
                    "/h/skills/dev/off/SKILL.md",
                    "---\nname: off\ndescription: d\n---\nb",
                ),
                record(
                    0,
                    "/h/skills/mac/m/SKILL.md",
                    "---\nname: m\ndescription: d\nplatforms: [plan9]\n---\nb",
                ),
                record(0, "/h/skills/bad/SKILL.md", "---\nname: [\n---\nb"),
                record(
                    1,
                    "/ext/a/b/review/SKILL.md",
                    "---\nname: review\ndescription: other\n---\nb",
                ),
                record(
                    1,
                    "/ext/a/b/deep/SKILL.md",
                    "---\nname: Deep_Skill v2\ndescription: d\nmetadata:\n  hermes:\n    requires_tools: [web]\n---\nb",
                ),
            ],
            descriptions: [("dev".to_string(), "Developer skills".to_string())].into(),
            ..Default::default()
        })
    }

    #[test]
    fn offers_follow_platform_disabled_and_first_name() {
        let c = catalog();
        let offered: Vec<&str> = c.offered().map(|s| s.name()).collect();
        assert_eq!(offered, ["review", "top", "Deep_Skill v2"]);
        assert_eq!(c.malformed().count(), 1);
        assert!(
            c.malformed()
                .next()
                .unwrap()
                .starts_with("/h/skills/bad/SKILL.md: ")
        );
        assert_eq!(
            c.by_category(),
            json!({"dev": ["review"], "general": ["top"], "a": ["Deep_Skill v2"]})
        );
        let kinds: Vec<Offer> = c.skills.iter().map(|s| s.offer).collect();
        assert!(kinds.contains(&Offer::Disabled) && kinds.contains(&Offer::Shadowed));
        assert!(kinds.contains(&Offer::Unsupported));
    }

    #[test]
    fn the_index_is_hermes_and_lookups_find_paths_and_names() {
        let c = catalog();
        let none = BTreeSet::new();
        let idx = c.prompt_index(&none, &none);
        assert!(idx.starts_with("## Skills (mandatory)\n"), "{idx}");
        // `top` has no header: `skills_list` shows its body's first line, the index its name.
        assert!(idx.contains("<available_skills>\n  dev: Developer skills\n    - review: Review code carefully and thoroughly, step by step, every...\n  top:\n    - top\n</available_skills>"), "{idx}");
        assert_eq!(
            c.offered().nth(1).unwrap().meta.description,
            "The top skill."
        );
        assert!(!idx.contains("Deep_Skill"));
        let web: BTreeSet<String> = ["web".to_string()].into();
        assert!(
            c.prompt_index(&web, &none)
                .contains("  a/b:\n    - Deep_Skill v2: d")
        );
        assert_eq!(c.lookup("review").len(), 2);
        assert_eq!(c.lookup("dev/review").len(), 1);
        assert_eq!(c.lookup("dev:review").len(), 1);
        assert_eq!(c.lookup("top")[0].rel, "top");
        assert!(c.by_dir_name("deep").is_some());
    }

    #[test]
    fn the_index_keeps_a_local_name_taken_twice_and_drops_an_external_one() {
        let mut c = catalog();
        c.replace(
            0,
            Path::new("/h/skills/ops/review/SKILL.md"),
            Some(Meta::read(
                "---\nname: review\ndescription: Ops review\n---\nb",
                "review",
            )),
        );
        let idx = c.prompt_index(&BTreeSet::new(), &BTreeSet::new());
        assert!(idx.contains("  ops:\n    - review: Ops review\n"), "{idx}");
        assert!(!idx.contains("other"), "{idx}");
        assert_eq!(c.offered().filter(|s| s.name() == "review").count(), 1);
    }

    #[test]
    fn replace_puts_in_and_takes_out() {
        let mut c = catalog();
        let p = PathBuf::from("/h/skills/new/SKILL.md");
        c.replace(
            0,
            &p,
            Some(Meta::read("---\nname: new\ndescription: n\n---\nb", "new")),
        );
        assert!(c.offered().any(|s| s.name() == "new"));
        c.replace(0, &p, None);
        assert!(!c.offered().any(|s| s.name() == "new"));
    }

    #[test]
    fn slugs_are_hermes() {
        assert_eq!(slug("Deep_Skill v2"), "deep-skill-v2");
        assert_eq!(slug("a+b//c--d"), "abc-d");
        assert_eq!(slug("--"), "");
    }
}
