//! What each server's cn-agent keeps and does on its own, apart from
//! CNAPI: its task history (cn-agent's `GET /history`, which CNAPI serves
//! as `GET /servers/:uuid/task-history`), and what it does when it starts
//! (after its own update, a reboot): a fresh history, its `server.agents`
//! report, and the sysinfo registration that re-creates a server record
//! CNAPI deleted.
//!
//! The history is cn-agent's (sdc-cn-agent `lib/task_agent/task_runner.js`):
//! its last 16 tasks since it started, oldest first, each `{started_at,
//! task, pid, params, status: active|finished, errorCount, messages, log,
//! finished_at}`, `messages` holding the task's events (`{type: "event",
//! name: "error"|"finish", event, timestamp}`). It survives a CNAPI
//! restart, which is what makes it the place to learn how a task CNAPI
//! lost ended.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::core::DcCore;
use crate::fleet::MockServer;
use crate::http::json_response;
use crate::http::rest_error;
use crate::imgapi::iso_millis;
use agentsadm_types::ids::ServerUuid;

use super::Core;
use super::STYLE;
use super::ServerRecord;
use super::ServerStatus;
use super::params;
use super::prepopulate;
use super::strict;

/// How many tasks cn-agent remembers.
const HISTORY_MAX: usize = 16;

/// Every server's cn-agent memory.
#[derive(Default)]
pub(crate) struct CnAgents {
    history: Mutex<BTreeMap<ServerUuid, Vec<Value>>>,
    pids: AtomicU32,
}

impl CnAgents {
    fn history(&self) -> std::sync::MutexGuard<'_, BTreeMap<ServerUuid, Vec<Value>>> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// cn-agent starts a task (returns the task's child pid, its handle).
    pub(crate) fn started(&self, server: ServerUuid, task: &str, params: Value) -> u32 {
        let pid = 10_000 + self.pids.fetch_add(1, Ordering::Relaxed);
        let mut all = self.history();
        let h = all.entry(server).or_default();
        h.push(json!({
            "started_at": iso_millis(SystemTime::now()),
            "task": task,
            "pid": pid,
            "params": params,
            "status": "active",
            "errorCount": 0,
            "messages": [],
            "log": [],
        }));
        if h.len() > HISTORY_MAX {
            let extra = h.len() - HISTORY_MAX;
            h.drain(..extra);
        }
        pid
    }

    /// The task with `pid` ended: an `error` event first when it failed,
    /// then `finish`.
    pub(crate) fn finished(&self, server: ServerUuid, pid: u32, result: Result<(), String>) {
        let now = iso_millis(SystemTime::now());
        let mut all = self.history();
        let Some(entry) = all
            .get_mut(&server)
            .and_then(|h| h.iter_mut().find(|e| e["pid"] == json!(pid)))
        else {
            // cn-agent restarted since: the history went with it.
            return;
        };
        let event = |name: &str, event: Value| json!({"type": "event", "name": name, "event": event, "timestamp": now});
        let mut messages = Vec::new();
        if let Err(message) = result {
            messages.push(event("error", json!({"error": message})));
            entry["errorCount"] = json!(1);
        }
        messages.push(event("finish", json!({})));
        entry["messages"] = Value::Array(messages);
        entry["status"] = json!("finished");
        entry["finished_at"] = json!(now);
    }

    /// cn-agent restarted: it remembers nothing.
    pub(crate) fn forget(&self, server: ServerUuid) {
        self.history().remove(&server);
    }

    fn of(&self, server: ServerUuid) -> Vec<Value> {
        self.history().get(&server).cloned().unwrap_or_default()
    }
}

/// Whether CNAPI reaches the server's cn-agent: it runs only on a set-up
/// server that is up (not rebooting, heard by CNAPI).
pub(crate) fn cn_agent_up(rec: &ServerRecord) -> bool {
    rec.setup && rec.status == ServerStatus::Running
}

/// ServerTaskHistory: cn-agent's history through CNAPI, or CNAPI's 500
/// when cn-agent does not answer.
pub(super) async fn task_history(
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
    if let Err(r) = strict(&p, &["server_uuid"]) {
        return r;
    }
    if !cn_agent_up(&rec) {
        return rest_error(
            STYLE,
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            format!("connect ECONNREFUSED {}:5309", rec.admin_ip),
        );
    }
    json_response(STYLE, StatusCode::OK, &core.cnapi.agents.of(rec.uuid))
}

/// cn-agent (re)starts on `server`: a fresh history, then what it sends
/// CNAPI at start, which is lost if CNAPI is down then: its sysinfo
/// registration (creating the record again if CNAPI deleted it) and its
/// `server.agents`.
pub(crate) async fn cn_agent_started(core: &DcCore, server: &MockServer) {
    core.cnapi.agents.forget(server.uuid);
    if core.cnapi.info.is_down() {
        tracing::warn!(server = %server.hostname, "sim: cn-agent started while CNAPI is down; its registration and agents report are lost");
        return;
    }
    if core.cnapi.servers().contains_key(&server.uuid) {
        core.refresh_agents(server).await;
        return;
    }
    if let Err(e) = register(core, server).await {
        tracing::warn!(server = %server.hostname, error = %agentsadm_types::error::error_chain(&e), "sim: cn-agent cannot register its server again");
    }
}

/// cn-agent's sysinfo registration of a server CNAPI has no record of:
/// the record again (set up, with the agents its GZ reports).
pub(crate) async fn register(
    core: &DcCore,
    server: &MockServer,
) -> Result<(), crate::gz::GzOpError> {
    core.ensure_prepared(server)?;
    let report = core
        .gz
        .report(server.target(&core.config.datacenter))
        .await?;
    let mut rec = ServerRecord::new(server, &core.config.datacenter, true);
    rec.mockcloud = core.config.mockcloud_without_execute();
    rec.rack_identifier =
        crate::fleet::seeded_rack(server.index, core.config.rack_size).unwrap_or_default();
    rec.agents = report.agents;
    core.cnapi.servers().entry(server.uuid).or_insert(rec);
    core.touch();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_the_last_tasks_in_cn_agents_shape() {
        let agents = CnAgents::default();
        let s = ServerUuid::from_u128(1);
        let first = agents.started(s, "agent_install", json!({"image_uuid": "x"}));
        for _ in 0..HISTORY_MAX {
            agents.started(s, "nop", json!({}));
        }
        let h = agents.of(s);
        assert_eq!(h.len(), HISTORY_MAX);
        assert!(h.iter().all(|e| e["pid"] != json!(first)));
        let pid = agents.started(s, "agent_install", json!({"image_uuid": "y"}));
        agents.finished(s, pid, Err("AgentInstall error: boom".into()));
        let t: agentsadm_api::cnapi::CnAgentTask =
            serde_json::from_value(agents.of(s).last().unwrap().clone()).unwrap();
        assert!(t.is_finished() && t.failed());
        assert_eq!(
            t.error_message().as_deref(),
            Some("AgentInstall error: boom")
        );
        agents.forget(s);
        assert!(agents.of(s).is_empty());
    }
}
