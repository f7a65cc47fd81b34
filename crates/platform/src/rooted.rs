//! A global zone in a directory (tests, the simulator): sysinfo in
//! `<root>/sysinfo.json`, the SDC config in the compute node's
//! `<root>/opt/smartdc/config/node.config`, and SMF as the JSON state file
//! `<root>/var/svc/smf-state.json`, kept by reading the manifests it is
//! asked to import. Every call reads or writes files, so each runs on the
//! blocking pool.
//!
//! Services that fail to come up are modelled by faults ([`SmfFault`]):
//! from the file `<root>/var/svc/smf-faults.json` (tests write it) and from
//! the list given to [`Rooted::with_faults`] (the simulator). When an
//! enabled instance is (re)started, by an import of its manifest or by
//! `svcadm enable`, a fault that applies puts it in its state (usually
//! `maintenance`) with its reason, which [`Platform::smf_health`] reports
//! as `svcs -x` would. A fault can be limited to one build: it applies
//! only while a file (the component's `image_uuid`) holds a given text.
//!
//! Every state change of an instance is recorded, as SMF's restarter keeps
//! the time of an instance's last state change (`restarter/state_timestamp`)
//! for every later `svcs`: in `<root>/var/svc/.agentsadm/restarter.json`
//! ([`RESTARTER_FILE`]), not in the state file, which tests compare as the
//! server's content (a `.agentsadm` directory is agentsadm's own state to
//! them). [`Platform::smf_health`] reports the count of changes as the
//! instance's run: a service that left `online` and came back between two
//! looks of the health gate has a new run. A flapping service is modelled
//! by a flap in the faults file ([`SmfFlap`]): started, it runs, but exits
//! every period and its restarter brings it back after a while (or at
//! once), each exit and return a change. Both count from the recorded
//! start, so a `gz health` run by another process (the orchestrator's, after
//! cn-agent's install task) sees the flaps of a service it did not start.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::Platform;

use super::PlatformError;

use super::PlatformFuture;

use super::SdcConfig;

use super::ServiceHealth;

use super::ServiceState;

use super::Sysinfo;

use super::blocking;

use super::fmri_service;

use super::read_manifest_instances;

use super::read_sysinfo_file;

/// The sysinfo file, relative to the root (mockcloud keeps each server's
/// at the same place in its directory).
pub const SYSINFO_FILE: &str = "sysinfo.json";
/// The SMF state file, relative to the root.
pub const SMF_STATE_FILE: &str = "var/svc/smf-state.json";
/// The node config of a compute node (read for the SDC config).
pub const NODE_CONFIG: &str = "opt/smartdc/config/node.config";
/// Injected service faults, relative to the root (module docs).
pub const SMF_FAULTS_FILE: &str = "var/svc/smf-faults.json";

/// The restarter's record of each instance's state changes (module docs).
pub const RESTARTER_FILE: &str = "var/svc/.agentsadm/restarter.json";

/// One instance in the rooted SMF state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootedService {
    pub state: ServiceState,
    /// The manifest it was imported from, relative to the root.
    pub manifest: String,
    /// Why it is not online (what `svcs -x` would say), when a fault put
    /// it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A service that does not come up when started (module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmfFault {
    pub fmri: String,
    /// Apply only while this file (relative to the root) holds `holds`
    /// (trimmed): one build of a component, by its `image_uuid` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds: Option<String>,
    /// The state it enters instead of `online`.
    pub state: ServiceState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A service that keeps exiting (module docs): from the moment it is
/// started it runs `period_ms`, exits, and is in `state` for `down_ms`
/// before its restarter brings it back online (0: at once), again and
/// again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmfFlap {
    pub fmri: String,
    pub period_ms: u64,
    #[serde(default)]
    pub down_ms: u64,
    /// Its state while down (`maintenance`, `offline`).
    pub state: ServiceState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The faults file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmfFaults {
    #[serde(default)]
    pub faults: Vec<SmfFault>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flaps: Vec<SmfFlap>,
}

/// What the restarter recorded of one instance's state changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Changes {
    count: u64,
    /// When it was last started, in milliseconds since the epoch (a flap
    /// counts from there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_ms: Option<u64>,
}

/// Milliseconds since the epoch, now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The rooted SMF state file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootedSmfState {
    pub services: BTreeMap<String, RootedService>,
}

/// A global zone in a directory. Cheap to clone: clones share the lock
/// on the state file.
#[derive(Clone, Debug)]
pub struct Rooted {
    root: PathBuf,
    /// Serializes read-modify-write of the state file between concurrent
    /// installs of one run (other processes are kept out by the server lock).
    smf: Arc<Mutex<()>>,
    /// Faults besides the file's (the simulator's).
    faults: Arc<Vec<SmfFault>>,
}

