//! Carrying out a self-update plan: the image into the datacenter IMGAPI,
//! the install (or rollback) by the GZ installer on this headnode, then
//! what new servers get (SAPI's default image, the USB key's copy).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use agentsadm_api::SapiClient;
use agentsadm_api::remote::GzResult;
use agentsadm_api::sapi::{CreateService, ServiceType, Update, object};
use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::kinds::AGENTSADM_BIN;
use agentsadm_gz::session::Knob;
use agentsadm_plan::ImageRef;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::{ImageUuid, ServiceUuid};
use agentsadm_types::image::{ImageManifest, ImageState};

use super::{Action, Installed, Origin, SelfUpdateEnv, SelfUpdateError, SelfUpdatePlan, shown};

/// What a self-update did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Done {
    UpToDate,
    Updated,
    /// The image was installed already; only what new servers get was
    /// brought in line (if it was not).
    AlreadyInstalled,
    RolledBack,
}

/// The result of [`execute`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SelfUpdateOutcome {
    pub done: Done,
    pub from: Installed,
    pub to: Installed,
    /// Imported from the updates server or uploaded from the file.
    pub imported: bool,
    /// SAPI's `agentsadm` service now names `to`'s image (it did not).
    pub sapi_default_set: bool,
    /// The USB key's copy was replaced.
    pub usbkey_copy_refreshed: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl SelfUpdateOutcome {
    /// What was brought in line for new servers.
    fn refreshed(&self) -> Vec<&'static str> {
        [
            (self.imported, "the datacenter IMGAPI"),
            (self.sapi_default_set, "SAPI's default image"),
            (self.usbkey_copy_refreshed, "the USB key copy"),
        ]
        .into_iter()
        .filter_map(|(done, what)| done.then_some(what))
        .collect()
    }

    /// One line: what was done.
    pub fn line(&self) -> String {
        let (from, to) = (shown(&self.from.version), shown(&self.to.version));
        let image = self
            .to
            .image
            .map(|i| format!(" (image {i})"))
            .unwrap_or_default();
        match self.done {
            Done::UpToDate => {
                let refreshed = self.refreshed();
                if refreshed.is_empty() {
                    format!("agentsadm {from} is up to date.")
                } else {
                    format!(
                        "agentsadm {from} is up to date; brought in line for new servers: {}.",
                        refreshed.join(", ")
                    )
                }
            }
            Done::Updated => format!(
                "Updated agentsadm {from} to {to}{image}; the previous copy is kept for 'agentsadm self-update --rollback', and new servers get {to}."
            ),
            Done::AlreadyInstalled => {
                let refreshed = self.refreshed();
                let rest = if refreshed.is_empty() {
                    "new servers get it too; nothing to do".to_string()
                } else {
                    format!("brought in line for new servers: {}", refreshed.join(", "))
                };
                format!("agentsadm {to}{image} was already installed; {rest}.")
            }
            Done::RolledBack => {
                format!("Rolled agentsadm back from {from} to {to}{image}; new servers get {to}.")
            }
        }
    }
}

