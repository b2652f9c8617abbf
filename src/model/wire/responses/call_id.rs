//! A function call's two ids: its `call_id` (what the result's `function_call_output` names,
//! and what the transcript keeps as the call's id) and its output item id (`fc_…`), which
//! Hermes may have stored joined as `call_…|fc_…`.

/// (call id, item id) of a stored id: `call|item`, a bare `fc_` item id, or a bare call id.
pub fn split(raw: &str) -> (Option<&str>, Option<&str>) {
    let raw = raw.trim();
    if let Some((call, item)) = raw.split_once('|') {
        return (non_empty(call), non_empty(item));
    }
    match raw {
        "" => (None, None),
        _ if raw.starts_with("fc_") => (None, Some(raw)),
        _ => (Some(raw), None),
    }
}

fn non_empty(s: &str) -> Option<&str> {
    Some(s.trim()).filter(|s| !s.is_empty())
}

/// The call id an `fc_X` item id stands for (`call_X`).
pub fn from_item_id(item_id: &str) -> Option<String> {
    let rest = item_id.strip_prefix("fc_").filter(|r| !r.is_empty())?;
    Some(format!("call_{rest}"))
}

/// An id for a call that came without one, the same for the same call: a random one would
/// change the request's prefix on every turn and miss the prompt cache.
pub fn deterministic(name: &str, arguments: &str, index: usize) -> String {
    let digest = super::sha256_hex(format!("{name}:{arguments}:{index}").as_bytes());
    format!("call_{}", &digest[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_ids_split_into_call_and_item() {
        assert_eq!(split("call_a|fc_b"), (Some("call_a"), Some("fc_b")));
        assert_eq!(split(" fc_b "), (None, Some("fc_b")));
        assert_eq!(split("call_a"), (Some("call_a"), None));
        assert_eq!(split("|"), (None, None));
        assert_eq!(split(""), (None, None));
        assert_eq!(from_item_id("fc_b").as_deref(), Some("call_b"));
        assert_eq!(from_item_id("fc_"), None);
        let id = deterministic("terminal", "{}", 2);
        assert_eq!(id, deterministic("terminal", "{}", 2));
        assert_ne!(id, deterministic("terminal", "{}", 3));
        assert!(id.starts_with("call_") && id.len() == 17, "{id}");
    }
}
