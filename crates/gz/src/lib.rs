//! The GZ installer (`agentsadm gz ...`): installs, upgrades, removes,
//! rolls back and reports components on one server, atomically, on a real
//! SmartOS global zone (`/`), a rooted directory or a mockcloud tree, by the
//! same code.
//!
//! Modules, in the order an install uses them:
//! - [`command`]: the installer's own entry point: `agentsadm gz ...`
//!   parsed into [`session::GzSettings`], run, printed (or captured, for
//!   in-process runs);
//! - [`session`]: one run on one server — settings, the server [`lock`],
//!   recovery of interrupted transactions, per-server ordering (core
//!   components alone and in order, parallel-safe ones concurrently), SAPI
//!   and CNAPI; split by command (install, remove, rollback, setup, report);
//! - [`layout`]: how components sit on disk, behind one trait — the Triton
//!   GZ (each kind's footprint, per [`kinds`] and [`paths`]) and mockcloud
//!   (`servers/<uuid>/agents/<name>/...`): where trees, records, journal,
//!   lock and kept previous versions live, how an image is staged, whether
//!   hooks and SMF run, how the report is read;
//! - [`fetch`]: resolve an image (IMGAPI or a local file + manifest), then
//!   download, hash (sha1, sha256, MD5) and unpack it in one pass, with
//!   retries and a verified-download cache;
//! - [`unpack`]: the archive unpacker (refuses `..`, absolute paths, escaping
//!   links, devices, more than one top-level directory); [`shar`]: the
//!   shell archives dockerlogger and sdcadm images are, read without running;
//! - [`kinds`]: what each component kind puts on disk in a Triton GZ and how
//!   its version is recorded (apm agents, gz-tools, dockerlogger, sdcadm);
//! - [`txn`]: the journaled swap with rollback and crash recovery, the same
//!   for every layout;
//! - [`health`]: the health gate (services online and staying online
//!   after an install, else the transaction rolls back);
//! - [`hooks`]: apm-compatible lifecycle hooks; [`package`]: `package.json`;
//! - [`adopt`]: SAPI adoption; [`report`]: the Triton GZ's `server.agents`
//!   report; [`registration`]: the entries under `node_modules` that keep
//!   the components installed elsewhere (agentsadm, gz-tools, dockerlogger,
//!   sdcadm) in what cn-agent reports; [`step`]: the failure steps results
//!   name;
//! - [`release`]: agentsadm's own image (`make release` packs it, the
//!   `agentsadm` kind installs it);
//!
//! The operating system (SMF, sysinfo, the SDC config) is
//! [`agentsadm_platform`]; the installer depends on it, never the reverse, and
//! on nothing of the command line (which calls [`command::run`]).
//! Every platform call is awaited and file work runs on the blocking pool,
//! so thousands of runs can share the simulator's runtime workers.
//!
//! # Entry points for the simulator
//!
//! - [`command::run_captured`]`(argv, env)` runs `agentsadm gz ...`
//!   in-process (what a CNAPI execute request of
//!   `agentsadm_api::remote::gz_execute_request` asks for) and returns the
//!   `ExecuteResult` (stdout holds the `--json` document).
//! - The library, for install-agent style tasks without a command line:
//!   ```no_run
//!   # async fn demo() {
//!   use agentsadm_gz as gz;
//!   use gz::{session::{GzSettings, PlatformKind}, layout::LayoutKind, fetch::ImageSource};
//!   let mut s = GzSettings::new("/var/sim/servers/<uuid>", PlatformKind::Rooted); // a rooted GZ
//!   s.imgapi_url = Some("http://127.0.0.1:1234".into());
//!   s.sapi_url = Some("http://127.0.0.1:1235".into());
//!   s.cnapi_url = Some("http://127.0.0.1:1236".into());
//!   // or: s.layout = LayoutKind::Mockcloud; s.root = <mockcloud root>;
//!   //     s.server_uuid = Some(uuid);
//!   let image = "2d11ad57-389f-4eff-abcb-6dd51646cf80".parse().unwrap();
//!   let result = gz::install(s.clone(), &[ImageSource::Imgapi(image)]).await;
//!   let vm_agent = "vm-agent".parse().unwrap(); // a ComponentName
//!   let removed = gz::uninstall(s.clone(), &[vm_agent]).await;
//!   let set_up = gz::setup(s.clone(), &gz::setup::SetupSource::Imgapi).await;
//!   let report = gz::report(s).await;
//!   # }
//!   ```
//!   Each call takes the server's lock for its duration, so calls for
//!   different roots run concurrently and calls for one root queue. Nothing
//!   process-wide is touched (no chdir, no global subscriber, no env).
//!
//! A rooted server is a directory with `sysinfo.json` (`UUID`, `Hostname`,
//! `Boot Parameters.headnode`); the simulator creates mock servers by
//! writing that file (`platform::Sysinfo::to_json`). Its SMF state is kept
//! in `var/svc/smf-state.json`.

