//! What the TUI sends as an image's path (`image.attach`, a dropped file, `/image …`): a path
//! maybe quoted, `file://`, `~`, with backslash-escaped spaces, and maybe text after it. Pure.

use std::path::{Path, PathBuf};

/// The extensions taken as images (Hermes' list).
pub const IMAGE_EXTENSIONS: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "webp", "bmp", "tiff", "tif", "heic",
];

/// Whether `path` names an image by its extension.
pub fn has_image_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// The path token at the start of `raw` and the text after it. A quoted path ends at its
/// closing quote; an unquoted one at the first space not escaped by a backslash.
pub fn split(raw: &str) -> (String, String) {
    let raw = raw.trim();
    let mut chars = raw.char_indices();
    if let Some((_, q @ ('"' | '\''))) = chars.next()
        && let Some(end) = raw[1..].find(q)
    {
        let token = raw[1..1 + end].to_string();
        return (token, raw[end + 2..].trim().to_string());
    }
    let mut token = String::new();
    let mut escaped = false;
    for (i, c) in raw.char_indices() {
        if escaped {
            token.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c.is_whitespace() {
            return (token, raw[i..].trim().to_string());
        } else {
            token.push(c);
        }
    }
    (token, String::new())
}

/// `token` as a path: `file://` URLs decoded, `~` expanded with `home`, a relative path taken
/// from `cwd`.
pub fn resolve(token: &str, cwd: &Path, home: Option<&Path>) -> PathBuf {
    let decoded;
    let token = match token.strip_prefix("file://") {
        Some(rest) => {
            decoded = crate::model::connect::percent_decode(rest);
            decoded.as_str()
        }
        None => token,
    };
    let path = match (token.strip_prefix('~'), home) {
        (Some(""), Some(home)) => home.to_path_buf(),
        (Some(rest), Some(home)) if rest.starts_with('/') => home.join(&rest[1..]),
        _ => PathBuf::from(token),
    };
    if path.is_absolute() {
        path
    } else {
        cwd.join(path)
    }
}

/// Where the image in `raw` is and the text after it: the whole of `raw` when it names an
/// existing file (a dropped path with spaces), else its first token. `exists` asks the disk.
pub fn locate(
    raw: &str,
    cwd: &Path,
    home: Option<&Path>,
    exists: impl Fn(&Path) -> bool,
) -> (PathBuf, String) {
    let whole = raw.trim();
    let unquoted = whole
        .strip_prefix('"')
        .and_then(|w| w.strip_suffix('"'))
        .or_else(|| whole.strip_prefix('\'').and_then(|w| w.strip_suffix('\'')))
        .unwrap_or(whole);
    let as_whole = resolve(unquoted, cwd, home);
    if !unquoted.is_empty() && exists(&as_whole) {
        return (as_whole, String::new());
    }
    let (token, rest) = split(whole);
    (resolve(&token, cwd, home), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_the_tui_sends_them() {
        let cwd = Path::new("/work");
        let home = Some(Path::new("/home/u"));
        let none = |_: &Path| false;
        assert_eq!(
            locate("~/shots/a.png what is it", cwd, home, none),
            (PathBuf::from("/home/u/shots/a.png"), "what is it".into())
        );
        assert_eq!(
            locate("'/tmp/my shot.png'", cwd, home, none).0,
            PathBuf::from("/tmp/my shot.png")
        );
        assert_eq!(
            locate("\"/tmp/my shot.png\" and this", cwd, home, none),
            (PathBuf::from("/tmp/my shot.png"), "and this".into())
        );
        assert_eq!(
            locate("/tmp/my\\ shot.png", cwd, home, none).0,
            PathBuf::from("/tmp/my shot.png")
        );
        assert_eq!(
            locate("file:///tmp/a%20b.png", cwd, home, none).0,
            PathBuf::from("/tmp/a b.png")
        );
        assert_eq!(
            locate("img/a.png", cwd, home, none).0,
            PathBuf::from("/work/img/a.png")
        );
        // A dropped path with a space, unquoted: the whole text names the file.
        let there = |p: &Path| p == Path::new("/tmp/my shot.png");
        assert_eq!(
            locate("/tmp/my shot.png", cwd, home, there),
            (PathBuf::from("/tmp/my shot.png"), String::new())
        );
        assert!(has_image_extension(Path::new("/a/B.JPG")));
        assert!(!has_image_extension(Path::new("/a/b.txt")));
    }
}
