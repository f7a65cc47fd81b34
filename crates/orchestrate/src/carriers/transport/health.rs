//! The health gate after cn-agent's task (plan gate `gz health`): the
//! installed component checked through `agentsadm gz health` on the
//! server, and what a failed check leaves (the previous image back).

use std::time::Duration;

use agentsadm_api::compat;
use agentsadm_plan::{Action, Step};
use agentsadm_types::ids::{ImageUuid, ServerUuid, TaskId};

use super::{
    CnapiTransport, HEALTH_CHECK_PAUSE, HEALTH_CHECK_RETRIES, NO_ANSWER, StepFailure, TaskGoal,
};
use crate::vocabulary::report::FailureStage;

impl CnapiTransport {
    /// The health gate after cn-agent's task (plan gate `gz health`):
    /// `agentsadm gz health NAME` through execute, within
    /// [`CnapiTransportConfig::health_bound`] in all. Unhealthy: the
    /// previous image is reinstalled through install-agent (cn-agent's task
    /// cannot roll back by itself) and the step fails as `unhealthy`.
    pub(super) async fn gz_health(
        &self,
        server: ServerUuid,
        step: &Step,
        task: Option<TaskId>,
    ) -> Result<Option<Duration>, StepFailure> {
        if step.gate != agentsadm_plan::Gate::GzHealth {
            return Ok(None);
        }
        let started = tokio::time::Instant::now();
        let args = compat::health_args(&step.component, &self.health_args());
        // `gz health` only reads: a request CNAPI failed quickly (a 5xx, a
        // dropped connection) is asked again, a few times, as long as the
        // bound leaves time; one that got no answer is not. An answer is
        // never asked again: the check ran on the server, and its verdict
        // (unhealthy, or the script's own exit status without a result)
        // would be the same the next time, only later.
        let bound = self.config.health_bound();
        let deadline = tokio::time::Instant::now() + bound;
        let mut attempt = 0u32;
        let checked = loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let request =
                agentsadm_api::remote::gz_execute_request(&args, self.config.execute_env.clone());
            match self
                .execute_request(server, step, request, left, None)
                .await
            {
                Ok(answer) => break self.gz_outcome(step, &answer),
                Err(e)
                    if e.stage == FailureStage::Execute
                        && attempt < HEALTH_CHECK_RETRIES
                        && !e.message.contains(NO_ANSWER)
                        && deadline.saturating_duration_since(tokio::time::Instant::now())
                            > HEALTH_CHECK_PAUSE * (attempt + 1) =>
                {
                    attempt += 1;
                    tracing::info!(%server, component = %step.component, attempt, error = %e, "the health check's request failed before the server answered; asking again");
                    tokio::time::sleep(HEALTH_CHECK_PAUSE * attempt).await;
                }
                Err(e) => break Err(e),
            }
        };
        let Err(mut unhealthy) = checked.map(|_| ()) else {
            return Ok(Some(started.elapsed()));
        };
        if !unhealthy.is_unhealthy() {
            // The check itself could not run (no answer, execute refused,
            // no agentsadm on the server): the install stands, unconfirmed.
            let finished = match task {
                Some(task) => format!("CNAPI task {task} completed"),
                None => "the server already ran the target".to_string(),
            };
            unhealthy.message = format!(
                "the install itself finished ({finished}); only its health check could not run ('agentsadm gz health' through CNAPI execute, bound {}): {}",
                crate::vocabulary::report::fmt_duration(bound),
                unhealthy.message
            );
            unhealthy.installed = true;
            return Err(unhealthy);
        }
        let previous = match &step.action {
            Action::Upgrade { from, .. } => from.image,
            _ => None,
        };
        // What the server runs again: the previous image reinstalled, or
        // (a fresh install) nothing.
        let package = self.package_name(&step.component);
        let reverted: Result<Option<ImageUuid>, StepFailure> = match previous {
            Some(image) => match self.cnapi.install_agent(server, image).await {
                Ok(id) => {
                    let goal = TaskGoal::Install {
                        package: package.clone(),
                        image,
                        version: match &step.action {
                            Action::Upgrade { from, .. } => from.version.to_string(),
                            _ => String::new(),
                        },
                    };
                    self.wait(server, &step.component, id, &goal)
                        .await
                        .map(|()| Some(image))
                }
                Err(e) => Err(StepFailure::api(FailureStage::InstallAgent, &e)),
            },
            None => self
                .uninstall(server, &step.component, &package, None)
                .await
                .map(|()| None),
        };
        match reverted {
            Ok(Some(image)) => {
                unhealthy.message =
                    format!("{}; reverted: image {image} reinstalled", unhealthy.message);
            }
            Ok(None) => {
                unhealthy.message = format!("{}; reverted: removed again", unhealthy.message);
            }
            Err(e) => {
                unhealthy.revert_error = Some(e.to_string());
                unhealthy.message = format!(
                    "{}; REVERT FAILED ({e}): reinstall the previous image by hand",
                    unhealthy.message
                );
            }
        }
        Err(unhealthy)
    }
}
