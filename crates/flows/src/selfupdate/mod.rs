//! `agentsadm self-update`: agentsadm updates its own copy on the
//! headnode, as `sdcadm self-update` does for sdcadm
//! (docs/triton/sdcadm.md §3.3), and what new servers get with it.
//!
//! Plan first ([`plan`], reads only), then [`execute`]:
//! 1. what is installed: this server must be the headnode; its agentsadm
//!    (the installer's record, else the running binary's own version);
//! 2. the target: `--latest`, the newest newer build in the updates
//!    server's channel within the installed major version ([`choose`]); an
//!    image named by UUID or version (the datacenter IMGAPI, then the
//!    updates server); or an image file beside its manifest. An explicit
//!    image that is older, or of another major version, is refused without
//!    `--allow-downgrade` / `--allow-major-update`;
//! 3. the install: an updates-server image is first imported into the
//!    datacenter IMGAPI (so every server can get it), then installed here
//!    by the GZ installer like any component: verified (size, sha1,
//!    layout), journaled, its files renamed into place with the previous
//!    copy kept (the binary running this command is never written; killed
//!    at any point, the old or the new binary is there and runs). A file is
//!    installed from the file, then uploaded into the datacenter IMGAPI;
//! 4. what new servers get: the SAPI `agentsadm` service's
//!    `params.image_uuid` (what CN setup's `gz setup --source imgapi`
//!    installs) and `/usbkey/extra/agentsadm/agentsadm`, the binary
//!    `installer/agentsetup.sh` fetches from the assets zone, renamed into
//!    place. These are checked on every run, so a run interrupted after the
//!    install finishes them when repeated, and one whose image is already
//!    installed only brings them in line.
//!
//! `--rollback` puts back the copy the last self-update (or upgrade)
//! replaced (`gz rollback agentsadm`), and points step 4 at it.
//!
//! Planning changes nothing (`-n` stops there), except that, as every
//! agentsadm run on a server, it first finishes or undoes a transaction a
//! killed run left. The test checkpoint `self-update-installed` (after the
//! install, before step 4) joins the installer's.

pub mod choose;
mod execute;
mod held;

use std::path::PathBuf;

use serde::Serialize;

use agentsadm_api::ApiError;
use agentsadm_api::ImgapiClient;
use agentsadm_api::SapiClient;
use agentsadm_gz::fetch::{FetchError, ImageSource};
use agentsadm_gz::layout::Layout;
use agentsadm_gz::session::{GzError, GzSession, GzSettings};
use agentsadm_orchestrate::images::{self, FindImageError, ImageSources};
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::{ImageUuid, ServerUuid};
use agentsadm_types::image::ImageManifest;

pub use choose::{LatestChoice, Refusal, VersionKey, check_explicit, choose_latest};
pub use execute::{Done, SelfUpdateOutcome, execute};

/// The copy CN setup fetches, root-relative (`/usbkey/extra` is what the
/// assets zone serves as `/extra`).
pub const USBKEY_COPY: &str = "usbkey/extra/agentsadm/agentsadm";

/// What to update to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The newest newer build in the updates server's channel.
    Latest,
    /// An image UUID, a UUID prefix or a version.
    Image(String),
    /// An image file (or its manifest), the other beside it.
    File(PathBuf),
    /// The copy the last upgrade replaced.
    Rollback,
}

/// The flags that lift a refusal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allow {
    pub major_update: bool,
    pub downgrade: bool,
    /// Move agentsadm though `agentsadm hold` holds it.
    pub ignore_holds: bool,
}

/// Where a self-update runs and what it talks to.
#[derive(Clone, Debug)]
pub struct SelfUpdateEnv<'a> {
    /// The headnode's GZ (`/`, or a rooted directory), with SAPI and CNAPI
    /// so the install adopts and reports itself.
    pub settings: GzSettings,
    pub dc: &'a ImgapiClient,
    /// With its channel set; `None`: look nowhere but the datacenter.
    pub updates: Option<&'a ImgapiClient>,
    pub sapi: &'a SapiClient,
    /// The version of the binary running this (when nothing is recorded
    /// about the installed copy, that is what runs here).
    pub running_version: &'a str,
}

/// The installed agentsadm, as this server reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Installed {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageUuid>,
    /// Empty when unknown (a copy set up without its image).
    pub version: String,
}

