//! Removals through cn-agent's `agents_uninstall` (CNAPI
//! uninstall-agents), and settling one whose failure may be only cn-agent's
//! final refresh of `server.agents`.
//!
//! cn-agent removes the packages first and refreshes `server.agents` last,
//! and fails the task when that refresh fails: the mockcloud (dummy)
//! backend when its POST meets a CNAPI that is away (a restart mid-task,
//! which also leaves CNAPI's record `active` for ever), SmartOS when it
//! cannot list `node_modules`. Such a failure ([`Waited::Unsettled`]) is
//! settled from the server, as a lost install is: by the server's own
//! report where CNAPI execute reaches it, else by asking cn-agent to
//! remove the package again (removing what is gone is a no-op for both
//! backends, and its refresh reaches CNAPI this time). The removal is then
//! reported, `server.agents` refreshed, and the caller deletes the SAPI
//! instance as for any removal.

use agentsadm_api::cnapi::UNINSTALL_MIN_CN_AGENT;
use agentsadm_plan::Step;
use agentsadm_types::component::ComponentName;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::version::below_as_node_semver;

use super::{CnapiTransport, StepFailure, TaskGoal, Waited};
use crate::carriers::guard::{Fence, fenced};
use crate::vocabulary::report::FailureStage;

impl CnapiTransport {
    /// uninstall-agents of `package`, refused here (before CNAPI is asked)
    /// when `server.agents` does not list cn-agent >= 2.8.0 as CNAPI reads
    /// it (node-semver: `2.8.0-master-...` is below): CNAPI answers 412
    /// for an older one, and without the entry its refusal crashes it.
    pub(super) async fn uninstall(
        &self,
        server: ServerUuid,
        component: &str,
        package: &ComponentName,
        fence: Option<(&dyn Fence, &Step)>,
    ) -> Result<(), StepFailure> {
        let record = self
            .cnapi
            .list_server(server)
            .await
            .map_err(|e| StepFailure::api(FailureStage::UninstallAgents, &e))?;
        let refusal = match &record {
            None => Some("CNAPI has no record of the server".to_string()),
            Some(r) => match r.cn_agent() {
                None => Some(
                    "its server.agents lists no cn-agent (CNAPI 1.26.6 crashes on such a request instead of refusing it); check that cn-agent runs on the server ('svcs cn-agent') and reports, or reinstall it with 'agentsadm install cn-agent -s <server>', then remove again"
                        .to_string(),
                ),
                // CNAPI compares with node-semver, where a build of the
                // floor (`2.8.0-master-...`) is a pre-release below it.
                Some(a) => below_as_node_semver(&a.version, &UNINSTALL_MIN_CN_AGENT).map(|why| {
                    format!(
                        "CNAPI's uninstall-agents needs cn-agent {UNINSTALL_MIN_CN_AGENT} or later, and its cn-agent {}; update cn-agent first ('agentsadm update cn-agent -s <server>'), or remove through execute ('--transport execute')",
                        if a.version.is_empty() {
                            "reports no version".to_string()
                        } else {
                            why
                        }
                    )
                }),
            },
        };
        if let Some(why) = refusal {
            return Err(StepFailure::new(
                FailureStage::UninstallAgents,
                format!("not asked to remove {package}: {why}"),
            ));
        }
        if let Some((fence, step)) = fence {
            fenced(fence, server, step).await?;
        }
        let id = self
            .cnapi
            .uninstall_agents(server, &[package.to_string()])
            .await
            .map_err(|e| StepFailure::api(FailureStage::UninstallAgents, &e))?;
        let goal = TaskGoal::Uninstall {
            packages: vec![package.clone()],
        };
        match self.wait_for(server, component, id, &goal).await? {
            Waited::Unsettled { failure } => {
                self.settle_uninstall(server, component, package, &goal, failure, fence)
                    .await
            }
            Waited::Complete | Waited::FromServer { .. } => Ok(()),
        }
    }

    /// Settle an uninstall cn-agent reported failed where the failure may
    /// be only its refresh (module docs): `Ok` when the server no longer
    /// has the package, else `failure` (with what the second ask said).
    async fn settle_uninstall(
        &self,
        server: ServerUuid,
        component: &str,
        package: &ComponentName,
        goal: &TaskGoal,
        failure: StepFailure,
        fence: Option<(&dyn Fence, &Step)>,
    ) -> Result<(), StepFailure> {
        tracing::warn!(%server, %component, failure = %failure.message, "cn-agent reports the removal failed, maybe only at its refresh of server.agents; asking the server");
        if let Some(live) = self.live_agents(server).await {
            if !goal.shown_in(&live) {
                return Err(failure);
            }
            tracing::warn!(%server, %component, "the server's own report shows the removal done");
            if let Err(e) =
                crate::carriers::recover::refresh_agents(&self.cnapi, server, goal, Some(live))
                    .await
            {
                tracing::warn!(%server, error = %error_chain(&e), "cannot post the server's report to server.agents; 'agentsadm check --fix' posts it later");
            }
            return Ok(());
        }
        if let Some((fence, step)) = fence {
            fenced(fence, server, step).await?;
        }
        let again = match self
            .cnapi
            .uninstall_agents(server, &[package.to_string()])
            .await
        {
            Ok(id) => self.wait_for(server, component, id, goal).await,
            Err(e) => Err(StepFailure::api(FailureStage::UninstallAgents, &e)),
        };
        match again {
            Ok(Waited::Complete | Waited::FromServer { .. }) => {
                tracing::warn!(%server, %component, "asked again, cn-agent removed nothing more and reported server.agents: the removal was done");
                self.refresh_agents(server, goal).await;
                Ok(())
            }
            Ok(Waited::Unsettled { failure: second }) | Err(second) => Err(StepFailure {
                message: format!(
                    "{}; asked to remove {package} again: {}",
                    failure.message, second.message
                ),
                ..failure
            }),
        }
    }
}
