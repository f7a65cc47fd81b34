//! A component's name and version as they cross a boundary (catalog, API
//! answers, the headnode<->server wire, plans, the installer's entry
//! points). A name becomes a path component on every server
//! (`node_modules/<name>`, `etc/<name>`) and a SAPI service name, so it is
//! checked once, where it is read, and carried as [`ComponentName`] from
//! then on; a version is kept exactly as published ([`ComponentVersion`]).

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

use crate::version::VersionKey;

/// The longest component name accepted (real ones are at most 21 bytes:
/// `firewall-logger-agent`).
pub const MAX_COMPONENT_NAME: usize = 64;
/// The longest component version accepted (Triton's stamped builds,
/// `<semver>-<branch>-<YYYYMMDDTHHMMSSZ>-g<sha>`, are about 40 bytes).
pub const MAX_COMPONENT_VERSION: usize = 128;
/// How much of a refused input an error echoes.
const ECHO: usize = 60;

/// A component name: what a catalog component, an IMGAPI image, a SAPI
/// service, a `server.agents[].name` and a `node_modules` directory are
/// called (`cn-agent`, `agents_core`, `marlin`, `gz-tools`).
///
/// The rule: 1 to [`MAX_COMPONENT_NAME`] bytes of lowercase ASCII letters,
/// digits, `-` and `_`, starting with a letter or digit. So `/`, `.`,
/// `..`, whitespace, NUL, upper case and a leading `-` (an option to a
/// command) can never reach a path or a command line.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ComponentName(String);

/// A string that is not a component name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a component name: use 1 to {MAX_COMPONENT_NAME} lowercase letters, digits, '-' and '_', starting with a letter or digit (e.g. vm-agent)"
)]
pub struct ComponentNameError {
    /// The refused input, clipped and with control characters escaped by
    /// `{:?}`.
    pub input: String,
}

impl ComponentName {
    /// Check `name` against the rule.
    pub fn new(name: impl Into<String>) -> Result<ComponentName, ComponentNameError> {
        let name = name.into();
        if is_component_name(&name) {
            Ok(ComponentName(name))
        } else {
            Err(ComponentNameError {
                input: crate::output::clip(&name, ECHO),
            })
        }
    }

    /// A name known at compile time (tests, fixtures, the catalog's own
    /// components). Panics when `name` breaks the rule: a programming
    /// error, never input.
    #[track_caller]
    pub fn from_static(name: &'static str) -> ComponentName {
        match ComponentName::new(name) {
            Ok(n) => n,
            Err(e) => panic!("{e}"),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// The rule of [`ComponentName`].
fn is_component_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_COMPONENT_NAME
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_')
}

impl AsRef<std::path::Path> for ComponentName {
    fn as_ref(&self) -> &std::path::Path {
        std::path::Path::new(&self.0)
    }
}

impl AsRef<std::ffi::OsStr> for ComponentName {
    fn as_ref(&self) -> &std::ffi::OsStr {
        std::ffi::OsStr::new(&self.0)
    }
}

impl PartialEq<ComponentName> for &ComponentName {
    fn eq(&self, other: &ComponentName) -> bool {
        **self == *other
    }
}

impl PartialEq<&ComponentName> for ComponentName {
    fn eq(&self, other: &&ComponentName) -> bool {
        *self == **other
    }
}

impl PartialEq<ComponentName> for str {
    fn eq(&self, other: &ComponentName) -> bool {
        self == other.0
    }
}

impl PartialEq<ComponentName> for &str {
    fn eq(&self, other: &ComponentName) -> bool {
        *self == other.0
    }
}

impl PartialEq<ComponentName> for String {
    fn eq(&self, other: &ComponentName) -> bool {
        *self == other.0
    }
}

/// A component's version as reported (`server.agents[].version`, a
/// `package.json`) and published (an IMGAPI manifest's `version`): kept
/// exactly as given, since it must round-trip on the wire — `2.15.0`,
/// `1.0.0-master-20261126T072930Z-g3df32ef`, gz-tools' own stamps.
///
/// Empty means unknown (what cn-agent and sysinfo write when they cannot
/// read a version), so the wire has one spelling for it and this type
/// carries it ([`ComponentVersion::is_unknown`]); `Option` is used only
/// where the field itself may be absent. Otherwise at most
/// [`MAX_COMPONENT_VERSION`] bytes without control characters: a version
/// is shown everywhere and written into logs.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ComponentVersion(String);

/// A string that is not a component version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a component version: use at most {MAX_COMPONENT_VERSION} characters without control characters (e.g. 2.15.0)"
)]
pub struct ComponentVersionError {
    /// The refused input, clipped.
    pub input: String,
}

