//! Oversized tool results, as Hermes keeps them out of the context: a result past its tool's
//! threshold is written whole to `$HERMES_HOME/cache/spillover/<call id>.txt` and the tool message
//! (the transcript, `state.db`, the model's next request, `tool.complete`) carries a preview
//! and that path instead, so the model reads the rest with `read_file` and the gateway holds
//! no copy of it. When the file cannot be written the preview is kept inline and says why.

use crate::util::grouped;
use std::path::{Path, PathBuf};

/// Results longer than this many characters are spilled (Hermes' default threshold).
pub const RESULT_CHARS_MAX: usize = 100_000;
/// The results of one model answer's calls together stay within this many characters: a result
/// that would take them past it is spilled whatever its size (Hermes' turn budget).
pub const ANSWER_CHARS_MAX: usize = 200_000;
/// How much of a spilled result the message keeps (Hermes' preview size).
const PREVIEW_CHARS: usize = 1_500;
const OPEN_TAG: &str = "<persisted-output>";
const CLOSE_TAG: &str = "</persisted-output>";
/// A call id is at most this long in a file name.
const NAME_CHARS_MAX: usize = 100;

/// The tool message's content for `text`, the result of `call_id` to tool `tool`, given the
/// results `earlier` recorded for the same model answer: `text` itself when it fits, else the
/// preview block ([`Fitted::Cut`], saying why, when the file could not be written). Files go to
/// `home/cache/spillover/<call id>.txt`; the first spill of the process removes those older
/// than a day, as Hermes does.
pub fn fit<'a>(
    home: &Path,
    tool: &str,
    call_id: &str,
    text: String,
    earlier: impl Iterator<Item = &'a str> + Clone,
) -> Fitted {
    // `read_file` is exempt from the threshold (reading a spilled result back would spill it
    // again), not from the budget.
    let threshold = if tool == "read_file" {
        usize::MAX
    } else {
        RESULT_CHARS_MAX
    };
    let fits =
        |n: usize, before: usize| n <= threshold && before.saturating_add(n) <= ANSWER_CHARS_MAX;
    // Bytes bound characters from above: most results are settled without counting.
    if fits(text.len(), earlier.clone().map(str::len).sum()) {
        return Fitted::Whole(text);
    }
    let chars = text.chars().count();
    if fits(chars, earlier.map(|t| t.chars().count()).sum()) {
        return Fitted::Whole(text);
    }
    let (preview, more) = preview(&text);
    match write(home, call_id, &text) {
        Ok(path) => Fitted::Spilled(spilled_message(preview, more, chars, &path)),
        Err(e) => Fitted::Cut(format!(
            "{preview}\n\n[Truncated: tool response was {} chars. Full output could not be saved ({e}).]",
            grouped(chars)
        )),
    }
}

/// `text` in the spill folder under `home`, private to this user; its path.
fn write(home: &Path, call_id: &str, text: &str) -> std::io::Result<PathBuf> {
    if !home.is_absolute() {
        return Err(std::io::Error::other(
            "the Hermes home is not an absolute path",
        ));
    }
    let dir = crate::private_file::private_dir(home, &FOLDER)?;
    if !PRUNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        prune(&dir, std::time::SystemTime::now());
    }
    let path = dir.join(file_name(call_id));
    crate::private_file::overwrite(&path, text.as_bytes())?;
    Ok(path)
}

