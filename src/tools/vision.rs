//! `vision_analyze` (Hermes' schema and result shape): a local image file, an `http(s)` URL
//! (`images/fetch.rs`: bounded, no internal addresses unless allowed) or a `data:` URL,
//! described by the vision model (`model/vision.rs`: `auxiliary.vision`, else the session's
//! model when it sees images, else the configured one: `images/route.rs`). The download and
//! the model call run on a worker thread that wakes the call when done; the loop never waits
//! on them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::{JobId, Start, Tool, ToolContext, ToolResult};
use crate::images;

/// A download's bound in time.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// The vision model's (Hermes' default `auxiliary.vision.timeout`).
const MODEL_TIMEOUT: Duration = Duration::from_secs(120);

const DESCRIPTION: &str = "Look at an image: a URL, a file path or a data: URL. A vision model (yours, when you see images) describes it and answers the question asked. Use it whenever the user points you at an image.";

type Slot = Arc<Mutex<Option<Result<String, String>>>>;

/// The calls in flight, each with where its worker puts the answer.
#[derive(Default)]
pub struct VisionAnalyze {
    going: HashMap<JobId, Slot>,
}

/// Where the image comes from.
enum Source {
    File(PathBuf),
    Url(String),
    DataUrl(String),
}

fn source(raw: &str, cwd: &str) -> Source {
    let raw = raw.trim();
    if raw.starts_with("http://") || raw.starts_with("https://") {
        return Source::Url(raw.to_string());
    }
    if raw.starts_with("data:") {
        return Source::DataUrl(raw.to_string());
    }
    let home = crate::util::user_home();
    let (path, _) = images::path::locate(raw, cwd.as_ref(), home.as_deref(), |_| true);
    Source::File(path)
}

/// The image as a data URL.
fn data_url(src: &Source, max: u64, allow_private: bool) -> Result<String, String> {
    let image = match src {
        Source::File(p) => images::load_to_send(p, max)?,
        Source::Url(u) => images::shrink::fit(images::from_bytes(images::fetch::download(
            u,
            max,
            allow_private,
            DOWNLOAD_TIMEOUT,
        )?)?)?,
        Source::DataUrl(d) => {
            let ok = d.starts_with("data:image/") && d.contains(";base64,");
            if !ok {
                return Err("a data URL must be a base64 image (data:image/...;base64,...)".into());
            }
            if d.len() as u64 > max.div_ceil(3) * 4 + 64 {
                return Err(format!("image too large: over {}", images::size_words(max)));
            }
            return Ok(d.clone());
        }
    };
    Ok(image.data_url())
}

/// Hermes' answer for a failure: `success: false`, the error, and words for the model.
fn failure(why: &str) -> ToolResult {
    let mut r = ToolResult::new(
        json!({
            "success": false,
            "error": format!("Error analyzing image: {why}"),
            "analysis": format!("There was a problem with the request and the image could not be analyzed. Error: {why}"),
        }),
        crate::util::clip(why, 120),
    );
    r.error = Some(why.to_string());
    r
}

impl Tool for VisionAnalyze {
    fn name(&self) -> &str {
        "vision_analyze"
    }

    fn toolset(&self) -> &str {
        "vision"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "image_url": {"type": "string", "description": "An http(s) URL, a file path or a data: URL."},
                "question": {"type": "string", "description": "What you want to know about it."}
            },
            "required": ["image_url", "question"]
        })
    }

    fn start(&mut self, ctx: &mut ToolContext<'_>, args: &Value) -> Start {
        let Some(raw) = args["image_url"].as_str().filter(|s| !s.trim().is_empty()) else {
            return Start::Done(failure("image_url is required"));
        };
        if ctx.shutting_down {
            return Start::Done(failure("the gateway is shutting down"));
        }
        let question = args["question"].as_str().unwrap_or("").to_string();
        let src = source(raw, &ctx.cwd);
        let cfg = crate::config::Config {
            home: ctx.home.to_path_buf(),
            ..Default::default()
        };
        let (provider, model) = (ctx.provider.to_string(), ctx.model.to_string());
        let max = cfg.image_max_bytes;
        let slot: Slot = Arc::default();
        let put = slot.clone();
        let waker = ctx.waker();
        let work = move || {
            let config = crate::config_file::load(&cfg.home).unwrap_or(yaml_rust2::Yaml::Null);
            let allow_private = config["security"]["allow_private_urls"]
                .as_bool()
                .unwrap_or(false);
            let prompt = format!(
                "Fully describe and explain everything about this image, then answer the following question:\n\n{question}"
            );
            let answer = data_url(&src, max, allow_private).and_then(|url| {
                let asking = images::route::vision_settings(&cfg, &config, &provider, &model);
                let vision = crate::model::vision::vision_model(&asking, &config)?;
                vision.ask(&prompt, &url, MODEL_TIMEOUT)
            });
            *put.lock().unwrap_or_else(|p| p.into_inner()) = Some(answer);
            waker.wake();
        };
        if let Err(e) = std::thread::Builder::new()
            .name("vision_analyze".into())
            .spawn(work)
        {
            return Start::Done(failure(&format!("cannot start the worker: {e}")));
        }
        self.going.insert(ctx.job, slot);
        Start::Later
    }

    fn step(&mut self, ctx: &mut ToolContext<'_>, _args: &Value) -> Option<ToolResult> {
        let slot = self.going.get(&ctx.job)?;
        let answer = slot.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        self.going.remove(&ctx.job);
        Some(match answer {
            Ok(text) if !text.trim().is_empty() => {
                let summary = crate::util::clip(text.lines().next().unwrap_or(""), 80);
                ToolResult::new(json!({"success": true, "analysis": text}), summary)
            }
            Ok(_) => failure("the vision model gave no answer"),
            Err(why) => failure(&why),
        })
    }

    fn cancel(&mut self, job: JobId) -> Option<ToolResult> {
        // The worker ends on its own bounds; its answer goes nowhere.
        self.going.remove(&job);
        Some(failure("interrupted"))
    }
}
