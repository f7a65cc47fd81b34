//! `agentsadm plan update|install|remove ...`: the plan of the command,
//! as `-n` shows it (logged as the plan an operator saw).

use clap::{Args, Subcommand};

use crate::CmdResult;
use crate::change::{InstallArgs, RemoveArgs, UpdateArgs, run_change};
use crate::settings::Settings;

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

pub async fn run(g: &Settings, a: PlanArgs) -> CmdResult {
    let catalog = g.load_catalog()?;
    let change = match a.command {
        PlanCommand::Update(u) => u.change(&catalog, g)?,
        PlanCommand::Install(i) => i.change(&catalog, g)?,
        PlanCommand::Remove(r) => r.change(&catalog, g)?,
    };
    run_change(g, change, true).await
}
