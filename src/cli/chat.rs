//! `tui-gateway chat`: a line-mode chat client.
//!
//! It spawns the gateway exactly as the TUI does (its own executable with `-m tui_gateway.entry`,
//! stdin and stdout piped, stderr and environment inherited), opens one session (`session.create`,
//! or `session.resume` with `--resume`) and sends each line typed on stdin as a `prompt.submit`,
//! printing the streamed reply. EOF (Ctrl-D) closes the gateway's stdin, which makes it flush and
//! exit. Ctrl-C interrupts a running turn; pressed twice while idle, it quits.
//!
//! Lines are handled one turn at a time: a line typed while a reply streams waits for it, so
//! `printf 'a\nb\n' | tui-gateway chat` gets two complete replies before the gateway is closed.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::{Client, ClientError, Frame, Lines, classify, error_message};
use crate::util::printable;

const USAGE: &str = "\
usage: tui-gateway chat [--resume <stored id or title>]

A line-mode chat client: spawns the gateway, opens a session and sends each line
of stdin as a prompt, printing the reply. Ctrl-D quits; Ctrl-C interrupts a reply
(twice while idle: quits).

options:
  -r, --resume <ID|TITLE>  continue a stored session instead of creating one
  -h, --help               print this help

exit status: 0 when every turn completed (or was interrupted), 1 when a turn ended
in an error, a prompt was refused or the gateway failed, 2 for bad arguments";

/// How long the gateway may take to send `gateway.ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the gateway may take to exit once its stdin is closed.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the chat client; `args` are the arguments after `chat`. Returns the exit code.
pub fn run(args: &[String]) -> i32 {
    let resume = match parse_args(args) {
        Ok(Args::Help) => {
            let _ = writeln!(io::stdout(), "{USAGE}");
            return 0;
        }
        Ok(Args::Chat { resume }) => resume,
        Err(message) => {
            eprint_line(&format!("error: {message}\n{USAGE}"));
            return 2;
        }
    };
    let client = match spawn_gateway() {
        Ok(client) => client,
        Err(e) => {
            eprint_line(&format!("error: cannot start the gateway: {e}"));
            return 1;
        }
    };
    // Ctrl-C writes to a socket the loop polls.
    let (sigint, sigint_writer) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(e) => {
            eprint_line(&format!("error: cannot watch for Ctrl-C: {e}"));
            return 1;
        }
    };
    let registered = signal_hook::low_level::pipe::register(libc::SIGINT, sigint_writer).ok();
    // A descriptor of our own for stdin, read only when poll says it is readable.
    let user = io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .map(|fd| Lines::new(File::from(fd)));
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdin());
    // No stdin at all is an empty one.
    let queued = match user {
        Some(_) => VecDeque::new(),
        None => VecDeque::from([None]),
    };
    let mut chat = Chat {
        client,
        user,
        sigint,
        tty,
        resume,
        pending: HashMap::new(),
        phase: Phase::Starting(Instant::now()),
        session: String::new(),
        turn: None,
        approval: None,
        queued,
        quit_armed: false,
        turn_failed: false,
    };
    let code = chat.run();
    if let Some(id) = registered {
        signal_hook::low_level::unregister(id);
    }
    code
}

#[derive(Debug, PartialEq)]
enum Args {
    Help,
    Chat { resume: Option<String> },
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut resume = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "-h" | "--help" => return Ok(Args::Help),
            "-r" | "--resume" => args.next().map(String::as_str),
            other => match other.strip_prefix("--resume=") {
                Some(value) => Some(value),
                None => return Err(format!("unexpected argument: {other}")),
            },
        };
        match value {
            Some(value) if !value.trim().is_empty() => resume = Some(value.to_string()),
            _ => return Err("--resume needs a stored session id or title".to_string()),
        }
    }
    Ok(Args::Chat { resume })
}

fn spawn_gateway() -> io::Result<Client> {
    let mut cmd = Client::gateway_command(&std::env::current_exe()?);
    cmd.stderr(Stdio::inherit());
    Ok(Client::spawn(&mut cmd)?.with_id_prefix("c"))
}

