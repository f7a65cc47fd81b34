//! The simulated IMGAPI (docs/triton/apis.md §1): the datacenter's own, in
//! `dc` mode without channels, and an updates server in `private` mode with
//! channels `experimental, dev (default), staging, release, support`.
//!
//! Wire behaviour reproduced: pretty-printed JSON in IMGAPI's key order,
//! `v: 2`, `channels` only for `Accept-Version >= 2` on a server with
//! channels, ListImages filters (`name`/`version` `~substring`, `type=!x`,
//! `tag.k=v`, `state`, `owner`, `os`, `public`), `published_at` ordering
//! with unactivated images first, inclusive `marker`, `limit`, the file
//! headers (`Etag` = sha1, `Content-MD5`, `Content-Length`,
//! `Last-Modified`), HEAD on a file → 405, CreateImage → 200, and the
//! create / AddImageFile / activate / import error codes. AdminImportImage
//! with `source=` copies the manifest from another IMGAPI over HTTP;
//! AddImageFile with `source=` pulls the file the same way (the real
//! two-step import, §1.7).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use futures::StreamExt;
use md5::Md5;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use super::faults::FileFault;
use super::http::{
    ApiInfo, ApiStyle, ApiVersion, JsonStyle, bad_method, json_response, not_found_route,
    parse_query, query_get, rest_error, rest_error_fields,
};
use crate::api::ApiConfig;
use crate::api::imgapi::ImgapiClient;
use crate::ids::ImageUuid;
use crate::image::{ADMIN_OWNER, Compression, ImageFile, ImageManifest, ImageState};

const STYLE: JsonStyle = JsonStyle::Pretty;

/// The channels of the real updates server (`etc/standalone/standard-channels.json`).
pub const STANDARD_CHANNELS: [(&str, &str); 5] = [
    (
        "experimental",
        "feature-branch builds (warning: 'latest' isn't meaningful)",
    ),
    ("dev", "main development branch builds"),
    (
        "staging",
        "staging for release branch builds before a full release",
    ),
    ("release", "release gold bits"),
    ("support", "Triton support builds"),
];

/// The default channel of the standard set.
pub const DEFAULT_CHANNEL: &str = "dev";

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
    pub md5_b64: String,
    pub compression: Compression,
    pub mtime: SystemTime,
}

