//! The orchestrator's commands: list, avail, plan, update, install, remove
//! and adopt.
//!
//! Every changing command goes the same way: gather intent and reality,
//! resolve images, plan (pure), print the plan, stop there with `-n`, ask
//! (or take `-y`), take the datacenter lock, import images, execute with
//! progress, print the summary. `--json` prints one document instead of
//! text. Exit status: 0 converged, 1 nothing done (bad input, API down,
//! lock held, declined), 2 finished with failed or skipped servers.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{ArgAction, Args, Subcommand};
use serde::Serialize;
use serde_json::json;

use super::{CmdResult, EXIT_PARTIAL, GlobalOpts};
use crate::api::{ApiConfig, Apis, ImgapiClient};
use crate::catalog::{Catalog, Component};
use crate::ids::{ImageUuid, InstanceUuid, ServerUuid};
use crate::orchestrate::adopt;
use crate::orchestrate::display::DEFAULT_MAX_SERVERS;
use crate::orchestrate::execute::{DEFAULT_CONCURRENCY, ExecOptions};
use crate::orchestrate::gather;
use crate::orchestrate::images::{self, ImageChoice};
use crate::orchestrate::lock::{self, DcLock, LockOptions, SapiLockStore};
use crate::orchestrate::outlier::OutlierPolicy;
use crate::orchestrate::plan::{
    ComponentSelection, Operation, Plan, Request, ServerSelection, TransportMode, resolve_servers,
};
use crate::orchestrate::progress::{CliProgress, ProgressMode};
use crate::orchestrate::session::Session;
use crate::orchestrate::transport::CnapiTransportConfig;
use crate::orchestrate::{Intent, Reality};
use crate::output::{Output, table};

/// The updates server sdcadm uses by default.
pub const DEFAULT_UPDATES_URL: &str = "https://updates.tritondatacenter.com";

