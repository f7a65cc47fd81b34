//! The fetcher against local image files built by the image builder:
//! verified and unpacked, and a corrupted copy refused by its sha1.

use std::fs;

use agentsadm_gz::fetch::FetchError;
use agentsadm_gz::fetch::FetchOptions;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::fetch::check_manifest;
use agentsadm_gz::fetch::fetch_and_unpack;
use agentsadm_gz::fetch::resolve;
use agentsadm_sim::imagebuild::ImageSpec;
use agentsadm_sim::imagebuild::build;
use agentsadm_sim::imagebuild::write_to_dir;
use agentsadm_types::catalog::Catalog;

#[tokio::test]
async fn local_file_verifies_and_unpacks() {
    let cat = Catalog::builtin();
    let img = build(&ImageSpec::for_component(
        cat.get("vm-agent").unwrap(),
        "1.0.0",
    ));
    let d = tempfile::tempdir().unwrap();
    let (m, f) = write_to_dir(&img, d.path()).unwrap();
    let src = ImageSource::File {
        file: f.clone(),
        manifest: m,
    };
    let resolved = resolve(&src, None).await.unwrap();
    check_manifest(&resolved.manifest, &cat).unwrap();
    let staging = d.path().join("stage");
    let got = fetch_and_unpack(&resolved, None, &staging, &FetchOptions::default())
        .await
        .unwrap();
    assert_eq!(got.unpacked.top, "vm-agent");
    assert_eq!(got.digests.sha1, img.manifest.files[0].sha1);
    // A corrupted copy fails the sha1 check.
    let mut bytes = img.file.clone();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&f, &bytes).unwrap();
    let err = fetch_and_unpack(&resolved, None, &staging, &FetchOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::Sha1Mismatch { .. }), "{err}");
}

/// Each Makefile's release names: `NAME-STAMP.tgz` and
/// `config-agent-pkg-STAMP.tar.gz` beside `<stem>.manifest`; a missing
/// manifest names every path tried.
#[test]
fn image_files_find_their_manifest_by_release_names() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        (
            "vm-agent-release-20261101T000000Z-g1234567.tgz",
            "vm-agent-release-20261101T000000Z-g1234567.manifest",
        ),
        (
            "config-agent-pkg-release-20261101T000000Z-g1234567.tar.gz",
            "config-agent-pkg-release-20261101T000000Z-g1234567.manifest",
        ),
        (
            "agents-release-20261101T000000Z-g1234567.sh",
            "agents-release-20261101T000000Z-g1234567.manifest",
        ),
        (
            "0b4e8f3a-5c1d-4e2f-9a7b-3c6d8e0f1a2b.file",
            "0b4e8f3a-5c1d-4e2f-9a7b-3c6d8e0f1a2b.imgmanifest",
        ),
    ];
    for (file, manifest) in cases {
        let (f, m) = (d.path().join(file), d.path().join(manifest));
        fs::write(&f, b"x").unwrap();
        fs::write(&m, b"{}").unwrap();
        for arg in [&f, &m] {
            match ImageSource::from_arg(arg.to_str().unwrap()).unwrap() {
                ImageSource::File { file, manifest } => {
                    assert_eq!((&file, &manifest), (&f, &m), "{}", arg.display())
                }
                other => panic!("{other:?}"),
            }
        }
    }
    let lone = d.path().join("config-agent-pkg-lone.tar.gz");
    fs::write(&lone, b"x").unwrap();
    let err = ImageSource::from_arg(lone.to_str().unwrap()).unwrap_err();
    assert!(
        matches!(err, FetchError::NoManifestForFile { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("config-agent-pkg-lone.manifest"), "{msg}");
    assert!(
        msg.contains("config-agent-pkg-lone.tar.gz.manifest"),
        "{msg}"
    );
    let lone = d.path().join("net-agent-lone.manifest");
    fs::write(&lone, b"{}").unwrap();
    let msg = ImageSource::from_arg(lone.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("net-agent-lone.tgz") && msg.contains("net-agent-lone.tar.gz"),
        "{msg}"
    );
}
