//! The simulated CNAPI (docs/triton/apis.md §3): server records, cn-agent
//! tasks and their runner, command execution, setup, factory reset and
//! delete.
//!
//! Reproduced: strict parameter checks (unknown parameter → 409
//! InvalidArgument; type failures → 500 InvalidParameters; `limit` outside
//! 1..1000 → 400), ServerList projection of `extras`/`fields` in `uuid`
//! order with `limit` (default 1000) and `offset`, `ServerNotRunning` 409 on
//! task routes when `status != running`, install-agent answering `{id}` at
//! once with the task going `active` → `complete`/`failure` in the history
//! shapes of §3.6, TaskWait answering 200 with the still-`active` task on
//! timeout, ServerUpdate 204, ServerSetup 202/204, FactoryReset 202 or a
//! 409 whose body is a bare JSON string, ServerDelete 200 with an empty
//! body, and CommandExecute's `{exitCode, stdout, stderr}` with `json`.
//!
//! cn-agent's own upgrade behaves as the real one (agent-install.md §3.4):
//! the task completes once the image is fetched, cn-agent restarts, and
//! `server.agents` shows the new image [`super::SimConfig::cn_agent_restart_ms`]
//! later. (The inference that the task may instead fail because the
//! connection is cut is not what CNAPI's docs or sdcadm assume; callers
//! must confirm through `server.agents` either way.)

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::core::DcCore;
use super::fleet::MockServer;
use super::http::{
    ApiInfo, JsonStyle, bad_method, empty, json_response, merge_params, not_found_route,
    parse_query, rest_error, rest_error_fields,
};
use super::imgapi::iso_millis;
use crate::api::cnapi::{AgentEntry, ExecuteRequest, Task, TaskEvent, TaskStatus};
use crate::error::error_chain;
use crate::ids::{ImageUuid, JobUuid, ServerUuid, TaskId};
use crate::remote::{GzFailure, GzResult};

const STYLE: JsonStyle = JsonStyle::Compact;

/// ServerList's page bounds (and default).
pub const LIST_MAX_LIMIT: usize = 1000;

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
    /// `running` or `unknown`.
    pub status: String,
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
    pub vms: Map<String, Value>,
    pub admin_ip: String,
    pub cpu_cores: u32,
}

/// Which optional groups a server is projected with.
#[derive(Clone, Copy, Debug, Default)]
struct Groups {
    agents: bool,
    vms: bool,
    memory: bool,
    disk: bool,
    sysinfo: bool,
    capacity: bool,
    last_heartbeat: bool,
}

