//! The seam between the simulator and a mock server's global zone, and its
//! one implementation, [`InstallerGz`]: the real GZ installer
//! ([`crate::gz`]) run in-process against the server's directory.
//!
//! CNAPI tasks (install-agent, uninstall-agents, server setup) and CNAPI
//! execute act on one server's GZ only through [`GzOps`]:
//!
//! - [`GzOps::seeded_agents`] / [`GzOps::prepare`]: what a seeded server
//!   reports, and making its directory exactly what the installer leaves
//!   after installing the seeded components (see "Seeding" below). Prepare
//!   runs once, lazily, before the first operation on a server, so 2000
//!   idle mock servers cost no files.
//! - [`GzOps::install`] / [`GzOps::uninstall`]: cn-agent's `agent_install` /
//!   `agents_uninstall` tasks: `gz::install` of one image from the DC
//!   IMGAPI (download, verify, unpack, hooks, swap with rollback, instance
//!   UUID kept, SAPI adoption) and `gz::uninstall` (SAPI untouched, as
//!   cn-agent leaves it). Reporting to CNAPI is the caller's job, as
//!   cn-agent's `refreshAgents` is separate; the caller updates
//!   `server.agents` from the returned results ([`apply_results`]) rather
//!   than reading the whole GZ again.
//! - [`GzOps::setup`]: the server-setup job's agent step, `gz setup
//!   --source imgapi`.
//! - [`GzOps::report`]: the `server.agents` list the installer reads.
//! - [`GzOps::run`]: an `agentsadm` command line (CNAPI execute of
//!   [`crate::remote::gz_execute_request`]) through
//!   [`crate::gz::command::run_captured_on`], output captured.
//!
//! # Layouts
//!
//! [`GzLayout::Rooted`] (the default) makes every mock server a full
//! rooted GZ (`<server>/sysinfo.json`, `opt/smartdc/agents/...`, SMF state
//! in `var/svc/smf-state.json`); hooks run, SMF manifests are imported,
//! cn-agent replacing itself through execute is handed to a simulated
//! agentsadm-install service ([`GzEnv::cn_agent_restart`] later, it runs
//! `gz run-job`). [`GzLayout::Mockcloud`] is the installer's mockcloud
//! layout (`<state>/servers/<uuid>/agents/<name>/{image_uuid,package.json,
//! instance_uuid}`, no hooks, no SMF): a handful of files per install, for
//! thousands of servers and the rollout benchmark. Either way the server's
//! directory is `<state>/servers/<uuid>` (for mockcloud, `<state>` is the
//! mockcloud root).
//!
//! # Seeding
//!
//! A seeded server must look exactly as if the installer had installed its
//! components. The first server of each role (headnode or compute node,
//! with its set of images) gets a real install: `gz::install` of the
//! image files (as headnode setup does from the USB key, no SAPI, no
//! CNAPI) into a scratch template server. Its files are then kept in
//! memory, and each server of that role is written from them, with the
//! template's root path, server UUID and instance UUIDs replaced by the
//! server's. Writing ~150 small files from memory costs a fraction of an
//! install (no unpacking, hashing, hooks, journal or fsync).
//!
//! # Per-server lock
//!
//! The installer takes a per-server file lock and polls it every 50 ms
//! when it is busy; two installs on one mock server (parallel-safe
//! components sent as separate tasks) would then finish up to 50 ms late.
//! [`InstallerGz`] queues the changing operations of one server on an
//! async mutex first, so the file lock is always free when asked for.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::api::Apis;
use crate::api::cnapi::{AgentEntry, ExecuteResult};
use crate::catalog::Catalog;
use crate::gz::fetch::ImageSource;
use crate::gz::layout::mockcloud::MockcloudGz;
use crate::gz::layout::{Layout, LayoutKind};
use crate::gz::paths::GzPaths;
use crate::gz::session::{GzError, GzSettings};
use crate::gz::setup::SetupSource;
use crate::ids::{ImageUuid, InstanceUuid, ServerUuid};
use crate::image::ImageManifest;
use crate::platform::{
    INSTALL_SERVICE_FMRI, Platform, PlatformFuture, Rooted, SdcConfig, ServiceState, Sysinfo,
};
use crate::remote::{AgentsReport, ComponentAction, ComponentResult, GzResult};

/// How each mock server's GZ is laid out (module docs).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum GzLayout {
    /// A full rooted GZ per server: hooks run, SMF state kept.
    #[default]
    Rooted,
    /// The installer's mockcloud layout: three files per component.
    Mockcloud,
}

impl GzLayout {
    pub fn as_str(&self) -> &'static str {
        match self {
            GzLayout::Rooted => "rooted",
            GzLayout::Mockcloud => "mockcloud",
        }
    }
}

