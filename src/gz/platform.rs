//! The operating system behind a small trait: SMF (import, delete, enable,
//! disable, state), sysinfo and the SDC config.
//!
//! - [`SmartOs`] runs the real commands (`svccfg`, `svcadm`, `svcs`,
//!   `sysinfo`, `/lib/sdc/config.sh -json`).
//! - [`Rooted`] is a global zone in a directory (tests, the simulator): its
//!   sysinfo is `<root>/sysinfo.json` and its SMF state is the JSON file
//!   `<root>/var/svc/smf-state.json`, maintained by reading the manifests it
//!   is asked to import (service FMRIs and their default enabled state), so
//!   rollback of services can be observed.
//! - [`Mockcloud`] is one server of a mockcloud tree: sysinfo from
//!   `servers/<uuid>/sysinfo.json` and no SMF at all.
//!
//! Everything above this trait (hashing, unpacking, the transaction) is
//! shared by all three.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::ids::ServerUuid;

use super::paths::GzPaths;

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
    #[error(
        "no sysinfo at {path}: write it (UUID, Hostname, Boot Parameters.headnode) or pass --server-uuid"
    )]
    NoSysinfo { path: PathBuf },
    #[error("SMF manifest {path} is not valid: {reason}")]
    BadManifest { path: PathBuf, reason: String },
    #[error("{what} is not supported on the {platform} platform")]
    Unsupported {
        what: &'static str,
        platform: &'static str,
    },
}

/// One service instance a manifest defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestInstance {
    pub fmri: String,
    /// `create_default_instance enabled=` / `instance enabled=`.
    pub enabled: bool,
}

/// Find the service instances an SMF manifest defines. A small scanner, not
/// an XML parser: it reads `<service name=...>` and the
/// `<create_default_instance enabled=...>` / `<instance name=... enabled=...>`
/// elements inside it, which is all an agent manifest uses.
pub fn manifest_instances(xml: &str) -> Result<Vec<ManifestInstance>, String> {
    if !xml.contains("<service_bundle") {
        return Err("no <service_bundle> element".to_string());
    }
    let mut out = Vec::new();
    let mut rest = xml;
    let mut services = 0;
    while let Some(start) = rest.find("<service ") {
        let after = &rest[start..];
        let tag_end = after.find('>').ok_or("unterminated <service> tag")?;
        let tag = &after[..tag_end];
        let name = attr(tag, "name").ok_or("a <service> element has no name")?;
        let body_end = after.find("</service>").unwrap_or(after.len());
        let body = &after[tag_end..body_end];
        services += 1;
        if let Some(pos) = body.find("<create_default_instance") {
            let t = &body[pos..body[pos..].find('>').map(|e| pos + e).unwrap_or(body.len())];
            let enabled = attr(t, "enabled").ok_or("create_default_instance has no enabled=")?;
            out.push(ManifestInstance {
                fmri: format!("svc:/{name}:default"),
                enabled: enabled == "true",
            });
        }
        let mut b = body;
        while let Some(pos) = b.find("<instance ") {
            let t_end = b[pos..].find('>').map(|e| pos + e).unwrap_or(b.len());
            let t = &b[pos..t_end];
            let iname = attr(t, "name").ok_or("an <instance> element has no name")?;
            let enabled = attr(t, "enabled").unwrap_or("false".to_string());
            out.push(ManifestInstance {
                fmri: format!("svc:/{name}:{iname}"),
                enabled: enabled == "true",
            });
            b = &b[t_end..];
        }
        rest = &after[body_end.min(after.len())..];
        if body_end == after.len() {
            break;
        }
    }
    if services == 0 {
        return Err("no <service> element".to_string());
    }
    Ok(out)
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!("{name}=\"");
    let mut search = tag;
    loop {
        let pos = search.find(&key)?;
        // Require a word boundary so `name=` does not match `xname=`.
        let boundary = pos == 0 || search.as_bytes()[pos - 1].is_ascii_whitespace();
        let after = &search[pos + key.len()..];
        if boundary {
            let end = after.find('"')?;
            return Some(after[..end].to_string());
        }
        search = after;
    }
}

