//! The messages a skill is activated with, as Hermes builds them (`agent/skill_commands.py`,
//! `agent/skill_bundles.py`), pure: `/<skill> words` (the skill's text, its folder, its
//! supporting files, then the user's words), several skills at the start of one line, a
//! bundle, and the skills `HERMES_TUI_SKILLS` preloads into a session's system prompt.

use super::view::Loaded;

/// Skills at the start of one line loaded at most (Hermes' 5).
pub const STACKED_MAX: usize = 5;

/// `${HERMES_SKILL_DIR}` and `${HERMES_SESSION_ID}` in a skill's text, as Hermes' templates.
fn substitute(content: &str, l: &Loaded, session: &str) -> String {
    content
        .replace("${HERMES_SKILL_DIR}", &l.dir.display().to_string())
        .replace("${HERMES_SESSION_ID}", session)
}

/// One skill's block: the note, its text, its folder, its config, setup notes, its
/// supporting files, then the user's words.
pub fn skill_block(l: &Loaded, note: &str, instruction: &str, session: &str) -> String {
    let dir = l.dir.display();
    let mut parts = vec![
        note.to_string(),
        String::new(),
        substitute(&l.content, l, session).trim().to_string(),
        String::new(),
        format!("[Skill directory: {dir}]"),
        "Resolve any relative paths in this skill (e.g. `scripts/foo.js`, \
         `templates/config.yaml`) against that directory, then run them with the terminal \
         tool using the absolute path."
            .to_string(),
    ];
    if !l.config.is_empty() {
        parts.push(String::new());
        parts.push("[Skill config (from ~/.hermes/config.yaml):".to_string());
        for (k, v) in &l.config {
            let shown = if v.is_empty() { "(not set)" } else { v };
            parts.push(format!("  {k} = {shown}"));
        }
        parts.push("]".to_string());
    }
    if let Some(note) = &l.setup_note {
        parts.push(String::new());
        parts.push(format!("[Skill setup note: {note}]"));
    }
    if !l.supporting.is_empty() {
        parts.push(String::new());
        parts.push("[This skill has supporting files:]".to_string());
        for f in &l.supporting {
            parts.push(format!("- {f}  ->  {dir}/{f}"));
        }
        parts.push(format!(
            "\nLoad any of these with skill_view(name=\"{}\", file_path=\"<path>\"), or run \
             scripts directly by absolute path (e.g. `node {dir}/scripts/foo.js`).",
            l.view_name
        ));
    }
    if !instruction.is_empty() {
        parts.push(String::new());
        parts.push(format!(
            "The user has provided the following instruction alongside the skill invocation: \
             {instruction}"
        ));
    }
    parts.join("\n")
}

/// `/<skill> instruction`.
pub fn single(l: &Loaded, instruction: &str, session: &str) -> String {
    let note = format!(
        "[IMPORTANT: The user has invoked the \"{}\" skill, indicating they want you to follow \
         its instructions. The full skill content is loaded below.]",
        l.name
    );
    skill_block(l, &note, instruction, session)
}

/// `/<a> /<b> instruction`: every skill typed first (`typed`: the slugs as typed, with `/`).
pub fn stacked(
    loaded: &[Loaded],
    typed: &str,
    missing: &[String],
    instruction: &str,
    session: &str,
) -> String {
    let names: Vec<&str> = loaded.iter().map(|l| l.name.as_str()).collect();
    let mut head = vec![
        format!(
            "[IMPORTANT: The user has invoked the \"{typed}\" stacked skill bundle, loading {} \
             skills together. Treat every skill below as active guidance for this turn.]",
            loaded.len()
        ),
        String::new(),
        format!("Skills loaded: {}", names.join(", ")),
    ];
    if !missing.is_empty() {
        head.push(format!("Skills missing (skipped): {}", missing.join(", ")));
    }
    if !instruction.is_empty() {
        head.extend([String::new(), format!("User instruction: {instruction}")]);
    }
    let blocks = loaded.iter().map(|l| {
        let note = format!(
            "[Loaded as part of the stacked skill invocation \"{}\".]",
            l.name
        );
        skill_block(l, &note, "", session)
    });
    std::iter::once(head.join("\n"))
        .chain(blocks)
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// What a bundle's activation says beyond its skills.
pub struct BundleNotes<'a> {
    pub name: &'a str,
    pub missing: &'a [String],
    pub disabled: &'a [String],
    /// The bundle's own `instruction`.
    pub instruction: &'a str,
}

