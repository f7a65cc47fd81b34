//! Flow commands: `check` (drift, `--fix`), `server delete|factory-reset`,
//! `adopt --local` (headnode setup) and `installer ...` (the helpers the
//! scripts in `installer/` call).
//!
//! `server` prints its plan, asks (or takes `-y`), takes the datacenter
//! lock and carries it out. `check --fix` takes the lock first and checks
//! and plans under it, then executes only the repairs it showed and the
//! operator confirmed (fenced, as `update` is). `--json` prints one document. Exit status: 0 clean / done,
//! 1 nothing done (bad input, API down, refused, declined), 2 drift remains
//! or some repair / deletion failed (re-run to finish).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::json;

use super::execution::Execution;

use super::execution::interrupted;

use super::execution::refuse_if_locked;

use super::execution::with_dc_lock;

use super::CmdResult;
use super::GlobalOpts;
use super::execution::with_dc_lock_watched;
use super::orch::ServersArg;
use super::orch::confirm;
use super::orch::stdin_is_terminal;
use agentsadm_api::SapiClient;
use agentsadm_flows::check;
use agentsadm_flows::check::CheckConfig;
use agentsadm_flows::check::CheckRequest;
use agentsadm_flows::check::RepairOptions;
use agentsadm_flows::cleanup;
use agentsadm_flows::cleanup::ServerAction;
use agentsadm_flows::headnode;
use agentsadm_flows::repair::FixPlan;
use agentsadm_flows::setup_state::SetupState;
use agentsadm_flows::usbkey;
use agentsadm_gz::session::GzSettings;
use agentsadm_orchestrate::execute::DEFAULT_CONCURRENCY;
use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::fence::Fenced;
use agentsadm_orchestrate::fence::fence;
use agentsadm_types::ids::ImageUuid;

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub servers: ServersArg,
    /// Also ask each server for its own report (`agentsadm gz report`
    /// through CNAPI execute) and compare it with CNAPI.
    #[arg(long)]
    pub live: bool,
    /// Repair what can be repaired (shows the repairs and asks first).
    #[arg(long)]
    pub fix: bool,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
    /// Servers repaired (or asked for their report) at once.
    #[arg(short = 'j', long, default_value_t = DEFAULT_CONCURRENCY, value_name = "N")]
    pub concurrency: usize,
    /// Give up on one install or upgrade after this long.
    #[arg(long, value_parser = super::orch::duration, default_value = "30m", value_name = "DURATION")]
    pub task_timeout: Duration,
    /// Take the datacenter lock even if another agentsadm holds it.
    #[arg(long)]
    pub break_lock: bool,
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    #[command(subcommand)]
    pub command: ServerCommand,
}

#[derive(Subcommand, Debug)]
pub enum ServerCommand {
    /// Delete the server's SAPI agent instances, then its CNAPI record.
    Delete(ServerTarget),
    /// Delete the server's SAPI agent instances, then factory-reset it
    /// (refused, with nothing deleted, when it has VMs).
    FactoryReset(ServerTarget),
}

#[derive(Args, Debug)]
pub struct ServerTarget {
    /// The server (UUID or hostname).
    #[arg(value_name = "SERVER")]
    pub server: String,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
    /// Only show what would be deleted.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
    /// Take the datacenter lock even if another agentsadm holds it.
    #[arg(long)]
    pub break_lock: bool,
}

fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// Ask unless `-y`; refuse without a terminal. `Ok(false)`: declined.
async fn confirmed(yes: bool, json: bool, question: &str) -> anyhow::Result<bool> {
    if yes {
        return Ok(true);
    }
    if json || !stdin_is_terminal() {
        bail!("refusing to change anything without confirmation: pass -y (nothing was changed)");
    }
    confirm(question).await
}

impl CheckArgs {
    /// The executor's options for `--fix`.
    fn exec_options(&self) -> ExecOptions {
        ExecOptions {
            concurrency: self.concurrency.max(1),
            task_timeout: self.task_timeout,
            ..Default::default()
        }
    }
}

