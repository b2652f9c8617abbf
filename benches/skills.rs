//! Skill discovery with 1,000 skills (10 categories × 100, each SKILL.md ~2 KB): the whole scan
//! in this process, its longest single unit (a folder listed or a file read: what an iteration
//! can overrun its 4 ms slice by), the bytes the index adds to the system prompt, and — the
//! gateway spawned on that home — the worst `ping` round trip while its first scan runs, and
//! when `commands.catalog` is answered: held until the scan is complete on a first start, at
//! once on the next (the last scan kept in `tui_gateway_skills.json`, whose load is timed
//! too); when a `session.create` sent right after it is answered (not held behind it); and on
//! a first start again, a `prompt.submit` sent as soon as its session is open (held for the
//! whole index).
//!
//!
//! Beside Hermes: the index each builds for Hermes' 88 bundled skills (the reference's
//! `skills/` copied into a temporary `HERMES_HOME/skills`), for a model offered the same tools
//! — ours as a session builds it, Hermes' by its own prompt builder (`agent/prompt_builder.py`
//! of hermes-agent 0.18.2, run by `benches/hermes/skills_index.py` in the pinned venv of
//! `tests/hermes-venv.sh`), bytes side by side and the lines that differ, if any. Skipped when
//! that venv is not made (`bash benches/skills.sh` makes it, then runs this bench).
//!
//! ```text
//! cargo bench --bench skills
//! cargo bench --bench skills -- --scan   # the in-process scan alone
//! cargo bench --bench skills -- --spawned [--gateway PATH]   # a first start's wait alone
//! bash benches/skills.sh        # the venv made first, so Hermes' figure is there too
//! ```

#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tui_gateway::clock::Budget;
use tui_gateway::skills::{cache, scan::Scan, settings::Settings};

const SKILLS: usize = 1000;

