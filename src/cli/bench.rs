//! `agentsadm bench ...`.

use clap::{Args, Subcommand};

use super::{CmdResult, GlobalOpts};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Install an image against cn-agent's path and a bare tar.
    Install,
}

pub async fn run(_g: &GlobalOpts, _a: BenchArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
