//! How a simulated datacenter is shaped: number of servers, seed, ports,
//! state directory, the population it starts with, timings of the
//! asynchronous parts (cn-agent restart, setup and factory-reset jobs) and
//! the faults to inject. Built in code (`SimConfig::default().servers(10)`),
//! from `sim serve` flags, or from a scenario JSON file with the same field
//! names:
//!
//! ```json
//! {"servers": 50, "rng_seed": 7, "not_setup": ["cn0050"], "with_vms": {"cn0001": 2},
//!  "gz_layout": "rooted", "execute_transport": "ur",
//!  "populate": {"version": "1.0.0", "dc_newer": "1.1.0", "updates_newer": "1.2.0",
//!               "agents_without_params": ["vm-agent", "net-agent"],
//!               "files_without_md5": ["vm-agent", "cn-agent"]},
//!  "strictness": {"sapi_delete_on_failed_create": true, "mockcloud_refuses_execute": true},
//!  "faults": {"install_latency": {"base_ms": 50, "jitter_ms": 20, "distribution": "lognormal"},
//!             "slow_servers": {"servers": ["cn0003"], "factor": 10},
//!             "failing_installs": {"rate": 0.02},
//!             "api_bursts": {"cnapi": {"count": 3, "status": 503}}}}
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SimError;
use super::faults::FaultConfig;
use super::faults::LatencySpec;
use super::gz::GzLayout;

/// How CNAPI is configured to carry CommandExecute: Ur, as real CNAPI does
/// by default (`handleWithUr`), unless `FEATURE_USE_CNAGENT_COMMAND_EXECUTE`
/// is set (`CnAgent`; seeding writes it into the SAPI `cnapi` service's
/// metadata, where the real one is rendered from). Even then a server whose
/// `server.agents` lacks cn-agent >= 2.6.0 goes through Ur, per request.
/// Either way the script gets exactly the request's `env` (Ur and cn-agent
/// both pass it as the whole environment, `{}` when absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecuteTransport {
    /// cn-agent's `command_execute` task: `timeout` (ms) is honoured (the
    /// command is killed with SIGKILL), and the answer carries `signal`.
    CnAgent,
    /// Ur (the default): a `timeout` parameter crashes CNAPI (1.26.6 logs
    /// its refusal through an undefined logger); the answer is `{exitCode,
    /// stdout, stderr}`.
    #[default]
    Ur,
}

/// Where the simulator can be told to be kinder than real Triton, for
/// product code that still relies on it. Each default is the real
/// behaviour unless its documentation says why not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Strictness {
    /// A CreateInstance that fails (unknown service or manifest, storage
    /// error) deletes the instance of its `uuid`, an existing one included,
    /// as SAPI's `createInstance` does. `false`: the existing instance
    /// survives.
    pub sapi_delete_on_failed_create: bool,
    /// Mockcloud-layout servers are mockcloud CNs as real ones are: their
    /// sysinfo (and CNAPI's `system_type`) says `Virtual`, and
    /// CommandExecute against them is refused as real CNAPI refuses it:
    /// through Ur, no Ur answers (CNAPI's 500 "Timed out waiting for ur
    /// response" after [`SimConfig::ur_reply_timeout_ms`]); through
    /// cn-agent, its mockcloud backend's exit 666. `false`: they pass for
    /// real SmartOS CNs (`SunOS`) with a working execute, for a large
    /// datacenter that still installs gz-tools, sdcadm or dockerlogger.
    pub mockcloud_refuses_execute: bool,
    /// CommandExecute of an `agentsadm` command line runs the agentsadm the
    /// server has, as a real global zone would: with none there, the
    /// script's shell answers 127 (`No such file or directory`); with one
    /// older than a word of the command line (`agentsadm_api::compat`),
    /// that copy's parser refuses it (exit 2) and nothing runs. `false`:
    /// the simulator's own agentsadm runs every command line.
    pub execute_runs_the_servers_agentsadm: bool,
}

impl Default for Strictness {
    fn default() -> Self {
        Strictness {
            sapi_delete_on_failed_create: true,
            mockcloud_refuses_execute: true,
            execute_runs_the_servers_agentsadm: true,
        }
    }
}

