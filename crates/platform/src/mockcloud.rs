//! One server of a mockcloud tree, `<mockcloud root>/servers/<uuid>/`: its
//! sysinfo is the `sysinfo.json` mockcloud's create-server writes there, and
//! it has no SMF (every service call succeeds and changes nothing) and no
//! SDC config.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use super::Platform;

use super::PlatformFuture;

use super::SdcConfig;

use super::ServiceState;

use super::Sysinfo;

use super::blocking;

use super::read_sysinfo_file;

use super::rooted::SYSINFO_FILE;

/// One mockcloud server.
#[derive(Debug)]
pub struct Mockcloud {
    server_dir: PathBuf,
}

impl Mockcloud {
    /// The server whose directory is `server_dir` (`<root>/servers/<uuid>`).
    pub fn new(server_dir: impl Into<PathBuf>) -> Mockcloud {
        Mockcloud {
            server_dir: server_dir.into(),
        }
    }
}

impl Platform for Mockcloud {
    fn name(&self) -> &'static str {
        "mockcloud"
    }
    fn sysinfo(&self) -> PlatformFuture<'_, Sysinfo> {
        let path = self.server_dir.join(SYSINFO_FILE);
        Box::pin(blocking(move || read_sysinfo_file(&path)))
    }
    fn sdc_config(&self) -> BoxFuture<'_, Option<SdcConfig>> {
        Box::pin(async { None })
    }
    fn smf_import<'a>(&'a self, _manifest: &'a Path) -> PlatformFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn smf_delete<'a>(&'a self, _fmri: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn smf_enable<'a>(&'a self, _fmri: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn smf_disable<'a>(&'a self, _fmri: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn smf_state<'a>(&'a self, _fmri: &'a str) -> PlatformFuture<'a, Option<ServiceState>> {
        Box::pin(async { Ok(None) })
    }
}
