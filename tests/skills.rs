//! Hermes' skills end to end, with Hermes' 88 bundled skills (`../shared/hermes-reference/skills`)
//! copied into a temporary `HERMES_HOME/skills`: the banner's count, the model's three tools
//! through whole turns, what `skill_manage` writes reaching the next model call's index and
//! the commands catalog, a malformed SKILL.md reported while the rest load, `/<skill>` and
//! bundles as commands, `skills.reload`, and writes that a link cannot redirect.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;
use crate::mockai::*;
use crate::procs::poll_until;

pub(crate) fn reference_skills() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hermes-reference/skills");
    assert!(
        p.join("github/github-code-review/SKILL.md").is_file(),
        "Hermes' bundled skills are not at {}",
        p.display()
    );
    p
}

pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// The bundled skills valid on this platform, counted independently of the gateway: each
/// SKILL.md not under a skill's own support folder whose `platforms:` is absent or names
/// this OS.
pub(crate) fn valid_here(root: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let os = if cfg!(target_os = "macos") {
        "macos"
    } else {
        std::env::consts::OS
    };
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let has_skill = dir.join("SKILL.md").is_file();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                let support =
                    ["references", "templates", "assets", "scripts"].contains(&name.as_str());
                let skipped = name.starts_with('.') || (has_skill && support);
                if !skipped {
                    walk(&p, out);
                }
            } else if name == "SKILL.md" {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let platforms = text.lines().find(|l| l.starts_with("platforms:"));
        if platforms.is_none_or(|l| l.contains(os) || l.trim() == "platforms:") {
            let name = text
                .lines()
                .find_map(|l| l.strip_prefix("name: "))
                .unwrap()
                .trim()
                .to_string();
            names.push(name);
        }
    }
    names
}

struct Home {
    home: TempHome,
}

impl Home {
    fn new(tag: &str) -> Home {
        let home = TempHome::new(tag);
        copy_tree(&reference_skills(), &home.path.join("skills"));
        Home { home }
    }

    fn skills(&self) -> PathBuf {
        self.home.path.join("skills")
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.home.path.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn start(&self, tag: &str) -> Gateway {
        Gateway::builder().home(&self.home.path).tag(tag).start()
    }
}

fn count(by_category: &Value) -> usize {
    by_category
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_array().unwrap().len())
        .sum()
}

