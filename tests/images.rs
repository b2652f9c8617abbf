//! Images, black-box: the real binary against the mock model servers (`tests/mockai`).
//!
//! Covered: `image.attach` with a quoted path and words after it, `~`, `input.detect_drop` of
//! a dropped image; the attached image in the next request of each API (Chat Completions'
//! `image_url` data URL, the Messages API's `image` block, the Responses API's `input_image`),
//! stored as Hermes stores it and sent again after a restart and resume (shown with its data URL);
//! an image over the size bound refused with the reason, one past Hermes' send bounds made
//! smaller and a bitmap converted; a model without vision given each image's description (the
//! vision model asked before the turn, the gateway answering meanwhile) and told once; `clipboard.paste` through a
//! stand-in `wl-paste` first on `PATH` (checked to be the one run), and a clear answer when no
//! clipboard tool is there; vision requests (`vision_analyze`, descriptions) asked of the model a
//! session was switched to.
//!
//! Every wait has a deadline; nothing relies on a bare sleep for synchronisation.

use crate::common;
use crate::mockai;

use common::*;
use mockai::{MockAi, Reply};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const KEY: &str = "sk-test";

/// A PNG's header of `w` x `h` and some bytes after it (what the gateway reads and sends).
fn png(w: u32, h: u32, filler: usize) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    b.extend(w.to_be_bytes());
    b.extend(h.to_be_bytes());
    b.extend([8, 6, 0, 0, 0]);
    b.extend((0..filler).map(|i| (i % 251) as u8));
    b
}

/// Standard base64, to compare what was sent with the file.
fn b64(input: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            out.push(if i <= chunk.len() {
                ABC[(n >> shift) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    out
}

fn write_config(home: &Path, text: &str) {
    std::fs::write(home.join("config.yaml"), text).unwrap();
}

/// A Chat Completions endpoint at the mock, with `model`.
fn chat_config(home: &Path, mock: &MockAi, model: &str, extra: &str) {
    write_config(
        home,
        &format!(
            "model:\n  default: {model}\n  base_url: {}\n  api_key: {KEY}\n{extra}",
            mock.base_url()
        ),
    );
}

fn gateway(home: &TempHome) -> GatewayBuilder {
    Gateway::builder()
        .tag("images")
        .home(&home.path)
        .env("HOME", &home.path.to_string_lossy())
        .env("TUI_GATEWAY_MODEL_RETRIES", "0")
}

/// An image file in the home: its path and bytes.
fn image_file(home: &TempHome, name: &str, bytes: Vec<u8>) -> (PathBuf, Vec<u8>) {
    let p = home.path.join(name);
    std::fs::write(&p, &bytes).unwrap();
    (p, bytes)
}

/// The last user message of a Chat Completions request.
fn last_user(body: &Value) -> Value {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .cloned()
        .unwrap()
}

/// Whether any message of a Chat Completions request carries the image at `url`.
fn carries(body: &Value, url: &str) -> bool {
    body["messages"].as_array().unwrap().iter().any(|m| {
        m["content"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["image_url"]["url"] == url))
    })
}

#[test]
fn an_attached_image_goes_as_a_data_url_and_again_after_a_resume() {
    let mock = MockAi::script(vec![
        Reply::text(&["A test card."], (10, 3)),
        Reply::text(&["Still a card."], (10, 3)),
        Reply::text(&["Yes, the card."], (10, 3)),
    ]);
    let home = TempHome::new("images-chat");
    chat_config(&home.path, &mock, "gpt-4o", "");
    let (path, bytes) = image_file(&home, "my shot.png", png(640, 480, 300));
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));

    // As the TUI sends a dropped path: quoted, words after it.
    let r = g.call(
        "image.attach",
        json!({"session_id": s.id, "path": format!("'{}' what is this", path.display())}),
    );
    assert_eq!(r["attached"], true, "{r}");
    assert_eq!(r["name"], "my shot.png");
    assert_eq!(
        (r["width"].as_u64(), r["height"].as_u64()),
        (Some(640), Some(480))
    );
    assert_eq!(
        r["token_estimate"],
        2 * 85,
        "two 512-pixel tiles by one: {r}"
    );
    assert_eq!(r["count"], 1);
    assert_eq!(r["remainder"], "what is this");

    let turn = g.run_turn(&s.id, "what is this");
    assert_eq!(turn.text, "A test card.", "{}", turn.complete);
    let want_url = format!("data:image/png;base64,{}", b64(&bytes));
    let req = &mock.wait_requests(1, T)[0];
    let user = last_user(&req.body);
    let parts = user["content"].as_array().expect("content as parts");
    let text = parts[0]["text"].as_str().unwrap();
    assert!(text.starts_with("what is this"), "{text}");
    assert!(
        text.contains(&format!("[Image attached at: {}]", path.display())),
        "{text}"
    );
    assert_eq!(parts[1]["type"], "image_url");
    assert_eq!(
        parts[1]["image_url"]["url"],
        want_url.as_str(),
        "the file's bytes"
    );

    // The image went with that prompt only; the next carries it in the history.
    let turn = g.run_turn(&s.id, "and now?");
    assert_eq!(turn.text, "Still a card.");
    let req = &mock.wait_requests(2, T)[1];
    assert_eq!(last_user(&req.body)["content"], "and now?");
    assert!(
        carries(&req.body, &want_url),
        "the earlier image is in the history: {}",
        req.body
    );

    // Stored as Hermes stores content made of parts.
    let content = first_user_content(&g, &s.stored);
    assert!(
        content.starts_with("\u{0}json:["),
        "{}",
        &content[..40.min(content.len())]
    );

    // A new gateway resumes it: the message shows as Hermes shows it (its text, then the image's
    // data URL on a line of its own) and the image goes to the model again.
    g.close_stdin();
    assert!(g.wait_exit(secs(10)).success(), "{}", g.diag());
    let mut g = gateway(&home).start();
    let r = g.call("session.resume", json!({"session_id": s.stored}));
    let shown = r["messages"].as_array().expect("messages").clone();
    let first_user = shown.iter().find(|m| m["role"] == "user").unwrap();
    let text = first_user["text"].as_str().unwrap();
    assert!(
        text.starts_with("what is this\n\n[Image attached at: "),
        "{first_user}"
    );
    assert!(text.ends_with(&format!("\n{want_url}")), "{first_user}");
    let sid = r["session_id"].as_str().unwrap().to_string();
    let turn = g.run_turn(&sid, "still there?");
    assert_eq!(turn.text, "Yes, the card.");
    let req = &mock.wait_requests(3, T)[2];
    let resent = carries(&req.body, &want_url);
    assert!(resent, "resumed, the image is sent again: {}", req.body);
}

