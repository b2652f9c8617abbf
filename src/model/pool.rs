//! Credential pools: several keys for one provider (auth.json's `credential_pool.<provider>`,
//! which `hermes auth add` writes), tried in turn as Hermes' `recover_with_credential_pool`
//! rotates them: a call refused for its key (401/403), its billing (402) or a rate limit (a
//! second 429: the first is retried once) is sent again with the pool's next key, and the
//! provider's later calls keep that key. The rotation lives in memory: auth.json is not written.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use serde_json::Value;

use super::endpoint::Endpoint;
use super::login_call::{KeptRequest, advance_watching};
use super::remote::RemoteProvider;
use super::wire::Wire;
use super::{CallContext, ModelCall, ModelEvent, ModelRequest, Progress, Provider};

/// Keys a pool may hold at most (a bound on what auth.json can make us try).
const KEYS_MAX: usize = 64;

/// One key of a pool and how a notice names it (never by its value).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolKey {
    pub value: String,
    pub label: String,
}

/// The keys `endpoint`'s calls rotate through, first the one to start with; empty when the
/// endpoint has no pool (fewer than two keys, a login, a key config.yaml names, a custom
/// endpoint, OpenRouter at another URL than its own: Hermes' `should_use_pool`).
pub fn keys(auth: &Value, endpoint: &Endpoint) -> Vec<PoolKey> {
    let mut out = ranked(auth, endpoint);
    if out.len() < 2 {
        out.clear();
    }
    out
}

/// The pool's keys for `endpoint` in the order they are tried, however few.
fn ranked(auth: &Value, endpoint: &Endpoint) -> Vec<PoolKey> {
    let provider = endpoint.provider.as_str();
    let from_variable = |name: &str| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    let own_key = endpoint
        .api_key
        .as_ref()
        .filter(|_| from_variable(&endpoint.key_name));
    let from_pool = endpoint.key_name == source_name(provider);
    let pooled = endpoint.login.is_none()
        && !provider.starts_with("custom")
        && (own_key.is_some() || endpoint.api_key.is_none() || from_pool)
        && (provider != "openrouter"
            || endpoint.base_url.trim_end_matches('/') == "https://openrouter.ai/api/v1");
    let Some(entries) = auth["credential_pool"][provider]
        .as_array()
        .filter(|_| pooled)
    else {
        return Vec::new();
    };
    let mut ranked: Vec<(bool, i64, usize, PoolKey)> = Vec::new();
    let mut own_listed = false;
    for (i, e) in entries.iter().enumerate().take(KEYS_MAX) {
        let source = e["source"].as_str().unwrap_or("");
        let value = match source.strip_prefix("env:") {
            // An entry seeded from a variable counts only while that variable still gives the
            // key (Hermes' guard for a stale one), with the value it gives now.
            Some(var) => match own_key.filter(|_| var.trim() == endpoint.key_name) {
                Some(k) => {
                    own_listed = true;
                    k.clone()
                }
                None => continue,
            },
            None => match ["runtime_api_key", "access_token"]
                .iter()
                .find_map(|k| e[*k].as_str().map(str::trim).filter(|v| !v.is_empty()))
            {
                Some(v) => v.to_string(),
                None => continue,
            },
        };
        let label = ["label", "id"]
            .iter()
            .find_map(|k| e[*k].as_str().filter(|v| !v.is_empty()))
            .map_or_else(|| format!("entry {}", i + 1), str::to_string);
        let exhausted = e["last_status"].as_str() == Some("exhausted");
        let priority = e["priority"].as_i64().unwrap_or(0);
        ranked.push((exhausted, priority, i, PoolKey { value, label }));
    }
    // Keys not known to be spent first, then by priority, then as listed.
    ranked.sort_by_key(|(exhausted, priority, i, _)| (*exhausted, *priority, *i));
    let mut out: Vec<PoolKey> = Vec::new();
    if let Some(k) = own_key.filter(|_| !own_listed) {
        // Hermes seeds its pool from the provider's variables: that key is one of the pool's.
        out.push(PoolKey {
            value: k.clone(),
            label: endpoint.key_name.clone(),
        });
    }
    for (_, _, _, k) in ranked {
        if !out.iter().any(|o| o.value == k.value) {
            out.push(k);
        }
    }
    out
}

/// How a key resolution took from the pool is named (a refused key's hint, a notice).
pub fn source_name(provider: &str) -> String {
    format!("credential_pool.{provider} in auth.json")
}

