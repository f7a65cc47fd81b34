//! CNAPI client: servers (list with extras and paging, get, update `agents`,
//! delete, factory reset), agent install/uninstall tasks, command execution
//! and task waiting (docs/triton/apis.md §3). CNAPI ignores Accept-Version
//! and rejects unknown query parameters with 409, so only documented ones are
//! ever sent.
//!
//! Two CNAPI 1.26.6 requests kill the process instead of answering (§3.12),
//! so this client never sends them: CommandExecute with `timeout` to a
//! server whose commands go through Ur ([`ExecuteMode`]; only
//! [`CnapiClient::execute_as`] in [`ExecuteMode::CnAgent`] sends it), and
//! uninstall-agents to a server whose `server.agents` has no cn-agent entry
//! (callers check [`Server::cn_agent`] first). One server is read through
//! ServerList (`uuids=...&extras=agents`, [`CnapiClient::list_server`]):
//! ServerGet computes capacity through VMAPI and takes 15 s when VMAPI is
//! down.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::Api;

use super::ApiConfig;

use super::ApiError;

use super::Idempotent;

use super::RestClient;

use super::query;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::JobUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::TaskId;

/// ServerList's maximum (and default) page size.
pub const SERVER_PAGE_LIMIT: usize = 1000;

/// The cn-agent CNAPI's uninstall-agents needs in `server.agents`
/// (`CN_AGENT_VERSION_WITH_AGENTS_UNINSTALL`; 412 PreconditionFailed below
/// it, and a crash when there is no cn-agent entry at all).
pub const UNINSTALL_MIN_CN_AGENT: semver::Version = semver::Version::new(2, 8, 0);

/// The cn-agent from which a server counts as executing commands through
/// cn-agent when CNAPI's `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` is on. CNAPI
/// itself switches at 2.6.0 (`TASK_COMMAND_EXECUTE_MIN_VERSON`); asking for
/// 2.8.0 only means a 2.6 or 2.7 cn-agent gets no `timeout` (the caller's
/// own bound holds instead), never that Ur gets one.
pub const EXECUTE_TIMEOUT_MIN_CN_AGENT: semver::Version = semver::Version::new(2, 8, 0);

/// The cn-agent from which CNAPI itself sends a server's CommandExecute
/// to cn-agent when its flag is on (sdc-cnapi
/// `TASK_COMMAND_EXECUTE_MIN_VERSON`): an answer through Ur from a server
/// with this cn-agent or newer shows that the running CNAPI has the flag
/// off.
pub const CNAPI_CN_AGENT_EXECUTE_MIN: semver::Version = semver::Version::new(2, 6, 0);

pub use agentsadm_types::agents::{AgentEntry, AgentProblem};
// The server record is a wire type the planner reads too, so it lives
// below the planner (agentsadm-types); callers keep naming it here.
pub use agentsadm_types::cnapi::Server;

/// How CNAPI carries CommandExecute to one server. CNAPI decides per
/// request: through cn-agent's `command_execute` task only when its
/// `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` is on and the server's cn-agent is
/// new enough, else through Ur, whose path takes no `timeout` (CNAPI
/// 1.26.6 crashes on one there), runs the script with exactly the request's
/// `env`, and answers nothing at all while the server's ur-agent is down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecuteMode {
    #[default]
    Ur,
    CnAgent,
}

impl ExecuteMode {
    /// The mode of a server whose `server.agents` CNAPI holds, given
    /// CNAPI's feature flag.
    pub fn for_server(cn_agent_flag: bool, server: &Server) -> ExecuteMode {
        let new_enough = server
            .cn_agent_version()
            .is_some_and(|v| v >= EXECUTE_TIMEOUT_MIN_CN_AGENT);
        if cn_agent_flag && new_enough {
            ExecuteMode::CnAgent
        } else {
            ExecuteMode::Ur
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ExecuteMode::Ur => "Ur",
            ExecuteMode::CnAgent => "cn-agent",
        }
    }
}

