//! Creating images: CreateImage and AdminImportImage (a manifest in the
//! body, or copied from another IMGAPI with `source=`), and the manifest
//! validation both share.

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::ids::ImageUuid;
use crate::image::{ADMIN_OWNER, ImageManifest, ImageState};
use crate::sim::http::{ApiVersion, parse_query, query_get, rest_error, rest_error_fields};

use super::store::{ImgapiMode, ImgapiService, ImgapiStore, OPTIONAL_KEYS, StoredImage};
use super::{STYLE, Svc, Version, invalid_param, manifest_response, remote_error, request_channel};

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

pub(super) async fn create_image(
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

pub(super) fn import_manifest(
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

/// AdminImportImage with `source=`: copy the manifest from another IMGAPI
/// (the file follows with AddImageFile `source=`, then ActivateImage).
pub(super) async fn import_from_source(
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
