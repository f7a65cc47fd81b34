//! `agentsadm gz ...`: the GZ installer's command line (one server).

use clap::{Args, Subcommand};

use super::{CmdResult, GlobalOpts};

#[derive(Args, Debug)]
pub struct GzArgs {
    #[command(subcommand)]
    pub command: GzCommand,
}

#[derive(Subcommand, Debug)]
pub enum GzCommand {
    /// Report installed components (the `server.agents` list).
    Report,
}

pub async fn run(_global: &GlobalOpts, _args: GzArgs) -> CmdResult {
    anyhow::bail!("agentsadm gz is not implemented yet")
}