/// One task of cn-agent's own history (`GET /servers/:uuid/task-history`,
/// cn-agent's `GET /history`): its last 16 tasks since it started. It
/// outlives a CNAPI restart, which leaves CNAPI's record of the same task
/// `active` for ever.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CnAgentTask {
    pub task: String,
    /// `active` or `finished`.
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The task's parameters as CNAPI sent them (`image_uuid` for
    /// agent_install, `agents` for agents_uninstall).
    #[serde(default)]
    pub params: serde_json::Value,
    #[serde(default, rename = "errorCount")]
    pub error_count: u32,
    /// The task's events (`{type: "event", name, event, timestamp}`).
    #[serde(default)]
    pub messages: Vec<serde_json::Value>,
}

impl CnAgentTask {
    pub fn is_finished(&self) -> bool {
        self.status == "finished"
    }

    /// The text of the task's first `error` event, if it had one.
    pub fn error_message(&self) -> Option<String> {
        self.messages.iter().find_map(|m| {
            if m.get("name").and_then(|n| n.as_str()) != Some("error") {
                return None;
            }
            let err = m.get("event")?.get("error")?;
            err.as_str()
                .or_else(|| err.get("message").and_then(|x| x.as_str()))
                .map(str::to_string)
        })
    }

    /// Whether it finished with an error.
    pub fn failed(&self) -> bool {
        self.error_count > 0 || self.error_message().is_some()
    }
}

/// Task status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Active,
    Complete,
    Failure,
}

/// One `history` entry of a finished task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub name: String,
    #[serde(default)]
    pub timestamp: String,
    #[serde(default)]
    pub event: serde_json::Value,
}

/// A CNAPI task (install-agent, uninstall-agents).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub req_id: Option<String>,
    pub task: String,
    pub server_uuid: ServerUuid,
    pub status: TaskStatus,
    #[serde(default)]
    pub timestamp: String,
    /// Absent while the task is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<TaskEvent>>,
}

impl Task {
    pub fn is_done(&self) -> bool {
        self.status != TaskStatus::Active
    }

    /// The remote error text of a failed task (`history[].event.error.message`,
    /// where sdcadm reads it).
    pub fn error_message(&self) -> Option<String> {
        self.history.as_ref()?.iter().find_map(|e| {
            e.event
                .get("error")
                .and_then(|err| err.get("message").or(Some(err)))
                .and_then(|m| m.as_str().map(str::to_string))
        })
    }
}

/// ServerList filters. Only documented parameters exist, because CNAPI
/// answers 409 to anything else.
#[derive(Clone, Debug, Default)]
pub struct ServerListFilter {
    pub uuids: Vec<ServerUuid>,
    pub setup: Option<bool>,
    pub headnode: Option<bool>,
    pub hostname: Option<String>,
    /// `agents`, `vms`, `memory`, `disk`, `sysinfo`, `capacity`, `all`.
    pub extras: Vec<String>,
}

/// CommandExecute body. `json: true` asks CNAPI for
/// `{exitCode, stdout, stderr}` instead of failing on a non-zero exit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    pub script: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub json: bool,
    /// Milliseconds (cn-agent kills the command after it). Only ever sent
    /// by [`CnapiClient::execute_as`] in [`ExecuteMode::CnAgent`], which
    /// sets it from its bound; any value here is replaced. Through Ur
    /// (CNAPI's default) CNAPI 1.26.6 dies on it instead of refusing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// What a command run in-process printed and how it exited (the
/// simulator's GZ and `agentsadm gz` run in the same process).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResult {
    #[serde(rename = "exitCode", alias = "exit_status")]
    pub exit_status: i32,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
}

/// CNAPI's answer to CommandExecute with `json: true`, in either mode:
/// `{exitCode, stderr, stdout}` from Ur, `{err, exitCode, signal, stderr,
/// stdout}` from cn-agent. `exitCode` is not always a number: `null` when
/// cn-agent killed the command on its timeout ([`ExecuteAnswer::KILLED`],
/// `signal` says which), and a string when Ur stopped it itself, as it does
/// past 5 MB of output (`ERR_CHILD_PROCESS_STDIO_MAXBUFFER`,
/// [`ExecuteAnswer::STOPPED`]). Ur reports a command killed by a signal as
/// exit 1 with no `stderr` at all.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ExecuteAnswer {
    pub exit_status: i32,
    /// `exitCode` when it was a string (Ur's reason for stopping the
    /// command).
    pub exit_error: Option<String>,
    /// The signal cn-agent reports for a command it killed.
    pub signal: Option<String>,
    pub stdout: String,
    pub stderr: String,
    /// The answer had no `stderr`: Ur's sign of a signal death.
    pub stderr_missing: bool,
    /// The path that answered, as the answer's shape shows it: cn-agent's
    /// finish event always has `signal` (`null` for an exit) and `err`,
    /// Ur's never has either. What the running CNAPI does, whatever SAPI
    /// says it should.
    pub path: ExecuteMode,
}

