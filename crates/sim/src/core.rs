//! The state one simulated datacenter shares between its HTTP services, the
//! task runner and the in-process API: the three APIs' stores, the mock
//! servers, the GZ seam, faults, and the mutation counter persistence
//! watches.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

use super::SimConfig;
use super::cnapi::CnapiState;
use super::faults::Faults;
use super::fleet::MockServer;
use super::gz::GzEnv;
use super::gz::GzLayout;
use super::gz::GzOpError;
use super::gz::GzOps;
use super::gz::SeedImage;
use super::imgapi::ImgapiService;
use super::imgapi::PublishClock;
use super::sapi::SapiService;
use agentsadm_api::remote::ComponentResult;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

/// Why cn-agent's refreshAgents failed, in the words its tasks report.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RefreshFailure {
    /// SmartOS: an entry of `node_modules` could not be read (the whole
    /// refresh fails; `agents_uninstall` reports it after its removals).
    #[error("Error refreshing agent info in CNAPI: Cannot get agents image versions ({why})")]
    Unreadable { why: String },
    /// The dummy backend's POST to a CNAPI that is down.
    #[error("connect ECONNREFUSED {cnapi}")]
    CnapiDown { cnapi: String },
}

pub(crate) struct DcCore {
    pub config: SimConfig,
    pub catalog: Catalog,
    pub faults: Arc<Faults>,
    pub clock: Arc<PublishClock>,
    pub imgapi: Arc<ImgapiService>,
    pub updates: Arc<ImgapiService>,
    pub sapi: Arc<SapiService>,
    pub cnapi: CnapiState,
    /// The physical servers, fixed for the life of the datacenter (a
    /// CNAPI ServerDelete removes the record, not the machine).
    pub fleet: BTreeMap<ServerUuid, Arc<MockServer>>,
    pub gz: Arc<dyn GzOps>,
    /// Set once the listeners are bound.
    pub env: OnceLock<Arc<GzEnv>>,
    pub shutdown: CancellationToken,
    /// Bumped on every change; the persister saves when it moves.
    pub mutations: Arc<AtomicU64>,
    pub state_dir: PathBuf,
    /// What seeding created (persisted with the state).
    pub seed_report: std::sync::Mutex<Option<super::SeedReport>>,
}

impl DcCore {
    pub(crate) fn server(&self, uuid: ServerUuid) -> Option<Arc<MockServer>> {
        self.fleet.get(&uuid).cloned()
    }

    /// The name of an image in the DC IMGAPI.
    pub(crate) fn image_name(&self, image: ImageUuid) -> Option<String> {
        self.imgapi
            .lock()
            .images
            .get(&image)
            .map(|i| i.manifest.name.clone())
    }

    pub(crate) fn env(&self) -> Arc<GzEnv> {
        self.env
            .get()
            .cloned()
            .expect("the GZ environment is set before any request is served")
    }

    pub(crate) fn ensure_prepared(&self, server: &MockServer) -> Result<(), GzOpError> {
        server.ensure_prepared(self.gz.as_ref(), &self.config.datacenter, &|i| {
            self.seed_image(i)
        })
    }

    /// A seeded image from the DC IMGAPI (else the updates server), read
    /// from the store: seeding is not subject to injected faults.
    pub(crate) fn seed_image(&self, image: ImageUuid) -> Option<SeedImage> {
        [&self.imgapi, &self.updates].into_iter().find_map(|svc| {
            let store = svc.lock();
            let stored = store.images.get(&image)?;
            let file = stored.file.as_ref()?;
            Some(SeedImage {
                manifest: stored.current_manifest(),
                file: file.bytes.clone(),
            })
        })
    }

    /// What cn-agent's refreshAgents does: read the GZ as cn-agent reads
    /// it ([`super::gz::GzOps::cn_agent_view`]: only `node_modules` on a
    /// Triton GZ) and set `server.agents` (directly; the real one POSTs to
    /// CNAPI, so nothing arrives while CNAPI is down, and nothing when one
    /// entry cannot be read). Its failures are logged only, as
    /// `agent_install` and cn-agent's start do.
    pub(crate) async fn refresh_agents(&self, server: &MockServer) {
        if let Err(e) = self.try_refresh_agents(server).await {
            tracing::warn!(server = %server.hostname, error = %error_chain(&e), "sim: cn-agent's refresh failed; server.agents unchanged");
        }
    }

    /// [`DcCore::refresh_agents`], saying how it failed. On a Triton GZ
    /// (SmartOS backend) only the listing can fail it: its POST's failure
    /// is logged and the refresh "succeeds" (sdc-cn-agent
    /// `backends/smartos/tasks/shared.js`). The mockcloud (dummy) backend's
    /// POST failure fails it.
    async fn try_refresh_agents(&self, server: &MockServer) -> Result<(), RefreshFailure> {
        let view = self
            .gz
            .cn_agent_view(server.target(&self.config.datacenter))
            .await
            .map_err(|e| RefreshFailure::Unreadable {
                why: error_chain(&e),
            })?;
        if self.cnapi_down(server) {
            return Ok(());
        }
        self.cnapi.set_agents(server.uuid, view);
        self.touch();
        Ok(())
    }

    /// After a cn-agent task ran the installer: `server.agents` as
    /// cn-agent's refreshAgents leaves it. A Triton GZ is read again whole,
    /// as the real one does; a mockcloud server (thousands of them in a
    /// benchmark) gets the entries of the components it touched replaced
    /// from its result ([`super::gz::apply_results`]), which is what the
    /// dummy backend would read there. Failures are logged only (what
    /// `agent_install` does with them).
    pub(crate) async fn record_results(&self, server: &MockServer, results: &[ComponentResult]) {
        if let Err(e) = self.try_record_results(server, results).await {
            tracing::warn!(server = %server.hostname, error = %error_chain(&e), "sim: cn-agent's refresh failed; server.agents unchanged");
        }
    }

    /// [`DcCore::record_results`], saying how the refresh failed (what
    /// `agents_uninstall` fails with).
    pub(crate) async fn try_record_results(
        &self,
        server: &MockServer,
        results: &[ComponentResult],
    ) -> Result<(), RefreshFailure> {
        if self.config.gz_layout == GzLayout::Rooted {
            return self.try_refresh_agents(server).await;
        }
        if self.cnapi_down(server) {
            return Err(RefreshFailure::CnapiDown {
                cnapi: self.env().cnapi_url.clone(),
            });
        }
        if let Some(r) = self.cnapi.servers().get_mut(&server.uuid) {
            super::gz::apply_results(&self.catalog, &mut r.agents, results);
        }
        self.touch();
        Ok(())
    }

    /// Whether CNAPI is down, so that a cn-agent's `server.agents` report
    /// for `server` is lost (cn-agent logs it and does not retry).
    fn cnapi_down(&self, server: &MockServer) -> bool {
        let down = self.cnapi.info.is_down();
        if down {
            tracing::warn!(server = %server.hostname, "sim: CNAPI is down; cn-agent's server.agents report is lost");
        }
        down
    }

    /// Note a change for the persister.
    pub(crate) fn touch(&self) {
        self.mutations.fetch_add(1, Ordering::Relaxed);
    }
}
