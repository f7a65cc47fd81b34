//! The simulated datacenter: IMGAPI (the DC's and an updates server), SAPI
//! and CNAPI on loopback, with N mock servers whose global zones are
//! directories, so every agentsadm flow runs end to end on one Linux
//! machine (design.md "The simulated datacenter").
//!
//! In-process use (tests, the demo, benchmarks):
//!
//! ```no_run
//! # async fn f() -> Result<(), agentsadm_sim::SimError> {
//! use std::time::Duration;
//! use agentsadm_sim::{BuildOptions, LatencySpec, PublishTarget, SimConfig, SimDc};
//! let dc = SimDc::start(
//!     SimConfig::default()
//!         .servers(10)                          // headnode + cn0001..cn0010
//!         .not_setup(["cn0010"])
//!         .with_vms("cn0002", 3)
//!         .install_latency(LatencySpec::fixed(50)),
//! )
//! .await?;
//! let apis = dc.apis();                         // IMGAPI, SAPI, CNAPI clients
//! let urls = dc.urls();                         // imgapi, sapi, cnapi, updates
//! let cn = dc.server("cn0001").unwrap();        // uuid, hostname, root dir
//! let default = dc.default_image("vm-agent");   // SAPI service params.image_uuid
//! let newer = dc.publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc);
//! dc.faults().fail_installs_on(cn.uuid);        // faults, changeable any time
//! let agents = dc.server_agents(cn.uuid);       // CNAPI's server.agents
//! dc.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! What a started datacenter holds (unless [`SimConfig::empty`]): an image
//! of every catalog component at 1.0.0 in the DC IMGAPI and on the updates
//! server (channels dev/staging/release), the SAPI `sdc` application
//! (`metadata.update_channel`) with one `type=agent` service per component
//! whose `params.image_uuid` is that image, and every server (except those
//! listed not set up) with its default set installed, adopted (one SAPI
//! instance each, `params.server_uuid` + `params.image_uuid`, none for
//! vm-agent's and net-agent's as in real datacenters) and reported in
//! `server.agents`. [`SeedSpec`] adds newer versions; [`SimDc::seed_report`]
//! returns what was created.
//!
//! Servers act like Triton's: install-agent answers a task id at once and
//! the task finishes after the injected latency (cn-agent's own upgrade
//! completes early and shows in `server.agents` a little later);
//! uninstall-agents, setup and factory-reset jobs run in the background;
//! CNAPI execute runs `agentsadm` command lines built by
//! [`agentsadm_api::remote::gz_execute_request`] against the server's directory
//! and nothing else, through Ur by default as real CNAPI does
//! ([`ExecuteTransport`]), with exactly the request's environment.
//!
//! Where real Triton is untidy or strict, so is the simulator: seeded
//! vm-agent and net-agent instances have no `params`, some image files
//! come without `Content-MD5` ([`SeedSpec`]); SAPI deletes an instance
//! whose re-create fails and enforces `metadata_schema`; IMGAPI rewrites
//! import owners and validates manifests. [`Strictness`] says where it can
//! be told otherwise. All GZ work goes through [`GzOps`], whose one
//! implementation runs the real GZ installer ([`agentsadm_gz`]) in-process:
//! each server is a full rooted GZ ([`GzLayout::Rooted`], the default) or,
//! for thousands of servers, the installer's mockcloud layout
//! ([`SimConfig::gz_layout`], `sim serve --gz-layout mockcloud`), whose
//! servers are mockcloud CNs (sysinfo `System Type` `Virtual`) without
//! CNAPI execute, as real ones, unless [`Strictness`] says otherwise.
//!
//! Modules: [`config`] (shape, scenario JSON), [`faults`], [`gz`] (the seam
//! to the GZ installer, layouts, seeding), `imgapi`, `sapi`,
//! `cnapi` (the HTTP services), `fleet` (mock servers), [`seed`] (the fast
//! path to a populated datacenter), [`publish`], `persist` (`--state DIR`).
//!
//! Each API listens on its own loopback port, as each has its own address
//! in a real datacenter: IMGAPI, SAPI, CNAPI and the updates server on P,
//! P+1, P+2, P+3 with `--port P`, ephemeral ports otherwise. Without a
//! state directory, server directories live under `/dev/shm` (see
//! [`default_temp_base`]) and are removed on shutdown or drop.

