//! The unpacker's rules, one example each: modes (setuid stripped),
//! symbolic and hard links inside the package kept; `..`, absolute paths,
//! escaping links, writing through a link, devices and a second top-level
//! directory refused with nothing written outside staging; the write limit
//! as a full disk; and the member reader keeping only what it is asked for.
//! (`unpack_props` checks the same boundary on random archives.)

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agentsadm::gz::unpack::{UnpackError, UnpackOptions, Unpacked, read_members, unpack};
use agentsadm::image::Compression;
use agentsadm::imagebuild::TreeBuilder;

fn raw_tar(f: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    f(&mut b);
    b.into_inner().unwrap()
}

fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h
}

/// Write a path into a header byte-for-byte (the tar crate's setters
/// refuse `..` and absolute paths, which is exactly what we test).
fn raw_path(h: &mut tar::Header, path: &str) {
    let name = &mut h.as_old_mut().name;
    name.fill(0);
    name[..path.len()].copy_from_slice(path.as_bytes());
    h.set_cksum();
}

fn unpack_bytes(
    data: &[u8],
    opts: &UnpackOptions,
) -> (tempfile::TempDir, Result<Unpacked, UnpackError>) {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("stage");
    fs::create_dir(&dest).unwrap();
    let r = unpack(data, Compression::None, &dest, opts);
    (dir, r)
}

fn only_stage_written(dir: &tempfile::TempDir) {
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("stage")]);
}

#[test]
fn unpacks_package_with_symlink_hardlink_and_modes() {
    let mut t = TreeBuilder::new();
    t.dir("pkg")
        .file("pkg/a.sh", 0o4755, b"#!/bin/sh\n")
        .dir("pkg/lib")
        .file("pkg/lib/x", 0o644, b"hello")
        .symlink("pkg/node", "lib")
        .symlink("pkg/lib/up", "../a.sh");
    let mut data = t.finish();
    // Append a hard link to pkg/lib/x.
    data.truncate(data.len() - 1024);
    let mut b = tar::Builder::new(data);
    let mut h = header(tar::EntryType::Link, 0, 0o644);
    b.append_link(&mut h, "pkg/lib/y", "pkg/lib/x").unwrap();
    let data = b.into_inner().unwrap();
    let (dir, r) = unpack_bytes(&data, &UnpackOptions::default());
    let u = r.unwrap();
    assert_eq!(u.top, "pkg");
    let stage = dir.path().join("stage/pkg");
    let md = fs::metadata(stage.join("a.sh")).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o755, "setuid stripped");
    assert_eq!(fs::read_link(stage.join("node")).unwrap(), Path::new("lib"));
    assert_eq!(fs::read(stage.join("lib/y")).unwrap(), b"hello");
    only_stage_written(&dir);
}

#[test]
fn refuses_dotdot_absolute_and_escaping_links() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "dotdot",
            raw_tar(|b| {
                let mut h = header(tar::EntryType::Directory, 0, 0o755);
                b.append_data(&mut h, "pkg/", io::empty()).unwrap();
                let mut h = header(tar::EntryType::Regular, 1, 0o644);
                raw_path(&mut h, "pkg/../evil");
                b.append(&h, &b"x"[..]).unwrap();
            }),
        ),
        (
            "absolute",
            raw_tar(|b| {
                let mut h = header(tar::EntryType::Regular, 1, 0o644);
                raw_path(&mut h, "/tmp/evil");
                b.append(&h, &b"x"[..]).unwrap();
            }),
        ),
        (
            "symlink-escape",
            raw_tar(|b| {
                let mut h = header(tar::EntryType::Directory, 0, 0o755);
                b.append_data(&mut h, "pkg/", io::empty()).unwrap();
                let mut h = header(tar::EntryType::Symlink, 0, 0o777);
                b.append_link(&mut h, "pkg/out", "../../etc").unwrap();
            }),
        ),
        (
            "symlink-absolute",
            raw_tar(|b| {
                let mut h = header(tar::EntryType::Directory, 0, 0o755);
                b.append_data(&mut h, "pkg/", io::empty()).unwrap();
                let mut h = header(tar::EntryType::Symlink, 0, 0o777);
                b.append_link(&mut h, "pkg/out", "/etc/passwd").unwrap();
            }),
        ),
        (
            "hardlink-escape",
            raw_tar(|b| {
                let mut h = header(tar::EntryType::Directory, 0, 0o755);
                b.append_data(&mut h, "pkg/", io::empty()).unwrap();
                let mut h = header(tar::EntryType::Link, 0, 0o644);
                b.append_link(&mut h, "pkg/pw", "etc/passwd").unwrap();
            }),
        ),
        (
            "through-symlink",
            raw_tar(|b| {
                let mut h = header(tar::EntryType::Directory, 0, 0o755);
                b.append_data(&mut h, "pkg/", io::empty()).unwrap();
                let mut h = header(tar::EntryType::Symlink, 0, 0o777);
                b.append_link(&mut h, "pkg/c", ".").unwrap();
                let mut h = header(tar::EntryType::Symlink, 0, 0o777);
                b.append_link(&mut h, "pkg/c/d", "../x").unwrap();
            }),
        ),
        (
            "device",
            raw_tar(|b| {
                let mut h = header(tar::EntryType::Directory, 0, 0o755);
                b.append_data(&mut h, "pkg/", io::empty()).unwrap();
                let mut h = header(tar::EntryType::Char, 0, 0o644);
                b.append_data(&mut h, "pkg/null", io::empty()).unwrap();
            }),
        ),
        (
            "two-tops",
            raw_tar(|b| {
                let mut h = header(tar::EntryType::Directory, 0, 0o755);
                b.append_data(&mut h, "pkg/", io::empty()).unwrap();
                let mut h = header(tar::EntryType::Directory, 0, 0o755);
                b.append_data(&mut h, "other/", io::empty()).unwrap();
            }),
        ),
    ];
    for (name, data) in cases {
        let (dir, r) = unpack_bytes(&data, &UnpackOptions::default());
        let err = r.expect_err(name);
        assert!(err.is_bad_archive(), "{name}: {err}");
        only_stage_written(&dir);
    }
}

#[test]
fn write_limit_reports_disk_full() {
    let mut t = TreeBuilder::new();
    t.dir("pkg").file("pkg/big", 0o644, &vec![7u8; 100_000]);
    let data = t.finish();
    let opts = UnpackOptions {
        write_limit: Some(10_000),
        ..Default::default()
    };
    let (_dir, r) = unpack_bytes(&data, &opts);
    assert!(matches!(r, Err(UnpackError::DiskFull { .. })));
}

#[test]
fn read_members_keeps_only_wanted() {
    let mut t = TreeBuilder::new();
    t.dir("pkg")
        .file("pkg/image_uuid", 0o644, b"u\n")
        .file("pkg/package.json", 0o644, b"{}")
        .file("pkg/other", 0o644, b"zzz");
    let data = t.finish();
    let (top, m) = read_members(
        &data[..],
        Compression::None,
        Some("pkg"),
        &["image_uuid", "package.json"],
        1 << 20,
    )
    .unwrap();
    assert_eq!(top, "pkg");
    assert_eq!(m.len(), 2);
    assert_eq!(m["image_uuid"], b"u\n");
}
