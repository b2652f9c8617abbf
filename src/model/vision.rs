//! `vision_analyze`'s model call: which model answers (`auxiliary.vision` of config.yaml —
//! `provider`, `model`, `base_url`, `api_key` — else the configured one), and one request
//! with the image in the endpoint's own API, made on the tool's worker thread
//! (`blocking.rs`), its streamed answer read by the wire's decoder. Keys stay in `model/`.

use std::time::Duration;

use serde_json::{Value, json};
use yaml_rust2::Yaml;

use super::blocking::{self, Exchange};
use super::endpoint::Endpoint;
use super::sse::SseParser;
use super::{ModelEvent, ModelRequest};
use crate::config::Config;
use crate::transcript::{self, Message, Role};

/// Longest answer read.
const ANSWER_MAX: usize = 4 * 1024 * 1024;

/// Who answers: the endpoint and the model name.
pub struct Vision {
    endpoint: Endpoint,
    pub model: String,
}

/// The vision model of the home `cfg` names, as `config` (its config.yaml) says.
pub fn vision_model(cfg: &Config, config: &Yaml) -> Result<Vision, String> {
    let side = super::auxiliary::side(cfg, config, "vision");
    let mut endpoint = super::select::endpoint(cfg, side.asked)?;
    if let Some(key) = side.api_key {
        endpoint.api_key = Some(key.to_string());
    }
    let model = side.model_for(&endpoint);
    Ok(Vision { endpoint, model })
}

impl Vision {
    /// Ask about the image at `data_url` (blocking: a worker thread's call).
    pub fn ask(&self, prompt: &str, data_url: &str, timeout: Duration) -> Result<String, String> {
        let parts = [
            json!({"type": "text", "text": prompt}),
            json!({"type": "image_url", "image_url": {"url": data_url}}),
        ];
        let messages = [Message::new(
            Role::User,
            Some(transcript::encode_parts(&parts)),
            crate::util::unix_now(),
        )];
        let req = ModelRequest {
            system: None,
            messages: &messages,
            model: &self.model,
            tools: &[],
            reasoning_effort: None,
            fast: false,
            session_id: None,
            limits: Default::default(),
        };
        let wire = self
            .endpoint
            .wire_by_model
            .map_or(self.endpoint.wire, |rule| rule.wire(&self.model));
        let mut request = wire.request(&req, &self.endpoint);
        if let Some(body) = request.body.as_object_mut() {
            for (k, v) in &self.endpoint.extra_body {
                body.insert(k.clone(), v.clone());
            }
        }
        let url = super::http::Url::parse(&self.endpoint.base_url)?;
        let mut headers = request.headers.clone();
        headers.extend(self.endpoint.headers.iter().cloned());
        headers.push(("Content-Type".into(), "application/json".into()));
        headers.push(("Accept".into(), "text/event-stream".into()));
        let body = request.body.to_string();
        let answer = blocking::exchange(&Exchange {
            method: "POST",
            url: &url,
            target: &url.target(request.path),
            headers: &headers,
            body: Some(body.as_bytes()),
            answer_max: ANSWER_MAX,
            timeout,
            // The user's own model endpoint: a local server is a usual place for one.
            address_ok: &|_| Ok(()),
        })?;
        if answer.status != 200 {
            let text = String::from_utf8_lossy(&answer.body);
            return Err(format!(
                "the vision model answered HTTP {}: {}",
                answer.status,
                crate::util::clip(text.trim(), 300)
            ));
        }
        read_answer(wire.decoder_for(&req, &self.endpoint), &answer)
    }
}

/// The text of a streamed answer (or of a plain JSON one, from a server that does not stream).
fn read_answer(
    mut decoder: Box<dyn super::wire::Decoder>,
    answer: &blocking::Answer,
) -> Result<String, String> {
    if answer.content_type == "application/json" {
        let v: Value = serde_json::from_slice(&answer.body).map_err(|e| e.to_string())?;
        let text = v["choices"][0]["message"]["content"]
            .as_str()
            .or(v["content"][0]["text"].as_str())
            .unwrap_or("");
        return Ok(text.to_string());
    }
    let mut events = Vec::new();
    let mut failure = None;
    let mut parser = SseParser::default();
    let mut data = Vec::new();
    parser.feed(&answer.body, |d| data.push(d.to_string()))?;
    parser.finish(|d| data.push(d.to_string()));
    let mut done = false;
    for d in data {
        if d.trim() == "[DONE]" || done {
            break;
        }
        done = decoder.on_data(&d, &mut events)?;
    }
    decoder.finish(&mut events);
    let mut text = String::new();
    for ev in events {
        match ev {
            ModelEvent::Text(t) => text.push_str(&t),
            ModelEvent::Failed(why) => failure = Some(why),
            _ => {}
        }
    }
    match failure {
        Some(why) if text.is_empty() => Err(why),
        _ => Ok(text),
    }
}
