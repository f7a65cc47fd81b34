//! The operator's marks on SAPI agent records, beside the image intent:
//! a *hold* (leave the component where it is: no bulk change moves it)
//! and a *disable* (keep the component's SMF services off on a server,
//! whatever an upgrade's postinstall enables).
//!
//! Where they live: in `params` of the agent's SAPI records, as
//! `params.agentsadm_hold` and `params.agentsadm_disabled`, each an object
//! `{"by": WHO, "at": WHEN, "reason": WHY}` (visible with `sdc-sapi
//! /instances/UUID`). Params, not metadata: metadata is merged into
//! config-agent's configuration of every zone and validated against the
//! application's `metadata_schema`; params are provisioning data no agent
//! reads, the same place agentsadm keeps `image_uuid` and `server_uuid`.
//! A hold on the instance holds one server; a hold on the service holds
//! the component datacenter-wide, new servers included (they get the
//! service's params). A disable is per server only (the instance).
//!
//! SAPI is hostile input: a mark that is not an object still counts (the
//! safe reading of "someone marked this"), with its fields unknown; every
//! field is bounded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::ServerUuid;

/// The params key of a hold.
pub const HOLD_PARAM: &str = "agentsadm_hold";
/// The params key of a disable.
pub const DISABLED_PARAM: &str = "agentsadm_disabled";

/// The longest `by`, `at` or `reason` kept from SAPI, in characters.
const FIELD_MAX: usize = 200;

/// Who marked, when and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Mark {
    pub by: String,
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Mark {
    /// The mark under `key` in a record's params, if any. `null` and
    /// `false` are no mark; anything else that is not an object is a mark
    /// with unknown fields.
    pub fn from_params(
        params: Option<&serde_json::Map<String, serde_json::Value>>,
        key: &str,
    ) -> Option<Mark> {
        let value = params?.get(key)?;
        let field = |name: &str| {
            value
                .get(name)
                .and_then(|v| v.as_str())
                .map(|s| s.chars().take(FIELD_MAX).collect::<String>())
        };
        match value {
            serde_json::Value::Null | serde_json::Value::Bool(false) => None,
            _ => Some(Mark {
                by: field("by").unwrap_or_else(|| "unknown".into()),
                at: field("at").unwrap_or_else(|| "unknown".into()),
                reason: field("reason").filter(|r| !r.is_empty()),
            }),
        }
    }

    /// The value written to SAPI.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// `by alice at 2026-11-26T10:00:00Z: support case 123`.
    pub fn describe(&self) -> String {
        match &self.reason {
            Some(r) => format!("by {} at {}: {r}", self.by, self.at),
            None => format!("by {} at {} (no reason given)", self.by, self.at),
        }
    }
}

/// Where a hold was put.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HoldScope {
    /// On the server's instance.
    Server,
    /// On the service: every server, new ones too.
    Datacenter,
}

impl HoldScope {
    pub fn as_str(&self) -> &'static str {
        match self {
            HoldScope::Server => "on this server",
            HoldScope::Datacenter => "datacenter-wide",
        }
    }
}

/// Every hold in SAPI, by component.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Holds {
    /// Datacenter-wide holds (on the service), by component.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub services: BTreeMap<ComponentName, Mark>,
    /// Holds on one server's instance, by server then component.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub servers: BTreeMap<ServerUuid, BTreeMap<ComponentName, Mark>>,
}

impl Holds {
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.servers.is_empty()
    }

    /// The hold on the component on the server: the server's own first,
    /// else the datacenter-wide one.
    pub fn get(&self, server: &ServerUuid, component: &str) -> Option<(HoldScope, &Mark)> {
        self.servers
            .get(server)
            .and_then(|m| m.get(component))
            .map(|m| (HoldScope::Server, m))
            .or_else(|| {
                self.services
                    .get(component)
                    .map(|m| (HoldScope::Datacenter, m))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn marks_read_from_hostile_params() {
        let p = params(json!({"agentsadm_hold": {"by": "alice", "at": "t", "reason": "case 7"}}));
        let m = Mark::from_params(Some(&p), HOLD_PARAM).unwrap();
        assert_eq!(m.describe(), "by alice at t: case 7");
        assert_eq!(Mark::from_params(Some(&p), DISABLED_PARAM), None);
        let odd = params(json!({"agentsadm_hold": true, "agentsadm_disabled": null}));
        let m = Mark::from_params(Some(&odd), HOLD_PARAM).unwrap();
        assert_eq!((m.by.as_str(), m.reason), ("unknown", None));
        assert_eq!(Mark::from_params(Some(&odd), DISABLED_PARAM), None);
        let long = params(json!({"agentsadm_hold": {"by": "x".repeat(5000)}}));
        let m = Mark::from_params(Some(&long), HOLD_PARAM).unwrap();
        assert_eq!(m.by.len(), FIELD_MAX);
        assert_eq!(Mark::from_params(None, HOLD_PARAM), None);
    }
}
