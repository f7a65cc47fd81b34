//! `agentsadm adopt`: create the SAPI agent services and instances for
//! what servers report (`--local`: what this global zone has installed,
//! for headnode setup), through the library's one run: `-n`, the lock,
//! the plan made again under it, the question or `-y`, the fence.

use clap::Args;
use serde_json::json;

use std::process::ExitCode;

use crate::CmdResult;
use crate::args::{RunArgs, ServersArg};
use crate::execution::{CliOperator, Execution, ended, interrupted, recorded, run_error};
use crate::settings::Settings;
use agentsadm_api::SapiClient;
use agentsadm_flows::headnode;
use agentsadm_gz::session::GzSettings;
use agentsadm_orchestrate::adopt::{AdoptPlan, AdoptPlanner, AdoptReport};
use agentsadm_orchestrate::run::{Run, RunOutcome, Shown};
use agentsadm_types::output::Output;

#[derive(Args, Debug)]
pub struct AdoptArgs {
    #[command(flatten)]
    pub servers: ServersArg,
    #[command(flatten)]
    pub run: RunArgs,
    /// Adopt what this server's own global zone has installed instead of
    /// what CNAPI reports (headnode setup, before CNAPI exists).
    #[arg(long, conflicts_with = "servers")]
    pub local: bool,
    /// The global zone root for --local.
    #[arg(long, value_name = "DIR", default_value = "/", requires = "local")]
    pub root: std::path::PathBuf,
}

pub async fn run(g: &Settings, a: AdoptArgs) -> CmdResult {
    if a.local {
        return run_local(g, a).await;
    }
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let settings = a.run.settings(None, g);
    let planner = AdoptPlanner {
        apis: &apis,
        catalog: &catalog,
        servers: a.servers.servers,
    };
    let operator = adopt_operator(out);
    let execution = Execution::new(g, "adopt");
    let reporter = execution.reporter();
    let run = recorded(Run::new(&apis, &catalog, &settings, &reporter, "adopt"), g);
    let outcome = run
        .go(&planner, &operator, interrupted())
        .await
        .map_err(run_error)?;
    Ok(ExitCode::from(adopt_outcome(out, outcome)))
}

/// The run's operator for adoption: the plan as lines, "Adopt?".
fn adopt_operator<'a>(out: Output) -> CliOperator<'a, AdoptPlan> {
    CliOperator::new(
        out,
        move |plan: &AdoptPlan, shown| {
            if out.json {
                return;
            }
            if shown == Shown::Changed {
                out.line("\nWhat the servers report changed since it was shown; the new plan:");
            }
            out.line(plan.render().trim_end());
        },
        |_: &AdoptPlan| Ok("Adopt?".into()),
    )
}

/// Print how an adoption run ended; its exit status.
fn adopt_outcome(out: Output, outcome: RunOutcome<AdoptPlan>) -> u8 {
    let (plan, report) = match ended(out, outcome, true) {
        Ok((planned, report)) => (planned, AdoptReport::from_exec(&report)),
        Err(status) => return status,
    };
    let status = report.exit_status();
    if out.json {
        out.json(&json!({"plan": plan, "executed": true, "result": report, "exit_status": status}));
        return status;
    }
    for (server, component, e) in &report.failures {
        eprintln!("error: cannot adopt {component} on {server}: {e}");
    }
    for (component, e) in &report.service_failures {
        eprintln!("error: SAPI service {component}: {e}");
    }
    out.line(format!(
        "Adopted {} instances; created {} services; set {} default images.",
        report.instances_adopted, report.services_created, report.defaults_set
    ));
    status
}

/// `agentsadm adopt --local`: adopt what this GZ has installed, through
/// the same run as every changing command, on SAPI alone (CNAPI does not
/// exist yet during headnode setup).
async fn run_local(g: &Settings, a: AdoptArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let sapi_url = g.sapi_url()?;
    let sapi = SapiClient::new(sapi_url, agentsadm_api::ApiConfig::default())?;
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
    let settings = a.run.settings(None, g);
    let operator = adopt_operator(out);
    let execution = Execution::new(g, "adopt");
    let reporter = execution.reporter();
    let run = recorded(
        Run::sapi_only(&sapi, &catalog, &settings, &reporter, "adopt --local"),
        g,
    );
    let outcome = run
        .go(&planner, &operator, interrupted())
        .await
        .map_err(run_error)?;
    Ok(ExitCode::from(adopt_outcome(out, outcome)))
}
