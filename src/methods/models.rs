//! `model.options` for the TUI's `/model` picker: the running provider with the models
//! config.yaml names plus what the endpoint's `GET /models` lists. The list is fetched on the
//! loop (`model::catalog`) and the request answered when it arrives, within `FETCH_TIMEOUT`;
//! a failure still answers, with config.yaml's models and a warning.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use yaml_rust2::Yaml;

use super::params::{self, Params};
use super::{Reply, config};
use crate::event_loop::{Gateway, Timer, TokenOwner};
use crate::model::catalog::{Fetched, ModelsFetch};
use crate::model::endpoint::Endpoint;
use crate::reactor::Slot;
use crate::rpc::RpcError;
use crate::rpc::frame::code;
use crate::timer::TimerId;

/// Longest a `model.options` answer waits for the endpoint's list.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

struct Pending {
    request_id: crate::rpc::frame::Id,
    /// Where in `answer` the provider's row is (a JSON pointer).
    row: &'static str,
    fetch: ModelsFetch,
    /// Where the fetch's sources are watched.
    slot: Slot,
    timer: TimerId,
    /// The answer without the fetched models.
    answer: Value,
    url: String,
}

/// `model.options` requests waiting for their model list.
#[derive(Default)]
pub struct Fetches {
    pending: HashMap<u64, Pending>,
    next: u64,
}

/// The picker's slug and display name of the provider a session runs on (`None`: the
/// configured one).
pub fn current_provider(gw: &Gateway, session: Option<&str>) -> (String, String) {
    let slug = provider_of(gw, session).name();
    let name = match crate::model::providers::spec(slug) {
        Some(p) => p.name.to_string(),
        None if slug == "offline" => "Offline (built in)".into(),
        None => slug.to_string(),
    };
    (slug.to_string(), name)
}

/// Models config.yaml names: `model.default` (or `model: NAME`) and a `model.models` list.
fn configured_models(doc: &Yaml) -> Vec<String> {
    let mut out = Vec::new();
    let model = &doc["model"];
    for y in [model, &model["default"]] {
        if let Yaml::String(s) = y {
            out.push(s.trim().to_string());
        }
    }
    if let Yaml::Array(list) = &model["models"] {
        out.extend(
            list.iter()
                .filter_map(|m| m.as_str())
                .map(|m| m.trim().to_string()),
        );
    }
    out
}

fn push_unique(list: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for m in items {
        if !m.is_empty() && !list.contains(&m) {
            list.push(m);
        }
    }
}

/// `model.options`' row of the running provider.
const CURRENT_ROW: &str = "/providers/0";
/// `model.save_key`'s row.
const SAVED_ROW: &str = "/provider";

/// The models already in the row at `row`.
fn models_at(answer: &Value, row: &str) -> Vec<String> {
    answer
        .pointer(row)
        .and_then(|r| serde_json::from_value(r["models"].clone()).ok())
        .unwrap_or_default()
}

fn set_models(answer: &mut Value, row: &str, models: &[String], warning: Option<String>) {
    let Some(row) = answer.pointer_mut(row) else {
        return;
    };
    row["models"] = json!(models);
    row["total_models"] = json!(models.len());
    if let Some(w) = warning {
        row["warning"] = json!(w);
    }
}

/// The provider a session runs on (`None`, or one gone: the configured one).
fn provider_of<'a>(gw: &'a Gateway, session: Option<&str>) -> &'a dyn crate::model::Provider {
    let name = session
        .and_then(|rid| gw.sessions.get(rid))
        .map(|s| s.provider.as_str());
    gw.switched_providers
        .iter()
        .find(|p| Some(p.name()) == name)
        .map_or(gw.provider.as_ref(), |p| p.as_ref())
}

/// The session a request names, when it names a live one.
fn session_named<'a>(gw: &Gateway, p: &'a Params) -> Option<&'a str> {
    params::opt_str(p, "session_id")
        .ok()
        .flatten()
        .map(str::trim)
        .filter(|id| gw.sessions.get(id).is_some())
}

