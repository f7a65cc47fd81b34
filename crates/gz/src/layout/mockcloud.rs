//! The mockcloud layout (docs/triton/agent-install.md §4): one directory
//! per mock server, `<root>/servers/<uuid>/`, with `sysinfo.json` and
//! `agents/<package>/{image_uuid,package.json,instance_uuid}`.
//!
//! Staging keeps only `image_uuid` and `package.json` from the image (read
//! from the verified stream into memory; only those two files touch the
//! disk), and the transaction writes the kept or new `instance_uuid` into
//! the staged directory, since the instance file lives in the tree. There
//! are no hooks and no SMF. It must stay cheap: the simulator runs
//! thousands of these.
//!
//! agentsadm's state is `<server>/.agentsadm/` (lock, journal, staging,
//! trash); an upgrade keeps the replaced directory as
//! `.agentsadm/previous/<component>/` for `gz rollback`.

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::ReportError;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::Component;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

use super::super::fetch;
use super::super::fsutil;
use super::super::kinds::CurrentError;
use super::super::kinds::Footprint;
use super::super::kinds::StagedVersion;
use super::super::package::PackageJson;
use super::super::paths::GzPaths;
use super::super::step::Step;
use super::KeptForm;
use super::KeptVersion;
use super::Layout;
use super::LayoutKind;
use super::StageError;
use super::StageRequest;

/// agentsadm's state directory, relative to the server's directory.
const STATE_DIR: &str = ".agentsadm";
/// The agents directory, relative to the server's directory.
const AGENTS_DIR: &str = "agents";