#[test]
fn anthropic_gets_an_image_block_and_responses_an_input_image() {
    use mockai::anthropic::{self as msgs, Usage};
    use mockai::responses::{self as resp, Answer};

    let claude = MockAi::script(vec![msgs::reply(msgs::text_answer(
        &["Seen."],
        Usage(9, 0, 0, 2),
    ))]);
    let home = TempHome::new("images-anthropic");
    write_config(
        &home.path,
        &format!(
            "model:\n  default: claude-sonnet-4-5\n  base_url: {}\n  api_mode: anthropic_messages\n  api_key: {KEY}\n",
            claude.base_url()
        ),
    );
    let (path, bytes) = image_file(&home, "a.png", png(32, 32, 50));
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    attach(&mut g, &s.id, &path);
    assert_eq!(g.run_turn(&s.id, "describe").text, "Seen.");
    let req = &claude.wait_requests(1, T)[0];
    let user = req.body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let blocks = user["content"].as_array().expect("blocks");
    assert_eq!(blocks[0]["type"], "text");
    assert_eq!(blocks[1]["type"], "image", "{user}");
    assert_eq!(
        blocks[1]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": b64(&bytes)}),
        "{user}"
    );

    let codex = MockAi::script(vec![resp::reply(
        Answer::new()
            .text("msg_1", &["Seen too."])
            .completed(resp::usage(9, 0, 2, 0)),
    )]);
    let home = TempHome::new("images-responses");
    write_config(
        &home.path,
        &format!(
            "model:\n  provider: mock-lab\n  default: gpt-5\nproviders:\n  mock-lab:\n    \
             base_url: {}\n    api_key: {KEY}\n    api_mode: codex_responses\n",
            codex.base_url()
        ),
    );
    let (path, bytes) = image_file(&home, "b.png", png(16, 16, 20));
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    attach(&mut g, &s.id, &path);
    assert_eq!(g.run_turn(&s.id, "describe").text, "Seen too.");
    let req = &codex.wait_requests(1, T)[0];
    let items = resp::input_items(&req.body);
    let user = items.iter().rev().find(|i| i["role"] == "user").unwrap();
    let parts = user["content"].as_array().expect("parts");
    assert_eq!(parts[0]["type"], "input_text");
    assert_eq!(
        parts[1],
        json!({"type": "input_image", "image_url": format!("data:image/png;base64,{}", b64(&bytes))})
    );
}

#[test]
fn an_image_over_the_bound_or_not_an_image_is_refused_with_the_reason() {
    let home = TempHome::new("images-big");
    let mut g = gateway(&home).env("TUI_GATEWAY_IMAGE_MAX_KB", "4").start();
    let s = g.create_session(json!({}));
    let (big, _) = image_file(&home, "big.png", png(4000, 4000, 8 * 1024));
    let (code, msg, _) = g.call_err(
        "image.attach",
        json!({"session_id": s.id, "path": big.to_string_lossy()}),
    );
    assert_eq!(code, 4018, "{msg}");
    assert!(msg.contains("too large") && msg.contains("4 KiB"), "{msg}");
    let (fake, _) = image_file(&home, "text.png", b"just text".to_vec());
    let (code, msg, _) = g.call_err(
        "image.attach",
        json!({"session_id": s.id, "path": fake.to_string_lossy()}),
    );
    assert_eq!(code, 4016, "{msg}");
    assert!(msg.contains("not an image"), "{msg}");
    let (code, msg, _) = g.call_err(
        "image.attach",
        json!({"session_id": s.id, "path": "/proc/self/environ.png"}),
    );
    assert_eq!(code, 4016, "{msg}");
    // A FIFO named like an image is refused at once, never waited on.
    let fifo = home.path.join("pipe.png");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (code, msg, _) = g.call_err(
        "image.attach",
        json!({"session_id": s.id, "path": fifo.to_string_lossy()}),
    );
    assert_eq!(code, 4016, "{msg}");
    assert!(msg.contains("not a regular file"), "{msg}");
    g.ping();
}

