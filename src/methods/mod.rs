//! The dispatch table: method name → handler. A handler returns `Some(result)` to answer now,
//! or `None` when the answer is written later (long-running calls).

mod absent;
mod commands;
mod complete;
pub(crate) mod config;
mod delegation;
mod gateway;
pub(crate) mod images;
pub(crate) mod models;
mod ops;
pub(crate) mod params;
mod prompt;
mod quick;
mod reload;
mod reports;
mod rollback;
pub(crate) mod session;
pub(crate) mod skills;
mod slash;
mod slash_args;
mod toolbox;

use std::time::Instant;

use serde_json::Value;

pub(crate) use ops::drop_last_exchange;

use crate::event_loop::Gateway;
use crate::rpc::{Request, RpcError};

pub type Reply = Option<Result<Value, RpcError>>;

pub fn call(gw: &mut Gateway, req: Request, now: Instant) -> Reply {
    let reply = dispatch(gw, req, now);
    // The shutdown ends idle sessions while tools die: a call naming one is told why it is gone.
    if let Some(Err(e)) = &reply
        && e.code == crate::rpc::frame::code::SESSION_NOT_FOUND
        && let Err(shutting_down) = params::not_shutting_down(gw)
    {
        return Some(Err(shutting_down));
    }
    reply
}

fn dispatch(gw: &mut Gateway, req: Request, now: Instant) -> Reply {
    let p = &req.params;
    if req.method == "clipboard.paste" {
        return images::clipboard_paste(gw, &req.id, p, now);
    }
    if req.method == "shell.exec" {
        return prompt::shell_exec(gw, &req.id, p, now);
    }
    if req.method == "model.options" {
        return models::options(gw, &req.id, p, now);
    }
    // Checkpoints are answered when their git commands end.
    if let Some(ask) = rollback::ask_of(&req.method) {
        return rollback::call(gw, &req.id, ask, p, now);
    }
    if req.method == "session.compress" {
        return ops::compress(gw, &req.id, p, now);
    }
    // Quick commands are answered when their command ends.
    if req.method == "slash.exec" {
        return slash::slash_exec(gw, &req.id, p, now);
    }
    if req.method == "model.save_key" {
        return models::save_key(gw, &req.id, p, now);
    }
    if req.method == "skills.reload" {
        return skills::reload(gw, &req.id);
    }
    if req.method == "command.dispatch" {
        return slash::command_dispatch(gw, &req.id, p, now);
    }
    let answer = match req.method.as_str() {
        "ping" => Ok(serde_json::json!({"pong": true})),
        "client.capabilities" => gateway::client_capabilities(gw, &req.id, p),
        "gateway.capabilities" => Ok(gateway::capabilities()),
        "setup.status" => Ok(gateway::setup_status(gw)),
        "commands.catalog" => Ok(commands::catalog(gw)),
        "config.get" => config::get(gw, p),
        "config.set" => config::set(gw, p),
        "model.disconnect" => models::disconnect(gw, p),
        "delegation.status" => Ok(delegation::status(gw)),
        "delegation.pause" => delegation::pause(gw, p),
        "subagent.interrupt" => delegation::interrupt(gw, p, now),
        "spawn_tree.save" => delegation::save(gw, p),
        "spawn_tree.list" => delegation::list(gw, p),
        "spawn_tree.load" => delegation::load(gw, p),
        "pet.cells" => Ok(serde_json::json!({"enabled": false})),
        "input.detect_drop" => images::detect_drop(gw, p),
        "image.attach" => images::image_attach(gw, p),
        "image.attach_bytes" => images::image_attach_bytes(gw, p),
        "image.detach" => images::image_detach(gw, p),
        "complete.slash" => commands::complete_slash(gw, p),
        "complete.path" => complete::complete_path(gw, p, now),
        "skills.manage" => skills::manage(gw, p),
        "tools.configure" => {
            let servers = toolbox::mcp_servers(&gw.mcp);
            toolbox::tools_configure(p, &mut gw.tools.set, &servers)
        }
        "tools.list" => toolbox::tools_list(p, &gw.tools.set),
        "tools.show" => toolbox::tools_show(p, &gw.tools.set),
        "session.active_list" => session::active_list(gw, p),
        "session.create" => session::create(gw, p, now),
        "session.list" => session::list(gw, p),
        "session.most_recent" => session::most_recent(gw),
        "session.resume" => session::resume(gw, p, now),
        "session.history" => session::history(gw, p, now),
        "session.title" => session::title(gw, p),
        "session.usage" => session::usage(gw, p),
        "session.close" => session::close(gw, p, now),
        "session.delete" => session::delete(gw, p),
        "session.events.since" => session::events_since(gw, p),
        "terminal.resize" => session::resize(gw, p),
        "prompt.submit" => prompt::submit(gw, p, now),
        "session.interrupt" => prompt::interrupt(gw, p, now),
        "approval.respond" => prompt::approval_respond(gw, p, now),
        "clarify.respond" => prompt::clarify_respond(gw, p, now),
        "session.undo" => ops::undo(gw, p, now),
        "session.status" => ops::status(gw, p, now),
        "session.save" => ops::save(gw, p, now),
        "session.branch" => ops::branch(gw, p, now),
        "session.activate" => ops::activate(gw, req.id.client(), p, now),
        "session.steer" => ops::steer(gw, p),
        "prompt.background" => ops::background(gw, p, now),
        "process.stop" => ops::process_stop(gw, p, now),
        "reload.mcp" => ops::reload_mcp(gw, p, now),
        "reload.env" => reload::reload_env(gw),
        other => match absent::call(gw, other, p) {
            Some(answer) => answer,
            None => Err(RpcError::new(
                crate::rpc::frame::code::UNKNOWN_METHOD,
                format!("unknown method: {other}"),
            )),
        },
    };
    Some(answer)
}
