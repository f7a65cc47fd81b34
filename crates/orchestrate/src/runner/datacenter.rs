//! What a [`crate::run::Run`] works on: where the datacenter lock lives,
//! where images are imported, what carries the plan's changes to servers
//! and SAPI, and the SAPI that keeps the history's copy and agentsadm's
//! own services.
//!
//! The product's is [`ApiDatacenter`], the datacenter's APIs. Tests and
//! benchmarks on a fake datacenter (the simulator crate's `FakeDc`) bring
//! their own, so that they go through the same run as the binary: the
//! lock taken, refreshed and confirmed before each change, the plan made
//! again under it, `-y` or the operator's answers, the canary question,
//! interrupts, and the history entry. Only the run builds an executor
//! (`tests/architecture.rs`).

use std::ops::Deref;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::carriers::guard::{ApiPings, ApiProbe};
use crate::carriers::images::{self, ImageError};
use crate::carriers::records::{ApiRecords, RecordStore};
use crate::carriers::store::{IntentStore, SapiIntentStore};
use crate::carriers::transport::{
    CnapiTransport, CnapiTransportConfig, StepDone, StepFailure, Transport,
};
use crate::runner::lock::{LockError, LockStore, SapiLockStore};
use agentsadm_api::{CnapiClient, ImgapiClient, SapiClient};
use agentsadm_plan::{ImageRef, Plan};
use agentsadm_types::catalog::Catalog;

/// A part of the datacenter a run uses: made for this run, or lent by
/// whoever owns it (a test's fake).
pub enum Part<'a, T: ?Sized> {
    Made(Box<T>),
    Lent(&'a T),
}

impl<T: ?Sized> Deref for Part<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Part::Made(b) => b,
            Part::Lent(r) => r,
        }
    }
}

/// What carries one run's changes.
pub struct Carriers<'a> {
    /// Steps to servers.
    pub transport: Part<'a, dyn Transport + 'a>,
    /// Intent (SAPI instances and service defaults).
    pub store: Part<'a, dyn IntentStore + 'a>,
    /// The plan's record changes (CNAPI and SAPI records).
    pub records: Part<'a, dyn RecordStore + 'a>,
    /// Asked, when a server's turn failed, whether an API stopped
    /// answering.
    pub probe: Part<'a, dyn ApiProbe + 'a>,
}

/// How a run wants its carriers.
#[derive(Clone, Debug)]
pub struct CarrierSettings<'a> {
    pub catalog: &'a Catalog,
    /// How steps reach servers through CNAPI.
    pub transport: CnapiTransportConfig,
    /// How long one ping of an API may take before it counts as down.
    pub probe_bound: Duration,
}

/// Why a run cannot use a part of the datacenter; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum DatacenterError {
    #[error("this plan needs {api}, which this run has no URL for; nothing was changed")]
    MissingApi { api: &'static str },
    #[error(transparent)]
    Image(#[from] ImageError),
}

/// The datacenter a run reads and changes.
pub trait Datacenter: Sync {
    /// Where the datacenter lock lives.
    fn lock_store(&self) -> BoxFuture<'_, Result<Part<'_, dyn LockStore + '_>, LockError>>;

    /// The SAPI of a real datacenter, for what only it holds: the run
    /// history's copy ([`crate::history::SapiHistory`]) and agentsadm's
    /// own services, moved out of `sdc` ([`crate::shape`]). `None` (a
    /// fake datacenter): nothing to move, and the history is kept only
    /// where the run's [`crate::history::HistorySettings`] say.
    fn sapi(&self) -> Option<&SapiClient>;

    /// The CNAPI of a real datacenter, for what the record move asks it:
    /// whether the servers that marks kept once name still exist
    /// ([`crate::runner::ledger`]). `None`: no CNAPI (a fake datacenter,
    /// headnode setup before CNAPI exists).
    fn cnapi(&self) -> Option<&CnapiClient> {
        None
    }

    /// Import `images` into the datacenter's IMGAPI (those with a source).
    fn import<'a>(&'a self, images: &'a [ImageRef]) -> BoxFuture<'a, Result<(), DatacenterError>>;

    /// What carries `plan`'s changes.
    fn carriers<'a>(
        &'a self,
        plan: &Plan,
        settings: &CarrierSettings<'_>,
    ) -> Result<Carriers<'a>, DatacenterError>;
}

