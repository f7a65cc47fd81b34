//! SAPI's application routes: ListApplications, CreateApplication,
//! GetApplication, UpdateApplication and DeleteApplication. Creating or
//! updating an application that has a `metadata_schema` validates its
//! `metadata` against it (`model.js`), filling in the schema's defaults.

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value};

use crate::http::Conn;
use crate::http::empty;
use crate::http::json_response;
use crate::http::parse_query;
use crate::http::query_get;
use crate::http::rest_error;
use agentsadm_api::sapi::Application;
use agentsadm_types::ids::ApplicationUuid;

use super::Params;

use super::STYLE;

use super::Svc;

use super::action_or_answer;

use super::apply_change;

use super::missing_keys;

use super::no_record;

use super::not_found;

use super::obj_field;

use super::schema;

/// SAPI's 409 for metadata its application's schema refuses.
fn schema_error(message: String) -> Response {
    rest_error(
        STYLE,
        StatusCode::CONFLICT,
        "SchemaValidationError",
        message,
    )
}

/// Check (and complete with defaults) `metadata` against the application's
/// `metadata_schema`, if it has one.
fn check_schema(extra: &Map<String, Value>, metadata: Option<&mut Value>) -> Result<(), Response> {
    match extra.get("metadata_schema") {
        Some(s) => match schema::validate(s, metadata) {
            Some(message) => Err(schema_error(message)),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

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

pub(super) async fn create_application(
    State(svc): Svc,
    ConnectInfo(conn): ConnectInfo<Conn>,
    Params(p): Params,
) -> Response {
    let missing: Vec<&str> = ["name", "owner_uuid"]
        .into_iter()
        .filter(|k| p.get(*k).is_none())
        .collect();
    if !missing.is_empty() {
        return missing_keys(&missing);
    }
    // model.createApplication asserts these; a failed assertion throws.
    let bad_type = ["name", "owner_uuid"]
        .into_iter()
        .any(|k| !p[k].is_string())
        || ["params", "metadata", "metadata_schema", "manifests"]
            .into_iter()
            .any(|k| p.get(k).is_some_and(|v| !v.is_null() && !v.is_object()))
        || p.get("master")
            .is_some_and(|v| !v.is_null() && !v.is_boolean());
    if bad_type {
        return svc.crash(
            &conn,
            "CreateApplication with an argument of the wrong type",
        );
    }
    let uuid = p
        .get("uuid")
        .and_then(Value::as_str)
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(ApplicationUuid::new_v4);
    let mut extra = Map::new();
    for key in ["metadata_schema", "manifests", "master"] {
        if let Some(v) = p.get(key).filter(|v| !v.is_null()) {
            extra.insert(key.to_string(), v.clone());
        }
    }
    let mut metadata = p.get("metadata").filter(|m| m.is_object()).cloned();
    if let Err(r) = check_schema(&extra, metadata.as_mut()) {
        return r;
    }
    let app = Application {
        uuid,
        name: p["name"].as_str().unwrap_or_default().to_string(),
        owner_uuid: p["owner_uuid"].as_str().unwrap_or_default().to_string(),
        params: obj_field(&p, "params").unwrap_or_default(),
        metadata: match metadata {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        },
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
    ConnectInfo(conn): ConnectInfo<Conn>,
    Params(p): Params,
) -> Response {
    let action = match action_or_answer(&svc, &conn, &p) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let mut store = svc.lock();
    let Some(stored) = store
        .applications
        .iter_mut()
        .find(|a| a.uuid.to_string() == uuid)
    else {
        return no_record("sapi_applications", &uuid);
    };
    // Changed on a copy: a change the schema refuses stores nothing.
    let mut app = stored.clone();
    let mut params = Some(std::mem::take(&mut app.params));
    apply_change(&mut params, p.get("params"), action);
    app.params = params.unwrap_or_default();
    let mut metadata = Some(std::mem::take(&mut app.metadata));
    apply_change(&mut metadata, p.get("metadata"), action);
    for key in ["metadata_schema", "manifests"] {
        let mut cur = app.extra.get(key).and_then(Value::as_object).cloned();
        apply_change(&mut cur, p.get(key), action);
        match cur {
            Some(c) => app.extra.insert(key.to_string(), Value::Object(c)),
            None => app.extra.remove(key),
        };
    }
    let mut metadata = Value::Object(metadata.unwrap_or_default());
    if let Err(r) = check_schema(&app.extra, Some(&mut metadata)) {
        return r;
    }
    if let Value::Object(m) = metadata {
        app.metadata = m;
    }
    if let Some(o) = p.get("owner_uuid").filter(|o| super::truthy(o)) {
        app.owner_uuid = match o {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    *stored = app.clone();
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
