//! Hermes' `search_files {pattern, target?, path?, file_glob?, limit?, offset?, output_mode?,
//! context?}`: a regex over file contents, or a glob over file names. The walk (`walk.rs`)
//! skips what ripgrep skips (`.gitignore`, `.ignore` and hidden files, through the `ignore`
//! crate's matchers; binary files are not searched) and goes on across steps, each within the
//! step budget — a directory's entries a bounded number at a time, a file's content a chunk at
//! a time — so a tree or a directory of any size never holds the loop. What is kept is
//! bounded by `offset + limit`; totals count everything.

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::{Map, Value, json};

use super::walk::{Walk, Walked};
use super::{Advance, Stepped, int_arg, resolve, shown};
use crate::tools::{JobId, Start, Tool, ToolContext, ToolResult};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 1000;
const MAX_CONTEXT: i64 = 20;
/// A matching line is cut to this many characters.
const LINE_MAX: usize = 500;
/// Files larger than this are not searched (logs and dumps are for `terminal`).
const FILE_MAX: u64 = 32 * 1024 * 1024;
/// Bytes looked at for a NUL to tell a binary file.
const SAMPLE: usize = 8 * 1024;
/// Bytes of a file searched in one unit of work: a few hundred microseconds at most.
const CHUNK: usize = 64 * 1024;
/// A longer line is matched on its first this many bytes (a line is matched whole, at once).
const LONG_LINE: usize = 1024 * 1024;

#[derive(Default)]
pub struct SearchFiles {
    searches: Stepped<Search>,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Content,
    FilesOnly,
    Count,
    Names,
}

struct Search {
    walk: Walk,
    cwd: String,
    regex: Option<Regex>,
    found: Found,
    /// The file being searched, chunk by chunk.
    scan: Option<Scan>,
    offset: usize,
    limit: usize,
    /// Files kept (names, files-only): with their mtime for the name search's order.
    files: Vec<(String, std::time::SystemTime)>,
    counts: Vec<(String, u64)>,
    warning: Option<String>,
}

/// What a content search has found so far.
struct Found {
    mode: Mode,
    context: usize,
    /// Lines kept at most (`offset + limit`): the page is cut from them.
    keep: usize,
    /// Content lines kept: `(path, line, text)`.
    matches: Vec<(String, u64, String)>,
    total: u64,
}

impl Found {
    fn full(&self) -> bool {
        self.mode != Mode::Content || self.matches.len() >= self.keep
    }
}

/// One file's content search, resumed chunk by chunk (`CHUNK` bytes a unit of work), its
/// lines matched one by one as `str::lines` cuts them.
struct Scan {
    file: std::fs::File,
    name: String,
    /// The number of the line `partial` belongs to.
    line: u64,
    /// The current line's bytes so far (at most `LONG_LINE`).
    partial: Vec<u8>,
    started: bool,
    /// Lines not kept just before the current one, for its before-context (at most `context`).
    before: VecDeque<(u64, String)>,
    /// The after-context of the last kept match goes on through this line.
    after_to: u64,
    /// Matches in this file.
    count: u64,
    buf: Vec<u8>,
}

impl Scan {
    fn open(path: &Path, name: String) -> Option<Scan> {
        // Non-blocking and regular files only: the walk saw a file, but a FIFO may stand there
        // by now.
        let file = crate::util::open_regular(path).ok()??;
        if file.metadata().ok()?.len() > FILE_MAX {
            return None;
        }
        Some(Scan {
            file,
            name,
            line: 1,
            partial: Vec::new(),
            started: false,
            before: VecDeque::new(),
            after_to: 0,
            count: 0,
            buf: Vec::with_capacity(CHUNK),
        })
    }