/// One mock server as its GZ sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GzTarget {
    pub server_uuid: ServerUuid,
    pub hostname: String,
    pub headnode: bool,
    pub datacenter: String,
    pub admin_ip: String,
    /// The server's directory (`<state>/servers/<uuid>`).
    pub root: PathBuf,
}

/// Where the server's GZ reaches the datacenter's APIs, and what it needs
/// from the simulator around it.
#[derive(Clone, Debug)]
pub struct GzEnv {
    pub imgapi_url: String,
    pub sapi_url: String,
    pub cnapi_url: String,
    /// Clients for those URLs, shared by every operation (one connection
    /// pool for the whole datacenter).
    pub apis: Apis,
    /// How long cn-agent takes to come back after replacing itself (when
    /// the agentsadm-install service runs a handed-over job).
    pub cn_agent_restart: Duration,
    /// Cancelled when the datacenter shuts down.
    pub shutdown: CancellationToken,
}

impl GzEnv {
    /// The environment a `gz` command line gets (the API URLs a real GZ
    /// would read from its SDC config).
    pub fn command_env(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("IMGAPI_URL".to_string(), self.imgapi_url.clone()),
            ("SAPI_URL".to_string(), self.sapi_url.clone()),
            ("CNAPI_URL".to_string(), self.cnapi_url.clone()),
        ])
    }
}

/// A component a seeded datacenter records as installed on a server, before
/// the server's directory exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeededComponent {
    /// Component (and image) name.
    pub name: String,
    pub image_uuid: ImageUuid,
    pub instance_uuid: InstanceUuid,
}

/// An image as seeding needs it: its manifest and file.
#[derive(Clone, Debug)]
pub struct SeedImage {
    pub manifest: ImageManifest,
    pub file: Bytes,
}

/// Finds seeded images (in the simulator's IMGAPI stores, not over HTTP:
/// seeding is not subject to injected faults).
pub type ImageLookup<'a> = &'a (dyn Fn(ImageUuid) -> Option<SeedImage> + Sync);

/// Why a GZ operation failed. The message plus its source chain becomes the
/// task's error text (`AgentInstall error: ...`).
#[derive(Debug, thiserror::Error)]
pub enum GzOpError {
    /// The installer's run failed: its result document's error (which says
    /// what is installed now and what to do next).
    #[error("{prefix}{step} failed: {message}", prefix = component.as_deref().map(|c| format!("{c}: ")).unwrap_or_default())]
    Installer {
        component: Option<String>,
        step: String,
        message: String,
    },
    #[error("cannot read the GZ of server {server}")]
    Report {
        server: ServerUuid,
        #[source]
        err: GzError,
    },
    #[error("cannot {action} {path} while preparing the GZ of server {server}")]
    Prepare {
        server: ServerUuid,
        action: &'static str,
        path: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error(
        "cannot install the seeded {role} set into a template server under {dir}: {detail} (the simulator's seed images are broken)"
    )]
    Template {
        role: &'static str,
        dir: PathBuf,
        detail: String,
    },
    #[error(
        "seeded image {image} is in neither simulated IMGAPI (was the state directory edited?)"
    )]
    MissingImage { image: ImageUuid },
    #[error("{root} is not <mockcloud root>/servers/<uuid> of server {server}")]
    NotMockcloud { server: ServerUuid, root: PathBuf },
    #[error("no simulated server {server}")]
    UnknownServer { server: ServerUuid },
}

/// `err` and its sources joined with `: `, for task error messages.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    crate::gz::error_chain(err)
}

/// The per-server agent operations the simulator needs (see the module
/// docs). Implementations must be safe to call concurrently for different
/// servers; calls for one server may also overlap (parallel-safe
/// components install concurrently on a real server).
pub trait GzOps: Send + Sync + 'static {
    /// What a server of this role with `seeded` installed reports as
    /// `server.agents` (its directory is not touched).
    fn seeded_agents(
        &self,
        headnode: bool,
        seeded: &[SeededComponent],
        images: ImageLookup<'_>,
    ) -> Result<Vec<AgentEntry>, GzOpError>;

    /// Make `target.root` a GZ with `seeded` installed, exactly as the
    /// installer leaves it. Idempotent.
    fn prepare(
        &self,
        target: &GzTarget,
        seeded: &[SeededComponent],
        images: ImageLookup<'_>,
    ) -> Result<(), GzOpError>;

    /// Install or upgrade one image from the DC IMGAPI, keep or create the
    /// instance UUID, adopt it into SAPI. Returns what changed, as the
    /// installer's result document says.
    fn install(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        image: ImageUuid,
    ) -> BoxFuture<'static, Result<Vec<ComponentResult>, GzOpError>>;

    /// Remove agents by name (cn-agent's: the package names; missing ones
    /// are not an error). SAPI is left alone, as cn-agent leaves it.
    fn uninstall(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        names: Vec<String>,
    ) -> BoxFuture<'static, Result<Vec<ComponentResult>, GzOpError>>;

    /// Server setup's agent step: the default set of the server's role at
    /// each SAPI agent service's image.
    fn setup(&self, env: Arc<GzEnv>, target: GzTarget)
    -> BoxFuture<'static, Result<(), GzOpError>>;

    /// The `server.agents` report read from the GZ.
    fn report(&self, target: GzTarget) -> BoxFuture<'static, Result<AgentsReport, GzOpError>>;

    /// Run `agentsadm <argv...>` against the GZ (the implementation adds
    /// the options that address it) and capture its output. `vars` is the
    /// environment of the command (API URLs, cn-agent's `SMF_FMRI`).
    fn run(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        argv: Vec<String>,
        vars: BTreeMap<String, String>,
    ) -> BoxFuture<'static, ExecuteResult>;
}

