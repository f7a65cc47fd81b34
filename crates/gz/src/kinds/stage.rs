//! A staged package checked against its image and turned into a
//! [`StagedVersion`]: each kind's footprint, overlay files moved under
//! `<txn>/root`, and the record of the non-apm kinds written among them.
//! Blocking (it may unpack inner tarballs): run it on the blocking pool.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use agentsadm_types::catalog::Component;

use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::ImageManifest;

use super::super::fsutil;
use super::super::package::PackageError;
use super::super::package::PackageJson;
use super::super::unpack;
use super::super::unpack::UnpackOptions;
use super::Footprint;
use super::InstalledRecord;
use super::Link;
use super::StagedVersion;
use super::overlay_files;
use super::record_rel;
use super::template_outputs;

/// A staged package that does not look like the image it claims to be.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("the package has no {file}; every {kind} image carries it")]
    MissingFile { file: String, kind: &'static str },
    #[error("{file} says {found:?}, but the image UUID is {expected}")]
    ImageUuidMismatch {
        file: String,
        found: String,
        expected: ImageUuid,
    },
    #[error(
        "{file} has the version {found:?}: a version is 1 to 128 letters, digits and .-+_~ (it goes into SMF manifests); use an image built with a valid version"
    )]
    BadVersion { file: String, found: String },
    #[error(
        "package.json's bin {name:?} (-> {target}) is refused: {reason}; use an image whose bins are its own files"
    )]
    BadBin {
        name: String,
        target: String,
        reason: String,
    },
    #[error("package.json name is {found:?}, expected {expected:?}")]
    NameMismatch { found: String, expected: String },
    #[error("{file} is not valid")]
    Package {
        file: String,
        #[source]
        err: PackageError,
    },
    #[error("the inner tarball {file} cannot be unpacked")]
    Inner {
        file: String,
        #[source]
        err: unpack::UnpackError,
    },
    #[error("cannot prepare {path}")]
    Io {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LayoutError + '_ {
    move |err| LayoutError::Io {
        path: path.to_path_buf(),
        err,
    }
}

fn read_image_uuid(
    dir: &Path,
    file: &str,
    kind: &'static str,
    expected: ImageUuid,
    required: bool,
) -> Result<(), LayoutError> {
    match fsutil::read_trimmed(&dir.join("image_uuid")).map_err(io_err(dir))? {
        None if required => Err(LayoutError::MissingFile {
            file: file.to_string(),
            kind,
        }),
        None => Ok(()),
        Some(found) => {
            if found.parse::<ImageUuid>().ok() != Some(expected) {
                return Err(LayoutError::ImageUuidMismatch {
                    file: file.to_string(),
                    found,
                    expected,
                });
            }
            Ok(())
        }
    }
}

fn read_package(
    dir: &Path,
    top: &str,
    expected_name: &str,
    kind: &'static str,
    required: bool,
) -> Result<Option<PackageJson>, LayoutError> {
    let file = format!("{top}/package.json");
    let pkg = PackageJson::read(dir).map_err(|err| LayoutError::Package {
        file: file.clone(),
        err,
    })?;
    match pkg {
        None if required => Err(LayoutError::MissingFile { file, kind }),
        None => Ok(None),
        Some(p) if p.name != expected_name => Err(LayoutError::NameMismatch {
            found: p.name.to_string(),
            expected: expected_name.to_string(),
        }),
        Some(p) => Ok(Some(p)),
    }
}

/// Check the unpacked package `<txn>/new/<top>` against the image and turn
/// it into a [`StagedVersion`]. For overlay kinds the files are moved into
/// `<txn>/root/...` mirroring their destinations.
pub fn stage(
    component: &Component,
    manifest: &ImageManifest,
    txn_dir: &Path,
    headnode: bool,
    record_sha256: &str,
) -> Result<StagedVersion, LayoutError> {
    let s = Staging {
        component,
        manifest,
        txn_dir,
        headnode,
        record_sha256,
    };
    match component.kind {
        ComponentKind::ApmAgent => stage_apm(&s),
        ComponentKind::Sdcadm => stage_sdcadm(&s),
        ComponentKind::GzTools => stage_gz_tools(&s),
        ComponentKind::Agentsadm => stage_agentsadm(component, manifest, txn_dir, record_sha256),
        ComponentKind::Dockerlogger => stage_dockerlogger(&s),
    }
}

