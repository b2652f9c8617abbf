//! The gateway's secrets kept from the commands it runs.
//!
//! A command inherits the gateway's environment without what looks secret — by the variable's
//! name (`*_TOKEN`, `DB_PASS`, `SENTRY_DSN`, `BW_SESSION`…) or by its value (a URL with a
//! password in it, a known token format) — except the names the user passes through
//! (`terminal.env_passthrough`, given here as data). And the gateway's own process is made
//! unreadable to a command running as the same user: not dumpable (so `/proc/PID/environ`,
//! `/proc/PID/mem` and ptrace are refused), and secrets overwritten in its command line, which
//! `/proc/PID/cmdline` shows to anyone.

use std::ffi::OsString;
use std::ops::Range;
use std::sync::OnceLock;

use regex::Regex;

/// A name containing one of these (case-insensitively) is a secret's.
const NAME_MARKERS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "COOKIE",
    "SESSION_ID",
    "PRIVATE",
    "JWT",
    "WEBHOOK",
];

/// A name with one of these as a whole `_`-separated word is a secret's (`DB_PASS`,
/// `MYSQL_PWD`, `GH_PAT`, `STRIPE_SK`, `SENTRY_DSN`); as substrings they would catch `PATH`.
const NAME_WORDS: &[&str] = &["PASS", "PWD", "CRED", "CREDS", "DSN", "PAT", "SK"];

/// Whether a variable of this name holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if upper == "PWD" {
        return false; // the working directory
    }
    let words: Vec<&str> = upper.split(['_', '-', '.']).collect();
    NAME_MARKERS.iter().any(|m| upper.contains(m))
        || upper.replace("AUTHOR", "").contains("AUTH")
        || words.iter().any(|w| NAME_WORDS.contains(w))
        // A password manager's unlocked session: `BW_SESSION`, `OP_SESSION_<account>`.
        || words.last() == Some(&"SESSION")
        || upper.starts_with("OP_SESSION_")
}

/// A kind of secret inside a value: text any match contains (checked first, so that a value
/// without it costs no regular expression, and the command line is judged at start without
/// compiling any), the pattern, and whether it is matched against the value lower-cased. The
/// span to hide is the pattern's first group when there is one.
struct ValueSecret {
    clues: &'static [&'static str],
    pattern: &'static str,
    lowered: bool,
}

const fn secret(clues: &'static [&'static str], pattern: &'static str) -> ValueSecret {
    ValueSecret {
        clues,
        pattern,
        lowered: false,
    }
}