/// `-s SERVERS`: UUIDs or hostnames, comma-separated or repeated.
#[derive(Args, Clone, Debug, Default)]
pub struct ServersArg {
    /// Servers (UUIDs or hostnames), comma-separated or repeated.
    #[arg(short = 's', long = "servers", value_name = "SERVERS", value_delimiter = ',', action = ArgAction::Append)]
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

/// Options of every changing command.
#[derive(Args, Clone, Debug)]
pub struct ExecArgs {
    /// Only show the plan.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
    /// Servers changed at once.
    #[arg(short = 'j', long, default_value_t = DEFAULT_CONCURRENCY, value_name = "N")]
    pub concurrency: usize,
    /// How steps reach servers: auto (apm agents through CNAPI install-agent,
    /// other kinds through `agentsadm gz` via CNAPI execute), execute, install-agent.
    #[arg(long, value_enum, default_value_t = TransportArg::Auto)]
    pub transport: TransportArg,
    /// Give up on one step after this long (e.g. 30m).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30m", value_name = "DURATION")]
    pub task_timeout: Duration,
    /// A server is an outlier past max(FACTOR x median, median + MARGIN).
    #[arg(long, default_value_t = 3.0, value_name = "FACTOR")]
    pub outlier_factor: f64,
    /// The MARGIN above: at least this much over the median (e.g. 30s, 1s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s", value_name = "DURATION")]
    pub outlier_margin: Duration,
    /// Once only outliers are left, stop waiting for them after this long.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub straggler_timeout: Option<Duration>,
    /// Take the datacenter lock even if another agentsadm holds it.
    #[arg(long)]
    pub break_lock: bool,
}

/// Where images come from.
#[derive(Args, Clone, Debug, Default)]
pub struct ChannelArgs {
    /// Look for images on the updates server in this channel (and import
    /// them into the datacenter IMGAPI).
    #[arg(short = 'C', long, value_name = "CHANNEL")]
    pub channel: Option<String>,
    /// The updates server (default: `https://updates.tritondatacenter.com`).
    #[arg(long, env = "UPDATES_URL", value_name = "URL")]
    pub updates_url: Option<String>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only these components.
    #[arg(value_name = "COMPONENT")]
    pub components: Vec<String>,
    #[command(flatten)]
    pub servers: ServersArg,
    /// One line per component and installed image, with how many servers
    /// run it and in which state (for fleets too large to list per server).
    #[arg(long)]
    pub summary: bool,
}

#[derive(Args, Debug)]
pub struct AvailArgs {
    /// Only these components (default: all).
    #[arg(value_name = "COMPONENT")]
    pub components: Vec<String>,
    #[command(flatten)]
    pub source: ChannelArgs,
    /// Also list images older than the oldest one in use.
    #[arg(long)]
    pub all_images: bool,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub command: PlanCommand,
}

#[derive(Subcommand, Debug)]
pub enum PlanCommand {
    /// The plan of `agentsadm update`.
    Update(UpdateArgs),
    /// The plan of `agentsadm install`.
    Install(InstallArgs),
    /// The plan of `agentsadm remove`.
    Remove(RemoveArgs),
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// Components to update.
    #[arg(value_name = "COMPONENT")]
    pub components: Vec<String>,
    /// Every bulk-updatable managed component (never marlin-agent).
    #[arg(short = 'a', long, conflicts_with = "components")]
    pub all: bool,
    /// Update to this image (one component only).
    #[arg(long, value_name = "UUID", conflicts_with = "latest")]
    pub image: Option<ImageUuid>,
    /// Update to the newest image (of the updates server's channel with
    /// --channel, else of the datacenter IMGAPI).
    #[arg(long)]
    pub latest: bool,
    #[command(flatten)]
    pub source: ChannelArgs,
    #[command(flatten)]
    pub servers: ServersArg,
    /// Servers to leave alone (UUIDs or hostnames).
    #[arg(short = 'x', long, value_name = "SERVERS", value_delimiter = ',', action = ArgAction::Append)]
    pub exclude: Vec<String>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// The component to install.
    #[arg(value_name = "COMPONENT")]
    pub component: String,
    /// The image (default: the SAPI service's params.image_uuid).
    #[arg(long, value_name = "UUID")]
    pub image: Option<ImageUuid>,
    #[command(flatten)]
    pub source: ChannelArgs,
    #[command(flatten)]
    pub servers: ServersArg,
    /// Every set-up server that lacks the component.
    #[arg(long, conflicts_with = "servers")]
    pub all_servers: bool,
    /// Servers to leave alone (UUIDs or hostnames).
    #[arg(short = 'x', long, value_name = "SERVERS", value_delimiter = ',', action = ArgAction::Append)]
    pub exclude: Vec<String>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The component to remove.
    #[arg(value_name = "COMPONENT")]
    pub component: String,
    #[command(flatten)]
    pub servers: ServersArg,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Args, Debug)]
pub struct AdoptArgs {
    #[command(flatten)]
    pub servers: ServersArg,
    /// Only show what would be adopted.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
    /// Take the datacenter lock even if another agentsadm holds it.
    #[arg(long)]
    pub break_lock: bool,
    /// Adopt what this server's own global zone has installed instead of
    /// what CNAPI reports (headnode setup, before CNAPI exists).
    #[arg(long, conflicts_with = "servers")]
    pub local: bool,
    /// The global zone root for --local.
    #[arg(long, value_name = "DIR", default_value = "/", requires = "local")]
    pub root: std::path::PathBuf,
}

/// A changing command, normalised.
#[derive(Debug)]
struct Change {
    request: Request,
    choice: ImageChoice,
    source: ChannelArgs,
    exec: ExecArgs,
}

