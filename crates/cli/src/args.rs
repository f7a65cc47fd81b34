//! The arguments the commands share, each declared once: the servers
//! (`-s`), the execution options of every changing command ([`RunArgs`],
//! turned into the library's [`RunSettings`] once), the step options of
//! `update`, `install`, `remove` and `revert` ([`StepArgs`]), where images
//! come from ([`ChannelArgs`]) and how tables are shown ([`TableArgs`]).

use std::time::Duration;

use clap::{ArgAction, Args};

use crate::settings::Settings;
use agentsadm_orchestrate::execute::DEFAULT_CONCURRENCY;
use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::execute::FailureBudget;
use agentsadm_orchestrate::outlier::OutlierPolicy;
use agentsadm_orchestrate::run::RunSettings;
use agentsadm_plan::HealthFlags;
use agentsadm_plan::RolloutPolicy;
use agentsadm_plan::TransportMode;
use agentsadm_types::output::TableOptions;

/// `-s SERVERS`: UUIDs or hostnames, comma-separated or repeated.
#[derive(Args, Clone, Debug, Default)]
pub struct ServersArg {
    /// Servers (UUIDs or hostnames), comma-separated or repeated.
    #[arg(short = 's', long = "servers", value_name = "SERVERS", value_delimiter = ',', action = ArgAction::Append, value_parser = server_name)]
    pub servers: Vec<String>,
}

/// `--transport`: how steps reach servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportArg {
    /// apm agents through CNAPI install-agent (works with any Triton),
    /// gz-tools, dockerlogger and sdcadm through `agentsadm gz` via execute.
    #[default]
    Auto,
    /// `agentsadm gz` on the server for everything (atomic installs).
    Execute,
    /// CNAPI install-agent / uninstall-agents only; other kinds are skipped.
    InstallAgent,
}

impl From<TransportArg> for TransportMode {
    fn from(arg: TransportArg) -> TransportMode {
        match arg {
            TransportArg::Auto => TransportMode::Auto,
            TransportArg::Execute => TransportMode::Execute,
            TransportArg::InstallAgent => TransportMode::InstallAgent,
        }
    }
}

/// The execution options of every command that changes the datacenter
/// (`update`, `install`, `remove`, `check --fix`, `adopt`, `server
/// delete|factory-reset`): one set, one validation, turned into the
/// library's [`RunSettings`] once.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Only show the plan.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
    /// Servers changed at once (`-J`: `-j` is `--json`).
    #[arg(short = 'J', long, default_value_t = DEFAULT_CONCURRENCY, value_name = "N", value_parser = at_least_one)]
    pub concurrency: usize,
    /// Servers of the first wave, which must pass before the rest start
    /// (default: 1 when the plan changes more than 20 servers, else 0; never
    /// the headnode).
    #[arg(long, value_name = "N")]
    pub canary: Option<usize>,
    /// Start no new server once more than N (or P% of the servers, at
    /// least one) have failed.
    #[arg(long, default_value = "5%", value_name = "N|P%")]
    pub max_failures: FailureBudget,
    /// At most N servers of one rack (CNAPI rack_identifier) at once.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub max_per_rack: Option<usize>,
    /// Give up on one step after this long (e.g. 30m).
    #[arg(long, value_parser = duration, default_value = "30m", value_name = "DURATION")]
    pub task_timeout: Duration,
    /// Take the datacenter lock even if another agentsadm holds it.
    #[arg(long)]
    pub break_lock: bool,
    /// On a headnode, wait this long for sdcadm's lock
    /// (/var/run/sdcadm.lock) when an sdcadm command holds it, then stop.
    #[arg(long, value_parser = duration, default_value = "1m", value_name = "DURATION")]
    pub sdcadm_lock_wait: Duration,
    /// When SAPI, CNAPI or IMGAPI stops answering mid-run, no new server
    /// starts and none counts as failed: wait this long for it to answer
    /// again, then stop with exit status 2 (0: stop at once).
    #[arg(long, value_parser = duration, default_value = "10m", value_name = "DURATION")]
    pub outage_wait: Duration,
    /// How long an API may take to answer a ping before it counts as not
    /// answering (more than 0).
    #[arg(long, value_parser = probe_timeout, default_value = "10s", value_name = "DURATION")]
    pub outage_probe_timeout: Duration,
}

/// How steps reach servers and are watched: `update`, `install`, `remove`.
#[derive(Args, Clone, Debug)]
pub struct StepArgs {
    /// How steps reach servers: auto (apm agents through CNAPI install-agent,
    /// other kinds through `agentsadm gz` via CNAPI execute), execute, install-agent.
    #[arg(long, value_enum, default_value_t = TransportArg::Auto)]
    pub transport: TransportArg,
    /// A server is an outlier past max(FACTOR x median, median + MARGIN);
    /// until 5 servers finished, its expected time (the catalog's install
    /// times) stands in for the median.
    #[arg(long, default_value_t = 3.0, value_name = "FACTOR")]
    pub outlier_factor: f64,
    /// The MARGIN above: at least this much over the median (e.g. 30s, 1s).
    #[arg(long, value_parser = duration, default_value = "30s", value_name = "DURATION")]
    pub outlier_margin: Duration,
    /// Stop waiting for any server that has run this long, from the first
    /// server on (its work may still complete on the server).
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub straggler_timeout: Option<Duration>,
    /// Health gate on each server: services must stay online this long
    /// after an install (default: the installer's, 10s on a real server).
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub min_healthy: Option<Duration>,
    /// Health gate: how long services may take to come online before the
    /// server's install is rolled back as unhealthy (default 2m).
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub health_timeout: Option<Duration>,
    /// Change components held with `agentsadm hold` on the servers named
    /// anyway (needs -y as well).
    #[arg(long)]
    pub ignore_holds: bool,
}