/// The spill folder was pruned by this process.
static PRUNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Remove the spilled results in `dir` last written more than [`KEPT_FOR`] before `now` (at
/// most [`PRUNE_MAX`] entries looked at: the rest wait for the next process).
fn prune(dir: &Path, now: std::time::SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.take(PRUNE_MAX).flatten() {
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age > KEPT_FOR);
        if meta.is_file() && old && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// What [`fit`] made of a result.
#[derive(Debug, PartialEq)]
pub enum Fitted {
    Whole(String),
    Spilled(String),
    Cut(String),
}

impl Fitted {
    pub fn into_text(self) -> String {
        match self {
            Fitted::Whole(t) | Fitted::Spilled(t) | Fitted::Cut(t) => t,
        }
    }
}

/// Where spilled results go under the Hermes home, as Hermes' local backend keeps them.
const FOLDER: [&str; 2] = ["cache", "spillover"];
/// Spilled results older than this are removed (Hermes' 24 hours).
const KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// Entries one prune looks at, so a folder of millions cannot hold the loop.
const PRUNE_MAX: usize = 10_000;

/// The first [`PREVIEW_CHARS`] characters, cut back to a line end when one is past half way.
fn preview(text: &str) -> (&str, bool) {
    let Some((end, _)) = text.char_indices().nth(PREVIEW_CHARS) else {
        return (text, false);
    };
    let head = &text[..end];
    match head.rfind('\n') {
        Some(nl) if head[..nl].chars().count() > PREVIEW_CHARS / 2 => (&head[..=nl], true),
        _ => (head, true),
    }
}

fn spilled_message(preview: &str, more: bool, chars: usize, path: &Path) -> String {
    let kib = chars as f64 / 1024.0;
    let size = if kib >= 1024.0 {
        format!("{:.1} MB", kib / 1024.0)
    } else {
        format!("{kib:.1} KB")
    };
    format!(
        "{OPEN_TAG}\nThis tool result was too large ({} characters, {size}).\n\
         Full output saved to: {}\n\
         Use the read_file tool with offset and limit to access specific sections of this output.\n\n\
         Preview (first {} chars):\n{preview}{}\n{CLOSE_TAG}",
        grouped(chars),
        path.display(),
        preview.chars().count(),
        if more { "\n..." } else { "" },
    )
}

/// A call id as a file name: letters, digits, `-` and `_` kept, anything else `_`.
fn file_name(call_id: &str) -> String {
    let mut name: String = call_id
        .chars()
        .take(NAME_CHARS_MAX)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        name.push_str("result");
    }
    name + ".txt"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> crate::util::ScratchDir {
        crate::util::ScratchDir::new("spill")
    }

    #[test]
    fn a_result_within_the_threshold_is_kept_whole() {
        let t = temp();
        let text = "x".repeat(RESULT_CHARS_MAX);
        assert_eq!(
            fit(t.path(), "terminal", "c1", text.clone(), std::iter::empty()),
            Fitted::Whole(text)
        );
        // Characters count, not bytes: 100,000 two-byte characters fit.
        let wide = "é".repeat(RESULT_CHARS_MAX);
        assert_eq!(
            fit(t.path(), "terminal", "c1", wide.clone(), std::iter::empty()),
            Fitted::Whole(wide)
        );
        assert!(std::fs::read_dir(t.path()).unwrap().next().is_none());
    }

    #[test]
    fn an_oversized_result_goes_whole_to_a_private_file_and_the_message_keeps_a_preview() {
        let t = temp();
        let dir = t.path().join("cache/spillover");
        let text = format!("{}\n{}", "a".repeat(1_000), "b".repeat(200_000));
        let Fitted::Spilled(msg) = fit(
            t.path(),
            "mcp__x__y",
            "call/../1",
            text.clone(),
            std::iter::empty(),
        ) else {
            panic!("not spilled");
        };
        let path = dir.join("call____1.txt");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(msg.starts_with("<persisted-output>\n"), "{msg}");
        assert!(msg.ends_with("\n...\n</persisted-output>"), "{msg}");
        assert!(msg.contains("(201,001 characters, 196.3 KB)"), "{msg}");
        assert!(msg.contains(&format!("Full output saved to: {}", path.display())));
        // The preview ends at the line end past half of its 1,500 characters.
        assert!(msg.contains(&format!(
            "Preview (first 1001 chars):\n{}\n",
            "a".repeat(1_000)
        )));
        assert!(!msg.contains("\nbbb"), "the preview stops at the line end");
    }

    #[test]
    fn read_file_is_never_spilled() {
        let t = temp();
        let text = "r".repeat(RESULT_CHARS_MAX * 2);
        assert_eq!(
            fit(t.path(), "read_file", "c", text.clone(), std::iter::empty()),
            Fitted::Whole(text)
        );
    }

    #[test]
    fn a_folder_that_cannot_hold_it_keeps_the_preview_inline_and_says_why() {
        let t = temp();
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, t.path().join(FOLDER[0])).unwrap();
        let text = "z".repeat(RESULT_CHARS_MAX + 1);
        let Fitted::Cut(msg) = fit(t.path(), "terminal", "c", text, std::iter::empty()) else {
            panic!("spilled through a link");
        };
        assert!(msg.starts_with(&"z".repeat(PREVIEW_CHARS)), "{msg}");
        assert!(
            msg.contains("tool response was 100,001 chars") && msg.contains("symbolic link"),
            "{msg}"
        );
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
        let Fitted::Cut(msg) = fit(
            Path::new("rel"),
            "t",
            "c",
            "q".repeat(RESULT_CHARS_MAX + 1),
            std::iter::empty(),
        ) else {
            panic!("spilled to a relative folder");
        };
        assert!(msg.contains("not an absolute path"), "{msg}");
    }

    #[test]
    fn results_past_the_answers_budget_are_spilled_whatever_their_size() {
        let t = temp();
        let small = "s".repeat(1_000);
        // Two earlier results of 99,500 characters (twice the bytes: counted as characters).
        let earlier = "é".repeat(99_500);
        let earlier = || [earlier.as_str(), earlier.as_str()].into_iter();
        assert_eq!(
            fit(t.path(), "terminal", "a", small.clone(), earlier()),
            Fitted::Whole(small.clone())
        );
        let Fitted::Spilled(msg) = fit(t.path(), "read_file", "b", small + "s", earlier()) else {
            panic!("not spilled past the budget");
        };
        assert!(msg.contains("(1,001 characters, 1.0 KB)"), "{msg}");
    }

    #[test]
    fn a_prune_removes_only_results_older_than_a_day() {
        let t = temp();
        for name in ["old.txt", "new.txt"] {
            std::fs::write(t.path().join(name), "x").unwrap();
        }
        let written = std::fs::metadata(t.path().join("old.txt"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(prune(t.path(), written + KEPT_FOR), 0, "a day old is kept");
        assert_eq!(prune(t.path(), written + KEPT_FOR * 2), 2);
        assert!(std::fs::read_dir(t.path()).unwrap().next().is_none());
    }
}