impl UpdateArgs {
    fn change(self, catalog: &Catalog) -> anyhow::Result<Change> {
        if !self.all && self.components.is_empty() {
            bail!("name the components to update, or pass --all");
        }
        for c in &self.components {
            catalog.require(c)?;
        }
        if self.image.is_some() && (self.all || self.components.len() != 1) {
            bail!("--image needs exactly one component (run one update per image)");
        }
        Ok(Change {
            request: Request {
                operation: Operation::Update,
                components: if self.all {
                    ComponentSelection::All
                } else {
                    ComponentSelection::Named(self.components)
                },
                servers: servers_selection(self.servers.servers),
                exclude: self.exclude,
            },
            choice: match (self.image, self.latest) {
                (Some(i), _) => ImageChoice::Image(i),
                (None, true) => ImageChoice::Latest,
                (None, false) => ImageChoice::Intent,
            },
            source: self.source,
            exec: self.exec,
        })
    }
}

impl InstallArgs {
    fn change(self, catalog: &Catalog) -> anyhow::Result<Change> {
        catalog.require(&self.component)?;
        if self.servers.servers.is_empty() && !self.all_servers {
            bail!("name the servers with -s SERVERS, or pass --all-servers");
        }
        Ok(Change {
            request: Request {
                operation: Operation::Install,
                components: ComponentSelection::Named(vec![self.component]),
                servers: servers_selection(self.servers.servers),
                exclude: self.exclude,
            },
            choice: self
                .image
                .map(ImageChoice::Image)
                .unwrap_or(ImageChoice::Intent),
            source: self.source,
            exec: self.exec,
        })
    }
}

impl RemoveArgs {
    fn change(self, catalog: &Catalog) -> anyhow::Result<Change> {
        catalog.require(&self.component)?;
        if self.servers.servers.is_empty() {
            bail!(
                "name the servers to remove {} from with -s SERVERS",
                self.component
            );
        }
        Ok(Change {
            request: Request {
                operation: Operation::Remove,
                components: ComponentSelection::Named(vec![self.component]),
                servers: servers_selection(self.servers.servers),
                exclude: Vec::new(),
            },
            choice: ImageChoice::Intent,
            source: ChannelArgs::default(),
            exec: self.exec,
        })
    }
}

fn servers_selection(names: Vec<String>) -> ServerSelection {
    if names.is_empty() {
        ServerSelection::All
    } else {
        ServerSelection::Named(names)
    }
}

fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// The updates server client, when `--channel` or `--updates-url` asks
/// for one. Without `--channel`, the channel is the `sdc` application's
/// `update_channel` (as sdcadm does).
async fn updates_client(apis: &Apis, source: &ChannelArgs) -> anyhow::Result<Option<ImgapiClient>> {
    if source.channel.is_none() && source.updates_url.is_none() {
        return Ok(None);
    }
    let url = source.updates_url.as_deref().unwrap_or(DEFAULT_UPDATES_URL);
    let mut channel = source.channel.clone();
    if channel.is_none()
        && let Ok(Some(app)) = apis.sapi.sdc_application().await
    {
        channel = app
            .metadata
            .get("update_channel")
            .and_then(|v| v.as_str())
            .map(str::to_string);
    }
    let client = ImgapiClient::new(url, ApiConfig::default())
        .with_context(|| format!("invalid updates server URL {url:?}"))?
        .with_channel(channel);
    Ok(Some(client))
}

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

pub(crate) fn stdin_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal()
}

pub(crate) async fn take_lock<'a>(
    store: &'a SapiLockStore,
    operation: &str,
    break_lock: bool,
    out: &Output,
) -> anyhow::Result<DcLock<'a>> {
    let options = LockOptions {
        break_lock,
        ..LockOptions::default()
    };
    let l = lock::acquire(store, &lock::this_owner(), operation, &options).await?;
    if let Some(old) = &l.broke {
        out.warn(format!(
            "broke the orchestrator lock of {} ({:?}, last seen {})",
            old.owner, old.operation, old.refreshed
        ));
    }
    Ok(l)
}

