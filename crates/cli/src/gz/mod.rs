//! `agentsadm gz ...`: the command line hands the installer's own entry
//! point ([`crate::gz::command`]) the global options it uses.

pub mod command;

use std::process::ExitCode;

use super::CmdResult;

use super::GlobalOpts;
use command::{GlobalArgs, GzArgs};

/// `agentsadm gz ...` from the command line.
pub async fn run(global: &GlobalOpts, args: GzArgs) -> CmdResult {
    let global = GlobalArgs {
        sapi_url: global.sapi_url.clone(),
        cnapi_url: global.cnapi_url.clone(),
        imgapi_url: global.imgapi_url.clone(),
        json: global.json,
        quiet: global.quiet,
        verbose: global.verbose,
        log_file: global.log_file.clone(),
        catalog: global.catalog.clone(),
    };
    Ok(ExitCode::from(command::run(&global, args).await))
}