/// The real GZ installer behind [`GzOps`] (module docs).
#[derive(Debug)]
pub struct InstallerGz {
    layout: GzLayout,
    /// Where seed templates are installed (removed once read).
    scratch: PathBuf,
    catalog: Catalog,
    hook_timeout: Duration,
    /// Built templates by role and image set; each slot is locked while
    /// its template is built.
    templates: Mutex<HashMap<TemplateKey, TemplateSlot>>,
    built: AtomicU64,
    /// Changing operations queue per server here (module docs).
    queues: Mutex<HashMap<ServerUuid, Arc<tokio::sync::Mutex<()>>>>,
}

/// A template, once built; locked while it is being built.
type TemplateSlot = Arc<Mutex<Option<Arc<Template>>>>;

/// Commands that change a server (and so queue behind each other).
const CHANGING: [&str; 5] = ["install", "remove", "setup", "rollback", "run-job"];

impl InstallerGz {
    /// An installer for servers under `state_dir/servers`, with seed
    /// templates built in `state_dir/templates`.
    pub fn new(layout: GzLayout, state_dir: &Path) -> InstallerGz {
        InstallerGz {
            layout,
            scratch: state_dir.join("templates"),
            catalog: Catalog::builtin(),
            hook_timeout: Duration::from_secs(60),
            templates: Mutex::new(HashMap::new()),
            built: AtomicU64::new(0),
            queues: Mutex::new(HashMap::new()),
        }
    }

    pub fn layout(&self) -> GzLayout {
        self.layout
    }

    fn queue(&self, server: ServerUuid) -> Arc<tokio::sync::Mutex<()>> {
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(server)
            .or_default()
            .clone()
    }

    /// The mockcloud root of a server directory `<root>/servers/<uuid>`.
    fn mockcloud_root(target: &GzTarget) -> Result<PathBuf, GzOpError> {
        let bad = || GzOpError::NotMockcloud {
            server: target.server_uuid,
            root: target.root.clone(),
        };
        let root = target
            .root
            .parent()
            .and_then(Path::parent)
            .ok_or_else(bad)?;
        if MockcloudGz::new(root, target.server_uuid).dir() != target.root {
            return Err(bad());
        }
        Ok(root.to_path_buf())
    }

    /// The options that point `agentsadm gz` at the server's GZ.
    fn address(&self, target: &GzTarget) -> Result<Vec<String>, GzOpError> {
        Ok(match self.layout {
            GzLayout::Rooted => vec!["--root".into(), target.root.display().to_string()],
            GzLayout::Mockcloud => vec![
                "--layout".into(),
                "mockcloud".into(),
                "--root".into(),
                Self::mockcloud_root(target)?.display().to_string(),
                "--server-uuid".into(),
                target.server_uuid.to_string(),
            ],
        })
    }

    /// Installer settings for one operation on `target` (reporting to
    /// CNAPI is left to the caller).
    fn settings(&self, env: Option<&GzEnv>, target: &GzTarget) -> Result<GzSettings, GzOpError> {
        let mut s = match self.layout {
            GzLayout::Rooted => GzSettings::new(&target.root),
            GzLayout::Mockcloud => {
                let mut s = GzSettings::new(Self::mockcloud_root(target)?);
                s.layout = LayoutKind::Mockcloud;
                s
            }
        };
        s.server_uuid = Some(target.server_uuid);
        s.no_cnapi = true;
        s.hook_timeout = self.hook_timeout;
        s.catalog = self.catalog.clone();
        // Loopback: retry a broken download quickly.
        s.fetch.backoff = Duration::from_millis(20);
        if let Some(env) = env {
            s.imgapi_url = Some(env.imgapi_url.clone());
            s.sapi_url = Some(env.sapi_url.clone());
            s.cnapi_url = Some(env.cnapi_url.clone());
            s.clients = Some(env.apis.clone());
        }
        Ok(s)
    }

