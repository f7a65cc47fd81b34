//! agentsadm as a component of its own: installed from its image under
//! `/opt/smartdc/agentsadm` (nothing under `/opt/smartdc/agents` but its
//! instance UUID), reported with its image and version, upgraded without
//! ever writing its running binary in place nor leaving the path empty
//! (killed at every checkpoint, the binary is there and runs), the previous
//! copy kept for `gz rollback`; a copy CN setup fetched alone is taken over;
//! bad packages are refused with nothing changed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use crate::gz_common::*;
use agentsadm_api::remote::ComponentAction;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_types::ids::ImageUuid;

const BIN: &str = "opt/smartdc/agentsadm/bin/agentsadm";

/// What the installed binary says when run (`agentsadm <version>`), or why
/// it does not run.
fn run_installed(srv: &TestServer) -> String {
    match Command::new(srv.at(BIN)).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Err(e) => format!("cannot run {BIN}: {e}"),
    }
}

fn says(img: &BuiltImage) -> String {
    format!("agentsadm {}", img.manifest.version)
}

#[tokio::test]
async fn installs_under_its_own_directory_and_reports_itself() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = image("agentsadm", "1.2.0");
    let f1 = write_image(&v1, dir.path());
    let srv = TestServer::new(false);
    let r = ok(&srv.gz_offline(&["install", f1.to_str().unwrap()]).await);
    assert_eq!(r.components[0].action, ComponentAction::Installed);
    for f in [
        "bin/agentsadm",
        "package.json",
        "image_uuid",
        "etc/buildstamp",
    ] {
        assert!(
            srv.at(&format!("opt/smartdc/agentsadm/{f}")).is_file(),
            "{f}"
        );
    }
    let mode = std::fs::metadata(srv.at(BIN)).unwrap().mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(run_installed(&srv), says(&v1));
    assert_eq!(
        std::fs::read_link(srv.at("opt/smartdc/bin/agentsadm"))
            .unwrap()
            .to_str(),
        Some("../agentsadm/bin/agentsadm")
    );
    // Nothing of it to run among the apm agents: its instance UUID sits
    // beside theirs, and its registration (what cn-agent and sysinfo read
    // into server.agents) is a package.json and an image_uuid.
    let registration = srv.at("opt/smartdc/agents/lib/node_modules/agentsadm");
    let mut files: Vec<String> = std::fs::read_dir(&registration)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["image_uuid", "package.json"]);
    assert_eq!(
        std::fs::read_to_string(registration.join("image_uuid")).unwrap(),
        format!("{}\n", v1.manifest.uuid)
    );
    assert!(srv.instance("agentsadm").is_some());
    let rep = report(&srv.gz_offline(&["report"]).await);
    let me = rep.agents.iter().find(|a| a.name == "agentsadm").unwrap();
    assert_eq!(me.image_uuid, Some(v1.manifest.uuid));
    assert_eq!(me.version, v1.manifest.version);
    assert_eq!(
        me.uuid.map(|u| u.to_string()),
        srv.instance("agentsadm"),
        "the instance UUID in server.agents"
    );
}

#[tokio::test]
async fn an_upgrade_renames_over_the_running_binary_and_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = image("agentsadm", "1.2.0");
    let v2 = image("agentsadm", "1.4.0");
    let f1 = write_image(&v1, dir.path());
    let f2 = write_image(&v2, dir.path());
    let srv = TestServer::new(false);
    ok(&srv.gz_offline(&["install", f1.to_str().unwrap()]).await);
    let instance = srv.instance("agentsadm");
    // A second name for the old binary: its inode, as a running process
    // holds it. Written in place, it would change under that process.
    let held = dir.path().join("held");
    std::fs::hard_link(srv.at(BIN), &held).unwrap();
    let before = std::fs::read(&held).unwrap();
    let r = ok(&srv.gz_offline(&["install", f2.to_str().unwrap()]).await);
    assert_eq!(r.components[0].action, ComponentAction::Upgraded);
    assert_eq!(run_installed(&srv), says(&v2));
    assert_eq!(std::fs::read(&held).unwrap(), before, "written in place");
    assert_ne!(
        std::fs::metadata(&held).unwrap().ino(),
        std::fs::metadata(srv.at(BIN)).unwrap().ino(),
        "the new binary is a new file"
    );
    assert_eq!(srv.instance("agentsadm"), instance, "instance UUID kept");
    // The previous copy is kept: gz rollback puts it back, by rename too.
    let r = ok(&srv.gz_offline(&["rollback", "agentsadm"]).await);
    assert_eq!(r.components[0].image_uuid, Some(v1.manifest.uuid));
    assert_eq!(run_installed(&srv), says(&v1));
    assert_eq!(srv.instance("agentsadm"), instance);
    srv.assert_no_leftovers();
}

#[tokio::test]
async fn the_copy_cn_setup_fetched_alone_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = image("agentsadm", "1.2.0");
    let f1 = write_image(&v1, dir.path());
    let srv = TestServer::new(false);
    // What installer/agentsetup.sh leaves: the binary alone.
    std::fs::create_dir_all(srv.at("opt/smartdc/agentsadm/bin")).unwrap();
    std::fs::write(srv.at(BIN), "#!/bin/sh\necho agentsadm bootstrap\n").unwrap();
    std::fs::set_permissions(
        srv.at(BIN),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let rep = report(&srv.gz_offline(&["report"]).await);
    let me = rep.agents.iter().find(|a| a.name == "agentsadm").unwrap();
    assert_eq!(me.image_uuid, None, "no image known for a bare copy");
    assert_eq!(me.version, "");
    let r = ok(&srv.gz_offline(&["install", f1.to_str().unwrap()]).await);
    assert_eq!(r.components[0].action, ComponentAction::Upgraded);
    assert_eq!(run_installed(&srv), says(&v1));
    let rep = report(&srv.gz_offline(&["report"]).await);
    let me = rep.agents.iter().find(|a| a.name == "agentsadm").unwrap();
    assert_eq!(me.version, v1.manifest.version);
    // And back: the bare copy is what was there before.
    ok(&srv.gz_offline(&["rollback", "agentsadm"]).await);
    assert_eq!(run_installed(&srv), "agentsadm bootstrap");
}

