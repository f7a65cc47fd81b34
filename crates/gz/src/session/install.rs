//! `gz install`: resolve the images, check them against the catalog and
//! this server, hand cn-agent's own replacement to agentsadm-install, and
//! install the rest in groups (core components alone, parallel-safe ones
//! together), each component as one transaction.

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::collections::BTreeSet;
use std::time::Instant;

use agentsadm_types::catalog::Component;

use agentsadm_api::remote::ComponentAction;
use agentsadm_api::remote::ComponentResult;
use agentsadm_api::remote::GzFailure;
use agentsadm_api::remote::GzResult;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Placement;
use agentsadm_types::ids::InstanceUuid;

use super::super::adopt;
use super::super::fetch;
use super::super::fetch::ImageSource;
use super::super::fetch::ResolvedImage;
use super::super::fsutil;
use super::super::kinds::Footprint;
use super::super::kinds::claims;
use super::super::layout::StageRequest;
use super::super::step::Step;
use super::super::txn;
use super::Done;
use super::GzSession;
use super::Knob;
use super::adoption_note;
use super::failure;
use super::nothing_changed;
use super::refusal;
use super::remove_txn_dir;

/// Why the instance UUID of an unchanged component could not be ensured.
#[derive(Debug, thiserror::Error)]
enum InstanceFileError {
    #[error("instance UUID file {path} holds {content:?}, which is not a UUID; fix or remove it")]
    Corrupt {
        path: std::path::PathBuf,
        content: String,
    },
    #[error("cannot read the instance UUID file {path}; remove it if it is damaged")]
    Read {
        path: std::path::PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("cannot write the instance UUID file {path}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        err: std::io::Error,
    },
}

impl GzSession {
    /// Install or upgrade the images in `sources`.
    pub async fn install(&mut self, sources: &[ImageSource]) -> GzResult {
        self.install_expecting(sources, &[]).await
    }

    /// [`Self::install`], where `expected[i]` (when given) is the component
    /// `sources[i]` is meant for (setup installs each service's default
    /// image): an image that cannot be resolved has no manifest to name its
    /// component, so the failure names the expected one.
    pub(super) async fn install_expecting(
        &mut self,
        sources: &[ImageSource],
        expected: &[ComponentName],
    ) -> GzResult {
        let mut result = self.result();
        if let Err(f) = self.require_apis() {
            result.error = Some(f);
            return result;
        }
        let mut resolved = Vec::new();
        for (i, s) in sources.iter().enumerate() {
            match fetch::resolve(s, self.imgapi.as_ref()).await {
                Ok(r) => resolved.push(r),
                Err(e) => {
                    result.error = Some(failure(expected.get(i), Step::from(&e), &e, None));
                    return result;
                }
            }
        }
        let plan = match self.plan(resolved) {
            Ok(p) => p,
            Err(f) => {
                result.error = Some(f);
                return result;
            }
        };
        let components: Vec<&Component> = plan.iter().map(|(c, _)| c).collect();
        // An expectation for a component this run does not install is a
        // caller's mistake (a wrong image for it, most likely): nothing runs.
        if let Some(name) = self
            .settings
            .expect_each
            .keys()
            .find(|n| !components.iter().any(|c| c.name == **n))
        {
            result.error = Some(refusal(
                Some(name),
                Step::Resolve,
                format!(
                    "--expect names {name}, but none of the images given is {name}; nothing changed"
                ),
            ));
            return result;
        }
        if self.handoff("install", &components, &mut result).await {
            return result;
        }
        self.run_groups(plan, &mut result).await;
        self.post_report(&mut result).await;
        result
    }

    /// Check manifests against the catalog and this server, refuse
    /// duplicates, and order the work.
    fn plan(
        &self,
        resolved: Vec<ResolvedImage>,
    ) -> Result<Vec<(Component, ResolvedImage)>, GzFailure> {
        let mut seen = BTreeSet::new();
        let mut plan = Vec::new();
        for r in resolved {
            let c = fetch::check_manifest(&r.manifest, &self.settings.catalog)
                .map_err(|e| failure(None, Step::from(&e), &e, None))?
                .clone();
            if !seen.insert(c.name.clone()) {
                return Err(refusal(
                    Some(&c.name),
                    Step::Resolve,
                    format!(
                        "{} is named twice; install one image per component per run",
                        c.name
                    ),
                ));
            }
            if c.placement == Placement::HeadnodeOnly && !self.headnode {
                return Err(refusal(
                    Some(&c.name),
                    Step::Resolve,
                    format!(
                        "{} is headnode-only and server {} is not a headnode (pass --headnode if it is)",
                        c.name, self.server
                    ),
                ));
            }
            plan.push((c, r));
        }
        plan.sort_by(|a, b| a.0.order.cmp(&b.0.order).then(a.0.name.cmp(&b.0.name)));
        Ok(plan)
    }

