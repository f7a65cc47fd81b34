//! What one simulated IMGAPI holds: its mode and channels, the stored
//! images and files, the shared `published_at` clock, and how an image is
//! serialized for an API version; plus the service state the routes share.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use md5::Md5;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use crate::http::ApiInfo;
use crate::http::rest_error_fields;
use crate::sapi::SapiService;
use agentsadm_api::ApiConfig;
use agentsadm_api::imgapi::ImgapiClient;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageFile;
use agentsadm_types::image::ImageManifest;
use agentsadm_types::image::ImageState;

use super::DEFAULT_CHANNEL;

use super::STANDARD_CHANNELS;

use super::STYLE;

/// How an IMGAPI is configured (`mode` in its config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImgapiMode {
    /// The per-datacenter IMGAPI: no channels, every state listable.
    Dc,
    /// An updates server: channels, unauthenticated lists show active only.
    Private,
}

/// A logical clock for `published_at`, shared by both IMGAPIs so images
/// order the same way everywhere and seeded datacenters are reproducible:
/// one second per publication from 2026-01-01T00:00:00Z.
#[derive(Debug)]
pub struct PublishClock {
    ticks: AtomicU64,
}

/// 2026-01-01T00:00:00Z.
const CLOCK_EPOCH_S: u64 = 1_767_225_600;

impl PublishClock {
    pub(crate) fn new(ticks: u64) -> PublishClock {
        PublishClock {
            ticks: AtomicU64::new(ticks),
        }
    }

    /// The next `published_at`.
    pub(crate) fn next(&self) -> String {
        let n = self.ticks.fetch_add(1, Ordering::Relaxed);
        iso_millis(UNIX_EPOCH + Duration::from_secs(CLOCK_EPOCH_S + n))
    }

    pub(crate) fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }
}