/// Whether a Chat Completions request carries an image (a vision model's description call).
fn asks_about_an_image(r: &mockai::Recorded) -> bool {
    r.messages().iter().any(|m| {
        m["content"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["type"] == "image_url"))
    })
}

/// `image.attach` of the file at `path` to session `sid`'s next prompt; its answer.
fn attach(g: &mut Gateway, sid: &str, path: &Path) -> Value {
    g.call(
        "image.attach",
        json!({"session_id": sid, "path": path.to_string_lossy()}),
    )
}

/// The session's first user message as state.db holds it.
fn first_user_content(g: &Gateway, stored: &str) -> String {
    g.db()
        .query_row(
            "SELECT content FROM messages WHERE session_id = ?1 AND role = 'user' ORDER BY id LIMIT 1",
            [stored],
            |r| r.get(0),
        )
        .unwrap()
}

/// A description streamed once `held` (when there is one) is let go, or 60 s have passed.
fn held_description(held: Option<std::sync::mpsc::Receiver<()>>, text: &'static str) -> Reply {
    Reply::Custom(Box::new(move |conn| {
        if let Some(h) = held {
            let _ = h.recv_timeout(secs(60));
        }
        let events = mockai::text_events(&[text], "stop", Some((9, 5)));
        mockai::write_stream(conn, mockai::Stream::new(events));
    }))
}

