//! dockerlogger and sdcadm images as Triton ships them: GNU sharutils shell
//! archives (`tests/fixtures/shar/*.sh`, made by real `shar` with
//! `make.sh` there). agentsadm reads their members without running them,
//! installs them like any image, and refuses a shar that would write outside
//! its package, leaving the server's files as they were.

use std::collections::BTreeMap;
use std::path::Path;

use crate::gz_common::*;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::remote::ComponentAction;
use agentsadm_gz::shar;
use agentsadm_gz::shar::Member;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageFile;
use sha1::{Digest, Sha1};

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/shar")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// An image of component `name` whose file is `bytes`, stored uncompressed
/// as Triton stores shars.
fn shar_image(name: &str, version: &str, bytes: Vec<u8>) -> BuiltImage {
    let mut img = image(name, "1.0.0");
    img.manifest.version = version.to_string();
    img.manifest.files = vec![ImageFile {
        sha1: format!("{:x}", Sha1::digest(&bytes)),
        size: bytes.len() as u64,
        compression: Compression::None,
        stor: None,
    }];
    img.file = bytes;
    img
}

fn dockerlogger_binary() -> Vec<u8> {
    let mut b: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
    b.extend_from_slice(b"Xtail\n");
    b
}

#[test]
fn real_gnu_shars_read_back_byte_for_byte() {
    let members = shar::members(&fixture("dockerlogger.sh")).expect("dockerlogger shar");
    let files: BTreeMap<&str, (u32, &[u8])> = members
        .iter()
        .filter_map(|m| match m {
            Member::File { path, mode, data } => Some((path.as_str(), (*mode, data.as_slice()))),
            Member::Dir { .. } => None,
        })
        .collect();
    assert_eq!(
        files.keys().copied().collect::<Vec<_>>(),
        vec![
            "dockerlogger/dockerlogger",
            "dockerlogger/dockerlogger-setup.sh",
            "dockerlogger/dockerlogger.xml",
            "dockerlogger/install.sh"
        ]
    );
    // The binary went through uuencode; the scripts through sed.
    assert_eq!(
        files["dockerlogger/dockerlogger"],
        (0o755, &dockerlogger_binary()[..])
    );
    assert_eq!(
        files["dockerlogger/dockerlogger-setup.sh"],
        (0o755, &b"#!/bin/bash\nmkdir -p /lib/sdc/docker\n"[..])
    );
    assert!(members.contains(&Member::Dir {
        path: "dockerlogger".into()
    }));

    // sdcadm: two loose members; the md5sum helper's here-document (which
    // looks like a member line) is not one.
    let members = shar::members(&fixture("sdcadm.sh")).expect("sdcadm shar");
    let names: Vec<&str> = members
        .iter()
        .map(|m| match m {
            Member::File { path, .. } | Member::Dir { path } => path.as_str(),
        })
        .collect();
    assert_eq!(names, vec!["contents.tgz", "install-sdcadm.sh"]);
    let Member::File { data: tgz, .. } = &members[0] else {
        panic!("contents.tgz is a file")
    };
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(&tgz[..]));
    let entries: Vec<String> = tar
        .entries()
        .expect("contents.tgz is a gzip'd tar")
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert!(entries.contains(&"bin/sdcadm".to_string()), "{entries:?}");
}