/// Carry out `plan` (made by [`super::plan`] with the same `env`).
pub async fn execute(
    env: &SelfUpdateEnv<'_>,
    plan: &SelfUpdatePlan,
) -> Result<SelfUpdateOutcome, SelfUpdateError> {
    let c = super::component(&env.settings)?;
    let mut outcome = SelfUpdateOutcome {
        done: Done::UpToDate,
        from: plan.current.clone(),
        to: plan.current.clone(),
        imported: false,
        sapi_default_set: false,
        usbkey_copy_refreshed: false,
        warnings: plan.notes.clone(),
    };
    match &plan.action {
        Action::UpToDate { .. } => {
            // What an interrupted run left to do: new servers get what is
            // installed here.
            up_to_date(env, &c, &mut outcome).await?;
        }
        Action::Install {
            image,
            origin,
            installed,
        } => {
            // The service first, so the install records its instance.
            let service = ensure_service(env.sapi, &c).await?;
            if let Origin::Updates { .. } = origin {
                outcome.imported = import(env, image).await?;
            }
            if *installed {
                outcome.done = Done::AlreadyInstalled;
            } else {
                let source = match origin {
                    Origin::File { file, manifest } => ImageSource::File {
                        file: file.clone(),
                        manifest: manifest.clone(),
                    },
                    _ => ImageSource::Imgapi(image.uuid),
                };
                let r = agentsadm_gz::install(env.settings.clone(), &[source]).await;
                outcome.warnings.extend(r.warnings.clone());
                failed("installing", &r)?;
                outcome.done = Done::Updated;
                agentsadm_gz::test_checkpoint(
                    env.settings.knob(Knob::CrashAt).as_deref(),
                    "self-update-installed",
                );
            }
            outcome.to = Installed {
                image: Some(image.uuid),
                version: image.version.clone(),
            };
            let finish = async {
                if let Origin::File { file, .. } = origin {
                    outcome.imported |= upload(env, image, file).await?;
                }
                outcome.sapi_default_set = set_default(env.sapi, service, image.uuid).await?;
                agentsadm_gz::test_checkpoint(
                    env.settings.knob(Knob::CrashAt).as_deref(),
                    "self-update-default-set",
                );
                outcome.usbkey_copy_refreshed = refresh_copy(&env.settings.root).await?;
                if *installed {
                    report_here(env).await?;
                }
                Ok::<_, SelfUpdateError>(())
            };
            finish.await.map_err(|err| SelfUpdateError::Unfinished {
                done: format!("agentsadm {} is installed on this headnode", image.version),
                err: Box::new(err),
            })?;
        }
        Action::Rollback { image, resumed, .. } => {
            let intent_file = super::rollback_intent_file(&env.settings);
            if let Some(before) = resumed {
                // Swapped by the killed run: never swap back.
                outcome.from = before.clone();
            } else {
                swap_back(env, &c, plan, *image, &mut outcome).await?;
            }
            outcome.done = Done::RolledBack;
            let to = outcome.to.clone();
            let finish = async {
                if let Some(image) = to.image {
                    let service = ensure_service(env.sapi, &c).await?;
                    outcome.sapi_default_set = set_default(env.sapi, service, image).await?;
                } else {
                    outcome.warnings.push(
                        "the restored copy has no image: SAPI's default image for new servers is left as it is".to_string(),
                    );
                }
                outcome.usbkey_copy_refreshed = refresh_copy(&env.settings.root).await?;
                Ok::<_, SelfUpdateError>(())
            };
            finish.await.map_err(|err| SelfUpdateError::Unfinished {
                done: format!("agentsadm {} is back on this headnode", shown(&to.version)),
                err: Box::new(err),
            })?;
            // Finished: a later --rollback is a new one.
            let _ = agentsadm_platform::blocking(move || std::fs::remove_file(intent_file)).await;
        }
    }
    Ok(outcome)
}

/// The rollback's swap, its intent written first: the kept copy back in
/// place (`gz rollback agentsadm`), what it restored in `outcome.to`.
async fn swap_back(
    env: &SelfUpdateEnv<'_>,
    c: &Component,
    plan: &SelfUpdatePlan,
    image: Option<ImageUuid>,
    outcome: &mut SelfUpdateOutcome,
) -> Result<(), SelfUpdateError> {
    let intent = super::RollbackIntent {
        from_image: plan.current.image,
        from_version: plan.current.version.clone(),
        to_image: image,
    };
    write_intent(&super::rollback_intent_file(&env.settings), &intent).await?;
    let r = agentsadm_gz::rollback(env.settings.clone(), &c.name).await;
    outcome.warnings.extend(r.warnings.clone());
    failed("rolling back", &r)?;
    agentsadm_gz::test_checkpoint(
        env.settings.knob(Knob::CrashAt).as_deref(),
        "self-update-rolled-back",
    );
    let restored = r.components.first();
    outcome.to = Installed {
        image: restored.and_then(|r| r.image_uuid),
        version: restored
            .and_then(|r| r.version.as_ref())
            .map(ToString::to_string)
            .unwrap_or_default(),
    };
    Ok(())
}

/// Write the rollback's intent (atomic, fsynced) before its swap.
async fn write_intent(file: &Path, intent: &super::RollbackIntent) -> Result<(), SelfUpdateError> {
    let text = serde_json::to_vec_pretty(intent).unwrap_or_default();
    let file = file.to_path_buf();
    agentsadm_platform::blocking(move || {
        agentsadm_gz::fsutil::write_atomic(&file, &text).map_err(|err| SelfUpdateError::Io {
            what: "record the rollback's intent in",
            path: file,
            err,
        })
    })
    .await
}