impl StoredFile {
    pub(crate) fn new(bytes: Bytes, compression: Compression) -> StoredFile {
        let sha1 = format!("{:x}", Sha1::digest(&bytes));
        let md5_b64 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&bytes));
        StoredFile {
            bytes,
            sha1,
            md5_b64,
            compression,
            mtime: SystemTime::now(),
        }
    }

    fn entry(&self) -> ImageFile {
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
const OPTIONAL_KEYS: [&str; 19] = [
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

    fn has_channel(&self, name: &str) -> bool {
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
}

impl ImgapiService {
    pub(crate) fn new(
        store: ImgapiStore,
        info: Arc<ApiInfo>,
        clock: Arc<PublishClock>,
    ) -> ImgapiService {
        ImgapiService {
            store: Mutex::new(store),
            info,
            clock,
            sources: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ImgapiStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn source_client(&self, url: &str) -> Result<ImgapiClient, Response> {
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

/// The router of one IMGAPI.
pub(crate) fn router(svc: Arc<ImgapiService>) -> Router {
    Router::new()
        .route("/ping", get(ping))
        .route("/channels", get(list_channels))
        .route("/images", get(list_images).post(create_image))
        .route(
            "/images/{uuid}",
            get(get_image).post(image_action).delete(delete_image),
        )
        .route(
            "/images/{uuid}/file",
            get(get_file)
                .put(add_file)
                .head(head_file)
                .layer(DefaultBodyLimit::disable()),
        )
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(svc)
}

async fn fallback(uri: Uri) -> Response {
    not_found_route(STYLE, uri.path())
}

async fn method_not_allowed(method: Method) -> Response {
    bad_method(STYLE, &method)
}

type Svc = State<Arc<ImgapiService>>;

/// IMGAPI's style for the shared extractors.
struct Imgapi;

impl ApiStyle for Imgapi {
    const STYLE: JsonStyle = STYLE;
}

type Version = ApiVersion<Imgapi>;

/// The UUID in an `/images/:uuid` path; anything else is an unknown route.
fn image_uuid(raw: &str, path: &str) -> Result<ImageUuid, Response> {
    raw.parse().map_err(|_| not_found_route(STYLE, path))
}

fn not_found(uuid: ImageUuid) -> Response {
    rest_error(
        STYLE,
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        format!("image {uuid} not found"),
    )
}

fn invalid_param(message: String, field: &str) -> Response {
    rest_error_fields(
        STYLE,
        StatusCode::UNPROCESSABLE_ENTITY,
        "InvalidParameter",
        message,
        json!([{"field": field, "code": "Invalid"}]),
    )
}

/// The channel a request selects: `Ok(None)` means all channels (`*`, or a
/// server without channels).
fn request_channel(
    store: &ImgapiStore,
    query: &[(String, String)],
) -> Result<Option<String>, Response> {
    if !store.uses_channels() {
        return Ok(None);
    }
    match query_get(query, "channel") {
        Some("*") => Ok(None),
        Some(name) if store.has_channel(name) => Ok(Some(name.to_string())),
        Some(name) => Err(rest_error_fields(
            STYLE,
            StatusCode::UNPROCESSABLE_ENTITY,
            "ValidationFailed",
            format!("unknown channel: {name}"),
            json!([{"field": "channel", "code": "Invalid"}]),
        )),
        None => match &store.default_channel {
            Some(d) => Ok(Some(d.clone())),
            None => Err(rest_error_fields(
                STYLE,
                StatusCode::UNPROCESSABLE_ENTITY,
                "ValidationFailed",
                "missing channel",
                json!([{"field": "channel", "code": "MissingParameter"}]),
            )),
        },
    }
}

async fn ping(State(svc): Svc) -> Response {
    let mut body = json!({"ping": "pong", "version": "4.13.1", "imgapi": true});
    if svc.lock().mode == ImgapiMode::Dc {
        body["pid"] = json!(std::process::id());
    }
    json_response(STYLE, StatusCode::OK, &body)
}

async fn list_channels(State(svc): Svc, uri: Uri) -> Response {
    let store = svc.lock();
    if !store.uses_channels() {
        // Only mounted when channels are configured.
        return not_found_route(STYLE, uri.path());
    }
    let list: Vec<Value> = store
        .channels
        .iter()
        .map(|(n, d)| {
            let mut c = json!({"name": n, "description": d});
            if store.default_channel.as_deref() == Some(n) {
                c["default"] = json!(true);
            }
            c
        })
        .collect();
    json_response(STYLE, StatusCode::OK, &list)
}

/// `name`/`version` match: exact, or `~substr` (case-sensitive substring).
fn str_match(filter: &str, value: &str) -> bool {
    match filter.strip_prefix('~') {
        Some(sub) => value.contains(sub),
        None => filter == value,
    }
}

/// A tag's search form (`key=value`), as IMGAPI indexes it.
fn tag_search_value(v: &Value) -> String {
    match v {
        Value::String(s) if s.len() <= 100 => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

async fn list_images(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    RawQuery(raw): RawQuery,
) -> Response {
    let q = parse_query(raw.as_deref());
    let store = svc.lock();
    let limit_to_active = store.mode != ImgapiMode::Dc;
    let limit = match query_get(&q, "limit").filter(|l| !l.is_empty()) {
        Some(l) => match l.parse::<f64>() {
            Ok(n) if n.is_finite() => Some(n.max(0.0) as usize),
            // IMGAPI's error names `state` here: a bug kept for fidelity.
            _ => return invalid_param(format!("invalid limit: \"{l}\""), "state"),
        },
        None => None,
    };
    // (activated, disabled) wanted; None = any.
    let state = query_get(&q, "state").unwrap_or("active");
    let (want_activated, want_disabled): (Option<bool>, Option<bool>) = match state {
        "active" => (Some(true), Some(false)),
        "disabled" | "unactivated" | "creating" | "failed" if limit_to_active => {
            return json_response(STYLE, StatusCode::OK, &Vec::<Value>::new());
        }
        "disabled" => (Some(true), Some(true)),
        "unactivated" => (Some(false), None),
        "all" if limit_to_active => (Some(true), Some(false)),
        "all" => (None, None),
        // Placeholder images never exist in the simulator.
        "creating" | "failed" => {
            return json_response(STYLE, StatusCode::OK, &Vec::<Value>::new());
        }
        other => return invalid_param(format!("invalid state: \"{other}\""), "state"),
    };
    let descending = match query_get(&q, "sort") {
        None | Some("published_at") | Some("published_at.asc") => false,
        Some("published_at.desc") => true,
        Some(other) => {
            let attr = other.split('.').next().unwrap_or(other);
            return invalid_param(
                format!("invalid 'sort': not a valid sorting attribute: '{attr}'"),
                "sort",
            );
        }
    };
    let channel = match request_channel(&store, &q) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let marker = match query_get(&q, "marker").filter(|m| !m.is_empty()) {
        None => None,
        Some(m) => match m.parse::<ImageUuid>() {
            Ok(u) => match store.images.get(&u) {
                Some(img) => img.manifest.published_at.clone(),
                None => return not_found(u),
            },
            Err(_) => match humantime::parse_rfc3339_weak(m) {
                Ok(t) => Some(iso_millis(t)),
                Err(_) => {
                    return invalid_param(
                        format!(
                            "invalid value for \"marker\" param: \"{m}\" is not a UUID or date string"
                        ),
                        "marker",
                    );
                }
            },
        },
    };
    let public = query_get(&q, "public").map(|p| p == "true");
    let tags: Vec<(&str, &str)> = q
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("tag.").map(|t| (t, v.as_str())))
        .collect();
    let billing: Vec<&str> = q
        .iter()
        .filter(|(k, _)| k == "billing_tag")
        .map(|(_, v)| v.as_str())
        .collect();
    let mut hits: Vec<&StoredImage> = store
        .images
        .values()
        .filter(|img| {
            let m = &img.manifest;
            want_activated.is_none_or(|a| img.activated == a)
                && want_disabled.is_none_or(|d| m.disabled == d)
                && query_get(&q, "name").is_none_or(|f| str_match(f, &m.name))
                && query_get(&q, "version").is_none_or(|f| str_match(f, &m.version))
                && query_get(&q, "owner").is_none_or(|f| f == m.owner)
                && query_get(&q, "os").is_none_or(|f| f == m.os)
                && query_get(&q, "type").is_none_or(|f| match f.strip_prefix('!') {
                    Some(not) => m.image_type != not,
                    None => m.image_type == f,
                })
                && public.is_none_or(|p| m.public == p)
                && channel.as_ref().is_none_or(|c| img.channels.contains(c))
                && tags.iter().all(|(k, want)| {
                    m.tags
                        .as_ref()
                        .and_then(|t| t.get(*k))
                        .is_some_and(|v| tag_search_value(v) == *want)
                })
                && billing.iter().all(|b| {
                    m.extra
                        .get("billing_tags")
                        .and_then(Value::as_array)
                        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(b)))
                })
                && marker.as_ref().is_none_or(|mk| {
                    let p = m.published_at.as_deref().unwrap_or("");
                    if descending {
                        p <= mk.as_str()
                    } else {
                        p >= mk.as_str()
                    }
                })
        })
        .collect();
    // Unactivated images have no published_at and sort as 0, i.e. first.
    hits.sort_by(|a, b| {
        let pa = a.manifest.published_at.as_deref().unwrap_or("");
        let pb = b.manifest.published_at.as_deref().unwrap_or("");
        pa.cmp(pb)
            .then_with(|| a.manifest.uuid.cmp(&b.manifest.uuid))
    });
    if descending {
        hits.reverse();
    }
    if let Some(l) = limit.filter(|l| *l > 0) {
        hits.truncate(l);
    }
    let admin = query_get(&q, "inclAdminFields") == Some("true");
    let out: Vec<Value> = hits.iter().map(|i| store.serialize(i, v, admin)).collect();
    json_response(STYLE, StatusCode::OK, &out)
}

/// Look an image up the way GetImage does, channel rules included.
fn find_image<'a>(
    store: &'a ImgapiStore,
    uuid: ImageUuid,
    q: &[(String, String)],
) -> Result<&'a StoredImage, Response> {
    let channel = request_channel(store, q)?;
    let img = store.images.get(&uuid).ok_or_else(|| not_found(uuid))?;
    if let Some(c) = channel
        && !img.channels.contains(&c)
    {
        return Err(rest_error(
            STYLE,
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            "image not found",
        ));
    }
    Ok(img)
}

fn manifest_etag(body: &Value) -> String {
    format!(
        "{:x}",
        Sha1::digest(serde_json::to_vec(body).unwrap_or_default().as_slice())
    )
}

/// A manifest response with the `Etag` IMGAPI sets (sha1 of the JSON).
fn manifest_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = json_response(STYLE, status, body);
    if let Ok(v) = HeaderValue::from_str(&manifest_etag(body)) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    resp
}

async fn get_image(
    State(svc): Svc,
    Path(raw): Path<String>,
    ApiVersion { major: v, .. }: Version,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(rq): RawQuery,
) -> Response {
    let uuid = match image_uuid(&raw, uri.path()) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let q = parse_query(rq.as_deref());
    let store = svc.lock();
    let img = match find_image(&store, uuid, &q) {
        Ok(i) => i,
        Err(r) => return r,
    };
    let body = store.serialize(img, v, query_get(&q, "inclAdminFields") == Some("true"));
    let etag = manifest_etag(&body);
    let inm = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim_matches('"').to_string());
    if inm.as_deref() == Some(etag.as_str()) {
        return (StatusCode::NOT_MODIFIED, Body::empty()).into_response();
    }
    manifest_response(StatusCode::OK, &body)
}

async fn head_file() -> Response {
    // HEAD is not routed in IMGAPI: restify answers 405 with the methods
    // that are.
    let mut resp = bad_method(STYLE, &Method::HEAD);
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("PUT, GET"));
    resp
}

