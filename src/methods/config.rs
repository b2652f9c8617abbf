//! `config.set` / `config.get` with the keys and answers the stock TUI uses. Session-scoped keys
//! (`model`, `yolo`, `reasoning` effort, `verbose`) change the live session; display keys are
//! persisted in `$HERMES_HOME/config.yaml`, edited in place (`config_file`).

use serde_json::{Value, json};
use yaml_rust2::Yaml;

use super::params::{self, Params};
use super::session::live;
use crate::config_file::{self, Edit, Scalar};
use crate::event_loop::Gateway;
use crate::rpc::RpcError;
use crate::rpc::frame::code;

const DETAIL_MODES: [&str; 3] = ["hidden", "collapsed", "expanded"];
const DETAIL_SECTIONS: [&str; 4] = ["thinking", "tools", "subagents", "activity"];
const VERBOSE_CYCLE: [&str; 4] = ["off", "new", "all", "verbose"];
const BUSY_MODES: [&str; 3] = ["queue", "steer", "interrupt"];
const INDICATORS: [&str; 4] = ["ascii", "emoji", "kaomoji", "unicode"];
const STATUSBAR: [&str; 3] = ["off", "top", "bottom"];
const THINKING_MODES: [&str; 3] = ["collapsed", "truncated", "full"];
/// Hermes' levels (`VALID_REASONING_EFFORTS` and `none`); each wire maps them to what its API takes.
const EFFORTS: [&str; 8] = [
    "none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra",
];
/// Longest model name accepted.
const MODEL_NAME_MAX: usize = 256;

/// `value` as text: strings as given, booleans and numbers spelled out, absent as "".
fn value_text(p: &Params) -> Result<String, RpcError> {
    Ok(match p.get("value") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "invalid params: value must be a string",
            ));
        }
    })
}

fn one_of(key: &str, v: &str, allowed: &[&str]) -> Result<(), RpcError> {
    if allowed.contains(&v) {
        Ok(())
    } else {
        Err(RpcError::invalid_params(format!(
            "invalid params: value for {key} must be one of {}, got {v:?}",
            allowed.join("|")
        )))
    }
}

fn unsupported(key: &str, why: &str) -> RpcError {
    RpcError::new(
        code::NOT_SUPPORTED,
        format!("not supported by tui-gateway: {key} ({why})"),
    )
}

