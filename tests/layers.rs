//! The layering the architecture promises, checked on the source: what a reviewer would
//! otherwise have to find by reading every file.

use std::path::{Path, PathBuf};

/// Programs and parts that are their own loop (the CLI's clients, the client library, the
/// supervisor process, the worker thread's blocking exchange whose socket timeouts are real
/// time) or the clock itself: they may read the time.
const OWN_CLOCK: &[&str] = &[
    "src/clock.rs",
    "src/cli/",
    "src/client/",
    "src/runner/supervisor.rs",
    "src/model/blocking.rs",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of a file outside its `#[cfg(test)]` items, numbered from 1.
fn non_test(text: &str) -> Vec<(usize, &str)> {
    let mut kept = Vec::new();
    // Some(depth): inside a test item, `depth` braces open (0: its first brace not yet seen).
    let mut test_item: Option<(i64, bool)> = None;
    for (n, line) in text.lines().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            test_item = Some((0, false));
            continue;
        }
        let Some((depth, opened)) = test_item.as_mut() else {
            kept.push((n + 1, line));
            continue;
        };
        for c in line.chars() {
            match c {
                '{' => (*depth, *opened) = (*depth + 1, true),
                '}' => *depth -= 1,
                _ => {}
            }
        }
        if *opened && *depth <= 0 || !*opened && line.trim_end().ends_with(';') {
            test_item = None;
        }
    }
    kept
}

/// The non-test lines of the gateway's source outside `exempt` that contain one of `words`,
/// as `file:line: text`.
fn lines_naming(words: &[&str], exempt: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 100, "the source was not found");
    let mut found = Vec::new();
    for file in &files {
        let name = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if exempt.iter().any(|own| name.starts_with(own)) || name.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in non_test(&text) {
            if words.iter().any(|w| line.contains(w)) {
                found.push(format!("{name}:{n}: {}", line.trim()));
            }
        }
    }
    found
}

#[test]
fn nothing_below_the_loop_reads_a_clock_of_its_own() {
    let readers = lines_naming(&["Instant::now()", ".elapsed()"], OWN_CLOCK);
    assert!(
        readers.is_empty(),
        "time must come from the loop (`now`, or a Budget on its clock):\n{}",
        readers.join("\n")
    );
}

#[test]
fn only_the_reactor_knows_the_poll_and_its_tokens() {
    // The loop names its fixed tokens; the programs outside the gateway have their own polls.
    let exempt = [
        "src/reactor.rs",
        "src/event_loop.rs",
        "src/cli/",
        "src/client/",
    ];
    let words = [
        "Poll",
        "Registry",
        "Token(",
        "mio::Token",
        "by_token",
        ".poll.",
    ];
    let found: Vec<String> = lines_naming(&words, &exempt)
        .into_iter()
        // poll(2) on one descriptor (stderr, stdout at exit) is not the loop's poll.
        .filter(|l| !l.contains("PollFd") && !l.contains("PollTimeout") && !l.contains("PollFlags"))
        .collect();
    assert!(
        found.is_empty(),
        "a source is watched through a reactor Slot, never the poll or a token:\n{}",
        found.join("\n")
    );
}
