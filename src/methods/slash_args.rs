//! Argument completions of `complete.slash` that Hermes' Python gateway builds itself rather
//! than from a fixed word list: `/details` (modes, sections, then a section's modes),
//! `/tools enable|disable` (the toolsets that the action would change), `/skin` (the skins) and
//! `/personality` (the personalities). Pure: each takes the typed text (and what it chooses
//! from) and returns the items.

use serde_json::{Value, json};

const DETAIL_SECTIONS: [&str; 4] = ["thinking", "tools", "subagents", "activity"];
const DETAIL_MODES: [&str; 3] = ["hidden", "collapsed", "expanded"];

fn item(text: &str, meta: &str) -> Value {
    json!({"text": text, "display": text, "meta": meta})
}

/// What a root `/details` word means (the popup's meta).
fn detail_meta(word: &str) -> &'static str {
    if DETAIL_SECTIONS.contains(&word) {
        "section override"
    } else if word == "cycle" {
        "cycle global mode"
    } else {
        "global mode"
    }
}

/// `/details …` as Hermes completes it: `None` when the text is not `/details` (any case)
/// followed by nothing or a space. Right after `/details` the items carry a leading space.
pub fn details(text: &str) -> Option<Vec<Value>> {
    let lower = text.to_ascii_lowercase();
    let body = lower.strip_prefix("/details")?;
    if !(body.is_empty() || body.starts_with(char::is_whitespace)) {
        return None;
    }
    let roots = DETAIL_MODES
        .iter()
        .chain(&["cycle"])
        .chain(&DETAIL_SECTIONS);
    let body = body.strip_prefix(' ').unwrap_or(body);
    let parts: Vec<&str> = body.split_whitespace().collect();
    let trailing = text.ends_with(char::is_whitespace);
    let section_modes = |section: &str, prefix: &str| -> Vec<Value> {
        DETAIL_MODES
            .iter()
            .chain(&["reset"])
            .filter(|m| m.starts_with(prefix) && **m != prefix)
            .map(|m| match *m {
                "reset" => item(m, &format!("clear {section} override")),
                _ => item(m, &format!("set {section}")),
            })
            .collect()
    };
    Some(match parts.as_slice() {
        [] => roots
            .map(|w| {
                let text = if trailing {
                    w.to_string()
                } else {
                    format!(" {w}")
                };
                item(&text, detail_meta(w))
            })
            .collect(),
        [word] if !trailing => roots
            .filter(|w| w.starts_with(word) && *w != word)
            .map(|w| item(w, detail_meta(w)))
            .collect(),
        [section] if DETAIL_SECTIONS.contains(section) => section_modes(section, ""),
        [section, prefix] if !trailing && DETAIL_SECTIONS.contains(section) => {
            section_modes(section, prefix)
        }
        _ => Vec::new(),
    })
}

/// `/tools enable|disable NAME…`: the toolsets the action would change (`enable` offers the
/// ones off, `disable` the ones on), less those already typed. `toolsets` is `(name, on)`.
pub fn tools(rest: &str, toolsets: &[(&str, bool)]) -> Option<Vec<Value>> {
    let parts: Vec<&str> = rest.split_whitespace().collect();
    let trailing = rest.ends_with(char::is_whitespace);
    let action = parts.first()?.to_ascii_lowercase();
    if parts.len() == 1 && !trailing {
        return None; // still typing the action: the fixed words complete it
    }
    let enable = match action.as_str() {
        "enable" => true,
        "disable" => false,
        _ => return Some(Vec::new()),
    };
    let (typed, partial) = match trailing {
        true => (&parts[1..], ""),
        false => (&parts[1..parts.len() - 1], parts[parts.len() - 1]),
    };
    let partial = partial.to_ascii_lowercase();
    Some(
        toolsets
            .iter()
            .filter(|(name, on)| {
                *on != enable && name.starts_with(&partial) && !typed.contains(name)
            })
            .map(|(name, _)| {
                item(
                    name,
                    if enable {
                        "toolset (off)"
                    } else {
                        "toolset (on)"
                    },
                )
            })
            .collect(),
    )
}

