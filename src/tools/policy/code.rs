//! What an interpreter's inline code (`python3 -c`, `perl -e`, a here-document fed to `ruby`)
//! does that the policy judges: the library calls that remove a whole tree, each with the path
//! it is given when that is a plain string, and the shell commands it runs when they are one.
//! The rest of the code is not judged.

/// Calls that delete a tree: the name, and whether it only recurses when told `recursive`.
const TREE_DELETES: &[(&str, bool)] = &[
    // Python `shutil.rmtree`, Perl `File::Path::rmtree`
    ("rmtree", false),
    // Perl `File::Path::remove_tree`
    ("remove_tree", false),
    // Ruby `FileUtils`
    ("rm_rf", false),
    ("rm_r", false),
    ("remove_dir", false),
    ("remove_entry", false),
    ("remove_entry_secure", false),
    ("rmdir_r", false),
    // Node `fs`
    ("rmSync", true),
    ("rmdirSync", true),
    ("rm", true),
    ("rmdir", true),
];

/// Calls that run a shell command line (`os.system`, `subprocess.run(…, shell=True)`, Perl's
/// and Ruby's `system`, PHP's `shell_exec`, Node's `execSync`).
const SHELL_CALLS: &[&str] = &[
    "system",
    "popen",
    "getoutput",
    "getstatusoutput",
    "check_output",
    "check_call",
    "call",
    "run",
    "Popen",
    "execSync",
    "shell_exec",
    "passthru",
];

/// What a piece of inline code does.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Effects {
    /// The path of each tree-deleting call: `Some(path)` when it is a string literal, `None`
    /// when it is only known when the code runs.
    pub(crate) tree_deletes: Vec<Option<String>>,
    /// Shell command lines given as string literals.
    pub(crate) shell_commands: Vec<String>,
}

pub(crate) fn effects(code: &str) -> Effects {
    let mut out = Effects::default();
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if matches!(b[i], b'\'' | b'"' | b'`') {
            // A string's words are data.
            i += 1 + skip_string(&b[i + 1..], b[i]);
            continue;
        }
        if !is_ident(b[i]) || (i > 0 && is_ident(b[i - 1])) {
            i += 1;
            continue;
        }
        let end = (i..b.len()).find(|&j| !is_ident(b[j])).unwrap_or(b.len());
        let name = &code[i..end];
        i = end;
        let deletes = TREE_DELETES.iter().find(|(n, _)| *n == name);
        let shell = SHELL_CALLS.contains(&name);
        if deletes.is_none() && !shell {
            continue;
        }
        let Some(call) = call_at(code, end) else {
            continue;
        };
        match deletes {
            Some((_, true)) if !call.args.contains("recursive") => {}
            Some(_) => out.tree_deletes.push(call.first_literal),
            None => out.shell_commands.extend(call.first_literal),
        }
    }
    out
}

/// The length of a string's rest up to and with its closing `quote` (all of it if unclosed).
fn skip_string(rest: &[u8], quote: u8) -> usize {
    let mut k = 0;
    while k < rest.len() {
        match rest[k] {
            b'\\' => k += 2,
            c if c == quote => return k + 1,
            _ => k += 1,
        }
    }
    rest.len()
}

/// Words after a name that make it no call.
const KEYWORDS: &[&str] = &[
    "as", "if", "else", "and", "or", "not", "in", "is", "for", "unless", "then", "do", "end",
];

struct Call<'a> {
    /// The call's arguments as written (up to its closing parenthesis or the line's end).
    args: &'a str,
    first_literal: Option<String>,
}

/// The call whose name ends at `at`: `name(…)`, or Perl's and Ruby's `name '…'`, `name $x`.
fn call_at(code: &str, at: usize) -> Option<Call<'_>> {
    let rest = &code[at..];
    let after_blank = rest.trim_start_matches([' ', '\t']);
    let blank = after_blank.len() < rest.len();
    let next_word = after_blank
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("");
    // `rmtree $dir`, `FileUtils.rm_rf Dir.home`; not `import rmtree as r`, `rmtree if …`.
    let bare_argument = blank
        && (after_blank.starts_with(['$', '@'])
            || (after_blank.starts_with(|c: char| c.is_alphabetic() || c == '_')
                && !KEYWORDS.contains(&next_word)));
    let (parenthesised, args_start) = match after_blank.strip_prefix('(') {
        Some(inner) => (true, inner),
        None if after_blank.starts_with(['\'', '"']) || bare_argument => (false, after_blank),
        None => return None,
    };
    let args_end = if parenthesised {
        closing_paren(args_start)
    } else {
        args_start.find(['\n', ';']).unwrap_or(args_start.len())
    };
    let args = &args_start[..args_end];
    Some(Call {
        args,
        first_literal: string_literal(args.trim_start()),
    })
}

