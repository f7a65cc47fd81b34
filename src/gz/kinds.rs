//! What each component kind puts on disk (its *footprint*), how a staged
//! package is checked and turned into one, and how the installed version of
//! each kind is recorded and read back.
//!
//! | kind | footprint | version / image record | instance UUID |
//! |---|---|---|---|
//! | apm agent | `opt/smartdc/agents/lib/node_modules/<pkg>/` (whole tree), bins in `opt/smartdc/agents/bin`, SMF manifests generated into `opt/smartdc/agents/smf` | `<pkg>/package.json` and `<pkg>/image_uuid` in the tree (Triton's) | `opt/smartdc/agents/etc/<pkg>` (Triton's) |
//! | sdcadm (a shar of `contents.tgz`, or a package directory) | `opt/smartdc/sdcadm/` (whole tree), links `opt/smartdc/bin/sdcadm`, `opt/smartdc/man/man1/sdcadm.1`, its SMF manifests copied to `var/svc/manifest/site` | record `.agentsadm/installed/sdcadm.json`; else the tree's `image_uuid`, `etc/buildstamp`, `package.json` | `opt/smartdc/agents/etc/sdcadm` |
//! | gz-tools | the files of `tools.tar.gz` (headnode) or `cn_tools.tar.gz` laid over `opt/smartdc` | record `.agentsadm/installed/gz-tools.json`; else Triton's `opt/smartdc/etc/gz-tools.image` (image only) | `opt/smartdc/agents/etc/gz-tools` |
//! | dockerlogger (a shar; its `install.sh` is never run) | `opt/smartdc/docker/bin/{dockerlogger,dockerlogger-setup.sh}`, `var/svc/manifest/site/dockerlogger.xml` | record `.agentsadm/installed/dockerlogger.json` (Triton keeps none on the node) | `opt/smartdc/docker/etc/dockerlogger.uuid` (Triton's) |
//!
//! The record of a non-apm kind lists its files, links and manifests, so an
//! upgrade removes files the new version no longer has and `gz remove` knows
//! exactly what to delete. The record is itself one of the footprint's
//! files, so a rollback restores the old record with the old files.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::catalog::{Component, ComponentKind};
use crate::ids::ImageUuid;
use crate::image::ImageManifest;

use super::fsutil;
use super::package::{PackageError, PackageJson};
use super::paths::GzPaths;
use super::unpack::{self, UnpackOptions};

/// A symbolic link a component owns (root-relative path, literal target).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Link {
    pub path: String,
    pub target: String,
}

/// Everything one installed version of a component occupies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_uuid: Option<ImageUuid>,
    #[serde(default)]
    pub version: String,
    /// A directory swapped as a whole (root-relative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    /// Files laid over the root (root-relative), including the record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlay: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    /// SMF manifests (root-relative) imported for this version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub smf_manifests: Vec<String>,
    /// apm: manifests are generated from `smf/manifests/*.xml.in`, hooks run.
    #[serde(default)]
    pub apm: bool,
}

/// The record kept for non-apm kinds (`.agentsadm/installed/<name>.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledRecord {
    pub name: String,
    pub kind: ComponentKind,
    pub image_uuid: ImageUuid,
    pub version: String,
    #[serde(default)]
    pub sha256: String,
    pub footprint: Footprint,
}

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

/// The record file of a non-apm component, root-relative.
pub fn record_rel(component: &str) -> String {
    format!("{}/installed/{component}.json", super::paths::STATE_DIR)
}

/// The instance UUID file of a component, root-relative.
pub fn instance_rel(component: &Component) -> String {
    match component.kind {
        ComponentKind::ApmAgent => format!("opt/smartdc/agents/etc/{}", component.package_name()),
        ComponentKind::Dockerlogger => "opt/smartdc/docker/etc/dockerlogger.uuid".to_string(),
        ComponentKind::GzTools | ComponentKind::Sdcadm => {
            format!("opt/smartdc/agents/etc/{}", component.name)
        }
    }
}

