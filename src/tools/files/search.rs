//! Hermes' `search_files {pattern, target?, path?, file_glob?, limit?, offset?, output_mode?,
//! context?}`: a regex over file contents, or a glob over file names. The walk is
//! ripgrep's (`ignore`: `.gitignore`, `.ignore` and hidden files skipped; binary files are
//! not searched) and goes on across steps, each within the step budget, so a tree of any size
//! never holds the loop. What is kept is bounded by `offset + limit`; totals count everything.

use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::{Map, Value, json};

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
    walk: ignore::Walk,
    cwd: String,
    regex: Option<Regex>,
    mode: Mode,
    context: usize,
    offset: usize,
    limit: usize,
    /// Content lines kept: `(path, line, text)`.
    matches: Vec<(String, u64, String)>,
    /// Files kept (names, files-only): with their mtime for the name search's order.
    files: Vec<(String, std::time::SystemTime)>,
    counts: Vec<(String, u64)>,
    total: u64,
    warning: Option<String>,
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

    fn search_file(&mut self, path: &Path) {
        let Some(regex) = &self.regex else { return };
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.len() > FILE_MAX {
            return;
        }
        let Ok(bytes) = std::fs::read(path) else {
            return;
        };
        if bytes[..bytes.len().min(SAMPLE)].contains(&0) {
            return;
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let name = shown(&self.cwd, path);
        let mut count = 0;
        let mut last_kept: Option<usize> = None;
        for (i, line) in lines.iter().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            count += 1;
            self.total += 1;
            if self.mode != Mode::Content || self.matches.len() >= self.keep() {
                continue;
            }
            let from = i.saturating_sub(self.context);
            let from = last_kept.map_or(from, |k| from.max(k + 1));
            let to = (i + self.context).min(lines.len() - 1);
            for (j, l) in lines.iter().enumerate().take(to + 1).skip(from) {
                self.matches
                    .push((name.clone(), j as u64 + 1, crate::util::clip(l, LINE_MAX)));
            }
            last_kept = Some(to);
        }
        if count == 0 {
            return;
        }
        match self.mode {
            Mode::FilesOnly => self.files.push((name, std::time::UNIX_EPOCH)),
            Mode::Count => self.counts.push((name, count)),
            _ => {}
        }
    }

    fn finish(&mut self) -> ToolResult {
        let (offset, limit) = (self.offset, self.limit);
        let page = |n: usize| offset.min(n)..(offset + limit).min(n);
        let mut content = json!({"total_count": self.total});
        let found;
        match self.mode {
            Mode::Content => {
                let kept = &self.matches[page(self.matches.len())];
                content["matches"] = kept
                    .iter()
                    .map(|(p, l, c)| json!({"path": p, "line": l, "content": c}))
                    .collect();
                found = format!("{} match(es)", self.total);
                if self.total as usize > offset + limit {
                    content["truncated"] = json!(true);
                }
            }
            Mode::Names | Mode::FilesOnly => {
                if self.mode == Mode::Names {
                    self.trim_files();
                } else {
                    self.total = self.files.len() as u64;
                    content["total_count"] = json!(self.total);
                }
                let kept = &self.files[page(self.files.len())];
                content["files"] = kept.iter().map(|(p, _)| json!(p)).collect();
                found = format!("{} file(s)", self.total);
                if self.total as usize > offset + limit {
                    content["truncated"] = json!(true);
                }
            }
            Mode::Count => {
                let mut counts = Map::new();
                for (p, n) in &self.counts[page(self.counts.len())] {
                    counts.insert(p.clone(), json!(n));
                }
                content["counts"] = Value::Object(counts);
                found = format!("{} match(es) in {} file(s)", self.total, self.counts.len());
            }
        }
        if let Some(w) = &self.warning {
            content["warning"] = json!(w);
        }
        ToolResult::new(content, found)
    }
}

impl Advance for Search {
    /// Walk on until the deadline; the result once the walk is over.
    fn advance(&mut self, ctx: &ToolContext<'_>) -> Option<ToolResult> {
        while let Some(entry) = self.walk.next() {
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path().to_path_buf();
            match self.mode {
                Mode::Names => {
                    self.total += 1;
                    let mtime = entry
                        .metadata()
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .unwrap_or(std::time::UNIX_EPOCH);
                    self.files.push((shown(&self.cwd, &path), mtime));
                    // Newest first: keep the newest `keep` only.
                    if self.files.len() > self.keep() * 2 + 64 {
                        self.trim_files();
                    }
                }
                _ => self.search_file(&path),
            }
            if ctx.out_of_time() {
                return None;
            }
        }
        Some(self.finish())
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
        "Search file contents or find files by name. Use this instead of grep/rg/find/ls in \
         terminal. Respects .gitignore.\n\nContent search (target='content'): Regex search \
         inside files. Output modes: full matches with line numbers, file paths only, or match \
         counts.\n\nFile search (target='files'): Find files by glob pattern (e.g., '*.py', \
         '*config*'). Also use this instead of ls — results sorted by modification time."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regex pattern for content search, or glob pattern (e.g., '*.py') for file search"},
                "target": {"type": "string", "enum": ["content", "files"], "default": "content", "description": "'content' searches inside file contents, 'files' searches for files by name"},
                "path": {"type": "string", "default": ".", "description": "Directory or file to search in (default: current working directory)"},
                "file_glob": {"type": "string", "description": "Filter files by pattern in grep mode (e.g., '*.py' to only search Python files)"},
                "limit": {"type": "integer", "default": DEFAULT_LIMIT, "description": "Maximum number of results to return (default: 50)"},
                "offset": {"type": "integer", "default": 0, "description": "Skip first N results for pagination (default: 0)"},
                "output_mode": {"type": "string", "enum": ["content", "files_only", "count"], "default": "content", "description": "Output format for grep mode: 'content' shows matching lines with line numbers, 'files_only' lists file paths, 'count' shows match counts per file"},
                "context": {"type": "integer", "default": 0, "description": "Number of context lines before and after each match (grep mode only)"}
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
    let root: PathBuf = resolve(&ctx.cwd, opt_str(args, "path")?.unwrap_or("."));
    if !root.exists() {
        return Err(format!("Path not found: {}", root.display()));
    }
    let limit = int_arg(args, "limit")
        .unwrap_or(DEFAULT_LIMIT)
        .clamp(1, MAX_LIMIT) as usize;
    let offset = int_arg(args, "offset").unwrap_or(0).max(0) as usize;
    let context = int_arg(args, "context").unwrap_or(0).clamp(0, MAX_CONTEXT) as usize;
    let mut walk = ignore::WalkBuilder::new(&root);
    walk.require_git(false).sort_by_file_path(|a, b| a.cmp(b));
    let glob = match mode {
        Mode::Names if !pattern.contains('/') && !pattern.starts_with('*') => {
            Some(format!("*{pattern}"))
        }
        Mode::Names => Some(pattern.to_string()),
        _ => opt_str(args, "file_glob")?.map(str::to_string),
    };
    if let Some(glob) = glob {
        let mut o = ignore::overrides::OverrideBuilder::new(&root);
        o.add(&glob)
            .map_err(|e| format!("search_files: bad glob '{glob}': {e}"))?;
        walk.overrides(
            o.build()
                .map_err(|e| format!("search_files: bad glob '{glob}': {e}"))?,
        );
    }
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
        walk: walk.build(),
        cwd: ctx.cwd.clone(),
        regex,
        mode,
        context,
        offset,
        limit,
        matches: Vec::new(),
        files: Vec::new(),
        counts: Vec::new(),
        total: 0,
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
