//! Full-text search over stored messages through Hermes Agent's FTS5 index `messages_fts`
//! (created with Hermes' triggers when the gateway creates the database, used as it is when
//! Hermes created it). One result per session: its best-ranked message, with a snippet.
//!
//! Bounded: the index is read newest match first and at most [`CANDIDATES`] matching messages
//! are ranked, so a word in every other message costs about what a rare one does; a snippet is
//! cut only for the results returned, here from the first [`SNIPPET_SCAN_CHARS`] of each (a
//! second FTS5 query per result cost as much as the whole ranking). The rank is BM25's
//! term-frequency and length part ([`rank`]) computed here over the first [`RANK_CHARS`] of
//! each candidate: every candidate holds every word, and FTS5's own `bm25()` reads the whole
//! index of each word to weigh it (15–20 ms for a word in 40 % of a million messages).

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;

/// Matching messages ranked per search, newest first.
pub const CANDIDATES: usize = 1000;
/// Characters of a candidate message its rank is computed over.
const RANK_CHARS: i64 = 1000;
/// Longest query text looked at (as Hermes caps it).
const QUERY_MAX_CHARS: usize = 2048;
/// Most words of a query.
const QUERY_MAX_WORDS: usize = 32;
/// Words of context in a snippet.
const SNIPPET_WORDS: usize = 16;
/// Characters of a result's message its snippet is cut from (a match further in shows the
/// message's start).
const SNIPPET_SCAN_CHARS: i64 = 16 * 1024;

/// What to search for.
#[derive(Debug, Clone, Default)]
pub struct SearchQuery<'a> {
    /// Words (all must occur in a message; `word*` matches a prefix; `"a phrase"` is
    /// one word).
    pub text: &'a str,
    /// Sessions answered at most.
    pub limit: usize,
    /// Only sessions of this `source`.
    pub source: Option<&'a str>,
    /// Only messages of these roles (none: any role).
    pub roles: &'a [&'a str],
}

/// A piece of a snippet: matched text or the context around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnippetPart {
    pub text: String,
    pub hit: bool,
}

/// One session that matched, at its best-ranked message.
#[derive(Debug, Clone)]
pub struct SearchHit {
    pub session_id: String,
    /// The matching message's `messages.id`.
    pub message_id: i64,
    pub title: Option<String>,
    pub source: String,
    /// When the session started (unix seconds).
    pub started_at: f64,
    /// When the matching message was written (unix seconds).
    pub message_at: f64,
    pub role: String,
    /// The message's rank: higher is better.
    pub score: f64,
    pub snippet: Vec<SnippetPart>,
}

impl SearchHit {
    /// The snippet with each match between `open` and `close` (Hermes' tool uses `>>>`,
    /// `<<<`).
    pub fn snippet_marked(&self, open: &str, close: &str) -> String {
        self.snippet
            .iter()
            .map(|p| {
                if p.hit {
                    format!("{open}{}{close}", p.text)
                } else {
                    p.text.clone()
                }
            })
            .collect()
    }
}

