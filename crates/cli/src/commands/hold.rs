//! `agentsadm hold COMPONENT [-s SERVERS] [--reason TEXT]`: leave a
//! component where it is; every bulk change skips it (recorded in SAPI).

use clap::Args;

use crate::CmdResult;
use crate::args::{RunArgs, ServersArg};
use crate::settings::Settings;
use agentsadm_types::component::ComponentName;

#[derive(Args, Debug)]
pub struct HoldArgs {
    /// The component to leave where it is.
    #[arg(value_name = "COMPONENT")]
    pub component: ComponentName,
    /// Hold it on these servers only (default: datacenter-wide, new
    /// servers included).
    #[command(flatten)]
    pub servers: ServersArg,
    /// Why (recorded in SAPI with who and when, shown in every plan).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// `-n`, `-y` (a script needs it) and the rest of a run's options.
    #[command(flatten)]
    pub run: RunArgs,
}

pub async fn run(g: &Settings, a: HoldArgs) -> CmdResult {
    let mark = g.mark_now(a.reason);
    crate::marking::run_mark(
        g,
        agentsadm_plan::Operation::Hold,
        a.component,
        a.servers,
        a.run,
        Some(mark),
    )
    .await
}
