//! Image resolution before planning (I/O), and imports after confirmation.
//!
//! - `--image UUID`: the datacenter IMGAPI's manifest; if it does not have
//!   it and an updates server is configured (`--channel`), the updates
//!   server's, marked for import.
//! - `--latest`: the newest image by `published_at` with the component's
//!   name, from the updates server's channel with `--channel` (marked for
//!   import unless the datacenter already has it), else from the
//!   datacenter IMGAPI.
//! - Neither: no explicit target; the planner follows SAPI intent. The
//!   images intent names are looked up in the datacenter IMGAPI so the plan
//!   can show versions and skip images that are not there.
//!
//! Whatever the choice, the agentsadm servers get first when their own
//! cannot parse a plan's steps is found too ([`ResolvedImages::agentsadm`]).
//!
//! Every manifest is checked to be an agent image (`type: other`) of the
//! component it is for. Imports (AdminImportImage with `source=`) only run
//! once the operator confirmed the plan.

use agentsadm_types::component::ComponentName;
use std::collections::{BTreeMap, BTreeSet};

use futures::stream::{self, StreamExt};

use agentsadm_api::ApiError;
use agentsadm_api::ImgapiClient;
use agentsadm_plan::ImageRef;
use agentsadm_plan::ResolvedImages;
use agentsadm_plan::intent::Intent;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::Component;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::ImageManifest;
use agentsadm_types::image::ImageState;
use agentsadm_types::version::VersionKey;

/// Which target the operator asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageChoice {
    /// Follow SAPI intent.
    Intent,
    Image(ImageUuid),
    Latest,
}

/// Where images come from.
#[derive(Clone, Copy, Debug)]
pub struct ImageSources<'a> {
    /// The datacenter IMGAPI (what servers install from).
    pub dc: &'a ImgapiClient,
    /// An updates server, with its channel set (`--channel`).
    pub updates: Option<&'a ImgapiClient>,
}

impl ImageSources<'_> {
    /// The `source=` URL AdminImportImage pulls from.
    fn import_source(&self) -> Option<String> {
        self.updates.map(ImgapiClient::source_url)
    }

    fn updates_label(&self) -> String {
        match self.updates {
            Some(u) => match u.channel() {
                Some(c) => format!("the updates server {} (channel {c})", u.base_url()),
                None => format!("the updates server {}", u.base_url()),
            },
            None => format!("the datacenter IMGAPI {}", self.dc.base_url()),
        }
    }
}

/// Image resolution or import failed; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(
        "{source_label} answered with a manifest for image {image} that is not a valid image manifest ({detail}); the API is up, but this image's record is damaged: see it with 'sdc-imgadm get {image}'"
    )]
    BadManifest {
        image: String,
        source_label: String,
        detail: String,
    },
    #[error("cannot look up image {image} in {source_label}")]
    Lookup {
        image: String,
        source_label: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error(
        "image {image} is in neither the datacenter IMGAPI nor {looked_in}; check the UUID (agentsadm avail lists images)"
    )]
    NotFound { image: ImageUuid, looked_in: String },
    #[error(
        "image {image} is {name}@{version} (type {image_type}), not an image of {component}; pass an image of {component}"
    )]
    WrongImage {
        image: ImageUuid,
        name: String,
        version: String,
        image_type: String,
        component: String,
    },
    #[error("--image needs exactly one component (got {count}); run one update per image")]
    ImageForSeveral { count: usize },
    #[error(
        "cannot import {name} {version} ({image}) from {source_url} into the datacenter IMGAPI"
    )]
    Import {
        image: ImageUuid,
        name: String,
        version: String,
        source_url: String,
        #[source]
        err: Box<ApiError>,
    },
}

fn check_manifest(
    catalog: &Catalog,
    component: &Component,
    m: &ImageManifest,
) -> Result<(), ImageError> {
    let matches = m.image_type == "other" && catalog.is_image_of(&m.name, &component.name);
    if matches {
        Ok(())
    } else {
        Err(ImageError::WrongImage {
            image: m.uuid,
            name: m.name.clone(),
            version: m.version.clone(),
            image_type: m.image_type.clone(),
            component: component.name.to_string(),
        })
    }
}

fn to_ref(m: &ImageManifest, import_from: Option<String>) -> ImageRef {
    ImageRef {
        uuid: m.uuid,
        name: m.name.clone(),
        version: m.version.clone(),
        import_from,
    }
}

