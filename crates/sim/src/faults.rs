//! Fault injection for the simulated datacenter: what can go wrong on a
//! server (install latency, slow servers, failing or hung installs, servers
//! not running) and in the APIs (5xx bursts, added request latency, corrupt
//! or truncated image files).
//!
//! - Unhealthy builds: "the new build of X goes to maintenance on servers
//!   S" ([`UnhealthyBuild`]); the simulated servers' SMF
//!   ([`agentsadm_platform::Rooted`] faults) puts X's services in maintenance
//!   whenever that image is what is installed and they start.
//! - [`FaultConfig`] is the serializable description (scenario JSON, `sim
//!   serve` flags). Servers are named by hostname or UUID there.
//! - [`Faults`] is the runtime state shared by the API handlers and the task
//!   runner, changed at any time through [`crate::SimDc::faults`].
//! - What real Triton does when parts of it are down or misbehave, set at
//!   run time: a server's ur-agent stopped ([`Faults::stop_ur`]), the
//!   `agentsadm` a server runs through execute dying of a signal, printing
//!   past Ur's 5 MB or exiting with a chosen status ([`CommandFault`]),
//!   CNAPI failing to record task results ([`Faults::lose_task_results_on`])
//!   and VMAPI down ([`Faults::set_vmapi_down`]). A CNAPI crash and restart
//!   is [`crate::SimDc::restart_cnapi`].
//!
//! Latency is always a tokio sleep, never CPU, so a benchmark that injects
//! 50 ms per install measures the orchestrator and not the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use agentsadm_api::Api;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

/// How install latency is drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Always `base`.
    #[default]
    Fixed,
    /// `base + U(0, jitter)`.
    Uniform,
    /// `max(0, base + N(0, jitter))`.
    Normal,
    /// `base + Exp(mean = jitter)`: mostly fast, a few slow.
    Exponential,
    /// `base + jitter * e^N(0,1)`: median `base + jitter`, a long tail.
    Lognormal,
}

/// Per-install latency on a server (download, unpack, restart...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    #[serde(default)]
    pub base_ms: u64,
    #[serde(default)]
    pub jitter_ms: u64,
    #[serde(default)]
    pub distribution: Distribution,
}

impl LatencySpec {
    pub fn fixed(ms: u64) -> LatencySpec {
        LatencySpec {
            base_ms: ms,
            jitter_ms: 0,
            distribution: Distribution::Fixed,
        }
    }

    /// Draw one latency.
    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        let base = self.base_ms as f64;
        let jitter = self.jitter_ms as f64;
        let ms = match self.distribution {
            Distribution::Fixed => base,
            Distribution::Uniform => base + rng.r#gen::<f64>() * jitter,
            Distribution::Normal => (base + standard_normal(rng) * jitter).max(0.0),
            Distribution::Exponential => {
                // Inverse transform; 1 - u is in (0, 1] so ln never sees 0.
                base - jitter * (1.0 - rng.r#gen::<f64>()).ln()
            }
            Distribution::Lognormal => base + jitter * standard_normal(rng).exp(),
        };
        Duration::from_secs_f64(ms.max(0.0) / 1000.0)
    }

    pub fn is_zero(&self) -> bool {
        self.base_ms == 0 && self.jitter_ms == 0
    }
}

/// Box-Muller: rand 0.8 without rand_distr has no normal distribution.
fn standard_normal(rng: &mut impl Rng) -> f64 {
    let u1: f64 = 1.0 - rng.r#gen::<f64>();
    let u2: f64 = rng.r#gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Servers that take `factor` times the install latency.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowServers {
    /// Hostnames or UUIDs.
    #[serde(default)]
    pub servers: Vec<String>,
    /// Also pick this many compute nodes at random (seeded).
    #[serde(default)]
    pub count: usize,
    #[serde(default = "default_factor")]
    pub factor: f64,
}

fn default_factor() -> f64 {
    10.0
}

