//! The mockcloud layout (docs/triton/agent-install.md §4): one directory per
//! mock server, `<root>/servers/<uuid>/`, with `sysinfo.json` and
//! `agents/<name>/{image_uuid,package.json,instance_uuid}`.
//!
//! Installing keeps only `image_uuid` and `package.json` from the image (read
//! from the verified stream into memory, nothing else touches the disk) and
//! keeps or creates `instance_uuid`; there are no hooks and no SMF. It must
//! be cheap: the simulator runs thousands of these.
//!
//! The swap is still atomic per agent: the new directory is written under
//! `.agentsadm/staging/`, the old one is moved to `.agentsadm/swap/<name>`,
//! the new one renamed into place; the next run restores a `swap/` entry
//! whose agent directory is missing, or keeps it as `previous/<name>`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::api::ImgapiClient;
use crate::api::cnapi::AgentEntry;
use crate::catalog::{Component, ComponentKind};
use crate::ids::{ImageUuid, InstanceUuid, ServerUuid};
use crate::remote::{AgentsReport, ComponentAction, ReportError};

use super::adopt::{self, AdoptError, Adoption};
use super::fetch::{self, FetchError, FetchOptions, ResolvedImage};
use super::fsutil;
use super::package::PackageJson;
use super::txn::SapiTarget;

/// The `package.json` a gz-tools install records (its image has none).
fn gz_tools_package_json(name: &str, version: &str) -> Vec<u8> {
    let mut text =
        serde_json::to_vec_pretty(&serde_json::json!({"name": name, "version": version}))
            .unwrap_or_default();
    text.push(b'\n');
    text
}

/// One mock server's directory.
#[derive(Clone, Debug)]
pub struct MockServer {
    dir: PathBuf,
}

/// A mockcloud operation that failed (nothing changed for the component).
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("image {uuid} has no {file}; agent images carry it")]
    MissingMember { uuid: ImageUuid, file: String },
    #[error("image {uuid}: {file} says {found:?}, expected {expected:?}")]
    Mismatch {
        uuid: ImageUuid,
        file: String,
        found: String,
        expected: String,
    },
    #[error("{path} holds {content:?}, which is not a UUID; fix or remove it")]
    InstanceCorrupt { path: PathBuf, content: String },
    #[error("cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error("SAPI adoption failed")]
    Sapi {
        #[source]
        err: AdoptError,
    },
    #[error("{name} has no previous version to roll back to")]
    NoPrevious { name: String },
}

impl MockError {
    pub fn step(&self) -> &'static str {
        match self {
            MockError::Fetch(e) => e.step(),
            MockError::MissingMember { .. } | MockError::Mismatch { .. } => "validate",
            MockError::InstanceCorrupt { .. } => "instance",
            MockError::Io { .. } => "swap",
            MockError::Sapi { .. } => "sapi",
            MockError::NoPrevious { .. } => "rollback",
        }
    }
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MockError {
    let path = path.to_path_buf();
    move |err| MockError::Io { action, path, err }
}

/// What an operation did.
#[derive(Clone, Debug)]
pub struct MockOutcome {
    pub action: ComponentAction,
    pub from_image: Option<ImageUuid>,
    pub image_uuid: Option<ImageUuid>,
    pub version: Option<String>,
    pub instance: Option<InstanceUuid>,
    pub adoption: Option<Adoption>,
}

