//! Hermes' `write_file {path, content}`: the whole file replaced (parents created). The old
//! file is read, the new content written and the diff between them found a bounded unit at
//! a time (`text.rs`, as `patch` does), so overwriting a 16 MiB file holds no step past its
//! budget.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::text::{Differ, Encoder, Loader};
use super::{Advance, Stepped, here, resolve, shown, string_arg, write_ask, write_atomic};
use crate::tools::{JobId, Start, Tool, ToolContext, ToolResult};

#[derive(Default)]
pub struct WriteFile {
    going: Stepped<Writing>,
}

/// The unit of work under way.
enum Phase {
    /// Reading the old file.
    Load(Loader),
    /// The old file had CRLF line ends: its text encoded back for the diff.
    Encode(String, Encoder),
    /// The old text is known (empty for a new file): the new content is written next.
    Write(String),
    /// Written: the diff of the old text against the new.
    Diff(String, Differ),
}

/// One call's work, advanced step after step until it has its result.
struct Writing {
    cwd: String,
    file: PathBuf,
    content: String,
    phase: Option<Phase>,
    dirs_created: bool,
}

impl Writing {
    fn new(cwd: String, file: PathBuf, content: String) -> Result<Writing, ToolResult> {
        let phase = match Loader::open(&file) {
            Ok(Some(loader)) => Phase::Load(loader),
            Ok(None) => Phase::Write(String::new()),
            // A directory or a device is not replaced; a file too big to diff is, shown all new.
            Err(e) if e.contains("directory") || e.contains("not a regular") => {
                return Err(ToolResult::error(e));
            }
            Err(_) => Phase::Write(String::new()),
        };
        Ok(Writing {
            cwd,
            file,
            content,
            phase: Some(phase),
            dirs_created: false,
        })
    }

    /// One unit of work: the result once the call is over.
    fn unit(&mut self, out_of_time: &dyn Fn() -> bool) -> Option<ToolResult> {
        let Some(phase) = self.phase.take() else {
            return Some(ToolResult::error("write_file: the call's work was lost"));
        };
        let next = match phase {
            Phase::Load(mut loader) => match loader.advance(out_of_time) {
                None => Phase::Load(loader),
                Some(Ok(loaded)) if loaded.crlf => Phase::Encode(loaded.text.s, Encoder::new()),
                Some(Ok(loaded)) => Phase::Write(loaded.text.s),
                // Not text we diff (binary): still replaced, shown as all new.
                Some(Err(_)) => Phase::Write(String::new()),
            },
            Phase::Encode(lf, mut encoder) => match encoder.advance(&lf, out_of_time) {
                None => Phase::Encode(lf, encoder),
                Some(old) => Phase::Write(old),
            },
            Phase::Write(old) => match self.write() {
                Ok(()) => Phase::Diff(old, Differ::new(&shown(&self.cwd, &self.file))),
                Err(e) => return Some(ToolResult::error(e)),
            },
            Phase::Diff(old, mut differ) => {
                match differ.advance(&old, &self.content, out_of_time) {
                    None => Phase::Diff(old, differ),
                    Some(diff) => return Some(self.finish(diff)),
                }
            }
        };
        self.phase = Some(next);
        None
    }

    /// Replace the file (its parents created).
    fn write(&mut self) -> Result<(), String> {
        let parent = self.file.parent().unwrap_or(Path::new("/"));
        self.dirs_created = !parent.exists();
        if let Err(e) = std::fs::create_dir_all(parent) {
            return Err(format!("cannot create {}: {e}", parent.display()));
        }
        write_atomic(&self.file, self.content.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", self.file.display()))
    }

    fn finish(&self, diff: String) -> ToolResult {
        let name = shown(&self.cwd, &self.file);
        let n = self.content.len();
        let mut result = ToolResult::new(
            json!({"bytes_written": n, "dirs_created": self.dirs_created}),
            format!("wrote {n} bytes to {name}"),
        );
        if !diff.is_empty() {
            result
                .event_fields
                .insert("inline_diff".into(), json!(diff));
        }
        result
    }

    /// The whole call at once (tests).
    #[cfg(test)]
    fn run(
        cwd: &str,
        file: &Path,
        content: &str,
        out_of_time: &dyn Fn() -> bool,
    ) -> (ToolResult, usize) {
        let mut w = match Writing::new(cwd.into(), file.into(), content.into()) {
            Ok(w) => w,
            Err(r) => return (r, 0),
        };
        let mut units = 0;
        loop {
            units += 1;
            if let Some(r) = w.unit(out_of_time) {
                return (r, units);
            }
        }
    }
}

impl Advance for Writing {
    fn advance(&mut self, ctx: &ToolContext<'_>) -> Option<ToolResult> {
        let out_of_time = || ctx.out_of_time();
        loop {
            if let Some(result) = self.unit(&out_of_time) {
                return Some(result);
            }
            if out_of_time() {
                return None;
            }
        }
    }
}

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn toolset(&self) -> &str {
        "file"
    }