/// Installs that fail (the task ends in `failure`, or `gz` exits 1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailingInstalls {
    /// Probability per install, drawn from the seeded RNG.
    #[serde(default)]
    pub rate: f64,
    /// Every install on these servers fails.
    #[serde(default)]
    pub servers: Vec<String>,
    /// Limit the rate and the server list to these components (empty: all).
    #[serde(default)]
    pub components: Vec<String>,
}

/// Tasks that never finish (and executes that never answer).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HungTasks {
    #[serde(default)]
    pub rate: f64,
    #[serde(default)]
    pub servers: Vec<String>,
}

/// The new build of a component goes to maintenance on some servers (all
/// of them when none are named).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnhealthyBuild {
    pub component: String,
    pub image: ImageUuid,
    /// Hostnames or UUIDs; empty: every server.
    #[serde(default)]
    pub servers: Vec<String>,
}

/// A burst of 5xx answers: the next `count` requests to an API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstSpec {
    pub count: u32,
    /// 500 (restify InternalError) or 503 (ServiceUnavailableError).
    #[serde(default = "default_burst_status")]
    pub status: u16,
}

fn default_burst_status() -> u16 {
    503
}

/// Per-API settings, keyed `imgapi`, `updates`, `sapi`, `cnapi`.
pub type PerApi<T> = BTreeMap<String, T>;

/// Everything that can be injected, as written in a scenario file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    #[serde(default)]
    pub install_latency: LatencySpec,
    #[serde(default)]
    pub slow_servers: SlowServers,
    #[serde(default)]
    pub failing_installs: FailingInstalls,
    #[serde(default)]
    pub hung_tasks: HungTasks,
    /// Servers whose CNAPI `status` is `unknown`.
    #[serde(default)]
    pub not_running: Vec<String>,
    /// Image UUIDs or component names whose file is served with one byte
    /// flipped (same length, the manifest's sha1 and Content-MD5).
    #[serde(default)]
    pub corrupt_images: Vec<String>,
    /// Image UUIDs or component names whose download stops halfway.
    #[serde(default)]
    pub truncated_images: Vec<String>,
    #[serde(default)]
    pub api_bursts: PerApi<BurstSpec>,
    #[serde(default)]
    pub request_latency_ms: PerApi<u64>,
    #[serde(default)]
    pub unhealthy_builds: Vec<UnhealthyBuild>,
}

/// The four simulated HTTP services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SimApi {
    /// The datacenter's IMGAPI (dc mode).
    Imgapi,
    /// The updates server (private mode, channels).
    Updates,
    Sapi,
    Cnapi,
}

impl SimApi {
    pub const ALL: [SimApi; 4] = [SimApi::Imgapi, SimApi::Updates, SimApi::Sapi, SimApi::Cnapi];

    pub fn key(&self) -> &'static str {
        match self {
            SimApi::Imgapi => "imgapi",
            SimApi::Updates => "updates",
            SimApi::Sapi => "sapi",
            SimApi::Cnapi => "cnapi",
        }
    }

    pub fn from_key(key: &str) -> Option<SimApi> {
        SimApi::ALL.into_iter().find(|a| a.key() == key)
    }

    /// The client-side API kind, for messages.
    pub fn api(&self) -> Api {
        match self {
            SimApi::Imgapi | SimApi::Updates => Api::Imgapi,
            SimApi::Sapi => Api::Sapi,
            SimApi::Cnapi => Api::Cnapi,
        }
    }

    fn index(&self) -> usize {
        match self {
            SimApi::Imgapi => 0,
            SimApi::Updates => 1,
            SimApi::Sapi => 2,
            SimApi::Cnapi => 3,
        }
    }
}

/// How an API that stopped answering fails the requests sent to it, as
/// a client sees each kind of headnode outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutageKind {
    /// The request is read, then the connection closes with no answer:
    /// a process that died (hyper's "connection closed before message
    /// completed").
    Cut,
    /// The connection is reset (an RST, no answer): a zone rebooting, a
    /// firewall dropping state.
    Reset,
    /// The headers arrive and promise a body that stops halfway.
    Truncated,
    /// A proxy in front of a backend that is gone answers 502, 503 or
    /// 504 with an HTML page, not the API's JSON.
    Gateway(u16),
    /// Nothing answers: the connection stays open until the client's own
    /// timeout (a zone stopped behind a route that still accepts).
    Silent,
}

