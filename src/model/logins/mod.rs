//! The logins Hermes sends tokens of, as the model layer uses them: Nous Portal and OpenAI Codex
//! (a ChatGPT login), whose tokens `hermes auth` / `hermes model` keep in
//! `$HERMES_HOME/auth.json`, and Claude Code's, which Claude Code keeps in
//! `~/.claude/.credentials.json`. This module owns those files for the model layer: it reads the
//! tokens, tells whether the one a call would send is still good, and renews an expiring one as
//! Hermes does, writing the file back under auth.json's lock. Logging in stays `hermes`'s (and
//! `claude`'s).
//!
//! `state.rs` is what auth.json's fields mean and `claude.rs` the credentials file's (pure),
//! `store.rs` the files and locks,
//! `refresh.rs` a renewal step by step (its POST through the model layer's one-shot exchange),
//! `jwt.rs` and `iso_time.rs` the tokens' claims and the file's timestamps.

pub mod claude;
pub mod iso_time;
pub mod jwt;
pub mod refresh;
pub mod state;
pub mod store;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub use refresh::{Outcome, Refresh};
pub use state::Decision;
pub use store::Files;

/// Drop `provider`'s login and credential-pool entry from auth.json, as `hermes logout` does,
/// under auth.json's lock (tried once: busy is an error to try again, never a wait). Whether
/// it held anything (if not, the file is left untouched).
pub fn forget(files: &Files, provider: &str) -> Result<bool, String> {
    let holds = |auth: &Value| state::forget(&mut auth.clone(), provider);
    // An unreadable file holds no login of ours (resolution reads it as missing too).
    if !files.read().is_ok_and(|auth| holds(&auth)) {
        return Ok(false);
    }
    let Some(_lock) = files.try_lock()? else {
        return Err(format!(
            "{} is being written by another Hermes process (its lock is held); try again",
            files.auth.display()
        ));
    };
    let mut auth = files.read()?;
    if !state::forget(&mut auth, provider) {
        return Ok(false);
    }
    files.save(&mut auth, crate::util::unix_now())?;
    Ok(true)
}

/// Which of Hermes' logins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nous,
    Codex,
    /// Claude Code's login, sent to provider `anthropic`.
    ClaudeCode,
}

impl Kind {
    /// Hermes' provider id (for Nous and Codex, the login's key under auth.json's `providers`).
    pub fn id(self) -> &'static str {
        match self {
            Kind::Nous => "nous",
            Kind::Codex => "openai-codex",
            Kind::ClaudeCode => "anthropic",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Nous => "Nous Portal",
            Kind::Codex => "OpenAI Codex",
            Kind::ClaudeCode => "Claude Code",
        }
    }
}

/// What resolution decides about a login: which one, where its token is renewed, and how
/// long a renewal may take. Plain data (an endpoint carries it).
#[derive(Debug, Clone, PartialEq)]
pub struct Login {
    pub kind: Kind,
    /// Nous: the portal the environment names (`HERMES_PORTAL_BASE_URL`,
    /// `NOUS_PORTAL_BASE_URL`; `None`: auth.json's when Hermes trusts it, else Nous' own).
    /// Codex: the token URL (`HERMES_CODEX_TOKEN_URL`; `None`: OpenAI's). Claude Code: the
    /// token URL (`HERMES_ANTHROPIC_TOKEN_URL`; `None`: Anthropic's two, in turn).
    pub url: Option<String>,
    /// The token endpoint's whole exchange (`HERMES_NOUS_TIMEOUT_SECONDS`, 15 s;
    /// `HERMES_CODEX_REFRESH_TIMEOUT_SECONDS`, 20 s, at least 5; Claude Code: Hermes' 10 s per
    /// endpoint).
    pub timeout: Duration,
}

impl Login {
    /// The login `kind` as the variables (`.env`'s, else the process's) set it up.
    pub fn of(kind: Kind, env: &dyn Fn(&str) -> Option<String>) -> Login {
        let var = |name: &str| {
            env(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let secs = |name: &str| {
            var(name)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite())
        };
        match kind {
            Kind::Nous => Login {
                kind,
                url: var("HERMES_PORTAL_BASE_URL").or_else(|| var("NOUS_PORTAL_BASE_URL")),
                timeout: Duration::from_secs_f64(
                    secs("HERMES_NOUS_TIMEOUT_SECONDS")
                        .filter(|s| *s > 0.0)
                        .unwrap_or(15.0)
                        .min(3600.0),
                ),
            },
            Kind::Codex => Login {
                kind,
                url: var("HERMES_CODEX_TOKEN_URL"),
                timeout: Duration::from_secs_f64(
                    secs("HERMES_CODEX_REFRESH_TIMEOUT_SECONDS")
                        .unwrap_or(20.0)
                        .clamp(5.0, 3600.0),
                ),
            },
            Kind::ClaudeCode => Login {
                kind,
                url: var("HERMES_ANTHROPIC_TOKEN_URL"),
                timeout: Duration::from_secs(10),
            },
        }
    }
}

/// A provider's hold on its login: where the files are, and the login's state as last read or
/// written (shared by the provider and the calls that renew it, so a token renewed once is
/// used by every later call).
#[derive(Clone)]
pub struct Keeper {
    inner: Rc<Inner>,
}

struct Inner {
    login: Login,
    files: Files,
    held: RefCell<Value>,
}

impl Keeper {
    /// `doc` is the login's file as resolution read it (auth.json, or Claude Code's).
    pub fn new(login: Login, files: Files, doc: &Value) -> Keeper {
        let held = state::login_state(doc, login.kind).clone();
        Keeper {
            inner: Rc::new(Inner {
                login,
                files,
                held: RefCell::new(held),
            }),
        }
    }

    pub fn login(&self) -> &Login {
        &self.inner.login
    }

    pub fn files(&self) -> &Files {
        &self.inner.files
    }

    /// What a call starting at Unix time `now` does with the token.
    pub fn decide(&self, now: f64) -> Decision {
        state::decide(self.inner.login.kind, &self.inner.held.borrow(), now)
    }

    /// The login's state from now on (read again, or renewed).
    fn hold(&self, state: Value) {
        *self.inner.held.borrow_mut() = state;
    }

    /// A renewal starting now.
    pub fn refresh(&self, now: Instant) -> Refresh {
        Refresh::new(self.clone(), None, now)
    }

    /// A renewal of `refused`, a token the server refused before its time (Hermes'
    /// `force_refresh`): renewed even if it looks good, unless auth.json holds another by then.
    pub fn renew_refused(&self, refused: String, now: Instant) -> Refresh {
        Refresh::new(self.clone(), Some(refused), now)
    }
}

#[cfg(test)]
mod tests;
