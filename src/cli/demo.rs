//! `agentsadm demo`.

use clap::Args;

use super::{CmdResult, GlobalOpts};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of compute nodes besides the headnode.
    #[arg(long, default_value_t = 200)]
    pub servers: usize,
}

pub async fn run(_g: &GlobalOpts, _a: DemoArgs) -> CmdResult {
    anyhow::bail!("the demo is not implemented yet")
}
