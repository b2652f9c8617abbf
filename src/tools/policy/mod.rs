//! The dangerous-command policy: a seat belt, not a sandbox. It parses the command the way bash
//! would (`brush-parser`), walks every simple command that would run — in lists, pipelines,
//! subshells, groups, `if`/`for`/`while`/`case`, function bodies, command and process
//! substitutions, `bash -c` strings, `eval`, and behind wrappers such as `sudo`, `env`,
//! `timeout` or `xargs` — and judges each on its resolved words and paths. A command matching a
//! *refusal* never runs; one matching a *danger* runs only after the user approves it. Each
//! danger has a stable key: approving "for the session" or "always" approves that key, not just
//! that exact command. What the policy cannot see (a command it cannot parse, a command name
//! hidden in an expansion, a command too long or too deeply nested) asks: it fails closed.
//! docs/FEATURES.md "Dangerous commands" lists what is covered.

mod code;
mod commands;
mod fetch;
mod paths;
mod walk;
mod words;

#[cfg(test)]
mod corpus;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Needs the user's approval.
    Ask {
        key: &'static str,
        description: &'static str,
    },
    /// Never runs.
    Refuse {
        reason: &'static str,
    },
}

/// Where a command runs: what relative paths, `~` and `$HOME` mean to it.
#[derive(Debug, Clone)]
pub struct Place {
    /// Absolute.
    pub cwd: PathBuf,
    pub home: Option<PathBuf>,
}

/// Classify a shell command that would run in `cwd` (relative: to the gateway's own directory)
/// with the gateway's `$HOME`.
pub fn check(command: &str, cwd: &Path) -> Verdict {
    let cwd = if cwd.is_absolute() {
        cwd.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(cwd)
    };
    let home = crate::util::user_home();
    judge(command, &Place { cwd, home })
}

/// Classify a shell command at `place` (pure: reads nothing but its arguments).
pub fn judge(command: &str, place: &Place) -> Verdict {
    let place = Place {
        cwd: paths::normalize(&place.cwd),
        home: place.home.as_deref().map(paths::normalize),
    };
    walk::findings(command, &place).verdict()
}

/// What the walk found, one per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Danger {
    RmRoot,
    ForkBomb,
    ChmodRoot,
    RmBroad,
    Mkfs,
    DdDevice,
    WriteBlockDevice,
    Chmod777,
    PipeToShell,
    Power,
    OverwriteEtc,
    OverwriteAccount,
    WriteKernel,
    MoveProtected,
    ChownSystem,
    KillAll,
    GitCleanOutside,
    HiddenCommand,
    Unparsed,
    TooComplex,
}

impl Danger {
    fn refused(self) -> bool {
        matches!(self, Danger::RmRoot | Danger::ForkBomb | Danger::ChmodRoot)
    }

