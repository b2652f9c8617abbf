//! Judging one simple command on its expanded words: wrappers are seen through, shells and
//! `eval` have their scripts walked, and each command that can destroy gets its own reading of
//! its options and operands.

use std::path::{Path, PathBuf};

use super::paths::{self, Target, block_device, entry_of, protected, within};
use super::walk::{Stdin, Walker};
use super::words::Arg;
use super::{Danger, code};
use crate::tools::sensitive_files::{SensitiveFile, sensitive_file};

const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "fish", "rbash",
];
const DOWNLOADERS: &[&str] = &[
    "curl",
    "wget",
    "fetch",
    "http",
    "https",
    "xh",
    "aria2c",
    "lwp-request",
];

/// rsync's long options that take a value.
const RSYNC_LONG_VALUES: &[&str] = &[
    "rsh",
    "rsync-path",
    "exclude",
    "include",
    "filter",
    "exclude-from",
    "include-from",
    "files-from",
    "chmod",
    "chown",
    "log-file",
    "temp-dir",
    "backup-dir",
    "compare-dest",
    "copy-dest",
    "link-dest",
    "partial-dir",
    "password-file",
    "suffix",
    "max-size",
    "min-size",
    "bwlimit",
    "timeout",
    "port",
    "out-format",
];

/// Perl's or Ruby's `-i`: the files named after the code are edited in place.
fn in_place(name: &str, rest: &[Arg]) -> bool {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    // Options whose value follows them in the same word (`-MFile::Path`, `-rfileutils`).
    const TAKES_VALUE: &str = "MmIxCDdVrEeKWF";
    matches!(stem, "perl" | "ruby")
        && rest.iter().any(|a| {
            let cluster = a.text.strip_prefix('-').filter(|c| !c.starts_with('-'));
            cluster.is_some_and(|c| {
                c.find('i').is_some_and(|k| {
                    c[..k]
                        .chars()
                        .all(|l| l.is_ascii_alphabetic() && !TAKES_VALUE.contains(l))
                })
            })
        })
}

/// An rsync or scp location on another host (`host:path`, `rsync://…`).
fn remote(a: &Arg) -> bool {
    let t = a.text.as_str();
    t.contains("://") || t.split('/').next().is_some_and(|first| first.contains(':'))
}

/// A command that decodes its input into text only known when it runs (`base64 -d`,
/// `xxd -r`, `openssl enc -d`, `gpg -d`).
fn decodes(name: &str, rest: &[Arg]) -> bool {
    let has = |opts: &[&str]| rest.iter().any(|a| opts.contains(&a.text.as_str()));
    let short = |letter: char| {
        rest.iter().any(|a| {
            a.text
                .strip_prefix('-')
                .is_some_and(|c| !c.starts_with('-') && c.contains(letter))
        })
    };
    match name {
        "base64" | "base32" | "basenc" => short('d') || short('D') || has(&["--decode"]),
        "xxd" => short('r') || has(&["-revert"]),
        "openssl" => has(&["-d", "-decrypt"]),
        "gpg" | "gpg2" => short('d') || has(&["--decrypt"]),
        "uudecode" => true,
        _ => false,
    }
}

/// The command's name as bash looks it up: the last path component (`/bin/rm` is `rm`).
pub(super) fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

fn interpreter(name: &str) -> bool {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    matches!(
        stem,
        "python" | "perl" | "ruby" | "node" | "nodejs" | "php" | "lua" | "tclsh"
    )
}

/// Leading options of a wrapper or command, getopt-style but stopping at the first operand.
/// `with_value`: short option letters that take a value; `long_with_value`: long ones (without
/// `--`) that take one when not written `--name=value`. Returns the options (name, value) and the
/// index of the first operand.
fn options<'a>(
    args: &'a [Arg],
    with_value: &str,
    long_with_value: &[&str],
) -> (Vec<(String, Option<&'a Arg>)>, usize) {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].text.as_str();
        if args[i].dynamic || a == "-" || !a.starts_with('-') {
            break;
        }
        if a == "--" {
            i += 1;
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            match long.split_once('=') {
                Some((name, _)) => out.push((name.to_string(), None)),
                None if long_with_value.contains(&long) => {
                    out.push((long.to_string(), args.get(i + 1)));
                    i += 1;
                }
                None => out.push((long.to_string(), None)),
            }
            i += 1;
            continue;
        }
        let letters: Vec<char> = a[1..].chars().collect();
        for (k, ch) in letters.iter().enumerate() {
            if with_value.contains(*ch) {
                if k + 1 < letters.len() {
                    out.push((ch.to_string(), None));
                } else {
                    out.push((ch.to_string(), args.get(i + 1)));
                    i += 1;
                }
                break;
            }
            out.push((ch.to_string(), None));
        }
        i += 1;
    }
    (out, i.min(args.len()))
}

/// Operands of a GNU-style command (options may follow operands); `with_value` as in
/// [`options`]. Returns (flags, operands).
pub(super) fn gnu_split<'a>(
    args: &'a [Arg],
    with_value: &str,
    long_with_value: &[&str],
) -> (Vec<String>, Vec<&'a Arg>) {
    let mut flags = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let t = a.text.as_str();
        if t == "--" {
            operands.extend(args[i + 1..].iter());
            break;
        }
        if a.dynamic || t == "-" || !t.starts_with('-') {
            operands.push(a);
            i += 1;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            let name = long.split_once('=').map_or(long, |(n, _)| n);
            flags.push(format!("--{name}"));
            if !long.contains('=') && long_with_value.contains(&long) {
                i += 1;
            }
            i += 1;
            continue;
        }
        for (k, ch) in t[1..].char_indices() {
            flags.push(format!("-{ch}"));
            if with_value.contains(ch) {
                if k + ch.len_utf8() == t.len() - 1 {
                    i += 1;
                }
                break;
            }
        }
        i += 1;
    }
    (flags, operands)
}

