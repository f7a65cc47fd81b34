//! Reliability: the GZ installer killed with a real SIGKILL, delivered from
//! outside the process, at each step of an upgrade — mid-unpack (which is
//! also mid-download: the image streams from IMGAPI through the unpacker),
//! after the download, after each lifecycle hook, mid-swap — and then run
//! again.
//!
//! For every step: the binary is started with
//! `AGENTSADM_TEST_CRASH_AT=wait:<step>`, stops there and says so on
//! stderr; the test checks that the server is really in the middle of that
//! step, kills the process (SIGKILL) and checks it died by that signal. The
//! next locked run recovers. Then:
//! - the component is the old or the new version, complete: the whole tree
//!   (files, modes, links, rendered SMF manifests, instance UUID) equals a
//!   clean install of that version on the same server;
//! - SMF state matches it: the service is online, imported from that
//!   version's manifest;
//! - no staging, journal or partial download is left;
//! - running the same install again ends at the new version, complete.
//!
//! `tests/gz_suite/crash.rs` covers the same checkpoints with an abort from
//! inside (and fresh installs); this file is the external-kill counterpart.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::gz_common::TestServer;

use crate::gz_common::assert_same;

use crate::gz_common::ok;

use crate::gz_common::snapshot;

use crate::gz_common::spec;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::Hooks;
use agentsadm_sim::standin::ImgapiStandIn;
use tokio::io::{AsyncBufReadExt, BufReader};

const FMRI: &str = "svc:/smartdc/agent/vm-agent:default";
const STATE: &str = "opt/smartdc/agents/.agentsadm";
/// Generous: a checkpoint is normally reached in milliseconds.
const REACH_TIMEOUT: Duration = Duration::from_secs(60);

/// vm-agent at `semver` with every hook present (the postuninstall removes
/// the SMF manifest, which a rollback must restore) and enough payload that
/// unpacking has several files to write.
fn version(semver: &str) -> BuiltImage {
    let mut s = spec("vm-agent", semver);
    s.hooks = Hooks {
        preinstall: Some("test -f ./package.json".into()),
        postinstall: Some("true".into()),
        preuninstall: Some("true".into()),
        postuninstall: Some("rm -f \"$npm_config_smfdir/vm-agent.xml\"".into()),
    };
    s.payload_bytes = 256 * 1024;
    imagebuild::build(&s)
}

/// Where the swap is when the process is killed: what the test checks
/// before killing, to be sure the kill lands mid-way.
#[derive(Clone, Copy, Debug, PartialEq)]
enum AtKill {
    /// Unpacking: a staging tree and a partial download exist, no journal.
    Unpacking,
    /// The verified image is in the download cache; no journal yet.
    Downloaded,
    /// Journal written, the old version still in place.
    OldInPlace,
    /// Journal written, no version in place (old moved out, new not in).
    NothingInPlace,
    /// Journal written, the new version in place.
    NewInPlace,
}

/// One kill point: the checkpoint, the state it must be in, and whether
/// recovery finishes the upgrade (else it undoes it).
struct Point {
    name: &'static str,
    at_kill: AtKill,
    finishes: bool,
}

const UPGRADE_POINTS: &[Point] = &[
    Point {
        name: "mid-unpack",
        at_kill: AtKill::Unpacking,
        finishes: false,
    },
    Point {
        name: "downloaded",
        at_kill: AtKill::Downloaded,
        finishes: false,
    },
    // Unpacked and validated, before the journal.
    Point {
        name: "staged",
        at_kill: AtKill::Downloaded,
        finishes: false,
    },
    Point {
        name: "after-journal",
        at_kill: AtKill::OldInPlace,
        finishes: false,
    },
    Point {
        name: "after-preuninstall",
        at_kill: AtKill::OldInPlace,
        finishes: false,
    },
    Point {
        name: "after-postuninstall",
        at_kill: AtKill::OldInPlace,
        finishes: false,
    },
    // Mid-swap: the old tree moved out, the new one not yet in.
    Point {
        name: "after-move-old",
        at_kill: AtKill::NothingInPlace,
        finishes: false,
    },
    Point {
        name: "after-preinstall",
        at_kill: AtKill::NothingInPlace,
        finishes: false,
    },
    // Mid-swap: the new tree in, its postinstall not run.
    Point {
        name: "after-place-new",
        at_kill: AtKill::NewInPlace,
        finishes: false,
    },
    Point {
        name: "after-postinstall",
        at_kill: AtKill::NewInPlace,
        finishes: false,
    },
    Point {
        name: "after-smf",
        at_kill: AtKill::NewInPlace,
        finishes: false,
    },
    // Committing: everything succeeded, recovery finishes the commit.
    Point {
        name: "committing",
        at_kill: AtKill::NewInPlace,
        finishes: true,
    },
    Point {
        name: "after-previous",
        at_kill: AtKill::NewInPlace,
        finishes: true,
    },
];