pub async fn run_check(g: &GlobalOpts, a: CheckArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let request = CheckRequest {
        servers: a.servers.servers.clone(),
        live: a.live,
    };
    let config = CheckConfig {
        concurrency: a.concurrency.max(1),
        ..CheckConfig::default()
    };
    let run = check::check(&apis, &catalog, &request, &config).await?;
    if !a.fix {
        if !out.json {
            out.line(run.render().trim_end());
        }
        let status = run.exit_status();
        if out.json {
            let mut doc = run.to_json();
            doc["exit_status"] = json!(status);
            out.json(&doc);
        }
        return Ok(exit(status));
    }

    // A first check without the lock: bad input, nothing to repair, or no
    // way to confirm ends here with nothing written (not even the lock).
    let unlocked = FixPlan::new(run, &catalog);
    if unlocked.repairs.is_empty() || (!a.yes && (out.json || !stdin_is_terminal())) {
        if !out.json {
            out.line(unlocked.render());
        }
        if unlocked.repairs.is_empty() {
            return Ok(fix_not_executed(&out, &unlocked));
        }
        refuse_downgrades(&out, &unlocked)?;
        bail!("refusing to change anything without confirmation: pass -y (nothing was changed)");
    }
    // A held lock is news before a long check, not after it.
    refuse_if_locked(&apis.sapi, a.break_lock).await?;
    let lost = AtomicBool::new(false);
    let work = fenced_fix(g, &apis, &catalog, &request, &config, &a, &lost);
    with_dc_lock_watched(&apis.sapi, "check --fix", a.break_lock, &out, &lost, work).await?
}

/// `check --fix` with nothing (left) to repair: the check's own status.
fn fix_not_executed(out: &agentsadm_types::output::Output, plan: &FixPlan) -> ExitCode {
    let status = plan.run.exit_status();
    if out.json {
        out.json(&json!({
            "check": plan.run.to_json(), "repairs": plan.repairs, "executed": false, "exit_status": status,
        }));
    }
    exit(status)
}

/// Repairs that downgrade a component need `-y`: say which, and refuse.
fn refuse_downgrades(out: &agentsadm_types::output::Output, plan: &FixPlan) -> anyhow::Result<()> {
    let downgrades = plan.repairs.downgrades();
    if downgrades.is_empty() {
        return Ok(());
    }
    for d in &downgrades {
        out.warn(format!("downgrade: {d}"));
    }
    bail!(
        "{} of these repairs downgrade{} a component to the image SAPI names; re-run with -y to confirm (nothing was changed)",
        downgrades.len(),
        if downgrades.len() == 1 { "s" } else { "" }
    );
}

/// Under the lock: check and plan the repairs, confirm, check again until
/// the repairs confirmed are the repairs that would run (fenced, as
/// `update` is), then repair.
async fn fenced_fix(
    g: &GlobalOpts,
    apis: &agentsadm_api::Apis,
    catalog: &agentsadm_types::catalog::Catalog,
    request: &CheckRequest,
    config: &CheckConfig,
    a: &CheckArgs,
    lost: &AtomicBool,
) -> CmdResult {
    let out = g.output();
    let first = FixPlan::new(check::check(apis, catalog, request, config).await?, catalog);
    if !out.json {
        out.line(first.render());
    }
    let fenced = fence(
        first,
        a.yes,
        |p: &FixPlan| p.repairs.is_empty(),
        async |p: &FixPlan| {
            refuse_downgrades(&out, p)?;
            confirm("Repair?").await
        },
        async || -> anyhow::Result<FixPlan> {
            Ok(FixPlan::new(
                check::check(apis, catalog, request, config).await?,
                catalog,
            ))
        },
        |again| {
            if !out.json {
                out.line("\nThe datacenter changed since the repairs were shown; checked again:");
                out.line(again.render());
            }
        },
    )
    .await?;
    let FixPlan { run, repairs: plan } = match fenced {
        Fenced::Confirmed(p) => p,
        Fenced::Empty(p) => return Ok(fix_not_executed(&out, &p)),
        Fenced::Declined => {
            out.line("Nothing was changed.");
            return Ok(exit(1));
        }
    };

    let execution = Execution::new(g, "repair", a.exec_options());
    let reporter = execution.reporter();
    let options = RepairOptions {
        exec: &execution.options,
        transport: &execution.transport,
        reporter: &reporter,
        lock_lost: Some(lost),
    };
    let outcome = check::fix(
        apis,
        catalog,
        request,
        config,
        &plan,
        options,
        interrupted(),
    )
    .await?;
    let status = outcome.exit_status();
    if out.json {
        out.json(&json!({
            "check": run.to_json(),
            "repairs": plan,
            "executed": true,
            "result": outcome.repairs,
            "after": outcome.after.to_json(),
            "exit_status": status,
        }));
        return Ok(exit(status));
    }
    let r = &outcome.repairs;
    for f in &r.failures {
        eprintln!("error: cannot {}: {}", f.what, f.message);
    }
    if let Some(servers) = &r.servers {
        out.line(format!("\n{}", servers.render(&plan.plan).trim_end()));
    }
    let steps_done = r
        .servers
        .as_ref()
        .map(|s| {
            s.servers
                .values()
                .flat_map(|o| &o.steps)
                .filter(|st| st.status == agentsadm_orchestrate::report::StepStatus::Done)
                .count()
        })
        .unwrap_or(0);
    out.line(format!(
        "\nRepaired: {} ({} server steps, {} CNAPI reports, {} SAPI writes, {} replaced instances deleted){}.",
        steps_done + r.reports_posted + r.sapi_done + r.replaced_deleted,
        steps_done,
        r.reports_posted,
        r.sapi_done,
        r.replaced_deleted,
        if r.failures.is_empty() {
            String::new()
        } else {
            format!("; {} failed", r.failures.len())
        }
    ));
    out.line(format!(
        "\nAfter repair:\n{}",
        outcome.after.render().trim_end()
    ));
    Ok(exit(status))
}