/// Nothing newer to install: make sure new servers get the installed
/// image (when the datacenter IMGAPI has it) and binary.
async fn up_to_date(
    env: &SelfUpdateEnv<'_>,
    c: &Component,
    outcome: &mut SelfUpdateOutcome,
) -> Result<(), SelfUpdateError> {
    if let Some(image) = outcome.to.image {
        match env.dc.get_image(image).await {
            Ok(_) => {
                let service = ensure_service(env.sapi, c).await?;
                outcome.sapi_default_set = set_default(env.sapi, service, image).await?;
            }
            Err(e) if e.is_not_found() => outcome.warnings.push(format!(
                "the installed agentsadm image {image} is not in the datacenter IMGAPI {}, so new servers cannot get it: run 'agentsadm self-update' with its file",
                env.dc.base_url()
            )),
            Err(err) => {
                return Err(SelfUpdateError::List {
                    source_label: env.dc.base_url().to_string(),
                    err: Box::new(err),
                });
            }
        }
    }
    outcome.usbkey_copy_refreshed = refresh_copy(&env.settings.root).await?;
    report_here(env).await
}

/// Post this server's installed set to CNAPI (`server.agents`): after a
/// run killed between the install and its report, CNAPI still lists the
/// copy that was replaced.
async fn report_here(env: &SelfUpdateEnv<'_>) -> Result<(), SelfUpdateError> {
    if env.settings.no_cnapi {
        return Ok(());
    }
    let session = agentsadm_gz::session::GzSession::open(env.settings.clone(), false)
        .await
        .map_err(SelfUpdateError::local)?;
    let report = session.report().await;
    session
        .post(&report)
        .await
        .map_err(|err| SelfUpdateError::Cnapi {
            server: session.server(),
            err: Box::new(err),
        })
}

/// The installer's failure, if the run failed.
fn failed(what: &'static str, r: &GzResult) -> Result<(), SelfUpdateError> {
    match &r.error {
        None => Ok(()),
        Some(f) => Err(SelfUpdateError::Install {
            what,
            step: f.step.clone(),
            message: f.message.clone(),
        }),
    }
}

/// An updates-server image into the datacenter IMGAPI (unless it has it).
async fn import(env: &SelfUpdateEnv<'_>, image: &ImageManifest) -> Result<bool, SelfUpdateError> {
    let image_ref = ImageRef {
        uuid: image.uuid,
        name: image.name.clone(),
        version: image.version.clone(),
        import_from: env.updates.map(|u| u.source_url()),
    };
    let n = agentsadm_orchestrate::images::import(env.dc, &[image_ref])
        .await
        .map_err(|err| SelfUpdateError::Import { err })?;
    Ok(n > 0)
}

/// A file's image into the datacenter IMGAPI (unless it has it): the
/// manifest, the file (IMGAPI checks its sha1), activation.
async fn upload(
    env: &SelfUpdateEnv<'_>,
    image: &ImageManifest,
    file: &Path,
) -> Result<bool, SelfUpdateError> {
    let url = env.dc.base_url().to_string();
    let err = |err| SelfUpdateError::Upload {
        image: image.uuid,
        url: url.clone(),
        err: Box::new(err),
    };
    // A run killed mid-upload left the image unactivated (with or without
    // its file): this one finishes the upload rather than taking the
    // image for there, which would give new servers an image they cannot
    // fetch.
    let there = match env.dc.get_image(image.uuid).await {
        Ok(m) if m.state == ImageState::Active => return Ok(false),
        Ok(m) => Some(m),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(err(e)),
    };
    let Some(entry) = image.file().cloned() else {
        return Err(SelfUpdateError::File {
            file: file.display().to_string(),
            err: agentsadm_gz::fetch::FetchError::NoFile {
                uuid: image.uuid,
                name: image.name.clone(),
            },
        });
    };
    let crash_at = env.settings.knob(Knob::CrashAt);
    if there.is_none() {
        let mut manifest = image.clone();
        manifest.files = Vec::new();
        manifest.channels = None;
        env.dc.import_manifest(&manifest).await.map_err(err)?;
        agentsadm_gz::test_checkpoint(crash_at.as_deref(), "self-update-upload-manifest");
    }
    if there.is_none_or(|m| m.files.is_empty()) {
        let bytes = tokio::fs::read(file)
            .await
            .map_err(|err| SelfUpdateError::ReadFile {
                path: file.to_path_buf(),
                err,
            })?;
        env.dc
            .add_image_file(image.uuid, entry.compression, &entry.sha1, bytes.into())
            .await
            .map_err(err)?;
        agentsadm_gz::test_checkpoint(crash_at.as_deref(), "self-update-upload-file");
    }
    env.dc.activate_image(image.uuid).await.map_err(err)?;
    Ok(true)
}