fn persist(gw: &Gateway, edits: &[Edit<'_>]) -> Result<(), RpcError> {
    config_file::update(&gw.cfg.home, edits).map_err(|e| RpcError::new(code::INTERNAL, e))
}

/// The parsed config.yaml, or an empty document when it is missing or unusable.
pub(super) fn doc(gw: &Gateway) -> Yaml {
    config_file::load(&gw.cfg.home).unwrap_or(Yaml::Null)
}

fn display_str(doc: &Yaml, key: &str) -> Option<String> {
    config_file::string_at(doc, &format!("display.{key}")).map(|s| s.to_ascii_lowercase())
}

fn ok(key: &str, value: impl Into<Value>) -> Result<Value, RpcError> {
    Ok(json!({ "key": key, "value": value.into() }))
}

/// The session named by `session_id`, if the request names one (an unknown one is an error).
fn optional_session(gw: &Gateway, p: &Params) -> Result<Option<String>, RpcError> {
    match params::opt_str(p, "session_id")? {
        Some(id) if !id.trim().is_empty() => {
            let id = id.trim();
            if gw.sessions.contains_key(id) {
                Ok(Some(id.to_string()))
            } else {
                Err(RpcError::session_not_found())
            }
        }
        _ => Ok(None),
    }
}

pub fn set(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let key = params::req_str(p, "key")?.trim().to_string();
    let value = value_text(p)?;
    let v = value.trim().to_ascii_lowercase();
    match key.as_str() {
        "model" => set_model(gw, p, &value),
        "yolo" => set_yolo(gw, p, &v),
        "reasoning" => set_reasoning(gw, p, &v),
        "verbose" => set_verbose(gw, p, &v),
        "busy" => {
            if v.is_empty() || v == "status" {
                let cur = display_str(&doc(gw), "busy_input_mode")
                    .filter(|m| BUSY_MODES.contains(&m.as_str()))
                    .unwrap_or_else(|| "interrupt".into());
                return ok("busy", cur);
            }
            one_of("busy", &v, &BUSY_MODES)?;
            persist(gw, &[("display.busy_input_mode", Some(Scalar::str(&v)))])?;
            ok("busy", v)
        }
        "details_mode" => {
            one_of("details_mode", &v, &DETAIL_MODES)?;
            let sections: Vec<String> = DETAIL_SECTIONS
                .iter()
                .map(|s| format!("display.sections.{s}"))
                .collect();
            let mut edits: Vec<Edit<'_>> = vec![("display.details_mode", Some(Scalar::str(&v)))];
            edits.extend(sections.iter().map(|k| (k.as_str(), Some(Scalar::str(&v)))));
            persist(gw, &edits)?;
            ok("details_mode", v)
        }
        k if k.starts_with("details_mode.") => {
            let section = &k["details_mode.".len()..];
            one_of("the section", section, &DETAIL_SECTIONS)?;
            let path = format!("display.sections.{section}");
            if v.is_empty() {
                persist(gw, &[(path.as_str(), None)])?;
            } else {
                one_of(k, &v, &DETAIL_MODES)?;
                persist(gw, &[(path.as_str(), Some(Scalar::str(&v)))])?;
            }
            ok(k, v)
        }
        "thinking_mode" => {
            one_of("thinking_mode", &v, &THINKING_MODES)?;
            let details = if v == "full" { "expanded" } else { "collapsed" };
            persist(
                gw,
                &[
                    ("display.thinking_mode", Some(Scalar::str(&v))),
                    ("display.details_mode", Some(Scalar::str(details))),
                ],
            )?;
            ok("thinking_mode", v)
        }
        "compact" => {
            let on = match v.as_str() {
                "" | "toggle" => !compact_on(&doc(gw)),
                "on" => true,
                "off" => false,
                _ => return one_of("compact", &v, &["on", "off", "toggle"]).map(|_| Value::Null),
            };
            persist(gw, &[("display.tui_compact", Some(Scalar::Bool(on)))])?;
            ok("compact", if on { "on" } else { "off" })
        }
        "statusbar" => {
            let next = match v.as_str() {
                "" | "toggle" if statusbar(&doc(gw)) == "off" => "top".to_string(),
                "" | "toggle" => "off".to_string(),
                "on" => "top".to_string(),
                _ => {
                    one_of("statusbar", &v, &STATUSBAR)?;
                    v
                }
            };
            persist(gw, &[("display.tui_statusbar", Some(Scalar::str(&next)))])?;
            ok("statusbar", next)
        }
        "mouse" => {
            let next = match v.as_str() {
                "" | "toggle" if mouse(&doc(gw)) == "off" => "all",
                "" | "toggle" => "off",
                other => mouse_alias(other).ok_or_else(|| {
                    RpcError::invalid_params(format!(
                        "invalid params: value for mouse must be one of on|off|toggle|wheel|buttons|all, got {other:?}"
                    ))
                })?,
            };
            persist(gw, &[("display.mouse_tracking", Some(Scalar::str(next)))])?;
            ok("mouse", next)
        }
        "indicator" => {
            one_of("indicator", &v, &INDICATORS)?;
            persist(
                gw,
                &[("display.tui_status_indicator", Some(Scalar::str(&v)))],
            )?;
            ok("indicator", v)
        }
        "skin" => {
            let name = value.trim();
            if name.is_empty()
                || name.len() > 64
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(RpcError::invalid_params(
                    "invalid params: value for skin must be a name (letters, digits, - and _)",
                ));
            }
            persist(gw, &[("display.skin", Some(Scalar::str(name)))])?;
            ok("skin", name)
        }
        "fast" => set_fast(gw, p, &v),
        "personality" => set_personality(gw, p, &value),
        "prompt" => Err(unsupported(
            "prompt",
            "custom system prompts are not implemented",
        )),
        other => Err(RpcError::invalid_params(format!(
            "invalid params: unknown config key: {other}"
        ))),
    }
}

