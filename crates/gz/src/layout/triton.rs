//! The Triton global zone layout (`/`, or a rooted directory for tests and
//! the simulator): each component kind's footprint as [`super::super::kinds`]
//! describes it, state in `opt/smartdc/agents/.agentsadm`, hooks and SMF
//! run, verified image files kept in the download cache.

use std::path::PathBuf;

use futures::future::BoxFuture;

use agentsadm_types::catalog::Catalog;

use agentsadm_types::catalog::Component;

use agentsadm_api::remote::AgentsReport;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ServerUuid;

use super::super::fetch;

use super::super::fetch::FetchError;
use super::super::kinds;
use super::super::kinds::CurrentError;
use super::super::kinds::Footprint;
use super::super::kinds::StagedVersion;
use super::super::paths::GzPaths;
use super::super::unpack::UnpackOptions;
use super::KeptForm;
use super::KeptVersion;
use super::Layout;
use super::LayoutKind;
use super::StageError;
use super::StageRequest;

/// A Triton global zone at a root.
#[derive(Clone, Debug)]
pub struct TritonGz {
    paths: GzPaths,
}

impl TritonGz {
    pub fn new(root: impl Into<PathBuf>) -> TritonGz {
        TritonGz {
            paths: GzPaths::new(root),
        }
    }
}

impl Layout for TritonGz {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Smartdc
    }

    fn paths(&self) -> &GzPaths {
        &self.paths
    }

    fn runs_services(&self) -> bool {
        true
    }

    fn kept_form(&self) -> KeptForm {
        KeptForm::Whole
    }

    fn instance_rel(&self, component: &Component) -> String {
        kinds::instance_rel(component)
    }

    fn current(&self, component: &Component) -> Result<Option<Footprint>, CurrentError> {
        kinds::current(&self.paths, component)
    }

    fn kept(&self, component: &Component) -> Option<KeptVersion> {
        let dir = self.paths.previous_dir().join(&component.name);
        let footprint: Footprint = crate::fsutil::read_small(dir.join("footprint.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())?;
        let root = dir.join("root");
        Some(KeptVersion {
            tree: footprint.tree.as_ref().map(|_| dir.join("tree")),
            root: root.is_dir().then_some(root),
            footprint,
        })
    }

    fn stage<'a>(
        &'a self,
        request: StageRequest<'a>,
    ) -> BoxFuture<'a, Result<StagedVersion, StageError>> {
        Box::pin(async move {
            let c = request.component;
            let image = request.image;
            let mut options = request.fetch.clone();
            options.downloads = Some(self.paths.downloads_dir());
            options.unpack = UnpackOptions {
                single_top: true,
                expected_top: Some(c.package_name().to_string()),
                write_limit: request.unpack_limit,
                crash_at: request.crash_at.map(str::to_string),
                keep_setid: c
                    .setid_files
                    .iter()
                    .map(|f| format!("{}/{f}", c.package_name()))
                    .collect(),
            };
            let cached = self
                .paths
                .downloads_dir()
                .join(format!("{}.file", image.uuid()));
            let fetched = fetch::fetch_and_unpack(
                image,
                request.imgapi,
                &request.txn_dir.join("new"),
                &options,
            )
            .await;
            let fetched = match fetched {
                Ok(f) => f,
                Err(e) => {
                    if matches!(&e, FetchError::Unpack { err, .. } if err.is_bad_archive()) {
                        // A verified file of an unacceptable image: do not keep it.
                        forget(cached).await;
                    }
                    return Err(e.into());
                }
            };
            // The image is downloaded and verified (and, from IMGAPI, kept
            // in the download cache); nothing is swapped yet.
            super::super::test_checkpoint(request.crash_at, "downloaded");
            let (component, manifest) = (c.clone(), image.manifest.clone());
            let txn_dir = request.txn_dir.to_path_buf();
            let headnode = request.headnode;
            let staged = blocking(move || {
                kinds::stage(
                    &component,
                    &manifest,
                    &txn_dir,
                    headnode,
                    &fetched.digests.sha256,
                )
            })
            .await;
            match staged {
                Ok(s) => Ok(s),
                Err(e) => {
                    forget(cached).await;
                    Err(e.into())
                }
            }
        })
    }

    fn report(&self, catalog: &Catalog, server: ServerUuid) -> AgentsReport {
        super::super::report::report(&self.paths, catalog, server)
    }

    fn register(&self, catalog: &Catalog) -> Vec<String> {
        super::super::registration::sync(&self.paths, catalog)
            .iter()
            .map(|e| {
                format!(
                    "{}; cn-agent may leave it out of server.agents until the next agentsadm gz run on this server",
                    agentsadm_types::error::error_chain(e)
                )
            })
            .collect()
    }

    fn after_install(&self, component: &Component, server: ServerUuid) -> Vec<String> {
        if component.kind != ComponentKind::Sdcadm {
            return Vec::new();
        }
        let conf = self.paths.at(kinds::SDCADM_CONF);
        match kinds::record_sdcadm_server(&conf, server) {
            Ok(_) => Vec::new(),
            // sdcadm works without it (it asks sysinfo); say so, keep the
            // install.
            Err(e) => vec![format!(
                "sdcadm: serverUuid not recorded: {}; sdcadm will look it up itself",
                agentsadm_types::error::error_chain(&e)
            )],
        }
    }
}

/// Drop a cached image file (absent is fine).
async fn forget(cached: PathBuf) {
    blocking(move || {
        let _ = std::fs::remove_file(&cached);
    })
    .await;
}
