//! The walk over what bash would run: every simple command of a parsed script, in the order it
//! would run, with the working directory it would have and what its standard input carries.

use std::collections::HashMap;
use std::io::Cursor;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use brush_parser::ast;
use brush_parser::{Parser, ParserOptions};

use super::fetch::Fetched;
use super::words::Arg;
use super::{Danger, Findings, Place};

/// Longer commands ask: parsing costs time and memory in proportion (64 KiB: ~10 MB, ~40 ms).
pub(crate) const MAX_BYTES: usize = 64 * 1024;
/// Deeper nesting asks: the parser recurses (and needs ~10 KB of stack a level).
pub(crate) const MAX_NESTING: usize = 40;
/// `bash -c` in `bash -c`, substitution in substitution…: deeper asks.
pub(crate) const MAX_SCRIPT_DEPTH: usize = 8;
/// Bytes parsed in all, nested scripts included (each nested script is parsed again).
const PARSE_BUDGET: usize = 4 * MAX_BYTES;
/// Words expanded in all (brace expansion multiplies them): more asks.
const WORD_BUDGET: usize = 32 * 1024;

/// A variable the command assigns: known only if it gets one literal value.
#[derive(Debug, Clone)]
pub(crate) enum Var {
    Literal(String),
    Unknown,
}

/// What a command reads on its standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stdin {
    /// Something the policy cannot see (a file, another command's output, the tool's stdin).
    Unknown,
    /// This text (a here-document, `echo … |`).
    Text(String),
    /// A download's output.
    Download,
    /// Text only known when it runs: a substitution's output, decoded or transformed text.
    Hidden,
}

pub(crate) struct Walker<'p> {
    pub(crate) place: &'p Place,
    pub(crate) findings: Findings,
    /// First pass: only learn the variables.
    collecting: bool,
    vars: HashMap<String, Var>,
    /// A `source` may set any variable: those the command sets are not known.
    opaque: bool,
    /// Where relative paths resolve now (`cd` moves it; `None`: not known here).
    pub(crate) cwd: Option<PathBuf>,
    depth: usize,
    budget: usize,
    /// Words still to expand before the command is too complex to judge.
    pub(crate) words_left: usize,
    /// Download commands seen so far (a pipeline compares before and after each element).
    pub(crate) downloads: usize,
    /// Commands seen so far whose output is text only known when it runs (decoders, or a
    /// transform of text the policy saw).
    pub(crate) hidden_outputs: usize,
    /// Files holding a download (a later command that runs one runs the download).
    pub(crate) fetched: Vec<Fetched>,
    pub(crate) stdin: Stdin,
    /// Text the current pipeline element prints, when it is known (`echo`, `printf`, `cat`).
    pub(crate) out: Option<String>,
    /// The function whose body is walked (its own name there makes a fork bomb).
    function: Option<String>,
    in_pipe: bool,
    in_async: bool,
}

/// Everything the command would do that the policy names.
pub(crate) fn findings(command: &str, place: &Place) -> Findings {
    let program = match parse(command) {
        Ok(p) => p,
        Err(d) => {
            let mut f = Findings::default();
            f.add(d);
            return f;
        }
    };
    let mut learn = Walker::new(place, true, HashMap::new());
    learn.program(&program);
    let mut judge = Walker::new(place, false, learn.vars);
    judge.opaque = learn.opaque;
    judge.program(&program);
    judge.findings
}

/// Parse within bounds; a parser panic is "cannot parse", never the gateway's.
fn parse(src: &str) -> Result<ast::Program, Danger> {
    if src.len() > MAX_BYTES || nesting(src) > MAX_NESTING {
        return Err(Danger::TooComplex);
    }
    let options = ParserOptions::default();
    let parsed = catch_unwind(AssertUnwindSafe(|| {
        Parser::new(Cursor::new(src), &options).parse_program()
    }));
    match parsed {
        Ok(Ok(p)) => Ok(p),
        _ => Err(Danger::Unparsed),
    }
}