/// What `config.set model` was given: `NAME [--provider SLUG] [--global|--session]`.
#[derive(Debug, PartialEq, Eq)]
struct ModelChoice {
    name: String,
    provider: Option<String>,
    global: bool,
}

fn parse_model_value(value: &str) -> Result<ModelChoice, RpcError> {
    let mut words = value.split_whitespace();
    let mut name = Vec::new();
    let mut choice = ModelChoice {
        name: String::new(),
        provider: None,
        global: false,
    };
    while let Some(w) = words.next() {
        match w {
            "--global" => choice.global = true,
            "--session" | "--tui-session" | "--refresh" => {}
            "--provider" => {
                choice.provider =
                    Some(words.next().map(str::to_ascii_lowercase).ok_or_else(|| {
                        RpcError::invalid_params("invalid params: --provider needs a name")
                    })?)
            }
            _ => name.push(w),
        }
    }
    choice.name = name.join(" ");
    if choice.name.is_empty() {
        return Err(RpcError::invalid_params(
            "invalid params: value must name a model",
        ));
    }
    if choice.name.len() > MODEL_NAME_MAX || choice.name.chars().any(char::is_control) {
        return Err(RpcError::invalid_params(format!(
            "invalid params: a model name is at most {MODEL_NAME_MAX} printable characters"
        )));
    }
    Ok(choice)
}

fn set_model(gw: &mut Gateway, p: &Params, value: &str) -> Result<Value, RpcError> {
    let choice = parse_model_value(value)?;
    let rid = if choice.global {
        optional_session(gw, p)?
    } else {
        Some(live(gw, p)?.runtime_id.clone())
    };
    if let Some(rid) = &rid
        && gw.sessions[rid].running()
    {
        return Err(RpcError::new(
            code::BUSY,
            "session busy: interrupt the current turn before switching models",
        ));
    }
    let current = rid.as_ref().map_or_else(
        || gw.provider.name().to_string(),
        |r| gw.sessions[r].provider.clone(),
    );
    let provider = match choice.provider.as_deref() {
        Some(want) if !same_provider(want, &current) => switch_provider(gw, want, &choice.name)?,
        _ => current,
    };
    if choice.global {
        // `model: NAME` (the short form) stays short; a `model:` section gets `default`.
        let key = if matches!(doc(gw)["model"], Yaml::String(_)) && choice.provider.is_none() {
            "model"
        } else {
            "model.default"
        };
        let mut edits = vec![(key, Some(Scalar::str(&choice.name)))];
        if choice.provider.is_some() {
            edits.push(("model.provider", Some(Scalar::str(&provider))));
        }
        persist(gw, &edits)?;
        if provider != gw.provider.name() {
            // The configured provider from now on: the switched one becomes it.
            if let Some(i) = gw
                .switched_providers
                .iter()
                .position(|p| p.name() == provider)
            {
                let next = gw.switched_providers.remove(i);
                let before = std::mem::replace(&mut gw.provider, next);
                gw.switched_providers.push(before);
                gw.provider_warning = None;
            }
        }
        gw.provider.set_default_model(&choice.name);
    }
    if let Some(rid) = rid {
        let window = gw.context_window_for(&choice.name);
        let base_url = gw.base_url_of(&provider);
        let s = gw
            .sessions
            .get_mut(&rid)
            .ok_or_else(RpcError::session_not_found)?;
        s.model = choice.name.clone();
        s.provider = provider.clone();
        s.base_url = base_url;
        s.context_max = window;
        s.row_dirty = true;
        gw.mark_dirty(&rid);
        gw.emit_info(&rid);
    }
    let warning = if provider == "offline" {
        "the offline model answers the same whatever the model is called"
    } else {
        ""
    };
    Ok(json!({
        "key": "model",
        "value": choice.name,
        "warning": warning,
        "confirm_required": false,
        "confirm_message": "",
    }))
}