/// `/<bundle> instruction`.
pub fn bundle(loaded: &[Loaded], notes: &BundleNotes<'_>, user: &str, session: &str) -> String {
    let names: Vec<&str> = loaded.iter().map(|l| l.name.as_str()).collect();
    let mut head = vec![
        format!(
            "[IMPORTANT: The user has invoked the \"{}\" skill bundle, loading {} skills \
             together. Treat every skill below as active guidance for this turn.]",
            notes.name,
            loaded.len()
        ),
        String::new(),
        format!("Bundle: {}", notes.name),
        format!("Skills loaded: {}", names.join(", ")),
    ];
    if !notes.missing.is_empty() {
        head.push(format!(
            "Skills missing (skipped): {}",
            notes.missing.join(", ")
        ));
    }
    if !notes.disabled.is_empty() {
        head.push(format!(
            "Skills disabled for this platform (skipped): {}",
            notes.disabled.join(", ")
        ));
    }
    if !notes.instruction.is_empty() {
        head.extend([
            String::new(),
            format!("Bundle instruction: {}", notes.instruction),
        ]);
    }
    if !user.is_empty() {
        head.extend([String::new(), format!("User instruction: {user}")]);
    }
    let blocks = loaded.iter().map(|l| {
        let note = format!("[Loaded as part of the \"{}\" skill bundle.]", notes.name);
        skill_block(l, &note, "", session)
    });
    std::iter::once(head.join("\n"))
        .chain(blocks)
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The skills `HERMES_TUI_SKILLS` preloads, for the system prompt.
pub fn preloaded(loaded: &[Loaded], session: &str) -> String {
    loaded
        .iter()
        .map(|l| {
            let note = format!(
                "[IMPORTANT: The user launched this CLI session with the \"{}\" skill \
                 preloaded. Treat its instructions as active guidance for the duration of this \
                 session unless the user overrides them.]",
                l.name
            );
            skill_block(l, &note, "", session)
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// `HERMES_TUI_SKILLS`: names separated by commas or newlines, each once.
pub fn preload_names(raw: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in raw.split([',', '\n']).map(str::trim) {
        if !item.is_empty() && !out.iter().any(|o| o == item) {
            out.push(item.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn loaded(name: &str) -> Loaded {
        Loaded {
            name: name.into(),
            content: "---\nname: x\n---\nDo ${HERMES_SKILL_DIR}/run.sh\n".into(),
            dir: PathBuf::from("/s/dev/x"),
            supporting: vec!["scripts/run.sh".into()],
            view_name: "dev/x".into(),
            config: vec![],
            setup_note: None,
        }
    }

    #[test]
    fn a_single_skill_message_is_hermes() {
        let m = single(&loaded("x"), "fix the bug", "sid");
        assert!(m.starts_with("[IMPORTANT: The user has invoked the \"x\" skill, indicating"));
        assert!(m.contains("Do /s/dev/x/run.sh"));
        assert!(m.contains("[Skill directory: /s/dev/x]"));
        assert!(m.contains("- scripts/run.sh  ->  /s/dev/x/scripts/run.sh"));
        assert!(m.contains("skill_view(name=\"dev/x\", file_path=\"<path>\")"));
        assert!(m.ends_with(
            "The user has provided the following instruction alongside the skill invocation: fix the bug"
        ));
    }

    #[test]
    fn stacked_bundles_and_preloads() {
        let s = stacked(&[loaded("a"), loaded("b")], "/a /b", &[], "go", "sid");
        assert!(s.contains("\"/a /b\" stacked skill bundle, loading 2 skills"));
        assert!(s.contains("Skills loaded: a, b\n\nUser instruction: go"));
        assert!(s.contains("[Loaded as part of the stacked skill invocation \"b\".]"));
        let notes = BundleNotes {
            name: "dev",
            missing: &["zz".to_string()],
            disabled: &[],
            instruction: "be brief",
        };
        let b = bundle(&[loaded("a")], &notes, "", "sid");
        assert!(b.contains("Bundle: dev\nSkills loaded: a\nSkills missing (skipped): zz"));
        assert!(b.contains("Bundle instruction: be brief"));
        assert!(preloaded(&[loaded("a")], "s").contains("skill preloaded."));
        assert_eq!(preload_names("a, b\na,,"), ["a", "b"]);
    }
}