/// Where the target image comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Origin {
    Dc {
        url: String,
    },
    Updates {
        url: String,
        channel: Option<String>,
    },
    File {
        file: PathBuf,
        manifest: PathBuf,
    },
}

impl Origin {
    fn describe(&self) -> String {
        match self {
            Origin::Dc { url } => format!("the datacenter IMGAPI {url}"),
            Origin::Updates {
                url,
                channel: Some(c),
            } => format!("channel {c} of the updates server {url}"),
            Origin::Updates { url, channel: None } => format!("the updates server {url}"),
            Origin::File { file, .. } => file.display().to_string(),
        }
    }
}

/// What [`execute`] will do.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum Action {
    /// `--latest` found nothing newer.
    UpToDate { looked_in: String },
    /// Install `image` (unless `installed`), then make it what new
    /// servers get.
    Install {
        image: Box<ImageManifest>,
        origin: Origin,
        installed: bool,
    },
    /// Put the kept copy back.
    Rollback {
        #[serde(skip_serializing_if = "Option::is_none")]
        image: Option<ImageUuid>,
        version: String,
        /// A rollback killed after its swap: the copy is back already;
        /// only what new servers get is left to finish (from `resumed`,
        /// the version rolled back from). Never rolled back again.
        #[serde(skip_serializing_if = "Option::is_none")]
        resumed: Option<Installed>,
    },
}

/// A `self-update --rollback` under way: written before the swap, removed
/// once new servers get the restored copy, so that the same command run
/// again after a kill finishes it instead of swapping back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub(crate) struct RollbackIntent {
    pub from_image: Option<ImageUuid>,
    pub from_version: String,
    pub to_image: Option<ImageUuid>,
}

/// The intent's file, in the installer's state directory.
pub(crate) fn rollback_intent_file(settings: &GzSettings) -> PathBuf {
    use agentsadm_gz::layout::Layout;
    agentsadm_gz::layout::triton::TritonGz::new(settings.root.clone())
        .paths()
        .state_dir()
        .join("self-update-rollback.json")
}

/// The plan of one self-update.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelfUpdatePlan {
    pub server: ServerUuid,
    /// The headnode's hostname (empty when sysinfo does not say).
    pub hostname: String,
    pub current: Installed,
    #[serde(flatten)]
    pub action: Action,
    /// For the operator (a major version left out, ...).
    pub notes: Vec<String>,
    /// The copy CN setup fetches.
    pub usbkey_copy: PathBuf,
}

impl SelfUpdatePlan {
    /// One line: what the plan would do (`-n`).
    pub fn describe(&self) -> String {
        let from = shown(&self.current.version);
        let copy = self.usbkey_copy.display();
        match &self.action {
            Action::UpToDate { looked_in } => format!(
                "agentsadm {from} is up to date: nothing newer in {looked_in}; would make sure new servers get it (SAPI service agentsadm, {copy})."
            ),
            Action::Install {
                image,
                installed: true,
                ..
            } => format!(
                "agentsadm {} (image {}) is installed; would make sure new servers get it (SAPI service agentsadm, {copy}).",
                image.version, image.uuid
            ),
            Action::Install { image, origin, .. } => format!(
                "Would update agentsadm {from} to {} (image {}, from {}), keep the previous copy for --rollback, and give new servers the new one (SAPI service agentsadm, {copy}).",
                image.version,
                image.uuid,
                origin.describe()
            ),
            Action::Rollback {
                version,
                resumed: Some(before),
                ..
            } => format!(
                "agentsadm was rolled back from {} to {} by an interrupted run; would finish it: give new servers that one (SAPI service agentsadm, {copy}).",
                shown(&before.version),
                shown(version)
            ),
            Action::Rollback { version, .. } => format!(
                "Would roll agentsadm back from {from} to {}, and give new servers that one (SAPI service agentsadm, {copy}).",
                shown(version)
            ),
        }
    }
}

/// A version as lines show it (a bare copy has none recorded).
fn shown(version: &str) -> &str {
    if version.is_empty() {
        "(version unknown)"
    } else {
        version
    }
}

impl SelfUpdateError {
    /// The installer could not open its session here: a root that is no
    /// global zone gets self-update's own hint.
    pub(crate) fn local(err: GzError) -> SelfUpdateError {
        match err {
            GzError::Platform { root, err } => SelfUpdateError::NotAGlobalZone { root, err },
            err => SelfUpdateError::Local { err },
        }
    }
}

