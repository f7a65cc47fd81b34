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
//! body, and CommandExecute through Ur (the default) or cn-agent with each
//! one's answer (`execute`).
//!
//! cn-agent's own upgrade behaves as the real one (agent-install.md §3.4):
//! the task completes once the image is fetched, cn-agent restarts, and
//! `server.agents` shows the new image [`super::SimConfig::cn_agent_restart_ms`]
//! later. (The inference that the task may instead fail because the
//! connection is cut is not what CNAPI's docs or sdcadm assume; callers
//! must confirm through `server.agents` either way.)
//!
//! The CNAPI process can die (docs/triton/apis.md §3.12), and does where
//! the real one does: CommandExecute with `timeout` to a server in Ur mode,
//! uninstall-agents to a server without a cn-agent entry, or a restart from
//! outside ([`crate::SimDc::restart_cnapi`]). Then the request's
//! connection drops with no answer, every request in flight is cut, CNAPI
//! answers nothing until it is back ([`crate::SimConfig::cnapi_restart_ms`]),
//! the tasks it had in flight stay `active` for ever, and the
//! `server.agents` reports cn-agents send meanwhile are lost.
//!
//! How the process carries CommandExecute is its own config's, read when
//! it started: SAPI's `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` reaches it
//! only when config-agent rewrites that config and restarts it
//! (`config_agent`), so SAPI can say one thing while CNAPI does the
//! other.
//!
//! Modules: `record` (the server record and its projections), `servers`
//! (the server routes), `tasks` (the task store and task routes),
//! `install` (install-agent, uninstall-agents), `execute`
//! (CommandExecute), `config_agent` (SAPI's flag reaching the process),
//! `setup` (setup and factory reset jobs), `agent`
//! (what each cn-agent keeps and does by itself), `control` (the
//! simulator's own handles on all that); this file has the router, the
//! process's life and the request checks they share.

mod agent;
mod bootstrap;
pub(crate) mod config_agent;
mod control;
mod execute;
mod install;
mod record;
mod servers;
mod setup;
mod tasks;
mod validate;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post, put};
use serde_json::{Map, Value, json};

use crate::ExecuteTransport;
use crate::core::DcCore;
use crate::fleet::MockServer;
use crate::http::ApiInfo;
use crate::http::Conn;
use crate::http::JsonStyle;
use crate::http::bad_method;
use crate::http::json_response;
use crate::http::merge_params;
use crate::http::not_found_route;
use crate::http::rest_error;
use crate::http::rest_error_fields;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_types::ids::ServerUuid;

pub(crate) use self::agent::CnAgents;
pub(crate) use self::agent::cn_agent_started;
pub use self::control::ExecuteSeen;
pub use self::record::{ServerRecord, ServerStatus};
pub(crate) use self::tasks::TaskStore;

const STYLE: JsonStyle = JsonStyle::Compact;

/// ServerList's page bounds (and default).
pub const LIST_MAX_LIMIT: usize = 1000;

/// The simulated CNAPI's data.
pub(crate) struct CnapiState {
    pub info: Arc<ApiInfo>,
    pub servers: Mutex<BTreeMap<ServerUuid, ServerRecord>>,
    pub tasks: TaskStore,
    /// Each server's cn-agent (kept here, but not CNAPI's).
    pub agents: CnAgents,
    /// Bumped each time the process dies; long requests watch it.
    restarts: tokio::sync::watch::Sender<u64>,
    /// Times the process died.
    pub crashes: AtomicU64,
    /// ServerGet requests served (each one asks VMAPI).
    pub server_gets: AtomicU64,
    /// Servers Ur rebooted (exit status 113).
    pub reboots: AtomicU64,
    /// Setup and factory-reset jobs that have ended (for tests: a job's
    /// record writes are done).
    pub jobs_ended: AtomicU64,
    /// Every CommandExecute as it arrived.
    pub executes: Mutex<Vec<ExecuteSeen>>,
    /// How the running process carries CommandExecute: its config file's
    /// `useCnAgentCommandExecute` as it was when it started. SAPI's
    /// `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` reaches it only through
    /// config-agent and a restart (`config_agent`).
    pub mode: Mutex<ExecuteTransport>,
}

impl CnapiState {
    pub(crate) fn new(info: Arc<ApiInfo>, mode: ExecuteTransport) -> CnapiState {
        CnapiState {
            info,
            servers: Mutex::new(BTreeMap::new()),
            tasks: TaskStore::default(),
            agents: CnAgents::default(),
            restarts: tokio::sync::watch::Sender::new(0),
            crashes: AtomicU64::new(0),
            server_gets: AtomicU64::new(0),
            reboots: AtomicU64::new(0),
            jobs_ended: AtomicU64::new(0),
            executes: Mutex::new(Vec::new()),
            mode: Mutex::new(mode),
        }
    }

    /// How the running process carries CommandExecute.
    pub(crate) fn mode(&self) -> ExecuteTransport {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The process dies (`why`) and SMF starts it again after `down`: the
    /// request `conn` came on gets no answer, requests in flight are cut,
    /// and every task in flight is orphaned (its record stays `active`).
    pub(crate) fn crash(&self, conn: Option<&Conn>, why: &str, down: Duration) {
        tracing::warn!("sim CNAPI: {why}; the process dies and restarts as the real one does");
        if let Some(c) = conn {
            c.cut();
        }
        self.crashes.fetch_add(1, Ordering::Relaxed);
        self.tasks.orphan_active();
        self.restarts.send_modify(|g| *g += 1);
        self.info.crash_for(down);
    }

    /// Resolves when the process dies (for a request in flight).
    pub(crate) fn died(&self) -> impl std::future::Future<Output = ()> + use<> {
        let mut rx = self.restarts.subscribe();
        async move {
            let _ = rx.changed().await;
        }
    }

    pub(crate) fn servers(&self) -> MutexGuard<'_, BTreeMap<ServerUuid, ServerRecord>> {
        self.servers.lock().unwrap_or_else(|e| e.into_inner())
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
        .route("/servers", get(servers::list_servers))
        .route(
            "/servers/{uuid}",
            get(servers::get_server)
                // restify's bodyParser as CNAPI uses it sets no size
                // limit: a server's (or anyone's) report of any size is
                // stored.
                .post(servers::update_server)
                .layer(axum::extract::DefaultBodyLimit::disable())
                .delete(servers::delete_server),
        )
        .route("/servers/{uuid}/setup", put(setup::setup_server))
        .route("/servers/{uuid}/factory-reset", put(setup::factory_reset))
        .route(
            "/servers/{uuid}/install-agent",
            post(install::install_agent),
        )
        .route(
            "/servers/{uuid}/uninstall-agents",
            post(install::uninstall_agents),
        )
        .route("/servers/{uuid}/execute", post(execute::execute))
        .route("/servers/{uuid}/task-history", get(agent::task_history))
        .route("/tasks/{id}", get(tasks::get_task))
        .route("/tasks/{id}/wait", get(tasks::wait_task))
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
    if rec.status == ServerStatus::Running {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_and_regex() {
        let p = Map::from_iter([("nope".to_string(), json!("1"))]);
        assert!(strict(&p, &["a"]).is_err());
        assert!(servers::list_regex_ok("agents,sysinfo"));
        assert!(!servers::list_regex_ok("agents;rm"));
        assert!(!servers::list_regex_ok(""));
    }
}