/// A checked, staged new version: its footprint and where its files wait.
#[derive(Clone, Debug)]
pub struct StagedVersion {
    pub footprint: Footprint,
    /// The staged tree for `footprint.tree` (`<txn>/new/<top>`).
    pub tree_src: Option<PathBuf>,
    /// The staged overlay root (`<txn>/root`), holding `footprint.overlay`.
    pub overlay_src: Option<PathBuf>,
    /// apm: the package.json of the staged tree.
    pub package: Option<PackageJson>,
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
            found: p.name,
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
    let top = component.package_name();
    let pkg_dir = txn_dir.join("new").join(top);
    let uuid = manifest.uuid;
    let kind_name = component.kind.as_str();
    let id_file = format!("{top}/image_uuid");
    match component.kind {
        ComponentKind::ApmAgent => {
            read_image_uuid(&pkg_dir, &id_file, "apm agent", uuid, true)?;
            let pkg = read_package(&pkg_dir, top, top, "apm agent", true)?
                .expect("required package.json");
            let dest = format!("opt/smartdc/agents/lib/node_modules/{top}");
            let links = pkg
                .bin
                .iter()
                .map(|(name, path)| Link {
                    path: format!("opt/smartdc/agents/bin/{name}"),
                    target: format!(
                        "../lib/node_modules/{top}/{}",
                        super::package::clean_relative(path)
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
                    version: if pkg.version.is_empty() {
                        manifest.version.clone()
                    } else {
                        pkg.version.clone()
                    },
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
        ComponentKind::Sdcadm => {
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
                    if name.ends_with(".xml") && e.file_type().map(|t| t.is_file()).unwrap_or(false)
                    {
                        let rel = format!("{}/{name}", super::paths::SITE_MANIFESTS);
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
                record_sha256,
            )
        }
        ComponentKind::GzTools => {
            read_image_uuid(&pkg_dir, &id_file, kind_name, uuid, false)?;
            let inner = if headnode {
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
            unpack::unpack(file, crate::image::Compression::Gzip, &dest, &opts).map_err(|err| {
                LayoutError::Inner {
                    file: format!("{top}/{inner}"),
                    err,
                }
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
            finish_overlay(component, manifest, footprint, None, &root, record_sha256)
        }
        ComponentKind::Dockerlogger => {
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
                    fs::set_permissions(&dst, fs::Permissions::from_mode(mode))
                        .map_err(io_err(&dst))?;
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
            finish_overlay(component, manifest, footprint, None, &root, record_sha256)
        }
    }
}

/// sdcadm's configuration file, root-relative.
pub const SDCADM_CONF: &str = "var/sdcadm/sdcadm.conf";

/// Why sdcadm's configuration was not updated after an install.
#[derive(Debug, thiserror::Error)]
pub enum SdcadmConfError {
    #[error("{path} is not a JSON object; left as it is")]
    NotAnObject { path: PathBuf },
    #[error("cannot update {path}")]
    Io {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

/// Record the headnode's UUID as `serverUuid` in sdcadm's configuration,
/// as sdcadm's own installer does (so sdcadm need not ask sysinfo on every
/// run), keeping every other setting. Returns whether the file changed.
/// The file is configuration, not part of the component: an upgrade or
/// removal never takes it away.
pub fn record_sdcadm_server(
    conf: &Path,
    server: crate::ids::ServerUuid,
) -> Result<bool, SdcadmConfError> {
    let io_err = |err| SdcadmConfError::Io {
        path: conf.to_path_buf(),
        err,
    };
    let mut obj = match fs::read(conf) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => serde_json::Map::new(),
        Ok(bytes) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => {
                return Err(SdcadmConfError::NotAnObject {
                    path: conf.to_path_buf(),
                });
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => serde_json::Map::new(),
        Err(e) => return Err(io_err(e)),
    };
    let want = serde_json::Value::String(server.to_string());
    if obj.get("serverUuid") == Some(&want) {
        return Ok(false);
    }
    obj.insert("serverUuid".to_string(), want);
    let mut text = serde_json::to_vec_pretty(&obj).unwrap_or_default();
    text.push(b'\n');
    fsutil::write_atomic(conf, &text).map_err(io_err)?;
    Ok(true)
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
    unpack::unpack(file, crate::image::Compression::Gzip, &tree, &opts).map_err(|err| {
        LayoutError::Inner {
            file: format!("{top}/{SDCADM_CONTENTS}"),
            err,
        }
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
    let record = InstalledRecord {
        name: component.name.clone(),
        kind: component.kind,
        image_uuid: manifest.uuid,
        version: manifest.version.clone(),
        sha256: sha256.to_string(),
        footprint: footprint.clone(),
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

/// Every non-directory under `root`, root-relative, sorted.
pub fn overlay_files(root: &Path) -> io::Result<Vec<String>> {
    if !root.exists() {
        return Ok(Vec::new());
    }
    Ok(unpack::list_tree(root)?
        .into_iter()
        .filter(|p| !p.ends_with('/'))
        .collect())
}

/// For an apm package directory: each `smf/manifests/<x>.xml.in` and the
/// manifest it generates, `opt/smartdc/agents/smf/<x>.xml` (root-relative).
pub fn template_outputs(pkg_dir: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    let dir = pkg_dir.join("smf/manifests");
    let mut out = Vec::new();
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in rd {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".xml.in")
            && !stem.is_empty()
            && !stem.contains('/')
        {
            out.push((e.path(), format!("opt/smartdc/agents/smf/{stem}.xml")));
        }
    }
    out.sort();
    Ok(out)
}

/// apm's token substitution for a manifest template (what agent
/// postinstalls do with `subfile`): `@@PREFIX@@`, `@@VERSION@@`, `@@ROOT@@`,
/// `@@ENABLED@@` (always `true`, as for an agent's main service).
pub fn render_template(text: &str, prefix: &Path, version: &str, root_dir: &Path) -> String {
    text.replace("@@PREFIX@@", &prefix.to_string_lossy())
        .replace("@@VERSION@@", version)
        .replace("@@ROOT@@", &root_dir.to_string_lossy())
        .replace("@@ENABLED@@", "true")
}

/// What is installed now for `component`, if anything.
pub fn current(paths: &GzPaths, component: &Component) -> Result<Option<Footprint>, CurrentError> {
    match component.kind {
        ComponentKind::ApmAgent => {
            let pkg = component.package_name();
            let dir = paths.node_modules().join(pkg);
            if !dir.is_dir() {
                return Ok(None);
            }
            let image = fsutil::read_trimmed(&dir.join("image_uuid"))
                .ok()
                .flatten()
                .and_then(|s| s.parse().ok());
            let package = PackageJson::read(&dir).ok().flatten();
            let links = package
                .as_ref()
                .map(|p| {
                    p.bin
                        .iter()
                        .map(|(name, path)| Link {
                            path: format!("opt/smartdc/agents/bin/{name}"),
                            target: format!(
                                "../lib/node_modules/{pkg}/{}",
                                super::package::clean_relative(path)
                            ),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let smf_manifests = template_outputs(&dir)
                .unwrap_or_default()
                .into_iter()
                .map(|(_, o)| o)
                .collect();
            Ok(Some(Footprint {
                image_uuid: image,
                version: package.map(|p| p.version).unwrap_or_default(),
                tree: Some(paths.rel(&dir)),
                overlay: Vec::new(),
                links,
                smf_manifests,
                apm: true,
            }))
        }
        _ => {
            if let Some(rec) = read_record(paths, &component.name)? {
                return Ok(Some(rec.footprint));
            }
            // Installed by Triton's own tools: what we can tell without a record.
            match component.kind {
                ComponentKind::Sdcadm => {
                    let dir = paths.at("opt/smartdc/sdcadm");
                    if !dir.is_dir() {
                        return Ok(None);
                    }
                    let image = fsutil::read_trimmed(&dir.join("image_uuid"))
                        .ok()
                        .flatten()
                        .and_then(|s| s.parse().ok());
                    let version = fsutil::read_trimmed(&dir.join("etc/buildstamp"))
                        .ok()
                        .flatten()
                        .or_else(|| PackageJson::read(&dir).ok().flatten().map(|p| p.version))
                        .unwrap_or_default();
                    let mut links = Vec::new();
                    for (p, t) in [
                        ("opt/smartdc/bin/sdcadm", "../sdcadm/bin/sdcadm"),
                        (
                            "opt/smartdc/man/man1/sdcadm.1",
                            "../../sdcadm/man/man1/sdcadm.1",
                        ),
                    ] {
                        if fsutil::exists(&paths.at(p)) {
                            links.push(Link {
                                path: p.into(),
                                target: t.into(),
                            });
                        }
                    }
                    let mut overlay = Vec::new();
                    let site = "var/svc/manifest/site/sdcadm-setup.xml";
                    if paths.at(site).exists() {
                        overlay.push(site.to_string());
                    }
                    Ok(Some(Footprint {
                        image_uuid: image,
                        version,
                        tree: Some("opt/smartdc/sdcadm".into()),
                        smf_manifests: overlay.clone(),
                        overlay,
                        links,
                        apm: false,
                    }))
                }
                ComponentKind::GzTools => {
                    let marker = paths.at("opt/smartdc/etc/gz-tools.image");
                    let image = fsutil::read_trimmed(&marker).ok().flatten();
                    Ok(image.map(|i| Footprint {
                        image_uuid: i.parse().ok(),
                        ..Default::default()
                    }))
                }
                ComponentKind::Dockerlogger => {
                    let bin = paths.at("opt/smartdc/docker/bin/dockerlogger");
                    Ok(bin.exists().then(Footprint::default))
                }
                ComponentKind::ApmAgent => Ok(None),
            }
        }
    }
}

/// A record that exists but cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("the install record {path} is unreadable; remove it and reinstall the component")]
pub struct CurrentError {
    pub path: PathBuf,
    #[source]
    pub err: io::Error,
}

/// Read `.agentsadm/installed/<name>.json`.
pub fn read_record(paths: &GzPaths, name: &str) -> Result<Option<InstalledRecord>, CurrentError> {
    let path = paths.at(record_rel(name));
    match fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| CurrentError {
                path,
                err: io::Error::new(io::ErrorKind::InvalidData, e),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(CurrentError { path, err }),
    }
}

/// All files a transaction touches in the overlay: the old version's and
/// the new one's.
pub fn overlay_union(old: Option<&Footprint>, new: Option<&Footprint>) -> Vec<String> {
    let mut set = BTreeSet::new();
    for f in [old, new].into_iter().flatten() {
        set.extend(f.overlay.iter().cloned());
    }
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::imagebuild::{ImageSpec, build};

    fn staged(
        name: &str,
        headnode: bool,
    ) -> (tempfile::TempDir, Result<StagedVersion, LayoutError>) {
        let cat = Catalog::builtin();
        let c = cat.get(name).unwrap();
        let img = build(&ImageSpec::for_component(c, "1.0.0"));
        let d = tempfile::tempdir().unwrap();
        let new = d.path().join("new");
        fs::create_dir_all(&new).unwrap();
        unpack::unpack(
            &img.file[..],
            img.manifest.files[0].compression,
            &new,
            &UnpackOptions {
                expected_top: Some(c.package_name().to_string()),
                ..Default::default()
            },
        )
        .unwrap();
        let r = stage(c, &img.manifest, d.path(), headnode, "abc");
        (d, r)
    }

    #[test]
    fn every_kind_stages() {
        let (_d, r) = staged("vm-agent", false);
        let v = r.unwrap();
        assert_eq!(
            v.footprint.tree.as_deref(),
            Some("opt/smartdc/agents/lib/node_modules/vm-agent")
        );
        assert_eq!(v.footprint.links[0].path, "opt/smartdc/agents/bin/vm-agent");
        assert_eq!(
            v.footprint.smf_manifests,
            vec!["opt/smartdc/agents/smf/vm-agent.xml"]
        );
        let (_d, r) = staged("gz-tools", true);
        let v = r.unwrap();
        assert!(
            v.footprint
                .overlay
                .contains(&"opt/smartdc/bin/sdc-server".to_string())
        );
        assert!(v.footprint.overlay.contains(&record_rel("gz-tools")));
        let (_d, r) = staged("gz-tools", false);
        assert!(
            !r.unwrap()
                .footprint
                .overlay
                .contains(&"opt/smartdc/bin/sdc-server".to_string())
        );
        let (_d, r) = staged("dockerlogger", false);
        let v = r.unwrap();
        assert!(
            v.footprint
                .overlay
                .contains(&"opt/smartdc/docker/bin/dockerlogger".to_string())
        );
        assert_eq!(
            v.footprint.smf_manifests,
            vec!["var/svc/manifest/site/dockerlogger.xml"]
        );
        let (_d, r) = staged("sdcadm", true);
        let v = r.unwrap();
        assert_eq!(v.footprint.tree.as_deref(), Some("opt/smartdc/sdcadm"));
        assert_eq!(v.footprint.links.len(), 2);
    }
}