impl Groups {
    fn all() -> Groups {
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
            status: "running".to_string(),
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
            vms: Map::new(),
            admin_ip: server.admin_ip.clone(),
            cpu_cores: if server.headnode { 16 } else { 48 },
        }
    }

    /// The sysinfo the platform reports (subset of the real one).
    pub fn sysinfo(&self) -> Value {
        json!({
            "Live Image": self.current_platform,
            "System Type": "SunOS",
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
    fn to_json(&self, g: Groups, now: &str) -> Value {
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
        put("status", json!(self.status));
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
        put("system_type", json!("SunOS"));
        if let Some(n) = &self.next_reboot {
            put("next_reboot", json!(n));
        }
        if g.last_heartbeat {
            let hb = (self.status == "running").then(|| now.to_string());
            put("last_heartbeat", json!(hb));
        }
        if g.agents {
            put("agents", json!(self.agents));
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

/// One task and the channel its waiters listen on.
pub(crate) struct TaskEntry {
    pub task: Task,
    done: watch::Sender<bool>,
}

/// The simulated CNAPI's data.
pub(crate) struct CnapiState {
    pub info: Arc<ApiInfo>,
    pub servers: Mutex<BTreeMap<ServerUuid, ServerRecord>>,
    pub tasks: Mutex<HashMap<TaskId, TaskEntry>>,
}

impl CnapiState {
    pub(crate) fn new(info: Arc<ApiInfo>) -> CnapiState {
        CnapiState {
            info,
            servers: Mutex::new(BTreeMap::new()),
            tasks: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn servers(&self) -> MutexGuard<'_, BTreeMap<ServerUuid, ServerRecord>> {
        self.servers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<TaskId, TaskEntry>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record a new `active` task.
    pub(crate) fn new_task(&self, server: ServerUuid, name: &str, req_id: &str) -> TaskId {
        let id = TaskId::new_v4();
        let task = Task {
            id,
            req_id: Some(req_id.to_string()),
            task: name.to_string(),
            server_uuid: server,
            status: TaskStatus::Active,
            timestamp: iso_millis(SystemTime::now()),
            history: None,
        };
        let (done, _) = watch::channel(false);
        self.tasks().insert(id, TaskEntry { task, done });
        id
    }

    /// Finish a task: `Ok` completes it, `Err(message)` fails it, with the
    /// history entries cn-agent's answer produces.
    pub(crate) fn finish_task(&self, id: TaskId, result: Result<(), String>) {
        let mut tasks = self.tasks();
        let Some(entry) = tasks.get_mut(&id) else {
            return;
        };
        let now = iso_millis(SystemTime::now());
        let req_id = entry.task.req_id.clone().unwrap_or_default();
        match result {
            Ok(()) => {
                entry.task.status = TaskStatus::Complete;
                entry.task.history = Some(vec![TaskEvent {
                    name: "finish".into(),
                    timestamp: now,
                    event: json!({"req_id": req_id}),
                }]);
            }
            Err(message) => {
                entry.task.status = TaskStatus::Failure;
                entry.task.history = Some(vec![
                    TaskEvent {
                        name: "error".into(),
                        timestamp: now.clone(),
                        event: json!({"error": {"message": message}}),
                    },
                    TaskEvent {
                        name: "finish".into(),
                        timestamp: now,
                        event: json!({}),
                    },
                ]);
            }
        }
        entry.done.send_replace(true);
    }

    pub(crate) fn task(&self, id: TaskId) -> Option<Task> {
        self.tasks().get(&id).map(|e| e.task.clone())
    }

    fn subscribe(&self, id: TaskId) -> Option<(Task, watch::Receiver<bool>)> {
        self.tasks()
            .get(&id)
            .map(|e| (e.task.clone(), e.done.subscribe()))
    }

    /// Set `server.agents` (what cn-agent's refreshAgents POSTs).
    pub(crate) fn set_agents(&self, server: ServerUuid, agents: Vec<AgentEntry>) {
        if let Some(r) = self.servers().get_mut(&server) {
            r.agents = agents;
        }
    }
}

type Core = State<Arc<DcCore>>;

pub(crate) fn router(core: Arc<DcCore>) -> Router {
    Router::new()
        .route("/ping", get(ping))
        .route("/info", get(info))
        .route("/servers", get(list_servers))
        .route(
            "/servers/{uuid}",
            get(get_server).post(update_server).delete(delete_server),
        )
        .route("/servers/{uuid}/setup", put(setup_server))
        .route("/servers/{uuid}/factory-reset", put(factory_reset))
        .route("/servers/{uuid}/install-agent", post(install_agent))
        .route("/servers/{uuid}/uninstall-agents", post(uninstall_agents))
        .route("/servers/{uuid}/execute", post(execute))
        .route("/tasks/{id}", get(get_task))
        .route("/tasks/{id}/wait", get(wait_task))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(core)
}

async fn fallback(uri: Uri) -> Response {
    not_found_route(STYLE, uri.path())
}

async fn method_not_allowed(method: Method) -> Response {
    bad_method(STYLE, &method)
}

async fn ping() -> Response {
    json_response(
        STYLE,
        StatusCode::OK,
        &json!({"ready": true, "services": {"workflow": "online", "moray": "online", "amqp": "online"}}),
    )
}

async fn info() -> Response {
    json_response(STYLE, StatusCode::OK, &json!({"version": "1.26.6"}))
}

fn invalid_argument(message: impl Into<String>) -> Response {
    rest_error(STYLE, StatusCode::CONFLICT, "InvalidArgument", message)
}

/// `ensureParamsValid`'s failure body (HTTP 500 for type checks).
fn invalid_parameters(status: StatusCode, errors: Vec<(&str, String)>) -> Response {
    let errors: Vec<Value> = errors
        .into_iter()
        .map(|(f, m)| json!({"field": f, "code": "Invalid", "message": m}))
        .collect();
    rest_error_fields(
        STYLE,
        status,
        "InvalidParameters",
        "Request parameters failed validation",
        Value::Array(errors),
    )
}

/// Request parameters merged like restify's `mapParams` (path and query
/// win over body keys).
fn params(
    server_uuid: Option<&str>,
    raw_query: Option<&str>,
    body: &Bytes,
) -> Result<Map<String, Value>, Response> {
    let mut map = merge_params(STYLE, raw_query, body)?;
    if let Some(u) = server_uuid {
        map.insert("server_uuid".into(), Value::String(u.to_string()));
    }
    Ok(map)
}

/// The strict check: any parameter not in `allowed` is a 409.
fn strict(p: &Map<String, Value>, allowed: &[&str]) -> Result<(), Response> {
    match p.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(invalid_argument(format!(
            "{k} is not an explicitly defined parameter"
        ))),
        None => Ok(()),
    }
}

/// Find the server of a `/servers/:uuid` route (CNAPI's prepopulate).
fn prepopulate(core: &DcCore, raw: &str) -> Result<ServerRecord, Response> {
    let uuid: ServerUuid = raw
        .parse()
        .map_err(|_| invalid_argument("Invalid server_uuid"))?;
    core.cnapi.servers().get(&uuid).cloned().ok_or_else(|| {
        rest_error(
            STYLE,
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            format!("Server {uuid} not found"),
        )
    })
}

/// The start of every task endpoint, in CNAPI's order: the server record
/// (bad or unknown UUID), then whether its cn-agent is heard (not running:
/// no task), then the request's parameters.
fn task_request(
    core: &DcCore,
    raw: &str,
    raw_query: Option<&str>,
    body: &Bytes,
) -> Result<(ServerRecord, Map<String, Value>), Response> {
    let rec = prepopulate(core, raw)?;
    require_running(&rec)?;
    let p = params(Some(raw), raw_query, body)?;
    Ok((rec, p))
}

fn require_running(rec: &ServerRecord) -> Result<(), Response> {
    if rec.status == "running" {
        Ok(())
    } else {
        Err(rest_error(
            STYLE,
            StatusCode::CONFLICT,
            "ServerNotRunning",
            "Operation attempted on server which is not running",
        ))
    }
}

fn bool_param(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

fn list_regex_ok(s: &str) -> bool {
    !s.is_empty()
        && s.split(',')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_'))
}

async fn list_servers(State(core): Core, RawQuery(rq): RawQuery) -> Response {
    let p = match params(None, rq.as_deref(), &Bytes::new()) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Err(r) = strict(
        &p,
        &[
            "uuids",
            "setup",
            "headnode",
            "reserved",
            "reservoir",
            "hostname",
            "extras",
            "fields",
            "limit",
            "offset",
        ],
    ) {
        return r;
    }
    let s = |k: &str| p.get(k).and_then(Value::as_str);
    let mut errors = Vec::new();
    let mut bools: BTreeMap<&str, bool> = BTreeMap::new();
    for key in ["setup", "headnode", "reserved", "reservoir"] {
        if let Some(v) = p.get(key) {
            match bool_param(v) {
                Some(b) => {
                    bools.insert(key, b);
                }
                None => errors.push((key, "Invalid value".to_string())),
            }
        }
    }
    for key in ["extras", "fields"] {
        if s(key).is_some_and(|v| !list_regex_ok(v)) {
            errors.push((key, "Invalid value".to_string()));
        }
    }
    if let Some(u) = s("uuids") {
        let ok = u
            .split(',')
            .all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        if !ok {
            errors.push(("uuids", "Invalid value".to_string()));
        }
    }
    let parse_int = |key: &'static str, errors: &mut Vec<(&str, String)>| -> Option<i64> {
        let v = s(key)?;
        match v.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.push((key, "Invalid integer".to_string()));
                None
            }
        }
    };
    let limit = parse_int("limit", &mut errors);
    let offset = parse_int("offset", &mut errors);
    if !errors.is_empty() {
        return invalid_parameters(StatusCode::INTERNAL_SERVER_ERROR, errors);
    }
    if let Some(l) = limit
        && !(1..=LIST_MAX_LIMIT as i64).contains(&l)
    {
        return invalid_parameters(
            StatusCode::BAD_REQUEST,
            vec![(
                "limit",
                format!("limit must be in the range 1-{LIST_MAX_LIMIT} (inclusive)"),
            )],
        );
    }
    let limit = limit.unwrap_or(LIST_MAX_LIMIT as i64) as usize;
    let offset = offset.unwrap_or(0).max(0) as usize;
    let groups = match s("extras") {
        None => Groups::default(),
        Some(e) => {
            let mut g = Groups {
                last_heartbeat: true,
                ..Groups::default()
            };
            for x in e.split(',') {
                match x {
                    "agents" => g.agents = true,
                    "vms" => g.vms = true,
                    "memory" => g.memory = true,
                    "disk" => g.disk = true,
                    "sysinfo" => g.sysinfo = true,
                    "capacity" => g.capacity = true,
                    "all" => g = Groups::all(),
                    _ => {}
                }
            }
            g
        }
    };
    let uuids: Option<Vec<&str>> = s("uuids").map(|u| u.split(',').map(str::trim).collect());
    let hostname = s("hostname");
    let now = iso_millis(SystemTime::now());
    let servers = core.cnapi.servers();
    let fields: Option<Vec<&str>> = s("fields").map(|f| f.split(',').collect());
    let out: Vec<Value> = servers
        .values()
        .filter(|r| {
            uuids
                .as_ref()
                .is_none_or(|u| u.contains(&r.uuid.to_string().as_str()))
        })
        .filter(|r| hostname.is_none_or(|h| r.hostname == h))
        .filter(|r| {
            bools.iter().all(|(k, want)| match *k {
                "setup" => r.setup == *want,
                "headnode" => r.headnode == *want,
                "reserved" => r.reserved == *want,
                _ => r.reservoir == *want,
            })
        })
        .skip(offset)
        .take(limit)
        .map(|r| {
            let v = r.to_json(groups, &now);
            match &fields {
                None => v,
                Some(f) => {
                    let obj = v.as_object().cloned().unwrap_or_default();
                    Value::Object(
                        f.iter()
                            .filter_map(|k| obj.get(*k).map(|x| (k.to_string(), x.clone())))
                            .collect(),
                    )
                }
            }
        })
        .collect();
    json_response(STYLE, StatusCode::OK, &out)
}

async fn get_server(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
) -> Response {
    let rec = match prepopulate(&core, &raw) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let p = match params(Some(&raw), rq.as_deref(), &Bytes::new()) {
        Ok(p) => p,
        Err(r) => return r,
    };
    // Strict: even `extras` is refused on ServerGet.
    if let Err(r) = strict(&p, &["server_uuid"]) {
        return r;
    }
    let now = iso_millis(SystemTime::now());
    json_response(STYLE, StatusCode::OK, &rec.to_json(Groups::all(), &now))
}

async fn update_server(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    if let Err(r) = prepopulate(&core, &raw) {
        return r;
    }
    let p = match params(Some(&raw), rq.as_deref(), &body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    const KEYS: [(&str, &str); 21] = [
        ("agents", "array"),
        ("boot_params", "object"),
        ("boot_platform", "string"),
        ("comments", "string"),
        ("datacenter", "string"),
        ("default_console", "string"),
        ("etag_retries", "number"),
        ("next_reboot", "string"),
        ("nics", "array"),
        ("overprovision_ratios", "object"),
        ("rack_identifier", "string"),
        ("reservation_ratio", "number"),
        ("reserved", "boolean"),
        ("reservoir", "boolean"),
        ("serial", "string"),
        ("server_uuid", "string"),
        ("setting_up", "boolean"),
        ("setup", "boolean"),
        ("traits", "object"),
        ("transitional_status", "string"),
        ("hostname", "never"),
    ];
    let allowed: Vec<&str> = KEYS
        .iter()
        .filter(|(_, t)| *t != "never")
        .map(|(k, _)| *k)
        .collect();
    if let Err(r) = strict(&p, &allowed) {
        return r;
    }
    let mut errors = Vec::new();
    for (key, ty) in KEYS {
        let Some(v) = p.get(key) else { continue };
        let (ok, msg) = match ty {
            "array" => (v.is_array(), "value was not an array"),
            "object" => (v.is_object(), "value was not an object"),
            "string" => (v.is_string(), "value was not a string"),
            "number" => (v.is_number(), "value was not a number"),
            "boolean" => (v.is_boolean(), "value was not true or false"),
            _ => (true, ""),
        };
        if !ok {
            errors.push((key, msg.to_string()));
        }
    }
    if !errors.is_empty() {
        // Type-check failures are HTTP 500 in CNAPI (a quirk kept here).
        return invalid_parameters(StatusCode::INTERNAL_SERVER_ERROR, errors);
    }
    let agents: Option<Vec<AgentEntry>> = match p.get("agents") {
        Some(a) => match serde_json::from_value(a.clone()) {
            Ok(a) => Some(a),
            Err(e) => {
                return invalid_parameters(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    vec![("agents", format!("invalid agent entry: {e}"))],
                );
            }
        },
        None => None,
    };
    if let Some(n) = p.get("next_reboot").and_then(Value::as_str) {
        let canonical = humantime::parse_rfc3339_weak(n)
            .ok()
            .map(iso_millis)
            .filter(|c| c == n);
        if canonical.is_none() {
            return invalid_argument(format!("next_reboot {n} is not a valid ISO date"));
        }
    }
    if let Some(o) = p.get("overprovision_ratios").and_then(Value::as_object) {
        let bad = o.iter().any(|(k, v)| {
            !["cpu", "ram", "disk", "io", "net"].contains(&k.as_str())
                || !v.as_f64().is_some_and(|x| x >= 0.0)
        });
        if bad {
            return invalid_argument("invalid overprovision_ratios");
        }
    }
    let uuid: ServerUuid = match raw.parse() {
        Ok(u) => u,
        Err(_) => return invalid_argument("Invalid server_uuid"),
    };
    {
        let mut servers = core.cnapi.servers();
        let Some(r) = servers.get_mut(&uuid) else {
            return rest_error(
                STYLE,
                StatusCode::NOT_FOUND,
                "ResourceNotFound",
                format!("Server {uuid} not found"),
            );
        };
        let str_of = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_string);
        if let Some(a) = agents {
            r.agents = a;
        }
        if let Some(v) = p.get("boot_params").and_then(Value::as_object) {
            r.boot_params = v.clone();
        }
        if let Some(v) = str_of("boot_platform") {
            r.boot_platform = v;
        }
        if let Some(v) = str_of("comments") {
            r.comments = v;
        }
        if let Some(v) = str_of("datacenter") {
            r.datacenter = v;
        }
        if let Some(v) = str_of("default_console") {
            r.default_console = v;
        }
        if let Some(v) = str_of("next_reboot") {
            r.next_reboot = Some(v);
        }
        if let Some(v) = p.get("overprovision_ratios").and_then(Value::as_object) {
            r.overprovision_ratios = v.clone();
        }
        if let Some(v) = str_of("rack_identifier") {
            r.rack_identifier = v;
        }
        if let Some(v) = p.get("reservation_ratio").and_then(Value::as_f64) {
            r.reservation_ratio = v;
        }
        if let Some(v) = p.get("reserved").and_then(Value::as_bool) {
            r.reserved = v;
        }
        if let Some(v) = p.get("reservoir").and_then(Value::as_bool) {
            r.reservoir = v;
        }
        if let Some(v) = str_of("serial") {
            r.serial = v;
        }
        if let Some(v) = p.get("setting_up").and_then(Value::as_bool) {
            r.setting_up = v;
        }
        if let Some(v) = p.get("setup").and_then(Value::as_bool) {
            r.setup = v;
        }
        if let Some(v) = p.get("traits").and_then(Value::as_object) {
            r.traits = v.clone();
        }
        if let Some(v) = str_of("transitional_status") {
            r.transitional_status = v;
        }
    }
    empty(StatusCode::NO_CONTENT)
}

async fn delete_server(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let rec = match prepopulate(&core, &raw) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let p = match params(Some(&raw), rq.as_deref(), &body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Err(r) = strict(&p, &["server_uuid"]) {
        return r;
    }
    // Only the record goes: nothing changes on the server, and nothing in
    // SAPI (TRITON-416 is not implemented).
    core.cnapi.servers().remove(&rec.uuid);
    // res.send(200): a 200 with an empty body (the docs say 204).
    empty(StatusCode::OK)
}

fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

fn physical(core: &DcCore, uuid: ServerUuid) -> Result<Arc<MockServer>, Response> {
    core.server(uuid).ok_or_else(|| {
        rest_error(
            STYLE,
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            format!("server {uuid} has no cn-agent to talk to"),
        )
    })
}

async fn install_agent(
    State(core): Core,
    Path(raw): Path<String>,
    headers: HeaderMap,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    // No validation here: the whole request goes to cn-agent, which fails
    // the task if image_uuid is missing or bad.
    let image = p
        .get("image_uuid")
        .and_then(Value::as_str)
        .map(|s| s.parse::<ImageUuid>().map_err(|_| s.to_string()));
    let id = core
        .cnapi
        .new_task(rec.uuid, "agent_install", &request_id(&headers));
    let core2 = core.clone();
    let arrived = tokio::time::Instant::now();
    tokio::spawn(async move {
        match image {
            Some(Ok(image)) => run_agent_install(core2, id, server, image, arrived).await,
            Some(Err(bad)) => core2.cnapi.finish_task(
                id,
                Err(format!("AgentInstall error: invalid image_uuid {bad:?}")),
            ),
            None => core2.cnapi.finish_task(
                id,
                Err("AgentInstall error: params.image_uuid is required".into()),
            ),
        }
    });
    json_response(STYLE, StatusCode::OK, &json!({"id": id}))
}

/// Only a set-up server runs cn-agent; CNAPI's task request to any other
/// fails to connect.
fn cn_agent_reachable(core: &DcCore, server: &MockServer) -> Result<(), String> {
    let setup = core
        .cnapi
        .servers()
        .get(&server.uuid)
        .is_some_and(|r| r.setup);
    if setup {
        Ok(())
    } else {
        Err(format!(
            "connect ECONNREFUSED {}:5309 (server {} is not set up, so cn-agent is not running)",
            server.admin_ip, server.hostname
        ))
    }
}

/// Sleep unless the datacenter shuts down first (then `false`).
async fn sleep_or_shutdown(core: &DcCore, d: Duration) -> bool {
    if d.is_zero() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = core.shutdown.cancelled() => false,
    }
}

/// Sleep until `deadline` unless the datacenter shuts down first (then
/// `false`). Injected latencies run from the request's arrival, so the
/// simulator's own work before the timer starts does not lengthen them.
async fn sleep_until_or_shutdown(core: &DcCore, deadline: tokio::time::Instant) -> bool {
    if deadline <= tokio::time::Instant::now() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep_until(deadline) => true,
        _ = core.shutdown.cancelled() => false,
    }
}

/// cn-agent's `agent_install` task, with the injected faults.
async fn run_agent_install(
    core: Arc<DcCore>,
    id: TaskId,
    server: Arc<MockServer>,
    image: ImageUuid,
    arrived: tokio::time::Instant,
) {
    if let Err(message) = cn_agent_reachable(&core, &server) {
        core.cnapi
            .finish_task(id, Err(format!("AgentInstall error: {message}")));
        return;
    }
    let name = core.image_name(image);
    let fate = core
        .faults
        .install_fate(server.uuid, name.as_deref().unwrap_or(""));
    if fate.hang {
        // Never finishes: waiters get the active task on their timeout.
        return;
    }
    let target = server.target(&core.config.datacenter);
    let deadline = arrived + fate.latency;
    // These finish after the latency without doing the install here.
    let finishes_early = fate.fail || name.as_deref() == Some("cn-agent") || name.is_none();
    if finishes_early && !sleep_until_or_shutdown(&core, deadline).await {
        return;
    }
    if fate.fail {
        core.cnapi.finish_task(
            id,
            Err(format!(
                "AgentInstall error: injected failure installing {} on {}",
                name.as_deref().unwrap_or("image"),
                server.hostname
            )),
        );
        core.touch();
        return;
    }
    let Some(name) = name else {
        core.cnapi.finish_task(
            id,
            Err(format!(
                "AgentInstall error: Image not found at {}/images/{image}",
                core.env().imgapi_url
            )),
        );
        return;
    };
    if name == "cn-agent" {
        // cn-agent hands the install to cn-agent-update and restarts; the
        // task it answered for is done, the report comes from the new
        // cn-agent a little later.
        core.cnapi.finish_task(id, Ok(()));
        core.touch();
        if !sleep_or_shutdown(
            &core,
            Duration::from_millis(core.config.cn_agent_restart_ms),
        )
        .await
        {
            return;
        }
        let result = match core.ensure_prepared(&server) {
            Ok(()) => core.gz.install(core.env(), target, image).await,
            Err(e) => Err(e),
        };
        match result {
            // The new cn-agent starts and reports the whole GZ.
            Ok(_) => core.refresh_agents(&server).await,
            Err(e) => {
                tracing::warn!(server = %server.hostname, error = %error_chain(&e), "sim: cn-agent self-update failed; server.agents unchanged")
            }
        }
        return;
    }
    // The injected latency is the whole install's duration: the real work
    // runs inside it, so the simulator's own cost stays off the critical
    // path of a benchmark (it only shows when it exceeds the latency).
    let work = async {
        core.ensure_prepared(&server)?;
        let results = core.gz.install(core.env(), target, image).await?;
        core.record_results(&server, &results);
        Ok(())
    };
    finish_within(&core, id, deadline, "AgentInstall", work).await;
}

/// Run a task's `work` inside its injected latency (the task ends at
/// `deadline` or when the work does, whichever is later), then finish the
/// task, its error prefixed with cn-agent's task name. Nothing is finished
/// if the datacenter shuts down first.
async fn finish_within(
    core: &DcCore,
    id: TaskId,
    deadline: tokio::time::Instant,
    task_name: &str,
    work: impl std::future::Future<Output = Result<(), super::gz::GzOpError>>,
) {
    let (result, alive) = tokio::join!(work, sleep_until_or_shutdown(core, deadline));
    if !alive {
        return;
    }
    let result = result.map_err(|e| format!("{task_name} error: {}", error_chain(&e)));
    core.cnapi.finish_task(id, result);
    core.touch();
}

async fn uninstall_agents(
    State(core): Core,
    Path(raw): Path<String>,
    headers: HeaderMap,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let names: Vec<String> = match p.get("agents") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => {
            return invalid_parameters(
                StatusCode::INTERNAL_SERVER_ERROR,
                vec![("agents", "value was not an array".to_string())],
            );
        }
    };
    // agents_uninstall needs cn-agent >= 2.8.0.
    let cn_agent = rec.agents.iter().find(|a| a.name == "cn-agent");
    let version = cn_agent.map(|a| a.version.clone()).unwrap_or_default();
    let min = crate::image::parse_agent_version(&core.config.uninstall_min_cn_agent)
        .unwrap_or(semver::Version::new(2, 8, 0));
    let new_enough = crate::image::parse_agent_version(&version).is_some_and(|v| v >= min);
    if !new_enough {
        return rest_error(
            STYLE,
            StatusCode::PRECONDITION_FAILED,
            "PreconditionFailed",
            format!(
                "cn-agent (v{}) on server {} does not support \"agents_uninstall\": require at least cn-agent v{min}",
                if version.is_empty() {
                    "undefined"
                } else {
                    &version
                },
                rec.uuid
            ),
        );
    }
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let id = core
        .cnapi
        .new_task(rec.uuid, "agents_uninstall", &request_id(&headers));
    let core2 = core.clone();
    let arrived = tokio::time::Instant::now();
    tokio::spawn(async move {
        if let Err(message) = cn_agent_reachable(&core2, &server) {
            core2
                .cnapi
                .finish_task(id, Err(format!("AgentsUninstallTask error: {message}")));
            return;
        }
        let fate = core2.faults.install_fate(server.uuid, "");
        let deadline = arrived + fate.latency;
        if fate.hang {
            return;
        }
        // As for installs, the work runs inside the injected latency.
        let target = server.target(&core2.config.datacenter);
        let work = async {
            core2.ensure_prepared(&server)?;
            let results = core2.gz.uninstall(core2.env(), target, names).await?;
            core2.record_results(&server, &results);
            Ok(())
        };
        finish_within(&core2, id, deadline, "AgentsUninstallTask", work).await;
    });
    json_response(STYLE, StatusCode::OK, &json!({"id": id}))
}

/// What a command run produced (cn-agent's `command_execute` result).
struct CommandOutcome {
    exit_code: Option<i32>,
    signal: Option<&'static str>,
    stdout: String,
    stderr: String,
}

async fn execute(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let mut errors = Vec::new();
    if !p.get("script").is_some_and(Value::is_string) {
        errors.push(("script", "value was not a string".to_string()));
    }
    if p.get("args").is_some_and(|a| !a.is_array()) {
        errors.push(("args", "value was not an array".to_string()));
    }
    if p.get("env").is_some_and(|e| !e.is_object()) {
        errors.push(("env", "value was not an object".to_string()));
    }
    let json_flag = match p.get("json") {
        None => false,
        Some(v) => match bool_param(v) {
            Some(b) => b,
            None => {
                errors.push(("json", "Invalid value".to_string()));
                false
            }
        },
    };
    if p.get("timeout").is_some_and(|t| !t.is_number()) {
        errors.push(("timeout", "value was not a number".to_string()));
    }
    if !errors.is_empty() {
        return invalid_parameters(StatusCode::INTERNAL_SERVER_ERROR, errors);
    }
    let timeout_ms = p.get("timeout").and_then(Value::as_u64);
    if timeout_ms.is_some() && core.config.execute_transport == super::ExecuteTransport::Ur {
        return invalid_argument(
            "timeout only supported when using cn-agent (See: FEATURE_USE_CNAGENT_COMMAND_EXECUTE)",
        );
    }
    let request = ExecuteRequest {
        script: p["script"].as_str().unwrap_or_default().to_string(),
        args: p
            .get("args")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        env: p
            .get("env")
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default(),
        json: json_flag,
        timeout: timeout_ms,
    };
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let outcome = run_command(&core, &server, request, timeout_ms).await;
    if json_flag {
        json_response(
            STYLE,
            StatusCode::OK,
            &json!({
                "exitCode": outcome.exit_code,
                "signal": outcome.signal,
                "stderr": outcome.stderr,
                "stdout": outcome.stdout,
            }),
        )
    } else if outcome.exit_code != Some(0) {
        // Without json, a non-zero exit is an InternalError and stderr is lost.
        rest_error(
            STYLE,
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Error executing on remote system",
        )
    } else {
        json_response(STYLE, StatusCode::OK, &json!(outcome.stdout.trim()))
    }
}

/// `gz` subcommands that change the server (and so get install latency
/// and failure injection).
const CHANGING: [&str; 4] = ["install", "remove", "setup", "rollback"];

/// Run an execute request on a mock server. Only `agentsadm` command lines
/// built by `remote::gz_execute_request` run; any other script is answered
/// as a server without that command would: exit 127 and nothing run.
async fn run_command(
    core: &Arc<DcCore>,
    server: &Arc<MockServer>,
    request: ExecuteRequest,
    timeout_ms: Option<u64>,
) -> CommandOutcome {
    let Some(args) = crate::remote::parse_gz_execute(&request) else {
        return CommandOutcome {
            exit_code: Some(127),
            signal: None,
            stdout: String::new(),
            stderr: "agentsadm sim: simulated servers only run agentsadm command lines (remote::EXEC_SCRIPT); the script was not run\n".into(),
        };
    };
    let arrived = tokio::time::Instant::now();
    let argv = args.to_vec();
    let changing = argv.first().map(String::as_str) == Some("gz")
        && argv.get(1).is_some_and(|c| CHANGING.contains(&c.as_str()));
    let mut latency = Duration::ZERO;
    if changing {
        let component = component_of(core, &argv);
        let fate = core.faults.install_fate(server.uuid, &component);
        latency = fate.latency;
        if fate.hang {
            match timeout_ms {
                Some(ms) => {
                    sleep_or_shutdown(core, Duration::from_millis(ms)).await;
                    return killed();
                }
                None => {
                    core.shutdown.cancelled().await;
                    return killed();
                }
            }
        }
        if fate.fail {
            if !sleep_until_or_shutdown(core, arrived + fate.latency).await {
                return killed();
            }
            let message = format!(
                "injected failure installing {component} on {}",
                server.hostname
            );
            let result = GzResult {
                server_uuid: server.uuid,
                components: Vec::new(),
                error: Some(GzFailure {
                    component: Some(component),
                    step: "injected".into(),
                    message: message.clone(),
                }),
                warnings: Vec::new(),
            };
            return CommandOutcome {
                exit_code: Some(1),
                signal: None,
                stdout: serde_json::to_string(&result).unwrap_or_default() + "\n",
                stderr: format!("agentsadm: error: {message}\n"),
            };
        }
    }
    // A changing command takes at least the injected latency; its real
    // work runs inside it.
    if let Err(e) = core.ensure_prepared(server) {
        return CommandOutcome {
            exit_code: Some(1),
            signal: None,
            stdout: String::new(),
            stderr: format!("agentsadm: error: {}\n", error_chain(&e)),
        };
    }
    let env = core.env();
    let mut vars = env.command_env();
    if core.config.execute_transport == super::ExecuteTransport::CnAgent {
        // cn-agent's command_execute runs commands inside cn-agent's own
        // SMF contract (its environment says so); Ur's do not.
        if let Some(fmri) = core
            .catalog
            .get("cn-agent")
            .and_then(|c| c.smf_services.first())
        {
            vars.insert("SMF_FMRI".into(), fmri.clone());
        }
    }
    vars.extend(request.env.clone());
    let run = core
        .gz
        .run(env, server.target(&core.config.datacenter), argv, vars);
    let fut = async {
        let (r, alive) = tokio::join!(run, sleep_until_or_shutdown(core, arrived + latency));
        alive.then_some(r)
    };
    let result = match timeout_ms {
        Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), fut).await {
            Ok(Some(r)) => r,
            _ => return killed(),
        },
        None => match fut.await {
            Some(r) => r,
            None => return killed(),
        },
    };
    if changing {
        core.touch();
    }
    CommandOutcome {
        exit_code: Some(result.exit_status),
        signal: None,
        stdout: result.stdout,
        stderr: result.stderr,
    }
}

