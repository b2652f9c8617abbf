//! Hermes' `read_file {path, offset?, limit?}`: a page of `N|line` lines with the file's
//! totals. The file is read in chunks across steps ([`ToolContext::again`]), so a huge file
//! never holds the loop for longer than the step budget.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Advance, Stepped, int_arg, resolve, shown, string_arg};
use crate::tools::{JobId, Start, Tool, ToolContext, ToolResult};

const DEFAULT_LIMIT: i64 = 500;
const MAX_LIMIT: i64 = 2000;
/// Longer lines are cut (Hermes' `max_line_length`).
const MAX_LINE: usize = 2000;
/// A page holds at most this many characters; the rest is read with `next_offset`.
const MAX_CHARS: usize = 100_000;
const CHUNK: usize = 256 * 1024;
/// Bytes looked at to tell binary from text.
const SAMPLE: usize = 8 * 1024;

/// Extensions Hermes never reads as text.
const BINARY_EXTENSIONS: [&str; 28] = [
    "png", "jpg", "jpeg", "gif", "bmp", "ico", "webp", "tiff", "zip", "gz", "tgz", "bz2", "xz",
    "7z", "rar", "tar", "exe", "dll", "so", "dylib", "o", "a", "class", "pyc", "pdf", "mp3", "mp4",
    "wasm",
];
const IMAGE_EXTENSIONS: [&str; 8] = ["png", "jpg", "jpeg", "gif", "bmp", "ico", "webp", "tiff"];

#[derive(Default)]
pub struct ReadFile {
    reading: Stepped<Reading>,
}

/// A page being read.
struct Reading {
    file: File,
    shown: String,
    size: u64,
    offset: u64,
    limit: u64,
    /// The number of the line `partial` belongs to.
    line: u64,
    /// The bytes of the current line so far, when it is on the page (bounded).
    partial: Vec<u8>,
    page: String,
    /// Lines on the page so far.
    kept: u64,
    /// The page hit its character budget: the first line not on it.
    cut_at: Option<u64>,
    buf: Vec<u8>,
    bom_checked: bool,
}

impl Reading {
    fn on_page(&self, line: u64) -> bool {
        self.cut_at.is_none() && line >= self.offset && line < self.offset + self.limit
    }

    /// The current line is complete: number it onto the page.
    fn end_line(&mut self) {
        if self.on_page(self.line) {
            let mut text = String::from_utf8_lossy(&self.partial).into_owned();
            if text.ends_with('\r') {
                text.pop();
            }
            if text.chars().count() > MAX_LINE {
                text = text.chars().take(MAX_LINE).collect::<String>() + "... [truncated]";
            }
            let numbered = format!("{}|{}", self.line, text);
            if self.kept > 0 && self.page.len() + numbered.len() + 1 > MAX_CHARS {
                self.cut_at = Some(self.line);
            } else {
                if self.kept > 0 {
                    self.page.push('\n');
                }
                self.page.push_str(&numbered);
                self.kept += 1;
            }
        }
        self.partial.clear();
        self.line += 1;
    }

    fn finish(&mut self) -> ToolResult {
        if !self.partial.is_empty() {
            self.end_line();
        }
        let total = self.line - 1;
        let end = self.offset + self.limit - 1;
        let mut content = json!({
            "content": self.page, "total_lines": total, "file_size": self.size,
            "truncated": false, "is_binary": false, "is_image": false,
        });
        let summary;
        if let Some(next) = self.cut_at {
            content["truncated"] = json!(true);
            content["truncated_by"] = json!("bytes");
            content["next_offset"] = json!(next);
            content["hint"] = json!(format!(
                "Output truncated at the {MAX_CHARS}-char read budget after {} line(s) \
                 (showing lines {}-{} of {total}). Use offset={next} to continue.",
                self.kept,
                self.offset,
                next - 1
            ));
            summary = format!(
                "{} lines {}-{} of {total}",
                self.shown,
                self.offset,
                next - 1
            );
        } else if total > end {
            content["truncated"] = json!(true);
            content["hint"] = json!(format!(
                "Use offset={} to continue reading (showing {}-{end} of {total} lines)",
                end + 1,
                self.offset
            ));
            summary = format!("{} lines {}-{end} of {total}", self.shown, self.offset);
        } else if self.kept == 0 {
            summary = format!(
                "{}: no lines from {} ({total} in all)",
                self.shown, self.offset
            );
        } else {
            summary = format!("{} lines {}-{total} of {total}", self.shown, self.offset);
        }
        ToolResult::new(content, summary)
    }
}