/// Hermes' built-in skins (`hermes_cli/skin_engine.py`), with what each looks like.
const BUILTIN_SKINS: [(&str, &str); 9] = [
    ("default", "Classic Hermes gold/kawaii"),
    (
        "ares",
        "Crimson/bronze war-god theme with custom spinner wings",
    ),
    ("mono", "Clean grayscale monochrome"),
    ("slate", "Cool blue developer-focused theme"),
    (
        "daylight",
        "Light background theme with dark text and blue accents",
    ),
    (
        "warm-lightmode",
        "Warm brown/gold text for light terminal backgrounds",
    ),
    ("poseidon", "Ocean-god theme: deep blue and seafoam"),
    ("sisyphus", "Sisyphean theme: austere grayscale"),
    ("charizard", "Volcanic theme: burnt orange and ember"),
];

/// The `(name, meta)` pairs that complete `partial` (any case; not the name typed in full).
fn matching<'a>(partial: &str, names: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<Value> {
    let partial = partial.to_ascii_lowercase();
    names
        .filter(|(name, _)| name.starts_with(&partial) && *name != partial)
        .map(|(name, meta)| item(name, meta))
        .collect()
}

/// `/skin NAME`: Hermes' built-in skins, then the user's (`(name, description)` of each
/// `$HERMES_HOME/skins/*.yaml`) that no built-in shadows; meta: the description, else where
/// it comes from.
pub fn skins(partial: &str, user: &[(String, String)]) -> Vec<Value> {
    let builtin = BUILTIN_SKINS.iter().copied();
    let user = user
        .iter()
        .filter(|(name, _)| !BUILTIN_SKINS.iter().any(|(b, _)| b == name))
        .map(|(name, about)| match about.as_str() {
            "" => (name.as_str(), "user"),
            about => (name.as_str(), about),
        });
    matching(partial, builtin.chain(user))
}

/// `/personality NAME`: `none`, then the configured personalities (`(name, meta)` of
/// config.yaml's `agent.personalities`).
pub fn personalities(partial: &str, configured: &[(String, String)]) -> Vec<Value> {
    let none = std::iter::once(("none", "clear personality overlay"));
    let named = configured.iter().map(|(n, m)| (n.as_str(), m.as_str()));
    matching(partial, none.chain(named))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(items: &[Value]) -> Vec<&str> {
        items.iter().map(|i| i["text"].as_str().unwrap()).collect()
    }

    #[test]
    fn details_stages() {
        let root = details("/details").unwrap();
        assert_eq!(texts(&root)[0], " hidden");
        assert_eq!(root.len(), 8);
        let spaced = details("/details ").unwrap();
        assert_eq!(
            texts(&spaced)[..4],
            ["hidden", "collapsed", "expanded", "cycle"]
        );
        assert_eq!(spaced[4]["meta"], "section override");
        assert_eq!(
            texts(&details("/details c").unwrap()),
            ["collapsed", "cycle"]
        );
        let section = details("/details tools ").unwrap();
        assert_eq!(
            texts(&section),
            ["hidden", "collapsed", "expanded", "reset"]
        );
        assert_eq!(section[3]["meta"], "clear tools override");
        assert_eq!(texts(&details("/details tools ex").unwrap()), ["expanded"]);
        assert!(details("/details hidden x").unwrap().is_empty());
        assert!(details("/detailsx").is_none());
        assert!(details("/det").is_none());
    }

    #[test]
    fn skins_and_personalities_as_hermes_offers_them() {
        let user = [
            ("ocean".to_string(), String::new()),
            ("mono".to_string(), "mine".to_string()),
        ];
        let all = skins("", &user);
        assert_eq!(
            all.len(),
            10,
            "nine built in, one of the user's; a shadowing one left out"
        );
        assert_eq!(all[9], item("ocean", "user"));
        assert_eq!(texts(&skins("Da", &user)), ["daylight"]);
        assert!(skins("mono", &user).is_empty(), "typed in full");
        let mine = [("pirate".to_string(), "Arr".to_string())];
        assert_eq!(texts(&personalities("", &mine)), ["none", "pirate"]);
        assert_eq!(personalities("p", &mine), [item("pirate", "Arr")]);
    }

    #[test]
    fn tools_offers_what_the_action_changes() {
        let sets = [("file", true), ("web", false), ("todo", false)];
        assert!(tools("en", &sets).is_none());
        assert_eq!(texts(&tools("enable ", &sets).unwrap()), ["web", "todo"]);
        assert_eq!(texts(&tools("enable web t", &sets).unwrap()), ["todo"]);
        assert!(tools("enable web todo ", &sets).unwrap().is_empty());
        assert_eq!(texts(&tools("disable ", &sets).unwrap()), ["file"]);
        assert!(tools("list ", &sets).unwrap().is_empty());
    }
}
