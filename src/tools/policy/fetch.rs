//! Downloads and the files they are saved to: a later command in the same command line that
//! runs one of those files (`sh f`, `./f`, `. f`, `python3 f`, `sh < f`, `cat f | sh`) runs the
//! download, as `curl … | sh` does.

use std::path::PathBuf;

use super::Danger;
use super::commands::{basename, find_value, gnu_split, short_flag};
use super::paths::{self, Target};
use super::walk::Walker;
use super::words::Arg;

/// A file the command downloaded into, as later commands would name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fetched {
    Path(PathBuf),
    /// Where the path is only known when it runs: the word as written (`"$F"`).
    Word(String),
}

/// curl's options that take a value (the common ones: an unknown one makes its value look like
/// a URL, which only adds a file name that nothing runs).
const CURL_SHORT_VALUES: &str = "AbcCdDeEFHKmoPQrTuUwxXyYz";
const CURL_LONG_VALUES: &[&str] = &[
    "header",
    "data",
    "data-raw",
    "data-binary",
    "data-urlencode",
    "request",
    "user",
    "user-agent",
    "output",
    "output-dir",
    "cookie",
    "cookie-jar",
    "form",
    "max-time",
    "connect-timeout",
    "retry",
    "proxy",
    "referer",
    "upload-file",
    "write-out",
    "config",
    "cert",
    "key",
    "cacert",
    "range",
    "resolve",
    "continue-at",
    "limit-rate",
    "dump-header",
];
const WGET_SHORT_VALUES: &str = "OoaeiBtTwPUQDARIXl";
const WGET_LONG_VALUES: &[&str] = &[
    "output-document",
    "output-file",
    "append-output",
    "execute",
    "input-file",
    "base",
    "tries",
    "timeout",
    "wait",
    "directory-prefix",
    "user-agent",
    "quota",
    "domains",
    "accept",
    "reject",
    "level",
    "header",
    "user",
    "password",
    "post-data",
    "post-file",
    "referer",
];

/// `dir/file`.
fn join_path(dir: &Arg, file: &Arg) -> Arg {
    let mut path = dir.clone();
    path.text = format!("{}/{}", dir.text, file.text);
    path.pattern = format!("{}/{}", dir.pattern, file.pattern);
    path.script = format!("{}/{}", dir.script, file.script);
    path.dynamic |= file.dynamic;
    path
}

/// The file name a URL is saved under (`https://x/a/install.sh?v=1` → `install.sh`).
fn url_name(url: &Arg) -> Option<Arg> {
    if url.dynamic {
        return None;
    }
    let text = url.text.split(['?', '#']).next().unwrap_or("");
    let path = text.split_once("://").map_or(text, |(_, rest)| rest);
    let (_, name) = path.split_once('/')?;
    let name = name.rsplit('/').next().unwrap_or("");
    (!name.is_empty() && name != "." && name != "..").then(|| Arg::literal(name))
}

impl Walker<'_> {
    pub(super) fn download(&mut self, name: &str, rest: &[Arg]) {
        self.downloads += 1;
        let (short, long) = match name {
            "wget" => ("-O", "--output-document"),
            _ => ("-o", "--output"),
        };
        let output = find_value(rest, short, long);
        if let Some(v) = &output {
            self.write_target(v, Danger::WriteBlockDevice);
        }
        // The files it saves: its output, or the URLs' own names (`wget URL`, `curl -O URL`).
        let (saved, dir): (Vec<Arg>, Option<Arg>) = match (name, output) {
            (_, Some(v)) => (vec![v], None),
            ("wget", None) => {
                let (_, urls) = gnu_split(rest, WGET_SHORT_VALUES, WGET_LONG_VALUES);
                let dir = find_value(rest, "-P", "--directory-prefix");
                (urls.iter().filter_map(|u| url_name(u)).collect(), dir)
            }
            ("curl", None) => {
                let (flags, urls) = gnu_split(rest, CURL_SHORT_VALUES, CURL_LONG_VALUES);
                let remote_name = short_flag(&flags, 'O')
                    || flags
                        .iter()
                        .any(|f| f == "--remote-name" || f == "--remote-name-all");
                let names = match remote_name {
                    true => urls.iter().filter_map(|u| url_name(u)).collect(),
                    false => Vec::new(),
                };
                (names, find_value(rest, "", "--output-dir"))
            }
            _ => (Vec::new(), None),
        };
        for file in saved.iter().filter(|f| f.text != "-") {
            match &dir {
                Some(d) if !file.text.starts_with('/') => self.fetch(&join_path(d, file)),
                _ => self.fetch(file),
            }
        }
    }

    // ---- downloaded files ----

    /// How later commands would name the file `a` names.
    fn fetched_key(&self, a: &Arg) -> Option<Fetched> {
        if a.find_target.is_some() || a.script.is_empty() {
            return None;
        }
        match paths::target(a, self.cwd.as_deref()) {
            Target::Exact(p) => Some(Fetched::Path(p)),
            Target::Unknown => Some(Fetched::Word(a.script.clone())),
            Target::Entries(_) | Target::Some(_) => None,
        }
    }

    /// `a` now holds a download.
    pub(super) fn fetch(&mut self, a: &Arg) {
        if let Some(k) = self.fetched_key(a)
            && !self.fetched.contains(&k)
        {
            self.fetched.push(k);
        }
    }

    /// `a` names a file this command downloaded into.
    pub(super) fn is_fetched(&self, a: &Arg) -> bool {
        !self.fetched.is_empty()
            && self
                .fetched_key(a)
                .is_some_and(|k| self.fetched.contains(&k))
    }

    /// A download copied or moved to `dest` (a file, or a directory it goes into) is one there.
    pub(super) fn pass_fetched(&mut self, sources: &[&Arg], dest: &Arg) {
        let fetched: Vec<&Arg> = sources
            .iter()
            .copied()
            .filter(|s| self.is_fetched(s))
            .collect();
        for s in fetched {
            self.fetch(dest);
            self.fetch(&join_path(dest, &Arg::literal(basename(&s.text))));
        }
    }
}
