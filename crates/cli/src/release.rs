//! `agentsadm installer release`: pack an agentsadm binary as its IMGAPI
//! image (what `make release` runs; the layout is
//! [`agentsadm_gz::release`]'s), and the version this build says it is.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use super::CmdResult;
use super::GlobalOpts;
use agentsadm_gz::release::{ReleaseSpec, write_release};

/// This build's version: `make release` builds with
/// `AGENTSADM_VERSION_STAMP=<semver>-<branch>-<timestamp>-g<sha>`, the
/// version its image carries, so `agentsadm --version` names the image it
/// came from; any other build says the crate's version.
pub const VERSION: &str = match option_env!("AGENTSADM_VERSION_STAMP") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The binary to pack (default: this program).
    #[arg(long, value_name = "FILE")]
    pub binary: Option<PathBuf>,
    /// MAJOR.MINOR.PATCH (default: this build's crate version).
    #[arg(long, value_name = "SEMVER", default_value = env!("CARGO_PKG_VERSION"))]
    pub semver: String,
    /// The git branch the binary was built from.
    #[arg(long, value_name = "BRANCH")]
    pub branch: String,
    /// The build time, YYYYMMDDTHHMMSSZ (UTC).
    #[arg(long, value_name = "STAMP")]
    pub timestamp: String,
    /// The commit, abbreviated (7 or more hex digits).
    #[arg(long, value_name = "SHA")]
    pub git_sha: String,
    /// Where to write agentsadm-<version>.{tar.gz,manifest}.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Write the release and say what was written.
pub fn run(g: &GlobalOpts, a: ReleaseArgs) -> CmdResult {
    let out = g.output();
    let binary = match a.binary {
        Some(b) => b,
        None => std::env::current_exe().context("cannot tell which file this program is")?,
    };
    let spec = ReleaseSpec {
        binary,
        semver: a.semver,
        branch: a.branch,
        timestamp: a.timestamp,
        git_sha: a.git_sha,
        uuid: None,
    };
    let release = write_release(&spec, &a.out)?;
    let size = release.manifest.files[0].size;
    if out.json {
        out.json(&json!({
            "tarball": release.tarball,
            "manifest": release.manifest_path,
            "image": release.manifest,
        }));
    } else {
        out.line(format!(
            "agentsadm {} (image {}): {} ({size} bytes), {}",
            release.manifest.version,
            release.manifest.uuid,
            release.tarball.display(),
            release.manifest_path.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}
