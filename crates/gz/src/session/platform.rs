//! Which operating system a run on a Triton GZ drives: chosen, never
//! implied by the root.
//!
//! On a real server `--root DIR` is a global zone's files under `DIR`
//! (an alternate root), and SMF, sysinfo and the SDC config are still the
//! host's: SmartOS. The rooted platform (sysinfo in `<root>/sysinfo.json`,
//! a JSON file for SMF) exists for tests and the simulator, and only the
//! test build can select it for a command line ([`Knob::Platform`]); the
//! server's build has no way to (issue 31).

use std::collections::BTreeMap;
use std::path::Path;

use super::Knob;

/// The platform of a run with the smartdc layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlatformKind {
    /// The host's SmartOS: `svccfg`, `svcadm`, `svcs`, `sysinfo`,
    /// `/lib/sdc/config.sh`, whatever the root holding the files.
    SmartOs,
    /// A global zone in a directory with its own fake SMF
    /// ([`agentsadm_platform::Rooted`]): tests and the simulator.
    Rooted,
}

impl PlatformKind {
    /// The knob's words: `smartos`, `rooted`.
    pub fn parse(word: &str) -> Option<PlatformKind> {
        match word {
            "smartos" => Some(PlatformKind::SmartOs),
            "rooted" | "fake" => Some(PlatformKind::Rooted),
            _ => None,
        }
    }
}

/// What a test build was told about the platform of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestChoice {
    /// `AGENTSADM_TEST_PLATFORM` names one.
    Named(PlatformKind),
    /// Nothing said: the suites' and the simulator's command lines name a
    /// rooted directory with `--root`, and `/` is the host.
    ByRoot,
}

/// The platform of a command line's run on `root`. `test` is `None` in
/// the server's build, which has no knobs: SmartOS whatever the root.
pub fn select(root: &Path, test: Option<TestChoice>) -> PlatformKind {
    match test {
        None => PlatformKind::SmartOs,
        Some(TestChoice::Named(kind)) => kind,
        Some(TestChoice::ByRoot) if root == Path::new("/") => PlatformKind::SmartOs,
        Some(TestChoice::ByRoot) => PlatformKind::Rooted,
    }
}

/// The platform a command line on `root` drives, `env` being the run's
/// environment additions ([`select`]; the test build reads
/// [`Knob::Platform`] from `env`, else the process).
pub fn for_command_line(root: &Path, env: &BTreeMap<String, String>) -> PlatformKind {
    select(root, test_choice(env))
}

#[cfg(feature = "test-knobs")]
fn test_choice(env: &BTreeMap<String, String>) -> Option<TestChoice> {
    let name = Knob::Platform.env_name();
    let word = env
        .get(name)
        .cloned()
        .or_else(|| std::env::var(name).ok())
        .filter(|v| !v.is_empty());
    Some(match word.as_deref().and_then(PlatformKind::parse) {
        Some(kind) => TestChoice::Named(kind),
        None => TestChoice::ByRoot,
    })
}

#[cfg(not(feature = "test-knobs"))]
fn test_choice(_env: &BTreeMap<String, String>) -> Option<TestChoice> {
    let _ = Knob::Platform;
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's build (no knobs) drives SmartOS's SMF with `--root`
    /// anywhere: an alternate root is never the fake.
    #[test]
    fn the_server_build_drives_smartos_whatever_the_root() {
        for root in ["/", "/zones/abc/root", "relative/dir", "/tmp/x"] {
            assert_eq!(
                select(Path::new(root), None),
                PlatformKind::SmartOs,
                "{root}"
            );
        }
    }

    #[test]
    fn the_test_build_chooses_by_knob_else_by_root() {
        let named = |k| Some(TestChoice::Named(k));
        assert_eq!(
            select(Path::new("/tmp/x"), named(PlatformKind::SmartOs)),
            PlatformKind::SmartOs
        );
        assert_eq!(
            select(Path::new("/"), named(PlatformKind::Rooted)),
            PlatformKind::Rooted
        );
        assert_eq!(
            select(Path::new("/tmp/x"), Some(TestChoice::ByRoot)),
            PlatformKind::Rooted
        );
        assert_eq!(
            select(Path::new("/"), Some(TestChoice::ByRoot)),
            PlatformKind::SmartOs
        );
        assert_eq!(PlatformKind::parse("fake"), Some(PlatformKind::Rooted));
        assert_eq!(PlatformKind::parse("linux"), None);
    }
}