    /// Search the next chunk: whether the file is done.
    fn advance(&mut self, regex: &Regex, found: &mut Found) -> bool {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        // A read error ends the file with what it has shown so far.
        let at_end = match (&mut self.file).take(CHUNK as u64).read_to_end(&mut buf) {
            Ok(n) => n < CHUNK,
            Err(_) => true,
        };
        if !self.started {
            self.started = true;
            if buf[..buf.len().min(SAMPLE)].contains(&0) {
                return true;
            }
        }
        let mut rest = &buf[..];
        while let Some(nl) = memchr::memchr(b'\n', rest) {
            self.extend(&rest[..nl]);
            if self.end_line(regex, found, true) {
                return true;
            }
            rest = &rest[nl + 1..];
        }
        self.extend(rest);
        self.buf = buf;
        if at_end && !self.partial.is_empty() {
            self.end_line(regex, found, false);
        }
        at_end
    }

    fn extend(&mut self, bytes: &[u8]) {
        let room = LONG_LINE.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The current line is complete: match it and keep what the page needs. Whether the
    /// file is done (files-only needs one match).
    fn end_line(&mut self, regex: &Regex, found: &mut Found, newline: bool) -> bool {
        let mut bytes = &self.partial[..];
        if newline && bytes.last() == Some(&b'\r') {
            bytes = &bytes[..bytes.len() - 1];
        }
        let text = String::from_utf8_lossy(bytes);
        let line = self.line;
        self.line += 1;
        let kept = |text: &str| crate::util::clip(text, LINE_MAX);
        if regex.is_match(&text) {
            self.count += 1;
            found.total += 1;
            if found.mode == Mode::FilesOnly {
                return true;
            }
            if !found.full() {
                for (n, t) in self.before.drain(..) {
                    found.matches.push((self.name.clone(), n, t));
                }
                found.matches.push((self.name.clone(), line, kept(&text)));
                self.after_to = line + found.context as u64;
            }
        } else if found.full() {
        } else if line <= self.after_to {
            found.matches.push((self.name.clone(), line, kept(&text)));
        } else if found.context > 0 {
            if self.before.len() == found.context {
                self.before.pop_front();
            }
            self.before.push_back((line, kept(&text)));
        }
        self.partial.clear();
        false
    }
}

impl Search {
    fn keep(&self) -> usize {
        self.offset + self.limit
    }

    fn trim_files(&mut self) {
        self.files
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self.files.truncate(self.keep());
    }

    /// A file's search is over: note it where the mode lists files.
    fn searched(&mut self, scan: Scan) {
        if scan.count == 0 {
            return;
        }
        match self.found.mode {
            Mode::FilesOnly => self.files.push((scan.name, std::time::UNIX_EPOCH)),
            Mode::Count => self.counts.push((scan.name, scan.count)),
            _ => {}
        }
    }