// Handlers return a ready-made error `Response` early, and the errors of
// starting a simulator or running a GZ operation happen once per call:
// boxing them would only add noise.
#![expect(
    clippy::result_large_err,
    reason = "error responses and errors are returned once per request"
)]

mod cnapi;
pub mod config;
mod core;
pub mod fake;
pub mod faults;
mod fleet;
pub mod gz;
mod http;
pub use http::CallCount;
pub mod imagebuild;
mod imgapi;
mod listen;
mod params;
mod persist;
pub mod publish;
pub mod recording;
mod sapi;
pub mod seed;
pub mod standin;
pub mod testkit;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use self::cnapi::{ExecuteSeen, LIST_MAX_LIMIT, ServerRecord, ServerStatus};
pub use self::config::{ExecuteTransport, SapiTiming, SeedSpec, SimConfig, Strictness};
pub use self::faults::{
    BurstSpec, CommandFault, Distribution, FaultConfig, Faults, LatencySpec, OutageKind, SimApi,
};
pub use self::gz::{
    GzEnv, GzLayout, GzOpError, GzOps, GzTarget, ImageLookup, InstallerGz, SeedImage,
    SeededComponent,
};
pub use self::imgapi::{DEFAULT_CHANNEL, STANDARD_CHANNELS};
pub use self::publish::{BuildOptions, PublishTarget, image_spec, publish_via_client};
pub use self::seed::SeedReport;

use self::cnapi::CnapiState;
use self::core::DcCore;
use self::fleet::MockServer;
use self::http::{ApiInfo, Conn, SimListener};
use self::imgapi::{ImgapiMode, ImgapiService, ImgapiStore, PublishClock};
use self::sapi::{SapiService, SapiStore};
use crate::imagebuild::BuiltImage;
use agentsadm_api::ApiConfig;
use agentsadm_api::ApiError;
use agentsadm_api::Apis;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::imgapi::ImgapiClient;
use agentsadm_api::remote::AgentsReport;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::image::ImageManifest;

/// Why the simulator could not start or do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(
        "cannot listen on {addr} for the simulated {api} (is the port in use? pick another with --port)"
    )]
    Bind {
        api: &'static str,
        addr: String,
        #[source]
        err: std::io::Error,
    },
    #[error(
        "--port {port}: the simulator needs four ports from {port} on (IMGAPI, SAPI, CNAPI, updates), so the base must be at most 65532"
    )]
    PortRange { port: u16 },
    #[error("cannot create the simulator state directory {path}")]
    StateDir {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("cannot read simulator state {path}")]
    StateRead {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("simulator state {path} is not valid JSON (remove the state directory to start fresh)")]
    StateParse {
        path: PathBuf,
        #[source]
        err: serde_json::Error,
    },
    #[error(
        "simulator state {path} has format {found}, this agentsadm writes another (remove the state directory to start fresh)"
    )]
    StateVersion { path: PathBuf, found: u32 },
    /// An image file of the state directory is not the one recorded.
    #[error(
        "simulator state {path} is damaged: sha1 {sha1} does not match the recorded {recorded} (remove the state directory to start fresh)"
    )]
    StateCorrupt {
        path: PathBuf,
        sha1: String,
        recorded: String,
    },
    #[error("cannot encode the simulator state")]
    StateEncode {
        #[source]
        err: serde_json::Error,
    },
    #[error("cannot write simulator state {path}")]
    StateWrite {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("cannot read scenario file {path}")]
    ScenarioRead {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("scenario file {path} is not a valid simulator scenario")]
    ScenarioParse {
        path: PathBuf,
        #[source]
        err: serde_json::Error,
    },
    #[error(
        "no simulated server {selector:?}: use a hostname (headnode, cn0001, ...) or a server UUID"
    )]
    UnknownServer { selector: String },
    #[error("fault configuration names unknown API {api:?}: use imgapi, updates, sapi or cnapi")]
    UnknownApi { api: String },
    #[error("the simulated datacenter is already populated (SAPI has an sdc application)")]
    AlreadySeeded,
    #[error("cannot seed: server {server} is already in use; seed before running tasks on servers")]
    SeedTooLate { server: String },
    #[error("cannot seed the simulated datacenter")]
    Seed {
        #[source]
        err: GzOpError,
    },
    #[error("cannot create API clients for the simulator")]
    Client {
        #[source]
        err: ApiError,
    },
}

