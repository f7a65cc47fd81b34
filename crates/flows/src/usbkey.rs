//! The per-component image directory on the USB key
//! (`/usbkey/extra/agents`), which replaces the agentsshar:
//!
//! ```text
//! <dir>/<component>/<image uuid>.manifest   IMGAPI manifest (uuid == image_uuid in the tarball)
//! <dir>/<component>/<image uuid>.file       the image file
//! <dir>/index.json                          {"images": {"<component>": "<uuid>", ...}}
//! <dir>/agents-<...>.sh, <dir>/latest       (optional) an agentsshar for old tooling
//! ```
//!
//! `index.json` names the default image per component: what `gz setup
//! --source DIR` installs on the headnode (see [`agentsadm_gz::setup`]). Once
//! SAPI is up, each agent service's `params.image_uuid` takes over as "what
//! new servers get" (`agentsadm adopt --local` sets it from what the
//! headnode installed); the index is not read again.
//!
//! - [`build`]: validate image files (catalog component, `type: other`,
//!   size and sha1 as the manifest says) and copy them into the layout;
//!   everything is checked before anything is written, so bad input
//!   changes nothing. Re-running adds images; the default of a component is
//!   the one named with `--default`, else the newest (`published_at`, then
//!   version), the same rule `gz setup` uses without an index.
//! - `latest`: agentsadm never reads it. With `--shar FILE` the shar is
//!   copied in and `latest` points at it (relative, as the assets zone
//!   needs); an existing `latest` is otherwise left as it is.
//! - [`import`]: AdminImportImage of the indexed images into the datacenter
//!   IMGAPI (headnode setup, once IMGAPI runs), so `gz setup --source
//!   imgapi` on compute nodes finds them.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};

use agentsadm_api::ApiError;

use agentsadm_api::ImgapiClient;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::ImageManifest;

/// The index file's name.
pub const INDEX_FILE: &str = "index.json";
/// The name old tooling reads.
pub const LATEST_LINK: &str = "latest";

/// `index.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsbkeyIndex {
    /// The default image per component.
    pub images: BTreeMap<String, ImageUuid>,
}

/// Why the directory could not be built or imported; for `build`, nothing
/// was written.
#[derive(Debug, thiserror::Error)]
pub enum UsbkeyError {
    #[error(
        "{path}: not an image file with its manifest next to it (<x>.file + <x>.manifest, or <x>.tgz + <x>.manifest)"
    )]
    NoPair {
        path: PathBuf,
        #[source]
        err: agentsadm_gz::fetch::FetchError,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("{path} is not an IMGAPI image manifest")]
    Manifest {
        path: PathBuf,
        #[source]
        err: serde_json::Error,
    },
    #[error("{path}: {detail}")]
    BadImage { path: PathBuf, detail: String },
    #[error("--default {image}: none of the given or present images has that UUID")]
    UnknownDefault { image: ImageUuid },
    #[error(
        "--default {image} and {other} are both images of {component}; name one default per component"
    )]
    TwoDefaults {
        component: String,
        image: ImageUuid,
        other: ImageUuid,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error(
        "{path}/{INDEX_FILE} is missing or not valid (build the directory with 'agentsadm installer build')"
    )]
    Index {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("cannot import {name} {version} ({image}) into the datacenter IMGAPI")]
    Import {
        image: ImageUuid,
        name: String,
        version: String,
        #[source]
        err: Box<ApiError>,
    },
}

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> UsbkeyError + '_ {
    move |err| UsbkeyError::Read {
        path: path.to_path_buf(),
        err,
    }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> UsbkeyError + '_ {
    move |err| UsbkeyError::Write {
        path: path.to_path_buf(),
        err,
    }
}

/// One checked image, ready to copy.
#[derive(Clone, Debug)]
struct Checked {
    component: String,
    manifest: ImageManifest,
    manifest_path: PathBuf,
    file_path: PathBuf,
}