/// Whether a name the user typed is the provider a session runs on (`claude` is `anthropic`).
pub(crate) fn same_provider(typed: &str, running: &str) -> bool {
    let typed = typed.trim().to_ascii_lowercase();
    typed == running || crate::model::providers::canonical(&typed) == running
}

/// Build the provider `want` names (as the configuration would resolve it, with the model
/// chosen) and keep it for the sessions that switch to it; its id. One that cannot be reached
/// is refused with the reason.
pub(crate) fn switch_provider(
    gw: &mut Gateway,
    want: &str,
    model: &str,
) -> Result<String, RpcError> {
    let picked = crate::model::select::choose_for(&gw.cfg, want, model);
    if picked.unreachable {
        let why = picked.note.unwrap_or_default();
        return Err(RpcError::new(code::NOT_SUPPORTED, why));
    }
    Ok(adopt_provider(gw, picked.provider))
}

/// Keep `provider` beside the configured one (replacing one of its name) for the sessions
/// that run on it; its name.
pub(crate) fn adopt_provider(
    gw: &mut Gateway,
    provider: Box<dyn crate::model::Provider>,
) -> String {
    let name = provider.name().to_string();
    if name != gw.provider.name() {
        gw.switched_providers.retain(|p| p.name() != name);
        gw.switched_providers.push(provider);
    }
    name
}

fn set_yolo(gw: &mut Gateway, p: &Params, v: &str) -> Result<Value, RpcError> {
    if let Some(scope) = params::opt_str(p, "scope")?
        && scope != "session"
    {
        return Err(unsupported(
            "yolo scope",
            "only a session's approvals can be skipped",
        ));
    }
    let s = live(gw, p)?;
    s.yolo = match v {
        "" | "toggle" => !s.yolo,
        "1" | "on" | "true" | "yes" => true,
        "0" | "off" | "false" | "no" => false,
        other => {
            return Err(RpcError::invalid_params(format!(
                "invalid params: value for yolo must be on, off or toggle, got {other:?}"
            )));
        }
    };
    let (rid, on) = (s.runtime_id.clone(), s.yolo);
    gw.emit_info(&rid);
    Ok(json!({ "key": "yolo", "value": if on { "1" } else { "0" }, "scope": "session" }))
}

fn set_reasoning(gw: &mut Gateway, p: &Params, v: &str) -> Result<Value, RpcError> {
    let display = |show: Option<bool>, full: Option<bool>, thinking: &str| {
        let mut edits: Vec<Edit<'static>> = Vec::new();
        if let Some(b) = show {
            edits.push(("display.show_reasoning", Some(Scalar::Bool(b))));
        }
        if let Some(b) = full {
            edits.push(("display.reasoning_full", Some(Scalar::Bool(b))));
        }
        edits.push(("display.sections.thinking", Some(Scalar::str(thinking))));
        edits
    };
    let (edits, answer) = match v {
        "show" | "on" => (display(Some(true), None, "expanded"), "show"),
        "hide" | "off" => (display(Some(false), None, "hidden"), "hide"),
        "full" | "all" => (display(None, Some(true), "expanded"), "full"),
        "clamp" | "collapse" | "short" => (display(None, Some(false), "collapsed"), "clamp"),
        effort => {
            if !EFFORTS.contains(&effort) {
                return Err(RpcError::invalid_params(format!(
                    "invalid params: value for reasoning must be show|hide|full|clamp or an effort ({}), got {effort:?}",
                    EFFORTS.join("|")
                )));
            }
            match optional_session(gw, p)? {
                Some(rid) => {
                    if let Some(s) = gw.sessions.get_mut(&rid) {
                        s.reasoning_effort = Some(effort.to_string());
                    }
                    gw.emit_info(&rid);
                }
                None => persist(gw, &[("agent.reasoning_effort", Some(Scalar::str(effort)))])?,
            }
            return ok("reasoning", effort);
        }
    };
    persist(gw, &edits)?;
    ok("reasoning", answer)
}