impl Advance for Reading {
    /// Read on until the deadline: the result once the file has been read to its end.
    fn advance(&mut self, ctx: &ToolContext<'_>) -> Option<ToolResult> {
        loop {
            let n = match self.file.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(ToolResult::error(format!("Failed to read file: {e}"))),
            };
            if n == 0 {
                return Some(self.finish());
            }
            let mut chunk = &self.buf[..n];
            if !self.bom_checked {
                self.bom_checked = true;
                chunk = chunk.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(chunk);
            }
            let chunk = chunk.to_vec();
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let nl = rest.iter().position(|b| *b == b'\n');
                let (piece, next) = match nl {
                    Some(i) => (&rest[..i], Some(&rest[i + 1..])),
                    None => (rest, None),
                };
                if self.on_page(self.line) && self.partial.len() < MAX_LINE * 4 {
                    let room = MAX_LINE * 4 - self.partial.len();
                    self.partial
                        .extend_from_slice(&piece[..piece.len().min(room)]);
                } else if !piece.is_empty() && self.partial.is_empty() {
                    // Off the page: only that the line has bytes matters (it counts).
                    self.partial.push(b' ');
                }
                match next {
                    Some(after) => {
                        self.end_line();
                        rest = after;
                    }
                    None => break,
                }
            }
            if ctx.out_of_time() {
                return None;
            }
        }
    }
}

fn extension(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Text has no NUL and is mostly valid UTF-8 (a sample may cut a character at its end).
fn looks_binary(sample: &[u8]) -> bool {
    if sample.contains(&0) {
        return true;
    }
    match std::str::from_utf8(sample) {
        Ok(_) => false,
        Err(e) => e.error_len().is_some() && e.valid_up_to() < sample.len().saturating_sub(4),
    }
}

/// Up to five names near `path`'s, scored as Hermes does.
fn similar_files(path: &Path) -> Vec<String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().to_lowercase()) else {
        return Vec::new();
    };
    let stem = |n: &str| {
        n.rsplit_once('.')
            .map_or(n.to_string(), |(s, _)| s.to_string())
    };
    let ext = |n: &str| n.rsplit_once('.').map(|(_, e)| e.to_string());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut scored: Vec<(u32, String)> = entries
        .filter_map(Result::ok)
        .take(1000)
        .filter_map(|e| {
            let f = e.file_name().to_string_lossy().into_owned();
            let lf = f.to_lowercase();
            let score = if lf == name {
                100
            } else if stem(&lf) == stem(&name) {
                90
            } else if lf.starts_with(&name) || name.starts_with(&lf) {
                70
            } else if lf.contains(&name) {
                60
            } else if name.contains(&lf) && lf.len() > 2 {
                40
            } else if ext(&name).is_some() && ext(&lf) == ext(&name) {
                let common = name.chars().filter(|c| lf.contains(*c)).count();
                if common * 10 >= name.len().max(lf.len()) * 4 {
                    30
                } else {
                    0
                }
            } else {
                0
            };
            (score > 0).then(|| (score, dir.join(&f).display().to_string()))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.into_iter().take(5).map(|(_, p)| p).collect()
}

impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn toolset(&self) -> &str {
        "file"
    }

    fn description(&self) -> &str {
        "Read a text file (not cat, head or tail in the terminal), as 'NUMBER|TEXT' lines. Page \
         with offset and limit; a read over about 100,000 characters stops at a line's end \
         and gives the next_offset to go on from. Not for images or other binary files; for a \
         missing file, similar names are suggested."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file: absolute, relative or ~/..."},
                "offset": {"type": "integer", "description": "The first line, from 1.", "default": 1, "minimum": 1},
                "limit": {"type": "integer", "description": "How many lines (at most 2000).", "default": DEFAULT_LIMIT, "maximum": MAX_LIMIT}
            },
            "required": ["path"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let path = match string_arg(args, "read_file", "path") {
            Ok(p) if !p.trim().is_empty() => p,
            Ok(_) => return Start::Done(ToolResult::error("read_file: 'path' is empty")),
            Err(e) => return Start::Done(e),
        };
        let offset = int_arg(args, "offset").unwrap_or(1).max(1) as u64;
        let limit = int_arg(args, "limit")
            .unwrap_or(DEFAULT_LIMIT)
            .clamp(1, MAX_LIMIT) as u64;
        let here = super::here(ctx);
        let file = resolve(&here, path);
        let mut reading = match open(&file, &shown(&here, &file)) {
            Ok(r) => r,
            Err(result) => return Start::Done(result),
        };
        reading.offset = offset;
        reading.limit = limit;
        self.reading.start(ctx, reading)
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        self.reading.step(ctx, "read_file: the read was lost")
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        self.reading.cancel(job)
    }
}