/// Why a self-update was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SelfUpdateError {
    #[error("cannot read this server's agentsadm")]
    Local {
        #[source]
        err: GzError,
    },
    /// The `gz` commands' hint (`--server-uuid`) is not self-update's:
    /// it has no such option, and runs only in a headnode's global zone.
    #[error(
        "self-update runs in a headnode's global zone, and {root} is not one (run it on the headnode)"
    )]
    NotAGlobalZone {
        root: std::path::PathBuf,
        #[source]
        err: agentsadm_platform::PlatformError,
    },
    #[error(
        "self-update runs on the headnode, and {hostname} is not one; update agentsadm on other servers with 'agentsadm update agentsadm -s {hostname}'"
    )]
    NotHeadnode { hostname: String },
    #[error("the component catalog has no agentsadm; use the built-in catalog")]
    NotInCatalog,
    #[error("cannot list agentsadm images in {source_label}")]
    List {
        source_label: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error("cannot find the agentsadm image {spec:?}")]
    Find {
        spec: String,
        #[source]
        err: FindImageError,
    },
    #[error(
        "image {image} is in neither the datacenter IMGAPI nor the updates server; 'agentsadm avail agentsadm' lists images"
    )]
    NotFound { image: ImageUuid },
    #[error("cannot read the image {file}")]
    File {
        file: String,
        #[source]
        err: FetchError,
    },
    #[error(
        "image {image} is {name} (type {image_type}), not an agentsadm image; pass an agentsadm image"
    )]
    WrongImage {
        image: ImageUuid,
        name: String,
        image_type: String,
    },
    #[error(
        "agentsadm {to} is older than the installed {from}; pass --allow-downgrade to install it anyway"
    )]
    Downgrade { from: String, to: String },
    #[error(
        "agentsadm {to} is another major version than the installed {from}; pass --allow-major-update to install it"
    )]
    MajorChange { from: String, to: String },
    #[error(
        "no previous agentsadm is kept on this server (nothing has replaced the installed copy yet)"
    )]
    NothingKept,
    #[error(
        "agentsadm is held {} {}; self-update leaves a held agentsadm where it is: 'agentsadm release agentsadm' lets it move, or pass --ignore-holds to move it anyway",
        .scope.as_str(),
        .mark.describe()
    )]
    Held {
        scope: agentsadm_plan::HoldScope,
        mark: agentsadm_plan::Mark,
    },
    #[error("cannot import agentsadm into the datacenter IMGAPI")]
    Import {
        #[source]
        err: images::ImageError,
    },
    #[error("cannot upload agentsadm {image} into the datacenter IMGAPI {url}")]
    Upload {
        image: ImageUuid,
        url: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error(
        "{what} agentsadm on this headnode failed ({step}: {message}); the copy that was installed is still in place"
    )]
    Install {
        what: &'static str,
        step: agentsadm_api::remote::FailureStep,
        message: String,
    },
    #[error("cannot read {path}")]
    ReadFile {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error(
        "SAPI has no sdc application to add the agentsadm service to; is this datacenter set up?"
    )]
    NoSdcApplication,
    #[error("cannot {what} in SAPI")]
    Sapi {
        what: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error("cannot report what server {server} has installed to CNAPI")]
    Cnapi {
        server: ServerUuid,
        #[source]
        err: Box<ApiError>,
    },
    #[error("cannot refresh {path}, the agentsadm CN setup fetches")]
    UsbkeyCopy {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("cannot {what} {path}; nothing was rolled back")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("{done}, but new servers do not get it yet; run the same command again to finish")]
    Unfinished {
        done: String,
        #[source]
        err: Box<SelfUpdateError>,
    },
}

/// The catalog's agentsadm entry.
fn component(settings: &GzSettings) -> Result<Component, SelfUpdateError> {
    settings
        .catalog
        .get(agentsadm_gz::release::NAME)
        .cloned()
        .ok_or(SelfUpdateError::NotInCatalog)
}

