//! Reality: what each server runs, as CNAPI reports it (`server.agents`, or
//! sysinfo `SDC Agents` on old servers), indexed for the planner.
//!
//! CNAPI reports apm package names (`marlin`, not `marlin-agent`); entries are
//! mapped to catalog components here, so the planner only ever sees component
//! names. Entries that are not in the catalog (`cabase`, hand-installed
//! packages) are kept aside for `list`, never planned.

use std::collections::BTreeMap;

use serde::Serialize;

use agentsadm_types::agents::AgentEntry;

use agentsadm_types::catalog::Catalog;
use agentsadm_types::cnapi::Server;
use agentsadm_types::component::{ComponentName, ComponentVersion};
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

/// One installed component on one server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Installed {
    pub version: ComponentVersion,
    /// Absent when only sysinfo `SDC Agents` reported the component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageUuid>,
    /// The SAPI instance UUID the server keeps for it (`etc/<name>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceUuid>,
}

/// One server as the planner needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerState {
    pub uuid: ServerUuid,
    pub hostname: String,
    pub headnode: bool,
    /// CNAPI `rack_identifier`, when set (not empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    pub setup: bool,
    /// CNAPI `status`: `running`, `unknown`, `rebooting` (or absent).
    pub status: String,
    /// Catalog components the server reports, by component name.
    pub components: BTreeMap<ComponentName, Installed>,
    /// Reported packages that are not catalog components.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<AgentEntry>,
    /// A mockcloud CN (CNAPI `system_type` `Virtual`, from its sysinfo
    /// `System Type`): it has no Ur and its cn-agent does not implement
    /// `command_execute`, so CNAPI execute never reaches it; only
    /// cn-agent's tasks do.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mockcloud: bool,
    /// What makes the server's report unusable (`server.agents[3]: uuid
    /// "zz" is not a UUID`, a component listed twice), naming the field:
    /// the server is set aside (no plan touches it, `check` reports only
    /// this) while every other server goes on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<String>,
}

impl ServerState {
    pub fn is_running(&self) -> bool {
        self.status == "running"
    }

    /// Whether the server's report is unusable ([`ServerState::quarantine`]).
    pub fn is_quarantined(&self) -> bool {
        self.quarantine.is_some()
    }

    /// Whether CNAPI execute (`agentsadm gz` on the server) reaches it.
    pub fn has_execute(&self) -> bool {
        !self.mockcloud
    }

    /// `hostname (uuid)`, the way servers are named in messages.
    pub fn label(&self) -> String {
        format!(
            "{} ({})",
            agentsadm_types::output::clip(&self.hostname, 64),
            self.uuid
        )
    }
}

/// Every server CNAPI knows, by UUID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Reality {
    pub servers: BTreeMap<ServerUuid, ServerState>,
}

impl Reality {
    /// Index a ServerList answer (requested with `extras=agents`).
    pub fn from_servers(catalog: &Catalog, servers: &[Server]) -> Reality {
        let mut out = BTreeMap::new();
        for s in servers {
            out.insert(s.uuid, server_state(catalog, s));
        }
        Reality { servers: out }
    }

    pub fn get(&self, uuid: &ServerUuid) -> Option<&ServerState> {
        self.servers.get(uuid)
    }

    /// Which server reports which instance UUID, for matching legacy SAPI
    /// instances that carry no `params.server_uuid`.
    pub fn instance_index(&self) -> BTreeMap<InstanceUuid, (ServerUuid, &str)> {
        let mut index = BTreeMap::new();
        for s in self.servers.values() {
            for (name, inst) in &s.components {
                if let Some(i) = inst.instance {
                    index.insert(i, (s.uuid, name.as_str()));
                }
            }
        }
        index
    }
}

impl Reality {
    /// Every server that reports each instance UUID, with the component:
    /// one instance UUID should have one server.
    pub fn reporters(&self) -> BTreeMap<InstanceUuid, Vec<(ServerUuid, &str)>> {
        let mut out: BTreeMap<InstanceUuid, Vec<(ServerUuid, &str)>> = BTreeMap::new();
        for s in self.servers.values() {
            for (name, inst) in &s.components {
                if let Some(i) = inst.instance {
                    out.entry(i).or_default().push((s.uuid, name.as_str()));
                }
            }
        }
        out
    }
}