/// The FTS5 query for what a person typed: every word quoted (so no character of it is FTS5
/// syntax), all required; a trailing `*` keeps its prefix meaning. Empty when nothing is left.
pub fn fts_query(text: &str) -> String {
    let text: String = text.chars().take(QUERY_MAX_CHARS).collect();
    let mut words = Vec::new();
    let mut rest = text.as_str();
    while words.len() < QUERY_MAX_WORDS {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        // A balanced "phrase" is one word; anything else runs to the next space.
        let (word, after) = match rest
            .strip_prefix('"')
            .and_then(|r| r.find('"').map(|e| (r, e)))
        {
            Some((r, end)) => (&r[..end], &r[end + 1..]),
            None => {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        rest = after;
        let prefix = word.ends_with('*');
        let bare: String = word
            .trim_end_matches('*')
            .chars()
            .filter(|c| *c != '"')
            .collect();
        // A word the tokenizer would find nothing in (punctuation only) matches nothing.
        if !bare.chars().any(char::is_alphanumeric) {
            continue;
        }
        words.push(format!("\"{bare}\"{}", if prefix { "*" } else { "" }));
    }
    words.join(" ")
}

/// The lowercase words of `text` (letters and digits; the rest separates).
fn words_of(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// The query's words as (word, is a prefix), lowercase, phrases split into their words.
fn terms_of(expr: &str) -> Vec<(String, bool)> {
    let mut terms = Vec::new();
    for quoted in expr.split(' ').filter(|q| !q.is_empty()) {
        let prefix = quoted.ends_with('*');
        let inner = quoted.trim_end_matches('*').trim_matches('"');
        let words: Vec<String> = words_of(inner).collect();
        let n = words.len();
        for (i, w) in words.into_iter().enumerate() {
            terms.push((w, prefix && i + 1 == n));
        }
    }
    terms
}

/// BM25 without its inverse-document-frequency factor (k1 = 1.2, b = 0.75): how often the
/// query's words occur in `text`, damped, against its length relative to `average_len`.
pub fn rank(terms: &[(String, bool)], text: &str, average_len: f64) -> f64 {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;
    let words: Vec<String> = words_of(text).collect();
    let norm = K1 * (1.0 - B + B * words.len() as f64 / average_len.max(1.0));
    terms
        .iter()
        .map(|(t, prefix)| {
            let tf = words
                .iter()
                .filter(|w| {
                    if *prefix {
                        w.starts_with(t.as_str())
                    } else {
                        *w == t
                    }
                })
                .count() as f64;
            tf * (K1 + 1.0) / (tf + norm)
        })
        .sum()
}

fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM sqlite_master WHERE name = ?1")?
        .query_row([name], |_| Ok(()))
        .optional()
        .map(|r| r.is_some())
}

/// Whether messages carry Hermes' `active`/`compacted` flags (undone rows are not found).
fn has_active_flags(conn: &Connection) -> rusqlite::Result<bool> {
    let mut stmt = conn.prepare_cached("SELECT name FROM pragma_table_info('messages')")?;
    let cols: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(cols.iter().any(|c| c == "active") && cols.iter().any(|c| c == "compacted"))
}

/// Whether `word` (lowercase) is the term `(text, prefix)`: equal, or starting with a prefix.
fn matches((t, prefix): &(String, bool), word: &str) -> bool {
    if *prefix {
        word.starts_with(t.as_str())
    } else {
        word == t
    }
}

/// Whether `word` (lowercase) is one of the query's terms.
fn is_hit(terms: &[(String, bool)], word: &str) -> bool {
    terms.iter().any(|t| matches(t, word))
}

/// The [`SNIPPET_WORDS`] words of `text` holding the most distinct query words (the first such
/// window), matches marked, `…` where text was cut — as FTS5's `snippet()` cuts them, from the
/// text already read instead of a second full-text query per result.
fn snippet(terms: &[(String, bool)], text: &str) -> Vec<SnippetPart> {
    // (byte span, lowercase word) of every word.
    let mut words: Vec<(usize, usize, String)> = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (start, c.is_alphanumeric()) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                words.push((s, i, text[s..i].to_lowercase()));
                start = None;
            }
            _ => {}
        }
    }
    let window = SNIPPET_WORDS.min(words.len());
    let distinct = |ws: &[(usize, usize, String)]| {
        terms
            .iter()
            .filter(|t| ws.iter().any(|(_, _, w)| matches(t, w)))
            .count()
    };
    let mut first = 0;
    let mut best = None;
    for i in 0..=words.len() - window {
        // Only a window that starts at a match can hold more than the one before it.
        if i > 0 && !is_hit(terms, &words[i].2) {
            continue;
        }
        let n = distinct(&words[i..i + window]);
        if best.is_none_or(|b| n > b) {
            best = Some(n);
            first = i;
        }
        if n == terms.len() {
            break;
        }
    }
    // Centred on its matches, as far as the text allows.
    if let Some(last) = words[first..first + window]
        .iter()
        .rposition(|w| is_hit(terms, &w.2))
    {
        first = first
            .saturating_sub((window - last - 1) / 2)
            .min(words.len() - window);
    }
    let shown = &words[first..first + window];
    let mut parts = Vec::new();
    let mut push = |text: &str, hit: bool| match parts.last_mut() {
        Some(SnippetPart { text: t, hit: h }) if *h == hit => t.push_str(text),
        _ if text.is_empty() => {}
        _ => parts.push(SnippetPart {
            text: text.to_string(),
            hit,
        }),
    };
    if first > 0 {
        push("…", false);
    }
    let mut at = shown.first().map_or(0, |w| w.0);
    for (s, e, w) in shown {
        push(&text[at..*s], false);
        push(&text[*s..*e], is_hit(terms, w));
        at = *e;
    }
    if first + window < words.len() {
        push("…", false);
    }
    parts
}

