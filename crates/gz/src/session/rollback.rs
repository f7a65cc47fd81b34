//! `gz rollback`: put back the version the last upgrade of a component
//! replaced. The kept copy (the layout says where and in what form) is
//! copied into a transaction directory and installed like any staged
//! version, so the version it replaces is kept in turn.

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::io;
use std::path::Path;
use std::time::Instant;

use agentsadm_api::remote::ComponentAction;
use agentsadm_api::remote::ComponentResult;
use agentsadm_api::remote::GzFailure;
use agentsadm_api::remote::GzResult;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Component;

use super::super::fsutil;
use super::super::kinds;
use super::super::kinds::StagedVersion;
use super::super::kinds::claims;
use super::super::layout::KeptVersion;
use super::super::package::PackageJson;
use super::super::step::Step;
use super::super::txn;
use super::Done;
use super::GzSession;
use super::adoption_note;
use super::failure;
use super::nothing_changed;
use super::refusal;
use super::remove_txn_dir;

impl GzSession {
    /// Put back the version kept from the last upgrade of `name`.
    pub async fn rollback(&mut self, name: &ComponentName) -> GzResult {
        let mut result = self.result();
        if let Err(f) = self.require_apis() {
            result.error = Some(f);
            return result;
        }
        let c = match self.settings.catalog.require(name) {
            Ok(c) => c.clone(),
            Err(e) => {
                result.error = Some(failure(Some(name), Step::Resolve, &e, None));
                return result;
            }
        };
        if self.handoff("rollback", &[&c], &mut result).await {
            return result;
        }
        match self.rollback_one(&c).await {
            Ok(done) => {
                self.log_done(&done.result);
                result.warnings.extend(done.notes);
                result.components.push(done.result);
            }
            Err(f) => {
                self.log_failure(&f);
                result.error = Some(f);
            }
        }
        self.post_report(&mut result).await;
        result
    }

    async fn rollback_one(&self, c: &Component) -> Result<Done, GzFailure> {
        let start = Instant::now();
        let kept = {
            let (layout, c) = (self.layout.clone(), c.clone());
            blocking(move || layout.kept(&c)).await
        };
        let Some(kept) = kept else {
            return Err(refusal(
                Some(&c.name),
                Step::Rollback,
                format!(
                    "{} has no previous version kept on server {} (one is kept by each upgrade until the next one)",
                    c.name, self.server
                ),
            ));
        };
        let current = self
            .current(c)
            .await
            .map_err(|e| failure(Some(&c.name), Step::Resolve, &e, None))?;
        let txn_dir = self.paths().staging_dir().join(txn::new_txn_name(&c.name));
        let staged = {
            let (c, txn_dir) = (c.clone(), txn_dir.clone());
            blocking(move || stage_previous(&c, kept, &txn_dir)).await
        };
        let staged = match staged {
            Ok(s) => s,
            Err(e) => {
                remove_txn_dir(&txn_dir).await;
                return Err(failure(
                    Some(&c.name),
                    Step::Rollback,
                    &e,
                    nothing_changed(&current),
                ));
            }
        };
        // The kept copy is checked like any staged version: it is what it
        // says it is, and claims only names of its own.
        let others = self.others_claims(c).await;
        let checked = {
            let (c2, staged2) = (c.clone(), staged.clone());
            blocking(move || verify_kept(&c2, &staged2)).await
        }
        .and_then(|()| {
            claims::check_staged(&self.settings.catalog, c, &staged, &others)
                .map_err(KeptError::Claims)
        });
        if let Err(e) = checked {
            remove_txn_dir(&txn_dir).await;
            return Err(failure(
                Some(&c.name),
                Step::Rollback,
                &e,
                nothing_changed(&current),
            ));
        }
        let env = self.txn_env();
        let from = current.as_ref().and_then(|f| f.image_uuid);
        let outcome = match txn::install(
            &env,
            c,
            txn::InstallOp::Rollback,
            &txn_dir,
            &staged,
            current.clone(),
        )
        .await
        {
            Ok(o) => o,
            Err(f) => {
                remove_txn_dir(&txn_dir).await;
                return Err(self.txn_failed(c, &f, &current).await);
            }
        };
        let mut notes = outcome.notes.clone();
        adoption_note(c, outcome.adoption.as_ref(), &mut notes);
        Ok(Done {
            result: ComponentResult {
                name: c.name.clone(),
                action: ComponentAction::RolledBack,
                from_image: from,
                image_uuid: staged.footprint.image_uuid,
                version: ComponentVersion::reported(&staged.footprint.version),
                instance_uuid: outcome.instance,
                elapsed_ms: start.elapsed().as_millis() as u64,
            },
            notes,
        })
    }
}

