//! The seam between the simulator and a mock server's global zone, and its
//! one implementation, [`InstallerGz`]: the real GZ installer
//! ([`agentsadm_gz`]) run in-process against the server's directory.
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
//! - [`GzOps::agentsadm`]: the agentsadm on the server, if any, and its
//!   version (what the strict execute checks command lines against).
//! - [`GzOps::run`]: an `agentsadm` command line (CNAPI execute of
//!   [`agentsadm_api::remote::gz_execute_request`]) through
//!   [`agentsadm_cli::gz::command::run_captured_on`], output captured.
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
//!
//! Files: this one (the seam: [`GzOps`] and its types), `installer`
//! ([`InstallerGz`]), `template` (seeding), `jobs` (the simulated
//! agentsadm-install service).

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use agentsadm_api::Apis;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::cnapi::ExecuteResult;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::ComponentResult;
use agentsadm_gz::session::GzError;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::image::ImageManifest;

/// How each mock server's GZ is laid out (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The datacenter's faults (unhealthy builds reach the servers' SMF).
    pub faults: Arc<crate::faults::Faults>,
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
        step: agentsadm_api::remote::FailureStep,
        message: String,
    },
    #[error("cannot read the GZ of server {server}")]
    Report {
        server: ServerUuid,
        #[source]
        err: GzError,
    },
    /// cn-agent's refresh read a `node_modules` entry it could not use:
    /// the real one then posts nothing at all ("Cannot get agents image
    /// versions").
    #[error("cn-agent cannot get the agents' image versions on server {server}: {path}")]
    Refresh {
        server: ServerUuid,
        path: PathBuf,
        #[source]
        err: io::Error,
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

    /// What cn-agent's `refreshAgents` would post as `server.agents`
    /// (docs/triton/agent-install.md §3.6): on a Triton GZ only what sits
    /// in `node_modules`, and nothing at all when one entry there has no
    /// readable `image_uuid`; on a mockcloud server the dummy backend's
    /// `agents/*`. Not agentsadm's own report, which knows more.
    fn cn_agent_view(
        &self,
        target: GzTarget,
    ) -> BoxFuture<'static, Result<Vec<AgentEntry>, GzOpError>>;

    /// Ends when the changing operations already running or queued on
    /// this server have ended. A caller that gave up on one (a timeout
    /// says "the work may still be running") does not stop it, as on a
    /// real server; tests wait here before judging what it left.
    fn settle(&self, target: &GzTarget) -> BoxFuture<'static, ()>;

    /// The agentsadm the server has, which is what CNAPI execute would run
    /// there: `None` when it has none, else its version (empty when it
    /// records none, as a copy CN setup fetched alone).
    fn agentsadm(&self, target: &GzTarget) -> Option<String>;

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

mod cn_agent_view;
pub use cn_agent_view::read as cn_agent_refresh;
mod installer;
mod jobs;
mod template;

pub use installer::{InstallerGz, apply_results};
