//! Renewing a login's token on the loop, as Hermes does: auth.lock taken (tried again every
//! 50 ms while another process holds it, up to Hermes' timeout, never waited on), auth.json
//! read again under it (another process may have renewed the token meanwhile: that one is then
//! used as it is), for Nous the fresher tokens of the store Hermes shares between profiles
//! adopted, the token endpoint asked, its answer saved (a rotated refresh token is written
//! before anything else can fail: a spent one is never kept), the locks let go.

use std::time::{Duration, Instant};

use crate::reactor::Slot;
use serde_json::Value;

use super::state::{self, Decision, Refusal};
use super::store::Locked;
use super::{Keeper, Kind, claude};
use crate::model::oneshot::{OneShot, Request};

/// Which of the two locks a renewal takes.
#[derive(Clone, Copy)]
enum Which {
    Auth,
    Shared,
}

/// Largest token-endpoint answer read (it is a few KiB).
const ANSWER_MAX: usize = 64 * 1024;

/// How often a busy lock is tried again (Hermes' pause).
const LOCK_RETRY: Duration = Duration::from_millis(50);
/// How long auth.lock is waited for (Hermes' `AUTH_LOCK_TIMEOUT_SECONDS`).
const LOCK_TIMEOUT: Duration = Duration::from_secs(15);

enum Phase {
    LockAuth { until: Instant },
    LockShared { until: Instant },
    Post(Box<OneShot>),
    Over,
}

/// Where a renewal stands.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Going on: advance again on readiness of its token or at this instant.
    Wait(Option<Instant>),
    /// Done: the key to send.
    Key(String),
    /// Done without a key: the message for the user (never a token).
    Failed(String),
}

/// One renewal in flight.
pub struct Refresh {
    keeper: Keeper,
    phase: Phase,
    auth_lock: Option<Locked>,
    shared_lock: Option<Locked>,
    /// auth.json as read under the lock.
    auth: Value,
    /// The login's state being renewed.
    state: Value,
    /// Nous: the portal asked.
    portal: String,
    /// The user was told the lock is busy.
    told_waiting: bool,
    /// A token the server refused: renewed whatever its expiry says.
    refused: Option<String>,
    /// Claude Code: how many of Anthropic's token endpoints were asked.
    asked: usize,
}

impl Refresh {
    pub fn new(keeper: Keeper, refused: Option<String>, now: Instant) -> Refresh {
        let timeout = keeper.login().timeout;
        let until = now
            + match keeper.login().kind {
                Kind::Nous => LOCK_TIMEOUT,
                // The whole refresh runs under the lock: Hermes waits as long as one may take.
                Kind::Codex => LOCK_TIMEOUT.max(timeout + Duration::from_secs(5)),
                // Claude Code's may ask both of Anthropic's endpoints.
                Kind::ClaudeCode => LOCK_TIMEOUT.max(timeout * 2 + Duration::from_secs(5)),
            };
        Refresh {
            keeper,
            phase: Phase::LockAuth { until },
            auth_lock: None,
            shared_lock: None,
            auth: Value::Null,
            state: Value::Null,
            portal: String::new(),
            told_waiting: false,
            refused,
            asked: 0,
        }
    }

    /// What to do with the login's state as now read: a token the server refused is renewed
    /// even when it looks good.
    fn decide(&self, unix: f64) -> Decision {
        match state::decide(self.kind(), &self.state, unix) {
            Decision::Use(key) if self.refused.as_ref() == Some(&key) => Decision::Refresh,
            decision => decision,
        }
    }

    /// The kind of login renewed.
    fn kind(&self) -> Kind {
        self.keeper.login().kind
    }

    /// Make all the progress possible now. `notices` gets what the user should know meanwhile
    /// (the lock is busy).
    pub fn advance(&mut self, slot: &Slot, now: Instant, notices: &mut Vec<String>) -> Outcome {
        let outcome = self.step(slot, now, notices);
        if !matches!(outcome, Outcome::Wait(_)) {
            self.abort(slot);
        }
        outcome
    }

