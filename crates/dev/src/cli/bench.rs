//! `agentsadm bench ...`: run a benchmark and print its one JSON object, or
//! (`bench all`) run them all and print one table.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use agentsadm_cli::CmdResult;

use agentsadm_cli::EXIT_PARTIAL;

use crate::bench;
use agentsadm_cli::GlobalOpts;

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
    /// Update four agents on one simulated server with health gates:
    /// gated time over the installs plus one gate.
    Gate(bench::gate::GateBenchArgs),
    /// Plan a large fleet: time and peak memory.
    Plan(bench::plan::PlanBenchArgs),
    /// Read a run history of 100,000 server records, as `history` and
    /// `update -n` do, and the indexed fold against a scan.
    Journal(bench::journal::JournalBenchArgs),
    /// Run install, rollout and plan in turn and print one table (--json:
    /// one object with each benchmark's object and the machine).
    All(bench::AllBenchArgs),
}

pub async fn run(g: &GlobalOpts, a: BenchArgs) -> CmdResult {
    let value = match a.command {
        BenchCommand::Install(args) => bench::install::run(&args).await?,
        BenchCommand::Rollout(args) => bench::rollout::run(&args).await?,
        BenchCommand::Gate(args) => bench::gate::run(&args).await?,
        BenchCommand::Plan(args) => bench::plan::run(&args).await?,
        BenchCommand::Journal(args) => bench::journal::run(&args).await?,
        BenchCommand::All(args) => return run_all(g, &args).await,
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(ExitCode::SUCCESS)
}

async fn run_all(g: &GlobalOpts, args: &bench::AllBenchArgs) -> CmdResult {
    let settings = args.resolve();
    if cfg!(debug_assertions) && !g.json {
        eprintln!("warning: a debug build; figures mean little (cargo run --release -- bench all)");
    }
    let report = bench::run_all(&settings).await;
    if g.json {
        println!("{}", serde_json::to_string_pretty(&report.value)?);
    } else {
        print!("{}", bench::render_table(&report.value));
    }
    // A benchmark that could not run is in the table; the others are valid.
    Ok(ExitCode::from(if report.all_ok { 0 } else { EXIT_PARTIAL }))
}
