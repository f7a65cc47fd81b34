//! Intent: what SAPI says each server should run.
//!
//! - One `type=agent` service per managed component; its `params.image_uuid`
//!   is the default image for servers that have no instance yet.
//! - One `type=agent` instance per (server, component) with
//!   `params.server_uuid` and `params.image_uuid`.
//! - Legacy instances (adopted by agent postinstall scripts, no params) are
//!   tied to a server through CNAPI `server.agents[].uuid`; an instance no
//!   server reports stays unlinked (drift for `check`, never planned).
//! - Catalog components without a SAPI service are *unmanaged*: the
//!   orchestrator never touches them.
//!
//! SAPI cannot filter instances by server, so the caller lists `?type=agent`
//! once and this module indexes it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::marks::{DISABLED_PARAM, HOLD_PARAM, Holds, LedgerMark, Mark, ledger_marks};
use crate::reality::Reality;
use crate::types::MarkKey;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;
use agentsadm_types::sapi::Instance;
use agentsadm_types::sapi::Service;

/// A managed component's SAPI service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentService {
    pub uuid: ServiceUuid,
    pub name: ComponentName,
    /// `params.image_uuid`: what new servers get.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_image: Option<ImageUuid>,
}

/// How an instance was tied to its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceLink {
    /// `params.server_uuid`.
    Params,
    /// Legacy: the server reports this instance UUID in `server.agents`.
    Reported,
    /// `params.server_uuid` names another server (`named`), but this
    /// server, and only this one, reports the instance UUID: it is this
    /// server's instance, filed under the wrong server (its params are
    /// corrected, it is never deleted as the other's duplicate).
    Misfiled { named: ServerUuid },
}

/// The SAPI instance of one component on one server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InstanceIntent {
    pub uuid: InstanceUuid,
    pub service: ServiceUuid,
    /// `params.image_uuid`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageUuid>,
    pub link: InstanceLink,
}

impl InstanceIntent {
    /// Whether the instance already carries both params agentsadm writes.
    pub fn has_params(&self) -> bool {
        self.link == InstanceLink::Params && self.image.is_some()
    }
}

/// An extra instance for a (server, component) that already has one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DuplicateInstance {
    pub server: ServerUuid,
    pub component: ComponentName,
    pub uuid: InstanceUuid,
}

/// An agent instance no server can be found for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnlinkedInstance {
    pub component: ComponentName,
    pub uuid: InstanceUuid,
    /// `params.server_uuid` when it names a server CNAPI does not know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerUuid>,
}

/// SAPI's agent services and instances, indexed by component and server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Intent {
    /// Managed components, by component name.
    pub services: BTreeMap<ComponentName, AgentService>,
    /// Instances by server, then component.
    pub instances: BTreeMap<ServerUuid, BTreeMap<ComponentName, InstanceIntent>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub duplicates: Vec<DuplicateInstance>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlinked: Vec<UnlinkedInstance>,
    /// The service SAPI files each listed agent instance under, catalog
    /// component or not (for the adoption rule: a UUID recorded under
    /// another service is never taken over).
    #[serde(skip)]
    pub recorded: BTreeMap<InstanceUuid, ServiceUuid>,
    /// Holds (`params.agentsadm_hold` on services and instances).
    #[serde(skip_serializing_if = "Holds::is_empty")]
    pub holds: Holds,
    /// Components whose services must stay off, by server then component
    /// (`params.agentsadm_disabled` on the instance).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub disabled: BTreeMap<ServerUuid, BTreeMap<ComponentName, Mark>>,
    /// The per-server marks the service's ledger keeps for an instance
    /// that no longer carries them (a bare re-adoption erased them), by
    /// server then component. They count as marks all the same (in
    /// `holds` and `disabled`); `check` reports them and `--fix` writes
    /// them back.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lost_marks: BTreeMap<ServerUuid, BTreeMap<ComponentName, Vec<MarkKey>>>,
    /// The per-server marks only the instance keeps (no ledger copy for
    /// it: written by an agentsadm before it kept two, or by hand), by
    /// server then component: a bare re-adoption would erase them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub single_copy: BTreeMap<ServerUuid, BTreeMap<ComponentName, Vec<MarkKey>>>,
}