/// plan / update / install / remove.
async fn run_change(g: &GlobalOpts, change: Change, plan_only: bool) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let updates = updates_client(&apis, &change.source).await?;
    let session = Session {
        apis: &apis,
        catalog: &catalog,
        updates: updates.as_ref(),
    };
    let plan = session
        .plan(&change.request, change.choice, change.exec.transport.into())
        .await?
        .plan;

    let max = if g.verbose > 0 {
        usize::MAX
    } else {
        DEFAULT_MAX_SERVERS
    };
    if !out.json {
        out.line(plan.display_compact(max).to_string().trim_end());
    }
    let partial = if plan.has_blocking_skips() {
        EXIT_PARTIAL
    } else {
        0
    };
    if plan_only || change.exec.dry_run || plan.is_empty() {
        if out.json {
            out.json(&json!({"plan": plan, "executed": false, "exit_status": if plan_only || change.exec.dry_run { 0 } else { partial }}));
        }
        if plan_only || change.exec.dry_run {
            return Ok(exit(0));
        }
        return Ok(exit(partial));
    }

    if plan.needs_explicit_yes && !change.exec.yes {
        for w in &plan.warnings {
            eprintln!("warning: {w}");
        }
        bail!(
            "this plan restarts components that abort running work; re-run with -y to confirm (nothing was changed)"
        );
    }
    if !change.exec.yes {
        if out.json || !stdin_is_terminal() {
            bail!("refusing to change servers without confirmation: pass -y (nothing was changed)");
        }
        for w in &plan.warnings {
            eprintln!("warning: {w}");
        }
        if !confirm("Proceed?").await? {
            out.line("Nothing was changed.");
            return Ok(exit(1));
        }
    }

    let lock_store = SapiLockStore::new(apis.sapi.clone()).await?;
    let mut dc_lock = take_lock(
        &lock_store,
        &format!("{} {}", plan.operation, plan.components.join(",")),
        change.exec.break_lock,
        &out,
    )
    .await?;
    let result = execute_locked(g, &out, &session, &plan, &change.exec, &mut dc_lock).await;
    if let Err(e) = dc_lock.release().await {
        out.warn(format!("cannot release the orchestrator lock: {e:#}"));
    }
    let report = result?;
    let status = report.exit_status(&plan);
    if out.json {
        out.json(&json!({
            "plan": plan,
            "executed": true,
            "result": report,
            "summary": report.summary(&plan),
            "exit_status": status,
        }));
    } else if !out.quiet || status != 0 {
        println!("\n{}", report.render(&plan).trim_end());
    }
    Ok(exit(status))
}

async fn execute_locked(
    g: &GlobalOpts,
    out: &Output,
    session: &Session<'_>,
    plan: &Plan,
    exec: &ExecArgs,
    dc_lock: &mut DcLock<'_>,
) -> anyhow::Result<crate::orchestrate::report::ExecReport> {
    if !plan.imports.is_empty() {
        out.line(format!(
            "Importing {} image(s) into the datacenter IMGAPI...",
            plan.imports.len()
        ));
    }
    let progress = CliProgress::new(
        ProgressMode::detect(g.json, g.quiet),
        plan.operation.as_str(),
    );
    let options = ExecOptions {
        concurrency: exec.concurrency.max(1),
        task_timeout: exec.task_timeout,
        outlier: OutlierPolicy {
            factor: exec.outlier_factor,
            margin: exec.outlier_margin,
            ..Default::default()
        },
        straggler_timeout: exec.straggler_timeout,
        ..Default::default()
    };
    let transport = CnapiTransportConfig {
        execute_timeout: exec.task_timeout,
        ..Default::default()
    };
    let cancel = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let reporter = g.reporter(&progress);
    let run = session.execute(plan, &options, transport, &reporter, cancel);
    tokio::pin!(run);
    let mut refresh = tokio::time::interval(LockOptions::default().refresh_every);
    refresh.tick().await;
    loop {
        tokio::select! {
            r = &mut run => return Ok(r?),
            _ = refresh.tick() => {
                if let Err(e) = dc_lock.refresh().await {
                    out.warn(format!("{e:#}"));
                }
            }
        }
    }
}