/// How long the simulated SAPI takes per list and per write, modelled on
/// the real SAPI 2.1.3 (docs/triton/apis.md §2.10, measured on the
/// real-triton harness): ListInstances reads every instance on each call,
/// 0.31 s at 12,013 instances, 0.91 s at 24,013 and 1.57 s at 28,021
/// (interpolated between, extrapolated past); a write (create, update,
/// delete) takes 21 ms. A request takes at least that long from its
/// arrival, whatever the simulator's own work cost.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SapiTiming {
    /// Multiplies the modelled times: 1.0 is the real SAPI (the default),
    /// 0 turns the model off (a test's own SAPI-heavy loops).
    pub scale: f64,
}

impl Default for SapiTiming {
    fn default() -> Self {
        SapiTiming { scale: 1.0 }
    }
}

impl SapiTiming {
    /// No modelled time at all.
    pub fn off() -> SapiTiming {
        SapiTiming { scale: 0.0 }
    }
}

/// What a new datacenter is populated with: images of every catalog
/// component, the SAPI `sdc` application and agent services, and every
/// set-up server with the default set installed, adopted and reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SeedSpec {
    /// The semver of the installed (default) images.
    pub version: String,
    /// Also publish this newer version of every component into the DC
    /// IMGAPI (not installed anywhere).
    pub dc_newer: Option<String>,
    /// Also publish this newer version into the updates server only
    /// (channels `dev` and `experimental`), for `--channel` and imports.
    pub updates_newer: Option<String>,
    /// Filler bytes per image (small keeps installs cheap).
    pub payload_bytes: usize,
    /// Components whose seeded SAPI instances have no `params` at all, as
    /// the real vm-agent and net-agent postinstalls adopt them (`{uuid,
    /// service_uuid}` only): no `server_uuid`, no `image_uuid`.
    pub agents_without_params: Vec<String>,
    /// Components whose seeded image files (every version, both IMGAPIs)
    /// are served without `Content-MD5`, as IMGAPI does for a file whose
    /// record has no `contentMD5`.
    pub files_without_md5: Vec<String>,
}

impl Default for SeedSpec {
    fn default() -> Self {
        SeedSpec {
            version: "1.0.0".to_string(),
            dc_newer: None,
            updates_newer: None,
            payload_bytes: 256,
            // As in real datacenters: the product links these to their
            // servers through server.agents.
            agents_without_params: vec!["vm-agent".to_string(), "net-agent".to_string()],
            files_without_md5: vec!["vm-agent".to_string(), "cn-agent".to_string()],
        }
    }
}

impl SeedSpec {
    /// The population `sim serve` and the demo use: a newer version in the
    /// DC and a newer still on the updates server.
    pub fn with_newer() -> SeedSpec {
        SeedSpec {
            dc_newer: Some("1.1.0".to_string()),
            updates_newer: Some("1.2.0".to_string()),
            ..SeedSpec::default()
        }
    }
}

