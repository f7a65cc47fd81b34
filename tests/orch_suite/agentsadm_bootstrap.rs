//! The bootstrap (`installer/bootstrap-agentsadm.sh`) on rooted simulated
//! servers, run for real by bash through CNAPI execute, and the strict
//! execute that stands for the servers' own agentsadm:
//!
//! - killed (SIGKILL) at each of its checkpoints, replacing a copy or onto
//!   a server with none, it leaves either no agentsadm (none before), the
//!   old copy or the new one, whole; run again, it converges and the copy
//!   records itself;
//! - an old copy refuses words newer than itself (exit 2, clap's message),
//!   a missing one answers 127, a current one runs the line; with the
//!   strictness off, the simulator's own agentsadm runs every line.
//! - a download whose answer has no Content-Length writes at most the
//!   manifest's size plus one byte; one the disk has no room for is not
//!   started.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use agentsadm_api::Apis;
use agentsadm_api::bootstrap::{BootstrapImage, bootstrap_request};
use agentsadm_api::compat;
use agentsadm_sim::publish::{BuildOptions, PublishTarget};
use agentsadm_sim::{SeedSpec, SimConfig, SimDc, Strictness};
use agentsadm_types::ids::{ImageUuid, ServerUuid};

use crate::agentsadm_first::{gz, old_copy, remove_agentsadm};

/// The checkpoints of the script, in the order it reaches them.
const CHECKPOINTS: [&str; 5] = [
    "bootstrap-fetched",
    "bootstrap-unpacked",
    "bootstrap-unrecorded",
    "bootstrap-binary",
    "bootstrap-placed",
];

/// Run the bootstrap of `image` on `server`, killed at `crash` if given.
async fn bootstrap(
    apis: &Apis,
    server: ServerUuid,
    image: ImageUuid,
    crash: Option<&str>,
) -> (i32, String) {
    let manifest = apis.imgapi.get_image(image).await.unwrap();
    let file = &manifest.files[0];
    let env: BTreeMap<String, String> = crash
        .map(|c| ("AGENTSADM_TEST_CRASH_AT".to_string(), c.to_string()))
        .into_iter()
        .collect();
    let request = bootstrap_request(
        &BootstrapImage {
            image,
            sha1: file.sha1.clone(),
            size: file.size,
        },
        env,
    );
    let r = apis
        .cnapi
        .execute(server, &request, Duration::from_secs(60))
        .await
        .unwrap();
    (r.exit_status, format!("{}{}", r.stdout, r.stderr))
}

