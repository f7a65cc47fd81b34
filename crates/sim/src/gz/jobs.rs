//! The simulated agentsadm-install service: a rooted GZ whose transient
//! job launcher runs the handed-over `gz run-job` in this process, after
//! cn-agent's restart delay.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use agentsadm_platform::INSTALL_SERVICE_FMRI;

use agentsadm_platform::Platform;

use agentsadm_platform::PlatformFuture;

use agentsadm_platform::Rooted;

use agentsadm_platform::SdcConfig;

use agentsadm_platform::ServiceHealth;

use agentsadm_platform::ServiceState;

use agentsadm_platform::Sysinfo;

/// A rooted GZ whose agentsadm-install SMF service runs handed-over jobs:
/// after cn-agent's restart delay, once the handing run has finished,
/// `agentsadm gz run-job --job <file>` runs (in-process) and its install
/// reports to CNAPI like any other.
#[derive(Debug)]
pub(super) struct SimPlatform {
    pub(super) rooted: Rooted,
    pub(super) jobs: JobService,
}

#[derive(Debug, Clone)]
pub(super) struct JobService {
    pub(super) queue: Arc<tokio::sync::Mutex<()>>,
    pub(super) vars: BTreeMap<String, String>,
    pub(super) delay: Duration,
    pub(super) shutdown: CancellationToken,
}

impl Platform for SimPlatform {
    fn name(&self) -> &'static str {
        "simulated rooted"
    }
    fn sysinfo(&self) -> PlatformFuture<'_, Sysinfo> {
        self.rooted.sysinfo()
    }
    fn sdc_config(&self) -> BoxFuture<'_, Option<SdcConfig>> {
        self.rooted.sdc_config()
    }
    fn smf_import<'a>(&'a self, manifest: &'a Path) -> PlatformFuture<'a, ()> {
        self.rooted.smf_import(manifest)
    }
    fn smf_delete<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        self.rooted.smf_delete(fmri)
    }
    fn smf_enable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        self.rooted.smf_enable(fmri)
    }
    fn smf_disable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        self.rooted.smf_disable(fmri)
    }
    fn smf_state<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceState>> {
        self.rooted.smf_state(fmri)
    }
    fn smf_health<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceHealth>> {
        self.rooted.smf_health(fmri)
    }
    fn launch_transient_job<'a>(&'a self, job: &'a Path) -> PlatformFuture<'a, ()> {
        let jobs = self.jobs.clone();
        let argv = vec![
            "gz".to_string(),
            "run-job".to_string(),
            "--job".to_string(),
            job.display().to_string(),
        ];
        Box::pin(async move {
            // Platform calls run inside the simulator's runtime.
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep(jobs.delay) => {}
                    _ = jobs.shutdown.cancelled() => return,
                }
                // After the run that handed the job over (it holds the turn).
                let _turn = jobs.queue.lock().await;
                let mut vars = jobs.vars;
                vars.insert("SMF_FMRI".into(), INSTALL_SERVICE_FMRI.into());
                let r = agentsadm_cli::gz::command::run_captured_on(argv, vars, None).await;
                if r.exit_status != 0 {
                    tracing::warn!(stderr = %r.stderr.trim(), "sim: the agentsadm-install job failed");
                }
            });
            Ok(())
        })
    }
}
