//! tui-gateway: a durable session gateway for terminal AI agents.
//!
//! Embedding: build a [`Config`], then [`Gateway::new`] on an [`Io`] and [`Gateway::run`].

// Unit tests read and write their own scratch files with std's plain calls.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod checkpoints;
pub mod cli;
pub mod client;
pub mod clock;
mod commit;
pub mod config;
pub mod config_file;
mod delegation;
mod detach;
pub mod diag;
mod effects;
pub mod event_loop;
pub mod flush;
pub mod heap;
pub mod hermes_env;
pub mod images;
pub mod managed_install;
pub mod mcp;
pub mod methods;
pub mod model;
mod owners;
pub mod persist;
pub mod private_file;
pub mod reactor;
pub mod rpc;
pub mod runner;
pub mod session;
pub mod shutdown;
pub mod signals;
pub mod skills;
pub mod store;
pub mod timer;
mod titles;
pub mod tool_label;
pub mod tools;
pub mod transcript;
pub mod util;

/// The gateway's version, as `gateway.ready` and the TUI's banner report it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use config::Config;
pub use event_loop::{Gateway, Io};
