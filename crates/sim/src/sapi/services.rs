//! SAPI's service routes: ListServices (v1 clients see `type=vm` only),
//! CreateService, GetService, UpdateService and DeleteService.

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use agentsadm_api::sapi::Service;

use crate::http::ApiVersion;
use crate::http::Conn;
use crate::http::empty;
use crate::http::json_response;
use crate::http::parse_query;
use crate::http::plain_error;
use crate::http::query_get;
use agentsadm_api::sapi::ServiceType;
use agentsadm_types::ids::ApplicationUuid;
use agentsadm_types::ids::ServiceUuid;

use super::Params;

use super::STYLE;

use super::Svc;

use super::Version;

use super::action_or_answer;

use super::apply_change;

use super::missing_keys;

use super::no_record;

use super::not_found;

use super::obj_field;

use super::type_str;

/// A service as serialized for this API version.
fn ser_service(s: &Service, v: u64) -> Service {
    let mut s = s.clone();
    if v < 2 {
        s.service_type = None;
    }
    s
}

fn parse_type(v: Option<&Value>) -> Result<ServiceType, Response> {
    match v.and_then(Value::as_str) {
        None => Ok(ServiceType::Vm),
        Some("vm") => Ok(ServiceType::Vm),
        Some("agent") => Ok(ServiceType::Agent),
        Some(other) => Err(plain_error(
            STYLE,
            format!("service type is invalid: {other}"),
        )),
    }
}

pub(super) async fn list_services(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    RawQuery(rq): RawQuery,
) -> Response {
    let q = parse_query(rq.as_deref());
    // v1 clients get an implicit type=vm; an explicit type overrides it.
    let type_filter = match query_get(&q, "type") {
        Some(t) => Some(t.to_string()),
        None if v < 2 => Some("vm".to_string()),
        None => None,
    };
    let store = svc.lock();
    let out: Vec<Service> = store
        .services
        .iter()
        .filter(|s| query_get(&q, "name").is_none_or(|n| s.name == n))
        .filter(|s| {
            query_get(&q, "application_uuid").is_none_or(|a| s.application_uuid.to_string() == a)
        })
        .filter(|s| {
            type_filter
                .as_deref()
                .is_none_or(|t| type_str(s.service_type) == t)
        })
        .map(|s| ser_service(s, v))
        .collect();
    json_response(STYLE, StatusCode::OK, &out)
}

pub(super) async fn create_service(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    Params(p): Params,
) -> Response {
    let missing: Vec<&str> = ["name", "application_uuid"]
        .into_iter()
        .filter(|k| !p.get(*k).is_some_and(Value::is_string))
        .collect();
    if !missing.is_empty() {
        return missing_keys(&missing);
    }
    let service_type = match parse_type(p.get("type")) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let app_raw = p["application_uuid"].as_str().unwrap_or_default();
    let mut store = svc.lock();
    let Some(app_uuid) = app_raw
        .parse::<ApplicationUuid>()
        .ok()
        .filter(|a| store.application(*a).is_some())
    else {
        return not_found("application", app_raw);
    };
    let uuid = p
        .get("uuid")
        .and_then(Value::as_str)
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(ServiceUuid::new_v4);
    let service = Service {
        uuid,
        name: p["name"].as_str().unwrap_or_default().to_string(),
        application_uuid: app_uuid,
        params: obj_field(&p, "params"),
        metadata: obj_field(&p, "metadata"),
        manifests: obj_field(&p, "manifests"),
        master: p.get("master").and_then(Value::as_bool),
        service_type: Some(service_type),
    };
    store.services.retain(|s| s.uuid != uuid);
    store.services.push(service.clone());
    json_response(STYLE, StatusCode::OK, &ser_service(&service, v))
}

pub(super) async fn get_service(
    State(svc): Svc,
    Path(uuid): Path<String>,
    ApiVersion { major: v, .. }: Version,
) -> Response {
    let store = svc.lock();
    match store.services.iter().find(|s| s.uuid.to_string() == uuid) {
        Some(s) => json_response(STYLE, StatusCode::OK, &ser_service(s, v)),
        None => not_found("service", &uuid),
    }
}

pub(super) async fn update_service(
    State(svc): Svc,
    Path(uuid): Path<String>,
    ApiVersion { major: v, .. }: Version,
    ConnectInfo(conn): ConnectInfo<Conn>,
    Params(p): Params,
) -> Response {
    let action = match action_or_answer(&svc, &conn, &p) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let mut store = svc.lock();
    let Some(s) = store
        .services
        .iter_mut()
        .find(|s| s.uuid.to_string() == uuid)
    else {
        return no_record("sapi_services", &uuid);
    };
    apply_change(&mut s.params, p.get("params"), action);
    apply_change(&mut s.metadata, p.get("metadata"), action);
    apply_change(&mut s.manifests, p.get("manifests"), action);
    let out = ser_service(s, v);
    json_response(STYLE, StatusCode::OK, &out)
}

pub(super) async fn delete_service(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let mut store = svc.lock();
    let before = store.services.len();
    // Instances of the service are not checked (nor deleted).
    store.services.retain(|s| s.uuid.to_string() != uuid);
    if store.services.len() == before {
        return empty(StatusCode::NOT_FOUND);
    }
    empty(StatusCode::NO_CONTENT)
}