/// `model.options {session_id?, refresh?}`: answered now, or once the endpoint answered.
pub fn options(gw: &mut Gateway, id: &crate::rpc::frame::Id, p: &Params, now: Instant) -> Reply {
    let answer = match base_answer(gw, p) {
        Ok(a) => a,
        Err(e) => return Some(Err(e)),
    };
    let Some(endpoint) = provider_of(gw, session_named(gw, p)).endpoint().cloned() else {
        return Some(Ok(answer));
    };
    answer_with_models(gw, id, answer, CURRENT_ROW, &endpoint, now)
}

/// Answer `answer` once the models `endpoint` lists are added to its row at `row` (within
/// `FETCH_TIMEOUT`; a failure answers with a warning in the row).
fn answer_with_models(
    gw: &mut Gateway,
    id: &crate::rpc::frame::Id,
    answer: Value,
    row: &'static str,
    endpoint: &Endpoint,
    now: Instant,
) -> Reply {
    let url = endpoint.base_url.clone();
    let fetch_id = gw.model_fetches.next;
    gw.model_fetches.next += 1;
    let slot = gw.reactor.slot(TokenOwner::ModelList(fetch_id));
    match ModelsFetch::start(endpoint, &slot, now) {
        Ok(fetch) => {
            let timer = gw
                .timers
                .insert(now + FETCH_TIMEOUT, Timer::ModelList(fetch_id));
            gw.model_fetches.pending.insert(
                fetch_id,
                Pending {
                    request_id: id.clone(),
                    row,
                    fetch,
                    slot,
                    timer,
                    answer,
                    url,
                },
            );
            // A literal address may already be connected: look at once.
            on_ready(gw, fetch_id, now);
            None
        }
        Err(e) => {
            gw.reactor.release(&TokenOwner::ModelList(fetch_id));
            let mut answer = answer;
            let models = models_at(&answer, row);
            set_models(&mut answer, row, &models, Some(list_warning(&url, &e)));
            Some(Ok(answer))
        }
    }
}

fn list_warning(url: &str, why: &str) -> String {
    format!("could not list the models at {url} ({why}); showing the configured ones")
}

fn base_answer(gw: &Gateway, p: &Params) -> Result<Value, RpcError> {
    params::opt_str(p, "session_id")?;
    let session_model = match params::opt_str(p, "session_id")? {
        Some(id) if !id.trim().is_empty() => Some(
            gw.sessions
                .get(id.trim())
                .ok_or_else(RpcError::session_not_found)?
                .model
                .clone(),
        ),
        _ => None,
    };
    let provider = provider_of(gw, session_named(gw, p));
    let current = session_model.unwrap_or_else(|| provider.default_model().to_string());
    let (slug, name) = current_provider(gw, session_named(gw, p));
    let mut models = vec![current.clone()];
    if slug != "offline" {
        push_unique(&mut models, [provider.default_model().to_string()]);
        push_unique(&mut models, configured_models(&config::doc(gw)));
    }
    let doc = config::doc(gw);
    let available = crate::model::select::available(&gw.cfg, &doc);
    let listed = available.iter().find(|a| a.id == slug);
    let auth_type = match listed {
        _ if slug == "offline" => "none",
        Some(a) => a.auth_type,
        None => "api_key",
    };
    // A provider of the table is authenticated while its key or login is there (not after
    // `model.disconnect`); the others (offline, `custom:`) always are.
    let authenticated = listed.is_none_or(|a| a.ready);
    let mut rows = vec![json!({
        "slug": slug,
        "name": name,
        "models": models,
        "total_models": models.len(),
        "is_current": true,
        "authenticated": authenticated,
        "auth_type": auth_type,
    })];
    // The other providers this home has a key or login for, then (when the picker asks) the
    // rest with the variable their key goes in: `/model NAME --provider SLUG` switches.
    let unconfigured = params::opt_bool(p, "include_unconfigured")?.unwrap_or(false);
    for other in available {
        if other.id == slug || (!other.ready && !unconfigured) {
            continue;
        }
        rows.push(picker_row(other, false));
    }
    Ok(json!({
        "model": current,
        "provider": slug,
        "providers": rows,
    }))
}