fn killed() -> CommandOutcome {
    CommandOutcome {
        exit_code: None,
        signal: Some("SIGTERM"),
        stdout: String::new(),
        stderr: String::new(),
    }
}

/// The component a `gz` command line is about (for fault selection): the
/// first operand, with image UUIDs resolved to their name.
fn component_of(core: &DcCore, argv: &[String]) -> String {
    let operand = argv
        .iter()
        .skip(2)
        .find(|a| !a.starts_with('-'))
        .cloned()
        .unwrap_or_default();
    match operand.parse::<ImageUuid>() {
        Ok(u) => core.image_name(u).unwrap_or(operand),
        Err(_) => operand,
    }
}

async fn setup_server(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if let Err(r) = strict(
        &p,
        &[
            "hostname",
            "nics",
            "postsetup_script",
            "server_uuid",
            "disk_spares",
            "disk_width",
            "disk_cache",
            "disk_layout",
            "encryption_enabled",
            "disk_exclude",
        ],
    ) {
        return r;
    }
    if let Some(l) = p.get("disk_layout").and_then(Value::as_str)
        && !["single", "mirror", "raidz1", "raidz2", "raidz3"].contains(&l)
    {
        return invalid_argument(format!("invalid disk_layout: {l}"));
    }
    if rec.setup {
        return empty(StatusCode::NO_CONTENT);
    }
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    {
        let mut servers = core.cnapi.servers();
        if let Some(r) = servers.get_mut(&rec.uuid) {
            if let Some(h) = p.get("hostname").and_then(Value::as_str) {
                r.hostname = h.to_string();
            }
            // mark_as_setting_up, then clear_server_agents.
            r.setting_up = true;
            r.agents = Vec::new();
        }
    }
    core.touch();
    let job = JobUuid::new_v4();
    let core2 = core.clone();
    tokio::spawn(async move { run_setup_job(core2, server).await });
    // 202 with the job (the docs say 200).
    json_response(STYLE, StatusCode::ACCEPTED, &json!({"job_uuid": job}))
}