/// Read a manifest file's instances.
pub fn read_manifest_instances(path: &Path) -> Result<Vec<ManifestInstance>, PlatformError> {
    let xml = std::fs::read_to_string(path).map_err(|err| PlatformError::Read {
        path: path.to_path_buf(),
        err,
    })?;
    manifest_instances(&xml).map_err(|reason| PlatformError::BadManifest {
        path: path.to_path_buf(),
        reason,
    })
}

/// The operating system of one server's global zone.
pub trait Platform: Send + Sync + fmt::Debug {
    /// `smartos`, `rooted` or `mockcloud`, for messages.
    fn name(&self) -> &'static str;
    /// The server's sysinfo.
    fn sysinfo(&self) -> Result<Sysinfo, PlatformError>;
    /// The SDC config (`/lib/sdc/config.sh -json`), when there is one.
    fn sdc_config(&self) -> Option<serde_json::Map<String, serde_json::Value>>;
    /// `svccfg import <manifest>`: creates missing instances with the
    /// manifest's default enabled state; existing instances keep theirs.
    fn smf_import(&self, manifest: &Path) -> Result<(), PlatformError>;
    /// `svcadm disable -s` then `svccfg delete`; a missing service is fine.
    fn smf_delete(&self, fmri: &str) -> Result<(), PlatformError>;
    fn smf_enable(&self, fmri: &str) -> Result<(), PlatformError>;
    fn smf_disable(&self, fmri: &str) -> Result<(), PlatformError>;
    /// The instance's state, `None` when it does not exist.
    fn smf_state(&self, fmri: &str) -> Result<Option<ServiceState>, PlatformError>;
    /// `svcadm restart`: run the (restored) start method again.
    fn smf_restart(&self, fmri: &str) -> Result<(), PlatformError> {
        self.smf_disable(fmri)?;
        self.smf_enable(fmri)
    }
    /// `sysinfo -u` after the installed set changed (cn-agent does this so
    /// `SDC Agents` stays current). Failures are not worth failing for.
    fn refresh_sysinfo(&self) {}
    /// Run `agentsadm gz run-job --job <job>` outside the caller's SMF
    /// contract (cn-agent replacing itself). SmartOS only.
    fn launch_transient_job(&self, _job: &Path) -> Result<(), PlatformError> {
        Err(PlatformError::Unsupported {
            what: "handing a job to the agentsadm-install service",
            platform: self.name(),
        })
    }
}

// ---------------------------------------------------------------------------
// SmartOS

/// The real global zone: runs SMF and sysinfo commands.
#[derive(Debug, Default)]
pub struct SmartOs;

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::iter::once(cmd)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

fn run(cmd: &str, args: &[&str]) -> Result<std::process::Output, PlatformError> {
    let command = command_line(cmd, args);
    Command::new(cmd)
        .args(args)
        .output()
        .map_err(|err| PlatformError::Spawn {
            command: command.clone(),
            err,
        })
}