fn fast_word(on: bool) -> &'static str {
    if on { "fast" } else { "normal" }
}

/// `/fast [status|fast|on|normal|off|toggle]`: the session's model calls ask for its model's
/// fast service (`model/fast.rs`); config.yaml's `agent.service_tier` and new sessions follow.
fn set_fast(gw: &mut Gateway, p: &Params, v: &str) -> Result<Value, RpcError> {
    let rid = optional_session(gw, p)?;
    let session = rid.as_deref().and_then(|r| gw.sessions.get(r));
    let current = session.map_or_else(|| gw.fast_default(), |s| s.fast);
    let on = match v {
        "status" => return ok("fast", fast_word(current)),
        "" | "toggle" => !current,
        "fast" | "on" => true,
        "normal" | "off" => false,
        other => {
            return Err(RpcError::new(
                code::INVALID_VALUE,
                format!("unknown fast mode: {other}"),
            ));
        }
    };
    let model = session.map_or_else(|| gw.provider.default_model(), |s| &s.model);
    if on && crate::model::fast::of(model).is_none() {
        let why = match model.is_empty() {
            true => "fast mode is not available without a selected model",
            false => "fast mode is not available for this model",
        };
        return Err(RpcError::new(code::INVALID_VALUE, why));
    }
    persist(
        gw,
        &[("agent.service_tier", Some(Scalar::str(fast_word(on))))],
    )?;
    gw.provider.set_fast(on);
    if let Some(rid) = rid {
        if let Some(s) = gw.sessions.get_mut(&rid) {
            s.fast = on;
        }
        gw.emit_info(&rid);
    }
    ok("fast", fast_word(on))
}

fn set_verbose(gw: &mut Gateway, p: &Params, v: &str) -> Result<Value, RpcError> {
    let rid = optional_session(gw, p)?;
    let next = if v.is_empty() || v == "cycle" {
        let cur = verbose_mode(gw, rid.as_deref());
        let i = VERBOSE_CYCLE.iter().position(|m| *m == cur).unwrap_or(2);
        VERBOSE_CYCLE[(i + 1) % VERBOSE_CYCLE.len()].to_string()
    } else {
        one_of("verbose", v, &VERBOSE_CYCLE)?;
        v.to_string()
    };
    persist(gw, &[("display.tool_progress", Some(Scalar::str(&next)))])?;
    if let Some(s) = rid.and_then(|r| gw.sessions.get_mut(&r)) {
        s.tool_progress = Some(next.clone());
    }
    ok("verbose", next)
}

fn verbose_mode(gw: &Gateway, rid: Option<&str>) -> String {
    if let Some(m) = rid.and_then(|r| gw.sessions.get(r)?.tool_progress.clone()) {
        return m;
    }
    match &doc(gw)["display"]["tool_progress"] {
        Yaml::Boolean(false) => "off".into(),
        Yaml::String(s) if VERBOSE_CYCLE.contains(&s.trim().to_ascii_lowercase().as_str()) => {
            s.trim().to_ascii_lowercase()
        }
        _ => "all".into(),
    }
}

fn compact_on(doc: &Yaml) -> bool {
    matches!(doc["display"]["tui_compact"], Yaml::Boolean(true))
}

fn statusbar(doc: &Yaml) -> String {
    match &doc["display"]["tui_statusbar"] {
        Yaml::Boolean(false) => "off".into(),
        Yaml::String(s) if STATUSBAR.contains(&s.trim().to_ascii_lowercase().as_str()) => {
            s.trim().to_ascii_lowercase()
        }
        _ => "top".into(),
    }
}

fn mouse_alias(v: &str) -> Option<&'static str> {
    Some(match v {
        "0" | "false" | "no" | "off" => "off",
        "1" | "true" | "yes" | "on" | "all" | "any" | "full" => "all",
        "button" | "buttons" | "click" => "buttons",
        "scroll" | "wheel" => "wheel",
        _ => return None,
    })
}