#[allow(
    clippy::disallowed_methods,
    reason = "the bench writes its own fixtures"
)]
fn make_home() -> PathBuf {
    let home = std::env::temp_dir().join(format!("tuigw-bench-skills-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let body = "Step by step: run the checks, read the output, fix what fails.\n".repeat(30);
    for i in 0..SKILLS {
        let dir = home.join(format!("skills/category-{}/skill-{i:04}", i % 10));
        std::fs::create_dir_all(dir.join("references")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!(
                "---\nname: skill-{i:04}\ndescription: Skill number {i} does a useful thing well\n\
                 platforms: [linux, macos]\nmetadata:\n  hermes:\n    tags: [bench, x]\n---\n\n# Skill {i}\n\n{body}"
            ),
        )
        .unwrap();
        std::fs::write(dir.join("references/notes.md"), "notes").unwrap();
    }
    home
}

fn in_process(home: &Path) {
    let start = Instant::now();
    let mut scan = Scan::new(Settings::load(home));
    assert!(scan.run(&Budget::unlimited()));
    let whole = start.elapsed();
    let catalog = scan.finish();
    let mut scan = Scan::new(Settings::load(home));
    let (mut worst, mut steps) = (Duration::ZERO, 0);
    loop {
        let t = Instant::now();
        let done = scan.step();
        worst = worst.max(t.elapsed());
        steps += 1;
        if done {
            break;
        }
    }
    let none = Default::default();
    let index = catalog.prompt_index(&none, &none);
    // What the scan's time goes to: each kind of unit on its own.
    let files: Vec<PathBuf> = catalog
        .records()
        .iter()
        .map(|r| r.skill_md.clone())
        .collect();
    let t = Instant::now();
    for f in &files {
        let _ = std::fs::metadata(f);
    }
    let stats = t.elapsed();
    let t = Instant::now();
    let texts: Vec<String> = files
        .iter()
        .map(|f| {
            tui_gateway::util::read_regular(f, 1 << 20)
                .unwrap()
                .unwrap()
        })
        .collect();
    let reads = t.elapsed();
    let t = Instant::now();
    for text in &texts {
        let _ = tui_gateway::skills::catalog::Meta::read(text, "x");
    }
    let parses = t.elapsed();
    let t = Instant::now();
    for f in &files {
        let _ = std::fs::read_dir(f.parent().unwrap()).unwrap().count();
    }
    let lists = t.elapsed();
    println!(
        "of which, for {} skills: folders listed {:.1} ms, SKILL.md looked at (stat) {:.1} ms, read {:.1} ms, headers parsed {:.1} ms",
        files.len(),
        lists.as_secs_f64() * 1e3,
        stats.as_secs_f64() * 1e3,
        reads.as_secs_f64() * 1e3,
        parses.as_secs_f64() * 1e3
    );
    // A scan that knows the last one's reads (a rescan, a start on the kept scan): unchanged
    // files are looked at, not read.
    let t = Instant::now();
    let mut again = Scan::new(Settings::load(home)).knowing(catalog.records());
    assert!(again.run(&Budget::unlimited()));
    println!(
        "scan again, nothing changed: {:.1} ms whole",
        t.elapsed().as_secs_f64() * 1e3
    );
    // The kept scan, as a start reads it (in a home of its own: the spawned runs make theirs).
    let kept_home = home.join("kept");
    std::fs::create_dir_all(&kept_home).unwrap();
    let t = Instant::now();
    let bytes = cache::encode(&catalog);
    cache::store(&kept_home, &bytes);
    let kept = t.elapsed();
    let t = Instant::now();
    let loaded = cache::load(&kept_home, &catalog.settings);
    let load = t.elapsed();
    println!(
        "kept scan: {} bytes, written in {:.2} ms, loaded in {:.2} ms ({} skills)",
        bytes.len(),
        kept.as_secs_f64() * 1e3,
        load.as_secs_f64() * 1e3,
        loaded.map_or(0, |c| c.offered().count())
    );
    println!(
        "scan of {} skills: {:.1} ms whole, {steps} units, longest unit {:.2} ms",
        catalog.offered().count(),
        whole.as_secs_f64() * 1e3,
        worst.as_secs_f64() * 1e3
    );
    println!(
        "index: {} bytes in the system prompt ({:.0} per skill)",
        index.len(),
        index.len() as f64 / SKILLS as f64
    );
}

/// The gateway on `home` with the offline model: this build's, or another's (`-- --gateway
/// PATH`, a before / after); `None` when there is none to run.
fn spawn_gateway(home: &Path) -> Option<std::process::Child> {
    let args: Vec<String> = std::env::args().collect();
    let bin = match args.iter().position(|a| a == "--gateway") {
        Some(i) => PathBuf::from(&args[i + 1]),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/tui-gateway"),
    };
    if !bin.is_file() {
        println!("(no {}: cargo build --release first)", bin.display());
        return None;
    }
    let child = Command::new(&bin)
        .env("HERMES_HOME", home)
        .env("TUI_GATEWAY_PROVIDER", "offline")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Some(child)
}

fn spawned(home: &Path, what: &str) {
    let Some(mut child) = spawn_gateway(home) else {
        return;
    };
    let mut input = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((Instant::now(), line));
        }
    });
    // gateway.ready, then the catalog (held until the scan is done) and a new session, as
    // the TUI sends them at start, and pings behind them.
    let _ = rx.recv_timeout(Duration::from_secs(10));
    let t0 = Instant::now();
    writeln!(
        input,
        r#"{{"jsonrpc":"2.0","id":"cat","method":"commands.catalog","params":{{}}}}"#
    )
    .unwrap();
    writeln!(
        input,
        r#"{{"jsonrpc":"2.0","id":"new","method":"session.create","params":{{}}}}"#
    )
    .unwrap();
    let mut sent = Vec::new();
    for i in 0..200 {
        sent.push(Instant::now());
        writeln!(
            input,
            r#"{{"jsonrpc":"2.0","id":{i},"method":"ping","params":{{}}}}"#
        )
        .unwrap();
        std::thread::sleep(Duration::from_micros(500));
    }
    let (mut worst, mut answered, mut catalog_at, mut session_at) = (Duration::ZERO, 0, None, None);
    while answered < 200 || catalog_at.is_none() || session_at.is_none() {
        let Ok((at, line)) = rx.recv_timeout(Duration::from_secs(10)) else {
            break;
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["id"] == "cat" {
            catalog_at = Some(at.duration_since(t0));
        } else if v["id"] == "new" {
            session_at = Some(at.duration_since(t0));
        } else if let Some(i) = v["id"].as_u64() {
            worst = worst.max(at.duration_since(sent[i as usize]));
            answered += 1;
        }
    }
    println!(
        "spawned gateway, {what}: worst ping {:.2} ms over {answered} pings; commands.catalog answered after {:.1} ms, session.create sent after it {:.1} ms",
        worst.as_secs_f64() * 1e3,
        catalog_at.unwrap_or_default().as_secs_f64() * 1e3,
        session_at.unwrap_or_default().as_secs_f64() * 1e3
    );
    drop(input);
    let _ = child.wait();
}

