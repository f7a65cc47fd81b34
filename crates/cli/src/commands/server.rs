//! `agentsadm server delete|factory-reset SERVER`: delete the server's SAPI
//! agent instances, then its CNAPI record (or factory-reset it), through
//! the one run like every change.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use crate::CmdResult;
use crate::args::RunArgs;
use crate::execution::{CliOperator, Execution, ended, interrupted, recorded, run_error};
use crate::settings::Settings;
use agentsadm_flows::cleanup;
use agentsadm_flows::cleanup::CleanupPlan;
use agentsadm_flows::cleanup::CleanupPlanner;
use agentsadm_flows::cleanup::ServerAction;
use agentsadm_orchestrate::run::{Run, RunError, RunOutcome, Shown};
use agentsadm_types::output::Output;

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

pub async fn run(g: &Settings, a: ServerArgs) -> CmdResult {
    let (action, target) = match a.command {
        ServerCommand::Delete(t) => (ServerAction::Delete, t),
        ServerCommand::FactoryReset(t) => (ServerAction::FactoryReset, t),
    };
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let settings = target.run.settings(None, g);
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
        && let Some((uuid, log)) = earlier_deletion(g, &name).await
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
    g: &Settings,
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
    let run = recorded(Run::new(apis, catalog, settings, &reporter, operation), g);
    run.go(&planner, &operator, interrupted()).await
}

/// Print how a `server` run ended; its exit status.
fn server_outcome(out: Output, outcome: RunOutcome<CleanupPlan>) -> u8 {
    let (plan, report) = match ended(out, outcome, true) {
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

/// The server an earlier run deleted as `name`, from the run logs (read
/// off the runtime's threads).
async fn earlier_deletion(
    g: &Settings,
    name: &str,
) -> Option<(agentsadm_types::ids::ServerUuid, std::path::PathBuf)> {
    let dir = g.log_dir.clone()?;
    let name = name.to_string();
    tokio::task::spawn_blocking(move || crate::earlier::deleted_server(&dir, &name))
        .await
        .ok()
        .flatten()
}