impl OutageKind {
    /// Every kind, with the three gateway statuses.
    pub const ALL: [OutageKind; 7] = [
        OutageKind::Cut,
        OutageKind::Reset,
        OutageKind::Truncated,
        OutageKind::Gateway(502),
        OutageKind::Gateway(503),
        OutageKind::Gateway(504),
        OutageKind::Silent,
    ];

    fn code(self) -> u32 {
        match self {
            OutageKind::Cut => 1,
            OutageKind::Reset => 2,
            OutageKind::Truncated => 3,
            OutageKind::Silent => 4,
            OutageKind::Gateway(status) => u32::from(status),
        }
    }

    fn from_code(code: u32) -> Option<OutageKind> {
        match code {
            0 => None,
            1 => Some(OutageKind::Cut),
            2 => Some(OutageKind::Reset),
            3 => Some(OutageKind::Truncated),
            4 => Some(OutageKind::Silent),
            status => Some(OutageKind::Gateway(status as u16)),
        }
    }
}

/// Lock-free per-API fault counters, checked on every request.
#[derive(Debug, Default)]
struct ApiFaultCounters {
    burst_remaining: AtomicU32,
    burst_status: AtomicU32,
    latency_us: AtomicU64,
    /// Stopped answering, and how ([`OutageKind::code`]; 0: answering).
    outage: AtomicU32,
}

/// Server-side faults with servers resolved to UUIDs.
#[derive(Debug, Default)]
struct ServerFaults {
    install_latency: LatencySpec,
    slow: BTreeMap<ServerUuid, f64>,
    fail_rate: f64,
    fail_servers: BTreeSet<ServerUuid>,
    fail_components: BTreeSet<String>,
    hung_rate: f64,
    hung_servers: BTreeSet<ServerUuid>,
    corrupt: BTreeSet<String>,
    truncated: BTreeSet<String>,
    /// (component, image, servers; empty: all).
    unhealthy: Vec<(String, ImageUuid, BTreeSet<ServerUuid>)>,
    ur_down: BTreeSet<ServerUuid>,
    commands: BTreeMap<ServerUuid, CommandFault>,
    lost_results: BTreeSet<ServerUuid>,
    vmapi_down: bool,
}

/// What becomes of the `agentsadm` command a server runs through CNAPI
/// execute (instead of its own outcome).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandFault {
    /// agentsadm exits with this status (the script around it then does
    /// what it does with it, see `remote::exec_script_status`).
    Exit(i32),
    /// The script as a whole exits with this status, whatever agentsadm
    /// did (as a script that `exec`s agentsadm would pass on its status).
    ScriptExit(i32),
    /// The script is killed by a signal (SIGKILL).
    Signal,
    /// It prints more than Ur's 5 MB and is stopped.
    Oversized,
}

/// A scenario naming something that does not exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApplyError {
    UnknownServer(String),
    UnknownApi(String),
}

/// What the task runner must do for one install.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstallFate {
    /// Sleep this long first (already multiplied by a slow factor).
    pub latency: Duration,
    /// Never finish.
    pub hang: bool,
    /// Finish with an injected failure.
    pub fail: bool,
}

/// How an image file download is spoiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFault {
    Corrupt,
    Truncated,
}

/// The runtime fault state of one simulated datacenter.
#[derive(Debug)]
pub struct Faults {
    apis: [ApiFaultCounters; 4],
    servers: Mutex<ServerFaults>,
    rng: Mutex<SmallRng>,
    /// SAPI instance writes still to fail (a storage error).
    sapi_write_failures: AtomicU32,
    sapi_delete_failures: AtomicU32,
    /// Latency drawn per write (POST, PUT, DELETE) to each API, before it
    /// is handled: a slow backing store, so a write lands late.
    write_latency: Mutex<BTreeMap<SimApi, LatencySpec>>,
}