impl Rooted {
    pub fn new(root: impl Into<PathBuf>) -> Rooted {
        Rooted::with_faults(root, Vec::new())
    }

    /// A rooted GZ where `faults` apply besides the faults file's.
    pub fn with_faults(root: impl Into<PathBuf>, faults: Vec<SmfFault>) -> Rooted {
        Rooted {
            root: root.into(),
            smf: Arc::new(Mutex::new(())),
            faults: Arc::new(faults),
        }
    }

    /// The faults file (empty when absent). Blocking.
    fn faults_file(&self) -> Result<SmfFaults, PlatformError> {
        let path = self.root.join(SMF_FAULTS_FILE);
        match crate::read_bounded(&path, agentsadm_types::bounded::SMALL) {
            Ok(bytes) => {
                serde_json::from_slice::<SmfFaults>(&bytes).map_err(|e| PlatformError::Invalid {
                    path: path.clone(),
                    reason: e.to_string(),
                })
            }
            Err(PlatformError::Read { err, .. }) if err.kind() == io::ErrorKind::NotFound => {
                Ok(SmfFaults::default())
            }
            Err(e) => Err(e),
        }
    }

    /// The restarter's records (empty when absent or unreadable: it only
    /// tells runs apart). Blocking.
    fn restarter(&self) -> BTreeMap<String, Changes> {
        crate::read_bounded(
            &self.root.join(RESTARTER_FILE),
            agentsadm_types::bounded::SMALL,
        )
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
    }

