//! A session's title written by its model after the first exchange, as Hermes'
//! `agent/title_generator.py` does: which sessions get one, what the model is asked, and how its
//! answer becomes a title. Pure: the call itself is made on the loop (`src/titles.rs`).

use std::time::Duration;

use yaml_rust2::Yaml;

use crate::session::Session;
use crate::transcript::{Message, Role, plain_text};

/// Hermes' prompt, word for word (the language follows the user's).
const PROMPT: &str = "Generate a short, descriptive title (3-7 words) for a conversation that \
    starts with the following exchange. The title should capture the main topic or intent. \
    Write the title in the same language the user is writing in. Return ONLY the title text, \
    nothing else. No quotes, no punctuation at the end, no prefixes.";

/// With `auxiliary.title_generation.language` set.
const PROMPT_PINNED: &str = "Generate a short, descriptive title (3-7 words) for a conversation \
    that starts with the following exchange. The title should capture the main topic or intent. \
    Write the title in {language}. Return ONLY the title text, nothing else. No quotes, no \
    punctuation at the end, no prefixes.";

/// Characters of each side of the exchange the model reads (Hermes' 500).
const SNIPPET_CHARS: usize = 500;
/// Longest title kept: longer ones are cut to 77 characters and `...` (Hermes' 80).
const TITLE_CHARS: usize = 80;
/// Largest answer read: a title is a line, anything past this is not one.
pub const ANSWER_MAX: usize = 4096;
/// Hermes' sessions counted as "first exchanges": up to two user messages.
const FIRST_EXCHANGES: usize = 2;
/// How long the call may take when config.yaml says nothing (Hermes' default for auxiliary tasks).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The `auxiliary.<task>` of config.yaml the call follows (`provider`, `model`, `base_url`,
/// `api_key`, `timeout`, `language`, `enabled`).
pub const TASK: &str = "title_generation";
/// Hermes' answer cap and temperature for the call (`generate_title`).
pub const LIMITS: crate::model::CallLimits = crate::model::CallLimits {
    max_tokens: Some(500),
    temperature: Some(0.3),
};

/// config.yaml's `auxiliary.title_generation`.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `enabled: false` turns titles off.
    pub enabled: bool,
    /// `timeout` in seconds: the whole call, connection to last byte.
    pub timeout: Duration,
    /// `language`: the title's language (empty: the user's).
    pub language: String,
}

impl Settings {
    pub fn read(doc: &Yaml) -> Settings {
        let aux = &doc["auxiliary"][TASK];
        let timeout = match aux["timeout"] {
            Yaml::Integer(n) => Some(n as f64),
            Yaml::Real(_) => aux["timeout"].as_f64(),
            _ => None,
        };
        Settings {
            enabled: !matches!(aux["enabled"], Yaml::Boolean(false)),
            timeout: timeout
                .filter(|t| t.is_finite() && *t > 0.0)
                .map_or(DEFAULT_TIMEOUT, |t| Duration::from_secs_f64(t.min(3600.0))),
            language: aux["language"].as_str().unwrap_or("").trim().to_string(),
        }
    }
}

/// The first exchange to title `s` from — its last user message and the answer — or `None` when
/// it gets no title: it has one (the user's `/title`, or an earlier one), it is a background
/// task, a compaction's continuation or a branch, its older messages are not all in memory, or
/// it is past its first exchanges.
pub fn exchange(s: &Session) -> Option<(String, String)> {
    if s.title.is_some()
        || s.background.is_some()
        || s.parent_session_id.is_some()
        || s.older.is_some()
    {
        return None;
    }
    let users = s.transcript.iter().filter(|m| m.role == Role::User).count();
    if users == 0 || users > FIRST_EXCHANGES {
        return None;
    }
    let text_of = |role: Role| {
        s.transcript
            .iter()
            .rev()
            .find(|m| m.role == role && m.content.as_deref().is_some_and(|c| !c.trim().is_empty()))
            .and_then(|m| m.content.as_deref())
            .map(|c| plain_text(c).into_owned())
    };
    // The answer is the last thing said: a turn that ended on a tool call has none.
    let last = s.transcript.last()?;
    if last.role != Role::Assistant || last.content.as_deref().is_none_or(|c| c.trim().is_empty()) {
        return None;
    }
    Some((text_of(Role::User)?, text_of(Role::Assistant)?))
}

/// The system prompt and the one user message of the title request.
pub fn request(user: &str, answer: &str, settings: &Settings, at: f64) -> (String, Message) {
    let system = match settings.language.as_str() {
        "" => PROMPT.to_string(),
        language => PROMPT_PINNED.replace("{language}", language),
    };
    let head = |t: &str| t.chars().take(SNIPPET_CHARS).collect::<String>();
    let text = format!("User: {}\n\nAssistant: {}", head(user), head(answer));
    (system, Message::new(Role::User, Some(text), at))
}

