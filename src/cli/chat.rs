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
use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const USAGE: &str = "\
usage: tui-gateway chat [--resume <stored id or title>]

A line-mode chat client: spawns the gateway, opens a session and sends each line
of stdin as a prompt, printing the reply. Ctrl-D quits; Ctrl-C interrupts a reply
(twice while idle: quits).

options:
  -r, --resume <ID|TITLE>  continue a stored session instead of creating one
  -h, --help               print this help";

/// How long the gateway may take to send `gateway.ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the gateway may take to exit once its stdin is closed.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the loop wakes up to look at the Ctrl-C flag.
const TICK: Duration = Duration::from_millis(100);

static SIGINT: AtomicBool = AtomicBool::new(false);

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
    let (mut child, stdin, stdout) = match spawn_gateway() {
        Ok(spawned) => spawned,
        Err(e) => {
            eprint_line(&format!("error: cannot start the gateway: {e}"));
            return 1;
        }
    };
    let (tx, rx) = mpsc::channel();
    let frames_tx = tx.clone();
    thread::spawn(move || read_frames(stdout, frames_tx));
    thread::spawn(move || read_user_lines(tx));

    SIGINT.store(false, Ordering::SeqCst);
    let sigint = signal_hook::flag::register(libc::SIGINT, &SIGINT).ok();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdin());
    let mut chat = Chat {
        stdin: Some(stdin),
        rx,
        tty,
        resume,
        next_id: 0,
        pending: HashMap::new(),
        phase: Phase::Starting(Instant::now()),
        session: String::new(),
        turn: None,
        approval: None,
        queued: VecDeque::new(),
        quit_armed: false,
    };
    let code = chat.run(&mut child);
    if let Some(id) = sigint {
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

fn spawn_gateway() -> io::Result<(Child, ChildStdin, std::process::ChildStdout)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["-m", "tui_gateway.entry"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => Ok((child, stdin, stdout)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(io::Error::other("the gateway's pipes are missing"))
        }
    }
}

/// What the reader threads hand to the loop.
enum Input {
    Frame(Value),
    GatewayClosed,
    Line(String),
    StdinClosed,
}

fn read_frames(stdout: impl Read, tx: Sender<Input>) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if let Some(frame) = parse_frame(&line)
                    && tx.send(Input::Frame(frame)).is_err()
                {
                    return;
                }
            }
        }
    }
    let _ = tx.send(Input::GatewayClosed);
}

fn read_user_lines(tx: Sender<Input>) {
    let mut stdin = io::stdin().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                if !text.trim().is_empty() && tx.send(Input::Line(text.to_string())).is_err() {
                    return;
                }
            }
        }
    }
    let _ = tx.send(Input::StdinClosed);
}

/// A line of the gateway's stdout as a JSON object; anything else (non-JSON, arrays) is ignored.
fn parse_frame(line: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(line.trim_ascii()).ok()?;
    value.is_object().then_some(value)
}

/// The kinds of frame the client reacts to.
#[derive(Debug, PartialEq)]
enum Frame<'a> {
    Event {
        kind: &'a str,
        session_id: &'a str,
        payload: &'a Value,
    },
    Response {
        id: String,
        outcome: Result<&'a Value, String>,
    },
    ServerRequest {
        id: &'a Value,
    },
    Other,
}

static NULL: Value = Value::Null;

fn classify(frame: &Value) -> Frame<'_> {
    let method = frame.get("method").and_then(Value::as_str);
    let id = frame.get("id").filter(|id| !id.is_null());
    match (method, id) {
        (Some("event"), _) => {
            let params = frame.get("params").unwrap_or(&NULL);
            let text = |key| params.get(key).and_then(Value::as_str).unwrap_or("");
            Frame::Event {
                kind: text("type"),
                session_id: text("session_id"),
                payload: params.get("payload").unwrap_or(&NULL),
            }
        }
        (Some(_), Some(id)) => Frame::ServerRequest { id },
        (None, Some(id)) => {
            let id = match id {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let outcome = match frame.get("error") {
                Some(error) => Err(error_message(error)),
                None => Ok(frame.get("result").unwrap_or(&NULL)),
            };
            Frame::Response { id, outcome }
        }
        _ => Frame::Other,
    }
}

fn error_message(error: &Value) -> String {
    match error.get("message").and_then(Value::as_str) {
        Some(message) => message.to_string(),
        None => error.to_string(),
    }
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
    stdin: Option<ChildStdin>,
    rx: Receiver<Input>,
    tty: bool,
    resume: Option<String>,
    next_id: u64,
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
}

/// How the loop ends.
enum End {
    /// Close the gateway gracefully and return this code.
    Close(i32),
    /// The gateway is gone; report it and return 1.
    Died,
}

impl Chat {
    fn run(&mut self, child: &mut Child) -> i32 {
        match self.event_loop() {
            End::Close(code) => self.close(child, code),
            End::Died => self.died(child),
        }
    }