/// Check one image file (or manifest) argument.
fn check_image(catalog: &Catalog, arg: &Path) -> Result<Checked, UsbkeyError> {
    let (file_path, manifest_path) = match ImageSource::from_arg(&arg.to_string_lossy()) {
        Ok(ImageSource::File { file, manifest }) => (file, manifest),
        Ok(ImageSource::Imgapi(_)) => {
            return Err(UsbkeyError::BadImage {
                path: arg.to_path_buf(),
                detail: "is an image UUID, not a file; download the image first".into(),
            });
        }
        Err(err) => {
            return Err(UsbkeyError::NoPair {
                path: arg.to_path_buf(),
                err,
            });
        }
    };
    let text = agentsadm_types::bounded::read_small_io(&manifest_path)
        .map_err(read_err(&manifest_path))?;
    let manifest: ImageManifest =
        serde_json::from_slice(&text).map_err(|err| UsbkeyError::Manifest {
            path: manifest_path.clone(),
            err,
        })?;
    let bad = |detail: String| UsbkeyError::BadImage {
        path: manifest_path.clone(),
        detail,
    };
    let Some(component) = catalog.get(&manifest.name) else {
        return Err(bad(format!(
            "image {} is named {:?}, which is not a component in the catalog",
            manifest.uuid, manifest.name
        )));
    };
    if manifest.image_type != "other" {
        return Err(bad(format!(
            "image {} has type {:?}; component images are type \"other\"",
            manifest.uuid, manifest.image_type
        )));
    }
    let Some(expected) = manifest.file() else {
        return Err(bad(format!("image {} lists no file", manifest.uuid)));
    };
    let (size, sha1) = hash_file(&file_path)?;
    if size != expected.size || !sha1.eq_ignore_ascii_case(&expected.sha1) {
        return Err(UsbkeyError::BadImage {
            path: file_path.clone(),
            detail: format!(
                "is {size} bytes with sha1 {sha1}, but manifest {} says {} bytes with sha1 {} (damaged or the wrong file)",
                manifest_path.display(),
                expected.size,
                expected.sha1
            ),
        });
    }
    Ok(Checked {
        component: component.name.to_string(),
        manifest,
        manifest_path,
        file_path,
    })
}

fn hash_file(path: &Path) -> Result<(u64, String), UsbkeyError> {
    // A regular file only: a FIFO or device there must not hang the hash.
    let opened = match agentsadm_types::bounded::open_regular(path) {
        Ok(Some(f)) => Ok(f),
        Ok(None) => Err(std::io::ErrorKind::NotFound.into()),
        Err(e) => Err(e.into_io()),
    };
    let mut f = opened.map_err(read_err(path))?;
    let mut hasher = Sha1::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(read_err(path))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((size, format!("{:x}", hasher.finalize())))
}

/// Images already in a directory built before, by component.
fn present(catalog: &Catalog, dir: &Path) -> Vec<Checked> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let cdir = e.path();
        let Some(name) = cdir.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !cdir.is_dir() || catalog.get(name).is_none() {
            continue;
        }
        let Ok(files) = std::fs::read_dir(&cdir) else {
            continue;
        };
        for f in files.flatten() {
            let p = f.path();
            if p.extension().is_some_and(|x| x == "manifest")
                && let Ok(text) = agentsadm_types::bounded::read_small_io(&p)
                && let Ok(manifest) = serde_json::from_slice::<ImageManifest>(&text)
            {
                out.push(Checked {
                    component: name.to_string(),
                    file_path: p.with_extension("file"),
                    manifest_path: p,
                    manifest,
                });
            }
        }
    }
    out
}

/// What [`build`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BuildReport {
    /// Images copied in (already present ones are not copied again).
    pub added: Vec<ImageUuid>,
    pub index: UsbkeyIndex,
    /// The shar `latest` points at, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest: Option<String>,
}

/// Build (or add to) the directory at `out` from image files. Checks
/// everything first; on any error nothing is written. Blocking: it hashes
/// and copies whole image files.
pub fn build(
    catalog: &Catalog,
    out: &Path,
    images: &[PathBuf],
    defaults: &[ImageUuid],
    shar: Option<&Path>,
) -> Result<BuildReport, UsbkeyError> {
    let mut checked = Vec::new();
    for i in images {
        checked.push(check_image(catalog, i)?);
    }
    if let Some(s) = shar {
        std::fs::metadata(s).map_err(read_err(s))?;
    }
    let mut all: Vec<Checked> = present(catalog, out);
    all.extend(checked.iter().cloned());

    // Defaults: named ones, else the newest per component.
    let mut index = UsbkeyIndex::default();
    for c in &all {
        let best = index.images.get(&c.component).and_then(|u| {
            all.iter()
                .find(|o| o.manifest.uuid == *u)
                .map(|o| &o.manifest)
        });
        let newer = match best {
            None => true,
            Some(b) => {
                (&c.manifest.published_at, c.manifest.semver()) > (&b.published_at, b.semver())
            }
        };
        if newer {
            index.images.insert(c.component.clone(), c.manifest.uuid);
        }
    }
    let mut named: BTreeMap<String, ImageUuid> = BTreeMap::new();
    for d in defaults {
        let Some(c) = all.iter().find(|c| c.manifest.uuid == *d) else {
            return Err(UsbkeyError::UnknownDefault { image: *d });
        };
        if let Some(other) = named.insert(c.component.clone(), *d)
            && other != *d
        {
            return Err(UsbkeyError::TwoDefaults {
                component: c.component.clone(),
                image: *d,
                other,
            });
        }
    }
    index.images.extend(named);

    // Write: images, then the shar and its link, then the index last, so
    // an interrupted build leaves the previous index in charge.
    let mut report = BuildReport::default();
    for c in &checked {
        let cdir = out.join(&c.component);
        std::fs::create_dir_all(&cdir).map_err(write_err(&cdir))?;
        let uuid = c.manifest.uuid;
        let file_dst = cdir.join(format!("{uuid}.file"));
        let manifest_dst = cdir.join(format!("{uuid}.manifest"));
        if file_dst != c.file_path {
            copy_atomic(&c.file_path, &file_dst)?;
        }
        if manifest_dst != c.manifest_path {
            copy_atomic(&c.manifest_path, &manifest_dst)?;
        }
        if !report.added.contains(&uuid) {
            report.added.push(uuid);
        }
    }
    if let Some(s) = shar {
        std::fs::create_dir_all(out).map_err(write_err(out))?;
        let name = s
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "agents.sh".to_string());
        let dst = out.join(&name);
        if dst != s {
            copy_atomic(s, &dst)?;
        }
        // Relative, so that the assets zone (which serves the directory
        // from another mount point) resolves it.
        let link = out.join(LATEST_LINK);
        let tmp = out.join(".latest.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp).map_err(write_err(&tmp))?;
        std::fs::rename(&tmp, &link).map_err(write_err(&link))?;
        report.latest = Some(name);
    }
    std::fs::create_dir_all(out).map_err(write_err(out))?;
    let text = serde_json::to_vec_pretty(&index).unwrap_or_default();
    write_atomic(&out.join(INDEX_FILE), &text)?;
    report.index = index;
    Ok(report)
}