    /// Run `plan` in groups: each core component alone, all parallel-safe
    /// ones together. Stops after the first group with a failure.
    async fn run_groups(&self, plan: Vec<(Component, ResolvedImage)>, result: &mut GzResult) {
        let mut groups: Vec<Vec<(Component, ResolvedImage)>> = Vec::new();
        for item in plan {
            let alone = item.0.order.runs_alone();
            match groups.last_mut() {
                Some(g) if !alone && !g[0].0.order.runs_alone() => g.push(item),
                _ => groups.push(vec![item]),
            }
        }
        for group in groups {
            let names: Vec<String> = group.iter().map(|(c, _)| c.name.to_string()).collect();
            let outcomes = futures::future::join_all(
                group
                    .iter()
                    .map(|(c, img)| self.install_one(c, img, &names)),
            )
            .await;
            let mut failed = false;
            for outcome in outcomes {
                match outcome {
                    Ok(done) => {
                        self.log_done(&done.result);
                        result.warnings.extend(done.notes);
                        result.components.push(done.result);
                    }
                    Err(f) => {
                        self.log_failure(&f);
                        if result.error.is_none() {
                            result.error = Some(f);
                        } else {
                            result.warnings.push(f.also_failed());
                        }
                        failed = true;
                    }
                }
            }
            if failed {
                break;
            }
        }
    }

    /// Install `image` of `c`; `group` names the components installing at
    /// the same time (`c` among them).
    async fn install_one(
        &self,
        c: &Component,
        image: &ResolvedImage,
        group: &[String],
    ) -> Result<Done, GzFailure> {
        let start = Instant::now();
        let uuid = image.uuid();
        let current = self
            .current(c)
            .await
            .map_err(|e| failure(Some(&c.name), Step::Resolve, &e, None))?;
        let from = current.as_ref().and_then(|f| f.image_uuid);
        if from == Some(uuid) && !self.settings.force {
            return self.unchanged(c, image, current.as_ref(), start).await;
        }
        self.expect_current(c, current.as_ref(), uuid)?;
        let txn_dir = self.paths().staging_dir().join(txn::new_txn_name(&c.name));
        let request = StageRequest {
            component: c,
            image,
            imgapi: self.imgapi.as_ref(),
            fetch: &self.settings.fetch,
            txn_dir: &txn_dir,
            headnode: self.headnode,
            crash_at: self.crash_at.as_deref(),
            unpack_limit: self
                .settings
                .knob(Knob::UnpackLimit)
                .and_then(|v| v.parse().ok()),
        };
        let staged = match self.layout.stage(request).await {
            Ok(s) => s,
            Err(e) => {
                remove_txn_dir(&txn_dir).await;
                return Err(failure(
                    Some(&c.name),
                    e.step(),
                    &e,
                    nothing_changed(&current),
                ));
            }
        };
        // A package may claim only names that are its own.
        let others = self.others_claims(c).await;
        if self.layout.runs_services()
            && let Err(e) = claims::check_staged(&self.settings.catalog, c, &staged, &others)
        {
            remove_txn_dir(&txn_dir).await;
            // An unacceptable image is not kept in the download cache.
            self.forget_download(Some(uuid), None).await;
            return Err(failure(
                Some(&c.name),
                Step::Validate,
                &e,
                nothing_changed(&current),
            ));
        }
        let current = current.map(|fp| claims::own_part(&fp, &others));
        // The health gate runs inside the transaction, before SAPI
        // adoption: a build whose services do not come up is rolled back
        // and never recorded.
        let concurrent: Vec<String> = group.iter().filter(|n| **n != c.name).cloned().collect();
        let mut env = self.txn_env();
        env.gate = self.settings.health.as_ref();
        env.others = Some(&others);
        env.concurrent = &concurrent;
        env.checkpoint("staged");
        let outcome = txn::install(
            &env,
            c,
            txn::InstallOp::Install,
            &txn_dir,
            &staged,
            current.clone(),
        )
        .await;
        let outcome = match outcome {
            Ok(o) => o,
            Err(f) => {
                remove_txn_dir(&txn_dir).await;
                return Err(self.txn_failed(c, &f, &current).await);
            }
        };
        // The cache keeps the installed image's file (a retry or reinstall
        // needs no download), not the replaced one's.
        self.forget_download(from, Some(uuid)).await;
        let mut notes = outcome.notes.clone();
        adoption_note(c, outcome.adoption.as_ref(), &mut notes);
        let (layout, component, server) = (self.layout.clone(), c.clone(), self.server);
        notes.extend(blocking(move || layout.after_install(&component, server)).await);
        Ok(Done {
            result: ComponentResult {
                name: c.name.clone(),
                action: if from.is_some() || current.is_some() {
                    ComponentAction::Upgraded
                } else {
                    ComponentAction::Installed
                },
                from_image: from,
                image_uuid: Some(uuid),
                version: ComponentVersion::reported(&staged.footprint.version),
                instance_uuid: outcome.instance,
                elapsed_ms: start.elapsed().as_millis() as u64,
            },
            notes,
        })
    }

