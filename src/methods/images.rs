//! Image calls: `image.attach`, `image.detach`, `input.detect_drop` (a dropped image),
//! `clipboard.paste` (answered when its command ends), and the prompt's images at
//! `prompt.submit` (prepared off the loop: read, made to fit or described, then run). The
//! images themselves are `crate::images`.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};

use super::params::{self, Params};
use super::session::live;
use crate::event_loop::Gateway;
use crate::images::{self, clipboard, path, route};
use crate::rpc::RpcError;
use crate::session::Session;

/// Hermes' codes: no path (4015), not an image or not there (4016), too large (4018).
const PATH_REQUIRED: i64 = 4015;
const NOT_AN_IMAGE: i64 = 4016;
const TOO_LARGE: i64 = 4018;
/// How long a clipboard tool may take.
const PASTE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The session's attached images, a paste whose command failed left out.
fn attached(s: &mut Session) -> &mut Vec<PathBuf> {
    s.attached_images
        .retain(|p| !clipboard::is_paste(p) || p.exists());
    &mut s.attached_images
}

/// Check the image at `image` and attach it to the session's next prompt: its meta, with the
/// count.
fn attach(gw: &mut Gateway, p: &Params, image: &Path) -> Result<Value, RpcError> {
    let max = gw.cfg.image_max_bytes;
    if !path::has_image_extension(image) {
        let name = image.file_name().unwrap_or_default().to_string_lossy();
        return Err(RpcError::new(
            NOT_AN_IMAGE,
            format!("unsupported image: {name}"),
        ));
    }
    let img = images::probe(image, max).map_err(|why| {
        let code = if why.contains("too large") {
            TOO_LARGE
        } else {
            NOT_AN_IMAGE
        };
        RpcError::new(code, why)
    })?;
    let s = live(gw, p)?;
    let list = attached(s);
    if list.len() >= images::MAX_PER_PROMPT {
        return Err(RpcError::new(
            TOO_LARGE,
            format!(
                "at most {} images go with one prompt",
                images::MAX_PER_PROMPT
            ),
        ));
    }
    list.push(image.to_path_buf());
    let mut v = images::meta(image, &img.bytes);
    v["attached"] = json!(true);
    v["path"] = json!(image.to_string_lossy());
    v["count"] = json!(list.len());
    Ok(v)
}

/// `image.attach {session_id, path}`: a path as the TUI sends it (quoted, `~`, `file://`, text
/// after it), attached to the next prompt.
pub fn image_attach(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let raw = params::opt_str(p, "path")?.unwrap_or("").trim().to_string();
    if raw.is_empty() {
        return Err(RpcError::new(PATH_REQUIRED, "path required"));
    }
    let cwd = PathBuf::from(&live(gw, p)?.cwd);
    let (image, remainder) = path::locate(&raw, &cwd, crate::util::user_home().as_deref(), |p| {
        p.exists()
    });
    if !image.exists() {
        return Err(RpcError::new(
            NOT_AN_IMAGE,
            format!("image not found: {}", image.display()),
        ));
    }
    let mut v = attach(gw, p, &image)?;
    let name = v["name"].as_str().unwrap_or("").to_string();
    v["text"] = json!(match remainder.as_str() {
        "" => format!("[User attached image: {name}]"),
        r => r.to_string(),
    });
    v["remainder"] = json!(remainder);
    Ok(v)
}

/// Hermes' codes for uploaded bytes that are not base64 (4017) and a write that failed (5027).
const NOT_BASE64: i64 = 4017;
const WRITE_FAILED: i64 = 5027;

