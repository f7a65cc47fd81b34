//! The developer's subcommands, `sim`, `demo` and `bench`, added to the
//! product's command line by the developer's build of the binary.

pub mod bench;
pub mod demo;
pub mod sim;

use agentsadm_cli::{CmdResult, Extension, GlobalOpts};
use clap::Subcommand;
use futures::future::LocalBoxFuture;

/// The developer's build's own subcommands.
#[derive(Subcommand, Debug)]
pub enum DevCommand {
    /// Simulated datacenter.
    Sim(sim::SimArgs),
    /// Run the whole story on a simulated datacenter.
    Demo(demo::DemoArgs),
    /// Benchmarks.
    Bench(bench::BenchArgs),
}

impl Extension for DevCommand {
    fn run(self, global: &GlobalOpts) -> LocalBoxFuture<'_, CmdResult> {
        Box::pin(async move {
            match self {
                DevCommand::Sim(a) => sim::run(global, a).await,
                DevCommand::Demo(a) => demo::run(global, a).await,
                DevCommand::Bench(a) => bench::run(global, a).await,
            }
        })
    }

    fn runs_commands_in_process(&self) -> bool {
        matches!(self, DevCommand::Demo(_))
    }
}
