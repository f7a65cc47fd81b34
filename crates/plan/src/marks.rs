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
//!
//! The second copy (the *ledger*): an agent's postinstall, CNAPI's
//! install-agent path or another tool re-adopts an instance bare (`POST
//! /instances` with only its UUID: real SAPI replaces the whole object),
//! which erases a per-server mark for good. So every per-server mark is
//! also kept on the component's service, which no re-adoption touches, as
//! `params["agentsadm_hold:<server uuid>"]` (or `agentsadm_disabled:`):
//! the mark with the instance UUID it was put on. One key per server and
//! mark, so that setting one is a merge and clearing one a delete (no
//! read-modify-write), and a service's `params.image_uuid`, which sdcadm
//! reads, is left alone. A ledger mark counts only for the instance it
//! names (the one a re-adoption keeps): a server set up again gets new
//! instances, and an old mark never comes back on them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;
use agentsadm_types::sapi::{Instance, Service};

/// The params key of a hold.
pub const HOLD_PARAM: &str = "agentsadm_hold";
/// The params key of a disable.
pub const DISABLED_PARAM: &str = "agentsadm_disabled";

/// The longest `by`, `at` or `reason` kept from SAPI, in characters.
const FIELD_MAX: usize = 200;

/// The separator between a mark's params key and the server UUID in a
/// ledger key (`agentsadm_hold:<server>`).
const LEDGER_SEPARATOR: char = ':';

/// The ledger key of a per-server mark on the component's service.
pub fn ledger_key(param: &str, server: ServerUuid) -> String {
    format!("{param}{LEDGER_SEPARATOR}{server}")
}

/// The ledger value: the mark and the instance it was put on.
pub fn ledger_value(mark: &Mark, instance: InstanceUuid) -> serde_json::Value {
    let mut v = mark.to_value();
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "instance".into(),
            serde_json::Value::String(instance.to_string()),
        );
    }
    v
}

/// One per-server mark as the service's ledger keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerMark {
    /// [`HOLD_PARAM`] or [`DISABLED_PARAM`].
    pub param: &'static str,
    pub server: ServerUuid,
    /// The instance it was put on (`None`: unreadable, so it counts for
    /// no instance).
    pub instance: Option<InstanceUuid>,
    pub mark: Mark,
}

/// The per-server marks a service's params keep (hostile input: keys
/// that do not parse, and values that are no mark, are left out).
pub fn ledger_marks(
    params: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Vec<LedgerMark> {
    let Some(params) = params else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, value) in params {
        let Some((param, server)) = key.split_once(LEDGER_SEPARATOR) else {
            continue;
        };
        let param = match param {
            HOLD_PARAM => HOLD_PARAM,
            DISABLED_PARAM => DISABLED_PARAM,
            _ => continue,
        };
        let Ok(server) = server.parse::<ServerUuid>() else {
            continue;
        };
        let one = serde_json::Map::from_iter([(param.to_string(), value.clone())]);
        let Some(mark) = Mark::from_params(Some(&one), param) else {
            continue;
        };
        let instance = value
            .get("instance")
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse().ok());
        out.push(LedgerMark {
            param,
            server,
            instance,
            mark,
        });
    }
    out
}

/// A per-server mark only its instance keeps: the ledger copy that an
/// agentsadm from before the ledger never wrote (or a mark put on the
/// instance by hand).
#[derive(Clone, Debug, PartialEq)]
pub struct MissingCopy {
    /// The component's service, where the copy goes.
    pub service: ServiceUuid,
    /// The service's name, for what the run says.
    pub service_name: String,
    pub server: ServerUuid,
    pub instance: InstanceUuid,
    /// [`HOLD_PARAM`] or [`DISABLED_PARAM`].
    pub param: &'static str,
    pub mark: Mark,
}

impl MissingCopy {
    /// The service params key ([`ledger_key`]).
    pub fn key(&self) -> String {
        ledger_key(self.param, self.server)
    }

    /// The service params value ([`ledger_value`]).
    pub fn value(&self) -> serde_json::Value {
        ledger_value(&self.mark, self.instance)
    }
}

