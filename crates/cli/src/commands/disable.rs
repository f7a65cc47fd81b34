//! `agentsadm disable COMPONENT -s SERVERS`: keep a component's SMF
//! services off on servers, recorded in SAPI, across every later upgrade;
//! a run like every change (`-n`, the lock, `-y`, the history).

use clap::Args;

use crate::CmdResult;
use crate::args::{RunArgs, ServersArg};
use crate::settings::Settings;
use agentsadm_types::component::ComponentName;

#[derive(Args, Debug)]
pub struct DisableArgs {
    /// The component whose services stay off.
    #[arg(value_name = "COMPONENT")]
    pub component: ComponentName,
    #[command(flatten)]
    pub servers: ServersArg,
    /// Why (recorded in SAPI with who and when).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
}

pub async fn run(g: &Settings, a: DisableArgs) -> CmdResult {
    let mark = g.mark_now(a.reason);
    crate::marking::run_mark(
        g,
        agentsadm_plan::Operation::Disable,
        a.component,
        a.servers,
        a.run,
        Some(mark),
    )
    .await
}