impl MockServer {
    /// `<root>/servers/<server>`.
    pub fn new(root: &Path, server: ServerUuid) -> MockServer {
        MockServer {
            dir: root.join("servers").join(server.to_string()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn agents_dir(&self) -> PathBuf {
        self.dir.join("agents")
    }
    fn state(&self) -> PathBuf {
        self.dir.join(".agentsadm")
    }
    pub fn lock_file(&self) -> PathBuf {
        self.state().join("lock")
    }
    fn swap_dir(&self) -> PathBuf {
        self.state().join("swap")
    }
    fn previous_dir(&self) -> PathBuf {
        self.state().join("previous")
    }
    fn staging_dir(&self) -> PathBuf {
        self.state().join("staging")
    }

    /// Finish or undo swaps a killed run left behind (under the lock).
    pub fn recover(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Ok(rd) = fs::read_dir(self.swap_dir()) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let live = self.agents_dir().join(&name);
                if fsutil::exists(&live) {
                    let prev = self.previous_dir().join(&name);
                    let _ = fsutil::remove_any(&prev);
                    let _ = fsutil::rename_into(&e.path(), &prev);
                    notes.push(format!("{name}: finished an interrupted install"));
                } else {
                    let _ = fsutil::rename_into(&e.path(), &live);
                    notes.push(format!("{name}: undid an interrupted install"));
                }
            }
        }
        let _ = fsutil::remove_any(&self.staging_dir());
        notes
    }

    fn current(&self, package: &str) -> Option<ImageUuid> {
        fsutil::read_trimmed(&self.agents_dir().join(package).join("image_uuid"))
            .ok()
            .flatten()
            .and_then(|s| s.parse().ok())
    }

    fn instance(&self, package: &str) -> Result<Option<InstanceUuid>, MockError> {
        let path = self.agents_dir().join(package).join("instance_uuid");
        match fsutil::read_trimmed(&path).map_err(io_err("read", &path))? {
            None => Ok(None),
            Some(s) if s.is_empty() => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|_| MockError::InstanceCorrupt {
                path,
                content: s.chars().take(80).collect(),
            }),
        }
    }

    /// Install `image` (already resolved and checked) for `component`.
    pub async fn install(
        &self,
        component: &Component,
        image: &ResolvedImage,
        imgapi: Option<&ImgapiClient>,
        options: &FetchOptions,
        sapi: Option<SapiTarget<'_>>,
        force: bool,
    ) -> Result<MockOutcome, MockError> {
        let pkg = component.package_name();
        let uuid = image.uuid();
        let from = self.current(pkg);
        let kept = self.instance(pkg)?;
        if from == Some(uuid) && !force {
            let instance = match kept {
                Some(i) => i,
                None => {
                    let i = InstanceUuid::new_v4();
                    let p = self.agents_dir().join(pkg).join("instance_uuid");
                    fsutil::write_atomic(&p, format!("{i}\n").as_bytes())
                        .map_err(io_err("write", &p))?;
                    i
                }
            };
            let adoption = self.adopt(component, instance, uuid, sapi).await?;
            return Ok(MockOutcome {
                action: ComponentAction::Unchanged,
                from_image: from,
                image_uuid: Some(uuid),
                version: Some(image.manifest.version.clone()),
                instance: Some(instance),
                adoption,
            });
        }
        let (members, _digests) =
            fetch::fetch_members(image, imgapi, pkg, &["image_uuid", "package.json"], options)
                .await?;
        let missing = |file: &str| MockError::MissingMember {
            uuid,
            file: format!("{pkg}/{file}"),
        };
        // dockerlogger and sdcadm images are shell archives with no
        // image_uuid (sdcadm's package.json is inside its contents.tgz): the
        // sha1-checked manifest speaks for them, as for gz-tools' version.
        let from_manifest = matches!(
            component.kind,
            ComponentKind::Dockerlogger | ComponentKind::Sdcadm
        );
        let manifest_id = format!("{uuid}\n").into_bytes();
        let id = match members.get("image_uuid") {
            Some(id) => id,
            None if from_manifest => &manifest_id,
            None => return Err(missing("image_uuid")),
        };
        let id_text = String::from_utf8_lossy(id).trim().to_string();
        if id_text.parse::<ImageUuid>().ok() != Some(uuid) {
            return Err(MockError::Mismatch {
                uuid,
                file: format!("{pkg}/image_uuid"),
                found: id_text,
                expected: uuid.to_string(),
            });
        }
        // gz-tools images carry no package.json (the image's version is
        // theirs), nor do the shars; the layout needs one, so it is written
        // from the manifest.
        let synthesized;
        let pj_bytes = match members.get("package.json") {
            Some(b) => b,
            None if component.kind == ComponentKind::GzTools || from_manifest => {
                synthesized = gz_tools_package_json(pkg, &image.manifest.version);
                &synthesized
            }
            None => return Err(missing("package.json")),
        };
        let pj = PackageJson::parse(pj_bytes).map_err(|e| MockError::Mismatch {
            uuid,
            file: format!("{pkg}/package.json"),
            found: crate::error::error_chain(&e),
            expected: "a valid package.json".into(),
        })?;
        if pj.name != pkg {
            return Err(MockError::Mismatch {
                uuid,
                file: format!("{pkg}/package.json name"),
                found: pj.name,
                expected: pkg.to_string(),
            });
        }
        let instance = kept.unwrap_or_else(InstanceUuid::new_v4);
        let staging = self
            .staging_dir()
            .join(format!("{pkg}.{:08x}", rand::random::<u32>()));
        fs::create_dir_all(&staging).map_err(io_err("create", &staging))?;
        for (name, data) in [
            ("image_uuid", id.as_slice()),
            ("package.json", pj_bytes.as_slice()),
            ("instance_uuid", format!("{instance}\n").as_bytes()),
        ] {
            let p = staging.join(name);
            fs::write(&p, data).map_err(io_err("write", &p))?;
        }
        let swapped = self.swap_in(pkg, &staging)?;
        match self.adopt(component, instance, uuid, sapi).await {
            Ok(adoption) => {
                self.commit(pkg, swapped);
                Ok(MockOutcome {
                    action: if from.is_some() {
                        ComponentAction::Upgraded
                    } else {
                        ComponentAction::Installed
                    },
                    from_image: from,
                    image_uuid: Some(uuid),
                    version: Some(pj.version),
                    instance: Some(instance),
                    adoption,
                })
            }
            Err(e) => {
                self.undo(pkg, swapped);
                Err(e)
            }
        }
    }