/// A long option given as any unambiguous prefix (`--rec` is `--recursive`).
fn long_flag(flags: &[String], full: &str) -> bool {
    flags
        .iter()
        .any(|f| f.len() >= 4 && f.starts_with("--") && full.starts_with(&f[2..]))
}

pub(super) fn short_flag(flags: &[String], ch: char) -> bool {
    flags
        .iter()
        .any(|f| f.len() == 2 && f.ends_with(ch) && !f.starts_with("--"))
}

impl Walker<'_> {
    /// Judge one command with its expanded words.
    pub(crate) fn exec(&mut self, args: Vec<Arg>, stdin: Stdin) {
        let Some(first) = args.first() else {
            return;
        };
        if first.dynamic {
            // A download's output or a variable as the command: bash runs what it holds.
            let d = if first.download {
                Danger::PipeToShell
            } else {
                Danger::HiddenCommand
            };
            self.flag(d);
            return;
        }
        if first.text.contains('/') && self.is_fetched(first) {
            // `./install.sh` after `curl -o install.sh`
            self.flag(Danger::PipeToShell);
        }
        let name = basename(&first.text).to_string();
        self.fork_bomb(&first.text);
        let rest = &args[1..];
        match name.as_str() {
            "sudo" => self.sudo(rest, stdin),
            "doas" => {
                let (_, i) = options(rest, "uC", &[]);
                self.exec(rest[i..].to_vec(), stdin);
            }
            "env" => self.env(rest, stdin),
            "command" => {
                let (opts, i) = options(rest, "", &[]);
                if !opts.iter().any(|(o, _)| o == "v" || o == "V") {
                    self.exec(rest[i..].to_vec(), stdin);
                }
            }
            "builtin" | "nohup" | "unbuffer" | "busybox" | "toybox" | "setsid" => {
                let (_, i) = options(rest, "", &[]);
                self.exec(rest[i..].to_vec(), stdin);
            }
            "exec" => {
                let (_, i) = options(rest, "a", &[]);
                self.exec(rest[i..].to_vec(), stdin);
            }
            "nice" => {
                let (_, i) = options(rest, "n", &["adjustment"]);
                self.exec(rest[i..].to_vec(), stdin);
            }
            "time" => {
                let (opts, i) = options(rest, "fo", &["format", "output"]);
                for (o, v) in &opts {
                    if let (true, Some(v)) = (o == "o" || o == "output", v) {
                        self.write_target(v, Danger::WriteBlockDevice);
                    }
                }
                self.exec(rest[i..].to_vec(), stdin);
            }
            "timeout" => {
                let (_, i) = options(rest, "sk", &["signal", "kill-after"]);
                self.exec(rest.get(i + 1..).unwrap_or_default().to_vec(), stdin);
            }
            "stdbuf" => {
                let (_, i) = options(rest, "ioe", &["input", "output", "error"]);
                self.exec(rest[i..].to_vec(), stdin);
            }
            "ionice" => {
                let (_, i) = options(rest, "cnp", &["class", "classdata", "pid"]);
                self.exec(rest[i..].to_vec(), stdin);
            }
            "chrt" | "taskset" => {
                let (_, i) = options(rest, "", &[]);
                self.exec(rest.get(i + 1..).unwrap_or_default().to_vec(), stdin);
            }
            "flock" => {
                let (_, i) = options(rest, "wEc", &["timeout", "conflict-exit-code"]);
                let after = rest.get(i + 1..).unwrap_or_default();
                match after.first().map(|a| a.text.as_str()) {
                    Some("-c" | "--command") => {
                        if let Some(s) = after.get(1) {
                            self.shell_string(s);
                        }
                    }
                    _ => self.exec(after.to_vec(), stdin),
                }
            }
            "watch" => {
                let (_, i) = options(rest, "nqd", &["interval", "differences"]);
                self.shell_string(&Arg::join(&rest[i..]));
            }
            "su" | "runuser" => self.su(rest),
            "xargs" => self.xargs(rest),
            "eval" => self.shell_string(&Arg::join(rest)),
            // What an alias or a trap will run is judged now.
            "alias" => {
                for a in rest {
                    if let Some((_, value)) = a.script.split_once('=') {
                        let mut body = a.clone();
                        body.script = value.to_string();
                        self.shell_string(&body);
                    }
                }
            }
            "trap" => {
                let (_, i) = options(rest, "", &[]);
                if let Some(action) = rest.get(i) {
                    self.shell_string(action);
                }
            }
            "source" | "." => {
                // The sourced file may set any variable.
                self.vars_unknown();
                if rest
                    .first()
                    .is_some_and(|a| a.download || self.is_fetched(a))
                {
                    self.flag(Danger::PipeToShell)
                }
            }
            "read" | "mapfile" | "readarray" | "getopts" | "printf"
                if self.sets_vars(&name, rest) => {}
            n if SHELLS.contains(&n) => self.shell(rest, stdin),
            n if interpreter(n) => self.interpreter(n, rest, &stdin),
            "cd" | "pushd" | "popd" => self.cd(&name, rest),
            "echo" | "printf" | "cat" => {
                if name == "cat" && rest.iter().any(|a| self.is_fetched(a)) {
                    // What it prints is a download.
                    self.downloads += 1;
                }
                self.prints(&name, rest, &stdin)
            }
            n if DOWNLOADERS.contains(&n) => self.download(n, rest),
            "rm" | "unlink" => self.rm(rest),
            "find" => self.find(rest),
            "chmod" | "chown" | "chgrp" | "chattr" => self.chmod(&name, rest),
            "dd" => {
                for a in rest {
                    if let Some(of) = a.text.strip_prefix("of=") {
                        let mut target = a.clone();
                        target.text = of.to_string();
                        target.pattern = a.pattern.get(3..).unwrap_or("").to_string();
                        self.write_target(&target, Danger::DdDevice);
                    }
                }
            }
            n if n.starts_with("mkfs")
                || matches!(n, "mke2fs" | "mkswap" | "wipefs" | "mkdosfs" | "blkdiscard") =>
            {
                self.flag(Danger::Mkfs)
            }
            "cp" | "install" | "ln" | "rsync" | "scp" => self.copy(&name, rest),
            "mv" => self.mv(rest),
            "tee" => {
                let (_, operands) = gnu_split(rest, "", &[]);
                for a in operands {
                    self.write_target(a, Danger::WriteBlockDevice);
                    if stdin == Stdin::Download {
                        self.fetch(a);
                    }
                }
                if let Stdin::Text(t) = &stdin {
                    // It passes its input on.
                    self.out.get_or_insert_with(String::new).push_str(t);
                }
            }
            "truncate" => {
                let (_, operands) = gnu_split(rest, "sr", &["size", "reference"]);
                for a in operands {
                    self.write_target(a, Danger::WriteBlockDevice);
                }
            }
            "sed" => {
                self.sed(rest);
                self.transforms(&stdin);
            }
            n if decodes(n, rest) => self.hidden_outputs += 1,
            "crontab" => self.crontab(rest),
            "setfacl" => self.setfacl(rest),
            "shred" => {
                let (_, operands) = gnu_split(rest, "ns", &["iterations", "size"]);
                for a in operands {
                    let t = paths::target(a, self.cwd.as_deref());
                    let device = matches!(&t, Target::Exact(p) if block_device(p));
                    if !device && self.protected_target(&t) {
                        self.flag(Danger::MoveProtected);
                    } else {
                        self.write_target(a, Danger::WriteBlockDevice);
                    }
                }
            }
            "kill" => self.kill(rest),
            "pkill" | "killall" => self.pkill(rest),
            "killall5" => self.flag(Danger::KillAll),
            "shutdown" | "reboot" | "halt" | "poweroff" => self.flag(Danger::Power),
            "init" | "telinit"
                if rest
                    .first()
                    .is_some_and(|a| matches!(a.text.as_str(), "0" | "1" | "6" | "s" | "S")) =>
            {
                self.flag(Danger::Power)
            }
            "systemctl" | "loginctl" => self.systemctl(rest),
            "git" => self.git(rest),
            _ => self.transforms(&stdin),
        }
    }

    /// A command fed text the policy saw prints what only running it shows (`tr`, `rev`…).
    fn transforms(&mut self, stdin: &Stdin) {
        if matches!(stdin, Stdin::Text(_)) {
            self.hidden_outputs += 1;
        }
    }

    /// Builtins that assign the variables they name: those become unknown. Returns false for
    /// a `printf` without `-v` (it prints: judged on).
    fn sets_vars(&mut self, name: &str, rest: &[Arg]) -> bool {
        let names: Vec<&Arg> = match name {
            "printf" => match rest.iter().position(|a| a.text == "-v") {
                Some(k) => rest.get(k + 1).into_iter().collect(),
                None => return false,
            },
            "getopts" => rest.get(1).into_iter().collect(),
            _ => rest.iter().filter(|a| !a.text.starts_with('-')).collect(),
        };
        for n in names {
            self.assign(&n.text, &Arg::unknown());
        }
        if matches!(name, "mapfile" | "readarray") {
            self.assign("MAPFILE", &Arg::unknown());
        }
        if name == "read" {
            self.assign("REPLY", &Arg::unknown());
        }
        true
    }

    // ---- wrappers ----

    fn sudo(&mut self, rest: &[Arg], stdin: Stdin) {
        let (opts, mut i) = options(
            rest,
            "ugpCDrtTURh",
            &[
                "user",
                "group",
                "prompt",
                "close-from",
                "chdir",
                "role",
                "type",
                "command-timeout",
                "other-user",
                "chroot",
                "host",
            ],
        );
        // `sudo VAR=value cmd`
        while rest.get(i).is_some_and(|a| is_assignment(&a.text)) {
            i += 1;
        }
        let chdir = opts
            .iter()
            .find(|(o, _)| o == "D" || o == "chdir")
            .map(|(_, v)| *v);
        self.exec_in(chdir, rest[i..].to_vec(), stdin);
    }

    fn env(&mut self, rest: &[Arg], stdin: Stdin) {
        let (opts, mut i) = options(rest, "uCS", &["unset", "chdir", "split-string"]);
        if let Some((_, Some(s))) = opts.iter().find(|(o, _)| o == "S" || o == "split-string") {
            // `env -S "cmd args"` splits its string into the command.
            let mut joined = vec![(*s).clone()];
            joined.extend(rest[i..].iter().cloned());
            self.shell_string(&Arg::join(&joined));
            return;
        }
        while rest.get(i).is_some_and(|a| is_assignment(&a.text)) {
            i += 1;
        }
        let chdir = opts
            .iter()
            .find(|(o, _)| o == "C" || o == "chdir")
            .map(|(_, v)| *v);
        self.exec_in(chdir, rest[i..].to_vec(), stdin);
    }

    /// Run `args` after a wrapper's `--chdir DIR` (`Some(None)`: a directory not known here).
    fn exec_in(&mut self, chdir: Option<Option<&Arg>>, args: Vec<Arg>, stdin: Stdin) {
        let Some(dir) = chdir else {
            self.exec(args, stdin);
            return;
        };
        let saved = self.cwd.clone();
        self.cwd = dir.and_then(|d| self.directory(d));
        self.exec(args, stdin);
        self.cwd = saved;
    }

    fn su(&mut self, rest: &[Arg]) {
        let mut i = 0;
        while i < rest.len() {
            let t = rest[i].text.as_str();
            if let Some(cmd) = t.strip_prefix("--command=") {
                self.shell_string(&Arg::literal(cmd));
                return;
            }
            match t {
                "-c" | "--command" | "--session-command" => {
                    if let Some(s) = rest.get(i + 1) {
                        self.shell_string(s);
                    }
                    return;
                }
                "--" => {
                    self.exec(rest[i + 1..].to_vec(), Stdin::Unknown);
                    return;
                }
                "-s" | "--shell" | "-g" | "--group" | "-G" | "-u" | "--user" | "-w" => i += 2,
                _ => i += 1,
            }
        }
    }

    fn xargs(&mut self, rest: &[Arg]) {
        let (opts, i) = options(
            rest,
            "ILlnPsdEeaR",
            &[
                "replace",
                "max-lines",
                "max-args",
                "max-procs",
                "max-chars",
                "delimiter",
                "eof",
                "arg-file",
                "process-slot-var",
            ],
        );
        let replace = opts.iter().find_map(|(o, v)| match (o.as_str(), v) {
            ("I", Some(v)) => Some(v.text.clone()),
            ("i" | "replace", _) => Some("{}".into()),
            _ => None,
        });
        let mut inner: Vec<Arg> = rest[i..].to_vec();
        if inner.is_empty() {
            return;
        }
        // The operands come from standard input: unknown here.
        match replace {
            Some(r) => {
                for a in inner.iter_mut().skip(1) {
                    if a.text.contains(&r) {
                        *a = Arg::unknown();
                    }
                }
            }
            None => inner.push(Arg::unknown()),
        }
        self.exec(inner, Stdin::Unknown);
    }

    // ---- shells ----

    fn shell(&mut self, rest: &[Arg], stdin: Stdin) {
        let mut i = 0;
        let mut command_string = false;
        let mut read_stdin = false;
        while i < rest.len() {
            let a = &rest[i];
            let t = a.text.as_str();
            if a.dynamic || !(t.starts_with('-') || t.starts_with('+')) || t == "-" || t == "--" {
                if t == "-" || t == "--" {
                    i += 1;
                }
                break;
            }
            if t.starts_with("--") {
                if matches!(t, "--rcfile" | "--init-file") {
                    i += 1;
                }
                i += 1;
                continue;
            }
            for ch in t[1..].chars() {
                match ch {
                    'c' => command_string = true,
                    's' => read_stdin = true,
                    'o' | 'O' => i += 1,
                    _ => {}
                }
            }
            i += 1;
        }
        let operands = rest.get(i..).unwrap_or_default();
        if command_string {
            if let Some(s) = operands.first() {
                self.shell_string(s);
            }
            // What the script prints is only known when it runs.
            self.hidden_outputs += 1;
        } else if read_stdin || operands.is_empty() {
            self.shell_stdin(&stdin);
            self.transforms(&stdin);
        } else {
            self.script_operand(&operands[0]);
        }
    }

    /// A script bash reads from a word (`bash -c`, `eval`, `su -c`).
    pub(crate) fn shell_string(&mut self, s: &Arg) {
        if s.download {
            self.flag(Danger::PipeToShell);
        } else if s.substituted {
            self.flag(Danger::HiddenCommand);
        } else {
            self.script(&s.script);
        }
    }

    fn shell_stdin(&mut self, stdin: &Stdin) {
        match stdin {
            Stdin::Download => self.flag(Danger::PipeToShell),
            Stdin::Hidden => self.flag(Danger::HiddenCommand),
            Stdin::Text(t) => self.script(&t.clone()),
            Stdin::Unknown => {}
        }
    }

    /// A script file operand: a file is not read, but a substitution's output and a file the
    /// command downloaded are judged.
    fn script_operand(&mut self, a: &Arg) {
        if a.download || self.is_fetched(a) {
            self.flag(Danger::PipeToShell);
        } else if a.substituted {
            self.flag(Danger::HiddenCommand);
        }
    }

    /// python, perl, node…: whether they run a download or decoded text, what their inline code
    /// deletes or runs (`code`), the files `perl -i` rewrites.
    fn interpreter(&mut self, name: &str, rest: &[Arg], stdin: &Stdin) {
        // `-c CODE`, `-e CODE`, `-le CODE`…; `-m MODULE` runs no script operand either.
        let code_flag = |t: &str| {
            matches!(t, "-c" | "-e" | "-E" | "-p" | "-m" | "-r")
                || (t.len() > 2
                    && t.ends_with('e')
                    && t.strip_prefix('-')
                        .is_some_and(|f| f.chars().all(|c| c.is_ascii_alphabetic())))
        };
        // Where each piece of inline code is.
        let code_at: Vec<usize> = rest
            .iter()
            .enumerate()
            .filter(|(k, a)| {
                !a.dynamic && code_flag(&a.text) && a.text != "-m" && k + 1 < rest.len()
            })
            .map(|(k, _)| k + 1)
            .collect();
        let inline: Vec<&Arg> = code_at.iter().map(|&k| &rest[k]).collect();
        let module = rest.iter().any(|a| a.text == "-m");
        if let Some(&last) = code_at.last()
            && in_place(name, rest)
        {
            // `perl -pi -e CODE FILE…` rewrites each file.
            for file in rest[last + 1..].iter().filter(|a| !a.text.starts_with('-')) {
                self.write_target(file, Danger::WriteBlockDevice);
            }
        }
        if !inline.is_empty() || module {
            for code in inline {
                if code.download {
                    self.flag(Danger::PipeToShell);
                }
                self.code(&code.script);
            }
            self.hidden_outputs += 1;
            return;
        }
        match rest.iter().find(|a| a.dynamic || !a.text.starts_with('-')) {
            Some(script) => self.script_operand(script),
            None => match stdin {
                Stdin::Download => self.flag(Danger::PipeToShell),
                Stdin::Hidden => self.flag(Danger::HiddenCommand),
                Stdin::Text(code) => {
                    self.code(code);
                    self.hidden_outputs += 1;
                }
                Stdin::Unknown => {}
            },
        }
    }

    /// What an interpreter's code does: a tree it deletes is judged as `rm -r` of the same
    /// path, a shell command line it runs as that script.
    fn code(&mut self, code: &str) {
        let effects = code::effects(code);
        for path in effects.tree_deletes {
            let t = match path {
                Some(p) => paths::target(&Arg::literal(&p), self.cwd.as_deref()),
                None => Target::Unknown,
            };
            self.deletion(&t);
        }
        for line in effects.shell_commands {
            self.script(&line);
        }
    }

    // ---- state ----

    fn cd(&mut self, name: &str, rest: &[Arg]) {
        if name == "popd" {
            self.cwd = None;
            return;
        }
        let operands: Vec<&Arg> = rest
            .iter()
            .filter(|a| a.dynamic || !a.text.starts_with('-') || a.text == "-")
            .collect();
        self.cwd = match operands.first() {
            None => self.home(),
            Some(a) if a.text == "-" && !a.dynamic => None,
            Some(a) => self.directory(a),
        };
    }

    /// A directory operand resolved (`None`: not known here).
    fn directory(&self, a: &Arg) -> Option<PathBuf> {
        match paths::target(a, self.cwd.as_deref()) {
            Target::Exact(p) => Some(p),
            _ => None,
        }
    }

    /// What `echo`, `printf` and `cat` print, when a pipeline feeds it to a shell.
    fn prints(&mut self, name: &str, rest: &[Arg], stdin: &Stdin) {
        let text = match name {
            "cat" if rest.is_empty() => match stdin {
                Stdin::Text(t) => Some(t.clone()),
                _ => None,
            },
            "cat" => None,
            _ => {
                let words: Vec<&Arg> = rest
                    .iter()
                    .skip_while(|a| {
                        name == "echo"
                            && matches!(a.text.as_str(), "-n" | "-e" | "-E" | "-ne" | "-en")
                    })
                    .collect();
                if words.iter().any(|a| a.substituted) {
                    None
                } else {
                    let sep = if name == "printf" { "\n" } else { " " };
                    let text = words.iter().map(|a| a.script.as_str()).collect::<Vec<_>>();
                    let text = text.join(sep);
                    let escapes = name == "printf" || rest.iter().any(|a| a.text == "-e");
                    match escapes {
                        false => Some(text),
                        true => Some(text.replace("\\n", "\n"))
                            // `\x72m`: what it prints is only known when it runs.
                            .filter(|t| !t.contains('\\')),
                    }
                }
            }
        };
        if text.is_none() && name != "cat" {
            self.hidden_outputs += 1;
        }
        if let Some(t) = text {
            let out = self.out.get_or_insert_with(String::new);
            out.push_str(&t);
            out.push('\n');
        }
    }

    // ---- what destroys ----

    /// A file the command writes: judged against the sensitive files (`device`: what writing
    /// a block device is for this command).
    pub(crate) fn write_target(&mut self, a: &Arg, device: Danger) {
        self.sensitive_target(a, Some(device));
    }

    /// A file the command deletes (a device node's removal loses no data).
    fn delete_target(&mut self, a: &Arg) {
        self.sensitive_target(a, None);
    }

    fn sensitive_target(&mut self, a: &Arg, device: Option<Danger>) {
        let t = paths::target(a, self.cwd.as_deref());
        let (Target::Exact(p) | Target::Entries(p) | Target::Some(p)) = t else {
            return;
        };
        let danger = match sensitive_file(&p, self.place.home.as_deref()) {
            None => None,
            Some(SensitiveFile::Device) => device,
            Some(SensitiveFile::Kernel) => Some(Danger::WriteKernel),
            Some(SensitiveFile::SystemConfig) => Some(Danger::OverwriteEtc),
            Some(SensitiveFile::Account) => Some(Danger::OverwriteAccount),
        };
        if let Some(d) = danger {
            self.flag(d);
        }
    }

    /// Whether deleting `t` (recursively) reaches what the policy protects.
    fn deletion(&mut self, t: &Target) {
        let root = Path::new("/");
        let cwd = self.place.cwd.clone();
        // Inside a working directory that is itself home, `/` or a system directory, nothing is
        // a project's own to delete.
        let workspace = !protected(&cwd, self.place);
        let d = match t {
            Target::Unknown => Some(Danger::RmBroad),
            Target::Exact(p) | Target::Entries(p) if p == root => Some(Danger::RmRoot),
            Target::Exact(p) | Target::Entries(p) => {
                (protected(p, self.place) || within(&cwd, p) || !within(p, &cwd) || !workspace)
                    .then_some(Danger::RmBroad)
            }
            Target::Some(dir) => {
                let e = entry_of(dir);
                (protected(&e, self.place) || !within(&e, &cwd) || !workspace)
                    .then_some(Danger::RmBroad)
            }
        };
        if let Some(d) = d {
            self.flag(d);
        }
    }

    fn protected_target(&self, t: &Target) -> bool {
        match t {
            Target::Unknown => false,
            Target::Exact(p) | Target::Entries(p) => protected(p, self.place),
            Target::Some(dir) => protected(&entry_of(dir), self.place),
        }
    }

    fn rm(&mut self, rest: &[Arg]) {
        let (flags, operands) = gnu_split(rest, "", &[]);
        let recursive =
            short_flag(&flags, 'r') || short_flag(&flags, 'R') || long_flag(&flags, "recursive");
        for a in operands {
            let t = paths::target(a, self.cwd.as_deref());
            if recursive || a.find_target.is_some() {
                self.deletion(&t);
            } else {
                self.delete_target(a);
            }
        }
    }

    fn find(&mut self, rest: &[Arg]) {
        let mut i = 0;
        while i < rest.len() && matches!(rest[i].text.as_str(), "-H" | "-L" | "-P") {
            i += 1;
        }
        let mut roots: Vec<&Arg> = Vec::new();
        while i < rest.len() {
            let t = rest[i].text.as_str();
            if !rest[i].dynamic && (t.starts_with('-') || matches!(t, "(" | ")" | "!" | ",")) {
                break;
            }
            roots.push(&rest[i]);
            i += 1;
        }
        let dot = Arg::literal(".");
        if roots.is_empty() {
            roots.push(&dot);
        }
        let expr = &rest[i..];
        let texts: Vec<&str> = expr.iter().map(|a| a.text.as_str()).collect();
        const NARROWING: &[&str] = &[
            "-name",
            "-iname",
            "-path",
            "-ipath",
            "-wholename",
            "-iwholename",
            "-regex",
            "-iregex",
            "-newer",
            "-mtime",
            "-mmin",
            "-atime",
            "-amin",
            "-ctime",
            "-cmin",
            "-size",
            "-empty",
            "-user",
            "-group",
            "-inum",
            "-samefile",
            "-lname",
            "-ilname",
            "-links",
            "-perm",
            "-uid",
            "-gid",
        ];
        let negated = texts
            .iter()
            .any(|t| matches!(*t, "!" | "-not" | "-o" | "-or"));
        let narrowed = !negated && texts.iter().any(|t| NARROWING.contains(t));
        let targets: Vec<Target> = roots
            .iter()
            .map(|r| match paths::target(r, self.cwd.as_deref()) {
                Target::Exact(p) if narrowed => Target::Some(p),
                Target::Entries(p) if narrowed => Target::Some(p),
                t => t,
            })
            .collect();
        if texts.contains(&"-delete") {
            for t in &targets {
                self.deletion(t);
            }
        }
        let mut k = 0;
        while k < expr.len() {
            if !matches!(texts[k], "-exec" | "-execdir" | "-ok" | "-okdir") {
                k += 1;
                continue;
            }
            let end = (k + 1..expr.len())
                .find(|&j| matches!(texts[j], ";" | "+"))
                .unwrap_or(expr.len());
            let inner = &expr[k + 1..end];
            for t in &targets {
                let args: Vec<Arg> = inner
                    .iter()
                    .map(|a| {
                        if a.text.contains("{}") {
                            Arg {
                                find_target: Some(t.clone()),
                                ..Arg::default()
                            }
                        } else {
                            a.clone()
                        }
                    })
                    .collect();
                self.exec(args, Stdin::Unknown);
            }
            k = end + 1;
        }
    }

    fn chmod(&mut self, name: &str, rest: &[Arg]) {
        // A mode may look like an option (`chmod -w`, `chattr -i`): only these are flags.
        let mode_flags = match name {
            "chmod" => Some("Rcfv"),
            "chattr" => Some("RVf"),
            _ => None,
        };
        let mut flags = Vec::new();
        let mut operands: Vec<&Arg> = Vec::new();
        let mut ended = false;
        for a in rest {
            let t = a.text.as_str();
            if ended || a.dynamic || !t.starts_with('-') || t == "-" {
                operands.push(a);
            } else if t == "--" {
                ended = true;
            } else if let Some(long) = t.strip_prefix("--") {
                flags.push(format!(
                    "--{}",
                    long.split_once('=').map_or(long, |(n, _)| n)
                ));
            } else if mode_flags.is_some_and(|f| !t[1..].chars().all(|c| f.contains(c))) {
                operands.push(a);
            } else {
                flags.extend(t[1..].chars().map(|c| format!("-{c}")));
            }
        }
        let by_reference = flags.iter().any(|f| f.starts_with("--reference"));
        let (spec, targets) = match (by_reference, operands.split_first()) {
            (true, _) => (None, operands.as_slice()),
            (false, Some((spec, targets))) => (Some(*spec), targets),
            (false, None) => return,
        };
        let find_recursive = targets.iter().any(|a| a.find_target.is_some());
        let recursive = short_flag(&flags, 'R') || long_flag(&flags, "recursive") || find_recursive;
        if !recursive {
            return;
        }
        let world_writable = name == "chmod" && spec.is_some_and(|s| world_writable(&s.text));
        self.recursive_change(targets, world_writable);
    }

    /// `setfacl -R`: a recursive permission change like `chmod -R`.
    fn setfacl(&mut self, rest: &[Arg]) {
        let (flags, targets) = gnu_split(
            rest,
            "mxMX",
            &[
                "modify",
                "remove",
                "set",
                "modify-file",
                "remove-file",
                "set-file",
            ],
        );
        if short_flag(&flags, 'R') || long_flag(&flags, "recursive") {
            self.recursive_change(&targets, false);
        }
    }

    /// A recursive permission, owner or attribute change of `targets`.
    fn recursive_change(&mut self, targets: &[&Arg], world_writable: bool) {
        for a in targets {
            let t = paths::target(a, self.cwd.as_deref());
            match &t {
                Target::Exact(p) | Target::Entries(p) if p == Path::new("/") => {
                    self.flag(Danger::ChmodRoot);
                }
                _ if world_writable => self.flag(Danger::Chmod777),
                t if self.protected_target(t) => self.flag(Danger::ChownSystem),
                _ => {}
            }
        }
    }

    fn copy(&mut self, name: &str, rest: &[Arg]) {
        let with_value = match name {
            "install" => "mogtS",
            "rsync" => "eTf",
            "scp" => "cFiJloPS",
            _ => "tS",
        };
        let long_values: &[&str] = match name {
            "rsync" => RSYNC_LONG_VALUES,
            _ => &["target-directory", "suffix", "mode", "owner", "group"],
        };
        let (flags, operands) = gnu_split(rest, with_value, long_values);
        // rsync's and scp's `-t` is another option.
        let target_dir = matches!(name, "cp" | "install" | "ln")
            .then(|| find_value(rest, "-t", "--target-directory"))
            .flatten();
        if let Some(dir) = target_dir {
            self.write_target(&dir, Danger::WriteBlockDevice);
            self.pass_fetched(&operands, &dir);
            return;
        }
        if name == "install" && short_flag(&flags, 'd') {
            for a in operands {
                self.write_target(a, Danger::WriteBlockDevice);
            }
            return;
        }
        if let Some((dest, sources)) = operands.split_last()
            && !sources.is_empty()
        {
            self.write_target(dest, Danger::WriteBlockDevice);
            self.pass_fetched(sources, dest);
            // `rsync --delete` deletes what the destination holds beyond the source.
            let deletes = flags
                .iter()
                .any(|f| f == "--del" || f.starts_with("--delete"));
            if name == "rsync" && deletes && !remote(dest) {
                let t = paths::target(dest, self.cwd.as_deref());
                self.deletion(&t);
            }
        }
    }

    /// `crontab -r` deletes the account's scheduled jobs; `crontab FILE` replaces them.
    fn crontab(&mut self, rest: &[Arg]) {
        let (flags, operands) = gnu_split(rest, "usc", &[]);
        let reads_only = ["-l", "-e", "-T", "-n", "-V"]
            .iter()
            .any(|f| flags.iter().any(|g| g == f));
        if short_flag(&flags, 'r') || (!reads_only && (!operands.is_empty() || flags.is_empty())) {
            self.flag(Danger::OverwriteAccount);
        }
    }

    fn mv(&mut self, rest: &[Arg]) {
        let (_, operands) = gnu_split(rest, "tS", &["target-directory", "suffix"]);
        let (sources, dest): (Vec<&Arg>, Option<Arg>) =
            match find_value(rest, "-t", "--target-directory") {
                Some(dir) => (operands, Some(dir)),
                None => match operands.split_last() {
                    Some((dest, sources)) if !sources.is_empty() => {
                        (sources.to_vec(), Some((*dest).clone()))
                    }
                    _ => (Vec::new(), None),
                },
            };
        for s in &sources {
            let t = paths::target(s, self.cwd.as_deref());
            if self.protected_target(&t) {
                self.flag(Danger::MoveProtected);
            }
            if let Target::Exact(p) = &t
                && (within(&self.place.cwd, p) && p != &self.place.cwd)
            {
                // Moving an ancestor of the working directory away.
                self.flag(Danger::MoveProtected);
            }
        }
        if let Some(d) = dest {
            self.write_target(&d, Danger::WriteBlockDevice);
            self.pass_fetched(&sources, &d);
        }
    }

    fn sed(&mut self, rest: &[Arg]) {
        let mut in_place = false;
        let mut script_given = false;
        let mut files: Vec<&Arg> = Vec::new();
        let mut i = 0;
        while i < rest.len() {
            let a = &rest[i];
            let t = a.text.as_str();
            if a.dynamic || !t.starts_with('-') || t == "-" {
                files.push(a);
            } else if let Some(long) = t.strip_prefix("--") {
                in_place |= long.starts_with("in-place");
                if matches!(long, "expression" | "file" | "line-length") {
                    script_given |= long != "line-length";
                    i += 1;
                }
                script_given |= long.starts_with("expression=") || long.starts_with("file=");
            } else {
                for (k, ch) in t[1..].char_indices() {
                    match ch {
                        'i' => {
                            in_place = true;
                            break;
                        }
                        'e' | 'f' | 'l' => {
                            script_given |= ch != 'l';
                            if k + 1 == t.len() - 1 {
                                i += 1;
                            }
                            break;
                        }
                        _ => {}
                    }
                }
            }
            i += 1;
        }
        if !in_place {
            return;
        }
        let files = if script_given {
            &files[..]
        } else {
            files.get(1..).unwrap_or_default()
        };
        for f in files {
            self.write_target(f, Danger::WriteBlockDevice);
        }
    }

    fn kill(&mut self, rest: &[Arg]) {
        let mut i = 0;
        let mut signal = false;
        while i < rest.len() {
            let t = rest[i].text.as_str();
            match t {
                "--" => {
                    i += 1;
                    break;
                }
                "-l" | "-L" => return,
                "-s" | "-n" => {
                    signal = true;
                    i += 2;
                }
                t if t.starts_with('-') && t.len() > 1 && !signal => {
                    signal = true;
                    i += 1;
                }
                _ => break,
            }
        }
        if rest
            .get(i..)
            .unwrap_or_default()
            .iter()
            .any(|a| !a.dynamic && matches!(a.text.as_str(), "-1" | "1"))
        {
            self.flag(Danger::KillAll);
        }
    }

    fn pkill(&mut self, rest: &[Arg]) {
        let (flags, operands) = gnu_split(
            rest,
            "ugUGPstFo",
            &[
                "uid", "euid", "group", "parent", "session", "terminal", "signal", "pidfile",
            ],
        );
        let by_user = flags
            .iter()
            .any(|f| matches!(f.as_str(), "-u" | "-U" | "--uid" | "--euid" | "--user"));
        let everything = |a: &&Arg| {
            !a.dynamic && matches!(a.text.as_str(), "" | "." | ".*" | ".+" | "^" | "^.*" | "*")
        };
        if (operands.is_empty() && by_user) || operands.iter().any(everything) {
            self.flag(Danger::KillAll);
        }
    }

    fn systemctl(&mut self, rest: &[Arg]) {
        let (_, operands) = gnu_split(
            rest,
            "tpsHMno",
            &[
                "type", "property", "signal", "host", "machine", "lines", "output", "root",
            ],
        );
        let verb = operands.first().map(|a| a.text.as_str());
        let power = matches!(
            verb,
            Some("poweroff" | "reboot" | "halt" | "kexec" | "soft-reboot" | "rescue" | "emergency")
        ) || (verb == Some("isolate")
            && operands.get(1).is_some_and(|a| {
                matches!(
                    a.text.trim_end_matches(".target"),
                    "poweroff"
                        | "reboot"
                        | "halt"
                        | "rescue"
                        | "emergency"
                        | "runlevel0"
                        | "runlevel6"
                )
            }));
        if power {
            self.flag(Danger::Power);
        }
    }

    fn git(&mut self, rest: &[Arg]) {
        let mut dir: Option<PathBuf> = self.cwd.clone();
        let mut i = 0;
        while i < rest.len() {
            let a = &rest[i];
            let t = a.text.as_str();
            if a.dynamic || !t.starts_with('-') {
                break;
            }
            match t {
                "-C" => {
                    let next = rest.get(i + 1);
                    dir = match (next, &dir) {
                        (Some(n), Some(_)) => {
                            let saved = self.cwd.clone();
                            self.cwd = dir.clone();
                            let d = self.directory(n);
                            self.cwd = saved;
                            d
                        }
                        _ => None,
                    };
                    i += 2;
                }
                "-c" | "--git-dir" | "--work-tree" | "--namespace" => {
                    if t == "--work-tree" {
                        dir = rest.get(i + 1).and_then(|n| self.directory(n));
                    }
                    i += 2;
                }
                t if t.starts_with("--work-tree=") => {
                    let mut w = a.clone();
                    w.text = t["--work-tree=".len()..].to_string();
                    w.pattern = w.text.clone();
                    dir = self.directory(&w);
                    i += 1;
                }
                _ => i += 1,
            }
        }
        if rest.get(i).map(|a| a.text.as_str()) != Some("clean") {
            return;
        }
        let (flags, pathspecs) = gnu_split(&rest[i + 1..], "e", &["exclude"]);
        if short_flag(&flags, 'n') || long_flag(&flags, "dry-run") {
            return;
        }
        let Some(base) = dir else {
            self.flag(Danger::GitCleanOutside);
            return;
        };
        let cwd = self.place.cwd.clone();
        let inside = |t: &Target| match t {
            Target::Exact(p) | Target::Entries(p) | Target::Some(p) => within(p, &cwd),
            Target::Unknown => false,
        };
        let outside = if pathspecs.is_empty() {
            !within(&base, &cwd)
        } else {
            pathspecs
                .iter()
                .any(|p| p.text.starts_with(':') || !inside(&paths::target(p, Some(&base))))
        };
        if outside {
            self.flag(Danger::GitCleanOutside);
        }
    }
}