fn run_ok(cmd: &str, args: &[&str]) -> Result<std::process::Output, PlatformError> {
    let out = run(cmd, args)?;
    if !out.status.success() {
        return Err(PlatformError::Command {
            command: command_line(cmd, args),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

const SVCCFG: &str = "/usr/sbin/svccfg";
const SVCADM: &str = "/usr/sbin/svcadm";
const SVCS: &str = "/usr/bin/svcs";
const SYSINFO: &str = "/usr/bin/sysinfo";

/// The installed copy of `smf/agentsadm-install.xml`.
pub const INSTALL_SERVICE_MANIFEST: &str = include_str!("../../smf/agentsadm-install.xml");
/// Its FMRI.
pub const INSTALL_SERVICE_FMRI: &str = "svc:/smartdc/agentsadm-install:default";

impl Platform for SmartOs {
    fn name(&self) -> &'static str {
        "smartos"
    }

    fn sysinfo(&self) -> Result<Sysinfo, PlatformError> {
        let out = run_ok(SYSINFO, &[])?;
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| PlatformError::Invalid {
                path: PathBuf::from(SYSINFO),
                reason: e.to_string(),
            })?;
        Sysinfo::from_json(&v).ok_or_else(|| PlatformError::Invalid {
            path: PathBuf::from(SYSINFO),
            reason: "no UUID in sysinfo output".to_string(),
        })
    }

    fn sdc_config(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        crate::cli::read_sdc_config()
    }

    fn smf_import(&self, manifest: &Path) -> Result<(), PlatformError> {
        let p = manifest.to_string_lossy();
        run_ok(SVCCFG, &["import", &p]).map(|_| ())
    }

    fn smf_delete(&self, fmri: &str) -> Result<(), PlatformError> {
        if self.smf_state(fmri)?.is_none() {
            return Ok(());
        }
        // A disable that fails (already in maintenance) must not stop the delete.
        let _ = run(SVCADM, &["disable", "-s", fmri]);
        let service = fmri_service(fmri);
        run_ok(SVCCFG, &["delete", &service]).map(|_| ())
    }

    fn smf_enable(&self, fmri: &str) -> Result<(), PlatformError> {
        run_ok(SVCADM, &["enable", fmri]).map(|_| ())
    }

    fn smf_disable(&self, fmri: &str) -> Result<(), PlatformError> {
        run_ok(SVCADM, &["disable", "-s", fmri]).map(|_| ())
    }

    fn smf_restart(&self, fmri: &str) -> Result<(), PlatformError> {
        run_ok(SVCADM, &["restart", fmri]).map(|_| ())
    }

    fn smf_state(&self, fmri: &str) -> Result<Option<ServiceState>, PlatformError> {
        let out = run(SVCS, &["-H", "-o", "state", fmri])?;
        if !out.status.success() {
            return Ok(None);
        }
        Ok(Some(ServiceState::parse(&String::from_utf8_lossy(
            &out.stdout,
        ))))
    }

    fn refresh_sysinfo(&self) {
        let _ = run(SYSINFO, &["-u"]);
    }

    fn launch_transient_job(&self, job: &Path) -> Result<(), PlatformError> {
        let manifest = Path::new("/opt/smartdc/agents/smf/agentsadm-install.xml");
        if self.smf_state(INSTALL_SERVICE_FMRI)?.is_none() {
            if let Some(dir) = manifest.parent() {
                std::fs::create_dir_all(dir).map_err(|err| PlatformError::Write {
                    path: dir.to_path_buf(),
                    err,
                })?;
            }
            std::fs::write(manifest, INSTALL_SERVICE_MANIFEST).map_err(|err| {
                PlatformError::Write {
                    path: manifest.to_path_buf(),
                    err,
                }
            })?;
            self.smf_import(manifest)?;
        }
        let value = format!("astring: {}", job.display());
        run_ok(
            SVCCFG,
            &[
                "-s",
                INSTALL_SERVICE_FMRI,
                "setprop",
                "config/job",
                "=",
                &value,
            ],
        )?;
        run_ok(SVCADM, &["refresh", INSTALL_SERVICE_FMRI])?;
        // A transient service runs its start method once per enable.
        let _ = run(SVCADM, &["disable", "-s", INSTALL_SERVICE_FMRI]);
        run_ok(SVCADM, &["enable", INSTALL_SERVICE_FMRI]).map(|_| ())
    }
}

/// `svc:/smartdc/agent/x:default` -> `svc:/smartdc/agent/x` (what
/// `svccfg delete` takes to remove the whole service).
pub fn fmri_service(fmri: &str) -> String {
    match fmri.rsplit_once(':') {
        Some((svc, _)) if svc.starts_with("svc:/") => svc.to_string(),
        _ => fmri.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Rooted

/// One instance in the rooted SMF state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootedService {
    pub state: ServiceState,
    /// The manifest it was imported from, relative to the root.
    pub manifest: String,
}

/// The rooted SMF state file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootedSmfState {
    pub services: BTreeMap<String, RootedService>,
}

/// A global zone in a directory.
#[derive(Debug)]
pub struct Rooted {
    paths: GzPaths,
    /// Serializes read-modify-write of the state file between concurrent
    /// installs of one run (other processes are kept out by the server lock).
    smf: Mutex<()>,
}

impl Rooted {
    pub fn new(root: impl Into<PathBuf>) -> Rooted {
        Rooted {
            paths: GzPaths::new(root),
            smf: Mutex::new(()),
        }
    }

    /// Read the SMF state file (empty when absent).
    pub fn read_state(&self) -> Result<RootedSmfState, PlatformError> {
        let path = self.paths.smf_state_file();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| PlatformError::Invalid {
                path,
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(RootedSmfState::default()),
            Err(err) => Err(PlatformError::Read { path, err }),
        }
    }

    fn write_state(&self, state: &RootedSmfState) -> Result<(), PlatformError> {
        let path = self.paths.smf_state_file();
        let mut text = serde_json::to_vec_pretty(state).unwrap_or_default();
        text.push(b'\n');
        super::fsutil::write_atomic(&path, &text).map_err(|err| PlatformError::Write { path, err })
    }

    fn update<T>(
        &self,
        f: impl FnOnce(&mut RootedSmfState) -> Result<T, PlatformError>,
    ) -> Result<T, PlatformError> {
        let _guard = self.smf.lock().unwrap_or_else(|p| p.into_inner());
        let mut state = self.read_state()?;
        let before = state.clone();
        let out = f(&mut state)?;
        if state != before {
            self.write_state(&state)?;
        }
        Ok(out)
    }
}

/// Read a sysinfo JSON file.
pub fn read_sysinfo_file(path: &Path) -> Result<Sysinfo, PlatformError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(PlatformError::NoSysinfo {
                path: path.to_path_buf(),
            });
        }
        Err(err) => {
            return Err(PlatformError::Read {
                path: path.to_path_buf(),
                err,
            });
        }
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

/// Parse a `node.config` (`key='value'` lines) into the SDC config map.
pub fn parse_node_config(text: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().trim_matches('\'').trim_matches('"');
            out.insert(
                k.trim().to_string(),
                serde_json::Value::String(v.to_string()),
            );
        }
    }
    out
}

