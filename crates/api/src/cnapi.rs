//! CNAPI client: servers (list with extras and paging, get, update `agents`,
//! delete, factory reset), agent install/uninstall tasks, command execution
//! and task waiting (docs/triton/apis.md §3). CNAPI ignores Accept-Version
//! and rejects unknown query parameters with 409, so only documented ones are
//! ever sent.

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
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::JobUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::TaskId;

/// ServerList's maximum (and default) page size.
pub const SERVER_PAGE_LIMIT: usize = 1000;

/// One entry of `server.agents` as cn-agent reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AgentEntry {
    pub name: String,
    #[serde(default)]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_uuid: Option<ImageUuid>,
    /// The SAPI instance UUID (absent when `etc/<name>` is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<InstanceUuid>,
}

/// A CNAPI server record. Only the fields agentsadm reads are typed; the
/// rest is kept in `extra`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<AgentEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysinfo: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vms: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<String>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Server {
    pub fn is_running(&self) -> bool {
        self.status.as_deref() == Some("running")
    }

    /// What is installed, the way sdcadm reads it: `server.agents`, else
    /// sysinfo `SDC Agents` (which lacks image and instance UUIDs).
    pub fn reported_agents(&self) -> Vec<AgentEntry> {
        if let Some(agents) = &self.agents
            && !agents.is_empty()
        {
            return agents.clone();
        }
        self.sysinfo
            .as_ref()
            .and_then(|s| s.get("SDC Agents"))
            .and_then(|a| serde_json::from_value(a.clone()).ok())
            .unwrap_or_default()
    }

    /// Number of VMs, when `vms` was requested.
    pub fn vm_count(&self) -> usize {
        self.vms.as_ref().map(|v| v.len()).unwrap_or(0)
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
    /// Milliseconds (cn-agent kills the command after it). Only honoured
    /// when CNAPI runs commands through cn-agent; through Ur (CNAPI's
    /// default) a `timeout` is refused with 409, see [`CnapiClient::execute`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// CommandExecute result with `json: true`. On the wire CNAPI sends
/// `exitCode` (and `signal`); `exitCode` is `null` when cn-agent killed the
/// command on its timeout, which reads as [`ExecuteResult::KILLED`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResult {
    #[serde(
        rename = "exitCode",
        alias = "exit_status",
        default = "killed_exit",
        deserialize_with = "exit_code_or_killed"
    )]
    pub exit_status: i32,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
}

impl ExecuteResult {
    /// The exit status reported for a command killed on its timeout (CNAPI
    /// sends `exitCode: null` and a `signal`).
    pub const KILLED: i32 = -1;
}

fn killed_exit() -> i32 {
    ExecuteResult::KILLED
}

fn exit_code_or_killed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    Ok(Option::<i32>::deserialize(d)?.unwrap_or(ExecuteResult::KILLED))
}

/// CNAPI's refusal of `timeout` when commands go through Ur.
fn is_ur_timeout_refusal(e: &ApiError) -> bool {
    e.status() == Some(409)
        && e.code() == Some("InvalidArgument")
        && matches!(e, ApiError::Status { body, .. } if body.message.contains("timeout only supported"))
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

    /// ServerGet (all extras).
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

    /// CommandExecute with `json: true`; the HTTP call lasts as long as the
    /// command, so its timeout is the command's plus a margin.
    ///
    /// The command's own `timeout` (ms) only works when CNAPI runs commands
    /// through cn-agent (`FEATURE_USE_CNAGENT_COMMAND_EXECUTE`); through Ur,
    /// CNAPI's default, it answers 409 InvalidArgument before running
    /// anything. Then the request is sent again without it, and only this
    /// call's HTTP timeout bounds the command.
    pub async fn execute(
        &self,
        uuid: ServerUuid,
        request: &ExecuteRequest,
        timeout: Duration,
    ) -> Result<ExecuteResult, ApiError> {
        let mut req = request.clone();
        req.json = true;
        req.timeout
            .get_or_insert((timeout.as_millis() as u64).max(1));
        match self.execute_once(uuid, &req, timeout).await {
            Err(e) if is_ur_timeout_refusal(&e) => {
                req.timeout = None;
                self.execute_once(uuid, &req, timeout).await
            }
            other => other,
        }
    }

    async fn execute_once(
        &self,
        uuid: ServerUuid,
        req: &ExecuteRequest,
        timeout: Duration,
    ) -> Result<ExecuteResult, ApiError> {
        let body = serde_json::to_value(req).unwrap_or_default();
        let path = format!("/servers/{uuid}/execute");
        let raw = self
            .rest
            .send_raw(
                Method::POST,
                &path,
                Idempotent::No,
                Some(timeout + Duration::from_secs(10)),
                |rb| rb.json(&body),
            )
            .await?;
        self.rest.decode(Method::POST, &path, &raw.body)
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
        let a = s.reported_agents();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].image_uuid, None);
    }
}