    /// The template for a role and image set, built on first use.
    fn template(
        &self,
        headnode: bool,
        seeded: &[SeededComponent],
        images: ImageLookup<'_>,
    ) -> Result<Arc<Template>, GzOpError> {
        let key = TemplateKey::new(headnode, seeded);
        let slot = self
            .templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = slot.as_ref() {
            return Ok(t.clone());
        }
        let n = self.built.fetch_add(1, Ordering::Relaxed);
        let dir = self.scratch.join(format!("{}-{n}", self.layout.as_str()));
        let built = Template::build(self, &key, &dir, images);
        let _ = crate::gz::fsutil::remove_any(&dir);
        // Nothing is kept on disk (an empty directory only if in use).
        let _ = std::fs::remove_dir(&self.scratch);
        let t = Arc::new(built?);
        *slot = Some(t.clone());
        Ok(t)
    }

    /// A prepared server's directory with nothing installed.
    fn prepare_empty(target: &GzTarget) -> Result<(), GzOpError> {
        let root = &target.root;
        std::fs::create_dir_all(root).map_err(prepare_err(target, "create", root))?;
        write_sysinfo(target)
    }
}

fn prepare_err<'a>(
    target: &'a GzTarget,
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> GzOpError + 'a {
    move |err| GzOpError::Prepare {
        server: target.server_uuid,
        action,
        path: path.to_path_buf(),
        err,
    }
}

/// The sysinfo file mockcloud's create-server writes (4-space JSON), with
/// what the installer reads (`UUID`, `Hostname`, `Boot Parameters.headnode`).
fn sysinfo_json(target: &GzTarget) -> Vec<u8> {
    let v = json!({
        "UUID": target.server_uuid,
        "Hostname": target.hostname,
        "System Type": "Virtual",
        "SDC Version": "7.0",
        "Setup": "true",
        "Datacenter Name": target.datacenter,
        "Boot Parameters": {"headnode": if target.headnode { "true" } else { "false" }},
        "Admin IP": target.admin_ip,
    });
    let mut text = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut text, fmt);
    // Serializing a JSON value into memory cannot fail.
    let _ = Serialize::serialize(&v, &mut ser);
    text.push(b'\n');
    text
}

