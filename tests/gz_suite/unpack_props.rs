//! Property: whatever the archive, the unpacker never panics and never
//! writes outside its destination; when it succeeds, no symbolic link in
//! the result resolves outside the package.

use agentsadm_gz::unpack::UnpackOptions;

use agentsadm_gz::unpack::unpack;
use agentsadm_types::image::Compression;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Kind {
    File,
    Dir,
    Symlink(String),
    Hardlink(String),
    Fifo,
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("pkg".to_string()),
        Just("a".to_string()),
        Just("b".to_string()),
        Just("..".to_string()),
        Just(".".to_string()),
        Just("".to_string()),
    ]
}

fn path() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(segment(), 1..5))
        .prop_map(|(abs, segs)| format!("{}{}", if abs { "/" } else { "" }, segs.join("/")))
}

fn entry() -> impl Strategy<Value = (String, Kind)> {
    let kind = prop_oneof![
        4 => Just(Kind::File),
        3 => Just(Kind::Dir),
        3 => path().prop_map(Kind::Symlink),
        2 => path().prop_map(Kind::Hardlink),
        1 => Just(Kind::Fifo),
    ];
    (path(), kind)
}

fn raw_header(kind: tar::EntryType, path: &str, link: Option<&str>, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(0o4755);
    h.set_size(size);
    let p = path.as_bytes();
    let name = &mut h.as_old_mut().name;
    let n = p.len().min(99);
    name[..n].copy_from_slice(&p[..n]);
    if let Some(l) = link {
        let l = l.as_bytes();
        let ln = &mut h.as_old_mut().linkname;
        let n = l.len().min(99);
        ln[..n].copy_from_slice(&l[..n]);
    }
    h.set_cksum();
    h
}

fn archive(entries: &[(String, Kind)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (p, k) in entries {
        let (t, link, data): (tar::EntryType, Option<&str>, &[u8]) = match k {
            Kind::File => (tar::EntryType::Regular, None, b"data"),
            Kind::Dir => (tar::EntryType::Directory, None, b""),
            Kind::Symlink(l) => (tar::EntryType::Symlink, Some(l), b""),
            Kind::Hardlink(l) => (tar::EntryType::Link, Some(l), b""),
            Kind::Fifo => (tar::EntryType::Fifo, None, b""),
        };
        let h = raw_header(t, p, link, data.len() as u64);
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]
    #[test]
    fn never_writes_outside_staging(entries in prop::collection::vec(entry(), 1..8), single_top in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("stage");
        let sentinel = dir.path().join("sentinel");
        std::fs::create_dir(&dest).unwrap();
        std::fs::create_dir(&sentinel).unwrap();
        std::fs::write(sentinel.join("keep"), b"keep").unwrap();
        let data = archive(&entries);
        let opts = UnpackOptions { single_top, ..Default::default() };
        let result = unpack(&data[..], Compression::None, &dest, &opts);
        let mut names: Vec<String> = std::fs::read_dir(dir.path()).unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        prop_assert_eq!(names, vec!["sentinel".to_string(), "stage".to_string()]);
        prop_assert_eq!(std::fs::read_dir(&sentinel).unwrap().count(), 1);
        prop_assert_eq!(std::fs::read(sentinel.join("keep")).unwrap(), b"keep".to_vec());
        if let Ok(u) = result {
            let base = if single_top { dest.join(&u.top) } else { dest.clone() };
            crate::gz_common::assert_links_inside(&base, &dest);
        }
    }
}

#[test]
fn garbage_never_panics() {
    let mut seed = 1u64;
    for len in [0usize, 1, 100, 511, 512, 1024, 5000] {
        let mut data = vec![0u8; len];
        for b in data.iter_mut() {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (seed >> 33) as u8;
        }
        for c in [Compression::None, Compression::Gzip, Compression::Bzip2] {
            let dir = tempfile::tempdir().unwrap();
            let _ = unpack(&data[..], c, dir.path(), &UnpackOptions::default());
        }
    }
}