#[test]
fn a_model_without_vision_gets_each_images_description_before_the_turn_said_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    // The first description is held until the test lets it go; the second fails.
    let (go, held) = std::sync::mpsc::channel::<()>();
    let held = Mutex::new(Some(held));
    let described = Arc::new(AtomicUsize::new(0));
    let seen = described.clone();
    let mock = MockAi::start(move |r| {
        if !asks_about_an_image(r) {
            return Reply::text(&["ok"], (5, 1));
        }
        if seen.fetch_add(1, Ordering::SeqCst) > 0 {
            return Reply::status(400, r#"{"error":{"message":"no vision here"}}"#);
        }
        held_description(held.lock().unwrap().take(), "A red square on white.")
    });
    let home = TempHome::new("images-text");
    chat_config(&home.path, &mock, "deepseek-chat", "");
    let (path, _) = image_file(&home, "shot.png", png(8, 8, 10));
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    // A dropped image as the TUI submits it, through `~`.
    let r = g.call(
        "input.detect_drop",
        json!({"session_id": s.id, "text": "~/shot.png what is it"}),
    );
    assert_eq!(
        (r["matched"].as_bool(), r["is_image"].as_bool()),
        (Some(true), Some(true)),
        "{r}"
    );
    assert_eq!(r["text"], "what is it");
    assert_eq!(r["count"], 1);
    let r = g.call(
        "input.detect_drop",
        json!({"session_id": s.id, "text": "/help me"}),
    );
    assert_eq!(r["matched"], false, "not a file: no drop");
    // Another dropped file is named for the model's file tools, not attached as an image.
    let notes = home.path.join("notes.txt");
    std::fs::write(&notes, "hi\n").unwrap();
    let r = g.call(
        "input.detect_drop",
        json!({"session_id": s.id, "text": format!("'{}' sum it up", notes.display())}),
    );
    assert_eq!(
        (r["matched"].as_bool(), r["is_image"].as_bool()),
        (Some(true), Some(false)),
        "{r}"
    );
    assert_eq!(r["name"], "notes.txt");
    assert_eq!(
        r["text"],
        format!("[User attached file: {}]\nsum it up", notes.display())
    );

    let start = submit(&mut g, &s.id, "what is it");
    // The vision model is asked first, with Hermes' prompt and the image; while it has not
    // answered, the gateway answers, and a prompt sent meanwhile waits its turn.
    let ask = mock.wait_requests(1, T)[0].clone();
    assert!(asks_about_an_image(&ask), "{}", ask.body);
    assert!(
        ask.last_user_text()
            .starts_with("Describe everything visible in this image"),
        "{}",
        ask.body
    );
    g.ping();
    let r = g.call(
        "prompt.submit",
        json!({"session_id": s.id, "text": "then this"}),
    );
    assert_eq!(r["status"], "queued", "{r}");
    assert_eq!(mock.requests().len(), 1, "no turn before the description");
    go.send(()).unwrap();
    g.finish_turn(&s.id, start, T);
    let after = g.frames.len();
    g.finish_turn(&s.id, after, T);
    let reqs = mock.wait_requests(3, T);
    let text = last_user(&reqs[1].body)["content"]
        .as_str()
        .expect("text only")
        .to_string();
    assert_eq!(
        text,
        format!(
            "[The user attached an image:\nA red square on white.]\n[You can examine it with vision_analyze using image_url: {}]\n\nwhat is it",
            path.display()
        )
    );
    assert_eq!(last_user(&reqs[2].body)["content"], "then this", "in order");

    // A description that fails says so, and the turn goes on; the user was told once.
    attach(&mut g, &s.id, &path);
    g.run_turn(&s.id, "and this?");
    let reqs = mock.wait_requests(5, T);
    let text = last_user(&reqs[4].body)["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.starts_with("[The user attached an image but analysis failed.]\n[You can examine it with vision_analyze using image_url: "),
        "{text}"
    );
    assert!(text.ends_with("\n\nand this?"), "{text}");
    let told = g
        .frames
        .iter()
        .filter(|f| f["params"]["type"] == "status.update")
        .filter(|f| {
            f["params"]["payload"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("does not take images"))
        })
        .count();
    assert_eq!(told, 1, "said once a session");
}

/// A PNG of noise (it does not compress) of `w` x `h`.
fn noise_png(w: u32, h: u32) -> Vec<u8> {
    let mut seed = 7u32;
    let pic = image::RgbImage::from_fn(w, h, |_, _| {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let b = seed.to_le_bytes();
        image::Rgb([b[0], b[1], b[2]])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    image::DynamicImage::ImageRgb8(pic)
        .write_to(&mut out, image::ImageFormat::Png)
        .unwrap();
    out.into_inner()
}

/// Standard base64 decoded (padding allowed).
fn unb64(text: &str) -> Vec<u8> {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let vals: Vec<u32> = text
        .bytes()
        .filter(|&c| c != b'=')
        .map(|c| ABC.iter().position(|&a| a == c).expect("base64") as u32)
        .collect();
    let mut out = Vec::new();
    for chunk in vals.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, v)| n | v << (18 - 6 * i));
        out.extend(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// The picture a data URL carries: its type and size in pixels.
fn decoded(url: &str) -> (String, u32, u32) {
    let (head, b64) = url.split_once(";base64,").unwrap();
    let bytes = unb64(b64);
    let pic = image::load_from_memory(&bytes).unwrap();
    (
        head.trim_start_matches("data:").to_string(),
        pic.width(),
        pic.height(),
    )
}

#[test]
fn a_big_image_is_made_smaller_and_a_bitmap_converted_before_it_is_sent() {
    let mock = MockAi::script(vec![Reply::text(&["Two pictures."], (10, 3))]);
    let home = TempHome::new("images-shrink");
    chat_config(&home.path, &mock, "gpt-4o", "");
    // 2,000 x 1,300 of noise: about 7.8 MB, over Hermes' 4 MB data URL.
    let (big, bytes) = image_file(&home, "big.png", noise_png(2000, 1300));
    assert!(bytes.len() > 4 * 1024 * 1024);
    let mut bmp = std::io::Cursor::new(Vec::new());
    image::DynamicImage::ImageRgb8(image::RgbImage::from_pixel(40, 30, image::Rgb([1, 2, 3])))
        .write_to(&mut bmp, image::ImageFormat::Bmp)
        .unwrap();
    let (small, _) = image_file(&home, "small.bmp", bmp.into_inner());
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let r = attach(&mut g, &s.id, &big);
    assert_eq!(
        (r["width"].as_u64(), r["height"].as_u64()),
        (Some(2000), Some(1300)),
        "{r}"
    );
    let r = attach(&mut g, &s.id, &small);
    assert_eq!(
        (r["width"].as_u64(), r["height"].as_u64()),
        (Some(40), Some(30)),
        "{r}"
    );
    let turn = g.run_turn(&s.id, "compare");
    assert_eq!(turn.text, "Two pictures.", "{}", turn.complete);
    let req = &mock.wait_requests(1, T)[0];
    let parts = last_user(&req.body)["content"].as_array().unwrap().clone();
    let urls: Vec<&str> = parts[1..]
        .iter()
        .map(|p| p["image_url"]["url"].as_str().unwrap())
        .collect();
    assert_eq!(urls.len(), 2, "{parts:?}");
    assert!(urls[0].len() <= 4 * 1024 * 1024, "{}", urls[0].len());
    assert_eq!(
        decoded(urls[0]),
        ("image/png".into(), 1000, 650),
        "halved once, a PNG still"
    );
    assert_eq!(
        decoded(urls[1]),
        ("image/png".into(), 40, 30),
        "the bitmap as a PNG"
    );
    // The file itself is left as it was.
    assert_eq!(std::fs::read(&big).unwrap(), bytes);
}

/// A stand-in `wl-paste` (it prints the image and notes that it ran) in a folder put first on
/// `PATH`.
fn fake_wl_paste(home: &TempHome, image: &Path) -> (PathBuf, PathBuf) {
    let bin = home.path.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let ran = home.path.join("wl-paste-ran");
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> '{}'\nif [ \"$1\" = --list-types ]; then echo image/png; echo text/plain; exit 0; fi\ncat '{}'\n",
        ran.display(),
        image.display()
    );
    let tool = bin.join("wl-paste");
    std::fs::write(&tool, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, ran)
}

#[test]
fn clipboard_paste_saves_the_clipboard_image_and_sends_it() {
    let mock = MockAi::script(vec![Reply::text(&["A pasted card."], (10, 3))]);
    let home = TempHome::new("images-paste");
    chat_config(&home.path, &mock, "gpt-4o", "");
    let (source, bytes) = image_file(&home, "clip-source.png", png(100, 50, 64));
    let (bin, ran) = fake_wl_paste(&home, &source);
    let path_env = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut g = gateway(&home).env("PATH", &path_env).start();
    let s = g.create_session(json!({}));
    let r = g.call("clipboard.paste", json!({"session_id": s.id}));
    assert_eq!(r["attached"], true, "{r}");
    assert!(
        std::fs::read_to_string(&ran)
            .unwrap()
            .contains("--type image/png"),
        "the stand-in ran"
    );
    let saved = PathBuf::from(r["path"].as_str().unwrap());
    assert!(saved.starts_with(home.path.join("images")), "{r}");
    assert_eq!(std::fs::read(&saved).unwrap(), bytes);
    assert_eq!(
        (
            r["width"].as_u64(),
            r["height"].as_u64(),
            r["count"].as_u64()
        ),
        (Some(100), Some(50), Some(1))
    );

    assert_eq!(
        g.run_turn(&s.id, "what did I paste?").text,
        "A pasted card."
    );
    let req = &mock.wait_requests(1, T)[0];
    let parts = last_user(&req.body)["content"].as_array().unwrap().clone();
    assert_eq!(
        parts[1]["image_url"]["url"],
        format!("data:image/png;base64,{}", b64(&bytes)).as_str()
    );
}

#[test]
fn clipboard_paste_without_a_clipboard_tool_says_so() {
    let home = TempHome::new("images-noclip");
    // Only what the paste's own command line needs; no clipboard tool.
    let bin = home.path.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["bash", "sh", "mkdir", "dirname", "head", "grep"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    let mut g = gateway(&home).env("PATH", &bin.to_string_lossy()).start();
    let s = g.create_session(json!({}));
    let r = g.call("clipboard.paste", json!({"session_id": s.id}));
    assert_eq!(r["attached"], false, "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("No clipboard tool found"),
        "{r}"
    );
    // Nothing is left attached.
    let r = g.call(
        "image.detach",
        json!({"session_id": s.id, "path": "/nowhere.png"}),
    );
    assert_eq!(r["count"], 0, "{r}");
}

/// A streamed answer that calls `vision_analyze` with `args`.
fn vision_call(args: Value) -> Reply {
    use mockai::*;
    Reply::Stream(Stream::new(vec![
        ev_role(),
        ev_tool_start(0, "call_v1", "vision_analyze", &args.to_string()),
        ev_finish("tool_calls"),
        ev_usage(5, 5),
    ]))
}

/// A one-request HTTP server on 127.0.0.1 answering `bytes` as a PNG: its URL, and how many
/// connections it took (read after the test's turn).
fn image_server(bytes: Vec<u8>) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = taken.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { return };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && c.read(&mut b).unwrap_or(0) == 1 {
                head.push(b[0]);
            }
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                bytes.len()
            );
            let _ = c.write_all(&bytes);
        }
    });
    (format!("http://127.0.0.1:{port}/shot.png"), taken)
}