pub async fn run_plan(g: &GlobalOpts, a: PlanArgs) -> CmdResult {
    let catalog = g.load_catalog()?;
    let change = match a.command {
        PlanCommand::Update(u) => u.change(&catalog)?,
        PlanCommand::Install(i) => i.change(&catalog)?,
        PlanCommand::Remove(r) => r.change(&catalog)?,
    };
    run_change(g, change, true).await
}

pub async fn run_update(g: &GlobalOpts, a: UpdateArgs) -> CmdResult {
    let change = a.change(&g.load_catalog()?)?;
    run_change(g, change, false).await
}

pub async fn run_install(g: &GlobalOpts, a: InstallArgs) -> CmdResult {
    let change = a.change(&g.load_catalog()?)?;
    run_change(g, change, false).await
}

pub async fn run_remove(g: &GlobalOpts, a: RemoveArgs) -> CmdResult {
    let change = a.change(&g.load_catalog()?)?;
    run_change(g, change, false).await
}

/// One row of `agentsadm list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListRow {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageUuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceUuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intended_image: Option<ImageUuid>,
    /// ok, pending (intent differs), not-adopted, missing (intent without
    /// install), unmanaged.
    pub state: &'static str,
}

/// The rows of `agentsadm list` (pure).
pub fn list_rows(
    intent: &Intent,
    reality: &Reality,
    servers: &[ServerUuid],
    components: &[String],
) -> Vec<ListRow> {
    let mut rows = Vec::new();
    for uuid in servers {
        let Some(s) = reality.get(uuid) else {
            continue;
        };
        let mut names: Vec<&String> = s.components.keys().collect();
        if let Some(per) = intent.instances.get(uuid) {
            names.extend(per.keys());
        }
        names.sort();
        names.dedup();
        for name in names {
            if !components.is_empty() && !components.contains(name) {
                continue;
            }
            let installed = s.components.get(name);
            let inst = intent.instance(uuid, name);
            let intended = intent.intended_image(uuid, name);
            let state = match (installed, inst) {
                _ if !intent.is_managed(name) => "unmanaged",
                (Some(i), Some(_)) if i.image.is_some() && i.image == intended => "ok",
                (Some(_), Some(_)) => "pending",
                (Some(_), None) => "not-adopted",
                (None, _) => "missing",
            };
            rows.push(ListRow {
                server: *uuid,
                hostname: s.hostname.clone(),
                component: name.clone(),
                version: installed.map(|i| i.version.clone()),
                image: installed.and_then(|i| i.image),
                instance: installed.and_then(|i| i.instance).or(inst.map(|i| i.uuid)),
                intended_image: intended,
                state,
            });
        }
    }
    rows
}

/// One line of `agentsadm list --summary`: the servers running one
/// image of one component, counted by state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListSummaryRow {
    pub component: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageUuid>,
    pub servers: usize,
    pub states: BTreeMap<&'static str, usize>,
}

/// Group `list` rows by (component, version, image) (pure).
pub fn list_summary(rows: &[ListRow]) -> Vec<ListSummaryRow> {
    let mut groups: BTreeMap<(&str, Option<&str>, Option<ImageUuid>), ListSummaryRow> =
        BTreeMap::new();
    for r in rows {
        let g = groups
            .entry((r.component.as_str(), r.version.as_deref(), r.image))
            .or_insert_with(|| ListSummaryRow {
                component: r.component.clone(),
                version: r.version.clone(),
                image: r.image,
                servers: 0,
                states: BTreeMap::new(),
            });
        g.servers += 1;
        *g.states.entry(r.state).or_default() += 1;
    }
    groups.into_values().collect()
}

fn short(u: &impl ToString) -> String {
    u.to_string().chars().take(8).collect()
}

