//! The IMGAPI image manifest (v2) as it travels on the wire and sits next to
//! image files on a USB key (`<uuid>.manifest`). Field order follows IMGAPI's
//! serializer (docs/triton/apis.md §1.2) so our simulator emits the same bytes.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::ImageUuid;

/// The owner every Triton agent image carries.
pub const ADMIN_OWNER: &str = "00000000-0000-0000-0000-000000000000";

/// How an image file is compressed (IMGAPI `files[].compression`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Gzip,
    Bzip2,
    Xz,
    None,
}

impl Compression {
    pub fn as_str(&self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Xz => "xz",
            Compression::None => "none",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `files` (IMGAPI supports exactly one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageFile {
    pub sha1: String,
    pub size: u64,
    pub compression: Compression,
    /// Only with `inclAdminFields=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stor: Option<String>,
}

/// Image lifecycle state as IMGAPI computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageState {
    Active,
    Unactivated,
    Disabled,
    Creating,
    Failed,
}

/// An IMGAPI v2 image manifest. Unknown fields are kept in `extra` so a
/// manifest read from a real IMGAPI can be written back unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageManifest {
    #[serde(default = "default_v")]
    pub v: u32,
    pub uuid: ImageUuid,
    #[serde(default = "default_owner")]
    pub owner: String,
    pub name: String,
    pub version: String,
    #[serde(default = "default_state")]
    pub state: ImageState,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default)]
    pub public: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<String>,
    #[serde(rename = "type")]
    pub image_type: String,
    #[serde(default = "default_os")]
    pub os: String,
    #[serde(default)]
    pub files: Vec<ImageFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, serde_json::Value>>,
    /// Only present when the server uses channels and the client sent
    /// `Accept-Version: ~2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

fn default_v() -> u32 {
    2
}
fn default_owner() -> String {
    ADMIN_OWNER.to_string()
}
fn default_state() -> ImageState {
    ImageState::Active
}
fn default_os() -> String {
    "other".to_string()
}

impl ImageManifest {
    /// The single image file, if the manifest has one.
    pub fn file(&self) -> Option<&ImageFile> {
        self.files.first()
    }

    /// `tags.buildstamp`, if present.
    pub fn buildstamp(&self) -> Option<&str> {
        self.tags.as_ref()?.get("buildstamp")?.as_str()
    }

    /// The semver prefix of `version` (`1.9.2` of `1.9.2-master-2024...-g1234567`),
    /// which is how agent versions compare.
    pub fn semver(&self) -> Option<semver::Version> {
        parse_agent_version(&self.version)
    }
}

/// Parse the leading `MAJOR.MINOR.PATCH` of an agent version string, ignoring
/// the `-<branch>-<stamp>-g<sha>` suffix Triton builds append (which is not a
/// valid semver pre-release in the ordering sense).
pub fn parse_agent_version(version: &str) -> Option<semver::Version> {
    let core = version.split(['-', '+']).next()?;
    semver::Version::parse(core).ok()
}

/// Build a version string in the real `<semver>-<branch>-<stamp>-g<sha>` form.
pub fn agent_version_string(semver: &str, branch: &str, stamp: &str, sha: &str) -> String {
    format!("{semver}-{branch}-{stamp}-g{sha}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_real_manifest_with_key_order() {
        let text = r#"{
  "v": 2,
  "uuid": "2d11ad57-389f-4eff-abcb-6dd51646cf80",
  "owner": "00000000-0000-0000-0000-000000000000",
  "name": "cn-agent",
  "version": "2.14.7-master-20220101T000000Z-g1234567",
  "state": "active",
  "disabled": false,
  "public": false,
  "published_at": "2026-11-22T11:48:42.491Z",
  "type": "other",
  "os": "other",
  "files": [
    {
      "sha1": "7d98eb6bdc07d85a863d88938aad9ab1198f2444",
      "size": 4119,
      "compression": "gzip"
    }
  ],
  "description": "Triton compute node agent",
  "tags": {
    "buildstamp": "master-20220101T000000Z-g1234567",
    "smartdc_service": "true"
  },
  "channels": [
    "dev"
  ]
}"#;
        let m: ImageManifest = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string_pretty(&m).unwrap(), text);
        assert_eq!(m.semver().unwrap(), semver::Version::new(2, 14, 7));
        assert_eq!(m.buildstamp(), Some("master-20220101T000000Z-g1234567"));
    }
}