fn mouse(doc: &Yaml) -> &'static str {
    let d = &doc["display"];
    let raw = if d["mouse_tracking"].is_badvalue() {
        &d["tui_mouse"]
    } else {
        &d["mouse_tracking"]
    };
    match raw {
        Yaml::Boolean(true) => "all",
        Yaml::Boolean(false) => "off",
        Yaml::Integer(0) => "off",
        Yaml::String(s) => mouse_alias(&s.trim().to_ascii_lowercase()).unwrap_or("all"),
        _ => "all",
    }
}

fn config_mtime(gw: &Gateway) -> f64 {
    std::fs::metadata(config_file::path(&gw.cfg.home))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

pub fn get(gw: &mut Gateway, p: &Params) -> Result<Value, RpcError> {
    let key = params::opt_str(p, "key")?
        .unwrap_or("full")
        .trim()
        .to_string();
    let rid = optional_session(gw, p)?;
    let session = rid.as_deref().and_then(|r| gw.sessions.get(r));
    if key == "mtime" {
        return Ok(json!({ "mtime": config_mtime(gw), "mcp_rev": gw.mcp.rev }));
    }
    let loaded = config_file::load(&gw.cfg.home);
    let d = loaded.clone().unwrap_or(Yaml::Null);
    let (slug, _) = super::models::current_provider(gw, rid.as_deref());
    let value = |v: Value| Ok(json!({ "value": v }));
    match key.as_str() {
        "full" => {
            let mut config = match config_file::to_json(&d) {
                Value::Object(m) => Value::Object(m),
                _ => json!({}),
            };
            if config.get("model").is_none() {
                config["model"] =
                    json!({ "default": gw.provider.default_model(), "provider": slug });
            }
            config["hermes_home"] = json!(gw.cfg.home.display().to_string());
            let mut answer = json!({ "config": config });
            if let Err(e) = loaded {
                answer["warning"] = json!(e);
            }
            Ok(answer)
        }
        "model" => value(json!(
            session.map_or(gw.provider.default_model(), |s| &s.model)
        )),
        "provider" => Ok(json!({
            "model": session.map_or(gw.provider.default_model(), |s| &s.model),
            "provider": slug,
            "providers": [slug],
        })),
        "profile" => {
            let home = gw.cfg.home.display().to_string();
            Ok(json!({ "home": home, "display": home }))
        }
        "yolo" => value(json!(if session.is_some_and(|s| s.yolo) {
            "1"
        } else {
            "0"
        })),
        "verbose" => value(json!(verbose_mode(gw, rid.as_deref()))),
        "reasoning" => {
            // The TUI's `/reasoning` asks without a session: read the most recently active one.
            let effort = session
                .or_else(|| gw.sessions.values().max_by_key(|s| s.last_active))
                .and_then(|s| s.reasoning_effort.clone())
                .or_else(|| match &d["agent"]["reasoning_effort"] {
                    Yaml::Boolean(false) => Some("none".into()),
                    _ => config_file::string_at(&d, "agent.reasoning_effort"),
                })
                .unwrap_or_else(|| "medium".into());
            let show = !matches!(d["display"]["show_reasoning"], Yaml::Boolean(false));
            Ok(json!({ "value": effort, "display": if show { "show" } else { "hide" } }))
        }
        "busy" => value(json!(
            display_str(&d, "busy_input_mode")
                .filter(|m| BUSY_MODES.contains(&m.as_str()))
                .unwrap_or_else(|| "interrupt".into())
        )),
        "details_mode" => value(json!(
            display_str(&d, "details_mode")
                .filter(|m| DETAIL_MODES.contains(&m.as_str()))
                .unwrap_or_else(|| "collapsed".into())
        )),
        "thinking_mode" => {
            let mode = display_str(&d, "thinking_mode")
                .filter(|m| THINKING_MODES.contains(&m.as_str()))
                .unwrap_or_else(|| {
                    match display_str(&d, "details_mode").as_deref() {
                        Some("expanded") => "full",
                        _ => "collapsed",
                    }
                    .into()
                });
            value(json!(mode))
        }
        "compact" => value(json!(if compact_on(&d) { "on" } else { "off" })),
        "statusbar" => value(json!(statusbar(&d))),
        "mouse" => value(json!(mouse(&d))),
        "indicator" => value(json!(
            display_str(&d, "tui_status_indicator")
                .filter(|m| INDICATORS.contains(&m.as_str()))
                .unwrap_or_else(|| "kaomoji".into())
        )),
        "skin" => value(json!(
            config_file::string_at(&d, "display.skin").unwrap_or_else(|| "default".into())
        )),
        "personality" => value(json!(
            config_file::string_at(&d, "display.personality")
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "none".into())
        )),
        "fast" => value(json!(fast_word(
            session.map_or_else(|| gw.fast_default(), |s| s.fast)
        ))),
        "approval_mode" | "approvals.mode" => value(json!(
            config_file::string_at(&d, "approvals.mode").unwrap_or_else(|| "manual".into())
        )),
        "prompt" => {
            Ok(json!({ "prompt": config_file::string_at(&d, "custom_prompt").unwrap_or_default() }))
        }
        // Keys we hold nothing for answer an empty value rather than an error.
        other => Ok(json!({ "key": other, "value": null })),
    }
}