/// The picker's row of a provider this home could reach (`is_current`: the session runs on it).
fn picker_row(p: crate::model::select::Available, is_current: bool) -> Value {
    let models: Vec<String> = p.model.into_iter().collect();
    let mut row = json!({
        "slug": p.id,
        "name": p.name,
        "total_models": models.len(),
        "models": models,
        "is_current": is_current,
        "authenticated": p.ready,
        "auth_type": p.auth_type,
    });
    if let Some(var) = p.key_env {
        row["key_env"] = json!(var);
    }
    row
}

/// A source of the fetch is ready (or it just started): make progress, answer when done.
pub fn on_ready(gw: &mut Gateway, fetch_id: u64, now: Instant) {
    let Some(p) = gw.model_fetches.pending.get_mut(&fetch_id) else {
        return;
    };
    if let Fetched::Done(result) = p.fetch.advance(&p.slot, now) {
        finish(gw, fetch_id, result);
    }
}

/// The endpoint took too long: answer with what config.yaml lists.
pub fn on_timeout(gw: &mut Gateway, fetch_id: u64) {
    if let Some(p) = gw.model_fetches.pending.get_mut(&fetch_id) {
        p.fetch.abort(&p.slot);
        let why = format!("no answer within {}s", FETCH_TIMEOUT.as_secs());
        finish(gw, fetch_id, Err(why));
    }
}

/// Shutdown: answer every waiting request now.
pub fn answer_all(gw: &mut Gateway) {
    let ids: Vec<u64> = gw.model_fetches.pending.keys().copied().collect();
    for id in ids {
        if let Some(p) = gw.model_fetches.pending.get_mut(&id) {
            p.fetch.abort(&p.slot);
        }
        finish(gw, id, Err("the gateway is shutting down".into()));
    }
}

fn finish(gw: &mut Gateway, fetch_id: u64, result: Result<Vec<String>, String>) {
    let Some(mut p) = gw.model_fetches.pending.remove(&fetch_id) else {
        return;
    };
    gw.timers.cancel(p.timer);
    gw.reactor.release(&TokenOwner::ModelList(fetch_id));
    let mut models = models_at(&p.answer, p.row);
    let warning = match result {
        Ok(ids) => {
            push_unique(&mut models, ids);
            None
        }
        Err(why) => Some(list_warning(&p.url, &why)),
    };
    set_models(&mut p.answer, p.row, &models, warning);
    gw.outbox().answer(&p.request_id, &p.answer);
}

/// Longest key `model.save_key` takes (an OAuth-sized token fits).
const KEY_MAX: usize = 8192;

/// `model.save_key {slug, api_key, session_id?}`, as Hermes answers it: the key saved in
/// `$HERMES_HOME/.env` under the provider's first key variable, the credentials read again
/// (`reload.env`), and `{provider: ROW}` answered, the row authenticated and holding the
/// models its endpoint lists. The key appears in no answer, error or log line.
pub fn save_key(gw: &mut Gateway, id: &crate::rpc::frame::Id, p: &Params, now: Instant) -> Reply {
    let (spec, var, key) = match key_to_save(gw, p) {
        Ok(k) => k,
        Err(e) => return Some(Err(e)),
    };
    if let Err(e) = crate::hermes_env::save(&gw.cfg.home, var, &key) {
        return Some(Err(RpcError::new(5034, e)));
    }
    // The key is saved whatever this says: a running turn only postpones the configured
    // provider's change (`/reload`), and a switch to this provider reads `.env` itself.
    let _ = super::reload::reload_env(gw);
    let current = current_provider(gw, session_named(gw, p)).0;
    let doc = config::doc(gw);
    let row = crate::model::select::available(&gw.cfg, &doc)
        .into_iter()
        .find(|a| a.id == spec.id)
        .map_or_else(
            || json!({"slug": spec.id, "name": spec.name, "models": [], "total_models": 0}),
            |a| picker_row(a, spec.id == current),
        );
    let mut answer = json!({ "provider": row });
    answer["provider"]["authenticated"] = json!(true);
    let asked = crate::model::resolve::Asked {
        provider: Some(spec.id),
        // Only the endpoint is wanted here; the model does not change it.
        model: Some(gw.cfg.model.as_deref().unwrap_or("any")),
        base_url: gw.cfg.base_url.as_deref(),
    };
    match crate::model::select::endpoint(&gw.cfg, asked) {
        Ok(e) => answer_with_models(gw, id, answer, SAVED_ROW, &e, now),
        Err(why) => {
            answer["provider"]["warning"] = json!(why);
            Some(Ok(answer))
        }
    }
}

