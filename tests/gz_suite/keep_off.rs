//! A component disabled on a server (`gz disable`, issue 25) stays
//! disabled across upgrade, reinstall and rollback, whatever its
//! postinstall enables, and a SIGKILL of the installer during the
//! upgrade's postinstall leaves it disabled after recovery; `gz enable`
//! turns it back on.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use crate::gz_common::*;
use agentsadm_gz::session::{GzSession, GzSettings};
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;

const RECORD: &str = "opt/smartdc/agents/.agentsadm/disabled/net-agent.json";

/// net-agent `semver` whose postinstall, as real agent postinstalls do,
/// enables its service (here: every instance in the rooted SMF state),
/// then runs `then`.
fn enabling(semver: &str, then: &str) -> BuiltImage {
    let mut s = spec("net-agent", semver);
    s.hooks.postinstall = Some(format!(
        "sed -i 's/\"disabled\"/\"online\"/g' \"$npm_config_smfdir/../../../../var/svc/smf-state.json\"; {then}"
    ));
    imagebuild::build(&s)
}

/// The net-agent instances' states.
fn net_agent(srv: &TestServer) -> Vec<String> {
    let states: Vec<String> = srv
        .smf_state()
        .into_iter()
        .filter(|(fmri, _)| fmri.contains("net-agent"))
        .map(|(_, s)| s)
        .collect();
    assert!(!states.is_empty(), "net-agent has no SMF instance");
    states
}

fn all_are(states: &[String], want: &str) -> bool {
    states.iter().all(|s| s == want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_stays_disabled_across_upgrade_reinstall_and_rollback() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let f1 = write_image(&enabling("1.0.0", "true"), dir.path());
    let f2 = write_image(&enabling("2.0.0", "true"), dir.path());
    let (f1, f2) = (f1.to_str().unwrap(), f2.to_str().unwrap());
    ok(&srv.gz_offline(&["install", f1]).await);
    assert!(all_are(&net_agent(&srv), "online"));

    ok(&srv
        .gz_offline(&[
            "disable",
            "net-agent",
            "--by",
            "alice",
            "--reason",
            "RFD 58 migration",
        ])
        .await);
    assert!(all_are(&net_agent(&srv), "disabled"));
    let record = std::fs::read_to_string(srv.at(RECORD)).unwrap();
    assert!(record.contains("RFD 58 migration"), "{record}");

    // The upgrade's postinstall enables it; the installer keeps it off,
    // and its gate checks it stays off.
    ok(&srv.gz_offline(&["install", f2]).await);
    assert!(
        all_are(&net_agent(&srv), "disabled"),
        "{:?}",
        srv.smf_state()
    );
    ok(&srv.gz_offline(&["install", "--force", f2]).await);
    assert!(all_are(&net_agent(&srv), "disabled"), "reinstall");
    ok(&srv.gz_offline(&["rollback", "net-agent"]).await);
    assert!(all_are(&net_agent(&srv), "disabled"), "rollback");
    ok(&srv.gz_offline(&["health", "net-agent"]).await);

    ok(&srv.gz_offline(&["enable", "net-agent"]).await);
    assert!(all_are(&net_agent(&srv), "online"));
    assert!(!srv.at(RECORD).exists());
    // Idempotent both ways.
    ok(&srv.gz_offline(&["enable", "net-agent"]).await);
    let msg = failed(&srv.gz_offline(&["disable", "vm-agent"]).await);
    assert!(msg.contains("not installed"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_the_postinstall_leaves_it_disabled_after_recovery() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let started = outside.path().join("started");
    let f1 = write_image(&enabling("1.0.0", "true"), dir.path());
    let slow = enabling("2.0.0", &format!("touch '{}'; sleep 60", started.display()));
    let f2 = write_image(&slow, dir.path());
    ok(&srv.gz_offline(&["install", f1.to_str().unwrap()]).await);
    ok(&srv.gz_offline(&["disable", "net-agent"]).await);

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .args(["gz", "install"])
        .arg(&f2)
        .arg("--root")
        .arg(srv.root())
        .args(["--no-sapi", "--no-cnapi"])
        .env_remove("AGENTSADM_TEST_CRASH_AT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("agentsadm starts");
    let reached = tokio::time::timeout(Duration::from_secs(60), async {
        while !started.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "the postinstall never ran");
    // The postinstall has enabled it: the moment a crash must not keep.
    assert!(all_are(&net_agent(&srv), "online"));
    child.start_kill().expect("SIGKILL delivered");
    let status = child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");

    let mut settings = GzSettings::new(srv.root());
    settings.no_sapi = true;
    settings.no_cnapi = true;
    let mut session = GzSession::open(settings, true).await.unwrap();
    let notes = session.remove(&[]).await.warnings;
    drop(session);
    assert!(notes.iter().any(|n| n.contains("net-agent")), "{notes:?}");
    assert!(
        all_are(&net_agent(&srv), "disabled"),
        "{:?}",
        srv.smf_state()
    );
    srv.assert_no_leftovers();
    // The retry upgrades, still disabled.
    let f3 = write_image(&enabling("2.0.1", "true"), dir.path());
    ok(&srv.gz_offline(&["install", f3.to_str().unwrap()]).await);
    assert!(all_are(&net_agent(&srv), "disabled"));
}
