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

use agentsadm_gz::unpack::UnpackError;

use agentsadm_gz::unpack::UnpackOptions;

use agentsadm_gz::unpack::Unpacked;

use agentsadm_gz::unpack::read_members;

use agentsadm_gz::unpack::unpack;
use agentsadm_sim::imagebuild::TreeBuilder;
use agentsadm_types::image::Compression;

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

/// A symbolic link.
fn symlink(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
    let mut h = header(tar::EntryType::Symlink, 0, 0o777);
    b.append_link(&mut h, path, target).unwrap();
}

#[test]
fn link_chains_are_judged_against_the_final_tree() {
    // `x` is fine lexically (l/l/l/../../.. is `pkg`) and when it arrives
    // (`l` does not exist yet); `l -> .` makes it `pkg/..`, outside.
    let data = raw_tar(|b| {
        let mut h = header(tar::EntryType::Directory, 0, 0o755);
        b.append_data(&mut h, "pkg/", io::empty()).unwrap();
        symlink(b, "pkg/x", "l/l/l/../../..");
        symlink(b, "pkg/l", ".");
    });
    let (dir, r) = unpack_bytes(&data, &UnpackOptions::default());
    match r {
        Err(UnpackError::LinkEscapes { path, .. }) => assert_eq!(path, "pkg/x"),
        other => panic!("{other:?}"),
    }
    only_stage_written(&dir);
    // Through the same link, down then up, stays inside and is kept.
    let data = raw_tar(|b| {
        let mut h = header(tar::EntryType::Directory, 0, 0o755);
        b.append_data(&mut h, "pkg/", io::empty()).unwrap();
        b.append_data(&mut h, "pkg/d/", io::empty()).unwrap();
        symlink(b, "pkg/x", "l/l/d/../l/d");
        symlink(b, "pkg/l", ".");
    });
    let (_dir, r) = unpack_bytes(&data, &UnpackOptions::default());
    r.unwrap();
}

