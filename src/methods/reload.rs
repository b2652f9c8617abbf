//! `reload.env`: re-read `$HERMES_HOME/.env` (as Hermes' `/reload` does) and apply the variables
//! that choose the model; the provider is rebuilt when one of them changed.

use serde_json::{Value, json};

use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::code;

/// Larger files are refused rather than read into memory.
const DOTENV_MAX: u64 = 1024 * 1024;

/// `KEY=VALUE` lines of a dotenv file: `export ` prefixes, `#` comments, single or double
/// quotes, blank lines. Lines that are not assignments are skipped.
pub fn parse_dotenv(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let value = value.trim();
        let value = match value.chars().next() {
            Some(q @ ('"' | '\'')) => value[1..].split(q).next().unwrap_or("").to_string(),
            _ => value
                .split(" #")
                .next()
                .unwrap_or("")
                .trim_end()
                .to_string(),
        };
        out.push((key.to_string(), value));
    }
    out
}

pub fn reload_env(gw: &mut Gateway) -> Result<Value, RpcError> {
    let path = gw.cfg.home.join(".env");
    let fail = |e: &dyn std::fmt::Display| {
        RpcError::new(5015, format!("cannot read {}: {e}", path.display()))
    };
    let text = crate::util::read_regular(&path, DOTENV_MAX)
        .map_err(|e| fail(&e))?
        .unwrap_or_default();
    let mut next = gw.cfg.clone();
    let mut updated = 0;
    for (key, value) in parse_dotenv(&text) {
        let value = Some(value).filter(|v| !v.is_empty());
        let slot = match key.as_str() {
            "OPENAI_API_KEY" => &mut next.api_key,
            "OPENAI_BASE_URL" => &mut next.base_url,
            "OPENAI_MODEL" => &mut next.model,
            "TUI_GATEWAY_PROVIDER" => &mut next.provider,
            _ => continue,
        };
        if *slot != value {
            *slot = value;
            updated += 1;
        }
    }
    if updated > 0 {
        if gw.sessions.values().any(|s| s.running()) {
            return Err(RpcError::new(
                code::BUSY,
                "a turn is running; /reload again after it ends",
            ));
        }
        let (provider, warning) = crate::model::select::choose(&next);
        if let Some(w) = &warning {
            crate::diag!("[gateway] {w}");
        }
        gw.cfg = next;
        gw.provider = provider;
        gw.provider_warning = warning;
        // Live sessions follow the new provider (their model name is the provider's).
        let (name, model, base_url) = (
            gw.provider.name().to_string(),
            gw.provider.default_model().to_string(),
            gw.provider_base_url(),
        );
        let rids: Vec<String> = gw.sessions.keys().cloned().collect();
        for rid in rids {
            if let Some(s) = gw.sessions.get_mut(&rid) {
                s.provider = name.clone();
                s.base_url = base_url.clone();
                s.model = model.clone();
                s.row_dirty = true;
            }
            gw.mark_dirty(&rid);
            gw.emit_info(&rid);
        }
    }
    Ok(json!({ "updated": updated, "provider": gw.provider.name() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_lines() {
        let text = "# c\n\nexport A=1\nB = \"two # x\"\nC='3'\nD=4 # note\nnot a line\n=x\nE-F=1\n";
        let got = parse_dotenv(text);
        let want = [("A", "1"), ("B", "two # x"), ("C", "3"), ("D", "4")];
        assert_eq!(
            got,
            want.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        );
    }
}
