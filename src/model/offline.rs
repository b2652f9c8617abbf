//! The offline model: no network, no key. It streams a reply word by word. A prompt that starts
//! with `$ ` or `!` becomes a `terminal` tool call of the rest, and `%NAME {JSON}` a call of
//! tool NAME with those arguments (`{}` when none are given); after the tool result it reports
//! the result. Usage counts whitespace-separated words: input = words of every message sent,
//! output = words of the reply.

use std::time::{Duration, Instant};

use super::{
    CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider, TokenUsage, ToolCall,
};
use crate::transcript::{Message, Role, SUMMARY_PREFIX, SUMMARY_REQUEST};
use crate::util;

pub struct OfflineProvider {
    word_delay: Duration,
}

impl OfflineProvider {
    pub fn new(word_delay: Duration) -> Self {
        OfflineProvider { word_delay }
    }
}

/// Words emitted per advance when there is no delay, so one long reply cannot starve the loop.
const BURST: usize = 64;

fn word_count(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

/// The reply being streamed, cut into pieces as it goes (a long prompt echoed back must not
/// become one allocation per word up front): each piece is a word with the whitespace before
/// it, the last one also takes the whitespace after it, so the pieces concatenate to the text.
struct Reply {
    text: String,
    at: usize,
}

impl Reply {
    fn next_piece(&mut self) -> Option<String> {
        let rest = &self.text[self.at..];
        if rest.is_empty() {
            return None;
        }
        let word_start = rest
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(rest.len());
        let word = &rest[word_start..];
        let mut end = self.at + word_start + word.find(char::is_whitespace).unwrap_or(word.len());
        if self.text[end..].chars().all(char::is_whitespace) {
            end = self.text.len();
        }
        let piece = self.text[self.at..end].to_string();
        self.at = end;
        Some(piece)
    }

    fn is_done(&self) -> bool {
        self.at >= self.text.len()
    }
}

/// The reply the offline model gives to a transcript.
pub fn plan_reply(messages: &[Message]) -> Plan {
    if let Some(summary) = offline_summary(messages) {
        return Plan::Say(summary);
    }
    let Some(last) = messages.last() else {
        return Plan::Say("(offline model) Nothing to answer.".into());
    };
    // A steering note after a tool result: report the result, then acknowledge the note.
    if crate::transcript::is_steer(last)
        && let Some(tool) = messages[..messages.len() - 1]
            .last()
            .filter(|m| m.role == Role::Tool)
    {
        let note = last.content.as_deref().unwrap_or("");
        let note = note
            .strip_prefix(crate::transcript::STEER_PREFIX)
            .unwrap_or(note);
        return Plan::Say(format!(
            "{}\n(offline model) Noted: {note}",
            report_tool_result(tool)
        ));
    }
    match last.role {
        Role::Tool => Plan::Say(report_tool_result(last)),
        _ => {
            let prompt = last.content.as_deref().unwrap_or("").trim();
            if let Some(call) = named_call(prompt) {
                return Plan::Tool(call);
            }
            let command = prompt
                .strip_prefix("$ ")
                .or_else(|| prompt.strip_prefix('!'))
                .map(str::trim);
            match command {
                Some(cmd) if !cmd.is_empty() => Plan::Tool(ToolCall {
                    id: format!("call_{}", crate::util::random_hex(12)),
                    name: "terminal".into(),
                    arguments: serde_json::json!({ "command": cmd }).to_string(),
                }),
                _ => Plan::Say(format!("(offline model) You said: {prompt}")),
            }
        }
    }
}

/// `%NAME {JSON}`: a call of tool NAME with those arguments.
fn named_call(prompt: &str) -> Option<ToolCall> {
    let rest = prompt.strip_prefix('%')?;
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if name.is_empty() {
        return None;
    }
    let args = args.trim();
    Some(ToolCall {
        id: format!("call_{}", crate::util::random_hex(12)),
        name: name.to_string(),
        arguments: if args.is_empty() { "{}" } else { args }.to_string(),
    })
}

/// Say what a tool's result was: a `terminal` result (`{output, exit_code, error}`) in words,
/// another tool's as it came.
fn report_tool_result(message: &Message) -> String {
    let content = message.content.as_deref().unwrap_or("");
    let name = message.tool_name.as_deref().unwrap_or("terminal");
    if name != "terminal" {
        return format!("(offline model) The tool {name} returned:\n{content}");
    }
    let v: serde_json::Value = serde_json::from_str(content).unwrap_or_default();
    let output = v["output"].as_str().unwrap_or(content);
    let status = match (v["exit_code"].as_i64(), v["error"].as_str()) {
        (_, Some(err)) => format!("did not run ({err})"),
        (Some(code), None) => format!("exited with status {code}"),
        (None, None) => "finished".to_string(),
    };
    format!("(offline model) The command {status}. Output:\n{output}")
}

/// The offline model's summary of a summary request; `None` for any other request.
pub fn offline_summary(request: &[Message]) -> Option<String> {
    let first = request.first()?;
    if first.role != Role::System || !first.content.as_deref()?.starts_with(SUMMARY_REQUEST) {
        return None;
    }
    let dump = request.get(1)?.content.as_deref().unwrap_or("");
    let (mut said, mut replies, mut calls) = (Vec::new(), 0, 0);
    for line in dump.lines() {
        if let Some(text) = line.strip_prefix("user: ") {
            said.push(format!("\"{}\"", util::clip(text, 40)));
        } else if line.starts_with("assistant: ") {
            replies += 1;
        } else if line.starts_with("tool call: ") {
            calls += 1;
        } else if let Some(text) = line.strip_prefix("system: ")
            && text.starts_with(SUMMARY_PREFIX)
        {
            said.insert(0, "(an earlier summary)".into());
        }
    }
    Some(format!(
        "(offline model) Earlier, the user said: {}. The assistant replied {replies} time(s) and \
         made {calls} tool call(s).",
        said.join("; ")
    ))
}

pub enum Plan {
    Say(String),
    Tool(ToolCall),
}

impl Provider for OfflineProvider {
    fn name(&self) -> &str {
        "offline"
    }

    fn default_model(&self) -> &str {
        "offline"
    }

    fn start(
        &mut self,
        req: ModelRequest<'_>,
        _ctx: &mut CallContext<'_>,
        _now: Instant,
    ) -> Box<dyn ModelCall> {
        let input: u64 = req
            .messages
            .iter()
            .map(|m| word_count(m.content.as_deref().unwrap_or("")))
            .sum();
        let (text, tool) = match plan_reply(req.messages) {
            Plan::Say(text) => (text, None),
            Plan::Tool(call) => (String::new(), Some(call)),
        };
        let output = word_count(&text) + tool.as_ref().map_or(0, |t| word_count(&t.arguments));
        let words = Reply { text, at: 0 };
        Box::new(OfflineCall {
            words,
            tool,
            usage: TokenUsage {
                input,
                output,
                // The offline model is free.
                cost_usd: Some(0.0),
                ..TokenUsage::default()
            },
            delay: self.word_delay,
            next_at: None,
        })
    }
}

struct OfflineCall {
    words: Reply,
    tool: Option<ToolCall>,
    usage: TokenUsage,
    delay: Duration,
    next_at: Option<Instant>,
}

impl ModelCall for OfflineCall {
    fn advance(
        &mut self,
        _ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        if self.delay.is_zero() {
            for _ in 0..BURST {
                match self.words.next_piece() {
                    Some(w) => out.push(ModelEvent::Text(w)),
                    None => break,
                }
            }
        } else if self.next_at.is_none_or(|t| now >= t) {
            if let Some(w) = self.words.next_piece() {
                out.push(ModelEvent::Text(w));
            }
            self.next_at = Some(now + self.delay);
        }
        if !self.words.is_done() {
            return match self.next_at {
                Some(t) if !self.delay.is_zero() => Progress::Wait(Some(t)),
                _ => Progress::Ready,
            };
        }
        let finish_reason = match self.tool.take() {
            Some(call) => {
                out.push(ModelEvent::ToolDrafting(call.name.clone()));
                out.push(ModelEvent::ToolCall(call));
                "tool_calls"
            }
            None => "stop",
        };
        out.push(ModelEvent::Done {
            finish_reason: finish_reason.into(),
            usage: self.usage,
        });
        Progress::Finished
    }

    fn abort(&mut self, _ctx: &mut CallContext<'_>) {
        self.words.at = self.words.text.len();
        self.tool = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> Vec<String> {
        let mut r = Reply {
            text: text.to_string(),
            at: 0,
        };
        std::iter::from_fn(|| r.next_piece()).collect()
    }

    #[test]
    fn pieces_concatenate_back_to_the_text() {
        for text in [
            "hello world",
            "  lead and trail  ",
            "one",
            "a\nb  c",
            "",
            "   ",
            "é ü",
        ] {
            assert_eq!(pieces(text).concat(), text);
        }
        assert_eq!(pieces("a b c"), ["a", " b", " c"]);
        assert_eq!(pieces("  lead and trail  "), ["  lead", " and", " trail  "]);
    }

    #[test]
    fn shell_prompts_become_terminal_calls() {
        let user = |t: &str| vec![Message::new(Role::User, Some(t.into()), 0.0)];
        match plan_reply(&user("$ ls -la")) {
            Plan::Tool(c) => {
                assert_eq!(c.name, "terminal");
                assert_eq!(
                    serde_json::from_str::<serde_json::Value>(&c.arguments).unwrap()["command"],
                    "ls -la"
                );
            }
            Plan::Say(_) => panic!("expected a tool call"),
        }
        assert!(matches!(plan_reply(&user("!echo hi")), Plan::Tool(_)));
        assert!(matches!(plan_reply(&user("hello")), Plan::Say(s) if s.contains("hello")));
        assert!(matches!(plan_reply(&user("$ ")), Plan::Say(_)));
    }

    #[test]
    fn percent_prompts_call_the_named_tool() {
        let user = |t: &str| vec![Message::new(Role::User, Some(t.into()), 0.0)];
        match plan_reply(&user("%host_note {\"text\": \"hi\"}")) {
            Plan::Tool(c) => {
                assert_eq!(c.name, "host_note");
                assert_eq!(c.arguments, "{\"text\": \"hi\"}");
            }
            Plan::Say(_) => panic!("expected a tool call"),
        }
        assert!(matches!(plan_reply(&user("%clock")), Plan::Tool(c) if c.arguments == "{}"));
        assert!(matches!(plan_reply(&user("% nothing")), Plan::Say(_)));
        let mut result = Message::new(Role::Tool, Some("{\"kept\":true}".into()), 0.0);
        result.tool_name = Some("host_note".into());
        assert!(
            matches!(plan_reply(&[result]), Plan::Say(s) if s.contains("host_note returned:\n{\"kept\":true}"))
        );
    }
}