/// The part of the final text that the streamed deltas did not show (deltas may be coalesced or
/// missed); nothing when the final text does not extend what was printed.
fn missing_tail<'a>(printed: &str, final_text: &'a str) -> &'a str {
    final_text.strip_prefix(printed).unwrap_or("")
}

/// The marker printed after a turn that did not complete normally.
fn status_marker(payload: &Value) -> Option<String> {
    match payload.get("status").and_then(Value::as_str) {
        None | Some("complete") => None,
        Some("interrupted") => Some("[interrupted]".to_string()),
        Some(other) => {
            let error = payload.get("error").map(|e| match e {
                Value::String(s) => s.clone(),
                Value::Object(_) => error_message(e),
                other => other.to_string(),
            });
            Some(format!("[error: {}]", error.as_deref().unwrap_or(other)))
        }
    }
}

/// An answer typed to an approval question.
fn approval_choice(answer: &str) -> &'static str {
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "o" | "once" => "once",
        "s" | "session" => "session",
        "a" | "always" => "always",
        _ => "deny",
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// Spawned, waiting for `gateway.ready` (since then).
    Starting(Instant),
    /// `session.create` / `session.resume` sent.
    Opening,
    Open,
}

enum Pending {
    Open,
    Submit,
    Other,
}

#[derive(Default)]
struct Turn {
    printed: String,
    interrupt_sent: bool,
}

struct Chat {
    client: Client,
    /// The user's lines; `None` once at end of file.
    user: Option<Lines<File>>,
    /// Readable after a Ctrl-C.
    sigint: UnixStream,
    tty: bool,
    resume: Option<String>,
    pending: HashMap<String, Pending>,
    phase: Phase,
    /// The runtime session id, once open.
    session: String,
    turn: Option<Turn>,
    /// The `request_id` of an approval waiting for the user's answer.
    approval: Option<String>,
    /// User lines waiting for the current turn to end; `None` is the end of input.
    queued: VecDeque<Option<String>>,
    /// Ctrl-C was pressed once while idle; a second one quits.
    quit_armed: bool,
    /// A turn ended in an error, or a prompt was refused: the exit status says so.
    turn_failed: bool,
}

/// How the loop ends.
enum End {
    /// Close the gateway gracefully and return this code.
    Close(i32),
    /// The gateway is gone; report it and return 1.
    Died,
}

impl Chat {
    fn run(&mut self) -> i32 {
        match self.event_loop() {
            End::Close(0) if self.turn_failed => self.close(1),
            End::Close(code) => self.close(code),
            End::Died => self.died(),
        }
    }

    fn event_loop(&mut self) -> End {
        loop {
            if let Phase::Starting(since) = self.phase
                && since.elapsed() > READY_TIMEOUT
            {
                eprint_line("error: the gateway did not become ready in time");
                return End::Close(1);
            }
            if self.idle()
                && let Some(item) = self.queued.pop_front()
            {
                match item {
                    Some(line) => self.submit(line),
                    None => {
                        if self.tty {
                            print_out("\n");
                        }
                        return End::Close(0);
                    }
                }
                continue;
            }
            let deadline = match self.phase {
                Phase::Starting(since) => Some(since + READY_TIMEOUT),
                _ => None,
            };
            let mut watched = vec![self.sigint.as_fd()];
            watched.extend(self.user.as_ref().map(|user| user.source().as_fd()));
            let ready = match self.client.wait_readable(&watched, deadline) {
                Ok(ready) => ready,
                Err(_) => return End::Died,
            };
            if ready.other(0) {
                let mut drained = [0u8; 64];
                let _ = self.sigint.read(&mut drained);
                if let Some(end) = self.on_ctrl_c() {
                    return end;
                }
            }
            if ready.output {
                match self.client.next_frame(Instant::now()) {
                    Ok(frame) => {
                        if let Some(end) = self.on_frame(&frame) {
                            return end;
                        }
                    }
                    Err(ClientError::Timeout) => {}
                    Err(_) => return End::Died,
                }
            }
            if ready.other(1) {
                self.read_user_lines();
            }
        }
    }