/// What staging one image needs.
struct Staging<'a> {
    component: &'a Component,
    manifest: &'a ImageManifest,
    txn_dir: &'a Path,
    headnode: bool,
    record_sha256: &'a str,
}

impl Staging<'_> {
    /// The unpacked package, `<txn>/new/<top>`.
    fn pkg_dir(&self) -> PathBuf {
        self.txn_dir.join("new").join(self.component.package_name())
    }
}

/// An apm agent: the tree, its bins, the manifests its templates stand for.
fn stage_apm(s: &Staging<'_>) -> Result<StagedVersion, LayoutError> {
    let manifest = s.manifest;
    let (top, pkg_dir, uuid) = (s.component.package_name(), s.pkg_dir(), s.manifest.uuid);
    let id_file = format!("{top}/image_uuid");
    read_image_uuid(&pkg_dir, &id_file, "apm agent", uuid, true)?;
    let pkg = read_package(&pkg_dir, top, top, "apm agent", true)?.expect("required package.json");
    let version = if pkg.version.is_empty() {
        manifest.version.clone()
    } else {
        pkg.version.clone()
    };
    if !super::valid_version(&version) {
        return Err(LayoutError::BadVersion {
            file: format!("{top}/package.json"),
            found: version.chars().take(80).collect(),
        });
    }
    check_bins(&pkg_dir, top, &pkg)?;
    let dest = format!("opt/smartdc/agents/lib/node_modules/{top}");
    let links = pkg
        .bin
        .iter()
        .map(|(name, path)| Link {
            path: format!("opt/smartdc/agents/bin/{name}"),
            target: format!(
                "../lib/node_modules/{top}/{}",
                super::super::package::clean_relative(path)
            ),
        })
        .collect();
    let smf_manifests = template_outputs(&pkg_dir)
        .map_err(io_err(&pkg_dir))?
        .into_iter()
        .map(|(_, out)| out)
        .collect();
    Ok(StagedVersion {
        footprint: Footprint {
            image_uuid: Some(uuid),
            version,
            tree: Some(dest),
            overlay: Vec::new(),
            links,
            smf_manifests,
            apm: true,
        },
        tree_src: Some(pkg_dir),
        overlay_src: None,
        package: Some(pkg),
    })
}

/// sdcadm: the tree, its links, its manifests copied to the site directory.
fn stage_sdcadm(s: &Staging<'_>) -> Result<StagedVersion, LayoutError> {
    let (component, manifest, txn_dir) = (s.component, s.manifest, s.txn_dir);
    let (top, pkg_dir, uuid) = (s.component.package_name(), s.pkg_dir(), s.manifest.uuid);
    let id_file = format!("{top}/image_uuid");
    let kind_name = component.kind.as_str();
    // The real image is a shar of `contents.tgz` (the tree, no
    // top-level directory) and `install-sdcadm.sh`, with no
    // image_uuid inside: the sha1-checked manifest names it. A
    // package directory with the tree itself is read as well.
    let shar_layout = pkg_dir.join(SDCADM_CONTENTS).is_file();
    let pkg_dir = if shar_layout {
        unpack_sdcadm_contents(&pkg_dir, txn_dir, top)?
    } else {
        read_image_uuid(&pkg_dir, &id_file, kind_name, uuid, true)?;
        pkg_dir
    };
    read_package(&pkg_dir, top, top, "sdcadm", true)?;
    let root = txn_dir.join("root");
    let mut links = Vec::new();
    if pkg_dir.join("bin/sdcadm").exists() {
        links.push(Link {
            path: "opt/smartdc/bin/sdcadm".into(),
            target: "../sdcadm/bin/sdcadm".into(),
        });
    }
    if pkg_dir.join("man/man1/sdcadm.1").exists() {
        links.push(Link {
            path: "opt/smartdc/man/man1/sdcadm.1".into(),
            target: "../../sdcadm/man/man1/sdcadm.1".into(),
        });
    }
    let mut overlay = Vec::new();
    let mut smf = Vec::new();
    let mdir = pkg_dir.join("smf/manifests");
    if mdir.is_dir() {
        for e in fs::read_dir(&mdir).map_err(io_err(&mdir))? {
            let e = e.map_err(io_err(&mdir))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".xml") && e.file_type().map(|t| t.is_file()).unwrap_or(false) {
                let rel = format!("{}/{name}", super::super::paths::SITE_MANIFESTS);
                let dst = root.join(&rel);
                fs::create_dir_all(dst.parent().unwrap_or(&root)).map_err(io_err(&root))?;
                fs::copy(e.path(), &dst).map_err(io_err(&dst))?;
                overlay.push(rel.clone());
                smf.push(rel);
            }
        }
    }
    let footprint = Footprint {
        image_uuid: Some(uuid),
        version: manifest.version.clone(),
        tree: Some("opt/smartdc/sdcadm".into()),
        overlay,
        links,
        smf_manifests: smf,
        apm: false,
    };
    finish_overlay(
        component,
        manifest,
        footprint,
        Some(pkg_dir),
        &root,
        s.record_sha256,
    )
}