/// `image.attach_bytes {session_id, content_base64 | data}`: an image a client on another
/// machine uploads (base64, a `data:image/…;base64,` URL's prefix and whitespace allowed),
/// saved as `$HERMES_HOME/images/upload_<UTC time>_<n>.<type>` and attached as `image.attach`
/// attaches a file; its type is read from its bytes.
pub fn image_attach_bytes(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let raw = match params::opt_str(p, "content_base64")? {
        Some(text) if !text.trim().is_empty() => text,
        _ => params::opt_str(p, "data")?.unwrap_or(""),
    };
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(RpcError::new(PATH_REQUIRED, "content_base64 required"));
    }
    let max = gw.cfg.image_max_bytes;
    // Checked before decoding: base64 is 4 characters for 3 bytes.
    if raw.len() as u64 / 4 * 3 > max + 3 {
        let why = format!("image too large (over {})", images::size_words(max));
        return Err(RpcError::new(TOO_LARGE, why));
    }
    let body = match raw
        .strip_prefix("data:image/")
        .and_then(|r| r.split_once(";base64,"))
    {
        Some((_, b64)) => b64,
        None => raw,
    };
    let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(bytes) = crate::model::connect::base64_decode(&compact) else {
        return Err(RpcError::new(NOT_BASE64, "data is not valid base64"));
    };
    if bytes.is_empty() {
        return Err(RpcError::new(NOT_BASE64, "image is empty"));
    }
    if bytes.len() as u64 > max {
        let why = format!(
            "image too large ({} bytes; cap is {})",
            bytes.len(),
            images::size_words(max)
        );
        return Err(RpcError::new(TOO_LARGE, why));
    }
    let ext = match images::sniff(&bytes) {
        Some((mime, true)) => mime.trim_start_matches("image/").replace("jpeg", "jpg"),
        _ => {
            let why = images::from_bytes(bytes).err().unwrap_or_default();
            return Err(RpcError::new(NOT_AN_IMAGE, why));
        }
    };
    let count = live(gw, p)?.attached_images.len();
    let home = gw.cfg.home.clone();
    let written = crate::private_file::private_dir(&home, &["images"]).and_then(|dir| {
        let (y, mo, d, h, mi, s) = crate::util::utc_parts(crate::util::unix_now());
        let name = format!(
            "upload_{y:04}{mo:02}{d:02}_{h:02}{mi:02}{s:02}_{}_{}.{ext}",
            count + 1,
            crate::util::random_hex(6)
        );
        let file = dir.join(name);
        crate::private_file::create_new(&file, &bytes).map(|()| file)
    });
    let file = written.map_err(|e| RpcError::new(WRITE_FAILED, format!("write failed: {e}")))?;
    let attached = attach(gw, p, &file);
    if attached.is_err() {
        let _ = std::fs::remove_file(&file);
    }
    let mut v = attached?;
    let name = v["name"].as_str().unwrap_or("").to_string();
    v["text"] = json!(format!("[User attached image: {name}]"));
    v["remainder"] = json!("");
    v["bytes"] = json!(bytes.len());
    Ok(v)
}

/// `image.detach {session_id, path}`.
pub fn image_detach(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let raw = params::opt_str(p, "path")?.unwrap_or("").trim().to_string();
    if raw.is_empty() {
        return Err(RpcError::new(PATH_REQUIRED, "path required"));
    }
    let list = attached(live(gw, p)?);
    let before = list.len();
    list.retain(|p| p != Path::new(&raw));
    Ok(json!({ "detached": list.len() != before, "count": list.len() }))
}

/// `input.detect_drop {session_id, text}`: a submitted text that is the path of an image
/// (maybe with words after it) attaches it; the path of another file is named in the prompt
/// (`[User attached file: …]`, Hermes'); anything else is not a drop.
pub fn detect_drop(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let text = params::opt_str(p, "text")?.unwrap_or("").trim().to_string();
    params::opt_str(p, "session_id")?;
    let no = || Ok(json!({ "matched": false }));
    let path_like = ["/", "~/", "./", "../", "'", "\"", "file://"];
    if text.contains('\n') || !path_like.iter().any(|s| text.starts_with(s)) {
        return no();
    }
    let Ok(s) = live(gw, p) else {
        return no();
    };
    let cwd = PathBuf::from(&s.cwd);
    let (image, remainder) = path::locate(&text, &cwd, crate::util::user_home().as_deref(), |p| {
        p.is_file()
    });
    if !image.is_file() {
        return no();
    }
    if !path::has_image_extension(&image) {
        // Another file: named in the prompt for the model's file tools (Hermes' answer).
        let text = format!("[User attached file: {}]", image.display());
        let name = image.file_name().unwrap_or_default().to_string_lossy();
        return Ok(json!({
            "matched": true,
            "is_image": false,
            "path": image.to_string_lossy(),
            "name": name,
            "text": match remainder.as_str() {
                "" => text,
                r => format!("{text}\n{r}"),
            },
        }));
    }
    let mut v = attach(gw, p, &image)?;
    let name = v["name"].as_str().unwrap_or("").to_string();
    v["matched"] = json!(true);
    v["is_image"] = json!(true);
    v["text"] = json!(match remainder.as_str() {
        "" => format!("[User attached image: {name}]"),
        r => r.to_string(),
    });
    Ok(v)
}

