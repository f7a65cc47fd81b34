//! IMGAPI's image routes that read or drop images: ListImages (filters,
//! ordering, marker, limit), GetImage (with `If-None-Match`) and
//! DeleteImage (per channel on a server with channels).

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::http::ApiVersion;
use crate::http::empty;
use crate::http::json_response;
use crate::http::parse_query;
use crate::http::query_get;
use crate::http::rest_error;
use agentsadm_types::ids::ImageUuid;

use super::store::ImgapiMode;

use super::store::StoredImage;

use super::STYLE;
use super::Svc;
use super::Version;
use super::find_image;
use super::image_uuid;
use super::invalid_param;
use super::manifest_etag;
use super::manifest_response;
use super::not_found;
use super::request_channel;
use super::store::iso_millis;

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

pub(super) async fn list_images(
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

pub(super) async fn get_image(
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

pub(super) async fn delete_image(
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
    empty(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
