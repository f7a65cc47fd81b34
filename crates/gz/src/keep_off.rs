//! Components kept off on this server (`agentsadm disable`, issue 25): a
//! record per component, `<state>/disabled/<component>.json` (who, when,
//! why), written by `gz disable` before it disables the services and
//! removed by `gz enable` after it enables them.
//!
//! While the record is there, every transaction of the component keeps
//! its services disabled: the record is read into the journal when the
//! transaction starts ([`super::txn::Journal::keep_off`]); after the new
//! version's SMF import (whatever its postinstall enabled) every instance
//! is disabled again before the health gate, which then checks that they
//! are disabled and stay so; a rollback, and the recovery of a killed run,
//! disable them again after restoring the old states. So a crash at any
//! point never leaves the component enabled: before the journal nothing
//! was touched, after it the recovery's rollback ends disabled.
//!
//! `gz disable` / `gz enable` are journaled ([`Pending`]): the change is
//! written down first and finished by the next locked run if a kill
//! interrupts it, so the record and SMF always agree after that run.
//!
//! cn-agent's install task runs the same installer in the simulator, but
//! the real cn-agent knows nothing of this record; the orchestrator
//! therefore runs `gz disable` in the same step after an install-agent
//! task of a disabled component (its plan says so).

use agentsadm_types::component::ComponentName;
use std::collections::BTreeSet;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use agentsadm_platform::{Platform, PlatformError, ServiceState};

use super::fsutil;
use super::health::{GateError, HealthGate, Unhealthy};
use super::paths::GzPaths;

/// Who disabled the component, when and why (as SAPI records it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffRecord {
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The record's file.
pub fn record_file(paths: &GzPaths, component: &ComponentName) -> PathBuf {
    paths
        .state_dir()
        .join("disabled")
        .join(format!("{component}.json"))
}

/// The component's record, if it has one. A record that cannot be parsed
/// still keeps the component off (someone meant it), with fields unknown.
/// Blocking.
pub fn read(paths: &GzPaths, component: &ComponentName) -> Option<OffRecord> {
    // A record that is not a readable regular file (a FIFO, a link, a
    // huge file) keeps the component off too, read as damaged.
    let bytes = match crate::fsutil::read_small(record_file(paths, component)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        other => other.unwrap_or_default(),
    };
    Some(
        serde_json::from_slice(&bytes).unwrap_or_else(|_| OffRecord {
            by: "unknown".into(),
            at: "unknown".into(),
            reason: None,
        }),
    )
}

/// Write the record (atomic, fsynced). Blocking.
pub fn write(paths: &GzPaths, component: &ComponentName, record: &OffRecord) -> io::Result<()> {
    let file = record_file(paths, component);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let bytes = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    fsutil::write_atomic(&file, &bytes)
}

/// A `gz disable` or `gz enable` under way: written (atomic, fsynced)
/// before either touches the record or SMF, removed once both agree, so
/// that a kill anywhere in between is finished by the next locked run
/// ([`pending`]), never left half done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub component: ComponentName,
    /// The record a disable writes; `None`: an enable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<OffRecord>,
}

/// The directory of the pending changes.
pub fn pending_dir(paths: &GzPaths) -> PathBuf {
    paths.state_dir().join("keep-off")
}

fn pending_file(paths: &GzPaths, component: &ComponentName) -> PathBuf {
    pending_dir(paths).join(format!("{component}.json"))
}

/// Journal a change before making it. Blocking.
pub fn begin(paths: &GzPaths, pending: &Pending) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(pending).map_err(io::Error::other)?;
    fsutil::write_atomic(&pending_file(paths, &pending.component), &bytes)
}

/// The change is made: forget it. Blocking.
pub fn end(paths: &GzPaths, component: &ComponentName) -> io::Result<()> {
    match std::fs::remove_file(pending_file(paths, component)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => fsutil::fsync_dir(&pending_dir(paths)).or(Ok(())),
    }
}

/// The changes a killed run left under way, by file name order; an
/// unreadable one is returned as its path and error. Blocking.
pub fn pending(paths: &GzPaths) -> Vec<Result<Pending, (PathBuf, io::Error)>> {
    let Ok(rd) = std::fs::read_dir(pending_dir(paths)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            fsutil::read_small(&p)
                .and_then(|b| {
                    serde_json::from_slice(&b)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
                })
                .map_err(|e| (p, e))
        })
        .collect()
}

/// Remove the record; a missing one is fine. Blocking.
pub fn remove(paths: &GzPaths, component: &ComponentName) -> io::Result<()> {
    match std::fs::remove_file(record_file(paths, component)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Every instance the manifests `files` define, and `known` ones (a
/// transaction's snapshot), without duplicates. Blocking.
pub fn instances(files: &[PathBuf], known: &[String]) -> Result<Vec<String>, PlatformError> {
    let mut out: BTreeSet<String> = known.iter().cloned().collect();
    for file in files {
        match agentsadm_platform::read_manifest_instances(file) {
            Ok(list) => out.extend(list.into_iter().map(|i| i.fmri)),
            Err(PlatformError::Read { err, .. }) if err.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out.into_iter().collect())
}

/// Disable every instance of `fmris` that exists and is not disabled
/// (temporarily enabled ones too: `svcadm disable` is persistent).
/// Returns the ones it disabled.
pub async fn turn_off(
    platform: &dyn Platform,
    fmris: &[String],
) -> Result<Vec<String>, (String, PlatformError)> {
    let mut changed = Vec::new();
    for fmri in fmris {
        let state = platform
            .smf_state(fmri)
            .await
            .map_err(|e| (fmri.clone(), e))?;
        if state.is_some_and(|s| s != ServiceState::Disabled) {
            platform
                .smf_disable(fmri)
                .await
                .map_err(|e| (fmri.clone(), e))?;
            changed.push(fmri.clone());
        }
    }
    Ok(changed)
}

/// The health gate of a component kept off: every instance of `fmris`
/// is disabled (or absent) and stays so for the gate's `min_healthy`.
pub async fn check_off(
    platform: &dyn Platform,
    fmris: &[String],
    gate: &HealthGate,
) -> Result<(), GateError> {
    let started = Instant::now();
    loop {
        for fmri in fmris {
            let state = platform
                .smf_state(fmri)
                .await
                .map_err(|err| GateError::Platform {
                    fmri: fmri.clone(),
                    err: Box::new(err),
                })?;
            if let Some(s) = state.filter(|s| *s != ServiceState::Disabled) {
                return Err(GateError::Unhealthy(Unhealthy {
                    fmri: fmri.clone(),
                    state: s.to_string(),
                    explanation: Some(
                        "the component is disabled on this server (agentsadm disable); its services must stay disabled"
                            .into(),
                    ),
                    waited: None,
                }));
            }
        }
        let left = gate.min_healthy.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(());
        }
        tokio::time::sleep(left.min(gate.poll).max(Duration::from_millis(10))).await;
    }
}

/// The directory of the records.
pub fn records_dir(paths: &GzPaths) -> PathBuf {
    paths.state_dir().join("disabled")
}

/// Every component with a record. Blocking.
pub fn all(paths: &GzPaths) -> Vec<String> {
    let dir = records_dir(paths);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<String> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    out.sort();
    out
}
