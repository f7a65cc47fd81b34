//! cn-agent cannot replace itself from inside its own SMF contract: the job
//! is handed to the agentsadm-install service, which runs it with
//! `gz run-job`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::gz_common::*;
use agentsadm_api::remote::ComponentAction;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_platform::Platform;
use agentsadm_platform::PlatformFuture;
use agentsadm_platform::Rooted;
use agentsadm_platform::SdcConfig;
use agentsadm_platform::ServiceState;
use agentsadm_platform::Sysinfo;
use futures::future::BoxFuture;

/// A rooted GZ whose transient-job launcher only records the job.
#[derive(Debug)]
struct Launcher {
    inner: Rooted,
    jobs: Mutex<Vec<std::path::PathBuf>>,
}

impl Platform for Launcher {
    fn name(&self) -> &'static str {
        "smartos"
    }
    fn sysinfo(&self) -> PlatformFuture<'_, Sysinfo> {
        self.inner.sysinfo()
    }
    fn sdc_config(&self) -> BoxFuture<'_, Option<SdcConfig>> {
        Box::pin(async { None })
    }
    fn smf_import<'a>(&'a self, m: &'a Path) -> PlatformFuture<'a, ()> {
        self.inner.smf_import(m)
    }
    fn smf_delete<'a>(&'a self, f: &'a str) -> PlatformFuture<'a, ()> {
        self.inner.smf_delete(f)
    }
    fn smf_enable<'a>(&'a self, f: &'a str) -> PlatformFuture<'a, ()> {
        self.inner.smf_enable(f)
    }
    fn smf_disable<'a>(&'a self, f: &'a str) -> PlatformFuture<'a, ()> {
        self.inner.smf_disable(f)
    }
    fn smf_state<'a>(&'a self, f: &'a str) -> PlatformFuture<'a, Option<ServiceState>> {
        self.inner.smf_state(f)
    }
    fn launch_transient_job<'a>(&'a self, job: &'a Path) -> PlatformFuture<'a, ()> {
        self.jobs.lock().unwrap().push(job.to_path_buf());
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test]
async fn cn_agent_inside_its_own_contract_hands_off_then_the_job_runs() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let img = image("cn-agent", "2.0.0");
    let f = write_image(&img, dir.path());
    let argv: Vec<String> = vec![
        "gz".into(),
        "install".into(),
        f.to_string_lossy().into_owned(),
        "--root".into(),
        srv.root().to_string_lossy().into_owned(),
        "--no-sapi".into(),
        "--no-cnapi".into(),
        "--json".into(),
    ];
    let launcher = Arc::new(Launcher {
        inner: Rooted::new(srv.root()),
        jobs: Mutex::new(Vec::new()),
    });
    let mut s = GzSettings::new(srv.root(), PlatformKind::Rooted);
    s.no_sapi = true;
    s.no_cnapi = true;
    s.platform = Some(launcher.clone());
    s.job_argv = Some(argv.clone());
    // The caller (the orchestrator's execute) says it runs inside
    // cn-agent; SMF_FMRI in the environment proves nothing.
    s.inside_cn_agent = true;
    let before = snapshot(srv.root());
    let mut session = GzSession::open(s, true).await.unwrap();
    let src = ImageSource::from_arg(f.to_str().unwrap()).unwrap();
    let r = session.install(&[src]).await;
    drop(session);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.components.is_empty());
    assert!(
        r.warnings[0].contains("handed to svc:/smartdc/agentsadm-install:default"),
        "{:?}",
        r.warnings
    );
    let jobs = launcher.jobs.lock().unwrap().clone();
    assert_eq!(jobs.len(), 1);
    assert_same(
        &before,
        &snapshot(srv.root()),
        "handing off installs nothing",
    );
    // The service then runs the job.
    let out = agentsadm_cli::gz::command::run_captured(
        vec![
            "gz".into(),
            "run-job".into(),
            "--job".into(),
            jobs[0].to_string_lossy().into_owned(),
        ],
        Default::default(),
    )
    .await;
    let r = ok(&out);
    assert_eq!(r.components[0].action, ComponentAction::Installed);
    assert_eq!(
        srv.installed_image("cn-agent"),
        Some(img.manifest.uuid.to_string())
    );
}

/// Settings for a session on `launcher`'s root, without SAPI or CNAPI.
fn settings(srv: &TestServer, launcher: &Arc<Launcher>, argv: &[&str]) -> GzSettings {
    let mut s = GzSettings::new(srv.root(), PlatformKind::Rooted);
    s.no_sapi = true;
    s.no_cnapi = true;
    s.platform = Some(launcher.clone());
    s.job_argv = Some(argv.iter().map(|a| a.to_string()).collect());
    s
}

/// Rollback and remove stop cn-agent too: from inside cn-agent they are
/// handed off, the job's command line without `--inside-cn-agent`. From a
/// process that merely has `SMF_FMRI` set, nothing is handed off.
#[tokio::test]
async fn rollback_and_remove_of_cn_agent_from_inside_it_hand_off() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let launcher = Arc::new(Launcher {
        inner: Rooted::new(srv.root()),
        jobs: Mutex::new(Vec::new()),
    });
    let (v1, v2) = (image("cn-agent", "1.0.0"), image("cn-agent", "2.0.0"));
    for img in [&v1, &v2] {
        let f = write_image(img, dir.path());
        let mut s = settings(&srv, &launcher, &["gz", "install"]);
        // Not proof of running inside cn-agent: installs here.
        s.env.insert(
            "SMF_FMRI".into(),
            "svc:/smartdc/agent/cn-agent:default".into(),
        );
        let mut session = GzSession::open(s, true).await.unwrap();
        let r = session
            .install(&[ImageSource::from_arg(f.to_str().unwrap()).unwrap()])
            .await;
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.components.len(), 1, "{r:?}");
    }
    assert!(launcher.jobs.lock().unwrap().is_empty());
    let before = snapshot(srv.root());

    let argv = ["gz", "rollback", "cn-agent", "--inside-cn-agent", "--json"];
    let mut s = settings(&srv, &launcher, &argv);
    s.inside_cn_agent = true;
    let mut session = GzSession::open(s, true).await.unwrap();
    let r = session.rollback(&"cn-agent".parse().unwrap()).await;
    drop(session);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(
        r.warnings[0].contains("rollback of cn-agent"),
        "{:?}",
        r.warnings
    );
    let argv = ["gz", "remove", "cn-agent", "--inside-cn-agent", "--json"];
    let mut s = settings(&srv, &launcher, &argv);
    s.inside_cn_agent = true;
    let mut session = GzSession::open(s, true).await.unwrap();
    let r = session.remove(&["cn-agent".parse().unwrap()]).await;
    drop(session);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(
        r.warnings[0].contains("remove of cn-agent"),
        "{:?}",
        r.warnings
    );

    let jobs = launcher.jobs.lock().unwrap().clone();
    assert_eq!(jobs.len(), 2);
    let job: serde_json::Value = serde_json::from_slice(&std::fs::read(&jobs[1]).unwrap()).unwrap();
    assert_eq!(
        job["argv"],
        serde_json::json!(["gz", "remove", "cn-agent", "--json"])
    );
    // Handing off changed nothing installed (the job file is state).
    let mut after = snapshot(srv.root());
    let mut before = before;
    before.retain(|p, _| !p.contains("job.json"));
    after.retain(|p, _| !p.contains("job.json"));
    assert_same(&before, &after, "handing off changes nothing installed");
    assert_eq!(
        srv.installed_image("cn-agent"),
        Some(v2.manifest.uuid.to_string())
    );
}
