//! Which agentsadm image a self-update goes to (pure): versions compare by
//! their semver, then by the build time in their stamp, as
//! `sdcadm self-update` compares its own builds; `--latest` takes the
//! newest newer build of the same major version (another major only with
//! `--allow-major-update`); an image named explicitly is refused when it is
//! older (`--allow-downgrade`) or of another major.

use std::cmp::Ordering;
use std::fmt;

use agentsadm_types::image::{ImageManifest, ImageState, parse_agent_version};

/// How agentsadm versions order: semver, then the build's timestamp
/// (`<semver>-<branch>-<YYYYMMDDTHHMMSSZ>-g<sha>`; none sorts first).
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

/// What `--latest` found among the updates server's images.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatestChoice {
    /// The image to go to, if any is newer.
    pub chosen: Option<ImageManifest>,
    /// The newest build of a higher major, left out without
    /// `--allow-major-update`.
    pub skipped_major: Option<ImageManifest>,
}

/// The newest agentsadm image newer than `current` (every image when the
/// installed version is unknown), staying within its major version unless
/// `allow_major`. Disabled, inactive and unversioned images never count.
pub fn choose_latest(
    current: Option<&VersionKey>,
    images: &[ImageManifest],
    allow_major: bool,
) -> LatestChoice {
    let mut newer: Vec<(VersionKey, &ImageManifest)> = images
        .iter()
        .filter(|m| m.name == agentsadm_gz::release::NAME)
        .filter(|m| m.state == ImageState::Active && !m.disabled)
        .filter_map(|m| Some((VersionKey::of(&m.version)?, m)))
        .filter(|(k, _)| current.is_none_or(|c| k > c))
        .collect();
    newer.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.published_at.cmp(&b.1.published_at))
    });
    let other_major = |k: &VersionKey| current.is_some_and(|c| c.semver.major != k.semver.major);
    let skipped_major = newer
        .iter()
        .rev()
        .find(|(k, _)| other_major(k) && !allow_major)
        .map(|(_, m)| (*m).clone());
    let chosen = newer
        .iter()
        .rev()
        .find(|(k, _)| allow_major || !other_major(k))
        .map(|(_, m)| (*m).clone());
    LatestChoice {
        chosen,
        skipped_major,
    }
}

/// Why an image named explicitly is not installed without a flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Older than the installed version (`--allow-downgrade`).
    Downgrade,
    /// Another major version (`--allow-major-update`).
    MajorChange,
}

/// Whether going from `current` to `target` needs a flag the operator did
/// not give. An unknown current version allows anything.
pub fn check_explicit(
    current: Option<&VersionKey>,
    target: &VersionKey,
    allow_major: bool,
    allow_downgrade: bool,
) -> Result<(), Refusal> {
    let Some(current) = current else {
        return Ok(());
    };
    if target < current && !allow_downgrade {
        return Err(Refusal::Downgrade);
    }
    if target.semver.major != current.semver.major && !allow_major {
        return Err(Refusal::MajorChange);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_types::ids::ImageUuid;

    fn image(n: u128, version: &str, published: &str) -> ImageManifest {
        let text = format!(
            r#"{{"uuid": "{}", "name": "agentsadm", "version": "{version}", "type": "other",
                 "published_at": "{published}"}}"#,
            ImageUuid::from_u128(n)
        );
        serde_json::from_str(&text).unwrap()
    }

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
    }

    #[test]
    fn latest_is_the_newest_newer_build_of_the_same_major() {
        let images = vec![
            image(
                1,
                "1.2.0-master-20260101T000000Z-g0000001",
                "2026-01-01T00:00:00Z",
            ),
            image(
                2,
                "1.4.0-master-20260301T000000Z-g0000002",
                "2026-03-01T00:00:00Z",
            ),
            image(
                3,
                "2.0.0-master-20260401T000000Z-g0000003",
                "2026-04-01T00:00:00Z",
            ),
            image(
                4,
                "1.3.0-master-20260501T000000Z-g0000004",
                "2026-05-01T00:00:00Z",
            ),
        ];
        let current = key("1.2.0-master-20260101T000000Z-g0000001");
        let c = choose_latest(Some(&current), &images, false);
        assert_eq!(
            c.chosen.unwrap().uuid,
            ImageUuid::from_u128(2),
            "by version, not by date"
        );
        assert_eq!(c.skipped_major.unwrap().uuid, ImageUuid::from_u128(3));
        let c = choose_latest(Some(&current), &images, true);
        assert_eq!(c.chosen.unwrap().uuid, ImageUuid::from_u128(3));
        assert_eq!(c.skipped_major, None);
        // Installed is the newest: nothing to do.
        let c = choose_latest(
            Some(&key("2.0.0-master-20260401T000000Z-g0000003")),
            &images,
            true,
        );
        assert_eq!(c, LatestChoice::default());
        // Unknown installed version (a bare copy): the newest of all.
        let c = choose_latest(None, &images, false);
        assert_eq!(c.chosen.unwrap().uuid, ImageUuid::from_u128(3));
    }

    #[test]
    fn latest_ignores_disabled_and_foreign_images() {
        let mut disabled = image(
            5,
            "1.9.0-master-20260601T000000Z-g0000005",
            "2026-06-01T00:00:00Z",
        );
        disabled.disabled = true;
        let mut other = image(
            6,
            "1.9.0-master-20260601T000000Z-g0000006",
            "2026-06-01T00:00:00Z",
        );
        other.name = "vm-agent".into();
        let c = choose_latest(Some(&key("1.0.0")), &[disabled, other], false);
        assert_eq!(c, LatestChoice::default());
    }

    #[test]
    fn explicit_images_need_a_flag_to_go_down_or_to_another_major() {
        let cur = key("1.4.0-master-20260301T000000Z-g0000002");
        let older = key("1.2.0-master-20260101T000000Z-g0000001");
        let major = key("2.0.0-master-20260401T000000Z-g0000003");
        assert_eq!(
            check_explicit(Some(&cur), &older, false, false),
            Err(Refusal::Downgrade)
        );
        assert_eq!(check_explicit(Some(&cur), &older, false, true), Ok(()));
        assert_eq!(
            check_explicit(Some(&cur), &major, false, false),
            Err(Refusal::MajorChange)
        );
        assert_eq!(check_explicit(Some(&cur), &major, true, false), Ok(()));
        assert_eq!(
            check_explicit(Some(&major), &cur, false, true),
            Err(Refusal::MajorChange)
        );
        assert_eq!(check_explicit(None, &older, false, false), Ok(()));
        assert_eq!(check_explicit(Some(&cur), &cur, false, false), Ok(()));
    }
}
