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

use agentsadm_api::bootstrap::{BootstrapImage, bootstrap_request};
use agentsadm_api::compat;
use agentsadm_plan::{ImageRef, Step};
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ServerUuid;

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
        let failed = |message: String| StepFailure::new(FailureStage::Bootstrap, message);
        let Some(imgapi) = &self.imgapi else {
            return Err(failed(format!(
                "this run has no datacenter IMGAPI to read agentsadm image {} from",
                to.uuid
            )));
        };
        let manifest = imgapi.get_image(to.uuid).await.map_err(|e| {
            failed(format!(
                "cannot read agentsadm image {} from the datacenter IMGAPI {}: {}",
                to.uuid,
                imgapi.base_url(),
                error_chain(&e)
            ))
        })?;
        let Some(file) = manifest.files.first() else {
            return Err(failed(format!(
                "agentsadm image {} has no file in the datacenter IMGAPI; import it again",
                to.uuid
            )));
        };
        let image = BootstrapImage {
            image: to.uuid,
            sha1: file.sha1.clone(),
            size: file.size,
        };
        let request = bootstrap_request(&image, self.config.execute_env.clone());
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
                to.uuid
            )));
        }
        self.execute(
            server,
            step,
            &compat::record_args(to.uuid),
            self.config.execute_timeout,
            Some(fence),
        )
        .await
    }
}
