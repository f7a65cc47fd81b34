//! `agentsadm release COMPONENT [-s SERVERS]`: lift a hold put with
//! `agentsadm hold`. `release`, not `unhold`: it is the word operators
//! already use for the opposite of a hold, and an `un-` verb is easy to
//! misread.

use clap::Args;

use crate::CmdResult;
use crate::args::{RunArgs, ServersArg};
use crate::settings::Settings;
use agentsadm_types::component::ComponentName;

#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The held component.
    #[arg(value_name = "COMPONENT")]
    pub component: ComponentName,
    /// Release it on these servers only (default: the datacenter-wide hold).
    #[command(flatten)]
    pub servers: ServersArg,
    /// `-n`, `-y` (a script needs it) and the rest of a run's options.
    #[command(flatten)]
    pub run: RunArgs,
}

pub async fn run(g: &Settings, a: ReleaseArgs) -> CmdResult {
    crate::marking::run_mark(
        g,
        agentsadm_plan::Operation::Release,
        a.component,
        a.servers,
        a.run,
        None,
    )
    .await
}
