//! Persistence of a simulated datacenter in `--state DIR`, so `sim serve`
//! can be stopped and started again with the same servers, images, SAPI
//! objects and CNAPI records.
//!
//! - `DIR/sim-state.json`: everything but image files, rewritten atomically
//!   (temporary file, then rename) about once a second while things change,
//!   and on shutdown.
//! - `DIR/images/{dc,updates}/<uuid>.file`: image files, written once
//!   (files never change after upload).
//! - `DIR/servers/<uuid>/`: each server's GZ, already on disk.
//!
//! Tasks are not kept (CNAPI purges them too), nor are injected faults:
//! they come from the flags or scenario of each start.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::SimError;
use super::cnapi::ServerRecord;
use super::core::DcCore;
use super::fleet::MockServerSpec;
use super::imgapi::ImgapiStore;
use super::imgapi::StoredFile;
use super::imgapi::StoredImage;
use super::sapi::SapiStore;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageManifest;

pub(crate) const STATE_FILE: &str = "sim-state.json";
const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct FileMeta {
    sha1: String,
    /// `None`: served without `Content-MD5`.
    #[serde(default)]
    md5_b64: Option<String>,
    compression: Compression,
    mtime_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct ImageSnap {
    manifest: ImageManifest,
    activated: bool,
    channels: Vec<String>,
    file: Option<FileMeta>,
}

/// The persisted datacenter.
#[derive(Serialize, Deserialize)]
pub(crate) struct Snapshot {
    format: u32,
    pub clock_ticks: u64,
    pub servers: Vec<MockServerSpec>,
    pub records: Vec<ServerRecord>,
    pub sapi: SapiStore,
    #[serde(default)]
    pub seed_report: Option<super::SeedReport>,
    /// The layout the servers' directories have.
    #[serde(default)]
    pub gz_layout: Option<super::GzLayout>,
    dc_images: Vec<ImageSnap>,
    updates_images: Vec<ImageSnap>,
}

fn images_dir(state: &Path, which: &str) -> PathBuf {
    state.join("images").join(which)
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> SimError + '_ {
    move |err| SimError::StateWrite {
        path: path.to_path_buf(),
        err,
    }
}

fn snap_images(store: &ImgapiStore, dir: &Path) -> Result<Vec<ImageSnap>, SimError> {
    std::fs::create_dir_all(dir).map_err(write_err(dir))?;
    let mut out: Vec<ImageSnap> = Vec::with_capacity(store.images.len());
    let mut uuids: Vec<_> = store.images.keys().copied().collect();
    uuids.sort();
    for u in uuids {
        let img = &store.images[&u];
        let file = match &img.file {
            Some(f) => {
                let path = dir.join(format!("{u}.file"));
                if !path.exists() {
                    let tmp = path.with_extension("partial");
                    std::fs::write(&tmp, &f.bytes).map_err(write_err(&tmp))?;
                    std::fs::rename(&tmp, &path).map_err(write_err(&path))?;
                }
                Some(FileMeta {
                    sha1: f.sha1.clone(),
                    md5_b64: f.md5_b64.clone(),
                    compression: f.compression,
                    mtime_ms: f
                        .mtime
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0),
                })
            }
            None => None,
        };
        out.push(ImageSnap {
            manifest: img.manifest.clone(),
            activated: img.activated,
            channels: img.channels.clone(),
            file,
        });
    }
    Ok(out)
}

/// Write the whole state now.
pub(crate) fn save(core: &DcCore) -> Result<(), SimError> {
    let state = &core.state_dir;
    let dc_images = snap_images(&core.imgapi.lock(), &images_dir(state, "dc"))?;
    let updates_images = snap_images(&core.updates.lock(), &images_dir(state, "updates"))?;
    let snapshot = Snapshot {
        format: FORMAT_VERSION,
        clock_ticks: core.clock.ticks(),
        servers: core.fleet.values().map(|s| s.spec()).collect(),
        records: core.cnapi.servers().values().cloned().collect(),
        sapi: core.sapi.lock().clone(),
        seed_report: core
            .seed_report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
        gz_layout: Some(core.config.gz_layout),
        dc_images,
        updates_images,
    };
    let path = state.join(STATE_FILE);
    // A temporary file of this save's own: the periodic save and the one
    // at shutdown may run at once, and with one shared name the second
    // rename found the file gone (`sim serve` then exited 1 on SIGTERM,
    // 1 of 12 tries). Each rename is whole; the last one wins.
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = state.join(format!("{STATE_FILE}.{}.{n}.tmp", std::process::id()));
    let text = serde_json::to_vec(&snapshot).map_err(|err| SimError::StateEncode { err })?;
    std::fs::write(&tmp, text).map_err(write_err(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(write_err(&path))
}

/// Read a state directory's snapshot, if it has one.
pub(crate) fn load(state: &Path) -> Result<Option<Snapshot>, SimError> {
    let path = state.join(STATE_FILE);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(SimError::StateRead { path, err }),
    };
    let mut snap: Snapshot = serde_json::from_slice(&text).map_err(|err| SimError::StateParse {
        path: path.clone(),
        err,
    })?;
    if snap.format != FORMAT_VERSION {
        return Err(SimError::StateVersion {
            path,
            found: snap.format,
        });
    }
    snap.sapi.reindex();
    Ok(Some(snap))
}

/// Fill an IMGAPI store from a snapshot, reading the image files.
pub(crate) fn restore_images(
    snap: &mut Snapshot,
    updates: bool,
    store: &mut ImgapiStore,
    state: &Path,
) -> Result<(), SimError> {
    let (which, list) = if updates {
        ("updates", std::mem::take(&mut snap.updates_images))
    } else {
        ("dc", std::mem::take(&mut snap.dc_images))
    };
    let dir = images_dir(state, which);
    for s in list {
        let uuid = s.manifest.uuid;
        let file = match s.file {
            Some(meta) => {
                let path = dir.join(format!("{uuid}.file"));
                let bytes = std::fs::read(&path).map_err(|err| SimError::StateRead {
                    path: path.clone(),
                    err,
                })?;
                let mut f = StoredFile::new(bytes.into(), meta.compression);
                if f.sha1 != meta.sha1 {
                    return Err(SimError::StateCorrupt {
                        path,
                        sha1: f.sha1,
                        recorded: meta.sha1,
                    });
                }
                f.mtime = UNIX_EPOCH + Duration::from_millis(meta.mtime_ms);
                f.md5_b64 = meta.md5_b64;
                Some(f)
            }
            None => None,
        };
        store.images.insert(
            uuid,
            StoredImage {
                manifest: s.manifest,
                activated: s.activated,
                channels: s.channels,
                file,
            },
        );
    }
    Ok(())
}