    /// Change the restarter's records (under the state lock). Blocking.
    fn change_restarter(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, Changes>),
    ) -> Result<(), PlatformError> {
        let mut all = self.restarter();
        f(&mut all);
        let path = self.root.join(RESTARTER_FILE);
        let text = serde_json::to_vec(&all).unwrap_or_default();
        write_atomic(&path, &text).map_err(|err| PlatformError::Write { path, err })
    }

    /// Record a state change of `fmri` (`started`: it was (re)started).
    fn record_change(&self, fmri: &str, started: bool) -> Result<(), PlatformError> {
        self.change_restarter(|all| {
            let c = all.entry(fmri.to_string()).or_default();
            c.count += 1;
            if started {
                c.started_ms = Some(now_ms());
            }
        })
    }

    /// The fault that applies to `fmri` now, if any. Blocking.
    fn fault_for(&self, fmri: &str) -> Result<Option<SmfFault>, PlatformError> {
        let from_file = self.faults_file()?.faults;
        Ok(from_file
            .into_iter()
            .chain(self.faults.iter().cloned())
            .find(|f| {
                f.fmri == fmri
                    && match (&f.when_file, &f.holds) {
                        (Some(file), Some(text)) => {
                            agentsadm_types::bounded::read_trimmed(&self.root.join(file))
                                .is_ok_and(|t| t.as_deref() == Some(text.trim()))
                        }
                        (Some(file), None) => self.root.join(file).exists(),
                        (None, _) => true,
                    }
            }))
    }

    /// An enabled instance starts: online, or what a fault says.
    fn start(&self, fmri: &str, service: &mut RootedService) -> Result<(), PlatformError> {
        self.record_change(fmri, true)?;
        match self.fault_for(fmri)? {
            Some(f) => {
                service.state = f.state;
                service.reason = f.reason.or_else(|| {
                    Some(format!(
                        "svc:{fmri} start method failed (injected fault from {SMF_FAULTS_FILE})"
                    ))
                });
            }
            None => {
                service.state = ServiceState::Online;
                service.reason = None;
            }
        }
        Ok(())
    }

    fn state_file(&self) -> PathBuf {
        self.root.join(SMF_STATE_FILE)
    }

    /// Read the SMF state file (empty when absent). Blocking.
    pub fn read_state(&self) -> Result<RootedSmfState, PlatformError> {
        let path = self.state_file();
        // The simulator's SMF repository grows with its services, never
        // near this bound.
        match crate::read_bounded(&path, 64 << 20) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| PlatformError::Invalid {
                path,
                reason: e.to_string(),
            }),
            Err(PlatformError::Read { err, .. }) if err.kind() == io::ErrorKind::NotFound => {
                Ok(RootedSmfState::default())
            }
            Err(e) => Err(e),
        }
    }

    fn write_state(&self, state: &RootedSmfState) -> Result<(), PlatformError> {
        let path = self.state_file();
        let mut text = serde_json::to_vec_pretty(state).unwrap_or_default();
        text.push(b'\n');
        write_atomic(&path, &text).map_err(|err| PlatformError::Write { path, err })
    }

    /// Read, change and (when changed) write the state file, under the lock.
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

    /// Run `work` on a clone of this platform on the blocking pool.
    fn off_runtime<T, F>(&self, work: F) -> PlatformFuture<'static, T>
    where
        F: FnOnce(&Rooted) -> Result<T, PlatformError> + Send + 'static,
        T: Send + 'static,
    {
        let me = self.clone();
        Box::pin(blocking(move || work(&me)))
    }

    fn import(&self, manifest: &Path) -> Result<(), PlatformError> {
        let instances = read_manifest_instances(manifest)?;
        let rel = manifest
            .strip_prefix(&self.root)
            .unwrap_or(manifest)
            .to_string_lossy()
            .into_owned();
        self.update(|state| {
            for inst in instances {
                match state.services.get_mut(&inst.fmri) {
                    Some(s) => {
                        s.manifest = rel.clone();
                        // The new manifest (and code) takes effect: an
                        // enabled instance starts again.
                        if s.state.is_enabled() {
                            self.start(&inst.fmri, s)?;
                        }
                    }
                    None => {
                        let mut s = RootedService {
                            state: ServiceState::Disabled,
                            manifest: rel.clone(),
                            reason: None,
                        };
                        if inst.enabled {
                            self.start(&inst.fmri, &mut s)?;
                        }
                        state.services.insert(inst.fmri, s);
                    }
                }
            }
            Ok(())
        })
    }

    fn delete(&self, fmri: &str) -> Result<(), PlatformError> {
        // `svccfg delete` of a service removes all its instances.
        let service = fmri_service(fmri);
        self.update(|state| {
            self.change_restarter(|all| {
                all.retain(|k, _| k != fmri && fmri_service(k) != service);
            })?;
            state
                .services
                .retain(|k, _| k != fmri && fmri_service(k) != service);
            Ok(())
        })
    }

    /// `svcadm enable|disable`: fails as svcadm does for an unknown FMRI.
    fn set_state(&self, fmri: &str, verb: &str, to: ServiceState) -> Result<(), PlatformError> {
        self.update(|state| match state.services.get_mut(fmri) {
            Some(s) if to == ServiceState::Online => self.start(fmri, s),
            Some(s) => {
                if s.state != to {
                    self.record_change(fmri, false)?;
                }
                s.state = to;
                s.reason = None;
                Ok(())
            }
            None => Err(PlatformError::Command {
                command: format!("svcadm {verb} {fmri}"),
                status: "exit status: 1".to_string(),
                stderr: format!("svcadm: Pattern '{fmri}' doesn't match any instances"),
            }),
        })
    }

    fn state(&self, fmri: &str) -> Result<Option<ServiceState>, PlatformError> {
        Ok(self.health(fmri)?.map(|h| h.state))
    }

    fn health(&self, fmri: &str) -> Result<Option<ServiceHealth>, PlatformError> {
        let _guard = self.smf.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = self.read_state()?.services.remove(fmri) else {
            return Ok(None);
        };
        let changes = self.restarter().get(fmri).copied().unwrap_or_default();
        let mut health = ServiceHealth {
            state: s.state,
            explanation: s.reason,
            next_state: None,
            run: Some(changes.count.to_string()),
        };
        let flap = self
            .faults_file()?
            .flaps
            .into_iter()
            .find(|f| f.fmri == fmri);
        if let (Some(flap), Some(started), ServiceState::Online) =
            (flap, changes.started_ms, &health.state)
        {
            let elapsed = std::time::Duration::from_millis(now_ms().saturating_sub(started));
            let (count, down) = flapped(&flap, elapsed);
            health.run = Some((changes.count + count).to_string());
            if down {
                health.state = flap.state;
                health.explanation = flap.reason.or_else(|| {
                    Some(format!(
                        "svc:{fmri} exited (injected flap from {SMF_FAULTS_FILE})"
                    ))
                });
            }
        }
        Ok(Some(health))
    }
}

/// A flapping service `elapsed` after it started: how many state changes
/// its exits and returns made, and whether it is down now.
fn flapped(flap: &SmfFlap, elapsed: std::time::Duration) -> (u64, bool) {
    let period = flap.period_ms.max(1) as u128;
    let down = (flap.down_ms as u128).min(period - 1);
    let ms = elapsed.as_millis();
    let exits = ms / period;
    // Each exit leaves online; each completed downtime comes back. An
    // exit whose downtime has not ended yet is down now.
    let phase = ms % period;
    let down_now = exits > 0 && phase < down;
    let changes = if down_now { 2 * exits - 1 } else { 2 * exits };
    (changes as u64, down_now)
}