    fn description(&self) -> &str {
        "Write a whole file (not echo or heredocs in the terminal), creating it and its folders \
         or replacing everything it held; to change part of a file, use patch."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file."},
                "content": {"type": "string", "description": "All it will hold."}
            },
            "required": ["path", "content"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let path = match string_arg(args, "write_file", "path") {
            Ok(p) if !p.trim().is_empty() => p,
            Ok(_) => return Start::Done(ToolResult::error("write_file: 'path' is empty")),
            Err(e) => return Start::Done(e),
        };
        let content = match string_arg(args, "write_file", "content") {
            Ok(c) => c,
            Err(e) => return Start::Done(e),
        };
        let here = here(ctx);
        let file = resolve(&here, path);
        if !ctx.approved
            && let Some(ask) = write_ask(ctx, &file)
        {
            return Start::Ask(ask);
        }
        match Writing::new(here, file, content.to_string()) {
            Ok(work) => self.going.start(ctx, work),
            Err(result) => Start::Done(result),
        }
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        self.going.step(ctx, "write_file: the call's work was lost")
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        self.going.cancel(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tuigw-{tag}-{}", crate::util::random_hex(8)))
    }

    #[test]
    fn a_write_keeps_the_mode_and_diffs_what_changed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("wf");
        let file = dir.join("sub/run.sh");
        let cwd = dir.to_str().unwrap();
        let (r, _) = Writing::run(cwd, &file, "echo one\n", &|| false);
        assert_eq!(r.content, json!({"bytes_written": 9, "dirs_created": true}));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (r, _) = Writing::run(cwd, &file, "echo two\n", &|| false);
        assert_eq!(r.content["dirs_created"], false);
        let diff = r.event_fields["inline_diff"].as_str().unwrap();
        assert!(
            diff.contains("--- a/sub/run.sh") && diff.contains("-echo one\n+echo two"),
            "{diff}"
        );
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "echo two\n");
        let leftovers = std::fs::read_dir(dir.join("sub")).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file left");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_big_overwrite_goes_in_units_and_diffs_as_the_whole_file_diff_does() {
        let dir = temp_dir("wf-big");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("big.txt");
        let cwd = dir.to_str().unwrap();
        let old: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 100000\n", "changed 100000\n");
        for (crlf, tag) in [(false, "lf"), (true, "crlf")] {
            let (old, new) = match crlf {
                true => (old.replace('\n', "\r\n"), new.replace('\n', "\r\n")),
                false => (old.clone(), new.clone()),
            };
            std::fs::write(&file, &old).unwrap();
            let (stepped, units) = Writing::run(cwd, &file, &new, &|| true);
            assert!(units > 10, "{tag}: a 2 MB write in {units} units");
            assert_eq!(std::fs::read_to_string(&file).unwrap(), new, "{tag}");
            let diff = stepped.event_fields["inline_diff"].as_str().unwrap();
            let whole = super::super::unified_diff("big.txt", &old, &new);
            assert_eq!(diff, whole, "{tag}");
            std::fs::write(&file, &old).unwrap();
            let (at_once, units) = Writing::run(cwd, &file, &new, &|| false);
            assert!(units <= 4, "{tag}: {units}");
            assert_eq!(at_once.event_fields, stepped.event_fields, "{tag}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_is_refused_and_a_binary_file_replaced_as_all_new() {
        let dir = temp_dir("wf-odd");
        std::fs::create_dir_all(dir.join("d")).unwrap();
        let cwd = dir.to_str().unwrap();
        let (r, _) = Writing::run(cwd, &dir.join("d"), "x", &|| false);
        assert!(
            r.content.to_string().contains("is a directory"),
            "{:?}",
            r.content
        );
        let bin = dir.join("b.bin");
        std::fs::write(&bin, [0xff, 0xfe, 0, 1]).unwrap();
        let (r, _) = Writing::run(cwd, &bin, "text\n", &|| false);
        assert_eq!(r.content["bytes_written"], 5);
        assert_eq!(std::fs::read_to_string(&bin).unwrap(), "text\n");
        let diff = r.event_fields["inline_diff"].as_str().unwrap();
        assert!(diff.contains("+text"), "{diff}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