/// `clipboard.paste {session_id}`: the clipboard's image saved under `$HERMES_HOME/images/` and
/// attached; answered when the clipboard tool ends (`None` now).
pub fn clipboard_paste(
    gw: &mut Gateway,
    id: &crate::rpc::frame::Id,
    p: &Params,
    now: Instant,
) -> Option<Result<Value, RpcError>> {
    let max = gw.cfg.image_max_bytes;
    let home = gw.cfg.home.clone();
    let s = match live(gw, p) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    let cwd = PathBuf::from(&s.cwd);
    let list = attached(s);
    let out = clipboard::target(&home, crate::util::unix_now(), list.len() + 1);
    // Listed now, as the answer cannot reach the session; a failed paste leaves no file and
    // drops out of the list (`attached`).
    list.push(out.clone());
    let command = clipboard::command(&out, max, list.len());
    let started = crate::tools::runs::run_for_request(
        gw,
        id.clone(),
        &command,
        &cwd,
        PASTE_TIMEOUT,
        paste_answer,
        now,
    );
    match started {
        Ok(()) => None,
        Err(why) => {
            if let Ok(s) = live(gw, p) {
                s.attached_images.retain(|p| p != &out);
            }
            Some(Ok(json!({ "attached": false, "message": why })))
        }
    }
}

/// The answer to `clipboard.paste` from what its command printed.
fn paste_answer(outcome: &crate::tools::runs::Outcome) -> Value {
    let Some(said) = clipboard::outcome(&outcome.output) else {
        let why = outcome
            .start_error
            .clone()
            .unwrap_or_else(|| crate::util::clip(outcome.output.trim(), 200));
        return json!({ "attached": false, "message": format!("could not read the clipboard: {why}") });
    };
    let refuse = |why: String| {
        let _ = std::fs::remove_file(&said.path);
        json!({ "attached": false, "message": why })
    };
    if let Err(why) = said.saved {
        return refuse(why);
    }
    match images::probe(&said.path, said.max) {
        Ok(img) => {
            let mut v = images::meta(&said.path, &img.bytes);
            v["attached"] = json!(true);
            v["path"] = json!(said.path.to_string_lossy());
            v["count"] = json!(said.count);
            v
        }
        Err(why) => refuse(why),
    }
}

/// What a prepared prompt's worker hands back: the prompt, and the images left out and why.
type Prepared = Arc<Mutex<Option<(String, Vec<String>)>>>;

/// The sessions whose prompt waits for its images to be read, made to fit or described (off
/// the loop, on a worker thread), each with the prompts submitted after it, in order.
#[derive(Default)]
pub struct Preparing {
    going: HashMap<String, Pending>,
}

struct Pending {
    /// The prompt being prepared, as submitted (kept if the session leaves first).
    first: Option<(String, Vec<PathBuf>)>,
    done: Prepared,
    /// An interrupt came while it was prepared: its turn ends as soon as it starts (Hermes').
    interrupted: bool,
    /// Prompts submitted meanwhile (text and images), run after it in order.
    held: VecDeque<(String, Vec<PathBuf>)>,
}

/// Submit `text` with the session's attached images (taken) as its next prompt: at once when
/// it has none, else once a worker has read them and made each fit (a model that sees images)
/// or had each described by the vision model (one that does not: the user told once a
/// session). True when the prompt waits behind another.
pub fn submit(gw: &mut Gateway, rid: &str, text: &str, now: Instant) -> bool {
    let Some(s) = gw.sessions.get_mut(rid) else {
        return gw.submit_prompt(rid, text.to_string(), now);
    };
    let paths = std::mem::take(attached(s));
    let busy = s.running() || s.loading();
    if let Some(p) = gw.preparing.going.get_mut(rid) {
        p.held.push_back((text.to_string(), paths));
        keep_waiting(gw, rid);
        return true;
    }
    if paths.is_empty() {
        return gw.submit_prompt(rid, text.to_string(), now);
    }
    prepare(gw, rid, text, paths, VecDeque::new());
    busy
}

/// Start the worker that makes `text` and the images at `paths` into the prompt to run.
fn prepare(
    gw: &mut Gateway,
    rid: &str,
    text: &str,
    paths: Vec<PathBuf>,
    held: VecDeque<(String, Vec<PathBuf>)>,
) {
    let cfg = gw.cfg.clone();
    // Read only for a prompt with images: config.yaml's routing keys.
    let config = crate::config_file::load(&cfg.home).unwrap_or(yaml_rust2::Yaml::Null);
    let Some(s) = gw.sessions.get_mut(rid) else {
        return;
    };
    let mode = route::decide(&config, &s.provider, &s.model);
    let asking = route::vision_settings(&cfg, &config, &s.provider, &s.model);
    if mode == route::Mode::Text && !std::mem::replace(&mut s.told_no_vision, true) {
        let model = s.model.clone();
        gw.emit(
            rid,
            "status.update",
            json!({"kind": "warn", "text": format!(
                "{model} does not take images: the vision model describes each one before the turn"
            )}),
        );
    }
    let done: Prepared = Arc::default();
    let put = done.clone();
    let job = gw.tools.new_job_id();
    // Not a tool's job: waking it only wakes the loop, whose `pump` looks for the answer.
    let waker = gw.tools.wakers.waker(job);
    let first = Some((text.to_string(), paths.clone()));
    let text = text.to_string();
    let work = move || {
        let max = cfg.image_max_bytes;
        let prepared = match mode {
            route::Mode::Native => images::native_prompt(&text, &paths, max),
            route::Mode::Text => {
                let vision = crate::model::vision::vision_model(&asking, &config);
                let describe = |url: &str| match &vision {
                    Ok(v) => v.ask(images::DESCRIBE_PROMPT, url, DESCRIBE_TIMEOUT),
                    Err(why) => Err(why.clone()),
                };
                (
                    images::described_prompt(&text, &paths, max, describe),
                    Vec::new(),
                )
            }
        };
        *put.lock().unwrap_or_else(|p| p.into_inner()) = Some(prepared);
        waker.wake();
    };
    let spawned = std::thread::Builder::new()
        .name("prompt-images".into())
        .spawn(work);
    if let Err(e) = spawned {
        let why = format!("images not sent: cannot start the worker: {e}");
        *done.lock().unwrap_or_else(|p| p.into_inner()) = Some((String::new(), vec![why]));
    }
    let pending = Pending {
        first,
        done,
        interrupted: false,
        held,
    };
    gw.preparing.going.insert(rid.to_string(), pending);
    keep_waiting(gw, rid);
}

