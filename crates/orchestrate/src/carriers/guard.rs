//! What a run asks before it changes anything: whether it still holds the
//! datacenter lock ([`Fence`]), and, when something failed, whether an API
//! stopped answering ([`ApiProbe`]), so that an outage is named as one
//! instead of being blamed on the servers.
//!
//! The executor confirms the lock before the record changes, before each
//! wave and each server it starts, and hands the fence to the transport
//! with every step ([`crate::transport::Transport::run_fenced`]), which
//! confirms it at the last moment before the request that changes the
//! server. A confirmation stands for a short window (the runner's
//! `LockFence`), so a fleet of quick steps costs a few lock reads a
//! second, not one or two per step. Once lost, the lock stays lost for
//! the run: nothing more starts, and the report says which servers this
//! run changed and may since have been changed by the new holder.

use std::time::Duration;

use futures::future::BoxFuture;

pub use crate::vocabulary::outcomes::LockLoss;
use crate::vocabulary::outcomes::StepFailure;
use crate::vocabulary::report::FailureStage;
use agentsadm_api::Api;
use agentsadm_api::CnapiClient;
use agentsadm_api::ImgapiClient;
use agentsadm_api::SapiClient;
use agentsadm_plan::Step;
use agentsadm_types::ids::ServerUuid;

/// What a confirmation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Still ours: go on.
    Held,
    /// Lost (taken over, or its record removed): change nothing more.
    Lost,
    /// The lock could not be read: this API does not answer.
    Unconfirmed(Api),
}

/// The run's hold on the datacenter lock.
pub trait Fence: Send + Sync {
    /// Confirm the lock before `what` (for the report: "the vm-agent step
    /// on cn0003"). One read of the lock; once lost, lost for good.
    fn confirm<'a>(&'a self, what: &'a str) -> BoxFuture<'a, Hold>;

    /// Whether the lock is known to be lost (no read).
    fn is_lost(&self) -> bool;
}

/// No lock to confirm (tests and benchmarks that execute a plan directly,
/// headnode setup before SAPI holds anything).
#[derive(Clone, Copy, Debug, Default)]
pub struct Unfenced;

impl Fence for Unfenced {
    fn confirm<'a>(&'a self, _what: &'a str) -> BoxFuture<'a, Hold> {
        Box::pin(async { Hold::Held })
    }

    fn is_lost(&self) -> bool {
        false
    }
}

/// Confirm the run's lock before changing `server` for `step`.
pub async fn fenced(fence: &dyn Fence, server: ServerUuid, step: &Step) -> Result<(), StepFailure> {
    let what = format!(
        "before the {} {} on server {server}",
        step.component,
        step.action.verb()
    );
    match fence.confirm(&what).await {
        Hold::Held => Ok(()),
        Hold::Lost => Err(StepFailure::new(
            FailureStage::LockLost,
            "not started: this run no longer holds the datacenter lock",
        )),
        Hold::Unconfirmed(api) => Err(StepFailure::new(
            FailureStage::ApiLost { api },
            format!(
                "not started: the datacenter lock could not be confirmed ({api} did not answer)"
            ),
        )),
    }
}

/// Asked when a server's turn failed: does an API the run needs not
/// answer? Then the failure is the outage's, not the server's.
pub trait ApiProbe: Send + Sync {
    /// The first API that does not answer, if any.
    fn down(&self) -> BoxFuture<'_, Option<Api>>;
}

/// Never finds an outage (fakes, benchmarks).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProbe;

impl ApiProbe for NoProbe {
    fn down(&self) -> BoxFuture<'_, Option<Api>> {
        Box::pin(async { None })
    }
}

/// Pings the run's APIs (CNAPI, SAPI, IMGAPI), each within a bound.
#[derive(Clone, Debug)]
pub struct ApiPings {
    pub sapi: SapiClient,
    pub cnapi: Option<CnapiClient>,
    pub imgapi: Option<ImgapiClient>,
    /// How long one ping (no retry: a retry would hide an API that was
    /// away a moment ago) may take before the API counts as not
    /// answering.
    pub bound: Duration,
}

impl ApiPings {
    async fn answers<T, E>(&self, ping: impl std::future::Future<Output = Result<T, E>>) -> bool {
        matches!(tokio::time::timeout(self.bound, ping).await, Ok(Ok(_)))
    }
}

impl ApiProbe for ApiPings {
    fn down(&self) -> BoxFuture<'_, Option<Api>> {
        Box::pin(async move {
            if let Some(c) = &self.cnapi
                && !self.answers(c.ping_once()).await
            {
                return Some(Api::Cnapi);
            }
            if !self.answers(self.sapi.ping_once()).await {
                return Some(Api::Sapi);
            }
            if let Some(i) = &self.imgapi
                && !self.answers(i.ping_once()).await
            {
                return Some(Api::Imgapi);
            }
            None
        })
    }
}
