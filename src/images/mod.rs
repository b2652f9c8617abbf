//! Images the user attaches to a prompt (`image.attach`, a dropped path, `clipboard.paste`) and
//! that `vision_analyze` reads: found (`path.rs`), read safely and bounded, recognised by their
//! bytes, measured, and put in the prompt as Hermes puts them (`route.rs` decides whether the
//! model gets the pixels or a pointer to `vision_analyze`). `clipboard.rs` reads the system
//! clipboard; `methods/images.rs` answers the calls.

pub mod clipboard;
pub mod fetch;
pub mod path;
pub mod route;
pub mod shrink;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Images at most on one prompt.
pub const MAX_PER_PROMPT: usize = 16;

/// The text sent with images when the user typed none (Hermes').
const DEFAULT_QUESTION: &str = "What do you see in this image?";

/// An image read from disk.
pub struct Image {
    pub bytes: Vec<u8>,
    pub mime: &'static str,
}

impl Image {
    /// As a base64 `data:` URL.
    pub fn data_url(&self) -> String {
        let b64 = crate::model::connect::base64(&self.bytes);
        format!("data:{};base64,{b64}", self.mime)
    }
}

/// Whether every provider takes images of type `mime`.
pub fn universal(mime: &str) -> bool {
    matches!(
        mime,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    )
}

/// The image type of `bytes` by their first bytes, and whether every provider takes it.
pub fn sniff(bytes: &[u8]) -> Option<(&'static str, bool)> {
    let b = bytes;
    let found = if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        ("image/png", true)
    } else if b.starts_with(b"\xff\xd8\xff") {
        ("image/jpeg", true)
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        ("image/gif", true)
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        ("image/webp", true)
    } else if b.starts_with(b"BM") {
        ("image/bmp", false)
    } else if b.starts_with(b"II*\0") || b.starts_with(b"MM\0*") {
        ("image/tiff", false)
    } else if b.len() >= 12 && &b[4..8] == b"ftyp" {
        // ISO-BMFF: an image by its major brand (as Hermes tells them apart); a video is none.
        match &b[8..12] {
            b"avif" | b"avis" => ("image/avif", false),
            b"heic" | b"heix" | b"hevc" | b"hevx" | b"mif1" | b"msf1" | b"heim" | b"heis" => {
                ("image/heic", false)
            }
            _ => return None,
        }
    } else {
        return None;
    };
    Some(found)
}

/// Width and height of a PNG, GIF, WebP or JPEG, read from its header.
pub fn dimensions(b: &[u8]) -> Option<(u32, u32)> {
    let be32 = |i: usize| Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let le16 = |i: usize| Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?) as u32);
    let be16 = |i: usize| Some(u16::from_be_bytes(b.get(i..i + 2)?.try_into().ok()?) as u32);
    let le32 = |i: usize| Some(i32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let le24 = |i: usize| {
        let s = b.get(i..i + 3)?;
        Some(s[0] as u32 | (s[1] as u32) << 8 | (s[2] as u32) << 16)
    };
    match sniff(b)?.0 {
        "image/png" => Some((be32(16)?, be32(20)?)),
        "image/gif" => Some((le16(6)?, le16(8)?)),
        // A bottom-up bitmap gives its height as a negative number.
        "image/bmp" => Some((le32(18)?.unsigned_abs(), le32(22)?.unsigned_abs())),
        "image/webp" => match b.get(12..16)? {
            b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
            b"VP8 " => Some((le16(26)? & 0x3fff, le16(28)? & 0x3fff)),
            b"VP8L" => {
                let bits = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
                Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
            }
            _ => None,
        },
        "image/jpeg" => {
            // Walk the segments to the first start-of-frame marker.
            let mut i = 2;
            while i + 9 < b.len() {
                if b[i] != 0xff {
                    return None;
                }
                let marker = b[i + 1];
                let len = be16(i + 2)? as usize;
                let sof = matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
                if sof {
                    return Some((be16(i + 7)?, be16(i + 5)?));
                }
                i += 2 + len;
            }
            None
        }
        _ => None,
    }
}

/// Hermes' estimate of an image's tokens: 85 per 512-pixel tile.
pub fn token_estimate(width: u32, height: u32) -> u64 {
    if width == 0 || height == 0 {
        return 0;
    }
    let tiles = |n: u32| u64::from(n.div_ceil(512).max(1));
    tiles(width) * tiles(height) * 85
}

/// What the TUI shows of an attached image: its name, size in pixels and tokens.
pub fn meta(path: &Path, bytes: &[u8]) -> Value {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut v = json!({ "name": name });
    if let Some((w, h)) = dimensions(bytes) {
        v["width"] = json!(w);
        v["height"] = json!(h);
        v["token_estimate"] = json!(token_estimate(w, h));
    }
    v
}