/// The shape of one simulated datacenter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Compute nodes besides the headnode.
    pub servers: usize,
    /// Seed for server UUIDs, hostnames, image and instance UUIDs and fault
    /// draws: the same seed gives the same datacenter.
    pub rng_seed: u64,
    /// Base port: IMGAPI on P, SAPI P+1, CNAPI P+2, updates P+3. `None`:
    /// ephemeral ports.
    pub port: Option<u16>,
    /// Where server directories and (for `sim serve --state`) the persisted
    /// state live. `None`: a temporary directory removed on shutdown.
    pub state_dir: Option<PathBuf>,
    pub datacenter: String,
    pub dns_domain: String,
    /// `metadata.update_channel` of the SAPI `sdc` application.
    pub update_channel: String,
    /// Populate on start (`None`: empty APIs, servers not set up... see
    /// [`SimConfig::empty`]).
    pub populate: Option<SeedSpec>,
    /// Servers (hostname or UUID) that are not set up.
    pub not_setup: Vec<String>,
    /// Servers (hostname or UUID) with this many VMs.
    pub with_vms: BTreeMap<String, usize>,
    /// Delay before `server.agents` shows a new cn-agent after its
    /// install-agent task completed (cn-agent restarting).
    pub cn_agent_restart_ms: u64,
    /// How long the server-setup job takes besides the installs.
    pub setup_job_ms: u64,
    /// How long a factory reset takes (reboot and wipe).
    pub factory_reset_ms: u64,
    /// How long SAPI stays down after the UpgradeInstance crash.
    pub sapi_crash_restart_ms: u64,
    /// How CNAPI carries CommandExecute at start, and what seeding writes
    /// into SAPI. Later SAPI changes reach CNAPI only through config-agent
    /// ([`SimConfig::config_agent_poll_ms`], [`super::SimDc::config_agent_sync`]).
    pub execute_transport: ExecuteTransport,
    /// How often config-agent renders CNAPI's config from SAPI and
    /// restarts CNAPI when `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` changed.
    /// `None` (default): only when asked, so a test holds the window
    /// between SAPI and the running CNAPI open as long as it likes.
    pub config_agent_poll_ms: Option<u64>,
    /// How long CNAPI waits for Ur's answer to an execute that nothing
    /// answers (a mockcloud server, see [`Strictness`], a server whose
    /// ur-agent is down). Real CNAPI waits an hour (`Ur.execute`'s default
    /// `timeoutSeconds`).
    pub ur_reply_timeout_ms: u64,
    /// The cn-agent version uninstall-agents requires in `server.agents`
    /// (412 PreconditionFailed below it; without a cn-agent entry CNAPI
    /// crashes). Real CNAPI wants 2.8.0 (compared with node-semver: a
    /// build of 2.8.0 is below it), and the seeded cn-agent images are
    /// 2.9.0 builds, as real ones are 2.x.
    pub uninstall_min_cn_agent: String,
    /// How long CNAPI is down after it crashed (SMF restarts it) or
    /// [`super::SimDc::restart_cnapi`] without a time of its own.
    pub cnapi_restart_ms: u64,
    /// How long a server is away after Ur rebooted it (exit status 113).
    pub server_reboot_ms: u64,
    /// How long ServerGet takes while VMAPI is down
    /// ([`super::Faults::set_vmapi_down`]): the real one computes capacity
    /// through VMAPI, about 15 s with its client's retries.
    pub vmapi_down_server_get_ms: u64,
    pub sapi_timing: SapiTiming,
    /// How each server's GZ is laid out: a full rooted GZ (default; hooks
    /// run) or the mockcloud layout (three files per component; for
    /// thousands of servers and benchmarks). See [`super::gz`].
    pub gz_layout: GzLayout,
    pub faults: FaultConfig,
    pub strictness: Strictness,
    /// Compute nodes per rack (CNAPI `rack_identifier` `rack-01`,
    /// `rack-02`, ...); every 25th compute node and the headnode have none.
    /// 0: no racks.
    pub rack_size: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            servers: 3,
            rng_seed: 1,
            port: None,
            state_dir: None,
            datacenter: "coal".to_string(),
            dns_domain: "joyent.us".to_string(),
            update_channel: "release".to_string(),
            populate: Some(SeedSpec::default()),
            not_setup: Vec::new(),
            with_vms: BTreeMap::new(),
            cn_agent_restart_ms: 100,
            setup_job_ms: 50,
            factory_reset_ms: 50,
            sapi_crash_restart_ms: 0,
            execute_transport: ExecuteTransport::default(),
            config_agent_poll_ms: None,
            ur_reply_timeout_ms: 3_600_000,
            uninstall_min_cn_agent: "2.8.0".to_string(),
            cnapi_restart_ms: 2_000,
            server_reboot_ms: 2_000,
            vmapi_down_server_get_ms: 15_000,
            sapi_timing: SapiTiming::default(),
            gz_layout: GzLayout::default(),
            faults: FaultConfig::default(),
            strictness: Strictness::default(),
            rack_size: 40,
        }
    }
}

impl SimConfig {
    /// Whether the servers are mockcloud CNs without execute (the mockcloud
    /// layout, with [`Strictness::mockcloud_refuses_execute`]).
    pub fn mockcloud_without_execute(&self) -> bool {
        self.gz_layout == GzLayout::Mockcloud && self.strictness.mockcloud_refuses_execute
    }

    /// Read a scenario JSON file (fields as above; unknown fields are an
    /// error so a typo does not silently do nothing).
    pub fn from_scenario_file(path: &Path) -> Result<SimConfig, SimError> {
        let text = std::fs::read_to_string(path).map_err(|err| SimError::ScenarioRead {
            path: path.to_path_buf(),
            err,
        })?;
        serde_json::from_str(&text).map_err(|err| SimError::ScenarioParse {
            path: path.to_path_buf(),
            err,
        })
    }

