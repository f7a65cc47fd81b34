//! Where `gz setup` finds the default set's images: a USB-key style
//! directory (headnode setup, before any API exists) or IMGAPI by each SAPI
//! agent service's `params.image_uuid` (compute node setup, handled in the
//! session since it needs SAPI).

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ImageUuid;

use super::fetch::FetchError;

use super::fetch::ImageSource;

/// Where `gz setup` takes images from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetupSource {
    /// `<dir>/<name>/<uuid>.{manifest,file}` (the USB key's
    /// `/usbkey/extra/agents`), choosing images by `<dir>/index.json`.
    Dir(PathBuf),
    /// Each agent service's `params.image_uuid` in SAPI, fetched from IMGAPI.
    Imgapi,
}

/// Why a setup directory cannot be read (nothing is installed).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("setup source {dir} is not a directory")]
    NotADirectory { dir: PathBuf },
    #[error("{index} is not valid JSON")]
    IndexJson {
        index: PathBuf,
        #[source]
        err: serde_json::Error,
    },
    #[error("{index} must map component names to image UUIDs")]
    IndexShape {
        index: PathBuf,
        #[source]
        err: serde_json::Error,
    },
    #[error("{index}: {component}")]
    IndexUuid {
        index: PathBuf,
        component: String,
        #[source]
        err: agentsadm_types::ids::ParseIdError,
    },
    #[error("{index} names {uuid} for {component}, but {manifest} does not exist")]
    IndexedImageMissing {
        index: PathBuf,
        uuid: ImageUuid,
        component: String,
        manifest: PathBuf,
    },
    #[error(transparent)]
    Source(#[from] FetchError),
}

/// The images `gz setup --source DIR` installs: `index.json` picks one per
/// component (`{"<name>": "<uuid>"}`, or the same map under `"images"`);
/// without an index, a component directory with exactly one manifest is
/// used, and with several the newest by `published_at`, then version.
/// Returns the sources and the components with no image.
pub fn setup_dir_sources(
    dir: &Path,
    set: &[Component],
) -> Result<(Vec<ImageSource>, Vec<ComponentName>), SetupError> {
    if !dir.is_dir() {
        return Err(SetupError::NotADirectory {
            dir: dir.to_path_buf(),
        });
    }
    let index_path = dir.join("index.json");
    let index: BTreeMap<String, String> = match crate::fsutil::read_small(&index_path) {
        Ok(b) => {
            let v: serde_json::Value =
                serde_json::from_slice(&b).map_err(|err| SetupError::IndexJson {
                    index: index_path.clone(),
                    err,
                })?;
            let map = v.get("images").cloned().unwrap_or(v);
            serde_json::from_value(map).map_err(|err| SetupError::IndexShape {
                index: index_path.clone(),
                err,
            })?
        }
        Err(_) => BTreeMap::new(),
    };
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for c in set {
        let cdir = dir.join(&c.name);
        let pick = match index.get(c.name.as_str()) {
            Some(uuid) => {
                let uuid: ImageUuid = uuid.parse().map_err(|err| SetupError::IndexUuid {
                    index: index_path.clone(),
                    component: c.name.to_string(),
                    err,
                })?;
                let m = cdir.join(format!("{uuid}.manifest"));
                if !m.exists() {
                    return Err(SetupError::IndexedImageMissing {
                        index: index_path.clone(),
                        uuid,
                        component: c.name.to_string(),
                        manifest: m,
                    });
                }
                Some(m)
            }
            None => newest_manifest(&cdir),
        };
        match pick {
            Some(m) => found.push(ImageSource::from_arg(&m.to_string_lossy())?),
            None => missing.push(c.name.clone()),
        }
    }
    Ok((found, missing))
}

fn newest_manifest(dir: &Path) -> Option<PathBuf> {
    let rd = std::fs::read_dir(dir).ok()?;
    let mut best: Option<(Option<String>, Option<semver::Version>, PathBuf)> = None;
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().map(|x| x == "manifest").unwrap_or(false) {
            let m: Option<agentsadm_types::image::ImageManifest> = crate::fsutil::read_small(&p)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let key = (
                m.as_ref().and_then(|m| m.published_at.clone()),
                m.as_ref().and_then(|m| m.semver()),
                p,
            );
            if best
                .as_ref()
                .map(|b| (&key.0, &key.1, &key.2) > (&b.0, &b.1, &b.2))
                .unwrap_or(true)
            {
                best = Some(key);
            }
        }
    }
    best.map(|b| b.2)
}
