//! Hermes' pruning, as decisions on data (no disk, no clock of its own): which commits of a
//! project's chain stay (the newest `max_snapshots`; one dropped from the old end per round
//! while the store is over its size cap), which projects the automatic sweep forgets (not
//! touched for `retention_days`), and whether the sweep is due (`min_interval_hours` since
//! the last). Also the parsing of what git says about a chain.

/// One commit of a project's chain, as `git log` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub sha: String,
    pub tree: String,
    /// Author and committer dates (ISO 8601), kept when the chain is rewritten.
    pub author_date: String,
    pub commit_date: String,
    pub subject: String,
}

/// The `git log` format [`parse_chain`] reads.
pub const CHAIN_FORMAT: &str = "--format=%H%x1f%T%x1f%aI%x1f%cI%x1f%s";

/// A chain listed oldest first (`git log --reverse CHAIN_FORMAT`).
pub fn parse_chain(out: &str) -> Vec<Commit> {
    out.lines()
        .filter_map(|line| {
            let mut f = line.splitn(5, '\x1f');
            let sha = f.next()?.trim().to_string();
            let tree = f.next()?.to_string();
            let author_date = f.next()?.to_string();
            let commit_date = f.next()?.to_string();
            let subject = f.next().unwrap_or("").to_string();
            (!sha.is_empty()).then_some(Commit {
                sha,
                tree,
                author_date,
                commit_date,
                subject,
            })
        })
        .collect()
}

/// The commits to keep when a chain holds more than `max` (its newest `max`), or `None` when
/// nothing is to go.
pub fn keep_newest(chain: &[Commit], max: usize) -> Option<&[Commit]> {
    let max = max.max(1);
    (chain.len() > max).then(|| &chain[chain.len() - max..])
}

/// The commits to keep when the oldest goes (the store is over its cap): `None` when the chain
/// is down to its last commit (a project keeps at least one).
pub fn drop_oldest(chain: &[Commit]) -> Option<&[Commit]> {
    (chain.len() > 1).then(|| &chain[1..])
}

/// Rounds of the size cap before it gives up (Hermes' bound).
pub const CAP_ROUNDS: usize = 20;

/// A project as `projects/<hash>.json` records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    pub hash: String,
    pub workdir: String,
    pub last_touch: f64,
}

/// The projects the automatic sweep forgets: last touched before `now - retention_days`.
/// Never those whose directory is gone (a volume not mounted yet looks the same; Hermes'
/// unattended sweep does not guess either), and nothing when `retention_days` is 0.
pub fn stale(projects: &[Project], now: f64, retention_days: u64) -> Vec<String> {
    if retention_days == 0 {
        return Vec::new();
    }
    let cutoff = now - retention_days as f64 * 86400.0;
    projects
        .iter()
        .filter(|p| p.last_touch > 0.0 && p.last_touch < cutoff)
        .map(|p| p.hash.clone())
        .collect()
}

/// Whether the automatic sweep is due: never ran, its marker unreadable, or ran more than
/// `min_interval_hours` ago.
pub fn sweep_due(marker: Option<&str>, now: f64, min_interval_hours: u64) -> bool {
    match marker.and_then(|m| m.trim().parse::<f64>().ok()) {
        Some(last) => now - last >= min_interval_hours as f64 * 3600.0,
        None => true,
    }
}

/// `git diff --shortstat`'s line as `(files, insertions, deletions)`.
pub fn shortstat(line: &str) -> (u64, u64, u64) {
    let number_before = |word: &str| {
        let at = line.find(word)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    (
        number_before(" file").unwrap_or(0),
        number_before(" insertion").unwrap_or(0),
        number_before(" deletion").unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize) -> Vec<Commit> {
        (0..n)
            .map(|i| Commit {
                sha: format!("c{i}"),
                tree: format!("t{i}"),
                author_date: "2026-01-01T00:00:00Z".into(),
                commit_date: "2026-01-01T00:00:00Z".into(),
                subject: format!("before write_file {i}"),
            })
            .collect()
    }

    #[test]
    fn a_chain_keeps_its_newest_snapshots() {
        let c = chain(5);
        assert_eq!(keep_newest(&c, 5), None);
        let kept = keep_newest(&c, 3).unwrap();
        assert_eq!(
            kept.iter().map(|c| c.sha.as_str()).collect::<Vec<_>>(),
            ["c2", "c3", "c4"]
        );
        assert_eq!(keep_newest(&c, 0).unwrap().len(), 1, "at least one is kept");
        assert_eq!(drop_oldest(&c).unwrap()[0].sha, "c1");
        assert_eq!(drop_oldest(&c[..1]), None);
    }

    #[test]
    fn git_log_lines_are_read_back() {
        let out = "aaa\x1ftta\x1f2026-01-01T00:00:00+00:00\x1f2026-01-02T00:00:00+00:00\x1fbefore terminal: a\x1fb | c\n\nbbb\x1fttb\x1fd1\x1fd2\x1f\n";
        let c = parse_chain(out);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].subject, "before terminal: a\x1fb | c");
        assert_eq!(c[0].commit_date, "2026-01-02T00:00:00+00:00");
        assert_eq!((c[1].sha.as_str(), c[1].subject.as_str()), ("bbb", ""));
    }

    #[test]
    fn the_sweep_forgets_projects_untouched_past_retention() {
        let day = 86400.0;
        let now = 100.0 * day;
        let p = |hash: &str, last_touch: f64| Project {
            hash: hash.into(),
            workdir: "/w".into(),
            last_touch,
        };
        let projects = [
            p("old", now - 8.0 * day),
            p("new", now - day),
            p("never", 0.0),
        ];
        assert_eq!(stale(&projects, now, 7), ["old"]);
        assert!(stale(&projects, now, 0).is_empty());
        assert!(sweep_due(None, now, 24));
        assert!(sweep_due(Some("garbage"), now, 24));
        assert!(!sweep_due(Some(&format!("{}", now - 3600.0)), now, 24));
        assert!(sweep_due(Some(&format!("{}", now - day)), now, 24));
    }

    #[test]
    fn shortstat_lines_are_counted() {
        assert_eq!(
            shortstat(" 3 files changed, 10 insertions(+), 2 deletions(-)"),
            (3, 10, 2)
        );
        assert_eq!(shortstat(" 1 file changed, 1 deletion(-)"), (1, 0, 1));
        assert_eq!(shortstat(""), (0, 0, 0));
    }
}