/// agentsadm's package with `edit` applied to its file list.
fn package_with(
    uuid: ImageUuid,
    edit: impl FnOnce(&mut Vec<(String, u32, Vec<u8>)>),
) -> BuiltImage {
    let mut files = agentsadm_gz::release::tree_files(
        b"#!/bin/sh\necho agentsadm evil\n".to_vec(),
        "1.5.0-master-20260101T000000Z-g1234567",
        uuid,
    );
    edit(&mut files);
    let mut b = tar::Builder::new(Vec::new());
    for (path, mode, data) in &files {
        let mut h = tar::Header::new_gnu();
        if let Some(link) = path.strip_suffix("@link") {
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_mode(0o777);
            h.set_size(0);
            b.append_link(&mut h, link, std::str::from_utf8(data).unwrap())
                .unwrap();
            continue;
        }
        h.set_mode(*mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, &data[..]).unwrap();
    }
    raw_image("agentsadm", uuid, &b.into_inner().unwrap())
}

#[tokio::test]
async fn bad_agentsadm_packages_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = image("agentsadm", "1.2.0");
    let f1 = write_image(&v1, dir.path());
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("sentinel"), "untouched").unwrap();
    let cases: Vec<(&str, BuiltImage)> = vec![
        (
            "bin/agentsadm (a regular file)",
            package_with(ImageUuid::new_v4(), |f| {
                // A link inside the package (the unpacker refuses one
                // leading out): still not a binary to run as root.
                f.retain(|(p, _, _)| !p.ends_with("bin/agentsadm"));
                f.push((
                    "agentsadm/bin/agentsadm@link".into(),
                    0,
                    b"../package.json".to_vec(),
                ));
            }),
        ),
        (
            "bin/agentsadm",
            package_with(ImageUuid::new_v4(), |f| {
                f.retain(|(p, _, _)| !p.ends_with("bin/agentsadm"));
            }),
        ),
        (
            "package.json name",
            package_with(ImageUuid::new_v4(), |f| {
                for (p, _, data) in f.iter_mut() {
                    if p.ends_with("package.json") {
                        *data = br#"{"name": "vm-agent", "version": "1.5.0"}"#.to_vec();
                    }
                }
            }),
        ),
        (
            "image_uuid",
            package_with(ImageUuid::new_v4(), |f| {
                for (p, _, data) in f.iter_mut() {
                    if p.ends_with("image_uuid") {
                        *data = format!("{}\n", ImageUuid::new_v4()).into_bytes();
                    }
                }
            }),
        ),
    ];
    for (why, img) in cases {
        let srv = TestServer::new(false);
        ok(&srv.gz_offline(&["install", f1.to_str().unwrap()]).await);
        let before = snapshot(srv.root());
        let f = write_image(&img, dir.path());
        let err = failed(&srv.gz_offline(&["install", f.to_str().unwrap()]).await);
        assert!(err.contains(why), "{why}: {err}");
        assert_same(&before, &snapshot(srv.root()), why);
        assert_eq!(run_installed(&srv), says(&v1), "{why}");
        assert_eq!(
            std::fs::read_to_string(outside.path().join("sentinel")).unwrap(),
            "untouched"
        );
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_anywhere_the_binary_is_there_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = image("agentsadm", "1.2.0");
    let v2 = image("agentsadm", "1.4.0");
    let f1 = write_image(&v1, dir.path());
    let f2 = write_image(&v2, dir.path());
    let points = [
        ("staged", false),
        ("after-journal", false),
        ("after-old-hooks", false),
        ("after-move-old", false),
        ("after-place-new", false),
        ("after-smf", false),
        ("after-adopt", false),
        ("committing", true),
        ("after-previous", true),
    ];
    for (point, finishes) in points {
        let srv = TestServer::new(false);
        ok(&srv.gz_offline(&["install", f1.to_str().unwrap()]).await);
        let at_v1 = snapshot(srv.root());
        crash(srv.root(), &["install", f2.to_str().unwrap()], point);
        // Before any recovery: the next command on this server can start.
        let now = run_installed(&srv);
        assert!(now == says(&v1) || now == says(&v2), "{point}: {now}");
        let mut s = GzSettings::new(srv.root(), PlatformKind::Rooted);
        s.no_sapi = true;
        s.no_cnapi = true;
        GzSession::open(s, true).await.unwrap().remove(&[]).await;
        srv.assert_no_leftovers();
        if finishes {
            assert_eq!(run_installed(&srv), says(&v2), "{point}");
        } else {
            assert_eq!(run_installed(&srv), says(&v1), "{point}");
            assert_same(&at_v1, &snapshot(srv.root()), point);
        }
        let r = ok(&srv.gz_offline(&["install", f2.to_str().unwrap()]).await);
        let want = if finishes {
            ComponentAction::Unchanged
        } else {
            ComponentAction::Upgraded
        };
        assert_eq!(r.components[0].action, want, "{point}");
        assert_eq!(run_installed(&srv), says(&v2), "{point}");
    }
}