/// The ledger copies missing for the per-server marks SAPI's instances
/// carry: what agentsadm migrates itself, under the datacenter lock, when
/// a run moves records (the run's record move), so that an operator who
/// upgrades agentsadm owes it nothing.
///
/// Only an instance that names its server (`params.server_uuid`) and is
/// the only one of its service there is copied from: with two, which one
/// is the server's takes the servers' reports, so `check` (which reads
/// them) reports the mark and `check --fix` copies the one it keeps. A
/// copy that names another instance (the server was set up again) is
/// stale and is replaced, as `check --fix` would.
pub fn missing_copies(services: &[Service], instances: &[Instance]) -> Vec<MissingCopy> {
    let mut out = Vec::new();
    // As Intent::build reads them: the list was asked for agents, and a
    // service whose type SAPI leaves out is taken for one.
    for service in services
        .iter()
        .filter(|s| s.is_agent() || s.service_type.is_none())
    {
        let kept: Vec<LedgerMark> = ledger_marks(service.params.as_ref());
        let mut by_server: BTreeMap<ServerUuid, Vec<&Instance>> = BTreeMap::new();
        for inst in instances.iter().filter(|i| i.service_uuid == service.uuid) {
            if let Some(server) = inst.server_uuid() {
                by_server.entry(server).or_default().push(inst);
            }
        }
        for (server, here) in by_server {
            let [inst] = here.as_slice() else {
                continue;
            };
            for param in [HOLD_PARAM, DISABLED_PARAM] {
                let Some(mark) = Mark::from_params(inst.params.as_ref(), param) else {
                    continue;
                };
                let copied = kept.iter().any(|lm| {
                    lm.param == param && lm.server == server && lm.instance == Some(inst.uuid)
                });
                if !copied {
                    out.push(MissingCopy {
                        service: service.uuid,
                        service_name: service.name.clone(),
                        server,
                        instance: inst.uuid,
                        param,
                        mark,
                    });
                }
            }
        }
    }
    out
}

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

    #[test]
    fn the_ledger_keeps_marks_by_server_and_instance() {
        let server: ServerUuid = "44454c4c-4800-1034-804a-b2c04f354d31".parse().unwrap();
        let instance: InstanceUuid = "04a3fd8b-da16-4f8d-a003-06dc52f0a1e3".parse().unwrap();
        let mark = Mark {
            by: "alice".into(),
            at: "t".into(),
            reason: Some("case 7".into()),
        };
        let p = params(json!({
            "image_uuid": "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f",
            "agentsadm_hold": {"by": "bob", "at": "t"},
            (ledger_key(HOLD_PARAM, server)): ledger_value(&mark, instance),
            "agentsadm_disabled:not-a-uuid": {"by": "x"},
            "agentsadm_other:44454c4c-4800-1034-804a-b2c04f354d31": {"by": "x"},
            (ledger_key(DISABLED_PARAM, server)): null,
        }));
        let ledger = ledger_marks(Some(&p));
        assert_eq!(
            ledger,
            vec![LedgerMark {
                param: HOLD_PARAM,
                server,
                instance: Some(instance),
                mark,
            }]
        );
        assert_eq!(
            ledger_key(DISABLED_PARAM, server),
            "agentsadm_disabled:44454c4c-4800-1034-804a-b2c04f354d31"
        );
    }

    fn service(uuid: &str, params: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "uuid": uuid, "name": "vm-agent", "type": "agent",
            "application_uuid": "5ea1a5a6-7c38-4b5c-8b5f-b7f1a5d0e001",
            "params": params,
        }))
        .unwrap()
    }

    fn instance(uuid: &str, service: &str, params: serde_json::Value) -> Instance {
        serde_json::from_value(json!({
            "uuid": uuid, "service_uuid": service, "type": "agent", "params": params,
        }))
        .unwrap()
    }

    #[test]
    fn the_copies_missing_are_the_marks_only_one_instance_of_its_server_keeps() {
        let svc = "5e000000-0000-4000-8000-000000000001";
        let (cn1, cn2, cn3) = (
            "44454c4c-4800-1034-804a-000000000001",
            "44454c4c-4800-1034-804a-000000000002",
            "44454c4c-4800-1034-804a-000000000003",
        );
        let (i1, i2, i3a, i3b, old) = (
            "1a000000-0000-4000-8000-000000000001",
            "1a000000-0000-4000-8000-000000000002",
            "1a000000-0000-4000-8000-00000000003a",
            "1a000000-0000-4000-8000-00000000003b",
            "1a000000-0000-4000-8000-0000000000ff",
        );
        let hold = json!({"by": "alice", "at": "t", "reason": "case 7"});
        let mark = Mark::from_params(Some(&params(json!({HOLD_PARAM: hold.clone()}))), HOLD_PARAM)
            .unwrap();
        let cn2_uuid: ServerUuid = cn2.parse().unwrap();
        let cn1_uuid: ServerUuid = cn1.parse().unwrap();
        // cn1: a hold and a disable on the instance, the hold already
        // copied; cn2: a hold whose copy names an instance of before the
        // server was set up again; cn3: two instances (check's to judge).
        let services = [service(
            svc,
            json!({
                (ledger_key(HOLD_PARAM, cn1_uuid)): ledger_value(&mark, i1.parse().unwrap()),
                (ledger_key(HOLD_PARAM, cn2_uuid)): ledger_value(&mark, old.parse().unwrap()),
            }),
        )];
        let instances = [
            instance(
                i1,
                svc,
                json!({"server_uuid": cn1, HOLD_PARAM: hold.clone(), DISABLED_PARAM: hold.clone()}),
            ),
            instance(
                i2,
                svc,
                json!({"server_uuid": cn2, HOLD_PARAM: hold.clone()}),
            ),
            instance(
                i3a,
                svc,
                json!({"server_uuid": cn3, HOLD_PARAM: hold.clone()}),
            ),
            instance(i3b, svc, json!({"server_uuid": cn3})),
            // Bare, and a mark on an instance that names no server.
            instance("1a000000-0000-4000-8000-000000000004", svc, json!({})),
            instance(
                "1a000000-0000-4000-8000-000000000005",
                svc,
                json!({HOLD_PARAM: hold.clone()}),
            ),
        ];
        let got: Vec<(String, InstanceUuid)> = missing_copies(&services, &instances)
            .iter()
            .map(|c| (c.key(), c.instance))
            .collect();
        assert_eq!(
            got,
            vec![
                (ledger_key(DISABLED_PARAM, cn1_uuid), i1.parse().unwrap()),
                (ledger_key(HOLD_PARAM, cn2_uuid), i2.parse().unwrap()),
            ]
        );
        let c = &missing_copies(&services, &instances)[1];
        assert_eq!(c.value(), ledger_value(&mark, i2.parse().unwrap()));
        assert_eq!(c.service_name, "vm-agent");
        // Once copied, nothing is missing.
        let mut copied = services[0].params.clone().unwrap();
        for c in missing_copies(&services, &instances) {
            copied.insert(c.key(), c.value());
        }
        let services = [service(svc, serde_json::Value::Object(copied))];
        assert_eq!(missing_copies(&services, &instances), vec![]);
    }
}