pub async fn run_list(g: &GlobalOpts, a: ListArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let mut components = Vec::new();
    for c in &a.components {
        components.push(catalog.require(c)?.name.clone());
    }
    let apis = g.apis()?;
    let (intent, reality) = gather::gather(&apis, &catalog).await?;
    let servers: Vec<ServerUuid> = if a.servers.servers.is_empty() {
        reality.servers.keys().copied().collect()
    } else {
        resolve_servers(&reality, &a.servers.servers)?
    };
    let rows = list_rows(&intent, &reality, &servers, &components);
    if a.summary {
        print_list_summary(&out, servers.len(), &rows);
        return Ok(exit(0));
    }
    if out.json {
        out.json(&rows);
        return Ok(exit(0));
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.hostname.clone(),
                r.component.clone(),
                r.version.clone().unwrap_or_else(|| "-".into()),
                r.image.map(|i| short(&i)).unwrap_or_else(|| "-".into()),
                r.intended_image
                    .map(|i| short(&i))
                    .unwrap_or_else(|| "-".into()),
                r.state.to_string(),
            ]
        })
        .collect();
    out.line(
        table(
            &[
                "HOSTNAME",
                "COMPONENT",
                "VERSION",
                "IMAGE",
                "INTENDED",
                "STATE",
            ],
            &cells,
        )
        .trim_end(),
    );
    Ok(exit(0))
}

fn print_list_summary(out: &Output, servers: usize, rows: &[ListRow]) {
    let summary = list_summary(rows);
    if out.json {
        out.json(&summary);
        return;
    }
    let states = |m: &BTreeMap<&str, usize>| {
        m.iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cells: Vec<Vec<String>> = summary
        .iter()
        .map(|r| {
            vec![
                r.component.clone(),
                r.version.clone().unwrap_or_else(|| "-".into()),
                r.image.map(|i| short(&i)).unwrap_or_else(|| "-".into()),
                r.servers.to_string(),
                states(&r.states),
            ]
        })
        .collect();
    out.line(
        table(
            &["COMPONENT", "VERSION", "IMAGE", "SERVERS", "STATES"],
            &cells,
        )
        .trim_end(),
    );
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *totals.entry(r.state).or_default() += 1;
    }
    out.line(format!(
        "{servers} servers, {} installed components ({}).",
        rows.len(),
        states(&totals)
    ));
}