    /// Number of compute nodes besides the headnode.
    pub fn servers(mut self, n: usize) -> Self {
        self.servers = n;
        self
    }

    pub fn rng_seed(mut self, seed: u64) -> Self {
        self.rng_seed = seed;
        self
    }

    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Populate with this spec on start.
    pub fn populate(mut self, spec: SeedSpec) -> Self {
        self.populate = Some(spec);
        self
    }

    /// Start with empty APIs: no images, no SAPI objects, and every server
    /// not set up (call [`super::SimDc::seed`] later, or set servers up
    /// through CNAPI).
    pub fn empty(mut self) -> Self {
        self.populate = None;
        self
    }

    /// Mark servers (hostnames or UUIDs) not set up.
    pub fn not_setup<S: Into<String>>(mut self, servers: impl IntoIterator<Item = S>) -> Self {
        self.not_setup.extend(servers.into_iter().map(Into::into));
        self
    }

    /// Give a server (hostname or UUID) `n` VMs.
    pub fn with_vms(mut self, server: impl Into<String>, n: usize) -> Self {
        self.with_vms.insert(server.into(), n);
        self
    }

    /// Servers (hostnames or UUIDs) whose status is `unknown`.
    pub fn not_running<S: Into<String>>(mut self, servers: impl IntoIterator<Item = S>) -> Self {
        self.faults
            .not_running
            .extend(servers.into_iter().map(Into::into));
        self
    }

    pub fn install_latency(mut self, spec: LatencySpec) -> Self {
        self.faults.install_latency = spec;
        self
    }

    pub fn faults(mut self, faults: FaultConfig) -> Self {
        self.faults = faults;
        self
    }

    pub fn cn_agent_restart(mut self, d: Duration) -> Self {
        self.cn_agent_restart_ms = d.as_millis() as u64;
        self
    }

    /// Compute nodes per rack (0: no racks).
    pub fn rack_size(mut self, n: usize) -> Self {
        self.rack_size = n;
        self
    }

    pub fn execute_transport(mut self, t: ExecuteTransport) -> Self {
        self.execute_transport = t;
        self
    }

    /// Lay servers' GZs out this way.
    pub fn gz_layout(mut self, layout: GzLayout) -> Self {
        self.gz_layout = layout;
        self
    }

    pub fn sapi_crash_restart(mut self, d: Duration) -> Self {
        self.sapi_crash_restart_ms = d.as_millis() as u64;
        self
    }

    pub fn strictness(mut self, s: Strictness) -> Self {
        self.strictness = s;
        self
    }

    pub fn ur_reply_timeout(mut self, d: Duration) -> Self {
        self.ur_reply_timeout_ms = d.as_millis() as u64;
        self
    }

    pub fn cnapi_restart(mut self, d: Duration) -> Self {
        self.cnapi_restart_ms = d.as_millis() as u64;
        self
    }

    pub fn server_reboot(mut self, d: Duration) -> Self {
        self.server_reboot_ms = d.as_millis() as u64;
        self
    }

    pub fn sapi_timing(mut self, t: SapiTiming) -> Self {
        self.sapi_timing = t;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_json_round_trips_and_rejects_typos() {
        let text = r#"{"servers": 50, "rng_seed": 7, "not_setup": ["cn0050"], "gz_layout": "mockcloud",
            "with_vms": {"cn0001": 2},
            "populate": {"version": "1.0.0", "dc_newer": "1.1.0"},
            "faults": {"install_latency": {"base_ms": 50, "jitter_ms": 20, "distribution": "lognormal"},
                       "slow_servers": {"servers": ["cn0003"], "factor": 10},
                       "failing_installs": {"rate": 0.02},
                       "api_bursts": {"cnapi": {"count": 3, "status": 503}}}}"#;
        let c: SimConfig = serde_json::from_str(text).unwrap();
        assert_eq!(c.servers, 50);
        assert_eq!(c.gz_layout, GzLayout::Mockcloud);
        assert_eq!(
            c.populate.as_ref().unwrap().dc_newer.as_deref(),
            Some("1.1.0")
        );
        assert_eq!(c.faults.install_latency.base_ms, 50);
        assert_eq!(c.datacenter, "coal");
        let back: SimConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert!(serde_json::from_str::<SimConfig>(r#"{"sevrers": 3}"#).is_err());
    }
}