/// The model's answer as a title, cleaned as Hermes cleans it: reasoning blocks out, quotes and a
/// `Title:` prefix off, at most 80 characters, control characters out and whitespace collapsed
/// (Hermes' `sanitize_title`). `None`: nothing is left.
pub fn clean(answer: &str) -> Option<String> {
    let visible = strip_think(answer);
    let mut title = visible.trim().trim_matches(['"', '\'']);
    if title
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("title:"))
    {
        title = title[6..].trim();
    }
    let title: String = if title.chars().count() > TITLE_CHARS {
        title
            .chars()
            .take(TITLE_CHARS - 3)
            .chain("...".chars())
            .collect()
    } else {
        title.to_string()
    };
    let kept: String = title
        .chars()
        .filter(|c| !invisible(*c))
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    (!kept.is_empty()).then_some(kept)
}

/// Control characters other than whitespace, zero-width and direction marks (Hermes drops them).
fn invisible(c: char) -> bool {
    (c.is_control() && !c.is_whitespace())
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}'
            | '\u{feff}' | '\u{fff9}'..='\u{fffc}')
}

/// The reasoning tags Hermes strips from an answer.
const THINK_TAGS: [&str; 5] = [
    "think",
    "thinking",
    "reasoning",
    "reasoning_scratchpad",
    "thought",
];

/// `text` without reasoning blocks: closed pairs of any case, an unclosed one opened at the
/// start of a line (to the end), and stray tags (Hermes' `strip_think_blocks`).
fn strip_think(text: &str) -> String {
    let mut out = text.to_string();
    for tag in THINK_TAGS {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        loop {
            let lower = out.to_ascii_lowercase();
            let Some(start) = lower.find(&open) else {
                break;
            };
            match lower[start..].find(&close) {
                Some(end) => out.replace_range(start..start + end + close.len(), ""),
                None if start == 0 || lower[..start].ends_with('\n') => out.truncate(start),
                // Mentioned in prose: only the tag goes.
                None => out.replace_range(start..start + open.len(), ""),
            }
        }
        while let Some(stray) = out.to_ascii_lowercase().find(&close) {
            out.replace_range(stray..stray + close.len(), "");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_cleaned_as_hermes_cleans_it() {
        assert_eq!(
            clean("\"Fixing the build\""),
            Some("Fixing the build".into())
        );
        assert_eq!(
            clean("Title: Rust lifetimes"),
            Some("Rust lifetimes".into())
        );
        assert_eq!(
            clean("<think>the user wants\na title</think>\n  Deploy   notes\n"),
            Some("Deploy notes".into())
        );
        assert_eq!(clean("<THINKING>hm</THINKING>Ok"), Some("Ok".into()));
        assert_eq!(clean("Plan\n<think>never closed"), Some("Plan".into()));
        assert_eq!(clean("a \u{202e}b\u{200b}c\u{7}"), Some("a bc".into()));
        assert_eq!(clean("  '' "), None);
        assert_eq!(clean("<think>only thinking</think>"), None);
        let long = "word ".repeat(40);
        let title = clean(&long).unwrap();
        assert_eq!(title.chars().count(), 80);
        assert!(title.ends_with("..."), "{title}");
    }

    #[test]
    fn only_an_untitled_first_exchange_that_ended_on_an_answer_is_titled() {
        let say = |s: &mut Session, role: Role, text: &str| {
            s.append(Message::new(role, Some(text.to_string()), 1.0));
        };
        let mut s = crate::session::bare_session("r", "s");
        say(&mut s, Role::User, "hi");
        assert_eq!(exchange(&s), None, "no answer yet");
        say(&mut s, Role::Assistant, "hello");
        assert_eq!(exchange(&s), Some(("hi".into(), "hello".into())));
        // Hermes' second chance: the second exchange, when the first got no title.
        say(&mut s, Role::User, "and?");
        say(&mut s, Role::Assistant, "more");
        assert_eq!(exchange(&s), Some(("and?".into(), "more".into())));
        say(&mut s, Role::User, "third");
        say(&mut s, Role::Assistant, "late");
        assert_eq!(exchange(&s), None, "past the first exchanges");

        let mut fresh = crate::session::bare_session("r", "s");
        say(&mut fresh, Role::User, "hi");
        say(&mut fresh, Role::Assistant, "hello");
        let mut titled = crate::session::bare_session("r", "s");
        titled.transcript = fresh.transcript.clone();
        titled.title = Some("mine".into());
        assert_eq!(exchange(&titled), None, "the user's title stays");
        let mut continued = crate::session::bare_session("r", "s");
        continued.transcript = fresh.transcript.clone();
        continued.parent_session_id = Some("old".into());
        assert_eq!(
            exchange(&continued),
            None,
            "a compaction's continuation or a branch"
        );
    }

    #[test]
    fn settings_come_from_auxiliary_title_generation() {
        let doc = crate::config_file::parse(
            "auxiliary:\n  title_generation:\n    enabled: false\n    timeout: 2.5\n    language: French\n",
        )
        .unwrap();
        let s = Settings::read(&doc);
        assert_eq!(
            (s.enabled, s.timeout, s.language.as_str()),
            (false, Duration::from_millis(2500), "French")
        );
        let none = Settings::read(&Yaml::Null);
        assert_eq!((none.enabled, none.timeout), (true, DEFAULT_TIMEOUT));
        let (system, msg) = request(&"x".repeat(900), "ok", &s, 0.0);
        assert!(system.contains("Write the title in French."), "{system}");
        let text = msg.content.unwrap();
        assert_eq!(text.len(), "User: ".len() + 500 + "\n\nAssistant: ok".len());
    }
}