/// gz-tools: the role's inner tarball laid over `opt/smartdc`.
fn stage_gz_tools(s: &Staging<'_>) -> Result<StagedVersion, LayoutError> {
    let (component, manifest, txn_dir) = (s.component, s.manifest, s.txn_dir);
    let (top, pkg_dir, uuid) = (s.component.package_name(), s.pkg_dir(), s.manifest.uuid);
    let id_file = format!("{top}/image_uuid");
    let kind_name = component.kind.as_str();
    read_image_uuid(&pkg_dir, &id_file, kind_name, uuid, false)?;
    let inner = if s.headnode {
        "tools.tar.gz"
    } else {
        "cn_tools.tar.gz"
    };
    let inner_path = pkg_dir.join(inner);
    let file = File::open(&inner_path).map_err(|_| LayoutError::MissingFile {
        file: format!("{top}/{inner}"),
        kind: "gz-tools",
    })?;
    let root = txn_dir.join("root");
    let dest = root.join("opt/smartdc");
    fs::create_dir_all(&dest).map_err(io_err(&dest))?;
    let opts = UnpackOptions {
        single_top: false,
        ..Default::default()
    };
    unpack::unpack(
        file,
        agentsadm_types::image::Compression::Gzip,
        &dest,
        &opts,
    )
    .map_err(|err| LayoutError::Inner {
        file: format!("{top}/{inner}"),
        err,
    })?;
    let marker = dest.join("etc/gz-tools.image");
    match fsutil::read_trimmed(&marker).map_err(io_err(&marker))? {
        None => {
            return Err(LayoutError::MissingFile {
                file: format!("{top}/{inner}:etc/gz-tools.image"),
                kind: "gz-tools",
            });
        }
        Some(found) if found.parse::<ImageUuid>().ok() != Some(uuid) => {
            return Err(LayoutError::ImageUuidMismatch {
                file: format!("{top}/{inner}:etc/gz-tools.image"),
                found,
                expected: uuid,
            });
        }
        Some(_) => {}
    }
    let overlay = overlay_files(&root).map_err(io_err(&root))?;
    let footprint = Footprint {
        image_uuid: Some(uuid),
        version: manifest.version.clone(),
        tree: None,
        overlay,
        links: Vec::new(),
        smf_manifests: Vec::new(),
        apm: false,
    };
    finish_overlay(component, manifest, footprint, None, &root, s.record_sha256)
}

