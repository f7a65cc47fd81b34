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

/// What `run` printed, as [`crate::snapshot::command_text`] shows it (the
/// command line is `what`), masked, is the snapshot `name`; it exited
/// `code`.
fn snap(name: &str, what: &[&str], run: &Run, code: i32) {
    let text = crate::snapshot::command_text(
        (
            run.code.unwrap_or(-1),
            run.stdout.clone(),
            run.stderr.clone(),
        ),
        what,
        code,
    );
    crate::snapshot::masked_snapshot!(name, text);
}

/// [`snap`] of a [`self_update`] run with `args`.
fn snap_self(name: &str, args: &[&str], run: &Run, code: i32) {
    let mut what = vec!["self-update"];
    what.extend_from_slice(args);
    what.extend(["--root", "ROOT"]);
    snap(name, &what, run, code);
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
    let run = self_update(&dc, &hn, &[tarball.to_str().unwrap()]).await;
    snap_self("selfupdate_from_a_file", &["FILE"], &run, 0);
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
    let args = ["-n", "--latest", "-C", "dev"];
    snap_self(
        "selfupdate_latest_dry_run",
        &args,
        &self_update(&dc, &hn, &args).await,
        0,
    );
    assert_same_state(&state, &dc_state(&dc).await, "-n");
    assert_same(&files, &snapshot(&hn), "-n");

    let args = ["--latest", "-C", "dev"];
    snap_self(
        "selfupdate_latest",
        &args,
        &self_update(&dc, &hn, &args).await,
        0,
    );
    assert_eq!(runs(&hn), format!("agentsadm {}", v2.version));
    assert!(
        dc_images(&dc).await.contains(&v2.uuid.to_string()),
        "imported into the DC"
    );
    assert_new_servers_get(&dc, &hn, &v2);
    let args = ["list", "agentsadm"];
    snap(
        "selfupdate_list_after",
        &args,
        &agentsadm(&args, &dc_env(&dc)).await,
        0,
    );

    // Nothing newer in the channel.
    let line = ok(&self_update(&dc, &hn, &["--latest", "-C", "dev"]).await);
    assert_eq!(line, format!("agentsadm {} is up to date.", v2.version));

    // --rollback: the previous copy, and new servers get it again.
    snap_self(
        "selfupdate_rollback",
        &["--rollback"],
        &self_update(&dc, &hn, &["--rollback"]).await,
        0,
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
    // Fixed UUIDs: a build's version and short id derive from its UUID,
    // and the snapshots show them.
    let fixed = |u: &str| Some(u.parse().expect("a UUID"));
    let mut earlier = BuildOptions::new("1.0.0");
    earlier.stamp = "20250101T000000Z".into();
    earlier.uuid = fixed("0e1de500-0000-4000-8000-000000000100");
    let older = dc
        .publish_component("agentsadm", &earlier, PublishTarget::Dc)
        .unwrap();
    let major = dc
        .publish_component(
            "agentsadm",
            &BuildOptions {
                uuid: fixed("2a1a0200-0000-4000-8000-000000000200"),
                ..BuildOptions::new("2.0.0")
            },
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
    // Each refusal is one line saying why and what to do (never gz's
    // --server-uuid hint: self-update has no such option).
    let cases: Vec<(Vec<&str>, &Path, &str)> = vec![
        (vec![older_id.as_str()], &hn, "downgrade"),
        (
            vec![major_id.as_str(), "-C", "staging"],
            &hn,
            "major_update",
        ),
        (vec![vm_agent.as_str()], &hn, "not_agentsadm"),
        (vec!["--latest", "-C", "dev"], &cn, "not_the_headnode"),
        (
            vec!["--latest", "-C", "dev"],
            nowhere.path(),
            "not_a_global_zone",
        ),
        (vec!["no-such-version"], &hn, "no_such_version"),
    ];
    for (args, root, why) in cases {
        let (state, files, images) = (dc_state(&dc).await, snapshot(root), dc_images(&dc).await);
        snap_self(
            &format!("selfupdate_refused_{why}"),
            &args,
            &self_update(&dc, root, &args).await,
            1,
        );
        assert_same_state(&state, &dc_state(&dc).await, why);
        assert_same(&files, &snapshot(root), why);
        assert_eq!(images, dc_images(&dc).await, "{why}");
        assert_eq!(
            std::fs::read_to_string(outside.path().join("sentinel")).unwrap(),
            "untouched"
        );
    }
    // --latest stays within the major version, and says what it left out.
    // (Its note on stderr, which a command that succeeded does not show,
    // is checked apart.)
    let args = ["-n", "--latest", "-C", "staging"];
    let run = self_update(&dc, &hn, &args).await;
    snap_self("selfupdate_latest_within_major", &args, &run, 0);
    crate::snapshot::masked_snapshot!("selfupdate_latest_within_major_note", run.stderr);
    let args = ["-n", "--latest", "-C", "staging", "--allow-major-update"];
    snap_self(
        "selfupdate_major_allowed_dry_run",
        &args,
        &self_update(&dc, &hn, &args).await,
        0,
    );
    let args = ["-n", &older_id, "--allow-downgrade"];
    snap_self(
        "selfupdate_downgrade_allowed_dry_run",
        &args,
        &self_update(&dc, &hn, &args).await,
        0,
    );
    // Nothing kept yet to roll back to.
    snap_self(
        "selfupdate_refused_nothing_kept",
        &["--rollback"],
        &self_update(&dc, &hn, &["--rollback"]).await,
        1,
    );
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
    // The checkpoint's line among whatever the run printed before it.
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
        // The same command again finishes the job. What it says depends
        // on where the kill landed (an update, or finishing one): it
        // names v2, looked for in it.
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
        // What the rerun says depends on where the kill landed.
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
    snap_self(
        "selfupdate_rollback_finished",
        &["--rollback"],
        &self_update(&dc, &hn, &["--rollback"]).await,
        0,
    );
    assert_eq!(runs(&hn), format!("agentsadm {}", v1.version));
    assert_new_servers_get(&dc, &hn, &v1);
    // Finished: a later --rollback is a new one (back to v2).
    snap_self(
        "selfupdate_rollback_again",
        &["--rollback"],
        &self_update(&dc, &hn, &["--rollback"]).await,
        0,
    );
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
    let args = ["update", "agentsadm", "--latest", "-C", "dev", "-n"];
    snap(
        "selfupdate_update_agentsadm_again",
        &args,
        &agentsadm(&args, &env).await,
        0,
    );
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
        // The hold, its reason, and what lets it move; -n says the same.
        for args in [
            &["--latest", "-C", "dev"][..],
            &["-n", "--latest", "-C", "dev"],
        ] {
            let err = refused(&self_update(&dc, &hn, args).await);
            crate::snapshot::masked_snapshot!(
                format!("selfupdate_held_{}", scope.replace([' ', '-'], "_")),
                err
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
    let args = ["--latest", "-C", "dev", "--ignore-holds"];
    snap_self(
        "selfupdate_ignore_holds",
        &args,
        &self_update(&dc, &hn, &args).await,
        0,
    );
    assert_eq!(runs(&hn), format!("agentsadm {}", v2.version));
    snap_self(
        "selfupdate_rollback_held",
        &["--rollback"],
        &self_update(&dc, &hn, &["--rollback"]).await,
        1,
    );
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
    // The text forms read it too: the list, and the run itself (the
    // headnode's agentsadm from v1 to v2).
    snap(
        "selfupdate_history_list",
        &["history"],
        &agentsadm(&["history"], &env).await,
        0,
    );
    snap(
        "selfupdate_history_run",
        &["history", "RUN"],
        &agentsadm(&["history", &id[..8]], &env).await,
        0,
    );
    let (state, files) = (dc_state(&dc).await, snapshot(&hn));
    // Refused, naming what undoes it; -n and -y alike.
    for (args, flag) in [
        (&["revert", &id[..8], "-n"][..], "-n"),
        (&["revert", &id[..8], "-y"], "-y"),
    ] {
        snap(
            &format!(
                "selfupdate_revert_names_its_undo_{}",
                flag.trim_start_matches('-')
            ),
            &["revert", "RUN", flag],
            &agentsadm(args, &env).await,
            1,
        );
    }
    assert_same_state(&state, &dc_state(&dc).await, "revert");
    assert_same(&files, &snapshot(&hn), "revert");
    assert_eq!(runs(&hn), format!("agentsadm {}", v2.version));
    dc.shutdown().await;
}