/// GetImage that turns 404 into `None`.
async fn get_opt(
    client: &ImgapiClient,
    uuid: ImageUuid,
    label: &str,
) -> Result<Option<ImageManifest>, ImageError> {
    match client.get_image(uuid).await {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(err) if err.decode_detail().is_some() => Err(ImageError::BadManifest {
            image: uuid.to_string(),
            source_label: label.to_string(),
            detail: err.decode_detail().unwrap_or_default(),
        }),
        Err(err) => Err(ImageError::Lookup {
            image: uuid.to_string(),
            source_label: label.to_string(),
            err: Box::new(err),
        }),
    }
}

/// Resolve targets for `components` (already in play) and look up the
/// images intent refers to.
pub async fn resolve(
    catalog: &Catalog,
    components: &[&Component],
    choice: ImageChoice,
    sources: ImageSources<'_>,
    intent: &Intent,
) -> Result<ResolvedImages, ImageError> {
    let mut out = ResolvedImages::default();
    let dc_label = format!("the datacenter IMGAPI {}", sources.dc.base_url());
    match choice {
        ImageChoice::Intent => {}
        ImageChoice::Image(uuid) => {
            let [component] = components else {
                return Err(ImageError::ImageForSeveral {
                    count: components.len(),
                });
            };
            let target = match get_opt(sources.dc, uuid, &dc_label).await? {
                Some(m) => checked(to_ref(&m, None), catalog, component, &m)?,
                None => match sources.updates {
                    Some(u) => match get_opt(u, uuid, &sources.updates_label()).await? {
                        Some(m) => {
                            checked(to_ref(&m, sources.import_source()), catalog, component, &m)?
                        }
                        None => {
                            return Err(ImageError::NotFound {
                                image: uuid,
                                looked_in: sources.updates_label(),
                            });
                        }
                    },
                    None => {
                        return Err(ImageError::NotFound {
                            image: uuid,
                            looked_in:
                                "an updates server (none given: pass --channel to look there)"
                                    .to_string(),
                        });
                    }
                },
            };
            out.targets.insert(component.name.clone(), target);
        }
        ImageChoice::Latest => {
            out.no_downgrade = true;
            let client = sources.updates.unwrap_or(sources.dc);
            let label = sources.updates_label();
            let found: Vec<(ComponentName, Result<Option<ImageManifest>, ApiError>)> =
                stream::iter(components.iter())
                    .map(|c| async move { (c.name.clone(), latest_of(client, c).await) })
                    .buffer_unordered(8)
                    .collect()
                    .await;
            for (name, result) in found {
                let component = catalog.get(&name).expect("component from the catalog");
                match result.map_err(|err| ImageError::Lookup {
                    image: format!("newest {name}"),
                    source_label: label.clone(),
                    err: Box::new(err),
                })? {
                    None => {
                        out.unavailable.insert(name, label.clone());
                    }
                    Some(m) => {
                        check_manifest(catalog, component, &m)?;
                        let import = match sources.updates {
                            Some(_) => match get_opt(sources.dc, m.uuid, &dc_label).await? {
                                Some(_) => None,
                                None => sources.import_source(),
                            },
                            None => None,
                        };
                        out.targets.insert(name, to_ref(&m, import));
                    }
                }
            }
        }
    }

    // The images SAPI intends for these components, for versions in the
    // plan and to tell which ones the datacenter IMGAPI has.
    let names: BTreeSet<&str> = components.iter().map(|c| c.name.as_str()).collect();
    let mut wanted: BTreeSet<ImageUuid> = BTreeSet::new();
    for (name, svc) in &intent.services {
        if names.contains(name.as_str()) {
            wanted.extend(svc.default_image);
        }
    }
    for per_server in intent.instances.values() {
        for (name, inst) in per_server {
            if names.contains(name.as_str()) {
                wanted.extend(inst.image);
            }
        }
    }
    for t in out.targets.values() {
        wanted.remove(&t.uuid);
    }
    let found: Vec<Result<Option<ImageManifest>, ImageError>> = stream::iter(wanted)
        .map(|uuid| {
            let label = dc_label.clone();
            async move { get_opt(sources.dc, uuid, &label).await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut known = BTreeMap::new();
    for m in found {
        if let Some(m) = m? {
            known.insert(m.uuid, to_ref(&m, None));
        }
    }
    out.known = known;
    out.agentsadm = agentsadm_target(catalog, sources.dc, intent, &out).await?;
    Ok(out)
}

/// The agentsadm a server gets first when its own cannot parse a plan's
/// steps: this run's explicit target when the datacenter has it, else the
/// SAPI `agentsadm` service's default image (what `self-update` sets, and
/// what CN setup installs), else the newest active agentsadm in the
/// datacenter IMGAPI (versions ordered as `self-update` orders them).
/// `None`: the datacenter has none.
async fn agentsadm_target(
    catalog: &Catalog,
    dc: &ImgapiClient,
    intent: &Intent,
    resolved: &ResolvedImages,
) -> Result<Option<ImageRef>, ImageError> {
    let Some(c) = catalog.iter().find(|c| c.kind == ComponentKind::Agentsadm) else {
        return Ok(None);
    };
    if let Some(t) = resolved
        .targets
        .get(&c.name)
        .filter(|t| t.import_from.is_none())
    {
        return Ok(Some(t.clone()));
    }
    let label = format!("the datacenter IMGAPI {}", dc.base_url());
    if let Some(default) = intent.services.get(&c.name).and_then(|s| s.default_image) {
        if let Some(r) = resolved.lookup(&default) {
            return Ok(Some(r.clone()));
        }
        if let Some(m) = get_opt(dc, default, &label).await?
            && check_manifest(catalog, c, &m).is_ok()
        {
            return Ok(Some(to_ref(&m, None)));
        }
    }
    let filter = agentsadm_api::imgapi::ListImagesFilter {
        name: Some(c.name.to_string()),
        ..Default::default()
    };
    let found = dc
        .list_images(&filter)
        .await
        .map_err(|err| ImageError::Lookup {
            image: format!("newest {}", c.name),
            source_label: label,
            err: Box::new(err),
        })?;
    let newest = found
        .into_iter()
        .filter(|m| m.state == ImageState::Active && !m.disabled)
        .filter(|m| check_manifest(catalog, c, m).is_ok())
        .filter_map(|m| Some((VersionKey::of(&m.version)?, m)))
        .max_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| a.1.published_at.cmp(&b.1.published_at))
        });
    Ok(newest.map(|(_, m)| to_ref(&m, None)))
}

