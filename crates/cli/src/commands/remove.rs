//! `agentsadm remove COMPONENT -s SERVERS ...`: uninstall a component and
//! delete its SAPI instances, through the one run of a change.

use crate::CmdResult;
pub use crate::change::RemoveArgs;
use crate::change::run_change;
use crate::settings::Settings;

pub async fn run(g: &Settings, a: RemoveArgs) -> CmdResult {
    let change = a.change(&g.load_catalog()?, g)?;
    run_change(g, change, false).await
}
