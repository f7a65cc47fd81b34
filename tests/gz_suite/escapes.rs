//! Hooks whose processes try to outlive the transaction (issue 22): a
//! postinstall starts a `setsid` child, a child in its own process group
//! and a double-forked daemon, each waiting to write into the installed
//! tree and apm's `etc`. Whether the postinstall fails (rollback) or the
//! installer is killed with SIGKILL mid-hook (recovery), nothing it started
//! survives: once the command (or the recovering run) has returned, the
//! restored tree and `etc` stay as they were, and so do a sentinel outside
//! the root and the SAPI and CNAPI records. On Linux the hook runs under a
//! subreaper supervisor whose descendants are swept; that stands in for
//! the process contract (`ctrun -l child -o noorphan`) it runs in on
//! SmartOS.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::gz_common::*;
use crate::tools_common::require_tool;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::hostile;

const STATE: &str = "opt/smartdc/agents/.agentsadm";
/// How long the writers are given to show themselves once told to go:
/// they write every 0.2 s, so this is plenty (and bounded).
const WATCH: Duration = Duration::from_secs(2);
/// A checkpoint or a file is normally there in milliseconds.
const REACH: Duration = Duration::from_secs(60);

/// A guarded server with vm-agent 1.0.0 installed.
struct Scene {
    g: Guarded,
}

impl Scene {
    async fn new() -> Scene {
        // Its uninstall hooks touch nothing outside the package (what
        // they would change there is not rolled back, by design).
        let mut v1 = spec("vm-agent", "1.0.0");
        v1.hooks.postuninstall = Some("true".into());
        Scene {
            g: Guarded::new(&[imagebuild::build(&v1)]).await,
        }
    }

    /// vm-agent 2.0.0 whose postinstall starts the escaping children,
    /// then runs `then`.
    fn escaping(&self, then: &str) -> BuiltImage {
        let mut s = spec("vm-agent", "2.0.0");
        s.hooks.postinstall = Some(hostile::escaping_children(
            &self.g.outside("started"),
            &self.g.outside("go"),
            then,
        ));
        imagebuild::build(&s)
    }

    /// Let the escaped children (if any are alive) write, then check that
    /// the server is `want` and that they are all gone.
    async fn assert_nothing_outlived(&self, want: &Guard, what: &str) {
        let pids = hostile::escaped_pids(&self.g.outside("started"));
        assert_eq!(pids.len(), 3, "{what}: the children did not all start");
        std::fs::write(self.g.outside("go"), b"").unwrap();
        tokio::time::sleep(WATCH).await;
        // Whatever the outcome, no process of this test is left behind.
        let alive: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        for &pid in &alive {
            // SAFETY: kill only sends a signal, to a process this test's
            // hook started (its pid, written by itself).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        self.g.assert_unchanged(want, what);
        assert!(alive.is_empty(), "{what}: {alive:?} outlived the hook");
    }
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|t| {
        t.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_postinstall_leaves_nothing_running() {
    if !require_tool("setsid", "util-linux") {
        return;
    }
    let scene = Scene::new().await;
    let before = scene.g.state();
    let v2 = scene.escaping("exit 1");
    let out = scene.g.gz(&["install", &scene.g.publish(&v2)]).await;
    let msg = failed(&out);
    assert!(
        msg.starts_with("hook:postinstall: ") && msg.contains("rolled back"),
        "{msg}"
    );
    scene.g.srv.assert_no_leftovers();
    scene
        .assert_nothing_outlived(&before, "failed postinstall")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_postinstall_leaves_nothing_running() {
    if !require_tool("setsid", "util-linux") {
        return;
    }
    let scene = Scene::new().await;
    let v2 = scene.escaping("true");
    ok(&scene.g.gz(&["install", &scene.g.publish(&v2)]).await);
    // Installed; what its postinstall started ended with it.
    let after = scene.g.state();
    scene
        .assert_nothing_outlived(&after, "successful postinstall")
        .await;
}

/// `agentsadm gz install <uuid>` as a real process, with the scene's
/// APIs.
fn spawn_install(g: &Guarded, uuid: &str) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .args(["gz", "install", uuid, "--root"])
        .arg(g.srv.root())
        .envs(g.env())
        .env_remove("AGENTSADM_TEST_CRASH_AT")
        .env_remove("AGENTSADM_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("agentsadm starts")
}

/// Wait until `file` exists and the journal records `hooks` hooks.
async fn wait_for_hook(started: &Path, journal: &Path, hooks: usize) {
    let reached = tokio::time::timeout(REACH, async {
        loop {
            let text = std::fs::read_to_string(journal).unwrap_or_default();
            if started.exists() && text.matches("\"pgid\"").count() >= hooks {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "the postinstall never ran or was never journaled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_postinstall_then_recovery_leaves_nothing_running() {
    if !require_tool("setsid", "util-linux") {
        return;
    }
    let scene = Scene::new().await;
    let before = scene.g.state();
    let v2 = scene.escaping("sleep 60");
    let mut child = spawn_install(&scene.g, &scene.g.publish(&v2));
    // v1's preuninstall and postuninstall, v2's preinstall and postinstall.
    let journal = scene.g.srv.at(&format!("{STATE}/journal/vm-agent.json"));
    wait_for_hook(&scene.g.outside("started"), &journal, 4).await;
    child.start_kill().expect("SIGKILL delivered");
    let status = child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    // The next locked run recovers.
    let mut settings = GzSettings::new(scene.g.srv.root(), PlatformKind::Rooted);
    settings.no_sapi = true;
    settings.no_cnapi = true;
    let mut session = GzSession::open(settings, true).await.unwrap();
    let notes = session.remove(&[]).await.warnings;
    assert!(
        notes.iter().any(|n| n.contains("vm-agent")),
        "no recovery note: {notes:?}"
    );
    scene.g.srv.assert_no_leftovers();
    scene
        .assert_nothing_outlived(&before, "SIGKILL mid-postinstall, recovered")
        .await;
}
