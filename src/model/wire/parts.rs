//! A user message made of parts (text and images, stored as Hermes stores them: OpenAI-style
//! `text` and `image_url` parts) in each API's shape. Pure.

use serde_json::{Value, json};

use crate::transcript::{self, Message};

/// The parts of a message's content, when it is made of parts.
pub fn of(m: &Message) -> Option<Vec<Value>> {
    transcript::parts_of(m.content.as_deref()?)
}

/// The URL of an image part (a `data:` URL or an `http(s)` one).
fn image_url(part: &Value) -> Option<&str> {
    let url = &part["image_url"];
    url.get("url")
        .and_then(Value::as_str)
        .or(url.as_str())
        .filter(|u| !u.is_empty())
}

/// Chat Completions: the parts as they are, text and images only.
pub fn chat(parts: &[Value]) -> Value {
    let kept = parts.iter().filter_map(|p| {
        if let Some(text) = p["text"].as_str() {
            return Some(json!({"type": "text", "text": text}));
        }
        image_url(p).map(|url| json!({"type": "image_url", "image_url": {"url": url}}))
    });
    Value::Array(kept.collect())
}

/// Anthropic Messages: `text` blocks and `image` blocks (base64 source for a data URL, url
/// source for a web address).
pub fn anthropic(parts: &[Value]) -> Vec<Value> {
    parts
        .iter()
        .filter_map(|p| {
            if let Some(text) = p["text"].as_str().filter(|t| !t.is_empty()) {
                return Some(json!({"type": "text", "text": text}));
            }
            let url = image_url(p)?;
            let source = match data_url(url) {
                Some((media_type, data)) => {
                    json!({"type": "base64", "media_type": media_type, "data": data})
                }
                None => json!({"type": "url", "url": url}),
            };
            Some(json!({"type": "image", "source": source}))
        })
        .collect()
}

/// The Responses API: `input_text` and `input_image` parts.
pub fn responses(parts: &[Value]) -> Value {
    let kept = parts.iter().filter_map(|p| {
        if let Some(text) = p["text"].as_str() {
            return Some(json!({"type": "input_text", "text": text}));
        }
        image_url(p).map(|url| json!({"type": "input_image", "image_url": url}))
    });
    Value::Array(kept.collect())
}

/// A base64 data URL's media type and data.
fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (head, data) = rest.split_once(',')?;
    let media_type = head.strip_suffix(";base64")?;
    Some((media_type, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> Vec<Value> {
        vec![
            json!({"type": "text", "text": "what is this?"}),
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}),
            json!({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}),
        ]
    }

    #[test]
    fn each_api_gets_the_image_in_its_own_shape() {
        assert_eq!(
            chat(&parts())[1]["image_url"]["url"],
            "data:image/png;base64,iVBOR"
        );
        let blocks = anthropic(&parts());
        assert_eq!(
            blocks[1],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}})
        );
        assert_eq!(blocks[2]["source"]["type"], "url");
        let items = responses(&parts());
        assert_eq!(items[0]["type"], "input_text");
        assert_eq!(
            items[1],
            json!({"type": "input_image", "image_url": "data:image/png;base64,iVBOR"})
        );
    }
}