fn copy_atomic(src: &Path, dst: &Path) -> Result<(), UsbkeyError> {
    let tmp = dst.with_extension("partial");
    std::fs::copy(src, &tmp).map_err(write_err(&tmp))?;
    std::fs::rename(&tmp, dst).map_err(write_err(dst))
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<(), UsbkeyError> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, data).map_err(write_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(write_err(path))
}

/// Read `<dir>/index.json`.
pub fn read_index(dir: &Path) -> Result<UsbkeyIndex, UsbkeyError> {
    let index_err = |err| UsbkeyError::Index {
        path: dir.to_path_buf(),
        err,
    };
    let text = agentsadm_types::bounded::read_small_io(&dir.join(INDEX_FILE)).map_err(index_err)?;
    serde_json::from_slice(&text)
        .map_err(|e| index_err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// What [`import`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    pub imported: Vec<ImageUuid>,
    /// Already in IMGAPI.
    pub present: Vec<ImageUuid>,
}

/// Import the index's images (every image with `all`) into the datacenter
/// IMGAPI, skipping those it has.
pub async fn import(
    catalog: &Catalog,
    imgapi: &ImgapiClient,
    dir: &Path,
    all: bool,
) -> Result<ImportReport, UsbkeyError> {
    // The index and the image directory are read off the runtime.
    let (index, mut images) = {
        let (catalog, dir) = (catalog.clone(), dir.to_path_buf());
        let listed = tokio::task::spawn_blocking(move || {
            read_index(&dir).map(|index| (index, present(&catalog, &dir)))
        })
        .await;
        match listed {
            Ok(listed) => listed?,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    };
    if !all {
        images.retain(|c| index.images.get(&c.component) == Some(&c.manifest.uuid));
    }
    images.sort_by_key(|c| (c.component.clone(), c.manifest.uuid));
    let mut report = ImportReport::default();
    for c in images {
        let m = &c.manifest;
        let import_err = |err| UsbkeyError::Import {
            image: m.uuid,
            name: m.name.clone(),
            version: m.version.clone(),
            err: Box::new(err),
        };
        match imgapi.get_image(m.uuid).await {
            Ok(_) => {
                report.present.push(m.uuid);
                continue;
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(import_err(e)),
        }
        let Some(file) = m.file().cloned() else {
            return Err(UsbkeyError::BadImage {
                path: c.manifest_path.clone(),
                detail: format!("image {} lists no file", m.uuid),
            });
        };
        // The upload takes the file as one body; it is read on the
        // blocking pool, not on a runtime worker.
        let bytes = tokio::fs::read(&c.file_path)
            .await
            .map_err(read_err(&c.file_path))?;
        let mut upload = m.clone();
        // IMGAPI computes files from the upload and state from activation.
        upload.files = Vec::new();
        upload.channels = None;
        imgapi.import_manifest(&upload).await.map_err(import_err)?;
        imgapi
            .add_image_file(m.uuid, file.compression, &file.sha1, bytes.into())
            .await
            .map_err(import_err)?;
        imgapi.activate_image(m.uuid).await.map_err(import_err)?;
        report.imported.push(m.uuid);
    }
    Ok(report)
}
