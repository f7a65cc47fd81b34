//! `agentsadm sim ...`: run the simulated datacenter.

use clap::{Args, Subcommand};

use super::{CmdResult, GlobalOpts};

#[derive(Args, Debug)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: SimCommand,
}

#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Serve IMGAPI, SAPI and CNAPI on loopback.
    Serve,
}

pub async fn run(_global: &GlobalOpts, _args: SimArgs) -> CmdResult {
    anyhow::bail!("agentsadm sim is not implemented yet")
}
