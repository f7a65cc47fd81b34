//! agentsadm's own release and `agentsadm self-update`, with the real
//! binary against the simulator (its DC IMGAPI, updates server, SAPI and
//! CNAPI; the headnode's GZ is the simulator's rooted headnode):
//! - `make release`'s packaging (`agentsadm installer release`) gives an
//!   image IMGAPI validates and `agentsadm gz install FILE` installs;
//! - `self-update --latest` from the updates server's channel, `-n`, up to
//!   date, `--rollback`; what new servers get follows (SAPI's default
//!   image, the USB key's copy); `list` shows it;
//! - refusals (downgrade, major version, not agentsadm, not the headnode)
//!   change nothing: SAPI, CNAPI, IMGAPI, the headnode's files and a file
//!   outside it;
//! - SIGKILL at each step leaves a binary that runs, and the same command
//!   run again finishes the job;
//! - `update agentsadm` rolls it out to every server like any component,
//!   and a second plan has nothing to do.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use sha1::{Digest, Sha1};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::gz_common::{TestServer, assert_same, snapshot};
use crate::rel_common::{Run, agentsadm, assert_same_state, dc_env, dc_state};
use agentsadm_api::imgapi::ListImagesFilter;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::{BuildOptions, PublishTarget, SeedSpec, SimConfig, SimDc};
use agentsadm_types::image::ImageManifest;

const BIN: &str = "opt/smartdc/agentsadm/bin/agentsadm";
const USBKEY_COPY: &str = "usbkey/extra/agentsadm/agentsadm";

/// A headnode and one compute node, everything at 1.0.0; 1.2.0 of every
/// component on the updates server (channels dev and experimental).
async fn dc() -> SimDc {
    let spec = SeedSpec {
        updates_newer: Some("1.2.0".into()),
        ..SeedSpec::default()
    };
    let dc = SimDc::start(SimConfig::default().servers(1).populate(spec))
        .await
        .expect("simulator starts");
    // The headnode's directory is written on first use.
    dc.gz_report(dc.headnode().uuid).await.unwrap();
    dc
}

fn images_of(dc: &SimDc) -> (ImageManifest, ImageManifest) {
    let seed = dc.seed_report().unwrap();
    (
        seed.images["agentsadm"].clone(),
        seed.updates_newer["agentsadm"].clone(),
    )
}

/// `agentsadm self-update <args> --root <headnode>` against `dc`.
async fn self_update(dc: &SimDc, root: &Path, args: &[&str]) -> Run {
    let mut a = vec!["self-update"];
    a.extend_from_slice(args);
    let root = root.to_string_lossy().into_owned();
    a.extend(["--root", &root]);
    agentsadm(&a, &dc_env(dc)).await
}

fn ok(run: &Run) -> String {
    assert_eq!(
        run.code,
        Some(0),
        "stdout={} stderr={}",
        run.stdout,
        run.stderr
    );
    run.stdout.trim().to_string()
}

fn refused(run: &Run) -> String {
    assert_eq!(
        run.code,
        Some(1),
        "stdout={} stderr={}",
        run.stdout,
        run.stderr
    );
    run.stderr.trim().to_string()
}

/// What the installed binary says when run.
fn runs(root: &Path) -> String {
    match std::process::Command::new(root.join(BIN)).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Err(e) => format!("cannot run {BIN}: {e}"),
    }
}

async fn dc_images(dc: &SimDc) -> Vec<String> {
    let filter = ListImagesFilter {
        name: Some("agentsadm".into()),
        ..Default::default()
    };
    let mut v: Vec<String> = dc
        .apis()
        .imgapi
        .list_images(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.uuid.to_string())
        .collect();
    v.sort();
    v
}

