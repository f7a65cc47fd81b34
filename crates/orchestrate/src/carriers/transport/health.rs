//! The health check after cn-agent's task (plan gate `gz health`): the
//! installed component checked through `agentsadm gz health` on the
//! server. Only the check: the revert after an unhealthy one is a step
//! the turn builds and sends ([`crate::executor::gate`]).

use std::time::Duration;

use agentsadm_api::compat;
use agentsadm_plan::Step;
use agentsadm_types::ids::ServerUuid;

use super::{CnapiTransport, HEALTH_CHECK_PAUSE, HEALTH_CHECK_RETRIES, NO_ANSWER, StepFailure};
use crate::vocabulary::report::FailureStage;

impl CnapiTransport {
    /// The health check after cn-agent's task (plan gate `gz health`):
    /// `agentsadm gz health NAME` through execute, within
    /// [`super::CnapiTransportConfig::health_bound`] in all; how long it
    /// took, or `unhealthy`, or (`installed`) the check could not run.
    pub(super) async fn gz_health(
        &self,
        server: ServerUuid,
        step: &Step,
    ) -> Result<Duration, StepFailure> {
        if step.gate != agentsadm_plan::Gate::GzHealth {
            return Ok(Duration::ZERO);
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
        // The first request goes in the mode of the record the step read
        // before its task ([`super::step_reads`]); a retry reads again.
        let mut known = self.reads.take(server, step);
        let checked = loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let request =
                agentsadm_api::remote::gz_execute_request(&args, self.config.execute_env.clone());
            let sent = match known.take() {
                Some(record) => {
                    self.execute_on(server, step, record, request, left, None)
                        .await
                }
                None => {
                    self.execute_request(server, step, request, left, None)
                        .await
                }
            };
            match sent {
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
        let Err(mut failure) = checked.map(|_| ()) else {
            return Ok(started.elapsed());
        };
        if !failure.is_unhealthy() {
            // The check itself could not run (no answer, execute refused,
            // no agentsadm on the server): the install stands, unconfirmed.
            failure.message = format!(
                "only its health check could not run ('agentsadm gz health' through CNAPI execute, bound {}): {}",
                crate::vocabulary::report::fmt_duration(bound),
                failure.message
            );
            failure.installed = true;
        }
        Err(failure)
    }
}
