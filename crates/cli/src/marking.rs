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
//! instance, or on the service without `-s`); the planner honours holds
//! in every later plan. `release`, not `unhold`: it is the word operators
//! already use for the opposite of a hold (a legal hold, a held package
//! "released" in change management), and an `un-` verb is easy to misread.

use std::process::ExitCode;

use agentsadm_types::component::ComponentName;
use serde_json::json;

use crate::CmdResult;
use crate::args::{RunArgs, ServersArg};
use crate::execution::{CliOperator, Execution, ended, executed, interrupted, recorded, run_error};
use crate::settings::Settings;
use agentsadm_orchestrate::marks::{SwitchPlanner, set_holds};
use agentsadm_orchestrate::run::{Run, Shown};
use agentsadm_plan::{
    ComponentSelection, HoldScope, Mark, Operation, Plan, Request, ServerSelection,
};

pub(crate) async fn run_switch(
    g: &Settings,
    component: ComponentName,
    servers: ServersArg,
    run: RunArgs,
    mark: Option<Mark>,
) -> CmdResult {
    let operation = if mark.is_some() {
        Operation::Disable
    } else {
        Operation::Enable
    };
    if servers.servers.is_empty() {
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
    let planner = SwitchPlanner {
        apis: &apis,
        catalog: &catalog,
        request: Request {
            operation,
            components: ComponentSelection::Named(vec![component.clone()]),
            servers: ServerSelection::Named(servers.servers),
            exclude: Vec::new(),
        },
        mark,
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
    Ok(ExitCode::from(match ended(out, outcome, true) {
        Ok((planned, report)) => executed(out, &planned, &report),
        Err(status) => status,
    }))
}

pub(crate) async fn set_and_say(
    g: &Settings,
    component: &str,
    servers: &[String],
    mark: Option<&Mark>,
) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let written = set_holds(&apis, &catalog, component, servers, mark).await?;
    let verb = if mark.is_some() { "held" } else { "released" };
    if out.json {
        let rows: Vec<_> = written
            .iter()
            .map(|w| json!({"component": w.component, "hostname": w.hostname, "scope": w.scope, verb: true}))
            .collect();
        out.json(&json!({"holds": rows, "mark": mark}));
    }
    for w in &written {
        match (&w.scope, &w.hostname) {
            (HoldScope::Datacenter, _) | (_, None) => out.line(format!(
                "{}: {verb} datacenter-wide (new servers included)",
                w.component
            )),
            (HoldScope::Server, Some(h)) => out.line(format!("{} on {h}: {verb}", w.component)),
        }
    }
    if let Some(m) = mark {
        out.line(format!(
            "Recorded in SAPI {}; every bulk change leaves it where it is.",
            m.describe()
        ));
        if let Some(run) = run_in_progress(&apis).await {
            out.line(format!(
                "A run is in progress ({} by {}, since {}): the hold applies from the next run; that run may still change the servers it has not started yet.",
                run.operation, run.owner, run.started
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The run holding the datacenter lock, if one does (a hold recorded now
/// is read by the next run's plan, not by one already executing).
async fn run_in_progress(
    apis: &agentsadm_api::Apis,
) -> Option<agentsadm_orchestrate::lock::LockRecord> {
    use agentsadm_orchestrate::lock::{LockStore, SapiLockStore};
    let store = SapiLockStore::new(apis.sapi.clone()).await.ok()?;
    store.read().await.ok()?.holder().cloned()
}