    /// Stop, releasing the sockets and the locks.
    pub fn abort(&mut self, slot: &Slot) {
        if let Phase::Post(post) = &mut self.phase {
            post.abort(slot);
        }
        self.phase = Phase::Over;
        self.shared_lock = None;
        self.auth_lock = None;
    }

    fn step(&mut self, slot: &Slot, now: Instant, notices: &mut Vec<String>) -> Outcome {
        loop {
            match &mut self.phase {
                Phase::Over => return Outcome::Failed("the login's renewal was stopped".into()),
                Phase::LockAuth { until } => {
                    let until = *until;
                    if let Some(outcome) = self.lock_then(Which::Auth, until, slot, now, notices) {
                        return outcome;
                    }
                }
                Phase::LockShared { until } => {
                    let until = *until;
                    if let Some(outcome) = self.lock_then(Which::Shared, until, slot, now, notices)
                    {
                        return outcome;
                    }
                }
                Phase::Post(post) => {
                    let deadline = post.deadline();
                    let answer = match post.advance(slot, now) {
                        None => return Outcome::Wait(Some(deadline)),
                        Some(answer) => answer,
                    };
                    if self.another_endpoint(&answer) {
                        if let Err(why) = self.post(slot, now) {
                            return Outcome::Failed(why);
                        }
                        continue;
                    }
                    return match answer {
                        Ok(answer) => {
                            self.answered(answer.status, answer.retry_after, &answer.body)
                        }
                        Err(why) => Outcome::Failed(format!(
                            "could not renew the {} login's token: {why}",
                            self.kind().name()
                        )),
                    };
                }
            }
        }
    }

    /// Tries one of the two locks and, once held, takes the step that follows it; `Some` ends
    /// the renewal's turn (waiting on the lock, done, or failed).
    fn lock_then(
        &mut self,
        which: Which,
        until: Instant,
        slot: &Slot,
        now: Instant,
        notices: &mut Vec<String>,
    ) -> Option<Outcome> {
        let files = self.keeper.files();
        let tried = match which {
            Which::Auth => files.try_lock(),
            Which::Shared => files.try_lock_shared(),
        };
        let lock = match self.locked(tried, until, now, notices, which) {
            Ok(lock) => lock,
            Err(outcome) => return Some(outcome),
        };
        let next = match which {
            Which::Auth => {
                self.auth_lock = Some(lock);
                self.after_auth_lock(slot, now)
            }
            Which::Shared => {
                self.shared_lock = Some(lock);
                self.after_shared_lock(slot, now)
            }
        };
        next.unwrap_or_else(|e| Some(Outcome::Failed(e)))
    }

    /// A lock tried: held, or the outcome for now (wait and retry, or give up past `until`).
    fn locked(
        &mut self,
        tried: Result<Option<Locked>, String>,
        until: Instant,
        now: Instant,
        notices: &mut Vec<String>,
        which: Which,
    ) -> Result<Locked, Outcome> {
        let (timed_out, what) = match which {
            Which::Auth => ("Timed out waiting for auth store lock", "auth.json"),
            Which::Shared => (
                "Timed out waiting for shared Nous auth lock",
                "the shared Nous login",
            ),
        };
        match tried {
            Ok(Some(lock)) => Ok(lock),
            Ok(None) if now >= until => Err(Outcome::Failed(timed_out.into())),
            Ok(None) => {
                self.tell_waiting(notices, what);
                Err(Outcome::Wait(Some((now + LOCK_RETRY).min(until))))
            }
            Err(e) => Err(Outcome::Failed(e)),
        }
    }

    fn tell_waiting(&mut self, notices: &mut Vec<String>, what: &str) {
        if !self.told_waiting {
            self.told_waiting = true;
            notices.push(format!(
                "waiting for the lock on {what}: another Hermes process (or another session here) \
                 is using the {} login",
                self.kind().name()
            ));
        }
    }

