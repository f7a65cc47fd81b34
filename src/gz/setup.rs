//! Where `gz setup` finds the default set's images: a USB-key style
//! directory (headnode setup, before any API exists) or IMGAPI by each SAPI
//! agent service's `params.image_uuid` (compute node setup, handled in the
//! session since it needs SAPI).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::catalog::Component;
use crate::ids::ImageUuid;

use super::fetch::ImageSource;
use crate::error::error_chain;

/// Where `gz setup` takes images from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetupSource {
    /// `<dir>/<name>/<uuid>.{manifest,file}` (the USB key's
    /// `/usbkey/extra/agents`), choosing images by `<dir>/index.json`.
    Dir(PathBuf),
    /// Each agent service's `params.image_uuid` in SAPI, fetched from IMGAPI.
    Imgapi,
}

/// The images `gz setup --source DIR` installs: `index.json` picks one per
/// component (`{"<name>": "<uuid>"}`, or the same map under `"images"`);
/// without an index, a component directory with exactly one manifest is
/// used, and with several the newest by `published_at`, then version.
/// Returns the sources and the components with no image.
pub fn setup_dir_sources(
    dir: &Path,
    set: &[Component],
) -> Result<(Vec<ImageSource>, Vec<String>), String> {
    if !dir.is_dir() {
        return Err(format!("setup source {} is not a directory", dir.display()));
    }
    let index: BTreeMap<String, String> = match std::fs::read(dir.join("index.json")) {
        Ok(b) => {
            let v: serde_json::Value = serde_json::from_slice(&b)
                .map_err(|e| format!("{}/index.json is not valid JSON: {e}", dir.display()))?;
            let map = v.get("images").cloned().unwrap_or(v);
            serde_json::from_value(map).map_err(|e| {
                format!(
                    "{}/index.json must map component names to image UUIDs: {e}",
                    dir.display()
                )
            })?
        }
        Err(_) => BTreeMap::new(),
    };
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for c in set {
        let cdir = dir.join(&c.name);
        let pick = match index.get(&c.name) {
            Some(uuid) => {
                let uuid: ImageUuid = uuid
                    .parse()
                    .map_err(|e| format!("{}/index.json: {}: {e}", dir.display(), c.name))?;
                let m = cdir.join(format!("{uuid}.manifest"));
                if !m.exists() {
                    return Err(format!(
                        "{}/index.json names {uuid} for {}, but {} does not exist",
                        dir.display(),
                        c.name,
                        m.display()
                    ));
                }
                Some(m)
            }
            None => newest_manifest(&cdir),
        };
        match pick {
            Some(m) => {
                let src =
                    ImageSource::from_arg(&m.to_string_lossy()).map_err(|e| error_chain(&e))?;
                found.push(src);
            }
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
            let m: Option<crate::image::ImageManifest> = std::fs::read(&p)
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