/// `agentsadm gz <args> --root R --no-sapi --no-cnapi --imgapi-url U`,
/// stopped at `point`, checked to be there, and killed with SIGKILL.
async fn kill_at(
    srv: &TestServer,
    args: &[&str],
    imgapi: &str,
    point: &Point,
    images: (&str, Option<&str>),
) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .arg("gz")
        .args(args)
        .args([
            "--root",
            srv.root().to_str().unwrap(),
            "--no-sapi",
            "--no-cnapi",
        ])
        .args(["--imgapi-url", imgapi])
        .env("AGENTSADM_TEST_CRASH_AT", format!("wait:{}", point.name))
        .env_remove("AGENTSADM_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("agentsadm starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let marker = format!("agentsadm: test checkpoint {} reached", point.name);
    let mut seen = Vec::new();
    let reached = tokio::time::timeout(REACH_TIMEOUT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(&marker) {
                return true;
            }
            seen.push(line);
        }
        false
    })
    .await;
    assert!(
        reached == Ok(true),
        "{}: the checkpoint was not reached ({reached:?}); stderr: {seen:?}; status {:?}",
        point.name,
        child.try_wait()
    );
    check_at_kill(srv, point, images.0, images.1);
    child.start_kill().expect("SIGKILL delivered");
    let status = tokio::time::timeout(REACH_TIMEOUT, child.wait())
        .await
        .expect("the killed process is reaped")
        .unwrap();
    assert_eq!(status.signal(), Some(9), "{}: {status:?}", point.name);
}

/// The server is in the middle of the step the point names (`old`, `new`:
/// the image UUIDs of the versions).
fn check_at_kill(srv: &TestServer, point: &Point, old: &str, new: Option<&str>) {
    let name = point.name;
    let state = srv.at(STATE);
    let count = |dir: &str| {
        std::fs::read_dir(state.join(dir))
            .map(|rd| rd.count())
            .unwrap_or(0)
    };
    let partials = || {
        std::fs::read_dir(state.join("downloads"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
                    .count()
            })
            .unwrap_or(0)
    };
    let installed = srv.installed_image("vm-agent");
    match point.at_kill {
        AtKill::Unpacking => {
            assert_eq!(count("journal"), 0, "{name}: a journal already");
            assert!(count("staging") > 0, "{name}: nothing staged");
            assert!(partials() > 0, "{name}: no partial download");
        }
        AtKill::Downloaded => {
            assert_eq!(count("journal"), 0, "{name}: a journal already");
            assert_eq!(partials(), 0, "{name}: the download is not complete");
        }
        AtKill::OldInPlace | AtKill::NothingInPlace | AtKill::NewInPlace => {
            assert_eq!(count("journal"), 1, "{name}: no journal");
        }
    }
    let want = match point.at_kill {
        AtKill::NothingInPlace => None,
        AtKill::NewInPlace => Some(new.expect("an upgrade").to_string()),
        _ => Some(old.to_string()),
    };
    assert_eq!(installed, want, "{name}: installed at the kill");
}

/// A locked session: recovers whatever a killed run left.
async fn recover(srv: &TestServer) -> Vec<String> {
    let mut s = GzSettings::new(srv.root(), PlatformKind::Rooted);
    s.no_sapi = true;
    s.no_cnapi = true;
    let mut session = GzSession::open(s, true).await.unwrap();
    session.remove(&[]).await.warnings
}

/// Nothing of a transaction left: journal, staging, partial downloads.
fn assert_clean(srv: &TestServer, what: &str) {
    srv.assert_no_leftovers();
    if let Ok(rd) = std::fs::read_dir(srv.at(STATE).join("downloads")) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            assert!(!n.ends_with(".partial"), "{what}: partial download {n}");
        }
    }
}

