//! Every black-box test in one binary: the shared helpers are compiled once and there is one
//! link, not one per file (most of the CI build time). Each file is a module; run one with
//! `cargo test --release --test blackbox <file>::`.

// The tests read and write their own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

mod common;
mod crashkit;
#[path = "mcp/support.rs"]
mod mcp_support;
mod mockai;
mod procs;
#[path = "mcp/tls_server.rs"]
mod tls_server;
mod tui;

mod absent_features;
mod anthropic;
mod approvals;
mod attacks;
mod background;
mod backpressure;
mod bad_input;
mod beside_hermes;
mod big_delete;
mod big_resume;
mod chat;
mod checkpoints;
mod cli;
mod commands;
mod config_methods;
mod crash;
mod detach;
mod durability;
mod embedding;
mod exec;
mod exec_formats;
mod fast_mode;
mod fault_isolation;
mod file_safety;
mod file_tools;
mod hermes_schema;
mod hostile_files;
mod images;
mod layers;
mod logins;
mod mcp;
mod mcp_http;
mod mcp_tls;
mod methods;
mod openai;
mod policy;
mod providers;
mod responses;
mod rpc_log;
mod runner_stdin;
mod secrets;
mod session_ops;
mod shell_exec;
mod shell_state;
mod shutdown;
mod sim;
mod skills;
mod startup;
mod stderr;
mod store_faults;
mod store_shared;
mod subagents;
mod titles;
mod tools;
mod tui_e2e;
mod tui_methods;
