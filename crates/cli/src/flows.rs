//! Flow commands: `check` (drift, `--fix`), `server delete|factory-reset`,
//! `adopt --local` (headnode setup) and `installer ...` (the helpers the
//! scripts in `installer/` call).
//!
//! `check --fix`, `server` and `adopt --local` go through the library's one
//! run, as `update` does: `-n`, the datacenter lock, the plan made again
//! under it and after the prompt (fenced), the question or `-y`, the same
//! execution options (`-J`, `--canary`, `--max-failures`,
//! `--max-per-rack`, `--task-timeout`, `--break-lock`). `--json` prints one
//! document. Exit status: 0 clean / done,
//! 1 nothing done (bad input, API down, refused, declined), 2 drift remains
//! or some repair / deletion failed (re-run to finish).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::json;

use super::CmdResult;
use super::GlobalOpts;
use super::execution::CliOperator;
use super::execution::Execution;
use super::execution::interrupted;
use super::execution::run_error;
use super::orch::RunArgs;
use super::orch::ServersArg;
use agentsadm_api::SapiClient;
use agentsadm_flows::check;
use agentsadm_flows::check::CheckConfig;
use agentsadm_flows::check::CheckRequest;
use agentsadm_flows::check::CheckRun;
use agentsadm_flows::check::FixOutcome;
use agentsadm_flows::check::FixPlanner;
use agentsadm_flows::cleanup;
use agentsadm_flows::cleanup::CleanupPlan;
use agentsadm_flows::cleanup::CleanupPlanner;
use agentsadm_flows::cleanup::ServerAction;
use agentsadm_flows::headnode;
use agentsadm_flows::repair::FixPlan;
use agentsadm_flows::repair::RepairPlan;
use agentsadm_flows::setup_state::SetupState;
use agentsadm_flows::usbkey;
use agentsadm_gz::session::GzSettings;
use agentsadm_orchestrate::run::{AskError, Run, RunError, RunOutcome, Shown};
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::output::Output;

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub servers: ServersArg,
    /// Also ask each server for its own report (`agentsadm gz report`
    /// through CNAPI execute) and compare it with CNAPI.
    #[arg(long)]
    pub live: bool,
    /// Repair what can be repaired (shows the repairs and asks first), in
    /// waves as `update` does (-J is also how many servers are asked for
    /// their report at once).
    #[arg(long)]
    pub fix: bool,
    /// Servers to leave out of the check and the repair (UUIDs or
    /// hostnames): a hung server would hold `--live` or `--fix` up to its
    /// timeout.
    #[arg(short = 'x', long, value_name = "SERVERS", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub exclude: Vec<String>,
    #[command(flatten)]
    pub run: RunArgs,
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
    #[command(flatten)]
    pub run: RunArgs,
}

fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