impl<'p> Walker<'p> {
    fn new(place: &'p Place, collecting: bool, vars: HashMap<String, Var>) -> Self {
        Walker {
            place,
            findings: Findings::default(),
            collecting,
            vars,
            opaque: false,
            cwd: Some(place.cwd.clone()),
            depth: 0,
            budget: PARSE_BUDGET,
            words_left: WORD_BUDGET,
            downloads: 0,
            hidden_outputs: 0,
            fetched: Vec::new(),
            stdin: Stdin::Unknown,
            out: None,
            function: None,
            in_pipe: false,
            in_async: false,
        }
    }

    pub(crate) fn flag(&mut self, d: Danger) {
        if !self.collecting {
            self.findings.add(d);
        }
    }

    fn done(&self) -> bool {
        self.findings.finished()
    }

    // ---- variables ----

    pub(crate) fn assign(&mut self, name: &str, value: &Arg) {
        if !self.collecting {
            return;
        }
        let new = if value.dynamic {
            Var::Unknown
        } else {
            Var::Literal(value.text.clone())
        };
        let merged = match self.vars.get(name) {
            None => new,
            Some(Var::Literal(old)) if matches!(&new, Var::Literal(v) if v == old) => new,
            Some(_) => Var::Unknown,
        };
        self.vars.insert(name.to_string(), merged);
    }

    /// Every variable the command sets becomes unknown (`source` may set any of them).
    pub(crate) fn vars_unknown(&mut self) {
        if self.collecting {
            self.opaque = true;
        }
    }

    /// A variable's value when the policy knows it.
    pub(crate) fn lookup(&self, name: &str) -> Option<String> {
        if let Some(v) = self.vars.get(name) {
            return match (self.collecting || self.opaque, v) {
                (false, Var::Literal(s)) => Some(s.clone()),
                _ => None,
            };
        }
        match name {
            "HOME" => self.home().map(|h| h.to_string_lossy().into_owned()),
            "PWD" => self.cwd.as_ref().map(|c| c.to_string_lossy().into_owned()),
            _ => None,
        }
    }

    /// `~`: `$HOME` as this command sets it, else the gateway's.
    pub(crate) fn home(&self) -> Option<PathBuf> {
        match self.vars.get("HOME") {
            Some(Var::Literal(h)) if !self.collecting && h.starts_with('/') => {
                Some(super::paths::normalize(std::path::Path::new(h)))
            }
            Some(_) => None,
            None => self.place.home.clone(),
        }
    }

    // ---- scripts ----

    /// A nested script (`bash -c`, `eval`, a substitution's command): parsed and walked in a
    /// child's scope.
    pub(crate) fn script(&mut self, src: &str) {
        if self.done() {
            return;
        }
        if self.depth >= MAX_SCRIPT_DEPTH || src.len() > self.budget {
            self.flag(Danger::TooComplex);
            return;
        }
        self.budget -= src.len();
        match parse(src) {
            Err(d) => self.flag(d),
            Ok(program) => {
                self.depth += 1;
                self.scoped(|w| w.program(&program));
                self.depth -= 1;
            }
        }
    }

    /// Run `f` as a child process would: `cd` inside does not move the caller, and a nested
    /// pipeline's state does not leak out.
    pub(crate) fn scoped(&mut self, f: impl FnOnce(&mut Self)) {
        let cwd = self.cwd.clone();
        let stdin = self.stdin.clone();
        let out = self.out.take();
        let (in_pipe, in_async) = (self.in_pipe, self.in_async);
        f(self);
        self.cwd = cwd;
        self.stdin = stdin;
        self.out = out;
        self.in_pipe = in_pipe;
        self.in_async = in_async;
    }

    fn program(&mut self, p: &ast::Program) {
        for list in &p.complete_commands {
            self.list(list);
        }
    }

    fn list(&mut self, l: &ast::CompoundList) {
        for item in &l.0 {
            if self.done() {
                return;
            }
            let saved = self.in_async;
            self.in_async |= matches!(item.1, ast::SeparatorOperator::Async);
            self.and_or(&item.0);
            self.in_async = saved;
        }
    }

