//! Hermes' SKILL.md skills: where they are (`settings.rs`), a scan in bounded steps
//! (`scan.rs`), the header (`header.rs`), what the scan found and what follows — offers, the
//! index, lookups, slugs (`catalog.rs`), reading them (`view.rs`) and what they need set up
//! (`readiness.rs`), activation messages (`invoke.rs`), bundles (`bundles.rs`), the model's
//! writes (`manage.rs`) and the skills plugins provide (`plugins.rs`).
//!
//! [`Skills`] owns the catalog of the last complete scan and the scan in progress; the loop
//! steps it a slice per iteration (`methods/skills.rs`), so a thousand skills never hold up a
//! request. Its `generation` moves when what is offered changes: a session whose system
//! prompt was built before rebuilds it for its next model call.

pub mod bundles;
pub mod cache;
pub mod catalog;
pub mod header;
pub mod invoke;
pub mod manage;
pub mod plugins;
pub mod readiness;
pub mod scan;
pub mod settings;
pub mod view;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::clock::Budget;
pub use catalog::Catalog;

/// A catalog older than this is scanned again when a session starts (Hermes' 30 s).
pub const STALE_AFTER: Duration = Duration::from_secs(30);

/// The skills, shared by the gateway and the skill tools (one thread).
pub type Shared = Rc<RefCell<Skills>>;

pub struct Skills {
    home: PathBuf,
    catalog: Catalog,
    /// The first scan is complete.
    ready: bool,
    scan: Option<scan::Scan>,
    scanned_at: Option<Instant>,
    generation: u64,
    /// Problems already said on stderr.
    reported: std::collections::BTreeSet<String>,
    /// What `cache.rs` last kept (or found), so an unchanged scan is not written again.
    kept: Vec<u8>,
    /// A completed scan not yet kept: written on the next step, after the requests that
    /// waited for it are answered (its encoding and write take ~2 ms for 1,000 skills).
    unkept: bool,
}

/// What a completed scan changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescanned {
    /// The offered skills changed (`generation` moved).
    pub changed: bool,
}

impl Skills {
    /// The skills of `home`; the first scan starts now and runs in the loop's steps. What the
    /// last one found, kept on disk for these settings, is offered meanwhile (`cache.rs`).
    pub fn new(home: &Path) -> Skills {
        let settings = settings::Settings::load(home);
        let kept = cache::load(home, &settings);
        let first = scan::Scan::new(settings);
        let first = match &kept {
            Some(c) => first.knowing(c.records()),
            None => first,
        };
        let mut s = Skills {
            home: home.to_path_buf(),
            catalog: Catalog::default(),
            ready: false,
            scan: Some(first),
            scanned_at: None,
            generation: 0,
            reported: Default::default(),
            kept: Vec::new(),
            unkept: false,
        };
        if let Some(c) = kept {
            s.kept = cache::encode(&c);
            s.catalog = c;
            s.ready = true;
            s.generation = 1;
        }
        s
    }

    pub fn shared(home: &Path) -> Shared {
        Rc::new(RefCell::new(Skills::new(home)))
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The first scan is complete: the catalog is what is on disk.
    pub fn ready(&self) -> bool {
        self.ready
    }

    /// A scan is under way (or its result is still to be kept): step again soon.
    pub fn scanning(&self) -> bool {
        self.scan.is_some() || self.unkept
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Scan again (config.yaml read again), unless a scan is under way.
    pub fn rescan(&mut self) {
        if self.scan.is_none() {
            let scan = scan::Scan::new(settings::Settings::load(&self.home));
            self.scan = Some(scan.knowing(self.catalog.records()));
        }
    }

    /// Scan again when the catalog is older than [`STALE_AFTER`].
    pub fn rescan_if_stale(&mut self, now: Instant) {
        if self
            .scanned_at
            .is_some_and(|t| now.saturating_duration_since(t) >= STALE_AFTER)
        {
            self.rescan();
        }
    }

    /// Step the scan until `budget` is spent; `Some` when it completed in this step.
    pub fn step(&mut self, budget: &Budget, now: Instant) -> Option<Rescanned> {
        if self.scan.is_none() && self.unkept {
            self.keep();
            return None;
        }
        let done = self.scan.as_mut()?.run(budget);
        if !done {
            return None;
        }
        let catalog = self.scan.take()?.finish();
        Some(self.install(catalog, now))
    }

    /// Stop a scan under way and keep what is known (the shutdown).
    pub fn abandon(&mut self) {
        self.scan = None;
        self.ready = true;
        if self.unkept {
            self.keep();
        }
    }

    /// Write the catalog for the next start, unless that is what is kept already.
    fn keep(&mut self) {
        self.unkept = false;
        let bytes = cache::encode(&self.catalog);
        if bytes != self.kept {
            cache::store(&self.home, &bytes);
            self.kept = bytes;
        }
    }

    fn install(&mut self, catalog: Catalog, now: Instant) -> Rescanned {
        let changed = catalog.by_category() != self.catalog.by_category()
            || catalog.prompt_index(&Default::default(), &Default::default())
                != self
                    .catalog
                    .prompt_index(&Default::default(), &Default::default());
        for p in &catalog.problems {
            if self.reported.insert(p.clone()) {
                crate::diag!("[skills] {p}");
            }
        }
        self.catalog = catalog;
        self.ready = true;
        self.scanned_at = Some(now);
        self.unkept = true;
        if changed {
            self.generation += 1;
        }
        Rescanned { changed }
    }

    /// Put a `skill_manage` change into the catalog (the next model call's index has it).
    pub fn apply(&mut self, change: &manage::Change) {
        if manage::apply(&mut self.catalog, change) {
            self.generation += 1;
        }
    }
}

/// A fresh home in the temp folder holding one skill, `dev/a` (for unit tests).
#[cfg(test)]
pub(crate) fn test_home_with_skill(tag: &str) -> std::path::PathBuf {
    let home = std::env::temp_dir().join(format!("tuigw-{tag}-{}", crate::util::random_hex(8)));
    let dir = home.join("skills/dev/a");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: a\ndescription: A\n---\nbody",
    )
    .unwrap();
    home
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_scan_completes_in_steps_and_a_change_moves_the_generation() {
        let home = test_home_with_skill("skills");
        let mut s = Skills::new(&home);
        assert!(!s.ready());
        let now = Instant::now();
        let mut done = None;
        while done.is_none() {
            done = s.step(&Budget::unlimited(), now);
        }
        assert!(s.ready() && done.unwrap().changed && s.generation() == 1);
        s.rescan();
        while s.step(&Budget::unlimited(), now).is_none() {}
        assert_eq!(s.generation(), 1, "nothing changed");
        let md = home.join("skills/dev/a/SKILL.md");
        s.apply(&manage::Change::Removed(md));
        assert_eq!(s.generation(), 2);
        assert_eq!(s.catalog().offered().count(), 0);
        let _ = std::fs::remove_dir_all(&home);
    }
}