pub mod adopt;
pub mod fetch;
pub mod fsutil;
pub mod health;
pub mod hooks;
pub mod keep_off;
pub mod kinds;
pub mod layout;
pub mod lock;
pub mod package;
pub mod paths;
pub mod registration;
pub mod release;
pub mod report;
pub mod session;
pub mod setup;
pub mod shar;
pub mod step;
pub mod txn;
pub mod unpack;

use agentsadm_api::remote::AgentsReport;

use agentsadm_api::remote::GzResult;

use agentsadm_types::component::ComponentName;
use session::{GzError, GzSession, GzSettings};

/// Install or upgrade images on the server `settings` describes (one run:
/// lock, recovery, install, CNAPI report unless `no_cnapi`).
pub async fn install(settings: GzSettings, sources: &[fetch::ImageSource]) -> GzResult {
    let server = settings.server_uuid;
    match GzSession::open(settings, true).await {
        Ok(mut s) => s.install(sources).await,
        Err(e) => failed_run(server, &e),
    }
}

/// Remove components by name.
pub async fn uninstall(settings: GzSettings, names: &[ComponentName]) -> GzResult {
    let server = settings.server_uuid;
    match GzSession::open(settings, true).await {
        Ok(mut s) => s.remove(names).await,
        Err(e) => failed_run(server, &e),
    }
}

/// Install the default set of the server's role (`gz setup`): from a
/// USB-key style directory, or each SAPI agent service's image.
pub async fn setup(settings: GzSettings, source: &setup::SetupSource) -> GzResult {
    let server = settings.server_uuid;
    match GzSession::open(settings, true).await {
        Ok(mut s) => s.setup(source).await,
        Err(e) => failed_run(server, &e),
    }
}

/// Restore the version kept from the last upgrade of `name`.
pub async fn rollback(settings: GzSettings, name: &ComponentName) -> GzResult {
    let server = settings.server_uuid;
    match GzSession::open(settings, true).await {
        Ok(mut s) => s.rollback(name).await,
        Err(e) => failed_run(server, &e),
    }
}

/// What is installed (no lock taken: a report never waits for an install).
pub async fn report(settings: GzSettings) -> Result<AgentsReport, GzError> {
    Ok(GzSession::open(settings, false).await?.report().await)
}

fn failed_run(server: Option<agentsadm_types::ids::ServerUuid>, e: &GzError) -> GzResult {
    GzResult {
        server_uuid: server.unwrap_or(agentsadm_types::ids::ServerUuid::from_u128(0)),
        components: Vec::new(),
        error: Some(e.to_failure()),
        warnings: Vec::new(),
    }
}

/// How long a `wait:` checkpoint waits to be killed before it aborts by
/// itself (a test that forgot its process must not leave it behind).
const CHECKPOINT_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// A test checkpoint (`AGENTSADM_TEST_CRASH_AT`, see [`txn`]): `<name>`
/// aborts the process there; `wait:<name>` prints `agentsadm: test
/// checkpoint <name> reached` on stderr and blocks until the process is
/// killed from outside, so a test can deliver a real SIGKILL at a known
/// step. Anything else does nothing.
pub fn test_checkpoint(crash_at: Option<&str>, name: &str) {
    let Some(at) = crash_at else {
        return;
    };
    if at == name {
        eprintln!("agentsadm: test crash at {name}");
        std::process::abort();
    }
    if at.strip_prefix("wait:") == Some(name) {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "agentsadm: test checkpoint {name} reached; waiting to be killed"
        );
        let _ = err.flush();
        drop(err);
        // Blocks this thread only; the test kills the whole process.
        std::thread::sleep(CHECKPOINT_WAIT);
        std::process::abort();
    }
}