/// What new servers get, and what the headnode reports: SAPI's default
/// image, the USB key's copy (as the installed binary), CNAPI's
/// server.agents entry.
fn assert_new_servers_get(dc: &SimDc, root: &Path, m: &ImageManifest) {
    assert_eq!(dc.default_image("agentsadm"), Some(m.uuid), "SAPI default");
    assert_eq!(
        std::fs::read(root.join(USBKEY_COPY)).unwrap(),
        std::fs::read(root.join(BIN)).unwrap(),
        "the USB key copy is the installed binary"
    );
    let agents = dc.server_agents(dc.headnode().uuid);
    let me = agents.iter().find(|a| a.name == "agentsadm").unwrap();
    assert_eq!(me.image_uuid, Some(m.uuid), "server.agents");
    assert_eq!(me.version, m.version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_validates_in_imgapi_and_installs_with_gz_install() {
    let out = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_agentsadm");
    let run = agentsadm(
        &[
            "installer",
            "release",
            "--binary",
            bin,
            "--semver",
            "1.4.0",
            "--branch",
            "master",
            "--timestamp",
            "20260512T101500Z",
            "--git-sha",
            "1a2b3c4",
            "--out",
            out.path().to_str().unwrap(),
            "--json",
        ],
        &[],
    )
    .await;
    let doc: serde_json::Value = serde_json::from_str(&ok(&run)).unwrap();
    let tarball = Path::new(doc["tarball"].as_str().unwrap()).to_path_buf();
    let manifest_path = Path::new(doc["manifest"].as_str().unwrap()).to_path_buf();
    let manifest: ImageManifest =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let file = std::fs::read(&tarball).unwrap();
    // The fields Triton's agent images carry, the file described exactly.
    assert_eq!(manifest.name, "agentsadm");
    assert_eq!(manifest.version, "1.4.0-master-20260512T101500Z-g1a2b3c4");
    assert_eq!(
        (manifest.image_type.as_str(), manifest.os.as_str()),
        ("other", "other")
    );
    assert_eq!(
        manifest.buildstamp(),
        Some("master-20260512T101500Z-g1a2b3c4")
    );
    let f = manifest.file().unwrap();
    assert_eq!(f.sha1, format!("{:x}", Sha1::digest(&file)));
    assert_eq!(f.size, file.len() as u64);
    assert_eq!(f.compression.as_str(), "gzip");
    // IMGAPI takes it as agent builds publish: import, file, activate.
    let dc = dc().await;
    let img = BuiltImage {
        manifest: manifest.clone(),
        file,
    };
    let published =
        agentsadm_sim::publish::publish_via_client(&dc.updates_client(), &img, Some("dev"))
            .await
            .expect("IMGAPI validates the manifest");
    assert_eq!(published.uuid, manifest.uuid);
    // The installer takes it as the agentsadm component, and the binary it
    // installs is the one packed, and runs.
    let srv = TestServer::new(false);
    let root = srv.root().to_str().unwrap().to_string();
    let run = agentsadm(
        &[
            "gz",
            "install",
            tarball.to_str().unwrap(),
            "--root",
            &root,
            "--no-sapi",
            "--no-cnapi",
        ],
        &[],
    )
    .await;
    ok(&run);
    assert_eq!(
        std::fs::read(srv.at(BIN)).unwrap(),
        std::fs::read(bin).unwrap()
    );
    let version = std::process::Command::new(srv.at(BIN))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("agentsadm "));
    // And self-update takes the file on a headnode.
    let hn = dc.headnode().root;
    let line = ok(&self_update(&dc, &hn, &[tarball.to_str().unwrap()]).await);
    assert!(line.starts_with("Updated agentsadm 1.0.0-"), "{line}");
    assert!(
        line.contains("1.4.0-master-20260512T101500Z-g1a2b3c4"),
        "{line}"
    );
    assert_eq!(
        std::fs::read(hn.join(BIN)).unwrap(),
        std::fs::read(bin).unwrap()
    );
    assert!(
        dc_images(&dc).await.contains(&manifest.uuid.to_string()),
        "uploaded"
    );
    assert_new_servers_get(&dc, &hn, &manifest);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_update_latest_from_the_updates_server_then_rollback() {
    let dc = dc().await;
    let hn = dc.headnode().root;
    let (v1, v2) = images_of(&dc);
    assert_eq!(runs(&hn), format!("agentsadm {}", v1.version));

    // -n: says what it would do, changes nothing.
    let (state, files) = (dc_state(&dc).await, snapshot(&hn));
    let line = ok(&self_update(&dc, &hn, &["-n", "--latest", "-C", "dev"]).await);
    assert!(
        line.starts_with(&format!(
            "Would update agentsadm {} to {}",
            v1.version, v2.version
        )),
        "{line}"
    );
    assert_same_state(&state, &dc_state(&dc).await, "-n");
    assert_same(&files, &snapshot(&hn), "-n");

    let line = ok(&self_update(&dc, &hn, &["--latest", "-C", "dev"]).await);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.starts_with(&format!(
            "Updated agentsadm {} to {}",
            v1.version, v2.version
        )),
        "{line}"
    );
    assert_eq!(runs(&hn), format!("agentsadm {}", v2.version));
    assert!(
        dc_images(&dc).await.contains(&v2.uuid.to_string()),
        "imported into the DC"
    );
    assert_new_servers_get(&dc, &hn, &v2);
    let list = agentsadm(&["list", "agentsadm"], &dc_env(&dc)).await;
    assert!(ok(&list).contains(&v2.version), "{}", list.stdout);

    // Nothing newer in the channel.
    let line = ok(&self_update(&dc, &hn, &["--latest", "-C", "dev"]).await);
    assert_eq!(line, format!("agentsadm {} is up to date.", v2.version));

    // --rollback: the previous copy, and new servers get it again.
    let line = ok(&self_update(&dc, &hn, &["--rollback"]).await);
    assert!(
        line.starts_with(&format!(
            "Rolled agentsadm back from {} to {}",
            v2.version, v1.version
        )),
        "{line}"
    );
    assert_eq!(runs(&hn), format!("agentsadm {}", v1.version));
    assert_new_servers_get(&dc, &hn, &v1);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_self_updates_change_nothing() {
    let dc = dc().await;
    let hn = dc.headnode().root;
    let (v1, _) = images_of(&dc);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("sentinel"), "untouched").unwrap();
    // The same semver, built a year earlier: older.
    let mut earlier = BuildOptions::new("1.0.0");
    earlier.stamp = "20250101T000000Z".into();
    let older = dc
        .publish_component("agentsadm", &earlier, PublishTarget::Dc)
        .unwrap();
    let major = dc
        .publish_component(
            "agentsadm",
            &BuildOptions::new("2.0.0"),
            PublishTarget::Updates {
                channels: vec!["staging".into()],
            },
        )
        .unwrap();
    let vm_agent = dc.seed_report().unwrap().images["vm-agent"]
        .uuid
        .to_string();
    let cn = dc.compute_nodes()[0].root.clone();
    dc.gz_report(dc.compute_nodes()[0].uuid).await.unwrap();
    let (older_id, major_id) = (older.uuid.to_string(), major.uuid.to_string());
    // A directory that is no global zone at all (no sysinfo).
    let nowhere = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<&str>, &Path, &str)> = vec![
        (vec![older_id.as_str()], &hn, "--allow-downgrade"),
        (
            vec![major_id.as_str(), "-C", "staging"],
            &hn,
            "--allow-major-update",
        ),
        (vec![vm_agent.as_str()], &hn, "not an agentsadm image"),
        (vec!["--latest", "-C", "dev"], &cn, "is not one"),
        (
            vec!["--latest", "-C", "dev"],
            nowhere.path(),
            "self-update runs in a headnode's global zone, and",
        ),
        (
            vec!["no-such-version"],
            &hn,
            "cannot find the agentsadm image",
        ),
    ];
    for (args, root, why) in cases {
        let (state, files, images) = (dc_state(&dc).await, snapshot(root), dc_images(&dc).await);
        let err = refused(&self_update(&dc, root, &args).await);
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        // gz's hint; self-update has no such option.
        assert!(!err.contains("--server-uuid"), "{err}");
        assert_same_state(&state, &dc_state(&dc).await, why);
        assert_same(&files, &snapshot(root), why);
        assert_eq!(images, dc_images(&dc).await, "{why}");
        assert_eq!(
            std::fs::read_to_string(outside.path().join("sentinel")).unwrap(),
            "untouched"
        );
    }
    // --latest stays within the major version, and says what it left out.
    let run = self_update(&dc, &hn, &["-n", "--latest", "-C", "staging"]).await;
    let line = ok(&run);
    let want = format!(
        "agentsadm {} is up to date: nothing newer in channel staging of the updates server {}",
        v1.version,
        dc.urls().updates
    );
    assert!(line.starts_with(&want), "{line}");
    assert!(
        run.stderr.contains("--allow-major-update"),
        "{}",
        run.stderr
    );
    let line = ok(&self_update(
        &dc,
        &hn,
        &["-n", "--latest", "-C", "staging", "--allow-major-update"],
    )
    .await);
    assert!(line.contains(&major.version), "{line}");
    let line = ok(&self_update(&dc, &hn, &["-n", &older_id, "--allow-downgrade"]).await);
    assert!(line.contains(&older.version), "{line}");
    // Nothing kept yet to roll back to.
    let err = refused(&self_update(&dc, &hn, &["--rollback"]).await);
    assert!(err.contains("no previous agentsadm is kept"), "{err}");
    assert_eq!(runs(&hn), format!("agentsadm {}", v1.version));
    dc.shutdown().await;
}