/// dockerlogger: its binaries and manifest (its `install.sh` is never run).
fn stage_dockerlogger(s: &Staging<'_>) -> Result<StagedVersion, LayoutError> {
    let (component, manifest, txn_dir) = (s.component, s.manifest, s.txn_dir);
    let (top, pkg_dir, uuid) = (s.component.package_name(), s.pkg_dir(), s.manifest.uuid);
    let id_file = format!("{top}/image_uuid");
    let kind_name = component.kind.as_str();
    // Triton's dockerlogger shar carries no image_uuid (its
    // install.sh records nothing either): checked when present.
    read_image_uuid(&pkg_dir, &id_file, kind_name, uuid, false)?;
    read_package(&pkg_dir, top, top, "dockerlogger", false)?;
    let root = txn_dir.join("root");
    let mut overlay = Vec::new();
    let mut smf = Vec::new();
    for (file, rel, mode) in [
        (
            "dockerlogger",
            "opt/smartdc/docker/bin/dockerlogger",
            Some(0o755),
        ),
        (
            "dockerlogger-setup.sh",
            "opt/smartdc/docker/bin/dockerlogger-setup.sh",
            Some(0o755),
        ),
        (
            "dockerlogger.xml",
            "var/svc/manifest/site/dockerlogger.xml",
            None,
        ),
    ] {
        let src = pkg_dir.join(file);
        if !src.is_file() {
            return Err(LayoutError::MissingFile {
                file: format!("{top}/{file}"),
                kind: "dockerlogger",
            });
        }
        let dst = root.join(rel);
        fsutil::rename_into(&src, &dst).map_err(io_err(&dst))?;
        if let Some(mode) = mode {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&dst, fs::Permissions::from_mode(mode)).map_err(io_err(&dst))?;
        }
        overlay.push(rel.to_string());
        if rel.ends_with(".xml") {
            smf.push(rel.to_string());
        }
    }
    let footprint = Footprint {
        image_uuid: Some(uuid),
        version: manifest.version.clone(),
        tree: None,
        overlay,
        links: Vec::new(),
        smf_manifests: smf,
        apm: false,
    };
    finish_overlay(component, manifest, footprint, None, &root, s.record_sha256)
}

/// Each bin of an apm package links to a file of the package and is
/// named after no command of the system ([`super::reserved`]): a link to
/// a missing file would be installed dangling, and one named `svcadm` or
/// `agentsadm` would run instead of it.
fn check_bins(pkg_dir: &Path, top: &str, pkg: &PackageJson) -> Result<(), LayoutError> {
    for (name, path) in &pkg.bin {
        let rel = super::super::package::clean_relative(path);
        let refuse = |reason: String| LayoutError::BadBin {
            name: name.clone(),
            target: format!("{top}/{rel}"),
            reason,
        };
        if let Some(command) = super::reserved::reserved_command(name) {
            return Err(refuse(format!(
                "it is named after the system command {command}"
            )));
        }
        // Followed: the unpacker left only links that resolve inside the
        // package (or nowhere).
        match fs::metadata(pkg_dir.join(&rel)) {
            Ok(md) if md.is_file() => {}
            Ok(_) => return Err(refuse("it names a directory, not a file".into())),
            Err(_) => return Err(refuse("the package has no such file".into())),
        }
    }
    Ok(())
}

