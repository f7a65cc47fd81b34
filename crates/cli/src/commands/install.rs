//! `agentsadm install COMPONENT (-s SERVERS|--all-servers) ...`: a
//! component on servers that do not have it, through the one run of a
//! change.

use crate::CmdResult;
pub use crate::change::InstallArgs;
use crate::change::run_change;
use crate::settings::Settings;

pub async fn run(g: &Settings, a: InstallArgs) -> CmdResult {
    let change = a.change(&g.load_catalog()?, g)?;
    run_change(g, change, false).await
}