/// The SMF state of vm-agent: online, from a manifest of `img`'s version.
fn assert_smf(srv: &TestServer, img: &BuiltImage, what: &str) {
    let text = std::fs::read(srv.at("var/svc/smf-state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let svc = &state["services"][FMRI];
    assert_eq!(svc["state"], "online", "{what}: {svc}");
    let manifest = svc["manifest"].as_str().expect("a manifest path");
    let xml = std::fs::read_to_string(srv.at(manifest))
        .unwrap_or_else(|e| panic!("{what}: manifest {manifest}: {e}"));
    let version = img.manifest.version.as_str();
    assert!(
        xml.contains(&format!("version=\"{version}\"")),
        "{what}: {manifest} is not version {version}"
    );
}

/// Copy a directory tree with `cp -a` (modes and links kept).
fn copy_tree(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Replace `root` with the saved copy (same path, so rendered paths match).
fn restore(saved: &Path, root: &Path) {
    std::fs::remove_dir_all(root).unwrap();
    copy_tree(saved, root);
}

fn env(imgapi: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("IMGAPI_URL".to_string(), imgapi.to_string())])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_each_upgrade_step_recovers_to_old_or_new() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let v1 = version("1.0.0");
    let v2 = version("2.0.0");
    imgapi.publish(&v1);
    imgapi.publish(&v2);
    let url = imgapi.url();
    let (u1, u2) = (v1.manifest.uuid.to_string(), v2.manifest.uuid.to_string());
    let offline = ["--no-sapi", "--no-cnapi"];
    for point in UPGRADE_POINTS {
        let name = point.name;
        let srv = TestServer::new(false);
        let install = |u: &str| {
            let mut a = vec!["install", u];
            a.extend(offline);
            a.into_iter().map(str::to_string).collect::<Vec<_>>()
        };
        let args1 = install(&u1);
        let args1: Vec<&str> = args1.iter().map(String::as_str).collect();
        ok(&srv.gz(&args1, &env(&url)).await);
        let instance = srv.instance("vm-agent").unwrap();
        let at_v1 = snapshot(srv.root());
        // A clean upgrade of this very server, for reference; then back.
        let saved = tempfile::tempdir().unwrap();
        let saved = saved.path().join("root");
        copy_tree(srv.root(), &saved);
        let args2 = install(&u2);
        let args2: Vec<&str> = args2.iter().map(String::as_str).collect();
        ok(&srv.gz(&args2, &env(&url)).await);
        let at_v2 = snapshot(srv.root());
        restore(&saved, srv.root());
        assert_same(&at_v1, &snapshot(srv.root()), "restored");

        let file_hits = imgapi.hits(v2.manifest.uuid).1;
        kill_at(&srv, &["install", &u2], &url, point, (&u1, Some(&u2))).await;

        let notes = recover(&srv).await;
        assert_clean(&srv, name);
        let (want, img) = if point.finishes {
            assert!(
                notes.iter().any(|n| n.contains("finished")),
                "{name}: {notes:?}"
            );
            (&at_v2, &v2)
        } else {
            (&at_v1, &v1)
        };
        assert_same(
            want,
            &snapshot(srv.root()),
            &format!("{name}: after recovery"),
        );
        assert_smf(&srv, img, name);
        assert_eq!(srv.instance("vm-agent").unwrap(), instance, "{name}");

        // The same command again ends at the new version, complete.
        let hits_before_rerun = imgapi.hits(v2.manifest.uuid).1;
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
            .arg("gz")
            .args(&args2)
            .args(["--root", srv.root().to_str().unwrap(), "--imgapi-url", &url])
            .env_remove("AGENTSADM_TEST_CRASH_AT")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: re-run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_same(
            &at_v2,
            &snapshot(srv.root()),
            &format!("{name}: after re-run"),
        );
        assert_smf(&srv, &v2, name);
        assert_clean(&srv, name);
        let rerun_hits = imgapi.hits(v2.manifest.uuid).1 - hits_before_rerun;
        match point.at_kill {
            // A verified download survives the kill and is reused.
            AtKill::Unpacking => assert_eq!(rerun_hits, 1, "{name}: downloads again"),
            _ if !point.finishes => assert_eq!(rerun_hits, 0, "{name}: cache not reused"),
            _ => {}
        }
        assert!(imgapi.hits(v2.manifest.uuid).1 > file_hits, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_removal_keeps_the_component() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let v1 = version("1.0.0");
    imgapi.publish(&v1);
    let url = imgapi.url();
    let u1 = v1.manifest.uuid.to_string();
    for point in [
        Point {
            name: "after-preuninstall",
            at_kill: AtKill::OldInPlace,
            finishes: false,
        },
        Point {
            name: "after-postuninstall",
            at_kill: AtKill::OldInPlace,
            finishes: false,
        },
        Point {
            name: "after-move-old",
            at_kill: AtKill::NothingInPlace,
            finishes: false,
        },
    ] {
        let srv = TestServer::new(false);
        ok(&srv
            .gz(&["install", &u1, "--no-sapi", "--no-cnapi"], &env(&url))
            .await);
        let before = snapshot(srv.root());
        kill_at(&srv, &["remove", "vm-agent"], &url, &point, (&u1, None)).await;
        recover(&srv).await;
        assert_clean(&srv, point.name);
        assert_same(&before, &snapshot(srv.root()), point.name);
        assert_smf(&srv, &v1, point.name);
        let r = ok(&srv.gz_offline(&["remove", "vm-agent"]).await);
        assert_eq!(
            r.components[0].action,
            agentsadm_api::remote::ComponentAction::Removed
        );
        assert_clean(&srv, point.name);
    }
}

/// A postinstall that says it started (its PID, in a file outside the
/// root), waits for `go` (outside the root too), then keeps writing `late`
/// into the installed tree and the agents' etc for 20 s, as an orphan
/// would after the installer is killed. It writes nothing before `go`: on
/// a loaded machine the kill comes later after the start than one of its
/// writes, and a write from before the recovery proves nothing.
fn writing_hook_version(semver: &str, started: &Path, go: &Path) -> BuiltImage {
    let mut s = spec("vm-agent", semver);
    s.hooks.postinstall = Some(format!(
        "echo $$ > '{started}.tmp' && mv '{started}.tmp' '{started}'\nwhile [ ! -e '{go}' ]; do sleep 0.05; done\nfor i in $(seq 100); do sleep 0.2; echo late > \"$npm_config_prefix/lib/node_modules/vm-agent/late\" 2>/dev/null; echo late > \"$npm_config_etc/late\" 2>/dev/null; done\ntrue",
        started = started.display(),
        go = go.display(),
    ));
    imagebuild::build(&s)
}

/// Whether process `pid` is gone (or a zombie: dead, not yet reaped).
fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_hook_leaves_no_orphan_writing_into_the_tree() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let outside = tempfile::tempdir().unwrap();
    let started = outside.path().join("hook-started");
    let go = outside.path().join("hook-go");
    let v1 = version("1.0.0");
    let v2 = writing_hook_version("2.0.0", &started, &go);
    imgapi.publish(&v1);
    imgapi.publish(&v2);
    let url = imgapi.url();
    let srv = TestServer::new(false);
    let u1 = v1.manifest.uuid.to_string();
    ok(&srv
        .gz(&["install", &u1, "--no-sapi", "--no-cnapi"], &env(&url))
        .await);
    let at_v1 = snapshot(srv.root());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .arg("gz")
        .args(["install", &v2.manifest.uuid.to_string()])
        .args([
            "--root",
            srv.root().to_str().unwrap(),
            "--no-sapi",
            "--no-cnapi",
        ])
        .args(["--imgapi-url", &url])
        .env_remove("AGENTSADM_TEST_CRASH_AT")
        .env_remove("AGENTSADM_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("agentsadm starts");
    let hook = tokio::time::timeout(REACH_TIMEOUT, async {
        loop {
            if let Some(pid) = std::fs::read_to_string(&started)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the postinstall never started");
    // The journal records each hook's group as it starts (old hooks, the
    // preinstall, the postinstall): wait for the fourth.
    let journal = srv.at(&format!("{STATE}/journal/vm-agent.json"));
    let recorded = tokio::time::timeout(REACH_TIMEOUT, async {
        loop {
            let text = std::fs::read_to_string(&journal).unwrap_or_default();
            if text.matches("\"pgid\"").count() >= 4 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        recorded.is_ok(),
        "the postinstall's group was never journaled"
    );
    child.start_kill().expect("SIGKILL delivered");
    let status = child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    recover(&srv).await;
    assert_clean(&srv, "mid-hook");
    // An orphan that outlived the recovery would start writing now.
    std::fs::write(&go, "").unwrap();
    let ended = tokio::time::timeout(REACH_TIMEOUT, async {
        while !dead(hook) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the orphaned postinstall (pid {hook}) lives on"
    );
    // What it started may be left: it wrote every 0.2 s once told to go,
    // so a second and a half would show it (a window for nothing to
    // happen in; a slow machine cannot fail it, only see less).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_same(
        &at_v1,
        &snapshot(srv.root()),
        "after recovery, a second later",
    );
    assert_smf(&srv, &v1, "mid-hook");
}
