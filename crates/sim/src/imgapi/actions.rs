//! UpdateImage's `action=` dispatch (POST /images/:uuid): activate,
//! enable, disable, update and channel-add here; import goes to
//! [`super::create`].

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use crate::http::ApiVersion;
use crate::http::parse_query;
use crate::http::query_get;
use crate::http::rest_error;
use crate::http::rest_error_fields;
use agentsadm_types::ids::ImageUuid;

use super::create::import_from_source;

use super::STYLE;
use super::Svc;
use super::Version;
use super::create::import_manifest;
use super::find_image;
use super::image_uuid;
use super::manifest_response;
use super::not_found;
use super::store::ImgapiService;

/// The actions that change a stored image in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ImageAction {
    Activate,
    Enable,
    Disable,
    Update,
    ChannelAdd,
}

impl ImageAction {
    fn parse(action: &str) -> Option<ImageAction> {
        match action {
            "activate" => Some(ImageAction::Activate),
            "enable" => Some(ImageAction::Enable),
            "disable" => Some(ImageAction::Disable),
            "update" => Some(ImageAction::Update),
            "channel-add" => Some(ImageAction::ChannelAdd),
            _ => None,
        }
    }
}

pub(super) async fn image_action(
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
    let action = query_get(&q, "action").unwrap_or("");
    if let Some(action) = ImageAction::parse(action) {
        return simple_action(&svc, uuid, action, &q, &body, v);
    }
    match action {
        "import" if query_get(&q, "source").is_some() => {
            import_from_source(&svc, uuid, &q, v).await
        }
        "import" => import_manifest(&svc, uuid, &q, &body, v),
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
    action: ImageAction,
    q: &[(String, String)],
    body: &Value,
    v: u64,
) -> Response {
    let mut store = svc.lock();
    let uses_channels = store.uses_channels();
    let known_channel = |c: &str| store.has_channel(c);
    if action == ImageAction::ChannelAdd {
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
        ImageAction::Activate => {
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
        ImageAction::Enable => img.manifest.disabled = false,
        ImageAction::Disable => img.manifest.disabled = true,
        ImageAction::Update => {
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
        ImageAction::ChannelAdd => {
            let name = body
                .get("channel")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if !img.channels.contains(&name) {
                img.channels.push(name);
            }
        }
    }
    let img = img.clone();
    let out = store.serialize(&img, v, false);
    manifest_response(StatusCode::OK, &out)
}