/// The server-setup workflow, reduced to what matters for agents: `gz setup
/// --source imgapi` (each default component at its SAPI service's
/// `params.image_uuid`), report, mark set up.
async fn run_setup_job(core: Arc<DcCore>, server: Arc<MockServer>) {
    if !sleep_or_shutdown(&core, Duration::from_millis(core.config.setup_job_ms)).await {
        return;
    }
    let result = match core.ensure_prepared(&server) {
        Ok(()) => {
            core.gz
                .setup(core.env(), server.target(&core.config.datacenter))
                .await
        }
        Err(e) => Err(e),
    };
    core.refresh_agents(&server).await;
    let mut servers = core.cnapi.servers();
    if let Some(r) = servers.get_mut(&server.uuid) {
        r.setting_up = false;
        match result {
            Ok(()) => r.setup = true,
            Err(e) => {
                tracing::warn!(server = %server.hostname, error = %error_chain(&e), "sim: server-setup job failed")
            }
        }
    }
    drop(servers);
    core.touch();
}

async fn factory_reset(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if let Err(r) = strict(&p, &["server_uuid", "creator_uuid", "origin"]) {
        return r;
    }
    if !rec.vms.is_empty() {
        // The body is a bare JSON string, not an error object.
        return json_response(
            STYLE,
            StatusCode::CONFLICT,
            &json!(format!(
                "Server may not be reset because it has {} vms",
                rec.vms.len()
            )),
        );
    }
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let job = JobUuid::new_v4();
    let core2 = core.clone();
    tokio::spawn(async move {
        if !sleep_or_shutdown(&core2, Duration::from_millis(core2.config.factory_reset_ms)).await {
            return;
        }
        if let Err(e) = server.wipe() {
            tracing::warn!(server = %server.hostname, error = %e, "sim: factory reset could not wipe the GZ");
        }
        // The record stays; it comes back not set up. `agents` is only
        // cleared by the next setup; SAPI is not touched.
        if let Some(r) = core2.cnapi.servers().get_mut(&server.uuid) {
            r.setup = false;
            r.setting_up = false;
        }
        core2.touch();
    });
    json_response(STYLE, StatusCode::ACCEPTED, &json!({"job_uuid": job}))
}