    fn event_loop(&mut self) -> End {
        loop {
            if SIGINT.swap(false, Ordering::SeqCst)
                && let Some(end) = self.on_ctrl_c()
            {
                return end;
            }
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
            match self.rx.recv_timeout(TICK) {
                Ok(Input::Frame(frame)) => {
                    if let Some(end) = self.on_frame(&frame) {
                        return end;
                    }
                }
                Ok(Input::Line(line)) => match self.approval.take() {
                    Some(request_id) => self.answer_approval(&request_id, approval_choice(&line)),
                    None => self.queued.push_back(Some(line)),
                },
                Ok(Input::StdinClosed) => {
                    if let Some(request_id) = self.approval.take() {
                        self.answer_approval(&request_id, "deny");
                    }
                    self.queued.push_back(None);
                }
                Ok(Input::GatewayClosed) | Err(RecvTimeoutError::Disconnected) => {
                    return End::Died;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
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
            Frame::ServerRequest { id } => {
                // We never announce server-request support, so refuse any that arrives: the
                // gateway then treats it as denied instead of waiting for a timeout.
                let error = json!({"code": -32601, "message": "not supported by the chat client"});
                self.write_frame(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
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
                    print_out(delta);
                    turn.printed.push_str(delta);
                }
            }
            "message.complete" => {
                let Some(turn) = self.turn.take() else { return };
                let mut end = missing_tail(&turn.printed, text("text").unwrap_or("")).to_string();
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

    fn send(&mut self, method: &str, params: Value, pending: Pending) {
        self.next_id += 1;
        let id = format!("c{}", self.next_id);
        self.write_frame(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.pending.insert(id, pending);
    }

    /// Writes one frame; a failed write is noticed when the reader sees the gateway's stdout close.
    fn write_frame(&mut self, frame: &Value) {
        if let Some(stdin) = &mut self.stdin {
            let mut line = frame.to_string();
            line.push('\n');
            if stdin.write_all(line.as_bytes()).is_err() {
                self.stdin = None;
            }
        }
    }

    /// Closes the gateway's stdin (it flushes and exits) and waits for it, killing it if it hangs.
    fn close(&mut self, child: &mut Child, code: i32) -> i32 {
        self.stdin = None;
        match wait_until(child, Instant::now() + EXIT_TIMEOUT) {
            Some(status) if !status.success() => {
                eprint_line(&format!("warning: the gateway exited with {status}"));
            }
            Some(_) => {}
            None => {
                eprint_line("warning: the gateway did not exit in time; killed it");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        code
    }

    fn died(&mut self, child: &mut Child) -> i32 {
        if self
            .turn
            .as_ref()
            .is_some_and(|turn| !turn.printed.is_empty())
        {
            print_out("\n");
        }
        let status = match wait_until(child, Instant::now() + Duration::from_secs(1)) {
            Some(status) => status.to_string(),
            None => {
                let _ = child.kill();
                let _ = child.wait();
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

fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// Writes to stdout and flushes; a closed stdout is not worth a panic.
fn print_out(text: &str) {
    let mut out = io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn eprint_line(line: &str) {
    let _ = writeln!(io::stderr(), "{line}");
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
    fn parses_only_json_objects() {
        assert!(parse_frame(b"{\"jsonrpc\":\"2.0\"}\n").is_some());
        assert!(parse_frame(b"  {\"a\":1}\r\n").is_some());
        assert!(parse_frame(b"not json\n").is_none());
        assert!(parse_frame(b"[1,2]\n").is_none());
        assert!(parse_frame(b"\n").is_none());
        assert!(parse_frame(b"\xff\xfe{}\n").is_none());
    }

    #[test]
    fn classifies_frames() {
        let event = json!({"jsonrpc":"2.0","method":"event","params":{
            "type":"message.delta","session_id":"a1b2c3d4","payload":{"text":"hi"},"seq":3}});
        assert_eq!(
            classify(&event),
            Frame::Event {
                kind: "message.delta",
                session_id: "a1b2c3d4",
                payload: &json!({"text":"hi"}),
            }
        );
        let bare = json!({"method":"event"});
        assert!(matches!(
            classify(&bare),
            Frame::Event {
                kind: "",
                session_id: "",
                ..
            }
        ));

        let ok = json!({"jsonrpc":"2.0","id":"c1","result":{"pong":true}});
        assert_eq!(
            classify(&ok),
            Frame::Response {
                id: "c1".to_string(),
                outcome: Ok(&json!({"pong":true})),
            }
        );
        let numeric =
            json!({"jsonrpc":"2.0","id":7,"error":{"code":4001,"message":"session not found"}});
        assert_eq!(
            classify(&numeric),
            Frame::Response {
                id: "7".to_string(),
                outcome: Err("session not found".to_string()),
            }
        );
        let odd_error = json!({"id":"c2","error":"boom"});
        assert!(
            matches!(classify(&odd_error), Frame::Response { outcome: Err(m), .. } if m == "\"boom\"")
        );

        let srq = json!({"jsonrpc":"2.0","id":"srq-1","method":"approval","params":{}});
        assert_eq!(
            classify(&srq),
            Frame::ServerRequest {
                id: &json!("srq-1")
            }
        );
        assert_eq!(classify(&json!({"id":null,"result":{}})), Frame::Other);
        assert_eq!(classify(&json!({"jsonrpc":"2.0"})), Frame::Other);
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