impl Faults {
    pub(crate) fn new(seed: u64) -> Faults {
        Faults {
            apis: Default::default(),
            servers: Mutex::new(ServerFaults::default()),
            // A different stream than the one naming servers, so adding a
            // fault does not rename anything.
            rng: Mutex::new(SmallRng::seed_from_u64(seed ^ 0x5eed_fa17)),
            sapi_write_failures: AtomicU32::new(0),
            sapi_delete_failures: AtomicU32::new(0),
            write_latency: Mutex::new(BTreeMap::new()),
        }
    }

    /// The next `count` SAPI instance deletes (DeleteInstance) fail with a
    /// storage error: a cleanup that fails part way while SAPI still
    /// answers everything else (the run's lock and history included).
    pub fn fail_sapi_deletes(&self, count: u32) {
        self.sapi_delete_failures.store(count, Ordering::Relaxed);
    }

    /// Whether this SAPI instance delete fails (consumes one failure).
    pub(crate) fn take_sapi_delete_failure(&self) -> bool {
        self.sapi_delete_failures
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    fn servers(&self) -> std::sync::MutexGuard<'_, ServerFaults> {
        self.servers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remove every fault (servers set not running stay so: that is server
    /// state, see [`crate::SimDc::set_running`]).
    pub fn clear(&self) {
        *self.servers() = ServerFaults::default();
        self.sapi_write_failures.store(0, Ordering::Relaxed);
        self.sapi_delete_failures.store(0, Ordering::Relaxed);
        for a in &self.apis {
            a.burst_remaining.store(0, Ordering::Relaxed);
            a.latency_us.store(0, Ordering::Relaxed);
            a.outage.store(0, Ordering::Relaxed);
        }
        self.write_latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Latency added to every install (install-agent tasks and `gz`
    /// install/remove through execute).
    pub fn set_install_latency(&self, spec: LatencySpec) {
        self.servers().install_latency = spec;
    }

    /// Make a server `factor` times slower (1.0 clears it).
    pub fn set_slow(&self, server: ServerUuid, factor: f64) {
        let mut s = self.servers();
        if factor == 1.0 {
            s.slow.remove(&server);
        } else {
            s.slow.insert(server, factor);
        }
    }

    /// Fail every install on this server.
    pub fn fail_installs_on(&self, server: ServerUuid) {
        self.servers().fail_servers.insert(server);
    }

    /// Fail installs at random with this probability.
    pub fn set_fail_rate(&self, rate: f64) {
        self.servers().fail_rate = rate;
    }

    /// Limit injected install failures to these components (empty: all).
    pub fn set_fail_components(&self, components: &[&str]) {
        self.servers().fail_components = components.iter().map(|c| c.to_string()).collect();
    }

    /// Tasks on this server never finish.
    pub fn hang_tasks_on(&self, server: ServerUuid) {
        self.servers().hung_servers.insert(server);
    }

    pub fn set_hung_rate(&self, rate: f64) {
        self.servers().hung_rate = rate;
    }

    /// Serve this image's file (by UUID or component name) with a flipped
    /// byte.
    pub fn corrupt_image(&self, image: &str) {
        self.servers().corrupt.insert(image.to_string());
    }

    /// Stop this image's download halfway (by UUID or component name).
    pub fn truncate_image(&self, image: &str) {
        self.servers().truncated.insert(image.to_string());
    }

    /// The build `image` of `component` goes to maintenance on `servers`
    /// (every server when empty) whenever it starts there.
    pub fn unhealthy_build(&self, component: &str, image: ImageUuid, servers: &[ServerUuid]) {
        self.servers().unhealthy.push((
            component.to_string(),
            image,
            servers.iter().copied().collect(),
        ));
    }

    /// The SMF faults of one server's GZ: each unhealthy build that
    /// applies there, for each of its component's services, while its
    /// `image_uuid` file names that build.
    pub(crate) fn smf_faults(
        &self,
        server: ServerUuid,
        catalog: &agentsadm_types::catalog::Catalog,
    ) -> Vec<agentsadm_platform::rooted::SmfFault> {
        let s = self.servers();
        let mut out = Vec::new();
        for (component, image, servers) in &s.unhealthy {
            if !servers.is_empty() && !servers.contains(&server) {
                continue;
            }
            let Some(c) = catalog.get(component) else {
                continue;
            };
            let image_file = format!(
                "opt/smartdc/agents/lib/node_modules/{}/image_uuid",
                c.package_name()
            );
            for fmri in &c.smf_services {
                out.push(agentsadm_platform::rooted::SmfFault {
                    fmri: fmri.clone(),
                    when_file: Some(image_file.clone()),
                    holds: Some(image.to_string()),
                    state: agentsadm_platform::ServiceState::Maintenance,
                    reason: Some(format!(
                        "{fmri}: Start method exited with $SMF_EXIT_ERR_FATAL (simulated: build {image} of {component} fails on start). See: /var/svc/log/{}.log",
                        fmri.trim_start_matches("svc:/").replace('/', "-")
                    )),
                });
            }
        }
        out
    }

    /// The server's ur-agent stops: CNAPI execute through Ur gets no answer
    /// until CNAPI's own hour runs out.
    pub fn stop_ur(&self, server: ServerUuid) {
        self.servers().ur_down.insert(server);
    }

    pub fn start_ur(&self, server: ServerUuid) {
        self.servers().ur_down.remove(&server);
    }

    pub(crate) fn ur_down(&self, server: ServerUuid) -> bool {
        self.servers().ur_down.contains(&server)
    }

    /// Every `agentsadm` command run through execute on `server` ends this
    /// way until [`Faults::clear_command_fault`].
    pub fn command_fault_on(&self, server: ServerUuid, fault: CommandFault) {
        self.servers().commands.insert(server, fault);
    }

    pub fn clear_command_fault(&self, server: ServerUuid) {
        self.servers().commands.remove(&server);
    }

    pub(crate) fn command_fault(&self, server: ServerUuid) -> Option<CommandFault> {
        self.servers().commands.get(&server).copied()
    }

    /// CNAPI's write of a finished task's result on this server fails (the
    /// Moray put in `sendTaskRequest`): the task stays `active` for ever,
    /// though cn-agent finished it and reported the new `server.agents`.
    pub fn lose_task_results_on(&self, server: ServerUuid) {
        self.servers().lost_results.insert(server);
    }

    pub(crate) fn loses_task_results(&self, server: ServerUuid) -> bool {
        self.servers().lost_results.contains(&server)
    }

    /// VMAPI is down: CNAPI's ServerGet, which computes capacity through
    /// it, takes [`crate::SimConfig::vmapi_down_server_get_ms`].
    pub fn set_vmapi_down(&self, down: bool) {
        self.servers().vmapi_down = down;
    }

    pub(crate) fn vmapi_down(&self) -> bool {
        self.servers().vmapi_down
    }

    /// The next `count` requests to `api` get `status` (500 or 503).
    pub fn burst(&self, api: SimApi, count: u32, status: u16) {
        let c = &self.apis[api.index()];
        c.burst_status.store(status as u32, Ordering::Relaxed);
        c.burst_remaining.store(count, Ordering::Relaxed);
    }

    /// The next `count` SAPI instance writes (CreateInstance) fail with a
    /// storage error, as when Moray refuses the put.
    pub fn fail_sapi_writes(&self, count: u32) {
        self.sapi_write_failures.store(count, Ordering::Relaxed);
    }

    /// Whether this SAPI instance write fails (consumes one failure).
    pub(crate) fn take_sapi_write_failure(&self) -> bool {
        self.sapi_write_failures
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Add this much latency to every request to `api`.
    pub fn set_request_latency(&self, api: SimApi, latency: Duration) {
        self.apis[api.index()]
            .latency_us
            .store(latency.as_micros() as u64, Ordering::Relaxed);
    }

    /// Each write to `api` waits a latency drawn from `spec` before it is
    /// handled (`LatencySpec::default()` clears it): with a uniform 0-1.5 s,
    /// a SAPI whose Moray is slow.
    pub fn set_write_latency(&self, api: SimApi, spec: LatencySpec) {
        let mut w = self.write_latency.lock().unwrap_or_else(|e| e.into_inner());
        if spec.is_zero() {
            w.remove(&api);
        } else {
            w.insert(api, spec);
        }
    }

    /// `api` stops answering (`true`: every connection is cut, as when
    /// its process is gone) or answers again.
    pub fn set_api_down(&self, api: SimApi, down: bool) {
        self.set_api_outage(api, down.then_some(OutageKind::Cut));
    }

    /// `api` stops answering the way `kind` says, or (`None`) answers
    /// again.
    pub fn set_api_outage(&self, api: SimApi, kind: Option<OutageKind>) {
        self.apis[api.index()]
            .outage
            .store(kind.map_or(0, |k| k.code()), Ordering::Relaxed);
    }

    /// How `api` fails its requests now, if it does.
    pub(crate) fn api_outage(&self, api: SimApi) -> Option<OutageKind> {
        OutageKind::from_code(self.apis[api.index()].outage.load(Ordering::Relaxed))
    }

    /// Called per request: the added latency (`write`: the request changes
    /// something), and the 5xx status to answer with instead of handling
    /// the request, if a burst is under way.
    pub(crate) fn on_request(&self, api: SimApi, write: bool) -> (Duration, Option<u16>) {
        let c = &self.apis[api.index()];
        let mut latency = Duration::from_micros(c.latency_us.load(Ordering::Relaxed));
        if write {
            let spec = self
                .write_latency
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&api)
                .copied();
            if let Some(spec) = spec {
                let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                latency += spec.sample(&mut *rng);
            }
        }
        let burst = c
            .burst_remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        let status = burst.then(|| c.burst_status.load(Ordering::Relaxed) as u16);
        (latency, status)
    }

    /// Decide what happens to one install of `component` on `server`.
    pub(crate) fn install_fate(&self, server: ServerUuid, component: &str) -> InstallFate {
        let s = self.servers();
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let factor = s.slow.get(&server).copied().unwrap_or(1.0);
        let latency = if s.install_latency.is_zero() {
            Duration::ZERO
        } else {
            s.install_latency.sample(&mut *rng).mul_f64(factor.max(0.0))
        };
        let component_selected =
            s.fail_components.is_empty() || s.fail_components.contains(component);
        let fail = component_selected
            && (s.fail_servers.contains(&server)
                || (s.fail_rate > 0.0 && rng.r#gen::<f64>() < s.fail_rate));
        let hang = s.hung_servers.contains(&server)
            || (s.hung_rate > 0.0 && rng.r#gen::<f64>() < s.hung_rate);
        InstallFate {
            latency,
            hang,
            fail,
        }
    }

    /// Whether downloads of this image are spoiled.
    pub(crate) fn file_fault(&self, image: ImageUuid, name: &str) -> Option<FileFault> {
        let s = self.servers();
        let uuid = image.to_string();
        if s.corrupt.contains(&uuid) || s.corrupt.contains(name) {
            Some(FileFault::Corrupt)
        } else if s.truncated.contains(&uuid) || s.truncated.contains(name) {
            Some(FileFault::Truncated)
        } else {
            None
        }
    }

    /// Apply a scenario's faults. `resolve` turns a hostname or UUID into a
    /// server; `pick` chooses `n` random compute nodes for `slow_servers.count`.
    pub(crate) fn apply(
        &self,
        config: &FaultConfig,
        resolve: &dyn Fn(&str) -> Option<ServerUuid>,
        pick: &dyn Fn(usize) -> Vec<ServerUuid>,
    ) -> Result<(), ApplyError> {
        let all = |names: &[String]| -> Result<Vec<ServerUuid>, ApplyError> {
            names
                .iter()
                .map(|n| resolve(n).ok_or_else(|| ApplyError::UnknownServer(n.clone())))
                .collect()
        };
        {
            let mut s = self.servers();
            s.install_latency = config.install_latency;
            for u in all(&config.slow_servers.servers)? {
                s.slow.insert(u, config.slow_servers.factor);
            }
            for u in pick(config.slow_servers.count) {
                s.slow.insert(u, config.slow_servers.factor);
            }
            s.fail_rate = config.failing_installs.rate;
            s.fail_servers
                .extend(all(&config.failing_installs.servers)?);
            s.fail_components
                .extend(config.failing_installs.components.iter().cloned());
            s.hung_rate = config.hung_tasks.rate;
            s.hung_servers.extend(all(&config.hung_tasks.servers)?);
            s.corrupt.extend(config.corrupt_images.iter().cloned());
            s.truncated.extend(config.truncated_images.iter().cloned());
            for u in &config.unhealthy_builds {
                let servers = all(&u.servers)?.into_iter().collect();
                s.unhealthy.push((u.component.clone(), u.image, servers));
            }
        }
        let api_of =
            |key: &str| SimApi::from_key(key).ok_or_else(|| ApplyError::UnknownApi(key.into()));
        for (key, burst) in &config.api_bursts {
            let api = api_of(key)?;
            self.burst(api, burst.count, burst.status);
        }
        for (key, ms) in &config.request_latency_ms {
            let api = api_of(key)?;
            self.set_request_latency(api, Duration::from_millis(*ms));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_respect_base() {
        let mut rng = SmallRng::seed_from_u64(1);
        for d in [
            Distribution::Fixed,
            Distribution::Uniform,
            Distribution::Normal,
            Distribution::Exponential,
            Distribution::Lognormal,
        ] {
            let spec = LatencySpec {
                base_ms: 10,
                jitter_ms: 5,
                distribution: d,
            };
            let samples: Vec<Duration> = (0..200).map(|_| spec.sample(&mut rng)).collect();
            let mean = samples.iter().map(|s| s.as_secs_f64()).sum::<f64>() / samples.len() as f64;
            assert!(mean > 0.005 && mean < 0.05, "{d:?}: mean {mean}");
            if d != Distribution::Normal {
                assert!(samples.iter().all(|s| *s >= Duration::from_millis(10)));
            }
        }
        assert_eq!(
            LatencySpec::fixed(7).sample(&mut rng),
            Duration::from_millis(7)
        );
    }

    #[test]
    fn bursts_count_down() {
        let f = Faults::new(1);
        f.burst(SimApi::Cnapi, 2, 500);
        assert_eq!(f.on_request(SimApi::Cnapi, false).1, Some(500));
        assert_eq!(f.on_request(SimApi::Sapi, false).1, None);
        assert_eq!(f.on_request(SimApi::Cnapi, false).1, Some(500));
        assert_eq!(f.on_request(SimApi::Cnapi, false).1, None);
        f.set_write_latency(SimApi::Sapi, LatencySpec::fixed(7));
        assert_eq!(f.on_request(SimApi::Sapi, true).0, Duration::from_millis(7));
        assert_eq!(f.on_request(SimApi::Sapi, false).0, Duration::ZERO);
    }

    #[test]
    fn install_fate_by_server_and_component() {
        let f = Faults::new(1);
        let a = ServerUuid::from_u128(1);
        let b = ServerUuid::from_u128(2);
        f.fail_installs_on(a);
        f.set_fail_components(&["vm-agent"]);
        f.set_slow(b, 3.0);
        f.set_install_latency(LatencySpec::fixed(10));
        assert!(f.install_fate(a, "vm-agent").fail);
        assert!(!f.install_fate(a, "net-agent").fail);
        assert_eq!(
            f.install_fate(b, "vm-agent").latency,
            Duration::from_millis(30)
        );
        let config: FaultConfig = serde_json::from_str(
            r#"{"install_latency":{"base_ms":50,"jitter_ms":10,"distribution":"uniform"},
                "hung_tasks":{"servers":["cn0001"]},"api_bursts":{"cnapi":{"count":3}}}"#,
        )
        .unwrap();
        let g = Faults::new(2);
        g.apply(&config, &|n| (n == "cn0001").then_some(a), &|_| vec![])
            .unwrap();
        assert!(g.install_fate(a, "x").hang);
        assert_eq!(g.on_request(SimApi::Cnapi, false).1, Some(503));
        assert!(
            g.apply(&config, &|_| None, &|_| vec![]).is_err(),
            "unknown server is an error"
        );
    }
}