static NO_INTENT: Intent = Intent {
    services: BTreeMap::new(),
    instances: BTreeMap::new(),
    duplicates: Vec::new(),
    unlinked: Vec::new(),
    recorded: BTreeMap::new(),
    holds: Holds {
        services: BTreeMap::new(),
        servers: BTreeMap::new(),
    },
    disabled: BTreeMap::new(),
    lost_marks: BTreeMap::new(),
    single_copy: BTreeMap::new(),
};

impl Intent {
    /// No intent at all: no holds, nothing disabled (for the builder of a
    /// plan that moves no component: adoption, server records).
    pub fn none() -> &'static Intent {
        &NO_INTENT
    }

    /// Index SAPI's agent services and instances. Services that are not
    /// catalog components (e.g. `cabase`) and their instances are ignored.
    pub fn build(
        catalog: &Catalog,
        services: &[Service],
        instances: &[Instance],
        reality: &Reality,
    ) -> Intent {
        let mut intent = Intent::default();
        // Services sorted by UUID, so that with two services of one name the
        // choice does not depend on SAPI's listing order.
        let mut sorted: Vec<&Service> = services
            .iter()
            .filter(|s| s.is_agent() || s.service_type.is_none())
            .collect();
        sorted.sort_by_key(|s| s.uuid);
        let mut by_uuid: BTreeMap<ServiceUuid, ComponentName> = BTreeMap::new();
        for s in sorted {
            let Some(c) = catalog.get(&s.name) else {
                continue;
            };
            if intent.services.contains_key(&c.name) {
                continue;
            }
            by_uuid.insert(s.uuid, c.name.clone());
            if let Some(mark) = Mark::from_params(s.params.as_ref(), HOLD_PARAM) {
                intent.holds.services.insert(c.name.clone(), mark);
            }
            intent.services.insert(
                c.name.clone(),
                AgentService {
                    uuid: s.uuid,
                    name: c.name.clone(),
                    default_image: s.image_uuid(),
                },
            );
        }

        intent.recorded = instances.iter().map(|i| (i.uuid, i.service_uuid)).collect();
        let reported = reality.instance_index();
        let reporters = reality.reporters();
        let mut sorted: Vec<&Instance> = instances.iter().collect();
        sorted.sort_by_key(|i| i.uuid);
        for inst in sorted {
            let Some(component) = by_uuid.get(&inst.service_uuid) else {
                continue;
            };
            let (server, link) = match inst.server_uuid() {
                Some(s) => match reporters.get(&inst.uuid).map(Vec::as_slice) {
                    // Reported by one other server, as this component.
                    Some([(other, name)]) if *other != s && *name == component.as_str() => {
                        (Some(*other), InstanceLink::Misfiled { named: s })
                    }
                    _ => (Some(s), InstanceLink::Params),
                },
                None => (
                    reported
                        .get(&inst.uuid)
                        .filter(|(_, name)| *name == component.as_str())
                        .map(|(s, _)| *s),
                    InstanceLink::Reported,
                ),
            };
            let Some(server) = server.filter(|s| reality.servers.contains_key(s)) else {
                intent.unlinked.push(UnlinkedInstance {
                    component: component.clone(),
                    uuid: inst.uuid,
                    server: inst.server_uuid(),
                });
                continue;
            };
            let entry = InstanceIntent {
                uuid: inst.uuid,
                service: inst.service_uuid,
                image: inst.image_uuid(),
                link,
            };
            let per_server = intent.instances.entry(server).or_default();
            match per_server.get(component) {
                None => {
                    // The marks of the instance kept (a duplicate's are
                    // not read: `check` removes it).
                    for (key, marks) in [
                        (HOLD_PARAM, &mut intent.holds.servers),
                        (DISABLED_PARAM, &mut intent.disabled),
                    ] {
                        if let Some(mark) = Mark::from_params(inst.params.as_ref(), key) {
                            marks
                                .entry(server)
                                .or_default()
                                .insert(component.clone(), mark);
                        }
                    }
                    per_server.insert(component.clone(), entry);
                }
                Some(existing) => {
                    // Keep the instance the server itself reports; the other
                    // one is a duplicate for `check` to clean up.
                    let reported_uuid = reality
                        .get(&server)
                        .and_then(|s| s.components.get(component))
                        .and_then(|i| i.instance);
                    let (keep, extra) = if reported_uuid == Some(entry.uuid)
                        && reported_uuid != Some(existing.uuid)
                    {
                        (entry, existing.uuid)
                    } else {
                        (existing.clone(), entry.uuid)
                    };
                    per_server.insert(component.clone(), keep);
                    intent.duplicates.push(DuplicateInstance {
                        server,
                        component: component.clone(),
                        uuid: extra,
                    });
                }
            }
        }
        intent.apply_ledger(services);
        intent
    }

    /// The ledger's per-server marks that the instance they name lost:
    /// counted as marks, and listed in `lost_marks`. A mark the instance
    /// still carries is read from the instance (it may be newer).
    fn apply_ledger(&mut self, services: &[Service]) {
        // Each managed component's ledger, from the service kept for it.
        let ledger: BTreeMap<ComponentName, Vec<LedgerMark>> = self
            .services
            .iter()
            .filter_map(|(name, kept)| {
                let s = services.iter().find(|s| s.uuid == kept.uuid)?;
                Some((name.clone(), ledger_marks(s.params.as_ref())))
            })
            .collect();
        // The (server, component, mark) the ledger keeps for the kept
        // instance.
        let mut kept_twice: std::collections::BTreeSet<(ServerUuid, ComponentName, MarkKey)> =
            std::collections::BTreeSet::new();
        for (component, marks) in ledger {
            for lm in marks {
                let Some(kept) = self.instance(&lm.server, &component).map(|i| i.uuid) else {
                    continue;
                };
                if lm.instance != Some(kept) {
                    continue;
                }
                let (key, table) = if lm.param == HOLD_PARAM {
                    (MarkKey::Hold, &mut self.holds.servers)
                } else {
                    (MarkKey::Disabled, &mut self.disabled)
                };
                kept_twice.insert((lm.server, component.clone(), key));
                let per = table.entry(lm.server).or_default();
                if per.contains_key(&component) {
                    continue;
                }
                per.insert(component.clone(), lm.mark);
                self.lost_marks
                    .entry(lm.server)
                    .or_default()
                    .entry(component.clone())
                    .or_default()
                    .push(key);
            }
        }
        for (key, table) in [
            (MarkKey::Hold, &self.holds.servers),
            (MarkKey::Disabled, &self.disabled),
        ] {
            for (server, marks) in table {
                for component in marks.keys() {
                    if !kept_twice.contains(&(*server, component.clone(), key)) {
                        self.single_copy
                            .entry(*server)
                            .or_default()
                            .entry(component.clone())
                            .or_default()
                            .push(key);
                    }
                }
            }
        }
    }

    /// The marks only the instance of `component` on `server` keeps (no
    /// second copy on the service).
    pub fn single_copy(&self, server: &ServerUuid, component: &str) -> &[MarkKey] {
        self.single_copy
            .get(server)
            .and_then(|m| m.get(component))
            .map_or(&[], Vec::as_slice)
    }

    /// The marks the ledger keeps that the instance of `component` on
    /// `server` lost.
    pub fn lost_marks(&self, server: &ServerUuid, component: &str) -> &[MarkKey] {
        self.lost_marks
            .get(server)
            .and_then(|m| m.get(component))
            .map_or(&[], Vec::as_slice)
    }

    /// The marks (with their values) the ledger keeps that the instance of
    /// `component` on `server` lost.
    pub fn lost_mark_values(&self, server: &ServerUuid, component: &str) -> Vec<(MarkKey, Mark)> {
        self.lost_marks(server, component)
            .iter()
            .filter_map(|key| {
                let mark = match key {
                    MarkKey::Hold => self.holds.servers.get(server)?.get(component),
                    MarkKey::Disabled => self.disabled(server, component),
                };
                mark.map(|m| (*key, m.clone()))
            })
            .collect()
    }

    /// Whether the component has a SAPI service.
    pub fn is_managed(&self, component: &str) -> bool {
        self.services.contains_key(component)
    }

    pub fn instance(&self, server: &ServerUuid, component: &str) -> Option<&InstanceIntent> {
        self.instances.get(server)?.get(component)
    }

    /// The image SAPI intends for this component on this server: the
    /// instance's `params.image_uuid`, else the service default.
    pub fn intended_image(&self, server: &ServerUuid, component: &str) -> Option<ImageUuid> {
        self.instance(server, component)
            .and_then(|i| i.image)
            .or_else(|| self.services.get(component)?.default_image)
    }

    /// Whether the component's services must stay off on the server, and
    /// who said so.
    pub fn disabled(&self, server: &ServerUuid, component: &str) -> Option<&Mark> {
        self.disabled.get(server)?.get(component)
    }

    /// Duplicate instance UUIDs of one (server, component).
    pub fn duplicates_of<'a>(
        &'a self,
        server: &'a ServerUuid,
        component: &'a str,
    ) -> impl Iterator<Item = InstanceUuid> + 'a {
        self.duplicates
            .iter()
            .filter(move |d| d.server == *server && d.component == component)
            .map(|d| d.uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_types::cnapi::Server;
    use serde_json::json;

    const CN1: &str = "44454c4c-4800-1034-804a-b2c04f354d31";
    const SVC: &str = "2e52bcfe-c61e-482f-a072-f3c79018a3db";
    const IMG: &str = "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f";

    fn reality() -> Reality {
        let s: Server = serde_json::from_value(json!({
            "uuid": CN1, "hostname": "cn1", "setup": true, "status": "running",
            "agents": [{"name": "vm-agent", "version": "1", "image_uuid": IMG,
                        "uuid": "04a3fd8b-da16-4f8d-a003-06dc52f0a1e3"}]
        }))
        .unwrap();
        Reality::from_servers(&Catalog::builtin(), &[s])
    }

    fn service(name: &str, uuid: &str) -> Service {
        serde_json::from_value(json!({
            "uuid": uuid, "name": name,
            "application_uuid": "26cc7f2b-77ed-427f-8f09-d43d32a7331b",
            "params": {"image_uuid": IMG}, "type": "agent"
        }))
        .unwrap()
    }

    fn instance(uuid: &str, params: serde_json::Value) -> Instance {
        serde_json::from_value(json!({
            "uuid": uuid, "service_uuid": SVC, "params": params, "type": "agent"
        }))
        .unwrap()
    }

    #[test]
    fn links_legacy_instances_through_cnapi() {
        let r = reality();
        let legacy = instance("04a3fd8b-da16-4f8d-a003-06dc52f0a1e3", json!({}));
        let orphan = instance("0badf00d-da16-4f8d-a003-06dc52f0a1e3", json!({}));
        let intent = Intent::build(
            &Catalog::builtin(),
            &[service("vm-agent", SVC), service("cabase", IMG)],
            &[legacy, orphan],
            &r,
        );
        let server: ServerUuid = CN1.parse().unwrap();
        let inst = intent.instance(&server, "vm-agent").unwrap();
        assert_eq!(inst.link, InstanceLink::Reported);
        assert!(!inst.has_params());
        assert_eq!(
            intent.intended_image(&server, "vm-agent"),
            Some(IMG.parse().unwrap())
        );
        assert_eq!(intent.unlinked.len(), 1);
        assert!(intent.is_managed("vm-agent"));
        assert!(!intent.is_managed("cn-agent"));
        assert_eq!(intent.services.len(), 1);
    }

    #[test]
    fn keeps_the_reported_instance_of_duplicates() {
        let r = reality();
        let params = json!({"server_uuid": CN1, "image_uuid": IMG});
        // Sorted first by UUID, but not the one the server reports.
        let a = instance("00000000-da16-4f8d-a003-06dc52f0a1e3", params.clone());
        let b = instance("04a3fd8b-da16-4f8d-a003-06dc52f0a1e3", params);
        let intent = Intent::build(
            &Catalog::builtin(),
            &[service("vm-agent", SVC)],
            &[a, b],
            &r,
        );
        let server: ServerUuid = CN1.parse().unwrap();
        assert_eq!(
            intent
                .instance(&server, "vm-agent")
                .unwrap()
                .uuid
                .to_string(),
            "04a3fd8b-da16-4f8d-a003-06dc52f0a1e3"
        );
        assert_eq!(intent.duplicates_of(&server, "vm-agent").count(), 1);
    }
}
