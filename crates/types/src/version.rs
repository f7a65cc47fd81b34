//! How agentsadm (and agent) versions order: by their semver, then by the
//! build time in their stamp (`<semver>-<branch>-<YYYYMMDDTHHMMSSZ>-g<sha>`),
//! as `sdcadm self-update` orders its own builds. Used by `self-update` to
//! choose a build and by the planner to tell whether a server's agentsadm
//! is new enough for what a plan sends it.

use std::cmp::Ordering;
use std::fmt;

use crate::image::parse_agent_version;

/// A version's sort key: semver, then the build's timestamp (none sorts
/// first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionKey {
    pub semver: semver::Version,
    pub built: String,
}

impl VersionKey {
    /// The key of a version string, if it starts with a semver.
    pub fn of(version: &str) -> Option<VersionKey> {
        let semver = parse_agent_version(version)?;
        let built = version
            .split('-')
            .rfind(|f| is_timestamp(f))
            .unwrap_or_default()
            .to_string();
        Some(VersionKey { semver, built })
    }

    /// Whether this version is `min` or later (a release's core semver is
    /// what a minimum names; any build of it qualifies).
    pub fn at_least(&self, min: &semver::Version) -> bool {
        self.semver >= *min
    }
}

impl Ord for VersionKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.semver
            .cmp(&other.semver)
            .then_with(|| self.built.cmp(&other.built))
    }
}

impl PartialOrd for VersionKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for VersionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.semver)
    }
}

/// `YYYYMMDDTHHMMSSZ`.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 16
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(v: &str) -> VersionKey {
        VersionKey::of(v).unwrap()
    }

    #[test]
    fn versions_order_by_semver_then_build_time() {
        assert!(
            key("1.2.0-master-20260101T000000Z-gaaaaaaa")
                < key("1.10.0-master-20250101T000000Z-gbbbbbbb")
        );
        assert!(
            key("1.2.0-master-20260101T000000Z-gaaaaaaa")
                < key("1.2.0-release-20260102T000000Z-gbbbbbbb")
        );
        // A branch name with '-' does not hide the timestamp.
        assert_eq!(
            key("1.2.0-release-2026-20260102T000000Z-gb").built,
            "20260102T000000Z"
        );
        // A bare semver (a build without a stamp) is older than any stamped build of it.
        assert!(key("1.2.0") < key("1.2.0-master-20260101T000000Z-gaaaaaaa"));
        assert_eq!(VersionKey::of("bootstrap"), None);
        assert_eq!(VersionKey::of(""), None);
    }

    #[test]
    fn any_build_of_a_release_is_at_least_that_release() {
        let min = semver::Version::new(0, 1, 0);
        assert!(key("0.1.0-master-20261126T072930Z-g3df32ef").at_least(&min));
        assert!(key("1.0.0").at_least(&min));
        assert!(!key("0.0.9-master-20261101T000000Z-g0000000").at_least(&min));
    }
}
