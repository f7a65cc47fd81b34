//! cn-agent tasks as CNAPI tracks them: the task store (an `active` task
//! that completes or fails with the history entries cn-agent's answer
//! produces), the task kinds, why a task fails, and the TaskGet and
//! TaskWait routes.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;
use tokio::sync::watch;

use agentsadm_api::cnapi::Task;

use agentsadm_api::cnapi::TaskEvent;

use crate::gz::GzOpError;
use crate::http::Conn;
use crate::http::json_response;
use crate::http::parse_query;
use crate::http::query_get;
use crate::http::rest_error;
use crate::imgapi::iso_millis;
use agentsadm_api::cnapi::TaskStatus;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::TaskId;

use super::Core;

use super::STYLE;

/// The cn-agent tasks the simulator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskKind {
    AgentInstall,
    AgentsUninstall,
}

impl TaskKind {
    /// The task's name in CNAPI's task record (`task`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TaskKind::AgentInstall => "agent_install",
            TaskKind::AgentsUninstall => "agents_uninstall",
        }
    }

    /// The name cn-agent's task class puts before a failure's message
    /// (`AgentInstall error: ...`).
    pub(crate) fn error_prefix(self) -> &'static str {
        match self {
            TaskKind::AgentInstall => "AgentInstall",
            TaskKind::AgentsUninstall => "AgentsUninstallTask",
        }
    }
}

