//! Hostile images (issue 12): each class an attacker tried ends in one
//! clear error, with the server's root exactly as it was (the installed
//! version, its files, bins, instance and SMF state) and a sentinel file
//! outside the root untouched:
//! - a chain of in-package symbolic links that resolves outside the package
//!   (the `bin` chmod used to follow it to the sentinel);
//! - header bombs: a 256 MiB GNU long name or pax record in a tiny bzip2
//!   image, refused from its header with a short message;
//! - decompression bombs, the absolute cap and too little free space;
//! - slow or endless sources: a trickling download, a stalled one past the
//!   deadline, `/dev/zero` as a local image file;
//! - manifests over 1 MiB (from IMGAPI and local files);
//! - an IMGAPI answer naming another image, unactivated and disabled images
//!   (and `allow_inactive` installing one);
//! - non-UTF-8 names and unsupported entry types.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::gz_common::*;
use agentsadm_api::remote::GzResult;
use agentsadm_gz::fetch::FetchOptions;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::standin::Fault;
use agentsadm_sim::standin::ImgapiStandIn;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageFile;
use agentsadm_types::image::ImageState;
use sha1::{Digest, Sha1};

/// How long any one hostile install may take before the test calls it
/// hung (today's code read `/dev/zero` and trickles for ever).
const HANG: Duration = Duration::from_secs(60);

/// A file outside the server's root that no install may touch.
struct Sentinel {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Sentinel {
    fn new() -> Sentinel {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, b"top secret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Sentinel { _dir: dir, path }
    }

    /// Mode, content and the directory's listing.
    fn state(&self) -> (u32, Vec<u8>, Vec<String>) {
        let md = std::fs::symlink_metadata(&self.path).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(self.path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        (
            md.permissions().mode() & 0o7777,
            std::fs::read(&self.path).unwrap(),
            names,
        )
    }
}

/// A server with vm-agent 1.0.0 installed, the root's snapshot, and a
/// sentinel outside it.
struct Scene {
    imgapi: ImgapiStandIn,
    srv: TestServer,
    v1: BuiltImage,
    before: BTreeMap<String, String>,
    sentinel: Sentinel,
    sentinel_before: (u32, Vec<u8>, Vec<String>),
}

/// Fetch options for tests: no retries, so a refusal is one attempt.
fn quick() -> FetchOptions {
    FetchOptions {
        retries: 0,
        ..FetchOptions::default()
    }
}

impl Scene {
    async fn new() -> Scene {
        let imgapi = ImgapiStandIn::start().await.unwrap();
        let srv = TestServer::new(false);
        let v1 = image("vm-agent", "1.0.0");
        imgapi.publish(&v1);
        let r = install(
            &srv,
            &imgapi,
            ImageSource::Imgapi(v1.manifest.uuid),
            quick(),
        )
        .await;
        assert!(r.error.is_none(), "{:?}", r.error);
        let before = snapshot(srv.root());
        let sentinel = Sentinel::new();
        let sentinel_before = sentinel.state();
        Scene {
            imgapi,
            srv,
            v1,
            before,
            sentinel,
            sentinel_before,
        }
    }

    /// Install `source`; it must fail in one short message, with the root
    /// and the sentinel unchanged. Returns `step: message`.
    async fn refused(&self, name: &str, source: ImageSource, fetch: FetchOptions) -> String {
        let r = tokio::time::timeout(HANG, install(&self.srv, &self.imgapi, source, fetch))
            .await
            .unwrap_or_else(|_| panic!("{name}: the install hung"));
        let e = r
            .error
            .unwrap_or_else(|| panic!("{name}: the install succeeded"));
        let msg = format!("{}: {}", e.step, e.message);
        eprintln!("CASE {name}: {msg}");
        assert!(msg.len() < 1500, "{name}: a {} byte message", msg.len());
        assert_same(&self.before, &snapshot(self.srv.root()), name);
        self.srv.assert_no_leftovers();
        assert_eq!(
            self.srv.installed_image("vm-agent"),
            Some(self.v1.manifest.uuid.to_string()),
            "{name}"
        );
        assert_eq!(
            self.sentinel.state(),
            self.sentinel_before,
            "{name}: the sentinel outside the root changed"
        );
        msg
    }

