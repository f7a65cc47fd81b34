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
//!
//! Modules: `store` (images, files, serialization, the publish clock),
//! `images` (list, get, delete), `create` (create and import), `actions`
//! (the `action=` dispatch), `files` (image files); this file has the
//! router and the lookups and error answers they share.

mod actions;
mod create;
mod files;
mod images;
mod store;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use crate::http::ApiStyle;
use crate::http::ApiVersion;
use crate::http::JsonStyle;
use crate::http::bad_method;
use crate::http::json_response;
use crate::http::not_found_route;
use crate::http::query_get;
use crate::http::rest_error;
use crate::http::rest_error_fields;
use agentsadm_types::ids::ImageUuid;

pub use self::store::{ImgapiMode, ImgapiStore, PublishClock, StoredFile, StoredImage};
pub(crate) use self::store::{ImgapiService, iso_millis};

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

/// The router of one IMGAPI.
pub(crate) fn router(svc: Arc<ImgapiService>) -> Router {
    Router::new()
        .route("/ping", get(ping))
        .route("/channels", get(list_channels))
        .route(
            "/images",
            get(images::list_images).post(create::create_image),
        )
        .route(
            "/images/{uuid}",
            get(images::get_image)
                .post(actions::image_action)
                .delete(images::delete_image),
        )
        .route(
            "/images/{uuid}/file",
            get(files::get_file)
                .put(files::add_file)
                .head(files::head_file)
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

fn remote_error(what: &str, uuid: ImageUuid, err: impl std::fmt::Display) -> Response {
    rest_error(
        STYLE,
        StatusCode::SERVICE_UNAVAILABLE,
        "RemoteSourceError",
        format!("Unable to get {what} for image {uuid}. Error from remote: {err}"),
    )
}