/// The content of the last tool message of a Chat Completions request, as JSON.
fn tool_result(body: &Value) -> Value {
    let m = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap_or_else(|| panic!("no tool message: {body}"));
    serde_json::from_str(m["content"].as_str().unwrap()).unwrap()
}

#[test]
fn vision_analyze_reads_a_file_and_a_local_servers_url() {
    let home = TempHome::new("images-vision");
    let (file, file_bytes) = image_file(&home, "card.png", png(20, 10, 40));
    let served = png(30, 30, 77);
    let (url, _) = image_server(served.clone());
    let mock = MockAi::script(vec![
        vision_call(json!({"image_url": file.to_string_lossy(), "question": "what colour?"})),
        Reply::text(&["A red ", "square."], (50, 4)),
        Reply::text(&["It is red."], (20, 3)),
        vision_call(json!({"image_url": url, "question": "what shape?"})),
        Reply::text(&["A blue circle."], (50, 4)),
        Reply::text(&["A circle."], (20, 3)),
    ]);
    chat_config(
        &home.path,
        &mock,
        "gpt-4o",
        "security:\n  allow_private_urls: true\n",
    );
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));

    let turn = g.run_turn(&s.id, "look at the card");
    assert_eq!(turn.text, "It is red.", "{:?}", turn.events);
    let reqs = mock.wait_requests(3, T);
    // The vision request: the question and the file's pixels, no tools.
    let ask = last_user(&reqs[1].body);
    let parts = ask["content"].as_array().expect("parts");
    assert!(parts[0]["text"].as_str().unwrap().contains("what colour?"));
    assert_eq!(
        parts[1]["image_url"]["url"],
        format!("data:image/png;base64,{}", b64(&file_bytes)).as_str()
    );
    assert!(reqs[1].body.get("tools").is_none(), "{}", reqs[1].body);
    // Hermes' result shape, read by the model.
    assert_eq!(
        tool_result(&reqs[2].body),
        json!({"success": true, "analysis": "A red square."})
    );

    let turn = g.run_turn(&s.id, "and the one online?");
    assert_eq!(turn.text, "A circle.", "{:?}", turn.events);
    let reqs = mock.wait_requests(6, T);
    let ask = last_user(&reqs[4].body);
    assert_eq!(
        ask["content"][1]["image_url"]["url"],
        format!("data:image/png;base64,{}", b64(&served)).as_str(),
        "the served bytes"
    );
    assert_eq!(tool_result(&reqs[5].body)["analysis"], "A blue circle.");
}

