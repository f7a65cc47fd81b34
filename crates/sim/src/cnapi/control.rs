//! The simulator's own handles on CNAPI and the cn-agents, for tests, the
//! demo and `sim serve`: restart CNAPI, config-agent's pass over its
//! config, restart a server's cn-agent, and
//! what CNAPI saw (crashes, ServerGet calls, every CommandExecute, the
//! tasks in flight).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ExecuteTransport;
use crate::SimDc;
use crate::gz::GzOpError;
use agentsadm_api::cnapi::Task;
use agentsadm_types::ids::ServerUuid;

/// One CommandExecute as CNAPI received it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteSeen {
    pub server: ServerUuid,
    /// The path CNAPI took (or would have, had it not died).
    pub path: ExecuteTransport,
    /// The request's `timeout` (ms).
    pub timeout: Option<u64>,
    /// The request's `env`: the command's whole environment.
    pub env: BTreeMap<String, String>,
    pub args: Vec<String>,
}

impl SimDc {
    /// CNAPI dies and SMF restarts it after `down` (`None`:
    /// [`crate::SimConfig::cnapi_restart_ms`]), as on a crash, `sdcadm
    /// update cnapi` or a headnode hiccup: requests in flight are cut, the
    /// tasks in flight stay `active` for ever (cn-agent still finishes
    /// them), and `server.agents` reports sent while it is down are lost.
    pub fn restart_cnapi(&self, down: Option<Duration>) {
        let down = down.unwrap_or_else(|| Duration::from_millis(self.core.config.cnapi_restart_ms));
        self.core.cnapi.crash(None, "restarted from outside", down);
    }

    /// config-agent's pass over CNAPI's config ([`super::config_agent`]):
    /// when SAPI's `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` renders another
    /// mode than the running CNAPI's, the config is rewritten and CNAPI
    /// restarts into it. Returns the new mode if it did.
    pub fn config_agent_sync(&self) -> Option<ExecuteTransport> {
        super::config_agent::sync(&self.core)
    }

    /// How the running CNAPI carries CommandExecute (its config when it
    /// last started), whatever SAPI says now.
    pub fn cnapi_execute_mode(&self) -> ExecuteTransport {
        self.core.cnapi.mode()
    }

    /// An operator sets (or clears) `FEATURE_USE_CNAGENT_COMMAND_EXECUTE`
    /// in the SAPI `cnapi` service's metadata. CNAPI itself is not told:
    /// that is config-agent's job ([`SimDc::config_agent_sync`]).
    pub fn set_sapi_cn_agent_execute(&self, on: bool) {
        let mut store = self.core.sapi.lock();
        for service in store.services.iter_mut().filter(|s| s.name == "cnapi") {
            let metadata = service.metadata.get_or_insert_with(Default::default);
            metadata.insert(
                agentsadm_orchestrate::execmode::CN_AGENT_EXECUTE_FLAG.to_string(),
                serde_json::Value::Bool(on),
            );
        }
        drop(store);
        self.core.touch();
    }

    /// How many times CNAPI died (crashes and restarts). Against the real
    /// CNAPI: its process id changed.
    pub fn cnapi_crashes(&self) -> u64 {
        self.core.cnapi.crashes.load(Ordering::Relaxed)
    }

    /// Whether CNAPI is down right now (between a crash and its restart).
    pub fn cnapi_down(&self) -> bool {
        self.core.cnapi.info.is_down()
    }

    /// How many ServerGet requests CNAPI served (each computes capacity
    /// through VMAPI).
    pub fn server_gets(&self) -> u64 {
        self.core.cnapi.server_gets.load(Ordering::Relaxed)
    }

    /// Setup and factory-reset jobs that have ended (their writes to the
    /// server record are done).
    pub fn jobs_ended(&self) -> u64 {
        self.core.cnapi.jobs_ended.load(Ordering::Relaxed)
    }

    /// How many times Ur rebooted a server (an execute that exited 113).
    pub fn reboots(&self) -> u64 {
        self.core.cnapi.reboots.load(Ordering::Relaxed)
    }

    /// Every CommandExecute CNAPI received, oldest first.
    pub fn executes(&self) -> Vec<ExecuteSeen> {
        self.core
            .cnapi
            .executes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The tasks whose CNAPI record is `active`.
    pub fn active_tasks(&self) -> Vec<Task> {
        self.core.cnapi.tasks.active()
    }

    /// How many `GET /tasks/:id/wait` requests wait on active tasks now:
    /// a test that restarts CNAPI under a waiting client waits for one.
    pub fn task_waiters(&self) -> usize {
        self.core.cnapi.tasks.waiting()
    }

    /// cn-agent restarts on a server: it forgets its task history, sends
    /// its `server.agents`, and registers the server again if CNAPI deleted
    /// its record (lost if CNAPI is down then).
    pub async fn restart_cn_agent(&self, uuid: ServerUuid) -> Result<(), GzOpError> {
        let server = self
            .core
            .server(uuid)
            .ok_or(GzOpError::UnknownServer { server: uuid })?;
        super::cn_agent_started(&self.core, &server).await;
        Ok(())
    }

    /// What a still-running cn-agent does after a CNAPI ServerDelete: its
    /// sysinfo registration creates the record again (setup, with the
    /// agents its GZ reports). No-op when the record exists.
    pub async fn reregister(&self, uuid: ServerUuid) -> Result<(), GzOpError> {
        let server = self
            .core
            .server(uuid)
            .ok_or(GzOpError::UnknownServer { server: uuid })?;
        if self.record(uuid).is_some() {
            return Ok(());
        }
        super::agent::register(&self.core, &server).await
    }
}