impl ComponentVersion {
    /// Check `version` (any bounded printable text, `""` for unknown).
    pub fn new(version: impl Into<String>) -> Result<ComponentVersion, ComponentVersionError> {
        let version = version.into();
        if version.len() <= MAX_COMPONENT_VERSION && !version.chars().any(char::is_control) {
            Ok(ComponentVersion(version))
        } else {
            Err(ComponentVersionError {
                input: crate::output::clip(&version, ECHO),
            })
        }
    }

    /// The version nobody could read.
    pub fn unknown() -> ComponentVersion {
        ComponentVersion(String::new())
    }

    /// A version known at compile time; panics when it breaks the rule.
    #[track_caller]
    pub fn from_static(version: &'static str) -> ComponentVersion {
        match ComponentVersion::new(version) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    /// A version as a server reports it in a result: `None` when unknown
    /// (empty) or not a version at all, since a result only shows it.
    pub fn reported(version: &str) -> Option<ComponentVersion> {
        ComponentVersion::new(version)
            .ok()
            .filter(|v| !v.is_unknown())
    }

    pub fn is_unknown(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether it is a version an installed package may carry: known, and
    /// only ASCII letters, digits and `._-+~`, as semver and Triton's
    /// `<semver>-<branch>-<stamp>-g<sha>` use. A package's postinstall
    /// substitutes it into SMF manifests, so no markup, quote or space
    /// may get there.
    pub fn is_plain(&self) -> bool {
        !self.is_unknown()
            && self
                .0
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-+~".contains(&b))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// How it orders against other builds, when it starts with a semver.
    pub fn key(&self) -> Option<VersionKey> {
        VersionKey::of(&self.0)
    }

    /// Its semver (the leading one of a stamped build), if any.
    pub fn semver(&self) -> Option<semver::Version> {
        crate::image::parse_agent_version(&self.0)
    }
}

/// What both checked strings share: made only through their `new` (from
/// text, a `String`, or while decoding), read as a `str`.
macro_rules! checked_string {
    ($name:ident, $error:ident) => {
        impl FromStr for $name {
            type Err = $error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = $error;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                $name::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = $error;
            fn try_from(s: &str) -> Result<Self, Self::Error> {
                $name::new(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let s = String::deserialize(d)?;
                $name::new(s).map_err(serde::de::Error::custom)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        /// Read-only access as a `str` (comparisons, formatting, map
        /// lookups); there is no way to change one in place.
        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        /// So a `BTreeMap<Self, _>` is looked up with a `&str`.
        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }
    };
}

checked_string!(ComponentName, ComponentNameError);
checked_string!(ComponentVersion, ComponentVersionError);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Names of real Triton agents and tools, and of the real packages in
    /// the shared fixtures.
    const REAL: &[&str] = &[
        "cn-agent",
        "vm-agent",
        "net-agent",
        "config-agent",
        "agents_core",
        "marlin-agent",
        "marlin",
        "cabase",
        "gz-tools",
        "dockerlogger",
        "sdcadm",
        "agentsadm",
        "amon-relay",
        "smartlogin",
        "hagfish-watcher",
        "cmon-agent",
        "firewaller",
        "firewall-logger-agent",
    ];

    #[test]
    fn real_names_are_component_names() {
        for name in REAL {
            let n: ComponentName = name.parse().unwrap();
            assert_eq!(n.to_string(), *name);
            assert_eq!(n, *name);
        }
    }

    #[test]
    fn names_that_could_leave_a_directory_or_mislead_are_refused() {
        let long = "a".repeat(MAX_COMPONENT_NAME + 1);
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "/etc",
            "A B",
            "a b",
            " vm-agent",
            "vm-agent\n",
            "vm\0agent",
            "VM-agent",
            "-rf",
            "_private",
            "vm.agent",
            "vm-agént",
            long.as_str(),
        ] {
            let err = bad.parse::<ComponentName>().unwrap_err();
            assert!(
                err.to_string().contains("is not a component name"),
                "{bad:?}"
            );
            assert!(err.to_string().contains("lowercase letters"), "{bad:?}");
        }
        assert!(ComponentName::new("a".repeat(MAX_COMPONENT_NAME)).is_ok());
        // The error echoes a bounded, escaped input.
        let err = ComponentName::new("x".repeat(10_000)).unwrap_err();
        assert!(err.input.len() < 100);
        let err = ComponentName::new("a\u{1b}[2J").unwrap_err();
        assert!(!err.to_string().contains('\u{1b}'));
    }

    #[test]
    fn names_round_trip_on_the_wire_and_bad_ones_are_refused_at_decode() {
        let n: ComponentName = serde_json::from_str("\"cn-agent\"").unwrap();
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"cn-agent\"");
        for bad in ["\"../x\"", "\"A B\"", "\"\"", "42"] {
            assert!(serde_json::from_str::<ComponentName>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_hyphenated_uuid_is_a_component_name() {
        // What stands for a SAPI service whose name is gone (cleanup).
        let uuid = crate::ids::ServiceUuid::new_v4().to_string();
        assert!(ComponentName::new(uuid).is_ok());
    }

    #[test]
    fn a_name_map_is_looked_up_by_str() {
        let mut map = BTreeMap::new();
        map.insert(ComponentName::from_static("vm-agent"), 1);
        assert_eq!(map.get("vm-agent"), Some(&1));
        assert_eq!(map.get("net-agent"), None);
    }

    #[test]
    fn versions_are_kept_exactly_and_ordered_when_they_can_be() {
        for v in [
            "2.15.0",
            "1.0.0-master-20261126T072930Z-g3df32ef",
            "20261126T072930Z",
            "release-20150224-20150224T225433Z-10a1e6c",
            "",
        ] {
            let parsed: ComponentVersion = serde_json::from_value(serde_json::json!(v)).unwrap();
            assert_eq!(serde_json::to_value(&parsed).unwrap(), serde_json::json!(v));
            assert_eq!(parsed, v);
        }
        let stamped = ComponentVersion::from_static("1.0.0-master-20261126T072930Z-g3df32ef");
        assert_eq!(stamped.semver(), Some(semver::Version::new(1, 0, 0)));
        assert_eq!(stamped.key().unwrap().built, "20261126T072930Z");
        let gz_tools = ComponentVersion::from_static("release-20150224-20150224T225433Z-10a1e6c");
        assert_eq!(gz_tools.key(), None);
        assert!(ComponentVersion::unknown().is_unknown());
        assert_eq!(ComponentVersion::unknown().key(), None);
        assert!(ComponentVersion::new("x".repeat(MAX_COMPONENT_VERSION + 1)).is_err());
        assert!(ComponentVersion::new("1.0\n").is_err());
        assert!(stamped.is_plain() && gz_tools.is_plain());
        for not_plain in ["", "1\"/><x", "1 2", "1&2"] {
            assert!(
                !ComponentVersion::from_static(not_plain).is_plain(),
                "{not_plain}"
            );
        }
        assert!(serde_json::from_str::<ComponentVersion>("\"1\\u0000\"").is_err());
    }
}
