//! The Responses API's side of the mock: a streamed answer to `POST /responses` as the API
//! writes it — `response.created`, each output item opened, streamed and closed
//! (`output_item.added`, its deltas, `output_item.done`), then `response.completed` (or
//! `response.failed`), each event with its `sequence_number`, and no `[DONE]`.

use serde_json::{Value, json};

use super::{End, Reply, Stream};

/// An answer being written, item by item.
pub struct Answer {
    events: Vec<Value>,
    /// Output items so far (the next one's `output_index`).
    items: u64,
}

impl Default for Answer {
    fn default() -> Self {
        Self::new()
    }
}

impl Answer {
    pub fn new() -> Answer {
        let mut a = Answer {
            events: Vec::new(),
            items: 0,
        };
        let head = json!({"id": "resp_mock", "object": "response", "status": "in_progress",
                          "model": "gpt-5", "output": [], "usage": null});
        a.push(json!({"type": "response.created", "response": head}));
        a.push(json!({"type": "response.in_progress", "response": head}));
        a
    }

    fn push(&mut self, mut ev: Value) {
        ev["sequence_number"] = json!(self.events.len());
        self.events.push(ev);
    }

    fn next_index(&mut self) -> u64 {
        self.items += 1;
        self.items - 1
    }

    /// A reasoning item: its summary streamed part by part, sealed as `encrypted` (none: the
    /// server keeps nothing to replay).
    pub fn reasoning(mut self, id: &str, summary: &[&str], encrypted: Option<&str>) -> Answer {
        let oi = self.next_index();
        self.push(
            json!({"type": "response.output_item.added", "output_index": oi,
                         "item": {"id": id, "type": "reasoning", "summary": []}}),
        );
        for (si, text) in summary.iter().enumerate() {
            self.push(
                json!({"type": "response.reasoning_summary_part.added", "item_id": id,
                             "output_index": oi, "summary_index": si,
                             "part": {"type": "summary_text", "text": ""}}),
            );
            self.push(
                json!({"type": "response.reasoning_summary_text.delta", "item_id": id,
                             "output_index": oi, "summary_index": si, "delta": text}),
            );
            self.push(
                json!({"type": "response.reasoning_summary_text.done", "item_id": id,
                             "output_index": oi, "summary_index": si, "text": text}),
            );
        }
        let mut item = json!({"id": id, "type": "reasoning",
            "summary": summary.iter().map(|t| json!({"type": "summary_text", "text": t}))
                .collect::<Vec<_>>()});
        if let Some(sealed) = encrypted {
            item["encrypted_content"] = json!(sealed);
        }
        self.push(json!({"type": "response.output_item.done", "output_index": oi, "item": item}));
        self
    }

    /// A message item whose text streams in `pieces`.
    pub fn text(mut self, id: &str, pieces: &[&str]) -> Answer {
        let oi = self.next_index();
        self.push(
            json!({"type": "response.output_item.added", "output_index": oi,
            "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant",
                     "content": []}}),
        );
        self.push(json!({"type": "response.content_part.added", "item_id": id,
            "output_index": oi, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}));
        for p in pieces {
            self.push(json!({"type": "response.output_text.delta", "item_id": id,
                "output_index": oi, "content_index": 0, "delta": p, "logprobs": []}));
        }
        let whole: String = pieces.concat();
        self.push(json!({"type": "response.output_text.done", "item_id": id,
            "output_index": oi, "content_index": 0, "text": whole}));
        self.push(
            json!({"type": "response.output_item.done", "output_index": oi,
            "item": {"id": id, "type": "message", "status": "completed", "role": "assistant",
                     "content": [{"type": "output_text", "text": whole, "annotations": []}]}}),
        );
        self
    }

    /// A function call whose arguments (`args`, JSON text) stream in pieces of `frag` bytes.
    pub fn call(
        mut self,
        item_id: &str,
        call_id: &str,
        name: &str,
        args: &str,
        frag: usize,
    ) -> Answer {
        let oi = self.next_index();
        self.push(
            json!({"type": "response.output_item.added", "output_index": oi,
            "item": {"id": item_id, "type": "function_call", "status": "in_progress",
                     "arguments": "", "call_id": call_id, "name": name}}),
        );
        let mut rest = args;
        while !rest.is_empty() {
            let mut cut = frag.max(1).min(rest.len());
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            self.push(json!({"type": "response.function_call_arguments.delta",
                "item_id": item_id, "output_index": oi, "delta": &rest[..cut]}));
            rest = &rest[cut..];
        }
        self.push(
            json!({"type": "response.function_call_arguments.done", "item_id": item_id,
            "output_index": oi, "arguments": args}),
        );
        self.push(
            json!({"type": "response.output_item.done", "output_index": oi,
            "item": {"id": item_id, "type": "function_call", "status": "completed",
                     "arguments": args, "call_id": call_id, "name": name}}),
        );
        self
    }

    /// The answer's events, ending with `response.completed` and its `usage`.
    pub fn completed(mut self, usage: Value) -> Vec<String> {
        self.push(json!({"type": "response.completed", "response": {
            "id": "resp_mock", "object": "response", "status": "completed", "model": "gpt-5",
            "output": [], "usage": usage}}));
        self.strings()
    }

    /// The answer's events, ending with `response.failed` and the server's error.
    pub fn failed(mut self, code: &str, message: &str) -> Vec<String> {
        self.push(json!({"type": "response.failed", "response": {
            "id": "resp_mock", "object": "response", "status": "failed",
            "error": {"code": code, "message": message}, "output": [], "usage": null}}));
        self.strings()
    }

    fn strings(self) -> Vec<String> {
        self.events.iter().map(Value::to_string).collect()
    }
}

/// The API's `usage`: `input` counts the `cached` tokens too; `reasoning` is part of `output`.
pub fn usage(input: u64, cached: u64, output: u64, reasoning: u64) -> Value {
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
           "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
           "total_tokens": input + output})
}

/// A 200 event stream of `events`, ended as the API ends it (chunked, no `[DONE]`).
pub fn reply(events: Vec<String>) -> Reply {
    Reply::Stream(Stream::new(events).end(End::Last))
}

/// The `input` items of a recorded request's body.
pub fn input_items(body: &Value) -> Vec<Value> {
    body["input"].as_array().cloned().unwrap_or_default()
}
