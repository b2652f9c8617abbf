//! The system clipboard's image, through the tools Hermes uses (`wl-paste` on Wayland, `xclip`
//! on X11, `pngpaste` on macOS): a command line that saves it, bounded in size, to a file, and
//! the reading of what that command said. The command runs under the gateway's runner (never
//! on the loop), answered when it ends. Pure.

use std::path::{Path, PathBuf};

/// The file a paste saves to: `$HERMES_HOME/images/clip_<UTC time>_<n>.png` (Hermes' name).
pub fn target(home: &Path, unix: f64, n: usize) -> PathBuf {
    let (y, mo, d, h, mi, s) = crate::util::utc_parts(unix);
    home.join("images").join(format!(
        "clip_{y:04}{mo:02}{d:02}_{h:02}{mi:02}{s:02}_{n}.png"
    ))
}

/// Whether `path` is a clipboard paste's file (kept in the attached list before it exists).
pub fn is_paste(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("clip_") && n.ends_with(".png"))
}

/// Single quotes for the shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The command that saves the clipboard's image to `out` (at most `max` bytes, and one more to
/// tell a bigger one). It prints `for <count> <max> <out>` (what the answer needs, as the
/// answer sees only the output), then `saved <tool>`, or `none <why>`.
pub fn command(out: &Path, max: u64, count: usize) -> String {
    let shown = out.to_string_lossy();
    let header = quote(&format!("for {count} {max} {shown}"));
    let out = quote(&shown);
    let cap = max + 1;
    format!(
        "umask 077; echo {header}; mkdir -p \"$(dirname {out})\" || exit 1\n\
         have() {{ command -v \"$1\" >/dev/null 2>&1; }}\n\
         if have wl-paste; then\n\
           if wl-paste --list-types 2>/dev/null | grep -q '^image/'; then\n\
             wl-paste --no-newline --type image/png 2>/dev/null | head -c {cap} > {out}; echo 'saved wl-paste'\n\
           else echo 'none No image found in clipboard'; fi\n\
         elif have xclip; then\n\
           if xclip -selection clipboard -t TARGETS -o 2>/dev/null | grep -q '^image/png'; then\n\
             xclip -selection clipboard -t image/png -o 2>/dev/null | head -c {cap} > {out}; echo 'saved xclip'\n\
           else echo 'none No image found in clipboard'; fi\n\
         elif have pngpaste; then\n\
           if pngpaste - 2>/dev/null | head -c {cap} > {out} && [ -s {out} ]; then echo 'saved pngpaste'\n\
           else echo 'none No image found in clipboard'; fi\n\
         else echo 'none No clipboard tool found: install wl-clipboard (Wayland), xclip (X11) or pngpaste (macOS)'; fi\n"
    )
}

/// What the command said.
#[derive(Debug, PartialEq)]
pub struct Said {
    /// The attached count with this image, the size bound, the file.
    pub count: usize,
    pub max: u64,
    pub path: PathBuf,
    /// `Ok(tool)` when it saved something, else why not.
    pub saved: Result<String, String>,
}

/// Read the command's output (`None`: it did not get as far as its first line).
pub fn outcome(output: &str) -> Option<Said> {
    let mut lines = output.lines().filter(|l| !l.trim().is_empty());
    let mut head = lines.next()?.strip_prefix("for ")?.splitn(3, ' ');
    let count = head.next()?.parse().ok()?;
    let max = head.next()?.parse().ok()?;
    let path = PathBuf::from(head.next()?);
    let saved = match lines.next_back().and_then(|l| l.split_once(' ')) {
        Some(("saved", tool)) => Ok(tool.trim().to_string()),
        Some(("none", why)) => Err(why.trim().to_string()),
        _ => Err(format!(
            "could not read the clipboard: {}",
            crate::util::clip(output.trim(), 200)
        )),
    };
    Some(Said {
        count,
        max,
        path,
        saved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paste_file_and_what_the_command_says() {
        let p = target(Path::new("/h"), 0.0, 3);
        assert_eq!(p, PathBuf::from("/h/images/clip_19700101_000000_3.png"));
        assert!(is_paste(&p));
        assert!(!is_paste(Path::new("/h/images/shot.png")));
        let said = outcome("for 2 99 /h/a b.png\nsaved wl-paste\n").unwrap();
        assert_eq!((said.count, said.max), (2, 99));
        assert_eq!(said.path, PathBuf::from("/h/a b.png"));
        assert_eq!(said.saved, Ok("wl-paste".into()));
        let said = outcome("for 1 9 /p\nnone No image found in clipboard").unwrap();
        assert_eq!(said.saved, Err("No image found in clipboard".into()));
        assert!(outcome("bash: boom").is_none());
        assert!(command(Path::new("/h/it's.png"), 10, 1).contains("'/h/it'\\''s.png'"));
    }
}