impl ExecuteAnswer {
    /// The exit status read for `exitCode: null` (cn-agent killed it).
    pub const KILLED: i32 = -1;
    /// The exit status read for a string `exitCode` (Ur stopped it).
    pub const STOPPED: i32 = -2;

    /// How the command ended, for messages: `exited 3`, `was killed by
    /// SIGKILL`, `was stopped by Ur (ERR_CHILD_PROCESS_STDIO_MAXBUFFER: ...)`.
    pub fn describe_exit(&self) -> String {
        if let Some(e) = &self.exit_error {
            let why = if e.contains("MAXBUFFER") {
                ": it printed more than Ur's 5 MB limit"
            } else {
                ""
            };
            return format!("was stopped by Ur ({e}{why})");
        }
        if let Some(sig) = &self.signal {
            return format!("was killed by {sig}");
        }
        match self.exit_status {
            ExecuteAnswer::KILLED => "was killed (no exit status)".to_string(),
            1 if self.stderr_missing => {
                "exited 1 with no stderr, which is how Ur reports a command killed by a signal"
                    .to_string()
            }
            n if (129..=192).contains(&n) => {
                format!("exited {n} (killed by signal {})", n - 128)
            }
            n => format!("exited {n}"),
        }
    }
}

impl<'de> Deserialize<'de> for ExecuteAnswer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// A key that is there, `null` included (`None`: absent).
        fn present<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Option<serde_json::Value>, D::Error> {
            serde_json::Value::deserialize(d).map(Some)
        }
        #[derive(Deserialize)]
        struct Wire {
            #[serde(rename = "exitCode", alias = "exit_status", default)]
            exit_code: serde_json::Value,
            #[serde(default, deserialize_with = "present")]
            signal: Option<serde_json::Value>,
            #[serde(default, deserialize_with = "present")]
            err: Option<serde_json::Value>,
            #[serde(default)]
            stdout: Option<String>,
            #[serde(default)]
            stderr: Option<String>,
        }
        let w = Wire::deserialize(d)?;
        let (exit_status, exit_error) = match &w.exit_code {
            serde_json::Value::Number(n) => (
                n.as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .unwrap_or(ExecuteAnswer::STOPPED),
                None,
            ),
            serde_json::Value::String(e) => (ExecuteAnswer::STOPPED, Some(e.clone())),
            _ => (ExecuteAnswer::KILLED, None),
        };
        let path = if w.signal.is_some() || w.err.is_some() {
            ExecuteMode::CnAgent
        } else {
            ExecuteMode::Ur
        };
        Ok(ExecuteAnswer {
            exit_status,
            exit_error,
            signal: w.signal.and_then(|s| s.as_str().map(str::to_string)),
            stdout: w.stdout.unwrap_or_default(),
            stderr_missing: w.stderr.is_none(),
            stderr: w.stderr.unwrap_or_default(),
            path,
        })
    }
}