    /// Move the live directory aside (if any) and `staging` into place.
    fn swap_in(&self, pkg: &str, staging: &Path) -> Result<bool, MockError> {
        let live = self.agents_dir().join(pkg);
        let aside = self.swap_dir().join(pkg);
        let _ = fsutil::remove_any(&aside);
        let had = fsutil::exists(&live);
        if had {
            fsutil::rename_into(&live, &aside).map_err(io_err("move aside", &live))?;
        }
        if let Err(e) = fsutil::rename_into(staging, &live) {
            if had {
                let _ = fs::rename(&aside, &live);
            }
            let _ = fsutil::remove_any(staging);
            return Err(io_err("move into place", &live)(e));
        }
        Ok(had)
    }

    fn commit(&self, pkg: &str, had_old: bool) {
        let prev = self.previous_dir().join(pkg);
        if had_old {
            let _ = fsutil::remove_any(&prev);
            let _ = fsutil::rename_into(&self.swap_dir().join(pkg), &prev);
        }
    }

    fn undo(&self, pkg: &str, had_old: bool) {
        let live = self.agents_dir().join(pkg);
        let _ = fsutil::remove_any(&live);
        if had_old {
            let _ = fsutil::rename_into(&self.swap_dir().join(pkg), &live);
        }
    }

    async fn adopt(
        &self,
        component: &Component,
        instance: InstanceUuid,
        image: ImageUuid,
        sapi: Option<SapiTarget<'_>>,
    ) -> Result<Option<Adoption>, MockError> {
        match sapi {
            None => Ok(None),
            Some(s) => adopt::adopt(s.client, &component.name, instance, s.server, image)
                .await
                .map(Some)
                .map_err(|err| MockError::Sapi { err }),
        }
    }

    /// Remove `component` (its whole directory, instance UUID included, as
    /// the dummy backend does) and its SAPI instance.
    pub async fn remove(
        &self,
        component: &Component,
        sapi: Option<SapiTarget<'_>>,
    ) -> Result<MockOutcome, MockError> {
        let pkg = component.package_name();
        let live = self.agents_dir().join(pkg);
        if !fsutil::exists(&live) {
            return Ok(MockOutcome {
                action: ComponentAction::Absent,
                from_image: None,
                image_uuid: None,
                version: None,
                instance: None,
                adoption: None,
            });
        }
        let from = self.current(pkg);
        let instance = self.instance(pkg).ok().flatten();
        let aside = self.swap_dir().join(pkg);
        let _ = fsutil::remove_any(&aside);
        fsutil::rename_into(&live, &aside).map_err(io_err("move aside", &live))?;
        if let (Some(s), Some(i)) = (sapi, instance)
            && let Err(err) = adopt::forget(s.client, &component.name, i).await
        {
            let _ = fs::rename(&aside, &live);
            return Err(MockError::Sapi { err });
        }
        let _ = fsutil::remove_any(&aside);
        let _ = fsutil::remove_any(&self.previous_dir().join(pkg));
        Ok(MockOutcome {
            action: ComponentAction::Removed,
            from_image: from,
            image_uuid: None,
            version: None,
            instance,
            adoption: None,
        })
    }

