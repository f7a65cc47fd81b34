//! The orchestrator's commands: list, avail, plan, update, install, remove
//! and adopt.
//!
//! Every changing command goes the same way, through the library's one run
//! ([`agentsadm_orchestrate::run::Run`]): plan, show, stop there with `-n`,
//! take the datacenter lock, plan again under it, ask (or take `-y`),
//! import images, execute with progress; the command line renders the
//! plan and the summary. `--json` prints one document instead of text. Exit status: 0 converged, 1 nothing done (bad input, API down,
//! lock held, declined), 2 finished with failed or skipped servers.
//!
//! - [`change`]: the commands `plan`, `update`, `install` and `remove`;
//! - [`list`]: the command `list` (per server, or `--summary`);
//! - [`avail`]: the command `avail`;
//! - [`adopt`]: the command `adopt`;
//! - [`marks`]: `disable`, `enable`, `hold` and `release` (issue 25).
//! - [`history`]: the command `history` (the runs recorded);
//! - [`revert`]: the command `revert` (put back what a run changed).
//!
//! This module holds the arguments they share ([`RunArgs`], flattened into
//! every changing command, and [`StepArgs`]), turned into the library's
//! [`RunSettings`] once.

use agentsadm_types::component::ComponentName;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgAction, Args};

use agentsadm_api::ApiConfig;

use agentsadm_api::Apis;

use agentsadm_api::ImgapiClient;
use agentsadm_orchestrate::execute::DEFAULT_CONCURRENCY;
use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::execute::FailureBudget;
use agentsadm_orchestrate::lock::SdcadmLockOptions;
use agentsadm_orchestrate::outlier::OutlierPolicy;
use agentsadm_orchestrate::run::RunSettings;
use agentsadm_plan::HealthFlags;
use agentsadm_plan::RolloutPolicy;
use agentsadm_plan::TransportMode;

pub mod adopt;
pub mod avail;
pub mod change;
pub mod history;
pub mod list;
pub mod marks;
pub mod racks;
pub mod revert;
pub mod timeline;

pub use adopt::{AdoptArgs, run_adopt};
pub use avail::{AvailArgs, run_avail};
pub use change::{
    InstallArgs, PlanArgs, PlanCommand, RemoveArgs, UpdateArgs, run_install, run_plan, run_remove,
    run_update,
};
pub use history::{HistoryArgs, run_history};
pub use list::{ListArgs, ListRow, ListSummaryRow, list_rows, list_summary, run_list};
pub use marks::{
    DisableArgs, EnableArgs, HoldArgs, ReleaseArgs, run_disable, run_enable, run_hold, run_release,
};
pub use revert::{RevertArgs, run_revert};

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

/// Where sdcadm keeps its lock on this host: `AGENTSADM_SDCADM_LOCK` when
/// set (empty: none, for a datacenter without sdcadm), else sdcadm's own
/// path when sdcadm is installed here (a headnode). `None`: no sdcadm to
/// keep out.
pub(crate) fn sdcadm_lock_here(wait: Duration) -> Option<SdcadmLockOptions> {
    match std::env::var_os("AGENTSADM_SDCADM_LOCK") {
        Some(p) if p.is_empty() => None,
        Some(p) => Some(SdcadmLockOptions {
            path: p.into(),
            wait,
        }),
        None => std::path::Path::new("/opt/smartdc/sdcadm/etc/buildstamp")
            .exists()
            .then(|| SdcadmLockOptions::headnode(wait)),
    }
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
    pub fn settings(self, steps: Option<StepArgs>) -> RunSettings {
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
            sdcadm_lock: sdcadm_lock_here(self.sdcadm_lock_wait),
        }
    }
}

impl From<ExecArgs> for RunSettings {
    fn from(a: ExecArgs) -> RunSettings {
        a.run.settings(Some(a.steps))
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

/// What `--latest` takes, said the same way in `update --help`, the
/// README and the plan's first line.
pub const LATEST_RULE: &str =
    "--latest takes the newest image in the update channel of the updates server";
/// What `--latest --source dc` takes (air-gapped datacenters).
pub const LATEST_DC_RULE: &str =
    "--latest --source dc takes the newest image already in the datacenter IMGAPI";

/// The updates server a command uses, and where its URL and channel came
/// from (for the plan's first line and `avail`'s).
pub(crate) struct UpdatesServer {
    pub client: ImgapiClient,
    /// `--updates-url`, `UPDATES_URL` or the sdcadm configuration file.
    pub url_from: String,
    /// `-C`, `SAPI's update_channel`, or none (the server's default).
    pub channel_from: Option<&'static str>,
}

/// No updates server is configured where one is needed: said instead of
/// looking up a public name (which an air-gapped datacenter cannot).
#[derive(Debug, thiserror::Error)]
#[error(
    "no updates server is configured: pass --updates-url URL or set UPDATES_URL (on a headnode, agentsadm reads updatesServerUrl from sdcadm's configuration: /{conf} or /{defaults}); in an air-gapped datacenter use --source dc ({dc_rule})",
    dc_rule = LATEST_DC_RULE,
    conf = agentsadm_platform::sdcadm_config::SDCADM_CONF,
    defaults = agentsadm_platform::sdcadm_config::SDCADM_DEFAULTS
)]
pub struct NoUpdatesServer;

