//! `agentsadm check [--live] [--fix]`: drift between SAPI intent, CNAPI
//! and the servers; `--fix` repairs it through the one run, as `update`
//! does (`-n`, the lock, the plan made again under it and after the
//! prompt, the question or `-y`, the same execution options). Exit
//! status: 0 clean, 1 nothing done, 2 drift remains or a repair failed.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::bail;
use clap::Args;
use serde_json::json;

use crate::CmdResult;
use crate::args::{RunArgs, ServersArg};
use crate::execution::{
    CliOperator, Execution, Unexecuted, ended, interrupted, recorded, run_error,
};
use crate::settings::Settings;
use agentsadm_flows::check;
use agentsadm_flows::check::CheckConfig;
use agentsadm_flows::check::CheckRequest;
use agentsadm_flows::check::CheckRun;
use agentsadm_flows::check::FixOutcome;
use agentsadm_flows::check::FixPlanner;
use agentsadm_flows::repair::FixPlan;
use agentsadm_flows::repair::RepairPlan;
use agentsadm_orchestrate::run::{AskError, Run, RunError, Shown};
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

fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

pub async fn run(g: &Settings, a: CheckArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let request = CheckRequest {
        servers: a.servers.servers.clone(),
        exclude: a.exclude.clone(),
        live: a.live,
    };
    let settings = a.run.settings(None, g);
    let config = CheckConfig {
        concurrency: settings.rollout.concurrency,
        // Where agentsadm wrote instances' params: a bare instance there
        // lost them (an agentsshar-era one did not).
        history: Some(g.history_store()),
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
    let run = recorded(
        Run::new(&apis, &catalog, &settings, &reporter, "check --fix"),
        g,
    );
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
    let (planned, report) = match ended(out, outcome, true) {
        Ok(executed) => executed,
        Err(status) => return Ok(exit(status)),
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
/// status, and the check with its repairs in `--json`.
impl Unexecuted for FixPlan {
    fn status(&self, _: bool) -> u8 {
        self.run.exit_status()
    }
    fn document(&self, status: u8) -> serde_json::Value {
        json!({
            "check": self.run.to_json(), "repairs": self.repairs, "executed": false, "exit_status": status,
        })
    }
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