/// A kept previous version that is not what its record says.
#[derive(Debug, thiserror::Error)]
enum KeptError {
    #[error(
        "the kept previous version of {component} is not the version recorded for it ({what}); nothing was rolled back; install the version you want with `agentsadm gz install <image>`"
    )]
    Mismatch { component: String, what: String },
    #[error("the kept previous version cannot be rolled back to")]
    Claims(#[source] claims::ClaimError),
}

/// Check the staged copy of a kept version against its recorded
/// footprint: an apm tree's package.json (name, version) and image_uuid, a
/// recorded kind's install record (image). Blocking.
fn verify_kept(c: &Component, staged: &StagedVersion) -> Result<(), KeptError> {
    let fp = &staged.footprint;
    let bad = |what: String| KeptError::Mismatch {
        component: c.name.to_string(),
        what,
    };
    if let (true, Some(tree)) = (fp.apm, &staged.tree_src) {
        let pkg = match PackageJson::read(tree) {
            Ok(Some(p)) => p,
            Ok(None) => return Err(bad("it has no package.json".into())),
            Err(e) => return Err(bad(format!("its package.json is invalid: {e}"))),
        };
        if *c.package_name() != pkg.name {
            return Err(bad(format!(
                "package.json names {:?}, not {:?}",
                clip(&pkg.name),
                c.package_name()
            )));
        }
        if !fp.version.is_empty() && pkg.version != fp.version {
            return Err(bad(format!(
                "package.json says version {:?}, the record {:?}",
                clip(&pkg.version),
                fp.version
            )));
        }
        if let Some(want) = fp.image_uuid {
            let found = fsutil::read_trimmed(&tree.join("image_uuid"))
                .ok()
                .flatten()
                .unwrap_or_default();
            if found.parse().ok() != Some(want) {
                return Err(bad(format!(
                    "image_uuid says {:?}, the record {want}",
                    clip(&found)
                )));
            }
        }
    }
    if let (Some(root), Some(want)) = (&staged.overlay_src, fp.image_uuid) {
        let rel = kinds::record_rel(&c.name);
        if fp.overlay.contains(&rel) {
            let rec: Option<kinds::InstalledRecord> = crate::fsutil::read_small(root.join(&rel))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            match rec {
                Some(r) if r.image_uuid == want && r.name == c.name => {}
                Some(r) => {
                    return Err(bad(format!(
                        "its install record is of {:?} image {}, the record {want}",
                        clip(&r.name),
                        r.image_uuid
                    )));
                }
                None => return Err(bad(format!("its install record {rel} is unreadable"))),
            }
        }
    }
    Ok(())
}

/// At most 80 characters of text read from the kept copy.
fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Copy the kept previous version into a transaction directory (the kept
/// copy stays until the commit replaces it). Blocking.
fn stage_previous(c: &Component, kept: KeptVersion, txn_dir: &Path) -> io::Result<StagedVersion> {
    let mut fp = kept.footprint;
    std::fs::create_dir_all(txn_dir)?;
    let mut tree_src = None;
    let mut package = None;
    if fp.tree.is_some() {
        let src = kept.tree.unwrap_or_default();
        if !src.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is missing", src.display()),
            ));
        }
        let dst = txn_dir.join("new").join(c.package_name());
        std::fs::create_dir_all(txn_dir.join("new"))?;
        fsutil::copy_tree(&src, &dst)?;
        if fp.apm {
            package = PackageJson::read(&dst).ok().flatten();
            fp.smf_manifests = kinds::template_outputs(&dst)?
                .into_iter()
                .map(|(_, o)| o)
                .collect();
        }
        tree_src = Some(dst);
    }
    let mut overlay_src = None;
    match kept.root.filter(|r| r.is_dir()) {
        Some(root_src) => {
            let dst = txn_dir.join("root");
            fsutil::copy_tree(&root_src, &dst)?;
            fp.overlay = kinds::overlay_files(&dst)?;
            overlay_src = Some(dst);
        }
        None => fp.overlay.clear(),
    }
    Ok(StagedVersion {
        footprint: fp,
        tree_src,
        overlay_src,
        package,
    })
}