/// What a command wants from the updates server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// `--latest`: the updates server unless `--source dc`.
    Latest,
    /// An image to look up or list: the updates server only when asked
    /// for (`--source updates`, `-C`, `--updates-url` or `UPDATES_URL`).
    Lookup,
}

/// The updates server's URL and where it came from: `--updates-url`, else
/// `UPDATES_URL`, else sdcadm's `updatesServerUrl` on this headnode.
fn updates_url(source: &ChannelArgs, sdcadm: bool) -> Option<(String, String)> {
    let given = |v: Option<String>| v.filter(|u| !u.trim().is_empty());
    if let Some(u) = given(source.updates_url.clone()) {
        return Some((u, "--updates-url".to_string()));
    }
    // `UPDATES_URL=` (set but empty) is no URL.
    if let Some(u) = given(std::env::var("UPDATES_URL").ok()) {
        return Some((u, "UPDATES_URL".to_string()));
    }
    if !sdcadm {
        return None;
    }
    agentsadm_platform::sdcadm_updates_url(std::path::Path::new("/")).map(|(u, from)| {
        (
            u,
            format!("sdcadm's updatesServerUrl in {}", from.display()),
        )
    })
}

fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// The updates server, when the command needs one (see [`Want`]), with
/// its channel: `-C`, else the `sdc` application's `update_channel` (as
/// sdcadm does), else the updates server's default. `None` with
/// `--source dc`, or for a lookup nobody pointed at an updates server.
pub(crate) async fn updates_client(
    apis: &Apis,
    source: &ChannelArgs,
    want: Want,
) -> anyhow::Result<Option<UpdatesServer>> {
    let channel_flag = source.channel.clone().filter(|c| !c.trim().is_empty());
    if source.source == Some(SourceArg::Dc) {
        if channel_flag.is_some() || source.updates_url.is_some() {
            anyhow::bail!(
                "--source dc takes images only from the datacenter IMGAPI; drop -C and --updates-url, or use --source updates"
            );
        }
        return Ok(None);
    }
    let asked =
        want == Want::Latest || source.source == Some(SourceArg::Updates) || channel_flag.is_some();
    let Some((url, url_from)) = updates_url(source, asked) else {
        if asked {
            return Err(NoUpdatesServer.into());
        }
        return Ok(None);
    };
    let mut channel_from = channel_flag.as_ref().map(|_| "-C");
    let mut channel = channel_flag;
    if channel.is_none()
        && let Ok(Some(app)) = apis.sapi.sdc_application().await
    {
        channel = app
            .metadata
            .get("update_channel")
            .and_then(|v| v.as_str())
            .filter(|c| !c.trim().is_empty())
            .map(str::to_string);
        channel_from = channel.as_ref().map(|_| "SAPI's update_channel");
    }
    let client = ImgapiClient::new(&url, ApiConfig::default())
        .with_context(|| format!("invalid updates server URL {url:?} (from {url_from})"))?
        .with_channel(channel);
    Ok(Some(UpdatesServer {
        client,
        url_from,
        channel_from,
    }))
}

/// Where the images of a command come from, in words: `channel release
/// (SAPI's update_channel) of http://... (UPDATES_URL)`, or the
/// datacenter IMGAPI's URL.
fn source_words(updates: Option<&UpdatesServer>, dc: &ImgapiClient) -> String {
    match updates {
        Some(u) => {
            let channel = match (u.client.channel(), u.channel_from) {
                (Some(c), Some(from)) => format!("channel {c} ({from})"),
                (Some(c), None) => format!("channel {c}"),
                (None, _) => "the default channel".to_string(),
            };
            format!(
                "{channel} of the updates server {} ({})",
                u.client.base_url(),
                u.url_from
            )
        }
        None => format!("the datacenter IMGAPI {}", dc.base_url()),
    }
}

/// The plan's first line under `--latest`: the rule, then what it came to.
fn latest_target_line(
    components: &[ComponentName],
    updates: Option<&UpdatesServer>,
    dc: &ImgapiClient,
) -> String {
    let what = match components {
        [] => "each component".to_string(),
        many => many
            .iter()
            .map(ComponentName::as_str)
            .collect::<Vec<_>>()
            .join(", "),
    };
    let rule = if updates.is_some() {
        LATEST_RULE
    } else {
        LATEST_DC_RULE
    };
    format!("{rule}: {what} from {}", source_words(updates, dc))
}

/// Ask a yes/no question on the terminal (no by default).
pub(crate) async fn confirm(question: &str) -> anyhow::Result<bool> {
    let question = question.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        eprint!("{question} [y/N] ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
    })
    .await
    .context("cannot read the answer")?
}

/// Whether someone can answer a question.
pub(crate) fn stdin_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal()
}
