//! Links in a package are never followed by the installer's own file
//! operations: a chain of in-package links that really resolves outside the
//! root must not let the `bin` chmod change a file outside it.

use std::os::unix::fs::PermissionsExt;

use crate::gz_common::*;
use agentsadm_types::ids::ImageUuid;

fn link(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_mode(0o777);
    h.set_size(0);
    b.append_link(&mut h, path, target).unwrap();
}

fn dir(b: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    b.append_data(&mut h, path, std::io::empty()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bin_chmod_never_follows_a_link_out_of_the_root() {
    let srv = TestServer::new(false);
    // The sentinel beside the root, mode 0600.
    let outside = srv.root().parent().unwrap();
    let sentinel = tempfile::NamedTempFile::new_in(outside).unwrap();
    std::fs::set_permissions(sentinel.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    let name = sentinel
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let uuid = ImageUuid::new_v4();
    // d1/../d8/up -> the package root (8 levels up, lexically inside); then
    // bin/x goes 7 levels above the real package root: the root's parent.
    let tar = vm_agent_tar(uuid, |b| {
        let mut p = "vm-agent".to_string();
        for i in 1..=8 {
            p.push_str(&format!("/d{i}"));
            dir(b, &format!("{p}/"));
        }
        link(b, &format!("{p}/up"), &"../".repeat(8));
        dir(b, "vm-agent/bin/");
        let deep: Vec<String> = (1..=8).map(|i| format!("d{i}")).collect();
        link(
            b,
            "vm-agent/bin/x",
            &format!("../{}/up/{}{name}", deep.join("/"), "../".repeat(7)),
        );
    });
    // package.json with a bin naming the link.
    let tar = {
        let mut a = tar::Archive::new(&tar[..]);
        let mut b = tar::Builder::new(Vec::new());
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let mut h = e.header().clone();
            if e.path().unwrap().to_string_lossy() == "vm-agent/package.json" {
                let pj = br#"{"name":"vm-agent","version":"9.9.9","bin":{"vm-agent":"./bin/x"}}"#;
                h.set_size(pj.len() as u64);
                h.set_cksum();
                b.append(&h, &pj[..]).unwrap();
            } else {
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut data).unwrap();
                b.append(&h, &data[..]).unwrap();
            }
        }
        b.into_inner().unwrap()
    };
    let img = raw_image("vm-agent", uuid, &tar);
    let files = tempfile::tempdir().unwrap();
    let f = write_image(&img, files.path());
    let f = f.to_string_lossy().into_owned();
    let _ = srv.gz_offline(&["install", &f]).await;
    let mode = std::fs::metadata(sentinel.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o600, "the bin chmod followed a link out of the root");
}