/// Open `file` for a page, or the result that says why not.
fn open(file: &PathBuf, shown: &str) -> Result<Reading, ToolResult> {
    let meta = match std::fs::metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut r = ToolResult::error(format!("File not found: {}", file.display()));
            let similar = similar_files(file);
            if !similar.is_empty() {
                r.content["similar_files"] = json!(similar);
            }
            return Err(r);
        }
        Err(e) => {
            return Err(ToolResult::error(format!(
                "Cannot read {}: {e}",
                file.display()
            )));
        }
    };
    if meta.is_dir() {
        return Err(ToolResult::error(format!(
            "{} is a directory: use search_files to list it",
            file.display()
        )));
    }
    if !meta.is_file() {
        return Err(ToolResult::error(format!(
            "Cannot read '{}': this is a device file that would block or produce infinite output.",
            file.display()
        )));
    }
    let ext = extension(file);
    if IMAGE_EXTENSIONS.contains(&ext.as_str()) {
        let mut r = ToolResult::new(
            json!({"is_image": true, "is_binary": true, "file_size": meta.len(),
                   "hint": "Image file: tui-gateway sends models text only; it cannot show this image."}),
            format!("{shown}: image"),
        );
        r.error = Some("image file".into());
        return Err(r);
    }
    if BINARY_EXTENSIONS.contains(&ext.as_str()) {
        return Err(ToolResult::error(format!(
            "Cannot read binary file '{}' (.{ext}). Use terminal to inspect binary files.",
            file.display()
        )));
    }
    let mut f = crate::util::open_regular(file)
        .map_err(|e| ToolResult::error(format!("Cannot read {}: {e}", file.display())))?
        .ok_or_else(|| ToolResult::error(format!("File not found: {}", file.display())))?;
    let mut sample = vec![0; SAMPLE];
    let n = read_full(&mut f, &mut sample)
        .map_err(|e| ToolResult::error(format!("Failed to read file: {e}")))?;
    if looks_binary(&sample[..n]) {
        let mut r = ToolResult::error(
            "Binary file - cannot display as text. Use appropriate tools to handle this file type.",
        );
        r.content["is_binary"] = json!(true);
        r.content["file_size"] = json!(meta.len());
        return Err(r);
    }
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(0))
        .map_err(|e| ToolResult::error(format!("Failed to read file: {e}")))?;
    Ok(Reading {
        file: f,
        shown: shown.to_string(),
        size: meta.len(),
        offset: 1,
        limit: DEFAULT_LIMIT as u64,
        line: 1,
        partial: Vec::new(),
        page: String::new(),
        kept: 0,
        cut_at: None,
        buf: vec![0; CHUNK],
        bom_checked: false,
    })
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn binary_is_told_from_text() {
        assert!(looks_binary(b"ab\0cd"));
        assert!(!looks_binary("héllo\n".as_bytes()));
        assert!(!looks_binary(&"é".as_bytes()[..1]));
        assert!(looks_binary(b"\xff\xfe\xfd\xfc\xfb\xfa text text"));
    }

    #[test]
    fn a_big_file_is_read_a_chunk_per_step_to_the_same_page() {
        use crate::tools::alone;
        let dir = std::env::temp_dir().join(format!("tuigw-rf-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::new();
        for i in 1..=200_000 {
            text.push_str(&format!("line {i:06} {}\r\n", "x".repeat(40)));
        }
        std::fs::write(dir.join("big.txt"), &text).unwrap();
        let args = json!({"path": "big.txt", "offset": 100_000, "limit": 3});
        let cwd = dir.to_str().unwrap();
        let stepped = alone::run(&mut ReadFile::default(), cwd, &dir, &args, Duration::ZERO);
        let chunks = text.len().div_ceil(CHUNK);
        assert!(
            stepped.steps + 1 >= chunks,
            "{} steps for {chunks} chunks",
            stepped.steps
        );
        let c = &stepped.result.content;
        assert_eq!(c["total_lines"], 200_000);
        assert_eq!(c["file_size"], text.len());
        assert!(
            c["content"]
                .as_str()
                .unwrap()
                .starts_with(&format!("100000|line 100000 {}\n100001|", "x".repeat(40))),
            "{c}"
        );
        assert_eq!(
            c["hint"],
            "Use offset=100003 to continue reading (showing 100000-100002 of 200000 lines)"
        );
        let budget = alone::run(
            &mut ReadFile::default(),
            cwd,
            &dir,
            &args,
            Duration::from_secs(5),
        );
        assert_eq!(budget.result.content, stepped.result.content);
        // A page past the character budget stops on a line boundary with next_offset.
        std::fs::write(
            dir.join("wide.txt"),
            format!("{}\n", "y".repeat(1500)).repeat(200),
        )
        .unwrap();
        let wide = alone::run(
            &mut ReadFile::default(),
            cwd,
            &dir,
            &json!({"path": "wide.txt"}),
            Duration::ZERO,
        );
        let c = &wide.result.content;
        assert_eq!(c["truncated_by"], "bytes");
        let next = c["next_offset"].as_u64().unwrap();
        assert!((60..=70).contains(&next), "{next}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