fn task_not_found() -> Response {
    rest_error(
        STYLE,
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        "no such task found",
    )
}

async fn get_task(State(core): Core, Path(raw): Path<String>) -> Response {
    match raw.parse().ok().and_then(|id| core.cnapi.task(id)) {
        Some(t) => json_response(STYLE, StatusCode::OK, &t),
        None => task_not_found(),
    }
}

async fn wait_task(State(core): Core, Path(raw): Path<String>, RawQuery(rq): RawQuery) -> Response {
    let q = parse_query(rq.as_deref());
    let Some((task, mut rx)) = raw.parse().ok().and_then(|id| core.cnapi.subscribe(id)) else {
        return task_not_found();
    };
    if task.is_done() {
        return json_response(STYLE, StatusCode::OK, &task);
    }
    let secs = super::http::query_get(&q, "timeout")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .unwrap_or(3600);
    tokio::select! {
        _ = tokio::time::timeout(Duration::from_secs(secs), rx.wait_for(|d| *d)) => {}
        _ = core.shutdown.cancelled() => {}
    }
    // On timeout this is still the active task: a 200, not an error.
    match core.cnapi.task(task.id) {
        Some(t) => json_response(STYLE, StatusCode::OK, &t),
        None => task_not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projection_groups() {
        let spec = super::super::fleet::generate(1, 1).remove(1);
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

    #[test]
    fn strict_and_regex() {
        let p = Map::from_iter([("nope".to_string(), json!("1"))]);
        assert!(strict(&p, &["a"]).is_err());
        assert!(list_regex_ok("agents,sysinfo"));
        assert!(!list_regex_ok("agents;rm"));
        assert!(!list_regex_ok(""));
    }
}