    /// Put back the version replaced by the last upgrade.
    pub async fn rollback(
        &self,
        component: &Component,
        sapi: Option<SapiTarget<'_>>,
    ) -> Result<MockOutcome, MockError> {
        let pkg = component.package_name();
        let prev = self.previous_dir().join(pkg);
        if !prev.is_dir() {
            return Err(MockError::NoPrevious {
                name: component.name.clone(),
            });
        }
        let from = self.current(pkg);
        let staging = self
            .staging_dir()
            .join(format!("{pkg}.{:08x}", rand::random::<u32>()));
        fsutil::rename_into(&prev, &staging).map_err(io_err("stage", &prev))?;
        let image = fsutil::read_trimmed(&staging.join("image_uuid"))
            .ok()
            .flatten()
            .and_then(|s| s.parse::<ImageUuid>().ok());
        let version = PackageJson::read(&staging)
            .ok()
            .flatten()
            .map(|p| p.version);
        // Keep the current instance UUID (it is the identity).
        if let Ok(Some(i)) = self.instance(pkg) {
            let _ = fs::write(staging.join("instance_uuid"), format!("{i}\n"));
        }
        let instance = fsutil::read_trimmed(&staging.join("instance_uuid"))
            .ok()
            .flatten()
            .and_then(|s| s.parse::<InstanceUuid>().ok());
        let swapped = self.swap_in(pkg, &staging)?;
        let adoption = match (instance, image) {
            (Some(i), Some(img)) => match self.adopt(component, i, img, sapi).await {
                Ok(a) => a,
                Err(e) => {
                    self.undo(pkg, swapped);
                    return Err(e);
                }
            },
            _ => None,
        };
        self.commit(pkg, swapped);
        Ok(MockOutcome {
            action: ComponentAction::RolledBack,
            from_image: from,
            image_uuid: image,
            version,
            instance,
            adoption,
        })
    }

    /// `agents/*` as `server.agents` (entry named after `package.json` name,
    /// else the directory, like the dummy backend).
    pub fn report(&self, server: ServerUuid) -> AgentsReport {
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
                        message: crate::error::error_chain(&e),
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
            agents.push(AgentEntry {
                name: pkg.as_ref().map(|p| p.name.clone()).unwrap_or(name),
                version: pkg.map(|p| p.version).unwrap_or_default(),
                image_uuid: image,
                uuid,
            });
        }
        agents.sort();
        AgentsReport {
            server_uuid: server,
            agents,
            errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::gz::fetch::ImageSource;
    use crate::imagebuild::{ImageSpec, build};

    /// gz-tools images carry no package.json; the layout records one from
    /// the manifest, so the component installs and reports like the rest.
    #[tokio::test]
    async fn gz_tools_installs_without_a_package_json() {
        let cat = Catalog::builtin();
        let c = cat.get("gz-tools").unwrap();
        let img = build(&ImageSpec::for_component(c, "1.0.0"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("img.file");
        let manifest = dir.path().join("img.manifest");
        fs::write(&file, &img.file).unwrap();
        fs::write(&manifest, serde_json::to_vec(&img.manifest).unwrap()).unwrap();
        let source = ImageSource::File { file, manifest };
        let resolved = fetch::resolve(&source, None).await.unwrap();
        let server = ServerUuid::from_u128(9);
        let m = MockServer::new(&dir.path().join("mc"), server);
        let out = m
            .install(c, &resolved, None, &FetchOptions::default(), None, false)
            .await
            .unwrap();
        assert_eq!(out.action, ComponentAction::Installed);
        assert_eq!(out.version.as_deref(), Some(img.manifest.version.as_str()));
        let report = m.report(server);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.agents.len(), 1);
        assert_eq!(report.agents[0].name, "gz-tools");
        assert_eq!(report.agents[0].version, img.manifest.version);
        assert_eq!(report.agents[0].image_uuid, Some(img.manifest.uuid));
    }
}