pub async fn run_avail(g: &GlobalOpts, a: AvailArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let components: Vec<&Component> = if a.components.is_empty() {
        catalog.iter().collect()
    } else {
        a.components
            .iter()
            .map(|c| catalog.require(c))
            .collect::<Result<_, _>>()?
    };
    let apis = g.apis()?;
    let (intent, reality) = gather::gather(&apis, &catalog).await?;
    let updates = updates_client(&apis, &a.source).await?;
    let client = updates.as_ref().unwrap_or(&apis.imgapi);
    let rows = images::available(client, &components)
        .await
        .with_context(|| format!("cannot list images from {}", client.base_url()))?;
    // Servers running each image, and each service's default.
    let mut running: BTreeMap<ImageUuid, usize> = BTreeMap::new();
    for s in reality.servers.values() {
        for i in s.components.values() {
            if let Some(img) = i.image {
                *running.entry(img).or_default() += 1;
            }
        }
    }
    let defaults: BTreeMap<&str, ImageUuid> = intent
        .services
        .iter()
        .filter_map(|(n, s)| s.default_image.map(|i| (n.as_str(), i)))
        .collect();
    // Unless --all-images: from the oldest image in use on.
    let mut oldest: BTreeMap<&str, Option<String>> = BTreeMap::new();
    for r in &rows {
        if running.contains_key(&r.image) || defaults.get(r.component.as_str()) == Some(&r.image) {
            let e = oldest
                .entry(r.component.as_str())
                .or_insert(r.published_at.clone());
            if r.published_at < *e {
                *e = r.published_at.clone();
            }
        }
    }
    let shown: Vec<_> = rows
        .iter()
        .filter(|r| {
            a.all_images
                || match oldest.get(r.component.as_str()) {
                    Some(o) => r.published_at >= *o,
                    None => true,
                }
        })
        .map(|r| {
            json!({
                "component": r.component,
                "image": r.image,
                "version": r.version,
                "published_at": r.published_at,
                "servers": running.get(&r.image).copied().unwrap_or(0),
                "default": defaults.get(r.component.as_str()) == Some(&r.image),
            })
        })
        .collect();
    if out.json {
        out.json(&shown);
        return Ok(exit(0));
    }
    let cells: Vec<Vec<String>> = shown
        .iter()
        .map(|r| {
            vec![
                r["component"].as_str().unwrap_or("").to_string(),
                r["version"].as_str().unwrap_or("").to_string(),
                r["image"].as_str().unwrap_or("").to_string(),
                r["published_at"].as_str().unwrap_or("-").to_string(),
                r["servers"].to_string(),
                if r["default"].as_bool() == Some(true) {
                    "default".to_string()
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    out.line(
        table(
            &[
                "COMPONENT",
                "VERSION",
                "IMAGE",
                "PUBLISHED",
                "SERVERS",
                "NOTE",
            ],
            &cells,
        )
        .trim_end(),
    );
    Ok(exit(0))
}

pub async fn run_adopt(g: &GlobalOpts, a: AdoptArgs) -> CmdResult {
    if a.local {
        return super::flows::run_adopt_local(g, a).await;
    }
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let (intent, reality) = gather::gather(&apis, &catalog).await?;
    let servers = if a.servers.servers.is_empty() {
        None
    } else {
        Some(resolve_servers(&reality, &a.servers.servers)?)
    };
    let plan = adopt::plan_adoption(&catalog, &intent, &reality, servers.as_deref());
    if !out.json {
        out.line(plan.render().trim_end());
    }
    if a.dry_run || plan.is_empty() {
        if out.json {
            out.json(&json!({"plan": plan, "executed": false}));
        }
        return Ok(exit(0));
    }
    let lock_store = SapiLockStore::new(apis.sapi.clone()).await?;
    let dc_lock = take_lock(&lock_store, "adopt", a.break_lock, &out).await?;
    let result = adopt::adopt(&apis.sapi, &plan, &intent).await;
    if let Err(e) = dc_lock.release().await {
        out.warn(format!("cannot release the orchestrator lock: {e:#}"));
    }
    let report = result?;
    let status = if report.failures.is_empty() {
        0
    } else {
        EXIT_PARTIAL
    };
    if out.json {
        out.json(&json!({"plan": plan, "executed": true, "result": report, "exit_status": status}));
    } else {
        for (server, component, e) in &report.failures {
            eprintln!("error: cannot adopt {component} on {server}: {e}");
        }
        out.line(format!(
            "Adopted {} instances; created {} services; set {} default images.",
            report.instances_adopted, report.services_created, report.defaults_set
        ));
    }
    Ok(exit(status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrate::testkit::ExampleDc;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct T {
        #[command(subcommand)]
        c: C,
    }
    #[derive(Subcommand, Debug)]
    enum C {
        Update(UpdateArgs),
        Install(InstallArgs),
        Remove(RemoveArgs),
    }

    fn update(args: &[&str]) -> anyhow::Result<Change> {
        let t = T::try_parse_from(
            std::iter::once("t")
                .chain(std::iter::once("update"))
                .chain(args.iter().copied()),
        )?;
        match t.c {
            C::Update(u) => u.change(&Catalog::builtin()),
            _ => unreachable!(),
        }
    }

    #[test]
    fn update_arguments() {
        let c = update(&[
            "vm-agent", "-s", "cn1,cn2", "-s", "cn3", "-x", "cn4", "--latest", "-y", "-j", "5",
        ])
        .unwrap();
        assert_eq!(
            c.request.servers,
            ServerSelection::Named(vec!["cn1".into(), "cn2".into(), "cn3".into()])
        );
        assert_eq!(c.request.exclude, vec!["cn4".to_string()]);
        assert_eq!(c.choice, ImageChoice::Latest);
        assert_eq!(c.exec.concurrency, 5);
        assert!(c.exec.yes);
        assert!(update(&[]).unwrap_err().to_string().contains("--all"));
        assert!(
            update(&["vm-agnet"])
                .unwrap_err()
                .to_string()
                .contains("unknown component")
        );
        let img = "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f";
        assert!(
            update(&["vm-agent", "cn-agent", "--image", img])
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
        assert!(update(&["--all", "vm-agent"]).is_err());
        assert!(update(&["vm-agent", "--image", img, "--latest"]).is_err());
        let c = update(&[
            "--all",
            "--straggler-timeout",
            "10m",
            "--task-timeout",
            "5m",
        ])
        .unwrap();
        assert_eq!(c.exec.straggler_timeout, Some(Duration::from_secs(600)));
        assert_eq!(c.exec.task_timeout, Duration::from_secs(300));
        assert_eq!(c.exec.concurrency, 20);
        assert_eq!(c.exec.outlier_margin, Duration::from_secs(30));
        let c = update(&["--all", "--outlier-margin", "1s"]).unwrap();
        assert_eq!(c.exec.outlier_margin, Duration::from_secs(1));
    }

    #[test]
    fn install_and_remove_need_servers() {
        let t = T::try_parse_from(["t", "install", "dockerlogger"]).unwrap();
        let C::Install(i) = t.c else { unreachable!() };
        assert!(
            i.change(&Catalog::builtin())
                .unwrap_err()
                .to_string()
                .contains("--all-servers")
        );
        let t = T::try_parse_from(["t", "remove", "dockerlogger"]).unwrap();
        let C::Remove(r) = t.c else { unreachable!() };
        assert!(
            r.change(&Catalog::builtin())
                .unwrap_err()
                .to_string()
                .contains("-s SERVERS")
        );
    }

    #[test]
    fn list_states() {
        let mut dc = ExampleDc::new(1);
        let cn1 = dc.server_named("cn001");
        let newer = dc.publish("vm-agent", "2.0.0").uuid;
        dc.set_service_default("vm-agent", Some(newer));
        dc.sapi_merge_params(
            crate::orchestrate::testkit::instance_uuid(cn1, "vm-agent"),
            crate::orchestrate::store::instance_params(cn1, newer),
        );
        dc.drop_instance(cn1, "net-agent");
        dc.remove_installed(cn1, "cmon-agent");
        let rows = list_rows(&dc.intent(), &dc.reality(), &[cn1], &[]);
        let state = |c: &str| rows.iter().find(|r| r.component == c).map(|r| r.state);
        assert_eq!(state("vm-agent"), Some("pending"));
        assert_eq!(state("net-agent"), Some("not-adopted"));
        assert_eq!(state("cmon-agent"), Some("missing"));
        assert_eq!(state("smartlogin"), Some("ok"));
        let all: Vec<ServerUuid> = dc.reality().servers.keys().copied().collect();
        let rows = list_rows(&dc.intent(), &dc.reality(), &all, &[]);
        let summary = list_summary(&rows);
        assert_eq!(
            summary.iter().map(|r| r.servers).sum::<usize>(),
            rows.len(),
            "every row is counted once"
        );
        let vm: Vec<&ListSummaryRow> = summary
            .iter()
            .filter(|r| r.component == "vm-agent")
            .collect();
        assert_eq!(vm.len(), 1, "one image of vm-agent installed");
        assert_eq!(vm[0].states.get("pending"), Some(&1));
        assert_eq!(vm[0].states.get("ok"), Some(&(vm[0].servers - 1)));
    }
}