pub async fn run_check(g: &GlobalOpts, a: CheckArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let request = CheckRequest {
        servers: a.servers.servers.clone(),
        exclude: a.exclude.clone(),
        live: a.live,
    };
    let settings = a.run.settings(None);
    let config = CheckConfig {
        concurrency: settings.rollout.concurrency,
        ..CheckConfig::default()
    };
    if !a.fix {
        let run = check::check(&apis, &catalog, &request, &config).await?;
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
    let planner = FixPlanner {
        apis: &apis,
        catalog: &catalog,
        request: &request,
        config: &config,
        policy: settings.rollout,
    };
    // Downgrades the last plan shown holds: they need -y.
    let downgrades = AtomicUsize::new(0);
    let operator = CliOperator::new(
        out,
        |p: &FixPlan, shown| show_repairs(out, p, shown, &downgrades),
        |p: &FixPlan| {
            refuse_downgrades(&p.repairs)?;
            Ok("Repair?".into())
        },
    );
    let execution = Execution::new(g, "repair");
    let reporter = execution.reporter();
    let run = Run::new(&apis, &catalog, &settings, &reporter, "check --fix");
    let outcome = match run.go(&planner, &operator, interrupted()).await {
        Ok(outcome) => outcome,
        Err(RunError::NeedsYes) if downgrades.load(Ordering::SeqCst) > 0 => {
            let n = downgrades.load(Ordering::SeqCst);
            bail!(
                "{n} of these repairs downgrade{} a component to the image SAPI names; re-run with -y to confirm (nothing was changed)",
                if n == 1 { "s" } else { "" }
            );
        }
        Err(e) => return Err(run_error(e)),
    };
    let (planned, report) = match outcome {
        RunOutcome::DryRun(p) => {
            let code = fix_not_executed(&out, &p);
            out.line(crate::execution::DRY_RUN_NOTE);
            return Ok(code);
        }
        RunOutcome::Empty(p) => return Ok(fix_not_executed(&out, &p)),
        RunOutcome::Declined(_) => {
            out.line("Nothing was changed.");
            return Ok(exit(1));
        }
        RunOutcome::Executed { planned, report } => (planned, report),
    };
    let plan = planned.repairs;
    let outcome = check::after_fix(&apis, &catalog, &request, &config, &plan.plan, report).await?;
    Ok(exit(show_fix_outcome(out, &planned.run, &plan, &outcome)))
}

/// The check and its repairs, as `check --fix` shows them; downgrades are
/// warned about (stderr) when the run stops for want of `-y`.
fn show_repairs(out: Output, p: &FixPlan, shown: Shown, downgrades: &AtomicUsize) {
    let found = p.repairs.downgrades();
    downgrades.store(found.len(), Ordering::SeqCst);
    if shown == Shown::Unlocked && !p.repairs.is_empty() {
        for d in &found {
            out.warn(format!("downgrade: {d}"));
        }
    }
    if out.json {
        return;
    }
    if shown == Shown::Changed {
        out.line("\nThe datacenter changed since the repairs were shown; checked again:");
    }
    out.line(p.render());
}

/// `check --fix` with nothing (left) to repair, or `-n`: the check's own
/// status.
fn fix_not_executed(out: &Output, plan: &FixPlan) -> ExitCode {
    let status = plan.run.exit_status();
    if out.json {
        out.json(&json!({
            "check": plan.run.to_json(), "repairs": plan.repairs, "executed": false, "exit_status": status,
        }));
    }
    exit(status)
}

/// Repairs that downgrade a component need `-y`: in a terminal, say which,
/// and refuse.
fn refuse_downgrades(plan: &RepairPlan) -> Result<(), AskError> {
    let downgrades = plan.downgrades();
    if downgrades.is_empty() {
        return Ok(());
    }
    for d in &downgrades {
        eprintln!("agentsadm: warning: downgrade: {d}");
    }
    Err(format!(
        "{} of these repairs downgrade{} a component to the image SAPI names; re-run with -y to confirm (nothing was changed)",
        downgrades.len(),
        if downgrades.len() == 1 { "s" } else { "" }
    )
    .into())
}

/// What `check --fix` did and what is left; its exit status.
fn show_fix_outcome(out: Output, run: &CheckRun, plan: &RepairPlan, outcome: &FixOutcome) -> u8 {
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
        return status;
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
    status
}

pub async fn run_server(g: &GlobalOpts, a: ServerArgs) -> CmdResult {
    let (action, target) = match a.command {
        ServerCommand::Delete(t) => (ServerAction::Delete, t),
        ServerCommand::FactoryReset(t) => (ServerAction::FactoryReset, t),
    };
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let settings = target.run.settings(None);
    let mut name = target.server.clone();
    let mut outcome = server_run(g, &apis, &catalog, &settings, action, &name).await;
    // `server delete HOSTNAME` again after it finished: CNAPI no longer
    // knows the name, but the earlier run's log says which server it was;
    // what is left of it (nothing, or what a failed run left) is by UUID.
    if action == ServerAction::Delete
        && name.parse::<agentsadm_types::ids::ServerUuid>().is_err()
        && matches!(
            outcome,
            Err(RunError::Plan(
                cleanup::CleanupError::UnknownServer { .. }
                    | cleanup::CleanupError::UnknownHostname { .. }
            ))
        )
        && let Some((uuid, log)) = agentsadm_types::log::default_log_dir()
            .and_then(|dir| crate::earlier::deleted_server(&dir, &name))
    {
        if !out.json {
            out.line(format!(
                "CNAPI has no server named {name}; an earlier run deleted it as {uuid} (log {}): checking what is left of it.",
                log.display()
            ));
        }
        name = uuid.to_string();
        outcome = server_run(g, &apis, &catalog, &settings, action, &name).await;
    }
    let outcome = match outcome {
        Err(RunError::Plan(e @ cleanup::CleanupError::NothingLeft { .. })) => {
            // A re-run after the delete finished: done, exit 0.
            let message = e.to_string();
            tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET, component = "cleanup", "{message}");
            if out.json {
                out.json(&json!({"executed": false, "message": message, "exit_status": 0}));
            } else {
                out.line(format!("{}{}", message[..1].to_uppercase(), &message[1..]));
            }
            return Ok(exit(0));
        }
        other => other.map_err(run_error)?,
    };
    Ok(exit(server_outcome(out, outcome)))
}