#[test]
fn a_vision_provider_named_without_a_model_is_asked_for_hermes_vision_model() {
    // `auxiliary.vision.provider: zai` alone: Z.AI's endpoint, asked for glm-5v-turbo (Hermes'
    // vision model for it), not the session's model nor Z.AI's cheap text one.
    let home = TempHome::new("images-vision-aux");
    let (file, _) = image_file(&home, "card.png", png(20, 10, 40));
    let session_side = MockAi::script(vec![
        vision_call(json!({"image_url": file.to_string_lossy(), "question": "what colour?"})),
        Reply::text(&["It is green."], (20, 3)),
    ]);
    let zai = MockAi::script(vec![Reply::text(&["A green square."], (50, 4))]);
    chat_config(
        &home.path,
        &session_side,
        "gpt-4o",
        "auxiliary:\n  vision:\n    provider: zai\n",
    );
    let mut g = gateway(&home)
        .env("GLM_API_KEY", "sk-glm-vision")
        .env("GLM_BASE_URL", &zai.base_url())
        .start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "look at the card");
    assert_eq!(turn.text, "It is green.", "{:?}", turn.events);
    let asked = zai.wait_requests(1, T);
    assert_eq!(asked[0].body["model"], "glm-5v-turbo", "{}", asked[0].body);
    assert_eq!(
        asked[0].header("authorization"),
        Some("Bearer sk-glm-vision")
    );
    let reqs = session_side.wait_requests(2, T);
    assert_eq!(tool_result(&reqs[1].body)["analysis"], "A green square.");
}

#[test]
fn vision_analyze_refuses_a_private_address() {
    let home = TempHome::new("images-ssrf");
    let (url, taken) = image_server(png(4, 4, 4));
    let mock = MockAi::script(vec![
        vision_call(json!({"image_url": url, "question": "what is it?"})),
        Reply::text(&["Could not look."], (20, 3)),
    ]);
    chat_config(&home.path, &mock, "gpt-4o", "");
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    let turn = g.run_turn(&s.id, "look at my local server");
    assert_eq!(turn.text, "Could not look.", "{:?}", turn.events);
    let reqs = mock.wait_requests(2, T);
    let result = tool_result(&reqs[1].body);
    assert_eq!(result["success"], false, "{result}");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("refused") && error.contains("127.0.0.1"),
        "{error}"
    );
    assert_eq!(
        taken.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no connection was made"
    );
    assert_eq!(reqs.len(), 2, "no vision request either");
}

#[test]
fn an_attached_image_can_be_detached_before_the_prompt() {
    let home = TempHome::new("images-detach");
    let (a, _) = image_file(&home, "a.png", png(2, 2, 2));
    let (b, _) = image_file(&home, "b.png", png(3, 3, 3));
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    for p in [&a, &b] {
        attach(&mut g, &s.id, p);
    }
    let r = g.call(
        "image.detach",
        json!({"session_id": s.id, "path": a.to_string_lossy()}),
    );
    assert_eq!(r, json!({"detached": true, "count": 1}));
    let r = g.call(
        "image.detach",
        json!({"session_id": s.id, "path": a.to_string_lossy()}),
    );
    assert_eq!(r, json!({"detached": false, "count": 1}));
    let (code, _, _) = g.call_err("image.detach", json!({"session_id": s.id}));
    assert_eq!(code, 4015);
}

/// `image.attach_bytes`: an image uploaded as base64 by a client on another machine is saved
/// under the home's images and goes with the next prompt like an attached file; bad uploads
/// are refused with Hermes' codes.
#[test]
fn uploaded_image_bytes_are_saved_and_sent_with_the_next_prompt() {
    let mock = MockAi::script(vec![Reply::text(&["An upload."], (10, 3))]);
    let home = TempHome::new("images-upload");
    chat_config(&home.path, &mock, "gpt-4o", "");
    let mut g = gateway(&home).env("TUI_GATEWAY_IMAGE_MAX_KB", "64").start();
    let s = g.create_session(json!({}));
    let bytes = png(320, 200, 100);
    let url = format!("data:image/png;base64,{}", b64(&bytes));
    // Wrapped as a data URL and broken over lines, as uploads come.
    let wrapped: String = url
        .as_bytes()
        .chunks(60)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("\n");
    let r = g.call(
        "image.attach_bytes",
        json!({"session_id": s.id, "content_base64": wrapped}),
    );
    assert_eq!(
        (&r["attached"], &r["count"]),
        (&json!(true), &json!(1)),
        "{r}"
    );
    assert_eq!(r["bytes"], bytes.len());
    assert_eq!(
        (r["width"].as_u64(), r["height"].as_u64()),
        (Some(320), Some(200))
    );
    let saved = PathBuf::from(r["path"].as_str().unwrap());
    assert!(
        saved.starts_with(home.path.join("images")),
        "{}",
        saved.display()
    );
    assert_eq!(std::fs::read(&saved).unwrap(), bytes);
    let turn = g.run_turn(&s.id, "what did I upload");
    assert_eq!(turn.text, "An upload.");
    let posts: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert!(
        carries(&posts[0].body, &url),
        "the upload goes as a data URL"
    );

    let refused = |g: &mut Gateway, params: Value| g.call_err("image.attach_bytes", params).0;
    assert_eq!(refused(&mut g, json!({"session_id": s.id})), 4015);
    let not_b64 = json!({"session_id": s.id, "data": "not base64 at all!"});
    assert_eq!(refused(&mut g, not_b64), 4017);
    let text = json!({"session_id": s.id, "data": b64(b"just some text")});
    assert_eq!(refused(&mut g, text), 4016);
    let big = json!({"session_id": s.id, "data": b64(&png(10, 10, 70 * 1024))});
    assert_eq!(refused(&mut g, big), 4018);
    assert_eq!(
        std::fs::read_dir(home.path.join("images")).unwrap().count(),
        1,
        "nothing refused was kept"
    );
}