    /// Takes what the user typed: answers to an approval question, or lines for the queue.
    fn read_user_lines(&mut self) {
        let Some(user) = &mut self.user else { return };
        let mut lines = Vec::new();
        let failed = user.fill(Instant::now()).is_err();
        while let Some(line) = user.buffered_line() {
            let text = String::from_utf8_lossy(line);
            let text = text.trim_end_matches(['\n', '\r']);
            if !text.trim().is_empty() {
                lines.push(text.to_string());
            }
        }
        let closed = failed || user.at_eof();
        for line in lines {
            match self.approval.take() {
                Some(request_id) => self.answer_approval(&request_id, approval_choice(&line)),
                None => self.queued.push_back(Some(line)),
            }
        }
        if closed {
            self.user = None;
            if let Some(request_id) = self.approval.take() {
                self.answer_approval(&request_id, "deny");
            }
            self.queued.push_back(None);
        }
    }

    fn idle(&self) -> bool {
        self.phase == Phase::Open && self.turn.is_none() && self.approval.is_none()
    }

    fn on_ctrl_c(&mut self) -> Option<End> {
        if let Some(turn) = &mut self.turn {
            if !turn.interrupt_sent {
                turn.interrupt_sent = true;
                let params = json!({"session_id": self.session});
                self.send("session.interrupt", params, Pending::Other);
            }
            return None;
        }
        if self.phase != Phase::Open || self.quit_armed {
            print_out("\n");
            return Some(End::Close(0));
        }
        self.quit_armed = true;
        print_out("\n");
        eprint_line("(press Ctrl-C again or Ctrl-D to quit)");
        self.prompt();
        None
    }

    fn on_frame(&mut self, frame: &Value) -> Option<End> {
        match classify(frame) {
            Frame::Event {
                kind,
                session_id,
                payload,
            } => {
                if kind == "gateway.ready" {
                    if let Phase::Starting(_) = self.phase {
                        self.open_session();
                    }
                } else if self.phase == Phase::Open && session_id == self.session {
                    self.on_event(kind, payload);
                }
                None
            }
            Frame::Response { id, outcome } => match (self.pending.remove(&id), outcome) {
                (Some(Pending::Open), Ok(result)) => self.on_opened(result),
                (Some(Pending::Open), Err(message)) => {
                    eprint_line(&format!("error: {message}"));
                    Some(End::Close(1))
                }
                (Some(Pending::Submit), Err(message)) => {
                    self.turn = None;
                    self.turn_failed = true;
                    eprint_line(&format!("error: {message}"));
                    self.prompt();
                    None
                }
                (_, Err(message)) => {
                    eprint_line(&format!("error: {message}"));
                    None
                }
                (_, Ok(_)) => None,
            },
            Frame::ServerRequest { id, .. } => {
                // We never announce server-request support, so refuse any that arrives: the
                // gateway then treats it as denied instead of waiting for a timeout. A failed
                // write is noticed when the gateway's stdout closes.
                let id = id.clone();
                let _ = self
                    .client
                    .respond_error(&id, -32601, "not supported by the chat client");
                None
            }
            Frame::Other => None,
        }
    }

    fn open_session(&mut self) {
        self.phase = Phase::Opening;
        match self.resume.clone() {
            Some(stored) => {
                let params = json!({"session_id": stored});
                self.send("session.resume", params, Pending::Open);
            }
            None => self.send("session.create", json!({}), Pending::Open),
        }
    }

