//! `reload.env`: re-read `$HERMES_HOME/.env` (as Hermes' `/reload` does) and choose the
//! provider again from it; live sessions follow a provider that changed.

use serde_json::{Value, json};

use crate::event_loop::Gateway;
use crate::hermes_env::HermesEnv;
use crate::rpc::RpcError;
use crate::rpc::frame::code;

pub fn reload_env(gw: &mut Gateway) -> Result<Value, RpcError> {
    let env = HermesEnv::load(&gw.cfg.home).map_err(|e| RpcError::new(5015, e))?;
    let mut next = gw.cfg.clone();
    // The gateway's own knobs that choose the model, as `.env` now sets them.
    for (var, slot) in [
        ("OPENAI_BASE_URL", &mut next.base_url),
        ("OPENAI_MODEL", &mut next.model),
        ("TUI_GATEWAY_PROVIDER", &mut next.provider),
    ] {
        if let Some(v) = env.file_value(var) {
            *slot = Some(v.trim().to_string());
        }
    }
    let choice = crate::model::select::choose(&next);
    let same = |a: &dyn crate::model::Provider, b: &dyn crate::model::Provider| {
        a.name() == b.name()
            && a.default_model() == b.default_model()
            && a.endpoint() == b.endpoint()
    };
    let updated = env.changes_from(&gw.dotenv);
    let changed =
        !same(gw.provider.as_ref(), choice.provider.as_ref()) || gw.provider_warning != choice.note;
    if changed && gw.sessions.values().any(|s| s.running()) {
        return Err(RpcError::new(
            code::BUSY,
            "a turn is running; /reload again after it ends",
        ));
    }
    gw.dotenv = env;
    if changed {
        if let Some(w) = choice.note.as_ref().filter(|_| choice.unreachable) {
            crate::diag!("[gateway] {w}");
        }
        gw.cfg = next;
        let before = std::mem::replace(&mut gw.provider, choice.provider);
        gw.provider_warning = choice.note;
        // Live sessions follow the new provider; one that chose its own model keeps it while
        // the provider is the same one (a key added or taken away), as Hermes' agent does.
        let (name, model, base_url) = (
            gw.provider.name().to_string(),
            gw.provider.default_model().to_string(),
            gw.provider_base_url(),
        );
        let rids: Vec<String> = gw.sessions.keys().cloned().collect();
        for rid in rids {
            if let Some(s) = gw.sessions.get_mut(&rid) {
                let own_model = s.provider == name
                    && name == before.name()
                    && !s.model.is_empty()
                    && s.model != before.default_model();
                if !own_model {
                    s.model = model.clone();
                }
                s.provider = name.clone();
                s.base_url = base_url.clone();
                s.row_dirty = true;
            }
            gw.mark_dirty(&rid);
            gw.emit_info(&rid);
        }
    }
    Ok(json!({ "updated": updated, "provider": gw.provider.name() }))
}

/// The providers sessions switched to (`/model … --provider`), built again from the home as it
/// is now, each keeping its name (sessions find theirs by it) and model: a key or login gone
/// is no longer sent.
pub fn rebuild_switched(gw: &mut Gateway) {
    for p in gw.switched_providers.iter_mut() {
        let (name, model) = (p.name().to_string(), p.default_model().to_string());
        let picked = crate::model::select::choose_for(&gw.cfg, &name, &model);
        *p = match picked.provider.name() == name {
            true => picked.provider,
            false => Box::new(crate::model::unreachable::Unreachable::new(
                &name,
                Some(&model),
                &picked
                    .note
                    .unwrap_or_else(|| format!("provider {name} cannot be reached")),
            )),
        };
    }
}