/// A session of a model without vision whose prompt "what is it" waits for a cat picture's
/// description (held until `go` is sent or dropped); other calls answer `reply`.
struct Describing {
    mock: MockAi,
    home: TempHome,
    path: PathBuf,
    g: Gateway,
    s: Session,
    go: std::sync::mpsc::Sender<()>,
    /// Where the prompt's turn starts in the frames.
    start: usize,
}

fn describing(tag: &str, reply: &'static str) -> Describing {
    use std::sync::Mutex;
    let (go, held) = std::sync::mpsc::channel::<()>();
    let held = Mutex::new(Some(held));
    let mock = MockAi::start(move |r| {
        if !asks_about_an_image(r) {
            return Reply::text(&[reply], (5, 1));
        }
        held_description(held.lock().unwrap().take(), "A cat.")
    });
    let home = TempHome::new(tag);
    chat_config(&home.path, &mock, "deepseek-chat", "");
    let (path, _) = image_file(&home, "cat.png", png(8, 8, 10));
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    attach(&mut g, &s.id, &path);
    let start = submit(&mut g, &s.id, "what is it");
    mock.wait_requests(1, T);
    Describing {
        mock,
        home,
        path,
        g,
        s,
        go,
        start,
    }
}

#[test]
fn an_interrupt_while_images_are_described_ends_that_turn_when_it_starts() {
    let Describing {
        mock: _mock,
        home: _home,
        mut g,
        s,
        go,
        start,
        ..
    } = describing("images-interrupt", "should not be seen");
    g.call("session.interrupt", json!({"session_id": s.id}));
    go.send(()).unwrap();
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(
        turn.complete["payload"]["status"], "interrupted",
        "{}",
        turn.complete
    );
    assert!(
        !turn.text.contains("should not be seen"),
        "{}",
        turn.complete
    );
    // The prompt, with its description, is kept as the user's message; the next one runs.
    let user = first_user_content(&g, &s.stored);
    assert!(
        user.starts_with("[The user attached an image:\nA cat.]"),
        "{user}"
    );
    let turn = g.run_turn(&s.id, "hello");
    assert_eq!(turn.text, "should not be seen", "the session goes on");
}

/// A session whose first prompt waits for its image's description (held until `go`) and a
/// second prompt queued behind it, both acknowledged.
fn two_prompts_waiting(tag: &str) -> Describing {
    let mut d = describing(tag, "ok");
    let r = d.g.call(
        "prompt.submit",
        json!({"session_id": d.s.id, "text": "then this"}),
    );
    assert_eq!(r["status"], "queued", "{r}");
    d
}

/// The user messages kept of [`two_prompts_waiting`]'s prompts when neither ran.
fn both_kept(path: &Path) -> [String; 2] {
    [
        format!("what is it\n[image not sent: {}]", path.display()),
        "then this".to_string(),
    ]
}

#[test]
fn prompts_waiting_for_their_images_are_kept_when_the_gateway_stops() {
    // The description never comes while the gateway runs.
    let Describing {
        mock: _mock,
        home,
        path,
        mut g,
        s,
        go,
        ..
    } = two_prompts_waiting("images-stop");
    // The TUI quits before the description is back: both prompts were accepted, both kept.
    g.close_stdin();
    assert!(g.wait_exit(secs(20)).success());
    drop(go);
    let db = open_db(&home.db_path());
    let users: Vec<String> = rows_of(&db, &s.stored)
        .into_iter()
        .filter(|m| m.role == "user")
        .map(|m| m.content.unwrap_or_default())
        .collect();
    assert_eq!(users, both_kept(&path));
}

#[test]
fn prompts_waiting_for_their_images_survive_sigkill() {
    // The description never comes while the gateway lives.
    let Describing {
        mock: _mock,
        home,
        path,
        mut g,
        s,
        go,
        ..
    } = two_prompts_waiting("images-kill");
    // Both prompts were acknowledged: a SIGKILL of this gateway must not lose them.
    g.signal(libc::SIGKILL);
    g.wait_exit(secs(10));
    drop(go);
    let mut g = gateway(&home).start();
    assert_eq!(g.resumed_user_texts(&s.stored), both_kept(&path));
}

