//! Whether Hermes counts this install as a package manager's (its `is_managed`): then the
//! credentials are read-only to the picker. The marker is `HERMES_MANAGED` (the service's
//! environment, `.env` included), else the text of `$HERMES_HOME/.managed` (NixOS' activation
//! script writes it for interactive shells).

use std::path::Path;

use crate::hermes_env::HermesEnv;

/// Longest `.managed` read; a larger or unreadable one counts as an empty marker (managed).
const MARKER_MAX: u64 = 4096;

/// Hermes' `is_managed()` for `home`, with `env` the variables as Hermes sees them.
pub fn is_managed(home: &Path, env: &HermesEnv) -> bool {
    let from_env = env.get("HERMES_MANAGED");
    let marker = home.join(".managed");
    managed(from_env.as_deref(), || {
        // Hermes asks `exists()` (a link is followed), then reads it, an error being "".
        std::fs::metadata(&marker).ok()?;
        Some(
            crate::util::read_regular(&marker, MARKER_MAX)
                .ok()
                .flatten()
                .unwrap_or_default(),
        )
    })
}

/// The rule on the markers: the variable's (when not blank), else the file's (`None`: no file);
/// none, `brew`/`homebrew` (no longer managed) and `false`/`0`/`no`/`off` are not managed,
/// anything else (an empty file too) is.
fn managed(from_env: Option<&str>, from_file: impl FnOnce() -> Option<String>) -> bool {
    let from_env = from_env
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty());
    let Some(marker) = from_env.or_else(|| {
        from_file().map(|t| t.trim_start_matches('\u{feff}').trim().to_ascii_lowercase())
    }) else {
        return false;
    };
    !matches!(
        marker.as_str(),
        "brew" | "homebrew" | "false" | "0" | "no" | "off"
    )
}

#[cfg(test)]
mod tests {
    use super::managed;

    #[test]
    fn hermes_markers() {
        let no_file = || None;
        assert!(!managed(None, no_file));
        assert!(!managed(Some("  "), no_file));
        for on in ["true", "1", "NixOS", "home-manager", "yes"] {
            assert!(managed(Some(on), no_file), "{on}");
        }
        for off in ["false", "OFF", "0", "no", "brew", "Homebrew"] {
            assert!(!managed(Some(off), || Some("nixos".into())), "{off}");
        }
        assert!(managed(None, || Some(String::new())), "an empty file");
        assert!(managed(Some(""), || Some("nixos\n".into())));
        assert!(!managed(None, || Some("\u{feff} false\n".into())));
    }
}