fn server_state(catalog: &Catalog, s: &Server) -> ServerState {
    let mut components = BTreeMap::new();
    let mut foreign: Vec<AgentEntry> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    // Where each name was first listed: a second listing is a problem, and
    // the first one is the answer everywhere (list, check, plans).
    let mut first: BTreeMap<ComponentName, usize> = BTreeMap::new();
    let (entries, unreadable) = s.reported_agents();
    problems.extend(unreadable.iter().map(ToString::to_string));
    // Each entry's place in the list as reported, bad entries included.
    let places = (0..).filter(|k| !unreadable.iter().any(|p| p.index == *k));
    for (i, entry) in places.zip(entries) {
        let component = catalog.get(&entry.name);
        let name = component.map_or_else(|| entry.name.clone(), |c| c.name.clone());
        if let Some(j) = first.get(&name) {
            problems.push(format!(
                "server.agents lists {name} twice (entries {j} and {i})"
            ));
            continue;
        }
        first.insert(name.clone(), i);
        match component {
            Some(_) => {
                components.insert(
                    name,
                    Installed {
                        version: entry.version.clone(),
                        image: entry.image_uuid,
                        instance: entry.uuid,
                    },
                );
            }
            None => foreign.push(entry),
        }
    }
    let quarantine = match problems.len() {
        0 => None,
        1 => Some(problems.remove(0)),
        n => Some(format!("{} (and {} more)", problems[0], n - 1)),
    };
    ServerState {
        uuid: s.uuid,
        // CNAPI's, echoed in every table and message: bounded.
        hostname: agentsadm_types::output::clip(&s.hostname, MAX_HOSTNAME),
        headnode: s.headnode,
        rack: s
            .extra
            .get("rack_identifier")
            .and_then(|v| v.as_str())
            .filter(|r| !r.is_empty())
            .map(str::to_string),
        setup: s.setup,
        status: s.status.clone().unwrap_or_else(|| "unknown".to_string()),
        components,
        foreign,
        mockcloud: system_type(s) == Some(MOCKCLOUD_SYSTEM_TYPE),
        quarantine,
    }
}

/// The longest hostname kept as is (a DNS name's limit).
const MAX_HOSTNAME: usize = 255;

/// What a mockcloud CN reports as its system type.
const MOCKCLOUD_SYSTEM_TYPE: &str = "Virtual";

/// CNAPI's `system_type`, else sysinfo's `System Type` when the answer
/// carries sysinfo.
fn system_type(s: &Server) -> Option<&str> {
    s.extra
        .get("system_type")
        .and_then(|v| v.as_str())
        .or_else(|| s.sysinfo.as_ref()?.get("System Type")?.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_package_names_and_keeps_foreign_entries() {
        let s: Server = serde_json::from_value(json!({
            "uuid": "44454c4c-4800-1034-804a-b2c04f354d31", "hostname": "cn1",
            "setup": true, "status": "running",
            "agents": [
                {"name": "marlin", "version": "1.0.0"},
                {"name": "cabase", "version": "1.0.0"},
                {"name": "vm-agent", "version": "2.0.0",
                 "image_uuid": "11111111-1111-4111-8111-111111111111",
                 "uuid": "22222222-2222-4222-8222-222222222222"}
            ]
        }))
        .unwrap();
        let r = Reality::from_servers(&Catalog::builtin(), &[s]);
        let st = r.servers.values().next().unwrap();
        assert!(st.components.contains_key("marlin-agent"));
        assert!(st.components.contains_key("vm-agent"));
        assert_eq!(st.foreign.len(), 1);
        assert_eq!(r.instance_index().len(), 1);
        assert!(st.is_running());
        assert!(st.has_execute());
    }

    #[test]
    fn mockcloud_servers_have_no_execute() {
        let server = |extra: serde_json::Value| -> Server {
            let mut v = json!({
                "uuid": "44454c4c-4800-1034-804a-b2c04f354d31", "hostname": "cn1",
                "setup": true, "status": "running"
            });
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::from_value(v).unwrap()
        };
        let cat = Catalog::builtin();
        for (extra, execute) in [
            (json!({"system_type": "Virtual"}), false),
            (json!({"sysinfo": {"System Type": "Virtual"}}), false),
            (json!({"system_type": "SunOS"}), true),
            (json!({}), true),
        ] {
            let r = Reality::from_servers(&cat, &[server(extra.clone())]);
            let st = r.servers.values().next().unwrap();
            assert_eq!(st.has_execute(), execute, "{extra}");
        }
    }
}