/// One `server delete|factory-reset` run of the server `name`.
async fn server_run(
    g: &GlobalOpts,
    apis: &agentsadm_api::Apis,
    catalog: &agentsadm_types::catalog::Catalog,
    settings: &agentsadm_orchestrate::run::RunSettings,
    action: ServerAction,
    name: &str,
) -> Result<RunOutcome<CleanupPlan>, RunError<cleanup::CleanupError>> {
    let out = g.output();
    let planner = CleanupPlanner {
        apis,
        action,
        name: name.to_string(),
    };
    let question = match action {
        ServerAction::Delete => "Delete?",
        ServerAction::FactoryReset => "Factory-reset (this wipes the server)?",
    };
    let operator = CliOperator::new(
        out,
        move |plan: &CleanupPlan, shown| {
            if out.json {
                return;
            }
            if shown == Shown::Changed {
                out.line("\nThe server's records changed since they were shown; the new plan:");
            }
            out.line(plan.render().trim_end());
        },
        move |_: &CleanupPlan| Ok(question.into()),
    );
    let operation = format!("server {} {name}", action.as_str());
    let execution = Execution::new(g, action.as_str());
    let reporter = execution.reporter();
    let run = Run::new(apis, catalog, settings, &reporter, operation);
    run.go(&planner, &operator, interrupted()).await
}

/// Print how a `server` run ended; its exit status.
fn server_outcome(out: Output, outcome: RunOutcome<CleanupPlan>) -> u8 {
    let (plan, report) = match crate::execution::unless_executed(out, outcome) {
        Ok((planned, report)) => (planned, cleanup::CleanupReport::from_exec(&report)),
        Err(status) => return status,
    };
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
    status
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

/// `agentsadm adopt --local`: adopt what this GZ has installed, through
/// the same run as every changing command, on SAPI alone (CNAPI does not
/// exist yet during headnode setup).
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
    let platform = agentsadm_gz::session::platform_for_command_line(&a.root, &Default::default());
    let mut gz = GzSettings::new(&a.root, platform);
    gz.catalog = catalog.clone();
    gz.no_sapi = true;
    gz.no_cnapi = true;
    let planner = headnode::LocalAdoptPlanner {
        sapi: &sapi,
        catalog: &catalog,
        settings: gz,
    };
    let settings = super::orch::adopt::settings(a.run);
    let operator = super::orch::adopt::adopt_operator(out);
    let execution = Execution::new(g, "adopt");
    let reporter = execution.reporter();
    let run = Run::sapi_only(&sapi, &catalog, &settings, &reporter, "adopt --local");
    let outcome = run
        .go(&planner, &operator, interrupted())
        .await
        .map_err(run_error)?;
    Ok(exit(super::orch::adopt::adopt_outcome(out, outcome)))
}
