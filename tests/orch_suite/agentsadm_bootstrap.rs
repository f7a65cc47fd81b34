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