/// User skins read for `/skin` completion at most (Hermes reads every one).
const USER_SKINS_MAX: usize = 200;
/// Largest skin file read (their banners are the bulk of them).
const SKIN_FILE_MAX: u64 = 256 * 1024;
/// Characters of a personality's prompt its completion shows (Hermes' 50).
const PERSONALITY_META_CHARS: usize = 50;

/// `(name, description)` of the user's skins, `$HERMES_HOME/skins/*.yaml` in name order, as
/// Hermes lists them: a file that does not parse or names no skin is left out.
pub(super) fn user_skins(home: &std::path::Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(home.join("skins")) else {
        return Vec::new();
    };
    let mut files: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .take(USER_SKINS_MAX)
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|path| {
            let text = crate::util::read_regular(path, SKIN_FILE_MAX).ok()??;
            let doc = config_file::parse_named(&text, "skin").ok()?;
            let name = doc["name"].as_str()?.trim().to_string();
            let about = doc["description"].as_str().unwrap_or("").trim().to_string();
            (!name.is_empty()).then_some((name, about))
        })
        .collect()
}

/// Hermes' code for a personality it cannot set.
const PERSONALITY_FAILED: i64 = 5001;

/// `/personality NAME` as Hermes does: NAME from config.yaml's `agent.personalities` (`none`
/// clears it), saved as `display.personality` and `agent.system_prompt`; the session named gets
/// it as its system prompt's last part from its next model call, with a note in its history
/// that the persona changed (so the model does not go on in the tone of what came before).
fn set_personality(gw: &mut Gateway, p: &Params, value: &str) -> Result<Value, RpcError> {
    let raw = value.trim();
    let wanted = raw.to_ascii_lowercase();
    let (name, prompt) = if matches!(wanted.as_str(), "" | "none" | "default" | "neutral") {
        (String::new(), String::new())
    } else {
        let d = doc(gw);
        match personality_prompt(&d, &wanted) {
            Some(prompt) => (wanted, prompt),
            None => {
                let names: Vec<String> = personalities(&d)
                    .into_iter()
                    .map(|(n, _)| format!("`{n}`"))
                    .collect();
                let mut text = format!("Unknown personality: `{raw}`.");
                match names.is_empty() {
                    true => text.push_str("\n\nNo personalities configured."),
                    false => text.push_str(&format!("\n\nAvailable: `none`, {}", names.join(", "))),
                }
                return Err(RpcError::new(PERSONALITY_FAILED, text));
            }
        }
    };
    let rid = match params::opt_str(p, "session_id")? {
        Some(id) if gw.sessions.contains_key(id) => Some(id.to_string()),
        _ => None,
    };
    if let Some(rid) = &rid
        && gw.sessions[rid].running()
    {
        return Err(super::ops::busy("personality"));
    }
    persist(
        gw,
        &[
            ("display.personality", Some(Scalar::str(&name))),
            ("agent.system_prompt", Some(Scalar::str(&prompt))),
        ],
    )?;
    let shown = if raw.is_empty() { "none" } else { raw };
    let mut answer = json!({"key": "personality", "value": shown, "history_reset": false});
    if let Some(rid) = rid {
        let note = match prompt.is_empty() {
            true => "[System: The user has cleared the personality overlay. From this point forward, respond in your normal default style.]".to_string(),
            false => format!("[System: The user has changed the assistant's personality. From this point forward, adopt the following persona and respond accordingly: {prompt}]"),
        };
        if let Some(s) = gw.sessions.get_mut(&rid) {
            s.overlay = Some(prompt);
            // Built again at the next model call, with the new last part.
            s.system_prompt = None;
            let at = crate::util::unix_now();
            s.append(crate::session::transcript::Message::new(
                crate::session::transcript::Role::User,
                Some(note),
                at,
            ));
        }
        gw.mark_dirty(&rid);
        gw.emit_info(&rid);
        if let Some(info) = crate::session::driver::TurnOwners::session_info(gw, &rid) {
            answer["info"] = info;
        }
    }
    Ok(answer)
}