    /// Publish `img` and install it by UUID; see [`Scene::refused`].
    async fn refused_image(&self, name: &str, img: &BuiltImage, expect: &[&str]) -> String {
        self.imgapi.publish(img);
        let msg = self
            .refused(name, ImageSource::Imgapi(img.manifest.uuid), quick())
            .await;
        for want in expect {
            assert!(msg.contains(want), "{name}: {msg:?} lacks {want:?}");
        }
        msg
    }
}

/// `gz install` through a session with these fetch options, SAPI and CNAPI
/// off.
async fn install(
    srv: &TestServer,
    imgapi: &ImgapiStandIn,
    source: ImageSource,
    fetch: FetchOptions,
) -> GzResult {
    let mut settings = GzSettings::new(srv.root(), PlatformKind::Rooted);
    settings.no_sapi = true;
    settings.no_cnapi = true;
    settings.imgapi_url = Some(imgapi.url());
    settings.fetch = fetch;
    let mut session = GzSession::open(settings, true).await.unwrap();
    session.install(&[source]).await
}

/// A vm-agent package whose `package.json` declares the bin
/// `bin/vm-agent`, then `extra` entries.
fn package_tar(uuid: ImageUuid, extra: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    dir(&mut b, "vm-agent/");
    file(
        &mut b,
        "vm-agent/package.json",
        br#"{"name":"vm-agent","version":"2.0.0","bin":{"vm-agent":"./bin/vm-agent"}}"#,
    );
    file(
        &mut b,
        "vm-agent/image_uuid",
        format!("{uuid}\n").as_bytes(),
    );
    dir(&mut b, "vm-agent/bin/");
    extra(&mut b);
    b.into_inner().unwrap()
}

fn dir(b: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    b.append_data(&mut h, path, std::io::empty()).unwrap();
}

fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    b.append_data(&mut h, path, data).unwrap();
}

fn symlink(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_mode(0o777);
    h.set_size(0);
    b.append_link(&mut h, path, target).unwrap();
}

/// A raw header of `kind` for `path` (any bytes), `size` bytes of content.
fn raw_header(kind: tar::EntryType, path: &[u8], size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(size);
    let name = &mut h.as_old_mut().name;
    name.fill(0);
    name[..path.len()].copy_from_slice(path);
    h.set_cksum();
    h
}

/// An image whose file is `file` as it is.
fn image_of(uuid: ImageUuid, file: Vec<u8>, compression: Compression) -> BuiltImage {
    let mut manifest = image("vm-agent", "2.0.0").manifest;
    manifest.uuid = uuid;
    manifest.files = vec![ImageFile {
        sha1: format!("{:x}", Sha1::digest(&file)),
        size: file.len() as u64,
        compression,
        stor: None,
    }];
    BuiltImage { manifest, file }
}

fn gzip_image(uuid: ImageUuid, tar: &[u8]) -> BuiltImage {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(tar).unwrap();
    image_of(uuid, enc.finish().unwrap(), Compression::Gzip)
}

/// The package tar without its end-of-archive blocks, for appending raw
/// records by hand.
fn open_package(uuid: ImageUuid) -> Vec<u8> {
    let mut t = package_tar(uuid, |_| {});
    t.truncate(t.len() - 1024);
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_chain_out_of_the_package_is_refused() {
    let scene = Scene::new().await;
    // c0/.../c29 -> 29 x `..` is the package directory itself; from there
    // 30 more `..` climb past `/`, and the rest names the sentinel. Each
    // link on its own stays inside the package, lexically.
    let depth = 30;
    let chain: Vec<String> = (0..depth).map(|i| format!("c{i}")).collect();
    let sentinel = scene
        .sentinel
        .path
        .to_str()
        .unwrap()
        .trim_start_matches('/');
    let uuid = ImageUuid::new_v4();
    let tar = package_tar(uuid, |b| {
        for i in 1..depth {
            dir(b, &format!("vm-agent/{}/", chain[..i].join("/")));
        }
        symlink(
            b,
            &format!("vm-agent/{}", chain.join("/")),
            &vec![".."; depth - 1].join("/"),
        );
        // The package's bin, chmod-ed 0755 at install.
        let target = format!(
            "../{}/{}/{sentinel}",
            chain.join("/"),
            vec![".."; depth].join("/")
        );
        symlink(b, "vm-agent/bin/vm-agent", &target);
    });
    let img = gzip_image(uuid, &tar);
    scene
        .refused_image(
            "symlink chain",
            &img,
            &[
                "symbolic link",
                "vm-agent/bin/vm-agent",
                "points outside the package",
            ],
        )
        .await;
    // A loop is refused too (not followed for ever).
    let uuid = ImageUuid::new_v4();
    let tar = package_tar(uuid, |b| {
        symlink(b, "vm-agent/a", "b/x");
        symlink(b, "vm-agent/b", "a/y");
    });
    scene
        .refused_image("link loop", &gzip_image(uuid, &tar), &["loop"])
        .await;
}

/// A bzip2 image whose one header claims a 256 MiB extension record (and
/// has it: 256 MiB of `a`, which bzip2 makes a few KB).
fn header_bomb(uuid: ImageUuid, kind: tar::EntryType) -> BuiltImage {
    let record = 256u64 << 20;
    let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    enc.write_all(&open_package(uuid)).unwrap();
    let h = raw_header(kind, b"././@LongLink", record);
    enc.write_all(h.as_bytes()).unwrap();
    let prefix = if kind == tar::EntryType::XHeader {
        format!("{} path=", record)
    } else {
        String::new()
    };
    enc.write_all(prefix.as_bytes()).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    let mut left = record - prefix.len() as u64;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        enc.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    let h = raw_header(tar::EntryType::Regular, b"vm-agent/x", 0);
    enc.write_all(h.as_bytes()).unwrap();
    enc.write_all(&[0u8; 1024]).unwrap();
    image_of(uuid, enc.finish().unwrap(), Compression::Bzip2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_bombs_are_refused_from_their_header() {
    let scene = Scene::new().await;
    let gnu = header_bomb(ImageUuid::new_v4(), tar::EntryType::GNULongName);
    assert!(gnu.file.len() < 64 * 1024, "{} bytes", gnu.file.len());
    scene
        .refused_image(
            "GNU long-name bomb",
            &gnu,
            &["GNU long name", "268435456 bytes", "65536-byte limit"],
        )
        .await;
    let pax = header_bomb(ImageUuid::new_v4(), tar::EntryType::XHeader);
    scene
        .refused_image(
            "pax bomb",
            &pax,
            &["pax extended header", "268435456 bytes", "65536-byte limit"],
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decompression_bombs_stop_at_a_limit() {
    let scene = Scene::new().await;
    // 64 MiB of zeros: about 64 KB compressed, 1000 times over.
    let uuid = ImageUuid::new_v4();
    let zeros = vec![0u8; 64 << 20];
    let tar = package_tar(uuid, |b| file(b, "vm-agent/zeros", &zeros));
    let bomb = gzip_image(uuid, &tar);
    assert!(bomb.file.len() < 1 << 20);
    scene
        .refused_image(
            "expansion ratio",
            &bomb,
            &["100 times its", "compressed bytes", "--max-expansion-ratio"],
        )
        .await;
    // The absolute cap, on a genuine image with a random payload.
    let mut s = spec("vm-agent", "2.0.0");
    s.payload_bytes = 2 << 20;
    let img = agentsadm_sim::imagebuild::build(&s);
    scene.imgapi.publish(&img);
    let msg = scene
        .refused(
            "absolute cap",
            ImageSource::Imgapi(img.manifest.uuid),
            FetchOptions {
                max_unpacked_bytes: 1 << 20,
                ..quick()
            },
        )
        .await;
    assert!(msg.contains("cap of 1048576 unpacked bytes"), "{msg}");
    assert!(msg.contains("--max-unpacked-bytes"), "{msg}");
    // Too little free space: refused before anything is written.
    let msg = scene
        .refused(
            "free space",
            ImageSource::Imgapi(img.manifest.uuid),
            FetchOptions {
                free_space_reserve: u64::MAX / 4,
                ..quick()
            },
        )
        .await;
    assert!(
        msg.contains("bytes free") && msg.contains("free space there"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_endless_sources_end() {
    let scene = Scene::new().await;
    let img = image("vm-agent", "2.0.0");
    scene.imgapi.publish(&img);
    let uuid = img.manifest.uuid;
    // A byte every 20 ms never stalls, and at 50 bytes/s would take
    // minutes: below the minimum rate.
    scene.imgapi.set_fault(
        uuid,
        Fault::Trickle {
            every: Duration::from_millis(20),
        },
    );
    let msg = scene
        .refused(
            "trickle",
            ImageSource::Imgapi(uuid),
            FetchOptions {
                min_rate: 10 * 1024,
                rate_window: Duration::from_secs(1),
                ..quick()
            },
        )
        .await;
    assert!(msg.contains("below the minimum rate"), "{msg}");
    // The same trickle with no minimum rate meets the deadline.
    let msg = scene
        .refused(
            "deadline",
            ImageSource::Imgapi(uuid),
            FetchOptions {
                min_rate: 0,
                deadline: Duration::from_secs(2),
                ..quick()
            },
        )
        .await;
    assert!(msg.contains("did not finish within 2s"), "{msg}");
    scene.imgapi.clear_fault(uuid);
    // `/dev/zero` as the image file, with a manifest claiming a terabyte.
    let d = tempfile::tempdir().unwrap();
    let endless = manifest_with(&img, |m| {
        m.files[0].size = 1 << 40;
        m.files[0].compression = Compression::None;
    });
    let (manifest, _) = agentsadm_sim::imagebuild::write_to_dir(&endless, d.path()).unwrap();
    let source = ImageSource::File {
        file: PathBuf::from("/dev/zero"),
        manifest,
    };
    let msg = scene.refused("/dev/zero", source, quick()).await;
    assert!(msg.contains("not a regular file"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_over_1_mib_are_refused() {
    let scene = Scene::new().await;
    let big = manifest_with(&image("vm-agent", "2.0.0"), |m| {
        m.description = Some("x".repeat(2 << 20));
    });
    scene
        .refused_image(
            "IMGAPI manifest over 1 MiB",
            &big,
            &["larger than 1048576 bytes"],
        )
        .await;
    let d = tempfile::tempdir().unwrap();
    let (manifest, file) = agentsadm_sim::imagebuild::write_to_dir(&big, d.path()).unwrap();
    let msg = scene
        .refused(
            "local manifest over 1 MiB",
            ImageSource::File { file, manifest },
            quick(),
        )
        .await;
    assert!(msg.contains("larger than 1048576 bytes"), "{msg}");
}

/// A damaged IMGAPI record (a manifest without `files[0].compression`):
/// IMGAPI is up, so the message says which field is wrong, not "check that
/// IMGAPI is up".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_missing_a_field_names_the_field() {
    let scene = Scene::new().await;
    let img = image("vm-agent", "2.0.0");
    scene.imgapi.publish(&img);
    scene.imgapi.set_fault(
        img.manifest.uuid,
        Fault::ManifestWithoutFileField("compression"),
    );
    let msg = scene
        .refused_image(
            "a manifest without files[0].compression",
            &img,
            &[
                "missing field `compression`",
                "not a valid image manifest",
                "sdc-imgadm get",
            ],
        )
        .await;
    assert!(!msg.contains("check that IMGAPI is up"), "{msg}");
    assert!(!msg.contains(" at line "), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_identity_and_state_are_checked() {
    let scene = Scene::new().await;
    // Asked for `asked`, IMGAPI answers with another (installable) image.
    let asked = image("vm-agent", "2.0.0");
    let other = image("vm-agent", "2.0.1");
    scene.imgapi.publish(&other);
    scene
        .imgapi
        .set_fault(asked.manifest.uuid, Fault::ManifestOf(other.manifest.uuid));
    let msg = scene
        .refused_image(
            "another image's manifest",
            &asked,
            &["with the manifest of image"],
        )
        .await;
    assert!(msg.contains(&other.manifest.uuid.to_string()), "{msg}");
    for (name, state, disabled, want) in [
        (
            "unactivated",
            ImageState::Unactivated,
            false,
            "never activated",
        ),
        ("disabled", ImageState::Disabled, true, "disabled it"),
        ("disabled flag", ImageState::Active, true, "disabled it"),
    ] {
        let img = manifest_with(&image("vm-agent", "2.0.0"), |m| {
            m.state = state;
            m.disabled = disabled;
        });
        scene
            .refused_image(name, &img, &[want, "--allow-inactive"])
            .await;
    }
    // Named on purpose, an unactivated image installs.
    let img = manifest_with(&image("vm-agent", "2.0.0"), |m| {
        m.state = ImageState::Unactivated
    });
    scene.imgapi.publish(&img);
    let r = install(
        &scene.srv,
        &scene.imgapi,
        ImageSource::Imgapi(img.manifest.uuid),
        FetchOptions {
            allow_inactive: true,
            ..quick()
        },
    )
    .await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(
        scene.srv.installed_image("vm-agent"),
        Some(img.manifest.uuid.to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_utf8_names_and_unsupported_entry_types_are_refused() {
    let scene = Scene::new().await;
    let with = |kind: tar::EntryType, name: &[u8]| {
        let uuid = ImageUuid::new_v4();
        let mut t = open_package(uuid);
        t.extend_from_slice(raw_header(kind, name, 0).as_bytes());
        t.extend_from_slice(&[0u8; 1024]);
        gzip_image(uuid, &t)
    };
    let cases: Vec<(&str, BuiltImage, &str)> = vec![
        (
            "non-UTF-8 name",
            with(tar::EntryType::Regular, b"vm-agent/caf\xe9"),
            "vm-agent/caf\\xe9\" has a name that is not UTF-8",
        ),
        (
            "contiguous file",
            with(tar::EntryType::Continuous, b"vm-agent/contiguous"),
            "is a contiguous file, type '7'",
        ),
        (
            "pax global header",
            with(tar::EntryType::XGlobalHeader, b"pax_global_header"),
            "is a pax global header, type 'g'",
        ),
        (
            "GNU volume label",
            with(tar::EntryType::new(b'V'), b"vm-agent/volume"),
            "is a GNU volume label, type 'V'",
        ),
        (
            "GNU sparse file",
            with(tar::EntryType::GNUSparse, b"vm-agent/sparse"),
            "is a GNU sparse file, type 'S'",
        ),
        (
            "FIFO",
            with(tar::EntryType::Fifo, b"vm-agent/fifo"),
            "is a FIFO",
        ),
    ];
    for (name, img, want) in cases {
        scene.refused_image(name, &img, &[want]).await;
    }
}

/// Hard links are held to the same boundary as symbolic links: one that
/// goes through an in-package link, or names a path outside, is refused.
#[test]
fn hard_links_through_links_are_refused() {
    for (name, link) in [
        ("through a link", "vm-agent/up/etc/passwd"),
        ("outside", "etc/passwd"),
    ] {
        let uuid = ImageUuid::new_v4();
        let tar = package_tar(uuid, |b| {
            symlink(b, "vm-agent/up", "bin");
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Link);
            h.set_size(0);
            h.set_mode(0o644);
            b.append_link(&mut h, "vm-agent/pw", link).unwrap();
        });
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("stage");
        std::fs::create_dir(&dest).unwrap();
        let r =
            agentsadm_gz::unpack::unpack(&tar[..], Compression::None, &dest, &Default::default());
        let e = r.expect_err(name).to_string();
        assert!(e.contains("hard link"), "{name}: {e}");
        assert!(!Path::new(&dest).join("vm-agent/pw").exists());
    }
}