/// The base URLs of a running simulator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimUrls {
    pub imgapi: String,
    pub sapi: String,
    pub cnapi: String,
    /// The updates server (channels).
    pub updates: String,
}

/// One mock server, as tests see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimServer {
    pub uuid: ServerUuid,
    pub hostname: String,
    pub headnode: bool,
    pub admin_ip: String,
    /// The server's GZ directory (created on first use).
    pub root: PathBuf,
}

impl SimServer {
    fn from_mock(m: &MockServer) -> SimServer {
        SimServer {
            uuid: m.uuid,
            hostname: m.hostname.clone(),
            headnode: m.headnode,
            admin_ip: m.admin_ip.clone(),
            root: m.root.clone(),
        }
    }
}

/// Resident and peak memory of this process, from /proc (Linux).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUsage {
    pub rss_kb: u64,
    pub peak_rss_kb: u64,
}

impl MemoryUsage {
    pub fn now() -> MemoryUsage {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        MemoryUsage {
            rss_kb: field("VmRSS:"),
            peak_rss_kb: field("VmHWM:"),
        }
    }
}

/// Where a datacenter without `--state` keeps its server directories:
/// `$AGENTSADM_SIM_TMPDIR` if set, else `/dev/shm` when it is a writable
/// directory (tmpfs: creating the many small files of a GZ costs a few
/// microseconds there, against tens to hundreds on a busy ext4), else the
/// system temporary directory.
pub fn default_temp_base() -> PathBuf {
    if let Some(d) = std::env::var_os("AGENTSADM_SIM_TMPDIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    let writable = std::fs::metadata(shm)
        .map(|m| m.is_dir() && !m.permissions().readonly())
        .unwrap_or(false);
    if writable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Resolve a hostname or UUID to a server.
pub(crate) fn resolve_selector(core: &DcCore, sel: &str) -> Option<ServerUuid> {
    if let Ok(u) = sel.parse::<ServerUuid>() {
        return core.fleet.contains_key(&u).then_some(u);
    }
    core.fleet
        .values()
        .find(|s| s.hostname == sel)
        .map(|s| s.uuid)
}

/// A running simulated datacenter.
pub struct SimDc {
    core: Arc<DcCore>,
    urls: SimUrls,
    apis: Apis,
    updates: ImgapiClient,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The state directory to remove on shutdown (no `--state` given).
    temp_dir: Option<PathBuf>,
}

impl std::fmt::Debug for SimDc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDc")
            .field("urls", &self.urls)
            .field("state_dir", &self.core.state_dir)
            .finish_non_exhaustive()
    }
}

/// Client settings for talking to the simulator: short timeouts and quick
/// retries, since everything is on loopback.
pub fn sim_api_config() -> ApiConfig {
    ApiConfig {
        timeout: Duration::from_secs(30),
        retries: 3,
        backoff: Duration::from_millis(20),
        ..ApiConfig::default()
    }
}

