//! How agentsadm (and agent) versions order: by their semver, then by the
//! build time in their stamp (`<semver>-<branch>-<YYYYMMDDTHHMMSSZ>-g<sha>`),
//! as `sdcadm self-update` orders its own builds. Used by `self-update` to
//! choose a build and by the planner to tell whether a server's agentsadm
//! is new enough for what a plan sends it.
//!
//! CNAPI reads versions otherwise ([`parse_as_node_semver`]): through
//! node-semver, where a build's `-<branch>-<stamp>-g<sha>` is a
//! pre-release, so `2.8.0-master-20231010T000000Z-g1234567` comes BEFORE
//! 2.8.0. Whatever asks "would CNAPI accept this server's cn-agent"
//! reads the version that way.

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

/// The longest version string node-semver reads (`MAX_LENGTH`); a longer
/// one is no version to it.
const NODE_SEMVER_MAX_LENGTH: usize = 256;

/// A version as node-semver (5.x, CNAPI's) reads it in its strict mode:
/// surrounding blanks and one leading `v` dropped, then exactly
/// `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`. Unlike [`VersionKey`], the
/// suffix of a Triton build is a pre-release, so the build orders BELOW
/// its release (`2.8.0-master-...` < `2.8.0`), and build metadata is
/// dropped (node-semver never compares it). `None`: no version to
/// node-semver (its `semver.lt` then throws).
pub fn parse_as_node_semver(version: &str) -> Option<semver::Version> {
    let v = version.trim();
    if v.len() > NODE_SEMVER_MAX_LENGTH {
        return None;
    }
    let v = v.strip_prefix('v').unwrap_or(v);
    let mut parsed = semver::Version::parse(v).ok()?;
    parsed.build = semver::BuildMetadata::EMPTY;
    Some(parsed)
}

/// Whether node-semver finds `version` at least `min` (`semver.gte`);
/// a version it cannot read is not.
pub fn node_semver_at_least(version: &str, min: &semver::Version) -> bool {
    parse_as_node_semver(version).is_some_and(|v| v >= *min)
}

/// Why node-semver finds `version` below `min`, in words an operator can
/// act on (a build of `min` itself is the surprising case), or `None`
/// when it is not below.
pub fn below_as_node_semver(version: &str, min: &semver::Version) -> Option<String> {
    match parse_as_node_semver(version) {
        Some(v) if v >= *min => None,
        Some(v) if !v.pre.is_empty() && semver::Version::new(v.major, v.minor, v.patch) >= *min => {
            Some(format!(
                "{version} is a pre-release of {}.{}.{} as CNAPI reads versions (node-semver: a build's '-{}' sorts before its release), so below {min}",
                v.major, v.minor, v.patch, v.pre
            ))
        }
        Some(_) => Some(format!("{version} is below {min}")),
        None => Some(format!(
            "{:?} is no version CNAPI can read (node-semver), so not {min} or later",
            version
        )),
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
    fn node_semver_reads_a_build_as_a_pre_release_of_its_version() {
        let floor = semver::Version::new(2, 8, 0);
        // What CNAPI's `semver.lt(version, '2.8.0')` answers.
        assert!(!node_semver_at_least(
            "2.8.0-master-20231010T000000Z-g1234567",
            &floor
        ));
        assert!(node_semver_at_least("2.8.0", &floor));
        assert!(node_semver_at_least(" v2.8.0 ", &floor));
        assert!(node_semver_at_least(
            "2.8.1-master-20231010T000000Z-g1",
            &floor
        ));
        assert!(node_semver_at_least(
            "2.9.0-master-20231010T000000Z-g1",
            &floor
        ));
        assert!(!node_semver_at_least("2.7.9", &floor));
        // Build metadata is not compared; `+` starts it.
        assert_eq!(
            parse_as_node_semver("2.8.0+build.5"),
            Some(semver::Version::new(2, 8, 0))
        );
        // Not a version to node-semver: never at least anything.
        for v in ["", "2.8", "bootstrap", "2.8.0-01", &"9".repeat(300)] {
            assert!(!node_semver_at_least(v, &floor), "{v}");
        }
        // VersionKey (agentsadm's own order) takes the build as its release.
        assert!(key("2.8.0-master-20231010T000000Z-g1234567").at_least(&floor));
        // The refusal says why a build of the floor itself is below it.
        let why = below_as_node_semver("2.8.0-master-20231010T000000Z-g1234567", &floor).unwrap();
        assert!(why.contains("pre-release of 2.8.0"), "{why}");
        assert_eq!(
            below_as_node_semver("2.9.0-master-20231010T000000Z-g1", &floor),
            None
        );
        assert_eq!(
            below_as_node_semver("2.7.0", &floor).as_deref(),
            Some("2.7.0 is below 2.8.0")
        );
    }

    #[test]
    fn any_build_of_a_release_is_at_least_that_release() {
        let min = semver::Version::new(0, 1, 0);
        assert!(key("0.1.0-master-20261126T072930Z-g3df32ef").at_least(&min));
        assert!(key("1.0.0").at_least(&min));
        assert!(!key("0.0.9-master-20261101T000000Z-g0000000").at_least(&min));
    }
}