    /// `--expect-current`: refuse to replace anything but the image the
    /// plan saw (nothing changed yet). The image being installed already
    /// (`unchanged`) is checked before and is no change at all.
    fn expect_current(
        &self,
        c: &Component,
        current: Option<&Footprint>,
        target: agentsadm_types::ids::ImageUuid,
    ) -> Result<(), GzFailure> {
        let each = self.settings.expect_each.get(&c.name).copied();
        let Some(expected) = each.or(self.settings.expect_current) else {
            return Ok(());
        };
        let installed = current.and_then(|f| f.image_uuid);
        let present = current.is_some();
        let matches = match expected {
            Some(e) => installed == Some(e),
            None => !present,
        };
        if matches {
            return Ok(());
        }
        let name = |i: Option<agentsadm_types::ids::ImageUuid>, present: bool| match (i, present) {
            (Some(i), _) => format!("image {i}"),
            (None, true) => "a version of unknown image".to_string(),
            (None, false) => "nothing".to_string(),
        };
        Err(refusal(
            Some(&c.name),
            Step::ExpectCurrent,
            format!(
                "changed since the plan: server {} has {} of {} installed, the plan expected {}; nothing changed (image {target} not installed); plan again",
                self.server,
                name(installed, present),
                c.name,
                name(expected, expected.is_some()),
            ),
        ))
    }

    /// The image is already installed: make sure the instance UUID exists
    /// and SAPI knows it, change nothing else.
    async fn unchanged(
        &self,
        c: &Component,
        image: &ResolvedImage,
        current: Option<&Footprint>,
        start: Instant,
    ) -> Result<Done, GzFailure> {
        let path = self.paths().at(self.layout.instance_rel(c));
        let ensured = blocking(move || match fsutil::read_trimmed(&path) {
            Ok(Some(s)) if !s.is_empty() => s
                .parse::<InstanceUuid>()
                .map_err(|_| InstanceFileError::Corrupt { path, content: s }),
            // A FIFO, link or huge file there is damaged, not absent.
            Err(err) => Err(InstanceFileError::Read { path, err }),
            Ok(_) => {
                let u = InstanceUuid::new_v4();
                fsutil::write_atomic(&path, format!("{u}\n").as_bytes())
                    .map_err(|err| InstanceFileError::Write { path, err })?;
                Ok(u)
            }
        })
        .await;
        let instance = match ensured {
            Ok(i) => i,
            // The message names the file itself; nothing more to chain.
            Err(e @ InstanceFileError::Corrupt { .. }) => {
                return Err(refusal(Some(&c.name), Step::Instance, e.to_string()));
            }
            Err(e @ InstanceFileError::Read { .. }) => {
                return Err(failure(Some(&c.name), Step::Instance, &e, None));
            }
            Err(InstanceFileError::Write { err, .. }) => {
                return Err(failure(Some(&c.name), Step::Instance, &err, None));
            }
        };
        let mut notes = Vec::new();
        if let Some(s) = self.sapi_target() {
            let a = adopt::adopt(s.client, &c.name, instance, s.server, image.uuid())
                .await
                .map_err(|e| failure(Some(&c.name), Step::Sapi, &e, None))?;
            adoption_note(c, Some(&a), &mut notes);
        }
        Ok(Done {
            result: ComponentResult {
                name: c.name.clone(),
                action: ComponentAction::Unchanged,
                from_image: Some(image.uuid()),
                image_uuid: Some(image.uuid()),
                version: current.and_then(|f| ComponentVersion::reported(&f.version)),
                instance_uuid: Some(instance),
                elapsed_ms: start.elapsed().as_millis() as u64,
            },
            notes,
        })
    }
}