    fn and_or(&mut self, a: &ast::AndOrList) {
        self.pipeline(&a.first);
        for more in &a.additional {
            let (ast::AndOr::And(p) | ast::AndOr::Or(p)) = more;
            self.pipeline(p);
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline) {
        if let [one] = p.seq.as_slice() {
            self.command(one);
            return;
        }
        let first_stdin = self.stdin.clone();
        let saved_pipe = self.in_pipe;
        let mut upstream_download = false;
        let mut upstream_hidden = false;
        let mut upstream_out: Option<String> = None;
        for (i, c) in p.seq.iter().enumerate() {
            let stdin = match (i, upstream_download, upstream_hidden, upstream_out.take()) {
                (0, ..) => first_stdin.clone(),
                (_, true, _, _) => Stdin::Download,
                (_, false, true, _) => Stdin::Hidden,
                (_, false, false, Some(text)) => Stdin::Text(text),
                (_, false, false, None) => Stdin::Unknown,
            };
            let before = self.downloads;
            let hidden_before = self.hidden_outputs;
            // Each element is a subshell of its own.
            self.scoped(|w| {
                w.in_pipe = true;
                w.stdin = stdin;
                w.command(c);
                upstream_out = w.out.take();
            });
            upstream_download |= self.downloads > before;
            upstream_hidden |= self.hidden_outputs > hidden_before;
        }
        self.in_pipe = saved_pipe;
    }

    fn command(&mut self, c: &ast::Command) {
        if self.done() {
            return;
        }
        match c {
            ast::Command::Simple(s) => self.simple(s),
            ast::Command::Compound(cc, redirects) => {
                let mut outputs = Vec::new();
                for r in redirects.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r, &mut outputs);
                }
                let before = self.downloads;
                self.compound(cc);
                self.carry_download(before, &outputs);
            }
            ast::Command::Function(f) => {
                let name = f.fname.value.clone();
                let saved = self.function.replace(name);
                self.scoped(|w| {
                    w.in_pipe = false;
                    w.in_async = false;
                    w.compound(&f.body.0);
                    for r in f.body.1.iter().flat_map(|r| r.0.iter()) {
                        w.redirect(r, &mut Vec::new());
                    }
                });
                self.function = saved;
            }
            ast::Command::ExtendedTest(t, redirects) => {
                for r in redirects.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r, &mut Vec::new());
                }
                self.test_expr(&t.expr);
            }
        }
    }

    fn test_expr(&mut self, e: &ast::ExtendedTestExpr) {
        use ast::ExtendedTestExpr as E;
        match e {
            E::And(a, b) | E::Or(a, b) => {
                self.test_expr(a);
                self.test_expr(b);
            }
            E::Not(a) | E::Parenthesized(a) => self.test_expr(a),
            E::UnaryTest(_, w) => {
                self.word(&w.value);
            }
            E::BinaryTest(_, a, b) => {
                self.word(&a.value);
                self.word(&b.value);
            }
        }
    }

    fn compound(&mut self, cc: &ast::CompoundCommand) {
        use ast::CompoundCommand as C;
        match cc {
            C::Arithmetic(a) => self.arithmetic(&a.expr.value),
            C::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value);
                }
                self.list(&f.body.list);
            }
            C::BraceGroup(b) => self.list(&b.list),
            C::Subshell(s) => self.scoped(|w| w.list(&s.list)),
            C::ForClause(f) => {
                for v in f.values.iter().flatten() {
                    self.word(&v.value);
                }
                self.assign(&f.variable_name, &Arg::unknown());
                self.list(&f.body.list);
            }
            C::CaseClause(c) => {
                self.word(&c.value.value);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value);
                    }
                    if let Some(l) = &item.cmd {
                        self.list(l);
                    }
                }
            }
            C::IfClause(i) => {
                self.list(&i.condition);
                self.list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c);
                    }
                    self.list(&e.body);
                }
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.list(&w.0);
                self.list(&w.1.list);
            }
            C::Coprocess(c) => self.scoped(|w| w.command(&c.body)),
        }
    }

    /// `$(( … ))` and `(( … ))` run the substitutions they hold.
    fn arithmetic(&mut self, expr: &str) {
        if expr.contains("$(") || expr.contains('`') {
            self.word(expr);
        }
    }

    fn simple(&mut self, s: &ast::SimpleCommand) {
        let mut args: Vec<Arg> = Vec::new();
        let mut stdin = self.stdin.clone();
        let mut outputs: Vec<Arg> = Vec::new();
        for item in s.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, true, &mut args, &mut stdin, &mut outputs);
        }
        if let Some(name) = &s.word_or_name {
            args.extend(self.word(&name.value));
        }
        for item in s.suffix.iter().flat_map(|x| x.0.iter()) {
            self.item(item, false, &mut args, &mut stdin, &mut outputs);
        }
        if self.done() {
            return;
        }
        let before = self.downloads;
        if stdin == Stdin::Download {
            // What reads a download passes it on.
            self.downloads += 1;
        }
        self.exec(args, stdin);
        self.carry_download(before, &outputs);
    }

    /// The files a command's standard output went to hold a download if it downloaded.
    fn carry_download(&mut self, downloads_before: usize, outputs: &[Arg]) {
        if self.downloads > downloads_before {
            for a in outputs {
                self.fetch(a);
            }
        }
    }

    fn item(
        &mut self,
        item: &ast::CommandPrefixOrSuffixItem,
        in_prefix: bool,
        args: &mut Vec<Arg>,
        stdin: &mut Stdin,
        outputs: &mut Vec<Arg>,
    ) {
        use ast::CommandPrefixOrSuffixItem as Item;
        match item {
            Item::Word(w) => args.extend(self.word(&w.value)),
            Item::IoRedirect(r) => {
                if let Some(new) = self.redirect(r, outputs) {
                    *stdin = new;
                }
            }
            Item::AssignmentWord(a, w) => {
                self.assignment(a);
                if !in_prefix {
                    // `export X=…`, `local X=…`: also an argument of the command.
                    args.extend(self.word(&w.value));
                }
            }
            Item::ProcessSubstitution(_, sub) => args.push(self.substitution(&sub.list)),
        }
    }

    fn assignment(&mut self, a: &ast::Assignment) {
        let name = match &a.name {
            ast::AssignmentName::VariableName(n) => n.clone(),
            ast::AssignmentName::ArrayElementName(n, _) => n.clone(),
        };
        match &a.value {
            ast::AssignmentValue::Scalar(w) => {
                let values = self.word(&w.value);
                let value = match values.as_slice() {
                    [one] if !a.append => one.clone(),
                    _ => Arg::unknown(),
                };
                self.assign(&name, &value);
            }
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(&k.value);
                    }
                    self.word(&v.value);
                }
                self.assign(&name, &Arg::unknown());
            }
        }
    }

    /// The commands of a process or command substitution, walked as a child; the argument it
    /// becomes (a `/dev/fd` path or the command's output) is unknown.
    pub(crate) fn substitution(&mut self, list: &ast::CompoundList) -> Arg {
        let before = self.downloads;
        self.scoped(|w| {
            w.stdin = Stdin::Unknown;
            w.in_pipe = false;
            w.list(list);
        });
        Arg::substituted(self.downloads > before)
    }

    /// Judge a redirection; returns the standard input it gives the command, if it sets one,
    /// and adds the files its standard output goes to to `outputs`.
    fn redirect(&mut self, r: &ast::IoRedirect, outputs: &mut Vec<Arg>) -> Option<Stdin> {
        use ast::IoFileRedirectKind as K;
        use ast::IoFileRedirectTarget as T;
        let is_stdin = |fd: &Option<ast::IoFd>| fd.is_none_or(|f| f == 0);
        let is_stdout = |fd: &Option<ast::IoFd>| fd.is_none_or(|f| f == 1);
        match r {
            ast::IoRedirect::File(fd, kind, target) => match (kind, target) {
                (K::Read, T::Filename(w)) => {
                    let from = self.word(&w.value);
                    let fetched = from.iter().any(|a| self.is_fetched(a));
                    is_stdin(fd).then_some(if fetched {
                        Stdin::Download
                    } else {
                        Stdin::Unknown
                    })
                }
                (K::Write | K::Append | K::Clobber | K::ReadAndWrite, T::Filename(w)) => {
                    for a in self.word(&w.value) {
                        self.write_target(&a, Danger::WriteBlockDevice);
                        if is_stdout(fd) {
                            outputs.push(a);
                        }
                    }
                    None
                }
                (K::DuplicateOutput, T::Filename(w) | T::Duplicate(w)) => {
                    // `>&file` writes to file; `>&2`, `>&-` do not.
                    for a in self.word(&w.value) {
                        let fdlike = a.text == "-" || a.text.bytes().all(|b| b.is_ascii_digit());
                        if !fdlike {
                            self.write_target(&a, Danger::WriteBlockDevice);
                            outputs.push(a);
                        }
                    }
                    None
                }
                (_, T::Filename(w) | T::Duplicate(w)) => {
                    self.word(&w.value);
                    None
                }
                (_, T::Fd(_)) => None,
                (kind, T::ProcessSubstitution(_, sub)) => {
                    let a = self.substitution(&sub.list);
                    (matches!(kind, K::Read) && is_stdin(fd)).then(|| stdin_of(&a))
                }
            },
            ast::IoRedirect::HereDocument(fd, doc) => {
                let body = if doc.requires_expansion {
                    self.heredoc(&doc.doc.value)
                } else {
                    Arg::literal(&doc.doc.value)
                };
                is_stdin(fd).then(|| stdin_of(&body))
            }
            ast::IoRedirect::HereString(fd, w) => {
                let args = self.word(&w.value);
                let joined = Arg::join(&args);
                is_stdin(fd).then(|| stdin_of(&joined))
            }
            ast::IoRedirect::OutputAndError(w, _) => {
                for a in self.word(&w.value) {
                    self.write_target(&a, Danger::WriteBlockDevice);
                    outputs.push(a);
                }
                None
            }
        }
    }

    /// Whether a function's own name, called in a pipeline or in the background from its own
    /// body, makes it a fork bomb.
    pub(crate) fn fork_bomb(&mut self, name: &str) {
        if self.function.as_deref() == Some(name) && (self.in_pipe || self.in_async) {
            self.flag(Danger::ForkBomb);
        }
    }
}