impl Platform for Rooted {
    fn name(&self) -> &'static str {
        "rooted"
    }

    fn sysinfo(&self) -> Result<Sysinfo, PlatformError> {
        read_sysinfo_file(&self.paths.sysinfo_file())
    }

    fn sdc_config(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        let text = std::fs::read_to_string(self.paths.at(super::paths::NODE_CONFIG)).ok()?;
        Some(parse_node_config(&text))
    }

    fn smf_import(&self, manifest: &Path) -> Result<(), PlatformError> {
        let instances = read_manifest_instances(manifest)?;
        let rel = self.paths.rel(manifest);
        self.update(|state| {
            for inst in instances {
                match state.services.get_mut(&inst.fmri) {
                    Some(s) => s.manifest = rel.clone(),
                    None => {
                        state.services.insert(
                            inst.fmri,
                            RootedService {
                                state: if inst.enabled {
                                    ServiceState::Online
                                } else {
                                    ServiceState::Disabled
                                },
                                manifest: rel.clone(),
                            },
                        );
                    }
                }
            }
            Ok(())
        })
    }

    fn smf_delete(&self, fmri: &str) -> Result<(), PlatformError> {
        // `svccfg delete` of a service removes all its instances.
        let service = fmri_service(fmri);
        self.update(|state| {
            state
                .services
                .retain(|k, _| k != fmri && fmri_service(k) != service);
            Ok(())
        })
    }

    fn smf_enable(&self, fmri: &str) -> Result<(), PlatformError> {
        self.update(|state| match state.services.get_mut(fmri) {
            Some(s) => {
                s.state = ServiceState::Online;
                Ok(())
            }
            None => Err(PlatformError::Command {
                command: format!("svcadm enable {fmri}"),
                status: "exit status: 1".to_string(),
                stderr: format!("svcadm: Pattern '{fmri}' doesn't match any instances"),
            }),
        })
    }

    fn smf_disable(&self, fmri: &str) -> Result<(), PlatformError> {
        self.update(|state| match state.services.get_mut(fmri) {
            Some(s) => {
                s.state = ServiceState::Disabled;
                Ok(())
            }
            None => Err(PlatformError::Command {
                command: format!("svcadm disable {fmri}"),
                status: "exit status: 1".to_string(),
                stderr: format!("svcadm: Pattern '{fmri}' doesn't match any instances"),
            }),
        })
    }

    fn smf_state(&self, fmri: &str) -> Result<Option<ServiceState>, PlatformError> {
        let _guard = self.smf.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self
            .read_state()?
            .services
            .get(fmri)
            .map(|s| s.state.clone()))
    }
}

