//! The bootstrap carrier: agentsadm onto a server whose own copy is
//! missing or cannot parse an execute install, without running that copy.
//!
//! 1. The image's manifest from the datacenter IMGAPI (its file's SHA-1
//!    and size, which the script checks the download against).
//! 2. CNAPI execute of `installer/bootstrap-agentsadm.sh`
//!    ([`agentsadm_api::bootstrap`]), within the step's execute timeout: it
//!    downloads, checks, unpacks beside and renames into place, and can be
//!    run again after any failure.
//! 3. The copy now in place records itself: `agentsadm gz install IMAGE
//!    --json` ([`compat::record_args`], words every agentsadm parses), an
//!    ordinary execute whose result document gives the instance UUID. The
//!    installer finds the image installed and only keeps the instance,
//!    adopts it into SAPI and reports the server to CNAPI.
//!
//! A copy that CNAPI's `server.agents` lists but that is not on the server
//! (its binary removed by hand or lost with a disk) makes every execute
//! answer 127: the execute that gets that answer puts the listed image
//! back through the same script ([`CnapiTransport::bootstrap_listed`]) and
//! runs its line again, so `update agentsadm` (or any step) is not refused
//! on every run.

use agentsadm_api::bootstrap::{BootstrapImage, bootstrap_request};
use agentsadm_api::cnapi::ExecuteAnswer;
use agentsadm_api::compat;
use agentsadm_plan::{ImageRef, Step};
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::{ImageUuid, ServerUuid};

use super::{CnapiTransport, StepDone, StepFailure, tail};
use crate::carriers::guard::Fence;
use crate::vocabulary::report::FailureStage;

impl CnapiTransport {
    /// Put agentsadm `to` on the server through the bootstrap, then have it
    /// record itself (module docs).
    pub(super) async fn bootstrap(
        &self,
        server: ServerUuid,
        step: &Step,
        to: &ImageRef,
        fence: &dyn Fence,
    ) -> Result<StepDone, StepFailure> {
        self.bootstrap_script(server, step, to.uuid, fence).await?;
        self.execute_once(server, step, &compat::record_args(to.uuid), fence)
            .await
    }

    /// The agentsadm image `server.agents` lists for the server, put back
    /// through the script (its binary is missing).
    pub(super) async fn bootstrap_listed(
        &self,
        server: ServerUuid,
        step: &Step,
        fence: &dyn Fence,
    ) -> Result<(), StepFailure> {
        let record = self
            .cnapi
            .list_server(server)
            .await
            .map_err(|e| StepFailure::api(FailureStage::Bootstrap, &e))?;
        let listed = record
            .and_then(|r| r.agents)
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.name.as_str() == AGENTSADM)
            .and_then(|a| a.image_uuid);
        let Some(image) = listed else {
            return Err(StepFailure::new(
                FailureStage::Bootstrap,
                format!(
                    "agentsadm is missing at {} and server.agents names no agentsadm image to put back; run 'agentsadm update agentsadm' for this server",
                    agentsadm_api::remote::GZ_BINARY
                ),
            ));
        };
        self.bootstrap_script(server, step, image, fence).await
    }

    /// Steps 1 and 2 of the module docs: `image` in place.
    async fn bootstrap_script(
        &self,
        server: ServerUuid,
        step: &Step,
        image: ImageUuid,
        fence: &dyn Fence,
    ) -> Result<(), StepFailure> {
        let failed = |message: String| StepFailure::new(FailureStage::Bootstrap, message);
        let Some(imgapi) = &self.imgapi else {
            return Err(failed(format!(
                "this run has no datacenter IMGAPI to read agentsadm image {} from",
                image
            )));
        };
        let manifest = imgapi.get_image(image).await.map_err(|e| {
            failed(format!(
                "cannot read agentsadm image {} from the datacenter IMGAPI {}: {}",
                image,
                imgapi.base_url(),
                error_chain(&e)
            ))
        })?;
        let Some(file) = manifest.files.first() else {
            return Err(failed(format!(
                "agentsadm image {} has no file in the datacenter IMGAPI; import it again",
                image
            )));
        };
        let bootstrap = BootstrapImage {
            image,
            sha1: file.sha1.clone(),
            size: file.size,
        };
        let request = bootstrap_request(&bootstrap, self.config.execute_env.clone());
        let result = self
            .execute_request(
                server,
                step,
                request,
                self.config.execute_timeout,
                Some(fence),
            )
            .await?;
        if result.exit_status != 0 {
            let output = if result.stderr.trim().is_empty() {
                &result.stdout
            } else {
                &result.stderr
            };
            return Err(failed(format!(
                "the bootstrap script {} ({}); the server's agentsadm is as it was, or whole at image {}: run the same command again",
                result.describe_exit(),
                tail(output),
                image
            )));
        }
        Ok(())
    }
}

/// The catalog name of agentsadm in `server.agents`.
const AGENTSADM: &str = "agentsadm";

/// An execute that found no agentsadm to run: bash's 127 for a missing
/// command, and no result document.
pub(super) fn missing_binary(result: &ExecuteAnswer) -> bool {
    result.exit_status == 127
        && result.exit_error.is_none()
        && super::parse_gz_result(&result.stdout).is_none()
}