/// Decide what a self-update does (reads only: the local GZ, IMGAPI, the
/// updates server, the image file).
pub async fn plan(
    env: &SelfUpdateEnv<'_>,
    target: &Target,
    allow: Allow,
) -> Result<SelfUpdatePlan, SelfUpdateError> {
    let c = component(&env.settings)?;
    // Locked, as every run on a server: a transaction an earlier run left
    // (a killed self-update) is finished or undone before anything is
    // read. The lock is let go before `execute`, whose install takes it.
    let session = GzSession::open(env.settings.clone(), true)
        .await
        .map_err(SelfUpdateError::local)?;
    let hostname = session.sysinfo().await.map(|s| s.hostname).ok();
    if !session.headnode() {
        let hostname = hostname.unwrap_or_else(|| session.server().to_string());
        return Err(SelfUpdateError::NotHeadnode { hostname });
    }
    let report = session.report().await;
    let current = report
        .agents
        .iter()
        .find(|a| a.name == c.name)
        .map(|a| Installed {
            image: a.image_uuid,
            version: a.version.to_string(),
        })
        .unwrap_or(Installed {
            image: None,
            version: String::new(),
        });
    // A copy with no recorded version is, as far as anyone can tell, the
    // binary running this.
    let (current_key, from) = match VersionKey::of(&current.version) {
        Some(k) => (Some(k), current.version.clone()),
        None => (
            VersionKey::of(env.running_version),
            format!("{} (the running binary)", env.running_version),
        ),
    };
    let mut notes = Vec::new();
    let action = match target {
        Target::Rollback => rollback_action(&env.settings, &c, &current).await?,
        Target::Latest => latest_action(env, current_key.as_ref(), allow, &mut notes).await?,
        Target::Image(spec) => {
            let (image, origin) = find(env, &c, spec).await?;
            explicit_action(
                &current,
                (current_key.as_ref(), &from),
                image,
                origin,
                allow,
            )?
        }
        Target::File(path) => {
            let (image, origin) = from_file(path).await?;
            explicit_action(
                &current,
                (current_key.as_ref(), &from),
                image,
                origin,
                allow,
            )?
        }
    };
    // A hold leaves the installed copy where it is; what only finishes an
    // interrupted run, or brings new servers in line, moves nothing.
    let moves = matches!(
        action,
        Action::Install {
            installed: false,
            ..
        } | Action::Rollback { resumed: None, .. }
    );
    if moves
        && !allow.ignore_holds
        && let Some((scope, mark)) = held::hold_on(env.sapi, session.server()).await?
    {
        return Err(SelfUpdateError::Held { scope, mark });
    }
    Ok(SelfUpdatePlan {
        server: session.server(),
        hostname: hostname.unwrap_or_default(),
        current,
        action,
        notes,
        usbkey_copy: env.settings.root.join(USBKEY_COPY),
    })
}

/// The kept copy, if there is one; or, when a rollback killed after its
/// swap left its intent and the copy it restored is the one installed,
/// that rollback to finish.
async fn rollback_action(
    settings: &GzSettings,
    c: &Component,
    current: &Installed,
) -> Result<Action, SelfUpdateError> {
    let file = rollback_intent_file(settings);
    let intent: Option<RollbackIntent> = agentsadm_platform::blocking(move || {
        agentsadm_types::bounded::read_small(&file)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice(&b).ok())
    })
    .await;
    if let Some(i) = intent
        && i.to_image.is_some()
        && i.to_image == current.image
    {
        return Ok(Action::Rollback {
            image: current.image,
            version: current.version.clone(),
            resumed: Some(Installed {
                image: i.from_image,
                version: i.from_version,
            }),
        });
    }
    let (root, c) = (settings.root.clone(), c.clone());
    let kept = agentsadm_platform::blocking(move || {
        agentsadm_gz::layout::triton::TritonGz::new(root).kept(&c)
    })
    .await
    .ok_or(SelfUpdateError::NothingKept)?;
    Ok(Action::Rollback {
        image: kept.footprint.image_uuid,
        version: kept.footprint.version,
        resumed: None,
    })
}

