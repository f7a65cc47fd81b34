//! Flow commands: adopt, check, server delete / factory-reset.

use clap::Args;

use super::{CmdResult, GlobalOpts};

#[derive(Args, Debug)]
pub struct AdoptArgs {}
#[derive(Args, Debug)]
pub struct CheckArgs {}
#[derive(Args, Debug)]
pub struct ServerArgs {}

pub async fn run_adopt(_g: &GlobalOpts, _a: AdoptArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
pub async fn run_check(_g: &GlobalOpts, _a: CheckArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
pub async fn run_server(_g: &GlobalOpts, _a: ServerArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