async fn get_file(
    State(svc): Svc,
    Path(raw): Path<String>,
    uri: Uri,
    RawQuery(rq): RawQuery,
) -> Response {
    let uuid = match image_uuid(&raw, uri.path()) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let q = parse_query(rq.as_deref());
    let (file, name) = {
        let store = svc.lock();
        let img = match find_image(&store, uuid, &q) {
            Ok(i) => i,
            Err(r) => return r,
        };
        let index = query_get(&q, "index").unwrap_or("0");
        let file = match (&img.file, index) {
            (Some(f), "0") => f.clone(),
            (None, _) => {
                return rest_error(
                    STYLE,
                    StatusCode::NOT_FOUND,
                    "ResourceNotFound",
                    format!("image \"{uuid}\" has no file"),
                );
            }
            (Some(_), n) => {
                return rest_error(
                    STYLE,
                    StatusCode::NOT_FOUND,
                    "ResourceNotFound",
                    format!("image \"{uuid}\" has no file at index {n}"),
                );
            }
        };
        (file, img.manifest.name.clone())
    };
    let fault = svc.info.faults.file_fault(uuid, &name);
    let size = file.bytes.len();
    let body = match fault {
        None => Body::from(file.bytes.clone()),
        Some(FileFault::Corrupt) => {
            let mut b = file.bytes.to_vec();
            if let Some(x) = b.get_mut(size / 2) {
                *x ^= 0xff;
            }
            Body::from(b)
        }
        Some(FileFault::Truncated) => {
            // Send half the bytes under the full Content-Length, then fail
            // the stream: hyper closes the connection mid-body, as when
            // IMGAPI's storage errors after the headers went out.
            let half = file.bytes.slice(..size / 2);
            let first = futures::stream::iter([Ok::<Bytes, std::io::Error>(half)]);
            // A pause lets hyper flush the headers and the first half before
            // the stream fails.
            let fail = futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Err(std::io::Error::other("injected truncation"))
            });
            Body::from_stream(first.chain(fail).boxed())
        }
    };
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    let set = |h: &mut HeaderMap, k: header::HeaderName, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    };
    set(h, header::ETAG, file.sha1.clone());
    set(h, header::LAST_MODIFIED, super::http::http_date(file.mtime));
    set(h, header::CONTENT_LENGTH, size.to_string());
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    set(
        h,
        header::HeaderName::from_static("content-md5"),
        file.md5_b64.clone(),
    );
    resp
}