/// Add to `out.known` the images of `wanted` (component, image) that the
/// datacenter IMGAPI has and that are images of their component (the
/// history they come from is SAPI's, which anyone can write); the others
/// stay unknown, and the planner skips what needs them.
pub async fn add_known(
    dc: &ImgapiClient,
    catalog: &Catalog,
    wanted: &[(ComponentName, ImageUuid)],
    out: &mut ResolvedImages,
) -> Result<(), ImageError> {
    let label = format!("the datacenter IMGAPI {}", dc.base_url());
    for (component, uuid) in wanted {
        if out.known.contains_key(uuid) {
            continue;
        }
        let (Some(c), Some(m)) = (catalog.get(component), get_opt(dc, *uuid, &label).await?) else {
            continue;
        };
        if check_manifest(catalog, c, &m).is_ok() {
            out.known.insert(m.uuid, to_ref(&m, None));
        }
    }
    Ok(())
}

/// `image`, once `m` passed the catalog's checks for `component`.
fn checked(
    image: ImageRef,
    catalog: &Catalog,
    component: &Component,
    m: &ImageManifest,
) -> Result<ImageRef, ImageError> {
    check_manifest(catalog, component, m)?;
    Ok(image)
}

/// An image as operators name it after `COMPONENT@` or with `--image`:
/// a full UUID, a unique UUID prefix (the 8 characters `list` and plans
/// show), or a version (`1.1.0` matches `1.1.0` and `1.1.0-master-...`;
/// of several builds, the newest). Looked up among the component's images
/// in the datacenter IMGAPI, then the updates server if there is one.
pub async fn find_image(
    sources: ImageSources<'_>,
    component: &Component,
    spec: &str,
) -> Result<ImageUuid, FindImageError> {
    let spec = spec.trim();
    if let Ok(u) = spec.parse::<ImageUuid>() {
        return Ok(u);
    }
    let mut images: Vec<ImageManifest> = Vec::new();
    for client in std::iter::once(sources.dc).chain(sources.updates) {
        let mut names = vec![component.name.as_str()];
        if *component.package_name() != component.name {
            names.push(component.package_name());
        }
        for name in names {
            let found = client
                .list_images(&agentsadm_api::imgapi::ListImagesFilter {
                    name: Some(name.to_string()),
                    ..Default::default()
                })
                .await
                .map_err(|err| FindImageError::Lookup {
                    source_label: client.base_url().to_string(),
                    err: Box::new(err),
                })?;
            images.extend(found.into_iter().filter(|i| i.name == name));
        }
        if !images.is_empty() && matches_spec(&images, spec).is_some() {
            break;
        }
    }
    match matches_spec(&images, spec) {
        Some(Ok(u)) => Ok(u),
        Some(Err(several)) => Err(FindImageError::Ambiguous {
            component: component.name.to_string(),
            spec: spec.to_string(),
            several,
        }),
        None => Err(FindImageError::NotFound {
            component: component.name.to_string(),
            spec: spec.to_string(),
        }),
    }
}

