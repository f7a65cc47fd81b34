//! `gz disable NAME` and `gz enable NAME` (issue 25): keep an installed
//! component's services off on this server, across every later
//! transaction ([`super::super::keep_off`]), or let them run again.
//!
//! Disable writes the record first, then disables every instance the
//! component's manifests define (a kill in between leaves the record, so
//! the next transaction and `check` still see the intent); enable turns on
//! the instances its manifests enable by default, then removes the record.
//! Both are idempotent: the orchestrator re-runs them freely.

use agentsadm_types::component::ComponentName;
use std::path::PathBuf;

use agentsadm_api::remote::GzResult;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Component;

use super::super::health;
use super::super::keep_off::{self, OffRecord};
use super::super::kinds::Footprint;
use super::super::step::Step;
use super::{GzSession, failure, refusal, unchanged};

impl GzSession {
    /// Keep `name` off here; `record` says who, when and why.
    pub async fn disable(&mut self, name: &ComponentName, record: OffRecord) -> GzResult {
        self.keep_off_change(name, Some(record)).await
    }

    /// Let `name` run again here.
    pub async fn enable(&mut self, name: &ComponentName) -> GzResult {
        self.keep_off_change(name, None).await
    }

    async fn keep_off_change(
        &mut self,
        name: &ComponentName,
        record: Option<OffRecord>,
    ) -> GzResult {
        let mut result = self.result();
        let (c, current) = match self.installed(name).await {
            Ok(found) => found,
            Err(f) => {
                result.error = Some(f);
                return result;
            }
        };
        let paths = self.paths().clone();
        let component = c.name.clone();
        let files: Vec<PathBuf> = current
            .smf_manifests
            .iter()
            .map(|rel| paths.at(rel))
            .collect();
        let smf_step = |e: &dyn std::error::Error| failure(Some(&c.name), Step::Smf, e, None);
        let disabling = record.is_some();
        if let Some(record) = record {
            let (p, n) = (paths.clone(), component.clone());
            if let Err(e) = blocking(move || keep_off::write(&p, &n, &record)).await {
                result.error = Some(failure(Some(&c.name), Step::Smf, &e, None));
                return result;
            }
        }
        if self.layout.runs_services() {
            let files2 = files.clone();
            let listed = blocking(move || {
                if disabling {
                    keep_off::instances(&files2, &[])
                } else {
                    health::expected_instances(&files2, &Default::default())
                }
            })
            .await;
            let fmris = match listed {
                Ok(f) => f,
                Err(e) => {
                    result.error = Some(smf_step(&e));
                    return result;
                }
            };
            let changed = if disabling {
                keep_off::turn_off(self.platform.as_ref(), &fmris)
                    .await
                    .map(drop)
            } else {
                self.turn_on(&fmris).await
            };
            if let Err((_, e)) = changed {
                result.error = Some(smf_step(&e));
                return result;
            }
        }
        if !disabling && let Err(e) = blocking(move || keep_off::remove(&paths, &component)).await {
            result.error = Some(failure(Some(&c.name), Step::Smf, &e, None));
            return result;
        }
        tracing::info!(component = %c.name, disabled = disabling, "kept-off record changed");
        result.components.push(unchanged(&c.name, &current));
        result
    }

    /// Enable each instance that is not running.
    async fn turn_on(
        &self,
        fmris: &[String],
    ) -> Result<(), (String, agentsadm_platform::PlatformError)> {
        for fmri in fmris {
            let state = self
                .platform
                .smf_state(fmri)
                .await
                .map_err(|e| (fmri.clone(), e))?;
            if state.is_some_and(|s| !s.is_enabled()) {
                self.platform
                    .smf_enable(fmri)
                    .await
                    .map_err(|e| (fmri.clone(), e))?;
            }
        }
        Ok(())
    }

    /// The catalog component `name` and its installed footprint; a
    /// refusal when unknown or not installed.
    async fn installed(
        &self,
        name: &ComponentName,
    ) -> Result<(Component, Footprint), agentsadm_api::remote::GzFailure> {
        let c = self
            .settings
            .catalog
            .require(name)
            .map_err(|e| failure(Some(name), Step::Resolve, &e, None))?
            .clone();
        match self.current(&c).await {
            Ok(Some(fp)) => Ok((c, fp)),
            Ok(None) => Err(refusal(
                Some(&c.name),
                Step::Resolve,
                format!("{} is not installed on server {}", c.name, self.server),
            )),
            Err(e) => Err(failure(Some(&c.name), Step::Resolve, &e, None)),
        }
    }
}
