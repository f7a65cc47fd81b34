//! `gz disable NAME` and `gz enable NAME` (issue 25): keep an installed
//! component's services off on this server, across every later
//! transaction ([`super::super::keep_off`]), or let them run again.
//!
//! Each first journals the change ([`keep_off::Pending`]); disable then
//! writes the record and disables every instance the component's
//! manifests define; enable turns on the instances its manifests enable by
//! default, then removes the record; the journal goes last. A kill
//! anywhere is finished by the next locked run ([`GzSession::finish_keep_off`]),
//! so the record and SMF agree after it. Both are idempotent: the
//! orchestrator re-runs them freely.

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
        let pending = keep_off::Pending {
            component: c.name.clone(),
            record,
        };
        let paths = self.paths().clone();
        let p = pending.clone();
        if let Err(e) = blocking(move || keep_off::begin(&paths, &p)).await {
            result.error = Some(failure(Some(&c.name), Step::Smf, &e, None));
            return result;
        }
        self.checkpoint("keep-off-journaled");
        if let Err(e) = self.apply_keep_off(&c, &current, pending).await {
            result.error = Some(e);
            return result;
        }
        tracing::info!(component = %c.name, "kept-off record changed");
        result.components.push(unchanged(&c.name, &current));
        result
    }

    /// Make the record and SMF what `pending` says, then forget it: the
    /// whole of a disable or enable, and what recovery runs again for one a
    /// kill interrupted (each part is idempotent).
    async fn apply_keep_off(
        &self,
        c: &Component,
        current: &Footprint,
        pending: keep_off::Pending,
    ) -> Result<(), agentsadm_api::remote::GzFailure> {
        let paths = self.paths().clone();
        let component = c.name.clone();
        let files: Vec<PathBuf> = current
            .smf_manifests
            .iter()
            .map(|rel| paths.at(rel))
            .collect();
        let smf_step = |e: &dyn std::error::Error| failure(Some(&c.name), Step::Smf, e, None);
        let disabling = pending.record.is_some();
        if let Some(record) = pending.record {
            let (p, n) = (paths.clone(), component.clone());
            blocking(move || keep_off::write(&p, &n, &record))
                .await
                .map_err(|e| smf_step(&e))?;
            self.checkpoint("keep-off-recorded");
        }
        if self.layout.runs_services() {
            let listed = blocking(move || {
                if disabling {
                    keep_off::instances(&files, &[])
                } else {
                    health::expected_instances(&files, &Default::default())
                }
            })
            .await;
            let fmris = listed.map_err(|e| smf_step(&e))?;
            let changed = if disabling {
                keep_off::turn_off(self.platform.as_ref(), &fmris)
                    .await
                    .map(drop)
            } else {
                self.turn_on(&fmris).await
            };
            changed.map_err(|(_, e)| smf_step(&e))?;
            self.checkpoint("keep-off-smf");
        }
        if !disabling {
            let (p, n) = (paths.clone(), component.clone());
            blocking(move || keep_off::remove(&p, &n))
                .await
                .map_err(|e| smf_step(&e))?;
            self.checkpoint("keep-off-unrecorded");
        }
        blocking(move || keep_off::end(&paths, &component))
            .await
            .map_err(|e| smf_step(&e))
    }

    /// Finish every disable or enable a killed run left under way (under
    /// the lock, before anything else); notes say what was finished.
    pub(super) async fn finish_keep_off(&mut self) {
        let paths = self.paths().clone();
        for found in blocking(move || keep_off::pending(&paths)).await {
            let pending = match found {
                Ok(p) => p,
                Err((path, e)) => {
                    self.notes.push(format!(
                        "cannot read {} (a disable or enable a killed run left under way): {e}; remove it and run that command again",
                        path.display()
                    ));
                    continue;
                }
            };
            let name = pending.component.clone();
            let what = if pending.record.is_some() {
                "disable"
            } else {
                "enable"
            };
            let done = match self.installed(&name).await {
                Ok((c, current)) => self.apply_keep_off(&c, &current, pending).await,
                // Not installed any more: nothing of SMF to change; the
                // record alone stays as the command left it.
                Err(_) => {
                    let paths = self.paths().clone();
                    let n = name.clone();
                    let _ = blocking(move || keep_off::end(&paths, &n)).await;
                    continue;
                }
            };
            match done {
                Ok(()) => self.notes.push(format!(
                    "{name}: finished a `gz {what}` interrupted in an earlier run"
                )),
                Err(f) => self.notes.push(format!(
                    "{name}: cannot finish a `gz {what}` interrupted in an earlier run: {}; run it again",
                    f.message
                )),
            }
        }
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