/// Fields CreateImage and import accept (others are "spurious").
const MANIFEST_KEYS: [&str; 29] = [
    "v",
    "uuid",
    "owner",
    "name",
    "version",
    "state",
    "disabled",
    "public",
    "published_at",
    "type",
    "os",
    "files",
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
];

fn validation_failed(field: &str, code: &str, message: &str) -> Response {
    rest_error_fields(
        STYLE,
        StatusCode::UNPROCESSABLE_ENTITY,
        "ValidationFailed",
        format!("invalid image data: {field}"),
        json!([{"field": field, "code": code, "message": message}]),
    )
}

/// Validate a CreateImage / import body into a manifest.
fn manifest_from_body(
    body: &Value,
    uuid: ImageUuid,
    mode: ImgapiMode,
) -> Result<ImageManifest, Response> {
    let Some(obj) = body.as_object() else {
        return Err(rest_error(
            STYLE,
            StatusCode::BAD_REQUEST,
            "InvalidContent",
            "request body is not a JSON object",
        ));
    };
    for key in obj.keys() {
        if !MANIFEST_KEYS.contains(&key.as_str()) && key != "traits" && key != "channels" {
            return Err(validation_failed(key, "Invalid", "unsupported field"));
        }
    }
    for key in ["name", "version", "type", "os"] {
        if !obj.get(key).is_some_and(Value::is_string) {
            return Err(validation_failed(key, "MissingParameter", "required"));
        }
    }
    let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    if s("version").len() > 128 {
        return Err(validation_failed("version", "Invalid", "too long"));
    }
    let public = obj.get("public").and_then(Value::as_bool).unwrap_or(false);
    let owner = match mode {
        // An import into a non-dc IMGAPI resets the owner (IMGAPI-408).
        ImgapiMode::Private => ADMIN_OWNER.to_string(),
        ImgapiMode::Dc => obj
            .get("owner")
            .and_then(Value::as_str)
            .unwrap_or(ADMIN_OWNER)
            .to_string(),
    };
    let mut extra = std::collections::BTreeMap::new();
    for key in OPTIONAL_KEYS {
        if matches!(key, "description" | "tags") {
            continue;
        }
        if let Some(v) = obj.get(key) {
            extra.insert(key.to_string(), v.clone());
        }
    }
    let tags = match obj.get("tags") {
        None | Some(Value::Null) => None,
        Some(Value::Object(t)) => Some(t.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        Some(_) => return Err(validation_failed("tags", "Invalid", "must be an object")),
    };
    Ok(ImageManifest {
        v: 2,
        uuid,
        owner,
        name: s("name"),
        version: s("version"),
        state: ImageState::Unactivated,
        disabled: obj
            .get("disabled")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        public,
        published_at: None,
        image_type: s("type"),
        os: s("os"),
        files: Vec::new(),
        description: obj
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        tags,
        channels: None,
        extra,
    })
}

/// The channel new images go into: the request's, else the default.
fn create_channels(store: &ImgapiStore, q: &[(String, String)]) -> Result<Vec<String>, Response> {
    Ok(request_channel(store, q)?.into_iter().collect())
}

async fn create_image(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let q = parse_query(rq.as_deref());
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return rest_error(
            STYLE,
            StatusCode::BAD_REQUEST,
            "InvalidContent",
            "invalid JSON body",
        );
    };
    let mut store = svc.lock();
    let manifest = match manifest_from_body(&body, ImageUuid::new_v4(), store.mode) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let channels = match create_channels(&store, &q) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let img = StoredImage {
        manifest,
        activated: false,
        channels,
        file: None,
    };
    let out = store.serialize(&img, v, false);
    store.images.insert(img.manifest.uuid, img);
    // CreateImage answers 200, not 201 (§1.7).
    manifest_response(StatusCode::OK, &out)
}

