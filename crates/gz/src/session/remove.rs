//! `gz remove`: components by name, in reverse install order (cn-agent
//! first, agents_core last), each as one transaction; the first failure
//! stops the run.

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::collections::BTreeSet;
use std::time::Instant;

use agentsadm_api::remote::ComponentAction;
use agentsadm_api::remote::ComponentResult;
use agentsadm_api::remote::GzFailure;
use agentsadm_api::remote::GzResult;
use agentsadm_types::catalog::Component;

use super::super::kinds;
use super::super::step::Step;
use super::super::txn;
use super::Done;
use super::GzSession;
use super::failure;
use super::refusal;
use super::remove_txn_dir;

impl GzSession {
    /// Remove components by name.
    pub async fn remove(&mut self, names: &[ComponentName]) -> GzResult {
        let mut result = self.result();
        if let Err(f) = self.require_apis() {
            result.error = Some(f);
            return result;
        }
        let mut plan = Vec::new();
        let mut seen = BTreeSet::new();
        for n in names {
            match self.settings.catalog.require(n) {
                Ok(c) => {
                    if seen.insert(c.name.clone()) {
                        plan.push(c.clone());
                    }
                }
                Err(e) => {
                    result.error = Some(failure(Some(n), Step::Resolve, &e, None));
                    return result;
                }
            }
        }
        // Reverse install order: cn-agent first, agents_core last.
        plan.sort_by(|a, b| b.order.cmp(&a.order).then(a.name.cmp(&b.name)));
        let components: Vec<&Component> = plan.iter().collect();
        if self.handoff("remove", &components, &mut result).await {
            return result;
        }
        for c in plan {
            match self.remove_one(&c).await {
                Ok(done) => {
                    self.log_done(&done.result);
                    result.warnings.extend(done.notes);
                    result.components.push(done.result);
                }
                Err(f) => {
                    self.log_failure(&f);
                    result.error = Some(f);
                    break;
                }
            }
        }
        self.post_report(&mut result).await;
        result
    }

    async fn remove_one(&self, c: &Component) -> Result<Done, GzFailure> {
        let start = Instant::now();
        let current = self
            .current(c)
            .await
            .map_err(|e| failure(Some(&c.name), Step::Resolve, &e, None))?;
        let Some(fp) = current else {
            return Ok(Done {
                result: ComponentResult {
                    name: c.name.clone(),
                    action: ComponentAction::Absent,
                    from_image: None,
                    image_uuid: None,
                    version: None,
                    instance_uuid: None,
                    elapsed_ms: start.elapsed().as_millis() as u64,
                },
                notes: Vec::new(),
            });
        };
        if !fp.apm && fp.tree.is_none() && fp.overlay.is_empty() {
            return Err(refusal(
                Some(&c.name),
                Step::Resolve,
                format!(
                    "{} was installed without agentsadm (no record in {}), so which files are its is unknown; nothing was removed",
                    c.name,
                    kinds::record_rel(&c.name)
                ),
            ));
        }
        // Only what is this component's own goes.
        let fp = kinds::claims::own_part(&fp, &self.others_claims(c).await);
        let txn_dir = self.paths().staging_dir().join(txn::new_txn_name(&c.name));
        let env = self.txn_env();
        let from = fp.image_uuid;
        let version = fp.version.clone();
        let out = match txn::remove(&env, c, &txn_dir, fp.clone()).await {
            Ok(out) => out,
            Err(f) => {
                remove_txn_dir(&txn_dir).await;
                return Err(self.txn_failed(c, &f, &Some(fp)).await);
            }
        };
        self.forget_download(from, None).await;
        Ok(Done {
            result: ComponentResult {
                name: c.name.clone(),
                action: ComponentAction::Removed,
                from_image: from,
                image_uuid: None,
                version: ComponentVersion::reported(&version),
                instance_uuid: out.instance,
                elapsed_ms: start.elapsed().as_millis() as u64,
            },
            notes: out.notes,
        })
    }
}
