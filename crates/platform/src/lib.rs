//! The operating system of one server's global zone behind a small async
//! trait: SMF (import, delete, enable, disable, state), sysinfo and the SDC
//! config.
//!
//! - [`smartos::SmartOs`] runs the real commands (`svccfg`, `svcadm`,
//!   `svcs`, `sysinfo`, `/lib/sdc/config.sh -json`) as child processes the
//!   runtime waits on.
//! - [`rooted::Rooted`] is a global zone in a directory (tests, the
//!   simulator): its sysinfo is `<root>/sysinfo.json` and its SMF state the
//!   JSON file `<root>/var/svc/smf-state.json`, maintained by reading the
//!   manifests it is asked to import (service FMRIs and their default
//!   enabled state), so rollback of services can be observed.
//! - [`mockcloud::Mockcloud`] is one server of a mockcloud tree: sysinfo
//!   from `servers/<uuid>/sysinfo.json` and no SMF at all.
//! - [`manifest`]: the service instances an SMF manifest defines;
//! - [`svcs`]: `svcs` output as the health gate reads it.
//!
//! Every method returns a future: the installer runs inside tokio tasks
//! (thousands at once in the simulator), so commands are awaited and file
//! I/O runs on the blocking pool ([`blocking`]), never on a runtime worker.
//! Everything above this trait (hashing, unpacking, the transaction) is
//! shared by all platforms.

pub mod manifest;
pub mod mockcloud;
pub mod rooted;
pub mod sdcadm_config;
pub mod smartos;
pub mod svcs;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use agentsadm_types::ids::ServerUuid;

pub use manifest::{ManifestError, ManifestInstance, manifest_instances, read_manifest_instances};
pub use mockcloud::Mockcloud;
pub use rooted::Rooted;
pub use sdcadm_config::sdcadm_updates_url;
pub use smartos::{INSTALL_SERVICE_FMRI, INSTALL_SERVICE_MANIFEST, SmartOs, read_sdc_config};

/// The SDC config (`/lib/sdc/config.sh -json`, or a rooted `node.config`).
pub type SdcConfig = serde_json::Map<String, serde_json::Value>;

/// What a platform call returns.
pub type PlatformFuture<'a, T> = BoxFuture<'a, Result<T, PlatformError>>;

/// An SMF service instance's state, as `svcs -H -o state` prints it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceState {
    Online,
    Offline,
    Disabled,
    Maintenance,
    Degraded,
    Uninitialized,
    #[serde(untagged)]
    Other(String),
}

impl ServiceState {
    pub fn parse(s: &str) -> ServiceState {
        match s.trim() {
            "online" => ServiceState::Online,
            "offline" => ServiceState::Offline,
            "disabled" => ServiceState::Disabled,
            "maintenance" => ServiceState::Maintenance,
            "degraded" => ServiceState::Degraded,
            "uninitialized" => ServiceState::Uninitialized,
            other => ServiceState::Other(other.to_string()),
        }
    }

    /// Whether the instance is enabled (anything but `disabled`): what a
    /// rollback restores with `svcadm enable` / `disable`.
    pub fn is_enabled(&self) -> bool {
        !matches!(self, ServiceState::Disabled)
    }

    pub fn as_str(&self) -> &str {
        match self {
            ServiceState::Online => "online",
            ServiceState::Offline => "offline",
            ServiceState::Disabled => "disabled",
            ServiceState::Maintenance => "maintenance",
            ServiceState::Degraded => "degraded",
            ServiceState::Uninitialized => "uninitialized",
            ServiceState::Other(s) => s,
        }
    }
}

impl fmt::Display for ServiceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An SMF instance's health, as `svcs` and `svcs -x` tell it: the state
/// and, for an instance that is not online, the explanation (`svcs -x`
/// text) where the platform has one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceHealth {
    pub state: ServiceState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The state it is moving to (`svcs -o nstate`), when it is moving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_state: Option<ServiceState>,
    /// The instance's current run, where the platform can tell: it
    /// changes whenever the instance leaves its state, even if it is back
    /// by the next look (SmartOS: its primary contract and the time it
    /// entered its state; rooted: the count of its recorded state
    /// changes). The health gate fails an instance whose run changes while
    /// it is watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

/// What the installer needs from sysinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sysinfo {
    pub uuid: ServerUuid,
    pub hostname: String,
    /// `Boot Parameters.headnode == "true"`.
    pub headnode: bool,
}

impl Sysinfo {
    /// Parse sysinfo JSON (`UUID`, `Hostname`, `Boot Parameters.headnode`).
    pub fn from_json(v: &serde_json::Value) -> Option<Sysinfo> {
        let uuid = v.get("UUID")?.as_str()?.parse().ok()?;
        let hostname = v
            .get("Hostname")
            .and_then(|h| h.as_str())
            .unwrap_or_default()
            .to_string();
        let headnode = v
            .get("Boot Parameters")
            .and_then(|b| b.get("headnode"))
            .map(|h| h.as_str() == Some("true") || h.as_bool() == Some(true))
            .unwrap_or(false);
        Some(Sysinfo {
            uuid,
            hostname,
            headnode,
        })
    }

    /// The sysinfo JSON a rooted or mockcloud server keeps (the subset we
    /// read, in sysinfo's key spelling).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "UUID": self.uuid,
            "Hostname": self.hostname,
            "Boot Parameters": { "headnode": if self.headnode { "true" } else { "false" } },
            "Setup": "true",
            "System Type": "SunOS",
        })
    }
}