    pub(crate) fn key(self) -> &'static str {
        match self {
            Danger::RmRoot => "rm-root",
            Danger::ForkBomb => "fork-bomb",
            Danger::ChmodRoot => "chmod-root",
            Danger::RmBroad => "rm-recursive-broad",
            Danger::Mkfs => "mkfs",
            Danger::DdDevice => "dd-device",
            Danger::WriteBlockDevice => "write-block-device",
            Danger::Chmod777 => "chmod-777-recursive",
            Danger::PipeToShell => "pipe-to-shell",
            Danger::Power => "power",
            Danger::OverwriteEtc => "overwrite-etc",
            Danger::OverwriteAccount => "overwrite-account-file",
            Danger::WriteKernel => "write-kernel-control",
            Danger::MoveProtected => "move-or-shred-protected",
            Danger::ChownSystem => "chmod-recursive-system",
            Danger::KillAll => "kill-all",
            Danger::GitCleanOutside => "git-clean-outside",
            Danger::HiddenCommand => "hidden-command",
            Danger::Unparsed => "unparsed",
            Danger::TooComplex => "too-complex",
        }
    }

    pub(crate) fn description(self) -> &'static str {
        match self {
            Danger::RmRoot => "recursive delete of the root filesystem",
            Danger::ForkBomb => "fork bomb",
            Danger::ChmodRoot => "recursive permission change of the root filesystem",
            Danger::RmBroad => {
                "recursive delete of a system path, home, the working directory or outside it"
            }
            Danger::Mkfs => "format or wipe a filesystem",
            Danger::DdDevice => "dd writing to a device",
            Danger::WriteBlockDevice => "write to a block device",
            Danger::Chmod777 => "recursive chmod 777 (world-writable)",
            Danger::PipeToShell => "run a downloaded script",
            Danger::Power => "shut down or reboot the machine",
            Danger::OverwriteEtc => "write to or delete a file under /etc",
            Danger::OverwriteAccount => {
                "write to or delete an account's keys, logins, shell start-up files or crontab"
            }
            Danger::WriteKernel => {
                "write to the running kernel's controls (/proc/sysrq-trigger, /proc/sys, /sys)"
            }
            Danger::MoveProtected => "move or shred home or a system path",
            Danger::ChownSystem => "recursive permission or owner change of a system path or home",
            Danger::KillAll => "kill every process",
            Danger::GitCleanOutside => "delete untracked files outside the working directory",
            Danger::HiddenCommand => {
                "a command whose words are only known when it runs (an expansion, a substitution, decoded text)"
            }
            Danger::Unparsed => "a command the policy cannot parse",
            Danger::TooComplex => "a command too long or too deeply nested to judge",
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Findings {
    found: BTreeSet<Danger>,
}

impl Findings {
    pub(crate) fn add(&mut self, d: Danger) {
        self.found.insert(d);
    }

    /// A refusal is final, and past "too complex" nothing more is judged: the walk may stop.
    pub(crate) fn finished(&self) -> bool {
        self.found
            .iter()
            .any(|d| d.refused() || *d == Danger::TooComplex)
    }

    fn verdict(&self) -> Verdict {
        if let Some(d) = self.found.iter().find(|d| d.refused()) {
            return Verdict::Refuse {
                reason: d.description(),
            };
        }
        let asks: Vec<Danger> = self.found.iter().copied().collect();
        match asks.as_slice() {
            [] => Verdict::Allow,
            [one] => Verdict::Ask {
                key: one.key(),
                description: one.description(),
            },
            several => {
                // Approving one danger for the session must not approve a command that adds
                // another: several dangers are one key of their own.
                let key = several
                    .iter()
                    .map(|d| d.key())
                    .collect::<Vec<_>>()
                    .join("+");
                let description = several
                    .iter()
                    .map(|d| d.description())
                    .collect::<Vec<_>>()
                    .join("; ");
                Verdict::Ask {
                    key: interned(key),
                    description: interned(description),
                }
            }
        }
    }
}

/// A `'static` copy of `text`, made once: keys and descriptions of combined dangers (finitely
/// many: subsets of the dangers above).
fn interned(text: String) -> &'static str {
    static TEXTS: OnceLock<Mutex<BTreeSet<&'static str>>> = OnceLock::new();
    let mut texts = TEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(t) = texts.get(text.as_str()) {
        return t;
    }
    let t: &'static str = Box::leak(text.into_boxed_str());
    texts.insert(t);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_dangers_ask_under_one_combined_key() {
        let place = Place {
            cwd: "/work/p".into(),
            home: Some("/home/u".into()),
        };
        let v = judge("rm -rf ~; reboot", &place);
        assert_eq!(
            v,
            Verdict::Ask {
                key: "rm-recursive-broad+power",
                description: "recursive delete of a system path, home, the working directory or outside it; shut down or reboot the machine",
            }
        );
        // the same text interned once
        let Verdict::Ask { key, .. } = judge("reboot; rm -rf ~", &place) else {
            panic!()
        };
        let Verdict::Ask { key: again, .. } = v else {
            panic!()
        };
        assert!(std::ptr::eq(key, again));
    }

    fn place() -> Place {
        Place {
            cwd: "/work/p".into(),
            home: Some("/home/u".into()),
        }
    }

    fn name(v: &Verdict) -> &'static str {
        match v {
            Verdict::Allow => "allow",
            Verdict::Ask { key, .. } => key,
            Verdict::Refuse { .. } => "refuse",
        }
    }

    #[test]
    fn a_hostile_megabyte_is_judged_too_complex_at_once() {
        for cmd in [
            "echo aaaaaaaa; ".repeat(70_000),
            "a".repeat(1 << 20),
            format!("echo {}", "\"".repeat(1 << 20)),
        ] {
            assert_eq!(name(&judge(&cmd, &place())), "too-complex");
        }
    }

    #[test]
    fn deep_nesting_is_bounded_below_the_parsers_stack_needs() {
        let deep = walk::MAX_NESTING + 1;
        let shallow = walk::MAX_NESTING / 2;
        let shapes: [fn(usize) -> String; 7] = [
            |n| format!("{}true;{}", "{ ".repeat(n), "} ".repeat(n)),
            |n| format!("{}true{}", "( ".repeat(n), " )".repeat(n)),
            |n| format!("{}true{}", "if true; then ".repeat(n), "; fi".repeat(n)),
            |n| format!("{}true{}", "while true; do ".repeat(n), "; done".repeat(n)),
            |n| format!("{}true{}", "case x in x) ".repeat(n), ";; esac".repeat(n)),
            |n| format!("echo {}x{}", "$(echo ".repeat(n), ")".repeat(n)),
            |n| format!("echo {}x{}", "\"$(echo ".repeat(n), ")\"".repeat(n)),
        ];
        // The limit holds on a thread with a small stack (a test thread has 2 MB; the gateway's
        // main thread 8 MB).
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                for (i, shape) in shapes.iter().enumerate() {
                    // Substitutions are nested scripts, bounded more tightly.
                    let ok = if i >= 5 {
                        walk::MAX_SCRIPT_DEPTH - 1
                    } else {
                        shallow
                    };
                    assert_eq!(
                        name(&judge(&shape(deep), &place())),
                        "too-complex",
                        "{}",
                        shape(3)
                    );
                    assert_eq!(name(&judge(&shape(ok), &place())), "allow", "{}", shape(3));
                }
                let too_many = walk::MAX_SCRIPT_DEPTH + 1;
                assert_eq!(name(&judge(&shapes[5](too_many), &place())), "too-complex");
                // At the limit, with every kind of opener mixed.
                let mixed: String = (0..walk::MAX_NESTING / 4)
                    .map(|_| "if true; then { ( while true; do ")
                    .collect();
                let closing: String = (0..walk::MAX_NESTING / 4)
                    .map(|_| "; done ) ; } ; fi")
                    .collect();
                assert_eq!(
                    name(&judge(&format!("{mixed}true{closing}"), &place())),
                    "allow"
                );
            })
            .expect("thread")
            .join()
            .expect("no stack overflow");
    }

    #[test]
    fn closers_bash_would_not_close_do_not_hide_nesting() {
        // `echo }` and `echo fi` are arguments; a here-document's `)` is text.
        let n = walk::MAX_NESTING + 1;
        for cmd in [
            "{ echo }; ".repeat(n),
            "if echo fi; then ".repeat(n),
            "( cat <<EOF\n)\nEOF\n".repeat(n),
            "( echo ')' ; ".repeat(n),
            "( echo \")\" ; ".repeat(n),
            "( echo # )\n".repeat(n),
        ] {
            assert!(walk::nesting(&cmd) > walk::MAX_NESTING, "{cmd:?}");
        }
    }

    #[test]
    fn nested_scripts_and_brace_storms_are_bounded() {
        let mut cmd = "rm -rf /".to_string();
        for _ in 0..walk::MAX_SCRIPT_DEPTH + 1 {
            cmd = format!("eval {}", shell_quote(&cmd));
        }
        assert_eq!(name(&judge(&cmd, &place())), "too-complex");
        assert_eq!(name(&judge("echo {1..100000000}", &place())), "allow");
        let huge_step = format!("echo {{{}..{}..{}}}", i64::MIN, i64::MAX, i64::MIN);
        assert_eq!(name(&judge(&huge_step, &place())), "allow");
        assert_eq!(
            name(&judge("echo {1..3..-9223372036854775808}", &place())),
            "allow"
        );
        assert_eq!(
            name(&judge("rm -rf /tmp/{1..100000000}", &place())),
            "rm-recursive-broad"
        );
        assert_eq!(
            name(&judge(
                "echo {a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}",
                &place()
            )),
            "allow"
        );
        let storm = "echo {a,b}{c,d}{e,f}{g,h}{i,j}{k,l}; ".repeat(1700);
        assert_eq!(name(&judge(&storm, &place())), "too-complex");
        // a refusal before the point where judging stops still refuses
        assert_eq!(
            name(&judge(&format!("rm -rf /; {storm}"), &place())),
            "refuse"
        );
    }

    fn shell_quote(s: &str) -> String {
        format!("'{}'", s.replace('\'', "'\\''"))
    }

    #[test]
    fn check_reads_home_and_resolves_a_relative_cwd() {
        // `check` is `judge` with the process's HOME and directory; a root delete needs neither.
        assert!(matches!(
            check("rm -rf /", Path::new("relative/dir")),
            Verdict::Refuse { .. }
        ));
        assert_eq!(check("ls -la", Path::new("/")), Verdict::Allow);
    }
}