async fn image_action(
    State(svc): Svc,
    Path(raw): Path<String>,
    ApiVersion { major: v, .. }: Version,
    uri: Uri,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let uuid = match image_uuid(&raw, uri.path()) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let q = parse_query(rq.as_deref());
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(_) => {
                return rest_error(
                    STYLE,
                    StatusCode::BAD_REQUEST,
                    "InvalidContent",
                    "invalid JSON body",
                );
            }
        }
    };
    let action = query_get(&q, "action").unwrap_or("").to_string();
    match action.as_str() {
        "import" if query_get(&q, "source").is_some() => {
            import_from_source(&svc, uuid, &q, v).await
        }
        "import" => import_manifest(&svc, uuid, &q, &body, v),
        "activate" | "enable" | "disable" | "update" | "channel-add" => {
            simple_action(&svc, uuid, &action, &q, &body, v)
        }
        "" => rest_error_fields(
            STYLE,
            StatusCode::UNPROCESSABLE_ENTITY,
            "InvalidParameter",
            "no \"action\" was specified",
            json!([{"field": "action", "code": "MissingParameter"}]),
        ),
        other => rest_error_fields(
            STYLE,
            StatusCode::UNPROCESSABLE_ENTITY,
            "InvalidParameter",
            format!("\"{other}\" is not a valid action"),
            json!([{"field": "action", "code": "Invalid"}]),
        ),
    }
}