impl SimDc {
    /// Start a datacenter. Its servers' GZ operations run the real GZ
    /// installer in the configured [`GzLayout`] (a state directory keeps
    /// the layout it was created with).
    pub async fn start(config: SimConfig) -> Result<SimDc, SimError> {
        let (state_dir, temp_dir) = match &config.state_dir {
            Some(d) => (d.clone(), None),
            None => {
                let d = default_temp_base().join(format!(
                    "agentsadm-sim-{}-{:08x}",
                    std::process::id(),
                    rand::thread_rng().next_u32()
                ));
                (d.clone(), Some(d))
            }
        };
        let result = SimDc::start_in(config, state_dir, temp_dir.clone()).await;
        // A refused start must not leave its temporary directory behind
        // (every refused `sim serve` would otherwise leak one into /dev/shm).
        if result.is_err()
            && let Some(d) = &temp_dir
        {
            let _ = std::fs::remove_dir_all(d);
        }
        result
    }

    async fn start_in(
        mut config: SimConfig,
        state_dir: PathBuf,
        temp_dir: Option<PathBuf>,
    ) -> Result<SimDc, SimError> {
        std::fs::create_dir_all(state_dir.join("servers")).map_err(|err| SimError::StateDir {
            path: state_dir.clone(),
            err,
        })?;
        let mut snapshot = if temp_dir.is_none() {
            persist::load(&state_dir)?
        } else {
            None
        };
        let fresh = snapshot.is_none();
        if let Some(s) = &snapshot
            && s.servers.len() != config.servers + 1
        {
            tracing::warn!(
                state = %state_dir.display(),
                "sim: the state directory has {} servers; --servers {} is ignored",
                s.servers.len(),
                config.servers
            );
        }
        if let Some(layout) = snapshot.as_ref().and_then(|s| s.gz_layout)
            && layout != config.gz_layout
        {
            tracing::warn!(
                state = %state_dir.display(),
                "sim: the state directory's servers have the {} layout; --gz-layout {} is ignored",
                layout.as_str(),
                config.gz_layout.as_str()
            );
            config.gz_layout = layout;
        }
        let gz: Arc<dyn GzOps> = Arc::new(InstallerGz::new(config.gz_layout, &state_dir));

        let faults = Arc::new(Faults::new(config.rng_seed));
        let mutations = Arc::new(AtomicU64::new(0));
        let info = |api| Arc::new(ApiInfo::new(api, faults.clone(), mutations.clone()));
        let clock = Arc::new(PublishClock::new(
            snapshot.as_ref().map(|s| s.clock_ticks).unwrap_or(0),
        ));
        let mut dc_store = ImgapiStore::new(ImgapiMode::Dc);
        let mut updates_store = ImgapiStore::new(ImgapiMode::Private);
        let mut sapi_store = SapiStore::default();
        let servers_dir = state_dir.join("servers");
        let specs = match snapshot.as_mut() {
            Some(s) => {
                persist::restore_images(s, false, &mut dc_store, &state_dir)?;
                persist::restore_images(s, true, &mut updates_store, &state_dir)?;
                sapi_store = std::mem::take(&mut s.sapi);
                s.servers.clone()
            }
            None => fleet::generate(config.rng_seed, config.servers),
        };
        let fleet: BTreeMap<ServerUuid, Arc<MockServer>> = specs
            .into_iter()
            .map(|s| (s.uuid, Arc::new(MockServer::from_spec(s, &servers_dir))))
            .collect();

        let cnapi_state = CnapiState::new(info(SimApi::Cnapi), config.execute_transport);
        {
            let mut records = cnapi_state.servers();
            match snapshot.as_mut() {
                Some(s) => {
                    for r in std::mem::take(&mut s.records) {
                        records.insert(r.uuid, r);
                    }
                }
                None => {
                    for m in fleet.values() {
                        let mut r = ServerRecord::new(m, &config.datacenter, false);
                        r.mockcloud = config.mockcloud_without_execute();
                        r.rack_identifier =
                            fleet::seeded_rack(m.index, config.rack_size).unwrap_or_default();
                        records.insert(m.uuid, r);
                    }
                }
            }
        }
        let sapi = Arc::new(SapiService {
            store: Mutex::new(sapi_store),
            info: info(SimApi::Sapi),
            crash_restart: Duration::from_millis(config.sapi_crash_restart_ms),
            delete_on_failed_create: config.strictness.sapi_delete_on_failed_create,
            timing: config.sapi_timing,
        });
        let core = Arc::new(DcCore {
            catalog: Catalog::builtin(),
            faults: faults.clone(),
            clock: clock.clone(),
            imgapi: Arc::new(ImgapiService::new(
                dc_store,
                info(SimApi::Imgapi),
                clock.clone(),
                Some(sapi.clone()),
            )),
            updates: Arc::new(ImgapiService::new(
                updates_store,
                info(SimApi::Updates),
                clock.clone(),
                None,
            )),
            sapi,
            cnapi: cnapi_state,
            fleet,
            gz,
            env: OnceLock::new(),
            shutdown: CancellationToken::new(),
            mutations,
            state_dir: state_dir.clone(),
            seed_report: Mutex::new(snapshot.as_mut().and_then(|s| s.seed_report.take())),
            config,
        });

        // Listeners first, so the GZ environment knows the URLs.
        let bound = listen::bind_all(core.config.port).await?;
        let url_of = |api: SimApi| {
            bound
                .iter()
                .find(|(a, _, _)| *a == api)
                .map(|(_, _, u)| u.clone())
                .unwrap_or_default()
        };
        let urls = SimUrls {
            imgapi: url_of(SimApi::Imgapi),
            sapi: url_of(SimApi::Sapi),
            cnapi: url_of(SimApi::Cnapi),
            updates: url_of(SimApi::Updates),
        };
        let apis = Apis::new(&urls.imgapi, &urls.sapi, &urls.cnapi, sim_api_config())
            .map_err(|err| SimError::Client { err })?;
        // The servers' own requests, told apart from clients' (not counted
        // in `SimDc::client_calls`).
        let server_config = ApiConfig {
            user_agent: http::SERVER_USER_AGENT.to_string(),
            ..sim_api_config()
        };
        let server_apis = Apis::new(&urls.imgapi, &urls.sapi, &urls.cnapi, server_config)
            .map_err(|err| SimError::Client { err })?;
        let updates = ImgapiClient::new(&urls.updates, sim_api_config())
            .map_err(|err| SimError::Client { err })?;
        let _ = core.env.set(Arc::new(GzEnv {
            imgapi_url: urls.imgapi.clone(),
            sapi_url: urls.sapi.clone(),
            cnapi_url: urls.cnapi.clone(),
            apis: server_apis,
            cn_agent_restart: Duration::from_millis(core.config.cn_agent_restart_ms),
            shutdown: core.shutdown.clone(),
            faults: core.faults.clone(),
        }));

        // Server state from the configuration.
        apply_config(&core, fresh)?;

        let mut tasks = Vec::new();
        for (api, listener, _) in bound {
            let router: Router = match api {
                SimApi::Imgapi => imgapi::router(core.imgapi.clone()),
                SimApi::Updates => imgapi::router(core.updates.clone()),
                SimApi::Sapi => sapi::router(core.sapi.clone()),
                SimApi::Cnapi => cnapi::router(core.clone()),
            };
            let info = match api {
                SimApi::Imgapi => core.imgapi.info.clone(),
                SimApi::Updates => core.updates.info.clone(),
                SimApi::Sapi => core.sapi.info.clone(),
                SimApi::Cnapi => core.cnapi.info.clone(),
            };
            let router = router.layer(axum::middleware::from_fn_with_state(info, http::api_layer));
            let listener = SimListener::new(listener, core.shutdown.clone());
            let token = core.shutdown.clone();
            tasks.push(tokio::spawn(async move {
                let service = router.into_make_service_with_connect_info::<Conn>();
                let _ = axum::serve(listener, service)
                    .with_graceful_shutdown(token.cancelled_owned())
                    .await;
            }));
        }
        if temp_dir.is_none() {
            tasks.push(tokio::spawn(persister(core.clone())));
        }
        if let Some(ms) = core.config.config_agent_poll_ms {
            let every = std::time::Duration::from_millis(ms.max(1));
            tasks.push(tokio::spawn(cnapi::config_agent::poll(core.clone(), every)));
        }
        let dc = SimDc {
            core,
            urls,
            apis,
            updates,
            tasks: Mutex::new(tasks),
            temp_dir,
        };
        if fresh && let Some(spec) = dc.core.config.populate.clone() {
            seed::populate(&dc.core, &spec)?;
        }
        Ok(dc)
    }