/// A first start again (the kept scan removed): a session opened at once, then a prompt on it
/// as soon as it is open, which waits for the whole index (the model's first call sees every
/// skill). Each answer's time from the `session.create` sent.
fn spawned_prompt(home: &Path) {
    let _ = std::fs::remove_file(cache::path(home));
    let Some(mut child) = spawn_gateway(home) else {
        return;
    };
    let mut input = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let _ready = out.next();
    let t0 = Instant::now();
    writeln!(
        input,
        r#"{{"jsonrpc":"2.0","id":"new","method":"session.create","params":{{}}}}"#
    )
    .unwrap();
    let (mut opened, mut prompted) = (None, None);
    for line in out.map_while(Result::ok) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["id"] == "new" {
            opened = Some(t0.elapsed());
            let sid = v["result"]["session_id"].as_str().unwrap_or_default();
            writeln!(
                input,
                r#"{{"jsonrpc":"2.0","id":"prompt","method":"prompt.submit","params":{{"session_id":"{sid}","text":"hi"}}}}"#
            )
            .unwrap();
        } else if v["id"] == "prompt" {
            prompted = Some(t0.elapsed());
            break;
        }
    }
    println!(
        "spawned gateway, 1,000 skills, a first start: session.create answered after {:.1} ms, a prompt sent then after {:.1} ms",
        opened.unwrap_or_default().as_secs_f64() * 1e3,
        prompted.unwrap_or_default().as_secs_f64() * 1e3
    );
    drop(input);
    let _ = child.wait();
}

/// The tools both models are offered: ours as the gateway offers them by default.
const TOOLS: [&str; 14] = [
    "terminal",
    "process",
    "read_file",
    "write_file",
    "patch",
    "search_files",
    "todo",
    "memory",
    "session_search",
    "clarify",
    "vision_analyze",
    "skills_list",
    "skill_view",
    "skill_manage",
];