fn simple_action(
    svc: &ImgapiService,
    uuid: ImageUuid,
    action: &str,
    q: &[(String, String)],
    body: &Value,
    v: u64,
) -> Response {
    let mut store = svc.lock();
    let uses_channels = store.uses_channels();
    let known_channel = |c: &str| store.has_channel(c);
    if action == "channel-add" {
        // Pretend the endpoint does not exist without channels.
        if !uses_channels {
            return rest_error_fields(
                STYLE,
                StatusCode::UNPROCESSABLE_ENTITY,
                "InvalidParameter",
                "\"channel-add\" is not a valid action",
                json!([{"field": "action", "code": "Invalid"}]),
            );
        }
        let name = body.get("channel").and_then(Value::as_str).unwrap_or("");
        if !known_channel(name) {
            return rest_error_fields(
                STYLE,
                StatusCode::UNPROCESSABLE_ENTITY,
                "ValidationFailed",
                format!("unknown channel: {name}"),
                json!([{"field": "channel", "code": "Invalid"}]),
            );
        }
    }
    if let Err(r) = find_image(&store, uuid, q) {
        return r;
    }
    let clock = svc.clock.clone();
    let Some(img) = store.images.get_mut(&uuid) else {
        return not_found(uuid);
    };
    match action {
        "activate" => {
            if img.activated {
                return rest_error(
                    STYLE,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "ImageAlreadyActivated",
                    format!("image \"{uuid}\" is already activated"),
                );
            }
            if img.file.is_none() {
                return rest_error(
                    STYLE,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "NoActivationNoFile",
                    format!("image \"{uuid}\" cannot be activated: it has no file"),
                );
            }
            // Imported images keep their published_at.
            if img.manifest.published_at.is_none() {
                img.manifest.published_at = Some(clock.next());
            }
            img.activated = true;
        }
        "enable" => img.manifest.disabled = false,
        "disable" => img.manifest.disabled = true,
        "update" => {
            if let Some(obj) = body.as_object() {
                for (k, val) in obj {
                    match k.as_str() {
                        "description" => {
                            img.manifest.description = val.as_str().map(str::to_string)
                        }
                        "version" => {
                            if let Some(s) = val.as_str() {
                                img.manifest.version = s.to_string()
                            }
                        }
                        "public" => img.manifest.public = val.as_bool().unwrap_or(false),
                        "tags" => {
                            img.manifest.tags = val
                                .as_object()
                                .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                        }
                        _ => {
                            img.manifest.extra.insert(k.clone(), val.clone());
                        }
                    }
                }
            }
        }
        "channel-add" => {
            let name = body
                .get("channel")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if !img.channels.contains(&name) {
                img.channels.push(name);
            }
        }
        _ => {}
    }
    let img = img.clone();
    let out = store.serialize(&img, v, false);
    manifest_response(StatusCode::OK, &out)
}

