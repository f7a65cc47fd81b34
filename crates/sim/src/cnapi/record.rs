//! CNAPI's server record: the Moray object the simulator keeps per server,
//! the sysinfo its platform reports, and the projection ServerList and
//! ServerGet answer with (optional groups, CNAPI's key order).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::fleet::MockServer;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_types::ids::ServerUuid;

/// Whether CNAPI hears the server's cn-agent (`status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerStatus {
    Running,
    /// No heartbeat: task routes answer ServerNotRunning.
    Unknown,
}

impl ServerStatus {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerStatus::Running => "running",
            ServerStatus::Unknown => "unknown",
        }
    }
}

/// A CNAPI server record (the Moray object plus computed fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerRecord {
    pub uuid: ServerUuid,
    pub hostname: String,
    pub datacenter: String,
    pub headnode: bool,
    pub setup: bool,
    pub setting_up: bool,
    pub reserved: bool,
    pub reservoir: bool,
    pub status: ServerStatus,
    pub transitional_status: String,
    pub boot_platform: String,
    pub current_platform: String,
    /// MiB.
    pub ram: u64,
    pub reservation_ratio: f64,
    pub overprovision_ratios: Map<String, Value>,
    pub traits: Map<String, Value>,
    pub rack_identifier: String,
    pub comments: String,
    pub boot_params: Map<String, Value>,
    pub kernel_flags: Map<String, Value>,
    pub default_console: String,
    pub serial: String,
    pub created: String,
    pub last_boot: String,
    #[serde(default)]
    pub next_reboot: Option<String>,
    pub agents: Vec<AgentEntry>,
    /// `agents` exactly as a ServerUpdate posted them, when some entry
    /// was not what cn-agent reports: the real CNAPI checks only that
    /// `agents` is an array, and serves back whatever it stored. Served
    /// while `agents` is still what it was read as.
    #[serde(default)]
    pub agents_posted: Option<Vec<Value>>,
    pub vms: Map<String, Value>,
    pub admin_ip: String,
    pub cpu_cores: u32,
    /// A mockcloud CN that, as real ones, has no execute: it reports
    /// `System Type` `Virtual` (sysinfo and CNAPI's `system_type`), which
    /// is how CNAPI's clients tell mockcloud CNs apart.
    #[serde(default)]
    pub mockcloud: bool,
}

/// Which optional groups a server is projected with.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Groups {
    pub agents: bool,
    pub vms: bool,
    pub memory: bool,
    pub disk: bool,
    pub sysinfo: bool,
    pub capacity: bool,
    pub last_heartbeat: bool,
}

impl Groups {
    pub(super) fn all() -> Groups {
        Groups {
            agents: true,
            vms: true,
            memory: true,
            disk: true,
            sysinfo: true,
            capacity: true,
            last_heartbeat: true,
        }
    }
}

impl ServerRecord {
    pub(crate) fn new(server: &MockServer, datacenter: &str, setup: bool) -> ServerRecord {
        let boot = "2026-01-01T00:00:00.000Z".to_string();
        ServerRecord {
            uuid: server.uuid,
            hostname: server.hostname.clone(),
            datacenter: datacenter.to_string(),
            headnode: server.headnode,
            setup,
            setting_up: false,
            reserved: false,
            reservoir: false,
            status: ServerStatus::Running,
            transitional_status: String::new(),
            boot_platform: "20260101T000000Z".to_string(),
            current_platform: "20260101T000000Z".to_string(),
            ram: if server.headnode { 65_503 } else { 262_111 },
            reservation_ratio: 0.15,
            overprovision_ratios: Map::from_iter([("ram".to_string(), json!(1))]),
            traits: Map::new(),
            rack_identifier: String::new(),
            comments: String::new(),
            boot_params: Map::from_iter([(
                "rabbitmq".to_string(),
                json!("guest:guest:10.99.99.20:5672"),
            )]),
            kernel_flags: Map::new(),
            default_console: "serial".to_string(),
            serial: "ttyb".to_string(),
            created: boot.clone(),
            last_boot: boot,
            next_reboot: None,
            agents: Vec::new(),
            agents_posted: None,
            vms: Map::new(),
            admin_ip: server.admin_ip.clone(),
            cpu_cores: if server.headnode { 16 } else { 48 },
            mockcloud: false,
        }
    }