/// Where the parenthesis opened just before `s` closes (the end of `s` if it does not).
fn closing_paren(s: &str) -> usize {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (k, ch) in s.char_indices() {
        match (quote, ch) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(ch),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') if depth == 0 => return k,
            (None, ')' | ']' | '}') => depth -= 1,
            _ => {}
        }
    }
    s.len()
}

/// The string `arg` starts with, when the whole argument is that one plain literal (`'/'`,
/// `r"/tmp"`): no interpolation, no concatenation.
fn string_literal(arg: &str) -> Option<String> {
    let body = arg.trim_start_matches(['r', 'R', 'b', 'B', 'u', 'U']);
    let raw = body.len() < arg.len() && arg[..arg.len() - body.len()].contains(['r', 'R']);
    let quote = body.chars().next().filter(|c| matches!(c, '\'' | '"'))?;
    let mut text = String::new();
    let mut chars = body[1..].char_indices();
    let close = loop {
        let (k, ch) = chars.next()?;
        match ch {
            '\\' if !raw => text.push(chars.next()?.1),
            c if c == quote => break k + 2,
            // A variable (Perl's and Ruby's double quotes interpolate; a shell's `$X` that
            // reached the code unexpanded).
            '$' => return None,
            '@' | '#' if quote == '"' => return None,
            c => text.push(c),
        }
    };
    let after = body[close..].trim_start();
    (after.is_empty() || after.starts_with([',', ')', ';', '\n'])).then_some(text)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(code: &str) -> Vec<Option<String>> {
        effects(code).tree_deletes
    }

    #[test]
    fn tree_deleting_calls_and_their_paths() {
        let root = vec![Some("/".to_string())];
        assert_eq!(one("import shutil; shutil.rmtree('/')"), root);
        assert_eq!(one("import shutil\nshutil.rmtree( \"/\" , True)"), root);
        assert_eq!(one("from shutil import rmtree as r; rmtree(r'/')"), root);
        assert_eq!(one("use File::Path; rmtree(\"/\")"), root);
        assert_eq!(
            one("use File::Path qw(remove_tree); remove_tree '/';"),
            root
        );
        assert_eq!(one("require 'fileutils'; FileUtils.rm_rf('/')"), root);
        assert_eq!(one("FileUtils.rm_r '/'"), root);
        assert_eq!(
            one("require('fs').rmSync('/', { recursive: true, force: true })"),
            root
        );
        assert_eq!(one("fs.rm('/', {recursive: true}, () => {})"), root);
        assert_eq!(one("shutil.rmtree('build')"), vec![Some("build".into())]);
        // only known when the code runs
        for code in [
            "shutil.rmtree(path)",
            "shutil.rmtree(os.path.expanduser('~'))",
            "shutil.rmtree('/' + name)",
            "shutil.rmtree(f'/{x}')",
            "rmtree(\"$ENV{HOME}\")",
            "FileUtils.rm_rf(\"#{dir}\")",
            "FileUtils.rm_rf Dir.home",
            "rmtree $dir;",
        ] {
            assert_eq!(one(code), vec![None], "{code}");
        }
    }

    #[test]
    fn shell_command_lines_given_as_literals() {
        let shell = |code: &str| effects(code).shell_commands;
        assert_eq!(shell("import os; os.system('rm -rf /')"), ["rm -rf /"]);
        assert_eq!(
            shell("subprocess.run(\"make clean\", shell=True)"),
            ["make clean"]
        );
        assert_eq!(shell("system \"reboot\";"), ["reboot"]);
        assert_eq!(shell("require('child_process').execSync('ls')"), ["ls"]);
        // only known when it runs: not judged
        assert!(shell("os.system(cmd)").is_empty());
        assert!(shell("os.system(f'rm -rf {d}')").is_empty());
        assert!(shell("asyncio.run(main())").is_empty());
    }

    #[test]
    fn look_alikes_are_not_calls() {
        for code in [
            "print('rmtree')",
            "my_rmtree('/')",
            "shutil.rmtree",
            "fs.rmSync('x.txt')",
            "fs.rm('out.log', () => {})",
            "os.remove('/tmp/x')",
            "x = rm_rf_count + 1",
        ] {
            assert_eq!(one(code), Vec::<Option<String>>::new(), "{code}");
        }
    }
}