    /// The base URLs of the four services.
    pub fn urls(&self) -> &SimUrls {
        &self.urls
    }

    /// Clients for the DC's IMGAPI, SAPI and CNAPI.
    pub fn apis(&self) -> Apis {
        self.apis.clone()
    }

    /// A client for the updates server (no channel set: its default).
    pub fn updates_client(&self) -> ImgapiClient {
        self.updates.clone()
    }

    /// Fault injection, changeable at any time.
    pub fn faults(&self) -> &Faults {
        &self.core.faults
    }

    pub fn catalog(&self) -> &Catalog {
        &self.core.catalog
    }

    pub fn config(&self) -> &SimConfig {
        &self.core.config
    }

    /// Where server directories (and persisted state) live.
    pub fn state_dir(&self) -> &Path {
        &self.core.state_dir
    }

    /// Every mock server: the headnode first, then compute nodes in order.
    pub fn servers(&self) -> Vec<SimServer> {
        let mut v: Vec<&Arc<MockServer>> = self.core.fleet.values().collect();
        v.sort_by_key(|s| s.index);
        v.into_iter().map(|s| SimServer::from_mock(s)).collect()
    }

    /// A server by hostname or UUID.
    pub fn server(&self, selector: &str) -> Option<SimServer> {
        resolve_selector(&self.core, selector)
            .and_then(|u| self.core.server(u))
            .map(|m| SimServer::from_mock(&m))
    }

