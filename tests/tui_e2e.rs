//! The real client: the stock Hermes TUI (`$HERMES_TUI_BUNDLE`, default
//! `../shared/hermes-reference/tui/entry.js`) run in tmux with this build as its gateway
//! (`HERMES_PYTHON`). Each scenario reads the screen and the gateway's call log and asserts
//! what a user would notice: the composer comes up, no error line, no call answered with an
//! error (unless the scenario expects it), and nothing of the run left behind after quitting.
//!
//! Without node, tmux or the bundle every scenario says why and passes without running.

use crate::common;
use crate::mockai;
use crate::tui;

use common::procfs::{self, marker};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tui::{Opts, START, T, Tui};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A screen line that is exactly `text` once trimmed (a tool's output, not the prompt echo).
/// config.yaml naming a fake OpenAI-compatible endpoint as the `custom` provider.
fn custom_endpoint(model: &str, base_url: &str, key: Option<&str>) -> String {
    let key = key.map_or(String::new(), |k| format!("  api_key: {k}\n"));
    format!("model:\n  default: {model}\n  provider: custom\n  base_url: {base_url}\n{key}")
}

/// Close the session picker with Esc (its footer's key; `q` is a key it may take as typing).
fn close_session_picker(tui: &Tui) {
    tui.key("Escape");
    tui.wait_screen("the session picker closed", T, |s| {
        !s.contains("Ctrl+R refresh")
    });
}

fn has_line(screen: &str, text: &str) -> bool {
    screen
        .lines()
        .any(|l| l.trim().trim_end_matches('┃').trim() == text)
}

#[test]
fn chat_then_a_tool_then_an_interrupted_tool_then_quit() {
    let Some(tui) = Tui::start("basic", Opts::default()) else {
        return;
    };
    let banner = tui.wait_ready(START);
    tui.assert_no_errors(&[]);
    // The banner counts the tools the model is offered (not `0 tools`), and names the model.
    assert!(
        banner.contains(" tools · ") && !banner.contains(" 0 tools · "),
        "banner without a tool count:\n{banner}"
    );

    tui.submit("hello from the e2e suite");
    tui.wait_for("You said: hello from the e2e suite", T);
    let after = tui.wait_ready(T);
    // The status bar carries the context gauge once a call was made.
    let status = after
        .lines()
        .find(|l| l.contains("─ ready │"))
        .unwrap_or_default();
    assert!(status.contains('%'), "no context gauge in {status:?}");

    let m = marker();
    tui.submit(&format!("$ echo tool-{m}"));
    tui.wait_screen("the tool's output line", T, |s| {
        has_line(s, &format!("tool-{m}"))
    });
    tui.wait_for("exited with status 0", T);
    tui.wait_ready(T);

    // A long tool, interrupted with Ctrl-C: its process is gone and the turn ends.
    tui.submit(&format!("$ sleep 30.{m}"));
    let sleeper = procfs::wait_for_proc("sleep", &format!("30.{m}"), T);
    tui.wait_for("Ctrl+C to interrupt", T);
    tui.key("C-c");
    tui.wait_for("interrupted", T);
    procfs::wait_gone(&[sleeper.pid], secs(5), "the interrupted tool");
    tui.wait_ready(T);
    let interrupts = tui.wait_call("session.interrupt", T);
    assert!(interrupts.error.is_none(), "{interrupts:?}");

    tui.assert_no_errors(&[]);
    tui.quit();
}

/// The stock TUI with one server of tests/mcp/fake_server.js in config.yaml: `mode`, the
/// marker `m` (its processes are found by it), and `extra` lines of the server's yaml.
fn with_fake_mcp(scenario: &str, server: &str, mode: &str, m: &str, extra: &str) -> Option<Tui> {
    let yaml = format!(
        "mcp_servers:\n  {server}:\n    command: node\n    args: [\"{}/tests/mcp/fake_server.js\", \"{mode}\", \"{m}\"]\n{extra}",
        env!("CARGO_MANIFEST_DIR")
    );
    let opts = Opts::config(yaml);
    Tui::start(scenario, opts)
}

/// A prompt typed right after start, while a slow MCP server (3 s to answer `initialize`) is
/// still connecting: its first model call waits for the handshake, so the model is offered the
/// server's tool and the call works, with no error on screen.
#[test]
fn a_prompt_typed_at_once_gets_a_slow_mcp_servers_tools() {
    let m = marker();
    let extra = "    connect_timeout: 30\n";
    let Some(tui) = with_fake_mcp("mcp-slow", "slow", "slow_start", &m, extra) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit(&format!("%mcp__slow__echo {{\"text\": \"early-{m}\"}}"));
    tui.wait_for(&format!("echo: early-{m}{m}"), T);
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
    procfs::assert_none_left(&m, T, "the MCP server after /quit");
}

/// An MCP server (the Node fake of tests/mcp.rs): the banner lists it and its tools once it
/// connects (a connect refreshes the banner with a `session.info`), and a call of one of its
/// tools renders as a tool row with its result; quitting leaves no server behind.
#[test]
fn the_banner_lists_an_mcp_server_and_its_tool_call_renders() {
    let m = marker();
    let extra = "    tools:\n      exclude: [weird]\n";
    let Some(tui) = with_fake_mcp("mcp", "fake", "good", &m, extra) else {
        return;
    };
    tui.wait_ready(START);
    let banner = tui.wait_screen("the MCP server and its tools in the banner", T, |s| {
        s.contains("1 MCP") && s.contains("mcp__fake__echo")
    });
    assert!(
        banner.contains("mcp-fake"),
        "no mcp-fake toolset:\n{banner}"
    );
    tui.submit(&format!("%mcp__fake__echo {{\"text\": \"hi-{m}\"}}"));
    let done = tui.wait_for(&format!("echo: hi-{m}{m}"), T);
    assert!(done.contains("Mcp Fake Echo"), "no tool row:\n{done}");
    tui.wait_ready(T);
    // `/tools` opens the TUI's pager: the server's toolset is listed, and every line fits the
    // terminal (80 columns here), so the whole list and the pager's own footer are on the
    // screen, not pushed off it by lines the TUI wrapped (it sizes its page in lines, not rows).
    tui.resize(80, 36);
    tui.wait_ready(T);
    tui.submit("/tools");
    tui.wait_screen("the /tools pager", T, |s| s.contains("Esc/q close"));
    tui.key("G");
    let pager = tui.wait_screen("the end of the /tools pager", T, |s| {
        s.contains("Esc/q close") && s.contains("lines)")
    });
    assert!(
        pager.contains("mcp-fake (3):") && pager.contains("mcp__fake__slow("),
        "the MCP toolset is not in /tools:\n{pager}"
    );
    tui.close_pager();
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
    procfs::assert_none_left(&m, T, "the MCP server after /quit");
}

#[test]
fn ctrl_d_quits() {
    let Some(tui) = Tui::start("ctrl-d", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    tui.key("C-d");
    tui.wait_exit(T);
    tui.assert_no_errors(&[]);
    tui.assert_nothing_left();
}

#[test]
fn ctrl_c_on_an_empty_composer_quits() {
    let Some(tui) = Tui::start("ctrl-c", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("one turn first");
    tui.wait_for("You said: one turn first", T);
    tui.wait_ready(T);
    tui.key("C-c");
    tui.wait_exit(T);
    tui.assert_no_errors(&[]);
    tui.assert_nothing_left();
}

#[test]
fn new_session_starts_an_empty_one() {
    let Some(tui) = Tui::start("new", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("before the new session");
    tui.wait_for("You said: before the new session", T);
    tui.wait_ready(T);
    let creates = tui.count_calls("session.create");

    tui.submit("/new");
    tui.wait_for("Start a new session?", T);
    tui.key("y");
    tui.wait_for("new session started", T);
    tui.wait_ready(T);
    assert_eq!(tui.count_calls("session.create"), creates + 1);
    let screen = tui.screen();
    assert!(
        !screen.contains("You said: before the new session"),
        "the old transcript is still shown:\n{screen}"
    );
    tui.submit("after the new session");
    tui.wait_for("You said: after the new session", T);
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn a_resized_terminal_keeps_working() {
    let Some(tui) = Tui::start("resize", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    tui.resize(90, 30);
    let resize = tui.wait_call("terminal.resize", T);
    assert_eq!(resize.params["cols"], 90, "{resize:?}");
    tui.wait_ready(T);
    tui.submit("after a resize");
    tui.wait_for("You said: after a resize", T);
    tui.wait_ready(T);
    tui.resize(140, 45);
    tui.wait_screen("terminal.resize to 140 columns", T, |_| {
        tui.calls()
            .iter()
            .any(|c| c.method == "terminal.resize" && c.params["cols"] == 140)
    });
    tui.submit("after a second resize");
    tui.wait_for("You said: after a second resize", T);
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn shell_commands_from_the_composer() {
    let Some(tui) = Tui::start("shell", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    let m = marker();
    tui.submit(&format!("!echo shell-{m}"));
    tui.wait_screen("the shell command's output", T, |s| {
        s.lines()
            .any(|l| l.contains(&format!("shell-{m}")) && !l.contains('!'))
    });
    let ok = tui.wait_call("shell.exec", T);
    assert_eq!(
        ok.result.as_ref().map(|r| r["code"].clone()),
        Some(0.into())
    );
    tui.wait_ready(T);

    // A failing command: its stderr and its status are shown, and it is no error answer.
    tui.submit("!ls no-such-file-here");
    tui.wait_for("No such file or directory", T);
    tui.wait_for("exit 2", T);
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn help_and_the_slash_completion_popup() {
    let Some(tui) = Tui::start("help", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);

    // `/` pops the completion list; `/he` narrows it to /help.
    tui.type_text("/");
    let all = tui.wait_call("complete.slash", T);
    assert!(all.error.is_none(), "{all:?}");
    tui.wait_screen("a completion popup with several commands", T, |s| {
        tui::popup_rows(s).len() >= 3
    });
    tui.type_text("he");
    tui.wait_screen("/help offered for /he", T, |s| {
        tui::popup_rows(s).iter().any(|r| r.starts_with("/help"))
    });
    tui.clear_composer("/he");
    tui.wait_ready(T);

    // `/details ` offers its argument values, as the Python gateway does.
    tui.type_text("/details ");
    tui.wait_screen("/details' modes offered", T, |s| {
        ["hidden", "collapsed", "expanded"].iter().all(|mode| {
            s.lines()
                .any(|l| l.starts_with(" ║") && l.contains(&format!("{mode} global mode")))
        })
    });
    tui.clear_composer("/details");
    tui.wait_ready(T);

    tui.submit("/help");
    tui.wait_for("Hotkeys", T);
    let catalog = tui.wait_call("commands.catalog", T);
    let listed = tui::catalog_commands(&catalog);
    assert!(
        listed.iter().any(|c| c == "/help"),
        "/help lists none of the gateway's commands (commands.catalog: {:?})",
        catalog.result
    );
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn path_completion_in_the_composer() {
    let Some(tui) = Tui::start("paths", Opts::default()) else {
        return;
    };
    std::fs::write(tui.ws.join("notes-e2e.txt"), "hi\n").unwrap();
    std::fs::create_dir_all(tui.ws.join("subdir-e2e")).unwrap();
    tui.wait_ready(START);

    tui.type_text("look at @file:no");
    tui.wait_screen("notes-e2e.txt offered for @file:no", T, |s| {
        s.lines()
            .any(|l| l.starts_with(" ║") && l.contains("notes-e2e.txt"))
    });
    tui.clear_composer("look at @file:no");
    tui.type_text("cat ./");
    tui.wait_screen("both entries offered for ./", T, |s| {
        s.contains("notes-e2e.txt") && s.contains("subdir-e2e/")
    });
    tui.key("Tab");
    tui.wait_screen("the completion applied", T, |s| {
        tui::composer_line(s).is_some_and(|l| l.contains("cat ./notes-e2e.txt"))
    });
    tui.clear_composer("cat ./");
    tui.wait_ready(T);
    let paths = tui.wait_call("complete.path", T);
    assert!(paths.error.is_none(), "{paths:?}");
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn resume_a_stored_session_at_start() {
    let Some(first) = Tui::start("resume-1", Opts::default()) else {
        return;
    };
    first.wait_ready(START);
    let m = marker();
    first.submit(&format!("remember-{m}"));
    first.wait_for(&format!("You said: remember-{m}"), T);
    first.wait_ready(T);
    let created = first.wait_call("session.create", T);
    let stored = created.result.as_ref().unwrap()["stored_session_id"]
        .as_str()
        .or_else(|| created.result.as_ref().unwrap()["info"]["stored_session_id"].as_str())
        .expect("a stored id in session.create")
        .to_string();
    first.quit();

    let home = first.home.clone();
    let second = Tui::start(
        "resume-2",
        Opts {
            home: Some(home),
            env: vec![("HERMES_TUI_RESUME".into(), stored.clone())],
            ..Opts::default()
        },
    )
    .unwrap();
    second.wait_ready(START);
    let resumed = second.wait_call("session.resume", T);
    assert!(resumed.error.is_none(), "{resumed:?}");
    second.wait_for(&format!("remember-{m}"), T);
    second.submit("and one more");
    second.wait_for("You said: and one more", T);
    second.wait_ready(T);
    second.assert_no_errors(&[]);
    second.quit();
    drop(second);
    drop(first);
}

#[test]
fn a_dangerous_command_asks_allow_once_then_deny() {
    // The offline model answers in the very loop iteration that resolves the approval; the
    // TUI then handles `message.complete` before its own `approval.respond` callback, which
    // sets the status back to "running…" for good (docs/TUI-COMPAT.md). A model that takes a
    // few milliseconds per word, as every real one does, is what this scenario is about.
    let opts = Opts {
        env: vec![("TUI_GATEWAY_OFFLINE_DELAY_MS".into(), "20".into())],
        ..Opts::default()
    };
    let Some(tui) = Tui::start("approval", opts) else {
        return;
    };
    tui.wait_ready(START);
    let victim = tui.home.join("victim");
    std::fs::create_dir_all(victim.join("first")).unwrap();
    std::fs::create_dir_all(victim.join("second")).unwrap();

    // The trailing space ends the path word, so no path completion is open when Enter comes.
    tui.submit(&format!("$ rm -rf {} ", victim.join("first").display()));
    tui.wait_approval(T);
    tui.wait_for("Allow once", T);
    tui.key("Enter"); // the first choice: allow once
    tui.wait_for("exited with status 0", T);
    tui.wait_ready(T);
    assert!(
        !victim.join("first").exists(),
        "allowed once, yet not deleted"
    );

    tui.submit(&format!("$ rm -rf {} ", victim.join("second").display()));
    tui.wait_approval(T);
    tui.key("Escape");
    tui.wait_for("denied", T);
    tui.wait_ready(T);
    assert!(victim.join("second").exists(), "denied, yet deleted");
    let answers: Vec<String> = tui
        .calls()
        .iter()
        .filter(|c| c.method == "approval.respond")
        .map(|c| c.params["choice"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(answers, ["once", "deny"]);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn shift_tab_yolo_skips_the_approval_until_turned_off() {
    // A model with some latency per word, as in the approval scenario (the deny at the end).
    let opts = Opts {
        env: vec![("TUI_GATEWAY_OFFLINE_DELAY_MS".into(), "20".into())],
        ..Opts::default()
    };
    let Some(tui) = Tui::start("yolo", opts) else {
        return;
    };
    tui.wait_ready(START);
    let victim = tui.home.join("victim");
    std::fs::create_dir_all(victim.join("first")).unwrap();
    std::fs::create_dir_all(victim.join("second")).unwrap();

    tui.key("BTab");
    tui.wait_for("yolo on", T);
    // The TUI's own line says so; the status bar still says `ready` (as with Hermes' gateway).
    tui.wait_ready(T);
    assert!(!tui.screen().contains("─ yolo on"), "{}", tui.screen());
    tui.submit(&format!("$ rm -rf {} ", victim.join("first").display()));
    tui.wait_for("exited with status 0", T);
    tui.wait_ready(T);
    assert!(!victim.join("first").exists(), "yolo on, yet not deleted");
    let asked = tui
        .events()
        .iter()
        .filter(|(ty, _)| ty == "approval.request")
        .count();
    assert_eq!(asked, 0, "yolo on, yet an approval was asked");

    tui.key("BTab");
    tui.wait_for("yolo off", T);
    tui.wait_ready(T);
    assert!(!tui.screen().contains("─ yolo on"), "{}", tui.screen());
    tui.submit(&format!("$ rm -rf {} ", victim.join("second").display()));
    tui.wait_approval(T);
    tui.key("Escape");
    tui.wait_for("denied", T);
    tui.wait_ready(T);
    assert!(victim.join("second").exists(), "denied, yet deleted");
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn the_session_picker_switches_deletes_and_refuses() {
    let Some(tui) = Tui::start("picker", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    // A stored session that is no longer live: talk, then /new.
    tui.submit("the closed one");
    tui.wait_for("You said: the closed one", T);
    tui.wait_ready(T);
    tui.submit("/new");
    tui.wait_for("Start a new session?", T);
    tui.key("y");
    tui.wait_for("new session started", T);
    tui.wait_ready(T);
    // Two live sessions: this one, and a second one started beside it.
    tui.submit("the first live one");
    tui.wait_for("You said: the first live one", T);
    tui.wait_ready(T);
    tui.submit("/sessions new");
    tui.wait_for("new live session started", T);
    tui.wait_ready(T);
    tui.submit("the second live one");
    tui.wait_for("You said: the second live one", T);
    tui.wait_ready(T);

    // Switch to the other live session.
    tui.key("C-x");
    tui.wait_for("2 live", T);
    let rows = tui::picker_rows(&tui.screen());
    let target = rows
        .iter()
        .position(|r| r.contains("the first live one") && !r.contains("today"))
        .unwrap_or_else(|| panic!("no live row for the first session in {rows:#?}"));
    tui.picker_select(target);
    tui.key("Enter");
    tui.wait_screen("the first live session's transcript", T, |s| {
        s.contains("You said: the first live one") && !s.contains("Sessions")
    });
    tui.wait_ready(T);

    // Delete the stored, closed session: `d` twice on its row.
    tui.key("C-x");
    tui.wait_for("2 live", T);
    let rows = tui::picker_rows(&tui.screen());
    let closed = rows
        .iter()
        .position(|r| r.contains("the closed one"))
        .unwrap_or_else(|| panic!("no row for the closed session in {rows:#?}"));
    tui.picker_select(closed);
    tui.key("d");
    tui.wait_for("press d again to delete", T);
    tui.key("d");
    tui.wait_screen("the closed session's row gone", T, |s| {
        !s.contains("the closed one") && s.contains("Sessions")
    });
    let deleted = tui.wait_call("session.delete", T);
    assert!(deleted.error.is_none(), "{deleted:?}");

    // The live session's stored row: deleting it is refused, and the session goes on.
    let rows = tui::picker_rows(&tui.screen());
    let live_row = rows
        .iter()
        .position(|r| r.contains("today") && r.contains("the first live one"))
        .unwrap_or_else(|| panic!("no stored row of the live session in {rows:#?}"));
    tui.picker_select(live_row);
    tui.key("d");
    tui.wait_for("press d again to delete", T);
    tui.key("d");
    let refused = tui.wait_nth_call("session.delete", 2, T);
    let err = refused
        .error
        .clone()
        .unwrap_or_else(|| panic!("deleting the live session was not refused: {refused:?}"));
    assert_eq!(err["code"], 4023, "{err}");
    close_session_picker(&tui);
    tui.wait_ready(T);
    tui.submit("still alive");
    tui.wait_for("You said: still alive", T);
    tui.wait_ready(T);
    // The refusal is the one error answer expected here.
    tui.assert_no_errors(&["session.delete"]);
    tui.quit();
}

#[test]
fn usage_after_a_turn() {
    let Some(tui) = Tui::start("usage", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("count these words please");
    tui.wait_for("You said: count these words please", T);
    tui.wait_ready(T);
    tui.submit("/usage");
    let usage = tui.wait_call("session.usage", T);
    assert!(usage.error.is_none(), "{usage:?}");
    // The TUI's usage panel, from the flat fields of session.usage: one model call so far.
    let shown = tui.wait_for("Total tokens", T);
    assert!(
        !shown.contains("no API calls yet"),
        "/usage after a turn says there were no calls:\n{shown}"
    );
    let calls_row = shown
        .lines()
        .find(|l| l.contains("API calls"))
        .unwrap_or_else(|| panic!("no API calls row:\n{shown}"));
    assert_eq!(
        calls_row.split_whitespace().nth(3),
        Some("1"),
        "API calls row: {calls_row:?}"
    );
    let result = usage.result.unwrap();
    assert_eq!(result["calls"], 1, "{result}");
    assert!(result["input"].as_u64() > Some(0), "{result}");
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn sigkill_of_the_gateway_mid_tool_leaves_no_tool() {
    let Some(tui) = Tui::start("sigkill", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    let m = marker();
    tui.submit(&format!("$ sleep 30.{m}"));
    let sleeper = procfs::wait_for_proc("sleep", &format!("30.{m}"), T);
    procfs::kill(tui.gateway_pid(), libc::SIGKILL);
    procfs::wait_gone(&[sleeper.pid], secs(1), "the tool of a SIGKILLed gateway");
    // The TUI says so and respawns a gateway, but never listens to the new one's events
    // (docs/TUI-COMPAT.md); /quit still works and takes the new gateway with it.
    tui.wait_for("gateway exited", T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn a_network_model_from_config_yaml_runs_a_tool_turn() {
    // A fake OpenAI-compatible server: a tool call first, then an answer once it sees the
    // tool's result; `/models` lists the one model.
    let m = marker();
    let command = format!("echo net-{m}");
    let mock = mockai::MockAi::start(move |r| {
        if let Some(list) = mockai::Reply::model_list(r, &["mock-model"]) {
            return list;
        }
        let saw_tool = r.messages().iter().any(|msg| msg["role"] == "tool");
        let events = if saw_tool {
            mockai::text_events(&["the network ", "model saw it"], "stop", Some((30, 6)))
        } else {
            mockai::tool_call_events("call_e2e", &command, 7, (20, 9))
        };
        mockai::Reply::Stream(mockai::Stream::new(events))
    });
    let yaml = custom_endpoint("mock-model", &mock.base_url(), Some(&format!("sk-e2e-{m}")));
    let Some(tui) = Tui::start("network", Opts::config(yaml)) else {
        return;
    };
    tui.wait_ready(START);
    tui.wait_for("mock-model", T);
    tui.submit("run something for me");
    tui.wait_for(&format!("Terminal(\"Running echo net-{m}\")"), T);
    tui.wait_for("the network model saw it", T);
    tui.wait_ready(T);
    let requests: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let tool_result = requests[1]
        .messages()
        .into_iter()
        .find(|msg| msg["role"] == "tool")
        .expect("the second request carries the tool result");
    assert!(
        mockai::content_text(&tool_result["content"]).contains(&format!("net-{m}")),
        "{tool_result}"
    );
    for r in &requests {
        assert_eq!(r.body["model"], "mock-model");
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer sk-e2e-{m}").as_str()),
            "config.yaml's model.api_key is the bearer token"
        );
    }
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn fast_mode_switched_in_the_tui_reaches_the_model() {
    // An OpenAI model behind a custom endpoint: `/fast` turns on its priority tier.
    let mock = mockai::MockAi::start(|r| {
        if let Some(list) = mockai::Reply::model_list(r, &["gpt-5.1"]) {
            return list;
        }
        mockai::Reply::text(&["quick ", "answer"], (10, 2))
    });
    let yaml = custom_endpoint("gpt-5.1", &mock.base_url(), Some("sk-e2e-fast"));
    let Some(tui) = Tui::start("fast", Opts::config(yaml)) else {
        return;
    };
    tui.wait_ready(START);
    // A bare `/fast` asks (config.get); a word switches (config.set).
    tui.submit("/fast");
    tui.wait_for("fast mode: normal", T);
    tui.submit("/fast on");
    tui.wait_for("fast mode: fast", T);
    tui.submit("be quick");
    tui.wait_for("quick answer", T);
    tui.wait_ready(T);
    tui.submit("/fast normal");
    tui.wait_for("fast mode: normal", T);
    tui.submit("take your time");
    tui.wait_screen("the second answer", T, |s| {
        s.rfind("quick answer") > s.rfind("take your time")
    });
    let bodies: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.body)
        .collect();
    assert_eq!(bodies.len(), 2, "{bodies:#?}");
    assert_eq!(bodies[0]["service_tier"], "priority", "{}", bodies[0]);
    assert_eq!(bodies[1].get("service_tier"), None, "{}", bodies[1]);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn model_moves_a_session_between_the_three_apis() {
    // One fake per API: Chat Completions (the configured endpoint), Anthropic's Messages
    // (ANTHROPIC_BASE_URL) and the Responses API (XAI_BASE_URL); the keys as exported values.
    let m = marker();
    let chat = mockai::MockAi::start(move |r| {
        if let Some(list) = mockai::Reply::model_list(r, &["mock-model"]) {
            return list;
        }
        mockai::Reply::text(&["chat ", "answers"], (10, 2))
    });
    let claude = mockai::MockAi::start(|_| {
        use mockai::anthropic::{Usage, reply, text_answer};
        reply(text_answer(&["claude ", "answers"], Usage(10, 0, 0, 2)))
    });
    let grok = mockai::MockAi::start(|_| {
        use mockai::responses::{Answer, reply, usage};
        reply(
            Answer::new()
                .text("msg_1", &["grok ", "answers"])
                .completed(usage(10, 0, 2, 0)),
        )
    });
    let yaml = custom_endpoint("mock-model", &chat.base_url(), None);
    let env = [
        ("ANTHROPIC_API_KEY", format!("sk-ant-api03-{m}")),
        ("ANTHROPIC_BASE_URL", claude.base_url()),
        ("XAI_API_KEY", format!("xai-{m}")),
        ("XAI_BASE_URL", grok.base_url()),
    ];
    let Some(tui) = Tui::start(
        "switch-apis",
        Opts {
            config_yaml: Some(yaml),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            ..Opts::default()
        },
    ) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("first, on chat");
    tui.wait_for("chat answers", T);
    tui.wait_ready(T);
    for (command, answer, fake) in [
        (
            "/model claude-sonnet-4-5 --provider anthropic",
            "claude answers",
            &claude,
        ),
        ("/model grok-4 --provider xai", "grok answers", &grok),
    ] {
        tui.submit(command);
        tui.wait_call("config.set", T);
        tui.wait_for(command.split_whitespace().nth(1).unwrap_or(""), T);
        tui.wait_ready(T);
        tui.submit("your turn");
        // The answer's own line (the prompt does not hold its text).
        tui.wait_screen(answer, T, |screen| screen.contains(answer));
        tui.wait_ready(T);
        let r = fake.wait_requests(1, T).pop().unwrap();
        // The conversation so far went along in this API's shape.
        assert!(r.body.to_string().contains("first, on chat"), "{}", r.body);
    }
    assert_eq!(claude.requests()[0].path, "/v1/messages");
    assert!(grok.requests()[0].path.ends_with("/responses"));
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn a_key_typed_into_the_model_picker_reaches_its_provider() {
    // DeepSeek's fake lists two models; no key anywhere, so the offline model answers first.
    let m = marker();
    let key = format!("sk-ds-{m}");
    let deepseek = mockai::MockAi::start(|r| {
        if let Some(list) = mockai::Reply::model_list(r, &["deepseek-chat", "deepseek-reasoner"]) {
            return list;
        }
        mockai::Reply::text(&["deepseek ", "answers"], (10, 2))
    });
    let Some(tui) = Tui::start(
        "picker-key",
        Opts {
            config_yaml: Some("model:\n  default: deepseek-chat\n".into()),
            env: vec![("DEEPSEEK_BASE_URL".into(), deepseek.base_url())],
            ..Opts::default()
        },
    ) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("/model");
    tui.wait_for("Select provider", T);
    // Filter to DeepSeek (no key yet), choose it, type the key. The filter takes one
    // character per key (a chunk of several is dropped), and the picker is drawn a moment
    // before it takes keys: its first letter again until the filter shows it.
    let took = (0..5).any(|_| {
        tui.type_text("d");
        procfs::poll_until(Duration::from_secs(2), || {
            tui.screen().contains("filter: d▎")
        })
    });
    assert!(took, "the picker took no key:\n{}", tui.screen());
    for (at, c) in "eepseek".char_indices() {
        tui.type_text(&c.to_string());
        tui.wait_for(&format!("filter: d{}▎", &"eepseek"[..=at]), T);
    }
    tui.wait_for("DeepSeek · (no key)", T);
    tui.key("Enter");
    tui.wait_for("DEEPSEEK_API_KEY:", T);
    tui.type_text(&key);
    // The picker shows a dot per character typed: all of it is in before Enter.
    let dots = "•".repeat(key.len().min(40));
    tui.wait_screen("the key typed", T, |s| s.contains(&dots));
    tui.key("Enter");
    // Saved: the picker moves on to the provider's models, as the endpoint lists them.
    tui.wait_for("Select model", T);
    tui.wait_for("deepseek-reasoner", T);
    tui.key("Enter");
    tui.wait_call("config.set", T);
    tui.wait_ready(T);
    tui.submit("hello deepseek");
    tui.wait_screen("deepseek answers", T, |s| s.contains("deepseek answers"));
    tui.wait_ready(T);
    assert_eq!(deepseek.first_post_bearer(), Some(format!("Bearer {key}")));
    let sent = deepseek.requests().into_iter().find(|r| r.method == "POST");
    assert_eq!(sent.map(|r| r.body["model"] == "deepseek-chat"), Some(true));
    let saved = std::fs::read_to_string(tui.home.join(".env")).unwrap_or_default();
    assert!(
        saved.contains(&format!("DEEPSEEK_API_KEY={key}")),
        "{saved}"
    );
    let log = std::fs::read_to_string(&tui.log_path).unwrap_or_default();
    assert!(
        log.contains("model.save_key") && !log.contains(&key),
        "the key was logged"
    );
    assert!(!tui.screen().contains(&key), "the key is on screen");
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn a_provider_disconnected_from_the_model_picker_loses_its_key() {
    let key = format!("sk-ds-{}", marker());
    let deepseek = mockai::MockAi::start(|_| mockai::Reply::text(&["never asked"], (1, 1)));
    let home = common::TempHome::new("tui-picker-disconnect");
    std::fs::write(
        home.path.join(".env"),
        format!("# mine\nDEEPSEEK_API_KEY={key}\n"),
    )
    .unwrap();
    let Some(tui) = Tui::start(
        "picker-disconnect",
        Opts {
            config_yaml: Some("model:\n  provider: deepseek\n  default: deepseek-chat\n".into()),
            env: vec![("DEEPSEEK_BASE_URL".into(), deepseek.base_url())],
            home: Some(home.path.clone()),
        },
    ) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("/model");
    tui.wait_for("Select provider", T);
    // Ctrl+D on the current provider (the first row); the picker is drawn a moment before it
    // takes keys: again until it asks.
    let asked = (0..5).any(|_| {
        tui.key("C-d");
        procfs::poll_until(Duration::from_secs(2), || {
            tui.screen().contains("Disconnect DeepSeek?")
        })
    });
    assert!(asked, "the picker took no Ctrl+D:\n{}", tui.screen());
    tui.key("y");
    let call = tui.wait_call("model.disconnect", T);
    assert_eq!(
        call.result.as_ref().map(|r| r["disconnected"] == true),
        Some(true),
        "{call:?}"
    );
    tui.wait_for("Select provider", T);
    assert_eq!(
        std::fs::read_to_string(home.path.join(".env")).unwrap_or_default(),
        "# mine\n"
    );
    tui.key("q");
    tui.wait_screen("the picker closed", T, |s| !s.contains("Select provider"));
    tui.wait_ready(T);
    // The session still names its model, as Hermes' does (its session.info was sent again
    // after the disconnect, naming the same model).
    let infos_after = || {
        let events = tui.events();
        let at = events
            .iter()
            .rposition(|(ty, _)| ty == "session.info")
            .unwrap_or(0);
        events[at].1["model"].as_str().map(str::to_string)
    };
    assert_eq!(infos_after(), Some("deepseek-chat".to_string()));
    let bar = |s: &str| {
        s.lines()
            .find(|l| l.contains("─ ready │"))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        bar(&tui.screen()).contains("deepseek chat"),
        "the status bar lost the model name:\n{}",
        tui.screen()
    );
    tui.submit("hello deepseek");
    // The failed prompt's reason is its answer, as Hermes' gateway words a failed turn.
    tui.wait_screen("the missing key named on screen", T, |s| {
        s.contains("Error: provider deepseek cannot be reached") && s.contains("DEEPSEEK_API_KEY")
    });
    let shown = tui.wait_ready(T);
    let answer = tui::screen::assistant_lines_after_echo(&shown, "hello deepseek");
    assert!(
        answer
            .first()
            .is_some_and(|l| l.starts_with("Error: provider deepseek cannot be reached")),
        "the answer is not the reason: {answer:?}\n{shown}"
    );
    assert!(
        !answer.iter().any(|l| l.is_empty()),
        "an empty assistant line: {answer:?}\n{shown}"
    );
    let errors = tui::screen::error_lines_after_echo(&shown, "hello deepseek");
    assert!(errors.is_empty(), "an error: line: {errors:?}\n{shown}");
    let ended_naming_the_key = || {
        tui.events().iter().any(|(ty, p)| {
            ty == "message.complete"
                && p["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("DEEPSEEK_API_KEY"))
        })
    };
    assert!(
        procfs::poll_until(T, ended_naming_the_key),
        "the prompt did not end naming the missing key:\n{}",
        tui.screen()
    );
    assert!(
        bar(&tui.screen()).contains("deepseek chat"),
        "the status bar lost the model name after the turn:\n{}",
        tui.screen()
    );
    let prompts = deepseek
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST");
    assert_eq!(prompts.count(), 0, "a prompt went to DeepSeek");
    assert!(!tui.screen().contains(&key), "the key is on screen");
    tui.quit();
}

#[test]
fn failed_model_calls_show_their_reason_and_the_next_prompt_works() {
    // A 500 on every attempt, a 401, then an answer: each failure's reason (the provider's own
    // words included) is the turn's text on screen, as Hermes' gateway shows it.
    let m = marker();
    let (fire, denied) = (format!("gpu-fire-{m}"), format!("bad-key-{m}"));
    let (fire2, denied2) = (fire.clone(), denied.clone());
    let mock = mockai::MockAi::start(move |r| {
        if let Some(list) = mockai::Reply::model_list(r, &["mock-model"]) {
            return list;
        }
        let asked = r.last_user_text();
        let body = |why: &str| format!(r#"{{"error":{{"message":"{why}"}}}}"#);
        if asked.contains("five hundred") {
            mockai::Reply::status(500, &body(&fire2))
        } else if asked.contains("four oh one") {
            mockai::Reply::status(401, &body(&denied2))
        } else {
            mockai::Reply::text(&["fine after ", "the failures"], (10, 4))
        }
    });
    let yaml = custom_endpoint("mock-model", &mock.base_url(), Some(&format!("sk-e2e-{m}")));
    let Some(tui) = Tui::start(
        "failed-turns",
        Opts {
            config_yaml: Some(yaml),
            env: vec![("TUI_GATEWAY_RETRY_BASE_S".into(), "0.05".into())],
            ..Opts::default()
        },
    ) else {
        return;
    };
    tui.wait_ready(START);
    for (prompt, said, why) in [
        ("five hundred please", "HTTP 500", &fire),
        ("four oh one please", "HTTP 401", &denied),
    ] {
        tui.submit(prompt);
        tui.wait_screen("the failure's reason on screen", T, |s| {
            tui::screen::echo_index(&s.lines().collect::<Vec<_>>(), prompt).is_some()
                && s.contains(why.as_str())
        });
        let shown = tui.wait_ready(T);
        let answer = tui::screen::assistant_lines_after_echo(&shown, prompt);
        assert!(
            answer
                .first()
                .is_some_and(|l| l.starts_with("Error: the model answered") && l.contains(said)),
            "the answer is not the reason: {answer:?}\n{shown}"
        );
        assert!(
            !answer.iter().any(|l| l.is_empty()),
            "an empty assistant line: {answer:?}\n{shown}"
        );
        assert!(
            tui::screen::error_lines_after_echo(&shown, prompt).is_empty(),
            "an error: line besides the answer:\n{shown}"
        );
    }
    // The 500 was retried (TUI_GATEWAY_MODEL_RETRIES' default 2), the 401 was not.
    let posts = |word: &str| {
        mock.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.last_user_text().contains(word))
            .count()
    };
    assert_eq!((posts("five hundred"), posts("four oh one")), (3, 1));
    tui.submit("and now?");
    tui.wait_for("fine after the failures", T);
    tui.wait_ready(T);
    let screen = tui.screen();
    assert!(
        !screen.contains(&format!("sk-e2e-{m}")),
        "the key is on screen"
    );
    // Both failed prompts were answered by the gateway as taken (no call refused).
    tui.assert_no_errors(&[]);
    tui.quit();
}

/// Commands `/help` lists that this sweep does not type: they end the TUI (tested by the quit
/// scenarios).
const ENDS_THE_TUI: [&str; 4] = ["/quit", "/exit", "/q", "/update"];

/// What `/help` shows beside the catalog: the TUI's own section.
const TUI_SECTION: [&str; 2] = ["/details", "/fortune"];

#[test]
fn every_command_help_lists_answers_without_an_error() {
    let Some(tui) = Tui::start("every-command", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("a turn first, so there is something to report");
    tui.wait_for("You said: a turn first", T);
    tui.wait_ready(T);

    let catalog = tui.wait_call("commands.catalog", T);
    let mut commands = tui::catalog_commands(&catalog);
    assert!(
        !commands.is_empty(),
        "/help lists no gateway command (commands.catalog answered {:?})",
        catalog.result
    );
    commands.extend(TUI_SECTION.iter().map(|c| c.to_string()));
    let mut seen = std::collections::HashSet::new();
    commands.retain(|c| seen.insert(c.clone()));
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for cmd in commands
        .iter()
        .filter(|c| !ENDS_THE_TUI.contains(&c.as_str()))
    {
        let calls_before = tui.calls().len();
        tui.submit(cmd);
        if cmd == "/statusbar" {
            // It hides the status bar, where the sweep reads `ready`: put it back first.
            tui.wait_for("status bar off", T);
            tui.submit("/statusbar on");
        }
        let (outcome, left) = tui.settle_after_command(cmd);
        let screen = tui.screen();
        let mut lines = tui::error_lines_after_echo(&screen, cmd);
        if outcome != "ready" {
            lines.extend(tui::error_lines_in_box(&left));
        }
        let answers: Vec<String> = tui.calls()[calls_before..]
            .iter()
            .filter_map(|c| {
                let e = c.error.as_ref()?;
                Some(format!(
                    "{} → {} ({})",
                    c.method,
                    e["message"].as_str().unwrap_or("?"),
                    e["code"]
                ))
            })
            .collect();
        report.push(format!(
            "{cmd}: {outcome}; shows {:?}",
            tui::first_line_after_echo(&left, cmd)
        ));
        if cmd == "/undo" {
            // The commands after it (/retry, /branch, …) need a turn to work on.
            tui.submit("another turn for the commands after /undo");
            tui.wait_for("You said: another turn for the commands after /undo", T);
            tui.wait_ready(T);
        }
        if !lines.is_empty() || !answers.is_empty() || outcome.starts_with("stuck") {
            failures.push(format!(
                "{cmd}: {outcome}; screen {lines:?}; answers {answers:?}"
            ));
        }
    }
    eprintln!("slash sweep:\n  {}", report.join("\n  "));
    assert!(
        failures.is_empty(),
        "{} of {} commands failed:\n  {}",
        failures.len(),
        commands.len(),
        failures.join("\n  ")
    );
    tui.quit();
}

#[test]
fn an_edit_shows_its_diff_and_todo_its_list() {
    // A model with latency per word, as in the approval scenario (the edit asks first).
    let opts = Opts {
        env: vec![("TUI_GATEWAY_OFFLINE_DELAY_MS".into(), "20".into())],
        ..Opts::default()
    };
    let Some(tui) = Tui::start("edits", opts) else {
        return;
    };
    tui.wait_ready(START);
    let notes = tui.ws.join("notes.txt");
    std::fs::write(&notes, "alpha\nbravo\ncharlie\n").unwrap();
    // The offline model calls a tool by name: `%NAME {JSON}`.
    tui.submit(
        r#"%patch {"path": "notes.txt", "old_string": "bravo", "new_string": "bravo-edited"}"#,
    );
    // The harness's workspace is inside HERMES_HOME, so the write asks first.
    tui.wait_approval(T);
    tui.key("1");
    tui.wait_screen("the patch's diff", T, |s| {
        s.contains("-bravo") && s.contains("+bravo-edited")
    });
    tui.wait_ready(T);
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "alpha\nbravo-edited\ncharlie\n"
    );

    tui.submit(
        r#"%todo {"todos":[{"id":"1","content":"write tests","status":"in_progress"},{"id":"2","content":"land"}]}"#,
    );
    tui.wait_screen("the todo list", T, |s| {
        s.contains("Todo (0/2)") && s.contains("[>] write tests") && s.contains("[ ] land")
    });
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn rollback_lists_and_restores_a_checkpoint() {
    let opts = Opts {
        config_yaml: Some("checkpoints:\n  enabled: true\n".into()),
        env: vec![("TUI_GATEWAY_OFFLINE_DELAY_MS".into(), "20".into())],
        ..Opts::default()
    };
    let Some(tui) = Tui::start("rollback", opts) else {
        return;
    };
    tui.wait_ready(START);
    let notes = tui.ws.join("notes.txt");
    std::fs::write(&notes, "alpha\n").unwrap();
    tui.submit(r#"%write_file {"path": "notes.txt", "content": "bravo\n"}"#);
    // The harness's workspace is inside HERMES_HOME, so the write asks first.
    tui.wait_approval(T);
    tui.key("1");
    tui.wait_ready(T);
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "bravo\n");
    tui.submit("/rollback");
    tui.wait_screen("the checkpoint list", T, |s| {
        s.contains("Rollback checkpoints") && s.contains("before write_file")
    });
    tui.submit("/rollback 1 notes.txt");
    tui.wait_for("rollback restored notes.txt", T);
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "alpha\n");
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn skills_in_the_banner_in_help_and_as_a_command_that_runs_a_turn() {
    let home = common::TempHome::new("tui-skills");
    let reference = crate::skills::reference_skills();
    crate::skills::copy_tree(&reference, &home.path.join("skills"));
    let valid = crate::skills::valid_here(&reference).len();
    let opts = Opts {
        home: Some(home.path.clone()),
        ..Opts::default()
    };
    let Some(tui) = Tui::start("skills", opts) else {
        return;
    };
    tui.wait_ready(START);
    tui.wait_screen("the banner's skill count", T, |s| {
        s.contains(&format!("{valid} skills"))
    });
    tui.submit("/help");
    tui.wait_for(&format!("{valid} skill commands available"), T);
    tui.wait_ready(T);
    tui.type_text("/github-code-r");
    tui.wait_screen("the skill offered in the / popup", T, |s| {
        tui::popup_rows(s)
            .iter()
            .any(|r| r.starts_with("/github-code-review"))
    });
    tui.clear_composer("/github-code-r");
    tui.wait_ready(T);
    tui.submit("/github-code-review look at my branch");
    // (Its "loading skill" line is transient: the offline model's echo can scroll it away
    // before a loaded machine's screen poll sees it, so the submitted prompt is what counts.)
    let submitted = tui.wait_call("prompt.submit", T);
    let text = submitted.params["text"].as_str().unwrap_or("");
    assert!(
        text.starts_with("[IMPORTANT: The user has invoked the \"github-code-review\" skill")
            && text.ends_with("alongside the skill invocation: look at my branch"),
        "{text}"
    );
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn the_skills_hub_lists_categories_and_inspects_a_skill() {
    let home = common::TempHome::new("tui-skills-hub");
    let write = |rel: &str, text: &str| {
        let p = home.path.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "skills/dev/review/SKILL.md",
        "---\nname: review\ndescription: Review code line by line\n---\nRead it all.\n",
    );
    write(
        "skills/dev/refactor/SKILL.md",
        "---\nname: refactor\ndescription: Refactor safely\n---\nb\n",
    );
    write(
        "skills/ops/deploy/SKILL.md",
        "---\nname: deploy\ndescription: Deploy it\n---\nb\n",
    );
    let opts = Opts {
        home: Some(home.path.clone()),
        ..Opts::default()
    };
    let Some(tui) = Tui::start("skills-hub", opts) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("/skills");
    tui.wait_screen("the hub's categories", T, |s| {
        s.contains("Skills Hub") && s.contains("dev · 2 skills") && s.contains("ops · 1 skills")
    });
    // The overlay takes keys a moment after it is drawn: a key lost then is pressed again.
    let press_until = |key: &str, what: &str, done: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + T;
        while std::time::Instant::now() < deadline {
            tui.type_text(key);
            if common::procfs::poll_until(Duration::from_secs(2), || done(&tui.screen())) {
                return;
            }
        }
        panic!("{what}:\n{}", tui.screen());
    };
    press_until("1", "the dev category opened", &|s: &str| {
        s.contains("2 skill(s)") && s.contains("1. refactor") && s.contains("2. review")
    });
    let dir = home.path.join("skills/dev/review");
    press_until("2", "review inspected", &|s: &str| {
        s.contains("Review code line by line") && s.contains("path: ")
    });
    let inspect = tui
        .calls()
        .into_iter()
        .rfind(|c| c.method == "skills.manage" && c.params["action"] == "inspect")
        .expect("an inspect call");
    assert_eq!(inspect.params["query"], "review");
    let info = &inspect.result.as_ref().expect("answered")["info"];
    assert_eq!(info["category"], "dev", "{info}");
    assert_eq!(info["path"], dir.display().to_string(), "{info}");
    tui.key("q");
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

/// A stand-in `wl-paste` first on `PATH` (it prints `image` and notes each run in the file
/// returned): the `PATH` to give the TUI, and that file.
fn fake_clipboard(stage: &common::TempHome, image: &Path) -> (String, PathBuf) {
    let bin = stage.path.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let ran = stage.path.join("wl-paste-ran");
    let tool = bin.join("wl-paste");
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\ncase \"$*\" in\n  *--list-types*) echo image/png ;;\n  *image/png*) cat '{}' ;;\n  *) exit 1 ;;\nesac\n",
            ran.display(),
            image.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (path, ran)
}

/// A PNG's header of `w` x `h` (what the gateway reads and measures).
fn png_header(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    b.extend(w.to_be_bytes());
    b.extend(h.to_be_bytes());
    b.extend([8, 6, 0, 0, 0]);
    b
}

/// Images in the real TUI: `/paste` reads the clipboard through a stand-in `wl-paste` first on
/// `PATH` (it prints a PNG and notes that it ran), `/image <path>` attaches a file, and the next
/// prompt's request carries both images to a vision model; a second TUI resuming the session
/// shows the message as Hermes' gateway gives it (its text, then each image's data URL).
#[test]
fn paste_and_attach_an_image_then_send_it() {
    let m = marker();
    let mock = mockai::MockAi::start(move |r| {
        if let Some(list) = mockai::Reply::model_list(r, &["gpt-4o"]) {
            return list;
        }
        let events = mockai::text_events(&["I see ", "two cards"], "stop", Some((30, 6)));
        mockai::Reply::Stream(mockai::Stream::new(events))
    });
    let yaml = custom_endpoint("gpt-4o", &mock.base_url(), Some(&format!("sk-e2e-{m}")));
    let stage = common::TempHome::new("tui-images");
    let clip = stage.path.join("clip.png");
    std::fs::write(&clip, png_header(100, 50)).unwrap();
    let card = stage.path.join("card.png");
    std::fs::write(&card, png_header(20, 10)).unwrap();
    let (path, ran) = fake_clipboard(&stage, &clip);
    let Some(tui) = Tui::start(
        "images",
        Opts {
            config_yaml: Some(yaml),
            env: vec![("PATH".into(), path.clone())],
            ..Opts::default()
        },
    ) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("/paste");
    tui.wait_for("Image #1 attached from clipboard · 100x50", T);
    let log = std::fs::read_to_string(&ran).unwrap_or_default();
    assert!(log.contains("--type image/png"), "the stand-in ran: {log}");
    tui.wait_ready(T);
    tui.submit(&format!("/image {}", card.display()));
    tui.wait_for("Attached image: card.png · 20x10", T);
    tui.wait_ready(T);
    tui.submit("what are these?");
    tui.wait_for("I see two cards", T);
    tui.wait_ready(T);
    let request = mock
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .expect("a model request");
    let user = request
        .messages()
        .into_iter()
        .rev()
        .find(|msg| msg["role"] == "user")
        .unwrap();
    let images: Vec<String> = user["content"]
        .as_array()
        .expect("the prompt as parts")
        .iter()
        .filter_map(|p| p["image_url"]["url"].as_str().map(str::to_string))
        .collect();
    assert_eq!(images.len(), 2, "{user}");
    assert!(
        images
            .iter()
            .all(|u| u.starts_with("data:image/png;base64,"))
    );
    tui.assert_no_errors(&[]);
    let created = tui.wait_call("session.create", T);
    let stored = created.result.as_ref().unwrap()["info"]["stored_session_id"]
        .as_str()
        .or_else(|| created.result.as_ref().unwrap()["stored_session_id"].as_str())
        .expect("a stored id in session.create")
        .to_string();
    tui.quit();

    let again = Tui::start(
        "images-resumed",
        Opts {
            home: Some(tui.home.clone()),
            env: vec![("PATH".into(), path), ("HERMES_TUI_RESUME".into(), stored)],
            ..Opts::default()
        },
    )
    .unwrap();
    again.wait_ready(START);
    let resumed = again.wait_call("session.resume", T);
    let shown = resumed.result.as_ref().expect("resumed")["messages"].clone();
    let text = shown
        .as_array()
        .unwrap()
        .iter()
        .find(|msg| msg["role"] == "user")
        .and_then(|msg| msg["text"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        text.starts_with("what are these?\n\n[Image attached at: "),
        "{text}"
    );
    assert_eq!(
        text.matches("\ndata:image/png;base64,").count(),
        2,
        "{text}"
    );
    again.wait_for(&format!("[Image attached at: {}]", card.display()), T);
    again.wait_for("data:image/png;base64,", T);
    again.assert_no_errors(&[]);
    again.quit();
    drop(again);
    drop(tui);
}

/// A model without vision in the real TUI: a pasted image is described by the vision model
/// before the turn, and the turn's prompt carries the description; no error on screen.
#[test]
fn a_model_without_vision_gets_the_pasted_images_description() {
    let m = marker();
    let mock = mockai::MockAi::start(move |r| {
        if let Some(list) = mockai::Reply::model_list(r, &["deepseek-chat"]) {
            return list;
        }
        let asks_about_image = r.messages().iter().any(|msg| {
            msg["content"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["type"] == "image_url"))
        });
        let text = if asks_about_image {
            "A blue test card."
        } else {
            "I read the description"
        };
        let events = mockai::text_events(&[text], "stop", Some((30, 6)));
        mockai::Reply::Stream(mockai::Stream::new(events))
    });
    let yaml = custom_endpoint(
        "deepseek-chat",
        &mock.base_url(),
        Some(&format!("sk-e2e-{m}")),
    );
    let stage = common::TempHome::new("tui-images-text");
    let clip = stage.path.join("clip.png");
    std::fs::write(&clip, png_header(64, 32)).unwrap();
    let (path, _) = fake_clipboard(&stage, &clip);
    let Some(tui) = Tui::start(
        "images-text",
        Opts {
            config_yaml: Some(yaml),
            env: vec![("PATH".into(), path)],
            ..Opts::default()
        },
    ) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("/paste");
    tui.wait_for("Image #1 attached from clipboard · 64x32", T);
    tui.wait_ready(T);
    tui.submit("what is this?");
    tui.wait_for("I read the description", T);
    tui.wait_ready(T);
    let turn = mock
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.last_user_text())
        .find(|t| t.ends_with("what is this?"))
        .expect("the turn's request");
    assert!(
        turn.starts_with("[The user attached an image:\nA blue test card.]\n[You can examine it with vision_analyze using image_url: "),
        "{turn}"
    );
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn a_new_session_gets_the_title_its_model_writes_in_the_picker() {
    let m = marker();
    let title = format!("Greeting number {m}");
    let answer = title.clone();
    let mock = mockai::MockAi::start(move |r| {
        let asks_title = r.messages().first().is_some_and(|msg| {
            mockai::content_text(&msg["content"]).starts_with("Generate a short, descriptive title")
        });
        let text = if asks_title {
            answer.as_str()
        } else {
            "hello back"
        };
        mockai::Reply::Stream(mockai::Stream::new(mockai::text_events(
            &[text],
            "stop",
            Some((9, 3)),
        )))
    });
    let yaml = custom_endpoint("mock-model", &mock.base_url(), Some(&format!("sk-e2e-{m}")));
    let Some(tui) = Tui::start(
        "title",
        Opts {
            config_yaml: Some(yaml),
            env: vec![("TUI_GATEWAY_AUTO_TITLE".into(), "on".into())],
            ..Opts::default()
        },
    ) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("hello there");
    tui.wait_for("hello back", T);
    tui.wait_ready(T);
    // The picker lists the session under the title its model wrote.
    let deadline = std::time::Instant::now() + T;
    loop {
        tui.key("C-x");
        tui.wait_for("Sessions", T);
        if tui.screen().contains(&title) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the picker never showed {title:?}:\n{}",
            tui.screen()
        );
        tui.key("Escape");
        tui.wait_ready(T);
    }
    close_session_picker(&tui);
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

#[test]
fn a_personality_chosen_in_the_tui_is_saved_and_goes_with_the_next_turn() {
    let yaml = "model:\n  provider: offline\nagent:\n  personalities:\n    teacher:\n      system_prompt: You teach.\n".to_string();
    let opts = Opts::config(yaml);
    let Some(tui) = Tui::start("personality", opts) else {
        return;
    };
    tui.wait_ready(START);
    tui.submit("/personality teacher");
    tui.wait_for("personality: teacher", T);
    tui.wait_ready(T);
    let saved = std::fs::read_to_string(tui.home.join("config.yaml")).unwrap();
    assert!(saved.contains("personality: teacher"), "{saved}");
    tui.submit("a turn in the new persona");
    tui.wait_for("You said: a turn in the new persona", T);
    tui.wait_ready(T);
    tui.submit("/personality none");
    tui.wait_for("personality: none", T);
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
}

/// Subagents in the TUI, in the background as Hermes runs them: the turn that delegates a batch
/// ends at once, `/agents` shows both children with their goals, and when both are done their
/// combined result comes back into the conversation as a new turn; a batch still running when
/// the user quits leaves nothing behind. (Killing one child alone is `subagent.interrupt`,
/// tested black-box: once the turn has ended the TUI's overlay shows the last turn's tree with
/// its controls locked.)
#[test]
fn agents_overlay_shows_background_subagents_and_their_result_comes_back() {
    let m = marker();
    let Some(tui) = Tui::start("agents", Opts::default()) else {
        return;
    };
    tui.wait_ready(START);
    let tasks = format!("[{{\"goal\":\"$ sleep 1.{m}\"}},{{\"goal\":\"$ echo two-{m}\"}}]");
    tui.submit(&format!("%delegate_task {{\"tasks\":{tasks}}}"));
    tui.submit("/agents");
    tui.wait_screen("both children in the overlay", T, |s| {
        s.contains(&format!("1.{m}")) && s.contains(&format!("two-{m}"))
    });
    tui.key("Escape");
    tui.wait_for("ASYNC DELEGATION BATCH COMPLETE", T);
    tui.wait_ready(T);
    let long = format!("[{{\"goal\":\"$ sleep 330.{m}\"}}]");
    tui.submit(&format!("%delegate_task {{\"tasks\":{long}}}"));
    procfs::wait_for_proc("sleep", &format!("330.{m}"), T);
    tui.wait_ready(T);
    tui.assert_no_errors(&[]);
    tui.quit();
    procfs::assert_none_left(&m, T, "subagents' commands after /quit");
}

#[test]
fn a_turn_goes_on_after_quit_and_the_next_tui_attaches_to_it() {
    detach_then_attach("detach", Leave::Quit);
}

#[test]
fn a_turn_goes_on_after_its_relay_is_killed_and_the_next_tui_attaches_to_it() {
    detach_then_attach("relaykill", Leave::KillRelay);
}

/// How the first TUI lets go of its running turn.
enum Leave {
    /// `/quit` (the TUI's SIGTERM and EOF to its gateway, a relay here).
    Quit,
    /// SIGKILL of the relay the TUI spawned; the TUI then quits.
    KillRelay,
}

/// A long tool turn in a TUI on a persistent gateway, which then lets go of it (`leave`): the
/// turn finishes with no TUI, and the next TUI finds the session live and attaches to it.
fn detach_then_attach(name: &str, leave: Leave) {
    let persistent = || Opts {
        env: vec![("HERMES_TUI_GATEWAY_PERSISTENT".into(), "on".into())],
        ..Opts::default()
    };
    let Some(first) = Tui::start(&format!("{name}-1"), persistent()) else {
        return;
    };
    first.wait_ready(START);
    let m = marker();
    let _reaper = procfs::Reaper(m.clone());
    first.submit(&format!("$ sleep 2.{m}; echo detached-{m}"));
    procfs::wait_for_proc("sleep", &format!("2.{m}"), T);
    first.wait_for("Ctrl+C to interrupt", T);
    if let Leave::KillRelay = leave {
        procfs::kill(first.gateway_pid(), libc::SIGKILL);
        // The TUI says so (docs/TUI-COMPAT.md); the tool runs on in the persistent gateway.
        first.wait_for("gateway exited", T);
    }
    first.submit("/quit");
    first.wait_exit(T);
    let db = first.home.join("state.db");
    // The turn finishes in the persistent gateway after the TUI is gone.
    let finished = procfs::poll_until(secs(30), || {
        rusqlite::Connection::open(&db)
            .and_then(|c| {
                c.query_row(
                    "SELECT COUNT(*) FROM messages WHERE role = 'assistant' AND content LIKE ?1",
                    [format!("%detached-{m}%")],
                    |r| r.get::<_, i64>(0),
                )
            })
            .is_ok_and(|n| n > 0)
    });
    assert!(
        finished,
        "the turn did not finish after the first TUI let go"
    );

    let mut opts = persistent();
    opts.home = Some(first.home.clone());
    let second = Tui::start(&format!("{name}-2"), opts).unwrap();
    second.wait_ready(START);
    // Its own new session and the first TUI's, live in the picker.
    second.choose_live_session(2, |r| r.contains(&format!("2.{m}")) && !r.contains("today"));
    second.wait_screen("the finished reply on attach", T, |s| {
        s.contains(&format!("detached-{m}")) && !s.contains("Ctrl+R refresh")
    });
    second.wait_ready(T);
    second.exchange("still there");
    second.assert_no_errors(&[]);
    second.submit("/quit");
    second.wait_exit(T);
    // The persistent gateway outlives its clients: end it, then nothing is left.
    let pid = procfs::persistent_gateway(&first.home).expect("the persistent gateway runs");
    procfs::kill(pid, libc::SIGTERM);
    second.assert_nothing_left();
    drop(second);
    drop(first);
}

#[test]
fn two_tuis_on_one_session_see_each_others_turns_and_one_answers_an_approval_for_both() {
    // A model with latency per word, as in the approval scenario.
    let persistent = || Opts {
        env: vec![
            ("HERMES_TUI_GATEWAY_PERSISTENT".into(), "on".into()),
            ("TUI_GATEWAY_OFFLINE_DELAY_MS".into(), "20".into()),
        ],
        ..Opts::default()
    };
    let Some(first) = Tui::start("shared-1", persistent()) else {
        return;
    };
    first.wait_ready(START);
    let m = marker();
    first.exchange(&format!("opening {m}"));

    let mut opts = persistent();
    opts.home = Some(first.home.clone());
    let second = Tui::start("shared-2", opts).unwrap();
    second.wait_ready(START);
    second.choose_live_session(2, |r| r.contains(&format!("opening {m}")));
    second.wait_for(&format!("You said: opening {m}"), T);
    second.wait_ready(T);

    // Each TUI's turn streams into the other one too.
    first.submit(&format!("from the first {m}"));
    second.wait_for(&format!("You said: from the first {m}"), T);
    first.wait_ready(T);
    second.wait_ready(T);
    second.submit(&format!("from the second {m}"));
    first.wait_for(&format!("You said: from the second {m}"), T);
    first.wait_ready(T);
    second.wait_ready(T);

    // An approval is asked of both; the second TUI denies it and the command never runs.
    let victim = first.home.join("victim-shared");
    std::fs::create_dir_all(&victim).unwrap();
    first.submit(&format!("$ rm -rf {} ", victim.display()));
    first.wait_approval(T);
    second.wait_approval(T);
    second.key("Escape");
    second.wait_for("denied", T);
    second.wait_ready(T);
    // The prompt leaves the first TUI without a key: the turn it waited in went on to its end.
    first.wait_screen("the approval gone", T, |s| {
        !s.contains("approval required") && !s.contains("quick pick")
    });
    first.wait_ready(T);
    assert!(victim.exists(), "denied, yet deleted");
    let answered_by_first = first
        .calls()
        .iter()
        .filter(|c| c.method == "approval.respond")
        .count();
    assert_eq!(
        answered_by_first,
        0,
        "the first TUI was not asked to answer: {}",
        first.calls_summary()
    );
    first.assert_no_errors(&[]);
    second.assert_no_errors(&[]);
    second.submit("/quit");
    second.wait_exit(T);
    first.submit("/quit");
    first.wait_exit(T);
    let pid = procfs::persistent_gateway(&first.home).expect("the persistent gateway runs");
    procfs::kill(pid, libc::SIGTERM);
    first.assert_nothing_left();
    drop(second);
    drop(first);
}
