//! What each component kind puts on disk (its *footprint*), how a staged
//! package is checked and turned into one, and how the installed version of
//! each kind is recorded and read back.
//!
//! | kind | footprint | version / image record | instance UUID |
//! |---|---|---|---|
//! | apm agent | `opt/smartdc/agents/lib/node_modules/<pkg>/` (whole tree), bins in `opt/smartdc/agents/bin`, SMF manifests its postinstall renders into `opt/smartdc/agents/smf` | `<pkg>/package.json` and `<pkg>/image_uuid` in the tree (Triton's) | `opt/smartdc/agents/etc/<pkg>` (Triton's) |
//! | sdcadm (a shar of `contents.tgz`, or a package directory) | `opt/smartdc/sdcadm/` (whole tree), links `opt/smartdc/bin/sdcadm`, `opt/smartdc/man/man1/sdcadm.1`, its SMF manifests copied to `var/svc/manifest/site` | record `.agentsadm/installed/sdcadm.json`; else the tree's `image_uuid`, `etc/buildstamp`, `package.json` | `opt/smartdc/agents/etc/sdcadm` |
//! | gz-tools | the files of `tools.tar.gz` (headnode) or `cn_tools.tar.gz` laid over `opt/smartdc` | record `.agentsadm/installed/gz-tools.json`; else Triton's `opt/smartdc/etc/gz-tools.image` (image only) | `opt/smartdc/agents/etc/gz-tools` |
//! | dockerlogger (a shar; its `install.sh` is never run) | `opt/smartdc/docker/bin/{dockerlogger,dockerlogger-setup.sh}`, `var/svc/manifest/site/dockerlogger.xml` | record `.agentsadm/installed/dockerlogger.json` (Triton keeps none on the node) | `opt/smartdc/docker/etc/dockerlogger.uuid` (Triton's) |
//! | agentsadm (`make release`: `agentsadm/{bin/agentsadm,package.json,image_uuid,etc/buildstamp}`) | the package's files laid over `opt/smartdc/agentsadm` (never under `opt/smartdc/agents`), link `opt/smartdc/bin/agentsadm` | record `.agentsadm/installed/agentsadm.json`; else (a copy CN setup fetched alone) the directory's `image_uuid` and `package.json` | `opt/smartdc/agents/etc/agentsadm` |
//!
//! agentsadm's files are an overlay, not a tree swapped as a whole: the
//! transaction replaces a file both versions have with one rename over it
//! and keeps the old one by a hard link ([`super::txn`]), so
//! `opt/smartdc/agentsadm/bin/agentsadm`, the binary this very install may
//! be running from and the one every later command on the server needs,
//! is never missing nor written in place, whenever the run is killed.
//!
//! The record of a non-apm kind lists its files, links and manifests, so an
//! upgrade removes files the new version no longer has and `gz remove` knows
//! exactly what to delete. The record is itself one of the footprint's
//! files, so a rollback restores the old record with the old files.
//!
//! - `stage`: a staged package checked against its image and
//!   turned into a footprint (with the record of the non-apm kinds);
//! - `installed`: what is installed now, read back;
//! - [`claims`]: the bins, SMF manifests and services a version claims,
//!   and the rule that it claims only its own;
//! - [`reserved`]: the names a bin may not take (agentsadm, the system's
//!   commands);
//! - here: the types, where records and instance UUIDs live, the helpers
//!   both use, and sdcadm's configuration.

pub mod claims;
mod installed;
pub mod reserved;
mod stage;

pub use installed::{CurrentError, current, read_record};
pub use stage::{LayoutError, stage};

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use agentsadm_types::catalog::Component;

use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;

use super::fsutil;
use super::package::PackageJson;
use super::unpack;

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
    /// apm: hooks run; the postinstall renders `smf/manifests/*.xml.in`.
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
    /// sdcadm's `etc/buildstamp` as installed: another one on disk means
    /// `sdcadm self-update` replaced it ([`installed::current`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buildstamp: Option<String>,
}

/// agentsadm's directory, root-relative.
pub const AGENTSADM_DIR: &str = "opt/smartdc/agentsadm";
/// agentsadm's binary, root-relative: what the orchestrator runs on every
/// server ([`agentsadm_api::remote::GZ_BINARY`] on a real GZ).
pub const AGENTSADM_BIN: &str = "opt/smartdc/agentsadm/bin/agentsadm";
/// The link operators run it by (`/opt/smartdc/bin` is in the GZ's PATH),
/// and its target.
pub const AGENTSADM_LINK: (&str, &str) =
    ("opt/smartdc/bin/agentsadm", "../agentsadm/bin/agentsadm");

/// The record file of a non-apm component, root-relative.
pub fn record_rel(component: &ComponentName) -> String {
    format!("{}/installed/{component}.json", super::paths::STATE_DIR)
}

/// The instance UUID file of a component, root-relative.
pub fn instance_rel(component: &Component) -> String {
    match component.kind {
        ComponentKind::ApmAgent => format!("opt/smartdc/agents/etc/{}", component.package_name()),
        ComponentKind::Dockerlogger => "opt/smartdc/docker/etc/dockerlogger.uuid".to_string(),
        ComponentKind::GzTools | ComponentKind::Sdcadm | ComponentKind::Agentsadm => {
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
    server: agentsadm_types::ids::ServerUuid,
) -> Result<bool, SdcadmConfError> {
    let io_err = |err| SdcadmConfError::Io {
        path: conf.to_path_buf(),
        err,
    };
    let mut obj = match crate::fsutil::read_small(conf) {
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

/// Whether `v` is a version a package may carry
/// ([`ComponentVersion::is_plain`]).
pub fn valid_version(v: &str) -> bool {
    ComponentVersion::new(v).is_ok_and(|v| v.is_plain())
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