/// What a shell reading `arg` as its input would run.
pub(crate) fn stdin_of(arg: &Arg) -> Stdin {
    if arg.download {
        Stdin::Download
    } else if arg.substituted {
        Stdin::Hidden
    } else {
        Stdin::Text(arg.script.clone())
    }
}

/// How deeply `src` nests, counted so as never to be below what the parser will recurse: every
/// opener counts, a closer only where bash would close (a `}`, `fi`, `done` or `esac` after a
/// `;`, `&` or newline); quotes, comments and here-document bodies are skipped.
pub(crate) fn nesting(src: &str) -> usize {
    #[derive(Clone, Copy, PartialEq)]
    enum Open {
        Paren,
        WordBrace,
        GroupBrace,
        Keyword,
        Double,
        Backtick,
    }
    let b = src.as_bytes();
    let mut stack: Vec<Open> = Vec::new();
    let mut max = 0usize;
    let mut heredocs: Vec<(Vec<u8>, bool)> = Vec::new();
    // The last byte outside blanks, for "where bash would close".
    let mut last = b'\n';
    let mut i = 0;
    let word_start = |i: usize| {
        i == 0
            || matches!(
                b[i - 1],
                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')'
            )
    };
    while i < b.len() {
        let c = b[i];
        let top = stack.last().copied();
        if top == Some(Open::Double) {
            match c {
                b'\\' => i += 1,
                b'"' => {
                    stack.pop();
                }
                b'$' if b.get(i + 1) == Some(&b'(') => {
                    stack.push(Open::Paren);
                    i += 1;
                }
                b'$' if b.get(i + 1) == Some(&b'{') => {
                    stack.push(Open::WordBrace);
                    i += 1;
                }
                b'`' => stack.push(Open::Backtick),
                _ => {}
            }
            max = max.max(stack.len());
            i += 1;
            continue;
        }
        match c {
            b'\\' => i += 1,
            b'\'' => {
                // `$'…'` honours backslashes; plain '…' does not.
                let ansi = i > 0 && b[i - 1] == b'$';
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    if ansi && b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'"' => stack.push(Open::Double),
            b'`' => {
                if top == Some(Open::Backtick) {
                    stack.pop();
                } else {
                    stack.push(Open::Backtick);
                }
            }
            b'#' if word_start(i) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' => stack.push(Open::Paren),
            b')' if top == Some(Open::Paren) => {
                stack.pop();
            }
            // A group opens with `{ ` at a word's start; any other `{` is a word's own (`${x}`,
            // `{a,b}`) and closes at the next `}`.
            b'{' if word_start(i) && matches!(b.get(i + 1), Some(b' ' | b'\t' | b'\n')) => {
                stack.push(Open::GroupBrace)
            }
            b'{' => stack.push(Open::WordBrace),
            b'}' => match top {
                Some(Open::WordBrace) => {
                    stack.pop();
                }
                Some(Open::GroupBrace) if matches!(last, b';' | b'&' | b'\n') => {
                    stack.pop();
                }
                _ => {}
            },
            b'<' if b.get(i + 1) == Some(&b'<') && b.get(i + 2) != Some(&b'<') => {
                i += 2;
                let strip = b.get(i) == Some(&b'-');
                if strip {
                    i += 1;
                }
                while i < b.len() && matches!(b[i], b' ' | b'\t') {
                    i += 1;
                }
                let mut delim = Vec::new();
                while i < b.len()
                    && !matches!(
                        b[i],
                        b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')'
                    )
                {
                    if !matches!(b[i], b'\'' | b'"' | b'\\') {
                        delim.push(b[i]);
                    }
                    i += 1;
                }
                heredocs.push((delim, strip));
                continue;
            }
            b'\n' if !heredocs.is_empty() => {
                // Skip each pending here-document's body, up to its delimiter line.
                i += 1;
                for (delim, strip) in std::mem::take(&mut heredocs) {
                    while i < b.len() {
                        let end = b[i..]
                            .iter()
                            .position(|&x| x == b'\n')
                            .map_or(b.len(), |p| i + p);
                        let mut line = &b[i..end];
                        if strip {
                            while let [b'\t', rest @ ..] = line {
                                line = rest;
                            }
                        }
                        i = end + 1;
                        if line == delim.as_slice() {
                            break;
                        }
                    }
                }
                last = b'\n';
                continue;
            }
            c if c.is_ascii_lowercase() && word_start(i) => {
                let end = b[i..]
                    .iter()
                    .position(|x| !x.is_ascii_lowercase())
                    .map_or(b.len(), |p| i + p);
                match &b[i..end] {
                    b"if" | b"case" | b"for" | b"while" | b"until" | b"select" => {
                        stack.push(Open::Keyword)
                    }
                    b"fi" | b"esac" | b"done"
                        if top == Some(Open::Keyword) && matches!(last, b';' | b'&' | b'\n') =>
                    {
                        stack.pop();
                    }
                    _ => {}
                }
                max = max.max(stack.len());
                last = b[end - 1];
                i = end;
                continue;
            }
            _ => {}
        }
        if !matches!(c, b' ' | b'\t') {
            last = c;
        }
        max = max.max(stack.len());
        i += 1;
    }
    max
}
