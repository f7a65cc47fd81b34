//! `agentsadm revert RUN`: put back, on every server the run changed and
//! that still runs what it left, the image it had before (and the SAPI
//! service defaults and instances with it). An ordinary plan through the
//! library's one run: shown and confirmed (or `-y`), fenced, canaried,
//! budgeted, gated, and recorded in the history as reverting RUN (so a
//! revert can be reverted).

use clap::Args;

use std::process::ExitCode;

use crate::CmdResult;
use crate::args::ExecArgs;
use crate::change::show_plan_text;
use crate::execution::{CliOperator, Execution, ended, executed, interrupted, recorded, run_error};
use crate::settings::Settings;
use agentsadm_orchestrate::history::{HistoryEntry, durations_of, find_in};
use agentsadm_orchestrate::revert::RevertPlanner;
use agentsadm_orchestrate::run::{Run, RunOutcome, RunSettings, Shown};
use agentsadm_orchestrate::session::Session;
use agentsadm_plan::Plan;

#[derive(Args, Debug)]
pub struct RevertArgs {
    /// The run to put back (its id, or the start of it; see 'agentsadm
    /// history').
    #[arg(value_name = "RUN")]
    pub run: String,
    #[command(flatten)]
    pub exec: ExecArgs,
}

pub async fn run(g: &Settings, a: RevertArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let listing = g.history_store().list().await;
    if let Some(e) = &listing.sapi_error {
        out.warn(format!("{e}; only this headnode's runs are known"));
    }
    let run: HistoryEntry = find_in(listing.entries.clone(), &a.run)?;
    let later: Vec<HistoryEntry> = listing
        .entries
        .iter()
        .filter(|e| e.started > run.started)
        .cloned()
        .collect();
    let settings: RunSettings = a.exec.settings(g);
    let durations = durations_of(&listing.entries);
    let planner = RevertPlanner {
        session: Session {
            apis: &apis,
            catalog: &catalog,
            updates: None,
        },
        run: run.clone(),
        later,
        options: settings.plan_options(),
        durations: Some(durations.clone()),
    };
    let operator = CliOperator::new(
        out,
        |plan: &Plan, shown| show_plan(g, &settings, plan, shown),
        crate::execution::proceed_question,
    );
    let execution = Execution::new(g, "revert");
    let reporter = execution.reporter();
    let operation = format!("revert {} ({})", run.short_id(), run.operation);
    let mut run = recorded(
        Run::new(&apis, &catalog, &settings, &reporter, operation),
        g,
    );
    run.durations = Some(&durations);
    let outcome = run
        .go(&planner, &operator, interrupted())
        .await
        .map_err(run_error)?;
    if matches!(outcome, RunOutcome::Empty(_)) && !out.json {
        out.line("Nothing to put back.");
    }
    Ok(ExitCode::from(match ended(out, outcome, false) {
        Ok((planned, report)) => executed(out, &planned, &report),
        Err(status) => status,
    }))
}

fn show_plan(g: &Settings, settings: &RunSettings, plan: &Plan, shown: Shown) {
    show_plan_text(g, settings, plan, shown, None);
}
