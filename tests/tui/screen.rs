//! Reading the TUI's screen (text from `tmux capture-pane`): the composer line, the status bar,
//! popups, the session picker, error lines. Pure functions, unit-tested on captured screens.

/// Screen text without the box-drawing frame around it.
pub fn unframed(line: &str) -> &str {
    line.trim_matches(|c: char| c.is_whitespace() || "│║┃╎┊".contains(c))
}

/// Rows of a completion popup: lines that start with a `/command` (the composer line starts
/// with `❯`, so it is not one).
pub fn popup_rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .map(|l| unframed(l).trim_start_matches('▸').trim())
        .filter(|l| l.starts_with('/') && l.chars().nth(1).is_some_and(|c| c.is_ascii_lowercase()))
        .map(str::to_string)
        .collect()
}

/// The session picker's selectable rows, in order: `+ new`, then the numbered rows. The
/// selected one starts with `▸`.
pub fn picker_rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .map(unframed)
        .filter(|l| {
            let body = l.trim_start_matches('▸').trim_start();
            body.starts_with("+ ")
                || body.starts_with("+  ")
                || body
                    .split_once('.')
                    .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
        .collect()
}

/// The composer's line: the one under the status bar (`─ ready │ …`), else the last line
/// starting with `❯` (popups and pickers float above it). In shell mode (`!`) it starts `$`.
pub fn composer_line(screen: &str) -> Option<&str> {
    let lines: Vec<&str> = screen.lines().map(unframed).collect();
    if let Some(i) = lines
        .iter()
        .rposition(|l| l.starts_with("─ ") && l.contains(" │ "))
    {
        return lines.get(i + 1).copied();
    }
    lines.into_iter().rev().find(|l| l.starts_with('❯'))
}

/// The composer is up and idle.
pub fn screen_ready(s: &str) -> bool {
    s.lines().map(unframed).any(|l| l.starts_with("─ ready"))
        && composer_line(s).is_some_and(|l| l.starts_with('❯'))
}

/// The index of the last line echoing `cmd` (`❯ /cmd`, `· /cmd`).
pub fn echo_index(lines: &[&str], cmd: &str) -> Option<usize> {
    lines
        .iter()
        .rposition(|l| unframed(l).trim_start_matches(['❯', '·', '$']).trim() == cmd)
}

/// What the TUI printed first under the echo of `cmd`, or else the first line of the box it
/// opened over it (for reports).
pub fn first_line_after_echo(screen: &str, cmd: &str) -> String {
    let lines: Vec<&str> = screen.lines().collect();
    let content = |from: usize| {
        lines[from..]
            .iter()
            .map(|l| {
                l.trim()
                    .trim_matches(|c: char| c.is_whitespace() || "│║┃╎┊·".contains(c))
            })
            .find(|l| !l.is_empty() && !l.chars().all(|c| "─═╭╮╰╯╔╗╚╝ ".contains(c)))
            .map(|l| short(l, 90))
    };
    let after_echo = echo_index(&lines, cmd).and_then(|i| content(i + 1));
    let in_box = || {
        let top = lines
            .iter()
            .rposition(|l| l.trim_start().starts_with(['╔', '╭']))?;
        content(top + 1)
    };
    after_echo.or_else(in_box).unwrap_or_default()
}

/// Error lines below the last echo of `cmd` (the whole screen when the echo scrolled away).
pub fn error_lines_after_echo(screen: &str, cmd: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let from = echo_index(&lines, cmd).unwrap_or(0);
    lines[from..]
        .iter()
        .filter(|l| is_error_line(l))
        .map(|l| unframed(l).to_string())
        .collect()
}

/// The assistant's lines below the last echo of `cmd`, down to the status bar: those that
/// start with its glyph `┊`, the glyph off and trimmed (an empty one is an answer with no text).
pub fn assistant_lines_after_echo(screen: &str, cmd: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let Some(from) = echo_index(&lines, cmd) else {
        return Vec::new();
    };
    lines[from + 1..]
        .iter()
        .map(|l| l.trim())
        .take_while(|l| !l.starts_with("─ "))
        .filter_map(|l| l.strip_prefix('┊'))
        .map(|l| unframed(l).to_string())
        .collect()
}

/// Error lines inside the last box drawn on screen (a picker, a pager, a hub).
pub fn error_lines_in_box(screen: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let Some(top) = lines
        .iter()
        .rposition(|l| l.trim_start().starts_with(['╔', '╭']))
    else {
        return Vec::new();
    };
    lines[top..]
        .iter()
        .filter(|l| is_error_line(l))
        .map(|l| unframed(l).to_string())
        .collect()
}

/// A line the user would read as an error.
pub fn is_error_line(l: &str) -> bool {
    l.contains("ERROR") || l.contains("error:")
}

pub fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from real captures (120 columns).
    const IDLE: &str = " ┊  (offline model) You said: hello\n\n ─ ready │ offline │ 6 tok │ 6s │ voice off │ 1 session      ─ /tmp/ws\n ❯\n";
    const BUSY: &str = " ❯ $ sleep 30\n\n ─ ( ͡° ͜ʖ ͡°) analyzing…     · 0s │ offline │ 37 tok │ voice off      ─ /tmp/ws\n ❯ Ctrl+C to interrupt…\n";
    const CONFIRM: &str = " ❯ hello\n ╔══════╗\n ║ ⚠ Start a new session? ║\n ║ ▸ No, keep going ║\n ╚══════╝\n\n ─ ready │ offline │ 5s │ voice off      ─ /tmp/ws\n\n";
    const SHELL: &str = " ─ ready │ offline │ 15s │ voice off │ 1 session             ─ /tmp/ws\n $ !echo shell-1\n";
    const PICKER: &str = " ║ Sessions                                  ║\n ║ 2 live · 3 resumable                      ║\n ║    +   new        ✎ draft    current/default   Start a new live session ║\n ║ ▸  1.  current    ✓ idle     offline           (untitled) ║\n ║    2.  55ea0723   ✓ idle     offline           hello one ║\n ║    3.  20261201_1…today      0 msgs            (untitled) ║\n ║ Session row: Enter switch · Ctrl+D close   ║\n";

    #[test]
    fn ready_needs_the_ready_status_and_an_open_composer() {
        assert!(screen_ready(IDLE));
        assert!(
            !screen_ready(&IDLE.replace("─ ready", "─ yolo on")),
            "a notice where `ready` stands is not ready"
        );
        assert!(!screen_ready(BUSY), "busy");
        assert!(!screen_ready(CONFIRM), "a confirmation covers the composer");
        assert_eq!(composer_line(BUSY), Some("❯ Ctrl+C to interrupt…"));
        assert_eq!(composer_line(SHELL), Some("$ !echo shell-1"));
    }

    #[test]
    fn picker_rows_are_the_new_row_then_the_numbered_ones() {
        let rows = picker_rows(PICKER);
        assert_eq!(rows.len(), 4, "{rows:#?}");
        assert!(rows[0].contains("new"));
        assert!(rows[1].starts_with('▸') && rows[1].contains("current"));
        assert!(rows[3].contains("today"));
    }

    #[test]
    fn popup_rows_are_slash_commands_not_the_composer() {
        let s = " ╔═══╗\n ║ ▸ /help   list commands ║\n ║   /history  show ║\n ╚═══╝\n ❯ /he\n 1 tools · 0 skills · /help for commands\n";
        assert_eq!(popup_rows(s), ["/help   list commands", "/history  show"]);
    }

    #[test]
    fn assistant_lines_are_read_below_the_echo_to_the_status_bar() {
        let s = "┊ old answer\n❯ hi\n\n┊ Error: it failed   ┃\n  wrapped on\n┊       ┃\n─ ready │ m\n┊ not this\n";
        assert_eq!(
            assistant_lines_after_echo(s, "hi"),
            ["Error: it failed", ""]
        );
        assert!(assistant_lines_after_echo(s, "never typed").is_empty());
    }

    #[test]
    fn errors_are_read_below_the_echo_of_the_command() {
        let s = " ·  error: stale from before\n ·  /status\n ·  error: unknown method: session.status\n";
        assert_eq!(
            error_lines_after_echo(s, "/status"),
            ["·  error: unknown method: session.status"]
        );
        assert_eq!(
            first_line_after_echo(s, "/status"),
            "error: unknown method: session.status"
        );
        let boxed = " ·  error: old\n ╔══╗\n ║ Skills ║\n ║ error: unknown method: skills.manage ║\n ╚══╝\n";
        assert_eq!(
            error_lines_in_box(boxed),
            ["error: unknown method: skills.manage"]
        );
        assert_eq!(first_line_after_echo(boxed, "/skills"), "Skills");
    }
}