/// `self-update --latest -C dev` stopped at `point`, checked to still have
/// a binary that runs, then killed with SIGKILL.
async fn kill_self_update_at(dc: &SimDc, root: &Path, point: &str, ok_versions: &[String]) {
    kill_self_update_with(dc, root, &["--latest", "-C", "dev"], point, ok_versions).await
}

async fn kill_self_update_with(
    dc: &SimDc,
    root: &Path,
    args: &[&str],
    point: &str,
    ok_versions: &[String],
) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"));
    cmd.arg("self-update")
        .args(args)
        .args(["--root", root.to_str().unwrap()]);
    cmd.env("AGENTSADM_TEST_CRASH_AT", format!("wait:{point}"))
        .env(
            "XDG_STATE_HOME",
            std::env::temp_dir().join("agentsadm-selfupdate-test-logs"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in dc_env(dc) {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let marker = format!("test checkpoint {point} reached");
    let mut seen = Vec::new();
    let reached = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(&marker) {
                return true;
            }
            seen.push(line);
        }
        false
    })
    .await;
    assert_eq!(reached, Ok(true), "{point}: not reached; stderr {seen:?}");
    let now = runs(root);
    assert!(
        ok_versions.iter().any(|v| now == format!("agentsadm {v}")),
        "{point}: {now}"
    );
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(9), "{point}");
}