/// Why a cn-agent task failed. The message, with its source chain, is the
/// text of the task's `error` history event after the task's prefix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskFailure {
    /// The request had no `image_uuid` (CNAPI passes it on unchecked).
    #[error("params.image_uuid is required")]
    MissingImage,
    #[error("invalid image_uuid {raw:?}")]
    InvalidImage { raw: String },
    /// The server is not set up, so no cn-agent answers on it.
    #[error(
        "connect ECONNREFUSED {admin_ip}:5309 (server {hostname} is not set up, so cn-agent is not running)"
    )]
    CnAgentDown { admin_ip: String, hostname: String },
    /// A failure the fault configuration asked for.
    #[error("injected failure installing {what} on {hostname}")]
    Injected { what: String, hostname: String },
    #[error("Image not found at {imgapi_url}/images/{image}")]
    ImageNotFound {
        imgapi_url: String,
        image: ImageUuid,
    },
    /// The GZ installer's own failure, as the task reports it.
    #[error(transparent)]
    Gz(#[from] GzOpError),
    /// cn-agent's final refreshAgents failed (`agents_uninstall` reports
    /// it although its removals are done).
    #[error(transparent)]
    Refresh(#[from] crate::core::RefreshFailure),
}

/// One task, what kind it is, and the channel its waiters listen on.
struct TaskEntry {
    kind: TaskKind,
    task: Task,
    done: watch::Sender<bool>,
    /// CNAPI died while the task was in flight: no one will ever record
    /// its result (the callback died with the process).
    orphaned: bool,
}

/// The tasks CNAPI knows, by id.
#[derive(Default)]
pub(crate) struct TaskStore {
    entries: Mutex<HashMap<TaskId, TaskEntry>>,
}

impl TaskStore {
    fn entries(&self) -> MutexGuard<'_, HashMap<TaskId, TaskEntry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record a new `active` task.
    pub(crate) fn create(&self, server: ServerUuid, kind: TaskKind, req_id: &str) -> TaskId {
        let id = TaskId::new_v4();
        let task = Task {
            id,
            req_id: Some(req_id.to_string()),
            task: kind.as_str().to_string(),
            server_uuid: server,
            status: TaskStatus::Active,
            timestamp: iso_millis(SystemTime::now()),
            history: None,
        };
        let (done, _) = watch::channel(false);
        self.entries().insert(
            id,
            TaskEntry {
                kind,
                task,
                done,
                orphaned: false,
            },
        );
        id
    }

    /// CNAPI died: every task in flight keeps its `active` record.
    pub(crate) fn orphan_active(&self) {
        for e in self.entries().values_mut() {
            if e.task.status == TaskStatus::Active {
                e.orphaned = true;
            }
        }
    }

    /// The tasks whose record is `active`.
    pub(crate) fn active(&self) -> Vec<Task> {
        self.entries()
            .values()
            .filter(|e| e.task.status == TaskStatus::Active)
            .map(|e| e.task.clone())
            .collect()
    }

    /// The server's cn-agent went away mid-task (a reboot): CNAPI's
    /// `POST /tasks` to it fails, and CNAPI records that as the task's
    /// failure.
    pub(crate) fn fail_active_on(&self, server: ServerUuid, why: &str) {
        let ids: Vec<TaskId> = self
            .entries()
            .values()
            .filter(|e| {
                e.task.server_uuid == server && e.task.status == TaskStatus::Active && !e.orphaned
            })
            .map(|e| e.task.id)
            .collect();
        for id in ids {
            self.record(id, Err(why.to_string()));
        }
    }

    /// Finish a task: `Ok` completes it, `Err` fails it, with the history
    /// entries cn-agent's answer produces. Nothing changes for a task that
    /// is no longer `active` or that CNAPI lost (orphaned).
    pub(crate) fn finish(&self, id: TaskId, result: Result<(), TaskFailure>) {
        let prefix = self.entries().get(&id).map(|e| e.kind.error_prefix());
        let Some(prefix) = prefix else {
            return;
        };
        self.record(
            id,
            result.map_err(|failure| format!("{prefix} error: {}", error_chain(&failure))),
        );
    }

    /// Record a task's end (`Err` holds the error event's message).
    fn record(&self, id: TaskId, result: Result<(), String>) {
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(&id) else {
            return;
        };
        if entry.orphaned || entry.task.status != TaskStatus::Active {
            return;
        }
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

    pub(crate) fn get(&self, id: TaskId) -> Option<Task> {
        self.entries().get(&id).map(|e| e.task.clone())
    }

    /// How many requests are waiting on active tasks right now (each
    /// `GET /tasks/:id/wait` holds a receiver while it waits).
    pub(crate) fn waiting(&self) -> usize {
        self.entries()
            .values()
            .filter(|e| e.task.status == TaskStatus::Active)
            .map(|e| e.done.receiver_count())
            .sum()
    }

    fn subscribe(&self, id: TaskId) -> Option<(Task, watch::Receiver<bool>)> {
        self.entries()
            .get(&id)
            .map(|e| (e.task.clone(), e.done.subscribe()))
    }
}

fn task_not_found() -> Response {
    rest_error(
        STYLE,
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        "no such task found",
    )
}

pub(super) async fn get_task(State(core): Core, Path(raw): Path<String>) -> Response {
    match raw.parse().ok().and_then(|id| core.cnapi.tasks.get(id)) {
        Some(t) => json_response(STYLE, StatusCode::OK, &t),
        None => task_not_found(),
    }
}

pub(super) async fn wait_task(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    ConnectInfo(conn): ConnectInfo<Conn>,
) -> Response {
    let died = core.cnapi.died();
    let q = parse_query(rq.as_deref());
    let Some((task, mut rx)) = raw
        .parse()
        .ok()
        .and_then(|id| core.cnapi.tasks.subscribe(id))
    else {
        return task_not_found();
    };
    if task.is_done() {
        return json_response(STYLE, StatusCode::OK, &task);
    }
    let secs = query_get(&q, "timeout")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .unwrap_or(3600);
    tokio::select! {
        _ = tokio::time::timeout(Duration::from_secs(secs), rx.wait_for(|d| *d)) => {}
        _ = core.shutdown.cancelled() => {}
        () = died => {
            // The process that held this request is gone.
            conn.cut();
            return crate::http::empty(StatusCode::INTERNAL_SERVER_ERROR);
        }
    }
    // On timeout this is still the active task: a 200, not an error.
    match core.cnapi.tasks.get(task.id) {
        Some(t) => json_response(STYLE, StatusCode::OK, &t),
        None => task_not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_as_cn_agent_reports_them() {
        let store = TaskStore::default();
        let server = ServerUuid::new_v4();
        let id = store.create(server, TaskKind::AgentsUninstall, "req");
        assert_eq!(store.get(id).unwrap().task, "agents_uninstall");
        store.finish(id, Err(TaskFailure::InvalidImage { raw: "nope".into() }));
        let t = store.get(id).unwrap();
        assert_eq!(t.status, TaskStatus::Failure);
        assert_eq!(
            t.error_message().as_deref(),
            Some("AgentsUninstallTask error: invalid image_uuid \"nope\"")
        );
    }
}
