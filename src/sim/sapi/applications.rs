//! SAPI's application routes: ListApplications, CreateApplication,
//! GetApplication, UpdateApplication and DeleteApplication.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value};

use crate::api::sapi::Application;
use crate::ids::ApplicationUuid;
use crate::sim::http::{empty, json_response, parse_query, query_get};

use super::{
    Params, STYLE, Svc, apply_change, missing_keys, no_record, not_found, obj_field, update_action,
};

pub(super) async fn list_applications(State(svc): Svc, RawQuery(rq): RawQuery) -> Response {
    let q = parse_query(rq.as_deref());
    let store = svc.lock();
    let apps: Vec<&Application> = store
        .applications
        .iter()
        .filter(|a| query_get(&q, "name").is_none_or(|n| a.name == n))
        .filter(|a| query_get(&q, "owner_uuid").is_none_or(|o| a.owner_uuid == o))
        .collect();
    // An empty list is `[]` (the docs' 404 is wrong).
    json_response(STYLE, StatusCode::OK, &apps)
}

pub(super) async fn create_application(State(svc): Svc, Params(p): Params) -> Response {
    let missing: Vec<&str> = ["name", "owner_uuid"]
        .into_iter()
        .filter(|k| !p.get(*k).is_some_and(Value::is_string))
        .collect();
    if !missing.is_empty() {
        return missing_keys(&missing);
    }
    let uuid = p
        .get("uuid")
        .and_then(Value::as_str)
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(ApplicationUuid::new_v4);
    let mut extra = Map::new();
    for key in ["metadata_schema", "manifests", "master"] {
        if let Some(v) = p.get(key) {
            extra.insert(key.to_string(), v.clone());
        }
    }
    let app = Application {
        uuid,
        name: p["name"].as_str().unwrap_or_default().to_string(),
        owner_uuid: p["owner_uuid"].as_str().unwrap_or_default().to_string(),
        params: obj_field(&p, "params").unwrap_or_default(),
        metadata: obj_field(&p, "metadata").unwrap_or_default(),
        extra,
    };
    let mut store = svc.lock();
    store.applications.retain(|a| a.uuid != uuid);
    store.applications.push(app.clone());
    // CreateApplication answers 200 with the object (the docs say 204).
    json_response(STYLE, StatusCode::OK, &app)
}

pub(super) async fn get_application(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let store = svc.lock();
    match store
        .applications
        .iter()
        .find(|a| a.uuid.to_string() == uuid)
    {
        Some(a) => json_response(STYLE, StatusCode::OK, a),
        None => not_found("application", &uuid),
    }
}

pub(super) async fn update_application(
    State(svc): Svc,
    Path(uuid): Path<String>,
    Params(p): Params,
) -> Response {
    let action = match update_action(&p) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let mut store = svc.lock();
    let Some(app) = store
        .applications
        .iter_mut()
        .find(|a| a.uuid.to_string() == uuid)
    else {
        return no_record("sapi_applications", &uuid);
    };
    let mut params = Some(std::mem::take(&mut app.params));
    apply_change(&mut params, p.get("params"), action);
    app.params = params.unwrap_or_default();
    let mut metadata = Some(std::mem::take(&mut app.metadata));
    apply_change(&mut metadata, p.get("metadata"), action);
    app.metadata = metadata.unwrap_or_default();
    for key in ["metadata_schema", "manifests"] {
        let mut cur = app.extra.get(key).and_then(Value::as_object).cloned();
        apply_change(&mut cur, p.get(key), action);
        match cur {
            Some(c) => app.extra.insert(key.to_string(), Value::Object(c)),
            None => app.extra.remove(key),
        };
    }
    if let Some(o) = p.get("owner_uuid").and_then(Value::as_str) {
        app.owner_uuid = o.to_string();
    }
    let app = app.clone();
    json_response(STYLE, StatusCode::OK, &app)
}

pub(super) async fn delete_application(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let mut store = svc.lock();
    let before = store.applications.len();
    store.applications.retain(|a| a.uuid.to_string() != uuid);
    if store.applications.len() == before {
        return empty(StatusCode::NOT_FOUND);
    }
    empty(StatusCode::NO_CONTENT)
}