pub(super) fn run(conn: &Connection, q: &SearchQuery<'_>) -> Result<Vec<SearchHit>, StoreError> {
    if !has_table(conn, "messages_fts")? {
        return Err(StoreError::new(
            super::ErrorKind::Other,
            "this state.db has no full-text index (messages_fts): Hermes Agent creates it when it opens the database, and so does the gateway when it creates one",
        ));
    }
    let expr = fts_query(q.text);
    if expr.is_empty() || q.limit == 0 {
        return Ok(Vec::new());
    }
    let active = if has_active_flags(conn)? {
        "AND (m.active = 1 OR m.compacted = 1)"
    } else {
        ""
    };
    // Roles are plain words (the tool splits them off a comma list); anything else matches
    // no role rather than reaching the SQL.
    let roles = if q.roles.is_empty() {
        String::new()
    } else {
        let listed: Vec<String> = q
            .roles
            .iter()
            .filter(|r| r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .map(|r| format!("'{r}'"))
            .collect();
        format!("AND m.role IN ({})", listed.join(", "))
    };
    // The newest matches, ranked; the best message per session.
    let candidates: Vec<(i64, String, String)> = {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT h.rowid, m.session_id, substr(coalesce(m.content, ''), 1, ?3)
             FROM (SELECT rowid FROM messages_fts
                   WHERE messages_fts MATCH ?1 ORDER BY rowid DESC LIMIT ?2) h
             JOIN messages m ON m.id = h.rowid {active} {roles}"
        ))?;
        let rows = stmt.query_map(params![expr, CANDIDATES as i64, RANK_CHARS], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let terms = terms_of(&expr);
    let average_len = candidates
        .iter()
        .map(|(_, _, t)| words_of(t).count() as f64)
        .sum::<f64>()
        / candidates.len().max(1) as f64;
    let mut best: HashMap<String, (f64, i64)> = HashMap::new();
    for (rowid, session, text) in candidates {
        let score = rank(&terms, &text, average_len);
        let e = best.entry(session).or_insert((score, rowid));
        if score > e.0 || (score == e.0 && rowid > e.1) {
            *e = (score, rowid);
        }
    }
    let mut ranked: Vec<(String, f64, i64)> = best
        .into_iter()
        .map(|(s, (score, row))| (s, score, row))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.2.cmp(&a.2)));
    let mut session_row = conn.prepare_cached(
        "SELECT title, coalesce(source, ''), coalesce(started_at, 0) FROM sessions WHERE id = ?1",
    )?;
    let mut message_row = conn.prepare_cached(
        "SELECT coalesce(timestamp, 0), role,
                substr(coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''), 1, ?2)
         FROM messages WHERE id = ?1",
    )?;
    let mut hits = Vec::new();
    for (session_id, score, rowid) in ranked {
        if hits.len() >= q.limit {
            break;
        }
        let Some((title, source, started_at)) = session_row
            .query_row([&session_id], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, f64>(2)?,
                ))
            })
            .optional()?
        else {
            continue;
        };
        if q.source.is_some_and(|want| want != source) {
            continue;
        }
        let (message_at, role, text) =
            message_row.query_row(params![rowid, SNIPPET_SCAN_CHARS], |r| {
                Ok((
                    r.get::<_, f64>(0)?,
                    r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    r.get::<_, String>(2)?,
                ))
            })?;
        hits.push(SearchHit {
            session_id,
            message_id: rowid,
            title,
            source,
            started_at,
            message_at,
            role,
            score,
            snippet: snippet(&terms, &text),
        });
    }
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_people_type_becomes_a_query_without_fts5_syntax() {
        assert_eq!(fts_query("docker deploy"), r#""docker" "deploy""#);
        assert_eq!(fts_query("deploy*  "), r#""deploy"*"#);
        assert_eq!(fts_query(r#""exact phrase" x"#), r#""exact phrase" "x""#);
        assert_eq!(fts_query(r#"a"b ( ) : ^ NOT"#), r#""ab" "NOT""#);
        assert_eq!(fts_query(r#"unbalanced "quote"#), r#""unbalanced" "quote""#);
        assert_eq!(fts_query("  * \" "), "");
        assert_eq!(fts_query(&"w ".repeat(100)).matches('"').count(), 64);
    }

    #[test]
    fn more_of_the_words_in_a_shorter_message_ranks_higher() {
        let terms = terms_of(&fts_query("docker deploy*"));
        assert_eq!(terms, [("docker".into(), false), ("deploy".into(), true)]);
        let avg = 10.0;
        let twice = rank(&terms, "docker docker deploying now", avg);
        let once = rank(&terms, "docker deployed now", avg);
        let long = rank(
            &terms,
            &format!("docker deploy {}", "filler ".repeat(40)),
            avg,
        );
        assert!(twice > once && once > long, "{twice} {once} {long}");
        assert_eq!(rank(&terms, "nothing here", avg), 0.0);
        assert!(rank(&terms, "DOCKER, Deploy!", avg) > 0.0);
    }

    #[test]
    fn a_snippet_shows_the_window_with_the_most_query_words_marked() {
        let terms = terms_of(&fts_query("docker deploy*"));
        let text = format!(
            "{} the Docker image, then deploying: done {}",
            "filler ".repeat(30),
            "tail ".repeat(30)
        );
        let parts = snippet(&terms, &text);
        let hits: Vec<_> = parts
            .iter()
            .filter(|p| p.hit)
            .map(|p| &p.text[..])
            .collect();
        assert_eq!(hits, ["Docker", "deploying"]);
        let h = SearchHit {
            session_id: String::new(),
            message_id: 0,
            title: None,
            source: String::new(),
            started_at: 0.0,
            message_at: 0.0,
            role: String::new(),
            score: 0.0,
            snippet: parts,
        };
        let marked = h.snippet_marked(">>>", "<<<");
        assert!(marked.starts_with("…filler "), "{marked}");
        assert!(
            marked.contains(" the >>>Docker<<< image, then >>>deploying<<<: done tail"),
            "{marked}"
        );
        assert!(marked.ends_with("tail…"), "{marked}");
        assert_eq!(marked.split_whitespace().count(), 16, "{marked}");
        // Short text: whole, no marks of a cut; no words: nothing.
        let short = snippet(&terms, "deploy it");
        assert_eq!(
            short[0],
            SnippetPart {
                text: "deploy".into(),
                hit: true
            }
        );
        assert_eq!(
            short[1],
            SnippetPart {
                text: " it".into(),
                hit: false
            }
        );
        assert!(snippet(&terms, " ,; ").is_empty());
    }
}