#[tokio::test]
async fn real_dockerlogger_and_sdcadm_shars_install_and_report() {
    let hn = TestServer::new(true);
    // An operator's sdcadm setting, which the install must keep.
    std::fs::create_dir_all(hn.at("var/sdcadm")).unwrap();
    std::fs::write(
        hn.at("var/sdcadm/sdcadm.conf"),
        "{\"updatesServerUrl\": \"https://updates.example.com\"}\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dl = shar_image("dockerlogger", "1.3.0", fixture("dockerlogger.sh"));
    let sa = shar_image("sdcadm", "1.42.0", fixture("sdcadm.sh"));
    let f1 = write_image(&dl, dir.path());
    let f2 = write_image(&sa, dir.path());
    ok(&hn
        .gz_offline(&["install", f1.to_str().unwrap(), f2.to_str().unwrap()])
        .await);

    // dockerlogger: what its install.sh would have put in place.
    assert_eq!(
        std::fs::read(hn.at("opt/smartdc/docker/bin/dockerlogger")).unwrap(),
        dockerlogger_binary()
    );
    assert!(
        hn.at("opt/smartdc/docker/bin/dockerlogger-setup.sh")
            .is_file()
    );
    assert!(hn.at("var/svc/manifest/site/dockerlogger.xml").is_file());
    assert!(hn.at("opt/smartdc/docker/etc/dockerlogger.uuid").is_file());
    // Its install.sh is never run, never installed.
    assert!(!hn.at("opt/smartdc/docker/bin/install.sh").exists());
    // sdcadm: the tree from contents.tgz, not the shar's members.
    assert_eq!(
        std::fs::read_to_string(hn.at("opt/smartdc/sdcadm/etc/buildstamp")).unwrap(),
        "1.42.0-20261122T000000Z\n"
    );
    assert!(hn.at("opt/smartdc/sdcadm/bin/sdcadm").is_file());
    assert!(!hn.at("opt/smartdc/sdcadm/contents.tgz").exists());
    assert!(!hn.at("opt/smartdc/sdcadm/install-sdcadm.sh").exists());
    assert_eq!(
        std::fs::read_link(hn.at("opt/smartdc/bin/sdcadm")).unwrap(),
        Path::new("../sdcadm/bin/sdcadm")
    );
    assert!(hn.at("var/svc/manifest/site/sdcadm-setup.xml").is_file());
    let smf = hn.smf_state();
    assert_eq!(smf["svc:/smartdc/dockerlogger:default"], "online");
    assert_eq!(smf["svc:/smartdc/sdcadm-setup:default"], "online");
    hn.assert_no_leftovers();

    let rep = report(&hn.gz(&["report"], &BTreeMap::new()).await);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    // As install-sdcadm.sh does: the headnode's UUID in sdcadm's config.
    let conf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(hn.at("var/sdcadm/sdcadm.conf")).unwrap()).unwrap();
    assert_eq!(conf["serverUuid"], rep.server_uuid.to_string());
    assert_eq!(conf["updatesServerUrl"], "https://updates.example.com");
    let by_name: BTreeMap<&str, &AgentEntry> =
        rep.agents.iter().map(|a| (a.name.as_str(), a)).collect();
    assert_eq!(by_name["dockerlogger"].image_uuid, Some(dl.manifest.uuid));
    assert_eq!(by_name["dockerlogger"].version, "1.3.0");
    assert_eq!(by_name["sdcadm"].image_uuid, Some(sa.manifest.uuid));

    // Upgrade and remove, as for any component.
    let dl2 = shar_image("dockerlogger", "1.4.0", fixture("dockerlogger.sh"));
    let f3 = write_image(&dl2, dir.path());
    ok(&hn.gz_offline(&["install", f3.to_str().unwrap()]).await);
    ok(&hn.gz_offline(&["remove", "dockerlogger"]).await);
    assert!(!hn.at("opt/smartdc/docker/bin/dockerlogger").exists());
    hn.assert_no_leftovers();
}

/// A shar of `members`, written by agentsadm's shar writer in sharutils'
/// layout.
fn crafted(members: &[(&str, u32, &[u8])]) -> Vec<u8> {
    format!(
        "#!/bin/sh\ncd /var/tmp\n{}exit 0\n",
        agentsadm_sim::imagebuild::shar::write(members)
    )
    .into_bytes()
}

#[tokio::test]
async fn bad_shars_are_refused_and_change_nothing() {
    let xml: &[u8] = b"<?xml version=\"1.0\"?>\n<service_bundle type=\"manifest\" name=\"dockerlogger\">\n<service name=\"smartdc/dockerlogger\" type=\"service\" version=\"1\"><create_default_instance enabled=\"true\"/></service>\n</service_bundle>\n";
    let good: [(&str, u32, &[u8]); 3] = [
        ("dockerlogger/dockerlogger", 0o755, b"\x7fELF\x00"),
        (
            "dockerlogger/dockerlogger-setup.sh",
            0o755,
            b"#!/bin/bash\n",
        ),
        ("dockerlogger/dockerlogger.xml", 0o644, xml),
    ];
    let with = |path: &'static str| {
        let mut m = good.to_vec();
        m.push((path, 0o644, b"x\n"));
        crafted(&m)
    };
    let good_text = String::from_utf8(crafted(&good)).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("dot-dot member", with("dockerlogger/../../etc/evil"), ".."),
        ("absolute member", with("/etc/evil"), "absolute"),
        (
            "second top-level directory",
            with("other/evil"),
            "top-level",
        ),
        (
            "size line disagrees",
            good_text.replace("-ne 5 ", "-ne 6 ").into_bytes(),
            "decodes to 5 bytes",
        ),
        (
            "base64 member",
            good_text
                .replacen("begin 600 ", "begin-base64 600 ", 1)
                .into_bytes(),
            "base64",
        ),
        (
            "unterminated here-document",
            good_text
                .rsplit_once("SHAR_EOF\n")
                .map(|(a, b)| format!("{a}{b}"))
                .unwrap()
                .into_bytes(),
            "never ends",
        ),
        (
            "no members",
            b"#!/bin/sh\necho hello\n".to_vec(),
            "no files",
        ),
    ];
    // The sanity case installs.
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let g = write_image(
        &shar_image("dockerlogger", "1.0.0", crafted(&good)),
        dir.path(),
    );
    ok(&srv.gz_offline(&["install", g.to_str().unwrap()]).await);
    for (what, bytes, cause) in cases {
        let before = snapshot(srv.root());
        let img = shar_image("dockerlogger", "2.0.0", bytes);
        let f = write_image(&img, dir.path());
        let msg = failed(&srv.gz_offline(&["install", f.to_str().unwrap()]).await);
        assert!(msg.contains(cause), "{what}: {msg}");
        assert_same(&before, &snapshot(srv.root()), what);
        srv.assert_no_leftovers();
    }
}