fn pair_names(catalog: &Value) -> Vec<String> {
    catalog["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_banner_counts_the_skills_valid_here_and_a_malformed_one_is_reported() {
    let h = Home::new("skills-banner");
    h.write(
        "skills/broken/bad/SKILL.md",
        "---\nname: [unclosed\ndescription: x\n---\nbody\n",
    );
    let expected = valid_here(&reference_skills());
    assert!(expected.len() > 80, "{}", expected.len());
    let mut g = h.start("skills-banner");
    // The catalog waits for the first scan, so the session after it has every skill.
    let catalog = g.call("commands.catalog", json!({}));
    let s = g.create_session(json!({}));
    let skills = &s.result["info"]["skills"];
    assert_eq!(count(skills), expected.len(), "{skills}");
    assert!(
        skills["github"]
            .as_array()
            .unwrap()
            .contains(&json!("github-code-review"))
    );
    assert_eq!(
        catalog["skill_count"],
        expected.len(),
        "no bundled skill clashes with a command"
    );
    let names = pair_names(&catalog);
    assert!(
        names.contains(&"/github-code-review".to_string()),
        "{names:?}"
    );
    let warning = catalog["warning"].as_str().unwrap();
    assert!(warning.contains("broken/bad/SKILL.md"), "{warning}");
    assert!(g.stderr_with("broken/bad/SKILL.md", T).contains("[skills]"));
    // A skill for another platform is neither counted nor loadable.
    let listed = g.call("skills.manage", json!({"action": "list"}));
    assert_eq!(count(&listed["skills"]), expected.len());
    if !cfg!(target_os = "macos") {
        assert!(!expected.iter().any(|n| n == "apple-notes"));
        let r = g.run_turn(&s.id, r#"%skill_view {"name": "apple-notes"}"#);
        let done = r.event("tool.complete");
        assert_eq!(
            done["payload"]["result"]["readiness_status"], "unsupported",
            "{done}"
        );
    }
}

#[test]
fn skills_list_and_skill_view_work_through_turns() {
    let h = Home::new("skills-view");
    let mut g = h.start("skills-view");
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, r#"%skills_list {"category": "github"}"#);
    let result = &turn.event("tool.complete")["payload"]["result"];
    assert_eq!(result["success"], true, "{result}");
    let names: Vec<&str> = result["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"github-code-review") && names.iter().all(|n| !n.is_empty()));
    assert_eq!(result["categories"], json!(["github"]));

    let turn = g.run_turn(&s.id, r#"%skill_view {"name": "github-code-review"}"#);
    let v = &turn.event("tool.complete")["payload"]["result"];
    assert_eq!(v["name"], "github-code-review", "{v}");
    assert!(
        v["content"]
            .as_str()
            .unwrap()
            .contains("# GitHub Code Review")
    );
    assert_eq!(v["path"], "github/github-code-review/SKILL.md");
    assert_eq!(v["tags"][0], "GitHub");
    let refs = v["linked_files"]["references"].as_array().unwrap();
    let first = refs[0].as_str().unwrap().to_string();

    let turn = g.run_turn(
        &s.id,
        &format!(r#"%skill_view {{"name": "github-code-review", "file_path": "{first}"}}"#),
    );
    let f = &turn.event("tool.complete")["payload"]["result"];
    let on_disk =
        std::fs::read_to_string(h.skills().join("github/github-code-review").join(&first)).unwrap();
    assert_eq!(f["content"].as_str().unwrap(), on_disk);

    let turn = g.run_turn(
        &s.id,
        r#"%skill_view {"name": "github-code-review", "file_path": "../../../config.yaml"}"#,
    );
    let bad = turn.event("tool.complete");
    assert_eq!(bad["payload"]["result"]["success"], false, "{bad}");
    let turn = g.run_turn(&s.id, r#"%skill_view {"name": "no-such-skill"}"#);
    let missing = &turn.event("tool.complete")["payload"]["result"];
    assert_eq!(missing["error"], "Skill 'no-such-skill' not found.");
    assert!(!missing["available_skills"].as_array().unwrap().is_empty());

    let tools = g.call("tools.list", json!({}));
    let set = tools["toolsets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "skills")
        .cloned();
    assert_eq!(
        set.unwrap()["tools"],
        json!(["skill_manage", "skill_view", "skills_list"])
    );
    assert!(s.result["info"]["tools"]["skills"].is_array());
}

fn tool_call(name: &str, args: &Value) -> Reply {
    Reply::Stream(Stream::new(vec![
        ev_role(),
        ev_tool_start(0, "call_1", name, &args.to_string()),
        ev_finish("tool_calls"),
        ev_usage(10, 5),
    ]))
}

fn system_of(r: &Recorded) -> String {
    let m = &r.body["messages"][0];
    assert_eq!(m["role"], "system", "{m}");
    content_text(&m["content"])
}

#[test]
fn a_skill_the_model_creates_is_in_its_next_call_and_the_commands_and_preloads_reach_the_prompt() {
    let h = Home::new("skills-manage");
    let content = "---\nname: deploy-notes\ndescription: How we deploy the thing\n---\n\n1. Run make deploy\n";
    let mock = MockAi::script(vec![
        tool_call(
            "skill_manage",
            &json!({"action": "create", "name": "deploy-notes", "category": "devops", "content": content}),
        ),
        Reply::text(&["Saved."], (5, 1)),
    ]);
    let mut g = Gateway::builder()
        .home(&h.home.path)
        .tag("skills-manage")
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "gpt-test")
        .env("HERMES_TUI_SKILLS", "github-code-review, no-such-skill")
        .start();
    g.call("commands.catalog", json!({}));
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "remember how we deploy");
    assert_eq!(turn.text, "Saved.");
    let done = turn.event("tool.complete");
    assert_eq!(done["payload"]["result"]["success"], true, "{done}");
    let written = std::fs::read_to_string(h.skills().join("devops/deploy-notes/SKILL.md")).unwrap();
    assert_eq!(written, content);
    let reqs = mock.requests();
    let (first, second) = (system_of(&reqs[0]), system_of(&reqs[1]));
    assert!(
        first.contains("## Skills (mandatory)")
            && first.contains("    - github-code-review: Review PRs"),
        "{first}"
    );
    assert!(!first.contains("deploy-notes"));
    assert!(
        second.contains("  devops:\n    - deploy-notes: How we deploy the thing"),
        "{second}"
    );
    // The preloaded skill, once; the unknown one skipped and said.
    assert!(first.contains("[IMPORTANT: The user launched this CLI session with the \"github-code-review\" skill preloaded."));
    assert!(
        g.stderr_with("no-such-skill", T)
            .contains("HERMES_TUI_SKILLS")
    );
    let names = pair_names(&g.call("commands.catalog", json!({})));
    assert!(names.contains(&"/deploy-notes".to_string()));
    let items = g.call("complete.slash", json!({"text": "/deploy-n"}));
    assert_eq!(items["items"][0]["text"], "deploy-notes", "{items}");
}

/// `n` more skills under `skills` (10 categories, each SKILL.md ~2 KB, like the bench's): a
/// first scan of them takes tens of milliseconds, so requests sent at spawn find it under way.
fn add_many(skills: &Path, n: usize) {
    let body = "Step by step: run the checks, read the output, fix what fails.\n".repeat(30);
    for i in 0..n {
        let dir = skills.join(format!("many-{}/many-{i:04}", i % 10));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: many-{i:04}\ndescription: Skill {i}\n---\n\n{body}"),
        )
        .unwrap();
    }
}

#[test]
fn on_a_first_start_only_what_needs_the_skills_waits_for_their_scan() {
    let h = Home::new("skills-first");
    add_many(&h.skills(), 1000);
    let total = valid_here(&reference_skills()).len() + 1000;
    let mut g = Gateway::builder()
        .home(&h.home.path)
        .tag("skills-first")
        .spawn();
    // Together, as the TUI sends them at start, while the first scan has barely begun.
    g.send_raw(
        concat!(
            r#"{"jsonrpc":"2.0","id":"cat","method":"commands.catalog","params":{}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":"new","method":"session.create","params":{}}"#,
            "\n"
        )
        .as_bytes(),
    );
    let first = g.wait_frame(is_response, T).unwrap();
    assert_eq!(
        first["id"], "new",
        "a new session does not wait behind the catalog for the scan: {first}"
    );
    let sid = first["result"]["session_id"].as_str().unwrap().to_string();
    // The catalog waited for the whole scan: every skill is in it.
    let catalog = g.wait_response(&json!("cat"), T);
    assert_eq!(catalog["result"]["skill_count"], total);
    // The banner hears the whole count once the scan is complete.
    let whole = g.wait_frame(
        |f| {
            event_type(f) == Some("session.info")
                && f["params"]["session_id"] == sid.as_str()
                && f["params"]["payload"]["skills"]
                    .as_object()
                    .is_some_and(|m| {
                        m.values()
                            .map(|v| v.as_array().map_or(0, Vec::len))
                            .sum::<usize>()
                            == total
                    })
        },
        T,
    );
    assert!(whole.is_some(), "{}", g.diag());
}

#[test]
fn a_preloaded_skill_reaches_a_session_opened_during_the_first_scan() {
    let h = Home::new("skills-preload-first");
    add_many(&h.skills(), 1000);
    let mock = MockAi::script(vec![Reply::text(&["Hi."], (5, 1))]);
    let mut g = Gateway::builder()
        .home(&h.home.path)
        .tag("skills-preload-first")
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "gpt-test")
        .env("HERMES_TUI_SKILLS", "github-code-review")
        .spawn();
    // No catalog asked first: the session is opened while the scan runs.
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "hello");
    assert_eq!(turn.text, "Hi.");
    let first = system_of(&mock.requests()[0]);
    assert!(
        first.contains("the \"github-code-review\" skill preloaded."),
        "{first}"
    );
    assert!(
        first.contains("    - many-0999: Skill 999"),
        "the whole index"
    );
}

#[test]
fn a_slash_skill_answers_the_activation_message_and_several_stack() {
    let h = Home::new("skills-slash");
    let mut g = h.start("skills-slash");
    let s = g.create_session(json!({}));
    let r = g.call(
        "command.dispatch",
        json!({"name": "github-code-review", "arg": "review my branch", "session_id": s.id}),
    );
    assert_eq!(r["type"], "skill", "{r}");
    assert_eq!(r["name"], "github-code-review");
    let m = r["message"].as_str().unwrap();
    let dir = h.skills().join("github/github-code-review");
    assert!(m.starts_with("[IMPORTANT: The user has invoked the \"github-code-review\" skill, indicating they want you to follow its instructions. The full skill content is loaded below.]\n\n---\nname: github-code-review"), "{m}");
    assert!(m.contains(&format!("[Skill directory: {}]", dir.display())));
    assert!(m.contains("[This skill has supporting files:]"));
    assert!(m.ends_with("The user has provided the following instruction alongside the skill invocation: review my branch"));
    let stacked = g.call(
        "slash.exec",
        json!({"command": "github-code-review /github-pr-workflow ship it", "session_id": s.id}),
    );
    let m = stacked["message"].as_str().unwrap();
    assert!(
        m.contains(
            "\"/github-code-review /github-pr-workflow\" stacked skill bundle, loading 2 skills"
        ),
        "{m}"
    );
    assert!(m.contains("User instruction: ship it"));
    // The message the TUI submits runs a turn like any prompt.
    let turn = g.run_turn(&s.id, r["message"].as_str().unwrap());
    assert_eq!(turn.complete["payload"]["status"], "complete");
    // A built-in keeps its name; an unknown command is still refused plainly.
    let unknown = g.call("slash.exec", json!({"command": "nonesuch"}));
    assert!(
        unknown["output"]
            .as_str()
            .unwrap()
            .contains("not supported")
    );
}

#[test]
fn a_bundle_loads_its_skills_and_says_which_are_missing() {
    let h = Home::new("skills-bundle");
    h.write(
        "skill-bundles/review.yaml",
        "name: Review Kit\ndescription: Reviews\nskills: [github-code-review, not-a-skill]\ninstruction: Be brief.\n",
    );
    h.write("skill-bundles/broken.yaml", "name: [oops\n");
    let mut g = h.start("skills-bundle");
    let catalog = g.call("commands.catalog", json!({}));
    assert!(pair_names(&catalog).contains(&"/review-kit".to_string()));
    assert!(catalog["warning"].as_str().unwrap().contains("broken.yaml"));
    let r = g.call(
        "command.dispatch",
        json!({"name": "review-kit", "arg": "check PR 7"}),
    );
    assert_eq!(r["type"], "send", "{r}");
    assert!(
        r["notice"]
            .as_str()
            .unwrap()
            .starts_with("⚡ Loading bundle: Review Kit (1 skills)")
    );
    let m = r["message"].as_str().unwrap();
    assert!(m.contains("Bundle: Review Kit\nSkills loaded: github-code-review\nSkills missing (skipped): not-a-skill"), "{m}");
    assert!(
        m.contains("Bundle instruction: Be brief.") && m.contains("User instruction: check PR 7")
    );
    assert!(m.contains("[Loaded as part of the \"Review Kit\" skill bundle.]"));
}

#[test]
fn reload_says_what_was_added_and_removed_and_the_hub_inspects() {
    let h = Home::new("skills-reload");
    let mut g = h.start("skills-reload");
    let s = g.create_session(json!({}));
    let before = count(&g.call("skills.manage", json!({"action": "list"}))["skills"]);
    h.write(
        "skills/mine/fresh-skill/SKILL.md",
        "---\nname: fresh-skill\ndescription: New here\n---\nDo it.\n",
    );
    std::fs::remove_dir_all(h.skills().join("github/github-code-review")).unwrap();
    let r = g.call("skills.reload", json!({}));
    assert_eq!(
        r["result"]["added"],
        json!([{"name": "fresh-skill", "description": "New here"}]),
        "{r}"
    );
    assert_eq!(r["result"]["removed"][0]["name"], "github-code-review");
    assert_eq!(r["result"]["total"], before);
    let out = r["output"].as_str().unwrap();
    assert!(out.starts_with("Reloading skills...\nAdded skills:\n  - fresh-skill\nRemoved skills:\n  - github-code-review"), "{out}");
    // The live session's banner hears of it.
    let heard = g.wait_frame(
        |f| {
            f["params"]["type"] == "session.info"
                && f["params"]["session_id"] == s.id.as_str()
                && f["params"]["payload"]["skills"]["mine"].is_array()
        },
        T,
    );
    assert!(heard.is_some(), "no session.info with the new skill");
    let inspect = g.call(
        "skills.manage",
        json!({"action": "inspect", "query": "fresh-skill"}),
    );
    assert_eq!(inspect["info"]["name"], "fresh-skill");
    assert_eq!(inspect["info"]["category"], "mine");
    assert_eq!(inspect["info"]["description"], "New here");
    let (code, msg, _) = g.call_err("skills.manage", json!({"action": "install", "query": "x"}));
    assert_eq!(code, 4040, "{msg}");
    assert!(msg.contains("not supported"));
    let text = g.call("slash.exec", json!({"command": "skills"}));
    assert!(
        text["output"]
            .as_str()
            .unwrap()
            .contains("mine: fresh-skill"),
        "{text}"
    );
}

#[test]
fn skill_writes_stay_in_the_skills_folder_and_refuse_links() {
    let h = Home::new("skills-confined");
    let outside = TempHome::new("skills-outside");
    std::os::unix::fs::symlink(
        &outside.path,
        h.skills().join("github/github-code-review/templates"),
    )
    .unwrap();
    let mut g = h.start("skills-confined");
    let s = g.create_session(json!({}));
    let call = |g: &mut Gateway, args: Value| {
        let turn = g.run_turn(&s.id, &format!("%skill_manage {args}"));
        turn.event("tool.complete")["payload"]["result"].clone()
    };
    let r = call(
        &mut g,
        json!({"action": "write_file", "name": "github-code-review", "file_path": "templates/x.md", "file_content": "pwned"}),
    );
    assert_eq!(r["success"], false, "{r}");
    assert!(
        std::fs::read_dir(&outside.path).unwrap().next().is_none(),
        "nothing written through the link"
    );
    let r = call(
        &mut g,
        json!({"action": "write_file", "name": "github-code-review", "file_path": "references/../../../escape.md", "file_content": "x"}),
    );
    assert_eq!(r["error"], "Path traversal ('..') is not allowed.");
    let r = call(
        &mut g,
        json!({"action": "create", "name": "../evil", "content": "---\nname: e\ndescription: d\n---\nb"}),
    );
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .starts_with("Invalid skill name"),
        "{r}"
    );
    let r = call(
        &mut g,
        json!({"action": "write_file", "name": "github-code-review", "file_path": "references/notes.md", "file_content": "hello"}),
    );
    assert_eq!(r["success"], true, "{r}");
    let notes = h
        .skills()
        .join("github/github-code-review/references/notes.md");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello");
    let r = call(
        &mut g,
        json!({"action": "patch", "name": "github-code-review", "old_string": "# GitHub Code Review", "new_string": "# GitHub Code Review (ours)"}),
    );
    assert_eq!(
        r["message"], "Patched SKILL.md in skill 'github-code-review' (1 replacement).",
        "{r}"
    );
    let r = call(
        &mut g,
        json!({"action": "remove_file", "name": "github-code-review", "file_path": "references/notes.md"}),
    );
    assert_eq!(r["success"], true, "{r}");
    assert!(!notes.exists());
    let r = call(
        &mut g,
        json!({"action": "delete", "name": "github-code-review"}),
    );
    assert_eq!(r["message"], "Skill 'github-code-review' deleted.");
    assert!(outside.path.is_dir(), "the link's target is left alone");
    let listed = g.call("skills.manage", json!({"action": "list"}));
    assert!(
        !listed["skills"]["github"]
            .as_array()
            .unwrap()
            .contains(&json!("github-code-review"))
    );
}

/// `skill_view` of the result of a whole turn.
fn view_in_turn(g: &mut Gateway, sid: &str, args: Value) -> Value {
    let turn = g.run_turn(sid, &format!("%skill_view {args}"));
    turn.event("tool.complete")["payload"]["result"].clone()
}

#[test]
fn an_enabled_plugins_skills_load_by_their_qualified_name_only() {
    let home = TempHome::new("skills-plugins");
    let write = |rel: &str, text: &str| {
        let p = home.path.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "plugins/review-pack/plugin.yaml",
        "name: rpack\nversion: 1.0.0\n",
    );
    write(
        "plugins/review-pack/skills/checklist/SKILL.md",
        "---\nname: checklist\ndescription: The review checklist\n---\nCheck every line.\n",
    );
    write(
        "plugins/review-pack/skills/triage/SKILL.md",
        "---\nname: triage\ndescription: Triage\n---\nSort them.\n",
    );
    // Installed but not turned on, and turned on but lacking its key: neither provides skills.
    write("plugins/idle/plugin.yaml", "name: idle\n");
    write(
        "plugins/idle/skills/nap/SKILL.md",
        "---\nname: nap\ndescription: d\n---\nb\n",
    );
    write(
        "plugins/keyed/plugin.yaml",
        "name: keyed\nrequires_env: [KEYED_PLUGIN_TOKEN]\n",
    );
    write(
        "plugins/keyed/skills/k/SKILL.md",
        "---\nname: k\ndescription: d\n---\nb\n",
    );
    write(
        "skills/github/local-one/SKILL.md",
        "---\nname: local-one\ndescription: Local\n---\nLocal body.\n",
    );
    write("config.yaml", "plugins:\n  enabled: [rpack, keyed]\n");
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("skills-plugins")
        .start();
    let catalog = g.call("commands.catalog", json!({}));
    let s = g.create_session(json!({}));
    let v = view_in_turn(&mut g, &s.id, json!({"name": "rpack:checklist"}));
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(v["name"], "rpack:checklist");
    assert_eq!(v["description"], "The review checklist");
    let content = v["content"].as_str().unwrap();
    assert!(
        content.starts_with("[Bundle context: This skill is part of the 'rpack' plugin.\nSibling skills: triage.\nUse qualified form to invoke siblings (e.g. rpack:triage).]\n\n---\nname: checklist"),
        "{content}"
    );
    let v = view_in_turn(&mut g, &s.id, json!({"name": "rpack:nope"}));
    assert_eq!(v["error"], "Skill 'nope' not found in plugin 'rpack'.");
    assert_eq!(
        v["available_skills"],
        json!(["rpack:checklist", "rpack:triage"])
    );
    for off in ["idle:nap", "keyed:k"] {
        let v = view_in_turn(&mut g, &s.id, json!({ "name": off }));
        assert_eq!(v["error"], format!("Skill '{off}' not found."), "{v}");
    }
    let v = view_in_turn(&mut g, &s.id, json!({"name": "bad ns:x"}));
    assert_eq!(
        v["error"],
        "Invalid namespace 'bad ns' in 'bad ns:x'. Namespaces must match [a-zA-Z0-9_-]+."
    );
    // No plugin named so: `category:skill` is the skill at that path.
    let v = view_in_turn(&mut g, &s.id, json!({"name": "github:local-one"}));
    assert_eq!(v["name"], "local-one", "{v}");
    // Never offered: not in the list, the banner or the commands.
    let v = g.run_turn(&s.id, "%skills_list {}");
    let listed = v.event("tool.complete")["payload"]["result"].to_string();
    assert!(
        listed.contains("local-one") && !listed.contains("checklist"),
        "{listed}"
    );
    assert_eq!(count(&s.result["info"]["skills"]), 1);
    let names = pair_names(&catalog);
    assert!(!names.iter().any(|n| n.contains("checklist")), "{names:?}");
}

#[test]
fn skill_view_says_which_variables_and_files_a_skill_lacks_never_their_values() {
    let home = TempHome::new("skills-ready");
    let write = |rel: &str, text: &str| {
        let p = home.path.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let secret = "sk-ready-7f3a9c1e5b";
    write(".env", &format!("SKREADY_TOKEN={secret}\n"));
    write("creds/present.json", "{}");
    write(
        "skills/apis/needs-keys/SKILL.md",
        "---\nname: needs-keys\ndescription: Calls an API\nrequired_environment_variables:\n  - name: SKREADY_TOKEN\n  - name: SKREADY_ABSENT\n    help: Create a key at https://keys.example\nrequired_credential_files:\n  - creds/present.json\n  - path: creds/absent.json\n---\nUse $SKREADY_TOKEN.\n",
    );
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("skills-ready")
        .start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, r#"%skill_view {"name": "needs-keys"}"#);
    let v = &turn.event("tool.complete")["payload"]["result"];
    assert_eq!(v["readiness_status"], "setup_needed", "{v}");
    assert_eq!(v["setup_needed"], true);
    assert_eq!(
        v["missing_required_environment_variables"],
        json!(["SKREADY_ABSENT"])
    );
    assert_eq!(v["missing_credential_files"], json!(["creds/absent.json"]));
    assert_eq!(v["setup_help"], "Create a key at https://keys.example");
    assert_eq!(
        v["setup_note"],
        "Setup needed before using this skill: missing env $SKREADY_ABSENT, file creds/absent.json. Create a key at https://keys.example"
    );
    assert_eq!(
        v["required_environment_variables"][0],
        json!({"name": "SKREADY_TOKEN", "prompt": "Enter value for SKREADY_TOKEN"})
    );
    // The activation message carries the same note.
    let r = g.call(
        "command.dispatch",
        json!({"name": "needs-keys", "arg": "go", "session_id": s.id}),
    );
    let m = r["message"].as_str().unwrap();
    assert!(
        m.contains("\n\n[Skill setup note: Setup needed before using this skill: missing env $SKREADY_ABSENT, file creds/absent.json. Create a key at https://keys.example]"),
        "{m}"
    );
    // The value is in no frame, no log line.
    let frames = serde_json::to_string(&g.events_of_session(&s.id)).unwrap();
    assert!(!frames.contains(secret) && !m.contains(secret));
    assert!(!g.stderr_text().contains(secret));
}

#[test]
fn the_next_start_offers_the_kept_scan_and_its_own_scan_corrects_it() {
    let h = Home::new("skills-kept");
    let mut g = h.start("skills-kept");
    let first = count(&g.call("skills.manage", json!({"action": "list"}))["skills"]);
    g.close_stdin();
    g.wait_exit(T);
    let kept = h.home.path.join("tui_gateway_skills.json");
    assert!(kept.is_file(), "the scan was not kept");
    // Gone while the gateway was down: whatever the start offers first, its scan takes it out.
    std::fs::remove_dir_all(h.skills().join("github/github-code-review")).unwrap();
    let mut g = h.start("skills-kept-2");
    let mut listed = Value::Null;
    let corrected = poll_until(T, || {
        listed = g.call("skills.manage", json!({"action": "list"}));
        !listed["skills"]["github"]
            .as_array()
            .unwrap()
            .contains(&json!("github-code-review"))
    });
    assert!(corrected, "{listed}");
    assert_eq!(count(&listed["skills"]), first - 1);
    g.close_stdin();
    g.wait_exit(T);
    // A kept file that does not parse is no scan: the start scans first.
    std::fs::write(&kept, "{not json").unwrap();
    let mut g = h.start("skills-kept-3");
    let listed = g.call("skills.manage", json!({"action": "list"}));
    assert_eq!(count(&listed["skills"]), first - 1, "{listed}");
}

#[test]
fn a_flat_md_skill_loads_by_name_or_path_and_a_name_two_skills_share_is_refused() {
    let home = TempHome::new("skills-flat");
    let write = |rel: &str, text: &str| {
        let p = home.path.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    // Hermes' legacy layout: a skill as `<category>/<name>.md`, no folder of its own.
    write(
        "skills/devops/deploy.md",
        "---\nname: deploy\ndescription: Deploy the service\n---\n\nRun make deploy.\n",
    );
    write("skills/jot.md", "Write it down first.\n");
    // A skill's supporting file of the same name is no skill (loaded with file_path only).
    write(
        "skills/dev/review/SKILL.md",
        "---\nname: review\ndescription: Review code\n---\nRead every line.\n",
    );
    write("skills/dev/review/references/deploy.md", "not a skill\n");
    // `review` twice: the folder above and a flat file elsewhere.
    write("skills/ops/review.md", "---\nname: ops-review\n---\nOps.\n");
    // `twin` in the local folder and in an external one.
    write(
        "skills/a/twin/SKILL.md",
        "---\nname: twin\ndescription: Local twin\n---\nL\n",
    );
    write(
        "ext/b/twin/SKILL.md",
        "---\nname: twin\ndescription: External twin\n---\nE\n",
    );
    write(
        "config.yaml",
        &format!(
            "skills:\n  external_dirs: [{}]\n",
            home.path.join("ext").display()
        ),
    );
    write(
        "skill-bundles/ship.yaml",
        "name: Ship\ndescription: d\nskills: [deploy]\n",
    );
    let mut g = Gateway::builder()
        .home(&home.path)
        .tag("skills-flat")
        .start();
    let catalog = g.call("commands.catalog", json!({}));
    let s = g.create_session(json!({}));

    for name in ["deploy", "devops/deploy"] {
        let v = view_in_turn(&mut g, &s.id, json!({ "name": name }));
        assert_eq!(v["success"], true, "{name}: {v}");
        assert_eq!(v["name"], "deploy");
        assert_eq!(v["description"], "Deploy the service");
        assert_eq!(v["path"], "devops/deploy.md");
        assert_eq!(v["skill_dir"], Value::Null);
        assert_eq!(v["linked_files"], Value::Null);
        assert!(
            v["content"]
                .as_str()
                .unwrap()
                .ends_with("Run make deploy.\n")
        );
    }
    // No header: named after the file.
    let v = view_in_turn(&mut g, &s.id, json!({"name": "jot"}));
    assert_eq!(
        (&v["name"], &v["path"]),
        (&json!("jot"), &json!("jot.md")),
        "{v}"
    );
    assert_eq!(v["content"], "Write it down first.\n");

    let v = view_in_turn(&mut g, &s.id, json!({"name": "review"}));
    assert_eq!(v["success"], false, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("Ambiguous skill name 'review': 2 skills match"),
        "{v}"
    );
    let mut matches: Vec<String> = v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    matches.sort();
    let skills = home.path.join("skills");
    assert_eq!(
        matches,
        [
            skills.join("dev/review/SKILL.md").display().to_string(),
            skills.join("ops/review.md").display().to_string()
        ]
    );
    // Each by its path.
    let v = view_in_turn(&mut g, &s.id, json!({"name": "dev/review"}));
    assert_eq!(v["name"], "review", "{v}");
    let v = view_in_turn(&mut g, &s.id, json!({"name": "ops/review"}));
    assert_eq!(v["name"], "ops-review", "{v}");

    let v = view_in_turn(&mut g, &s.id, json!({"name": "twin"}));
    assert_eq!(v["matches"].as_array().map(Vec::len), Some(2), "{v}");
    let v = view_in_turn(&mut g, &s.id, json!({"name": "a/twin"}));
    assert_eq!(v["description"], "Local twin", "{v}");

    // Loadable by name, never offered: not listed, not a command.
    let listed = g.run_turn(&s.id, "%skills_list {}");
    let listed = listed.event("tool.complete")["payload"]["result"].to_string();
    assert!(
        !listed.contains("deploy") && !listed.contains("jot"),
        "{listed}"
    );
    let names = pair_names(&catalog);
    assert!(!names.contains(&"/deploy".to_string()), "{names:?}");
    // A bundle naming it loads it.
    let r = g.call("command.dispatch", json!({"name": "ship", "arg": "now"}));
    let m = r["message"].as_str().unwrap_or_default();
    assert!(m.contains("Run make deploy."), "{r}");
}

/// A skill's `requires_toolsets` / `fallback_for_toolsets` are judged by the toolsets offered
/// (`file`, `terminal`, …), as Hermes' index judges them, not by the tools' names.
#[test]
fn the_index_judges_a_skills_toolset_conditions_by_the_toolsets_offered() {
    let h = Home::new("skills-toolsets");
    let skill = |name: &str, condition: &str| {
        format!(
            "---\nname: {name}\ndescription: About {name}\nmetadata:\n  hermes:\n    {condition}\n---\nbody\n"
        )
    };
    h.write(
        "skills/cond/needs-files/SKILL.md",
        &skill("needs-files", "requires_toolsets: [file]"),
    );
    h.write(
        "skills/cond/instead-of-a-shell/SKILL.md",
        &skill("instead-of-a-shell", "fallback_for_toolsets: [terminal]"),
    );
    let mock = MockAi::script(vec![Reply::text(&["ok"], (5, 1))]);
    let mut g = Gateway::builder()
        .home(&h.home.path)
        .tag("skills-toolsets")
        .env("OPENAI_BASE_URL", &mock.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "gpt-test")
        .start();
    let s = g.create_session(json!({}));
    assert_eq!(g.run_turn(&s.id, "hi").text, "ok");
    let system = system_of(&mock.requests()[0]);
    assert!(
        system.contains("- needs-files: About needs-files"),
        "the file toolset is offered: {system}"
    );
    assert!(
        !system.contains("instead-of-a-shell"),
        "the terminal toolset is offered, so its fallback is not shown: {system}"
    );
}
