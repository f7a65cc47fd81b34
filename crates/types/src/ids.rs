//! Typed UUIDs for the Triton objects agentsadm handles, so a server UUID can
//! never be passed where an image UUID is expected.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A UUID that is not of the form Triton accepts.
#[derive(Debug, thiserror::Error)]
#[error("malformed {kind} UUID {input:?}: expected 8-4-4-4-12 hex digits")]
pub struct ParseIdError {
    /// What the UUID was meant to identify ("server", "image", ...).
    pub kind: &'static str,
    /// The text that failed to parse.
    pub input: String,
}

macro_rules! typed_uuid {
    ($(#[$meta:meta])* $name:ident, $kind:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// What this UUID identifies, for messages.
            pub const KIND: &'static str = $kind;

            /// A new random (v4) UUID.
            pub fn new_v4() -> Self {
                Self(Uuid::new_v4())
            }

            /// A fixed UUID from a number; deterministic fixtures and tests.
            pub const fn from_u128(n: u128) -> Self {
                Self(Uuid::from_u128(n))
            }

            /// The underlying UUID.
            pub fn as_uuid(&self) -> &Uuid {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0.hyphenated())
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                parse_hyphenated(s)
                    .map(Self)
                    .ok_or_else(|| ParseIdError { kind: $kind, input: s.to_string() })
            }
        }
    };
}

/// Triton only ever writes UUIDs in the hyphenated 36-character form; the
/// `uuid` crate also accepts simple and braced forms, which we refuse so that
/// a typo is not silently accepted as a different spelling.
fn parse_hyphenated(s: &str) -> Option<Uuid> {
    if s.len() != 36 {
        return None;
    }
    Uuid::try_parse(s).ok()
}

typed_uuid!(
    /// A server (headnode or compute node), CNAPI `server.uuid` / sysinfo `UUID`.
    ServerUuid,
    "server"
);
typed_uuid!(
    /// An IMGAPI image; for agents also the content of `<name>/image_uuid`.
    ImageUuid,
    "image"
);
typed_uuid!(
    /// A SAPI instance; for agents the content of `/opt/smartdc/agents/etc/<name>`.
    InstanceUuid,
    "instance"
);
typed_uuid!(
    /// A SAPI service.
    ServiceUuid,
    "service"
);
typed_uuid!(
    /// A SAPI application (the `sdc` application).
    ApplicationUuid,
    "application"
);
typed_uuid!(
    /// A CNAPI task (install-agent, uninstall-agents).
    TaskId,
    "task"
);
typed_uuid!(
    /// A workflow job (server setup, factory reset).
    JobUuid,
    "job"
);
typed_uuid!(
    /// One run of a changing command, as the run history records it.
    RunId,
    "run"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_only_hyphenated() {
        let ok: ServerUuid = "44454c4c-4800-1034-804a-b2c04f354d31".parse().unwrap();
        assert_eq!(ok.to_string(), "44454c4c-4800-1034-804a-b2c04f354d31");
        let err = "44454c4c48001034804ab2c04f354d31"
            .parse::<ServerUuid>()
            .unwrap_err();
        assert!(err.to_string().contains("malformed server UUID"));
        assert!("nope".parse::<ImageUuid>().is_err());
    }
}