    fn finish(&mut self) -> ToolResult {
        let (offset, limit) = (self.offset, self.limit);
        let page = |n: usize| offset.min(n)..(offset + limit).min(n);
        let mut total = self.found.total;
        let mut content = json!({"total_count": total});
        let found;
        match self.found.mode {
            Mode::Content => {
                let kept = &self.found.matches[page(self.found.matches.len())];
                content["matches"] = kept
                    .iter()
                    .map(|(p, l, c)| json!({"path": p, "line": l, "content": c}))
                    .collect();
                found = format!("{total} match(es)");
                if total as usize > offset + limit {
                    content["truncated"] = json!(true);
                }
            }
            Mode::Names | Mode::FilesOnly => {
                if self.found.mode == Mode::Names {
                    self.trim_files();
                } else {
                    total = self.files.len() as u64;
                    content["total_count"] = json!(total);
                }
                let kept = &self.files[page(self.files.len())];
                content["files"] = kept.iter().map(|(p, _)| json!(p)).collect();
                found = format!("{total} file(s)");
                if total as usize > offset + limit {
                    content["truncated"] = json!(true);
                }
            }
            Mode::Count => {
                let mut counts = Map::new();
                for (p, n) in &self.counts[page(self.counts.len())] {
                    counts.insert(p.clone(), json!(n));
                }
                content["counts"] = Value::Object(counts);
                found = format!("{total} match(es) in {} file(s)", self.counts.len());
            }
        }
        if let Some(w) = &self.warning {
            content["warning"] = json!(w);
        }
        ToolResult::new(content, found)
    }
}

impl Advance for Search {
    /// Walk on, a directory entry or a file's chunk at a time, until the deadline; the result
    /// once the walk is over.
    fn advance(&mut self, ctx: &ToolContext<'_>) -> Option<ToolResult> {
        loop {
            if let Some(scan) = &mut self.scan {
                let regex = self.regex.as_ref().expect("a content search has its regex");
                if scan.advance(regex, &mut self.found)
                    && let Some(scan) = self.scan.take()
                {
                    self.searched(scan);
                }
            } else {
                let path = match self.walk.unit() {
                    Walked::Done => return Some(self.finish()),
                    Walked::Nothing => {
                        if ctx.out_of_time() {
                            return None;
                        }
                        continue;
                    }
                    Walked::File(path) => path,
                };
                let name = shown(&self.cwd, &path);
                if self.found.mode == Mode::Names {
                    self.found.total += 1;
                    let mtime = std::fs::symlink_metadata(&path)
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .unwrap_or(std::time::UNIX_EPOCH);
                    self.files.push((name, mtime));
                    // Newest first: keep the newest `keep` only.
                    if self.files.len() > self.keep() * 2 + 64 {
                        self.trim_files();
                    }
                } else {
                    self.scan = Scan::open(&path, name);
                }
            }
            if ctx.out_of_time() {
                return None;
            }
        }
    }
}

impl Tool for SearchFiles {
    fn name(&self) -> &str {
        "search_files"
    }

    fn toolset(&self) -> &str {
        "file"
    }

    fn description(&self) -> &str {
        "Find text in files (target='content': a regex; matching lines with their numbers, file \
         names only, or counts) or files by name (target='files': a glob such as '*.py', newest \
         first). Skips what .gitignore ignores. Use it, not grep, rg, find or ls in the \
         terminal."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A regex (content) or a glob (files)."},
                "target": {"type": "string", "enum": ["content", "files"], "default": "content"},
                "path": {"type": "string", "default": ".", "description": "The directory or file to search."},
                "file_glob": {"type": "string", "description": "content: only files whose names match this glob."},
                "limit": {"type": "integer", "default": DEFAULT_LIMIT, "description": "The most results to return."},
                "offset": {"type": "integer", "default": 0, "description": "Results to skip, to page."},
                "output_mode": {"type": "string", "enum": ["content", "files_only", "count"], "default": "content", "description": "content: lines, file names or counts per file."},
                "context": {"type": "integer", "default": 0, "description": "content: lines shown before and after each match."}
            },
            "required": ["pattern"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let search = match plan(ctx, args) {
            Ok(s) => s,
            Err(e) => return Start::Done(ToolResult::error(e)),
        };
        self.searches.start(ctx, search)
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        self.searches.step(ctx, "search_files: the search was lost")
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        self.searches.cancel(job)
    }
}

fn opt_str<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!(
            "search_files: '{key}' must be a string, got {}",
            super::kind(other)
        )),
    }
}