/// The image the copy at `root` says it is, if its files are there (the
/// binary, the link to it, and `image_uuid`).
fn copy_at(root: &Path) -> Option<String> {
    let dir = root.join("opt/smartdc/agentsadm");
    if !dir.join("bin/agentsadm").is_file() {
        return None;
    }
    assert!(
        root.join("opt/smartdc/bin/agentsadm").is_file(),
        "the binary is there, its link is not"
    );
    std::fs::read_to_string(dir.join("image_uuid"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Lay out every server's files now (the simulator does it on first use),
/// so that what a test removes stays removed.
async fn prepare(dc: &SimDc) {
    for s in dc.compute_nodes() {
        dc.gz_report(s.uuid).await.unwrap();
    }
}

/// The copy the server reports to CNAPI's `server.agents`.
async fn reported(dc: &SimDc, server: ServerUuid) -> Option<ImageUuid> {
    let report = dc.gz_report(server).await.unwrap();
    report
        .agents
        .iter()
        .find(|a| a.name == "agentsadm")
        .and_then(|a| a.image_uuid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_killed_at_each_checkpoint_then_run_again_converges() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(CHECKPOINTS.len() + 1)
            .populate(SeedSpec::default()),
    )
    .await
    .expect("simulator starts");
    let new = dc
        .publish_component("agentsadm", &BuildOptions::new("0.2.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    let apis = dc.apis();
    let cns = dc.compute_nodes();
    prepare(&dc).await;
    let old = dc.default_image("agentsadm").unwrap();

    // Replacing a copy: one server per checkpoint.
    for (s, crash) in cns.iter().zip(CHECKPOINTS) {
        assert_eq!(copy_at(&s.root), Some(old.to_string()), "{}", s.hostname);
        let (status, out) = bootstrap(&apis, s.uuid, new, Some(crash)).await;
        assert_ne!(status, 0, "{crash}: not killed\n{out}");
        // Killed: a whole copy is there, the old one or the new one.
        let now = copy_at(&s.root);
        assert!(
            now == Some(old.to_string()) || now == Some(new.to_string()),
            "{crash}: {now:?}"
        );
        assert_eq!(now == Some(new.to_string()), crash == "bootstrap-placed");
        let (status, out) = gz(&apis, s.uuid, &["gz", "report", "--json"]).await;
        assert_eq!(status, 0, "{crash}: the copy left runs\n{out}");
        // Run again: done, then recorded by the copy it put there.
        let (status, out) = bootstrap(&apis, s.uuid, new, None).await;
        assert_eq!(status, 0, "{crash}\n{out}");
        let record = compat::record_args(new);
        let record: Vec<&str> = record.iter().map(String::as_str).collect();
        let (status, out) = gz(&apis, s.uuid, &record).await;
        assert_eq!(status, 0, "{crash}\n{out}");
        assert_eq!(copy_at(&s.root), Some(new.to_string()), "{crash}");
        assert_eq!(reported(&dc, s.uuid).await, Some(new), "{crash}");
        assert!(!s.root.join("opt/smartdc/agentsadm.bootstrap").exists());
        // And again: nothing to do.
        let (status, out) = bootstrap(&apis, s.uuid, new, None).await;
        assert_eq!(
            (status, out.contains("already in place")),
            (0, true),
            "{out}"
        );
    }

    // Onto a server with none: killed at each checkpoint it reaches in
    // turn, each run going on from where the last one stopped.
    let s = cns.last().unwrap();
    remove_agentsadm(&dc, s).await;
    assert_eq!(copy_at(&s.root), None);
    for crash in CHECKPOINTS {
        if crash == "bootstrap-unrecorded" {
            // No record of a copy to remove.
            continue;
        }
        let (status, out) = bootstrap(&apis, s.uuid, new, Some(crash)).await;
        assert_ne!(status, 0, "{crash}: not killed\n{out}");
        let now = copy_at(&s.root);
        assert!(
            now.is_none() || now == Some(new.to_string()),
            "{crash}: {now:?}"
        );
    }
    let (status, out) = bootstrap(&apis, s.uuid, new, None).await;
    assert_eq!(status, 0, "{out}");
    let record = compat::record_args(new);
    let record: Vec<&str> = record.iter().map(String::as_str).collect();
    let (status, out) = gz(&apis, s.uuid, &record).await;
    assert_eq!(status, 0, "{out}");
    assert_eq!(reported(&dc, s.uuid).await, Some(new));
    assert!(!s.root.join("opt/smartdc/agentsadm.bootstrap").exists());
    dc.shutdown().await;
}

/// What each server's execute answers to `gz health` (new words) and `gz
/// report` (baseline words).
async fn answers(apis: &Apis, server: ServerUuid) -> ((i32, String), (i32, String)) {
    let health = gz(apis, server, &["gz", "health", "vm-agent", "--json"]).await;
    let report = gz(apis, server, &["gz", "report", "--json"]).await;
    (health, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_execute_runs_what_the_servers_own_agentsadm_parses() {
    for strict in [true, false] {
        let dc = SimDc::start(
            SimConfig::default()
                .servers(3)
                .populate(SeedSpec::default())
                .strictness(Strictness {
                    execute_runs_the_servers_agentsadm: strict,
                    ..Strictness::default()
                }),
        )
        .await
        .expect("simulator starts");
        let old = dc
            .publish_component("agentsadm", &BuildOptions::new("0.0.9"), PublishTarget::Dc)
            .unwrap()
            .uuid;
        let apis = dc.apis();
        let cns = dc.compute_nodes();
        prepare(&dc).await;
        old_copy(&dc, &cns[1], old).await;
        remove_agentsadm(&dc, &cns[2]).await;

        // A current copy parses everything.
        let ((h, out), (r, _)) = answers(&apis, cns[0].uuid).await;
        assert!(h != 2 && h != 127 && r == 0, "{h} {r} {out}");
        // An old one refuses a new subcommand, and a new flag, and parses
        // the baseline.
        let ((h, out), (r, _)) = answers(&apis, cns[1].uuid).await;
        let install = compat::install_args(old, Some(Some(old)), &[]);
        let install: Vec<&str> = install.iter().map(String::as_str).collect();
        let (i, iout) = gz(&apis, cns[1].uuid, &install).await;
        if strict {
            assert_eq!(h, compat::USAGE_EXIT_STATUS, "{out}");
            assert!(
                out.contains("error: unrecognized subcommand 'health'"),
                "{out}"
            );
            assert_eq!(i, compat::USAGE_EXIT_STATUS, "{iout}");
            assert!(
                iout.contains("error: unexpected argument '--inside-cn-agent' found"),
                "{iout}"
            );
        } else {
            assert!(h != 2 && h != 127, "{h} {out}");
            assert_eq!(i, 0, "{iout}");
        }
        assert_eq!(r, 0);
        // None: the script's shell finds no agentsadm.
        let ((h, out), (r, rout)) = answers(&apis, cns[2].uuid).await;
        if strict {
            assert_eq!((h, r), (127, 127), "{out}");
            assert!(rout.contains("No such file or directory"), "{rout}");
        } else {
            assert!(h != 127 && r == 0, "{h} {r} {out}");
        }
        dc.shutdown().await;
    }
}

/// An IMGAPI stand-in on 127.0.0.1 whose image file answer has no
/// Content-Length and never ends (up to 256 MiB, then it closes): returns
/// its URL, how many bytes it managed to send, and how many requests it got.
async fn endless_imgapi() -> (
    String,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (s, r) = (sent.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            r.fetch_add(1, Ordering::SeqCst);
            let s = s.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n";
                if sock.write_all(head).await.is_err() {
                    return;
                }
                let chunk = vec![0x5au8; 64 * 1024];
                for _ in 0..4096 {
                    if sock.write_all(&chunk).await.is_err() {
                        return;
                    }
                    s.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
            });
        }
    });
    (url, sent, requests)
}

/// Run the script as CNAPI would, with `root` as the global zone.
async fn run_script(root: &Path, imgapi: &str, image: ImageUuid, size: u64) -> (i32, String) {
    let script = root.join("bootstrap-agentsadm.sh");
    std::fs::write(&script, agentsadm_api::bootstrap::BOOTSTRAP_SCRIPT).unwrap();
    let child = tokio::process::Command::new("bash")
        .arg(&script)
        .args([image.to_string(), "0".repeat(40), size.to_string()])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("IMGAPI_URL", imgapi)
        .env("AGENTSADM_ROOT", root)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("the bootstrap did not end within 120 s")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The largest file under `dir`.
fn largest_file(dir: &Path) -> u64 {
    let mut max = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let md = e.metadata().unwrap();
        max = max.max(if md.is_dir() {
            largest_file(&e.path())
        } else {
            md.len()
        });
    }
    max
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_without_content_length_stops_at_the_manifests_size() {
    let root = tempfile::tempdir().unwrap();
    let (url, sent, _) = endless_imgapi().await;
    let image = ImageUuid::new_v4();
    let size = 807;
    let (status, out) = run_script(root.path(), &url, image, size).await;
    let sent = sent.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("sent more than the 807 bytes"), "{out}");
    assert!(out.contains(&image.to_string()), "{out}");
    // Socket buffers and one chunk in flight, never the 256 MiB on offer.
    assert!(sent < 32 << 20, "the server got {sent} bytes out: {out}");
    assert!(
        largest_file(root.path()) < 64 << 10,
        "a file of {} bytes was written",
        largest_file(root.path())
    );
    let cache = root.path().join("opt/smartdc/agents/.agentsadm/downloads");
    assert_eq!(
        std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0),
        0,
        "nothing left in the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_the_disk_has_no_room_for_is_not_started() {
    let root = tempfile::tempdir().unwrap();
    let (url, _, requests) = endless_imgapi().await;
    // 999 GB: more than this machine's temporary filesystem has free.
    let (status, out) = run_script(root.path(), &url, ImageUuid::new_v4(), 999_999_999_999).await;
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("KiB free"), "{out}");
    assert!(out.contains("free space there and run again"), "{out}");
    assert_eq!(
        requests.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "{out}"
    );
}
