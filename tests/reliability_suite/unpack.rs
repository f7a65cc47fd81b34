//! Reliability: the unpacker against archives that other tests do not
//! build — long names (GNU `L` records and pax `path`/`linkpath` records,
//! which carry names past tar's 100-byte field, `..` and absolute paths
//! included) and corrupted bytes (flipped bytes, truncation) of a real
//! component image, raw and gzip-compressed; and the shell archives
//! dockerlogger and sdcadm images are, corrupted the same way.
//!
//! Property: it never panics, never writes outside its destination, and
//! when it succeeds no symbolic link in the result resolves outside it,
//! lexically or by the kernel (following the archive's other links).
//! (`tests/gz_suite/unpack_props.rs` covers short names of every entry
//! type and random bytes.)

use std::io::Write;

use agentsadm_gz::unpack::UnpackOptions;
use agentsadm_gz::unpack::unpack;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::ImageSpec;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::image::Compression;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Kind {
    File,
    Dir,
    Symlink(String),
    Hardlink(String),
}

/// How an entry's name is written.
#[derive(Clone, Copy, Debug)]
enum Naming {
    /// In the header (cut at 100 bytes).
    Header,
    /// A GNU long-name record before the header.
    GnuLong,
    /// A pax extended header before the header.
    Pax,
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("vm-agent".to_string()),
        Just("a".to_string()),
        Just("..".to_string()),
        Just(".".to_string()),
        Just("".to_string()),
        // Long segments push names past the header's 100 bytes.
        Just("x".repeat(60)),
        Just("y".repeat(120)),
    ]
}

fn path() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(segment(), 1..5))
        .prop_map(|(abs, segs)| format!("{}{}", if abs { "/" } else { "" }, segs.join("/")))
}

fn entry() -> impl Strategy<Value = (String, Kind, Naming)> {
    let kind = prop_oneof![
        4 => Just(Kind::File),
        2 => Just(Kind::Dir),
        3 => path().prop_map(Kind::Symlink),
        2 => path().prop_map(Kind::Hardlink),
    ];
    let naming = prop_oneof![
        Just(Naming::Header),
        Just(Naming::GnuLong),
        Just(Naming::Pax)
    ];
    (path(), kind, naming)
}

/// A 512-byte header with raw name and link fields (cut to fit).
fn header(kind: tar::EntryType, name: &str, link: Option<&str>, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(0o6755);
    h.set_size(size);
    let put = |field: &mut [u8; 100], s: &str| {
        let b = s.as_bytes();
        let n = b.len().min(99);
        field[..n].copy_from_slice(&b[..n]);
    };
    put(&mut h.as_old_mut().name, name);
    if let Some(l) = link {
        put(&mut h.as_old_mut().linkname, l);
    }
    h.set_cksum();
    h
}

/// One pax record: `<len> <key>=<value>\n`, where len counts itself.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while format!("{len}{body}").len() != len {
        len += 1;
    }
    format!("{len}{body}").into_bytes()
}