/// The margin over an execute's bound for the HTTP request itself (CNAPI's
/// own work around the command): a tenth of the bound, 1 to 10 s.
fn execute_margin(bound: Duration) -> Duration {
    (bound / 10).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

#[derive(Deserialize)]
struct IdBody {
    id: TaskId,
}

#[derive(Deserialize)]
struct JobBody {
    job_uuid: JobUuid,
}

/// Client for CNAPI.
#[derive(Clone, Debug)]
pub struct CnapiClient {
    rest: RestClient,
}

impl CnapiClient {
    pub fn new(base_url: &str, config: ApiConfig) -> Result<CnapiClient, ApiError> {
        Ok(CnapiClient {
            rest: RestClient::new(Api::Cnapi, base_url, config, None)?,
        })
    }

    pub fn base_url(&self) -> &str {
        self.rest.base_url()
    }

    pub async fn ping(&self) -> Result<serde_json::Value, ApiError> {
        self.rest
            .json(Method::GET, "/ping", Idempotent::Yes, None)
            .await
    }

    /// One ping, no retry: whether the API answers right now.
    pub async fn ping_once(&self) -> Result<(), ApiError> {
        self.rest.ping_once().await
    }

    /// ServerList, paging with `limit=1000&offset=n` until a short page.
    pub async fn list_servers(&self, filter: &ServerListFilter) -> Result<Vec<Server>, ApiError> {
        let mut base: Vec<(&str, String)> = Vec::new();
        if !filter.uuids.is_empty() {
            let u: Vec<String> = filter.uuids.iter().map(|u| u.to_string()).collect();
            base.push(("uuids", u.join(",")));
        }
        if let Some(v) = filter.setup {
            base.push(("setup", v.to_string()));
        }
        if let Some(v) = filter.headnode {
            base.push(("headnode", v.to_string()));
        }
        if let Some(v) = &filter.hostname {
            base.push(("hostname", v.clone()));
        }
        if !filter.extras.is_empty() {
            base.push(("extras", filter.extras.join(",")));
        }
        let mut out = Vec::new();
        let mut offset = 0usize;
        loop {
            let mut pairs = base.clone();
            pairs.push(("limit", SERVER_PAGE_LIMIT.to_string()));
            pairs.push(("offset", offset.to_string()));
            let path = format!("/servers{}", query(&pairs));
            let page: Vec<Server> = self
                .rest
                .json(Method::GET, &path, Idempotent::Yes, None)
                .await?;
            let n = page.len();
            out.extend(page);
            if n < SERVER_PAGE_LIMIT {
                break;
            }
            offset += n;
        }
        Ok(out)
    }

    /// One server with its `agents`, through ServerList
    /// (`uuids=<uuid>&extras=agents`); `None` when CNAPI has no such
    /// server. Unlike ServerGet it computes no capacity, which goes through
    /// VMAPI (15 s a call while VMAPI is down).
    pub async fn list_server(&self, uuid: ServerUuid) -> Result<Option<Server>, ApiError> {
        let filter = ServerListFilter {
            uuids: vec![uuid],
            extras: vec!["agents".to_string()],
            ..ServerListFilter::default()
        };
        let servers = self.list_servers(&filter).await?;
        Ok(servers.into_iter().find(|s| s.uuid == uuid))
    }

    /// ServerGet (all extras). Slow while VMAPI is down (it computes
    /// capacity through it): read one server with [`CnapiClient::list_server`].
    pub async fn get_server(&self, uuid: ServerUuid) -> Result<Server, ApiError> {
        self.rest
            .json(
                Method::GET,
                &format!("/servers/{uuid}"),
                Idempotent::Yes,
                None,
            )
            .await
    }

    /// ServerUpdate with `{"agents": [...]}`: what cn-agent's refreshAgents
    /// sends. Setting the same list twice is harmless, so it retries.
    pub async fn update_server_agents(
        &self,
        uuid: ServerUuid,
        agents: &[AgentEntry],
    ) -> Result<(), ApiError> {
        let body = json!({ "agents": agents });
        self.rest
            .empty(
                Method::POST,
                &format!("/servers/{uuid}"),
                Idempotent::Yes,
                Some(&body),
            )
            .await
    }

    /// ServerUpdate with an arbitrary (strictly validated) body.
    pub async fn update_server(
        &self,
        uuid: ServerUuid,
        body: &serde_json::Value,
    ) -> Result<(), ApiError> {
        self.rest
            .empty(
                Method::POST,
                &format!("/servers/{uuid}"),
                Idempotent::Yes,
                Some(body),
            )
            .await
    }

    /// install-agent: starts cn-agent's `agent_install` task.
    pub async fn install_agent(
        &self,
        uuid: ServerUuid,
        image: ImageUuid,
    ) -> Result<TaskId, ApiError> {
        let body = json!({ "image_uuid": image });
        let r: IdBody = self
            .rest
            .json(
                Method::POST,
                &format!("/servers/{uuid}/install-agent"),
                Idempotent::No,
                Some(&body),
            )
            .await?;
        Ok(r.id)
    }

    /// uninstall-agents: starts cn-agent's `agents_uninstall` task.
    pub async fn uninstall_agents(
        &self,
        uuid: ServerUuid,
        names: &[String],
    ) -> Result<TaskId, ApiError> {
        let body = json!({ "agents": names });
        let r: IdBody = self
            .rest
            .json(
                Method::POST,
                &format!("/servers/{uuid}/uninstall-agents"),
                Idempotent::No,
                Some(&body),
            )
            .await?;
        Ok(r.id)
    }

    /// CommandExecute with `json: true`, through whichever path CNAPI
    /// takes, without `timeout` (what Ur mode needs and cn-agent mode
    /// accepts). The HTTP request waits at most `bound` plus a margin: in
    /// Ur mode nothing else ends it (CNAPI waits an hour, and for ever
    /// gets no answer from a server whose ur-agent is down).
    pub async fn execute(
        &self,
        uuid: ServerUuid,
        request: &ExecuteRequest,
        bound: Duration,
    ) -> Result<ExecuteAnswer, ApiError> {
        self.execute_as(uuid, request, ExecuteMode::Ur, bound).await
    }

    /// CommandExecute with `json: true` to a server in `mode`: in
    /// [`ExecuteMode::CnAgent`] with `timeout` = `bound` (cn-agent kills
    /// the command then), in [`ExecuteMode::Ur`] without (never relying on
    /// CNAPI to refuse it: CNAPI 1.26.6 dies instead). Either way this call
    /// gives up `bound` plus a margin after sending.
    pub async fn execute_as(
        &self,
        uuid: ServerUuid,
        request: &ExecuteRequest,
        mode: ExecuteMode,
        bound: Duration,
    ) -> Result<ExecuteAnswer, ApiError> {
        let mut req = request.clone();
        req.json = true;
        req.timeout = match mode {
            ExecuteMode::CnAgent => Some((bound.as_millis() as u64).max(1)),
            ExecuteMode::Ur => None,
        };
        let body = serde_json::to_value(&req).unwrap_or_default();
        let path = format!("/servers/{uuid}/execute");
        let raw = self
            .rest
            .send_raw(
                Method::POST,
                &path,
                Idempotent::No,
                Some(bound + execute_margin(bound)),
                |rb| rb.json(&body),
            )
            .await?;
        self.rest.decode(Method::POST, &path, &raw.body)
    }

    /// ServerTaskHistory: cn-agent's own record of its recent tasks.
    pub async fn task_history(&self, uuid: ServerUuid) -> Result<Vec<CnAgentTask>, ApiError> {
        self.rest
            .json(
                Method::GET,
                &format!("/servers/{uuid}/task-history"),
                Idempotent::Yes,
                None,
            )
            .await
    }

    /// TaskGet.
    pub async fn get_task(&self, id: TaskId) -> Result<Task, ApiError> {
        self.rest
            .json(Method::GET, &format!("/tasks/{id}"), Idempotent::Yes, None)
            .await
    }

    /// TaskWait: blocks server-side up to `timeout` and returns the task,
    /// still `active` if it did not finish in time (that is not an error).
    pub async fn wait_task(&self, id: TaskId, timeout: Duration) -> Result<Task, ApiError> {
        let secs = timeout.as_secs().max(1);
        let path = format!(
            "/tasks/{id}/wait{}",
            query(&[("timeout", secs.to_string())])
        );
        let raw = self
            .rest
            .send_raw(
                Method::GET,
                &path,
                Idempotent::Yes,
                Some(Duration::from_secs(secs) + Duration::from_secs(10)),
                |rb| rb,
            )
            .await?;
        self.rest.decode(Method::GET, &path, &raw.body)
    }

    /// TaskWait once, without retrying: a dropped connection or a 5xx is
    /// returned, so that the caller knows CNAPI went away while the task
    /// ran (a restarted CNAPI never finishes the tasks it had in flight).
    pub async fn wait_task_once(&self, id: TaskId, timeout: Duration) -> Result<Task, ApiError> {
        let secs = timeout.as_secs().max(1);
        let path = format!(
            "/tasks/{id}/wait{}",
            query(&[("timeout", secs.to_string())])
        );
        let raw = self
            .rest
            .send_raw(
                Method::GET,
                &path,
                Idempotent::No,
                Some(Duration::from_secs(secs) + Duration::from_secs(10)),
                |rb| rb,
            )
            .await?;
        self.rest.decode(Method::GET, &path, &raw.body)
    }

    /// Wait until the task finishes or `total` has passed, with as few
    /// TaskWait calls as possible (each at most a minute, so a proxy in
    /// between never sees an idle request for long). Returns the last task
    /// seen, `active` when time ran out.
    pub async fn wait_task_done(&self, id: TaskId, total: Duration) -> Result<Task, ApiError> {
        let deadline = tokio::time::Instant::now() + total;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let task = self
                .wait_task(
                    id,
                    left.clamp(Duration::from_secs(1), Duration::from_secs(60)),
                )
                .await?;
            if task.is_done() || tokio::time::Instant::now() >= deadline {
                return Ok(task);
            }
        }
    }

    /// ServerDelete: removes the CNAPI record only (200, empty body).
    pub async fn delete_server(&self, uuid: ServerUuid) -> Result<(), ApiError> {
        self.rest
            .empty(
                Method::DELETE,
                &format!("/servers/{uuid}"),
                Idempotent::Yes,
                None,
            )
            .await
    }

    /// ServerFactoryReset: 202 with a job; 409 when the server has VMs.
    pub async fn factory_reset(&self, uuid: ServerUuid) -> Result<JobUuid, ApiError> {
        let r: JobBody = self
            .rest
            .json(
                Method::PUT,
                &format!("/servers/{uuid}/factory-reset"),
                Idempotent::No,
                None,
            )
            .await?;
        Ok(r.job_uuid)
    }

    /// ServerSetup: 202 with a job, or 204 (None) when already set up.
    pub async fn setup_server(
        &self,
        uuid: ServerUuid,
        hostname: Option<&str>,
    ) -> Result<Option<JobUuid>, ApiError> {
        let body = match hostname {
            Some(h) => json!({ "hostname": h }),
            None => json!({}),
        };
        let path = format!("/servers/{uuid}/setup");
        let raw = self
            .rest
            .send_raw(Method::PUT, &path, Idempotent::No, None, |rb| {
                rb.json(&body)
            })
            .await?;
        if raw.body.is_empty() {
            return Ok(None);
        }
        let job: JobBody = self.rest.decode(Method::PUT, &path, &raw.body)?;
        Ok(Some(job.job_uuid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn task_error_message_from_history() {
        let t: Task = serde_json::from_value(json!({
            "id": "9b2a6c6e-3d0e-4c1f-8a77-5f4c2b1d0e11", "task": "agent_install",
            "server_uuid": "44454c4c-4800-1034-804a-b2c04f354d31", "status": "failure",
            "timestamp": "2026-11-22T11:50:00.000Z",
            "history": [{"name": "error", "timestamp": "t", "event": {"error": {"message": "AgentInstall error: boom"}}},
                        {"name": "finish", "timestamp": "t", "event": {}}]
        }))
        .unwrap();
        assert_eq!(
            t.error_message().as_deref(),
            Some("AgentInstall error: boom")
        );
    }

    #[test]
    fn reported_agents_falls_back_to_sysinfo() {
        let s: Server = serde_json::from_value(json!({
            "uuid": "44454c4c-4800-1034-804a-b2c04f354d31", "hostname": "cn1", "agents": [],
            "sysinfo": {"SDC Agents": [{"name": "vm-agent", "version": "1.0.0"}]}
        }))
        .unwrap();
        let (a, problems) = s.reported_agents();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].image_uuid, None);
        assert!(problems.is_empty());
    }

    #[test]
    fn a_hostile_agents_entry_is_set_aside_and_the_record_still_reads() {
        let s: Server = serde_json::from_value(json!({
            "uuid": "44454c4c-4800-1034-804a-b2c04f354d31", "hostname": "cn1",
            "agents": [{"name": "cn-agent", "version": "2.15.0"},
                       {"name": "../x", "version": "1.0.0"},
                       {"name": "A B", "version": "1.0.0"}]
        }))
        .unwrap();
        let (a, problems) = s.reported_agents();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].name, "cn-agent");
        assert_eq!(problems.len(), 2);
        assert!(
            problems[0]
                .to_string()
                .starts_with("server.agents[1]: name \"../x\" is not a component name")
        );
        assert_eq!(problems[1].index, 2);
        // An entry list of nothing but bad entries does not fall back to sysinfo.
        let s: Server = serde_json::from_value(json!({
            "uuid": "44454c4c-4800-1034-804a-b2c04f354d31",
            "agents": [{"name": "../x"}],
            "sysinfo": {"SDC Agents": [{"name": "vm-agent", "version": "1.0.0"}]}
        }))
        .unwrap();
        let (a, problems) = s.reported_agents();
        assert!(a.is_empty());
        assert_eq!(problems.len(), 1);
    }

    #[test]
    fn execute_answers_of_both_paths_decode() {
        // Ur: a signal death is exit 1 with no stderr at all.
        let a: ExecuteAnswer =
            serde_json::from_value(json!({"exitCode": 1, "stdout": ""})).unwrap();
        assert!(a.stderr_missing);
        assert!(
            a.describe_exit().contains("signal"),
            "{}",
            a.describe_exit()
        );
        // Ur past 5 MB of output: exitCode is a string.
        let a: ExecuteAnswer = serde_json::from_value(json!({
            "exitCode": "ERR_CHILD_PROCESS_STDIO_MAXBUFFER", "stderr": "", "stdout": "x"
        }))
        .unwrap();
        assert_eq!(a.exit_status, ExecuteAnswer::STOPPED);
        assert!(a.describe_exit().contains("5 MB"), "{}", a.describe_exit());
        assert_eq!(a.path, ExecuteMode::Ur);
        // cn-agent: an exit, `signal` null and `err` null.
        let a: ExecuteAnswer = serde_json::from_value(json!({
            "err": null, "exitCode": 0, "signal": null, "stderr": "", "stdout": "x"
        }))
        .unwrap();
        assert_eq!(
            (a.path, a.signal, a.exit_status),
            (ExecuteMode::CnAgent, None, 0)
        );
        // cn-agent: killed on its timeout.
        let a: ExecuteAnswer = serde_json::from_value(json!({
            "err": {"message": "x"}, "exitCode": null, "signal": "SIGKILL",
            "stderr": "", "stdout": "", "req_id": "r"
        }))
        .unwrap();
        assert_eq!(a.exit_status, ExecuteAnswer::KILLED);
        assert_eq!(a.describe_exit(), "was killed by SIGKILL");
        assert_eq!(a.path, ExecuteMode::CnAgent);
        let a: ExecuteAnswer =
            serde_json::from_value(json!({"exitCode": 137, "stderr": "", "stdout": ""})).unwrap();
        assert_eq!(a.describe_exit(), "exited 137 (killed by signal 9)");
    }

    #[test]
    fn execute_mode_needs_the_flag_and_a_new_cn_agent() {
        let server = |agents: Value| -> Server {
            serde_json::from_value(json!({
                "uuid": "44454c4c-4800-1034-804a-b2c04f354d31", "agents": agents
            }))
            .unwrap()
        };
        let new = server(json!([{"name": "cn-agent", "version": "2.15.0"}]));
        // A build of 2.8.0 is a pre-release of it to CNAPI's node-semver.
        let old = server(
            json!([{"name": "cn-agent", "version": "2.8.0-master-20231010T000000Z-g1234567"}]),
        );
        let none = server(json!([{"name": "vm-agent", "version": "9.0.0"}]));
        assert_eq!(ExecuteMode::for_server(true, &new), ExecuteMode::CnAgent);
        assert_eq!(ExecuteMode::for_server(false, &new), ExecuteMode::Ur);
        assert_eq!(ExecuteMode::for_server(true, &old), ExecuteMode::Ur);
        assert_eq!(ExecuteMode::for_server(true, &none), ExecuteMode::Ur);
        assert!(none.cn_agent().is_none());
    }

    #[test]
    fn cn_agent_history_reads_errors() {
        let t: CnAgentTask = serde_json::from_value(json!({
            "started_at": "2026-01-01T00:00:00.000Z", "task": "agent_install", "pid": 4,
            "params": {"image_uuid": "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f"},
            "status": "finished", "errorCount": 1, "log": [],
            "messages": [{"type": "event", "name": "error", "event": {"error": "AgentInstall error: boom"}},
                         {"type": "event", "name": "finish", "event": {}}]
        }))
        .unwrap();
        assert!(t.is_finished() && t.failed());
        assert_eq!(
            t.error_message().as_deref(),
            Some("AgentInstall error: boom")
        );
    }
}