/// A temporary file next to `path`, fsynced, renamed over it, and the
/// directory fsynced so the rename is durable.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".smf-state.{:08x}.tmp", rand::random::<u32>()));
    let written = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Parse a `node.config` (`key='value'` lines) into the SDC config map.
pub fn parse_node_config(text: &str) -> SdcConfig {
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

    fn sysinfo(&self) -> PlatformFuture<'_, Sysinfo> {
        self.off_runtime(|me| read_sysinfo_file(&me.root.join(SYSINFO_FILE)))
    }

    fn sdc_config(&self) -> BoxFuture<'_, Option<SdcConfig>> {
        let path = self.root.join(NODE_CONFIG);
        Box::pin(blocking(move || {
            let text = crate::read_bounded_text(&path, agentsadm_types::bounded::SMALL).ok()?;
            Some(parse_node_config(&text))
        }))
    }

    fn smf_import<'a>(&'a self, manifest: &'a Path) -> PlatformFuture<'a, ()> {
        let manifest = manifest.to_path_buf();
        self.off_runtime(move |me| me.import(&manifest))
    }

    fn smf_delete<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        let fmri = fmri.to_string();
        self.off_runtime(move |me| me.delete(&fmri))
    }

    fn smf_enable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        let fmri = fmri.to_string();
        self.off_runtime(move |me| me.set_state(&fmri, "enable", ServiceState::Online))
    }

    fn smf_disable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        let fmri = fmri.to_string();
        self.off_runtime(move |me| me.set_state(&fmri, "disable", ServiceState::Disabled))
    }

    fn smf_state<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceState>> {
        let fmri = fmri.to_string();
        self.off_runtime(move |me| me.state(&fmri))
    }

    fn smf_health<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceHealth>> {
        let fmri = fmri.to_string();
        self.off_runtime(move |me| me.health(&fmri))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::tests::MANIFEST;

    #[tokio::test]
    async fn rooted_smf_import_keeps_existing_state() {
        let dir = tempfile::tempdir().unwrap();
        let p = Rooted::new(dir.path());
        let m = dir.path().join("m.xml");
        fs::write(&m, MANIFEST).unwrap();
        p.smf_import(&m).await.unwrap();
        let fmri = "svc:/smartdc/agent/vm-agent:default";
        assert_eq!(p.smf_state(fmri).await.unwrap(), Some(ServiceState::Online));
        p.smf_disable(fmri).await.unwrap();
        p.smf_import(&m).await.unwrap();
        assert_eq!(
            p.smf_state(fmri).await.unwrap(),
            Some(ServiceState::Disabled)
        );
        p.smf_delete(fmri).await.unwrap();
        assert_eq!(p.smf_state(fmri).await.unwrap(), None);
        assert!(p.smf_enable(fmri).await.is_err());
    }

    #[test]
    fn flaps_count_every_exit_and_return() {
        let flap = SmfFlap {
            fmri: "svc:/x:default".into(),
            period_ms: 1000,
            down_ms: 200,
            state: ServiceState::Maintenance,
            reason: None,
        };
        let at = |ms| flapped(&flap, std::time::Duration::from_millis(ms));
        assert_eq!(at(0), (0, false));
        assert_eq!(at(999), (0, false));
        assert_eq!(at(1000), (1, true));
        assert_eq!(at(1199), (1, true));
        assert_eq!(at(1200), (2, false));
        assert_eq!(at(2100), (3, true));
        let restarts = SmfFlap {
            down_ms: 0,
            ..flap.clone()
        };
        assert_eq!(
            flapped(&restarts, std::time::Duration::from_millis(2500)),
            (4, false)
        );
    }

    #[tokio::test]
    async fn every_state_change_moves_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let p = Rooted::new(dir.path());
        let m = dir.path().join("m.xml");
        fs::write(&m, MANIFEST).unwrap();
        p.smf_import(&m).await.unwrap();
        let fmri = "svc:/smartdc/agent/vm-agent:default";
        let run = |h: Option<ServiceHealth>| h.unwrap().run.unwrap();
        let first = run(p.smf_health(fmri).await.unwrap());
        assert_eq!(first, run(p.smf_health(fmri).await.unwrap()));
        p.smf_restart(fmri).await.unwrap();
        let after = p.smf_health(fmri).await.unwrap().unwrap();
        assert_eq!(after.state, ServiceState::Online);
        assert_ne!(after.run.unwrap(), first);
    }

    #[test]
    fn parses_node_config() {
        let c =
            parse_node_config("# x\nsapi_domain='sapi.coal.example.com'\ndatacenter_name=coal\n");
        assert_eq!(c["sapi_domain"], "sapi.coal.example.com");
        assert_eq!(c["datacenter_name"], "coal");
    }
}