/// The shars agentsadm's image builder writes unpack with `sh` and
/// `uudecode` as sharutils' do (needs sharutils: a failure under CI=true).
#[test]
fn builder_shars_unpack_with_sh() {
    if !crate::tools_common::require_tool("uudecode", "sharutils") {
        return;
    }
    let bin: Vec<u8> = (0..=255u8).collect();
    let members: [(&str, u32, &[u8]); 3] = [
        ("pkg/run.sh", 0o755, b"#!/bin/sh\nXecho\nSHAR_EOF\n"),
        ("pkg/bin/tool", 0o755, &bin),
        ("pkg/it's", 0o644, b"no newline"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("a.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{}exit 0\n",
            agentsadm_sim::imagebuild::shar::write(&members)
        ),
    )
    .unwrap();
    let out = std::process::Command::new("sh")
        .arg(&script)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for (path, mode, data) in members {
        let p = dir.path().join(path);
        assert_eq!(std::fs::read(&p).unwrap(), data, "{path}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            mode,
            "{path}"
        );
    }
}

/// An sdcadm that Triton's own installer put in place (no agentsadm record,
/// an absolute link, as older install-sdcadm.sh wrote it) is upgraded from
/// the shar like any other version, and rolled back to it.
#[tokio::test]
async fn upgrades_an_sdcadm_installed_by_its_own_shar() {
    let hn = TestServer::new(true);
    let old = hn.at("opt/smartdc/sdcadm");
    std::fs::create_dir_all(old.join("bin")).unwrap();
    std::fs::create_dir_all(old.join("etc")).unwrap();
    std::fs::write(old.join("bin/sdcadm"), "#!/bin/bash\necho old\n").unwrap();
    std::fs::write(old.join("etc/buildstamp"), "1.30.0-20240101T000000Z\n").unwrap();
    std::fs::write(
        old.join("package.json"),
        "{\"name\": \"sdcadm\", \"version\": \"1.30.0\"}\n",
    )
    .unwrap();
    std::fs::create_dir_all(hn.at("opt/smartdc/bin")).unwrap();
    std::os::unix::fs::symlink(
        "/opt/smartdc/sdcadm/bin/sdcadm",
        hn.at("opt/smartdc/bin/sdcadm"),
    )
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let sa = shar_image("sdcadm", "1.42.0", fixture("sdcadm.sh"));
    let f = write_image(&sa, dir.path());
    let r = ok(&hn.gz_offline(&["install", f.to_str().unwrap()]).await);
    assert_eq!(r.components[0].action, ComponentAction::Upgraded);
    assert_eq!(
        std::fs::read_to_string(old.join("etc/buildstamp")).unwrap(),
        "1.42.0-20261122T000000Z\n"
    );
    assert_eq!(
        std::fs::read_link(hn.at("opt/smartdc/bin/sdcadm")).unwrap(),
        Path::new("../sdcadm/bin/sdcadm")
    );
    hn.assert_no_leftovers();

    // Back to the version Triton installed.
    ok(&hn.gz_offline(&["rollback", "sdcadm"]).await);
    assert_eq!(
        std::fs::read_to_string(old.join("bin/sdcadm")).unwrap(),
        "#!/bin/bash\necho old\n"
    );
    assert!(hn.at("opt/smartdc/bin/sdcadm").exists());
    hn.assert_no_leftovers();
}

/// A dockerlogger its own shar installed (files and a SAPI instance UUID,
/// no version record) is upgraded in place, keeping that instance UUID.
#[tokio::test]
async fn upgrades_a_dockerlogger_installed_by_its_own_shar() {
    let cn = TestServer::new(false);
    let bin = cn.at("opt/smartdc/docker/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("dockerlogger"), b"old binary").unwrap();
    std::fs::write(bin.join("dockerlogger-setup.sh"), "#!/bin/bash\n").unwrap();
    std::fs::create_dir_all(cn.at("opt/smartdc/docker/etc")).unwrap();
    let instance = "6f1c3b9e-2a47-4c1e-9d0b-5b1f6a3c2d10";
    std::fs::write(
        cn.at("opt/smartdc/docker/etc/dockerlogger.uuid"),
        format!("{instance}\n"),
    )
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let dl = shar_image("dockerlogger", "1.3.0", fixture("dockerlogger.sh"));
    let f = write_image(&dl, dir.path());
    let r = ok(&cn.gz_offline(&["install", f.to_str().unwrap()]).await);
    assert_eq!(r.components[0].action, ComponentAction::Upgraded);
    assert_eq!(
        r.components[0]
            .instance_uuid
            .map(|u| u.to_string())
            .as_deref(),
        Some(instance)
    );
    assert_eq!(
        std::fs::read(bin.join("dockerlogger")).unwrap(),
        dockerlogger_binary()
    );
    cn.assert_no_leftovers();
}