async fn latest_action(
    env: &SelfUpdateEnv<'_>,
    current: Option<&VersionKey>,
    allow: Allow,
    notes: &mut Vec<String>,
) -> Result<Action, SelfUpdateError> {
    let client = env.updates.unwrap_or(env.dc);
    let origin = match env.updates {
        Some(u) => Origin::Updates {
            url: u.base_url().to_string(),
            channel: u.channel().map(str::to_string),
        },
        None => Origin::Dc {
            url: env.dc.base_url().to_string(),
        },
    };
    let filter = agentsadm_api::imgapi::ListImagesFilter {
        name: Some(agentsadm_gz::release::NAME.to_string()),
        ..Default::default()
    };
    let found = client
        .list_images(&filter)
        .await
        .map_err(|err| SelfUpdateError::List {
            source_label: origin.describe(),
            err: Box::new(err),
        })?;
    let choice = choose_latest(current, &found, allow.major_update);
    if let Some(m) = &choice.skipped_major {
        notes.push(format!(
            "skipping the available major update to agentsadm {} (image {}); use --allow-major-update to allow it",
            m.version, m.uuid
        ));
    }
    Ok(match choice.chosen {
        Some(image) => Action::Install {
            image: Box::new(image),
            origin,
            installed: false,
        },
        None => Action::UpToDate {
            looked_in: origin.describe(),
        },
    })
}

/// An image named by UUID or version: the datacenter IMGAPI's, else the
/// updates server's.
async fn find(
    env: &SelfUpdateEnv<'_>,
    c: &Component,
    spec: &str,
) -> Result<(ImageManifest, Origin), SelfUpdateError> {
    let sources = ImageSources {
        dc: env.dc,
        updates: env.updates,
    };
    let uuid = images::find_image(sources, c, spec)
        .await
        .map_err(|err| SelfUpdateError::Find {
            spec: spec.to_string(),
            err,
        })?;
    if let Some(m) = get_opt(env.dc, uuid).await? {
        let origin = Origin::Dc {
            url: env.dc.base_url().to_string(),
        };
        return Ok((m, origin));
    }
    if let Some(u) = env.updates
        && let Some(m) = get_opt(u, uuid).await?
    {
        let origin = Origin::Updates {
            url: u.base_url().to_string(),
            channel: u.channel().map(str::to_string),
        };
        return Ok((m, origin));
    }
    Err(SelfUpdateError::NotFound { image: uuid })
}

/// GetImage, 404 as `None`.
async fn get_opt(
    client: &ImgapiClient,
    uuid: ImageUuid,
) -> Result<Option<ImageManifest>, SelfUpdateError> {
    match client.get_image(uuid).await {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(err) => Err(SelfUpdateError::List {
            source_label: client.base_url().to_string(),
            err: Box::new(err),
        }),
    }
}

/// An image file and its manifest.
async fn from_file(path: &std::path::Path) -> Result<(ImageManifest, Origin), SelfUpdateError> {
    let file_err = |err| SelfUpdateError::File {
        file: path.display().to_string(),
        err,
    };
    let arg = path.to_string_lossy().into_owned();
    let (file, manifest) = match ImageSource::from_arg(&arg).map_err(file_err)? {
        ImageSource::File { file, manifest } => (file, manifest),
        // A UUID that is not a file here: not what this caller meant.
        ImageSource::Imgapi(_) => return Err(file_err(FetchError::NoSuchImage { arg })),
    };
    let source = ImageSource::File {
        file: file.clone(),
        manifest: manifest.clone(),
    };
    let resolved = agentsadm_gz::fetch::resolve(&source, None)
        .await
        .map_err(file_err)?;
    Ok((resolved.manifest, Origin::File { file, manifest }))
}

/// An image the operator named: refused when it is not agentsadm, older
/// or of another major without the flag; a no-op install (new servers
/// only) when it is what is installed.
fn explicit_action(
    current: &Installed,
    (current_key, from): (Option<&VersionKey>, &str),
    image: ImageManifest,
    origin: Origin,
    allow: Allow,
) -> Result<Action, SelfUpdateError> {
    if image.name != agentsadm_gz::release::NAME || image.image_type != "other" {
        return Err(SelfUpdateError::WrongImage {
            image: image.uuid,
            name: image.name.clone(),
            image_type: image.image_type.clone(),
        });
    }
    let installed = current.image == Some(image.uuid);
    if !installed && let Some(target) = VersionKey::of(&image.version) {
        let refusal = check_explicit(current_key, &target, allow.major_update, allow.downgrade);
        let (from, to) = (from.to_string(), image.version.clone());
        match refusal {
            Ok(()) => {}
            Err(Refusal::Downgrade) => return Err(SelfUpdateError::Downgrade { from, to }),
            Err(Refusal::MajorChange) => return Err(SelfUpdateError::MajorChange { from, to }),
        }
    }
    Ok(Action::Install {
        image: Box::new(image),
        origin,
        installed,
    })
}