/// The index ours and Hermes' builder make for the skills in `skills` (`what` says which).
fn beside_hermes(skills_dir: &Path, what: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/hermes-venv/bin/python");
    if !python.exists() || !skills_dir.is_dir() {
        println!("beside Hermes, {what}: skipped (no target/hermes-venv: bash benches/skills.sh)");
        return;
    }
    let home = std::env::temp_dir().join(format!("tuigw-bench-hskills-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    // Each its own copy: Hermes writes a snapshot in its home.
    let hermes_home = home.join("hermes");
    for h in [&home, &hermes_home] {
        std::fs::create_dir_all(h).unwrap();
        let copied = Command::new("cp")
            .arg("-a")
            .arg(skills_dir)
            .arg(h.join("skills"))
            .status()
            .unwrap();
        assert!(copied.success());
    }
    // Ours, as a session builds it for a model offered TOOLS.
    let schemas: Vec<serde_json::Value> = TOOLS
        .iter()
        .map(|n| serde_json::json!({"type": "function", "function": {"name": n}}))
        .collect();
    let mut skills = tui_gateway::skills::Skills::new(&home);
    while skills.step(&Budget::unlimited(), Instant::now()).is_none() {}
    // Their toolsets as our tools declare them: the built-in ones' and the skill tools'.
    let mut toolsets =
        tui_gateway::tools::ToolSet::builtin().toolsets_for(tui_gateway::tools::Reach::Full);
    toolsets.insert("skills".to_string());
    let ours = tui_gateway::session::system_prompt::skills_index(&skills, &schemas, &toolsets);
    let out = Command::new(&python)
        .arg(root.join("benches/hermes/skills_index.py"))
        .arg(TOOLS.join(","))
        .env_clear()
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        )
        .env("HOME", &home)
        .env("HERMES_HOME", &hermes_home)
        .current_dir(&home)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&home);
    if !out.status.success() {
        println!(
            "beside Hermes, {what}: its prompt builder failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let hermes = String::from_utf8_lossy(&out.stdout).into_owned();
    let listed = |s: &str| s.lines().filter(|l| l.starts_with("    - ")).count();
    println!(
        "index beside Hermes, {what} ({} SKILL.md): ours {} bytes ({} skills listed), Hermes' {} bytes ({} listed): {:+} bytes{}",
        skills.catalog().skills.len(),
        ours.len(),
        listed(&ours),
        hermes.len(),
        listed(&hermes),
        ours.len() as i64 - hermes.len() as i64,
        if ours == hermes {
            ", byte for byte the same"
        } else {
            ""
        }
    );
    let theirs: std::collections::BTreeSet<&str> = hermes.lines().collect();
    let mine: std::collections::BTreeSet<&str> = ours.lines().collect();
    for l in mine.difference(&theirs).take(10) {
        println!("  only ours:    {l}");
    }
    for l in theirs.difference(&mine).take(10) {
        println!("  only Hermes': {l}");
    }
}

/// Skills whose headers take the rules' corners: no description (Hermes' index then shows the
/// name alone), quotes, a long non-ASCII one, a number, nesting, a category description, a
/// name taken twice, a folder name differing from the header's.
#[allow(
    clippy::disallowed_methods,
    reason = "the bench writes its own fixtures"
)]
fn make_corners(dir: &Path) {
    let skills = [
        (
            "dev/plain/SKILL.md",
            "---\nname: plain\n---\n\n# Plain\n\nThe body's first line.\n",
        ),
        (
            "dev/none/SKILL.md",
            "# No header\n\nBody line that says what it does.\n",
        ),
        (
            "dev/quoted/SKILL.md",
            "---\nname: quoted\ndescription: \"'Quoted: with a colon'\"\n---\nb\n",
        ),
        (
            "dev/long/SKILL.md",
            "---\nname: long\ndescription: Ünïcödé déscription that goes on and on well past sixty characters — really\n---\nb\n",
        ),
        (
            "dev/num/SKILL.md",
            "---\nname: 42\ndescription: 7\n---\nb\n",
        ),
        (
            "dev/DESCRIPTION.md",
            "---\ndescription: 'Developer things'\n---\n",
        ),
        (
            "a/b/c/deep/SKILL.md",
            "---\nname: deep\ndescription: Deep one\n---\nb\n",
        ),
        (
            "top/SKILL.md",
            "---\nname: top\ndescription: At the top\n---\nb\n",
        ),
        (
            "x/alias-dir/SKILL.md",
            "---\nname: real-name\ndescription: Named apart from its folder\n---\nb\n",
        ),
        (
            "y/twice/SKILL.md",
            "---\nname: twice\ndescription: First of two\n---\nb\n",
        ),
        (
            "z/twice/SKILL.md",
            "---\nname: twice\ndescription: Second of two\n---\nb\n",
        ),
    ];
    for (rel, text) in skills {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

fn main() {
    // `-- --scan`: the in-process scan figures alone; `-- --spawned`: the spawned gateway's.
    let only = |a: &str| std::env::args().any(|x| x == a);
    let home = make_home();
    if only("--scan") {
        in_process(&home);
        let _ = std::fs::remove_dir_all(&home);
        return;
    }
    if only("--spawned") {
        spawned(&home, "1,000 skills, during the first scan");
        spawned_prompt(&home);
        let _ = std::fs::remove_dir_all(&home);
        return;
    }
    let corners = std::env::temp_dir().join(format!("tuigw-bench-corners-{}", std::process::id()));
    make_corners(&corners);
    beside_hermes(&corners, "corner cases");
    let _ = std::fs::remove_dir_all(&corners);
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hermes-reference/skills");
    beside_hermes(&bundled, "Hermes' bundled skills");
    beside_hermes(&home.join("skills"), "the 1,000 skills");
    in_process(&home);
    // The same pings without skills: what this machine's scheduling costs alone.
    let empty = home.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    spawned(&empty, "no skills");
    spawned(&home, "1,000 skills, during the first scan");
    spawned(&home, "1,000 skills, the last scan kept");
    let _ = std::fs::remove_dir_all(&home);
}