/// The key a provider none of whose variables holds one takes from its pool, the first of
/// [`keys`]' order (Hermes' `resolve_api_key_provider_credentials` falls back to the pool).
pub fn stored_key(auth: &Value, provider: &str) -> Option<String> {
    let mut probe = Endpoint::new(provider, "", None, Wire::ChatCompletions);
    if provider == "openrouter" {
        probe.base_url = "https://openrouter.ai/api/v1".into();
    }
    probe.key_name = source_name(provider);
    let mut keys = ranked(auth, &probe);
    (!keys.is_empty()).then(|| keys.swap_remove(0).value)
}

/// A provider whose calls go out with the pool's current key.
pub struct WithPool {
    inner: RemoteProvider,
    keys: Rc<Vec<PoolKey>>,
    /// The key calls start with: the last one that was not refused.
    current: Rc<Cell<usize>>,
}

impl WithPool {
    pub fn new(inner: RemoteProvider, keys: Vec<PoolKey>) -> Self {
        WithPool {
            inner,
            keys: Rc::new(keys),
            current: Rc::default(),
        }
    }
}

impl Provider for WithPool {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn default_model(&self) -> &str {
        self.inner.default_model()
    }

    fn set_default_model(&mut self, model: &str) {
        self.inner.set_default_model(model);
    }

    fn set_fast(&mut self, on: bool) {
        self.inner.set_fast(on);
    }

    fn endpoint(&self) -> Option<&Endpoint> {
        self.inner.endpoint()
    }

    fn recycle(&mut self, connection: Box<dyn std::any::Any>, now: Instant) {
        // Connections are to the one host whatever the key (each request carries its own).
        self.inner.recycle(connection, now);
    }

    fn start(
        &mut self,
        req: ModelRequest<'_>,
        ctx: &mut CallContext<'_>,
        now: Instant,
    ) -> Box<dyn ModelCall> {
        let at = self.current.get() % self.keys.len();
        self.inner.use_key(self.keys[at].value.clone());
        let entitlement_403 = self
            .inner
            .endpoint()
            .is_some_and(|e| e.provider == "anthropic" && e.wire == Wire::AnthropicMessages);
        let request = KeptRequest::of(&req);
        let call = self.inner.start(req, ctx, now);
        Box::new(Rotating {
            call,
            request,
            to: self.inner.detached(),
            keys: self.keys.clone(),
            current: self.current.clone(),
            at,
            tried: 1,
            said: false,
            entitlement_403,
        })
    }
}

/// A call that goes on with the pool's next key when the one in flight is refused before
/// anything was said.
struct Rotating {
    call: Box<dyn ModelCall>,
    request: KeptRequest,
    to: RemoteProvider,
    keys: Rc<Vec<PoolKey>>,
    current: Rc<Cell<usize>>,
    at: usize,
    /// Keys this call has been sent with: each at most once.
    tried: usize,
    said: bool,
    /// A 403 from Anthropic's Messages API is the account's entitlement, which another key of
    /// the same account does not change (Hermes does not rotate on it).
    entitlement_403: bool,
}

impl Rotating {
    fn rotates_on(&self, status: Option<u16>) -> bool {
        match status {
            Some(401 | 402 | 429) => true,
            Some(403) => !self.entitlement_403,
            _ => false,
        }
    }
}

impl ModelCall for Rotating {
    fn advance(
        &mut self,
        ctx: &mut CallContext<'_>,
        now: Instant,
        out: &mut Vec<ModelEvent>,
    ) -> Progress {
        let (progress, failed) =
            advance_watching(self.call.as_mut(), &mut self.said, ctx, now, out);
        let Some(failed) = failed else {
            return progress;
        };
        let status = self.call.failed_status();
        if !self.rotates_on(status) || self.tried >= self.keys.len() {
            return progress;
        }
        let next = (self.at + 1) % self.keys.len();
        out.remove(failed);
        out.push(ModelEvent::Notice(format!(
            "{}: the key {} was refused (HTTP {}); trying the pool's next key, {}",
            self.to.name(),
            self.keys[self.at].label,
            status.unwrap_or(0),
            self.keys[next].label
        )));
        self.call.abort(ctx);
        self.at = next;
        self.tried += 1;
        self.current.set(next);
        self.to.use_key(self.keys[next].value.clone());
        self.call = self.to.start(self.request.view(), ctx, now);
        Progress::Ready
    }

    fn abort(&mut self, ctx: &mut CallContext<'_>) {
        self.call.abort(ctx);
    }

    fn take_connection(&mut self) -> Option<Box<dyn std::any::Any>> {
        self.call.take_connection()
    }