    /// sysinfo's `System Type` (and CNAPI's `system_type`).
    fn system_type(&self) -> &'static str {
        if self.mockcloud { "Virtual" } else { "SunOS" }
    }

    /// The sysinfo the platform reports (subset of the real one).
    pub fn sysinfo(&self) -> Value {
        json!({
            "Live Image": self.current_platform,
            "System Type": self.system_type(),
            "Boot Time": "1767225600",
            "Datacenter Name": self.datacenter,
            "SDC Version": "7.0",
            "Manufacturer": "Joyent",
            "Product": "agentsadm simulated server",
            "Serial Number": format!("SIM{}", &self.uuid.to_string()[..8].to_uppercase()),
            "Setup": if self.setup { "true" } else { "false" },
            "VM Capable": true,
            "CPU Type": "Intel(R) Xeon(R) CPU E5-2690 v4 @ 2.60GHz",
            "CPU Virtualization": "vmx",
            "CPU Physical Cores": 2,
            "UUID": self.uuid,
            "Hostname": self.hostname,
            "CPU Total Cores": self.cpu_cores,
            "MiB of Memory": self.ram.to_string(),
            "Zpool": "zones",
            "Zpool Disks": "c0t0d0,c0t1d0",
            "Zpool Profile": "mirror",
            "Zpool Creation": 1767225600u64,
            "Zpool Size in GiB": 3600,
            "Disks": {"c0t0d0": {"Size in GB": 4000}, "c0t1d0": {"Size in GB": 4000}},
            "Boot Parameters": {
                "headnode": if self.headnode { "true" } else { "false" },
                "rabbitmq": "guest:guest:10.99.99.20:5672",
                "console": "ttyb"
            },
            "Network Interfaces": {
                "ixgbe0": {
                    "MAC Address": mac_for(&self.uuid),
                    "ip4addr": self.admin_ip,
                    "Link Status": "up",
                    "NIC Names": ["admin"]
                }
            },
            "Virtual Network Interfaces": {},
            "Link Aggregations": {},
        })
    }

    /// The record projected as ServerList/ServerGet return it, keys in
    /// CNAPI's order.
    pub(super) fn to_json(&self, g: Groups, now: &str) -> Value {
        let mut o = Map::new();
        let mut put = |k: &str, v: Value| {
            o.insert(k.to_string(), v);
        };
        put("uuid", json!(self.uuid));
        put("hostname", json!(self.hostname));
        put("datacenter", json!(self.datacenter));
        put("headnode", json!(self.headnode));
        put("setup", json!(self.setup));
        put("setting_up", json!(self.setting_up));
        put("reserved", json!(self.reserved));
        put("reservoir", json!(self.reservoir));
        put("status", json!(self.status.as_str()));
        put("transitional_status", json!(self.transitional_status));
        put("boot_platform", json!(self.boot_platform));
        put("current_platform", json!(self.current_platform));
        put("ram", json!(self.ram));
        put("reservation_ratio", json!(self.reservation_ratio));
        if !self.overprovision_ratios.is_empty() {
            put("overprovision_ratios", json!(self.overprovision_ratios));
        }
        put("traits", json!(self.traits));
        put("rack_identifier", json!(self.rack_identifier));
        put("comments", json!(self.comments));
        put("boot_params", json!(self.boot_params));
        put("kernel_flags", json!(self.kernel_flags));
        put("default_console", json!(self.default_console));
        put("serial", json!(self.serial));
        put("created", json!(self.created));
        put("last_boot", json!(self.last_boot));
        put("system_type", json!(self.system_type()));
        if let Some(n) = &self.next_reboot {
            put("next_reboot", json!(n));
        }
        if g.last_heartbeat {
            let hb = (self.status == ServerStatus::Running).then(|| now.to_string());
            put("last_heartbeat", json!(hb));
        }
        if g.agents {
            let posted = self.agents_posted.as_ref().filter(|raw| {
                agentsadm_api::agents::read_agents(&Value::Array(raw.to_vec())).0 == self.agents
            });
            match posted {
                Some(raw) => put("agents", Value::Array(raw.clone())),
                None => put("agents", json!(self.agents)),
            }
        }
        if g.sysinfo {
            put("sysinfo", self.sysinfo());
        }
        if g.vms {
            put("vms", json!(self.vms));
        }
        let total = self.ram * 1024 * 1024;
        if g.memory {
            put("memory_available_bytes", json!(total / 2));
            put("memory_arc_bytes", json!(total / 8));
            put("memory_total_bytes", json!(total));
            put("memory_provisionable_bytes", json!(total * 3 / 4));
        }
        if g.disk {
            put("disk_cores_quota_bytes", json!(0));
            put("disk_cores_quota_used_bytes", json!(0));
            put("disk_installed_images_used_bytes", json!(1_073_741_824u64));
            put("disk_kvm_quota_bytes", json!(0));
            put("disk_kvm_quota_used_bytes", json!(0));
            put("disk_kvm_zvol_used_bytes", json!(0));
            put("disk_kvm_zvol_volsize_bytes", json!(0));
            put("disk_pool_alloc_bytes", json!(107_374_182_400u64));
            put("disk_pool_size_bytes", json!(3_865_470_566_400u64));
            put("disk_system_used_bytes", json!(10_737_418_240u64));
            put("disk_zone_quota_bytes", json!(0));
            put("disk_zone_quota_used_bytes", json!(0));
        }
        if g.capacity {
            let vms = self.vms.len() as u64;
            put(
                "unreserved_cpu",
                json!(self.cpu_cores as u64 * 100 - vms * 100),
            );
            put(
                "unreserved_ram",
                json!((self.ram as f64 * (1.0 - self.reservation_ratio)) as u64 - vms * 1024),
            );
            put("unreserved_disk", json!(3_500_000u64 - vms * 25_600));
        }
        Value::Object(o)
    }
}

fn mac_for(uuid: &ServerUuid) -> String {
    let b = uuid.as_uuid().as_bytes();
    format!("00:10:fe:{:02x}:{:02x}:{:02x}", b[13], b[14], b[15])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projection_groups() {
        let spec = crate::fleet::generate(1, 1).remove(1);
        let server = MockServer::from_spec(spec, std::path::Path::new("/nonexistent"));
        let rec = ServerRecord::new(&server, "coal", true);
        let bare = rec.to_json(Groups::default(), "t");
        assert!(bare.get("status").is_some());
        for k in [
            "sysinfo",
            "agents",
            "vms",
            "last_heartbeat",
            "memory_total_bytes",
        ] {
            assert!(bare.get(k).is_none(), "{k}");
        }
        let all = rec.to_json(Groups::all(), "t");
        assert_eq!(all["sysinfo"]["Setup"], "true");
        assert_eq!(all["sysinfo"]["Boot Parameters"]["headnode"], "false");
        assert!(all.get("unreserved_cpu").is_some());
        let keys: Vec<&String> = all.as_object().unwrap().keys().collect();
        assert_eq!(keys[0], "uuid");
        assert_eq!(keys[1], "hostname");
    }
}