/// The provider, its variable and the key a `model.save_key` asks to save, or a bounded
/// refusal that never repeats the key.
fn key_to_save(
    gw: &Gateway,
    p: &Params,
) -> Result<
    (
        &'static crate::model::providers::ProviderSpec,
        &'static str,
        String,
    ),
    RpcError,
> {
    use crate::model::providers::{Login, spec};
    let slug = params::opt_str(p, "slug")?.unwrap_or("").trim();
    let key = params::opt_str(p, "api_key")?.unwrap_or("").trim();
    params::opt_str(p, "session_id")?;
    if slug.is_empty() || key.is_empty() {
        return Err(RpcError::new(4001, "slug and api_key are required"));
    }
    refuse_if_managed(gw)?;
    if key.len() > KEY_MAX {
        return Err(RpcError::new(
            4001,
            format!("the key is longer than {KEY_MAX} bytes; refused"),
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(RpcError::new(
            4001,
            "the key must be printable ASCII, without spaces or line breaks; refused",
        ));
    }
    let Some(spec) = spec(slug) else {
        let shown: String = slug.chars().take(64).collect();
        return Err(RpcError::new(
            code::INVALID_VALUE,
            format!("unknown provider: {shown:?}"),
        ));
    };
    if spec.login != Login::Key {
        return Err(RpcError::new(
            4003,
            format!(
                "{} is reached through a login, not a key — run `hermes model` to configure",
                spec.name
            ),
        ));
    }
    let Some(var) = spec.key_vars.first() else {
        return Err(RpcError::new(
            4004,
            format!("no variable holds a key for {}", spec.name),
        ));
    };
    Ok((spec, var, key.to_string()))
}

/// `model.disconnect {slug}`, as Hermes answers it: the provider's key variables taken out of
/// `$HERMES_HOME/.env` (their exported values no longer read either), its login and
/// credential-pool entry out of auth.json, the credentials read again at once (the configured
/// provider and those sessions switched to), and `{slug, name, disconnected: true}` answered.
/// Refused while a turn runs, so the turn's provider is never changed under it.
pub fn disconnect(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let slug = params::opt_str(p, "slug")?.unwrap_or("").trim();
    params::opt_str(p, "session_id")?;
    if slug.is_empty() {
        return Err(RpcError::new(4001, "slug is required"));
    }
    refuse_if_managed(gw)?;
    if gw.sessions.values().any(|s| s.running()) {
        return Err(RpcError::new(
            code::BUSY,
            "a turn is running; disconnect after it ends (or /interrupt it)",
        ));
    }
    let shown: String = slug.chars().take(64).collect();
    let spec = crate::model::providers::spec(slug);
    let failed = |e: String| RpcError::new(5035, e);
    let forgot_login = crate::model::select::forget_login(&gw.cfg, slug).map_err(failed)?;
    let vars = spec.map_or(&[][..], |s| s.key_vars);
    let removed = crate::hermes_env::remove(&gw.cfg.home, vars);
    // Whatever was removed is no longer used, even when the rest failed.
    if forgot_login || removed.as_ref().is_ok_and(|r| !r.is_empty()) {
        crate::hermes_env::withdraw(vars);
        super::reload::reload_env(gw)?;
        super::reload::rebuild_switched(gw);
    }
    if removed.map_err(failed)?.is_empty() && !forgot_login {
        return Err(RpcError::new(
            4005,
            format!("no credentials found for {shown}"),
        ));
    }
    Ok(json!({
        "slug": slug,
        "name": spec.map_or(slug, |s| s.name),
        "disconnected": true,
    }))
}

/// Hermes' 4006: a package manager's install keeps its credentials as they are.
fn refuse_if_managed(gw: &Gateway) -> Result<(), RpcError> {
    let env = crate::hermes_env::HermesEnv::load(&gw.cfg.home).unwrap_or_default();
    match crate::managed_install::is_managed(&gw.cfg.home, &env) {
        true => Err(RpcError::new(
            4006,
            "managed install — credentials are read-only",
        )),
        false => Ok(()),
    }
}