#[test]
fn a_prompt_whose_images_were_sent_is_not_kept_again_after_sigkill() {
    let Describing {
        mock: _mock,
        home,
        mut g,
        s,
        go,
        start,
        ..
    } = describing("images-sent-kill", "it is a cat");
    go.send(()).unwrap();
    let turn = g.finish_turn(&s.id, start, T);
    assert_eq!(turn.text, "it is a cat");
    g.signal(libc::SIGKILL);
    g.wait_exit(secs(10));
    let mut g = gateway(&home).start();
    let users = g.resumed_user_texts(&s.stored);
    assert_eq!(users.len(), 1, "the prompt ran once, kept once: {users:?}");
    assert!(users[0].contains("A cat."), "{users:?}");
    assert!(!users[0].contains("image not sent"), "{users:?}");
}

/// Switch session `sid` to `model` for this session only (what the `/model` picker sends).
fn switch_model(g: &mut Gateway, sid: &str, model: &str) {
    let r = g.call(
        "config.set",
        json!({"key": "model", "session_id": sid, "value": format!("{model} --session")}),
    );
    assert_eq!(r["value"], model, "{r}");
}

#[test]
fn after_a_model_switch_the_sessions_model_decides_how_an_image_goes() {
    // Any request carrying an image is answered "A cat.", the others "ok".
    let mock = MockAi::start(|r| match asks_about_an_image(r) {
        true => Reply::text(&["A cat."], (9, 5)),
        false => Reply::text(&["ok"], (5, 1)),
    });
    let home = TempHome::new("images-switch");
    chat_config(&home.path, &mock, "gpt-4o", "");
    let (path, _) = image_file(&home, "cat.png", png(8, 8, 10));
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));

    // Started on a model that sees images, switched to one that does not: it gets a description.
    switch_model(&mut g, &s.id, "deepseek-chat");
    attach(&mut g, &s.id, &path);
    let turn = g.run_turn(&s.id, "what is it");
    assert_eq!(turn.text, "ok", "{}", turn.complete);
    let reqs = mock.wait_requests(2, T);
    let turn_req = &reqs[1].body;
    assert_eq!(turn_req["model"], "deepseek-chat");
    assert!(!asks_about_an_image(&reqs[1]), "no pixels: {turn_req}");
    let user = last_user(turn_req)["content"].as_str().unwrap().to_string();
    assert!(
        user.starts_with("[The user attached an image:\nA cat.]"),
        "{user}"
    );

    // And back: the pixels go to the model.
    switch_model(&mut g, &s.id, "gpt-4o");
    attach(&mut g, &s.id, &path);
    let turn = g.run_turn(&s.id, "and now?");
    assert_eq!(turn.text, "A cat.", "{}", turn.complete);
    let reqs = mock.wait_requests(3, T);
    assert_eq!(reqs[2].body["model"], "gpt-4o");
    let parts = last_user(&reqs[2].body)["content"].clone();
    assert_eq!(parts[1]["type"], "image_url", "{parts}");
}

#[test]
fn vision_requests_go_to_the_sessions_model_after_a_model_switch() {
    let home = TempHome::new("images-vision-switch");
    let (file, _) = image_file(&home, "card.png", png(20, 10, 40));
    let mock = MockAi::script(vec![
        vision_call(json!({"image_url": file.to_string_lossy(), "question": "what colour?"})),
        Reply::text(&["A red square."], (50, 4)),
        Reply::text(&["It is red."], (20, 3)),
        Reply::text(&["A cat."], (9, 5)),
        Reply::text(&["ok"], (5, 1)),
        Reply::text(&["A dog."], (9, 5)),
        Reply::text(&["ok"], (5, 1)),
    ]);
    // Images described before the turn whatever the model, to see who describes them.
    chat_config(
        &home.path,
        &mock,
        "gpt-4o",
        "agent:\n  image_input_mode: text\n",
    );
    let mut g = gateway(&home).start();
    let s = g.create_session(json!({}));
    switch_model(&mut g, &s.id, "gpt-4.1");

    // `vision_analyze` asks the model the session runs on now, not config.yaml's.
    let turn = g.run_turn(&s.id, "look at the card");
    assert_eq!(turn.text, "It is red.", "{:?}", turn.events);
    let reqs = mock.wait_requests(3, T);
    assert_eq!(reqs[0].body["model"], "gpt-4.1");
    assert!(asks_about_an_image(&reqs[1]), "{}", reqs[1].body);
    assert_eq!(reqs[1].body["model"], "gpt-4.1", "the vision request");
    assert_eq!(tool_result(&reqs[2].body)["analysis"], "A red square.");

    // So does an attached image's description.
    attach(&mut g, &s.id, &file);
    g.run_turn(&s.id, "what is it");
    let reqs = mock.wait_requests(5, T);
    assert!(asks_about_an_image(&reqs[3]), "{}", reqs[3].body);
    assert_eq!(reqs[3].body["model"], "gpt-4.1", "the description");
    let user = last_user(&reqs[4].body)["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        user.starts_with("[The user attached an image:\nA cat.]"),
        "{user}"
    );

    // A session model that sees no images: the configured one describes.
    switch_model(&mut g, &s.id, "deepseek-chat");
    attach(&mut g, &s.id, &file);
    g.run_turn(&s.id, "and this?");
    let reqs = mock.wait_requests(7, T);
    assert_eq!(reqs[5].body["model"], "gpt-4o", "{}", reqs[5].body);
    assert_eq!(reqs[6].body["model"], "deepseek-chat");
}
