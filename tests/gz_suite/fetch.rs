//! The fetcher against local image files built by the image builder:
//! verified and unpacked, and a corrupted copy refused by its sha1.

use std::fs;

use agentsadm::catalog::Catalog;
use agentsadm::gz::fetch::{
    FetchError, FetchOptions, ImageSource, check_manifest, fetch_and_unpack, resolve,
};
use agentsadm::imagebuild::{ImageSpec, build, write_to_dir};

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