/// The prompt of config.yaml's personality `name`, rendered as Hermes renders it: a mapping's
/// `system_prompt`, then its `tone` and `style`; text as it is.
fn personality_prompt(doc: &Yaml, name: &str) -> Option<String> {
    let Yaml::Hash(map) = &doc["agent"]["personalities"] else {
        return None;
    };
    let value = map
        .iter()
        .find(|(k, _)| k.as_str().is_some_and(|k| k.eq_ignore_ascii_case(name)))?
        .1;
    Some(match value {
        Yaml::Hash(_) => {
            let mut parts = vec![value["system_prompt"].as_str().unwrap_or("").to_string()];
            if let Some(tone) = value["tone"].as_str().filter(|t| !t.is_empty()) {
                parts.push(format!("Tone: {tone}"));
            }
            if let Some(style) = value["style"].as_str().filter(|t| !t.is_empty()) {
                parts.push(format!("Style: {style}"));
            }
            parts.retain(|p| !p.is_empty());
            parts.join("\n")
        }
        Yaml::String(text) => text.clone(),
        _ => return None,
    })
}

/// `(name, meta)` of config.yaml's `agent.personalities`: a mapping's `description` (else
/// the start of its `system_prompt`), a plain prompt's start.
pub(super) fn personalities(doc: &Yaml) -> Vec<(String, String)> {
    let Yaml::Hash(map) = &doc["agent"]["personalities"] else {
        return Vec::new();
    };
    let head = |t: &str| t.chars().take(PERSONALITY_META_CHARS).collect::<String>();
    map.iter()
        .filter_map(|(k, v)| {
            let name = k.as_str()?.to_string();
            let meta = match v {
                Yaml::Hash(_) => v["description"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| head(v["system_prompt"].as_str().unwrap_or(""))),
                other => head(other.as_str().unwrap_or("")),
            };
            Some((name, meta))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_values_with_the_pickers_flags() {
        let c = parse_model_value("gpt-4o --provider OpenAI --session").unwrap();
        assert_eq!(
            c,
            ModelChoice {
                name: "gpt-4o".into(),
                provider: Some("openai".into()),
                global: false
            }
        );
        assert!(parse_model_value("m --global").unwrap().global);
        assert!(parse_model_value("--global").is_err());
        assert!(parse_model_value("m --provider").is_err());
        assert!(parse_model_value(&"x".repeat(300)).is_err());
    }

    #[test]
    fn mouse_values_resolve_like_the_tui() {
        let d = config_file::parse("display:\n  tui_mouse: false\n").unwrap();
        assert_eq!(mouse(&d), "off");
        let d =
            config_file::parse("display:\n  mouse_tracking: scroll\n  tui_mouse: false\n").unwrap();
        assert_eq!(mouse(&d), "wheel");
        assert_eq!(mouse(&Yaml::Null), "all");
    }
}
