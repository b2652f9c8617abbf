//! The call log (`--rpc-log PATH`, `TUI_GATEWAY_RPC_LOG`): every frame read and every frame
//! written, appended to a file as `{"dir":"in"|"out","t":<unix secs>,"frame":<frame>}` lines.
//!
//! It exists so a test (or a curious user) can see exactly what a client called and what it was
//! answered. It must never hurt the loop: the file is opened for appending with `O_NONBLOCK`,
//! each line is one `write(2)`, a frame longer than [`MAX_FRAME`] is logged truncated with its
//! length, and the first failed or short write is reported once on stderr and ends the logging.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Frames longer than this are logged as a string prefix of [`TRUNCATED_PREFIX`] bytes.
pub const MAX_FRAME: usize = 64 * 1024;
const TRUNCATED_PREFIX: usize = 4 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    In,
    Out,
}

/// An open call log, or none (the default: then [`CallLog::record`] is one branch).
#[derive(Default)]
pub struct CallLog {
    file: Option<File>,
}

impl CallLog {
    /// Open `path` for appending; a failure is said on stderr and leaves the log off.
    pub fn open(path: &Path) -> CallLog {
        match crate::private_file::append(path) {
            Ok(f) => CallLog { file: Some(f) },
            Err(e) => {
                crate::diag!("[gateway] call log {} not opened: {e}", path.display());
                CallLog { file: None }
            }
        }
    }

    pub fn is_on(&self) -> bool {
        self.file.is_some()
    }

    /// Log one frame (without or with its trailing newline).
    pub fn record(&mut self, dir: Dir, frame: &[u8]) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let line = render(dir, unix_secs(), frame);
        match file.write(&line) {
            Ok(n) if n == line.len() => {}
            Ok(n) => {
                crate::diag!(
                    "[gateway] call log: short write ({n} of {} bytes); logging stops",
                    line.len()
                );
                self.file = None;
            }
            Err(e) => {
                crate::diag!("[gateway] call log: {e}; logging stops");
                self.file = None;
            }
        }
    }
}

fn unix_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One log line. A frame that is valid JSON is embedded as is; anything else (bad input, or a
/// frame past [`MAX_FRAME`]) as a string, the long ones cut with `"truncated":true,"len":N`.
fn render(dir: Dir, t: f64, frame: &[u8]) -> Vec<u8> {
    let frame = frame.strip_suffix(b"\n").unwrap_or(frame);
    let dir = match dir {
        Dir::In => "in",
        Dir::Out => "out",
    };
    let mut line = format!("{{\"dir\":\"{dir}\",\"t\":{t:.3},").into_bytes();
    if let Some(redacted) = without_saved_key(frame) {
        line.extend_from_slice(format!("\"frame\":{redacted}}}\n").as_bytes());
        return line;
    }
    if frame.len() > MAX_FRAME {
        let prefix = String::from_utf8_lossy(&frame[..TRUNCATED_PREFIX]);
        let text = serde_json::to_string(&prefix).unwrap_or_default();
        line.extend_from_slice(
            format!(
                "\"truncated\":true,\"len\":{},\"frame\":{text}}}\n",
                frame.len()
            )
            .as_bytes(),
        );
        return line;
    }
    line.extend_from_slice(b"\"frame\":");
    if serde_json::from_slice::<serde::de::IgnoredAny>(frame).is_ok() {
        line.extend_from_slice(frame);
    } else {
        let text = serde_json::to_string(&String::from_utf8_lossy(frame)).unwrap_or_default();
        line.extend_from_slice(text.as_bytes());
    }
    line.extend_from_slice(b"}\n");
    line
}

/// A frame that may carry a key `model.save_key` saves, as logged: the key replaced (a frame
/// that names the method but is not JSON, by its length alone). `None`: any other frame.
fn without_saved_key(frame: &[u8]) -> Option<String> {
    frame
        .windows(14)
        .any(|w| w == b"model.save_key")
        .then_some(())?;
    let parsed = (frame.len() <= MAX_FRAME)
        .then(|| serde_json::from_slice::<serde_json::Value>(frame).ok())
        .flatten();
    let Some(mut v) = parsed else {
        return Some(format!(
            "\"(a frame naming model.save_key, {} bytes)\"",
            frame.len()
        ));
    };
    if let Some(key) = v.pointer_mut("/params/api_key") {
        *key = serde_json::Value::String("(not logged)".into());
    }
    Some(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn parse(line: &[u8]) -> Value {
        assert_eq!(line.last(), Some(&b'\n'));
        serde_json::from_slice(line).unwrap()
    }

    #[test]
    fn a_saved_key_is_never_logged() {
        let frame = br#"{"id":3,"method":"model.save_key","params":{"slug":"x","api_key":"sk-9"}}"#;
        let v = parse(&render(Dir::In, 1.0, frame));
        assert_eq!(v["frame"]["params"]["api_key"], "(not logged)");
        assert_eq!(v["frame"]["params"]["slug"], "x");
        let line = render(
            Dir::In,
            1.0,
            br#"{"method":"model.save_key","api_key":"sk-9""#,
        );
        assert!(!String::from_utf8_lossy(&line).contains("sk-9"));
    }

    #[test]
    fn a_json_frame_is_embedded_as_is() {
        let v = parse(&render(Dir::Out, 12.5, b"{\"id\":1,\"result\":{}}\n"));
        assert_eq!(v["dir"], "out");
        assert_eq!(v["t"], 12.5);
        assert_eq!(v["frame"]["id"], 1);
    }

    #[test]
    fn bad_input_is_kept_as_a_string() {
        let v = parse(&render(Dir::In, 1.0, b"not json \xff"));
        assert_eq!(v["dir"], "in");
        assert_eq!(v["frame"], "not json \u{fffd}");
    }

    #[test]
    fn a_huge_frame_is_cut_with_its_length() {
        let big = format!("{{\"x\":\"{}\"}}", "a".repeat(MAX_FRAME));
        let line = render(Dir::In, 1.0, big.as_bytes());
        assert!(line.len() < TRUNCATED_PREFIX + 200);
        let v = parse(&line);
        assert_eq!(v["truncated"], true);
        assert_eq!(v["len"], big.len());
        assert!(v["frame"].as_str().unwrap().starts_with("{\"x\":\"aaa"));
    }

    #[test]
    fn an_unopenable_path_leaves_the_log_off() {
        let mut log = CallLog::open(Path::new("/nonexistent-dir/for/sure/log.jsonl"));
        assert!(!log.is_on());
        log.record(Dir::In, b"{}"); // no panic, nothing to do
    }

    #[test]
    fn lines_are_appended() {
        let path =
            std::env::temp_dir().join(format!("tgw-calllog-{}.jsonl", crate::util::random_hex(8)));
        let mut log = CallLog::open(&path);
        log.record(Dir::In, b"{\"id\":1}");
        log.record(Dir::Out, b"{\"id\":1,\"result\":true}\n");
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let dirs: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["dir"].to_string())
            .collect();
        assert_eq!(dirs, ["\"in\"", "\"out\""]);
    }
}
