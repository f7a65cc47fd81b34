//! Every file the installer reads on a server, planted as a FIFO, a link
//! to `/dev/zero`, a link out of the root or a huge file (issue 32): the
//! locked run ends (no hang on `open`, no memory exhausted), the server
//! lock is free afterwards, nothing outside the root changes, and a run
//! that fails names the file.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::gz_common::*;
use agentsadm_gz::lock::ServerLock;

const AGENTS: &str = "opt/smartdc/agents";
const STATE: &str = "opt/smartdc/agents/.agentsadm";

/// What is planted where the installer expects a small file.
#[derive(Clone, Copy, Debug)]
enum Bad {
    Fifo,
    DevZero,
    /// A link to a file outside the root.
    Outside,
    /// 64 MiB of JSON-looking bytes.
    Huge,
    /// A link to a runnable script outside the root that writes there.
    OutsideScript,
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "{p:?}");
}

fn plant(srv: &TestServer, rel: &str, bad: Bad, outside: &Path) {
    let p = srv.at(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&p);
    match bad {
        Bad::Fifo => mkfifo(&p),
        Bad::DevZero => std::os::unix::fs::symlink("/dev/zero", &p).unwrap(),
        Bad::Outside => std::os::unix::fs::symlink(outside, &p).unwrap(),
        Bad::OutsideScript => {
            std::os::unix::fs::symlink(outside.with_file_name("hook.sh"), &p).unwrap()
        }
        Bad::Huge => {
            let f = std::fs::File::create(&p).unwrap();
            f.set_len(64 << 20).unwrap();
        }
    }
}

/// A thread that keeps opening `fifo` for writing (and closing it), so
/// that a reader stuck in `open` on today's main returns and the test
/// fails instead of hanging.
fn unblock(fifo: PathBuf) {
    std::thread::spawn(move || {
        for _ in 0..600 {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo);
            std::thread::sleep(Duration::from_millis(100));
        }
    });
}

/// Run `gz <args>` on `srv`; a run still going after 60 s is a hang.
async fn bounded_run(srv: &TestServer, args: &[&str], planted: &Path) -> (i32, String) {
    match tokio::time::timeout(Duration::from_secs(60), srv.gz_offline(args)).await {
        Ok(out) => (out.exit_status, format!("{}\n{}", out.stdout, out.stderr)),
        Err(_) => {
            unblock(planted.to_path_buf());
            panic!("`gz {}` hung on {}", args.join(" "), planted.display());
        }
    }
}

/// A server with net-agent 1.0.0 installed and the 2.0.0 image at hand.
struct Scene {
    srv: TestServer,
    _images: tempfile::TempDir,
    v2: String,
    outside: tempfile::TempDir,
}

impl Scene {
    async fn new() -> Scene {
        let srv = TestServer::new(false);
        let images = tempfile::tempdir().unwrap();
        let v1 = write_image(&image("net-agent", "1.0.0"), images.path());
        let v2 = write_image(&image("net-agent", "2.0.0"), images.path());
        ok(&srv.gz_offline(&["install", v1.to_str().unwrap()]).await);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"{\"top\": \"secret\"}\n").unwrap();
        let hook = outside.path().join("hook.sh");
        let ran = outside.path().join("ran");
        std::fs::write(
            &hook,
            format!("#!/bin/sh\necho ran > '{}'\n", ran.display()),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        Scene {
            srv,
            v2: v2.to_str().unwrap().to_string(),
            _images: images,
            outside,
        }
    }

    fn outside_state(&self) -> BTreeMapSnapshot {
        snapshot(self.outside.path())
    }
}

type BTreeMapSnapshot = std::collections::BTreeMap<String, String>;