/// `NAME=value`.
fn is_assignment(s: &str) -> bool {
    s.split_once('=').is_some_and(|(n, _)| {
        !n.is_empty()
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !n.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The value of `-x VALUE`, `-xVALUE`, `-abx VALUE`, `--long VALUE` or `--long=VALUE`,
/// anywhere in `args` (`short` may be empty: no short form).
pub(super) fn find_value(args: &[Arg], short: &str, long: &str) -> Option<Arg> {
    let letter = short.strip_prefix('-').filter(|l| l.chars().count() == 1);
    let attached = |a: &Arg, at: usize| {
        let mut out = a.clone();
        out.text = a.text[at..].to_string();
        // The option letters before `at` hold no escapes.
        out.pattern = a.pattern.get(at..).unwrap_or("").to_string();
        out
    };
    for (i, a) in args.iter().enumerate() {
        let t = a.text.as_str();
        if t == "--" {
            return None;
        }
        if a.dynamic {
            continue;
        }
        if t == long {
            return args.get(i + 1).cloned();
        }
        if t.strip_prefix(long).is_some_and(|v| v.starts_with('=')) {
            return Some(attached(a, long.len() + 1));
        }
        let Some(cluster) = t.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
            continue;
        };
        // Letters before it are options without a value.
        if let Some(k) = letter.and_then(|l| cluster.find(l))
            && cluster[..k].chars().all(|c| c.is_ascii_alphabetic())
        {
            return match cluster.len() == k + 1 {
                true => args.get(i + 1).cloned(),
                false => Some(attached(a, 1 + k + 1)),
            };
        }
    }
    None
}

/// A mode that makes files writable by everyone: `777`, `0666`, `o+w`, `a=rwx`.
fn world_writable(mode: &str) -> bool {
    if !mode.is_empty() && mode.chars().all(|c| c.is_digit(8)) {
        return u32::from_str_radix(mode, 8).is_ok_and(|m| m & 0o002 != 0);
    }
    mode.split(',').any(|clause| {
        let who_end = clause.find(['+', '=']).unwrap_or(clause.len());
        let (who, perms) = clause.split_at(who_end);
        (who.contains('o') || who.contains('a')) && perms.contains('w')
    })
}