/// `2026-11-22T11:48:42.491Z`, the form IMGAPI and CNAPI write.
pub(crate) fn iso_millis(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// An image file as stored after upload.
#[derive(Clone, Debug)]
pub struct StoredFile {
    pub bytes: Bytes,
    pub sha1: String,
    /// base64 of the MD5, computed at upload (what `Content-MD5` carries).
    /// `None`: the file's record has no `contentMD5` (IMGAPI then sends no
    /// `Content-MD5` header, as for some images of real stores).
    pub md5_b64: Option<String>,
    pub compression: Compression,
    pub mtime: SystemTime,
}

impl StoredFile {
    pub(crate) fn new(bytes: Bytes, compression: Compression) -> StoredFile {
        let sha1 = format!("{:x}", Sha1::digest(&bytes));
        let md5_b64 = Some(base64::engine::general_purpose::STANDARD.encode(Md5::digest(&bytes)));
        StoredFile {
            bytes,
            sha1,
            md5_b64,
            compression,
            mtime: SystemTime::now(),
        }
    }

    pub(super) fn entry(&self) -> ImageFile {
        ImageFile {
            sha1: self.sha1.clone(),
            size: self.bytes.len() as u64,
            compression: self.compression,
            stor: None,
        }
    }
}

/// One image: the manifest as created plus what IMGAPI tracks beside it.
#[derive(Clone, Debug)]
pub struct StoredImage {
    /// `state`, `files` and `channels` in here are ignored; they are
    /// computed from the fields below.
    pub manifest: ImageManifest,
    pub activated: bool,
    pub channels: Vec<String>,
    pub file: Option<StoredFile>,
}

impl StoredImage {
    pub fn state(&self) -> ImageState {
        if !self.activated {
            ImageState::Unactivated
        } else if self.manifest.disabled {
            ImageState::Disabled
        } else {
            ImageState::Active
        }
    }

    /// The manifest as the API shows it (state and files filled in).
    pub fn current_manifest(&self) -> ImageManifest {
        let mut m = self.manifest.clone();
        m.state = self.state();
        m.files = self.file.iter().map(StoredFile::entry).collect();
        m.channels = (!self.channels.is_empty()).then(|| self.channels.clone());
        m
    }
}

/// Keys IMGAPI may add after `files`, in its serializer's order (§1.2).
pub(super) const OPTIONAL_KEYS: [&str; 19] = [
    "acl",
    "description",
    "homepage",
    "eula",
    "icon",
    "urn",
    "requirements",
    "users",
    "generate_passwords",
    "inherited_directories",
    "origin",
    "nic_driver",
    "disk_driver",
    "cpu_type",
    "image_size",
    "tags",
    "billing_tags",
    "traits",
    "error",
];

/// The images of one IMGAPI.
#[derive(Debug)]
pub struct ImgapiStore {
    pub mode: ImgapiMode,
    /// `(name, description)`; empty on a server without channels.
    pub channels: Vec<(String, String)>,
    pub default_channel: Option<String>,
    pub images: HashMap<ImageUuid, StoredImage>,
}

impl ImgapiStore {
    pub fn new(mode: ImgapiMode) -> ImgapiStore {
        let (channels, default_channel) = match mode {
            ImgapiMode::Dc => (Vec::new(), None),
            ImgapiMode::Private => (
                STANDARD_CHANNELS
                    .iter()
                    .map(|(n, d)| (n.to_string(), d.to_string()))
                    .collect(),
                Some(DEFAULT_CHANNEL.to_string()),
            ),
        };
        ImgapiStore {
            mode,
            channels,
            default_channel,
            images: HashMap::new(),
        }
    }

    pub fn uses_channels(&self) -> bool {
        !self.channels.is_empty()
    }

    pub(super) fn has_channel(&self, name: &str) -> bool {
        self.channels.iter().any(|(n, _)| n == name)
    }

    /// Serialize an image the way IMGAPI does for this API version.
    pub(crate) fn serialize(&self, img: &StoredImage, version: u64, admin: bool) -> Value {
        let m = &img.manifest;
        let mut out = Map::new();
        out.insert("v".into(), json!(2));
        out.insert("uuid".into(), json!(m.uuid));
        out.insert("owner".into(), json!(m.owner));
        out.insert("name".into(), json!(m.name));
        out.insert("version".into(), json!(m.version));
        out.insert("state".into(), json!(img.state()));
        out.insert("disabled".into(), json!(m.disabled));
        out.insert("public".into(), json!(m.public));
        if let Some(p) = &m.published_at {
            out.insert("published_at".into(), json!(p));
        }
        out.insert("type".into(), json!(m.image_type));
        out.insert("os".into(), json!(m.os));
        let files: Vec<Value> = img
            .file
            .iter()
            .map(|f| {
                let mut e = json!({
                    "sha1": f.sha1, "size": f.bytes.len(), "compression": f.compression
                });
                if admin {
                    e["stor"] = json!("local");
                }
                e
            })
            .collect();
        out.insert("files".into(), Value::Array(files));
        for key in OPTIONAL_KEYS {
            let value = match key {
                "description" => m.description.as_ref().map(|d| json!(d)),
                "tags" => m.tags.as_ref().map(|t| json!(t)),
                _ => m.extra.get(key).cloned(),
            };
            let Some(value) = value else { continue };
            let empty = match &value {
                Value::Null => true,
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => matches!(key, "traits") && o.is_empty(),
                Value::String(s) => s.is_empty(),
                _ => false,
            };
            if !empty {
                out.insert(key.into(), value);
            }
        }
        if version >= 2 && self.uses_channels() {
            out.insert("channels".into(), json!(img.channels));
        }
        Value::Object(out)
    }

    /// Insert an already-built image (in-process publishing and seeding).
    pub fn insert(&mut self, mut manifest: ImageManifest, file: StoredFile, channels: Vec<String>) {
        manifest.files = vec![file.entry()];
        let channels = if self.uses_channels() && channels.is_empty() {
            self.default_channel.iter().cloned().collect()
        } else if self.uses_channels() {
            channels
        } else {
            Vec::new()
        };
        self.images.insert(
            manifest.uuid,
            StoredImage {
                activated: true,
                manifest,
                channels,
                file: Some(file),
            },
        );
    }
}

/// Shared state of one simulated IMGAPI service.
pub(crate) struct ImgapiService {
    pub store: Mutex<ImgapiStore>,
    pub info: Arc<ApiInfo>,
    pub clock: Arc<PublishClock>,
    /// Clients for `source=` imports, by URL.
    sources: Mutex<HashMap<String, ImgapiClient>>,
    /// The datacenter's SAPI, where the admin's UUID is configured (the DC
    /// IMGAPI only; an updates server has no UFDS).
    sapi: Option<Arc<SapiService>>,
}

impl ImgapiService {
    pub(crate) fn new(
        store: ImgapiStore,
        info: Arc<ApiInfo>,
        clock: Arc<PublishClock>,
        sapi: Option<Arc<SapiService>>,
    ) -> ImgapiService {
        ImgapiService {
            store: Mutex::new(store),
            info,
            clock,
            sources: Mutex::new(HashMap::new()),
            sapi,
        }
    }

    /// IMGAPI's `adminUuid`: what config-agent renders into its config from
    /// SAPI's `sdc` application (`metadata.ufds_admin_uuid`, else the
    /// application's owner). `None` before the datacenter has one.
    pub(crate) fn admin_uuid(&self) -> Option<String> {
        let sapi = self.sapi.as_ref()?.lock();
        let app = sapi.applications.iter().find(|a| a.name == "sdc")?;
        app.metadata
            .get("ufds_admin_uuid")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| Some(app.owner_uuid.clone()).filter(|o| !o.is_empty()))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ImgapiStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn source_client(&self, url: &str) -> Result<ImgapiClient, Response> {
        let mut map = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(url) {
            return Ok(c.clone());
        }
        let config = ApiConfig {
            timeout: Duration::from_secs(60),
            retries: 1,
            backoff: Duration::from_millis(50),
            ..ApiConfig::default()
        };
        let client = ImgapiClient::new(url, config).map_err(|e| {
            rest_error_fields(
                STYLE,
                StatusCode::UNPROCESSABLE_ENTITY,
                "InvalidParameter",
                format!("invalid source: {e}"),
                json!([{"field": "source", "code": "Invalid"}]),
            )
        })?;
        map.insert(url.to_string(), client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_iso() {
        let c = PublishClock::new(0);
        let a = c.next();
        let b = c.next();
        assert_eq!(a, "2026-01-01T00:00:00.000Z");
        assert!(b > a);
    }
}