    fn key_refused(&self) -> bool {
        self.call.key_refused()
    }

    fn may_fall_back(&self) -> bool {
        self.call.may_fall_back()
    }

    fn failed_status(&self) -> Option<u16> {
        self.call.failed_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoint(provider: &str, key: Option<&str>, key_name: &str) -> Endpoint {
        let mut e = Endpoint::new(
            provider,
            "https://api.deepseek.com/v1",
            key.map(str::to_string),
            Wire::ChatCompletions,
        );
        e.key_name = key_name.to_string();
        e
    }

    fn labels(keys: &[PoolKey]) -> Vec<(&str, &str)> {
        keys.iter()
            .map(|k| (k.value.as_str(), k.label.as_str()))
            .collect()
    }

    #[test]
    fn the_variables_key_first_then_the_entries_spent_ones_last() {
        let auth = json!({"credential_pool": {"deepseek": [
            {"id": "a1", "label": "work", "source": "manual", "access_token": "sk-work",
             "last_status": "exhausted"},
            {"id": "b2", "source": "manual", "runtime_api_key": "sk-home"},
            {"id": "c3", "source": "env:DEEPSEEK_API_KEY", "access_token": "sk-stale-copy"},
            {"id": "d4", "source": "manual", "access_token": "  "},
            "not an entry",
        ]}});
        let e = endpoint("deepseek", Some("sk-env"), "DEEPSEEK_API_KEY");
        assert_eq!(
            labels(&keys(&auth, &e)),
            [("sk-home", "b2"), ("sk-env", "c3"), ("sk-work", "work")],
            "in the pool's order; the variable's entry takes the value it holds now"
        );
        // An entry of a variable that no longer gives the key is left out (stale).
        let e = endpoint("deepseek", Some("sk-other"), "DEEPSEEK_OTHER_KEY");
        assert_eq!(
            labels(&keys(&auth, &e)),
            [
                ("sk-other", "DEEPSEEK_OTHER_KEY"),
                ("sk-home", "b2"),
                ("sk-work", "work")
            ]
        );
        // Keys only in the pool.
        let e = endpoint("deepseek", None, "the endpoint's key");
        assert_eq!(
            labels(&keys(&auth, &e)),
            [("sk-home", "b2"), ("sk-work", "work")]
        );
    }

    #[test]
    fn a_provider_without_a_variables_key_takes_the_pools_first() {
        let auth = json!({"credential_pool": {"deepseek": [
            {"id": "a", "source": "manual", "access_token": "sk-spent", "last_status": "exhausted"},
            {"id": "b", "source": "env:DEEPSEEK_API_KEY", "access_token": "sk-stale"},
            {"id": "c", "source": "manual", "access_token": "sk-fresh"},
        ]}});
        assert_eq!(stored_key(&auth, "deepseek").as_deref(), Some("sk-fresh"));
        assert_eq!(stored_key(&auth, "zai"), None);
        // Resolved so, the endpoint rotates through the same pool.
        let e = endpoint("deepseek", Some("sk-fresh"), &source_name("deepseek"));
        assert_eq!(
            labels(&keys(&auth, &e)),
            [("sk-fresh", "c"), ("sk-spent", "a")]
        );
    }

    #[test]
    fn no_pool_where_hermes_uses_none() {
        let auth = json!({"credential_pool": {
            "deepseek": [{"source": "manual", "access_token": "sk-a"}],
            "openrouter": [{"source": "manual", "access_token": "sk-or-b"}],
            "custom:lab": [{"source": "manual", "access_token": "sk-c"}],
        }});
        // One key is no pool to rotate through.
        assert!(keys(&auth, &endpoint("deepseek", None, "x")).is_empty());
        // A key config.yaml names is the one used.
        let e = endpoint("deepseek", Some("sk-cfg"), "model.api_key in config.yaml");
        assert!(keys(&auth, &e).is_empty());
        let mut e = endpoint("openrouter", Some("sk-or-a"), "OPENROUTER_API_KEY");
        e.base_url = "https://openrouter.ai/api/v1".into();
        assert_eq!(keys(&auth, &e).len(), 2);
        e.base_url = "http://127.0.0.1:9/v1".into();
        assert!(keys(&auth, &e).is_empty(), "OpenRouter at another URL");
        let e = endpoint("custom:lab", Some("sk-d"), "LAB_KEY");
        assert!(keys(&auth, &e).is_empty());
        assert!(keys(&Value::Null, &endpoint("deepseek", Some("k"), "K")).is_empty());
    }
}