/// A platform operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    #[error("cannot run {command}")]
    Spawn {
        command: String,
        #[source]
        err: io::Error,
    },
    #[error("{command} exited with {status}: {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error("{path} is not valid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    /// What to do about it is the caller's to say: `gz` commands take
    /// `--server-uuid`, `self-update` runs only on a headnode.
    #[error("no sysinfo at {path} (UUID, Hostname, Boot Parameters.headnode)")]
    NoSysinfo { path: PathBuf },
    #[error("SMF manifest {path} is not valid")]
    BadManifest {
        path: PathBuf,
        #[source]
        err: ManifestError,
    },
    #[error("{what} is not supported on the {platform} platform")]
    Unsupported {
        what: &'static str,
        platform: &'static str,
    },
    /// A FIFO, device, link or oversized file where a small file is read.
    #[error(transparent)]
    Damaged(#[from] agentsadm_types::bounded::FileError),
}

/// Read the regular file at `path`, at most `limit` bytes
/// ([`agentsadm_types::bounded`]): absent is [`PlatformError::Read`] with
/// `NotFound` (what callers test for), anything but a small regular file
/// [`PlatformError::Damaged`]. Blocking.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, PlatformError> {
    agentsadm_types::bounded::read(path, limit)?.ok_or_else(|| PlatformError::Read {
        path: path.to_path_buf(),
        err: io::ErrorKind::NotFound.into(),
    })
}

/// [`read_bounded`] as text (bad UTF-8 is [`PlatformError::Invalid`]).
pub fn read_bounded_text(path: &Path, limit: u64) -> Result<String, PlatformError> {
    String::from_utf8(read_bounded(path, limit)?).map_err(|e| PlatformError::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The operating system of one server's global zone.
pub trait Platform: Send + Sync + fmt::Debug {
    /// `smartos`, `rooted` or `mockcloud`, for messages.
    fn name(&self) -> &'static str;
    /// The server's sysinfo.
    fn sysinfo(&self) -> PlatformFuture<'_, Sysinfo>;
    /// The SDC config (`/lib/sdc/config.sh -json`), when there is one.
    fn sdc_config(&self) -> BoxFuture<'_, Option<SdcConfig>>;
    /// `svccfg import <manifest>`: creates missing instances with the
    /// manifest's default enabled state; existing instances keep theirs.
    fn smf_import<'a>(&'a self, manifest: &'a Path) -> PlatformFuture<'a, ()>;
    /// `svcadm disable -s` then `svccfg delete`; a missing service is fine.
    fn smf_delete<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()>;
    fn smf_enable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()>;
    fn smf_disable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()>;
    /// The instance's state, `None` when it does not exist.
    fn smf_state<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceState>>;
    /// The instance's state and, when it is not online, why (`svcs -x`
    /// where available); `None` when it does not exist. The health gate
    /// polls this.
    fn smf_health<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceHealth>> {
        Box::pin(async move {
            Ok(self.smf_state(fmri).await?.map(|state| ServiceHealth {
                state,
                explanation: None,
                next_state: None,
                run: None,
            }))
        })
    }
    /// `svcadm restart`: run the (restored) start method again.
    fn smf_restart<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async move {
            self.smf_disable(fmri).await?;
            self.smf_enable(fmri).await
        })
    }
    /// The SMF service whose contract this process runs in, when the
    /// platform can tell (SmartOS: our contract's `svc_fmri`).
    fn caller_service(&self) -> BoxFuture<'_, Option<String>> {
        Box::pin(async { None })
    }
    /// `sysinfo -u` after the installed set changed (cn-agent does this so
    /// `SDC Agents` stays current). Failures are not worth failing for.
    fn refresh_sysinfo(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    /// Run `agentsadm gz run-job --job <job>` outside the caller's SMF
    /// contract (cn-agent replacing itself). SmartOS only.
    fn launch_transient_job<'a>(&'a self, _job: &'a Path) -> PlatformFuture<'a, ()> {
        let platform = self.name();
        Box::pin(async move {
            Err(PlatformError::Unsupported {
                what: "handing a job to the agentsadm-install service",
                platform,
            })
        })
    }
}

/// Run blocking work (file I/O, tree walks) on tokio's blocking pool, so a
/// runtime worker shared by many installs never waits on the disk.
pub async fn blocking<T, F>(work: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        // The work panicked: let the panic continue in the caller, as if
        // it had run inline.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only a runtime that is shutting down drops queued blocking work;
        // nothing waits for this result then.
        Err(e) => panic!("blocking work was cancelled: {e}"),
    }
}

/// Read a sysinfo JSON file (blocking: call it through [`blocking`] from
/// async code).
pub fn read_sysinfo_file(path: &Path) -> Result<Sysinfo, PlatformError> {
    let bytes = match read_bounded(path, agentsadm_types::bounded::SMALL) {
        Ok(b) => b,
        Err(PlatformError::Read { err, .. }) if err.kind() == io::ErrorKind::NotFound => {
            return Err(PlatformError::NoSysinfo {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(e),
    };
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| PlatformError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    Sysinfo::from_json(&v).ok_or_else(|| PlatformError::Invalid {
        path: path.to_path_buf(),
        reason: "no valid UUID".to_string(),
    })
}

/// `svc:/smartdc/agent/x:default` -> `svc:/smartdc/agent/x` (what
/// `svccfg delete` takes to remove the whole service).
pub fn fmri_service(fmri: &str) -> String {
    match fmri.rsplit_once(':') {
        Some((svc, _)) if svc.starts_with("svc:/") => svc.to_string(),
        _ => fmri.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysinfo_round_trips() {
        let s = Sysinfo {
            uuid: ServerUuid::from_u128(7),
            hostname: "cn1".into(),
            headnode: true,
        };
        assert_eq!(Sysinfo::from_json(&s.to_json()), Some(s));
        assert_eq!(
            fmri_service("svc:/smartdc/agent/vm-agent:default"),
            "svc:/smartdc/agent/vm-agent"
        );
    }
}