    pub fn server_by_uuid(&self, uuid: ServerUuid) -> Option<SimServer> {
        self.core.server(uuid).map(|m| SimServer::from_mock(&m))
    }

    pub fn headnode(&self) -> SimServer {
        self.servers()
            .into_iter()
            .next()
            .expect("a simulated datacenter always has a headnode")
    }

    pub fn compute_nodes(&self) -> Vec<SimServer> {
        self.servers().into_iter().filter(|s| !s.headnode).collect()
    }

    /// The CNAPI record of a server (`None` after a ServerDelete).
    pub fn record(&self, uuid: ServerUuid) -> Option<ServerRecord> {
        self.core.cnapi.servers().get(&uuid).cloned()
    }

    /// `server.agents` as CNAPI has it.
    pub fn server_agents(&self, uuid: ServerUuid) -> Vec<AgentEntry> {
        self.record(uuid).map(|r| r.agents).unwrap_or_default()
    }

    /// What the server's GZ itself reports (creates its directory if this
    /// is its first use).
    pub async fn gz_report(&self, uuid: ServerUuid) -> Result<AgentsReport, GzOpError> {
        let server = self
            .core
            .server(uuid)
            .ok_or(GzOpError::UnknownServer { server: uuid })?;
        self.core.ensure_prepared(&server)?;
        self.core
            .gz
            .report(server.target(&self.core.config.datacenter))
            .await
    }

    /// Ends when the changing GZ operations already running or queued on
    /// the server have ended: a run that timed out on a step leaves that
    /// work running, as on a real server.
    pub async fn settle(&self, uuid: ServerUuid) {
        if let Some(server) = self.core.server(uuid) {
            let target = server.target(&self.core.config.datacenter);
            self.core.gz.settle(&target).await;
        }
    }

    /// Set a server's CNAPI `status` (`running`, or `unknown` when false).
    pub fn set_running(&self, uuid: ServerUuid, running: bool) {
        if let Some(r) = self.core.cnapi.servers().get_mut(&uuid) {
            r.status = if running {
                ServerStatus::Running
            } else {
                ServerStatus::Unknown
            };
        }
        self.core.touch();
    }

