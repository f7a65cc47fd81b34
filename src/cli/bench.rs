//! `agentsadm bench ...`: run a benchmark and print its one JSON object.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{CmdResult, GlobalOpts};
use crate::bench;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Install an image against cn-agent's path and a bare tar.
    Install(bench::install::InstallBenchArgs),
    /// Roll out a one-component upgrade on a simulated fleet.
    Rollout(bench::rollout::RolloutBenchArgs),
    /// Plan a large fleet: time and peak memory.
    Plan(bench::plan::PlanBenchArgs),
}

pub async fn run(_g: &GlobalOpts, a: BenchArgs) -> CmdResult {
    let value = match a.command {
        BenchCommand::Install(args) => bench::install::run(&args).await?,
        BenchCommand::Rollout(args) => bench::rollout::run(&args).await?,
        BenchCommand::Plan(args) => bench::plan::run(&args).await?,
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(ExitCode::SUCCESS)
}