pub async fn run_server(g: &GlobalOpts, a: ServerArgs) -> CmdResult {
    let (action, target) = match a.command {
        ServerCommand::Delete(t) => (ServerAction::Delete, t),
        ServerCommand::FactoryReset(t) => (ServerAction::FactoryReset, t),
    };
    let out = g.output();
    let apis = g.apis()?;
    let plan = cleanup::prepare(&apis, action, &target.server).await?;
    if !out.json {
        out.line(plan.render().trim_end());
    }
    if target.dry_run {
        if out.json {
            out.json(&json!({"plan": plan, "executed": false, "exit_status": 0}));
        }
        return Ok(exit(0));
    }
    let question = match action {
        ServerAction::Delete => "Delete?",
        ServerAction::FactoryReset => "Factory-reset (this wipes the server)?",
    };
    if !confirmed(target.yes, out.json, question).await? {
        out.line("Nothing was changed.");
        return Ok(exit(1));
    }
    let operation = format!("server {} {}", action.as_str(), plan.server);
    let work = cleanup::execute(&apis, &plan);
    let report = with_dc_lock(&apis.sapi, &operation, target.break_lock, &out, work).await?;
    let status = report.exit_status();
    if out.json {
        out.json(&json!({"plan": plan, "executed": true, "result": report, "exit_status": status}));
    } else {
        let text = report.render(&plan);
        for line in text.lines() {
            if line.starts_with("error:") || line.starts_with("warning:") {
                eprintln!("{line}");
            } else {
                out.line(line);
            }
        }
    }
    Ok(exit(status))
}

#[derive(Args, Debug)]
pub struct InstallerArgs {
    #[command(subcommand)]
    pub command: InstallerCommand,
}

