//! What `disable`, `enable`, `hold` and `release` share (issue 25); the
//! commands themselves are in `commands/`.
//!
//! Disable and enable change servers, so they go through the library's one
//! run like every change: `-n`, the lock, the plan made again under it,
//! the question or `-y`, the fence; each server's step records the intent
//! in SAPI (`params.agentsadm_disabled` on the agent's instance, with who,
//! when and why) and runs `gz disable|enable` there.
//!
//! Hold and release write only SAPI (`params.agentsadm_hold` on the
//! instance, or on the service without `-s`), planned and run the same
//! way (issue 31): `-n`, `-y` (a script needs it), the lock, a history
//! entry; the planner honours holds in every later plan. `release`, not
//! `unhold`: it is the word operators already use for the opposite of a
//! hold (a legal hold, a held package "released" in change management),
//! and an `un-` verb is easy to misread.

use std::process::ExitCode;

use agentsadm_types::component::ComponentName;

use crate::CmdResult;
use crate::args::{RunArgs, ServersArg};
use crate::execution::{CliOperator, Execution, ended, executed, interrupted, recorded, run_error};
use crate::settings::Settings;
use agentsadm_orchestrate::marks::MarkPlanner;
use agentsadm_orchestrate::run::{Run, Shown};
use agentsadm_plan::{ComponentSelection, Mark, Operation, Plan, Request, ServerSelection};

/// `disable`, `enable`, `hold` or `release` of `component` (`mark`: who,
/// when and why, for disable and hold), through the one run.
pub(crate) async fn run_mark(
    g: &Settings,
    operation: Operation,
    component: ComponentName,
    servers: ServersArg,
    run: RunArgs,
    mark: Option<Mark>,
) -> CmdResult {
    let switch = matches!(operation, Operation::Disable | Operation::Enable);
    if switch && servers.servers.is_empty() {
        anyhow::bail!(
            "{operation} needs -s SERVERS: name the servers (UUIDs or hostnames) where {component} should be {}d",
            operation.as_str()
        );
    }
    let out = g.output();
    let catalog = g.load_catalog()?;
    catalog.require(&component)?;
    let apis = g.apis()?;
    let settings = run.settings(None, g);
    let planner = MarkPlanner {
        apis: &apis,
        catalog: &catalog,
        request: Request {
            operation,
            components: ComponentSelection::Named(vec![component.clone()]),
            servers: if servers.servers.is_empty() {
                ServerSelection::All
            } else {
                ServerSelection::Named(servers.servers)
            },
            exclude: Vec::new(),
        },
        mark: mark.clone(),
        options: settings.plan_options(),
    };
    let operator = CliOperator::new(
        out,
        move |plan: &Plan, shown| {
            if out.json {
                return;
            }
            if shown == Shown::Changed {
                out.line("\nThe plan changed since it was shown; the new plan:");
            }
            out.line(plan.display().to_string().trim_end());
        },
        |_: &Plan| Ok("Proceed?".into()),
    );
    let execution = Execution::new(g, operation.as_str());
    let reporter = execution.reporter();
    let name = format!("{operation} {component}");
    let run = recorded(Run::new(&apis, &catalog, &settings, &reporter, name), g);
    let outcome = run
        .go(&planner, &operator, interrupted())
        .await
        .map_err(run_error)?;
    let status = match ended(out, outcome, true) {
        Ok((planned, report)) => executed(out, &planned, &report),
        Err(status) => status,
    };
    if operation == Operation::Hold
        && status == 0
        && let Some(m) = &mark
    {
        out.line(format!(
            "Held in SAPI {}; every bulk change leaves it where it is.",
            m.describe()
        ));
    }
    Ok(ExitCode::from(status))
}