/// The prompts of `p` as they are kept if they never run: each as the user wrote it, with each
/// image not sent named after the text; oldest first.
fn unsent_of(p: &Pending) -> Vec<String> {
    p.first
        .iter()
        .chain(&p.held)
        .map(|(text, paths)| {
            let notes = paths
                .iter()
                .map(|path| format!("\n[image not sent: {}]", path.display()));
            std::iter::once(text.clone()).chain(notes).collect()
        })
        .collect()
}

/// The session's prompts waiting for their images, stored with its queue (the commit that
/// ends this iteration writes them before the answer saying they were taken leaves): a
/// SIGKILL keeps them as a queued prompt is kept, the start after it makes them user messages.
fn keep_waiting(gw: &mut Gateway, rid: &str) {
    let waiting = gw
        .preparing
        .going
        .get(rid)
        .map(unsent_of)
        .unwrap_or_default();
    let Some(s) = gw.sessions.get_mut(rid) else {
        return;
    };
    if s.images_waiting != waiting {
        s.images_waiting = waiting;
        s.queue_dirty = true;
        gw.mark_dirty(rid);
    }
}

/// `rid` leaves memory while prompts wait for their images: they were accepted, so they are
/// kept as the user wrote them (each image not sent named after the text), oldest first.
pub fn take_unsent(gw: &mut Gateway, rid: &str) -> Vec<String> {
    let Some(p) = gw.preparing.going.remove(rid) else {
        return Vec::new();
    };
    // The caller queues them: stored there from now on, not twice.
    if let Some(s) = gw.sessions.get_mut(rid) {
        s.images_waiting.clear();
    }
    unsent_of(&p)
}

/// The vision model's bound for one description (Hermes' default `auxiliary.vision.timeout`).
const DESCRIBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// An interrupt of `rid`: a prompt still being prepared ends as soon as its turn starts.
pub fn interrupt(gw: &mut Gateway, rid: &str) {
    if let Some(p) = gw.preparing.going.get_mut(rid) {
        p.interrupted = true;
    }
}

/// Run the prompts whose images are ready (each iteration; nothing to do while none waits).
pub fn pump(gw: &mut Gateway, now: Instant) {
    if gw.preparing.going.is_empty() {
        return;
    }
    let ready: Vec<String> = gw
        .preparing
        .going
        .iter()
        .filter(|(_, p)| p.done.lock().unwrap_or_else(|e| e.into_inner()).is_some())
        .map(|(rid, _)| rid.clone())
        .collect();
    for rid in ready {
        let Some(p) = gw.preparing.going.remove(&rid) else {
            continue;
        };
        if !gw.sessions.contains_key(&rid) {
            continue;
        }
        let taken = p.done.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (prompt, skipped) = taken.unwrap_or_default();
        gw.isolated(Some(&rid), now, |gw| {
            for why in skipped {
                gw.emit(
                    &rid,
                    "status.update",
                    json!({"kind": "warn", "text": format!("image not sent: {why}")}),
                );
            }
            gw.submit_prompt(&rid, prompt, now);
            if p.interrupted {
                gw.interrupt_turn(&rid, now);
            }
            let mut held = p.held;
            while let Some((text, paths)) = held.pop_front() {
                if !paths.is_empty() {
                    prepare(gw, &rid, &text, paths, held);
                    break;
                }
                gw.submit_prompt(&rid, text, now);
            }
            // In the transcript or the queue now (or waiting again, the held ones): the stored
            // queue says so in the same commit.
            keep_waiting(gw, &rid);
        });
    }
}