#[derive(Subcommand, Debug)]
pub enum InstallerCommand {
    /// Build (or add to) the USB key's per-component image directory:
    /// `<DIR>/<name>/<uuid>.{manifest,file}` and `<DIR>/index.json`.
    Build {
        /// The directory (e.g. the stage's `extra/agents`).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Make this image its component's default (repeatable); otherwise
        /// the newest image of each component is.
        #[arg(long = "default", value_name = "UUID")]
        defaults: Vec<ImageUuid>,
        /// Also copy this agentsshar in and point `latest` at it, for old
        /// tooling that still reads `/usbkey/extra/agents/latest`.
        #[arg(long, value_name = "FILE")]
        shar: Option<PathBuf>,
        /// Image files (each with its `.manifest` next to it) or manifests.
        #[arg(value_name = "IMAGE")]
        images: Vec<PathBuf>,
    },
    /// Import the directory's default images (every image with --all) into
    /// the datacenter IMGAPI (headnode setup, once IMGAPI runs).
    Import {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        #[arg(long)]
        all: bool,
    },
    /// Pack an agentsadm binary as its IMGAPI image:
    /// `DIR/agentsadm-<version>.{tar.gz,manifest}` (what `make release` runs).
    Release(super::release::ReleaseArgs),
    /// Read or update `/var/lib/setup.json` under a GZ root.
    State {
        /// The global zone root.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        #[command(subcommand)]
        command: StateCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum StateCommand {
    /// Record states as seen (and the last one as current).
    Add {
        #[arg(required = true, value_name = "STATE")]
        states: Vec<String>,
    },
    /// Set `complete: true`.
    Complete,
    /// Exit 0 if the state was seen, 1 if not.
    Has {
        #[arg(value_name = "STATE")]
        state: String,
    },
    /// Print the setup state.
    Show,
}

pub async fn run_installer(g: &GlobalOpts, a: InstallerArgs) -> CmdResult {
    let out = g.output();
    match a.command {
        InstallerCommand::Build {
            out: dir,
            defaults,
            shar,
            images,
        } => {
            let catalog = g.load_catalog()?;
            if images.is_empty() && defaults.is_empty() && shar.is_none() {
                bail!("name the image files to put in {}", dir.display());
            }
            let report = usbkey::build(&catalog, &dir, &images, &defaults, shar.as_deref())?;
            if out.json {
                out.json(&report);
            } else {
                out.line(format!(
                    "{}: {} images added; defaults:",
                    dir.display(),
                    report.added.len()
                ));
                for (name, image) in &report.index.images {
                    out.line(format!("  {name} {image}"));
                }
                if let Some(l) = &report.latest {
                    out.line(format!("  latest -> {l}"));
                }
            }
            Ok(exit(0))
        }
        InstallerCommand::Import { dir, all } => {
            let catalog = g.load_catalog()?;
            let imgapi = match &g.imgapi_url {
                Some(u) => {
                    agentsadm_api::ImgapiClient::new(u, agentsadm_api::ApiConfig::default())?
                }
                None => g.apis()?.imgapi,
            };
            let report = usbkey::import(&catalog, &imgapi, &dir, all).await?;
            if out.json {
                out.json(&report);
            } else {
                out.line(format!(
                    "Imported {} images into {} ({} already there).",
                    report.imported.len(),
                    imgapi.base_url(),
                    report.present.len()
                ));
            }
            Ok(exit(0))
        }
        InstallerCommand::Release(r) => super::release::run(g, r),
        InstallerCommand::State { root, command } => {
            let mut state = SetupState::load(&root)?;
            match command {
                StateCommand::Add { states } => {
                    for s in &states {
                        state.add(s);
                    }
                    state.save()?;
                }
                StateCommand::Complete => {
                    state.mark_complete();
                    state.save()?;
                }
                StateCommand::Has { state: s } => {
                    return Ok(exit(if state.has(&s) { 0 } else { 1 }));
                }
                StateCommand::Show => {
                    if out.json {
                        out.json(&state.to_json());
                    } else {
                        out.line(format!(
                            "complete: {}\nseen: {}",
                            state.is_complete(),
                            state.seen().join(", ")
                        ));
                    }
                }
            }
            Ok(exit(0))
        }
    }
}

/// `agentsadm adopt --local`: adopt what this GZ has installed.
pub async fn run_adopt_local(g: &GlobalOpts, a: super::orch::AdoptArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let sapi_url = match &g.sapi_url {
        Some(u) => u.clone(),
        None => super::read_sdc_config()
            .and_then(|c| c.get("sapi_domain")?.as_str().map(|d| format!("http://{d}")))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no SAPI URL: pass --sapi-url or set SAPI_URL (on a headnode it is read from /lib/sdc/config.sh)"
                )
            })?,
    };
    let sapi = SapiClient::new(&sapi_url, agentsadm_api::ApiConfig::default())?;
    let mut settings = GzSettings::new(&a.root);
    settings.catalog = catalog.clone();
    settings.no_sapi = true;
    settings.no_cnapi = true;
    let server = headnode::local_server(settings).await?;
    let (intent, plan) = headnode::plan(&sapi, &catalog, &server).await?;
    if !out.json {
        out.line(plan.render().trim_end());
    }
    if a.dry_run || plan.is_empty() {
        if out.json {
            out.json(&json!({"plan": plan, "executed": false}));
        }
        return Ok(exit(0));
    }
    let work = agentsadm_orchestrate::adopt::adopt(&sapi, &plan, &intent);
    let report = with_dc_lock(&sapi, "adopt --local", a.break_lock, &out, work).await??;
    let status = if report.failures.is_empty() { 0 } else { 2 };
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