/// Write `sysinfo.json`, last: its presence marks a prepared server.
fn write_sysinfo(target: &GzTarget) -> Result<(), GzOpError> {
    let path = target
        .root
        .join(crate::gz::paths::SYSINFO_FILE)
        .to_path_buf();
    let tmp = target.root.join(".sysinfo.json.tmp");
    std::fs::write(&tmp, sysinfo_json(target)).map_err(prepare_err(target, "write", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(prepare_err(target, "rename into", &path))
}

/// The GzResult's components, or its error as an operation error.
fn outcome(result: GzResult) -> Result<Vec<ComponentResult>, GzOpError> {
    match result.error {
        None => Ok(result.components),
        Some(f) => Err(GzOpError::Installer {
            component: f.component,
            step: f.step,
            message: f.message,
        }),
    }
}

/// `server.agents` after an installer run that did `results`, from the
/// list before it: the run's result document carries, for each component
/// it touched, exactly what the installer's report reads back (entry name
/// the package's, version, image, instance UUID), so the changed entries
/// are replaced and the rest kept, without reading the whole GZ again
/// (that read was most of a mock install's CPU).
pub fn apply_results(catalog: &Catalog, agents: &mut Vec<AgentEntry>, results: &[ComponentResult]) {
    for r in results {
        let name = catalog
            .get(&r.name)
            .map(|c| c.package_name().to_string())
            .unwrap_or_else(|| r.name.clone());
        agents.retain(|a| a.name != name);
        match r.action {
            ComponentAction::Removed | ComponentAction::Absent => {}
            ComponentAction::Installed
            | ComponentAction::Upgraded
            | ComponentAction::Unchanged
            | ComponentAction::RolledBack => agents.push(AgentEntry {
                name,
                version: r.version.clone().unwrap_or_default(),
                image_uuid: r.image_uuid,
                uuid: r.instance_uuid,
            }),
        }
    }
    agents.sort();
}

impl GzOps for InstallerGz {
    fn seeded_agents(
        &self,
        headnode: bool,
        seeded: &[SeededComponent],
        images: ImageLookup<'_>,
    ) -> Result<Vec<AgentEntry>, GzOpError> {
        if seeded.is_empty() {
            return Ok(Vec::new());
        }
        let t = self.template(headnode, seeded, images)?;
        let instances = t.instance_map(seeded);
        Ok(t.report
            .agents
            .iter()
            .map(|a| {
                let mut a = a.clone();
                if let Some(u) = a.uuid.and_then(|u| instances.get(&u.to_string())) {
                    a.uuid = u.parse().ok();
                }
                a
            })
            .collect())
    }

    fn prepare(
        &self,
        target: &GzTarget,
        seeded: &[SeededComponent],
        images: ImageLookup<'_>,
    ) -> Result<(), GzOpError> {
        let sysinfo = target.root.join(crate::gz::paths::SYSINFO_FILE);
        if sysinfo.exists() {
            return Ok(());
        }
        // No sysinfo yet: anything here is from an interrupted prepare.
        crate::gz::fsutil::remove_any(&target.root).map_err(prepare_err(
            target,
            "clear",
            &target.root,
        ))?;
        if seeded.is_empty() {
            return Self::prepare_empty(target);
        }
        let t = self.template(target.headnode, seeded, images)?;
        t.write(target, seeded)
    }

    fn install(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        image: ImageUuid,
    ) -> BoxFuture<'static, Result<Vec<ComponentResult>, GzOpError>> {
        let settings = self.settings(Some(&env), &target);
        let queue = self.queue(target.server_uuid);
        Box::pin(async move {
            let settings = settings?;
            let _turn = queue.lock().await;
            outcome(crate::gz::install(settings, &[ImageSource::Imgapi(image)]).await)
        })
    }

    fn uninstall(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        names: Vec<String>,
    ) -> BoxFuture<'static, Result<Vec<ComponentResult>, GzOpError>> {
        // cn-agent names agents by package; the installer by component.
        // Names of nothing agentsadm manages have nothing to remove.
        let components: Vec<String> = names
            .iter()
            .filter_map(|n| {
                self.catalog
                    .iter()
                    .find(|c| c.name == *n || c.package_name() == n)
                    .map(|c| c.name.clone())
            })
            .collect();
        // cn-agent's agents_uninstall leaves SAPI alone.
        let settings = self.settings(Some(&env), &target).map(|mut s| {
            s.no_sapi = true;
            s
        });
        let queue = self.queue(target.server_uuid);
        Box::pin(async move {
            let settings = settings?;
            if components.is_empty() {
                return Ok(Vec::new());
            }
            let _turn = queue.lock().await;
            outcome(crate::gz::uninstall(settings, &components).await)
        })
    }

    fn setup(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
    ) -> BoxFuture<'static, Result<(), GzOpError>> {
        let settings = self.settings(Some(&env), &target);
        let queue = self.queue(target.server_uuid);
        Box::pin(async move {
            let settings = settings?;
            let _turn = queue.lock().await;
            outcome(crate::gz::setup(settings, &SetupSource::Imgapi).await).map(|_| ())
        })
    }

    fn report(&self, target: GzTarget) -> BoxFuture<'static, Result<AgentsReport, GzOpError>> {
        let settings = self.settings(None, &target);
        Box::pin(async move {
            crate::gz::report(settings?)
                .await
                .map_err(|err| GzOpError::Report {
                    server: target.server_uuid,
                    err,
                })
        })
    }

    fn run(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        mut argv: Vec<String>,
        vars: BTreeMap<String, String>,
    ) -> BoxFuture<'static, ExecuteResult> {
        let address = match self.address(&target) {
            Ok(a) => a,
            Err(e) => {
                let result = ExecuteResult {
                    exit_status: 1,
                    stdout: String::new(),
                    stderr: format!("agentsadm: error: {}\n", error_chain(&e)),
                };
                return Box::pin(async move { result });
            }
        };
        argv.extend(address);
        let changing = argv.first().map(String::as_str) == Some("gz")
            && argv.get(1).is_some_and(|c| CHANGING.contains(&c.as_str()));
        let queue = self.queue(target.server_uuid);
        // A rooted server hands cn-agent's own replacement to the simulated
        // agentsadm-install service; mockcloud has no SMF (no handoff).
        let platform: Option<Arc<dyn Platform>> = match self.layout {
            GzLayout::Rooted => Some(Arc::new(SimPlatform {
                rooted: Rooted::new(&target.root),
                jobs: JobService {
                    queue: queue.clone(),
                    vars: vars.clone(),
                    delay: env.cn_agent_restart,
                    shutdown: env.shutdown.clone(),
                },
            })),
            GzLayout::Mockcloud => None,
        };
        Box::pin(async move {
            let _turn = match changing {
                true => Some(queue.lock_owned().await),
                false => None,
            };
            crate::gz::command::run_captured_on(argv, vars, platform).await
        })
    }
}

// ---------------------------------------------------------------------------
// The simulated agentsadm-install service