fn import_manifest(
    svc: &ImgapiService,
    uuid: ImageUuid,
    q: &[(String, String)],
    body: &Value,
    v: u64,
) -> Response {
    if query_get(q, "account").is_some() {
        return operator_only();
    }
    let body_uuid = body.get("uuid").and_then(Value::as_str).unwrap_or("");
    if body_uuid != uuid.to_string() {
        return invalid_param(
            format!("URL UUID, \"{uuid}\" and body UUID, \"{body_uuid}\" do not match"),
            "uuid",
        );
    }
    let mut store = svc.lock();
    if store.images.contains_key(&uuid) {
        return already_exists(uuid);
    }
    let mut manifest = match manifest_from_body(body, uuid, store.mode) {
        Ok(m) => m,
        Err(r) => return r,
    };
    manifest.published_at = body
        .get("published_at")
        .and_then(Value::as_str)
        .map(str::to_string);
    let channels = match create_channels(&store, q) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let img = StoredImage {
        manifest,
        activated: false,
        channels,
        file: None,
    };
    let out = store.serialize(&img, v, false);
    store.images.insert(uuid, img);
    manifest_response(StatusCode::OK, &out)
}

fn operator_only() -> Response {
    rest_error(
        STYLE,
        StatusCode::FORBIDDEN,
        "OperatorOnly",
        "this endpoint may only be called by an operator",
    )
}

fn already_exists(uuid: ImageUuid) -> Response {
    rest_error(
        STYLE,
        StatusCode::CONFLICT,
        "ImageUuidAlreadyExists",
        format!("image uuid \"{uuid}\" already exists"),
    )
}

fn remote_error(what: &str, uuid: ImageUuid, err: impl std::fmt::Display) -> Response {
    rest_error(
        STYLE,
        StatusCode::SERVICE_UNAVAILABLE,
        "RemoteSourceError",
        format!("Unable to get {what} for image {uuid}. Error from remote: {err}"),
    )
}

/// AdminImportImage with `source=`: copy the manifest from another IMGAPI
/// (the file follows with AddImageFile `source=`, then ActivateImage).
async fn import_from_source(
    svc: &ImgapiService,
    uuid: ImageUuid,
    q: &[(String, String)],
    v: u64,
) -> Response {
    if query_get(q, "account").is_some() {
        return operator_only();
    }
    let source = query_get(q, "source").unwrap_or("").to_string();
    let client = match svc.source_client(&source) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let remote = match client.get_image(uuid).await {
        Ok(m) => m,
        Err(e) => return remote_error("manifest", uuid, e),
    };
    let mut store = svc.lock();
    if store.images.contains_key(&uuid) {
        return already_exists(uuid);
    }
    let channels = match create_channels(&store, q) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let mut manifest = remote.clone();
    manifest.channels = None;
    manifest.files = Vec::new();
    if store.mode == ImgapiMode::Private {
        manifest.owner = ADMIN_OWNER.to_string();
    }
    let img = StoredImage {
        manifest,
        activated: false,
        channels,
        file: None,
    };
    let out = store.serialize(&img, v, false);
    store.images.insert(uuid, img);
    manifest_response(StatusCode::OK, &out)
}

