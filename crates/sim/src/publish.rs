//! Publishing component images: in-process into a running [`super::SimDc`],
//! or over HTTP into any IMGAPI (a simulator's, or a real private one)
//! through the real client, the way agent builds publish to the updates
//! server: AdminImportImage (keeps the UUID the tarball's
//! `<name>/image_uuid` carries), AddImageFile, ActivateImage.

use serde::{Deserialize, Serialize};

use crate::imagebuild::BuiltImage;
use crate::imagebuild::Hooks;
use crate::imagebuild::ImageSpec;
use agentsadm_api::ApiError;
use agentsadm_api::imgapi::ImgapiClient;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::ImageManifest;

/// Where an in-process publication goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PublishTarget {
    /// The datacenter's IMGAPI.
    Dc,
    /// The updates server, in these channels (empty: the default, `dev`).
    Updates { channels: Vec<String> },
    /// Both: the DC, and the updates server in these channels.
    Both { channels: Vec<String> },
}

/// Build options for [`image_spec`].
#[derive(Clone, Debug, PartialEq)]
pub struct BuildOptions {
    pub semver: String,
    /// `master`, or a feature branch name.
    pub branch: String,
    /// `YYYYMMDDTHHMMSSZ`.
    pub stamp: String,
    pub payload_bytes: usize,
    /// `None`: the component kind's default hooks.
    pub hooks: Option<Hooks>,
    pub compression: Option<agentsadm_types::image::Compression>,
    /// `None`: a random v4 UUID.
    pub uuid: Option<ImageUuid>,
}

impl BuildOptions {
    pub fn new(semver: &str) -> BuildOptions {
        BuildOptions {
            semver: semver.to_string(),
            branch: "master".to_string(),
            stamp: "20260101T000000Z".to_string(),
            payload_bytes: 4096,
            hooks: None,
            compression: None,
            uuid: None,
        }
    }
}

/// The image spec for a component with these options, its version in the
/// real `<semver>-<branch>-<stamp>-g<sha>` form (sha from the UUID). A
/// cn-agent semver below 2.0.0 moves onto cn-agent's 2.x line, as the
/// seeded ones do; one already there is kept
/// ([`crate::seed::release_version`]).
pub fn image_spec(c: &Component, opts: &BuildOptions) -> ImageSpec {
    let semver = crate::seed::release_version(&c.name, &opts.semver);
    let mut spec = ImageSpec::for_component(c, &semver);
    if let Some(u) = opts.uuid {
        spec.uuid = u;
    }
    let sha = spec.uuid.to_string()[..7].to_string();
    spec.version =
        agentsadm_types::image::agent_version_string(&semver, &opts.branch, &opts.stamp, &sha);
    spec.payload_bytes = opts.payload_bytes;
    if let Some(h) = &opts.hooks {
        spec.hooks = h.clone();
    }
    if let Some(c) = opts.compression {
        spec.compression = c;
        // A shar is stored uncompressed; asking for compression asks for
        // the tarball form of a shar kind.
        if c != agentsadm_types::image::Compression::None {
            spec.format = crate::imagebuild::ImageFormat::Tarball;
        }
    }
    spec
}

/// Publish a built image over HTTP: import the manifest (UUID kept), upload
/// the file with its sha1, activate. `channel` places it on an updates
/// server.
pub async fn publish_via_client(
    client: &ImgapiClient,
    img: &BuiltImage,
    channel: Option<&str>,
) -> Result<ImageManifest, ApiError> {
    let client = client.clone().with_channel(channel.map(str::to_string));
    let mut manifest = img.manifest.clone();
    // IMGAPI computes files from the upload and state from activation.
    manifest.files = Vec::new();
    manifest.channels = None;
    client.import_manifest(&manifest).await?;
    let file = &img.manifest.files[0];
    client
        .add_image_file(
            manifest.uuid,
            file.compression,
            &file.sha1,
            bytes::Bytes::from(img.file.clone()),
        )
        .await?;
    client.activate_image(manifest.uuid).await
}