    fn on_opened(&mut self, result: &Value) -> Option<End> {
        let text = |key| result.get(key).and_then(Value::as_str).unwrap_or("");
        if text("session_id").is_empty() {
            eprint_line("error: the gateway opened no session");
            return Some(End::Close(1));
        }
        self.session = text("session_id").to_string();
        self.phase = Phase::Open;
        if self.tty {
            let count = result.get("message_count").and_then(Value::as_u64);
            let resumed = match (self.resume.is_some(), count) {
                (true, Some(count)) => format!(", resumed with {count} messages"),
                (true, None) => ", resumed".to_string(),
                _ => String::new(),
            };
            eprint_line(&format!(
                "session {}{resumed} (Ctrl-D to quit, Ctrl-C to interrupt a reply)",
                text("stored_session_id")
            ));
        }
        // A resumed session may be in the middle of a turn: show its end before the first prompt.
        if result.get("running").and_then(Value::as_bool) == Some(true) {
            self.turn = Some(Turn::default());
        } else {
            self.prompt();
        }
        None
    }

    fn on_event(&mut self, kind: &str, payload: &Value) {
        let text = |key| payload.get(key).and_then(Value::as_str);
        match kind {
            "message.delta" => {
                if let (Some(turn), Some(delta)) = (&mut self.turn, text("text")) {
                    print_out(&printable(delta));
                    turn.printed.push_str(delta);
                }
            }
            "message.complete" => {
                let Some(turn) = self.turn.take() else { return };
                // A failed turn's text ends with the gateway's `Error: <why>`: the marker says it.
                let said = text("text").unwrap_or("");
                let said = text("error")
                    .and_then(|e| said.strip_suffix(&format!("Error: {e}")))
                    .map_or(said, str::trim_end);
                let mut end = printable(missing_tail(&turn.printed, said));
                self.turn_failed |=
                    !matches!(text("status"), None | Some("complete" | "interrupted"));
                if let Some(marker) = status_marker(payload) {
                    let mid_line = !(turn.printed.is_empty() && end.is_empty());
                    end.push_str(if mid_line { " " } else { "" });
                    end.push_str(&marker);
                }
                end.push('\n');
                print_out(&end);
                self.prompt();
            }
            "tool.start" if self.tty => {
                let what = text("context").or(text("name")).unwrap_or("tool");
                self.note(&format!("[tool] {what}"));
            }
            "status.update" if self.tty => {
                if let Some(status) = text("text") {
                    self.note(&format!("[status] {status}"));
                }
            }
            "approval.request" => {
                let request_id = text("request_id").unwrap_or("").to_string();
                let command = text("command").unwrap_or("");
                let why = text("description").unwrap_or("");
                if self.tty {
                    self.note(&format!(
                        "approve `{command}` ({why})? [o]nce / [s]ession / [a]lways / [N]o:"
                    ));
                    self.approval = Some(request_id);
                } else {
                    eprint_line(&format!(
                        "[approval denied: stdin is not a terminal] {command}"
                    ));
                    self.answer_approval(&request_id, "deny");
                }
            }
            "request.cancel"
                if self.approval.is_some() && text("id") == self.approval.as_deref() =>
            {
                self.approval = None;
                self.note("[approval withdrawn]");
            }
            _ => {}
        }
    }

    /// Prints a line on stderr, first ending a reply line that is still open on stdout.
    fn note(&mut self, line: &str) {
        if let Some(turn) = &mut self.turn
            && !turn.printed.is_empty()
            && !turn.printed.ends_with('\n')
        {
            print_out("\n");
            turn.printed.clear();
        }
        eprint_line(line);
    }

    fn submit(&mut self, line: String) {
        self.quit_armed = false;
        self.turn = Some(Turn::default());
        let params = json!({"session_id": self.session, "text": line});
        self.send("prompt.submit", params, Pending::Submit);
    }

    fn answer_approval(&mut self, request_id: &str, choice: &str) {
        let mut params = json!({"session_id": self.session, "choice": choice});
        if !request_id.is_empty() {
            params["request_id"] = json!(request_id);
        }
        self.send("approval.respond", params, Pending::Other);
    }

    fn prompt(&self) {
        if self.tty && self.queued.is_empty() {
            print_out("> ");
        }
    }

    /// Sends a request; a failed write is noticed when the gateway's stdout closes.
    fn send(&mut self, method: &str, params: Value, pending: Pending) {
        if let Ok(id) = self.client.send_request(method, params) {
            let id = id.as_str().unwrap_or_default().to_string();
            self.pending.insert(id, pending);
        }
    }

