//! The USB key's image directory (`installer build`'s library): the
//! layout and its defaults, and bad input changing nothing.

use std::path::{Path, PathBuf};

use agentsadm_flows::usbkey::UsbkeyError;
use agentsadm_flows::usbkey::build;
use agentsadm_flows::usbkey::read_index;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_sim::imagebuild::ImageSpec;
use agentsadm_sim::imagebuild::build as build_image;
use agentsadm_sim::imagebuild::write_to_dir;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ImageUuid;

fn image(dir: &Path, component: &str, version: &str, stamp: &str) -> (PathBuf, ImageUuid) {
    let cat = Catalog::builtin();
    let mut spec = ImageSpec::for_component(cat.get(component).unwrap(), version);
    spec.published_at = Some(stamp.to_string());
    let img = build_image(&spec);
    let (_, f) = write_to_dir(&img, dir).unwrap();
    (f, img.manifest.uuid)
}

fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn builds_the_layout_and_picks_defaults() {
    let src = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let cat = Catalog::builtin();
    let (v1, u1) = image(src.path(), "vm-agent", "1.0.0", "2026-01-01T00:00:00Z");
    let (v2, u2) = image(src.path(), "vm-agent", "1.1.0", "2026-02-01T00:00:00Z");
    let (c1, uc) = image(src.path(), "cn-agent", "2.0.0", "2026-01-01T00:00:00Z");
    let shar = src.path().join("agents-master-20260101T000000Z-gabc.sh");
    std::fs::write(&shar, "#!/bin/sh\n").unwrap();
    let r = build(
        &cat,
        out.path(),
        &[v1.clone(), v2.clone(), c1],
        &[],
        Some(&shar),
    )
    .unwrap();
    assert_eq!(r.added.len(), 3);
    assert_eq!(r.index.images["vm-agent"], u2, "newest by published_at");
    assert_eq!(r.index.images["cn-agent"], uc);
    assert!(out.path().join(format!("vm-agent/{u1}.manifest")).exists());
    assert!(out.path().join(format!("vm-agent/{u1}.file")).exists());
    let link = std::fs::read_link(out.path().join("latest")).unwrap();
    assert_eq!(
        link,
        PathBuf::from("agents-master-20260101T000000Z-gabc.sh")
    );
    assert_eq!(read_index(out.path()).unwrap(), r.index);
    // gz setup reads the same index.
    let set: Vec<agentsadm_types::catalog::Component> = vec![cat.get("vm-agent").unwrap().clone()];
    let (found, missing) = agentsadm_gz::setup::setup_dir_sources(out.path(), &set).unwrap();
    assert!(missing.is_empty());
    assert!(matches!(&found[0], ImageSource::File { manifest, .. }
        if manifest.ends_with(format!("{u2}.manifest"))));

    // Re-run with an explicit default: the older one.
    let r = build(&cat, out.path(), &[], &[u1], None).unwrap();
    assert!(r.added.is_empty());
    assert_eq!(r.index.images["vm-agent"], u1);
    assert_eq!(r.index.images["cn-agent"], uc);
    // `latest` is left alone without --shar.
    assert!(out.path().join("latest").exists());
}

#[test]
fn bad_input_changes_nothing() {
    let src = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let cat = Catalog::builtin();
    let (good, _) = image(src.path(), "vm-agent", "1.0.0", "2026-01-01T00:00:00Z");
    build(&cat, out.path(), std::slice::from_ref(&good), &[], None).unwrap();
    let before = snapshot(out.path());

    // A damaged file.
    let (bad, _) = image(src.path(), "net-agent", "1.0.0", "2026-01-01T00:00:00Z");
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&bad, &bytes).unwrap();
    let e = build(&cat, out.path(), &[good.clone(), bad], &[], None).unwrap_err();
    assert!(e.to_string().contains("sha1"), "{e}");
    // No manifest next to it.
    let lone = src.path().join("lone.tgz");
    std::fs::write(&lone, b"x").unwrap();
    let e = build(&cat, out.path(), &[lone], &[], None).unwrap_err();
    assert!(e.to_string().contains("manifest next to it"), "{e}");
    // Not a catalog component.
    let (other, _) = image(src.path(), "vm-agent", "2.0.0", "2026-01-01T00:00:00Z");
    let m = other.with_extension("manifest");
    let text = std::fs::read_to_string(&m)
        .unwrap()
        .replace("\"vm-agent\"", "\"frobnicator\"");
    std::fs::write(&m, text).unwrap();
    let e = build(&cat, out.path(), &[other], &[], None).unwrap_err();
    assert!(e.to_string().contains("not a component"), "{e}");
    // An unknown default.
    let e = build(&cat, out.path(), &[], &[ImageUuid::new_v4()], None).unwrap_err();
    assert!(matches!(e, UsbkeyError::UnknownDefault { .. }));

    assert_eq!(snapshot(out.path()), before);
}
