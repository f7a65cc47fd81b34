//! The CNAPI server record as agentsadm reads it (docs/triton/apis.md §3):
//! the typed fields, `server.agents` read leniently ([`crate::agents`]),
//! and the rest kept in `extra`. The planner reads it (reality is built
//! from it) and the CNAPI client in `agentsadm-api` fetches it, so it sits
//! here, below both.

use serde::{Deserialize, Serialize};

use crate::agents::{AgentEntry, AgentProblem};
use crate::ids::ServerUuid;

/// A CNAPI server record. Only the fields agentsadm reads are typed; the
/// rest is kept in `extra`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "ServerWire")]
pub struct Server {
    pub uuid: ServerUuid,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub headnode: bool,
    #[serde(default)]
    pub setup: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting_up: Option<bool>,
    /// `running`, `unknown` or `rebooting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datacenter: Option<String>,
    /// The well-formed entries of `server.agents`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<AgentEntry>>,
    /// The entries of `server.agents` that are not what cn-agent reports
    /// (a hostile name, a UUID that is not one): the server is set aside.
    #[serde(skip)]
    pub agent_problems: Vec<AgentProblem>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysinfo: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vms: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<String>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A server record as CNAPI sends it: `agents` still raw, so that one bad
/// entry is set aside ([`crate::agents::read_agents`]) instead of making
/// the whole answer unreadable.
#[derive(Deserialize)]
struct ServerWire {
    uuid: ServerUuid,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    headnode: bool,
    #[serde(default)]
    setup: bool,
    #[serde(default)]
    setting_up: Option<bool>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    datacenter: Option<String>,
    #[serde(default)]
    agents: Option<serde_json::Value>,
    #[serde(default)]
    sysinfo: Option<serde_json::Value>,
    #[serde(default)]
    vms: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    last_heartbeat: Option<String>,
    #[serde(flatten)]
    extra: serde_json::Map<String, serde_json::Value>,
}

impl From<ServerWire> for Server {
    fn from(w: ServerWire) -> Server {
        let (agents, agent_problems) = match w.agents {
            None | Some(serde_json::Value::Null) => (None, Vec::new()),
            Some(list) => {
                let (agents, problems) = crate::agents::read_agents(&list);
                (Some(agents), problems)
            }
        };
        Server {
            uuid: w.uuid,
            hostname: w.hostname,
            headnode: w.headnode,
            setup: w.setup,
            setting_up: w.setting_up,
            status: w.status,
            datacenter: w.datacenter,
            agents,
            agent_problems,
            sysinfo: w.sysinfo,
            vms: w.vms,
            last_heartbeat: w.last_heartbeat,
            extra: w.extra,
        }
    }
}

impl Server {
    pub fn is_running(&self) -> bool {
        self.status.as_deref() == Some("running")
    }

    /// What is installed, the way sdcadm reads it: `server.agents`, else
    /// sysinfo `SDC Agents` (which lacks image and instance UUIDs); with
    /// the entries of that list that are not agent entries.
    pub fn reported_agents(&self) -> (Vec<AgentEntry>, Vec<AgentProblem>) {
        if let Some(agents) = &self.agents
            && (!agents.is_empty() || !self.agent_problems.is_empty())
        {
            return (agents.clone(), self.agent_problems.clone());
        }
        match self.sysinfo.as_ref().and_then(|s| s.get("SDC Agents")) {
            Some(list) if list.is_array() => crate::agents::read_agents(list),
            _ => (Vec::new(), Vec::new()),
        }
    }

    /// Number of VMs, when `vms` was requested.
    pub fn vm_count(&self) -> usize {
        self.vms.as_ref().map(|v| v.len()).unwrap_or(0)
    }

    /// The `cn-agent` entry of `server.agents`, which is where CNAPI looks
    /// (never sysinfo's `SDC Agents`) before execute and uninstall-agents.
    pub fn cn_agent(&self) -> Option<&AgentEntry> {
        self.agents.as_ref()?.iter().find(|a| a.name == "cn-agent")
    }

    /// The version of [`Server::cn_agent`] as CNAPI compares it (its
    /// node-semver: a build's `-<branch>-<stamp>-g<sha>` is a pre-release,
    /// below its release), when it reads as one. Every use of it asks what
    /// CNAPI will decide (execute path, uninstall floor).
    pub fn cn_agent_version(&self) -> Option<semver::Version> {
        crate::version::parse_as_node_semver(&self.cn_agent()?.version)
    }

    /// A mockcloud CN (CNAPI `system_type` `Virtual`): no Ur, and its
    /// cn-agent does not implement `command_execute`.
    pub fn is_mockcloud(&self) -> bool {
        self.extra.get("system_type").and_then(|v| v.as_str()) == Some("Virtual")
    }
}
