//! `agentsadm enable COMPONENT -s SERVERS`: let a component disabled
//! with `agentsadm disable` run again; a run like every change.

use clap::Args;

use crate::CmdResult;
use crate::args::{RunArgs, ServersArg};
use crate::settings::Settings;
use agentsadm_types::component::ComponentName;

#[derive(Args, Debug)]
pub struct EnableArgs {
    /// The component to let run again.
    #[arg(value_name = "COMPONENT")]
    pub component: ComponentName,
    #[command(flatten)]
    pub servers: ServersArg,
    #[command(flatten)]
    pub run: RunArgs,
}

pub async fn run(g: &Settings, a: EnableArgs) -> CmdResult {
    crate::marking::run_mark(
        g,
        agentsadm_plan::Operation::Enable,
        a.component,
        a.servers,
        a.run,
        None,
    )
    .await
}