/// A rooted GZ whose agentsadm-install SMF service runs handed-over jobs:
/// after cn-agent's restart delay, once the handing run has finished,
/// `agentsadm gz run-job --job <file>` runs (in-process) and its install
/// reports to CNAPI like any other.
#[derive(Debug)]
struct SimPlatform {
    rooted: Rooted,
    jobs: JobService,
}

#[derive(Debug, Clone)]
struct JobService {
    queue: Arc<tokio::sync::Mutex<()>>,
    vars: BTreeMap<String, String>,
    delay: Duration,
    shutdown: CancellationToken,
}

impl Platform for SimPlatform {
    fn name(&self) -> &'static str {
        "simulated rooted"
    }
    fn sysinfo(&self) -> PlatformFuture<'_, Sysinfo> {
        self.rooted.sysinfo()
    }
    fn sdc_config(&self) -> BoxFuture<'_, Option<SdcConfig>> {
        self.rooted.sdc_config()
    }
    fn smf_import<'a>(&'a self, manifest: &'a Path) -> PlatformFuture<'a, ()> {
        self.rooted.smf_import(manifest)
    }
    fn smf_delete<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        self.rooted.smf_delete(fmri)
    }
    fn smf_enable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        self.rooted.smf_enable(fmri)
    }
    fn smf_disable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        self.rooted.smf_disable(fmri)
    }
    fn smf_state<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceState>> {
        self.rooted.smf_state(fmri)
    }
    fn launch_transient_job<'a>(&'a self, job: &'a Path) -> PlatformFuture<'a, ()> {
        let jobs = self.jobs.clone();
        let argv = vec![
            "gz".to_string(),
            "run-job".to_string(),
            "--job".to_string(),
            job.display().to_string(),
        ];
        Box::pin(async move {
            // Platform calls run inside the simulator's runtime.
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep(jobs.delay) => {}
                    _ = jobs.shutdown.cancelled() => return,
                }
                // After the run that handed the job over (it holds the turn).
                let _turn = jobs.queue.lock().await;
                let mut vars = jobs.vars;
                vars.insert("SMF_FMRI".into(), INSTALL_SERVICE_FMRI.into());
                let r = crate::gz::command::run_captured_on(argv, vars, None).await;
                if r.exit_status != 0 {
                    tracing::warn!(stderr = %r.stderr.trim(), "sim: the agentsadm-install job failed");
                }
            });
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------
// Seed templates

/// A role and its seeded image set (name order).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TemplateKey {
    headnode: bool,
    images: Vec<(String, ImageUuid)>,
}

impl TemplateKey {
    fn new(headnode: bool, seeded: &[SeededComponent]) -> TemplateKey {
        let mut images: Vec<(String, ImageUuid)> = seeded
            .iter()
            .map(|s| (s.name.clone(), s.image_uuid))
            .collect();
        images.sort();
        TemplateKey { headnode, images }
    }

    fn role(&self) -> &'static str {
        if self.headnode {
            "headnode"
        } else {
            "compute node"
        }
    }
}

/// One thing in a template server's directory.
#[derive(Debug)]
enum Node {
    Dir {
        mode: u32,
    },
    File {
        data: Bytes,
        mode: u32,
        /// Holds a template token (path, server or instance UUID).
        patch: bool,
    },
    Link {
        target: String,
    },
}

/// A server the installer set up, held in memory (module docs).
#[derive(Debug)]
struct Template {
    /// The template server's directory, as it appears in files.
    dir: String,
    server: ServerUuid,
    /// Component name to the instance UUID the install created.
    instances: BTreeMap<String, InstanceUuid>,
    /// Server-relative paths, parents before children.
    nodes: Vec<(PathBuf, Node)>,
    report: AgentsReport,
}

