//! A model reached over the network: one endpoint (base URL, key, the wire it speaks), the
//! requests it is sent, and the connections its answers left open for the next one.

use std::time::Instant;

use super::endpoint::Endpoint;
use super::exchange::{Destination, Exchange, Timing};
use super::http::Transport;
use super::login_call::LoginCall;
use super::logins::{Decision, Keeper};
use super::unreachable::Refused;
use super::{CallContext, ModelCall, ModelRequest, Provider};

/// Idle connections kept for the next request, and how long one is trusted to stay open.
const IDLE_MAX: usize = 4;
const IDLE_KEEP: std::time::Duration = std::time::Duration::from_secs(30);

pub struct RemoteProvider {
    endpoint: Endpoint,
    to: Destination,
    /// Connections whose last answer ended cleanly (HTTP/1.1 keep-alive), newest last.
    idle: Vec<(Transport, Instant)>,
    /// The login in auth.json the key comes from (Nous, Codex): checked before each call.
    login: Option<Keeper>,
}

impl RemoteProvider {
    pub fn new(endpoint: Endpoint, timing: Timing) -> Result<Self, String> {
        let to = Destination::new(&endpoint.base_url, timing, endpoint.key_name.clone())?;
        Ok(RemoteProvider {
            endpoint,
            to,
            idle: Vec::new(),
            login: None,
        })
    }

    /// The key is a login's, renewed as Hermes renews it when it is about to expire.
    pub fn with_login(mut self, login: Keeper) -> Self {
        self.login = Some(login);
        self
    }

    /// The same endpoint without connections or login, for a call to send its request once
    /// it has its key ([`RemoteProvider::use_key`]).
    pub(super) fn detached(&self) -> RemoteProvider {
        RemoteProvider {
            endpoint: self.endpoint.clone(),
            to: self.to.clone(),
            idle: Vec::new(),
            login: None,
        }
    }

    pub(super) fn use_key(&mut self, key: String) {
        self.endpoint.api_key = Some(key);
    }

    /// The newest idle connection young enough to still be open.
    fn take_idle(&mut self, now: Instant) -> Option<Transport> {
        self.idle
            .retain(|(_, since)| now.duration_since(*since) < IDLE_KEEP);
        self.idle.pop().map(|(t, _)| t)
    }

    /// The API a request for `model` goes out in.
    fn wire_for(&self, model: &str) -> super::wire::Wire {
        self.endpoint
            .wire_by_model
            .map_or(self.endpoint.wire, |rule| rule.wire(model))
    }

    /// The whole HTTP message of a request.
    fn http_message(&self, req: &ModelRequest<'_>) -> Vec<u8> {
        let mut wire = self.wire_for(req.model).request(req, &self.endpoint);
        if let Some(body) = wire.body.as_object_mut() {
            for (k, v) in &self.endpoint.extra_body {
                body.insert(k.clone(), v.clone());
            }
        }
        let body = wire.body.to_string();
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n",
            self.to.route.request_target(wire.path),
            self.to.url.authority(),
            body.len()
        );
        // The user's headers replace the wire's of the same name, as Hermes merges them last.
        let user = &self.endpoint.headers;
        let headers: Vec<&(String, String)> = wire
            .headers
            .iter()
            .filter(|(n, _)| !user.iter().any(|(u, _)| u.eq_ignore_ascii_case(n)))
            .chain(user)
            .collect();
        // Ours unless the wire or the endpoint names another (Claude Code's for OAuth, the
        // Codex CLI's for ChatGPT's backend).
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("user-agent"))
        {
            head.push_str(&format!("User-Agent: tui-gateway/{}\r\n", crate::VERSION));
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&self.to.route.request_headers());
        head.push_str("\r\n");
        let mut message = head.into_bytes();
        message.extend_from_slice(body.as_bytes());
        message
    }
}

impl Provider for RemoteProvider {
    fn recycle(&mut self, connection: Box<dyn std::any::Any>, now: Instant) {
        if let Ok(t) = connection.downcast::<Transport>() {
            self.idle.push((*t, now));
            if self.idle.len() > IDLE_MAX {
                self.idle.remove(0);
            }
        }
    }

    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn default_model(&self) -> &str {
        &self.endpoint.model
    }

    fn set_default_model(&mut self, model: &str) {
        self.endpoint.model = model.to_string();
    }

    fn set_fast(&mut self, on: bool) {
        self.endpoint.fast = on;
    }

    fn endpoint(&self) -> Option<&Endpoint> {
        Some(&self.endpoint)
    }

    fn start(
        &mut self,
        req: ModelRequest<'_>,
        ctx: &mut CallContext<'_>,
        now: Instant,
    ) -> Box<dyn ModelCall> {
        if let Some(login) = self.login.clone() {
            match login.decide(crate::util::unix_now()) {
                Decision::Use(key) => {
                    self.endpoint.api_key = Some(key.clone());
                    let first = self.exchange(&req, ctx, now);
                    return Box::new(LoginCall::renewing_on_refusal(
                        first,
                        login,
                        key,
                        &req,
                        self.detached(),
                    ));
                }
                Decision::Refresh => {
                    let refresh = login.refresh(now);
                    return Box::new(LoginCall::renewing_first(refresh, &req, self.detached()));
                }
                Decision::Refuse(why) => return Box::new(Refused(Some(why))),
            }
        }
        self.exchange(&req, ctx, now)
    }
}

impl RemoteProvider {
    /// The request sent with the endpoint's key as it is.
    fn exchange(
        &mut self,
        req: &ModelRequest<'_>,
        ctx: &mut CallContext<'_>,
        now: Instant,
    ) -> Box<dyn ModelCall> {
        let message = self.http_message(req);
        let reuse = self.take_idle(now);
        Box::new(
            Exchange::start(
                &self.to,
                req.model,
                message,
                self.wire_for(req.model).decoder_for(req, &self.endpoint),
                reuse,
                ctx,
                now,
            )
            .hiding(self.endpoint.api_key.as_deref()),
        )
    }
}