/// agentsadm's own image (`make release`): `agentsadm/image_uuid` (the
/// manifest's UUID), `agentsadm/package.json` (name `agentsadm`, a valid
/// version) and the binary `agentsadm/bin/agentsadm`, a regular file (a
/// link could name any file on the server); everything in it is laid over
/// `opt/smartdc/agentsadm`, the binary made executable.
fn stage_agentsadm(
    component: &Component,
    manifest: &ImageManifest,
    txn_dir: &Path,
    record_sha256: &str,
) -> Result<StagedVersion, LayoutError> {
    let top = component.package_name();
    let pkg_dir = txn_dir.join("new").join(top);
    read_image_uuid(
        &pkg_dir,
        &format!("{top}/image_uuid"),
        "agentsadm",
        manifest.uuid,
        true,
    )?;
    let pkg = read_package(&pkg_dir, top, top, "agentsadm", true)?.expect("required package.json");
    if !super::valid_version(&pkg.version) {
        return Err(LayoutError::BadVersion {
            file: format!("{top}/package.json"),
            found: pkg.version.chars().take(80).collect(),
        });
    }
    let bin = pkg_dir.join("bin/agentsadm");
    if !fs::symlink_metadata(&bin).is_ok_and(|m| m.file_type().is_file()) {
        return Err(LayoutError::MissingFile {
            file: format!("{top}/bin/agentsadm (a regular file)"),
            kind: "agentsadm",
        });
    }
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).map_err(io_err(&bin))?;
    }
    let root = txn_dir.join("root");
    let dest = root.join(super::AGENTSADM_DIR);
    fsutil::rename_into(&pkg_dir, &dest).map_err(io_err(&dest))?;
    let overlay = overlay_files(&root).map_err(io_err(&root))?;
    let (link, target) = super::AGENTSADM_LINK;
    let footprint = Footprint {
        image_uuid: Some(manifest.uuid),
        version: manifest.version.clone(),
        tree: None,
        overlay,
        links: vec![Link {
            path: link.into(),
            target: target.into(),
        }],
        smf_manifests: Vec::new(),
        apm: false,
    };
    finish_overlay(component, manifest, footprint, None, &root, record_sha256)
}

/// The tree inside sdcadm's shar image.
const SDCADM_CONTENTS: &str = "contents.tgz";

/// Unpack sdcadm's `contents.tgz` (entries at its top level, checked like
/// any archive) and put the tree where the package was, so that
/// `<txn>/new/sdcadm` is the tree to swap in, as for every tree kind (crash
/// recovery reads an empty `<txn>/new` as "the tree has moved").
fn unpack_sdcadm_contents(
    pkg_dir: &Path,
    txn_dir: &Path,
    top: &str,
) -> Result<PathBuf, LayoutError> {
    let inner = pkg_dir.join(SDCADM_CONTENTS);
    let file = File::open(&inner).map_err(io_err(&inner))?;
    let tree = txn_dir.join("new-tree");
    fs::create_dir_all(&tree).map_err(io_err(&tree))?;
    let opts = UnpackOptions {
        single_top: false,
        ..Default::default()
    };
    unpack::unpack(
        file,
        agentsadm_types::image::Compression::Gzip,
        &tree,
        &opts,
    )
    .map_err(|err| LayoutError::Inner {
        file: format!("{top}/{SDCADM_CONTENTS}"),
        err,
    })?;
    fs::remove_dir_all(pkg_dir).map_err(io_err(pkg_dir))?;
    fs::rename(&tree, pkg_dir).map_err(io_err(pkg_dir))?;
    Ok(pkg_dir.to_path_buf())
}

/// Write the record into the overlay and complete the staged version.
fn finish_overlay(
    component: &Component,
    manifest: &ImageManifest,
    mut footprint: Footprint,
    tree_src: Option<PathBuf>,
    root: &Path,
    sha256: &str,
) -> Result<StagedVersion, LayoutError> {
    let rel = record_rel(&component.name);
    footprint.overlay.push(rel.clone());
    footprint.overlay.sort();
    footprint.overlay.dedup();
    // sdcadm's own version record, kept to tell a later self-update.
    let buildstamp = match (component.kind, &tree_src) {
        (ComponentKind::Sdcadm, Some(tree)) => fsutil::read_trimmed(&tree.join("etc/buildstamp"))
            .ok()
            .flatten(),
        _ => None,
    };
    let record = InstalledRecord {
        name: component.name.to_string(),
        kind: component.kind,
        image_uuid: manifest.uuid,
        version: manifest.version.clone(),
        sha256: sha256.to_string(),
        footprint: footprint.clone(),
        buildstamp,
    };
    let path = root.join(&rel);
    let mut text = serde_json::to_vec_pretty(&record).unwrap_or_default();
    text.push(b'\n');
    fs::create_dir_all(path.parent().unwrap_or(root)).map_err(io_err(root))?;
    fs::write(&path, text).map_err(io_err(&path))?;
    Ok(StagedVersion {
        footprint,
        tree_src,
        overlay_src: Some(root.to_path_buf()),
        package: None,
    })
}
