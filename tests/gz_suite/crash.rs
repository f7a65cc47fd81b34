//! A process killed at any point of an install or removal leaves either the
//! old or the new version complete after the next run (journal + recovery),
//! and a retry then succeeds.

use std::path::Path;
use std::process::Command;

use crate::gz_common::*;
use agentsadm_api::remote::ComponentAction;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::Hooks;

fn version(semver: &str) -> BuiltImage {
    let mut s = spec("vm-agent", semver);
    s.hooks = Hooks {
        preinstall: Some("test -f ./package.json".into()),
        postinstall: Some("true".into()),
        preuninstall: Some("true".into()),
        postuninstall: Some("rm -f \"$npm_config_smfdir/vm-agent.xml\"".into()),
    };
    imagebuild::build(&s)
}

/// Run the real binary with a crash point; it must die by signal.
fn crash(root: &Path, args: &[&str], at: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .arg("gz")
        .args(args)
        .args(["--root", root.to_str().unwrap(), "--no-sapi", "--no-cnapi"])
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

/// Open (and close) a locked session: that runs recovery.
async fn recover(srv: &TestServer) -> Vec<String> {
    let mut s = GzSettings::new(srv.root(), PlatformKind::Rooted);
    s.no_sapi = true;
    s.no_cnapi = true;
    let mut session = GzSession::open(s, true).await.unwrap();
    session.remove(&[]).await.warnings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_installs_recover_to_old_or_new() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = version("1.0.0");
    let v2 = version("2.0.0");
    let f1 = write_image(&v1, dir.path());
    let f2 = write_image(&v2, dir.path());
    let (f1, f2) = (f1.to_str().unwrap(), f2.to_str().unwrap());
    let points = [
        ("staged", false),
        ("after-journal", false),
        ("after-old-hooks", false),
        ("after-move-old", false),
        ("after-place-new", false),
        ("after-postinstall", false),
        ("after-smf", false),
        ("after-adopt", false),
        ("committing", true),
        ("after-previous", true),
    ];
    for (point, finishes) in points {
        let srv = TestServer::new(false);
        ok(&srv.gz_offline(&["install", f1]).await);
        let instance = srv.instance("vm-agent").unwrap();
        let at_v1 = snapshot(srv.root());
        crash(srv.root(), &["install", f2], point);
        let notes = recover(&srv).await;
        srv.assert_no_leftovers();
        let now = srv.installed_image("vm-agent").unwrap();
        if finishes {
            assert_eq!(now, v2.manifest.uuid.to_string(), "{point}");
            assert!(
                notes.iter().any(|n| n.contains("finished")),
                "{point}: {notes:?}"
            );
            let r = ok(&srv.gz_offline(&["install", f2]).await);
            assert_eq!(
                r.components[0].action,
                ComponentAction::Unchanged,
                "{point}"
            );
            assert_eq!(
                srv.smf_state()["svc:/smartdc/agent/vm-agent:default"],
                "online"
            );
            // The kept previous version is v1, ready for gz rollback.
            let r = ok(&srv.gz_offline(&["rollback", "vm-agent"]).await);
            assert_eq!(
                r.components[0].image_uuid,
                Some(v1.manifest.uuid),
                "{point}"
            );
        } else {
            assert_eq!(now, v1.manifest.uuid.to_string(), "{point}");
            assert_same(&at_v1, &snapshot(srv.root()), point);
            let r = ok(&srv.gz_offline(&["install", f2]).await);
            assert_eq!(r.components[0].action, ComponentAction::Upgraded, "{point}");
        }
        assert_eq!(srv.instance("vm-agent").unwrap(), instance, "{point}");
        srv.assert_no_leftovers();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_fresh_install_and_removal_recover() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = version("1.0.0");
    let f1 = write_image(&v1, dir.path());
    let f1 = f1.to_str().unwrap();
    // A fresh install killed midway leaves nothing behind.
    for point in ["after-journal", "after-place-new", "after-smf"] {
        let srv = TestServer::new(false);
        let empty = snapshot(srv.root());
        crash(srv.root(), &["install", f1], point);
        recover(&srv).await;
        assert_same(&empty, &snapshot(srv.root()), point);
        srv.assert_no_leftovers();
    }
    // A removal killed midway puts the component back.
    for point in ["after-old-hooks", "after-move-old", "after-smf"] {
        let srv = TestServer::new(false);
        ok(&srv.gz_offline(&["install", f1]).await);
        let before = snapshot(srv.root());
        crash(srv.root(), &["remove", "vm-agent"], point);
        recover(&srv).await;
        assert_same(&before, &snapshot(srv.root()), point);
        let r = ok(&srv.gz_offline(&["remove", "vm-agent"]).await);
        assert_eq!(r.components[0].action, ComponentAction::Removed);
    }
}

/// A journal whose fields make no change (a removal without the version
/// it removes) is damaged: the next run stops before recovering anything,
/// says which file and what is missing, and changes nothing, where it used
/// to "roll back" a removal of nothing, delete the journal and go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_journal_stops_the_next_run_and_changes_nothing() {
    let g = Guarded::new(&[image("net-agent", "1.0.0")]).await;
    let journal = g
        .srv
        .at("opt/smartdc/agents/.agentsadm/journal/net-agent.json");
    std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
    let damaged = serde_json::json!({
        "version": 1, "txn": "net-agent-damaged", "op": "remove",
        "component": "net-agent", "phase": "swapping",
        "old": null, "new": null,
        "instance_file": "opt/smartdc/agents/etc/net-agent",
        "instance": null, "instance_created": false, "created_dirs": [],
        "smf": {"services": {}, "backed_up": [], "absent": []}
    });
    std::fs::write(&journal, serde_json::to_vec_pretty(&damaged).unwrap()).unwrap();
    let before = g.state();
    let out = g.gz(&["remove", "net-agent"]).await;
    let message = failed(&out);
    assert!(
        message.contains("cannot read the transaction journal")
            && message.contains("net-agent.json")
            && message.contains("removal journal of net-agent has no old version"),
        "{message}"
    );
    let now = g.state();
    assert_same(&before.root, &now.root, "after a damaged journal");
    assert_eq!(before, now);
    assert!(g.srv.installed_image("net-agent").is_some());
}