/// The image `spec` names among `images`: `Some(Ok)` one, `Some(Err)`
/// several UUIDs share the prefix, `None` no match.
fn matches_spec(images: &[ImageManifest], spec: &str) -> Option<Result<ImageUuid, String>> {
    let spec_l = spec.to_ascii_lowercase();
    let mut by_uuid: Vec<&ImageManifest> = images
        .iter()
        .filter(|i| spec_l.len() >= 4 && i.uuid.to_string().starts_with(&spec_l))
        .collect();
    by_uuid.sort_by_key(|i| i.uuid);
    by_uuid.dedup_by_key(|i| i.uuid);
    match by_uuid.len() {
        1 => return Some(Ok(by_uuid[0].uuid)),
        n if n > 1 => {
            let names: Vec<String> = by_uuid
                .iter()
                .map(|i| format!("{} ({})", i.uuid, i.version))
                .collect();
            return Some(Err(names.join(", ")));
        }
        _ => {}
    }
    images
        .iter()
        .filter(|i| {
            i.version == spec
                || i.version
                    .strip_prefix(spec)
                    .is_some_and(|rest| rest.starts_with('-') || rest.starts_with('+'))
        })
        .max_by(|a, b| a.published_at.cmp(&b.published_at))
        .map(|i| Ok(i.uuid))
}

/// `COMPONENT@IMAGE` or `--image` names no image, or several.
#[derive(Debug, thiserror::Error)]
pub enum FindImageError {
    #[error("cannot list images in {source_label}")]
    Lookup {
        source_label: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error(
        "no {component} image matches {spec:?}: give a version (1.1.0), an image UUID or its first 8 characters (agentsadm avail {component} lists them)"
    )]
    NotFound { component: String, spec: String },
    #[error("{spec:?} names several {component} images: {several}; give more of the UUID")]
    Ambiguous {
        component: String,
        spec: String,
        several: String,
    },
}

/// The newest active image of a component (by its name, then its package
/// name, which is what some older images carry, e.g. `marlin`).
async fn latest_of(
    client: &ImgapiClient,
    c: &Component,
) -> Result<Option<ImageManifest>, ApiError> {
    let found = client.latest_image(&c.name).await?;
    if found.is_some() || *c.package_name() == c.name {
        return Ok(found);
    }
    client.latest_image(c.package_name()).await
}

/// Import the plan's images into the datacenter IMGAPI (skipping any that
/// arrived meanwhile). Runs only after confirmation.
pub async fn import(dc: &ImgapiClient, imports: &[ImageRef]) -> Result<usize, ImageError> {
    let mut done = 0;
    for i in imports {
        let Some(source) = &i.import_from else {
            continue;
        };
        let label = format!("the datacenter IMGAPI {}", dc.base_url());
        if get_opt(dc, i.uuid, &label).await?.is_some() {
            continue;
        }
        dc.import_from_source(i.uuid, source)
            .await
            .map_err(|err| ImageError::Import {
                image: i.uuid,
                name: i.name.to_string(),
                version: i.version.to_string(),
                source_url: source.clone(),
                err: Box::new(err),
            })?;
        done += 1;
    }
    Ok(done)
}

/// One row of `agentsadm avail`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AvailableImage {
    pub component: ComponentName,
    pub image: ImageUuid,
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_at: Option<String>,
}

/// Images of these components in the chosen IMGAPI, oldest first.
pub async fn available(
    client: &ImgapiClient,
    components: &[&Component],
) -> Result<Vec<AvailableImage>, ApiError> {
    let lists: Vec<(ComponentName, Result<Vec<ImageManifest>, ApiError>)> =
        stream::iter(components.iter())
            .map(|c| async move {
                let filter = agentsadm_api::imgapi::ListImagesFilter {
                    name: Some(c.name.to_string()),
                    ..Default::default()
                };
                (c.name.clone(), client.list_images(&filter).await)
            })
            .buffer_unordered(8)
            .collect()
            .await;
    let mut rows = Vec::new();
    for (component, images) in lists {
        for m in images? {
            if m.name == component {
                rows.push(AvailableImage {
                    component: component.clone(),
                    image: m.uuid,
                    version: m.version,
                    published_at: m.published_at,
                });
            }
        }
    }
    rows.sort_by(|a, b| {
        a.component
            .cmp(&b.component)
            .then_with(|| a.published_at.cmp(&b.published_at))
            .then_with(|| a.image.cmp(&b.image))
    });
    Ok(rows)
}
