//! `agentsadm disable|enable COMPONENT -s SERVERS` and `agentsadm
//! hold|release COMPONENT [-s SERVERS]` (issue 25).
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

use agentsadm_types::component::ComponentName;
use clap::Args;
use serde_json::json;

use super::{RunArgs, ServersArg, exit};
use crate::CmdResult;
use crate::GlobalOpts;
use crate::execution::{CliOperator, Execution, interrupted, run_error};
use agentsadm_orchestrate::marks::{SwitchPlanner, set_holds};
use agentsadm_orchestrate::run::{Run, RunOutcome, Shown};
use agentsadm_plan::{
    ComponentSelection, HoldScope, Mark, Operation, Plan, Request, ServerSelection,
};

#[derive(Args, Debug)]
pub struct DisableArgs {
    /// The component whose services stay off.
    #[arg(value_name = "COMPONENT")]
    pub component: ComponentName,
    #[command(flatten)]
    pub servers: ServersArg,
    /// Why (recorded in SAPI with who and when).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct EnableArgs {
    /// The component to let run again.
    #[arg(value_name = "COMPONENT")]
    pub component: ComponentName,
    #[command(flatten)]
    pub servers: ServersArg,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    /// The component to leave where it is.
    #[arg(value_name = "COMPONENT")]
    pub component: ComponentName,
    /// Hold it on these servers only (default: datacenter-wide, new
    /// servers included).
    #[command(flatten)]
    pub servers: ServersArg,
    /// Why (recorded in SAPI with who and when, shown in every plan).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The held component.
    #[arg(value_name = "COMPONENT")]
    pub component: ComponentName,
    /// Release it on these servers only (default: the datacenter-wide hold).
    #[command(flatten)]
    pub servers: ServersArg,
}

/// Who is asking: the operator behind sudo, else the login name.
fn operator_name() -> String {
    ["SUDO_USER", "LOGNAME", "USER"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "root".into())
}

/// A mark made now by this operator.
fn mark_now(reason: Option<String>) -> Mark {
    Mark {
        by: operator_name(),
        at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        reason: reason.filter(|r| !r.trim().is_empty()),
    }
}

pub async fn run_disable(g: &GlobalOpts, a: DisableArgs) -> CmdResult {
    let mark = mark_now(a.reason);
    run_switch(g, a.component, a.servers, a.run, Some(mark)).await
}

pub async fn run_enable(g: &GlobalOpts, a: EnableArgs) -> CmdResult {
    run_switch(g, a.component, a.servers, a.run, None).await
}

async fn run_switch(
    g: &GlobalOpts,
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
    let settings = run.settings(None);
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
    let run = Run::new(&apis, &catalog, &settings, &reporter, name);
    let status = match run
        .go(&planner, &operator, interrupted())
        .await
        .map_err(run_error)?
    {
        RunOutcome::DryRun(plan) | RunOutcome::Empty(plan) => {
            if out.json {
                out.json(&json!({"plan": plan, "executed": false, "exit_status": 0}));
            }
            u8::from(plan.has_blocking_skips()) * 2
        }
        RunOutcome::Declined(_) => {
            out.line("Nothing was changed.");
            1
        }
        RunOutcome::Executed { planned, report } => super::change::executed(out, &planned, &report),
    };
    Ok(exit(status))
}

pub async fn run_hold(g: &GlobalOpts, a: HoldArgs) -> CmdResult {
    let mark = mark_now(a.reason);
    set_and_say(g, &a.component, &a.servers.servers, Some(&mark)).await
}

pub async fn run_release(g: &GlobalOpts, a: ReleaseArgs) -> CmdResult {
    set_and_say(g, &a.component, &a.servers.servers, None).await
}

async fn set_and_say(
    g: &GlobalOpts,
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
    Ok(exit(0))
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