    /// Claude Code: whether a failed renewal goes on to Anthropic's next endpoint (Hermes asks
    /// the older host when the newer fails in any way; an endpoint of the environment is alone).
    fn another_endpoint(&self, answer: &Result<crate::model::oneshot::Answer, String>) -> bool {
        let failed = match answer {
            Ok(a) => !(200..300).contains(&a.status),
            Err(_) => true,
        };
        failed
            && self.kind() == Kind::ClaudeCode
            && self.keeper.login().url.is_none()
            && self.asked < claude::TOKEN_URLS.len()
    }

    /// auth.lock is held: read the file again and decide again.
    fn after_auth_lock(&mut self, slot: &Slot, now: Instant) -> Result<Option<Outcome>, String> {
        self.auth = self.keeper.files().read_of(self.kind())?;
        self.state = state::login_state(&self.auth, self.kind()).clone();
        match self.decide(crate::util::unix_now()) {
            Decision::Use(key) => Ok(Some(self.adopted(key))),
            Decision::Refuse(why) => Ok(Some(Outcome::Failed(why))),
            Decision::Refresh if self.kind() == Kind::Nous => {
                let wait = self.keeper.login().timeout + Duration::from_secs(5);
                self.phase = Phase::LockShared {
                    until: now + wait.max(LOCK_TIMEOUT),
                };
                Ok(None)
            }
            Decision::Refresh => self.post(slot, now).map(|()| None),
        }
    }

    /// Nous, the shared lock held too: another profile's fresher tokens first.
    fn after_shared_lock(&mut self, slot: &Slot, now: Instant) -> Result<Option<Outcome>, String> {
        if let Some(shared) = self.keeper.files().read_shared()
            && state::merge_shared_nous(&mut self.state, &shared)
        {
            let unix = crate::util::unix_now();
            let decision = self.decide(unix);
            if let Decision::Use(_) = decision {
                state::select_nous_key(&mut self.state, unix);
            }
            self.save(unix)?;
            match decision {
                Decision::Use(key) => return Ok(Some(self.adopted(key))),
                Decision::Refuse(why) => return Ok(Some(Outcome::Failed(why))),
                Decision::Refresh => {}
            }
        }
        self.post(slot, now).map(|()| None)
    }

    /// A token that needs no renewal (another process renewed it): held from now on.
    fn adopted(&mut self, key: String) -> Outcome {
        self.keeper.hold(self.state.clone());
        Outcome::Key(key)
    }

    /// Ask the token endpoint.
    fn post(&mut self, slot: &Slot, now: Instant) -> Result<(), String> {
        let login = self.keeper.login().clone();
        let refresh = state::refresh_token(login.kind, &self.state)
            .filter(|t| header_safe(t))
            .ok_or_else(|| {
                format!(
                    "the {} login's refresh token is missing or malformed. Run `hermes auth` to \
                     log in again.",
                    login.kind.name()
                )
            })?
            .to_string();
        let post = match login.kind {
            Kind::Nous => {
                self.portal = state::nous_portal(&self.state, login.url.as_deref());
                let client_id = self.state["client_id"]
                    .as_str()
                    .filter(|c| !c.trim().is_empty())
                    .unwrap_or(state::NOUS_CLIENT_ID)
                    .trim()
                    .to_string();
                let url = format!("{}/api/oauth/token", self.portal);
                let form = state::nous_form(&client_id);
                OneShot::start(
                    &Request {
                        method: "POST",
                        url: &url,
                        path: "",
                        headers: &[("x-nous-refresh-token", &refresh)],
                        form: Some(&form),
                        answer_max: ANSWER_MAX,
                    },
                    login.timeout,
                    slot,
                    now,
                )
            }
            Kind::Codex => OneShot::start(
                &Request {
                    method: "POST",
                    url: login.url.as_deref().unwrap_or(state::CODEX_TOKEN_URL),
                    path: "",
                    headers: &[],
                    form: Some(&state::codex_form(&refresh)),
                    answer_max: ANSWER_MAX,
                },
                login.timeout,
                slot,
                now,
            ),
            Kind::ClaudeCode => {
                let url = match &login.url {
                    Some(url) => url.as_str(),
                    None => claude::TOKEN_URLS[self.asked.min(claude::TOKEN_URLS.len() - 1)],
                };
                self.asked += 1;
                OneShot::start(
                    &Request {
                        method: "POST",
                        url,
                        path: "",
                        headers: &[],
                        form: Some(&claude::form(&refresh)),
                        answer_max: ANSWER_MAX,
                    },
                    login.timeout,
                    slot,
                    now,
                )
            }
        }
        .map_err(|why| {
            format!(
                "could not renew the {} login's token: {why}",
                login.kind.name()
            )
        })?;
        self.phase = Phase::Post(Box::new(post));
        Ok(())
    }