async fn add_file(
    State(svc): Svc,
    Path(raw): Path<String>,
    ApiVersion { major: v, .. }: Version,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let uuid = match image_uuid(&raw, uri.path()) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let q = parse_query(rq.as_deref());
    {
        let store = svc.lock();
        let img = match find_image(&store, uuid, &q) {
            Ok(i) => i,
            Err(r) => return r,
        };
        if img.activated {
            return rest_error(
                STYLE,
                StatusCode::UNPROCESSABLE_ENTITY,
                "ImageFilesImmutable",
                format!("cannot modify files on activated image {uuid}"),
            );
        }
    }
    let file = if let Some(source) = query_get(&q, "source") {
        match file_from_source(&svc, uuid, source).await {
            Ok(f) => f,
            Err(r) => return r,
        }
    } else {
        let compression = match query_get(&q, "compression") {
            None | Some("") => {
                return rest_error_fields(
                    STYLE,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "InvalidParameter",
                    "missing \"compression\"",
                    json!([{"field": "compression", "code": "Missing"}]),
                );
            }
            Some(c) => match serde_json::from_value::<Compression>(json!(c)) {
                Ok(c) => c,
                Err(_) => {
                    return invalid_param(
                        format!(
                            "invalid compression \"{c}\" (must be one of bzip2, gzip, xz, none)"
                        ),
                        "compression",
                    );
                }
            },
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if let Some(n) = declared.filter(|n| *n != body.len()) {
            return rest_error(
                STYLE,
                StatusCode::BAD_REQUEST,
                "Download",
                format!(
                    "\"Content-Length\" header, {n}, does not match uploaded size, {}",
                    body.len()
                ),
            );
        }
        let file = StoredFile::new(body, compression);
        if let Some(want) = query_get(&q, "sha1").filter(|s| *s != file.sha1) {
            return rest_error(
                STYLE,
                StatusCode::BAD_REQUEST,
                "Download",
                format!(
                    "\"sha1\" hash, {want}, does not match the uploaded file sha1 hash, {}",
                    file.sha1
                ),
            );
        }
        file
    };
    let mut store = svc.lock();
    let Some(img) = store.images.get_mut(&uuid) else {
        return not_found(uuid);
    };
    img.file = Some(file);
    let img = img.clone();
    let out = store.serialize(&img, v, false);
    manifest_response(StatusCode::OK, &out)
}

/// AddImageFile `source=`: fetch the file from another IMGAPI and check it
/// against that IMGAPI's manifest.
async fn file_from_source(
    svc: &ImgapiService,
    uuid: ImageUuid,
    source: &str,
) -> Result<StoredFile, Response> {
    let client = svc.source_client(source)?;
    let manifest = client
        .get_image(uuid)
        .await
        .map_err(|e| remote_error("manifest", uuid, e))?;
    let want = manifest
        .file()
        .cloned()
        .ok_or_else(|| remote_error("stream", uuid, "image has no file"))?;
    let download = client
        .get_image_file(uuid)
        .await
        .map_err(|e| remote_error("stream", uuid, e))?;
    let bytes = download
        .response
        .bytes()
        .await
        .map_err(|e| remote_error("stream", uuid, e))?;
    if bytes.len() as u64 != want.size {
        return Err(rest_error(
            STYLE,
            StatusCode::BAD_REQUEST,
            "Download",
            format!(
                "\"Content-Length\" header, {}, does not match uploaded size, {}",
                want.size,
                bytes.len()
            ),
        ));
    }
    let file = StoredFile::new(bytes, want.compression);
    if file.sha1 != want.sha1 {
        return Err(rest_error(
            STYLE,
            StatusCode::BAD_REQUEST,
            "Download",
            format!(
                "\"sha1\" hash, {}, does not match the uploaded file sha1 hash, {}",
                want.sha1, file.sha1
            ),
        ));
    }
    Ok(file)
}

async fn delete_image(
    State(svc): Svc,
    Path(raw): Path<String>,
    uri: Uri,
    RawQuery(rq): RawQuery,
) -> Response {
    let uuid = match image_uuid(&raw, uri.path()) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let q = parse_query(rq.as_deref());
    let mut store = svc.lock();
    if !store.images.contains_key(&uuid) {
        return not_found(uuid);
    }
    let force_all = query_get(&q, "force_all_channels") == Some("true");
    let channel = if store.uses_channels() && !force_all {
        match request_channel(&store, &q) {
            Ok(c) => c,
            Err(r) => return r,
        }
    } else {
        None
    };
    let remove_all = match (&channel, store.images.get_mut(&uuid)) {
        (Some(c), Some(img)) => {
            if !img.channels.contains(c) {
                return rest_error(
                    STYLE,
                    StatusCode::NOT_FOUND,
                    "ResourceNotFound",
                    "image not found",
                );
            }
            img.channels.retain(|x| x != c);
            img.channels.is_empty()
        }
        _ => true,
    };
    if remove_all {
        store.images.remove(&uuid);
    }
    super::http::empty(StatusCode::NO_CONTENT)
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

    #[test]
    fn string_filters() {
        assert!(str_match("~agent", "cn-agent"));
        assert!(!str_match("~Agent", "cn-agent"));
        assert!(str_match("cn-agent", "cn-agent"));
        assert!(!str_match("cn", "cn-agent"));
        assert_eq!(tag_search_value(&json!(true)), "true");
        assert_eq!(tag_search_value(&json!("true")), "true");
    }
}