/// A datacenter lent to a run (a test's fake, which the test reads after).
impl<T: Datacenter + ?Sized> Datacenter for &T {
    fn lock_store(&self) -> BoxFuture<'_, Result<Part<'_, dyn LockStore + '_>, LockError>> {
        (**self).lock_store()
    }

    fn sapi(&self) -> Option<&SapiClient> {
        (**self).sapi()
    }

    fn cnapi(&self) -> Option<&CnapiClient> {
        (**self).cnapi()
    }

    fn import<'a>(&'a self, images: &'a [ImageRef]) -> BoxFuture<'a, Result<(), DatacenterError>> {
        (**self).import(images)
    }

    fn carriers<'a>(
        &'a self,
        plan: &Plan,
        settings: &CarrierSettings<'_>,
    ) -> Result<Carriers<'a>, DatacenterError> {
        (**self).carriers(plan, settings)
    }
}

/// The datacenter of one run: its APIs (the product), or one lent by
/// whoever owns it (a test's fake).
#[derive(Clone, Copy)]
pub enum RunOn<'a> {
    Apis(ApiDatacenter<'a>),
    Lent(&'a dyn Datacenter),
}

impl<'a> Deref for RunOn<'a> {
    type Target = dyn Datacenter + 'a;

    fn deref(&self) -> &(dyn Datacenter + 'a) {
        match self {
            RunOn::Apis(apis) => apis,
            RunOn::Lent(dc) => *dc,
        }
    }
}

/// The datacenter's APIs.
#[derive(Clone, Copy, Debug)]
pub struct ApiDatacenter<'a> {
    /// Where the lock and intent live.
    pub sapi: &'a SapiClient,
    /// How steps reach servers and CNAPI records are written (`None`
    /// before CNAPI exists: headnode setup's local adoption).
    pub cnapi: Option<&'a CnapiClient>,
    /// Where images are imported (`None`: a plan that imports fails).
    pub imgapi: Option<&'a ImgapiClient>,
}

impl Datacenter for ApiDatacenter<'_> {
    fn lock_store(&self) -> BoxFuture<'_, Result<Part<'_, dyn LockStore + '_>, LockError>> {
        Box::pin(async move {
            let store = SapiLockStore::new(self.sapi.clone()).await?;
            Ok(Part::Made(Box::new(store) as Box<dyn LockStore>))
        })
    }

    fn sapi(&self) -> Option<&SapiClient> {
        Some(self.sapi)
    }

    fn cnapi(&self) -> Option<&CnapiClient> {
        self.cnapi
    }

    fn import<'a>(&'a self, images: &'a [ImageRef]) -> BoxFuture<'a, Result<(), DatacenterError>> {
        Box::pin(async move {
            if images.is_empty() {
                return Ok(());
            }
            let imgapi = self
                .imgapi
                .ok_or(DatacenterError::MissingApi { api: "IMGAPI" })?;
            images::import(imgapi, images).await?;
            Ok(())
        })
    }

    fn carriers<'a>(
        &'a self,
        plan: &Plan,
        settings: &CarrierSettings<'_>,
    ) -> Result<Carriers<'a>, DatacenterError> {
        let (transport, records): (Box<dyn Transport>, ApiRecords) = match self.cnapi {
            Some(cnapi) => {
                let transport = CnapiTransport::new(
                    cnapi.clone(),
                    settings.catalog.clone(),
                    settings.transport.clone(),
                )
                .with_sapi(self.sapi.clone());
                let transport = match self.imgapi {
                    Some(imgapi) => transport.with_imgapi(imgapi.clone()),
                    None => transport,
                };
                (Box::new(transport), ApiRecords::new_with(self.sapi, cnapi))
            }
            None if plan.servers().is_empty() => {
                (Box::new(NoCnapi), ApiRecords::sapi_only(self.sapi))
            }
            None => return Err(DatacenterError::MissingApi { api: "CNAPI" }),
        };
        let probe = ApiPings {
            sapi: self.sapi.clone(),
            cnapi: self.cnapi.cloned(),
            imgapi: self.imgapi.cloned(),
            bound: settings.probe_bound,
        };
        Ok(Carriers {
            transport: Part::Made(transport),
            store: Part::Made(Box::new(SapiIntentStore::new(self.sapi.clone()))),
            records: Part::Made(Box::new(records)),
            probe: Part::Made(Box::new(probe)),
        })
    }
}

/// No way to reach servers (a SAPI-only run); never used with a plan that
/// has server steps.
struct NoCnapi;

impl Transport for NoCnapi {
    fn run<'a>(
        &'a self,
        _: agentsadm_types::ids::ServerUuid,
        _: &'a agentsadm_plan::Step,
    ) -> BoxFuture<'a, Result<StepDone, StepFailure>> {
        Box::pin(async {
            Err(StepFailure::new(
                crate::vocabulary::report::FailureStage::Execute,
                "this run has no CNAPI to reach servers through".to_string(),
            ))
        })
    }
}
