//! `gz health NAME`: the health gate for a component that is already
//! installed (after cn-agent's install task, which has no gate of its own):
//! every SMF instance its manifests define that should run is online and
//! stays online for `--min-healthy`; for a component disabled here
//! (`gz disable`), that every instance is disabled and stays so.

use agentsadm_types::component::ComponentName;
use std::path::PathBuf;

use agentsadm_api::remote::GzResult;

use agentsadm_platform::blocking;

use super::super::health;
use super::super::step::Step;
use super::GzSession;
use super::failure;
use super::refusal;
use super::unchanged;

impl GzSession {
    /// Check `name`'s services. The result names the component (its image
    /// and version) when healthy; its error is an `unhealthy` failure
    /// naming the service and state otherwise. Also returns the instances
    /// checked.
    pub async fn health(&mut self, name: &ComponentName) -> (GzResult, Vec<String>) {
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
                .unwrap_or_else(|| health::HealthGate::for_platform(self.settings.platform_kind));
            let (paths, name) = (self.paths().clone(), c.name.clone());
            let off = blocking(move || super::super::keep_off::read(&paths, &name)).await;
            let checked_now = match off {
                // Disabled here: its gate is that it is off and stays off.
                Some(_) => {
                    match blocking(move || super::super::keep_off::instances(&files, &[])).await {
                        Ok(fmris) => {
                            super::super::keep_off::check_off(self.platform.as_ref(), &fmris, &gate)
                                .await
                                .map(|()| fmris)
                        }
                        Err(err) => Err(health::GateError::Platform {
                            fmri: "(manifests)".to_string(),
                            err: Box::new(err),
                        }),
                    }
                }
                None => health::check_installed(self.platform.as_ref(), files, &gate).await,
            };
            match checked_now {
                Ok(fmris) => checked = fmris,
                Err(e) => {
                    result.error = Some(failure(Some(&c.name), Step::Unhealthy, &e, None));
                    return (result, Vec::new());
                }
            }
        }
        result.components.push(unchanged(&c.name, &current));
        (result, checked)
    }
}