// ---------------------------------------------------------------------------
// Mockcloud

/// One mockcloud server: `<mockcloud root>/servers/<uuid>/`.
#[derive(Debug)]
pub struct Mockcloud {
    server_dir: PathBuf,
}

impl Mockcloud {
    pub fn new(server_dir: impl Into<PathBuf>) -> Mockcloud {
        Mockcloud {
            server_dir: server_dir.into(),
        }
    }
}

impl Platform for Mockcloud {
    fn name(&self) -> &'static str {
        "mockcloud"
    }
    fn sysinfo(&self) -> Result<Sysinfo, PlatformError> {
        read_sysinfo_file(&self.server_dir.join("sysinfo.json"))
    }
    fn sdc_config(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        None
    }
    fn smf_import(&self, _manifest: &Path) -> Result<(), PlatformError> {
        Ok(())
    }
    fn smf_delete(&self, _fmri: &str) -> Result<(), PlatformError> {
        Ok(())
    }
    fn smf_enable(&self, _fmri: &str) -> Result<(), PlatformError> {
        Ok(())
    }
    fn smf_disable(&self, _fmri: &str) -> Result<(), PlatformError> {
        Ok(())
    }
    fn smf_state(&self, _fmri: &str) -> Result<Option<ServiceState>, PlatformError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"<?xml version="1.0"?>
<service_bundle type="manifest" name="vm-agent">
    <service name="smartdc/agent/vm-agent" type="service" version="1.0">
        <create_default_instance enabled="true"/>
    </service>
    <service name="smartdc/agent/vm-agent-update" type="service" version="1.0">
        <instance name="default" enabled="false"/>
    </service>
</service_bundle>"#;

    #[test]
    fn scans_manifest_instances() {
        let i = manifest_instances(MANIFEST).unwrap();
        assert_eq!(
            i,
            vec![
                ManifestInstance {
                    fmri: "svc:/smartdc/agent/vm-agent:default".into(),
                    enabled: true
                },
                ManifestInstance {
                    fmri: "svc:/smartdc/agent/vm-agent-update:default".into(),
                    enabled: false
                },
            ]
        );
        assert!(manifest_instances("<nope/>").is_err());
    }

    #[test]
    fn rooted_smf_import_keeps_existing_state() {
        let dir = tempfile::tempdir().unwrap();
        let p = Rooted::new(dir.path());
        let m = dir.path().join("m.xml");
        std::fs::write(&m, MANIFEST).unwrap();
        p.smf_import(&m).unwrap();
        let fmri = "svc:/smartdc/agent/vm-agent:default";
        assert_eq!(p.smf_state(fmri).unwrap(), Some(ServiceState::Online));
        p.smf_disable(fmri).unwrap();
        p.smf_import(&m).unwrap();
        assert_eq!(p.smf_state(fmri).unwrap(), Some(ServiceState::Disabled));
        p.smf_delete(fmri).unwrap();
        assert_eq!(p.smf_state(fmri).unwrap(), None);
        assert!(p.smf_enable(fmri).is_err());
    }

    #[test]
    fn parses_node_config_and_sysinfo() {
        let c =
            parse_node_config("# x\nsapi_domain='sapi.coal.example.com'\ndatacenter_name=coal\n");
        assert_eq!(c["sapi_domain"], "sapi.coal.example.com");
        assert_eq!(c["datacenter_name"], "coal");
        let s = Sysinfo {
            uuid: ServerUuid::from_u128(7),
            hostname: "cn1".into(),
            headnode: true,
        };
        assert_eq!(Sysinfo::from_json(&s.to_json()), Some(s));
    }
}
