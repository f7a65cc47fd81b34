//! The contract between the headnode and the GZ installer on a server: how the
//! orchestrator runs `agentsadm gz ...` through CNAPI execute, and the JSON
//! documents those commands print with `--json`.
//!
//! Both sides (the orchestrator's execute transport, the simulator's execute
//! endpoint, and `agentsadm gz` itself) use these types, so a change to the
//! wire shape is a change in one place.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cnapi::AgentEntry;

use crate::cnapi::ExecuteRequest;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

/// Where the agentsadm binary lives in a global zone (installed by
/// `installer/agentsetup.sh`, outside `/opt/smartdc/agents` so that it is not
/// mistaken for an agent and survives agent removal).
pub const GZ_BINARY: &str = "/opt/smartdc/agentsadm/bin/agentsadm";

/// The script sent with CNAPI execute. The arguments travel in the request's
/// `args` (never interpolated into the script), so no quoting can go wrong.
pub const EXEC_SCRIPT: &str = "#!/bin/bash\nexec /opt/smartdc/agentsadm/bin/agentsadm \"$@\"\n";

/// Build the CNAPI execute request that runs `agentsadm <args...>` on a
/// server. `env` carries the API URLs when the server cannot read them from
/// its own SDC config (the simulator).
pub fn gz_execute_request(
    args: &[String],
    env: BTreeMap<String, String>,
    timeout: Duration,
) -> ExecuteRequest {
    ExecuteRequest {
        script: EXEC_SCRIPT.to_string(),
        args: args.to_vec(),
        env,
        json: true,
        // CNAPI's execute timeout is in milliseconds.
        timeout: Some((timeout.as_millis() as u64).max(1)),
    }
}

/// The `agentsadm` arguments of a request built by [`gz_execute_request`],
/// or `None` for any other script.
pub fn parse_gz_execute(request: &ExecuteRequest) -> Option<&[String]> {
    (request.script == EXEC_SCRIPT).then_some(request.args.as_slice())
}

/// What `agentsadm gz report --json` prints: the `server.agents` list (the
/// shape CNAPI stores) and the components whose metadata could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsReport {
    pub server_uuid: ServerUuid,
    pub agents: Vec<AgentEntry>,
    #[serde(default)]
    pub errors: Vec<ReportError>,
}

/// A component that is present but unreadable (missing `image_uuid`,
/// garbage `package.json`, ...). It never makes the whole report fail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportError {
    pub name: String,
    pub message: String,
}

/// What happened to one component in a `gz install|remove|rollback` run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentAction {
    Installed,
    Upgraded,
    /// The requested image was already installed and complete.
    Unchanged,
    Removed,
    /// `gz remove` of something that was not installed.
    Absent,
    RolledBack,
}

/// One component's outcome in a [`GzResult`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentResult {
    pub name: String,
    pub action: ComponentAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_image: Option<ImageUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_uuid: Option<ImageUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_uuid: Option<InstanceUuid>,
    pub elapsed_ms: u64,
}

/// Why a `gz` run failed: the component, the step (`resolve`, `download`,
/// `verify`, `unpack`, `hook:postinstall`, `swap`, `smf`, `sapi`, `cnapi`,
/// `lock`, ...) and the message, which already says what to do next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GzFailure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    pub step: String,
    pub message: String,
}

/// What `agentsadm gz install|remove|rollback|setup --json` prints. On
/// failure `error` is set and `components` lists what did complete before it
/// (each failed component itself was rolled back).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GzResult {
    pub server_uuid: ServerUuid,
    pub components: Vec<ComponentResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<GzFailure>,
    /// Things the operator should know that did not fail the run: adoption
    /// skipped (no SAPI service), CNAPI report not posted, transactions of an
    /// earlier interrupted run recovered, the job handed to the SMF service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execute_request_round_trips() {
        let args = vec!["gz".to_string(), "install".to_string(), "x".to_string()];
        let req = gz_execute_request(&args, BTreeMap::new(), Duration::from_secs(60));
        assert_eq!(parse_gz_execute(&req), Some(args.as_slice()));
        let other = ExecuteRequest {
            script: "rm -rf /".into(),
            ..Default::default()
        };
        assert_eq!(parse_gz_execute(&other), None);
    }
}