impl Template {
    /// Install the key's images for real into `scratch` and read the
    /// result into memory.
    fn build(
        gz: &InstallerGz,
        key: &TemplateKey,
        scratch: &Path,
        images: ImageLookup<'_>,
    ) -> Result<Template, GzOpError> {
        let fail = |detail: String| GzOpError::Template {
            role: key.role(),
            dir: scratch.to_path_buf(),
            detail,
        };
        let io_fail = |what: &str, path: &Path, e: io::Error| {
            fail(format!("cannot {what} {}: {e}", path.display()))
        };
        let server = ServerUuid::new_v4();
        let target = GzTarget {
            server_uuid: server,
            hostname: "seed-template".into(),
            headnode: key.headnode,
            datacenter: "template".into(),
            admin_ip: "127.0.0.1".into(),
            root: scratch.join("servers").join(server.to_string()),
        };
        let _ = crate::gz::fsutil::remove_any(scratch);
        InstallerGz::prepare_empty(&target)?;
        // The images as files, the way headnode setup finds them on the
        // USB key (outside the server's directory).
        let files = scratch.join("images");
        std::fs::create_dir_all(&files).map_err(|e| io_fail("create", &files, e))?;
        let mut sources = Vec::new();
        for (_, uuid) in &key.images {
            let img = images(*uuid).ok_or(GzOpError::MissingImage { image: *uuid })?;
            let file = files.join(format!("{uuid}.file"));
            let manifest = files.join(format!("{uuid}.manifest"));
            std::fs::write(&file, &img.file).map_err(|e| io_fail("write", &file, e))?;
            let text = serde_json::to_vec(&img.manifest).unwrap_or_default();
            std::fs::write(&manifest, text).map_err(|e| io_fail("write", &manifest, e))?;
            sources.push(ImageSource::File { file, manifest });
        }
        let mut settings = gz.settings(None, &target)?;
        settings.no_sapi = true;
        settings.headnode = Some(key.headnode);
        // The installer is async; seeding is not. A thread of its own with
        // its own runtime keeps this usable from inside any runtime.
        let run = std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let installed = rt.block_on(crate::gz::install(settings.clone(), &sources));
                let report = rt.block_on(crate::gz::report(settings));
                Ok::<_, io::Error>((installed, report))
            })
            .join()
        });
        let (installed, report) = match run {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(fail(format!("cannot start a runtime: {e}"))),
            Err(_) => return Err(fail("the install thread panicked".into())),
        };
        if let Some(e) = &installed.error {
            return Err(fail(format!(
                "{}{} failed: {}",
                e.component
                    .as_deref()
                    .map(|c| format!("{c}: "))
                    .unwrap_or_default(),
                e.step,
                e.message
            )));
        }
        let report = report.map_err(|e| fail(error_chain(&e)))?;
        if !report.errors.is_empty() {
            return Err(fail(format!("its report has errors: {:?}", report.errors)));
        }
        let instances: BTreeMap<String, InstanceUuid> = installed
            .components
            .iter()
            .filter_map(|c| c.instance_uuid.map(|i| (c.name.clone(), i)))
            .collect();
        let dir = target.root.display().to_string();
        let mut tokens = vec![dir.clone(), server.to_string()];
        tokens.extend(instances.values().map(|i| i.to_string()));
        // Per-run files: the lock (its holder) and the sysinfo (per server).
        let skip: Vec<PathBuf> = vec![
            PathBuf::from(crate::gz::paths::SYSINFO_FILE),
            match gz.layout {
                GzLayout::Rooted => GzPaths::new("").lock_file(),
                GzLayout::Mockcloud => MockcloudGz::new(Path::new(""), server)
                    .paths()
                    .lock_file()
                    .strip_prefix(format!("servers/{server}"))
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
            },
        ];
        let mut nodes = Vec::new();
        snapshot(&target.root, Path::new(""), &skip, &tokens, &mut nodes)
            .map_err(|e| io_fail("read", &target.root, e))?;
        Ok(Template {
            dir,
            server,
            instances,
            nodes,
            report,
        })
    }

    /// Template instance UUID to the server's, as strings.
    fn instance_map(&self, seeded: &[SeededComponent]) -> HashMap<String, String> {
        self.instances
            .iter()
            .filter_map(|(name, t)| {
                seeded
                    .iter()
                    .find(|s| s.name == *name)
                    .map(|s| (t.to_string(), s.instance_uuid.to_string()))
            })
            .collect()
    }

    /// Write the template as `target`'s GZ.
    fn write(&self, target: &GzTarget, seeded: &[SeededComponent]) -> Result<(), GzOpError> {
        let mut tokens: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (
                self.dir.as_bytes().to_vec(),
                target.root.display().to_string().into_bytes(),
            ),
            (
                self.server.to_string().into_bytes(),
                target.server_uuid.to_string().into_bytes(),
            ),
        ];
        tokens.extend(
            self.instance_map(seeded)
                .into_iter()
                .map(|(a, b)| (a.into_bytes(), b.into_bytes())),
        );
        let root = &target.root;
        std::fs::create_dir_all(root).map_err(prepare_err(target, "create", root))?;
        for (rel, node) in &self.nodes {
            let path = root.join(rel);
            match node {
                Node::Dir { mode } => std::fs::DirBuilder::new()
                    .mode(*mode)
                    .create(&path)
                    .map_err(prepare_err(target, "create", &path))?,
                Node::File { data, mode, patch } => {
                    let patched;
                    let data: &[u8] = if *patch {
                        patched = replace_tokens(data, &tokens);
                        &patched
                    } else {
                        data
                    };
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(*mode)
                        .open(&path)
                        .map_err(prepare_err(target, "create", &path))?;
                    io::Write::write_all(&mut f, data)
                        .map_err(prepare_err(target, "write", &path))?;
                }
                Node::Link { target: to } => {
                    let to = replace_tokens(to.as_bytes(), &tokens);
                    let to = String::from_utf8_lossy(&to).into_owned();
                    std::os::unix::fs::symlink(&to, &path)
                        .map_err(prepare_err(target, "link", &path))?;
                }
            }
        }
        write_sysinfo(target)
    }
}