/// A staged image that is not what its manifest says (nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum MockcloudError {
    #[error("image {uuid} has no {file}; agent images carry it")]
    MissingMember { uuid: ImageUuid, file: String },
    #[error("image {uuid}: {file} says {found:?}, expected {expected:?}")]
    Mismatch {
        uuid: ImageUuid,
        file: String,
        found: String,
        expected: String,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

impl MockcloudError {
    pub fn step(&self) -> Step {
        match self {
            MockcloudError::MissingMember { .. } | MockcloudError::Mismatch { .. } => {
                Step::Validate
            }
            MockcloudError::Write { .. } => Step::Swap,
        }
    }
}

/// One mock server's directory.
#[derive(Clone, Debug)]
pub struct MockcloudGz {
    paths: GzPaths,
}

impl MockcloudGz {
    /// The server `server` of the mockcloud tree at `root`
    /// (`<root>/servers/<server>`).
    pub fn new(root: &Path, server: ServerUuid) -> MockcloudGz {
        MockcloudGz {
            paths: GzPaths::with_state_dir(
                root.join("servers").join(server.to_string()),
                STATE_DIR,
            ),
        }
    }

    /// `<root>/servers/<server>`.
    pub fn dir(&self) -> &Path {
        self.paths.root()
    }

    pub fn agents_dir(&self) -> PathBuf {
        self.paths.at(AGENTS_DIR)
    }

    /// `agents/<package>`, root-relative.
    fn tree_rel(component: &Component) -> String {
        format!("{AGENTS_DIR}/{}", component.package_name())
    }

    /// The footprint of an agent directory (`agents/<package>` or a kept
    /// copy of one).
    fn footprint_of(dir: &Path, tree: String) -> Footprint {
        Footprint {
            image_uuid: fsutil::read_trimmed(&dir.join("image_uuid"))
                .ok()
                .flatten()
                .and_then(|s| s.parse().ok()),
            version: PackageJson::read(dir)
                .ok()
                .flatten()
                .map(|p| p.version)
                .unwrap_or_default(),
            tree: Some(tree),
            ..Footprint::default()
        }
    }
}

/// The `package.json` a gz-tools install records (its image has none).
fn gz_tools_package_json(name: &str, version: &str) -> Vec<u8> {
    let mut text =
        serde_json::to_vec_pretty(&serde_json::json!({"name": name, "version": version}))
            .unwrap_or_default();
    text.push(b'\n');
    text
}

impl Layout for MockcloudGz {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Mockcloud
    }

    fn paths(&self) -> &GzPaths {
        &self.paths
    }

    fn runs_services(&self) -> bool {
        false
    }

    fn kept_form(&self) -> KeptForm {
        KeptForm::TreeOnly
    }

    fn instance_rel(&self, component: &Component) -> String {
        format!("{}/instance_uuid", Self::tree_rel(component))
    }

    fn current(&self, component: &Component) -> Result<Option<Footprint>, CurrentError> {
        let tree = Self::tree_rel(component);
        let dir = self.paths.at(&tree);
        if !fsutil::exists(&dir) {
            return Ok(None);
        }
        Ok(Some(Self::footprint_of(&dir, tree)))
    }

    fn kept(&self, component: &Component) -> Option<KeptVersion> {
        let dir = self.paths.previous_dir().join(&component.name);
        if !dir.is_dir() {
            return None;
        }
        Some(KeptVersion {
            footprint: Self::footprint_of(&dir, Self::tree_rel(component)),
            tree: Some(dir),
            root: None,
        })
    }

    fn stage<'a>(
        &'a self,
        request: StageRequest<'a>,
    ) -> BoxFuture<'a, Result<StagedVersion, StageError>> {
        Box::pin(async move {
            let component = request.component;
            let image = request.image;
            let pkg = component.package_name();
            let uuid = image.uuid();
            let (members, _digests) = fetch::fetch_members(
                image,
                request.imgapi,
                pkg,
                &["image_uuid", "package.json"],
                request.fetch,
            )
            .await?;
            let missing = |file: &str| MockcloudError::MissingMember {
                uuid,
                file: format!("{pkg}/{file}"),
            };
            // dockerlogger and sdcadm images are shell archives with no
            // image_uuid (sdcadm's package.json is inside its contents.tgz):
            // the sha1-checked manifest speaks for them, as for gz-tools'
            // version.
            let from_manifest = matches!(
                component.kind,
                ComponentKind::Dockerlogger | ComponentKind::Sdcadm
            );
            let id = match members.get("image_uuid") {
                Some(id) => id.clone(),
                None if from_manifest => format!("{uuid}\n").into_bytes(),
                None => return Err(missing("image_uuid").into()),
            };
            let id_text = String::from_utf8_lossy(&id).trim().to_string();
            if id_text.parse::<ImageUuid>().ok() != Some(uuid) {
                return Err(MockcloudError::Mismatch {
                    uuid,
                    file: format!("{pkg}/image_uuid"),
                    found: id_text,
                    expected: uuid.to_string(),
                }
                .into());
            }
            // gz-tools images carry no package.json (the image's version is
            // theirs), nor do the shars; the layout needs one, so it is
            // written from the manifest.
            let package_json = match members.get("package.json") {
                Some(b) => b.clone(),
                None if component.kind == ComponentKind::GzTools || from_manifest => {
                    gz_tools_package_json(pkg, &image.manifest.version)
                }
                None => return Err(missing("package.json").into()),
            };
            let pj = PackageJson::parse(&package_json).map_err(|e| MockcloudError::Mismatch {
                uuid,
                file: format!("{pkg}/package.json"),
                found: agentsadm_types::error::error_chain(&e),
                expected: "a valid package.json".into(),
            })?;
            if *pkg != pj.name {
                return Err(MockcloudError::Mismatch {
                    uuid,
                    file: format!("{pkg}/package.json name"),
                    found: pj.name.to_string(),
                    expected: pkg.to_string(),
                }
                .into());
            }
            let tree_src = request.txn_dir.join("new").join(pkg);
            let dir = tree_src.clone();
            blocking(move || {
                fs::create_dir_all(&dir).map_err(|err| MockcloudError::Write {
                    path: dir.clone(),
                    err,
                })?;
                for (name, data) in [("image_uuid", &id), ("package.json", &package_json)] {
                    let path = dir.join(name);
                    fs::write(&path, data).map_err(|err| MockcloudError::Write { path, err })?;
                }
                Ok::<_, MockcloudError>(())
            })
            .await?;
            Ok(StagedVersion {
                footprint: Footprint {
                    image_uuid: Some(uuid),
                    version: pj.version,
                    tree: Some(Self::tree_rel(component)),
                    ..Footprint::default()
                },
                tree_src: Some(tree_src),
                overlay_src: None,
                package: None,
            })
        })
    }

    /// `agents/*` as `server.agents` (entry named after `package.json` name,
    /// else the directory, like the dummy backend).
    fn report(&self, _catalog: &Catalog, server: ServerUuid) -> AgentsReport {
        let mut agents = Vec::new();
        let mut errors = Vec::new();
        let dir = self.agents_dir();
        let mut names: Vec<String> = fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        for name in names {
            let d = dir.join(&name);
            let pkg = match PackageJson::read(&d) {
                Ok(p) => p,
                Err(e) => {
                    errors.push(ReportError {
                        name: name.clone(),
                        message: agentsadm_types::error::error_chain(&e),
                    });
                    continue;
                }
            };
            let image = fsutil::read_trimmed(&d.join("image_uuid"))
                .ok()
                .flatten()
                .and_then(|s| s.parse().ok());
            if image.is_none() {
                errors.push(ReportError {
                    name: name.clone(),
                    message: "no valid image_uuid".into(),
                });
                continue;
            }
            let uuid = fsutil::read_trimmed(&d.join("instance_uuid"))
                .ok()
                .flatten()
                .and_then(|s| s.parse().ok());
            let entry = pkg
                .as_ref()
                .map_or(name.as_str(), |p| p.name.as_str())
                .parse::<ComponentName>()
                .map_err(|e| e.to_string())
                .and_then(|name| {
                    let version = pkg.map(|p| p.version).unwrap_or_default();
                    ComponentVersion::new(version)
                        .map(|version| (name, version))
                        .map_err(|e| e.to_string())
                });
            match entry {
                Ok((name, version)) => agents.push(AgentEntry {
                    name,
                    version,
                    image_uuid: image,
                    uuid,
                }),
                Err(message) => errors.push(ReportError { name, message }),
            }
        }
        agents.sort();
        AgentsReport {
            server_uuid: server,
            agents,
            errors,
            services_off: Vec::new(),
        }
    }
}
