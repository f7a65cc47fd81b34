//! The execute mode of one request, and the probe that settles it.
//!
//! Before an execute, the server's mode comes from [`ExecuteModes`]. A
//! probe ([`agentsadm_api::remote::probe_request`]: an `echo`, no
//! `timeout`, safe in both modes) goes first when:
//!
//! - the mode is not sure: SAPI says cn-agent but the running CNAPI has
//!   not been seen doing it (config-agent may not have rewritten it yet);
//!   the probe's answer shows which path CNAPI took;
//! - the request goes through Ur with a bound longer than both
//!   [`CnapiTransportConfig::ur_probe_bound`] and the health check's (an
//!   install, a removal, the bootstrap: the step's whole
//!   `--task-timeout`; a `gz health` is bounded in minutes by itself):
//!   through Ur a server
//!   whose ur-agent is down or restarting gets no answer at all, and
//!   nothing but that bound would end the wait. The probe gives up within
//!   its own short bound and says to check `svcs ur` there.
//!
//! Every answer CNAPI gives, and every request it fails, goes back to
//! [`ExecuteModes`].
//!
//! [`CnapiTransportConfig::ur_probe_bound`]: super::CnapiTransportConfig::ur_probe_bound

use std::time::Duration;

use agentsadm_api::ApiError;
use agentsadm_api::cnapi::ExecuteAnswer;
use agentsadm_api::cnapi::ExecuteMode;
use agentsadm_api::cnapi::ExecuteRequest;
use agentsadm_api::cnapi::Server;
use agentsadm_api::remote::probe_request;
use agentsadm_types::ids::ServerUuid;

use super::{CnapiTransport, NO_ANSWER, StepFailure};
use crate::carriers::execmode::ExecuteModes;
use crate::carriers::recover::lost_cnapi;
use crate::vocabulary::report::FailureStage;
use crate::vocabulary::report::fmt_duration;

impl CnapiTransport {
    /// The mode to send an execute to `server` in, within `bound` (`record`:
    /// its CNAPI record, read just before), probing first where the module
    /// docs say. A probe without an answer fails the step, naming Ur.
    pub(super) async fn mode_for(
        &self,
        server: ServerUuid,
        record: Option<&Server>,
        bound: Duration,
    ) -> Result<ExecuteMode, StepFailure> {
        let Some(record) = record else {
            return Ok(ExecuteMode::Ur);
        };
        let decision = self.modes.decide(record).await;
        let probe_bound = self.config.ur_probe_bound;
        let long = bound > probe_bound.max(self.config.health_bound());
        let long_through_ur = decision.mode == ExecuteMode::Ur && long;
        if decision.sure && !long_through_ur {
            return Ok(decision.mode);
        }
        let within = bound.min(probe_bound);
        match self
            .send_execute(
                server,
                Some(record),
                &probe_request(),
                ExecuteMode::Ur,
                within,
            )
            .await
        {
            Ok(_) => Ok(self.modes.decide(record).await.mode),
            Err(e) => Err(probe_failure(&e, within, bound)),
        }
    }

    /// CNAPI execute of `request` in `mode` within `bound`, telling
    /// [`ExecuteModes`] what CNAPI did with it.
    pub(super) async fn send_execute(
        &self,
        server: ServerUuid,
        record: Option<&Server>,
        request: &ExecuteRequest,
        mode: ExecuteMode,
        bound: Duration,
    ) -> Result<ExecuteAnswer, ApiError> {
        let r = self.cnapi.execute_as(server, request, mode, bound).await;
        observe(&self.modes, record, &r);
        r
    }
}

/// What an execute's outcome tells about the running CNAPI.
fn observe(modes: &ExecuteModes, record: Option<&Server>, r: &Result<ExecuteAnswer, ApiError>) {
    match (r, record) {
        (Ok(answer), Some(record)) => modes.answered(record, answer),
        (Err(e), _) if lost_cnapi(e) => modes.failed(),
        _ => {}
    }
}

/// The step's failure when the probe got no answer (or failed).
fn probe_failure(err: &ApiError, within: Duration, bound: Duration) -> StepFailure {
    let ur_silent = matches!(err, ApiError::Timeout { .. })
        || err.to_string().contains("waiting for ur response");
    if ur_silent {
        return StepFailure::new(
            FailureStage::Execute,
            format!(
                "{NO_ANSWER} within {} to a probe (an 'echo' sent before the command, which would have waited up to {}): CNAPI carries this server's commands through Ur, and its ur-agent does not answer; check 'svcs ur' on that server ('svcadm clear ur' or 'svcadm restart ur'), then run again",
                fmt_duration(within),
                fmt_duration(bound)
            ),
        );
    }
    let mut failure = StepFailure::api(FailureStage::Execute, err);
    failure.message = format!(
        "the probe sent before the command failed: {}",
        failure.message
    );
    failure
}