/// Read `dir` (relative `rel` under the template root) into `out`, parents
/// first, in name order.
fn snapshot(
    root: &Path,
    rel: &Path,
    skip: &[PathBuf],
    tokens: &[String],
    out: &mut Vec<(PathBuf, Node)>,
) -> io::Result<()> {
    let dir = root.join(rel);
    let mut names: Vec<_> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        let rel = rel.join(&name);
        if skip.contains(&rel) {
            continue;
        }
        let path = root.join(&rel);
        let md = std::fs::symlink_metadata(&path)?;
        let mode = md.permissions().mode() & 0o7777;
        if md.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?.display().to_string();
            out.push((rel, Node::Link { target }));
        } else if md.is_dir() {
            out.push((rel.clone(), Node::Dir { mode }));
            snapshot(root, &rel, skip, tokens, out)?;
        } else {
            let data = Bytes::from(std::fs::read(&path)?);
            let patch = tokens.iter().any(|t| contains(&data, t.as_bytes()));
            out.push((rel, Node::File { data, mode, patch }));
        }
    }
    Ok(())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// `data` with every occurrence of each `from` replaced by its `to`.
fn replace_tokens(data: &[u8], tokens: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut cur = data.to_vec();
    for (from, to) in tokens {
        if from.is_empty() || !contains(&cur, from) {
            continue;
        }
        let mut next = Vec::with_capacity(cur.len());
        let mut i = 0;
        while i < cur.len() {
            if cur[i..].starts_with(from) {
                next.extend_from_slice(to);
                i += from.len();
            } else {
                next.push(cur[i]);
                i += 1;
            }
        }
        cur = next;
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_replaced_everywhere() {
        let t = vec![
            (b"/t/root".to_vec(), b"/servers/abc".to_vec()),
            (b"1111".to_vec(), b"2222".to_vec()),
        ];
        assert_eq!(
            replace_tokens(b"x=/t/root/opt 1111 /t/root\n", &t),
            b"x=/servers/abc/opt 2222 /servers/abc\n"
        );
        assert_eq!(replace_tokens(b"nothing", &t), b"nothing");
        assert!(contains(b"abc", b"bc"));
        assert!(!contains(b"abc", b""));
    }

    #[test]
    fn results_replace_the_entries_they_touched() {
        let cat = Catalog::builtin();
        let entry = |name: &str, img: u128| AgentEntry {
            name: name.into(),
            version: "1.0.0".into(),
            image_uuid: Some(ImageUuid::from_u128(img)),
            uuid: Some(InstanceUuid::from_u128(img + 100)),
        };
        let mut agents = vec![
            entry("marlin", 1),
            entry("vm-agent", 2),
            entry("net-agent", 3),
        ];
        let result = |name: &str, action, img: Option<u128>| ComponentResult {
            name: name.into(),
            action,
            from_image: None,
            image_uuid: img.map(ImageUuid::from_u128),
            version: img.map(|_| "2.0.0".to_string()),
            instance_uuid: img.map(|i| InstanceUuid::from_u128(i + 100)),
            elapsed_ms: 1,
        };
        apply_results(
            &cat,
            &mut agents,
            &[
                result("marlin-agent", ComponentAction::Upgraded, Some(7)),
                result("net-agent", ComponentAction::Removed, None),
                result("cmon-agent", ComponentAction::Installed, Some(8)),
            ],
        );
        let mut want = vec![
            entry("cmon-agent", 8),
            entry("marlin", 7),
            entry("vm-agent", 2),
        ];
        want[0].version = "2.0.0".into();
        want[1].version = "2.0.0".into();
        want.sort();
        assert_eq!(agents, want);
    }

    #[test]
    fn mockcloud_root_is_two_levels_up() {
        let uuid = ServerUuid::from_u128(5);
        let mut target = GzTarget {
            server_uuid: uuid,
            hostname: "cn0001".into(),
            headnode: false,
            datacenter: "coal".into(),
            admin_ip: "10.99.99.10".into(),
            root: PathBuf::from(format!("/state/servers/{uuid}")),
        };
        assert_eq!(
            InstallerGz::mockcloud_root(&target).unwrap(),
            PathBuf::from("/state")
        );
        target.root = PathBuf::from("/state/elsewhere");
        assert!(InstallerGz::mockcloud_root(&target).is_err());
    }
}