    /// Set a server's CNAPI `setup` flag directly.
    pub fn set_setup(&self, uuid: ServerUuid, setup: bool) {
        if let Some(r) = self.core.cnapi.servers().get_mut(&uuid) {
            r.setup = setup;
        }
        self.core.touch();
    }

    /// Give a server `n` (more) VMs.
    pub fn add_vms(&self, uuid: ServerUuid, n: usize) {
        if let Some(r) = self.core.cnapi.servers().get_mut(&uuid) {
            add_vms(r, n);
        }
        self.core.touch();
    }

    /// What seeding created: the default image of every component, the
    /// newer ones, the SAPI application and services (`None` for an empty
    /// datacenter).
    pub fn seed_report(&self) -> Option<SeedReport> {
        self.core
            .seed_report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A component's default image: its SAPI agent service's
    /// `params.image_uuid`.
    pub fn default_image(&self, component: &str) -> Option<agentsadm_types::ids::ImageUuid> {
        self.core
            .sapi
            .lock()
            .services
            .iter()
            .find(|s| s.name == component && s.is_agent())
            .and_then(|s| s.image_uuid())
    }

    /// Populate the datacenter (when started with [`SimConfig::empty`]).
    pub fn seed(&self, spec: &SeedSpec) -> Result<SeedReport, SimError> {
        seed::populate(&self.core, spec)
    }

    /// Publish a built image in-process. Returns the manifest as IMGAPI
    /// shows it (activated, `published_at` from the simulator's clock).
    pub fn publish(&self, img: BuiltImage, target: PublishTarget) -> ImageManifest {
        let channels = |c: &Vec<String>| -> Vec<String> { c.clone() };
        let m = match &target {
            PublishTarget::Dc => seed::insert_image(&self.core, false, img, &[]),
            PublishTarget::Updates { channels: c } => {
                let c = channels(c);
                let refs: Vec<&str> = c.iter().map(String::as_str).collect();
                seed::insert_image(&self.core, true, img, &refs)
            }
            PublishTarget::Both { channels: c } => {
                let mut img = img;
                img.manifest.published_at = Some(self.core.clock.next());
                let c = channels(c);
                let refs: Vec<&str> = c.iter().map(String::as_str).collect();
                seed::insert_image(&self.core, true, img.clone(), &refs);
                seed::insert_image(&self.core, false, img, &[])
            }
        };
        self.core.touch();
        m
    }

    /// Build and publish a component image at `semver` (default options).
    pub fn publish_component(
        &self,
        component: &str,
        opts: &BuildOptions,
        target: PublishTarget,
    ) -> Option<ImageManifest> {
        let c = self.core.catalog.get(component)?;
        let img = crate::imagebuild::build(&image_spec(c, opts));
        Some(self.publish(img, target))
    }

    /// Write the state now (only with a state directory of one's own).
    pub fn save(&self) -> Result<(), SimError> {
        if self.temp_dir.is_some() {
            return Ok(());
        }
        persist::save(&self.core)
    }

    /// Stop the services, save the state (with `--state`), remove a
    /// temporary state directory.
    pub async fn shutdown(self) {
        self.core.shutdown.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        if self.temp_dir.is_none()
            && let Err(e) = persist::save(&self.core)
        {
            tracing::warn!(error = %e, "sim: cannot save state on shutdown");
        }
        // Drop removes a temporary directory.
    }

    /// The requests clients (not the simulated servers) made of `api`
    /// so far: reads and writes.
    pub fn client_calls(&self, api: SimApi) -> CallCount {
        match api {
            SimApi::Imgapi => self.core.imgapi.info.calls.count(),
            SimApi::Updates => self.core.updates.info.calls.count(),
            SimApi::Sapi => self.core.sapi.info.calls.count(),
            SimApi::Cnapi => self.core.cnapi.info.calls.count(),
        }
    }

    /// The requests clients made of `api` so far, by route (method and
    /// path, identifiers masked: `GET /servers/:id`).
    pub fn client_routes(&self, api: SimApi) -> std::collections::BTreeMap<String, u64> {
        match api {
            SimApi::Imgapi => self.core.imgapi.info.calls.routes(),
            SimApi::Updates => self.core.updates.info.calls.routes(),
            SimApi::Sapi => self.core.sapi.info.calls.routes(),
            SimApi::Cnapi => self.core.cnapi.info.calls.routes(),
        }
    }

    /// Requests served that could have changed state (for tests).
    pub fn mutation_count(&self) -> u64 {
        self.core.mutations.load(Ordering::Relaxed)
    }
}

impl Drop for SimDc {
    fn drop(&mut self) {
        self.core.shutdown.cancel();
        for t in self.tasks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            t.abort();
        }
        if let Some(d) = &self.temp_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn add_vms(r: &mut ServerRecord, n: usize) {
    let start = r.vms.len();
    for i in start..start + n {
        // Deterministic VM UUIDs from the server UUID and the index.
        let base = r.uuid.as_uuid().as_u128();
        let vm = uuid::Uuid::from_u128(base ^ ((i as u128 + 1) << 64));
        r.vms.insert(
            vm.to_string(),
            serde_json::json!({
                "uuid": vm, "owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853",
                "quota": 25, "max_physical_memory": 1024, "zone_state": "running",
                "state": "running", "brand": "joyent-minimal", "cpu_cap": 100,
                "last_modified": "2026-01-01T00:00:00.000Z"
            }),
        );
    }
}

/// Apply the configuration's server state (VMs, not set up, not running)
/// and faults.
fn apply_config(core: &Arc<DcCore>, fresh: bool) -> Result<(), SimError> {
    let resolve = |sel: &str| resolve_selector(core, sel);
    let unknown = |sel: &str| SimError::UnknownServer {
        selector: sel.to_string(),
    };
    for sel in &core.config.not_setup {
        resolve(sel).ok_or_else(|| unknown(sel))?;
    }
    {
        let mut records = core.cnapi.servers();
        if fresh {
            for (sel, n) in &core.config.with_vms {
                let u = resolve(sel).ok_or_else(|| unknown(sel))?;
                if let Some(r) = records.get_mut(&u) {
                    add_vms(r, *n);
                }
            }
        }
        for sel in &core.config.faults.not_running {
            let u = resolve(sel).ok_or_else(|| unknown(sel))?;
            if let Some(r) = records.get_mut(&u) {
                r.status = ServerStatus::Unknown;
            }
        }
    }
    let cns: Vec<ServerUuid> = {
        let mut v: Vec<&Arc<MockServer>> = core.fleet.values().filter(|s| !s.headnode).collect();
        v.sort_by_key(|s| s.index);
        v.into_iter().map(|s| s.uuid).collect()
    };
    let seed = core.config.rng_seed;
    let pick = |n: usize| -> Vec<ServerUuid> {
        // Seeded choice, spread evenly rather than clustered.
        if n == 0 || cns.is_empty() {
            return Vec::new();
        }
        let step = (cns.len() / n.min(cns.len())).max(1);
        let offset = (seed as usize) % step;
        cns.iter()
            .skip(offset)
            .step_by(step)
            .take(n)
            .copied()
            .collect()
    };
    core.faults
        .apply(&core.config.faults, &resolve, &pick)
        .map_err(|e| match e {
            faults::ApplyError::UnknownServer(selector) => SimError::UnknownServer { selector },
            faults::ApplyError::UnknownApi(api) => SimError::UnknownApi { api },
        })
}

/// Save the state about once a second while it changes.
async fn persister(core: Arc<DcCore>) {
    let mut saved = u64::MAX;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = core.shutdown.cancelled() => return,
        }
        let now = core.mutations.load(Ordering::Relaxed);
        if now != saved {
            let c = core.clone();
            match tokio::task::spawn_blocking(move || persist::save(&c)).await {
                Ok(Ok(())) => saved = now,
                Ok(Err(e)) => tracing::warn!(error = %e, "sim: cannot save state"),
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_shareable() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SimDc>();
        assert_send_sync::<Faults>();
    }
}