/// Whether `path` is under the kernel's or the devices' trees, which are never read as images.
fn is_system_tree(path: &Path) -> bool {
    ["/proc", "/sys", "/dev"]
        .iter()
        .any(|root| path.starts_with(root))
}

/// Read the image at `path`: a regular file (opened without blocking: no FIFO, no device, nothing
/// under `/proc`, `/sys`, `/dev`) of at most `max` bytes, of a type every provider takes.
pub fn load(path: &Path, max: u64) -> Result<Image, String> {
    let shown = path.display();
    let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if is_system_tree(path) || is_system_tree(&real) {
        return Err(format!("{shown}: not an image file; refused"));
    }
    let bytes = match crate::util::read_regular_bytes(path, max) {
        Ok(Some(b)) => b,
        Ok(None) => return Err(format!("image not found: {shown}")),
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            return Err(format!(
                "image too large: {shown} is over {} (the most read for one image); make it smaller first",
                size_words(max)
            ));
        }
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    from_bytes(bytes).map_err(|why| format!("{shown}: {why}"))
}

/// What an attach reads of an image on the loop: enough for its type and size in pixels.
const HEAD_BYTES: u64 = 256 * 1024;

/// The image at `path` checked as [`load`] checks it (a regular file of at most `max` bytes, of
/// a type taken or converted) by reading only its first 256 KiB: what an attach needs on the
/// loop (the name, the size in pixels); the whole is read when the prompt is prepared.
pub fn probe(path: &Path, max: u64) -> Result<Image, String> {
    use std::io::Read;
    let shown = path.display();
    let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if is_system_tree(path) || is_system_tree(&real) {
        return Err(format!("{shown}: not an image file; refused"));
    }
    let file = match crate::util::open_regular(path) {
        Ok(Some(f)) => f,
        Ok(None) => return Err(format!("image not found: {shown}")),
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > max {
        return Err(format!(
            "image too large: {shown} is over {} (the most read for one image); make it smaller first",
            size_words(max)
        ));
    }
    let mut head = Vec::new();
    if let Err(e) = file.take(HEAD_BYTES).read_to_end(&mut head) {
        return Err(format!("cannot read {shown}: {e}"));
    }
    from_bytes(head).map_err(|why| format!("{shown}: {why}"))
}

/// Bytes as an image: one every provider takes, or a BMP (converted to PNG when sent); refused
/// when they are none or of a type tui-gateway cannot convert (TIFF, HEIC, AVIF).
pub fn from_bytes(bytes: Vec<u8>) -> Result<Image, String> {
    match sniff(&bytes) {
        Some((mime, true)) => Ok(Image { bytes, mime }),
        Some(("image/bmp", false)) => Ok(Image {
            bytes,
            mime: "image/bmp",
        }),
        Some((mime, false)) => Err(format!(
            "{mime} is not taken by every provider and tui-gateway cannot convert it; send a PNG, JPEG, GIF, WebP or BMP"
        )),
        None => Err("not an image (PNG, JPEG, GIF, WebP or BMP)".into()),
    }
}

/// `n` bytes in words (`15 MiB`, `512 KiB`).
pub fn size_words(n: u64) -> String {
    if n >= 1024 * 1024 && n.is_multiple_of(1024 * 1024) {
        format!("{} MiB", n / (1024 * 1024))
    } else {
        format!("{} KiB", n.div_ceil(1024))
    }
}

/// The image at `path` as it is sent: read ([`load`]) and made to fit ([`shrink::fit`]). CPU
/// and disk work: off the loop.
pub fn load_to_send(path: &Path, max: u64) -> Result<Image, String> {
    let shown = path.display();
    shrink::fit(load(path, max)?).map_err(|why| format!("{shown}: {why}"))
}

/// The prompt for `text` with the images at `paths` as the model gets them: image parts
/// (Hermes' shape: the text with one `[Image attached at: …]` line per image, then each image
/// as a data URL), stored as Hermes stores content made of parts. An image that cannot be read
/// or made to fit now is left out and named in the second value. Off the loop.
pub fn native_prompt(text: &str, paths: &[PathBuf], max: u64) -> (String, Vec<String>) {
    let mut images = Vec::new();
    let mut hints = Vec::new();
    let mut skipped = Vec::new();
    for p in paths.iter().take(MAX_PER_PROMPT) {
        match load_to_send(p, max) {
            Ok(img) => {
                hints.push(format!("[Image attached at: {}]", p.display()));
                images.push(json!({"type": "image_url", "image_url": {"url": img.data_url()}}));
            }
            Err(why) => skipped.push(why),
        }
    }
    if images.is_empty() {
        return (text.to_string(), skipped);
    }
    let base = match text.trim() {
        "" => DEFAULT_QUESTION,
        t => t,
    };
    let mut parts =
        vec![json!({"type": "text", "text": format!("{base}\n\n{}", hints.join("\n"))})];
    parts.extend(images);
    (crate::transcript::encode_parts(&parts), skipped)
}

/// What the vision model is asked of each image before a turn of a model that cannot see
/// images (Hermes' `_enrich_with_attached_images`).
pub const DESCRIBE_PROMPT: &str = "Describe everything visible in this image in thorough detail. Include any text, code, data, objects, people, layout, colors, and any other notable visual information.";

/// The prompt for `text` when the model cannot see images (Hermes' text routing): each image's
/// description from `describe` (given the image's data URL) before the text, with the way to look
/// again (`vision_analyze`); an image whose description failed says so. An image no longer on
/// disk is left out. Off the loop: `describe` asks the vision model.
pub fn described_prompt(
    text: &str,
    paths: &[PathBuf],
    max: u64,
    mut describe: impl FnMut(&str) -> Result<String, String>,
) -> String {
    let mut notes = Vec::new();
    for p in paths.iter().take(MAX_PER_PROMPT) {
        if !p.exists() {
            continue;
        }
        let hint = format!(
            "[You can examine it with vision_analyze using image_url: {}]",
            p.display()
        );
        let description = load_to_send(p, max)
            .and_then(|img| describe(&img.data_url()))
            .ok()
            .filter(|d| !d.trim().is_empty());
        notes.push(match description {
            Some(d) => format!("[The user attached an image:\n{}]\n{hint}", d.trim()),
            None => format!("[The user attached an image but analysis failed.]\n{hint}"),
        });
    }
    let prefix = notes.join("\n\n");
    match (prefix.is_empty(), text.is_empty()) {
        (false, false) => format!("{prefix}\n\n{text}"),
        (false, true) => prefix,
        (true, false) => text.to_string(),
        (true, true) => DEFAULT_QUESTION.to_string(),
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A PNG header of `w` x `h` (enough for the sniffing and measuring; tests' stand-in image).
    pub fn png(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        b.extend(w.to_be_bytes());
        b.extend(h.to_be_bytes());
        b.extend([8, 6, 0, 0, 0]);
        b
    }

    #[test]
    fn images_are_recognised_and_measured_by_their_bytes() {
        assert_eq!(sniff(&png(1, 1)), Some(("image/png", true)));
        assert_eq!(dimensions(&png(1024, 600)), Some((1024, 600)));
        assert_eq!(token_estimate(1024, 600), 2 * 2 * 85);
        let gif = b"GIF89a\x40\x01\xf0\x00rest".to_vec();
        assert_eq!(dimensions(&gif), Some((320, 240)));
        // A JPEG: SOI, an APP0 segment, then SOF0 with height 480 and width 640.
        let mut jpeg = vec![0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0];
        jpeg.extend([0xff, 0xc0, 0, 17, 8, 0x01, 0xe0, 0x02, 0x80, 3, 0, 0]);
        assert_eq!(dimensions(&jpeg), Some((640, 480)));
        assert!(
            from_bytes(b"BMxxxx".to_vec()).is_ok(),
            "a BMP is taken (converted)"
        );
        assert!(
            from_bytes(b"II*\0xxxx".to_vec()).is_err(),
            "TIFF is refused"
        );
        let iso = |brand: &[u8]| {
            let mut b = b"\0\0\0\x18ftyp".to_vec();
            b.extend(brand);
            b.extend([0; 8]);
            b
        };
        let heic = from_bytes(iso(b"heic")).err().unwrap();
        assert!(heic.starts_with("image/heic is not taken"), "{heic}");
        let avif = from_bytes(iso(b"avif")).err().unwrap();
        assert!(avif.starts_with("image/avif is not taken"), "{avif}");
        let video = from_bytes(iso(b"isom")).err().unwrap();
        assert!(video.starts_with("not an image"), "an MP4: {video}");
        assert!(from_bytes(b"hello".to_vec()).is_err());
    }

    #[test]
    fn a_prompt_with_images_carries_them_as_parts_and_a_hint() {
        let dir = std::env::temp_dir().join(format!("img-{}", crate::util::random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.png");
        crate::private_file::replace(&p, &png(10, 10), 0o600).unwrap();
        let (content, skipped) = native_prompt("", &[p.clone(), dir.join("gone.png")], 1 << 20);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        let parts = crate::transcript::parts_of(&content).unwrap();
        assert!(
            parts[0]["text"]
                .as_str()
                .unwrap()
                .contains(DEFAULT_QUESTION)
        );
        assert!(
            parts[0]["text"]
                .as_str()
                .unwrap()
                .contains("[Image attached at:")
        );
        assert!(
            parts[1]["image_url"]["url"]
                .as_str()
                .unwrap()
                .starts_with("data:image/png;base64,")
        );
        // Too large: refused with the reason.
        let err = load(&p, 8).err().unwrap();
        assert!(err.contains("too large"), "{err}");
        // A FIFO is not waited on.
        let fifo = dir.join("f.png");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(load(&fifo, 1 << 20).is_err());
        assert!(load(Path::new("/proc/self/status"), 1 << 20).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
