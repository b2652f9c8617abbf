//! The last complete scan kept on disk (`$HERMES_HOME/tui_gateway_skills.json`), so a gateway
//! starting on a thousand skills answers from it at once instead of holding requests for its
//! first scan (~100 ms): read and parsed in one step at start (a few ms for 1,000 skills,
//! `benches/skills.rs`), used only when config.yaml's skill settings are the same, and
//! replaced when a scan completes — whose differences, if any, reach the sessions as any
//! rescan's do (`session.info`, the next model call's index).

use std::path::{Path, PathBuf};

use super::catalog::{Catalog, Scanned};
use super::settings::Settings;

/// A larger file is not read (a thousand skills take well under 1 MiB), so its one-step parse
/// at start stays within a few milliseconds whatever the file holds.
const FILE_MAX: u64 = 4 * 1024 * 1024;

pub fn path(home: &Path) -> PathBuf {
    home.join("tui_gateway_skills.json")
}

/// The bytes kept for `c`.
pub fn encode(c: &Catalog) -> Vec<u8> {
    serde_json::to_vec(&c.scanned()).unwrap_or_default()
}

/// The catalog kept in `bytes`, when it was scanned with `settings`.
pub fn decode(bytes: &[u8], settings: &Settings) -> Option<Catalog> {
    let found: Scanned = serde_json::from_slice(bytes).ok()?;
    (found.settings == *settings).then(|| Catalog::new(found))
}

/// The catalog kept under `home` for `settings` (none, unreadable or other settings: `None`).
pub fn load(home: &Path, settings: &Settings) -> Option<Catalog> {
    let bytes = crate::private_file::read(&path(home), FILE_MAX).ok()??;
    decode(&bytes, settings)
}

/// Keep `bytes` under `home` (a failure is said, never fatal: the next start scans first).
/// Not synced: the loop does not wait on the disk for it, and a file torn by a crash does not
/// parse, so the next start scans first.
pub fn store(home: &Path, bytes: &[u8]) {
    if let Err(e) = crate::private_file::overwrite(&path(home), bytes) {
        crate::diag!("[skills] could not keep the skills found for the next start: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_catalog_comes_back_for_the_same_settings_only() {
        let home = crate::skills::test_home_with_skill("skcache");
        std::fs::write(
            home.join("skills/dev/DESCRIPTION.md"),
            "---\ndescription: Dev\n---\n",
        )
        .unwrap();
        let settings = Settings::load(&home);
        let mut scan = super::super::scan::Scan::new(settings.clone());
        while !scan.step() {}
        let c = scan.finish();
        assert!(load(&home, &settings).is_none());
        store(&home, &encode(&c));
        let back = load(&home, &settings).unwrap();
        let none = Default::default();
        assert_eq!(
            back.prompt_index(&none, &none),
            c.prompt_index(&none, &none)
        );
        assert_eq!(back.by_category(), c.by_category());
        let other = Settings {
            disabled: ["a".to_string()].into(),
            ..settings
        };
        assert!(load(&home, &other).is_none());
        let _ = std::fs::remove_dir_all(&home);
    }
}