fn archive(entries: &[(String, Kind, Naming)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, naming) in entries {
        let (t, link, data): (tar::EntryType, Option<&str>, &[u8]) = match kind {
            Kind::File => (tar::EntryType::Regular, None, b"data"),
            Kind::Dir => (tar::EntryType::Directory, None, b""),
            Kind::Symlink(l) => (tar::EntryType::Symlink, Some(l), b""),
            Kind::Hardlink(l) => (tar::EntryType::Link, Some(l), b""),
        };
        match naming {
            Naming::Header => {}
            Naming::GnuLong => {
                let mut name = path.as_bytes().to_vec();
                name.push(0);
                let h = header(
                    tar::EntryType::GNULongName,
                    "././@LongLink",
                    None,
                    name.len() as u64,
                );
                b.append(&h, &name[..]).unwrap();
                if let Some(l) = link {
                    let mut target = l.as_bytes().to_vec();
                    target.push(0);
                    let h = header(
                        tar::EntryType::GNULongLink,
                        "././@LongLink",
                        None,
                        target.len() as u64,
                    );
                    b.append(&h, &target[..]).unwrap();
                }
            }
            Naming::Pax => {
                let mut records = pax_record("path", path);
                if let Some(l) = link {
                    records.extend(pax_record("linkpath", l));
                }
                let h = header(
                    tar::EntryType::XHeader,
                    "PaxHeaders/x",
                    None,
                    records.len() as u64,
                );
                b.append(&h, &records[..]).unwrap();
            }
        }
        let h = header(t, path, link, data.len() as u64);
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn unpack_contained(data: &[u8], compression: Compression, single_top: bool) {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("stage");
    let sentinel = dir.path().join("sentinel");
    std::fs::create_dir(&dest).unwrap();
    std::fs::create_dir(&sentinel).unwrap();
    std::fs::write(sentinel.join("keep"), b"keep").unwrap();
    let opts = UnpackOptions {
        single_top,
        ..Default::default()
    };
    let result = unpack(data, compression, &dest, &opts);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["sentinel", "stage"],
        "wrote next to the destination"
    );
    assert_eq!(std::fs::read_dir(&sentinel).unwrap().count(), 1);
    assert_eq!(std::fs::read(sentinel.join("keep")).unwrap(), b"keep");
    if let Ok(u) = result {
        let base = if single_top {
            dest.join(&u.top)
        } else {
            dest.clone()
        };
        crate::gz_common::assert_links_inside(&base, &dest);
        crate::gz_common::assert_links_resolve_inside(&base, &dest);
    }
}

/// A real vm-agent image's tar (uncompressed).
fn real_tar() -> Vec<u8> {
    let catalog = Catalog::builtin();
    let mut spec = ImageSpec::for_component(catalog.get("vm-agent").unwrap(), "1.0.0");
    spec.payload_bytes = 2048;
    let img = imagebuild::build(&spec);
    let mut out = Vec::new();
    let mut d = flate2::read::GzDecoder::new(&img.file[..]);
    std::io::Read::read_to_end(&mut d, &mut out).unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn long_names_never_escape(
        entries in prop::collection::vec(entry(), 1..7),
        single_top in any::<bool>(),
        compressed in any::<bool>(),
    ) {
        let data = archive(&entries);
        if compressed {
            unpack_contained(&gzip(&data), Compression::Gzip, single_top);
        } else {
            unpack_contained(&data, Compression::None, single_top);
        }
    }

    #[test]
    fn corrupted_images_never_escape_or_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..12),
        cut in prop::option::of(any::<prop::sample::Index>()),
        compressed in any::<bool>(),
    ) {
        let mut data = real_tar();
        for (at, byte) in &flips {
            let i = at.index(data.len());
            data[i] ^= byte | 1;
        }
        if let Some(c) = cut {
            data.truncate(c.index(data.len()));
        }
        if compressed {
            unpack_contained(&gzip(&data), Compression::Gzip, true);
        } else {
            unpack_contained(&data, Compression::None, true);
        }
    }
}

/// A real dockerlogger shar (made by GNU sharutils) and a shar agentsadm
/// writes with hostile member names, corrupted the same way.
fn shar_samples() -> [Vec<u8>; 2] {
    let real = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/shar/dockerlogger.sh"),
    )
    .unwrap();
    let hostile = format!(
        "#!/bin/sh\n{}exit 0\n",
        agentsadm_sim::imagebuild::shar::write(&[
            ("dockerlogger/ok", 0o755, b"ok\n"),
            ("dockerlogger/../../up", 0o644, b"\x00\x01binary"),
            ("/abs/path", 0o644, b"x\n"),
            ("dockerlogger/it's", 0o4755, b"setuid\n"),
        ])
    )
    .into_bytes();
    [real, hostile]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, .. ProptestConfig::default() })]

    /// Shell archives go through the same unpacker (repacked as tar): no
    /// corruption of one makes it write outside the destination or panic.
    #[test]
    fn corrupted_shars_never_escape_or_panic(
        which in 0usize..2,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..12),
        cut in prop::option::of(any::<prop::sample::Index>()),
        single_top in any::<bool>(),
    ) {
        let mut data = shar_samples()[which].clone();
        for (at, byte) in &flips {
            // Keep the `#!` line so the bytes are read as a shar.
            let i = 12 + at.index(data.len() - 12);
            data[i] ^= byte | 1;
        }
        if let Some(c) = cut {
            data.truncate(12 + c.index(data.len() - 12));
        }
        unpack_contained(&data, Compression::None, single_top);
    }
}

/// The long-name encodings above are read: a long name is unpacked under
/// it, and `..` hidden past 100 bytes is refused.
#[test]
fn long_names_are_honoured() {
    let long = format!("vm-agent/{}/{}", "x".repeat(60), "y".repeat(120));
    for naming in [Naming::GnuLong, Naming::Pax] {
        let data = archive(&[
            ("vm-agent".into(), Kind::Dir, Naming::Header),
            (long.clone(), Kind::File, naming),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let u = unpack(
            &data[..],
            Compression::None,
            dir.path(),
            &UnpackOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{naming:?}: {e}"));
        assert_eq!(u.top, "vm-agent");
        assert_eq!(std::fs::read(dir.path().join(&long)).unwrap(), b"data");

        let sneaky = format!("vm-agent/{}/../../../escaped", "x".repeat(120));
        let data = archive(&[
            ("vm-agent".into(), Kind::Dir, Naming::Header),
            (sneaky, Kind::File, naming),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let stage = dir.path().join("stage");
        std::fs::create_dir(&stage).unwrap();
        let r = unpack(
            &data[..],
            Compression::None,
            &stage,
            &UnpackOptions::default(),
        );
        assert!(r.is_err(), "{naming:?}: {r:?}");
        assert!(!dir.path().join("escaped").exists());
    }
}
