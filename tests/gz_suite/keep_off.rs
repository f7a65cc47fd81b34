//! A component disabled on a server (`gz disable`, issue 25) stays
//! disabled across upgrade, reinstall and rollback, whatever its
//! postinstall enables, and a SIGKILL of the installer during the
//! upgrade's postinstall leaves it disabled after recovery; `gz enable`
//! turns it back on; a `gz disable` or `gz enable` killed at any point is
//! finished by the next locked run, the record and SMF agreeing, no stray
//! file left (issue 32).

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use crate::gz_common::*;
use agentsadm_gz::session::PlatformKind;
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

    let mut settings = GzSettings::new(srv.root(), PlatformKind::Rooted);
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

/// `gz <args>` by the real binary, aborted at crash point `at`.
fn killed_at(srv: &TestServer, args: &[&str], at: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .arg("gz")
        .args(args)
        .arg("--root")
        .arg(srv.root())
        .args(["--no-sapi", "--no-cnapi"])
        .env("AGENTSADM_TEST_CRASH_AT", at)
        .output()
        .unwrap();
    assert!(
        out.status.code().is_none(),
        "{at}: expected a crash, got {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A locked session opened and closed (recovery), its notes.
async fn next_run(srv: &TestServer) -> Vec<String> {
    let mut settings = GzSettings::new(srv.root(), PlatformKind::Rooted);
    settings.no_sapi = true;
    settings.no_cnapi = true;
    let mut session = GzSession::open(settings, true).await.unwrap();
    session.remove(&[]).await.warnings
}

/// The record and SMF agree (`off`: the record there and every instance
/// disabled; else neither), and no temporary or journal file is left.
fn agree(srv: &TestServer, off: bool, what: &str) {
    let states = net_agent(srv);
    assert_eq!(srv.at(RECORD).exists(), off, "{what}: record");
    let want = if off { "disabled" } else { "online" };
    assert!(all_are(&states, want), "{what}: {states:?}");
    for d in ["disabled", "keep-off"] {
        let dir = srv.at(&format!("opt/smartdc/agents/.agentsadm/{d}"));
        let stray: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| d == "keep-off" || n.ends_with(".tmp"))
            .collect();
        assert!(stray.is_empty(), "{what}: left in {d}: {stray:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_and_enable_killed_anywhere_are_finished_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let f1 = write_image(&enabling("1.0.0", "true"), dir.path());
    let f1 = f1.to_str().unwrap();
    let points = ["keep-off-journaled", "keep-off-recorded", "keep-off-smf"];
    for at in points {
        let srv = TestServer::new(false);
        ok(&srv.gz_offline(&["install", f1]).await);
        killed_at(&srv, &["disable", "net-agent", "--by", "bob"], at);
        let notes = next_run(&srv).await;
        assert!(
            notes.iter().any(|n| n.contains("finished a `gz disable`")),
            "{at}: {notes:?}"
        );
        agree(&srv, true, &format!("disable killed at {at}"));
        let record = std::fs::read_to_string(srv.at(RECORD)).unwrap();
        assert!(record.contains("bob"), "{at}: {record}");
    }
    for at in ["keep-off-journaled", "keep-off-smf", "keep-off-unrecorded"] {
        let srv = TestServer::new(false);
        ok(&srv.gz_offline(&["install", f1]).await);
        ok(&srv.gz_offline(&["disable", "net-agent"]).await);
        killed_at(&srv, &["enable", "net-agent"], at);
        next_run(&srv).await;
        agree(&srv, false, &format!("enable killed at {at}"));
    }
    // A kill inside the record's atomic write leaves its temporary file:
    // the next run removes it.
    let srv = TestServer::new(false);
    ok(&srv.gz_offline(&["install", f1]).await);
    ok(&srv.gz_offline(&["disable", "net-agent"]).await);
    let tmp = srv.at("opt/smartdc/agents/.agentsadm/disabled/.net-agent.json.3735928559.tmp");
    std::fs::write(&tmp, b"{").unwrap();
    next_run(&srv).await;
    agree(&srv, true, "stray temporary record");
}