fn plan(ctx: &ToolContext<'_>, args: &Value) -> Result<Search, String> {
    let pattern = opt_str(args, "pattern")?
        .filter(|p| !p.is_empty())
        .ok_or("search_files: missing required field 'pattern'")?;
    let target = match opt_str(args, "target")?.unwrap_or("content") {
        "content" | "grep" => "content",
        "files" | "find" => "files",
        other => {
            return Err(format!(
                "search_files: unknown target '{other}': use 'content' or 'files'"
            ));
        }
    };
    let mode = match (target, opt_str(args, "output_mode")?.unwrap_or("content")) {
        ("files", _) => Mode::Names,
        (_, "content") => Mode::Content,
        (_, "files_only") => Mode::FilesOnly,
        (_, "count") => Mode::Count,
        (_, other) => {
            return Err(format!(
                "search_files: unknown output_mode '{other}': use content, files_only or count"
            ));
        }
    };
    let here = super::here(ctx);
    let root: PathBuf = resolve(&here, opt_str(args, "path")?.unwrap_or("."));
    if !root.exists() {
        return Err(format!("Path not found: {}", root.display()));
    }
    let limit = int_arg(args, "limit")
        .unwrap_or(DEFAULT_LIMIT)
        .clamp(1, MAX_LIMIT) as usize;
    let offset = int_arg(args, "offset").unwrap_or(0).max(0) as usize;
    let context = int_arg(args, "context").unwrap_or(0).clamp(0, MAX_CONTEXT) as usize;
    let glob = match mode {
        Mode::Names if !pattern.contains('/') && !pattern.starts_with('*') => {
            Some(format!("*{pattern}"))
        }
        Mode::Names => Some(pattern.to_string()),
        _ => opt_str(args, "file_glob")?.map(str::to_string),
    };
    let mut overrides = ignore::overrides::OverrideBuilder::new(&root);
    if let Some(glob) = &glob {
        overrides
            .add(glob)
            .map_err(|e| format!("search_files: bad glob '{glob}': {e}"))?;
    }
    let overrides = overrides
        .build()
        .map_err(|e| format!("search_files: bad glob: {e}"))?;
    let regex = match mode {
        Mode::Names => None,
        _ => Some(
            regex::RegexBuilder::new(pattern)
                .size_limit(8 << 20)
                .build()
                .map_err(|e| format!("search_files: bad regex: {e}"))?,
        ),
    };
    let warning = (mode != Mode::Names && pattern.contains("\\n")).then(|| {
        "The pattern contains \\n but content search is line by line: it matches within one line only."
            .to_string()
    });
    Ok(Search {
        walk: Walk::new(&root, overrides),
        cwd: here,
        regex,
        found: Found {
            mode,
            context,
            keep: offset + limit,
            matches: Vec::new(),
            total: 0,
        },
        scan: None,
        offset,
        limit,
        files: Vec::new(),
        counts: Vec::new(),
        warning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::alone;
    use std::time::Duration;

    #[test]
    fn a_tree_is_walked_a_file_per_step_skipping_ignored_and_binary_files() {
        let dir = std::env::temp_dir().join(format!("tuigw-sf-{}", crate::util::random_hex(8)));
        for d in 0..20 {
            let sub = dir.join(format!("d{d:02}"));
            std::fs::create_dir_all(&sub).unwrap();
            for f in 0..100 {
                let body = if f == 7 { "needle here\n" } else { "hay\n" };
                std::fs::write(sub.join(format!("f{f:03}.txt")), body).unwrap();
            }
        }
        std::fs::write(dir.join(".gitignore"), "d05/\n*.log\n").unwrap();
        std::fs::write(dir.join("x.log"), "needle\n").unwrap();
        std::fs::write(dir.join("blob.bin"), b"needle\0\x01").unwrap();
        std::fs::create_dir_all(dir.join(".hidden")).unwrap();
        std::fs::write(dir.join(".hidden/h.txt"), "needle\n").unwrap();
        let cwd = dir.to_str().unwrap();
        let run =
            |args: Value, budget| alone::run(&mut SearchFiles::default(), cwd, &dir, &args, budget);
        let stepped = run(json!({"pattern": "needle", "limit": 5}), Duration::ZERO);
        let c = &stepped.result.content;
        assert_eq!(c["total_count"], 19, "{c}");
        assert_eq!(c["truncated"], true);
        assert_eq!(
            c["matches"][0],
            json!({"path": "d00/f007.txt", "line": 1, "content": "needle here"})
        );
        assert!(stepped.steps >= 1900, "one file a step: {}", stepped.steps);
        let whole = run(
            json!({"pattern": "needle", "limit": 5}),
            Duration::from_secs(5),
        );
        assert_eq!(whole.result.content, stepped.result.content);
        let page = run(
            json!({"pattern": "needle", "output_mode": "files_only", "offset": 17}),
            Duration::from_secs(5),
        );
        assert_eq!(
            page.result.content["files"],
            json!(["d18/f007.txt", "d19/f007.txt"])
        );
        let named = run(
            json!({"pattern": "f007.txt", "target": "files", "limit": 100}),
            Duration::from_secs(5),
        );
        assert_eq!(named.result.content["total_count"], 19);
        let globbed = run(
            json!({"pattern": "hay", "file_glob": "d01/*", "output_mode": "count", "limit": 200}),
            Duration::from_secs(5),
        );
        assert_eq!(
            globbed.result.content["counts"].as_object().unwrap().len(),
            99
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;
    use crate::tools::alone;
    use std::time::Duration;

    /// The lines a whole-file search keeps (the page's source), as it was before files were
    /// searched in chunks: `(line, text)`.
    fn whole_file(
        text: &str,
        regex: &Regex,
        context: usize,
        keep: usize,
    ) -> (u64, Vec<(u64, String)>) {
        let lines: Vec<&str> = text.lines().collect();
        let (mut total, mut kept, mut last) = (0, Vec::new(), None::<usize>);
        for (i, line) in lines.iter().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            total += 1;
            if kept.len() >= keep {
                continue;
            }
            let from = last.map_or(i.saturating_sub(context), |k| {
                i.saturating_sub(context).max(k + 1)
            });
            let to = (i + context).min(lines.len() - 1);
            for (j, l) in lines.iter().enumerate().take(to + 1).skip(from) {
                kept.push((j as u64 + 1, crate::util::clip(l, LINE_MAX)));
            }
            last = Some(to);
        }
        (total, kept)
    }

    #[test]
    fn a_big_file_is_searched_a_chunk_per_step_with_the_whole_files_results() {
        let dir = std::env::temp_dir().join(format!("tuigw-sc-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        // ~1.6 MiB: matches near chunk edges, runs of matches in each other's context, CRLF
        // lines, invalid UTF-8 and a last line without its newline.
        let mut text = String::new();
        for i in 0..60_000u32 {
            match i % 997 {
                0 | 1 | 5 => text.push_str(&format!("needle {i} here\r\n")),
                3 => text.push_str(&format!("x{} needle\n", "y".repeat(600))),
                _ => text.push_str(&format!("hay {i:06} hay\n")),
            }
        }
        text.push_str("needle at the end");
        let mut bytes = text.clone().into_bytes();
        bytes.splice(100..100, [0xff, 0xfe]);
        std::fs::write(dir.join("big.txt"), &bytes).unwrap();
        let lossy = String::from_utf8_lossy(&bytes).into_owned();
        let regex = Regex::new("needle").unwrap();
        let cwd = dir.to_str().unwrap();
        for (context, offset, limit) in [(0, 0, 1000), (2, 0, 1000), (3, 120, 40), (20, 0, 5)] {
            let args =
                json!({"pattern": "needle", "context": context, "offset": offset, "limit": limit});
            let stepped = alone::run(
                &mut SearchFiles::default(),
                cwd,
                &dir,
                &args,
                Duration::ZERO,
            );
            assert!(
                stepped.steps > bytes.len() / CHUNK,
                "a chunk a step: {}",
                stepped.steps
            );
            let (total, kept) = whole_file(&lossy, &regex, context, offset + limit);
            let c = &stepped.result.content;
            assert_eq!(c["total_count"], total, "{context}");
            let page: Vec<Value> = kept
                .iter()
                .skip(offset)
                .take(limit)
                .map(|(l, t)| json!({"path": "big.txt", "line": l, "content": t}))
                .collect();
            assert_eq!(c["matches"], json!(page), "context {context}");
            let whole = alone::run(
                &mut SearchFiles::default(),
                cwd,
                &dir,
                &args,
                Duration::from_secs(5),
            );
            assert_eq!(whole.result.content, stepped.result.content);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