    /// The token endpoint answered.
    fn answered(&mut self, status: u16, retry_after: Option<f64>, body: &[u8]) -> Outcome {
        let unix = crate::util::unix_now();
        match self.kind() {
            Kind::Nous => match state::nous_answer(status, body) {
                Ok(payload) => {
                    let usable =
                        state::nous_refreshed(&mut self.state, &payload, &self.portal, unix);
                    state::sync_nous_pool(&mut self.auth, &self.state);
                    // Saved whatever the new token is worth: its refresh token is the live one.
                    if let Err(e) = self.save(unix) {
                        return Outcome::Failed(e);
                    }
                    if let Some(shared) = state::shared_nous(&self.state, unix) {
                        let _ = self.keeper.files().write_shared(&shared);
                    }
                    match usable {
                        Ok(()) => {
                            let key = self.state["access_token"]
                                .as_str()
                                .unwrap_or("")
                                .to_string();
                            self.adopted(key)
                        }
                        Err(why) => Outcome::Failed(why),
                    }
                }
                Err(refusal) => self.nous_refused(refusal, unix),
            },
            Kind::Codex => match state::codex_answer(status, retry_after, body) {
                Ok((access, refresh)) => {
                    state::codex_refreshed(&mut self.auth, &access, refresh.as_deref(), unix);
                    self.state = state::login_state(&self.auth, Kind::Codex).clone();
                    if let Err(e) = self.save(unix) {
                        return Outcome::Failed(e);
                    }
                    self.adopted(access)
                }
                Err(refusal) => Outcome::Failed(refusal.message),
            },
            Kind::ClaudeCode => match claude::answer(status, body) {
                Ok((access, refresh, lifetime)) => {
                    claude::refreshed(&mut self.state, &access, refresh.as_deref(), lifetime, unix);
                    if let Err(e) = self.save(unix) {
                        return Outcome::Failed(e);
                    }
                    self.adopted(access)
                }
                Err(why) => Outcome::Failed(why),
            },
        }
    }

    /// Nous refused: dead tokens are removed as Hermes removes them.
    fn nous_refused(&mut self, refusal: Refusal, unix: f64) -> Outcome {
        if state::nous_terminal(&refusal) {
            state::nous_quarantined(&mut self.state, &refusal, unix);
            state::drop_nous_pool_entries(&mut self.auth);
            let _ = self.save(unix);
            self.keeper.files().remove_shared();
            self.keeper.hold(self.state.clone());
        }
        Outcome::Failed(refusal.message)
    }

    /// The login's state put into its file (for auth.json's, the active login from now on, as
    /// Hermes makes it) and the file written.
    fn save(&mut self, unix: f64) -> Result<(), String> {
        let kind = self.kind();
        state::put_login(&mut self.auth, kind, self.state.clone());
        self.keeper.files().save_of(kind, &mut self.auth, unix)
    }
}

/// Whether a token can go in a header as it is (no line break to smuggle another in).
fn header_safe(s: &str) -> bool {
    !s.is_empty() && s.len() <= 16 * 1024 && s.bytes().all(|b| (0x21..0x7f).contains(&b))
}