const VALUE_SECRETS: &[ValueSecret] = &[
    // user info with a password in a URL: postgres://app:pw@db, http://u:p@proxy
    secret(
        &["://"],
        r"[A-Za-z][A-Za-z0-9+.\-]*://([^/?#@\s:]*:[^/?#@\s]+)@",
    ),
    // a long token standing as the user: https://<key>@sentry.example
    secret(
        &["://"],
        r"[A-Za-z][A-Za-z0-9+.\-]*://([A-Za-z0-9_\-]{20,})@",
    ),
    secret(
        &["k_live_", "k_test_"],
        r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{10,}",
    ),
    secret(&["sk-"], r"\bsk-[A-Za-z0-9_\-]{20,}"),
    secret(&["gh"], r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    secret(&["github_pat_"], r"\bgithub_pat_[A-Za-z0-9_]{30,}"),
    secret(&["glpat-"], r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    secret(&["xox"], r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    secret(&["AKIA", "ASIA"], r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    secret(&["AIza"], r"\bAIza[0-9A-Za-z_\-]{35}"),
    secret(&["npm_"], r"\bnpm_[A-Za-z0-9]{36}\b"),
    secret(&["hf_"], r"\bhf_[A-Za-z0-9]{30,}"),
    secret(&["pypi-"], r"\bpypi-[A-Za-z0-9_\-]{50,}"),
    // a JSON Web Token: header.payload.signature, both first parts JSON in base64url
    secret(
        &["eyJ"],
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
    ),
    secret(&["PRIVATE KEY-----"], r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    secret(
        &["hooks.slack.com/services/"],
        r"hooks\.slack\.com/services/[A-Za-z0-9/_\-]+",
    ),
    secret(
        &["discord"],
        r"discord(?:app)?\.com/api/webhooks/[A-Za-z0-9/_\-]+",
    ),
    // key=value connection strings, in any case
    ValueSecret {
        clues: &["="],
        pattern: r"\b(?:password|pwd|accountkey|sharedaccesskey|sharedaccesssignature)=([^;&\s]+)",
        lowered: true,
    },
];

/// Each of [`VALUE_SECRETS`] compiled the first time a value holds one of its clues.
fn compiled(index: usize) -> &'static Regex {
    static COMPILED: [OnceLock<Regex>; VALUE_SECRETS.len()] =
        [const { OnceLock::new() }; VALUE_SECRETS.len()];
    COMPILED[index].get_or_init(|| {
        Regex::new(VALUE_SECRETS[index].pattern).expect("a secret pattern compiles")
    })
}

/// Where secrets sit in `value` (byte ranges, possibly overlapping).
pub fn secret_spans(value: &str) -> Vec<Range<usize>> {
    // Same offsets: ASCII lower-casing changes no byte count.
    let lower = value.to_ascii_lowercase();
    let mut spans = Vec::new();
    for (index, kind) in VALUE_SECRETS.iter().enumerate() {
        let hay = if kind.lowered { &lower } else { value };
        if !kind.clues.iter().any(|clue| hay.contains(clue)) {
            continue;
        }
        spans.extend(
            compiled(index)
                .captures_iter(hay)
                .filter_map(|c| c.get(1).or_else(|| c.get(0)).map(|m| m.range())),
        );
    }
    spans
}

/// Whether a value looks like a secret, whatever its variable's name.
pub fn is_secret_value(value: &str) -> bool {
    !secret_spans(value).is_empty()
}

/// Whether a variable must stay out of commands (and out of the terminal's saved shell
/// state): secret by name or by value, unless named in `passthrough`.
pub fn is_withheld(name: &str, value: &str, passthrough: &[String]) -> bool {
    !passthrough.iter().any(|p| p == name) && (is_secret_name(name) || is_secret_value(value))
}

/// The variables of `vars` a command must not inherit: [`is_withheld`] ones, and those not
/// UTF-8 (so not judgeable) unless named in `passthrough`.
pub fn withheld(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    passthrough: &[String],
) -> Vec<OsString> {
    vars.into_iter()
        .filter(|(name, value)| {
            let Some(name) = name.to_str() else {
                return true;
            };
            match value.to_str() {
                Some(value) => is_withheld(name, value, passthrough),
                None => !passthrough.iter().any(|p| p == name),
            }
        })
        .map(|(name, _)| name)
        .collect()
}

/// Make this process unreadable to others of the same user: `/proc/PID/environ`, `mem`, `maps`,
/// `fd/` and ptrace then need `CAP_SYS_PTRACE`. Forks inherit it; an exec resets it, so every
/// helper this binary re-executes calls it again. Returns whether it took.
pub fn forbid_inspection() -> bool {
    // SAFETY: PR_SET_DUMPABLE takes an integer and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 }
}

/// Overwrite the secrets in this process's command line (`*`), which `/proc/PID/cmdline`
/// shows to every user whatever the dumpable flag. Call once the arguments are parsed (what
/// `std::env::args` returns afterwards is the redacted text) and before any thread starts.
/// Returns how many bytes were hidden.
pub fn redact_command_line() -> usize {
    let Some(area) = argument_area() else {
        return 0;
    };
    let len = area.end - area.start;
    // SAFETY: [arg_start, arg_end) is this process's own argument block, written by the kernel
    // at exec on the initial stack, mapped read-write for the process's life and no Rust
    // allocation; std reads it only through raw pointers when `env::args` is called, and no
    // other thread runs yet. Byte lengths and the NUL separators are kept.
    let bytes = unsafe { std::slice::from_raw_parts_mut(area.start as *mut u8, len) };
    let mut hidden = 0;
    let mut at = 0;
    while at < bytes.len() {
        let end = bytes[at..]
            .iter()
            .position(|b| *b == 0)
            .map_or(bytes.len(), |p| at + p);
        if let Ok(arg) = std::str::from_utf8(&bytes[at..end]) {
            let spans = secret_spans(arg);
            for span in spans {
                for b in &mut bytes[at + span.start..at + span.end] {
                    if *b != b'*' {
                        *b = b'*';
                        hidden += 1;
                    }
                }
            }
        }
        at = end + 1;
    }
    hidden
}

/// `arg_start..arg_end` of this process, from `/proc/self/stat` (fields 48 and 49).
fn argument_area() -> Option<Range<usize>> {
    let stat = crate::util::read_proc("/proc/self/stat")?;
    let after = &stat[stat.rfind(')')? + 1..];
    // The first field after the name is field 3.
    let mut fields = after.split_whitespace().skip(48 - 3);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start != 0 && end > start).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised_by_name() {
        for secret in [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "my_auth",
            "DB_PASS",
            "MYSQL_PWD",
            "SENTRY_DSN",
            "SLACK_WEBHOOK_URL",
            "GH_PAT",
            "BW_SESSION",
            "OP_SESSION_my_team",
            "CI_JOB_JWT",
            "PASSPHRASE",
            "STRIPE_SK",
            "CREDS",
            "JWT_SIGNING",
            "MY_APP_PASS",
            "SSH_AUTH_SOCK",
        ] {
            assert!(is_secret_name(secret), "{secret}");
        }
        for plain in [
            "PATH",
            "HOME",
            "LANG",
            "TERM",
            "HERMES_HOME",
            "PWD",
            "OLDPWD",
            "GIT_AUTHOR_NAME",
            "COMPASS_DIR",
            "XDG_SESSION_TYPE",
            "PATCH_LEVEL",
            "TASK_ID",
        ] {
            assert!(!is_secret_name(plain), "{plain}");
        }
    }

    #[test]
    fn secrets_are_recognised_by_value() {
        for secret in [
            "postgres://app:hunter2@db.internal:5432/app",
            "redis://:hunter2@cache:6379/0",
            "http://alice:pw@proxy.corp:3128",
            "https://u:p@pypi.corp/simple",
            "https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/1",
            "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
            "sk_live_51H8abcdefghijklmnop",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv",
            "xoxb-123456789012-abcdefghijkl",
            "AKIAIOSFODNN7EXAMPLE",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
            "https://hooks.slack.com/services/T000/B000/XXXXXXXX",
            "Server=db;User Id=sa;Password=hunter2;",
            "Bearer sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
        ] {
            assert!(is_secret_value(secret), "{secret}");
        }
        for plain in [
            "/usr/local/bin:/usr/bin:/bin",
            "https://example.com/path?x=1",
            "ssh://git@github.com/owner/repo.git",
            "en_US.UTF-8",
            "xterm-256color",
            "desk-top-settings",
            "rm -rf ./build",
            "",
        ] {
            assert!(!is_secret_value(plain), "{plain}");
        }
    }

    #[test]
    fn every_kind_of_secret_is_found_through_its_clues() {
        // Each pattern finds its sample, and what it finds holds one of its clues, so the clue
        // check skips no value the pattern would match.
        let samples = [
            "postgres://app:hunter2@db",
            "https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/1",
            "rk_test_0123456789ab",
            "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
            "gho_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv",
            "glpat-abcdefghijklmnopqrstu",
            "xoxp-123456789012",
            "ASIAIOSFODNN7EXAMPLE",
            "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234",
            "npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "hf_abcdefghijklmnopqrstuvwxyz0123456",
            "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6MDEy",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig",
            "-----BEGIN RSA PRIVATE KEY-----",
            "https://hooks.slack.com/services/T000/B000/XXXX",
            "https://discordapp.com/api/webhooks/123/abc",
            "AccountKey=abc123;",
        ];
        assert_eq!(samples.len(), VALUE_SECRETS.len());
        for (kind, sample) in VALUE_SECRETS.iter().zip(samples) {
            let hay = if kind.lowered {
                sample.to_ascii_lowercase()
            } else {
                sample.to_string()
            };
            let found = Regex::new(kind.pattern)
                .unwrap()
                .find(&hay)
                .map(|m| m.as_str());
            let found = found.unwrap_or_else(|| panic!("{} misses {sample}", kind.pattern));
            assert!(
                kind.clues.iter().any(|clue| found.contains(clue)),
                "{found} holds no clue of {}",
                kind.pattern
            );
            assert!(is_secret_value(sample), "{sample}");
        }
    }

    #[test]
    fn only_the_secret_part_of_a_value_is_its_span() {
        let v = "--base-url=http://alice:hunter2@127.0.0.1:9/v1";
        let spans = secret_spans(v);
        assert_eq!(spans.len(), 1);
        assert_eq!(&v[spans[0].clone()], "alice:hunter2");
    }

    #[test]
    fn passthrough_names_are_inherited_and_nothing_else_secret() {
        let vars = [
            ("PATH", "/bin"),
            ("GH_PAT", "x"),
            ("MY_APP_PASS", "y"),
            ("DATABASE_URL", "postgres://a:b@h/d"),
            ("NOTE", "plain"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let held = withheld(vars.clone(), &[]);
        assert_eq!(
            held,
            ["GH_PAT", "MY_APP_PASS", "DATABASE_URL"].map(OsString::from)
        );
        let held = withheld(vars, &["MY_APP_PASS".to_string()]);
        assert_eq!(held, ["GH_PAT", "DATABASE_URL"].map(OsString::from));
    }
}
