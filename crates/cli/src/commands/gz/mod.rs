//! `agentsadm gz ...`: the installer's own entry point ([`command`]), run
//! with the command line's global options as they were parsed.

pub mod command;

use std::process::ExitCode;

use crate::CmdResult;
use crate::settings::Settings;
use command::GzArgs;

/// `agentsadm gz ...` from the command line.
pub async fn run(g: &Settings, args: GzArgs) -> CmdResult {
    let argv = g.argv().iter().skip(1).cloned().collect();
    Ok(ExitCode::from(command::run(&g.global, argv, args).await))
}