#[test]
fn expansion_limits_stop_the_stream() {
    use agentsadm_gz::unpack::UnpackLimits;
    use agentsadm_gz::unpack::unpack_limited;
    let mut t = TreeBuilder::new();
    t.dir("pkg").file("pkg/zeros", 0o644, &vec![0u8; 4 << 20]);
    let tar = t.finish();
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    io::Write::write_all(&mut enc, &tar).unwrap();
    let gz = enc.finish().unwrap();
    let run = |limits: &UnpackLimits| {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("stage");
        fs::create_dir(&dest).unwrap();
        unpack_limited(
            &gz[..],
            Compression::Gzip,
            &dest,
            &UnpackOptions::default(),
            limits,
        )
    };
    // 4 MiB of zeros gzip to a few KB: over 100 times.
    let e = run(&UnpackLimits {
        compressed_size: Some(gz.len() as u64),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(e, UnpackError::ExceedsExpansionRatio { ratio: 100, .. }),
        "{e}"
    );
    // Without a known size, the compressed bytes read so far are the base.
    let e = run(&UnpackLimits::default()).unwrap_err();
    assert!(
        matches!(e, UnpackError::ExceedsExpansionRatio { .. }),
        "{e}"
    );
    let e = run(&UnpackLimits {
        max_expansion_ratio: 1_000_000,
        max_unpacked_bytes: 1 << 20,
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(e, UnpackError::ExceedsUnpackedCap { limit: 1048576 }),
        "{e}"
    );
    run(&UnpackLimits {
        max_expansion_ratio: 1_000_000,
        ..Default::default()
    })
    .unwrap();
}

#[test]
fn names_and_types_the_unpacker_does_not_take() {
    let with = |kind: tar::EntryType, name: &[u8], size: u64| {
        raw_tar(|b| {
            let mut h = header(tar::EntryType::Directory, 0, 0o755);
            b.append_data(&mut h, "pkg/", io::empty()).unwrap();
            let mut h = header(kind, size, 0o644);
            let field = &mut h.as_old_mut().name;
            field.fill(0);
            field[..name.len()].copy_from_slice(name);
            h.set_cksum();
            b.append(&h, &vec![b'x'; size as usize][..]).unwrap();
        })
    };
    let cases = [
        (
            with(tar::EntryType::Regular, b"pkg/\xff\xfe", 1),
            "not UTF-8",
        ),
        (
            with(tar::EntryType::Continuous, b"pkg/c", 1),
            "contiguous file",
        ),
        (
            with(tar::EntryType::XGlobalHeader, b"g", 0),
            "pax global header",
        ),
        (
            with(tar::EntryType::GNUSparse, b"pkg/s", 0),
            "GNU sparse file",
        ),
        (
            with(tar::EntryType::new(b'V'), b"pkg/v", 0),
            "GNU volume label",
        ),
        (with(tar::EntryType::new(b'M'), b"pkg/m", 0), "multi-volume"),
    ];
    for (data, want) in cases {
        let (dir, r) = unpack_bytes(&data, &UnpackOptions::default());
        let e = r.expect_err(want).to_string();
        assert!(e.contains(want), "{want}: {e}");
        only_stage_written(&dir);
    }
}

#[test]
fn oversized_extension_records_are_refused_unread() {
    // A GNU long name claiming 1 GiB, followed by nothing: the header
    // alone is refused (reading it would fail on the missing bytes).
    let mut h = header(tar::EntryType::GNULongName, 1 << 30, 0o644);
    raw_path(&mut h, "././@LongLink");
    let data = h.as_bytes().to_vec();
    let (_dir, r) = unpack_bytes(&data, &UnpackOptions::default());
    let e = r.unwrap_err();
    let text = agentsadm_types::error::error_chain(&e);
    assert!(
        text.contains("1073741824 bytes, over the 65536-byte limit"),
        "{text}"
    );
    assert!(text.len() < 400, "{text}");
}

/// Past the first 64 files a pool of writers takes over and small files
/// travel to it in batches: a file still in a batch when a later entry
/// replaces it, or a hard link names it, is written first; every file and
/// directory ends with its mode (directories owner-writable), whether
/// `mkdir`/`open` could give it or the umask forced a `chmod`.
#[test]
fn a_large_package_unpacks_exactly_through_the_writer_pool() {
    use std::collections::BTreeMap;
    use std::os::unix::fs::MetadataExt;
    let mut b = tar::Builder::new(Vec::new());
    let mut files: BTreeMap<String, (u32, Vec<u8>)> = BTreeMap::new();
    let mut dirs: BTreeMap<String, u32> = BTreeMap::new();
    let mut add_dir = |b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32| {
        let mut h = header(tar::EntryType::Directory, 0, mode);
        b.append_data(&mut h, format!("{path}/"), &[][..]).unwrap();
        // Never world-writable; always owner-writable.
        dirs.insert(path.to_string(), (mode & 0o775) | 0o700);
    };
    let add_file = |b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]| {
        let mut h = header(tar::EntryType::Regular, data.len() as u64, mode);
        b.append_data(&mut h, path, data).unwrap();
    };
    add_dir(&mut b, "pkg", 0o755);
    for d in 0..20 {
        let dir = format!("pkg/d{d}");
        // 0777 comes out 0775 (never world-writable).
        add_dir(&mut b, &dir, [0o755, 0o750, 0o700, 0o555, 0o777][d % 5]);
        for f in 0..15 {
            let path = format!("{dir}/f{f}");
            let mode = [0o644, 0o600, 0o755, 0o640, 0o666][f % 5];
            let data = format!("{d}/{f};").repeat(f * 37 + 1).into_bytes();
            add_file(&mut b, &path, mode, &data);
            // 0666 comes out 0664 (never world-writable).
            files.insert(path, (mode & !0o002, data));
        }
    }
    // A file larger than a chunk, between batches.
    let big: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    add_file(&mut b, "pkg/d3/big", 0o644, &big);
    files.insert("pkg/d3/big".into(), (0o644, big));
    // A file a few entries back (still batched) replaced; the later entry wins.
    add_file(&mut b, "pkg/d19/f13", 0o600, b"replaced");
    files.insert("pkg/d19/f13".into(), (0o600, b"replaced".to_vec()));
    // A hard link to a file that may still be in a batch.
    let mut h = header(tar::EntryType::Link, 0, 0o644);
    b.append_link(&mut h, "pkg/d19/hard", "pkg/d19/f14")
        .unwrap();
    let data = b.into_inner().unwrap();

    let (dir, r) = unpack_bytes(&data, &UnpackOptions::default());
    let u = r.unwrap();
    // The replaced file's two entries, and the hard link.
    assert_eq!(u.entries as usize, files.len() + 1 + dirs.len() + 1);
    let stage = dir.path().join("stage");
    for (path, (mode, data)) in &files {
        let md = fs::metadata(stage.join(path)).unwrap();
        assert_eq!(md.mode() & 0o7777, *mode, "{path}");
        assert_eq!(&fs::read(stage.join(path)).unwrap(), data, "{path}");
    }
    for (path, mode) in &dirs {
        let md = fs::metadata(stage.join(path)).unwrap();
        assert_eq!(md.mode() & 0o7777, *mode, "{path}");
    }
    let hard = fs::metadata(stage.join("pkg/d19/hard")).unwrap();
    let target = fs::metadata(stage.join("pkg/d19/f14")).unwrap();
    assert_eq!(hard.ino(), target.ino());
    assert_eq!(hard.nlink(), 2);
    only_stage_written(&dir);
}