/// The SAPI agent service `agentsadm`, created (without a default image)
/// when the datacenter has none yet.
async fn ensure_service(sapi: &SapiClient, c: &Component) -> Result<ServiceUuid, SelfUpdateError> {
    let sapi_err = |what: &str| {
        let what = what.to_string();
        move |err| SelfUpdateError::Sapi {
            what,
            err: Box::new(err),
        }
    };
    let services = sapi
        .list_services(Some(&c.name), None, Some(ServiceType::Agent))
        .await
        .map_err(sapi_err("look up the agent service agentsadm"))?;
    if let Some(s) = services.into_iter().find(|s| s.name == c.name) {
        return Ok(s.uuid);
    }
    // Not in `sdc`: sdcadm takes every agent service there for its own.
    let app = sapi
        .application_for(&c.name)
        .await
        .map_err(sapi_err("find the SAPI application for agentsadm"))?
        .ok_or(SelfUpdateError::NoSdcApplication)?;
    let create = CreateService {
        name: c.name.to_string(),
        application_uuid: app.uuid,
        service_type: Some(ServiceType::Agent),
        params: Some(object([(
            "tags",
            serde_json::json!({"smartdc_role": c.name, "smartdc_type": "core"}),
        )])),
        metadata: Some(object([(
            "SERVICE_NAME",
            Value::String(c.name.to_string()),
        )])),
        manifests: Some(object(Vec::<(String, Value)>::new())),
        uuid: None,
    };
    let created = sapi
        .create_service(&create)
        .await
        .map_err(sapi_err("create the agent service agentsadm"))?;
    Ok(created.uuid)
}

/// SAPI's default image for new servers; whether it changed.
async fn set_default(
    sapi: &SapiClient,
    service: ServiceUuid,
    image: ImageUuid,
) -> Result<bool, SelfUpdateError> {
    let sapi_err = |err| SelfUpdateError::Sapi {
        what: "set the default image of the agent service agentsadm".to_string(),
        err: Box::new(err),
    };
    let now = sapi.get_service(service).await.map_err(sapi_err)?;
    if now.image_uuid() == Some(image) {
        return Ok(false);
    }
    let update = Update::params(object([("image_uuid", Value::String(image.to_string()))]));
    sapi.update_service(service, &update)
        .await
        .map_err(sapi_err)?;
    Ok(true)
}

/// Make `<root>/usbkey/extra/agentsadm/agentsadm` the installed binary:
/// written beside it, synced, renamed over it (a CN setup fetching it
/// meanwhile gets the old or the new one, whole). Whether it changed.
async fn refresh_copy(root: &Path) -> Result<bool, SelfUpdateError> {
    let src = root.join(AGENTSADM_BIN);
    let dst = root.join(super::USBKEY_COPY);
    agentsadm_platform::blocking(move || {
        let copy_err = |err| SelfUpdateError::UsbkeyCopy {
            path: dst.clone(),
            err,
        };
        let bytes = std::fs::read(&src).map_err(copy_err)?;
        if std::fs::read(&dst).is_ok_and(|old| old == bytes) {
            return Ok(false);
        }
        write_executable(&dst, &bytes).map_err(copy_err)?;
        Ok(true)
    })
    .await
}

fn write_executable(dst: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = dst
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".agentsadm.{:08x}.new", rand_suffix()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dst)?;
        agentsadm_gz::fsutil::fsync_dir(&dir)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A name no other run uses at the same time.
fn rand_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id()
}
