//! `gz health NAME`: the health gate for a component that is already
//! installed (after cn-agent's install task, which has no gate of its own):
//! every SMF instance its manifests define that should run is online and
//! stays online for `--min-healthy`.

use std::path::PathBuf;

use agentsadm_api::remote::ComponentAction;

use agentsadm_api::remote::ComponentResult;

use agentsadm_api::remote::GzResult;

use super::super::health;
use super::super::step::Step;
use super::GzSession;
use super::failure;
use super::refusal;

impl GzSession {
    /// Check `name`'s services. The result names the component (its image
    /// and version) when healthy; its error is an `unhealthy` failure
    /// naming the service and state otherwise. Also returns the instances
    /// checked.
    pub async fn health(&mut self, name: &str) -> (GzResult, Vec<String>) {
        let mut result = self.result();
        let c = match self.settings.catalog.require(name) {
            Ok(c) => c.clone(),
            Err(e) => {
                result.error = Some(failure(Some(name), Step::Resolve, &e, None));
                return (result, Vec::new());
            }
        };
        let current = match self.current(&c).await {
            Ok(Some(fp)) => fp,
            Ok(None) => {
                result.error = Some(refusal(
                    Some(&c.name),
                    Step::Resolve,
                    format!("{} is not installed on server {}", c.name, self.server),
                ));
                return (result, Vec::new());
            }
            Err(e) => {
                result.error = Some(failure(Some(&c.name), Step::Resolve, &e, None));
                return (result, Vec::new());
            }
        };
        let mut checked = Vec::new();
        if self.layout.runs_services() {
            let files: Vec<PathBuf> = current
                .smf_manifests
                .iter()
                .map(|rel| self.paths().at(rel))
                .collect();
            let gate = self
                .settings
                .health
                .unwrap_or_else(|| health::HealthGate::for_root(&self.settings.root));
            match health::check_installed(self.platform.as_ref(), files, &gate).await {
                Ok(fmris) => checked = fmris,
                Err(e) => {
                    result.error = Some(failure(Some(&c.name), Step::Unhealthy, &e, None));
                    return (result, Vec::new());
                }
            }
        }
        result.components.push(ComponentResult {
            name: c.name.clone(),
            action: ComponentAction::Unchanged,
            from_image: current.image_uuid,
            image_uuid: current.image_uuid,
            version: Some(current.version.clone()).filter(|v| !v.is_empty()),
            instance_uuid: None,
            elapsed_ms: 0,
        });
        (result, checked)
    }
}
