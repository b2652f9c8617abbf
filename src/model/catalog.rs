//! `GET {base_url}/models` for the model picker, on the loop (`oneshot.rs`), and the model ids
//! of its answer, bounded.

use std::time::{Duration, Instant};

use crate::reactor::Slot;
use serde_json::Value;

use super::endpoint::Endpoint;
use super::oneshot::{OneShot, Request};
use super::wire::{Wire, messages};

/// Largest answer read; a longer one is cut off and reported.
const BODY_MAX: usize = 4 * 1024 * 1024;
/// Model ids kept from one answer, and the longest id kept.
const IDS_MAX: usize = 1000;
const ID_LEN_MAX: usize = 256;
/// The fetch's own bound (the picker's wait is shorter, `methods::models`).
const FETCH_MAX: Duration = Duration::from_secs(30);

/// One fetch in flight.
pub struct ModelsFetch {
    shot: OneShot,
}

/// Where a fetch stands after being advanced.
pub enum Fetched {
    Pending,
    Done(Result<Vec<String>, String>),
}

impl ModelsFetch {
    /// Start fetching `to`'s list; readiness of its sources is reported on `slot`.
    pub fn start(to: &Endpoint, slot: &Slot, now: Instant) -> Result<ModelsFetch, String> {
        let (path, headers) = list_request(to);
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let shot = OneShot::start(
            &Request {
                method: "GET",
                url: &to.base_url,
                path,
                headers: &headers,
                form: None,
                answer_max: BODY_MAX,
            },
            FETCH_MAX,
            slot,
            now,
        )?;
        Ok(ModelsFetch { shot })
    }

    /// Stop and release every source.
    pub fn abort(&mut self, slot: &Slot) {
        self.shot.abort(slot);
    }

    /// Make all the progress possible now (sources are edge-triggered: read to `WouldBlock`).
    pub fn advance(&mut self, slot: &Slot, now: Instant) -> Fetched {
        match self.shot.advance(slot, now) {
            None => Fetched::Pending,
            Some(Err(e)) => Fetched::Done(Err(e)),
            Some(Ok(a)) if a.status != 200 => Fetched::Done(Err(format!(
                "the server answered {} {}",
                a.status, a.reason
            ))),
            Some(Ok(a)) => Fetched::Done(parse_ids(&a.body)),
        }
    }
}

/// Where below the base URL the list is and the headers asking for it: what the endpoint's
/// wire wants (Anthropic's `x-api-key` and `anthropic-version`), else the key as a bearer token.
fn list_request(to: &Endpoint) -> (&'static str, Vec<(String, String)>) {
    if to.wire == Wire::AnthropicMessages {
        return messages::models_request(to);
    }
    let bearer = to.api_key.as_deref().filter(|k| !k.is_empty());
    let headers = bearer.map(|k| ("Authorization".to_string(), format!("Bearer {k}")));
    ("/models", headers.into_iter().collect())
}

/// Model ids of an OpenAI-style `{"data": [{"id": …}]}` answer (or Ollama's
/// `{"models": [{"name": …}]}`), in the server's order, bounded.
pub fn parse_ids(body: &[u8]) -> Result<Vec<String>, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the model list is not JSON ({e})"))?;
    let list = v
        .get("data")
        .or_else(|| v.get("models"))
        .and_then(Value::as_array)
        .ok_or("the model list has no `data` array")?;
    let mut ids: Vec<String> = Vec::new();
    for m in list {
        let id = m
            .get("id")
            .or_else(|| m.get("name"))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|id| {
                !id.is_empty() && id.len() <= ID_LEN_MAX && !id.contains(char::is_control)
            });
        if let Some(id) = id
            && !ids.iter().any(|i| i == id)
        {
            ids.push(id.to_string());
            if ids.len() >= IDS_MAX {
                break;
            }
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_order_deduplicated_and_bounded() {
        let ids =
            parse_ids(br#"{"data":[{"id":"b"},{"id":"a"},{"id":"b"},{"x":1},{"id":""}]}"#).unwrap();
        assert_eq!(ids, ["b", "a"]);
        let ids = parse_ids(br#"{"models":[{"name":"llama3"}]}"#).unwrap();
        assert_eq!(ids, ["llama3"]);
        assert!(parse_ids(b"<html>").is_err());
        assert!(parse_ids(br#"{"data":3}"#).is_err());
        let many: Vec<Value> = (0..5000)
            .map(|i| serde_json::json!({ "id": format!("m{i}") }))
            .collect();
        let body = serde_json::json!({ "data": many }).to_string();
        assert_eq!(parse_ids(body.as_bytes()).unwrap().len(), IDS_MAX);
    }
}
