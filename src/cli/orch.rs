//! The orchestrator's commands: list, avail, plan, update, install, remove.

use clap::Args;

use super::{CmdResult, GlobalOpts};

#[derive(Args, Debug)]
pub struct ListArgs {}
#[derive(Args, Debug)]
pub struct AvailArgs {}
#[derive(Args, Debug)]
pub struct PlanArgs {}
#[derive(Args, Debug)]
pub struct UpdateArgs {}
#[derive(Args, Debug)]
pub struct InstallArgs {}
#[derive(Args, Debug)]
pub struct RemoveArgs {}

pub async fn run_list(_g: &GlobalOpts, _a: ListArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
pub async fn run_avail(_g: &GlobalOpts, _a: AvailArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
pub async fn run_plan(_g: &GlobalOpts, _a: PlanArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
pub async fn run_update(_g: &GlobalOpts, _a: UpdateArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
pub async fn run_install(_g: &GlobalOpts, _a: InstallArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
pub async fn run_remove(_g: &GlobalOpts, _a: RemoveArgs) -> CmdResult {
    anyhow::bail!("not implemented yet")
}