/// After the rerun of a killed self-update from `v1` to `v2`: the job is
/// done once, not twice. `v2` runs; new servers get it (SAPI's default,
/// the USB key's copy, CNAPI's entry); the datacenter IMGAPI has it
/// active; the copy kept for --rollback is still `v1` (an install
/// repeated over itself would keep `v2`); no stray file is left beside
/// the USB key's copy.
async fn assert_finished_once(
    dc: &SimDc,
    hn: &Path,
    v1: &ImageManifest,
    v2: &ImageManifest,
    point: &str,
) {
    assert_eq!(runs(hn), format!("agentsadm {}", v2.version), "{point}");
    assert_new_servers_get(dc, hn, v2);
    assert!(
        dc_images(dc).await.contains(&v2.uuid.to_string()),
        "{point}: {} is not active in the datacenter IMGAPI",
        v2.uuid
    );
    let line = ok(&self_update(dc, hn, &["-n", "--rollback"]).await);
    assert!(
        line.starts_with(&format!(
            "Would roll agentsadm back from {} to {}",
            v2.version, v1.version
        )),
        "{point}: {line}"
    );
    let beside: Vec<String> = std::fs::read_dir(hn.join(USBKEY_COPY).parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(beside, ["agentsadm"], "{point}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_self_update_leaves_a_binary_that_runs() {
    for point in [
        "downloaded",
        "staged",
        "after-journal",
        "after-move-old",
        "after-place-new",
        "after-smf",
        "after-adopt",
        "committing",
        "after-previous",
        "self-update-installed",
        "self-update-default-set",
    ] {
        let dc = dc().await;
        let hn = dc.headnode().root;
        let (v1, v2) = images_of(&dc);
        kill_self_update_at(&dc, &hn, point, &[v1.version.clone(), v2.version.clone()]).await;
        // Killed: the old binary or the new one, whole; it runs.
        let now = runs(&hn);
        assert!(
            now == format!("agentsadm {}", v1.version)
                || now == format!("agentsadm {}", v2.version),
            "{point}: {now}"
        );
        // The same command again finishes the job.
        let line = ok(&self_update(&dc, &hn, &["--latest", "-C", "dev"]).await);
        assert!(line.contains(&v2.version), "{point}: {line}");
        assert_finished_once(&dc, &hn, &v1, &v2, point).await;
        dc.shutdown().await;
    }
}

/// `self-update FILE` killed at each step, from the install to the
/// upload into the datacenter IMGAPI (manifest imported, file added, not
/// yet activated) and SAPI's default: the same command run again
/// finishes it (main took a half-uploaded image for uploaded, and gave
/// new servers an image IMGAPI does not serve).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_self_update_from_a_file_is_finished_by_the_same_command() {
    let dir = tempfile::tempdir().unwrap();
    let v3 = crate::gz_common::image("agentsadm", "1.3.0");
    let file = crate::gz_common::write_image(&v3, dir.path());
    let file = file.to_str().unwrap();
    for point in [
        "after-journal",
        "after-place-new",
        "committing",
        "self-update-installed",
        "self-update-upload-manifest",
        "self-update-upload-file",
        "self-update-default-set",
    ] {
        let dc = dc().await;
        let hn = dc.headnode().root;
        let (v1, _) = images_of(&dc);
        let versions = [v1.version.clone(), v3.manifest.version.clone()];
        kill_self_update_with(&dc, &hn, &[file], point, &versions).await;
        let line = ok(&self_update(&dc, &hn, &[file]).await);
        assert!(line.contains(&v3.manifest.version), "{point}: {line}");
        assert_finished_once(&dc, &hn, &v1, &v3.manifest, point).await;
        dc.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_killed_after_its_swap_is_finished_never_undone() {
    let dc = dc().await;
    let hn = dc.headnode().root;
    let (v1, v2) = images_of(&dc);
    ok(&self_update(&dc, &hn, &["--latest", "-C", "dev"]).await);
    assert_eq!(runs(&hn), format!("agentsadm {}", v2.version));
    kill_self_update_with(
        &dc,
        &hn,
        &["--rollback"],
        "self-update-rolled-back",
        std::slice::from_ref(&v1.version),
    )
    .await;
    assert_eq!(runs(&hn), format!("agentsadm {}", v1.version));
    // The same command again finishes the rollback: v1 stays, and new
    // servers get v1, not the build the operator rolled back from.
    let line = ok(&self_update(&dc, &hn, &["--rollback"]).await);
    assert!(
        line.starts_with(&format!(
            "Rolled agentsadm back from {} to {}",
            v2.version, v1.version
        )),
        "{line}"
    );
    assert_eq!(runs(&hn), format!("agentsadm {}", v1.version));
    assert_new_servers_get(&dc, &hn, &v1);
    // Finished: a later --rollback is a new one (back to v2).
    let line = ok(&self_update(&dc, &hn, &["--rollback"]).await);
    assert!(line.contains(&format!("to {}", v2.version)), "{line}");
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_agentsadm_rolls_out_to_every_server_and_converges() {
    let dc = dc().await;
    let (_, v2) = images_of(&dc);
    let env = dc_env(&dc);
    let run = agentsadm(
        &["update", "agentsadm", "--latest", "-C", "dev", "-y"],
        &env,
    )
    .await;
    assert_eq!(
        run.code,
        Some(0),
        "stdout={} stderr={}",
        run.stdout,
        run.stderr
    );
    for s in dc.servers() {
        let agents = dc.server_agents(s.uuid);
        let me = agents.iter().find(|a| a.name == "agentsadm").unwrap();
        assert_eq!(me.image_uuid, Some(v2.uuid), "{}", s.hostname);
        assert_eq!(me.version, v2.version, "{}", s.hostname);
        assert_eq!(
            runs(&s.root),
            format!("agentsadm {}", v2.version),
            "{}",
            s.hostname
        );
    }
    assert_eq!(dc.default_image("agentsadm"), Some(v2.uuid));
    // Planned again: nothing left to do.
    let run = agentsadm(
        &["update", "agentsadm", "--latest", "-C", "dev", "-n"],
        &env,
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("Nothing to do."), "{}", run.stdout);
    dc.shutdown().await;
}

/// `agentsadm hold agentsadm` (datacenter-wide, or on the headnode only)
/// stops a self-update that would move the installed copy, naming the
/// hold and what lets it move, with nothing changed (main updated it
/// anyway); `--ignore-holds` moves it, and `--rollback` is held too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_update_honours_holds_on_agentsadm() {
    let dc = dc().await;
    let hn = dc.headnode().root;
    let (v1, v2) = images_of(&dc);
    let env = dc_env(&dc);
    let hostname = dc.headnode().hostname.clone();
    for (hold, scope) in [
        (
            vec!["hold", "agentsadm", "--reason", "case 9", "-y"],
            "datacenter-wide",
        ),
        (
            vec![
                "hold",
                "agentsadm",
                "-s",
                hostname.as_str(),
                "--reason",
                "case 9",
                "-y",
            ],
            "on this server",
        ),
    ] {
        let run = agentsadm(&hold, &env).await;
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        let (state, files) = (dc_state(&dc).await, snapshot(&hn));
        for args in [
            &["--latest", "-C", "dev"][..],
            &["-n", "--latest", "-C", "dev"],
        ] {
            let err = refused(&self_update(&dc, &hn, args).await);
            assert!(
                err.contains(&format!("agentsadm is held {scope} by "))
                    && err.contains("case 9")
                    && err.contains("'agentsadm release agentsadm'")
                    && err.contains("--ignore-holds"),
                "{err}"
            );
        }
        assert_same_state(&state, &dc_state(&dc).await, scope);
        assert_same(&files, &snapshot(&hn), scope);
        assert_eq!(runs(&hn), format!("agentsadm {}", v1.version));
        let mut release = vec!["release", "agentsadm", "-y"];
        if scope == "on this server" {
            release.extend(["-s", hostname.as_str()]);
        }
        let run = agentsadm(&release, &env).await;
        assert_eq!(run.code, Some(0), "{}", run.stderr);
    }
    // Held again: --ignore-holds moves it, and a rollback is held too.
    let run = agentsadm(&["hold", "agentsadm", "-y"], &env).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let line = ok(&self_update(&dc, &hn, &["--latest", "-C", "dev", "--ignore-holds"]).await);
    assert!(line.starts_with("Updated agentsadm"), "{line}");
    assert_eq!(runs(&hn), format!("agentsadm {}", v2.version));
    let err = refused(&self_update(&dc, &hn, &["--rollback"]).await);
    assert!(err.contains("agentsadm is held datacenter-wide"), "{err}");
    assert_eq!(runs(&hn), format!("agentsadm {}", v2.version));
    dc.shutdown().await;
}

/// A self-update is a run in `agentsadm history` (who, when, the
/// headnode's agentsadm from v1 to v2), and `agentsadm revert` of it says
/// what undoes it ('self-update --rollback', which also puts back what new
/// servers get) and changes nothing; main recorded no entry at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_update_is_in_history_and_revert_names_its_undo() {
    let dc = dc().await;
    let hn = dc.headnode().root;
    let (v1, v2) = images_of(&dc);
    let env = dc_env(&dc);
    ok(&self_update(&dc, &hn, &["--latest", "-C", "dev"]).await);
    let listed = agentsadm(&["history", "--json"], &env).await;
    let doc: serde_json::Value = serde_json::from_str(&ok(&listed)).unwrap();
    let entries = doc["runs"].as_array().cloned().unwrap_or_default();
    let run = entries
        .iter()
        .find(|r| r["operation"] == "self-update")
        .unwrap_or_else(|| panic!("no self-update in {entries:?}"));
    assert_eq!(run["status"], "succeeded", "{run}");
    let server = &run["servers"][0];
    assert_eq!(server["server"], dc.headnode().uuid.to_string(), "{run}");
    let step = &server["steps"][0];
    assert_eq!(
        (
            &step["component"],
            &step["from"],
            &step["to"],
            &step["status"]
        ),
        (
            &serde_json::json!("agentsadm"),
            &serde_json::json!(v1.uuid.to_string()),
            &serde_json::json!(v2.uuid.to_string()),
            &serde_json::json!("done")
        ),
        "{run}"
    );
    let id = run["id"].as_str().unwrap().to_string();
    // The text forms read it too: the list, and the run itself.
    for args in [&["history"][..], &["history", &id[..8]]] {
        let text = ok(&agentsadm(args, &env).await);
        assert!(text.contains("self-update"), "{args:?}: {text}");
    }
    let shown = ok(&agentsadm(&["history", &id[..8]], &env).await);
    assert!(
        shown.contains("agentsadm") && shown.contains(&v2.uuid.to_string()[..8]),
        "{shown}"
    );
    let (state, files) = (dc_state(&dc).await, snapshot(&hn));
    for args in [&["revert", &id[..8], "-n"][..], &["revert", &id[..8], "-y"]] {
        let out = agentsadm(args, &env).await;
        assert_eq!(out.code, Some(1), "{} {}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("was a self-update")
                && out.stderr.contains("'agentsadm self-update --rollback'"),
            "{}",
            out.stderr
        );
    }
    assert_same_state(&state, &dc_state(&dc).await, "revert");
    assert_same(&files, &snapshot(&hn), "revert");
    assert_eq!(runs(&hn), format!("agentsadm {}", v2.version));
    dc.shutdown().await;
}