/// The options of `update`, `install` and `remove`: the run's and the
/// steps'.
#[derive(Args, Clone, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub steps: StepArgs,
}

impl RunArgs {
    /// The library's settings; `steps` for the commands that run steps
    /// with more than the defaults.
    pub fn settings(self, steps: Option<StepArgs>, here: &Settings) -> RunSettings {
        let mut options = ExecOptions {
            task_timeout: self.task_timeout,
            outage_wait: self.outage_wait,
            probe_bound: self.outage_probe_timeout,
            ..Default::default()
        };
        let mut transport = TransportMode::Auto;
        let mut ignore_holds = false;
        if let Some(s) = steps {
            transport = s.transport.into();
            ignore_holds = s.ignore_holds;
            options.outlier = OutlierPolicy {
                factor: s.outlier_factor,
                margin: s.outlier_margin,
                ..Default::default()
            };
            options.straggler_timeout = s.straggler_timeout;
            options.health =
                (s.min_healthy.is_some() || s.health_timeout.is_some()).then(|| HealthFlags {
                    min_healthy: s.min_healthy.unwrap_or(Duration::from_secs(10)),
                    timeout: s.health_timeout.unwrap_or(Duration::from_secs(120)),
                });
        }
        RunSettings {
            dry_run: self.dry_run,
            yes: self.yes,
            break_lock: self.break_lock,
            transport,
            rollout: RolloutPolicy {
                concurrency: self.concurrency,
                canary: self.canary,
                max_failures: Some(self.max_failures),
                max_per_rack: self.max_per_rack,
            },
            ignore_holds,
            options,
            sdcadm_lock: here.sdcadm_lock(self.sdcadm_lock_wait),
            login: here.login.clone(),
        }
    }
}

impl ExecArgs {
    /// The library's settings: the run's and the steps'.
    pub fn settings(self, here: &Settings) -> RunSettings {
        self.run.settings(Some(self.steps), here)
    }
}

/// A duration as `--task-timeout` and friends take it, with an example
/// when it is not one.
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|_| {
        format!("{s:?} is not a duration: give a number and a unit, such as 90s, 5m, 1h or 1h30m")
    })
}

/// `--outage-probe-timeout`: a duration above zero (a ping that may take
/// no time would find every API down).
fn probe_timeout(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err(
            "must be more than 0: an API is given this long to answer a ping (e.g. 10s)"
                .to_string(),
        ),
        d => Ok(d),
    }
}

/// `-J N`, `--max-per-rack N`: at least one server at a time.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1 (servers at once)".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a number of servers")),
    }
}

/// One name of `-s SERVERS`: not empty (`-s ''` would select nothing, or
/// everything, silently).
fn server_name(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        Err("empty server name: give UUIDs or hostnames, comma-separated".to_string())
    } else {
        Ok(s.to_string())
    }
}

/// Where images come from (`--source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceArg {
    /// The update channel of the updates server (sdcadm's rule).
    Updates,
    /// Only the datacenter IMGAPI: nothing outside the datacenter is
    /// contacted (air-gapped datacenters).
    Dc,
}

/// Where images come from.
#[derive(Args, Clone, Debug, Default)]
pub struct ChannelArgs {
    /// The update channel of the updates server (default: SAPI's
    /// update_channel, else the server's default channel). `avail` only
    /// lists what is there; `update` and `install` import the image they
    /// take into the datacenter IMGAPI.
    #[arg(short = 'C', long, value_name = "CHANNEL")]
    pub channel: Option<String>,
    /// The updates server (default: UPDATES_URL, else updatesServerUrl in
    /// the headnode's sdcadm configuration).
    #[arg(long, value_name = "URL")]
    pub updates_url: Option<String>,
    /// Where images come from: updates (the update channel of the updates
    /// server) or dc (only the datacenter IMGAPI: for air-gapped
    /// datacenters, nothing outside the datacenter is contacted).
    #[arg(long, value_enum, value_name = "SOURCE")]
    pub source: Option<SourceArg>,
}

/// How `list`, `avail` and `history` show their tables, as `sdcadm insts`
/// does.
#[derive(Args, Clone, Debug, Default)]
pub struct TableArgs {
    /// Leave out the header line.
    #[arg(short = 'H')]
    pub no_header: bool,
    /// Only these columns, in this order (comma-separated names from the
    /// header, any case: `list -o hostname,component,version`, `avail -o
    /// component,version,note`).
    #[arg(short = 'o', value_name = "COLUMNS", value_delimiter = ',')]
    pub columns: Vec<String>,
    /// Sort by these columns (comma-separated; `-NAME` for descending).
    #[arg(
        long = "sort",
        value_name = "SORT",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    pub sort: Vec<String>,
}

impl TableArgs {
    /// The table options, sorting by `default_sort` unless told otherwise.
    pub fn options(&self, default_sort: &[&str]) -> TableOptions {
        TableOptions {
            no_header: self.no_header,
            columns: self.columns.clone(),
            sort: if self.sort.is_empty() {
                default_sort.iter().map(|s| s.to_string()).collect()
            } else {
                self.sort.clone()
            },
        }
    }
}