/// Plant `bad` at `rel`, run `args` (`{v2}` is the 2.0.0 image), and check
/// the run ended, freed the lock, changed nothing outside the root and, if
/// it failed, named the file.
async fn case(rel: &str, bad: Bad, args: &[&str]) {
    let scene = Scene::new().await;
    let srv = &scene.srv;
    let secret = scene.outside.path().join("secret");
    plant(srv, rel, bad, &secret);
    let outside_before = scene.outside_state();
    let args: Vec<&str> = args
        .iter()
        .map(|a| if *a == "{v2}" { scene.v2.as_str() } else { a })
        .collect();
    let (status, out) = bounded_run(srv, &args, &srv.at(rel)).await;
    let what = format!("{bad:?} at {rel}, gz {}", args.join(" "));
    assert!(status == 0 || status == 1, "{what}: exit {status}: {out}");
    if status != 0 {
        assert!(
            out.contains(rel) || out.contains(rel.rsplit('/').next().unwrap()),
            "{what}: the failure does not name the file: {out}"
        );
        assert!(!out.contains("panicked"), "{what}: {out}");
    }
    let lock = srv.at(&format!("{STATE}/lock"));
    assert!(
        ServerLock::acquire(&lock, Duration::from_millis(500))
            .await
            .is_ok(),
        "{what}: the server lock is still held"
    );
    assert_same(&outside_before, &scene.outside_state(), &what);
    // What was planted is still what it was (a link is never written through).
    let md = std::fs::symlink_metadata(srv.at(rel));
    if let (Bad::DevZero | Bad::Outside | Bad::OutsideScript, Ok(md)) = (bad, &md) {
        assert!(md.file_type().is_symlink(), "{what}: the link was replaced");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_at_a_registration_does_not_hang_the_install() {
    // sdcadm is not installed: its registration directory is someone else's.
    let rel = format!("{AGENTS}/lib/node_modules/sdcadm/package.json");
    case(&rel, Bad::Fifo, &["install", "{v2}"]).await;
    case(&rel, Bad::DevZero, &["install", "{v2}"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_records_that_are_not_small_files() {
    let rel = format!("{STATE}/installed/net-agent.json");
    case(&rel, Bad::Fifo, &["install", "{v2}"]).await;
    case(&rel, Bad::Huge, &["report"]).await;
    case(&rel, Bad::Outside, &["install", "{v2}"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_package_json_and_image_uuid() {
    let dir = format!("{AGENTS}/lib/node_modules/net-agent");
    case(
        &format!("{dir}/package.json"),
        Bad::Fifo,
        &["install", "{v2}"],
    )
    .await;
    case(&format!("{dir}/package.json"), Bad::DevZero, &["report"]).await;
    case(&format!("{dir}/image_uuid"), Bad::Fifo, &["report"]).await;
    case(
        &format!("{dir}/image_uuid"),
        Bad::Fifo,
        &["remove", "net-agent"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_uuid_file() {
    let rel = format!("{AGENTS}/etc/net-agent");
    case(&rel, Bad::Fifo, &["install", "{v2}"]).await;
    case(&rel, Bad::Outside, &["install", "{v2}"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disabled_record() {
    let rel = format!("{STATE}/disabled/net-agent.json");
    case(&rel, Bad::Fifo, &["install", "{v2}"]).await;
    case(&rel, Bad::Fifo, &["enable", "net-agent"]).await;
    case(&rel, Bad::DevZero, &["report"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_markers_and_notes() {
    case(
        &format!("{STATE}/journal/net-agent.json"),
        Bad::Fifo,
        &["install", "{v2}"],
    )
    .await;
    case(
        &format!("{STATE}/broken/net-agent.json"),
        Bad::Fifo,
        &["report"],
    )
    .await;
    case(
        &format!("{STATE}/not-kept/net-agent.json"),
        Bad::Fifo,
        &["report"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smf_manifests_buildstamps_and_sysinfo() {
    case(
        &format!("{AGENTS}/smf/net-agent.xml"),
        Bad::Fifo,
        &["install", "{v2}"],
    )
    .await;
    case(
        &format!("{AGENTS}/smf/net-agent.xml"),
        Bad::DevZero,
        &["health", "net-agent"],
    )
    .await;
    // sdcadm as Triton installed it (no record): its buildstamp is read.
    case("opt/smartdc/sdcadm/etc/buildstamp", Bad::Fifo, &["report"]).await;
    case("sysinfo.json", Bad::DevZero, &["report"]).await;
}

/// A hook script of the installed package (run from the installed
/// directory: the old copy's `preuninstall` on remove and on update) that
/// is a FIFO, a link to /dev/zero, or a link to a runnable script outside
/// the root: refused, naming the script, before anything reads or runs it
/// (main ran the outside script as root, which wrote outside the root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_script_heads() {
    let rel = format!("{AGENTS}/lib/node_modules/net-agent/npm/preuninstall.sh");
    case(&rel, Bad::OutsideScript, &["remove", "net-agent"]).await;
    case(&rel, Bad::OutsideScript, &["install", "{v2}"]).await;
    case(&rel, Bad::Fifo, &["remove", "net-agent"]).await;
    case(&rel, Bad::DevZero, &["remove", "net-agent"]).await;
}