    /// Closes the gateway's stdin (it flushes and exits) and waits for it, killing it if it hangs.
    fn close(&mut self, code: i32) -> i32 {
        match self.client.close(Instant::now() + EXIT_TIMEOUT) {
            Ok(status) if !status.success() => {
                eprint_line(&format!("warning: the gateway exited with {status}"));
            }
            Ok(_) => {}
            Err(_) => eprint_line("warning: the gateway did not exit in time; killed it"),
        }
        code
    }

    fn died(&mut self) -> i32 {
        if self
            .turn
            .as_ref()
            .is_some_and(|turn| !turn.printed.is_empty())
        {
            print_out("\n");
        }
        let status = match self
            .client
            .wait_exit(Instant::now() + Duration::from_secs(1))
        {
            Ok(status) => status.to_string(),
            Err(_) => {
                self.client.kill();
                "closed its stdout; killed".to_string()
            }
        };
        let what = match self.phase {
            Phase::Starting(_) => "the gateway failed to start",
            _ => "the gateway exited unexpectedly",
        };
        eprint_line(&format!("error: {what} ({status})"));
        1
    }
}

/// Writes to stdout and flushes; a closed stdout is not worth a panic.
fn print_out(text: &str) {
    let mut out = io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Lines on stderr quote tools, status texts, commands and the gateway's errors: nothing in
/// them may drive the terminal.
fn eprint_line(line: &str) {
    let _ = writeln!(io::stderr(), "{}", printable(line));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_arguments() {
        assert_eq!(parse_args(&[]), Ok(Args::Chat { resume: None }));
        assert_eq!(parse_args(&args(&["--help"])), Ok(Args::Help));
        assert_eq!(parse_args(&args(&["--resume", "x", "-h"])), Ok(Args::Help));
        let resumed = Ok(Args::Chat {
            resume: Some("20250101_120000_abcdef".to_string()),
        });
        assert_eq!(
            parse_args(&args(&["--resume", "20250101_120000_abcdef"])),
            resumed
        );
        assert_eq!(
            parse_args(&args(&["--resume=20250101_120000_abcdef"])),
            resumed
        );
        let titled = Ok(Args::Chat {
            resume: Some("my title".to_string()),
        });
        assert_eq!(parse_args(&args(&["-r", "my title"])), titled);
        assert!(parse_args(&args(&["--resume"])).is_err());
        assert!(parse_args(&args(&["--resume", ""])).is_err());
        assert!(parse_args(&args(&["--bogus"])).is_err());
    }

    #[test]
    fn finds_the_unprinted_tail() {
        assert_eq!(missing_tail("", "hello"), "hello");
        assert_eq!(missing_tail("hel", "hello"), "lo");
        assert_eq!(missing_tail("hello", "hello"), "");
        assert_eq!(missing_tail("something else", "hello"), "");
    }

    #[test]
    fn marks_unfinished_turns() {
        assert_eq!(status_marker(&json!({"status":"complete"})), None);
        assert_eq!(status_marker(&json!({})), None);
        assert_eq!(
            status_marker(&json!({"status":"interrupted"})),
            Some("[interrupted]".to_string())
        );
        assert_eq!(
            status_marker(&json!({"status":"error","error":"model unreachable"})),
            Some("[error: model unreachable]".to_string())
        );
        assert_eq!(
            status_marker(&json!({"status":"error","error":{"message":"429"}})),
            Some("[error: 429]".to_string())
        );
        assert_eq!(
            status_marker(&json!({"status":"error"})),
            Some("[error: error]".to_string())
        );
    }

    #[test]
    fn reads_approval_answers() {
        assert_eq!(approval_choice("y"), "once");
        assert_eq!(approval_choice(" Once "), "once");
        assert_eq!(approval_choice("s"), "session");
        assert_eq!(approval_choice("ALWAYS"), "always");
        assert_eq!(approval_choice("n"), "deny");
        assert_eq!(approval_choice("whatever"), "deny");
    }
}
